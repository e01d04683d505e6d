//! Who holds a device handed whole to one pod (an SR-IOV VF, a vDPA
//! device). Kubelet may run a new pod's ADD for a device before the old
//! pod's DEL (sriov-cni #219/#313), so each device has, in its driver's data
//! directory:
//!
//! - `<key>.lock`: `flock`ed for a whole ADD, CHECK or DEL of the device;
//! - `<key>.json`: the driver's record ([`Owned`]), written (durably) before
//!   an ADD changes anything and removed once a DEL gave everything back. It
//!   names the owner, so a late DEL of another attachment leaves the device
//!   alone, and holds what to give back, so an ADD can give back a device
//!   whose owner's namespace is gone without its DEL ever coming.
//!
//! A record is read and written only through the [`DeviceLock`] of its
//! device.
//!
//! The steps every such driver takes, whatever the device ([`GiveBack`]
//! says how to give one back): [`Store::claim`] in `prepare`,
//! [`Claim::device`] and [`Claim::take`] in `create`,
//! [`DeviceLock::record_for`] in CHECK; DEL and the orphan sweep after it
//! and in GC are [`HandsOver`]'s, the same for every such driver.
//!
//! A device whose owner's DEL never comes (a runtime that lost it, a node
//! that crashed) stays as the pod left it, its VLAN, trust and MAC on the
//! PF, only until the next of: an ADD for that device, any DEL of the
//! driver, a GC. Each gives back the devices whose owner's namespace is
//! gone.

use crate::drivers::error::{check_failed, sys_error, DriverError};
use std::fmt::Display;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use nix::fcntl::Flock;
use plexus_cni::flock::{lock_file, LockFileError};
use plexus_cni::names::{ContainerId, IfName, NetnsPath};
use plexus_cni::skel::Request;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::attachment::Attach;
use super::passthrough::Patience;
use super::undo::Undo;
use crate::netlink::Netlink;
use crate::netns::NetNs;

/// How long an ADD, CHECK or DEL waits for another one on the same device;
/// a DEL may wait up to [`super::passthrough::NETDEV_RETURN_TIMEOUT`] for
/// the device's netdev.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// Records are small; a larger file is not one of ours.
const MAX_RECORD: u64 = 64 * 1024;

/// At most this many records are read when looking for an attachment's
/// device (a node has a few hundred VFs at most).
const MAX_RECORDS_SCANNED: usize = 4096;

/// The attachment holding a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Owner {
    /// Checked as a record is read, as every name is.
    pub container_id: ContainerId,
    pub ifname: IfName,
}

impl Owner {
    /// The attachment of `req`.
    pub fn of(req: &Request) -> Result<Owner, DriverError> {
        let params = req.env.require_attachment()?;
        Ok(Owner {
            container_id: params.container_id.clone(),
            ifname: params.ifname.clone(),
        })
    }
}

/// A driver's record of one device: whose it is, in which namespace.
pub(crate) trait Owned: Serialize + DeserializeOwned {
    fn owner(&self) -> &Owner;
    /// The owner's `CNI_NETNS`.
    fn netns(&self) -> &NetnsPath;
}

/// How a driver names its devices in lock and record file names: a PCI
/// address, a vDPA device name (never a path: `/` and `.`-only names are
/// refused by the parser).
pub(crate) trait DeviceKey: Clone + Display + FromStr {}

impl<K: Clone + Display + FromStr> DeviceKey for K {}

/// Whether the namespace at `path` still exists.
fn namespace_exists(path: &NetnsPath) -> Result<bool, DriverError> {
    // Whether it is the node's own does not matter here: no stat to tell,
    // as the sweep after every DEL asks this of every record.
    match NetNs::open_existing(path.as_path()) {
        Ok(ns) => Ok(ns.is_some()),
        Err(e) => Err(sys_error(
            format_args!("open the device owner's namespace {path}"),
            e,
        )),
    }
}

/// The refusal of an ADD for a device whose owner's namespace still exists
/// (code 11: the owner's DEL may be on its way).
fn in_use(key: &str, what: impl Display, record: &impl Owned) -> DriverError {
    let Owner {
        container_id,
        ifname,
    } = record.owner();
    DriverError::DeviceInUse {
        key: key.to_string(),
        device: what.to_string(),
        container_id: container_id.clone(),
        ifname: ifname.clone(),
        netns: record.netns().clone(),
    }
}

/// Where a device goes back: to the node (`host`, its netlink handle), from
/// the owner's attachment while its namespace exists (`pod`); without it,
/// `patience` says how long to wait for a netdev the kernel is bringing
/// back.
#[derive(Clone, Copy)]
pub(crate) struct Return<'a> {
    pub host: &'a Netlink,
    pub pod: Option<&'a Attach<'a>>,
    pub patience: Patience,
}

impl<'a> Return<'a> {
    /// From `pod` when its namespace exists; else waiting for the netdev as
    /// long as a DEL may ([`Patience::Wait`]).
    pub fn from(host: &'a Netlink, pod: Option<&'a Attach<'a>>) -> Return<'a> {
        Return {
            host,
            pod,
            patience: Patience::Wait,
        }
    }

    /// From a namespace that is gone (or never was), waiting as `patience`
    /// says.
    pub fn without_pod(host: &'a Netlink, patience: Patience) -> Return<'a> {
        Return {
            host,
            pod: None,
            patience,
        }
    }
}

/// A driver that hands devices whole to pods: how it gives one back.
pub(crate) trait GiveBack {
    /// How its devices are named in lock and record files.
    type Key: DeviceKey;
    /// Its record of a device.
    type Record: Owned;

    /// Give the device of `record` back as it was before its owner's ADD,
    /// then remove the record. Must work from any point of a half-done ADD.
    fn give_back(
        &self,
        lock: &DeviceLock<Self::Key>,
        record: &Self::Record,
        to: Return<'_>,
    ) -> Result<(), DriverError>;

    /// What DEL reads of `req`'s configuration (leniently: a DEL must work
    /// for one ADD refused): the device, when it names one (its record is
    /// read first; the others only when that is not the attachment's), and
    /// the store its `dataDir` says.
    fn del_keys(&self, req: &Request) -> (Option<Self::Key>, Store);

    /// Give back every device of `store` whose owner's namespace is gone:
    /// its DEL never came. A device whose lock is held is skipped (the ADD,
    /// CHECK or DEL holding it decides), as is a record that cannot be read
    /// (its owner's DEL reports it). One orphan that cannot be given back
    /// does not stop the others; their failures come back as one error.
    /// `patience`: how long to wait for each orphan's netdev.
    fn give_back_orphans(
        &self,
        store: &Store,
        host: &Netlink,
        patience: Patience,
    ) -> Result<(), DriverError> {
        let orphaned = |record: &Self::Record| -> Result<bool, DriverError> {
            namespace_exists(record.netns()).map(|exists| !exists)
        };
        let give_back = |key: Self::Key, record: &Self::Record| -> Result<(), DriverError> {
            // Unlocked first, so a sweep locks only orphans.
            if !orphaned(record)? {
                return Ok(());
            }
            let Some(lock) = store.try_lock(key)? else {
                return Ok(());
            };
            // Again under the lock: given back or taken anew meanwhile.
            match lock.read_record::<Self::Record>()? {
                Some(now) if now.owner() == record.owner() && orphaned(&now)? => {
                    self.give_back(&lock, &now, Return::without_pod(host, patience))
                }
                _ => Ok(()),
            }
        };
        let failed: Vec<DriverError> = store
            .records::<Self::Key, Self::Record>()?
            .filter_map(|(key, record)| {
                let device = format!("{} {key}", store.noun);
                give_back(key, &record).err().map(|e| DriverError::Orphan {
                    device,
                    container_id: record.owner().container_id.clone(),
                    error: Box::new(e),
                })
            })
            .collect();
        DriverError::all("giving back orphaned devices", failed)
    }
}

/// The DEL side of a driver that hands devices whole to pods, as
/// [`InterfaceDriver::hands_over`](super::interface::InterfaceDriver::hands_over)
/// gives it: one implementation, for every [`GiveBack`].
pub(crate) trait HandsOver {
    /// DEL: give back the device `req`'s attachment holds: the one the
    /// configuration names or found by its record. Nothing when none is
    /// this attachment's (never taken, given back already, or given to
    /// another pod since: a late DEL).
    fn take_back(&self, req: &Request, to: Return<'_>) -> Result<(), DriverError>;

    /// After DEL and in GC: [`GiveBack::give_back_orphans`] in the store of
    /// `req`'s configuration.
    fn take_back_orphans(
        &self,
        req: &Request,
        host: &Netlink,
        patience: Patience,
    ) -> Result<(), DriverError>;
}

impl<D: GiveBack> HandsOver for D {
    fn take_back(&self, req: &Request, to: Return<'_>) -> Result<(), DriverError> {
        let (named, store) = self.del_keys(req);
        match store.owned_by::<D::Key, D::Record>(named, &Owner::of(req)?)? {
            Some((lock, record)) => self.give_back(&lock, &record, to),
            None => Ok(()),
        }
    }

    fn take_back_orphans(
        &self,
        req: &Request,
        host: &Netlink,
        patience: Patience,
    ) -> Result<(), DriverError> {
        let (_, store) = self.del_keys(req);
        self.give_back_orphans(&store, host, patience)
    }
}

/// Where an ADD starts from.
#[derive(Debug)]
enum Start<F, R> {
    /// No record: the device as `prepare` found it.
    Free(F),
    /// The record of an owner whose namespace is gone: given back first.
    Stale(R),
}

/// What `prepare` claims: the device's lock, held until the ADD (and its
/// undoing) is over, and where the ADD starts from. `F` is the device as a
/// driver finds it free, `R` its record.
#[derive(Debug)]
pub(crate) struct Claim<K, F, R> {
    lock: DeviceLock<K>,
    start: Start<F, R>,
}

impl<K: DeviceKey, F: Clone, R: Owned> Claim<K, F, R> {
    pub fn key(&self) -> &K {
        self.lock.key()
    }

    /// `create`'s first step: the device as `prepare` found it free, or,
    /// after giving back what an owner whose namespace is gone left, as
    /// `find` finds it now.
    pub fn device<D: GiveBack<Key = K, Record = R>>(
        &self,
        driver: &D,
        host: &Netlink,
        find: impl FnOnce() -> Result<F, DriverError>,
    ) -> Result<F, DriverError> {
        match &self.start {
            Start::Free(found) => Ok(found.clone()),
            Start::Stale(record) => {
                driver.give_back(
                    &self.lock,
                    record,
                    Return::without_pod(host, Patience::Wait),
                )?;
                find()
            }
        }
    }

    /// Take the device for `record`'s owner: write the record (durably,
    /// before anything changes) and register in `undo` the give-back of
    /// `what` ("VF 0000:01:10.2").
    pub fn take<'a, D: GiveBack<Key = K, Record = R>>(
        &'a self,
        driver: &'a D,
        record: R,
        what: impl Display,
        at: &'a Attach<'a>,
        undo: &mut Undo<'a>,
    ) -> Result<(), DriverError> {
        self.lock.write_record(&record)?;
        undo.push(format!("taking {what}"), move || {
            driver.give_back(&self.lock, &record, Return::from(at.host, Some(at)))
        });
        Ok(())
    }
}

/// What DEL reads of a configuration, leniently (a DEL must work for a
/// configuration ADD refused; what cannot be read is `None`): the device,
/// when the configuration names it, and `dataDir`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct DelKeys<K> {
    pub device: Option<K>,
    pub data_dir: Option<PathBuf>,
}

impl<K> Default for DelKeys<K> {
    fn default() -> Self {
        DelKeys {
            device: None,
            data_dir: None,
        }
    }
}

impl<K> DelKeys<K> {
    /// The device: the first of `device` (the values of the keys that may
    /// name it, in precedence order) that is a non-empty string, as `parse`
    /// reads it; the data directory: `data_dir` when a non-empty string.
    pub fn read(
        device: &[Option<&Value>],
        data_dir: Option<&Value>,
        parse: impl FnOnce(&str) -> Option<K>,
    ) -> DelKeys<K> {
        fn text(v: Option<&Value>) -> Option<&str> {
            v.and_then(Value::as_str).filter(|s| !s.is_empty())
        }
        DelKeys {
            device: device.iter().find_map(|v| text(*v)).and_then(parse),
            data_dir: text(data_dir).map(PathBuf::from),
        }
    }
}

/// Where one driver keeps its device locks and records: `default_dir`,
/// unless a configuration's `dataDir` says otherwise.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StoreAt {
    default_dir: &'static str,
    noun: &'static str,
}

impl StoreAt {
    /// `noun`: what a device is called in messages ("VF").
    pub const fn new(default_dir: &'static str, noun: &'static str) -> StoreAt {
        StoreAt { default_dir, noun }
    }

    /// The store of a configuration whose `dataDir` is `configured`.
    pub fn open(&self, configured: Option<&Path>) -> Store {
        let dir = configured.unwrap_or(Path::new(self.default_dir));
        Store::new(dir.to_path_buf(), self.noun)
    }
}

/// The data directory of one driver's device locks and records.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    dir: PathBuf,
    /// What a device is called in messages ("VF", "vDPA device").
    noun: &'static str,
}

impl Store {
    pub fn new(dir: PathBuf, noun: &'static str) -> Store {
        Store { dir, noun }
    }

    fn record_path(&self, key: &impl Display) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// Take the device's lock, waiting at most [`LOCK_TIMEOUT`] (code 11
    /// after that). Creates the directory.
    pub fn lock<K: DeviceKey>(&self, key: K) -> Result<DeviceLock<K>, DriverError> {
        self.lock_within(key, LOCK_TIMEOUT)
    }

    /// The device's lock if no one holds it now.
    fn try_lock<K: DeviceKey>(&self, key: K) -> Result<Option<DeviceLock<K>>, DriverError> {
        match self.lock_within(key, Duration::ZERO) {
            Ok(lock) => Ok(Some(lock)),
            Err(DriverError::Lock(LockFileError::Busy { .. })) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn lock_within<K: DeviceKey>(
        &self,
        key: K,
        timeout: Duration,
    ) -> Result<DeviceLock<K>, DriverError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|e| DriverError::io(&self.dir, e))?;
        let path = self.dir.join(format!("{key}.lock"));
        let flock = lock_file(
            &path,
            timeout,
            &format!("{} busy: another ADD, CHECK or DEL holds it", self.noun),
        )?;
        Ok(DeviceLock {
            store: self.clone(),
            key,
            _flock: flock,
        })
    }

    /// `prepare`'s ownership step for device `key` (`what` in messages,
    /// `conf_key` the configuration key naming it): lock it and read its
    /// record. Without one the device is free, as `find` finds it; an owner
    /// whose namespace still exists is refused ([`in_use`], code 11); one
    /// whose namespace is gone leaves a device for `create` to give back
    /// first ([`Claim::device`]).
    pub fn claim<K: DeviceKey, F, R: Owned>(
        &self,
        key: K,
        conf_key: &str,
        what: impl Display,
        find: impl FnOnce() -> Result<F, DriverError>,
    ) -> Result<Claim<K, F, R>, DriverError> {
        let lock = self.lock(key)?;
        let start = match lock.read_record::<R>()? {
            None => Start::Free(find()?),
            Some(record) if namespace_exists(record.netns())? => {
                return Err(in_use(conf_key, what, &record));
            }
            Some(record) => Start::Stale(record),
        };
        Ok(Claim { lock, start })
    }

    /// The device whose record names `owner`, if any: for a DEL whose
    /// configuration does not say (records are replaced whole, so reading
    /// one without its lock is safe; the caller locks and reads it again).
    pub fn find_owned_by<K: DeviceKey, R: Owned>(
        &self,
        owner: &Owner,
    ) -> Result<Option<K>, DriverError> {
        Ok(self
            .find_record::<K, R>(|_, record| record.owner() == owner)?
            .map(|(key, _)| key))
    }

    /// The first record `matches` takes, read without its lock as
    /// [`Store::find_owned_by`] reads them (the caller locks and reads it
    /// again): for an ADD whose device is not where its configuration says,
    /// which record holds it.
    pub fn find_record<K: DeviceKey, R: Owned>(
        &self,
        matches: impl Fn(&K, &R) -> bool,
    ) -> Result<Option<(K, R)>, DriverError> {
        Ok(self.records::<K, R>()?.find(|(key, r)| matches(key, r)))
    }

    /// The store's records, read without their locks (records are replaced
    /// whole), at most [`MAX_RECORDS_SCANNED`] files; one that cannot be
    /// read is left out.
    fn records<K: DeviceKey, R: Owned>(
        &self,
    ) -> Result<impl Iterator<Item = (K, R)> + '_, DriverError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => Some(entries),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(DriverError::io(&self.dir, e)),
        };
        Ok(entries
            .into_iter()
            .flatten()
            .take(MAX_RECORDS_SCANNED)
            .filter_map(|entry| {
                let key = entry
                    .ok()?
                    .file_name()
                    .to_str()?
                    .strip_suffix(".json")?
                    .parse::<K>()
                    .ok()?;
                let record = read_record::<R>(&self.record_path(&key), self.noun).ok()??;
                Some((key, record))
            }))
    }
}

impl Store {
    /// For DEL: the device `owner` holds, locked, with its record: the one
    /// `named` (what the configuration names: tried first, one record read
    /// instead of all) or else found by its record. `None` when nothing is
    /// this attachment's: never taken, given back already, or (a late DEL)
    /// given to another pod since.
    pub fn owned_by<K: DeviceKey, R: Owned>(
        &self,
        named: Option<K>,
        owner: &Owner,
    ) -> Result<Option<(DeviceLock<K>, R)>, DriverError> {
        if let Some(key) = named {
            if let Some(found) = self.locked_if_owned(key, owner)? {
                return Ok(Some(found));
            }
        }
        match self.find_owned_by::<K, R>(owner)? {
            Some(key) => self.locked_if_owned(key, owner),
            None => Ok(None),
        }
    }

    /// Device `key`, locked, with its record when that is `owner`'s.
    fn locked_if_owned<K: DeviceKey, R: Owned>(
        &self,
        key: K,
        owner: &Owner,
    ) -> Result<Option<(DeviceLock<K>, R)>, DriverError> {
        // No record, nothing to give back, and no lock file made for it: a
        // DEL naming a device plexus never had (a bogus `deviceID`) would
        // leave one per name. Unlocked is safe: only this owner's ADD
        // writes a record naming it, before it changes anything, and the
        // runtime never runs a container's ADD beside its DEL (cni-SPEC §3,
        // "Lifecycle & Ordering").
        match fs::symlink_metadata(self.record_path(&key)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            _ => {}
        }
        let lock = self.lock(key)?;
        Ok(match lock.read_record::<R>()? {
            Some(record) if record.owner() == owner => Some((lock, record)),
            _ => None,
        })
    }
}

/// A device's lock, held until dropped; the only way to its record.
#[derive(Debug)]
pub(crate) struct DeviceLock<K> {
    store: Store,
    key: K,
    _flock: Flock<File>,
}

impl<K: DeviceKey> DeviceLock<K> {
    pub fn key(&self) -> &K {
        &self.key
    }

    pub fn read_record<R: Owned>(&self) -> Result<Option<R>, DriverError> {
        read_record(&self.store.record_path(&self.key), self.store.noun)
    }

    /// CHECK: the record that gives the device (`what` in messages) to
    /// `req`'s attachment; none is a failed CHECK.
    pub fn record_for<R: Owned>(
        &self,
        req: &Request,
        what: impl Display,
    ) -> Result<R, DriverError> {
        let owner = Owner::of(req)?;
        self.read_record::<R>()?
            .filter(|r| *r.owner() == owner)
            .ok_or_else(|| {
                check_failed(format!(
                    "{what}: no record gives it to container {} as {}",
                    owner.container_id, owner.ifname
                ))
            })
    }

    /// Write the record durably: it must outlive a crash or reboot, which
    /// leave the device as the record says until a DEL or the next ADD gives
    /// it back.
    pub fn write_record(&self, record: &impl Owned) -> Result<(), DriverError> {
        let path = self.store.record_path(&self.key);
        let bytes = serde_json::to_vec_pretty(record).map_err(|e| DriverError::io(&path, e))?;
        plexus_cni::whole_file::replace_durably(&path, &bytes)
            .map_err(|e| DriverError::io(&path, e))
    }

    /// Remove the record (none is fine). Not synced: a record that comes
    /// back after a power loss names a namespace that is gone, and the next
    /// ADD gives the device back once more, which changes nothing.
    pub fn remove_record(&self) -> Result<(), DriverError> {
        let path = self.store.record_path(&self.key);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(DriverError::io(&path, e)),
        }
    }
}

fn read_record<R: Owned>(path: &Path, noun: &str) -> Result<Option<R>, DriverError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(DriverError::io(path, e)),
    };
    // Room for a whole record: one read, not an empty buffer's growing ones
    // (the sweep after every DEL reads every record).
    let mut bytes = Vec::with_capacity(1024);
    file.take(MAX_RECORD + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| DriverError::io(path, e))?;
    if bytes.len() as u64 > MAX_RECORD {
        return Err(DriverError::io(
            path,
            format_args!("too large to be a {noun} record"),
        ));
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| DriverError::BadRecord {
            path: path.display().to_string(),
            reason: format!("not a {noun} record: {e}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pci::PciAddress;

    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    struct Rec {
        owner: Owner,
        netns: NetnsPath,
        note: String,
    }

    impl Owned for Rec {
        fn owner(&self) -> &Owner {
            &self.owner
        }
        fn netns(&self) -> &NetnsPath {
            &self.netns
        }
    }

    fn netns(path: impl AsRef<Path>) -> NetnsPath {
        NetnsPath::new(path.as_ref().to_str().unwrap()).unwrap()
    }

    fn record(container_id: &str) -> Rec {
        Rec {
            owner: Owner {
                container_id: ContainerId::new(container_id).unwrap(),
                ifname: IfName::new("net1").unwrap(),
            },
            netns: netns("/var/run/netns/pod"),
            note: "what to give back".into(),
        }
    }

    fn vf(s: &str) -> PciAddress {
        s.parse().unwrap()
    }

    #[test]
    fn a_record_round_trips_under_its_lock_and_is_found_by_owner() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("sriov"), "VF");
        let lock = store.lock(vf("0000:01:10.2")).unwrap();
        assert_eq!(lock.read_record::<Rec>().unwrap(), None);
        let r = record("ctr1");
        lock.write_record(&r).unwrap();
        assert_eq!(lock.read_record().unwrap(), Some(r.clone()));
        let text = fs::read_to_string(dir.path().join("sriov/0000:01:10.2.json")).unwrap();
        assert!(text.contains(r#""note": "what to give back""#), "{text}");

        let found = store.find_owned_by::<PciAddress, Rec>(&r.owner).unwrap();
        assert_eq!(found, Some(vf("0000:01:10.2")));
        let stranger = Owner {
            container_id: ContainerId::new("ctr2").unwrap(),
            ifname: IfName::new("net1").unwrap(),
        };
        let found = store.find_owned_by::<PciAddress, Rec>(&stranger).unwrap();
        assert_eq!(found, None);
        lock.remove_record().unwrap();
        lock.remove_record().unwrap();
        assert_eq!(lock.read_record::<Rec>().unwrap(), None);
        let found = store.find_owned_by::<PciAddress, Rec>(&r.owner).unwrap();
        assert_eq!(found, None);
        let empty = Store::new(dir.path().join("none"), "VF");
        let found = empty.find_owned_by::<PciAddress, Rec>(&r.owner).unwrap();
        assert_eq!(found, None);
        // Keys of another kind (vDPA device names) in a store of their own.
        let names = Store::new(dir.path().join("vdpa"), "vDPA device");
        let lock = names.lock("vdpa0".to_string()).unwrap();
        lock.write_record(&r).unwrap();
        let found = names.find_owned_by::<String, Rec>(&r.owner).unwrap();
        assert_eq!(found.as_deref(), Some("vdpa0"));
    }

    #[test]
    fn a_del_for_a_device_without_a_record_makes_no_lock_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("sriov"), "VF");
        let owner = record("ctr1").owner;
        let found = store.owned_by::<PciAddress, Rec>(Some(vf("0000:7f:1f.7")), &owner);
        assert_eq!(found.unwrap().map(|(_, r)| r), None);
        assert!(!dir.path().join("sriov/0000:7f:1f.7.lock").exists());
        // With a record, its owner finds it under the lock; others do not.
        let r = record("ctr1");
        store
            .lock(vf("0000:01:10.2"))
            .unwrap()
            .write_record(&r)
            .unwrap();
        let found = store.owned_by::<PciAddress, Rec>(Some(vf("0000:01:10.2")), &owner);
        assert_eq!(found.unwrap().map(|(_, r)| r), Some(r));
        let stranger = record("ctr2").owner;
        let found = store.owned_by::<PciAddress, Rec>(Some(vf("0000:01:10.2")), &stranger);
        assert_eq!(found.unwrap().map(|(_, r)| r), None);
        // The name is only tried first: a device named that is another's
        // or has no record, and the owner's is found by its record.
        let theirs = record("ctr2");
        store
            .lock(vf("0000:01:10.3"))
            .unwrap()
            .write_record(&theirs)
            .unwrap();
        for named in [vf("0000:01:10.2"), vf("0000:7f:1f.6")] {
            let found = store.owned_by::<PciAddress, Rec>(Some(named), &stranger);
            let (lock, r) = found.unwrap().unwrap();
            assert_eq!((*lock.key(), r), (vf("0000:01:10.3"), theirs.clone()));
        }
        assert!(!dir.path().join("sriov/0000:7f:1f.6.lock").exists());
    }

    #[test]
    fn a_device_is_locked_by_one_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_path_buf(), "VF");
        let held = store.lock(vf("0000:01:10.0")).unwrap();
        // Another VF is free meanwhile.
        drop(store.lock(vf("0000:01:10.2")).unwrap());
        let other = Store::new(dir.path().to_path_buf(), "VF");
        std::thread::scope(|s| {
            let waiter = s.spawn(|| other.lock(vf("0000:01:10.0")).map(|l| *l.key()));
            std::thread::sleep(Duration::from_millis(50));
            assert!(!waiter.is_finished(), "the second lock waits");
            drop(held);
            assert_eq!(waiter.join().unwrap().unwrap(), vf("0000:01:10.0"));
        });
    }

    #[test]
    fn a_record_that_is_not_one_is_a_decode_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_path_buf(), "VF");
        let lock = store.lock(vf("0000:01:10.0")).unwrap();
        fs::write(dir.path().join("0000:01:10.0.json"), "{}").unwrap();
        let e = lock.read_record::<Rec>().unwrap_err();
        assert!(
            matches!(&e, DriverError::BadRecord { reason, .. } if reason.starts_with("not a VF record")),
            "{e:?}"
        );
        // Not found by owner either, and the scan goes on past it.
        let found = store.find_owned_by::<PciAddress, Rec>(&record("x").owner);
        assert_eq!(found.unwrap(), None);
    }

    /// Gives back by removing the record, counting the calls; or, when
    /// `failing`, fails every give-back.
    #[derive(Default)]
    struct Counting {
        calls: std::cell::Cell<u32>,
        failing: bool,
    }

    impl GiveBack for Counting {
        type Key = PciAddress;
        type Record = Rec;
        fn del_keys(&self, _req: &Request) -> (Option<PciAddress>, Store) {
            unreachable!("not a DEL")
        }
        fn give_back(
            &self,
            lock: &DeviceLock<PciAddress>,
            _record: &Rec,
            _to: Return<'_>,
        ) -> Result<(), DriverError> {
            if self.failing {
                return Err(sys_error("IFLA_VF_INFO", "EBUSY"));
            }
            self.calls.set(self.calls.get() + 1);
            lock.remove_record()
        }
    }

    #[test]
    fn a_claim_is_free_refused_or_stale_by_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_path_buf(), "VF");
        let key = vf("0000:01:10.0");
        let claim = |found: &'static str| {
            store.claim::<_, _, Rec>(key, "deviceID", "VF x", || Ok(found.to_string()))
        };
        // No record: free, as `find` found it.
        let free = claim("free").unwrap();
        assert_eq!(free.key(), &key);
        let driver = Counting::default();
        let host = Netlink::current().unwrap();
        let never = || -> Result<String, DriverError> { panic!("not looked for again") };
        assert_eq!(free.device(&driver, &host, never).unwrap(), "free");
        assert_eq!(driver.calls.get(), 0);
        drop(free);
        // An owner whose namespace exists (this thread's): code 11.
        let mut live = record("ctr1");
        live.netns = netns("/proc/self/ns/net");
        store.lock(key).unwrap().write_record(&live).unwrap();
        let e = claim("unused").unwrap_err();
        assert!(
            matches!(&e, DriverError::DeviceInUse { key, device, container_id, .. }
                if (key.as_str(), device.as_str(), container_id.as_str())
                    == ("deviceID", "VF x", "ctr1")),
            "{e:?}"
        );
        // An owner whose namespace is gone: given back, then found again.
        let mut stale = record("ctr2");
        stale.netns = netns(dir.path().join("gone"));
        store.lock(key).unwrap().write_record(&stale).unwrap();
        let claimed = claim("unused").unwrap();
        let found = claimed.device(&driver, &host, || Ok("again".to_string()));
        assert_eq!(found.unwrap(), "again");
        assert_eq!(driver.calls.get(), 1);
        assert_eq!(claimed.lock.read_record::<Rec>().unwrap(), None);
    }

    #[test]
    fn a_sweep_gives_back_only_unlocked_devices_whose_owner_namespace_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_path_buf(), "VF");
        let host = Netlink::current().unwrap();
        let write = |key: &str, container_id: &str, path: PathBuf| {
            let mut r = record(container_id);
            r.netns = netns(path);
            store.lock(vf(key)).unwrap().write_record(&r).unwrap();
        };
        write("0000:01:10.0", "live", "/proc/self/ns/net".into());
        write("0000:01:10.1", "orphan", dir.path().join("gone1"));
        write("0000:01:10.2", "busy", dir.path().join("gone2"));
        write("0000:01:10.3", "orphan2", dir.path().join("gone3"));
        fs::write(dir.path().join("0000:01:10.4.json"), "not a record").unwrap();
        // An ADD or DEL holds the busy one's lock: the sweep leaves it.
        let held = store.lock(vf("0000:01:10.2")).unwrap();

        let driver = Counting::default();
        driver
            .give_back_orphans(&store, &host, Patience::OneLook)
            .unwrap();
        assert_eq!(driver.calls.get(), 2, "the two orphans, once each");
        let left = |store: &Store| -> Vec<String> {
            store
                .records::<PciAddress, Rec>()
                .unwrap()
                .map(|(_, r)| r.owner.container_id.to_string())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect()
        };
        assert_eq!(left(&store), ["busy", "live"]);

        // Released, the busy one goes next time; a failed give-back is
        // reported with the device and its owner, and its record stays.
        drop(held);
        let failing = Counting {
            failing: true,
            ..Counting::default()
        };
        let e = failing
            .give_back_orphans(&store, &host, Patience::OneLook)
            .unwrap_err();
        assert_eq!(
            e,
            DriverError::Orphan {
                device: "VF 0000:01:10.2".into(),
                container_id: ContainerId::new("busy").unwrap(),
                error: Box::new(sys_error("IFLA_VF_INFO", "EBUSY")),
            }
        );
        assert_eq!(left(&store), ["busy", "live"]);
        driver
            .give_back_orphans(&store, &host, Patience::OneLook)
            .unwrap();
        assert_eq!(driver.calls.get(), 3);
        assert_eq!(left(&store), ["live"]);
        // An empty or missing store has nothing to sweep.
        let none = Store::new(dir.path().join("none"), "VF");
        driver
            .give_back_orphans(&none, &host, Patience::OneLook)
            .unwrap();
        assert_eq!(driver.calls.get(), 3);
    }

    #[test]
    fn in_use_names_the_key_the_device_and_its_owner() {
        let e = in_use("vdpaDevice", "vDPA device vdpa0", &record("ctr9"));
        assert!(
            matches!(&e, DriverError::DeviceInUse { key, device, container_id, ifname, .. }
                if (key.as_str(), device.as_str(), container_id.as_str(), ifname.as_str())
                    == ("vdpaDevice", "vDPA device vdpa0", "ctr9", "net1")),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with("vdpaDevice: vDPA device vdpa0 is in use by container ctr9"),
            "{e}"
        );
    }
}
