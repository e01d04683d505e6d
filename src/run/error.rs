//! What goes wrong when plexus runs plugins, typed: [`RunError`] for the
//! executor ([`ExecError`] for running one plugin binary is its own). The
//! CNI code of each failure is chosen in one place, `From<RunError> for
//! CniError`, where plexus answers (the plugin's or the daemon's reply).
//!
//! A plugin's own error reply (built in or exec'd) is a CNI error already:
//! [`RunError::Plugin`] carries it, and the executor's context (which
//! attachment, which plugin, the rollback) wraps it in a variant whose
//! conversion prefixes its `details` and keeps its code, `msg` and
//! `undone` mark.

use std::fmt;
use std::path::PathBuf;

use crate::cni::env::CNI_NETNS;
use crate::cni::error::{codes, CniError, ErrorCode};
use crate::cni::names::{ContainerId, IfName, NetnsPath};
use crate::plan::PlanError;
use crate::record::{RecordError, State};

use super::exec::ExecError;

/// The executor's failures.
#[derive(Debug, Clone, PartialEq)]
pub enum RunError {
    /// A CNI error from the protocol layer: a plugin's reply (built in or
    /// exec'd), or a request that could not be built (`CNI_ARGS`,
    /// `cniVersion`, `prevResult`, a durable write of a built-in plugin).
    Plugin(CniError),
    /// Running a plugin binary failed.
    Exec(ExecError),
    /// plexus's record of the attachment.
    Record(RecordError),
    /// The planner's failure (the plan DEL falls back to); boxed, as the
    /// planner's errors are large and rare.
    Plan(Box<PlanError>),
    /// `CNI_NETNS` is missing; `reason` says what needs it.
    NoNetns { reason: &'static str },
    /// `CNI_NETNS` is the node's own namespace.
    NodeNetns { path: NetnsPath },
    /// A plan without attachments (a plan always has the cluster network).
    EmptyPlan,
    /// ADD found a record of an ADD not DEL'd yet.
    AlreadyAdded {
        container_id: ContainerId,
        ifname: IfName,
        path: PathBuf,
    },
    /// CHECK found an attachment whose ADD did not complete.
    NotAdded {
        network: String,
        ifname: IfName,
        state: State,
    },
    /// plexus has no record of the sandbox's ADD.
    UnknownContainer {
        container_id: ContainerId,
        ifname: IfName,
    },
    /// A hot-plug names an interface the sandbox has already.
    InterfaceTaken { network: String, ifname: IfName },
    /// A detach names the cluster network's interface.
    ClusterInterface { ifname: IfName },
    /// A plugin configuration without `type`.
    NoType,
    /// A plugin type the registry refuses to run.
    Refused { plugin_type: String, reason: String },
    /// The attachment's CNI device-info file could not be written or removed.
    DeviceInfoFile {
        network: String,
        ifname: IfName,
        path: PathBuf,
        reason: String,
    },
    /// multi-net-spec §4.1.2.1.9: a default-route change in the pod failed.
    Route {
        what: String,
        ifname: IfName,
        reason: String,
    },
    /// Plugin `index` (`plugin_type`) of an attachment failed.
    Step {
        network: String,
        ifname: IfName,
        index: usize,
        plugin_type: String,
        source: Box<RunError>,
    },
    /// The default-route step of an attachment failed.
    DefaultRoute {
        network: String,
        ifname: IfName,
        source: Box<RunError>,
    },
    /// The cluster network's configuration (GC, STATUS) failed.
    ClusterNetwork {
        network: String,
        source: Box<RunError>,
    },
    /// Plugin `index` of the cluster network failed (GC, STATUS).
    ClusterPlugin {
        network: String,
        index: usize,
        plugin_type: String,
        source: Box<RunError>,
    },
    /// GC's teardown of a stale record failed.
    StaleRecord {
        container_id: ContainerId,
        ifname: IfName,
        source: Box<RunError>,
    },
    /// A failed ADD whose rollback (`rollback`) or record write (`record`)
    /// failed too.
    AddFailed {
        error: Box<RunError>,
        rollback: Vec<RunError>,
        record: Option<RecordError>,
    },
    /// Several failures of one command (`what`: DEL, GC); at least two.
    Combined {
        what: &'static str,
        errors: Vec<RunError>,
    },
}

impl RunError {
    /// Whether the failing plugin took back everything it had done (see
    /// [`CniError::undone`]): a plugin's mark, kept through the context
    /// that names it and through a failed rollback, as the CNI error it
    /// converts to keeps it.
    pub fn undone(&self) -> bool {
        match self {
            RunError::Plugin(e) => e.undone,
            RunError::Step { source, .. }
            | RunError::DefaultRoute { source, .. }
            | RunError::ClusterNetwork { source, .. }
            | RunError::ClusterPlugin { source, .. }
            | RunError::StaleRecord { source, .. } => source.undone(),
            RunError::AddFailed { error, .. } => error.undone(),
            _ => false,
        }
    }

    /// The failures of one command (`what`) as its outcome: none is
    /// success, one is itself, more are [`RunError::Combined`].
    pub fn combined(what: &'static str, mut errors: Vec<RunError>) -> Result<(), RunError> {
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(RunError::Combined { what, errors }),
        }
    }

    /// This error as plugin `index` (`plugin_type`) of `network` (`ifname`).
    pub(crate) fn in_step(
        self,
        network: &str,
        ifname: &IfName,
        index: usize,
        plugin_type: &str,
    ) -> RunError {
        RunError::Step {
            network: network.to_string(),
            ifname: ifname.clone(),
            index,
            plugin_type: plugin_type.to_string(),
            source: Box::new(self),
        }
    }

    /// Whether the CNI error this converts to names the failing plugin
    /// already: an exec'd plugin's failure does (see
    /// [`ExecError::names_plugin`]); a built-in plugin's reply does not.
    fn names_plugin(&self) -> bool {
        matches!(self, RunError::Exec(e) if e.names_plugin())
    }

    pub(crate) fn route(
        what: impl Into<String>,
        ifname: &IfName,
        reason: impl fmt::Display,
    ) -> Self {
        RunError::Route {
            what: what.into(),
            ifname: ifname.clone(),
            reason: reason.to_string(),
        }
    }
}

/// The layers whose errors a [`RunError`] carries as they are.
macro_rules! carries {
    ($($variant:ident($error:ty)),*) => {$(
        impl From<$error> for RunError {
            fn from(e: $error) -> RunError {
                RunError::$variant(e)
            }
        }
    )*};
}

carries!(Plugin(CniError), Exec(ExecError), Record(RecordError));

impl From<PlanError> for RunError {
    fn from(e: PlanError) -> RunError {
        RunError::Plan(Box::new(e))
    }
}

/// As the CNI error it answers with.
impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let answer: CniError = self.clone().into();
        answer.fmt(f)
    }
}

impl std::error::Error for RunError {}

/// `source`, a failure of plugin `plugin_type` at `place`, its details
/// prefixed with the place and the type, unless the failure names the
/// plugin already (see [`RunError::names_plugin`]).
fn in_plugin(source: RunError, place: String, plugin_type: &str) -> CniError {
    let named = source.names_plugin();
    prefixed(source, |d| {
        if named {
            format!("{place}: {d}")
        } else {
            format!("{place}: {plugin_type}: {d}")
        }
    })
}

/// `inner` with `details` rewritten by `f`; code, `msg` and `undone` kept.
fn prefixed(inner: RunError, f: impl FnOnce(&str) -> String) -> CniError {
    let e = CniError::from(inner);
    CniError {
        details: f(&e.details),
        ..e
    }
}

impl From<RunError> for CniError {
    fn from(e: RunError) -> CniError {
        match e {
            RunError::Plugin(e) => e,
            RunError::Plan(e) => (*e).into(),
            RunError::Exec(e) => e.into(),
            RunError::Record(e) => e.into(),
            RunError::NoNetns { reason } => CniError::invalid_env(CNI_NETNS, reason),
            RunError::NodeNetns { path } => {
                CniError::from(plexus_dataplane::drivers::DriverError::NodeNetns { path })
            }
            RunError::EmptyPlan => CniError::invalid_config(
                "plan",
                "no attachment (a plan always attaches the cluster-wide default network)",
            ),
            RunError::AlreadyAdded {
                container_id,
                ifname,
                path,
            } => CniError::plugin(
                codes::ATTACHMENT_REJECTED,
                "attachment already exists",
                format!(
                    "container {container_id} interface {ifname}: plexus already has a record of \
                     an ADD that was not deleted ({}); the runtime must DEL it before adding \
                     again (cni-SPEC §2 ADD)",
                    path.display()
                ),
            ),
            RunError::NotAdded {
                network,
                ifname,
                state,
            } => CniError::plugin(
                codes::PLUGIN_FAILED,
                "attachment not added",
                format!("{network} ({ifname}): its ADD did not complete (state {state:?})"),
            ),
            RunError::UnknownContainer {
                container_id,
                ifname,
            } => CniError::new(
                ErrorCode::UnknownContainer,
                "container unknown",
                format!(
                    "container {container_id} interface {ifname}: plexus has no record of its ADD"
                ),
            ),
            RunError::InterfaceTaken { network, ifname } => CniError::invalid_config(
                "interface",
                format!("{network} ({ifname}): the sandbox already has an interface by that name"),
            ),
            RunError::ClusterInterface { ifname } => CniError::invalid_config(
                "interface",
                format!("{ifname} is the cluster network's: it is never detached"),
            ),
            RunError::NoType => CniError::invalid_config("type", "missing"),
            RunError::Refused {
                plugin_type,
                reason,
            } => CniError::plugin(
                codes::ATTACHMENT_REJECTED,
                "plugin type refused",
                format!("type: {plugin_type:?}: {reason}"),
            ),
            RunError::DeviceInfoFile {
                network,
                ifname,
                path,
                reason,
            } => CniError::io(
                format!("{network} ({ifname}) device-info file {}", path.display()),
                reason,
            ),
            RunError::Route {
                what,
                ifname,
                reason,
            } => CniError::plugin(
                codes::PLUGIN_FAILED,
                "default route (multi-net-spec §4.1.2.1.9)",
                format!("{what} on {ifname}: {reason}"),
            ),
            RunError::Step {
                network,
                ifname,
                index,
                plugin_type,
                source,
            } => in_plugin(
                *source,
                format!("{network} ({ifname}) plugins[{index}]"),
                &plugin_type,
            ),
            RunError::DefaultRoute {
                network,
                ifname,
                source,
            } => prefixed(*source, |d| {
                format!("{network} ({ifname}) default route (multi-net-spec §4.1.2.1.9): {d}")
            }),
            RunError::ClusterNetwork { network, source } => {
                CniError::from(*source).within(format!("cluster network {network}"))
            }
            RunError::ClusterPlugin {
                network,
                index,
                plugin_type,
                source,
            } => in_plugin(
                *source,
                format!("cluster network {network} plugins[{index}]"),
                &plugin_type,
            ),
            RunError::StaleRecord {
                container_id,
                ifname,
                source,
            } => prefixed(*source, |d| {
                format!("container {container_id} ({ifname}): {d}")
            }),
            RunError::AddFailed {
                error,
                rollback,
                record,
            } => {
                let mut e = CniError::from(*error);
                if !rollback.is_empty() {
                    let list: Vec<String> = rollback
                        .into_iter()
                        .map(|r| CniError::from(r).details)
                        .collect();
                    e.details = format!(
                        "{}; rollback failed, DEL will retry: {}",
                        e.details,
                        list.join("; ")
                    );
                }
                if let Some(record) = record {
                    e.details = format!("{}; {}", e.details, CniError::from(record).details);
                }
                e
            }
            RunError::Combined { what, errors } => {
                CniError::combine(what, errors.into_iter().map(CniError::from).collect())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cni(e: impl Into<CniError>) -> CniError {
        e.into()
    }

    #[test]
    fn each_failure_has_one_code() {
        let t = || "p".to_string();
        let failed = ErrorCode::Plugin(codes::PLUGIN_FAILED);
        let rejected = ErrorCode::Plugin(codes::ATTACHMENT_REJECTED);
        let source = || Box::new(RunError::NoType);
        let run = [
            (
                RunError::NoNetns { reason: "r" },
                ErrorCode::InvalidEnvironment,
            ),
            (
                RunError::NodeNetns {
                    path: NetnsPath::new("/n").unwrap(),
                },
                ErrorCode::InvalidEnvironment,
            ),
            (RunError::EmptyPlan, ErrorCode::InvalidConfig),
            (
                RunError::AlreadyAdded {
                    container_id: ContainerId::new("c").unwrap(),
                    ifname: IfName::new("eth0").unwrap(),
                    path: "/r".into(),
                },
                rejected,
            ),
            (
                RunError::NotAdded {
                    network: "n".into(),
                    ifname: IfName::new("net1").unwrap(),
                    state: State::Failed,
                },
                failed,
            ),
            (
                RunError::UnknownContainer {
                    container_id: ContainerId::new("c").unwrap(),
                    ifname: IfName::new("eth0").unwrap(),
                },
                ErrorCode::UnknownContainer,
            ),
            (
                RunError::InterfaceTaken {
                    network: "n".into(),
                    ifname: IfName::new("net1").unwrap(),
                },
                ErrorCode::InvalidConfig,
            ),
            (
                RunError::ClusterInterface {
                    ifname: IfName::new("eth0").unwrap(),
                },
                ErrorCode::InvalidConfig,
            ),
            (RunError::NoType, ErrorCode::InvalidConfig),
            (
                RunError::Refused {
                    plugin_type: t(),
                    reason: "r".into(),
                },
                rejected,
            ),
            (
                RunError::DeviceInfoFile {
                    network: "n".into(),
                    ifname: IfName::new("net1").unwrap(),
                    path: "/d".into(),
                    reason: "r".into(),
                },
                ErrorCode::Io,
            ),
            (
                RunError::route("add", &IfName::new("net1").unwrap(), "r"),
                failed,
            ),
            // Context keeps the code of what it wraps.
            (
                RunError::DefaultRoute {
                    network: "n".into(),
                    ifname: IfName::new("net1").unwrap(),
                    source: source(),
                },
                ErrorCode::InvalidConfig,
            ),
            (
                RunError::StaleRecord {
                    container_id: ContainerId::new("c").unwrap(),
                    ifname: IfName::new("eth0").unwrap(),
                    source: source(),
                },
                ErrorCode::InvalidConfig,
            ),
        ];
        for (e, code) in run {
            assert_eq!(cni(e.clone()).code, code, "{e:?}");
        }
        // A protocol error passes through unchanged.
        let inner = CniError::new(ErrorCode::TryAgainLater, "busy", "lock: held");
        assert_eq!(cni(RunError::from(inner.clone())), inner);
    }

    #[test]
    fn context_prefixes_details_and_keeps_the_rest() {
        let mut undone = CniError::invalid_config("mtu", "too big");
        undone.undone = true;
        let e = RunError::from(undone).in_step("ns/a", &IfName::new("net1").unwrap(), 2, "macvlan");
        assert!(e.undone());
        let answer = cni(e.clone());
        assert_eq!(
            answer.details,
            "ns/a (net1) plugins[2]: macvlan: mtu: too big"
        );
        assert!(answer.undone);
        // An exec'd plugin's failure names its type already ...
        let timed_out = ExecError::Timeout {
            plugin_type: crate::cni::names::PluginType::new("macvlan").unwrap(),
            binary: "/opt/cni/bin/macvlan".into(),
            command: crate::cni::env::CniCommand::Add,
            timeout: std::time::Duration::from_secs(1),
            stderr: String::new(),
        };
        assert_eq!(
            cni(RunError::from(timed_out).in_step(
                "ns/a",
                &IfName::new("net1").unwrap(),
                0,
                "macvlan"
            ))
            .details,
            "ns/a (net1) plugins[0]: macvlan: /opt/cni/bin/macvlan ADD did not finish within 1s \
             and was killed"
        );
        // ... a built-in plugin's reply does not, even when it starts with a
        // field spelled as the type (bridge's `bridge`).
        let field = CniError::invalid_config("bridge", "too long");
        assert_eq!(
            cni(RunError::from(field).in_step("ns/a", &IfName::new("net1").unwrap(), 0, "bridge"))
                .details,
            "ns/a (net1) plugins[0]: bridge: bridge: too long"
        );
        // A failed rollback and record write are appended; the mark stays.
        let failed = RunError::AddFailed {
            error: Box::new(e),
            rollback: vec![RunError::NoType],
            record: Some(RecordError::Io {
                path: "/r".into(),
                reason: "full".into(),
            }),
        };
        assert!(failed.undone());
        let answer = cni(failed);
        assert_eq!(
            answer.details,
            "ns/a (net1) plugins[2]: macvlan: mtu: too big; rollback failed, DEL will retry: \
             type: missing; cache /r: full"
        );
        assert!(answer.undone);
    }

    #[test]
    fn combined_failures_take_the_first_code() {
        let both = RunError::combined(
            "DEL",
            vec![
                CniError::new(ErrorCode::TryAgainLater, "busy", "a: 1").into(),
                CniError::new(ErrorCode::Io, "io", "b: 2").into(),
            ],
        )
        .unwrap_err();
        assert!(matches!(&both, RunError::Combined { what: "DEL", errors } if errors.len() == 2));
        assert_eq!(
            cni(both),
            CniError::new(
                ErrorCode::TryAgainLater,
                "DEL: 2 operations failed",
                "a: 1; b: 2"
            )
        );
        // One failure is itself; none is success.
        assert_eq!(
            RunError::combined("GC", vec![RunError::NoType]),
            Err(RunError::NoType)
        );
        assert_eq!(RunError::combined("GC", vec![]), Ok(()));
    }
}
