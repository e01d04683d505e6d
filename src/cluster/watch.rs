//! The node daemon's watch caches (kube-rs reflectors): the pods of this
//! node (a field selector on `spec.nodeName`, metadata only, which is all a
//! CNI call reads of a pod) and every NetworkAttachmentDefinition. A warm
//! ADD reads both from here and sends no GET; what the caches lack (a pod or
//! NAD younger than the last event) is read with a GET by the caller.
//!
//! Every watch of the daemon lists and reconnects as `watch_config` and
//! `reconnect_backoff` say (issue 34's figures).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod as ApiPod;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher::ExponentialBackoff;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Resource, ResourceExt};

use crate::netattach::pod::Pod;

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

/// How a daemon's watch reconnects after an error (an API server that
/// restarts): 250 ms doubling to at most 2 s, jittered so that a cluster's
/// daemons spread out, reset after two healthy minutes. kube-rs's default
/// grows to 30 s, and watches came back 5–7.5 s after a restart.
pub(crate) fn reconnect_backoff() -> impl Backoff {
    let schedule = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(Duration::from_secs(2))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(ExponentialBackoff::from(schedule), Duration::from_secs(120))
}

/// Told of each event of the pods' watch.
pub type PodEventHook = Arc<dyn Fn() + Send + Sync>;

/// The caches, filled by tasks on the daemon's runtime.
pub struct Watched {
    node: String,
    pods: Store<PartialObjectMeta<ApiPod>>,
    nads: Store<DynamicObject>,
    nad_resource: ApiResource,
    pods_synced: Arc<AtomicBool>,
    nads_synced: Arc<AtomicBool>,
}

impl Watched {
    /// Start watching through `client`, on the runtime of `handle`. The
    /// watches retry with backoff for as long as the daemon runs; until the
    /// first full list of each has arrived, [`Watched::synced`] is false.
    /// `on_pod_event` is called after each event of the pods' watch, once
    /// the cache holds it (the daemon's hot-plug wakes up).
    pub fn start(
        client: &kube::Client,
        node: &str,
        handle: &tokio::runtime::Handle,
        on_pod_event: Option<PodEventHook>,
    ) -> Watched {
        let gvk = GroupVersionKind::gvk("k8s.cni.cncf.io", "v1", "NetworkAttachmentDefinition");
        let nad_resource =
            ApiResource::from_gvk_with_plural(&gvk, "network-attachment-definitions");

        let (pods, pod_writer) = reflector::store();
        let pods_api: Api<PartialObjectMeta<ApiPod>> = Api::all(client.clone());
        let on_node = watch_config().fields(&format!("spec.nodeName={node}"));
        let pod_events = watcher(pods_api, on_node)
            .backoff(reconnect_backoff())
            // managedFields are most of a pod's metadata, and never read.
            .modify(|pod: &mut PartialObjectMeta<ApiPod>| pod.managed_fields_mut().clear())
            .reflect(pod_writer)
            .inspect(move |_| {
                if let Some(hook) = &on_pod_event {
                    hook();
                }
            });
        let pods_synced = Arc::new(AtomicBool::new(false));
        handle.spawn(drive("pods", pod_events, pods.clone(), pods_synced.clone()));

        let nad_writer = reflector::store::Writer::new(nad_resource.clone());
        let nads = nad_writer.as_reader();
        let nads_api: Api<DynamicObject> = Api::all_with(client.clone(), &nad_resource);
        let nad_events = watcher(nads_api, watch_config())
            .backoff(reconnect_backoff())
            .modify(|nad: &mut DynamicObject| nad.managed_fields_mut().clear())
            .reflect(nad_writer);
        let nads_synced = Arc::new(AtomicBool::new(false));
        handle.spawn(drive(
            "NetworkAttachmentDefinitions",
            nad_events,
            nads.clone(),
            nads_synced.clone(),
        ));

        Watched {
            node: node.to_string(),
            pods,
            nads,
            nad_resource,
            pods_synced,
            nads_synced,
        }
    }

    /// The node whose pods the cache holds.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Both caches hold a full list (the daemon's readiness).
    pub fn synced(&self) -> bool {
        self.pods_synced.load(Ordering::Acquire) && self.nads_synced.load(Ordering::Acquire)
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

    /// The NAD `namespace/name` as JSON, if the cache has it.
    pub fn nad(&self, namespace: &str, name: &str) -> Option<serde_json::Value> {
        let key = ObjectRef::new_with(name, self.nad_resource.clone()).within(namespace);
        let found = self.nads.get(&key)?;
        serde_json::to_value(found.as_ref()).ok()
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
