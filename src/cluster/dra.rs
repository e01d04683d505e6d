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
//! - thick mode (the daemon): watch caches, as the NADs': the claims of
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

use std::sync::Mutex;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};

use super::api::bounded;
use super::error::{ApiRequest, ClusterError, Verb};
use super::kube::KubeCluster;
use super::watch::{watch_config, NamespaceWatches, NamespacedWatch, LIST_WAIT};
use crate::dra::{self, ClaimedDevices, NamedClaim, PodClaims, Slices};
use crate::netattach::pod::Pod;

/// Where the devices of a pod's ResourceClaims are read.
pub trait DraSource {
    /// The devices `pod`'s claims were allocated that carry the Multus
    /// attributes, and the warnings of those skipped.
    fn claimed_devices(&self, pod: &Pod) -> Result<ClaimedDevices, ClusterError>;
}

/// What the pod's GET told of it for DRA: its node, and the claims it
/// names itself (or why those fields do not read).
#[derive(Debug, Clone)]
pub(super) struct Placement {
    pub node: Option<String>,
    pub named: Result<Vec<NamedClaim>, dra::DraError>,
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    let gvk = GroupVersionKind::gvk(dra::GROUP, "v1", kind);
    ApiResource::from_gvk_with_plural(&gvk, plural)
}

fn claims_resource() -> ApiResource {
    resource(dra::claim::KIND, "resourceclaims")
}

fn slices_resource() -> ApiResource {
    resource(dra::slice::KIND, "resourceslices")
}

/// The field selector of a node's slices.
fn on_node(node: &str) -> String {
    format!("spec.nodeName={node}")
}

/// An API server's answer to a selection it cannot make (400).
fn selector_refused(e: &ClusterError) -> bool {
    e.status() == Some(400)
}

/// Whether the API server serves `resource.k8s.io/v1`, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    No,
    /// Yes; `by_node`: it selects slices by `spec.nodeName`.
    Yes {
        by_node: bool,
    },
}

/// The daemon's DRA caches (`Watched::dra`).
pub(crate) struct DraWatches {
    client: kube::Client,
    handle: tokio::runtime::Handle,
    node: String,
    served: Mutex<Option<Served>>,
    claims: NamespaceWatches,
    slices: Mutex<Option<NamespacedWatch>>,
}

/// The bound of the one question whether the group is served.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

impl DraWatches {
    pub(super) fn new(
        client: &kube::Client,
        handle: &tokio::runtime::Handle,
        node: &str,
    ) -> DraWatches {
        DraWatches {
            client: client.clone(),
            handle: handle.clone(),
            node: node.to_string(),
            served: Mutex::new(None),
            claims: NamespaceWatches::new(client, handle, claims_resource(), "ResourceClaims"),
            slices: Mutex::new(None),
        }
    }

    /// Whether the group is served, asked on the first call only (a call
    /// thread's blocking wait, never the runtime's); a failure to ask is
    /// the call's and is asked again by the next.
    fn served(&self) -> Result<Served, ClusterError> {
        let mut served = self.served.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = *served {
            return Ok(known);
        }
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &slices_resource());
        let params = ListParams::default().fields(&on_node(&self.node)).limit(1);
        let what = ApiRequest::new(Verb::Get, format!("ResourceSlices of node {}", self.node));
        let answer = self
            .handle
            .block_on(bounded(PROBE_TIMEOUT, what, api.list(&params)));
        let known = match answer {
            Ok(_) => Served::Yes { by_node: true },
            Err(e) if e.status() == Some(404) => {
                tracing::info!(
                    "the API server does not serve {}: pods' ResourceClaims are not read \
                     (Kubernetes 1.34 and later serve it)",
                    dra::API_VERSION
                );
                Served::No
            }
            Err(e) if selector_refused(&e) => Served::Yes { by_node: false },
            Err(e) => return Err(e),
        };
        *served = Some(known);
        Ok(known)
    }

    /// The claims of `namespace` from its watch, once listed; `None`: read
    /// them with a LIST.
    fn claims(&self, namespace: &str) -> Option<Vec<serde_json::Value>> {
        Some(self.claims.listed(namespace)?.objects())
    }

    /// The node's slices from their watch, started on first need, once
    /// listed, and the node to keep when the watch could not select it;
    /// `None`: read them with a LIST.
    fn slices(&self, by_node: bool) -> Option<Vec<serde_json::Value>> {
        let watch = {
            let mut slices = self.slices.lock().unwrap_or_else(|e| e.into_inner());
            slices
                .get_or_insert_with(|| {
                    let resource = slices_resource();
                    let api = Api::all_with(self.client.clone(), &resource);
                    let config = if by_node {
                        watch_config().fields(&on_node(&self.node))
                    } else {
                        watch_config()
                    };
                    NamespacedWatch::of(api, &resource, config, &self.handle, "ResourceSlices")
                })
                .clone()
        };
        watch.synced_within(LIST_WAIT).then(|| watch.objects())
    }

    /// Objects held: (ResourceClaims, ResourceSlices).
    pub(super) fn sizes(&self) -> (usize, usize) {
        let slices = self.slices.lock().unwrap_or_else(|e| e.into_inner());
        (
            self.claims.len(),
            slices.as_ref().map_or(0, |w| w.store.len()),
        )
    }
}

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
        let ours = dra::pods_claims(of_pod, &claims)?;
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
