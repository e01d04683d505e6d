//! A one-node Kubernetes cluster with a real kubelet and containerd
//! (`testkit/node-up`, shared/notes/kubelet.md), for tests that take the
//! operator's and the user's path: `kubectl apply -k deploy/`, pods created
//! with kubectl, kubelet's own CNI calls.
//!
//! [`node`] starts it on first use in a test binary (about 30 s) and shares
//! it between that binary's tests; it stops, leaving nothing, when the binary
//! exits. Only one can run on a machine: a second test binary that needs it
//! fails with `node-up`'s reason naming the one that runs.
//!
//! Its components live in the network namespace `NODE_NETNS` and a private
//! mount namespace, so kubectl runs through `DIR/kubectl` and commands that
//! look at the node (its `/var/lib/cni`, `/run/netns`, links) through
//! [`Node::exec`].

use std::borrow::Cow;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::kube::{applied, env_value, namespace_name, repo, run_kubectl, started_by, succeeded};

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
    NODE.get_or_init(start)
        .as_ref()
        .unwrap_or_else(|e| panic!("the one-node cluster did not start: {e}"))
}

fn start() -> Result<Node, String> {
    let dir = started_by("node-up")?;
    Ok(Node {
        name: env_value(&dir, "NODE_NAME")?,
        ip: env_value(&dir, "NODE_IP")?,
        iface: env_value(&dir, "NODE_IFACE")?,
        pod_image: env_value(&dir, "POD_IMAGE")?,
        dir,
    })
}

impl Node {
    /// `kubectl` as the cluster's admin, bounded; panics with its stderr on
    /// failure.
    pub fn kubectl(&self, args: &[&str]) -> String {
        succeeded(self.kubectl_output(args, None), args)
    }

    /// `kubectl` as the admin, bounded, whatever its outcome.
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
        let out = self.exec(args);
        assert!(
            out.status.success(),
            "on the node: {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
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
            let out = self.kubectl_output(
                &[
                    "get",
                    "pod",
                    "-n",
                    ns,
                    name,
                    "-o",
                    "jsonpath={.status.phase}",
                ],
                None,
            );
            String::from_utf8_lossy(&out.stdout) == "Running"
        });
    }

    /// `testkit/node-deploy ARGS --binary plexus DIR`: plexus's image built
    /// around the release artifact (`cargo dist`, [`crate::dist`]: the
    /// `FROM scratch` image needs the static binary) and deployed from
    /// deploy/ (`--thin`: as its overlay; `--delete`: removed). Panics with
    /// its error and the DaemonSet's pods described.
    pub fn deploy(&self, args: &[&str]) {
        let plexus = crate::dist::build().unwrap_or_else(|e| panic!("{e}"));
        let out = Command::new(repo().join("testkit/node-deploy"))
            .args(args)
            .arg("--binary")
            .arg(&plexus)
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
        let request = self.dir.join(format!("restart-{component}"));
        std::fs::write(&request, "").expect("the restart request is written");
        self.wait_for(
            &format!("{component} restarted"),
            Duration::from_secs(60),
            || !request.exists(),
        );
        self.wait_for(
            &format!("node Ready after the {component} restart"),
            Duration::from_secs(90),
            || self.ready(),
        );
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
