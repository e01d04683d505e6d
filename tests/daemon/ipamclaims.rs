//! IPAMClaims (multi-net-spec §8, §4.1.2.1.11) on hot-plugged attachments:
//! the claim's status written at attach, the address kept across a detach
//! while the claim exists and released once it is gone, as at ADD and DEL.

use super::*;

impl World {
    /// IPAMClaim `name` of this test's namespace, as JSON (Null when gone).
    fn claim(&self, name: &str) -> Value {
        let text = self.kube.api.kubectl(&[
            "get",
            "ipamclaim",
            name,
            "-n",
            &self.kube.kube_ns,
            "-o",
            "json",
            "--ignore-not-found",
        ]);
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// The addresses host-local holds for `vmnet`.
    fn vmnet_leases(&self) -> Vec<String> {
        files_in(&self.kube.tmp.path().join("ipam/vm/vmnet"))
            .into_iter()
            .filter(|f| f.starts_with("10.50."))
            .collect()
    }
}

#[test]
fn a_hot_plugged_claim_reference_writes_the_claim_and_a_detach_releases_as_del_does() {
    let Some((w, pod_ns, daemon)) = running_pod("hpclaim", &[]) else {
        return;
    };
    let vmnet = json!({"cniVersion": "1.0.0", "name": "vmnet", "type": "macvlan",
        "master": "uplink0", "allowPersistentIPs": true,
        "ipam": host_local(w.kube.tmp.path(), "10.50.0.0/24", "vm")});
    w.kube.nad("vmnet", &vmnet);
    w.kube.api.apply(&format!(
        "apiVersion: k8s.cni.cncf.io/v1alpha1\nkind: IPAMClaim\n\
         metadata: {{name: vm-a.vmnet, namespace: {}}}\n\
         spec: {{network: vmnet, interface: net2}}\n",
        w.kube.kube_ns
    ));
    let with_claim = json!([{"name": "macnet", "interface": "net1"},
        {"name": "vmnet", "interface": "net2", "ipam-claim-reference": "vm-a.vmnet"}])
    .to_string();

    // Attached: the claim's status names the address and the pod, as at ADD.
    w.annotate("p1", &with_claim);
    within_30s("the claim's status written", &daemon, || {
        w.claim("vm-a.vmnet")["status"]["ips"]
            .as_array()
            .is_some_and(|ips| !ips.is_empty())
    });
    let address = addresses(&pod_ns, "net2");
    assert_eq!(address.len(), 1);
    let status = &w.claim("vm-a.vmnet")["status"];
    assert_eq!(status["ips"], json!([format!("{}/24", address[0])]));
    assert_eq!(status["ownerPod"]["name"], "p1");
    assert_eq!(w.status_of("p1").len(), 3);

    // Detached while the claim exists: the address stays the claim's, and
    // the next attach gets it again.
    w.annotate("p1", "macnet@net1");
    within_30s("net2 detached", &daemon, || {
        sorted_links(&pod_ns) == ["eth0", "lo", "net1"]
    });
    assert_eq!(w.vmnet_leases(), address);
    w.annotate("p1", &with_claim);
    within_30s("net2 attached again", &daemon, || {
        sorted_links(&pod_ns) == ["eth0", "lo", "net1", "net2"]
    });
    assert_eq!(addresses(&pod_ns, "net2"), address);

    // The claim deleted, the detach releases its address, as a DEL does.
    w.kube
        .api
        .kubectl(&["delete", "ipamclaim", "-n", &w.kube.kube_ns, "vm-a.vmnet"]);
    w.annotate("p1", "macnet@net1");
    // The address first, then the claim book's entry.
    within_30s("net2 detached, its address released", &daemon, || {
        sorted_links(&pod_ns) == ["eth0", "lo", "net1"]
            && w.vmnet_leases().is_empty()
            && files_in(&w.kube.tmp.path().join("cache/ipamclaims")).is_empty()
    });

    assert_ok("DEL", &w.call("DEL", "p1", &pod_ns, &w.conf));
    w.assert_nothing_left(&[pod_ns]);
    drop(daemon);
}
