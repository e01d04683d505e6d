//! The claims prepared on this node, kept on disk so that a restarted
//! daemon still knows which device is whose: one file per claim,
//! `<claim uid>.json`, holding what Prepare returned ([`PreparedClaim`]),
//! written whole (temporary name, fsync, rename) before Prepare answers
//! and removed by Unprepare. A device is reserved while a file names it,
//! so a daemon killed between Prepare and ADD, or between DEL and
//! Unprepare, leaves nothing half-done: the next Prepare (kubelet
//! repeats it) finds the claim prepared, the next Unprepare removes it.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::prepared::PreparedClaim;

/// The prepared claims, by uid.
#[derive(Debug)]
pub struct Reservations {
    dir: PathBuf,
    claims: BTreeMap<String, PreparedClaim>,
}

/// Whether `uid` can name a file: a Kubernetes uid is a UUID; anything
/// with a path separator or a dot-name is refused before it reaches the
/// file system.
pub fn valid_uid(uid: &str) -> bool {
    !uid.is_empty()
        && uid.len() <= 128
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Reservations {
    /// The reservations in `dir` (made when missing). A file that does not
    /// decode is left where it is and named in the log: its device stays
    /// unknown rather than handed out twice.
    pub fn open(dir: &Path) -> io::Result<Reservations> {
        fs::create_dir_all(dir)?;
        let mut claims = BTreeMap::new();
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            let Some(uid) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".json"))
                .filter(|u| valid_uid(u))
            else {
                continue;
            };
            match fs::read(&path).map(|b| serde_json::from_slice::<PreparedClaim>(&b)) {
                Ok(Ok(claim)) if claim.uid == uid => {
                    claims.insert(uid.to_string(), claim);
                }
                Ok(Ok(_)) | Ok(Err(_)) => {
                    tracing::warn!(path = %path.display(), "a DRA reservation that does not decode is ignored");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Reservations {
            dir: dir.to_path_buf(),
            claims,
        })
    }

    pub fn get(&self, uid: &str) -> Option<&PreparedClaim> {
        self.claims.get(uid)
    }

    /// The claim holding the device `device`, if any.
    pub fn holder(&self, device: &str) -> Option<&PreparedClaim> {
        self.claims
            .values()
            .find(|c| c.devices.iter().any(|d| d.device == device))
    }

    /// Every prepared claim.
    pub fn all(&self) -> impl Iterator<Item = &PreparedClaim> {
        self.claims.values()
    }

    /// Keep `claim` on disk, then in memory.
    pub fn put(&mut self, claim: PreparedClaim) -> io::Result<()> {
        let body = serde_json::to_vec_pretty(&claim).map_err(io::Error::other)?;
        // Whole for a reader, and kept across a power cut.
        plexus_cni::whole_file::replace_durably(&self.path(&claim.uid), &body)?;
        self.claims.insert(claim.uid.clone(), claim);
        Ok(())
    }

    /// Forget `uid` (absent: nothing to do), on disk first.
    pub fn remove(&mut self, uid: &str) -> io::Result<Option<PreparedClaim>> {
        match fs::remove_file(self.path(uid)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        Ok(self.claims.remove(uid))
    }

    fn path(&self, uid: &str) -> PathBuf {
        self.dir.join(format!("{uid}.json"))
    }
}
