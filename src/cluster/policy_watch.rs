//! What MultiNetworkPolicy enforcement watches (the daemon's
//! `--multi-network-policy`): every MultiNetworkPolicy (v1beta1, as the
//! peers watch it) and every namespace's labels, from the start; and the
//! pods its node's policies can name as peers, one watch per
//! [`PeerScope`] with the selector on the server, each started when a
//! scope is first needed and stopped when no longer ([`crate::netpolicy::peers`],
//! issue 46). A peer is kept with only what enforcement reads: its name,
//! namespace, uid, labels and network-status. Each event calls the
//! enforcer's hook.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod as ApiPod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;

use super::reconnect::reconnecting;
use super::watch::{drive, watch_config};
use crate::netattach::status::NETWORK_STATUS_ANNOTATION;
use crate::netpolicy::peers::PeerScope;

/// Told of every event of the policy watches.
pub type PolicyEventHook = Arc<dyn Fn() + Send + Sync>;

/// A store and whether it holds its first full list.
struct Watch<K: kube::Resource + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
    synced: Arc<AtomicBool>,
}

impl<K: kube::Resource + 'static> Watch<K>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }
}

/// A watch that stops with it.
struct Running<K: kube::Resource + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    watch: Watch<K>,
    task: tokio::task::JoinHandle<()>,
}

impl<K: kube::Resource + 'static> Drop for Running<K>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn drop(&mut self) {
        self.task.abort();
    }
}

type PeerWatch = Running<PartialObjectMeta<ApiPod>>;

pub struct PolicyWatches {
    client: kube::Client,
    handle: tokio::runtime::Handle,
    hook: PolicyEventHook,
    policies: Running<DynamicObject>,
    namespaces: Running<PartialObjectMeta<Namespace>>,
    peers: Mutex<HashMap<PeerScope, PeerWatch>>,
}

impl PolicyWatches {
    /// Start the policy and namespace watches through `client` on the
    /// runtime of `handle`; `hook` is called after every event.
    pub fn start(
        client: &kube::Client,
        handle: &tokio::runtime::Handle,
        hook: PolicyEventHook,
    ) -> PolicyWatches {
        let gvk = GroupVersionKind::gvk("k8s.cni.cncf.io", "v1beta1", "MultiNetworkPolicy");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "multi-networkpolicies");
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let events = reconnecting(watcher(api, watch_config()))
            .modify(|o: &mut DynamicObject| o.managed_fields_mut().clear())
            .reflect(writer);
        let policies = spawn(handle, "MultiNetworkPolicies", events, store, &hook);

        let (store, writer) = reflector::store();
        let api: Api<PartialObjectMeta<Namespace>> = Api::all(client.clone());
        let events = reconnecting(watcher(api, watch_config()))
            .modify(|o: &mut PartialObjectMeta<Namespace>| o.managed_fields_mut().clear())
            .reflect(writer);
        let namespaces = spawn(handle, "namespaces", events, store, &hook);
        PolicyWatches {
            client: client.clone(),
            handle: handle.clone(),
            hook,
            policies,
            namespaces,
            peers: Mutex::default(),
        }
    }

    /// Policies and namespaces are listed.
    pub fn synced(&self) -> bool {
        self.policies.watch.synced() && self.namespaces.watch.synced()
    }

    /// Every policy the API server holds.
    pub fn policies(&self) -> Vec<Arc<DynamicObject>> {
        self.policies.watch.store.state()
    }

    /// Every namespace's labels.
    pub fn namespaces(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.namespaces
            .watch
            .store
            .state()
            .iter()
            .map(|n| (n.name_any(), n.labels().clone()))
            .collect()
    }

    /// Watches exactly `scopes`: each one not watched yet is started, each
    /// watched one not among them is stopped (its pods forgotten).
    pub fn watch_peers(&self, scopes: &BTreeSet<PeerScope>) {
        let mut peers = self.lock_peers();
        peers.retain(|scope, _| scopes.contains(scope));
        for scope in scopes {
            if !peers.contains_key(scope) {
                let watch = self.start_peers(scope);
                peers.insert(scope.clone(), watch);
            }
        }
    }

    /// Every watched scope holds its first full list.
    pub fn peers_synced(&self) -> bool {
        self.lock_peers().values().all(|w| w.watch.synced())
    }

    /// The pods of every watched scope, each once.
    pub fn peer_pods(&self) -> Vec<Arc<PartialObjectMeta<ApiPod>>> {
        let peers = self.lock_peers();
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for pod in peers.values().flat_map(|w| w.watch.store.state()) {
            if seen.insert((pod.namespace(), pod.name_any())) {
                out.push(pod);
            }
        }
        out
    }

    fn start_peers(&self, scope: &PeerScope) -> PeerWatch {
        let (store, writer) = reflector::store();
        let api: Api<PartialObjectMeta<ApiPod>> = match &scope.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let config = watch_config().labels(&scope.selector);
        let events = reconnecting(watcher(api, config))
            .modify(keep_what_policy_reads)
            .reflect(writer);
        spawn(
            &self.handle,
            "pods (policy peers)",
            events,
            store,
            &self.hook,
        )
    }

    fn lock_peers(&self) -> MutexGuard<'_, HashMap<PeerScope, PeerWatch>> {
        self.peers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the caches hold.
    pub fn sizes(&self) -> CacheSizes {
        let peers = self.lock_peers();
        CacheSizes {
            policies: self.policies.watch.store.len(),
            namespaces: self.namespaces.watch.store.len(),
            peer_pods: peers.values().map(|w| w.watch.store.len()).sum(),
            peer_scopes: peers.len(),
        }
    }
}

/// What the policy caches hold, for the daemon's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheSizes {
    pub policies: usize,
    pub namespaces: usize,
    /// Peer pods, counted once per scope that holds them.
    pub peer_pods: usize,
    pub peer_scopes: usize,
}

/// A peer pod as stored: what enforcement reads (its name, namespace, uid,
/// labels and network-status), nothing else of its metadata.
fn keep_what_policy_reads(pod: &mut PartialObjectMeta<ApiPod>) {
    let meta = &mut pod.metadata;
    let kept = kube::core::ObjectMeta {
        name: meta.name.take(),
        namespace: meta.namespace.take(),
        uid: meta.uid.take(),
        resource_version: meta.resource_version.take(),
        labels: meta.labels.take(),
        annotations: meta.annotations.take().map(|mut annotations| {
            annotations.retain(|key, _| key == NETWORK_STATUS_ANNOTATION);
            annotations
        }),
        ..Default::default()
    };
    *meta = kept;
}

/// Drive `events` into `store` until stopped, calling `hook` after each.
fn spawn<K, S>(
    handle: &tokio::runtime::Handle,
    what: &'static str,
    events: S,
    store: Store<K>,
    hook: &PolicyEventHook,
) -> Running<K>
where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let hook = hook.clone();
    let events = events.inspect(move |_| hook());
    let synced = Arc::new(AtomicBool::new(false));
    let task = handle.spawn(drive(what, events, store.clone(), synced.clone()));
    Running {
        watch: Watch { store, synced },
        task,
    }
}
