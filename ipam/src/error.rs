//! What goes wrong in IPAM, typed. The CNI code of each failure is chosen
//! in one place, `From<IpamError> for CniError`, where a plugin answers
//! (host-local and static are [`plexus_cni::skel::TypedPlugin`]s).

use plexus_cni::error::ErrorCode;
use plexus_cni::flock::LockFileError;
use plexus_cni::CniError;

use crate::codes;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpamError {
    /// A key of the configuration is invalid (`ipam.ranges[0][0].subnet`).
    #[error("{field}: {reason}")]
    Config { field: String, reason: String },
    /// A CNI parameter is invalid (`CNI_ARGS`).
    #[error("{var}: {reason}")]
    Env { var: String, reason: String },
    /// The configuration's CNI version cannot carry what it asks for.
    #[error("{field}: {reason}")]
    IncompatibleVersion { field: String, reason: String },
    /// A file could not be read or written.
    #[error("{what}: {reason}")]
    Io { what: String, reason: String },
    /// A requested address is allocated to another attachment.
    #[error("{0}")]
    AddressInUse(String),
    /// A range set has no free address left.
    #[error("{0}")]
    RangeExhausted(String),
    /// STATUS: every address of a range set is allocated.
    #[error("{0}")]
    Full(String),
    /// The attachment already holds an address in the range set.
    #[error("{0}")]
    DuplicateAllocation(String),
    /// CHECK: the attachment holds no address.
    #[error("{0}")]
    NotAllocated(String),
    /// CHECK: the attachment's addresses differ from the configuration.
    #[error("{0}")]
    CheckMismatch(String),
    /// A route of the configuration the protocol crate could not read (its
    /// decoding error): a configuration error, not a result's.
    #[error("{}", .0.details)]
    BadRoute(CniError),
    /// The store's lock file: held by another process past the bound
    /// (code 11), or not opened.
    #[error(transparent)]
    Lock(#[from] LockFileError),
    /// A failure of the protocol layer (decoding, `CNI_ARGS`), already a CNI
    /// error with its code.
    #[error(transparent)]
    Cni(#[from] CniError),
}

impl IpamError {
    pub(crate) fn config(field: impl Into<String>, reason: impl Into<String>) -> IpamError {
        IpamError::Config {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn env(var: impl Into<String>, reason: impl Into<String>) -> IpamError {
        IpamError::Env {
            var: var.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn io(what: impl Into<String>, reason: impl std::fmt::Display) -> IpamError {
        IpamError::Io {
            what: what.into(),
            reason: reason.to_string(),
        }
    }
}

impl From<IpamError> for CniError {
    fn from(e: IpamError) -> CniError {
        let plugin = |code: u32, msg: &str, details: String| {
            CniError::new(ErrorCode::Plugin(code), msg, details)
        };
        match e {
            IpamError::Cni(e) => e,
            IpamError::Lock(e) => e.into(),
            IpamError::Config { field, reason } => CniError::invalid_config(field, reason),
            IpamError::BadRoute(e) => CniError::new(
                ErrorCode::InvalidConfig,
                "invalid network configuration",
                e.details,
            ),
            IpamError::Env { var, reason } => CniError::invalid_env(var, reason),
            IpamError::IncompatibleVersion { field, reason } => {
                CniError::incompatible_version(field, reason)
            }
            IpamError::Io { what, reason } => CniError::io(what, reason),
            IpamError::AddressInUse(d) => plugin(codes::ADDRESS_IN_USE, "address in use", d),
            IpamError::RangeExhausted(d) => {
                plugin(codes::RANGE_EXHAUSTED, "no IP addresses available", d)
            }
            IpamError::Full(d) => {
                CniError::new(ErrorCode::NotAvailable, "no IP addresses available", d)
            }
            IpamError::DuplicateAllocation(d) => {
                plugin(codes::DUPLICATE_ALLOCATION, "duplicate allocation", d)
            }
            IpamError::NotAllocated(d) => {
                CniError::new(ErrorCode::UnknownContainer, "no address allocated", d)
            }
            IpamError::CheckMismatch(d) => {
                plugin(codes::CHECK_MISMATCH, "address does not match", d)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_has_one_code() {
        let text = || "x".to_string();
        let plugin = ErrorCode::Plugin;
        let cases = [
            (IpamError::config("f", "r"), ErrorCode::InvalidConfig),
            (
                IpamError::env("CNI_ARGS", "r"),
                ErrorCode::InvalidEnvironment,
            ),
            (IpamError::io("w", "r"), ErrorCode::Io),
            (
                IpamError::AddressInUse(text()),
                plugin(codes::ADDRESS_IN_USE),
            ),
            (
                IpamError::RangeExhausted(text()),
                plugin(codes::RANGE_EXHAUSTED),
            ),
            (
                IpamError::DuplicateAllocation(text()),
                plugin(codes::DUPLICATE_ALLOCATION),
            ),
            (
                IpamError::CheckMismatch(text()),
                plugin(codes::CHECK_MISMATCH),
            ),
            (IpamError::NotAllocated(text()), ErrorCode::UnknownContainer),
            (IpamError::Full(text()), ErrorCode::NotAvailable),
            (
                IpamError::Lock(LockFileError::Busy {
                    path: "/l".into(),
                    busy: text(),
                    waited: std::time::Duration::ZERO,
                }),
                ErrorCode::TryAgainLater,
            ),
        ];
        for (e, code) in cases {
            assert_eq!(CniError::from(e.clone()).code, code, "{e:?}");
        }
        // The details are the error's text, the field first.
        let e = CniError::from(IpamError::config("ipam.subnet", "missing"));
        assert_eq!(e.details, "ipam.subnet: missing");
        // A route the protocol crate could not decode is a config error.
        let e = CniError::from(IpamError::BadRoute(CniError::decode(
            "ipam.routes[0].dst",
            "missing",
        )));
        assert_eq!(
            (e.code, e.msg.as_str(), e.details.as_str()),
            (
                ErrorCode::InvalidConfig,
                "invalid network configuration",
                "ipam.routes[0].dst: missing"
            )
        );
        // A protocol error passes through unchanged.
        let inner = CniError::new(
            ErrorCode::TryAgainLater,
            "try again later",
            "lock: still locked",
        );
        assert_eq!(CniError::from(IpamError::from(inner.clone())), inner);
    }
}
