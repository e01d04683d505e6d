//! Issue 33 item 4: cluster-wide IPAM (`"ipam": {"type": "whereabouts"}`)
//! served by the daemon from its watch cache of the IPPools: a warm ADD
//! reads no pool and writes it once (plus its reservation, with overlapping
//! ranges on), counted from the API server's side.

use super::*;
use plexus_testkit::kube::AuditedRequest;
use plexus_testkit::process::stdout_ok;

#[test]
fn a_warm_whereabouts_add_reads_no_pool_and_writes_it_once() {
    let Some(mut w) = world("wbt") else { return };
    // Pools of their own: the API server is shared by the run.
    let network = format!("wbt{}", std::process::id());
    w.kube.nad(
        "wbnet",
        &json!({"cniVersion": "1.0.0", "name": "wbnet", "type": "macvlan",
                "master": "uplink0",
                "ipam": {"type": "whereabouts", "range": "10.97.0.0/24",
                         "network_name": network,
                         "configuration_path": "/nonexistent/whereabouts.conf"}}),
    );
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
