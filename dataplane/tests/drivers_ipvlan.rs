//! The built-in `ipvlan` driver and typed ipvlan creation. The build hosts'
//! kernel has no ipvlan: tests that need it probe for it (creating one in a
//! throw-away namespace) and, when it is missing, say so on stderr and skip;
//! the VM harness runs them. What can be checked without kernel support
//! (configuration, a clean failure) runs everywhere.
mod common;
use common::ifname;
mod drivers_support;

use common::TestNs;
use drivers_support::*;
use plexus_cni::env::CniCommand;
use plexus_cni::error::ErrorCode;
use plexus_cni::result::CniResult;
use plexus_dataplane::netlink::{IpvlanMode, IpvlanSpec, LinkKind};
use plexus_dataplane::Netlink;
use plexus_testkit::Feature;
use serde_json::{json, Value};

/// Root and ipvlan, or a visible, counted skip (a failure in the VM).
fn runnable() -> bool {
    plexus_testkit::require(&[Feature::Root, Feature::Ipvlan])
}

/// The node's uplink network (see [`node_with_uplink`]).
const UPLINK: &str = "172.30.1";

fn conf(addresses: Value, extra: Value) -> Value {
    stacked::conf("ipvlan", "ipv", addresses, extra)
}

#[test]
fn create_ipvlan_is_typed() {
    if !runnable() {
        return;
    }
    let (node, pod) = (TestNs::new(), TestNs::new());
    let (nl, master) = stacked::veth_master(&node);
    let local = nl
        .create_ipvlan(&IpvlanSpec {
            mtu: Some(1400),
            ..IpvlanSpec::new(ifname("ipv0"), master.index, IpvlanMode::L3)
        })
        .unwrap()
        .expect("created locally");
    assert_eq!(local.kind, Some(LinkKind::Ipvlan));
    assert_eq!(local.ipvlan_mode, Some(IpvlanMode::L3));
    assert_eq!(local.mtu, 1400);
    assert_eq!(local.parent, Some(master.index));
    assert_eq!(
        link(&node, "ipv0").unwrap()["linkinfo"]["info_data"]["mode"],
        "l3"
    );
    // Directly into another namespace, under its final name.
    let remote = nl
        .create_ipvlan(&IpvlanSpec {
            netns: Some(&pod.ns),
            ..IpvlanSpec::new(ifname("eth0"), master.index, IpvlanMode::L3s)
        })
        .unwrap();
    assert!(remote.is_none());
    let l = Netlink::open(&pod.ns)
        .unwrap()
        .link_by_name(&ifname("eth0"))
        .unwrap()
        .unwrap();
    assert_eq!(l.ipvlan_mode, Some(IpvlanMode::L3s));
    assert!(link(&node, "eth0").is_none());
}

#[test]
fn without_kernel_support_add_fails_cleanly() {
    if !plexus_testkit::require_absent(Feature::Ipvlan) {
        return;
    }
    stacked::fails_cleanly_without_the_kind("ipvlan", UPLINK, &conf(v4("10.60.0.5/24"), json!({})));
}

#[test]
fn validate_needs_ipam_or_a_prev_result_and_known_modes() {
    let bare = json!({"cniVersion": "1.0.0", "name": "ipv", "type": "ipvlan", "master": "up0"});
    let e = validate("ipvlan", &Target::nowhere("c1"), &bare).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidConfig);
    assert_eq!(
        e.details,
        "ipam: missing: ipvlan needs an IPAM plugin, or a prevResult with addresses"
    );
    let prev = CniResult::from_value(&json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "up0"}], "ips": [{"address": "10.61.0.5/24"}]}))
    .unwrap();
    validate("ipvlan", &Target::nowhere("c1"), &with_prev(&bare, &prev)).unwrap();
    stacked::unknown_mode("ipvlan", conf, "l4", "l2, l3 or l3s");
    let e = validate(
        "ipvlan",
        &Target::nowhere("c1"),
        &conf(json!([]), json!({"mtu": 10})),
    )
    .unwrap_err();
    assert!(e.details.starts_with("mtu: 10 is out of range"), "{e}");
    // ipvlan has no `mac`: the key is ignored like any unknown one.
    validate(
        "ipvlan",
        &Target::nowhere("c1"),
        &conf(json!([]), json!({"mac": 5})),
    )
    .unwrap();
}

#[test]
fn two_l2_pods_reach_each_other() {
    if !runnable() {
        return;
    }
    let node = node_with_uplink(UPLINK);
    let confs = [
        conf(v4("10.62.0.2/24"), json!({"mtu": 1400})),
        conf(v4("10.62.0.3/24"), json!({})),
    ];
    let ips = ["10.62.0.2", "10.62.0.3"];
    let (pod1, res) = stacked::two_pods_reach_each_other("ipvlan", &node, confs, ips);
    let j = result_json(&res, "1.0.0");
    assert_eq!(j["interfaces"].as_array().unwrap().len(), 1);
    assert_eq!(j["interfaces"][0]["name"], "eth0");
    assert_eq!(
        j["interfaces"][0]["sandbox"],
        netns_path(&pod1).to_str().unwrap()
    );
    // An ipvlan shares its master's MAC.
    assert_eq!(
        j["interfaces"][0]["mac"],
        link(&node, "up0").unwrap()["address"]
    );
    assert_eq!(
        j["ips"],
        json!([{"interface": 0, "address": "10.62.0.2/24"}])
    );
    let l = link(&pod1, "eth0").unwrap();
    assert_eq!(l["linkinfo"]["info_kind"], "ipvlan");
    assert_eq!(l["linkinfo"]["info_data"]["mode"], "l2");
    assert_eq!(l["mtu"], 1400);
}

#[test]
fn l3_and_l3s_modes() {
    if !runnable() {
        return;
    }
    let node = node_with_uplink(UPLINK);
    stacked::every_mode("ipvlan", &node, &["l3", "l3s"], |mode| {
        conf(v4("10.63.0.5/24"), json!({"mode": mode}))
    });
}

#[test]
fn chained_takes_addresses_and_master_from_the_prev_result() {
    let Some((node, pod, r, t)) = stacked::pod_on_uplink(runnable(), UPLINK) else {
        return;
    };
    let prev = CniResult::from_value(&json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "up0"}],
        "ips": [{"address": "10.64.0.5/24", "gateway": "10.64.0.1"}],
        "routes": [{"dst": "0.0.0.0/0"}]}))
    .unwrap();
    let c = with_prev(
        &json!({"cniVersion": "1.0.0", "name": "ipv", "type": "ipvlan"}),
        &prev,
    );
    let res = add(&node, &r, "ipvlan", &t, &c).unwrap();
    assert_eq!(res.interfaces.len(), 1);
    assert_eq!(res.ips[0].interface, Some(0));
    assert!(has_address(&pod, "eth0", "10.64.0.5/24"));
    assert_route(&pod, "default via 10.64.0.1 dev eth0");
    assert!(r.commands().is_empty(), "no IPAM in a chain");
}

#[test]
fn refusals_and_clean_failures() {
    let Some((node, pod, r, t)) = stacked::pod_on_uplink(runnable(), UPLINK) else {
        return;
    };
    let c = conf(v4("10.65.0.5/24"), json!({}));
    let e = stacked::unknown_master_and_large_mtu("ipvlan", &node, &r, &t, c.clone(), 9000);
    assert!(e.details.starts_with("mtu: 9000 is out of range"), "{e}");
    let mut failing = c.clone();
    failing["ipam"]["fail"] = json!("ADD");
    add(&node, &r, "ipvlan", &t, &failing).unwrap_err();
    assert_eq!(link_names(&pod), ["lo"]);
    stacked::ifname_taken("ipvlan", &node, &r, &pod, &t, &c);
    // Only the failing IPAM's ADD: the clash is found before IPAM runs
    // (cni-SPEC §2: a failed ADD leaves nothing).
    assert_eq!(r.commands(), [CniCommand::Add]);
}

#[test]
fn del_and_check() {
    let Some((node, pod, r, t)) = stacked::pod_on_uplink(runnable(), UPLINK) else {
        return;
    };
    let c = conf(v4("10.66.0.5/24"), json!({"mode": "l3"}));
    let res = add(&node, &r, "ipvlan", &t, &c).unwrap();
    let with = with_prev(&c, &res);
    check(&node, &r, "ipvlan", &t, &with).unwrap();
    stacked::mode_drift("ipvlan", &node, &r, &t, &with, ("l3", "l2"));
    del(&node, &r, "ipvlan", &t, &with).unwrap();
    dels_again(&node, &r, "ipvlan", &t, &c);
    assert_eq!(link_names(&pod), ["lo"]);
}

#[test]
fn a_pod_interface_named_like_a_node_link() {
    let Some((node, pod, r, _)) = stacked::pod_on_uplink(runnable(), UPLINK) else {
        return;
    };
    let c = conf(v4("10.67.0.5/24"), json!({}));
    stacked::named_like_a_node_link("ipvlan", &node, &r, &pod, &c);
}
