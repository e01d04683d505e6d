//! Thin against thick, through the test kube-apiserver: the same pod (3
//! macvlan networks plus the cluster network) attached by plexus three
//! ways, interleaved pod by pod so machine noise hits all alike:
//! - from a manifest directory (no API server: the floor thick mode aims at),
//! - thin (`kubeconfig`: the exec'd process reads the pod and NADs itself),
//! - thick (`daemonSocket`: the exec'd shim forwards to `plexus daemon`,
//!   whose watch caches hold the pod and the NADs).
//!
//! API requests are counted from the API server's audit log, per ADD, in a
//! Kubernetes namespace per mode. Last, a boot storm: many pods ADDed at
//! once through the daemon, then DELed at once, with the daemon's peak RSS.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use plexus_dataplane::NetNs;
use plexus_testkit::kube::{api, Relay};
use serde_json::{json, Value};

use crate::daemons::{metrics_page, wait_ready};
use crate::kube::{count, macvlan, requests, Setup};
use crate::pod_start::nad;
use crate::{cni_env_as, invoke, percentile, print_table, verdict, Run};
use plexus_testkit::process::proc_status_kb;

/// The networks each pod selects.
const NETWORKS: [&str; 3] = ["tk1", "tk2", "tk3"];
/// The node the daemon serves and the pods are scheduled to.
pub(crate) const NODE_NAME: &str = "bench-node";
const METRICS_PORT: u16 = 19_199;
/// Targets (issue 12).
const THICK_VS_MANIFEST_MAX: f64 = 1.2;
const STORM_RSS_MAX_KB: u64 = 64 * 1024;

/// How plexus gets the pod and its NADs.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Manifest,
    /// Through the daemon, from the manifest directory: what the hop to
    /// the daemon costs by itself.
    ThickManifest,
    Thin,
    Thick,
}

impl Mode {
    const ALL: [Mode; 4] = [Mode::Manifest, Mode::ThickManifest, Mode::Thin, Mode::Thick];

    fn label(self) -> &'static str {
        match self {
            Mode::Manifest => "manifest dir",
            Mode::ThickManifest => "thick, manifest dir",
            Mode::Thin => "thin (API)",
            Mode::Thick => "thick (API)",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Mode::Manifest => "dir",
            Mode::ThickManifest => "tdir",
            Mode::Thin => "thin",
            Mode::Thick => "thick",
        }
    }

    fn uses_api(self) -> bool {
        matches!(self, Mode::Thin | Mode::Thick)
    }

    /// Whether its ADDs mark their phases (plexus's `PLEXUS_PHASES`): the
    /// calls that run in the exec'd process.
    fn profiled(self) -> bool {
        matches!(self, Mode::Manifest | Mode::Thin)
    }
}

/// The NADs and `pods` pods named `<prefix>-<i>` in `namespace`, as YAML.
fn manifests(namespace: &str, prefix: &str, pods: usize, data_dir: &Path) -> String {
    let mut yaml = String::new();
    for (i, name) in NETWORKS.iter().enumerate() {
        yaml.push_str(&nad(
            name,
            namespace,
            &macvlan(name, 91 + i as u8, data_dir),
        ));
    }
    let selection = NETWORKS.join(",");
    for i in 0..pods {
        yaml.push_str(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {prefix}-{i}\n  namespace: {namespace}\n  \
             annotations: {{k8s.v1.cni.cncf.io/networks: \"{selection}\"}}\n\
             spec: {{nodeName: {NODE_NAME}, containers: [{{name: c, image: busybox}}]}}\n---\n"
        ));
    }
    yaml
}

/// `plexus daemon` in the node namespace, killed on drop.
pub(crate) struct Daemon(Child);

impl Daemon {
    pub(crate) fn start(setup: &Setup, socket: &Path, kubeconfig: &Path) -> Result<Daemon, String> {
        let mut cmd = crate::daemons::daemon_command(
            setup.node,
            setup.plexus,
            kubeconfig,
            NODE_NAME,
            socket,
            METRICS_PORT,
            &socket.with_file_name("state"),
        );
        let daemon = Daemon(cmd.spawn().map_err(|e| format!("plexus daemon: {e}"))?);
        wait_ready(setup.node, METRICS_PORT, Duration::from_secs(30))?;
        Ok(daemon)
    }

    /// The daemon's metric line starting with `prefix`, as a number.
    pub(crate) fn metric(&self, setup: &Setup, prefix: &str) -> Result<f64, String> {
        let text = metrics_page(setup.node, METRICS_PORT)?;
        Ok(text
            .lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0))
    }

    /// Wait (at most 30 s) until every queued network-status write is
    /// delivered, so the audit log holds them.
    fn writes_delivered(&self, setup: &Setup) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.metric(setup, "plexus_status_writes_queued")? > 0.0 {
            if Instant::now() > deadline {
                return Err("plexus daemon: status writes still queued after 30 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Peak resident memory so far (VmHWM), KiB.
    fn peak_rss_kb(&self) -> Result<u64, String> {
        proc_status_kb(self.0.id(), "VmHWM").ok_or_else(|| "no VmHWM in /proc/PID/status".into())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One mode's world: its Kubernetes namespace and conf.
struct Contender {
    mode: Mode,
    namespace: String,
    conf: String,
    add: Vec<Duration>,
    del: Vec<Duration>,
    /// Where its ADDs mark their phases, and those ADDs.
    phases: Option<PathBuf>,
    profiled: Vec<Run>,
}

impl Contender {
    fn cni_args(&self, pod: &str) -> String {
        format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={pod}",
            self.namespace
        )
    }

    /// One CNI call for pod `pod` in `netns`; its wall time and stdout.
    fn call(&self, setup: &Setup, command: &str, pod: &str, netns: &NetNs) -> Result<Run, String> {
        let mut env = cni_env_as(
            command,
            &format!("{}-{pod}", self.mode.tag()),
            netns,
            "eth0",
            &self.cni_args(pod),
            setup.reference_dir,
        );
        if let Some(file) = self.phases.as_ref().filter(|_| command == "ADD") {
            env.push(("PLEXUS_PHASES", file.display().to_string()));
        }
        invoke(setup.node, setup.plexus, &[], &env, self.conf.as_bytes())
    }
}

/// Runs the case and prints its table; `Ok(false)` when a target was missed.
pub fn run(setup: &mut Setup) -> Result<bool, String> {
    let kube = api();
    let _relay = Relay::into_netns(setup.node.path(), kube.port)
        .map_err(|e| format!("relay into the node namespace: {e}"))?;
    let dir = setup.tmp.join("thick");
    let data = dir.join("ipam");
    let manifest_dir = dir.join("manifests");
    std::fs::create_dir_all(&manifest_dir).map_err(|e| e.to_string())?;
    let socket = dir.join("run/plexus.sock");

    let base = |extra: Value| {
        let mut conf = json!({
            "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
            "cniDir": dir.join("cache"),
            "delegates": [{"cniVersion": "1.0.0", "name": "thick-pod", "type": "bridge",
                           "bridge": "brthick0", "isGateway": true,
                           "ipam": {"type": "host-local", "subnet": "10.90.0.0/16",
                                    "dataDir": data}}],
        });
        for (k, v) in extra.as_object().expect("an object") {
            conf[k] = v.clone();
        }
        conf.to_string()
    };
    let kubeconfig = kube.plexus_kubeconfig();
    let mut contenders: Vec<Contender> = Vec::new();
    // The manifest modes share one namespace name (not on the API server).
    let manifest_namespace = format!("pxb-dir-{}", std::process::id());
    for mode in Mode::ALL {
        let namespace = if mode.uses_api() {
            kube.namespace(&format!("pxb-{}", mode.tag()))
        } else {
            manifest_namespace.clone()
        };
        let pods = setup.pods + if mode == Mode::Thick { setup.storm } else { 0 };
        let yaml = manifests(&namespace, "pod", pods, &data);
        let conf = match mode {
            Mode::Manifest => {
                std::fs::write(manifest_dir.join("all.yaml"), &yaml).map_err(|e| e.to_string())?;
                base(json!({"manifestDir": manifest_dir}))
            }
            Mode::ThickManifest => {
                base(json!({"manifestDir": manifest_dir, "daemonSocket": socket}))
            }
            Mode::Thin => base(json!({"kubeconfig": kubeconfig})),
            Mode::Thick => base(json!({"kubeconfig": kubeconfig, "daemonSocket": socket})),
        };
        if mode.uses_api() {
            kube.apply(&yaml);
        }
        contenders.push(Contender {
            mode,
            namespace,
            conf,
            add: Vec::new(),
            del: Vec::new(),
            phases: mode
                .profiled()
                .then(|| dir.join(format!("phases-{}.jsonl", mode.tag()))),
            profiled: Vec::new(),
        });
    }
    let daemon = Daemon::start(setup, &socket, &kubeconfig)?;

    // Side by side, pod by pod; the audit log is read per mode after.
    let pid = std::process::id();
    let mut sandboxes: Vec<Vec<NetNs>> = Mode::ALL.iter().map(|_| Vec::new()).collect();
    let before: Vec<usize> = contenders
        .iter()
        .map(|c| requests(&c.namespace).len())
        .collect();
    for i in 0..setup.pods {
        for (c, netns) in contenders.iter_mut().zip(sandboxes.iter_mut()) {
            let ns = setup
                .namespaces
                .create(format!("pxb-{pid}-{}{i}", c.mode.tag()))?;
            let run = c.call(setup, "ADD", &format!("pod-{i}"), &ns)?;
            c.add.push(run.elapsed);
            if c.phases.is_some() {
                c.profiled.push(run);
            }
            netns.push(ns);
        }
    }
    daemon.writes_delivered(setup)?;
    let per_add: Vec<(usize, usize, usize, usize)> = contenders
        .iter()
        .zip(&before)
        .map(|(c, before)| {
            let add = &requests(&c.namespace)[*before..];
            (
                count(add, "get", "pods", ""),
                count(add, "get", "network-attachment-definitions", ""),
                count(add, "patch", "pods", "status"),
                count(add, "create", "events", ""),
            )
        })
        .collect();
    for i in 0..setup.pods {
        for (c, netns) in contenders.iter_mut().zip(&sandboxes) {
            let run = c.call(setup, "DEL", &format!("pod-{i}"), &netns[i])?;
            c.del.push(run.elapsed);
        }
    }

    println!(
        "\nKubernetes, thin vs thick: a pod selecting 3 networks (+ the cluster network); \
         plexus exec'd per call each time"
    );
    let rows: Vec<(&str, &[Duration], &[Duration])> = contenders
        .iter()
        .map(|c| (c.mode.label(), &c.add[..], &c.del[..]))
        .collect();
    print_table(20, &rows);
    let median = |mode: Mode| {
        let c = contenders
            .iter()
            .find(|c| c.mode == mode)
            .expect("every mode");
        percentile(&c.add, 0.5).as_secs_f64()
    };
    let thick_vs_manifest = median(Mode::Thick) / median(Mode::Manifest);
    let met_speed = thick_vs_manifest <= THICK_VS_MANIFEST_MAX;
    println!(
        "ADD: thick takes {thick_vs_manifest:.2}x the manifest-dir ADD (target <= \
         {THICK_VS_MANIFEST_MAX}x: {}); thin takes {:.2}x thick; the hop to the daemon alone \
         (thick, manifest dir) {:.2}x",
        verdict(met_speed),
        median(Mode::Thin) / median(Mode::Thick),
        median(Mode::ThickManifest) / median(Mode::Manifest)
    );
    let pods = setup.pods as f64;
    for (c, (pod_gets, nad_gets, patches, events)) in contenders.iter().zip(&per_add) {
        if !c.mode.uses_api() {
            continue;
        }
        println!(
            "API requests per ADD, {:<11} (audit log): {:.2} GET pod, {:.2} GET NAD, {:.2} PATCH \
             pod status, {:.2} POST event",
            c.mode.label(),
            *pod_gets as f64 / pods,
            *nad_gets as f64 / pods,
            *patches as f64 / pods,
            *events as f64 / pods,
        );
    }
    let thick = per_add[3];
    let met_requests = thick.0 == 0 && thick.1 == 0 && thick.2 == setup.pods;
    println!(
        "thick: 0 GETs on the warm path, 1 PATCH per ADD (target): {}",
        verdict(met_requests)
    );
    let delay = |part: &str| {
        daemon.metric(
            setup,
            &format!("plexus_status_write_delay_seconds_{part}{{result=\"written\"}}"),
        )
    };
    let (delay_sum, written) = (delay("sum")?, delay("count")?);
    println!(
        "thick: network-status written behind the ADD's answer (the daemon's outbox): {written} \
         written, on the API server {:.2} ms after the answer on average",
        1000.0 * delay_sum / written.max(1.0)
    );

    for c in &contenders {
        if let Some(file) = &c.phases {
            let title = format!("Where a {} ADD's time goes", c.mode.label());
            crate::phases::report(&title, file, &c.profiled)?;
        }
    }

    let met_storm = storm(setup, &contenders[3], &daemon)?;
    Ok(met_speed && met_requests && met_storm)
}

/// `setup.storm` pods ADDed at once through the daemon, then DELed at once.
fn storm(setup: &mut Setup, thick: &Contender, daemon: &Daemon) -> Result<bool, String> {
    if setup.storm == 0 {
        return Ok(true);
    }
    let pid = std::process::id();
    let first = setup.pods;
    let netns = (0..setup.storm)
        .map(|i| setup.namespaces.create(format!("pxb-{pid}-storm{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let setup = &*setup;
    let at_once = |command: &str| {
        let start = Instant::now();
        let outcomes: Vec<Result<Run, String>> = std::thread::scope(|s| {
            let calls: Vec<_> = netns
                .iter()
                .enumerate()
                .map(|(i, ns)| {
                    let pod = format!("pod-{}", first + i);
                    s.spawn(move || thick.call(setup, command, &pod, ns))
                })
                .collect();
            calls
                .into_iter()
                .map(|c| c.join().expect("no panic"))
                .collect()
        });
        (start.elapsed(), outcomes)
    };
    let (add_wall, added) = at_once("ADD");
    let mut addresses: Vec<String> = added
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .filter_map(|run| {
            let result: Value = serde_json::from_slice(&run.stdout).ok()?;
            Some(result["ips"][0]["address"].as_str()?.to_string())
        })
        .collect();
    let add_failures = added.iter().filter(|r| r.is_err()).count();
    let got = addresses.len();
    addresses.sort();
    addresses.dedup();
    let duplicates = got - addresses.len();
    let (del_wall, deleted) = at_once("DEL");
    let del_failures = deleted.iter().filter(|r| r.is_err()).count();
    let peak = daemon.peak_rss_kb()?;
    let met = add_failures == 0 && del_failures == 0 && duplicates == 0 && peak < STORM_RSS_MAX_KB;
    println!(
        "boot storm through the daemon: {} pods at once: ADD {:.2} s, DEL {:.2} s wall; \
         failures {add_failures} + {del_failures}, duplicate addresses {duplicates}; daemon peak \
         RSS {:.1} MB (target: none failed, no duplicate, < {} MB: {})",
        setup.storm,
        add_wall.as_secs_f64(),
        del_wall.as_secs_f64(),
        peak as f64 / 1024.0,
        STORM_RSS_MAX_KB / 1024,
        verdict(met)
    );
    if let Some(Err(e)) = added.iter().chain(&deleted).find(|r| r.is_err()) {
        println!("first failure: {e}");
    }
    Ok(met)
}
