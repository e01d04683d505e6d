//! Where pods and NetworkAttachmentDefinitions come from when plexus runs as a
//! plugin: a directory of manifests (the embedded default, tests, nodes
//! without an API server) or the Kubernetes API. The planner only sees the
//! [`NadSource`] and [`Cluster`] traits.

pub mod api;
pub mod client;
pub mod credentials;
pub mod dir;
pub mod dra;
pub mod dra_driver;
pub mod error;
pub mod events;
pub mod kube;
pub mod lease;
pub mod outbox;
pub mod policy_watch;
mod reconnect;
pub mod watch;

use std::collections::BTreeMap;
use std::rc::Rc;

use crate::netattach::ipamclaim::IpamClaim;
use crate::netattach::nad::NetworkAttachmentDefinition;
use crate::netattach::pod::Pod;
pub use error::ClusterError;

/// Where NetworkAttachmentDefinitions are looked up.
pub trait NadSource {
    /// The NAD `namespace/name`; `Ok(None)` when it does not exist, an error
    /// when the source could not say (the API server refused or timed out).
    fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<&NetworkAttachmentDefinition>, ClusterError>;
}

impl NadSource for BTreeMap<(String, String), NetworkAttachmentDefinition> {
    fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<&NetworkAttachmentDefinition>, ClusterError> {
        Ok(BTreeMap::get(
            self,
            &(namespace.to_string(), name.to_string()),
        ))
    }
}

/// Where the devices of a pod's ResourceClaims are read.
pub trait DraSource {
    /// The devices `pod`'s claims were allocated that carry the Multus
    /// attributes, and the warnings of those skipped.
    fn claimed_devices(&self, pod: &Pod) -> Result<crate::dra::ClaimedDevices, ClusterError>;

    /// The networks of the devices `pod`'s claims were allocated from
    /// plexus's own DRA driver and prepared on this node with a network
    /// configuration (the daemon's driver knows them; none elsewhere).
    fn claimed_networks(&self, _pod: &Pod) -> Vec<crate::dra::driver::claimed::ClaimedNetwork> {
        Vec::new()
    }
}

/// A read-only view of the cluster's pods and NADs.
pub trait Cluster: NadSource {
    /// The pod `namespace/name`; `Ok(None)` when it does not exist.
    fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, ClusterError>;

    /// The pod read anew, past any cache: for when the view's copy is not
    /// the pod kubelet named (its uid differs; the cache may lag a
    /// re-creation).
    fn pod_fresh(&self, namespace: &str, name: &str) -> Result<Option<Pod>, ClusterError> {
        self.pod(namespace, name)
    }

    /// The IPAMClaim `namespace/name` (multi-net-spec §8); `Ok(None)` when it
    /// does not exist.
    fn ipam_claim(&self, namespace: &str, name: &str) -> Result<Option<IpamClaim>, ClusterError>;

    /// Read the NADs `keys` ahead, all at once where the source can, so
    /// that [`NadSource::get`] finds them: a hint, whose failures are left
    /// for `get` to meet and report. Sources that hold every NAD do nothing.
    fn prefetch_nads(&self, _keys: &[(String, String)]) {}

    /// Where the pod's ResourceClaims are read (DRA, `crate::dra`); `None`
    /// for a source without them (a manifest directory).
    fn dra(&self) -> Option<&dyn DraSource> {
        None
    }
}

/// Where an ADD's outcome is written: network-status (§5), the bound
/// IPAMClaims' status (§8.2) and events. The API server's client is one,
/// writing synchronously or through the daemon's outbox; a manifest
/// directory has none.
pub trait Publisher {
    /// Write everything `publication` holds (see [`kube::KubeCluster::publish`]).
    fn publish(&self, publication: &kube::Publication) -> Result<kube::Published, ClusterError>;
    /// Post `events` about `pod`, best effort: what was not posted, and why.
    fn post_events(&self, pod: &Pod, events: &[events::PodEvent]) -> Vec<String>;
}

/// What a call reads the cluster through, and where it writes back, when
/// anywhere: the same client for both on an API server.
pub struct Opened {
    pub view: Rc<dyn Cluster>,
    pub publisher: Option<Rc<dyn Publisher>>,
}

impl Opened {
    /// A view with nowhere to write back (a manifest directory, nothing).
    pub fn read_only(view: impl Cluster + 'static) -> Opened {
        Opened {
            view: Rc::new(view),
            publisher: None,
        }
    }

    /// An API server's client, as view and publisher.
    pub fn api(cluster: kube::KubeCluster) -> Opened {
        let cluster = Rc::new(cluster);
        Opened {
            view: cluster.clone(),
            publisher: Some(cluster),
        }
    }
}
