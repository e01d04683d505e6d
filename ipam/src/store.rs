//! host-local's on-disk store, byte-compatible with the reference plugin's
//! `disk` backend so either can take over a node's state:
//!
//! - `<dataDir>/<network>/<ip>`: one file per allocated address holding
//!   `<containerID>\r\n<ifname>` (files of old reference versions hold only
//!   the container ID; they are read, never written);
//! - `<dataDir>/<network>/last_reserved_ip.<rangeset index>`: the address
//!   reserved last in that range set, for round-robin allocation;
//! - `<dataDir>/<network>/lock`: `flock`ed exclusively around every
//!   operation, by the reference as by plexus.
//!
//! What plexus adds, invisible to the reference: an address file appears
//! atomically with its content (written unnamed with `O_TMPFILE`, or to a
//! temp file where the filesystem lacks it, then hard-linked into place,
//! which fails if the name exists, so reservation stays exclusive as with the
//! reference's `O_EXCL`). The addresses of a persistent owner (an
//! IPAMClaim's, which outlive the pod) are on disk, data then directory,
//! before the ADD reports success ([`LockedStore::make_durable`]; inside
//! plexus that flush overlaps the rest of the ADD); an ordinary pod's are
//! not synced, as the reference's are not: the pod dies with the node, so a
//! reservation a power cut loses was nobody's any more. A power cut can
//! leave a name with empty content, which both implementations read as
//! taken by an unknown owner and GC releases; no address is ever handed out
//! twice. `last_reserved_ip.*` is rewritten in place and never
//! synced: a lost hint only restarts the round-robin search. Other changes
//! (releases) sync the directory before reporting success. Temp files start
//! with `.plexus-tmp.`, never parse as an address and are therefore ignored
//! by both implementations; as they are only written under the lock, any
//! found by a later lock holder is a leftover of a crash.

use crate::error::IpamError;
use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::Flock;
use plexus_cni::flock::lock_file;
use plexus_cni::names::{ContainerId, IfName};
use plexus_cni::{durable, whole_file};

pub(crate) const LAST_IP_PREFIX: &str = "last_reserved_ip.";
pub(crate) const LOCK_FILE: &str = "lock";
pub(crate) const TEMP_PREFIX: &str = ".plexus-tmp.";
/// What separates the container ID from the interface name in a file.
pub(crate) const LINE_BREAK: &str = "\r\n";
/// Address and last-IP files are tiny; a larger one is not ours to parse.
const MAX_FILE: u64 = 4096;

/// The first line of an address file: the container ID, or the persistent
/// owner (`args.plexus.persistentOwner`, one non-empty line) that holds the
/// address in its place. Files are written by the reference and other tools
/// too, so it is kept as written, trimmed as the reference compares it, and
/// never checked: it is only compared and shown, never used as a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderId(String);

impl HolderId {
    pub fn new(id: &str) -> HolderId {
        HolderId(id.trim().to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&ContainerId> for HolderId {
    fn from(id: &ContainerId) -> HolderId {
        HolderId::new(id)
    }
}

impl fmt::Display for HolderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who holds an address, as its file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// `<holder>\r\n<ifname>`.
    Attachment { holder: HolderId, ifname: IfName },
    /// `<containerID>` alone, as reference versions before 0.7 wrote.
    Container(HolderId),
    /// Empty (a reference process crashed between create and write).
    Unknown,
    /// `<containerID>\r\n<text>` whose text is no interface name: no
    /// attachment has it (the file was damaged or written by another tool).
    /// The whole content, trimmed.
    Foreign(String),
}

impl Owner {
    /// Parse a file's content as the reference compares it: whitespace
    /// around the whole content is ignored.
    pub fn parse(content: &[u8]) -> Owner {
        let text = String::from_utf8_lossy(content);
        let text = text.trim();
        if text.is_empty() {
            return Owner::Unknown;
        }
        match text.split_once(LINE_BREAK) {
            Some((id, ifname)) => match IfName::new(ifname) {
                Ok(ifname) => Owner::Attachment {
                    holder: HolderId::new(id),
                    ifname,
                },
                Err(_) => Owner::Foreign(text.to_string()),
            },
            None => Owner::Container(HolderId::new(text)),
        }
    }

    /// The file content for a new allocation.
    pub fn content(holder: &HolderId, ifname: &IfName) -> String {
        format!("{holder}{LINE_BREAK}{ifname}")
    }

    /// Written for exactly this attachment.
    pub fn is_exactly(&self, holder: &HolderId, ifname: &IfName) -> bool {
        matches!(self, Owner::Attachment { holder: h, ifname: i } if h == holder && i == ifname)
    }

    /// An old-format file of this container (it names no interface).
    pub fn is_legacy_of(&self, holder: &HolderId) -> bool {
        matches!(self, Owner::Container(h) if h == holder)
    }

    /// Either of the above: what the reference counts as held by the
    /// attachment.
    pub fn is_held_by(&self, holder: &HolderId, ifname: &IfName) -> bool {
        self.is_exactly(holder, ifname) || self.is_legacy_of(holder)
    }

    /// "container X (interface Y)" for errors.
    pub fn describe(&self) -> String {
        match self {
            Owner::Attachment { holder, ifname } => {
                format!("container {holder} (interface {ifname})")
            }
            Owner::Container(c) => format!("container {c}"),
            Owner::Unknown => "an unknown owner (its file is empty)".into(),
            Owner::Foreign(text) => match text.split_once(LINE_BREAK) {
                Some((c, i)) => format!("container {c} (interface {i})"),
                None => format!("container {text}"),
            },
        }
    }
}

/// The address a `last_reserved_ip.<set>` file holds, as the reference
/// reads it (whitespace around it ignored); `None` when it holds none.
pub fn parse_last_reserved(content: &[u8]) -> Option<IpAddr> {
    String::from_utf8_lossy(content)
        .trim()
        .parse::<IpAddr>()
        .ok()
        .map(|ip| ip.to_canonical())
}

/// One address file.
#[derive(Debug, Clone)]
pub(crate) struct Allocation {
    pub ip: IpAddr,
    /// The file's name, as written (by plexus or the reference).
    pub file_name: String,
    pub owner: Owner,
}

/// The directory of one network's allocations, locked.
pub(crate) struct LockedStore {
    dir: PathBuf,
    _lock: Flock<File>,
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> IpamError {
    IpamError::io(path.display().to_string(), e)
}

/// Open `<data_dir>/<name>` and take its lock, waiting at most `timeout`
/// (code 11 after that). `name` must already be checked to be one plain path
/// component. With `create` false a missing directory is `None`: there is
/// nothing to release, check or collect.
pub(crate) fn open(
    data_dir: &Path,
    name: &str,
    create: bool,
    timeout: Duration,
) -> Result<Option<LockedStore>, IpamError> {
    let dir = data_dir.join(name);
    if create {
        if !dir.is_dir() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(&dir)
                .map_err(|e| io_err(&dir, e))?;
            // A new network directory must survive a crash along with the
            // allocations that will be synced inside it.
            File::open(data_dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io_err(data_dir, e))?;
        }
    } else {
        match fs::metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(io_err(&dir, "not a directory")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&dir, e)),
        }
    }
    let lock = lock_file(&dir.join(LOCK_FILE), timeout, "IPAM store busy")?;
    Ok(Some(LockedStore { dir, _lock: lock }))
}

fn no_hard_links(e: &io::Error) -> bool {
    [Errno::EPERM, Errno::EOPNOTSUPP]
        .iter()
        .any(|errno| e.raw_os_error() == Some(*errno as i32))
}

/// Read a small file; `None` if it is gone or too large to be ours.
fn read_small(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut buf = Vec::new();
    file.take(MAX_FILE + 1).read_to_end(&mut buf)?;
    Ok((buf.len() as u64 <= MAX_FILE).then_some(buf))
}

impl LockedStore {
    /// Every address file in the directory. Files whose name is not an
    /// address (the lock, last-IP and temp files, anything else) are not
    /// allocations.
    pub fn allocations(&self) -> Result<Vec<Allocation>, IpamError> {
        let mut out = Vec::new();
        let entries = fs::read_dir(&self.dir).map_err(|e| io_err(&self.dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_err(&self.dir, e))?;
            let Some(file_name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let Ok(ip) = file_name.parse::<IpAddr>() else {
                continue;
            };
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_file() => {}
                _ => continue,
            }
            let Some(content) = read_small(&path).map_err(|e| io_err(&path, e))? else {
                continue;
            };
            out.push(Allocation {
                ip: ip.to_canonical(),
                file_name,
                owner: Owner::parse(&content),
            });
        }
        out.sort_by_key(|a| (a.ip.is_ipv6(), crate::range::to_u128(a.ip)));
        Ok(out)
    }

    /// The allocations by address.
    pub fn by_ip(allocs: &[Allocation]) -> HashMap<IpAddr, &Allocation> {
        allocs.iter().map(|a| (a.ip, a)).collect()
    }

    /// Reserve `ip` for the attachment: `false` if its file exists already.
    /// The file appears with its complete content or not at all.
    pub fn reserve(
        &self,
        ip: IpAddr,
        holder: &HolderId,
        ifname: &IfName,
    ) -> Result<bool, IpamError> {
        let target = self.dir.join(ip.to_string());
        let content = Owner::content(holder, ifname);
        match whole_file::create(&target, content.as_bytes(), 0o600) {
            Ok(reserved) => Ok(reserved),
            Err(e) if whole_file::unsupported(&e) => {
                self.reserve_via_temp(ip, &target, content.as_bytes())
            }
            Err(e) => Err(io_err(&target, e)),
        }
    }

    /// [`Self::reserve`] through a named temp file.
    fn reserve_via_temp(
        &self,
        ip: IpAddr,
        target: &Path,
        content: &[u8],
    ) -> Result<bool, IpamError> {
        if fs::symlink_metadata(target).is_ok() {
            return Ok(false);
        }
        // Under the lock, an existing temp file is a crash's leftover.
        let tmp = self.dir.join(format!("{TEMP_PREFIX}{ip}"));
        match whole_file::create_via_temp(target, &tmp, content, 0o600) {
            Ok(reserved) => Ok(reserved),
            // Filesystems without hard links: the reference's O_EXCL create.
            Err(e) if no_hard_links(&e) => self.reserve_excl(target, content),
            Err(e) => Err(io_err(target, e)),
        }
    }

    fn reserve_excl(&self, target: &Path, content: &[u8]) -> Result<bool, IpamError> {
        let mut f = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(target)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(io_err(target, e)),
        };
        if let Err(e) = f.write_all(content).and_then(|()| f.sync_all()) {
            let _ = fs::remove_file(target);
            return Err(io_err(target, e));
        }
        Ok(true)
    }

    /// Who holds `ip` according to its file (`Unknown` if it is gone or empty).
    pub fn owner_of(&self, ip: IpAddr) -> Owner {
        match read_small(&self.dir.join(ip.to_string())) {
            Ok(Some(content)) => Owner::parse(&content),
            _ => Owner::Unknown,
        }
    }

    /// `last_reserved_ip.<set>`; `None` when absent or unreadable (round-robin
    /// then restarts, as with the reference).
    pub fn last_reserved(&self, set: usize) -> Option<IpAddr> {
        let content = read_small(&self.dir.join(format!("{LAST_IP_PREFIX}{set}")))
            .ok()
            .flatten()?;
        parse_last_reserved(&content)
    }

    /// Replace `last_reserved_ip.<set>` (the bare address, no newline, as
    /// the reference writes and reads it). Written in place and not synced:
    /// it only steers round-robin, and a torn or lost file restarts the
    /// search elsewhere in the range, as the reference's plain rewrite does.
    /// (Replacing it by rename or by truncation to zero would make ext4 flush
    /// it at once, `auto_da_alloc`, which costs as much as an fsync.)
    pub fn set_last_reserved(&self, set: usize, ip: IpAddr) -> Result<(), IpamError> {
        use std::os::unix::fs::FileExt;
        let target = self.dir.join(format!("{LAST_IP_PREFIX}{set}"));
        let content = ip.to_string();
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&target)
            .and_then(|f| {
                f.write_all_at(content.as_bytes(), 0)?;
                f.set_len(content.len() as u64)
            })
            .map_err(|e| io_err(&target, e))
    }

    /// Make the address files of `ips` and the directory durable (data, then
    /// names) before the ADD that reserved them reports success: at once,
    /// or in the background of a [`durable::Scope`]. A file released
    /// meanwhile (the ADD failed and was undone) has nothing left to sync.
    pub fn make_durable(&self, ips: &[IpAddr]) -> Result<(), IpamError> {
        let files: Vec<PathBuf> = ips.iter().map(|ip| self.dir.join(ip.to_string())).collect();
        let dir = self.dir.clone();
        durable::sync(dir.display().to_string(), move || {
            for file in &files {
                match File::open(file) {
                    Ok(f) => f.sync_data()?,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
            File::open(&dir)?.sync_all()
        })
        .map_err(IpamError::from)
    }

    /// Remove an address file; one already gone is fine.
    pub fn release(&self, file_name: &str) -> Result<(), IpamError> {
        let path = self.dir.join(file_name);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(&path, e)),
        }
    }

    /// Remove temp files left by a crash (only plexus writes them, and only
    /// under the lock, so none is in use now).
    pub fn remove_stale_temps(&self) -> Result<usize, IpamError> {
        let mut n = 0;
        for entry in fs::read_dir(&self.dir).map_err(|e| io_err(&self.dir, e))? {
            let entry = entry.map_err(|e| io_err(&self.dir, e))?;
            let is_temp = entry
                .file_name()
                .to_str()
                .is_some_and(|s| s.starts_with(TEMP_PREFIX));
            if is_temp && entry.file_type().is_ok_and(|t| t.is_file()) {
                self.release(&entry.file_name().to_string_lossy())?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// fsync the directory, making created, renamed and removed names
    /// durable before the operation reports success.
    pub fn sync(&self) -> Result<(), IpamError> {
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err(&self.dir, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_cni::flock::LockFileError;
    use plexus_cni::{CniError, ErrorCode};
    use std::time::Instant;

    fn h(id: &str) -> HolderId {
        HolderId::new(id)
    }

    #[test]
    fn owner_formats() {
        let ifn = |name: &str| IfName::new(name).unwrap();
        assert_eq!(
            Owner::parse(b"abc\r\neth0"),
            Owner::Attachment {
                holder: h("abc"),
                ifname: ifn("eth0")
            }
        );
        // Trailing whitespace is ignored, as the reference's TrimSpace does.
        assert!(Owner::parse(b"abc\r\neth0\n").is_exactly(&h("abc"), &ifn("eth0")));
        assert_eq!(Owner::parse(b"abc\n"), Owner::Container(h("abc")));
        assert_eq!(Owner::parse(b""), Owner::Unknown);
        assert_eq!(Owner::parse(b"  \n"), Owner::Unknown);
        assert_eq!(Owner::content(&h("abc"), &ifn("eth0")), "abc\r\neth0");
        let legacy = Owner::parse(b"abc");
        assert!(legacy.is_legacy_of(&h("abc")) && legacy.is_held_by(&h("abc"), &ifn("net1")));
        assert!(!legacy.is_exactly(&h("abc"), &ifn("eth0")));
        assert!(!Owner::parse(b"abc\r\neth0").is_held_by(&h("abc"), &ifn("net1")));
        // A second line that is no interface name: held by no attachment,
        // described as written.
        let foreign = Owner::parse(b"abc\r\neth 0");
        assert_eq!(foreign, Owner::Foreign("abc\r\neth 0".into()));
        assert!(!foreign.is_held_by(&h("abc"), &ifn("eth0")));
        assert_eq!(foreign.describe(), "container abc (interface eth 0)");
    }

    /// A store for network `net` in a fresh directory.
    fn fresh_store() -> (tempfile::TempDir, LockedStore) {
        let tmp = tempfile::tempdir().unwrap();
        let s = open(tmp.path(), "net", true, Duration::from_secs(1))
            .unwrap()
            .unwrap();
        (tmp, s)
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_temp_file_path_is_as_exclusive() {
        // For filesystems without O_TMPFILE.
        let (tmp, s) = fresh_store();
        let ip: IpAddr = "10.0.0.3".parse().unwrap();
        let target = tmp.path().join("net/10.0.0.3");
        assert!(s.reserve_via_temp(ip, &target, b"c3\r\neth1").unwrap());
        assert!(!s.reserve_via_temp(ip, &target, b"c4\r\neth1").unwrap());
        assert!(!s
            .reserve(ip, &h("c4"), &IfName::new("eth1").unwrap())
            .unwrap());
        assert_eq!(fs::read(&target).unwrap(), b"c3\r\neth1");
        assert_eq!(names_in(&tmp.path().join("net")), ["10.0.0.3", "lock"]);
    }

    #[test]
    fn reserve_is_exclusive_and_leaves_no_temp() {
        let (tmp, s) = fresh_store();
        let ip: IpAddr = "10.0.0.2".parse().unwrap();
        assert!(s
            .reserve(ip, &h("c1"), &IfName::new("eth0").unwrap())
            .unwrap());
        assert!(!s
            .reserve(ip, &h("c2"), &IfName::new("eth0").unwrap())
            .unwrap());
        assert_eq!(
            fs::read(tmp.path().join("net/10.0.0.2")).unwrap(),
            b"c1\r\neth0"
        );
        s.set_last_reserved(0, ip).unwrap();
        assert_eq!(
            fs::read(tmp.path().join("net/last_reserved_ip.0")).unwrap(),
            b"10.0.0.2"
        );
        assert_eq!(s.last_reserved(0), Some(ip));
        assert_eq!(s.last_reserved(1), None);
        assert_eq!(
            names_in(&tmp.path().join("net")),
            ["10.0.0.2", "last_reserved_ip.0", "lock"]
        );
        let allocs = s.allocations().unwrap();
        assert_eq!(allocs.len(), 1);
        assert!(allocs[0]
            .owner
            .is_exactly(&h("c1"), &IfName::new("eth0").unwrap()));
    }

    #[test]
    fn missing_directory_is_none_without_create() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(open(tmp.path(), "net", false, Duration::from_secs(1))
            .unwrap()
            .is_none());
        assert!(!tmp.path().join("net").exists());
    }

    #[test]
    fn lock_times_out_with_code_11() {
        let tmp = tempfile::tempdir().unwrap();
        let held = open(tmp.path(), "net", true, Duration::from_secs(1))
            .unwrap()
            .unwrap();
        let t0 = Instant::now();
        let e = match open(tmp.path(), "net", true, Duration::from_millis(50)) {
            Err(e) => e,
            Ok(_) => panic!("second lock taken while the first is held"),
        };
        assert!(t0.elapsed() >= Duration::from_millis(50));
        // The lock's own error, from the protocol crate: code 11.
        assert!(
            matches!(&e, IpamError::Lock(LockFileError::Busy { .. })),
            "{e:?}"
        );
        assert_eq!(CniError::from(e).code, ErrorCode::TryAgainLater);
        drop(held);
        assert!(open(tmp.path(), "net", true, Duration::from_millis(50)).is_ok());
    }
}
