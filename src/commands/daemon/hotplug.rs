//! Dynamic networks: the daemon brings each running sandbox of its node to
//! its pod's selection annotation ([`crate::plan::hotplug`] decides what
//! changes, [`crate::pipeline`] detaches, attaches and publishes as a call does),
//! whenever the pod watch reports an event, and once for every sandbox when
//! it starts (a daemon killed mid-change converges then).
//!
//! Bounded: one thread works through the pods, one pass per wake-up, each
//! pod reconciled to the annotation it has *then* (quick flips end at the
//! last value; a value already reconciled is not worked on again). A pod
//! whose change failed is retried with an exponential backoff, and its
//! Warning posted once per annotation value, not per try. Each pod's pass
//! holds its sandbox's lock ([`Sandboxes::locked`]), so the sandbox's DEL
//! waits for it, and a pass after the DEL finds nothing to do.

use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cluster::api::ClaimStatus;
use crate::cluster::events::{EventType, PodEvent};
use crate::cluster::kube::{KubeCluster, SharedApi};
use crate::cluster::{Cluster, ClusterError, Opened};
use crate::cni::args::CniArgs;
use crate::cni::error::CniError;
use crate::cni::names::ContainerId;
use crate::conf_files::ConfDir;
use crate::config::{ConfigError, PlexusConf};
use crate::netattach::pod::Pod;
use crate::netattach::selection::NETWORKS_ANNOTATION;
use crate::netattach::status::{parse_status_annotation, NETWORK_STATUS_ANNOTATION};
use crate::pipeline::{self, publish, Parts, PluginScope, Target};
use crate::plan::hotplug;
use crate::plan::{self, PlanError, PlanOptions};
use crate::plugin;
use crate::record::{Cache, Lookup, Record};
use crate::run::{Delegates, Executor, Registry, RunContext, RunError};

use super::metrics::Metrics;
use super::sandboxes::{Sandbox, Sandboxes};
use crate::sandbox_dir::SandboxLockError;

/// The first retry of a failed change, doubled per failure up to the cap.
const FIRST_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(60);
/// How long the loop sleeps without an event (retries are due sooner).
const IDLE: Duration = Duration::from_secs(30);

/// Where a sandbox stands.
#[derive(Default)]
struct Progress {
    /// The annotation value last brought about (`Some(None)`: absent).
    done: Option<Option<String>>,
    /// The value whose failure was reported, and when to try it again.
    failed: Option<(Option<String>, Instant)>,
    backoff: Duration,
}

pub struct Reconciler {
    pub api: SharedApi,
    pub sandboxes: Arc<Sandboxes>,
    pub metrics: Arc<Metrics>,
}

/// Why a pass did nothing.
enum Skip {
    /// The sandbox was deleted (or its netns is gone): it is being torn down.
    Gone,
}

impl Reconciler {
    /// Reconcile on every wake-up from `events` until its senders are gone.
    pub fn run(self, events: Receiver<()>) {
        let mut progress: HashMap<ContainerId, Progress> = HashMap::new();
        let mut next = IDLE;
        loop {
            match events.recv_timeout(next) {
                Ok(()) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            // One pass serves every event queued meanwhile.
            while events.try_recv().is_ok() {}
            if !self.api.watched.synced() {
                next = Duration::from_millis(100);
                continue;
            }
            next = self.pass(&mut progress);
        }
    }

    /// One pass over the known sandboxes; how long until a retry is due.
    fn pass(&self, progress: &mut HashMap<ContainerId, Progress>) -> Duration {
        let sandboxes = self.sandboxes.all();
        progress.retain(|id, _| sandboxes.iter().any(|s| &s.container_id == id));
        let now = Instant::now();
        let mut next = IDLE;
        for sandbox in sandboxes {
            let Some(pod) = self.api.watched.pod(&sandbox.namespace, &sandbox.pod) else {
                self.forget_if_deleted(&sandbox);
                continue;
            };
            if sandbox.uid.is_some() && pod.uid != sandbox.uid {
                continue; // Another pod by its name: this sandbox's DEL is coming.
            }
            let wanted = pod.annotations.get(NETWORKS_ANNOTATION).cloned();
            let state = progress.entry(sandbox.container_id.clone()).or_default();
            if state.done.as_ref() == Some(&wanted) {
                continue;
            }
            if let Some((value, at)) = &state.failed {
                if *value == wanted && *at > now {
                    next = next.min(*at - now);
                    continue;
                }
            }
            let start = Instant::now();
            let first_pass = state.done.is_none();
            let cni_dir = sandbox.cni_dir();
            let outcome = self
                .sandboxes
                .locked(&sandbox.container_id, cni_dir.as_deref(), || {
                    match self.sandboxes.get(&sandbox.container_id) {
                        Some(_) => self.reconcile(&sandbox, &pod, first_pass),
                        None => Ok(Err(Skip::Gone)),
                    }
                })
                .map_err(HotplugError::from)
                .and_then(|reconciled| reconciled);
            self.metrics.hotplug_done(start.elapsed(), outcome.is_ok());
            match outcome {
                Ok(_) => {
                    state.done = Some(wanted);
                    state.failed = None;
                    state.backoff = FIRST_RETRY;
                }
                Err(e) => {
                    // Logged and told the pod's owner as a call would answer.
                    let e = CniError::from(e);
                    let repeated = state.failed.as_ref().is_some_and(|(v, _)| *v == wanted);
                    state.backoff = if repeated {
                        (state.backoff * 2).min(MAX_RETRY)
                    } else {
                        FIRST_RETRY
                    };
                    state.failed = Some((wanted, Instant::now() + state.backoff));
                    next = next.min(state.backoff);
                    tracing::warn!(pod = %format!("{}/{}", pod.namespace, pod.name),
                        error = %e, retry_in = ?state.backoff, "hot-plug failed");
                    if !repeated {
                        publish::failed(&self.kube(), &pod, &e);
                    }
                }
            }
        }
        next
    }

    /// Forget a sandbox whose pod is gone once its record is gone too: its
    /// DEL ran where this daemon did not see it (a plugin process, a daemon
    /// before this one), or a GC removed it.
    fn forget_if_deleted(&self, sandbox: &Sandbox) {
        let Some(cni_dir) = sandbox.cni_dir() else {
            return;
        };
        let forgotten = self
            .sandboxes
            .locked(&sandbox.container_id, Some(&cni_dir), || {
                let cache = Cache::new(&cni_dir);
                if let Ok(Lookup::Missing) = cache.load(&sandbox.container_id, &sandbox.ifname) {
                    self.sandboxes.remove(&sandbox.container_id, Some(&cni_dir));
                }
            });
        if let Err(e) = forgotten {
            tracing::warn!(container = %sandbox.container_id, error = %e, "sandbox not checked");
        }
    }

    fn kube(&self) -> KubeCluster {
        KubeCluster::shared(&self.api)
    }

    /// Bring `sandbox` to `pod`'s annotation, and its network-status to
    /// what it has (also when nothing changed on the `first_pass` over a
    /// sandbox of an earlier daemon: one killed before writing it leaves it
    /// stale; a sandbox this daemon ADDed had its status written by the ADD).
    fn reconcile(
        &self,
        sandbox: &Sandbox,
        pod: &Pod,
        first_pass: bool,
    ) -> Result<Result<(), Skip>, HotplugError> {
        let conf = PlexusConf::from_value(&sandbox.conf)?;
        let kube = self.kube();
        let cluster: &dyn Cluster = &kube;
        let registry = self.registry(&PluginScope::of(&conf))?;
        let ctx = RunContext {
            container_id: sandbox.container_id.clone(),
            ifname: sandbox.ifname.clone(),
            netns: Some(sandbox.netns.clone()),
            delegates: Delegates {
                cni_path: sandbox.cni_path.clone(),
                bin_dir: Some(conf.bin_dir.clone()),
                registry: &registry,
            },
        };
        if !sandbox.netns.as_path().exists() {
            return Ok(Err(Skip::Gone));
        }
        let executor = pipeline::attaching_executor(self, &conf.cni_dir, &registry);
        let record = match executor.record(&ctx) {
            // Its DEL ran where this daemon did not see it (a plugin
            // process, a daemon before this one): forgotten here too.
            Err(RunError::UnknownContainer { .. }) => {
                self.sandboxes
                    .remove(&sandbox.container_id, Some(&conf.cni_dir));
                return Ok(Err(Skip::Gone));
            }
            other => other?,
        };
        let changes = self.changes(&conf, cluster, pod, &record)?;
        let mut events: Vec<PodEvent> = Vec::new();
        // The first pass after the ADD would repeat the ADD's own warnings.
        if !first_pass {
            events.extend(publish::selection_warnings(&changes.warnings));
        }
        events.extend(
            changes
                .refused
                .iter()
                .map(|w| publish::warning("NetworkChangeRefused", w)),
        );
        for _ in &changes.refused {
            self.metrics.hotplug("attach", "refused");
        }
        let mut failures = Vec::new();
        for gone in &changes.detach {
            match pipeline::detach(&executor, &ctx, &gone.ifname, cluster) {
                Ok((_, warnings)) => {
                    for warning in warnings {
                        tracing::warn!(pod = %format!("{}/{}", pod.namespace, pod.name), %warning);
                    }
                    self.metrics.hotplug("detach", "ok");
                    events.push(PodEvent {
                        event_type: EventType::Normal,
                        reason: "RemovedInterface",
                        message: format!("Remove {} from {}", gone.ifname, gone.network),
                    });
                }
                Err(e) => {
                    self.metrics.hotplug("detach", "error");
                    failures.push(e);
                }
            }
        }
        let mut claims = Vec::new();
        for new in &changes.attach {
            // A detach that failed leaves its interface: not attached over.
            if !failures.is_empty() {
                break;
            }
            let mut one = plan::Plan {
                attachments: vec![new.clone()],
                warnings: Vec::new(),
                claimed: Vec::new(),
            };
            let attached = pipeline::attach(
                &executor,
                &ctx,
                &mut one,
                pod,
                cluster,
                Target::RunningSandbox,
            );
            events.extend(publish::selection_warnings(&one.warnings));
            match attached {
                Ok(attached) => {
                    self.metrics.hotplug("attach", "ok");
                    claims.extend(attached.claims);
                    let status = publish::network_status(&one, &attached.results);
                    events.extend(publish::added_events(&status, &attached.results));
                    events.extend(publish::device_info_warnings(&attached.results));
                }
                Err(e) => {
                    self.metrics.hotplug("attach", "error");
                    failures.push(e);
                }
            }
        }
        self.publish(
            &kube,
            &executor,
            &ctx,
            pod,
            Written {
                events,
                claims,
                check_status: (first_pass && sandbox.restored) || !changes.is_empty(),
            },
        )?;
        RunError::combined("hot-plug", failures)
            .map(Ok)
            .map_err(Into::into)
    }

    /// What the sandbox must change, planned as its ADD was: the same conf,
    /// the ADD's `CNI_ARGS` (from its cluster network attachment).
    fn changes(
        &self,
        conf: &PlexusConf,
        cluster: &dyn Cluster,
        pod: &Pod,
        record: &Record,
    ) -> Result<hotplug::Changes, HotplugError> {
        let default_network = pipeline::configured_cluster_network(conf, cluster)?;
        let cni_args = record
            .attachments
            .iter()
            .find(|c| c.attachment.default)
            .map(|c| CniArgs::parse(&c.attachment.cni_args))
            .transpose()?;
        // The conf is the ADD's, with what the runtime injected then.
        let options = PlanOptions::new(conf.policy.clone(), record.ifname.clone())
            .with_container(record.container_id.clone())
            .with_cni_args(cni_args)
            .with_runtime_config(conf.runtime_config.clone());
        let conf_dir = ConfDir::new(&conf.conf_dir);
        let inputs = pipeline::node_inputs(conf, cluster, &conf_dir, &default_network, &options);
        hotplug::changes(pod, record, |pod| plan::plan(pod, &inputs)).map_err(HotplugError::from)
    }

    /// The pod's network-status from the record, written when it changed
    /// (by the uid-guarded PATCH of ADD, through the outbox when the daemon
    /// has one), with the claims' status, and the events.
    fn publish(
        &self,
        kube: &KubeCluster,
        executor: &Executor,
        ctx: &RunContext,
        pod: &Pod,
        written: Written,
    ) -> Result<(), HotplugError> {
        let Written {
            events,
            claims,
            check_status,
        } = written;
        let entries = publish::recorded_status(&executor.record(ctx)?);
        let current = pod
            .annotations
            .get(NETWORK_STATUS_ANNOTATION)
            .and_then(|s| parse_status_annotation(s).ok());
        if (check_status && current.as_ref() != Some(&entries)) || !claims.is_empty() {
            for warning in publish::publish(kube, pod, &entries, claims, Vec::new(), events)? {
                tracing::warn!(pod = %format!("{}/{}", pod.namespace, pod.name), %warning);
            }
        } else if !events.is_empty() {
            kube.post_events(pod, &events);
        }
        Ok(())
    }
}

/// Hot-plug's parts of the pipeline: the daemon's API connection, plugins
/// exec'd as its calls' are (chrooted into `chrootDir`, the sandbox's
/// `CNI_NETNS` path, which the node's root has), its metrics.
impl Parts for Reconciler {
    fn open(&self, _conf: &PlexusConf) -> Result<Opened, ClusterError> {
        Ok(Opened::api(self.kube()))
    }

    fn registry(&self, scope: &PluginScope<'_>) -> Result<Registry, CniError> {
        Ok(plugin::daemon_registry(scope.chroot_dir.as_deref()))
    }

    fn executor(&self, cni_dir: &Path) -> Executor {
        Executor::new(Cache::new(cni_dir)).with_observer(self.metrics.clone())
    }

    fn daemon_api(&self) -> Option<&SharedApi> {
        Some(&self.api)
    }
}

/// Why a pass over a sandbox failed; it is retried with backoff, and told
/// the pod's owner in an `AttachmentFailed` event whose message is the
/// details of the CNI error it converts to (one `From`, as at a call).
#[derive(Debug, thiserror::Error)]
enum HotplugError {
    /// The sandbox's conf, as its ADD had it.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The sandbox's lock.
    #[error(transparent)]
    Lock(#[from] SandboxLockError),
    /// Planning what to change (boxed: large and rare).
    #[error(transparent)]
    Plan(Box<PlanError>),
    /// Reading or writing the pod's objects.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The record, attaching and detaching (several failures combined).
    #[error(transparent)]
    Run(#[from] RunError),
    /// The protocol crate's: the record's `CNI_ARGS`.
    #[error(transparent)]
    Protocol(#[from] CniError),
}

impl From<PlanError> for HotplugError {
    fn from(e: PlanError) -> HotplugError {
        HotplugError::Plan(Box::new(e))
    }
}

impl From<HotplugError> for CniError {
    fn from(e: HotplugError) -> CniError {
        match e {
            HotplugError::Config(e) => e.into(),
            HotplugError::Lock(e) => e.into(),
            HotplugError::Plan(e) => (*e).into(),
            HotplugError::Cluster(e) => e.into(),
            HotplugError::Run(e) => e.into(),
            HotplugError::Protocol(e) => e,
        }
    }
}

/// What a pass writes to the API server.
struct Written {
    events: Vec<PodEvent>,
    /// The status of the claims of what it attached.
    claims: Vec<ClaimStatus>,
    /// Whether the network-status is compared with the record's.
    check_status: bool,
}
