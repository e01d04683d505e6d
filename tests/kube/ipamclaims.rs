//! IPAMClaims (multi-net-spec §8 with §4.1.2.1.11): a re-created pod keeps
//! its address while its claim exists; DEL or GC releases it once the claim
//! is deleted; claims that are not the attachment's are refused.

use super::*;

#[test]
fn ipamclaim_keeps_addresses_across_pods_until_the_claim_is_deleted() {
    let Some(w) = world("claim") else { return };
    // multi-net-spec §8 with §4.1.2.1.11: a VM-like workload whose pod is
    // re-created keeps its address while its IPAMClaim exists.
    let mut vmnet = macvlan_network(w.kube.tmp.path());
    vmnet["name"] = json!("vmnet");
    vmnet["allowPersistentIPs"] = json!(true);
    vmnet["ipam"] = host_local(w.kube.tmp.path(), "10.50.0.0/24", "mac");
    w.kube.nad("vmnet", &vmnet);
    let claim = |name: &str, interface: &str| {
        w.kube.api.apply(&format!(
            "apiVersion: k8s.cni.cncf.io/v1alpha1\nkind: IPAMClaim\n\
             metadata: {{name: {name}, namespace: {}}}\n\
             spec: {{network: vmnet, interface: {interface}}}\n",
            w.kube.kube_ns
        ));
    };
    claim("vm-a.vmnet", "net1");
    let selection = |claim: &str| {
        json!([{"name": "vmnet", "interface": "net1", "ipam-claim-reference": claim}]).to_string()
    };
    let held_by_claim = || {
        files_in(&w.kube.tmp.path().join("ipam/mac/vmnet"))
            .into_iter()
            .filter(|f| f.starts_with("10.50."))
            .map(|f| {
                let owner =
                    std::fs::read_to_string(w.kube.tmp.path().join("ipam/mac/vmnet").join(&f));
                (f, owner.unwrap())
            })
            .collect::<Vec<_>>()
    };

    // The first pod: an address, written to the claim's status.
    let uid1 = w.pod("virt-launcher-a-1", Some(&selection("vm-a.vmnet")));
    assert_ok("ADD", &w.plexus("ADD", 0, true, "virt-launcher-a-1", &uid1));
    let first = addresses(&w.kube.pods[0], "net1");
    let status = &w.get("ipamclaim", "vm-a.vmnet")["status"];
    assert_eq!(status["ips"], json!([format!("{}/24", first[0])]));
    assert_eq!(status["ownerPod"]["name"], "virt-launcher-a-1");
    let owner = format!("ipamclaim_{}_vm-a.vmnet\r\nnet1", w.kube.kube_ns);
    assert_eq!(held_by_claim(), [(first[0].clone(), owner.clone())]);

    // The pod goes away; the claim keeps the address.
    assert_ok("DEL", &w.plexus("DEL", 0, true, "virt-launcher-a-1", &uid1));
    w.kube.api.kubectl(&[
        "delete",
        "pod",
        "-n",
        &w.kube.kube_ns,
        "virt-launcher-a-1",
        "--wait=false",
    ]);
    assert_eq!(held_by_claim(), [(first[0].clone(), owner.clone())]);

    // Its successor (another pod, another sandbox) gets the same address.
    let uid2 = w.pod("virt-launcher-a-2", Some(&selection("vm-a.vmnet")));
    assert_ok("ADD", &w.plexus("ADD", 1, true, "virt-launcher-a-2", &uid2));
    assert_eq!(addresses(&w.kube.pods[1], "net1"), first);
    let status = &w.get("ipamclaim", "vm-a.vmnet")["status"];
    assert_eq!(status["ownerPod"]["name"], "virt-launcher-a-2");

    // The claim is deleted while virt-launcher-a-2 runs: neither a GC nor
    // another pod's DEL frees the address under it...
    w.kube
        .api
        .kubectl(&["delete", "ipamclaim", "-n", &w.kube.kube_ns, "vm-a.vmnet"]);
    let gc_keeping_c1 = w.conf_with(json!({"cniVersion": "1.1.0",
        "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}]}));
    assert_ok("GC", &w.plexus_with("GC", 0, false, "", "", &gc_keeping_c1));
    assert_eq!(held_by_claim(), [(first[0].clone(), owner.clone())]);
    let uid_other = w.pod("bystander", None);
    assert_ok("ADD", &w.plexus("ADD", 0, true, "bystander", &uid_other));
    assert_ok("DEL", &w.plexus("DEL", 0, true, "bystander", &uid_other));
    assert_eq!(held_by_claim(), [(first[0].clone(), owner.clone())]);
    assert_eq!(addresses(&w.kube.pods[1], "net1"), first);
    // ...the DEL of the pod that holds it releases it.
    assert_ok("DEL", &w.plexus("DEL", 1, true, "virt-launcher-a-2", &uid2));
    assert!(held_by_claim().is_empty());
    assert!(files_in(&w.kube.tmp.path().join("cache/ipamclaims")).is_empty());

    // Released by GC too, when no DEL comes after the claim's deletion.
    claim("vm-b.vmnet", "net1");
    let uid3 = w.pod("virt-launcher-b", Some(&selection("vm-b.vmnet")));
    assert_ok("ADD", &w.plexus("ADD", 0, true, "virt-launcher-b", &uid3));
    assert_ok("DEL", &w.plexus("DEL", 0, true, "virt-launcher-b", &uid3));
    let gc = w.conf_with(json!({"cniVersion": "1.1.0", "cni.dev/valid-attachments": []}));
    assert_ok("GC", &w.plexus_with("GC", 0, false, "", "", &gc));
    assert_eq!(held_by_claim().len(), 1, "kept while the claim exists");
    w.kube
        .api
        .kubectl(&["delete", "ipamclaim", "-n", &w.kube.kube_ns, "vm-b.vmnet"]);
    assert_ok("GC", &w.plexus_with("GC", 0, false, "", "", &gc));
    assert!(held_by_claim().is_empty());

    // Claims that are not this attachment's are refused, with the reason.
    claim("vm-c.vmnet", "net2");
    let other = w.kube.api.namespace("pxk-claim-other");
    for (reference, want) in [
        ("vm-c.vmnet", "the claim's spec.interface is \"net2\""),
        (
            &*format!("{other}/vm-c.vmnet"),
            "may only use claims of its own namespace",
        ),
        ("nosuchclaim", "does not exist"),
    ] {
        let uid = w.pod("p-refused", Some(&selection(reference)));
        let details = cni_details(&w.plexus("ADD", 0, true, "p-refused", &uid), 101);
        assert!(details.contains(want), "{want}: {details}");
        assert_eq!(link_names(&w.kube.pods[0]), ["lo"]);
        assert_ok("DEL", &w.plexus("DEL", 0, true, "p-refused", &uid));
    }
    let requests = w.kube.requests();
    assert!(count(&requests, "get", "ipamclaims", "") >= 4);
    assert_eq!(count(&requests, "patch", "ipamclaims", "status"), 3);
    assert_nothing_left(w.kube.tmp.path());
}

/// Issue 33 item 7 with multi-net-spec §8: an IPAMClaim bound to
/// cluster-wide IPAM (whereabouts, in-process). The address follows the
/// claim: a VM's migration target (another pod, running beside the source)
/// gets the address the source holds, the pool's entry and reservation
/// move to it, and neither pod's DEL gives it back while the claim exists;
/// a later pod of the claim gets it again. (The pool is the cluster's: the
/// node a call runs on does not enter the choice.) The reconciler gives it
/// back once the claim is deleted (tests/daemon/whereabouts.rs).
#[test]
fn ipamclaim_address_follows_the_claim_with_cluster_wide_ipam() {
    let Some(w) = world("wbclaim") else { return };
    let network = format!("vmwb{}", std::process::id());
    let mut vmnet = macvlan_network(w.kube.tmp.path());
    vmnet["name"] = json!("vmwb");
    vmnet["allowPersistentIPs"] = json!(true);
    vmnet["ipam"] = json!({"type": "whereabouts", "range": "10.51.0.0/24",
                           "network_name": network,
                           "configuration_path": "/nonexistent/whereabouts.conf"});
    w.kube.nad("vmwb", &vmnet);
    let ns = w.kube.kube_ns.clone();
    w.kube.api.apply(&format!(
        "apiVersion: k8s.cni.cncf.io/v1alpha1\nkind: IPAMClaim\n\
         metadata: {{name: vm-w.vmwb, namespace: {ns}}}\n\
         spec: {{network: vmwb, interface: net1}}\n"
    ));
    let selection =
        json!([{"name": "vmwb", "interface": "net1", "ipam-claim-reference": "vm-w.vmwb"}])
            .to_string();
    let pool = format!("{network}-10.51.0.0-24");
    let pool_object = || -> Value {
        let kind = "ippools.whereabouts.cni.cncf.io";
        let out = w
            .kube
            .api
            .kubectl(&["get", kind, "-n", "kube-system", &pool, "-o", "json"]);
        serde_json::from_str(&out).unwrap()
    };
    let held = || -> Vec<(String, String)> {
        let mut held: Vec<(String, String)> = pool_object()["spec"]["allocations"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, a)| (k.clone(), a["podref"].as_str().unwrap().to_string()))
            .collect();
        held.sort();
        held
    };
    let reservation_of = |address: &str| -> String {
        let name = format!("{network}-{address}");
        w.kube.api.kubectl(&[
            "get",
            "overlappingrangeipreservations.whereabouts.cni.cncf.io",
            "-n",
            "kube-system",
            &name,
            "-o",
            "jsonpath={.spec.podref}",
        ])
    };

    let uid1 = w.pod("virt-launcher-w-1", Some(&selection));
    assert_ok("ADD", &w.plexus("ADD", 0, true, "virt-launcher-w-1", &uid1));
    let first = addresses(&w.kube.pods[0], "net1");
    let offset = first[0].rsplit('.').next().unwrap().to_string();
    let held_by = |pod: &str| {
        assert_eq!(held(), [(offset.clone(), format!("{ns}/{pod}"))]);
    };
    let status = &w.get("ipamclaim", "vm-w.vmwb")["status"];
    assert_eq!(status["ips"], json!([format!("{}/24", first[0])]));
    held_by("virt-launcher-w-1");
    let notes = pool_object()["metadata"]["annotations"].clone();
    assert_eq!(
        notes[format!("ipam-claim.plexus.io/{offset}")],
        json!(format!("{ns}/vm-w.vmwb/c0")),
        "{notes}"
    );

    // The migration target, while the source still runs: the same address,
    // the entry and the reservation moved to it.
    let uid2 = w.pod("virt-launcher-w-2", Some(&selection));
    assert_ok("ADD", &w.plexus("ADD", 1, true, "virt-launcher-w-2", &uid2));
    assert_eq!(addresses(&w.kube.pods[1], "net1"), first);
    held_by("virt-launcher-w-2");
    assert_eq!(reservation_of(&first[0]), format!("{ns}/virt-launcher-w-2"));
    let status = &w.get("ipamclaim", "vm-w.vmwb")["status"];
    assert_eq!(status["ownerPod"]["name"], "virt-launcher-w-2");

    // The source goes, then the target: the claim keeps the address.
    assert_ok("DEL", &w.plexus("DEL", 0, true, "virt-launcher-w-1", &uid1));
    held_by("virt-launcher-w-2");
    assert_ok("DEL", &w.plexus("DEL", 1, true, "virt-launcher-w-2", &uid2));
    held_by("virt-launcher-w-2");

    // The VM started again: its next pod gets the address.
    let uid3 = w.pod("virt-launcher-w-3", Some(&selection));
    assert_ok("ADD", &w.plexus("ADD", 0, true, "virt-launcher-w-3", &uid3));
    assert_eq!(addresses(&w.kube.pods[0], "net1"), first);
    held_by("virt-launcher-w-3");
    assert_ok("DEL", &w.plexus("DEL", 0, true, "virt-launcher-w-3", &uid3));

    // A network whose IPAM holds no claim refuses the reference, naming why.
    let mut plain = macvlan_network(w.kube.tmp.path());
    plain["name"] = json!("vmplain");
    plain["allowPersistentIPs"] = json!(true);
    plain["ipam"] = json!({"type": "static", "addresses": [{"address": "10.52.0.5/24"}]});
    w.kube.nad("vmplain", &plain);
    w.kube.api.apply(&format!(
        "apiVersion: k8s.cni.cncf.io/v1alpha1\nkind: IPAMClaim\n\
         metadata: {{name: vm-p.vmplain, namespace: {ns}}}\n\
         spec: {{network: vmplain, interface: net1}}\n"
    ));
    let refused = json!([{"name": "vmplain", "interface": "net1",
                          "ipam-claim-reference": "vm-p.vmplain"}])
    .to_string();
    let uid4 = w.pod("p-plain", Some(&refused));
    let details = cni_details(&w.plexus("ADD", 0, true, "p-plain", &uid4), 101);
    assert!(details.contains("host-local or whereabouts"), "{details}");
    assert_ok("DEL", &w.plexus("DEL", 0, true, "p-plain", &uid4));

    // What the reconciler would give back once the claim is deleted: this
    // test's own pool, removed by hand (the API server is the run's).
    w.kube.api.kubectl(&[
        "delete",
        "ippools.whereabouts.cni.cncf.io",
        "-n",
        "kube-system",
        &pool,
    ]);
    w.kube.api.kubectl(&[
        "delete",
        "overlappingrangeipreservations.whereabouts.cni.cncf.io",
        "-n",
        "kube-system",
        &format!("{network}-{}", first[0]),
    ]);
}
