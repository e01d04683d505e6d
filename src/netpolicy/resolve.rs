//! What MultiNetworkPolicies mean for one pod's interfaces: NetworkPolicy's
//! semantics, on the networks each policy is `policy-for` only.
//!
//! - A policy selects the pods of its namespace that its `podSelector`
//!   matches, on each of its networks the pod is attached to; the pod's
//!   other interfaces are left alone.
//! - A selected interface is isolated in each direction a selecting policy
//!   names (`policyTypes`): only what one of their rules allows passes, the
//!   rules of every such policy ORed (stacked policies add up).
//! - A rule's peers are pods (by `podSelector` in the policy's namespace,
//!   by `namespaceSelector`, or both at once: pods of matching namespaces
//!   matching the pod selector) resolved to the addresses they hold **on
//!   every network the policy names** (`policy-for`), as
//!   multi-networkpolicy-iptables counts them (`pkg/server/policyrules.go`:
//!   a peer's interfaces filtered by `CheckPolicyNetwork(policyNetworks)`),
//!   so NADs of several namespaces on one L2 can name each other's pods;
//!   or an `ipBlock` less its `except`s. No peers allow
//!   every peer; no ports every port.
//! - Ports are numbered (with `endPort`, a range) or named: a name is the
//!   selected pod's container port for ingress, each peer pod's for egress;
//!   a name a pod does not have matches nothing there.
//!
//! Established and related traffic, and IPv6 neighbour discovery, are the
//! data plane's to let through; this module says what is allowed.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::cni::names::IfName;

use super::selector::LabelSelector;
use super::spec::{Peer, Policy, PolicyPort, PolicyType, PortRef, Protocol, RuleRef};

/// A pod as policy sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodView {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub attachments: Vec<Attachment>,
    /// Its containers' named ports.
    pub named_ports: BTreeMap<String, (Protocol, u16)>,
}

/// One of a pod's interfaces on a network (its network-status entry).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attachment {
    /// The NAD, `namespace/name`.
    pub network: String,
    /// `None`: no kernel interface (a DPDK-mode VF has no netdev in the
    /// pod), or its entry names one no interface can have.
    pub interface: Option<IfName>,
    pub ips: Vec<IpAddr>,
}

/// What policy is judged against: every pod with its attachments (of all
/// nodes), every namespace's labels, every policy.
#[derive(Debug, Clone, Copy)]
pub struct World<'a> {
    pub pods: &'a [PodView],
    pub namespaces: &'a BTreeMap<String, BTreeMap<String, String>>,
    pub policies: &'a [Policy],
}

/// What passes one isolated direction of an interface: any of these.
pub type Allowed = Vec<Allow>;

/// One allowance: traffic with a peer among `peers` on a port among
/// `ports`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Allow {
    pub peers: Peers,
    pub ports: Ports,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Peers {
    Any,
    /// Sorted, without repeats; may be empty (a selector that matches no
    /// pod allows nothing).
    Only(Vec<PeerMatch>),
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum PeerMatch {
    Host(IpAddr),
    Block {
        cidr: IpNetwork,
        except: Vec<IpNetwork>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ports {
    Any,
    /// Sorted, without repeats; may be empty (only named ports, none of
    /// which the pod has).
    Only(Vec<PortMatch>),
}

/// A protocol and a port range of it (`None`: every port).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PortMatch {
    pub protocol: Protocol,
    pub range: Option<(u16, u16)>,
}

/// An interface policy selects, and what passes it each way (`None`: that
/// direction is not isolated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfacePolicy {
    /// `None`: an attachment without a kernel interface, which the kernel
    /// cannot filter.
    pub interface: Option<IfName>,
    pub network: String,
    /// The selecting policies, `namespace/name`.
    pub policies: Vec<String>,
    pub ingress: Option<Allowed>,
    pub egress: Option<Allowed>,
}

impl World<'_> {
    /// The interfaces of `pod` some policy selects, and their rules.
    pub fn interface_policies(&self, pod: &PodView) -> Vec<InterfacePolicy> {
        let mut out = Vec::new();
        for attachment in &pod.attachments {
            let selecting: Vec<&Policy> = self
                .policies
                .iter()
                .filter(|p| {
                    p.namespace == pod.namespace
                        && p.networks.contains(&attachment.network)
                        && p.spec.pod_selector.matches(&pod.labels)
                })
                .collect();
            if selecting.is_empty() {
                continue;
            }
            let direction = |d: PolicyType| -> Option<Allowed> {
                let isolating: Vec<&&Policy> = selecting
                    .iter()
                    .filter(|p| p.spec.types().contains(&d))
                    .collect();
                if isolating.is_empty() {
                    return None;
                }
                let mut allowed: Allowed = isolating
                    .iter()
                    .flat_map(|p| {
                        p.spec
                            .rules(d)
                            .into_iter()
                            .flat_map(|rule| self.allows(p, rule, d, pod))
                    })
                    .collect();
                allowed.sort();
                allowed.dedup();
                Some(allowed)
            };
            out.push(InterfacePolicy {
                interface: attachment.interface.clone(),
                network: attachment.network.clone(),
                policies: selecting
                    .iter()
                    .map(|p| format!("{}/{}", p.namespace, p.name))
                    .collect(),
                ingress: direction(PolicyType::Ingress),
                egress: direction(PolicyType::Egress),
            });
        }
        out
    }

    /// What one rule of `policy` allows `pod` (on a network the policy
    /// names), direction `d`.
    fn allows(
        &self,
        policy: &Policy,
        rule: RuleRef<'_>,
        d: PolicyType,
        pod: &PodView,
    ) -> Vec<Allow> {
        let named = rule
            .ports
            .iter()
            .any(|p| matches!(p.port, Some(PortRef::Name(_))));
        // Ingress names the selected pod's ports; egress each peer's, so an
        // egress rule with named ports is an allowance per peer pod.
        if d == PolicyType::Egress && named && !rule.peers.is_empty() {
            let mut out = Vec::new();
            for peer in rule.peers {
                match &peer.ip_block {
                    Some(block) => out.push(Allow {
                        peers: Peers::Only(block_match(block).into_iter().collect()),
                        ports: ports(rule.ports, None),
                    }),
                    None => {
                        for target in self.peer_pods(policy, peer) {
                            out.push(Allow {
                                peers: Peers::Only(hosts(target, &policy.networks)),
                                ports: ports(rule.ports, Some(target)),
                            });
                        }
                    }
                }
            }
            return out;
        }
        let peers = if rule.peers.is_empty() {
            Peers::Any
        } else {
            let mut matches: Vec<PeerMatch> = rule
                .peers
                .iter()
                .flat_map(|peer| match &peer.ip_block {
                    Some(block) => block_match(block).into_iter().collect::<Vec<_>>(),
                    None => self
                        .peer_pods(policy, peer)
                        .into_iter()
                        .flat_map(|p| hosts(p, &policy.networks))
                        .collect(),
                })
                .collect();
            matches.sort();
            matches.dedup();
            Peers::Only(matches)
        };
        let own = (d == PolicyType::Ingress).then_some(pod);
        vec![Allow {
            peers,
            ports: ports(rule.ports, own),
        }]
    }

    /// The pods a selector peer of `policy` names.
    fn peer_pods(&self, policy: &Policy, peer: &Peer) -> Vec<&PodView> {
        let everything = LabelSelector::default();
        let pods = peer.pod_selector.as_ref().unwrap_or(&everything);
        self.pods
            .iter()
            .filter(|p| match &peer.namespace_selector {
                None => p.namespace == policy.namespace,
                Some(ns) => self
                    .namespaces
                    .get(&p.namespace)
                    .is_some_and(|labels| ns.matches(labels)),
            })
            .filter(|p| pods.matches(&p.labels))
            .collect()
    }
}

/// `pod`'s addresses on any of `networks`.
fn hosts(pod: &PodView, networks: &[String]) -> Vec<PeerMatch> {
    pod.attachments
        .iter()
        .filter(|a| networks.contains(&a.network))
        .flat_map(|a| a.ips.iter().map(|ip| PeerMatch::Host(*ip)))
        .collect()
}

/// An ipBlock, as [`Policy::from_value`] checked it (one that is not
/// valid matches nothing).
fn block_match(block: &super::spec::IpBlock) -> Option<PeerMatch> {
    let (cidr, except) = block.networks("ipBlock").ok()?;
    Some(PeerMatch::Block { cidr, except })
}

/// A rule's ports; named ones looked up in `named_by` (none: they match
/// nothing).
fn ports(list: &[PolicyPort], named_by: Option<&PodView>) -> Ports {
    if list.is_empty() {
        return Ports::Any;
    }
    let mut out: Vec<PortMatch> = list
        .iter()
        .filter_map(|p| {
            let protocol = p.protocol.unwrap_or(Protocol::Tcp);
            match &p.port {
                None => Some(PortMatch {
                    protocol,
                    range: None,
                }),
                Some(PortRef::Number(n)) => {
                    let start = u16::try_from(*n).ok()?;
                    let end = p.end_port.map_or(Some(start), |e| u16::try_from(e).ok())?;
                    Some(PortMatch {
                        protocol,
                        range: Some((start, end)),
                    })
                }
                Some(PortRef::Name(name)) => {
                    let (proto, number) = named_by?.named_ports.get(name)?;
                    (*proto == protocol).then_some(PortMatch {
                        protocol,
                        range: Some((*number, *number)),
                    })
                }
            }
        })
        .collect();
    out.sort();
    out.dedup();
    Ports::Only(out)
}

#[cfg(test)]
mod tests;
