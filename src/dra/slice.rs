//! The parts of a `resource.k8s.io/v1` ResourceSlice that the Multus
//! contract reads: the driver, the pool (name, generation), the node and
//! each device's name and the two attributes Multus defines,
//! `k8s.cni.cncf.io/deviceID` and `k8s.cni.cncf.io/resourceName`, each a
//! string attribute (`{"string": "0000:3b:02.1"}`). Read as Go's
//! encoding/json reads the object into client-go's types; only the slices
//! of a driver and pool an allocation names are decoded, so another
//! driver's slice never fails a pod.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::error::DraError;
use super::{API_VERSION, DEVICE_ID_ATTRIBUTE, RESOURCE_NAME_ATTRIBUTE};
use crate::netattach::go_json::{describe, GoList, GoObj, GoStr};
use crate::netattach::nad::WireObject;

pub const KIND: &str = "ResourceSlice";

/// One ResourceSlice as the contract reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceSlice {
    pub name: String,
    pub driver: String,
    pub pool: String,
    /// `spec.pool.generation`: only a pool's slices of its highest
    /// generation are current.
    pub generation: i64,
    pub node_name: Option<String>,
    pub devices: Vec<SliceDevice>,
}

/// `spec.devices[i]`, with the Multus attributes it has (an empty string
/// is none, as Multus reads it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceDevice {
    pub name: String,
    pub device_id: Option<String>,
    pub resource_name: Option<String>,
}

#[derive(Deserialize)]
struct WireSpec {
    driver: GoStr,
    pool: GoObj<WirePool>,
    #[serde(rename = "nodeName")]
    node_name: Option<GoStr>,
    #[serde(default)]
    devices: GoList<WireDevice>,
}

#[derive(Deserialize)]
struct WirePool {
    name: GoStr,
    #[serde(default)]
    generation: Option<i64>,
}

#[derive(Deserialize)]
struct WireDevice {
    name: GoStr,
    #[serde(default)]
    attributes: Option<BTreeMap<String, GoObj<WireAttribute>>>,
}

/// A DeviceAttribute: exactly one of its values is set.
#[serde_with::skip_serializing_none]
#[derive(Deserialize, serde::Serialize)]
struct WireAttribute {
    int: Option<i64>,
    bool: Option<bool>,
    string: Option<GoStr>,
    version: Option<GoStr>,
}

/// `ResourceSlice name`, read leniently from `v`.
pub fn label(v: &Value) -> String {
    let name = v.pointer("/metadata/name").and_then(Value::as_str);
    format!("{KIND} {}", name.unwrap_or("?"))
}

/// `spec.<key>` of `v` if it is a string, without decoding the slice.
fn peek<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// Whether the slice `v` is on `node` (`spec.nodeName`), without decoding
/// it: for an API server that cannot select slices by node.
pub fn on_node(v: &Value, node: &str) -> bool {
    peek(v, "/spec/nodeName") == Some(node)
}

impl ResourceSlice {
    /// Decode the slice `v` (JSON as the API server serves it).
    pub fn from_value(v: &Value) -> Result<ResourceSlice, DraError> {
        let object = label(v);
        let (wire, metadata) =
            WireObject::<WireSpec, serde::de::IgnoredAny>::decode(v, &[API_VERSION], KIND)
                .map_err(|e| DraError::of_spec(&object, e))?;
        let spec = wire
            .spec
            .ok_or_else(|| DraError::object(&object, "spec", "required"))?
            .0;
        let devices = spec
            .devices
            .0
            .into_iter()
            .enumerate()
            .map(|(i, d)| {
                let attributes = d.attributes.unwrap_or_default();
                let string = |key: &str| -> Result<Option<String>, DraError> {
                    let Some(attribute) = attributes.get(key) else {
                        return Ok(None);
                    };
                    match &attribute.string {
                        Some(s) => Ok(Some(s.to_string()).filter(|s| !s.is_empty())),
                        None => Err(DraError::object(
                            &object,
                            format!("spec.devices[{i}].attributes[{key:?}]"),
                            format!(
                                "must be a string attribute ({{\"string\": ...}}), got {}",
                                describe(&serde_json::to_value(&attribute.0).unwrap_or_default())
                            ),
                        )),
                    }
                };
                Ok(SliceDevice {
                    device_id: string(DEVICE_ID_ATTRIBUTE)?,
                    resource_name: string(RESOURCE_NAME_ATTRIBUTE)?,
                    name: d.name.0,
                })
            })
            .collect::<Result<_, DraError>>()?;
        Ok(ResourceSlice {
            name: metadata.name,
            driver: spec.driver.0,
            pool: spec.pool.0.name.0,
            generation: spec.pool.0.generation.unwrap_or_default(),
            node_name: spec.node_name.map(|n| n.0),
            devices,
        })
    }
}

/// Where a claim's allocated device is found: the slices of one node
/// (already selected by node, or `node` says which to keep).
pub struct Slices<'a> {
    pub raw: &'a [Value],
    /// Keep only the slices of this node (an API server that cannot select
    /// them by node, and the daemon's cache of a server like it).
    pub node: Option<&'a str>,
}

impl Slices<'_> {
    /// The device `device` of `driver`'s pool `pool`, from the pool's
    /// slices of its highest generation; `None` when none lists it. A slice
    /// of that pool that does not decode is an error.
    pub fn find(
        &self,
        driver: &str,
        pool: &str,
        device: &str,
    ) -> Result<Option<SliceDevice>, DraError> {
        let mut candidates = Vec::new();
        for v in self.raw {
            let ours = peek(v, "/spec/driver") == Some(driver)
                && peek(v, "/spec/pool/name") == Some(pool)
                && self.node.is_none_or(|node| on_node(v, node));
            if ours {
                candidates.push(ResourceSlice::from_value(v)?);
            }
        }
        let Some(current) = candidates.iter().map(|s| s.generation).max() else {
            return Ok(None);
        };
        Ok(candidates
            .into_iter()
            .filter(|s| s.generation == current)
            .flat_map(|s| s.devices)
            .find(|d| d.name == device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(name: &str, node: &str, generation: i64, devices: Value) -> Value {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
               "metadata": {"name": name},
               "spec": {"driver": "sriov.example.com", "nodeName": node,
                        "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                        "devices": devices}})
    }

    fn multus(id: &str, resource: &str) -> Value {
        json!({"k8s.cni.cncf.io/deviceID": {"string": id},
               "k8s.cni.cncf.io/resourceName": {"string": resource},
               "example.com/numa": {"int": 0}})
    }

    #[test]
    fn devices_with_and_without_the_multus_attributes() {
        let v = slice(
            "s",
            "node-a",
            1,
            json!([{"name": "vf-1", "attributes": multus("0000:3b:02.1", "example.com/vf")},
                   {"name": "gpu-0", "attributes": {"example.com/model": {"string": "x"}}},
                   {"name": "vf-2", "attributes": {"k8s.cni.cncf.io/deviceID": {"string": ""}}},
                   {"name": "bare"}]),
        );
        let s = ResourceSlice::from_value(&v).unwrap();
        assert_eq!(
            (s.driver.as_str(), s.pool.as_str()),
            ("sriov.example.com", "node-a")
        );
        assert_eq!(s.node_name.as_deref(), Some("node-a"));
        assert_eq!(
            s.devices[0],
            SliceDevice {
                name: "vf-1".into(),
                device_id: Some("0000:3b:02.1".into()),
                resource_name: Some("example.com/vf".into())
            }
        );
        for d in &s.devices[1..] {
            assert_eq!(
                (d.device_id.as_ref(), d.resource_name.as_ref()),
                (None, None),
                "{d:?}"
            );
        }
    }

    #[test]
    fn a_multus_attribute_that_is_not_a_string_is_named() {
        let v = slice(
            "s",
            "node-a",
            1,
            json!([{"name": "vf-1", "attributes": {"k8s.cni.cncf.io/deviceID": {"int": 5}}}]),
        );
        assert_eq!(
            ResourceSlice::from_value(&v).unwrap_err().to_string(),
            "ResourceSlice s spec.devices[0].attributes[\"k8s.cni.cncf.io/deviceID\"]: must be a \
             string attribute ({\"string\": ...}), got {\"int\":5}"
        );
        let v = slice("s", "node-a", 1, json!([{"name": 7}]));
        assert_eq!(
            ResourceSlice::from_value(&v).unwrap_err().to_string(),
            "ResourceSlice s spec.devices[0].name: must be a string, got 7"
        );
        let v = slice("s", "node-a", 1, json!({"name": "vf"}));
        assert_eq!(
            ResourceSlice::from_value(&v).unwrap_err().to_string(),
            "ResourceSlice s spec.devices: must be a list, got {\"name\":\"vf\"}"
        );
    }

    #[test]
    fn find_looks_in_the_pools_current_slices_of_the_node_only() {
        let raw = [
            slice(
                "old",
                "node-a",
                1,
                json!([{"name": "vf-1", "attributes": multus("old", "r")}]),
            ),
            slice(
                "new",
                "node-a",
                2,
                json!([{"name": "vf-1", "attributes": multus("new", "r")}]),
            ),
            slice(
                "other",
                "node-b",
                2,
                json!([{"name": "vf-9", "attributes": multus("b", "r")}]),
            ),
            // Another driver's slice that does not decode fails nothing.
            json!({"metadata": {"name": "gpu"}, "spec": {"driver": "gpu.example.com", "devices": 5}}),
        ];
        let slices = Slices {
            raw: &raw,
            node: Some("node-a"),
        };
        let found = slices
            .find("sriov.example.com", "node-a", "vf-1")
            .unwrap()
            .unwrap();
        assert_eq!(found.device_id.as_deref(), Some("new"));
        // node-b's pool is not this node's.
        assert_eq!(
            slices.find("sriov.example.com", "node-b", "vf-9").unwrap(),
            None
        );
        assert_eq!(
            slices.find("sriov.example.com", "node-a", "vf-7").unwrap(),
            None
        );
        let all = Slices {
            raw: &raw,
            node: None,
        };
        assert!(all
            .find("sriov.example.com", "node-b", "vf-9")
            .unwrap()
            .is_some());
        // A slice of the pool looked in that does not decode is an error.
        let mut bad = raw.to_vec();
        bad.push(slice(
            "torn",
            "node-a",
            2,
            json!([{"name": "vf-3", "attributes": 4}]),
        ));
        let slices = Slices {
            raw: &bad,
            node: Some("node-a"),
        };
        let e = slices
            .find("sriov.example.com", "node-a", "vf-1")
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("ResourceSlice torn spec.devices[0].attributes: "),
            "{e}"
        );
    }
}
