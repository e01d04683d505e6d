//! Typed rtnetlink operations on one network namespace.
//!
//! A [`Netlink`] owns one NETLINK_ROUTE socket. A netlink socket belongs to
//! the namespace it was *created* in, for its whole life, whichever thread
//! later uses it. So [`Netlink::open`] creates the socket during a visit of
//! the calling thread to the target namespace ([`NetNs::run`]) and from then
//! on every request is sent from wherever the thread is, the node's
//! namespace. A plugin invocation holds two handles, one on the host namespace
//! and one on the pod's, opened once by its [`crate::Session`].
//!
//! Requests are blocking (`socket`): callers are short-lived CLI processes
//! with nothing else to do meanwhile. Each request is bounded by
//! [`REQUEST_TIMEOUT`].
//!
//! Operations that create objects fail with EEXIST when the object exists;
//! operations that delete objects return `Ok(false)` when it was already
//! absent, so teardown is idempotent. Lookups return `Ok(None)` for absent
//! objects. Everything else is an [`Error`](crate::Error) naming the operation, the object
//! and the kernel's errno (plus its extended-ACK message when it sent one).

mod address;
mod link;
mod neighbour;
mod route;
pub(crate) mod socket;
mod tc;
mod vf;

use std::fmt::Display;
use std::time::Duration;

use netlink_packet_route::RouteNetlinkMessage;
// Header flags (linux/netlink.h); NLM_F_CAPPED and NLM_F_ACK_TLVS are those
// of an NLMSG_ERROR message.
use rtnetlink::packet_core::{
    NetlinkMessage, NLM_F_ACK, NLM_F_ACK_TLVS, NLM_F_CAPPED, NLM_F_CREATE, NLM_F_DUMP, NLM_F_ECHO,
    NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST,
};
use rtnetlink::sys::protocols::NETLINK_ROUTE;

use crate::error::Result;
use crate::netns::NetNs;
use socket::NetlinkSocket;

pub use address::{Address, AddressOptions};
pub use link::{
    validate_ifname, BridgeInfo, BridgePortInfo, BridgePortOptions, BridgeSpec, BridgeVlan,
    IpoibInfo, IpoibSpec, IpvlanMode, IpvlanSpec, Link, LinkKind, LinkUpdate, MacvlanMode,
    MacvlanSpec, Master, VethSpec,
};
pub use neighbour::{Neighbour, NeighbourState};
pub use route::{IpFamily, Route, RouteKind, RouteProtocol, Scope, RT_TABLE_LOCAL, RT_TABLE_MAIN};
pub use tc::{
    handle, handle_to_string, Filter, Mirred, MirredKind, PschedClock, Qdisc, QdiscKind, Tbf,
    ETH_P_ALL, HANDLE_INGRESS, HANDLE_ROOT, INGRESS_QDISC, TIME_UNITS_PER_SEC,
};
pub use vf::{Guid, VfLinkState, VfSettings, VfState, VfVlan, VlanProto};

/// Upper bound on one request/response exchange with the kernel. Generous:
/// deleting a link waits for an RCU grace period, which can take tens of
/// milliseconds on a busy node.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The extended-ACK attribute that carries the kernel's message
/// (linux/netlink.h).
const NLMSGERR_ATTR_MSG: u16 = 1;

/// Flags of a request that changes something and wants the verdict.
const CHANGE: u16 = NLM_F_REQUEST | NLM_F_ACK;
/// Flags of a request that creates an object that must not exist yet.
const CREATE: u16 = CHANGE | NLM_F_CREATE | NLM_F_EXCL;
const DUMP: u16 = NLM_F_REQUEST | NLM_F_DUMP;

/// A netlink (rtnetlink) handle bound to one network namespace.
pub struct Netlink {
    socket: NetlinkSocket,
}

impl std::fmt::Debug for Netlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Netlink").finish_non_exhaustive()
    }
}

impl Netlink {
    /// Opens a handle whose socket lives in `ns`: created while the calling
    /// thread visits `ns`, then used from where the thread returns to.
    pub fn open(ns: &NetNs) -> Result<Self> {
        let socket = ns.run(|| NetlinkSocket::open(NETLINK_ROUTE, ns.path().display()))??;
        Ok(Netlink { socket })
    }

    /// Opens a handle on the calling thread's own namespace.
    pub fn current() -> Result<Self> {
        Ok(Netlink {
            socket: NetlinkSocket::open(NETLINK_ROUTE, "current namespace")?,
        })
    }

    /// Sends one request and collects the messages of the reply (the answer
    /// of a get, the entries of a dump). A NACK becomes [`Error::Kernel`]
    /// naming `op` and `object`.
    fn request(
        &self,
        op: &'static str,
        object: &dyn Display,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        let mut req = NetlinkMessage::from(msg);
        req.header.flags = flags;
        self.socket.exchange(req, op, object)
    }

    /// Sends one dump request and keeps what `pick` takes of its entries.
    fn dump<T>(
        &self,
        op: &'static str,
        object: &dyn Display,
        msg: RouteNetlinkMessage,
        pick: impl FnMut(&RouteNetlinkMessage) -> Option<T>,
    ) -> Result<Vec<T>> {
        Ok(self
            .request(op, object, msg, DUMP)?
            .iter()
            .filter_map(pick)
            .collect())
    }
}

/// The kernel's extended-ACK text (NLMSGERR_ATTR_MSG) from the payload of an
/// NLMSG_ERROR that follows the error code: the original request's header
/// (whole request unless capped), then attributes.
fn extack_message(flags: u16, payload: &[u8]) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 || payload.len() < 16 {
        return None;
    }
    let mut off = if flags & NLM_F_CAPPED != 0 {
        16
    } else {
        let len = u32::from_ne_bytes(payload[0..4].try_into().ok()?) as usize;
        len.checked_add(3)? & !3
    };
    // Bounded by the payload length: every iteration advances by >= 4.
    while off + 4 <= payload.len() {
        let len = u16::from_ne_bytes([payload[off], payload[off + 1]]) as usize;
        let kind = u16::from_ne_bytes([payload[off + 2], payload[off + 3]]) & 0x3fff;
        if len < 4 || off + len > payload.len() {
            return None;
        }
        if kind == NLMSGERR_ATTR_MSG {
            let value = &payload[off + 4..off + len];
            let text = value.split(|b| *b == 0).next().unwrap_or_default();
            return Some(String::from_utf8_lossy(text).into_owned()).filter(|s| !s.is_empty());
        }
        off += (len + 3) & !3;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let len = 4 + value.len();
        let mut v = Vec::new();
        v.extend_from_slice(&(len as u16).to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(value);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    #[test]
    fn extack_message_from_capped_error() {
        let mut p = vec![0u8; 16];
        p.extend(attr(2, &7u32.to_ne_bytes())); // NLMSGERR_ATTR_OFFS, skipped
        p.extend(attr(1, b"Unknown device type\0"));
        assert_eq!(
            extack_message(NLM_F_CAPPED | NLM_F_ACK_TLVS, &p).as_deref(),
            Some("Unknown device type")
        );
        assert_eq!(extack_message(NLM_F_CAPPED, &p), None, "no TLV flag");
    }

    #[test]
    fn extack_message_from_uncapped_error() {
        let mut p = vec![0u8; 24];
        p[0..4].copy_from_slice(&24u32.to_ne_bytes());
        p.extend(attr(1, b"bad\0"));
        assert_eq!(extack_message(NLM_F_ACK_TLVS, &p).as_deref(), Some("bad"));
    }

    #[test]
    fn extack_message_tolerates_garbage() {
        let mut p = vec![0u8; 16];
        p.extend_from_slice(&[0xff, 0xff, 1, 0]);
        assert_eq!(extack_message(NLM_F_CAPPED | NLM_F_ACK_TLVS, &p), None);
        assert_eq!(extack_message(NLM_F_CAPPED | NLM_F_ACK_TLVS, &[1, 2]), None);
        let mut p = vec![0u8; 16];
        p[0..4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(extack_message(NLM_F_ACK_TLVS, &p), None);
    }
}
