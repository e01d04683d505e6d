//! Where a plugin call's time goes, phase by phase: the marks and spans a
//! `plexus` process writes when `PLEXUS_PHASES` names a file (plexus's
//! `src/phases.rs`), put together with the benchmark's own clock readings
//! of its spawn and its reaping (`Run`), which bound them.
//!
//! A phase's time is from the mark before it to its own mark, less the
//! spans inside (API reads, record writes, exec'd plugins, the fsync wait),
//! which are phases of their own. "exec and start" is from the spawn to
//! plexus's first mark (`main`), "exit and reap" from its last mark to
//! the benchmark's return from wait4.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::{percentile, Run};

/// CLOCK_MONOTONIC now, in nanoseconds: the clock plexus marks with.
pub fn now_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// One call's time per phase, in the order the phases first came.
fn call_phases(run: &Run, line: &Value) -> Vec<(String, u64)> {
    let pairs = |key: &str| -> Vec<Vec<Value>> {
        line[key]
            .as_array()
            .map(|a| a.iter().filter_map(|m| m.as_array().cloned()).collect())
            .unwrap_or_default()
    };
    let marks: Vec<(String, u64)> = pairs("marks")
        .iter()
        .filter_map(|m| Some((m.first()?.as_str()?.to_string(), m.get(1)?.as_u64()?)))
        .collect();
    let spans: Vec<(String, u64, u64)> = pairs("spans")
        .iter()
        .filter_map(|s| {
            Some((
                s.first()?.as_str()?.to_string(),
                s.get(1)?.as_u64()?,
                s.get(2)?.as_u64()?,
            ))
        })
        .collect();
    let mut out: Vec<(String, u64)> = Vec::new();
    let mut add = |name: &str, ns: u64| match out.iter_mut().find(|(n, _)| n == name) {
        Some((_, total)) => *total += ns,
        None => out.push((name.to_string(), ns)),
    };
    let Some(&(_, first)) = marks.first() else {
        return out;
    };
    add("exec and start", first.saturating_sub(run.spawned_ns));
    for pair in marks.windows(2) {
        let ((_, from), (name, to)) = (&pair[0], &pair[1]);
        let inside: Vec<&(String, u64, u64)> = spans
            .iter()
            .filter(|(_, start, end)| start >= from && end <= to)
            .collect();
        let spent: u64 = inside.iter().map(|(_, start, end)| end - start).sum();
        for (span, start, end) in inside {
            add(span, end - start);
        }
        add(name, (to - from).saturating_sub(spent));
    }
    let last = marks.last().map_or(first, |&(_, t)| t);
    add("exit and reap", run.reaped_ns.saturating_sub(last));
    out
}

/// The median time of each phase over the calls `runs` whose lines are in
/// `file`, printed as a table under `title`, beside the median call.
pub fn report(title: &str, file: &Path, runs: &[Run]) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let lines: BTreeMap<u64, Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| Some((v["pid"].as_u64()?, v)))
        .collect();
    let mut order: Vec<String> = Vec::new();
    let mut samples: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
    let mut calls = 0;
    for run in runs {
        let Some(line) = lines.get(&u64::from(run.pid)) else {
            continue;
        };
        calls += 1;
        for (name, ns) in call_phases(run, line) {
            if !order.contains(&name) {
                order.push(name.clone());
            }
            samples
                .entry(name)
                .or_default()
                .push(Duration::from_nanos(ns));
        }
    }
    if calls == 0 {
        return Err(format!("no call of {} marked its phases", file.display()));
    }
    let walls: Vec<Duration> = runs.iter().map(|r| r.elapsed).collect();
    let call = percentile(&walls, 0.5).as_secs_f64() * 1e3;
    println!("\n{title} ({calls} calls; a phase missing from a call counts 0 there)");
    println!(
        "{:<24} {:>10} {:>10} {:>8}",
        "phase", "median ms", "p90 ms", "share"
    );
    let mut sum = 0.0;
    for name in &order {
        let mut times = samples[name].clone();
        times.resize(calls, Duration::ZERO);
        let median = percentile(&times, 0.5).as_secs_f64() * 1e3;
        let p90 = percentile(&times, 0.9).as_secs_f64() * 1e3;
        sum += median;
        println!(
            "{name:<24} {median:>10.2} {p90:>10.2} {:>7.0}%",
            100.0 * median / call
        );
    }
    println!(
        "{:<24} {sum:>10.2} (the median call took {call:.2} ms)",
        "sum of medians"
    );
    Ok(())
}
