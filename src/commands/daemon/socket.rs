//! The daemon's unix socket: root's only. It lives in a directory that root
//! owns and nobody else may write (so nobody can swap the socket), is mode
//! 0600, and each caller's credentials are checked again on connect.

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use super::DaemonError;

/// Listen on `path`, replacing the socket of a daemon that is gone; another
/// daemon still answering there is an error, never displaced.
pub fn bind(path: &Path) -> Result<UnixListener, DaemonError> {
    let failed = |reason: String| DaemonError::Socket {
        path: path.to_path_buf(),
        reason,
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| failed("has no directory".into()))?;
    if !dir.exists() {
        fs::create_dir_all(dir).map_err(|e| failed(format!("creating {}: {e}", dir.display())))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| failed(format!("chmod {}: {e}", dir.display())))?;
    }
    let meta = fs::metadata(dir).map_err(|e| failed(format!("{}: {e}", dir.display())))?;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(failed(format!(
            "its directory {} is owned by uid {}, not by this daemon's uid {me}",
            dir.display(),
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(failed(format!(
            "its directory {} is writable by others (mode {:o}): anyone could replace the socket",
            dir.display(),
            meta.mode() & 0o777
        )));
    }
    match fs::symlink_metadata(path) {
        Ok(existing) if !existing.file_type().is_socket() => {
            return Err(failed("exists and is not a socket".into()))
        }
        Ok(_) if UnixStream::connect(path).is_ok() => {
            return Err(failed("another daemon is serving on it".into()))
        }
        Ok(_) => {
            fs::remove_file(path).map_err(|e| failed(format!("removing the old socket: {e}")))?
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(failed(e.to_string())),
    }
    let listener = UnixListener::bind(path).map_err(|e| failed(e.to_string()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .map_err(|e| failed(format!("chmod: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| failed(e.to_string()))?;
    Ok(listener)
}

/// `Err(why)` unless the peer runs as this daemon's user (root on a node).
pub fn check_peer(stream: &tokio::net::UnixStream) -> Result<(), String> {
    let me = nix::unistd::geteuid().as_raw();
    match stream.peer_cred() {
        Ok(cred) if cred.uid() == me => Ok(()),
        Ok(cred) => Err(format!(
            "the caller runs as uid {} (pid {:?}); only uid {me} may call",
            cred.uid(),
            cred.pid()
        )),
        Err(e) => Err(format!("the caller's credentials cannot be read: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_is_root_only_and_never_displaces_a_live_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/plexus.sock");
        let listener = bind(&path).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        let e = bind(&path).unwrap_err();
        assert!(e.to_string().contains("another daemon is serving"), "{e}");
        // A daemon that is gone leaves its socket; the next one takes over.
        drop(listener);
        bind(&path).unwrap();
    }

    #[test]
    fn a_directory_others_may_write_or_a_file_in_the_way_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let e = bind(&open.join("s.sock")).unwrap_err();
        assert!(e.to_string().contains("writable by others"), "{e}");
        let file = dir.path().join("plain");
        fs::write(&file, "x").unwrap();
        let e = bind(&file).unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
    }
}
