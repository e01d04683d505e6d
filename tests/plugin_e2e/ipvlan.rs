//! An ipvlan secondary network in each mode (l2, l3, l3s) through the
//! plexus binary, with CHECK (cni-SPEC §2): the build hosts' kernels have no
//! ipvlan, so these run in vm-tests/.

use plexus_testkit::Feature;

use super::*;

/// Two pods get a secondary ipvlan network in `mode` through the plexus
/// binary (multi-net-spec §4.1.2.1: selected by annotation), reach each other
/// over it, pass CHECK, fail CHECK once an address is lost (cni-SPEC §2
/// CHECK), and DEL (twice, the second without CNI_NETNS) leaves nothing.
/// The build hosts' kernels have no ipvlan: this runs in vm-tests/.
fn two_pods_on_an_ipvlan_network(mode: &str) {
    let Some(w) =
        node_with_pods_requiring(&[Feature::Root, Feature::Ipvlan], &format!("ipv{mode}"))
    else {
        return;
    };
    let (tmp, node, pods) = (w.tmp.path(), w.node.as_str(), &w.pods);
    let ipvnet = json!({"cniVersion": "1.0.0", "name": "ipvnet", "type": "ipvlan",
        "master": "uplink0", "mode": mode, "ipam": host_local(tmp, "10.30.0.0/24", "ipv")});
    let conf = plexus_conf(tmp, &ipvnet);

    let mut results = Vec::new();
    let mut net1_ips = Vec::new();
    for (i, pod_ns) in pods.iter().enumerate() {
        let out = pod_call(node, "ADD", i, Some(pod_ns), &conf);
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
    assert_reaches(mode, &pods[0], &net1_ips[1]);
    assert_reaches(mode, &pods[1], &net1_ips[0]);

    // CHECK, as a runtime sends it: the config with the ADD's result.
    let check = |i: usize| {
        let mut c: Value = serde_json::from_str(&conf).unwrap();
        c["prevResult"] = results[i].clone();
        pod_call(node, "CHECK", i, Some(&pods[i]), &c.to_string())
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

    del_twice(node, pods, &conf);
    let node_links: Value = serde_json::from_str(&ip(node, &["-d", "-j", "link", "show"])).unwrap();
    assert!(
        node_links
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["linkinfo"]["info_kind"] != "ipvlan"),
        "no ipvlan left in the node: {node_links}"
    );
    assert_nothing_left(tmp);
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
