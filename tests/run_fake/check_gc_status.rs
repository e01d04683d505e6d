//! CHECK (cni-SPEC §3 "Checking an attachment", §1 disableCheck), GC
//! (cni-SPEC §2 GC, §3 "Garbage-collecting a network") and STATUS (cni-SPEC
//! §2 STATUS) of the cluster network's plugins.

use plexus::cni::config::NetworkConfigList;
use plexus::cni::names::{ContainerId, IfName};
use plexus::plan::DefaultNetwork;

use super::*;

#[test]
fn check_runs_chains_in_order_with_the_final_result_and_honours_disable_check() {
    // cni-SPEC §3 "Checking an attachment"; §1 disableCheck.
    let f = Fakes::new(&["p1", "p2", "q1", "r1"]);
    answer_results(
        &f,
        &[("p1", 1, "eth0"), ("p2", 2, "eth0"), ("q1", 3, "net1")],
    );
    let r2 = result_json("1.0.0", 2, "eth0");
    f.answer_result("r1", &result_json("0.3.1", 4, "net2"));
    let a = cluster(&["p1", "p2"]);
    let mut b = attachment("ns/b", "net1", "1.0.0", &["q1"]);
    b.disable_check = true;
    // CHECK does not exist before 0.4.0 (cni-SPEC §2): skipped.
    let c = attachment("ns/c", "net2", "0.3.1", &["r1"]);
    let registry = Registry::new();
    let (ex, ctx) = executor_ctx(&f, &registry, "ctr1");
    ex.add(&plan(vec![a.clone(), b, c]), &ctx).unwrap();
    f.reset_calls();

    ex.check(&ctx).unwrap();
    assert_eq!(f.calls(), ["p1 CHECK", "p2 CHECK"]);
    let prev = prev_in(&r2, CniVersion::V1_0_0);
    assert_eq!(
        f.call(0).stdin,
        with_prev(&a.plugins[0], Some(prev.clone()))
    );
    assert_eq!(f.call(1).stdin, with_prev(&a.plugins[1], Some(prev)));
    assert_eq!(f.call(0).env["CNI_COMMAND"], "CHECK");

    f.answer_error(
        "p2",
        "CHECK",
        113,
        "mismatch",
        "address 10.0.2.2/24 is missing",
    );
    let e = ex.check(&ctx).unwrap_err().answer();
    assert_eq!(
        e,
        CniError::new(
            ErrorCode::Plugin(113),
            "mismatch",
            "k8s-pod-network (eth0) plugins[1]: p2: address 10.0.2.2/24 is missing"
        )
    );
    // No record: the container is unknown (code 3).
    let e = ex.check(&f.ctx(&registry, "other")).unwrap_err().answer();
    assert_eq!(e.code, ErrorCode::UnknownContainer);
    let mut no_netns = ctx.clone();
    no_netns.netns = None;
    assert_eq!(
        ex.check(&no_netns).unwrap_err().answer().code,
        ErrorCode::InvalidEnvironment
    );
}

#[test]
fn check_refuses_an_add_that_did_not_complete() {
    let f = Fakes::new(&["p1", "q1"]);
    answer_results(&f, &[("p1", 1, "eth0")]);
    f.answer_error("q1", "ADD", 7, "invalid network configuration", "bad");
    let registry = Registry::new();
    let (ex, ctx) = executor_ctx(&f, &registry, "ctr1");
    let p = cluster_and_b(&["p1"], &["q1"]);
    ex.add(&p, &ctx).unwrap_err().answer();
    f.reset_calls();
    let e = ex.check(&ctx).unwrap_err().answer();
    assert_eq!(
        e.details,
        "ns/b (net1): its ADD did not complete (state Failed)"
    );
    assert!(f.calls().is_empty());
}

#[test]
fn gc_deletes_stale_records_and_forwards_to_the_cluster_network() {
    // cni-SPEC §2 GC, §3 "Garbage-collecting a network"; multus-cni #1488.
    let f = Fakes::new(&["p1", "q1", "g1", "g2"]);
    answer_results(&f, &[("p1", 1, "eth0"), ("q1", 2, "net1")]);
    let registry = Registry::new();
    let ex = executor(&f);
    let p = cluster_and_b(&["p1"], &["q1"]);
    ex.add(&p, &f.ctx(&registry, "c1")).unwrap();
    ex.add(&p, &f.ctx(&registry, "c2")).unwrap();
    let temp = f.cache_dir().join(".c3@eth0.json.tmp-1-0");
    fs::write(&temp, "{").unwrap();
    f.reset_calls();
    let list = json!({"cniVersion": "1.1.0", "name": "k8s-pod-network",
        "plugins": [{"type": "g1"}, {"type": "g2", "capabilities": {"portMappings": true}, "k": "v"}]});
    let mut cluster_net = DefaultNetwork {
        network: "k8s-pod-network".into(),
        config: NetworkConfigList::from_value(&list).unwrap(),
        source: "test".into(),
    };
    f.answer_error("g1", "GC", 11, "busy", "store locked");
    let valid = vec![("c1".parse().unwrap(), "eth0".parse().unwrap())];
    let delegates = f.delegates(&registry);

    let e = ex
        .gc(&valid, &delegates, Some(&cluster_net))
        .unwrap_err()
        .answer();
    assert_eq!(
        e.details,
        "cluster network k8s-pod-network plugins[0]: g1: store locked"
    );
    // c2 was torn down (no netns: GC may assume it is gone), then both
    // cluster plugins got GC although the first failed.
    assert_eq!(f.calls(), ["q1 DEL", "p1 DEL", "g1 GC", "g2 GC"]);
    assert_eq!(f.call(0).env["CNI_CONTAINERID"], "c2");
    assert_eq!(f.call(0).env["CNI_NETNS"], "");
    assert!(!f.record_path("c2").exists());
    assert!(f.record_path("c1").exists());
    assert!(!temp.exists());
    let gc = f.call(3);
    assert_eq!(
        gc.stdin,
        json!({"cniVersion": "1.1.0", "name": "k8s-pod-network", "type": "g2", "k": "v",
               "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}]})
    );
    let env: Vec<(String, String)> = gc.env.into_iter().collect();
    assert_eq!(
        env,
        [
            ("CNI_ARGS".to_string(), String::new()),
            ("CNI_COMMAND".into(), "GC".into()),
            ("CNI_CONTAINERID".into(), String::new()),
            ("CNI_IFNAME".into(), String::new()),
            ("CNI_NETNS".into(), String::new()),
            ("CNI_PATH".into(), search_path(&f)),
        ]
    );

    // disableGC: not forwarded; an empty valid list makes c1 stale too.
    f.reset_calls();
    cluster_net.config.disable_gc = true;
    let report = ex.gc(&[], &delegates, Some(&cluster_net)).unwrap();
    assert_eq!(f.calls(), ["q1 DEL", "p1 DEL"]);
    assert_eq!(
        report.deleted,
        [(
            ContainerId::new("c1").unwrap(),
            IfName::new("eth0").unwrap()
        )]
    );
    assert!(report.warnings[0].contains("disableGC"), "{report:?}");
    // A cluster network older than 1.1.0 has no GC (as libcni).
    f.reset_calls();
    let old =
        json!({"cniVersion": "1.0.0", "name": "k8s-pod-network", "plugins": [{"type": "g1"}]});
    cluster_net.config = NetworkConfigList::from_value(&old).unwrap();
    ex.gc(&[], &delegates, Some(&cluster_net)).unwrap();
    assert!(f.calls().is_empty());
}

#[test]
fn status_asks_every_cluster_plugin_from_1_1_0_and_reports_the_first_failure() {
    // cni-SPEC §2 STATUS: "If a plugin relies on a delegated plugin ... it
    // must also execute a STATUS request to that plugin"; libcni's
    // GetStatusNetworkList (Multus's CmdStatus) stops at the first error and
    // skips chains older than 1.1.0.
    let f = Fakes::new(&["s1", "s2"]);
    let registry = Registry::new();
    let delegates = f.delegates(&registry);
    let network = |version: &str| DefaultNetwork {
        network: "podnet".into(),
        config: NetworkConfigList::from_value(&json!({"cniVersion": version, "name": "podnet",
            "plugins": [{"type": "s1", "k": "v"}, {"type": "s2"}]}))
        .unwrap(),
        source: "test".into(),
    };
    plexus::run::status(&delegates, &network("1.1.0")).unwrap();
    assert_eq!(f.calls(), ["s1 STATUS", "s2 STATUS"]);
    assert_eq!(
        f.call(0).stdin,
        json!({"cniVersion": "1.1.0", "name": "podnet", "type": "s1", "k": "v"})
    );
    assert_eq!(f.call(0).env["CNI_COMMAND"], "STATUS");
    assert_eq!(f.call(0).env["CNI_PATH"], search_path(&f));

    f.reset_calls();
    f.answer_error("s1", "STATUS", 51, "plugin not available", "uplink down");
    let e = plexus::run::status(&delegates, &network("1.1.0"))
        .unwrap_err()
        .answer();
    assert_eq!(e.code, ErrorCode::NotAvailableLimited);
    assert_eq!(
        e.details,
        "cluster network podnet plugins[0]: s1: uplink down"
    );
    assert_eq!(f.calls(), ["s1 STATUS"]);

    // 1.0.0 has no STATUS: not asked.
    f.reset_calls();
    plexus::run::status(&delegates, &network("1.0.0")).unwrap();
    assert!(f.calls().is_empty());
}
