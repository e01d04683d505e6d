//! The executor with the real reference plugins (Debian's
//! containernetworking-plugins in /usr/lib/cni) touching the kernel: planner
//! → executor → bridge/host-local/tuning → DEL.
//!
//! Each test plays the node inside its own network namespace: it creates a
//! "node" and a "pod" namespace, re-runs itself under `ip netns exec <node>`
//! (so bridges, veth host ends and sysctls land in the node namespace, never
//! in the machine's root namespace) and checks the child's verdict. Guards
//! delete the namespaces even when a test panics.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use plexus::cni::config::NetworkConfigList;
use plexus::cni::names::{ContainerId, IfName, NetnsPath};
use plexus::cni::CniVersion;
use plexus::netattach::nad::NetworkAttachmentDefinition;
use plexus::netattach::pod::Pod;
use plexus::plan::{plan, DefaultNetwork, Plan, PlanInputs, PlanOptions};
use plexus::record::Cache;
use plexus::run::{Delegates, Executor, Registry, RunContext};
use plexus_testkit::files;
use serde_json::{json, Value};

const PLUGINS: &str = "/usr/lib/cni";
const CHILD: &str = "PLEXUS_RUN_NETNS_CHILD";
const POD_NS: &str = "PLEXUS_RUN_NETNS_POD";
const TMP: &str = "PLEXUS_RUN_NETNS_TMP";

/// A named network namespace, deleted on drop (also while unwinding).
struct Netns(String);

impl Netns {
    fn add(name: String) -> Netns {
        run("ip", &["netns", "add", &name]);
        Netns(name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Quietly: a test may have deleted it already.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.0])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What the child needs: the pod namespace and a scratch directory.
struct Node {
    pod: String,
    tmp: PathBuf,
}

impl Node {
    fn netns_path(&self) -> PathBuf {
        Path::new("/var/run/netns").join(&self.pod)
    }

    /// `ip -j addr` of the pod namespace: interface name → IPv4 CIDRs.
    fn pod_addrs(&self) -> BTreeMap<String, Vec<String>> {
        let out = run("ip", &["-n", &self.pod, "-j", "addr", "show"]);
        let links: Value = serde_json::from_str(&out).unwrap();
        links
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let addrs = l["addr_info"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|a| a["family"] == "inet")
                    .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
                    .collect();
                (l["ifname"].as_str().unwrap().to_string(), addrs)
            })
            .collect()
    }

    fn pod_mac(&self, ifname: &str) -> String {
        let out = run("ip", &["-n", &self.pod, "-j", "link", "show", ifname]);
        let v: Value = serde_json::from_str(&out).unwrap();
        v[0]["address"].as_str().unwrap().to_string()
    }

    fn pod_sysctl(&self, path: &str) -> String {
        run("ip", &["netns", "exec", &self.pod, "cat", path])
            .trim()
            .to_string()
    }

    /// The addresses host-local holds for `network`.
    fn reserved(&self, network: &str) -> Vec<String> {
        files::leases(&self.tmp.join("ipam").join(network))
    }
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Run `body` as the node: in the child under `ip netns exec`, or, in the
/// parent, set up the namespaces and re-run this test there.
fn as_node(test: &str, body: impl FnOnce(&Node)) {
    if let Ok(which) = std::env::var(CHILD) {
        if which == test {
            body(&Node {
                pod: std::env::var(POD_NS).unwrap(),
                tmp: std::env::var(TMP).unwrap().into(),
            });
        }
        return;
    }
    use plexus_testkit::Feature;
    if !plexus_testkit::require(&[Feature::Root, Feature::ReferencePlugins]) {
        return;
    }
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let pid = std::process::id();
    let node = Netns::add(format!("pxr-{pid}-{n}-node"));
    let pod = Netns::add(format!("pxr-{pid}-{n}-pod"));
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", &node.0])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, test)
        .env(POD_NS, &pod.0)
        .env(TMP, tmp.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "node child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ipam(subnet: &str, tmp: &Path) -> Value {
    json!({"type": "host-local", "subnet": subnet,
           "dataDir": tmp.join("ipam"), "routes": [{"dst": "0.0.0.0/0"}]})
}

/// Plan a pod on the cluster network `podnet` (bridge + tuning) plus the
/// NAD `ns/second` (bridge + `second_tail`, CNI 0.4.0) with the real planner.
fn planned(node: &Node, second_tail: Value) -> Plan {
    let cluster = json!({"cniVersion": "1.0.0", "name": "podnet", "plugins": [
        {"type": "bridge", "bridge": "pxrbr0", "isGateway": true,
         "ipam": ipam("10.99.0.0/24", &node.tmp)},
        {"type": "tuning", "sysctl": {"net.core.somaxconn": "512"}}]});
    let second = json!({"cniVersion": "0.4.0", "name": "second", "plugins": [
        {"type": "bridge", "bridge": "pxrbr1", "ipam": ipam("10.98.0.0/24", &node.tmp)},
        second_tail]});
    let nad = NetworkAttachmentDefinition::from_value(&json!({
        "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "second", "namespace": "ns"},
        "spec": {"config": second.to_string()}}))
    .unwrap();
    let mut nads = BTreeMap::new();
    nads.insert(("ns".to_string(), "second".to_string()), nad);
    let pod = Pod {
        namespace: "ns".into(),
        name: "web".into(),
        uid: Some("uid-1".into()),
        annotations: [(
            "k8s.v1.cni.cncf.io/networks".to_string(),
            "second".to_string(),
        )]
        .into(),
    };
    let default_network = DefaultNetwork {
        network: "podnet".into(),
        config: NetworkConfigList::from_value(&cluster).unwrap(),
        source: "test".into(),
    };
    let options = PlanOptions::new(Default::default(), IfName::new("eth0").unwrap())
        .with_container(ContainerId::new("ctr-netns").unwrap());
    plan(
        &pod,
        &PlanInputs::off_node(&nads, &default_network, &options),
    )
    .unwrap()
}

fn ctx<'a>(node: &Node, registry: &'a Registry) -> RunContext<'a> {
    RunContext {
        container_id: ContainerId::new("ctr-netns").unwrap(),
        ifname: IfName::new("eth0").unwrap(),
        netns: Some(NetnsPath::new(node.netns_path().to_str().unwrap()).unwrap()),
        delegates: Delegates {
            cni_path: vec![PLUGINS.into()],
            bin_dir: None,
            registry,
        },
    }
}

#[test]
fn reference_bridge_host_local_tuning_add_check_del() {
    // cni-SPEC §3 add/check/delete with real delegates; multi-net-spec §6.2
    // (cluster network first), §7.1 (versions per list).
    as_node("reference_bridge_host_local_tuning_add_check_del", |node| {
        let p = planned(node, json!({"type": "tuning", "mac": "c2:11:22:33:44:55"}));
        let registry = Registry::new();
        let ex = Executor::new(Cache::new(node.tmp.join("cache")));
        let ctx = ctx(node, &registry);
        let results = ex.add(&p, &ctx).unwrap();

        let a = results[0].result.as_ref().unwrap();
        let b = results[1].result.as_ref().unwrap();
        assert_eq!(
            (results[0].ifname.as_str(), results[1].ifname.as_str()),
            ("eth0", "net1")
        );
        assert_eq!(a.cni_version, Some(CniVersion::V1_0_0));
        assert_eq!(b.cni_version, Some(CniVersion::V0_4_0));
        assert_eq!(a.ips[0].address.to_string(), "10.99.0.2/24");
        assert_eq!(b.ips[0].address.to_string(), "10.98.0.2/24");
        // tuning's result passes bridge's through (prevResult threading).
        assert!(a
            .interfaces
            .iter()
            .any(|i| i.name == "eth0" && i.in_sandbox()));
        let addrs = node.pod_addrs();
        assert_eq!(addrs["eth0"], ["10.99.0.2/24"]);
        assert_eq!(addrs["net1"], ["10.98.0.2/24"]);
        assert_eq!(node.pod_mac("net1"), "c2:11:22:33:44:55");
        assert_eq!(node.pod_sysctl("/proc/sys/net/core/somaxconn"), "512");
        assert_eq!(node.reserved("podnet"), ["10.99.0.2"]);
        assert_eq!(node.reserved("second"), ["10.98.0.2"]);
        // The bridges are in the node namespace this test runs in.
        run("ip", &["link", "show", "pxrbr0"]);
        run("ip", &["link", "show", "pxrbr1"]);

        // cni-SPEC §3 "Checking an attachment": the reference plugins
        // verify interfaces, addresses and routes against prevResult.
        ex.check(&ctx).unwrap();

        let report = ex.del(&ctx, None).unwrap();
        assert_eq!(report.detached.len(), 2);
        assert_eq!(node.pod_addrs().keys().collect::<Vec<_>>(), ["lo"]);
        assert!(node.reserved("podnet").is_empty());
        assert!(node.reserved("second").is_empty());
        assert!(!node.tmp.join("cache/ctr-netns@eth0.json").exists());
        // containerd sends DEL again, the last one without a netns.
        let mut late = ctx.clone();
        late.netns = None;
        ex.del(&late, None).unwrap();
    });
}

#[test]
fn reference_plugin_failure_rolls_back_interfaces_and_addresses() {
    // multi-net-spec §7.2: tuning fails on the second network; the veths and
    // both host-local reservations made before are gone afterwards.
    as_node(
        "reference_plugin_failure_rolls_back_interfaces_and_addresses",
        |node| {
            let p = planned(
                node,
                json!({"type": "tuning", "sysctl": {"net.ipv4.conf.nosuchif0.forwarding": "1"}}),
            );
            let registry = Registry::new();
            let ex = Executor::new(Cache::new(node.tmp.join("cache")));
            let ctx = ctx(node, &registry);
            let e = plexus::cni::CniError::from(ex.add(&p, &ctx).unwrap_err());
            assert!(
                e.details
                    .starts_with("ns/second (net1) plugins[1]: tuning: "),
                "{e}"
            );
            assert_eq!(node.pod_addrs().keys().collect::<Vec<_>>(), ["lo"]);
            assert!(node.reserved("podnet").is_empty());
            assert!(node.reserved("second").is_empty());
            // The runtime's DEL after the failed ADD gives tuning its DEL
            // and clears the record.
            assert!(node.tmp.join("cache/ctr-netns@eth0.json").exists());
            ex.del(&ctx, None).unwrap();
            assert!(!node.tmp.join("cache/ctr-netns@eth0.json").exists());
        },
    );
}

#[test]
fn reference_del_after_the_netns_is_gone_releases_addresses() {
    // cni-SPEC §2 DEL: CNI_NETNS may be absent; the plugins still release
    // what lives outside the pod (host-local reservations).
    as_node(
        "reference_del_after_the_netns_is_gone_releases_addresses",
        |node| {
            let p = planned(node, json!({"type": "tuning"}));
            let registry = Registry::new();
            let ex = Executor::new(Cache::new(node.tmp.join("cache")));
            let ctx = ctx(node, &registry);
            ex.add(&p, &ctx).unwrap();
            assert_eq!(node.reserved("podnet"), ["10.99.0.2"]);
            // The runtime removed the pod's namespace before its DEL (the
            // parent's guard tolerates the namespace being gone).
            run("ip", &["netns", "del", &node.pod]);
            ex.del(&ctx, None).unwrap();
            assert!(node.reserved("podnet").is_empty());
            assert!(node.reserved("second").is_empty());
            assert!(!node.tmp.join("cache/ctr-netns@eth0.json").exists());
        },
    );
}
