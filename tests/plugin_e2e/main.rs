//! The `plexus` binary end to end, invoked exactly as a runtime invokes a CNI
//! plugin (env + config on stdin) inside a "node" namespace this test creates:
//! two pods get the cluster network (bridge) and the secondary network their
//! annotation selects (macvlan + tuning), from a manifest directory. bridge,
//! macvlan, tuning and host-local run in-process; `CNI_PATH` points at
//! Debian's reference binaries, which serve any other type (cni-SPEC §4).
//! Asserts the result, kernel state, connectivity on both networks, and that
//! DEL leaves nothing. The same with an ipvlan secondary network in each
//! mode (l2, l3, l3s), plus CHECK: those need a kernel with ipvlan, which
//! vm-tests/ provides.
//!
//! Modules: `attach` (two pods on their networks), `ipvlan` (vm-tests/),
//! `cross_node` (pods on two nodes joined by a fabric, issue 34),
//! `default_route` (multi-net-spec §4.1.2.1.9 beside the cluster network's
//! default route) and `node_safety` (issue 9); the fixtures are here.

#[path = "../e2e_support/mod.rs"]
mod e2e_support;

mod attach;
mod cross_node;
mod default_route;
mod ipvlan;
mod node_safety;

use std::path::Path;
use std::process::Output;

use e2e_support::*;
use serde_json::{json, Value};

/// plexus run as a runtime runs it, for pod `pod` of namespace demo with
/// `CNI_IFNAME=eth0`.
fn plexus(
    node: &str,
    command: &str,
    container: &str,
    pod_ns: Option<&str>,
    pod: &str,
    conf: &str,
) -> Output {
    let netns = pod_ns
        .map(|n| format!("/var/run/netns/{n}"))
        .unwrap_or_default();
    demo_plexus_at(node, command, container, &netns, "eth0", pod, conf)
}

/// [`plexus`] for the `i`th pod: container `c{i}`, pod `p{i + 1}`.
fn pod_call(node: &str, command: &str, i: usize, pod_ns: Option<&str>, conf: &str) -> Output {
    plexus(
        node,
        command,
        &format!("c{i}"),
        pod_ns,
        &format!("p{}", i + 1),
        conf,
    )
}

/// [`plexus_at`] for pod `pod` of namespace demo.
fn demo_plexus_at(
    node: &str,
    command: &str,
    container: &str,
    netns: &str,
    ifname: &str,
    pod: &str,
    conf: &str,
) -> Output {
    let args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME={pod}");
    plexus_at(node, command, container, netns, ifname, &args, conf)
}

/// plexus's configuration under `tmp`: the cluster network is a bridge
/// (`br-pod`, 10.10.0.0/24), and the manifest directory holds the
/// NetworkAttachmentDefinition `nad` (named after its config) and pods p1 and
/// p2 in namespace demo whose annotation selects it (multi-net-spec §4.1.2.1).
fn plexus_conf(tmp: &Path, nad: &Value) -> String {
    plexus_conf_selecting(tmp, nad, nad["name"].as_str().unwrap())
}

/// [`plexus_conf`] with the pods' annotation `selection` (YAML-quoted).
fn plexus_conf_selecting(tmp: &Path, nad: &Value, selection: &str) -> String {
    plexus_conf_with(tmp, std::slice::from_ref(nad), selection, json!([]))
}

/// [`plexus_conf`] with the NADs `nads` (each named after its config), the
/// pods' annotation `selection`, and the cluster network's host-local
/// `routes`.
fn plexus_conf_with(tmp: &Path, nads: &[Value], selection: &str, cluster_routes: Value) -> String {
    let manifests = tmp.join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    let mut text = String::new();
    for nad in nads {
        let name = nad["name"].as_str().unwrap();
        text.push_str(&format!(
            "---\napiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {{name: {name}, namespace: demo}}\nspec:\n  config: '{nad}'\n"
        ));
    }
    let selection = serde_json::to_string(selection).unwrap();
    for pod in ["p1", "p2"] {
        text.push_str(&format!(
            "---\nkind: Pod\nmetadata: {{name: {pod}, namespace: demo, annotations: {{k8s.v1.cni.cncf.io/networks: {selection}}}}}\n"
        ));
    }
    std::fs::write(manifests.join("demo.yaml"), text).unwrap();
    json!({
        "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
        "cniDir": tmp.join("cache"), "confDir": tmp.join("net.d"),
        "manifestDir": manifests,
        "delegates": [{"cniVersion": "1.0.0", "name": "podnet", "type": "bridge", "bridge": "br-pod",
                       "isGateway": true,
                       "ipam": with_routes(host_local(tmp, "10.10.0.0/24", "pod"), cluster_routes)}],
    })
    .to_string()
}

fn with_routes(mut ipam: Value, routes: Value) -> Value {
    if routes != json!([]) {
        ipam["routes"] = routes;
    }
    ipam
}

/// DEL of pod i's container c{i}, twice (idempotent), the second time
/// without CNI_NETNS; each pod keeps only lo.
fn del_twice(node: &str, pods: &[String; 2], conf: &str) {
    for (i, pod_ns) in pods.iter().enumerate() {
        for netns in [Some(pod_ns.as_str()), None] {
            let out = pod_call(node, "DEL", i, netns, conf);
            assert_ok("DEL", &out);
        }
        assert_eq!(link_names(pod_ns), ["lo"], "{pod_ns} keeps only lo");
    }
}
