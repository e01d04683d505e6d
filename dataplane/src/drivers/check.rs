//! The building blocks of the built-in plugins' CHECK (cni-SPEC §2): the
//! prevResult, the container's interface in it and in the kernel, and
//! comparing addresses, routes and MACs.

use crate::drivers::error::{check_failed, sys, DriverError};

use plexus_cni::result::{CniResult, Interface};
use plexus_cni::skel::Request;

use super::attachment::Attach;
use crate::netlink::{IpFamily, Link, LinkKind, Route, RT_TABLE_MAIN};

/// cni-SPEC §2 CHECK: the prevResult is required.
pub(crate) fn prev_result(req: &Request) -> Result<&CniResult, DriverError> {
    req.prev_result
        .as_ref()
        .ok_or_else(|| DriverError::config("prevResult", "required for CHECK but not given"))
}

/// The prevResult's entry for the container interface: CNI_IFNAME in
/// CNI_NETNS.
pub(crate) fn prev_container_interface<'r>(
    prev: &'r CniResult,
    ctx: &Attach<'_>,
) -> Result<&'r Interface, DriverError> {
    prev.interfaces
        .iter()
        .find(|i| i.name == ctx.ifname && i.sandbox.as_deref() == Some(ctx.sandbox.as_str()))
        .ok_or_else(|| {
            check_failed(format!(
                "prevResult.interfaces: no entry for {} with sandbox {}",
                ctx.ifname, ctx.sandbox
            ))
        })
}

/// CHECK: the container interface (CNI_IFNAME) as the pod has it now; a
/// failed check when it is gone.
pub(crate) fn container_link(ctx: &Attach<'_>) -> Result<Link, DriverError> {
    ctx.pod
        .link_by_name(&ctx.ifname)
        .map_err(sys(format_args!("look up {}", ctx.ifname)))?
        .ok_or_else(|| check_failed(format!("container interface {} not found", ctx.ifname)))
}

/// [`container_link`], which must be a `kind` link (`name` in messages).
pub(crate) fn container_link_of_kind(
    ctx: &Attach<'_>,
    kind: LinkKind,
    name: &str,
) -> Result<Link, DriverError> {
    let link = container_link(ctx)?;
    if link.kind != Some(kind) {
        return Err(check_failed(format!(
            "container interface {} is not a {name}",
            ctx.ifname
        )));
    }
    Ok(link)
}

/// The interface's MAC matches the prevResult's, when that names one.
pub(crate) fn check_mac(link: &Link, iface: &Interface, side: &str) -> Result<(), DriverError> {
    let Some(want) = iface.mac.as_deref() else {
        return Ok(());
    };
    let have = link.mac.map(|m| m.to_string()).unwrap_or_default();
    if !want.eq_ignore_ascii_case(&have) {
        return Err(check_failed(format!(
            "{side} interface {}: MAC is {have}, prevResult says {want}",
            link.name
        )));
    }
    Ok(())
}

/// Every address of the prevResult is on the container interface with its
/// prefix route, and every route of the prevResult is in the container's
/// routing table (as the reference's ValidateExpected* do: default routes
/// match by destination only, others by destination and gateway).
pub(crate) fn check_ips_and_routes(
    ctx: &Attach<'_>,
    link: &Link,
    prev: &CniResult,
) -> Result<(), DriverError> {
    let addrs = ctx
        .pod
        .addresses(link.index)
        .map_err(sys(format_args!("list addresses of {}", link.name)))?;
    let mut tables: Vec<((IpFamily, u32), Vec<Route>)> = Vec::new();
    let mut routes_of = |family: IpFamily, table: u32| -> Result<Vec<Route>, DriverError> {
        if let Some((_, r)) = tables.iter().find(|(k, _)| *k == (family, table)) {
            return Ok(r.clone());
        }
        let r = ctx
            .pod
            .routes(family, Some(table))
            .map_err(sys("list routes in the container"))?;
        tables.push(((family, table), r.clone()));
        Ok(r)
    };
    for ip in &prev.ips {
        if !addrs.iter().any(|a| a.addr == ip.address) {
            return Err(check_failed(format!(
                "address {} is not on {}",
                ip.address, link.name
            )));
        }
        let prefix = ipnetwork::IpNetwork::new(ip.address.network(), ip.address.prefix())
            .unwrap_or(ip.address);
        let family = IpFamily::of(&ip.address.ip());
        if !routes_of(family, RT_TABLE_MAIN)?
            .iter()
            .any(|r| r.dst == prefix)
        {
            return Err(check_failed(format!(
                "no route to {prefix} for address {}",
                ip.address
            )));
        }
    }
    for r in &prev.routes {
        let family = IpFamily::of(&r.dst.ip());
        let table = r.table.unwrap_or(RT_TABLE_MAIN);
        let dst = ipnetwork::IpNetwork::new(r.dst.network(), r.dst.prefix()).unwrap_or(r.dst);
        let found = routes_of(family, table)?
            .iter()
            .any(|k| k.dst == dst && (r.is_default() || r.gw.is_none() || k.gateway == r.gw));
        if !found {
            let via = r.gw.map(|g| format!(" via {g}")).unwrap_or_default();
            return Err(check_failed(format!(
                "route {}{via} is not in the container's routing table",
                r.dst
            )));
        }
    }
    Ok(())
}
