//! The cluster-wide IPAM case (`--cluster-ipam`, issue 33 item 9): simulated
//! nodes each ADD their pods at once, all from one whereabouts pool on the
//! real kube-apiserver (the test one), first through whereabouts (built here
//! by `.ci/whereabouts`), then through plexus installed as `whereabouts` (the
//! same exec per call, thin), side by side in one run. Then every pod is
//! DELeted at once. With `--dual-stack` a shared phase follows
//! (`shared.rs`): plexus and whereabouts ADD at once into one network, half
//! the pods each, and each DELs the other's pods.
//!
//! Reported per contender: ADD p50 and p99, the storm's wall time, failures,
//! addresses given twice, what the pool and the reservations still hold
//! after the DELs, and API requests per allocation by verb and resource
//! from the API server's audit log. Both run as plexus's identity (the
//! audit log records it), which the case grants whereabouts' Lease and
//! list verbs for the run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use plexus_testkit::kube::{api, KubeApi};
use plexus_testkit::peers;
use serde_json::{json, Value};

use crate::{ms, percentile, verdict};

mod shared;
mod thick;

/// issue 33's target: plexus's storm at least this much faster.
const WALL_SPEEDUP_TARGET: f64 = 20.0;
/// One CNI call's bound; whereabouts' own ADD limit is 2 min.
const CALL_LIMIT: Duration = Duration::from_secs(150);

pub struct Setup<'a> {
    pub plexus: &'a Path,
    pub tmp: &'a Path,
    pub nodes: usize,
    pub pods_per_node: usize,
    /// An IPv4 and an IPv6 range: two addresses per pod.
    pub dual_stack: bool,
    /// `node_slice_size`: each node its own slice's pool.
    pub node_slice_size: Option<&'a str>,
}

/// What whereabouts needs beyond plexus's role: its Lease, and the lists
/// and updates of its objects. For this benchmark's API server only.
const BENCH_RBAC: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: plexus-bench-whereabouts}
rules:
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [get, list, watch, create, update, patch]
  - apiGroups: [whereabouts.cni.cncf.io]
    resources: [ippools, overlappingrangeipreservations, nodeslicepools]
    verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: plexus-bench-whereabouts}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: plexus-bench-whereabouts}
subjects: [{kind: ServiceAccount, name: plexus, namespace: kube-system}]
"#;

/// The storm's IPv4 range.
const RANGE: &str = "10.200.0.0/16";
/// The storm's IPv6 range, with `dual_stack`: a /64, the layout operators use.
const RANGE6: &str = "fd20::/64";

/// The NAD of the storm: macvlan with whereabouts IPAM on one /16, and
/// with `dual_stack` one /64 too (an address of each per pod); with node
/// slices, `node_slice_size`.
fn macvlan_whereabouts(network: &str, flat: &Path, setup: &Setup) -> Value {
    let mut ipam = json!({"type": "whereabouts", "range": RANGE,
                          "network_name": network, "configuration_path": flat});
    if let Some(size) = setup.node_slice_size {
        ipam["node_slice_size"] = json!(size);
    }
    if setup.dual_stack {
        ipam["ipRanges"] = json!([{"range": RANGE}, {"range": RANGE6}]);
        ipam.as_object_mut().expect("an object").remove("range");
    }
    json!({"cniVersion": "1.0.0", "name": network, "type": "macvlan", "master": "uplink0",
           "mode": "bridge", "ipam": ipam})
}

/// Addresses the storm gives: one per pod and range.
fn allocations(setup: &Setup) -> f64 {
    let ranges = if setup.dual_stack { 2 } else { 1 };
    (setup.nodes * setup.pods_per_node * ranges) as f64
}

/// One contender's storm.
struct Storm {
    add: Vec<Duration>,
    wall: Duration,
    failures: Vec<String>,
    duplicates: usize,
    /// The DELs that failed after the runtime's retries.
    del_failures: Vec<String>,
    /// The DELs that failed at first and were retried.
    del_retried: usize,
    left_allocations: usize,
    left_reservations: usize,
    requests: BTreeMap<(String, String), usize>,
}

pub fn run(setup: &Setup) -> Result<bool, String> {
    println!(
        "\nCluster-wide IPAM: {} nodes x {} pods ADD at once from one pool{}, then DEL",
        setup.nodes,
        setup.pods_per_node,
        match (setup.dual_stack, setup.node_slice_size) {
            (true, _) => " (dual-stack: a v4 and a v6 pool)".to_string(),
            (_, Some(size)) => format!(" cut into node slices of {size} (a pool per node)"),
            _ => String::new(),
        }
    );
    let whereabouts = match peers::whereabouts() {
        Ok(w) => w,
        Err(why) => {
            println!("skipped: {why}");
            return Ok(true);
        }
    };
    let api = api();
    whereabouts.install_crds(api);
    api.apply(BENCH_RBAC);
    let link = setup.tmp.join("plexus-as/whereabouts");
    std::fs::create_dir_all(link.parent().unwrap()).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&link);
    let target = std::fs::canonicalize(setup.plexus).map_err(|e| e.to_string())?;
    std::os::unix::fs::symlink(target, &link).map_err(|e| e.to_string())?;
    let flat = setup.tmp.join("whereabouts.conf");
    let flat_conf = json!({"datastore": "kubernetes",
                           "kubernetes": {"kubeconfig": api.plexus_kubeconfig()}});
    std::fs::write(&flat, flat_conf.to_string()).map_err(|e| e.to_string())?;

    let pid = std::process::id();
    let contenders = [
        (
            "whereabouts",
            whereabouts.binary.clone(),
            format!("bwb{pid}"),
        ),
        ("plexus (exec'd, thin)", link, format!("bpx{pid}")),
    ];
    let mut storms = Vec::new();
    for (who, binary, network) in &contenders {
        let conf = macvlan_whereabouts(network, &flat, setup);
        let exec = |command: &str, node: &str, pod: &str| call(binary, &conf, command, node, pod);
        storms.push((*who, storm(api, network, setup, &exec, &mut |_| {})?));
    }
    let network = format!("bpk{pid}");
    storms.push(("plexus (thick)", thick::storm(api, &network, &flat, setup)?));

    println!(
        "{:<22} {:>12} {:>12} {:>10} {:>9} {:>11} {:>6} {:>12}",
        "", "ADD p50", "ADD p99", "wall", "failures", "DEL retried", "dups", "left after"
    );
    for (who, s) in &storms {
        println!(
            "{:<22} {:>12} {:>12} {:>8.2} s {:>9} {:>11} {:>6} {:>5} + {:<5}",
            who,
            ms(percentile(&s.add, 0.5)),
            ms(percentile(&s.add, 0.99)),
            s.wall.as_secs_f64(),
            s.failures.len() + s.del_failures.len(),
            s.del_retried,
            s.duplicates,
            s.left_allocations,
            s.left_reservations,
        );
    }
    let total = allocations(setup);
    for (who, s) in &storms {
        let per: Vec<String> = s
            .requests
            .iter()
            .map(|((verb, resource), n)| format!("{:.2} {verb} {resource}", *n as f64 / total))
            .collect();
        println!(
            "API requests per allocation, {who} (audit log, ADD and DEL): {}",
            per.join(", ")
        );
        for failure in s
            .failures
            .iter()
            .take(3)
            .chain(s.del_failures.iter().take(3))
        {
            println!("  {who}: {failure}");
        }
    }
    let clean = |s: &Storm| {
        s.failures.is_empty()
            && s.del_failures.is_empty()
            && s.duplicates == 0
            && s.left_allocations == 0
            && s.left_reservations == 0
    };
    let wb = &storms[0].1;
    let mut met = true;
    for (who, s) in &storms[1..] {
        let speedup = wb.wall.as_secs_f64() / s.wall.as_secs_f64();
        println!(
            "storm wall: {who} is {speedup:.1}x faster than whereabouts; \
             no failure, no duplicate, nothing left: {}",
            verdict(clean(s))
        );
        met &= clean(s);
    }
    let (who, thick) = (&storms[2].0, &storms[2].1);
    let speedup = wb.wall.as_secs_f64() / thick.wall.as_secs_f64();
    if setup.node_slice_size.is_some() {
        println!(
            "node slices: whereabouts takes a Lease per node's pool, not one for the cluster; \
             issue 33's {WALL_SPEEDUP_TARGET}x target is the one-pool storm's ({who}: {speedup:.1}x here)"
        );
    } else if clean(wb) {
        println!(
            "{who} against whereabouts, which left nothing at this size: {speedup:.1}x \
             (target >= {WALL_SPEEDUP_TARGET}x): {}",
            verdict(speedup >= WALL_SPEEDUP_TARGET)
        );
        met &= speedup >= WALL_SPEEDUP_TARGET;
    } else {
        println!("whereabouts failed or leaked at this size: no speed target is judged");
    }
    let total = allocations(setup);
    let per = |verb: &str| {
        let key = (verb.to_string(), "ippools".to_string());
        *thick.requests.get(&key).unwrap_or(&0) as f64 / total
    };
    println!(
        "{who}: IPPool requests per allocation, ADD and DEL together: {:.2} get, {:.2} patch \
         (a warm ADD: 0 reads, 1 write; tests/daemon/whereabouts.rs counts it alone)",
        per("get"),
        per("patch")
    );
    if setup.dual_stack {
        let [(_, whereabouts, _), (_, plexus, _)] = &contenders;
        let network = format!("bsh{pid}");
        let shared = shared::storm(api, &network, &flat, whereabouts, plexus, setup)?;
        met &= shared.report();
    }
    Ok(met)
}

/// Every pod of every node ADDed at once by `call` (command, node, pod),
/// then DELeted at once; what the pool holds after. `between` sees the
/// ADDs' answers, in the order of [`pods`], before the DELs.
fn storm(
    api: &KubeApi,
    network: &str,
    setup: &Setup,
    call: &(dyn Fn(&str, &str, &str) -> Answer + Sync),
    between: &mut dyn FnMut(&[Answer]),
) -> Result<Storm, String> {
    let pods = pods(setup);
    if let Some(size) = setup.node_slice_size {
        lay_out_slices(api, network, size, setup)?;
    }
    let before = api.audited().len();
    let started = Instant::now();
    let added = all_at_once(call, "ADD", &pods);
    let wall = started.elapsed();
    between(&added);
    let (deleted, del_retried) = deleted_as_a_runtime(call, &pods);
    let requests = api.audited()[before..]
        .iter()
        .filter(|r| r.stage == "ResponseComplete")
        .fold(BTreeMap::new(), |mut counts, r| {
            *counts
                .entry((r.verb.clone(), r.resource.clone()))
                .or_insert(0) += 1;
            counts
        });
    let mut add = Vec::new();
    let mut failures = Vec::new();
    let mut given = Vec::new();
    for (took, out) in added {
        match out {
            Ok(result) => {
                add.push(took);
                let ips = result["ips"].as_array().cloned().unwrap_or_default();
                given.extend(
                    ips.iter()
                        .map(|ip| ip["address"].as_str().unwrap_or("?").to_string()),
                );
            }
            Err(e) => failures.push(e),
        }
    }
    let distinct: BTreeSet<&String> = given.iter().collect();
    let left_allocations = objects(api, "ippools", network)
        .iter()
        .filter_map(|p| p["spec"]["allocations"].as_object().map(|a| a.len()))
        .sum();
    let left_reservations = objects(api, "overlappingrangeipreservations", network).len();
    if add.is_empty() {
        add.push(wall);
    }
    Ok(Storm {
        add,
        wall,
        failures,
        duplicates: given.len() - distinct.len(),
        del_failures: deleted,
        del_retried,
        left_allocations,
        left_reservations,
        requests,
    })
}

/// The NodeSlicePool of `network` with a slice for every simulated node,
/// as plexus's leader (or whereabouts' node-slice controller) leaves it
/// once the Nodes exist, before any pod: the storm measures allocation,
/// not slicing (whereabouts' binary cannot slice by itself).
fn lay_out_slices(api: &KubeApi, network: &str, size: &str, setup: &Setup) -> Result<(), String> {
    use plexus_ipam::whereabouts::{pool::SliceSize, slice};
    let size = SliceSize::parse(size)?;
    let range = RANGE.parse().map_err(|e| format!("{RANGE}: {e}"))?;
    size.check(range)?;
    let (spec, mut status) = slice::fresh(range, &size);
    for n in 0..setup.nodes {
        slice::claim(&mut status, &format!("node-{n}"))
            .ok_or_else(|| format!("{RANGE} by {}: fewer slices than nodes", size.text))?;
    }
    let object = json!({
        "apiVersion": "whereabouts.cni.cncf.io/v1alpha1", "kind": "NodeSlicePool",
        "metadata": {"name": network, "namespace": "kube-system"},
        "spec": spec, "status": status,
    });
    api.apply(&object.to_string());
    Ok(())
}

/// The whereabouts objects of `kind` (`ippools`,
/// `overlappingrangeipreservations`) of `network` (`<network>-<range or
/// address>`), as the API server holds them now.
fn objects(api: &KubeApi, kind: &str, network: &str) -> Vec<Value> {
    let kind = format!("{kind}.whereabouts.cni.cncf.io");
    let list = api.kubectl(&["get", &kind, "-n", "kube-system", "-o", "json"]);
    serde_json::from_str::<Value>(&list)
        .ok()
        .and_then(|mut list| list["items"].as_array_mut().map(std::mem::take))
        .unwrap_or_default()
        .into_iter()
        .filter(|p| {
            let name = p["metadata"]["name"].as_str().unwrap_or_default();
            name.starts_with(&format!("{network}-"))
        })
        .collect()
}

type Answer = (Duration, Result<Value, String>);

/// Every node's pods: `(node-<n>, p<n>-<p>)`.
fn pods(setup: &Setup) -> Vec<(String, String)> {
    (0..setup.nodes)
        .flat_map(|n| {
            (0..setup.pods_per_node).map(move |p| (format!("node-{n}"), format!("p{n}-{p}")))
        })
        .collect()
}

/// `command` for every pod at once, each its own process: its time and
/// answer.
/// Rounds of retried DELs: kubelet retries a failed StopPodSandbox (the
/// CNI DEL) at the pod's next sync, backing off, so a DEL that failed under
/// load is done again, not left (CNI SPEC "DEL": a runtime may call it
/// again).
const DEL_ROUNDS: u32 = 6;
/// The pause before the first retry, doubled before each next one (2 to
/// 64 s, about two minutes in all).
const DEL_PAUSE: Duration = Duration::from_secs(2);

/// Every pod DELeted at once by `call`, then the failed ones again, at
/// once, up to [`DEL_ROUNDS`] times: the DELs still failing and how many
/// needed a retry.
fn deleted_as_a_runtime(
    call: &(dyn Fn(&str, &str, &str) -> Answer + Sync),
    pods: &[(String, String)],
) -> (Vec<String>, usize) {
    let mut failed: Vec<(String, String)> = Vec::new();
    let mut errors = Vec::new();
    let mut retried = 0;
    for round in 0..=DEL_ROUNDS {
        let these = if round == 0 { pods } else { &failed[..] };
        if these.is_empty() {
            break;
        }
        if round > 0 {
            std::thread::sleep(DEL_PAUSE * (1 << (round - 1)));
        }
        let answers = all_at_once(call, "DEL", these);
        let (again, why): (Vec<_>, Vec<_>) = these
            .iter()
            .zip(answers)
            .filter_map(|(pod, (_, out))| out.err().map(|e| (pod.clone(), e)))
            .unzip();
        if round == 0 {
            retried = again.len();
        }
        (failed, errors) = (again, why);
    }
    (errors, retried)
}

fn all_at_once(
    call: &(dyn Fn(&str, &str, &str) -> Answer + Sync),
    command: &str,
    pods: &[(String, String)],
) -> Vec<Answer> {
    std::thread::scope(|s| {
        let calls: Vec<_> = pods
            .iter()
            .map(|(node, pod)| s.spawn(move || call(command, node, pod)))
            .collect();
        calls
            .into_iter()
            .map(|c| c.join().expect("a call thread"))
            .collect()
    })
}

fn call(binary: &Path, conf: &Value, command: &str, node: &str, pod: &str) -> Answer {
    let started = Instant::now();
    let mut child = match Command::new(binary)
        .env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", format!("c-{pod}"))
        .env("CNI_IFNAME", "net1")
        .env("CNI_NETNS", "/var/run/netns/unused-by-ipam")
        .env("CNI_PATH", "/nonexistent")
        .env(
            "CNI_ARGS",
            format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME={pod}"),
        )
        .env("NODENAME", node)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => return (started.elapsed(), Err(e.to_string())),
    };
    let input = conf.to_string();
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        let _ = stdin.write_all(input.as_bytes());
    }
    let waited = wait_bounded(child, CALL_LIMIT);
    let took = started.elapsed();
    let answer = match waited {
        None => Err(format!("{command} {pod}: no answer within {CALL_LIMIT:?}")),
        Some((true, out)) if out.is_empty() => Ok(Value::Null),
        Some((true, out)) => {
            serde_json::from_slice(&out).map_err(|e| format!("{command} {pod}: {e}"))
        }
        Some((false, out)) => Err(format!(
            "{command} {pod}: {}",
            String::from_utf8_lossy(&out)
        )),
    };
    (took, answer)
}

/// The child's success and stdout, or `None` (it is killed) past `limit`.
fn wait_bounded(mut child: std::process::Child, limit: Duration) -> Option<(bool, Vec<u8>)> {
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut out);
        out
    });
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some((status.success(), reader.join().ok()?)),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}
