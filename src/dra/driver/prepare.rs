//! Prepare's checks, pure: kubelet names a claim (namespace, name, uid);
//! the claim as the API server has it says which devices of which driver
//! and pool it was allocated. plexus prepares the devices of its own
//! driver when
//!
//! - the claim is the one kubelet names (same uid: not deleted and made
//!   anew since), allocated, and reserved for a pod (the scheduler
//!   reserves a claim for the pod it allocated it for, before kubelet
//!   prepares it) of this node when the node's pods are known;
//! - each device is in this node's pool and is one of its devices now;
//! - no other prepared claim holds the device;
//! - the claim's opaque configuration for plexus is well formed
//!   ([`super::opaque`]).
//!
//! Each failure names the claim and the field. The devices of other
//! drivers in the same claim are theirs to prepare.

use std::collections::BTreeSet;

use serde_json::Value;

use super::inventory::NodeDevice;
use super::opaque;
pub use super::prepared::{ClaimRef, PreparedClaim, PreparedDevice};
use super::reservations::Reservations;
use super::{cdi, DRIVER};
use crate::dra::claim::{self, ResourceClaim};
use crate::dra::DraError;

/// What Prepare checks against.
pub struct Node<'a> {
    pub name: &'a str,
    /// The devices of the node now.
    pub devices: &'a [NodeDevice],
    pub reservations: &'a Reservations,
    /// The uids of the node's pods, when the daemon's cache knows them.
    pub pods: Option<&'a BTreeSet<String>>,
}

/// The claim `raw` (as the API server has it) prepared for `wanted`.
pub fn prepare(wanted: &ClaimRef, raw: &Value, node: &Node) -> Result<PreparedClaim, DraError> {
    let object = claim::label(raw);
    let c = ResourceClaim::from_value(raw)?;
    let bad = |field: String, reason: String| DraError::object(&object, field, reason);
    if c.uid.as_deref() != Some(wanted.uid.as_str()) {
        return Err(bad(
            "metadata.uid".into(),
            format!(
                "is {:?}, not {:?} that kubelet prepares: the claim was deleted and made anew",
                c.uid.as_deref().unwrap_or(""),
                wanted.uid
            ),
        ));
    }
    let Some(results) = &c.results else {
        return Err(bad(
            "status.allocation".into(),
            "required: the claim is not allocated".into(),
        ));
    };
    let pods: Vec<&str> = c
        .reserved_for
        .iter()
        .filter(|r| r.resource.as_str() == "pods")
        .map(|r| r.uid.as_str())
        .collect();
    if pods.is_empty() {
        return Err(bad(
            "status.reservedFor".into(),
            "names no pod: a claim is prepared for the pod it is reserved for".into(),
        ));
    }
    if let Some(local) = node.pods {
        if !pods.iter().any(|uid| local.contains(*uid)) {
            return Err(bad(
                "status.reservedFor".into(),
                format!(
                    "names pods {pods:?}, none of them on node {}: the claim is another \
                     node's pod's",
                    node.name
                ),
            ));
        }
    }
    // Malformed configuration fails Prepare, before anything is reserved.
    let configs = opaque::network_configs(&c)?;
    let mut devices = Vec::new();
    for (i, result) in results.iter().enumerate() {
        if result.driver.as_str() != DRIVER {
            continue;
        }
        let field = |key: &str| format!("status.allocation.devices.results[{i}].{key}");
        if result.pool.as_str() != node.name {
            return Err(bad(
                field("pool"),
                format!(
                    "is {:?}: this is node {}'s {DRIVER}, whose pool is {:?}",
                    result.pool.as_str(),
                    node.name,
                    node.name
                ),
            ));
        }
        let name = result.device.as_str();
        let Some(found) = node.devices.iter().find(|d| d.name == name) else {
            return Err(bad(
                field("device"),
                format!("{name:?} is not a device of node {}", node.name),
            ));
        };
        if let Some(holder) = node.reservations.holder(name) {
            if holder.uid != wanted.uid {
                return Err(bad(
                    field("device"),
                    format!(
                        "{name:?} is prepared for claim {}/{} (uid {}), not this one",
                        holder.namespace, holder.name, holder.uid
                    ),
                ));
            }
        }
        devices.push(PreparedDevice {
            request: result.request.to_string(),
            pool: node.name.to_string(),
            device: name.to_string(),
            kind: found.kind,
            device_id: found.device_id.clone(),
            netdev: found.netdev.clone(),
            char_devices: found.char_devices.clone(),
            cdi_device_ids: vec![cdi::device_id(&wanted.uid, name)],
            network: opaque::for_request(&configs, &result.request).cloned(),
        });
    }
    Ok(PreparedClaim {
        uid: wanted.uid.clone(),
        namespace: c.namespace,
        name: c.name,
        pods: pods.iter().map(|p| p.to_string()).collect(),
        devices,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::driver::inventory::DeviceKind;
    use serde_json::json;
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    fn device(name: &str) -> NodeDevice {
        NodeDevice {
            name: name.into(),
            kind: DeviceKind::Vf,
            device_id: format!("id-{name}"),
            netdev: None,
            char_devices: vec![PathBuf::from("/dev/vfio/7")],
            attributes: BTreeMap::new(),
        }
    }

    fn claim(uid: &str, results: Value, reserved: &[&str]) -> Value {
        let reserved: Vec<Value> = reserved
            .iter()
            .map(|u| json!({"resource": "pods", "name": "p", "uid": u}))
            .collect();
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"name": "c", "namespace": "ns", "uid": uid},
               "status": {"allocation": {"devices": {"results": results}}, "reservedFor": reserved}})
    }

    fn result(driver: &str, pool: &str, device: &str) -> Value {
        json!({"request": "vf", "driver": driver, "pool": pool, "device": device})
    }

    fn node<'a>(
        devices: &'a [NodeDevice],
        reservations: &'a Reservations,
        pods: Option<&'a BTreeSet<String>>,
    ) -> Node<'a> {
        Node {
            name: "node-a",
            devices,
            reservations,
            pods,
        }
    }

    fn wanted(uid: &str) -> ClaimRef {
        ClaimRef {
            namespace: "ns".into(),
            name: "c".into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn the_claims_devices_of_this_driver_are_prepared_with_cdi_ids() {
        let dir = tempfile::tempdir().unwrap();
        let reservations = Reservations::open(dir.path()).unwrap();
        let devices = [device("vf-a"), device("vf-b")];
        let pods = BTreeSet::from(["pod-1".to_string()]);
        let node = node(&devices, &reservations, Some(&pods));
        let raw = claim(
            "u-1",
            json!([
                result(DRIVER, "node-a", "vf-b"),
                result("gpu.example.com", "x", "gpu-0")
            ]),
            &["pod-1"],
        );
        let prepared = prepare(&wanted("u-1"), &raw, &node).unwrap();
        assert_eq!(prepared.devices.len(), 1);
        let d = &prepared.devices[0];
        assert_eq!(
            (d.device.as_str(), d.device_id.as_str()),
            ("vf-b", "id-vf-b")
        );
        assert_eq!(d.cdi_device_ids, ["dra.plexus.dev/net=u-1-vf-b"]);
        let spec = cdi::spec(&prepared);
        assert_eq!(spec["kind"], "dra.plexus.dev/net");
        assert_eq!(spec["devices"][0]["name"], "u-1-vf-b");
        assert_eq!(
            spec["devices"][0]["containerEdits"]["deviceNodes"],
            json!([{"path": "/dev/vfio/7"}])
        );
        assert_eq!(
            spec["devices"][0]["containerEdits"]["env"],
            json!(["PLEXUS_DEVICE_VF_B=id-vf-b"])
        );
    }

    #[test]
    fn bad_claims_are_refused_naming_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let mut reservations = Reservations::open(dir.path()).unwrap();
        let devices = [device("vf-a"), device("vf-b")];
        let held = prepare(
            &wanted("u-0"),
            &claim("u-0", json!([result(DRIVER, "node-a", "vf-a")]), &["pod-0"]),
            &node(&devices, &reservations, None),
        )
        .unwrap();
        reservations.put(held).unwrap();
        let pods = BTreeSet::from(["pod-1".to_string()]);
        let node = node(&devices, &reservations, Some(&pods));
        let one = |device: &str, pool: &str| json!([result(DRIVER, pool, device)]);
        let at = "ResourceClaim ns/c";
        let cases = [
            (
                claim("u-2", one("vf-b", "node-a"), &["pod-1"]),
                format!("{at} metadata.uid: is \"u-2\", not \"u-1\" that kubelet prepares"),
            ),
            (
                claim("u-1", one("vf-b", "node-b"), &["pod-1"]),
                format!("{at} status.allocation.devices.results[0].pool: is \"node-b\""),
            ),
            (
                claim("u-1", one("vf-z", "node-a"), &["pod-1"]),
                format!(
                    "{at} status.allocation.devices.results[0].device: \"vf-z\" is not a device \
                     of node node-a"
                ),
            ),
            (
                claim("u-1", one("vf-a", "node-a"), &["pod-1"]),
                format!(
                    "{at} status.allocation.devices.results[0].device: \"vf-a\" is prepared for \
                     claim ns/c (uid u-0), not this one"
                ),
            ),
            (
                claim("u-1", one("vf-b", "node-a"), &["pod-9"]),
                format!(
                    "{at} status.reservedFor: names pods [\"pod-9\"], none of them on node node-a"
                ),
            ),
            (
                claim("u-1", one("vf-b", "node-a"), &[]),
                format!("{at} status.reservedFor: names no pod"),
            ),
        ];
        for (raw, want) in cases {
            let e = prepare(&wanted("u-1"), &raw, &node)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(&want), "{e}\nwant {want}");
        }
        let mut unallocated = claim("u-1", json!([]), &["pod-1"]);
        unallocated["status"]
            .as_object_mut()
            .unwrap()
            .remove("allocation");
        let e = prepare(&wanted("u-1"), &unallocated, &node).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{at} status.allocation: required: the claim is not allocated")
        );
        // The same claim again: prepared again, the same devices (kubelet
        // repeats Prepare after its own restart).
        let again = prepare(
            &wanted("u-0"),
            &claim("u-0", one("vf-a", "node-a"), &["pod-1"]),
            &node,
        )
        .unwrap();
        assert_eq!(again.devices, reservations.get("u-0").unwrap().devices);
        // Reopened from disk, the reservation holds.
        let reopened = Reservations::open(dir.path()).unwrap();
        assert_eq!(reopened.holder("vf-a").unwrap().uid, "u-0");
    }
}
