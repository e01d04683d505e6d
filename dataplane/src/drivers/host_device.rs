//! The `host-device` driver: a whole netdev of the node moved into the pod,
//! with the keys and results of the reference plugin
//! (containernetworking/plugins `plugins/main/host-device`).
//!
//! Keys (`conf`): `device` (its name), `hwaddr` (its MAC), `kernelpath` (the
//! device whose `net/` directory holds it: absolute, below /sys/devices/),
//! `pciBusID` (a PCI device's address), `runtimeConfig.deviceID` (a PCI or
//! auxiliary device, as a device plugin hands it over; it overrides
//! `pciBusID`), `ipam`, `dns`, and plexus's `dataDir` (where device locks and
//! records live, default [`DEFAULT_DATA_DIR`]). The netdev is the first of
//! `device`, `hwaddr`, `kernelpath`, then the bus device's (the reference's
//! `getLink`); a device's netdev is the first name in its `net/` directory
//! (for a virtio PCI device, in its `virtio*/net/`).
//!
//! ADD, under the device's lock (`ownership`; a netdev is known by its name
//! in the node, a userspace-bound device by its PCI address):
//! - prepare (nothing changes): the netdev in the node's namespace. One that
//!   is not there but that a record gives to a pod whose namespace still
//!   exists is refused, code 11, naming the pod; one whose pod's namespace
//!   is gone is given back first.
//! - create: the record (durably, before anything changes); the netdev's
//!   alias set to its name (the reference's `moveLinkIn` mark, which finds it
//!   again in the pod and back in the node), then moved into the pod and
//!   renamed to CNI_IFNAME in one request (no temporary name or namespace).
//! - configure: addressed from IPAM and up (up without IPAM); the result is
//!   the reference's: the interface with its MAC and sandbox, IPAM's
//!   addresses on interface 0, IPAM's routes, the configuration's `dns`.
//!
//! A PCI device (`pciBusID`, `runtimeConfig.deviceID`) bound to a userspace
//! driver (vfio-pci, uio_pci_generic, igb_uio: the reference's DPDKMode) is
//! handed over without a netdev: the result names CNI_IFNAME with IPAM's
//! addresses for the pod's driver, nothing is configured, and the device
//! is described in the attachment's device-info file (device-info-SPEC
//! §3.1.3), as it is for every PCI device.
//!
//! DEL gives back what the record of this attachment says, and nothing else
//! (a late DEL of a pod whose device went to another leaves it alone): the
//! netdev moved home under its original name, MAC, MTU and alias, left down
//! (the reference's `moveLinkOut`). Without CNI_NETNS, a namespace that still
//! exists is reached through the record. When the namespace is gone, a
//! physical netdev (one with a device: PCI, auxiliary, USB) is returned to the
//! initial namespace by the kernel under CNI_IFNAME or `devN`: it is found by
//! its alias and device and renamed back; a virtual one (dummy, veth) was
//! destroyed with the namespace, and DEL succeeds.
//!
//! Differences from the reference, deliberate: every key given is checked
//! (the reference reads only the one it uses); `kernelpath` may not contain
//! `.` or `..` steps; a device in use by another pod is refused with the
//! pod's name (code 11); the device's MAC, MTU and previous alias are given
//! back at DEL; the result has no `dns` without IPAM (as the reference's).

mod conf;

use crate::drivers::error::{check_failed, sys, sys_error, DriverError};
use std::cell::Cell;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use plexus_cni::deviceinfo::{DeviceInfo, PciDevice};
use plexus_cni::names::{IfName, NetnsPath};
use plexus_cni::result::CniResult;
use plexus_cni::skel::Request;
use serde::{Deserialize, Serialize};

use self::conf::{Bus, Conf, Select, PCI_BUS_ID, RUNTIME_DEVICE_ID};
use super::attachment::Attach;
use super::interface::{Call, InterfaceDriver};
use super::netconf::IpamRef;
use super::ownership::{
    Claim, DelKeys, DeviceLock, GiveBack, HandsOver, Owned, Owner, Return, Store, StoreAt,
};
use super::passthrough::{self, Found, Netdev, Patience, Poll};
use super::pod_device;
use super::rdma_device::{self, Lookup};
use super::undo::Undo;
use crate::netlink::{Link, LinkKind, LinkUpdate, Netlink};
use crate::netns::{NetNs, PodNetns};
use crate::pci::{is_userspace_driver, PciAddress, PciError, SysfsRoot};

/// Where device locks and records live unless `dataDir` says otherwise.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/plexus/host-device";

/// Its device locks and records.
const STORE: StoreAt = StoreAt::new(DEFAULT_DATA_DIR, "host device");

/// The reference host-device plugin, built in. Reads sysfs below `sysfs`;
/// keeps device locks and records in [`DEFAULT_DATA_DIR`] unless
/// the configuration's `dataDir` says otherwise.
#[derive(Debug, Clone, Default)]
pub struct HostDevice {
    sysfs: SysfsRoot,
}

/// A device's owner and what to give back on DEL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    pub owner: Owner,
    /// The owner's `CNI_NETNS`.
    pub netns: NetnsPath,
    /// The netdev as it was in the node (`dpdk`: a userspace-bound device).
    pub found: Found,
    /// The device the netdev belongs to (IFLA_PARENT_DEV_NAME: a PCI
    /// address, an auxiliary device), or the PCI device handed over
    /// without netdev; `None` for a virtual netdev.
    pub device: Option<String>,
    /// The netdev's alias before the ADD set it.
    pub alias: Option<String>,
    /// Its RDMA device, moved into the pod with it (exclusive mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma: Option<String>,
}

impl Owned for Record {
    fn owner(&self) -> &Owner {
        &self.owner
    }
    fn netns(&self) -> &NetnsPath {
        &self.netns
    }
}

/// What the configuration selects, once sysfs says what its bus device is.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// A PCI device bound to a userspace driver: no netdev to move.
    Dpdk {
        key: &'static str,
        address: PciAddress,
    },
    /// A netdev by `device`, `hwaddr` or `kernelpath`.
    Netdev(Select),
    /// The netdev of the bus device at `path` (`key` names it).
    OnBus { key: &'static str, path: PathBuf },
}

impl Target {
    fn key(&self) -> &'static str {
        match self {
            Target::Dpdk { key, .. } | Target::OnBus { key, .. } => key,
            Target::Netdev(select) => select.key(),
        }
    }

    /// Whether `record` (of the device known as `key`) holds what this
    /// selects, for an ADD that does not find it in the node.
    fn holds(&self, key: &str, record: &Record) -> bool {
        let device = |name: Option<&std::ffi::OsStr>| {
            name.and_then(|n| n.to_str())
                .is_some_and(|n| record.device.as_deref() == Some(n) || key == n)
        };
        match (self, &record.found) {
            (Target::Dpdk { address, .. }, _) => key == address.to_string(),
            (Target::Netdev(Select::Name(want)), Found::Netdev { name, .. }) => name == want,
            (Target::Netdev(Select::Mac(want)), Found::Netdev { mac, .. }) => *mac == Some(*want),
            (Target::Netdev(Select::KernelPath(path)), _) => device(path.file_name()),
            (Target::OnBus { path, .. }, _) => device(path.file_name()),
            _ => false,
        }
    }

    /// The device in messages: as configured, with its key (its name in
    /// the node) when the configuration names it otherwise.
    fn called(&self, key: &str) -> String {
        match self {
            Target::Netdev(Select::Name(_)) => self.describe(),
            _ => format!("{} ({key})", self.describe()),
        }
    }

    fn describe(&self) -> String {
        match self {
            Target::Dpdk { address, .. } => format!("PCI device {address}"),
            Target::Netdev(Select::Name(name)) => format!("interface {name}"),
            Target::Netdev(Select::Mac(mac)) => format!("the interface with MAC {mac}"),
            Target::Netdev(Select::KernelPath(path)) => {
                format!("the interface of {}", path.display())
            }
            Target::OnBus { path, .. } => format!("the interface of {}", path.display()),
        }
    }
}

/// The device as an ADD takes it.
#[derive(Debug, Clone)]
pub(crate) enum Device {
    Netdev(Link),
    Dpdk(PciAddress),
}

impl Device {
    /// Its lock and record name: a netdev's name in the node (the kernel
    /// refuses `:` in those), a PCI device's address.
    fn key(&self) -> String {
        match self {
            Device::Netdev(link) => link.name.to_string(),
            Device::Dpdk(address) => address.to_string(),
        }
    }
}

/// What [`HostDevice::prepare`] finds, with the device claimed (its lock
/// held until the ADD and its undoing are over).
#[derive(Debug)]
pub(crate) struct Prepared {
    claim: Claim<String, Device, Record>,
    target: Target,
}

/// What [`HostDevice::create`] made.
#[derive(Debug)]
pub(crate) struct Made {
    /// The pod's interface; `None` for a userspace-bound device.
    pod_link: Option<Link>,
    /// The PCI device behind it, for device-info.
    pci: Option<PciAddress>,
    /// The RDMA device the pod can use (device-info-SPEC §3.1.3.3).
    rdma: Option<String>,
}

/// The first netdev name in `dir` (sorted, as Go's `os.ReadDir` lists it);
/// `None` when there is no such directory or it is empty.
fn first_netdev(dir: &Path) -> Result<Option<IfName>, DriverError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(DriverError::io(dir, e)),
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    Ok(names.into_iter().find_map(|n| IfName::new(n).ok()))
}

/// The netdev name of the bus device at `path`: in its `net/`, or (a
/// virtio PCI device) its first `virtio*/net/` (the reference's `getLink`).
fn bus_netdev(path: &Path) -> Result<Option<IfName>, DriverError> {
    if let Some(name) = first_netdev(&path.join("net"))? {
        return Ok(Some(name));
    }
    let Ok(entries) = fs::read_dir(path) else {
        return Ok(None);
    };
    let mut virtio: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("virtio"))
        .map(|e| e.path().join("net"))
        .collect();
    virtio.sort();
    for dir in virtio {
        if let Some(name) = first_netdev(&dir)? {
            return Ok(Some(name));
        }
    }
    Ok(None)
}

/// A bus device the configuration names.
enum OnBus {
    Pci(PciAddress),
    /// Its directory under /sys/bus/auxiliary/devices.
    Auxiliary(PathBuf),
}

/// A PCI device's directory under /sys/bus/pci/devices.
fn device_dir(sysfs: &SysfsRoot, address: PciAddress) -> PathBuf {
    sysfs
        .path()
        .join("bus/pci/devices")
        .join(address.to_string())
}

/// The owner's namespace, reopened for a DEL that came without CNI_NETNS
/// while it still exists.
struct Reopened {
    ns: NetNs,
    pod: Netlink,
}

impl HostDevice {
    /// The bus device the configuration names (`key` names it), found on
    /// its bus: `runtimeConfig.deviceID` a PCI device if there is one at
    /// that address, else an auxiliary one (the reference's
    /// `handleDeviceID`).
    fn bus_device(&self, bus: &Bus) -> Result<(&'static str, OnBus), DriverError> {
        let id = match bus {
            Bus::Pci(address) => return Ok((PCI_BUS_ID, OnBus::Pci(*address))),
            Bus::DeviceId(id) => id,
        };
        if let Some(address) = PciAddress::parse(id)
            .ok()
            .filter(|a| self.sysfs.pci_device(*a).is_ok())
        {
            return Ok((RUNTIME_DEVICE_ID, OnBus::Pci(address)));
        }
        let aux = self.sysfs.path().join("bus/auxiliary/devices").join(id);
        if aux.exists() {
            return Ok((RUNTIME_DEVICE_ID, OnBus::Auxiliary(aux)));
        }
        Err(DriverError::config(
            RUNTIME_DEVICE_ID,
            format!("{id} not found under /sys/bus/pci/devices or /sys/bus/auxiliary/devices"),
        ))
    }

    /// What the configuration selects: a PCI device bound to a userspace
    /// driver (the reference's `loadConf` and `hasDpdkDriver`), else the
    /// netdev `device`, `hwaddr` or `kernelpath` names, else the bus
    /// device's.
    fn target(&self, conf: &Conf) -> Result<Target, DriverError> {
        let bus = conf.bus.as_ref().map(|b| self.bus_device(b)).transpose()?;
        if let Some((key, OnBus::Pci(address))) = &bus {
            let device = self
                .sysfs
                .pci_device(*address)
                .map_err(|e| pci_error(key, e))?;
            let driver = device.driver().map_err(|e| pci_error(key, e))?;
            if driver.as_deref().is_some_and(is_userspace_driver) {
                return Ok(Target::Dpdk {
                    key,
                    address: *address,
                });
            }
        }
        let path = |on: OnBus| match on {
            OnBus::Pci(address) => device_dir(&self.sysfs, address),
            OnBus::Auxiliary(path) => path,
        };
        match (&conf.select, bus) {
            (Some(select), _) => Ok(Target::Netdev(select.clone())),
            (None, Some((key, on))) => Ok(Target::OnBus {
                key,
                path: path(on),
            }),
            (None, None) => Err(DriverError::config(
                conf::DEVICE,
                "missing: parse lets no configuration without a device through",
            )),
        }
    }

    /// The device `target` selects as the node has it now; `None` when its
    /// netdev is not in the node's namespace.
    fn find(&self, target: &Target, host: &Netlink) -> Result<Option<Device>, DriverError> {
        let by_name = |name: &IfName| {
            host.link_by_name(name)
                .map_err(sys(format_args!("look up {name}")))
        };
        let link = match target {
            Target::Dpdk { address, .. } => return Ok(Some(Device::Dpdk(*address))),
            Target::Netdev(Select::Name(name)) => by_name(name)?,
            Target::Netdev(Select::Mac(mac)) => host
                .links()
                .map_err(sys("list the node's links"))?
                .into_iter()
                .find(|l| l.mac == Some(*mac)),
            Target::Netdev(Select::KernelPath(path)) => {
                let path = self
                    .sysfs
                    .path()
                    .join(path.strip_prefix("/sys").unwrap_or(path));
                match first_netdev(&path.join("net"))? {
                    Some(name) => by_name(&name)?,
                    None => None,
                }
            }
            Target::OnBus { path, .. } => match bus_netdev(path)? {
                Some(name) => by_name(&name)?,
                None => None,
            },
        };
        Ok(link.map(Device::Netdev))
    }

    /// [`Self::find`], which must find it.
    fn found(&self, target: &Target, host: &Netlink) -> Result<Device, DriverError> {
        self.find(target, host)?.ok_or_else(|| not_found(target))
    }

    /// The PCI device a netdev belongs to, if it is one's.
    fn pci_of(&self, link: &Link) -> Option<PciAddress> {
        let address = PciAddress::parse(link.parent_device.as_deref()?).ok()?;
        self.sysfs.pci_device(address).ok().map(|d| d.address())
    }

    /// The device's netdev back in the node, known by the alias its ADD
    /// set (and its device, when it has one). `from_pod`: it was just moved
    /// home, or never left. Otherwise its namespace is gone: a physical
    /// netdev is on its way back (waited for as `patience` allows, unless its
    /// device is gone), a virtual one was destroyed with it.
    fn host_netdev(
        &self,
        name: &IfName,
        record: &Record,
        host: &Netlink,
        from_pod: bool,
        patience: Patience,
    ) -> Result<Option<Link>, DriverError> {
        let what = format_args!("host device {name}");
        let is_ours = |l: &Link| {
            Netdev::Aliased(name.as_str()).is(l)
                && (record.device.is_none() || l.parent_device == record.device)
        };
        passthrough::wait_for_netdev(what, patience, || {
            // Under its own name, as a move home leaves it: one look-up
            // instead of a dump of the node's links (hundreds on a busy
            // node); else under whatever name it has (CNI_IFNAME or `devN`
            // when the kernel brought it back, its pod name when its own
            // was taken).
            let named = host
                .link_by_name(name)
                .map_err(sys(format_args!("look up {name}")))?
                .filter(is_ours);
            let ours = match named {
                Some(link) => Some(link),
                None => host
                    .links()
                    .map_err(sys("list the node's links"))?
                    .into_iter()
                    .find(is_ours),
            };
            if ours.is_some() || from_pod {
                return Ok(Poll::Ready(ours));
            }
            let Some(device) = &record.device else {
                return Ok(Poll::Ready(None));
            };
            let gone = PciAddress::parse(device)
                .is_ok_and(|a| matches!(self.sysfs.pci_device(a), Err(PciError::NotFound { .. })));
            Ok(if gone {
                Poll::Ready(None)
            } else {
                Poll::Pending
            })
        })
    }

    /// The owner's namespace when it still exists, for a give-back without
    /// one (a DEL without CNI_NETNS).
    fn reopen(&self, record: &Record) -> Result<Option<Reopened>, DriverError> {
        let what = format_args!("the device owner's namespace {}", record.netns);
        match NetNs::open_pod(record.netns.as_path()).map_err(sys(&what))? {
            PodNetns::Pod(ns) => {
                let pod = Netlink::open(&ns).map_err(sys(&what))?;
                Ok(Some(Reopened { ns, pod }))
            }
            PodNetns::Gone | PodNetns::Node(_) => Ok(None),
        }
    }
}

/// A device the configuration names that the node does not have (code 7).
fn not_found(target: &Target) -> DriverError {
    DriverError::config(
        target.key(),
        format!(
            "{} is not in the node's network namespace (no such device, or another \
             container has it)",
            target.describe()
        ),
    )
}

/// A sysfs lookup of the configured PCI device: one that is not there is
/// code 7 naming the key.
fn pci_error(key: &str, e: PciError) -> DriverError {
    match e {
        PciError::NotFound { .. } => DriverError::config(key, e.to_string()),
        other => sys_error(key, other),
    }
}

impl GiveBack for HostDevice {
    type Key = String;
    type Record = Record;

    /// A `device` name is the key of its record, read first instead of
    /// every record; by MAC or bus address the device is found by its record
    /// alone: the node no longer shows it.
    fn del_keys(&self, req: &Request) -> (Option<String>, Store) {
        #[derive(Default, Deserialize)]
        struct RawDelKeys {
            device: Option<serde_json::Value>,
            #[serde(rename = "dataDir")]
            data_dir: Option<serde_json::Value>,
        }
        let c: RawDelKeys = super::netconf::decode_config(req).unwrap_or_default();
        let keys = DelKeys::read(&[c.device.as_ref()], c.data_dir.as_ref(), |n| {
            IfName::new(n).ok().map(|n| n.to_string())
        });
        (keys.device, STORE.open(keys.data_dir.as_deref()))
    }

    /// The netdev home under its name, MAC, MTU and alias (a
    /// userspace-bound device has nothing to give back).
    fn give_back(
        &self,
        lock: &DeviceLock<String>,
        record: &Record,
        Return {
            host,
            pod,
            patience,
        }: Return<'_>,
    ) -> Result<(), DriverError> {
        let Found::Netdev { name, mac, mtu } = &record.found else {
            return lock.remove_record();
        };
        let reopened = match pod {
            Some(_) => None,
            None => self.reopen(record)?,
        };
        let reached = reopened.as_ref().map(|r| Attach {
            ifname: record.owner.ifname.clone(),
            sandbox: record.netns.clone(),
            pod_ns: &r.ns,
            host,
            pod: &r.pod,
        });
        let pod = pod.or(reached.as_ref());
        if let (Some(name), Some(at)) = (&record.rdma, pod) {
            rdma_device::back_home(name, rdma_device::pod_netdev(at)?, at.pod_ns)?;
        }
        let home = Cell::new(None);
        passthrough::return_netdev(
            format_args!("host device {name}"),
            Netdev::Aliased(name.as_str()),
            name,
            *mac,
            *mtu,
            host,
            pod,
            || {
                let link = self.host_netdev(name, record, host, pod.is_some(), patience)?;
                home.set(link.as_ref().map(|l| l.index));
                Ok(link)
            },
        )?;
        if let Some(index) = home.get() {
            let alias = LinkUpdate {
                alias: Some(record.alias.clone().unwrap_or_default()),
                ..LinkUpdate::default()
            };
            host.update_link(index, &alias)
                .map_err(sys(format_args!("give back host device {name}'s alias")))?;
        }
        lock.remove_record()
    }
}

impl InterfaceDriver for HostDevice {
    type Conf = Conf;
    /// DEL gives the device back instead: `remove` takes it back through
    /// [`InterfaceDriver::hands_over`].
    const POD_LINK_KIND: Option<LinkKind> = None;
    type Prepared = Prepared;
    type Made = Made;

    fn parse(&self, req: &Request) -> Result<Conf, DriverError> {
        conf::parse(req)
    }

    fn ipam<'c>(&self, conf: &'c Conf) -> &'c Option<IpamRef> {
        &conf.ipam
    }

    fn prepare(&self, call: &Call<'_, Conf>) -> Result<Prepared, DriverError> {
        let Call { conf, at, .. } = *call;
        let target = self.target(conf)?;
        let store = STORE.open(conf.data_dir.as_deref());
        let key = target.key();
        let claim = match self.find(&target, at.host)? {
            Some(device) => {
                let what = target.called(&device.key());
                store.claim(device.key(), key, what, || Ok(device))?
            }
            // Not in the node: a pod has it. Refused naming the pod while
            // its namespace exists; else given back first.
            None => match store.find_record::<String, Record>(|k, r| target.holds(k, r))? {
                Some((held, _)) => {
                    let what = target.called(&held);
                    store.claim(held, key, what, || self.found(&target, at.host))?
                }
                None => return Err(not_found(&target)),
            },
        };
        Ok(Prepared { claim, target })
    }

    fn create<'a>(
        &'a self,
        call: &Call<'a, Conf>,
        prepared: &'a Prepared,
        undo: &mut Undo<'a>,
    ) -> Result<Made, DriverError> {
        let Call { req, at, .. } = *call;
        let host = at.host;
        let device = prepared
            .claim
            .device(self, host, || self.found(&prepared.target, host))?;
        let (found, parent, alias) = match &device {
            Device::Netdev(link) => (
                Found::Netdev {
                    name: link.name.clone(),
                    mac: link.mac,
                    mtu: link.mtu,
                },
                link.parent_device.clone(),
                link.alias.clone(),
            ),
            Device::Dpdk(address) => (Found::Dpdk, Some(address.to_string()), None),
        };
        // A userspace-bound device has no RDMA device.
        let rdma = match &device {
            Device::Netdev(link) => rdma_device::find(
                &self.sysfs,
                Lookup {
                    bus_device: link.parent_device.as_deref(),
                    netdev: Some(link.index),
                },
            )?,
            Device::Dpdk(_) => None,
        };
        let record = Record {
            owner: Owner::of(req)?,
            netns: at.sandbox.clone(),
            found,
            device: parent,
            alias,
            rdma: rdma.as_ref().and_then(rdma_device::Found::to_move_back),
        };
        // A failed ADD leaves it up again once home (the reference's
        // moveLinkIn restores the up state; DEL leaves it down): registered
        // first, so it runs after the give-back.
        if let Device::Netdev(link) = &device {
            if link.up {
                let name = link.name.clone();
                undo.push(format!("bringing {name} back up"), move || {
                    match host.link_by_name(&name) {
                        Ok(Some(home)) if !home.up => host.set_up(home.index),
                        Ok(_) => Ok(()),
                        Err(e) => Err(e),
                    }
                    .map_err(sys(format_args!("set {name} up again")))
                });
            }
        }
        let what = format_args!("host device {}", device.key());
        prepared.claim.take(self, record, what, at, undo)?;
        let link = match device {
            Device::Dpdk(address) => {
                return Ok(Made {
                    pod_link: None,
                    pci: Some(address),
                    rdma: None,
                })
            }
            Device::Netdev(link) => link,
        };
        // The reference's mark: the name it had, by which DEL finds it.
        let mark = LinkUpdate {
            alias: Some(link.name.to_string()),
            ..LinkUpdate::default()
        };
        host.update_link(link.index, &mark)
            .map_err(sys(format_args!("set the alias of {}", link.name)))?;
        let what = format_args!("host device {}", link.name);
        // The RDMA device first: a software one dies with its netdev's move.
        if let Some(rdma) = &rdma {
            rdma.follow_into_pod(what, at.pod_ns)?;
        }
        let pod_link = passthrough::move_into_pod(what, &link, None, None, at)?;
        let rdma = rdma
            .map(rdma_device::Found::usable_by_pod)
            .transpose()?
            .flatten();
        Ok(Made {
            pod_link: Some(pod_link),
            pci: self.pci_of(&link),
            rdma,
        })
    }

    fn configure(
        &self,
        call: &Call<'_, Conf>,
        made: Made,
        ipam: Option<CniResult>,
    ) -> Result<CniResult, DriverError> {
        let Call { req, conf, at } = *call;
        // The reference: "IPAM plugin returned missing IP config".
        if ipam.as_ref().is_some_and(|r| r.ips.is_empty()) {
            return Err(DriverError::IpamNoAddress);
        }
        let layer2 = ipam.is_none();
        let mut result =
            pod_device::pod_result(req, conf.dns.as_ref(), at, made.pod_link, None, None, ipam)?;
        if layer2 {
            // The reference's result without IPAM (printLink) has no dns.
            result.dns = Default::default();
        }
        Ok(result)
    }

    /// The reference's cmdCheck: the interface in the pod (the device this
    /// attachment's record names) with the MAC, addresses and routes of
    /// the prevResult; a userspace-bound device has nothing to check there.
    fn check(&self, call: &Call<'_, Conf>, prev: &CniResult) -> Result<(), DriverError> {
        let Call { req, conf, at } = *call;
        let store = STORE.open(conf.data_dir.as_deref());
        let owner = Owner::of(req)?;
        let key = store
            .find_owned_by::<String, Record>(&owner)?
            .ok_or_else(|| {
                check_failed(format!(
                    "no host device is given to container {} as {}",
                    owner.container_id, owner.ifname
                ))
            })?;
        let lock = store.lock(key.clone())?;
        let record: Record = lock.record_for(req, format_args!("host device {key}"))?;
        match &record.found {
            Found::Netdev { name, .. } => passthrough::check_pod_netdev(
                at,
                prev,
                Netdev::Aliased(name.as_str()),
                format_args!("host device {name}"),
            ),
            Found::Dpdk | Found::Vhost => Ok(()),
        }
    }

    /// device-info-SPEC §3.1.3: the PCI device (and its PF, for a VF).
    fn device_info(&self, _conf: &Conf, made: &Made) -> Option<DeviceInfo> {
        let address = made.pci?;
        let pf = self
            .sysfs
            .pci_device(address)
            .and_then(|d| d.physical_function())
            .ok()
            .flatten();
        Some(DeviceInfo::pci(PciDevice {
            pci_address: address.to_string().into(),
            pf_pci_address: pf.map(|pf| pf.address().to_string().into()),
            rdma_device: made.rdma.clone().map(Into::into),
            ..PciDevice::default()
        }))
    }

    fn hands_over(&self) -> Option<&dyn HandsOver> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_cni::names::ContainerId;

    #[test]
    fn a_record_keeps_its_json_spelling_and_says_what_it_holds() {
        let r = Record {
            owner: Owner {
                container_id: ContainerId::new("ctr1").unwrap(),
                ifname: IfName::new("net1").unwrap(),
            },
            netns: NetnsPath::new("/var/run/netns/pod").unwrap(),
            found: Found::Netdev {
                name: IfName::new("enp1s0").unwrap(),
                mac: Some("02:00:00:00:00:01".parse().unwrap()),
                mtu: 1500,
            },
            device: Some("0000:01:00.0".into()),
            alias: Some("uplink".into()),
            rdma: None,
        };
        let text = serde_json::to_string_pretty(&r).unwrap();
        assert!(text.contains(r#""mode": "netdev""#), "{text}");
        assert!(text.contains(r#""device": "0000:01:00.0""#), "{text}");
        // A record of a device without RDMA device is spelt as before.
        assert!(!text.contains("rdma"), "{text}");
        assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), r);
        let with_rdma = Record {
            rdma: Some("mlx5_2".into()),
            ..r.clone()
        };
        let text = serde_json::to_string(&with_rdma).unwrap();
        assert!(text.contains(r#""rdma":"mlx5_2""#), "{text}");
        assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), with_rdma);

        // What an ADD that does not find its device in the node looks for.
        let name = |n: &str| Target::Netdev(Select::Name(IfName::new(n).unwrap()));
        assert!(name("enp1s0").holds("enp1s0", &r));
        assert!(!name("enp2s0").holds("enp1s0", &r));
        let mac = Target::Netdev(Select::Mac("02:00:00:00:00:01".parse().unwrap()));
        assert!(mac.holds("enp1s0", &r));
        let on_bus = |path: &str| Target::OnBus {
            key: PCI_BUS_ID,
            path: path.into(),
        };
        assert!(on_bus("/sys/bus/pci/devices/0000:01:00.0").holds("enp1s0", &r));
        assert!(!on_bus("/sys/bus/pci/devices/0000:02:00.0").holds("enp1s0", &r));
        let path = Target::Netdev(Select::KernelPath(
            "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0".into(),
        ));
        assert!(path.holds("enp1s0", &r));
        let dpdk = Target::Dpdk {
            key: PCI_BUS_ID,
            address: "0000:01:00.0".parse().unwrap(),
        };
        assert!(dpdk.holds(
            "0000:01:00.0",
            &Record {
                found: Found::Dpdk,
                ..r.clone()
            }
        ));
        assert!(!dpdk.holds("enp1s0", &r));
    }
}
