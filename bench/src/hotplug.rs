//! Dynamic networks (issue 26): the time from a change of a running pod's
//! selection annotation to its updated network-status, both seen by one
//! watch of the pod on the test kube-apiserver, so the two instants carry
//! the same delays. 50 changes, each adding or removing one network of a
//! pod attached through `plexus daemon` (thick mode, status writes through
//! its outbox, as deployed).
//!
//! multus-dynamic-networks-controller on the same changes needs Multus
//! thick and a container runtime's socket (the one-node cluster); without
//! them its side is reported as skipped.

use std::io::BufReader;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use plexus_testkit::kube::{api, Relay};
use serde_json::{json, Value};

use crate::kube::{macvlan, Setup};
use crate::thick::Daemon;
use crate::{cni_env_as, invoke, ms, percentile, verdict};

const CHANGES: usize = 50;
/// Target (issue 26).
const P99_MAX: Duration = Duration::from_millis(200);
/// How long one change may take before the run gives up.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(10);
const NETWORKS_KEY: &str = "k8s.v1.cni.cncf.io/networks";
const STATUS_KEY: &str = "k8s.v1.cni.cncf.io/network-status";

/// One watch event of the pod: when it arrived, and its annotations.
struct Seen {
    at: Instant,
    networks: Option<String>,
    status_entries: usize,
}

/// Runs the case; `Ok(false)` when the target was missed.
pub fn run(setup: &mut Setup, controller: Option<&Path>) -> Result<bool, String> {
    let kube = api();
    let _relay = Relay::into_netns(setup.node.path(), kube.port)
        .map_err(|e| format!("relay into the node namespace: {e}"))?;
    let dir = setup.tmp.join("hotplug");
    let data = dir.join("ipam");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let socket = dir.join("run/plexus.sock");
    let namespace = kube.namespace("pxb-hp");
    let mut yaml = String::new();
    for (i, name) in ["hp1", "hp2"].iter().enumerate() {
        let config = macvlan(name, 95 + i as u8, &data);
        yaml.push_str(&format!(
            "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
             metadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  config: '{config}'\n---\n"
        ));
    }
    yaml.push_str(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hp\n  namespace: {namespace}\n  \
         annotations: {{{NETWORKS_KEY}: \"hp1\"}}\n\
         spec: {{nodeName: {}, containers: [{{name: c, image: busybox}}]}}\n",
        crate::thick::NODE_NAME
    ));
    kube.apply(&yaml);
    let conf = json!({
        "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
        "cniDir": dir.join("cache"), "kubeconfig": kube.plexus_kubeconfig(),
        "daemonSocket": socket,
        "delegates": [{"cniVersion": "1.0.0", "name": "hp-pod", "type": "bridge",
                       "bridge": "brhp0", "isGateway": true,
                       "ipam": {"type": "host-local", "subnet": "10.94.0.0/16", "dataDir": data}}],
    })
    .to_string();
    let daemon = Daemon::start(setup, &socket, &kube.plexus_kubeconfig())?;
    let netns = setup
        .namespaces
        .create(format!("pxb-{}-hp", std::process::id()))?;
    let args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME=hp");
    let call = |command: &str| {
        let env = cni_env_as(command, "hp", &netns, "eth0", &args, setup.reference_dir);
        invoke(setup.node, setup.plexus, &[], &env, conf.as_bytes())
    };
    call("ADD")?;

    // One watch of the pod, its events timestamped as they arrive.
    let mut watch = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kube.admin_kubeconfig())
        .args([
            "get", "pod", "hp", "-n", &namespace, "--watch", "-o", "json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("kubectl --watch: {e}"))?;
    let stdout = watch.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel::<Seen>();
    std::thread::spawn(move || {
        let events = serde_json::Deserializer::from_reader(BufReader::new(stdout));
        for pod in events.into_iter::<Value>().map_while(Result::ok) {
            let annotations = &pod["metadata"]["annotations"];
            let status_entries = annotations[STATUS_KEY]
                .as_str()
                .and_then(|s| serde_json::from_str::<Value>(s).ok())
                .and_then(|v| v.as_array().map(Vec::len))
                .unwrap_or(0);
            let seen = Seen {
                at: Instant::now(),
                networks: annotations[NETWORKS_KEY].as_str().map(String::from),
                status_entries,
            };
            if tx.send(seen).is_err() {
                return;
            }
        }
    });

    let measured = changes(&rx, |value| {
        kube.kubectl(&[
            "annotate",
            "--overwrite",
            "pod",
            "hp",
            "-n",
            &namespace,
            &format!("{NETWORKS_KEY}={value}"),
        ]);
    });
    let _ = watch.kill();
    let _ = watch.wait();
    let hotplugs = daemon.metric(
        setup,
        "plexus_hotplugs_total{operation=\"attach\",result=\"ok\"}",
    )?;
    drop(daemon);
    call("DEL")?;
    let latencies = measured?;

    let (p50, p99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
    let met = p99 < P99_MAX;
    println!(
        "\nDynamic networks: {CHANGES} changes of a running pod's selection annotation (one \
         network added or removed each), change to updated network-status, both seen by one \
         watch on the API server"
    );
    println!("{:<34} {:>12} {:>12}", "", "p50", "p99");
    println!("{:<34} {:>12} {:>12}", "plexus daemon", ms(p50), ms(p99));
    println!(
        "plexus: p99 {} (target < {} ms: {}); {hotplugs} attachments hot-plugged",
        ms(p99).trim(),
        P99_MAX.as_millis(),
        verdict(met)
    );
    let why = "it needs Multus thick and the containerd socket of the one-node kubelet cluster, \
               which is not present in this branch";
    match controller.map(|dir| dir.join("dynamic-networks-controller")) {
        Some(binary) if binary.is_file() => println!(
            "multus-dynamic-networks-controller ({}): skipped: {why}",
            binary.display()
        ),
        Some(binary) => println!(
            "multus-dynamic-networks-controller: {} not found (build ./cmd/dynamic-networks-controller \
             into it, shared/notes/peers.md); and {why}",
            binary.display()
        ),
        None => println!("multus-dynamic-networks-controller side by side: not run: {why}"),
    }
    Ok(met)
}

/// Make the changes one by one through `annotate`; each one's latency,
/// from the watch event with the new annotation to the first one with the
/// network-status of the new selection.
fn changes(rx: &mpsc::Receiver<Seen>, annotate: impl Fn(&str)) -> Result<Vec<Duration>, String> {
    let mut latencies = Vec::with_capacity(CHANGES);
    for i in 0..CHANGES {
        // hp1 alone (2 entries with the cluster network), or hp1 and hp2 (3).
        let (value, entries) = if i % 2 == 0 {
            ("hp1,hp2", 3)
        } else {
            ("hp1", 2)
        };
        annotate(value);
        let deadline = Instant::now() + CHANGE_TIMEOUT;
        let mut changed_at = None;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let seen = rx.recv_timeout(left).map_err(|_| {
                format!("change {i} ({value}): no updated network-status within {CHANGE_TIMEOUT:?}")
            })?;
            if seen.networks.as_deref() == Some(value) && changed_at.is_none() {
                changed_at = Some(seen.at);
            }
            if let Some(at) = changed_at {
                if seen.status_entries == entries {
                    latencies.push(seen.at - at);
                    break;
                }
            }
        }
    }
    Ok(latencies)
}
