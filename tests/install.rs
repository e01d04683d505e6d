//! `plexus install` (the DaemonSet's entrypoint) against a temporary root
//! standing in for the node's file system: the binary replaced atomically,
//! also while the old one runs (multus-cni #1221), the kubeconfig from a
//! service account, the cluster network auto-detected as Multus's `auto`
//! does, the conflist regenerated when it changes and removed on exit, and
//! a second run converging to the same state without rewriting anything.
//!
//! Nothing here needs root or touches the machine's own CNI directories.

mod e2e_support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use e2e_support::assert_ok;
use plexus::config::PlexusConf;
use serde_json::{json, Value};

const BOUND: Duration = Duration::from_secs(10);

/// A node's root: a conf dir with a cluster network, a service account.
struct Node {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    sa: PathBuf,
}

fn cluster_conf(capabilities: Value) -> Value {
    json!({"cniVersion": "1.0.0", "name": "cluster", "plugins": [
        {"type": "bridge", "bridge": "cni0"},
        {"type": "portmap", "capabilities": capabilities}]})
}

impl Node {
    fn new() -> Node {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("host");
        let sa = tmp.path().join("sa");
        std::fs::create_dir_all(root.join("etc/cni/net.d")).unwrap();
        std::fs::create_dir_all(&sa).unwrap();
        std::fs::write(sa.join("token"), "token-1\n").unwrap();
        std::fs::write(sa.join("ca.crt"), "-----BEGIN CERTIFICATE-----\n").unwrap();
        Node {
            _tmp: tmp,
            root,
            sa,
        }
    }

    fn conf_dir(&self) -> PathBuf {
        self.root.join("etc/cni/net.d")
    }

    fn write_conf(&self, name: &str, v: &Value) {
        std::fs::write(self.conf_dir().join(name), v.to_string()).unwrap();
    }

    /// A Multus settings file `name` beside the node's root, as
    /// `--settings` takes it: its path.
    fn write_settings(&self, name: &str, settings: Value) -> String {
        let path = self.root.join("..").join(name);
        std::fs::write(&path, settings.to_string()).unwrap();
        path.display().to_string()
    }

    fn installed(&self) -> PathBuf {
        self.root.join("opt/cni/bin/plexus")
    }

    fn conflist_path(&self) -> PathBuf {
        self.conf_dir().join("00-plexus.conflist")
    }

    /// The cluster network's `10-cluster.conflist` rewritten to declare
    /// `capabilities`; waits until the watcher copied them into plexus's.
    fn cluster_capabilities_followed(&self, capabilities: Value) {
        self.write_conf("10-cluster.conflist", &cluster_conf(capabilities.clone()));
        eventually("capabilities copied", || {
            self.conflist()
                .is_some_and(|c| c["plugins"][0]["capabilities"] == capabilities)
        });
    }

    /// The cluster network's `10-cluster.conflist` removed; waits until the
    /// watcher removed plexus's conflist too.
    fn cluster_removal_followed(&self) {
        std::fs::remove_file(self.conf_dir().join("10-cluster.conflist")).unwrap();
        eventually("the conflist removed", || self.conflist().is_none());
    }

    fn conflist(&self) -> Option<Value> {
        let text = std::fs::read(self.conflist_path()).ok()?;
        Some(serde_json::from_slice(&text).unwrap())
    }

    fn kubeconfig_path(&self) -> PathBuf {
        self.conf_dir().join("plexus.d/plexus.kubeconfig")
    }

    fn command(&self, program: &Path, extra: &[&str]) -> Command {
        let mut c = Command::new(program);
        c.arg("install")
            .arg("--root")
            .arg(&self.root)
            .arg("--service-account")
            .arg(&self.sa)
            .args(["--api-server", "https://192.0.2.1:6443"])
            .args(
                ["--poll-ms", "20"]
                    .iter()
                    .filter(|_| !extra.contains(&"--poll-ms")),
            )
            .args(extra)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn install(&self, extra: &[&str]) -> Output {
        self.command(Path::new(env!("CARGO_BIN_EXE_plexus")), extra)
            .output()
            .unwrap()
    }

    fn watch(&self, program: &Path, extra: &[&str]) -> Watcher {
        let mut args = vec!["--watch", "--cleanup"];
        args.extend_from_slice(extra);
        Watcher(Some(self.command(program, &args).spawn().unwrap()))
    }
}

/// A `plexus install --watch --cleanup`, killed on drop unless terminated.
struct Watcher(Option<Child>);

impl Watcher {
    fn id(&self) -> u32 {
        self.0.as_ref().expect("running").id()
    }

    fn running(&mut self) -> bool {
        let child = self.0.as_mut().expect("running");
        child.try_wait().unwrap().is_none()
    }

    /// SIGTERM, then its exit (bounded) and output.
    fn terminate(&mut self) -> Output {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(self.id() as i32, libc::SIGTERM) }, 0);
        let deadline = Instant::now() + BOUND;
        while self.running() {
            assert!(Instant::now() < deadline, "no exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
        let child = self.0.take().expect("running");
        child.wait_with_output().unwrap()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Wait (bounded) until `cond` holds.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !cond() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn install_writes_binary_kubeconfig_and_conflist_and_a_rerun_changes_nothing() {
    let node = Node::new();
    node.write_conf(
        "10-cluster.conflist",
        &cluster_conf(json!({"portMappings": true, "bandwidth": false})),
    );
    node.write_conf(
        "20-other.conf",
        &json!({"cniVersion": "0.4.0", "name": "other", "type": "macvlan"}),
    );
    let settings_arg = node.write_settings(
        "settings.json",
        json!({"namespaceIsolation": true, "type": "not-this"}),
    );
    assert_ok("install", &node.install(&["--settings", &settings_arg]));

    assert!(same_bytes(
        Path::new(env!("CARGO_BIN_EXE_plexus")),
        &node.installed()
    ));
    assert_eq!(mode(&node.installed()), 0o755);

    // The alphabetically first other conf is the cluster network (Multus's
    // `auto`); its plugins' capabilities are asked for; the ConfigMap's
    // settings are kept, but never over the keys the installer owns.
    assert_eq!(
        node.conflist().unwrap(),
        json!({"cniVersion": "1.0.0", "name": "plexus-cni-network", "plugins": [{
            "namespaceIsolation": true,
            "type": "plexus",
            "clusterNetwork": "/etc/cni/net.d/10-cluster.conflist",
            "kubeconfig": "/etc/cni/net.d/plexus.d/plexus.kubeconfig",
            "capabilities": {"portMappings": true},
        }]})
    );
    // plexus itself takes what the installer wrote.
    let plugin = node.conflist().unwrap()["plugins"][0].clone();
    PlexusConf::from_slice(plugin.to_string().as_bytes()).unwrap();

    let kubeconfig: Value =
        serde_json::from_slice(&std::fs::read(node.kubeconfig_path()).unwrap()).unwrap();
    assert_eq!(mode(&node.kubeconfig_path()), 0o600);
    assert_eq!(kubeconfig["users"][0]["user"]["token"], "token-1");
    assert_eq!(
        kubeconfig["clusters"][0]["cluster"]["server"],
        "https://192.0.2.1:6443"
    );
    assert_eq!(
        kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"],
        "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="
    );

    // After a reboot or a crash: the same state, nothing rewritten.
    let inodes = |n: &Node| {
        [n.installed(), n.conflist_path(), n.kubeconfig_path()]
            .map(|p| std::fs::metadata(p).unwrap().ino())
    };
    let before = inodes(&node);
    assert_ok(
        "install again",
        &node.install(&["--settings", &settings_arg]),
    );
    assert_eq!(inodes(&node), before);
    let leftovers: Vec<_> = std::fs::read_dir(node.root.join("opt/cni/bin"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["plexus"], "no temp file left beside it");
}

#[test]
fn a_multus_thick_daemon_config_is_taken_as_it_is() {
    // Multus's deployments/multus-daemonset-thick.yml ConfigMap, verbatim
    // (examples/multus/daemon-config.json): installed, every key mapped or
    // explained in the log, none silently dropped.
    let node = Node::new();
    node.write_conf(
        "10-cluster.conflist",
        &cluster_conf(json!({"portMappings": true})),
    );
    let settings = format!(
        "{}/examples/multus/daemon-config.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = node.install(&[
        "--settings",
        &settings,
        "--daemon-socket",
        "/run/plexus/plexus.sock",
    ]);
    assert_ok("install", &out);
    let plugin = node.conflist().unwrap()["plugins"][0].clone();
    assert_eq!(plugin["logLevel"], "verbose");
    // Multus's thick file runs plexus thick: the DaemonSet's socket.
    assert_eq!(plugin["daemonSocket"], "/run/plexus/plexus.sock");
    assert_eq!(
        plugin["clusterNetwork"],
        "/etc/cni/net.d/10-cluster.conflist"
    );
    // chrootDir is the daemon's (README "Thick mode"): the conflist carries it.
    assert_eq!(plugin["chrootDir"], "/hostroot");
    for multus_only in ["socketDir", "cniConfigDir", "multusConfigFile"] {
        assert!(plugin.get(multus_only).is_none(), "{multus_only}: {plugin}");
    }
    assert!(PlexusConf::from_slice(plugin.to_string().as_bytes())
        .unwrap()
        .warnings
        .is_empty());
    // The log says what became of each key the conflist does not hold.
    let log = String::from_utf8_lossy(&out.stderr);
    let noted: Vec<String> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["key"].as_str().map(String::from))
        .collect();
    for key in [
        "cniVersion",
        "cniConfigDir",
        "multusAutoconfigDir",
        "multusConfigFile",
        "socketDir",
    ] {
        assert!(noted.iter().any(|k| k == key), "{key} not noted: {log}");
    }
    // logToStderr is the logging's to read: in the conflist, or noted.
    assert!(
        plugin.get("logToStderr").is_some() != noted.iter().any(|k| k == "logToStderr"),
        "{plugin} {log}"
    );

    // multusMasterCNI: that conf is the cluster network, not the first.
    node.write_conf(
        "20-other.conf",
        &json!({"cniVersion": "0.4.0", "name": "other", "type": "macvlan"}),
    );
    let master = node.write_settings("master.json", json!({"multusMasterCNI": "20-other.conf"}));
    assert_ok(
        "install with multusMasterCNI",
        &node.install(&["--settings", &master]),
    );
    let conflist = node.conflist().unwrap();
    assert_eq!(
        conflist["plugins"][0]["clusterNetwork"],
        "/etc/cni/net.d/20-other.conf"
    );
    assert_eq!(conflist["cniVersion"], "0.4.0");

    // A conf file of its own cannot be honoured: refused, naming the key.
    let own = node.write_settings("own.json", json!({"multusConfigFile": "/etc/multus.conf"}));
    let out = node.install(&["--settings", &own]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--settings multusConfigFile: \"/etc/multus.conf\": plexus writes"),
        "{stderr}"
    );
}

#[test]
fn auto_detection_skips_plexus_own_conf_and_invalid_files() {
    let node = Node::new();
    node.write_conf(
        "00-plexus.conflist",
        &json!({"cniVersion": "1.0.0", "name": "x",
        "plugins": [{"type": "plexus"}]}),
    );
    std::fs::write(node.conf_dir().join("05-broken.conf"), "{not json").unwrap();
    node.write_conf(
        "30-b.conf",
        &json!({"cniVersion": "1.0.0", "name": "b", "type": "b"}),
    );
    node.write_conf(
        "10-a.json",
        &json!({"cniVersion": "0.3.1", "name": "a", "type": "a"}),
    );
    assert_ok("install", &node.install(&["--no-kubeconfig"]));
    let conflist = node.conflist().unwrap();
    assert_eq!(conflist["cniVersion"], "0.3.1");
    assert_eq!(
        conflist["plugins"][0]["clusterNetwork"],
        "/etc/cni/net.d/10-a.json"
    );
    assert_eq!(conflist["plugins"][0].get("kubeconfig"), None);
    assert!(!node.kubeconfig_path().exists());
}

#[test]
fn install_waits_for_the_cluster_network_and_readiness_and_names_what_never_came() {
    let node = Node::new();
    let out = node.install(&["--timeout", "0.3"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            // The installer's own error (issue 25: an installer timeout is
            // not a CNI code).
            "plexus install: gave up after 300ms waiting for the cluster network's conf"
        ) && stderr.contains("other than 00-plexus.conflist) in /etc/cni/net.d"),
        "{stderr}"
    );
    assert!(node.conflist().is_none());
    // The binary is in place regardless: DELs of existing pods need it.
    assert!(node.installed().exists());

    // §6.1.2: with a readiness indicator, the conf waits for it too.
    node.write_conf("10-cluster.conflist", &cluster_conf(json!({})));
    let ready = ["--readiness-indicator-file", "/run/cluster/ready"];
    let out = node.install(&[ready[0], ready[1], "--timeout", "0.3"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("waiting for the readiness indicator file /run/cluster/ready"));
    assert!(node.conflist().is_none());

    let marker = node.root.join("run/cluster/ready");
    let waiter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        std::fs::create_dir_all(marker.parent().unwrap()).unwrap();
        std::fs::write(&marker, "").unwrap();
    });
    assert_ok(
        "install",
        &node.install(&[ready[0], ready[1], "--timeout", "10"]),
    );
    waiter.join().unwrap();
    assert_eq!(
        node.conflist().unwrap()["plugins"][0]["readinessindicatorfile"],
        "/run/cluster/ready"
    );
}

#[test]
fn the_binary_is_replaced_while_the_old_one_runs() {
    let node = Node::new();
    node.write_conf("10-cluster.conflist", &cluster_conf(json!({})));
    assert_ok("install", &node.install(&[]));
    // The installed binary runs (as a runtime's plugin would while the
    // DaemonSet upgrades it): `install --watch` from the installed copy.
    let mut old = node.watch(&node.installed(), &[]);
    eventually("the old binary watching", || {
        std::fs::read_to_string(format!("/proc/{}/cmdline", old.id()))
            .is_ok_and(|c| c.contains("--watch"))
    });
    // A new version: writing into the running file would fail with ETXTBSY.
    let new_version = node.root.join("../new-plexus");
    std::fs::copy(env!("CARGO_BIN_EXE_plexus"), &new_version).unwrap();
    let mut append = std::fs::OpenOptions::new()
        .append(true)
        .open(&new_version)
        .unwrap();
    std::io::Write::write_all(&mut append, b"\0new version").unwrap();
    drop(append);
    let source = new_version.display().to_string();
    assert_ok("upgrade", &node.install(&["--source", &source]));
    assert!(same_bytes(&new_version, &node.installed()));
    assert!(old.running(), "the old one still runs");
    let out = old.terminate();
    assert_ok("old watcher", &out);
}

#[test]
fn a_conf_dir_change_is_followed_at_once_not_at_the_next_poll() {
    let node = Node::new();
    node.write_conf("10-cluster.conflist", &cluster_conf(json!({})));
    // A minute between polls: only the conf dir's inotify watch can make
    // the installer follow within BOUND.
    let mut watcher = node.watch(
        Path::new(env!("CARGO_BIN_EXE_plexus")),
        &["--poll-ms", "60000"],
    );
    eventually("the conflist", || node.conflist().is_some());
    node.cluster_capabilities_followed(json!({"bandwidth": true}));
    node.cluster_removal_followed();
    // SIGTERM ends the wait too.
    let started = Instant::now();
    assert_ok("watcher", &watcher.terminate());
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn watch_follows_the_cluster_network_and_the_token_and_cleans_up_on_sigterm() {
    let node = Node::new();
    node.write_conf("10-cluster.conflist", &cluster_conf(json!({})));
    let mut watcher = node.watch(Path::new(env!("CARGO_BIN_EXE_plexus")), &[]);
    eventually("the conflist", || node.conflist().is_some());
    assert_eq!(
        node.conflist().unwrap()["plugins"][0].get("capabilities"),
        None
    );

    // The cluster network's conf changes: plexus's follows.
    node.cluster_capabilities_followed(json!({"portMappings": true}));
    // It disappears (a CNI being reinstalled): plexus's goes too, so the
    // runtime reports the network not ready rather than failing pods...
    node.cluster_removal_followed();
    // ... and comes back with it.
    node.write_conf(
        "20-cluster.conf",
        &json!({"cniVersion": "1.0.0", "name": "c", "type": "c"}),
    );
    eventually("the conflist back", || {
        node.conflist()
            .is_some_and(|c| c["plugins"][0]["clusterNetwork"] == "/etc/cni/net.d/20-cluster.conf")
    });
    // A rotated service-account token reaches the kubeconfig.
    std::fs::write(node.sa.join("token"), "token-2").unwrap();
    eventually("the new token", || {
        std::fs::read_to_string(node.kubeconfig_path()).is_ok_and(|k| k.contains("token-2"))
    });

    let out = watcher.terminate();
    assert_ok("watcher", &out);
    assert!(node.conflist().is_none(), "--cleanup removes it");
    assert!(node.installed().exists(), "the binary stays for DELs");
    // Structured logs: one JSON object per line.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert!(lines.len() >= 4, "{stderr}");
    assert!(lines.iter().all(|l| l["level"] == "INFO"), "{stderr}");
}

/// Whether files `a` and `b` hold the same bytes, read a chunk at a time:
/// the debug binary is ~230 MB, and the VM's files and memory are one
/// 2 GiB RAM (whole copies on the heap got the suite OOM-killed there).
fn same_bytes(a: &Path, b: &Path) -> bool {
    use std::io::Read;
    let open =
        |p: &Path| std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(p).unwrap());
    let (mut a, mut b) = (open(a), open(b));
    let (mut x, mut y) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = a.read(&mut x).unwrap();
        if n == 0 {
            return b.read(&mut y).unwrap() == 0;
        }
        if b.read_exact(&mut y[..n]).is_err() || x[..n] != y[..n] {
            return false;
        }
    }
}
