//! Plugin delegation (cni-SPEC §4): a plugin hands part of its job, usually
//! IP address management, to the plugin named in its config. In plexus the
//! delegate may be built in (host-local, static) or a binary on `CNI_PATH`;
//! a [`Resolver`] hides which.

use serde_json::Value;

use crate::env::CniCommand;
use crate::error::CniError;
use crate::names::PluginType;
use crate::result::CniResult;
use crate::skel::{Plugin, Request};

/// Finds the plugin that serves a `type`: a built-in one, or the executable of
/// that name on the request's `CNI_PATH`.
pub trait Resolver: Sync {
    fn resolve(
        &self,
        plugin_type: &PluginType,
        req: &Request,
    ) -> Result<Box<dyn Plugin + '_>, CniError>;
}

/// The `ipam.type` of a request's configuration, if it has an `ipam` section.
pub fn ipam_type(req: &Request) -> Result<Option<PluginType>, CniError> {
    let Some(ipam) = req.config.get("ipam") else {
        return Ok(None);
    };
    match ipam.get("type") {
        Some(Value::String(t)) if !t.is_empty() => PluginType::new(t.as_str())
            .map(Some)
            .map_err(|reason| CniError::invalid_config("ipam.type", reason)),
        _ => Err(CniError::invalid_config(
            "ipam.type",
            "an ipam section needs the type of its IPAM plugin",
        )),
    }
}

/// Run the request's IPAM plugin with `command`. The delegate receives the
/// complete configuration of the upper plugin and the same environment, only
/// the command changes (cni-SPEC §4 "Delegated Plugin protocol"). ADD returns
/// the IPAM result; the other commands return `None`. A config without
/// `ipam` is an error for ADD and a no-op otherwise.
pub fn run_ipam(
    resolver: &dyn Resolver,
    req: &Request,
    command: CniCommand,
) -> Result<Option<CniResult>, CniError> {
    let Some(plugin_type) = ipam_type(req)? else {
        return match command {
            CniCommand::Add => Err(CniError::invalid_config(
                "ipam",
                "missing: this plugin needs an IPAM plugin to get addresses from",
            )),
            _ => Ok(None),
        };
    };
    let plugin = resolver.resolve(&plugin_type, req)?;
    let mut delegated = req.clone();
    delegated.env = req.env.with_command(command)?;
    let within = |e: CniError| e.within(format!("ipam ({plugin_type})"));
    match command {
        CniCommand::Add => plugin.add(&delegated).map(Some).map_err(within),
        CniCommand::Del => plugin.del(&delegated).map(|()| None).map_err(within),
        CniCommand::Check => plugin.check(&delegated).map(|()| None).map_err(within),
        CniCommand::Status => plugin.status(&delegated).map(|()| None).map_err(within),
        CniCommand::Gc | CniCommand::Version => Err(CniError::invalid_config(
            "CNI_COMMAND",
            format!("{command} is not delegated through run_ipam"),
        )),
    }
}
