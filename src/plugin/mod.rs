//! plexus as a CNI plugin: what a runtime reaches through `type: "plexus"`.
//!
//! ADD plans the pod's attachments (cluster network first, then its
//! selections) and runs them through the executor, built-in plugins
//! in-process and unknown types exec'd from `CNI_PATH`/`binDir`; the runtime
//! gets the cluster network's result, as from Multus. DEL, CHECK and GC work
//! from plexus's record of what ADD did, so they need neither the API server
//! nor the pod (cni-SPEC §2; multi-net-spec §7.2); a DEL without a record
//! (a pod attached before plexus was installed) DELs the cluster network
//! from the configuration, as Multus does. STATUS asks the cluster
//! network's plugins too.

pub mod shim;
pub mod wire;

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use plexus_dataplane::NetNs;

use crate::cluster::api::ClaimStatus;
use crate::cluster::events::{EventType, PodEvent};
use crate::cluster::kube::{KubeCluster, Publication, SharedApi};
use crate::cluster::{dir::DirCluster, Cluster, ClusterError, Opened, Publisher};
use crate::cni::args::CniArgs;
use crate::cni::call_log::CallLog;
use crate::cni::casefold;
use crate::cni::delegate::Resolver;
use crate::cni::error::{codes, CniError};
use crate::cni::names::{ContainerId, IfName, NetnsPath};
use crate::cni::result::CniResult;
use crate::cni::skel::{Plugin, Request, ValidAttachment};
use crate::config::{PlexusConf, DEFAULT_BIN_DIR, DEFAULT_CNI_DIR, DEFAULT_PLUGIN_TIMEOUT};
use crate::netattach::pod::Pod;
use crate::netattach::status::NetworkStatus;
use crate::phases;
use crate::plan::auxiliary;
use crate::plan::claims;
use crate::plan::readiness::{self, ReadinessKeys};
use crate::plan::{self, ConfDir, DefaultNetwork, PlanError, PlanInputs, PlanOptions};
use crate::policy::SelectionPolicy;
use crate::record::Cache;
use crate::run::claims::{self as claim_book, ClaimBook};
use crate::run::exec::{ExecSite, StderrSink};
use crate::run::routes::NetlinkRouteHook;
use crate::run::{
    AttachmentObserver, AttachmentResult, Delegates, Executor, Registry, RunContext, RunError,
};
use crate::sandbox_dir::SandboxDir;
use crate::whereabouts;

/// plexus's CNI operations. A plugin process makes one per call with
/// [`PlexusPlugin::thin`]; the node daemon makes one with its shared
/// cluster view and metrics.
pub struct PlexusPlugin<'s> {
    clusters: &'s dyn ClusterSource,
    observer: Option<Arc<dyn AttachmentObserver>>,
    /// The call's configuration, parsed already by the shim from the stdin
    /// the request comes from: no command parses it again.
    parsed: Option<PlexusConf>,
    /// A call the daemon serves: its plugins run where `chrootDir` says.
    thick: Option<ThickCall>,
}

/// What a call served by the daemon brings besides the request.
#[derive(Default)]
pub struct ThickCall {
    /// `CNI_NETNS` as the shim opened it on the node.
    pub pod_netns: Option<NetNs>,
    /// The daemon's connection and caches, when it has an API server.
    pub api: Option<SharedApi>,
    /// Its cluster-wide IPAM's connection and IPPool caches, likewise.
    pub ipam: Option<whereabouts::InDaemon>,
}

/// Where a call's view of the cluster comes from.
pub trait ClusterSource: Send + Sync {
    /// A fresh view for `conf` (views cache what they read, so a call that
    /// must look again opens another).
    fn open(&self, conf: &PlexusConf) -> Result<Opened, ClusterError>;
}

/// A plugin process's source: [`cluster`], a connection of its own.
pub struct PerCall;

impl ClusterSource for PerCall {
    fn open(&self, conf: &PlexusConf) -> Result<Opened, ClusterError> {
        cluster(conf)
    }
}

impl PlexusPlugin<'static> {
    /// plexus as the runtime's exec of it, all in this process; `parsed` is
    /// the configuration on its stdin, when the shim parsed it.
    pub fn thin(parsed: Option<PlexusConf>) -> PlexusPlugin<'static> {
        PlexusPlugin {
            clusters: &PerCall,
            observer: None,
            parsed,
            thick: None,
        }
    }
}

impl<'s> PlexusPlugin<'s> {
    /// plexus as the daemon serves a call (`thick`).
    pub fn new(
        clusters: &'s dyn ClusterSource,
        observer: Arc<dyn AttachmentObserver>,
        thick: ThickCall,
    ) -> PlexusPlugin<'s> {
        PlexusPlugin {
            clusters,
            observer: Some(observer),
            parsed: None,
            thick: Some(thick),
        }
    }

    /// The plugins of this call: [`registry`], and for a call the daemon
    /// serves, the shim's namespace in its session and exec'd plugins run
    /// where `chrootDir` says, given a path to that namespace.
    /// Exec'd plugins may run for `plugin_timeout`.
    fn registry(
        &self,
        conf: Option<&PlexusConf>,
        chroot_dir: Option<&Path>,
        plugin_timeout: Duration,
    ) -> Result<Registry, CniError> {
        let registry = registry().with_exec_timeout(plugin_timeout).with_builtin(
            whereabouts::PLUGIN_TYPE,
            whereabouts::factory(conf, self.thick.as_ref().and_then(|t| t.ipam.clone())),
        );
        let Some(thick) = &self.thick else {
            return Ok(registry);
        };
        let root = chroot_dir.map(Path::to_path_buf);
        let mut site = ExecSite {
            root: root.clone(),
            netns_alias: None,
            // Nobody reads the daemon's calls' stderr as the plugin's.
            stderr: StderrSink::Log,
        };
        if let Some(ns) = &thick.pod_netns {
            let sys = |e: plexus_dataplane::Error| CniError::io("CNI_NETNS", e);
            registry
                .session()
                .adopt(ns.try_clone().map_err(sys)?)
                .map_err(sys)?;
            let pid = pid_seen_from(root.as_deref().unwrap_or(Path::new("/")));
            let alias = PathBuf::from(format!("/proc/{pid}/fd/{}", ns.raw_fd()));
            site.netns_alias = Some((ns.path().to_path_buf(), alias));
        }
        Ok(registry.with_exec_site(site))
    }

    /// The request's configuration: the one the shim parsed from the same
    /// stdin, else parsed here.
    fn conf(&self, req: &Request) -> Result<Cow<'_, PlexusConf>, CniError> {
        match &self.parsed {
            Some(parsed) => Ok(Cow::Borrowed(parsed)),
            None => PlexusConf::from_value(&serde_json::Value::Object(req.config.clone()))
                .map(Cow::Owned)
                .map_err(CniError::from),
        }
    }

    /// The configured cluster network. The conf dir and files name it
    /// without the API server: when that does not answer (code 11), they are
    /// looked in alone, so DEL and GC work on with the API server gone.
    pub(crate) fn configured_cluster_network(
        conf: &PlexusConf,
        cluster: &dyn Cluster,
    ) -> Result<DefaultNetwork, PlanError> {
        let conf_dir = ConfDir::new(&conf.conf_dir);
        match cluster_network(conf, cluster, &conf_dir) {
            Err(e) if e.is_transient() => {
                cluster_network(conf, &DirCluster::empty(), &conf_dir).map_err(|_| e)
            }
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
        &self,
        conf: &PlexusConf,
        req: &Request,
        registry: &Registry,
        delegates: &Delegates,
    ) -> Result<plan::Plan, RunError> {
        let cluster = self.clusters.open(conf).map_err(PlanError::from)?.view;
        let network = Self::configured_cluster_network(conf, cluster.as_ref())?;
        let call = call(req).map_err(PlanError::from)?;
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
        let search_path = delegates.search_path();
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
        &self,
        conf: &PlexusConf,
        req: &Request,
        container_id: &ContainerId,
    ) -> Option<String> {
        let args = req.env.args();
        let arg = |key: &str| args.get(key).filter(|v| !v.is_empty());
        let (namespace, name) = (arg("K8S_POD_NAMESPACE")?, arg("K8S_POD_NAME")?);
        let podref = format!("{namespace}/{name}");
        let daemon = self.thick.as_ref().and_then(|t| t.api.as_ref());
        match whereabouts::unrecorded::release_unrecorded(conf, daemon, container_id, &podref) {
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

    fn executor(&self, cni_dir: &std::path::Path) -> Executor {
        let executor = Executor::new(Cache::new(cni_dir));
        match &self.observer {
            Some(observer) => executor.with_observer(observer.clone()),
            None => executor,
        }
    }
}

/// This process's pid in the procfs of `root` (in the pid namespace of the
/// node's `/proc`, which the daemon's own may not be); this process's own
/// when `root` has no procfs.
fn pid_seen_from(root: &Path) -> u32 {
    std::fs::read_link(root.join("proc/self"))
        .ok()
        .and_then(|pid| pid.to_str()?.parse().ok())
        .unwrap_or_else(std::process::id)
}

/// Every plugin type plexus serves in-process; anything else is exec'd.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    for builtin in plexus_ipam::BUILTINS {
        let build = builtin.build;
        registry = registry.with_builtin(builtin.plugin_type, move |_: &dyn Resolver, _: &_| {
            build() as Box<dyn Plugin>
        });
    }
    registry = registry.with_builtin(
        crate::whereabouts::PLUGIN_TYPE,
        |_: &dyn Resolver, _: &_| {
            Box::new(crate::whereabouts::Whereabouts::default()) as Box<dyn Plugin>
        },
    );
    for builtin in plexus_dataplane::drivers::BUILTINS {
        registry = registry.with_builtin(builtin.plugin_type, builtin.build);
    }
    registry.with_builtin(auxiliary::PASSTHRU, |_: &dyn Resolver, _: &_| {
        Box::new(crate::run::passthru::Passthru) as Box<dyn Plugin>
    })
}

/// The registry of the daemon's own runs (hot-plug), whose delegated
/// plugins run as its calls' do: chrooted into `chroot_dir`. The pod's
/// namespace is the sandbox's `CNI_NETNS` path, which the node's root has.
pub fn daemon_registry(chroot_dir: Option<&Path>) -> Registry {
    registry().with_exec_site(ExecSite {
        root: chroot_dir.map(Path::to_path_buf),
        netns_alias: None,
        stderr: StderrSink::Log,
    })
}

/// The cluster plexus reads pods and NADs from: a manifest directory, else
/// the API server of `kubeconfig`, else nothing (the cluster network only).
pub fn cluster(conf: &PlexusConf) -> Result<Opened, ClusterError> {
    Ok(match (&conf.manifest_dir, &conf.kubeconfig) {
        (Some(dir), _) => Opened::read_only(DirCluster::load(dir)?),
        (None, Some(kubeconfig)) => {
            Opened::api(KubeCluster::connect(kubeconfig, conf.api_timeouts)?)
        }
        (None, None) => Opened::read_only(DirCluster::empty()),
    })
}

/// The pod this call is for, from kubelet's `CNI_ARGS`; a runtime that sends
/// none (podman) gets a pod with no annotations: the default networks only.
/// A pod whose uid differs from kubelet's `K8S_POD_UID` is another pod (the
/// one of the call was deleted and re-created under its name). On an API
/// server the pod must exist; a manifest directory may leave it out.
fn pod(
    args: &CniArgs,
    container_id: &str,
    cluster: &dyn Cluster,
    on_api_server: bool,
) -> Result<Pod, ClusterError> {
    let (Some(namespace), Some(name)) = (args.k8s_pod_namespace(), args.k8s_pod_name()) else {
        return Ok(Pod {
            namespace: crate::manifest::DEFAULT_NAMESPACE.into(),
            name: container_id.into(),
            uid: None,
            annotations: Default::default(),
        });
    };
    let mut found = cluster.pod(namespace, name)?;
    if let (Some(want), Some(have)) = (args.k8s_pod_uid(), found.as_ref()) {
        if have.uid.as_deref().is_some_and(|have| have != want) {
            found = cluster.pod_fresh(namespace, name)?;
        }
    }
    let pod = match found {
        Some(pod) => pod,
        None if on_api_server => {
            return Err(ClusterError::PodMissing {
                namespace: namespace.into(),
                name: name.into(),
            })
        }
        None => Pod {
            namespace: namespace.into(),
            name: name.into(),
            uid: args.k8s_pod_uid().map(String::from),
            annotations: Default::default(),
        },
    };
    if let (Some(want), Some(have)) = (args.k8s_pod_uid(), pod.uid.as_deref()) {
        if want != have {
            return Err(ClusterError::PodRecreated {
                namespace: namespace.into(),
                name: name.into(),
                want: want.into(),
                have: have.into(),
            });
        }
    }
    Ok(pod)
}

/// After an ADD on a cluster: network-status on the pod (§5), the bound
/// claims' status (§8.2), and events, a Normal one per attachment, a Warning
/// per planner warning. Events are best effort; a pod or claim deleted
/// meanwhile is no failure.
fn publish(
    kube: &dyn Publisher,
    log: &CallLog,
    pod: &Pod,
    plan: &plan::Plan,
    results: &[AttachmentResult],
    claims: &[claims::Bound],
) -> Result<(), CniError> {
    let entries: Vec<_> = plan
        .attachments
        .iter()
        .zip(results)
        .map(|(att, r)| att.network_status(r.result.as_ref(), r.device_info.as_ref()))
        .collect();
    let mut events: Vec<PodEvent> = entries
        .iter()
        .zip(results)
        .map(|(e, r)| added_interface(e, r.result.as_ref()))
        .collect();
    events.extend(plan.warnings.iter().map(|w| PodEvent {
        event_type: EventType::Warning,
        reason: "InvalidNetworkSelection",
        message: w.clone(),
    }));
    events.extend(results.iter().flat_map(|r| &r.warnings).map(|w| PodEvent {
        event_type: EventType::Warning,
        reason: "InvalidDeviceInfo",
        message: w.clone(),
    }));
    let claims = claim_statuses(claims, results);
    let published = kube.publish(&Publication {
        pod,
        network_status: &entries,
        claims,
        events,
    })?;
    if !published.pod_found {
        log.warn("the pod was deleted before its network-status was written");
    }
    for claim in &published.gone_claims {
        log.warn(format_args!(
            "IPAMClaim {claim} was deleted before its status was written"
        ));
    }
    for failure in &published.event_failures {
        log.warn(format_args!("event not posted: {failure}"));
    }
    Ok(())
}

/// The status of each bound claim (§8.2): the addresses its attachment got.
pub(crate) fn claim_statuses(
    claims: &[claims::Bound],
    results: &[AttachmentResult],
) -> Vec<ClaimStatus> {
    claims
        .iter()
        .map(|c| ClaimStatus {
            namespace: c.namespace.clone(),
            name: c.name.clone(),
            ips: results[c.attachment]
                .result
                .iter()
                .flat_map(|r| &r.ips)
                .map(|ip| ip.address.to_string())
                .collect(),
        })
        .collect()
}

/// After attachments were DELed: release the addresses of their claims
/// that were deleted (a claim that exists keeps them, §8); what happened,
/// as warnings.
pub(crate) fn release_deleted_claims(
    cni_dir: &Path,
    cluster: &dyn Cluster,
    detached: &[plan::Attachment],
) -> Vec<String> {
    let owners = claims::owners_in(detached);
    if owners.is_empty() {
        return Vec::new();
    }
    sweep_warnings(claim_book::sweep(
        &ClaimBook::new(cni_dir),
        cluster,
        Some(&owners),
    ))
    .collect()
}

/// The Normal event of an attachment added, as Multus words it.
pub(crate) fn added_interface(entry: &NetworkStatus, result: Option<&CniResult>) -> PodEvent {
    PodEvent {
        event_type: EventType::Normal,
        reason: "AddedInterface",
        message: format!(
            "Add {} [{}] from {}",
            entry.interface.as_deref().unwrap_or("?"),
            with_prefixes(&entry.ips, result).join(","),
            entry.name
        ),
    }
}

/// The status entry's addresses with their prefixes from the result, as
/// Multus's `AddedInterface` event shows them (`[10.1.1.5/24]`).
fn with_prefixes(ips: &[String], result: Option<&CniResult>) -> Vec<String> {
    let configs = result.map(|r| r.ips.as_slice()).unwrap_or_default();
    ips.iter()
        .map(|ip| {
            configs
                .iter()
                .find(|c| c.address.ip().to_string() == *ip)
                .map_or_else(|| ip.clone(), |c| c.address.to_string())
        })
        .collect()
}

/// What a claim sweep says, as warnings: releases are worth a line too.
fn sweep_warnings(swept: claim_book::Swept) -> impl Iterator<Item = String> {
    let released = swept
        .released
        .into_iter()
        .map(|c| format!("IPAMClaim {c} was deleted: its addresses are released"));
    released.chain(swept.warnings)
}

/// What the runtime told plexus about this attachment.
struct Call<'a> {
    container_id: ContainerId,
    ifname: IfName,
    netns: Option<NetnsPath>,
    cni_path: &'a [PathBuf],
}

impl Call<'_> {
    /// The plan's options for this call of `req`, under `policy`.
    fn plan_options(&self, policy: SelectionPolicy, req: &Request) -> PlanOptions {
        PlanOptions::new(policy, self.ifname.clone())
            .with_container(self.container_id.clone())
            .with_cni_args(Some(req.env.args().clone()))
            .with_runtime_config(req.runtime_config.clone())
    }
}

fn call(req: &Request) -> Result<Call<'_>, CniError> {
    let params = req.env.require_attachment()?;
    Ok(Call {
        container_id: params.container_id.clone(),
        ifname: params.ifname.clone(),
        netns: params.netns.clone(),
        cni_path: &params.path,
    })
}

fn context<'a>(call: &Call, bin_dir: PathBuf, registry: &'a Registry) -> RunContext<'a> {
    RunContext {
        container_id: call.container_id.clone(),
        ifname: call.ifname.clone(),
        netns: call.netns.clone(),
        delegates: Delegates {
            cni_path: call.cni_path.to_vec(),
            bin_dir: Some(bin_dir),
            registry,
        },
    }
}

/// Where a command about the network rather than an attachment (GC,
/// STATUS) finds the plugins.
fn network_delegates<'r>(
    req: &Request,
    conf: &PlexusConf,
    registry: &'r Registry,
) -> Delegates<'r> {
    Delegates {
        cni_path: req.env.path().to_vec(),
        bin_dir: Some(conf.bin_dir.clone()),
        registry,
    }
}

/// `cniDir` and `binDir` even from a conf that no longer parses, so a DEL can
/// still find and finish what its ADD started.
fn dirs_of(req: &Request, conf: Option<&PlexusConf>) -> (PathBuf, PathBuf) {
    if let Some(conf) = conf {
        return (conf.cni_dir.clone(), conf.bin_dir.clone());
    }
    // Keys matched as the conf's parser matches them (Go's rule), so a
    // conf that says `CNIDir` finds on this DEL what its ADD wrote.
    let raw = |key: &str, default: &str| {
        PathBuf::from(
            casefold::get(&req.config, key)
                .and_then(|v| v.as_str())
                .unwrap_or(default),
        )
    };
    (
        raw("cniDir", DEFAULT_CNI_DIR),
        raw("binDir", DEFAULT_BIN_DIR),
    )
}

/// `chrootDir` even from a conf that no longer parses (see [`dirs_of`]).
fn chroot_of(req: &Request, conf: Option<&PlexusConf>) -> Option<PathBuf> {
    match conf {
        Some(conf) => conf.chroot_dir.clone(),
        None => casefold::get(&req.config, "chrootDir")
            .and_then(|v| v.as_str())
            .filter(|dir| dir.starts_with('/'))
            .map(PathBuf::from),
    }
}

fn cluster_network(
    conf: &PlexusConf,
    cluster: &dyn Cluster,
    conf_dir: &ConfDir,
) -> Result<DefaultNetwork, PlanError> {
    plan::cluster_network(
        &conf.cluster_network,
        cluster,
        Some(conf_dir),
        &conf.policy.plexus_namespace,
    )
}

impl Plugin for PlexusPlugin<'_> {
    fn validate(&self, req: &Request) -> Result<(), CniError> {
        self.conf(req).map(|_| ())
    }

    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let conf = self.conf(req)?;
        let opened = self.clusters.open(&conf)?;
        phases::mark("cluster source");
        let cluster = opened.view.as_ref();
        let mut conf_dir = ConfDir::new(&conf.conf_dir);
        let default_network =
            readiness::wait(ReadinessKeys::of(&conf), cluster, &mut conf_dir, || {
                self.clusters
                    .open(&conf)
                    .map(|o| o.view)
                    .map_err(CniError::from)
            })?;
        phases::mark("readiness");
        let call = call(req)?;
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
        let inputs = PlanInputs {
            nads: cluster,
            conf_dir: Some(&conf_dir),
            devices: Some(&conf.pod_resources),
            default_network: &default_network,
            options: &options,
        };
        let mut plan = plan::plan(&pod, &inputs)?;
        // The pod's networks; the auxiliary chain after them is none. It is
        // added before claims are bound, so a bad chain fails the ADD first.
        let networks = plan.attachments.len();
        if let Some(chain) = auxiliary::load(auxiliary::ChainKeys::of(&conf))? {
            plan::add_auxiliary_chain(&mut plan, &chain, &pod, &options)?;
        }
        let claims = claims::bind(&mut plan, &pod, cluster)?;
        ClaimBook::new(&conf.cni_dir).note_bound(&claims)?;
        phases::mark("plan");
        let log = req.call_log();
        for warning in conf.warnings.iter().chain(&plan.warnings) {
            log.warn(warning);
        }

        let registry =
            self.registry(Some(&conf), conf.chroot_dir.as_deref(), conf.plugin_timeout)?;
        let executor = self
            .executor(&conf.cni_dir)
            .with_route_hook(Box::new(NetlinkRouteHook {
                session: registry.session().clone(),
            }));
        let added = executor
            .add(&plan, &context(&call, conf.bin_dir.clone(), &registry))
            .map_err(CniError::from);
        phases::mark("data plane");
        if let Ok(results) = &added {
            for r in results {
                let attachment = log.on_attachment(&r.network, &r.ifname);
                for warning in &r.warnings {
                    attachment.warn(warning);
                }
            }
        }
        // network-status, events and claims are the networks' only.
        let added = added.map(|mut results| {
            results.truncate(networks);
            results
        });
        let results = match (added, publisher) {
            (Ok(results), Some(kube)) => {
                publish(kube, &log, &pod, &plan, &results, &claims)?;
                phases::mark("status write");
                results
            }
            (Ok(results), None) => results,
            (Err(e), Some(kube)) => {
                let failed = PodEvent {
                    event_type: EventType::Warning,
                    reason: "AttachmentFailed",
                    message: e.details.clone(),
                };
                let _ = kube.post_events(&pod, &[failed]);
                return Err(e);
            }
            (Err(e), None) => return Err(e),
        };
        if CallLog::progress_logged() {
            for attached in &results {
                let ips = attached.result.iter().flat_map(|r| &r.ips);
                let ips: Vec<String> = ips.map(|ip| ip.address.to_string()).collect();
                log.on_attachment(&attached.network, &attached.ifname)
                    .info(format_args!("added [{}]", ips.join(",")));
            }
        }
        // The runtime (and Kubernetes) know only the cluster network. The
        // executor gives every attachment it added a result; none for the
        // cluster network would be a bug, said as one rather than hidden in
        // an empty result.
        let mut result = results
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

    fn del(&self, req: &Request) -> Result<(), CniError> {
        let conf = self.conf(req).ok();
        let (cni_dir, bin_dir) = dirs_of(req, conf.as_deref());
        let call = call(req)?;
        let plugin_timeout = conf
            .as_deref()
            .map_or(DEFAULT_PLUGIN_TIMEOUT, |c| c.plugin_timeout);
        let registry = self.registry(
            conf.as_deref(),
            chroot_of(req, conf.as_deref()).as_deref(),
            plugin_timeout,
        )?;
        let ctx = context(&call, bin_dir, &registry);
        // Whether the fallback found the API server gone: then nothing of
        // the cluster is asked again (DEL works on without it).
        let api_gone = std::cell::Cell::new(false);
        let fallback = || match conf.as_deref() {
            Some(conf) => {
                let plan = self.cluster_network_plan(conf, req, &registry, &ctx.delegates);
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
        let mut report = self.executor(&cni_dir).del(&ctx, Some(&fallback))?;
        if report.unrecorded && !api_gone.get() {
            if let Some(conf) = conf.as_deref() {
                report
                    .warnings
                    .extend(self.release_unrecorded(conf, req, &call.container_id));
            }
        }
        // Release the addresses of the torn-down attachments' claims that
        // were deleted; a claim that cannot be checked now is checked later.
        if !claims::owners_in(&report.detached).is_empty() {
            match conf.as_ref().map(|c| self.clusters.open(c)) {
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

    fn check(&self, req: &Request) -> Result<(), CniError> {
        let conf = self.conf(req)?;
        let registry =
            self.registry(Some(&conf), conf.chroot_dir.as_deref(), conf.plugin_timeout)?;
        Ok(Executor::new(Cache::new(&conf.cni_dir)).check(&context(
            &call(req)?,
            conf.bin_dir.clone(),
            &registry,
        ))?)
    }

    fn gc(&self, req: &Request, valid: &[ValidAttachment]) -> Result<(), CniError> {
        let conf = self.conf(req)?;
        let cluster = self.clusters.open(&conf)?.view;
        let default_network = Self::configured_cluster_network(&conf, cluster.as_ref()).ok();
        let registry =
            self.registry(Some(&conf), conf.chroot_dir.as_deref(), conf.plugin_timeout)?;
        let delegates = network_delegates(req, &conf, &registry);
        let swept = claim_book::sweep(&ClaimBook::new(&conf.cni_dir), cluster.as_ref(), None);
        // Addresses held for claims are valid attachments of their own. A
        // pair whose names do not pass the rules protects nothing: no record
        // or allocation, whose names are checked, can carry it.
        let mut valid = valid.to_vec();
        valid.extend(
            swept
                .held
                .iter()
                .filter_map(|(c, i)| Some((ContainerId::new(c.as_str()).ok()?, i.clone()))),
        );
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

    fn status(&self, req: &Request) -> Result<(), CniError> {
        // Ready when the configuration is valid, an ADD would not wait, and
        // the cluster network's plugins say they are (cni-SPEC §2 STATUS).
        let conf = self.conf(req)?;
        let network = readiness::status(
            ReadinessKeys::of(&conf),
            self.clusters.open(&conf)?.view.as_ref(),
        )?;
        let registry =
            self.registry(Some(&conf), conf.chroot_dir.as_deref(), conf.plugin_timeout)?;
        let delegates = network_delegates(req, &conf, &registry);
        Ok(crate::run::status(&delegates, &network)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_plugins_are_served_in_process() {
        let registry = registry();
        for plugin_type in [
            "host-local",
            "static",
            "tuning",
            "bandwidth",
            "bridge",
            "macvlan",
            "ipvlan",
            "sriov",
        ] {
            assert!(registry.is_builtin(plugin_type), "{plugin_type}");
        }
        // Everything else is exec'd from CNI_PATH (cni-SPEC §4).
        assert!(!registry.is_builtin("portmap"));
    }

    #[test]
    fn a_pod_whose_uid_differs_from_kubelets_is_another_pod() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("pod.yaml"),
            "kind: Pod\nmetadata: {name: p, namespace: ns, uid: uid-2}\n",
        )
        .unwrap();
        let cluster = DirCluster::load(dir.path()).unwrap();
        let args = |uid: &str| {
            CniArgs::parse(&format!(
                "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID={uid}"
            ))
            .unwrap()
        };
        assert_eq!(pod(&args("uid-2"), "c", &cluster, false).unwrap().name, "p");
        let e = pod(&args("uid-1"), "c", &cluster, false).unwrap_err();
        assert!(
            matches!(&e, ClusterError::PodRecreated { want, have, .. }
                if want == "uid-1" && have == "uid-2"),
            "{e}"
        );
        // A manifest directory may leave the pod out: no annotations then.
        let missing = CniArgs::parse("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=q").unwrap();
        assert!(pod(&missing, "c", &cluster, false)
            .unwrap()
            .annotations
            .is_empty());
        // On an API server it must exist.
        let e = pod(&missing, "c", &cluster, true).unwrap_err();
        assert!(
            matches!(&e, ClusterError::PodMissing { name, .. } if name == "q"),
            "{e}"
        );
    }
}
