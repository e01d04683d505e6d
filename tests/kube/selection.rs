//! The pod's selection through the API server: every key of
//! multi-net-spec §4.1.2, namespace isolation (§7.4) refusing other
//! namespaces' networks before reading them, and Warning events for an
//! ignored annotation and a failed attachment.

use super::*;

#[test]
fn every_selection_key_of_4_1_2_through_the_api() {
    let Some(w) = world("keys") else { return };
    // A chain declaring every capability a §4.1.2 key needs: bridge (ips),
    // tuning (mac), bandwidth, and the reference portmap exec'd.
    let keynet = json!({"cniVersion": "1.0.0", "name": "keynet", "plugins": [
        {"type": "bridge", "bridge": "br-key", "capabilities": {"ips": true},
         "ipam": host_local(w.kube.tmp.path(), "10.30.0.0/24", "key")},
        {"type": "tuning", "capabilities": {"mac": true}},
        {"type": "bandwidth", "capabilities": {"bandwidth": true}},
        {"type": "portmap", "capabilities": {"portMappings": true}, "snat": false}]});
    w.kube.nad("keynet", &keynet);
    let selection = json!([{
        "name": "keynet",                                   // §4.1.2.1.1
        "namespace": w.kube.kube_ns,                             // §4.1.2.1.2
        "ips": ["10.30.0.77/24"],                           // §4.1.2.1.3
        "mac": "02:11:22:33:44:55",                         // §4.1.2.1.4
        "interface": "net5",                                // §4.1.2.1.5
        "cni-args": {"plexusProbe": "yes"},                 // §4.1.2.1.6
        "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}], // .7
        "bandwidth": {"ingressRate": 1000000, "ingressBurst": 100000,
                      "egressRate": 1000000, "egressBurst": 100000},              // .8
        "default-route": ["10.30.0.1"],                     // §4.1.2.1.9
    }]);
    let uid = w.pod("p1", Some(&selection.to_string()));
    assert_ok("ADD", &w.plexus("ADD", 0, true, "p1", &uid));

    let pod = &w.kube.pods[0];
    assert_eq!(link_names(pod), ["lo", "eth0", "net5"]);
    assert_eq!(addresses(pod, "net5"), ["10.30.0.77"]);
    let link: Value =
        serde_json::from_str(&ip(pod, &["-j", "link", "show", "dev", "net5"])).unwrap();
    assert_eq!(link[0]["address"], "02:11:22:33:44:55");
    // §4.1.2.1.9: the default route goes to net5, the cluster network's is
    // cleared.
    let defaults = ip(pod, &["route", "show", "default"]);
    assert_eq!(
        defaults.trim(),
        "default via 10.30.0.1 dev net5",
        "{defaults}"
    );
    // Port mapping and shaping happen on the node.
    assert!(in_node(&w.kube.node, &["iptables-save", "-t", "nat"]).contains("--dport 8080"));
    assert!(in_node(&w.kube.node, &["tc", "qdisc", "show"]).contains("tbf"));
    // cni-args reach the chain as args.cni (what plexus recorded it ran).
    let record = std::fs::read_to_string(w.kube.tmp.path().join("cache/c0@eth0.json")).unwrap();
    assert!(record.contains(r#""plexusProbe":"yes""#), "{record}");

    let status = w.network_status("p1");
    assert_eq!(status[1]["name"], format!("{}/keynet", w.kube.kube_ns));
    assert_eq!(status[1]["interface"], "net5");
    assert_eq!(status[1]["ips"], json!(["10.30.0.77"]));
    assert_eq!(status[1]["mac"], "02:11:22:33:44:55");
    assert_eq!(status[1]["default-route"], json!(["10.30.0.1"]));

    assert_ok("DEL", &w.plexus("DEL", 0, true, "p1", &uid));
    assert_eq!(link_names(pod), ["lo"]);
    assert!(!in_node(&w.kube.node, &["iptables-save", "-t", "nat"]).contains("--dport 8080"));
    assert_nothing_left(w.kube.tmp.path());
}

#[test]
fn namespace_isolation_refuses_networks_of_other_namespaces_before_reading_them() {
    let Some(w) = world("iso") else { return };
    let other = w.kube.api.namespace("pxk-iso-other");
    let macnet = macvlan_network(w.kube.tmp.path());
    w.kube.api.apply(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
         metadata: {{name: shared, namespace: {other}}}\nspec:\n  config: '{macnet}'\n"
    ));
    let uid = w.pod("p1", Some(&format!("{other}/shared")));
    let isolated = w.conf_with(json!({"namespaceIsolation": true}));
    let details = cni_details(&w.plexus_with("ADD", 0, true, "p1", &uid, &isolated), 101);
    assert!(
        details.contains(&format!(
            "pod {}/p1 may not use {other}/shared (namespaceIsolation",
            w.kube.kube_ns
        )) && details.contains("§7.4"),
        "{details}"
    );
    assert_eq!(link_names(&w.kube.pods[0]), ["lo"]);
    // Refused before the NAD was read.
    assert!(w
        .kube
        .api
        .audited()
        .iter()
        .all(|r| r.namespace != other || r.resource != "network-attachment-definitions"));
    assert_ok("DEL", &w.plexus_with("DEL", 0, true, "p1", &uid, &isolated));

    // globalNamespaces opens it.
    let global = w.conf_with(json!({"namespaceIsolation": true, "globalNamespaces": other}));
    assert_ok("ADD", &w.plexus_with("ADD", 0, true, "p1", &uid, &global));
    assert_eq!(link_names(&w.kube.pods[0]), ["lo", "eth0", "net1"]);
    assert_ok("DEL", &w.plexus_with("DEL", 0, true, "p1", &uid, &global));
    assert_nothing_left(w.kube.tmp.path());
}

#[test]
fn warning_events_for_an_ignored_annotation_and_a_failed_attachment() {
    let Some(w) = world("warn") else { return };
    // An annotation that does not parse: the spec's choice is to ignore it
    // and attach the default network only, and plexus says so on the pod.
    let uid = w.pod("p1", Some(r#"[{"name": 5}]"#));
    assert_ok("ADD", &w.plexus("ADD", 0, true, "p1", &uid));
    assert_eq!(link_names(&w.kube.pods[0]), ["lo", "eth0"]);
    let events = w.events("p1");
    assert!(
        events.iter().any(|(t, r, m)| t == "Warning"
            && r == "InvalidNetworkSelection"
            && m.contains("name")),
        "{events:?}"
    );
    assert_ok("DEL", &w.plexus("DEL", 0, true, "p1", &uid));

    // An attachment that fails: the ADD fails, the pod says why.
    let broken = json!({"cniVersion": "1.0.0", "name": "broken", "type": "macvlan",
        "master": "nosuchdev0", "ipam": host_local(w.kube.tmp.path(), "10.40.0.0/24", "broken")});
    w.kube.nad("broken", &broken);
    let uid2 = w.pod("p2", Some("broken"));
    let e = cni_error(&w.plexus("ADD", 1, true, "p2", &uid2));
    assert!(e["details"].as_str().unwrap().contains("nosuchdev0"), "{e}");
    let events = w.events("p2");
    assert!(
        events
            .iter()
            .any(|(t, r, m)| t == "Warning" && r == "AttachmentFailed" && m.contains("nosuchdev0")),
        "{events:?}"
    );
    assert_eq!(
        link_names(&w.kube.pods[1]),
        ["lo"],
        "a failed ADD undoes itself"
    );
    assert_ok("DEL", &w.plexus("DEL", 1, true, "p2", &uid2));
    assert_nothing_left(w.kube.tmp.path());
}

/// What `command` prints, run in the node namespace.
fn in_node(node: &str, command: &[&str]) -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", node])
        .args(command)
        .output()
        .unwrap();
    assert!(out.status.success(), "{command:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}
