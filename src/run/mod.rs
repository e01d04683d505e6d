//! The executor: runs a [`Plan`]'s attachments through their plugin chains.
//!
//! - Every plugin of a chain is served by the [`Registry`]: a built-in
//!   `Plugin` or an exec'd binary, so chains mix both.
//! - ADD (cni-SPEC §3 "Adding an attachment"): every plugin of every
//!   attachment is validated before the first ADD, so a bad configuration
//!   fails with nothing to undo; then attachments in plan order, plugins in
//!   chain order, each getting the previous plugin's result as `prevResult`
//!   (none for the first), written in its request's `cniVersion`.
//! - Failure (multi-net-spec §7.2): the first failure stops the ADD and
//!   attachments not yet tried are never attempted. Everything done is
//!   undone: the failing chain's plugins that succeeded are DEL'd in reverse
//!   with the last good result, then the completed attachments in reverse.
//!   The failing plugin itself is left to the DEL the runtime must send after
//!   a failed ADD (cni-SPEC §3 "Lifecycle"); the record says it is owed.
//! - DEL (cni-SPEC §3 "Deleting an attachment", multi-net-spec §7.2): every
//!   attachment whose ADD was attempted, in reverse, each chain in reverse
//!   with its cached result as `prevResult`. Within a chain the first failure
//!   stops it, as the spec says (an IPAM release must not run while the
//!   rules of a later plugin still point at the address); across attachments
//!   a failure never stops the others, and any failure is the final error.
//!   Without a record, DEL runs the plan its caller falls back to (the
//!   cluster network from the configuration, see [`Executor::del`]).
//! - What was attempted and how far it got lives in the [`Cache`], written
//!   before the first plugin runs and after every attachment, so DEL, CHECK
//!   and GC need neither the API server nor a crash-free ADD.
//! - Errors are [`RunError`]s: a plugin's reply wrapped in the context that
//!   names it (attachment, position, type), the executor's own failures
//!   typed; the CNI code is chosen where plexus answers (see [`error`]).

pub mod claims;
mod cluster_network;
mod device_info;
pub mod error;
pub mod exec;
pub mod hotplug;
pub mod passthru;
pub mod registry;
pub mod route_hook;
pub mod routes;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::cni::args::CniArgs;
use crate::cni::durable;
use crate::cni::env::{AttachmentParams, CniCommand, CniEnv};
use crate::cni::error::CniError;
use crate::cni::names::{ContainerId, IfName, NetnsPath};
use crate::cni::result::CniResult;
use crate::cni::skel::{valid_attachments_value, Request, ValidAttachment, VALID_ATTACHMENTS};
use crate::cni::CniVersion;
use crate::netattach::deviceinfo::DeviceInfo;
use crate::plan::{Attachment, DefaultNetwork, Plan};
use crate::record::{Cache, CachedAttachment, Lookup, Record, RecordError, State};
use plexus_dataplane::session::PodLookup;

pub use cluster_network::status;
use cluster_network::ClusterPluginCall;
use device_info::{
    collect_device_info, copy_device_plugin_info, device_plugin_info, remove_device_info,
    OptionalDeviceInfo,
};
pub use error::RunError;
pub use exec::{ExecError, ExecPlugin};
use registry::Served;
pub use registry::{Delegates, Registry};
pub use route_hook::{
    set_default_routes, strip_default_routes, NoRouteHook, RouteChange, RouteHook,
};

/// Makes the plan DEL runs when plexus has no readable record (see
/// [`Executor::del`]).
pub type Fallback<'f> = &'f dyn Fn() -> Result<Plan, RunError>;

/// The attachment parameters of the runtime's call to plexus (cni-SPEC §3).
#[derive(Clone)]
pub struct RunContext<'a> {
    pub container_id: ContainerId,
    /// The runtime's `CNI_IFNAME` for plexus; with the container ID, the key
    /// of plexus's record.
    pub ifname: IfName,
    /// `CNI_NETNS`; required for ADD and CHECK, optional for DEL.
    pub netns: Option<NetnsPath>,
    pub delegates: Delegates<'a>,
}

/// One attachment of a successful ADD.
#[derive(Debug, Clone, PartialEq)]
pub struct AttachmentResult {
    pub network: String,
    pub ifname: IfName,
    pub default: bool,
    /// The chain's final result (after the default-route step).
    pub result: Option<CniResult>,
    /// device-info-SPEC §6.1.1: the device information collected after the
    /// chain, for network-status.
    pub device_info: Option<DeviceInfo>,
    /// What went wrong without failing the attachment: device information
    /// is optional (multi-net-spec §5.3.8), so an unreadable or invalid
    /// device-info file is reported (a Warning event, a log line) and the
    /// attachment goes on without it, as Multus does.
    pub warnings: Vec<String>,
}

/// What a DEL did besides succeeding.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DelReport {
    /// Every attachment torn down, in DEL order, as its ADD planned it.
    pub detached: Vec<Attachment>,
    pub warnings: Vec<String>,
    /// No record of the sandbox could be read: plexus never added it (a
    /// pod from before plexus), or its DEL is repeated, or the record is
    /// unreadable.
    pub unrecorded: bool,
}

/// What a GC did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GcReport {
    /// `(container ID, ifname)` of every stale record torn down.
    pub deleted: Vec<(ContainerId, IfName)>,
    pub warnings: Vec<String>,
}

/// Runs plans and tears them down.
pub struct Executor {
    cache: Cache,
    hook: Box<dyn RouteHook + Send + Sync>,
    observer: Option<Arc<dyn AttachmentObserver>>,
}

/// Told how long each attachment's chain took (the daemon's metrics).
pub trait AttachmentObserver: Send + Sync {
    /// `driver`: the chain's first plugin type, the one that makes the
    /// interface; `failed`: the chain's error, if it failed.
    fn chain_done(
        &self,
        command: CniCommand,
        driver: &str,
        elapsed: Duration,
        failed: Option<&RunError>,
    );
}

/// One plugin of a chain, resolved and validated.
struct Step<'r> {
    plugin_type: String,
    plugin: Served<'r>,
}

/// Why a chain's ADD stopped.
struct ChainFailure {
    error: RunError,
    /// The plugin that failed; `None` when every plugin succeeded and a later
    /// step (default route, cache) failed.
    failed_plugin: Option<usize>,
    last_good: Option<CniResult>,
}

impl Executor {
    pub fn new(cache: Cache) -> Executor {
        Executor {
            cache,
            hook: Box::new(NoRouteHook),
            observer: None,
        }
    }

    pub fn with_observer(mut self, observer: Arc<dyn AttachmentObserver>) -> Executor {
        self.observer = Some(observer);
        self
    }

    /// Tell the observer how a chain of `att` went, started at `start`.
    fn observe<T>(
        &self,
        command: CniCommand,
        att: &Attachment,
        start: Instant,
        outcome: Result<&T, &RunError>,
    ) {
        if let Some(observer) = &self.observer {
            let driver = att.plugins.first().map(type_of).unwrap_or_default();
            observer.chain_done(command, &driver, start.elapsed(), outcome.err());
        }
    }

    pub fn with_route_hook(mut self, hook: Box<dyn RouteHook + Send + Sync>) -> Executor {
        self.hook = hook;
        self
    }

    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// ADD every attachment of `plan`, or none: see the module docs.
    pub fn add(&self, plan: &Plan, ctx: &RunContext) -> Result<Vec<AttachmentResult>, RunError> {
        let netns = ctx.netns.as_ref().ok_or(RunError::NoNetns {
            reason: "required for ADD but not set",
        })?;
        // No pod has the node's namespace: refused before any plugin (built
        // in or exec'd) could configure the node as a pod.
        if let Ok(PodLookup::Node) = ctx.delegates.session().pod(netns.as_path()) {
            return Err(RunError::NodeNetns {
                path: netns.clone(),
            });
        }
        if plan.attachments.is_empty() {
            return Err(RunError::EmptyPlan);
        }

        // Everything is validated before anything is added.
        let chains = prepare_all(&plan.attachments, ctx)?;

        match self.cache.load(&ctx.container_id, &ctx.ifname)? {
            Lookup::Found(old) if old.owes_del() => {
                return Err(RunError::AlreadyAdded {
                    container_id: ctx.container_id.clone(),
                    ifname: ctx.ifname.clone(),
                    path: self.cache.path(&ctx.container_id, &ctx.ifname),
                })
            }
            // A record nothing is owed for, or one that cannot be read: the
            // new record replaces it.
            _ => {}
        }

        let mut record = Record::new(&ctx.container_id, &ctx.ifname, Some(netns), plan);
        self.add_from(&mut record, 0, &chains, ctx, netns)
    }

    /// ADD `record.attachments[first..]` (validated as `chains`), the ones
    /// before it standing: the whole of an ADD (`first` 0) or a hot-plug.
    /// The record is written before the first plugin runs, so a crash from
    /// there on leaves a record saying which attachment was being added,
    /// and after each attachment. A failure undoes `first..`, never the
    /// attachments before it.
    fn add_from(
        &self,
        record: &mut Record,
        first: usize,
        chains: &[Vec<Step>],
        ctx: &RunContext,
        netns: &NetnsPath,
    ) -> Result<Vec<AttachmentResult>, RunError> {
        let attachments: Vec<Attachment> = record.attachments[first..]
            .iter()
            .map(|c| c.attachment.clone())
            .collect();
        let (device_plugin_info, read_warnings): (Vec<_>, Vec<_>) =
            attachments.iter().map(device_plugin_info).unzip();
        let mut warnings: Vec<Vec<String>> = read_warnings
            .into_iter()
            .map(|w: Option<String>| w.into_iter().collect())
            .collect();
        begin(&mut record.attachments[first]);
        self.cache.store(record)?;
        // Built-in plugins' fsyncs run alongside the rest of the ADD; success
        // waits for them (see `plexus_cni::durable`).
        let durability = durable::Scope::begin();

        let mut results = Vec::with_capacity(chains.len());
        for (k, steps) in chains.iter().enumerate() {
            let i = first + k;
            let att = &attachments[k];
            let copy = device_plugin_info[k].as_ref();
            let start = Instant::now();
            let outcome = self.add_chain(att, steps, ctx, netns, copy).and_then(
                |(result, (info, collect_warning))| {
                    warnings[k].extend(collect_warning);
                    let cached = &mut record.attachments[i];
                    cached.state = State::Added;
                    cached.result = Some(result.clone());
                    cached.device_info = info.clone();
                    if let Some(next) = record.attachments.get_mut(i + 1) {
                        begin(next);
                    }
                    self.cache.update(record).map_err(|error| {
                        Box::new(ChainFailure {
                            error: error.into(),
                            failed_plugin: None,
                            last_good: Some(result.clone()),
                        })
                    })?;
                    Ok((result, info))
                },
            );
            self.observe(
                CniCommand::Add,
                att,
                start,
                outcome.as_ref().map_err(|f| &f.error),
            );
            match outcome {
                Ok((result, device_info)) => results.push(AttachmentResult {
                    network: att.network.clone(),
                    ifname: att.ifname.clone(),
                    default: att.default,
                    result: Some(result),
                    device_info,
                    warnings: std::mem::take(&mut warnings[k]),
                }),
                Err(failure) => return Err(self.fail_add(record, first, i, failure, ctx)),
            }
        }
        let waited = {
            let _span = crate::phases::span("fsync wait");
            durability.wait()
        };
        if let Err(error) = waited {
            // Not on disk: nothing may be reported as attached.
            let last = first + results.len() - 1;
            let failure = Box::new(ChainFailure {
                error: error.into(),
                failed_plugin: None,
                last_good: results.last().and_then(|r| r.result.clone()),
            });
            return Err(self.fail_add(record, first, last, failure, ctx));
        }
        Ok(results)
    }

    /// One chain's ADD, threading prevResult, then the default-route step;
    /// with the device information it left (device-info-SPEC §6.1.1).
    /// `copy`: the device plugin's information, written to the
    /// attachment's CNI file before the first plugin (§4.2.1).
    fn add_chain(
        &self,
        att: &Attachment,
        steps: &[Step],
        ctx: &RunContext,
        netns: &NetnsPath,
        copy: Option<&DeviceInfo>,
    ) -> Result<(CniResult, OptionalDeviceInfo), Box<ChainFailure>> {
        let env = attachment_env(att, ctx, CniCommand::Add, ctx.netns.clone())
            .map_err(RunError::from)
            .and_then(|env| copy_device_plugin_info(att, copy).map(|()| env))
            .map_err(|error| {
                Box::new(ChainFailure {
                    error,
                    failed_plugin: Some(0),
                    last_good: None,
                })
            })?;
        let mut prev: Option<CniResult> = None;
        for (i, step) in steps.iter().enumerate() {
            let added = request(&att.plugins[i], env.clone(), prev.as_ref())
                .map_err(RunError::from)
                .and_then(|req| step.plugin.add(&req));
            match added {
                Ok(result) => prev = Some(result),
                Err(e) => {
                    return Err(Box::new(ChainFailure {
                        error: e.in_step(&att.network, &att.ifname, i, &step.plugin_type),
                        failed_plugin: Some(i),
                        last_good: prev,
                    }))
                }
            }
        }
        let produced = prev.expect("a chain has at least one plugin");
        let mut result = produced.clone();
        let change = |via| RouteChange {
            netns,
            ifname: &att.ifname,
            via,
        };
        let routed = (|| {
            if att.clear_default_route {
                self.hook.route(&change(None), &mut result)?;
            }
            match &att.default_route {
                Some(gws) if !gws.is_empty() => self.hook.route(&change(Some(gws)), &mut result),
                _ => Ok(()),
            }
        })();
        let routed = routed.map_err(|e| RunError::DefaultRoute {
            network: att.network.clone(),
            ifname: att.ifname.clone(),
            source: Box::new(e),
        });
        routed
            .map(|()| (result, collect_device_info(att)))
            .map_err(|error| {
                Box::new(ChainFailure {
                    error,
                    failed_plugin: None,
                    // What the plugins produced: the hook may have half-changed its copy.
                    last_good: Some(produced),
                })
            })
    }

    /// Record the failure, roll back, and build the error to return.
    fn fail_add(
        &self,
        record: &mut Record,
        first: usize,
        i: usize,
        failure: Box<ChainFailure>,
        ctx: &RunContext,
    ) -> RunError {
        let failure = *failure;
        // multi-net-spec §7.2: later attachments are not attempted (one may
        // have been marked as started just before a failed cache write).
        for later in &mut record.attachments[i + 1..] {
            later.state = State::Pending;
            later.pending_del.clear();
        }
        let cached = &mut record.attachments[i];
        cached.state = State::Failed;
        if failure.last_good.is_some() || cached.result.is_none() {
            cached.result = failure.last_good;
        }
        // Owed: the plugins that ran, the failing one included unless it
        // undid its own work (then a device it found in its way, which it
        // did not make, is never DEL'd); the ones after it never ran.
        let ran = failure
            .failed_plugin
            .map_or(cached.attachment.plugins.len(), |k| {
                if failure.error.undone() {
                    k
                } else {
                    k + 1
                }
            });
        cached.pending_del = (0..ran).collect();
        let _ = self.cache.update(record);

        // Roll back: the failing chain's succeeded plugins, then the
        // completed attachments, newest first. Best effort throughout.
        let mut rollback_errors = Vec::new();
        let netns = live_netns(ctx).live();
        for j in (first..=i).rev() {
            let cached = &mut record.attachments[j];
            let skip = if j == i { failure.failed_plugin } else { None };
            if let Err(e) = del_chain(cached, ctx, netns.clone(), skip) {
                rollback_errors.push(e);
            }
        }
        let error = failure.error;
        // A plugin that undid its own work may have found something in its
        // way: the record is kept even when nothing is owed, so that DEL
        // does not fall back to the configuration and delete that (see
        // `del`).
        let in_the_way = failure.failed_plugin.is_some() && error.undone();
        let kept = if in_the_way {
            self.cache.store(record)
        } else {
            self.persist(record)
        };
        match (rollback_errors.is_empty(), kept) {
            (true, Ok(())) => error,
            (_, kept) => RunError::AddFailed {
                error: Box::new(error),
                rollback: rollback_errors,
                record: kept.err(),
            },
        }
    }

    /// Store the record while it owes a DEL, else remove it. It replaces
    /// the file, which may be a corrupt one DEL fell back from.
    fn persist(&self, record: &Record) -> Result<(), RecordError> {
        if record.owes_del() {
            self.cache.store(record)
        } else {
            self.cache.remove(&record.container_id, &record.ifname)
        }
    }

    /// DEL every attachment plexus attempted for `(ctx.container_id,
    /// ctx.ifname)`; idempotent. Without a readable record, DEL runs every
    /// attachment of the plan `fallback` makes (without prevResult): plexus's
    /// caller gives the cluster network from its configuration, as Multus
    /// DELs its delegates from its conf without a cache. That is the case of
    /// a pod attached before plexus was installed, whose cluster network's
    /// resources would leak otherwise, and of a DEL repeated after a
    /// successful one, for which the cluster network's DEL is harmless
    /// (cni-SPEC §2 DEL: idempotent). An ADD whose failing plugin undid its
    /// own work keeps its record even when nothing is owed, so the DEL after
    /// it runs nothing and a device found in the ADD's way is left alone;
    /// that DEL removes the record, so none piles up. (A further DEL then falls back; containerd sends it
    /// without the pod's namespace, where nothing of the pod can be touched.)
    /// An unreadable record without a fallback
    /// is moved aside with a warning: failing every DEL forever (multus-cni
    /// #948) would leave the pod stuck, and GC still reclaims what its
    /// plugins can.
    pub fn del(&self, ctx: &RunContext, fallback: Option<Fallback>) -> Result<DelReport, RunError> {
        let mut report = DelReport::default();
        let lookup = self.cache.load(&ctx.container_id, &ctx.ifname)?;
        let corrupt = matches!(lookup, Lookup::Corrupt { .. });
        let record = match lookup {
            Lookup::Found(record) => Some(record),
            Lookup::Missing => None,
            Lookup::Corrupt { path, reason } => {
                report
                    .warnings
                    .push(format!("cache {} is unreadable ({reason})", path.display()));
                None
            }
        };
        report.unrecorded = record.is_none();
        let mut record = match (record, fallback) {
            (Some(record), _) => record,
            (None, None) => return self.nothing_to_delete(ctx, corrupt, report),
            (None, Some(fallback)) => match fallback() {
                Ok(plan) => {
                    if let Some(warning) = report.warnings.last_mut().filter(|_| corrupt) {
                        warning.push_str(
                            "; deleting every attachment of the plan made from the configuration instead",
                        );
                    }
                    let mut record = Record::new(&ctx.container_id, &ctx.ifname, None, &plan);
                    for cached in &mut record.attachments {
                        cached.state = State::Adding;
                        cached.pending_del = cached.all_plugins();
                    }
                    record
                }
                // The API server did not answer. Only when the pod still has
                // an interface by CNI_IFNAME can something be left to DEL:
                // the runtime retries then. A DEL repeated after plexus's
                // own (its interface gone, or no namespace) succeeds, so DEL
                // works with the API server gone.
                Err(RunError::Plan(e)) if e.is_transient() && pod_has_ifname(ctx) => {
                    return Err(RunError::Plan(e))
                }
                Err(e) => {
                    report.warnings.push(format!(
                        "no plan to delete from the configuration: {}",
                        CniError::from(e).details
                    ));
                    return self.nothing_to_delete(ctx, corrupt, report);
                }
            },
        };
        let netns = live_netns(ctx);
        if let DelNetns::Node(node) = &netns {
            report.warnings.push(format!(
                "CNI_NETNS {} is the node's own namespace, not the pod's: plugins get no \
                 CNI_NETNS, so nothing of the node is deleted",
                node
            ));
        }
        let netns = netns.live();
        let mut errors = Vec::new();
        for cached in record.attachments.iter_mut().rev() {
            if !cached.owes_del() {
                continue;
            }
            let start = Instant::now();
            let deleted = del_chain(cached, ctx, netns.clone(), None);
            self.observe(CniCommand::Del, &cached.attachment, start, deleted.as_ref());
            match deleted {
                Ok(()) => report.detached.push(cached.attachment.clone()),
                Err(e) => errors.push(e),
            }
        }
        if let Err(e) = self.persist(&record) {
            errors.push(e.into());
        }
        RunError::combined("DEL", errors).map(|()| report)
    }

    /// DEL without a record or a plan: nothing to run. An unreadable record
    /// (`corrupt`) is moved aside.
    fn nothing_to_delete(
        &self,
        ctx: &RunContext,
        corrupt: bool,
        mut report: DelReport,
    ) -> Result<DelReport, RunError> {
        if !corrupt {
            return Ok(report);
        }
        let moved = self.cache.quarantine(&ctx.container_id, &ctx.ifname)?;
        let note = format!(
            "; nothing could be deleted; the file was moved to {}",
            moved.display()
        );
        if let Some(warning) = report.warnings.first_mut() {
            warning.push_str(&note);
        }
        Ok(report)
    }

    /// CHECK every attachment (cni-SPEC §3 "Checking an attachment") with
    /// its cached result; the first error is returned. Attachments whose list
    /// sets `disableCheck` are skipped, and so are chains older than 0.4.0,
    /// which have no CHECK (cni-SPEC §2).
    pub fn check(&self, ctx: &RunContext) -> Result<(), RunError> {
        if ctx.netns.is_none() {
            return Err(RunError::NoNetns {
                reason: "required for CHECK but not set",
            });
        }
        // No record: code 11, the container unknown (cni-SPEC §2 CHECK).
        let record = self.record(ctx)?;
        if let Some(c) = record.attachments.iter().find(|c| c.state != State::Added) {
            return Err(RunError::NotAdded {
                network: c.attachment.network.clone(),
                ifname: c.attachment.ifname.clone(),
                state: c.state,
            });
        }
        for cached in &record.attachments {
            let att = &cached.attachment;
            let too_old = att
                .plugins
                .first()
                .and_then(config_version)
                .is_some_and(|v| v < CniVersion::V0_4_0);
            if att.disable_check || too_old {
                continue;
            }
            let env = attachment_env(att, ctx, CniCommand::Check, ctx.netns.clone())?;
            for (i, config) in att.plugins.iter().enumerate() {
                let plugin_type = type_of(config);
                let checked = (|| -> Result<(), RunError> {
                    let req = request(config, env.clone(), cached.result.as_ref())?;
                    let t = req.plugin_type.clone().unwrap_or_default();
                    ctx.delegates.registry.serve(&t)?.check(&req)
                })();
                checked.map_err(|e| e.in_step(&att.network, &att.ifname, i, &plugin_type))?;
            }
        }
        Ok(())
    }

    /// CNI 1.1 GC (cni-SPEC §2 GC). Every record whose `(containerID,
    /// ifname)` is not in `valid` is torn down as DEL would (no netns: GC may
    /// assume it is gone), which also reclaims stale records that piled up
    /// (multus-cni #1488); then GC is forwarded to the cluster network's
    /// plugins with `cni.dev/valid-attachments`, as Multus does (secondary
    /// networks get no GC). Errors do not stop GC; all are returned.
    pub fn gc(
        &self,
        valid: &[ValidAttachment],
        delegates: &Delegates,
        cluster: Option<&DefaultNetwork>,
    ) -> Result<GcReport, RunError> {
        let mut report = GcReport::default();
        let mut errors = Vec::new();
        let is_valid = |id: &str, ifname: &str| valid.iter().any(|(c, i)| c == id && i == ifname);
        for entry in self.cache.entries()? {
            match entry {
                crate::record::Entry::Record {
                    container_id,
                    ifname,
                } if !is_valid(&container_id, &ifname) => {
                    let ctx = RunContext {
                        container_id: container_id.clone(),
                        ifname: ifname.clone(),
                        netns: None,
                        delegates: delegates.clone(),
                    };
                    match self.del(&ctx, None) {
                        Ok(del) => {
                            report.warnings.extend(del.warnings);
                            report.deleted.push((container_id, ifname));
                        }
                        Err(e) => errors.push(RunError::StaleRecord {
                            container_id: container_id.clone(),
                            ifname: ifname.clone(),
                            source: Box::new(e),
                        }),
                    }
                }
                crate::record::Entry::Quarantined {
                    path,
                    container_id,
                    ifname,
                } if !is_valid(&container_id, &ifname) => {
                    match crate::cni::whole_file::remove(&path) {
                        Ok(()) => report
                            .warnings
                            .push(format!("removed unreadable record {}", path.display())),
                        Err(e) => errors.push(RecordError::io(path, e).into()),
                    }
                }
                // GC runs alone (cni-SPEC §3 "Lifecycle"): no writer is
                // between its write and its rename.
                crate::record::Entry::Temp(path) => {
                    if let Err(e) = crate::cni::whole_file::remove(&path) {
                        errors.push(RecordError::io(path, e).into());
                    }
                }
                _ => {}
            }
        }
        if let Some(cluster) = cluster {
            self.gc_cluster(valid, delegates, cluster, &mut report, &mut errors);
        }
        RunError::combined("GC", errors).map(|()| report)
    }

    /// cni-SPEC §3 "Garbage-collecting a network" for the cluster network.
    fn gc_cluster(
        &self,
        valid: &[ValidAttachment],
        delegates: &Delegates,
        cluster: &DefaultNetwork,
        report: &mut GcReport,
        errors: &mut Vec<RunError>,
    ) {
        let list = &cluster.config;
        let name = list.name.as_deref().unwrap_or(&cluster.network);
        if list.disable_gc {
            report.warnings.push(format!(
                "cluster network {name}: disableGC is set, GC not forwarded (cni-SPEC §1)"
            ));
            return;
        }
        let version = match list.select_version() {
            Ok(v) => v,
            Err(e) => {
                errors.push(RunError::ClusterNetwork {
                    network: name.to_string(),
                    source: Box::new(e.into()),
                });
                return;
            }
        };
        if version < CniVersion::V1_1_0 {
            // As libcni: GC exists from 1.1.0 on.
            return;
        }
        let attachments = valid_attachments_value(valid);
        for (i, plugin) in list.plugins.iter().enumerate() {
            let extra = Map::from_iter([(VALID_ATTACHMENTS.to_string(), attachments.clone())]);
            let call = ClusterPluginCall {
                delegates,
                network: name,
                version,
                command: CniCommand::Gc,
            };
            if let Err(e) = call.run(i, plugin, extra, |p, req| p.gc(req, valid)) {
                errors.push(e);
            }
        }
    }
}

/// Mark an attachment's ADD as started: until it finishes, every plugin of
/// it may have left something behind.
fn begin(cached: &mut CachedAttachment) {
    cached.state = State::Adding;
    cached.pending_del = cached.all_plugins();
}

/// [`prepare`] every attachment for ADD: validated before anything runs.
fn prepare_all<'r>(
    attachments: &[Attachment],
    ctx: &RunContext<'r>,
) -> Result<Vec<Vec<Step<'r>>>, RunError> {
    attachments
        .iter()
        .map(|a| prepare(a, ctx, CniCommand::Add))
        .collect()
}

/// Resolve and validate every plugin of `att` for `command`.
fn prepare<'r>(
    att: &Attachment,
    ctx: &RunContext<'r>,
    command: CniCommand,
) -> Result<Vec<Step<'r>>, RunError> {
    let env = attachment_env(att, ctx, command, ctx.netns.clone())?;
    att.plugins
        .iter()
        .enumerate()
        .map(|(i, config)| {
            let plugin_type = type_of(config);
            let step = (|| {
                let req = request(config, env.clone(), None)?;
                let t = req.plugin_type.clone().ok_or(RunError::NoType)?;
                let plugin = ctx.delegates.registry.serve(&t)?;
                plugin.validate(&req)?;
                Ok(Step {
                    plugin_type: t,
                    plugin,
                })
            })();
            step.map_err(|e: RunError| e.in_step(&att.network, &att.ifname, i, &plugin_type))
        })
        .collect()
}

/// DEL the plugins of `cached` still owed, in reverse, with its cached
/// result; those that succeed are no longer owed. The first failure stops
/// the chain (cni-SPEC §3). `skip`: a plugin left for the runtime's DEL.
fn del_chain(
    cached: &mut CachedAttachment,
    ctx: &RunContext,
    netns: Option<NetnsPath>,
    skip: Option<usize>,
) -> Result<(), RunError> {
    let att = &cached.attachment;
    let env = attachment_env(att, ctx, CniCommand::Del, netns)?;
    let owed: Vec<usize> = cached.pending_del.iter().rev().copied().collect();
    for i in owed {
        if Some(i) == skip {
            continue;
        }
        let config = &att.plugins[i];
        let plugin_type = type_of(config);
        let deleted = (|| -> Result<(), RunError> {
            let req = request(config, env.clone(), cached.result.as_ref())?;
            let t = req.plugin_type.clone().unwrap_or_default();
            ctx.delegates.registry.serve(&t)?.del(&req)
        })();
        match deleted {
            Ok(()) => cached.pending_del.retain(|j| *j != i),
            Err(e) => return Err(e.in_step(&att.network, &att.ifname, i, &plugin_type)),
        }
    }
    if cached.pending_del.is_empty() {
        remove_device_info(att)?;
    }
    Ok(())
}

/// The environment of one attachment's plugins.
fn attachment_env(
    att: &Attachment,
    ctx: &RunContext,
    command: CniCommand,
    netns: Option<NetnsPath>,
) -> Result<CniEnv, CniError> {
    let args = CniArgs::parse(&att.cni_args)
        .map_err(|e| e.within(format!("{} ({})", att.network, att.ifname)))?;
    let params = AttachmentParams {
        netns,
        args,
        path: ctx.delegates.search_path(),
        ..AttachmentParams::of(ctx.container_id.clone(), att.ifname.clone())
    };
    CniEnv::for_attachment(command, params)
}

/// The runtime's netns for DEL, when it still exists: a DEL after the
/// namespace is gone (or with containerd's empty `CNI_NETNS`) still runs
/// every plugin, with `CNI_NETNS` empty; plugins must cope (cni-SPEC §2 DEL).
/// The node's own namespace counts as gone: no pod's interface is there, and
/// a plugin deleting `CNI_IFNAME` in it would delete the node's.
/// The session answers for a namespace it was given (thick mode), whose
/// path the daemon itself may not see.
fn live_netns(ctx: &RunContext) -> DelNetns {
    let Some(p) = ctx.netns.clone() else {
        return DelNetns::Gone;
    };
    match ctx.delegates.session().pod(p.as_path()) {
        Ok(PodLookup::Node) => DelNetns::Node(p),
        Ok(PodLookup::Pod(_)) => DelNetns::Live(p),
        _ if p.as_path().exists() => DelNetns::Live(p),
        _ => DelNetns::Gone,
    }
}

/// Whether the pod's live namespace has an interface named `CNI_IFNAME`;
/// false when it cannot be told (no namespace, the node's, a netlink error).
fn pod_has_ifname(ctx: &RunContext) -> bool {
    let DelNetns::Live(netns) = live_netns(ctx) else {
        return false;
    };
    let session = ctx.delegates.session();
    match session.pod(netns.as_path()) {
        Ok(PodLookup::Pod(side)) => session
            .pod_netlink(side)
            .and_then(|nl| Ok(nl.link_by_name(&ctx.ifname)?.is_some()))
            .unwrap_or(false),
        _ => false,
    }
}

/// What a DEL's `CNI_NETNS` is, see [`live_netns`].
enum DelNetns {
    Live(NetnsPath),
    Gone,
    Node(NetnsPath),
}

impl DelNetns {
    /// `CNI_NETNS` for the plugins.
    fn live(self) -> Option<NetnsPath> {
        match self {
            DelNetns::Live(p) => Some(p),
            DelNetns::Gone | DelNetns::Node(_) => None,
        }
    }
}

/// A plugin's request: its plan JSON plus `prevResult`, the previous result
/// written in the request's own `cniVersion`.
fn request(
    config: &Map<String, Value>,
    env: CniEnv,
    prev: Option<&CniResult>,
) -> Result<Request, CniError> {
    let mut config = config.clone();
    // cni-SPEC §3: never set for the first ADD of a chain.
    config.retain(|k, _| !crate::cni::casefold::fold_eq(k, "prevResult"));
    let mut req = Request::from_config(env, config)?;
    if let Some(prev) = prev {
        let v = prev
            .to_value(req.cni_version)
            .map_err(|e| e.within("prevResult"))?;
        req.prev_result = Some(CniResult::from_value_as(&v, req.cni_version)?);
        req.config.insert("prevResult".into(), v);
    }
    Ok(req)
}

/// `cniVersion` of a plugin's request JSON (missing means 0.1.0).
fn config_version(config: &Map<String, Value>) -> Option<CniVersion> {
    match config.get("cniVersion") {
        None => Some(CniVersion::V0_1_0),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    }
}

fn type_of(config: &Map<String, Value>) -> String {
    config
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn result(v: Value) -> CniResult {
        CniResult::from_value(&v).unwrap()
    }

    fn routes(r: &CniResult) -> Vec<String> {
        r.routes
            .iter()
            .map(|r| match r.gw {
                Some(gw) => format!("{} via {gw}", r.dst),
                None => r.dst.to_string(),
            })
            .collect()
    }

    #[test]
    fn default_route_helpers() {
        // multi-net-spec §4.1.2.1.9.
        let mut r = result(json!({"cniVersion": "1.0.0",
            "ips": [{"address": "10.0.0.2/24"}, {"address": "fd00::2/64"}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}, {"dst": "10.1.0.0/16"},
                       {"dst": "::/0", "gw": "fd00::1"}]}));
        let mut cleared = r.clone();
        strip_default_routes(&mut cleared);
        assert_eq!(routes(&cleared), ["10.1.0.0/16"]);
        // Only the gateways' families are replaced, in their order.
        set_default_routes(
            &mut r,
            &["10.0.0.254".parse().unwrap(), "10.0.0.253".parse().unwrap()],
        );
        assert_eq!(
            routes(&r),
            [
                "10.1.0.0/16",
                "::/0 via fd00::1",
                "0.0.0.0/0 via 10.0.0.254",
                "0.0.0.0/0 via 10.0.0.253"
            ]
        );
    }

    #[test]
    fn requests_carry_prev_result_in_their_own_version() {
        // cni-SPEC §3 "Deriving request configuration": prevResult as the
        // request's version; a stale one in the plan JSON is dropped.
        let env = CniEnv::Add(AttachmentParams {
            netns: Some(crate::cni::names::NetnsPath::new("/run/netns/x").unwrap()),
            ..AttachmentParams::new("c", "eth0").unwrap()
        });
        let config = json!({"cniVersion": "0.2.0", "name": "n", "type": "t",
                            "PrevResult": {"stale": true}})
        .as_object()
        .unwrap()
        .clone();
        let req = request(&config, env.clone(), None).unwrap();
        assert_eq!(req.prev_result, None);
        assert_eq!(req.config.get("PrevResult"), None);
        let prev = result(json!({"cniVersion": "1.1.0",
            "interfaces": [{"name": "eth0"}],
            "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 0}]}));
        let req = request(&config, env.clone(), Some(&prev)).unwrap();
        assert_eq!(
            req.config["prevResult"],
            json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.0.0.2/24", "gateway": "10.0.0.1"}})
        );
        assert_eq!(
            req.prev_result.unwrap().cni_version,
            Some(CniVersion::V0_2_0)
        );
        // A result 0.2.0 cannot express fails naming prevResult.
        let no_ip = result(json!({"cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}]}));
        let e = request(&config, env, Some(&no_ip)).unwrap_err();
        assert!(e.details.starts_with("prevResult.ips: cannot write"), "{e}");
    }

    #[test]
    fn search_path_appends_bin_dir_once() {
        let registry = Registry::new();
        let mut d = Delegates {
            cni_path: vec!["/opt/cni/bin".into(), "/usr/lib/cni".into()],
            bin_dir: Some("/usr/lib/cni".into()),
            registry: &registry,
        };
        assert_eq!(
            d.search_path(),
            [
                std::path::PathBuf::from("/opt/cni/bin"),
                "/usr/lib/cni".into()
            ]
        );
        d.bin_dir = Some("/var/lib/plexus/bin".into());
        assert_eq!(
            d.search_path().last().unwrap(),
            std::path::Path::new("/var/lib/plexus/bin")
        );
    }
}
