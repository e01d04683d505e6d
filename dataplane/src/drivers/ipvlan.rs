//! The `ipvlan` driver: an ipvlan on a master interface, created directly in
//! the pod namespace as CNI_IFNAME. Config keys, defaults, result shape and
//! DEL semantics follow the reference plugin (containernetworking/plugins
//! `plugins/main/ipvlan`); the shared flow and its deliberate differences
//! are in [`super::stacked`].
//!
//! Keys: `master` (default: in a chain, the prevResult's only interface;
//! otherwise the interface of the default route), `mode` (l2 | l3 | l3s;
//! default l2), `mtu` (0 to the master's MTU), `linkInContainer`, `ipam`
//! (required unless a prevResult brings addresses), `dns`. An ipvlan shares
//! its master's MAC, so there is no `mac`.

use plexus_cni::delegate::Resolver;
use plexus_cni::error::CniError;
use plexus_cni::skel::Request;
use serde::Deserialize;

use super::common::{self, DnsConf, IpamRef};
use super::stacked::{self, Conf, Mode, Stacked};
use crate::netlink::{IpvlanMode, LinkKind};

#[derive(Debug, Default, Deserialize)]
struct IpvlanConf {
    master: Option<String>,
    mode: Option<String>,
    mtu: Option<i64>,
    #[serde(rename = "linkInContainer")]
    link_in_container: Option<bool>,
    ipam: Option<IpamRef>,
    dns: Option<DnsConf>,
}

fn parse(req: &Request) -> Result<Conf, CniError> {
    let c: IpvlanConf = common::decode_config(req)?;
    let mode = stacked::parse_mode("ipvlan", c.mode.as_deref(), IpvlanMode::L2, "l2, l3 or l3s")?;
    Conf {
        master: c.master.filter(|m| !m.is_empty()),
        mode: Mode::Ipvlan(mode),
        mtu: c.mtu,
        mac: None,
        link_in_container: c.link_in_container.unwrap_or(false),
        ipam: c.ipam,
        dns: c.dns,
    }
    .validate(req)
}

/// The reference `ipvlan` plugin, built in.
pub fn ipvlan(resolver: &dyn Resolver) -> Stacked<'_> {
    Stacked::new(resolver, LinkKind::Ipvlan, parse)
}
