//! The `bridge` driver: a veth pair per attachment, the host end a port of a
//! Linux bridge in the host namespace, the other end CNI_IFNAME in the pod.
//! Config keys, defaults, result shape and DEL semantics follow the
//! reference plugin (containernetworking/plugins `plugins/main/bridge`).
//!
//! Differences, all deliberate:
//! - `ipMasq` and `macspoofchk` need nftables, which plexus does not drive
//!   yet: a configuration turning them on is refused by `validate` (code 2)
//!   instead of being half-applied.
//! - The veth is created with its container end directly in the pod
//!   namespace, named CNI_IFNAME, its host end enslaved and up, in one
//!   netlink request (the reference creates it in the pod and moves the host
//!   end out).
//! - A failed ADD also deletes a bridge it created itself if no port is left
//!   on it; the reference leaves it.
//! - DEL removes the container interface before releasing the addresses (as
//!   the reference bridge does): an address is never handed out again while
//!   an interface may still carry it.

use crate::drivers::error::{check_failed, lookup_name, sys, sys_error, DriverError};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;
use plexus_cni::names::{empty_is_none, IfName};
use plexus_cni::result::{CniResult, Interface, Route as CniRoute};
use plexus_cni::skel::Request;
use serde::Deserialize;

use super::attachment::Attach;
use super::iface::Dad;
use super::interface::{Call, InterfaceDriver};
use super::netconf::DnsConf;
use super::netconf::IpamRef;
use super::netconf::NAME_ATTEMPTS;
use super::undo::Undo;
use crate::drivers::{check, iface, netconf};
use crate::netlink::{
    AddressOptions, BridgePortOptions, BridgeSpec, BridgeVlan, IpFamily, Link, LinkKind, Netlink,
    VethSpec,
};
use crate::sysctl::{self, SysctlKey};
use crate::{MacAddr, NetNs};

/// The bridge used when the configuration names none.
pub const DEFAULT_BRIDGE: &str = "cni0";

/// Index of the container interface in the result's `interfaces`.
const CONTAINER_INTERFACE: i64 = 2;

/// What the bridge driver reads from the configuration.
#[derive(Debug, Default, Deserialize)]
struct Conf {
    /// Empty means [`DEFAULT_BRIDGE`], as the reference reads it.
    #[serde(default, deserialize_with = "empty_is_none::deserialize")]
    bridge: Option<IfName>,
    #[serde(rename = "isGateway")]
    is_gateway: Option<bool>,
    #[serde(rename = "isDefaultGateway")]
    is_default_gateway: Option<bool>,
    #[serde(rename = "forceAddress")]
    force_address: Option<bool>,
    #[serde(rename = "ipMasq")]
    ip_masq: Option<bool>,
    macspoofchk: Option<bool>,
    mtu: Option<i64>,
    #[serde(rename = "hairpinMode")]
    hairpin_mode: Option<bool>,
    #[serde(rename = "promiscMode")]
    promisc_mode: Option<bool>,
    vlan: Option<i64>,
    #[serde(rename = "vlanTrunk")]
    vlan_trunk: Option<Vec<VlanTrunk>>,
    #[serde(rename = "preserveDefaultVlan")]
    preserve_default_vlan: Option<bool>,
    enabledad: Option<bool>,
    #[serde(rename = "disableContainerInterface")]
    disable_container_interface: Option<bool>,
    #[serde(rename = "portIsolation")]
    port_isolation: Option<bool>,
    args: Option<ArgsConf>,
    ipam: Option<IpamRef>,
    dns: Option<DnsConf>,
}

#[derive(Debug, Default, Deserialize)]
struct ArgsConf {
    cni: Option<CniArgsConf>,
}

#[derive(Debug, Default, Deserialize)]
struct CniArgsConf {
    mac: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct VlanTrunk {
    #[serde(rename = "minID")]
    min_id: Option<i64>,
    #[serde(rename = "maxID")]
    max_id: Option<i64>,
    id: Option<i64>,
}

/// A validated bridge configuration.
#[derive(Debug)]
pub(crate) struct Settings {
    bridge: IfName,
    /// The host interface carrying the gateway of `vlan`, when the bridge is
    /// a gateway on a VLAN.
    vlan_gateway: Option<IfName>,
    is_gw: bool,
    is_default_gw: bool,
    force_address: bool,
    mtu: Option<u32>,
    hairpin: bool,
    promisc: bool,
    /// 0: no VLAN.
    vlan: u16,
    /// `vlanTrunk` was given (even empty): the bridge filters VLANs.
    trunk_given: bool,
    trunk: Vec<u16>,
    preserve_default_vlan: bool,
    dad: Dad,
    disable_container_interface: bool,
    port_isolation: bool,
    mac: Option<MacAddr>,
    ipam: Option<IpamRef>,
    dns: Option<DnsConf>,
}

impl Settings {
    fn vlan_filtering(&self) -> bool {
        self.vlan != 0 || self.trunk_given
    }

    fn parse(req: &Request) -> Result<Settings, DriverError> {
        let c: Conf = netconf::decode_config(req)?;
        let why = "not supported yet by plexus's built-in bridge (needs nftables)";
        netconf::unsupported("ipMasq", c.ip_masq, why)?;
        netconf::unsupported("macspoofchk", c.macspoofchk, why)?;

        let bridge = c
            .bridge
            .unwrap_or_else(|| IfName::new(DEFAULT_BRIDGE).expect("cni0 is an interface name"));
        let mtu = netconf::check_mtu(c.mtu, 68, 65535, "the largest Ethernet MTU")?;
        let vlan = match c.vlan.unwrap_or(0) {
            v @ 0..=4094 => v as u16,
            v => {
                return Err(DriverError::config(
                    "vlan",
                    format!("{v} is out of range: must be 0 (none) to 4094"),
                ))
            }
        };
        let trunk = collect_trunk(c.vlan_trunk.as_deref().unwrap_or_default())?;
        let hairpin = c.hairpin_mode.unwrap_or(false);
        let promisc = c.promisc_mode.unwrap_or(false);
        if hairpin && promisc {
            return Err(DriverError::config(
                "hairpinMode",
                "cannot be combined with promiscMode",
            ));
        }
        let disable_container_interface = c.disable_container_interface.unwrap_or(false);
        if disable_container_interface && netconf::has_ipam(&c.ipam) {
            return Err(DriverError::config(
                "disableContainerInterface",
                "cannot be combined with an IPAM plugin (ipam.type)",
            ));
        }
        let is_default_gw = c.is_default_gateway.unwrap_or(false);
        let is_gw = c.is_gateway.unwrap_or(false) || is_default_gw;
        let vlan_gateway = if is_gw && vlan != 0 {
            let gateway = IfName::new(format!("{bridge}.{vlan}")).map_err(|r| {
                DriverError::config(
                    "bridge",
                    format!("the gateway interface of vlan {vlan} would be {r}"),
                )
            })?;
            Some(gateway)
        } else {
            None
        };
        let args_mac = c
            .args
            .as_ref()
            .and_then(|a| a.cni.as_ref())
            .and_then(|c| c.mac.as_deref());
        let mac = netconf::pick_mac(&[
            ("CNI_ARGS MAC", netconf::cni_args_mac(req)?),
            ("args.cni.mac", args_mac),
            ("runtimeConfig.mac", netconf::runtime_config_mac(req)?),
        ])?;
        Ok(Settings {
            bridge,
            vlan_gateway,
            is_gw,
            is_default_gw,
            force_address: c.force_address.unwrap_or(false),
            mtu,
            hairpin,
            promisc,
            vlan,
            trunk_given: c.vlan_trunk.is_some(),
            trunk,
            preserve_default_vlan: c.preserve_default_vlan.unwrap_or(false),
            dad: if c.enabledad.unwrap_or(false) {
                Dad::On
            } else {
                Dad::Off
            },
            disable_container_interface,
            port_isolation: c.port_isolation.unwrap_or(false),
            mac,
            ipam: c.ipam,
            dns: c.dns,
        })
    }
}

/// The bridge-port settings of one port.
#[derive(Debug, Clone, Copy)]
struct Port<'a> {
    vlan: u16,
    trunk: &'a [u16],
    hairpin: bool,
    isolated: bool,
    preserve_default_vlan: bool,
}

impl Settings {
    /// The settings of a pod's port.
    fn pod_port(&self) -> Port<'_> {
        Port {
            vlan: self.vlan,
            trunk: &self.trunk,
            hairpin: self.hairpin,
            isolated: self.port_isolation,
            preserve_default_vlan: self.preserve_default_vlan,
        }
    }
}

/// `vlanTrunk` as the reference reads it: ranges `{minID, maxID}` and single
/// `{id}`s, each 1..=4094, merged, sorted and deduplicated.
fn collect_trunk(items: &[VlanTrunk]) -> Result<Vec<u16>, DriverError> {
    let at = |i: usize, field: &str| format!("vlanTrunk[{i}].{field}");
    let vid = |i: usize, field: &str, v: i64| -> Result<u16, DriverError> {
        if (1..=4094).contains(&v) {
            Ok(v as u16)
        } else {
            Err(DriverError::config(
                at(i, field),
                format!("{v} is out of range: must be 1 to 4094"),
            ))
        }
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match (item.min_id, item.max_id) {
            (Some(min), Some(max)) => {
                let (min, max) = (vid(i, "minID", min)?, vid(i, "maxID", max)?);
                if max < min {
                    return Err(DriverError::config(
                        format!("vlanTrunk[{i}]"),
                        format!("minID {min} is greater than maxID {max}"),
                    ));
                }
                out.extend(min..=max);
            }
            (None, Some(_)) => {
                return Err(DriverError::config(
                    at(i, "minID"),
                    "missing: minID and maxID go together",
                ))
            }
            (Some(_), None) => {
                return Err(DriverError::config(
                    at(i, "maxID"),
                    "missing: minID and maxID go together",
                ))
            }
            (None, None) => {}
        }
        if let Some(id) = item.id {
            out.push(vid(i, "id", id)?);
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The reference `bridge` plugin's driver: a veth pair whose host end is a
/// port of the bridge.
pub struct Bridge;

impl InterfaceDriver for Bridge {
    type Conf = Settings;
    const POD_LINK_KIND: Option<LinkKind> = Some(LinkKind::Veth);
    type Prepared = ();
    /// The bridge, the host veth and the container's end.
    type Made = (Link, Link, Link);

    fn parse(&self, req: &Request) -> Result<Settings, DriverError> {
        Settings::parse(req)
    }

    fn ipam<'c>(&self, s: &'c Settings) -> &'c Option<IpamRef> {
        &s.ipam
    }

    fn prepare(&self, _: &Call<'_, Settings>) -> Result<(), DriverError> {
        Ok(())
    }

    fn create<'a>(
        &'a self,
        call: &Call<'a, Settings>,
        _: &'a (),
        undo: &mut Undo<'a>,
    ) -> Result<Self::Made, DriverError> {
        attach_port(call.conf, call.at, undo)
    }

    fn configure(
        &self,
        call: &Call<'_, Settings>,
        (bridge, veth, container): Self::Made,
        ipam: Option<CniResult>,
    ) -> Result<CniResult, DriverError> {
        configure(call, bridge, veth, container, ipam)
    }

    fn check(&self, call: &Call<'_, Settings>, prev: &CniResult) -> Result<(), DriverError> {
        check(call.conf, call.at, prev)
    }
}

/// The result, the pod interface's addresses and routes, and the gateway.
fn configure(
    call: &Call<'_, Settings>,
    bridge: Link,
    veth: Link,
    container: Link,
    ipam: Option<CniResult>,
) -> Result<CniResult, DriverError> {
    let (req, s, ctx) = (call.req, call.conf, call.at);
    let host = &ctx.host;
    let mut result = CniResult {
        cni_version: Some(req.cni_version),
        interfaces: vec![
            Interface {
                name: bridge.name.to_string(),
                mac: bridge.mac.map(|m| m.to_string()),
                ..Interface::default()
            },
            Interface {
                name: veth.name.to_string(),
                mac: veth.mac.map(|m| m.to_string()),
                ..Interface::default()
            },
            ctx.interface_of(&container),
        ],
        ..CniResult::default()
    };

    if let Some(ipam) = ipam {
        result.ips = ipam.ips;
        result.routes = ipam.routes;
        result.dns = ipam.dns;
        let gateways = calc_gateways(&mut result, s);
        iface::configure_iface(
            ctx,
            container.index,
            &result,
            s.dad,
            &["net/ipv4/conf/IFNAME/arp_notify"],
        )?;
        if s.is_gw {
            let target = if let Some(gateway) = &s.vlan_gateway {
                let gw = ensure_vlan_gateway(host, &bridge, gateway, s)?;
                result.interfaces.push(Interface {
                    name: gw.name.to_string(),
                    mac: gw.mac.map(|m| m.to_string()),
                    ..Interface::default()
                });
                gw
            } else {
                bridge.clone()
            };
            ensure_gateway_addresses(host, &target, &gateways, s.force_address)?;
            enable_forwarding(&gateways)?;
        }
    } else if !s.disable_container_interface {
        ctx.pod
            .set_up(container.index)
            .map_err(sys(format_args!("set {} up", ctx.ifname)))?;
    }

    if let Some(dns) = s.dns.as_ref().filter(|d| d.is_set()) {
        result.dns = dns.to_dns();
    }
    Ok(result)
}

/// The bridge (read again once it has the port), the host veth and the pod's
/// end of it.
fn attach_port<'a>(
    s: &Settings,
    ctx: &'a Attach<'a>,
    undo: &mut Undo<'a>,
) -> Result<(Link, Link, Link), DriverError> {
    let host = &ctx.host;
    let bridge = ensure_bridge(host, s, undo)?;
    let veth = create_port_veth(host, &bridge, &ctx.ifname, Some(ctx.pod_ns), s.mtu, s.mac)
        .map_err(|e| match e {
            PortError::PeerTaken => ctx.ifname_taken(),
            PortError::Other(e) => e,
        })?;
    let veth_index = veth.index;
    undo.push(format!("host veth {}", veth.name), move || {
        host.del_link(veth_index)
            .map(drop)
            .map_err(sys("delete the host veth"))
    });
    setup_port(host, &veth, &s.pod_port())?;
    let container = ctx.pod_link()?;
    // Read the bridge again now that it has this port: a bridge without a
    // MAC of its own takes the lowest of its ports' (and all zeros when it
    // has none).
    let bridge = host
        .link_by_index(bridge.index)
        .map_err(sys(format_args!("look up bridge {}", s.bridge)))?
        .ok_or_else(|| sys_error(format_args!("bridge {}", s.bridge), "vanished"))?;
    Ok((bridge, veth, container))
}

/// The configured bridge, created (up, with the configured MTU) if missing.
/// An existing bridge is reused as it is, except that it is brought up and
/// made promiscuous when `promiscMode` asks.
fn ensure_bridge<'a>(
    host: &'a Netlink,
    s: &Settings,
    undo: &mut Undo<'a>,
) -> Result<Link, DriverError> {
    let name = &s.bridge;
    let lookup = || {
        host.link_by_name(name)
            .map_err(sys(format_args!("look up bridge {name}")))
    };
    let mut bridge = match lookup()? {
        Some(link) => link,
        None => {
            let spec = BridgeSpec {
                mtu: s.mtu,
                vlan_filtering: s.vlan_filtering().then_some(true),
                up: true,
                ..BridgeSpec::new(name.clone())
            };
            match host.create_bridge(&spec) {
                Ok(link) => {
                    let index = link.index;
                    undo.push(format!("bridge {name}"), move || {
                        delete_if_portless(host, index)
                    });
                    // We own the routes of this interface: no router
                    // advertisements.
                    best_effort_sysctl("net/ipv6/conf/IFNAME/accept_ra", name, "0");
                    link
                }
                // Created meanwhile by a concurrent ADD.
                Err(e) if e.is_exists() => lookup()?.ok_or_else(|| {
                    sys_error(
                        format_args!("bridge {name}"),
                        "vanished right after creation",
                    )
                })?,
                Err(e) => return Err(sys_error(format_args!("create bridge {name}"), e)),
            }
        }
    };
    if bridge.kind != Some(LinkKind::Bridge) {
        return Err(DriverError::config(
            "bridge",
            format!("{name:?} already exists but is not a bridge"),
        ));
    }
    if s.promisc && !bridge.promisc {
        host.set_promisc(bridge.index, true)
            .map_err(sys(format_args!("make bridge {name} promiscuous")))?;
        bridge.promisc = true;
    }
    if !bridge.up {
        host.set_up(bridge.index)
            .map_err(sys(format_args!("set bridge {name} up")))?;
        bridge.up = true;
    }
    Ok(bridge)
}

/// Undo of a bridge this ADD created: delete it unless another attachment
/// has put a port on it meanwhile.
fn delete_if_portless(host: &Netlink, index: u32) -> Result<(), DriverError> {
    let links = host.links().map_err(sys("list links"))?;
    if links.iter().any(|l| l.master == Some(index)) {
        return Ok(());
    }
    host.del_link(index)
        .map(drop)
        .map_err(sys("delete the bridge"))
}

fn best_effort_sysctl(template: &str, ifname: &IfName, value: &str) {
    if let Ok(k) = SysctlKey::for_interface(template, ifname) {
        let _ = sysctl::write_current(&k, value);
    }
}

enum PortError {
    /// The peer's name is taken where the peer was to be created.
    PeerTaken,
    Other(DriverError),
}

/// A veth pair whose host end (a fresh random name) is a port of `bridge`,
/// up, and whose other end is `peer_name` in `peer_ns` (or next to the host
/// end). Returns the host end.
fn create_port_veth(
    host: &Netlink,
    bridge: &Link,
    peer_name: &IfName,
    peer_ns: Option<&NetNs>,
    mtu: Option<u32>,
    peer_mac: Option<MacAddr>,
) -> Result<Link, PortError> {
    let mut last = None;
    for _ in 0..NAME_ATTEMPTS {
        let name = netconf::random_name("veth");
        let spec = VethSpec {
            peer_netns: peer_ns,
            mtu,
            peer_mac,
            master: Some(bridge.index),
            up: true,
            ..VethSpec::new(name.clone(), peer_name.clone())
        };
        match host.create_veth(&spec) {
            Ok(link) => {
                best_effort_sysctl("net/ipv6/conf/IFNAME/accept_ra", &link.name, "0");
                return Ok(link);
            }
            Err(e) if e.is_exists() => {
                // Either name may be the taken one: a taken host name is
                // retried with another, a taken peer name is the caller's.
                let host_taken = host
                    .link_by_name(&name)
                    .map_err(|e| PortError::Other(sys_error("look up a host veth name", e)))?
                    .is_some();
                if !host_taken {
                    return Err(PortError::PeerTaken);
                }
                last = Some(e);
            }
            Err(e) => {
                return Err(PortError::Other(sys_error(
                    format_args!(
                        "create veth {name} for {peer_name} on bridge {}",
                        bridge.name
                    ),
                    e,
                )))
            }
        }
    }
    Err(PortError::Other(sys_error(
        "create veth",
        format_args!(
            "no free host-side name after {NAME_ATTEMPTS} attempts (last: {})",
            last.map(|e| e.to_string()).unwrap_or_default()
        ),
    )))
}

/// Bridge-port settings of a new port: hairpin and isolation (only sent
/// when on: a new port has both off), then its VLANs as the reference sets
/// them (the default VLAN 1 removed unless `preserveDefaultVlan`; `vlan` as
/// PVID untagged; trunk VLANs tagged; VLAN 1 native on a trunk without
/// `vlan`).
fn setup_port(host: &Netlink, port: &Link, p: &Port) -> Result<(), DriverError> {
    let what = |action: &str| format!("{action} of bridge port {}", port.name);
    if p.hairpin || p.isolated {
        let opts = BridgePortOptions {
            hairpin: Some(p.hairpin),
            isolated: Some(p.isolated),
        };
        host.set_bridge_port(port.index, &opts)
            .map_err(sys(what("set hairpin/isolation")))?;
    }
    let tagged = p.vlan != 0 || !p.trunk.is_empty();
    if tagged && !p.preserve_default_vlan {
        let existing = host
            .bridge_vlans(port.index)
            .map_err(sys(what("list the vlans")))?;
        for v in existing {
            host.bridge_vlan_del(port.index, v.vid)
                .map_err(sys(what("remove the default vlan")))?;
        }
    }
    if p.vlan != 0 {
        host.bridge_vlan_add(port.index, BridgeVlan::native(p.vlan))
            .map_err(sys(what("set vlan")))?;
    }
    for v in p.trunk {
        host.bridge_vlan_add(port.index, BridgeVlan::tagged(*v))
            .map_err(sys(what("add trunk vlan")))?;
    }
    if p.vlan == 0 && !p.trunk.is_empty() {
        host.bridge_vlan_add(port.index, BridgeVlan::native(1))
            .map_err(sys(what("set the native vlan 1")))?;
    }
    Ok(())
}

/// The interface carrying the gateway address of VLAN `s.vlan`: a veth in
/// the host namespace named `<bridge>.<vlan>` whose other end is a bridge
/// port on that VLAN (created on first use, then shared).
fn ensure_vlan_gateway(
    host: &Netlink,
    bridge: &Link,
    name: &IfName,
    s: &Settings,
) -> Result<Link, DriverError> {
    let lookup = || {
        host.link_by_name(name)
            .map_err(sys(format_args!("look up {name}")))
    };
    if let Some(link) = lookup()? {
        return Ok(link);
    }
    let port = create_port_veth(host, bridge, name, None, bridge_mtu(bridge), None).map_err(
        |e| match e {
            PortError::PeerTaken => {
                sys_error(format_args!("create {name}"), "created concurrently")
            }
            PortError::Other(e) => e,
        },
    )?;
    let gateway_port = Port {
        trunk: &[],
        hairpin: false,
        isolated: false,
        ..s.pod_port()
    };
    setup_port(host, &port, &gateway_port)?;
    let gw = lookup()?.ok_or_else(|| sys_error(format_args!("{name}"), "vanished"))?;
    host.set_up(gw.index)
        .map_err(sys(format_args!("set {name} up")))?;
    Ok(gw)
}

fn bridge_mtu(bridge: &Link) -> Option<u32> {
    Some(bridge.mtu).filter(|m| *m != 0)
}

/// Gateway addresses (with the subnet's prefix) per family.
#[derive(Debug, Default)]
struct Gateways {
    v4: Vec<IpNetwork>,
    v6: Vec<IpNetwork>,
}

/// As the reference's `calcGateways`: every IP belongs to the container
/// interface; with `isGateway`, an IP without gateway gets its subnet's first
/// address; with `isDefaultGateway`, each family without a default route
/// (with a gateway) gets one through its first gateway.
fn calc_gateways(result: &mut CniResult, s: &Settings) -> Gateways {
    let mut gws = Gateways::default();
    let mut default_found = [false, false];
    for ip in &mut result.ips {
        ip.interface = Some(CONTAINER_INTERFACE);
        let v4 = ip.address.is_ipv4();
        if ip.gateway.is_none() && s.is_gw {
            ip.gateway = Some(first_address(ip.address));
        }
        let slot = usize::from(!v4);
        if s.is_default_gw && !default_found[slot] {
            let has_default = result
                .routes
                .iter()
                .any(|r| r.gw.is_some() && r.is_default() && r.dst.is_ipv4() == v4);
            if !has_default {
                result
                    .routes
                    .push(CniRoute::to(default_network(v4), ip.gateway));
            }
            default_found[slot] = true;
        }
        if s.is_gw {
            if let Some(gw) = ip.gateway {
                if let Ok(net) = IpNetwork::new(gw, ip.address.prefix()) {
                    if v4 { &mut gws.v4 } else { &mut gws.v6 }.push(net);
                }
            }
        }
    }
    gws
}

fn default_network(v4: bool) -> IpNetwork {
    let unspecified: IpAddr = if v4 {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    };
    IpNetwork::new(unspecified, 0).expect("prefix 0 is valid")
}

/// The address after the network address of `net` (`10.1.2.0/24` → `10.1.2.1`).
fn first_address(net: IpNetwork) -> IpAddr {
    match net {
        IpNetwork::V4(n) => Ipv4Addr::from(u32::from(n.network()).wrapping_add(1)).into(),
        IpNetwork::V6(n) => Ipv6Addr::from(u128::from(n.network()).wrapping_add(1)).into(),
    }
}

/// As the reference's `ensureAddr`, for every gateway: nothing if the link
/// has the address already; otherwise a conflicting address (any other IPv4
/// one, an overlapping IPv6 one) is an error, or removed with
/// `forceAddress`; then the address is added and the link's MAC pinned (a
/// bridge otherwise takes the lowest port MAC, changing as pods come and go).
fn ensure_gateway_addresses(
    host: &Netlink,
    link: &Link,
    gws: &Gateways,
    force: bool,
) -> Result<(), DriverError> {
    if gws.v4.is_empty() && gws.v6.is_empty() {
        return Ok(());
    }
    // Only the gateways' families can conflict.
    let family = match (gws.v4.is_empty(), gws.v6.is_empty()) {
        (false, true) => Some(IpFamily::V4),
        (true, false) => Some(IpFamily::V6),
        _ => None,
    };
    let mut existing: Vec<IpNetwork> = host
        .addresses_in(link.index, family)
        .map_err(sys(format_args!("list addresses of {}", link.name)))?
        .into_iter()
        .map(|a| a.addr)
        .collect();
    for gw in gws.v4.iter().chain(&gws.v6) {
        if existing.contains(gw) {
            continue;
        }
        let conflicts: Vec<IpNetwork> = existing
            .iter()
            .filter(|a| a.is_ipv4() == gw.is_ipv4())
            .filter(|a| gw.is_ipv4() || a.contains(gw.ip()) || gw.contains(a.ip()))
            .copied()
            .collect();
        for a in conflicts {
            if !force {
                return Err(DriverError::config(
                    "forceAddress",
                    format!(
                        "{:?} already has an IP address ({a}) different from {gw}; \
                         set forceAddress to replace it",
                        link.name
                    ),
                ));
            }
            host.del_address(link.index, a)
                .map_err(sys(format_args!("remove {a} from {}", link.name)))?;
            existing.retain(|e| *e != a);
        }
        match host.add_address(link.index, *gw, AddressOptions::default()) {
            Ok(()) => {}
            Err(e) if e.is_exists() => {}
            Err(e) => return Err(sys_error(format_args!("add {gw} to {}", link.name), e)),
        }
        existing.push(*gw);
        if let Some(mac) = link.mac.filter(|m| m.0 != [0; 6]) {
            host.set_mac(link.index, mac)
                .map_err(sys(format_args!("pin the MAC of {}", link.name)))?;
        }
    }
    Ok(())
}

/// IP forwarding for each family that has a gateway, in the namespace the
/// driver runs in, written only when not on already (as the reference's
/// `echo1`, which also keeps read-only /proc/sys working).
fn enable_forwarding(gws: &Gateways) -> Result<(), DriverError> {
    let keys = [
        (!gws.v4.is_empty(), "net/ipv4/ip_forward"),
        (!gws.v6.is_empty(), "net/ipv6/conf/all/forwarding"),
    ];
    for (_, key) in keys.iter().filter(|(on, _)| *on) {
        let k = SysctlKey::parse(key).map_err(sys("sysctl key"))?;
        if sysctl::read_current(&k).is_ok_and(|v| v == "1") {
            continue;
        }
        sysctl::write_current(&k, "1").map_err(sys("enable forwarding"))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// CHECK

/// cni-SPEC §2 CHECK for a bridge attachment, as the reference checks it:
/// the bridge (a bridge, its MAC, promiscuity as configured), the container
/// veth (its MAC), the host veth (the container end's peer, a port of the
/// bridge, its MAC), then addresses and routes.
fn check(s: &Settings, ctx: &Attach<'_>, prev: &CniResult) -> Result<(), DriverError> {
    let host = &ctx.host;

    let bridge_entry = prev
        .interfaces
        .iter()
        .find(|i| i.name == s.bridge)
        .ok_or_else(|| {
            check_failed(format!(
                "prevResult.interfaces: no entry for bridge {}",
                s.bridge
            ))
        })?;
    if bridge_entry.in_sandbox() {
        return Err(check_failed(format!(
            "bridge {} should not be in a sandbox",
            s.bridge
        )));
    }
    let bridge = host
        .link_by_name(&s.bridge)
        .map_err(sys(format_args!("look up bridge {}", s.bridge)))?
        .ok_or_else(|| check_failed(format!("bridge {} not found", s.bridge)))?;
    if bridge.kind != Some(LinkKind::Bridge) {
        return Err(check_failed(format!("{} is not a bridge", s.bridge)));
    }
    check::check_mac(&bridge, bridge_entry, "bridge")?;
    if bridge.promisc != s.promisc {
        return Err(check_failed(format!(
            "bridge {}: promiscuous mode is {}, promiscMode says {}",
            s.bridge, bridge.promisc, s.promisc
        )));
    }

    let cont_entry = check::prev_container_interface(prev, ctx)?;
    let cont = check::container_link_of_kind(ctx, LinkKind::Veth, "veth")?;
    check::check_mac(&cont, cont_entry, "container")?;

    // The host veth: a host-side entry of the prevResult that is the
    // container end's peer and a port of the bridge. Anything else listed
    // was not made by this driver.
    let mut found = false;
    for entry in prev
        .interfaces
        .iter()
        .filter(|i| !i.in_sandbox() && i.name != bridge_entry.name && i.name != cont_entry.name)
    {
        let Some(link) = host
            .link_by_name(&lookup_name(
                format_args!("look up {}", entry.name),
                &entry.name,
            )?)
            .map_err(sys(format_args!("look up {}", entry.name)))?
        else {
            return Err(check_failed(format!(
                "host interface {} not found",
                entry.name
            )));
        };
        if link.kind == Some(LinkKind::Veth)
            && Some(link.index) == cont.parent
            && link.parent == Some(cont.index)
            && link.master == Some(bridge.index)
        {
            check::check_mac(&link, entry, "host")?;
            found = true;
            break;
        }
    }
    if !found {
        return Err(check_failed(format!(
            "the host veth of {} on bridge {} was not found",
            ctx.ifname, s.bridge
        )));
    }
    check::check_ips_and_routes(ctx, &cont, prev)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drivers::test_support;
    use plexus_cni::env::CniEnv;
    use plexus_cni::error::ErrorCode;
    use plexus_cni::result::IpConfig;
    use serde_json::json;

    fn req(config: serde_json::Value) -> Request {
        let env = CniEnv::from_lookup(|k| {
            match k {
                "CNI_COMMAND" => Some("ADD"),
                "CNI_CONTAINERID" => Some("c1"),
                "CNI_NETNS" => Some("/var/run/netns/x"),
                "CNI_IFNAME" => Some("eth0"),
                "CNI_PATH" => Some("/opt/cni/bin"),
                _ => None,
            }
            .map(str::to_string)
        })
        .unwrap();
        let serde_json::Value::Object(map) = config else {
            panic!()
        };
        Request::from_config(env, map).unwrap()
    }

    fn parse(config: serde_json::Value) -> Result<Settings, DriverError> {
        Settings::parse(&req(config))
    }

    #[test]
    fn defaults() {
        let s = parse(json!({"cniVersion": "1.0.0", "type": "bridge"})).unwrap();
        assert_eq!(s.bridge, "cni0");
        assert!(!s.is_gw && !s.is_default_gw && !s.vlan_filtering());
        assert_eq!(s.dad, Dad::Off);
        assert_eq!(s.mtu, None);
        assert_eq!(s.mac, None);
    }

    #[test]
    fn keys_fold_case_like_go() {
        let s = parse(
            json!({"cniVersion": "1.0.0", "Bridge": "br1", "ISGATEWAY": true,
                             "mtu": 1400, "EnableDAD": true}),
        )
        .unwrap();
        assert_eq!(s.bridge, "br1");
        assert!(s.is_gw);
        assert_eq!(s.mtu, Some(1400));
        assert_eq!(s.dad, Dad::On);
    }

    #[test]
    fn default_gateway_implies_gateway() {
        let s = parse(json!({"cniVersion": "1.0.0", "isDefaultGateway": true})).unwrap();
        assert!(s.is_gw && s.is_default_gw);
    }

    #[test]
    fn nftables_features_are_refused_by_name() {
        for key in ["ipMasq", "macspoofchk"] {
            let e = parse(json!({"cniVersion": "1.0.0", key: true})).unwrap_err();
            assert_eq!(
                e,
                DriverError::Unsupported {
                    key: key.into(),
                    why: "not supported yet by plexus's built-in bridge (needs nftables)".into()
                }
            );
            parse(json!({"cniVersion": "1.0.0", key: false})).unwrap();
        }
    }

    #[test]
    fn bad_values_name_their_key() {
        // `key: reason` as the error says it.
        for (conf, starts) in [
            (json!({"mtu": "1500"}), "mtu: invalid type: string"),
            (json!({"mtu": 20}), "mtu: 20 is out of range"),
            (json!({"mtu": 70000}), "mtu: 70000 is out of range"),
            (json!({"vlan": 4095}), "vlan: 4095 is out of range"),
            (json!({"vlan": -1}), "vlan: -1 is out of range"),
            (
                json!({"isGateway": "yes"}),
                "isGateway: invalid type: string",
            ),
            (json!({"bridge": "a/b"}), "bridge: \"a/b\" must not contain"),
            (
                json!({"bridge": "averyveryverylongname"}),
                "bridge: \"averyveryverylongname\" is 21 bytes",
            ),
            (
                json!({"hairpinMode": true, "promiscMode": true}),
                "hairpinMode: cannot be combined",
            ),
            (
                json!({"disableContainerInterface": true, "ipam": {"type": "static"}}),
                "disableContainerInterface: cannot be combined",
            ),
            (
                json!({"vlanTrunk": [{"minID": 5}]}),
                "vlanTrunk[0].maxID: missing",
            ),
            (
                json!({"vlanTrunk": [{"id": 3}, {"maxID": 5}]}),
                "vlanTrunk[1].minID: missing",
            ),
            (
                json!({"vlanTrunk": [{"minID": 9, "maxID": 5}]}),
                "vlanTrunk[0]: minID 9 is greater",
            ),
            (
                json!({"vlanTrunk": [{"id": 0}]}),
                "vlanTrunk[0].id: 0 is out of range",
            ),
            (
                json!({"vlanTrunk": [null]}),
                "vlanTrunk[0]: invalid type: null",
            ),
            (
                json!({"args": {"cni": {"mac": "nope"}}}),
                "args.cni.mac: invalid MAC address",
            ),
            (
                json!({"runtimeConfig": {"mac": 5}}),
                "runtimeConfig.mac: must be a string",
            ),
            (
                json!({"bridge": "br-with-long", "vlan": 1000, "isGateway": true}),
                "bridge: the gateway interface of vlan 1000 would be",
            ),
        ] {
            let mut conf = conf;
            conf["cniVersion"] = json!("1.0.0");
            let (key, reason) = starts.split_once(": ").unwrap();
            let d = test_support::unit_test_refused(parse(conf.clone()), &conf, key);
            assert!(d.starts_with(reason), "{conf}: {d}");
        }
    }

    #[test]
    fn unknown_keys_are_ignored_whatever_their_type() {
        parse(json!({"cniVersion": "1.0.0", "frobnicate": [1, {"x": null}], "mtuu": "x"})).unwrap();
    }

    #[test]
    fn trunk_is_merged_sorted_and_deduplicated() {
        let s = parse(json!({"cniVersion": "1.0.0",
            "vlanTrunk": [{"id": 7}, {"minID": 3, "maxID": 5}, {"id": 4}]}))
        .unwrap();
        assert_eq!(s.trunk, [3, 4, 5, 7]);
        assert!(s.vlan_filtering());
        let s = parse(json!({"cniVersion": "1.0.0", "vlanTrunk": []})).unwrap();
        assert!(s.trunk.is_empty() && s.vlan_filtering());
    }

    #[test]
    fn mac_precedence() {
        let mut r = req(
            json!({"cniVersion": "1.0.0", "args": {"cni": {"mac": "02:00:00:00:00:02"}},
                               "runtimeConfig": {"mac": "02:00:00:00:00:03"}}),
        );
        r.env.attachment_mut().unwrap().args =
            plexus_cni::args::CniArgs::parse("MAC=02:00:00:00:00:01").unwrap();
        assert_eq!(
            Settings::parse(&r).unwrap().mac.unwrap().to_string(),
            "02:00:00:00:00:03"
        );
        r.runtime_config.clear();
        assert_eq!(
            Settings::parse(&r).unwrap().mac.unwrap().to_string(),
            "02:00:00:00:00:02"
        );
        r.config.remove("args");
        assert_eq!(
            Settings::parse(&r).unwrap().mac.unwrap().to_string(),
            "02:00:00:00:00:01"
        );
        // Other CNI_ARGS keys need IgnoreUnknown, as in the reference.
        r.env.attachment_mut().unwrap().args =
            plexus_cni::args::CniArgs::parse("K8S_POD_NAME=x").unwrap();
        assert!(matches!(
            Settings::parse(&r),
            Err(DriverError::Cni(e)) if e.code == ErrorCode::InvalidEnvironment
        ));
        r.env.attachment_mut().unwrap().args =
            plexus_cni::args::CniArgs::parse("IgnoreUnknown=1;K8S_POD_NAME=x").unwrap();
        assert_eq!(Settings::parse(&r).unwrap().mac, None);
    }

    fn ip(addr: &str, gw: Option<&str>) -> IpConfig {
        IpConfig {
            address: addr.parse().unwrap(),
            gateway: gw.map(|g| g.parse().unwrap()),
            interface: None,
        }
    }

    #[test]
    fn gateways_like_the_reference() {
        let s = parse(json!({"cniVersion": "1.0.0", "isDefaultGateway": true})).unwrap();
        let mut r = CniResult {
            ips: vec![
                ip("10.1.2.5/24", None),
                ip("10.9.0.5/16", Some("10.9.0.254")),
                ip("fd00::5/64", None),
            ],
            ..CniResult::default()
        };
        let gws = calc_gateways(&mut r, &s);
        assert!(r.ips.iter().all(|i| i.interface == Some(2)));
        assert_eq!(r.ips[0].gateway, Some("10.1.2.1".parse().unwrap()));
        assert_eq!(r.ips[2].gateway, Some("fd00::1".parse().unwrap()));
        assert_eq!(
            gws.v4,
            [
                "10.1.2.1/24".parse().unwrap(),
                "10.9.0.254/16".parse().unwrap()
            ]
        );
        assert_eq!(gws.v6, ["fd00::1/64".parse::<IpNetwork>().unwrap()]);
        // One default route per family, through the first gateway.
        let defaults: Vec<String> = r
            .routes
            .iter()
            .map(|r| format!("{} {}", r.dst, r.gw.unwrap()))
            .collect();
        assert_eq!(defaults, ["0.0.0.0/0 10.1.2.1", "::/0 fd00::1"]);

        // An IPAM default route with a gateway is kept, not doubled.
        let mut r = CniResult {
            ips: vec![ip("10.1.2.5/24", None)],
            routes: vec![CniRoute::default_via("10.1.2.254".parse().unwrap())],
            ..CniResult::default()
        };
        calc_gateways(&mut r, &s);
        assert_eq!(r.routes.len(), 1);

        // Without isGateway: no gateway invented, none collected.
        let s = parse(json!({"cniVersion": "1.0.0"})).unwrap();
        let mut r = CniResult {
            ips: vec![ip("10.1.2.5/24", None)],
            ..CniResult::default()
        };
        let gws = calc_gateways(&mut r, &s);
        assert_eq!(r.ips[0].gateway, None);
        assert!(gws.v4.is_empty() && r.routes.is_empty());
    }
}
