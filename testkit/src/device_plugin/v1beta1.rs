//! kubelet's device-plugin API v1beta1: its method paths, and the messages
//! generated from `podresources/proto/deviceplugin_v1beta1.proto` (kubelet's
//! field numbers and types). Fields kubelet 1.20 does not know (CDI devices,
//! 1.28+) are left out.

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

pub use plexus_podresources::deviceplugin_v1beta1::*;
/// `TopologyInfo` and `NUMANode` are the PodResources API's, field for field.
pub use plexus_podresources::v1::{NumaNode, TopologyInfo};

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
