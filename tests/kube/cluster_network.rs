//! The cluster network and plexus's own conf: the readiness wait
//! (multi-net-spec §6.1.2), a client-certificate kubeconfig, and a pod
//! attached before plexus, deleted from the cluster network's NAD (issue 23
//! item 11).

use super::*;

#[test]
fn readiness_wait_times_out_naming_what_is_missing_then_succeeds() {
    let Some(w) = world("ready") else { return };
    // §6.1.2: plexus's conf names the cluster network by its conf-dir name
    // and a readiness indicator; neither exists yet.
    let net_d = w.kube.tmp.path().join("net.d");
    let indicator = w.kube.tmp.path().join("ready");
    let conf = |timeout: f64| {
        w.conf_with(json!({
            "cniVersion": "1.1.0", "delegates": null, "clusterNetwork": "podnet",
            "readinessindicatorfile": indicator, "readinessTimeout": timeout,
        }))
    };
    let uid = w.pod("p1", None);
    let t0 = Instant::now();
    let e = cni_error(&w.plexus_with("ADD", 0, true, "p1", &uid, &conf(0.5)));
    assert!(
        t0.elapsed() >= Duration::from_millis(450),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(e["code"], 11, "{e}");
    let details = e["details"].as_str().unwrap();
    assert!(
        details.contains(&format!("readinessindicatorfile {}", indicator.display()))
            && details.contains("readinessTimeout"),
        "{details}"
    );
    let e = cni_error(&w.plexus_with("STATUS", 0, false, "", "", &conf(0.5)));
    assert_eq!(e["code"], 50, "{e}");

    std::fs::write(&indicator, "").unwrap();
    let e = cni_error(&w.plexus_with("ADD", 0, true, "p1", &uid, &conf(0.3)));
    assert!(e["details"].as_str().unwrap().contains("\"podnet\""), "{e}");
    assert_eq!(link_names(&w.kube.pods[0]), ["lo"]);

    // The cluster network's conf appears while an ADD waits: it goes on.
    let podnet = json!({"cniVersion": "1.0.0", "name": "podnet", "type": "bridge",
        "bridge": "br-pod", "ipam": host_local(w.kube.tmp.path(), "10.10.0.0/24", "pod")});
    let writer = {
        let (net_d, podnet) = (net_d.clone(), podnet.to_string());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            std::fs::create_dir_all(&net_d).unwrap();
            std::fs::write(net_d.join("10-podnet.conf"), podnet).unwrap();
        })
    };
    let t0 = Instant::now();
    assert_ok(
        "ADD",
        &w.plexus_with("ADD", 0, true, "p1", &uid, &conf(20.0)),
    );
    assert!(t0.elapsed() >= Duration::from_millis(400));
    writer.join().unwrap();
    assert_eq!(link_names(&w.kube.pods[0]), ["lo", "eth0"]);
    assert_ok(
        "STATUS",
        &w.plexus_with("STATUS", 0, false, "", "", &conf(0.5)),
    );
    assert_ok(
        "DEL",
        &w.plexus_with("DEL", 0, true, "p1", &uid, &conf(0.5)),
    );
    assert_nothing_left(w.kube.tmp.path());
}

#[test]
fn a_client_certificate_kubeconfig_works_as_a_token_does() {
    let Some(w) = world("cert") else { return };
    let uid = w.pod("p1", Some("macnet"));
    let conf = w.conf_with(json!({"kubeconfig": w.kube.api.plexus_cert_kubeconfig()}));
    assert_ok("ADD", &w.plexus_with("ADD", 0, true, "p1", &uid, &conf));
    assert_eq!(w.network_status("p1")[1]["interface"], "net1");
    // The API server saw plexus's identity (the audit policy logs only it).
    assert_eq!(count(&w.kube.requests(), "patch", "pods", "status"), 1);
    assert_ok("DEL", &w.plexus_with("DEL", 0, true, "p1", &uid, &conf));
    assert_nothing_left(w.kube.tmp.path());
}

#[test]
fn a_pod_attached_before_plexus_is_deleted_from_the_cluster_network_nad() {
    // Issue 23 item 11 on an API server: the cluster network is a NAD
    // (`clusterNetwork: ns/podnet`); a DEL without a record DELs it, as
    // Multus's CmdDel without a cache does. With the API server gone the
    // NAD cannot be read: while the pod still has its interface, code 11,
    // the runtime retries, nothing is lost; a DEL repeated after the
    // interface went succeeds (DEL works with the API server gone).
    let Some(mut w) = world("pre") else { return };
    let podnet = json!({"cniVersion": "1.0.0", "name": "podnet", "type": "bridge",
        "bridge": "br-pod", "isGateway": true,
        "ipam": host_local(w.kube.tmp.path(), "10.10.0.0/24", "pod")});
    w.kube.nad("podnet", &podnet);
    let conf = w.conf_with(json!({
        "delegates": null, "clusterNetwork": format!("{}/podnet", w.kube.kube_ns), "apiTimeout": 2,
    }));
    let reservations = || {
        files_in(&w.kube.tmp.path().join("ipam/pod/podnet"))
            .into_iter()
            .filter(|f| f.starts_with("10.10.0."))
            .count()
    };
    // Before plexus: the reference bridge and host-local attach both pods.
    for (i, pod_ns) in w.kube.pods.iter().enumerate() {
        let container = format!("c{i}");
        let out = reference_plugin(&w.kube.node, "bridge", &container, pod_ns, &podnet);
        assert_ok("reference ADD", &out);
    }
    assert_eq!(reservations(), 2);
    assert_ok("DEL", &w.plexus_with("DEL", 0, true, "p0", "", &conf));
    assert_eq!(link_names(&w.kube.pods[0]), ["lo"]);
    assert_eq!(reservations(), 1);

    w.kube.relay.stop();
    let e = cni_error(&w.plexus_with("DEL", 1, true, "p1", "", &conf));
    assert_eq!(e["code"], 11, "{e}");
    assert_eq!(reservations(), 1, "kept for the DEL the runtime retries");
    assert_eq!(link_names(&w.kube.pods[1]), ["lo", "eth0"]);
    for netns in [true, false] {
        assert_ok(
            "DEL repeated, API server gone",
            &w.plexus_with("DEL", 0, netns, "p0", "", &conf),
        );
    }
    assert_eq!(reservations(), 1);
}
