//! DRA (issue 49 item 1) in thick mode: the daemon reads the pods'
//! ResourceClaims from a watch cache of their namespace, started on first
//! need as the NADs' are, and the node's ResourceSlices from one watch, so
//! a warm ADD whose NADs take devices the pod's claims were allocated
//! sends no GET or LIST at all. The API server serves `resource.k8s.io/v1`
//! as custom resources and the test plays the scheduler and a DRA driver
//! (`plexus_testkit::dra`); kubelet's PodResources API is the stand-in of
//! `plexus_testkit::podresources`.

use super::*;
use plexus_testkit::dra::{self, network_device};
use plexus_testkit::podresources::{container, pod, PodResourcesServer};

const DRIVER: &str = "net.example.com";
const RES: &str = "example.com/net_a";

/// The PCI address each secondary network of `pod`'s network-status got
/// as device-info.
fn device_addresses(w: &World, pod: &str) -> Vec<String> {
    let text = w.kube.pod_field(
        pod,
        r"{.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}",
    );
    let status: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    status.as_array().unwrap()[1..]
        .iter()
        .map(|e| {
            let address = e["device-info"]["pci"]["pci-address"].as_str();
            address.unwrap_or("none").to_string()
        })
        .collect()
}

/// The NAD `net-a` (macvlan on `uplink0`, host-local on `subnet`) backed
/// by `RES`.
fn net_a(w: &World, subnet: &str) {
    let config = json!({"cniVersion": "1.0.0", "name": "net-a", "type": "macvlan",
        "master": "uplink0", "ipam": host_local(w.kube.tmp.path(), subnet, "neta")});
    w.kube.resource_nad("net-a", RES, &config);
}

/// A world on a private API server of its own, for tests that change what
/// the whole server serves or grants.
fn private_world(tag: &'static str) -> Option<World> {
    let private = move || -> &'static plexus_testkit::kube::KubeApi {
        Box::leak(Box::new(plexus_testkit::kube::private_api(tag)))
    };
    world_on(private, tag)
}

/// `pods` of net-a (on `subnet`) on the node, each in a network namespace
/// of its own, and kubelet's PodResources giving pod `i` the device
/// `dev-<i>` of `RES`.
fn pods_with_kubelet_devices(
    w: &mut World,
    subnet: &str,
    pods: &[&str],
) -> (Vec<String>, PodResourcesServer) {
    net_a(w, subnet);
    let netns: Vec<String> = pods
        .iter()
        .map(|p| w.kube.namespaces.add(&format!("{}-{p}", w.kube.node)))
        .collect();
    let names: Vec<String> = pods.iter().map(|p| p.to_string()).collect();
    let node = w.kube.node.clone();
    w.pods(&names, &node, "net-a");
    let ns = &w.kube.kube_ns;
    let kubelet = PodResourcesServer::start(
        pods.iter()
            .enumerate()
            .map(|(i, p)| {
                pod(
                    ns,
                    p,
                    vec![container("c", &[(RES, &[&format!("dev-{i}")])])],
                )
            })
            .collect(),
    );
    (netns, kubelet)
}

/// DEL of each of `pods`, in its namespace of `netns` with its configuration
/// of `confs`, succeeds; and nothing is left on the node or in the pods.
fn del_all_and_nothing_left(w: &World, pods: &[&str], netns: &[String], confs: &[&String]) {
    for ((pod_name, netns), conf) in pods.iter().zip(netns).zip(confs) {
        assert_ok("DEL", &w.call("DEL", pod_name, netns, conf));
    }
    w.assert_nothing_left(netns);
}

#[test]
fn a_warm_add_with_claims_reads_them_from_the_caches_and_sends_no_get() {
    let Some(mut w) = world("dra") else { return };
    let api = w.kube.api;
    let ns = w.kube.kube_ns.clone();
    let node = w.kube.node.clone();
    dra::serve(api);
    net_a(&w, "10.30.0.0/16");
    let devinfo = w.kube.tmp.path().join("devinfo");
    device_info_files(&devinfo, RES, 1..=4);
    // The driver's slice of this node: four devices for networks, a GPU.
    let mut devices: Vec<Value> = (1..=4)
        .map(|n| network_device(&format!("vf-{n}"), &format!("dev-{n}"), RES))
        .collect();
    devices.push(json!({"name": "gpu-0"}));
    api.apply(&dra::slice(&format!("{node}-net"), DRIVER, &node, &devices));
    let netns = [
        w.kube.namespaces.add("dra-p1"),
        w.kube.namespaces.add("dra-p2"),
    ];
    w.pods(&["p1".into(), "p2".into()], &node, "net-a,net-a");
    let uids = [w.uid("p1"), w.uid("p2")];
    let picks = [["vf-2", "vf-1", "gpu-0"], ["vf-4", "vf-3", "gpu-0"]];
    for (i, pod_name) in ["p1", "p2"].into_iter().enumerate() {
        let claim = format!("{pod_name}-vfs");
        api.apply(&dra::claim(&ns, &claim, "net", 3));
        let devices: Vec<dra::Pick> = picks[i]
            .iter()
            .map(|d| (DRIVER, node.as_str(), *d))
            .collect();
        dra::allocate(api, &ns, &claim, &devices, (pod_name, &uids[i]));
    }
    let kubelet = PodResourcesServer::start(
        ["p1", "p2"]
            .iter()
            .map(|p| pod(&ns, p, vec![container("c", &[])]))
            .collect(),
    );
    let conf = w.conf_with(json!({
        "podResourcesSocket": kubelet.socket(), "deviceInfoDir": devinfo,
    }));
    let daemon = w.daemon();

    // Cold: p1's ADD starts the caches of the namespace's claims and of
    // the node's slices (and asks once whether the group is served).
    assert_ok("ADD p1", &w.call("ADD", "p1", &netns[0], &conf));
    w.writes_delivered(&daemon);
    assert_eq!(device_addresses(&w, "p1"), ["0000:3b:00.1", "0000:3b:00.2"]);

    // Warm: p2's ADD reads everything from the caches.
    let before = api.audited().len();
    assert_ok("ADD p2", &w.call("ADD", "p2", &netns[1], &conf));
    w.writes_delivered(&daemon);
    assert_eq!(device_addresses(&w, "p2"), ["0000:3b:00.3", "0000:3b:00.4"]);
    let add: Vec<_> = api.audited()[before..]
        .iter()
        .filter(|r| r.stage == "ResponseComplete")
        .cloned()
        .collect();
    let reads: Vec<_> = add
        .iter()
        .filter(|r| r.verb == "get" || r.verb == "list")
        .filter(|r| {
            r.namespace == ns
                || r.resource == "resourceslices"
                || (r.resource == "pods" && r.name == "p2")
        })
        .collect();
    assert!(reads.is_empty(), "a warm ADD read: {reads:?}");
    assert_eq!(count(&add, "patch", "pods", "status"), 1, "{add:?}");
    assert!(w.metric("plexus_cache_objects{kind=\"resourceclaims\"}") >= 2.0);
    assert!(w.metric("plexus_cache_objects{kind=\"resourceslices\"}") >= 1.0);

    // A claim reserved for p3 but not allocated, seen by the claims'
    // watch: the daemon's ADD fails naming the claim and the field.
    let p3 = w.kube.namespaces.add("dra-p3");
    w.pods(&["p3".into()], &node, "net-a");
    dra::reserved_unallocated(api, &ns, "p3-vfs", ("p3", &w.uid("p3")));
    let kubelet = PodResourcesServer::start(
        ["p1", "p2", "p3"]
            .iter()
            .map(|p| pod(&ns, p, vec![container("c", &[])]))
            .collect(),
    );
    let conf = w.conf_with(json!({
        "podResourcesSocket": kubelet.socket(), "deviceInfoDir": devinfo,
    }));
    let want = format!("ResourceClaim {ns}/p3-vfs status.allocation: required");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = w.call("ADD", "p3", &p3, &conf);
        let e = cni_error(&out);
        let details = e["details"].as_str().unwrap_or_default().to_string();
        // Until the watch delivers the claim, the pod has no device.
        if details.contains(&want) {
            assert_eq!(e["code"], 6, "{e}");
            break;
        }
        assert!(Instant::now() < deadline, "{e}");
        std::thread::sleep(Duration::from_millis(100));
    }

    for (pod_name, netns) in ["p1", "p2"].iter().zip(&netns) {
        assert_ok("DEL", &w.call("DEL", pod_name, netns, &conf));
    }
    let mut netns = netns.to_vec();
    netns.push(p3);
    w.assert_nothing_left(&netns);
}

/// An API server before 1.34 does not serve `resource.k8s.io/v1` (a
/// private one here, without the stand-in CRDs): NADs with a resourceName
/// get kubelet's devices as before. The daemon asks once whether the group
/// is served, for its caches and its DRA driver (`--dra`, which stays off
/// and serves kubelet nothing), says once in its log that it is not, and
/// asks nothing after;
/// a plugin process (thin mode) meets one 404 per ADD and goes on silently.
#[test]
fn without_resource_k8s_io_devices_come_from_kubelet_and_dra_costs_one_request() {
    let Some(mut w) = private_world("nodra") else {
        return;
    };
    let api = w.kube.api;
    let pods = ["p1", "p2", "p3"];
    let (netns, kubelet) = pods_with_kubelet_devices(&mut w, "10.31.0.0/16", &pods);
    let conf = w.conf_with(json!({"podResourcesSocket": kubelet.socket()}));
    let dra_requests = |since: usize| -> Vec<plexus_testkit::kube::AuditedRequest> {
        api.audited()[since..]
            .iter()
            .filter(|r| r.uri.starts_with("/apis/resource.k8s.io/"))
            .filter(|r| r.stage == "ResponseComplete")
            .cloned()
            .collect()
    };
    // With plexus's DRA driver on (as deploy/ has it): the one question is
    // shared, and the driver stays off, saying so once.
    let registry = w.kube.tmp.path().join("plugins_registry");
    let before = api.audited().len();
    let daemon = w.daemon_with(&[
        "--dra",
        &format!("--dra-registry-dir={}", registry.display()),
    ]);
    for (pod_name, netns) in pods[..2].iter().zip(&netns) {
        assert_ok("ADD", &w.call("ADD", pod_name, netns, &conf));
    }
    w.writes_delivered(&daemon);
    let asked = dra_requests(before);
    assert_eq!(asked.len(), 1, "the daemon asks once: {asked:?}");
    assert_eq!(asked[0].resource, "resourceslices", "{asked:?}");
    let said = "does not serve resource.k8s.io/v1";
    assert_eq!(daemon.log().matches(said).count(), 1, "{}", daemon.log());
    let off = "the DRA driver dra.plexus.dev stays off";
    daemon.wait_until("the driver says it is off", Duration::from_secs(10), || {
        daemon.log().contains(off)
    });
    assert_eq!(daemon.log().matches(off).count(), 1, "{}", daemon.log());
    assert!(!registry.exists(), "no registration socket");

    let thin = w.conf_with(json!({"podResourcesSocket": kubelet.socket(), "daemonSocket": null}));
    let before = api.audited().len();
    assert_ok("thin ADD", &w.call("ADD", "p3", &netns[2], &thin));
    let asked = dra_requests(before);
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].resource, "resourceclaims", "{asked:?}");

    del_all_and_nothing_left(&w, &pods, &netns, &[&conf, &conf, &thin]);
}

/// A cluster that serves `resource.k8s.io/v1` under a role from before DRA
/// (plexus's of an earlier release, or a Multus one): the ADDs of
/// device-backed networks keep kubelet's devices, as before, in thick and
/// thin mode alike, and each process says once why claims are not read.
#[test]
fn a_role_without_dra_grants_keeps_kubelets_devices() {
    let Some(mut w) = private_world("dra403") else {
        return;
    };
    let api = w.kube.api;
    dra::serve(api);
    // deploy/rbac.yaml's role without its resource.k8s.io rule.
    let mut role: Value =
        serde_json::from_str(&api.kubectl(&["get", "clusterrole", "plexus", "-o", "json"]))
            .unwrap();
    let rules = role["rules"].as_array_mut().unwrap();
    let before = rules.len();
    rules.retain(|r| !r["apiGroups"].to_string().contains("resource.k8s.io"));
    assert_eq!(rules.len(), before - 4, "{role}");
    api.apply(&role.to_string());
    let pods = ["p1", "p2"];
    let (netns, kubelet) = pods_with_kubelet_devices(&mut w, "10.32.0.0/16", &pods);
    let thick = w.conf_with(json!({"podResourcesSocket": kubelet.socket()}));
    let thin = w.conf_with(json!({"podResourcesSocket": kubelet.socket(), "daemonSocket": null}));
    let daemon = w.daemon();
    assert_ok("thick ADD", &w.call("ADD", "p1", &netns[0], &thick));
    let said = "may not list resource.k8s.io/v1 ResourceSlices";
    assert_eq!(daemon.log().matches(said).count(), 1, "{}", daemon.log());
    // A plugin process meets the 403 on the claims' LIST, warns, goes on.
    assert_ok("thin ADD", &w.call("ADD", "p2", &netns[1], &thin));
    del_all_and_nothing_left(&w, &pods, &netns, &[&thick, &thin]);
}
