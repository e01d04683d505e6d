//! Pods with many networks through a real kubelet (issue 24 item 3): the
//! one-node cluster of `testkit/node-up` (kubelet, containerd, the reference
//! plugins for the cluster network), plexus deployed on it by
//! `testkit/node-deploy --thin` (deploy/ as the base), and pods created with
//! kubectl. NADs are Multus's own documentation's; the pods use both
//! annotation formats of the multi-net spec v1.3 (§4.1.1 comma-delimited and
//! §4.1.2 JSON list) with
//! `interface`, `ips`, `mac` and `default-route`. The checks read what a
//! user reads: the network-status annotation (§5) with kubectl, the
//! interfaces with `kubectl exec`, pings between pods, and the events.
//!
//! The cluster starts once per test binary (about 30 s) and is shared; each
//! test works in a Kubernetes namespace of its own.

use std::path::Path;
use std::time::Duration;

use plexus_testkit::node::{self, Node, Turn};
use serde_json::Value;

/// How long a pod may take to be Running: measured about 1 s.
const POD_RUNNING: Duration = Duration::from_secs(60);

/// The node's [`Turn`], with plexus deployed in thin mode.
fn turn(prefix: &str) -> Option<Turn> {
    node::turn(&["--thin"], prefix)
}

/// A NAD manifest of `tests/fixtures/multus/` (Multus's docs, as they
/// are), its `master` the node's link `master`:
/// - `quickstart-macvlan.yaml`: docs/quickstart.md's, host-local with a
///   default route and a gateway;
/// - `how-to-use.yaml`: docs/how-to-use.md's `macvlan-conf-1` (host-local
///   `ranges`) and examples/macvlan-pod.yml's (static IPAM with the `ips`
///   capability, tuning with `mac`), renamed `macvlan-static`.
fn multus_nads(fixture: &str, master: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/multus")
        .join(fixture);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .replace("MASTER", master)
}

/// The network-status entry of network `name` (`ns/name`).
fn entry<'a>(status: &'a [Value], name: &str) -> &'a Value {
    status
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {status:#?}"))
}

/// The entry's first address, without its prefix length.
fn address(entry: &Value) -> String {
    entry["ips"][0]
        .as_str()
        .unwrap_or_else(|| panic!("no ips in {entry}"))
        .split('/')
        .next()
        .expect("an address")
        .to_string()
}

fn exec(node: &Node, ns: &str, pod: &str, cmd: &[&str]) -> String {
    let mut args = vec!["exec", "-n", ns, pod, "--"];
    args.extend_from_slice(cmd);
    node.kubectl(&args)
}

#[test]
fn pods_in_both_annotation_formats_get_their_networks_and_leave_nothing() {
    let Some((_alone, node, ns, before)) = turn("cluster") else {
        return;
    };
    node.apply(&ns, &multus_nads("quickstart-macvlan.yaml", &node.iface));
    node.apply(&ns, &multus_nads("how-to-use.yaml", &node.iface));
    let pods = [
        // The comma-delimited format (§4.1.1), with an interface name.
        (
            "text-a",
            "macvlan-conf-1@macvlan1, macvlan-conf".to_string(),
        ),
        // The JSON list format (§4.1.2): interface (§4.1.2.1.5), default-route
        // (§4.1.2.1.9).
        (
            "json-b",
            r#"[{"name": "macvlan-conf-1", "interface": "macvlan1"},
                {"name": "macvlan-conf", "default-route": ["192.168.1.1"]}]"#
                .to_string(),
        ),
        // ips (§4.1.2.1.3) and mac (§4.1.2.1.4) through the capabilities.
        (
            "json-c",
            r#"[{"name": "macvlan-static", "ips": ["10.1.1.101/24"], "mac": "c2:b0:57:49:47:f1"}]"#
                .to_string(),
        ),
        (
            "json-d",
            r#"[{"name": "macvlan-static", "ips": ["10.1.1.102/24"]}]"#.to_string(),
        ),
    ];
    for (name, networks) in &pods {
        node.apply(&ns, &node.sleeping_pod(name, networks));
    }
    for (name, _) in &pods {
        node.wait_running(&ns, name, POD_RUNNING);
    }

    let status = |pod: &str| node.network_status(&ns, pod);
    let (a, b, c, d) = (
        status("text-a"),
        status("json-b"),
        status("json-c"),
        status("json-d"),
    );
    let nad = |name: &str| format!("{ns}/{name}");
    // The cluster network is eth0, the only one marked "default" (§5.3.6).
    for s in [&a, &b, &c, &d] {
        assert_eq!(s[0]["interface"], "eth0", "{s:#?}");
        assert_eq!(s[0]["default"], true, "{s:#?}");
    }
    assert_eq!(entry(&a, &nad("macvlan-conf-1"))["interface"], "macvlan1");
    assert_eq!(entry(&a, &nad("macvlan-conf"))["interface"], "net2");
    let routed_b = entry(&b, &nad("macvlan-conf"));
    assert_eq!(routed_b["default"], false, "{b:#?}");
    assert_eq!(routed_b["default-route"][0], "192.168.1.1", "{b:#?}");
    let static_c = entry(&c, &nad("macvlan-static"));
    assert_eq!(static_c["ips"][0], "10.1.1.101", "{c:#?}");
    assert_eq!(static_c["mac"], "c2:b0:57:49:47:f1", "{c:#?}");

    // The interfaces, as the pod sees them.
    let links = exec(node, &ns, "text-a", &["ip", "-o", "link"]);
    for ifname in ["eth0", "macvlan1", "net2"] {
        assert!(
            links.contains(&format!(": {ifname}@")),
            "{ifname} in {links}"
        );
    }
    let link_c = exec(node, &ns, "json-c", &["ip", "link", "show", "net1"]);
    assert!(link_c.contains("c2:b0:57:49:47:f1"), "{link_c}");
    let routes_b = exec(node, &ns, "json-b", &["ip", "route"]);
    let default_b = entry(&b, &nad("macvlan-conf"))["interface"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        routes_b.contains(&format!("default via 192.168.1.1 dev {default_b}")),
        "{routes_b}"
    );

    // Two pods on each secondary network reach each other.
    for (from, to, network) in [
        ("text-a", &b, "macvlan-conf-1"),
        ("text-a", &b, "macvlan-conf"),
        ("json-c", &d, "macvlan-static"),
    ] {
        let target = address(entry(to, &nad(network)));
        exec(node, &ns, from, &["ping", "-c", "1", "-W", "5", &target]);
    }

    // An AddedInterface event per attachment, as Multus posts them.
    let added = node.events(&ns, "text-a", "AddedInterface");
    for ifname in ["eth0", "macvlan1", "net2"] {
        assert!(
            added.contains(&format!("Add {ifname} ")),
            "{ifname} in {added}"
        );
    }

    // kubelet deletes them: one DEL with the netns, then several without,
    // some at once (shared/notes/kubelet.md). Nothing may remain.
    node.delete_pods_leaving_nothing(&ns, &before);
}

#[test]
fn a_missing_nad_is_named_in_the_failed_create_pod_sandbox_event() {
    let Some((_alone, node, ns, _)) = turn("missing") else {
        return;
    };
    node.apply(&ns, &node.sleeping_pod("orphan", "no-such-nad"));
    node.wait_for(
        "a FailedCreatePodSandBox event naming no-such-nad",
        Duration::from_secs(90),
        || {
            node.events(&ns, "orphan", "FailedCreatePodSandBox")
                .contains("no-such-nad")
        },
    );
    assert!(node.ready(), "the node stays Ready");
    node.delete_namespace(&ns);
}

#[test]
fn a_multi_network_policy_applied_with_kubectl_takes_effect_in_thin_mode() {
    let Some((_alone, node, ns, before)) = turn("netpol") else {
        return;
    };
    let config = serde_json::json!({"cniVersion": "1.0.0", "name": "pol", "type": "macvlan",
        "master": node.iface, "mode": "bridge",
        "ipam": {"type": "host-local", "subnet": "10.39.0.0/24"}});
    node.apply(
        &ns,
        &format!(
            "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
             metadata: {{name: pol}}\nspec:\n  config: '{config}'\n"
        ),
    );
    // The server answers TCP 7000 with its name (busybox's nc).
    let labelled = |name: &str, labels: &str| {
        node.sleeping_pod(name, "pol").replacen(
            "metadata:\n",
            &format!("metadata:\n  labels: {{{labels}}}\n"),
            1,
        )
    };
    node.apply(
        &ns,
        &labelled("server", "app: server")
            .replace("sleep 100000 & wait", "nc -ll -p 7000 -e hostname & wait"),
    );
    node.apply(&ns, &labelled("client-a", "role: a"));
    node.apply(&ns, &labelled("client-b", "role: b"));
    for pod in ["server", "client-a", "client-b"] {
        node.wait_running(&ns, pod, POD_RUNNING);
    }
    let server = address(entry(
        &node.network_status(&ns, "server"),
        &format!("{ns}/pol"),
    ));
    let answers = |client: &str| {
        let out = node.kubectl_output(
            &[
                "exec", "-n", &ns, client, "--", "nc", "-w", "2", &server, "7000",
            ],
            None,
        );
        String::from_utf8_lossy(&out.stdout).trim() == "server"
    };
    assert!(
        answers("client-a") && answers("client-b"),
        "open before any policy"
    );
    node.apply(
        &ns,
        "apiVersion: k8s.cni.cncf.io/v1beta1\nkind: MultiNetworkPolicy\nmetadata:\n  \
         name: from-a\n  annotations: {k8s.v1.cni.cncf.io/policy-for: pol}\nspec:\n  \
         podSelector: {matchLabels: {app: server}}\n  \
         ingress: [{from: [{podSelector: {matchLabels: {role: a}}}]}]\n",
    );
    node.wait_for("client-b refused", Duration::from_secs(30), || {
        !answers("client-b")
    });
    assert!(answers("client-a"), "role=a still allowed");
    node.kubectl(&["delete", "multi-networkpolicy", "from-a", "-n", &ns]);
    node.wait_for("open again", Duration::from_secs(30), || {
        answers("client-b")
    });
    node.delete_pods_leaving_nothing(&ns, &before);
}

#[test]
fn kubelet_and_containerd_restarts_keep_pods_attached_and_leave_nothing() {
    let Some((_alone, node, ns, before)) = turn("restart") else {
        return;
    };
    node.apply(&ns, &multus_nads("how-to-use.yaml", &node.iface));
    for name in ["first", "second"] {
        node.apply(&ns, &node.sleeping_pod(name, "macvlan-conf-1"));
        node.wait_running(&ns, name, POD_RUNNING);
    }
    let nad = format!("{ns}/macvlan-conf-1");
    let second = address(entry(&node.network_status(&ns, "second"), &nad));
    // kubelet's restart makes no CNI call for running pods; containerd's
    // leaves the shims, and so the pods, running (shared/notes/kubelet.md).
    for component in ["kubelet", "containerd"] {
        node.restart(component);
        for name in ["first", "second"] {
            node.wait_running(&ns, name, POD_RUNNING);
        }
        // kubelet's CRI connection comes back with a backoff after a
        // containerd restart: `kubectl exec` may fail until it has.
        node.wait_for(
            &format!("first pings second after the {component} restart"),
            Duration::from_secs(60),
            || {
                let ping = [
                    "exec", "-n", &ns, "first", "--", "ping", "-c", "1", "-W", "5", &second,
                ];
                node.kubectl_output(&ping, None).status.success()
            },
        );
        // The next pod is attached as before.
        let next = format!("after-{component}");
        node.apply(&ns, &node.sleeping_pod(&next, "macvlan-conf-1"));
        node.wait_running(&ns, &next, POD_RUNNING);
        entry(&node.network_status(&ns, &next), &nad);
    }
    node.delete_pods_leaving_nothing(&ns, &before);
}
