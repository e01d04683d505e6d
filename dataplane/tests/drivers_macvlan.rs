//! The built-in `macvlan` driver against the real kernel, as root, in
//! namespaces made for each test. The "node" namespace plays the host: its
//! uplink is a veth pair `up0`/`up1` (both ends up, so macvlans on `up0`
//! have carrier), `up0` addressed and carrying the default route.
mod common;
mod drivers_support;

use common::{is_root, TestNs};
use drivers_support::*;
use plexus_cni::error::ErrorCode;
use serde_json::{json, Value};

/// The node's uplink network (see [`node_with_uplink`]).
const UPLINK: &str = "172.30.0";

fn conf(addresses: Value, extra: Value) -> Value {
    stacked::conf("macvlan", "mv", addresses, extra)
}

fn v4(addr: &str, gw: &str) -> Value {
    json!([{ "address": addr, "gateway": gw }])
}

/// ADD of `c` with `node` as the host, for `eth0` of a new pod, refused as
/// a configuration error with `details`.
#[track_caller]
fn refused_for_a_new_pod(node: &TestNs, c: &Value, details: &str) {
    let pod = TestNs::new();
    let t = Target::new("c2", &pod, "eth0");
    let e = add(node, &TestResolver::default(), "macvlan", &t, c).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidConfig);
    assert_eq!(e.details, details);
}

fn ifindex(ns: &TestNs, name: &str) -> Value {
    link(ns, name).unwrap()["ifindex"].clone()
}

#[test]
fn add_creates_the_macvlan_directly_in_the_pod() {
    if !is_root() {
        return;
    }
    let (node, pod) = (node_with_uplink(UPLINK), TestNs::new());
    let node_links = link_names(&node);
    let r = TestResolver::default();
    let t = Target::new("ctr1", &pod, "net1");
    let mut c = conf(
        v4("10.40.0.5/24", "10.40.0.1"),
        json!({"mtu": 1400, "runtimeConfig": {"mac": "0a:58:0a:28:00:05"},
               "dns": {"nameservers": ["10.40.0.53"]}}),
    );
    c["ipam"]["routes"] = json!([{"dst": "10.99.0.0/16"}]);
    c["ipam"]["dns"] = json!({"nameservers": ["9.9.9.9"]});
    let res = add(&node, &r, "macvlan", &t, &c).unwrap();
    let j = result_json(&res, "1.0.0");
    assert_eq!(
        j,
        json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "net1", "mac": "0a:58:0a:28:00:05",
                            "sandbox": netns_path(&pod).to_str().unwrap()}],
            "ips": [{"interface": 0, "address": "10.40.0.5/24", "gateway": "10.40.0.1"}],
            "routes": [{"dst": "10.99.0.0/16"}],
            // The configuration's dns, not IPAM's, as the reference does.
            "dns": {"nameservers": ["10.40.0.53"]},
        })
    );
    let l = link(&pod, "net1").unwrap();
    assert_eq!(l["linkinfo"]["info_kind"], "macvlan");
    assert_eq!(l["linkinfo"]["info_data"]["mode"], "bridge");
    assert_eq!(l["mtu"], 1400);
    assert_eq!(l["address"], "0a:58:0a:28:00:05");
    assert!(has_flag(&l, "UP"));
    assert_eq!(l["link_index"], ifindex(&node, "up0"), "{l}");
    assert!(has_address(&pod, "net1", "10.40.0.5/24"));
    assert_route(&pod, "10.99.0.0/16 via 10.40.0.1 dev net1");
    assert_eq!(sysctl(&pod, "net/ipv4/conf/net1/arp_notify"), "1");
    assert_eq!(sysctl(&pod, "net/ipv6/conf/net1/ndisc_notify"), "1");
    assert_eq!(link_names(&node), node_links, "nothing new in the node");
}

#[test]
fn two_macvlan_pods_reach_each_other() {
    if !is_root() {
        return;
    }
    let confs = [
        conf(v4("10.41.0.2/24", "10.41.0.1"), json!({})),
        conf(v4("10.41.0.3/24", "10.41.0.1"), json!({})),
    ];
    let ips = ["10.41.0.2", "10.41.0.3"];
    stacked::two_pods_reach_each_other("macvlan", &node_with_uplink(UPLINK), confs, ips);
}

#[test]
fn dual_stack_waits_for_duplicate_address_detection() {
    // The reference macvlan leaves DAD on and waits when there is an IPv6
    // gateway.
    let Some((node, pod, r, t)) = stacked::pod_on_uplink(is_root(), UPLINK) else {
        return;
    };
    let c = conf(
        json!([{"address": "10.42.0.5/24", "gateway": "10.42.0.1"},
               {"address": "fd42::5/64", "gateway": "fd42::1"}]),
        json!({}),
    );
    let mut c = c;
    c["ipam"]["routes"] = json!([{"dst": "::/0"}]);
    add(&node, &r, "macvlan", &t, &c).unwrap();
    let a = addresses(&pod, "eth0");
    let v6 = a
        .iter()
        .find(|(a, _)| a == "fd42::5/64")
        .expect("v6 address");
    assert!(v6.1.get("tentative").is_none(), "{:?}", v6.1);
    assert_route(&pod, "default via fd42::1 dev eth0");
}

#[test]
fn master_defaults_to_the_default_route_interface() {
    let Some((node, pod, r, t)) = stacked::pod_on_uplink(is_root(), UPLINK) else {
        return;
    };
    let mut c = conf(v4("10.43.0.5/24", "10.43.0.1"), json!({}));
    c.as_object_mut().unwrap().remove("master");
    add(&node, &r, "macvlan", &t, &c).unwrap();
    assert_eq!(
        link(&pod, "eth0").unwrap()["link_index"],
        ifindex(&node, "up0")
    );

    // No default route to take it from: an error naming the key.
    let no_route = "master: not set, and the host namespace has no default route to take it from";
    refused_for_a_new_pod(&TestNs::new(), &c, no_route);
}

#[test]
fn a_missing_master_or_too_large_mtu_is_refused_by_name() {
    let Some((node, pod, r, t)) = stacked::pod_on_uplink(is_root(), UPLINK) else {
        return;
    };
    let c = conf(v4("10.44.0.5/24", "10.44.0.1"), json!({}));
    let e = stacked::unknown_master_and_large_mtu("macvlan", &node, &r, &t, c, 1501);
    assert!(
        e.details.starts_with(
            "mtu: 1501 is out of range: must be 0 (the default) or 68 to the master's MTU (1500)"
        ),
        "{e}"
    );
    assert_nothing_made(&pod, &r);
}

#[test]
fn every_mode_reaches_the_kernel() {
    if !is_root() {
        return;
    }
    let node = node_with_uplink(UPLINK);
    let modes = ["bridge", "private", "vepa", "passthru", "source"];
    stacked::every_mode("macvlan", &node, &modes, |mode| {
        conf(v4("10.45.0.5/24", "10.45.0.1"), json!({"mode": mode}))
    });
    let expected = "bridge, private, vepa, passthru or source";
    stacked::unknown_mode("macvlan", conf, "passthrough", expected);
}

#[test]
fn an_existing_container_interface_is_an_error_and_nothing_is_left() {
    let Some((node, pod, r, t)) = stacked::pod_on_uplink(is_root(), UPLINK) else {
        return;
    };
    let c = conf(v4("10.46.0.5/24", "10.46.0.1"), json!({}));
    stacked::ifname_taken("macvlan", &node, &r, &pod, &t, &c);
    // IPAM runs only once the link exists.
    assert_eq!(r.commands(), []);
}

#[test]
fn failures_half_way_leave_nothing_behind() {
    if !is_root() {
        return;
    }
    let c = conf(v4("10.47.0.5/24", "10.47.0.1"), json!({}));
    stacked::failures_half_way_leave_nothing("macvlan", &node_with_uplink(UPLINK), &c);
}

#[test]
fn master_inside_the_container() {
    let Some((node, pod, r, t)) = stacked::pod_with_master(is_root()) else {
        return;
    };
    let c = conf(
        v4("10.48.0.5/24", "10.48.0.1"),
        json!({"master": "m0", "linkInContainer": true}),
    );
    add(&node, &r, "macvlan", &t, &c).unwrap();
    let l = link(&pod, "eth0").unwrap();
    assert_eq!(l["link"], "m0", "{l}");
    assert_eq!(link_names(&node), ["lo"]);
    // A master that is only in the host is not found in the container.
    let c = conf(
        v4("10.48.0.6/24", "10.48.0.1"),
        json!({"linkInContainer": true}),
    );
    let not_found = "master: interface \"up0\" not found in the container namespace";
    refused_for_a_new_pod(&node_with_uplink(UPLINK), &c, not_found);
}

#[test]
fn layer2_only_without_ipam() {
    let Some((node, pod, r, t)) = stacked::pod_on_uplink(is_root(), UPLINK) else {
        return;
    };
    let c = json!({"cniVersion": "1.1.0", "name": "mv", "type": "macvlan", "master": "up0"});
    let res = add(&node, &r, "macvlan", &t, &c).unwrap();
    assert!(res.ips.is_empty());
    assert_eq!(res.interfaces.len(), 1);
    assert!(has_flag(&link(&pod, "eth0").unwrap(), "UP"));
    assert!(r.commands().is_empty());
}

#[test]
fn del_is_idempotent_and_tolerates_a_gone_namespace() {
    let Some((node, pod, r, t)) = stacked::pod_on_uplink(is_root(), UPLINK) else {
        return;
    };
    let c = conf(v4("10.49.0.5/24", "10.49.0.1"), json!({}));
    // A master that no longer exists does not matter to DEL.
    stacked::dels_after_add("macvlan", &node, &r, (&pod, &t), &c);
    assert_eq!(r.commands(), add_then_dels(5));
}

#[test]
fn a_pod_interface_named_like_a_node_link() {
    let Some((node, pod, r, _)) = stacked::pod_on_uplink(is_root(), UPLINK) else {
        return;
    };
    let c = conf(v4("10.48.0.5/24", "10.48.0.1"), json!({}));
    stacked::named_like_a_node_link("macvlan", &node, &r, &pod, &c);
}

#[test]
fn check_accepts_the_attachment_and_finds_drift() {
    let Some((node, pod, r, t)) = stacked::pod_on_uplink(is_root(), UPLINK) else {
        return;
    };
    let c = conf(v4("10.50.0.5/24", "10.50.0.1"), json!({"mode": "private"}));
    let res = add(&node, &r, "macvlan", &t, &c).unwrap();
    let with = with_prev(&c, &res);
    check(&node, &r, "macvlan", &t, &with).unwrap();
    stacked::mode_drift("macvlan", &node, &r, &t, &with, ("private", "vepa"));
    let mut other_master = with.clone();
    other_master["master"] = json!("up1x");
    let e = check(&node, &r, "macvlan", &t, &other_master).unwrap_err();
    assert_eq!(e.details, "master \"up1x\" not found in the host namespace");
    pod.ip(&["addr", "flush", "dev", "eth0"]);
    let e = check(&node, &r, "macvlan", &t, &with).unwrap_err();
    assert!(
        e.details.starts_with("address 10.50.0.5/24 is not on eth0"),
        "{e}"
    );
}

#[test]
fn bad_configurations_are_refused_by_validate() {
    let t = Target::nowhere("c1");
    for (extra, starts) in [
        (json!({"mtu": -5}), "mtu: -5 is out of range"),
        (json!({"mtu": 1500.5}), "mtu: invalid type: floating point"),
        (json!({"master": 3}), "master: invalid type: integer"),
        (json!({"master": "a b"}), "master: \"a b\" must not contain"),
        (json!({"mac": "not-a-mac"}), "mac: invalid MAC address"),
        (
            json!({"linkInContainer": "yes"}),
            "linkInContainer: invalid type: string",
        ),
    ] {
        let e = validate("macvlan", &t, &conf(json!([]), extra.clone())).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidConfig, "{extra}");
        assert!(e.details.starts_with(starts), "{extra}: {e}");
    }
}
