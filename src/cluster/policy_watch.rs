//! What MultiNetworkPolicy enforcement watches (the daemon's
//! `--multi-network-policy`): every MultiNetworkPolicy (v1beta1, as the
//! peers watch it) and every namespace's labels, from the start; and every
//! pod's metadata (labels and network-status: peers on every node) from
//! the moment a policy exists, so a cluster without policies costs no
//! cluster-wide pod list. Each event calls the enforcer's hook.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod as ApiPod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;

use super::reconnect::reconnecting;
use super::watch::{drive, watch_config};

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

pub struct PolicyWatches {
    client: kube::Client,
    handle: tokio::runtime::Handle,
    hook: PolicyEventHook,
    policies: Watch<DynamicObject>,
    namespaces: Watch<PartialObjectMeta<Namespace>>,
    pods: OnceLock<Watch<PartialObjectMeta<ApiPod>>>,
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
            pods: OnceLock::new(),
        }
    }

    /// Policies and namespaces are listed, and pods too once watched.
    pub fn synced(&self) -> bool {
        self.policies.synced()
            && self.namespaces.synced()
            && self.pods.get().is_none_or(Watch::synced)
    }

    /// Every policy the API server holds.
    pub fn policies(&self) -> Vec<Arc<DynamicObject>> {
        self.policies.store.state()
    }

    /// Every namespace's labels.
    pub fn namespaces(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.namespaces
            .store
            .state()
            .iter()
            .map(|n| (n.name_any(), n.labels().clone()))
            .collect()
    }

    /// Every pod's metadata, the watch started on the first call (it is
    /// not synced then: see [`PolicyWatches::synced`]).
    pub fn pods(&self) -> Vec<Arc<PartialObjectMeta<ApiPod>>> {
        self.watch_pods().store.state()
    }

    /// Starts the pods' watch if it has not started.
    pub fn start_pods(&self) {
        self.watch_pods();
    }

    fn watch_pods(&self) -> &Watch<PartialObjectMeta<ApiPod>> {
        self.pods.get_or_init(|| {
            let (store, writer) = reflector::store();
            let api: Api<PartialObjectMeta<ApiPod>> = Api::all(self.client.clone());
            let events = reconnecting(watcher(api, watch_config()))
                .modify(|o: &mut PartialObjectMeta<ApiPod>| o.managed_fields_mut().clear())
                .reflect(writer);
            spawn(
                &self.handle,
                "pods (policy peers)",
                events,
                store,
                &self.hook,
            )
        })
    }

    /// Objects held: (policies, namespaces, pods).
    pub fn sizes(&self) -> (usize, usize, usize) {
        (
            self.policies.store.len(),
            self.namespaces.store.len(),
            self.pods.get().map_or(0, |w| w.store.len()),
        )
    }
}

/// Drive `events` into `store` for the daemon's lifetime, calling `hook`
/// after each.
fn spawn<K, S>(
    handle: &tokio::runtime::Handle,
    what: &'static str,
    events: S,
    store: Store<K>,
    hook: &PolicyEventHook,
) -> Watch<K>
where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let hook = hook.clone();
    let events = events.inspect(move |_| hook());
    let synced = Arc::new(AtomicBool::new(false));
    handle.spawn(drive(what, events, store.clone(), synced.clone()));
    Watch { store, synced }
}
