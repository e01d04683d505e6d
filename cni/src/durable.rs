//! Deferred fsyncs.
//!
//! A plugin that must make a write durable before it reports success
//! (host-local's allocations for an IPAMClaim) calls [`sync`]. Inside a
//! [`Scope`] the fsync runs on a background thread and the scope's owner
//! waits for it before reporting success itself; outside one it runs at once.
//! plexus opens a scope around a whole ADD, so the disk flush overlaps the
//! kernel work of the attachment instead of adding to it, and the guarantee
//! the runtime sees is unchanged: success is reported only once everything is
//! on disk. A scope belongs to the thread that began it.

use std::cell::RefCell;
use std::thread::JoinHandle;

use crate::error::CniError;

/// The syncs of a scope, each running on a thread of its own.
type Pending = Vec<(String, JoinHandle<std::io::Result<()>>)>;

thread_local! {
    /// The open scopes of this thread, innermost last.
    static SCOPES: RefCell<Vec<Pending>> = const { RefCell::new(Vec::new()) };
}

/// Deferred syncs started on this thread, waited for by [`Scope::wait`] or,
/// ignoring failures, on drop. Scopes nest; a sync goes to the innermost.
pub struct Scope {
    // Not Send: the scope's syncs are this thread's.
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl Scope {
    /// Opens a scope on the calling thread.
    pub fn begin() -> Scope {
        SCOPES.with(|s| s.borrow_mut().push(Vec::new()));
        Scope {
            _thread_bound: std::marker::PhantomData,
        }
    }

    /// Waits for every deferred sync; the first failure is the error.
    pub fn wait(self) -> Result<(), CniError> {
        let outcome = self.close();
        // Closed already: the drop must not close the scope around it.
        std::mem::forget(self);
        outcome
    }

    fn close(&self) -> Result<(), CniError> {
        let jobs = SCOPES.with(|s| s.borrow_mut().pop()).unwrap_or_default();
        let mut first = None;
        for (what, thread) in jobs {
            let outcome = thread
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the sync thread panicked")));
            if let Err(e) = outcome {
                first.get_or_insert(CniError::io(what, e));
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// Runs `sync` (an fsync and the like, `what` naming its object for errors)
/// now, or in the background when the calling thread is in a scope.
pub fn sync(
    what: impl Into<String>,
    sync: impl FnOnce() -> std::io::Result<()> + Send + 'static,
) -> Result<(), CniError> {
    let what = what.into();
    if SCOPES.with(|s| s.borrow().is_empty()) {
        return sync().map_err(|e| CniError::io(what, e));
    }
    match std::thread::Builder::new()
        .name("plexus-sync".into())
        .spawn(sync)
    {
        Ok(job) => {
            SCOPES.with(|s| {
                if let Some(innermost) = s.borrow_mut().last_mut() {
                    innermost.push((what, job));
                }
            });
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
    use std::sync::Arc;
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
    fn an_inner_scope_leaves_the_outer_one_open() {
        let outer = Scope::begin();
        Scope::begin().wait().unwrap();
        drop(Scope::begin());
        // Still in the outer scope: the failure is deferred, not returned.
        sync("dir d", || Err(std::io::Error::other("EIO"))).unwrap();
        assert!(outer.wait().is_err());
        assert!(sync("after", || Err(std::io::Error::other("now"))).is_err());
    }
}
