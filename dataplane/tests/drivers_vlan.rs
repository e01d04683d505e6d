//! The built-in `vlan` driver and typed VLAN creation, against the real
//! kernel in namespaces made for each test, and side by side with the
//! reference plugin (containernetworking/plugins `plugins/main/vlan`, in
//! /usr/lib/cni). The build hosts' kernel has no 8021q: tests that need it
//! probe for it and, when it is missing, say so and skip; the VM harness
//! runs them (`vm-tests/run drivers_vlan`). What needs no kernel support
//! (configuration, a clean failure) runs everywhere.
#[path = "common/chained.rs"]
mod chained;
mod common;
mod drivers_support;

use common::{ifname, run, TestNs};
use drivers_support::*;
use plexus_cni::env::CniCommand;
use plexus_cni::error::ErrorCode;
use plexus_dataplane::netlink::{LinkKind, VlanSpec};
use plexus_testkit::files;
use plexus_testkit::Feature;
use serde_json::{json, Value};

/// Root and 802.1q, or a visible, counted skip (a failure in the VM).
fn runnable() -> bool {
    plexus_testkit::require(&[Feature::Root, Feature::Vlan])
}

/// The node's uplink network (see [`node_with_uplink`]).
const UPLINK: &str = "172.30.2";

/// A `vlan` configuration on `up0` with VLAN `id`, the test IPAM handing out
/// `addresses`.
fn conf(id: i64, addresses: Value, extra: Value) -> Value {
    let mut c = stacked::conf("vlan", "vl", addresses, extra.clone());
    if extra.get("vlanId").is_none() {
        c["vlanId"] = json!(id);
    }
    c
}

/// VALIDATE of `extra` over a valid configuration: refused, naming the key
/// first.
#[track_caller]
fn refused(extra: Value, starts: &str) {
    let c = conf(100, json!([]), extra.clone());
    let e = validate("vlan", &Target::nowhere("c1"), &c).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidConfig, "{extra}");
    assert!(e.details.starts_with(starts), "{extra}: {e}");
}

#[test]
fn refused_configurations_name_their_key() {
    let mut no_master = conf(100, json!([]), json!({}));
    no_master.as_object_mut().unwrap().remove("master");
    let e = validate("vlan", &Target::nowhere("c1"), &no_master).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidConfig);
    assert_eq!(
        e.details,
        "master: missing: the interface to make the VLAN on"
    );
    refused(json!({"master": ""}), "master: missing");
    // The reference's loadConf: 0 to 4094.
    refused(
        json!({"vlanId": -1}),
        "vlanId: -1 is out of range: must be 0 to 4094",
    );
    refused(
        json!({"vlanId": 4095}),
        "vlanId: 4095 is out of range: must be 0 to 4094",
    );
    refused(json!({"vlanId": 70000}), "vlanId: 70000 is out of range");
    refused(json!({"vlanId": "x"}), "vlanId: invalid type: string");
    refused(
        json!({"vlanId": 1.5}),
        "vlanId: invalid type: floating point",
    );
    refused(json!({"mtu": -5}), "mtu: -5 is out of range");
    refused(
        json!({"linkInContainer": "yes"}),
        "linkInContainer: invalid type: string",
    );
    for id in [0, 1, 4094] {
        let c = conf(id, json!([]), json!({}));
        validate("vlan", &Target::nowhere("c1"), &c).unwrap();
    }
    // Absent is 0, as the reference reads it.
    let mut no_id = conf(0, json!([]), json!({}));
    no_id.as_object_mut().unwrap().remove("vlanId");
    validate("vlan", &Target::nowhere("c1"), &no_id).unwrap();
}

#[test]
fn without_kernel_support_add_fails_cleanly() {
    if !plexus_testkit::require_absent(Feature::Vlan) {
        return;
    }
    let c = conf(100, v4("10.70.0.5/24"), json!({}));
    stacked::fails_cleanly_without_the_kind("vlan", UPLINK, &c);
}

#[test]
fn create_vlan_is_typed() {
    if !runnable() {
        return;
    }
    let node = TestNs::new();
    let (nl, master) = stacked::veth_master(&node);
    let v = nl
        .create_vlan(&VlanSpec {
            mtu: Some(1400),
            ..VlanSpec::new(ifname("m0.7"), master.index, 7)
        })
        .unwrap();
    assert_eq!(v.kind, Some(LinkKind::Vlan));
    assert_eq!(
        (v.vlan_id, v.mtu, v.parent),
        (Some(7), 1400, Some(master.index))
    );
    assert_eq!(
        link(&node, "m0.7").unwrap()["linkinfo"]["info_data"]["id"],
        7
    );
    // One id per master: the kernel's EEXIST.
    let e = nl
        .create_vlan(&VlanSpec::new(ifname("other"), master.index, 7))
        .unwrap_err();
    assert!(e.is_exists(), "{e}");
}

#[test]
fn two_pods_on_vlans_of_one_master_reach_each_other() {
    if !runnable() {
        return;
    }
    // The master's far end is a router with a leg in each VLAN.
    let (node, router) = (TestNs::new(), TestNs::new());
    node.ip(&[
        "link",
        "add",
        "up0",
        "type",
        "veth",
        "peer",
        "name",
        "up1",
        "netns",
        &router.name,
    ]);
    node.ip(&["link", "set", "up0", "up"]);
    router.ip(&["link", "set", "up1", "up"]);
    for id in ["100", "200"] {
        let leg = format!("up1.{id}");
        router.ip(&[
            "link", "add", "link", "up1", "name", &leg, "type", "vlan", "id", id,
        ]);
        router.ip(&["addr", "add", &format!("10.71.{id}.1/24"), "dev", &leg]);
        router.ip(&["link", "set", &leg, "up"]);
    }
    run(
        "ip",
        &[
            "netns",
            "exec",
            &router.name,
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
        ],
    );
    let pod_conf = |id: i64| {
        let mut c = conf(
            id,
            json!([{"address": format!("10.71.{id}.2/24"), "gateway": format!("10.71.{id}.1")}]),
            json!({}),
        );
        c["ipam"]["routes"] = json!([{"dst": "0.0.0.0/0"}]);
        c
    };
    let (pod1, res) = stacked::two_pods_reach_each_other(
        "vlan",
        &node,
        [pod_conf(100), pod_conf(200)],
        ["10.71.100.2", "10.71.200.2"],
    );
    assert_eq!(
        result_json(&res, "1.0.0"),
        json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "mac": link(&node, "up0").unwrap()["address"],
                            "sandbox": netns_path(&pod1).to_str().unwrap()}],
            "ips": [{"interface": 0, "address": "10.71.100.2/24", "gateway": "10.71.100.1"}],
            "routes": [{"dst": "0.0.0.0/0"}],
        })
    );
    let l = link(&pod1, "eth0").unwrap();
    assert_eq!(l["linkinfo"]["info_kind"], "vlan");
    assert_eq!(l["linkinfo"]["info_data"]["id"], 100);
    assert_eq!(l["link_index"], link(&node, "up0").unwrap()["ifindex"]);
    assert_route(&pod1, "default via 10.71.100.1 dev eth0");
    // The reference sets no sysctl on the VLAN.
    assert_eq!(sysctl(&pod1, "net/ipv4/conf/eth0/arp_notify"), "0");
    assert_eq!(link_names(&node), ["lo", "up0"], "nothing left in the node");
}

#[test]
fn layer2_only_without_ipam() {
    let Some((node, pod, r, t)) = stacked::pod_on_uplink(runnable(), UPLINK) else {
        return;
    };
    let c = json!({"cniVersion": "1.1.0", "name": "vl", "type": "vlan", "master": "up0",
                   "vlanId": 5});
    let res = add(&node, &r, "vlan", &t, &c).unwrap();
    assert!(res.ips.is_empty());
    assert_eq!(res.interfaces.len(), 1);
    assert!(has_flag(&link(&pod, "eth0").unwrap(), "UP"));
    check(&node, &r, "vlan", &t, &with_prev(&c, &res)).unwrap();
    del(&node, &r, "vlan", &t, &c).unwrap();
    assert_eq!(link_names(&pod), ["lo"]);
    // A CNI_IFNAME the node has too: the VLAN is made under a temporary
    // name and renamed in the pod (before Linux 6.14 the kernel refused a
    // link made for another namespace under a name the node has).
    let up1 = Target::new("c2", &pod, "up1");
    add(&node, &r, "vlan", &up1, &c).unwrap();
    assert_eq!(link(&pod, "up1").unwrap()["linkinfo"]["info_kind"], "vlan");
    assert_eq!(sorted_links(&node), ["lo", "up0", "up1"]);
    assert!(r.commands().is_empty());
}

#[test]
fn master_inside_the_container() {
    let Some((node, pod, r, t)) = stacked::pod_with_master(runnable()) else {
        return;
    };
    let c = conf(
        30,
        v4("10.72.0.5/24"),
        json!({"master": "m0", "linkInContainer": true}),
    );
    let res = add(&node, &r, "vlan", &t, &c).unwrap();
    let l = link(&pod, "eth0").unwrap();
    assert_eq!(
        (l["link"].clone(), l["linkinfo"]["info_data"]["id"].clone()),
        (json!("m0"), json!(30))
    );
    assert_eq!(link_names(&node), ["lo"]);
    check(&node, &r, "vlan", &t, &with_prev(&c, &res)).unwrap();
    del(&node, &r, "vlan", &t, &c).unwrap();
    assert_eq!(sorted_links(&pod), ["lo", "m0", "m1"]);
    // A master that is only in the host is not found in the container.
    let c = conf(31, v4("10.72.0.6/24"), json!({"linkInContainer": true}));
    let e = add(&node_with_uplink(UPLINK), &r, "vlan", &t, &c).unwrap_err();
    assert_eq!(
        e.details,
        "master: interface \"up0\" not found in the container namespace"
    );
}

#[test]
fn mtu_defaults_to_the_masters_and_may_not_exceed_it() {
    let Some((node, pod, r, t)) = stacked::pod_on_uplink(runnable(), UPLINK) else {
        return;
    };
    let c = conf(40, v4("10.73.0.5/24"), json!({}));
    let e = stacked::unknown_master_and_large_mtu("vlan", &node, &r, &t, c.clone(), 1501);
    assert!(
        e.details.starts_with(
            "mtu: 1501 is out of range: must be 0 (the default) or 68 to the master's MTU (1500)"
        ),
        "{e}"
    );
    assert_nothing_made(&pod, &r);
    add(&node, &r, "vlan", &t, &c).unwrap();
    assert_eq!(link(&pod, "eth0").unwrap()["mtu"], 1500);
    del(&node, &r, "vlan", &t, &c).unwrap();
    let small = with_keys(c, &json!({"mtu": 1400}));
    let res = add(&node, &r, "vlan", &t, &small).unwrap();
    assert_eq!(link(&pod, "eth0").unwrap()["mtu"], 1400);
    check(&node, &r, "vlan", &t, &with_prev(&small, &res)).unwrap();
}

#[test]
fn a_duplicate_vlan_on_a_master_is_refused_and_the_first_pod_keeps_its_own() {
    let Some((node, pod, r, t)) = stacked::pod_on_uplink(runnable(), UPLINK) else {
        return;
    };
    let first = conf(50, v4("10.74.0.5/24"), json!({}));
    let res = add(&node, &r, "vlan", &t, &first).unwrap();
    let pod2 = TestNs::new();
    let t2 = Target::new("c2", &pod2, "eth0");
    let e = add(
        &node,
        &r,
        "vlan",
        &t2,
        &conf(50, v4("10.74.0.6/24"), json!({})),
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidConfig);
    assert!(
        e.details
            .starts_with("vlanId: up0 already has a VLAN with id 50"),
        "{e}"
    );
    assert_eq!(link_names(&pod2), ["lo"]);
    assert_eq!(
        sorted_links(&node),
        ["lo", "up0", "up1"],
        "no temporary link left"
    );
    // IPAM ran only for the first pod.
    assert_eq!(r.commands(), [CniCommand::Add]);
    check(&node, &r, "vlan", &t, &with_prev(&first, &res)).unwrap();
    assert!(has_address(&pod, "eth0", "10.74.0.5/24"));
    // Another id on the same master is fine.
    add(
        &node,
        &r,
        "vlan",
        &t2,
        &conf(51, v4("10.74.0.6/24"), json!({})),
    )
    .unwrap();
}

#[test]
fn a_failed_add_leaves_nothing() {
    let Some((node, pod, r, t)) = stacked::pod_on_uplink(runnable(), UPLINK) else {
        return;
    };
    let c = conf(60, v4("10.75.0.5/24"), json!({}));
    stacked::failures_half_way_leave_nothing("vlan", &node, &c);
    assert_eq!(sorted_links(&node), ["lo", "up0", "up1"]);
    stacked::ifname_taken("vlan", &node, &r, &pod, &t, &c);
    assert_eq!(
        sorted_links(&node),
        ["lo", "up0", "up1"],
        "no temporary link left"
    );
    id_is_free_again(&node, &r, &c);
}

/// ADD of `c` for a new pod succeeds: nothing of an earlier attachment
/// holds its VLAN id.
fn id_is_free_again(node: &TestNs, r: &TestResolver, c: &Value) {
    let pod = TestNs::new();
    add(node, r, "vlan", &Target::new("c9", &pod, "eth0"), c).unwrap();
}

#[test]
fn del_twice_and_after_the_netns_is_gone() {
    let Some((node, pod, r, t)) = stacked::pod_on_uplink(runnable(), UPLINK) else {
        return;
    };
    let c = conf(70, v4("10.76.0.5/24"), json!({}));
    // A master that no longer exists does not matter to DEL (the
    // reference's loadConf would fail on it).
    stacked::dels_after_add("vlan", &node, &r, (&pod, &t), &c);
    // An interface of that name that is not a VLAN is not plexus's.
    pod.add_veth("eth0", "mine0");
    del(&node, &r, "vlan", &t, &c).unwrap();
    assert_eq!(sorted_links(&pod), ["eth0", "lo", "mine0"]);
    assert_eq!(r.commands(), add_then_dels(6));
    id_is_free_again(&node, &r, &c);
}

#[test]
fn check_accepts_the_attachment_and_finds_drift() {
    let Some((node, pod, r, t)) = stacked::pod_on_uplink(runnable(), UPLINK) else {
        return;
    };
    let c = conf(80, v4("10.77.0.5/24"), json!({"mtu": 1400}));
    let res = add(&node, &r, "vlan", &t, &c).unwrap();
    let with = with_prev(&c, &res);
    check(&node, &r, "vlan", &t, &with).unwrap();
    let drift = |extra: Value| {
        check(&node, &r, "vlan", &t, &with_keys(with.clone(), &extra))
            .unwrap_err()
            .details
    };
    assert_eq!(
        drift(json!({"vlanId": 81})),
        "vlanId: the container's vlan is in VLAN 80, the configuration says 81"
    );
    assert_eq!(
        drift(json!({"mtu": 1300})),
        "mtu: the container's vlan eth0 has MTU 1400, the configuration says 1300"
    );
    assert_eq!(
        drift(json!({"master": "up1"})),
        "master: the container's vlan eth0 is not on up1"
    );
    assert_eq!(
        drift(json!({"master": "nope0"})),
        "master \"nope0\" not found in the host namespace"
    );
    pod.ip(&["addr", "flush", "dev", "eth0"]);
    assert!(drift(json!({})).starts_with("address 10.77.0.5/24 is not on eth0"));
    pod.ip(&["link", "del", "eth0"]);
    assert_eq!(drift(json!({})), "container interface eth0 not found");
}

/// A `vlan` config with host-local handing out from 10.78.0.0/24, its leases
/// in `dir`. The route names its gateway: without one the reference's own
/// CHECK fails after its ADD (its `ValidateExpectedRoute` looks for a route
/// without a gateway, and the route went through the address's), where
/// plexus's CHECK passes.
fn host_local_conf(id: i64, dir: &std::path::Path) -> Value {
    json!({"cniVersion": "1.0.0", "name": "vl-peer", "type": "vlan", "master": "up0",
           "vlanId": id, "mtu": 1400, "dns": {"nameservers": ["10.78.0.53"]},
           "ipam": {"type": "host-local", "subnet": "10.78.0.0/24", "gateway": "10.78.0.1",
                    "routes": [{"dst": "10.99.0.0/16", "gw": "10.78.0.1"}], "dataDir": dir}})
}

/// What may differ between two attachments of one config by nature: the
/// pod's path and the VLAN's MAC (its master's).
fn comparable(mut result: Value) -> Value {
    let result_ = &mut result;
    result_["interfaces"][0]["sandbox"] = json!("SANDBOX");
    result_["interfaces"][0]["mac"] = json!("MAC");
    chained::normalised(result)
}

/// The pod's VLAN as compared: kind, id, MTU, up, addresses and routes.
fn pod_view(pod: &TestNs) -> Value {
    let l = link(pod, "eth0").unwrap();
    json!({
        "kind": l["linkinfo"]["info_kind"], "id": l["linkinfo"]["info_data"]["id"],
        "protocol": l["linkinfo"]["info_data"]["protocol"],
        "mtu": l["mtu"], "up": has_flag(&l, "UP"),
        "addresses": addresses(pod, "eth0").into_iter().map(|(a, _)| a).collect::<Vec<_>>(),
        "routes": routes(pod, false),
        "arp_notify": sysctl(pod, "net/ipv4/conf/eth0/arp_notify"),
    })
}

#[test]
fn the_reference_vlan_gives_the_same_result_on_the_same_config() {
    if !runnable() || !chained::have_reference() {
        return;
    }
    let node = node_with_uplink(UPLINK);
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let (ours, theirs) = (TestNs::new(), TestNs::new());
    // Two VLANs on one master: the same config but for the id and where
    // host-local keeps its leases.
    let our_conf = host_local_conf(90, dirs[0].path());
    let their_conf = host_local_conf(91, dirs[1].path());
    let r = chained::ReferenceIpam { node: &node };
    let t = Target::new("px", &ours, "eth0");
    let ns = |pod: &TestNs| netns_path(pod).to_str().unwrap().to_string();
    let env = |command, pod: &TestNs| chained::env(command, "ref", Some(&ns(pod)), "eth0", "");

    let our_result = result_json(&add(&node, &r, "vlan", &t, &our_conf).unwrap(), "1.0.0");
    let their_result =
        chained::reference("vlan", &node, &env(CniCommand::Add, &theirs), &their_conf)
            .unwrap_or_else(|e| panic!("reference vlan ADD: {e}"));
    assert_eq!(
        comparable(our_result.clone()),
        comparable(their_result.clone())
    );
    assert_eq!(
        our_result["interfaces"][0]["mac"], their_result["interfaces"][0]["mac"],
        "both the master's"
    );
    let mut our_view = pod_view(&ours);
    let mut their_view = pod_view(&theirs);
    assert_eq!(our_view["id"], 90);
    assert_eq!(their_view["id"], 91);
    our_view["id"] = json!(null);
    their_view["id"] = json!(null);
    assert_eq!(our_view, their_view);

    // Each CHECK passes, then each DEL, and each leaves nothing.
    let our_prev = chained_prev(&our_conf, &our_result);
    check(&node, &r, "vlan", &t, &our_prev).unwrap();
    let theirs_again = |command| {
        chained::reference(
            "vlan",
            &node,
            &env(command, &theirs),
            &chained_prev(&their_conf, &their_result),
        )
        .unwrap_or_else(|e| panic!("reference vlan {command}: {e}"))
    };
    theirs_again(CniCommand::Check);
    del(&node, &r, "vlan", &t, &our_prev).unwrap();
    theirs_again(CniCommand::Del);
    for (pod, dir) in [(&ours, &dirs[0]), (&theirs, &dirs[1])] {
        assert_eq!(link_names(pod), ["lo"]);
        assert_eq!(files::leases(&dir.path().join("vl-peer")), [""; 0]);
    }
    assert_eq!(sorted_links(&node), ["lo", "up0", "up1"]);
}

/// `conf` with `result` as its prevResult.
fn chained_prev(conf: &Value, result: &Value) -> Value {
    with_keys(conf.clone(), &json!({"prevResult": result}))
}

#[test]
fn the_reference_vlan_refuses_what_plexus_refuses() {
    if !runnable() || !chained::have_reference() {
        return;
    }
    let node = node_with_uplink(UPLINK);
    let dir = tempfile::tempdir().unwrap();
    let r = chained::ReferenceIpam { node: &node };
    let good = host_local_conf(92, dir.path());
    let mut no_master = good.clone();
    no_master.as_object_mut().unwrap().remove("master");
    // The first pod's VLAN 92, which the duplicates ask for again.
    let first = TestNs::new();
    add(
        &node,
        &r,
        "vlan",
        &Target::new("first", &first, "eth0"),
        &good,
    )
    .unwrap();
    let bad = [
        ("master missing", no_master),
        (
            "unknown master",
            with_keys(good.clone(), &json!({"master": "nope0"})),
        ),
        ("vlanId -1", with_keys(good.clone(), &json!({"vlanId": -1}))),
        (
            "vlanId 4095",
            with_keys(good.clone(), &json!({"vlanId": 4095})),
        ),
        (
            "vlanId \"x\"",
            with_keys(good.clone(), &json!({"vlanId": "x"})),
        ),
        (
            "mtu above the master's",
            with_keys(good.clone(), &json!({"mtu": 1501})),
        ),
        ("a duplicate VLAN", good.clone()),
    ];
    for (what, c) in bad {
        let (ours, theirs) = (TestNs::new(), TestNs::new());
        let e = add(&node, &r, "vlan", &Target::new("px", &ours, "eth0"), &c).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidConfig, "{what}: {e}");
        let env = chained::env(
            CniCommand::Add,
            "ref",
            Some(netns_path(&theirs).to_str().unwrap()),
            "eth0",
            "",
        );
        let refused = chained::reference("vlan", &node, &env, &c);
        assert!(
            refused.is_err(),
            "{what}: the reference took it: {refused:?}"
        );
        assert_eq!(link_names(&ours), ["lo"], "{what}");
        assert_eq!(link_names(&theirs), ["lo"], "{what}");
    }
    assert_eq!(sorted_links(&node), ["lo", "up0", "up1"]);
    let kept = link(&first, "eth0").unwrap();
    assert_eq!(
        kept["linkinfo"]["info_data"]["id"], 92,
        "the first pod keeps its VLAN"
    );
}
