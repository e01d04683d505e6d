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

mod e2e_support;

use std::path::Path;
use std::process::{Command, Output};

use e2e_support::*;
use plexus_dataplane::NetNs;
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

/// `ip route` of `netns`'s main table: the default routes' devices.
fn default_route_devices(netns: &str, family: &str) -> Vec<String> {
    let routes: Value =
        serde_json::from_str(&ip(netns, &["-j", family, "route", "show", "default"])).unwrap();
    let mut devs: Vec<String> = routes
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| match r["nexthops"].as_array() {
            Some(hops) => hops.clone(),
            None => vec![r.clone()],
        })
        .map(|h| {
            format!(
                "{} {}",
                h["dev"].as_str().unwrap(),
                h["gateway"].as_str().unwrap_or("-")
            )
        })
        .collect();
    devs.sort();
    devs
}

/// The first NetworkAttachmentDefinition of Multus's quickstart
/// (docs/quickstart.md, `macvlan-conf`) unchanged but for its master (the
/// node's uplink here, `eth0` there) and host-local's `dataDir` (under the
/// test's temp dir).
fn multus_quickstart_macvlan(tmp: &Path) -> Value {
    let mut nad = json!({
      "cniVersion": "0.3.0",
      "type": "macvlan",
      "master": "eth0",
      "mode": "bridge",
      "ipam": {
        "type": "host-local",
        "subnet": "192.168.1.0/24",
        "rangeStart": "192.168.1.200",
        "rangeEnd": "192.168.1.216",
        "routes": [
          { "dst": "0.0.0.0/0" }
        ],
        "gateway": "192.168.1.1"
      }
    });
    nad["master"] = json!("uplink0");
    nad["name"] = json!("macvlan-conf");
    nad["ipam"]["dataDir"] = json!(tmp.join("ipam").join("quickstart"));
    nad
}

#[test]
fn the_multus_quickstart_nad_attaches_beside_the_cluster_default_route() {
    // Multus's quickstart NAD on a pod whose cluster network set the default
    // route (every real cluster): the reference plugins add result routes
    // without NLM_F_EXCL (plugins' `ipam.ConfigureIface`, `RouteAddEcmp`),
    // so both default routes coexist; this ADD used to fail with EEXIST.
    use plexus_testkit::Feature;
    if !plexus_testkit::require(&[Feature::Root, Feature::ReferencePlugins]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut namespaces = Namespaces(Vec::new());
    let (node, pods) = node_and_pods(&mut namespaces, "qs");
    let conf = plexus_conf_with(
        tmp.path(),
        &[multus_quickstart_macvlan(tmp.path())],
        "macvlan-conf",
        json!([{"dst": "0.0.0.0/0"}]),
    );
    let mut net1 = Vec::new();
    for (i, pod_ns) in pods.iter().enumerate() {
        let out = plexus(
            &node,
            "ADD",
            &format!("c{i}"),
            Some(pod_ns),
            &format!("p{}", i + 1),
            &conf,
        );
        assert_ok("ADD", &out);
        assert_eq!(
            default_route_devices(pod_ns, "-4"),
            ["eth0 10.10.0.1", "net1 192.168.1.1"]
        );
        net1.push(addresses(pod_ns, "net1")[0].clone());
    }
    assert!(net1[0].starts_with("192.168.1.2"), "{net1:?}");
    assert!(
        ping(&pods[0], &net1[1]),
        "macvlan-conf: {} -> {}",
        pods[0],
        net1[1]
    );
    del_twice(&node, &pods, &conf);
    assert_nothing_left(tmp.path());
}

#[test]
fn default_route_key_takes_the_default_route_from_every_other_attachment() {
    // multi-net-spec §4.1.2.1.9: with "default-route" on one selection, the
    // default route is flushed "from the default network attachment and any
    // attachments that do not have the "default-route" key set" (Multus:
    // `types.CheckGatewayConfig`, then `netutils.DeleteDefaultGW` per
    // delegate). `"default-route": []` keeps that attachment's own.
    use plexus_testkit::Feature;
    if !plexus_testkit::require(&[Feature::Root, Feature::ReferencePlugins]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut namespaces = Namespaces(Vec::new());
    let (node, pods) = node_and_pods(&mut namespaces, "dr");
    let second = json!({"cniVersion": "1.0.0", "name": "mac2", "type": "macvlan",
        "master": "uplink0", "ipam": {"type": "host-local", "subnet": "10.30.0.0/24",
        "gateway": "10.30.0.1", "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": tmp.path().join("ipam").join("mac2")}});
    let selections = [
        // pod 1: mac2 takes the default route through 10.30.0.254.
        (
            r#"[{"name": "macvlan-conf"}, {"name": "mac2", "default-route": ["10.30.0.254"]}]"#,
            vec!["net2 10.30.0.254"],
        ),
        // pod 2: mac2 keeps the gateway its own result gave.
        (
            r#"[{"name": "macvlan-conf"}, {"name": "mac2", "default-route": []}]"#,
            vec!["net2 10.30.0.1"],
        ),
    ];
    for (i, (selection, defaults)) in selections.iter().enumerate() {
        let dir = tmp.path().join(format!("pod{i}"));
        std::fs::create_dir(&dir).unwrap();
        let conf = plexus_conf_with(
            &dir,
            &[multus_quickstart_macvlan(tmp.path()), second.clone()],
            selection,
            json!([{"dst": "0.0.0.0/0"}]),
        );
        let out = plexus(&node, "ADD", &format!("c{i}"), Some(&pods[i]), "p1", &conf);
        assert_ok("ADD", &out);
        assert_eq!(
            &default_route_devices(&pods[i], "-4"),
            defaults,
            "{selection}"
        );
        let out = plexus(&node, "DEL", &format!("c{i}"), Some(&pods[i]), "p1", &conf);
        assert_ok("DEL", &out);
        assert_eq!(link_names(&pods[i]), ["lo"]);
        assert_nothing_left(&dir);
    }
    assert_nothing_left(tmp.path());
}

/// DEL of pod i's container c{i}, twice (idempotent), the second time
/// without CNI_NETNS; each pod keeps only lo.
fn del_twice(node: &str, pods: &[String; 2], conf: &str) {
    for (i, pod_ns) in pods.iter().enumerate() {
        for netns in [Some(pod_ns.as_str()), None] {
            let out = plexus(
                node,
                "DEL",
                &format!("c{i}"),
                netns,
                &format!("p{}", i + 1),
                conf,
            );
            assert_ok("DEL", &out);
        }
        assert_eq!(link_names(pod_ns), ["lo"], "{pod_ns} keeps only lo");
    }
}

#[test]
fn two_pods_on_a_bridge_and_a_macvlan_network() {
    use plexus_testkit::Feature;
    if !plexus_testkit::require(&[Feature::Root, Feature::ReferencePlugins]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut namespaces = Namespaces(Vec::new());
    let (node, pods) = node_and_pods(&mut namespaces, "mac");

    // A config list: macvlan, then tuning (a chained plugin).
    let macnet = json!({"cniVersion": "1.0.0", "name": "macnet", "plugins": [
        {"type": "macvlan", "master": "uplink0", "mode": "bridge", "ipam": host_local(tmp.path(), "10.20.0.0/24", "mac")},
        {"type": "tuning", "mtu": 1400, "dataDir": tmp.path().join("tuning")}]});
    let conf = plexus_conf(tmp.path(), &macnet);

    // ADD: the runtime gets the cluster network's result (as from Multus).
    let mut cluster_ips = Vec::new();
    let mut secondary_ips = Vec::new();
    for (i, pod_ns) in pods.iter().enumerate() {
        let out = plexus(
            &node,
            "ADD",
            &format!("c{i}"),
            Some(pod_ns),
            &format!("p{}", i + 1),
            &conf,
        );
        assert!(
            out.status.success(),
            "ADD: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let result: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(result["cniVersion"], "1.0.0");
        let sandbox = result["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i.get("sandbox").is_some())
            .unwrap();
        assert_eq!(sandbox["name"], "eth0");
        let eth0 = addresses(pod_ns, "eth0");
        let net1 = addresses(pod_ns, "net1");
        assert_eq!(eth0.len(), 1, "{eth0:?}");
        assert_eq!(net1.len(), 1, "{net1:?}");
        assert!(eth0[0].starts_with("10.10.0.") && net1[0].starts_with("10.20.0."));
        let link: Value =
            serde_json::from_str(&ip(pod_ns, &["-j", "link", "show", "net1"])).unwrap();
        assert_eq!(link[0]["mtu"], 1400, "tuning applied to net1");
        assert_eq!(
            result["ips"][0]["address"]
                .as_str()
                .unwrap()
                .split('/')
                .next()
                .unwrap(),
            eth0[0]
        );
        cluster_ips.push(eth0[0].clone());
        secondary_ips.push(net1[0].clone());
    }
    // The pods reach each other on both networks.
    assert!(
        ping(&pods[0], &cluster_ips[1]),
        "bridge: {} -> {}",
        pods[0],
        cluster_ips[1]
    );
    assert!(
        ping(&pods[1], &secondary_ips[0]),
        "macvlan: {} -> {}",
        pods[1],
        secondary_ips[0]
    );

    del_twice(&node, &pods, &conf);
    assert!(
        files_in(&tmp.path().join("tuning")).is_empty(),
        "tuning's saved state removed"
    );
    assert_nothing_left(tmp.path());
}

/// Two pods get a secondary ipvlan network in `mode` through the plexus
/// binary (multi-net-spec §4.1.2.1: selected by annotation), reach each other
/// over it, pass CHECK, fail CHECK once an address is lost (cni-SPEC §2
/// CHECK), and DEL (twice, the second without CNI_NETNS) leaves nothing.
/// The build hosts' kernels have no ipvlan: this runs in vm-tests/.
fn two_pods_on_an_ipvlan_network(mode: &str) {
    use plexus_testkit::Feature;
    if !plexus_testkit::require(&[Feature::Root, Feature::Ipvlan]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut namespaces = Namespaces(Vec::new());
    let (node, pods) = node_and_pods(&mut namespaces, &format!("ipv{mode}"));
    let ipvnet = json!({"cniVersion": "1.0.0", "name": "ipvnet", "type": "ipvlan",
        "master": "uplink0", "mode": mode, "ipam": host_local(tmp.path(), "10.30.0.0/24", "ipv")});
    let conf = plexus_conf(tmp.path(), &ipvnet);

    let mut results = Vec::new();
    let mut net1_ips = Vec::new();
    for (i, pod_ns) in pods.iter().enumerate() {
        let (container, pod) = (format!("c{i}"), format!("p{}", i + 1));
        let out = plexus(&node, "ADD", &container, Some(pod_ns), &pod, &conf);
        assert_ok("ADD", &out);
        results.push(serde_json::from_slice::<Value>(&out.stdout).unwrap());
        let link: Value =
            serde_json::from_str(&ip(pod_ns, &["-d", "-j", "link", "show", "net1"])).unwrap();
        assert_eq!(link[0]["linkinfo"]["info_kind"], "ipvlan", "{link}");
        assert_eq!(link[0]["linkinfo"]["info_data"]["mode"], mode, "{link}");
        let net1 = addresses(pod_ns, "net1");
        assert_eq!(net1.len(), 1, "{net1:?}");
        assert!(net1[0].starts_with("10.30.0."), "{net1:?}");
        net1_ips.push(net1[0].clone());
    }
    assert_ne!(net1_ips[0], net1_ips[1]);
    // Pods on one master reach each other through it, both ways.
    assert!(
        ping(&pods[0], &net1_ips[1]),
        "{mode}: pod1 -> {}",
        net1_ips[1]
    );
    assert!(
        ping(&pods[1], &net1_ips[0]),
        "{mode}: pod2 -> {}",
        net1_ips[0]
    );

    // CHECK, as a runtime sends it: the config with the ADD's result.
    let check = |i: usize| {
        let mut c: Value = serde_json::from_str(&conf).unwrap();
        c["prevResult"] = results[i].clone();
        let container = format!("c{i}");
        plexus(
            &node,
            "CHECK",
            &container,
            Some(&pods[i]),
            &format!("p{}", i + 1),
            &c.to_string(),
        )
    };
    for i in 0..2 {
        assert_ok("CHECK", &check(i));
    }
    ip(&pods[0], &["addr", "flush", "dev", "net1"]);
    let out = check(0);
    assert!(
        !out.status.success(),
        "CHECK must notice net1 lost its address"
    );

    del_twice(&node, &pods, &conf);
    let node_links: Value =
        serde_json::from_str(&ip(&node, &["-d", "-j", "link", "show"])).unwrap();
    assert!(
        node_links
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["linkinfo"]["info_kind"] != "ipvlan"),
        "no ipvlan left in the node: {node_links}"
    );
    assert_nothing_left(tmp.path());
}

#[test]
fn ipvlan_l2_two_pods_through_plexus() {
    two_pods_on_an_ipvlan_network("l2");
}

#[test]
fn ipvlan_l3_two_pods_through_plexus() {
    two_pods_on_an_ipvlan_network("l3");
}

#[test]
fn ipvlan_l3s_two_pods_through_plexus() {
    two_pods_on_an_ipvlan_network("l3s");
}

// ---------------------------------------------------------------------------
// A pod, or a bad call, cannot harm the node (issue 9).

#[test]
fn the_nodes_own_namespace_is_never_configured_as_a_pod() {
    use plexus_testkit::Feature;
    if !plexus_testkit::require(&[Feature::Root, Feature::ReferencePlugins]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut namespaces = Namespaces(Vec::new());
    let (node, _pods) = node_and_pods(&mut namespaces, "self");
    // The node's uplink has an address and the default route, as a node's eth0.
    ip(&node, &["addr", "add", "192.0.2.10/24", "dev", "uplink0"]);
    ip(&node, &["route", "add", "default", "via", "192.0.2.1"]);
    // A /run/netns name bound to the node's namespace, as `ip netns attach`
    // makes one.
    let alias = namespaces.add("self-alias");
    let alias_path = format!("/var/run/netns/{alias}");
    let _ = NetNs::delete_named(&alias);
    std::fs::write(&alias_path, "").unwrap();
    let bound = Command::new("mount")
        .args(["--bind", &format!("/var/run/netns/{node}"), &alias_path])
        .status()
        .unwrap();
    assert!(bound.success());

    let macnet = macvlan_network(tmp.path());
    let conf = plexus_conf(tmp.path(), &macnet);
    let before = node_state(&node);
    for netns in [
        "/proc/self/ns/net",
        "/proc/thread-self/ns/net",
        alias_path.as_str(),
    ] {
        for ifname in ["eth0", "uplink0"] {
            let out = demo_plexus_at(&node, "ADD", "c0", netns, ifname, "p1", &conf);
            let e = cni_error(&out);
            assert_eq!(e["code"], 4, "{netns}: {e}");
            let details = e["details"].as_str().unwrap();
            assert!(
                details.starts_with("CNI_NETNS: ")
                    && details.contains("node's own network namespace"),
                "{netns}: {details}"
            );
            // DEL with the node's namespace removes nothing of the node.
            let out = demo_plexus_at(&node, "DEL", "c0", netns, ifname, "p1", &conf);
            assert_ok("DEL", &out);
            assert_eq!(
                node_state(&node),
                before,
                "{netns} {ifname}: the node changed"
            );
        }
    }
    assert_nothing_left(tmp.path());
}

#[test]
fn del_after_a_failed_add_leaves_the_device_that_was_in_its_way() {
    use plexus_testkit::Feature;
    if !plexus_testkit::require(&[Feature::Root, Feature::ReferencePlugins]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut namespaces = Namespaces(Vec::new());
    let (node, pods) = node_and_pods(&mut namespaces, "taken");
    let pod = &pods[0];
    // The pod namespace already has an eth0 (a veth, the kind the bridge
    // makes) with an address and the default route.
    ip(
        pod,
        &[
            "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p",
        ],
    );
    ip(pod, &["link", "set", "eth0", "up"]);
    ip(pod, &["link", "set", "eth0p", "up"]);
    ip(pod, &["addr", "add", "192.0.2.20/24", "dev", "eth0"]);
    ip(pod, &["route", "add", "default", "via", "192.0.2.1"]);
    let pod_before = node_state(pod);
    let macnet = macvlan_network(tmp.path());
    let conf = plexus_conf(tmp.path(), &macnet);

    let out = plexus(&node, "ADD", "c0", Some(pod), "p1", &conf);
    let e = cni_error(&out);
    assert_eq!(e["code"], 7, "{e}");
    assert!(
        e["details"].as_str().unwrap().contains("already exists"),
        "{e}"
    );
    // cni-SPEC §3: the runtime DELs after a failed ADD; twice, as
    // containerd may, the second time without CNI_NETNS.
    for netns in [Some(pod.as_str()), None] {
        assert_ok("DEL", &plexus(&node, "DEL", "c0", netns, "p1", &conf));
        assert_eq!(
            node_state(pod),
            pod_before,
            "the pod's own eth0 was touched"
        );
    }
    let node_links = link_names(&node);
    assert!(
        node_links.iter().all(|l| !l.starts_with("veth")),
        "host end left: {node_links:?}"
    );
    assert_nothing_left(tmp.path());
}

#[test]
fn lo_is_no_attachments_interface_and_a_failed_add_on_it_can_be_deleted() {
    use plexus_testkit::Feature;
    if !plexus_testkit::require(&[Feature::Root, Feature::ReferencePlugins]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut namespaces = Namespaces(Vec::new());
    let (node, pods) = node_and_pods(&mut namespaces, "lo");
    let macnet = macvlan_network(tmp.path());
    // multi-net-spec §4.1.2.1.5: "lo" is no valid name for an attachment's
    // interface, so the annotation is invalid and ignored: the pod gets the
    // cluster network only, and a warning.
    let conf = plexus_conf_selecting(
        tmp.path(),
        &macnet,
        r#"[{"name": "macnet", "interface": "lo"}]"#,
    );
    let out = plexus(&node, "ADD", "c0", Some(&pods[0]), "p1", &conf);
    assert_ok("ADD", &out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\"lo\"") && stderr.contains("ignored"),
        "{stderr}"
    );
    assert_eq!(link_names(&pods[0]), ["lo", "eth0"]);
    assert_ok(
        "DEL",
        &plexus(&node, "DEL", "c0", Some(&pods[0]), "p1", &conf),
    );

    // A runtime asking for CNI_IFNAME=lo: the ADD fails (the name is taken),
    // and every DEL after it succeeds, leaving the pod's loopback.
    let out = demo_plexus_at(
        &node,
        "ADD",
        "c1",
        &format!("/var/run/netns/{}", pods[1]),
        "lo",
        "p2",
        &conf,
    );
    assert_eq!(cni_error(&out)["code"], 7);
    for _ in 0..2 {
        let out = demo_plexus_at(
            &node,
            "DEL",
            "c1",
            &format!("/var/run/netns/{}", pods[1]),
            "lo",
            "p2",
            &conf,
        );
        assert_ok("DEL", &out);
    }
    assert_eq!(link_names(&pods[1]), ["lo"]);
    assert_nothing_left(tmp.path());
}

#[test]
fn further_delegates_and_a_default_network_directory_reach_every_pod() {
    // As Multus: `delegates[1..]` follow the cluster network as net1, ...
    // (LoadNetConf keeps them all; getIfname names them by position), then a
    // `defaultNetworks` entry naming a directory, its first conf
    // (getNetDelegate), then the pod's selection. DEL, twice, leaves nothing.
    use plexus_testkit::Feature;
    if !plexus_testkit::require(&[Feature::Root, Feature::ReferencePlugins]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut namespaces = Namespaces(Vec::new());
    let (node, pods) = node_and_pods(&mut namespaces, "dlg");
    let mut conf: Value =
        serde_json::from_str(&plexus_conf(tmp.path(), &macvlan_network(tmp.path()))).unwrap();
    conf["delegates"].as_array_mut().unwrap().push(json!({
        "cniVersion": "1.0.0", "name": "storage", "type": "macvlan", "master": "uplink0",
        "ipam": host_local(tmp.path(), "10.40.0.0/24", "storage")}));
    let dir = tmp.path().join("default-networks");
    std::fs::create_dir(&dir).unwrap();
    let backup = json!({"cniVersion": "1.0.0", "name": "backup", "type": "macvlan",
        "master": "uplink0", "ipam": host_local(tmp.path(), "10.50.0.0/24", "backup")});
    std::fs::write(dir.join("10-backup.conf"), backup.to_string()).unwrap();
    conf["defaultNetworks"] = json!([dir]);
    let conf = conf.to_string();

    for (i, pod_ns) in pods.iter().enumerate() {
        let pod = format!("p{}", i + 1);
        let out = plexus(&node, "ADD", &format!("c{i}"), Some(pod_ns), &pod, &conf);
        assert_ok("ADD", &out);
        assert_eq!(link_names(pod_ns), ["lo", "eth0", "net1", "net2", "net3"]);
        let addr = |ifname: &str| ip(pod_ns, &["-4", "-o", "addr", "show", "dev", ifname]);
        assert!(addr("net1").contains("10.40.0."), "{}", addr("net1"));
        assert!(addr("net2").contains("10.50.0."), "{}", addr("net2"));
        assert!(addr("net3").contains("10.20.0."), "{}", addr("net3"));
    }
    del_twice(&node, &pods, &conf);
    assert_nothing_left(tmp.path());
}
