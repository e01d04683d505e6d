//! The semantics, case by case, after the upstream NetworkPolicy
//! conformance cases that apply to one network (test/e2e/network/netpol:
//! default deny, allow from pods / namespaces / both, ipBlock with except,
//! named and ranged ports, stacked policies, egress), plus what the
//! multi-network spec adds: only the `policy-for` networks, and peers'
//! addresses on the same network only.

use super::*;
use crate::netpolicy::spec::Policy;
use serde_json::{json, Value};

const NET: &str = "ns1/blue";
const OTHER_NET: &str = "ns1/red";

fn pod(ns: &str, name: &str, labels: &[(&str, &str)], blue: &str, red: &str) -> PodView {
    let mut attachments = vec![Attachment {
        network: NET.into(),
        interface: Some("net1".parse().unwrap()),
        ips: vec![blue.parse().unwrap()],
    }];
    if !red.is_empty() {
        attachments.push(Attachment {
            network: OTHER_NET.into(),
            interface: Some("net2".parse().unwrap()),
            ips: vec![red.parse().unwrap()],
        });
    }
    PodView {
        namespace: ns.into(),
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        attachments,
        named_ports: BTreeMap::from([("http".to_string(), (Protocol::Tcp, 8080))]),
    }
}

fn policy(ns: &str, name: &str, networks: &str, spec: Value) -> Policy {
    Policy::from_value(&json!({"metadata": {"namespace": ns, "name": name,
        "annotations": {"k8s.v1.cni.cncf.io/policy-for": networks}}, "spec": spec}))
    .unwrap()
}

struct Case {
    pods: Vec<PodView>,
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
    policies: Vec<Policy>,
}

impl Case {
    fn new(policies: Vec<Policy>) -> Case {
        Case {
            pods: vec![
                pod(
                    "ns1",
                    "server",
                    &[("app", "server")],
                    "10.0.0.1",
                    "10.9.0.1",
                ),
                pod(
                    "ns1",
                    "client",
                    &[("app", "client")],
                    "10.0.0.2",
                    "10.9.0.2",
                ),
                pod("ns2", "client", &[("app", "client")], "10.0.0.3", ""),
                pod("ns2", "other", &[("app", "other")], "10.0.0.4", ""),
            ],
            namespaces: BTreeMap::from([
                (
                    "ns1".to_string(),
                    BTreeMap::from([("team".into(), "a".into())]),
                ),
                (
                    "ns2".to_string(),
                    BTreeMap::from([("team".into(), "b".into())]),
                ),
            ]),
            policies,
        }
    }

    fn world(&self) -> World<'_> {
        World {
            pods: &self.pods,
            namespaces: &self.namespaces,
            policies: &self.policies,
        }
    }

    /// The server's interface policies.
    fn server(&self) -> Vec<InterfacePolicy> {
        self.world().interface_policies(&self.pods[0])
    }

    /// Whether the server's `iface` lets `from` in on `port`/TCP.
    fn admits(&self, iface: &str, from: &str, port: u16) -> bool {
        let from: IpAddr = from.parse().unwrap();
        let Some(ip) = self
            .server()
            .into_iter()
            .find(|p| p.interface.as_deref() == Some(iface))
        else {
            return true; // not selected: left alone
        };
        let Some(allowed) = ip.ingress else {
            return true;
        };
        allowed.iter().any(|a| {
            let peer = match &a.peers {
                Peers::Any => true,
                Peers::Only(m) => m.iter().any(|m| match m {
                    PeerMatch::Host(h) => *h == from,
                    PeerMatch::Block { cidr, except } => {
                        cidr.contains(from) && !except.iter().any(|e| e.contains(from))
                    }
                }),
            };
            let port = match &a.ports {
                Ports::Any => true,
                Ports::Only(p) => p.iter().any(|p| {
                    p.protocol == Protocol::Tcp
                        && p.range.is_none_or(|(s, e)| (s..=e).contains(&port))
                }),
            };
            peer && port
        })
    }
}

const SERVER: &str = "{\"matchLabels\": {\"app\": \"server\"}}";

fn selector() -> Value {
    serde_json::from_str(SERVER).unwrap()
}

/// A policy `ns1/p` for blue that selects the server, with `rules` as its
/// ingress.
fn server_ingress(rules: Value) -> Case {
    Case::new(vec![policy(
        "ns1",
        "p",
        "blue",
        json!({"podSelector": selector(), "ingress": rules}),
    )])
}

#[test]
fn default_deny_ingress_isolates_only_the_policy_for_network() {
    let c = Case::new(vec![policy(
        "ns1",
        "deny",
        "blue",
        json!({"podSelector": {}, "policyTypes": ["Ingress"]}),
    )]);
    let server = c.server();
    assert_eq!(server.len(), 1);
    assert_eq!(server[0].interface.as_deref(), Some("net1"));
    assert_eq!(server[0].ingress, Some(vec![]));
    assert_eq!(server[0].egress, None);
    assert!(!c.admits("net1", "10.0.0.2", 80));
    assert!(c.admits("net2", "10.9.0.2", 80), "red is left alone");
}

#[test]
fn a_policy_for_another_network_or_namespace_selects_nothing_here() {
    let c = Case::new(vec![
        policy("ns1", "red-only", "red", json!({"podSelector": {}})),
        policy("ns2", "elsewhere", "ns1/blue", json!({"podSelector": {}})),
    ]);
    assert!(c.admits("net1", "10.0.0.4", 80));
    assert_eq!(c.server().len(), 1, "only red, in ns1");
    assert_eq!(c.server()[0].interface.as_deref(), Some("net2"));
}

#[test]
fn allow_from_pods_namespaces_and_both() {
    // podSelector alone: pods of the policy's namespace.
    let c =
        server_ingress(json!([{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}]}]));
    assert!(c.admits("net1", "10.0.0.2", 80));
    assert!(!c.admits("net1", "10.0.0.3", 80), "a client of ns2");
    // The peer's address on the same network only: not its red one.
    assert!(!c.admits("net1", "10.9.0.2", 80));

    // namespaceSelector alone: every pod of those namespaces.
    let c =
        server_ingress(json!([{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}]}]));
    assert!(c.admits("net1", "10.0.0.3", 80));
    assert!(c.admits("net1", "10.0.0.4", 80));
    assert!(!c.admits("net1", "10.0.0.2", 80));

    // Both in one peer: AND.
    let c = server_ingress(
        json!([{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}},
                               "podSelector": {"matchLabels": {"app": "client"}}}]}]),
    );
    assert!(c.admits("net1", "10.0.0.3", 80));
    assert!(!c.admits("net1", "10.0.0.4", 80));
    assert!(!c.admits("net1", "10.0.0.2", 80));

    // Two peers: OR.
    let c = server_ingress(
        json!([{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}},
                              {"podSelector": {"matchLabels": {"app": "client"}}}]}]),
    );
    for ip in ["10.0.0.2", "10.0.0.3", "10.0.0.4"] {
        assert!(c.admits("net1", ip, 80), "{ip}");
    }
}

#[test]
fn ip_block_with_except() {
    let c = server_ingress(
        json!([{"from": [{"ipBlock": {"cidr": "10.0.0.0/24", "except": ["10.0.0.3/32"]}}]}]),
    );
    assert!(c.admits("net1", "10.0.0.2", 80));
    assert!(
        c.admits("net1", "10.0.0.200", 80),
        "any address of the block"
    );
    assert!(!c.admits("net1", "10.0.0.3", 80));
    assert!(!c.admits("net1", "10.0.1.1", 80));
}

#[test]
fn numbered_named_and_ranged_ports() {
    let c = server_ingress(
        json!([{"ports": [{"port": 80}, {"port": "http"}, {"port": 9000, "endPort": 9002},
                               {"protocol": "UDP", "port": 53}]}]),
    );
    for (port, ok) in [
        (80, true),
        (8080, true),
        (9001, true),
        (9003, false),
        (53, false),
    ] {
        assert_eq!(c.admits("net1", "10.0.0.2", port), ok, "{port}");
    }
    // A name the selected pod does not have matches nothing.
    let c = server_ingress(json!([{"ports": [{"port": "metrics"}]}]));
    assert!(!c.admits("net1", "10.0.0.2", 8080));
    assert_eq!(
        c.server()[0].ingress,
        Some(vec![Allow {
            peers: Peers::Any,
            ports: Ports::Only(vec![])
        }])
    );
}

#[test]
fn stacked_policies_are_ored() {
    let c = Case::new(vec![
        policy(
            "ns1",
            "a",
            "blue",
            json!({"podSelector": selector(),
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}],
                         "ports": [{"port": 80}]}]}),
        ),
        policy(
            "ns1",
            "b",
            "blue",
            json!({"podSelector": {},
            "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.4/32"}}]}]}),
        ),
    ]);
    assert_eq!(c.server()[0].policies, ["ns1/a", "ns1/b"]);
    assert!(c.admits("net1", "10.0.0.2", 80));
    assert!(!c.admits("net1", "10.0.0.2", 81));
    assert!(c.admits("net1", "10.0.0.4", 81));
    assert!(!c.admits("net1", "10.0.0.3", 80));
}

#[test]
fn egress_names_each_peers_own_ports_and_addresses_on_the_network() {
    let mut c = Case::new(vec![policy(
        "ns1",
        "p",
        "blue",
        json!({"podSelector": selector(),
        "policyTypes": ["Egress"],
        "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "client"}}}],
                    "ports": [{"port": "http"}]}]}),
    )]);
    c.pods[1].named_ports = BTreeMap::from([("http".to_string(), (Protocol::Tcp, 8000))]);
    let server = c.server();
    assert_eq!(server[0].ingress, None);
    assert_eq!(
        server[0].egress,
        Some(vec![Allow {
            peers: Peers::Only(vec![PeerMatch::Host("10.0.0.2".parse().unwrap())]),
            ports: Ports::Only(vec![PortMatch {
                protocol: Protocol::Tcp,
                range: Some((8000, 8000))
            }]),
        }])
    );
    // Egress rules of a policy without Egress in policyTypes do nothing.
    let c = Case::new(vec![policy(
        "ns1",
        "p",
        "blue",
        json!({"podSelector": selector(),
        "policyTypes": ["Ingress"], "ingress": [{}],
        "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}),
    )]);
    assert_eq!(c.server()[0].egress, None);
    assert_eq!(
        c.server()[0].ingress,
        Some(vec![Allow {
            peers: Peers::Any,
            ports: Ports::Any
        }])
    );
}

#[test]
fn a_selector_that_matches_no_pod_allows_nothing() {
    let c =
        server_ingress(json!([{"from": [{"podSelector": {"matchLabels": {"app": "nobody"}}}]}]));
    assert!(!c.admits("net1", "10.0.0.2", 80));
    assert_eq!(
        c.server()[0].ingress,
        Some(vec![Allow {
            peers: Peers::Only(vec![]),
            ports: Ports::Any
        }])
    );
}
