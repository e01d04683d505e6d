//! MultiNetworkPolicy (issue 35): the `k8s.cni.cncf.io` policy object
//! ([`spec`]), label selectors ([`selector`]), pods as policy sees them
//! ([`world`]), which pods a node must know as peers ([`peers`]), what
//! policies mean for a pod's interfaces ([`resolve`]),
//! and those as an nftables table in the pod's namespace ([`render`]).
//! The daemon's enforcer (`commands::daemon::netpolicy`) keeps the tables
//! current; README "MultiNetworkPolicy" says what users get.

pub mod peers;
pub mod render;
pub mod resolve;
pub mod selector;
pub mod spec;
pub mod world;

/// A policy the API server holds that plexus cannot read, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct PolicyError {
    pub field: String,
    pub reason: String,
}

impl PolicyError {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> PolicyError {
        PolicyError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}
