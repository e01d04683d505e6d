//! The `macvlan` driver: a macvlan on a master interface, created directly
//! in the pod namespace as CNI_IFNAME. Config keys, defaults, result shape
//! and DEL semantics follow the reference plugin
//! (containernetworking/plugins `plugins/main/macvlan`); the shared flow and
//! its deliberate differences are in `stacked`.
//!
//! Keys: `master` (default: the interface of the default route, in the
//! namespace the master lives in), `mode` (bridge | private | vepa |
//! passthru | source; default bridge), `mtu` (0 to the master's MTU), `mac`,
//! `linkInContainer`, `ipam` (optional: without it the attachment is layer 2
//! only), `dns`. The MAC is the last given of `mac`, `CNI_ARGS` `MAC` and
//! `runtimeConfig.mac`.

use crate::drivers::error::DriverError;
use plexus_cni::names::{empty_is_none, IfName};
use plexus_cni::skel::Request;
use serde::Deserialize;

use super::netconf::DnsConf;
use super::netconf::IpamRef;
use super::stacked::{self, Conf, Spec, Stacked};
use crate::drivers::netconf;
use crate::netlink::{Link, LinkKind, MacvlanMode, MacvlanSpec, Netlink};
use crate::Error;

#[derive(Debug, Default, Deserialize)]
struct MacvlanConf {
    /// Empty means none, as the reference reads it.
    #[serde(default, deserialize_with = "empty_is_none::deserialize")]
    master: Option<IfName>,
    mode: Option<String>,
    mtu: Option<i64>,
    mac: Option<String>,
    #[serde(rename = "linkInContainer")]
    link_in_container: Option<bool>,
    ipam: Option<IpamRef>,
    dns: Option<DnsConf>,
}

/// The reference `macvlan` plugin's driver.
pub struct Macvlan;

impl Stacked for Macvlan {
    type Mode = MacvlanMode;
    const KIND: &'static str = "macvlan";
    const LINK_KIND: LinkKind = LinkKind::Macvlan;
    const CHAINS: bool = false;

    fn parse(req: &Request) -> Result<Conf<MacvlanMode>, DriverError> {
        let c: MacvlanConf = netconf::decode_config(req)?;
        let mode = stacked::parse_mode(
            "macvlan",
            c.mode.as_deref(),
            MacvlanMode::Bridge,
            "bridge, private, vepa, passthru or source",
        )?;
        let mac = netconf::pick_mac(&[
            ("mac", c.mac.as_deref()),
            ("CNI_ARGS MAC", netconf::cni_args_mac(req)?),
            ("runtimeConfig.mac", netconf::runtime_config_mac(req)?),
        ])?;
        Ok(Conf {
            master: c.master,
            mode,
            mtu: c.mtu,
            mac,
            link_in_container: c.link_in_container.unwrap_or(false),
            ipam: c.ipam,
            dns: c.dns,
        })
    }

    fn create(nl: &Netlink, spec: Spec<'_>, mode: MacvlanMode) -> Result<Option<Link>, Error> {
        nl.create_macvlan(&MacvlanSpec {
            netns: spec.netns,
            mtu: spec.mtu,
            mac: spec.mac,
            ..MacvlanSpec::new(spec.name.clone(), spec.master, mode)
        })
    }

    fn mode_of(link: &Link) -> Option<MacvlanMode> {
        link.macvlan_mode
    }

    fn mode_name(mode: MacvlanMode) -> String {
        mode.as_str().into()
    }
}
