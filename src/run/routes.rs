//! multi-net-spec §4.1.2.1.9 in the kernel: the [`RouteHook`] the executor
//! calls after an attachment, implemented over the data plane's netlink
//! handle in the pod's namespace.

use crate::cni::names::{IfName, NetnsPath};
use std::sync::Arc;

use plexus_dataplane::netlink::{IpFamily, Route};
use plexus_dataplane::session::{PodLookup, Session};
use plexus_dataplane::Netlink;

use super::{RouteChange, RouteHook, RunError};
use crate::cni::result::CniResult;

/// Changes the pod's default routes through netlink, on the handles of the
/// invocation's session (the plugins' own).
#[derive(Default)]
pub struct NetlinkRouteHook {
    pub session: Arc<Session>,
}

fn failed(what: &str, ifname: &IfName, e: impl std::fmt::Display) -> RunError {
    RunError::route(what, ifname, e)
}

/// The pod's handle and the index of `ifname` in it.
fn pod_link<'s>(
    session: &'s Session,
    netns: &NetnsPath,
    ifname: &IfName,
) -> Result<(&'s Netlink, u32), RunError> {
    let nl = match session.pod(netns.as_path()) {
        Ok(PodLookup::Pod(side)) => session
            .pod_netlink(side)
            .map_err(|e| failed("netlink in the pod namespace", ifname, e))?,
        Ok(_) => {
            return Err(failed(
                "open the pod namespace",
                ifname,
                "not a pod's network namespace",
            ))
        }
        Err(e) => return Err(failed("open the pod namespace", ifname, e)),
    };
    let link = nl
        .link_by_name(ifname)
        .map_err(|e| failed("look up the interface", ifname, e))?
        .ok_or_else(|| {
            failed(
                "look up the interface",
                ifname,
                "no such interface in the pod",
            )
        })?;
    Ok((nl, link.index))
}

/// Delete the default routes of `families` that leave through `index`.
fn delete_defaults(
    nl: &Netlink,
    index: u32,
    families: &[IpFamily],
    ifname: &IfName,
) -> Result<(), RunError> {
    for &family in families {
        let routes = nl
            .routes(family, None)
            .map_err(|e| failed("list routes", ifname, e))?;
        for route in routes
            .iter()
            .filter(|r| r.dst.prefix() == 0 && r.oif == Some(index))
        {
            nl.del_route(route)
                .map_err(|e| failed("delete the default route", ifname, e))?;
        }
    }
    Ok(())
}

impl RouteHook for NetlinkRouteHook {
    fn route(&self, change: &RouteChange, result: &mut CniResult) -> Result<(), RunError> {
        let ifname = change.ifname;
        let (nl, index) = pod_link(&self.session, change.netns, ifname)?;
        let gateways = change.via.unwrap_or_default();
        // Clearing takes both families' default routes; the selection's
        // gateways replace what the plugin installed in their families.
        let families: Vec<IpFamily> = [IpFamily::V4, IpFamily::V6]
            .into_iter()
            .filter(|f| change.via.is_none() || gateways.iter().any(|g| IpFamily::of(g) == *f))
            .collect();
        delete_defaults(nl, index, &families, ifname)?;
        // The spec allows a metric per gateway in list order; it also keeps
        // several gateways of one family from colliding.
        for (metric, gateway) in gateways.iter().enumerate() {
            let route = Route::default_via(*gateway)
                .dev(index)
                .metric(metric as u32);
            nl.add_route(&route)
                .map_err(|e| failed(&format!("add the default route via {gateway}"), ifname, e))?;
        }
        change.edit(result);
        Ok(())
    }
}
