//! plexus against the reference CNI plugins, side by side in one run.
//!
//! For N pods one after another it invokes, exactly as a runtime does (env +
//! config on stdin, a fresh process each time), the reference `bridge` +
//! `host-local` (and `macvlan`, `host-device` + `host-local`) from Debian's
//! containernetworking-plugins, and plexus with the same network through its
//! built-in plugins. It prints the median and p95 of ADD and DEL for each, the
//! ratios, a bare `ip link del` of the same kind of veth as the DEL baseline,
//! and plexus's peak RSS per invocation.
//!
//! Everything happens in network namespaces the benchmark creates (a "node"
//! namespace where the plugins run, one per pod) and removes; the machine's
//! own namespace is never touched. Pods are interleaved (reference, plexus,
//! reference, ...) so machine noise hits both alike; so are the baseline's
//! deletions with plexus's bridge DELs.
//!
//! The Kubernetes case (`kube.rs`) then attaches pods selecting 3 networks
//! through the test kube-apiserver, beside the reference plugins alone; the
//! thick case (`thick.rs`) attaches such pods from a manifest directory,
//! thin and through `plexus daemon`, side by side, with API requests per ADD
//! and a boot storm through the daemon (`--storm`, 200 pods at once); the
//! dynamic-networks case (`hotplug.rs`) times a running pod's annotation
//! change to its updated network-status through the daemon.
//!
//! Run: `cargo dist && cargo run --release -p plexus-bench -- [--pods 40]
//! [--no-kube]` (as root). It measures the release artifact, the `plexus`
//! that `cargo dist` builds (static musl, hot functions gathered).
//!
//! With `--cluster`, only the one-node cluster cases run instead, on a
//! cluster the benchmark starts (testkit/node-up, `PLEXUS_NODE_ID`): pod
//! start time of 100 pods at once against the cluster network alone and
//! Multus thick (`pod_start.rs`, `--multus DIR`, `multus_thick.rs`), and
//! hot-plug beside multus-dynamic-networks-controller (`hotplug.rs`,
//! `--dynamic-controller DIR`).
//!
//! With `--cluster --netpolicy`, only the MultiNetworkPolicy case runs
//! (`netpolicy.rs`): creation to enforcement of 100 policies on 100 pods,
//! rules per pod and ADD latency, beside multi-networkpolicy-iptables.
//!
//! With `--scale --policies`, only the scale simulation with
//! MultiNetworkPolicies runs (`scale_policy.rs`, issue 46): per daemon RSS,
//! bytes received at start and while other nodes churn, and policy change
//! to enforcement, beside multi-networkpolicy-iptables.
//!
//! With `--soak`, only the soak runs (`soak.rs`, issue 47): `--cycles`
//! pod ADD/DEL cycles through `plexus daemon` with NADs, policies and
//! hot-plug churning beside them; every series sampled must stay flat and
//! nothing may be left.
//!
//! With `--sriov`, only the SR-IOV VF case (`sriov.rs`) runs instead: it
//! needs a PCI SR-IOV PF and recreates its VFs, so it runs only in the test
//! VM (`vm-tests/run --bench -- --sriov`).
//!
//! With `--vlan`, only the `vlan` + `host-local` scenario runs, the same way
//! as the bridge and macvlan ones, each pod on its own VLAN id of the node's
//! uplink: it needs 802.1q, which the build hosts' kernels lack, so it runs
//! in the test VM (`vm-tests/run --bench -- --vlan`).

mod cluster_ipam;
mod daemons;
mod dra;
mod hot_text;
mod hotplug;
mod kube;
mod multus_thick;
mod netpolicy;
mod phases;
mod pod_start;
mod rdma;
mod scale;
mod scale_multus;
mod scale_policy;
mod scale_step;
mod soak;
mod sriov;
mod thick;
mod watch;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use plexus_dataplane::NetNs;
use serde_json::{json, Value};

#[derive(Parser)]
#[command(about = "plexus vs the reference CNI plugins, side by side")]
struct Args {
    /// Pods per scenario, attached one after another (default 40; 20 with
    /// --sriov and --vlan, as the VM emulates its CPU).
    #[arg(long)]
    pods: Option<usize>,
    /// Directory of the reference plugins.
    #[arg(long, default_value = "/usr/lib/cni")]
    reference_dir: PathBuf,
    /// The plexus binary (default: the release artifact of `cargo dist` in
    /// this benchmark's target directory).
    #[arg(long)]
    plexus: Option<PathBuf>,
    /// Leave out the Kubernetes case (it starts the test API server).
    #[arg(long)]
    no_kube: bool,
    /// Pods ADDed at once through the daemon in the thick case's boot storm.
    #[arg(long, default_value_t = 200)]
    storm: usize,
    /// Run only the one-node cluster cases (testkit/node-up, started by the
    /// benchmark; PLEXUS_NODE_ID names it): pod start time of `--pods` pods
    /// (default 100) at once against the cluster network alone and Multus
    /// thick, and hot-plug beside multus-dynamic-networks-controller.
    #[arg(long)]
    cluster: bool,
    /// With `--cluster`, run only the MultiNetworkPolicy case: 100 pods and
    /// 100 policies, plexus beside multi-networkpolicy-iptables
    /// (`--mnp-iptables`, default `.ci/multi-networkpolicy-iptables`'s
    /// build when there is one).
    #[arg(long, requires = "cluster")]
    netpolicy: bool,
    /// A build of multi-networkpolicy-iptables for `--netpolicy` and
    /// `--scale --policies`.
    #[arg(long, value_name = "PATH")]
    mnp_iptables: Option<PathBuf>,
    /// A directory holding a build of Multus thick (`multus-daemon` and
    /// `multus-shim`, see shared/notes/multus.md), run beside plexus on the
    /// one-node cluster (`--cluster`; skipped with a note without it) and
    /// in the scale simulation (`--scale`: a `multus-daemon` per simulated
    /// node, after plexus's, on the same objects).
    #[arg(long, value_name = "DIR")]
    multus: Option<PathBuf>,
    /// A directory holding a build of multus-dynamic-networks-controller
    /// (`dynamic-networks-controller`, see shared/notes/peers.md) to run
    /// beside plexus's hot-plug; it needs Multus thick (`--multus`) on the
    /// one-node cluster (`--cluster`), and is skipped with a note without.
    #[arg(long, value_name = "DIR")]
    dynamic_controller: Option<PathBuf>,
    /// Run only the scale simulation (issue 34): `--daemons` simulated nodes,
    /// each a `plexus daemon` without a kubelet, against a private test API
    /// server whose cluster grows through `--cluster-pods` (`--pods` on
    /// each node, default 20): sync time, RSS and CPU, requests at start and
    /// idle, and the watches after an API server restart, per daemon.
    #[arg(long)]
    scale: bool,
    /// With `--scale`, the run with MultiNetworkPolicies (issue 46): the
    /// daemons enforce them (`--multi-network-policy`), 10 policies whose
    /// peers are a few pods each and one that selects nothing; beside
    /// multi-networkpolicy-iptables (`--mnp-iptables`, default
    /// `.ci/multi-networkpolicy-iptables`'s build when there is one), one
    /// per simulated node: RSS, bytes received at start and while other
    /// nodes churn, policy change to enforcement.
    #[arg(long, requires = "scale")]
    policies: bool,
    /// Simulated nodes with a daemon, in the scale simulation.
    #[arg(long, default_value_t = 10)]
    daemons: usize,
    /// The cluster's pod counts the scale simulation steps through.
    #[arg(long, value_delimiter = ',', default_value = "1000,3000,10000")]
    cluster_pods: Vec<usize>,
    /// Run only the cluster-wide IPAM case: `--nodes` simulated nodes each
    /// ADD `--pods` pods (default 12) at once from one whereabouts pool on
    /// the test API server, through whereabouts, through plexus exec'd as
    /// `whereabouts` (thin) and through plexus thick (a daemon per node),
    /// side by side; then DEL them all.
    #[arg(long)]
    cluster_ipam: bool,
    /// Simulated nodes of the cluster-wide IPAM case.
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// The cluster-wide IPAM case with an IPv4 and an IPv6 range (whereabouts'
    /// `ipRanges`, a /16 and a /64): two addresses per pod. A shared phase
    /// follows: whereabouts and plexus (thin) ADD at once into one network,
    /// every other pod each, then each DELs the other's pods.
    #[arg(long)]
    dual_stack: bool,
    /// The cluster-wide IPAM case with node slices of this size (`/24`):
    /// each node allocates from its own slice's pool, the slices laid out
    /// beforehand as plexus's leader (or whereabouts' controller) leaves
    /// them.
    #[arg(long, value_name = "SIZE", conflicts_with = "dual_stack")]
    node_slice_size: Option<String>,
    /// Exit non-zero when a target is missed.
    #[arg(long)]
    check: bool,
    /// Run only the soak (issue 47): `--cycles` pod ADD/DEL cycles through
    /// `plexus daemon` on the test API server, with NADs,
    /// MultiNetworkPolicies and hot-plug churning beside them; the daemon's
    /// RSS, fds, threads, caches and watches, the node's tables, links,
    /// allocations and records, and its API requests per ADD sampled every
    /// 1,000 cycles must stay flat, and nothing may be left.
    #[arg(long)]
    soak: bool,
    /// Cycles of the soak (a quick run: 2000).
    #[arg(long, default_value_t = 20_000, requires = "soak")]
    cycles: usize,
    /// Run only the SR-IOV VF case: plexus's `sriov` driver against sriov-cni
    /// and against the same work done by iproute2, on VFs of the machine's
    /// SR-IOV PF. In the test VM only (`vm-tests/run --bench -- --sriov`).
    #[arg(long)]
    sriov: bool,
    /// Run only the `vlan` + `host-local` scenario (issue 50): plexus's
    /// built-in `vlan` against the reference binary, each pod on its own
    /// VLAN id. It needs 802.1q: in the test VM (`vm-tests/run --bench --
    /// --vlan`).
    #[arg(long)]
    vlan: bool,
    /// Run only the RDMA case (issue 50): a VF and its RDMA device through
    /// the `host-device` + `rdma` chain, plexus against the reference
    /// `host-device` and rdma-cni, in exclusive mode on the VM kernel's
    /// RDMA stand-in (`vm-tests/run --bench -- --rdma`).
    #[arg(long)]
    rdma: bool,
    /// Run only the DRA case (issue 49): a VF claimed through plexus's own
    /// DRA driver beside the same VF kind through the device-plugin path,
    /// both through the daemon on the test API server. It needs SR-IOV: in
    /// the test VM (`vm-tests/run --bench -- --dra`).
    #[arg(long)]
    dra: bool,
    /// Instead of benchmarking, single-step plexus's ADD and DEL and write
    /// the functions they run to OUT, for the linker to gather
    /// (bench/hot-text/README.md).
    #[arg(long, value_name = "OUT")]
    hot_functions: Option<PathBuf>,
}

/// ADD's median against the reference's in the same run (issue 11: one
/// exec of a static binary plus the kernel's work is about 3.6x here).
const ADD_SPEEDUP_TARGET: f64 = 3.3;

/// One plugin process: wall time and peak RSS.
struct Run {
    elapsed: Duration,
    max_rss_kb: i64,
    stdout: Vec<u8>,
    /// The process, and CLOCK_MONOTONIC (ns) at its spawn and its reaping:
    /// where its own phase marks start and end (`phases.rs`).
    pid: u32,
    spawned_ns: u64,
    reaped_ns: u64,
}

/// `program` to run inside `netns` as a runtime runs a plugin: only the
/// given environment, stdin and stdout piped.
fn command(netns: &NetNs, program: &Path, argv: &[&str], env: &[(&str, String)]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(argv)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // The child enters the node namespace between fork and exec, so the
    // timing includes no extra exec (`ip netns exec` would add one).
    netns.join_in_child(&mut cmd);
    cmd
}

/// Spawn `program` inside `netns` as a runtime would, wait, and measure.
fn invoke(
    netns: &NetNs,
    program: &Path,
    argv: &[&str],
    env: &[(&str, String)],
    stdin: &[u8],
) -> Result<Run, String> {
    let mut cmd = command(netns, program, argv, env);
    let start = Instant::now();
    let spawned_ns = phases::now_ns();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    let _ = child.stdin.take().expect("piped").write_all(stdin);
    let mut stdout = Vec::new();
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_end(&mut stdout)
        .map_err(|e| e.to_string())?;
    let mut stderr = Vec::new();
    child
        .stderr
        .take()
        .expect("piped")
        .read_to_end(&mut stderr)
        .map_err(|e| e.to_string())?;
    let mut status = 0;
    // wait4, not nix: nix wraps waitpid only, and the child's own rusage
    // (not RUSAGE_CHILDREN's running total) is what is measured.
    // SAFETY: rusage is plain data; wait4 reaps our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    if unsafe { libc::wait4(pid, &mut status, 0, &mut usage) } != pid {
        return Err(format!("wait4: {}", std::io::Error::last_os_error()));
    }
    let elapsed = start.elapsed();
    let reaped_ns = phases::now_ns();
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!(
            "{} failed: {}{}",
            program.display(),
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        ));
    }
    Ok(Run {
        elapsed,
        max_rss_kb: usage.ru_maxrss,
        stdout,
        pid: child.id(),
        spawned_ns,
        reaped_ns,
    })
}

fn cni_env(
    command: &str,
    container_id: &str,
    netns: &NetNs,
    cni_path: &Path,
) -> Vec<(&'static str, String)> {
    cni_env_as(
        command,
        container_id,
        netns,
        "eth0",
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=pod",
        cni_path,
    )
}

/// The CNI environment of one call, as a runtime sets it.
fn cni_env_as(
    command: &str,
    container_id: &str,
    netns: &NetNs,
    ifname: &str,
    cni_args: &str,
    cni_path: &Path,
) -> Vec<(&'static str, String)> {
    vec![
        ("CNI_COMMAND", command.to_string()),
        ("CNI_CONTAINERID", container_id.to_string()),
        ("CNI_NETNS", netns.path().display().to_string()),
        ("CNI_IFNAME", ifname.to_string()),
        ("CNI_ARGS", cni_args.to_string()),
        ("CNI_PATH", cni_path.display().to_string()),
    ]
}

/// Which network a scenario attaches.
struct Scenario {
    title: &'static str,
    /// The network config for the reference, given its IPAM data dir.
    reference: Value,
    plexus: Value,
    /// The config of pod `i` from the scenario's (a VLAN id per pod).
    per_pod: fn(&Value, usize) -> Value,
    /// ADD's median against the reference's.
    target: f64,
}

/// The same config for every pod.
fn same(conf: &Value, _: usize) -> Value {
    conf.clone()
}

/// The first VLAN ids of the `vlan` scenario's contenders: pod `i` has the
/// id plus `i`, so no two pods share one on the uplink.
const VLAN_IDS: [u16; 2] = [1000, 3000];
/// Pods the `vlan` scenario can give an id each.
const VLAN_PODS: usize = 1000;

/// Pod `i`'s `vlan` config: the scenario's id plus `i`, in the config or in
/// its one delegate.
fn vlan_of_pod(conf: &Value, i: usize) -> Value {
    let mut conf = conf.clone();
    let vlan = the_network(&mut conf);
    let first = vlan["vlanId"].as_u64().expect("a vlanId");
    vlan["vlanId"] = json!(first + i as u64);
    conf
}

/// A contender's network: the reference's config, or plexus's one delegate.
fn the_network(conf: &mut Value) -> &mut Value {
    if conf["type"] == "plexus" {
        &mut conf["delegates"][0]
    } else {
        conf
    }
}

/// The `vlan` + `host-local` scenario (`--vlan`).
fn vlan_scenario(data_dir: &Path, cache_dir: &Path) -> Scenario {
    let vlan = |name: &str, id: u16, subnet: &str, who: &str| {
        json!({"cniVersion": "1.0.0", "name": name, "type": "vlan", "master": "uplink0",
               "vlanId": id, "ipam": {"type": "host-local", "subnet": subnet,
                                      "dataDir": data_dir.join(who)}})
    };
    Scenario {
        title: "vlan + host-local",
        reference: vlan("bench-vl-ref", VLAN_IDS[0], "10.94.0.0/16", "ref"),
        plexus: plexus_conf(
            vlan("bench-vl-px", VLAN_IDS[1], "10.95.0.0/16", "px"),
            cache_dir,
        ),
        per_pod: vlan_of_pod,
        // Issue 50: faster than the exec'd reference.
        target: 1.0,
    }
}

/// Pod `i`'s `host-device` config: the scenario's `device` with `i` after
/// it (a device of its own, made by [`host_device_links`]), in the config or
/// in its one delegate.
fn device_of_pod(conf: &Value, i: usize) -> Value {
    let mut conf = conf.clone();
    let device = the_network(&mut conf);
    let prefix = device["device"].as_str().expect("a device").to_string();
    device["device"] = json!(format!("{prefix}{i}"));
    conf
}

/// The `host-device` scenario's devices in the node: a veth end per pod and
/// contender (`hdr<i>` for the reference, `hdp<i>` for plexus), its peer
/// staying in the node.
fn host_device_links(node: &NetNs, pods: usize) -> Result<(), String> {
    for i in 0..pods {
        for prefix in ["hdr", "hdp"] {
            let (name, peer) = (format!("{prefix}{i}"), format!("{prefix}{i}x"));
            ip(
                node,
                &["link", "add", &name, "type", "veth", "peer", "name", &peer],
            )?;
        }
    }
    Ok(())
}

/// plexus's config with `delegate` as its one network.
fn plexus_conf(delegate: Value, cache_dir: &Path) -> Value {
    json!({"cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
           "delegates": [delegate], "cniDir": cache_dir})
}

fn scenarios(data_dir: &Path, cache_dir: &Path) -> Vec<Scenario> {
    let ipam = |subnet: &str, who: &str| json!({"type": "host-local", "subnet": subnet, "dataDir": data_dir.join(who)});
    let bridge = |name: &str, br: &str, subnet: &str, who: &str| {
        json!({"cniVersion": "1.0.0", "name": name, "type": "bridge", "bridge": br,
               "isGateway": true, "ipam": ipam(subnet, who)})
    };
    let macvlan = |name: &str, subnet: &str, who: &str| {
        json!({"cniVersion": "1.0.0", "name": name, "type": "macvlan", "master": "uplink0",
               "mode": "bridge", "ipam": ipam(subnet, who)})
    };
    // The device named `device` plus the pod's index ([`device_of_pod`]).
    let host_device = |name: &str, device: &str, subnet: &str, who: &str| {
        json!({"cniVersion": "1.0.0", "name": name, "type": "host-device", "device": device,
               "dataDir": data_dir.join(who).join("devices"), "ipam": ipam(subnet, who)})
    };
    let plexus = |delegate: Value| plexus_conf(delegate, cache_dir);
    vec![
        Scenario {
            title: "bridge + host-local",
            reference: bridge("bench-br-ref", "brref0", "10.98.0.0/16", "ref"),
            plexus: plexus(bridge("bench-br-px", "brpx0", "10.99.0.0/16", "px")),
            per_pod: same,
            target: ADD_SPEEDUP_TARGET,
        },
        Scenario {
            title: "macvlan + host-local",
            reference: macvlan("bench-mv-ref", "10.96.0.0/16", "ref"),
            plexus: plexus(macvlan("bench-mv-px", "10.97.0.0/16", "px")),
            per_pod: same,
            target: ADD_SPEEDUP_TARGET,
        },
        Scenario {
            title: "host-device + host-local",
            reference: host_device("bench-hd-ref", "hdr", "10.92.0.0/16", "ref"),
            plexus: plexus(host_device("bench-hd-px", "hdp", "10.93.0.0/16", "px")),
            per_pod: device_of_pod,
            // Issue 50: faster than the exec'd reference.
            target: 1.0,
        },
    ]
}

#[derive(Default)]
struct Samples {
    add: Vec<Duration>,
    del: Vec<Duration>,
    rss_kb: Vec<i64>,
}

fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:7.2} ms", d.as_secs_f64() * 1e3)
}

/// The latency table: one row per contender, its ADD and DEL samples, the
/// first column `width` wide.
fn print_table(width: usize, rows: &[(&str, &[Duration], &[Duration])]) {
    println!(
        "{:<width$} {:>12} {:>12} {:>12} {:>12}",
        "", "ADD median", "ADD p95", "DEL median", "DEL p95"
    );
    for (who, add, del) in rows {
        println!(
            "{:<width$} {:>12} {:>12} {:>12} {:>12}",
            who,
            ms(percentile(add, 0.5)),
            ms(percentile(add, 0.95)),
            ms(percentile(del, 0.5)),
            ms(percentile(del, 0.95))
        );
    }
}

/// Whether `p99` is under `bound`, said on a line that begins with `what`
/// (`"WHAT p99 12.34 ms (target < 200 ms: met)"`).
fn p99_within(what: &str, p99: Duration, bound: Duration) -> bool {
    let met = p99 < bound;
    println!(
        "{what} p99 {} (target < {} ms: {})",
        ms(p99).trim(),
        bound.as_millis(),
        verdict(met)
    );
    met
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

/// Namespaces made by the benchmark, deleted on drop even when it fails.
struct Namespaces(Vec<String>);

impl Namespaces {
    fn create(&mut self, name: String) -> Result<NetNs, String> {
        let ns = NetNs::create_named(&name).map_err(|e| e.to_string())?;
        self.0.push(name);
        Ok(ns)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in self.0.drain(..).rev() {
            let _ = NetNs::delete_named(&name);
        }
    }
}

/// The "node" namespace the plugins run in, with the macvlan master.
fn node(namespaces: &mut Namespaces, pid: u32) -> Result<NetNs, String> {
    let node = namespaces.create(format!("pxb-node-{pid}"))?;
    ip(&node, &["link", "set", "lo", "up"])?;
    ip(
        &node,
        &[
            "link", "add", "uplink0", "type", "veth", "peer", "name", "uplink0p",
        ],
    )?;
    ip(&node, &["link", "set", "uplink0", "up"])?;
    ip(&node, &["link", "set", "uplink0p", "up"])?;
    Ok(node)
}

/// The "node" namespace of a run against `api`, and the relay through
/// which what runs in it reaches the API server's port.
fn node_reaching(
    api: &plexus_testkit::kube::KubeApi,
    namespaces: &mut Namespaces,
) -> Result<(NetNs, plexus_testkit::kube::Relay), String> {
    let node = node(namespaces, std::process::id())?;
    let relay = plexus_testkit::kube::Relay::into_netns(node.path(), api.port)
        .map_err(|e| format!("relay into the node namespace: {e}"))?;
    Ok((node, relay))
}

/// `ip ARGS...` inside `netns`, untimed set-up or timed baseline.
fn ip(netns: &NetNs, argv: &[&str]) -> Result<Run, String> {
    invoke(netns, Path::new("/usr/sbin/ip"), argv, &[], &[])
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The DEL baseline: a bare `ip link del` of the same kind of veth as the
/// bridge's (host end on a bridge, peer in the pod), which is mostly the
/// kernel's teardown. Only the deletion is timed.
fn bare_veth_del(
    namespaces: &mut Namespaces,
    node: &NetNs,
    pid: u32,
    i: usize,
) -> Result<Duration, String> {
    let name = format!("pxb-{pid}-b{i}");
    let pod = namespaces.create(name.clone())?;
    let host_end = format!("vb{i}");
    ip(
        node,
        &[
            "link", "add", &host_end, "master", "brbare0", "type", "veth", "peer", "name", "eth0",
            "netns", &name,
        ],
    )?;
    ip(node, &["link", "set", &host_end, "up"])?;
    Ok(ip(&pod, &["link", "del", "eth0"])?.elapsed)
}

fn with_prev_result(conf: &Value, result: &Value) -> Vec<u8> {
    let mut conf = conf.clone();
    conf["prevResult"] = result.clone();
    conf.to_string().into_bytes()
}

fn main() {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => {}
        Ok(false) if args.check => std::process::exit(2),
        Ok(false) => {}
        Err(e) => {
            eprintln!("plexus-bench: {e}");
            std::process::exit(1);
        }
    }
}

/// Runs every scenario; `Ok(false)` when a target was missed.
fn run(args: &Args) -> Result<bool, String> {
    let plexus = match &args.plexus {
        Some(p) => p.clone(),
        None => {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            plexus_testkit::dist::plexus_beside(&exe).ok_or_else(|| {
                format!(
                    "no {}/{}/plexus in the target directory of {}: run `cargo dist` first",
                    plexus_testkit::dist::TARGET,
                    plexus_testkit::dist::PROFILE,
                    exe.display()
                )
            })?
        }
    };
    if !plexus.is_file() {
        return Err(format!("{} not found", plexus.display()));
    }
    let pod_count = args.pods.unwrap_or(match (args.sriov, args.cluster) {
        _ if args.cluster_ipam => 12,
        _ if args.scale => 20,
        _ if args.vlan || args.dra || args.rdma => 20,
        (true, _) => 20,
        (_, true) => 100,
        _ => 40,
    });
    if pod_count == 0 {
        return Err("--pods must be at least 1".into());
    }
    let pid = std::process::id();
    let tmp = TempDir(std::env::temp_dir().join(format!("plexus-bench-{pid}")));
    std::fs::create_dir_all(&tmp.0).map_err(|e| e.to_string())?;

    if args.soak {
        if !plexus_testkit::has(plexus_testkit::Feature::KubeApiServer) {
            return Err("--soak: no test API server here (.ci/kube-apiserver)".into());
        }
        return soak::run(&soak::Setup {
            plexus: &plexus,
            tmp: &tmp.0,
            cycles: args.cycles.max(1),
        });
    }
    if args.scale {
        if !plexus_testkit::has(plexus_testkit::Feature::KubeApiServer) {
            return Err("--scale: no test API server here (.ci/kube-apiserver)".into());
        }
        let mut sizes = args.cluster_pods.clone();
        sizes.sort_unstable();
        let mnp_iptables = args.mnp_iptables.clone().or_else(mnp_iptables_build);
        let run = if args.policies {
            scale_policy::run
        } else {
            scale::run
        };
        return run(&scale_step::Setup {
            plexus: &plexus,
            tmp: &tmp.0,
            daemons: args.daemons.max(1),
            per_node: pod_count,
            sizes,
            multus: args.multus.as_deref(),
            mnp_iptables: mnp_iptables.as_deref(),
        });
    }
    if args.cluster_ipam {
        if !plexus_testkit::has(plexus_testkit::Feature::KubeApiServer) {
            return Err("--cluster-ipam: no test API server here (.ci/kube-apiserver)".into());
        }
        let setup = cluster_ipam::Setup {
            plexus: &plexus,
            tmp: &tmp.0,
            nodes: args.nodes.max(1),
            pods_per_node: pod_count,
            dual_stack: args.dual_stack,
            node_slice_size: args.node_slice_size.as_deref(),
        };
        return cluster_ipam::run(&setup);
    }
    if args.cluster {
        return cluster(args, pod_count);
    }
    let mut namespaces = Namespaces(Vec::new());
    if args.dra {
        return dra::run(&mut dra::Setup {
            plexus: &plexus,
            namespaces: &mut namespaces,
            tmp: &tmp.0,
            pods: pod_count,
        });
    }
    if args.rdma {
        return rdma::run(rdma::Setup {
            plexus: &plexus,
            reference_dir: &args.reference_dir,
            namespaces: &mut namespaces,
            tmp: &tmp.0,
            pods: pod_count,
        });
    }
    if args.sriov {
        return sriov::run(sriov::Setup {
            plexus: &plexus,
            reference_dir: &args.reference_dir,
            namespaces: &mut namespaces,
            tmp: &tmp.0,
            pods: pod_count,
        });
    }
    if let Some(out) = &args.hot_functions {
        let setup = hot_text::Setup {
            plexus: &plexus,
            reference_dir: &args.reference_dir,
            namespaces: &mut namespaces,
            tmp: &tmp.0,
        };
        return hot_text::run(setup, out).map(|()| true);
    }
    let node = node(&mut namespaces, pid)?;
    let mut ctx = Contest {
        plexus: &plexus,
        reference_dir: &args.reference_dir,
        node: &node,
        namespaces: &mut namespaces,
        pid,
        pods: pod_count,
    };
    if args.vlan {
        if pod_count > VLAN_PODS {
            return Err(format!("--vlan: at most {VLAN_PODS} pods, a VLAN id each"));
        }
        println!(
            "plexus-bench: {pod_count} pods, one after another; reference vlan from {}",
            args.reference_dir.display()
        );
        let scenario = vlan_scenario(&tmp.0.join("ipam"), &tmp.0.join("cache"));
        let m = ctx.scenario(0, &scenario, None)?;
        println!(
            "peak RSS of a plexus invocation: {:.1} MB",
            m.max_rss_kb as f64 / 1024.0
        );
        return Ok(m.met);
    }
    // A bridge for the bare-veth baseline.
    ip(&node, &["link", "add", "brbare0", "type", "bridge"])?;
    host_device_links(&node, pod_count)?;

    println!(
        "plexus-bench: {} pods per scenario, one after another; reference plugins from {}",
        pod_count,
        args.reference_dir.display()
    );
    let mut all_met = true;
    let mut bridge_del_median = None;
    let mut bare = Vec::with_capacity(pod_count);
    let mut max_rss_kb = 0;
    for (n, scenario) in scenarios(&tmp.0.join("ipam"), &tmp.0.join("cache"))
        .into_iter()
        .enumerate()
    {
        let bridge = scenario.reference["type"] == "bridge";
        let m = ctx.scenario(n, &scenario, bridge.then_some(&mut bare))?;
        all_met &= m.met;
        if bridge {
            bridge_del_median = Some(m.del_median);
        }
        max_rss_kb = max_rss_kb.max(m.max_rss_kb);
    }

    println!(
        "\nDEL baseline: bare `ip link del` of a bridged veth, median {}",
        ms(percentile(&bare, 0.5))
    );
    if let Some(ours) = bridge_del_median {
        let ratio = ours.as_secs_f64() / percentile(&bare, 0.5).as_secs_f64();
        let met = ratio <= 1.15;
        all_met &= met;
        println!(
            "DEL: plexus bridge DEL takes {ratio:.2}x a bare `ip link del` (target <= 1.15x: {})",
            verdict(met)
        );
    }
    let met = max_rss_kb <= 10 * 1024;
    all_met &= met;
    println!(
        "peak RSS of a plexus invocation: {:.1} MB (target <= 10 MB: {})",
        max_rss_kb as f64 / 1024.0,
        verdict(met)
    );

    if args.no_kube {
        println!(
            "
Kubernetes case left out (--no-kube)"
        );
    } else if !plexus_testkit::has(plexus_testkit::Feature::KubeApiServer) {
        println!(
            "
Kubernetes case skipped: no test API server here \
             (.ci/install-deps unit, then .ci/kube-apiserver)"
        );
    } else {
        let mut setup = kube::Setup {
            plexus: &plexus,
            reference_dir: &args.reference_dir,
            node: &node,
            namespaces: &mut namespaces,
            tmp: &tmp.0,
            pods: pod_count,
            storm: args.storm,
        };
        all_met &= kube::run(&mut setup)?;
        all_met &= thick::run(&mut setup)?;
        all_met &= hotplug::run(&mut setup, args.dynamic_controller.as_deref())?;
    }
    Ok(all_met)
}

/// What one scenario needs: the contenders, the node they run in, and the
/// namespaces of its pods.
struct Contest<'a> {
    plexus: &'a Path,
    reference_dir: &'a Path,
    node: &'a NetNs,
    namespaces: &'a mut Namespaces,
    pid: u32,
    pods: usize,
}

/// What one scenario measured.
struct Measured {
    /// ADD's ratio met the scenario's target.
    met: bool,
    del_median: Duration,
    max_rss_kb: i64,
}

impl Contest<'_> {
    /// Scenario `n`: its pods ADDed one after another, reference and plexus
    /// taking turns, then DELed; the table and the ratios printed. With
    /// `bare`, a bare veth deletion after each DEL (the bridge's baseline).
    fn scenario(
        &mut self,
        n: usize,
        scenario: &Scenario,
        mut bare: Option<&mut Vec<Duration>>,
    ) -> Result<Measured, String> {
        let (pid, pod_count, node) = (self.pid, self.pods, self.node);
        let plugin = scenario.reference["type"].as_str().expect("scenario type");
        let reference_bin = self.reference_dir.join(plugin);
        let plexus = self.plexus;
        let (mut reference, mut ours) = (Samples::default(), Samples::default());
        // One CNI call of `binary` for container `id` in `ns`, measured.
        let reference_dir = self.reference_dir;
        let call = |binary: &Path, command: &str, id: &str, ns: &NetNs, stdin: &[u8]| {
            let env = cni_env(command, id, ns, reference_dir);
            invoke(node, binary, &[], &env, stdin)
        };
        // ADD with `conf` on stdin, as a runtime sends it.
        let add = |binary: &Path, id: &str, ns: &NetNs, conf: &Value| {
            call(binary, "ADD", id, ns, conf.to_string().as_bytes())
        };
        let mut pods = Vec::with_capacity(pod_count);
        for i in 0..pod_count {
            let ref_ns = self.namespaces.create(format!("pxb-{pid}-{n}r{i}"))?;
            let our_ns = self.namespaces.create(format!("pxb-{pid}-{n}p{i}"))?;
            let (ref_id, our_id) = (format!("ref{i}"), format!("px{i}"));
            let ref_conf = (scenario.per_pod)(&scenario.reference, i);
            let our_conf = (scenario.per_pod)(&scenario.plexus, i);
            let r = add(&reference_bin, &ref_id, &ref_ns, &ref_conf)?;
            reference.add.push(r.elapsed);
            let p = add(plexus, &our_id, &our_ns, &our_conf)?;
            ours.add.push(p.elapsed);
            ours.rss_kb.push(p.max_rss_kb);
            let parse = |run: &Run| {
                serde_json::from_slice::<Value>(&run.stdout).map_err(|e| format!("ADD result: {e}"))
            };
            pods.push((
                (ref_ns, ref_id, ref_conf, parse(&r)?),
                (our_ns, our_id, our_conf, parse(&p)?),
            ));
        }
        for ((ref_ns, ref_id, ref_conf, ref_result), (our_ns, our_id, our_conf, our_result)) in
            &pods
        {
            let prev = with_prev_result(ref_conf, ref_result);
            let r = call(&reference_bin, "DEL", ref_id, ref_ns, &prev)?;
            reference.del.push(r.elapsed);
            let prev = with_prev_result(our_conf, our_result);
            let p = call(plexus, "DEL", our_id, our_ns, &prev)?;
            ours.del.push(p.elapsed);
            ours.rss_kb.push(p.max_rss_kb);
            if let Some(bare) = bare.as_deref_mut() {
                // Right after, under the same conditions: the baseline.
                let i = bare.len();
                bare.push(bare_veth_del(self.namespaces, node, pid, i)?);
            }
        }
        drop(pods);

        println!("\n{}", scenario.title);
        print_table(
            12,
            &[
                ("reference", &reference.add, &reference.del),
                ("plexus", &ours.add, &ours.del),
            ],
        );
        let add_speedup = percentile(&reference.add, 0.5).as_secs_f64()
            / percentile(&ours.add, 0.5).as_secs_f64();
        let del_speedup = percentile(&reference.del, 0.5).as_secs_f64()
            / percentile(&ours.del, 0.5).as_secs_f64();
        let target = scenario.target;
        let met = add_speedup >= target;
        println!(
            "ADD: plexus is {add_speedup:.2}x faster than the reference (target >= {target:.2}x: {})",
            verdict(met)
        );
        println!("DEL: plexus is {del_speedup:.2}x faster than the reference");
        Ok(Measured {
            met,
            del_median: percentile(&ours.del, 0.5),
            max_rss_kb: ours.rss_kb.iter().copied().max().unwrap_or(0),
        })
    }
}

/// `.ci/multi-networkpolicy-iptables`'s cached build, if it is there.
fn mnp_iptables_build() -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/multi-networkpolicy-iptables");
    let out = Command::new(script).arg("--path").output().ok()?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    path.is_file().then_some(path)
}

/// The one-node cluster cases (`--cluster`); `Ok(false)` when a target was
/// missed.
fn cluster(args: &Args, pods: usize) -> Result<bool, String> {
    if !plexus_testkit::has(plexus_testkit::Feature::KubeNode) {
        return Err(
            "--cluster: no one-node cluster can run here (`testkit/node-up --check` says why)"
                .into(),
        );
    }
    let node = plexus_testkit::node::node();
    if args.netpolicy {
        let peer = args.mnp_iptables.clone().or_else(mnp_iptables_build);
        return netpolicy::on_cluster(node, peer.as_deref());
    }
    let started = pod_start::run(node, pods, args.multus.as_deref())?;
    let hotplug = hotplug::on_cluster(
        node,
        args.multus.as_deref(),
        args.dynamic_controller.as_deref(),
    )?;
    Ok(started && hotplug)
}
