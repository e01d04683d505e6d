//! The node daemon's watch caches (kube-rs reflectors): the pods of this
//! node (a field selector on `spec.nodeName`, metadata only, which is all a
//! CNI call reads of a pod) and every NetworkAttachmentDefinition. A warm
//! ADD reads both from here and sends no GET; what the caches lack (a pod or
//! NAD younger than the last event) is read with a GET by the caller.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod as ApiPod;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Resource, ResourceExt};

use crate::netattach::pod::Pod;

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
        let on_node = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let pod_events = watcher(pods_api, on_node)
            .default_backoff()
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
        let nad_events = watcher(nads_api, watcher::Config::default())
            .default_backoff()
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
