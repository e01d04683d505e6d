//! plexus on a cluster: the `plexus` binary, invoked as kubelet's runtime
//! invokes it inside a node namespace this test creates, reads the pod and
//! its NetworkAttachmentDefinitions from a real kube-apiserver (testkit::kube,
//! reached through a relay into the node namespace), with the token of its
//! service account bound by `deploy/rbac.yaml` only, so a missing verb fails
//! here. It writes network-status (multi-net-spec §5) and events back, and
//! its requests are counted from the API server's audit log.

mod e2e_support;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use e2e_support::*;
use plexus_testkit::kube::{api, AuditedRequest, KubeApi, Relay};
use plexus_testkit::Feature;
use serde_json::{json, Value};

/// One test's world: a node namespace with a relay to the API server, two
/// pod namespaces, a Kubernetes namespace with the NAD `macnet` (macvlan on
/// the node's `uplink0`, host-local), and plexus's conf.
struct World {
    api: &'static KubeApi,
    kube_ns: String,
    node: String,
    pods: [String; 2],
    relay: Relay,
    conf: String,
    tmp: tempfile::TempDir,
    _namespaces: Namespaces,
}

fn world(tag: &str) -> Option<World> {
    if !plexus_testkit::require(&[
        Feature::Root,
        Feature::ReferencePlugins,
        Feature::KubeApiServer,
    ]) {
        return None;
    }
    let api = api();
    let tmp = tempfile::tempdir().unwrap();
    let mut namespaces = Namespaces(Vec::new());
    let (node, pods) = node_and_pods(&mut namespaces, tag);
    let relay = Relay::into_netns(Path::new(&format!("/var/run/netns/{node}")), api.port).unwrap();
    let kube_ns = api.namespace(&format!("pxk-{tag}"));
    let macnet = macvlan_network(tmp.path());
    api.apply(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
         metadata: {{name: macnet, namespace: {kube_ns}}}\nspec:\n  config: '{macnet}'\n"
    ));
    let conf = json!({
        "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
        "kubeconfig": api.plexus_kubeconfig(),
        "cniDir": tmp.path().join("cache"), "confDir": tmp.path().join("net.d"),
        "apiTimeout": 5,
        "delegates": [{"cniVersion": "1.0.0", "name": "podnet", "type": "bridge", "bridge": "br-pod",
                       "isGateway": true, "ipam": host_local(tmp.path(), "10.10.0.0/24", "pod")}],
    })
    .to_string();
    Some(World {
        api,
        kube_ns,
        node,
        pods,
        relay,
        conf,
        tmp,
        _namespaces: namespaces,
    })
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
        self.api.apply(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {}\n{annotations}\
             spec: {{containers: [{{name: c, image: busybox}}]}}\n",
            self.kube_ns
        ));
        self.api.kubectl(&[
            "get",
            "pod",
            "-n",
            &self.kube_ns,
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
            format!("/var/run/netns/{}", self.pods[i])
        } else {
            String::new()
        };
        let mut args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={pod};K8S_POD_INFRA_CONTAINER_ID=c{i}",
            self.kube_ns
        );
        if !uid.is_empty() {
            args.push_str(&format!(";K8S_POD_UID={uid}"));
        }
        plexus_at(
            &self.node,
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
        let text = self.api.kubectl(&[
            "get",
            "pod",
            "-n",
            &self.kube_ns,
            pod,
            "-o",
            r"jsonpath={.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}",
        ]);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"))
    }

    /// The events of the pod: `(type, reason, message)`.
    fn events(&self, pod: &str) -> Vec<(String, String, String)> {
        let v: Value = serde_json::from_str(&self.api.kubectl(&[
            "get",
            "events",
            "-n",
            &self.kube_ns,
            "--field-selector",
            &format!("involvedObject.name={pod}"),
            "-o",
            "json",
        ]))
        .unwrap();
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                (s("type"), s("reason"), s("message"))
            })
            .collect()
    }

    /// plexus's requests in this test's Kubernetes namespace.
    fn requests(&self) -> Vec<AuditedRequest> {
        self.api
            .audited()
            .into_iter()
            .filter(|r| r.namespace == self.kube_ns && r.stage == "ResponseComplete")
            .collect()
    }
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
            .map(|s| s.replace("NS", &w.kube_ns))
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
    assert_eq!(link_names(&w.pods[0]), ["lo", "eth0", "net7"]);
    assert_eq!(link_names(&w.pods[1]), ["lo", "eth0", "net3"]);

    // §5: network-status, read back from the API server.
    let status = w.network_status("p1");
    let net7 = addresses(&w.pods[0], "net7");
    let eth0 = addresses(&w.pods[0], "eth0");
    assert_eq!(status.as_array().unwrap().len(), 2, "{status}");
    assert_eq!(status[0]["name"], "podnet");
    assert_eq!(status[0]["interface"], "eth0");
    assert_eq!(status[0]["default"], true);
    assert_eq!(status[0]["ips"], json!([format!("{}/24", eth0[0])]));
    assert_eq!(status[1]["name"], format!("{}/macnet", w.kube_ns));
    assert_eq!(status[1]["interface"], "net7");
    assert_eq!(status[1]["default"], false);
    assert_eq!(status[1]["ips"], json!([format!("{}/24", net7[0])]));
    assert!(status[1]["mac"].as_str().is_some_and(|m| m.len() == 17));
    assert_eq!(w.network_status("p2")[1]["interface"], "net3");

    // Events, as `kubectl describe pod` lists them.
    let events = w.events("p1");
    for (ifname, ip, network) in [
        ("eth0", &eth0[0], "podnet".to_string()),
        ("net7", &net7[0], format!("{}/macnet", w.kube_ns)),
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
    let requests = w.requests();
    assert_eq!(count(&requests, "get", "pods", ""), 2, "{requests:#?}");
    assert_eq!(
        count(&requests, "get", "network-attachment-definitions", ""),
        2
    );
    assert_eq!(count(&requests, "patch", "pods", "status"), 2);
    assert_eq!(count(&requests, "create", "events", ""), 4);
    assert_eq!(requests.len(), 10, "nothing else: {requests:#?}");

    // DEL needs no API server: it works from plexus's record, at once.
    w.relay.stop();
    for (i, pod) in ["p1", "p2"].iter().enumerate() {
        for netns in [true, false] {
            let t0 = Instant::now();
            assert_ok("DEL", &w.plexus("DEL", i, netns, pod, ""));
            assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        }
        assert_eq!(link_names(&w.pods[i]), ["lo"]);
    }
    assert_eq!(w.requests().len(), 10, "DEL made no request");
    assert_nothing_left(w.tmp.path());
}

#[test]
fn a_recreated_pod_or_a_deleted_one_is_not_the_pod_of_the_call() {
    let Some(w) = world("uid") else { return };
    let uid = w.pod("p1", Some("macnet"));
    // K8S_POD_UID of an earlier pod of that name: it was re-created.
    let out = w.plexus("ADD", 0, true, "p1", "0b4c5e4e-0000-0000-0000-000000000000");
    let e = cni_error(&out);
    assert_eq!(e["code"], 3, "{e}");
    let details = e["details"].as_str().unwrap();
    assert!(
        details.contains(&format!("pod {}/p1", w.kube_ns)) && details.contains("re-created"),
        "{details}"
    );
    assert_eq!(link_names(&w.pods[0]), ["lo"], "nothing was attached");
    assert_ok("DEL", &w.plexus("DEL", 0, true, "p1", "0b4c5e4e"));

    // A pod that does not exist.
    let out = w.plexus("ADD", 0, true, "gone", "");
    let e = cni_error(&out);
    assert_eq!(e["code"], 3, "{e}");
    assert!(
        e["details"].as_str().unwrap().contains("does not exist"),
        "{e}"
    );

    // The pod deleted after its ADD: DEL still works, from the record.
    assert_ok("ADD", &w.plexus("ADD", 0, true, "p1", &uid));
    w.api
        .kubectl(&["delete", "pod", "-n", &w.kube_ns, "p1", "--wait=false"]);
    assert_ok("DEL", &w.plexus("DEL", 0, true, "p1", &uid));
    assert_eq!(link_names(&w.pods[0]), ["lo"]);
    assert_nothing_left(w.tmp.path());
}

#[test]
fn api_errors_name_the_object_and_the_reason_and_leave_nothing() {
    let Some(mut w) = world("err") else { return };
    let uid = w.pod("p1", Some("macnet"));
    // A token the API server does not know.
    let bad = w.tmp.path().join("bad.kubeconfig");
    let text = std::fs::read_to_string(w.api.plexus_kubeconfig()).unwrap();
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
        format!("pod {}/p1: unauthorized: Unauthorized", w.kube_ns)
    );

    // A NAD the pod selects that does not exist (§3.4.1 rule 4).
    let uid2 = w.pod("p2", Some("nosuchnet"));
    let e = cni_error(&w.plexus("ADD", 1, true, "p2", &uid2));
    assert_eq!(e["code"], 100, "{e}");
    assert!(
        e["details"]
            .as_str()
            .unwrap()
            .contains(&format!("{}/nosuchnet does not exist", w.kube_ns)),
        "{e}"
    );

    // The API server unreachable: a bounded, retryable failure.
    w.relay.stop();
    let t0 = Instant::now();
    let e = cni_error(&w.plexus("ADD", 0, true, "p1", &uid));
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    assert_eq!(e["code"], 11, "{e}");
    assert!(
        e["details"]
            .as_str()
            .unwrap()
            .starts_with(&format!("pod {}/p1: ", w.kube_ns)),
        "{e}"
    );
    for i in 0..2 {
        assert_ok("DEL", &w.plexus("DEL", i, true, "p1", ""));
        assert_eq!(link_names(&w.pods[i]), ["lo"]);
    }
    assert_nothing_left(w.tmp.path());
}
