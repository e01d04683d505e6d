//! The built-in plugins' IPAM delegation (cni-SPEC §4): ADD with its DEL
//! registered for undo, and DEL, CHECK and GC passed on.

use crate::drivers::error::DriverError;

use plexus_cni::delegate::{self, Resolver};
use plexus_cni::env::CniCommand;

use plexus_cni::result::CniResult;
use plexus_cni::skel::{Request, ValidAttachment};

use super::netconf::{has_ipam, IpamRef};
use super::undo::Undo;

/// IPAM ADD, with its DEL registered for undo. An empty answer is an error,
/// as in the reference plugins.
pub(crate) fn ipam_add<'a>(
    resolver: &'a dyn Resolver,
    req: &'a Request,
    undo: &mut Undo<'a>,
) -> Result<CniResult, DriverError> {
    let result = delegate::run_ipam(resolver, req, CniCommand::Add)?;
    undo.push("IPAM DEL", move || {
        delegate::run_ipam(resolver, req, CniCommand::Del)
            .map(drop)
            .map_err(DriverError::from)
    });
    match result {
        Some(r) if !r.ips.is_empty() => Ok(r),
        _ => Err(DriverError::IpamNoAddress),
    }
}

/// IPAM DEL/CHECK/STATUS when the configuration has an IPAM plugin.
pub(crate) fn ipam_run(
    resolver: &dyn Resolver,
    req: &Request,
    ipam: &Option<IpamRef>,
    command: CniCommand,
) -> Result<(), DriverError> {
    if has_ipam(ipam) {
        delegate::run_ipam(resolver, req, command)?;
    }
    Ok(())
}

/// cni-SPEC §2 GC: nothing of a driver's own outlives the pod namespace, so
/// GC is the IPAM plugin's (it holds the leases).
pub(crate) fn ipam_gc(
    resolver: &dyn Resolver,
    req: &Request,
    ipam: &Option<IpamRef>,
    valid: &[ValidAttachment],
) -> Result<(), DriverError> {
    let Some(kind) = ipam.as_ref().and_then(|i| i.kind.as_ref()) else {
        return Ok(());
    };
    let plugin = resolver.resolve(kind, req)?;
    plugin
        .gc(req, valid)
        .map_err(|e| e.within(format!("ipam ({kind})")))
        .map_err(DriverError::from)
}
