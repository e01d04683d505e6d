//! The one undo mechanism of the data plane: what a half-done ADD changed,
//! taken back newest first when it fails (and, as a backstop, when it
//! panics). Interface drivers register the links they create and the IPAM
//! ADD; chained plugins register what they change (a saved file, a link
//! setting, sysctls).

use crate::drivers::error::DriverError;

type Step<'a> = Box<dyn FnOnce() -> Result<(), DriverError> + 'a>;

/// What a half-done ADD must take back, undone newest first when the ADD
/// fails (and, as a backstop, when it panics).
#[derive(Default)]
pub(crate) struct Undo<'a> {
    steps: Vec<(String, Step<'a>)>,
}

impl<'a> Undo<'a> {
    pub fn push(
        &mut self,
        what: impl Into<String>,
        step: impl FnOnce() -> Result<(), DriverError> + 'a,
    ) {
        self.steps.push((what.into(), Box::new(step)));
    }

    /// Keep everything on success; undo and return the error otherwise,
    /// with the undo steps that failed too ([`DriverError::RolledBack`]: as
    /// a CNI error, marked `undone` when every step succeeded, so nothing
    /// of this ADD is left for the runtime's DEL to remove).
    pub fn finish<T>(mut self, outcome: Result<T, DriverError>) -> Result<T, DriverError> {
        match outcome {
            Ok(v) => {
                self.steps.clear();
                Ok(v)
            }
            Err(error) => {
                let undo_failed = self
                    .steps
                    .drain(..)
                    .rev()
                    .filter_map(|(what, step)| step().err().map(|u| (what, u)))
                    .collect();
                Err(DriverError::RolledBack {
                    error: Box::new(error),
                    undo_failed,
                })
            }
        }
    }
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        for (_, step) in self.steps.drain(..).rev() {
            let _ = step();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drivers::error::sys_error;

    #[test]
    fn undo_runs_newest_first_and_reports_failures() {
        use std::cell::RefCell;
        let log = RefCell::new(Vec::new());
        let mut undo = Undo::default();
        undo.push("one", || {
            log.borrow_mut().push(1);
            Ok(())
        });
        undo.push("two", || {
            log.borrow_mut().push(2);
            Err(sys_error("x", "boom"))
        });
        let e = undo
            .finish::<()>(Err(sys_error("step", "failed")))
            .unwrap_err();
        assert_eq!(*log.borrow(), [2, 1]);
        assert_eq!(
            e,
            DriverError::RolledBack {
                error: Box::new(sys_error("step", "failed")),
                undo_failed: vec![("two".into(), sys_error("x", "boom"))],
            }
        );

        let mut undo = Undo::default();
        undo.push("never", || {
            log.borrow_mut().push(9);
            Ok(())
        });
        undo.finish(Ok(())).unwrap();
        assert_eq!(*log.borrow(), [2, 1]);
    }
}
