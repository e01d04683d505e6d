//! The built-in plugins: in-process versions of the reference CNI plugins,
//! each a [`Plugin`] with the reference's config keys, defaults, result
//! shape and DEL semantics.
//!
//! - Interface drivers (bridge, host-device, macvlan, ipvlan, vlan, ipoib, sriov, vdpa) implement
//!   `InterfaceDriver` and are served by the one `InterfacePlugin`; they
//!   get their IPAM plugin (built in or exec'd) through a [`Resolver`].
//! - Chained plugins (tuning, bandwidth, rdma) work on the prevResult.
//! - Every plugin gets the invocation's [`Session`], which opens the
//!   namespaces and netlink sockets once; a failed ADD is taken back
//!   through the one `undo::Undo` log.
//!
//! [`BUILTINS`] is the registration table: the executor's registry and
//! [`builtin_types`] both come from it.
//!
//! A driver works on two namespaces: the pod's (`CNI_NETNS`), reached
//! through a netlink socket created inside it, and the namespace of the
//! thread that calls it, which it treats as the host (bridges, veth host
//! ends, masters, `ip_forward`, ifb devices). Call drivers from a thread in
//! the host namespace; tests call them on a thread inside a stand-in "node"
//! namespace ([`crate::NetNs::run`]).

mod attachment;
pub mod bandwidth;
pub mod bridge;
mod check;
mod device_info;
mod error;
pub mod host_device;
mod iface;
mod interface;
mod ipam_delegate;
pub mod ipoib;
pub mod ipvlan;
pub mod macvlan;
mod netconf;
mod ownership;
mod passthrough;
mod pod_device;
pub mod rdma;
mod rdma_device;
pub mod sriov;
mod stacked;
#[cfg(test)]
mod test_support;
pub mod tuning;
mod undo;
pub mod vdpa;
pub mod vlan;

use plexus_cni::delegate::Resolver;

pub use error::DriverError;
use plexus_cni::skel::Plugin;

use bridge::Bridge;
use host_device::HostDevice;
use interface::{InterfaceDriver, InterfacePlugin};
use ipoib::Ipoib;
use ipvlan::Ipvlan;
use macvlan::Macvlan;
use sriov::Sriov;
use stacked::StackedDriver;
use vdpa::Vdpa;
use vlan::Vlan;

use crate::session::Session;

/// Builds a built-in plugin for one invocation: `resolver` finds the
/// plugins it delegates to (IPAM), `session` holds the invocation's handles.
pub type Build = for<'r> fn(&'r dyn Resolver, &'r Session) -> Box<dyn Plugin + 'r>;

/// One built-in plugin type.
pub struct Builtin {
    pub plugin_type: &'static str,
    pub build: Build,
    /// It describes its device (device-info-SPEC §5.1.2), so it gets
    /// `runtimeConfig.CNIDeviceInfoFile` whether or not its config declares
    /// the capability: NADs written for sriov-cni do not.
    pub describes_device: bool,
}

impl Builtin {
    const fn new(plugin_type: &'static str, build: Build) -> Builtin {
        Builtin {
            plugin_type,
            build,
            describes_device: false,
        }
    }

    const fn describing_its_device(self) -> Builtin {
        Builtin {
            describes_device: true,
            ..self
        }
    }
}

/// Every built-in plugin, sorted by type: one row a driver.
pub const BUILTINS: &[Builtin] = &[
    Builtin::new("bandwidth", |_, s| Box::new(bandwidth::Bandwidth::new(s))),
    Builtin::new("bridge", |r, s| interface(Bridge, r, s)),
    Builtin::new("host-device", |r, s| interface(HostDevice::default(), r, s))
        .describing_its_device(),
    Builtin::new("ipoib", |r, s| interface(StackedDriver(Ipoib), r, s)),
    Builtin::new("ipvlan", |r, s| interface(StackedDriver(Ipvlan), r, s)),
    Builtin::new("macvlan", |r, s| interface(StackedDriver(Macvlan), r, s)),
    Builtin::new("rdma", |_, s| Box::new(rdma::Rdma::new(s))),
    Builtin::new("sriov", |r, s| interface(Sriov::default(), r, s)).describing_its_device(),
    Builtin::new("tuning", |_, s| Box::new(tuning::Tuning::new(s))),
    Builtin::new("vdpa", |r, s| interface(Vdpa::default(), r, s)).describing_its_device(),
    Builtin::new("vlan", |r, s| interface(StackedDriver(Vlan), r, s)),
];

/// The plugin of an interface driver.
fn interface<'r, D: InterfaceDriver + 'r>(
    driver: D,
    resolver: &'r dyn Resolver,
    session: &'r Session,
) -> Box<dyn Plugin + 'r> {
    Box::new(InterfacePlugin::new(driver, resolver, session))
}

/// The plugin types served by a built-in driver, sorted.
pub fn builtin_types() -> impl Iterator<Item = &'static str> {
    BUILTINS.iter().map(|b| b.plugin_type)
}

/// Whether the built-in `plugin_type` describes its device (see
/// [`Builtin::describes_device`]).
pub fn describes_device(plugin_type: &str) -> bool {
    BUILTINS
        .iter()
        .any(|b| b.plugin_type == plugin_type && b.describes_device)
}

/// The built-in driver for `plugin_type`, or `None` (the executor then
/// execs the plugin binary).
pub fn driver<'r>(
    plugin_type: &str,
    resolver: &'r dyn Resolver,
    session: &'r Session,
) -> Option<Box<dyn Plugin + 'r>> {
    BUILTINS
        .iter()
        .find(|b| b.plugin_type == plugin_type)
        .map(|b| (b.build)(resolver, session))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_table_is_sorted_and_unique() {
        let types: Vec<_> = super::builtin_types().collect();
        assert!(types.windows(2).all(|w| w[0] < w[1]), "{types:?}");
    }
}
