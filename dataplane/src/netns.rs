//! Network namespaces.
//!
//! # The namespace model
//!
//! A network namespace is a property of a *thread*, not of a process:
//! `setns(2)` moves only the calling thread. Code that switches a thread into
//! a pod's namespace and back has one failure mode that is hard to see: a
//! panic or early return between the two `setns` calls leaves the thread (and
//! whatever later runs on it) in the pod's namespace. [`NetNs::run`] therefore
//! moves the calling thread only inside a guard whose drop moves it back, on
//! return and on unwinding alike, and aborts the process if it cannot: no
//! code ever runs after `run` in the wrong namespace. The data plane has no
//! thread pool or async runtime that could run foreign work on the thread
//! meanwhile: its sockets are blocking, driven by the caller.
//!
//! Only a few things resolve the namespace at the moment they happen, and
//! only they need `run`: creating a socket (a netlink socket stays bound to
//! the namespace it was created in, whichever thread later drives it, see
//! [`crate::netlink`]) and opening `/proc/sys/net/...` (see
//! [`crate::sysctl`]). Switching costs two `setns` calls; a thread per visit,
//! which this replaced, cost about 0.2 ms each, a tenth of an ADD.
//! `unshare(CLONE_NEWNET)`, which cannot be undone the same way, still runs
//! on a short-lived thread of its own when a named namespace is created.
//!
//! A [`NetNs`] keeps the namespace file open, so the namespace stays alive and
//! addressable (e.g. by `IFLA_NET_NS_FD` in a netlink request) even if its
//! bind mount is removed meanwhile.
//!
//! # Named namespaces
//!
//! [`NetNs::create_named`] and [`NetNs::delete_named`] manage
//! `/var/run/netns/NAME` exactly as `ip netns add/delete` do, so namespaces
//! made by either tool are interchangeable.

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::fcntl::{open, OFlag};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{setns, unshare, CloneFlags};
use nix::sys::stat::Mode;

use crate::error::{Errno, Error, Result};

/// Where named namespaces live, as `ip netns` expects them.
pub const NETNS_RUN_DIR: &str = "/var/run/netns";

/// `NS_GET_NSTYPE` from linux/nsfs.h: `_IO(0xb7, 0x3)`.
const NS_GET_NSTYPE: u32 = 0xb703;

/// An open handle on a network namespace.
pub struct NetNs {
    fd: OwnedFd,
    path: PathBuf,
}

impl fmt::Debug for NetNs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetNs")
            .field("path", &self.path)
            .field("fd", &self.fd.as_raw_fd())
            .finish()
    }
}

/// What a runtime's `CNI_NETNS` turned out to be.
#[derive(Debug)]
pub enum PodNetns {
    /// A namespace other than the caller's: the pod's.
    Pod(NetNs),
    /// No namespace any more (or never): what a DEL must tolerate.
    Gone,
    /// The namespace the caller itself runs in: the node's. No pod has it,
    /// and acting on it as a pod's would configure, or tear down, the node
    /// (a `CNI_NETNS` of `/proc/self/ns/net`, or a `/run/netns` name bound
    /// to the node's namespace).
    Node(NetNs),
}

impl NetNs {
    /// Opens the namespace at `path` (`/var/run/netns/X`, `/proc/PID/ns/net`,
    /// any bind mount of one). Fails with EINVAL if the file is not a network
    /// namespace.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let fd = open(path, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|e| Error::os("open network namespace", path, e))?;
        Self::from_fd(fd, path.to_path_buf())
    }

    /// A namespace some other process opened (thick mode: the shim's
    /// descriptor, passed over the daemon's socket), known as `path` in
    /// messages and lookups. Fails with EINVAL if `fd` is not a network
    /// namespace.
    pub fn from_fd(fd: OwnedFd, path: PathBuf) -> Result<Self> {
        // SAFETY: plain ioctl on a descriptor we own; takes no argument.
        let ty = unsafe { libc::ioctl(fd.as_raw_fd(), NS_GET_NSTYPE as _) };
        if ty < 0 {
            // ENOTTY: not an nsfs file at all (a regular file, a directory...).
            let errno = match Errno::last() {
                Errno::ENOTTY => Errno::EINVAL,
                e => e,
            };
            return Err(Error::os(
                "open network namespace (not a namespace file)",
                &path,
                errno,
            ));
        }
        if ty != libc::CLONE_NEWNET {
            return Err(Error::os(
                "open network namespace (a namespace of another type)",
                &path,
                Errno::EINVAL,
            ));
        }
        Ok(NetNs { fd, path })
    }

    /// Another handle on the same namespace (a duplicated descriptor).
    pub fn try_clone(&self) -> Result<Self> {
        let fd = self
            .fd
            .try_clone()
            .map_err(|e| Error::io("dup", &self.path, &e))?;
        Ok(NetNs {
            fd,
            path: self.path.clone(),
        })
    }

    /// The namespace of the calling thread.
    pub fn current() -> Result<Self> {
        // thread-self, not self: /proc/self is the thread-group leader, which
        // may sit in another namespace than the caller.
        Self::open("/proc/thread-self/ns/net")
    }

    /// Opens the named namespace `/var/run/netns/NAME`.
    pub fn open_named(name: &str) -> Result<Self> {
        Self::open(named_path(name)?)
    }

    /// The path this handle was opened from (for messages; it may have been
    /// unmounted since).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The raw descriptor, valid as long as `self` lives (for
    /// `IFLA_NET_NS_FD`).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Opens the pod namespace a runtime names (`CNI_NETNS`) and tells what
    /// it is: see [`PodNetns`].
    pub fn open_pod(path: impl AsRef<Path>) -> Result<PodNetns> {
        match NetNs::open_existing(path)? {
            Some(ns) => ns.as_pod(),
            None => Ok(PodNetns::Gone),
        }
    }

    /// Opens the namespace at `path`; `None` when it is gone: deleted
    /// (ENOENT), or the bind mount removed and the file left (EINVAL), the
    /// namespace and all that lived in it with it.
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Option<Self>> {
        match NetNs::open(path) {
            Ok(ns) => Ok(Some(ns)),
            Err(e) if matches!(e.errno(), Some(Errno::ENOENT | Errno::EINVAL)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// This namespace as a runtime's `CNI_NETNS`: the pod's, or the node's
    /// when it is the caller's own (see [`PodNetns`]).
    pub fn as_pod(self) -> Result<PodNetns> {
        // The caller's own namespace by a stat of its nsfs link: no second
        // open on the ADD path.
        let own = std::fs::metadata(THREAD_NETNS)
            .map_err(|e| Error::io("stat", Path::new(THREAD_NETNS), &e))?;
        if self.identity()? == (own.dev(), own.ino()) {
            return Ok(PodNetns::Node(self));
        }
        Ok(PodNetns::Pod(self))
    }

    /// Whether both handles refer to the same namespace (same nsfs inode).
    pub fn same_as(&self, other: &NetNs) -> Result<bool> {
        Ok(self.identity()? == other.identity()?)
    }

    fn identity(&self) -> Result<(u64, u64)> {
        let st =
            nix::sys::stat::fstat(self.fd.as_fd()).map_err(|e| Error::os("stat", &self.path, e))?;
        Ok((st.st_dev, st.st_ino))
    }

    /// Runs `f` with the calling thread inside this namespace and returns its
    /// result; the thread is back in its own namespace when `run` returns or
    /// unwinds (see the module docs). A panic in `f` propagates.
    ///
    /// Threads that `f` itself spawns inherit the namespace; they should not
    /// outlive `f`.
    pub fn run<R>(&self, f: impl FnOnce() -> R) -> Result<R> {
        let home = open(
            THREAD_NETNS,
            OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::os("open", Path::new(THREAD_NETNS), e))?;
        setns(self.fd.as_fd(), CloneFlags::CLONE_NEWNET)
            .map_err(|e| Error::os("setns into", &self.path, e))?;
        let _back = ReturnHome(home);
        Ok(f())
    }

    /// Makes the child that `cmd` spawns join this namespace between fork and
    /// exec, so the program runs inside it from its first instruction (as a
    /// CNI plugin runs in the namespace its runtime calls it from). This
    /// handle must stay open until `cmd` is spawned.
    pub fn join_in_child<'c>(
        &self,
        cmd: &'c mut std::process::Command,
    ) -> &'c mut std::process::Command {
        use std::os::unix::process::CommandExt;
        let fd = self.raw_fd();
        // SAFETY: only setns(2), which is async-signal-safe, runs in the
        // forked child before exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        }
    }

    /// Creates the named namespace `/var/run/netns/NAME` like `ip netns add`:
    /// the run directory is made a shared mount point (so the namespace mount
    /// propagates to other mount namespaces), an empty file is created, and a
    /// fresh namespace, `unshare`d on a dedicated thread, is bind-mounted on
    /// it. Fails with EEXIST if the name is taken.
    pub fn create_named(name: &str) -> Result<Self> {
        let path = named_path(name)?;
        prepare_run_dir()?;
        // The mount point: an empty file, created exclusively so that two
        // creators of one name can't both succeed.
        drop(
            open(
                &path,
                OFlag::O_RDONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| Error::os("create network namespace file", &path, e))?,
        );
        let mounted = run_on_thread(&path, || {
            unshare(CloneFlags::CLONE_NEWNET)
                .map_err(|e| Error::os("unshare network namespace for", &path, e))?;
            mount(
                Some("/proc/thread-self/ns/net"),
                &path,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .map_err(|e| Error::os("bind-mount network namespace on", &path, e))
        });
        if let Err(e) = mounted {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        Self::open(&path)
    }

    /// Deletes the named namespace like `ip netns delete`: detaches the bind
    /// mount and removes the file. The namespace itself disappears once no
    /// process, mount or open handle refers to it any more. Returns
    /// `Ok(false)` if there was nothing to delete.
    pub fn delete_named(name: &str) -> Result<bool> {
        let path = named_path(name)?;
        let unmounted = match umount2(&path, MntFlags::MNT_DETACH) {
            Ok(()) => true,
            // EINVAL: exists but is not a mount point; ENOENT: absent.
            Err(Errno::EINVAL | Errno::ENOENT) => false,
            Err(e) => return Err(Error::os("unmount network namespace", &path, e)),
        };
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(unmounted),
            Err(e) => Err(Error::io("remove network namespace file", &path, &e)),
        }
    }
}

impl AsFd for NetNs {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// `/var/run/netns/NAME` after checking that NAME is a single, plain path
/// component.
pub fn named_path(name: &str) -> Result<PathBuf> {
    let bad = |reason: &str| Err(Error::invalid("network namespace name", name, reason));
    if name.is_empty() {
        return bad("empty");
    }
    if name == "." || name == ".." {
        return bad("not a file name");
    }
    if name.contains(['/', '\0']) {
        return bad("must not contain '/' or NUL");
    }
    if name.len() > 255 {
        return bad("longer than 255 bytes");
    }
    Ok(Path::new(NETNS_RUN_DIR).join(name))
}

/// The calling thread's own namespace.
const THREAD_NETNS: &str = "/proc/thread-self/ns/net";

/// Moves the thread back into the namespace it came from when dropped.
struct ReturnHome(OwnedFd);

impl Drop for ReturnHome {
    fn drop(&mut self) {
        if let Err(e) = setns(self.0.as_fd(), CloneFlags::CLONE_NEWNET) {
            // Running on in the pod's namespace could change the wrong one.
            tracing::error!("cannot return to the thread's own network namespace: {e}; aborting");
            std::process::abort();
        }
    }
}

/// Runs `f` on a fresh scoped thread; its result is returned, a panic is
/// propagated.
fn run_on_thread<R: Send>(label: &Path, f: impl FnOnce() -> Result<R> + Send) -> Result<R> {
    std::thread::scope(|s| {
        let handle = std::thread::Builder::new()
            .name("plexus-netns".into())
            .spawn_scoped(s, f)
            .map_err(|e| Error::io("spawn thread for namespace", label, &e))?;
        match handle.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Serialises the first-use setup of the run directory inside this process,
/// so two threads can't both stack a bind mount on it.
static RUN_DIR_SETUP: Mutex<()> = Mutex::new(());

/// Makes `/var/run/netns` exist and be a shared mount point, as `ip netns`
/// does: mark it shared; if it isn't a mount point yet (EINVAL), bind-mount it
/// on itself once and retry.
fn prepare_run_dir() -> Result<()> {
    let _guard = RUN_DIR_SETUP.lock().unwrap_or_else(|p| p.into_inner());
    let dir = Path::new(NETNS_RUN_DIR);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|e| Error::io("create directory", dir, &e))?;
    let mut made_mount_point = false;
    loop {
        match mount(
            None::<&str>,
            dir,
            Some("none"),
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            None::<&str>,
        ) {
            Ok(()) => return Ok(()),
            Err(Errno::EINVAL) if !made_mount_point => {
                mount(
                    Some(dir),
                    dir,
                    Some("none"),
                    MsFlags::MS_BIND | MsFlags::MS_REC,
                    None::<&str>,
                )
                .map_err(|e| Error::os("bind-mount onto itself", dir, e))?;
                made_mount_point = true;
            }
            Err(e) => return Err(Error::os("make shared mount point", dir, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_path_accepts_plain_names() {
        assert_eq!(
            named_path("cni-1234").unwrap(),
            Path::new("/var/run/netns/cni-1234")
        );
    }

    #[test]
    fn named_path_rejects_path_tricks() {
        for n in ["", ".", "..", "a/b", "../etc", "a\0b", &"x".repeat(256)] {
            let e = named_path(n).unwrap_err();
            assert!(matches!(e, Error::Invalid { .. }), "{n:?}: {e}");
        }
    }
}
