//! Typed rtnetlink operations on one network namespace.
//!
//! A [`Netlink`] owns one NETLINK_ROUTE socket. A netlink socket belongs to
//! the namespace it was *created* in, for its whole life, whichever thread
//! later uses it. So [`Netlink::open`] creates the socket on a short-lived
//! thread inside the target namespace ([`NetNs::run`]) and from then on every
//! request is sent from the caller's own thread, which never changes
//! namespace. A plugin invocation holds two handles, one on the host namespace
//! and one on the pod's, opened once by its [`crate::Session`].
//!
//! The socket is driven by rtnetlink on a tokio current-thread runtime, the
//! handle's own or one shared by a session's handles; the public API is blocking because callers are short-lived
//! CLI processes with nothing else to do meanwhile. Each request is bounded by
//! [`REQUEST_TIMEOUT`].
//!
//! Operations that create objects fail with EEXIST when the object exists;
//! operations that delete objects return `Ok(false)` when it was already
//! absent, so teardown is idempotent. Lookups return `Ok(None)` for absent
//! objects. Everything else is an [`Error`] naming the operation, the object
//! and the kernel's errno (plus its extended-ACK message when it sent one).

mod address;
mod link;
mod neighbour;
mod route;
mod tc;
mod vf;

use std::fmt::Display;
use std::time::Duration;

use futures::StreamExt;
use netlink_packet_route::RouteNetlinkMessage;
use rtnetlink::packet_core::{NetlinkMessage, NetlinkPayload};
use rtnetlink::sys::AsyncSocket;

use crate::error::{Errno, Error, Result};
use crate::netns::NetNs;

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

// Netlink header flags (linux/netlink.h).
const NLM_F_REQUEST: u16 = 0x01;
const NLM_F_ACK: u16 = 0x04;
const NLM_F_ROOT: u16 = 0x100;
const NLM_F_MATCH: u16 = 0x200;
const NLM_F_DUMP: u16 = NLM_F_ROOT | NLM_F_MATCH;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
// Flags of an NLMSG_ERROR message.
const NLM_F_CAPPED: u16 = 0x100;
const NLM_F_ACK_TLVS: u16 = 0x200;
const NLMSGERR_ATTR_MSG: u16 = 1;

/// Flags of a request that changes something and wants the verdict.
const CHANGE: u16 = NLM_F_REQUEST | NLM_F_ACK;
/// Flags of a request that creates an object that must not exist yet.
const CREATE: u16 = CHANGE | NLM_F_CREATE | NLM_F_EXCL;
const DUMP: u16 = NLM_F_REQUEST | NLM_F_DUMP;

/// The tokio runtime that drives netlink sockets: a current-thread one,
/// driven only while a request waits. Handles of one [`crate::Session`]
/// share one.
pub type Runtime = std::sync::Arc<tokio::runtime::Runtime>;

/// A netlink (rtnetlink) handle bound to one network namespace.
pub struct Netlink {
    // Field order matters: the handle (request sender) is dropped before the
    // runtime that owns the connection task.
    handle: rtnetlink::Handle,
    rt: Runtime,
}

impl std::fmt::Debug for Netlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Netlink").finish_non_exhaustive()
    }
}

type Connection = rtnetlink::proto::Connection<RouteNetlinkMessage>;

impl Netlink {
    /// Opens a handle whose socket lives in `ns`. The socket is created on a
    /// short-lived thread inside `ns`; the calling thread stays where it is.
    pub fn open(ns: &NetNs) -> Result<Self> {
        Netlink::open_on(ns, &runtime(ns.path().display())?)
    }

    /// [`Netlink::open`] on a shared runtime.
    pub fn open_on(ns: &NetNs, rt: &Runtime) -> Result<Self> {
        // tokio registers the socket with the runtime's reactor when it is
        // created, so the namespace thread enters the runtime's context first.
        let (conn, handle) = ns.run(|| {
            let _ctx = rt.enter();
            connect(ns.path().display())
        })??;
        rt.spawn(conn);
        Ok(Netlink {
            handle,
            rt: rt.clone(),
        })
    }

    /// Opens a handle on the calling thread's own namespace (no extra thread).
    pub fn current() -> Result<Self> {
        Netlink::current_on(&runtime("current namespace")?)
    }

    /// [`Netlink::current`] on a shared runtime.
    pub fn current_on(rt: &Runtime) -> Result<Self> {
        let (conn, handle) = {
            let _ctx = rt.enter();
            connect("current namespace")?
        };
        rt.spawn(conn);
        Ok(Netlink {
            handle,
            rt: rt.clone(),
        })
    }

    /// Sends one request and collects the messages of the reply (the answer
    /// of a get, the entries of a dump). A NACK becomes [`Error::Kernel`] naming `op` and
    /// `object`.
    fn request(
        &self,
        op: &'static str,
        object: &dyn Display,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        let mut req = NetlinkMessage::from(msg);
        req.header.flags = flags;
        let proto = |reason: String| Error::Netlink {
            op,
            object: object.to_string(),
            reason,
        };
        let mut handle = self.handle.clone();
        let mut replies = handle
            .request(req)
            .map_err(|e| proto(format!("netlink connection closed: {e}")))?;
        let exchange = async {
            let mut out = Vec::new();
            while let Some(reply) = replies.next().await {
                match reply.payload {
                    NetlinkPayload::InnerMessage(m) => out.push(m),
                    NetlinkPayload::Error(e) => {
                        if let Some(code) = e.code {
                            return Err(Error::Kernel {
                                op,
                                object: object.to_string(),
                                errno: Errno::from_raw(-code.get()),
                                message: extack_message(reply.header.flags, &e.header),
                            });
                        }
                    }
                    NetlinkPayload::Overrun(_) => {
                        return Err(proto("netlink receive buffer overrun".into()))
                    }
                    _ => {}
                }
            }
            Ok(out)
        };
        self.rt
            .block_on(async { tokio::time::timeout(REQUEST_TIMEOUT, exchange).await })
            .map_err(|_| proto(format!("no reply within {REQUEST_TIMEOUT:?}")))?
    }
}

/// A runtime for netlink handles; `label` names what it is for in errors.
pub fn runtime(label: impl Display) -> Result<Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map(std::sync::Arc::new)
        .map_err(|e| Error::Netlink {
            op: "start netlink runtime for",
            object: label.to_string(),
            reason: e.to_string(),
        })
}

/// Creates the NETLINK_ROUTE socket, in the calling thread's namespace, with
/// extended ACKs (the kernel explains its errors) and capped ACKs (it does not
/// echo our request back inside every error).
fn connect(label: impl Display) -> Result<(Connection, rtnetlink::Handle)> {
    let fail = |what: &str, e: std::io::Error| Error::Netlink {
        op: "open netlink socket in",
        object: label.to_string(),
        reason: format!("{what}: {e}"),
    };
    let (mut conn, handle, _unsolicited) =
        rtnetlink::new_connection().map_err(|e| fail("socket", e))?;
    let sock = conn.socket_mut().socket_mut();
    sock.set_ext_ack(true)
        .map_err(|e| fail("NETLINK_EXT_ACK", e))?;
    sock.set_cap_ack(true)
        .map_err(|e| fail("NETLINK_CAP_ACK", e))?;
    Ok((conn, handle))
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
