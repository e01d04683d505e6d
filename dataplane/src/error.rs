//! The one error type of the data plane.
//!
//! Every variant names the operation and the object it was applied to (a link
//! name or index, an address, a route, a namespace path, a sysctl key), so the
//! message alone tells an operator what failed. Kernel failures keep the raw
//! [`Errno`] so callers can react to the common cases without parsing text:
//! [`Error::is_exists`] (EEXIST), [`Error::is_not_found`] (ENODEV, ENOENT,
//! ESRCH, EADDRNOTAVAIL, or no such PCI device), [`Error::is_busy`] (EBUSY).

use std::path::{Path, PathBuf};

pub use nix::errno::Errno;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A data-plane failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel rejected a netlink request. `message` is the kernel's
    /// extended-ACK text when it sent one (e.g. "Unknown device type").
    #[error("{op} {object}: {errno}{}", message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Kernel {
        op: &'static str,
        object: String,
        errno: Errno,
        message: Option<String>,
    },
    /// The netlink conversation itself failed: the connection closed, the
    /// reply was malformed or did not arrive in time.
    #[error("{op} {object}: {reason}")]
    Netlink {
        op: &'static str,
        object: String,
        reason: String,
    },
    /// A system call on a file or namespace failed (open, setns, mount,
    /// read/write of a sysctl...).
    #[error("{op} {}: {errno}", path.display())]
    Os {
        op: &'static str,
        path: PathBuf,
        errno: Errno,
    },
    /// Reading or writing a sysctl inside a namespace failed (ENOENT: no
    /// such setting, e.g. for an absent interface; EINVAL: value refused).
    #[error("{op} sysctl {key} in {}: {errno}", netns.display())]
    Sysctl {
        op: &'static str,
        key: String,
        netns: PathBuf,
        errno: Errno,
    },
    /// A reachability probe ([`crate::probe`]) failed or got no answer.
    #[error("{op} {target} from {}: {reason}", netns.display())]
    Probe {
        op: &'static str,
        target: String,
        netns: PathBuf,
        reason: String,
    },
    /// A PCI device could not be found or read in sysfs ([`crate::pci`]).
    #[error(transparent)]
    Pci(#[from] crate::pci::PciError),
    /// A kernel reply named a link with a name plexus's rule
    /// ([`plexus_cni::names::IfName`]) refuses: only a link plexus did not
    /// make can have one.
    #[error("link index {index}: the kernel's interface name {name:?} is not one plexus accepts: {reason}")]
    KernelName {
        index: u32,
        name: String,
        reason: String,
    },
    /// An argument was rejected before reaching the kernel.
    #[error("invalid {what} {value:?}: {reason}")]
    Invalid {
        what: &'static str,
        value: String,
        reason: String,
    },
}

impl Error {
    /// The errno behind this error, if it came from the kernel or a syscall.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Kernel { errno, .. } | Error::Os { errno, .. } | Error::Sysctl { errno, .. } => {
                Some(*errno)
            }
            Error::Pci(e) => e.errno(),
            _ => None,
        }
    }

    /// The object already exists (EEXIST).
    pub fn is_exists(&self) -> bool {
        self.errno() == Some(Errno::EEXIST)
    }

    /// The object (link, address, route, file) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Pci(crate::pci::PciError::NotFound { .. }))
            || matches!(
                self.errno(),
                Some(Errno::ENODEV | Errno::ENOENT | Errno::ESRCH | Errno::EADDRNOTAVAIL)
            )
    }

    /// The object is busy (EBUSY), e.g. a name held by a link that is up.
    pub fn is_busy(&self) -> bool {
        self.errno() == Some(Errno::EBUSY)
    }

    pub(crate) fn os(op: &'static str, path: impl AsRef<Path>, errno: Errno) -> Self {
        Error::Os {
            op,
            path: path.as_ref().to_path_buf(),
            errno,
        }
    }

    pub(crate) fn io(op: &'static str, path: impl AsRef<Path>, err: &std::io::Error) -> Self {
        let errno = err.raw_os_error().map_or(Errno::EIO, Errno::from_raw);
        Self::os(op, path, errno)
    }

    pub(crate) fn invalid(
        what: &'static str,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Error::Invalid {
            what,
            value: value.into(),
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_error_names_op_object_and_errno() {
        let e = Error::Kernel {
            op: "create veth",
            object: "veth0".into(),
            errno: Errno::EEXIST,
            message: None,
        };
        assert_eq!(e.to_string(), "create veth veth0: EEXIST: File exists");
        assert!(e.is_exists());
        assert!(!e.is_not_found());
        let e = Error::Kernel {
            op: "create link",
            object: "x".into(),
            errno: Errno::EOPNOTSUPP,
            message: Some("Unknown device type".into()),
        };
        assert!(e.to_string().ends_with("(Unknown device type)"), "{e}");
    }

    #[test]
    fn os_error_names_path() {
        let e = Error::os("setns", "/var/run/netns/x", Errno::EINVAL);
        assert_eq!(
            e.to_string(),
            "setns /var/run/netns/x: EINVAL: Invalid argument"
        );
        assert_eq!(e.errno(), Some(Errno::EINVAL));
    }

    #[test]
    fn pci_errors_convert_and_keep_not_found() {
        use crate::pci::{PciAddress, PciError};
        let address = PciAddress::parse("0000:02:00.0").unwrap();
        let e: Error = PciError::NotFound {
            address,
            path: "/sys/bus/pci/devices/0000:02:00.0".into(),
        }
        .into();
        assert!(e.is_not_found(), "{e}");
        let e: Error = PciError::NotVirtualFunction { address }.into();
        assert!(!e.is_not_found(), "{e}");
        assert!(matches!(e, Error::Pci(PciError::NotVirtualFunction { .. })));
    }
}
