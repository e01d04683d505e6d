//! What the macvlan, ipvlan, vlan and ipoib drivers share: a device stacked
//! on a master interface, put in the pod namespace as CNI_IFNAME, then
//! addressed from IPAM. The reference plugins
//! (containernetworking/plugins `plugins/main/{macvlan,ipvlan,vlan}`,
//! ipoib-cni) differ in the device kind and its mode (a VLAN's is its id),
//! the MAC (macvlan only), what happens without IPAM (a macvlan or vlan is a
//! layer-2 attachment, an ipvlan takes its addresses, and by default its
//! master, from the prevResult of a chain), and how the device gets into
//! the pod: macvlan and ipvlan are created there under their final name,
//! vlan and ipoib under a temporary name and then moved and renamed
//! ([`rename_into_pod`]), as their references do.
//!
//! Differences from the reference, deliberate:
//! - macvlan and ipvlan are created under their final name directly in the
//!   pod namespace (the reference creates a temporary name and renames it:
//!   a namespace move costs tens of milliseconds). Only where a kernel
//!   before 6.14 refuses that name because the node has it too, they are
//!   made the reference's way.
//! - DEL removes the container interface before releasing its addresses
//!   (the reference macvlan, ipvlan and vlan release first): an address is
//!   never handed out again while an interface may still carry it.
//! - The master's MTU bounds `mtu` for ipvlan too, so the error names the
//!   key instead of coming back as the kernel's EINVAL.

use crate::drivers::error::{check_failed, lookup_name, sys, sys_error, DriverError};
use plexus_cni::env::CniCommand;
use plexus_cni::names::IfName;
use plexus_cni::result::CniResult;
use plexus_cni::skel::Request;

use super::attachment::Attach;
use super::iface::Dad;
use super::interface::{Call, InterfaceDriver};
use super::netconf::DnsConf;
use super::netconf::IpamRef;
use super::undo::Undo;
use crate::drivers::{check, iface, netconf};
use crate::netlink::{Link, LinkKind, LinkUpdate, Netlink};
use crate::{Error, MacAddr, NetNs};

/// One kind of link stacked on a master: what macvlan, ipvlan, vlan and
/// ipoib each know, the rest of the flow being [`StackedDriver`]'s.
pub(crate) trait Stacked: Sync {
    /// The kind's mode (`mode` key).
    type Mode: Copy + PartialEq + std::fmt::Debug + Sync;
    /// The plugin type, as error messages name it.
    const KIND: &'static str;
    /// The link kind it makes: DEL removes only a link of this kind.
    const LINK_KIND: LinkKind;
    /// An attachment without IPAM configures the prevResult's addresses
    /// (ipvlan in a chain) instead of being layer 2 only (macvlan).
    const CHAINS: bool;
    /// `create` makes the link in the pod under its final name (macvlan,
    /// ipvlan); the others make it under a temporary name and move it.
    const MADE_IN_POD: bool = true;
    /// The configuration key of the mode, and what CHECK calls it.
    const MODE_KEY: &'static str = "mode";
    const MODE_NOUN: &'static str = "mode";
    /// The sysctls (IFNAME for the interface) set to 1 once the interface
    /// has its addresses.
    const ANNOUNCE: &'static [&'static str] = NOTIFY;

    /// Read the configuration (the shared checks follow in
    /// [`Conf::validate`]).
    fn parse(req: &Request) -> Result<Conf<Self::Mode>, DriverError>;
    fn create(nl: &Netlink, spec: Spec<'_>, mode: Self::Mode) -> Result<Option<Link>, Error>;
    /// Refuse a master this kind cannot stack on (before IPAM runs).
    fn check_master(_master: &Link) -> Result<(), DriverError> {
        Ok(())
    }
    /// The mode the kernel reports for a link of this kind.
    fn mode_of(link: &Link) -> Option<Self::Mode>;
    fn mode_name(mode: Self::Mode) -> String;
    /// A refusal of the creation this kind explains better than the
    /// kernel's errno (a VLAN id already taken on the master).
    fn refusal(_e: &Error, _master: &Link, _mode: Self::Mode) -> Option<DriverError> {
        None
    }
    /// CHECK of what only this kind knows about the container's `link`
    /// (its `master`, as configured, when the configuration names one).
    fn check_link(
        _conf: &Conf<Self::Mode>,
        _link: &Link,
        _master: Option<&Link>,
    ) -> Result<(), DriverError> {
        Ok(())
    }
}

/// The new link.
pub(crate) struct Spec<'a> {
    pub name: &'a IfName,
    pub master: u32,
    pub netns: Option<&'a NetNs>,
    pub mtu: Option<u32>,
    pub mac: Option<MacAddr>,
}

/// A validated macvlan or ipvlan configuration.
#[derive(Debug)]
pub(crate) struct Conf<M> {
    /// `master`, if configured (empty means not).
    pub master: Option<IfName>,
    pub mode: M,
    pub mtu: Option<i64>,
    pub mac: Option<MacAddr>,
    /// `linkInContainer`: the master is in the pod namespace.
    pub link_in_container: bool,
    pub ipam: Option<IpamRef>,
    pub dns: Option<DnsConf>,
}

impl<M> Conf<M> {
    /// The checks that need no system access, shared by both kinds.
    pub fn validate(self, req: &Request, kind: &str, chains: bool) -> Result<Self, DriverError> {
        // Below the master's MTU, known only at ADD; the lower bound now.
        netconf::check_mtu(self.mtu, 68, u32::MAX, "the master's MTU")?;
        if chains
            && !netconf::has_ipam(&self.ipam)
            && req.prev_result.as_ref().is_none_or(|p| p.ips.is_empty())
            && req.env.command() == CniCommand::Add
        {
            return Err(DriverError::config(
                "ipam",
                format!("missing: {kind} needs an IPAM plugin, or a prevResult with addresses"),
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
) -> Result<M, DriverError> {
    match mode {
        None | Some("") => Ok(default),
        Some(s) => s.parse().map_err(|_| {
            DriverError::config(
                "mode",
                format!("unknown {kind} mode {s:?} (expected {expected})"),
            )
        }),
    }
}

/// Where the master lives and its handle.
fn master_side<'a, M>(ctx: &Attach<'a>, conf: &Conf<M>) -> (&'static str, &'a Netlink) {
    if conf.link_in_container {
        ("container", ctx.pod)
    } else {
        ("host", ctx.host)
    }
}

/// The master interface: as configured, else (ipvlan in a chain) the
/// prevResult's only interface, else the interface of the default route in
/// the namespace the master lives in.
fn resolve_master<M>(
    req: &Request,
    ctx: &Attach<'_>,
    conf: &Conf<M>,
    chains: bool,
) -> Result<Link, DriverError> {
    let (side, nl) = master_side(ctx, conf);
    let name = match (&conf.master, &req.prev_result) {
        (Some(m), _) => m.clone(),
        (None, Some(prev)) if chains => match prev.interfaces.as_slice() {
            [only] if !only.name.is_empty() => {
                lookup_name(format_args!("look up master {}", only.name), &only.name)?
            }
            _ => return Err(DriverError::config(
                "master",
                "not set, and the prevResult has not exactly one named interface to take it from",
            )),
        },
        (None, _) => {
            return iface::default_route_link(nl)
                .map_err(sys("find the default route interface"))?
                .ok_or_else(|| {
                    DriverError::config(
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
            DriverError::config(
                "master",
                format!("interface {name:?} not found in the {side} namespace"),
            )
        })
}

/// The [`InterfaceDriver`] of a [`Stacked`] kind.
pub(crate) struct StackedDriver<S>(pub(crate) S);

impl<S: Stacked> InterfaceDriver for StackedDriver<S> {
    type Conf = Conf<S::Mode>;
    const POD_LINK_KIND: Option<LinkKind> = Some(S::LINK_KIND);
    /// The master and the MTU checked against it.
    type Prepared = (Link, Option<u32>);
    type Made = Link;

    fn parse(&self, req: &Request) -> Result<Self::Conf, DriverError> {
        S::parse(req)?.validate(req, S::KIND, S::CHAINS)
    }

    fn ipam<'c>(&self, conf: &'c Self::Conf) -> &'c Option<IpamRef> {
        &conf.ipam
    }

    fn prepare(&self, call: &Call<'_, Self::Conf>) -> Result<Self::Prepared, DriverError> {
        let Call { req, conf, at } = *call;
        let master = resolve_master(req, at, conf, S::CHAINS)?;
        S::check_master(&master)?;
        let mtu = netconf::check_mtu(conf.mtu, 68, master.mtu, "the master's MTU")?;
        Ok((master, mtu))
    }

    fn create<'a>(
        &'a self,
        call: &Call<'a, Self::Conf>,
        (master, mtu): &'a Self::Prepared,
        undo: &mut Undo<'a>,
    ) -> Result<Link, DriverError> {
        create_link::<S>(call.conf, call.at, master, *mtu, undo)
    }

    fn configure(
        &self,
        call: &Call<'_, Self::Conf>,
        link: Link,
        ipam: Option<CniResult>,
    ) -> Result<CniResult, DriverError> {
        let Call { req, conf, at } = *call;
        configure(
            req,
            conf.dns.as_ref(),
            S::CHAINS,
            at,
            link,
            ipam,
            S::ANNOUNCE,
        )
    }

    fn check(&self, call: &Call<'_, Self::Conf>, prev: &CniResult) -> Result<(), DriverError> {
        check::<S>(call.conf, call.at, prev)
    }
}

/// The interface, created on its master straight into the pod (or in the pod
/// with `linkInContainer`).
fn create_link<'a, S: Stacked>(
    conf: &Conf<S::Mode>,
    ctx: &'a Attach<'a>,
    master: &Link,
    mtu: Option<u32>,
    undo: &mut Undo<'a>,
) -> Result<Link, DriverError> {
    let (_, nl) = master_side(ctx, conf);
    let kind = S::KIND;
    // From the host: straight into the pod. A master in the pod: a local
    // creation there.
    let netns = (!conf.link_in_container).then_some(ctx.pod_ns);
    let spec = |name| Spec {
        name,
        master: master.index,
        netns,
        mtu,
        mac: conf.mac,
    };
    let mut made = S::create(nl, spec(&ctx.ifname), conf.mode).map(drop);
    // Before Linux 6.14 a link made for another namespace under a name the
    // creating namespace has (the node's `eth0`) is refused with EEXIST,
    // the name looked up where the request runs: then it is made in the pod
    // under a temporary name and renamed there, as the references do.
    let refused_name = matches!(&made, Err(e) if e.is_exists()) && netns.is_some();
    if S::MADE_IN_POD && refused_name && !ctx.ifname_exists()? {
        let temporary = netconf::random_name(kind);
        made = S::create(nl, spec(&temporary), conf.mode)
            .and_then(|_| rename_in_pod(ctx.pod, &temporary, &ctx.ifname));
    }
    match made {
        Ok(()) => {}
        Err(e) if e.is_exists() && ctx.ifname_exists()? => return Err(ctx.ifname_taken()),
        Err(e) => {
            return Err(S::refusal(&e, master, conf.mode).unwrap_or_else(|| {
                sys_error(
                    format_args!("create {kind} {} on {}", ctx.ifname, master.name),
                    e,
                )
            }))
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

/// A link `made` in `nl`'s namespace under a temporary name, moved into
/// `spec.netns` (when given) and renamed to `spec.name` in one request, for
/// the kinds whose reference does so (vlan, ipoib): before Linux 6.14 a
/// link created in another namespace under its final name is refused
/// (EEXIST) when the creating namespace has a link of that name, which
/// `rtnl_newlink` looked up there. On failure nothing is left:
/// the link is deleted where it is, still in `nl`'s namespace or (moved,
/// the rename refused because CNI_IFNAME is taken) in the pod's.
pub(crate) fn rename_into_pod(nl: &Netlink, made: &Link, spec: &Spec<'_>) -> Result<(), Error> {
    let moved = nl.update_link(
        made.index,
        &LinkUpdate {
            netns: spec.netns,
            name: Some(spec.name.clone()),
            ..Default::default()
        },
    );
    if let Err(e) = moved {
        let _ = nl.del_link_by_name(&made.name);
        if let Some(pod) = spec.netns.and_then(|ns| Netlink::open(ns).ok()) {
            let _ = pod.del_link_by_name(&made.name);
        }
        return Err(e);
    }
    Ok(())
}

/// The pod's link `temporary` renamed to `name`; on failure deleted.
fn rename_in_pod(pod: &Netlink, temporary: &IfName, name: &IfName) -> Result<(), Error> {
    let renamed = pod.link_by_name(temporary)?.map(|link| {
        pod.update_link(
            link.index,
            &LinkUpdate {
                name: Some(name.clone()),
                ..Default::default()
            },
        )
    });
    if let Some(Err(e)) = renamed {
        let _ = pod.del_link_by_name(temporary);
        return Err(e);
    }
    Ok(())
}

/// Announce the interface's addresses when they change (as the reference).
pub(crate) const NOTIFY: &[&str] = &[
    "net/ipv4/conf/IFNAME/arp_notify",
    "net/ipv6/conf/IFNAME/ndisc_notify",
];

/// The result, and the interface's addresses and routes: a container
/// interface `link` already in the pod as CNI_IFNAME, addressed from `ipam`
/// (or, `chains`, the prevResult), else up as a layer-2 attachment. The
/// result's `dns` is the configuration's (`dns`), not IPAM's.
pub(crate) fn configure(
    req: &Request,
    dns: Option<&DnsConf>,
    chains: bool,
    ctx: &Attach<'_>,
    link: Link,
    ipam: Option<CniResult>,
    notify: &[&str],
) -> Result<CniResult, DriverError> {
    let addresses = match ipam {
        None if chains => req.prev_result.clone(),
        ipam => ipam,
    };
    let result = iface::pod_interface_result(req, addresses, ctx.interface_of(&link), dns);
    if result.ips.is_empty() {
        // Layer 2 only.
        ctx.pod
            .set_up(link.index)
            .map_err(sys(format_args!("set {} up", ctx.ifname)))?;
    } else {
        iface::configure_iface(ctx, link.index, &result, Dad::Kernel, notify)?;
    }
    Ok(result)
}

/// cni-SPEC §2 CHECK, as the reference checks it: IPAM, the master, the
/// container interface (kind, mode, MAC), its addresses and routes.
fn check<S: Stacked>(
    conf: &Conf<S::Mode>,
    ctx: &Attach<'_>,
    prev: &CniResult,
) -> Result<(), DriverError> {
    let entry = check::prev_container_interface(prev, ctx)?;
    let master = match &conf.master {
        Some(name) => {
            let (side, nl) = master_side(ctx, conf);
            let found = nl
                .link_by_name(name)
                .map_err(sys(format_args!("look up master {name}")))?;
            if found.is_none() {
                return Err(check_failed(format!(
                    "master {name:?} not found in the {side} namespace"
                )));
            }
            found
        }
        None => None,
    };
    let kind = S::KIND;
    let link = check::container_link_of_kind(ctx, S::LINK_KIND, kind)?;
    let mode = S::mode_of(&link);
    if mode != Some(conf.mode) {
        return Err(check_failed(format!(
            "{}: the container's {kind} is in {} {}, the configuration says {}",
            S::MODE_KEY,
            S::MODE_NOUN,
            mode.map_or_else(|| "unknown".into(), S::mode_name),
            S::mode_name(conf.mode)
        )));
    }
    S::check_link(conf, &link, master.as_ref())?;
    check::check_mac(&link, entry, "container")?;
    check::check_ips_and_routes(ctx, &link, prev)
}
