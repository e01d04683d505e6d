//! Issue 33 item 4: cluster-wide IPAM (`"ipam": {"type": "whereabouts"}`)
//! served by the daemon from its watch cache of the IPPools: a warm ADD
//! reads no pool and writes it once (plus its reservation, with overlapping
//! ranges on), counted from the API server's side.

use std::path::Path;

use super::*;
use plexus_testkit::kube::AuditedRequest;
use plexus_testkit::process::stdout_ok;

/// The NAD `wbnet`: macvlan on the node's uplink with whereabouts IPAM on
/// `range`, pools of `network` (each test its own: the API server is
/// shared by the run), `kubernetes` its section of that name.
fn whereabouts_nad(w: &World, range: &str, network: &str, kubernetes: Value) {
    w.kube.nad(
        "wbnet",
        &json!({"cniVersion": "1.0.0", "name": "wbnet", "type": "macvlan",
                "master": "uplink0",
                "ipam": {"type": "whereabouts", "range": range, "network_name": network,
                         "kubernetes": kubernetes,
                         "configuration_path": "/nonexistent/whereabouts.conf"}}),
    );
}

/// A kubeconfig of plexus's identity whose context names the test's own
/// namespace: whereabouts keeps its objects there, and that is the only
/// namespace the test's reconciler looks after (the API server and its
/// kube-system are shared by the run).
fn pools_kubeconfig(w: &World) -> PathBuf {
    let plexus = w.kube.api.plexus_kubeconfig();
    kubeconfig_in_namespace(w, &plexus, "plexus", "pools.kubeconfig")
}

/// A copy `name` of the kubeconfig `source` (of the user `user`) whose
/// context names the test's own namespace.
pub(super) fn kubeconfig_in_namespace(w: &World, source: &Path, user: &str, name: &str) -> PathBuf {
    let ns = &w.kube.kube_ns;
    let path = w.kube.tmp.path().join(name);
    let text = std::fs::read_to_string(source).unwrap();
    let with_ns = text.replace(
        &format!("context: {{cluster: test, user: {user}}}"),
        &format!("context: {{cluster: test, user: {user}, namespace: {ns}}}"),
    );
    assert_ne!(with_ns, text, "the kubeconfig's context line moved");
    std::fs::write(&path, with_ns).unwrap();
    path
}

/// The reconciler's Lease is one for the cluster: the tests whose daemons
/// run the reconciler take turns, each starting with no Lease (the last
/// one's daemon was killed holding it, and would keep it for 60 s).
fn reconciler_turn(w: &World) -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    w.kube.api.kubectl(&[
        "delete",
        "lease",
        "-n",
        "kube-system",
        "plexus-ipam-reconciler",
        "--ignore-not-found",
    ]);
    turn
}

/// A world whose daemon may run the reconciler (its turn on the Lease
/// held), with its pools' network name and Kubernetes namespace.
pub(super) fn reconciler_world(tag: &str) -> Option<ReconcilerWorld> {
    let w = world(tag)?;
    let turn = reconciler_turn(&w);
    let network = format!("{tag}{}", std::process::id());
    let ns = w.kube.kube_ns.clone();
    Some((w, turn, network, ns))
}

/// The world, the turn on the Lease, the network name, the namespace.
pub(super) type ReconcilerWorld = (World, std::sync::MutexGuard<'static, ()>, String, String);

/// A [`reconciler_world`] with the NAD `wbnet` on `range`, its pools in the
/// test's own namespace (the one its reconciler looks after).
fn reconciled_pools_world(tag: &str, range: &str) -> Option<ReconcilerWorld> {
    let (w, turn, network, ns) = reconciler_world(tag)?;
    let kubernetes = json!({"kubeconfig": pools_kubeconfig(&w)});
    whereabouts_nad(&w, range, &network, kubernetes);
    Some((w, turn, network, ns))
}

#[test]
fn a_warm_whereabouts_add_reads_no_pool_and_writes_it_once() {
    let Some(mut w) = world("wbt") else { return };
    let network = format!("wbt{}", std::process::id());
    whereabouts_nad(&w, "10.97.0.0/24", &network, json!({}));
    let pool = format!("{network}-10.97.0.0-24");
    let p1 = w.pod_here("p1", "wbnet@net1");
    let p2 = w.kube.namespaces.add("wbt-p2");
    w.pods(&["p2".to_string()], &w.kube.node.clone(), "wbnet@net1");
    let _daemon = w.daemon();
    // The pool's first use: created, and its watch started.
    assert_ok("ADD p1", &w.call("ADD", "p1", &p1, &w.conf));
    let pools_requests = |from: usize| -> Vec<AuditedRequest> {
        w.kube.api.audited()[from..]
            .iter()
            .filter(|r| r.namespace == "kube-system" && r.stage == "ResponseComplete")
            .filter(|r| r.name.starts_with(&network))
            .cloned()
            .collect()
    };
    let before = w.kube.api.audited().len();
    assert_ok("ADD p2", &w.call("ADD", "p2", &p2, &w.conf));
    let add = pools_requests(before);
    assert_eq!(count(&add, "get", "ippools", ""), 0, "{add:?}");
    assert_eq!(count(&add, "patch", "ippools", ""), 1, "{add:?}");
    assert_eq!(
        count(&add, "create", "overlappingrangeipreservations", ""),
        1,
        "{add:?}"
    );
    assert_eq!(
        count(&add, "get", "overlappingrangeipreservations", ""),
        0,
        "{add:?}"
    );
    assert_eq!(add.len(), 2, "{add:?}");

    let held = |pod: &str| addresses(pod, "net1")[0].clone();
    let (a1, a2) = (held(&p1), held(&p2));
    assert!(
        a1.starts_with("10.97.0.") && a2.starts_with("10.97.0."),
        "{a1} {a2}"
    );
    assert_ne!(a1, a2);
    // What `plexus pools` says the pool holds.
    let allocations = || -> u64 {
        let kubeconfig = w.kube.api.admin_kubeconfig();
        let mut pools = Command::new(PLEXUS);
        pools.args(["pools", "--network", &network, "--kubeconfig"]);
        let out = stdout_ok(pools.arg(kubeconfig).output().unwrap(), "plexus pools");
        let shown: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(shown[0]["name"], pool.as_str(), "{shown}");
        shown[0]["held"].as_u64().unwrap()
    };
    assert_eq!(allocations(), 2);
    // The daemon's metrics (issue 33 item 8).
    let held = format!("plexus_cluster_ipam_pool_addresses{{pool=\"{pool}\",state=\"held\"}}");
    let usable = format!("plexus_cluster_ipam_pool_addresses{{pool=\"{pool}\",state=\"usable\"}}");
    assert_eq!(
        w.metric("plexus_cluster_ipam_allocations_total{result=\"ok\"}"),
        2.0
    );
    assert_eq!(w.metric(&held), 2.0);
    assert_eq!(w.metric(&usable), 254.0);
    for (pod, netns) in [("p1", &p1), ("p2", &p2)] {
        assert_ok(&format!("DEL {pod}"), &w.call("DEL", pod, netns, &w.conf));
    }
    assert_eq!(allocations(), 0);
    assert_eq!(w.metric("plexus_cluster_ipam_releases_total"), 2.0);
    assert_eq!(w.metric(&held), 0.0);
    let kind = "overlappingrangeipreservations.whereabouts.cni.cncf.io";
    let reservations = w
        .kube
        .api
        .kubectl(&["get", kind, "-n", "kube-system", "-o", "name"]);
    assert!(!reservations.contains(&network), "{reservations}");
    w.assert_nothing_left(&[p1, p2]);
}

/// Issue 33 item 6: the daemon's reconciler (the holder of its Lease) gives
/// back the addresses of pods that are gone, judged by the pod's UID and
/// the entry's container, never by the pod's name alone, and never a live
/// pod's: a pod deleted while its node was down (no DEL ever came), a
/// crash's leftover entry and reservation of a pod that no longer exists,
/// and the entry of a pod made again under its name (whereabouts #176, a
/// StatefulSet) go; the entries of live pods stay, whether plexus noted
/// their UID or whereabouts wrote them (no note: a pod of the name keeps
/// it). An entry bound to an IPAMClaim (multi-net-spec §8) outlives its
/// pod while the claim exists, and goes once the claim is deleted.
#[test]
fn the_reconciler_gives_back_only_what_gone_pods_held() {
    let Some((mut w, _turn, network, ns)) = reconciled_pools_world("wbg", "10.89.0.0/24") else {
        return;
    };
    let pool = format!("{network}-10.89.0.0-24");
    let p1 = w.pod_here("p1", "wbnet@net1");
    let p2 = w.kube.namespaces.add("wbg-p2");
    w.pods(
        &["p2".into(), "p3".into(), "p4".into()],
        &w.kube.node.clone(),
        "wbnet@net1",
    );
    let _daemon = w.daemon_with(&[
        "--ipam-reconcile-interval",
        "1",
        "--ipam-reconcile-namespaces",
        &ns,
    ]);
    for (pod, netns) in [("p1", &p1), ("p2", &p2)] {
        let uid = format!(";K8S_POD_UID={}", w.uid(pod));
        assert_ok(
            &format!("ADD {pod}"),
            &w.call_with("ADD", pod, netns, &w.conf, &uid),
        );
    }
    let kind = "ippools.whereabouts.cni.cncf.io";
    let reservation_kind = "overlappingrangeipreservations.whereabouts.cni.cncf.io";
    // Left by others: a crash's entry and reservation of a pod that is no
    // more; the entry of p3's predecessor under its name (another UID);
    // p4's entry as whereabouts writes it (no note); a note that outlived
    // its entry.
    // At offsets p1 and p2 did not get (theirs start at a hash of the pod).
    let out = w
        .kube
        .api
        .kubectl(&["get", kind, "-n", &ns, &pool, "-o", "json"]);
    let taken: Value = serde_json::from_str(&out).unwrap();
    let free: Vec<String> = (200..254)
        .map(|o: u32| o.to_string())
        .filter(|o| taken["spec"]["allocations"].get(o).is_none())
        .take(6)
        .collect();
    let (gone_at, old3_at, p4_at, stale_at) = (&free[0], &free[1], &free[2], &free[3]);
    let (claimed_at, unclaimed_at) = (&free[4], &free[5]);
    w.kube.api.apply(&format!(
        "apiVersion: k8s.cni.cncf.io/v1alpha1\nkind: IPAMClaim\n\
         metadata: {{name: vm-live, namespace: {ns}}}\n\
         spec: {{network: wbnet, interface: net1}}\n"
    ));
    let entry =
        |id: &str, pod: &str| json!({"id": id, "podref": format!("{ns}/{pod}"), "ifname": "net1"});
    let mut notes = serde_json::Map::new();
    notes.insert(
        format!("pod-uid.plexus.io/{old3_at}"),
        json!("00000000-0000-0000-0000-00000000dead/c-old3"),
    );
    notes.insert(
        format!("pod-uid.plexus.io/{stale_at}"),
        json!("00000000-0000-0000-0000-00000000beef/c-none"),
    );
    // A note of another container beside p4's live entry: the note goes,
    // the entry stays.
    notes.insert(
        format!("pod-uid.plexus.io/{p4_at}"),
        json!("00000000-0000-0000-0000-00000000cafe/c-other"),
    );
    // Entries of claims whose pods are gone: one claim exists, one was
    // deleted.
    notes.insert(
        format!("ipam-claim.plexus.io/{claimed_at}"),
        json!(format!("{ns}/vm-live/c-vm1")),
    );
    notes.insert(
        format!("ipam-claim.plexus.io/{unclaimed_at}"),
        json!(format!("{ns}/vm-dead/c-vm2")),
    );
    let mut entries = serde_json::Map::new();
    entries.insert(claimed_at.clone(), entry("c-vm1", "virt-launcher-1"));
    entries.insert(unclaimed_at.clone(), entry("c-vm2", "virt-launcher-2"));
    entries.insert(gone_at.clone(), entry("c-gone", "gone"));
    entries.insert(old3_at.clone(), entry("c-old3", "p3"));
    entries.insert(p4_at.clone(), entry("c-p4", "p4"));
    let patch = json!({"metadata": {"annotations": notes}, "spec": {"allocations": entries}});
    w.kube.api.kubectl(&[
        "patch",
        kind,
        "-n",
        &ns,
        &pool,
        "--type",
        "merge",
        "-p",
        &patch.to_string(),
    ]);
    w.kube.api.apply(&format!(
        "apiVersion: whereabouts.cni.cncf.io/v1alpha1\nkind: OverlappingRangeIPReservation\n\
         metadata: {{name: {network}-10.89.0.{gone_at}, namespace: {ns}}}\n\
         spec: {{containerid: c-gone, podref: {ns}/gone, ifname: net1}}\n"
    ));
    // p1's node went down: its pod is deleted for good, no DEL comes.
    w.kube.api.kubectl(&[
        "delete",
        "pod",
        "-n",
        &ns,
        "p1",
        "--grace-period=0",
        "--force",
    ]);
    let held = || -> Vec<String> {
        let out = w
            .kube
            .api
            .kubectl(&["get", kind, "-n", &ns, &pool, "-o", "json"]);
        let pool: Value = serde_json::from_str(&out).unwrap();
        let mut podrefs: Vec<String> = pool["spec"]["allocations"]
            .as_object()
            .unwrap()
            .values()
            .map(|a| a["podref"].as_str().unwrap().to_string())
            .collect();
        podrefs.sort();
        podrefs
    };
    let want = [
        format!("{ns}/p2"),
        format!("{ns}/p4"),
        format!("{ns}/virt-launcher-1"),
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    while held() != want {
        assert!(
            Instant::now() < deadline,
            "not reclaimed in 30 s: {:?}",
            held()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // Live pods keep theirs, pass after pass.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(held(), want);
    let notes = w.kube.api.kubectl(&[
        "get",
        kind,
        "-n",
        &ns,
        &pool,
        "-o",
        "jsonpath={.metadata.annotations}",
    ]);
    let notes: Value = serde_json::from_str(&notes).unwrap();
    let noted: Vec<&String> = notes.as_object().unwrap().keys().collect();
    assert_eq!(noted.len(), 2, "p2's note and the live claim's: {notes}");
    let p2_note = format!("pod-uid.plexus.io/{}", {
        let address = addresses(&p2, "net1")[0].clone();
        address.rsplit('.').next().unwrap().to_string()
    });
    assert!(
        notes[&p2_note].as_str().unwrap().starts_with(&w.uid("p2")),
        "{notes}"
    );
    assert!(
        notes
            .get(format!("ipam-claim.plexus.io/{claimed_at}"))
            .is_some(),
        "{notes}"
    );
    let reservations = w
        .kube
        .api
        .kubectl(&["get", reservation_kind, "-n", &ns, "-o", "name"]);
    let p2_address = addresses(&p2, "net1")[0]
        .split('/')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        reservations.trim(),
        format!("overlappingrangeipreservation.whereabouts.cni.cncf.io/{network}-{p2_address}"),
        "p1's and the crash's reservations are gone, p2's stays"
    );
    assert_eq!(
        w.metric("plexus_cluster_ipam_reclaimed_total{reason=\"pod-missing\"}"),
        2.0
    );
    assert_eq!(
        w.metric("plexus_cluster_ipam_reclaimed_total{reason=\"pod-replaced\"}"),
        1.0
    );
    assert_eq!(
        w.metric("plexus_cluster_ipam_reclaimed_total{reason=\"claim-deleted\"}"),
        1.0
    );
    let holder = w.kube.api.kubectl(&[
        "get",
        "lease",
        "-n",
        "kube-system",
        "plexus-ipam-reconciler",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    assert_eq!(holder, w.kube.node);
    assert_ok("DEL p2", &w.call("DEL", "p2", &p2, &w.conf));
    // p1's sandbox is gone with its node; its namespace here is cleaned up
    // by the world.
    assert_ok("DEL p1", &w.call("DEL", "p1", &p1, &w.conf));
    assert_eq!(
        held(),
        [format!("{ns}/p4"), format!("{ns}/virt-launcher-1")]
    );
}

/// Issue 33 item 4: the daemon commits concurrent allocations from one
/// pool together (`src/whereabouts/batch.rs`): pods ADDed at once cost
/// fewer pool writes than pods, and never an address twice.
#[test]
fn concurrent_adds_share_pool_writes() {
    let Some(w) = world("wbb") else { return };
    let network = format!("wbb{}", std::process::id());
    whereabouts_nad(&w, "10.88.0.0/24", &network, json!({}));
    let names: Vec<String> = (0..8).map(|i| format!("b{i}")).collect();
    let mut w = w;
    let netns: Vec<String> = names
        .iter()
        .map(|pod| w.kube.namespaces.add(&format!("wbb-{pod}")))
        .collect();
    w.pods(&names, &w.kube.node.clone(), "wbnet@net1");
    let _daemon = w.daemon();
    let before = w.kube.api.audited().len();
    let at_once = |command: &str| {
        std::thread::scope(|s| {
            let calls: Vec<_> = names
                .iter()
                .zip(&netns)
                .map(|(pod, ns)| {
                    let w = &w;
                    s.spawn(move || w.call(command, pod, ns, &w.conf))
                })
                .collect();
            for (call, pod) in calls.into_iter().zip(&names) {
                assert_ok(&format!("{command} {pod}"), &call.join().unwrap());
            }
        })
    };
    at_once("ADD");
    let patches = w.kube.api.audited()[before..]
        .iter()
        .filter(|r| r.stage == "ResponseComplete" && r.name.starts_with(&network))
        .filter(|r| r.verb == "patch" && r.resource == "ippools")
        .count();
    eprintln!("8 ADDs at once: {patches} pool writes");
    assert!(
        patches < names.len(),
        "{patches} pool writes for {} ADDs",
        names.len()
    );
    let given: std::collections::BTreeSet<String> = netns
        .iter()
        .map(|ns| addresses(ns, "net1")[0].clone())
        .collect();
    assert_eq!(
        given.len(),
        names.len(),
        "an address given twice: {given:?}"
    );
    at_once("DEL");
    w.assert_nothing_left(&netns);
}

/// Issue 33 item 5: with `node_slice_size`, the daemon's ADD takes from its
/// node's slice, claimed on first use and then remembered (a warm ADD
/// reads neither the NodeSlicePool nor the pool); the reconciler's leader
/// gives every Node a slice (what a whereabouts binary on that node needs)
/// and frees the slice of a node that is gone, only once the reconciler
/// has given back what its pods held, deleting its emptied pool.
#[test]
fn the_leader_keeps_node_slices() {
    let Some((mut w, _turn, network, ns)) = reconciler_world("wbn") else {
        return;
    };
    w.kube.nad(
        "wbnet",
        &json!({"cniVersion": "1.0.0", "name": "wbnet", "type": "macvlan",
                "master": "uplink0",
                "ipam": {"type": "whereabouts", "range": "10.86.0.0/24",
                         "network_name": network, "node_slice_size": "/27",
                         "kubernetes": {"kubeconfig": pools_kubeconfig(&w)},
                         "configuration_path": "/nonexistent/whereabouts.conf"}}),
    );
    let (x, y) = (format!("{network}-x"), format!("{network}-y"));
    for node in [&x, &y] {
        w.kube.api.apply(&format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: {node}}}\n"
        ));
    }
    let p1 = w.pod_here("p1", "wbnet@net1");
    let p2 = w.kube.namespaces.add("wbn-p2");
    w.pods(&["p2".to_string()], &w.kube.node.clone(), "wbnet@net1");
    let _daemon = w.daemon_with(&[
        "--ipam-reconcile-interval",
        "1",
        "--ipam-reconcile-namespaces",
        &ns,
    ]);
    let slices = || plexus_testkit::peers::node_slices(w.kube.api, &ns, &network);
    let slice_of = |node: &str| {
        slices()
            .into_iter()
            .find(|(n, _)| n == node)
            .map(|(_, s)| s)
    };
    assert_ok("ADD p1", &w.call("ADD", "p1", &p1, &w.conf));
    let mine = slice_of(&w.kube.node).expect("the daemon's node claimed a slice");
    let before = w.kube.api.audited().len();
    assert_ok("ADD p2", &w.call("ADD", "p2", &p2, &w.conf));
    let add: Vec<AuditedRequest> = w.kube.api.audited()[before..]
        .iter()
        .filter(|r| r.namespace == ns && r.stage == "ResponseComplete")
        .filter(|r| r.name.starts_with(&network))
        .cloned()
        .collect();
    assert_eq!(count(&add, "get", "nodeslicepools", ""), 0, "{add:?}");
    assert_eq!(count(&add, "get", "ippools", ""), 0, "{add:?}");
    assert_eq!(count(&add, "patch", "ippools", ""), 1, "{add:?}");
    let slice: ipnetwork::IpNetwork = mine.parse().unwrap();
    for pod in [&p1, &p2] {
        let shown: Value =
            serde_json::from_str(&ip(pod, &["-j", "-4", "addr", "show", "dev", "net1"])).unwrap();
        let address = &shown[0]["addr_info"][0];
        let local: std::net::IpAddr = address["local"].as_str().unwrap().parse().unwrap();
        assert!(slice.contains(local), "{local} not of {mine}");
        assert_eq!(address["prefixlen"], 24, "the range's prefix: {address}");
    }
    // The leader gives the Nodes theirs.
    let deadline = Instant::now() + Duration::from_secs(30);
    while slice_of(&x).is_none() || slice_of(&y).is_none() {
        assert!(
            Instant::now() < deadline,
            "not assigned in 30 s: {:?}",
            slices()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // y's node held an address for a pod (gone with it); then y goes.
    let y_slice = slice_of(&y).unwrap();
    let y_pool = format!("{network}-{y}-{}", y_slice.replace('/', "-"));
    w.kube.api.apply(&format!(
        "apiVersion: whereabouts.cni.cncf.io/v1alpha1\nkind: IPPool\n\
         metadata: {{name: {y_pool}, namespace: {ns}}}\n\
         spec: {{range: {y_slice}, allocations: {{\"1\": {{id: c-ghost, podref: {ns}/ghost, ifname: net1}}}}}}\n"
    ));
    w.kube.api.kubectl(&["delete", "node", &y]);
    let y_pool_exists = || {
        let out = w.kube.api.kubectl(&[
            "get",
            "ippools.whereabouts.cni.cncf.io",
            "-n",
            &ns,
            &y_pool,
            "--ignore-not-found",
            "-o",
            "name",
        ]);
        !out.trim().is_empty()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while slice_of(&y).is_some() || y_pool_exists() {
        assert!(
            Instant::now() < deadline,
            "y's slice kept 30 s: {:?}",
            slices()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let freed = slices().into_iter().find(|(_, s)| *s == y_slice).unwrap();
    assert_eq!(freed.0, "", "y's slice is free again");
    assert!(slice_of(&x).is_some(), "x keeps its slice: {:?}", slices());
    assert_eq!(
        slice_of(&w.kube.node),
        Some(mine.clone()),
        "a live node keeps its slice"
    );
    assert_eq!(
        w.metric("plexus_cluster_ipam_reclaimed_total{reason=\"pod-missing\"}"),
        1.0,
        "the ghost's address, before the slice"
    );
    for (pod, netns) in [("p1", &p1), ("p2", &p2)] {
        assert_ok(&format!("DEL {pod}"), &w.call("DEL", pod, netns, &w.conf));
    }
    w.kube.api.kubectl(&["delete", "node", &x]);
    w.assert_nothing_left(&[p1, p2]);
}

/// Issue 47 item 5: the reconciler's leader election never polls. A daemon
/// watches the Lease and asks nothing while another holds it; the holder
/// gives it up once there is nothing to reconcile (no pool, reservation or
/// node slice pool left in its namespaces, two passes in a row); and an
/// idle daemon then makes no request at all for a minute.
#[test]
fn an_idle_daemon_makes_no_request() {
    let Some((mut w, _turn, _network, ns)) = reconciled_pools_world("wbq", "10.87.0.0/24") else {
        return;
    };
    let p1 = w.pod_here("p1", "wbnet@net1");
    let daemon = w.daemon_with(&[
        "--ipam-reconcile-interval",
        "1",
        "--ipam-reconcile-namespaces",
        &ns,
    ]);
    let holder = || {
        w.kube.api.kubectl(&[
            "get",
            "lease",
            "-n",
            "kube-system",
            "plexus-ipam-reconciler",
            "--ignore-not-found",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
    };
    // A whereabouts call: work for a leader.
    assert_ok("ADD p1", &w.call("ADD", "p1", &p1, &w.conf));
    daemon.wait_until("the Lease taken", Duration::from_secs(30), || {
        holder() == w.kube.node
    });
    assert_ok("DEL p1", &w.call("DEL", "p1", &p1, &w.conf));
    // The emptied pool removed: nothing is left to reconcile here.
    w.kube.api.kubectl(&[
        "delete",
        "ippools.whereabouts.cni.cncf.io",
        "-n",
        &ns,
        "--all",
    ]);
    daemon.wait_until("the Lease given up", Duration::from_secs(30), || {
        holder() != w.kube.node
    });
    let requests = || -> f64 {
        let (_, text) = w.http("/metrics");
        text.lines()
            .filter(|l| l.starts_with("plexus_api_requests_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let before = requests();
    std::thread::sleep(Duration::from_secs(60));
    let made = requests() - before;
    assert_eq!(made, 0.0, "requests of an idle daemon in a minute");
    assert_ne!(holder(), w.kube.node, "it did not take the Lease again");
    w.assert_nothing_left(&[p1]);
}
