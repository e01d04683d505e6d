//! What a step of the scale simulation measures, and how, for plexus's
//! daemons (`scale.rs`) and Multus's (`scale_multus.rs`) alike: the
//! simulation's bounds and setup, a step's figures, the daemons' resources
//! from `/proc`, and requests as the API server's audit log has them.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use plexus_testkit::kube::{AuditedRequest, KubeApi};
use plexus_testkit::process::proc_status_kb;

/// How long a rollout may take to sync every daemon.
pub(crate) const READY_BOUND: Duration = Duration::from_secs(300);
/// The idle spell whose requests and CPU are counted.
pub(crate) const IDLE: Duration = Duration::from_secs(10);
/// How long the API server is down in the restart.
pub(crate) const RESTART_DOWN: Duration = Duration::from_secs(2);
/// How long every watch may take to come back after the restart.
pub(crate) const BACK_BOUND: Duration = Duration::from_secs(60);

/// What the simulation runs, and on how many nodes and pods.
pub struct Setup<'a> {
    pub plexus: &'a Path,
    pub tmp: &'a Path,
    /// Simulated nodes with a daemon.
    pub daemons: usize,
    /// Pods on each node (the daemons' and the others').
    pub per_node: usize,
    /// The cluster's pod counts, one step each, ascending.
    pub sizes: Vec<usize>,
    /// A build of Multus thick to run beside plexus (`multus-daemon`).
    pub multus: Option<&'a Path>,
}

/// What one step measured, of plexus's daemons or Multus's.
pub(crate) struct Step {
    pub(crate) pods: usize,
    pub(crate) ready: Vec<Duration>,
    pub(crate) usage: Usage,
    /// Requests made while starting, summed over the daemons, by verb and
    /// resource.
    pub(crate) start_requests: BTreeMap<String, u64>,
    pub(crate) restart: Restart,
}

/// The API server's restart, from the kill: when it was ready again, when
/// each daemon's pod watch was back, and the LISTs the daemons made.
pub(crate) struct Restart {
    pub(crate) api_ready: Duration,
    /// When each daemon was back: plexus's, when a pod created on its
    /// node after the restart was in its cache; Multus's, when the audit
    /// log showed its pod watch open again (some go unseen: left out).
    pub(crate) back: Vec<Duration>,
    pub(crate) relists: u64,
}

/// The daemons' resources once synced, and over the idle spell.
pub(crate) struct Usage {
    pub(crate) rss_kb: Vec<u64>,
    pub(crate) start_cpu_ms: Vec<u64>,
    pub(crate) idle_cpu_ms: Vec<u64>,
    /// Requests made over the idle spell, summed over the daemons.
    pub(crate) idle_requests: u64,
}

/// The RSS and CPU of the daemons `pids` now, then their CPU over the
/// idle spell `idle` (it sleeps [`IDLE`] and returns the requests made
/// meanwhile).
pub(crate) fn usage(
    pids: &[u32],
    idle: impl FnOnce() -> Result<u64, String>,
) -> Result<Usage, String> {
    let start_cpu_ms = pids
        .iter()
        .map(|&p| cpu_ms(p))
        .collect::<Result<Vec<_>, _>>()?;
    let rss_kb = pids
        .iter()
        .map(|&p| rss_kb(p))
        .collect::<Result<Vec<_>, _>>()?;
    let idle_requests = idle()?;
    let idle_cpu_ms = pids
        .iter()
        .zip(&start_cpu_ms)
        .map(|(&p, start)| Ok(cpu_ms(p)? - start))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Usage {
        rss_kb,
        start_cpu_ms,
        idle_cpu_ms,
        idle_requests,
    })
}

/// The kernel's clock ticks per second, the unit of `/proc`'s CPU times.
pub(crate) fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64
}

/// `/proc/<pid>/stat`'s user and system CPU, in ms.
fn cpu_ms(pid: u32) -> Result<u64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    // After the command's name in parentheses: state is field 3, utime 14.
    let after = &stat[stat.rfind(')').ok_or("no comm in stat")? + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    let ticks: u64 =
        fields[11].parse::<u64>().unwrap_or(0) + fields[12].parse::<u64>().unwrap_or(0);
    Ok(ticks * 1000 / clock_ticks())
}

/// `/proc/<pid>/status`'s VmRSS, in KiB.
fn rss_kb(pid: u32) -> Result<u64, String> {
    proc_status_kb(pid, "VmRSS").ok_or_else(|| format!("no VmRSS for {pid}"))
}

/// A request in the audit log, counted once: a watch when it started
/// streaming, any other when it completed.
fn counted_once(r: &AuditedRequest) -> bool {
    if r.verb == "watch" {
        r.stage == "ResponseStarted"
    } else {
        r.stage == "ResponseComplete"
    }
}

/// The audit log's requests from line `from` on that `client` made.
pub(crate) fn audited_since(
    api: &KubeApi,
    from: usize,
    client: fn(&AuditedRequest) -> bool,
) -> Vec<AuditedRequest> {
    api.audited()
        .into_iter()
        .skip(from)
        .filter(|r| counted_once(r) && client(r))
        .collect()
}

/// Whether `r` selects the pods of node `node` (its field selector, as
/// client-go and kube-rs encode it; `node-1` must not match `node-10`).
fn for_node(r: &AuditedRequest, node: &str) -> bool {
    let selector = format!("spec.nodeName%3D{node}");
    r.uri.contains(&format!("{selector}\\u0026")) || r.uri.ends_with(&selector)
}

/// The pod watches of `nodes` (each its field selector) that `client`
/// opened after line `mark` of the audit log, as they show up within
/// `bound`: when each was seen, from `since`. The audit log misses some
/// watches of a crowd of clients, so the nodes not seen are left out
/// rather than waited for.
pub(crate) fn watches_seen(
    api: &KubeApi,
    mark: usize,
    nodes: &[String],
    since: Instant,
    bound: Duration,
    client: fn(&AuditedRequest) -> bool,
) -> Vec<Duration> {
    let mut seen: Vec<Option<Duration>> = vec![None; nodes.len()];
    while seen.iter().any(Option::is_none) && since.elapsed() < bound {
        let requests = audited_since(api, mark, client);
        for (slot, node) in seen.iter_mut().zip(nodes) {
            let watching = requests
                .iter()
                .any(|r| r.verb == "watch" && r.resource == "pods" && for_node(r, node));
            if slot.is_none() && watching {
                *slot = Some(since.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    seen.into_iter().flatten().collect()
}

/// Whether multus-daemon made `r` (plexus's daemons send no User-Agent).
pub(crate) fn by_multus(r: &AuditedRequest) -> bool {
    r.user_agent.starts_with("multus-daemon")
}
