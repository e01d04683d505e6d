//! ADD reads the pod and its NADs from the API server and publishes
//! network-status (multi-net-spec §5) and events; DEL needs no API server.
//! A re-created or deleted pod is not the call's pod, API errors name the
//! object and the reason, and a SIGKILL in the middle of an ADD leaves
//! nothing once DEL runs.

use super::*;

#[test]
fn add_reads_the_pod_and_its_nads_from_the_api_and_publishes_status_and_events() {
    let Some(mut w) = world("add") else { return };
    // Both annotation formats (multi-net-spec §4.1.1 text, §4.1.2 JSON).
    let uid1 = w.pod(
        "p1",
        Some(r#"[{"name": "macnet", "interface": "net7", "namespace": "NS"}]"#)
            .map(|s| s.replace("NS", &w.kube.kube_ns))
            .as_deref(),
    );
    let uid2 = w.pod("p2", Some("macnet@net3"));

    let out = w.plexus("ADD", 0, true, "p1", &uid1);
    assert_ok("ADD p1", &out);
    // §6: the runtime gets the cluster network's result.
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(result["ips"][0]["address"]
        .as_str()
        .unwrap()
        .starts_with("10.10.0."));
    assert_ok("ADD p2", &w.plexus("ADD", 1, true, "p2", &uid2));
    assert_eq!(link_names(&w.kube.pods[0]), ["lo", "eth0", "net7"]);
    assert_eq!(link_names(&w.kube.pods[1]), ["lo", "eth0", "net3"]);

    // §5: network-status, read back from the API server.
    let status = w.network_status("p1");
    let net7 = addresses(&w.kube.pods[0], "net7");
    let eth0 = addresses(&w.kube.pods[0], "eth0");
    assert_eq!(status.as_array().unwrap().len(), 2, "{status}");
    assert_eq!(status[0]["name"], "podnet");
    assert_eq!(status[0]["interface"], "eth0");
    assert_eq!(status[0]["default"], true);
    assert_eq!(status[0]["ips"], json!([eth0[0]]));
    assert_eq!(status[1]["name"], format!("{}/macnet", w.kube.kube_ns));
    assert_eq!(status[1]["interface"], "net7");
    assert_eq!(status[1]["default"], false);
    assert_eq!(status[1]["ips"], json!([net7[0]]));
    assert!(status[1]["mac"].as_str().is_some_and(|m| m.len() == 17));
    assert_eq!(w.network_status("p2")[1]["interface"], "net3");

    // Events, as `kubectl describe pod` lists them.
    let events = w.events("p1");
    for (ifname, ip, network) in [
        ("eth0", &eth0[0], "podnet".to_string()),
        ("net7", &net7[0], format!("{}/macnet", w.kube.kube_ns)),
    ] {
        let want = format!("Add {ifname} [{ip}/24] from {network}");
        assert!(
            events
                .iter()
                .any(|(t, r, m)| t == "Normal" && r == "AddedInterface" && *m == want),
            "{want:?} in {events:?}"
        );
    }

    // The requests, from the API server's side: per ADD one GET of the
    // pod, one GET per NAD, one PATCH of the status, plus the events.
    let requests = w.kube.requests();
    assert_eq!(count(&requests, "get", "pods", ""), 2, "{requests:#?}");
    assert_eq!(
        count(&requests, "get", "network-attachment-definitions", ""),
        2
    );
    assert_eq!(count(&requests, "patch", "pods", "status"), 2);
    assert_eq!(count(&requests, "create", "events", ""), 4);
    assert_eq!(requests.len(), 10, "nothing else: {requests:#?}");

    // DEL needs no API server: it works from plexus's record, at once.
    w.kube.relay.stop();
    for (i, pod) in ["p1", "p2"].iter().enumerate() {
        for netns in [true, false] {
            let t0 = Instant::now();
            assert_ok("DEL", &w.plexus("DEL", i, netns, pod, ""));
            assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        }
        assert_eq!(link_names(&w.kube.pods[i]), ["lo"]);
    }
    assert_eq!(w.kube.requests().len(), 10, "DEL made no request");
    assert_nothing_left(w.kube.tmp.path());
}

#[test]
fn a_recreated_pod_or_a_deleted_one_is_not_the_pod_of_the_call() {
    let Some(w) = world("uid") else { return };
    let uid = w.pod("p1", Some("macnet"));
    // K8S_POD_UID of an earlier pod of that name: it was re-created.
    let out = w.plexus("ADD", 0, true, "p1", "0b4c5e4e-0000-0000-0000-000000000000");
    let details = cni_details(&out, 3);
    assert!(
        details.contains(&format!("pod {}/p1", w.kube.kube_ns)) && details.contains("re-created"),
        "{details}"
    );
    assert_eq!(link_names(&w.kube.pods[0]), ["lo"], "nothing was attached");
    assert_ok("DEL", &w.plexus("DEL", 0, true, "p1", "0b4c5e4e"));

    // A pod that does not exist.
    let out = w.plexus("ADD", 0, true, "gone", "");
    let details = cni_details(&out, 3);
    assert!(details.contains("does not exist"), "{details}");

    // The pod deleted after its ADD: DEL still works, from the record.
    assert_ok("ADD", &w.plexus("ADD", 0, true, "p1", &uid));
    w.kube
        .api
        .kubectl(&["delete", "pod", "-n", &w.kube.kube_ns, "p1", "--wait=false"]);
    assert_ok("DEL", &w.plexus("DEL", 0, true, "p1", &uid));
    assert_eq!(link_names(&w.kube.pods[0]), ["lo"]);
    assert_nothing_left(w.kube.tmp.path());
}

#[test]
fn api_errors_name_the_object_and_the_reason_and_leave_nothing() {
    let Some(mut w) = world("err") else { return };
    let uid = w.pod("p1", Some("macnet"));
    // A token the API server does not know.
    let bad = w.kube.tmp.path().join("bad.kubeconfig");
    let text = std::fs::read_to_string(w.kube.api.plexus_kubeconfig()).unwrap();
    let token_line = text.lines().find(|l| l.contains("token:")).unwrap();
    std::fs::write(
        &bad,
        text.replace(token_line, "  user: {token: \"not-a-token\"}"),
    )
    .unwrap();
    let conf = w.conf_with(json!({"kubeconfig": bad}));
    let out = w.plexus_with("ADD", 0, true, "p1", &uid, &conf);
    let e = cni_error(&out);
    assert_eq!(e["code"], 104, "{e}");
    assert_eq!(
        e["details"],
        format!("pod {}/p1: unauthorized: Unauthorized", w.kube.kube_ns)
    );

    // A NAD the pod selects that does not exist (§3.4.1 rule 4).
    let uid2 = w.pod("p2", Some("nosuchnet"));
    let details = cni_details(&w.plexus("ADD", 1, true, "p2", &uid2), 100);
    assert!(
        details.contains(&format!("{}/nosuchnet does not exist", w.kube.kube_ns)),
        "{details}"
    );

    // The API server unreachable: a bounded, retryable failure.
    w.kube.relay.stop();
    let t0 = Instant::now();
    let details = cni_details(&w.plexus("ADD", 0, true, "p1", &uid), 11);
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    assert!(
        details.starts_with(&format!("pod {}/p1: ", w.kube.kube_ns)),
        "{details}"
    );
    for i in 0..2 {
        assert_ok("DEL", &w.plexus("DEL", i, true, "p1", ""));
        assert_eq!(link_names(&w.kube.pods[i]), ["lo"]);
    }
    assert_nothing_left(w.kube.tmp.path());
}

#[test]
fn sigkill_in_the_middle_of_an_add_then_del_leaves_nothing() {
    let Some(w) = world("kill") else { return };
    // A chain whose second plugin (exec'd from binDir) kills plexus with
    // SIGKILL: the macvlan link and its address exist, the record says the
    // ADD was under way, and nothing was published.
    let bin = w.kube.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let killer = bin.join("pxkill");
    executable(&killer, "#!/bin/sh\n[ \"$CNI_COMMAND\" = ADD ] || exit 0\nexec >/dev/null 2>&1\nkill -9 $PPID\nsleep 1\n");
    let mut chain = macvlan_network(w.kube.tmp.path());
    chain.as_object_mut().unwrap().remove("cniVersion");
    chain.as_object_mut().unwrap().remove("name");
    w.kube.nad(
        "killnet",
        &json!({"cniVersion": "1.0.0", "name": "killnet", "plugins": [chain, {"type": "pxkill"}]}),
    );
    let uid = w.pod("p1", Some("killnet"));
    let conf = w.conf_with(json!({"binDir": bin}));
    let out = w.plexus_with("ADD", 0, true, "p1", &uid, &conf);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(9), "{out:?}");
    assert_eq!(link_names(&w.kube.pods[0]), ["lo", "eth0", "net1"]);
    assert!(w.get("pod", "p1")["metadata"]["annotations"]
        .get("k8s.v1.cni.cncf.io/network-status")
        .is_none());

    assert_ok("DEL", &w.plexus_with("DEL", 0, true, "p1", &uid, &conf));
    assert_eq!(link_names(&w.kube.pods[0]), ["lo"]);
    assert_nothing_left(w.kube.tmp.path());
}
