//! A pod, or a bad call, cannot harm the node (issue 9): the node's own
//! namespace is never configured as a pod's, a DEL after a failed ADD keeps
//! what was in its way, and "lo" is no attachment's interface
//! (multi-net-spec §4.1.2.1.5).

use std::process::Command;

use plexus_dataplane::NetNs;

use super::*;

#[test]
fn the_nodes_own_namespace_is_never_configured_as_a_pod() {
    let Some(mut w) = node_with_pods("self") else {
        return;
    };
    let (tmp, node) = (w.tmp.path(), w.node.as_str());
    // The node's uplink has an address and the default route, as a node's eth0.
    ip(node, &["addr", "add", "192.0.2.10/24", "dev", "uplink0"]);
    ip(node, &["route", "add", "default", "via", "192.0.2.1"]);
    // A /run/netns name bound to the node's namespace, as `ip netns attach`
    // makes one.
    let alias = w.namespaces.add("self-alias");
    let alias_path = format!("/var/run/netns/{alias}");
    let _ = NetNs::delete_named(&alias);
    std::fs::write(&alias_path, "").unwrap();
    let bound = Command::new("mount")
        .args(["--bind", &format!("/var/run/netns/{node}"), &alias_path])
        .status()
        .unwrap();
    assert!(bound.success());

    let macnet = macvlan_network(tmp);
    let conf = plexus_conf(tmp, &macnet);
    let before = node_state(node);
    for netns in [
        "/proc/self/ns/net",
        "/proc/thread-self/ns/net",
        alias_path.as_str(),
    ] {
        for ifname in ["eth0", "uplink0"] {
            let out = demo_plexus_at(node, "ADD", "c0", netns, ifname, "p1", &conf);
            let e = cni_error(&out);
            assert_eq!(e["code"], 4, "{netns}: {e}");
            let details = e["details"].as_str().unwrap();
            assert!(
                details.starts_with("CNI_NETNS: ")
                    && details.contains("node's own network namespace"),
                "{netns}: {details}"
            );
            // DEL with the node's namespace removes nothing of the node.
            let out = demo_plexus_at(node, "DEL", "c0", netns, ifname, "p1", &conf);
            assert_ok("DEL", &out);
            assert_eq!(
                node_state(node),
                before,
                "{netns} {ifname}: the node changed"
            );
        }
    }
    assert_nothing_left(tmp);
}

#[test]
fn del_after_a_failed_add_leaves_the_device_that_was_in_its_way() {
    on_node_with_pods("taken", |tmp, node, pods| {
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
        // The pair's operstate settles after `up` (the kernel's linkwatch,
        // up to a second later on a busy machine): compared once it has.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let pod_before = loop {
            let state = node_state(pod);
            let settled = state
                .0
                .as_array()
                .unwrap()
                .iter()
                .all(|l| l[1] != "LOWERLAYERDOWN");
            if settled || std::time::Instant::now() > deadline {
                break state;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let macnet = macvlan_network(tmp);
        let conf = plexus_conf(tmp, &macnet);

        let out = plexus(node, "ADD", "c0", Some(pod), "p1", &conf);
        let e = cni_error(&out);
        assert_eq!(e["code"], 7, "{e}");
        assert!(
            e["details"].as_str().unwrap().contains("already exists"),
            "{e}"
        );
        // cni-SPEC §3: the runtime DELs after a failed ADD; twice, as
        // containerd may, the second time without CNI_NETNS.
        for netns in [Some(pod.as_str()), None] {
            assert_ok("DEL", &plexus(node, "DEL", "c0", netns, "p1", &conf));
            assert_eq!(
                node_state(pod),
                pod_before,
                "the pod's own eth0 was touched"
            );
        }
        let node_links = link_names(node);
        assert!(
            node_links.iter().all(|l| !l.starts_with("veth")),
            "host end left: {node_links:?}"
        );
    });
}

#[test]
fn lo_is_no_attachments_interface_and_a_failed_add_on_it_can_be_deleted() {
    on_node_with_pods("lo", |tmp, node, pods| {
        let macnet = macvlan_network(tmp);
        // multi-net-spec §4.1.2.1.5: "lo" is no valid name for an attachment's
        // interface, so the annotation is invalid and ignored: the pod gets the
        // cluster network only, and a warning.
        let conf =
            plexus_conf_selecting(tmp, &macnet, r#"[{"name": "macnet", "interface": "lo"}]"#);
        let out = plexus(node, "ADD", "c0", Some(&pods[0]), "p1", &conf);
        assert_ok("ADD", &out);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("\"lo\"") && stderr.contains("ignored"),
            "{stderr}"
        );
        assert_eq!(link_names(&pods[0]), ["lo", "eth0"]);
        assert_ok(
            "DEL",
            &plexus(node, "DEL", "c0", Some(&pods[0]), "p1", &conf),
        );

        // A runtime asking for CNI_IFNAME=lo: the ADD fails (the name is taken),
        // and every DEL after it succeeds, leaving the pod's loopback.
        let netns = format!("/var/run/netns/{}", pods[1]);
        let on_lo = |command| demo_plexus_at(node, command, "c1", &netns, "lo", "p2", &conf);
        assert_eq!(cni_error(&on_lo("ADD"))["code"], 7);
        for _ in 0..2 {
            assert_ok("DEL", &on_lo("DEL"));
        }
        assert_eq!(link_names(&pods[1]), ["lo"]);
    });
}
