//! The peer on the one-node cluster: Multus thick (multus-daemon and
//! multus-shim, shared/notes/multus.md) with the reference plugins as its
//! delegates, and optionally multus-dynamic-networks-controller beside it
//! (shared/notes/peers.md), both from builds the operator names
//! (`--multus DIR`, `--dynamic-controller DIR`); none of their code is here.
//!
//! Both take in-cluster configuration only, so they run as a DaemonSet's
//! container would, without an image: in the node's network and mount
//! namespaces (its /etc/cni/net.d, /opt/cni/bin, /run/netns and containerd
//! socket), each in a mount namespace of its own (propagation `slave`, so
//! the pods' netns mounts still reach it) with a service account's token
//! and CA mounted at `/var/run/secrets/kubernetes.io/serviceaccount`, and
//! `KUBERNETES_SERVICE_HOST` the `kubernetes` Service's ClusterIP (node-up's
//! DNAT stands in for kube-proxy).
//!
//! The daemon writes `00-multus.conf` (`multusConfigFile: auto`), wrapping
//! the node's cluster network conf, as in a Multus deployment. Dropping a
//! [`MultusThick`] stops both processes and removes what it installed.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use plexus_testkit::node::Node;
use serde_json::json;

/// The daemon's socket directory in the node (shim and controller use it).
const SOCKET_DIR: &str = "/run/multus";
/// The conf the daemon generates, first in the node's CNI conf dir.
const GENERATED_CONF: &str = "/etc/cni/net.d/00-multus.conf";
const SHIM: &str = "/opt/cni/bin/multus-shim";
/// The service account both run as. A benchmark harness, not a deployment:
/// it is bound to cluster-admin rather than to Multus's exact rules.
const SERVICE_ACCOUNT: &str = "pxb-multus";
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The `kubernetes` Service's ClusterIP (node-up's service range).
const API_SERVICE_HOST: &str = "10.96.0.1";
const START_BOUND: Duration = Duration::from_secs(60);

/// Multus thick running on the node; stopped and removed on drop.
pub(crate) struct MultusThick<'a> {
    node: &'a Node,
    daemon: Child,
    controller: Option<Child>,
}

/// Where `dir`'s build of `binary` is, or why it is not usable.
pub(crate) fn binary_in(dir: &Path, binary: &str) -> Result<PathBuf, String> {
    let path = dir.join(binary);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!("{} not found", path.display()))
    }
}

impl<'a> MultusThick<'a> {
    /// Starts multus-daemon from `multus` (a directory with `multus-daemon`
    /// and `multus-shim`) and, with `controller` (a directory with
    /// `dynamic-networks-controller`), the dynamic networks controller; returns
    /// once the daemon serves, its conf is in place and the node is Ready.
    pub(crate) fn start(
        node: &'a Node,
        multus: &Path,
        controller: Option<&Path>,
    ) -> Result<MultusThick<'a>, String> {
        let daemon_bin = binary_in(multus, "multus-daemon")?;
        let shim = binary_in(multus, "multus-shim")?;
        let controller_bin = controller
            .map(|dir| binary_in(dir, "dynamic-networks-controller"))
            .transpose()?;
        let (work, sa, config) = install(node, &shim).inspect_err(|_| uninstall(node))?;
        let daemon = in_cluster(node, &sa, &daemon_bin, &config, &work.join("daemon.log"))
            .inspect_err(|_| uninstall(node))?;
        let mut multus = MultusThick {
            node,
            daemon,
            controller: None,
        };
        let serving = format!("test -S {SOCKET_DIR}/multus.sock && test -s {GENERATED_CONF}");
        multus.wait("multus-daemon serving with its conf written", || {
            node.exec(&["sh", "-c", &serving]).status.success()
        })?;
        // It must wrap the cluster network itself, not a conf another
        // contender left behind.
        let generated = node.exec_ok(&["cat", GENERATED_CONF]);
        let wrapped: serde_json::Value =
            serde_json::from_str(&generated).map_err(|e| format!("{GENERATED_CONF}: {e}"))?;
        if wrapped["clusterNetwork"] != "/etc/cni/net.d/10-cluster.conflist" {
            return Err(format!(
                "{GENERATED_CONF} wraps another conf than node-up's cluster network: {generated}"
            ));
        }
        multus.wait("the node Ready with Multus", || node.ready())?;
        if let Some(bin) = controller_bin {
            let log = work.join("controller.log");
            multus.controller = Some(in_cluster(node, &sa, &bin, &config, &log)?);
            // It serves once its informers synced and it reconciled the
            // node's pods at start.
            multus.wait("dynamic-networks-controller started", || {
                std::fs::read_to_string(&log)
                    .is_ok_and(|text| text.contains("starting network controller"))
            })?;
        }
        Ok(multus)
    }

    /// Polls `done` every 200 ms for [`START_BOUND`]; an error naming `what`
    /// and the processes' logs after.
    fn wait(&mut self, what: &str, mut done: impl FnMut() -> bool) -> Result<(), String> {
        let deadline = Instant::now() + START_BOUND;
        while !done() {
            let exited = self.daemon.try_wait().ok().flatten();
            if Instant::now() > deadline || exited.is_some() {
                return Err(format!(
                    "{what}: not within {START_BOUND:?} (multus-daemon exited: {exited:?}; logs in {})",
                    self.node.dir.join("multus-thick").display()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }
}

/// The service account and its token, the daemon-config.json (in
/// `<node dir>/multus-thick`) and `shim` in the node's /opt/cni/bin: the
/// work directory, the token's directory and the config.
fn install(node: &Node, shim: &Path) -> Result<(PathBuf, PathBuf, PathBuf), String> {
    let work = node.dir.join("multus-thick");
    let sa = work.join("serviceaccount");
    std::fs::create_dir_all(&sa).map_err(|e| e.to_string())?;
    node.apply(
        "kube-system",
        &format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {SERVICE_ACCOUNT}}}\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
             metadata: {{name: {SERVICE_ACCOUNT}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\n\
             subjects: [{{kind: ServiceAccount, name: {SERVICE_ACCOUNT}, namespace: kube-system}}]\n"
        ),
    );
    let token = service_account_token(node)?;
    std::fs::write(sa.join("token"), token).map_err(|e| e.to_string())?;
    std::fs::write(sa.join("namespace"), "kube-system").map_err(|e| e.to_string())?;
    std::fs::copy(node.dir.join("ca.crt"), sa.join("ca.crt")).map_err(|e| e.to_string())?;

    // The keys of a Multus thick daemon-config.json; the last three are
    // the dynamic networks controller's (it reads the same file).
    let config = work.join("daemon-config.json");
    let daemon_config = json!({
        "cniVersion": "0.4.0",
        "logLevel": "error",
        "logToStderr": true,
        "cniConfigDir": "/etc/cni/net.d",
        "multusAutoconfigDir": "/etc/cni/net.d",
        "multusConfigFile": "auto",
        "socketDir": SOCKET_DIR,
        "daemonSocketDir": SOCKET_DIR,
        "criSocketPath": "/run/containerd/containerd.sock",
        "criType": "containerd",
        "multusSocketPath": format!("{SOCKET_DIR}/multus.sock"),
    });
    std::fs::write(&config, daemon_config.to_string()).map_err(|e| e.to_string())?;
    let installed = node.exec(&["cp", &shim.display().to_string(), SHIM]);
    if !installed.status.success() {
        return Err(format!(
            "installing multus-shim on the node: {}",
            String::from_utf8_lossy(&installed.stderr)
        ));
    }
    Ok((work, sa, config))
}

/// Removes what [`install`] and the daemon put on the node and cluster.
fn uninstall(node: &Node) {
    let _ = node.exec(&["rm", "-rf", GENERATED_CONF, SHIM, SOCKET_DIR]);
    let _ = node.kubectl_output(
        &[
            "delete",
            "-n",
            "kube-system",
            "serviceaccount,clusterrolebinding",
            SERVICE_ACCOUNT,
            "--ignore-not-found",
        ],
        None,
    );
}

/// The token of [`SERVICE_ACCOUNT`], once the token controller made it.
fn service_account_token(node: &Node) -> Result<String, String> {
    let deadline = Instant::now() + START_BOUND;
    loop {
        let out = node.kubectl_output(
            &[
                "get",
                "serviceaccount",
                SERVICE_ACCOUNT,
                "-n",
                "kube-system",
                "-o",
                "jsonpath={.secrets[0].name}",
            ],
            None,
        );
        let secret = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !secret.is_empty() {
            let token = node.kubectl(&[
                "get",
                "secret",
                &secret,
                "-n",
                "kube-system",
                "-o",
                "go-template={{.data.token | base64decode}}",
            ]);
            return Ok(token);
        }
        if Instant::now() > deadline {
            return Err(format!("no token for service account {SERVICE_ACCOUNT}"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// `binary -config config` in the node's namespaces with in-cluster
/// credentials from `sa`, its output to `log`.
fn in_cluster(
    node: &Node,
    sa: &Path,
    binary: &Path,
    config: &Path,
    log: &Path,
) -> Result<Child, String> {
    let log = File::create(log).map_err(|e| e.to_string())?;
    // nsenter and unshare exec (no fork), so the child is the binary itself.
    let mount_and_exec = format!(
        "sa=$1; shift; mkdir -p {SERVICE_ACCOUNT_DIR} && \
         mount --bind \"$sa\" {SERVICE_ACCOUNT_DIR} && exec \"$@\""
    );
    Command::new(node.dir.join("node-exec"))
        .args(["unshare", "--mount", "--propagation", "slave", "sh", "-c"])
        .arg(mount_and_exec)
        .arg("sh")
        .arg(sa)
        .arg(binary)
        .arg("-config")
        .arg(config)
        .env("KUBERNETES_SERVICE_HOST", API_SERVICE_HOST)
        .env("KUBERNETES_SERVICE_PORT", "443")
        .env("MULTUS_NODE_NAME", &node.name)
        .env("NODE_NAME", &node.name)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("{}: {e}", binary.display()))
}

impl Drop for MultusThick<'_> {
    fn drop(&mut self) {
        for child in self.controller.iter_mut().chain([&mut self.daemon]) {
            let _ = child.kill();
            let _ = child.wait();
        }
        uninstall(self.node);
    }
}
