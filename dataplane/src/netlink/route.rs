//! Routes (IPv4 and IPv6, any table).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteMetric};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{Netlink, CHANGE, NLM_F_CREATE, NLM_F_REPLACE};
use crate::error::{Errno, Error, Result};

/// The main routing table (`ip route` default).
pub const RT_TABLE_MAIN: u32 = 254;
/// The local table (addresses of the host itself, broadcast).
pub const RT_TABLE_LOCAL: u32 = 255;

/// IPv4 or IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    pub fn of(ip: &IpAddr) -> IpFamily {
        if ip.is_ipv4() {
            IpFamily::V4
        } else {
            IpFamily::V6
        }
    }

    pub(crate) fn address_family(self) -> AddressFamily {
        match self {
            IpFamily::V4 => AddressFamily::Inet,
            IpFamily::V6 => AddressFamily::Inet6,
        }
    }

    fn unspecified(self) -> IpAddr {
        match self {
            IpFamily::V4 => Ipv4Addr::UNSPECIFIED.into(),
            IpFamily::V6 => Ipv6Addr::UNSPECIFIED.into(),
        }
    }
}

/// Address and route scope (RT_SCOPE_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Scope {
    #[default]
    Universe,
    Site,
    Link,
    Host,
    Nowhere,
    Other(u8),
}

impl Scope {
    pub(crate) fn from_raw(v: u8) -> Scope {
        match v {
            0 => Scope::Universe,
            200 => Scope::Site,
            253 => Scope::Link,
            254 => Scope::Host,
            255 => Scope::Nowhere,
            o => Scope::Other(o),
        }
    }

    pub(crate) fn raw(self) -> u8 {
        match self {
            Scope::Universe => 0,
            Scope::Site => 200,
            Scope::Link => 253,
            Scope::Host => 254,
            Scope::Nowhere => 255,
            Scope::Other(o) => o,
        }
    }
}

/// Route type (RTN_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RouteKind {
    #[default]
    Unicast,
    Local,
    Broadcast,
    Anycast,
    Multicast,
    Blackhole,
    Unreachable,
    Prohibit,
    Throw,
    Other(u8),
}

impl RouteKind {
    fn from_raw(v: u8) -> RouteKind {
        match v {
            1 => RouteKind::Unicast,
            2 => RouteKind::Local,
            3 => RouteKind::Broadcast,
            4 => RouteKind::Anycast,
            5 => RouteKind::Multicast,
            6 => RouteKind::Blackhole,
            7 => RouteKind::Unreachable,
            8 => RouteKind::Prohibit,
            9 => RouteKind::Throw,
            o => RouteKind::Other(o),
        }
    }

    fn raw(self) -> u8 {
        match self {
            RouteKind::Unicast => 1,
            RouteKind::Local => 2,
            RouteKind::Broadcast => 3,
            RouteKind::Anycast => 4,
            RouteKind::Multicast => 5,
            RouteKind::Blackhole => 6,
            RouteKind::Unreachable => 7,
            RouteKind::Prohibit => 8,
            RouteKind::Throw => 9,
            RouteKind::Other(o) => o,
        }
    }
}

/// Who installed a route (RTPROT_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RouteProtocol {
    /// Installed by the kernel (prefix routes of addresses).
    Kernel,
    /// Installed by an administrator or tool; what `ip route add` uses.
    #[default]
    Boot,
    Static,
    Ra,
    Dhcp,
    Other(u8),
}

impl RouteProtocol {
    fn from_raw(v: u8) -> RouteProtocol {
        match v {
            2 => RouteProtocol::Kernel,
            3 => RouteProtocol::Boot,
            4 => RouteProtocol::Static,
            9 => RouteProtocol::Ra,
            16 => RouteProtocol::Dhcp,
            o => RouteProtocol::Other(o),
        }
    }

    fn raw(self) -> u8 {
        match self {
            RouteProtocol::Kernel => 2,
            RouteProtocol::Boot => 3,
            RouteProtocol::Static => 4,
            RouteProtocol::Ra => 9,
            RouteProtocol::Dhcp => 16,
            RouteProtocol::Other(o) => o,
        }
    }
}

/// `setter => field: T`: `fn setter(self, value: T) -> Self` sets the
/// optional `field` to `value`.
macro_rules! chained_setters {
    ($($setter:ident => $field:ident: $ty:ty),* $(,)?) => {
        $(
            pub fn $setter(mut self, value: $ty) -> Self {
                self.$field = Some(value);
                self
            }
        )*
    };
}

/// A route. Build one with [`Route::new`] / [`Route::default_via`] and the
/// chained setters; routes listed from the kernel have every field filled in
/// that the kernel reported.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Route {
    /// Destination; `0.0.0.0/0` or `::/0` for a default route. Host bits are
    /// cleared when the route is sent to the kernel.
    pub dst: IpNetwork,
    pub gateway: Option<IpAddr>,
    /// Output interface index.
    pub oif: Option<u32>,
    /// Preferred source address.
    pub prefsrc: Option<IpAddr>,
    /// Priority (metric). The kernel defaults IPv6 routes to 1024.
    pub metric: Option<u32>,
    pub table: u32,
    /// `None` when adding: link scope for routes without gateway, universe
    /// otherwise (the `ip route` rule; the kernel ignores scope for IPv6).
    pub scope: Option<Scope>,
    pub kind: RouteKind,
    pub protocol: RouteProtocol,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
}

impl Route {
    /// A unicast route to `dst` in the main table.
    pub fn new(dst: IpNetwork) -> Route {
        Route {
            dst,
            gateway: None,
            oif: None,
            prefsrc: None,
            metric: None,
            table: RT_TABLE_MAIN,
            scope: None,
            kind: RouteKind::Unicast,
            protocol: RouteProtocol::Boot,
            mtu: None,
            advmss: None,
        }
    }

    /// A default route (`0.0.0.0/0` or `::/0`, by the gateway's family).
    pub fn default_via(gateway: IpAddr) -> Route {
        Route::new(default_dst(IpFamily::of(&gateway))).via(gateway)
    }

    /// A default route through a device, without gateway.
    pub fn default_dev(family: IpFamily, oif: u32) -> Route {
        Route::new(default_dst(family)).dev(oif)
    }

    chained_setters! {
        via => gateway: IpAddr,
        dev => oif: u32,
        src => prefsrc: IpAddr,
        metric => metric: u32,
        scope => scope: Scope,
        mtu => mtu: u32,
        advmss => advmss: u32,
    }

    pub fn table(mut self, table: u32) -> Route {
        self.table = table;
        self
    }

    pub fn family(&self) -> IpFamily {
        IpFamily::of(&self.dst.ip())
    }

    pub fn is_default(&self) -> bool {
        self.dst.prefix() == 0
    }

    fn check(&self) -> Result<()> {
        let family = self.family();
        for (what, ip) in [
            ("route gateway", self.gateway),
            ("route source", self.prefsrc),
        ] {
            if let Some(ip) = ip {
                if IpFamily::of(&ip) != family {
                    return Err(Error::invalid(
                        what,
                        ip.to_string(),
                        format!("address family differs from destination {}", self.dst),
                    ));
                }
            }
        }
        if self.gateway.is_none() && self.oif.is_none() && self.kind == RouteKind::Unicast {
            return Err(Error::invalid(
                "route",
                self.dst.to_string(),
                "a unicast route needs a gateway or an output device",
            ));
        }
        Ok(())
    }

    /// The scope `ip route add` would choose.
    fn effective_scope(&self) -> Scope {
        self.scope.unwrap_or(match self.kind {
            RouteKind::Local => Scope::Host,
            RouteKind::Broadcast | RouteKind::Multicast | RouteKind::Anycast => Scope::Link,
            RouteKind::Unicast if self.gateway.is_none() => Scope::Link,
            _ => Scope::Universe,
        })
    }

    /// Destination with host bits cleared (the kernel rejects `10.0.0.5/24`).
    fn network(&self) -> IpNetwork {
        IpNetwork::new(self.dst.network(), self.dst.prefix()).unwrap_or(self.dst)
    }

    /// The message identifying this route; `full` adds what only matters when
    /// creating it.
    fn message(&self, full: bool) -> RouteMessage {
        let mut msg = RouteMessage::default();
        let dst = self.network();
        let h = &mut msg.header;
        h.address_family = self.family().address_family();
        h.destination_prefix_length = dst.prefix();
        h.table = u8::try_from(self.table).unwrap_or(0);
        if full {
            h.protocol = self.protocol.raw().into();
            h.scope = self.effective_scope().raw().into();
            h.kind = self.kind.raw().into();
        } else {
            // Deletion matches any protocol, scope and type.
            h.scope = Scope::Nowhere.raw().into();
        }
        let attrs = &mut msg.attributes;
        if dst.prefix() > 0 {
            attrs.push(RouteAttribute::Destination(route_address(dst.ip())));
        }
        attrs.push(RouteAttribute::Table(self.table));
        if let Some(gw) = self.gateway {
            attrs.push(RouteAttribute::Gateway(route_address(gw)));
        }
        if let Some(oif) = self.oif {
            attrs.push(RouteAttribute::Oif(oif));
        }
        if let Some(m) = self.metric {
            attrs.push(RouteAttribute::Priority(m));
        }
        if full {
            if let Some(src) = self.prefsrc {
                attrs.push(RouteAttribute::PrefSource(route_address(src)));
            }
            let mut metrics = Vec::new();
            metrics.extend(self.mtu.map(RouteMetric::Mtu));
            metrics.extend(self.advmss.map(RouteMetric::Advmss));
            if !metrics.is_empty() {
                attrs.push(RouteAttribute::Metrics(metrics));
            }
        }
        msg
    }

    fn describe(&self) -> String {
        let mut s = self.dst.to_string();
        if let Some(gw) = self.gateway {
            s += &format!(" via {gw}");
        }
        if let Some(oif) = self.oif {
            s += &format!(" dev index {oif}");
        }
        if self.table != RT_TABLE_MAIN {
            s += &format!(" table {}", self.table);
        }
        s
    }

    fn from_message(m: &RouteMessage) -> Option<Route> {
        let family = match m.header.address_family {
            AddressFamily::Inet => IpFamily::V4,
            AddressFamily::Inet6 => IpFamily::V6,
            _ => return None,
        };
        let mut route = Route::new(IpNetwork::new(family.unspecified(), 0).ok()?);
        route.table = u32::from(m.header.table);
        route.scope = Some(Scope::from_raw(m.header.scope.into()));
        route.kind = RouteKind::from_raw(m.header.kind.into());
        route.protocol = RouteProtocol::from_raw(m.header.protocol.into());
        for attr in &m.attributes {
            match attr {
                RouteAttribute::Destination(a) => {
                    route.dst =
                        IpNetwork::new(ip_of(a)?, m.header.destination_prefix_length).ok()?
                }
                RouteAttribute::Gateway(a) => route.gateway = ip_of(a),
                RouteAttribute::PrefSource(a) => route.prefsrc = ip_of(a),
                RouteAttribute::Oif(i) => route.oif = Some(*i),
                RouteAttribute::Priority(p) => route.metric = Some(*p),
                RouteAttribute::Table(t) => route.table = *t,
                RouteAttribute::Metrics(ms) => {
                    for metric in ms {
                        match metric {
                            RouteMetric::Mtu(v) => route.mtu = Some(*v),
                            RouteMetric::Advmss(v) => route.advmss = Some(*v),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        Some(route)
    }
}

fn default_dst(family: IpFamily) -> IpNetwork {
    IpNetwork::new(family.unspecified(), 0).expect("prefix 0 is valid")
}

fn route_address(ip: IpAddr) -> RouteAddress {
    match ip {
        IpAddr::V4(v4) => RouteAddress::Inet(v4),
        IpAddr::V6(v6) => RouteAddress::Inet6(v6),
    }
}

fn ip_of(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some((*v4).into()),
        RouteAddress::Inet6(v6) => Some((*v6).into()),
        _ => None,
    }
}

impl Netlink {
    /// Adds `route` beside any route to the same destination, as the
    /// reference plugins' `ipam.ConfigureIface` does (`netlink.RouteAddEcmp`:
    /// `NLM_F_CREATE` without `NLM_F_EXCL`). A pod's default route through
    /// the cluster network and a second attachment's default route then
    /// coexist (IPv6 makes them one multipath route); only an identical
    /// route (same destination, table, metric, gateway and device) fails
    /// with EEXIST.
    pub fn add_route(&self, route: &Route) -> Result<()> {
        self.send_route("add route", route, CHANGE | NLM_F_CREATE)
    }

    /// Adds `route` or replaces the route with the same destination, table,
    /// TOS and priority.
    pub fn replace_route(&self, route: &Route) -> Result<()> {
        self.send_route(
            "replace route",
            route,
            CHANGE | NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    fn send_route(&self, op: &'static str, route: &Route, flags: u16) -> Result<()> {
        route.check()?;
        self.request(
            op,
            &route.describe(),
            RouteNetlinkMessage::NewRoute(route.message(true)),
            flags,
        )
        .map(drop)
    }

    /// Deletes the route matching `route`'s destination and table, and its
    /// gateway, device and metric where given; `Ok(false)` if none matches.
    pub fn del_route(&self, route: &Route) -> Result<bool> {
        let msg = RouteNetlinkMessage::DelRoute(route.message(false));
        match self.request("delete route", &route.describe(), msg, CHANGE) {
            Ok(_) => Ok(true),
            Err(e) if e.errno() == Some(Errno::ESRCH) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The routes of `family`, in `table` or in every table when `None`.
    pub fn routes(&self, family: IpFamily, table: Option<u32>) -> Result<Vec<Route>> {
        let mut msg = RouteMessage::default();
        msg.header.address_family = family.address_family();
        self.dump(
            "list routes",
            &format_args!("{family:?}"),
            RouteNetlinkMessage::GetRoute(msg),
            |r| match r {
                RouteNetlinkMessage::NewRoute(m) => {
                    Route::from_message(m).filter(|r| table.is_none_or(|t| r.table == t))
                }
                _ => None,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_codes_round_trip() {
        for v in 0..=255u8 {
            assert_eq!(Scope::from_raw(v).raw(), v);
            assert_eq!(RouteKind::from_raw(v).raw(), v);
            assert_eq!(RouteProtocol::from_raw(v).raw(), v);
        }
    }

    #[test]
    fn scope_follows_ip_route_rules() {
        let net: IpNetwork = "10.1.0.0/16".parse().unwrap();
        assert_eq!(Route::new(net).dev(2).effective_scope(), Scope::Link);
        assert_eq!(
            Route::new(net)
                .via("10.0.0.1".parse().unwrap())
                .effective_scope(),
            Scope::Universe
        );
        assert_eq!(
            Route::new(net).dev(2).scope(Scope::Host).effective_scope(),
            Scope::Host
        );
    }

    #[test]
    fn check_rejects_mixed_families_and_no_nexthop() {
        let r = Route::new("10.1.0.0/16".parse().unwrap()).via("fd00::1".parse().unwrap());
        assert!(matches!(r.check(), Err(Error::Invalid { .. })));
        let r = Route::new("10.1.0.0/16".parse().unwrap());
        assert!(matches!(r.check(), Err(Error::Invalid { .. })));
        Route::default_via("fd00::1".parse().unwrap())
            .check()
            .unwrap();
        assert!(Route::default_via("fd00::1".parse().unwrap()).is_default());
        assert_eq!(
            Route::default_dev(IpFamily::V4, 3).dst.to_string(),
            "0.0.0.0/0"
        );
    }

    #[test]
    fn host_bits_are_cleared() {
        let r = Route::new("10.1.2.3/16".parse().unwrap()).dev(1);
        assert_eq!(r.network().to_string(), "10.1.0.0/16");
    }
}
