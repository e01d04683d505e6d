//! Which pods of the cluster a node's enforcement must know (issue 46):
//! the peers that the policies selecting this node's pods can name, and
//! no other. The daemon watches each [`PeerScope`] with a server-side label
//! selector, so its memory and traffic follow what its node needs, not the
//! cluster's size.
//!
//! - A policy matters here when it selects an attachment of a pod of this
//!   node ([`selecting`]): the policy's namespace, its `podSelector`, one
//!   of its `policy-for` networks. Other policies' peers are never read.
//! - A peer with a `podSelector` alone names pods of the policy's
//!   namespace: that namespace, that selector.
//! - A peer with a `namespaceSelector` and a non-empty `podSelector` names
//!   pods of any namespace: every namespace, that selector (the namespace's
//!   labels are matched here, as they change without the pods' changing).
//! - A peer with a `namespaceSelector` alone (or an empty `podSelector`)
//!   names every pod of the matching namespaces: each such namespace, no
//!   selector.
//!
//! The scopes select a superset of the peers [`super::resolve`] matches,
//! and it matches exactly: what a node enforces is the same as if it knew
//! every pod.

use std::collections::{BTreeMap, BTreeSet};

use super::resolve::PodView;
use super::selector::LabelSelector;
use super::spec::{Policy, PolicyType};

/// Pods to watch: a namespace (`None`: every namespace) and a label
/// selector in the API server's syntax (`""`: every pod of the scope).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerScope {
    pub namespace: Option<String>,
    pub selector: String,
}

/// The policies that select an attachment of one of `local`, this node's
/// pods.
pub fn selecting<'p>(policies: &'p [Policy], local: &[PodView]) -> Vec<&'p Policy> {
    policies
        .iter()
        .filter(|p| {
            local.iter().any(|pod| {
                pod.namespace == p.namespace
                    && p.spec.pod_selector.matches(&pod.labels)
                    && pod
                        .attachments
                        .iter()
                        .any(|a| p.networks.contains(&a.network))
            })
        })
        .collect()
}

/// The scopes that hold every pod a peer of `policies` can name, given
/// every namespace's labels.
pub fn scopes(
    policies: &[&Policy],
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
) -> BTreeSet<PeerScope> {
    let everything = LabelSelector::default();
    let mut out = BTreeSet::new();
    for policy in policies {
        let peers = [PolicyType::Ingress, PolicyType::Egress]
            .into_iter()
            .flat_map(|d| policy.spec.rules(d))
            .flat_map(|rule| rule.peers);
        for peer in peers.filter(|p| p.ip_block.is_none()) {
            let pods = peer.pod_selector.as_ref().unwrap_or(&everything);
            let Some(selector) = pods.to_query() else {
                continue; // it names no pod
            };
            match &peer.namespace_selector {
                None => {
                    out.insert(PeerScope {
                        namespace: Some(policy.namespace.clone()),
                        selector,
                    });
                }
                Some(_) if !selector.is_empty() => {
                    out.insert(PeerScope {
                        namespace: None,
                        selector,
                    });
                }
                Some(chosen) => out.extend(
                    namespaces
                        .iter()
                        .filter(|(_, labels)| chosen.matches(labels))
                        .map(|(name, _)| PeerScope {
                            namespace: Some(name.clone()),
                            selector: String::new(),
                        }),
                ),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netpolicy::resolve::Attachment;
    use serde_json::json;

    fn policy(namespace: &str, spec: serde_json::Value) -> Policy {
        Policy {
            namespace: namespace.into(),
            name: "p".into(),
            networks: vec![format!("{namespace}/blue")],
            spec: serde_json::from_value(spec).unwrap(),
        }
    }

    fn pod(namespace: &str, labels: &[(&str, &str)], network: &str) -> PodView {
        PodView {
            namespace: namespace.into(),
            name: "x".into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            attachments: vec![Attachment {
                network: network.into(),
                interface: Some("net1".parse().unwrap()),
                ips: vec![],
            }],
            named_ports: Default::default(),
        }
    }

    fn scope(namespace: Option<&str>, selector: &str) -> PeerScope {
        PeerScope {
            namespace: namespace.map(str::to_string),
            selector: selector.into(),
        }
    }

    #[test]
    fn only_policies_selecting_a_pod_here_matter() {
        let db = policy("a", json!({"podSelector": {"matchLabels": {"app": "db"}}}));
        let here = [pod("a", &[("app", "db")], "a/blue")];
        assert_eq!(selecting(std::slice::from_ref(&db), &here).len(), 1);
        let other_label = [pod("a", &[("app", "web")], "a/blue")];
        assert!(selecting(std::slice::from_ref(&db), &other_label).is_empty());
        let other_network = [pod("a", &[("app", "db")], "a/red")];
        assert!(selecting(std::slice::from_ref(&db), &other_network).is_empty());
        let other_namespace = [pod("b", &[("app", "db")], "a/blue")];
        assert!(selecting(std::slice::from_ref(&db), &other_namespace).is_empty());
    }

    #[test]
    fn each_kind_of_peer_its_scope() {
        let p = policy(
            "a",
            json!({"ingress": [{"from": [
                {"podSelector": {"matchLabels": {"role": "client"}}},
                {"namespaceSelector": {"matchLabels": {"team": "x"}},
                 "podSelector": {"matchLabels": {"role": "db"}}},
                {"namespaceSelector": {"matchLabels": {"team": "y"}}},
                {"ipBlock": {"cidr": "10.0.0.0/8"}},
                {"podSelector": {"matchLabels": {"bad key": "v"}}}]}],
                   "egress": [{"to": [{"namespaceSelector": {},
                                       "podSelector": {}}]}]}),
        );
        let namespaces: BTreeMap<String, BTreeMap<String, String>> = [
            ("a", &[("team", "x")][..]),
            ("b", &[("team", "y")][..]),
            ("c", &[][..]),
        ]
        .into_iter()
        .map(|(n, l)| {
            let labels = l.iter().map(|(k, v)| (k.to_string(), v.to_string()));
            (n.to_string(), labels.collect())
        })
        .collect();
        let got = scopes(&[&p], &namespaces);
        let want: BTreeSet<PeerScope> = [
            scope(Some("a"), "role=client"),
            scope(None, "role=db"),
            scope(Some("b"), ""),
            // The egress peer names every pod of every namespace.
            scope(Some("a"), ""),
            scope(Some("c"), ""),
        ]
        .into();
        assert_eq!(got, want);
        // No policy: nothing to watch.
        assert!(scopes(&[], &namespaces).is_empty());
    }
}
