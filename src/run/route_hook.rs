//! multi-net-spec §4.1.2.1.9's routing step as the executor sees it: a
//! hook called after an attachment is added, and the result edits its
//! implementations share. The kernel's side is [`super::routes`].

use std::net::IpAddr;

use super::RunError;
use crate::cni::names::{IfName, NetnsPath};
use crate::cni::result::{CniResult, Route};

/// multi-net-spec §4.1.2.1.9: the routing step after an attachment is added.
/// The data plane implements it. Each method changes the kernel and updates
/// `result` to say what it did, so that the cached result (the prevResult of
/// CHECK and DEL, and the source of network-status) matches the pod.
pub trait RouteHook {
    /// Remove the default routes of `ifname` in `netns`: the cluster-wide
    /// default network's, when another attachment takes the default route.
    fn clear_default_route(
        &self,
        netns: &NetnsPath,
        ifname: &IfName,
        result: &mut CniResult,
    ) -> Result<(), RunError>;

    /// Send the default route through `gateways` (in order of preference)
    /// on `ifname` in `netns`.
    fn set_default_route(
        &self,
        netns: &NetnsPath,
        ifname: &IfName,
        gateways: &[IpAddr],
        result: &mut CniResult,
    ) -> Result<(), RunError>;
}

/// Leaves routes and results alone: an executor's hook until one is set
/// ([`super::Executor::with_route_hook`]); the plugin's ADD sets the data plane's
/// (`NetlinkRouteHook` in `src/plugin/`), so only executors that never
/// apply a `default-route` selection keep this one.
pub struct NoRouteHook;

impl RouteHook for NoRouteHook {
    fn clear_default_route(
        &self,
        _: &NetnsPath,
        _: &IfName,
        _: &mut CniResult,
    ) -> Result<(), RunError> {
        Ok(())
    }

    fn set_default_route(
        &self,
        _: &NetnsPath,
        _: &IfName,
        _: &[IpAddr],
        _: &mut CniResult,
    ) -> Result<(), RunError> {
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
