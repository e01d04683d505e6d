//! Simulated nodes' `plexus daemon`s: each its own node name, socket,
//! state and metrics port, all in one node network namespace that a relay
//! connects to the API server; killed on drop. The cluster-wide IPAM case
//! and the scale case run them.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use plexus_dataplane::NetNs;

/// One simulated node's daemon.
pub(crate) struct NodeDaemon {
    pub(crate) child: Child,
    /// Its stdout and stderr (its log).
    pub(crate) log: std::path::PathBuf,
    /// Its metrics port in the node namespace.
    pub(crate) port: u16,
}

/// The daemons, killed on drop.
#[derive(Default)]
pub(crate) struct Daemons(pub(crate) Vec<NodeDaemon>);

impl Drop for Daemons {
    fn drop(&mut self) {
        for daemon in &mut self.0 {
            let _ = daemon.child.kill();
            let _ = daemon.child.wait();
        }
    }
}

/// What every daemon shares.
pub(crate) struct Launch<'a> {
    pub(crate) node: &'a NetNs,
    pub(crate) plexus: &'a Path,
    pub(crate) kubeconfig: &'a Path,
    /// Each daemon's directory is `<work>/<node name>`.
    pub(crate) work: &'a Path,
}

/// `plexus daemon` for `node_name`, its socket, metrics port and state
/// directory given, quiet, with a clean environment, in `node`.
pub(crate) fn daemon_command(
    node: &NetNs,
    plexus: &Path,
    kubeconfig: &Path,
    node_name: &str,
    socket: &Path,
    port: u16,
    state: &Path,
) -> Command {
    let mut cmd = Command::new(plexus);
    cmd.arg("daemon")
        .arg("--socket")
        .arg(socket)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--node-name", node_name])
        .arg(format!("--metrics-address=127.0.0.1:{port}"))
        .arg("--state-dir")
        .arg(state)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    node.join_in_child(&mut cmd);
    cmd
}

impl Launch<'_> {
    /// Starts the daemon of `node_name` on metrics port `port` (hot-plug
    /// and the IPAM reconciler off), without waiting for it.
    pub(crate) fn spawn(&self, node_name: &str, port: u16) -> Result<NodeDaemon, String> {
        self.spawn_with(node_name, port, &[])
    }

    /// [`Launch::spawn`] with `extra` options (`--multi-network-policy`,
    /// `--ipam-reconcile-interval=N` to turn the reconciler on).
    pub(crate) fn spawn_with(
        &self,
        node_name: &str,
        port: u16,
        extra: &[&str],
    ) -> Result<NodeDaemon, String> {
        let dir = self.work.join(node_name);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let mut cmd = daemon_command(
            self.node,
            self.plexus,
            self.kubeconfig,
            node_name,
            &dir.join("plexus.sock"),
            port,
            &dir.join("state"),
        );
        cmd.arg("--cni-dir")
            .arg(dir.join("cache"))
            .arg("--dynamic-networks=false");
        if !extra
            .iter()
            .any(|a| a.starts_with("--ipam-reconcile-interval"))
        {
            cmd.arg("--ipam-reconcile-interval=0");
        }
        cmd.args(extra);
        let log = dir.join("daemon.log");
        let file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        cmd.stdout(file.try_clone().map_err(|e| e.to_string())?)
            .stderr(file);
        let child = cmd.spawn().map_err(|e| format!("plexus daemon: {e}"))?;
        Ok(NodeDaemon { child, log, port })
    }

    /// The socket of `node_name`'s daemon.
    pub(crate) fn socket(&self, node_name: &str) -> std::path::PathBuf {
        self.work.join(node_name).join("plexus.sock")
    }
}

/// `program args` inside `node`, waited for; its stdout.
pub(crate) fn in_node(node: &NetNs, program: &str, args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(program);
    cmd.args(args).stderr(Stdio::null());
    node.join_in_child(&mut cmd);
    let out = cmd.output().map_err(|e| format!("{program}: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The `/metrics` page of the daemon on `port` in `node`.
pub(crate) fn metrics_page(node: &NetNs, port: u16) -> Result<String, String> {
    let url = format!("http://127.0.0.1:{port}/metrics");
    in_node(node, "curl", &["-sf", "-m", "5", &url])
}

/// Whether the daemon on `port` in `node` says it is ready (its caches
/// synced).
pub(crate) fn ready(node: &NetNs, port: u16) -> Result<bool, String> {
    let url = format!("http://127.0.0.1:{port}/readyz");
    Ok(in_node(node, "curl", &["-sf", "-m", "2", &url])?.trim() == "ready")
}

/// Whether `daemon`'s log says its cache of the node's pods is synced (its
/// readiness), read as a multus-daemon's log is: one read per look, where a
/// `/readyz` request from the node namespace is a process of its own and a
/// look at 50 daemons took about a second.
pub(crate) fn pods_synced(daemon: &NodeDaemon) -> bool {
    std::fs::read_to_string(&daemon.log).is_ok_and(|log| {
        log.lines()
            .any(|l| l.contains("watch cache synced") && l.contains("pods"))
    })
}

/// Until the daemon on `port` in `node` is ready, `bound` at most.
pub(crate) fn wait_ready(node: &NetNs, port: u16, bound: Duration) -> Result<(), String> {
    let deadline = Instant::now() + bound;
    while !ready(node, port)? {
        if Instant::now() > deadline {
            return Err(format!(
                "plexus daemon on port {port}: not ready within {bound:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}
