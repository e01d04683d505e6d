//! The RDMA device of a device a driver hands to a pod: found on the node,
//! moved into the pod's namespace before the netdev when the RDMA subsystem
//! is in exclusive mode, and moved back at DEL (what rdma-cni does as a
//! chained plugin, and dranet for the netdevs it moves).
//!
//! In shared mode every namespace sees every RDMA device and none can move:
//! nothing is done, and the first time a process meets it, it says so.
//!
//! A device is found as rdma-cni finds it, by its bus device's
//! `infiniband/` directory in sysfs, else as the RDMA device one of whose
//! ports has the netdev (a RoCE device: rdma_rxe, siw, a RoCE VF).

use std::fmt::Display;
use std::path::PathBuf;
use std::sync::Once;

use crate::drivers::attachment::Attach;
use crate::drivers::error::{sys, sys_error, DriverError};
use crate::error::Errno;
use crate::netns::NetNs;
use crate::pci::SysfsRoot;
use crate::rdma::{bus_device_rdma_names, NetnsMode, RdmaDevice, RdmaNetlink};

/// Said once a process: that shared mode leaves RDMA devices where they are.
static SHARED_MODE_SAID: Once = Once::new();

/// Logs, the first time a process meets shared mode, that it moves no RDMA
/// device; whether this call did.
fn say_shared_mode_once(device: &RdmaDevice, of: &dyn Display) -> bool {
    let mut said = false;
    SHARED_MODE_SAID.call_once(|| {
        tracing::info!(
            "the RDMA subsystem is in shared mode: every namespace sees every RDMA device, so \
             plexus moves none into pods ({device} of {of} stays where it is; `rdma system set \
             netns exclusive` isolates them)"
        );
        said = true;
    });
    said
}

/// Where to look for a device's RDMA device.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Lookup<'a> {
    /// The bus device (a PCI address, an auxiliary device's name).
    pub bus_device: Option<&'a str>,
    /// The netdev's index in the node's namespace.
    pub netdev: Option<u32>,
}

/// The RDMA device found for a device, and the subsystem's mode.
pub(crate) struct Found {
    rdma: RdmaNetlink,
    pub device: RdmaDevice,
    pub mode: NetnsMode,
}

impl Found {
    /// Whether ADD moves it (and so DEL moves it back): in exclusive mode.
    pub fn moves(&self) -> bool {
        self.mode == NetnsMode::Exclusive
    }

    /// Into the pod's namespace `pod_ns` (exclusive mode; in shared mode
    /// nothing moves, and that is said once). `what` is its device, for
    /// messages ("VF 0000:01:10.2").
    pub fn follow_into_pod(&self, what: impl Display, pod_ns: &NetNs) -> Result<(), DriverError> {
        if !self.moves() {
            say_shared_mode_once(&self.device, &what);
            return Ok(());
        }
        self.rdma
            .move_to(&self.device, pod_ns)
            .map_err(|e| match e.errno() {
                Some(Errno::EOPNOTSUPP) => sys_error(
                    format_args!("move {} of {what} into the pod", self.device),
                    "the kernel refuses (EOPNOTSUPP): the device's driver cannot change \
                     namespace (the stock software devices rdma_rxe and siw never can)",
                ),
                _ => sys_error(
                    format_args!("move {} of {what} into the pod", self.device),
                    e,
                ),
            })
    }

    /// What a record keeps for DEL to move back: the name of a device ADD
    /// moves.
    pub fn to_move_back(&self) -> Option<String> {
        self.moves().then(|| self.device.name.clone())
    }

    /// The device the pod can use once its netdev moved: the one moved
    /// into it, or in shared mode the node's, if it still exists (a
    /// software device dies with its netdev's move).
    pub fn usable_by_pod(self) -> Result<Option<String>, DriverError> {
        if self.moves() {
            return Ok(Some(self.device.name));
        }
        Ok(self
            .rdma
            .device(&self.device.name)
            .map_err(sys("list the node's RDMA devices"))?
            .map(|d| d.name))
    }
}

/// The RDMA device of what `lookup` names, seen from the calling thread's
/// namespace (the node's); `None` when the kernel has no RDMA subsystem or
/// the device has no RDMA device.
pub(crate) fn find(sysfs: &SysfsRoot, lookup: Lookup<'_>) -> Result<Option<Found>, DriverError> {
    let Some(rdma) = RdmaNetlink::open().map_err(sys("open the RDMA subsystem's netlink"))? else {
        return Ok(None);
    };
    // One list for every look-up below; a node without RDMA devices needs
    // no more.
    let devices = rdma
        .devices()
        .map_err(sys("list the node's RDMA devices"))?;
    if devices.is_empty() {
        return Ok(None);
    }
    let mut device = None;
    if let Some(bus_device) = lookup.bus_device {
        for dir in bus_device_dirs(sysfs, bus_device) {
            let names = bus_device_rdma_names(&dir)
                .map_err(|e| DriverError::io(&dir.join("infiniband"), e))?;
            device = device.or_else(|| {
                // The first by name, as the directory lists them sorted.
                names
                    .iter()
                    .find_map(|n| devices.iter().find(|d| &d.name == n))
                    .cloned()
            });
        }
    }
    if device.is_none() {
        if let Some(index) = lookup.netdev {
            device = rdma
                .device_among(devices, index)
                .map_err(sys("look up the RDMA device of the netdev"))?;
        }
    }
    let Some(device) = device else {
        return Ok(None);
    };
    let mode = rdma
        .netns_mode()
        .map_err(sys("read the RDMA subsystem's namespace mode"))?;
    Ok(Some(Found { rdma, device, mode }))
}

/// Whether sysfs has the bus device (on the PCI or the auxiliary bus).
pub(crate) fn bus_device_exists(sysfs: &SysfsRoot, bus_device: &str) -> bool {
    !bus_device_dirs(sysfs, bus_device).is_empty()
}

/// The sysfs directories a bus device may have: PCI, then auxiliary.
fn bus_device_dirs(sysfs: &SysfsRoot, bus_device: &str) -> Vec<PathBuf> {
    ["bus/pci/devices", "bus/auxiliary/devices"]
        .into_iter()
        .map(|bus| sysfs.path().join(bus).join(bus_device))
        .filter(|dir| dir.exists())
        .collect()
}

/// DEL: the RDMA device `name` back from the pod's namespace `pod_ns` to
/// the calling thread's. When the pod has no device of that name, the one
/// whose port's netdev is `on_netdev` (an ifindex in the pod): an
/// InfiniBand VF's rebind at ADD may have named it anew after the record
/// was written. Nothing to do when the pod's namespace sees neither (never
/// moved, or gone); a namespace that died gave its RDMA devices back to
/// the initial namespace by itself.
///
/// The kernel moves a device only for a thread of the namespace it is in
/// (`rdma_dev_change_netns` compares the caller's), as rdma-cni's
/// `moveRdmaDevFromNs` does it from inside the pod's.
pub(crate) fn back_home(
    name: &str,
    on_netdev: Option<u32>,
    pod_ns: &NetNs,
) -> Result<(), DriverError> {
    let what = format_args!("RDMA device {name}");
    let home = NetNs::current().map_err(sys("open the node's namespace"))?;
    pod_ns
        .run(|| {
            let Some(rdma) =
                RdmaNetlink::open().map_err(sys("open the RDMA subsystem's netlink in the pod"))?
            else {
                return Ok(());
            };
            let device = match (rdma.device(name), on_netdev) {
                (Ok(None), Some(index)) => rdma.device_of_netdev(index),
                (named, _) => named,
            }
            .map_err(sys("list the pod's RDMA devices"))?;
            match device {
                Some(device) => rdma
                    .move_to(&device, &home)
                    .map_err(sys(format_args!("move {device} back to the node"))),
                None => Ok(()),
            }
        })
        .map_err(sys(format_args!("enter the pod's namespace for {what}")))?
}

/// `look` run on the RDMA subsystem the pod's namespace `pod_ns` sees;
/// `None` when its kernel has none.
pub(crate) fn in_pod<T>(
    pod_ns: &NetNs,
    look: impl FnOnce(&RdmaNetlink) -> crate::error::Result<Option<T>>,
) -> Result<Option<T>, DriverError> {
    pod_ns
        .run(|| match RdmaNetlink::open() {
            Ok(Some(rdma)) => look(&rdma),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        })
        .map_err(sys("enter the pod's namespace"))?
        .map_err(sys("list the pod's RDMA devices"))
}

/// The pod's interface `at.ifname` (the netdev being given back), as
/// [`back_home`]'s `on_netdev`; `None` when the pod no longer has it.
pub(crate) fn pod_netdev(at: &Attach<'_>) -> Result<Option<u32>, DriverError> {
    let link = at
        .pod
        .link_by_name(&at.ifname)
        .map_err(sys(format_args!("look up {} in the pod", at.ifname)))?;
    Ok(link.map(|l| l.index))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_mode_is_said_once_a_process() {
        let device = RdmaDevice {
            index: 1,
            name: "mlx5_2".into(),
        };
        let first = say_shared_mode_once(&device, &"VF 0000:01:10.2");
        // The one call of this process's tests that says it.
        assert!(first);
        assert!(!say_shared_mode_once(&device, &"VF 0000:01:10.3"));
    }

    #[test]
    fn a_bus_device_is_looked_for_on_the_pci_then_the_auxiliary_bus() {
        let root = tempfile::tempdir().unwrap();
        let sysfs = SysfsRoot::new(root.path());
        assert!(bus_device_dirs(&sysfs, "0000:01:10.2").is_empty());
        let aux = root.path().join("bus/auxiliary/devices/mlx5_core.eth.2");
        std::fs::create_dir_all(&aux).unwrap();
        assert_eq!(bus_device_dirs(&sysfs, "mlx5_core.eth.2"), [aux]);
    }
}
