//! What the built-in plugins share: reading the configuration, IPAM
//! delegation, configuring the container interface from a result, and the
//! CHECK building blocks. The attachment's context is
//! [`super::attachment`], the undo log [`super::undo`], the drivers' errors
//! and their constructors [`super::error`].
//!
//! Drivers run in the namespace plexus itself runs in (the "host"): host-side
//! work goes through the session's host handle and
//! [`sysctl::write_current`], so the only namespace switch of an ADD is the
//! one visit to the pod namespace for its sysctls.

use crate::drivers::error::{check_failed, sys, sys_error, DriverError};
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use plexus_cni::casefold;
use plexus_cni::delegate::{self, Resolver};
use plexus_cni::env::CniCommand;

use plexus_cni::result::{CniResult, Dns, Interface, Route as CniRoute};
use plexus_cni::skel::{Request, ValidAttachment};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use super::attachment::Attach;
use super::undo::Undo;
use crate::netlink::{
    AddressOptions, IpFamily, Link, LinkKind, Netlink, Route, Scope, RT_TABLE_MAIN,
};
use crate::sysctl::{self, SysctlKey};
use crate::{Error, MacAddr};

/// Longest wait for IPv6 duplicate address detection (the reference waits
/// 5 s, then fails only if the link is up).
const DAD_TIMEOUT: Duration = Duration::from_secs(5);
const DAD_POLL: Duration = Duration::from_millis(50);

/// Tries at a free random host-side name before giving up.
pub(crate) const NAME_ATTEMPTS: usize = 10;

// ---------------------------------------------------------------------------
// Configuration

/// Decode the request's configuration into `T` the way the reference plugins
/// (Go) do: keys match case-insensitively, unknown keys are ignored, a known
/// key of the wrong type is a code-7 error naming its path.
pub(crate) fn decode_config<T: DeserializeOwned>(req: &Request) -> Result<T, DriverError> {
    casefold::decode(&Value::Object(req.config.clone())).map_err(DriverError::from)
}

/// The `ipam` section, as far as a driver reads it.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct IpamRef {
    #[serde(rename = "type")]
    pub kind: Option<String>,
}

/// Whether the configuration delegates to an IPAM plugin. As in the
/// reference plugins an `ipam` section without a type (`"ipam": {}`) means
/// none: a layer-2 attachment.
pub(crate) fn has_ipam(ipam: &Option<IpamRef>) -> bool {
    ipam.as_ref()
        .and_then(|i| i.kind.as_deref())
        .is_some_and(|t| !t.is_empty())
}

/// The top-level `dns` key of a network configuration (cni-SPEC §1).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct DnsConf {
    pub nameservers: Option<Vec<String>>,
    pub domain: Option<String>,
    pub search: Option<Vec<String>>,
    pub options: Option<Vec<String>>,
}

impl DnsConf {
    /// Any field given, even empty (Go's non-nil check).
    pub fn is_set(&self) -> bool {
        self.nameservers.is_some()
            || self.search.is_some()
            || self.options.is_some()
            || self.domain.as_deref().is_some_and(|d| !d.is_empty())
    }

    pub fn to_dns(&self) -> Dns {
        Dns {
            nameservers: self.nameservers.clone().unwrap_or_default(),
            domain: self.domain.clone().filter(|d| !d.is_empty()),
            search: self.search.clone().unwrap_or_default(),
            options: self.options.clone().unwrap_or_default(),
        }
    }
}

/// Reject a feature the configuration turns on that plexus cannot honour
/// yet, naming the key.
pub(crate) fn unsupported(key: &str, on: Option<bool>, why: &str) -> Result<(), DriverError> {
    if on == Some(true) {
        return Err(DriverError::Unsupported {
            key: key.to_string(),
            why: why.to_string(),
        });
    }
    Ok(())
}

/// An MTU from the configuration: 0 or absent means the kernel's default,
/// anything else must lie in `min..=max` (`max_what` says where the upper
/// bound comes from).
pub(crate) fn check_mtu(
    mtu: Option<i64>,
    min: u32,
    max: u32,
    max_what: &str,
) -> Result<Option<u32>, DriverError> {
    match mtu {
        None | Some(0) => Ok(None),
        Some(m) if (i64::from(min)..=i64::from(max)).contains(&m) => Ok(Some(m as u32)),
        Some(m) => Err(DriverError::config(
            "mtu",
            format!("{m} is out of range: must be 0 (the default) or {min} to {max_what} ({max})"),
        )),
    }
}

/// The runtime-requested MAC address: the last non-empty of `candidates`
/// (given in increasing precedence as `(field, value)`), checked.
pub(crate) fn pick_mac(
    candidates: &[(&str, Option<&str>)],
) -> Result<Option<MacAddr>, DriverError> {
    let Some((field, value)) = candidates
        .iter()
        .rev()
        .find_map(|(f, v)| v.filter(|v| !v.is_empty()).map(|v| (*f, v)))
    else {
        return Ok(None);
    };
    let mac: MacAddr = value
        .parse()
        .map_err(|e: Error| DriverError::config(field, e.to_string()))?;
    if mac.is_multicast() || mac.0 == [0; 6] {
        return Err(DriverError::config(
            field,
            format!("{mac} is not a unicast address"),
        ));
    }
    Ok(Some(mac))
}

/// `runtimeConfig.mac` (cni-CONVENTIONS "mac" capability), if sent.
pub(crate) fn runtime_config_mac(req: &Request) -> Result<Option<&str>, DriverError> {
    match req.runtime_config.get("mac") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(DriverError::config(
            "runtimeConfig.mac",
            format!("must be a string, got {other}"),
        )),
    }
}

/// `CNI_ARGS` `MAC=...`, after the reference's rule that other keys need
/// `IgnoreUnknown=1`.
pub(crate) fn cni_args_mac(req: &Request) -> Result<Option<&str>, DriverError> {
    req.env.args().check_known(&["MAC"])?;
    Ok(req.env.args().get("MAC"))
}

/// A random `<prefix><8 hex digits>` name, the reference plugins' pattern
/// (`veth…` for a bridge's host end).
pub(crate) fn random_name(prefix: &str) -> String {
    // RandomState is seeded from the OS once per process and varies per
    // instance; the clock separates calls further.
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{prefix}{:08x}", h.finish() as u32)
}

// ---------------------------------------------------------------------------
// IPAM

/// IPAM ADD, with its DEL registered for undo. An empty answer is an error,
/// as in the reference plugins.
pub(crate) fn ipam_add<'a>(
    resolver: &'a dyn Resolver,
    req: &'a Request,
    undo: &mut Undo<'a>,
) -> Result<CniResult, DriverError> {
    let result = delegate::run_ipam(resolver, req, CniCommand::Add)?;
    undo.push("IPAM DEL", move || {
        delegate::run_ipam(resolver, req, CniCommand::Del)
            .map(drop)
            .map_err(DriverError::from)
    });
    match result {
        Some(r) if !r.ips.is_empty() => Ok(r),
        _ => Err(DriverError::IpamNoAddress),
    }
}

/// IPAM DEL/CHECK/STATUS when the configuration has an IPAM plugin.
pub(crate) fn ipam_run(
    resolver: &dyn Resolver,
    req: &Request,
    ipam: &Option<IpamRef>,
    command: CniCommand,
) -> Result<(), DriverError> {
    if has_ipam(ipam) {
        delegate::run_ipam(resolver, req, command)?;
    }
    Ok(())
}

/// cni-SPEC §2 GC: nothing of a driver's own outlives the pod namespace, so
/// GC is the IPAM plugin's (it holds the leases).
pub(crate) fn ipam_gc(
    resolver: &dyn Resolver,
    req: &Request,
    ipam: &Option<IpamRef>,
    valid: &[ValidAttachment],
) -> Result<(), DriverError> {
    let Some(kind) = ipam.as_ref().and_then(|i| i.kind.as_deref()) else {
        return Ok(());
    };
    if kind.is_empty() {
        return Ok(());
    }
    let plugin = resolver.resolve(kind, req)?;
    plugin
        .gc(req, valid)
        .map_err(|e| e.within(format!("ipam ({kind})")))
        .map_err(DriverError::from)
}

// ---------------------------------------------------------------------------
// Container interface configuration

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

fn key(template: &str, ifname: &str) -> Result<SysctlKey, DriverError> {
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
    let ifname = ctx.ifname.as_str();
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
            key("net/ipv6/conf/IFNAME/disable_ipv6", "lo")?,
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

// ---------------------------------------------------------------------------
// CHECK

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

/// A string of runtimeConfig, `None` when absent or empty.
pub(crate) fn runtime_string<'r>(
    req: &'r Request,
    key: &str,
    field: &str,
) -> Result<Option<&'r str>, DriverError> {
    match req.runtime_config.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str()).filter(|s| !s.is_empty())),
        Some(other) => Err(DriverError::config(
            field,
            format!("must be a string, got {other}"),
        )),
    }
}

/// An ADD request for the drivers' unit tests: container `ctr1` in
/// `/var/run/netns/x`, CNI_IFNAME `eth0`, `CNI_ARGS` `args`, `config` (an
/// object) on stdin.
#[cfg(test)]
pub(crate) fn unit_test_request(config: Value, args: &str) -> Request {
    let env = plexus_cni::env::CniEnv::Add(plexus_cni::env::AttachmentParams {
        container_id: plexus_cni::names::ContainerId::new("ctr1").unwrap(),
        netns: Some("/var/run/netns/x".into()),
        ifname: plexus_cni::names::IfName::new("eth0").unwrap(),
        args: plexus_cni::args::CniArgs::parse(args).unwrap(),
        path: Vec::new(),
    });
    let Value::Object(map) = config else {
        panic!("the configuration must be an object: {config}")
    };
    Request::from_config(env, map).unwrap()
}

/// `base` (an object) with the keys of `config` set over it, for the
/// drivers' unit tests.
#[cfg(test)]
pub(crate) fn unit_test_config(mut base: Value, config: &Value) -> Value {
    for (k, v) in config.as_object().unwrap() {
        base[k] = v.clone();
    }
    base
}

/// A drivers' unit test's refusal of `config`: `parsed` must be a
/// configuration error about `key`, found by the driver or by decoding
/// (the protocol crate's code 7). Returns the reason.
#[cfg(test)]
pub(crate) fn unit_test_refused<T: std::fmt::Debug>(
    parsed: Result<T, DriverError>,
    config: &Value,
    key: &str,
) -> String {
    match parsed.expect_err(&config.to_string()) {
        DriverError::Config { field, reason } if field == key => reason,
        DriverError::Cni(e) if e.code == plexus_cni::ErrorCode::InvalidConfig => e
            .details
            .strip_prefix(&format!("{key}: "))
            .unwrap_or_else(|| panic!("{config}: {e}"))
            .to_string(),
        e => panic!("{config}: {e:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_bounds() {
        assert_eq!(check_mtu(None, 68, 1500, "x").unwrap(), None);
        assert_eq!(check_mtu(Some(0), 68, 1500, "x").unwrap(), None);
        assert_eq!(check_mtu(Some(1400), 68, 1500, "x").unwrap(), Some(1400));
        for bad in [-1, 67, 1501] {
            let e = check_mtu(Some(bad), 68, 1500, "the master's MTU").unwrap_err();
            assert!(
                matches!(&e, DriverError::Config { field, reason }
                    if field == "mtu" && reason.starts_with(&format!("{bad} is out of range"))),
                "{e:?}"
            );
        }
    }

    #[test]
    fn mac_precedence_and_checks() {
        let m = pick_mac(&[
            ("CNI_ARGS MAC", Some("02:00:00:00:00:01")),
            ("args.cni.mac", None),
            ("runtimeConfig.mac", Some("")),
        ])
        .unwrap();
        assert_eq!(m.unwrap().to_string(), "02:00:00:00:00:01");
        let m = pick_mac(&[
            ("a", Some("02:00:00:00:00:01")),
            ("b", Some("02:00:00:00:00:02")),
        ]);
        assert_eq!(m.unwrap().unwrap().to_string(), "02:00:00:00:00:02");
        let e = pick_mac(&[("runtimeConfig.mac", Some("zz"))]).unwrap_err();
        assert!(
            matches!(&e, DriverError::Config { field, .. } if field == "runtimeConfig.mac"),
            "{e:?}"
        );
        let e = pick_mac(&[("mac", Some("01:00:5e:00:00:01"))]).unwrap_err();
        assert_eq!(
            e,
            DriverError::config("mac", "01:00:5e:00:00:01 is not a unicast address")
        );
        assert_eq!(pick_mac(&[]).unwrap(), None);
    }

    #[test]
    fn random_names_are_valid_and_differ() {
        let a = random_name("veth");
        let b = random_name("veth");
        assert_eq!(a.len(), 12);
        assert!(a.starts_with("veth"));
        crate::netlink::validate_ifname(&a).unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn dns_conf_is_set_like_go() {
        assert!(!DnsConf::default().is_set());
        let d = DnsConf {
            search: Some(vec![]),
            ..Default::default()
        };
        assert!(d.is_set());
        let d = DnsConf {
            domain: Some(String::new()),
            ..Default::default()
        };
        assert!(!d.is_set());
    }
}
