//! Cluster-network readiness (multi-net-spec §6.1.2): plexus's conf may be in
//! place before the cluster-wide default network is, so an ADD first waits,
//! bounded by `readinessTimeout`, until both the cluster network's config
//! resolves and `readinessindicatorfile` (when set) exists. STATUS (CNI 1.1)
//! takes one look and reports not-ready while that wait would fail. DEL never
//! waits: it works from plexus's record. Outside the planner: it sleeps and
//! reads the disk again.

use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::conf_files::ConfDir;
use crate::config::{ClusterNetwork, PlexusConf};
use crate::plan::{self, DefaultNetwork, NotReady, PlanError};

/// How often a waiting ADD looks again: short against an ADD's own cost, so
/// a network that appears mid-wait costs at most this much extra.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The keys of plexus's conf readiness is judged by.
#[derive(Debug, Clone, Copy)]
pub struct ReadinessKeys<'c> {
    /// `clusterNetwork` (or `delegates[0]`), resolved in ...
    pub cluster_network: &'c ClusterNetwork,
    /// ... `multusNamespace` and ...
    pub plexus_namespace: &'c str,
    /// ... `confDir`.
    pub conf_dir: &'c Path,
    /// `readinessindicatorfile`.
    pub indicator_file: Option<&'c Path>,
    /// `readinessTimeout`.
    pub timeout: Duration,
}

impl<'c> ReadinessKeys<'c> {
    pub fn of(conf: &'c PlexusConf) -> ReadinessKeys<'c> {
        ReadinessKeys {
            cluster_network: &conf.cluster_network,
            plexus_namespace: &conf.policy.plexus_namespace,
            conf_dir: &conf.conf_dir,
            indicator_file: conf.readiness_indicator_file.as_deref(),
            timeout: conf.readiness_timeout,
        }
    }
}

/// One look: the cluster network, or what is missing. Errors that waiting
/// cannot mend (a config that does not parse, a forbidden API request) are
/// returned as they are.
pub fn check(
    keys: ReadinessKeys,
    cluster: &dyn Cluster,
    conf_dir: &ConfDir,
) -> Result<Result<DefaultNetwork, NotReady>, PlanError> {
    if let Some(path) = keys.indicator_file {
        if !path.exists() {
            return Ok(Err(NotReady::IndicatorFile(path.to_path_buf())));
        }
    }
    match plan::cluster_network(
        keys.cluster_network,
        cluster,
        Some(conf_dir),
        keys.plexus_namespace,
    ) {
        Ok(network) => Ok(Ok(network)),
        Err(e) if may_appear(&e) => Ok(Err(NotReady::ClusterNetwork(e))),
        Err(e) => Err(e),
    }
}

/// Not found, or no answer from the API server: both may change by waiting.
fn may_appear(e: &PlanError) -> bool {
    matches!(e, PlanError::NetworkNotFound(_)) || e.is_transient()
}

/// Wait until ready, at most `keys.timeout`; then fail with
/// [`PlanError::NotReadyInTime`] (code 11, try again later) naming what
/// never appeared. Errors are the caller's `E`, which `reload`'s are. Views cache what they
/// read, absent entries included, so each further look reads anew: `reload`
/// gives a fresh view of the cluster, and `conf_dir` is replaced by a fresh
/// one (the caller plans with it, so it is current when this returns).
pub fn wait<E: From<PlanError>>(
    keys: ReadinessKeys,
    cluster: &dyn Cluster,
    conf_dir: &mut ConfDir,
    reload: impl Fn() -> Result<Rc<dyn Cluster>, E>,
) -> Result<DefaultNetwork, E> {
    let deadline = Instant::now() + keys.timeout;
    let mut missing = match check(keys, cluster, conf_dir)? {
        Ok(network) => return Ok(network),
        Err(missing) => missing,
    };
    while Instant::now() + POLL_INTERVAL < deadline {
        std::thread::sleep(POLL_INTERVAL);
        *conf_dir = ConfDir::new(keys.conf_dir);
        missing = match check(keys, reload()?.as_ref(), conf_dir)? {
            Ok(network) => return Ok(network),
            Err(missing) => missing,
        };
    }
    Err(PlanError::NotReadyInTime {
        waited: keys.timeout,
        missing: Box::new(missing),
    }
    .into())
}

/// STATUS: the cluster network when ready (its plugins are asked next), or
/// [`PlanError::NotReady`] (code 50, not available) naming what is missing.
pub fn status(keys: ReadinessKeys, cluster: &dyn Cluster) -> Result<DefaultNetwork, PlanError> {
    match check(keys, cluster, &ConfDir::new(keys.conf_dir))? {
        Ok(network) => Ok(network),
        Err(missing) => Err(PlanError::NotReady(Box::new(missing))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::dir::DirCluster;
    use serde_json::json;

    fn conf(dir: &std::path::Path, timeout: f64) -> PlexusConf {
        PlexusConf::from_value(&json!({
            "clusterNetwork": "podnet",
            "confDir": dir.join("net.d"),
            "readinessindicatorfile": dir.join("ready"),
            "readinessTimeout": timeout,
        }))
        .unwrap()
    }

    fn write_podnet(dir: &std::path::Path) {
        std::fs::create_dir_all(dir.join("net.d")).unwrap();
        std::fs::write(
            dir.join("net.d/10-podnet.conf"),
            json!({"cniVersion": "1.0.0", "name": "podnet", "type": "bridge"}).to_string(),
        )
        .unwrap();
    }

    /// [`wait`] on a cluster with nothing in it.
    fn wait_in_empty(conf: &PlexusConf) -> Result<DefaultNetwork, PlanError> {
        let empty = || -> Result<Rc<dyn Cluster>, PlanError> { Ok(Rc::new(DirCluster::empty())) };
        let mut conf_dir = ConfDir::new(&conf.conf_dir);
        wait(
            ReadinessKeys::of(conf),
            &DirCluster::empty(),
            &mut conf_dir,
            empty,
        )
    }

    #[test]
    fn status_names_what_is_missing_first_the_indicator_then_the_network() {
        let dir = tempfile::tempdir().unwrap();
        let conf = conf(dir.path(), 1.0);
        let cluster = DirCluster::empty();
        let e = status(ReadinessKeys::of(&conf), &cluster).unwrap_err();
        assert!(
            matches!(&e, PlanError::NotReady(m) if matches!(**m, NotReady::IndicatorFile(_))),
            "{e:?}"
        );
        std::fs::write(dir.path().join("ready"), "").unwrap();
        let e = status(ReadinessKeys::of(&conf), &cluster).unwrap_err();
        assert!(
            matches!(&e, PlanError::NotReady(m) if matches!(&**m,
                NotReady::ClusterNetwork(PlanError::NetworkNotFound(_)))),
            "{e:?}"
        );
        assert!(e.to_string().contains("\"podnet\""), "{e}");
        write_podnet(dir.path());
        status(ReadinessKeys::of(&conf), &cluster).unwrap();
    }

    #[test]
    fn wait_times_out_naming_the_file_then_succeeds_when_it_appears() {
        let dir = tempfile::tempdir().unwrap();
        write_podnet(dir.path());
        let conf = conf(dir.path(), 0.3);
        let started = Instant::now();
        let e = wait_in_empty(&conf).unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(250));
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(
            matches!(&e, PlanError::NotReadyInTime { missing, .. }
                if matches!(**missing, NotReady::IndicatorFile(_))),
            "{e:?}"
        );
        assert!(e.to_string().contains("readinessTimeout"), "{e}");

        let conf = PlexusConf {
            readiness_timeout: Duration::from_secs(5),
            ..conf
        };
        let ready = dir.path().join("ready");
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            std::fs::write(ready, "").unwrap();
        });
        let network = wait_in_empty(&conf).unwrap();
        writer.join().unwrap();
        assert_eq!(network.network, "podnet");
    }

    #[test]
    fn a_broken_cluster_network_fails_at_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("net.d")).unwrap();
        let bad = dir.path().join("podnet.json");
        std::fs::write(&bad, "{").unwrap();
        let conf = PlexusConf::from_value(&json!({
            "clusterNetwork": bad, "confDir": dir.path().join("net.d"), "readinessTimeout": 30,
        }))
        .unwrap();
        let started = Instant::now();
        let e = wait_in_empty(&conf).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1), "{e}");
        assert!(!matches!(e, PlanError::NotReadyInTime { .. }), "{e:?}");
    }
}
