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
