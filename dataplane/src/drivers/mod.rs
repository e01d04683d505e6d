//! The built-in interface drivers: in-process versions of the reference CNI
//! plugins, each implementing [`Plugin`] with the reference's config keys,
//! defaults, result shape and DEL semantics. A driver that needs addresses
//! gets its IPAM plugin (built in or exec'd) through a [`Resolver`].
//!
//! [`driver`] maps a plugin `type` to its driver for the executor's registry.
//!
//! A driver works on two namespaces: the pod's (`CNI_NETNS`), reached
//! through a netlink socket created inside it, and the namespace of the
//! thread that calls it, which it treats as the host (bridges, veth host
//! ends, masters, `ip_forward`). Call drivers from a thread in the host
//! namespace; tests call them on a thread inside a stand-in "node"
//! namespace ([`crate::NetNs::run`]).

pub mod bridge;
mod common;
pub mod ipvlan;
pub mod macvlan;
mod stacked;

use plexus_cni::delegate::Resolver;
use plexus_cni::skel::Plugin;

/// The plugin types served by a built-in driver, sorted.
pub fn builtin_types() -> &'static [&'static str] {
    &["bridge", "ipvlan", "macvlan"]
}

/// The built-in driver for `plugin_type`, or `None` (the executor then
/// execs the plugin binary).
pub fn driver<'r>(plugin_type: &str, resolver: &'r dyn Resolver) -> Option<Box<dyn Plugin + 'r>> {
    Some(match plugin_type {
        "bridge" => Box::new(bridge::Bridge::new(resolver)),
        "ipvlan" => Box::new(ipvlan::Ipvlan::new(resolver)),
        "macvlan" => Box::new(macvlan::Macvlan::new(resolver)),
        _ => return None,
    })
}
