//! Who holds a VF. Kubelet may run a new pod's ADD for a VF before the old
//! pod's DEL (sriov-cni #219/#313), so each VF has, in the driver's data
//! directory:
//!
//! - `<pci>.lock`: `flock`ed for a whole ADD, CHECK or DEL of the VF;
//! - `<pci>.json`: its [`Record`], written (durably) before an ADD changes
//!   anything and removed once a DEL gave everything back. It names the
//!   owner, so a late DEL of another attachment leaves the VF alone, and
//!   holds what to give back, so an ADD can give back a VF whose owner's
//!   namespace is gone without its DEL ever coming.
//!
//! A record is read and written only through the [`VfLock`] of its VF.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::Flock;
use plexus_cni::error::CniError;
use plexus_cni::flock::lock_file;
use serde::{Deserialize, Serialize};

use crate::mac::MacAddr;
use crate::netlink::{VfSettings, VfState};
use crate::pci::PciAddress;

/// How long an ADD, CHECK or DEL waits for another one on the same VF; a
/// DEL may wait up to [`super::NETDEV_RETURN_TIMEOUT`] for the VF's netdev.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// Records are small; a larger file is not one of ours.
const MAX_RECORD: u64 = 64 * 1024;

/// At most this many records are read when looking for an attachment's VF
/// (a node has a few hundred VFs at most).
const MAX_RECORDS_SCANNED: usize = 4096;

/// The attachment holding a VF.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Owner {
    pub container_id: String,
    pub ifname: String,
}

/// How the VF was found before its owner's ADD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub(crate) enum Found {
    /// With a netdev in the host namespace, which the ADD moved into the pod.
    Netdev {
        name: String,
        mac: Option<MacAddr>,
        mtu: u32,
    },
    /// Bound to a userspace driver, without netdev (sriov-cni's DPDK mode).
    Dpdk,
}

/// One VF's owner and what to give back on DEL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    pub owner: Owner,
    /// The owner's `CNI_NETNS`.
    pub netns: PathBuf,
    /// The VF's settings on its PF before the ADD.
    pub saved: VfState,
    /// What the ADD set through the PF.
    pub applied: VfSettings,
    pub found: Found,
}

impl Record {
    pub fn is_dpdk(&self) -> bool {
        self.found == Found::Dpdk
    }
}

/// The data directory of the VF locks and records.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    dir: PathBuf,
}

fn io_error(path: &Path, e: impl std::fmt::Display) -> CniError {
    CniError::io(path.display().to_string(), e)
}

impl Store {
    pub fn new(dir: PathBuf) -> Store {
        Store { dir }
    }

    fn record_path(&self, vf: PciAddress) -> PathBuf {
        self.dir.join(format!("{vf}.json"))
    }

    /// Take the VF's lock, waiting at most [`LOCK_TIMEOUT`] (code 11 after
    /// that). Creates the directory.
    pub fn lock(&self, vf: PciAddress) -> Result<VfLock, CniError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|e| io_error(&self.dir, e))?;
        let path = self.dir.join(format!("{vf}.lock"));
        let flock = lock_file(
            &path,
            LOCK_TIMEOUT,
            "VF busy: another ADD, CHECK or DEL holds it",
        )?;
        Ok(VfLock {
            store: self.clone(),
            vf,
            _flock: flock,
        })
    }

    /// The VF whose record names `owner`, if any: for a DEL whose
    /// configuration does not say (records are replaced whole, so reading
    /// one without its lock is safe; the caller locks and reads it again).
    pub fn find_owned_by(&self, owner: &Owner) -> Result<Option<PciAddress>, CniError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(&self.dir, e)),
        };
        for entry in entries.take(MAX_RECORDS_SCANNED) {
            let entry = entry.map_err(|e| io_error(&self.dir, e))?;
            let name = entry.file_name();
            let Some(vf) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| PciAddress::parse(n).ok())
            else {
                continue;
            };
            // A record that cannot be read is not this owner's to find.
            if let Ok(Some(record)) = read_record(&self.record_path(vf)) {
                if record.owner == *owner {
                    return Ok(Some(vf));
                }
            }
        }
        Ok(None)
    }
}

/// A VF's lock, held until dropped; the only way to its record.
#[derive(Debug)]
pub(crate) struct VfLock {
    store: Store,
    vf: PciAddress,
    _flock: Flock<File>,
}

impl VfLock {
    pub fn vf(&self) -> PciAddress {
        self.vf
    }

    pub fn read_record(&self) -> Result<Option<Record>, CniError> {
        read_record(&self.store.record_path(self.vf))
    }

    /// Write the record durably: it must outlive a crash or reboot, which
    /// leave the VF as the record says until a DEL or the next ADD gives it
    /// back.
    pub fn write_record(&self, record: &Record) -> Result<(), CniError> {
        let path = self.store.record_path(self.vf);
        let bytes = serde_json::to_vec_pretty(record).map_err(|e| io_error(&path, e))?;
        plexus_cni::whole_file::replace_durably(&path, &bytes).map_err(|e| io_error(&path, e))
    }

    /// Remove the record (none is fine). Not synced: a record that comes
    /// back after a power loss names a namespace that is gone, and the next
    /// ADD gives the VF back once more, which changes nothing.
    pub fn remove_record(&self) -> Result<(), CniError> {
        let path = self.store.record_path(self.vf);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(&path, e)),
        }
    }
}

fn read_record(path: &Path) -> Result<Option<Record>, CniError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path, e)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_RECORD + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, e))?;
    if bytes.len() as u64 > MAX_RECORD {
        return Err(io_error(path, "too large to be a VF record"));
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| CniError::decode(path.display().to_string(), format!("not a VF record: {e}")))
}

#[cfg(test)]
mod tests {
    use plexus_cni::error::ErrorCode;

    use super::*;

    fn record(container_id: &str) -> Record {
        let saved: VfState = serde_json::from_value(serde_json::json!({
            "vf": 1, "mac": "00:00:00:00:00:00",
            "vlan": {"id": 0, "qos": 0, "proto": "802.1Q"},
            "spoofchk": true, "trust": false, "link_state": "auto",
            "min_tx_rate": 0, "max_tx_rate": 0, "ib_node_guid": null, "ib_port_guid": null,
        }))
        .unwrap();
        Record {
            owner: Owner {
                container_id: container_id.into(),
                ifname: "net1".into(),
            },
            netns: "/var/run/netns/pod".into(),
            saved,
            applied: VfSettings {
                trust: Some(true),
                ..VfSettings::default()
            },
            found: Found::Netdev {
                name: "enp1s0v1".into(),
                mac: Some("02:00:00:00:00:01".parse().unwrap()),
                mtu: 1500,
            },
        }
    }

    fn vf(s: &str) -> PciAddress {
        s.parse().unwrap()
    }

    #[test]
    fn a_record_round_trips_under_its_lock_and_is_found_by_owner() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("sriov"));
        let lock = store.lock(vf("0000:01:10.2")).unwrap();
        assert_eq!(lock.read_record().unwrap(), None);
        let r = record("ctr1");
        lock.write_record(&r).unwrap();
        assert_eq!(lock.read_record().unwrap(), Some(r.clone()));
        assert!(!r.is_dpdk());
        let text = fs::read_to_string(dir.path().join("sriov/0000:01:10.2.json")).unwrap();
        assert!(text.contains(r#""mode": "netdev""#), "{text}");
        assert!(text.contains(r#""mac": "02:00:00:00:00:01""#), "{text}");

        assert_eq!(
            store.find_owned_by(&r.owner).unwrap(),
            Some(vf("0000:01:10.2"))
        );
        let stranger = Owner {
            container_id: "ctr2".into(),
            ifname: "net1".into(),
        };
        assert_eq!(store.find_owned_by(&stranger).unwrap(), None);
        lock.remove_record().unwrap();
        lock.remove_record().unwrap();
        assert_eq!(lock.read_record().unwrap(), None);
        assert_eq!(store.find_owned_by(&r.owner).unwrap(), None);
        let empty = Store::new(dir.path().join("none"));
        assert_eq!(empty.find_owned_by(&r.owner).unwrap(), None);
    }

    #[test]
    fn a_vf_is_locked_by_one_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_path_buf());
        let held = store.lock(vf("0000:01:10.0")).unwrap();
        // Another VF is free meanwhile.
        drop(store.lock(vf("0000:01:10.2")).unwrap());
        let other = Store::new(dir.path().to_path_buf());
        std::thread::scope(|s| {
            let waiter = s.spawn(|| other.lock(vf("0000:01:10.0")).map(|l| l.vf()));
            std::thread::sleep(Duration::from_millis(50));
            assert!(!waiter.is_finished(), "the second lock waits");
            drop(held);
            assert_eq!(waiter.join().unwrap().unwrap(), vf("0000:01:10.0"));
        });
    }

    #[test]
    fn a_record_that_is_not_one_is_a_decode_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_path_buf());
        let lock = store.lock(vf("0000:01:10.0")).unwrap();
        fs::write(dir.path().join("0000:01:10.0.json"), "{}").unwrap();
        let e = lock.read_record().unwrap_err();
        assert_eq!(e.code, ErrorCode::Decode);
        assert!(e.details.contains("not a VF record"), "{e}");
        // Not found by owner either, and the scan goes on past it.
        assert_eq!(store.find_owned_by(&record("x").owner).unwrap(), None);
    }
}
