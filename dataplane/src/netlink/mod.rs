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

/// An enum of a link setting named as `ip link` and the CNI plugins name its
/// values, each mapped one to one onto netlink's: the names, parsing (an
/// error names the setting and the names it takes), and the conversions to
/// and from netlink.
macro_rules! netlink_names {
    ($(#[$meta:meta])* pub enum $name:ident ($what:literal) as $($nl:ident)::+ {
        $($(#[$vmeta:meta])* $variant:ident = $text:literal <=> $nl_variant:ident),+ $(,)?
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            pub(super) fn to_nl(self) -> $($nl)::+ {
                use $($nl)::+ as Nl;
                match self {
                    $($name::$variant => Nl::$nl_variant),+
                }
            }

            pub(super) fn from_nl(value: $($nl)::+) -> Option<Self> {
                use $($nl)::+ as Nl;
                match value {
                    $(Nl::$nl_variant => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = crate::error::Error;

            fn from_str(s: &str) -> crate::error::Result<Self> {
                $name::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| {
                        let names: Vec<&str> = $name::ALL.iter().map(|v| v.as_str()).collect();
                        let (last, rest) = names.split_last().expect("an enum has a value");
                        let expected = format!("expected {} or {last}", rest.join(", "));
                        crate::error::Error::invalid($what, s, expected)
                    })
            }
        }
    };
}

mod address;
mod link;
mod link_spec;
mod neighbour;
mod route;
pub(crate) mod socket;
pub use socket::REQUEST_TIMEOUT;
mod tc;
mod vf;

use std::fmt::Display;

use netlink_packet_route::RouteNetlinkMessage;
// Header flags (linux/netlink.h).
use rtnetlink::packet_core::{
    NetlinkMessage, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_ECHO, NLM_F_EXCL, NLM_F_REPLACE,
    NLM_F_REQUEST,
};
use rtnetlink::sys::protocols::NETLINK_ROUTE;

use crate::error::Result;
use crate::netns::NetNs;
use socket::NetlinkSocket;

pub use address::{Address, AddressOptions};
pub use link_spec::{
    BridgeInfo, BridgePortInfo, BridgePortOptions, BridgeSpec, BridgeVlan, IpoibInfo, IpoibSpec,
    IpvlanMode, IpvlanSpec, Link, LinkKind, LinkUpdate, MacvlanMode, MacvlanSpec, Master, VethSpec,
    VlanSpec, VLAN_ID_MAX,
};
pub use neighbour::{Neighbour, NeighbourState};
pub use route::{IpFamily, Route, RouteKind, RouteProtocol, Scope, RT_TABLE_LOCAL, RT_TABLE_MAIN};
pub use tc::{
    handle, handle_to_string, Filter, Mirred, MirredKind, PschedClock, Qdisc, QdiscKind, Tbf,
    ETH_P_ALL, HANDLE_INGRESS, HANDLE_ROOT, INGRESS_QDISC, TIME_UNITS_PER_SEC,
};
pub use vf::{Guid, VfLinkState, VfSettings, VfState, VfVlan, VlanProto};

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
