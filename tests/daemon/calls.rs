//! CNI calls through the daemon's socket: a warm ADD's API requests (from
//! the pod and NAD caches, one network-status PATCH, multi-net-spec §5) and
//! metrics, the status outbox a killed daemon left, `--status-write sync`,
//! a pod the cache has not seen or of another node, the shim without a
//! daemon (`daemonFallback`), a failed DEL reported, and how the watches
//! list.

use super::*;

#[test]
fn a_warm_add_sends_no_get_and_one_patch() {
    let Some(mut w) = world("warm") else { return };
    let pod_ns = w.pod_here("p1", "macnet@net1,macnet@net2,macnet@net3");
    let daemon = w.daemon();
    // The watch delivers the pod (created before the daemon listed).
    let before = w.kube.requests().len();
    let out = w.call("ADD", "p1", &pod_ns, &w.conf);
    assert_ok("ADD through the daemon", &out);
    // The status write is queued in the outbox and delivered right after.
    w.writes_delivered(&daemon);
    assert_eq!(
        w.metric("plexus_status_writes_total{result=\"written\"}"),
        1.0
    );
    assert!(cluster_ip(&out).starts_with("10.10."));
    let mut links = link_names(&pod_ns);
    links.sort();
    assert_eq!(links, ["eth0", "lo", "net1", "net2", "net3"]);

    // From the API server's side: the pod and its 3 NADs came from the
    // caches; the status is one merge PATCH (multi-net-spec §5).
    let add = w.kube.requests()[before..].to_vec();
    assert_eq!(count(&add, "get", "pods", ""), 0, "{add:?}");
    assert_eq!(
        count(&add, "get", "network-attachment-definitions", ""),
        0,
        "{add:?}"
    );
    assert_eq!(count(&add, "patch", "pods", "status"), 1, "{add:?}");
    assert_eq!(count(&add, "update", "pods", "status"), 0, "{add:?}");
    let statuses = w.network_statuses();
    assert_eq!(statuses[0].1.as_array().unwrap().len(), 4, "{statuses:?}");

    // Metrics: per-attachment latency by driver, API requests, caches.
    assert!(
        w.metric("plexus_attachment_duration_seconds_count{command=\"ADD\",driver=\"macvlan\"}")
            >= 3.0
    );
    assert!(
        w.metric("plexus_attachment_duration_seconds_count{command=\"ADD\",driver=\"bridge\"}")
            >= 1.0
    );
    assert_eq!(
        w.metric("plexus_api_requests_total{resource=\"pods/status\",verb=\"patch\"}"),
        1.0
    );
    assert_eq!(
        w.metric("plexus_api_requests_total{resource=\"pods\",verb=\"get\"}"),
        0.0
    );
    assert!(w.metric("plexus_cache_objects{kind=\"pods\"}") >= 1.0);
    assert!(w.metric("plexus_cache_objects{kind=\"network-attachment-definitions\"}") >= 1.0);
    assert_eq!(
        w.metric("plexus_cni_calls_total{command=\"ADD\",result=\"ok\"}"),
        1.0
    );
    assert_eq!(w.http("/healthz").0, 200);

    let out = w.call("DEL", "p1", &pod_ns, &w.conf);
    assert_ok("DEL through the daemon", &out);
    assert_eq!(
        w.metric("plexus_cni_calls_total{command=\"DEL\",result=\"ok\"}"),
        1.0
    );
    w.assert_nothing_left(&[pod_ns]);
}

#[test]
fn writes_a_killed_daemon_left_queued_are_delivered_by_the_next_and_never_to_another_pod() {
    let Some(w) = world("outbox") else { return };
    w.pods(
        &["kept".into(), "recreated".into()],
        &w.kube.node.clone(),
        "macnet",
    );
    // What a daemon killed after answering its ADDs leaves in the outbox
    // (the file format of cluster::outbox::PendingStatus): a write for a
    // pod that is still there, one for a pod since re-created under its
    // name (another uid), one for a pod deleted, and a torn file.
    let status = |pod: &str| {
        json!([{"name": "podnet", "interface": "eth0", "ips": [format!("10.10.9.{}", pod.len())],
                "default": true}])
        .to_string()
    };
    let outbox = w.outbox();
    std::fs::create_dir_all(&outbox).unwrap();
    let queued = [
        ("kept", w.uid("kept")),
        (
            "recreated",
            "6b0c1e8a-0000-4000-8000-00000000dead".to_string(),
        ),
        (
            "deleted",
            "6b0c1e8a-0000-4000-8000-00000000beef".to_string(),
        ),
    ];
    for (pod, uid) in &queued {
        let entry = json!({"namespace": w.kube.kube_ns, "pod": pod, "uid": uid,
                           "networkStatus": status(pod), "claims": []});
        std::fs::write(outbox.join(format!("{uid}.json")), entry.to_string()).unwrap();
    }
    std::fs::write(outbox.join("torn.json"), "{\"namespace\": \"x").unwrap();

    let daemon = w.daemon();
    w.writes_delivered(&daemon);
    let statuses = w.network_statuses();
    assert_eq!(statuses.len(), 1, "{statuses:?}");
    assert_eq!(statuses[0].0, "kept");
    assert_eq!(
        statuses[0].1,
        serde_json::from_str::<Value>(&status("kept")).unwrap()
    );
    // The API server refused the old pod's status to the new pod (the
    // PATCH names the uid); the deleted pod's write found nothing.
    assert_eq!(
        w.metric("plexus_status_writes_total{result=\"written\"}"),
        1.0
    );
    assert_eq!(
        w.metric("plexus_status_writes_total{result=\"pod_gone\"}"),
        2.0
    );
    assert_eq!(
        w.metric("plexus_status_writes_total{result=\"failed\"}"),
        0.0
    );
    assert!(
        daemon.log().contains("unreadable outbox entry dropped"),
        "{}",
        daemon.log()
    );
}

#[test]
fn with_status_write_sync_the_status_is_there_when_the_add_answers() {
    let Some(mut w) = world("sync") else { return };
    let pod_ns = w.pod_here("p", "macnet");
    let _daemon = w.daemon_with(&["--status-write", "sync"]);
    assert_ok("ADD", &w.call("ADD", "p", &pod_ns, &w.conf));
    // No waiting: written before the answer, nothing queued.
    let statuses = w.network_statuses();
    assert_eq!(statuses.len(), 1, "{statuses:?}");
    assert_eq!(statuses[0].1.as_array().unwrap().len(), 2);
    assert!(!w.outbox().exists());
    assert_ok("DEL", &w.call("DEL", "p", &pod_ns, &w.conf));
    w.assert_nothing_left(&[pod_ns]);
}

#[test]
fn a_pod_the_cache_has_not_seen_is_read_once_and_one_of_another_node_is_refused() {
    let Some(mut w) = world("node") else { return };
    let _daemon = w.daemon();
    let (mine, theirs) = (
        w.kube.namespaces.add("node-a"),
        w.kube.namespaces.add("node-b"),
    );
    // Created after the daemon listed: the cache may not have it yet, and
    // a GET finds it (on this node).
    w.pods(&["fresh".into()], &w.kube.node.clone(), "macnet");
    let out = w.call("ADD", "fresh", &mine, &w.conf);
    assert_ok("ADD of a pod newer than the cache", &out);
    assert!(count(&w.kube.requests(), "get", "pods", "") <= 1);

    // A pod scheduled elsewhere: never in this node's cache, and the GET
    // shows another node. Refused before anything is attached or written.
    w.pods(&["elsewhere".into()], "some-other-node", "macnet");
    let before = w.kube.requests().len();
    let out = w.call("ADD", "elsewhere", &theirs, &w.conf);
    let e = cni_error(&out);
    assert_eq!(e["code"], 3, "{e}");
    let details = e["details"].as_str().unwrap();
    assert!(
        details.contains("scheduled to node some-other-node") && details.contains(&w.kube.node),
        "{details}"
    );
    assert_eq!(link_names(&theirs), ["lo"]);
    let after = w.kube.requests()[before..].to_vec();
    assert_eq!(count(&after, "patch", "pods", "status"), 0, "{after:?}");

    assert_ok("DEL", &w.call("DEL", "fresh", &mine, &w.conf));
    assert_ok(
        "DEL of the refused pod",
        &w.call("DEL", "elsewhere", &theirs, &w.conf),
    );
    w.assert_nothing_left(&[mine, theirs]);
}

#[test]
fn without_a_daemon_the_shim_runs_the_call_itself_or_fails_at_once_as_configured() {
    let Some(mut w) = world("down") else { return };
    let pod_ns = w.pod_here("p", "macnet");
    // No daemon listens: daemonFallback "thin" (the default) runs in-process.
    let out = w.call("ADD", "p", &pod_ns, &w.conf);
    assert_ok("ADD without a daemon", &out);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("running the call in this process"), "{said}");

    // "fail": code 11 naming the socket, without waiting.
    let failing = w.conf_with(json!({"daemonFallback": "fail"}));
    let start = Instant::now();
    let out = w.call("DEL", "p", &pod_ns, &failing);
    assert!(start.elapsed() < Duration::from_secs(5));
    let details = cni_details(&out, 11);
    assert!(
        details.contains(&w.socket().display().to_string()),
        "{details}"
    );
    // The pod is still attached: nothing ran.
    assert!(link_names(&pod_ns).contains(&"net1".to_string()));

    // A daemon started later serves the DEL the in-process ADD recorded.
    let _daemon = w.daemon();
    assert_ok(
        "DEL through the daemon",
        &w.call("DEL", "p", &pod_ns, &failing),
    );
    w.assert_nothing_left(&[pod_ns]);
}

#[test]
fn a_failed_del_is_reported_not_swallowed() {
    let Some(mut w) = world("delfail") else {
        return;
    };
    // A delegate whose DEL fails until told otherwise (an exec'd plugin in
    // binDir: a script, as a third-party plugin would be).
    let bin = w.kube.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let flag = w.kube.tmp.path().join("del-fails");
    std::fs::write(&flag, "").unwrap();
    let script = format!(
        "#!/bin/sh\ncat >/dev/null\nif [ \"$CNI_COMMAND\" = DEL ] && [ -e {} ]; then\n  \
         echo '{{\"cniVersion\":\"1.0.0\",\"code\":999,\"msg\":\"stuck\",\"details\":\"the device is busy\"}}'\n  \
         exit 1\nfi\n[ \"$CNI_COMMAND\" = ADD ] && echo '{{\"cniVersion\":\"1.0.0\"}}'\nexit 0\n",
        flag.display()
    );
    executable(&bin.join("stubborn"), &script);
    w.kube.nad(
        "stubborn",
        &json!({"cniVersion": "1.0.0", "name": "stubborn", "type": "stubborn"}),
    );
    let conf = w.conf_with(json!({"binDir": bin.display().to_string()}));
    let pod_ns = w.pod_here("p", "stubborn");
    let _daemon = w.daemon();
    assert_ok("ADD", &w.call("ADD", "p", &pod_ns, &conf));

    let details = cni_details(&w.call("DEL", "p", &pod_ns, &conf), 999);
    assert!(details.contains("the device is busy"), "{details}");
    assert!(w.metric("plexus_cni_errors_total{code=\"999\",command=\"DEL\"}") >= 1.0);

    // The runtime retries; once the plugin lets go, everything goes.
    std::fs::remove_file(&flag).unwrap();
    assert_ok("DEL again", &w.call("DEL", "p", &pod_ns, &conf));
    w.assert_nothing_left(&[pod_ns]);
}

/// Issue 34 item 4: the daemon's watches list from the API server's watch
/// cache (`resourceVersion=0`), not by a quorum read of etcd that scans
/// every pod of the cluster for a node's few (6 s at 10,000 pods, paid by
/// every daemon at every rollout).
#[test]
fn the_watches_list_from_the_api_servers_cache() {
    use plexus_testkit::kube::AuditedRequest;
    let Some(mut w) = world("lst") else { return };
    let pod_ns = w.pod_here("p1", "macnet@net1");
    let daemon = w.daemon();
    let lists = |w: &World| -> Vec<AuditedRequest> {
        w.kube
            .api
            .audited()
            .into_iter()
            .filter(|r| r.verb == "list" && r.stage == "ResponseComplete")
            .collect()
    };
    let node_selector = format!("spec.nodeName%3D{}", w.kube.node);
    let listed = lists(&w);
    let pods: Vec<&AuditedRequest> = listed
        .iter()
        .filter(|r| r.resource == "pods" && r.uri.contains(&node_selector))
        .collect();
    assert!(!pods.is_empty(), "the node's pod LIST: {listed:?}");
    for list in &pods {
        assert!(list.uri.contains("resourceVersion=0"), "{}", list.uri);
    }
    let out = w.call("ADD", "p1", &pod_ns, &w.conf);
    assert_ok("ADD through the daemon", &out);
    w.writes_delivered(&daemon);
    // The NADs: only the namespace of the node's pod, never the cluster's
    // (issue 34: every daemon held every NAD of the cluster).
    let nads: Vec<AuditedRequest> = lists(&w)
        .into_iter()
        .filter(|r| r.resource == "network-attachment-definitions")
        .filter(|r| r.namespace == w.kube.kube_ns || r.namespace.is_empty())
        .collect();
    assert!(!nads.is_empty(), "the NADs' LIST: {:?}", lists(&w));
    assert!(
        nads.iter()
            .all(|r| !r.namespace.is_empty() && r.uri.contains("resourceVersion=0")),
        "{nads:?}"
    );
    assert!(w.metric("plexus_cache_objects{kind=\"network-attachment-definitions\"}") >= 1.0);
    let out = w.call("DEL", "p1", &pod_ns, &w.conf);
    assert_ok("DEL through the daemon", &out);
    w.assert_nothing_left(&[pod_ns]);
}

/// A daemon on a node whose pods all have their networks lists no NAD at
/// start: it lists a namespace's NADs when a call first needs them, or
/// when a pod that waits for its networks arrives (issue 34: a DaemonSet
/// rollout no longer lists every NAD of the cluster from every node).
#[test]
fn nads_are_listed_per_namespace_when_first_needed() {
    let Some(mut w) = world("lazy") else { return };
    let attached = w.pod_here("p1", "macnet@net1");
    w.kube.api.kubectl(&[
        "annotate",
        "pod",
        "-n",
        &w.kube.kube_ns,
        "p1",
        "k8s.v1.cni.cncf.io/network-status=[]",
    ]);
    // This test's NADs, and any of the whole cluster (no daemon lists those
    // now), as the audit log saw them.
    let nad_requests = |w: &World| {
        w.kube
            .api
            .audited()
            .into_iter()
            .filter(|r| r.resource == "network-attachment-definitions")
            .filter(|r| r.namespace == w.kube.kube_ns || r.namespace.is_empty())
            .filter(|r| r.stage == "ResponseComplete")
            .count()
    };
    let before = nad_requests(&w);
    let daemon = w.daemon();
    assert_eq!(nad_requests(&w), before, "no NAD read at start");
    assert_eq!(
        w.metric("plexus_cache_objects{kind=\"network-attachment-definitions\"}"),
        0.0
    );
    // A new pod waiting for its networks: its namespace's NADs are listed
    // before its ADD asks, which then reads none.
    let waiting = w.kube.namespaces.add("lazy-q");
    let node = w.kube.node.clone();
    w.pods(&["p2".to_string()], &node, "macnet@net1");
    let listed = std::time::Instant::now();
    while w.metric("plexus_cache_objects{kind=\"network-attachment-definitions\"}") < 1.0 {
        assert!(
            listed.elapsed() < std::time::Duration::from_secs(10),
            "NADs not listed"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let before_add = w.kube.requests().len();
    let out = w.call("ADD", "p2", &waiting, &w.conf);
    assert_ok("ADD through the daemon", &out);
    w.writes_delivered(&daemon);
    assert_eq!(
        w.kube.requests()[before_add..]
            .iter()
            .filter(|r| r.verb == "get" && r.resource == "network-attachment-definitions")
            .count(),
        0
    );
    for (pod, netns) in [("p2", &waiting), ("p1", &attached)] {
        let out = w.call("DEL", pod, netns, &w.conf);
        assert_ok("DEL through the daemon", &out);
    }
    w.assert_nothing_left(&[attached, waiting]);
}
