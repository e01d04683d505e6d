//! One pipeline for every change to a sandbox's networks: the runtime's ADD,
//! DEL, CHECK, GC and STATUS, whether a plugin process serves them (thin) or
//! the daemon (`serve_call`, thick), and the daemon's hot-plug.
//!
//! - ADD ([`add`]): readiness → pod → plan → [`attach`] (claims → executor)
//!   → [`publish::publish`] (network-status, claims' status, events).
//! - Hot-plug (`commands::daemon::hotplug`): the change planned from the
//!   record ([`crate::plan::hotplug`]) → [`detach`] → [`attach`] for each
//!   network added → [`publish::publish`].
//! - DEL ([`del`]): the executor from plexus's record (or the cluster
//!   network alone, without one) → claim release.
//!
//! The composition root ([`crate::plugin`], or hot-plug's reconciler) gives
//! the pipeline its [`Parts`]: where the cluster is read, which plugins run
//! where, the executor.

mod call;
pub mod publish;
pub mod readiness;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cluster::kube::SharedApi;
use crate::cluster::{dir::DirCluster, Cluster, ClusterError, Opened};
use crate::cni::call_log::CallLog;
use crate::cni::error::{codes, CniError};
use crate::cni::names::{ContainerId, IfName};
use crate::cni::result::CniResult;
use crate::cni::skel::{Request, ValidAttachment};
use crate::conf_files::{auxiliary, ConfDir};
use crate::config::{PlexusConf, DEFAULT_PLUGIN_TIMEOUT};
use crate::netattach::pod::Pod;
use crate::phases;
use crate::plan::{self, claims, DefaultNetwork, Plan, PlanError, PlanInputs, PlanOptions};
use crate::policy::SelectionPolicy;
use crate::record::Cache;
use crate::run::claims::{self as claim_book, ClaimBook};
use crate::run::routes::NetlinkRouteHook;
use crate::run::{AttachmentResult, Executor, Registry, RunContext, RunError};
use crate::sandbox_dir::SandboxDir;
use crate::whereabouts;

use call::{chroot_of, dirs_of, network_delegates};
pub use call::{pod, Call};
use publish::{claim_statuses, release_deleted_claims, sweep_warnings};
use readiness::ReadinessKeys;

/// What the composition root gives the pipeline.
pub trait Parts {
    /// A fresh view of the cluster for `conf` (views cache what they read,
    /// so a call that must look again opens another).
    fn open(&self, conf: &PlexusConf) -> Result<Opened, ClusterError>;
    /// The plugins of a call, made for `scope`.
    fn registry(&self, scope: &PluginScope<'_>) -> Result<Registry, CniError>;
    /// The executor keeping its records in `cni_dir`.
    fn executor(&self, cni_dir: &Path) -> Executor;
    /// The daemon's API connection and caches, on a call the daemon serves.
    fn daemon_api(&self) -> Option<&SharedApi>;
}

/// What a call's plugins are made for: its conf (`None`: one that no
/// longer parses, at DEL), the root exec'd plugins run under, and how long
/// each may take.
pub struct PluginScope<'c> {
    pub conf: Option<&'c PlexusConf>,
    pub chroot_dir: Option<PathBuf>,
    pub plugin_timeout: Duration,
}

impl<'c> PluginScope<'c> {
    /// `conf`'s own: its `chrootDir` and plugin timeout.
    pub fn of(conf: &'c PlexusConf) -> PluginScope<'c> {
        PluginScope {
            conf: Some(conf),
            chroot_dir: conf.chroot_dir.clone(),
            plugin_timeout: conf.plugin_timeout,
        }
    }
}

/// The registry of `conf`'s call.
fn registry_of(parts: &dyn Parts, conf: &PlexusConf) -> Result<Registry, CniError> {
    parts.registry(&PluginScope::of(conf))
}

/// The executor of an ADD or a hot-plug: its routes go through the
/// registry's netlink session.
pub fn attaching_executor(parts: &dyn Parts, cni_dir: &Path, registry: &Registry) -> Executor {
    parts
        .executor(cni_dir)
        .with_route_hook(Box::new(NetlinkRouteHook {
            session: registry.session().clone(),
        }))
}

/// Where [`attach`] puts the attachments of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A sandbox the runtime is ADDing: its record is begun.
    NewSandbox,
    /// A sandbox already running (hot-plug): its record grows.
    RunningSandbox,
}

/// What [`attach`] did.
pub struct Attached {
    /// Every attachment's result, in the plan's order.
    pub results: Vec<AttachmentResult>,
    /// The status of each bound IPAMClaim (§8.2): its attachment's addresses.
    pub claims: Vec<crate::cluster::api::ClaimStatus>,
}

/// The ADD stages after planning, for a sandbox being ADDed and a running
/// one alike: the plan's IPAMClaims bound (§8; a claim's warnings join the
/// plan's) and noted before any chain runs, then the attachments run.
pub fn attach(
    executor: &Executor,
    ctx: &RunContext,
    plan: &mut Plan,
    pod: &Pod,
    cluster: &dyn Cluster,
    target: Target,
) -> Result<Attached, RunError> {
    let claims = claims::bind(plan, pod, cluster)?;
    ClaimBook::new(executor.cache().dir()).note_bound(&claims)?;
    phases::mark("claims");
    let results = match target {
        Target::NewSandbox => executor.add(plan, ctx)?,
        Target::RunningSandbox => executor.attach(ctx, &plan.attachments)?,
    };
    phases::mark("data plane");
    Ok(Attached {
        claims: claim_statuses(&claims, &results),
        results,
    })
}

/// Hot-plug's removal of one attachment of a running sandbox; as at DEL,
/// the addresses of its IPAMClaim are released when the claim was deleted
/// (§8), said in the warnings.
pub fn detach(
    executor: &Executor,
    ctx: &RunContext,
    ifname: &IfName,
    cluster: &dyn Cluster,
) -> Result<(Option<plan::Attachment>, Vec<String>), RunError> {
    let detached: Vec<_> = executor.detach(ctx, ifname)?.into_iter().collect();
    let warnings = release_deleted_claims(executor.cache().dir(), cluster, &detached);
    Ok((detached.into_iter().next(), warnings))
}

/// ADD (cni-SPEC §2): the cluster network's result, as Multus answers.
pub fn add(parts: &dyn Parts, conf: &PlexusConf, req: &Request) -> Result<CniResult, CniError> {
    let opened = parts.open(conf)?;
    phases::mark("cluster source");
    let cluster = opened.view.as_ref();
    let mut conf_dir = ConfDir::new(&conf.conf_dir);
    let default_network = readiness::wait(ReadinessKeys::of(conf), cluster, &mut conf_dir, || {
        parts.open(conf).map(|o| o.view).map_err(CniError::from)
    })?;
    phases::mark("readiness");
    let call = Call::of(req)?;
    let publisher = opened.publisher.as_deref();
    let pod = pod(
        req.env.args(),
        &call.container_id,
        cluster,
        publisher.is_some(),
    )?;
    phases::mark("pod");
    let options = call.plan_options(conf.policy.clone(), req);
    cluster.prefetch_nads(&plan::selected_nads(&pod, &options));
    let inputs = node_inputs(conf, cluster, &conf_dir, &default_network, &options);
    let mut plan = plan::plan(&pod, &inputs)?;
    // The pod's networks; the auxiliary chain after them is none. It is
    // added before claims are bound, so a bad chain fails the ADD first.
    let networks = plan.attachments.len();
    if let Some(chain) = auxiliary::load(auxiliary::ChainKeys::of(conf))? {
        plan::auxiliary::add_chain(&mut plan, &chain, &pod, &options)?;
    }
    phases::mark("plan");

    let registry = registry_of(parts, conf)?;
    let executor = attaching_executor(parts, &conf.cni_dir, &registry);
    let ctx = call.context(conf.bin_dir.clone(), &registry);
    let attached = attach(
        &executor,
        &ctx,
        &mut plan,
        &pod,
        cluster,
        Target::NewSandbox,
    )
    .map_err(CniError::from);
    let log = req.call_log();
    for warning in conf.warnings.iter().chain(&plan.warnings) {
        log.warn(warning);
    }
    let mut attached = match (attached, publisher) {
        (Ok(attached), _) => attached,
        (Err(e), Some(kube)) => {
            publish::failed(kube, &pod, &e);
            return Err(e);
        }
        (Err(e), None) => return Err(e),
    };
    for r in &attached.results {
        let attachment = log.on_attachment(&r.network, &r.ifname);
        for warning in &r.warnings {
            attachment.warn(warning);
        }
    }
    // network-status, events and claims are the networks' only.
    attached.results.truncate(networks);
    if let Some(kube) = publisher {
        let status = publish::network_status(&plan, &attached.results);
        let mut events = publish::added_events(&status, &attached.results);
        events.extend(publish::selection_warnings(&plan.warnings));
        events.extend(publish::device_info_warnings(&attached.results));
        let devices = publish::claimed_device_statuses(&plan.claimed, &attached.results);
        for warning in publish::publish(kube, &pod, &status, attached.claims, devices, events)? {
            log.warn(warning);
        }
        phases::mark("status write");
    }
    if CallLog::progress_logged() {
        for a in &attached.results {
            let ips = a.result.iter().flat_map(|r| &r.ips);
            let ips: Vec<String> = ips.map(|ip| ip.address.to_string()).collect();
            log.on_attachment(&a.network, &a.ifname)
                .info(format_args!("added [{}]", ips.join(",")));
        }
    }
    // The runtime (and Kubernetes) know only the cluster network. The
    // executor gives every attachment it added a result; none for the
    // cluster network would be a bug, said as one rather than hidden in
    // an empty result.
    let mut result = attached
        .results
        .into_iter()
        .find(|a| a.default)
        .and_then(|a| a.result)
        .ok_or_else(|| {
            CniError::plugin(
                codes::PLUGIN_FAILED,
                "no result",
                "the cluster network was added but gave no result",
            )
        })?;
    result.cni_version = Some(req.cni_version);
    Ok(result)
}

/// DEL (cni-SPEC §2): from plexus's record, without the API server or the
/// pod (multi-net-spec §7.2); `conf` is `None` when the configuration no
/// longer parses, and what the record names is deleted still.
pub fn del(parts: &dyn Parts, conf: Option<&PlexusConf>, req: &Request) -> Result<(), CniError> {
    let (cni_dir, bin_dir) = dirs_of(req, conf);
    let call = Call::of(req)?;
    let registry = parts.registry(&PluginScope {
        conf,
        chroot_dir: chroot_of(req, conf),
        plugin_timeout: conf.map_or(DEFAULT_PLUGIN_TIMEOUT, |c| c.plugin_timeout),
    })?;
    let ctx = call.context(bin_dir, &registry);
    // Whether the fallback found the API server gone: then nothing of
    // the cluster is asked again (DEL works on without it).
    let api_gone = std::cell::Cell::new(false);
    let fallback = || match conf {
        Some(conf) => {
            let plan = cluster_network_plan(parts, conf, req, &registry, &ctx);
            if matches!(&plan, Err(RunError::Plan(e)) if e.is_transient()) {
                api_gone.set(true);
            }
            plan
        }
        None => Err(RunError::from(PlanError::Config {
            field: "plexus configuration".into(),
            reason: "does not parse, so the cluster network is unknown".into(),
        })),
    };
    let mut report = parts.executor(&cni_dir).del(&ctx, Some(&fallback))?;
    if report.unrecorded && !api_gone.get() {
        if let Some(conf) = conf {
            report
                .warnings
                .extend(release_unrecorded(parts, conf, req, &call.container_id));
        }
    }
    // Release the addresses of the torn-down attachments' claims that
    // were deleted; a claim that cannot be checked now is checked later.
    if !claims::owners_in(&report.detached).is_empty() {
        match conf.map(|c| parts.open(c)) {
            Some(Ok(opened)) => report.warnings.extend(release_deleted_claims(
                &cni_dir,
                opened.view.as_ref(),
                &report.detached,
            )),
            Some(Err(e)) => report
                .warnings
                .push(format!("IPAMClaims not checked: {}", e)),
            None => report
                .warnings
                .push("IPAMClaims not checked: the configuration does not parse".into()),
        }
    }
    let log = req.call_log();
    if CallLog::progress_logged() {
        for detached in &report.detached {
            log.on_attachment(&detached.network, &detached.ifname)
                .info("deleted");
        }
    }
    for warning in &report.warnings {
        log.warn(warning);
    }
    Ok(())
}

/// CHECK (cni-SPEC §2): every recorded attachment checked by its chain.
pub fn check(parts: &dyn Parts, conf: &PlexusConf, req: &Request) -> Result<(), CniError> {
    let registry = registry_of(parts, conf)?;
    Ok(Executor::new(Cache::new(&conf.cni_dir))
        .check(&Call::of(req)?.context(conf.bin_dir.clone(), &registry))?)
}

/// GC (cni-SPEC §2): what no valid attachment holds is released; addresses
/// held for IPAMClaims count as valid attachments of their own.
pub fn gc(
    parts: &dyn Parts,
    conf: &PlexusConf,
    req: &Request,
    valid: &[ValidAttachment],
) -> Result<(), CniError> {
    let cluster = parts.open(conf)?.view;
    let default_network = configured_cluster_network(conf, cluster.as_ref()).ok();
    let registry = registry_of(parts, conf)?;
    let delegates = network_delegates(req, conf, &registry);
    let swept = claim_book::sweep(&ClaimBook::new(&conf.cni_dir), cluster.as_ref(), None);
    // A pair whose names do not pass the rules protects nothing: no record
    // or allocation, whose names are checked, can carry it.
    let mut valid = valid.to_vec();
    valid.extend(swept.held.iter().filter_map(|(c, i)| {
        Some((
            ContainerId::new(c.as_str()).ok()?,
            IfName::new(i.as_str()).ok()?,
        ))
    }));
    let claim_warnings: Vec<String> = sweep_warnings(swept).collect();
    let report = Executor::new(Cache::new(&conf.cni_dir)).gc(
        &valid,
        &delegates,
        default_network.as_ref(),
    )?;
    // The notes of sandboxes whose DEL never came: none to hot-plug.
    SandboxDir::in_cni_dir(&conf.cni_dir)
        .forget_all_but(|id| valid.iter().any(|(container, _)| container == id));
    let log = req.call_log();
    for warning in claim_warnings.iter().chain(&report.warnings) {
        log.warn(warning);
    }
    Ok(())
}

/// STATUS (cni-SPEC §2, CNI 1.1): ready when the configuration is valid, an
/// ADD would not wait, and the cluster network's plugins say they are.
pub fn status(parts: &dyn Parts, conf: &PlexusConf, req: &Request) -> Result<(), CniError> {
    let network = readiness::status(ReadinessKeys::of(conf), parts.open(conf)?.view.as_ref())?;
    let registry = registry_of(parts, conf)?;
    let delegates = network_delegates(req, conf, &registry);
    Ok(crate::run::status(&delegates, &network)?)
}

/// What the planner takes on the node: the cluster's NADs and claims, the
/// conf dir, and kubelet's devices.
pub fn node_inputs<'a>(
    conf: &'a PlexusConf,
    cluster: &'a dyn Cluster,
    conf_dir: &'a ConfDir,
    default_network: &'a DefaultNetwork,
    options: &'a PlanOptions,
) -> PlanInputs<'a> {
    PlanInputs {
        nads: cluster,
        conf_files: Some(conf_dir),
        devices: Some(&conf.pod_resources),
        claims: cluster.dra(),
        default_network,
        options,
    }
}

/// The configured cluster network. The conf dir and files name it without
/// the API server: when that does not answer (code 11), they are looked in
/// alone, so DEL, GC and hot-plug work on with the API server gone.
pub fn configured_cluster_network(
    conf: &PlexusConf,
    cluster: &dyn Cluster,
) -> Result<DefaultNetwork, PlanError> {
    let conf_dir = ConfDir::new(&conf.conf_dir);
    let resolve = |cluster: &dyn Cluster| {
        plan::cluster_network(
            &conf.cluster_network,
            cluster,
            Some(&conf_dir),
            &conf.policy.plexus_namespace,
        )
    };
    match resolve(cluster) {
        Err(e) if e.is_transient() => resolve(&DirCluster::empty()).map_err(|_| e),
        other => other,
    }
}

/// DEL's plan without a record (see [`Executor::del`]): the cluster
/// network alone, attached as the runtime's `CNI_IFNAME` with its
/// `CNI_ARGS` and capability arguments, as ADD would plan it for a pod
/// with no selections. None when a plugin of it is not installed: that
/// one cannot have attached the pod, nor delete anything, and a DEL
/// failing for it would fail forever.
fn cluster_network_plan(
    parts: &dyn Parts,
    conf: &PlexusConf,
    req: &Request,
    registry: &Registry,
    ctx: &RunContext,
) -> Result<Plan, RunError> {
    let cluster = parts.open(conf).map_err(PlanError::from)?.view;
    let network = configured_cluster_network(conf, cluster.as_ref())?;
    let call = Call::of(req).map_err(PlanError::from)?;
    let pod = Pod {
        namespace: crate::manifest::DEFAULT_NAMESPACE.into(),
        name: call.container_id.to_string(),
        uid: None,
        annotations: Default::default(),
    };
    // What the runtime attached before plexus: the cluster network.
    let policy = SelectionPolicy {
        delegates: Vec::new(),
        default_networks: Vec::new(),
        ..conf.policy.clone()
    };
    let options = call.plan_options(policy, req);
    let no_nads = DirCluster::empty();
    let plan = plan::plan(&pod, &PlanInputs::off_node(&no_nads, &network, &options))?;
    let search_path = ctx.delegates.search_path();
    for config in plan.attachments.iter().flat_map(|a| &a.plugins) {
        match config.get("type").and_then(serde_json::Value::as_str) {
            Some(t) if !registry.is_builtin(t) => {
                registry.exec_site().find(t, &search_path).map_err(|e| {
                    RunError::ClusterNetwork {
                        network: network.network.clone(),
                        source: Box::new(e.into()),
                    }
                })?;
            }
            _ => {}
        }
    }
    Ok(plan)
}

/// DEL of a sandbox without a record (a pod from before plexus): the
/// whereabouts addresses it holds given back at once
/// ([`whereabouts::unrecorded`]); a warning when they cannot be (the
/// reconciler gives them back once the pod is gone).
fn release_unrecorded(
    parts: &dyn Parts,
    conf: &PlexusConf,
    req: &Request,
    container_id: &ContainerId,
) -> Option<String> {
    let args = req.env.args();
    let arg = |key: &str| args.get(key).filter(|v| !v.is_empty());
    let (namespace, name) = (arg("K8S_POD_NAMESPACE")?, arg("K8S_POD_NAME")?);
    let podref = format!("{namespace}/{name}");
    match whereabouts::unrecorded::release_unrecorded(
        conf,
        parts.daemon_api(),
        container_id,
        &podref,
    ) {
        Ok(released) if released.entries.is_empty() => None,
        Ok(released) => {
            tracing::info!(
                entries = ?released.entries,
                reservations = ?released.reservations,
                "whereabouts addresses of a sandbox plexus never added given back"
            );
            None
        }
        Err(e) => Some(format!(
            "whereabouts addresses of a sandbox without a record not given back: {}",
            CniError::from(e).details
        )),
    }
}
