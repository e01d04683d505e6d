//! The scale simulation (`--scale`, issue 34 item 4): simulated nodes,
//! each a `plexus daemon` with its own node name and no kubelet, against
//! one real kube-apiserver (a private one: the case restarts it) that holds
//! many pods spread over many node names. The cluster grows in steps; at
//! each, every daemon is started at once (a DaemonSet rollout) and
//! measured:
//! - the time until its cache of its node's pods is synced (its log says
//!   so, as multus-daemon's log is read);
//! - its RSS and CPU once synced, and its CPU over an idle spell;
//! - the API requests it made (its own `plexus_api_requests_total`; its
//!   watches as the API server has them registered), at start and while
//!   idle;
//! - the watch events the API server sent it while pods are created in
//!   the cluster, one on its node;
//! - after the API server is restarted: when the API server has its pod
//!   watch registered again, and whether it listed again.
//!
//! The pods on the daemons' nodes run and have their networks (their
//! network-status is written), as at a DaemonSet rollout.
//!
//! With `--multus DIR`, Multus thick's daemons run each step too, on the
//! same objects, after plexus's (`scale_multus.rs`), and the figures are
//! printed side by side with their ratios.
//!
//! With `--policies`, the run with MultiNetworkPolicies instead
//! (`scale_policy.rs`, issue 46), beside multi-networkpolicy-iptables.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use plexus_dataplane::NetNs;
use plexus_testkit::kube::{private_api, KubeApi};

use crate::daemons::{metrics_page, pods_synced, Daemons, Launch, NodeDaemon};
use crate::scale_step::{
    attached_pod, churn, clock_ticks, usage, watch_figures, Baseline, Restart, Setup, Step, IDLE,
    READY_BOUND, RESTART_DOWN,
};
use crate::{percentile, scale_multus, verdict, Namespaces};

/// The first daemon's metrics port in the node namespace; one per node on.
const METRICS_BASE: u16 = 19_500;
/// Pods created per kubectl process, and processes at once.
const CHUNK: usize = 250;
const CREATORS: usize = 4;

pub fn run(setup: &Setup) -> Result<bool, String> {
    println!(
        "\nScale: {} daemons ({} pods each) in a cluster of {:?} pods ({} per node)",
        setup.daemons, setup.per_node, setup.sizes, setup.per_node
    );
    let api = private_api("scale");
    let ns = api.namespace("pxscale");
    let mut namespaces = Namespaces(Vec::new());
    let (node, _relay) = crate::node_reaching(&api, &mut namespaces)?;
    let ours = setup.daemons * setup.per_node;
    let mut made = 0;
    let mut steps = Vec::new();
    let mut multus_steps = Vec::new();
    for &size in &setup.sizes {
        let want = size.max(ours);
        create_pods(&api, &ns, setup, made, want)?;
        made = want;
        let baseline = Baseline::take(&api, || churn(&api, &ns, setup, &format!("b{want}")))?;
        steps.push(measure(&api, &node, &ns, setup, &baseline, want)?);
        if let Some(multus) = setup.multus {
            multus_steps.push(scale_multus::measure(
                &api, &node, &ns, setup, &baseline, multus, want,
            )?);
        }
    }
    let ours_ok = report(setup, "plexus daemon", &steps)?;
    if multus_steps.is_empty() {
        return Ok(ours_ok);
    }
    report(setup, "Multus thick (multus-daemon)", &multus_steps)?;
    Ok(compare(&steps, &multus_steps) && ours_ok)
}

/// The pod `i` of the cluster: the daemons' nodes' first, then the others'.
fn pod(setup: &Setup, i: usize) -> (String, String) {
    let ours = setup.daemons * setup.per_node;
    if i < ours {
        let n = i / setup.per_node;
        (
            format!("scale-node-{n}"),
            format!("s{n}-{}", i % setup.per_node),
        )
    } else {
        let k = (i - ours) / setup.per_node;
        (
            format!("far-node-{k}"),
            format!("f{k}-{}", (i - ours) % setup.per_node),
        )
    }
}

/// Pods `from..to` created, by several kubectl processes at once.
pub(crate) fn create_pods(
    api: &KubeApi,
    ns: &str,
    setup: &Setup,
    from: usize,
    to: usize,
) -> Result<(), String> {
    let started = Instant::now();
    let chunks: Vec<(usize, usize)> = (from..to)
        .step_by(CHUNK)
        .map(|start| (start, (start + CHUNK).min(to)))
        .collect();
    for wave in chunks.chunks(CREATORS) {
        std::thread::scope(|s| {
            for &(start, end) in wave {
                s.spawn(move || {
                    let mut manifest = String::new();
                    for i in start..end {
                        let (node, name) = pod(setup, i);
                        manifest.push_str(&attached_pod(ns, &node, &name));
                    }
                    api.create(&manifest);
                });
            }
        });
    }
    println!(
        "  {} pods created in {:.1} s",
        to - from,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The daemon's own count of its API requests, by `verb resource`.
fn requests(node: &NetNs, daemon: &NodeDaemon) -> Result<BTreeMap<String, u64>, String> {
    let text = metrics_page(node, daemon.port)?;
    let mut counts = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("plexus_api_requests_total{"))
    {
        let label = |key: &str| -> String {
            let pat = format!("{key}=\"");
            line.find(&pat)
                .map(|i| {
                    let rest = &line[i + pat.len()..];
                    rest[..rest.find('"').unwrap_or(0)].to_string()
                })
                .unwrap_or_default()
        };
        let value: u64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0) as u64;
        counts.insert(format!("{} {}", label("verb"), label("resource")), value);
    }
    Ok(counts)
}

fn total(counts: &BTreeMap<String, u64>) -> u64 {
    counts.values().sum()
}

/// One step: a rollout of every daemon, idle, restart.
fn measure(
    api: &KubeApi,
    node: &NetNs,
    ns: &str,
    setup: &Setup,
    baseline: &Baseline,
    pods: usize,
) -> Result<Step, String> {
    let kubeconfig = api.plexus_kubeconfig();
    let work = setup.tmp.join(format!("scale-{pods}"));
    let launch = Launch {
        node,
        plexus: setup.plexus,
        kubeconfig: &kubeconfig,
        work: &work,
    };
    let mut daemons = Daemons::default();
    let started = Instant::now();
    for n in 0..setup.daemons {
        let port = METRICS_BASE + u16::try_from(n).map_err(|e| e.to_string())?;
        // The IPAM reconciler on, at its default interval, as deployed.
        let reconciler = ["--ipam-reconcile-interval=300"];
        daemons
            .0
            .push(launch.spawn_with(&format!("scale-node-{n}"), port, &reconciler)?);
    }
    let mut ready_at: Vec<Option<Duration>> = vec![None; setup.daemons];
    while ready_at.iter().any(Option::is_none) {
        if started.elapsed() > READY_BOUND {
            return Err(format!(
                "{pods} pods: not every daemon synced within {READY_BOUND:?}"
            ));
        }
        for (slot, daemon) in ready_at.iter_mut().zip(&daemons.0) {
            if slot.is_none() && pods_synced(daemon) {
                *slot = Some(started.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let pids: Vec<u32> = daemons.0.iter().map(|d| d.child.id()).collect();
    // Requests but watches from the daemons' own counts; the watches as
    // the API server has them registered, as Multus's are counted.
    let watching = watch_figures(api)?;
    let mut at_start = BTreeMap::from([(
        "watch (registered)".to_string(),
        baseline.daemons_watchers(&watching),
    )]);
    let mut before_idle = Vec::new();
    for daemon in &daemons.0 {
        let counts = requests(node, daemon)?;
        for (key, n) in counts.iter().filter(|(key, _)| !key.starts_with("watch ")) {
            *at_start.entry(key.clone()).or_insert(0) += n;
        }
        before_idle.push(total(&counts));
    }
    let usage = usage(&pids, || {
        std::thread::sleep(IDLE);
        let mut idle_requests = 0;
        for (daemon, before) in daemons.0.iter().zip(&before_idle) {
            idle_requests += total(&requests(node, daemon)?) - before;
        }
        Ok(idle_requests)
    })?;
    let events = baseline.churn_per_daemon(api, ns, setup, &format!("p{pods}"))?;

    // The restart: the API server must have each daemon's pod watch again.
    let pod_lists = || {
        daemons
            .0
            .iter()
            .map(|d| requests(node, d).map(|c| c.get("list pods").copied().unwrap_or(0)))
            .sum::<Result<u64, String>>()
    };
    let restart = Restart::measure(api, baseline, watching.pod_watchers, pod_lists)?;
    drop(daemons);
    Ok(Step::new(pods, ready_at, usage, at_start, events, restart))
}

fn mean(values: &[u64]) -> f64 {
    values.iter().sum::<u64>() as f64 / values.len().max(1) as f64
}

fn report(setup: &Setup, who: &str, steps: &[Step]) -> Result<bool, String> {
    println!("{who}:");
    println!(
        "{:>8} {:>10} {:>10} {:>10} {:>10} {:>11} {:>9} {:>10} {:>10} {:>10} {:>8}",
        "pods",
        "sync p50",
        "sync max",
        "RSS mean",
        "RSS max",
        "start CPU",
        "idle req",
        "API up",
        "back p50",
        "back max",
        "relists"
    );
    for s in steps {
        println!(
            "{:>8} {:>8.2} s {:>8.2} s {:>7.1} MB {:>7.1} MB {:>8.0} ms {:>9} {:>8.2} s {:>8.2} s {:>8.2} s {:>8}",
            s.pods,
            percentile(&s.ready, 0.5).as_secs_f64(),
            percentile(&s.ready, 1.0).as_secs_f64(),
            mean(&s.usage.rss_kb) / 1024.0,
            *s.usage.rss_kb.iter().max().unwrap_or(&0) as f64 / 1024.0,
            mean(&s.usage.start_cpu_ms),
            s.usage.idle_requests,
            s.restart.api_ready.as_secs_f64(),
            percentile(&s.restart.back, 0.5).as_secs_f64(),
            percentile(&s.restart.back, 1.0).as_secs_f64(),
            s.restart.relists,
        );
    }
    println!(
        "(API up, back: from the API server's kill, {RESTART_DOWN:?} down, to its readiness and \
         to the API server having each daemon's pod watch registered again)"
    );
    for s in steps {
        let per: Vec<String> = s
            .start_requests
            .iter()
            .map(|(k, n)| format!("{:.1} {k}", *n as f64 / setup.daemons as f64))
            .collect();
        println!(
            "  {} pods: requests per daemon at start: {}; idle CPU {:.0} ms in {:?}; watch events \
             per daemon while {} pods were created (1 on its node): {:.1}; back after the restart: \
             {} of {} daemons",
            s.pods,
            per.join(", "),
            mean(&s.usage.idle_cpu_ms),
            IDLE,
            setup.daemons * 11,
            s.churn_events,
            s.restart.back.len(),
            setup.daemons,
        );
    }
    let (Some(first), Some(last)) = (steps.first(), steps.last()) else {
        return Ok(true);
    };
    let flat = mean(&last.usage.rss_kb) <= mean(&first.usage.rss_kb) * 1.25 + 1024.0;
    let idle = steps.iter().all(|s| s.usage.idle_requests == 0);
    // The reconnect backoff's ceiling (2 s) and its jitter, past the API
    // server's readiness.
    let late = Duration::from_secs(3);
    let back = steps.iter().all(|s| {
        s.restart.back.len() == setup.daemons
            && percentile(&s.restart.back, 1.0) <= s.restart.api_ready + late
    });
    println!(
        "memory flat as the cluster grows ({:.1} MB at {} pods, {:.1} MB at {}): {}",
        mean(&first.usage.rss_kb) / 1024.0,
        first.pods,
        mean(&last.usage.rss_kb) / 1024.0,
        last.pods,
        verdict(flat)
    );
    println!("an idle daemon makes no requests: {}", verdict(idle));
    println!(
        "every watch back within {late:?} of the API server's readiness: {}",
        verdict(back)
    );
    Ok(flat && idle && back)
}

/// Where a ratio of counts is even.
const COUNTS_EVEN: f64 = 0.95;

/// plexus's figures against Multus's, step by step: the ratio of each
/// (Multus's over plexus's: above 1 is plexus ahead), and whether plexus
/// is ahead on every one.
fn compare(ours: &[Step], theirs: &[Step]) -> bool {
    println!("Multus thick / plexus (above 1: plexus ahead):");
    println!(
        "{:>8} {:>10} {:>10} {:>10} {:>11} {:>12} {:>13} {:>10} {:>8}",
        "pods",
        "sync p50",
        "sync max",
        "RSS mean",
        "start CPU",
        "start req",
        "watch events",
        "back max",
        "relists"
    );
    let ratio = |theirs: f64, ours: f64| theirs / ours.max(1e-9);
    // /proc's CPU times count in ticks: below one, a ratio means nothing.
    let tick = 1000.0 / clock_ticks() as f64;
    let cpu = |s: &Step| mean(&s.usage.start_cpu_ms).max(tick);
    let mut ahead = true;
    for (o, t) in ours.iter().zip(theirs) {
        let requests = |s: &Step| total(&s.start_requests) as f64;
        let figures = [
            ratio(
                percentile(&t.ready, 0.5).as_secs_f64(),
                percentile(&o.ready, 0.5).as_secs_f64(),
            ),
            ratio(
                percentile(&t.ready, 1.0).as_secs_f64(),
                percentile(&o.ready, 1.0).as_secs_f64(),
            ),
            ratio(mean(&t.usage.rss_kb), mean(&o.usage.rss_kb)),
            ratio(cpu(t), cpu(o)),
            ratio(requests(t), requests(o)),
            ratio(t.churn_events, o.churn_events),
            ratio(
                percentile(&t.restart.back, 1.0).as_secs_f64(),
                percentile(&o.restart.back, 1.0).as_secs_f64(),
            ),
        ];
        println!(
            "{:>8} {:>9.2}x {:>9.2}x {:>9.2}x {:>10.2}x {:>11.2}x {:>12.2}x {:>9.2}x {:>4} / {}",
            o.pods,
            figures[0],
            figures[1],
            figures[2],
            figures[3],
            figures[4],
            figures[5],
            figures[6],
            t.restart.relists,
            o.restart.relists
        );
        // The counts (figures 4 and 5) are the least there can be when both
        // make one LIST and one WATCH and get one event per pod of their
        // node: they are even within the bookmarks the API server sends
        // now and then (one per watch about every 5 min).
        ahead &= figures
            .iter()
            .enumerate()
            .all(|(i, &f)| f >= 1.0 || (matches!(i, 4 | 5) && f >= COUNTS_EVEN))
            && t.usage.idle_requests >= o.usage.idle_requests
            && t.restart.relists >= o.restart.relists;
    }
    println!(
        "plexus ahead of Multus thick on every figure (the counts: at least even, {COUNTS_EVEN}x): {}",
        verdict(ahead)
    );
    plot("daemon sync time p50 (s)", ours, theirs, |s| {
        percentile(&s.ready, 0.5).as_secs_f64()
    });
    plot("daemon RSS mean (MB)", ours, theirs, |s| {
        mean(&s.usage.rss_kb) / 1024.0
    });
    plot("daemon CPU to sync, mean (ms)", ours, theirs, |s| {
        mean(&s.usage.start_cpu_ms)
    });
    ahead
}

/// A text plot of `figure` against the cluster's size: a bar per step for
/// plexus and for Multus, on one scale.
fn plot(title: &str, ours: &[Step], theirs: &[Step], figure: impl Fn(&Step) -> f64) {
    const WIDTH: f64 = 50.0;
    let max = ours
        .iter()
        .chain(theirs)
        .map(&figure)
        .fold(f64::MIN_POSITIVE, f64::max);
    println!("\n{title}, against the cluster's pods:");
    for (o, t) in ours.iter().zip(theirs) {
        for (who, step) in [("plexus", o), ("Multus", t)] {
            let value = figure(step);
            let bar = "#".repeat(((value / max) * WIDTH).round().max(1.0) as usize);
            println!("{:>7} {who:<6} |{bar} {value:.2}", step.pods);
        }
    }
}
