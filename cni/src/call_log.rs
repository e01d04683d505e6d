//! Warnings and errors of one CNI call as `tracing` events, with the fields
//! that say which attachment they are about: `pod` (`namespace/name`, from
//! kubelet's CNI_ARGS), `container_id`, `network` and `interface`. The field
//! names live here only, so every sink (a plugin call's `logFile`, its stderr,
//! the daemon's JSON log) carries the same ones; a field not known is left
//! out.

use std::fmt::Display;

use crate::args::CniArgs;
use crate::env::{self, CniEnv};

/// The target of a call's warnings.
pub const CALL_TARGET: &str = "plexus";

/// The target of the event that reports a call's failure. The runtime gets
/// that error on stdout and stderr already (cni-SPEC §5), so a stderr sink
/// leaves it out; a log file keeps it.
pub const CALL_FAILED_TARGET: &str = "plexus::call_failed";

/// The target of an exec'd plugin's stderr lines, where the daemon logs
/// them (a thin call passes them on as they are).
pub const PLUGIN_STDERR_TARGET: &str = "plexus::plugin_stderr";

/// Which attachment a call's events are about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallLog {
    pub pod: Option<String>,
    pub container_id: Option<String>,
    pub network: Option<String>,
    pub interface: Option<String>,
}

/// One event with every field of `$log`; a private macro because tracing's
/// level and field list must be known where the event is written.
macro_rules! call_event {
    ($level:expr, target: $target:expr, $log:expr, $($rest:tt)+) => {
        tracing::event!(
            target: $target,
            $level,
            pod = $log.pod.as_deref(),
            container_id = $log.container_id.as_deref(),
            network = $log.network.as_deref(),
            interface = $log.interface.as_deref(),
            $($rest)+
        )
    };
}

impl CallLog {
    /// The call of `env`; `network` is the configuration's `name`.
    pub fn of_env(env: &CniEnv, network: Option<&str>) -> CallLog {
        CallLog {
            pod: pod(env.args()),
            container_id: env.container_id().map(|id| id.to_string()),
            network: network.map(String::from),
            interface: env.ifname().map(|n| n.to_string()),
        }
    }

    /// The call of the CNI variables `var` reads, taken as they are (also
    /// when they do not validate: a failure may be about them); `network`
    /// is the configuration's `name`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>, network: Option<&str>) -> CallLog {
        let var = |key: &str| var(key).filter(|v| !v.is_empty());
        let args = var(env::CNI_ARGS)
            .and_then(|a| CniArgs::parse(&a).ok())
            .unwrap_or_default();
        CallLog {
            pod: pod(&args),
            container_id: var(env::CNI_CONTAINERID),
            network: network.map(String::from),
            interface: var(env::CNI_IFNAME),
        }
    }

    /// The same call, about its attachment to `network` as `interface`.
    pub fn on_attachment(&self, network: &str, interface: &str) -> CallLog {
        CallLog {
            network: Some(network.into()),
            interface: Some(interface.into()),
            ..self.clone()
        }
    }

    /// Whether progress ([`CallLog::info`]) reaches a sink: only then is
    /// its message worth making.
    pub fn progress_logged() -> bool {
        tracing::enabled!(target: CALL_TARGET, tracing::Level::INFO)
    }

    /// Progress, shown from Multus's `verbose` on.
    pub fn info(&self, message: impl Display) {
        call_event!(tracing::Level::INFO, target: CALL_TARGET, self, "{message}");
    }

    pub fn warn(&self, message: impl Display) {
        call_event!(tracing::Level::WARN, target: CALL_TARGET, self, "{message}");
    }

    /// A line exec'd plugin `plugin` wrote to its stderr during the call.
    pub fn plugin_stderr(&self, plugin: &str, line: &str) {
        call_event!(
            tracing::Level::INFO,
            target: PLUGIN_STDERR_TARGET,
            self,
            plugin,
            "{line}"
        );
    }

    /// The call failed with CNI error `code` (cni-SPEC §5): `command` is
    /// `CNI_COMMAND` as given.
    pub fn failed(&self, command: &str, code: u32, message: impl Display) {
        call_event!(
            tracing::Level::ERROR,
            target: CALL_FAILED_TARGET,
            self,
            command,
            code,
            "{message}"
        );
    }
}

/// `namespace/name` when CNI_ARGS names both.
pub fn pod(args: &CniArgs) -> Option<String> {
    Some(format!(
        "{}/{}",
        args.k8s_pod_namespace()?,
        args.k8s_pod_name()?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_needs_namespace_and_name() {
        let args = |s: &str| CniArgs::parse(s).unwrap();
        assert_eq!(
            pod(&args("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p")).as_deref(),
            Some("ns/p")
        );
        assert_eq!(pod(&args("K8S_POD_NAME=p")), None);
    }
}
