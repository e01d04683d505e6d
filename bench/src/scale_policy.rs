//! The scale simulation with MultiNetworkPolicies (`--scale --policies`,
//! issue 46 item 3): the simulated nodes' `plexus daemon`s enforce them
//! (`--multi-network-policy`) while the cluster grows, and at each step
//! multi-networkpolicy-iptables runs on the same objects, one per simulated
//! node, after plexus's, as Multus does in the plain scale case.
//!
//! What the cluster holds besides the growing pods (which no policy names):
//! - 10 policies `pol-<k>` for the NAD `scale-net`, each selecting the pods
//!   labelled `guard: g<k>` and allowing TCP 80 from the 3 pods labelled
//!   `peer: p<k>` (pods of other nodes, known by their network-status);
//! - `pol-none`, which selects no pod and names every pod of the namespace
//!   as its peer: a daemon must not pay for it;
//! - on each daemon's node, [`GUARDED`] pods with a real network namespace,
//!   ADDed through that node's daemon (the shim, as a runtime execs it)
//!   before the steps, each selected by one policy; their daemons restore
//!   them at each step's start, as after a rollout.
//!
//! Measured per daemon, the same way for both, at each step:
//! - synced: plexus when its log says its node's pods are listed and its
//!   metrics hold the 11 policies and its node's peers
//!   (`plexus_cache_objects`); multi-networkpolicy-iptables when its log says
//!   its pods are listed (`OnPodSynced`) and its rules are in its node's
//!   selected pods;
//! - RSS once synced and settled ([`SETTLE`]);
//! - bytes received: the TCP payload its sockets received (the kernel's
//!   `bytes_received` of each, `ss -tip` in the node namespace, the sockets
//!   told apart by process), from its start until synced, and while pods of
//!   other nodes churn (created, then deleted), none selected or named by a
//!   policy;
//! - a policy change to enforcement: a peer pod's label taken away, then
//!   given back, for each policy in turn, timed from just before the
//!   `kubectl label` to the moment every selected pod's rules have changed
//!   (plexus: the rule count of its nftables table `plexus-policy`, read
//!   over netlink; the peer: its iptables rules, `iptables-save`), polled
//!   every 5 ms.
//!
//! multi-networkpolicy-iptables finds a pod's network namespace through the
//! CRI (a container's pid), and will not start without a CRI socket: a
//! stand-in (`bench/fake-cri`, built with its own vendor/) answers the pid of
//! a process the benchmark keeps in each selected pod's namespace, named in
//! the pod's container status, and pods are marked Running (the peer skips
//! any other).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use plexus_dataplane::nftables::Nftables;
use plexus_dataplane::NetNs;
use plexus_testkit::kube::{private_api, KubeApi};
use serde_json::json;

use crate::daemons::{in_node, metrics_page, pods_synced, wait_ready, Daemons, Launch, NodeDaemon};
use crate::scale::create_pods;
use crate::scale_step::{rss_kb, Setup, READY_BOUND};
use crate::{cni_env_as, invoke, percentile, verdict, Namespaces};

/// The first daemon's metrics port in the node namespace; one per node on.
const METRICS_BASE: u16 = 19_700;
/// Pods of each daemon's node that policies select (ADDed through it).
const GUARDED: usize = 2;
/// Policies with peers, and peers of each.
const POLICIES: usize = 10;
const PEERS: usize = 3;
/// The NAD the pods and policies name.
const NETWORK: &str = "scale-net";
/// plexus's table in a pod's namespace (src/netpolicy/render.rs).
const TABLE: &str = "plexus-policy";
/// Pods of other nodes created and deleted in a churn, per daemon.
const CHURN_PER_DAEMON: usize = 50;
/// After being synced, before RSS is read.
const SETTLE: Duration = Duration::from_secs(5);
/// A change not enforced within this fails the run.
const ENFORCE_BOUND: Duration = Duration::from_secs(120);
/// The bounds: RSS growth from the first step to the last, and
/// "near zero" bytes received per daemon while other nodes churn (a watch
/// bookmark or an HTTP/2 ping may land in the window; one churned pod's
/// object alone is over 1 KiB).
const RSS_GROWTH_MAX: f64 = 0.20;
const CHURN_NEAR_ZERO: u64 = 4096;

/// What one contender measured at one step.
/// What [`World::settled`] measures.
struct Settled {
    rss_kb: Vec<u64>,
    churn_bytes: Vec<u64>,
    churned: usize,
    enforce: Vec<Duration>,
    look: Duration,
}

struct Figures {
    pods: usize,
    ready: Vec<Duration>,
    rss_kb: Vec<u64>,
    sync_bytes: Vec<u64>,
    churn_bytes: Vec<u64>,
    /// Pods created and deleted in the churn.
    churned: usize,
    enforce: Vec<Duration>,
    /// plexus's policy caches, per daemon: peer pods held, peer scopes.
    peer_pods: Vec<u64>,
    peer_scopes: Vec<u64>,
    /// One look at a pod's rules (the median of 20): the polling's own
    /// granularity, part of each enforcement time.
    look: Duration,
}

/// A pod of a daemon's node that a policy selects.
impl Figures {
    /// A step's figures: `caches`, plexus's peer pods and scopes per daemon
    /// (none for the peer).
    fn of(
        pods: usize,
        ready: Vec<Duration>,
        sync_bytes: Vec<u64>,
        settled: Settled,
        (peer_pods, peer_scopes): (Vec<u64>, Vec<u64>),
    ) -> Figures {
        Figures {
            pods,
            ready,
            rss_kb: settled.rss_kb,
            sync_bytes,
            churn_bytes: settled.churn_bytes,
            churned: settled.churned,
            enforce: settled.enforce,
            peer_pods,
            peer_scopes,
            look: settled.look,
        }
    }
}

struct Guarded {
    name: String,
    node: usize,
    /// The policy selecting it.
    policy: usize,
    netns: NetNs,
}

/// Processes the benchmark started, killed on drop.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Everything the steps share.
struct World<'a> {
    api: &'a KubeApi,
    node: &'a NetNs,
    ns: String,
    setup: &'a Setup<'a>,
    /// The daemons' directories (state, records, sockets), kept across
    /// steps: each step's daemons restore the guarded pods' sandboxes.
    work: PathBuf,
    guarded: Vec<Guarded>,
}

pub(crate) fn run(setup: &Setup) -> Result<bool, String> {
    println!(
        "\nScale with MultiNetworkPolicies: {} daemons ({} pods each, {GUARDED} of them selected \
         by a policy) in a cluster of {:?} pods; {POLICIES} policies with {PEERS} peer pods each \
         and one that selects nothing",
        setup.daemons,
        setup.per_node + GUARDED,
        setup.sizes
    );
    let peer = match setup.mnp_iptables {
        Some(binary) => Some((binary, fake_cri()?)),
        None => {
            println!(
                "multi-networkpolicy-iptables: not run (build it with \
                 .ci/multi-networkpolicy-iptables, or name it with --mnp-iptables)"
            );
            None
        }
    };
    let api = private_api("scalepol");
    api.kubectl(&[
        "wait",
        "--for=condition=established",
        "--timeout=60s",
        "crd/multi-networkpolicies.k8s.cni.cncf.io",
    ]);
    let ns = api.namespace("pxscale");
    let mut namespaces = Namespaces(Vec::new());
    let (node, _relay) = crate::node_reaching(&api, &mut namespaces)?;
    let mut world = World {
        api: &api,
        node: &node,
        ns,
        setup,
        work: setup.tmp.join("policy-nodes"),
        guarded: Vec::new(),
    };
    let mut holders = Children(Vec::new());
    world.lay_out(&mut namespaces, &mut holders)?;
    let cri = match &peer {
        Some((_, binary)) => Some(FakeCri::start(binary, &setup.tmp.join("fake-cri.sock"))?),
        None => None,
    };

    let ours = setup.daemons * setup.per_node;
    let mut made = 0;
    let (mut plexus_steps, mut peer_steps) = (Vec::new(), Vec::new());
    for &size in &setup.sizes {
        let want = size.max(ours);
        create_pods(&api, &world.ns, setup, made, want)?;
        made = want;
        plexus_steps.push(world.plexus_step(want)?);
        if let (Some((binary, _)), Some(cri)) = (&peer, &cri) {
            peer_steps.push(world.peer_step(binary, &cri.socket, want)?);
        }
    }
    drop(holders);
    Ok(report(setup, &plexus_steps, &peer_steps))
}

/// `bench/fake-cri/build`'s binary (it builds it once).
fn fake_cri() -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fake-cri/build");
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() || !path.is_file() {
        return Err(format!(
            "{} failed: multi-networkpolicy-iptables needs its stand-in CRI",
            script.display()
        ));
    }
    Ok(path)
}

/// The stand-in CRI server, stopped on drop.
struct FakeCri {
    _child: Children,
    socket: PathBuf,
}

impl FakeCri {
    fn start(binary: &Path, socket: &Path) -> Result<FakeCri, String> {
        let child = Command::new(binary)
            .arg(socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e}", binary.display()))?;
        let cri = FakeCri {
            _child: Children(vec![child]),
            socket: socket.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            if Instant::now() > deadline {
                return Err("the stand-in CRI did not listen within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(cri)
    }
}

fn node_name(n: usize) -> String {
    format!("scale-node-{n}")
}

fn policy(ns: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: k8s.cni.cncf.io/v1beta1\nkind: MultiNetworkPolicy\nmetadata: {{name: {name}, \
         namespace: {ns}, annotations: {{k8s.v1.cni.cncf.io/policy-for: {NETWORK}}}}}\n\
         spec: {spec}\n---\n"
    )
}

/// A peer pod: on a node of its own, its address on the network in its
/// network-status.
fn peer_pod(ns: &str, k: usize, i: usize) -> String {
    let ip = format!("10.1.200.{}", k * PEERS + i + 1);
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: peer-{k}-{i}, namespace: {ns}, \
         labels: {{peer: p{k}}}, annotations: {{k8s.v1.cni.cncf.io/networks: {NETWORK}, \
         k8s.v1.cni.cncf.io/network-status: '[{{\"name\":\"{ns}/{NETWORK}\",\
         \"interface\":\"net1\",\"ips\":[\"{ip}\"]}}]'}}}}\n\
         spec: {{nodeName: peer-node-{k}, containers: [{{name: c, image: busybox}}]}}\n---\n"
    )
}

/// `pod`'s status marked Running, with `container_id` when given (what the
/// peer reads: only Running pods are its targets and peers).
fn mark_running(api: &KubeApi, ns: &str, pod: &str, container_id: Option<&str>) {
    let mut status = json!({"phase": "Running"});
    if let Some(id) = container_id {
        status["containerStatuses"] = json!([{
            "name": "c", "ready": true, "restartCount": 0, "image": "busybox",
            "imageID": "busybox", "containerID": id,
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
        }]);
    }
    let patch = json!({ "status": status }).to_string();
    api.kubectl(&[
        "patch",
        "pod",
        pod,
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch,
    ]);
}

impl World<'_> {
    /// The NAD, the policies, the peers, and the guarded pods ADDed through
    /// their nodes' daemons (started for it, then stopped), each with a
    /// process in its namespace for the peer's CRI to name.
    fn lay_out(
        &mut self,
        namespaces: &mut Namespaces,
        holders: &mut Children,
    ) -> Result<(), String> {
        let (api, ns, setup) = (self.api, self.ns.clone(), self.setup);
        let ipam = self.setup.tmp.join("host-local");
        let nad = json!({"cniVersion": "1.0.0", "name": NETWORK, "type": "macvlan",
            "master": "uplink0", "mode": "bridge",
            "ipam": {"type": "host-local", "dataDir": ipam.join("net"),
                     "ranges": [[{"subnet": "10.1.0.0/16", "rangeStart": "10.1.100.1",
                                  "rangeEnd": "10.1.100.254"}]]}});
        let mut manifest = crate::pod_start::nad(NETWORK, &ns, &nad);
        for k in 0..POLICIES {
            manifest.push_str(&policy(
                &ns,
                &format!("pol-{k}"),
                &format!(
                    "{{podSelector: {{matchLabels: {{guard: g{k}}}}}, policyTypes: [Ingress], \
                     ingress: [{{from: [{{podSelector: {{matchLabels: {{peer: p{k}}}}}}}], \
                     ports: [{{protocol: TCP, port: 80}}]}}]}}"
                ),
            ));
            for i in 0..PEERS {
                manifest.push_str(&peer_pod(&ns, k, i));
            }
        }
        manifest.push_str(&policy(
            &ns,
            "pol-none",
            "{podSelector: {matchLabels: {guard: nobody}}, policyTypes: [Ingress], \
             ingress: [{from: [{podSelector: {}}]}]}",
        ));
        let pid = std::process::id();
        for n in 0..setup.daemons {
            for j in 0..GUARDED {
                let m = n * GUARDED + j;
                let name = format!("guard-{n}-{j}");
                manifest.push_str(&format!(
                    "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}, \
                     labels: {{guard: g{}}}, annotations: {{k8s.v1.cni.cncf.io/networks: \
                     {NETWORK}}}}}\nspec: {{nodeName: {}, containers: [{{name: c, image: busybox, \
                     ports: [{{containerPort: 80}}]}}]}}\n---\n",
                    m % POLICIES,
                    node_name(n)
                ));
                let netns = namespaces.create(format!("pxb-{pid}-g{n}-{j}"))?;
                self.guarded.push(Guarded {
                    name,
                    node: n,
                    policy: m % POLICIES,
                    netns,
                });
            }
        }
        api.create(&manifest);
        for k in 0..POLICIES {
            for i in 0..PEERS {
                mark_running(api, &ns, &format!("peer-{k}-{i}"), None);
            }
        }

        // The guarded pods ADDed through their nodes' daemons.
        let kubeconfig = api.plexus_kubeconfig();
        let launch = self.launcher(&kubeconfig);
        let daemons = self.launch_daemons(&launch)?;
        for n in 0..setup.daemons {
            wait_ready(self.node, port(n)?, Duration::from_secs(60))?;
        }
        let started = Instant::now();
        for g in &self.guarded {
            let name = node_name(g.node);
            let conf = json!({
                "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
                "kubeconfig": kubeconfig, "cniDir": self.work.join(&name).join("cache"),
                "daemonSocket": launch.socket(&name),
                "delegates": [{"cniVersion": "1.0.0", "name": "cluster", "type": "macvlan",
                    "master": "uplink0", "mode": "bridge",
                    "ipam": {"type": "host-local", "dataDir": ipam.join("cluster"),
                             "subnet": "10.2.0.0/16"}}],
            });
            let args = format!(
                "IgnoreUnknown=1;K8S_POD_NAMESPACE={ns};K8S_POD_NAME={}",
                g.name
            );
            let env = cni_env_as(
                "ADD",
                &format!("c-{}", g.name),
                &g.netns,
                "eth0",
                &args,
                Path::new("/nonexistent"),
            );
            invoke(
                self.node,
                setup.plexus,
                &[],
                &env,
                conf.to_string().as_bytes(),
            )
            .map_err(|e| format!("ADD of {}: {e}", g.name))?;
            if plexus_rules(&g.netns) == 0 {
                return Err(format!("{}: no policy rules after its ADD", g.name));
            }
        }
        // Each pod's network-status, as its daemon writes it, before the
        // daemons stop.
        for g in &self.guarded {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !api
                .kubectl(&["get", "pod", "-n", &ns, &g.name, "-o", "json"])
                .contains("network-status")
            {
                if Instant::now() > deadline {
                    return Err(format!("{}: no network-status within 60 s", g.name));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        drop(daemons);
        // A process in each guarded pod's namespace: its "container".
        for g in &self.guarded {
            let mut sleep = Command::new("sleep");
            sleep.arg("infinity").stdin(Stdio::null());
            g.netns.join_in_child(&mut sleep);
            let child = sleep.spawn().map_err(|e| format!("sleep: {e}"))?;
            let id = format!("fake://pid-{}", child.id());
            holders.0.push(child);
            mark_running(api, &ns, &g.name, Some(&id));
        }
        println!(
            "  {} policies, {} peer pods, {} selected pods ADDed through their daemons in {:.1} s",
            POLICIES + 1,
            POLICIES * PEERS,
            self.guarded.len(),
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// The policies that select a pod, and each one's pods.
    fn selected(&self) -> Vec<(usize, Vec<&Guarded>)> {
        (0..POLICIES)
            .map(|k| {
                let pods: Vec<&Guarded> = self.guarded.iter().filter(|g| g.policy == k).collect();
                (k, pods)
            })
            .filter(|(_, pods)| !pods.is_empty())
            .collect()
    }

    /// The peer scopes and peer pods daemon `n` must hold.
    fn expected_peers(&self, n: usize) -> (u64, u64) {
        let scopes: BTreeSet<usize> = self
            .guarded
            .iter()
            .filter(|g| g.node == n)
            .map(|g| g.policy)
            .collect();
        (scopes.len() as u64, (scopes.len() * PEERS) as u64)
    }

    /// Pods of other nodes, `CHURN_PER_DAEMON` per daemon, created and then
    /// deleted (a collection delete, no grace: no kubelet confirms), with
    /// `traffic` sampled for `pids` throughout; the pods churned.
    fn churn(&self, tag: &str, traffic: &mut Traffic, pids: &[u32]) -> Result<usize, String> {
        let count = CHURN_PER_DAEMON * self.setup.daemons;
        let mut manifest = String::new();
        for i in 0..count {
            manifest.push_str(&format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: churn-{tag}-{i}, namespace: {}, \
                 labels: {{churn: {tag}}}, annotations: {{k8s.v1.cni.cncf.io/networks: {NETWORK}, \
                 k8s.v1.cni.cncf.io/network-status: '[{{\"name\":\"{}/{NETWORK}\",\
                 \"interface\":\"net1\",\"ips\":[\"10.1.1.1\"]}}]'}}}}\n\
                 spec: {{nodeName: far-node-{}, containers: [{{name: c, image: busybox}}]}}\n---\n",
                self.ns,
                self.ns,
                i % 10
            ));
        }
        traffic.sample(self.node, pids)?;
        self.api.create(&manifest);
        traffic.sample(self.node, pids)?;
        let path = format!(
            "/api/v1/namespaces/{}/pods?labelSelector=churn%3D{tag}&gracePeriodSeconds=0",
            self.ns
        );
        self.api.kubectl(&["delete", "--raw", &path]);
        // The events delivered: sampled until nothing more arrives for 2 s.
        let mut last = traffic.totals(pids);
        let mut quiet = Instant::now();
        let deadline = Instant::now() + Duration::from_secs(60);
        while quiet.elapsed() < Duration::from_secs(2) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(250));
            traffic.sample(self.node, pids)?;
            let now = traffic.totals(pids);
            if now != last {
                last = now;
                quiet = Instant::now();
            }
        }
        Ok(count)
    }

    /// Each selected policy's first peer taken out of its selector, then
    /// each put back: from before each `kubectl label` until every pod the
    /// policy selects has other rules (`rules` reads them).
    fn changes<R: PartialEq>(
        &self,
        rules: impl Fn(&Guarded) -> R,
    ) -> Result<Vec<Duration>, String> {
        let selected = self.selected();
        let mut times = Vec::new();
        for round in ["off", "on"] {
            for (k, pods) in &selected {
                let label = if round == "off" {
                    format!("peer=off{k}")
                } else {
                    format!("peer=p{k}")
                };
                let before: Vec<R> = pods.iter().map(|g| rules(g)).collect();
                let start = Instant::now();
                self.api.kubectl(&[
                    "label",
                    "--overwrite",
                    "pod",
                    "-n",
                    &self.ns,
                    &format!("peer-{k}-0"),
                    &label,
                ]);
                let mut pending: Vec<usize> = (0..pods.len()).collect();
                while !pending.is_empty() {
                    if start.elapsed() > ENFORCE_BOUND {
                        return Err(format!(
                            "peer-{k}-0 {label}: not enforced within {ENFORCE_BOUND:?} in {}",
                            pending
                                .iter()
                                .map(|&i| pods[i].name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                    }
                    pending.retain(|&i| rules(pods[i]) == before[i]);
                    if !pending.is_empty() {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                times.push(start.elapsed());
            }
        }
        Ok(times)
    }

    /// How this run's plexus daemons are started, with `kubeconfig`.
    fn launcher<'s>(&'s self, kubeconfig: &'s Path) -> Launch<'s> {
        Launch {
            node: self.node,
            plexus: self.setup.plexus,
            kubeconfig,
            work: &self.work,
        }
    }

    /// A plexus daemon per simulated node, with the DaemonSet's
    /// `--multi-network-policy`, started at once.
    fn launch_daemons(&self, launch: &Launch) -> Result<Daemons, String> {
        let mut daemons = Daemons::default();
        for n in 0..self.setup.daemons {
            let extra = ["--multi-network-policy"];
            daemons
                .0
                .push(launch.spawn_with(&node_name(n), port(n)?, &extra)?);
        }
        Ok(daemons)
    }

    /// One step of plexus's daemons: rollout, settle, churn, changes.
    fn plexus_step(&self, pods: usize) -> Result<Figures, String> {
        let mut traffic = Traffic::default();
        let started = Instant::now();
        let kubeconfig = self.api.plexus_kubeconfig();
        let daemons = self.launch_daemons(&self.launcher(&kubeconfig))?;
        let pids: Vec<u32> = daemons.0.iter().map(|d| d.child.id()).collect();
        let what = format!(
            "{pods} pods: not every plexus daemon synced within {READY_BOUND:?} (logs in {})",
            self.work.display()
        );
        let (ready, sync_bytes) = self.synced(&mut traffic, &pids, started, &what, |n| {
            self.plexus_synced(n, &daemons.0[n])
        })?;
        for g in &self.guarded {
            if plexus_rules(&g.netns) == 0 {
                return Err(format!("{}: no plexus rules once synced", g.name));
            }
        }
        std::thread::sleep(SETTLE);
        let (mut peer_pods, mut peer_scopes) = (Vec::new(), Vec::new());
        for daemon in &daemons.0 {
            let page = metrics_page(self.node, daemon.port)?;
            peer_pods.push(cache_objects(&page, "policy-peer-pods"));
            peer_scopes.push(cache_objects(&page, "policy-peer-scopes"));
        }
        let settled = self.settled(&format!("p{pods}"), &mut traffic, &pids, plexus_rules)?;
        drop(daemons);
        Ok(Figures::of(
            pods,
            ready,
            sync_bytes,
            settled,
            (peer_pods, peer_scopes),
        ))
    }

    /// Daemon `n`: its node's pods listed (its log) and its policy caches
    /// holding every policy and its node's peers (its metrics).
    fn plexus_synced(&self, n: usize, daemon: &NodeDaemon) -> Result<bool, String> {
        if !pods_synced(daemon) {
            return Ok(false);
        }
        let Ok(page) = metrics_page(self.node, daemon.port) else {
            return Ok(false);
        };
        let (scopes, peers) = self.expected_peers(n);
        Ok(
            cache_objects(&page, "multi-networkpolicies") == (POLICIES + 1) as u64
                && cache_objects(&page, "policy-peer-scopes") == scopes
                && cache_objects(&page, "policy-peer-pods") == peers,
        )
    }

    /// One step of multi-networkpolicy-iptables, one per simulated node: the
    /// same rollout, settle, churn and changes.
    fn peer_step(&self, binary: &Path, cri: &Path, pods: usize) -> Result<Figures, String> {
        let setup = self.setup;
        let dir = setup.tmp.join(format!("mnp-{pods}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let mut peers = Children(Vec::new());
        let mut logs = Vec::new();
        let started = Instant::now();
        for n in 0..setup.daemons {
            let log_path = dir.join(format!("{}.log", node_name(n)));
            let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
            let mut cmd = Command::new(binary);
            cmd.arg("--kubeconfig")
                .arg(self.api.admin_kubeconfig())
                .args(["--hostname-override", &node_name(n)])
                .arg("--container-runtime-endpoint")
                .arg(cri)
                .args(["--network-plugins", "macvlan"])
                .env_clear()
                .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
                .stdin(Stdio::null())
                .stdout(log.try_clone().map_err(|e| e.to_string())?)
                .stderr(log);
            self.node.join_in_child(&mut cmd);
            peers.0.push(
                cmd.spawn()
                    .map_err(|e| format!("{}: {e}", binary.display()))?,
            );
            logs.push(log_path);
        }
        let pids: Vec<u32> = peers.0.iter().map(Child::id).collect();
        let mut traffic = Traffic::default();
        let what = format!(
            "{pods} pods: not every multi-networkpolicy-iptables synced within {READY_BOUND:?} \
             (logs in {})",
            dir.display()
        );
        let (ready, sync_bytes) = self.synced(&mut traffic, &pids, started, &what, |n| {
            if let Some(status) = peers.0[n].try_wait().map_err(|e| e.to_string())? {
                return Err(format!(
                    "multi-networkpolicy-iptables of {} exited: {status} (see {})",
                    node_name(n),
                    logs[n].display()
                ));
            }
            let log = std::fs::read_to_string(&logs[n]).unwrap_or_default();
            Ok(log.contains("OnPodSynced")
                && self
                    .guarded
                    .iter()
                    .filter(|g| g.node == n)
                    .all(|g| peer_enforced(&g.netns, g.policy)))
        })?;
        std::thread::sleep(SETTLE);
        let settled = self.settled(&format!("m{pods}"), &mut traffic, &pids, peer_rules)?;
        drop(peers);
        Ok(Figures::of(
            pods,
            ready,
            sync_bytes,
            settled,
            Default::default(),
        ))
    }

    /// Waits until `synced(n)` holds for every daemon `n` (within
    /// [`READY_BOUND`] of `started`, else the error `what`), sampling
    /// `traffic` meanwhile: when each synced, and the bytes it had received
    /// by then.
    fn synced(
        &self,
        traffic: &mut Traffic,
        pids: &[u32],
        started: Instant,
        what: &str,
        mut synced: impl FnMut(usize) -> Result<bool, String>,
    ) -> Result<(Vec<Duration>, Vec<u64>), String> {
        let mut ready = vec![None; pids.len()];
        let mut sync_bytes = vec![0; pids.len()];
        while ready.iter().any(Option::is_none) {
            if started.elapsed() > READY_BOUND {
                return Err(what.to_string());
            }
            let mut newly = Vec::new();
            for (n, at) in ready.iter_mut().enumerate() {
                if at.is_none() && synced(n)? {
                    *at = Some(started.elapsed());
                    newly.push(n);
                }
            }
            traffic.sample(self.node, pids)?;
            for n in newly {
                sync_bytes[n] = traffic.received(pids[n]);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok((ready.into_iter().flatten().collect(), sync_bytes))
    }

    /// What a contender's settled daemons (`pids`) show: their RSS, the
    /// bytes they receive while other nodes churn (churn `tag`), the
    /// enforcement of each policy change, and one look at a pod's rules as
    /// `rules` reads them.
    fn settled<R: PartialEq>(
        &self,
        tag: &str,
        traffic: &mut Traffic,
        pids: &[u32],
        rules: fn(&NetNs) -> R,
    ) -> Result<Settled, String> {
        let rss_kb = pids
            .iter()
            .map(|&p| rss_kb(p))
            .collect::<Result<Vec<_>, _>>()?;
        let before = traffic.totals(pids);
        let churned = self.churn(tag, traffic, pids)?;
        let churn_bytes = traffic
            .totals(pids)
            .iter()
            .zip(&before)
            .map(|(a, b)| a - b)
            .collect();
        let enforce = self.changes(|g| rules(&g.netns))?;
        let look = look(|| rules(&self.guarded[0].netns));
        Ok(Settled {
            rss_kb,
            churn_bytes,
            churned,
            enforce,
            look,
        })
    }
}

/// The median time of 20 calls of `read`.
fn look<R>(read: impl Fn() -> R) -> Duration {
    let times: Vec<Duration> = (0..20)
        .map(|_| {
            let start = Instant::now();
            let _ = read();
            start.elapsed()
        })
        .collect();
    percentile(&times, 0.5)
}

fn port(n: usize) -> Result<u16, String> {
    Ok(METRICS_BASE + u16::try_from(n).map_err(|e| e.to_string())?)
}

/// `plexus_cache_objects{kind="<kind>"}` of a metrics page (0 without).
fn cache_objects(page: &str, kind: &str) -> u64 {
    let name = format!("plexus_cache_objects{{kind=\"{kind}\"}}");
    page.lines()
        .find(|l| l.starts_with(&name))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or(0.0) as u64
}

fn plexus_rules(netns: &NetNs) -> usize {
    Nftables::open(netns)
        .and_then(|nft| nft.rule_count(TABLE))
        .unwrap_or(0)
}

/// The peer's iptables rules in `netns` (`-A` lines of the filter table).
fn peer_rules(netns: &NetNs) -> Vec<String> {
    crate::netpolicy::peer_rules(netns.path())
}

/// Whether the peer's rules for `pol-<k>` are in `netns`.
fn peer_enforced(netns: &NetNs, k: usize) -> bool {
    let marker = format!("policy:pol-{k} ");
    peer_rules(netns).iter().any(|l| l.contains(&marker))
}

/// Bytes received by processes' TCP sockets, as the kernel counts each
/// socket's payload (`ss -tip`'s `bytes_received`), summed per process over
/// every socket seen in any sample: a socket closed between two samples
/// keeps what it had at the last.
#[derive(Default)]
struct Traffic {
    /// Per (pid, socket's addresses): bytes received at the last sample.
    seen: HashMap<(u32, String), u64>,
    /// Per pid: what sockets since reused (their addresses) had received.
    gone: HashMap<u32, u64>,
}

impl Traffic {
    fn sample(&mut self, node: &NetNs, pids: &[u32]) -> Result<(), String> {
        let wanted: HashSet<u32> = pids.iter().copied().collect();
        let text = in_node(node, "ss", &["-tinpH"])?;
        let mut current: Option<(Vec<u32>, String)> = None;
        for line in text.lines() {
            if !line.starts_with(char::is_whitespace) {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let addresses: Vec<&str> = fields
                    .iter()
                    .copied()
                    .filter(|f| f.contains(':') && !f.starts_with("users:"))
                    .take(2)
                    .collect();
                let owners: Vec<u32> = line
                    .split("pid=")
                    .skip(1)
                    .filter_map(|rest| {
                        rest.split(|c: char| !c.is_ascii_digit())
                            .next()?
                            .parse()
                            .ok()
                    })
                    .filter(|p| wanted.contains(p))
                    .collect();
                current = Some((owners, addresses.join(" ")));
                continue;
            }
            let Some((owners, key)) = &current else {
                continue;
            };
            let Some(received) = line
                .split_whitespace()
                .find_map(|f| f.strip_prefix("bytes_received:"))
                .and_then(|v| v.parse::<u64>().ok())
            else {
                continue;
            };
            if let Some(&pid) = owners.first() {
                let entry = self.seen.entry((pid, key.clone())).or_insert(0);
                if received < *entry {
                    *self.gone.entry(pid).or_insert(0) += *entry;
                }
                *entry = received;
            }
        }
        Ok(())
    }

    fn received(&self, pid: u32) -> u64 {
        self.gone.get(&pid).copied().unwrap_or(0)
            + self
                .seen
                .iter()
                .filter(|((p, _), _)| *p == pid)
                .map(|(_, n)| n)
                .sum::<u64>()
    }

    fn totals(&self, pids: &[u32]) -> Vec<u64> {
        pids.iter().map(|&p| self.received(p)).collect()
    }
}

fn mean(values: &[u64]) -> f64 {
    values.iter().sum::<u64>() as f64 / values.len().max(1) as f64
}

fn kib(bytes: f64) -> String {
    if bytes >= 1024.0 * 1024.0 {
        format!("{:.2} MiB", bytes / 1024.0 / 1024.0)
    } else {
        format!("{:.1} KiB", bytes / 1024.0)
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// The figures side by side, their ratios, and the verdicts on plexus's.
fn report(setup: &Setup, ours: &[Figures], theirs: &[Figures]) -> bool {
    println!(
        "\n{:>7} {:<30} {:>9} {:>9} {:>9} {:>12} {:>12} {:>11} {:>11}",
        "pods",
        "",
        "sync p50",
        "RSS mean",
        "RSS max",
        "sync bytes",
        "churn bytes",
        "enforce p50",
        "enforce p99"
    );
    let row = |who: &str, f: &Figures| {
        println!(
            "{:>7} {:<30} {:>7.2} s {:>6.1} MB {:>6.1} MB {:>12} {:>12} {:>11} {:>11}",
            f.pods,
            who,
            percentile(&f.ready, 0.5).as_secs_f64(),
            mean(&f.rss_kb) / 1024.0,
            *f.rss_kb.iter().max().unwrap_or(&0) as f64 / 1024.0,
            kib(mean(&f.sync_bytes)),
            kib(mean(&f.churn_bytes)),
            ms(percentile(&f.enforce, 0.5)),
            ms(percentile(&f.enforce, 0.99)),
        );
    };
    for (i, o) in ours.iter().enumerate() {
        row("plexus daemon", o);
        if let Some(t) = theirs.get(i) {
            row("multi-networkpolicy-iptables", t);
        }
    }
    println!(
        "(per daemon, {} of each: sync bytes from its start until synced, churn bytes while \
         {} pods of other nodes were created and deleted; enforce: a peer's label changed to \
         every selected pod's rules changed, {} changes)",
        setup.daemons,
        ours.first().map_or(0, |f| f.churned),
        ours.first().map_or(0, |f| f.enforce.len())
    );
    for (i, o) in ours.iter().enumerate() {
        println!(
            "  {} pods: plexus holds {:.1} peer pods in {:.1} scopes per daemon; churn bytes per \
             daemon min {} max {}; one look at a pod's rules: plexus table {}{}",
            o.pods,
            mean(&o.peer_pods),
            mean(&o.peer_scopes),
            o.churn_bytes.iter().min().unwrap_or(&0),
            o.churn_bytes.iter().max().unwrap_or(&0),
            ms(o.look),
            theirs
                .get(i)
                .map(|t| format!(", the peer's iptables-save {}", ms(t.look)))
                .unwrap_or_default(),
        );
    }
    if !theirs.is_empty() {
        println!("multi-networkpolicy-iptables / plexus (above 1: plexus ahead):");
        println!(
            "{:>7} {:>9} {:>12} {:>12} {:>11} {:>11}",
            "pods", "RSS", "sync bytes", "churn bytes", "enforce p50", "enforce p99"
        );
        let ratio = |t: f64, o: f64| {
            if o <= 0.0 {
                "inf".to_string()
            } else {
                format!("{:.1}x", t / o)
            }
        };
        for (o, t) in ours.iter().zip(theirs) {
            println!(
                "{:>7} {:>9} {:>12} {:>12} {:>11} {:>11}",
                o.pods,
                ratio(mean(&t.rss_kb), mean(&o.rss_kb)),
                ratio(mean(&t.sync_bytes), mean(&o.sync_bytes)),
                ratio(mean(&t.churn_bytes), mean(&o.churn_bytes)),
                ratio(
                    percentile(&t.enforce, 0.5).as_secs_f64(),
                    percentile(&o.enforce, 0.5).as_secs_f64()
                ),
                ratio(
                    percentile(&t.enforce, 0.99).as_secs_f64(),
                    percentile(&o.enforce, 0.99).as_secs_f64()
                ),
            );
        }
    }
    let (Some(first), Some(last)) = (ours.first(), ours.last()) else {
        return true;
    };
    let growth = mean(&last.rss_kb) / mean(&first.rss_kb).max(1.0) - 1.0;
    let flat = growth < RSS_GROWTH_MAX;
    println!(
        "plexus RSS with policies grows less than {:.0}% from {} to {} pods ({:.1} MB to {:.1} MB, \
         {:+.1}%): {}",
        RSS_GROWTH_MAX * 100.0,
        first.pods,
        last.pods,
        mean(&first.rss_kb) / 1024.0,
        mean(&last.rss_kb) / 1024.0,
        growth * 100.0,
        verdict(flat)
    );
    let worst = ours
        .iter()
        .flat_map(|f| f.churn_bytes.iter().copied())
        .max()
        .unwrap_or(0);
    let quiet = worst <= CHURN_NEAR_ZERO;
    println!(
        "plexus bytes received while other nodes churn unselected pods near zero (at most {} B \
         per daemon; the most: {worst} B): {}",
        CHURN_NEAR_ZERO,
        verdict(quiet)
    );
    flat && quiet
}
