//! nftables tables written over netlink (NETLINK_NETFILTER), from Rust, in
//! one namespace: no `nft` binary, no libnftnl.
//!
//! The messages are rust-netlink's `netlink-packet-netfilter` types, the
//! same family as the rtnetlink crates the rest of the data plane speaks,
//! MIT-licensed and pure Rust (rustables is GPL-3.0, nftnl-rs needs the C
//! libnftnl). Its two missing expressions (`ct`, `range`) are encoded as
//! raw attributes in [`ruleset`].
//!
//! A table is written whole, in one nfnetlink batch the kernel applies
//! atomically: create it if absent, delete it (with everything in it),
//! create it again with its chains and rules. So a rewrite never leaves a
//! moment without rules, and a failed one leaves the old table as it was.

pub mod ruleset;

use std::fmt::Display;

use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, GenMessage, Hook as NftHook, HookNumber, InetHookNumber,
    NfTablesMessage, RuleAttribute, RuleMessage, TableAttribute, TableMessage,
};
use netlink_packet_netfilter::none::ControlMessage;
use netlink_packet_netfilter::{NetfilterHeader, NetfilterMessage, NetfilterProtoFamily};
use rtnetlink::packet_core::{
    NetlinkMessage, NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_DUMP, NLM_F_REQUEST,
};
use rtnetlink::sys::protocols::NETLINK_NETFILTER;

use crate::error::Result;
use crate::netlink::socket::NetlinkSocket;
use crate::netns::NetNs;
pub use ruleset::{Chain, Hook, Match, Rule, Table, Verdict};

/// `res_id` of a batch's begin and end: the subsystem it is for.
const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// A filter chain's priority: `filter`, as `nft` names 0.
const FILTER_PRIORITY: u32 = 0;
/// A base chain's policy.
const NF_ACCEPT: u32 = 1;

/// An nf_tables handle bound to one network namespace.
pub struct Nftables {
    socket: NetlinkSocket,
    label: String,
}

impl std::fmt::Debug for Nftables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nftables")
            .field("netns", &self.label)
            .finish()
    }
}

impl Nftables {
    /// Opens a handle whose socket lives in `ns` (see [`crate::netlink`]
    /// for why it is created there and then used from here).
    pub fn open(ns: &NetNs) -> Result<Nftables> {
        let label = ns.path().display().to_string();
        let socket = ns.run(|| NetlinkSocket::open(NETLINK_NETFILTER, &label))??;
        Ok(Nftables { socket, label })
    }

    /// Makes the `inet` table `table.name` hold exactly `table`, atomically.
    pub fn replace(&self, table: &Table) -> Result<()> {
        let mut batch = self.drop_messages(&table.name);
        batch.push(new(
            NfTablesMessage::NewTable(TableMessage {
                attributes: vec![TableAttribute::Name(table.name.clone())],
            }),
            NLM_F_CREATE,
        ));
        for chain in &table.chains {
            let mut attributes = vec![
                ChainAttribute::Table(table.name.clone()),
                ChainAttribute::Name(chain.name.clone()),
            ];
            if let Some(hook) = chain.hook {
                let number = match hook {
                    Hook::Input => InetHookNumber::LocalIn,
                    Hook::Output => InetHookNumber::LocalOut,
                };
                attributes.extend([
                    ChainAttribute::Type("filter".into()),
                    ChainAttribute::Hook(vec![
                        NftHook::Number(HookNumber::Inet(number)),
                        NftHook::Priority(FILTER_PRIORITY),
                    ]),
                    ChainAttribute::Policy(NF_ACCEPT),
                ]);
            }
            batch.push(new(
                NfTablesMessage::NewChain(ChainMessage { attributes }),
                NLM_F_CREATE,
            ));
        }
        for chain in &table.chains {
            for rule in &chain.rules {
                batch.push(new(
                    NfTablesMessage::NewRule(RuleMessage {
                        attributes: vec![
                            RuleAttribute::Table(table.name.clone()),
                            RuleAttribute::Chain(chain.name.clone()),
                            RuleAttribute::Expressions(rule.expressions()),
                        ],
                    }),
                    NLM_F_CREATE | NLM_F_APPEND,
                ));
            }
        }
        self.commit(batch, "write nftables table", &table.name)
    }

    /// Removes the `inet` table `name` and everything in it; nothing to do
    /// when it is absent.
    pub fn delete(&self, name: &str) -> Result<()> {
        let batch = self.drop_messages(name);
        self.commit(batch, "delete nftables table", &name)
    }

    /// How many rules the `inet` table `name` holds (0 when it is absent).
    pub fn rule_count(&self, name: &str) -> Result<usize> {
        let mut msg = new(
            NfTablesMessage::GetRule(RuleMessage {
                attributes: vec![RuleAttribute::Table(name.to_string())],
            }),
            0,
        );
        msg.header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        match self.socket.exchange(msg, "list nftables rules of", &name) {
            Ok(replies) => Ok(replies.len()),
            Err(e) if e.is_not_found() => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Creating the table first makes deleting it succeed when it was
    /// absent, inside the same transaction.
    fn drop_messages(&self, name: &str) -> Vec<NetlinkMessage<NetfilterMessage>> {
        let table = || TableMessage {
            attributes: vec![TableAttribute::Name(name.to_string())],
        };
        vec![
            new(NfTablesMessage::NewTable(table()), NLM_F_CREATE),
            new(NfTablesMessage::DeleteTable(table()), 0),
        ]
    }

    /// Sends `body` between a batch's begin and end, then a get of the
    /// ruleset generation: its answer comes after every NACK of the batch
    /// (see [`NetlinkSocket::exchange_after`]).
    fn commit(
        &self,
        body: Vec<NetlinkMessage<NetfilterMessage>>,
        op: &'static str,
        object: &dyn Display,
    ) -> Result<()> {
        let control = |message| {
            let mut msg = NetlinkMessage::from(NetfilterMessage::new(
                NetfilterHeader::new(NetfilterProtoFamily::Unspec, 0, NFNL_SUBSYS_NFTABLES),
                message,
            ));
            msg.header.flags = NLM_F_REQUEST;
            msg
        };
        let mut batch = Vec::with_capacity(body.len() + 2);
        batch.push(control(ControlMessage::BatchBegin));
        batch.extend(body);
        batch.push(control(ControlMessage::BatchEnd));
        let mut sentinel = new(
            NfTablesMessage::GetGen(GenMessage { attributes: vec![] }),
            0,
        );
        sentinel.header.flags = NLM_F_REQUEST | NLM_F_ACK;
        let object = format!("{object} in {}", self.label);
        self.socket
            .exchange_after(batch, sentinel, op, &object)
            .map(drop)
    }
}

/// An `inet` message of the batch with `flags` besides REQUEST. No ACK is
/// asked: the kernel then answers only a failure.
fn new(message: NfTablesMessage, flags: u16) -> NetlinkMessage<NetfilterMessage> {
    let mut msg = NetlinkMessage::from(NetfilterMessage::new(
        NetfilterHeader::new(NetfilterProtoFamily::Inet, 0, 0),
        message,
    ));
    msg.header.flags = NLM_F_REQUEST | flags;
    msg
}
