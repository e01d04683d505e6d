//! `plexus demo`: plexus's main job on an embedded example, no cluster needed.
//!
//! Inside a "node" network namespace it creates (the machine's own namespace
//! is never changed), two pod namespaces are attached by the plexus binary
//! invoked exactly as a runtime invokes a CNI plugin (env + config on stdin):
//! the cluster network is a bridge with host-local IPAM, and each pod's
//! annotation selects a secondary macvlan network (a NetworkAttachmentDefinition
//! with a tuning step chained). The demo then pings between the pods on both
//! networks, prints each pod's network-status annotation (multi-net-spec §5),
//! deletes both attachments, checks that nothing is left, and removes the
//! namespaces and its scratch directory. Everything runs built in: only root
//! is needed. The manifests are `examples/demo/`, compiled in.

use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use plexus_dataplane::netlink::VethSpec;
use plexus_dataplane::{probe, NetNs, Netlink};
use serde_json::{json, Value};

use crate::cni::names::{ContainerId, IfName};
use crate::netattach::status::{status_annotation_value, NetworkStatus};
use crate::record::{Cache, Lookup};
use crate::sandbox_dir::{self, SandboxDir};

/// The embedded example, compiled in.
pub mod files {
    pub const PODS: &str = include_str!("../../examples/demo/pods.yaml");
    pub const NADS: &str = include_str!("../../examples/demo/nads.yaml");
    pub const CLUSTER_NETWORK: &str = include_str!("../../examples/demo/cluster-network.conflist");
}

/// The scratch root the example files name; each run substitutes its own.
const EXAMPLE_ROOT: &str = "/run/plexus-demo";
const POD_NAMESPACE: &str = "demo";
const PODS: [&str; 2] = ["pod-a", "pod-b"];
/// The macvlan master the NAD names, made in the node namespace.
const UPLINK: &str = "uplink0";
/// Bounds: one plugin invocation, one ping.
const PLUGIN_TIMEOUT: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(3);

/// Runs the demo, printing as it goes; returns the closing line.
pub fn run() -> Result<String, DemoError> {
    if !nix::unistd::geteuid().is_root() {
        return Err(demo_error(
            "must run as root: it creates network namespaces (try sudo)",
        ));
    }
    let pid = std::process::id();
    let scratch = Scratch::create(std::env::temp_dir().join(format!("plexus-demo-{pid}")))?;
    let mut namespaces = Namespaces(Vec::new());
    let node = namespaces.create(&format!("plexus-demo-{pid}-node"))?;
    let pods: Vec<(String, NetNs)> = PODS
        .iter()
        .map(|pod| {
            let name = format!("plexus-demo-{pid}-{pod}");
            namespaces.create(&name).map(|ns| (pod.to_string(), ns))
        })
        .collect::<Result<_, _>>()?;
    println!(
        "plexus demo: node namespace {}, pods {POD_NAMESPACE}/{} and {POD_NAMESPACE}/{} \
         (manifests: examples/demo)",
        node.path().display(),
        PODS[0],
        PODS[1]
    );
    prepare_node(&node)?;
    let conf = scratch.write_example()?;
    let exe = std::env::current_exe().map_err(|e| demo_error(format!("own executable: {e}")))?;
    let invoker = Invoker {
        exe: &exe,
        node: &node,
        conf: &conf,
    };

    // ADD both pods, as a runtime would (the ADD result is the cluster
    // network's; the rest of each pod's attachments is in plexus's record).
    let mut added = Vec::new();
    let outcome = (|| {
        for (pod, ns) in &pods {
            let started = Instant::now();
            let result = invoker.call("ADD", pod, Some(ns), None)?;
            added.push((pod.clone(), result));
            let status = scratch.status_of(pod)?;
            println!(
                "ADD {POD_NAMESPACE}/{pod} in {:.1} ms: {}",
                started.elapsed().as_secs_f64() * 1e3,
                summary(&status)
            );
        }
        ping_everywhere(&pods, &scratch)?;
        for (pod, _) in &pods {
            println!(
                "\nnetwork-status of {POD_NAMESPACE}/{pod} (k8s.v1.cni.cncf.io/network-status):\n{}",
                status_annotation_value(&scratch.status_of(pod)?)
            );
        }
        Ok::<(), DemoError>(())
    })();

    // DEL whatever was added, also after a failure, then prove nothing is
    // left before the namespaces go.
    let mut del_errors = Vec::new();
    for ((pod, result), (_, ns)) in added.iter().zip(&pods) {
        if let Err(e) = invoker.call("DEL", pod, Some(ns), Some(result)) {
            del_errors.push(e);
        }
    }
    outcome?;
    if let Some(e) = del_errors.into_iter().next() {
        return Err(e);
    }
    println!(
        "\nDEL {POD_NAMESPACE}/{} and {POD_NAMESPACE}/{}: done",
        PODS[0], PODS[1]
    );
    let leftovers = scratch.leftovers(&node, &pods)?;
    if !leftovers.is_empty() {
        return Err(demo_error(format!(
            "DEL left things behind: {}",
            leftovers.join(", ")
        )));
    }
    drop(namespaces);
    drop(scratch);
    Ok(
        "nothing left: no pod interface, plexus record or IP allocation remained after DEL; \
         the demo's namespaces and scratch directory are removed"
            .into(),
    )
}

/// What stops the demo: the step that failed, as it is (a command's
/// error: no runtime reads a CNI code from it).
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("failed: {0}")]
    Failed(String),
    #[error(transparent)]
    Record(#[from] crate::record::RecordError),
}

fn demo_error(details: impl Into<String>) -> DemoError {
    DemoError::Failed(details.into())
}

/// One line per attachment: network, interface, addresses.
fn summary(entries: &[NetworkStatus]) -> String {
    entries
        .iter()
        .map(|e| {
            format!(
                "{} {} ({})",
                e.interface.as_deref().unwrap_or("?"),
                e.ips.join(" "),
                e.name
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The node's macvlan master: one end of a veth pair, both ends up.
fn prepare_node(node: &NetNs) -> Result<(), DemoError> {
    let sys = |e: plexus_dataplane::Error| demo_error(format!("node namespace: {e}"));
    let nl = Netlink::open(node).map_err(sys)?;
    let lo = nl.link_by_name(&IfName::loopback()).map_err(sys)?;
    if let Some(lo) = lo {
        nl.set_up(lo.index).map_err(sys)?;
    }
    let name = |name: String| IfName::new(name).map_err(demo_error);
    let peer = name(format!("{UPLINK}p"))?;
    nl.create_veth(&VethSpec {
        up: true,
        ..VethSpec::new(name(UPLINK.to_string())?, peer.clone())
    })
    .map_err(sys)?;
    // The peer cannot be brought up in the request that creates it.
    let peer = nl
        .link_by_name(&peer)
        .map_err(sys)?
        .ok_or_else(|| demo_error(format!("{UPLINK}'s peer vanished")))?;
    nl.set_up(peer.index).map_err(sys)
}

/// Pings every address of the other pod, on every network, both ways.
fn ping_everywhere(pods: &[(String, NetNs)], scratch: &Scratch) -> Result<(), DemoError> {
    println!();
    for (from, from_ns) in pods {
        for (to, _) in pods.iter().filter(|(to, _)| to != from) {
            for entry in scratch.status_of(to)? {
                for ip in &entry.ips {
                    let addr = ip.split('/').next().unwrap_or(ip);
                    let Ok(target) = addr.parse::<Ipv4Addr>() else {
                        continue;
                    };
                    let rtt = probe::icmp_echo(from_ns, target, PING_TIMEOUT)
                        .map_err(|e| demo_error(format!("{from} cannot reach {to}: {e}")))?;
                    println!(
                        "ping {POD_NAMESPACE}/{from} -> {POD_NAMESPACE}/{to} {target} on {} ({}): reply in {:.2} ms",
                        entry.name,
                        entry.interface.as_deref().unwrap_or("?"),
                        rtt.as_secs_f64() * 1e3
                    );
                }
            }
        }
    }
    Ok(())
}

/// Runs the plexus binary as a runtime runs a CNI plugin, in the node
/// namespace.
struct Invoker<'a> {
    exe: &'a Path,
    node: &'a NetNs,
    conf: &'a Value,
}

impl Invoker<'_> {
    fn call(
        &self,
        command: &str,
        pod: &str,
        pod_ns: Option<&NetNs>,
        prev_result: Option<&Value>,
    ) -> Result<Value, DemoError> {
        let mut conf = self.conf.clone();
        if let Some(prev) = prev_result {
            conf["prevResult"] = prev.clone();
        }
        let mut cmd = Command::new(self.exe);
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", container_id(pod))
            .env(
                "CNI_NETNS",
                pod_ns
                    .map(|n| n.path().display().to_string())
                    .unwrap_or_default(),
            )
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", "/usr/lib/cni:/opt/cni/bin")
            .env(
                "CNI_ARGS",
                format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={POD_NAMESPACE};K8S_POD_NAME={pod}"),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        self.node.join_in_child(&mut cmd);
        let what = format!("{command} {POD_NAMESPACE}/{pod}");
        let mut child = cmd
            .spawn()
            .map_err(|e| demo_error(format!("{what}: run {}: {e}", self.exe.display())))?;
        // The plugin may exit before reading all of stdin (EPIPE is fine).
        let _ = child
            .stdin
            .take()
            .expect("piped")
            .write_all(conf.to_string().as_bytes());
        let status = wait_bounded(&mut child, PLUGIN_TIMEOUT)
            .map_err(|e| demo_error(format!("{what}: {e}")))?;
        let mut stdout = String::new();
        let mut stderr = String::new();
        let _ = child
            .stdout
            .take()
            .expect("piped")
            .read_to_string(&mut stdout);
        let _ = child
            .stderr
            .take()
            .expect("piped")
            .read_to_string(&mut stderr);
        if !status.success() {
            return Err(demo_error(format!(
                "{what} failed: {}{}",
                stdout.trim(),
                stderr.trim()
            )));
        }
        if stdout.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&stdout).map_err(|e| demo_error(format!("{what}: result: {e}")))
    }
}

/// Waits for `child` at most `timeout`, killing it after that. Plugin
/// output is small, so the pipes cannot fill up meanwhile.
fn wait_bounded(
    child: &mut std::process::Child,
    timeout: Duration,
) -> Result<std::process::ExitStatus, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer within {timeout:?}; killed"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn container_id(pod: &str) -> String {
    format!("demo-{pod}")
}

/// The demo's directory: manifests, plexus's records and the IPAM data.
/// Removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn create(dir: PathBuf) -> Result<Scratch, DemoError> {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("manifests"))
            .map_err(|e| demo_error(format!("{}: {e}", dir.display())))?;
        Ok(Scratch(dir))
    }

    /// Writes the manifests (their paths moved into this directory) and
    /// returns plexus's configuration, in Multus's form.
    fn write_example(&self) -> Result<Value, DemoError> {
        let root = self.0.display().to_string();
        let localise = |text: &str| text.replace(EXAMPLE_ROOT, &root);
        for (name, text) in [("pods.yaml", files::PODS), ("nads.yaml", files::NADS)] {
            let path = self.0.join("manifests").join(name);
            std::fs::write(&path, localise(text))
                .map_err(|e| demo_error(format!("{}: {e}", path.display())))?;
        }
        let cluster_network: Value = serde_json::from_str(&localise(files::CLUSTER_NETWORK))
            .map_err(|e| demo_error(format!("cluster-network.conflist: {e}")))?;
        Ok(json!({
            "cniVersion": "1.0.0",
            "name": "plexus-demo",
            "type": "plexus",
            "delegates": [cluster_network],
            "manifestDir": self.0.join("manifests"),
            "cniDir": self.records_dir(),
            "confDir": self.0.join("net.d"),
        }))
    }

    fn records_dir(&self) -> PathBuf {
        self.0.join("records")
    }

    /// The pod's network-status entries, from plexus's record of its ADD.
    fn status_of(&self, pod: &str) -> Result<Vec<NetworkStatus>, DemoError> {
        let id = ContainerId::new(container_id(pod)).map_err(demo_error)?;
        let eth0 = IfName::new("eth0").map_err(demo_error)?;
        match Cache::new(self.records_dir()).load(&id, &eth0)? {
            Lookup::Found(record) => Ok(record.network_status()),
            Lookup::Missing => Err(demo_error(format!("no plexus record for {pod}"))),
            Lookup::Corrupt { path, reason } => {
                Err(demo_error(format!("record {}: {reason}", path.display())))
            }
        }
    }

    /// What DEL should have removed but did not: pod interfaces, host veths,
    /// records, IP allocations.
    fn leftovers(&self, node: &NetNs, pods: &[(String, NetNs)]) -> Result<Vec<String>, DemoError> {
        let sys = |e: plexus_dataplane::Error| demo_error(e.to_string());
        let mut left = Vec::new();
        for (pod, ns) in pods {
            let links = Netlink::open(ns).map_err(sys)?.links().map_err(sys)?;
            left.extend(
                links
                    .into_iter()
                    .filter(|l| l.name != "lo")
                    .map(|l| format!("{} in {pod}", l.name)),
            );
        }
        let node_links = Netlink::open(node).map_err(sys)?.links().map_err(sys)?;
        left.extend(
            node_links
                .into_iter()
                .filter(|l| l.name.starts_with("veth"))
                .map(|l| format!("{} in the node namespace", l.name)),
        );
        // The sandboxes' notes and locks directory stays, as the record
        // directory itself does; a note or lock in it is a leftover.
        let sandboxes = SandboxDir::in_cni_dir(&self.records_dir());
        left.extend(
            files_under(&self.records_dir())
                .into_iter()
                .filter(|f| f != sandbox_dir::SUBDIR)
                .map(|f| format!("record {f}")),
        );
        left.extend(
            files_under(sandboxes.path())
                .into_iter()
                .map(|f| format!("sandbox note or lock {f}")),
        );
        // host-local keeps `lock` and `last_reserved_ip.N`; every other file
        // is an address still held.
        for network in files_under(&self.0.join("ipam")) {
            let held = files_under(&self.0.join("ipam").join(&network))
                .into_iter()
                .filter(|f| f != "lock" && !f.starts_with("last_reserved_ip"));
            left.extend(held.map(|ip| format!("address {ip} of {network}")));
        }
        Ok(left)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn files_under(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Named namespaces, deleted on drop (also when the demo fails).
struct Namespaces(Vec<String>);

impl Namespaces {
    fn create(&mut self, name: &str) -> Result<NetNs, DemoError> {
        let ns = NetNs::create_named(name)
            .map_err(|e| demo_error(format!("create namespace {name}: {e}")))?;
        self.0.push(name.to_string());
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
