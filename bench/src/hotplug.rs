//! Dynamic networks (issue 26): the time from a change of a running pod's
//! selection annotation to its updated network-status, both seen by one
//! watch of the pod on the test kube-apiserver, so the two instants carry
//! the same delays. 50 changes, each adding or removing one network of a
//! pod attached through `plexus daemon` (thick mode, status writes through
//! its outbox, as deployed).
//!
//! multus-dynamic-networks-controller on the same changes needs Multus
//! thick and a container runtime's socket: [`on_cluster`] runs both on the
//! one-node cluster, plexus thick as deploy/ installs it, then the
//! controller beside Multus thick (`--cluster`), side by side in one run.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use plexus_testkit::kube::{api, Relay};
use plexus_testkit::node::Node;
use serde_json::json;

use crate::kube::{macvlan, Setup};
use crate::multus_thick::MultusThick;
use crate::pod_start::{delete_namespace, nad, nad_crd, status_entries};
use crate::thick::Daemon;
use crate::watch::Watch;
use crate::{cni_env_as, invoke, ms, p99_within, percentile, verdict};

const CHANGES: usize = 50;
/// Target (issue 26).
const P99_MAX: Duration = Duration::from_millis(200);
/// How long one change may take before the run gives up.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(10);
const NETWORKS_KEY: &str = "k8s.v1.cni.cncf.io/networks";
/// The two selections a change goes between. The interface names are
/// explicit because multus-dynamic-networks-controller needs them (its
/// README: it cannot attach a selection without one, nor detach it).
const ONE_NETWORK: &str = r#"[{"name":"hp1","interface":"net1"}]"#;
const TWO_NETWORKS: &str =
    r#"[{"name":"hp1","interface":"net1"},{"name":"hp2","interface":"net2"}]"#;

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
        yaml.push_str(&nad(name, &namespace, &macvlan(name, 95 + i as u8, &data)));
    }
    yaml.push_str(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hp\n  namespace: {namespace}\n  \
         annotations: {{{NETWORKS_KEY}: '{ONE_NETWORK}'}}\n\
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
    let mut kubectl = Command::new("kubectl");
    kubectl.arg("--kubeconfig").arg(kube.admin_kubeconfig());
    let watch = Watch::start(kubectl, &["get", "pod", "hp", "-n", &namespace])?;

    let measured = changes(&watch, |value| {
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
    drop(watch);
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
    if controller.is_some() {
        println!(
            "multus-dynamic-networks-controller side by side: on the one-node cluster only \
             (--cluster --multus DIR --dynamic-controller DIR): it needs Multus thick and \
             containerd's socket"
        );
    }
    Ok(met)
}

/// Make the changes one by one through `annotate`; each one's latency,
/// from the watch event with the new annotation to the first one with the
/// network-status of the new selection.
fn changes(watch: &Watch, annotate: impl Fn(&str)) -> Result<Vec<Duration>, String> {
    let mut latencies = Vec::with_capacity(CHANGES);
    for i in 0..CHANGES {
        // hp1 alone (2 entries with the cluster network), or hp1 and hp2 (3).
        let (value, entries) = if i % 2 == 0 {
            (TWO_NETWORKS, 3)
        } else {
            (ONE_NETWORK, 2)
        };
        annotate(value);
        let deadline = Instant::now() + CHANGE_TIMEOUT;
        let mut changed_at = None;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (at, pod) = watch.events.recv_timeout(left).map_err(|_| {
                format!("change {i} ({value}): no updated network-status within {CHANGE_TIMEOUT:?}")
            })?;
            if pod["metadata"]["annotations"][NETWORKS_KEY].as_str() == Some(value)
                && changed_at.is_none()
            {
                changed_at = Some(at);
            }
            if let Some(changed_at) = changed_at {
                if status_entries(&pod) == entries {
                    latencies.push(at - changed_at);
                    break;
                }
            }
        }
    }
    Ok(latencies)
}

/// The same changes on the one-node cluster, side by side in one run:
/// plexus thick as deploy/ installs it, then multus-dynamic-networks-
/// controller beside Multus thick (`multus`, `controller`: their builds).
/// `Ok(false)` when plexus missed the target.
pub(crate) fn on_cluster(
    node: &Node,
    multus: Option<&Path>,
    controller: Option<&Path>,
) -> Result<bool, String> {
    println!(
        "\nDynamic networks on the one-node cluster: {CHANGES} changes of a running pod's \
         selection annotation (one network added or removed each) with kubectl annotate, change \
         to updated network-status, both seen by one watch"
    );
    node.deploy(&[]);
    let plexus = cluster_changes(node);
    node.deploy(&["--delete"]);
    let plexus = plexus?;
    let peer = match (multus, controller) {
        (Some(multus), Some(controller)) => {
            match MultusThick::start(node, multus, Some(controller)) {
                Ok(running) => {
                    let measured = cluster_changes(node);
                    drop(running);
                    Some(measured?)
                }
                Err(e) => {
                    println!("multus-dynamic-networks-controller: skipped: {e}");
                    None
                }
            }
        }
        _ => {
            println!(
                "multus-dynamic-networks-controller: not run (it needs --multus DIR and \
                 --dynamic-controller DIR)"
            );
            None
        }
    };
    println!("{:<44} {:>12} {:>12}", "", "p50", "p99");
    let (p50, p99) = (percentile(&plexus, 0.5), percentile(&plexus, 0.99));
    println!(
        "{:<44} {:>12} {:>12}",
        "plexus thick (deploy/)",
        ms(p50),
        ms(p99)
    );
    if let Some(peer) = &peer {
        let (peer_p50, peer_p99) = (percentile(peer, 0.5), percentile(peer, 0.99));
        println!(
            "{:<44} {:>12} {:>12}",
            "Multus thick + dynamic-networks-controller",
            ms(peer_p50),
            ms(peer_p99)
        );
        println!(
            "the controller takes {:.2}x plexus's p50 and {:.2}x its p99",
            peer_p50.as_secs_f64() / p50.as_secs_f64(),
            peer_p99.as_secs_f64() / p99.as_secs_f64()
        );
    }
    Ok(p99_within("plexus on the cluster:", p99, P99_MAX))
}

/// A pod attached to `hp1` on the cluster's current CNI, then [`changes`]
/// through `kubectl annotate`; the namespace is deleted after.
fn cluster_changes(node: &Node) -> Result<Vec<Duration>, String> {
    nad_crd(node);
    let ns = node.namespace("hotplug");
    let ipam = |subnet: &str| json!({"type": "host-local", "subnet": subnet});
    let mut nads = String::new();
    for (name, subnet) in [("hp1", "10.35.0.0/16"), ("hp2", "10.36.0.0/16")] {
        let config = json!({"cniVersion": "1.0.0", "name": name, "type": "macvlan",
                            "master": node.iface, "mode": "bridge", "ipam": ipam(subnet)});
        nads.push_str(&nad(name, &ns, &config));
    }
    node.apply(&ns, &nads);
    node.apply(&ns, &node.sleeping_pod("hp", ONE_NETWORK));
    node.wait_running(&ns, "hp", Duration::from_secs(120));
    let watch = Watch::start(
        Command::new(node.dir.join("kubectl")),
        &["get", "pod", "hp", "-n", &ns],
    )?;
    let measured = changes(&watch, |value| {
        node.kubectl(&[
            "annotate",
            "--overwrite",
            "pod",
            "hp",
            "-n",
            &ns,
            &format!("{NETWORKS_KEY}={value}"),
        ]);
    });
    drop(watch);
    delete_namespace(node, &ns);
    measured
}
