//! Which implementation serves a plugin `type`: a built-in one (the data
//! plane's drivers, IPAM) registered by type, or else the external binary of
//! that name (cni-SPEC §4: plugin types plexus does not know are delegated to
//! the real CNI binary). One [`Resolver`] for the executor and for plugins
//! that delegate IPAM, so a chain mixes both freely.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::cni::delegate::Resolver;
use crate::cni::error::CniError;
use crate::cni::names::PluginType;
use crate::cni::result::CniResult;
use crate::cni::skel::{Plugin, Request, TypedPlugin, ValidAttachment};

use plexus_dataplane::Session;

use super::error::RunError;
use super::exec::{parse_type, ExecPlugin, ExecSite};
use crate::config::DEFAULT_PLUGIN_TIMEOUT;

/// Builds a built-in plugin. It gets the resolver so that it can delegate in
/// turn (a bridge driver runs its `ipam.type` through it), and the
/// invocation's data-plane session.
pub type Factory =
    Box<dyn for<'r> Fn(&'r dyn Resolver, &'r Session) -> Box<dyn Plugin + 'r> + Send + Sync>;

/// Built-in plugins by type, falling back to external binaries. A registry
/// serves one invocation: its [`Session`] opens the namespaces and netlink
/// sockets once for all the built-in plugins it builds.
pub struct Registry {
    builtins: BTreeMap<String, Factory>,
    refused: BTreeMap<String, String>,
    exec_timeout: Duration,
    exec_site: Arc<ExecSite>,
    session: Arc<Session>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl Registry {
    /// No built-ins; every type is exec'd, except `plexus` itself, which as
    /// a delegate of plexus would recurse.
    pub fn new() -> Registry {
        let mut refused = BTreeMap::new();
        refused.insert(
            "plexus".to_string(),
            "plexus cannot delegate to itself (the chain would run plexus again, forever)"
                .to_string(),
        );
        Registry {
            builtins: BTreeMap::new(),
            refused,
            exec_timeout: DEFAULT_PLUGIN_TIMEOUT,
            exec_site: Arc::default(),
            session: Arc::new(Session::new()),
        }
    }

    /// The data-plane handles of this invocation, which the executor's
    /// route hook shares.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// Serve `plugin_type` in-process with what `factory` builds. A later
    /// registration of the same type replaces the earlier one.
    pub fn with_builtin<F>(mut self, plugin_type: &str, factory: F) -> Registry
    where
        F: for<'r> Fn(&'r dyn Resolver, &'r Session) -> Box<dyn Plugin + 'r>
            + Send
            + Sync
            + 'static,
    {
        self.refused.remove(plugin_type);
        self.builtins
            .insert(plugin_type.to_string(), Box::new(factory));
        self
    }

    /// Refuse `plugin_type` with `reason` (code 7), built-in or not.
    pub fn with_refused(mut self, plugin_type: &str, reason: &str) -> Registry {
        self.builtins.remove(plugin_type);
        self.refused
            .insert(plugin_type.to_string(), reason.to_string());
        self
    }

    /// The timeout of every exec'd plugin run.
    pub fn with_exec_timeout(mut self, timeout: Duration) -> Registry {
        self.exec_timeout = timeout;
        self
    }

    /// Where every exec'd plugin runs (thick mode's `chrootDir`).
    pub fn with_exec_site(mut self, site: ExecSite) -> Registry {
        self.exec_site = Arc::new(site);
        self
    }

    pub fn exec_site(&self) -> &ExecSite {
        &self.exec_site
    }

    pub fn is_builtin(&self, plugin_type: &str) -> bool {
        self.builtins.contains_key(plugin_type)
    }

    pub fn exec_timeout(&self) -> Duration {
        self.exec_timeout
    }

    /// The plugin serving `plugin_type` (a configuration's `type`): built
    /// in, refused, or exec'd.
    pub(crate) fn serve(&self, plugin_type: &str) -> Result<Served<'_>, RunError> {
        self.serve_type(&parse_type(plugin_type)?)
    }

    fn serve_type(&self, plugin_type: &PluginType) -> Result<Served<'_>, RunError> {
        if let Some(reason) = self.refused.get(plugin_type.as_str()) {
            return Err(RunError::Refused {
                plugin_type: plugin_type.to_string(),
                reason: reason.clone(),
            });
        }
        match self.builtins.get(plugin_type.as_str()) {
            Some(factory) => Ok(Served::Builtin(factory(self, &self.session))),
            None => Ok(Served::Exec(
                ExecPlugin::of(plugin_type.clone(), self.exec_timeout).at(self.exec_site.clone()),
            )),
        }
    }
}

impl Resolver for Registry {
    fn resolve(
        &self,
        plugin_type: &PluginType,
        _req: &Request,
    ) -> Result<Box<dyn Plugin + '_>, CniError> {
        Ok(match self.serve_type(plugin_type)? {
            Served::Builtin(plugin) => plugin,
            Served::Exec(plugin) => Box::new(plugin),
        })
    }
}

/// A plugin as the executor runs it. An exec'd plugin's failures stay
/// [`ExecError`]s, which name the plugin (so the executor's context does
/// not name it twice); a built-in plugin's are the CNI errors it replies.
pub(crate) enum Served<'r> {
    Builtin(Box<dyn Plugin + 'r>),
    Exec(ExecPlugin),
}

/// `$served.$op($args)`, a built-in plugin's failure its CNI error, an
/// exec'd one's its [`ExecError`].
macro_rules! on_served {
    ($served:expr, $op:ident($($arg:expr),*)) => {
        match $served {
            Served::Builtin(plugin) => plugin.$op($($arg),*).map_err(RunError::from),
            Served::Exec(plugin) => TypedPlugin::$op(plugin, $($arg),*).map_err(RunError::from),
        }
    };
}

impl Served<'_> {
    pub(crate) fn validate(&self, req: &Request) -> Result<(), RunError> {
        on_served!(self, validate(req))
    }

    pub(crate) fn add(&self, req: &Request) -> Result<CniResult, RunError> {
        on_served!(self, add(req))
    }

    pub(crate) fn del(&self, req: &Request) -> Result<(), RunError> {
        on_served!(self, del(req))
    }

    pub(crate) fn check(&self, req: &Request) -> Result<(), RunError> {
        on_served!(self, check(req))
    }

    pub(crate) fn gc(&self, req: &Request, valid: &[ValidAttachment]) -> Result<(), RunError> {
        on_served!(self, gc(req, valid))
    }

    pub(crate) fn status(&self, req: &Request) -> Result<(), RunError> {
        on_served!(self, status(req))
    }
}

/// Where plugins come from: the runtime's `CNI_PATH`, plexus's `binDir`
/// (searched after it, and passed on in `CNI_PATH` so delegates of
/// delegates find their IPAM too), and the registry deciding between
/// built-in and exec'd plugins.
#[derive(Clone)]
pub struct Delegates<'a> {
    pub cni_path: Vec<PathBuf>,
    pub bin_dir: Option<PathBuf>,
    pub registry: &'a Registry,
}

impl Delegates<'_> {
    /// The invocation's data-plane session (the registry's): the check of
    /// `CNI_NETNS` opens the pod's namespace in it, once for the built-in
    /// plugins too.
    pub(super) fn session(&self) -> &Session {
        self.registry.session()
    }

    /// `CNI_PATH` of every plugin plexus runs.
    pub fn search_path(&self) -> Vec<PathBuf> {
        let mut dirs = self.cni_path.clone();
        if let Some(bin) = &self.bin_dir {
            if !dirs.contains(bin) {
                dirs.push(bin.clone());
            }
        }
        dirs
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use serde_json::json;

    use super::*;
    use crate::cni::env::{AttachmentParams, CniCommand, CniEnv};
    use crate::cni::result::CniResult;
    use crate::run::exec::ExecError;

    /// A built-in plugin that says who it is in its result's DNS domain and
    /// delegates its `ipam` through the resolver it was built with.
    struct Named<'r> {
        name: &'static str,
        resolver: &'r dyn Resolver,
        calls: Cell<u32>,
    }

    impl Plugin for Named<'_> {
        fn add(&self, req: &Request) -> Result<CniResult, CniError> {
            self.calls.set(self.calls.get() + 1);
            let mut r = crate::cni::delegate::run_ipam(self.resolver, req, CniCommand::Add)?
                .unwrap_or_default();
            r.dns.domain = Some(format!(
                "{}+{}",
                self.name,
                r.dns.domain.unwrap_or_default()
            ));
            Ok(r)
        }
        fn del(&self, _: &Request) -> Result<(), CniError> {
            Ok(())
        }
    }

    struct Ipam;
    impl Plugin for Ipam {
        fn add(&self, _: &Request) -> Result<CniResult, CniError> {
            let mut r = CniResult::default();
            r.dns.domain = Some("ipam".into());
            Ok(r)
        }
        fn del(&self, _: &Request) -> Result<(), CniError> {
            Ok(())
        }
    }

    fn req(config: serde_json::Value, path: Vec<std::path::PathBuf>) -> Request {
        let env = CniEnv::Add(AttachmentParams {
            netns: Some(crate::cni::names::NetnsPath::new("/run/netns/x").unwrap()),
            path,
            ..AttachmentParams::new("c", "eth0").unwrap()
        });
        Request::from_config(env, config.as_object().unwrap().clone()).unwrap()
    }

    fn registry() -> Registry {
        Registry::new()
            .with_builtin("drv", |r, _| {
                Box::new(Named {
                    name: "drv",
                    resolver: r,
                    calls: Cell::new(0),
                })
            })
            .with_builtin("fake-ipam", |_, _| Box::new(Ipam))
    }

    #[test]
    fn builtins_delegate_through_the_same_resolver() {
        // cni-SPEC §4: the driver's IPAM is itself resolved.
        let reg = registry();
        assert!(reg.is_builtin("drv") && !reg.is_builtin("bridge"));
        let r = req(
            json!({"cniVersion": "1.0.0", "name": "n", "type": "drv", "ipam": {"type": "fake-ipam"}}),
            vec![],
        );
        let plugin = reg.resolve(&PluginType::new("drv").unwrap(), &r).unwrap();
        let result = plugin.add(&r).unwrap();
        assert_eq!(result.dns.domain.as_deref(), Some("drv+ipam"));
    }

    #[test]
    fn unknown_types_are_exec_plugins_found_on_cni_path() {
        // cni-SPEC §4: a type plexus does not know is the real binary; its
        // validate looks for it on CNI_PATH.
        let reg = registry();
        let r = req(
            json!({"cniVersion": "1.0.0", "name": "n", "type": "no-such-plugin"}),
            vec!["/nonexistent-dir".into()],
        );
        let plugin = reg
            .resolve(&PluginType::new("no-such-plugin").unwrap(), &r)
            .unwrap();
        let e = plugin.validate(&r).unwrap_err();
        assert_eq!(
            e.details,
            "no-such-plugin: no executable named \"no-such-plugin\" in /nonexistent-dir"
        );
        // ... and `drv`'s IPAM of an unknown type fails the same way.
        let r = req(
            json!({"cniVersion": "1.0.0", "name": "n", "type": "drv", "ipam": {"type": "no-ipam"}}),
            vec!["/nonexistent-dir".into()],
        );
        let e = reg
            .resolve(&PluginType::new("drv").unwrap(), &r)
            .unwrap()
            .add(&r)
            .unwrap_err();
        assert!(
            e.details
                .starts_with("ipam (no-ipam).no-ipam: no executable"),
            "{e}"
        );
    }

    #[test]
    fn refused_and_invalid_types() {
        let r = req(
            json!({"cniVersion": "1.0.0", "name": "n", "type": "x"}),
            vec![],
        );
        let reg = Registry::new();
        let e = reg.serve("plexus").err().unwrap();
        assert!(
            matches!(&e, RunError::Refused { plugin_type, reason }
                if plugin_type == "plexus" && reason.starts_with("plexus cannot delegate")),
            "{e:?}"
        );
        let e = reg.serve("../bridge").err().unwrap();
        assert!(
            matches!(e, RunError::Exec(ExecError::PluginType(_))),
            "{e:?}"
        );
        let reg = reg.with_refused("dhcp", "not on this node");
        assert!(matches!(
            reg.serve("dhcp").err(),
            Some(RunError::Refused { .. })
        ));
        // Registering a refused type as a built-in lifts the refusal.
        let reg = reg.with_builtin("plexus", |_, _| Box::new(Ipam));
        assert!(reg.resolve(&PluginType::new("plexus").unwrap(), &r).is_ok());
    }
}
