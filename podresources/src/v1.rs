//! The messages of kubelet's PodResources API v1 (package `v1`, service
//! `PodResourcesLister`), generated from `proto/podresources_v1.proto`,
//! which has kubelet's field numbers and types: the wire format kubelet
//! speaks.

/// The gRPC service every method path starts with.
pub const SERVICE: &str = "v1.PodResourcesLister";
/// `rpc List(ListPodResourcesRequest) returns (ListPodResourcesResponse)`.
pub const LIST_PATH: &str = "/v1.PodResourcesLister/List";
/// `rpc Get(GetPodResourcesRequest) returns (GetPodResourcesResponse)`:
/// kubelet 1.27+ behind the `KubeletPodResourcesGet` feature gate (on by
/// default from 1.34).
pub const GET_PATH: &str = "/v1.PodResourcesLister/Get";

include!(concat!(env!("OUT_DIR"), "/v1.rs"));

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
