//! multi-net-spec §4.1.2.1.9's routing step as the executor sees it: a
//! hook called after an attachment is added, and the result edits its
//! implementations share. The kernel's side is [`super::routes`].

use std::net::IpAddr;

use super::RunError;
use crate::cni::names::{IfName, NetnsPath};
use crate::cni::result::{CniResult, Route};

/// multi-net-spec §4.1.2.1.9: the routing step after an attachment is added.
/// The data plane implements it. It changes the kernel and updates `result`
/// to say what it did ([`RouteChange::edit`]), so that the cached result
/// (the prevResult of CHECK and DEL, and the source of network-status)
/// matches the pod.
pub trait RouteHook {
    fn route(&self, change: &RouteChange, result: &mut CniResult) -> Result<(), RunError>;
}

/// A change to the default routes of `ifname` in `netns`.
#[derive(Debug, Clone, Copy)]
pub struct RouteChange<'a> {
    pub netns: &'a NetnsPath,
    pub ifname: &'a IfName,
    /// `None`: remove them (the cluster-wide default network's, when another
    /// attachment takes the default route); else send the default route
    /// through these gateways, in order of preference.
    pub via: Option<&'a [IpAddr]>,
}

impl RouteChange<'_> {
    /// The result's side of the change: what a hook's `result` must say
    /// once the kernel has it.
    pub fn edit(&self, result: &mut CniResult) {
        match self.via {
            None => strip_default_routes(result),
            Some(gateways) => set_default_routes(result, gateways),
        }
    }
}

/// Leaves routes and results alone: an executor's hook until one is set
/// ([`super::Executor::with_route_hook`]); the plugin's ADD sets the data plane's
/// (`NetlinkRouteHook` in `src/plugin/`), so only executors that never
/// apply a `default-route` selection keep this one.
pub struct NoRouteHook;

impl RouteHook for NoRouteHook {
    fn route(&self, _: &RouteChange, _: &mut CniResult) -> Result<(), RunError> {
        Ok(())
    }
}

/// For [`RouteHook`] implementations: drop the default routes from a result.
pub fn strip_default_routes(result: &mut CniResult) {
    result.routes.retain(|r| !r.is_default());
}

/// For [`RouteHook`] implementations: replace the result's default routes of
/// each gateway's family by one route per gateway.
pub fn set_default_routes(result: &mut CniResult, gateways: &[IpAddr]) {
    result
        .routes
        .retain(|r| !(r.is_default() && gateways.iter().any(|g| g.is_ipv4() == r.dst.is_ipv4())));
    result
        .routes
        .extend(gateways.iter().map(|gw| Route::default_via(*gw)));
}
