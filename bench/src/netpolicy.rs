//! MultiNetworkPolicy (issue 35) on the one-node cluster, plexus beside
//! multi-networkpolicy-iptables in one run, on the same pods and policies:
//! 100 pods on a macvlan network (plexus thick as deploy/ installs it, which
//! also enforces policy), multi-networkpolicy-iptables running on the node
//! at the same time (the CRI socket, the admin's kubeconfig; built by
//! `.ci/multi-networkpolicy-iptables`), then 100 policies created one by
//! one, each selecting one pod and allowing TCP 80 from its neighbour.
//!
//! - **Creation to enforcement**: from just before a policy's create to the
//!   moment its pod's namespace holds its rules, each enforcer's own: for
//!   plexus its nftables table (`plexus-policy`), for the peer an iptables
//!   rule with the policy's comment. Both are polled together, so they
//!   share the same clock and load.
//! - **Rules per pod**: each enforcer's rules in a selected pod's
//!   namespace once all 100 policies exist.
//! - **ADD latency with and without policies**: the daemon's own ADD
//!   histogram (mean), 20 pods in a namespace no policy selects, then 20
//!   a policy selects (plexus writes their rules before the ADD answers;
//!   the peer is not in the ADD path).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use plexus_dataplane::nftables::Nftables;
use plexus_dataplane::NetNs;
use plexus_testkit::node::Node;
use serde_json::{json, Value};

use crate::pod_start::{delete_namespace, nad, nad_crd};
use crate::{ms, p99_within, percentile};

const PODS: usize = 100;
const ADD_PODS: usize = 20;
/// plexus's table in a pod's namespace (src/netpolicy/render.rs).
const TABLE: &str = "plexus-policy";
/// A policy not enforced by both within this is a failure of the run.
const ENFORCE_BOUND: Duration = Duration::from_secs(60);
/// The target for plexus's p99.
const P99_MAX: Duration = Duration::from_secs(1);
/// The daemon's metrics, on the node's loopback (deploy/daemonset.yaml).
const METRICS: &str = "http://127.0.0.1:9109/metrics";

/// multi-networkpolicy-iptables on the node, stopped on drop.
struct Peer {
    child: Child,
}

impl Peer {
    fn start(node: &Node, binary: &Path, log: &Path) -> Result<Peer, String> {
        let log = std::fs::File::create(log).map_err(|e| e.to_string())?;
        let child = Command::new(node.dir.join("node-exec"))
            .arg(binary)
            .arg("--kubeconfig")
            .arg(node.dir.join("admin.kubeconfig"))
            .args(["--hostname-override", &node.name])
            .args([
                "--container-runtime-endpoint",
                "/run/containerd/containerd.sock",
            ])
            .args(["--network-plugins", "macvlan"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("multi-networkpolicy-iptables: {e}"))?;
        Ok(Peer { child })
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Each pod's network namespace, as the machine sees it, by pod name: from
/// the daemon's sandbox notes on the node.
fn pod_namespaces(node: &Node, namespace: &str) -> Result<Vec<(String, PathBuf)>, String> {
    let dir = node.path("/run/plexus/state/sandboxes");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let Ok(note) = std::fs::read(&path) else {
            continue;
        };
        let Ok(note) = serde_json::from_slice::<Value>(&note) else {
            continue;
        };
        if note["namespace"] != namespace {
            continue;
        }
        let (Some(pod), Some(netns)) = (note["pod"].as_str(), note["netns"].as_str()) else {
            continue;
        };
        // The node's /var/run is a link to /run, which would resolve here.
        let netns = netns.strip_prefix("/var").unwrap_or(netns);
        out.push((pod.to_string(), node.path(netns)));
    }
    Ok(out)
}

fn plexus_rules(netns: &Path) -> usize {
    NetNs::open(netns)
        .and_then(|ns| Nftables::open(&ns)?.rule_count(TABLE))
        .unwrap_or(0)
}

/// The peer's iptables rules in `netns` (`-A` lines of the filter table).
pub(crate) fn peer_rules(netns: &Path) -> Vec<String> {
    let out = Command::new("nsenter")
        .arg(format!("--net={}", netns.display()))
        .arg("iptables-save")
        .args(["-t", "filter"])
        .output();
    match out {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("-A "))
            .map(String::from)
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn pods_manifest(node: &Node, prefix: &str, count: usize) -> String {
    let mut yaml = String::new();
    for i in 0..count {
        let pod = node.sleeping_pod(&format!("{prefix}-{i}"), "np");
        yaml.push_str(&pod.replacen(
            "metadata:\n",
            &format!("metadata:\n  labels: {{idx: '{i}'}}\n"),
            1,
        ));
        yaml.push_str("---\n");
    }
    yaml
}

fn policy(ns: &str, name: &str, selected: usize, from: usize) -> String {
    format!(
        "apiVersion: k8s.cni.cncf.io/v1beta1\nkind: MultiNetworkPolicy\nmetadata:\n  name: {name}\n  \
         namespace: {ns}\n  annotations: {{k8s.v1.cni.cncf.io/policy-for: np}}\nspec:\n  \
         podSelector: {{matchLabels: {{idx: '{selected}'}}}}\n  policyTypes: [Ingress]\n  \
         ingress: [{{from: [{{podSelector: {{matchLabels: {{idx: '{from}'}}}}}}], \
         ports: [{{protocol: TCP, port: 80}}]}}]\n"
    )
}

/// The daemon's ADD histogram: (sum of seconds, count).
fn add_histogram(node: &Node) -> (f64, f64) {
    let text = String::from_utf8_lossy(&node.exec(&["curl", "-s", "-m", "5", METRICS]).stdout)
        .into_owned();
    let value = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    };
    (
        value("plexus_cni_call_duration_seconds_sum{command=\"ADD\"}"),
        value("plexus_cni_call_duration_seconds_count{command=\"ADD\"}"),
    )
}

/// Creates `count` pods in `ns` at once and waits until they run; the
/// mean ADD time the daemon measured for them.
fn mean_add(node: &Node, ns: &str, prefix: &str, count: usize) -> Duration {
    let before = add_histogram(node);
    node.apply(ns, &pods_manifest(node, prefix, count));
    for i in 0..count {
        node.wait_running(ns, &format!("{prefix}-{i}"), Duration::from_secs(300));
    }
    let after = add_histogram(node);
    let adds = (after.1 - before.1).max(1.0);
    Duration::from_secs_f64((after.0 - before.0) / adds)
}

/// Runs the case; `Ok(false)` when plexus missed its target.
pub(crate) fn on_cluster(node: &Node, peer_binary: Option<&Path>) -> Result<bool, String> {
    println!(
        "\nMultiNetworkPolicy on the one-node cluster: {PODS} pods on a macvlan network, {PODS} \
         policies created one by one (each selects one pod, TCP 80 from its neighbour), creation \
         to rules in the pod's namespace, plexus and multi-networkpolicy-iptables side by side"
    );
    node.deploy(&[]);
    nad_crd(node);
    let config = json!({"cniVersion": "1.0.0", "name": "np", "type": "macvlan",
                        "master": node.iface, "mode": "bridge",
                        "ipam": {"type": "host-local", "subnet": "10.38.0.0/16"}});
    // ADD latency first, before any policy, in a namespace of its own; its
    // pods go before the next (kubelet runs at most 110 pods).
    let plain = node.namespace("netpol-plain");
    node.apply(&plain, &nad("np", &plain, &config));
    let without = mean_add(node, &plain, "plain", ADD_PODS);
    node.delete_pods(&plain);
    let ns = node.namespace("netpol");
    node.apply(&ns, &nad("np", &ns, &config));
    node.apply(&ns, &pods_manifest(node, "np", PODS));
    for i in 0..PODS {
        node.wait_running(&ns, &format!("np-{i}"), Duration::from_secs(600));
    }
    let netns: Vec<(String, PathBuf)> = pod_namespaces(node, &ns)?;
    let netns_of = |pod: &str| -> Result<&Path, String> {
        netns
            .iter()
            .find(|(p, _)| p == pod)
            .map(|(_, n)| n.as_path())
            .ok_or_else(|| format!("no sandbox note for pod {pod}"))
    };

    let log = node.dir.join("multi-networkpolicy-iptables.log");
    let peer = match peer_binary {
        Some(binary) => Some(Peer::start(node, binary, &log)?),
        None => {
            println!(
                "multi-networkpolicy-iptables: not run (build it with \
                 .ci/multi-networkpolicy-iptables, or name it with --mnp-iptables)"
            );
            None
        }
    };
    // The peer lists the pods first; give it the time to.
    std::thread::sleep(Duration::from_secs(5));

    let mut plexus_times = Vec::with_capacity(PODS);
    let mut peer_times = Vec::with_capacity(PODS);
    for i in 0..PODS {
        let name = format!("np-{i}");
        let target = netns_of(&format!("np-{i}"))?;
        let marker = format!("policy:{name} ");
        let start = Instant::now();
        node.apply(&ns, &policy(&ns, &name, i, (i + 1) % PODS));
        let (mut plexus_at, mut peer_at) = (None, peer.is_none().then_some(Duration::ZERO));
        while plexus_at.is_none() || peer_at.is_none() {
            if start.elapsed() > ENFORCE_BOUND {
                return Err(format!(
                    "policy {name} not enforced within {ENFORCE_BOUND:?}: plexus {plexus_at:?}, \
                     multi-networkpolicy-iptables {peer_at:?} (its log: {})",
                    log.display()
                ));
            }
            if plexus_at.is_none() && plexus_rules(target) > 0 {
                plexus_at = Some(start.elapsed());
            }
            if peer_at.is_none() && peer_rules(target).iter().any(|l| l.contains(&marker)) {
                peer_at = Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        plexus_times.push(plexus_at.unwrap_or_default());
        peer_times.push(peer_at.unwrap_or_default());
    }
    let (plexus_rule_counts, peer_rule_counts): (Vec<usize>, Vec<usize>) = netns
        .iter()
        .filter(|(pod, _)| pod.starts_with("np-"))
        .map(|(_, n)| (plexus_rules(n), peer_rules(n).len()))
        .unzip();
    drop(peer);

    // The policies select by `idx` alone: each of these pods too.
    node.delete_pods(&ns);
    let with = mean_add(node, &ns, "selected", ADD_PODS);
    delete_namespace(node, &ns);
    delete_namespace(node, &plain);
    node.deploy(&["--delete"]);

    let mean = |v: &[usize]| v.iter().sum::<usize>() as f64 / v.len().max(1) as f64;
    let (p50, p99) = (
        percentile(&plexus_times, 0.5),
        percentile(&plexus_times, 0.99),
    );
    println!(
        "{:<34} {:>12} {:>12} {:>16}",
        "", "p50", "p99", "rules per pod"
    );
    println!(
        "{:<34} {:>12} {:>12} {:>16.1}",
        "plexus daemon (nftables)",
        ms(p50),
        ms(p99),
        mean(&plexus_rule_counts)
    );
    if peer_binary.is_some() {
        let (peer_p50, peer_p99) = (percentile(&peer_times, 0.5), percentile(&peer_times, 0.99));
        println!(
            "{:<34} {:>12} {:>12} {:>16.1}",
            "multi-networkpolicy-iptables",
            ms(peer_p50),
            ms(peer_p99),
            mean(&peer_rule_counts)
        );
        println!(
            "multi-networkpolicy-iptables takes {:.1}x plexus's p50 and {:.1}x its p99",
            peer_p50.as_secs_f64() / p50.as_secs_f64(),
            peer_p99.as_secs_f64() / p99.as_secs_f64()
        );
    }
    println!(
        "ADD, mean of {ADD_PODS} pods (the daemon's histogram): {} without policies, {} with \
         each pod selected by a policy ({:+.1} ms)",
        ms(without).trim(),
        ms(with).trim(),
        (with.as_secs_f64() - without.as_secs_f64()) * 1000.0
    );
    Ok(p99_within("plexus: creation to enforcement", p99, P99_MAX))
}
