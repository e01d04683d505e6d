//! The pod's ResourceClaims and its node's ResourceSlices (DRA,
//! `resource.k8s.io/v1`) read from the API server for the Multus contract
//! (`crate::dra`), only when an attachment of the pod needs a device:
//!
//! - thin mode (a plugin process): one LIST of the claims of the pod's
//!   namespace, and when one of the pod's claims was allocated a device,
//!   one LIST of the slices of the pod's node (a field selector on
//!   `spec.nodeName`). An API server that does not serve
//!   `resource.k8s.io/v1` (before 1.34) answers the first LIST with 404:
//!   the pod has no claims, and nothing else is asked;
//! - thick mode (the daemon): watch caches (`super::watch`'s
//!   `DraWatches`), as the NADs': the claims of
//!   each namespace from its first need, and the node's slices from the
//!   first need of any. Whether the API server serves the group is asked
//!   once (a LIST of at most one of the node's slices); if not, the daemon
//!   says so once in its log and never asks again (a cluster upgraded to
//!   1.34 is seen when the daemon restarts, as its DaemonSet's update
//!   restarts it).
//!
//! An API server that cannot select slices by `spec.nodeName` (the test
//! kit's 1.20 server, which serves the group as custom resources) answers
//! 400; then every slice is listed and those of other nodes left out here.

use kube::api::{Api, DynamicObject, ListParams};

use super::error::ClusterError;
use super::kube::KubeCluster;
use super::watch::{claims_resource, on_node, selector_refused, slices_resource, Served};
use super::DraSource;
use crate::dra::{self, ClaimedDevices, PodClaims, Slices};
use crate::netattach::pod::Pod;

impl KubeCluster {
    /// Every claim of `namespace` (one LIST); `None` when the API server
    /// does not serve the group.
    fn list_claims(&self, namespace: &str) -> Result<Option<Vec<serde_json::Value>>, ClusterError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.api_client().clone(), namespace, &claims_resource());
        let object = format!("ResourceClaims of namespace {namespace}");
        match self.read(&object, api.list(&ListParams::default())) {
            Ok(list) => Ok(Some(to_values(list.items))),
            Err(e) if e.status() == Some(404) => Ok(None),
            // A role from before DRA (a Multus one, or plexus's own of an
            // earlier release) must not fail every device-backed ADD: the
            // devices then come from kubelet alone, as before.
            Err(e) if e.status() == Some(403) => {
                tracing::warn!(
                    "{object} may not be listed ({e}): the pod's ResourceClaims are not read;                      grant list and watch on resourceclaims and resourceslices (deploy/rbac.yaml)"
                );
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The slices of `node` (every slice when it is not known), and the
    /// node to keep of them when the API server could not select by node.
    fn list_slices(
        &self,
        node: Option<&str>,
    ) -> Result<(Vec<serde_json::Value>, bool), ClusterError> {
        let api: Api<DynamicObject> = Api::all_with(self.api_client().clone(), &slices_resource());
        let object = match node {
            Some(node) => format!("ResourceSlices of node {node}"),
            None => "ResourceSlices".to_string(),
        };
        let all = ListParams::default();
        if let Some(node) = node {
            match self.read(&object, api.list(&all.clone().fields(&on_node(node)))) {
                Ok(list) => return Ok((to_values(list.items), false)),
                Err(e) if selector_refused(&e) => {}
                Err(e) => return Err(e),
            }
        }
        match self.read(&object, api.list(&all)) {
            Ok(list) => Ok((to_values(list.items), node.is_some())),
            Err(e) if e.status() == Some(404) => Ok((Vec::new(), false)),
            Err(e) => Err(e),
        }
    }
}

fn to_values(items: Vec<DynamicObject>) -> Vec<serde_json::Value> {
    items
        .into_iter()
        .filter_map(|o| serde_json::to_value(o).ok())
        .collect()
}

impl DraSource for KubeCluster {
    fn claimed_networks(&self, pod: &Pod) -> Vec<crate::dra::driver::claimed::ClaimedNetwork> {
        match (self.prepared(), &pod.uid) {
            (Some(prepared), Some(uid)) => {
                crate::dra::driver::claimed::claimed_networks(&prepared.for_pod(uid))
            }
            _ => Vec::new(),
        }
    }

    fn claimed_devices(&self, pod: &Pod) -> Result<ClaimedDevices, ClusterError> {
        let placement = self.placement(&pod.namespace, &pod.name);
        let named = match placement.as_ref().map(|p| &p.named) {
            Some(Ok(named)) => named.as_slice(),
            Some(Err(e)) => return Err(e.clone().into()),
            None => &[],
        };
        let watched = self.watched();
        let served = match watched {
            Some(w) => w.dra().served()?,
            None => Served::Yes { by_node: true },
        };
        let Served::Yes { by_node } = served else {
            return Ok(ClaimedDevices::default());
        };
        let cached = watched.and_then(|w| w.dra().claims(&pod.namespace));
        let claims = match cached {
            Some(claims) => claims,
            None => match self.list_claims(&pod.namespace)? {
                Some(claims) => claims,
                None => {
                    tracing::debug!("{} is not served: no ResourceClaims", dra::API_VERSION);
                    return Ok(ClaimedDevices::default());
                }
            },
        };
        let key = format!("{}/{}", pod.namespace, pod.name);
        let of_pod = PodClaims {
            pod: &key,
            uid: pod.uid.as_deref(),
            named,
        };
        let mut ours = dra::pods_claims(of_pod, &claims)?;
        dra::driver::opaque::drop_configured(&mut ours);
        if ours
            .iter()
            .all(|c| c.results.iter().flatten().next().is_none())
        {
            return Ok(ClaimedDevices::default());
        }
        let node = match watched {
            Some(w) => Some(w.node().to_string()),
            None => placement.and_then(|p| p.node),
        };
        let cached = watched.and_then(|w| w.dra().slices(by_node));
        let (raw, keep_node) = match cached {
            Some(slices) => (slices, !by_node),
            None => self.list_slices(node.as_deref())?,
        };
        let slices = Slices {
            raw: &raw,
            node: node.as_deref().filter(|_| keep_node),
        };
        Ok(dra::claimed_devices(&ours, &slices)?)
    }
}
