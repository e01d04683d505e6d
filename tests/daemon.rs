//! Thick mode against the real thing: `plexus daemon` run in a node
//! namespace this test creates, watching a real kube-apiserver (testkit::kube,
//! through a relay) with the token `deploy/rbac.yaml` binds, and the
//! `plexus` binary exec'd as kubelet's runtime execs it, a shim forwarding
//! to the daemon's socket. API requests are counted from the API server's
//! side (its audit log), memory from the daemon's /proc status.

mod e2e_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e_support::*;
use plexus_testkit::kube::{status_entries, AuditedRequest};
use plexus_testkit::process::LoggedChild;
use serde_json::{json, Value};

/// The daemon's memory bound in a boot storm (issue 12).
const RSS_LIMIT_KB: u64 = 64 * 1024;

/// A node namespace with a relay to the API server, a Kubernetes namespace
/// with the NAD `macnet` (macvlan on `uplink0`, host-local /16), plexus's
/// thick conf, and the daemon.
struct World {
    kube: KubeNode,
    conf: String,
    metrics_port: u16,
}

fn world(tag: &str) -> Option<World> {
    let kube = kube_node(tag, "pxd", |tmp| {
        json!({"cniVersion": "1.0.0", "name": "macnet", "type": "macvlan",
            "master": "uplink0", "ipam": host_local(tmp, "10.20.0.0/16", "mac")})
    })?;
    let tmp = kube.tmp.path();
    let conf = json!({
        "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
        "kubeconfig": kube.api.plexus_kubeconfig(),
        "cniDir": tmp.join("cache"), "confDir": tmp.join("net.d"),
        "daemonSocket": tmp.join("run/plexus.sock"),
        "delegates": [{"cniVersion": "1.0.0", "name": "podnet", "type": "bridge", "bridge": "br-pod",
                       "isGateway": true, "ipam": host_local(tmp, "10.10.0.0/16", "pod")}],
    })
    .to_string();
    // Distinct per test binary and test, within the node's own loopback.
    static PORT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(19100);
    let metrics_port = PORT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Some(World {
        kube,
        conf,
        metrics_port,
    })
}

/// A running `plexus daemon`, killed on drop.
type Daemon = LoggedChild;

impl World {
    fn socket(&self) -> PathBuf {
        self.kube.tmp.path().join("run/plexus.sock")
    }

    /// Start the daemon in the node namespace and wait until /readyz says
    /// so (its caches synced), at most 30 s.
    fn daemon(&self) -> Daemon {
        self.daemon_with(&[])
    }

    /// The daemon's kubeconfig: the test's own copy when it made one
    /// ([`World::own_kubeconfig`]), else the shared API server's.
    fn kubeconfig(&self) -> PathBuf {
        let own = self.kube.tmp.path().join("plexus.kubeconfig");
        if own.exists() {
            own
        } else {
            self.kube.api.plexus_kubeconfig()
        }
    }

    /// A copy of the plexus kubeconfig that this test may rewrite.
    fn own_kubeconfig(&self) -> PathBuf {
        let own = self.kube.tmp.path().join("plexus.kubeconfig");
        std::fs::copy(self.kube.api.plexus_kubeconfig(), &own).unwrap();
        own
    }

    /// The daemon's status outbox (`--state-dir`/status).
    fn outbox(&self) -> PathBuf {
        self.kube.tmp.path().join("state/status")
    }

    /// [`World::daemon`] with `extra` arguments.
    fn daemon_with(&self, extra: &[&str]) -> Daemon {
        static STARTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = self.kube.tmp.path().join(format!("daemon-{n}.log"));
        let mut daemon = Command::new("ip");
        daemon
            .args(["netns", "exec", &self.kube.node, PLEXUS, "daemon"])
            .arg("--socket")
            .arg(self.socket())
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(["--node-name", &self.kube.node])
            .arg(format!("--metrics-address=127.0.0.1:{}", self.metrics_port))
            .args(["--api-timeout", "5"])
            .arg("--state-dir")
            .arg(self.kube.tmp.path().join("state"))
            .args(extra)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        let daemon = Daemon::spawn(&mut daemon, log);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.http("/readyz").0 == 200 {
                return daemon;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon was not ready within 30 s: {}",
                daemon.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// GET `path` on the daemon's HTTP port: (status, body); 0 when nothing
    /// answers.
    fn http(&self, path: &str) -> (u16, String) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.kube.node, "curl", "-s", "-m", "5"])
            .args(["-w", "\n%{http_code}"])
            .arg(format!("http://127.0.0.1:{}{path}", self.metrics_port))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }

    /// The value of the metric line starting with `prefix` (0 when absent).
    fn metric(&self, prefix: &str) -> f64 {
        let (_, text) = self.http("/metrics");
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    }

    /// Pods `names` on `node`, each selecting `selection`, in one apply.
    fn pods(&self, names: &[String], node: &str, selection: &str) {
        let mut manifest = String::new();
        for name in names {
            manifest.push_str(&format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {}\n  \
                 annotations: {{k8s.v1.cni.cncf.io/networks: \"{selection}\"}}\n\
                 spec: {{nodeName: {node}, containers: [{{name: c, image: busybox}}]}}\n---\n",
                self.kube.kube_ns
            ));
        }
        self.kube.api.apply(&manifest);
    }

    /// The shim, as the runtime execs it, for pod `pod` in namespace `netns`.
    fn call(&self, command: &str, pod: &str, netns: &str, conf: &str) -> Output {
        let args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={pod};K8S_POD_INFRA_CONTAINER_ID=c-{pod}",
            self.kube.kube_ns
        );
        let netns = format!("/var/run/netns/{netns}");
        plexus_at(
            &self.kube.node,
            command,
            &format!("c-{pod}"),
            &netns,
            "eth0",
            &args,
            conf,
        )
    }

    /// Wait until the daemon delivered every queued status write (at most
    /// 30 s), and check the outbox is empty.
    fn writes_delivered(&self, daemon: &Daemon) {
        within_30s("writes still queued", daemon, || {
            self.metric("plexus_status_writes_queued") <= 0.0
        });
        let left: Vec<_> = std::fs::read_dir(self.outbox())
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{left:?}");
    }

    /// The uid of pod `name`.
    fn uid(&self, name: &str) -> String {
        self.kube.api.kubectl(&[
            "get",
            "pod",
            name,
            "-n",
            &self.kube.kube_ns,
            "-o",
            "jsonpath={.metadata.uid}",
        ])
    }

    /// Every pod's network-status, by pod name, in one list.
    fn network_statuses(&self) -> Vec<(String, Value)> {
        let list: Value = serde_json::from_str(&self.kube.api.kubectl(&[
            "get",
            "pods",
            "-n",
            &self.kube.kube_ns,
            "-o",
            "json",
        ]))
        .unwrap();
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| {
                let status =
                    p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"].as_str()?;
                Some((
                    p["metadata"]["name"].as_str().unwrap().to_string(),
                    serde_json::from_str(status).unwrap(),
                ))
            })
            .collect()
    }

    /// Nothing plexus made is left: no record, no address allocation, no
    /// link in the node beyond its own and the bridge, none in the pods.
    fn assert_nothing_left(&self, pods: &[String]) {
        assert_nothing_left(self.kube.tmp.path());
        let mut node_links = link_names(&self.kube.node);
        node_links.sort();
        assert_eq!(node_links, ["br-pod", "lo", "uplink0", "uplink0p"]);
        for pod in pods {
            assert_eq!(link_names(pod), ["lo"], "{pod}");
        }
    }
}

fn count(requests: &[AuditedRequest], verb: &str, resource: &str, subresource: &str) -> usize {
    requests
        .iter()
        .filter(|r| r.verb == verb && r.resource == resource && r.subresource == subresource)
        .count()
}

/// Run `calls` at once, one thread each; their outputs in order.
fn all_at_once<F>(calls: usize, call: F) -> Vec<Output>
where
    F: Fn(usize) -> Output + Send + Sync + 'static,
{
    let call = Arc::new(call);
    let threads: Vec<_> = (0..calls)
        .map(|i| {
            let call = call.clone();
            std::thread::spawn(move || call(i))
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// `command` for every pod `names[i]` in `netns[i]` at once, through the
/// daemon; each must succeed. Their outputs in order.
fn storm_succeeds(
    w: &Arc<World>,
    command: &'static str,
    names: &[String],
    netns: &[String],
) -> Vec<Output> {
    let world = w.clone();
    let (n, ns) = (names.to_vec(), netns.to_vec());
    let outs = all_at_once(names.len(), move |i| {
        world.call(command, &n[i], &ns[i], &world.conf)
    });
    for (i, out) in outs.iter().enumerate() {
        assert_ok(&format!("{command} {}", names[i]), out);
    }
    outs
}

fn cluster_ip(out: &Output) -> String {
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    result["ips"][0]["address"].as_str().unwrap().to_string()
}

#[test]
fn a_warm_add_sends_no_get_and_one_patch() {
    let Some(mut w) = world("warm") else { return };
    let pod_ns = w.kube.namespaces.add("warm-p");
    w.pods(
        &["p1".into()],
        &w.kube.node.clone(),
        "macnet@net1,macnet@net2,macnet@net3",
    );
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
    let pod_ns = w.kube.namespaces.add("sync-p");
    w.pods(&["p".into()], &w.kube.node.clone(), "macnet");
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
    let pod_ns = w.kube.namespaces.add("down-p");
    w.pods(&["p".into()], &w.kube.node.clone(), "macnet");
    // No daemon listens: daemonFallback "thin" (the default) runs in-process.
    let out = w.call("ADD", "p", &pod_ns, &w.conf);
    assert_ok("ADD without a daemon", &out);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("running the call in this process"), "{said}");

    // "fail": code 11 naming the socket, without waiting.
    let mut conf: Value = serde_json::from_str(&w.conf).unwrap();
    conf["daemonFallback"] = "fail".into();
    let failing = conf.to_string();
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
    let plugin = bin.join("stubborn");
    std::fs::write(&plugin, script).unwrap();
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    w.kube.api.apply(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
         metadata: {{name: stubborn, namespace: {}}}\nspec:\n  config: '{}'\n",
        w.kube.kube_ns,
        json!({"cniVersion": "1.0.0", "name": "stubborn", "type": "stubborn"})
    ));
    let mut conf: Value = serde_json::from_str(&w.conf).unwrap();
    conf["binDir"] = bin.display().to_string().into();
    let conf = conf.to_string();
    let pod_ns = w.kube.namespaces.add("delfail-p");
    w.pods(&["p".into()], &w.kube.node.clone(), "stubborn");
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

/// `pods` pod namespaces and pod objects on the node, named `<tag>-<i>`.
fn storm_pods(w: &mut World, tag: &str, pods: usize) -> (Vec<String>, Vec<String>) {
    let names: Vec<String> = (0..pods).map(|i| format!("{tag}-{i}")).collect();
    let netns: Vec<String> = names.iter().map(|n| w.kube.namespaces.add(n)).collect();
    w.pods(&names, &w.kube.node.clone(), "macnet");
    (names, netns)
}

#[test]
fn a_boot_storm_of_200_pods_gets_distinct_addresses_within_the_memory_bound() {
    const PODS: usize = 200;
    let Some(mut w) = world("storm") else { return };
    let (names, netns) = storm_pods(&mut w, "s", PODS);
    let daemon = w.daemon();
    let w = Arc::new(w);
    let before = w.kube.requests().len();

    let added = storm_succeeds(&w, "ADD", &names, &netns);
    w.writes_delivered(&daemon);
    // No address twice, on the cluster network (the results) or on macnet
    // (the network-status the daemon wrote).
    let mut cluster: Vec<String> = added.iter().map(cluster_ip).collect();
    cluster.sort();
    cluster.dedup();
    assert_eq!(cluster.len(), PODS);
    let statuses = w.network_statuses();
    assert_eq!(statuses.len(), PODS);
    let mut macnet: Vec<String> = statuses
        .iter()
        .map(|(_, s)| s[1]["ips"][0].as_str().unwrap().to_string())
        .collect();
    macnet.sort();
    macnet.dedup();
    assert_eq!(macnet.len(), PODS);

    // Warm: no GET per ADD at all, one PATCH each.
    let add = w.kube.requests()[before..].to_vec();
    assert_eq!(count(&add, "get", "pods", ""), 0);
    assert_eq!(count(&add, "get", "network-attachment-definitions", ""), 0);
    assert_eq!(count(&add, "patch", "pods", "status"), PODS);

    storm_succeeds(&w, "DEL", &names, &netns);
    let peak = daemon.peak_rss_kb();
    eprintln!(
        "daemon peak RSS over {PODS} ADDs and DELs at once: {} KiB",
        peak
    );
    assert!(peak < RSS_LIMIT_KB, "peak RSS {peak} KiB");
    w.assert_nothing_left(&netns);
}

#[test]
fn a_daemon_killed_mid_storm_leaks_nothing_once_the_runtime_deletes() {
    const PODS: usize = 60;
    let Some(mut w) = world("restart") else {
        return;
    };
    let (names, netns) = storm_pods(&mut w, "r", PODS);
    let mut daemon = w.daemon();
    let w = Arc::new(w);

    let world = w.clone();
    let (n, ns) = (names.clone(), netns.clone());
    let storm = std::thread::spawn(move || {
        all_at_once(PODS, move |i| {
            // Spread over the kill and the restart.
            std::thread::sleep(Duration::from_millis(20 * i as u64));
            world.call("ADD", &n[i], &ns[i], &world.conf)
        })
    });
    // SIGKILL while calls are in flight, and a new daemon on the socket.
    let deadline = Instant::now() + Duration::from_secs(30);
    while w.metric("plexus_cni_calls_total{command=\"ADD\",result=\"ok\"}") < 5.0
        || w.metric("plexus_cni_calls_in_flight") < 1.0
    {
        assert!(
            Instant::now() < deadline,
            "no ADD finished: {}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    daemon.kill();
    let _restarted = w.daemon();
    let added = storm.join().unwrap();

    // Each ADD succeeded or failed with a CNI error; a lost one says so.
    let mut lost = 0;
    for (i, out) in added.iter().enumerate() {
        if !out.status.success() {
            let e = cni_error(out);
            assert!(e["code"] == 11 || e["code"] == 5, "{}: {e}", names[i]);
            lost += 1;
        }
    }
    eprintln!("{lost} of {PODS} ADDs lost to the kill");
    // The runtime DELs every sandbox it set up (failed ADDs included).
    storm_succeeds(&w, "DEL", &names, &netns);
    w.assert_nothing_left(&netns);
}

#[test]
fn sigterm_stops_the_daemon_and_takes_its_socket_along() {
    let Some(w) = world("term") else { return };
    let mut daemon = w.daemon();
    assert!(w.socket().exists());
    // Root-only: the socket 0600 in a directory only root may enter.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&w.socket()), 0o600);
    assert_eq!(mode(w.socket().parent().unwrap()), 0o700);
    // A second daemon on the same socket is refused, the first untouched.
    let second = Command::new(PLEXUS)
        .args(["daemon", "--metrics-address", "none", "--socket"])
        .arg(w.socket())
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("another daemon is serving"),
        "{second:?}"
    );
    assert_eq!(w.http("/readyz").0, 200);

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = daemon.exit_within(Duration::from_secs(10));
    assert!(status.success(), "{}", daemon.log());
    assert!(!w.socket().exists());
}

/// The installer rewrites the kubeconfig when the service account's token
/// changes (`kubectl delete -k deploy/` then `apply -k`: a new account).
/// A daemon that started on the old file stops as on SIGTERM once the file
/// changes, so kubelet starts it again on the new credentials, instead of
/// serving on unready with a token the API server refuses.
#[test]
fn a_rewritten_kubeconfig_stops_the_daemon_to_be_started_on_it() {
    let Some(w) = world("kcfg") else { return };
    let kubeconfig = w.own_kubeconfig();
    let mut daemon = w.daemon();
    // Written again unchanged: not a change.
    std::fs::copy(w.kube.api.plexus_kubeconfig(), &kubeconfig).unwrap();
    std::thread::sleep(Duration::from_secs(5));
    assert!(daemon.running(), "{}", daemon.log());
    // New content (the installer's rewrite with another token; here the
    // same credentials, re-serialized).
    let mut text = std::fs::read_to_string(&kubeconfig).unwrap();
    text.push('\n');
    std::fs::write(&kubeconfig, text).unwrap();
    let status = daemon.exit_within(Duration::from_secs(15));
    assert!(status.success(), "{}", daemon.log());
    assert!(
        daemon.log().contains("the kubeconfig changed"),
        "{}",
        daemon.log()
    );
    assert!(!w.socket().exists());
    // Started again, it serves on the new file.
    let _again = w.daemon();
    assert_eq!(w.http("/readyz").0, 200);
}

// Dynamic networks (issue 26): the daemon reconciles a running pod's
// secondary attachments with its selection annotation (multi-net-spec §4).

impl World {
    /// Set pod `pod`'s selection annotation to `value`.
    fn annotate(&self, pod: &str, value: &str) {
        self.kube.api.kubectl(&[
            "annotate",
            "--overwrite",
            "pod",
            pod,
            "-n",
            &self.kube.kube_ns,
            &format!("k8s.v1.cni.cncf.io/networks={value}"),
        ]);
    }

    /// Pod `pod`'s network-status: its entries' `(name, interface)`.
    fn status_of(&self, pod: &str) -> Vec<(String, String)> {
        let text = self.kube.api.kubectl(&[
            "get",
            "pod",
            pod,
            "-n",
            &self.kube.kube_ns,
            "-o",
            "jsonpath={.metadata.annotations.k8s\\.v1\\.cni\\.cncf\\.io/network-status}",
        ]);
        status_entries(&text)
    }

    /// Whether pod `pod` has an event of `kind` for `reason` whose message
    /// contains `text`.
    fn has_event(&self, pod: &str, kind: &str, reason: &str, text: &str) -> bool {
        pod_events(self.kube.api, &self.kube.kube_ns, pod)
            .iter()
            .any(|(t, r, m)| t == kind && r == reason && m.contains(text))
    }

    /// Addresses host-local holds for `macnet` (its allocation files).
    fn macnet_leases(&self) -> usize {
        files_in(&self.kube.tmp.path().join("ipam/mac"))
            .into_iter()
            .filter(|f| !f.ends_with("lock") && !f.contains("last_reserved_ip"))
            .count()
    }
}

/// Poll `done` every 20 ms for at most 30 s.
#[track_caller]
fn within_30s(what: &str, daemon: &Daemon, done: impl FnMut() -> bool) {
    daemon.wait_until(what, Duration::from_secs(30), done);
}

fn sorted_links(netns: &str) -> Vec<String> {
    let mut links = link_names(netns);
    links.sort();
    links
}

/// A daemon started with `extra` arguments, and pod `p1` selecting
/// `macnet@net1` ADDed through it, its network-status written: the world,
/// the pod's netns and the daemon.
fn running_pod(tag: &str, extra: &[&str]) -> Option<(World, String, Daemon)> {
    let mut w = world(tag)?;
    let pod_ns = w.kube.namespaces.add(&format!("{tag}-p"));
    w.pods(&["p1".into()], &w.kube.node.clone(), "macnet@net1");
    let daemon = w.daemon_with(extra);
    assert_ok("ADD", &w.call("ADD", "p1", &pod_ns, &w.conf));
    w.writes_delivered(&daemon);
    Some((w, pod_ns, daemon))
}

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
    w.kube.api.apply(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
         metadata: {{name: badnet, namespace: {}}}\nspec:\n  config: '{badnet}'\n",
        w.kube.kube_ns
    ));
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

// Thin mode (issue 26): the runtime's exec of plexus serves the call itself
// (no `daemonSocket`), and the daemon runs beside it, as deploy/ with
// `testkit/node-deploy --thin` runs it. The plugin process notes the
// sandbox it ADDed under `cniDir`/sandboxes, and holds the sandbox's lock
// there for each call, as the daemon's hot-plug does.

impl World {
    /// The conf without `daemonSocket`: every call runs in the plugin process.
    fn thin_conf(&self) -> String {
        let mut conf: Value = serde_json::from_str(&self.conf).unwrap();
        conf.as_object_mut().unwrap().remove("daemonSocket");
        conf.to_string()
    }

    /// `slownet`'s conf (`pxslow`, which marks its start in binDir and
    /// sleeps 2 s on ADD, then macvlan on uplink0 with its own host-local),
    /// and the binDir with pxslow.
    fn slow_chain(&self) -> (Value, PathBuf) {
        let bin = self.kube.tmp.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let slow = bin.join("pxslow");
        std::fs::write(
            &slow,
            "#!/usr/bin/python3\nimport json, os, sys, time\n\
             conf = json.load(sys.stdin)\n\
             if os.environ.get('CNI_COMMAND') == 'ADD':\n\
             \x20   open(os.path.join(os.path.dirname(sys.argv[0]), 'started'), 'w').close()\n\
             \x20   time.sleep(2)\n\
             \x20   print(json.dumps({'cniVersion': conf['cniVersion']}))\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&slow, std::fs::Permissions::from_mode(0o755)).unwrap();
        let conf = json!({"cniVersion": "1.0.0", "name": "slownet", "plugins": [
            {"type": "pxslow"},
            {"type": "macvlan", "master": "uplink0",
             "ipam": host_local(self.kube.tmp.path(), "10.22.0.0/16", "slow")}]});
        (conf, bin)
    }

    /// Where plugin processes note sandboxes and take their locks.
    fn shared_sandboxes(&self) -> Vec<String> {
        let mut files = files_in(&self.kube.tmp.path().join("cache/sandboxes"));
        files.sort();
        files
    }
}

#[test]
fn pods_a_plugin_process_added_are_hot_plugged_and_its_del_racing_a_hotplug_leaks_nothing() {
    let Some(mut w) = world("hpthin") else {
        return;
    };
    let pod_ns = w.kube.namespaces.add("hpthin-p");
    w.pods(&["p1".into()], &w.kube.node.clone(), "macnet@net1");
    // The thin conf, with the binDir of slownet's slow plugin (below).
    let (slow_conf, bin) = w.slow_chain();
    let mut thin: Value = serde_json::from_str(&w.thin_conf()).unwrap();
    thin["binDir"] = json!(bin);
    let thin = thin.to_string();
    w.kube.api.apply(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
         metadata: {{name: slownet, namespace: {}}}\nspec:\n  config: '{slow_conf}'\n",
        w.kube.kube_ns
    ));
    // ADDed with no daemon running at all; the daemon started later finds it.
    assert_ok("ADD", &w.call("ADD", "p1", &pod_ns, &thin));
    assert_eq!(w.shared_sandboxes(), ["c-p1.json", "c-p1.lock"]);
    let cni_dir = w.kube.tmp.path().join("cache");
    let daemon = w.daemon_with(&["--cni-dir", cni_dir.to_str().unwrap()]);

    w.annotate("p1", "macnet@net1,macnet");
    within_30s("net2 attached", &daemon, || {
        sorted_links(&pod_ns) == ["eth0", "lo", "net1", "net2"] && w.status_of("p1").len() == 3
    });
    within_30s("AddedInterface", &daemon, || {
        w.has_event("p1", "Normal", "AddedInterface", "Add net2 [")
    });
    // A CHECK by a plugin process takes the same lock, and leaves the note.
    assert_ok("CHECK", &w.call("CHECK", "p1", &pod_ns, &thin));
    assert_eq!(w.shared_sandboxes(), ["c-p1.json", "c-p1.lock"]);

    // The plugin process's DEL racing a hot-plug in the middle of a chain
    // (`slownet`: a plugin exec'd from binDir that takes 2 s to ADD, then
    // macvlan): it waits for the daemon's pass to end (the lock), then DELs
    // every attachment, hot-plugged or not; the note and the lock leave
    // with it. Unserialized, the rest of the chain would run after the DEL:
    // a leaked link, address and record.
    w.annotate("p1", "macnet@net1,macnet@net2,slownet@net3");
    within_30s("slownet's chain started", &daemon, || {
        bin.join("started").exists()
    });
    let started = Instant::now();
    assert_ok("DEL", &w.call("DEL", "p1", &pod_ns, &thin));
    let waited = started.elapsed();
    eprintln!("the plugin's DEL took {waited:?}");
    assert!(
        waited > Duration::from_millis(500),
        "the DEL did not wait: {waited:?}"
    );
    assert_eq!(link_names(&pod_ns), ["lo"]);
    // A pass woken after the DEL finds no sandbox, and makes no lock.
    w.annotate("p1", "macnet@net1");
    std::thread::sleep(Duration::from_millis(500));
    w.assert_nothing_left(std::slice::from_ref(&pod_ns));
    assert_eq!(w.macnet_leases(), 0);
    assert!(
        w.shared_sandboxes().is_empty(),
        "{:?}",
        w.shared_sandboxes()
    );
    // DEL is idempotent, also for the lock.
    assert_ok("DEL", &w.call("DEL", "p1", &pod_ns, &thin));
    assert!(
        w.shared_sandboxes().is_empty(),
        "{:?}",
        w.shared_sandboxes()
    );
    drop(daemon);
}

// IPAMClaims (multi-net-spec §8, §4.1.2.1.11) on hot-plugged attachments:
// as at ADD and DEL.

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
    w.kube.api.apply(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
         metadata: {{name: vmnet, namespace: {ns}}}\nspec:\n  config: '{vmnet}'\n---\n\
         apiVersion: k8s.cni.cncf.io/v1alpha1\nkind: IPAMClaim\n\
         metadata: {{name: vm-a.vmnet, namespace: {ns}}}\n\
         spec: {{network: vmnet, interface: net2}}\n",
        ns = w.kube.kube_ns
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

#[test]
fn a_hot_plugged_selection_never_takes_the_auxiliary_chains_name() {
    // Multus's auxiliary chain (src/plan/auxiliary.rs) runs after the pod's
    // networks as `net<position>`: here net2, after eth0 and net1. A
    // selection added without `interface` gets the next name free of it.
    let Some(mut w) = world("hpaux") else {
        return;
    };
    let pod_ns = w.kube.namespaces.add("hpaux-p");
    vendor_chain(&w.kube.tmp.path().join("net.d"));
    let mut conf: Value = serde_json::from_str(&w.conf).unwrap();
    conf["auxiliaryCNIChainName"] = json!("vendor-chain");
    w.conf = conf.to_string();
    w.pods(&["p1".into()], &w.kube.node.clone(), "macnet@net1");
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
