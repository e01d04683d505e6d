//! Pods on two nodes joined by a fabric (issue 34 item 2): a bridge in a
//! namespace of its own, with each node's `uplink0` (a veth) on it, as
//! `testkit/node-up --nodes` joins its nodes. Each node runs the plexus
//! binary with state of its own; a pod on one node reaches a pod on the
//! other over the secondary network, both ways, by ping and by a TCP
//! connection, and each pod's network-status (from its node's record, as
//! plexus publishes it) names the address it has.
//!
//! Where each case runs: macvlan here and in the VM; ipvlan and a VLAN
//! (802.1q, the reference `vlan` plugin as plexus's delegate) in the VM
//! only, since this host's kernel has neither. macvlan across real kubelet
//! nodes, with cluster-wide IPAM, is `tests/cluster_nodes.rs`'s.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use plexus::cni::names::{ContainerId, IfName};
use plexus::record::{Cache, Lookup};

use plexus_testkit::Feature;

use super::*;

/// Two nodes on a fabric, a pod namespace on each.
struct Fabric {
    tmp: tempfile::TempDir,
    nodes: [String; 2],
    pods: [String; 2],
    _namespaces: Namespaces,
}

/// The fabric and its nodes, `None` (the test skips) without `features`.
fn fabric(features: &[Feature], tag: &str) -> Option<Fabric> {
    if !plexus_testkit::require(features) {
        return None;
    }
    let mut namespaces = Namespaces(Vec::new());
    let fabric = namespaces.add(&format!("{tag}-fabric"));
    ip(&fabric, &["link", "add", "fab0", "type", "bridge"]);
    ip(&fabric, &["link", "set", "fab0", "up"]);
    let nodes = [0, 1].map(|i| {
        let node = namespaces.add(&format!("{tag}-node{i}"));
        ip(&node, &["link", "set", "lo", "up"]);
        let port = format!("port{i}");
        ip(
            &node,
            &[
                "link", "add", "uplink0", "type", "veth", "peer", "name", &port, "netns", &fabric,
            ],
        );
        ip(&fabric, &["link", "set", &port, "master", "fab0", "up"]);
        ip(&node, &["link", "set", "uplink0", "up"]);
        node
    });
    let pods = [0, 1].map(|i| namespaces.add(&format!("{tag}-pod{i}")));
    Some(Fabric {
        tmp: tempfile::tempdir().unwrap(),
        nodes,
        pods,
        _namespaces: namespaces,
    })
}

impl Fabric {
    /// Node `i`'s state directory for `what` (its conf's, its IPAM's).
    fn state(&self, i: usize, what: &str) -> PathBuf {
        self.tmp.path().join(format!("node{i}-{what}"))
    }

    /// Pod `i` on node `i`, attached to `network` (its `ipam` left to
    /// this: host-local over 10.30.0.0/24, each node handing out its own
    /// part of it, as nodes with their own ranges do). Returns its
    /// address on `net1` and plexus's conf, for its DEL.
    fn attach(&self, i: usize, network: &Value, tag: &str) -> (String, String) {
        let dir = self.state(i, tag);
        std::fs::create_dir_all(&dir).unwrap();
        let mut network = network.clone();
        let first = 10 + 10 * i;
        network["ipam"] = json!({"type": "host-local", "dataDir": dir.join("ipam").join("fabric"),
            "ranges": [[{"subnet": "10.30.0.0/24", "rangeStart": format!("10.30.0.{first}"),
                         "rangeEnd": format!("10.30.0.{}", first + 9)}]]});
        let conf = plexus_conf(&dir, &network);
        let out = pod_call(&self.nodes[i], "ADD", i, Some(&self.pods[i]), &conf);
        assert_ok("ADD", &out);
        let net1 = addresses(&self.pods[i], "net1");
        assert_eq!(net1.len(), 1, "{net1:?}");
        self.assert_status(i, &dir, &net1[0]);
        (net1[0].clone(), conf)
    }

    /// Pod `i`'s network-status, as its node's record gives it (what
    /// plexus publishes, multi-net-spec §5), names `address` on `net1`.
    fn assert_status(&self, i: usize, dir: &std::path::Path, address: &str) {
        let cache = Cache::new(dir.join("cache"));
        let container = ContainerId::new(format!("c{i}")).unwrap();
        let Lookup::Found(record) = cache
            .load(&container, &IfName::new("eth0").unwrap())
            .unwrap()
        else {
            panic!("no record of pod {i}");
        };
        let status = record.network_status();
        let net1 = status
            .iter()
            .find(|s| s.interface.as_deref() == Some("net1"))
            .unwrap_or_else(|| panic!("no net1 in {status:?}"));
        assert!(
            net1.ips
                .iter()
                .any(|ip| ip.split('/').next() == Some(address)),
            "pod {i}: {net1:?} against {address}"
        );
    }

    /// A TCP connection from pod `from` to `address` port 7000 where pod
    /// `to` listens (busybox's `nc`, answering its own name): the answer
    /// must be `to`'s.
    fn connect(&self, from: usize, to: usize, address: &str) {
        let name = format!("pod{to}");
        let mut server = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.pods[to],
                "busybox",
                "nc",
                "-l",
                "-p",
                "7000",
            ])
            .args(["-e", "echo", &name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + plexus_testkit::bound(Duration::from_secs(5));
        let answer = loop {
            let out = Command::new("timeout")
                .args([
                    "5",
                    "ip",
                    "netns",
                    "exec",
                    &self.pods[from],
                    "busybox",
                    "nc",
                ])
                .args([address, "7000"])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if !text.is_empty() || std::time::Instant::now() > deadline {
                break text;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let _ = server.kill();
        let _ = server.wait();
        assert_eq!(answer, name, "TCP from pod{from} to {address}");
    }

    /// DEL of pod `i` with `conf`: it keeps only lo, and its node nothing.
    fn detach(&self, i: usize, conf: &str, tag: &str) {
        assert_ok(
            "DEL",
            &pod_call(&self.nodes[i], "DEL", i, Some(&self.pods[i]), conf),
        );
        assert_eq!(link_names(&self.pods[i]), ["lo"], "pod {i}");
        assert_nothing_left(&self.state(i, tag));
    }

    /// Both pods attached to `network`, reaching each other both ways
    /// across the fabric; then both detached.
    fn reach_across(&self, network: &Value, tag: &str) {
        let (ip0, conf0) = self.attach(0, network, tag);
        let (ip1, conf1) = self.attach(1, network, tag);
        assert!(
            ping(&self.pods[0], &ip1),
            "{tag}: node0's pod -> node1's {ip1}"
        );
        assert!(
            ping(&self.pods[1], &ip0),
            "{tag}: node1's pod -> node0's {ip0}"
        );
        self.connect(0, 1, &ip1);
        self.connect(1, 0, &ip0);
        self.detach(0, &conf0, tag);
        self.detach(1, &conf1, tag);
    }
}

/// `plugin` (a child of each node's uplink, in `mode`) takes a pod on each
/// node to the other's across the fabric.
fn uplink_children_reach_across(features: &[Feature], tag: &str, plugin: &str, mode: &str) {
    let Some(f) = fabric(features, tag) else {
        return;
    };
    let network = json!({"cniVersion": "1.0.0", "name": "fabric", "type": plugin,
        "master": "uplink0", "mode": mode});
    f.reach_across(&network, plugin);
}

#[test]
fn macvlan_pods_on_two_nodes_reach_each_other_over_the_fabric() {
    let features = [Feature::Root, Feature::ReferencePlugins];
    uplink_children_reach_across(&features, "xmac", "macvlan", "bridge");
}

#[test]
fn ipvlan_pods_on_two_nodes_reach_each_other_over_the_fabric() {
    let features = [Feature::Root, Feature::ReferencePlugins, Feature::Ipvlan];
    uplink_children_reach_across(&features, "xipv", "ipvlan", "l2");
}

/// The reference `vlan` plugin (plexus has no built-in vlan driver: it
/// execs the delegate, cni-SPEC §4) on VLAN 100 across the fabric; then
/// node 1's pod moved to VLAN 200, same subnet, is out of reach: the
/// frames cross the fabric tagged.
#[test]
fn vlan_pods_on_two_nodes_reach_each_other_and_not_across_vlans() {
    let Some(f) = fabric(
        &[Feature::Root, Feature::ReferencePlugins, Feature::Vlan],
        "xvlan",
    ) else {
        return;
    };
    let vlan = |id: u16| {
        json!({"cniVersion": "1.0.0", "name": "fabric", "type": "vlan",
            "master": "uplink0", "vlanId": id})
    };
    f.reach_across(&vlan(100), "vlan100");

    let (ip0, conf0) = f.attach(0, &vlan(100), "vlan100-again");
    let (ip1, conf1) = f.attach(1, &vlan(200), "vlan200");
    let link: Value =
        serde_json::from_str(&ip(&f.pods[1], &["-d", "-j", "link", "show", "net1"])).unwrap();
    assert_eq!(link[0]["linkinfo"]["info_data"]["id"], 200, "{link}");
    assert!(!ping(&f.pods[0], &ip1), "VLAN 100 reached VLAN 200's {ip1}");
    assert!(!ping(&f.pods[1], &ip0), "VLAN 200 reached VLAN 100's {ip0}");
    f.detach(0, &conf0, "vlan100-again");
    f.detach(1, &conf1, "vlan200");
}
