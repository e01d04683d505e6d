//! The parts of a `resource.k8s.io/v1` ResourceClaim that the Multus
//! contract reads: which consumers it is reserved for
//! (`status.reservedFor[]`) and which devices it was allocated
//! (`status.allocation.devices.results[]`: driver, pool, device, request).
//! Read as Go's encoding/json reads the object into client-go's types: keys
//! case-folded, `null` as absent, unknown keys ignored; a value of the
//! wrong kind fails, naming its field.

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use super::error::DraError;
use super::API_VERSION;
use crate::netattach::go_json::{GoList, GoObj, GoStr};
use crate::netattach::nad::WireObject;

pub const KIND: &str = "ResourceClaim";

/// A ResourceClaim as the contract reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceClaim {
    pub namespace: String,
    pub name: String,
    /// `metadata.uid`: kubelet names the claim it prepares by uid too.
    pub uid: Option<String>,
    /// `status.reservedFor[]`: who may use the claim (the scheduler reserves
    /// it for the pod it allocates it for).
    pub reserved_for: Vec<Consumer>,
    /// `status.allocation.devices.results[]`; `None` when the claim is not
    /// allocated (no `status.allocation`).
    pub results: Option<Vec<AllocationResult>>,
    /// `status.allocation.devices.config[]`: the class's and the claim's
    /// configurations of the devices, for their drivers.
    pub config: Vec<DeviceConfig>,
}

/// `status.allocation.devices.config[i]` (DeviceAllocationConfiguration).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DeviceConfig {
    /// `FromClass` or `FromClaim`.
    #[serde(default)]
    pub source: GoStr,
    /// The requests it applies to; none: every request of the claim.
    #[serde(default)]
    pub requests: GoList<GoStr>,
    pub opaque: Option<GoObj<OpaqueConfig>>,
}

/// `opaque`: parameters for one driver, which only that driver reads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct OpaqueConfig {
    pub driver: GoStr,
    #[serde(default)]
    pub parameters: Value,
}

/// `status.allocation.devices.results[i]`: one allocated device.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AllocationResult {
    pub request: GoStr,
    pub driver: GoStr,
    pub pool: GoStr,
    pub device: GoStr,
}

/// `status.reservedFor[i]` (ResourceClaimConsumerReference).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Consumer {
    #[serde(rename = "apiGroup", default)]
    pub api_group: Option<GoStr>,
    pub resource: GoStr,
    pub name: GoStr,
    pub uid: GoStr,
}

impl Consumer {
    /// Whether it names the pod of uid `uid` (core group, resource `pods`).
    pub fn is_pod(&self, uid: &str) -> bool {
        self.api_group.as_deref().unwrap_or_default().is_empty()
            && self.resource == "pods"
            && self.uid == uid
    }
}

#[derive(Deserialize)]
struct WireStatus {
    allocation: Option<GoObj<WireAllocation>>,
    #[serde(rename = "reservedFor", default)]
    reserved_for: GoList<Consumer>,
}

#[derive(Deserialize)]
struct WireAllocation {
    devices: Option<GoObj<WireDevices>>,
}

#[derive(Deserialize)]
struct WireDevices {
    #[serde(default)]
    results: GoList<AllocationResult>,
    #[serde(default)]
    config: GoList<DeviceConfig>,
}

/// `ResourceClaim ns/name` as errors name it, read leniently from `v` (so
/// that even an object that does not decode is named).
pub fn label(v: &Value) -> String {
    let meta = |key: &str| {
        v.pointer(&format!("/metadata/{key}"))
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string()
    };
    format!("{KIND} {}/{}", meta("namespace"), meta("name"))
}

impl ResourceClaim {
    /// Decode the claim `v` (JSON as the API server serves it).
    pub fn from_value(v: &Value) -> Result<ResourceClaim, DraError> {
        let object = label(v);
        let (wire, metadata) =
            WireObject::<IgnoredAny, WireStatus>::decode(v, &[API_VERSION], KIND)
                .map_err(|e| DraError::of_spec(&object, e))?;
        let status = wire.status.map(|s| s.0);
        let (reserved_for, allocation) = match status {
            Some(s) => (s.reserved_for.0, s.allocation.map(|a| a.0)),
            None => (Vec::new(), None),
        };
        let (results, config) = match allocation.map(|a| a.devices.map(|d| d.0)) {
            None => (None, Vec::new()),
            Some(None) => (Some(Vec::new()), Vec::new()),
            Some(Some(d)) => (Some(d.results.0), d.config.0),
        };
        for (i, result) in results.iter().flatten().enumerate() {
            for (key, value) in [
                ("driver", &result.driver),
                ("pool", &result.pool),
                ("device", &result.device),
            ] {
                if value.is_empty() {
                    return Err(DraError::object(
                        &object,
                        format!("status.allocation.devices.results[{i}].{key}"),
                        "required",
                    ));
                }
            }
        }
        Ok(ResourceClaim {
            namespace: metadata.namespace.unwrap_or_default(),
            name: metadata.name,
            uid: metadata.uid,
            reserved_for,
            results,
            config,
        })
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Whether it is reserved for the pod of uid `uid`.
    pub fn reserved_for_pod(&self, uid: &str) -> bool {
        self.reserved_for.iter().any(|c| c.is_pod(uid))
    }
}

/// Whether the claim `v`, which does not decode, is reserved for the pod
/// of uid `uid` as far as can be told: then its error is the pod's.
pub(super) fn mentions_pod(v: &Value, uid: &str) -> bool {
    let reserved = v.pointer("/status/reservedFor").and_then(Value::as_array);
    reserved
        .into_iter()
        .flatten()
        .any(|c| c.get("uid").and_then(Value::as_str) == Some(uid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(status: Value) -> Value {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"name": "x", "namespace": "ns", "uid": "c-1"},
               "spec": {"devices": {"requests": [{"name": "vf", "exactly": {"deviceClassName": "vf"}}]}},
               "status": status})
    }

    #[test]
    fn an_allocated_claim_reserved_for_a_pod() {
        let c = ResourceClaim::from_value(&claim(json!({
            "allocation": {"devices": {"results": [
                {"request": "vf", "driver": "sriov.example.com", "pool": "node-a", "device": "vf-1",
                 "adminAccess": null, "unknownKey": 1}]},
                "nodeSelector": {"nodeSelectorTerms": []}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "u-1"}],
        })))
        .unwrap();
        assert_eq!(c.key(), "ns/x");
        assert!(c.reserved_for_pod("u-1"));
        assert!(!c.reserved_for_pod("u-2"));
        let results = c.results.unwrap();
        assert_eq!(results.len(), 1);
        assert_eq!(
            (results[0].driver.as_str(), results[0].pool.as_str()),
            ("sriov.example.com", "node-a")
        );
        assert_eq!(results[0].device, "vf-1");
    }

    #[test]
    fn go_rules_null_and_absent_and_case() {
        // Keys fold as Go's decoder folds them; null is absent.
        let c = ResourceClaim::from_value(&claim(json!({
            "Allocation": {"Devices": {"Results": null}},
            "ReservedFor": null,
        })))
        .unwrap();
        assert_eq!(c.results, Some(vec![]));
        assert!(c.reserved_for.is_empty());
        let c = ResourceClaim::from_value(&claim(Value::Null)).unwrap();
        assert_eq!(c.results, None);
        // A consumer of another group is not a pod.
        let c = ResourceClaim::from_value(&claim(json!({"reservedFor": [
            {"apiGroup": "example.com", "resource": "pods", "name": "p", "uid": "u-1"}]})))
        .unwrap();
        assert!(!c.reserved_for_pod("u-1"));
    }

    #[test]
    fn errors_name_the_claim_and_the_field() {
        let cases = [
            (
                json!({"allocation": {"devices": {"results": [{"request": "r", "driver": "d", "pool": "p"}]}}}),
                "ResourceClaim ns/x status.allocation.devices.results[0].device: required",
            ),
            (
                json!({"allocation": {"devices": {"results": [{"request": "r", "driver": "d", "pool": "p", "device": ""}]}}}),
                "ResourceClaim ns/x status.allocation.devices.results[0].device: required",
            ),
            (
                json!({"allocation": {"devices": {"results": [{"request": "r", "driver": 5, "pool": "p", "device": "v"}]}}}),
                "ResourceClaim ns/x status.allocation.devices.results[0].driver: must be a string, got 5",
            ),
            (
                json!({"allocation": {"devices": []}}),
                "ResourceClaim ns/x status.allocation.devices: must be an object, got []",
            ),
            (
                json!({"reservedFor": [{"resource": "pods", "name": "p"}]}),
                "ResourceClaim ns/x status.reservedFor[0].uid: required",
            ),
        ];
        for (status, want) in cases {
            let e = ResourceClaim::from_value(&claim(status)).unwrap_err();
            assert_eq!(e.to_string(), want);
        }
        let mut v = claim(Value::Null);
        v["apiVersion"] = json!("resource.k8s.io/v1beta1");
        let e = ResourceClaim::from_value(&v).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("ResourceClaim ns/x apiVersion: must be"),
            "{e}"
        );
    }

    #[test]
    fn a_claim_that_does_not_decode_is_the_pods_when_it_names_its_uid() {
        let v = claim(json!({"allocation": 5, "reservedFor": [{"uid": "u-1"}]}));
        assert!(ResourceClaim::from_value(&v).is_err());
        assert!(mentions_pod(&v, "u-1"));
        assert!(!mentions_pod(&v, "u-2"));
    }
}
