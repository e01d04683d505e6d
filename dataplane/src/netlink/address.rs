//! IP addresses on links.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::route::{IpFamily, Scope};
use super::{Netlink, CHANGE, CREATE};
use crate::error::{Errno, Result};

/// An address assigned to a link.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Address {
    pub index: u32,
    /// The address with its prefix length (host bits kept: `10.1.2.3/24`).
    pub addr: IpNetwork,
    pub scope: Scope,
    pub label: Option<String>,
    /// Duplicate address detection is disabled (IPv6).
    pub nodad: bool,
    /// DAD has not completed yet (IPv6).
    pub tentative: bool,
    pub dadfailed: bool,
    /// Configured (not learned by autoconfiguration).
    pub permanent: bool,
    pub secondary: bool,
}

/// Options for [`Netlink::add_address`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddressOptions {
    /// Skip IPv6 duplicate address detection, so the address is usable at
    /// once (ignored for IPv4).
    pub nodad: bool,
}

fn address_message(index: u32, addr: IpNetwork) -> AddressMessage {
    let mut msg = AddressMessage::default();
    msg.header.family = match addr {
        IpNetwork::V4(_) => AddressFamily::Inet,
        IpNetwork::V6(_) => AddressFamily::Inet6,
    };
    msg.header.prefix_len = addr.prefix();
    msg.header.index = index;
    let ip = addr.ip();
    if ip.is_ipv4() {
        // IFA_LOCAL is the interface's own address for IPv4; IFA_ADDRESS
        // the peer (same on broadcast links).
        msg.attributes.push(AddressAttribute::Local(ip));
    }
    msg.attributes.push(AddressAttribute::Address(ip));
    msg
}

impl Netlink {
    /// Adds `addr` (with its prefix) to link `index`. IPv4 addresses get the
    /// subnet's broadcast address, as the reference plugins set it. An
    /// existing identical address fails with EEXIST.
    pub fn add_address(&self, index: u32, addr: IpNetwork, opts: AddressOptions) -> Result<()> {
        let mut msg = address_message(index, addr);
        if let IpNetwork::V4(v4) = addr {
            if v4.prefix() < 31 {
                msg.attributes
                    .push(AddressAttribute::Broadcast(v4.broadcast()));
            }
        }
        let mut flags = AddressFlags::Permanent;
        if opts.nodad && addr.is_ipv6() {
            flags |= AddressFlags::Nodad;
        }
        msg.attributes.push(AddressAttribute::Flags(flags));
        self.request(
            "add address",
            &format_args!("{addr} on index {index}"),
            RouteNetlinkMessage::NewAddress(msg),
            CREATE,
        )
        .map(drop)
        .map_err(|e| self.name_link(e, index))
    }

    /// Removes `addr` from link `index`; `Ok(false)` if it was not there.
    pub fn del_address(&self, index: u32, addr: IpNetwork) -> Result<bool> {
        let msg = address_message(index, addr);
        match self.request(
            "delete address",
            &format_args!("{addr} on index {index}"),
            RouteNetlinkMessage::DelAddress(msg),
            CHANGE,
        ) {
            Ok(_) => Ok(true),
            Err(e) if e.errno() == Some(Errno::EADDRNOTAVAIL) => Ok(false),
            Err(e) if e.errno() == Some(Errno::ENODEV) => Ok(false),
            Err(e) => Err(self.name_link(e, index)),
        }
    }

    /// The addresses of link `index` (both families), in kernel order.
    pub fn addresses(&self, index: u32) -> Result<Vec<Address>> {
        self.addresses_in(index, None)
    }

    /// The addresses of link `index` of one family (`None`: both). The
    /// kernel dumps a namespace's addresses whatever link is asked for, so
    /// naming the family spares the IPv6 link-local address of every other
    /// port on a busy bridge host.
    pub fn addresses_in(&self, index: u32, family: Option<IpFamily>) -> Result<Vec<Address>> {
        let mut msg = AddressMessage::default();
        if let Some(family) = family {
            msg.header.family = family.address_family();
        }
        self.dump(
            "list addresses",
            &format_args!("of index {index}"),
            RouteNetlinkMessage::GetAddress(msg),
            |r| match r {
                RouteNetlinkMessage::NewAddress(m) if m.header.index == index => parse_address(m),
                _ => None,
            },
        )
    }
}

fn parse_address(m: &AddressMessage) -> Option<Address> {
    let mut local = None;
    let mut address = None;
    let mut label = None;
    // IFA_FLAGS (32 bits) supersedes the 8-bit header field when present.
    let mut flags = AddressFlags::from_bits_retain(m.header.flags.bits() as u32);
    for attr in &m.attributes {
        match attr {
            AddressAttribute::Local(ip) => local = Some(*ip),
            AddressAttribute::Address(ip) => address = Some(*ip),
            AddressAttribute::Label(l) => label = Some(l.clone()),
            AddressAttribute::Flags(f) => flags = *f,
            _ => {}
        }
    }
    let ip: IpAddr = local.or(address)?;
    let addr = IpNetwork::new(ip, m.header.prefix_len).ok()?;
    Some(Address {
        index: m.header.index,
        addr,
        scope: Scope::from_raw(u8::from(m.header.scope)),
        label,
        nodad: flags.contains(AddressFlags::Nodad),
        tentative: flags.contains(AddressFlags::Tentative),
        dadfailed: flags.contains(AddressFlags::Dadfailed),
        permanent: flags.contains(AddressFlags::Permanent),
        secondary: flags.contains(AddressFlags::Secondary),
    })
}
