//! ADD through the executor (cni-SPEC §3 "Adding an attachment",
//! multi-net-spec §7.1, §7.2): what each plugin receives and in which order,
//! validation before the first ADD, and the rollback of everything done when
//! a plugin fails, times out, crashes the executor or the record cannot be
//! written; a second ADD is refused until the first is deleted.

use std::path::Path;
use std::time::{Duration, Instant};

use super::*;
use plexus::cni::names::IfName;

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
                ifname: IfName::new("eth0").unwrap(),
                default: true,
                result: Some(want_a),
                device_info: None,
                warnings: Vec::new(),
            },
            AttachmentResult {
                network: "ns/b".into(),
                ifname: IfName::new("net1").unwrap(),
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
    let (ex, ctx) = executor_ctx(&f, &registry, "ctr1");
    let p = cluster_and_b(&["p1"], &["q1", "nope"]);
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
    answer_results(
        &f,
        &[("p1", 1, "eth0"), ("p2", 2, "eth0"), ("q1", 3, "net1")],
    );
    let (r2, r3) = (
        result_json("1.0.0", 2, "eth0"),
        result_json("1.0.0", 3, "net1"),
    );
    f.answer_error("q2", "ADD", 11, "busy", "lock held");
    let registry = Registry::new();
    let (ex, ctx) = executor_ctx(&f, &registry, "ctr1");
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
    answer_results(&f, &[("p1", 1, "eth0"), ("p2", 2, "eth0")]);
    f.answer_stdout("q1", "ADD", "this is not JSON");
    f.answer_error("p2", "DEL", 5, "I/O failure", "read-only file system");
    let registry = Registry::new();
    let (ex, ctx) = executor_ctx(&f, &registry, "ctr1");
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
    answer_results(
        &f,
        &[("p1", 1, "eth0"), ("p2", 2, "eth0"), ("q1", 3, "net1")],
    );
    f.answer_file("q2", "ADD", "kill-parent", "");
    // libtest's name for this test: its module path without the crate.
    let (_, module) = module_path!().split_once("::").unwrap();
    let name = format!("{module}::crash_in_the_middle_of_add_leaves_a_record_del_undoes");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &name, "--nocapture", "--test-threads=1"])
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
    let f = fakes_answering(&[("p1", 1, "eth0"), ("q1", 2, "net1")]);
    let rec = f.record_path("ctr1");
    let sabotage = format!("rm -f {0}; mkdir {0}", path_str(&rec));
    f.answer_file("p1", "ADD", "run", &sabotage);
    // The rollback's DEL repairs it: the last write succeeds.
    f.answer_file("p1", "DEL", "run", &format!("rmdir {}", path_str(&rec)));
    let registry = Registry::new();
    let p = cluster_and_b(&["p1"], &["q1"]);
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
fn exec_timeout_fails_the_add_and_rolls_back() {
    let f = Fakes::new(&["p1", "p2"]);
    answer_results(&f, &[("p1", 1, "eth0")]);
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
fn add_is_refused_while_an_earlier_add_is_not_deleted() {
    // cni-SPEC §2 ADD: no second ADD for the same (container, ifname).
    let f = fakes_answering(&[("p1", 1, "eth0")]);
    let registry = Registry::new();
    let (ex, ctx) = executor_ctx(&f, &registry, "ctr1");
    let p = plan(vec![cluster(&["p1"])]);
    ex.add(&p, &ctx).unwrap();
    let e = ex.add(&p, &ctx).unwrap_err().answer();
    assert_eq!(e.msg, "attachment already exists");
    assert_eq!(f.calls(), ["p1 ADD"]);
    ex.del(&ctx, None).unwrap();
    ex.add(&p, &ctx).unwrap();
    assert_eq!(f.calls(), ["p1 ADD", "p1 DEL", "p1 ADD"]);
}
