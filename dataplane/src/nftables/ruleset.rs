//! A firewall table as plexus writes it: chains of rules, each rule a few
//! matches and a verdict, encoded as nf_tables expressions
//! (netlink-packet-netfilter's types; `ct` and `range`, which it has no
//! type for, as raw attributes).
//!
//! The model is deliberately small, what MultiNetworkPolicy needs: the
//! interface a packet came in or leaves by, its conntrack state, its
//! family, a source or destination prefix, its layer-4 protocol and a
//! destination port range or ICMPv6 type range.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netlink_packet_netfilter::nftables::{
    Bitwise, Cmp, DataAttribute, ExpressionAttribute, Expressions, Immediate, ListAttribute, Meta,
    MetaKey, Operator, Payload, Register, Verdict as NftVerdict, VerdictAttribute,
};
use plexus_cni::names::IfName;
use rtnetlink::packet_core::{DefaultNla, Emitable, NLA_F_NESTED};

/// A table of the `inet` family: both IPv4 and IPv6.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Table {
    pub name: String,
    pub chains: Vec<Chain>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Chain {
    pub name: String,
    /// A base chain's hook; regular chains are only jumped to.
    pub hook: Option<Hook>,
    pub rules: Vec<Rule>,
}

/// Where a base chain hangs. Its policy is accept: what it does not drop
/// passes, so a table of plexus's never blocks what it does not name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hook {
    /// Packets for a local socket (`input`).
    Input,
    /// Packets from a local socket (`output`).
    Output,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    /// All must match.
    pub matches: Vec<Match>,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Match {
    /// `iifname`.
    InInterface(IfName),
    /// `oifname`.
    OutInterface(IfName),
    /// `ct state established,related`.
    EstablishedOrRelated,
    /// `ip saddr` / `ip6 saddr` within the prefix (its family implied).
    Source(IpNetwork),
    /// `ip daddr` / `ip6 daddr` within the prefix.
    Destination(IpNetwork),
    /// `meta l4proto`, an IP protocol number.
    Protocol(u8),
    /// `th dport` from..=to; only after a [`Match::Protocol`] of TCP, UDP
    /// or SCTP, whose destination port is the header's bytes 2-3.
    DestinationPorts(u16, u16),
    /// `icmpv6 type` from..=to (implies ICMPv6).
    Icmpv6Types(u8, u8),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Verdict {
    Accept,
    Drop,
    /// Back to the chain that jumped here.
    Return,
    /// To a regular chain, coming back when it ends without a verdict.
    Jump(String),
}

pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;
pub const IPPROTO_SCTP: u8 = 132;
pub const IPPROTO_ICMPV6: u8 = 58;

impl Table {
    pub fn rule_count(&self) -> usize {
        self.chains.iter().map(|c| c.rules.len()).sum()
    }
}

// include/uapi/linux/netfilter.h and nf_tables.h.
const NF_DROP: u32 = 0;
const NF_ACCEPT: u32 = 1;
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
const NFT_CT_STATE: u32 = 0;
const NFTA_CT_DREG: u16 = 1;
const NFTA_CT_KEY: u16 = 2;
const NFTA_RANGE_SREG: u16 = 1;
const NFTA_RANGE_OP: u16 = 2;
const NFTA_RANGE_FROM_DATA: u16 = 3;
const NFTA_RANGE_TO_DATA: u16 = 4;
const NFT_RANGE_EQ: u32 = 0;
const NFTA_DATA_VALUE: u16 = 1;
/// `NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED)`.
const CT_ESTABLISHED_RELATED: u32 = (1 << 1) | (1 << 2);
/// The kernel's IFNAMSIZ: interface names are compared on 16 bytes.
const IFNAMSIZ: usize = 16;

type Expression = ListAttribute<ExpressionAttribute>;

impl Rule {
    /// The rule's nf_tables expressions.
    pub(super) fn expressions(&self) -> Vec<Expression> {
        let mut out = Vec::new();
        for m in &self.matches {
            m.encode(&mut out);
        }
        out.push(self.verdict.encode());
        out
    }
}

impl Match {
    fn encode(&self, out: &mut Vec<Expression>) {
        match self {
            Match::InInterface(name) => interface(out, MetaKey::Iifname, name),
            Match::OutInterface(name) => interface(out, MetaKey::Oifname, name),
            Match::EstablishedOrRelated => {
                // Not among netlink-packet-netfilter's typed expressions.
                let ct = [
                    u32_attribute(NFTA_CT_DREG, Register::Reg1.into()),
                    u32_attribute(NFTA_CT_KEY, NFT_CT_STATE),
                ];
                out.push(untyped("ct", ct.into()));
                // The state is a host-order bit set.
                bitwise(out, CT_ESTABLISHED_RELATED.to_ne_bytes().to_vec());
                compare(out, Operator::NotEqual, vec![0; 4]);
            }
            Match::Source(net) => address(out, *net, true),
            Match::Destination(net) => address(out, *net, false),
            Match::Protocol(p) => {
                meta(out, MetaKey::L4Proto);
                compare(out, Operator::Equal, vec![*p]);
            }
            Match::DestinationPorts(from, to) => {
                payload(out, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2);
                range(out, from.to_be_bytes().to_vec(), to.to_be_bytes().to_vec());
            }
            Match::Icmpv6Types(from, to) => {
                Match::Protocol(IPPROTO_ICMPV6).encode(out);
                payload(out, NFT_PAYLOAD_TRANSPORT_HEADER, 0, 1);
                range(out, vec![*from], vec![*to]);
            }
        }
    }
}

impl Verdict {
    fn encode(&self) -> Expression {
        let verdict = match self {
            Verdict::Accept => vec![VerdictAttribute::Code(NftVerdict::Other(NF_ACCEPT))],
            Verdict::Drop => vec![VerdictAttribute::Code(NftVerdict::Other(NF_DROP))],
            Verdict::Return => vec![VerdictAttribute::Code(NftVerdict::Return)],
            Verdict::Jump(chain) => vec![
                VerdictAttribute::Code(NftVerdict::Jump),
                VerdictAttribute::Chain(chain.clone()),
            ],
        };
        Expressions::Immediate(vec![
            Immediate::DestinationRegister(Register::Verdict),
            Immediate::Data(DataAttribute::Verdict(verdict)),
        ])
        .into()
    }
}

fn meta(out: &mut Vec<Expression>, key: MetaKey) {
    out.push(
        Expressions::Meta(vec![
            Meta::Key(key),
            Meta::DestinationRegister(Register::Reg1),
        ])
        .into(),
    );
}

fn compare(out: &mut Vec<Expression>, op: Operator, value: Vec<u8>) {
    out.push(
        Expressions::Cmp(vec![
            Cmp::SourceRegister(Register::Reg1),
            Cmp::Op(op),
            Cmp::Data(DataAttribute::Value(value)),
        ])
        .into(),
    );
}

fn payload(out: &mut Vec<Expression>, base: u32, offset: u32, len: u32) {
    out.push(
        Expressions::Payload(vec![
            Payload::DestinationRegister(Register::Reg1),
            Payload::Base(base),
            Payload::Offset(offset),
            Payload::Len(len),
        ])
        .into(),
    );
}

/// Register 1 &= `mask` (the xor is zero).
fn bitwise(out: &mut Vec<Expression>, mask: Vec<u8>) {
    let len = mask.len();
    out.push(
        Expressions::Bitwise(vec![
            Bitwise::SourceRegister(Register::Reg1),
            Bitwise::DestinationRegister(Register::Reg1),
            Bitwise::Length(len as u32),
            Bitwise::Mask(DataAttribute::Value(mask)),
            Bitwise::Xor(DataAttribute::Value(vec![0; len])),
        ])
        .into(),
    );
}

/// Register 1 within `from..=to`, compared as big-endian bytes.
fn range(out: &mut Vec<Expression>, from: Vec<u8>, to: Vec<u8>) {
    if from == to {
        return compare(out, Operator::Equal, from);
    }
    let data = |kind: u16, value: Vec<u8>| {
        let inner = [DataAttribute::Value(value)];
        let mut bytes = vec![0; inner.as_slice().buffer_len()];
        inner.as_slice().emit(&mut bytes);
        DefaultNla::new(kind | NLA_F_NESTED, bytes)
    };
    let range = vec![
        u32_attribute(NFTA_RANGE_SREG, Register::Reg1.into()),
        u32_attribute(NFTA_RANGE_OP, NFT_RANGE_EQ),
        data(NFTA_RANGE_FROM_DATA, from),
        data(NFTA_RANGE_TO_DATA, to),
    ];
    out.push(untyped("range", range));
    debug_assert_eq!(NFTA_DATA_VALUE, 1);
}

/// An expression netlink-packet-netfilter has no type for, from its
/// attributes.
fn untyped(expression_type: &str, attributes: Vec<DefaultNla>) -> Expression {
    Expressions::Other {
        expression_type: expression_type.into(),
        attributes,
    }
    .into()
}

/// A u32 attribute, in network order as nf_tables reads them.
fn u32_attribute(kind: u16, value: u32) -> DefaultNla {
    DefaultNla::new(kind, value.to_be_bytes().to_vec())
}

fn interface(out: &mut Vec<Expression>, key: MetaKey, name: &str) {
    meta(out, key);
    let mut padded = name.as_bytes().to_vec();
    padded.resize(IFNAMSIZ, 0);
    compare(out, Operator::Equal, padded);
}

/// The family check (payload offsets differ), then the masked address.
fn address(out: &mut Vec<Expression>, net: IpNetwork, source: bool) {
    let (family, offset, bytes) = match net.network() {
        IpAddr::V4(a) => (
            NFPROTO_IPV4,
            if source { 12 } else { 16 },
            a.octets().to_vec(),
        ),
        IpAddr::V6(a) => (
            NFPROTO_IPV6,
            if source { 8 } else { 24 },
            a.octets().to_vec(),
        ),
    };
    meta(out, MetaKey::Nfproto);
    compare(out, Operator::Equal, vec![family]);
    let prefix = usize::from(net.prefix());
    if prefix == 0 {
        return;
    }
    // Only the bytes the prefix covers are loaded; a partial last byte is
    // masked.
    let len = prefix.div_ceil(8);
    payload(out, NFT_PAYLOAD_NETWORK_HEADER, offset, len as u32);
    if prefix % 8 != 0 {
        let mut mask = vec![0xff; len];
        mask[len - 1] = 0xff << (8 - prefix % 8);
        bitwise(out, mask);
    }
    compare(out, Operator::Equal, bytes[..len].to_vec());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(rule: &Rule) -> Vec<String> {
        rule.expressions()
            .iter()
            .map(|e| match e {
                ListAttribute::Element(attrs) => attrs
                    .iter()
                    .find_map(|a| match a {
                        ExpressionAttribute::Name(n) => Some(n.clone()),
                        _ => None,
                    })
                    .unwrap_or_default(),
                _ => String::new(),
            })
            .collect()
    }

    #[test]
    fn a_byte_aligned_prefix_loads_only_its_bytes_and_an_odd_one_is_masked() {
        let rule = |net: &str| Rule {
            matches: vec![Match::Source(net.parse().unwrap())],
            verdict: Verdict::Accept,
        };
        assert_eq!(
            names(&rule("10.1.0.0/16")),
            ["meta", "cmp", "payload", "cmp", "immediate"]
        );
        assert_eq!(
            names(&rule("10.1.0.0/20")),
            ["meta", "cmp", "payload", "bitwise", "cmp", "immediate"]
        );
        assert_eq!(names(&rule("::/0")), ["meta", "cmp", "immediate"]);
    }

    #[test]
    fn a_single_port_is_a_compare_and_a_range_a_range() {
        let rule = |from, to| Rule {
            matches: vec![
                Match::Protocol(IPPROTO_TCP),
                Match::DestinationPorts(from, to),
            ],
            verdict: Verdict::Accept,
        };
        assert_eq!(
            names(&rule(80, 80)),
            ["meta", "cmp", "payload", "cmp", "immediate"]
        );
        assert_eq!(
            names(&rule(80, 90)),
            ["meta", "cmp", "payload", "range", "immediate"]
        );
    }
}
