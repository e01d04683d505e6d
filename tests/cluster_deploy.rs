//! deploy/ on a real one-node cluster, as an operator deploys it (issue 24
//! item 2): the image built from deploy/Containerfile with podman and
//! imported into the node's containerd, `kubectl apply -k deploy/` with the
//! manifests unchanged (thin mode: deploy/ as the base of an overlay whose
//! ConfigMap leaves out the daemon's socket, deploy/README.md's one switch),
//! then the DaemonSet Ready, the
//! cluster network wrapped by `00-plexus.conflist`, the node Ready, a pod
//! created with kubectl attached to a NAD (multi-net spec v1.3 §4.1.1), and
//! `kubectl delete -k` removing the conflist. In both modes the pod's
//! networks then follow `kubectl annotate` (dynamic networks, issue 26):
//! the daemon container hot-plugs pods it ADDed (thick) and pods the
//! runtime's plugin process ADDed (thin).

use std::time::Duration;

use plexus_testkit::kube::{nad_manifest, status_entries};
use plexus_testkit::node::{node, Node};
use plexus_testkit::Feature;
use serde_json::{json, Value};

const CONFLIST: &str = "/etc/cni/net.d/00-plexus.conflist";

/// Whether thick mode is on: the conflist's plexus entry names the
/// daemon's socket (deploy/configmap.yaml), or runs every call on the host.
fn conflist_plugin(node: &Node) -> Value {
    let conflist: Value = serde_json::from_str(&node.exec_ok(&["cat", CONFLIST])).expect("JSON");
    conflist["plugins"][0].clone()
}

/// What the operator checks after `kubectl apply -k` (`mode`: node-deploy's
/// arguments): the conflist in that mode, then a pod with a NAD, hot-plug,
/// and nothing left once its namespace is deleted.
fn deploy_and_attach(node: &Node, mode: &[&str]) {
    node.deploy(mode);
    let thick = !mode.contains(&"--thin");
    // The installer wrapped the cluster network's conf (the node-up's
    // bridge + host-local conflist), thin or thick as the ConfigMap says.
    let mut plugin = Value::Null;
    node.wait_for("the conflist in the chosen mode", HOT_PLUG, || {
        plugin = conflist_plugin(node);
        plugin.get("daemonSocket").is_some() == thick
    });
    assert_eq!(plugin["type"], "plexus", "{plugin:#}");
    assert_eq!(
        plugin["clusterNetwork"], "/etc/cni/net.d/10-cluster.conflist",
        "{plugin:#}"
    );
    if thick {
        assert_eq!(plugin["daemonSocket"], "/run/plexus/plexus.sock");
    }
    assert!(node.ready(), "the node stays Ready with plexus installed");

    // A pod created with kubectl gets the cluster network and a NAD.
    let ns = node.namespace("deploy");
    let nad = nad_manifest(
        "side",
        &[],
        &json!({"cniVersion": "1.0.0", "name": "side", "type": "macvlan", "master": node.iface,
                "mode": "bridge", "ipam": {"type": "host-local", "subnet": "10.30.0.0/24"}}),
    );
    node.apply(&ns, &nad);
    node.apply(&ns, &node.sleeping_pod("attached", "side"));
    node.wait_running(&ns, "attached", Duration::from_secs(60));
    let status = node.network_status_text(&ns, "attached");
    assert!(status.contains(&format!("\"{ns}/side\"")), "{status}");
    assert!(status.contains("\"net1\""), "{status}");
    let links = node.kubectl(&["exec", "-n", &ns, "attached", "--", "ip", "-o", "link"]);
    assert!(links.contains(": net1@"), "{links}");
    hot_plug(node, &ns, "attached");
    node.delete_namespace(&ns);
    assert!(node.ready(), "the node stays Ready");
    nothing_left_on_the_node(node);
}

/// `kubectl delete -k`: the installer's --cleanup removes the conflist.
fn remove(node: &Node, mode: &[&str]) {
    node.deploy(&[mode, &["--delete"]].concat());
    node.wait_for(
        "00-plexus.conflist removed",
        Duration::from_secs(30),
        || !node.exec(&["test", "-e", CONFLIST]).status.success(),
    );
    assert!(node.ready(), "the node stays Ready without plexus");
}

/// How long a hot-plug may take to show: the daemon acts on the watch
/// event at once (measured well under a second); kubectl's round trips add.
const HOT_PLUG: Duration = Duration::from_secs(30);

/// Pod `pod` (selecting `side` as net1) through `kubectl annotate`, as a
/// user sees it: the interface in `kubectl exec`, the network-status in
/// `kubectl get pod -o json`, the events.
fn hot_plug(node: &Node, ns: &str, pod: &str) {
    let annotate = |value: &str| {
        node.kubectl(&[
            "annotate",
            "--overwrite",
            "pod",
            "-n",
            ns,
            pod,
            &format!("k8s.v1.cni.cncf.io/networks={value}"),
        ]);
    };
    let links = || node.kubectl(&["exec", "-n", ns, pod, "--", "ip", "-o", "link"]);
    let status = || -> Vec<(String, String)> {
        let pod: Value =
            serde_json::from_str(&node.kubectl(&["get", "pod", "-n", ns, pod, "-o", "json"]))
                .expect("JSON");
        status_entries(
            pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"]
                .as_str()
                .unwrap_or("[]"),
        )
    };
    let has_event = |kind: &str, reason: &str, text: &str| {
        let events: Value = serde_json::from_str(&node.kubectl(&[
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            &format!("involvedObject.name={pod}"),
            "-o",
            "json",
        ]))
        .expect("JSON");
        events["items"].as_array().into_iter().flatten().any(|e| {
            e["type"] == kind
                && e["reason"] == reason
                && e["message"].as_str().is_some_and(|m| m.contains(text))
        })
    };
    let side = format!("{ns}/side");

    // Added (multi-net spec §4: planned as at ADD, the next free netN).
    annotate("side,side");
    node.wait_for("net2 hot-plugged", HOT_PLUG, || {
        links().contains(": net2@") && status().contains(&(side.clone(), "net2".into()))
    });
    assert_eq!(status().len(), 3, "{:?}", status());
    node.wait_for("the AddedInterface event", HOT_PLUG, || {
        has_event("Normal", "AddedInterface", "Add net2 [10.30.0.")
    });

    // An annotation that does not parse: a Warning, the networks kept.
    annotate("[{\"name\": ");
    node.wait_for("the InvalidNetworkSelection event", HOT_PLUG, || {
        has_event("Warning", "InvalidNetworkSelection", "keeps its networks")
    });
    assert!(links().contains(": net2@"), "{}", links());
    assert_eq!(status().len(), 3, "{:?}", status());

    // Removed: that attachment alone.
    annotate("side");
    node.wait_for("net2 detached", HOT_PLUG, || {
        !links().contains(": net2@") && status().len() == 2
    });
    assert!(links().contains(": net1@"), "{}", links());
    node.wait_for("the RemovedInterface event", HOT_PLUG, || {
        has_event("Normal", "RemovedInterface", "Remove net2")
    });
    // Added again, for the pod's deletion to take along.
    annotate("side,side");
    node.wait_for("net2 hot-plugged again", HOT_PLUG, || {
        links().contains(": net2@")
    });
}

/// No record, sandbox note or lock, nor address reservation of `side`,
/// nor a pod's link on the node (the cluster network's veths on `cni0`),
/// left on the node once its pods are deleted.
fn nothing_left_on_the_node(node: &Node) {
    let left = || {
        // A directory nothing was ever written to is missing: nothing left.
        node.exec_ok(&[
            "sh",
            "-c",
            "find /var/lib/cni/plexus /var/lib/cni/networks/side -type f \
             -not -name lock -not -name 'last_reserved_ip.*' 2>/dev/null; \
             ip -o link show master cni0 2>/dev/null; true",
        ])
    };
    // The pods' DELs come once kubelet tore their sandboxes down, which
    // namespace deletion does not wait for.
    node.wait_for("the pods' DELs", HOT_PLUG, || left().trim().is_empty());
}

/// deploy/ exactly as it is: thick mode, the daemon container serving the
/// calls with the netns paths containerd gives and the node's dynamically
/// linked delegates. Then the one documented switch to thin mode
/// (deploy/README.md): the ConfigMap's settings without `daemonSocket`, as
/// an overlay, and the DaemonSet restarted. Issue 37 found the installer's
/// `--daemon-socket` putting the socket back; now the conflist loses it
/// and the runtime's own exec serves the next pod. Then removed.
#[test]
fn thick_as_deployed_then_switched_to_thin_by_the_configmap() {
    if !plexus_testkit::require(&[Feature::KubeNode]) {
        return;
    }
    let node = node();
    deploy_and_attach(node, &[]);
    deploy_and_attach(node, &["--thin"]);
    remove(node, &["--thin"]);
}
