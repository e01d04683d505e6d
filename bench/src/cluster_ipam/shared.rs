//! The shared phase of the dual-stack case (issue 45): plexus exec'd as
//! `whereabouts` (thin) and whereabouts itself ADD at once into one
//! dual-stack network (the /16 and a /64, one `network_name`), every other
//! pod each, as a cluster has them side by side on one pool while it moves
//! from one to the other. whereabouts reads allocation keys with
//! `strconv.ParseInt(offset, 10, 64)`: a key at or past 2^63 it skips,
//! logging "Error decoding ip offset", and erases on its next write of the
//! pool.
//!
//! After the ADDs both pools are read: each side's entries (one per pod and
//! range, holding the pod's container id), plexus's keys whereabouts cannot
//! read, and whereabouts' log (its `log_file`, which plexus ignores). Then
//! each DELs the other's pods at once (the same container id, interface and
//! pod), and nothing of the network may be left.

use std::collections::BTreeSet;
use std::net::Ipv6Addr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use plexus_testkit::kube::{KubeApi, Relay};
use serde_json::{json, Value};

use super::{
    call, macvlan_whereabouts, objects, pods, storm as run_storm, Answer, Setup, Storm, RANGE,
    RANGE6,
};
use crate::daemons::{wait_ready, Daemons, Launch};
use crate::{ms, percentile, verdict, Namespaces};

/// The line whereabouts logs for each key it cannot read.
const DECODE_ERROR: &str = "Error decoding ip offset";
/// The header of each error whereabouts logs.
const ERROR: &str = " [error] ";
/// Entries per pod: an IPv4 and an IPv6 address.
const RANGES: usize = 2;
/// The two binaries, as the table and the cross-DEL name them, and whether
/// each pod is whereabouts' to ADD.
const SIDES: [(&str, &str, bool); 2] = [
    ("whereabouts", "whereabouts", true),
    ("plexus (exec'd, thin)", "plexus", false),
];

/// One binary's half of the pods, as the pools held them after the ADDs.
struct Side {
    who: &'static str,
    /// `who` in the cross-DEL's rows.
    short: &'static str,
    /// Its successful ADDs' times.
    add: Vec<Duration>,
    failures: usize,
    /// One entry per pod and range.
    expected: usize,
    /// Of those, the ones in their pool with the pod's container id.
    present: usize,
    /// Its pods with a v6 key whereabouts cannot read (>= 2^63), in the
    /// pool or in the ADD's answer (whereabouts erases the former on its
    /// next write).
    unreadable: usize,
    /// The other binary's DELs of its pods: the calls that failed (each
    /// retried as a runtime does), and the pool entries and reservations of
    /// its pods left after them.
    del_failures: usize,
    left_entries: usize,
    left_reservations: usize,
}

pub(super) struct Shared {
    storm: Storm,
    sides: Vec<Side>,
    /// The first failed DEL calls' answers (each DEL retried).
    del_errors: Vec<String>,
    /// What plexus's IPAM reconciler left of what the DELs left, if they
    /// left anything.
    swept: Option<Swept>,
    /// whereabouts' log after the ADDs and after the DELs.
    log_add: Log,
    log: Log,
}

/// What plexus's IPAM reconciler did with what the DELs left.
struct Swept {
    left_entries: usize,
    left_reservations: usize,
    took: Duration,
}

/// How often the reconciler's daemon passes, and how long it may take:
/// two passes find an entry gone, the third's list shows it given back.
const SWEEP_INTERVAL: &str = "--ipam-reconcile-interval=2";
const SWEEP_BOUND: Duration = Duration::from_secs(120);

/// What the DELs left of `network` (whereabouts' DEL answers success when
/// it gives up: no runtime retries it), handed to plexus's IPAM reconciler
/// as a cluster running plexus's DaemonSet has it (the pods are gone): one
/// daemon, in a node namespace of its own, passing every 2 s, until nothing
/// is left or [`SWEEP_BOUND`].
fn reconciled(api: &KubeApi, network: &str, setup: &Setup) -> Result<Swept, String> {
    let pid = std::process::id();
    let mut namespaces = Namespaces(Vec::new());
    let node = crate::node(&mut namespaces, pid)?;
    let _relay = Relay::into_netns(node.path(), api.port)
        .map_err(|e| format!("relay into the node namespace: {e}"))?;
    let kubeconfig = api.plexus_kubeconfig();
    let work = setup.tmp.join("shared-reconciler");
    let launch = Launch {
        node: &node,
        plexus: setup.plexus,
        kubeconfig: &kubeconfig,
        work: &work,
    };
    let port = 19_290;
    let _daemon = Daemons(vec![launch.spawn_with(
        "node-r",
        port,
        &[SWEEP_INTERVAL],
    )?]);
    wait_ready(&node, port, Duration::from_secs(60))?;
    let started = Instant::now();
    loop {
        let entries: usize = objects(api, "ippools", network)
            .iter()
            .filter_map(|p| p["spec"]["allocations"].as_object().map(|a| a.len()))
            .sum();
        let reservations = objects(api, "overlappingrangeipreservations", network).len();
        if entries + reservations == 0 || started.elapsed() >= SWEEP_BOUND {
            return Ok(Swept {
                left_entries: entries,
                left_reservations: reservations,
                took: started.elapsed(),
            });
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// What whereabouts' log holds.
#[derive(Default)]
struct Log {
    lines: usize,
    errors: usize,
    decode_errors: usize,
}

/// The shared phase on `network`: `whereabouts` and `plexus` (the
/// `whereabouts` symlink) each ADD every other pod, then DEL the other's.
pub(super) fn storm(
    api: &KubeApi,
    network: &str,
    flat: &Path,
    whereabouts: &Path,
    plexus: &Path,
    setup: &Setup,
) -> Result<Shared, String> {
    let log = setup.tmp.join("whereabouts-shared.log");
    let mut conf = macvlan_whereabouts(network, flat, setup);
    conf["ipam"]["log_file"] = json!(log);
    conf["ipam"]["log_level"] = json!("debug");
    let pods = pods(setup);
    let of_whereabouts: BTreeSet<&str> = pods
        .iter()
        .step_by(2)
        .map(|(_, pod)| pod.as_str())
        .collect();
    let on_side = |pod: &str, wb: bool| of_whereabouts.contains(pod) == wb;
    // The DELs that failed, of each side's pods (as SIDES).
    let del_failed = [AtomicUsize::new(0), AtomicUsize::new(0)];
    // The first few failed DEL calls' answers, retried or not.
    let del_errors = std::sync::Mutex::new(Vec::new());
    let exec = |command: &str, node: &str, pod: &str| {
        // ADDed by its own binary, DELeted by the other.
        let of_wb = of_whereabouts.contains(pod);
        let binary = if of_wb == (command == "ADD") {
            whereabouts
        } else {
            plexus
        };
        let answer = call(binary, &conf, command, node, pod);
        if command == "DEL" && answer.1.is_err() {
            let side = SIDES.iter().position(|(_, _, wb)| *wb == of_wb);
            del_failed[side.unwrap_or_default()].fetch_add(1, Ordering::Relaxed);
            let mut errors = del_errors.lock().unwrap_or_else(|e| e.into_inner());
            if errors.len() < 3 {
                errors.extend(answer.1.as_ref().err().cloned());
            }
        }
        answer
    };
    let mut sides = Vec::new();
    let mut log_add = Log::default();
    let storm = run_storm(api, network, setup, &exec, &mut |added| {
        let held = objects(api, "ippools", network);
        sides = SIDES
            .into_iter()
            .map(|(who, short, wb)| {
                let mine = pods
                    .iter()
                    .zip(added)
                    .filter(|((_, pod), _)| on_side(pod, wb));
                side((who, short), mine, &held)
            })
            .collect();
        log_add = read_log(&log);
    })?;
    let left = objects(api, "ippools", network);
    let reservations = objects(api, "overlappingrangeipreservations", network);
    for (side, (failed, (_, _, wb))) in sides.iter_mut().zip(del_failed.iter().zip(SIDES)) {
        let ids: Vec<String> = pods
            .iter()
            .filter(|(_, pod)| on_side(pod, wb))
            .map(|(_, pod)| format!("c-{pod}"))
            .collect();
        side.del_failures = failed.load(Ordering::Relaxed);
        side.left_entries = ids
            .iter()
            .map(|id| {
                left.iter()
                    .map(|pool| keys_of(pool, id).count())
                    .sum::<usize>()
            })
            .sum();
        side.left_reservations = reservations
            .iter()
            .filter(|r| ids.iter().any(|id| r["spec"]["containerid"] == id.as_str()))
            .count();
    }
    let swept = if storm.left_allocations + storm.left_reservations > 0 {
        Some(reconciled(api, network, setup)?)
    } else {
        None
    };
    Ok(Shared {
        storm,
        sides,
        swept,
        del_errors: del_errors.into_inner().unwrap_or_else(|e| e.into_inner()),
        log_add,
        log: read_log(&log),
    })
}

/// What `pods` (each with its ADD's answer) hold in `pools`.
fn side<'a>(
    (who, short): (&'static str, &'static str),
    pods: impl Iterator<Item = (&'a (String, String), &'a Answer)>,
    pools: &[Value],
) -> Side {
    let base = to_u128(RANGE6.split('/').next().unwrap_or_default());
    let is_v6 = |pool: &&Value| {
        pool["spec"]["range"]
            .as_str()
            .is_some_and(|r| r.contains(':'))
    };
    let mut side = Side {
        who,
        short,
        add: Vec::new(),
        failures: 0,
        expected: 0,
        present: 0,
        unreadable: 0,
        del_failures: 0,
        left_entries: 0,
        left_reservations: 0,
    };
    for ((_, pod), (took, answer)) in pods {
        let id = format!("c-{pod}");
        side.expected += if answer.is_ok() { RANGES } else { 0 };
        side.present += pools
            .iter()
            .filter(|pool| keys_of(pool, &id).next().is_some())
            .count();
        // whereabouts' own test of a key.
        let in_pool = pools
            .iter()
            .filter(is_v6)
            .flat_map(|pool| keys_of(pool, &id))
            .any(|key| key.parse::<i64>().is_err());
        let answered = match answer {
            Ok(result) => {
                side.add.push(*took);
                let ips = result["ips"].as_array().cloned().unwrap_or_default();
                ips.iter()
                    .filter_map(|ip| ip["address"].as_str())
                    .filter(|address| address.contains(':'))
                    .filter_map(|address| address.split('/').next().map(to_u128))
                    .any(|address| address.wrapping_sub(base) > i64::MAX as u128)
            }
            Err(_) => {
                side.failures += 1;
                false
            }
        };
        side.unreadable += usize::from(in_pool || answered);
    }
    side
}

/// The keys of `pool`'s entries held by container `id`.
fn keys_of<'p>(pool: &'p Value, id: &'p str) -> impl Iterator<Item = &'p str> {
    pool["spec"]["allocations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(move |(_, entry)| entry["id"] == id)
        .map(|(key, _)| key.as_str())
}

/// An IPv6 address as a number (0 when it is none).
fn to_u128(address: &str) -> u128 {
    address.parse::<Ipv6Addr>().map_or(0, u128::from)
}

/// whereabouts' log. Its processes append a line's header, message and
/// newline in three writes, so concurrent lines may interleave: the
/// headers and messages are counted, not the lines holding them.
fn read_log(log: &Path) -> Log {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    Log {
        lines: text.lines().count(),
        errors: text.matches(ERROR).count(),
        decode_errors: text.matches(DECODE_ERROR).count(),
    }
}

impl Shared {
    /// Prints the phase; whether nothing was lost, unreadable, given twice
    /// or left, and whereabouts logged no decode error.
    pub(super) fn report(&self) -> bool {
        println!(
            "\nShared pool: whereabouts and plexus (exec'd, thin) ADD at once into one network \
             ({RANGE} and {RANGE6}), every other pod each; then each DELs the other's pods at once"
        );
        println!(
            "{:<22} {:>12} {:>12} {:>9} {:>9} {:>8} {:>6} {:>11}",
            "ADD", "p50", "p99", "failures", "expected", "present", "lost", "keys>=2^63"
        );
        let at = |add: &[Duration], p: f64| {
            if add.is_empty() {
                "-".to_string()
            } else {
                ms(percentile(add, p))
            }
        };
        for s in &self.sides {
            println!(
                "{:<22} {:>12} {:>12} {:>9} {:>9} {:>8} {:>6} {:>11}",
                s.who,
                at(&s.add, 0.5),
                at(&s.add, 0.99),
                s.failures,
                s.expected,
                s.present,
                s.expected.saturating_sub(s.present),
                s.unreadable
            );
        }
        let storm = &self.storm;
        println!(
            "ADD wall {:.2} s; addresses given twice: {}",
            storm.wall.as_secs_f64(),
            storm.duplicates
        );
        println!(
            "{:<46} {:>12} {:>13} {:>18}",
            "cross-DEL (failed DELs retried, as kubelet)",
            "failed calls",
            "entries left",
            "reservations left"
        );
        for (s, other) in self.sides.iter().zip(self.sides.iter().rev()) {
            println!(
                "{:<46} {:>12} {:>13} {:>18}",
                format!("{} DELs the pods {} ADDed", other.short, s.short),
                s.del_failures,
                s.left_entries,
                s.left_reservations
            );
        }
        println!(
            "left after the DELs, all of the network: {} + {} (pool entries + reservations)",
            storm.left_allocations, storm.left_reservations
        );
        let (add, all) = (&self.log_add, &self.log);
        println!(
            "whereabouts' log: {} lines, {} errors, {} \"{DECODE_ERROR}\" \
             (by the end of the ADDs: {} lines, {} errors, {} \"{DECODE_ERROR}\")",
            all.lines, all.errors, all.decode_errors, add.lines, add.errors, add.decode_errors
        );
        for failure in storm.failures.iter().take(3) {
            println!("  shared: {failure}");
        }
        for failure in &self.del_errors {
            println!("  shared, a DEL call (retried): {failure}");
        }
        if all.lines == 0 {
            println!("  whereabouts wrote no log: its decode errors cannot be counted");
        }
        let left = match &self.swept {
            None => 0,
            Some(swept) => {
                println!(
                    "after plexus's IPAM reconciler (one daemon, a pass every 2 s): {} + {} \
                     left, in {:.1} s",
                    swept.left_entries,
                    swept.left_reservations,
                    swept.took.as_secs_f64()
                );
                swept.left_entries + swept.left_reservations
            }
        };
        // whereabouts' own ADDs may fail under load (as in its own storm):
        // their pods hold nothing and are not counted as lost.
        let plexus_side = &self.sides[1];
        let interop = self
            .sides
            .iter()
            .all(|s| s.present == s.expected && s.unreadable == 0)
            && plexus_side.failures == 0
            && storm.del_failures.is_empty()
            && storm.duplicates == 0
            && all.lines > 0
            && all.decode_errors == 0;
        println!(
            "shared pool: nothing lost, no key >= 2^63, no decode error, no duplicate, \
             plexus's calls all done: {}",
            verdict(interop)
        );
        let plexus_left = self.sides[0].left_entries + self.sides[0].left_reservations;
        println!(
            "nothing left: after plexus's DELs {}; after whereabouts' DELs and plexus's \
             reconciler {}",
            verdict(plexus_left == 0),
            verdict(left == 0)
        );
        interop && plexus_left == 0 && left == 0
    }
}
