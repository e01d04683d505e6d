//! Exclusive `flock`s with a bounded wait: how plexus serializes the
//! processes that share a piece of node state (host-local's network
//! directory, an SR-IOV VF).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::error::{CniError, ErrorCode};

/// Why [`lock_exclusive`] gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockError {
    /// Another holder kept the lock for the whole wait.
    Timeout,
    /// `flock` itself failed.
    Os(Errno),
}

/// `flock(LOCK_EX)` on `file`, polled without blocking so the wait is
/// bounded by `timeout`. The lock is released when the returned guard (or
/// every descriptor of its open file) is dropped, also when the process
/// dies.
pub fn lock_exclusive(mut file: File, timeout: Duration) -> Result<Flock<File>, LockError> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_micros(100);
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(lock),
            Err((f, Errno::EWOULDBLOCK)) | Err((f, Errno::EINTR)) => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(LockError::Timeout);
                }
                thread::sleep(pause.min(deadline - now));
                pause = (pause * 2).min(Duration::from_millis(5));
                file = f;
            }
            Err((_, errno)) => return Err(LockError::Os(errno)),
        }
    }
}

/// Why [`lock_file`] gave up. Its CNI code is chosen in
/// `From<LockFileError> for CniError`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockFileError {
    /// Another process held the lock for the whole wait: code 11 (try again
    /// later), `busy` its message.
    #[error("{}: still locked by another process after {} ms", .path.display(), .waited.as_millis())]
    Busy {
        path: PathBuf,
        busy: String,
        waited: Duration,
    },
    /// Opening or locking the file failed: code 5.
    #[error("{}: {reason}", .path.display())]
    Io { path: PathBuf, reason: String },
}

impl From<LockFileError> for CniError {
    fn from(e: LockFileError) -> CniError {
        let details = e.to_string();
        match e {
            LockFileError::Busy { busy, .. } => {
                CniError::new(ErrorCode::TryAgainLater, busy, details)
            }
            LockFileError::Io { path, reason } => CniError::io(path.display().to_string(), reason),
        }
    }
}

/// Open the lock file at `path` (created, mode 0600, if missing) and take
/// its lock within `timeout`; `busy` says what is busy when another
/// process keeps it.
pub fn lock_file(path: &Path, timeout: Duration, busy: &str) -> Result<Flock<File>, LockFileError> {
    let io_error = |reason: String| LockFileError::Io {
        path: path.to_path_buf(),
        reason,
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| io_error(e.to_string()))?;
    lock_exclusive(file, timeout).map_err(|e| match e {
        LockError::Timeout => LockFileError::Busy {
            path: path.to_path_buf(),
            busy: busy.to_string(),
            waited: timeout,
        },
        LockError::Os(errno) => io_error(errno.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_times_out_and_is_free_once_dropped() {
        let lock = tempfile::NamedTempFile::new().unwrap();
        let open = || lock.reopen().unwrap();
        let held = lock_exclusive(open(), Duration::from_millis(10)).unwrap();
        let t0 = Instant::now();
        assert_eq!(
            lock_exclusive(open(), Duration::from_millis(50)).unwrap_err(),
            LockError::Timeout
        );
        assert!(t0.elapsed() >= Duration::from_millis(50));
        drop(held);
        lock_exclusive(open(), Duration::from_millis(10)).unwrap();
    }

    #[test]
    fn a_lock_file_is_created_and_a_busy_one_is_code_11() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let held = lock_file(&path, Duration::from_millis(10), "busy").unwrap();
        let e = lock_file(&path, Duration::from_millis(20), "thing busy").unwrap_err();
        assert!(
            matches!(&e, LockFileError::Busy { busy, waited, .. }
                if busy == "thing busy" && waited.as_millis() == 20),
            "{e:?}"
        );
        let answer = CniError::from(e);
        assert_eq!(
            (answer.code, answer.msg.as_str()),
            (ErrorCode::TryAgainLater, "thing busy")
        );
        assert!(
            answer.details.contains("x.lock: still locked"),
            "{answer:?}"
        );
        drop(held);
        lock_file(&path, Duration::from_millis(10), "busy").unwrap();
        let e = lock_file(
            &dir.path().join("none/x.lock"),
            Duration::from_millis(10),
            "busy",
        )
        .unwrap_err();
        assert!(matches!(e, LockFileError::Io { .. }), "{e:?}");
        assert_eq!(CniError::from(e).code, ErrorCode::Io);
    }
}
