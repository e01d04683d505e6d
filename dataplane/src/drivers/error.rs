//! What goes wrong in a driver, typed. The CNI code of each failure is
//! chosen in one place, `From<DriverError> for CniError`, where a driver
//! answers (the drivers are [`plexus_cni::skel::TypedPlugin`]s).

use std::fmt::Display;

use plexus_cni::error::codes;
use plexus_cni::{CniError, ErrorCode};

use crate::Error;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// A key of the configuration is invalid (`vlan`, `ipam`).
    #[error("{field}: {reason}")]
    Config { field: String, reason: String },
    /// The kernel or the system failed while the driver was doing `what`.
    #[error("{what}: {reason}")]
    System { what: String, reason: String },
    /// CHECK found the attachment different from its prevResult.
    #[error("{0}")]
    CheckFailed(String),
    /// CHECK found a configured value different in the pod.
    #[error("{what}: {reason}")]
    Mismatch { what: String, reason: String },
    /// An error of the protocol layer or of a delegated plugin (IPAM), or
    /// one an undo log has marked: already a CNI error with its code.
    #[error(transparent)]
    Cni(#[from] CniError),
}

impl DriverError {
    pub(crate) fn config(field: impl Into<String>, reason: impl Into<String>) -> DriverError {
        DriverError::Config {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// A failure of the kernel or the system while doing `what` (code 5).
pub(crate) fn sys_error(what: impl Display, e: impl Display) -> DriverError {
    DriverError::System {
        what: what.to_string(),
        reason: e.to_string(),
    }
}

/// `map_err` adapter for [`sys_error`].
pub(crate) fn sys<W: Display>(what: W) -> impl FnOnce(Error) -> DriverError {
    move |e| sys_error(what, e)
}

/// CHECK found the attachment different from its prevResult.
pub(crate) fn check_failed(details: impl Into<String>) -> DriverError {
    DriverError::CheckFailed(details.into())
}

/// A configured value that CHECK found different in the pod (code 103):
/// `what: reason`.
pub(crate) fn mismatch(what: impl Display, reason: impl Display) -> DriverError {
    DriverError::Mismatch {
        what: what.to_string(),
        reason: reason.to_string(),
    }
}

impl From<DriverError> for CniError {
    fn from(e: DriverError) -> CniError {
        let details = e.to_string();
        match e {
            DriverError::Cni(e) => e,
            DriverError::Config { field, reason } => CniError::invalid_config(field, reason),
            DriverError::System { .. } => {
                CniError::new(ErrorCode::Io, "network operation failed", details)
            }
            DriverError::CheckFailed(_) => CniError::plugin(
                codes::PLUGIN_FAILED,
                "the attachment does not match its prevResult",
                details,
            ),
            DriverError::Mismatch { .. } => {
                CniError::plugin(codes::PLUGIN_FAILED, "check failed", details)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_has_one_code() {
        let plugin = ErrorCode::Plugin(codes::PLUGIN_FAILED);
        let cases = [
            (
                DriverError::config("vlan", "out of range"),
                ErrorCode::InvalidConfig,
            ),
            (sys_error("create br0", "EPERM"), ErrorCode::Io),
            (check_failed("eth0 not found"), plugin),
            (mismatch("mtu", "is 1400"), plugin),
        ];
        for (e, code) in cases {
            let details = e.to_string();
            let cni = CniError::from(e.clone());
            assert_eq!((cni.code, cni.details), (code, details), "{e:?}");
        }
        assert!(matches!(
            sys_error("create br0", "EPERM"),
            DriverError::System { what, .. } if what == "create br0"
        ));
        // A protocol error (a delegate's, or one an undo log marked) passes
        // through unchanged, flags included.
        let mut inner = CniError::new(ErrorCode::TryAgainLater, "busy", "lock: held");
        inner.undone = true;
        assert_eq!(CniError::from(DriverError::from(inner.clone())), inner);
    }
}
