//! Dynamic networks (issue 26): the daemon reconciles a running pod's
//! secondary attachments with its selection annotation (multi-net-spec §4):
//! attach, detach, refusals and retries, `--dynamic-networks=false`, a
//! daemon killed mid-hot-plug, a DEL racing one, and the auxiliary chain's
//! interface name.

use super::*;

#[test]
fn annotating_a_running_pod_attaches_and_detaches_its_networks() {
    let Some((w, pod_ns, daemon)) = running_pod("hotplug", &[]) else {
        return;
    };
    assert_eq!(w.status_of("p1").len(), 2);

    // Added selection: attached as ADD names it (the next free netN).
    w.annotate("p1", "macnet@net1,macnet");
    within_30s("net2 attached", &daemon, || {
        sorted_links(&pod_ns) == ["eth0", "lo", "net1", "net2"] && w.status_of("p1").len() == 3
    });
    let ns_macnet = format!("{}/macnet", w.kube.kube_ns);
    assert_eq!(w.status_of("p1")[2], (ns_macnet.clone(), "net2".into()));
    assert_eq!(addresses(&pod_ns, "net2").len(), 1);
    assert_eq!(w.macnet_leases(), 2);
    within_30s("AddedInterface", &daemon, || {
        w.has_event("p1", "Normal", "AddedInterface", "Add net2 [")
    });

    // Removed selection: that attachment alone is DEL'd, its address released.
    w.annotate("p1", "macnet@net1");
    within_30s("net2 detached", &daemon, || {
        sorted_links(&pod_ns) == ["eth0", "lo", "net1"] && w.status_of("p1").len() == 2
    });
    assert_eq!(w.macnet_leases(), 1);
    within_30s("RemovedInterface", &daemon, || {
        w.has_event("p1", "Normal", "RemovedInterface", "net2")
    });

    // Quick flips end at the last value.
    for value in [
        "macnet@net1,macnet@net3",
        "macnet@net1",
        "macnet@net1,macnet@net4",
        "macnet@net1,macnet@net5",
    ] {
        w.annotate("p1", value);
    }
    within_30s("the last value", &daemon, || {
        sorted_links(&pod_ns) == ["eth0", "lo", "net1", "net5"] && w.status_of("p1").len() == 3
    });

    // An annotation that does not parse: a Warning, and the pod keeps its networks.
    w.annotate("p1", "[{\"name\": ");
    within_30s("InvalidNetworkSelection", &daemon, || {
        w.has_event("p1", "Warning", "InvalidNetworkSelection", "")
    });
    // default-route on a running pod: refused, with the reason.
    w.annotate(
        "p1",
        r#"[{"name": "macnet", "interface": "net1"}, {"name": "macnet", "interface": "net5", "default-route": ["10.20.0.1"]}]"#,
    );
    within_30s("NetworkChangeRefused", &daemon, || {
        w.has_event("p1", "Warning", "NetworkChangeRefused", "§4.1.2.1.9")
    });
    assert_eq!(sorted_links(&pod_ns), ["eth0", "lo", "net1", "net5"]);
    // A selection of a NAD that does not exist: AttachmentFailed, retried later.
    w.annotate("p1", "macnet@net1,macnet@net5,nosuch");
    within_30s("AttachmentFailed", &daemon, || {
        w.has_event("p1", "Warning", "AttachmentFailed", "nosuch")
    });
    // A chain that fails on the pod: undone (its address released), the
    // pod's other networks untouched, and the DEL owed kept in the record.
    let badnet = json!({"cniVersion": "1.0.0", "name": "badnet", "type": "macvlan",
        "master": "nosuch0", "ipam": host_local(w.kube.tmp.path(), "10.21.0.0/16", "bad")});
    w.kube.nad("badnet", &badnet);
    w.annotate("p1", "macnet@net1,macnet@net5,badnet@net6");
    within_30s("AttachmentFailed for badnet", &daemon, || {
        w.has_event("p1", "Warning", "AttachmentFailed", "badnet")
    });
    assert_eq!(sorted_links(&pod_ns), ["eth0", "lo", "net1", "net5"]);
    assert_eq!(w.status_of("p1").len(), 3);
    w.annotate("p1", "macnet@net1,macnet@net5,nosuch");
    // Retried with backoff (1 s, doubling), not in a loop.
    std::thread::sleep(Duration::from_secs(3));
    let tries = w.metric("plexus_hotplug_duration_seconds_count{result=\"error\"}");
    assert!((2.0..=6.0).contains(&tries), "{tries} tries");
    assert_eq!(sorted_links(&pod_ns), ["eth0", "lo", "net1", "net5"]);
    assert!(w.metric("plexus_hotplugs_total{operation=\"attach\",result=\"ok\"}") >= 2.0);
    assert!(w.metric("plexus_hotplugs_total{operation=\"detach\",result=\"ok\"}") >= 1.0);
    assert!(w.metric("plexus_hotplug_duration_seconds_count{result=\"ok\"}") >= 2.0);

    // The sandbox's DEL removes every attachment, hot-plugged or not.
    assert_ok("DEL", &w.call("DEL", "p1", &pod_ns, &w.conf));
    w.assert_nothing_left(&[pod_ns]);
    assert!(files_in(&w.kube.tmp.path().join("state/sandboxes")).is_empty());
}

#[test]
fn with_dynamic_networks_off_an_annotation_change_does_nothing() {
    let Some((w, pod_ns, _daemon)) = running_pod("nohotplug", &["--dynamic-networks=false"]) else {
        return;
    };
    w.annotate("p1", "macnet@net1,macnet");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(sorted_links(&pod_ns), ["eth0", "lo", "net1"]);
    assert_ok("DEL", &w.call("DEL", "p1", &pod_ns, &w.conf));
    w.assert_nothing_left(&[pod_ns]);
}

#[test]
fn a_daemon_killed_mid_hotplug_converges_and_a_del_racing_a_hotplug_leaks_nothing() {
    let Some((w, pod_ns, mut daemon)) = running_pod("hpkill", &[]) else {
        return;
    };

    // Killed while attaching eight networks: wherever it stopped, the
    // record says what is owed, and the next daemon's resync converges.
    let eight = (2..10)
        .map(|n| format!("macnet@net{n}"))
        .collect::<Vec<_>>()
        .join(",");
    w.annotate("p1", &format!("macnet@net1,{eight}"));
    within_30s("a hot-plug started", &daemon, || {
        link_names(&pod_ns).len() > 3
    });
    daemon.kill();
    eprintln!(
        "killed with {} of 11 links in the pod",
        link_names(&pod_ns).len()
    );
    let daemon = w.daemon();
    within_30s("converged after the restart", &daemon, || {
        sorted_links(&pod_ns).len() == 11 && w.status_of("p1").len() == 10
    });
    assert_eq!(w.macnet_leases(), 9);

    // The sandbox's DEL racing a hot-plug in progress: it waits for the
    // hot-plug, then DELs every attachment; nothing is left.
    w.annotate("p1", "macnet@net1");
    within_30s("detached", &daemon, || w.status_of("p1").len() == 2);
    assert_eq!(sorted_links(&pod_ns), ["eth0", "lo", "net1"]);
    w.annotate("p1", &format!("macnet@net1,{eight}"));
    within_30s("a hot-plug started", &daemon, || {
        link_names(&pod_ns).len() > 3
    });
    let links_at_del = link_names(&pod_ns).len();
    assert_ok("DEL", &w.call("DEL", "p1", &pod_ns, &w.conf));
    eprintln!("DEL sent with {links_at_del} of 11 links in the pod");
    // A hot-plug woken after the DEL finds no sandbox.
    std::thread::sleep(Duration::from_millis(500));
    w.assert_nothing_left(&[pod_ns]);
    assert_eq!(w.macnet_leases(), 0);
    assert!(files_in(&w.kube.tmp.path().join("state/sandboxes")).is_empty());
    drop(daemon);
}

#[test]
fn a_hot_plugged_selection_never_takes_the_auxiliary_chains_name() {
    // Multus's auxiliary chain (src/plan/auxiliary.rs) runs after the pod's
    // networks as `net<position>`: here net2, after eth0 and net1. A
    // selection added without `interface` gets the next name free of it.
    let Some(mut w) = world("hpaux") else {
        return;
    };
    vendor_chain(&w.kube.tmp.path().join("net.d"));
    w.conf = w.conf_with(json!({"auxiliaryCNIChainName": "vendor-chain"}));
    let pod_ns = w.pod_here("p1", "macnet@net1");
    let daemon = w.daemon();
    assert_ok("ADD", &w.call("ADD", "p1", &pod_ns, &w.conf));
    w.writes_delivered(&daemon);
    let record = std::fs::read_to_string(w.kube.tmp.path().join("cache/c-p1@eth0.json")).unwrap();
    assert!(record.contains("\"ifname\":\"net2\""), "{record}");

    w.annotate("p1", "macnet@net1,macnet");
    within_30s("attached as net3", &daemon, || {
        sorted_links(&pod_ns) == ["eth0", "lo", "net1", "net3"] && w.status_of("p1").len() == 3
    });
    let ns_macnet = format!("{}/macnet", w.kube.kube_ns);
    assert_eq!(w.status_of("p1")[2], (ns_macnet, "net3".into()));

    assert_ok("DEL", &w.call("DEL", "p1", &pod_ns, &w.conf));
    w.assert_nothing_left(&[pod_ns]);
    drop(daemon);
}
