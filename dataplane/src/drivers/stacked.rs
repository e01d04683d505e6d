//! What the macvlan and ipvlan drivers share: a device stacked on a master
//! interface, created directly in the pod namespace as CNI_IFNAME, then
//! addressed from IPAM. The two reference plugins
//! (containernetworking/plugins `plugins/main/{macvlan,ipvlan}`) differ only
//! in the device kind and mode, the MAC (macvlan only), and what happens
//! without IPAM: a macvlan is a layer-2 attachment, an ipvlan takes its
//! addresses (and by default its master) from the prevResult of a chain.
//!
//! Differences from the reference, deliberate:
//! - The device is created under its final name directly in the pod
//!   namespace (the reference creates a temporary name and renames it, for
//!   a kernel bug long fixed).
//! - DEL removes the container interface before releasing its addresses
//!   (the reference macvlan and ipvlan release first): an address is never
//!   handed out again while an interface may still carry it.
//! - The master's MTU bounds `mtu` for ipvlan too, so the error names the
//!   key instead of coming back as the kernel's EINVAL.

use plexus_cni::delegate::Resolver;
use plexus_cni::env::CniCommand;
use plexus_cni::error::CniError;
use plexus_cni::result::{CniResult, Interface};
use plexus_cni::skel::{Plugin, Request};
use serde::Deserialize;

use super::common::{self, check_failed, sys, sys_error, Attach, Dad, DnsConf, IpamRef, Undo};
use crate::netlink::{IpvlanMode, IpvlanSpec, Link, LinkKind, MacvlanMode, MacvlanSpec, Netlink};
use crate::{Error, MacAddr, NetNs};

/// Index of the container interface in the result's `interfaces`.
const CONTAINER_INTERFACE: i64 = 0;

/// The device kind and its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Macvlan(MacvlanMode),
    Ipvlan(IpvlanMode),
}

impl Mode {
    fn kind(self) -> &'static str {
        match self {
            Mode::Macvlan(_) => "macvlan",
            Mode::Ipvlan(_) => "ipvlan",
        }
    }

    fn link_kind(self) -> LinkKind {
        match self {
            Mode::Macvlan(_) => LinkKind::Macvlan,
            Mode::Ipvlan(_) => LinkKind::Ipvlan,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Macvlan(m) => m.as_str(),
            Mode::Ipvlan(m) => m.as_str(),
        }
    }

    /// The mode the kernel reports for `link`, if it is of this kind.
    fn of(self, link: &Link) -> Option<Mode> {
        match self {
            Mode::Macvlan(_) => link.macvlan_mode.map(Mode::Macvlan),
            Mode::Ipvlan(_) => link.ipvlan_mode.map(Mode::Ipvlan),
        }
    }

    /// An ipvlan in a chain configures the prevResult's addresses.
    fn chains(self) -> bool {
        matches!(self, Mode::Ipvlan(_))
    }

    fn create(self, nl: &Netlink, spec: Spec<'_>) -> Result<Option<Link>, Error> {
        match self {
            Mode::Macvlan(mode) => nl.create_macvlan(&MacvlanSpec {
                netns: spec.netns,
                mtu: spec.mtu,
                mac: spec.mac,
                ..MacvlanSpec::new(spec.name, spec.master, mode)
            }),
            Mode::Ipvlan(mode) => nl.create_ipvlan(&IpvlanSpec {
                netns: spec.netns,
                mtu: spec.mtu,
                ..IpvlanSpec::new(spec.name, spec.master, mode)
            }),
        }
    }
}

struct Spec<'a> {
    name: &'a str,
    master: u32,
    netns: Option<&'a NetNs>,
    mtu: Option<u32>,
    mac: Option<MacAddr>,
}

/// A validated macvlan or ipvlan configuration.
#[derive(Debug)]
pub(crate) struct Conf {
    /// `master`, if configured (empty means not).
    pub master: Option<String>,
    pub mode: Mode,
    pub mtu: Option<i64>,
    pub mac: Option<MacAddr>,
    /// `linkInContainer`: the master is in the pod namespace.
    pub link_in_container: bool,
    pub ipam: Option<IpamRef>,
    pub dns: Option<DnsConf>,
}

impl Conf {
    /// The checks that need no system access, shared by both kinds.
    pub fn validate(self, req: &Request) -> Result<Conf, CniError> {
        if let Some(m) = &self.master {
            plexus_cni::names::check_ifname(m)
                .map_err(|r| CniError::invalid_config("master", r))?;
        }
        // Below the master's MTU, known only at ADD; the lower bound now.
        common::check_mtu(self.mtu, 68, u32::MAX, "the master's MTU")?;
        if self.mode.chains()
            && !common::has_ipam(&self.ipam)
            && req.prev_result.as_ref().is_none_or(|p| p.ips.is_empty())
            && req.env.command == CniCommand::Add
        {
            return Err(CniError::invalid_config(
                "ipam",
                format!(
                    "missing: {} needs an IPAM plugin, or a prevResult with addresses",
                    self.mode.kind()
                ),
            ));
        }
        Ok(self)
    }
}

/// `mode` as the reference reads it: absent or empty is the first of
/// `modes` (the default).
pub(crate) fn parse_mode<M: Copy + std::str::FromStr>(
    kind: &str,
    mode: Option<&str>,
    default: M,
    expected: &str,
) -> Result<M, CniError> {
    match mode {
        None | Some("") => Ok(default),
        Some(s) => s.parse().map_err(|_| {
            CniError::invalid_config(
                "mode",
                format!("unknown {kind} mode {s:?} (expected {expected})"),
            )
        }),
    }
}

/// The part DEL, GC and STATUS need; they must not fail on a configuration
/// ADD refused.
#[derive(Debug, Default, Deserialize)]
struct IpamOnly {
    ipam: Option<IpamRef>,
}

/// Where the master lives and its handle.
fn master_side<'a>(ctx: &'a Attach, conf: &Conf) -> (&'static str, &'a Netlink) {
    if conf.link_in_container {
        ("container", &ctx.pod)
    } else {
        ("host", &ctx.host)
    }
}

/// The master interface: as configured, else (ipvlan in a chain) the
/// prevResult's only interface, else the interface of the default route in
/// the namespace the master lives in.
fn resolve_master(req: &Request, ctx: &Attach, conf: &Conf) -> Result<Link, CniError> {
    let (side, nl) = master_side(ctx, conf);
    let name = match (&conf.master, &req.prev_result) {
        (Some(m), _) => m.clone(),
        (None, Some(prev)) if conf.mode.chains() => match prev.interfaces.as_slice() {
            [only] if !only.name.is_empty() => only.name.clone(),
            _ => return Err(CniError::invalid_config(
                "master",
                "not set, and the prevResult has not exactly one named interface to take it from",
            )),
        },
        (None, _) => {
            return common::default_route_link(nl)
                .map_err(sys("find the default route interface"))?
                .ok_or_else(|| {
                    CniError::invalid_config(
                        "master",
                        format!(
                        "not set, and the {side} namespace has no default route to take it from"
                    ),
                    )
                })
        }
    };
    nl.link_by_name(&name)
        .map_err(sys(format_args!("look up master {name}")))?
        .ok_or_else(|| {
            CniError::invalid_config(
                "master",
                format!("interface {name:?} not found in the {side} namespace"),
            )
        })
}

/// A link stacked on a master: the one plugin macvlan and ipvlan both are,
/// told apart by how they read their configuration (`parse`).
pub struct Stacked<'r> {
    resolver: &'r dyn Resolver,
    /// The kind of link it makes: DEL removes only a link of this kind.
    kind: LinkKind,
    parse: fn(&Request) -> Result<Conf, CniError>,
}

impl<'r> Stacked<'r> {
    /// `resolver` finds the IPAM plugin named by `ipam.type`.
    pub(crate) fn new(
        resolver: &'r dyn Resolver,
        kind: LinkKind,
        parse: fn(&Request) -> Result<Conf, CniError>,
    ) -> Self {
        Stacked {
            resolver,
            kind,
            parse,
        }
    }
}

impl Plugin for Stacked<'_> {
    fn validate(&self, req: &Request) -> Result<(), CniError> {
        (self.parse)(req).map(drop)
    }
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        add(self.resolver, req, &(self.parse)(req)?)
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        del(self.resolver, req, &self.kind)
    }
    fn check(&self, req: &Request) -> Result<(), CniError> {
        check(self.resolver, req, &(self.parse)(req)?)
    }
    fn gc(&self, req: &Request, valid: &[(String, String)]) -> Result<(), CniError> {
        gc(self.resolver, req, valid)
    }
    fn status(&self, req: &Request) -> Result<(), CniError> {
        status(self.resolver, req)
    }
}

pub(crate) fn add(
    resolver: &dyn Resolver,
    req: &Request,
    conf: &Conf,
) -> Result<CniResult, CniError> {
    let ctx = Attach::open(req)?;
    let mut undo = Undo::default();
    let outcome = add_steps(resolver, req, conf, &ctx, &mut undo);
    undo.finish(outcome)
}

/// The interface, created on its master straight into the pod (or in the pod
/// with `linkInContainer`).
fn create_link<'a>(
    conf: &Conf,
    ctx: &'a Attach,
    master: &Link,
    mtu: Option<u32>,
    undo: &mut Undo<'a>,
) -> Result<Link, CniError> {
    let (_, nl) = master_side(ctx, conf);
    let kind = conf.mode.kind();
    let spec = Spec {
        name: &ctx.ifname,
        master: master.index,
        // From the host: straight into the pod. A master in the pod: a
        // local creation there.
        netns: (!conf.link_in_container).then_some(&ctx.pod_ns),
        mtu,
        mac: conf.mac,
    };
    match conf.mode.create(nl, spec) {
        Ok(_) => {}
        Err(e) if e.is_exists() && ctx.ifname_exists()? => return Err(ctx.ifname_taken()),
        Err(e) => {
            return Err(sys_error(
                format_args!("create {kind} {} on {}", ctx.ifname, master.name),
                e,
            ))
        }
    }
    undo.push(format!("{kind} {}", ctx.ifname), move || {
        ctx.pod
            .del_link_by_name(&ctx.ifname)
            .map(drop)
            .map_err(sys(format_args!("delete {kind} {}", ctx.ifname)))
    });
    ctx.pod_link()
}

fn add_steps<'a>(
    resolver: &'a dyn Resolver,
    req: &'a Request,
    conf: &Conf,
    ctx: &'a Attach,
    undo: &mut Undo<'a>,
) -> Result<CniResult, CniError> {
    // Refused before IPAM allocates anything.
    let master = resolve_master(req, ctx, conf)?;
    let mtu = common::check_mtu(conf.mtu, 68, master.mtu, "the master's MTU")?;
    // With IPAM the interface gets addresses, so the notify sysctls are
    // written while IPAM runs rather than after.
    let notify_early = common::has_ipam(&conf.ipam);
    common::links_and_ipam(
        resolver,
        req,
        &conf.ipam,
        undo,
        |undo| {
            let link = create_link(conf, ctx, &master, mtu, undo)?;
            if notify_early {
                common::write_notify_sysctls(ctx, NOTIFY)?;
            }
            Ok(link)
        },
        |link, ipam| {
            let notify = if notify_early { &[][..] } else { NOTIFY };
            configure(req, conf, ctx, link, ipam, notify)
        },
    )
}

/// Announce the interface's addresses when they change (as the reference).
const NOTIFY: &[&str] = &[
    "net/ipv4/conf/IFNAME/arp_notify",
    "net/ipv6/conf/IFNAME/ndisc_notify",
];

/// The result, and the interface's addresses and routes.
fn configure(
    req: &Request,
    conf: &Conf,
    ctx: &Attach,
    link: Link,
    ipam: Option<CniResult>,
    notify: &[&str],
) -> Result<CniResult, CniError> {
    let mut result = if let Some(ipam) = ipam {
        CniResult {
            ips: ipam.ips,
            routes: ipam.routes,
            ..CniResult::default()
        }
    } else if conf.mode.chains() {
        let prev = req.prev_result.clone().unwrap_or_default();
        CniResult {
            ips: prev.ips,
            routes: prev.routes,
            ..CniResult::default()
        }
    } else {
        CniResult::default()
    };
    result.cni_version = Some(req.cni_version);
    result.interfaces = vec![Interface {
        name: link.name.clone(),
        mac: link.mac.map(|m| m.to_string()),
        sandbox: Some(ctx.sandbox.clone()),
        ..Interface::default()
    }];
    for ip in &mut result.ips {
        ip.interface = Some(CONTAINER_INTERFACE);
    }

    if result.ips.is_empty() {
        // Layer 2 only.
        ctx.pod
            .set_up(link.index)
            .map_err(sys(format_args!("set {} up", ctx.ifname)))?;
    } else {
        common::configure_iface(ctx, link.index, &result, Dad::Kernel, notify)?;
    }
    // The reference reports the configuration's dns, not IPAM's.
    result.dns = conf.dns.as_ref().map(DnsConf::to_dns).unwrap_or_default();
    Ok(result)
}

/// cni-SPEC §2 DEL: the container interface (if the namespace and it still
/// exist), then the addresses.
pub(crate) fn del(resolver: &dyn Resolver, req: &Request, kind: &LinkKind) -> Result<(), CniError> {
    let c: IpamOnly = common::decode_config(req)?;
    common::del_container_link(req, kind)?;
    common::ipam_run(resolver, req, &c.ipam, CniCommand::Del)
}

pub(crate) fn gc(
    resolver: &dyn Resolver,
    req: &Request,
    valid: &[(String, String)],
) -> Result<(), CniError> {
    let c: IpamOnly = common::decode_config(req)?;
    common::ipam_gc(resolver, req, &c.ipam, valid)
}

pub(crate) fn status(resolver: &dyn Resolver, req: &Request) -> Result<(), CniError> {
    let c: IpamOnly = common::decode_config(req)?;
    common::ipam_run(resolver, req, &c.ipam, CniCommand::Status)
}

/// cni-SPEC §2 CHECK, as the reference checks it: IPAM, the master, the
/// container interface (kind, mode, MAC), its addresses and routes.
pub(crate) fn check(resolver: &dyn Resolver, req: &Request, conf: &Conf) -> Result<(), CniError> {
    let ctx = Attach::open(req)?;
    common::ipam_run(resolver, req, &conf.ipam, CniCommand::Check)?;
    let prev = common::prev_result(req)?;
    let entry = common::prev_container_interface(prev, &ctx)?;
    if let Some(name) = &conf.master {
        let (side, nl) = master_side(&ctx, conf);
        if nl
            .link_by_name(name)
            .map_err(sys(format_args!("look up master {name}")))?
            .is_none()
        {
            return Err(check_failed(format!(
                "master {name:?} not found in the {side} namespace"
            )));
        }
    }
    let kind = conf.mode.kind();
    let link = ctx
        .pod
        .link_by_name(&ctx.ifname)
        .map_err(sys(format_args!("look up {}", ctx.ifname)))?
        .ok_or_else(|| check_failed(format!("container interface {} not found", ctx.ifname)))?;
    if link.kind != Some(conf.mode.link_kind()) {
        return Err(check_failed(format!(
            "container interface {} is not a {kind}",
            ctx.ifname
        )));
    }
    let mode = conf.mode.of(&link);
    if mode != Some(conf.mode) {
        return Err(check_failed(format!(
            "mode: the container's {kind} is in mode {}, the configuration says {}",
            mode.map_or("unknown", Mode::name),
            conf.mode.name()
        )));
    }
    common::check_mac(&link, entry, "container")?;
    common::check_ips_and_routes(&ctx, &link, prev)
}
