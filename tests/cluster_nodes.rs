//! deploy/ on a cluster of three real kubelets (issue 34 items 1-3):
//! `testkit/node-up --nodes 3`, a control-plane node and two workers, each
//! in network and mount namespaces and a cgroup subtree of its own, on a
//! fabric (a bridge in a namespace of its own; each node's `eth0` and
//! `eth1` are veths on it). `kubectl apply -k deploy/` unchanged runs
//! plexus on every node (thick mode), and:
//!
//! - pods on different nodes reach each other over a macvlan network on
//!   the fabric (`master: eth1`), by ping and by TCP, each with its
//!   network-status (multi-net spec v1.3 §4.1.2), with cluster-wide
//!   `whereabouts` IPAM giving addresses unique across the nodes. (This
//!   host's kernel has no ipvlan or 802.1q: those cross the fabric in the
//!   VM, `tests/cross_node.rs`.)
//! - a rolling update of the DaemonSet across every node while pods are
//!   created on all of them: every pod gets every network, and nothing is
//!   left after their deletion;
//! - a node's power cut, then its Node object deleted: the pods are
//!   rescheduled with their networks, the dead pods' addresses come back
//!   within a bounded time and no address is held twice; the node powered
//!   on rejoins, its old sandboxes leave nothing, and a new pod on it gets
//!   its networks;
//! - `kubectl drain` moves a node's pods, and their networks follow;
//! - a MultiNetworkPolicy applied with kubectl (issue 35) isolates a pod on
//!   one node and matches its peers on the others by their network-status.
//!
//! The cluster starts once for this binary (about 35 s) and is shared; the
//! tests take turns (a drain or a power cut changes what the others see),
//! each in a Kubernetes namespace of its own.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use plexus_testkit::kube::nad_manifest;
use plexus_testkit::node::{cluster, Cluster, Node};
use plexus_testkit::Feature;
use serde_json::{json, Value};

/// One test at a time: each changes the cluster the others see.
static ALONE: Mutex<()> = Mutex::new(());

/// The cluster with plexus deployed from deploy/ as it is, and this test's
/// turn; `None` when the machine cannot run it (the skip is recorded).
fn turn() -> Option<(MutexGuard<'static, ()>, &'static Cluster)> {
    if !plexus_testkit::require(&[Feature::KubeNode]) {
        return None;
    }
    let alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = cluster();
    static DEPLOYED: OnceLock<()> = OnceLock::new();
    DEPLOYED.get_or_init(|| {
        let started = Instant::now();
        cluster.control().deploy(&[]);
        eprintln!("plexus deployed on every node in {:?}", started.elapsed());
    });
    Some((alone, cluster))
}

/// A test's [`turn`] with what it works in: the cluster, its control node,
/// and the test's scene `S`.
type TurnWith<S> = (MutexGuard<'static, ()>, &'static Cluster, &'static Node, S);

/// [`turn`] with the `fabric` network in a namespace `prefix-...` of the
/// test's own, its addresses in `range` ([`OnFabric::new`]).
fn turn_on_fabric(prefix: &str, range: &str) -> Option<TurnWith<OnFabric<'static>>> {
    let (alone, cluster) = turn()?;
    let scene = OnFabric::new(cluster, prefix, range);
    Some((alone, cluster, cluster.control(), scene))
}

/// [`turn`] with the Deployment `app`'s pods on node `from` of the cluster,
/// their addresses in `range` ([`Moving::start`]).
fn turn_moving(from: usize, app: &'static str, range: &str) -> Option<TurnWith<Moving<'static>>> {
    let (alone, cluster) = turn()?;
    let mover = Moving::start(cluster, &cluster.nodes[from], app, range);
    Some((alone, cluster, cluster.control(), mover))
}

/// A macvlan network on the fabric (every node's `eth1`), its addresses
/// from cluster-wide IPAM in `range`.
fn fabric_nad(range: &str) -> String {
    nad_manifest(
        "fabric",
        &[],
        &json!({"cniVersion": "1.0.0", "name": "fabric", "type": "macvlan", "master": "eth1",
                "mode": "bridge", "ipam": {"type": "whereabouts", "range": range}}),
    )
}

/// The TCP port each pod answers on with its name.
const PORT: &str = "7000";

/// The spec of a pod that answers on [`PORT`] with its name (busybox's
/// persistent `nc`), attached to `fabric`.
fn pod_spec(image: &str, node_name: Option<&str>) -> String {
    let pinned = node_name.map_or(String::new(), |n| format!("nodeName: {n}\n  "));
    format!(
        r#"spec:
  {pinned}terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  containers:
    - name: main
      image: {image}
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", "trap 'exit 0' TERM; nc -ll -p {PORT} -e hostname & wait"]"#
    )
}

/// Pod `name` on node `node`, attached to `fabric`.
fn pinned_pod(name: &str, node: &Node) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  annotations:\n    \
         k8s.v1.cni.cncf.io/networks: fabric\n{}\n",
        pod_spec(&node.pod_image, Some(&node.name))
    )
}

/// A Deployment of `replicas` pods attached to `fabric`, labelled
/// `app: name`.
fn deployment(name: &str, replicas: usize, image: &str) -> String {
    let spec = pod_spec(image, None).replace('\n', "\n    ");
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata:
      labels: {{app: {name}}}
      annotations: {{k8s.v1.cni.cncf.io/networks: fabric}}
    {spec}
"#
    )
}

/// Pod `ns/pod`'s address on `ns/fabric` by its network-status, checked
/// against its `net1` inside; `None` until it has one.
fn fabric_address(control: &Node, ns: &str, pod: &str) -> Option<String> {
    let text = control.network_status_text(ns, pod);
    let status: Vec<Value> = serde_json::from_str(&text).ok()?;
    let entry = status
        .iter()
        .find(|e| e["name"] == format!("{ns}/fabric"))?;
    assert_eq!(entry["interface"], "net1", "{text}");
    let ip = entry["ips"][0].as_str()?.to_string();
    let inside = control.kubectl(&[
        "exec", "-n", ns, pod, "--", "ip", "-4", "-o", "addr", "show", "net1",
    ]);
    assert!(
        inside.contains(&format!("inet {ip}/24")),
        "{ns}/{pod}: {inside}"
    );
    Some(ip)
}

/// Waits until each of `pods` is Running with its address on `fabric`,
/// and returns them (in `pods`' order).
fn wait_attached(control: &Node, ns: &str, pods: &[String]) -> Vec<String> {
    pods.iter()
        .map(|pod| {
            control.wait_running(ns, pod, Duration::from_secs(120));
            let mut ip = None;
            control.wait_for(
                &format!("{ns}/{pod} attached to fabric"),
                Duration::from_secs(60),
                || {
                    ip = fabric_address(control, ns, pod);
                    ip.is_some()
                },
            );
            ip.expect("an address")
        })
        .collect()
}

/// Asserts that no address is among `ips` twice.
fn assert_unique(ips: &[String]) {
    let distinct: BTreeSet<&String> = ips.iter().collect();
    assert_eq!(distinct.len(), ips.len(), "an address given twice: {ips:?}");
}

/// The pods of `ns` labelled `app=app`, with their nodes.
fn pods_of(control: &Node, ns: &str, app: &str) -> Vec<(String, String)> {
    let out = control.kubectl(&[
        "get",
        "pods",
        "-n",
        ns,
        "-l",
        &format!("app={app}"),
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.metadata.deletionTimestamp}{"\n"}{end}"#,
    ]);
    out.lines()
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            // Pods being deleted are not the Deployment's any more.
            (words.len() == 2).then(|| (words[0].to_string(), words[1].to_string()))
        })
        .collect()
}

/// The whereabouts allocations of the cluster that pods of `ns` hold, as
/// (address offset's pool entry podref, pool): every `podref` `ns/...`.
fn allocations_of(control: &Node, ns: &str) -> Vec<String> {
    let pools: Value = serde_json::from_str(&control.kubectl(&[
        "get",
        "ippools.whereabouts.cni.cncf.io",
        "-A",
        "-o",
        "json",
    ]))
    .expect("JSON");
    let mut held = Vec::new();
    for pool in pools["items"].as_array().into_iter().flatten() {
        for entry in pool["spec"]["allocations"]
            .as_object()
            .into_iter()
            .flatten()
        {
            let podref = entry.1["podref"].as_str().unwrap_or_default();
            if podref.starts_with(&format!("{ns}/")) {
                held.push(podref.to_string());
            }
        }
    }
    held.sort();
    held
}

/// Cordons every node but `keep`, applies `manifest`, waits until the
/// pods labelled `app` are `count` on `keep`, and uncordons the others:
/// a Deployment's pods placed on one node, the way an operator would.
fn placed_on(cluster: &Cluster, keep: &Node, ns: &str, app: &str, count: usize, manifest: &str) {
    let control = cluster.control();
    let others: Vec<&Node> = cluster
        .nodes
        .iter()
        .filter(|n| n.name != keep.name)
        .collect();
    for node in &others {
        control.kubectl(&["cordon", &node.name]);
    }
    control.apply(ns, manifest);
    control.wait_for(
        &format!("{count} pods of {app} on {}", keep.name),
        Duration::from_secs(120),
        || {
            let pods = pods_of(control, ns, app);
            pods.len() == count && pods.iter().all(|(_, node)| *node == keep.name)
        },
    );
    for node in &others {
        control.kubectl(&["uncordon", &node.name]);
    }
}

/// A test's namespace with the `fabric` network (its addresses in a range
/// of its own), and every node's network state before it.
struct OnFabric<'c> {
    cluster: &'c Cluster,
    ns: String,
    before: Vec<BTreeSet<String>>,
}

impl<'c> OnFabric<'c> {
    fn new(cluster: &'c Cluster, prefix: &str, range: &str) -> Self {
        let before = cluster.network_states();
        let ns = cluster.control().namespace(prefix);
        cluster.control().apply(&ns, &fabric_nad(range));
        OnFabric {
            cluster,
            ns,
            before,
        }
    }

    /// The namespace's pods deleted: nothing left on any node nor in the
    /// IPPools.
    fn end(self) {
        self.cluster
            .delete_pods_leaving_nothing(&self.ns, &self.before);
        assert_eq!(
            allocations_of(self.cluster.control(), &self.ns),
            Vec::<String>::new(),
            "addresses left held"
        );
    }
}

#[test]
fn pods_on_different_nodes_reach_each_other_over_the_fabric_with_unique_addresses() {
    let Some((_alone, cluster, control, scene)) = turn_on_fabric("fabric", "10.40.0.0/24") else {
        return;
    };
    let ns = scene.ns.clone();
    let pods: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("on-{}", n.name))
        .collect();
    for (pod, node) in pods.iter().zip(&cluster.nodes) {
        control.apply(&ns, &pinned_pod(pod, node));
    }
    let ips = wait_attached(control, &ns, &pods);
    eprintln!("addresses on the fabric: {ips:?}");
    assert_unique(&ips);
    for (i, from) in pods.iter().enumerate() {
        for (j, (to, ip)) in pods.iter().zip(&ips).enumerate() {
            if i == j {
                continue;
            }
            let ping = control.kubectl_output(
                &[
                    "exec", "-n", &ns, from, "--", "ping", "-c", "1", "-W", "3", ip,
                ],
                None,
            );
            assert!(
                ping.status.success(),
                "{from} pings {to} at {ip}: {}",
                String::from_utf8_lossy(&ping.stdout)
            );
            let answer =
                control.kubectl(&["exec", "-n", &ns, from, "--", "nc", "-w", "3", ip, PORT]);
            assert_eq!(answer.trim(), to, "{from} to {to} at {ip}:{PORT} over TCP");
        }
    }
    scene.end();
}

/// Whether `from` gets `to`'s name over TCP at `ip` (busybox `nc`, 3 s).
fn answers(control: &Node, ns: &str, from: &str, ip: &str, to: &str) -> bool {
    let out = control.kubectl_output(
        &["exec", "-n", ns, from, "--", "nc", "-w", "3", ip, PORT],
        None,
    );
    String::from_utf8_lossy(&out.stdout).trim() == to
}

#[test]
fn a_multi_network_policy_matches_its_peers_on_other_nodes() {
    let Some((_alone, cluster, control, scene)) = turn_on_fabric("netpol", "10.43.0.0/24") else {
        return;
    };
    let ns = scene.ns.clone();
    // The server on the control node, a client of each role on each worker.
    let placed = [
        ("server", "app: server", 0),
        ("client-a", "role: a", 1),
        ("client-b", "role: b", 2),
    ];
    for (pod, labels, node) in placed {
        let manifest = pinned_pod(pod, &cluster.nodes[node]);
        control.apply(
            &ns,
            &manifest.replacen(
                "metadata:\n",
                &format!("metadata:\n  labels: {{{labels}}}\n"),
                1,
            ),
        );
    }
    let pods: Vec<String> = placed.iter().map(|p| p.0.to_string()).collect();
    let ips = wait_attached(control, &ns, &pods);
    for client in ["client-a", "client-b"] {
        assert!(
            answers(control, &ns, client, &ips[0], "server"),
            "{client}: open before any policy"
        );
    }
    // kubectl apply, as an operator does: TCP from role=a only, on fabric.
    control.apply(
        &ns,
        &format!(
            "apiVersion: k8s.cni.cncf.io/v1beta1\nkind: MultiNetworkPolicy\nmetadata:\n  \
             name: from-a\n  annotations: {{k8s.v1.cni.cncf.io/policy-for: fabric}}\nspec:\n  \
             podSelector: {{matchLabels: {{app: server}}}}\n  ingress:\n  \
             - from: [{{podSelector: {{matchLabels: {{role: a}}}}}}]\n    \
             ports: [{{protocol: TCP, port: {PORT}}}]\n"
        ),
    );
    control.wait_for("client-b refused", Duration::from_secs(30), || {
        !answers(control, &ns, "client-b", &ips[0], "server")
    });
    assert!(
        answers(control, &ns, "client-a", &ips[0], "server"),
        "a peer on another node"
    );
    // The selected pod's own connections out are not isolated.
    assert!(answers(control, &ns, "server", &ips[1], "client-a"));
    control.kubectl(&["delete", "multi-networkpolicy", "from-a", "-n", &ns]);
    control.wait_for("open again", Duration::from_secs(30), || {
        answers(control, &ns, "client-b", &ips[0], "server")
    });
    scene.end();
}

#[test]
fn a_rolling_update_across_every_node_while_pods_start_fails_none_and_leaks_nothing() {
    let Some((_alone, cluster, control, scene)) = turn_on_fabric("rollout", "10.41.0.0/24") else {
        return;
    };
    let ns = scene.ns.clone();
    // The new image on every node: the same binary with its tag appended,
    // so the installers really replace it.
    control.deploy(&["--tag", "rollout"]);
    control.kubectl(&[
        "set",
        "image",
        "daemonset/plexus",
        "-n",
        "kube-system",
        "*=plexus:rollout",
    ]);
    // Pods on every node while the DaemonSet rolls, two at a time.
    let mut pods = Vec::new();
    for round in 0..3 {
        for node in &cluster.nodes {
            let pod = format!("r{round}-{}", node.name);
            control.apply(&ns, &pinned_pod(&pod, node));
            pods.push(pod);
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    // Three nodes roll one after another, each waiting for the DaemonSet
    // controller and the scheduler: over a minute on a loaded machine.
    control.wait_rolled_out(Duration::from_secs(180));
    let images = control
        .plexus_pods("{range .items[*]}{.spec.nodeName} {.spec.containers[*].image}{\"\\n\"}{end}");
    assert_eq!(images.lines().count(), cluster.nodes.len(), "{images}");
    assert!(
        images
            .lines()
            .all(|l| l.ends_with("plexus:rollout plexus:rollout")),
        "{images}"
    );
    let ips = wait_attached(control, &ns, &pods);
    assert_unique(&ips);
    scene.end();
}

/// How long the cluster takes to replace a dead node's pods: the pod
/// garbage collector deletes them 40 s after their Node (it looks every
/// 20 s); the scheduler and the new sandboxes follow.
const RESCHEDULED: Duration = Duration::from_secs(180);

/// How long the dead pods' cluster-wide addresses may stay held: the
/// reconciler's leader hurries after a Node's deletion (two passes 10 s
/// apart once the pods are gone), and when the leader died with the node,
/// its Lease expires first (60 s).
const RECLAIMED: Duration = Duration::from_secs(240);

/// Two pods of a Deployment `app`, attached to `fabric`, placed on one
/// node, for a test that makes them move; in a namespace of their own.
struct Moving<'c> {
    scene: OnFabric<'c>,
    from: &'c Node,
    app: &'static str,
    pods: Vec<String>,
    ips: Vec<String>,
}

impl<'c> Moving<'c> {
    /// The Deployment's pods on `from`, with their addresses in `range`.
    fn start(cluster: &'c Cluster, from: &'c Node, app: &'static str, range: &str) -> Self {
        let scene = OnFabric::new(cluster, app, range);
        let (control, ns) = (cluster.control(), &scene.ns);
        placed_on(
            cluster,
            from,
            ns,
            app,
            2,
            &deployment(app, 2, &from.pod_image),
        );
        let pods: Vec<String> = pods_of(control, ns, app)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        let ips = wait_attached(control, ns, &pods);
        Moving {
            scene,
            from,
            app,
            pods,
            ips,
        }
    }

    /// Waits until the Deployment's pods are others, on other nodes than
    /// `from`, attached; returns them and their addresses.
    fn moved(&self, what: &str) -> (Vec<String>, Vec<String>) {
        let (control, ns) = (self.scene.cluster.control(), &self.scene.ns);
        let mut moved = Vec::new();
        control.wait_for(what, RESCHEDULED, || {
            moved = pods_of(control, ns, self.app);
            moved.len() == 2
                && moved
                    .iter()
                    .all(|(p, node)| !self.pods.contains(p) && *node != self.from.name)
        });
        let new: Vec<String> = moved.into_iter().map(|(p, _)| p).collect();
        let ips = wait_attached(control, ns, &new);
        (new, ips)
    }

    /// Waits, `bound` at most, until only `pods` hold addresses of the
    /// namespace's network.
    fn only_held_by(&self, what: &str, pods: &[String], bound: Duration) {
        let (control, ns) = (self.scene.cluster.control(), &self.scene.ns);
        let mut live: Vec<String> = pods.iter().map(|p| format!("{ns}/{p}")).collect();
        live.sort();
        control.wait_for(what, bound, || allocations_of(control, ns) == live);
    }

    /// The Deployment deleted, then [`OnFabric::end`].
    fn end(self) {
        let control = self.scene.cluster.control();
        control.kubectl(&["delete", "deployment", self.app, "-n", &self.scene.ns]);
        self.scene.end();
    }
}

/// The sandboxes that have plexus records on `node` (records are named
/// `<container id>@<ifname>.json`).
fn sandboxes_with_records(node: &Node) -> BTreeSet<String> {
    node.exec_ok(&["ls", "/var/lib/cni/plexus"])
        .lines()
        .filter_map(|r| r.split_once('@').map(|(id, _)| id.to_string()))
        .collect()
}

#[test]
fn a_dead_node_s_pods_move_its_addresses_come_back_and_it_rejoins_clean() {
    let Some((_alone, _, control, mover)) = turn_moving(2, "mover", "10.42.0.0/24") else {
        return;
    };
    let victim = mover.from;
    let old_sandboxes = sandboxes_with_records(victim);
    assert_eq!(old_sandboxes.len(), mover.pods.len(), "{old_sandboxes:?}");

    // The power cut, then the operator deletes the dead node.
    victim.power_off();
    let dead = Instant::now();
    control.kubectl(&["delete", "node", &victim.name]);
    let (new, new_ips) = mover.moved("the dead node's pods rescheduled");
    eprintln!(
        "rescheduled with their networks {:?} after the power cut: {new_ips:?}",
        dead.elapsed()
    );
    // The dead pods' addresses were still held while the new pods took
    // theirs: no address is ever given to two pods that may be alive.
    assert_unique(&[mover.ips.clone(), new_ips.clone()].concat());
    mover.only_held_by("the dead pods' addresses given back", &new, RECLAIMED);
    eprintln!(
        "the dead pods' addresses given back {:?} after the power cut",
        dead.elapsed()
    );

    // Powered on, the node registers again; kubelet stops the old
    // sandboxes (no netns left), and their DELs leave no record.
    victim.power_on();
    victim.wait_for(
        "no record of the sandboxes of before the power cut",
        Duration::from_secs(150),
        || sandboxes_with_records(victim).is_disjoint(&old_sandboxes),
    );
    control.wait_rolled_out(Duration::from_secs(120));
    let back = format!("back-on-{}", victim.name);
    control.apply(&mover.scene.ns, &pinned_pod(&back, victim));
    let back_ip = wait_attached(control, &mover.scene.ns, &[back]);
    assert_unique(&[new_ips, back_ip].concat());
    mover.end();
}

#[test]
fn a_drained_node_s_pods_move_with_their_networks() {
    let Some((_alone, _, control, mover)) = turn_moving(1, "drained", "10.43.0.0/24") else {
        return;
    };
    let drained = mover.from;
    control.kubectl(&[
        "drain",
        &drained.name,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout",
        "120s",
    ]);
    let (new, ips) = mover.moved("the drained pods moved");
    control.kubectl(&["uncordon", &drained.name]);
    assert_unique(&ips);
    // The drained pods' DELs gave their addresses back at once.
    mover.only_held_by(
        "only the moved pods hold addresses",
        &new,
        Duration::from_secs(60),
    );
    mover.end();
}
