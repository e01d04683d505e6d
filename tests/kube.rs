//! plexus on a cluster: the `plexus` binary, invoked as kubelet's runtime
//! invokes it inside a node namespace this test creates, reads the pod and
//! its NetworkAttachmentDefinitions from a real kube-apiserver (testkit::kube,
//! reached through a relay into the node namespace), with the token of its
//! service account bound by `deploy/rbac.yaml` only, so a missing verb fails
//! here. It writes network-status (multi-net-spec §5) and events back, and
//! its requests are counted from the API server's audit log.

mod e2e_support;

use std::process::Output;
use std::time::{Duration, Instant};

use e2e_support::*;
use plexus_testkit::kube::{AuditedRequest, KubeApi};
use serde_json::{json, Value};

/// One test's world: a node namespace with a relay to the API server, two
/// pod namespaces, a Kubernetes namespace with the NAD `macnet` (macvlan on
/// the node's `uplink0`, host-local), and plexus's conf.
struct World {
    kube: KubeNode,
    conf: String,
}

fn world(tag: &str) -> Option<World> {
    let kube = kube_node(tag, "pxk", macvlan_network)?;
    let conf = json!({
        "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
        "kubeconfig": kube.api.plexus_kubeconfig(),
        "cniDir": kube.tmp.path().join("cache"), "confDir": kube.tmp.path().join("net.d"),
        "apiTimeout": 5,
        "delegates": [{"cniVersion": "1.0.0", "name": "podnet", "type": "bridge", "bridge": "br-pod",
                       "isGateway": true, "ipam": host_local(kube.tmp.path(), "10.10.0.0/24", "pod")}],
    })
    .to_string();
    Some(World { kube, conf })
}

impl World {
    /// Create pod `name` whose selection annotation is `selection`; its uid.
    fn pod(&self, name: &str, selection: Option<&str>) -> String {
        let annotations = selection
            .map(|s| {
                format!(
                    "  annotations: {{k8s.v1.cni.cncf.io/networks: {}}}\n",
                    serde_json::to_string(s).unwrap()
                )
            })
            .unwrap_or_default();
        self.kube.api.apply(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {}\n{annotations}\
             spec: {{containers: [{{name: c, image: busybox}}]}}\n",
            self.kube.kube_ns
        ));
        self.kube.api.kubectl(&[
            "get",
            "pod",
            "-n",
            &self.kube.kube_ns,
            name,
            "-o",
            "jsonpath={.metadata.uid}",
        ])
    }

    /// plexus for pod `pod` in pod namespace `i` (`None`: no CNI_NETNS), as
    /// kubelet's runtime calls it (`uid` as K8S_POD_UID when given).
    fn plexus(&self, command: &str, i: usize, netns: bool, pod: &str, uid: &str) -> Output {
        self.plexus_with(command, i, netns, pod, uid, &self.conf)
    }

    fn plexus_with(
        &self,
        command: &str,
        i: usize,
        netns: bool,
        pod: &str,
        uid: &str,
        conf: &str,
    ) -> Output {
        let netns = if netns {
            format!("/var/run/netns/{}", self.kube.pods[i])
        } else {
            String::new()
        };
        let mut args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={pod};K8S_POD_INFRA_CONTAINER_ID=c{i}",
            self.kube.kube_ns
        );
        if !uid.is_empty() {
            args.push_str(&format!(";K8S_POD_UID={uid}"));
        }
        plexus_at(
            &self.kube.node,
            command,
            &format!("c{i}"),
            &netns,
            "eth0",
            &args,
            conf,
        )
    }

    /// The pod's network-status annotation, read back with a GET.
    fn network_status(&self, pod: &str) -> Value {
        let text = self.kube.api.kubectl(&[
            "get",
            "pod",
            "-n",
            &self.kube.kube_ns,
            pod,
            "-o",
            r"jsonpath={.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}",
        ]);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"))
    }

    /// The events of the pod: `(type, reason, message)`.
    fn events(&self, pod: &str) -> Vec<(String, String, String)> {
        pod_events(self.kube.api, &self.kube.kube_ns, pod)
    }

    /// plexus's conf with `changes` merged in (`null` removes a key).
    fn conf_with(&self, changes: Value) -> String {
        let mut conf: Value = serde_json::from_str(&self.conf).unwrap();
        for (k, v) in changes.as_object().unwrap() {
            if v.is_null() {
                conf.as_object_mut().unwrap().remove(k);
            } else {
                conf[k] = v.clone();
            }
        }
        conf.to_string()
    }

    /// Create the NAD `name` in this test's namespace with `config`.
    fn nad(&self, name: &str, config: &Value) {
        self.kube.api.apply(&format!(
            "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
             metadata: {{name: {name}, namespace: {}}}\nspec:\n  config: '{config}'\n",
            self.kube.kube_ns
        ));
    }

    /// An object as the admin reads it (`kubectl get KIND NAME -o json`).
    fn get(&self, kind: &str, name: &str) -> Value {
        serde_json::from_str(&self.kube.api.kubectl(&[
            "get",
            kind,
            "-n",
            &self.kube.kube_ns,
            name,
            "-o",
            "json",
        ]))
        .unwrap()
    }
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

fn count(requests: &[AuditedRequest], verb: &str, resource: &str, subresource: &str) -> usize {
    requests
        .iter()
        .filter(|r| r.verb == verb && r.resource == resource && r.subresource == subresource)
        .count()
}

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
    let mut conf: Value = serde_json::from_str(&w.conf).unwrap();
    conf["kubeconfig"] = json!(bad);
    let out = w.plexus_with("ADD", 0, true, "p1", &uid, &conf.to_string());
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
    w.nad("keynet", &keynet);
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
    w.nad("broken", &broken);
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

#[test]
fn sigkill_in_the_middle_of_an_add_then_del_leaves_nothing() {
    let Some(w) = world("kill") else { return };
    // A chain whose second plugin (exec'd from binDir) kills plexus with
    // SIGKILL: the macvlan link and its address exist, the record says the
    // ADD was under way, and nothing was published.
    let bin = w.kube.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let killer = bin.join("pxkill");
    std::fs::write(&killer, "#!/bin/sh\n[ \"$CNI_COMMAND\" = ADD ] || exit 0\nexec >/dev/null 2>&1\nkill -9 $PPID\nsleep 1\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&killer, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut chain = macvlan_network(w.kube.tmp.path());
    chain.as_object_mut().unwrap().remove("cniVersion");
    chain.as_object_mut().unwrap().remove("name");
    w.nad(
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

#[test]
fn ipamclaim_keeps_addresses_across_pods_until_the_claim_is_deleted() {
    let Some(w) = world("claim") else { return };
    // multi-net-spec §8 with §4.1.2.1.11: a VM-like workload whose pod is
    // re-created keeps its address while its IPAMClaim exists.
    let mut vmnet = macvlan_network(w.kube.tmp.path());
    vmnet["name"] = json!("vmnet");
    vmnet["allowPersistentIPs"] = json!(true);
    vmnet["ipam"] = host_local(w.kube.tmp.path(), "10.50.0.0/24", "mac");
    w.nad("vmnet", &vmnet);
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

/// device-info-SPEC §4.2.1 and §6.1 (multi-net-spec §5.3.8) through the API
/// server: a NAD backed by a device-plugin resource gets the device kubelet
/// allocated (from the stand-in kubelet: this API server has no node; the
/// real kubelet's path is tests/cluster_devices.rs), the device plugin's
/// file for it is copied for the attachment, and its content is in the
/// network-status plexus writes; DEL removes the copy.
#[test]
fn device_info_of_a_resource_backed_network_is_in_the_published_status() {
    use plexus_testkit::podresources::{container, pod, PodResourcesServer};
    let Some(w) = world("devinfo") else { return };
    let resource = "example.com/macvlan_dev";
    let macnet = macvlan_network(w.kube.tmp.path());
    w.kube.api.apply(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
         metadata: {{name: devnet, namespace: {}, annotations: {{k8s.v1.cni.cncf.io/resourceName: {resource}}}}}\n\
         spec:\n  config: '{macnet}'\n",
        w.kube.kube_ns
    ));
    let uid = w.pod("p1", Some("devnet"));
    let kubelet = PodResourcesServer::start(vec![pod(
        &w.kube.kube_ns,
        "p1",
        vec![container("c", &[(resource, &["dev-7"])])],
    )]);
    let devinfo = w.kube.tmp.path().join("devinfo");
    let dp = devinfo.join("dp/example.com-macvlan_dev-dev-7-device.json");
    std::fs::create_dir_all(dp.parent().unwrap()).unwrap();
    let info = json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:3b:02.7"}});
    std::fs::write(&dp, info.to_string()).unwrap();
    let mut conf: Value = serde_json::from_str(&w.conf).unwrap();
    conf["podResourcesSocket"] = json!(kubelet.socket());
    conf["deviceInfoDir"] = json!(devinfo);
    let conf = conf.to_string();

    assert_ok("ADD", &w.plexus_with("ADD", 0, true, "p1", &uid, &conf));
    let status = w.network_status("p1");
    assert_eq!(status[0].get("device-info"), None, "{status}");
    assert_eq!(status[1]["name"], format!("{}/devnet", w.kube.kube_ns));
    assert_eq!(status[1]["device-info"], info, "{status}");
    let copy = devinfo.join(format!("cni/{}-devnet-c0-net1-device.json", w.kube.kube_ns));
    assert!(copy.exists());

    assert_ok("DEL", &w.plexus_with("DEL", 0, true, "p1", &uid, &conf));
    assert!(!copy.exists());
    assert!(dp.exists(), "the device plugin's own file is not plexus's");

    // An invalid device plugin file: device-info is optional (§5.3.8), so
    // the pod gets the network without it and a Warning event naming the
    // file (Multus only logs, `CopyDeviceInfoForCNIFromDP`).
    std::fs::write(&dp, r#"{"type": "pci", "version": "1.1.0"}"#).unwrap();
    let uid = w.pod("p2", Some("devnet"));
    let kubelet = PodResourcesServer::start(vec![pod(
        &w.kube.kube_ns,
        "p2",
        vec![container("c", &[(resource, &["dev-7"])])],
    )]);
    let mut conf: Value = serde_json::from_str(&conf).unwrap();
    conf["podResourcesSocket"] = json!(kubelet.socket());
    let conf = conf.to_string();
    assert_ok("ADD", &w.plexus_with("ADD", 1, true, "p2", &uid, &conf));
    let status = w.network_status("p2");
    assert_eq!(status[1]["name"], format!("{}/devnet", w.kube.kube_ns));
    assert_eq!(status[1].get("device-info"), None, "{status}");
    let warned: Vec<String> = w
        .events("p2")
        .into_iter()
        .filter(|(t, reason, _)| t == "Warning" && reason == "InvalidDeviceInfo")
        .map(|(_, _, message)| message)
        .collect();
    assert_eq!(warned.len(), 1, "{:?}", w.events("p2"));
    assert!(
        warned[0].contains(&dp.display().to_string())
            && warned[0].contains("goes on without device-info"),
        "{warned:?}"
    );
    assert_ok("DEL", &w.plexus_with("DEL", 1, true, "p2", &uid, &conf));
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
    w.nad("podnet", &podnet);
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

/// `plexus install --watch --cleanup --pod NS/NAME` (deploy/'s installer)
/// with `deploy/rbac.yaml`'s token, stopped with SIGTERM: whether it leaves
/// `00-plexus.conflist` (its log line says which and why).
fn installer_stopped_leaves_conflist(api: &KubeApi, pod: &str) -> (bool, String) {
    let tmp = tempfile::tempdir().unwrap();
    let (root, sa) = (tmp.path().join("host"), tmp.path().join("sa"));
    let conf_dir = root.join("etc/cni/net.d");
    std::fs::create_dir_all(&conf_dir).unwrap();
    std::fs::create_dir_all(&sa).unwrap();
    std::fs::write(
        conf_dir.join("10-cluster.conf"),
        r#"{"cniVersion": "1.0.0", "name": "c", "type": "bridge"}"#,
    )
    .unwrap();
    let env = std::fs::read_to_string(api.dir.join("env")).unwrap();
    let token = env
        .lines()
        .find_map(|l| l.strip_prefix("PLEXUS_TOKEN="))
        .expect("kube-up's env names plexus's token");
    std::fs::write(sa.join("token"), token).unwrap();
    std::fs::copy(api.dir.join("ca.crt"), sa.join("ca.crt")).unwrap();
    let mut installer = std::process::Command::new(env!("CARGO_BIN_EXE_plexus"))
        .arg("install")
        .arg("--root")
        .arg(&root)
        .arg("--service-account")
        .arg(&sa)
        .args(["--api-server", &format!("https://127.0.0.1:{}", api.port)])
        .args(["--watch", "--cleanup", "--poll-ms", "50", "--pod", pod])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let conflist = conf_dir.join("00-plexus.conflist");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !conflist.exists() {
        assert!(Instant::now() < deadline, "no conflist within 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = nix::unistd::Pid::from_raw(installer.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while installer.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the installer ran on after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = installer.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = String::from_utf8_lossy(&out.stderr);
    let last = log.lines().last().unwrap_or_default().to_string();
    (conflist.exists(), last)
}

#[test]
fn install_cleanup_keeps_the_conflist_while_its_daemonset_remains() {
    if !plexus_testkit::require(&[plexus_testkit::Feature::KubeApiServer]) {
        return;
    }
    let api = plexus_testkit::kube::api();
    let ns = api.namespace("cleanup");
    // A DaemonSet and a pod it controls (no controller-manager runs here:
    // the pod is made by hand, as the DaemonSet controller makes it).
    api.apply(&format!(
        r#"apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: plexus, namespace: {ns}}}
spec:
  selector: {{matchLabels: {{app: plexus}}}}
  template:
    metadata: {{labels: {{app: plexus}}}}
    spec: {{containers: [{{name: plexus, image: plexus}}]}}
"#
    ));
    let uid = api.kubectl(&[
        "get",
        "daemonset",
        "-n",
        &ns,
        "plexus",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    api.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: plexus-x1
  namespace: {ns}
  labels: {{app: plexus}}
  ownerReferences:
    - {{apiVersion: apps/v1, kind: DaemonSet, name: plexus, uid: "{uid}", controller: true}}
spec: {{containers: [{{name: plexus, image: plexus}}]}}
"#
    ));
    let pod = format!("{ns}/plexus-x1");

    // A rolling update stops the pod while its DaemonSet remains: the
    // conflist stays for the pods created before the next one installs.
    let (kept, log) = installer_stopped_leaves_conflist(api, &pod);
    assert!(kept, "kept while the DaemonSet remains: {log}");
    assert!(log.contains("DaemonSet remains"), "{log}");

    // `kubectl delete -k`: the DaemonSet goes (at once, background
    // cascade: the pod stays, no garbage collector runs here), so does the
    // conflist.
    api.kubectl(&["delete", "daemonset", "-n", &ns, "plexus"]);
    let (kept, log) = installer_stopped_leaves_conflist(api, &pod);
    assert!(!kept, "removed with the DaemonSet gone: {log}");
    assert!(log.contains("has no DaemonSet that remains"), "{log}");
    // A pod the API server does not know has no DaemonSet either.
    let (kept, log) = installer_stopped_leaves_conflist(api, &format!("{ns}/no-such-pod"));
    assert!(!kept, "{log}");
    api.kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}
