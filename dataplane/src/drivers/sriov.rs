//! The `sriov` driver: an SR-IOV virtual function (VF) handed to the pod,
//! with sriov-cni's keys and behaviour (k8snetworkplumbingwg/sriov-cni).
//!
//! Keys (`conf`): `deviceID` (the VF's PCI address; `runtimeConfig.deviceID`,
//! as Multus hands it over, wins), `vlan`, `vlanQoS`, `vlanProto`, `mac`
//! (`CNI_ARGS` `MAC` and `runtimeConfig.mac` win, in that order), `spoofchk`
//! and `trust` ("on"/"off"), `link_state` (auto/enable/disable),
//! `min_tx_rate`/`max_tx_rate` (Mbit/s), `ipam`, `dns`,
//! `runtimeConfig.infinibandGUID` (node and port GUID of an InfiniBand VF),
//! and `dataDir` (where VF locks and records live, default
//! [`DEFAULT_DATA_DIR`]).
//!
//! ADD, under the VF's lock (`ownership`):
//! - prepare (nothing changes): the VF in sysfs, its PF's netdev here, its
//!   record: a VF whose owner's namespace still exists is refused; one whose
//!   owner's namespace is gone (its DEL never came) is given back first.
//! - create: the VF's PF-side state saved with the owner in its record
//!   (durably, before anything changes); then, with a netdev, its MAC set,
//!   moved into the pod and renamed to CNI_IFNAME in one request; then the
//!   PF-side settings in one request (admin MAC after the netdev's: see
//!   `netlink::vf`). A VF bound to a userspace driver (DPDK mode)
//!   gets the PF-side settings only. A failure gives everything back.
//! - configure: the netdev addressed from IPAM and up; in DPDK mode IPAM's
//!   addresses are reported, nothing is configured in the pod.
//!
//! DEL gives back what the record says (PF-side settings, admin MAC first,
//! then the netdev's name, MAC and MTU in the host), and only to the owner
//! the record names: a late DEL of a pod whose VF went to another leaves it
//! alone. When the pod's namespace is gone, the kernel has moved the netdev
//! back (maybe renamed): it is found through sysfs by PCI address. A VF that
//! vanished (its PF's VFs removed) leaves nothing to give back. After its
//! own, a DEL (and GC) gives back every VF whose owner's namespace is gone
//! (`GiveBack::give_back_orphans`): a pod whose DEL never came does not
//! leave its VLAN and trust on a VF until that VF is asked for again.
//!
//! InfiniBand VFs (`guid`, as ib-sriov-cni): a GUID of all zeros or all
//! ones is refused, configured or (none configured) the VF's own. An ADD
//! that sets GUIDs saves what to give back even when the PF does not report
//! its VFs' GUIDs: the VF netdev's own GUID, or all ones (none assigned) in
//! DPDK mode and for all zeros; DEL sets both GUIDs back and rebinds.
//!
//! Differences from sriov-cni: `spoofchk`/`trust` other than "on"/"off" and
//! rates out of range are refused (sriov-cni reads any other word as "off"
//! and leaves rates to the driver); a late DEL never resets another pod's VF
//! (#219/#313); a failed ADD or DEL says which step failed and an ADD whose
//! owner's namespace is gone reclaims the VF instead of failing forever.

mod conf;
mod guid;
mod record;

use crate::drivers::error::{check_failed, mismatch, sys, sys_error, DriverError};

use plexus_cni::deviceinfo::{DeviceInfo, PciDevice};
use plexus_cni::result::CniResult;
use plexus_cni::skel::Request;

use self::conf::Conf;
use self::record::Record;
use super::interface::{Call, InterfaceDriver};
use super::netconf::IpamRef;
use super::ownership::{Claim, DeviceLock, GiveBack, HandsOver, Owner, Return, Store, StoreAt};
use super::passthrough::{self, Found, Netdev, Patience, Poll};
use super::pod_device;
use super::rdma_device::{self, Lookup};
use super::undo::Undo;
use crate::mac::MacAddr;
use crate::netlink::{Link, LinkKind, Netlink, VfSettings, VfState};
use crate::pci::{PciAddress, PciError, SysfsRoot, VirtualFunction};

/// Where VF locks and records live unless `dataDir` says otherwise.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/plexus/sriov";

/// Its device locks and records.
const STORE: StoreAt = StoreAt::new(DEFAULT_DATA_DIR, "VF");

/// sriov-cni's plugin, built in. Reads sysfs below `sysfs`; keeps VF locks
/// and records in [`DEFAULT_DATA_DIR`] unless
/// the configuration's `dataDir` says otherwise.
#[derive(Debug, Clone, Default)]
pub struct Sriov {
    sysfs: SysfsRoot,
}

/// A VF about to be taken.
#[derive(Debug, Clone)]
struct Vf {
    info: VirtualFunction,
    /// Its netdev in the host; `None` when bound to a userspace driver.
    netdev: Option<Link>,
}

/// A VF's lock: VFs are known by their PCI address.
type VfLock = DeviceLock<PciAddress>;

/// What [`Sriov::prepare`] finds, with the VF claimed (its lock held until
/// the ADD and its undoing are over).
#[derive(Debug)]
pub(crate) struct Prepared {
    claim: Claim<PciAddress, Vf, Record>,
    pf: Link,
    settings: VfSettings,
}

/// What [`Sriov::create`] made: what the result and device-info need.
#[derive(Debug)]
pub(crate) struct Made {
    /// The VF (PCI address, PF, vfio device node in DPDK mode).
    pub vf: VirtualFunction,
    /// The pod's interface; `None` in DPDK mode.
    pub pod_link: Option<Link>,
    /// The VF's admin MAC, if set (what a DPDK-mode result reports).
    pub admin_mac: Option<MacAddr>,
    /// The RDMA device the pod can use (device-info-SPEC §3.1.3.3).
    pub rdma: Option<String>,
}

/// A VF that is not there (any more): no device at the address, or not a
/// VF of a PF now.
fn vanished(e: &PciError) -> bool {
    matches!(
        e,
        PciError::NotFound { .. }
            | PciError::NotVirtualFunction { .. }
            | PciError::VfIndexNotFound { .. }
    )
}

/// A sysfs lookup of the configured device: what the configuration got
/// wrong is code 7 naming the key.
fn device_error(conf: &Conf, e: PciError) -> DriverError {
    match e {
        PciError::NotFound { .. } | PciError::NotVirtualFunction { .. } => {
            DriverError::config(conf.device_key, e.to_string())
        }
        other => sys_error(conf.device_key, other),
    }
}

impl Sriov {
    /// The VF's PF netdev in this namespace, if it has one here.
    fn pf_link(&self, vf: &VirtualFunction, host: &Netlink) -> Result<Option<Link>, DriverError> {
        for name in &vf.pf_netdevs {
            let link = host
                .link_by_name(name)
                .map_err(sys(format_args!("look up the PF netdev {name}")))?;
            if link.is_some() {
                return Ok(link);
            }
        }
        Ok(None)
    }

    /// The configured VF as it is now: with its netdev in the host, or bound
    /// to a userspace driver.
    fn find(&self, conf: &Conf, info: VirtualFunction, host: &Netlink) -> Result<Vf, DriverError> {
        let netdev = match &info.netdev {
            Some(name) => Some(
                host.link_by_name(name)
                    .map_err(sys(format_args!("look up the VF's netdev {name}")))?
                    .ok_or_else(|| {
                        sys_error(
                            format_args!("VF {}: netdev {name}", conf.device),
                            "sysfs lists it, the host namespace does not have it",
                        )
                    })?,
            ),
            None if info.has_userspace_driver() => None,
            None => {
                return Err(DriverError::config(
                    conf.device_key,
                    format!(
                        "VF {} has no netdev in this network namespace and is not bound to a \
                         userspace driver (driver: {}): it is in use outside plexus's records",
                        conf.device,
                        info.driver.as_deref().unwrap_or("none")
                    ),
                ))
            }
        };
        Ok(Vf { info, netdev })
    }

    /// Bind the VF's driver again ([`crate::pci::PciDevice::rebind`]).
    fn rebind(&self, address: PciAddress) -> Result<(), DriverError> {
        self.sysfs
            .pci_device(address)
            .and_then(|dev| dev.rebind())
            .map(drop)
            .map_err(|e| sys_error(format_args!("rebind VF {address}'s driver"), e))
    }

    /// The VF's netdev in the host, waiting (bounded) while the kernel
    /// brings it back from a namespace being destroyed. `None` when the VF
    /// is gone or has no netdev driver any more.
    fn host_netdev(
        &self,
        address: PciAddress,
        host: &Netlink,
        patience: Patience,
    ) -> Result<Option<Link>, DriverError> {
        passthrough::wait_for_netdev(format_args!("VF {address}"), patience, || {
            let vf = match self.sysfs.virtual_function(address) {
                Ok(vf) => vf,
                Err(e) if vanished(&e) => return Ok(Poll::Ready(None)),
                Err(e) => return Err(sys_error(format_args!("VF {address}"), e)),
            };
            Ok(match &vf.netdev {
                Some(name) => match host
                    .link_by_name(name)
                    .map_err(sys(format_args!("look up VF {address}'s netdev {name}")))?
                {
                    Some(link) => Poll::Ready(Some(link)),
                    None => Poll::Pending,
                },
                None if vf.driver.is_none() || vf.has_userspace_driver() => Poll::Ready(None),
                None => Poll::Pending,
            })
        })
    }
}

impl GiveBack for Sriov {
    type Key = PciAddress;
    type Record = Record;

    fn del_keys(&self, req: &Request) -> (Option<PciAddress>, Store) {
        let keys = conf::del_keys(req);
        (keys.device, STORE.open(keys.data_dir.as_deref()))
    }

    /// Sends only the PF-side settings that differ from the saved ones, and
    /// finds the netdev wherever it is.
    fn give_back(
        &self,
        lock: &VfLock,
        record: &Record,
        Return {
            host,
            pod,
            patience,
        }: Return<'_>,
    ) -> Result<(), DriverError> {
        let address = *lock.key();
        if let (Some(name), Some(at)) = (&record.rdma, pod) {
            rdma_device::back_home(name, rdma_device::pod_netdev(at)?, at.pod_ns)?;
        }
        let vf = match self.sysfs.virtual_function(address) {
            Ok(vf) => vf,
            Err(e) if vanished(&e) => return lock.remove_record(),
            Err(e) => return Err(sys_error(format_args!("VF {address}"), e)),
        };
        let pf = self.pf_link(&vf, host)?.ok_or_else(|| {
            sys_error(
                format_args!("give back VF {address}"),
                format_args!("its PF {} has no netdev in this namespace", vf.pf),
            )
        })?;
        let now = host
            .vf_state(pf.index, vf.index)
            .map_err(sys(format_args!("read VF {address} on its PF {}", pf.name)))?;
        let Some(now) = now else {
            return lock.remove_record();
        };
        // The admin MAC goes first: while set, an untrusted VF cannot take
        // its own MAC back.
        let back = record.saved.restoring_changed(&now, &record.applied);
        host.set_vf(pf.index, vf.index, &back)
            .map_err(sys(format_args!("give back VF {address}'s settings")))?;
        if let Found::Netdev { name, mac, mtu } = &record.found {
            // The GUIDs given back take effect only on a new bind; without
            // it the next pod would run with this one's (and its
            // partitions). The pod's netdev goes with the old bind, and
            // comes back in the host.
            if record.applied.sets_ib_guid() && vf.driver.is_some() {
                self.rebind(address)?;
            }
            passthrough::return_netdev(
                format_args!("VF {address}"),
                Netdev::Of(&address.to_string()),
                name,
                *mac,
                *mtu,
                host,
                pod,
                || self.host_netdev(address, host, patience),
            )?;
        }
        lock.remove_record()
    }
}

impl InterfaceDriver for Sriov {
    type Conf = Conf;
    /// DEL gives the VF back instead: `remove` takes it back through
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
        let info = self
            .sysfs
            .virtual_function(conf.device)
            .map_err(|e| device_error(conf, e))?;
        let pf = self.pf_link(&info, at.host)?.ok_or_else(|| {
            DriverError::config(
                conf.device_key,
                format!(
                    "the PF {} of VF {} has no netdev in this network namespace",
                    info.pf, conf.device
                ),
            )
        })?;
        let claim = STORE.open(conf.data_dir.as_deref()).claim(
            conf.device,
            conf.device_key,
            format_args!("VF {}", conf.device),
            || {
                // `info` was read before the lock (a refused device leaves no
                // lock file): a VF that looked taken then may have come home
                // since, with its previous owner's DEL. Read it again.
                let info = if info.netdev.is_none() && !info.has_userspace_driver() {
                    self.sysfs
                        .virtual_function(conf.device)
                        .map_err(|e| device_error(conf, e))?
                } else {
                    info
                };
                self.find(conf, info, at.host)
            },
        )?;
        Ok(Prepared {
            claim,
            settings: conf.pf_settings(pf.infiniband),
            pf,
        })
    }

    fn create<'a>(
        &'a self,
        call: &Call<'a, Conf>,
        prepared: &'a Prepared,
        undo: &mut Undo<'a>,
    ) -> Result<Made, DriverError> {
        let Call { req, conf, at } = *call;
        let host = at.host;
        let vf = prepared.claim.device(self, host, || {
            let info = self
                .sysfs
                .virtual_function(conf.device)
                .map_err(|e| device_error(conf, e))?;
            self.find(conf, info, host)
        })?;
        let (pf, index) = (&prepared.pf, vf.info.index);
        let mut saved = host
            .vf_state(pf.index, index)
            .map_err(sys(format_args!(
                "read VF {} on its PF {}",
                conf.device, pf.name
            )))?
            .ok_or_else(|| {
                sys_error(
                    format_args!("VF {}", conf.device),
                    format_args!("its PF {} does not report VF {index}", pf.name),
                )
            })?;
        if prepared.settings.sets_ib_guid() {
            guid::save_for_give_back(&mut saved, vf.netdev.as_ref());
        } else if let Some(netdev) = vf.netdev.as_ref().filter(|_| pf.infiniband) {
            guid::check_own(netdev).map_err(|why| DriverError::config(conf::RUNTIME_GUID, why))?;
        }
        let found = match &vf.netdev {
            Some(link) => {
                // Without an admin MAC, igb reports the VF's own MAC as its
                // MAC; given back as such it would become an admin MAC that
                // locks the VF's own (netlink::vf docs): there was none.
                if link.mac == Some(saved.mac) {
                    saved.mac = MacAddr([0; 6]);
                }
                Found::Netdev {
                    name: link.name.clone(),
                    mac: link.mac,
                    mtu: link.mtu,
                }
            }
            None => Found::Dpdk,
        };
        let admin_mac = prepared
            .settings
            .mac
            .or(Some(saved.mac).filter(|m| m.0 != [0; 6] && vf.netdev.is_none()));
        let bus_device = conf.device.to_string();
        let rdma_of = |netdev: &Option<Link>| match netdev {
            Some(netdev) => rdma_device::find(
                &self.sysfs,
                Lookup {
                    bus_device: Some(&bus_device),
                    netdev: Some(netdev.index),
                },
            ),
            None => Ok(None),
        };
        let mut rdma = rdma_of(&vf.netdev)?;
        let record = Record {
            owner: Owner::of(req)?,
            netns: at.sandbox.clone(),
            saved,
            applied: prepared.settings.clone(),
            found,
            rdma: rdma.as_ref().and_then(rdma_device::Found::to_move_back),
        };
        let what = format_args!("VF {}", conf.device);
        prepared.claim.take(self, record, what, at, undo)?;

        let apply = || {
            host.set_vf(pf.index, index, &prepared.settings)
                .map_err(sys(format_args!(
                    "VF {}: apply the configured settings through its PF",
                    conf.device
                )))
        };
        let mut netdev = vf.netdev;
        // New InfiniBand GUIDs take effect when the VF's driver binds again,
        // which makes its netdev anew: set them, rebind, then move the
        // netdev the VF has now (ib-sriov-cni's order).
        let rebound = prepared.settings.sets_ib_guid() && netdev.is_some();
        if rebound {
            apply()?;
            self.rebind(conf.device)?;
            netdev = self.host_netdev(conf.device, host, Patience::Wait)?;
            // The bind made the RDMA device anew too (its index, perhaps its
            // name; DEL looks for the name recorded, and a namespace that
            // dies gives its devices back in any case).
            rdma = rdma_of(&netdev)?;
        }
        // The RDMA device first: a software one dies with its netdev's move.
        if let Some(rdma) = &rdma {
            rdma.follow_into_pod(format_args!("VF {}", conf.device), at.pod_ns)?;
        }
        let pod_link = match &netdev {
            Some(netdev) => Some(passthrough::move_into_pod(
                "the VF",
                netdev,
                prepared.settings.mac,
                None,
                at,
            )?),
            None => None,
        };
        if !rebound {
            apply()?;
        }
        let rdma = rdma
            .map(rdma_device::Found::usable_by_pod)
            .transpose()?
            .flatten();
        Ok(Made {
            vf: vf.info,
            pod_link,
            admin_mac,
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
        pod_device::pod_result(
            req,
            conf.dns.as_ref(),
            at,
            made.pod_link,
            made.admin_mac,
            Some(made.vf.address.to_string()),
            ipam,
        )
    }

    fn check(&self, call: &Call<'_, Conf>, prev: &CniResult) -> Result<(), DriverError> {
        let Call { req, conf, at } = *call;
        let lock = STORE.open(conf.data_dir.as_deref()).lock(conf.device)?;
        let record: Record = lock.record_for(req, format_args!("VF {}", conf.device))?;
        if !record.is_dpdk() {
            let vf = format_args!("VF {}", conf.device);
            let netdev = Netdev::Of(&conf.device.to_string());
            passthrough::check_pod_netdev(at, prev, netdev, vf)?;
        }
        let info = self
            .sysfs
            .virtual_function(conf.device)
            .map_err(|e| check_failed(format!("{}: {e}", conf.device_key)))?;
        let pf = self.pf_link(&info, at.host)?.ok_or_else(|| {
            check_failed(format!("the PF {} has no netdev here any more", info.pf))
        })?;
        let now = at
            .host
            .vf_state(pf.index, info.index)
            .map_err(sys(format_args!("read VF {} on its PF", conf.device)))?
            .ok_or_else(|| {
                check_failed(format!(
                    "the PF {} no longer has VF {}",
                    pf.name, conf.device
                ))
            })?;
        check_settings(&conf.pf_settings(pf.infiniband), &now)
    }

    /// device-info-SPEC §3.1.3: the VF, its PF and (switchdev) its
    /// representor.
    fn device_info(&self, _conf: &Conf, made: &Made) -> Option<DeviceInfo> {
        Some(DeviceInfo::pci(PciDevice {
            pci_address: made.vf.address.to_string().into(),
            pf_pci_address: Some(made.vf.pf.to_string().into()),
            representor_device: self.sysfs.vf_representor(&made.vf).map(Into::into),
            rdma_device: made.rdma.clone().map(Into::into),
            ..PciDevice::default()
        }))
    }

    fn hands_over(&self) -> Option<&dyn HandsOver> {
        Some(self)
    }
}

/// CHECK of the PF-side settings: each configured one as the PF reports it.
fn check_settings(want: &VfSettings, now: &VfState) -> Result<(), DriverError> {
    fn differs<T: PartialEq + std::fmt::Debug>(
        key: &str,
        want: Option<T>,
        have: T,
    ) -> Result<(), DriverError> {
        match want {
            Some(w) if w != have => Err(mismatch(
                key,
                format!("the VF has {have:?}, the configuration says {w:?}"),
            )),
            _ => Ok(()),
        }
    }
    differs("mac", want.mac, now.mac)?;
    differs("vlan", want.vlan.map(|v| v.id), now.vlan.id)?;
    differs("vlanQoS", want.vlan.map(|v| v.qos), now.vlan.qos)?;
    differs("vlanProto", want.vlan.map(|v| v.proto), now.vlan.proto)?;
    differs("spoofchk", want.spoofchk, now.spoofchk)?;
    differs("trust", want.trust, now.trust)?;
    differs("link_state", want.link_state.map(Some), now.link_state)?;
    differs("min_tx_rate", want.min_tx_rate, now.min_tx_rate)?;
    differs("max_tx_rate", want.max_tx_rate, now.max_tx_rate)?;
    let guid = "runtimeConfig.infinibandGUID";
    differs(guid, want.ib_node_guid.map(Some), now.ib_node_guid)?;
    differs(guid, want.ib_port_guid.map(Some), now.ib_port_guid)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::{Guid, VfLinkState, VfVlan, VlanProto};

    #[test]
    fn check_names_the_key_of_a_setting_that_differs() {
        let now = VfState {
            vf: 0,
            mac: "02:00:00:00:00:01".parse().unwrap(),
            vlan: VfVlan::tagged(10, 2, VlanProto::Dot1Q),
            spoofchk: true,
            trust: false,
            link_state: Some(VfLinkState::Auto),
            min_tx_rate: 0,
            max_tx_rate: 100,
            ib_node_guid: None,
            ib_port_guid: None,
        };
        let matching = VfSettings {
            mac: Some(now.mac),
            vlan: Some(now.vlan),
            spoofchk: Some(true),
            trust: Some(false),
            link_state: Some(VfLinkState::Auto),
            min_tx_rate: Some(0),
            max_tx_rate: Some(100),
            ..VfSettings::default()
        };
        check_settings(&matching, &now).unwrap();
        check_settings(&VfSettings::default(), &now).unwrap();
        let cases = [
            (
                "mac",
                VfSettings {
                    mac: Some("02:00:00:00:00:02".parse().unwrap()),
                    ..matching.clone()
                },
            ),
            (
                "vlan",
                VfSettings {
                    vlan: Some(VfVlan { id: 11, ..now.vlan }),
                    ..matching.clone()
                },
            ),
            (
                "vlanQoS",
                VfSettings {
                    vlan: Some(VfVlan { qos: 3, ..now.vlan }),
                    ..matching.clone()
                },
            ),
            (
                "vlanProto",
                VfSettings {
                    vlan: Some(VfVlan {
                        proto: VlanProto::Dot1Ad,
                        ..now.vlan
                    }),
                    ..matching.clone()
                },
            ),
            (
                "spoofchk",
                VfSettings {
                    spoofchk: Some(false),
                    ..matching.clone()
                },
            ),
            (
                "trust",
                VfSettings {
                    trust: Some(true),
                    ..matching.clone()
                },
            ),
            (
                "link_state",
                VfSettings {
                    link_state: Some(VfLinkState::Enable),
                    ..matching.clone()
                },
            ),
            (
                "min_tx_rate",
                VfSettings {
                    min_tx_rate: Some(10),
                    ..matching.clone()
                },
            ),
            (
                "max_tx_rate",
                VfSettings {
                    max_tx_rate: Some(0),
                    ..matching.clone()
                },
            ),
            (
                "runtimeConfig.infinibandGUID",
                VfSettings {
                    ib_port_guid: Some(Guid(1)),
                    ..matching.clone()
                },
            ),
        ];
        for (key, want) in cases {
            let e = check_settings(&want, &now).unwrap_err();
            assert!(
                matches!(&e, DriverError::Mismatch { what, reason }
                    if what == key && reason.starts_with("the VF has ")),
                "{key}: {e:?}"
            );
        }
    }
}
