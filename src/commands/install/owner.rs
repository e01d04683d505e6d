//! Why the installer's pod stops, for `--cleanup`: plexus removed from the
//! node, or only replaced.
//!
//! A rolling update of the DaemonSet (a new image, new settings) stops the
//! old pod before it starts the new one. Were the conflist removed then, the
//! runtime would fall back to the cluster network's conf for the pods
//! created in between: they would start Running without their secondary
//! networks, with no error anywhere. So the conflist stays while the pod's DaemonSet
//! remains: those pods go to `/opt/cni/bin/plexus`, which serves them itself
//! while no daemon runs (`daemonFallback`), and the next pod's installer
//! takes over. It goes when the DaemonSet is gone or being deleted
//! (`kubectl delete -k deploy/`), and whenever the API server cannot say
//! (it refuses the deleted service account's token): removing is what
//! `--cleanup` asked for.

use std::path::Path;
use std::time::Duration;

use crate::cluster::kube::KubeCluster;
use crate::config::ApiTimeouts;

/// What the installer does with the conflist as its pod stops.
#[derive(Debug, PartialEq, Eq)]
pub enum OnStop {
    /// Keep it: the DaemonSet named here remains and starts the next pod.
    Keep { daemon_set: String },
    /// Remove it, for this reason.
    Remove { why: String },
}

/// A stop must fit in the pod's grace period (10 s in deploy/).
const API_BOUND: Duration = Duration::from_secs(4);

/// Asks the API server (through the installer's `kubeconfig`, its view's
/// path) whether pod `namespace/name`'s controlling DaemonSet remains.
pub fn on_stop(kubeconfig: &Path, namespace: &str, name: &str) -> OnStop {
    let timeouts = ApiTimeouts {
        request: API_BOUND,
        status_write: API_BOUND,
    };
    let remaining = KubeCluster::connect(kubeconfig, timeouts)
        .and_then(|api| api.remaining_daemon_set_of(namespace, name));
    match remaining {
        Ok(Some(daemon_set)) => OnStop::Keep { daemon_set },
        Ok(None) => OnStop::Remove {
            why: format!("pod {namespace}/{name} has no DaemonSet that remains"),
        },
        Err(e) => OnStop::Remove {
            why: format!("the API server cannot say whether plexus stays: {e}"),
        },
    }
}
