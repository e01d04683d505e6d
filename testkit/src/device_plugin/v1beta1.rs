//! The messages of kubelet's device-plugin API v1beta1, written out from
//! `k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto` (package
//! `v1beta1`) with the same field numbers and types: the wire format
//! kubelet speaks. Written by hand, as `plexus_podresources::v1` is: no
//! `protoc`, no build script. Fields kubelet 1.20 does not know (CDI
//! devices, 1.28+) are left out.

/// `RegisterRequest.version`: the API version kubelet accepts.
pub const VERSION: &str = "v1beta1";
/// kubelet's registration service, which a device plugin calls.
pub const REGISTER_PATH: &str = "/v1beta1.Registration/Register";
/// The device plugin's service, which kubelet calls.
pub const GET_DEVICE_PLUGIN_OPTIONS_PATH: &str = "/v1beta1.DevicePlugin/GetDevicePluginOptions";
pub const LIST_AND_WATCH_PATH: &str = "/v1beta1.DevicePlugin/ListAndWatch";
pub const GET_PREFERRED_ALLOCATION_PATH: &str = "/v1beta1.DevicePlugin/GetPreferredAllocation";
pub const ALLOCATE_PATH: &str = "/v1beta1.DevicePlugin/Allocate";
pub const PRE_START_CONTAINER_PATH: &str = "/v1beta1.DevicePlugin/PreStartContainer";
/// `Device.health` of a usable device.
pub const HEALTHY: &str = "Healthy";

#[derive(Clone, PartialEq, prost::Message)]
pub struct DevicePluginOptions {
    #[prost(bool, tag = "1")]
    pub pre_start_required: bool,
    #[prost(bool, tag = "2")]
    pub get_preferred_allocation_available: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterRequest {
    #[prost(string, tag = "1")]
    pub version: String,
    /// The plugin's socket, a file name in kubelet's device-plugins directory.
    #[prost(string, tag = "2")]
    pub endpoint: String,
    #[prost(string, tag = "3")]
    pub resource_name: String,
    #[prost(message, optional, tag = "4")]
    pub options: Option<DevicePluginOptions>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

/// The devices, sent again whenever one changes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListAndWatchResponse {
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<Device>,
}

/// `TopologyInfo` and `NUMANode` are the PodResources API's, field for field.
pub use plexus_podresources::v1::{NumaNode, TopologyInfo};

#[derive(Clone, PartialEq, prost::Message)]
pub struct Device {
    /// `string ID = 1`: what kubelet allocates and PodResources reports.
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub health: String,
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PreStartContainerRequest {
    /// `repeated string devicesIDs = 1`.
    #[prost(string, repeated, tag = "1")]
    pub devices_ids: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PreStartContainerResponse {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PreferredAllocationRequest {
    #[prost(message, repeated, tag = "1")]
    pub container_requests: Vec<ContainerPreferredAllocationRequest>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerPreferredAllocationRequest {
    /// `repeated string available_deviceIDs = 1`.
    #[prost(string, repeated, tag = "1")]
    pub available_device_ids: Vec<String>,
    /// `repeated string must_include_deviceIDs = 2`.
    #[prost(string, repeated, tag = "2")]
    pub must_include_device_ids: Vec<String>,
    #[prost(int32, tag = "3")]
    pub allocation_size: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PreferredAllocationResponse {
    #[prost(message, repeated, tag = "1")]
    pub container_responses: Vec<ContainerPreferredAllocationResponse>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerPreferredAllocationResponse {
    /// `repeated string deviceIDs = 1`.
    #[prost(string, repeated, tag = "1")]
    pub device_ids: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AllocateRequest {
    #[prost(message, repeated, tag = "1")]
    pub container_requests: Vec<ContainerAllocateRequest>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerAllocateRequest {
    /// `repeated string devicesIDs = 1`.
    #[prost(string, repeated, tag = "1")]
    pub devices_ids: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AllocateResponse {
    #[prost(message, repeated, tag = "1")]
    pub container_responses: Vec<ContainerAllocateResponse>,
}

/// What the container gets for its devices: environment, mounts, device
/// nodes, annotations for the runtime.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerAllocateResponse {
    #[prost(map = "string, string", tag = "1")]
    pub envs: std::collections::HashMap<String, String>,
    #[prost(message, repeated, tag = "2")]
    pub mounts: Vec<Mount>,
    #[prost(message, repeated, tag = "3")]
    pub devices: Vec<DeviceSpec>,
    #[prost(map = "string, string", tag = "4")]
    pub annotations: std::collections::HashMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Mount {
    #[prost(string, tag = "1")]
    pub container_path: String,
    #[prost(string, tag = "2")]
    pub host_path: String,
    #[prost(bool, tag = "3")]
    pub read_only: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DeviceSpec {
    #[prost(string, tag = "1")]
    pub container_path: String,
    #[prost(string, tag = "2")]
    pub host_path: String,
    #[prost(string, tag = "3")]
    pub permissions: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// Bytes as Go's protobuf encodes them, field by field, so the tags
    /// and wire types are checked against the proto, not against this file.
    #[test]
    fn field_numbers_and_wire_types_are_the_protos() {
        let register = RegisterRequest {
            version: "v".into(),
            endpoint: "e".into(),
            resource_name: "r".into(),
            options: Some(DevicePluginOptions {
                pre_start_required: false,
                get_preferred_allocation_available: true,
            }),
        };
        assert_eq!(
            register.encode_to_vec(),
            [0x0a, 1, b'v', 0x12, 1, b'e', 0x1a, 1, b'r', 0x22, 2, 0x10, 1]
        );
        let device = Device {
            id: "d".into(),
            health: "H".into(),
            topology: Some(TopologyInfo {
                nodes: vec![NumaNode { id: 1 }],
            }),
        };
        assert_eq!(
            device.encode_to_vec(),
            [0x0a, 1, b'd', 0x12, 1, b'H', 0x1a, 4, 0x0a, 2, 0x08, 1]
        );
        let preferred = ContainerPreferredAllocationRequest {
            available_device_ids: vec!["a".into()],
            must_include_device_ids: vec!["m".into()],
            allocation_size: 2,
        };
        assert_eq!(
            preferred.encode_to_vec(),
            [0x0a, 1, b'a', 0x12, 1, b'm', 0x18, 2]
        );
        let allocated = ContainerAllocateResponse {
            envs: [("K".to_string(), "V".to_string())].into(),
            ..Default::default()
        };
        // A map entry is a message {1: key, 2: value}.
        assert_eq!(
            allocated.encode_to_vec(),
            [0x0a, 6, 0x0a, 1, b'K', 0x12, 1, b'V']
        );
        let request = ContainerAllocateRequest {
            devices_ids: vec!["x".into()],
        };
        assert_eq!(request.encode_to_vec(), [0x0a, 1, b'x']);
    }
}
