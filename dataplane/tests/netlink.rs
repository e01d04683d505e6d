//! Netlink operations against the real kernel, in throw-away namespaces: a
//! "node" namespace stands in for the host, a "pod" namespace for a container.
//! Results are checked twice: with our own list functions and with `ip -j`.
mod common;
use common::ifname;

use std::net::IpAddr;

use common::{is_root, root_namespaces, root_ns, veth_up, TestNs};
use ipnetwork::IpNetwork;
use plexus_cni::names::IfName;
use plexus_dataplane::netlink::{
    AddressOptions, BridgePortOptions, BridgeSpec, BridgeVlan, IpFamily, Link, LinkKind,
    LinkUpdate, MacvlanMode, MacvlanSpec, Master, NeighbourState, Route, RouteProtocol, Scope,
    VethSpec, RT_TABLE_MAIN,
};
use plexus_dataplane::{Errno, Error, MacAddr, Netlink};
use serde_json::Value;

struct NodeAndPod {
    node: TestNs,
    pod: TestNs,
    node_nl: Netlink,
    pod_nl: Netlink,
}

/// A node and a pod namespace with their handles, or `None` (the test
/// skipped) without root.
fn node_and_pod() -> Option<NodeAndPod> {
    let [(node, node_nl), (pod, pod_nl)] = root_namespaces()?;
    Some(NodeAndPod {
        node,
        pod,
        node_nl,
        pod_nl,
    })
}

fn mac(s: &str) -> MacAddr {
    s.parse().unwrap()
}

fn net(s: &str) -> IpNetwork {
    s.parse().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// `ip -d -j link show NAME` in `ns`, as one JSON object.
fn ip_link(ns: &TestNs, name: &str) -> Value {
    let mut v = ns.ip_json(&["-d", "link", "show", "dev", name]);
    assert_eq!(v.len(), 1, "{v:?}");
    v.remove(0)
}

/// What `update_link` sets on a link, as read back: (name, mtu, mac,
/// promisc, allmulti, txqueuelen, up).
fn settings(l: &Link) -> (&str, u32, Option<MacAddr>, bool, bool, u32, bool) {
    (
        l.name.as_str(),
        l.mtu,
        l.mac,
        l.promisc,
        l.allmulti,
        l.txqueuelen,
        l.up,
    )
}

/// A pod `eth0` (peer `host` in the node), up, with 10.1.2.3/24: its index.
fn eth0_with_address(t: &NodeAndPod, host: &str) -> u32 {
    let (_, eth0) = veth_up(&t.node_nl, &t.pod, &t.pod_nl, host, "eth0");
    t.pod_nl
        .add_address(eth0, net("10.1.2.3/24"), AddressOptions::default())
        .unwrap();
    eth0
}

fn port_options(hairpin: Option<bool>, isolated: Option<bool>) -> BridgePortOptions {
    BridgePortOptions { hairpin, isolated }
}

fn has_flag(link: &Value, flag: &str) -> bool {
    link["flags"].as_array().unwrap().iter().any(|f| f == flag)
}

#[test]
fn veth_peer_is_created_directly_in_the_other_namespace() {
    let Some(t) = node_and_pod() else { return };
    let host = t
        .node_nl
        .create_veth(&VethSpec {
            peer_netns: Some(&t.pod.ns),
            mtu: Some(1400),
            mac: Some(mac("0a:58:00:00:00:01")),
            peer_mac: Some(mac("0a:58:00:00:00:02")),
            up: true,
            ..VethSpec::new(ifname("vethpx0"), ifname("eth0"))
        })
        .unwrap();
    // Local end, as returned and as re-read.
    assert_eq!(host.name, "vethpx0");
    assert_eq!(host.kind, Some(LinkKind::Veth));
    assert_eq!(host.mtu, 1400);
    assert_eq!(host.mac, Some(mac("0a:58:00:00:00:01")));
    assert!(host.up);
    assert!(
        host.parent_netnsid.is_some(),
        "peer lives in another namespace"
    );
    assert_eq!(t.node_nl.link_by_index(host.index).unwrap().unwrap(), host);
    // The peer exists only in the pod namespace, under its final name.
    assert!(t.node_nl.link_by_name(&ifname("eth0")).unwrap().is_none());
    assert!(t.pod_nl.link_by_name(&ifname("vethpx0")).unwrap().is_none());
    let peer = t.pod_nl.link_by_name(&ifname("eth0")).unwrap().unwrap();
    assert_eq!(peer.kind, Some(LinkKind::Veth));
    assert_eq!(peer.mtu, 1400);
    assert_eq!(peer.mac, Some(mac("0a:58:00:00:00:02")));
    assert_eq!(
        peer.parent,
        Some(host.index),
        "IFLA_LINK names the host end"
    );
    assert!(
        !peer.up,
        "the peer comes up through a handle in its namespace"
    );
    t.pod_nl.set_up(peer.index).unwrap();
    let peer = t.pod_nl.link_by_index(peer.index).unwrap().unwrap();
    assert!(peer.up && peer.lower_up, "{peer:?}");
    // Same facts through iproute2.
    let j = ip_link(&t.node, "vethpx0");
    assert_eq!(j["mtu"], 1400);
    assert_eq!(j["address"], "0a:58:00:00:00:01");
    assert_eq!(j["linkinfo"]["info_kind"], "veth");
    assert!(has_flag(&j, "UP"));
    assert!(j["link_netnsid"].is_number(), "{j}");
    let j = ip_link(&t.pod, "eth0");
    assert_eq!(j["mtu"], 1400);
    assert_eq!(j["address"], "0a:58:00:00:00:02");
    assert!(has_flag(&j, "UP") && has_flag(&j, "LOWER_UP"), "{j}");
    // Creating it again: EEXIST, distinguishable.
    let e = t
        .node_nl
        .create_veth(&VethSpec::new(ifname("vethpx0"), ifname("eth9")))
        .unwrap_err();
    assert!(e.is_exists(), "{e}");
    assert!(e.to_string().contains("vethpx0"), "{e}");
    // A taken peer name in the target namespace is EEXIST too, and nothing
    // is left behind on our side.
    let e = t
        .node_nl
        .create_veth(&VethSpec {
            peer_netns: Some(&t.pod.ns),
            ..VethSpec::new(ifname("vethpx1"), ifname("eth0"))
        })
        .unwrap_err();
    assert!(e.is_exists(), "{e}");
    assert!(t
        .node_nl
        .link_by_name(&ifname("vethpx1"))
        .unwrap()
        .is_none());
}

#[test]
fn link_lookups_and_deletes_of_absent_links() {
    let Some(t) = root_ns() else { return };
    let nl = Netlink::open(&t.ns).unwrap();
    assert!(nl.link_by_name(&ifname("nosuchlink")).unwrap().is_none());
    assert!(nl.link_by_index(999_999).unwrap().is_none());
    assert!(nl.link_by_index(0).unwrap().is_none());
    assert!(!nl.del_link(999_999).unwrap());
    assert!(!nl.del_link_by_name(&ifname("nosuchlink")).unwrap());
    let lo = nl.link_by_name(&ifname("lo")).unwrap().unwrap();
    assert_eq!(lo.index, 1);
    assert_eq!(lo.kind, None);
    let v = nl
        .create_veth(&VethSpec::new(ifname("pxa"), ifname("pxb")))
        .unwrap();
    let names: Vec<String> = nl
        .links()
        .unwrap()
        .into_iter()
        .map(|l| l.name.into())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(names.contains(&"pxa".into()) && names.contains(&"pxb".into()));
    // Deleting one end removes the pair; deleting again is a no-op.
    assert!(nl.del_link(v.index).unwrap());
    assert!(!nl.del_link(v.index).unwrap());
    assert!(!nl.del_link_by_name(&ifname("pxb")).unwrap());
    assert_eq!(t.ip_json(&["link", "show"]).len(), 1);
    // Bad names never reach the kernel: no IfName holds one.
    assert!(IfName::new("a/b").is_err());
    assert!(IfName::new("x".repeat(16)).is_err());
}

#[test]
fn update_link_changes_every_attribute() {
    let Some(t) = node_and_pod() else { return };
    let v = t
        .node_nl
        .create_veth(&VethSpec::new(ifname("pxu0"), ifname("pxu1")))
        .unwrap();
    t.node_nl
        .update_link(
            v.index,
            &LinkUpdate {
                mtu: Some(1300),
                mac: Some(mac("02:00:00:00:aa:01")),
                promisc: Some(true),
                allmulti: Some(true),
                txqueuelen: Some(321),
                name: Some(ifname("pxrenamed")),
                ..Default::default()
            },
        )
        .unwrap();
    t.node_nl.set_up(v.index).unwrap();
    let l = t.node_nl.link_by_index(v.index).unwrap().unwrap();
    assert_eq!(
        settings(&l),
        (
            "pxrenamed",
            1300,
            Some(mac("02:00:00:00:aa:01")),
            true,
            true,
            321,
            true
        )
    );
    let j = ip_link(&t.node, "pxrenamed");
    assert_eq!(j["mtu"], 1300);
    assert_eq!(j["txqlen"], 321);
    assert_eq!(j["address"], "02:00:00:00:aa:01");
    assert!(
        has_flag(&j, "PROMISC") && has_flag(&j, "ALLMULTI") && has_flag(&j, "UP"),
        "{j}"
    );
    // Renaming to a taken name: EEXIST, and the error names the link.
    let e = t.node_nl.rename(v.index, &ifname("pxu1")).unwrap_err();
    assert!(e.is_exists(), "{e}");
    assert!(e.to_string().contains("pxrenamed"), "{e}");
    // Individual setters.
    t.node_nl.set_down(v.index).unwrap();
    t.node_nl.set_promisc(v.index, false).unwrap();
    t.node_nl.set_allmulti(v.index, false).unwrap();
    t.node_nl.set_mtu(v.index, 1280).unwrap();
    t.node_nl.set_txqueuelen(v.index, 500).unwrap();
    t.node_nl
        .set_mac(v.index, mac("02:00:00:00:aa:02"))
        .unwrap();
    t.node_nl.rename(v.index, &ifname("pxu0")).unwrap();
    let l = t.node_nl.link_by_index(v.index).unwrap().unwrap();
    assert_eq!(
        settings(&l),
        (
            "pxu0",
            1280,
            Some(mac("02:00:00:00:aa:02")),
            false,
            false,
            500,
            false
        )
    );
    // Move to the pod namespace by fd, then rename there.
    t.node_nl.move_to_netns(v.index, &t.pod.ns).unwrap();
    assert!(t.node_nl.link_by_name(&ifname("pxu0")).unwrap().is_none());
    let moved = t.pod_nl.link_by_name(&ifname("pxu0")).unwrap().unwrap();
    assert_eq!(moved.mac, Some(mac("02:00:00:00:aa:02")));
    t.pod_nl.rename(moved.index, &ifname("eth1")).unwrap();
    assert_eq!(ip_link(&t.pod, "eth1")["address"], "02:00:00:00:aa:02");
    // Changing an absent link: ENODEV.
    let e = t.node_nl.set_mtu(999_999, 1400).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::ENODEV), "{e}");
    assert!(e.is_not_found());
}

#[test]
fn bridge_enslave_hairpin_isolated() {
    let Some(t) = node_and_pod() else { return };
    let br = t
        .node_nl
        .create_bridge(&BridgeSpec {
            mtu: Some(1450),
            up: true,
            ..BridgeSpec::new(ifname("pxbr0"))
        })
        .unwrap();
    assert_eq!(br.kind, Some(LinkKind::Bridge));
    assert_eq!(br.mtu, 1450);
    assert!(br.up);
    assert_eq!(br.bridge.map(|b| b.vlan_filtering), Some(false));
    // Enslaved at creation (one request) ...
    let p1 = t
        .node_nl
        .create_veth(&VethSpec {
            peer_netns: Some(&t.pod.ns),
            master: Some(br.index),
            mtu: Some(1450),
            up: true,
            ..VethSpec::new(ifname("pxp1"), ifname("eth0"))
        })
        .unwrap();
    assert_eq!(p1.master, Some(br.index));
    // The returned link is the kernel's echo of the creation, sent before
    // the port joined: the port's settings are read by a lookup.
    let p1_now = t.node_nl.link_by_index(p1.index).unwrap().unwrap();
    assert_eq!(p1_now.master, Some(br.index));
    assert!(p1_now.bridge_port.is_some(), "{p1_now:?}");
    // ... and afterwards.
    let p2 = t
        .node_nl
        .create_veth(&VethSpec::new(ifname("pxp2"), ifname("pxp2b")))
        .unwrap();
    t.node_nl
        .set_master(p2.index, Master::Set(br.index))
        .unwrap();
    t.node_nl
        .set_bridge_port(p2.index, &port_options(Some(true), Some(true)))
        .unwrap();
    let p2l = t.node_nl.link_by_index(p2.index).unwrap().unwrap();
    assert_eq!(p2l.master, Some(br.index));
    let port = p2l.bridge_port.unwrap();
    assert!(port.hairpin && port.isolated, "{port:?}");
    let j = ip_link(&t.node, "pxp2");
    assert_eq!(j["master"], "pxbr0");
    assert_eq!(j["linkinfo"]["info_slave_kind"], "bridge");
    assert_eq!(j["linkinfo"]["info_slave_data"]["hairpin"], true);
    assert_eq!(j["linkinfo"]["info_slave_data"]["isolated"], true);
    // Only hairpin off; isolated untouched.
    t.node_nl
        .set_bridge_port(p2.index, &port_options(Some(false), None))
        .unwrap();
    let port = t
        .node_nl
        .link_by_index(p2.index)
        .unwrap()
        .unwrap()
        .bridge_port
        .unwrap();
    assert!(!port.hairpin && port.isolated, "{port:?}");
    // Release.
    t.node_nl.set_master(p2.index, Master::Release).unwrap();
    let p2l = t.node_nl.link_by_index(p2.index).unwrap().unwrap();
    assert_eq!(p2l.master, None);
    assert_eq!(p2l.bridge_port, None);
    assert!(ip_link(&t.node, "pxp2").get("master").is_none());
    // Bridge-port options on a link that is no bridge port.
    let e = t
        .node_nl
        .set_bridge_port(p2.index, &port_options(Some(true), None))
        .unwrap_err();
    assert!(e.errno().is_some(), "{e}");
    assert!(e.to_string().contains("pxp2"), "{e}");
}

/// Bridge `pxvbr`, up, with VLAN filtering.
fn vlan_filtering_bridge(nl: &Netlink) -> plexus_dataplane::Result<Link> {
    nl.create_bridge(&BridgeSpec {
        vlan_filtering: Some(true),
        up: true,
        ..BridgeSpec::new(ifname("pxvbr"))
    })
}

/// Without CONFIG_BRIDGE_VLAN_FILTERING (the build hosts' kernels) the
/// operations fail with a clean EOPNOTSUPP that names the operation and the
/// link.
#[test]
fn bridge_vlans_without_kernel_support_fail_cleanly() {
    if !plexus_testkit::require_absent(plexus_testkit::Feature::BridgeVlanFiltering) {
        return;
    }
    let t = TestNs::new();
    let nl = Netlink::open(&t.ns).unwrap();
    let e = vlan_filtering_bridge(&nl).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EOPNOTSUPP), "{e}");
    assert!(e.to_string().contains("create bridge pxvbr"), "{e}");
    let br = nl.create_bridge(&BridgeSpec::new(ifname("pxvbr"))).unwrap();
    let port = nl
        .create_veth(&VethSpec {
            master: Some(br.index),
            ..VethSpec::new(ifname("pxvp"), ifname("pxvq"))
        })
        .unwrap();
    let e = nl
        .bridge_vlan_add(port.index, BridgeVlan::native(100))
        .unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EOPNOTSUPP), "{e}");
    assert!(e.to_string().contains("pxvp"), "{e}");
    assert!(nl.link_by_index(port.index).unwrap().is_some());
    assert!(matches!(
        nl.bridge_vlan_add(port.index, BridgeVlan::tagged(4095)),
        Err(Error::Invalid { .. })
    ));
}

/// The whole add/list/del cycle of bridge VLANs, on ports and on the bridge
/// itself (needs CONFIG_BRIDGE_VLAN_FILTERING: vm-tests/).
#[test]
fn bridge_vlans_on_port_and_self() {
    use plexus_testkit::Feature;
    if !plexus_testkit::require(&[Feature::Root, Feature::BridgeVlanFiltering]) {
        return;
    }
    let t = TestNs::new();
    let nl = Netlink::open(&t.ns).unwrap();
    let br = vlan_filtering_bridge(&nl).unwrap();
    assert_eq!(br.bridge.map(|b| b.vlan_filtering), Some(true));
    let port = nl
        .create_veth(&VethSpec {
            master: Some(br.index),
            up: true,
            ..VethSpec::new(ifname("pxvp"), ifname("pxvq"))
        })
        .unwrap();
    nl.bridge_vlan_add(port.index, BridgeVlan::native(100))
        .unwrap();
    nl.bridge_vlan_add(port.index, BridgeVlan::tagged(200))
        .unwrap();
    nl.bridge_self_vlan_add(br.index, BridgeVlan::tagged(100))
        .unwrap();
    let vlans = nl.bridge_vlans(port.index).unwrap();
    assert!(vlans.contains(&BridgeVlan::native(100)), "{vlans:?}");
    assert!(vlans.contains(&BridgeVlan::tagged(200)), "{vlans:?}");
    // The default PVID 1 is no longer the native VLAN.
    assert!(vlans.iter().all(|v| v.vid == 100 || !v.pvid), "{vlans:?}");
    assert!(nl
        .bridge_vlans(br.index)
        .unwrap()
        .iter()
        .any(|v| v.vid == 100));
    // iproute2's view.
    let out = common::run(
        "bridge",
        &["-n", &t.name, "-j", "vlan", "show", "dev", "pxvp"],
    );
    let j: Value = serde_json::from_str(&out).unwrap();
    let entries = j[0]["vlans"].as_array().unwrap();
    let v100 = entries.iter().find(|v| v["vlan"] == 100).unwrap();
    let flags: Vec<&str> = v100["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(
        flags.contains(&"PVID") && flags.contains(&"Egress Untagged"),
        "{flags:?}"
    );
    assert!(entries.iter().any(|v| v["vlan"] == 200));
    // Delete: true, then false; the port itself survives (AF_BRIDGE DELLINK).
    assert!(nl.bridge_vlan_del(port.index, 200).unwrap());
    assert!(!nl.bridge_vlan_del(port.index, 200).unwrap());
    assert!(nl.bridge_self_vlan_del(br.index, 100).unwrap());
    assert!(!nl
        .bridge_vlans(port.index)
        .unwrap()
        .iter()
        .any(|v| v.vid == 200));
    assert!(nl.link_by_index(port.index).unwrap().is_some());
}

#[test]
fn macvlan_in_every_mode_created_in_the_pod() {
    let Some(t) = node_and_pod() else { return };
    // The master: one end of a veth inside the node namespace; its peer sits
    // in a third namespace so the master has carrier.
    let wire = TestNs::new();
    let wire_nl = Netlink::open(&wire.ns).unwrap();
    let (master, _) = veth_up(&t.node_nl, &wire, &wire_nl, "ens0", "wire0");
    for (i, &mode) in MacvlanMode::ALL.iter().enumerate() {
        let name = format!("net{i}");
        let mac_addr = mac(&format!("02:00:00:00:0b:{i:02x}"));
        let created = t
            .node_nl
            .create_macvlan(&MacvlanSpec {
                netns: Some(&t.pod.ns),
                mtu: Some(1400),
                mac: Some(mac_addr),
                up: true,
                ..MacvlanSpec::new(ifname(&name), master, mode)
            })
            .unwrap_or_else(|e| panic!("mode {mode}: {e}"));
        assert!(created.is_none(), "created in another namespace");
        assert!(t.node_nl.link_by_name(&ifname(&name)).unwrap().is_none());
        let l = t.pod_nl.link_by_name(&ifname(&name)).unwrap().unwrap();
        assert_eq!(l.kind, Some(LinkKind::Macvlan));
        assert_eq!(l.macvlan_mode, Some(mode));
        assert_eq!(l.mtu, 1400);
        assert!(l.up);
        let j = ip_link(&t.pod, &name);
        assert_eq!(j["linkinfo"]["info_kind"], "macvlan");
        assert_eq!(j["linkinfo"]["info_data"]["mode"], mode.as_str());
        // passthru takes over the master's MAC; the others keep ours.
        if mode == MacvlanMode::Passthru {
            let master_mac = t.node_nl.link_by_index(master).unwrap().unwrap().mac;
            assert_eq!(l.mac, master_mac);
        } else {
            assert_eq!(l.mac, Some(mac_addr));
            assert_eq!(j["address"], mac_addr.to_string());
        }
        // Only one passthru per master, so delete before the next mode.
        assert!(t.pod_nl.del_link(l.index).unwrap());
    }
    // Created in the master's own namespace: returned directly.
    let local = t
        .node_nl
        .create_macvlan(&MacvlanSpec::new(
            ifname("mvlocal"),
            master,
            MacvlanMode::Bridge,
        ))
        .unwrap()
        .unwrap();
    assert_eq!(local.parent, Some(master));
    assert_eq!(local.macvlan_mode, Some(MacvlanMode::Bridge));
}

#[test]
fn missing_master_errors() {
    let Some(t) = node_and_pod() else { return };
    let e = t
        .node_nl
        .create_macvlan(&MacvlanSpec {
            netns: Some(&t.pod.ns),
            ..MacvlanSpec::new(ifname("net1"), 999_999, MacvlanMode::Bridge)
        })
        .unwrap_err();
    assert_eq!(e.errno(), Some(Errno::ENODEV), "{e}");
    assert!(e.is_not_found());
    let text = e.to_string();
    assert!(text.starts_with("create macvlan net1"), "{text}");
    assert!(text.contains("999999"), "{text}");
    assert!(t.pod_nl.link_by_name(&ifname("net1")).unwrap().is_none());
    // A veth whose master doesn't exist is not created at all.
    let e = t
        .node_nl
        .create_veth(&VethSpec {
            master: Some(999_999),
            peer_netns: Some(&t.pod.ns),
            ..VethSpec::new(ifname("pxm0"), ifname("eth0"))
        })
        .unwrap_err();
    assert!(matches!(e, Error::Kernel { .. }), "{e}");
    assert!(t.node_nl.link_by_name(&ifname("pxm0")).unwrap().is_none());
    assert!(t.pod_nl.link_by_name(&ifname("eth0")).unwrap().is_none());
    // Enslaving to something that is not a bridge is refused by the kernel.
    let a = t
        .node_nl
        .create_veth(&VethSpec::new(ifname("pxm1"), ifname("pxm2")))
        .unwrap();
    let b = t.node_nl.link_by_name(&ifname("pxm2")).unwrap().unwrap();
    let e = t
        .node_nl
        .set_master(a.index, Master::Set(b.index))
        .unwrap_err();
    assert!(e.errno().is_some(), "{e}");
    assert!(e.to_string().contains("pxm1"), "{e}");
}

#[test]
fn addresses_v4_and_v6() {
    let Some(t) = node_and_pod() else { return };
    let eth0 = eth0_with_address(&t, "pxa0");
    t.pod_nl
        .add_address(eth0, net("fd00::5/64"), AddressOptions { nodad: true })
        .unwrap();
    let addrs = t.pod_nl.addresses(eth0).unwrap();
    let v4 = addrs.iter().find(|a| a.addr == net("10.1.2.3/24")).unwrap();
    assert_eq!(v4.scope, Scope::Universe);
    assert!(v4.permanent);
    let v6 = addrs.iter().find(|a| a.addr == net("fd00::5/64")).unwrap();
    assert!(v6.nodad && !v6.tentative, "{v6:?}");
    // iproute2's view.
    let j = t.pod.ip_json(&["addr", "show", "dev", "eth0"]);
    let info = j[0]["addr_info"].as_array().unwrap();
    let jv4 = info.iter().find(|a| a["local"] == "10.1.2.3").unwrap();
    assert_eq!(jv4["prefixlen"], 24);
    assert_eq!(jv4["broadcast"], "10.1.2.255");
    let jv6 = info.iter().find(|a| a["local"] == "fd00::5").unwrap();
    assert_eq!(jv6["prefixlen"], 64);
    assert_eq!(jv6["nodad"], true);
    // Duplicate: EEXIST.
    let e = t
        .pod_nl
        .add_address(eth0, net("10.1.2.3/24"), AddressOptions::default())
        .unwrap_err();
    assert!(e.is_exists(), "{e}");
    assert!(
        e.to_string().contains("10.1.2.3/24") && e.to_string().contains("eth0"),
        "{e}"
    );
    // Delete, idempotently.
    assert!(t.pod_nl.del_address(eth0, net("10.1.2.3/24")).unwrap());
    assert!(!t.pod_nl.del_address(eth0, net("10.1.2.3/24")).unwrap());
    assert!(t.pod_nl.del_address(eth0, net("fd00::5/64")).unwrap());
    assert!(!t.pod_nl.del_address(eth0, net("fd00::5/64")).unwrap());
    let left = t.pod_nl.addresses(eth0).unwrap();
    assert!(
        left.iter()
            .all(|a| matches!(a.addr.ip(), IpAddr::V6(v6) if v6.segments()[0] == 0xfe80)),
        "{left:?}"
    );
    assert!(t
        .pod
        .ip_json(&["-4", "addr", "show", "dev", "eth0"])
        .is_empty());
    // Address on an absent link.
    let e = t
        .pod_nl
        .add_address(999_999, net("10.9.9.9/32"), AddressOptions::default())
        .unwrap_err();
    assert_eq!(e.errno(), Some(Errno::ENODEV), "{e}");
}

#[test]
fn routes_v4_and_v6() {
    let Some(t) = node_and_pod() else { return };
    let (_, eth0) = veth_up(&t.node_nl, &t.pod, &t.pod_nl, "pxr0", "eth0");
    let nl = &t.pod_nl;
    nl.add_address(eth0, net("10.1.2.3/24"), AddressOptions::default())
        .unwrap();
    nl.add_address(eth0, net("fd00::5/64"), AddressOptions { nodad: true })
        .unwrap();
    let gw4 = ip("10.1.2.1");
    let gw6 = ip("fd00::1");
    let routes = [
        Route::new(net("10.20.0.0/16"))
            .via(gw4)
            .dev(eth0)
            .metric(100)
            .mtu(1300)
            .advmss(1200),
        Route::new(net("192.168.5.7/24")).dev(eth0), // host bits are cleared
        Route::default_via(gw4).table(100),
        Route::default_via(gw4).dev(eth0),
        Route::new(net("fd10::/64")).via(gw6).dev(eth0).metric(50),
        Route::default_via(gw6).dev(eth0).mtu(1280),
    ];
    for r in &routes {
        nl.add_route(r).unwrap_or_else(|e| panic!("{r:?}: {e}"));
    }
    let e = nl.add_route(&routes[0]).unwrap_err();
    assert!(e.is_exists(), "{e}");
    assert!(e.to_string().contains("10.20.0.0/16"), "{e}");

    let v4 = nl.routes(IpFamily::V4, None).unwrap();
    let find = |rs: &[Route], dst: &str, table: u32| -> Route {
        rs.iter()
            .find(|r| r.dst == net(dst) && r.table == table)
            .unwrap_or_else(|| panic!("{dst} table {table} missing in {rs:#?}"))
            .clone()
    };
    let r = find(&v4, "10.20.0.0/16", RT_TABLE_MAIN);
    assert_eq!(
        (r.gateway, r.oif, r.metric, r.mtu, r.advmss),
        (Some(gw4), Some(eth0), Some(100), Some(1300), Some(1200))
    );
    assert_eq!(r.protocol, RouteProtocol::Boot);
    assert_eq!(r.scope, Some(Scope::Universe));
    let r = find(&v4, "192.168.5.0/24", RT_TABLE_MAIN);
    assert_eq!((r.gateway, r.scope), (None, Some(Scope::Link)));
    let r = find(&v4, "0.0.0.0/0", 100);
    assert_eq!(r.gateway, Some(gw4));
    assert!(r.is_default());
    assert_eq!(find(&v4, "0.0.0.0/0", RT_TABLE_MAIN).gateway, Some(gw4));
    let prefix = find(&v4, "10.1.2.0/24", RT_TABLE_MAIN);
    assert_eq!(prefix.protocol, RouteProtocol::Kernel);
    assert_eq!(nl.routes(IpFamily::V4, Some(100)).unwrap().len(), 1);
    let v6 = nl.routes(IpFamily::V6, Some(RT_TABLE_MAIN)).unwrap();
    let r = find(&v6, "fd10::/64", RT_TABLE_MAIN);
    assert_eq!((r.gateway, r.metric), (Some(gw6), Some(50)));
    let r = find(&v6, "::/0", RT_TABLE_MAIN);
    assert_eq!(
        (r.gateway, r.mtu, r.metric),
        (Some(gw6), Some(1280), Some(1024))
    );

    // iproute2's view.
    let j4 = t.pod.ip_json(&["-4", "route", "show", "table", "all"]);
    let jfind = |j: &[Value], dst: &str, table: Option<&str>| -> Value {
        j.iter()
            .find(|r| r["dst"] == dst && r.get("table").and_then(|t| t.as_str()) == table)
            .unwrap_or_else(|| panic!("{dst} missing in {j:#?}"))
            .clone()
    };
    let r = jfind(&j4, "10.20.0.0/16", None);
    assert_eq!(r["gateway"], "10.1.2.1");
    assert_eq!(r["dev"], "eth0");
    assert_eq!(r["metric"], 100);
    assert_eq!(r["metrics"][0]["mtu"], 1300);
    assert_eq!(r["metrics"][0]["advmss"], 1200);
    assert_eq!(jfind(&j4, "192.168.5.0/24", None)["scope"], "link");
    assert_eq!(jfind(&j4, "default", Some("100"))["gateway"], "10.1.2.1");
    assert_eq!(jfind(&j4, "default", None)["gateway"], "10.1.2.1");
    let j6 = t.pod.ip_json(&["-6", "route", "show", "table", "all"]);
    let r = jfind(&j6, "fd10::/64", None);
    assert_eq!(
        (r["gateway"].as_str(), r["metric"].as_u64()),
        (Some("fd00::1"), Some(50))
    );
    let r = jfind(&j6, "default", None);
    assert_eq!(r["gateway"], "fd00::1");
    assert_eq!(r["metrics"][0]["mtu"], 1280);

    // Delete each route, then again: Ok(false).
    for r in &routes {
        assert!(nl.del_route(r).unwrap(), "{r:?}");
        assert!(!nl.del_route(r).unwrap(), "{r:?}");
    }
    assert!(nl.routes(IpFamily::V4, Some(100)).unwrap().is_empty());
    let v4: Vec<_> = nl.routes(IpFamily::V4, Some(RT_TABLE_MAIN)).unwrap();
    assert_eq!(v4.len(), 1, "only the prefix route is left: {v4:#?}");
    // replace_route is idempotent.
    let r = Route::new(net("10.30.0.0/16")).via(gw4).metric(5);
    nl.replace_route(&r).unwrap();
    nl.replace_route(&r.clone().mtu(1400)).unwrap();
    let got = find(
        &nl.routes(IpFamily::V4, None).unwrap(),
        "10.30.0.0/16",
        RT_TABLE_MAIN,
    );
    assert_eq!(got.mtu, Some(1400));
    // Unreachable gateway: the kernel's answer, with its explanation.
    let e = nl
        .add_route(&Route::new(net("10.40.0.0/16")).via(ip("192.0.2.1")))
        .unwrap_err();
    assert!(matches!(e, Error::Kernel { .. }), "{e}");
    assert!(e.to_string().contains("10.40.0.0/16 via 192.0.2.1"), "{e}");
}

#[test]
fn neighbours_of_a_link() {
    let Some(t) = node_and_pod() else { return };
    let eth0 = eth0_with_address(&t, "pxn0");
    // `ip [-6] neigh add IP lladdr MAC dev eth0 nud NUD` in the pod.
    for (family, ip, mac, nud) in [
        ("-4", "10.1.2.9", "02:00:00:00:00:09", "permanent"),
        ("-6", "fd00::9", "02:00:00:00:00:0a", "reachable"),
    ] {
        t.pod.ip(&[
            family, "neigh", "add", ip, "lladdr", mac, "dev", "eth0", "nud", nud,
        ]);
    }
    let n = t.pod_nl.neighbours(eth0).unwrap();
    let v4 = n.iter().find(|x| x.ip == ip("10.1.2.9")).unwrap();
    assert_eq!(v4.mac, Some(mac("02:00:00:00:00:09")));
    assert_eq!(v4.state, NeighbourState::Permanent);
    let v6 = n.iter().find(|x| x.ip == ip("fd00::9")).unwrap();
    assert_eq!(v6.mac, Some(mac("02:00:00:00:00:0a")));
    let j = t.pod.ip_json(&["neigh", "show", "dev", "eth0"]);
    assert!(j
        .iter()
        .any(|x| x["dst"] == "10.1.2.9" && x["lladdr"] == "02:00:00:00:00:09"));
    assert!(t.pod_nl.neighbours(999_999).unwrap().is_empty());
}

#[test]
fn handle_is_bound_to_the_namespace_it_was_created_in() {
    if !is_root() {
        return;
    }
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Netlink>();
    let t = TestNs::new();
    // Created by `current()` on the namespace's thread, then used from here:
    // it still talks to the test namespace.
    let nl = t.ns.run(Netlink::current).unwrap().unwrap();
    nl.create_veth(&VethSpec::new(ifname("pxc0"), ifname("pxc1")))
        .unwrap();
    assert_eq!(ip_link(&t, "pxc0")["ifname"], "pxc0");
    assert!(Netlink::current()
        .unwrap()
        .link_by_name(&ifname("pxc0"))
        .unwrap()
        .is_none());
    // `current()` here reads the root namespace (read-only) and agrees with ip.
    let root: Vec<u32> = Netlink::current()
        .unwrap()
        .links()
        .unwrap()
        .iter()
        .map(|l| l.index)
        .collect();
    let ip_root: Vec<u32> = common::ip_json(&["link", "show"])
        .iter()
        .map(|l| l["ifindex"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(root, ip_root);
}
