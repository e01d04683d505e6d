//! The `vdpa` driver: a vDPA device handed to the pod, the way sriov-cni
//! and govdpa do (k8snetworkplumbingwg/sriov-cni, govdpa).
//!
//! Keys (`conf`): `vdpaDevice` (the device's name under
//! /sys/bus/vdpa/devices) or `deviceID` (the PCI address of the VF or PF it
//! sits on; `runtimeConfig.deviceID`, as Multus hands it over, wins), not
//! both; `mac` (`CNI_ARGS` `MAC` and `runtimeConfig.mac` win, in that
//! order), `mtu`, `ipam`, `dns`, and `dataDir` (where device locks and
//! records live, default [`DEFAULT_DATA_DIR`]).
//!
//! The device is found through the `vdpa` generic-netlink family (which
//! answers in the node's initial namespace only) and sysfs; it must be a
//! network device (virtio ID 1). What happens depends on its bus driver:
//! - `virtio_vdpa`: its virtio-net netdev (MAC and MTU set when configured)
//!   is moved into the pod as CNI_IFNAME, addressed from IPAM and up; DEL
//!   moves it back under its original name, MAC and MTU (when the pod's
//!   namespace is gone, the kernel has moved it back to the initial
//!   namespace and it is found through sysfs). device-info-SPEC §3.1.4:
//!   driver `virtio`, path `/sys/bus/virtio/devices/virtioN`.
//! - `vhost_vdpa`: the pod gets `/dev/vhost-vdpa-N` through device-info
//!   (§3.1.4, driver `vhost`); no netdev, so the result has the interface
//!   without configuring it and IPAM's addresses for the pod's userspace
//!   driver (as sriov's DPDK mode). Its MAC and MTU are the device's
//!   (`vdpa dev add ... mac ... mtu ...`): a configured one that differs
//!   is refused rather than ignored.
//!
//! Ownership is sriov's (`ownership`): a device whose owner's
//! namespace still exists is refused (code 11); one whose owner's namespace
//! is gone is given back first; a late DEL of an old owner leaves the
//! device alone.

mod conf;

use crate::drivers::error::{check_failed, sys, sys_error, DriverError};
use std::path::PathBuf;

use plexus_cni::deviceinfo::{DeviceInfo, VdpaDevice, VdpaDriver};
use plexus_cni::names::NetnsPath;
use plexus_cni::result::CniResult;
use plexus_cni::skel::Request;
use serde::{Deserialize, Serialize};

use self::conf::{Conf, Device};
use super::interface::{Call, InterfaceDriver};
use super::netconf::IpamRef;
use super::ownership::{
    Claim, DeviceLock, GiveBack, HandsOver, Owned, Owner, Return, Store, StoreAt,
};
use super::passthrough::{self, Found, Netdev, Patience, Poll};
use super::pod_device;
use super::undo::Undo;
use crate::mac::MacAddr;
use crate::netlink::{Link, LinkKind, Netlink};
use crate::pci::{PciAddress, SysfsRoot};
use crate::vdpa::{VdpaNetlink, VdpaSysfsDevice, VHOST_VDPA, VIRTIO_ID_NET, VIRTIO_VDPA};

/// Where device locks and records live unless `dataDir` says otherwise.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/plexus/vdpa";

/// Its device locks and records.
const STORE: StoreAt = StoreAt::new(DEFAULT_DATA_DIR, "vDPA device");

/// The vDPA driver, built in. Reads sysfs below `sysfs`; keeps device locks
/// and records in [`DEFAULT_DATA_DIR`] unless
/// the configuration's `dataDir` says otherwise.
#[derive(Debug, Clone, Default)]
pub struct Vdpa {
    sysfs: SysfsRoot,
}

/// A device's owner and what to give back on DEL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    pub owner: Owner,
    pub netns: NetnsPath,
    /// The virtio device whose netdev went to the pod (`virtio_vdpa`).
    pub virtio: Option<String>,
    pub found: Found,
}

impl Owned for Record {
    fn owner(&self) -> &Owner {
        &self.owner
    }
    fn netns(&self) -> &NetnsPath {
        &self.netns
    }
}

/// How the device is bound, as an ADD takes it.
#[derive(Debug, Clone)]
enum Bound {
    Virtio { virtio: String, netdev: Link },
    Vhost { path: PathBuf, mac: Option<MacAddr> },
}

/// What [`Vdpa::prepare`] finds, with the device claimed (its lock held
/// until the ADD and its undoing are over).
#[derive(Debug)]
pub(crate) struct Prepared {
    claim: Claim<String, Bound, Record>,
    /// The PCI device it sits on (its management device on the `pci` bus).
    pci: Option<PciAddress>,
}

/// What [`Vdpa::create`] made.
#[derive(Debug)]
pub(crate) struct Made {
    name: String,
    pci: Option<PciAddress>,
    bound: Bound,
    /// The pod's interface (`virtio_vdpa`).
    pod_link: Option<Link>,
}

fn open_genl(key: &str) -> Result<VdpaNetlink, DriverError> {
    VdpaNetlink::open()
        .map_err(sys("the vdpa generic netlink family"))?
        .ok_or_else(|| {
            DriverError::config(
                key,
                "no vDPA device can be found: the kernel has no vdpa generic netlink family \
                 in this network namespace (CONFIG_VDPA; the family answers in the initial \
                 namespace only)",
            )
        })
}

impl Vdpa {
    /// The configured device's name: as given, or the one vDPA device on
    /// the configured PCI device.
    fn resolve(&self, conf: &Conf) -> Result<String, DriverError> {
        let address = match &conf.device {
            Device::Name(name) => return Ok(name.clone()),
            Device::Pci(address) => *address,
        };
        let on = self
            .sysfs
            .vdpa_devices_on(address)
            .map_err(|e| sys_error(format_args!("{}: read sysfs", conf.device_key), e))?;
        match on.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(DriverError::config(
                conf.device_key,
                format!("no vDPA device on PCI device {address}"),
            )),
            many => Err(DriverError::config(
                conf.device_key,
                format!(
                    "PCI device {address} has several vDPA devices ({}): name one with vdpaDevice",
                    many.join(", ")
                ),
            )),
        }
    }

    fn sysfs_device(&self, name: &str) -> Result<Option<VdpaSysfsDevice>, DriverError> {
        self.sysfs
            .vdpa_device(name)
            .map_err(|e| sys_error(format_args!("vDPA device {name}: read sysfs"), e))
    }

    /// How the device is bound now, with its netdev in the host or its
    /// character device (whose MAC and MTU `genl` reads).
    fn bound(
        &self,
        conf: &Conf,
        name: &str,
        host: &Netlink,
        genl: &VdpaNetlink,
    ) -> Result<Bound, DriverError> {
        let key = conf.device_key;
        let dev = self
            .sysfs_device(name)?
            .ok_or_else(|| DriverError::config(key, format!("vDPA device {name} vanished")))?;
        match dev.driver.as_deref() {
            Some(VIRTIO_VDPA) => {
                let virtio = dev.virtio.clone().ok_or_else(|| {
                    sys_error(
                        format_args!("vDPA device {name}"),
                        "bound to virtio_vdpa, but sysfs shows no virtio device",
                    )
                })?;
                for netdev in &dev.netdevs {
                    if let Some(link) = host
                        .link_by_name(netdev)
                        .map_err(sys(format_args!("look up {netdev}")))?
                    {
                        return Ok(Bound::Virtio {
                            virtio,
                            netdev: link,
                        });
                    }
                }
                Err(DriverError::config(
                    key,
                    format!(
                        "vDPA device {name} ({virtio}) has no netdev in this network namespace: \
                         it is in use outside plexus's records"
                    ),
                ))
            }
            Some(VHOST_VDPA) => {
                let path = dev.vhost_path().ok_or_else(|| {
                    sys_error(
                        format_args!("vDPA device {name}"),
                        "bound to vhost_vdpa, but sysfs shows no vhost-vdpa-N device",
                    )
                })?;
                let config = genl
                    .net_config(name)
                    .map_err(sys(format_args!("vDPA device {name}")))?
                    .unwrap_or_default();
                if let Some(want) = conf.mac.filter(|m| config.mac != Some(*m)) {
                    return Err(unchangeable("mac", name, want, config.mac));
                }
                if let Some(want) = conf.mtu.filter(|m| config.mtu.map(u32::from) != Some(*m)) {
                    return Err(unchangeable("mtu", name, want, config.mtu));
                }
                Ok(Bound::Vhost {
                    path,
                    mac: config.mac,
                })
            }
            None => Err(DriverError::config(
                key,
                format!(
                    "vDPA device {name} is bound to no driver: bind it to {VIRTIO_VDPA} or \
                     {VHOST_VDPA}"
                ),
            )),
            Some(other) => Err(DriverError::config(
                key,
                format!(
                    "vDPA device {name} is bound to {other}, which plexus does not know: \
                     expected {VIRTIO_VDPA} or {VHOST_VDPA}"
                ),
            )),
        }
    }

    /// The device's netdev in the host, waiting while the kernel brings it
    /// back; `None` when the device is gone or bound elsewhere now.
    fn host_netdev(
        &self,
        name: &str,
        virtio: &str,
        host: &Netlink,
        patience: Patience,
    ) -> Result<Option<Link>, DriverError> {
        passthrough::wait_for_netdev(format_args!("vDPA device {name}"), patience, || {
            let Some(dev) = self.sysfs_device(name)? else {
                return Ok(Poll::Ready(None));
            };
            if dev.virtio.as_deref() != Some(virtio) {
                return Ok(Poll::Ready(None));
            }
            for netdev in &dev.netdevs {
                if let Some(link) = host
                    .link_by_name(netdev)
                    .map_err(sys(format_args!("look up {netdev}")))?
                {
                    return Ok(Poll::Ready(Some(link)));
                }
            }
            Ok(Poll::Pending)
        })
    }
}

impl GiveBack for Vdpa {
    type Key = String;
    type Record = Record;

    fn del_keys(&self, req: &Request) -> (Option<String>, Store) {
        let keys = conf::del_keys(req);
        (keys.device, STORE.open(keys.data_dir.as_deref()))
    }

    /// A `virtio_vdpa` device's netdev comes home; a `vhost_vdpa` one has
    /// nothing to give back.
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
        let name = lock.key();
        if let (
            Found::Netdev {
                name: netdev,
                mac,
                mtu,
            },
            Some(virtio),
        ) = (&record.found, &record.virtio)
        {
            passthrough::return_netdev(
                format_args!("vDPA device {name}"),
                Netdev::Of(virtio),
                netdev,
                *mac,
                *mtu,
                host,
                pod,
                || self.host_netdev(name, virtio, host, patience),
            )?;
        }
        lock.remove_record()
    }
}

/// A MAC or MTU that a device on vhost_vdpa cannot be given.
fn unchangeable(
    key: &str,
    name: &str,
    want: impl std::fmt::Display,
    have: Option<impl std::fmt::Display>,
) -> DriverError {
    let have = have.map_or("none".to_string(), |h| h.to_string());
    DriverError::config(
        key,
        format!(
            "{want}: vDPA device {name} is bound to {VHOST_VDPA} and has {have}; plexus cannot \
             change it there (set it when creating the device: vdpa dev add ... {key} ...)"
        ),
    )
}

impl InterfaceDriver for Vdpa {
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
        let key = conf.device_key;
        let name = self.resolve(conf)?;
        let genl = open_genl(key)?;
        let dev = genl
            .device(&name)
            .map_err(sys(format_args!("vDPA device {name}")))?
            .ok_or_else(|| DriverError::config(key, format!("no vDPA device {name}")))?;
        if dev.device_id != VIRTIO_ID_NET {
            return Err(DriverError::config(
                key,
                format!(
                    "vDPA device {name} is a virtio device of type {}, not a network device \
                     ({VIRTIO_ID_NET})",
                    dev.device_id
                ),
            ));
        }
        let pci = match dev.mgmt_bus.as_deref() {
            Some("pci") => PciAddress::parse(&dev.mgmt_dev).ok(),
            _ => None,
        };
        let claim = STORE.open(conf.data_dir.as_deref()).claim(
            name.clone(),
            key,
            format_args!("vDPA device {name}"),
            || self.bound(conf, &name, at.host, &genl),
        )?;
        Ok(Prepared { claim, pci })
    }

    fn create<'a>(
        &'a self,
        call: &Call<'a, Conf>,
        prepared: &'a Prepared,
        undo: &mut Undo<'a>,
    ) -> Result<Made, DriverError> {
        let Call { req, conf, at } = *call;
        let host = at.host;
        let name = prepared.claim.key();
        let bound = prepared.claim.device(self, host, || {
            self.bound(conf, name, host, &open_genl(conf.device_key)?)
        })?;
        let (virtio, found) = match &bound {
            Bound::Virtio { virtio, netdev } => (
                Some(virtio.clone()),
                Found::Netdev {
                    name: netdev.name.clone(),
                    mac: netdev.mac,
                    mtu: netdev.mtu,
                },
            ),
            Bound::Vhost { .. } => (None, Found::Vhost),
        };
        let record = Record {
            owner: Owner::of(req)?,
            netns: at.sandbox.clone(),
            virtio,
            found,
        };
        let what = format_args!("vDPA device {name}");
        prepared.claim.take(self, record, what, at, undo)?;
        let pod_link = match &bound {
            Bound::Virtio { netdev, .. } => Some(passthrough::move_into_pod(
                format_args!("vDPA device {name}"),
                netdev,
                conf.mac,
                conf.mtu,
                at,
            )?),
            Bound::Vhost { .. } => None,
        };
        Ok(Made {
            name: name.clone(),
            pci: prepared.pci,
            bound,
            pod_link,
        })
    }

    fn configure(
        &self,
        call: &Call<'_, Conf>,
        made: Made,
        ipam: Option<CniResult>,
    ) -> Result<CniResult, DriverError> {
        let Call { req, conf, at } = *call;
        // The MAC a vhost_vdpa device reports stands in the netdev-less result.
        let admin_mac = match (&made.pod_link, &made.bound) {
            (Some(_), _) => None,
            (None, Bound::Vhost { mac, .. }) => *mac,
            (None, Bound::Virtio { .. }) => unreachable!("create moves the netdev"),
        };
        pod_device::pod_result(
            req,
            conf.dns.as_ref(),
            at,
            made.pod_link,
            admin_mac,
            made.pci.map(|pci| pci.to_string()),
            ipam,
        )
    }

    fn check(&self, call: &Call<'_, Conf>, prev: &CniResult) -> Result<(), DriverError> {
        let Call { req, conf, at } = *call;
        let name = self.resolve(conf)?;
        let lock = STORE.open(conf.data_dir.as_deref()).lock(name.clone())?;
        let record: Record = lock.record_for(req, format_args!("vDPA device {name}"))?;
        let Some(virtio) = &record.virtio else {
            let dev = self.sysfs_device(&name)?;
            return match dev.and_then(|d| d.vhost) {
                Some(_) => Ok(()),
                None => Err(check_failed(format!(
                    "vDPA device {name} is no longer bound to {VHOST_VDPA}"
                ))),
            };
        };
        let netdev = format_args!("vDPA device {name}'s netdev ({virtio})");
        passthrough::check_pod_netdev(at, prev, Netdev::Of(virtio), netdev)
    }

    /// device-info-SPEC §3.1.4: the vDPA device, its driver and path, and
    /// the PCI device (with its PF, for a VF) it sits on.
    fn device_info(&self, _conf: &Conf, made: &Made) -> Option<DeviceInfo> {
        let (driver, path) = match &made.bound {
            Bound::Vhost { path, .. } => (VdpaDriver::Vhost, path.display().to_string()),
            Bound::Virtio { virtio, .. } => (
                VdpaDriver::Virtio,
                format!("/sys/bus/virtio/devices/{virtio}"),
            ),
        };
        let vf = made.pci.and_then(|a| self.sysfs.virtual_function(a).ok());
        Some(DeviceInfo::vdpa(VdpaDevice {
            parent_device: made.name.clone().into(),
            driver,
            path: path.into(),
            pci_address: made.pci.map(|a| a.to_string().into()),
            pf_pci_address: vf.as_ref().map(|vf| vf.pf.to_string().into()),
            representor_device: vf
                .as_ref()
                .and_then(|vf| self.sysfs.vf_representor(vf))
                .map(Into::into),
        }))
    }

    fn hands_over(&self) -> Option<&dyn HandsOver> {
        Some(self)
    }
}
