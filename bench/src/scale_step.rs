//! What a step of the scale simulation measures, and how, for plexus's
//! daemons (`scale.rs`) and Multus's (`scale_multus.rs`) alike: the
//! simulation's bounds and setup, a step's figures, the daemons' resources
//! from `/proc`, requests as the API server's audit log has them, and the
//! watches as the API server counts them (its `/metrics`: watchers
//! registered and events sent, the same figures whoever the client is).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use plexus_testkit::kube::{AuditedRequest, KubeApi};
use plexus_testkit::process::proc_status_kb;

/// How long a rollout may take to sync every daemon.
pub(crate) const READY_BOUND: Duration = Duration::from_secs(300);
/// The idle spell whose requests and CPU are counted: a minute, longer
/// than any period a daemon could poll at (the IPAM reconciler's Lease was
/// read about three times a minute before issue 47).
pub(crate) const IDLE: Duration = Duration::from_secs(60);
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
    /// A build of multi-networkpolicy-iptables, for the run with
    /// MultiNetworkPolicies (`scale_policy.rs`).
    pub mnp_iptables: Option<&'a Path>,
}

/// What one step measured, of plexus's daemons or Multus's.
pub(crate) struct Step {
    pub(crate) pods: usize,
    pub(crate) ready: Vec<Duration>,
    pub(crate) usage: Usage,
    /// Requests made while starting, summed over the daemons, by verb and
    /// resource.
    pub(crate) start_requests: BTreeMap<String, u64>,
    /// Watch events the API server sent per daemon while pods were
    /// created, one on each daemon's node and the rest on other nodes.
    pub(crate) churn_events: f64,
    pub(crate) restart: Restart,
}

/// The API server's restart, from the kill: when it was ready again, when
/// each daemon's pod watch was back, and the LISTs the daemons made.
pub(crate) struct Restart {
    pub(crate) api_ready: Duration,
    /// When the API server had each of the daemons' pod watches registered
    /// again (the k-th time is when it had k of them).
    pub(crate) back: Vec<Duration>,
    pub(crate) relists: u64,
}

impl Step {
    /// A step's figures; `ready_at`: when each daemon was ready (every one
    /// is by now).
    pub(crate) fn new(
        pods: usize,
        ready_at: Vec<Option<Duration>>,
        usage: Usage,
        start_requests: BTreeMap<String, u64>,
        churn_events: f64,
        restart: Restart,
    ) -> Step {
        let ready = ready_at.into_iter().flatten().collect();
        Step {
            pods,
            ready,
            usage,
            start_requests,
            churn_events,
            restart,
        }
    }
}

impl Restart {
    /// Restarts the API server under the daemons, which had `pod_watchers`
    /// pod watches registered (the API server's own included);
    /// `pod_lists` counts the pod LISTs the daemons have made so far.
    pub(crate) fn measure(
        api: &KubeApi,
        baseline: &Baseline,
        pod_watchers: u64,
        pod_lists: impl Fn() -> Result<u64, String>,
    ) -> Result<Restart, String> {
        let lists_before = pod_lists()?;
        let restarted = Instant::now();
        api.restart(RESTART_DOWN);
        let api_ready = restarted.elapsed();
        let back = baseline.daemons_back(pod_watchers_back(
            api,
            pod_watchers,
            restarted,
            api_ready + BACK_BOUND,
        ));
        Ok(Restart {
            api_ready,
            back,
            relists: pod_lists()? - lists_before,
        })
    }
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
pub(crate) fn rss_kb(pid: u32) -> Result<u64, String> {
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

/// The API server's watch figures (`kubectl get --raw /metrics`).
pub(crate) struct WatchFigures {
    /// Watchers registered, of pods and of every kind.
    pub(crate) pod_watchers: u64,
    pub(crate) watchers: u64,
    /// Watch events sent to clients, of every kind, since it started.
    pub(crate) events: u64,
}

pub(crate) fn watch_figures(api: &KubeApi) -> Result<WatchFigures, String> {
    let out = api.kubectl_output(&["get", "--raw", "/metrics"], None);
    if !out.status.success() {
        return Err(format!(
            "the API server's /metrics: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut figures = WatchFigures {
        pod_watchers: 0,
        watchers: 0,
        events: 0,
    };
    for line in text.lines() {
        let value = || -> u64 {
            line.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0) as u64
        };
        if line.starts_with("apiserver_registered_watchers{") {
            figures.watchers += value();
            if line.contains("kind=\"Pod\"") {
                figures.pod_watchers += value();
            }
        } else if line.starts_with("apiserver_watch_events_total{") {
            figures.events += value();
        }
    }
    Ok(figures)
}

/// After a restart at `since`: when the API server had 1, 2, ... `want`
/// pod watchers registered, within `bound` (those not back by then are
/// left out, and the report says how many were).
pub(crate) fn pod_watchers_back(
    api: &KubeApi,
    want: u64,
    since: Instant,
    bound: Duration,
) -> Vec<Duration> {
    let mut back = Vec::new();
    while (back.len() as u64) < want && since.elapsed() < bound {
        // The new server answers errors until it is up: count nothing then.
        let registered = watch_figures(api).map_or(0, |f| f.pod_watchers);
        while (back.len() as u64) < registered.min(want) {
            back.push(since.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    back
}

/// Watch events the API server sent while `create` made pods: its count
/// of events sent, before and after, once they settled (a second without a
/// new one).
pub(crate) fn churn_events(api: &KubeApi, create: impl FnOnce()) -> Result<u64, String> {
    let before = watch_figures(api)?.events;
    create();
    let mut last = watch_figures(api)?.events;
    let settled = Instant::now() + Duration::from_secs(30);
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let now = watch_figures(api)?.events;
        if now == last || Instant::now() > settled {
            return Ok(now - before);
        }
        last = now;
    }
}

/// What the API server does with no daemon running, taken at each step
/// and subtracted from both sides' figures: its own watchers (the Node
/// authorizer's informers watch every pod) and the events they get from a
/// churn like the daemons'.
pub(crate) struct Baseline {
    pub(crate) watchers: u64,
    pub(crate) pod_watchers: u64,
    pub(crate) churn_events: u64,
}

impl Baseline {
    pub(crate) fn take(api: &KubeApi, churn: impl FnOnce()) -> Result<Baseline, String> {
        let idle = watch_figures(api)?;
        Ok(Baseline {
            watchers: idle.watchers,
            pod_watchers: idle.pod_watchers,
            churn_events: churn_events(api, churn)?,
        })
    }

    /// The daemons' watchers, of all that the API server has registered.
    pub(crate) fn daemons_watchers(&self, figures: &WatchFigures) -> u64 {
        figures.watchers.saturating_sub(self.watchers)
    }

    /// The watch events each of `daemons` got in a churn that sent
    /// `events` in all.
    pub(crate) fn per_daemon(&self, events: u64, daemons: usize) -> f64 {
        events.saturating_sub(self.churn_events) as f64 / daemons.max(1) as f64
    }

    /// The watch events each daemon got while `churn` made pods in the
    /// cluster (its pods named after `tag`), the baseline's taken off.
    pub(crate) fn churn_per_daemon(
        &self,
        api: &KubeApi,
        ns: &str,
        setup: &Setup,
        tag: &str,
    ) -> Result<f64, String> {
        let events = churn_events(api, || churn(api, ns, setup, tag))?;
        Ok(self.per_daemon(events, setup.daemons))
    }

    /// After a restart, when the daemons' pod watches were back, from when
    /// all `watchers` (the API server's own first: they start before it
    /// serves) were.
    pub(crate) fn daemons_back(&self, mut back: Vec<Duration>) -> Vec<Duration> {
        let own = (self.pod_watchers as usize).min(back.len());
        back.drain(..own);
        back
    }
}

/// A pod of `node` that has its `scale-net` network: its network-status
/// written, as a running pod's is.
pub(crate) fn attached_pod(ns: &str, node: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}, \
         annotations: {{k8s.v1.cni.cncf.io/networks: scale-net, \
         k8s.v1.cni.cncf.io/network-status: '[{{\"name\":\"{ns}/scale-net\",\
         \"interface\":\"net1\",\"ips\":[\"10.1.0.1\"]}}]'}}}}\n\
         spec: {{nodeName: {node}, containers: [{{name: c, image: busybox}}]}}\n---\n"
    )
}

/// New pods for the churn of a step (`tag`): one on each daemon's node and
/// ten times as many on other nodes.
pub(crate) fn churn(api: &KubeApi, ns: &str, setup: &Setup, tag: &str) {
    let mut manifest = String::new();
    for n in 0..setup.daemons {
        manifest.push_str(&attached_pod(
            ns,
            &format!("scale-node-{n}"),
            &format!("churn-{tag}-{n}"),
        ));
        for k in 0..10 {
            manifest.push_str(&attached_pod(
                ns,
                &format!("far-node-{k}"),
                &format!("churn-{tag}-{n}-{k}"),
            ));
        }
    }
    api.create(&manifest);
}

/// Whether multus-daemon made `r` (plexus's daemons send no User-Agent).
pub(crate) fn by_multus(r: &AuditedRequest) -> bool {
    r.user_agent.starts_with("multus-daemon")
}
