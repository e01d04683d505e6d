//! The soak (`--soak`, issue 47 item 3): `--cycles` pod ADD/DEL cycles
//! (default 20,000) through `plexus daemon` (thick mode: the daemon in a
//! node network namespace with a relay to the test kube-apiserver, the
//! `plexus` binary exec'd as the runtime execs it, forwarding to the
//! daemon's socket), with NADs, MultiNetworkPolicies (`--multi-network-
//! policy`) and hot-plug changes churning beside them, must stay flat.
//!
//! The world, all on the real API server:
//! - NADs `macnet` and `hpnet` (macvlan on the node's `uplink0`, host-local)
//!   and `wbnet` (macvlan, whereabouts IPAM from the daemon's IPPool cache);
//!   the cluster network is macvlan with host-local too, so nothing of a
//!   pod stays in the node namespace;
//! - [`WORKERS`] cycler pods `cyc-<w>` (`macnet@net1,wbnet@net2`), each with
//!   a network namespace of its own, reused: a cycle is an ADD of the pod
//!   with a new container ID and its DEL, 4 workers at once;
//! - [`HOTPLUG_PODS`] pods `hp-<h>`, ADDed once, whose selection annotation
//!   flips between `macnet@net1` and `macnet@net1,hpnet@net2`, so the
//!   daemon's dynamic networks attach and detach `net2`;
//! - policies `pol-cyclers` (selects the cyclers, peers the hot-plug pods)
//!   and `pol-hp` (the other way round): each cycler's ADD writes its
//!   nftables table before answering, and each cycler's new addresses change
//!   the hot-plug pods' peers;
//! - churn: [`CHURN_STEPS`] steps per window, spread over it: a hot-plug
//!   flip, and a NAD and a policy (its peers a label nobody has: a peer
//!   scope of its own) created under a new name while the previous step's
//!   are deleted.
//!
//! After each window of 1,000 cycles (fewer for a short run: a tenth of
//! it, at least 100) the daemon is let settle (its status writes delivered,
//! the hot-plug pods back to one network) and sampled: RSS, open fds and
//! threads (`/proc`), tokio tasks (when its `/metrics` has such a count),
//! its cache gauges (`plexus_cache_objects`), the watches the API server
//! has registered (`apiserver_registered_watchers`, less those before the
//! daemon started), the nftables tables, links, host-local allocations and
//! records on the node, the whereabouts addresses held, and its API
//! requests (`plexus_api_requests_total`), by verb and resource, per ADD
//! of the window. Each series' least-squares slope per 1,000 cycles over
//! the samples after the warm-up ([`WARM_UP`] samples) must stay within
//! its bound; at the end every pod is DELed and nothing may be left.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use plexus_dataplane::NetNs;
use plexus_testkit::kube::{api, KubeApi};
use plexus_testkit::process::proc_status_kb;
use serde_json::{json, Value};

use crate::daemons::{daemon_command, in_node, metrics_page, wait_ready, Daemons, NodeDaemon};
use crate::kube::macvlan;
use crate::pod_start::nad;
use crate::scale_step::{rss_kb, watch_figures};
use crate::{cni_env_as, invoke, ms, percentile, verdict, Namespaces};

/// What the soak needs from the main benchmark.
pub(crate) struct Setup<'a> {
    pub(crate) plexus: &'a Path,
    pub(crate) tmp: &'a Path,
    pub(crate) cycles: usize,
}

/// Cyclers, each ADDing and DELing its own pod at once with the others.
const WORKERS: usize = 4;
/// Pods whose networks are hot-plugged.
const HOTPLUG_PODS: usize = 2;
/// Churn steps per window: a multiple of twice [`HOTPLUG_PODS`], so each
/// hot-plug pod ends a window with the selection it started with.
const CHURN_STEPS: usize = 8;
/// Samples left out of the fits (the first is taken before any cycle).
const WARM_UP: usize = 2;
/// No window starts after this; the run says at how many cycles it stopped.
const BUDGET: Duration = Duration::from_secs(35 * 60);
const SETTLE_BOUND: Duration = Duration::from_secs(60);
const NODE_NAME: &str = "soak-node";
const METRICS_PORT: u16 = 19_900;
const NETWORKS_KEY: &str = "k8s.v1.cni.cncf.io/networks";
const CYCLER_NETWORKS: &str = "macnet@net1,wbnet@net2";
const ONE_NETWORK: &str = "macnet@net1";
const TWO_NETWORKS: &str = "macnet@net1,hpnet@net2";
/// The links of a hot-plug pod with one network: `lo`, `eth0`, `net1`.
const HOTPLUG_LINKS: usize = 3;
/// The node namespace's own links (`crate::node`).
const NODE_LINKS: [&str; 3] = ["lo", "uplink0", "uplink0p"];

/// One sampled figure.
struct Figure {
    /// The table it is printed in.
    group: &'static str,
    label: String,
    value: f64,
}

/// What a window of cycles measured, besides the samples.
#[derive(Default)]
struct Window {
    add: Vec<Duration>,
    del: Vec<Duration>,
    failures: usize,
    first_failure: Option<String>,
    wall: Duration,
}

/// The daemon and everything around it, after each window.
struct Sample {
    cycles: usize,
    figures: Vec<Figure>,
    /// `plexus_api_requests_total` so far, by `verb resource`.
    requests: BTreeMap<String, f64>,
    /// The window that ended here (none for the first sample).
    window: Option<Window>,
}

/// Everything the cycles, the churn and the samples share.
struct Soak<'a> {
    api: &'static KubeApi,
    node: &'a NetNs,
    /// A copy of the binary under test, taken at the start: a build
    /// elsewhere cannot swap it mid-run.
    plexus: PathBuf,
    dir: PathBuf,
    ns: String,
    conf: String,
    /// The whereabouts network's name (its IPPool is `<name>-<range>`).
    network: String,
    cyclers: Vec<NetNs>,
    hotplug: Vec<NetNs>,
    daemon_pid: u32,
    /// The API server's registered watchers before the daemon started.
    watchers_before: u64,
}

pub(crate) fn run(setup: &Setup) -> Result<bool, String> {
    let window = if setup.cycles >= 10_000 {
        1_000
    } else {
        (setup.cycles / 10).max(100)
    };
    println!(
        "\nSoak: {} pod ADD/DEL cycles through plexus daemon ({WORKERS} at once), sampled every \
         {window} cycles, NADs, MultiNetworkPolicies and hot-plug churning beside them",
        setup.cycles
    );
    let api = api();
    let pid = std::process::id();
    let mut namespaces = Namespaces(Vec::new());
    let (node, _relay) = crate::node_reaching(api, &mut namespaces)?;
    let dir = setup.tmp.join("soak");
    std::fs::create_dir_all(dir.join("run")).map_err(|e| e.to_string())?;
    let plexus = dir.join("plexus");
    std::fs::copy(setup.plexus, &plexus).map_err(|e| format!("copy of plexus: {e}"))?;
    let ns = api.namespace("pxsoak");
    let ipam = dir.join("ipam");
    let network = format!("soak{pid}");
    let conf = json!({
        "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
        "kubeconfig": api.plexus_kubeconfig(), "cniDir": dir.join("cache"),
        "daemonSocket": dir.join("run/plexus.sock"),
        "delegates": [macvlan("soak-pod", 110, &ipam)],
    })
    .to_string();
    api.create(&world_manifest(&ns, &ipam, &network));
    let cyclers = (0..WORKERS)
        .map(|w| namespaces.create(format!("pxb-{pid}-cyc{w}")))
        .collect::<Result<Vec<_>, _>>()?;
    let hotplug = (0..HOTPLUG_PODS)
        .map(|h| namespaces.create(format!("pxb-{pid}-hp{h}")))
        .collect::<Result<Vec<_>, _>>()?;

    let watchers_before = watch_figures(api)?.watchers;
    let mut daemons = Daemons::default();
    daemons.0.push(start_daemon(&node, &plexus, api, &dir)?);
    let soak = Soak {
        api,
        node: &node,
        plexus,
        dir,
        ns,
        conf,
        network,
        cyclers,
        hotplug,
        daemon_pid: daemons.0[0].child.id(),
        watchers_before,
    };
    soak.hotplug_pods("ADD")?;
    soak.settle()?;
    let started = Instant::now();
    let mut samples = vec![soak.sample(0, None)?];
    let mut step = 0;
    let mut done = 0;
    while done < setup.cycles && started.elapsed() < BUDGET {
        let to = (done + window).min(setup.cycles);
        let measured = soak.window(done, to, &mut step)?;
        soak.settle()?;
        samples.push(soak.sample(to, Some(measured))?);
        print_progress(samples.last().expect("just pushed"), started);
        done = to;
    }
    if done < setup.cycles {
        println!(
            "stopped at {done} of {} cycles: the {} min budget is spent",
            setup.cycles,
            BUDGET.as_secs() / 60
        );
    }
    soak.hotplug_pods("DEL")?;
    soak.settle_writes()?;
    let left = soak.leftovers()?;
    let alive = daemons.0[0]
        .child
        .try_wait()
        .map_err(|e| e.to_string())?
        .is_none();
    drop(daemons);
    Ok(report(&samples, window, &left, alive, started.elapsed()))
}

/// The NADs, the cyclers, the hot-plug pods and the standing policies in
/// `ns`, as YAML.
fn world_manifest(ns: &str, ipam: &Path, network: &str) -> String {
    let mut yaml = nad("macnet", ns, &macvlan("macnet", 111, ipam));
    yaml.push_str(&nad("hpnet", ns, &macvlan("hpnet", 113, ipam)));
    let wbnet = json!({"cniVersion": "1.0.0", "name": "wbnet", "type": "macvlan",
        "master": "uplink0", "mode": "bridge",
        "ipam": {"type": "whereabouts", "range": "10.112.0.0/16", "network_name": network,
                 "configuration_path": "/nonexistent/whereabouts.conf"}});
    yaml.push_str(&nad("wbnet", ns, &wbnet));
    let pod = |name: &str, role: &str, networks: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  \
             labels: {{role: {role}}}\n  annotations: {{{NETWORKS_KEY}: \"{networks}\"}}\n\
             spec: {{nodeName: {NODE_NAME}, containers: [{{name: c, image: busybox, \
             ports: [{{containerPort: 80}}]}}]}}\n---\n"
        )
    };
    for w in 0..WORKERS {
        yaml.push_str(&pod(&format!("cyc-{w}"), "cycler", CYCLER_NETWORKS));
    }
    for h in 0..HOTPLUG_PODS {
        yaml.push_str(&pod(&format!("hp-{h}"), "hp", ONE_NETWORK));
    }
    yaml.push_str(&policy(ns, "pol-cyclers", "cycler", "role: hp"));
    yaml.push_str(&policy(ns, "pol-hp", "hp", "role: cycler"));
    yaml
}

/// A MultiNetworkPolicy for `macnet` selecting the pods of `role`,
/// allowing TCP 80 from the pods labelled `peers`.
fn policy(ns: &str, name: &str, role: &str, peers: &str) -> String {
    format!(
        "apiVersion: k8s.cni.cncf.io/v1beta1\nkind: MultiNetworkPolicy\nmetadata:\n  \
         name: {name}\n  namespace: {ns}\n  annotations: {{k8s.v1.cni.cncf.io/policy-for: macnet}}\n\
         spec: {{podSelector: {{matchLabels: {{role: {role}}}}}, policyTypes: [Ingress], \
         ingress: [{{from: [{{podSelector: {{matchLabels: {{{peers}}}}}}}], \
         ports: [{{protocol: TCP, port: 80}}]}}]}}\n---\n"
    )
}

/// The daemon in `node`, policies and dynamic networks on, the IPAM
/// reconciler off, logging to `dir/daemon.log`, killed if the benchmark
/// dies; once ready.
fn start_daemon(
    node: &NetNs,
    plexus: &Path,
    api: &KubeApi,
    dir: &Path,
) -> Result<NodeDaemon, String> {
    let kubeconfig = api.plexus_kubeconfig();
    let socket = dir.join("run/plexus.sock");
    let state = dir.join("state");
    let mut cmd = daemon_command(
        node,
        plexus,
        &kubeconfig,
        NODE_NAME,
        &socket,
        METRICS_PORT,
        &state,
    );
    cmd.arg("--cni-dir").arg(dir.join("cache"));
    cmd.args(["--multi-network-policy", "--ipam-reconcile-interval=0"]);
    let log = dir.join("daemon.log");
    let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    // SAFETY: prctl(2) is async-signal-safe. The daemon outlives no
    // benchmark that is killed (a `timeout`).
    unsafe {
        cmd.stdout(out).stderr(err).pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| format!("plexus daemon: {e}"))?;
    let daemon = NodeDaemon {
        child,
        log,
        port: METRICS_PORT,
    };
    wait_ready(node, METRICS_PORT, Duration::from_secs(60))?;
    Ok(daemon)
}

impl Soak<'_> {
    /// One CNI call of pod `pod` (container `id`) in `netns`, through the
    /// shim.
    fn call(
        &self,
        command: &str,
        pod: &str,
        id: &str,
        netns: &NetNs,
    ) -> Result<crate::Run, String> {
        let args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={pod};K8S_POD_INFRA_CONTAINER_ID={id}",
            self.ns
        );
        let env = cni_env_as(command, id, netns, "eth0", &args, Path::new("/usr/lib/cni"));
        invoke(self.node, &self.plexus, &[], &env, self.conf.as_bytes())
    }

    /// `command` for each hot-plug pod (its container ID its name).
    fn hotplug_pods(&self, command: &str) -> Result<(), String> {
        for (h, netns) in self.hotplug.iter().enumerate() {
            let pod = format!("hp-{h}");
            self.call(command, &pod, &pod, netns)
                .map_err(|e| format!("{command} of {pod}: {e}"))?;
        }
        Ok(())
    }

    /// Cycles `from..to`, [`WORKERS`] at once, with [`CHURN_STEPS`] churn
    /// steps spread over them; `step` counts the churn steps of the run.
    fn window(&self, from: usize, to: usize, step: &mut usize) -> Result<Window, String> {
        let next = AtomicUsize::new(from);
        let done = AtomicUsize::new(from);
        let measured = Mutex::new(Window::default());
        let started = Instant::now();
        let churned = std::thread::scope(|s| {
            for w in 0..WORKERS {
                let (next, done, measured) = (&next, &done, &measured);
                s.spawn(move || loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= to {
                        return;
                    }
                    let (pod, id) = (format!("cyc-{w}"), format!("soak-{i}"));
                    let add = self.call("ADD", &pod, &id, &self.cyclers[w]);
                    // DELed whatever the ADD did, as a runtime does.
                    let del = self.call("DEL", &pod, &id, &self.cyclers[w]);
                    let mut m = measured.lock().expect("not poisoned");
                    match (add, del) {
                        (Ok(add), Ok(del)) => {
                            m.add.push(add.elapsed);
                            m.del.push(del.elapsed);
                        }
                        (Err(e), _) | (_, Err(e)) => {
                            m.failures += 1;
                            m.first_failure.get_or_insert(format!("cycle {i}: {e}"));
                        }
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                });
            }
            for k in 0..CHURN_STEPS {
                let at = from + (to - from) * k / CHURN_STEPS;
                while done.load(Ordering::Relaxed) < at {
                    std::thread::sleep(Duration::from_millis(5));
                }
                self.churn(*step)?;
                *step += 1;
            }
            Ok::<(), String>(())
        });
        let mut measured = measured.into_inner().expect("not poisoned");
        measured.wall = started.elapsed();
        churned.map(|()| measured)
    }

    /// Churn step `step`: a hot-plug pod's selection flipped, and a NAD and
    /// a policy made under new names while the previous step's go.
    fn churn(&self, step: usize) -> Result<(), String> {
        let h = step % HOTPLUG_PODS;
        let value = if (step / HOTPLUG_PODS) % 2 == 0 {
            TWO_NETWORKS
        } else {
            ONE_NETWORK
        };
        let ns = self.ns.as_str();
        let annotation = format!("{NETWORKS_KEY}={value}");
        let pod = format!("hp-{h}");
        self.kubectl(&[
            "annotate",
            "--overwrite",
            "pod",
            &pod,
            "-n",
            ns,
            &annotation,
        ])?;
        let name = format!("churn-{step}");
        let mut yaml = nad(&name, ns, &macvlan(&name, 114, &self.dir.join("ipam")));
        yaml.push_str(&policy(ns, &name, "cycler", &format!("gen: g{step}")));
        let out = self.api.kubectl_output(&["create", "-f", "-"], Some(&yaml));
        if !out.status.success() {
            return Err(format!(
                "kubectl create {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if let Some(previous) = step.checked_sub(1) {
            let nad = format!("network-attachment-definitions.k8s.cni.cncf.io/churn-{previous}");
            let mnp = format!("multi-networkpolicies.k8s.cni.cncf.io/churn-{previous}");
            self.kubectl(&["delete", "-n", ns, &nad, &mnp])?;
        }
        Ok(())
    }

    fn kubectl(&self, args: &[&str]) -> Result<(), String> {
        let out = self.api.kubectl_output(args, None);
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Until no call is in flight, every status write is delivered and
    /// each hot-plug pod is back to its one network.
    fn settle(&self) -> Result<(), String> {
        self.settle_until(|| {
            Ok(self
                .hotplug
                .iter()
                .all(|netns| links(netns).len() == HOTPLUG_LINKS))
        })
    }

    /// Until no call is in flight and every status write is delivered.
    fn settle_writes(&self) -> Result<(), String> {
        self.settle_until(|| Ok(true))
    }

    fn settle_until(&self, more: impl Fn() -> Result<bool, String>) -> Result<(), String> {
        let deadline = Instant::now() + SETTLE_BOUND;
        loop {
            let page = parse(&metrics_page(self.node, METRICS_PORT)?);
            let idle = value(&page, "plexus_status_writes_queued") == 0.0
                && value(&page, "plexus_cni_calls_in_flight") == 0.0;
            if idle && more()? {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the daemon did not settle within {SETTLE_BOUND:?} (its log: {})",
                    self.dir.join("daemon.log").display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every pod network namespace and the node's.
    fn netns(&self) -> impl Iterator<Item = &NetNs> {
        self.cyclers
            .iter()
            .chain(&self.hotplug)
            .chain(std::iter::once(self.node))
    }

    fn sample(&self, cycles: usize, window: Option<Window>) -> Result<Sample, String> {
        // The connections of the settle's last /metrics request closed.
        std::thread::sleep(Duration::from_millis(250));
        let pid = self.daemon_pid;
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map_err(|e| format!("the daemon's fds: {e}"))?
            .count();
        let threads = proc_status_kb(pid, "Threads").ok_or("no Threads in /proc/PID/status")?;
        let rss = rss_kb(pid)? as f64 / 1024.0;
        let page = parse(&metrics_page(self.node, METRICS_PORT)?);
        let mut figures = vec![
            figure("daemon", "RSS MiB", rss),
            figure("daemon", "fds", fds as f64),
            figure("daemon", "threads", threads as f64),
        ];
        // The daemon's tokio tasks (`plexus_tokio_alive_tasks`).
        for (key, v) in page.iter().filter(|(k, _)| k.contains("task")) {
            figures.push(figure("daemon", key, *v));
        }
        let watchers = watch_figures(self.api)?.watchers;
        figures.push(figure(
            "daemon",
            "watches",
            watchers.saturating_sub(self.watchers_before) as f64,
        ));
        for (key, v) in page
            .iter()
            .filter(|(k, _)| k.starts_with("plexus_cache_objects{"))
        {
            let kind = label(key, "kind").unwrap_or(key);
            figures.push(figure("caches", short_kind(kind), *v));
        }
        let held: f64 = page
            .iter()
            .filter(|(k, _)| k.starts_with("plexus_cluster_ipam_pool_addresses{"))
            .filter(|(k, _)| label(k, "state") == Some("held"))
            .map(|(_, v)| v)
            .fold(0.0, |a, b| a + b);
        let tables: usize = self.netns().map(nft_tables).sum();
        let link_count: usize = self.netns().map(|n| links(n).len()).sum();
        figures.extend([
            figure("node", "nft tables", tables as f64),
            figure("node", "links", link_count as f64),
            figure("node", "host-local", self.allocations() as f64),
            figure("node", "records", self.records() as f64),
            figure("node", "pool held", held),
        ]);
        let requests = page
            .iter()
            .filter(|(k, _)| k.starts_with("plexus_api_requests_total{"))
            .map(|(k, v)| {
                let verb = label(k, "verb").unwrap_or("?");
                (
                    format!("{verb} {}", label(k, "resource").unwrap_or("?")),
                    *v,
                )
            })
            .collect();
        Ok(Sample {
            cycles,
            figures,
            requests,
            window,
        })
    }

    /// host-local's allocation files (its locks and last-reserved notes
    /// aside).
    fn allocations(&self) -> usize {
        files(&self.dir.join("ipam"))
            .iter()
            .filter(|f| !f.ends_with("/lock") && !f.contains("last_reserved_ip"))
            .count()
    }

    /// The daemon's records, sandbox notes and queued status writes.
    fn records(&self) -> usize {
        ["cache", "state/sandboxes", "state/status"]
            .iter()
            .map(|d| files(&self.dir.join(d)).len())
            .sum()
    }

    /// What is left once every pod is DELed; empty when nothing.
    fn leftovers(&self) -> Result<Vec<String>, String> {
        let mut left = Vec::new();
        for netns in self.cyclers.iter().chain(&self.hotplug) {
            let names = links(netns);
            if names != ["lo"] {
                left.push(format!("links in {}: {names:?}", netns.path().display()));
            }
        }
        let mut node_links = links(self.node);
        node_links.sort();
        if node_links != NODE_LINKS {
            left.push(format!("links in the node namespace: {node_links:?}"));
        }
        let tables: usize = self.netns().map(nft_tables).sum();
        if tables > 0 {
            left.push(format!("{tables} nftables tables"));
        }
        if self.allocations() > 0 {
            left.push(format!("{} host-local allocations", self.allocations()));
        }
        if self.records() > 0 {
            left.push(format!(
                "{} records, sandbox notes or writes",
                self.records()
            ));
        }
        let (pools, entries, reservations) = self.pool_entries()?;
        println!(
            "checked after every pod's DEL: {} pod network namespaces and the node's, host-local's \
             data, the daemon's records, sandbox notes and outbox, {pools} IPPools of {}",
            self.cyclers.len() + self.hotplug.len(),
            self.network
        );
        if entries + reservations > 0 {
            left.push(format!(
                "{entries} IPPool entries, {reservations} reservations of {}",
                self.network
            ));
        }
        Ok(left)
    }

    /// The whereabouts network's IPPools, their entries and its address
    /// reservations, as the API server holds them.
    fn pool_entries(&self) -> Result<(usize, usize, usize), String> {
        let get = |kind: &str| -> Result<Vec<Value>, String> {
            let kind = format!("{kind}.whereabouts.cni.cncf.io");
            let text = self
                .api
                .kubectl(&["get", &kind, "-n", "kube-system", "-o", "json"]);
            let list: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
            Ok(list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|o| {
                    o["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.contains(&self.network))
                })
                .cloned()
                .collect())
        };
        let pools = get("ippools")?;
        let entries = pools
            .iter()
            .filter_map(|p| p["spec"]["allocations"].as_object().map(|a| a.len()))
            .sum();
        let reservations = get("overlappingrangeipreservations")?.len();
        Ok((pools.len(), entries, reservations))
    }
}

fn figure(group: &'static str, label: &str, value: f64) -> Figure {
    Figure {
        group,
        label: label.to_string(),
        value,
    }
}

/// The cache kinds by a column's name.
fn short_kind(kind: &str) -> &str {
    match kind {
        "network-attachment-definitions" => "NADs",
        "multi-networkpolicies" => "policies",
        "policy-peer-pods" => "peer pods",
        "policy-peer-scopes" => "peer scopes",
        other => other,
    }
}

/// A Prometheus text page's samples: `name{labels}` and value.
fn parse(page: &str) -> Vec<(String, f64)> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (key, v) = l.rsplit_once(' ')?;
            Some((key.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// The sample `key`'s value (0 without it).
fn value(page: &[(String, f64)], key: &str) -> f64 {
    page.iter().find(|(k, _)| k == key).map_or(0.0, |(_, v)| *v)
}

/// Label `name`'s value in a sample's key.
fn label<'k>(key: &'k str, name: &str) -> Option<&'k str> {
    let pattern = format!("{name}=\"");
    let rest = &key[key.find(&pattern)? + pattern.len()..];
    Some(&rest[..rest.find('"')?])
}

/// The links of `netns`, by name.
fn links(netns: &NetNs) -> Vec<String> {
    let text = in_node(netns, "ip", &["-o", "link", "show"]).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|name| name.split('@').next().unwrap_or(name).to_string())
        .collect()
}

/// The nftables tables of `netns`, of every family.
fn nft_tables(netns: &NetNs) -> usize {
    let text = in_node(netns, "nft", &["list", "tables"]).unwrap_or_default();
    text.lines().filter(|l| l.starts_with("table ")).count()
}

/// Every file below `dir`, by path.
fn files(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for path in entries.filter_map(|e| Some(e.ok()?.path())) {
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path.display().to_string());
        }
    }
    out
}

/// Least squares of `points`: the slope and its standard error (none
/// under 3 points).
fn fit(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 3 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = sxy / sxx;
    let residuals: f64 = points
        .iter()
        .map(|p| (p.1 - my - slope * (p.0 - mx)).powi(2))
        .sum();
    Some((slope, (residuals / (n - 2.0) / sxx).sqrt()))
}

/// How much a sampled series may grow per 1,000 cycles and still be flat:
/// RSS 1% of its mean; a count of things (fds, threads, watches, cached
/// objects, tables, links, files, addresses) 0.1, under 2 over 20,000
/// cycles. A request count per ADD: [`per_add_bound`].
fn bound(label: &str, mean: f64) -> f64 {
    if label == "RSS MiB" {
        0.01 * mean
    } else {
        0.1
    }
}

/// A per-ADD request count's bound: 1% of its mean, at least 0.001 (one
/// request more per 1,000 cycles at each window).
fn per_add_bound(mean: f64) -> f64 {
    (0.01 * mean).max(0.001)
}

/// A series' slope per 1,000 cycles over the samples after the warm-up,
/// and whether it is flat: it grows when its slope is both over its bound
/// and over 3 standard errors (beyond noise); printed as a row.
fn judge(label: &str, points: &[(f64, f64)], bound_of: impl Fn(f64) -> f64) -> bool {
    let mean = points.iter().map(|p| p.1).sum::<f64>() / points.len().max(1) as f64;
    let Some((slope, error)) = fit(points) else {
        println!("{label:<40} {mean:>10.3}   (too few samples after the warm-up for a slope)");
        return true;
    };
    let bound = bound_of(mean);
    let flat = slope <= bound || slope <= 3.0 * error;
    println!(
        "{label:<40} {mean:>10.3} {slope:>+12.4} {error:>10.4} {bound:>10.4}   {}",
        if flat { "flat" } else { "GROWS" }
    );
    flat
}

fn print_progress(sample: &Sample, started: Instant) {
    let Some(w) = &sample.window else { return };
    let rss = sample.figures[0].value;
    println!(
        "  {:>6} cycles, {:>5.0} s: ADD p50 {}, DEL p50 {}, {:.1} cycles/s, RSS {rss:.2} MiB, \
         {} failures",
        sample.cycles,
        started.elapsed().as_secs_f64(),
        ms(percentile_or_zero(&w.add, 0.5)).trim(),
        ms(percentile_or_zero(&w.del, 0.5)).trim(),
        (w.add.len() + w.failures) as f64 / w.wall.as_secs_f64(),
        w.failures
    );
}

fn percentile_or_zero(samples: &[Duration], p: f64) -> Duration {
    if samples.is_empty() {
        Duration::ZERO
    } else {
        percentile(samples, p)
    }
}

/// The samples as tables, every series' slope, the requests per ADD of
/// each window, what is left; whether the soak stayed flat.
fn report(samples: &[Sample], window: usize, left: &[String], alive: bool, wall: Duration) -> bool {
    let cycles = samples.last().map_or(0, |s| s.cycles);
    println!(
        "\n{cycles} cycles in {:.0} s; samples every {window} cycles (the first before any \
         cycle); slopes per 1,000 cycles over the samples after the first {WARM_UP}",
        wall.as_secs_f64()
    );
    println!("tokio tasks: {}", tasks_note(samples));
    let flat = series_flat(samples) & requests_flat(samples);
    let windows: Vec<&Window> = samples.iter().filter_map(|s| s.window.as_ref()).collect();
    let add: Vec<Duration> = windows.iter().flat_map(|w| w.add.clone()).collect();
    let del: Vec<Duration> = windows.iter().flat_map(|w| w.del.clone()).collect();
    let failures: usize = windows.iter().map(|w| w.failures).sum();
    println!(
        "\nADD p50 {} p99 {}, DEL p50 {} p99 {} over the run; {failures} failed cycles",
        ms(percentile_or_zero(&add, 0.5)).trim(),
        ms(percentile_or_zero(&add, 0.99)).trim(),
        ms(percentile_or_zero(&del, 0.5)).trim(),
        ms(percentile_or_zero(&del, 0.99)).trim(),
    );
    if let Some(first) = windows.iter().find_map(|w| w.first_failure.as_ref()) {
        println!("first failure: {first}");
    }
    if left.is_empty() {
        println!(
            "left after every pod's DEL: no link, record, address, pool entry or nftables table"
        );
    } else {
        println!("left after every pod's DEL: {}", left.join("; "));
    }
    let met = flat && failures == 0 && left.is_empty() && alive;
    println!(
        "soak stays flat (no slope beyond its bound and noise), no cycle failed, the daemon \
         alive ({alive}), nothing left: {}",
        verdict(met)
    );
    met
}

const GROUPS: [&str; 3] = ["daemon", "caches", "node"];

impl Sample {
    fn figure(&self, group: &str, label: &str) -> Option<f64> {
        self.figures
            .iter()
            .find(|f| f.group == group && f.label == label)
            .map(|f| f.value)
    }

    /// `key`'s requests per ADD in the window that ended here, `before`
    /// the sample that began it.
    fn per_add(&self, before: &Sample, key: &str) -> f64 {
        let get = |s: &Sample| s.requests.get(key).copied().unwrap_or(0.0);
        (get(self) - get(before)) / (self.cycles - before.cycles).max(1) as f64
    }
}

/// The sampled series, a table per group, and their slopes; whether
/// every one is flat.
fn series_flat(samples: &[Sample]) -> bool {
    for group in GROUPS {
        let labels = labels_of(samples, group);
        print!("\n{:>7}", "cycles");
        for l in &labels {
            print!(" {l:>11}");
        }
        println!();
        for s in samples {
            print!("{:>7}", s.cycles);
            for l in &labels {
                match s.figure(group, l) {
                    Some(v) if v.fract() == 0.0 => print!(" {v:>11}"),
                    Some(v) => print!(" {v:>11.2}"),
                    None => print!(" {:>11}", "-"),
                }
            }
            println!();
        }
    }
    print_slope_header("series");
    let mut flat = true;
    for group in GROUPS {
        for l in labels_of(samples, group) {
            let points: Vec<(f64, f64)> = samples
                .iter()
                .skip(WARM_UP)
                .filter_map(|s| Some((s.cycles as f64 / 1000.0, s.figure(group, &l)?)))
                .collect();
            flat &= judge(&l, &points, |mean| bound(&l, mean));
        }
    }
    flat
}

/// The daemon's API requests per ADD, window by window, and their slopes;
/// whether every one is flat.
fn requests_flat(samples: &[Sample]) -> bool {
    let mut keys: Vec<&String> = samples.iter().flat_map(|s| s.requests.keys()).collect();
    keys.sort();
    keys.dedup();
    let windows: Vec<(&Sample, &Sample)> = samples.windows(2).map(|w| (&w[0], &w[1])).collect();
    println!("\nAPI requests per ADD (the daemon's plexus_api_requests_total), window by window:");
    print!("{:<40}", "verb resource / window ending at");
    for (_, s) in &windows {
        print!(" {:>6}", s.cycles);
    }
    println!();
    for key in &keys {
        print!("{key:<40}");
        for (before, s) in &windows {
            print!(" {:>6.3}", s.per_add(before, key));
        }
        println!();
    }
    print!("{:<40}", "all");
    for (before, s) in &windows {
        let all: f64 = keys.iter().map(|k| s.per_add(before, k)).sum();
        print!(" {all:>6.3}");
    }
    println!();
    print_slope_header("requests per ADD");
    let mut flat = true;
    for key in &keys {
        // The windows whose end is a sample after the warm-up.
        let points: Vec<(f64, f64)> = windows
            .iter()
            .skip(WARM_UP.saturating_sub(1))
            .map(|(before, s)| (s.cycles as f64 / 1000.0, s.per_add(before, key)))
            .collect();
        flat &= judge(key, &points, per_add_bound);
    }
    flat
}

fn print_slope_header(what: &str) {
    println!(
        "\n{what:<40} {:>10} {:>12} {:>10} {:>10}",
        "mean", "slope/1000", "std err", "bound"
    );
}

/// The labels of `group`'s figures, in the order they first appear.
fn labels_of(samples: &[Sample], group: &str) -> Vec<String> {
    let mut labels: Vec<String> = Vec::new();
    for f in samples.iter().flat_map(|s| &s.figures) {
        if f.group == group && !labels.contains(&f.label) {
            labels.push(f.label.clone());
        }
    }
    labels
}

fn tasks_note(samples: &[Sample]) -> &'static str {
    let exported = samples
        .iter()
        .flat_map(|s| &s.figures)
        .any(|f| f.label.contains("task"));
    if exported {
        "from the daemon's /metrics (in the daemon table)"
    } else {
        "not available: the daemon's /metrics has no task count (a release before \
         `plexus_tokio_alive_tasks`); its threads are counted instead"
    }
}
