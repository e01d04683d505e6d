//! Exclusive `flock`s with a bounded wait: how plexus serializes the
//! processes that share a piece of node state (host-local's network
//! directory, an SR-IOV VF).

use std::fs::File;
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_times_out_and_is_free_once_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let open = || File::create(&path).unwrap();
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
}
