//! Configuring the container interface from a result: addresses (waiting
//! for IPv6 DAD as asked), routes, sysctls, up. Drivers run in the
//! namespace plexus itself runs in (the "host"): host-side work goes through
//! the session's host handle and [`sysctl::write_current`], so the only
//! namespace switch of an ADD is the one visit to the pod namespace for its
//! sysctls.

use crate::drivers::error::{sys, sys_error, DriverError};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use plexus_cni::names::IfName;
use plexus_cni::result::{CniResult, Interface, Route as CniRoute};
use plexus_cni::skel::Request;

use super::attachment::Attach;
use super::netconf::DnsConf;
use crate::netlink::{AddressOptions, IpFamily, Link, Netlink, Route, Scope, RT_TABLE_MAIN};
use crate::sysctl::{self, SysctlKey};
use crate::Error;

/// Longest wait for IPv6 duplicate address detection (the reference waits
/// 5 s, then fails only if the link is up).
const DAD_TIMEOUT: Duration = Duration::from_secs(5);
const DAD_POLL: Duration = Duration::from_millis(50);

/// How the container interface treats IPv6 duplicate address detection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dad {
    /// `accept_dad=0` and IFA_F_NODAD: addresses usable at once (the
    /// bridge's default: the other end is ours).
    Off,
    /// `enhanced_dad=1`, `accept_dad=1`, and wait for DAD to finish.
    On,
    /// Leave the namespace's setting; wait for DAD if it runs.
    Kernel,
}

/// The result of an attachment whose one interface is the pod's:
/// `addresses`' IPs (all on that interface) and routes, and the
/// configuration's `dns` (the reference plugins report it, not IPAM's).
pub(crate) fn pod_interface_result(
    req: &Request,
    addresses: Option<CniResult>,
    interface: Interface,
    dns: Option<&DnsConf>,
) -> CniResult {
    let mut result = addresses
        .map(|r| CniResult {
            ips: r.ips,
            routes: r.routes,
            ..CniResult::default()
        })
        .unwrap_or_default();
    result.cni_version = Some(req.cni_version);
    for ip in &mut result.ips {
        ip.interface = Some(0);
    }
    result.interfaces = vec![interface];
    result.dns = dns.map(DnsConf::to_dns).unwrap_or_default();
    result
}

fn key(template: &str, ifname: &IfName) -> Result<SysctlKey, DriverError> {
    SysctlKey::for_interface(template, ifname).map_err(sys("sysctl key"))
}

/// Apply `result` to the container interface `index` (named `ctx.ifname`),
/// as the reference's `ipam.ConfigureIface` does: sysctls, addresses, link
/// up, DAD settling, routes (a route without gateway goes through the first
/// gateway of its family). Every IP of the result belongs to this interface.
/// `notify` are best-effort sysctls (`IFNAME` placeholder) written in the
/// same visit to the pod namespace.
pub(crate) fn configure_iface(
    ctx: &Attach<'_>,
    index: u32,
    result: &CniResult,
    dad: Dad,
    notify: &[&str],
) -> Result<(), DriverError> {
    let ifname = &ctx.ifname;
    let has_v6 = result.ips.iter().any(|ip| ip.address.is_ipv6());

    // One visit to the pod namespace for every sysctl.
    let mut best_effort: Vec<(SysctlKey, &str)> = Vec::new();
    match dad {
        Dad::Off => best_effort.push((key("net/ipv6/conf/IFNAME/accept_dad", ifname)?, "0")),
        Dad::On => {
            best_effort.push((key("net/ipv6/conf/IFNAME/enhanced_dad", ifname)?, "1"));
            best_effort.push((key("net/ipv6/conf/IFNAME/accept_dad", ifname)?, "1"));
        }
        Dad::Kernel => {}
    }
    for template in notify {
        best_effort.push((key(template, ifname)?, "1"));
    }
    let enable_v6 = if has_v6 {
        vec![
            key("net/ipv6/conf/IFNAME/disable_ipv6", &IfName::loopback())?,
            key("net/ipv6/conf/IFNAME/disable_ipv6", ifname)?,
        ]
    } else {
        Vec::new()
    };
    let keep_addr = key("net/ipv6/conf/IFNAME/keep_addr_on_down", ifname)?;
    if best_effort.is_empty() && !has_v6 {
        // Nothing to write: no visit.
    } else {
        ctx.pod_ns
            .run(|| -> Result<(), Error> {
                for (k, v) in &best_effort {
                    let _ = sysctl::write_current(k, v);
                }
                if has_v6 {
                    // A namespace without IPv6 at all has no such files: the
                    // address add below will say so.
                    for k in &enable_v6 {
                        match sysctl::read_current(k) {
                            Ok(v) if v != "0" => sysctl::write_current(k, "0")?,
                            _ => {}
                        }
                    }
                    // Keep the addresses when the link goes down and up again.
                    sysctl::write_current(&keep_addr, "1")?;
                }
                Ok(())
            })
            .map_err(sys("enter the container namespace"))?
            .map_err(sys("enable IPv6 in the container"))?;
    }

    let nodad = AddressOptions {
        nodad: dad == Dad::Off,
    };
    for ip in &result.ips {
        ctx.pod
            .add_address(index, ip.address, nodad)
            .map_err(sys(format_args!("add {} to {ifname}", ip.address)))?;
    }
    ctx.pod
        .set_up(index)
        .map_err(sys(format_args!("set {ifname} up")))?;

    let gateway = |family: IpFamily| {
        result
            .ips
            .iter()
            .filter_map(|ip| ip.gateway)
            .find(|gw| IpFamily::of(gw) == family)
    };
    let v6_gateway = gateway(IpFamily::V6);
    if dad != Dad::Off && v6_gateway.is_some() {
        settle_addresses(ctx, index)?;
    }

    let mut added: Vec<Route> = Vec::with_capacity(result.routes.len());
    for r in &result.routes {
        let route = kernel_route(r, index, gateway(IpFamily::of(&r.dst.ip())));
        // An IPAM result may repeat a route (say, a default route plus the
        // one isDefaultGateway adds): install it once.
        if added.contains(&route) {
            continue;
        }
        ctx.pod
            .add_route(&route)
            .map_err(sys(format_args!("add route {} on {ifname}", r.dst)))?;
        added.push(route);
    }
    Ok(())
}

/// The kernel route for a result route on interface `index`.
fn kernel_route(r: &CniRoute, index: u32, family_gateway: Option<IpAddr>) -> Route {
    let mut route = Route::new(r.dst).dev(index);
    if let Some(gw) = r.gw.or(family_gateway) {
        route = route.via(gw);
    }
    if let Some(p) = r.priority {
        route = route.metric(p);
    }
    if let Some(t) = r.table {
        route = route.table(t);
    }
    if let Some(s) = r.scope.and_then(|s| u8::try_from(s).ok()) {
        route = route.scope(Scope::from_raw(s));
    }
    if let Some(m) = r.mtu {
        route = route.mtu(m);
    }
    if let Some(a) = r.advmss {
        route = route.advmss(a);
    }
    route
}

/// Wait (bounded) until no IPv6 address of the link is tentative; a failed
/// DAD is an error.
fn settle_addresses(ctx: &Attach<'_>, index: u32) -> Result<(), DriverError> {
    let deadline = Instant::now() + DAD_TIMEOUT;
    loop {
        let addrs = ctx
            .pod
            .addresses(index)
            .map_err(sys(format_args!("list addresses of {}", ctx.ifname)))?;
        if let Some(a) = addrs.iter().find(|a| a.dadfailed) {
            return Err(sys_error(
                format_args!("address {} on {}", a.addr, ctx.ifname),
                "duplicate address detection failed",
            ));
        }
        if !addrs.iter().any(|a| a.tentative) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(sys_error(
                format_args!("addresses of {}", ctx.ifname),
                format_args!("still tentative after {DAD_TIMEOUT:?}"),
            ));
        }
        std::thread::sleep(DAD_POLL);
    }
}

/// The interface of the first default route (IPv4, then IPv6) in the main
/// table: where the reference macvlan and ipvlan plugins put their master
/// when none is configured.
pub(crate) fn default_route_link(nl: &Netlink) -> Result<Option<Link>, Error> {
    for family in [IpFamily::V4, IpFamily::V6] {
        let routes = nl.routes(family, Some(RT_TABLE_MAIN))?;
        if let Some(oif) = routes.iter().filter(|r| r.is_default()).find_map(|r| r.oif) {
            return nl.link_by_index(oif);
        }
    }
    Ok(None)
}
