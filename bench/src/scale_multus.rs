//! Multus thick beside the scale simulation (issue 34 item 4): at each
//! step, after plexus's daemons, one `multus-daemon` per simulated node (a
//! build the operator names, `--multus DIR`: shared/notes/multus.md), on
//! the same pod and node objects, measured from outside as plexus's are
//! where a daemon cannot tell:
//! - synced: its log's `API readiness check done!`, which follows its pod
//!   informer's sync (its server's `Start` waits for it, 20 s at most);
//! - RSS and CPU from `/proc`;
//! - its API requests from the API server's audit log: it runs with
//!   plexus's service-account token, the identity the audit log records,
//!   and is told apart by its User-Agent; its watches, the watch events
//!   sent to it and when they are back after the API server's restart from
//!   the API server's `/metrics`, as plexus's are (`scale_step.rs`);
//! - its pod LISTs after the restart.
//!
//! Each runs in the node namespace and in a mount namespace of its own
//! whose `/run` is a fresh tmpfs holding the in-cluster credentials
//! (`/run/secrets/kubernetes.io/serviceaccount`: multus-daemon has no
//! kubeconfig option), so the machine's file systems are not touched.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use plexus_dataplane::NetNs;
use plexus_testkit::kube::{AuditedRequest, KubeApi};
use serde_json::json;

use crate::multus_thick::binary_in;
use crate::scale_step::{
    audited_since, by_multus, usage, watch_figures, Baseline, Restart, Setup, Step, BACK_BOUND,
    IDLE, READY_BOUND,
};

/// What multus-daemon logs once its pod informer synced and it serves.
const SERVING: &str = "API readiness check done!";

/// The daemons, killed on drop.
struct MultusDaemons(Vec<(String, Child, PathBuf)>);

impl Drop for MultusDaemons {
    fn drop(&mut self) {
        for (_, child, _) in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The audit log's multus-daemon requests from line `from` on.
fn requests_since(api: &KubeApi, from: usize) -> Vec<AuditedRequest> {
    audited_since(api, from, by_multus)
}

/// plexus's service-account token, from the API server's kubeconfig for it.
fn plexus_token(api: &KubeApi) -> Result<String, String> {
    let text =
        std::fs::read_to_string(api.plexus_kubeconfig()).map_err(|e| format!("kubeconfig: {e}"))?;
    let start = text
        .find("token: \"")
        .ok_or("no token in plexus's kubeconfig")?
        + 8;
    let len = text[start..].find('"').ok_or("an unterminated token")?;
    Ok(text[start..start + len].to_string())
}

/// The in-cluster credentials' files, in `dir`.
fn service_account(api: &KubeApi, dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("token"), plexus_token(api)?).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("namespace"), "kube-system").map_err(|e| e.to_string())?;
    std::fs::copy(api.dir.join("ca.crt"), dir.join("ca.crt")).map_err(|e| e.to_string())?;
    Ok(())
}

/// multus-daemon for `node_name` in `node`, its conf dir (with a cluster
/// network conf for `multusConfigFile: auto` to wrap), socket dir and log
/// under `dir`.
fn spawn(
    api: &KubeApi,
    node: &NetNs,
    binary: &Path,
    sa: &Path,
    node_name: &str,
    dir: &Path,
) -> Result<Child, String> {
    let conf_dir = dir.join("net.d");
    std::fs::create_dir_all(&conf_dir).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(dir.join("run")).map_err(|e| e.to_string())?;
    let cluster = json!({"cniVersion": "0.4.0", "name": "cluster",
        "plugins": [{"type": "bridge", "bridge": "cni0",
                     "ipam": {"type": "host-local", "subnet": "10.244.0.0/24"}}]});
    std::fs::write(conf_dir.join("10-cluster.conflist"), cluster.to_string())
        .map_err(|e| e.to_string())?;
    let config = dir.join("daemon-config.json");
    let daemon_config = json!({
        "cniVersion": "0.4.0",
        "logLevel": "verbose",
        "logToStderr": true,
        "cniConfigDir": conf_dir,
        "multusAutoconfigDir": conf_dir,
        "multusConfigFile": "auto",
        "socketDir": dir.join("run"),
        "daemonSocketDir": dir.join("run"),
    });
    std::fs::write(&config, daemon_config.to_string()).map_err(|e| e.to_string())?;
    let log = File::create(dir.join("daemon.log")).map_err(|e| e.to_string())?;
    // unshare and sh exec (no fork): the child is multus-daemon itself.
    let credentials = "sa=$1; shift; mount -t tmpfs plexus-bench /run && \
         mkdir -p /run/secrets/kubernetes.io/serviceaccount && \
         cp \"$sa\"/* /run/secrets/kubernetes.io/serviceaccount/ && exec \"$@\"";
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        credentials,
        "sh",
    ])
    .arg(sa)
    .arg(binary)
    .arg("-config")
    .arg(&config)
    .env_clear()
    .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    .env("KUBERNETES_SERVICE_PORT", api.port.to_string())
    .env("MULTUS_NODE_NAME", node_name)
    .stdin(Stdio::null())
    .stdout(log.try_clone().map_err(|e| e.to_string())?)
    .stderr(log);
    node.join_in_child(&mut cmd);
    cmd.spawn()
        .map_err(|e| format!("{}: {e}", binary.display()))
}

/// One step of Multus thick on the cluster of `pods` pods: the same rollout,
/// idle spell and API server restart as plexus's.
pub(crate) fn measure(
    api: &KubeApi,
    node: &NetNs,
    ns: &str,
    setup: &Setup,
    baseline: &Baseline,
    multus: &Path,
    pods: usize,
) -> Result<Step, String> {
    let binary = binary_in(multus, "multus-daemon")?;
    let work = setup.tmp.join(format!("multus-{pods}"));
    let sa = work.join("serviceaccount");
    service_account(api, &sa)?;
    let mark = api.audited().len();
    let mut daemons = MultusDaemons(Vec::new());
    let started = Instant::now();
    for n in 0..setup.daemons {
        let name = format!("scale-node-{n}");
        let dir = work.join(&name);
        let child = spawn(api, node, &binary, &sa, &name, &dir)?;
        daemons.0.push((name, child, dir));
    }
    let mut ready_at: Vec<Option<Duration>> = vec![None; setup.daemons];
    while ready_at.iter().any(Option::is_none) {
        if started.elapsed() > READY_BOUND {
            return Err(format!(
                "{pods} pods: not every multus-daemon served within {READY_BOUND:?} (logs in {})",
                work.display()
            ));
        }
        for (slot, (name, child, dir)) in ready_at.iter_mut().zip(&mut daemons.0) {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!(
                    "multus-daemon of {name} exited: {status} (see {})",
                    dir.display()
                ));
            }
            let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
            if slot.is_none() && log.contains(SERVING) {
                *slot = Some(started.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Its informer opens the pod watch just after the sync: counted at
    // start, as plexus's are.
    let opened = Instant::now();
    let mut watching = watch_figures(api)?;
    let all = baseline.pod_watchers + setup.daemons as u64;
    while watching.pod_watchers < all && opened.elapsed() < BACK_BOUND {
        std::thread::sleep(Duration::from_millis(100));
        watching = watch_figures(api)?;
    }
    let pids: Vec<u32> = daemons.0.iter().map(|(_, c, _)| c.id()).collect();
    let mut at_start = BTreeMap::from([(
        "watch (registered)".to_string(),
        baseline.daemons_watchers(&watching),
    )]);
    for r in requests_since(api, mark)
        .iter()
        .filter(|r| r.verb != "watch")
    {
        *at_start
            .entry(format!("{} {}", r.verb, r.resource))
            .or_insert(0) += 1;
    }
    let usage = usage(&pids, || {
        let idle_mark = api.audited().len();
        std::thread::sleep(IDLE);
        Ok(requests_since(api, idle_mark).len() as u64)
    })?;
    let events = baseline.churn_per_daemon(api, ns, setup, &format!("m{pods}"))?;

    // The restart: the API server must have each daemon's pod watch again.
    let restart_mark = api.audited().len();
    let pod_lists = || {
        Ok(requests_since(api, restart_mark)
            .iter()
            .filter(|r| r.verb == "list" && r.resource == "pods")
            .count() as u64)
    };
    let restart = Restart::measure(api, baseline, watching.pod_watchers, pod_lists)?;
    drop(daemons);
    Ok(Step::new(pods, ready_at, usage, at_start, events, restart))
}
