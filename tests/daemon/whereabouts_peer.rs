//! Issue 45: plexus and the real whereabouts binary (built by
//! `.ci/whereabouts`) share one dual-stack network, an IPv4 /24 and the
//! IPv6 /64 operators use, in thick and in thin mode.
//!
//! - Every entry survives the other's writes: whereabouts reads keys with
//!   `strconv.ParseInt(offset, 10, 64)` (`toIPReservationList`) and writes
//!   back only what it read, so plexus keeps its keys below 2^63; and
//!   whereabouts logs no "Error decoding ip offset".
//! - Each DELs the other's pods, and nothing is left. whereabouts' pods are
//!   added as Multus added them before the migration: the reference macvlan
//!   exec'd with whereabouts as its IPAM. plexus never saw them, and its DEL
//!   gives their addresses back at once (`whereabouts::unrecorded`).
//! - An entry an older plexus wrote past 2^63 is erased by whereabouts'
//!   next write, and written back by the reconciler while its pod lives.

use std::collections::BTreeMap;
use std::path::Path;

use super::whereabouts::{kubeconfig_in_namespace, reconciler_world};
use super::*;
use plexus_testkit::{peers, require, Feature};

const POOLS: &str = "ippools.whereabouts.cni.cncf.io";
const RESERVATIONS: &str = "overlappingrangeipreservations.whereabouts.cni.cncf.io";

/// The network's ranges: whereabouts' `ipRanges`, a /24 and a /64.
const V4: &str = "10.94.0.0/24";
const V6: &str = "fd94::/64";

/// The real whereabouts beside the test's plexus, on the network `network`
/// of the test's Kubernetes namespace.
struct Peer {
    binary: PathBuf,
    /// `CNI_PATH` of the reference plugins it is the IPAM of: its own
    /// directory first.
    cni_path: String,
    /// The macvlan conf with whereabouts' IPAM, as a NAD of Multus's has it.
    conf: Value,
    log: PathBuf,
    node: String,
    namespace: String,
}

/// whereabouts' IPAM section for `network` of `w`'s namespace, reached with
/// `kubeconfig`: dual-stack, logging to `log` when given.
fn dual_stack(network: &str, kubeconfig: &Path, flat_file: &Path, log: Option<&Path>) -> Value {
    let mut ipam = json!({"type": "whereabouts", "network_name": network,
                          "ipRanges": [{"range": V4}, {"range": V6}],
                          "kubernetes": {"kubeconfig": kubeconfig},
                          "configuration_path": flat_file});
    if let Some(log) = log {
        ipam["log_file"] = json!(log);
        ipam["log_level"] = json!("debug");
    }
    json!({"cniVersion": "1.0.0", "name": "wbnet", "type": "macvlan", "master": "uplink0",
           "ipam": ipam})
}

impl Peer {
    /// whereabouts with the admin's identity (it needs its Lease too), in
    /// the test's namespace, where plexus keeps the network's pools too.
    fn new(w: &World, network: &str) -> Peer {
        let binary = peers::whereabouts().unwrap().binary;
        let tmp = w.kube.tmp.path();
        let admin = w.kube.api.admin_kubeconfig();
        let kubeconfig = kubeconfig_in_namespace(w, &admin, "admin", "wb.kubeconfig");
        let flat_file = tmp.join("whereabouts.conf");
        let flat = json!({"datastore": "kubernetes", "kubernetes": {"kubeconfig": kubeconfig}});
        std::fs::write(&flat_file, flat.to_string()).unwrap();
        let log = tmp.join("whereabouts.log");
        let dir = binary.parent().unwrap().display().to_string();
        Peer {
            cni_path: format!("{dir}:{REFERENCE}"),
            conf: dual_stack(network, &kubeconfig, &flat_file, Some(&log)),
            binary,
            log,
            node: w.kube.node.clone(),
            namespace: w.kube.kube_ns.clone(),
        }
    }

    fn args(&self, pod: &str) -> String {
        format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={pod};K8S_POD_INFRA_CONTAINER_ID=c-{pod}",
            self.namespace
        )
    }

    /// Pod `pod`'s `net1` in `pod_ns` as Multus attached it: the reference
    /// macvlan exec'd, whereabouts its IPAM.
    fn attach(&self, pod: &str, pod_ns: &str) {
        let netns = format!("/var/run/netns/{pod_ns}");
        let macvlan = format!("{REFERENCE}/macvlan");
        let env = ["ADD", &format!("c-{pod}"), &netns, "net1", &self.args(pod)];
        let conf = self.conf.to_string();
        assert_ok(
            &format!("macvlan+whereabouts ADD {pod}"),
            &plugin_at(&self.node, &macvlan, &self.cni_path, env, &conf),
        );
    }

    /// whereabouts' DEL of pod `pod`'s `net1` (container `c-<pod>`).
    fn release(&self, pod: &str, pod_ns: &str) {
        let netns = format!("/var/run/netns/{pod_ns}");
        let env = ["DEL", &format!("c-{pod}"), &netns, "net1", &self.args(pod)];
        let binary = self.binary.display().to_string();
        let mut conf = self.conf["ipam"].clone();
        conf = json!({"cniVersion": "1.0.0", "name": "wbnet", "ipam": conf});
        assert_ok(
            &format!("whereabouts DEL {pod}"),
            &plugin_at(&self.node, &binary, &self.cni_path, env, &conf.to_string()),
        );
    }

    /// The lines whereabouts logged that it could not read a key.
    fn decode_errors(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("Error decoding ip offset"))
            .map(str::to_string)
            .collect()
    }
}

/// The entries of the pool `name` of `w`'s namespace: container by offset.
fn entries(w: &World, name: &str) -> BTreeMap<String, String> {
    let ns = &w.kube.kube_ns;
    let out = w.kube.api.kubectl(&[
        "get",
        POOLS,
        "-n",
        ns,
        name,
        "--ignore-not-found",
        "-o",
        "json",
    ]);
    if out.trim().is_empty() {
        return BTreeMap::new();
    }
    let pool: Value = serde_json::from_str(&out).unwrap();
    let Some(allocations) = pool["spec"]["allocations"].as_object() else {
        return BTreeMap::new();
    };
    allocations
        .iter()
        .map(|(k, a)| (k.clone(), a["id"].as_str().unwrap_or_default().to_string()))
        .collect()
}

/// The reservations of `network` in `w`'s namespace.
fn reservations(w: &World, network: &str) -> Vec<String> {
    let ns = &w.kube.kube_ns;
    let out = w
        .kube
        .api
        .kubectl(&["get", RESERVATIONS, "-n", ns, "-o", "name"]);
    out.lines()
        .filter(|l| l.contains(&format!("/{network}-")))
        .map(str::to_string)
        .collect()
}

/// Pod `name` on `w`'s node selecting `selection`, and its own network
/// namespace.
fn pod(w: &mut World, name: &str, selection: &str) -> String {
    let netns = w.kube.namespaces.add(&format!("{}-{name}", w.tag));
    w.pods(&[name.to_string()], &w.kube.node.clone(), selection);
    netns
}

/// The network's two pools.
fn pool_names(network: &str) -> [String; 2] {
    [
        format!("{network}-10.94.0.0-24"),
        format!("{network}-fd94---64"),
    ]
}

/// Issue 45 items 1 to 3, in one mode: plexus's pods `p*` and whereabouts'
/// `m*` added in turn; after every ADD each pool holds every entry so far,
/// plexus's keys below 2^63; then whereabouts DELs plexus's pods and plexus
/// DELs whereabouts' (pods it never added), and nothing is left.
fn share_a_dual_stack_64(tag: &str, thin: bool) {
    let Some(mut w) = world(tag) else { return };
    if !require(&[Feature::Whereabouts]) {
        return;
    }
    let network = format!("{tag}{}", std::process::id());
    let plexus_kubeconfig = w.kube.api.plexus_kubeconfig();
    let kubeconfig = kubeconfig_in_namespace(&w, &plexus_kubeconfig, "plexus", "pools.kubeconfig");
    let nowhere = Path::new("/nonexistent/whereabouts.conf");
    w.kube
        .nad("wbnet", &dual_stack(&network, &kubeconfig, nowhere, None));
    // plexus's own kubeconfig names the namespace whereabouts keeps its
    // objects in, as on a cluster (kube-system for both).
    let socket = if thin { Value::Null } else { json!(w.socket()) };
    let conf = w.conf_with(json!({"kubeconfig": kubeconfig, "daemonSocket": socket}));
    let peer = Peer::new(&w, &network);
    let _daemon = (!thin).then(|| w.daemon());

    let mut expected: Vec<String> = Vec::new();
    let mut pods: Vec<(String, String)> = Vec::new();
    for i in 1..=3 {
        let (mine, theirs) = (format!("p{i}"), format!("m{i}"));
        let mine_ns = pod(&mut w, &mine, "wbnet@net1");
        assert_ok(
            &format!("ADD {mine}"),
            &w.call("ADD", &mine, &mine_ns, &conf),
        );
        let theirs_ns = pod(&mut w, &theirs, "");
        peer.attach(&theirs, &theirs_ns);
        expected.extend([&mine, &theirs].map(|pod| format!("c-{pod}")));
        pods.push((mine, mine_ns));
        pods.push((theirs, theirs_ns));
        for pool in pool_names(&network) {
            let held = entries(&w, &pool);
            let containers: Vec<&String> = held.values().collect();
            for container in &expected {
                assert!(
                    containers.contains(&container),
                    "{pool} lost {container}'s entry after {i} rounds: {held:?}"
                );
            }
            assert_eq!(held.len(), expected.len(), "{pool}: {held:?}");
            for offset in held.keys() {
                let offset: u128 = offset.parse().unwrap();
                assert!(offset <= i64::MAX as u128, "{pool}: key {offset}");
            }
        }
    }
    assert_eq!(reservations(&w, &network).len(), 2 * pods.len());
    assert_eq!(peer.decode_errors(), Vec::<String>::new());

    // Each DELs the other's pods.
    for (pod, pod_ns) in &pods {
        let container = format!("c-{pod}");
        let reserved = reservations(&w, &network).len();
        if pod.starts_with('p') {
            peer.release(pod, pod_ns);
            assert_ok(&format!("DEL {pod}"), &w.call("DEL", pod, pod_ns, &conf));
        } else {
            // Never added by plexus: given back at once, by its DEL.
            assert_ok(&format!("DEL {pod}"), &w.call("DEL", pod, pod_ns, &conf));
            // The reference macvlan's interface is no business of plexus's.
            ip(pod_ns, &["link", "del", "net1"]);
        }
        for pool in pool_names(&network) {
            let held = entries(&w, &pool);
            assert!(
                !held.values().any(|c| *c == container),
                "{pool} still holds {container} after its DEL: {held:?}"
            );
        }
        let left = reservations(&w, &network);
        assert_eq!(left.len(), reserved - 2, "{pod}'s two went: {left:?}");
    }
    for pool in pool_names(&network) {
        assert_eq!(entries(&w, &pool), BTreeMap::new(), "{pool}");
    }
    assert_eq!(reservations(&w, &network), Vec::<String>::new());
    assert_eq!(peer.decode_errors(), Vec::<String>::new());
    let netns: Vec<String> = pods.into_iter().map(|(_, ns)| ns).collect();
    w.assert_nothing_left(&netns);
}

#[test]
fn whereabouts_shares_a_dual_stack_64_with_the_daemon() {
    share_a_dual_stack_64("wbx", false);
}

#[test]
fn whereabouts_shares_a_dual_stack_64_with_thin_mode() {
    share_a_dual_stack_64("wbz", true);
}

/// Issue 45 item 1: an entry an older plexus wrote past 2^63, of a live
/// pod, is backed up by the reconciler, erased by whereabouts' next write
/// (which logs the key it cannot read), and written back, counted; the
/// pod's DEL through plexus then gives it and its reservation back.
#[test]
fn an_entry_whereabouts_erases_is_written_back_while_its_pod_lives() {
    let Some((mut w, _turn, network, ns)) = reconciler_world("wbe") else {
        return;
    };
    if !require(&[Feature::Whereabouts]) {
        return;
    }
    let plexus_kubeconfig = w.kube.api.plexus_kubeconfig();
    let kubeconfig = kubeconfig_in_namespace(&w, &plexus_kubeconfig, "plexus", "pools.kubeconfig");
    let conf = w.conf_with(json!({"kubeconfig": kubeconfig}));
    let peer = Peer::new(&w, &network);
    let [v4_pool, v6_pool] = pool_names(&network);
    // The pod an older plexus added: its v6 entry at offset 2^63 + 5,
    // noted with its UID; its reservation.
    let old_ns = pod(&mut w, "old", "");
    let uid = w.uid("old");
    let far = "9223372036854775813"; // fd94::8000:0:0:5
    w.kube.api.apply(&format!(
        "apiVersion: whereabouts.cni.cncf.io/v1alpha1\nkind: IPPool\n\
         metadata: {{name: {v6_pool}, namespace: {ns}, \
           annotations: {{pod-uid.plexus.io/{far}: \"{uid}/c-old\"}}}}\n\
         spec: {{range: \"{V6}\", allocations: {{\"{far}\": {{id: c-old, podref: {ns}/old, ifname: net1}}}}}}\n\
         ---\n\
         apiVersion: whereabouts.cni.cncf.io/v1alpha1\nkind: OverlappingRangeIPReservation\n\
         metadata: {{name: {network}-fd94--8000-0-0-5, namespace: {ns}}}\n\
         spec: {{containerid: c-old, podref: {ns}/old, ifname: net1}}\n"
    ));
    let _daemon = w.daemon_with(&[
        "--ipam-reconcile-interval",
        "1",
        "--ipam-reconcile-namespaces",
        &ns,
    ]);
    let annotation = |key: &str| {
        let out = w.kube.api.kubectl(&[
            "get",
            POOLS,
            "-n",
            &ns,
            &v6_pool,
            "-o",
            "jsonpath={.metadata.annotations}",
        ]);
        let notes: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
        notes.get(key).cloned()
    };
    let backup = format!("entry.plexus.io/{far}");
    let within = |what: &str, mut done: Box<dyn FnMut() -> bool + '_>| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(Instant::now() < deadline, "{what}: not within 30 s");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    within("backed up", Box::new(|| annotation(&backup).is_some()));
    // whereabouts adds a pod: its write erases what it could not read.
    let m1_ns = pod(&mut w, "m1", "");
    peer.attach("m1", &m1_ns);
    assert!(
        !peer.decode_errors().is_empty(),
        "whereabouts read the key 2^63 + 5"
    );
    within(
        "written back",
        Box::new(|| entries(&w, &v6_pool).get(far) == Some(&"c-old".to_string())),
    );
    assert_eq!(w.metric("plexus_cluster_ipam_entries_restored_total"), 1.0);
    assert!(entries(&w, &v6_pool).values().any(|c| c == "c-m1"));
    assert!(entries(&w, &v4_pool).values().any(|c| c == "c-m1"));
    // The old pod's DEL through plexus (no record): its entry and
    // reservation go at once; whereabouts' pod is deleted through plexus
    // too.
    for (pod, pod_ns) in [("old", &old_ns), ("m1", &m1_ns)] {
        assert_ok(&format!("DEL {pod}"), &w.call("DEL", pod, pod_ns, &conf));
    }
    ip(&m1_ns, &["link", "del", "net1"]);
    for pool in [&v4_pool, &v6_pool] {
        assert_eq!(entries(&w, pool), BTreeMap::new(), "{pool}");
    }
    assert_eq!(reservations(&w, &network), Vec::<String>::new());
    assert_eq!(annotation(&backup), None, "the backup went with its entry");
    // No plexus ADD ran here: no bridge of the cluster network either.
    assert_nothing_left(w.kube.tmp.path());
    for pod_ns in [old_ns, m1_ns] {
        assert_eq!(link_names(&pod_ns), ["lo"], "{pod_ns}");
    }
}
