//! The IPAMClaim object (multi-net-spec §8): a claim to IP addresses on behalf
//! of an entity other than a pod (a VM, a StatefulSet member), named by the
//! `ipam-claim-reference` selection key (§4.1.2.1.11).
//!
//! Status keys beyond §8.2 (`ownerPod`, `conditions`) are those of the
//! k8snetworkplumbingwg/ipamclaims API that implementations use.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::error::SpecError;
use super::go_json::{
    decode_failure, parse_ip_with_prefix, GoBool, GoList, GoMap, GoObj, GoStr, GoStrs,
};
use super::meta::ObjectMeta;
use super::nad::WireObject;
use crate::cni::casefold;
use crate::cni::error::prefix_path;
use crate::cni::names::IfName;

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpamClaimSpec {
    /// The network the allocation is for.
    pub network: GoStr,
    /// The pod interface the allocation is for.
    pub interface: IfName,
}

/// [`IpamClaimSpec`] on the wire, before its interface is checked.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
struct WireSpec {
    network: GoStr,
    interface: GoStr,
}

impl From<IpamClaimSpec> for WireSpec {
    fn from(spec: IpamClaimSpec) -> WireSpec {
        WireSpec {
            network: spec.network,
            interface: GoStr::from(spec.interface.as_str()),
        }
    }
}

/// §8.2 `status`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpamClaimStatus {
    /// Allocated addresses with prefix length (`10.128.20.8/24`). The CRD
    /// requires the key, but a status written before any allocation may
    /// carry null: no addresses.
    #[serde(default)]
    pub ips: GoStrs,
    /// `ownerPod.name`: the pod currently holding the claim.
    #[serde(
        default,
        deserialize_with = "owner_pod_name",
        serialize_with = "owner_pod",
        skip_serializing_if = "Option::is_none"
    )]
    pub owner_pod: Option<String>,
    /// Kubernetes conditions, kept as written.
    #[serde(default, skip_serializing_if = "GoList::is_empty")]
    pub conditions: GoList<Value>,
}

/// An entry of `metadata.ownerReferences`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    pub api_version: GoStr,
    pub kind: GoStr,
    pub name: GoStr,
    pub uid: GoStr,
    pub controller: Option<GoBool>,
    pub block_owner_deletion: Option<GoBool>,
}

/// The claim on the wire. The owner references in its `metadata` are read
/// through [`WireOwners`].
type Wire = WireObject<WireSpec, IpamClaimStatus>;

/// The keys of `metadata` that [`ObjectMeta`] does not keep.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireOwners {
    owner_references: Option<GoList<OwnerReference>>,
}

/// `status.ownerPod`.
#[derive(Serialize, Deserialize)]
struct OwnerPod {
    name: Option<GoStr>,
}

fn owner_pod_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let pod = Option::<GoObj<OwnerPod>>::deserialize(d)?;
    Ok(pod
        .and_then(|p| p.0.name)
        .map(String::from)
        .filter(|n| !n.is_empty()))
}

fn owner_pod<S: Serializer>(name: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    OwnerPod {
        name: name.clone().map(GoStr::from),
    }
    .serialize(s)
}

fn bad(field: impl Into<String>, reason: impl Into<String>) -> SpecError {
    SpecError::invalid(field, reason)
}

/// `s` at `path` must not be empty (Go's zero value passes the decode).
fn non_empty(s: &str, path: &str) -> Result<(), SpecError> {
    if s.is_empty() {
        return Err(bad(path, "must not be empty"));
    }
    Ok(())
}

impl IpamClaim {
    /// A claim with no status yet, as a workload controller creates it.
    pub fn new(metadata: ObjectMeta, network: &str, interface: IfName) -> IpamClaim {
        IpamClaim {
            api_version: API_VERSION.to_string(),
            metadata,
            owner_references: Vec::new(),
            spec: IpamClaimSpec {
                network: network.into(),
                interface,
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
        let (wire, metadata) = Wire::decode(v, &[API_VERSION, API_VERSION_PERSISTENTIP], KIND)?;
        let meta_value = wire.metadata.map(Value::from).unwrap_or_default();
        let owners: WireOwners = casefold::from_value_at(&meta_value).map_err(|e| {
            let (mut field, reason) = decode_failure(e, &meta_value, "");
            prefix_path(&mut field, "metadata");
            bad(field, reason)
        })?;
        let owner_references = owners.owner_references.unwrap_or_default().0;
        for (i, r) in owner_references.iter().enumerate() {
            let path = format!("metadata.ownerReferences[{i}]");
            for (key, value) in [
                ("apiVersion", &r.api_version),
                ("kind", &r.kind),
                ("name", &r.name),
                ("uid", &r.uid),
            ] {
                non_empty(value, &format!("{path}.{key}"))?;
            }
        }

        let spec = wire.spec.ok_or_else(|| bad("spec", "required"))?.0;
        non_empty(&spec.network, "spec.network")?;
        non_empty(&spec.interface, "spec.interface")?;
        let interface = IfName::new(spec.interface.as_str()).map_err(|r| {
            bad(
                "spec.interface",
                format!("{:?} is not a valid interface name: {r}", spec.interface),
            )
        })?;
        let spec = IpamClaimSpec {
            network: spec.network,
            interface,
        };

        if let Some(status) = &wire.status {
            for (i, ip) in status.ips.iter().enumerate() {
                if !matches!(parse_ip_with_prefix(ip), Some((_, Some(_)))) {
                    return Err(bad(
                        format!("status.ips[{i}]"),
                        format!("{ip:?} is not an IP address with a prefix length"),
                    ));
                }
            }
        }
        Ok(IpamClaim {
            api_version: wire
                .api_version
                .map_or_else(|| API_VERSION.into(), String::from),
            metadata,
            owner_references,
            spec,
            status: wire.status.map(|s| s.0),
        })
    }

    pub fn to_value(&self) -> Value {
        let mut metadata = self.metadata.to_value();
        if !self.owner_references.is_empty() {
            metadata["ownerReferences"] =
                serde_json::to_value(&self.owner_references).expect("owner references serialize");
        }
        Wire {
            api_version: Some(self.api_version.as_str().into()),
            kind: Some(KIND.into()),
            metadata: Some(GoMap::object(metadata)),
            spec: Some(GoObj(WireSpec::from(self.spec.clone()))),
            status: self.status.clone().map(GoObj),
        }
        .to_value()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
                interface: IfName::new("pod16367aacb67").unwrap()
            }
        );
        assert_eq!(
            c.status,
            Some(IpamClaimStatus {
                ips: GoStrs(vec!["10.128.20.8/24".into(), "fd10:128:20::8/64".into()]),
                owner_pod: None,
                conditions: GoList::default(),
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
        let new = IpamClaim::new(
            c.metadata.clone(),
            "safenetwork",
            IfName::new("eth1").unwrap(),
        );
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

    #[test]
    fn keys_in_another_case_8_2() {
        // §8.2's keys as the Go clients of the ipamclaims API decode them.
        let c = IpamClaim::from_value(&json!({
            "APIVersion": "k8s.cni.cncf.io/v1alpha1",
            "Kind": "IPAMClaim",
            "Metadata": {"name": "vm-a.tenantred", "OwnerReferences": [
                {"APIVersion": "kubevirt.io/v1", "Kind": "VirtualMachine", "Name": "vm-a",
                 "UID": "u-1", "Controller": true}]},
            "Spec": {"Network": "tenantred", "INTERFACE": "eth1"},
            "Status": {"IPs": ["10.128.20.8/24"], "OwnerPod": {"Name": "p-0"},
                       "Conditions": [{"type": "IPsAllocated"}]}
        }))
        .unwrap();
        assert_eq!(c.metadata.name, "vm-a.tenantred");
        assert_eq!(c.owner_references[0].uid, "u-1");
        assert_eq!(c.owner_references[0].controller, Some(GoBool(true)));
        assert_eq!(
            c.spec,
            IpamClaimSpec {
                network: "tenantred".into(),
                interface: IfName::new("eth1").unwrap()
            }
        );
        let st = c.status.as_ref().unwrap();
        assert_eq!(st.ips, vec!["10.128.20.8/24".to_string()]);
        assert_eq!(st.owner_pod.as_deref(), Some("p-0"));
        assert_eq!(st.conditions.len(), 1);
        // Written back in the spec's spelling.
        assert_eq!(IpamClaim::from_value(&c.to_value()).unwrap(), c);
        assert_eq!(c.to_value()["spec"]["network"], "tenantred");
        // A `Kind` key is the kind, so it is checked.
        let err = IpamClaim::from_value(&json!({"Kind": "Pod", "metadata": {"name": "a"},
                                                "spec": {"network": "n", "interface": "eth1"}}))
        .unwrap_err();
        assert_eq!(err.to_string(), "kind: must be \"IPAMClaim\", got \"Pod\"");
        let err = IpamClaim::from_value(&json!({"metadata": {"name": "a"},
                                                "Spec": {"Network": 5, "interface": "eth1"}}))
        .unwrap_err();
        assert_eq!(err.to_string(), "Spec.Network: must be a string, got 5");
    }
}
