//! A secondary attachment whose IPAM result carries a default route, added
//! to a pod whose cluster network already set one: every pod of a real
//! cluster, and the first NAD of Multus's quickstart (macvlan, host-local
//! with `routes: [{"dst": "0.0.0.0/0"}]` and a `gateway`). The reference
//! plugins add result routes with `netlink.RouteAddEcmp` (plugins'
//! `pkg/ipam.ConfigureIface`): no `NLM_F_EXCL`, so both default routes
//! coexist and the ADD succeeds. Every built-in driver configures its
//! interface through `common::configure_iface`; the drivers the host kernel
//! has are checked here (sriov and vdpa run the same code in the VM).
mod common;
mod drivers_support;

use common::TestNs;
use drivers_support::*;
use plexus_testkit::Feature;
use serde_json::{json, Value};

/// A pod as the cluster network left it: `eth0` addressed, up, and the
/// default routes of both families through it.
fn pod_with_cluster_defaults() -> TestNs {
    let pod = TestNs::new();
    pod.add_veth("eth0", "peer0");
    pod.ip(&["link", "set", "peer0", "up"]);
    pod.ip(&["link", "set", "eth0", "up"]);
    pod.ip(&["addr", "add", "10.88.0.5/16", "dev", "eth0"]);
    pod.ip(&["addr", "add", "fd88::5/64", "dev", "eth0", "nodad"]);
    pod.ip(&["route", "add", "default", "via", "10.88.0.1"]);
    pod.ip(&["-6", "route", "add", "default", "via", "fd88::1"]);
    pod
}

/// The node's uplink `up0` for macvlan and ipvlan.
fn node_with_uplink() -> TestNs {
    let node = TestNs::new();
    node.add_veth("up0", "up1");
    node.ip(&["link", "set", "up1", "up"]);
    node.ip(&["link", "set", "up0", "up"]);
    node
}

/// The quickstart's IPAM shape, in both families: an address with its
/// gateway and a default route naming no gateway (so it goes through the
/// address's).
fn quickstart_ipam() -> Value {
    json!({
        "type": IPAM,
        "addresses": [
            {"address": "192.168.1.200/24", "gateway": "192.168.1.1"},
            {"address": "fd01::200/64", "gateway": "fd01::1"},
        ],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
    })
}

fn attach_beside_cluster_default(plugin_type: &str, extra: Value) {
    let node = node_with_uplink();
    let pod = pod_with_cluster_defaults();
    let r = TestResolver::default();
    let t = Target::new("ctr-routes", &pod, "net1");
    let mut c = json!({
        "cniVersion": "1.0.0",
        "name": "quickstart",
        "type": plugin_type,
        "ipam": quickstart_ipam(),
    });
    c = with_keys(c, &extra);
    let res = add(&node, &r, plugin_type, &t, &c)
        .unwrap_or_else(|e| panic!("{plugin_type}: ADD beside the pod's default route: {e}"));
    let routes = result_json(&res, "1.0.0")["routes"].clone();
    assert_eq!(
        routes,
        json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]),
        "{plugin_type}"
    );
    // Both default routes of each family are in the pod: the cluster
    // network's is untouched, the attachment's sits beside it.
    let v4 = routes_of(&pod, false);
    assert!(
        v4.contains(&"default via 10.88.0.1 dev eth0".to_string()),
        "{plugin_type}: {v4:?}"
    );
    assert!(
        v4.contains(&"default via 192.168.1.1 dev net1".to_string()),
        "{plugin_type}: {v4:?}"
    );
    let v6 = routes_of(&pod, true);
    assert!(
        v6.iter()
            .any(|r| r.contains("fd88::1") && r.contains("eth0")),
        "{plugin_type}: {v6:?}"
    );
    assert!(
        v6.iter()
            .any(|r| r.contains("fd01::1") && r.contains("net1")),
        "{plugin_type}: {v6:?}"
    );

    del(&node, &r, plugin_type, &t, &c).unwrap();
    assert_eq!(
        routes_of(&pod, false),
        ["default via 10.88.0.1 dev eth0", "10.88.0.0/16 dev eth0"]
    );
}

/// `ip route` lines, a multipath IPv6 route split into its next hops.
fn routes_of(ns: &TestNs, v6: bool) -> Vec<String> {
    let args: &[&str] = if v6 {
        &["-6", "route", "show"]
    } else {
        &["route", "show"]
    };
    let mut out = Vec::new();
    for r in ns.ip_json(args) {
        let dst = r["dst"].as_str().unwrap_or("?").to_string();
        let hops = match r["nexthops"].as_array() {
            Some(hops) => hops.clone(),
            None => vec![r.clone()],
        };
        for h in hops {
            let mut s = dst.clone();
            if let Some(gw) = h["gateway"].as_str() {
                s.push_str(&format!(" via {gw}"));
            }
            s.push_str(&format!(" dev {}", h["dev"].as_str().unwrap_or("?")));
            out.push(s);
        }
    }
    out
}

#[test]
fn bridge_adds_its_default_route_beside_the_cluster_networks() {
    if !plexus_testkit::require(&[Feature::Root]) {
        return;
    }
    attach_beside_cluster_default("bridge", json!({"bridge": "br-rt"}));
}

#[test]
fn macvlan_adds_its_default_route_beside_the_cluster_networks() {
    if !plexus_testkit::require(&[Feature::Root]) {
        return;
    }
    attach_beside_cluster_default("macvlan", json!({"master": "up0", "mode": "bridge"}));
}

#[test]
fn ipvlan_adds_its_default_route_beside_the_cluster_networks() {
    if !plexus_testkit::require(&[Feature::Root, Feature::Ipvlan]) {
        return;
    }
    attach_beside_cluster_default("ipvlan", json!({"master": "up0"}));
}
