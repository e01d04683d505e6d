//! Commands about the cluster network rather than an attachment: STATUS
//! here, GC's per-plugin calls from [`super::Executor::gc`].

use serde_json::{Map, Value};

use super::error::RunError;
use super::registry::{Delegates, Served};
use crate::cni::config::derive_request;
use crate::cni::env::{CniCommand, CniEnv};
use crate::cni::skel::Request;
use crate::cni::CniVersion;
use crate::plan::DefaultNetwork;

/// cni-SPEC §2 STATUS of the cluster network, as libcni's
/// `GetStatusNetworkList` (which Multus's `CmdStatus` calls): every plugin
/// of its chain in order, built in or exec'd, the first error being the
/// answer (cni-SPEC §2: "If the delegated plugin return an error result, the
/// executing plugin should return an error result"), with its code (50, 51,
/// ...) and naming the plugin. A chain older than 1.1.0 has no STATUS and is
/// not asked, as libcni does not ask it; built-in plugins included, as a
/// STATUS request below 1.1.0 is no valid request (cni-SPEC §2).
pub fn status(delegates: &Delegates, cluster: &DefaultNetwork) -> Result<(), RunError> {
    let list = &cluster.config;
    let name = list.name.as_deref().unwrap_or(&cluster.network);
    let version = list
        .select_version()
        .map_err(|e| RunError::ClusterNetwork {
            network: name.to_string(),
            source: Box::new(e.into()),
        })?;
    if version < CniVersion::V1_1_0 {
        return Ok(());
    }
    let call = ClusterPluginCall {
        delegates,
        network: name,
        version,
        command: CniCommand::Status,
    };
    for (i, plugin) in list.plugins.iter().enumerate() {
        call.run(i, plugin, Map::new(), |p, req| p.status(req))?;
    }
    Ok(())
}

/// A command about the cluster network rather than an attachment (GC,
/// STATUS), sent to its plugins one by one.
pub(super) struct ClusterPluginCall<'c, 'd> {
    pub delegates: &'c Delegates<'d>,
    pub network: &'c str,
    pub version: CniVersion,
    pub command: CniCommand,
}

impl ClusterPluginCall<'_, '_> {
    /// `call` on plugin `i`, its request the plugin's configuration plus
    /// `extra`; an error names the network, position and type.
    pub fn run(
        &self,
        i: usize,
        plugin: &crate::cni::config::PluginConfig,
        extra: Map<String, Value>,
        call: impl FnOnce(&Served, &Request) -> Result<(), RunError>,
    ) -> Result<(), RunError> {
        let mut config = derive_request(plugin, self.network, self.version, &Map::new(), None);
        config.extend(extra);
        let called = (|| -> Result<(), RunError> {
            let env = CniEnv::config_only(self.command, self.delegates.search_path())?;
            let req = Request::from_config(env, config)?;
            call(&self.delegates.registry.serve(&plugin.plugin_type)?, &req)
        })();
        called.map_err(|e| RunError::ClusterPlugin {
            network: self.network.to_string(),
            index: i,
            plugin_type: plugin.plugin_type.to_string(),
            source: Box::new(e),
        })
    }
}
