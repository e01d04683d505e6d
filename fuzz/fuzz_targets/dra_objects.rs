//! DRA's objects as the API server serves them (issue 49, the Multus
//! contract): a ResourceClaim, a ResourceSlice, a Pod's own claim fields,
//! and, for an object `{"claims": [...], "slices": [...], "node": ...}`,
//! which devices the pod's claims give its networks. Any JSON value must
//! give a result or an error, never a panic; every device handed to a
//! network carries both Multus attributes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus::dra::claim::ResourceClaim;
use plexus::dra::pod::named_claims;
use plexus::dra::slice::ResourceSlice;
use plexus::dra::{claimed_devices, pods_claims, PodClaims, Slices};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let _ = ResourceClaim::from_value(&value);
    let _ = ResourceSlice::from_value(&value);
    let named = named_claims(&value, "ns/p").unwrap_or_default();
    let list = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (claims, slices) = (list("claims"), list("slices"));
    let pod = PodClaims {
        pod: "ns/p",
        uid: Some("u-1"),
        named: &named,
    };
    let Ok(ours) = pods_claims(pod, &claims) else {
        return;
    };
    let node = value.get("node").and_then(Value::as_str);
    let raw = Slices { raw: &slices, node };
    if let Ok(found) = claimed_devices(&ours, &raw) {
        for d in found.devices {
            assert!(
                !d.device_id.is_empty() && !d.resource_name.is_empty(),
                "{d:?}"
            );
        }
    }
});
