//! The executor against fake CNI plugins (shell scripts in a temporary
//! CNI_PATH that record their environment and stdin and print canned
//! answers): what each plugin receives, in which order, and what plexus does
//! on failures, crashes, repeated DELs, CHECK and GC.
//!
//! One module per concern: `add` (ADD and its rollback), `del`,
//! `check_gc_status`, `builtin` (in-process plugins mixed with exec'd ones)
//! and `route_hook` (default-route hooks); the fixtures they share are here.

#[path = "../run_support/mod.rs"]
mod run_support;

mod add;
mod builtin;
mod check_gc_status;
mod del;
mod route_hook;

use std::fs;

use plexus::cni::error::{codes, CniError, ErrorCode};
use plexus::cni::CniVersion;
use plexus::plan::{Attachment, Plan};
use plexus::record::Cache;
use plexus::run::{AttachmentResult, Executor, Registry, RunContext, RunError};
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
        .map(|a| (a.network.clone(), a.ifname.to_string()))
        .collect()
}

/// The executor on `f`'s cache and the context of container `id` (eth0 in
/// `f`'s netns), as most tests start.
fn executor_ctx<'a>(f: &Fakes, registry: &'a Registry, id: &str) -> (Executor, RunContext<'a>) {
    (executor(f), f.ctx(registry, id))
}

/// Fakes of `answers`' plugin types, each answering ADD with its
/// `result_json("1.0.0", n, ifname)`.
fn fakes_answering(answers: &[(&str, u8, &str)]) -> Fakes {
    let types: Vec<&str> = answers.iter().map(|(t, _, _)| *t).collect();
    let f = Fakes::new(&types);
    answer_results(&f, answers);
    f
}

/// Each plugin of `answers` answers ADD with `result_json("1.0.0", n, ifname)`.
fn answer_results(f: &Fakes, answers: &[(&str, u8, &str)]) {
    for (t, n, ifname) in answers {
        f.answer_result(t, &result_json("1.0.0", *n, ifname));
    }
}

/// The cluster network (eth0) with plugins `cluster_types`, then `ns/b`
/// (net1, 1.0.0) with plugins `b_types`: the plan most tests run.
fn cluster_and_b(cluster_types: &[&str], b_types: &[&str]) -> Plan {
    plan(vec![
        cluster(cluster_types),
        attachment("ns/b", "net1", "1.0.0", b_types),
    ])
}
