//! The `MultiNetworkPolicy` object (`k8s.cni.cncf.io`, v1beta1 and
//! v1beta2, which adds `endPort`): NetworkPolicy's spec, tied to NADs by
//! the `k8s.v1.cni.cncf.io/policy-for` annotation. One serde type reads and
//! writes both versions; [`Policy::from_value`] checks what the CRD's
//! schema leaves open, naming the field.

use std::str::FromStr;

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::selector::LabelSelector;
use super::PolicyError;

/// The NADs a policy is for: `name` (the policy's namespace) or
/// `namespace/name`, comma separated.
pub const POLICY_FOR_ANNOTATION: &str = "k8s.v1.cni.cncf.io/policy-for";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicySpec {
    #[serde(default)]
    pub pod_selector: LabelSelector,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<IngressRule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<EgressRule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_types: Vec<PolicyType>,
}

/// An ingress rule: the peers it allows traffic from, on which ports.
/// Empty peers allow every peer, empty ports every port.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngressRule {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PolicyPort>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from: Vec<Peer>,
}

/// An egress rule: the peers it allows traffic to, on which ports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressRule {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PolicyPort>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<Peer>,
}

/// A rule of either direction: its ports and its peers.
#[derive(Debug, Clone, Copy)]
pub struct RuleRef<'a> {
    pub ports: &'a [PolicyPort],
    pub peers: &'a [Peer],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PolicyType {
    Ingress,
    Egress,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Protocol {
    #[serde(rename = "TCP")]
    Tcp,
    #[serde(rename = "UDP")]
    Udp,
    #[serde(rename = "SCTP")]
    Sctp,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PortRef {
    Number(i64),
    Name(String),
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyPort {
    /// TCP when absent.
    #[serde(default)]
    pub protocol: Option<Protocol>,
    /// Every port of the protocol when absent.
    #[serde(default)]
    pub port: Option<PortRef>,
    /// v1beta2: `port` to `endPort`, both included.
    #[serde(default)]
    pub end_port: Option<i64>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Peer {
    #[serde(default)]
    pub pod_selector: Option<LabelSelector>,
    #[serde(default)]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(default)]
    pub ip_block: Option<IpBlock>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpBlock {
    pub cidr: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub except: Vec<String>,
}

/// A policy as plexus enforces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub namespace: String,
    pub name: String,
    /// The NADs of `policy-for`, each `namespace/name`; none when the
    /// annotation is missing (the policy then applies to no network, as
    /// multi-networkpolicy does).
    pub networks: Vec<String>,
    pub spec: PolicySpec,
}

impl PolicySpec {
    /// `policyTypes`, or NetworkPolicy's default when it is empty: Ingress,
    /// and Egress when there are egress rules.
    pub fn types(&self) -> Vec<PolicyType> {
        if !self.policy_types.is_empty() {
            let mut types = self.policy_types.clone();
            types.sort();
            types.dedup();
            return types;
        }
        let mut types = vec![PolicyType::Ingress];
        if !self.egress.is_empty() {
            types.push(PolicyType::Egress);
        }
        types
    }
}

impl PolicySpec {
    /// The rules of `direction`.
    pub fn rules(&self, direction: PolicyType) -> Vec<RuleRef<'_>> {
        match direction {
            PolicyType::Ingress => self
                .ingress
                .iter()
                .map(|r| RuleRef {
                    ports: &r.ports,
                    peers: &r.from,
                })
                .collect(),
            PolicyType::Egress => self
                .egress
                .iter()
                .map(|r| RuleRef {
                    ports: &r.ports,
                    peers: &r.to,
                })
                .collect(),
        }
    }
}

impl Policy {
    /// A MultiNetworkPolicy object as the API server serves it.
    pub fn from_value(object: &Value) -> Result<Policy, PolicyError> {
        let meta = &object["metadata"];
        let text = |field: &str| -> Result<String, PolicyError> {
            meta[field]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .ok_or_else(|| PolicyError::new(format!("metadata.{field}"), "missing"))
        };
        let namespace = text("namespace")?;
        let name = text("name")?;
        let spec: PolicySpec = serde_json::from_value(object["spec"].clone())
            .map_err(|e| PolicyError::new("spec", e.to_string()))?;
        let networks = match meta["annotations"][POLICY_FOR_ANNOTATION].as_str() {
            None => Vec::new(),
            Some(list) => policy_for(list, &namespace)?,
        };
        spec.validate()?;
        Ok(Policy {
            namespace,
            name,
            networks,
            spec,
        })
    }
}

/// The `policy-for` list, each entry `namespace/name`.
fn policy_for(list: &str, namespace: &str) -> Result<Vec<String>, PolicyError> {
    let field = || format!("metadata.annotations[{POLICY_FOR_ANNOTATION}]");
    let mut networks = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let full = match entry.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                entry.to_string()
            }
            None => format!("{namespace}/{entry}"),
            _ => {
                return Err(PolicyError::new(
                    field(),
                    format!("{entry:?} is neither NAME nor NAMESPACE/NAME"),
                ))
            }
        };
        networks.push(full);
    }
    if networks.is_empty() {
        return Err(PolicyError::new(field(), "names no network"));
    }
    Ok(networks)
}

impl PolicySpec {
    fn validate(&self) -> Result<(), PolicyError> {
        self.pod_selector.validate("spec.podSelector")?;
        for (direction, kind, peers) in [
            (PolicyType::Ingress, "ingress", "from"),
            (PolicyType::Egress, "egress", "to"),
        ] {
            for (i, rule) in self.rules(direction).into_iter().enumerate() {
                let at = format!("spec.{kind}[{i}]");
                for (j, port) in rule.ports.iter().enumerate() {
                    port.validate(&format!("{at}.ports[{j}]"))?;
                }
                for (j, peer) in rule.peers.iter().enumerate() {
                    peer.validate(&format!("{at}.{peers}[{j}]"))?;
                }
            }
        }
        Ok(())
    }
}

impl PolicyPort {
    fn validate(&self, at: &str) -> Result<(), PolicyError> {
        let in_range = |n: i64| (1..=65535).contains(&n);
        match (&self.port, self.end_port) {
            (Some(PortRef::Number(n)), _) if !in_range(*n) => Err(PolicyError::new(
                format!("{at}.port"),
                format!("{n} is not a port (1-65535)"),
            )),
            (Some(PortRef::Name(name)), _) if name.is_empty() || name.len() > 15 => Err(
                PolicyError::new(format!("{at}.port"), format!("{name:?} is not a port name")),
            ),
            (Some(PortRef::Number(n)), Some(end)) if end < *n || !in_range(end) => {
                Err(PolicyError::new(
                    format!("{at}.endPort"),
                    format!("{end} must be a port at least port ({n})"),
                ))
            }
            (_, Some(_)) if !matches!(self.port, Some(PortRef::Number(_))) => Err(
                PolicyError::new(format!("{at}.endPort"), "needs a numbered port"),
            ),
            _ => Ok(()),
        }
    }
}

impl Peer {
    fn validate(&self, at: &str) -> Result<(), PolicyError> {
        let selectors = self.pod_selector.is_some() || self.namespace_selector.is_some();
        match &self.ip_block {
            Some(_) if selectors => Err(PolicyError::new(
                at,
                "ipBlock cannot be given with podSelector or namespaceSelector",
            )),
            Some(block) => block.validate(&format!("{at}.ipBlock")),
            None if !selectors => Err(PolicyError::new(
                at,
                "names no peer: give podSelector, namespaceSelector or ipBlock",
            )),
            None => {
                if let Some(s) = &self.pod_selector {
                    s.validate(&format!("{at}.podSelector"))?;
                }
                if let Some(s) = &self.namespace_selector {
                    s.validate(&format!("{at}.namespaceSelector"))?;
                }
                Ok(())
            }
        }
    }
}

impl IpBlock {
    /// The block and its exceptions, each inside it and of its family.
    pub fn networks(&self, at: &str) -> Result<(IpNetwork, Vec<IpNetwork>), PolicyError> {
        let cidr = IpNetwork::from_str(&self.cidr)
            .map_err(|e| PolicyError::new(format!("{at}.cidr"), format!("{:?}: {e}", self.cidr)))?;
        let mut except = Vec::new();
        for (i, text) in self.except.iter().enumerate() {
            let field = format!("{at}.except[{i}]");
            let net = IpNetwork::from_str(text)
                .map_err(|e| PolicyError::new(&field, format!("{text:?}: {e}")))?;
            if !cidr.contains(net.network()) || net.prefix() < cidr.prefix() {
                return Err(PolicyError::new(
                    field,
                    format!("{text} is not inside {}", self.cidr),
                ));
            }
            except.push(net);
        }
        Ok((cidr, except))
    }

    fn validate(&self, at: &str) -> Result<(), PolicyError> {
        self.networks(at).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(annotation: Option<&str>, spec: Value) -> Value {
        let mut meta = json!({"name": "p", "namespace": "ns1"});
        if let Some(a) = annotation {
            meta["annotations"] = json!({ POLICY_FOR_ANNOTATION: a });
        }
        json!({"apiVersion": "k8s.cni.cncf.io/v1beta2", "kind": "MultiNetworkPolicy",
               "metadata": meta, "spec": spec})
    }

    #[test]
    fn policy_for_names_nads_in_either_form() {
        let p = Policy::from_value(&object(Some("net-a, other/net-b"), json!({}))).unwrap();
        assert_eq!(p.networks, ["ns1/net-a", "other/net-b"]);
        let p = Policy::from_value(&object(None, json!({}))).unwrap();
        assert!(p.networks.is_empty());
        let e = Policy::from_value(&object(Some("a/b/c"), json!({}))).unwrap_err();
        assert_eq!(
            e.field,
            format!("metadata.annotations[{POLICY_FOR_ANNOTATION}]")
        );
        assert!(Policy::from_value(&object(Some(" , "), json!({}))).is_err());
    }

    #[test]
    fn policy_types_default_as_networkpolicys() {
        let spec: PolicySpec = serde_json::from_value(json!({})).unwrap();
        assert_eq!(spec.types(), [PolicyType::Ingress]);
        let spec: PolicySpec = serde_json::from_value(json!({"egress": [{}]})).unwrap();
        assert_eq!(spec.types(), [PolicyType::Ingress, PolicyType::Egress]);
        let spec: PolicySpec =
            serde_json::from_value(json!({"policyTypes": ["Egress"], "ingress": [{}]})).unwrap();
        assert_eq!(spec.types(), [PolicyType::Egress]);
    }

    #[test]
    fn v1beta1_and_v1beta2_read_alike_and_round_trip() {
        let spec = json!({"podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}],
                         "ports": [{"protocol": "UDP", "port": 53},
                                   {"port": "http"},
                                   {"port": 8000, "endPort": 8080}]}],
            "egress": [{"to": [{"namespaceSelector": {}}]}],
            "policyTypes": ["Ingress", "Egress"]});
        let p = Policy::from_value(&object(Some("net-a"), spec.clone())).unwrap();
        assert_eq!(p.spec.ingress[0].ports[2].end_port, Some(8080));
        assert_eq!(p.spec.egress[0].to.len(), 1);
        let back = serde_json::to_value(&p.spec).unwrap();
        let again: PolicySpec = serde_json::from_value(back).unwrap();
        assert_eq!(again, p.spec);
    }

    #[test]
    fn bad_specs_name_the_field() {
        let cases = [
            (
                json!({"ingress": [{"ports": [{"port": 0}]}]}),
                "spec.ingress[0].ports[0].port",
            ),
            (
                json!({"ingress": [{"ports": [{"port": 90, "endPort": 80}]}]}),
                "spec.ingress[0].ports[0].endPort",
            ),
            (
                json!({"ingress": [{"ports": [{"port": "http", "endPort": 80}]}]}),
                "spec.ingress[0].ports[0].endPort",
            ),
            (json!({"egress": [{"to": [{}]}]}), "spec.egress[0].to[0]"),
            (
                json!({"egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}]}),
                "spec.egress[0].to[0]",
            ),
            (
                json!({"ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]}),
                "spec.ingress[0].from[0].ipBlock.cidr",
            ),
            (
                json!({"ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.2.0.0/24"]}}]}]}),
                "spec.ingress[0].from[0].ipBlock.except[0]",
            ),
            (
                json!({"ingress": [{"ports": [{"protocol": "ICMP"}]}]}),
                "spec",
            ),
        ];
        for (spec, field) in cases {
            let e = Policy::from_value(&object(Some("n"), spec.clone())).unwrap_err();
            assert_eq!(e.field, field, "{spec}: {e}");
        }
    }
}
