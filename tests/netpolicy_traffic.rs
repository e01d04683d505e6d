//! MultiNetworkPolicy's truth table, connection by connection, on the real
//! kernel: pod namespaces on two networks (bridges `blue` and `red` in a
//! fabric namespace), the policies of each case resolved and written as
//! each pod's nftables table exactly as the daemon writes them
//! (`resolve` + `render` + `Nftables::replace`), then every connection of
//! the case tried for real (TCP handshakes, UDP echoes, ICMP echoes) and
//! compared with what NetworkPolicy's semantics say, written here by hand
//! as the oracle.
//!
//! The cases are the upstream NetworkPolicy conformance cases that apply to
//! one network (test/e2e/network/netpol: default deny, allow from pods /
//! namespaces / both, ipBlock with except, numbered, named and ranged
//! ports, stacked policies, egress, IPv6), plus the multi-network spec's
//! own: a policy for `blue` leaves `red` alone.

#[path = "e2e_support/mod.rs"]
mod e2e_support;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use e2e_support::Namespaces;
use plexus::netpolicy::render;
use plexus::netpolicy::resolve::{Attachment, PodView, World};
use plexus::netpolicy::spec::{Policy, Protocol};
use plexus_dataplane::netlink::{AddressOptions, BridgeSpec, Master, VethSpec};
use plexus_dataplane::nftables::Nftables;
use plexus_dataplane::{NetNs, Netlink};
use plexus_testkit::traffic::{refusal_wait, sctp_connects, tcp_connects, udp_echoes, Listener};
use plexus_testkit::Feature;
use serde_json::json;

const BLUE: &str = "ns1/blue";
const RED: &str = "ns1/red";

/// A pod: its Kubernetes namespace and name, labels, and its host number
/// on both networks (10.61.0.N and fd61::N on blue, 10.62.0.N on red).
const PODS: [(&str, &str, &str, u8); 5] = [
    ("ns1", "server", "app=server", 1),
    ("ns1", "a", "role=a", 2),
    ("ns1", "b", "role=b", 3),
    ("ns2", "c", "role=a", 4),
    ("ns3", "d", "role=a", 5),
];

/// The ports the server listens on (TCP and UDP); 8080 is its named port
/// `http`.
const PORTS: [u16; 5] = [80, 81, 8080, 9003, 9006];

struct Fabric {
    _namespaces: Namespaces,
    /// Each pod's network namespace, in [`PODS`] order.
    netns: Vec<NetNs>,
    views: Vec<PodView>,
    _listeners: Vec<Listener>,
}

/// The fabric, its namespaces named after `tag` (tests run at once).
fn fabric(tag: &str) -> Option<Fabric> {
    if !plexus_testkit::require(&[Feature::Root]) {
        return None;
    }
    let mut namespaces = Namespaces(Vec::new());
    let fabric = namespaces.open(&format!("{tag}-fabric"));
    let fabric_nl = Netlink::open(&fabric).unwrap();
    let mut bridges = Vec::new();
    for name in ["blue", "red"] {
        let bridge = fabric_nl
            .create_bridge(&BridgeSpec {
                up: true,
                ..BridgeSpec::new(name.parse().unwrap())
            })
            .unwrap();
        bridges.push(bridge.index);
    }
    let mut netns = Vec::new();
    let mut views = Vec::new();
    for (i, (namespace, name, label, n)) in PODS.into_iter().enumerate() {
        let ns = namespaces.open(&format!("{tag}-{name}"));
        let nl = Netlink::open(&ns).unwrap();
        let mut attachments = Vec::new();
        for (network, ifname, bridge, net) in [
            (BLUE, "net1", bridges[0], 61),
            (RED, "net2", bridges[1], 62),
        ] {
            let host = format!("np{i}{ifname}");
            let local = fabric_nl
                .create_veth(&VethSpec {
                    peer_netns: Some(&ns),
                    up: true,
                    ..VethSpec::new(host.parse().unwrap(), ifname.parse().unwrap())
                })
                .unwrap();
            fabric_nl
                .set_master(local.index, Master::Set(bridge))
                .unwrap();
            let inside = nl.link_by_name(&ifname.parse().unwrap()).unwrap().unwrap();
            nl.set_up(inside.index).unwrap();
            let mut ips: Vec<IpAddr> = vec![format!("10.{net}.0.{n}").parse().unwrap()];
            if network == BLUE {
                ips.push(format!("fd61::{n}").parse().unwrap());
            }
            for ip in &ips {
                let prefix = if ip.is_ipv4() { 24 } else { 64 };
                nl.add_address(
                    inside.index,
                    ipnetwork::IpNetwork::new(*ip, prefix).unwrap(),
                    AddressOptions { nodad: true },
                )
                .unwrap();
            }
            attachments.push(Attachment {
                network: network.into(),
                interface: Some(ifname.parse().unwrap()),
                ips,
            });
        }
        let (key, value) = label.split_once('=').unwrap();
        views.push(PodView {
            namespace: namespace.into(),
            name: name.into(),
            labels: BTreeMap::from([(key.to_string(), value.to_string())]),
            attachments,
            named_ports: BTreeMap::from([("http".to_string(), (Protocol::Tcp, 8080))]),
        });
        netns.push(ns);
    }
    let listeners = PORTS
        .iter()
        .map(|port| Listener::new(netns[0].path(), *port).unwrap())
        .chain(
            // Every other pod listens on 80 (the server's egress cases).
            (1..PODS.len()).map(|i| Listener::new(netns[i].path(), 80).unwrap()),
        )
        .collect();
    Some(Fabric {
        _namespaces: namespaces,
        netns,
        views,
        _listeners: listeners,
    })
}

/// How a connection is tried.
#[derive(Debug, Clone, Copy)]
enum Try {
    Tcp(u16),
    Udp(u16),
    Ping,
    /// TCP over IPv6 (blue only).
    Tcp6(u16),
}

/// One row: from pod, to pod, on which network, how, and whether policy
/// allows it.
type Row = (&'static str, &'static str, &'static str, Try, bool);

impl Fabric {
    fn index(&self, pod: &str) -> usize {
        PODS.iter().position(|p| p.1 == pod).unwrap()
    }

    /// Writes every pod's table for `policies` (namespace labels: ns2
    /// team=x, ns3 team=y).
    fn enforce(&self, policies: &[Policy]) {
        let namespaces = BTreeMap::from([
            ("ns1".to_string(), BTreeMap::new()),
            (
                "ns2".to_string(),
                BTreeMap::from([("team".to_string(), "x".to_string())]),
            ),
            (
                "ns3".to_string(),
                BTreeMap::from([("team".to_string(), "y".to_string())]),
            ),
        ]);
        let world = World {
            pods: &self.views,
            namespaces: &namespaces,
            policies,
        };
        for (view, ns) in self.views.iter().zip(&self.netns) {
            let nft = Nftables::open(ns).unwrap();
            match render::table(&world.interface_policies(view)) {
                Some(table) => nft.replace(&table).unwrap(),
                None => nft.delete(render::TABLE).unwrap(),
            }
        }
    }

    fn path(&self, pod: &str) -> PathBuf {
        self.netns[self.index(pod)].path().to_path_buf()
    }

    fn address(&self, pod: &str, network: &str, v6: bool) -> IpAddr {
        let view = &self.views[self.index(pod)];
        let attachment = view
            .attachments
            .iter()
            .find(|a| a.network == network)
            .unwrap();
        *attachment.ips.iter().find(|ip| ip.is_ipv6() == v6).unwrap()
    }

    fn passes(&self, (from, to, network, how, _): Row) -> bool {
        let v6 = matches!(how, Try::Tcp6(_));
        let ip = self.address(to, network, v6);
        let src = self.path(from);
        match how {
            Try::Tcp(port) | Try::Tcp6(port) => tcp_connects(&src, SocketAddr::new(ip, port)),
            Try::Udp(port) => udp_echoes(&src, SocketAddr::new(ip, port)),
            Try::Ping => {
                let IpAddr::V4(v4) = ip else { unreachable!() };
                plexus_dataplane::probe::icmp_echo(
                    &self.netns[self.index(from)],
                    v4,
                    refusal_wait(),
                )
                .is_ok()
            }
        }
    }

    /// Applies `policies` (for `blue`) and checks every row; all
    /// mismatches reported at once.
    fn case(&self, name: &str, policies: serde_json::Value, rows: &[Row]) {
        self.case_for(name, "blue", policies, rows)
    }

    /// [`Fabric::case`] with policies for the NADs `policy_for` names.
    fn case_for(&self, name: &str, policy_for: &str, policies: serde_json::Value, rows: &[Row]) {
        let policies: Vec<Policy> = policies
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let object = json!({
                    "metadata": {"namespace": "ns1", "name": format!("{name}-{i}"),
                                 "annotations": {"k8s.v1.cni.cncf.io/policy-for": policy_for}},
                    "spec": spec,
                });
                Policy::from_value(&object).unwrap()
            })
            .collect();
        self.enforce(&policies);
        let wrong: Vec<String> = rows
            .iter()
            .filter(|row| self.passes(**row) != row.4)
            .map(|row| {
                format!(
                    "{} -> {} on {} {:?}: expected {}",
                    row.0,
                    row.1,
                    row.2,
                    row.3,
                    if row.4 { "allowed" } else { "refused" }
                )
            })
            .collect();
        assert!(wrong.is_empty(), "case {name}:\n{}", wrong.join("\n"));
    }
}

/// Issue 47 item 4: a peer counts by its addresses on every network the
/// policy names, as multi-networkpolicy-iptables counts it
/// (`pkg/server/policyrules.go`: a peer's interfaces filtered by
/// `CheckPolicyNetwork(policyNetworks)`). Pod c (ns2) is attached to the
/// `blue` bridge through its own namespace's NAD `ns2/blue`, one L2 with
/// `ns1/blue`: a policy for both allows it on ns1's server; a policy for
/// `ns1/blue` alone refuses it, as it does c's traffic on `red`.
#[test]
fn a_peer_counts_on_every_network_the_policy_names() {
    let Some(mut f) = fabric("np2") else { return };
    use Try::*;
    let c = f.index("c");
    let blue_of_c = f.views[c]
        .attachments
        .iter_mut()
        .find(|a| a.network == BLUE)
        .unwrap();
    blue_of_c.network = "ns2/blue".into();
    let from_team_x = json!([{"podSelector": {"matchLabels": {"app": "server"}},
        "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "x"}}}]}]}]);
    f.case_for(
        "two-nads-one-l2",
        "blue,ns2/blue",
        from_team_x.clone(),
        &[
            ("c", "server", BLUE, Tcp(80), true),
            ("c", "server", BLUE, Udp(81), true),
            ("c", "server", BLUE, Tcp6(80), true),
            ("d", "server", BLUE, Tcp(80), false), // team=y
            ("a", "server", BLUE, Tcp(80), false), // ns1: not team=x
        ],
    );
    f.case_for(
        "a-nad-the-policy-does-not-name",
        "blue",
        from_team_x,
        &[
            ("c", "server", BLUE, Tcp(80), false),
            ("c", "server", BLUE, Ping, false),
        ],
    );
}

#[test]
fn the_truth_table_holds_connection_by_connection() {
    let Some(f) = fabric("np") else { return };
    use Try::*;
    let server = json!({"matchLabels": {"app": "server"}});

    f.case(
        "no-policy",
        json!([]),
        &[
            ("a", "server", BLUE, Tcp(80), true),
            ("d", "server", BLUE, Udp(81), true),
            ("b", "server", BLUE, Ping, true),
        ],
    );
    f.case(
        "default-deny-ingress",
        json!([{"podSelector": {}, "policyTypes": ["Ingress"]}]),
        &[
            ("a", "server", BLUE, Tcp(80), false),
            ("a", "server", BLUE, Udp(80), false),
            ("a", "server", BLUE, Ping, false),
            ("c", "server", BLUE, Tcp(80), false),
            ("a", "server", RED, Tcp(80), true), // another network: untouched
            ("server", "a", BLUE, Tcp(80), false), // a is in ns1: isolated too
            ("server", "c", BLUE, Tcp(80), true), // egress not isolated, c not selected
        ],
    );
    f.case(
        "allow-from-pods",
        json!([{"podSelector": server,
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "a"}}}]}]}]),
        &[
            ("a", "server", BLUE, Tcp(80), true),
            ("a", "server", BLUE, Udp(81), true),
            ("a", "server", BLUE, Ping, true),
            ("b", "server", BLUE, Tcp(80), false),
            ("c", "server", BLUE, Tcp(80), false), // role=a, but another namespace
            ("b", "server", RED, Tcp(80), true),
        ],
    );
    f.case(
        "allow-from-namespaces",
        json!([{"podSelector": server,
        "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "x"}}}]}]}]),
        &[
            ("c", "server", BLUE, Tcp(80), true),
            ("d", "server", BLUE, Tcp(80), false),
            ("a", "server", BLUE, Tcp(80), false),
        ],
    );
    f.case("allow-from-pods-in-namespaces", json!([{"podSelector": server,
        "ingress": [{"from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"role": "a"}}}]}]}]), &[
        ("a", "server", BLUE, Tcp(80), true),
        ("c", "server", BLUE, Tcp(80), true),
        ("d", "server", BLUE, Tcp(80), true),
        ("b", "server", BLUE, Tcp(80), false),
    ]);
    f.case("ipblock-except", json!([{"podSelector": server,
        "ingress": [{"from": [{"ipBlock": {"cidr": "10.61.0.0/24", "except": ["10.61.0.2/32"]}}]}]}]), &[
        ("b", "server", BLUE, Tcp(80), true),
        ("c", "server", BLUE, Tcp(80), true),
        ("a", "server", BLUE, Tcp(80), false),
        ("a", "server", BLUE, Tcp6(80), false), // an IPv4 block says nothing of IPv6
    ]);
    f.case(
        "numbered-port",
        json!([{"podSelector": server,
        "ingress": [{"ports": [{"protocol": "TCP", "port": 80}]}]}]),
        &[
            ("a", "server", BLUE, Tcp(80), true),
            ("d", "server", BLUE, Tcp(80), true),
            ("a", "server", BLUE, Tcp(81), false),
            ("a", "server", BLUE, Udp(80), false),
            ("a", "server", BLUE, Ping, false),
        ],
    );
    f.case(
        "named-port",
        json!([{"podSelector": server,
        "ingress": [{"ports": [{"port": "http"}]}]}]),
        &[
            ("a", "server", BLUE, Tcp(8080), true),
            ("a", "server", BLUE, Tcp(80), false),
        ],
    );
    f.case(
        "port-range",
        json!([{"podSelector": server,
        "ingress": [{"ports": [{"protocol": "UDP", "port": 9000, "endPort": 9005}]}]}]),
        &[
            ("a", "server", BLUE, Udp(9003), true),
            ("a", "server", BLUE, Udp(9006), false),
            ("a", "server", BLUE, Tcp(9003), false),
        ],
    );
    f.case("stacked-policies-add-up", json!([
        {"podSelector": server, "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "a"}}}],
                                             "ports": [{"port": 80}]}]},
        {"podSelector": server, "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "b"}}}],
                                             "ports": [{"port": 81}]}]},
    ]), &[
        ("a", "server", BLUE, Tcp(80), true),
        ("a", "server", BLUE, Tcp(81), false),
        ("b", "server", BLUE, Tcp(81), true),
        ("b", "server", BLUE, Tcp(80), false),
    ]);
    f.case(
        "egress-to-pods-on-a-port",
        json!([{"podSelector": {"matchLabels": {"role": "a"}},
        "policyTypes": ["Egress"],
        "egress": [{"to": [{"podSelector": server}], "ports": [{"port": 80}]}]}]),
        &[
            ("a", "server", BLUE, Tcp(80), true),
            ("a", "server", BLUE, Tcp(81), false),
            ("a", "b", BLUE, Tcp(80), false),
            ("a", "b", RED, Tcp(80), true),
            ("b", "server", BLUE, Tcp(81), true), // b is not selected
            ("server", "a", BLUE, Tcp(80), true), // ingress of a not isolated; replies pass
        ],
    );
    f.case(
        "egress-named-port-of-the-peer",
        json!([{"podSelector": {"matchLabels": {"role": "a"}},
        "policyTypes": ["Egress"],
        "egress": [{"to": [{"podSelector": server}], "ports": [{"port": "http"}]}]}]),
        &[
            ("a", "server", BLUE, Tcp(8080), true),
            ("a", "server", BLUE, Tcp(80), false),
        ],
    );
    f.case(
        "ipv6-from-pods",
        json!([{"podSelector": server,
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "a"}}}]}]}]),
        &[
            ("a", "server", BLUE, Tcp6(80), true), // neighbour discovery through isolation
            ("b", "server", BLUE, Tcp6(80), false),
        ],
    );
    f.case(
        "deny-all-both-ways",
        json!([{"podSelector": server, "policyTypes": ["Ingress", "Egress"]}]),
        &[
            ("a", "server", BLUE, Tcp(80), false),
            ("server", "a", BLUE, Tcp(80), false),
            ("server", "a", RED, Tcp(80), true),
        ],
    );
    // Back to open: every table removed.
    f.case(
        "removed",
        json!([]),
        &[("b", "server", BLUE, Tcp(80), true)],
    );
}

/// SCTP ports are matched by their own protocol, as TCP's and UDP's are.
/// Neither this host's kernel nor Debian's VM needs to have SCTP; the
/// VM's (vm-tests/kernel.config) does, so this runs there.
#[test]
fn sctp_ports_are_matched_by_their_protocol() {
    if !plexus_testkit::require(&[Feature::Root, Feature::Sctp]) {
        return;
    }
    let Some(f) = fabric("nps") else { return };
    let server = |port| SocketAddr::new(f.address("server", BLUE, false), port);
    let policy = |ports: serde_json::Value| {
        Policy::from_value(&json!({
            "metadata": {"namespace": "ns1", "name": "sctp",
                         "annotations": {"k8s.v1.cni.cncf.io/policy-for": "blue"}},
            "spec": {"podSelector": {"matchLabels": {"app": "server"}},
                     "ingress": [{"ports": ports}]},
        }))
        .unwrap()
    };
    assert!(
        sctp_connects(&f.path("a"), server(80)),
        "open before any policy"
    );
    f.enforce(&[policy(json!([{"protocol": "SCTP", "port": 80}]))]);
    assert!(sctp_connects(&f.path("a"), server(80)), "SCTP 80 allowed");
    assert!(!sctp_connects(&f.path("a"), server(81)), "SCTP 81 refused");
    assert!(
        !tcp_connects(&f.path("a"), server(80)),
        "TCP 80 is not SCTP"
    );
    f.enforce(&[policy(json!([{"protocol": "TCP", "port": 80}]))]);
    assert!(!sctp_connects(&f.path("a"), server(80)), "SCTP is not TCP");
    assert!(tcp_connects(&f.path("a"), server(80)));
    f.enforce(&[]);
}

/// The same rules on interfaces of other kinds: the tables match the
/// pod's interface by name, whatever made it. macvlan (bridge) and ipvlan
/// (l2) children of one master in a fabric namespace; the host kernel has
/// no ipvlan, so this runs in the VM (`./test-all`'s vm stage).
#[test]
fn the_rules_hold_on_macvlan_and_ipvlan_interfaces() {
    use plexus_dataplane::netlink::{IpvlanMode, IpvlanSpec, MacvlanMode, MacvlanSpec};
    if !plexus_testkit::require(&[Feature::Root, Feature::Ipvlan]) {
        return;
    }
    for kind in ["macvlan", "ipvlan"] {
        let mut namespaces = Namespaces(Vec::new());
        let fabric_name = namespaces.add(&format!("np-{kind}"));
        let fabric = NetNs::open(format!("/var/run/netns/{fabric_name}")).unwrap();
        e2e_support::ip(
            &fabric_name,
            &["link", "add", "up0", "type", "veth", "peer", "name", "up1"],
        );
        for link in ["up0", "up1"] {
            e2e_support::ip(&fabric_name, &["link", "set", link, "up"]);
        }
        let fabric_nl = Netlink::open(&fabric).unwrap();
        let master = fabric_nl
            .link_by_name(&"up0".parse().unwrap())
            .unwrap()
            .unwrap()
            .index;
        let mut views = Vec::new();
        let mut pods = Vec::new();
        for (i, (name, label)) in [("server", "app=server"), ("a", "role=a"), ("b", "role=b")]
            .into_iter()
            .enumerate()
        {
            let ns = namespaces.open(&format!("np-{kind}-{name}"));
            match kind {
                "macvlan" => fabric_nl
                    .create_macvlan(&MacvlanSpec {
                        netns: Some(&ns),
                        ..MacvlanSpec::new("net1".parse().unwrap(), master, MacvlanMode::Bridge)
                    })
                    .map(drop),
                _ => fabric_nl
                    .create_ipvlan(&IpvlanSpec {
                        netns: Some(&ns),
                        ..IpvlanSpec::new("net1".parse().unwrap(), master, IpvlanMode::L2)
                    })
                    .map(drop),
            }
            .unwrap();
            let nl = Netlink::open(&ns).unwrap();
            let net1 = nl
                .link_by_name(&"net1".parse().unwrap())
                .unwrap()
                .unwrap()
                .index;
            let ip: IpAddr = format!("10.63.0.{}", i + 1).parse().unwrap();
            nl.add_address(
                net1,
                ipnetwork::IpNetwork::new(ip, 24).unwrap(),
                AddressOptions::default(),
            )
            .unwrap();
            nl.set_up(net1).unwrap();
            let (key, value) = label.split_once('=').unwrap();
            views.push(PodView {
                namespace: "ns1".into(),
                name: name.into(),
                labels: BTreeMap::from([(key.to_string(), value.to_string())]),
                attachments: vec![Attachment {
                    network: BLUE.into(),
                    interface: Some("net1".parse().unwrap()),
                    ips: vec![ip],
                }],
                named_ports: BTreeMap::new(),
            });
            pods.push(ns);
        }
        let _listener = Listener::new(pods[0].path(), 80).unwrap();
        let policy = Policy::from_value(&json!({
            "metadata": {"namespace": "ns1", "name": "from-a",
                         "annotations": {"k8s.v1.cni.cncf.io/policy-for": "blue"}},
            "spec": {"podSelector": {"matchLabels": {"app": "server"}},
                     "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "a"}}}],
                                  "ports": [{"port": 80}]}]},
        }))
        .unwrap();
        let namespaces_labels = BTreeMap::from([("ns1".to_string(), BTreeMap::new())]);
        let policies = [policy];
        let world = World {
            pods: &views,
            namespaces: &namespaces_labels,
            policies: &policies,
        };
        let table = render::table(&world.interface_policies(&views[0])).unwrap();
        Nftables::open(&pods[0]).unwrap().replace(&table).unwrap();
        let server = SocketAddr::new(views[0].attachments[0].ips[0], 80);
        assert!(
            tcp_connects(pods[1].path(), server),
            "{kind}: role=a allowed"
        );
        assert!(
            !tcp_connects(pods[2].path(), server),
            "{kind}: role=b refused"
        );
        assert!(!udp_echoes(pods[1].path(), server), "{kind}: UDP refused");
    }
}
