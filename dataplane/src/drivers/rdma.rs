//! The chained `rdma` plugin: rdma-cni (k8snetworkplumbingwg/rdma-cni,
//! `cmd/rdma/main.go`) built in. After the plugin that attached a device's
//! netdev (`sriov`, `host-device`), it moves the device's RDMA device into
//! the pod's namespace, and back at DEL.
//!
//! Keys: rdma-cni's `deviceID` (a PCI address or an auxiliary device, as
//! Multus and plexus set it in every plugin of a chain from the network's
//! `resourceName`; `runtimeConfig.deviceID` when it is not there), and
//! plexus's `dataDir` (device locks and records, default
//! [`DEFAULT_DATA_DIR`]). rdma-cni's `args.cni.debug` is read and ignored.
//!
//! - ADD needs `prevResult` (a chained plugin) and returns it unchanged.
//!   The RDMA device is the first of the bus device's `infiniband/`
//!   directory (rdma-cni's `getRDMADevice`). In exclusive mode it is locked
//!   and recorded for the attachment (a device another live pod holds is
//!   refused, code 11, naming the pod), then moved; a failed ADD moves it
//!   back. In shared mode nothing moves, and the first time says so once.
//!   A device the chain's first plugin moved with its netdev (plexus's
//!   `sriov` and `host-device` do in exclusive mode) is found in the pod,
//!   on one of the prevResult's interfaces, and left to that plugin.
//! - DEL moves the recorded device back from the pod's namespace when it
//!   still exists (a dead namespace gave it back to the initial one) and
//!   removes the record; again, or with no record, it does nothing.
//! - CHECK: the recorded device is in the pod's namespace (rdma-cni checks
//!   nothing).
//!
//! Differences from rdma-cni, deliberate: in shared mode ADD succeeds doing
//! nothing (rdma-cni refuses: every namespace already sees the device); a
//! missing `deviceID` is refused (rdma-cni guesses the VF from the
//! prevResult's MAC); several RDMA devices of one bus device: the first by
//! name (rdma-cni refuses).

use std::path::PathBuf;

use plexus_cni::error::CniError;
use plexus_cni::names::{IfName, NetnsPath};
use plexus_cni::result::CniResult;
use plexus_cni::skel::{Request, TypedPlugin, ValidAttachment};
use serde::{Deserialize, Serialize};

use super::attachment::{chained_prev_result, Attach};
use super::error::{check_failed, sys, DriverError};
use super::netconf;
use super::ownership::{DeviceLock, GiveBack, HandsOver, Owned, Owner, Return, Store, StoreAt};
use super::passthrough::Patience;
use super::rdma_device::{self, Lookup};
use super::undo::Undo;
use crate::netlink::Netlink;
use crate::pci::SysfsRoot;
use crate::session::Session;

/// Where the plugin keeps device locks and records unless `dataDir` says.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/plexus/rdma";

const STORE: StoreAt = StoreAt::new(DEFAULT_DATA_DIR, "RDMA device");

const PLUGIN: &str = "rdma";
const DEVICE_ID: &str = "deviceID";
const RUNTIME_DEVICE_ID: &str = "runtimeConfig.deviceID";

/// The chained `rdma` plugin; reads sysfs below `sysfs`.
pub struct Rdma<'s> {
    session: &'s Session,
    sysfs: SysfsRoot,
}

impl<'s> Rdma<'s> {
    pub fn new(session: &'s Session) -> Self {
        Rdma {
            session,
            sysfs: SysfsRoot::default(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
struct RawConf {
    #[serde(rename = "deviceID")]
    device_id: Option<String>,
    #[serde(rename = "dataDir")]
    data_dir: Option<String>,
}

/// A validated configuration.
#[derive(Debug)]
struct Conf {
    /// The bus device, and the key that named it.
    device_id: Option<(&'static str, String)>,
    data_dir: Option<PathBuf>,
}

fn parse(req: &Request) -> Result<Conf, DriverError> {
    let c: RawConf = netconf::decode_config(req)?;
    let named = match c.device_id.filter(|d| !d.is_empty()) {
        Some(id) => Some((DEVICE_ID, id)),
        None => netconf::runtime_string(req, "deviceID", RUNTIME_DEVICE_ID)?
            .map(|id| (RUNTIME_DEVICE_ID, id.to_string())),
    };
    let device_id = named
        .map(|(key, id)| netconf::bus_device_name(key, &id).map(|id| (key, id)))
        .transpose()?;
    Ok(Conf {
        device_id,
        data_dir: c.data_dir.filter(|d| !d.is_empty()).map(PathBuf::from),
    })
}

/// An RDMA device's owner; the record's key is the device's name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    owner: Owner,
    /// The owner's `CNI_NETNS`.
    netns: NetnsPath,
    /// The bus device it belongs to.
    device_id: String,
}

impl Owned for Record {
    fn owner(&self) -> &Owner {
        &self.owner
    }
    fn netns(&self) -> &NetnsPath {
        &self.netns
    }
}

impl GiveBack for Rdma<'_> {
    type Key = String;
    type Record = Record;

    fn give_back(
        &self,
        lock: &DeviceLock<String>,
        _record: &Record,
        to: Return<'_>,
    ) -> Result<(), DriverError> {
        if let Some(at) = to.pod {
            // The netdev is another plugin's: the recorded name alone.
            rdma_device::back_home(lock.key(), None, at.pod_ns)?;
        }
        lock.remove_record()
    }

    fn del_keys(&self, req: &Request) -> (Option<String>, Store) {
        let dir = parse(req).ok().and_then(|c| c.data_dir);
        (None, STORE.open(dir.as_deref()))
    }
}

/// The RDMA device, if any, whose port's netdev is one of the pod's
/// interfaces of `prev`: there already when the chain's first plugin moved
/// it with its netdev.
fn moved_with_its_netdev(at: &Attach<'_>, prev: &CniResult) -> Result<Option<String>, DriverError> {
    let in_pod = prev
        .interfaces
        .iter()
        .filter(|i| i.sandbox.as_deref().is_some_and(|s| !s.is_empty()));
    for interface in in_pod {
        let Ok(name) = IfName::new(&interface.name) else {
            continue;
        };
        let Some(link) = at
            .pod
            .link_by_name(&name)
            .map_err(sys(format_args!("look up {name} in the pod")))?
        else {
            continue;
        };
        if let Some(device) = rdma_device::in_pod(at.pod_ns, |r| r.device_of_netdev(link.index))? {
            return Ok(Some(device.name));
        }
    }
    Ok(None)
}

impl Rdma<'_> {
    fn host(&self) -> Result<&Netlink, DriverError> {
        self.session
            .host()
            .map_err(sys("netlink in the host namespace"))
    }
}

impl TypedPlugin for Rdma<'_> {
    type Error = DriverError;

    fn validate(&self, req: &Request) -> Result<(), DriverError> {
        parse(req).map(drop)
    }

    fn add(&self, req: &Request) -> Result<CniResult, DriverError> {
        let conf = parse(req)?;
        let prev = chained_prev_result(req, PLUGIN)?;
        let at = Attach::open(self.session, req)?;
        let (key, id) = conf.device_id.as_ref().ok_or_else(|| {
            DriverError::config(
                DEVICE_ID,
                "missing: the rdma plugin moves the RDMA device of the PCI or auxiliary \
                 device deviceID names (Multus and plexus set it from the network's \
                 resourceName)",
            )
        })?;
        if !rdma_device::bus_device_exists(&self.sysfs, id) {
            return Err(DriverError::config(
                *key,
                format!("{id} not found under /sys/bus/pci/devices or /sys/bus/auxiliary/devices"),
            ));
        }
        let lookup = Lookup {
            bus_device: Some(id),
            netdev: None,
        };
        let Some(found) = rdma_device::find(&self.sysfs, lookup)? else {
            // rdma-cni's own chain, `sriov` then `rdma`: plexus's `sriov`
            // (and `host-device`) moved the RDMA device with its netdev in
            // exclusive mode, and their DEL brings it back.
            if let Some(name) = moved_with_its_netdev(&at, prev)? {
                req.call_log().info(format_args!(
                    "RDMA device {name} of {id} is in the pod already, moved with its netdev"
                ));
                return Ok(prev.clone());
            }
            return Err(DriverError::config(
                *key,
                format!("{id} has no RDMA device in the node's namespace"),
            ));
        };
        let Some(name) = found.to_move_back() else {
            // Shared mode: said once, nothing to undo or give back.
            found.follow_into_pod(id, at.pod_ns)?;
            return Ok(prev.clone());
        };
        let store = STORE.open(conf.data_dir.as_deref());
        let what = format!("RDMA device {name} of {id}");
        let claim = store.claim::<String, (), Record>(name, key, &what, || Ok(()))?;
        let mut undo = Undo::default();
        let moved = (|| {
            claim.device(self, at.host, || Ok(()))?;
            let record = Record {
                owner: Owner::of(req)?,
                netns: at.sandbox.clone(),
                device_id: id.clone(),
            };
            claim.take(self, record, &what, &at, &mut undo)?;
            found.follow_into_pod(id, at.pod_ns)
        })();
        undo.finish(moved)?;
        Ok(prev.clone())
    }

    fn del(&self, req: &Request) -> Result<(), DriverError> {
        let at = Attach::open_for_del(self.session, req)?;
        let host = self.host()?;
        self.take_back(req, Return::from(host, at.as_ref()))?;
        // Another attachment's leftovers never fail this DEL.
        if let Err(e) = self.take_back_orphans(req, host, Patience::OneLook) {
            req.call_log().warn(CniError::from(e));
        }
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<(), DriverError> {
        let conf = parse(req)?;
        chained_prev_result(req, PLUGIN)?;
        let at = Attach::open(self.session, req)?;
        let store = STORE.open(conf.data_dir.as_deref());
        let Some(name) = store.find_owned_by::<String, Record>(&Owner::of(req)?)? else {
            // Shared mode, or nothing moved: nothing to check.
            return Ok(());
        };
        if rdma_device::in_pod(at.pod_ns, |r| r.device(&name))?.is_none() {
            return Err(check_failed(format!(
                "RDMA device {name} is not in the container's namespace"
            )));
        }
        Ok(())
    }

    fn gc(&self, req: &Request, _valid: &[ValidAttachment]) -> Result<(), DriverError> {
        let (_, store) = self.del_keys(req);
        self.give_back_orphans(&store, self.host()?, Patience::Wait)
    }
}
