//! What goes wrong in a driver, typed. The CNI code of each failure is
//! chosen in one place, `From<DriverError> for CniError`, where a driver
//! answers (the drivers are [`plexus_cni::skel::TypedPlugin`]s).

use std::fmt::Display;
use std::path::Path;

use plexus_cni::error::codes;
use plexus_cni::flock::LockFileError;
use plexus_cni::names::{ContainerId, IfName, NetnsPath};
use plexus_cni::{CniError, ErrorCode};

use crate::Error;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// A key of the configuration is invalid (`vlan`, `ipam`).
    #[error("{field}: {reason}")]
    Config { field: String, reason: String },
    /// The configuration turns on a feature plexus cannot honour yet.
    #[error("{key}: {why}")]
    Unsupported { key: String, why: String },
    /// The kernel or the system failed while the driver was doing `what`.
    #[error("{what}: {reason}")]
    System { what: String, reason: String },
    /// A file of the driver's (a saved state, a device record) could not
    /// be read or written.
    #[error("{what}: {reason}")]
    Io { what: String, reason: String },
    /// A device record on disk is not one.
    #[error("{path}: {reason}")]
    BadRecord { path: String, reason: String },
    /// CHECK found the attachment different from its prevResult.
    #[error("{0}")]
    CheckFailed(String),
    /// CHECK found a configured value different in the pod.
    #[error("{what}: {reason}")]
    Mismatch { what: String, reason: String },
    /// ADD or CHECK without `CNI_NETNS`.
    #[error("CNI_NETNS: required for {command} but not set")]
    NoNetns { command: String },
    /// `CNI_NETNS` names no network namespace (or one that is gone).
    #[error("CNI_NETNS: {path} is not a network namespace (any more)")]
    NotANetns { path: NetnsPath },
    /// `CNI_NETNS` names the node's own namespace, which no pod has.
    #[error(
        "CNI_NETNS: {path} is the node's own network namespace (the one plexus runs in), \
         not a pod's; refusing to configure the node as a pod"
    )]
    NodeNetns { path: NetnsPath },
    /// `CNI_IFNAME` is taken in the pod (cni-SPEC §2 ADD: a plugin must not
    /// overwrite an existing interface).
    #[error("CNI_IFNAME: {ifname:?} already exists in the container namespace {sandbox}")]
    InterfaceTaken { ifname: IfName, sandbox: NetnsPath },
    /// A device handed whole to a pod whose namespace still exists (its
    /// DEL may be on its way): `key` is the configuration key naming it.
    #[error(
        "{key}: {device} is in use by container {container_id} (interface {ifname} in \
         {netns}, which still exists)"
    )]
    DeviceInUse {
        key: String,
        device: String,
        container_id: ContainerId,
        ifname: IfName,
        netns: NetnsPath,
    },
    /// A device's netdev is not back in the host namespace: after
    /// `waited_secs`, or at the one look a sweep takes (`None`).
    #[error("{}", netdev_not_back(.device, .waited_secs))]
    NetdevNotBack {
        device: String,
        waited_secs: Option<u64>,
    },
    /// The IPAM plugin's result has no address.
    #[error("ipam: the IPAM plugin's result has no IP address")]
    IpamNoAddress,
    /// DEL could not restore the values a chained plugin saved.
    #[error("restoring {ifname} from {path}: {}", .problems.join("; "))]
    RestoreFailed {
        ifname: IfName,
        path: String,
        problems: Vec<String>,
    },
    /// Giving back a device left by a container whose namespace is gone.
    #[error("{device} of container {container_id} (namespace gone): {error}")]
    Orphan {
        device: String,
        container_id: ContainerId,
        error: Box<DriverError>,
    },
    /// Several failures of one operation (`what`: "GC"), at least two:
    /// `DriverError::all` makes it.
    #[error("{}", join(.errors))]
    Several {
        what: &'static str,
        errors: Vec<DriverError>,
    },
    /// An ADD that failed with `error` and was taken back by its undo log;
    /// the undo steps that failed too, by what they undo.
    #[error("{error}{}", undo_failures(.undo_failed))]
    RolledBack {
        error: Box<DriverError>,
        undo_failed: Vec<(String, DriverError)>,
    },
    /// A device's lock file: held by another ADD, CHECK or DEL past the
    /// bound (code 11), or not opened.
    #[error(transparent)]
    Lock(#[from] LockFileError),
    /// An error of the protocol layer or of a delegated plugin (IPAM):
    /// already a CNI error with its code.
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

    /// A file of the driver's at `path` could not be read or written.
    pub(crate) fn io(path: &Path, e: impl Display) -> DriverError {
        DriverError::Io {
            what: path.display().to_string(),
            reason: e.to_string(),
        }
    }

    /// The failures of one operation as one error (`Ok` without any).
    pub(crate) fn all(what: &'static str, mut errors: Vec<DriverError>) -> Result<(), DriverError> {
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(DriverError::Several { what, errors }),
        }
    }
}

/// [`DriverError::NetdevNotBack`]'s details: whether the caller waited
/// for the netdev or looked once (a sweep, which the next one repeats).
fn netdev_not_back(device: &str, waited_secs: &Option<u64>) -> String {
    match waited_secs {
        Some(secs) => format!(
            "{device}: its netdev did not come back to the host namespace within {secs} s \
             (is the namespace it was in still held open?)"
        ),
        None => format!(
            "{device}: its netdev is not back in the host namespace yet (the namespace it was \
             in may still be held open); the next DEL or GC tries again"
        ),
    }
}

/// [`DriverError::Several`]'s text; its CNI details are `CniError::combine`'s.
fn join(errors: &[DriverError]) -> String {
    let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    texts.join("; ")
}

/// What an undo log appends to the error of the ADD it took back.
fn undo_failures(failed: &[(String, DriverError)]) -> String {
    failed
        .iter()
        .map(|(what, e)| format!("; undoing {what} failed too: {e}"))
        .collect()
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

/// A name from a prevResult that the driver looks up (`what`): one no link
/// can have fails as that lookup.
pub(crate) fn lookup_name(what: impl Display, name: &str) -> Result<IfName, DriverError> {
    IfName::new(name).map_err(|reason| {
        sys_error(
            what,
            format_args!("invalid interface name {name:?}: {reason}"),
        )
    })
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
        let failed = ErrorCode::Plugin(codes::PLUGIN_FAILED);
        let details = e.to_string();
        let (code, msg) = match e {
            DriverError::Cni(e) => return e,
            DriverError::Lock(e) => return e.into(),
            // The failure's own code and message, the device named first.
            DriverError::Orphan {
                device,
                container_id,
                error,
            } => {
                let e = CniError::from(*error);
                return CniError {
                    details: format!(
                        "{device} of container {container_id} (namespace gone): {}",
                        e.details
                    ),
                    ..e
                };
            }
            DriverError::Several { what, errors } => {
                return CniError::combine(what, errors.into_iter().map(CniError::from).collect())
            }
            // `undone` tells the runtime's DEL that nothing of this ADD is
            // left to remove: only when every undo step succeeded.
            DriverError::RolledBack { error, undo_failed } => {
                let mut e = CniError::from(*error);
                e.undone = undo_failed.is_empty();
                e.details.push_str(&undo_failures(&undo_failed));
                return e;
            }
            DriverError::Config { .. } => {
                (ErrorCode::InvalidConfig, "invalid network configuration")
            }
            DriverError::InterfaceTaken { .. } => {
                (ErrorCode::InvalidConfig, "interface already exists")
            }
            DriverError::Unsupported { .. } => (
                ErrorCode::UnsupportedField,
                "unsupported field in network configuration",
            ),
            DriverError::System { .. } => (ErrorCode::Io, "network operation failed"),
            DriverError::Io { .. } => (ErrorCode::Io, "I/O failure"),
            DriverError::BadRecord { .. } => (ErrorCode::Decode, "failed to decode content"),
            DriverError::NoNetns { .. } | DriverError::NodeNetns { .. } => (
                ErrorCode::InvalidEnvironment,
                "invalid environment variable",
            ),
            DriverError::NotANetns { .. } => (
                ErrorCode::UnknownContainer,
                "container unknown or does not exist",
            ),
            DriverError::DeviceInUse { .. } => (ErrorCode::TryAgainLater, "device in use"),
            DriverError::NetdevNotBack { .. } => {
                (ErrorCode::TryAgainLater, "device netdev not back")
            }
            DriverError::CheckFailed(_) => (failed, "the attachment does not match its prevResult"),
            DriverError::Mismatch { .. } => (failed, "check failed"),
            DriverError::IpamNoAddress => (failed, "IPAM plugin returned missing IP config"),
            DriverError::RestoreFailed { .. } => (failed, "plugin failed"),
        };
        CniError::new(code, msg, details)
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant's code and message; the details are the error's text.
    #[test]
    fn each_failure_has_one_code() {
        let failed = ErrorCode::Plugin(codes::PLUGIN_FAILED);
        let text = |s: &str| s.to_string();
        let cases = [
            (
                DriverError::config("vlan", "out of range"),
                ErrorCode::InvalidConfig,
                "invalid network configuration",
            ),
            (
                DriverError::InterfaceTaken {
                    ifname: IfName::new("eth0").unwrap(),
                    sandbox: NetnsPath::new("/run/netns/p").unwrap(),
                },
                ErrorCode::InvalidConfig,
                "interface already exists",
            ),
            (
                DriverError::Unsupported {
                    key: text("ipMasq"),
                    why: text("not yet"),
                },
                ErrorCode::UnsupportedField,
                "unsupported field in network configuration",
            ),
            (
                sys_error("create br0", "EPERM"),
                ErrorCode::Io,
                "network operation failed",
            ),
            (
                DriverError::io(Path::new("/var/lib/x"), "EACCES"),
                ErrorCode::Io,
                "I/O failure",
            ),
            (
                DriverError::BadRecord {
                    path: text("/var/lib/x"),
                    reason: text("not a VF record"),
                },
                ErrorCode::Decode,
                "failed to decode content",
            ),
            (
                DriverError::NoNetns {
                    command: text("ADD"),
                },
                ErrorCode::InvalidEnvironment,
                "invalid environment variable",
            ),
            (
                DriverError::NodeNetns {
                    path: NetnsPath::new("/proc/1/ns/net").unwrap(),
                },
                ErrorCode::InvalidEnvironment,
                "invalid environment variable",
            ),
            (
                DriverError::NotANetns {
                    path: NetnsPath::new("/x").unwrap(),
                },
                ErrorCode::UnknownContainer,
                "container unknown or does not exist",
            ),
            (
                DriverError::DeviceInUse {
                    key: text("deviceID"),
                    device: text("VF x"),
                    container_id: ContainerId::new("c").unwrap(),
                    ifname: IfName::new("net1").unwrap(),
                    netns: NetnsPath::new("/x").unwrap(),
                },
                ErrorCode::TryAgainLater,
                "device in use",
            ),
            (
                DriverError::NetdevNotBack {
                    device: text("VF x"),
                    waited_secs: None,
                },
                ErrorCode::TryAgainLater,
                "device netdev not back",
            ),
            (
                check_failed("eth0 not found"),
                failed,
                "the attachment does not match its prevResult",
            ),
            (mismatch("mtu", "is 1400"), failed, "check failed"),
            (
                DriverError::IpamNoAddress,
                failed,
                "IPAM plugin returned missing IP config",
            ),
            (
                DriverError::RestoreFailed {
                    ifname: IfName::new("net1").unwrap(),
                    path: text("/x"),
                    problems: vec![text("mtu: EPERM")],
                },
                failed,
                "plugin failed",
            ),
            (
                DriverError::Lock(LockFileError::Busy {
                    path: "/l".into(),
                    busy: text("VF busy"),
                    waited: std::time::Duration::ZERO,
                }),
                ErrorCode::TryAgainLater,
                "VF busy",
            ),
        ];
        for (e, code, msg) in cases {
            let details = e.to_string();
            let cni = CniError::from(e.clone());
            assert_eq!(
                (cni.code, cni.msg.as_str(), cni.details, cni.undone),
                (code, msg, details, false),
                "{e:?}"
            );
        }
        // A protocol error (a delegate's) passes through unchanged.
        let inner = CniError::new(ErrorCode::TryAgainLater, "busy", "lock: held");
        assert_eq!(CniError::from(DriverError::from(inner.clone())), inner);
    }

    #[test]
    fn composite_failures_keep_their_first_code() {
        let orphan = DriverError::Orphan {
            device: "VF x".into(),
            container_id: ContainerId::new("c1").unwrap(),
            error: Box::new(sys_error("move", "EBUSY")),
        };
        let cni = CniError::from(orphan);
        assert_eq!(
            (cni.code, cni.details.as_str()),
            (
                ErrorCode::Io,
                "VF x of container c1 (namespace gone): move: EBUSY"
            )
        );

        assert_eq!(DriverError::all("GC", vec![]), Ok(()));
        let one = DriverError::all("GC", vec![DriverError::IpamNoAddress]).unwrap_err();
        assert_eq!(one, DriverError::IpamNoAddress);
        let two = DriverError::all(
            "GC",
            vec![sys_error("a", "x"), DriverError::config("b", "y")],
        )
        .unwrap_err();
        let cni = CniError::from(two);
        assert_eq!(
            (cni.code, cni.msg.as_str(), cni.details.as_str()),
            (ErrorCode::Io, "GC: 2 operations failed", "a: x; b: y")
        );
    }

    /// An ADD taken back whole is `undone` (the runtime's DEL has nothing
    /// of it to remove); one whose undo failed too is not.
    #[test]
    fn a_rolled_back_add_is_undone_when_every_step_succeeded() {
        let rolled_back = |undo_failed| DriverError::RolledBack {
            error: Box::new(DriverError::config("vlan", "bad")),
            undo_failed,
        };
        let cni = CniError::from(rolled_back(vec![]));
        assert!(cni.undone);
        assert_eq!(
            (cni.code, cni.details.as_str()),
            (ErrorCode::InvalidConfig, "vlan: bad")
        );
        let cni = CniError::from(rolled_back(vec![(
            "veth".into(),
            sys_error("del", "EPERM"),
        )]));
        assert!(!cni.undone);
        assert_eq!(
            cni.details,
            "vlan: bad; undoing veth failed too: del: EPERM"
        );
    }
}
