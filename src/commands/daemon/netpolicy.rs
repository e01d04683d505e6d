//! MultiNetworkPolicy enforcement (`--multi-network-policy`): every
//! sandbox of the node gets, in its own network namespace, the nftables
//! table its pod's policies call for ([`crate::netpolicy`]), or none.
//!
//! - **At ADD**, before the call answers ([`Enforcer::enforce_added`]): a
//!   selected pod never runs open. The caches must have listed; if they
//!   have not within [`SYNC_WAIT`], the ADD fails (try again later) and is
//!   undone, rather than start a pod that policy may isolate.
//! - **On every change** (a policy, a namespace's labels, any pod's labels
//!   or network-status, a hot-plug): one thread recomputes every sandbox
//!   and rewrites the tables that differ, each in one atomic batch.
//! - **At start** the first pass, once the caches have listed, rewrites
//!   every sandbox's table in place: rules are replaced, never dropped
//!   first.
//! - **At DEL** the table goes with the sandbox's interfaces.
//!
//! A pod of this node is seen through its record (its attachments the
//! moment its ADD ends, before its status is published); a pod elsewhere
//! through its network-status. A selected attachment with no kernel
//! interface (a DPDK-mode VF) cannot be filtered: a Warning event says so.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Pod as ApiPod;
use kube::api::Api;
use kube::ResourceExt;

use crate::cluster::events::{EventType, PodEvent};
use crate::cluster::kube::{KubeCluster, SharedApi};
use crate::cluster::policy_watch::{CacheSizes, PolicyWatches};
use crate::cni::error::{CniError, ErrorCode};
use crate::cni::names::{ContainerId, NetnsPath};
use crate::netattach::pod::Pod;
use crate::netattach::status::NetworkStatus;
use crate::netattach::status::NETWORK_STATUS_ANNOTATION;
use crate::netpolicy::resolve::{InterfacePolicy, PodView, World};
use crate::netpolicy::spec::{Policy, Protocol};
use crate::netpolicy::{peers, render, world};
use crate::record::{Cache, Record};
use plexus_dataplane::nftables::{Nftables, Table};
use plexus_dataplane::NetNs;

use super::sandboxes::{Sandbox, Sandboxes};

/// How long an ADD waits for the policy caches' first lists.
pub const SYNC_WAIT: Duration = Duration::from_secs(10);
/// A pass with nothing to wake it: a resync.
const IDLE: Duration = Duration::from_secs(30);
/// After a pass that failed somewhere: its retry.
const RETRY: Duration = Duration::from_secs(1);

pub struct Enforcer {
    api: SharedApi,
    watches: PolicyWatches,
    sandboxes: Arc<Sandboxes>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// What each sandbox's table holds as last written (`None`: no table).
    applied: HashMap<ContainerId, Option<Table>>,
    /// The networks each sandbox was told cannot be filtered.
    reported: HashMap<ContainerId, BTreeSet<String>>,
    /// Named container ports, by pod uid (a pod's ports never change).
    ports: HashMap<String, BTreeMap<String, (Protocol, u16)>>,
    /// Each policy as last parsed, by `namespace/name`: its
    /// resourceVersion and the policy (`None`: unreadable, logged once).
    parsed: HashMap<String, (String, Option<Policy>)>,
    /// Each sandbox's recorded attachments, read again only when its
    /// record file changes (a pass looks at every sandbox).
    recorded: HashMap<ContainerId, Recorded>,
}

/// A sandbox's record file, when it was read, and its network-status.
struct Recorded {
    path: PathBuf,
    stamp: Option<(SystemTime, u64)>,
    status: Vec<NetworkStatus>,
}

/// Everything a pass judges by.
struct Snapshot {
    policies: Vec<Policy>,
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
    pods: Vec<PodView>,
    /// Each sandbox's pod, an index into `pods`.
    local: HashMap<ContainerId, usize>,
}

/// Why a sandbox's table could not be written.
#[derive(Debug, thiserror::Error)]
pub enum EnforceError {
    #[error(
        "the MultiNetworkPolicy caches have not listed within {SYNC_WAIT:?} (is the \
         multi-networkpolicies CRD installed, and the API server reachable?): the pod \
         would run unprotected"
    )]
    NotSynced,
    #[error("writing the policy rules in {netns}: {source}")]
    Dataplane {
        netns: NetnsPath,
        #[source]
        source: plexus_dataplane::Error,
    },
}

impl From<EnforceError> for CniError {
    fn from(e: EnforceError) -> CniError {
        let code = match e {
            EnforceError::NotSynced => ErrorCode::TryAgainLater,
            EnforceError::Dataplane { .. } => ErrorCode::Io,
        };
        CniError::new(code, "MultiNetworkPolicy not enforced", e.to_string())
    }
}

impl Enforcer {
    pub fn new(api: SharedApi, watches: PolicyWatches, sandboxes: Arc<Sandboxes>) -> Enforcer {
        Enforcer {
            api,
            watches,
            sandboxes,
            state: Mutex::default(),
        }
    }

    /// What the policy caches hold.
    pub fn sizes(&self) -> CacheSizes {
        self.watches.sizes()
    }

    /// Enforce on every wake-up from `events` until its senders are gone.
    pub fn run(&self, events: Receiver<()>) {
        let mut next = Duration::ZERO;
        loop {
            match events.recv_timeout(next) {
                Ok(()) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            // One pass serves every event queued meanwhile.
            while events.try_recv().is_ok() {}
            next = if !self.synced() {
                Duration::from_millis(50)
            } else if self.pass() {
                IDLE
            } else {
                RETRY
            };
        }
    }

    /// The table of the sandbox just ADDed, written before its ADD answers,
    /// in `netns` (the namespace the call was given) when there is one.
    /// Called under the sandbox's lock.
    pub fn enforce_added(
        &self,
        sandbox: &Sandbox,
        netns: Option<&NetNs>,
    ) -> Result<(), EnforceError> {
        let deadline = Instant::now() + SYNC_WAIT;
        while !self.synced() {
            if Instant::now() >= deadline {
                return Err(EnforceError::NotSynced);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // No policy in the cluster: nothing to resolve and, in a namespace
        // the runtime just made, no table to remove (a repeated ADD of a
        // sandbox that had one still goes through).
        if self.watches.sizes().policies == 0 {
            let mut state = self.lock();
            if !matches!(state.applied.get(&sandbox.container_id), Some(Some(_))) {
                state.applied.insert(sandbox.container_id.clone(), None);
                return Ok(());
            }
        }
        let snapshot = self.snapshot(deadline)?;
        self.enforce(&mut self.lock(), &snapshot, sandbox, netns)
    }

    /// The sandbox is being deleted: its table goes (when its namespace is
    /// still there) and it is forgotten. Called under the sandbox's lock.
    pub fn removed(&self, sandbox: &Sandbox) {
        let mut state = self.lock();
        state.reported.remove(&sandbox.container_id);
        state.recorded.remove(&sandbox.container_id);
        if let Some(Some(_)) = state.applied.remove(&sandbox.container_id) {
            if let Ok(ns) = NetNs::open(&sandbox.netns) {
                let deleted = Nftables::open(&ns).and_then(|nft| nft.delete(render::TABLE));
                if let Err(error) = deleted {
                    tracing::debug!(%error, "policy table left to its namespace");
                }
            }
        }
    }

    /// Policies and namespaces listed (the peers' scopes follow from them,
    /// each listed when a snapshot first needs it), and this node's pods,
    /// whose labels a snapshot reads: before they are listed, a pod would
    /// look unlabelled, selected by no policy, and a restarted daemon would
    /// drop the tables its predecessor left in place.
    fn synced(&self) -> bool {
        self.watches.synced() && self.api.watched.synced()
    }

    /// One pass over every sandbox; false when one failed (retried soon).
    fn pass(&self) -> bool {
        let snapshot = match self.snapshot(Instant::now() + SYNC_WAIT) {
            Ok(snapshot) => snapshot,
            Err(error) => {
                tracing::warn!(%error, "MultiNetworkPolicy peers not listed; retrying");
                return false;
            }
        };
        let mut ok = true;
        let sandboxes = self.sandboxes.all();
        {
            let mut state = self.lock();
            let known = |id: &ContainerId| sandboxes.iter().any(|s| &s.container_id == id);
            state.applied.retain(|id, _| known(id));
            state.recorded.retain(|id, _| known(id));
        }
        for sandbox in &sandboxes {
            let cni_dir = sandbox.cni_dir();
            let done = self
                .sandboxes
                .locked(&sandbox.container_id, cni_dir.as_deref(), || {
                    if self.sandboxes.get(&sandbox.container_id).is_none() {
                        return Ok(()); // DEL'd meanwhile
                    }
                    self.enforce(&mut self.lock(), &snapshot, sandbox, None)
                });
            match done {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    ok = false;
                    tracing::warn!(%error, pod = %sandbox.pod, namespace = %sandbox.namespace,
                        "MultiNetworkPolicy not enforced; retrying");
                }
                Err(error) => {
                    ok = false;
                    tracing::debug!(%error, "sandbox busy; retrying");
                }
            }
        }
        ok
    }

    /// Write `sandbox`'s table if it differs from what it holds.
    fn enforce(
        &self,
        state: &mut State,
        snapshot: &Snapshot,
        sandbox: &Sandbox,
        netns: Option<&NetNs>,
    ) -> Result<(), EnforceError> {
        let Some(&index) = snapshot.local.get(&sandbox.container_id) else {
            return Ok(()); // no record: nothing attached
        };
        if netns.is_none() && !sandbox.netns.as_path().exists() {
            return Ok(()); // the pod's namespace is gone: its DEL is coming
        }
        let world = World {
            pods: &snapshot.pods,
            namespaces: &snapshot.namespaces,
            policies: &snapshot.policies,
        };
        let (filterable, unfilterable): (Vec<InterfacePolicy>, Vec<InterfacePolicy>) = world
            .interface_policies(&snapshot.pods[index])
            .into_iter()
            .partition(|p| p.interface.is_some());
        self.report_unfilterable(state, sandbox, &unfilterable);
        let table = render::table(&filterable);
        if state.applied.get(&sandbox.container_id) == Some(&table) {
            return Ok(());
        }
        let fail = |source| EnforceError::Dataplane {
            netns: sandbox.netns.clone(),
            source,
        };
        let nft = match netns {
            Some(ns) => Nftables::open(ns),
            None => NetNs::open(&sandbox.netns).and_then(|ns| Nftables::open(&ns)),
        }
        .map_err(fail)?;
        match &table {
            Some(t) => nft.replace(t),
            None => nft.delete(render::TABLE),
        }
        .map_err(fail)?;
        tracing::debug!(pod = %sandbox.pod, rules = table.as_ref().map_or(0, Table::rule_count),
            "policy table written");
        state.applied.insert(sandbox.container_id.clone(), table);
        Ok(())
    }

    /// A Warning, once per network, for selected attachments without a
    /// kernel interface.
    fn report_unfilterable(
        &self,
        state: &mut State,
        sandbox: &Sandbox,
        unfilterable: &[InterfacePolicy],
    ) {
        let reported = state
            .reported
            .entry(sandbox.container_id.clone())
            .or_default();
        let events: Vec<PodEvent> = unfilterable
            .iter()
            .filter(|p| reported.insert(p.network.clone()))
            .map(|p| PodEvent {
                event_type: EventType::Warning,
                reason: "PolicyNotEnforced",
                message: format!(
                    "network {}: selected by MultiNetworkPolicy {}, but its attachment has no \
                     kernel interface in the pod (a DPDK-mode VF): the kernel cannot filter it",
                    p.network,
                    p.policies.join(", ")
                ),
            })
            .collect();
        if events.is_empty() {
            return;
        }
        let pod = Pod {
            namespace: sandbox.namespace.clone(),
            name: sandbox.pod.clone(),
            uid: sandbox.uid.clone(),
            annotations: BTreeMap::new(),
        };
        KubeCluster::shared(&self.api).post_events(&pod, &events);
    }

    /// The policies, namespaces and pods as the caches and records have
    /// them now: this node's pods, and the peers its policies can name,
    /// their scopes watched and listed by `deadline` ([`peers`]).
    fn snapshot(&self, deadline: Instant) -> Result<Snapshot, EnforceError> {
        let policies = self.policies();
        let namespaces = self.watches.namespaces();
        let mut pods = Vec::new();
        let mut uids = Vec::new();
        let mut local = HashMap::new();
        let mut here = HashSet::new();
        for sandbox in self.sandboxes.all() {
            let Some(entries) = self.recorded_status(&sandbox) else {
                continue;
            };
            let labels = self
                .api
                .watched
                .labels(&sandbox.namespace, &sandbox.pod)
                .unwrap_or_default();
            here.insert((sandbox.namespace.clone(), sandbox.pod.clone()));
            local.insert(sandbox.container_id.clone(), pods.len());
            pods.push(world::view(
                &sandbox.namespace,
                &sandbox.pod,
                labels,
                &entries,
            ));
            // kubelet names the uid in CNI_ARGS; other runtimes may not.
            let uid = sandbox.uid.clone().or_else(|| {
                let pod = self.api.watched.pod(&sandbox.namespace, &sandbox.pod)?;
                pod.uid
            });
            uids.push(uid);
        }
        let selecting = peers::selecting(&policies, &pods);
        self.watches
            .watch_peers(&peers::scopes(&selecting, &namespaces));
        while !self.watches.peers_synced() {
            if Instant::now() >= deadline {
                return Err(EnforceError::NotSynced);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        for pod in self.watches.peer_pods() {
            let (namespace, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
            if here.contains(&(namespace.clone(), name.clone())) {
                continue;
            }
            let status = pod.annotations().get(NETWORK_STATUS_ANNOTATION);
            pods.push(world::from_status(
                &namespace,
                &name,
                pod.labels().clone(),
                status.map(String::as_str),
            ));
            uids.push(pod.uid());
        }
        if world::uses_named_ports(&policies) {
            self.fill_named_ports(&policies, &mut pods, &uids);
        }
        Ok(Snapshot {
            policies,
            namespaces,
            pods,
            local,
        })
    }

    /// The policies that parse; one that does not is logged once per
    /// version and left out.
    fn policies(&self) -> Vec<Policy> {
        let objects = self.watches.policies();
        let mut state = self.lock();
        let mut keys = HashSet::new();
        let mut out = Vec::new();
        for object in objects {
            let key = format!(
                "{}/{}",
                object.namespace().unwrap_or_default(),
                object.name_any()
            );
            let version = object.resource_version().unwrap_or_default();
            keys.insert(key.clone());
            if let Some((seen, policy)) = state.parsed.get(&key) {
                if *seen == version {
                    out.extend(policy.clone());
                    continue;
                }
            }
            let parsed =
                Policy::from_value(&serde_json::to_value(object.as_ref()).unwrap_or_default());
            if let Err(error) = &parsed {
                tracing::warn!(policy = %key, version, %error, "MultiNetworkPolicy ignored");
            }
            let policy = parsed.ok();
            out.extend(policy.clone());
            state.parsed.insert(key, (version, policy));
        }
        state.parsed.retain(|key, _| keys.contains(key));
        out
    }

    /// The network-status of the sandbox's record: its attachments as
    /// added (`None`: no record).
    fn recorded_status(&self, sandbox: &Sandbox) -> Option<Vec<NetworkStatus>> {
        let mut state = self.lock();
        let path = match state.recorded.get(&sandbox.container_id) {
            Some(known) => known.path.clone(),
            None => Cache::new(sandbox.cni_dir()?).path(&sandbox.container_id, &sandbox.ifname),
        };
        let stamp = std::fs::metadata(&path)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())));
        stamp?;
        if let Some(known) = state.recorded.get(&sandbox.container_id) {
            if known.stamp == stamp {
                return Some(known.status.clone());
            }
        }
        let record = Record::from_file(&std::fs::read(&path).ok()?).ok()?;
        let status = record.network_status();
        state.recorded.insert(
            sandbox.container_id.clone(),
            Recorded {
                path,
                stamp,
                status: status.clone(),
            },
        );
        Some(status)
    }

    /// Named ports of the pods on a policy's networks, read once per pod
    /// (a GET of its spec; the watches hold metadata only).
    fn fill_named_ports(&self, policies: &[Policy], pods: &mut [PodView], uids: &[Option<String>]) {
        let networks: HashSet<&String> = policies.iter().flat_map(|p| &p.networks).collect();
        for (pod, uid) in pods.iter_mut().zip(uids) {
            let Some(uid) = uid else { continue };
            if !pod
                .attachments
                .iter()
                .any(|a| networks.contains(&a.network))
            {
                continue;
            }
            if let Some(ports) = self.lock().ports.get(uid) {
                pod.named_ports = ports.clone();
                continue;
            }
            let api: Api<ApiPod> = Api::namespaced(self.api.client.clone(), &pod.namespace);
            let bound = self.api.timeouts.request;
            // The timer is made inside: it needs the runtime's context.
            let read = self
                .api
                .handle
                .block_on(async { tokio::time::timeout(bound, api.get_opt(&pod.name)).await });
            match read {
                Ok(Ok(Some(found))) if found.uid().as_ref() == Some(uid) => {
                    let ports = found
                        .spec
                        .as_ref()
                        .map(world::named_ports)
                        .unwrap_or_default();
                    self.lock().ports.insert(uid.clone(), ports.clone());
                    pod.named_ports = ports;
                }
                Ok(Ok(_)) => {} // gone, or another pod by its name
                Ok(Err(error)) => {
                    tracing::warn!(pod = %pod.name, %error, "named ports not read")
                }
                Err(_) => tracing::warn!(pod = %pod.name, "named ports not read: timed out"),
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}
