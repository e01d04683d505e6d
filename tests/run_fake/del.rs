//! DEL through the executor (cni-SPEC §3 "Deleting an attachment",
//! multi-net-spec §7.2): attachments and chains in reverse with the cached
//! result, without a netns, without a record (the fallback plan), with an
//! unreadable record, and the record kept until every owed DEL succeeded.

use plexus::cluster::error::{ApiRequest, ClusterError, Verb};
use plexus::plan::PlanError;

use super::*;

#[test]
fn del_runs_attachments_and_chains_in_reverse_with_the_cached_result() {
    // cni-SPEC §3 "Deleting an attachment"; multi-net-spec §7.2.
    let f = Fakes::new(&["p1", "p2", "q1"]);
    let a = cluster(&["p1", "p2"]);
    let b = attachment("ns/b", "net1", "0.4.0", &["q1"]);
    let (r2, r3) = (
        result_json("1.0.0", 2, "eth0"),
        result_json("0.4.0", 3, "net1"),
    );
    answer_results(&f, &[("p1", 1, "eth0")]);
    f.answer_result("p2", &r2);
    f.answer_result("q1", &r3);
    let registry = Registry::new();
    let (ex, ctx) = executor_ctx(&f, &registry, "ctr1");
    ex.add(&plan(vec![a.clone(), b.clone()]), &ctx).unwrap();
    f.reset_calls();

    let report = ex.del(&ctx, None).unwrap();
    assert_eq!(f.calls(), ["q1 DEL", "p2 DEL", "p1 DEL"]);
    let prev_b = prev_in(&r3, CniVersion::V0_4_0);
    assert_eq!(prev_b["ips"][0]["version"], "4");
    assert_eq!(f.call(0).stdin, with_prev(&b.plugins[0], Some(prev_b)));
    let prev_a = prev_in(&r2, CniVersion::V1_0_0);
    assert_eq!(
        f.call(1).stdin,
        with_prev(&a.plugins[1], Some(prev_a.clone()))
    );
    assert_eq!(f.call(2).stdin, with_prev(&a.plugins[0], Some(prev_a)));
    for n in 0..3 {
        let env = f.call(n).env;
        assert_eq!(env["CNI_COMMAND"], "DEL");
        assert_eq!(env["CNI_NETNS"], path_str(&f.netns()));
        assert_eq!(env["CNI_CONTAINERID"], "ctr1");
    }
    assert_eq!(
        detached(&report),
        [
            ("ns/b".to_string(), "net1".to_string()),
            ("k8s-pod-network".into(), "eth0".into())
        ]
    );
    assert!(!f.record_path("ctr1").exists());
}

#[test]
fn del_without_a_record_succeeds_and_runs_nothing() {
    // Nothing was added by plexus on this node for this container.
    let f = Fakes::new(&["p1"]);
    let registry = Registry::new();
    let report = executor(&f)
        .del(&f.ctx(&registry, "never-added"), None)
        .unwrap();
    assert!(report.detached.is_empty() && report.warnings.is_empty());
    assert!(f.calls().is_empty());
}

#[test]
fn del_without_netns_still_runs_every_plugin_with_an_empty_cni_netns() {
    // environment.md: containerd's last DEL has CNI_NETNS empty; a netns
    // that is gone is passed the same way (cni-SPEC §2 DEL).
    for gone in [false, true] {
        let f = fakes_answering(&[("p1", 1, "eth0"), ("q1", 2, "net1")]);
        let registry = Registry::new();
        let (ex, mut ctx) = executor_ctx(&f, &registry, "ctr1");
        let p = cluster_and_b(&["p1"], &["q1"]);
        ex.add(&p, &ctx).unwrap();
        f.reset_calls();
        if gone {
            fs::remove_file(f.netns()).unwrap();
        } else {
            ctx.netns = None;
        }
        ex.del(&ctx, None).unwrap();
        assert_eq!(f.calls(), ["q1 DEL", "p1 DEL"]);
        for n in 0..2 {
            assert_eq!(f.call(n).env["CNI_NETNS"], "", "gone={gone}");
            assert!(f.call(n).stdin.get("prevResult").is_some());
        }
    }
}

#[test]
fn a_failing_del_keeps_the_record_and_the_retry_finishes_only_what_is_owed() {
    // multi-net-spec §7.2: one failure does not stop the other attachments
    // but fails the DEL; multus-cni #355/#1239: the record stays until every
    // DEL succeeded; sriov-cni #219: what was deleted is not deleted again.
    let f = fakes_answering(&[
        ("p1", 1, "x"),
        ("p2", 2, "x"),
        ("q1", 3, "x"),
        ("q2", 4, "x"),
    ]);
    let registry = Registry::new();
    let (ex, ctx) = executor_ctx(&f, &registry, "ctr1");
    let p = cluster_and_b(&["p1", "p2"], &["q1", "q2"]);
    ex.add(&p, &ctx).unwrap();
    f.reset_calls();
    f.answer_file("q2", "DEL", "stderr", "device busy\n");
    f.answer_file("q2", "DEL", "rc", "1");

    let e = ex.del(&ctx, None).unwrap_err().answer();
    assert_eq!(e.code, ErrorCode::Plugin(codes::PLUGIN_FAILED));
    assert_eq!(
        e.details,
        "ns/b (net1) plugins[1]: q2: exited with status 1; stderr: device busy"
    );
    assert_eq!(f.calls(), ["q2 DEL", "p2 DEL", "p1 DEL"]);
    let rec = record(&f, "ctr1");
    assert_eq!(rec["attachments"][0]["pendingDel"], json!([]));
    assert_eq!(rec["attachments"][1]["pendingDel"], json!([0, 1]));

    f.clear_answers("q2", "DEL");
    f.reset_calls();
    let report = ex.del(&ctx, None).unwrap();
    assert_eq!(f.calls(), ["q2 DEL", "q1 DEL"]);
    assert_eq!(
        detached(&report),
        [("ns/b".to_string(), "net1".to_string())]
    );
    assert!(!f.record_path("ctr1").exists());
    ex.del(&ctx, None).unwrap();
    assert_eq!(f.calls().len(), 2);
}

#[test]
fn a_missing_binary_fails_del_and_keeps_the_record() {
    // cni-SPEC §3 "Deleting an attachment" step 1: not found is an error.
    let f = fakes_answering(&[("p1", 1, "eth0"), ("p2", 2, "eth0")]);
    let registry = Registry::new();
    let (ex, ctx) = executor_ctx(&f, &registry, "ctr1");
    ex.add(&plan(vec![cluster(&["p1", "p2"])]), &ctx).unwrap();
    f.reset_calls();
    f.uninstall("p1");
    let e = ex.del(&ctx, None).unwrap_err().answer();
    assert_eq!(
        e.details,
        format!(
            "k8s-pod-network (eth0) plugins[0]: p1: no executable named \"p1\" in {}",
            search_path(&f)
        )
    );
    assert_eq!(f.calls(), ["p2 DEL"]);
    assert_eq!(
        record(&f, "ctr1")["attachments"][0]["pendingDel"],
        json!([0])
    );
    f.install("p1");
    ex.del(&ctx, None).unwrap();
    assert_eq!(f.calls(), ["p2 DEL", "p1 DEL"]);
    assert!(!f.record_path("ctr1").exists());
}

#[test]
fn del_without_a_record_deletes_the_fallback_plan_idempotently() {
    // Issue 23 item 11: a pod attached by the cluster network's plugin
    // before plexus was installed has no record; as Multus's CmdDel without
    // a cache, DEL runs the cluster network's DEL from the configuration
    // (cni-SPEC §2 DEL: idempotent), without prevResult.
    let f = Fakes::new(&["p1", "p2"]);
    let registry = Registry::new();
    let ex = executor(&f);
    let ctx = f.ctx(&registry, "before-plexus");
    let p = plan(vec![cluster(&["p1", "p2"])]);
    let fallback = || Ok(p.clone());
    for _ in 0..2 {
        f.reset_calls();
        let report = ex.del(&ctx, Some(&fallback)).unwrap();
        assert_eq!(f.calls(), ["p2 DEL", "p1 DEL"]);
        assert_eq!(
            f.call(0).stdin,
            with_prev(&p.attachments[0].plugins[1], None)
        );
        assert_eq!(f.call(1).env["CNI_CONTAINERID"], "before-plexus");
        assert_eq!(f.call(1).env["CNI_IFNAME"], "eth0");
        assert_eq!(
            detached(&report),
            [("k8s-pod-network".into(), "eth0".into())]
        );
        assert!(report.warnings.is_empty(), "{report:?}");
        assert!(!f.record_path("before-plexus").exists());
    }

    // A failing DEL fails, and leaves a record owing what is left, which the
    // next DEL (or GC) works from.
    f.reset_calls();
    f.answer_error("p1", "DEL", 11, "busy", "store locked");
    let e = ex.del(&ctx, Some(&fallback)).unwrap_err().answer();
    assert_eq!(e.code, ErrorCode::TryAgainLater);
    assert_eq!(
        record(&f, "before-plexus")["attachments"][0]["pendingDel"],
        json!([0])
    );
    f.clear_answers("p1", "DEL");
    f.reset_calls();
    ex.del(&ctx, None).unwrap();
    assert_eq!(f.calls(), ["p1 DEL"]);
    assert!(!f.record_path("before-plexus").exists());

    // No cluster network to go by: nothing is deleted, with a warning; no
    // answer from the API server while the pod has no interface by
    // CNI_IFNAME (these fakes make none): nothing can be left, so the same
    // (tests/kube/cluster_network.rs has the pod that still has it, which gets code 11).
    f.reset_calls();
    let unknown = || {
        Err(RunError::Plugin(CniError::plugin(
            codes::NETWORK_NOT_FOUND,
            "not found",
            "podnet",
        )))
    };
    let report = ex.del(&ctx, Some(&unknown)).unwrap();
    assert!(f.calls().is_empty());
    assert!(report.warnings[0].contains("no plan to delete from the configuration: podnet"));
    let later = || {
        Err(RunError::from(PlanError::Cluster(
            ClusterError::Unreachable {
                request: ApiRequest {
                    verb: Verb::Get,
                    object: "api".into(),
                },
                reason: "connection refused".into(),
            },
        )))
    };
    let report = ex.del(&ctx, Some(&later)).unwrap();
    assert!(report.warnings[0].contains("no plan to delete from the configuration: api"));
    assert!(f.calls().is_empty());
}

#[test]
fn unreadable_record_falls_back_to_the_plan_or_is_moved_aside() {
    // multus-cni #948 / #1087: a truncated cache must neither fail DEL
    // forever nor be trusted.
    let f = Fakes::new(&["p1", "p2", "q1"]);
    let registry = Registry::new();
    let (ex, ctx) = executor_ctx(&f, &registry, "ctr1");
    let p = cluster_and_b(&["p1", "p2"], &["q1"]);
    fs::write(f.record_path("ctr1"), "{\"plexusCache\": 1, \"contai").unwrap();

    let report = ex.del(&ctx, None).unwrap();
    assert!(f.calls().is_empty());
    assert_eq!(report.warnings.len(), 1);
    assert!(
        report.warnings[0].contains("is unreadable (not valid JSON (truncated?)"),
        "{report:?}"
    );
    let moved = f.cache_dir().join("ctr1@eth0.json.corrupt");
    assert!(moved.exists() && !f.record_path("ctr1").exists());

    fs::write(f.record_path("ctr1"), "").unwrap();
    let report = ex.del(&ctx, Some(&|| Ok(p.clone()))).unwrap();
    assert_eq!(f.calls(), ["q1 DEL", "p2 DEL", "p1 DEL"]);
    assert!(f.call(0).stdin.get("prevResult").is_none());
    assert!(
        report.warnings[0].contains("the file is empty"),
        "{report:?}"
    );
    assert!(!f.record_path("ctr1").exists());

    // An ADD replaces an unreadable record.
    answer_results(
        &f,
        &[("p1", 1, "eth0"), ("p2", 2, "eth0"), ("q1", 3, "net1")],
    );
    fs::write(f.record_path("ctr1"), "garbage").unwrap();
    ex.add(&p, &ctx).unwrap();
    assert_eq!(record(&f, "ctr1")["attachments"][1]["state"], "added");
}
