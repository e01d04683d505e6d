//! Deferred fsyncs.
//!
//! A plugin that must make a write durable before it reports success
//! (host-local's allocations) calls [`sync`]. Inside a [`Scope`] the fsync
//! runs on a background thread and the scope's owner waits for it before
//! reporting success itself; outside one it runs at once. plexus opens a scope
//! around a whole ADD, so the disk flush overlaps the kernel work of the
//! attachment instead of adding to it, and the guarantee the runtime sees is
//! unchanged: success is reported only once everything is on disk.
//!
//! A scope belongs to the thread that began it. A thread that hands work to
//! another carries the scope along with [`current`] and [`Handle::enter`].
//! A worker that hands its result on before it ends can take its syncs along
//! instead ([`Handle::enter_deferring`]): they run on it after the hand-over,
//! sparing a thread start on the way to the result.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::error::CniError;

type SyncFn = Box<dyn FnOnce() -> std::io::Result<()> + Send>;

/// A sync of a scope: running on a thread of its own, or run already.
enum Job {
    Running(JoinHandle<std::io::Result<()>>),
    Done(std::io::Result<()>),
}
type Pending = Arc<Mutex<Vec<(String, Job)>>>;

thread_local! {
    static CURRENT: RefCell<Option<Pending>> = const { RefCell::new(None) };
    /// Syncs held for this thread to run itself (see [`Deferring`]).
    static DEFERRED: RefCell<Option<Vec<(String, SyncFn)>>> = const { RefCell::new(None) };
}

/// Deferred syncs started on this thread (and threads it handed the scope
/// to), waited for by [`Scope::wait`] or, ignoring failures, on drop.
pub struct Scope {
    pending: Pending,
    outer: Option<Pending>,
}

impl Scope {
    /// Opens a scope on the calling thread; a scope already open there is
    /// restored when this one ends.
    pub fn begin() -> Scope {
        let pending: Pending = Arc::default();
        let outer = CURRENT.with(|c| c.replace(Some(pending.clone())));
        Scope { pending, outer }
    }

    /// Waits for every deferred sync; the first failure is the error.
    pub fn wait(self) -> Result<(), CniError> {
        join_all(&self.pending)
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        let _ = join_all(&self.pending);
        let outer = self.outer.take();
        CURRENT.with(|c| *c.borrow_mut() = outer);
    }
}

fn join_all(pending: &Pending) -> Result<(), CniError> {
    let jobs = std::mem::take(&mut *pending.lock().unwrap_or_else(|p| p.into_inner()));
    let mut first = None;
    for (what, job) in jobs {
        let outcome = match job {
            Job::Running(thread) => thread
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the sync thread panicked"))),
            Job::Done(outcome) => outcome,
        };
        if let Err(e) = outcome {
            first.get_or_insert(CniError::io(what, e));
        }
    }
    first.map_or(Ok(()), Err)
}

/// The calling thread's scope (if any), to carry into another thread.
#[derive(Clone, Default)]
pub struct Handle(Option<Pending>);

pub fn current() -> Handle {
    Handle(CURRENT.with(|c| c.borrow().clone()))
}

impl Handle {
    /// Makes this scope the calling thread's until the guard is dropped.
    pub fn enter(&self) -> Entered {
        let outer = CURRENT.with(|c| c.replace(self.0.clone()));
        Entered { outer }
    }
}

impl Handle {
    /// Like [`Handle::enter`], but the syncs this thread asks for are held
    /// and run on it when the guard is dropped, their outcomes going to the
    /// scope. For a worker that hands its result on first (through a
    /// channel) and ends later: the syncs then start at once, without the
    /// thread start that delays the result.
    pub fn enter_deferring(&self) -> Deferring {
        if self.0.is_some() {
            DEFERRED.with(|d| *d.borrow_mut() = Some(Vec::new()));
        }
        Deferring {
            pending: self.0.clone(),
            _entered: self.enter(),
        }
    }
}

/// See [`Handle::enter_deferring`].
pub struct Deferring {
    pending: Option<Pending>,
    _entered: Entered,
}

impl Drop for Deferring {
    fn drop(&mut self) {
        // Syncs are only held inside a scope: without one they ran at once.
        let held = DEFERRED.with(|d| d.borrow_mut().take()).unwrap_or_default();
        if let Some(pending) = &self.pending {
            for (what, sync) in held {
                let outcome = sync();
                pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((what, Job::Done(outcome)));
            }
        }
    }
}

/// See [`Handle::enter`].
pub struct Entered {
    outer: Option<Pending>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let outer = self.outer.take();
        CURRENT.with(|c| *c.borrow_mut() = outer);
    }
}

/// Runs `sync` (an fsync and the like, `what` naming its object for errors)
/// now, or in the background when the calling thread is in a scope.
pub fn sync(
    what: impl Into<String>,
    sync: impl FnOnce() -> std::io::Result<()> + Send + 'static,
) -> Result<(), CniError> {
    let what = what.into();
    let Some(pending) = CURRENT.with(|c| c.borrow().clone()) else {
        return sync().map_err(|e| CniError::io(what, e));
    };
    let mut sync: Option<SyncFn> = Some(Box::new(sync));
    DEFERRED.with(|d| {
        if let Some(held) = d.borrow_mut().as_mut() {
            held.push((what.clone(), sync.take().expect("not taken yet")));
        }
    });
    let Some(sync) = sync else {
        return Ok(());
    };
    match std::thread::Builder::new()
        .name("plexus-sync".into())
        .spawn(sync)
    {
        Ok(job) => {
            pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((what, Job::Running(job)));
            Ok(())
        }
        // No thread to be had: the closure is gone with the failed spawn,
        // so say so rather than pretend the data is on disk.
        Err(e) => Err(CniError::io(what, format!("start a sync thread: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn without_a_scope_syncs_run_at_once() {
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        sync("x", move || {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        let e = sync("file f", || Err(std::io::Error::other("disk gone"))).unwrap_err();
        assert!(e.details.contains("file f"), "{e}");
    }

    #[test]
    fn a_scope_waits_for_its_syncs_and_reports_the_first_failure() {
        let ran = Arc::new(AtomicUsize::new(0));
        let scope = Scope::begin();
        for _ in 0..3 {
            let r = ran.clone();
            sync("ok", move || {
                std::thread::sleep(Duration::from_millis(20));
                r.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
        }
        sync("dir d", || Err(std::io::Error::other("EIO"))).unwrap();
        let e = scope.wait().unwrap_err();
        assert_eq!(ran.load(Ordering::SeqCst), 3, "all waited for");
        assert!(e.details.contains("dir d"), "{e}");
        // The scope is closed again: this runs inline.
        assert!(sync("after", || Err(std::io::Error::other("now"))).is_err());
    }

    #[test]
    fn a_deferring_worker_runs_its_syncs_after_handing_on_its_result() {
        let scope = Scope::begin();
        let handle = current();
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            let held = handle.enter_deferring();
            let r2 = r.clone();
            sync("file f", move || {
                r2.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
            sync("dir d", || Err(std::io::Error::other("EIO"))).unwrap();
            // Nothing ran yet: the result goes out first.
            tx.send(r.load(Ordering::SeqCst)).unwrap();
            drop(held);
            // Outside the deferring guard syncs are not held any more.
            assert!(sync("later", || Err(std::io::Error::other("x"))).is_err());
        });
        assert_eq!(rx.recv().unwrap(), 0);
        worker.join().unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        let e = scope.wait().unwrap_err();
        assert!(
            e.details.contains("dir d") && e.details.contains("EIO"),
            "{e}"
        );
    }

    #[test]
    fn a_handle_carries_the_scope_into_another_thread() {
        let ran = Arc::new(AtomicUsize::new(0));
        let scope = Scope::begin();
        let handle = current();
        let r = ran.clone();
        std::thread::spawn(move || {
            let _entered = handle.enter();
            sync("elsewhere", move || {
                std::thread::sleep(Duration::from_millis(20));
                r.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
        })
        .join()
        .unwrap();
        scope.wait().unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }
}
