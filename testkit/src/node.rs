//! A one-node Kubernetes cluster with a real kubelet and containerd
//! (`testkit/node-up`, shared/notes/kubelet.md), for tests that take the
//! operator's and the user's path: `kubectl apply -k deploy/`, pods created
//! with kubectl, kubelet's own CNI calls.
//!
//! [`node`] starts it on first use in a test binary (about 30 s) and shares
//! it between that binary's tests; it stops, leaving nothing, when the binary
//! exits. One runs on a machine per `PLEXUS_NODE_ID` (unset in CI): a second
//! test binary that needs it waits for a stopping one, and fails with
//! `node-up`'s reason naming a running one.
//!
//! Its components live in the network namespace `NODE_NETNS` and a private
//! mount namespace, so kubectl runs through `DIR/kubectl` and commands that
//! look at the node (its `/var/lib/cni`, `/run/netns`, links) through
//! [`Node::exec`].

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::kube::{
    applied, env_value, namespace_name, repo, run_kubectl, started_by, started_once, succeeded,
};
use crate::process::stdout_ok;

/// The running node.
#[derive(Debug)]
pub struct Node {
    /// What `node-up` wrote: env, kubeconfigs, every component's log.
    pub dir: PathBuf,
    /// The Node object's name.
    pub name: String,
    /// The node's address, on [`Node::iface`].
    pub ip: String,
    /// The node's link (a veth), a master for macvlan networks.
    pub iface: String,
    /// The static busybox image in containerd, for pods.
    pub pod_image: String,
    /// The pids cgroup every process of the node is under (its
    /// components, the shims, the pods), to find one of them.
    pub pids_cgroup: PathBuf,
}

/// Why the node cannot run here, or `None`: `node-up --check` tells.
pub(crate) fn missing() -> Option<Cow<'static, str>> {
    if crate::in_vm() {
        return Some("the VM runs no kubelet (the host suite does)".into());
    }
    match Command::new(repo().join("testkit/node-up"))
        .arg("--check")
        .output()
    {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .to_string()
                .into(),
        ),
        Err(e) => Some(format!("testkit/node-up --check: {e}").into()),
    }
}

/// The node of this test binary, started on first use. Call it after
/// `require(&[Feature::KubeNode])`; a node that fails to start fails the
/// test with `node-up`'s reason.
pub fn node() -> &'static Node {
    static NODE: OnceLock<Result<Node, String>> = OnceLock::new();
    started_once(&NODE, start, "the one-node cluster")
}

/// One test's turn on the node of its binary: the tests take turns (one
/// checks the node is left as it was, which another's pods would change
/// meanwhile), holding the lock; the node; a namespace of the test's own; the
/// node's network state before.
pub type Turn = (
    MutexGuard<'static, ()>,
    &'static Node,
    String,
    BTreeSet<String>,
);

/// The [`Turn`] of a test, once the tests before it are done: the node with
/// plexus deployed (`deploy`'s arguments, once per test binary) and a
/// namespace named after `prefix`; `None` (the test reported skipped)
/// without a node.
pub fn turn(deploy: &[&str], prefix: &str) -> Option<Turn> {
    static ALONE: Mutex<()> = Mutex::new(());
    static DEPLOYED: OnceLock<()> = OnceLock::new();
    if !crate::require(&[crate::Feature::KubeNode]) {
        return None;
    }
    let alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let node = node();
    DEPLOYED.get_or_init(|| node.deploy(deploy));
    let ns = node.namespace(prefix);
    Some((alone, node, ns, node.network_state()))
}

fn start() -> Result<Node, String> {
    Node::at(started_by("node-up", &[])?)
}

/// The cluster of several nodes of this test binary (`node-up --nodes
/// 3`: a control-plane node and two workers on a fabric), started on
/// first use and shared as [`node`] is; they cannot run at once (one
/// cluster per machine and `PLEXUS_NODE_ID`), and one test binary uses one
/// of them.
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
    started_once(&CLUSTER, start_cluster, "the three-node cluster")
}

fn start_cluster() -> Result<Cluster, String> {
    let dir = started_by("node-up", &["--nodes", "3"])?;
    let nodes = env_value(&dir, "NODE_DIRS")?
        .split_whitespace()
        .map(|d| Node::at(d.into()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Cluster { nodes })
}

/// Nodes joined to one control plane (node-up's `--nodes`), each with its
/// own network and mount namespaces, cgroup subtree, containerd and
/// kubelet, on a fabric: a bridge in a namespace of its own, to which
/// every node's `eth0` (its address) and `eth1` (no address, a master for
/// secondary networks) are veths.
#[derive(Debug)]
pub struct Cluster {
    /// The control-plane node first.
    pub nodes: Vec<Node>,
}

impl Cluster {
    /// The control-plane node: kubectl and deploy through it.
    pub fn control(&self) -> &Node {
        &self.nodes[0]
    }

    /// Every node's [`Node::network_state`], in [`Cluster::nodes`]' order.
    pub fn network_states(&self) -> Vec<BTreeSet<String>> {
        self.nodes.iter().map(Node::network_state).collect()
    }

    /// Deletes the pods of `ns`, waits until every node's
    /// [`Node::network_state`] is its `before` again (in
    /// [`Cluster::network_states`]' order), and deletes `ns`.
    pub fn delete_pods_leaving_nothing(&self, ns: &str, before: &[BTreeSet<String>]) {
        self.control().delete_pods(ns);
        for (node, before) in self.nodes.iter().zip(before) {
            node.wait_network_state(before);
        }
        self.control()
            .kubectl(&["delete", "namespace", ns, "--wait=false"]);
    }

    /// The node named `name`.
    pub fn node(&self, name: &str) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node {name} in the cluster"))
    }
}

impl Node {
    /// The node node-up describes in `dir` (its `env`).
    fn at(dir: PathBuf) -> Result<Node, String> {
        Ok(Node {
            name: env_value(&dir, "NODE_NAME")?,
            ip: env_value(&dir, "NODE_IP")?,
            iface: env_value(&dir, "NODE_IFACE")?,
            pod_image: env_value(&dir, "POD_IMAGE")?,
            pids_cgroup: env_value(&dir, "NODE_PIDS_CGROUP")?.into(),
            dir,
        })
    }
}

impl Node {
    /// `kubectl` as the cluster's admin, bounded; panics with its stderr on
    /// failure.
    pub fn kubectl(&self, args: &[&str]) -> String {
        succeeded(self.kubectl_output(args, None), args)
    }

    /// `kubectl` as the admin, bounded, whatever its outcome.
    /// Waits, at most `bound`, until plexus's DaemonSet has rolled out
    /// (`kubectl rollout status`, asked in spells shorter than the 60 s
    /// each kubectl of the kit may run).
    pub fn wait_rolled_out(&self, bound: Duration) {
        let status = [
            "rollout",
            "status",
            "daemonset/plexus",
            "-n",
            "kube-system",
            "--timeout",
            "45s",
        ];
        self.wait_for("plexus's DaemonSet rolled out", bound, || {
            self.kubectl_output(&status, None).status.success()
        });
    }

    pub fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> Output {
        run_kubectl(Command::new(self.dir.join("kubectl")), args, stdin)
    }

    /// `kubectl apply -n ns -f -` of `manifest` as the admin.
    pub fn apply(&self, ns: &str, manifest: &str) {
        applied(
            self.kubectl_output(&["apply", "-n", ns, "-f", "-"], Some(manifest)),
            manifest,
        );
    }

    /// A fresh Kubernetes namespace for one test, `<prefix>-<pid>-<n>`,
    /// with its default service account (pods wait for it).
    pub fn namespace(&self, prefix: &str) -> String {
        let name = namespace_name(prefix);
        self.kubectl(&["create", "namespace", &name]);
        self.wait_for(
            &format!("namespace {name}'s default service account"),
            Duration::from_secs(30),
            || {
                self.kubectl_output(&["get", "serviceaccount", "default", "-n", &name], None)
                    .status
                    .success()
            },
        );
        name
    }

    /// Runs `args` in the node's network and mount namespaces (its
    /// `/var/lib/cni`, `/run/netns`, `/etc/cni/net.d`), for 60 s at most.
    pub fn exec(&self, args: &[&str]) -> Output {
        Command::new("timeout")
            .arg("60")
            .arg(self.dir.join("node-exec"))
            .args(args)
            .output()
            .expect("node-exec runs")
    }

    /// Where the node's `path` is seen from the machine: through the root
    /// of a process in the node's mount namespace (`/proc/PID/root`), for
    /// its own file systems (`/run`, `/etc/cni`; `/var/lib` and `/opt` are
    /// `DIR/root/...` too). An absolute symlink on the way (`/var/run` ->
    /// `/run`) would resolve in the machine's namespace: name the target.
    pub fn path(&self, path: &str) -> PathBuf {
        let pid = std::fs::read_to_string(self.dir.join("node.pid")).expect("node-up's node.pid");
        PathBuf::from(format!("/proc/{}/root{path}", pid.trim()))
    }

    /// [`Node::exec`]'s stdout; panics with its stderr on failure.
    pub fn exec_ok(&self, args: &[&str]) -> String {
        stdout_ok(self.exec(args), format_args!("on the node: {args:?}"))
    }

    /// Polls `done` every 250 ms until it holds; panics naming `what` after
    /// `timeout`, with the tail of kubelet's log.
    pub fn wait_for(&self, what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        while !done() {
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.join("kubelet.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                panic!(
                    "{what}: not within {timeout:?}; kubelet's log ends:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits until pod `ns/name` is Running, for `timeout` at most.
    pub fn wait_running(&self, ns: &str, name: &str, timeout: Duration) {
        self.wait_for(&format!("pod {ns}/{name} Running"), timeout, || {
            self.pod_field(ns, name, "{.status.phase}") == "Running"
        });
    }

    /// `jsonpath` of pod `ns/name`, as kubectl prints it; empty when the
    /// pod or the field is not there.
    pub fn pod_field(&self, ns: &str, name: &str, jsonpath: &str) -> String {
        let out = self.kubectl_output(
            &[
                "get",
                "pod",
                "-n",
                ns,
                name,
                "-o",
                &format!("jsonpath={jsonpath}"),
            ],
            None,
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `testkit/node-deploy ARGS --binary plexus DIR`: plexus's image built
    /// around the release artifact (`cargo dist`, [`crate::dist`]: the
    /// `FROM scratch` image needs the static binary) and deployed from
    /// deploy/ (`--thin`: as its overlay; `--delete`: removed). Panics with
    /// its error and the DaemonSet's pods described.
    pub fn deploy(&self, args: &[&str]) {
        let plexus = crate::dist::build().unwrap_or_else(|e| panic!("{e}"));
        self.deploy_binary(&plexus, args);
    }

    /// [`Node::deploy`] with the static `plexus` binary `plexus` (another
    /// release's).
    pub fn deploy_binary(&self, plexus: &Path, args: &[&str]) {
        let out = Command::new(repo().join("testkit/node-deploy"))
            .args(args)
            .arg("--binary")
            .arg(plexus)
            .arg(&self.dir)
            .output()
            .expect("node-deploy runs");
        if !out.status.success() {
            let pods = self.kubectl_output(
                &["describe", "pods", "-n", "kube-system", "-l", "app=plexus"],
                None,
            );
            panic!(
                "node-deploy {args:?}: {}\nthe DaemonSet's pods:\n{}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&pods.stdout)
            );
        }
    }

    /// A pod of the node's busybox image that sleeps (and ends at once on
    /// SIGTERM), with the `k8s.v1.cni.cncf.io/networks` annotation
    /// `networks` (a YAML single-quoted scalar's content).
    pub fn sleeping_pod(&self, name: &str, networks: &str) -> String {
        format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  annotations:
    k8s.v1.cni.cncf.io/networks: '{networks}'
spec:
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  containers:
    - name: main
      image: {image}
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep 100000 & wait"]
"#,
            image = self.pod_image
        )
    }

    /// `jsonpath` of the list of plexus's DaemonSet pods (`app=plexus` in
    /// kube-system), as kubectl prints it.
    pub fn plexus_pods(&self, jsonpath: &str) -> String {
        self.kubectl(&[
            "get",
            "pods",
            "-n",
            "kube-system",
            "-l",
            "app=plexus",
            "-o",
            &format!("jsonpath={jsonpath}"),
        ])
    }

    /// Pod `ns/pod`'s network-status annotation (multi-net spec §5), as
    /// kubectl prints it (empty when it has none).
    pub fn network_status_text(&self, ns: &str, pod: &str) -> String {
        self.kubectl(&[
            "get",
            "pod",
            "-n",
            ns,
            pod,
            "-o",
            r"jsonpath={.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}",
        ])
    }

    /// The messages of pod `ns/pod`'s events with `reason`, one a line.
    pub fn events(&self, ns: &str, pod: &str, reason: &str) -> String {
        self.kubectl(&[
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            &format!("involvedObject.name={pod},reason={reason}"),
            "-o",
            "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
        ])
    }

    /// Restarts `component` (`kubelet` or `containerd`) as a node lives
    /// through it: stopped with SIGTERM, started again; its pods keep
    /// running. Returns once it runs again and the node is Ready.
    pub fn restart(&self, component: &str) {
        self.ask_node_up(&format!("restart-{component}"));
    }

    /// Reboots the node as after a power cut (`node-up`'s DIR/reboot):
    /// kubelet, containerd and every pod process killed, their mounts, /run
    /// and the pods' cgroups gone, the disk kept; then containerd and
    /// kubelet started again. Returns once the node is Ready.
    pub fn reboot(&self) {
        self.ask_node_up("reboot");
    }

    /// Cuts the node's power (node-up's `poweroff`): as [`Node::reboot`]'s
    /// power cut, and the node stays down until [`Node::power_on`].
    pub fn power_off(&self) {
        self.request_node_up("poweroff");
    }

    /// Starts the node's containerd and kubelet again after
    /// [`Node::power_off`]; returns once the node is Ready (kubelet
    /// registers it again if its Node object was deleted).
    pub fn power_on(&self) {
        self.ask_node_up("poweron");
    }

    /// Creates `DIR/request` and waits until node-up has done it (the file
    /// gone).
    fn request_node_up(&self, request: &str) {
        let file = self.dir.join(request);
        std::fs::write(&file, "").expect("the request to node-up is written");
        self.wait_for(request, Duration::from_secs(90), || !file.exists());
    }

    /// [`Node::request_node_up`], then waits until the node is Ready.
    fn ask_node_up(&self, request: &str) {
        self.request_node_up(request);
        self.wait_for(
            &format!("node Ready after {request}"),
            Duration::from_secs(90),
            || self.ready(),
        );
    }

    /// Pids of the node's processes whose command line starts with `argv`
    /// (the `/proc/PID/cmdline` words).
    pub fn pids_of(&self, argv: &[&str]) -> Vec<u32> {
        let wanted: Vec<u8> = argv
            .iter()
            .flat_map(|a| [a.as_bytes(), b"\0"].concat())
            .collect();
        let mut pids = Vec::new();
        for procs in cgroup_procs_files(&self.pids_cgroup) {
            let text = std::fs::read_to_string(procs).unwrap_or_default();
            for pid in text.lines().filter_map(|l| l.parse::<u32>().ok()) {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                if cmdline.starts_with(&wanted) {
                    pids.push(pid);
                }
            }
        }
        pids
    }

    /// What pods' networks leave on the node: host-local reservations (its
    /// per-network directories stay, as the reference plugin leaves them),
    /// plexus's records and sandbox notes (its `sandboxes/` directory stays,
    /// as the record directory does), device-info files, pod netns and the
    /// cluster bridge's veths.
    pub fn network_state(&self) -> BTreeSet<String> {
        let out = self.exec_ok(&[
            "sh",
            "-c",
            "{ find /var/lib/cni/networks -mindepth 2; \
               find /var/lib/cni/plexus /var/run/k8s.cni.cncf.io/devinfo /run/netns -mindepth 1; \
             } 2>/dev/null | grep -v -e '/last_reserved_ip' -e '/lock$' -e '^/var/lib/cni/plexus/sandboxes$' ; \
             ip -o link show type veth | grep -o 'veth[0-9a-f]*' || true",
        ]);
        out.lines().map(str::to_string).collect()
    }

    /// Deletes namespace `ns` and waits until it is gone, for 180 s at most:
    /// kubelet v1.20 deletes a pod whose sandbox it stopped (its DELs done)
    /// only once its container GC, every minute, removed the sandbox, so a
    /// deletion can take over a minute, more than one bounded kubectl waits.
    pub fn delete_namespace(&self, ns: &str) {
        self.kubectl(&["delete", "namespace", ns, "--wait=false"]);
        self.wait_for(
            &format!("namespace {ns} deleted"),
            Duration::from_secs(180),
            || {
                let out = self.kubectl_output(&["get", "namespace", ns], None);
                String::from_utf8_lossy(&out.stderr).contains("NotFound")
            },
        );
    }

    /// Deletes the pods of `ns` (kubelet runs their DELs), waits until
    /// they are gone (over a minute, at times: [`Node::delete_namespace`])
    /// and then (60 s at most)
    /// until [`Node::network_state`] is `before` again, failing with what is
    /// left, and deletes `ns`.
    pub fn delete_pods_leaving_nothing(&self, ns: &str, before: &BTreeSet<String>) {
        self.delete_pods(ns);
        self.wait_network_state(before);
        self.kubectl(&["delete", "namespace", ns, "--wait=false"]);
    }

    /// Deletes the pods of `ns` (on any node) and waits until they are gone.
    pub fn delete_pods(&self, ns: &str) {
        let started = Instant::now();
        self.kubectl(&["delete", "pods", "--all", "-n", ns, "--wait=false"]);
        self.wait_for(
            &format!("the pods of {ns} deleted"),
            Duration::from_secs(180),
            || {
                let pods = self.kubectl_output(&["get", "pods", "-n", ns, "-o", "name"], None);
                pods.status.success() && pods.stdout.is_empty()
            },
        );
        eprintln!("the pods of {ns} deleted in {:?}", started.elapsed());
    }

    /// Waits (60 s at most) until [`Node::network_state`] is `before`
    /// again, failing with what is left.
    pub fn wait_network_state(&self, before: &BTreeSet<String>) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut after = self.network_state();
        while after != *before && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            after = self.network_state();
        }
        assert_eq!(
            after.difference(before).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "left on node {} after the pods' deletion",
            self.name
        );
    }

    /// The pod's network-status annotation (multi-net spec v1.3 §5), read
    /// with kubectl.
    pub fn network_status(&self, ns: &str, pod: &str) -> Vec<serde_json::Value> {
        let text = self.network_status_text(ns, pod);
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{ns}/{pod} network-status {text:?}: {e}"))
    }

    /// Whether the Node object is Ready.
    pub fn ready(&self) -> bool {
        let out = self.kubectl_output(
            &[
                "get",
                "node",
                &self.name,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
            None,
        );
        String::from_utf8_lossy(&out.stdout) == "True"
    }
}

/// Every `cgroup.procs` file under `dir`, bounded by the cgroup tree.
fn cgroup_procs_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files = vec![dir.join("cgroup.procs")];
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                files.extend(cgroup_procs_files(&entry.path()));
            }
        }
    }
    files
}
