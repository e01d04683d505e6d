//! The messages of kubelet's PodResources API v1, written out from
//! `k8s.io/kubelet/pkg/apis/podresources/v1/api.proto` (package `v1`,
//! service `PodResourcesLister`) with the same field numbers and types, so
//! they are the wire format kubelet speaks. Written by hand rather than
//! generated: the build needs no `protoc` and no build script.
//!
//! The service's `GetAllocatableResources` (the node's allocatable devices,
//! not a pod's) is left out, with its messages.

/// The gRPC service every method path starts with.
pub const SERVICE: &str = "v1.PodResourcesLister";
/// `rpc List(ListPodResourcesRequest) returns (ListPodResourcesResponse)`.
pub const LIST_PATH: &str = "/v1.PodResourcesLister/List";
/// `rpc Get(GetPodResourcesRequest) returns (GetPodResourcesResponse)`:
/// kubelet 1.27+ behind the `KubeletPodResourcesGet` feature gate (on by
/// default from 1.34).
pub const GET_PATH: &str = "/v1.PodResourcesLister/Get";

/// `ListPodResourcesRequest {}`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesRequest {}

/// The resources of every pod kubelet runs.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

/// One pod, named by `pod_namespace/pod_name`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetPodResourcesRequest {
    #[prost(string, tag = "1")]
    pub pod_name: String,
    #[prost(string, tag = "2")]
    pub pod_namespace: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetPodResourcesResponse {
    #[prost(message, optional, tag = "1")]
    pub pod_resources: Option<PodResources>,
}

/// The node resources assigned to a pod.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
    /// Exclusive CPUs at pod level (containers' own ones included).
    #[prost(int64, repeated, tag = "4")]
    pub cpu_ids: Vec<i64>,
    #[prost(message, repeated, tag = "5")]
    pub memory: Vec<ContainerMemory>,
}

/// The resources assigned to one container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
    #[prost(int64, repeated, tag = "3")]
    pub cpu_ids: Vec<i64>,
    #[prost(message, repeated, tag = "4")]
    pub memory: Vec<ContainerMemory>,
    #[prost(message, repeated, tag = "5")]
    pub dynamic_resources: Vec<DynamicResource>,
}

/// Memory and hugepages assigned to a pod or container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerMemory {
    #[prost(string, tag = "1")]
    pub memory_type: String,
    #[prost(uint64, tag = "2")]
    pub size: u64,
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

/// The devices of one device-plugin resource assigned to a container: for
/// SR-IOV, `device_ids` are the VFs' PCI addresses.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerDevices {
    #[prost(string, tag = "1")]
    pub resource_name: String,
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TopologyInfo {
    #[prost(message, repeated, tag = "1")]
    pub nodes: Vec<NumaNode>,
}

/// `NUMANode`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NumaNode {
    /// `int64 ID = 1`.
    #[prost(int64, tag = "1")]
    pub id: i64,
}

/// Devices assigned to a container by Dynamic Resource Allocation.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DynamicResource {
    // Tag 1 (`class_name`) was removed in Kubernetes 1.31.
    #[prost(string, tag = "2")]
    pub claim_name: String,
    #[prost(string, tag = "3")]
    pub claim_namespace: String,
    #[prost(message, repeated, tag = "4")]
    pub claim_resources: Vec<ClaimResource>,
}

/// One DRA device: driver, pool and device name identify it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClaimResource {
    #[prost(message, repeated, tag = "1")]
    pub cdi_devices: Vec<CdiDevice>,
    #[prost(string, tag = "2")]
    pub driver_name: String,
    #[prost(string, tag = "3")]
    pub pool_name: String,
    #[prost(string, tag = "4")]
    pub device_name: String,
    #[prost(string, optional, tag = "5")]
    pub share_id: Option<String>,
}

/// `CDIDevice`: a fully qualified CDI device name (`vendor.com/gpu=gpu1`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct CdiDevice {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// Bytes as Go's protobuf encodes `PodResources{name: "p", namespace:
    /// "ns", containers: [{name: "c", devices: [{resource_name: "r",
    /// device_ids: ["0000:01:00.2"], topology: {nodes: [{ID: 1}]}}]}]}`,
    /// field by field, so the tags and wire types are checked against the
    /// proto, not against this file.
    #[test]
    fn field_numbers_and_wire_types_are_the_protos() {
        let mut want = Vec::new();
        want.extend([0x0a, 1, b'p']); // 1: name
        want.extend([0x12, 2, b'n', b's']); // 2: namespace
        let mut devices = vec![0x0a, 1, b'r']; // ContainerDevices 1: resource_name
        devices.extend([0x12, 12]); // 2: device_ids
        devices.extend(b"0000:01:00.2");
        devices.extend([0x1a, 4, 0x0a, 2, 0x08, 1]); // 3: topology { 1: nodes { 1: ID } }
        let mut container = vec![0x0a, 1, b'c']; // ContainerResources 1: name
        container.push(0x12); // 2: devices
        container.push(devices.len() as u8);
        container.extend(&devices);
        want.push(0x1a); // 3: containers
        want.push(container.len() as u8);
        want.extend(&container);

        let pod = PodResources {
            name: "p".into(),
            namespace: "ns".into(),
            containers: vec![ContainerResources {
                name: "c".into(),
                devices: vec![ContainerDevices {
                    resource_name: "r".into(),
                    device_ids: vec!["0000:01:00.2".into()],
                    topology: Some(TopologyInfo {
                        nodes: vec![NumaNode { id: 1 }],
                    }),
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(pod.encode_to_vec(), want);
        assert_eq!(PodResources::decode(want.as_slice()).unwrap(), pod);

        let get = GetPodResourcesRequest {
            pod_name: "p".into(),
            pod_namespace: "ns".into(),
        };
        assert_eq!(get.encode_to_vec(), [0x0a, 1, b'p', 0x12, 2, b'n', b's']);
        let claim = ClaimResource {
            share_id: Some(String::new()),
            ..Default::default()
        };
        // proto3 `optional`: present even when empty.
        assert_eq!(claim.encode_to_vec(), [0x2a, 0]);
    }
}
