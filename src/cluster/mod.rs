//! Where pods and NetworkAttachmentDefinitions come from when plexus runs as a
//! plugin: a directory of manifests (the embedded default, tests, nodes
//! without an API server) or the Kubernetes API. The planner only sees the
//! [`Cluster`] trait.

pub mod api;
pub mod dir;
pub mod events;
pub mod kube;
pub mod outbox;
pub mod watch;

use crate::cni::error::CniError;
use crate::manifest::Pod;
use crate::netattach::ipamclaim::IpamClaim;
use crate::plan::NadSource;

/// A read-only view of the cluster's pods and NADs.
pub trait Cluster: NadSource {
    /// The pod `namespace/name`; `Ok(None)` when it does not exist.
    fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, CniError>;

    /// The pod read anew, past any cache: for when the view's copy is not
    /// the pod kubelet named (its uid differs; the cache may lag a
    /// re-creation).
    fn pod_fresh(&self, namespace: &str, name: &str) -> Result<Option<Pod>, CniError> {
        self.pod(namespace, name)
    }

    /// The IPAMClaim `namespace/name` (multi-net-spec §8); `Ok(None)` when it
    /// does not exist.
    fn ipam_claim(&self, namespace: &str, name: &str) -> Result<Option<IpamClaim>, CniError>;

    /// The API server behind this view, when there is one: where
    /// network-status and events are written.
    fn as_kube(&self) -> Option<&kube::KubeCluster> {
        None
    }
}
