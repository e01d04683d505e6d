//! The IPAMClaim object (multi-net-spec §8): a claim to IP addresses on behalf
//! of an entity other than a pod (a VM, a StatefulSet member), named by the
//! `ipam-claim-reference` selection key (§4.1.2.1.11).
//!
//! Status keys beyond §8.2 (`ownerPod`, `conditions`) are those of the
//! k8snetworkplumbingwg/ipamclaims API that implementations use.

use serde_json::{json, Map, Value};

use super::error::SpecError;
use super::go_json::{as_array, as_bool, as_object, as_str, parse_ip_with_prefix};
use super::meta::ObjectMeta;
use super::nad::check_type_meta;
use crate::cni::names::check_ifname;

/// The API version of the CRD of §8.1.
pub const API_VERSION: &str = "k8s.cni.cncf.io/v1alpha1";
/// The API version the §8.2.1 example uses; accepted too.
pub const API_VERSION_PERSISTENTIP: &str = "persistentip.cni.cncf.io/v1alpha1";
pub const KIND: &str = "IPAMClaim";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpamClaim {
    /// As read (one of the two accepted versions), written back unchanged.
    pub api_version: String,
    pub metadata: ObjectMeta,
    /// `metadata.ownerReferences` (§8.3.2).
    pub owner_references: Vec<OwnerReference>,
    pub spec: IpamClaimSpec,
    pub status: Option<IpamClaimStatus>,
}

/// §8.2 `spec`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IpamClaimSpec {
    /// The network the allocation is for.
    pub network: String,
    /// The pod interface the allocation is for.
    pub interface: String,
}

/// §8.2 `status`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IpamClaimStatus {
    /// Allocated addresses with prefix length (`10.128.20.8/24`).
    pub ips: Vec<String>,
    /// `ownerPod.name`: the pod currently holding the claim.
    pub owner_pod: Option<String>,
    /// Kubernetes conditions, kept as written.
    pub conditions: Vec<Value>,
}

/// An entry of `metadata.ownerReferences`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OwnerReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub controller: Option<bool>,
    pub block_owner_deletion: Option<bool>,
}

fn bad(field: impl Into<String>, reason: impl Into<String>) -> SpecError {
    SpecError::invalid(field, reason)
}

/// A required, non-empty string key of `obj`, at `path`.
fn required_str(obj: &Map<String, Value>, key: &str, path: &str) -> Result<String, SpecError> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(bad(path, "required")),
        Some(v) => {
            let s = as_str(v).map_err(|r| bad(path, r))?;
            if s.is_empty() {
                return Err(bad(path, "must not be empty"));
            }
            Ok(s.to_string())
        }
    }
}

impl IpamClaim {
    /// A claim with no status yet, as a workload controller creates it.
    pub fn new(metadata: ObjectMeta, network: &str, interface: &str) -> IpamClaim {
        IpamClaim {
            api_version: API_VERSION.to_string(),
            metadata,
            owner_references: Vec::new(),
            spec: IpamClaimSpec {
                network: network.to_string(),
                interface: interface.to_string(),
            },
            status: None,
        }
    }

    /// Decode and validate: `apiVersion` (when present) one of
    /// [`API_VERSION`] and [`API_VERSION_PERSISTENTIP`], `kind` IPAMClaim,
    /// `metadata.name` a valid object name, `spec.network` and
    /// `spec.interface` required (the latter a kernel interface name), and
    /// each `status.ips` entry an address with prefix length.
    pub fn from_value(v: &Value) -> Result<IpamClaim, SpecError> {
        let obj = as_object(v).map_err(|r| bad("IPAMClaim", r))?;
        check_type_meta(obj, &[API_VERSION, API_VERSION_PERSISTENTIP], KIND)?;
        let api_version = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or(API_VERSION)
            .to_string();
        let meta_value = obj
            .get("metadata")
            .filter(|m| !m.is_null())
            .ok_or_else(|| bad("metadata", "required"))?;
        let metadata = ObjectMeta::from_value(meta_value)?;
        let owner_references = match meta_value.get("ownerReferences") {
            None | Some(Value::Null) => Vec::new(),
            Some(list) => as_array(list)
                .map_err(|r| bad("metadata.ownerReferences", r))?
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    OwnerReference::from_value(r, &format!("metadata.ownerReferences[{i}]"))
                })
                .collect::<Result<_, _>>()?,
        };

        let spec = match obj.get("spec") {
            None | Some(Value::Null) => return Err(bad("spec", "required")),
            Some(s) => as_object(s).map_err(|r| bad("spec", r))?,
        };
        let network = required_str(spec, "network", "spec.network")?;
        let interface = required_str(spec, "interface", "spec.interface")?;
        check_ifname(&interface).map_err(|r| {
            bad(
                "spec.interface",
                format!("{interface:?} is not a valid interface name: {r}"),
            )
        })?;

        let status = match obj.get("status") {
            None | Some(Value::Null) => None,
            Some(s) => Some(IpamClaimStatus::from_value(s)?),
        };
        Ok(IpamClaim {
            api_version,
            metadata,
            owner_references,
            spec: IpamClaimSpec { network, interface },
            status,
        })
    }

    pub fn to_value(&self) -> Value {
        let mut metadata = self.metadata.to_value();
        if !self.owner_references.is_empty() {
            metadata["ownerReferences"] = Value::Array(
                self.owner_references
                    .iter()
                    .map(OwnerReference::to_value)
                    .collect(),
            );
        }
        let mut v = json!({
            "apiVersion": self.api_version,
            "kind": KIND,
            "metadata": metadata,
            "spec": {"network": self.spec.network, "interface": self.spec.interface},
        });
        if let Some(s) = &self.status {
            let mut m = Map::new();
            m.insert("ips".into(), json!(s.ips));
            if let Some(pod) = &s.owner_pod {
                m.insert("ownerPod".into(), json!({ "name": pod }));
            }
            if !s.conditions.is_empty() {
                m.insert("conditions".into(), Value::Array(s.conditions.clone()));
            }
            v["status"] = Value::Object(m);
        }
        v
    }
}

impl IpamClaimStatus {
    fn from_value(v: &Value) -> Result<IpamClaimStatus, SpecError> {
        let obj = as_object(v).map_err(|r| bad("status", r))?;
        // The CRD requires "ips" in a status, but a status written before any
        // allocation may carry null; read that as no addresses.
        let ips = match obj.get("ips") {
            None | Some(Value::Null) => Vec::new(),
            Some(list) => as_array(list)
                .map_err(|r| bad("status.ips", r))?
                .iter()
                .enumerate()
                .map(|(i, ip)| {
                    let path = format!("status.ips[{i}]");
                    let s = as_str(ip).map_err(|r| bad(&path, r))?;
                    match parse_ip_with_prefix(s) {
                        Some((_, Some(_))) => Ok(s.to_string()),
                        _ => Err(bad(
                            &path,
                            format!("{s:?} is not an IP address with a prefix length"),
                        )),
                    }
                })
                .collect::<Result<_, _>>()?,
        };
        let owner_pod = match obj.get("ownerPod") {
            None | Some(Value::Null) => None,
            Some(p) => {
                let p = as_object(p).map_err(|r| bad("status.ownerPod", r))?;
                match p.get("name") {
                    None | Some(Value::Null) => None,
                    Some(n) => Some(
                        as_str(n)
                            .map_err(|r| bad("status.ownerPod.name", r))?
                            .to_string(),
                    ),
                }
                .filter(|n| !n.is_empty())
            }
        };
        let conditions = match obj.get("conditions") {
            None | Some(Value::Null) => Vec::new(),
            Some(c) => as_array(c)
                .map_err(|r| bad("status.conditions", r))?
                .clone(),
        };
        Ok(IpamClaimStatus {
            ips,
            owner_pod,
            conditions,
        })
    }
}

impl OwnerReference {
    fn from_value(v: &Value, path: &str) -> Result<OwnerReference, SpecError> {
        let obj = as_object(v).map_err(|r| bad(path, r))?;
        let s = |key: &str| required_str(obj, key, &format!("{path}.{key}"));
        let b = |key: &str| -> Result<Option<bool>, SpecError> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => as_bool(v)
                    .map(Some)
                    .map_err(|r| bad(format!("{path}.{key}"), r)),
            }
        };
        Ok(OwnerReference {
            api_version: s("apiVersion")?,
            kind: s("kind")?,
            name: s("name")?,
            uid: s("uid")?,
            controller: b("controller")?,
            block_owner_deletion: b("blockOwnerDeletion")?,
        })
    }

    fn to_value(&self) -> Value {
        let mut v = json!({
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
        });
        if let Some(c) = self.controller {
            v["controller"] = json!(c);
        }
        if let Some(b) = self.block_owner_deletion {
            v["blockOwnerDeletion"] = json!(b);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE_8_2_1: &str = r#"
apiVersion: persistentip.cni.cncf.io/v1alpha1
kind: IPAMClaim
metadata:
  name: vm-a.tenantred.pod16367aacb67
  namespace: ns1
  ownerReferences:
    - apiVersion: kubevirt.io/v1
      kind: VirtualMachine
      name: vm-a
      uid: a0790345-4e84-4257-837a-e3d762d191ab
spec:
  network: tenantred
  interface: pod16367aacb67
status:
  ips:
    - 10.128.20.8/24
    - fd10:128:20::8/64
"#;

    fn yaml(text: &str) -> Value {
        serde_yaml_ng::from_str(text).unwrap()
    }

    #[test]
    fn example_8_2_1() {
        let v = yaml(EXAMPLE_8_2_1);
        let c = IpamClaim::from_value(&v).unwrap();
        assert_eq!(c.api_version, API_VERSION_PERSISTENTIP);
        assert_eq!(c.metadata.name, "vm-a.tenantred.pod16367aacb67");
        assert_eq!(c.metadata.namespace.as_deref(), Some("ns1"));
        assert_eq!(
            c.owner_references,
            vec![OwnerReference {
                api_version: "kubevirt.io/v1".into(),
                kind: "VirtualMachine".into(),
                name: "vm-a".into(),
                uid: "a0790345-4e84-4257-837a-e3d762d191ab".into(),
                controller: None,
                block_owner_deletion: None,
            }]
        );
        assert_eq!(
            c.spec,
            IpamClaimSpec {
                network: "tenantred".into(),
                interface: "pod16367aacb67".into()
            }
        );
        assert_eq!(
            c.status,
            Some(IpamClaimStatus {
                ips: vec!["10.128.20.8/24".into(), "fd10:128:20::8/64".into()],
                owner_pod: None,
                conditions: vec![],
            })
        );
        assert_eq!(c.to_value(), v);
    }

    #[test]
    fn crd_api_version_and_ipamclaims_status_keys() {
        // The §8.1 CRD's group/version, and the ownerPod/conditions status keys.
        let v = json!({
            "apiVersion": "k8s.cni.cncf.io/v1alpha1",
            "kind": "IPAMClaim",
            "metadata": {"name": "myappstatefulset.safenetwork.eth1", "namespace": "apps"},
            "spec": {"network": "safenetwork", "interface": "eth1"},
            "status": {
                "ips": ["192.0.2.10/24"],
                "ownerPod": {"name": "myappstatefulset-0"},
                "conditions": [{"type": "IPsAllocated", "status": "True"}]
            }
        });
        let c = IpamClaim::from_value(&v).unwrap();
        let st = c.status.as_ref().unwrap();
        assert_eq!(st.owner_pod.as_deref(), Some("myappstatefulset-0"));
        assert_eq!(st.conditions.len(), 1);
        assert_eq!(c.to_value(), v);
        // No apiVersion: the CRD's is assumed.
        let new = IpamClaim::new(c.metadata.clone(), "safenetwork", "eth1");
        assert_eq!(new.to_value()["apiVersion"], API_VERSION);
        assert!(new.to_value().get("status").is_none());
    }

    #[test]
    fn names_8_3_1() {
        for name in [
            "vm-a.tenantred.pod16367aacb67",
            "myappstatefulset.safenetwork.eth1",
            "vm-a.tenantred",
        ] {
            let c = IpamClaim::from_value(&json!({
                "metadata": {"name": name},
                "spec": {"network": "tenantred", "interface": "eth1"}
            }))
            .unwrap();
            assert_eq!(c.metadata.name, name);
        }
        // The third example as printed carries a YAML comment; the name is
        // what precedes it.
        let v = yaml("name: vm-a.tenantred # this is possible since `tenantred` can be uniquely\n");
        assert_eq!(v["name"], "vm-a.tenantred");
    }

    #[test]
    fn bad_inputs_name_the_field() {
        let err = |v: Value| IpamClaim::from_value(&v).unwrap_err().to_string();
        let spec = json!({"network": "n", "interface": "eth1"});
        assert_eq!(
            err(
                json!({"apiVersion": "k8s.cni.cncf.io/v1", "metadata": {"name": "a"}, "spec": spec})
            ),
            "apiVersion: must be \"k8s.cni.cncf.io/v1alpha1\" or \
             \"persistentip.cni.cncf.io/v1alpha1\", got \"k8s.cni.cncf.io/v1\""
        );
        assert_eq!(
            err(json!({"kind": "IPAMClaims", "metadata": {"name": "a"}, "spec": spec})),
            "kind: must be \"IPAMClaim\", got \"IPAMClaims\""
        );
        assert_eq!(err(json!({"spec": spec})), "metadata: required");
        let invalid = |v: Value| match IpamClaim::from_value(&v) {
            Err(SpecError::Invalid { field, reason }) => (field, reason),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            invalid(json!({"metadata": {"name": "VM_A"}, "spec": spec})).0,
            "metadata.name"
        );
        assert_eq!(err(json!({"metadata": {"name": "a"}})), "spec: required");
        assert_eq!(
            err(json!({"metadata": {"name": "a"}, "spec": {"interface": "eth1"}})),
            "spec.network: required"
        );
        assert_eq!(
            err(json!({"metadata": {"name": "a"}, "spec": {"network": "", "interface": "eth1"}})),
            "spec.network: must not be empty"
        );
        assert_eq!(
            err(json!({"metadata": {"name": "a"}, "spec": {"network": "n"}})),
            "spec.interface: required"
        );
        let (field, reason) = invalid(json!({"metadata": {"name": "a"},
                           "spec": {"network": "n", "interface": "an-interface-name-too-long"}}));
        assert_eq!(field, "spec.interface");
        assert!(
            reason.starts_with("\"an-interface-name-too-long\" is not a valid interface name"),
            "{reason}"
        );
        assert_eq!(
            err(json!({"metadata": {"name": "a"}, "spec": spec, "status": {"ips": ["10.0.0.1"]}})),
            "status.ips[0]: \"10.0.0.1\" is not an IP address with a prefix length"
        );
        assert_eq!(
            err(
                json!({"metadata": {"name": "a"}, "spec": spec, "status": {"ips": ["10.0.0.1/24", "x/8"]}})
            ),
            "status.ips[1]: \"x/8\" is not an IP address with a prefix length"
        );
        assert_eq!(
            err(json!({"metadata": {"name": "a"}, "spec": spec, "status": {"ips": "10.0.0.1/24"}})),
            "status.ips: must be a list, got \"10.0.0.1/24\""
        );
        assert_eq!(
            err(json!({"metadata": {"name": "a"}, "spec": spec, "status": {"ownerPod": "p"}})),
            "status.ownerPod: must be an object, got \"p\""
        );
        assert_eq!(
            err(
                json!({"metadata": {"name": "a", "ownerReferences": [{"kind": "VirtualMachine"}]},
                       "spec": spec})
            ),
            "metadata.ownerReferences[0].apiVersion: required"
        );
        assert_eq!(
            err(
                json!({"metadata": {"name": "a", "ownerReferences": [{"apiVersion": "v1", "kind": "K",
                       "name": "n", "uid": "u", "controller": "yes"}]}, "spec": spec})
            ),
            "metadata.ownerReferences[0].controller: must be a boolean, got \"yes\""
        );
        // A status without addresses yet is fine.
        let c = IpamClaim::from_value(&json!({"metadata": {"name": "a"}, "spec": spec,
                                             "status": {"ips": null}}))
        .unwrap();
        assert_eq!(c.status.unwrap().ips, Vec::<String>::new());
    }
}
