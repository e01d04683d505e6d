//! Thick mode against the real thing: `plexus daemon` run in a node
//! namespace this test creates, watching a real kube-apiserver (testkit::kube,
//! through a relay) with the token `deploy/rbac.yaml` binds, and the
//! `plexus` binary exec'd as kubelet's runtime execs it, a shim forwarding
//! to the daemon's socket. API requests are counted from the API server's
//! side (its audit log), memory from the daemon's /proc status.
//!
//! Modules: `calls` (ADD and DEL through the daemon, its status outbox),
//! `storm` (boot storms, a kill mid-storm), `lifecycle` (SIGTERM, a
//! rewritten kubeconfig), `hotplug` (dynamic networks), `thin` (thin mode
//! beside the daemon), `ipamclaims`, `whereabouts` and `whereabouts_peer` (cluster-wide IPAM,
//! beside the real whereabouts), `dra` (DRA claims from watch caches), `dra_driver` (plexus as a DRA driver); the world they share is here.

#[path = "../e2e_support/mod.rs"]
mod e2e_support;

mod calls;
mod dra;
mod dra_driver;
mod hotplug;
mod ipamclaims;
mod lifecycle;
mod netpolicy;
mod storm;
mod thin;
mod whereabouts;
mod whereabouts_peer;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use e2e_support::*;
use plexus_testkit::kube::status_entries;
use plexus_testkit::process::LoggedChild;
use serde_json::{json, Value};

/// A node namespace with a relay to the API server, a Kubernetes namespace
/// with the NAD `macnet` (macvlan on `uplink0`, host-local /16), plexus's
/// thick conf, and the daemon.
struct World {
    kube: KubeNode,
    conf: String,
    metrics_port: u16,
    /// The test's tag: its pod namespaces are named after it.
    tag: String,
}

fn world(tag: &str) -> Option<World> {
    world_on(plexus_testkit::kube::api, tag)
}

/// [`world`] on the API server `api` gives.
fn world_on(
    api: impl FnOnce() -> &'static plexus_testkit::kube::KubeApi,
    tag: &str,
) -> Option<World> {
    world_needing(plexus_testkit::Feature::KubeApiServer, api, tag)
}

/// [`world`] for a test of devices only the VM has: its API server runs
/// there too ([`plexus_testkit::Feature::KubeApiServerBesideDevices`]).
fn world_beside_devices(tag: &str) -> Option<World> {
    let server = plexus_testkit::Feature::KubeApiServerBesideDevices;
    world_needing(server, plexus_testkit::kube::api, tag)
}

fn world_needing(
    server: plexus_testkit::Feature,
    api: impl FnOnce() -> &'static plexus_testkit::kube::KubeApi,
    tag: &str,
) -> Option<World> {
    let kube = kube_node_needing(server, api, tag, "pxd", |tmp| {
        json!({"cniVersion": "1.0.0", "name": "macnet", "type": "macvlan",
            "master": "uplink0", "ipam": host_local(tmp, "10.20.0.0/16", "mac")})
    })?;
    let tmp = kube.tmp.path();
    let conf = json!({
        "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
        "kubeconfig": kube.api.plexus_kubeconfig(),
        "cniDir": tmp.join("cache"), "confDir": tmp.join("net.d"),
        "daemonSocket": tmp.join("run/plexus.sock"),
        "delegates": [{"cniVersion": "1.0.0", "name": "podnet", "type": "bridge", "bridge": "br-pod",
                       "isGateway": true, "ipam": host_local(tmp, "10.10.0.0/16", "pod")}],
    })
    .to_string();
    // Distinct per test binary and test, within the node's own loopback.
    static PORT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(19100);
    let metrics_port = PORT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Some(World {
        kube,
        conf,
        metrics_port,
        tag: tag.to_string(),
    })
}

/// A running `plexus daemon`, killed on drop.
type Daemon = LoggedChild;

impl World {
    fn socket(&self) -> PathBuf {
        self.kube.tmp.path().join("run/plexus.sock")
    }

    /// Start the daemon in the node namespace and wait until /readyz says
    /// so (its caches synced), at most 30 s.
    fn daemon(&self) -> Daemon {
        self.daemon_with(&[])
    }

    /// The daemon's kubeconfig: the test's own copy when it made one
    /// ([`World::own_kubeconfig`]), else the shared API server's.
    fn kubeconfig(&self) -> PathBuf {
        let own = self.kube.tmp.path().join("plexus.kubeconfig");
        if own.exists() {
            own
        } else {
            self.kube.api.plexus_kubeconfig()
        }
    }

    /// A copy of the plexus kubeconfig that this test may rewrite.
    fn own_kubeconfig(&self) -> PathBuf {
        let own = self.kube.tmp.path().join("plexus.kubeconfig");
        std::fs::copy(self.kube.api.plexus_kubeconfig(), &own).unwrap();
        own
    }

    /// The daemon's status outbox (`--state-dir`/status).
    fn outbox(&self) -> PathBuf {
        self.kube.tmp.path().join("state/status")
    }

    /// [`World::daemon`] with `extra` arguments.
    fn daemon_with(&self, extra: &[&str]) -> Daemon {
        let metrics = format!("127.0.0.1:{}", self.metrics_port);
        let daemon = self.spawn_daemon(Some(&self.kube.node), &metrics, extra);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.http("/readyz").0 == 200 {
                return daemon;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon was not ready within 30 s: {}",
                daemon.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `plexus daemon` of this world started in the namespace `netns` (the
    /// test's node; `None`: this process's own, the VM's, where its devices
    /// are), its metrics served at `metrics`, with `extra` arguments; not
    /// waited for.
    fn spawn_daemon(&self, netns: Option<&str>, metrics: &str, extra: &[&str]) -> Daemon {
        static STARTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = self.kube.tmp.path().join(format!("daemon-{n}.log"));
        let mut daemon = match netns {
            Some(netns) => {
                let mut ip = Command::new("ip");
                ip.args(["netns", "exec", netns, PLEXUS]);
                ip
            }
            None => Command::new(PLEXUS),
        };
        daemon
            .arg("daemon")
            .arg("--socket")
            .arg(self.socket())
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(["--node-name", &self.kube.node])
            .arg(format!("--metrics-address={metrics}"))
            .args(["--api-timeout", "5"])
            .arg("--state-dir")
            .arg(self.kube.tmp.path().join("state"))
            .args(extra)
            // The API server is shared by the run: only the test of the
            // IPAM reconciler runs one, on its own pools' namespace.
            .args(
                (!extra.contains(&"--ipam-reconcile-interval"))
                    .then_some("--ipam-reconcile-interval=0"),
            )
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        Daemon::spawn(&mut daemon, log)
    }

    /// GET `path` on the daemon's HTTP port: (status, body); 0 when nothing
    /// answers.
    fn http(&self, path: &str) -> (u16, String) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.kube.node, "curl", "-s", "-m", "5"])
            .args(["-w", "\n%{http_code}"])
            .arg(format!("http://127.0.0.1:{}{path}", self.metrics_port))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }

    /// The value of the metric line starting with `prefix` (0 when absent).
    fn metric(&self, prefix: &str) -> f64 {
        let (_, text) = self.http("/metrics");
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    }

    /// Pods `names` on `node`, each selecting `selection`, in one apply.
    fn pods(&self, names: &[String], node: &str, selection: &str) {
        let mut manifest = String::new();
        for name in names {
            manifest.push_str(&format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {}\n  \
                 annotations: {{k8s.v1.cni.cncf.io/networks: \"{selection}\"}}\n\
                 spec: {{nodeName: {node}, containers: [{{name: c, image: busybox}}]}}\n---\n",
                self.kube.kube_ns
            ));
        }
        self.kube.api.apply(&manifest);
    }

    /// The shim, as the runtime execs it, for pod `pod` in namespace `netns`.
    fn call(&self, command: &str, pod: &str, netns: &str, conf: &str) -> Output {
        self.call_with(command, pod, netns, conf, "")
    }

    /// [`World::call`] with more `CNI_ARGS` (`;KEY=VALUE...`).
    fn call_with(&self, command: &str, pod: &str, netns: &str, conf: &str, more: &str) -> Output {
        let args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={pod};K8S_POD_INFRA_CONTAINER_ID=c-{pod}{more}",
            self.kube.kube_ns
        );
        let netns = format!("/var/run/netns/{netns}");
        plexus_at(
            &self.kube.node,
            command,
            &format!("c-{pod}"),
            &netns,
            "eth0",
            &args,
            conf,
        )
    }

    /// Wait until the daemon delivered every queued status write (at most
    /// 30 s), and check the outbox is empty.
    fn writes_delivered(&self, daemon: &Daemon) {
        within_30s("writes still queued", daemon, || {
            self.metric("plexus_status_writes_queued") <= 0.0
        });
        let left: Vec<_> = std::fs::read_dir(self.outbox())
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{left:?}");
    }

    /// Pod `name` on this node selecting `selection`, and a pod network
    /// namespace for it (`<tag>-p`).
    fn pod_here(&mut self, name: &str, selection: &str) -> String {
        let netns = self.kube.namespaces.add(&format!("{}-p", self.tag));
        self.pods(&[name.to_string()], &self.kube.node.clone(), selection);
        netns
    }

    /// The conf with `changes` merged in (`null` removes a key).
    fn conf_with(&self, changes: Value) -> String {
        conf_with(&self.conf, changes)
    }

    /// The uid of pod `name`.
    fn uid(&self, name: &str) -> String {
        self.kube.pod_field(name, "{.metadata.uid}")
    }

    /// Every pod's network-status, by pod name, in one list.
    fn network_statuses(&self) -> Vec<(String, Value)> {
        let list: Value = serde_json::from_str(&self.kube.api.kubectl(&[
            "get",
            "pods",
            "-n",
            &self.kube.kube_ns,
            "-o",
            "json",
        ]))
        .unwrap();
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| {
                let status =
                    p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"].as_str()?;
                Some((
                    p["metadata"]["name"].as_str().unwrap().to_string(),
                    serde_json::from_str(status).unwrap(),
                ))
            })
            .collect()
    }

    /// Nothing plexus made is left: no record, no address allocation, no
    /// link in the node beyond its own and the bridge, none in the pods.
    fn assert_nothing_left(&self, pods: &[String]) {
        assert_nothing_left(self.kube.tmp.path());
        let mut node_links = link_names(&self.kube.node);
        node_links.sort();
        assert_eq!(node_links, ["br-pod", "lo", "uplink0", "uplink0p"]);
        for pod in pods {
            assert_eq!(link_names(pod), ["lo"], "{pod}");
        }
    }
}

fn cluster_ip(out: &Output) -> String {
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    result["ips"][0]["address"].as_str().unwrap().to_string()
}

// What the dynamic-network tests (hotplug, thin, ipamclaims) read.

impl World {
    /// Set pod `pod`'s selection annotation to `value`.
    fn annotate(&self, pod: &str, value: &str) {
        self.kube.api.kubectl(&[
            "annotate",
            "--overwrite",
            "pod",
            pod,
            "-n",
            &self.kube.kube_ns,
            &format!("k8s.v1.cni.cncf.io/networks={value}"),
        ]);
    }

    /// Pod `pod`'s network-status: its entries' `(name, interface)`.
    fn status_of(&self, pod: &str) -> Vec<(String, String)> {
        let text = self.kube.pod_field(
            pod,
            r"{.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}",
        );
        status_entries(&text)
    }

    /// Whether pod `pod` has an event of `kind` for `reason` whose message
    /// contains `text`.
    fn has_event(&self, pod: &str, kind: &str, reason: &str, text: &str) -> bool {
        pod_events(self.kube.api, &self.kube.kube_ns, pod)
            .iter()
            .any(|(t, r, m)| t == kind && r == reason && m.contains(text))
    }

    /// Addresses host-local holds for `macnet` (its allocation files).
    fn macnet_leases(&self) -> usize {
        files_in(&self.kube.tmp.path().join("ipam/mac"))
            .into_iter()
            .filter(|f| !f.ends_with("lock") && !f.contains("last_reserved_ip"))
            .count()
    }
}

/// Poll `done` every 20 ms for at most 30 s.
#[track_caller]
fn within_30s(what: &str, daemon: &Daemon, done: impl FnMut() -> bool) {
    daemon.wait_until(what, Duration::from_secs(30), done);
}

fn sorted_links(netns: &str) -> Vec<String> {
    let mut links = link_names(netns);
    links.sort();
    links
}

/// A daemon started with `extra` arguments, and pod `p1` selecting
/// `macnet@net1` ADDed through it, its network-status written: the world,
/// the pod's netns and the daemon.
fn running_pod(tag: &str, extra: &[&str]) -> Option<(World, String, Daemon)> {
    let mut w = world(tag)?;
    let pod_ns = w.pod_here("p1", "macnet@net1");
    let daemon = w.daemon_with(extra);
    assert_ok("ADD", &w.call("ADD", "p1", &pod_ns, &w.conf));
    w.writes_delivered(&daemon);
    Some((w, pod_ns, daemon))
}
