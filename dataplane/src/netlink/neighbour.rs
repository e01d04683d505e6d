//! Neighbour (ARP / NDP) entries.

use std::net::IpAddr;

use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState as NlState,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::Netlink;
use crate::error::Result;
use crate::mac::MacAddr;

/// One neighbour-table entry of a link.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Neighbour {
    pub index: u32,
    pub ip: IpAddr,
    /// `None` while resolution is incomplete.
    pub mac: Option<MacAddr>,
    pub state: NeighbourState,
}

/// NUD state of a neighbour entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NeighbourState {
    Incomplete,
    Reachable,
    Stale,
    Delay,
    Probe,
    Failed,
    Noarp,
    Permanent,
    None,
    Other(u16),
}

impl From<NlState> for NeighbourState {
    fn from(s: NlState) -> Self {
        match s {
            NlState::Incomplete => NeighbourState::Incomplete,
            NlState::Reachable => NeighbourState::Reachable,
            NlState::Stale => NeighbourState::Stale,
            NlState::Delay => NeighbourState::Delay,
            NlState::Probe => NeighbourState::Probe,
            NlState::Failed => NeighbourState::Failed,
            NlState::Noarp => NeighbourState::Noarp,
            NlState::Permanent => NeighbourState::Permanent,
            NlState::None => NeighbourState::None,
            other => NeighbourState::Other(u16::from(other)),
        }
    }
}

impl Netlink {
    /// The IPv4 and IPv6 neighbour entries of link `index`.
    pub fn neighbours(&self, index: u32) -> Result<Vec<Neighbour>> {
        self.dump(
            "list neighbours",
            &format_args!("of index {index}"),
            RouteNetlinkMessage::GetNeighbour(NeighbourMessage::default()),
            |r| match r {
                RouteNetlinkMessage::NewNeighbour(m) if m.header.ifindex == index => parse(m),
                _ => None,
            },
        )
    }
}

fn parse(m: &NeighbourMessage) -> Option<Neighbour> {
    let mut ip = None;
    let mut mac = None;
    for attr in &m.attributes {
        match attr {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => {
                ip = Some(IpAddr::from(*v4))
            }
            NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => {
                ip = Some(IpAddr::from(*v6))
            }
            NeighbourAttribute::LinkLayerAddress(b) => mac = MacAddr::from_slice(b),
            _ => {}
        }
    }
    Some(Neighbour {
        index: m.header.ifindex,
        ip: ip?,
        mac,
        state: m.header.state.into(),
    })
}
