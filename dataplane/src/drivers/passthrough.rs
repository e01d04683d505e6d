//! A host device's netdev handed whole to a pod and back (an SR-IOV VF's,
//! a vDPA device's virtio-net, a host-device's): moved into the pod renamed
//! to CNI_IFNAME, found there by its device (IFLA_PARENT_DEV_NAME) or the
//! alias its ADD gave it ([`Netdev`]), and on DEL moved home
//! under its original name, MAC and MTU, waiting (bounded) for a netdev the
//! kernel is bringing back from a namespace being destroyed.

use crate::drivers::error::{check_failed, sys, sys_error, DriverError};
use std::fmt::Display;
use std::time::{Duration, Instant};

use plexus_cni::result::CniResult;
use serde::{Deserialize, Serialize};

use super::attachment::Attach;
use crate::drivers::check;
use crate::mac::MacAddr;
use crate::netlink::{Link, LinkUpdate, Netlink};
use crate::netns::NetNs;
use plexus_cni::names::IfName;

/// How long a DEL (or an ADD reclaiming a device) waits for a netdev the
/// kernel is moving back from a namespace being destroyed.
pub(crate) const NETDEV_RETURN_TIMEOUT: Duration = Duration::from_secs(10);
const NETDEV_POLL: Duration = Duration::from_millis(20);

/// How a device was found before its owner's ADD (part of its record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub(crate) enum Found {
    /// With a netdev in the host namespace, which the ADD moved into the pod.
    Netdev {
        name: IfName,
        mac: Option<MacAddr>,
        mtu: u32,
    },
    /// A VF bound to a userspace driver, without netdev (sriov-cni's DPDK
    /// mode).
    Dpdk,
    /// A vDPA device bound to `vhost_vdpa`: a character device, no netdev.
    Vhost,
}

/// How a netdev handed to a pod is told apart from the pod's others
/// (CNI_IFNAME may be another device: an ADD that found the name taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Netdev<'a> {
    /// By its device (IFLA_PARENT_DEV_NAME: a PCI address, a virtio device).
    Of(&'a str),
    /// By the alias (IFLA_IFALIAS) its ADD gave it: its name in the host, as
    /// the reference host-device marks it; for a netdev without a device of
    /// its own (a dummy, a veth, a bond).
    Aliased(&'a str),
}

impl Netdev<'_> {
    pub fn is(&self, link: &Link) -> bool {
        match self {
            Netdev::Of(parent) => link.parent_device.as_deref() == Some(*parent),
            Netdev::Aliased(alias) => link.alias.as_deref() == Some(*alias),
        }
    }
}

/// One look for a device's netdev in the host.
pub(crate) enum Poll {
    /// There (`Some`), or never coming (`None`: the device is gone or has no
    /// netdev driver any more).
    Ready(Option<Link>),
    /// Not there yet: the kernel may still be bringing it back.
    Pending,
}

/// How long a give-back waits for a netdev the kernel is still bringing
/// back from a namespace being destroyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Patience {
    /// Up to [`NETDEV_RETURN_TIMEOUT`]: the caller's own device.
    Wait,
    /// One look: a sweep of other pods' leftovers must not hold up the call
    /// it runs in (a namespace held open keeps the netdev for as long); the
    /// next sweep tries again.
    OneLook,
}

/// The device's netdev in the host, polling `look` until it says, for as
/// long as `patience` allows (code 11 after that).
pub(crate) fn wait_for_netdev(
    what: impl Display,
    patience: Patience,
    mut look: impl FnMut() -> Result<Poll, DriverError>,
) -> Result<Option<Link>, DriverError> {
    let deadline = Instant::now()
        + match patience {
            Patience::Wait => NETDEV_RETURN_TIMEOUT,
            Patience::OneLook => Duration::ZERO,
        };
    loop {
        if let Poll::Ready(link) = look()? {
            return Ok(link);
        }
        if Instant::now() >= deadline {
            return Err(DriverError::NetdevNotBack {
                device: what.to_string(),
                waited_secs: match patience {
                    Patience::Wait => Some(NETDEV_RETURN_TIMEOUT.as_secs()),
                    Patience::OneLook => None,
                },
            });
        }
        std::thread::sleep(NETDEV_POLL);
    }
}

/// The host `netdev` of `what` (e.g. "the VF"), its MAC and MTU set when
/// given, moved into the pod as CNI_IFNAME in one request.
pub(crate) fn move_into_pod(
    what: impl Display,
    netdev: &Link,
    mac: Option<MacAddr>,
    mtu: Option<u32>,
    at: &Attach<'_>,
) -> Result<Link, DriverError> {
    if let Some(mac) = mac {
        at.host
            .set_mac(netdev.index, mac)
            .map_err(sys(format_args!(
                "mac: set {mac} on {what}'s netdev {}",
                netdev.name
            )))?;
    }
    if let Some(mtu) = mtu.filter(|m| *m != netdev.mtu) {
        let update = LinkUpdate {
            mtu: Some(mtu),
            ..LinkUpdate::default()
        };
        at.host
            .update_link(netdev.index, &update)
            .map_err(sys(format_args!(
                "mtu: set {mtu} on {what}'s netdev {}",
                netdev.name
            )))?;
    }
    let moved = at.host.update_link(
        netdev.index,
        &LinkUpdate {
            netns: Some(at.pod_ns),
            name: Some(at.ifname.clone()),
            ..LinkUpdate::default()
        },
    );
    match moved {
        Ok(()) => at.pod_link(),
        Err(e) if e.is_exists() && at.ifname_exists()? => Err(at.ifname_taken()),
        Err(e) => Err(sys_error(
            format_args!(
                "move {what}'s netdev {} into the container as {}",
                netdev.name, at.ifname
            ),
            e,
        )),
    }
}

/// `netdev` in the pod.
fn pod_netdev(at: &Attach<'_>, netdev: Netdev<'_>) -> Result<Option<Link>, DriverError> {
    let links = at.pod.links().map_err(sys("list the container's links"))?;
    Ok(links.into_iter().find(|l| netdev.is(l)))
}

/// Move `netdev` from the pod to the host, as `name`
/// unless the host has a device of that name, else under the name it has.
/// (A move and a rename in one request are not one step: the move may be
/// done when the rename fails.)
fn move_home(
    what: &dyn Display,
    netdev: Netdev<'_>,
    name: &IfName,
    at: &Attach<'_>,
) -> Result<(), DriverError> {
    let host_ns = NetNs::current().map_err(sys("open the host namespace"))?;
    for rename in [Some(name.clone()), None] {
        let Some(link) = pod_netdev(at, netdev)? else {
            return Ok(());
        };
        let home = LinkUpdate {
            netns: Some(&host_ns),
            name: rename.clone(),
            ..LinkUpdate::default()
        };
        match at.pod.update_link(link.index, &home) {
            Ok(()) => return Ok(()),
            Err(e) if e.is_exists() && rename.is_some() => {}
            Err(e) => {
                return Err(sys_error(
                    format_args!("move {what}'s netdev {} back to the host", link.name),
                    e,
                ))
            }
        }
    }
    Ok(())
}

/// `netdev` back in the host (from the pod when `pod` is given) under its original `name`, MAC and MTU; `host_netdev` finds it
/// there (waiting, see [`wait_for_netdev`]). A name another device took
/// meanwhile stays taken: the device comes home under the one it has, so
/// that DEL can finish.
#[allow(clippy::too_many_arguments)]
pub(crate) fn return_netdev(
    what: impl Display,
    netdev: Netdev<'_>,
    name: &IfName,
    mac: Option<MacAddr>,
    mtu: u32,
    host: &Netlink,
    pod: Option<&Attach<'_>>,
    host_netdev: impl FnOnce() -> Result<Option<Link>, DriverError>,
) -> Result<(), DriverError> {
    if let Some(at) = pod {
        move_home(&what, netdev, name, at)?;
    }
    let Some(link) = host_netdev()? else {
        return Ok(());
    };
    if link.name != *name {
        match host.rename(link.index, name) {
            Ok(()) => {}
            Err(e) if e.is_exists() => {}
            Err(e) => {
                return Err(sys_error(
                    format_args!("rename {what}'s netdev {} back to {name}", link.name),
                    e,
                ))
            }
        }
    }
    let update = LinkUpdate {
        mac: mac.filter(|m| link.mac != Some(*m)),
        mtu: Some(mtu).filter(|m| link.mtu != *m),
        ..LinkUpdate::default()
    };
    if update.mac.is_none() && update.mtu.is_none() {
        return Ok(());
    }
    host.update_link(link.index, &update)
        .map_err(sys(format_args!(
            "give back {what}'s netdev its MAC and MTU"
        )))
}

/// CHECK of the pod's CNI_IFNAME: `netdev` (`what` in messages: "VF
/// 0000:01:10.2"), with the MAC, addresses and routes of `prev`.
pub(crate) fn check_pod_netdev(
    at: &Attach<'_>,
    prev: &CniResult,
    netdev: Netdev<'_>,
    what: impl Display,
) -> Result<(), DriverError> {
    let entry = check::prev_container_interface(prev, at)?;
    let link = check::container_link(at)?;
    if !netdev.is(&link) {
        return Err(check_failed(format!(
            "container interface {} is not {what}",
            at.ifname
        )));
    }
    check::check_mac(&link, entry, "container")?;
    check::check_ips_and_routes(at, &link, prev)
}
