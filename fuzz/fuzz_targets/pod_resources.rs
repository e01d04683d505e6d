//! kubelet's PodResources replies (podresources/src/v1.rs, protobuf): any
//! bytes as a `List` or `Get` answer must decode or give an error, and a
//! decoded pod must give its devices (src/plan/devices.rs `assign`) or an error,
//! never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus::plan::devices::assign;
use plexus::plan::devices::podresources::client::pod_of;
use plexus::plan::devices::podresources::v1::{GetPodResourcesResponse, ListPodResourcesResponse};
use prost::Message;

/// Resources a pod's networks may ask for, repeated as several attachments
/// of one resource do.
const RESOURCES: [&str; 4] = ["intel.com/sriov", "intel.com/sriov", "mellanox.com/ib", ""];

fuzz_target!(|data: &[u8]| {
    if let Ok(list) = ListPodResourcesResponse::decode(data) {
        if let Ok(pod) = pod_of(list.pod_resources, "default", "pod") {
            let _ = assign(&pod, &RESOURCES);
        }
    }
    if let Ok(get) = GetPodResourcesResponse::decode(data) {
        if let Some(pod) = get.pod_resources {
            let _ = assign(&pod, &RESOURCES);
        }
    }
});
