//! The `ipvlan` driver: an ipvlan on a master interface, created directly in
//! the pod namespace as CNI_IFNAME. Config keys, defaults, result shape and
//! DEL semantics follow the reference plugin (containernetworking/plugins
//! `plugins/main/ipvlan`); the shared flow and its deliberate differences
//! are in `stacked`.
//!
//! Keys: `master` (default: in a chain, the prevResult's only interface;
//! otherwise the interface of the default route), `mode` (l2 | l3 | l3s;
//! default l2), `mtu` (0 to the master's MTU), `linkInContainer`, `ipam`
//! (required unless a prevResult brings addresses), `dns`. An ipvlan shares
//! its master's MAC, so there is no `mac`.

use crate::drivers::error::DriverError;
use plexus_cni::names::{empty_is_none, IfName};
use plexus_cni::skel::Request;
use serde::Deserialize;

use super::netconf::DnsConf;
use super::netconf::IpamRef;
use super::stacked::{self, Conf, Spec, Stacked};
use crate::drivers::netconf;
use crate::netlink::{IpvlanMode, IpvlanSpec, Link, LinkKind, Netlink};
use crate::Error;

#[derive(Debug, Default, Deserialize)]
struct IpvlanConf {
    /// Empty means none, as the reference reads it.
    #[serde(default, deserialize_with = "empty_is_none::deserialize")]
    master: Option<IfName>,
    mode: Option<String>,
    mtu: Option<i64>,
    #[serde(rename = "linkInContainer")]
    link_in_container: Option<bool>,
    ipam: Option<IpamRef>,
    dns: Option<DnsConf>,
}

/// The reference `ipvlan` plugin's driver.
pub struct Ipvlan;

impl Stacked for Ipvlan {
    type Mode = IpvlanMode;
    const KIND: &'static str = "ipvlan";
    const LINK_KIND: LinkKind = LinkKind::Ipvlan;
    const CHAINS: bool = true;

    fn parse(req: &Request) -> Result<Conf<IpvlanMode>, DriverError> {
        let c: IpvlanConf = netconf::decode_config(req)?;
        let mode =
            stacked::parse_mode("ipvlan", c.mode.as_deref(), IpvlanMode::L2, "l2, l3 or l3s")?;
        Ok(Conf {
            master: c.master,
            mode,
            mtu: c.mtu,
            mac: None,
            link_in_container: c.link_in_container.unwrap_or(false),
            ipam: c.ipam,
            dns: c.dns,
        })
    }

    fn create(nl: &Netlink, spec: Spec<'_>, mode: IpvlanMode) -> Result<Option<Link>, Error> {
        nl.create_ipvlan(&IpvlanSpec {
            netns: spec.netns,
            mtu: spec.mtu,
            ..IpvlanSpec::new(spec.name.clone(), spec.master, mode)
        })
    }

    fn mode_of(link: &Link) -> Option<IpvlanMode> {
        link.ipvlan_mode
    }

    fn mode_name(mode: IpvlanMode) -> String {
        mode.as_str().into()
    }
}
