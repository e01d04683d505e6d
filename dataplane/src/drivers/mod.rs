//! The built-in plugins: in-process versions of the reference CNI plugins,
//! each implementing [`Plugin`] with the reference's config keys, defaults,
//! result shape and DEL semantics. Interface drivers (bridge, macvlan,
//! ipvlan) get their IPAM plugin (built in or exec'd) through a [`Resolver`];
//! chained plugins (tuning, bandwidth) work on the prevResult.
//!
//! [`driver`] maps a plugin `type` to its driver for the executor's registry.
//!
//! A driver works on two namespaces: the pod's (`CNI_NETNS`), reached
//! through a netlink socket created inside it, and the namespace of the
//! thread that calls it, which it treats as the host (bridges, veth host
//! ends, masters, `ip_forward`, ifb devices). Call drivers from a thread in
//! the host namespace; tests call them on a thread inside a stand-in "node"
//! namespace ([`crate::NetNs::run`]).

pub mod bandwidth;
pub mod bridge;
mod chained;
mod common;
pub mod ipvlan;
pub mod macvlan;
pub mod stacked;
pub mod tuning;

use std::path::Path;

use plexus_cni::delegate::Resolver;
use plexus_cni::env::CNI_NETNS;
use plexus_cni::skel::Plugin;
use plexus_cni::CniError;

/// The error for a `CNI_NETNS` naming the caller's own namespace, the
/// node's (code 4): a pod never has it, and an ADD there would configure the
/// node itself ([`crate::netns::PodNetns::Node`]).
pub fn node_netns_refused(path: &Path) -> CniError {
    CniError::invalid_env(
        CNI_NETNS,
        format!(
            "{} is the node's own network namespace (the one plexus runs in), not a pod's; \
             refusing to configure the node as a pod",
            path.display()
        ),
    )
}

/// The plugin types served by a built-in driver, sorted.
pub fn builtin_types() -> &'static [&'static str] {
    &["bandwidth", "bridge", "ipvlan", "macvlan", "tuning"]
}

/// The built-in driver for `plugin_type`, or `None` (the executor then
/// execs the plugin binary).
pub fn driver<'r>(plugin_type: &str, resolver: &'r dyn Resolver) -> Option<Box<dyn Plugin + 'r>> {
    Some(match plugin_type {
        "bandwidth" => Box::new(bandwidth::Bandwidth::new()),
        "bridge" => Box::new(bridge::Bridge::new(resolver)),
        "ipvlan" => Box::new(ipvlan::ipvlan(resolver)),
        "macvlan" => Box::new(macvlan::macvlan(resolver)),
        "tuning" => Box::new(tuning::Tuning::new()),
        _ => return None,
    })
}
