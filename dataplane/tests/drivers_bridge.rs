//! The built-in `bridge` driver against the real kernel, as root, in
//! namespaces made for each test: a "node" namespace plays the host the
//! driver runs in, "pod" namespaces the containers. Kernel state is read
//! back with `ip -j`; connectivity with ping.
#[path = "common/chained.rs"]
mod chained;
mod common;
mod drivers_support;

use common::{assert_error, is_root, TestNs};
use drivers_support::*;
use plexus_cni::env::CniCommand;
use plexus_cni::error::{CniError, ErrorCode};
use plexus_cni::names::{ContainerId, IfName};
use plexus_cni::result::CniResult;
use plexus_testkit::Feature;
use serde_json::{json, Value};

const BR: &str = "br-test";

/// A bridge config with the test IPAM handing out `addresses`.
fn conf(addresses: Value, extra: Value) -> Value {
    let mut c = driver_conf("bridge", "net1", addresses);
    c["bridge"] = json!(BR);
    with_keys(c, &extra)
}

/// A node and a pod namespace, the test IPAM's resolver and the pod's
/// `eth0` of container `ctr1`; `None` (the test skipped) without root.
fn node_and_pod() -> Option<(TestNs, TestNs, TestResolver, Target)> {
    if !is_root() {
        return None;
    }
    let pod = TestNs::new();
    let t = eth0_of("ctr1", &pod);
    Some((TestNs::new(), pod, TestResolver::default(), t))
}

/// The attachment `eth0` of `container_id` in `pod`.
fn eth0_of(container_id: &str, pod: &TestNs) -> Target {
    Target::new(container_id, pod, "eth0")
}

/// ADD of the bridge driver with `node` as the host.
fn add_br(
    node: &TestNs,
    r: &TestResolver,
    t: &Target,
    config: &Value,
) -> Result<CniResult, CniError> {
    add(node, r, "bridge", t, config)
}

/// DEL of `t` by `config` with the test IPAM failing its DEL: the error.
fn del_with_failing_ipam(node: &TestNs, r: &TestResolver, t: &Target, config: &Value) -> CniError {
    let mut failing = config.clone();
    failing["ipam"]["fail"] = json!("DEL");
    del(node, r, "bridge", t, &failing).unwrap_err()
}

/// `bridge -j vlan show` in `node`: the entry of the port `name`.
fn vlan_port(node: &TestNs, name: &str) -> Value {
    let out = common::run("bridge", &["-n", &node.name, "-j", "vlan", "show"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .find(|p| p["ifname"] == name)
        .unwrap_or_else(|| panic!("{name} not in {v}"))
        .clone()
}

#[test]
fn add_builds_the_reference_topology() {
    // cni-SPEC §2 ADD / §5 result: bridge, host veth, container veth.
    if !is_root() {
        return;
    }
    let root_before = root_forwarding();
    let (node, pod) = (TestNs::new(), TestNs::new());
    let r = TestResolver::default();
    let mut t = eth0_of("ctr1", &pod);
    t.args = "IgnoreUnknown=1;K8S_POD_NAME=p".into();
    let c = conf(
        json!([{"address": "10.10.0.5/24"}, {"address": "fd10::5/64"}]),
        json!({"isDefaultGateway": true, "mtu": 1400, "hairpinMode": true,
               "runtimeConfig": {"mac": "0a:58:0a:0a:00:05"},
               "dns": {"nameservers": ["10.10.0.53"]}}),
    );
    let res = add_br(&node, &r, &t, &c).unwrap();
    let j = result_json(&res, "1.0.0");

    // Result: the reference's shape and values.
    let ifs = j["interfaces"].as_array().unwrap();
    assert_eq!(ifs.len(), 3, "{j}");
    assert_eq!(ifs[0]["name"], BR);
    assert!(ifs[0].get("sandbox").is_none());
    let host_veth = ifs[1]["name"].as_str().unwrap().to_string();
    assert!(
        host_veth.starts_with("veth") && host_veth.len() == 12,
        "{host_veth}"
    );
    assert!(ifs[1].get("sandbox").is_none());
    assert_eq!(ifs[2]["name"], "eth0");
    assert_eq!(ifs[2]["mac"], "0a:58:0a:0a:00:05");
    assert_eq!(ifs[2]["sandbox"], netns_path(&pod).to_str().unwrap());
    assert_eq!(
        j["ips"],
        json!([
            {"interface": 2, "address": "10.10.0.5/24", "gateway": "10.10.0.1"},
            {"interface": 2, "address": "fd10::5/64", "gateway": "fd10::1"},
        ])
    );
    assert_eq!(
        j["routes"],
        json!([{"dst": "0.0.0.0/0", "gw": "10.10.0.1"}, {"dst": "::/0", "gw": "fd10::1"}])
    );
    assert_eq!(j["dns"], json!({"nameservers": ["10.10.0.53"]}));

    // The bridge: up, MTU as configured, gateway addresses, the result's MAC.
    let br = link(&node, BR).unwrap();
    assert_eq!(br["linkinfo"]["info_kind"], "bridge");
    assert!(has_flag(&br, "UP"));
    assert_eq!(br["mtu"], 1400);
    assert_eq!(br["address"], ifs[0]["mac"]);
    assert!(has_address(&node, BR, "10.10.0.1/24"));
    assert!(has_address(&node, BR, "fd10::1/64"));
    // The host veth: a port of the bridge, up, hairpin on, isolation off.
    let hv = link(&node, &host_veth).unwrap();
    assert_eq!(hv["master"], BR);
    assert!(has_flag(&hv, "UP"));
    assert_eq!(hv["mtu"], 1400);
    assert_eq!(hv["address"], ifs[1]["mac"]);
    assert_eq!(hv["linkinfo"]["info_slave_data"]["hairpin"], true);
    assert_eq!(hv["linkinfo"]["info_slave_data"]["isolated"], false);
    assert_eq!(
        sysctl(&node, &format!("net.ipv6.conf.{host_veth}.accept_ra")),
        "0"
    );
    // The container end: CNI_IFNAME, the runtime MAC, MTU, up, addresses
    // usable at once (no DAD), routes through the gateway.
    let eth0 = link(&pod, "eth0").unwrap();
    assert_eq!(eth0["linkinfo"]["info_kind"], "veth");
    assert_eq!(eth0["address"], "0a:58:0a:0a:00:05");
    assert_eq!(eth0["mtu"], 1400);
    assert!(
        has_flag(&eth0, "UP") && has_flag(&eth0, "LOWER_UP"),
        "{eth0}"
    );
    let addrs = addresses(&pod, "eth0");
    let v6 = addrs.iter().find(|(a, _)| a == "fd10::5/64").expect("v6");
    assert!(v6.1.get("tentative").is_none(), "{:?}", v6.1);
    assert!(has_address(&pod, "eth0", "10.10.0.5/24"));
    assert_route(&pod, "default via 10.10.0.1 dev eth0");
    assert_route(&pod, "default via fd10::1 dev eth0");
    // Sysctls: the reference's, in the pod and the node only.
    assert_eq!(sysctl(&pod, "net/ipv6/conf/eth0/accept_dad"), "0");
    assert_eq!(sysctl(&pod, "net/ipv4/conf/eth0/arp_notify"), "1");
    assert_eq!(sysctl(&pod, "net/ipv6/conf/eth0/keep_addr_on_down"), "1");
    assert_eq!(sysctl(&node, "net/ipv4/ip_forward"), "1");
    assert_eq!(sysctl(&node, "net/ipv6/conf/all/forwarding"), "1");
    assert_eq!(
        root_forwarding(),
        root_before,
        "the root namespace is untouched"
    );
    // IPAM: one ADD for this attachment.
    assert_eq!(
        *r.calls.lock().unwrap(),
        [IpamCall {
            command: CniCommand::Add,
            container_id: Some(ContainerId::new("ctr1").unwrap()),
            ifname: Some(IfName::new("eth0").unwrap())
        }]
    );
}

#[test]
fn two_pods_on_one_bridge_reach_each_other_and_the_gateway() {
    if !is_root() {
        return;
    }
    let (node, pod1, pod2) = (TestNs::new(), TestNs::new(), TestNs::new());
    let r = TestResolver::default();
    let t1 = eth0_of("ctr1", &pod1);
    let t2 = Target::new("ctr2", &pod2, "net1");
    for (t, address) in [(&t1, "10.11.0.2/24"), (&t2, "10.11.0.3/24")] {
        add_br(&node, &r, t, &conf(v4(address), json!({"isGateway": true}))).unwrap();
    }
    assert!(ping(&pod1, "10.11.0.3"), "pod1 -> pod2");
    assert!(ping(&pod2, "10.11.0.2"), "pod2 -> pod1");
    assert!(ping(&pod1, "10.11.0.1"), "pod1 -> gateway on the bridge");
    // Both ports on the one bridge, which kept its first gateway address.
    let ports: Vec<Value> = node
        .ip_json(&["link", "show", "master", BR])
        .into_iter()
        .collect();
    assert_eq!(ports.len(), 2);
    assert_eq!(
        addresses(&node, BR)
            .iter()
            .filter(|(a, _)| a.starts_with("10."))
            .count(),
        1
    );
}

#[test]
fn same_result_shape_as_the_reference_plugin() {
    // The reference bridge v1.1.1 + its static IPAM, run as a runtime would
    // (in the node namespace), against ours with the same addresses.
    if !plexus_testkit::require(&[Feature::Root, Feature::ReferencePlugins]) {
        return;
    }
    let addrs = json!([{"address": "10.12.0.5/24"}, {"address": "fd12::5/64"}]);
    let static_routes = json!([{"dst": "192.168.0.0/16"}]);
    let extra = json!({"isDefaultGateway": true});

    let (node_a, pod_a) = (TestNs::new(), TestNs::new());
    let mut theirs_conf = conf(addrs.clone(), extra.clone());
    theirs_conf["ipam"] = json!({"type": "static", "addresses": addrs, "routes": static_routes});
    let pod_a_path = netns_path(&pod_a);
    let add_a = chained::env(CniCommand::Add, "ctr1", pod_a_path.to_str(), "eth0", "");
    let theirs = chained::reference("bridge", &node_a, &add_a, &theirs_conf)
        .unwrap_or_else(|e| panic!("the reference bridge failed: {e}"));

    let (node_b, pod_b) = (TestNs::new(), TestNs::new());
    let r = TestResolver::default();
    let mut ours_conf = conf(addrs, extra);
    ours_conf["ipam"]["routes"] = static_routes;
    let ours = add_br(&node_b, &r, &eth0_of("ctr1", &pod_b), &ours_conf).unwrap();
    let ours = result_json(&ours, "1.0.0");

    // Same keys, same interfaces (names and where they live; MACs and the
    // random veth name differ), same ips, routes.
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.retain(|k| k != "dns"); // the reference prints an empty dns, we omit it
        k.sort();
        k
    };
    assert_eq!(keys(&ours), keys(&theirs), "ours {ours}\ntheirs {theirs}");
    assert_eq!(ours["cniVersion"], theirs["cniVersion"]);
    let shape = |v: &Value, pod: &TestNs| -> Vec<(String, bool, bool)> {
        v["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let name = i["name"].as_str().unwrap();
                let name = if name.starts_with("veth") {
                    "veth*"
                } else {
                    name
                };
                let sandbox = i
                    .get("sandbox")
                    .map(|s| s == netns_path(pod).to_str().unwrap());
                assert!(i["mac"].as_str().is_some_and(|m| m.len() == 17), "{i}");
                (name.to_string(), sandbox.is_some(), sandbox.unwrap_or(true))
            })
            .collect()
    };
    assert_eq!(shape(&ours, &pod_b), shape(&theirs, &pod_a));
    assert_eq!(ours["ips"], theirs["ips"]);
    assert_eq!(ours["routes"], theirs["routes"]);
    // And the same kernel state where it is not random.
    assert_eq!(routes(&pod_b, false), routes(&pod_a, false));
    assert_eq!(
        addresses(&node_b, BR)
            .into_iter()
            .map(|a| a.0)
            .filter(|a| !a.starts_with("fe80"))
            .collect::<Vec<_>>(),
        addresses(&node_a, BR)
            .into_iter()
            .map(|a| a.0)
            .filter(|a| !a.starts_with("fe80"))
            .collect::<Vec<_>>()
    );
}

#[test]
fn an_existing_bridge_is_reused_a_non_bridge_is_refused() {
    let Some((node, _pod, r, t)) = node_and_pod() else {
        return;
    };
    node.ip(&["link", "add", BR, "type", "bridge"]);
    // Set by hand, so the kernel keeps it when ports come.
    node.ip(&["link", "set", BR, "mtu", "1300"]);
    let index_before = link(&node, BR).unwrap()["ifindex"].clone();
    add_br(&node, &r, &t, &conf(v4("10.13.0.2/24"), json!({}))).unwrap();
    let br = link(&node, BR).unwrap();
    assert_eq!(br["ifindex"], index_before, "same bridge");
    assert_eq!(br["mtu"], 1300, "left as it was");
    assert!(has_flag(&br, "UP"), "brought up");

    // A link of that name that is not a bridge.
    let (node2, pod2) = (TestNs::new(), TestNs::new());
    node2.add_veth(BR, "other0");
    let e = add_br(
        &node2,
        &r,
        &eth0_of("ctr2", &pod2),
        &conf(v4("10.13.0.3/24"), json!({})),
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidConfig);
    assert_eq!(
        e.details,
        format!("bridge: \"{BR}\" already exists but is not a bridge")
    );
    assert_eq!(link_names(&pod2), ["lo"]);
}

#[test]
fn an_existing_container_interface_is_an_error_and_nothing_is_left() {
    // cni-SPEC §2 ADD: CNI_IFNAME must not be taken in the container.
    if !is_root() {
        return;
    }
    // IPAM runs after the links, so it is never called.
    {
        let r = TestResolver::default();
        let (node, pod) = (TestNs::new(), TestNs::new());
        pod.add_veth("eth0", "mine0");
        let t = eth0_of("ctr1", &pod);
        let e = add_br(&node, &r, &t, &conf(v4("10.14.0.2/24"), json!({}))).unwrap_err();
        assert_error(
            &e,
            ErrorCode::InvalidConfig,
            "CNI_IFNAME: \"eth0\" already exists in the container",
        );
        // Nothing of ours is left: the bridge this ADD made is gone again,
        // no veth, the pod's own interface untouched.
        assert_eq!(link_names(&node), ["lo"]);
        let mut pod_links = link_names(&pod);
        pod_links.sort();
        assert_eq!(pod_links, ["eth0", "lo", "mine0"]);
        assert_eq!(r.commands(), []);
    }
}

#[test]
fn ipam_failure_leaves_nothing_behind() {
    let Some((node, pod, r, t)) = node_and_pod() else {
        return;
    };
    // A pre-existing bridge survives; a veth made by the ADD does not.
    node.ip(&["link", "add", BR, "type", "bridge"]);
    let mut c = conf(v4("10.15.0.2/24"), json!({}));
    c["ipam"]["fail"] = json!("ADD");
    let e = add_br(&node, &r, &t, &c).unwrap_err();
    assert_eq!(e.code, ErrorCode::TryAgainLater, "IPAM's own error: {e}");
    assert!(e.details.starts_with("ipam (test-static).ipam.fail"), "{e}");
    let mut nodes = link_names(&node);
    nodes.sort();
    assert_eq!(nodes, [BR, "lo"]);
    assert_eq!(link_names(&pod), ["lo"]);
    assert_eq!(r.commands(), [CniCommand::Add], "a failed ADD is not DEL'd");
}

#[test]
fn failure_after_ipam_undoes_veth_bridge_and_addresses() {
    let Some((node, pod, r, t)) = node_and_pod() else {
        return;
    };
    // The route's gateway is unreachable: the addresses are on, the route
    // add fails.
    let mut c = conf(v4("10.16.0.2/24"), json!({}));
    c["ipam"]["routes"] = json!([{"dst": "192.168.0.0/16", "gw": "172.31.0.1"}]);
    let e = add_br(&node, &r, &t, &c).unwrap_err();
    assert_error(&e, ErrorCode::Io, "add route 192.168.0.0/16 on eth0: ");
    assert!(e.details.contains("ENETUNREACH"), "{e}");
    assert_eq!(
        link_names(&node),
        ["lo"],
        "veth and the new bridge are gone"
    );
    assert_eq!(link_names(&pod), ["lo"]);
    assert_eq!(
        r.commands(),
        [CniCommand::Add, CniCommand::Del],
        "addresses released"
    );

    // An address the kernel refuses (a duplicate): same clean-up.
    let (node, pod) = (TestNs::new(), TestNs::new());
    let r = TestResolver::default();
    let c = conf(
        json!([{"address": "10.16.0.3/24"}, {"address": "10.16.0.3/24"}]),
        json!({}),
    );
    let e = add_br(&node, &r, &eth0_of("ctr2", &pod), &c).unwrap_err();
    assert!(e.details.starts_with("add 10.16.0.3/24 to eth0: "), "{e}");
    assert_eq!(link_names(&node), ["lo"]);
    assert_eq!(link_names(&pod), ["lo"]);
    assert_eq!(r.commands(), [CniCommand::Add, CniCommand::Del]);
}

#[test]
fn del_is_idempotent_and_tolerates_a_gone_namespace() {
    // cni-SPEC §2 DEL: succeeds for missing attachments, without CNI_NETNS,
    // and without prevResult.
    let Some((node, pod, r, t)) = node_and_pod() else {
        return;
    };
    let c = conf(v4("10.17.0.2/24"), json!({"isGateway": true}));
    let res = add_br(&node, &r, &t, &c).unwrap();
    let host_veth = res.interfaces[1].name.clone();

    del(&node, &r, "bridge", &t, &with_prev(&c, &res)).unwrap();
    assert_eq!(link_names(&pod), ["lo"]);
    assert!(link(&node, &host_veth).is_none(), "the pair went with it");
    assert!(
        link(&node, BR).is_some(),
        "the bridge stays, like the reference"
    );
    dels_again(&node, &r, "bridge", &t, &c);
    assert_eq!(r.commands(), add_then_dels(4));
    // A DEL's IPAM failure is reported (the runtime retries).
    assert_eq!(
        del_with_failing_ipam(&node, &r, &t, &c).code,
        ErrorCode::TryAgainLater
    );
    // DEL of a configuration ADD refuses still works.
    let mut refused = c.clone();
    refused["ipMasq"] = json!(true);
    del(&node, &r, "bridge", &t, &refused).unwrap();
}

#[test]
fn del_removes_the_interface_before_releasing_addresses() {
    let Some((node, pod, r, t)) = node_and_pod() else {
        return;
    };
    let c = conf(v4("10.18.0.2/24"), json!({}));
    add_br(&node, &r, &t, &c).unwrap();
    del_with_failing_ipam(&node, &r, &t, &c);
    assert_eq!(link_names(&pod), ["lo"], "interface gone first");
    del(&node, &r, "bridge", &t, &c).unwrap();
}

#[test]
fn check_accepts_the_attachment_and_finds_drift() {
    // cni-SPEC §2 CHECK.
    let Some((node, pod, r, t)) = node_and_pod() else {
        return;
    };
    let mut c = conf(v4("10.19.0.2/24"), json!({"isDefaultGateway": true}));
    c["ipam"]["routes"] = json!([{"dst": "10.99.0.0/16"}]);
    let res = add_br(&node, &r, &t, &c).unwrap();
    let with = with_prev(&c, &res);
    check(&node, &r, "bridge", &t, &with).unwrap();
    assert_eq!(r.commands(), [CniCommand::Add, CniCommand::Check]);

    let e = check(&node, &r, "bridge", &t, &c).unwrap_err();
    assert_eq!(e.details, "prevResult: required for CHECK but not given");

    // A route removed by hand.
    pod.ip(&["route", "del", "10.99.0.0/16"]);
    let e = check(&node, &r, "bridge", &t, &with).unwrap_err();
    assert!(e.details.contains("route 10.99.0.0/16 is not in"), "{e}");
    pod.ip(&["route", "add", "10.99.0.0/16", "via", "10.19.0.1"]);
    check(&node, &r, "bridge", &t, &with).unwrap();
    // An address removed.
    pod.ip(&["addr", "del", "10.19.0.2/24", "dev", "eth0"]);
    let e = check(&node, &r, "bridge", &t, &with).unwrap_err();
    assert!(
        e.details.starts_with("address 10.19.0.2/24 is not on eth0"),
        "{e}"
    );
    // A different MAC.
    pod.ip(&["link", "set", "eth0", "address", "02:00:00:00:00:99"]);
    let e = check(&node, &r, "bridge", &t, &with).unwrap_err();
    assert!(
        e.details
            .starts_with("container interface eth0: MAC is 02:00:00:00:00:99"),
        "{e}"
    );
    // The host veth released from the bridge.
    let mut res2 = res.clone();
    res2.interfaces[2].mac = Some("02:00:00:00:00:99".into());
    node.ip(&["link", "set", &res.interfaces[1].name, "nomaster"]);
    let e = check(&node, &r, "bridge", &t, &with_prev(&c, &res2)).unwrap_err();
    assert!(
        e.details
            .starts_with("the host veth of eth0 on bridge br-test was not found"),
        "{e}"
    );
    // promiscMode differing from the bridge.
    let mut promisc = with_prev(&c, &res2);
    promisc["promiscMode"] = json!(true);
    let e = check(&node, &r, "bridge", &t, &promisc).unwrap_err();
    assert!(
        e.details
            .contains("promiscuous mode is false, promiscMode says true"),
        "{e}"
    );
}

#[test]
fn layer2_only_and_disabled_container_interface() {
    let Some((node, pod, r, t)) = node_and_pod() else {
        return;
    };
    // `"ipam": {}` is layer 2 only, as in the reference.
    let c =
        json!({"cniVersion": "1.0.0", "name": "l2", "type": "bridge", "bridge": BR, "ipam": {}});
    let res = add_br(&node, &r, &t, &c).unwrap();
    assert!(res.ips.is_empty() && res.routes.is_empty());
    assert_eq!(res.interfaces.len(), 3);
    let eth0 = link(&pod, "eth0").unwrap();
    assert!(has_flag(&eth0, "UP"));
    assert!(addresses(&pod, "eth0")
        .iter()
        .all(|(a, _)| a.starts_with("fe80")));

    let pod2 = TestNs::new();
    let mut c2 = c.clone();
    c2["disableContainerInterface"] = json!(true);
    add_br(&node, &r, &eth0_of("ctr2", &pod2), &c2).unwrap();
    assert!(!has_flag(&link(&pod2, "eth0").unwrap(), "UP"), "left down");
    assert!(r.commands().is_empty());
}

#[test]
fn port_isolation_promiscuity_and_enabled_dad() {
    let Some((node, pod, r, t)) = node_and_pod() else {
        return;
    };
    let c = conf(
        json!([{"address": "fd20::5/64", "gateway": "fd20::1"}]),
        json!({"portIsolation": true, "promiscMode": true, "enabledad": true, "isGateway": true}),
    );
    // A new namespace's IPv4 forwarding is the host's (a Docker host or a
    // Kubernetes node forwards): what plexus must not change is compared.
    let ipv4_forward_before = sysctl(&node, "net/ipv4/ip_forward");
    let res = add_br(&node, &r, &t, &c).unwrap();
    let hv = link(&node, &res.interfaces[1].name).unwrap();
    assert_eq!(hv["linkinfo"]["info_slave_data"]["isolated"], true);
    assert_eq!(hv["linkinfo"]["info_slave_data"]["hairpin"], false);
    let br = link(&node, BR).unwrap();
    assert!(has_flag(&br, "PROMISC"), "{br}");
    assert_eq!(sysctl(&pod, "net/ipv6/conf/eth0/accept_dad"), "1");
    assert_eq!(sysctl(&pod, "net/ipv6/conf/eth0/enhanced_dad"), "1");
    // ADD waited for DAD: the address is no longer tentative.
    let a = addresses(&pod, "eth0");
    let v6 = a.iter().find(|(a, _)| a == "fd20::5/64").unwrap();
    assert!(v6.1.get("tentative").is_none(), "{:?}", v6.1);
    assert_eq!(sysctl(&node, "net/ipv6/conf/all/forwarding"), "1");
    assert_eq!(
        sysctl(&node, "net/ipv4/ip_forward"),
        ipv4_forward_before,
        "no IPv4 gateway: IPv4 forwarding left as it was"
    );
}

#[test]
fn gateway_address_conflicts_need_force_address() {
    if !is_root() {
        return;
    }
    let (node, pod1, pod2) = (TestNs::new(), TestNs::new(), TestNs::new());
    node.ip(&["link", "add", BR, "type", "bridge"]);
    node.ip(&["addr", "add", "10.21.0.1/24", "dev", BR]);
    let r = TestResolver::default();
    let c = conf(v4("10.22.0.2/24"), json!({"isGateway": true}));
    let e = add_br(&node, &r, &eth0_of("ctr1", &pod1), &c).unwrap_err();
    assert_error(
        &e,
        ErrorCode::InvalidConfig,
        "forceAddress: \"br-test\" already has an IP address (10.21.0.1/24)",
    );
    assert_eq!(link_names(&pod1), ["lo"], "undone");
    assert_eq!(r.commands(), [CniCommand::Add, CniCommand::Del]);

    let mut forced = c.clone();
    forced["forceAddress"] = json!(true);
    add_br(&node, &r, &eth0_of("ctr2", &pod2), &forced).unwrap();
    assert!(has_address(&node, BR, "10.22.0.1/24"));
    assert!(!has_address(&node, BR, "10.21.0.1/24"));
}

#[test]
fn bad_configurations_are_refused_before_anything_changes() {
    let pod_path = Target::nowhere("ctr1");
    let unsupported = [
        (
            json!({"ipMasq": true}),
            "ipMasq: not supported yet by plexus's built-in bridge (needs nftables)",
        ),
        (
            json!({"macspoofchk": true}),
            "macspoofchk: not supported yet",
        ),
    ];
    let invalid = [
        (json!({"mtu": 9}), "mtu: 9 is out of range"),
        (json!({"mtu": 65536}), "mtu: 65536 is out of range"),
        (json!({"mtu": "1500"}), "mtu: invalid type: string \"1500\""),
        (
            json!({"hairpinMode": 1}),
            "hairpinMode: invalid type: integer",
        ),
        (json!({"vlan": 5000}), "vlan: 5000 is out of range"),
        (
            json!({"ipam": {"type": 7}}),
            "ipam.type: invalid type: integer",
        ),
    ];
    for (code, cases) in [
        (ErrorCode::UnsupportedField, &unsupported[..]),
        (ErrorCode::InvalidConfig, &invalid[..]),
    ] {
        for (extra, starts) in cases {
            let c = conf(v4("10.23.0.2/24"), extra.clone());
            let e = validate("bridge", &pod_path, &c).unwrap_err();
            assert_eq!(
                (e.code, e.details.starts_with(starts)),
                (code, true),
                "{extra}: {e}"
            );
        }
    }
    // Unknown keys of any type are ignored, as Go decoding does.
    validate(
        "bridge",
        &pod_path,
        &conf(v4("10.23.0.2/24"), json!({"mtuu": "x", "frob": [null]})),
    )
    .unwrap();
}

#[test]
fn refused_add_touches_nothing() {
    let Some((node, _pod, r, t)) = node_and_pod() else {
        return;
    };
    let e = add_br(
        &node,
        &r,
        &t,
        &conf(v4("10.24.0.2/24"), json!({"ipMasq": true})),
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::UnsupportedField);
    assert_nothing_made(&node, &r);
}

#[test]
fn a_missing_pod_namespace_is_an_unknown_container() {
    if !is_root() {
        return;
    }
    let node = TestNs::new();
    let r = TestResolver::default();
    let t = Target::nowhere("ctr1");
    let e = add_br(&node, &r, &t, &conf(v4("10.25.0.2/24"), json!({}))).unwrap_err();
    assert_eq!(e.code, ErrorCode::UnknownContainer, "{e}");
    assert_eq!(link_names(&node), ["lo"]);
}

#[test]
fn vlan_and_trunk_ports() {
    if !plexus_testkit::require(&[Feature::Root, Feature::BridgeVlanFiltering]) {
        return;
    }
    let (node, pod1, pod2) = (TestNs::new(), TestNs::new(), TestNs::new());
    let r = TestResolver::default();
    let c = conf(v4("10.26.0.2/24"), json!({"vlan": 100, "isGateway": true}));
    let res = add_br(&node, &r, &eth0_of("ctr1", &pod1), &c).unwrap();
    let br = link(&node, BR).unwrap();
    assert_eq!(br["linkinfo"]["info_data"]["vlan_filtering"], 1);
    let port = vlan_port(&node, &res.interfaces[1].name);
    assert_eq!(
        port["vlans"],
        json!([{"vlan": 100, "flags": ["PVID", "Egress Untagged"]}])
    );
    // The vlan gateway interface carries the gateway address and is listed.
    assert_eq!(res.interfaces.len(), 4);
    assert_eq!(res.interfaces[3].name, "br-test.100");
    assert!(has_address(&node, "br-test.100", "10.26.0.1/24"));
    assert!(ping(&pod1, "10.26.0.1"));

    let c2 = conf(
        v4("10.26.0.3/24"),
        json!({"vlanTrunk": [{"minID": 200, "maxID": 202}, {"id": 300}]}),
    );
    let res2 = add_br(&node, &r, &eth0_of("ctr2", &pod2), &c2).unwrap();
    let port = vlan_port(&node, &res2.interfaces[1].name);
    let vids: Vec<u64> = port["vlans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["vlan"].as_u64().unwrap())
        .collect();
    assert_eq!(vids, [1, 200, 201, 202, 300], "native 1 plus the trunk");
}

#[test]
fn vlan_configuration_without_kernel_support_fails_cleanly() {
    // On kernels without bridge VLAN filtering (the build hosts') a vlan
    // configuration must fail with the kernel's reason and leave nothing.
    if !plexus_testkit::require_absent(Feature::BridgeVlanFiltering) {
        return;
    }
    let (node, pod) = (TestNs::new(), TestNs::new());
    let r = TestResolver::default();
    let e = add_br(
        &node,
        &r,
        &eth0_of("ctr1", &pod),
        &conf(v4("10.27.0.2/24"), json!({"vlan": 5})),
    )
    .unwrap_err();
    assert_error(&e, ErrorCode::Io, "create bridge br-test: ");
    assert!(e.details.contains("EOPNOTSUPP"), "{e}");
    assert_eq!(link_names(&node), ["lo"]);
    assert_eq!(link_names(&pod), ["lo"]);
    // IPAM runs only once the links exist.
    assert_eq!(r.commands(), []);
}

#[test]
fn status_and_gc_are_the_ipam_plugins() {
    // cni-SPEC §2 STATUS and GC: nothing of the drivers' own outlives the
    // pod namespace, so both go to IPAM (and are no-ops without one).
    let r = TestResolver::default();
    let env = |command| {
        plexus_cni::env::CniEnv::config_only(command, vec!["/opt/cni/bin".into()]).unwrap()
    };
    let req = |command, config: &Value| common::request(env(command), config);
    let mut c = conf(v4("10.28.0.2/24"), json!({}));
    c["cniVersion"] = json!("1.1.0");
    let l2 = json!({"cniVersion": "1.1.0", "name": "l2", "type": "macvlan"});
    // The interface drivers delegate STATUS and GC to their IPAM plugin.
    for ty in ["bridge", "ipvlan", "macvlan"] {
        let session = plexus_dataplane::Session::new();
        let d = plexus_dataplane::drivers::driver(ty, &r, &session).unwrap();
        d.status(&req(CniCommand::Status, &c)).unwrap();
        d.gc(
            &req(CniCommand::Gc, &c),
            &[("ctr1".parse().unwrap(), "eth0".parse().unwrap())],
        )
        .unwrap();
        d.status(&req(CniCommand::Status, &l2)).unwrap();
        d.gc(&req(CniCommand::Gc, &l2), &[]).unwrap();
        let mut failing = c.clone();
        failing["ipam"]["fail"] = json!("STATUS");
        let e = d.status(&req(CniCommand::Status, &failing)).unwrap_err();
        assert_eq!(e.code, ErrorCode::TryAgainLater, "{ty}");
    }
    assert_eq!(
        r.commands(),
        [CniCommand::Status, CniCommand::Gc, CniCommand::Status].repeat(3)
    );
    let session = plexus_dataplane::Session::new();
    assert!(plexus_dataplane::drivers::driver("ptp", &r, &session).is_none());
    for ty in ["bridge", "ipvlan", "macvlan"] {
        assert!(
            plexus_dataplane::drivers::builtin_types().any(|t| t == ty),
            "{ty}"
        );
    }
}
