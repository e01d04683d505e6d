//! A pod's [`InterfacePolicy`]s as one nftables table in its namespace.
//!
//! ```text
//! table inet plexus-policy {
//!   chain input  { type filter hook input priority filter; policy accept;
//!                  iifname "net1" jump in-net1 }
//!   chain output { type filter hook output priority filter; policy accept;
//!                  oifname "net1" jump out-net1 }
//!   chain in-net1 {
//!     ct state established,related accept
//!     icmpv6 type 133-137 accept          # neighbour discovery
//!     <one rule per peer x port of each allowance> accept
//!     drop
//!   }
//! }
//! ```
//!
//! Only isolated directions of selected interfaces get a chain; every
//! other packet passes the base chains untouched (policy accept), so
//! interfaces no policy names are left alone. An allowance of several peers
//! and several ports jumps from each peer's rule to a chain of its ports
//! (peers + ports rules, not peers x ports); an ipBlock with `except`s is
//! a chain that returns on each exception first.

use ipnetwork::IpNetwork;
use plexus_dataplane::nftables::ruleset::{IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP};
use plexus_dataplane::nftables::{Chain, Hook, Match, Rule, Table, Verdict};

use super::resolve::{Allow, InterfacePolicy, PeerMatch, Peers, PortMatch, Ports};
use super::spec::Protocol;

/// The table plexus owns in a pod's namespace.
pub const TABLE: &str = "plexus-policy";

/// ICMPv6 router solicitation to redirect: neighbour discovery, which an
/// isolated IPv6 interface still needs to reach anyone.
const ND_TYPES: (u8, u8) = (133, 137);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    In,
    Out,
}

/// The pod's table, or `None` when no direction of any interface is
/// isolated (then the table must not exist).
pub fn table(interfaces: &[InterfacePolicy]) -> Option<Table> {
    let mut input = Vec::new();
    let mut output = Vec::new();
    let mut chains = Vec::new();
    for interface in interfaces {
        // No kernel interface, no rule: the caller reports it.
        let Some(ifname) = &interface.interface else {
            continue;
        };
        for (direction, allowed) in [
            (Direction::In, &interface.ingress),
            (Direction::Out, &interface.egress),
        ] {
            let Some(allowed) = allowed else { continue };
            let name = match direction {
                Direction::In => format!("in-{ifname}"),
                Direction::Out => format!("out-{ifname}"),
            };
            let (hook_rules, on) = match direction {
                Direction::In => (&mut input, Match::InInterface(ifname.clone())),
                Direction::Out => (&mut output, Match::OutInterface(ifname.clone())),
            };
            hook_rules.push(rule(vec![on], Verdict::Jump(name.clone())));
            let mut builder = ChainBuilder {
                base: name,
                direction,
                extra: Vec::new(),
            };
            let mut rules = vec![
                rule(vec![Match::EstablishedOrRelated], Verdict::Accept),
                rule(
                    vec![Match::Icmpv6Types(ND_TYPES.0, ND_TYPES.1)],
                    Verdict::Accept,
                ),
            ];
            for allow in allowed {
                rules.extend(builder.allowance(allow));
            }
            rules.push(rule(vec![], Verdict::Drop));
            chains.push(Chain {
                name: builder.base.clone(),
                hook: None,
                rules,
            });
            chains.extend(builder.extra);
        }
    }
    if chains.is_empty() {
        return None;
    }
    let mut all = Vec::new();
    for (name, hook, rules) in [
        ("input", Hook::Input, input),
        ("output", Hook::Output, output),
    ] {
        if !rules.is_empty() {
            all.push(Chain {
                name: name.into(),
                hook: Some(hook),
                rules,
            });
        }
    }
    all.extend(chains);
    Some(Table {
        name: TABLE.into(),
        chains: all,
    })
}

/// One interface direction's chain and the helper chains it jumps to.
struct ChainBuilder {
    base: String,
    direction: Direction,
    extra: Vec<Chain>,
}

impl ChainBuilder {
    /// The rules of the interface chain that accept what `allow` allows.
    fn allowance(&mut self, allow: &Allow) -> Vec<Rule> {
        let ports: Vec<Vec<Match>> = match &allow.ports {
            Ports::Any => vec![Vec::new()],
            Ports::Only(list) => list.iter().map(port_matches).collect(),
        };
        let peers: Vec<&PeerMatch> = match &allow.peers {
            Peers::Any => {
                return ports
                    .into_iter()
                    .map(|m| rule(m, Verdict::Accept))
                    .collect()
            }
            Peers::Only(list) => list.iter().collect(),
        };
        if ports.is_empty() || peers.is_empty() {
            return Vec::new();
        }
        // What follows a matched peer: the port rules themselves when
        // there is one, else a jump to a chain of them.
        let then: Vec<Rule> = if ports.len() == 1 {
            vec![rule(ports[0].clone(), Verdict::Accept)]
        } else {
            let name = self.helper_name();
            let rules = ports
                .into_iter()
                .map(|m| rule(m, Verdict::Accept))
                .collect();
            self.extra.push(Chain {
                name: name.clone(),
                hook: None,
                rules,
            });
            vec![rule(vec![], Verdict::Jump(name))]
        };
        let mut out = Vec::new();
        for peer in peers {
            match peer {
                PeerMatch::Host(ip) => {
                    out.extend(self.guarded(IpNetwork::from(*ip), &then));
                }
                PeerMatch::Block { cidr, except } if except.is_empty() => {
                    out.extend(self.guarded(*cidr, &then));
                }
                PeerMatch::Block { cidr, except } => {
                    let name = self.helper_name();
                    let mut rules: Vec<Rule> = except
                        .iter()
                        .map(|e| rule(vec![self.peer(*e)], Verdict::Return))
                        .collect();
                    rules.extend(then.iter().cloned());
                    self.extra.push(Chain {
                        name: name.clone(),
                        hook: None,
                        rules,
                    });
                    out.push(rule(vec![self.peer(*cidr)], Verdict::Jump(name)));
                }
            }
        }
        out
    }

    /// `then`, each rule first matching the peer `net`.
    fn guarded(&self, net: IpNetwork, then: &[Rule]) -> Vec<Rule> {
        then.iter()
            .map(|r| {
                let mut matches = vec![self.peer(net)];
                matches.extend(r.matches.iter().cloned());
                rule(matches, r.verdict.clone())
            })
            .collect()
    }

    /// The peer's address: the source of what comes in, the destination
    /// of what goes out.
    fn peer(&self, net: IpNetwork) -> Match {
        match self.direction {
            Direction::In => Match::Source(net),
            Direction::Out => Match::Destination(net),
        }
    }

    fn helper_name(&self) -> String {
        format!("{}-{}", self.base, self.extra.len())
    }
}

fn port_matches(port: &PortMatch) -> Vec<Match> {
    let protocol = match port.protocol {
        Protocol::Tcp => IPPROTO_TCP,
        Protocol::Udp => IPPROTO_UDP,
        Protocol::Sctp => IPPROTO_SCTP,
    };
    let mut matches = vec![Match::Protocol(protocol)];
    if let Some((from, to)) = port.range {
        matches.push(Match::DestinationPorts(from, to));
    }
    matches
}

fn rule(matches: Vec<Match>, verdict: Verdict) -> Rule {
    Rule { matches, verdict }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(ingress: Option<Vec<Allow>>, egress: Option<Vec<Allow>>) -> InterfacePolicy {
        InterfacePolicy {
            interface: Some("net1".parse().unwrap()),
            network: "ns1/blue".into(),
            policies: vec!["ns1/p".into()],
            ingress,
            egress,
        }
    }

    fn host(ip: &str) -> PeerMatch {
        PeerMatch::Host(ip.parse().unwrap())
    }

    fn tcp(port: u16) -> PortMatch {
        PortMatch {
            protocol: Protocol::Tcp,
            range: Some((port, port)),
        }
    }

    fn chain<'t>(t: &'t Table, name: &str) -> &'t Chain {
        t.chains.iter().find(|c| c.name == name).unwrap()
    }

    #[test]
    fn nothing_isolated_is_no_table() {
        assert_eq!(table(&[]), None);
        assert_eq!(table(&[policy(None, None)]), None);
    }

    #[test]
    fn an_isolated_direction_with_nothing_allowed_drops_all_but_replies_and_nd() {
        let t = table(&[policy(Some(vec![]), None)]).unwrap();
        assert_eq!(t.chains.len(), 2, "input and in-net1 only: {t:?}");
        let c = chain(&t, "in-net1");
        assert_eq!(c.rules.len(), 3);
        assert_eq!(c.rules[0].matches, [Match::EstablishedOrRelated]);
        assert_eq!(c.rules[1].matches, [Match::Icmpv6Types(133, 137)]);
        assert_eq!(c.rules[2].verdict, Verdict::Drop);
        assert_eq!(
            chain(&t, "input").rules,
            [rule(
                vec![Match::InInterface("net1".parse().unwrap())],
                Verdict::Jump("in-net1".into())
            )]
        );
    }

    #[test]
    fn peers_times_ports_becomes_peers_plus_ports() {
        let allow = Allow {
            peers: Peers::Only(vec![host("10.0.0.2"), host("10.0.0.3"), host("fd00::2")]),
            ports: Ports::Only(vec![tcp(80), tcp(443)]),
        };
        let t = table(&[policy(None, Some(vec![allow]))]).unwrap();
        let c = chain(&t, "out-net1");
        // replies, ND, three peers, drop.
        assert_eq!(c.rules.len(), 6);
        assert_eq!(
            c.rules[2],
            rule(
                vec![Match::Destination("10.0.0.2/32".parse().unwrap())],
                Verdict::Jump("out-net1-0".into())
            )
        );
        assert_eq!(chain(&t, "out-net1-0").rules.len(), 2);
        assert_eq!(t.rule_count(), 1 + 6 + 2);
    }

    #[test]
    fn a_block_with_exceptions_returns_on_them_first() {
        let allow = Allow {
            peers: Peers::Only(vec![PeerMatch::Block {
                cidr: "10.0.0.0/16".parse().unwrap(),
                except: vec!["10.0.5.0/24".parse().unwrap()],
            }]),
            ports: Ports::Only(vec![tcp(80)]),
        };
        let t = table(&[policy(Some(vec![allow]), None)]).unwrap();
        let helper = chain(&t, "in-net1-0");
        assert_eq!(
            helper.rules,
            [
                rule(
                    vec![Match::Source("10.0.5.0/24".parse().unwrap())],
                    Verdict::Return
                ),
                rule(
                    vec![
                        Match::Protocol(IPPROTO_TCP),
                        Match::DestinationPorts(80, 80)
                    ],
                    Verdict::Accept
                ),
            ]
        );
    }

    #[test]
    fn no_peers_or_no_ports_allows_nothing_and_any_any_accepts_all() {
        let none = Allow {
            peers: Peers::Only(vec![]),
            ports: Ports::Any,
        };
        let all = Allow {
            peers: Peers::Any,
            ports: Ports::Any,
        };
        let t = table(&[policy(Some(vec![none]), Some(vec![all]))]).unwrap();
        assert_eq!(chain(&t, "in-net1").rules.len(), 3);
        let out = chain(&t, "out-net1");
        assert_eq!(out.rules[2], rule(vec![], Verdict::Accept));
    }
}
