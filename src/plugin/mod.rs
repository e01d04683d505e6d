//! plexus as a CNI plugin: what a runtime reaches through `type: "plexus"`.
//! This is the composition root: it gives [`crate::pipeline`], which runs
//! ADD, DEL, CHECK, GC and STATUS, its [`Parts`]: the cluster (a connection
//! per call in a plugin process, the daemon's shared one in thick mode), the
//! plugins (built in, or exec'd from `CNI_PATH`/`binDir`, where `chrootDir`
//! says for the daemon's calls) and the executor.

pub mod shim;
pub mod wire;

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use plexus_dataplane::NetNs;

use crate::cluster::kube::{KubeCluster, SharedApi};
use crate::cluster::{dir::DirCluster, ClusterError, Opened};
use crate::cni::delegate::Resolver;
use crate::cni::error::CniError;
use crate::cni::result::CniResult;
use crate::cni::skel::{Plugin, Request, ValidAttachment};
use crate::config::PlexusConf;
use crate::pipeline::{self, Parts, PluginScope};
use crate::plan::auxiliary;
use crate::record::Cache;
use crate::run::exec::{ExecSite, StderrSink};
use crate::run::{AttachmentObserver, Executor, Registry};
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
}

impl Parts for PlexusPlugin<'_> {
    fn open(&self, conf: &PlexusConf) -> Result<Opened, ClusterError> {
        self.clusters.open(conf)
    }

    /// [`registry`], and for a call the daemon serves, the shim's namespace
    /// in its session and exec'd plugins run where `chrootDir` says, given a
    /// path to that namespace.
    fn registry(&self, scope: &PluginScope<'_>) -> Result<Registry, CniError> {
        let registry = registry()
            .with_exec_timeout(scope.plugin_timeout)
            .with_builtin(
                whereabouts::PLUGIN_TYPE,
                whereabouts::factory(scope.conf, self.thick.as_ref().and_then(|t| t.ipam.clone())),
            );
        let Some(thick) = &self.thick else {
            return Ok(registry);
        };
        let root = scope.chroot_dir.clone();
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

    fn executor(&self, cni_dir: &Path) -> Executor {
        let executor = Executor::new(Cache::new(cni_dir));
        match &self.observer {
            Some(observer) => executor.with_observer(observer.clone()),
            None => executor,
        }
    }

    fn daemon_api(&self) -> Option<&SharedApi> {
        self.thick.as_ref().and_then(|t| t.api.as_ref())
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

impl Plugin for PlexusPlugin<'_> {
    fn validate(&self, req: &Request) -> Result<(), CniError> {
        self.conf(req).map(|_| ())
    }

    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        pipeline::add(self, &*self.conf(req)?, req)
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        // A conf that no longer parses still DELs what the record names.
        let conf = self.conf(req).ok();
        pipeline::del(self, conf.as_deref(), req)
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        pipeline::check(self, &*self.conf(req)?, req)
    }

    fn gc(&self, req: &Request, valid: &[ValidAttachment]) -> Result<(), CniError> {
        pipeline::gc(self, &*self.conf(req)?, req, valid)
    }

    fn status(&self, req: &Request) -> Result<(), CniError> {
        pipeline::status(self, &*self.conf(req)?, req)
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
}
