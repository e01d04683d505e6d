//! nftables tables written over netlink, checked with real traffic between
//! two namespaces: a "pod" whose `net1` is a veth to a "peer" namespace
//! (10.9.0.1 and fd09::1 against 10.9.0.2 and fd09::2).
mod common;

use std::net::{IpAddr, SocketAddr};

use common::{ifname, root_namespaces, veth_up, TestNs};
use plexus_dataplane::netlink::AddressOptions;
use plexus_dataplane::nftables::ruleset::{IPPROTO_TCP, IPPROTO_UDP};
use plexus_dataplane::nftables::{Chain, Hook, Match, Nftables, Rule, Table, Verdict};
use plexus_testkit::traffic::{tcp_connects, udp_echoes, Listener};

struct Pair {
    pod: TestNs,
    peer: TestNs,
    nft: Nftables,
}

fn pair() -> Option<Pair> {
    let [(pod, pod_nl), (peer, peer_nl)] = root_namespaces()?;
    let (a, b) = veth_up(&pod_nl, &peer, &peer_nl, "net1", "eth0");
    let nodad = AddressOptions { nodad: true };
    for (nl, index, addrs) in [
        (&pod_nl, a, ["10.9.0.1/24", "fd09::1/64"]),
        (&peer_nl, b, ["10.9.0.2/24", "fd09::2/64"]),
    ] {
        for addr in addrs {
            nl.add_address(index, addr.parse().unwrap(), nodad).unwrap();
        }
    }
    let nft = Nftables::open(&pod.ns).unwrap();
    Some(Pair { pod, peer, nft })
}

fn at(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse::<IpAddr>().unwrap(), port)
}

fn rule(matches: Vec<Match>, verdict: Verdict) -> Rule {
    Rule { matches, verdict }
}

/// Accepts `protocol` from `source` to the ports `first..=last`.
fn accept_from(source: &str, protocol: u8, first: u16, last: u16) -> Rule {
    let matches = vec![
        Match::Source(source.parse().unwrap()),
        Match::Protocol(protocol),
        Match::DestinationPorts(first, last),
    ];
    rule(matches, Verdict::Accept)
}

/// The first connection over the new pair: on a busy machine the veth's
/// carrier and the first ARP may take a moment (cold CI once missed
/// `refusal_wait()` here), so it is tried again for at most 10 s.
fn first_connects(from: &std::path::Path, to: std::net::SocketAddr) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if tcp_connects(from, to) {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Ingress on `net1` isolated: replies, ICMPv6 ND, then `allow`.
fn ingress_table(allow: Vec<Rule>) -> Table {
    common::ingress_isolated("plexus-test", "net1", allow)
}

#[test]
fn an_ingress_table_lets_through_only_what_it_allows_both_families() {
    let Some(t) = pair() else { return };
    let (pod, peer) = (t.pod.ns.path(), t.peer.ns.path());
    let _open = Listener::new(pod, 8080).unwrap();
    let _closed = Listener::new(pod, 8081).unwrap();
    assert!(
        first_connects(peer, at("10.9.0.1", 8081)),
        "open before any table"
    );

    t.nft
        .replace(&ingress_table(vec![
            accept_from("10.9.0.2/32", IPPROTO_TCP, 8080, 8080),
            accept_from("fd09::/64", IPPROTO_UDP, 8000, 8090),
        ]))
        .unwrap();
    assert_eq!(t.nft.rule_count("plexus-test").unwrap(), 6);
    assert!(tcp_connects(peer, at("10.9.0.1", 8080)), "TCP 8080 allowed");
    assert!(
        !tcp_connects(peer, at("10.9.0.1", 8081)),
        "TCP 8081 refused"
    );
    assert!(
        !udp_echoes(peer, at("10.9.0.1", 8080)),
        "UDP over IPv4 refused"
    );
    assert!(
        !tcp_connects(peer, at("fd09::1", 8080)),
        "TCP over IPv6 refused"
    );
    // Over IPv6 the peer must first resolve the pod by neighbour discovery,
    // through the isolated interface.
    assert!(
        udp_echoes(peer, at("fd09::1", 8081)),
        "UDP in the range, IPv6"
    );
    // The pod's own connections out are answered: established.
    let _peer_side = Listener::new(peer, 9000).unwrap();
    assert!(
        tcp_connects(pod, at("10.9.0.2", 9000)),
        "replies to the pod pass"
    );

    // A rewrite is whole: what the new table does not allow is refused.
    t.nft.replace(&ingress_table(vec![])).unwrap();
    assert_eq!(t.nft.rule_count("plexus-test").unwrap(), 4);
    assert!(
        !tcp_connects(peer, at("10.9.0.1", 8080)),
        "nothing allowed now"
    );

    t.nft.delete("plexus-test").unwrap();
    t.nft.delete("plexus-test").unwrap(); // idempotent
    assert_eq!(t.nft.rule_count("plexus-test").unwrap(), 0);
    assert!(tcp_connects(peer, at("10.9.0.1", 8081)), "open again");
}

#[test]
fn prefixes_not_on_a_byte_boundary_are_masked() {
    let Some(t) = pair() else { return };
    let _l = Listener::new(t.pod.ns.path(), 7000).unwrap();
    let allow = |net: &str| {
        ingress_table(vec![rule(
            vec![Match::Source(net.parse().unwrap())],
            Verdict::Accept,
        )])
    };
    // 10.9.0.2 is in 10.9.0.0/30 and not in 10.9.0.4/30.
    t.nft.replace(&allow("10.9.0.0/30")).unwrap();
    assert!(first_connects(t.peer.ns.path(), at("10.9.0.1", 7000)));
    t.nft.replace(&allow("10.9.0.4/30")).unwrap();
    assert!(!tcp_connects(t.peer.ns.path(), at("10.9.0.1", 7000)));
}

#[test]
fn an_egress_chain_on_output_and_a_kernel_refusal_leaves_the_old_table() {
    let Some(t) = pair() else { return };
    let _l = Listener::new(t.peer.ns.path(), 7100).unwrap();
    let egress = |allowed: u16| Table {
        name: "plexus-test".into(),
        chains: vec![Chain {
            name: "output".into(),
            hook: Some(Hook::Output),
            rules: vec![
                rule(
                    vec![
                        Match::OutInterface(ifname("net1")),
                        Match::Protocol(IPPROTO_TCP),
                        Match::DestinationPorts(allowed, allowed),
                    ],
                    Verdict::Accept,
                ),
                rule(vec![Match::OutInterface(ifname("net1"))], Verdict::Drop),
            ],
        }],
    };
    t.nft.replace(&egress(7101)).unwrap();
    assert!(!tcp_connects(t.pod.ns.path(), at("10.9.0.2", 7100)));
    // A jump to a chain that does not exist fails the batch, which then
    // applies none of it: the old table stays.
    let mut broken = egress(7100);
    broken.chains[0]
        .rules
        .insert(0, rule(vec![], Verdict::Jump("nowhere".into())));
    let e = t.nft.replace(&broken).unwrap_err();
    assert!(e.to_string().contains("plexus-test"), "{e}");
    assert_eq!(t.nft.rule_count("plexus-test").unwrap(), 2);
    assert!(!tcp_connects(t.pod.ns.path(), at("10.9.0.2", 7100)));
    t.nft.replace(&egress(7100)).unwrap();
    assert!(first_connects(t.pod.ns.path(), at("10.9.0.2", 7100)));
}
