//! The node daemon's watch caches (kube-rs reflectors): the pods of this
//! node (a field selector on `spec.nodeName`, metadata only, which is all a
//! CNI call reads of a pod) and the NetworkAttachmentDefinitions of the
//! namespaces its calls need, one watch per namespace started on first use
//! (or as soon as a pod that waits for its networks is seen): a daemon holds
//! no NAD of namespaces its node never uses, and lists none at start. A warm
//! ADD reads both from here and sends no GET; what the caches lack (a pod or
//! NAD younger than the last event) is read with a GET by the caller. The
//! pods' DRA ResourceClaims and the node's ResourceSlices are cached the
//! same way, from their first need ([`DraWatches`], read by `super::dra`).
//!
//! Every watch of the daemon lists as `watch_config` says and reconnects
//! as `reconnect.rs` says (issue 34's figures).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod as ApiPod;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Resource, ResourceExt};

use super::api::bounded;
use super::error::{ApiRequest, ClusterError, Verb};
use super::reconnect::reconnecting;
use crate::dra;
use crate::netattach::pod::Pod;
use crate::netattach::selection::NETWORKS_ANNOTATION;
use crate::netattach::status::NETWORK_STATUS_ANNOTATION;

/// How a daemon's watch lists: with `resourceVersion=0`, which the API
/// server answers from its watch cache. kube-rs's default (no
/// resourceVersion) is a quorum read of etcd, which scans every pod of the
/// cluster to find a node's few: 6 s at 10,000 pods, paid by every daemon
/// at every DaemonSet rollout and relist, where the cache answers in well
/// under a second. A reflector loses nothing by it: a list a little behind
/// is brought up to date by the watch from its resourceVersion. Unpaged:
/// kube-rs drops `resourceVersion=0` from a paged list (the API server
/// would ignore the page size and answer whole from its cache anyway), and
/// what is listed is a node's pods, the NADs or a namespace's pools.
pub(crate) fn watch_config() -> watcher::Config {
    let mut config = watcher::Config::default().any_semantic();
    config.page_size = None;
    config
}

/// Told of each event of the pods' watch.
pub type PodEventHook = Arc<dyn Fn() + Send + Sync>;

/// One namespace's objects of one kind, watched for the daemon's lifetime
/// by a task on its runtime.
#[derive(Clone)]
pub(crate) struct NamespacedWatch {
    pub(crate) store: Store<DynamicObject>,
    /// The store holds a full list.
    pub(crate) synced: Arc<AtomicBool>,
    /// When the watch started.
    started: Instant,
}

impl NamespacedWatch {
    /// Starts watching `resource` in `namespace` through `client`, on the
    /// runtime of `handle` (`what` names it in the log).
    pub(crate) fn start(
        client: &kube::Client,
        handle: &tokio::runtime::Handle,
        namespace: &str,
        resource: &ApiResource,
        what: &'static str,
    ) -> NamespacedWatch {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
        NamespacedWatch::of(api, resource, watch_config(), handle, what)
    }

    /// Starts watching what `api` lists (`config` may select), on the
    /// runtime of `handle`.
    pub(crate) fn of(
        api: Api<DynamicObject>,
        resource: &ApiResource,
        config: watcher::Config,
        handle: &tokio::runtime::Handle,
        what: &'static str,
    ) -> NamespacedWatch {
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let events = reconnecting(watcher(api, config))
            .modify(|object: &mut DynamicObject| object.managed_fields_mut().clear())
            .reflect(writer);
        let synced = Arc::new(AtomicBool::new(false));
        handle.spawn(drive(what, events, store.clone(), synced.clone()));
        NamespacedWatch {
            store,
            synced,
            started: Instant::now(),
        }
    }

    /// Every object the store holds, as JSON.
    pub(crate) fn objects(&self) -> Vec<serde_json::Value> {
        let state = self.store.state();
        state
            .iter()
            .filter_map(|o| serde_json::to_value(o.as_ref()).ok())
            .collect()
    }

    /// Whether the store holds a full list, waiting for it until `wait`
    /// after the watch started (a blocking wait: callers are the calls'
    /// threads, never the runtime's). A watch that cannot list (the API
    /// server away) costs the calls after that no wait at all.
    pub(crate) fn synced_within(&self, wait: Duration) -> bool {
        let deadline = self.started + wait;
        while !self.synced.load(Ordering::Acquire) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }
}

/// At most this many namespaces' objects of one kind (NADs,
/// ResourceClaims) are watched; a call needing another namespace's reads
/// them with a GET (a node whose pods span more is rare, and each watch is
/// a connection of its own).
const MAX_WATCHED_NAMESPACES: usize = 64;

/// How long a call waits for a namespace's watch started for it to list:
/// a LIST from the API server's cache takes milliseconds; past this the
/// call reads the object itself.
pub(crate) const LIST_WAIT: Duration = Duration::from_secs(1);

/// The watches of one kind of namespaced object, by namespace, each
/// started on its first use.
pub(crate) struct NamespaceWatches {
    client: kube::Client,
    handle: tokio::runtime::Handle,
    pub(crate) resource: ApiResource,
    what: &'static str,
    namespaces: Mutex<HashMap<String, NamespacedWatch>>,
}

impl NamespaceWatches {
    pub(crate) fn new(
        client: &kube::Client,
        handle: &tokio::runtime::Handle,
        resource: ApiResource,
        what: &'static str,
    ) -> NamespaceWatches {
        NamespaceWatches {
            client: client.clone(),
            handle: handle.clone(),
            resource,
            what,
            namespaces: Mutex::default(),
        }
    }

    /// `namespace`'s watch, started if this is its first use; `None` past
    /// [`MAX_WATCHED_NAMESPACES`].
    pub(crate) fn of(&self, namespace: &str) -> Option<NamespacedWatch> {
        let mut namespaces = self.namespaces.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(watch) = namespaces.get(namespace) {
            return Some(watch.clone());
        }
        if namespaces.len() >= MAX_WATCHED_NAMESPACES {
            tracing::debug!(
                namespace,
                what = self.what,
                "read without a watch: too many namespaces"
            );
            return None;
        }
        let watch = NamespacedWatch::start(
            &self.client,
            &self.handle,
            namespace,
            &self.resource,
            self.what,
        );
        namespaces.insert(namespace.to_string(), watch.clone());
        Some(watch)
    }

    /// `namespace`'s watch once it holds a full list (started now if this
    /// is its first use, waited for until [`LIST_WAIT`] after it started).
    pub(crate) fn listed(&self, namespace: &str) -> Option<NamespacedWatch> {
        self.of(namespace).filter(|w| w.synced_within(LIST_WAIT))
    }

    pub(crate) fn len(&self) -> usize {
        let namespaces = self.namespaces.lock().unwrap_or_else(|e| e.into_inner());
        namespaces.values().map(|w| w.store.len()).sum()
    }
}

/// A pod that names networks and has no network-status yet waits for an
/// ADD, which will read NADs of its namespace.
fn waits_for_networks(pod: &PartialObjectMeta<ApiPod>) -> bool {
    let annotations = pod.annotations();
    annotations.contains_key(NETWORKS_ANNOTATION)
        && !annotations.contains_key(NETWORK_STATUS_ANNOTATION)
}

/// The caches, filled by tasks on the daemon's runtime.
pub struct Watched {
    node: String,
    pods: Store<PartialObjectMeta<ApiPod>>,
    nads: Arc<NamespaceWatches>,
    dra: DraWatches,
    pods_synced: Arc<AtomicBool>,
}

impl Watched {
    /// Start watching through `client`, on the runtime of `handle`. The
    /// watches retry with backoff for as long as the daemon runs; until the
    /// first full list of the node's pods has arrived, [`Watched::synced`]
    /// is false. `on_pod_event` is called after each event of the pods'
    /// watch, once the cache holds it (the daemon's hot-plug wakes up).
    pub fn start(
        client: &kube::Client,
        node: &str,
        handle: &tokio::runtime::Handle,
        on_pod_event: Option<PodEventHook>,
    ) -> Watched {
        let gvk = GroupVersionKind::gvk("k8s.cni.cncf.io", "v1", "NetworkAttachmentDefinition");
        let nads = Arc::new(NamespaceWatches::new(
            client,
            handle,
            ApiResource::from_gvk_with_plural(&gvk, "network-attachment-definitions"),
            "NetworkAttachmentDefinitions",
        ));

        let (pods, pod_writer) = reflector::store();
        let pods_api: Api<PartialObjectMeta<ApiPod>> = Api::all(client.clone());
        let on_node = watch_config().fields(&format!("spec.nodeName={node}"));
        let prewarm = nads.clone();
        let pod_events = reconnecting(watcher(pods_api, on_node))
            // managedFields are most of a pod's metadata, and never read.
            .modify(|pod: &mut PartialObjectMeta<ApiPod>| pod.managed_fields_mut().clear())
            .reflect(pod_writer)
            .inspect(move |event| {
                // Its NADs are listed while kubelet makes its sandbox.
                if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event {
                    if let Some(namespace) = pod.namespace().filter(|_| waits_for_networks(pod)) {
                        prewarm.of(&namespace);
                    }
                }
                if let Some(hook) = &on_pod_event {
                    hook();
                }
            });
        let pods_synced = Arc::new(AtomicBool::new(false));
        handle.spawn(drive("pods", pod_events, pods.clone(), pods_synced.clone()));

        Watched {
            node: node.to_string(),
            pods,
            nads,
            dra: DraWatches::new(client, handle, node),
            pods_synced,
        }
    }

    /// The node whose pods the cache holds.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The node's pods are listed (the daemon's readiness).
    pub fn synced(&self) -> bool {
        self.pods_synced.load(Ordering::Acquire)
    }

    /// Objects held: (pods, NADs).
    pub fn sizes(&self) -> (usize, usize) {
        (self.pods.len(), self.nads.len())
    }

    /// The pod `namespace/name`, if the cache has it.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        let found = self.pods.get(&ObjectRef::new(name).within(namespace))?;
        let meta = &found.metadata;
        Some(Pod {
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: meta.uid.clone().filter(|u| !u.is_empty()),
            annotations: meta.annotations.clone().unwrap_or_default(),
        })
    }

    /// The uids of the node's pods the cache holds.
    pub fn pod_uids(&self) -> std::collections::BTreeSet<String> {
        self.pods
            .state()
            .iter()
            .filter_map(|p| p.metadata.uid.clone())
            .collect()
    }

    /// The labels of pod `namespace/name`, if the cache has it.
    pub fn labels(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<std::collections::BTreeMap<String, String>> {
        let found = self.pods.get(&ObjectRef::new(name).within(namespace))?;
        Some(found.labels().clone())
    }

    /// Whether the API server serves `resource.k8s.io/v1`, asked once for
    /// the daemon (its DRA caches and its DRA driver share the answer).
    pub fn dra_served(&self) -> Result<bool, ClusterError> {
        Ok(matches!(self.dra.served()?, Served::Yes { .. }))
    }

    /// Objects held by the DRA caches: (ResourceClaims, ResourceSlices).
    pub fn dra_sizes(&self) -> (usize, usize) {
        self.dra.sizes()
    }

    /// The caches of ResourceClaims and ResourceSlices (DRA), started on
    /// first need.
    pub(crate) fn dra(&self) -> &DraWatches {
        &self.dra
    }

    /// The NAD `namespace/name` as JSON, if the cache has it. The first
    /// call for a namespace starts its watch; calls wait for its list until
    /// 1 s after it started, and no longer.
    pub fn nad(&self, namespace: &str, name: &str) -> Option<serde_json::Value> {
        let watch = self.nads.listed(namespace)?;
        let key = ObjectRef::new_with(name, self.nads.resource.clone()).within(namespace);
        let found = watch.store.get(&key)?;
        serde_json::to_value(found.as_ref()).ok()
    }
}

// DRA (`super::dra`): the daemon's caches of ResourceClaims and ResourceSlices.

fn dra_resource(kind: &str, plural: &str) -> ApiResource {
    let gvk = GroupVersionKind::gvk(dra::GROUP, "v1", kind);
    ApiResource::from_gvk_with_plural(&gvk, plural)
}

pub(super) fn claims_resource() -> ApiResource {
    dra_resource(dra::claim::KIND, "resourceclaims")
}

pub(super) fn slices_resource() -> ApiResource {
    dra_resource(dra::slice::KIND, "resourceslices")
}

/// The field selector of a node's slices.
pub(super) fn on_node(node: &str) -> String {
    format!("spec.nodeName={node}")
}

/// An API server's answer to a selection it cannot make (400).
pub(super) fn selector_refused(e: &ClusterError) -> bool {
    e.status() == Some(400)
}

/// Whether the API server serves `resource.k8s.io/v1`, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Served {
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
    pub(super) fn served(&self) -> Result<Served, ClusterError> {
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
            // A role from before DRA: devices come from kubelet alone, as
            // before, rather than every device-backed ADD failing.
            Err(e) if e.status() == Some(403) => {
                tracing::warn!(
                    "the daemon may not list {} ResourceSlices ({e}): pods' ResourceClaims are                      not read until it restarts with list and watch on resourceclaims and                      resourceslices (deploy/rbac.yaml)",
                    dra::API_VERSION
                );
                Served::No
            }
            Err(e) => return Err(e),
        };
        *served = Some(known);
        Ok(known)
    }

    /// The claims of `namespace` from its watch, once listed; `None`: read
    /// them with a LIST.
    pub(super) fn claims(&self, namespace: &str) -> Option<Vec<serde_json::Value>> {
        Some(self.claims.listed(namespace)?.objects())
    }

    /// The node's slices from their watch, started on first need, once
    /// listed (every slice of the cluster when the API server cannot
    /// select them by node, `by_node` false: the caller keeps the node's);
    /// `None`: read them with a LIST.
    pub(super) fn slices(&self, by_node: bool) -> Option<Vec<serde_json::Value>> {
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

/// Run one watch for the daemon's lifetime, marking it synced once its
/// store holds the first full list; errors are logged, and the watcher's
/// backoff retries.
pub(super) async fn drive<K, S>(
    what: &'static str,
    events: S,
    store: Store<K>,
    synced: Arc<AtomicBool>,
) where
    K: Resource + Clone + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let ready = async {
        if store.wait_until_ready().await.is_ok() {
            synced.store(true, Ordering::Release);
            tracing::info!(what, objects = store.len(), "watch cache synced");
        }
    };
    let events = async {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            if let Err(error) = event {
                tracing::warn!(what, %error, "watch failed; retrying");
            }
        }
    };
    futures::join!(ready, events);
}
