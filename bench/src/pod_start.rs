//! What users feel (issue 24 item 6): pod start time on the one-node
//! cluster (testkit/node-up, with a real kubelet and containerd). For each
//! contender, `pods` pods are created at once with one `kubectl apply`, each
//! selecting 3 NADs (bridge, macvlan, macvlan: the reference plugins) beside
//! the cluster network, and the time from each pod's creation to its phase
//! Running is taken from one watch of the namespace (both instants seen by
//! the same watch, so they carry the same delays; no polling interval).
//!
//! Contenders, one after another in one run, each cleaned away before the
//! next: the cluster network alone (the floor: node-up's bridge +
//! host-local conflist, no multi-network plugin, so the annotation is
//! ignored), plexus thin and plexus thick (deployed from deploy/ by
//! testkit/node-deploy), and Multus thick with the reference plugins
//! (`--multus DIR`, [`crate::multus_thick`]). Each starts with one warm-up
//! pod that must show the contender's network-status, which also proves
//! the node's runtime reloaded the contender's conf.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use plexus_testkit::node::Node;
use serde_json::{json, Value};

use crate::multus_thick::MultusThick;
use crate::watch::Watch;
use crate::{ms, percentile, verdict};

/// Target: plexus thick adds at most this to the floor's p99.
const THICK_P99_OVER_FLOOR_MAX: f64 = 1.10;
/// How long all pods of a contender may take to be Running.
const RUNNING_BOUND: Duration = Duration::from_secs(300);
/// How long their deletion may take.
const DELETE_BOUND: Duration = Duration::from_secs(300);
const NETWORKS: &str = "ps-br,ps-mv1,ps-mv2";
const STATUS_KEY: &str = "k8s.v1.cni.cncf.io/network-status";

/// What one contender measured.
struct Outcome {
    label: &'static str,
    /// Creation to Running, per pod that got there.
    latencies: Vec<Duration>,
    /// Pods not Running within the bound.
    not_running: usize,
    /// Pods with a `FailedCreatePodSandBox` event (kubelet retried them).
    sandbox_failures: usize,
    /// Pods whose network-status lists the cluster network and the 3 NADs.
    attached: usize,
    /// The first sandbox failure's message, for the report.
    first_failure: Option<String>,
    /// The machine's 1-minute load average when the pods were created and
    /// when the last was Running: the machine is shared.
    load: (f64, f64),
}

/// The machine's 1-minute load average.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

impl Outcome {
    fn failures(&self) -> usize {
        self.not_running + self.sandbox_failures
    }
}

/// The NADs, on the node's link and bridges of their own.
fn nads(node: &Node, ns: &str) -> String {
    let ipam = |subnet: &str| json!({"type": "host-local", "subnet": subnet});
    let configs = [
        (
            "ps-br",
            json!({"cniVersion": "1.0.0", "name": "ps-br", "type": "bridge", "bridge": "psbr0",
                   "isGateway": true, "ipam": ipam("10.31.0.0/16")}),
        ),
        (
            "ps-mv1",
            json!({"cniVersion": "1.0.0", "name": "ps-mv1", "type": "macvlan",
                   "master": node.iface, "mode": "bridge", "ipam": ipam("10.32.0.0/16")}),
        ),
        (
            "ps-mv2",
            json!({"cniVersion": "1.0.0", "name": "ps-mv2", "type": "macvlan",
                   "master": node.iface, "mode": "bridge", "ipam": ipam("10.33.0.0/16")}),
        ),
    ];
    configs
        .iter()
        .map(|(name, config)| nad(name, ns, config))
        .collect()
}

/// A NetworkAttachmentDefinition `name` in `namespace` with `config`, as a
/// YAML document.
pub(crate) fn nad(name: &str, namespace: &str, config: &Value) -> String {
    format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
         metadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  config: '{config}'\n---\n"
    )
}

/// Entries of a pod's network-status annotation (0 without one).
pub(crate) fn status_entries(pod: &Value) -> usize {
    pod["metadata"]["annotations"][STATUS_KEY]
        .as_str()
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .and_then(|v| v.as_array().map(Vec::len))
        .unwrap_or(0)
}

/// The NetworkAttachmentDefinition CRD, from deploy/ (the only place that
/// defines it), applied and established: node-up has none, and undeploying
/// plexus (`kubectl delete -k deploy/`) removes it.
pub(crate) fn nad_crd(node: &Node) {
    let crd = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/crds/network-attachment-definition.yaml")
        .display()
        .to_string();
    node.kubectl(&["apply", "-f", &crd]);
    node.kubectl(&[
        "wait",
        "--for=condition=established",
        "--timeout=50s",
        "-f",
        &crd,
    ]);
}

/// A Kubernetes namespace with the NADs, and a warm-up pod Running with
/// `entries` network-status entries (none for the floor).
pub(crate) fn prepared_namespace(node: &Node, prefix: &str, entries: usize) -> String {
    nad_crd(node);
    let ns = node.namespace(prefix);
    node.apply(&ns, &nads(node, &ns));
    node.apply(&ns, &node.sleeping_pod("warm-up", NETWORKS));
    node.wait_running(&ns, "warm-up", Duration::from_secs(120));
    node.wait_for(
        &format!("warm-up pod in {ns} with {entries} network-status entries"),
        Duration::from_secs(30),
        || {
            let pod: Value = serde_json::from_str(
                &node.kubectl(&["get", "pod", "-n", &ns, "warm-up", "-o", "json"]),
            )
            .unwrap_or(Value::Null);
            status_entries(&pod) == entries
        },
    );
    node.kubectl(&["delete", "pod", "-n", &ns, "warm-up", "--wait=true"]);
    ns
}

/// Deletes `ns` and waits (bounded) until its pods are gone, so kubelet
/// ran their DELs through the contender still installed.
pub(crate) fn delete_namespace(node: &Node, ns: &str) {
    node.kubectl(&["delete", "pods", "--all", "-n", ns, "--wait=false"]);
    node.wait_for(&format!("pods of {ns} deleted"), DELETE_BOUND, || {
        node.kubectl(&["get", "pods", "-n", ns, "-o", "name"])
            .trim()
            .is_empty()
    });
    node.kubectl(&["delete", "namespace", ns, "--wait=false"]);
}

/// Creates `pods` pods at once in a fresh namespace and measures them.
fn measure(
    node: &Node,
    label: &'static str,
    pods: usize,
    entries: usize,
) -> Result<Outcome, String> {
    let ns = prepared_namespace(node, "podstart", entries);
    let watch = Watch::start(
        Command::new(node.dir.join("kubectl")),
        &["get", "pods", "-n", &ns],
    )?;
    let manifest: String = (0..pods)
        .map(|i| format!("{}---\n", node.sleeping_pod(&format!("p{i}"), NETWORKS)))
        .collect();
    let load_before = load_average();
    node.apply(&ns, &manifest);

    let mut created: HashMap<String, Instant> = HashMap::new();
    let mut running: HashMap<String, Instant> = HashMap::new();
    let mut last: HashMap<String, Value> = HashMap::new();
    let deadline = Instant::now() + RUNNING_BOUND;
    while running.len() < pods {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok((at, pod)) = watch.events.recv_timeout(left) else {
            break;
        };
        let Some(name) = pod["metadata"]["name"].as_str().map(String::from) else {
            continue;
        };
        created.entry(name.clone()).or_insert(at);
        if pod["status"]["phase"] == "Running" {
            running.entry(name.clone()).or_insert(at);
        }
        last.insert(name, pod);
    }
    drop(watch);
    let load = (load_before, load_average());
    if running.is_empty() {
        delete_namespace(node, &ns);
        return Err(format!("{label}: no pod Running within {RUNNING_BOUND:?}"));
    }
    let latencies = running
        .iter()
        .filter_map(|(name, at)| Some(*at - *created.get(name)?))
        .collect();
    // The annotation can land after Running (plexus thick writes it behind
    // the ADD's answer): read it now rather than from the watch.
    let listed: Value =
        serde_json::from_str(&node.kubectl(&["get", "pods", "-n", &ns, "-o", "json"]))
            .map_err(|e| format!("kubectl get pods: {e}"))?;
    let attached = listed["items"]
        .as_array()
        .map(|items| items.iter().filter(|p| status_entries(p) == 4).count())
        .unwrap_or(0);
    let events: Value = serde_json::from_str(&node.kubectl(&[
        "get",
        "events",
        "-n",
        &ns,
        "--field-selector",
        "reason=FailedCreatePodSandBox",
        "-o",
        "json",
    ]))
    .map_err(|e| format!("kubectl get events: {e}"))?;
    let failed: Vec<&Value> = events["items"]
        .as_array()
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let failed_pods: HashSet<&str> = failed
        .iter()
        .filter_map(|e| e["involvedObject"]["name"].as_str())
        .collect();
    let outcome = Outcome {
        label,
        latencies,
        not_running: pods - running.len(),
        sandbox_failures: failed_pods.len(),
        attached,
        first_failure: failed
            .first()
            .and_then(|e| e["message"].as_str())
            .map(String::from),
        load,
    };
    delete_namespace(node, &ns);
    Ok(outcome)
}

/// Runs the contenders and prints the table; `Ok(false)` when a target was
/// missed.
pub(crate) fn run(node: &Node, pods: usize, multus: Option<&Path>) -> Result<bool, String> {
    println!(
        "\nPod start on the one-node cluster ({}): {pods} pods created at once with kubectl, \
         each with the cluster network + 3 NADs (bridge, macvlan, macvlan; reference plugins); \
         creation to Running seen by one watch",
        node.dir.display()
    );
    let mut outcomes = vec![measure(node, "cluster network alone (floor)", pods, 0)?];

    node.deploy(&["--thin"]);
    let thin = measure(node, "plexus thin", pods, 4);
    node.deploy(&["--thin", "--delete"]);
    outcomes.push(thin?);

    node.deploy(&[]);
    let thick = measure(node, "plexus thick", pods, 4);
    node.deploy(&["--delete"]);
    outcomes.push(thick?);

    match multus {
        None => println!("Multus thick: skipped (no --multus DIR; shared/notes/multus.md)"),
        Some(dir) => match MultusThick::start(node, dir, None) {
            Ok(peer) => {
                let outcome = measure(node, "Multus thick", pods, 4);
                drop(peer);
                outcomes.push(outcome?);
            }
            Err(e) => println!("Multus thick: skipped: {e}"),
        },
    }

    // The floor again last: the machine's load drifts over the run, and
    // the ratios take the mean of the floor before and after.
    outcomes.push(measure(node, "cluster network alone, again", pods, 0)?);
    let floors = [&outcomes[0], &outcomes[outcomes.len() - 1]];
    let floor = |p: f64| {
        floors
            .iter()
            .map(|o| percentile(&o.latencies, p).as_secs_f64())
            .sum::<f64>()
            / 2.0
    };
    let (floor_p50, floor_p99) = (floor(0.5), floor(0.99));
    println!(
        "{:<32} {:>12} {:>12} {:>10} {:>10} {:>9} {:>9} {:>12}",
        "", "p50", "p99", "p50/floor", "p99/floor", "attached", "failures", "load 1m"
    );
    for o in &outcomes {
        let (p50, p99) = (
            percentile(&o.latencies, 0.5),
            percentile(&o.latencies, 0.99),
        );
        println!(
            "{:<32} {:>12} {:>12} {:>9.2}x {:>9.2}x {:>9} {:>9} {:>5.1}->{:<5.1}",
            o.label,
            ms(p50),
            ms(p99),
            p50.as_secs_f64() / floor_p50,
            p99.as_secs_f64() / floor_p99,
            if o.label.starts_with("cluster") {
                "-".to_string()
            } else {
                format!("{}/{pods}", o.attached)
            },
            o.failures(),
            o.load.0,
            o.load.1
        );
        if let Some(message) = &o.first_failure {
            println!("  {}: first FailedCreatePodSandBox: {message}", o.label);
        }
    }
    let thick = &outcomes[2];
    let over = percentile(&thick.latencies, 0.99).as_secs_f64() / floor_p99;
    let met = over <= THICK_P99_OVER_FLOOR_MAX
        && outcomes.iter().all(|o| o.failures() == 0)
        && thick.attached == pods;
    println!("(ratios to the mean of the two floor runs)");
    println!(
        "plexus thick: p99 {over:.2}x the floor's, every pod attached, none failed (target p99 <= \
         {THICK_P99_OVER_FLOOR_MAX:.2}x, no failure: {})",
        verdict(met)
    );
    Ok(met)
}
