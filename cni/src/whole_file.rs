//! Files that appear at their name with their whole content or not at all,
//! without a temp name: written unnamed (`O_TMPFILE`) in the target's
//! directory, then linked in, which fails if the name exists. Compared with a
//! named temp file and a rename or link, nothing needs cleaning before or
//! after, a crash leaves nothing behind, and it takes half the system calls
//! (each of which walks and changes the directory).

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, AT_FDCWD};
use nix::unistd::linkat;

/// Create `target` with `content` and `mode`; `Ok(false)` if the name
/// exists. An error for which [`unsupported`] holds means the filesystem
/// cannot do this; the caller falls back to a named temp file.
pub fn create(target: &Path, content: &[u8], mode: u32) -> io::Result<bool> {
    let dir = parent(target);
    let mut file = OpenOptions::new()
        .write(true)
        .mode(mode)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)?;
    file.write_all(content)?;
    let linked = linkat(&file, "", AT_FDCWD, target, AtFlags::AT_EMPTY_PATH).or_else(|e| {
        // Before Linux 6.10 AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; the
        // /proc link does not.
        if e != Errno::EPERM && e != Errno::ENOENT {
            return Err(e);
        }
        link_by_proc(&file, target)
    });
    match linked {
        Ok(()) => Ok(true),
        Err(Errno::EEXIST) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// [`create`] through the named temp file `temp` beside `target`, for
/// filesystems where [`unsupported`] holds: written, hard-linked to `target`
/// (which fails if the name exists), removed again. A `temp` left by a
/// crash is replaced; the caller picks a name its readers skip. Returns the
/// link's error as is (a filesystem without hard links among them).
pub fn create_via_temp(target: &Path, temp: &Path, content: &[u8], mode: u32) -> io::Result<bool> {
    let _ = std::fs::remove_file(temp);
    write_temp(temp, content, mode, Durability::Unsynced)?;
    let linked = std::fs::hard_link(temp, target);
    let _ = std::fs::remove_file(temp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// A fresh file `temp` holding `bytes` (fsync'd when [`Durability::Synced`]);
/// on failure it is removed again.
fn write_temp(temp: &Path, bytes: &[u8], mode: u32, durability: Durability) -> io::Result<()> {
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(temp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            if durability == Durability::Synced {
                f.sync_all()?;
            }
            Ok(())
        });
    if written.is_err() {
        let _ = std::fs::remove_file(temp);
    }
    written
}

fn link_by_proc(file: &std::fs::File, target: &Path) -> nix::Result<()> {
    let by_proc = format!("/proc/self/fd/{}", file.as_raw_fd());
    linkat(
        AT_FDCWD,
        by_proc.as_str(),
        AT_FDCWD,
        target,
        AtFlags::AT_SYMLINK_FOLLOW,
    )
}

/// Errors of a kernel or filesystem without `O_TMPFILE` (old kernels read
/// the flag as `O_DIRECTORY`: EISDIR), or without links to such a file.
pub fn unsupported(e: &io::Error) -> bool {
    [
        Errno::EOPNOTSUPP,
        Errno::EISDIR,
        Errno::EINVAL,
        Errno::EPERM,
    ]
    .iter()
    .any(|errno| e.raw_os_error() == Some(*errno as i32))
}

/// Whether a replaced file must survive a power loss as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync the file before it takes the name and the directory after.
    Synced,
    /// Whole for readers and across a crash of the writer, not across a
    /// power loss (plexus's records, whose loss the runtime's DEL and GC
    /// reclaim).
    Unsynced,
}

static TEMP_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The prefix-free marker of the temp files [`replace`] leaves when its
/// writer dies between write and rename: `.<name>.tmp-<pid>-<n>`.
pub const TEMP_MARKER: &str = ".tmp-";

/// The one way plexus replaces a file: readers see the old content or the
/// new, never a mix. A new file appears through [`create`] (unsynced only);
/// otherwise a temp file beside it is written (and, [`Durability::Synced`],
/// fsync'd), renamed over `path` (and the directory fsync'd). The
/// directory must exist.
pub fn replace(path: &Path, bytes: &[u8], mode: u32, durability: Durability) -> io::Result<()> {
    if durability == Durability::Unsynced {
        match create(path, bytes, mode) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) if unsupported(&e) => {}
            Err(e) => return Err(e),
        }
    }
    let dir = parent(path);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(
        ".{name}{TEMP_MARKER}{}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let result = (|| {
        write_temp(&tmp, bytes, mode, durability)?;
        std::fs::rename(&tmp, path)?;
        if durability == Durability::Synced {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// [`replace`] with [`Durability::Synced`], mode 0600, creating the
/// directory (mode 0700) if needed: small state that must outlive a reboot
/// exactly as written (tuning's saved values, plexus's IPAMClaim book).
pub fn replace_durably(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent(path))?;
    replace(path, bytes, 0o600, Durability::Synced)
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Removes `path`; a file already gone is no failure (a DEL finishes what
/// an earlier one began).
pub fn remove(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `target` holds `content` with `mode`, and nothing else is beside it.
    fn assert_alone(target: &Path, content: &[u8], mode: u32) {
        assert_eq!(std::fs::read(target).unwrap(), content);
        let meta = std::fs::metadata(target).unwrap();
        let perm = std::os::unix::fs::PermissionsExt::mode(&meta.permissions());
        assert_eq!(perm & 0o777, mode);
        let dir = target.parent().unwrap();
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 1);
    }

    #[test]
    fn replaced_durably_in_a_new_directory_leaving_no_temp_file() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("sub/f");
        replace_durably(&target, b"one").unwrap();
        replace_durably(&target, b"two").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(d.path().join("sub")).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn replaced_unsynced_whole_with_its_mode() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("r");
        replace(&target, b"new", 0o640, Durability::Unsynced).unwrap();
        replace(&target, b"newer", 0o640, Durability::Unsynced).unwrap();
        assert_alone(&target, b"newer", 0o640);
        let e = replace(&d.path().join("none/r"), b"x", 0o600, Durability::Unsynced).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn appears_whole_once_and_leaves_nothing_else() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("f");
        assert!(create(&target, b"first", 0o640).unwrap());
        assert!(!create(&target, b"second", 0o600).unwrap());
        assert_alone(&target, b"first", 0o640);
        // A missing directory is an ordinary error, not "unsupported".
        let e = create(&d.path().join("none/f"), b"x", 0o600).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(!unsupported(&e));
    }

    #[test]
    fn the_proc_link_of_older_kernels_links_the_unnamed_file() {
        let d = tempfile::tempdir().unwrap();
        let mut file = OpenOptions::new()
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE)
            .open(d.path())
            .unwrap();
        file.write_all(b"whole").unwrap();
        let target = d.path().join("g");
        link_by_proc(&file, &target).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"whole");
        assert_eq!(link_by_proc(&file, &target), Err(Errno::EEXIST));
    }
}
