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
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
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

/// Writes `bytes` to `path` so that it survives a power loss whole: a
/// temporary file beside it, fsync, rename over `path`, fsync of the
/// directory. The directory is created (mode 0700) if needed; the file is
/// mode 0600. For small state that must outlive a reboot exactly as written
/// (tuning's saved sysctls, plexus's IPAMClaim book).
pub fn replace_durably(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn appears_whole_once_and_leaves_nothing_else() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("f");
        assert!(create(&target, b"first", 0o640).unwrap());
        assert!(!create(&target, b"second", 0o600).unwrap());
        assert_eq!(std::fs::read(&target).unwrap(), b"first");
        let meta = std::fs::metadata(&target).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
            0o640
        );
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
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
