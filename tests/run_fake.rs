//! The executor against fake CNI plugins (shell scripts in a temporary
//! CNI_PATH that record their environment and stdin and print canned
//! answers): what each plugin receives, in which order, and what plexus does
//! on failures, crashes, repeated DELs, CHECK and GC.

mod run_support;

use std::fs;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use plexus::cluster::error::{ApiRequest, ClusterError, Verb};
use plexus::cni::config::NetworkConfigList;
use plexus::cni::error::{codes, CniError, ErrorCode};
use plexus::cni::result::CniResult;
use plexus::cni::skel::{Plugin, Request};
use plexus::cni::CniVersion;
use plexus::plan::{Attachment, DefaultNetwork, PlanError};
use plexus::record::Cache;
use plexus::run::{
    set_default_routes, strip_default_routes, AttachmentResult, Executor, Registry, RouteHook,
    RunError,
};
use run_support::*;
use serde_json::{json, Value};

/// The CNI error plexus answers with: its code, msg and details as the
/// runtime reads them.
trait Answer {
    fn answer(self) -> CniError;
}

impl Answer for RunError {
    fn answer(self) -> CniError {
        self.into()
    }
}

fn executor(f: &Fakes) -> Executor {
    Executor::new(Cache::new(f.cache_dir()))
}

fn cluster(types: &[&str]) -> Attachment {
    attachment("k8s-pod-network", "eth0", "1.0.0", types)
}

/// The record as it stands: the file's last line (see `plexus::record`).
fn record(f: &Fakes, id: &str) -> Value {
    let text = fs::read_to_string(f.record_path(id)).unwrap();
    serde_json::from_str(text.lines().last().unwrap()).unwrap()
}

/// The result a plugin answered, as the next plugin of a `version` chain must
/// receive it.
fn prev_in(answer: &Value, version: CniVersion) -> Value {
    as_result(answer).to_value(version).unwrap()
}

fn search_path(f: &Fakes) -> String {
    format!("{}:{}", path_str(&f.bin()), path_str(&f.bindir()))
}

/// `(network, ifname)` of each attachment a DEL tore down, in order.
fn detached(report: &plexus::run::DelReport) -> Vec<(String, String)> {
    report
        .detached
        .iter()
        .map(|a| (a.network.clone(), a.ifname.clone()))
        .collect()
}

#[test]
fn add_threads_prev_result_in_each_requests_version_with_the_runtime_env() {
    // cni-SPEC §3 "Adding an attachment"; multi-net-spec §7.1.
    let f = Fakes::new(&["p1", "p2", "q1"]);
    let a = cluster(&["p1", "p2"]);
    let b = attachment("ns/b", "net1", "0.4.0", &["q1"]);
    let (r1, r2, r3) = (
        result_json("1.1.0", 1, "eth0"),
        result_json("1.0.0", 2, "eth0"),
        result_json("0.4.0", 3, "net1"),
    );
    f.answer_result("p1", &r1);
    f.answer_result("p2", &r2);
    f.answer_result("q1", &r3);
    let registry = Registry::new();
    let results = executor(&f)
        .add(&plan(vec![a.clone(), b.clone()]), &f.ctx(&registry, "ctr1"))
        .unwrap();

    assert_eq!(f.calls(), ["p1 ADD", "p2 ADD", "q1 ADD"]);
    // The first plugin gets the plan's JSON exactly, without prevResult.
    assert_eq!(f.call(0).stdin, with_prev(&a.plugins[0], None));
    // The second gets the first's result written as its own version (1.0.0:
    // no interface mtu, no ips[].version), though the plugin answered 1.1.0.
    let prev = prev_in(&r1, CniVersion::V1_0_0);
    assert_eq!(prev["interfaces"][0].get("mtu"), None);
    assert_eq!(prev["ips"][0].get("version"), None);
    assert_eq!(f.call(1).stdin, with_prev(&a.plugins[1], Some(prev)));
    // A new attachment starts a new chain: no prevResult.
    assert_eq!(f.call(2).stdin, with_prev(&b.plugins[0], None));
    for (n, ifname) in [(0, "eth0"), (1, "eth0"), (2, "net1")] {
        let env = f.call(n).env;
        let want: Vec<(&str, String)> = vec![
            ("CNI_ARGS", a.cni_args.clone()),
            ("CNI_COMMAND", "ADD".into()),
            ("CNI_CONTAINERID", "ctr1".into()),
            ("CNI_IFNAME", ifname.into()),
            ("CNI_NETNS", path_str(&f.netns())),
            ("CNI_PATH", search_path(&f)),
        ];
        let got: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        assert_eq!(got, want, "call {n}");
    }

    let mut want_b = as_result(&r3);
    want_b.cni_version = Some(CniVersion::V0_4_0);
    let mut want_a = as_result(&r2);
    want_a.cni_version = Some(CniVersion::V1_0_0);
    assert_eq!(
        results,
        [
            AttachmentResult {
                network: "k8s-pod-network".into(),
                ifname: "eth0".into(),
                default: true,
                result: Some(want_a),
                device_info: None,
                warnings: Vec::new(),
            },
            AttachmentResult {
                network: "ns/b".into(),
                ifname: "net1".into(),
                default: false,
                result: Some(want_b),
                device_info: None,
                warnings: Vec::new(),
            },
        ]
    );
    let rec = record(&f, "ctr1");
    assert_eq!(rec["attachments"][0]["state"], "added");
    assert_eq!(rec["attachments"][0]["pendingDel"], json!([0, 1]));
    assert_eq!(rec["attachments"][1]["state"], "added");
    assert_eq!(rec["attachments"][1]["plan"], b.to_value());
}

#[test]
fn bad_configuration_fails_before_anything_is_added() {
    // Every plugin of every attachment is validated before the first ADD.
    let f = Fakes::new(&["p1", "q1"]);
    let registry = Registry::new();
    let ex = executor(&f);
    let ctx = f.ctx(&registry, "ctr1");
    let p = plan(vec![
        cluster(&["p1"]),
        attachment("ns/b", "net1", "1.0.0", &["q1", "nope"]),
    ]);
    let e = ex.add(&p, &ctx).unwrap_err().answer();
    assert_eq!(e.code, ErrorCode::Plugin(codes::PLUGIN_FAILED));
    assert_eq!(
        e.details,
        format!(
            "ns/b (net1) plugins[1]: nope: no executable named \"nope\" in {}",
            search_path(&f)
        )
    );

    let mut bad_version = cluster(&["p1"]);
    bad_version.plugins[0]["cniVersion"] = json!("9.9.9");
    let e = ex.add(&plan(vec![bad_version]), &ctx).unwrap_err().answer();
    assert_eq!(e.code, ErrorCode::IncompatibleVersion);
    assert!(
        e.details
            .starts_with("k8s-pod-network (eth0) plugins[0]: p1: cniVersion: \"9.9.9\""),
        "{e}"
    );

    let mut bad_args = attachment("ns/b", "net1", "1.0.0", &["q1"]);
    bad_args.cni_args = "novalue".into();
    let e = ex
        .add(&plan(vec![cluster(&["p1"]), bad_args]), &ctx)
        .unwrap_err()
        .answer();
    assert_eq!(
        e.details,
        "ns/b (net1).CNI_ARGS: invalid pair \"novalue\": expected exactly one '=' as in KEY=VALUE"
    );

    let mut no_netns = ctx.clone();
    no_netns.netns = None;
    let e = ex
        .add(&plan(vec![cluster(&["p1"])]), &no_netns)
        .unwrap_err()
        .answer();
    assert_eq!(e.code, ErrorCode::InvalidEnvironment);

    assert!(f.calls().is_empty(), "{:?}", f.calls());
    assert!(!f.record_path("ctr1").exists());
    // Nothing was added, so DEL has nothing to do.
    assert_eq!(ex.del(&ctx, None).unwrap().detached.len(), 0);
}

#[test]
fn failure_in_the_middle_of_a_chain_rolls_back_everything_done() {
    // multi-net-spec §7.2: later attachments are never attempted; what was
    // done is undone, newest first, each with its last good result.
    let f = Fakes::new(&["p1", "p2", "q1", "q2", "q3", "r1"]);
    let a = cluster(&["p1", "p2"]);
    let b = attachment("ns/b", "net1", "1.0.0", &["q1", "q2", "q3"]);
    let c = attachment("ns/c", "net2", "1.0.0", &["r1"]);
    let (r1, r2, r3) = (
        result_json("1.0.0", 1, "eth0"),
        result_json("1.0.0", 2, "eth0"),
        result_json("1.0.0", 3, "net1"),
    );
    f.answer_result("p1", &r1);
    f.answer_result("p2", &r2);
    f.answer_result("q1", &r3);
    f.answer_error("q2", "ADD", 11, "busy", "lock held");
    let registry = Registry::new();
    let ex = executor(&f);
    let ctx = f.ctx(&registry, "ctr1");
    let e = ex
        .add(&plan(vec![a.clone(), b.clone(), c]), &ctx)
        .unwrap_err()
        .answer();
    assert_eq!(
        e,
        CniError::new(
            ErrorCode::TryAgainLater,
            "busy",
            "ns/b (net1) plugins[1]: q2: lock held"
        )
    );
    assert_eq!(
        f.calls(),
        ["p1 ADD", "p2 ADD", "q1 ADD", "q2 ADD", "q1 DEL", "p2 DEL", "p1 DEL"]
    );
    let q1_del = f.call(4);
    assert_eq!(q1_del.env["CNI_COMMAND"], "DEL");
    assert_eq!(q1_del.env["CNI_IFNAME"], "net1");
    assert_eq!(q1_del.env["CNI_NETNS"], path_str(&f.netns()));
    assert_eq!(
        q1_del.stdin,
        with_prev(&b.plugins[0], Some(prev_in(&r3, CniVersion::V1_0_0)))
    );
    for n in [5, 6] {
        let i = 6 - n; // p2 then p1
        assert_eq!(
            f.call(n).stdin,
            with_prev(&a.plugins[i], Some(prev_in(&r2, CniVersion::V1_0_0)))
        );
    }
    // The failing plugin's DEL is owed: the runtime must DEL after a failed
    // ADD (cni-SPEC §3), and plexus keeps the record until it does.
    let rec = record(&f, "ctr1");
    assert_eq!(rec["attachments"][0]["pendingDel"], json!([]));
    assert_eq!(rec["attachments"][1]["state"], "failed");
    assert_eq!(rec["attachments"][1]["pendingDel"], json!([1]));
    assert_eq!(rec["attachments"][2]["state"], "pending");

    f.reset_calls();
    let report = ex.del(&ctx, None).unwrap();
    assert_eq!(f.calls(), ["q2 DEL"]);
    assert_eq!(
        f.call(0).stdin,
        with_prev(&b.plugins[1], Some(prev_in(&r3, CniVersion::V1_0_0)))
    );
    assert_eq!(
        detached(&report),
        [("ns/b".to_string(), "net1".to_string())]
    );
    assert!(!f.record_path("ctr1").exists());
    // cni-SPEC §3: DEL may be followed by more DELs.
    let report = ex.del(&ctx, None).unwrap();
    assert!(report.detached.is_empty());
    assert_eq!(f.calls().len(), 1);
}

#[test]
fn failure_of_the_second_attachment_and_of_its_rollback() {
    // A plugin printing garbage fails its ADD (code 6); a rollback DEL that
    // fails is appended to the error and retried by the next DEL.
    let f = Fakes::new(&["p1", "p2", "q1", "r1"]);
    let a = cluster(&["p1", "p2"]);
    let b = attachment("ns/b", "net1", "1.0.0", &["q1"]);
    let c = attachment("ns/c", "net2", "1.0.0", &["r1"]);
    f.answer_result("p1", &result_json("1.0.0", 1, "eth0"));
    f.answer_result("p2", &result_json("1.0.0", 2, "eth0"));
    f.answer_stdout("q1", "ADD", "this is not JSON");
    f.answer_error("p2", "DEL", 5, "I/O failure", "read-only file system");
    let registry = Registry::new();
    let ex = executor(&f);
    let ctx = f.ctx(&registry, "ctr1");
    let e = ex.add(&plan(vec![a, b, c]), &ctx).unwrap_err().answer();
    assert_eq!(e.code, ErrorCode::Decode);
    assert_eq!(
        e.details,
        "ns/b (net1) plugins[0]: q1: result: not JSON (expected ident at line 1 column 2): \
         this is not JSON; rollback failed, DEL will retry: \
         k8s-pod-network (eth0) plugins[1]: p2: read-only file system"
    );
    // The chain's DEL stopped at p2 (cni-SPEC §3), so p1 was not DEL'd.
    assert_eq!(f.calls(), ["p1 ADD", "p2 ADD", "q1 ADD", "p2 DEL"]);
    let rec = record(&f, "ctr1");
    assert_eq!(rec["attachments"][0]["pendingDel"], json!([0, 1]));
    assert_eq!(rec["attachments"][1]["pendingDel"], json!([0]));
    assert_eq!(rec["attachments"][1].get("result"), None);

    f.clear_answers("p2", "DEL");
    f.reset_calls();
    let report = ex.del(&ctx, None).unwrap();
    assert_eq!(f.calls(), ["q1 DEL", "p2 DEL", "p1 DEL"]);
    // q1 never produced a result: its DEL has no prevResult.
    assert_eq!(f.call(0).stdin.get("prevResult"), None);
    assert_eq!(report.detached.len(), 2);
    assert!(!f.record_path("ctr1").exists());
}

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
    f.answer_result("p1", &result_json("1.0.0", 1, "eth0"));
    f.answer_result("p2", &r2);
    f.answer_result("q1", &r3);
    let registry = Registry::new();
    let ex = executor(&f);
    let ctx = f.ctx(&registry, "ctr1");
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
        let f = Fakes::new(&["p1", "q1"]);
        f.answer_result("p1", &result_json("1.0.0", 1, "eth0"));
        f.answer_result("q1", &result_json("1.0.0", 2, "net1"));
        let registry = Registry::new();
        let ex = executor(&f);
        let mut ctx = f.ctx(&registry, "ctr1");
        let p = plan(vec![
            cluster(&["p1"]),
            attachment("ns/b", "net1", "1.0.0", &["q1"]),
        ]);
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
    let f = Fakes::new(&["p1", "p2", "q1", "q2"]);
    for (t, n) in [("p1", 1), ("p2", 2), ("q1", 3), ("q2", 4)] {
        f.answer_result(t, &result_json("1.0.0", n, "x"));
    }
    let registry = Registry::new();
    let ex = executor(&f);
    let ctx = f.ctx(&registry, "ctr1");
    let p = plan(vec![
        cluster(&["p1", "p2"]),
        attachment("ns/b", "net1", "1.0.0", &["q1", "q2"]),
    ]);
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
fn crash_in_the_middle_of_add_leaves_a_record_del_undoes() {
    // The executor process is killed (SIGKILL) while the second attachment's
    // second plugin runs; DEL from a new process undoes everything started.
    const CHILD: &str = "PLEXUS_RUN_TEST_CRASH_ROOT";
    let p = plan(vec![
        cluster(&["p1", "p2"]),
        attachment("ns/b", "net1", "1.0.0", &["q1", "q2"]),
        attachment("ns/c", "net2", "1.0.0", &["r1"]),
    ]);
    if let Ok(root) = std::env::var(CHILD) {
        let f = Fakes::at(Path::new(&root));
        let registry = Registry::new();
        let _ = executor(&f).add(&p, &f.ctx(&registry, "ctr1"));
        unreachable!("the plugin kills this process");
    }
    let f = Fakes::new(&["p1", "p2", "q1", "q2", "r1"]);
    let r2 = result_json("1.0.0", 2, "eth0");
    f.answer_result("p1", &result_json("1.0.0", 1, "eth0"));
    f.answer_result("p2", &r2);
    f.answer_result("q1", &result_json("1.0.0", 3, "net1"));
    f.answer_file("q2", "ADD", "kill-parent", "");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_in_the_middle_of_add_leaves_a_record_del_undoes",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, f.root())
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(9), "{out:?}");
    assert_eq!(f.calls(), ["p1 ADD", "p2 ADD", "q1 ADD", "q2 ADD"]);
    let rec = record(&f, "ctr1");
    assert_eq!(rec["attachments"][0]["state"], "added");
    assert_eq!(rec["attachments"][1]["state"], "adding");
    assert_eq!(rec["attachments"][1]["pendingDel"], json!([0, 1]));
    assert_eq!(rec["attachments"][2]["state"], "pending");

    f.reset_calls();
    let registry = Registry::new();
    let report = executor(&f).del(&f.ctx(&registry, "ctr1"), None).unwrap();
    // Where the ADD stopped is unknown: the whole started chain is DEL'd,
    // without prevResult (there was no final result); r1 never ran.
    assert_eq!(f.calls(), ["q2 DEL", "q1 DEL", "p2 DEL", "p1 DEL"]);
    assert_eq!(f.call(0).stdin.get("prevResult"), None);
    assert_eq!(
        f.call(2).stdin["prevResult"],
        prev_in(&r2, CniVersion::V1_0_0)
    );
    assert_eq!(report.detached.len(), 2);
    assert!(!f.record_path("ctr1").exists());
}

#[test]
fn a_failed_cache_write_fails_the_add_and_rolls_back() {
    // Without a record a crash would leak: a write that fails is an ADD
    // failure, and the next attachment is not attempted (§7.2).
    let f = Fakes::new(&["p1", "q1"]);
    f.answer_result("p1", &result_json("1.0.0", 1, "eth0"));
    f.answer_result("q1", &result_json("1.0.0", 2, "net1"));
    let rec = f.record_path("ctr1");
    let sabotage = format!("rm -f {0}; mkdir {0}", path_str(&rec));
    f.answer_file("p1", "ADD", "run", &sabotage);
    // The rollback's DEL repairs it: the last write succeeds.
    f.answer_file("p1", "DEL", "run", &format!("rmdir {}", path_str(&rec)));
    let registry = Registry::new();
    let p = plan(vec![
        cluster(&["p1"]),
        attachment("ns/b", "net1", "1.0.0", &["q1"]),
    ]);
    let e = executor(&f)
        .add(&p, &f.ctx(&registry, "ctr1"))
        .unwrap_err()
        .answer();
    assert_eq!(e.code, ErrorCode::Io);
    assert!(
        e.details
            .starts_with(&format!("cache {}: ", path_str(&rec))),
        "{e}"
    );
    assert_eq!(f.calls(), ["p1 ADD", "p1 DEL"]);
    // p1's DEL got its result as prevResult.
    assert!(f.call(1).stdin.get("prevResult").is_some());
    // Everything was undone and q1 never started: nothing is owed.
    assert!(!rec.exists());
    executor(&f).del(&f.ctx(&registry, "ctr1"), None).unwrap();
    assert_eq!(f.calls().len(), 2);
}

#[test]
fn add_is_refused_while_an_earlier_add_is_not_deleted() {
    // cni-SPEC §2 ADD: no second ADD for the same (container, ifname).
    let f = Fakes::new(&["p1"]);
    f.answer_result("p1", &result_json("1.0.0", 1, "eth0"));
    let registry = Registry::new();
    let ex = executor(&f);
    let ctx = f.ctx(&registry, "ctr1");
    let p = plan(vec![cluster(&["p1"])]);
    ex.add(&p, &ctx).unwrap();
    let e = ex.add(&p, &ctx).unwrap_err().answer();
    assert_eq!(e.msg, "attachment already exists");
    assert_eq!(f.calls(), ["p1 ADD"]);
    ex.del(&ctx, None).unwrap();
    ex.add(&p, &ctx).unwrap();
    assert_eq!(f.calls(), ["p1 ADD", "p1 DEL", "p1 ADD"]);
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
    // (tests/kube.rs has the pod that still has it, which gets code 11).
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

#[test]
fn unreadable_record_falls_back_to_the_plan_or_is_moved_aside() {
    // multus-cni #948 / #1087: a truncated cache must neither fail DEL
    // forever nor be trusted.
    let f = Fakes::new(&["p1", "p2", "q1"]);
    let registry = Registry::new();
    let ex = executor(&f);
    let ctx = f.ctx(&registry, "ctr1");
    let p = plan(vec![
        cluster(&["p1", "p2"]),
        attachment("ns/b", "net1", "1.0.0", &["q1"]),
    ]);
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
    f.answer_result("p1", &result_json("1.0.0", 1, "eth0"));
    f.answer_result("p2", &result_json("1.0.0", 2, "eth0"));
    f.answer_result("q1", &result_json("1.0.0", 3, "net1"));
    fs::write(f.record_path("ctr1"), "garbage").unwrap();
    ex.add(&p, &ctx).unwrap();
    assert_eq!(record(&f, "ctr1")["attachments"][1]["state"], "added");
}

#[test]
fn check_runs_chains_in_order_with_the_final_result_and_honours_disable_check() {
    // cni-SPEC §3 "Checking an attachment"; §1 disableCheck.
    let f = Fakes::new(&["p1", "p2", "q1", "r1"]);
    let r2 = result_json("1.0.0", 2, "eth0");
    f.answer_result("p1", &result_json("1.0.0", 1, "eth0"));
    f.answer_result("p2", &r2);
    f.answer_result("q1", &result_json("1.0.0", 3, "net1"));
    f.answer_result("r1", &result_json("0.3.1", 4, "net2"));
    let a = cluster(&["p1", "p2"]);
    let mut b = attachment("ns/b", "net1", "1.0.0", &["q1"]);
    b.disable_check = true;
    // CHECK does not exist before 0.4.0 (cni-SPEC §2): skipped.
    let c = attachment("ns/c", "net2", "0.3.1", &["r1"]);
    let registry = Registry::new();
    let ex = executor(&f);
    let ctx = f.ctx(&registry, "ctr1");
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
    f.answer_result("p1", &result_json("1.0.0", 1, "eth0"));
    f.answer_error("q1", "ADD", 7, "invalid network configuration", "bad");
    let registry = Registry::new();
    let ex = executor(&f);
    let ctx = f.ctx(&registry, "ctr1");
    let p = plan(vec![
        cluster(&["p1"]),
        attachment("ns/b", "net1", "1.0.0", &["q1"]),
    ]);
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
    f.answer_result("p1", &result_json("1.0.0", 1, "eth0"));
    f.answer_result("q1", &result_json("1.0.0", 2, "net1"));
    let registry = Registry::new();
    let ex = executor(&f);
    let p = plan(vec![
        cluster(&["p1"]),
        attachment("ns/b", "net1", "1.0.0", &["q1"]),
    ]);
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
    assert_eq!(report.deleted, [("c1".to_string(), "eth0".to_string())]);
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
fn exec_timeout_fails_the_add_and_rolls_back() {
    let f = Fakes::new(&["p1", "p2"]);
    f.answer_result("p1", &result_json("1.0.0", 1, "eth0"));
    f.answer_file("p2", "ADD", "sleep", "20");
    // Long enough that p1 and its rollback DEL finish even on a loaded or
    // emulated (vm-tests/) CPU; p2 sleeps far longer.
    let registry = Registry::new().with_exec_timeout(Duration::from_secs(2));
    let ex = executor(&f);
    let start = Instant::now();
    let e = ex
        .add(
            &plan(vec![cluster(&["p1", "p2"])]),
            &f.ctx(&registry, "ctr1"),
        )
        .unwrap_err()
        .answer();
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(e.msg, "plugin timed out");
    assert!(
        e.details
            .starts_with("k8s-pod-network (eth0) plugins[1]: p2: ")
            && e.details
                .ends_with("ADD did not finish within 2s and was killed"),
        "{e}"
    );
    assert_eq!(f.calls(), ["p1 ADD", "p2 ADD", "p1 DEL"]);
}

#[test]
fn a_missing_binary_fails_del_and_keeps_the_record() {
    // cni-SPEC §3 "Deleting an attachment" step 1: not found is an error.
    let f = Fakes::new(&["p1", "p2"]);
    f.answer_result("p1", &result_json("1.0.0", 1, "eth0"));
    f.answer_result("p2", &result_json("1.0.0", 2, "eth0"));
    let registry = Registry::new();
    let ex = executor(&f);
    let ctx = f.ctx(&registry, "ctr1");
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

/// An in-process plugin that adds an address to its prevResult and logs
/// its calls into the fakes' log.
struct Mem {
    log: Arc<Fakes>,
}

impl Plugin for Mem {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        self.log.log_builtin("mem", "ADD", &req.config);
        let mut r = req.prev_result.clone().unwrap_or_default();
        let extra = CniResult::from_value(&json!({"cniVersion": "1.0.0",
            "ips": [{"address": "10.9.9.9/32"}]}))
        .unwrap();
        r.ips.extend(extra.ips);
        Ok(r)
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        self.log.log_builtin("mem", "DEL", &req.config);
        Ok(())
    }
    fn check(&self, req: &Request) -> Result<(), CniError> {
        self.log.log_builtin("mem", "CHECK", &req.config);
        Ok(())
    }
}

#[test]
fn built_in_and_exec_plugins_mix_in_one_chain() {
    // One trait for both: prevResult flows exec → built-in → exec.
    let f = Arc::new(Fakes::new(&["p1", "p2"]));
    let r1 = result_json("1.0.0", 1, "eth0");
    f.answer_result("p1", &r1);
    f.answer_result("p2", &result_json("1.0.0", 2, "eth0"));
    let log = Arc::clone(&f);
    let registry = Registry::new().with_builtin("mem", move |_, _| {
        Box::new(Mem {
            log: Arc::clone(&log),
        })
    });
    let ex = executor(&f);
    let ctx = f.ctx(&registry, "ctr1");
    let a = cluster(&["p1", "mem", "p2"]);
    ex.add(&plan(vec![a.clone()]), &ctx).unwrap();
    assert_eq!(f.calls(), ["p1 ADD", "mem ADD", "p2 ADD"]);
    assert_eq!(
        f.call(1).stdin,
        with_prev(&a.plugins[1], Some(prev_in(&r1, CniVersion::V1_0_0)))
    );
    let p2_add = f.call(2);
    let ips: Vec<&str> = p2_add.stdin["prevResult"]["ips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ip| ip["address"].as_str().unwrap())
        .collect();
    assert_eq!(ips, ["10.0.1.2/24", "10.9.9.9/32"]);
    ex.del(&ctx, None).unwrap();
    assert_eq!(
        f.calls()[3..],
        ["p2 DEL", "mem DEL", "p1 DEL"].map(String::from)
    );
}

/// An in-process plugin whose ADD defers a slow sync (as host-local defers
/// its fsyncs), failing it when asked to.
struct Syncing {
    log: Arc<Fakes>,
    fail: bool,
    synced: Arc<AtomicBool>,
}

impl Plugin for Syncing {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        self.log.log_builtin("syncing", "ADD", &req.config);
        let (fail, synced) = (self.fail, Arc::clone(&self.synced));
        plexus::cni::durable::sync("allocation file", move || {
            std::thread::sleep(Duration::from_millis(50));
            synced.store(true, Ordering::SeqCst);
            if fail {
                return Err(std::io::Error::other("EIO"));
            }
            Ok(())
        })?;
        Ok(req.prev_result.clone().unwrap_or_default())
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        self.log.log_builtin("syncing", "DEL", &req.config);
        Ok(())
    }
}

#[test]
fn add_reports_success_only_once_deferred_syncs_are_done() {
    for fail in [false, true] {
        let f = Arc::new(Fakes::new(&["p1"]));
        f.answer_result("p1", &result_json("1.0.0", 1, "eth0"));
        let synced = Arc::new(AtomicBool::new(false));
        let (log, flag) = (Arc::clone(&f), Arc::clone(&synced));
        let registry = Registry::new().with_builtin("syncing", move |_, _| {
            Box::new(Syncing {
                log: Arc::clone(&log),
                fail,
                synced: Arc::clone(&flag),
            })
        });
        let ex = executor(&f);
        let ctx = f.ctx(&registry, "ctr1");
        let outcome = ex.add(&plan(vec![cluster(&["p1", "syncing"])]), &ctx);
        assert!(
            synced.load(Ordering::SeqCst),
            "ADD returned before the sync finished"
        );
        if !fail {
            outcome.unwrap();
            continue;
        }
        // A sync that failed means nothing is durably attached: the whole
        // ADD is rolled back and reported failed, naming what did not sync.
        let e = outcome.unwrap_err().answer();
        assert!(e.details.contains("allocation file"), "{e}");
        assert_eq!(
            f.calls(),
            ["p1 ADD", "syncing ADD", "syncing DEL", "p1 DEL"]
        );
        assert!(!f.record_path("ctr1").exists());
    }
}

/// Logs its calls into the fakes' log and edits results as a data plane
/// would; fails `set` when asked to.
struct Hook {
    log: Arc<Fakes>,
    fail_set: bool,
    /// The results the hook was given.
    seen: Arc<Mutex<Vec<CniResult>>>,
}

impl RouteHook for Hook {
    fn clear_default_route(
        &self,
        netns: &Path,
        ifname: &str,
        result: &mut CniResult,
    ) -> Result<(), RunError> {
        self.log
            .log_line(&format!("hook clear {} {ifname}", netns.display()));
        self.seen.lock().unwrap().push(result.clone());
        strip_default_routes(result);
        Ok(())
    }

    fn set_default_route(
        &self,
        netns: &Path,
        ifname: &str,
        gateways: &[IpAddr],
        result: &mut CniResult,
    ) -> Result<(), RunError> {
        let gws: Vec<String> = gateways.iter().map(|g| g.to_string()).collect();
        self.log.log_line(&format!(
            "hook set {} {ifname} {}",
            netns.display(),
            gws.join(",")
        ));
        self.seen.lock().unwrap().push(result.clone());
        set_default_routes(result, gateways);
        if self.fail_set {
            // The data plane's own failure, as a CNI error.
            return Err(RunError::Plugin(CniError::plugin(
                codes::PLUGIN_FAILED,
                "route failed",
                "no route to 10.0.2.254",
            )));
        }
        Ok(())
    }
}

#[test]
fn default_route_hooks_run_after_their_attachment_and_shape_the_result() {
    // multi-net-spec §4.1.2.1.9: the default network's default route is
    // cleared, the selected attachment's set through its gateways.
    for fail_set in [false, true] {
        let f = Arc::new(Fakes::new(&["p1", "q1", "r1"]));
        let (r1, r2) = (
            result_json("1.0.0", 1, "eth0"),
            result_json("1.0.0", 2, "net1"),
        );
        f.answer_result("p1", &r1);
        f.answer_result("q1", &r2);
        f.answer_result("r1", &result_json("1.0.0", 3, "net2"));
        let mut a = cluster(&["p1"]);
        a.clear_default_route = true;
        let mut b = attachment("ns/b", "net1", "1.0.0", &["q1"]);
        b.default_route = Some(vec!["10.0.2.254".parse().unwrap()]);
        let c = attachment("ns/c", "net2", "1.0.0", &["r1"]);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let hook = Hook {
            log: Arc::clone(&f),
            fail_set,
            seen: Arc::clone(&seen),
        };
        let registry = Registry::new();
        let ex = executor(&f).with_route_hook(Box::new(hook));
        let ctx = f.ctx(&registry, "ctr1");
        let netns = path_str(&f.netns());
        let outcome = ex.add(&plan(vec![a.clone(), b.clone(), c]), &ctx);

        // Each hook got its attachment's final result, as the plugins made it.
        let mut want_seen = vec![as_result(&r1), as_result(&r2)];
        for r in &mut want_seen {
            r.cni_version = Some(CniVersion::V1_0_0);
        }
        assert_eq!(*seen.lock().unwrap(), want_seen);
        let mut want = vec![
            "p1 ADD".to_string(),
            format!("hook clear {netns} eth0"),
            "q1 ADD".into(),
            format!("hook set {netns} net1 10.0.2.254"),
        ];
        if !fail_set {
            want.push("r1 ADD".into());
            assert_eq!(f.calls(), want);
            let results = outcome.unwrap();
            let a_routes = &results[0].result.as_ref().unwrap().routes;
            assert!(a_routes.iter().all(|r| !r.is_default()), "{a_routes:?}");
            let b_routes: Vec<String> = results[1]
                .result
                .as_ref()
                .unwrap()
                .routes
                .iter()
                .map(|r| format!("{} via {:?}", r.dst, r.gw))
                .collect();
            assert_eq!(b_routes, ["0.0.0.0/0 via Some(10.0.2.254)"]);
            // The cached result is the shaped one: DEL (and CHECK) see it.
            f.reset_calls();
            ex.del(&ctx, None).unwrap();
            let prev = &f.call(2).stdin["prevResult"];
            assert_eq!(f.call(2).plugin, "p1");
            assert_eq!(prev.get("routes"), None, "{prev}");
        } else {
            // A failed route step fails its attachment: the whole chain and
            // the earlier attachments are rolled back, the next never runs.
            want.extend(["q1 DEL".to_string(), "p1 DEL".into()]);
            assert_eq!(f.calls(), want);
            let e = outcome.unwrap_err().answer();
            assert_eq!(
                e.details,
                "ns/b (net1) default route (multi-net-spec §4.1.2.1.9): no route to 10.0.2.254"
            );
            // q1's DEL got what q1 produced, not the hook's half-changed copy.
            assert_eq!(
                f.call(4).stdin["prevResult"],
                prev_in(&r2, CniVersion::V1_0_0)
            );
            // Everything was undone: nothing is owed, no record is left.
            assert!(!f.record_path("ctr1").exists());
        }
    }
}

/// An in-process plugin whose ADD finds its interface name taken and fails
/// having undone its own work (as the built-in drivers do).
struct InTheWay {
    log: Arc<Fakes>,
}

impl Plugin for InTheWay {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        self.log.log_builtin("inway", "ADD", &req.config);
        Err(CniError {
            undone: true,
            ..CniError::invalid_config("CNI_IFNAME", "eth0 already exists")
        })
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        self.log.log_builtin("inway", "DEL", &req.config);
        Ok(())
    }
}

#[test]
fn the_del_after_an_add_that_found_its_way_taken_runs_nothing() {
    // The record of an ADD whose failing plugin undid its work stays,
    // owing nothing, so the DEL after it does not fall back to the
    // configuration (which would delete what was in the way); that DEL
    // removes it, and a later DEL falls back as for any missing record.
    let f = Arc::new(Fakes::new(&[]));
    let log = Arc::clone(&f);
    let registry = Registry::new().with_builtin("inway", move |_, _| {
        Box::new(InTheWay {
            log: Arc::clone(&log),
        })
    });
    let ex = executor(&f);
    let ctx = f.ctx(&registry, "ctr1");
    let p = plan(vec![cluster(&["inway"])]);
    let fallback = || Ok(p.clone());
    ex.add(&p, &ctx).unwrap_err().answer();
    assert_eq!(
        record(&f, "ctr1")["attachments"][0]["pendingDel"],
        json!([])
    );
    let report = ex.del(&ctx, Some(&fallback)).unwrap();
    assert!(report.detached.is_empty());
    assert_eq!(f.calls(), ["inway ADD"]);
    assert!(!f.record_path("ctr1").exists());
    ex.del(&ctx, Some(&fallback)).unwrap();
    assert_eq!(f.calls(), ["inway ADD", "inway DEL"]);
}
