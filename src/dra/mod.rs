//! Dynamic Resource Allocation (`resource.k8s.io/v1`, Kubernetes 1.34+):
//! network devices claimed through ResourceClaims, handed to the
//! NetworkAttachmentDefinitions that ask for them, under the contract
//! Multus master implements (its `pkg/draclient`):
//!
//! - a DRA driver publishes, in its ResourceSlices, the string attributes
//!   `k8s.cni.cncf.io/deviceID` and `k8s.cni.cncf.io/resourceName` on each
//!   device meant for a network;
//! - the pod's claims are those its own fields name
//!   (`spec.resourceClaims`, `status.resourceClaimStatuses`: [`pod`]), where
//!   the API server keeps them, and in any case those whose
//!   `status.reservedFor` names the pod's uid ([`pods_claims`]);
//! - each device a claim of the pod was allocated
//!   (`status.allocation.devices.results[]`, [`claim`]) is looked up in
//!   the slices of the pod's node by driver, pool and name ([`slice`]);
//!   its two attributes give its device ID and resource name
//!   ([`claimed_devices`]). A device without them (a GPU of the same
//!   claim) is skipped silently; a device in no slice is skipped with a
//!   warning;
//! - the devices join kubelet's device-plugin devices of the same resource
//!   name (`crate::plan::devices`), so a NAD annotated
//!   `k8s.v1.cni.cncf.io/resourceName` gets its `deviceID` as with device
//!   plugins.
//!
//! This module is pure: the objects come in as JSON, read from the API
//! server (thin mode) or the daemon's watch caches by `crate::cluster::dra`.

pub mod claim;
pub mod driver;
mod error;
pub mod pod;
pub mod slice;

use serde_json::Value;

pub use claim::ResourceClaim;
pub use error::DraError;
pub use pod::NamedClaim;
pub use slice::Slices;

/// The API version the contract reads.
pub const API_VERSION: &str = "resource.k8s.io/v1";
/// The API group.
pub const GROUP: &str = "resource.k8s.io";
/// The device attribute that gives a device's ID (a PCI address for a VF),
/// as Multus names it.
pub const DEVICE_ID_ATTRIBUTE: &str = "k8s.cni.cncf.io/deviceID";
/// The device attribute that gives the resource name a NAD's
/// `k8s.v1.cni.cncf.io/resourceName` annotation matches.
pub const RESOURCE_NAME_ATTRIBUTE: &str = "k8s.cni.cncf.io/resourceName";

/// One device a claim of the pod was allocated, published for networks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedDevice {
    pub resource_name: String,
    pub device_id: String,
    /// `ResourceClaim ns/x status.allocation.devices.results[0]`.
    pub from: String,
}

/// The devices of a pod's claims, and why some were skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimedDevices {
    pub devices: Vec<ClaimedDevice>,
    pub warnings: Vec<String>,
}

/// The pod, as its claims are found.
#[derive(Debug, Clone, Copy)]
pub struct PodClaims<'a> {
    /// `namespace/name`, for errors.
    pub pod: &'a str,
    pub uid: Option<&'a str>,
    /// The claims the pod names itself ([`pod::named_claims`]).
    pub named: &'a [NamedClaim],
}

/// The pod's claims out of `claims` (every claim of its namespace): those
/// it names, and those reserved for its uid, by name. A claim of the pod
/// that does not decode, or is not allocated, is an error; so is a claim
/// it names that is not there. Others' claims are not looked at beyond
/// `status.reservedFor`.
pub fn pods_claims(pod: PodClaims, claims: &[Value]) -> Result<Vec<ResourceClaim>, DraError> {
    let mut ours = Vec::new();
    let mut found = vec![false; pod.named.len()];
    for v in claims {
        let name = v.pointer("/metadata/name").and_then(Value::as_str);
        let named = pod.named.iter().position(|n| Some(n.name.as_str()) == name);
        if let Some(i) = named {
            found[i] = true;
        }
        let decoded = ResourceClaim::from_value(v);
        let reserved = match (&decoded, pod.uid) {
            (Ok(c), Some(uid)) => c.reserved_for_pod(uid),
            (Err(_), Some(uid)) => claim::mentions_pod(v, uid),
            (_, None) => false,
        };
        if named.is_none() && !reserved {
            continue;
        }
        let c = decoded?;
        if c.results.is_none() {
            return Err(DraError::object(
                format!("{} {}", claim::KIND, c.key()),
                "status.allocation",
                "required: the claim is the pod's but is not allocated (the scheduler \
                 allocates a claim before it reserves it for a pod)",
            ));
        }
        ours.push(c);
    }
    if let Some((missing, _)) = pod.named.iter().zip(&found).find(|(_, found)| !**found) {
        let namespace = pod.pod.split_once('/').map_or("", |(ns, _)| ns);
        return Err(DraError::ClaimMissing {
            claim: format!("{namespace}/{}", missing.name),
            pod: pod.pod.to_string(),
            field: missing.field.clone(),
        });
    }
    ours.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(ours)
}

/// The devices `claims` were allocated that carry both Multus attributes,
/// found in `slices` (the node's), in claim and result order (the
/// planner sorts them by device ID). A device in no slice of the node is
/// skipped with a warning (Multus's `errDeviceNotInAnySlice`); one without
/// the attributes is not for a network and is skipped silently.
pub fn claimed_devices(
    claims: &[ResourceClaim],
    slices: &Slices,
) -> Result<ClaimedDevices, DraError> {
    let mut out = ClaimedDevices::default();
    for c in claims {
        for (i, result) in c.results.iter().flatten().enumerate() {
            let from = format!(
                "{} {} status.allocation.devices.results[{i}]",
                claim::KIND,
                c.key()
            );
            let (driver, pool, device) = (&result.driver, &result.pool, &result.device);
            let Some(found) = slices.find(driver, pool, device)? else {
                out.warnings.push(format!(
                    "{from}: device {driver}/{pool}/{device} is in no ResourceSlice of the \
                     pod's node; it is not handed to any network"
                ));
                continue;
            };
            let (Some(device_id), Some(resource_name)) = (found.device_id, found.resource_name)
            else {
                tracing::debug!(
                    claim = %c.key(), %driver, %pool, %device,
                    "device without {DEVICE_ID_ATTRIBUTE} and {RESOURCE_NAME_ATTRIBUTE}: \
                     not for a network"
                );
                continue;
            };
            out.devices.push(ClaimedDevice {
                resource_name,
                device_id,
                from,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(name: &str, reserved_for: &[&str], results: Option<Value>) -> Value {
        let reserved: Vec<Value> = reserved_for
            .iter()
            .map(|uid| json!({"resource": "pods", "name": "p", "uid": uid}))
            .collect();
        let mut status = json!({"reservedFor": reserved});
        if let Some(results) = results {
            status["allocation"] = json!({"devices": {"results": results}});
        }
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"name": name, "namespace": "ns"}, "spec": {}, "status": status})
    }

    fn result(device: &str) -> Value {
        json!({"request": "vf", "driver": "sriov.example.com", "pool": "node-a", "device": device})
    }

    fn slice(devices: Value) -> Value {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
               "metadata": {"name": "node-a-sriov"},
               "spec": {"driver": "sriov.example.com", "nodeName": "node-a",
                        "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                        "devices": devices}})
    }

    fn vf(name: &str, id: &str, resource: &str) -> Value {
        json!({"name": name, "attributes": {
            "k8s.cni.cncf.io/deviceID": {"string": id},
            "k8s.cni.cncf.io/resourceName": {"string": resource}}})
    }

    /// [`claimed_devices`] of `claims` from the slices `raw`, all of them.
    fn from_slices(claims: &[ResourceClaim], raw: &[Value]) -> ClaimedDevices {
        claimed_devices(claims, &Slices { raw, node: None }).unwrap()
    }

    const POD: PodClaims = PodClaims {
        pod: "ns/p",
        uid: Some("u-1"),
        named: &[],
    };

    /// Multus's `GetPodResourceMap` "should successfully populate resource
    /// map with device IDs", "should append all device IDs", "should
    /// populate separate resource map entries per network" and "should
    /// populate resource map with all claims sequentially", from
    /// reservedFor as this test kit's API server needs.
    #[test]
    fn the_pods_claims_give_their_devices_attributes() {
        let claims = [
            claim("b", &["u-1"], Some(json!([result("vf-2"), result("vf-3")]))),
            claim("a", &["u-1"], Some(json!([result("vf-1")]))),
            claim("others", &["u-2"], Some(json!([result("vf-4")]))),
            // Not decodable, but not the pod's: no matter.
            json!({"metadata": {"name": "torn", "namespace": "ns"}, "status": 5}),
        ];
        let ours = pods_claims(POD, &claims).unwrap();
        assert_eq!(
            ours.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let raw = [slice(json!([
            vf("vf-1", "0000:3b:02.1", "example.com/vf_a"),
            vf("vf-2", "0000:3b:02.2", "example.com/vf_b"),
            vf("vf-3", "0000:3b:02.3", "example.com/vf_a"),
            vf("vf-4", "0000:3b:02.4", "example.com/vf_a"),
        ]))];
        let got = from_slices(&ours, &raw);
        let pairs: Vec<(&str, &str)> = got
            .devices
            .iter()
            .map(|d| (d.resource_name.as_str(), d.device_id.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("example.com/vf_a", "0000:3b:02.1"),
                ("example.com/vf_b", "0000:3b:02.2"),
                ("example.com/vf_a", "0000:3b:02.3"),
            ]
        );
        assert_eq!(
            got.devices[1].from,
            "ResourceClaim ns/b status.allocation.devices.results[0]"
        );
        assert!(got.warnings.is_empty());
    }

    /// Multus's "should warn and skip the claim without failing" (device
    /// without deviceID; device name in no slice) and "should warn and
    /// skip without failing when nothing maps to a resource name"; "should
    /// succeed when one allocation result is missing from slices but
    /// another resolves".
    #[test]
    fn devices_without_the_attributes_or_in_no_slice_are_skipped() {
        let claims = [claim(
            "mixed",
            &["u-1"],
            Some(json!([
                result("gpu-0"),
                result("id-only"),
                result("gone"),
                result("vf-1")
            ])),
        )];
        let raw = [slice(json!([
            {"name": "gpu-0", "attributes": {"example.com/model": {"string": "x"}}},
            {"name": "id-only", "attributes": {"k8s.cni.cncf.io/deviceID": {"string": "0000:3b:02.9"}}},
            vf("vf-1", "0000:3b:02.1", "example.com/vf_a"),
        ]))];
        let ours = pods_claims(POD, &claims).unwrap();
        let got = from_slices(&ours, &raw);
        assert_eq!(got.devices.len(), 1);
        assert_eq!(got.devices[0].device_id, "0000:3b:02.1");
        assert_eq!(
            got.warnings,
            [
                "ResourceClaim ns/mixed status.allocation.devices.results[2]: device \
              sriov.example.com/node-a/gone is in no ResourceSlice of the pod's node; it is not \
              handed to any network"
            ]
        );
    }

    /// Multus's "should return an error" (claim does not exist) and its
    /// "claim %s has no device allocation".
    #[test]
    fn the_pods_claim_not_allocated_missing_or_malformed_is_an_error() {
        let e = pods_claims(POD, &[claim("x", &["u-1"], None)]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("ResourceClaim ns/x status.allocation: required: "),
            "{e}"
        );
        let named = [NamedClaim {
            name: "mine".into(),
            field: "status.resourceClaimStatuses[0].resourceClaimName".into(),
        }];
        let pod = PodClaims {
            named: &named,
            ..POD
        };
        let e = pods_claims(pod, &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ResourceClaim ns/mine, named by pod ns/p \
             status.resourceClaimStatuses[0].resourceClaimName, does not exist"
        );
        // Named by the pod, though not reserved for it: the pod's.
        let ours = pods_claims(pod, &[claim("mine", &[], Some(json!([])))]).unwrap();
        assert_eq!(ours.len(), 1);
        let mut torn = claim("t", &["u-1"], Some(json!([result("vf-1")])));
        torn["status"]["allocation"]["devices"]["results"][0]["device"] = json!(false);
        let e = pods_claims(POD, &[torn]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ResourceClaim ns/t status.allocation.devices.results[0].device: must be a string, \
             got false"
        );
        // A pod without a uid has only the claims it names.
        let pod = PodClaims { uid: None, ..POD };
        assert!(pods_claims(pod, &[claim("x", &["u-1"], None)])
            .unwrap()
            .is_empty());
    }
}
