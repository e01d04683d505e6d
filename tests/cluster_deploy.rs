//! deploy/ on a real one-node cluster, as an operator deploys it (issue 24
//! item 2): the image built from deploy/Containerfile with podman and
//! imported into the node's containerd, `kubectl apply -k deploy/` with the
//! manifests unchanged (thin mode: deploy/ as the base of an overlay that
//! only takes the daemon's socket out), then the DaemonSet Ready, the
//! cluster network wrapped by `00-plexus.conflist`, the node Ready, a pod
//! created with kubectl attached to a NAD (multi-net spec v1.3 §4.1.1), and
//! `kubectl delete -k` removing the conflist.
//!
//! The tests change what is deployed on the binary's one node, so they take
//! turns.

use std::sync::Mutex;
use std::time::Duration;

use plexus_testkit::node::node;
use plexus_testkit::Feature;

const CONFLIST: &str = "/etc/cni/net.d/00-plexus.conflist";

/// One deployment at a time on the node.
static DEPLOYMENT: Mutex<()> = Mutex::new(());

/// What the operator checks after `kubectl apply -k`, then a pod with a
/// NAD, then `kubectl delete -k`.
fn deploy_attach_and_remove(mode: &[&str]) {
    let _turn = DEPLOYMENT.lock().unwrap_or_else(|e| e.into_inner());
    let node = node();
    node.deploy(mode);

    // The installer wrapped the cluster network's conf (the node-up's
    // bridge + host-local conflist).
    let conflist: serde_json::Value =
        serde_json::from_str(&node.exec_ok(&["cat", CONFLIST])).expect("JSON");
    let plugin = &conflist["plugins"][0];
    assert_eq!(plugin["type"], "plexus", "{conflist:#}");
    assert_eq!(
        plugin["clusterNetwork"], "/etc/cni/net.d/10-cluster.conflist",
        "{conflist:#}"
    );
    assert!(node.ready(), "the node stays Ready with plexus installed");

    // A pod created with kubectl gets the cluster network and a NAD.
    let ns = node.namespace("deploy");
    let nad = format!(
        r#"apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: side
spec:
  config: '{{"cniVersion": "1.0.0", "name": "side", "type": "macvlan", "master": "{iface}",
             "mode": "bridge", "ipam": {{"type": "host-local", "subnet": "10.30.0.0/24"}}}}'
"#,
        iface = node.iface
    );
    node.apply(&ns, &nad);
    node.apply(&ns, &node.sleeping_pod("attached", "side"));
    node.wait_running(&ns, "attached", Duration::from_secs(60));
    let status = node.kubectl(&[
        "get",
        "pod",
        "-n",
        &ns,
        "attached",
        "-o",
        r"jsonpath={.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}",
    ]);
    assert!(status.contains(&format!("\"{ns}/side\"")), "{status}");
    assert!(status.contains("\"net1\""), "{status}");
    let links = node.kubectl(&["exec", "-n", &ns, "attached", "--", "ip", "-o", "link"]);
    assert!(links.contains(": net1@"), "{links}");
    node.delete_namespace(&ns);
    assert!(node.ready(), "the node stays Ready");

    // `kubectl delete -k`: the installer's --cleanup removes the conflist.
    node.deploy(&[mode, &["--delete"]].concat());
    node.wait_for(
        "00-plexus.conflist removed",
        Duration::from_secs(30),
        || !node.exec(&["test", "-e", CONFLIST]).status.success(),
    );
    assert!(node.ready(), "the node stays Ready without plexus");
}

#[test]
fn thin_mode_deploys_wraps_the_cluster_network_attaches_pods_and_uninstalls() {
    if !plexus_testkit::require(&[Feature::KubeNode]) {
        return;
    }
    deploy_attach_and_remove(&["--thin"]);
}

/// deploy/ exactly as it is: thick mode, the daemon container serving the
/// calls with the netns paths containerd gives and the node's dynamically
/// linked delegates.
#[test]
fn thick_mode_as_deployed_serves_the_pods() {
    if !plexus_testkit::require(&[Feature::KubeNode]) {
        return;
    }
    deploy_attach_and_remove(&[]);
}
