//! The `vlan` driver: an 802.1q VLAN of a master interface, made the pod's
//! CNI_IFNAME. Config keys, defaults, result shape and CHECK follow the
//! reference plugin (containernetworking/plugins `plugins/main/vlan`); the
//! shared flow (IPAM, addresses, undo, DEL) and its deliberate differences
//! are in `stacked`.
//!
//! Keys: `master` (required: the interface the VLAN is made on), `vlanId`
//! (0 to 4094; absent is 0, as the reference reads it), `mtu` (0 to the
//! master's MTU), `linkInContainer` (the master is in the pod's namespace),
//! `ipam` (optional: without it the attachment is layer 2 only, where the
//! reference fails), `dns`. A VLAN shares its master's MAC, so there is no
//! `mac`.
//!
//! ADD creates the VLAN in the master's namespace under a temporary name,
//! then moves it into the pod and renames it to CNI_IFNAME in one request
//! (the reference's `createVlan` creates it under a temporary name too). A
//! master has one VLAN per id: a second is refused naming `vlanId`. CHECK
//! also finds a VLAN whose id, master or MTU is not the configuration's (the
//! reference's `validateCniContainerInterface` checks the id and the MTU).

use crate::drivers::error::{check_failed, DriverError};
use plexus_cni::names::{empty_is_none, IfName};
use plexus_cni::skel::Request;
use serde::Deserialize;

use super::netconf::DnsConf;
use super::netconf::IpamRef;
use super::stacked::{self, Conf, Spec, Stacked};
use crate::drivers::netconf;
use crate::netlink::{Link, LinkKind, Netlink, VlanSpec, VLAN_ID_MAX};
use crate::Error;

#[derive(Debug, Default, Deserialize)]
struct VlanConf {
    /// Empty means none, as the reference reads it.
    #[serde(default, deserialize_with = "empty_is_none::deserialize")]
    master: Option<IfName>,
    #[serde(rename = "vlanId")]
    vlan_id: Option<i64>,
    mtu: Option<i64>,
    #[serde(rename = "linkInContainer")]
    link_in_container: Option<bool>,
    ipam: Option<IpamRef>,
    dns: Option<DnsConf>,
}

/// The reference `vlan` plugin's driver.
pub struct Vlan;

impl Stacked for Vlan {
    /// The VLAN id.
    type Mode = u16;
    const KIND: &'static str = "vlan";
    const LINK_KIND: LinkKind = LinkKind::Vlan;
    const CHAINS: bool = false;
    const MADE_IN_POD: bool = false;
    const MODE_KEY: &'static str = "vlanId";
    const MODE_NOUN: &'static str = "VLAN";
    /// The reference sets no sysctl on the VLAN.
    const ANNOUNCE: &'static [&'static str] = &[];

    fn parse(req: &Request) -> Result<Conf<u16>, DriverError> {
        let c: VlanConf = netconf::decode_config(req)?;
        let master = c.master.ok_or_else(|| {
            DriverError::config("master", "missing: the interface to make the VLAN on")
        })?;
        let id = c.vlan_id.unwrap_or(0);
        let id = u16::try_from(id)
            .ok()
            .filter(|id| *id <= VLAN_ID_MAX)
            .ok_or_else(|| {
                DriverError::config(
                    "vlanId",
                    format!("{id} is out of range: must be 0 to {VLAN_ID_MAX}"),
                )
            })?;
        Ok(Conf {
            master: Some(master),
            mode: id,
            mtu: c.mtu,
            mac: None,
            link_in_container: c.link_in_container.unwrap_or(false),
            ipam: c.ipam,
            dns: c.dns,
        })
    }

    fn create(nl: &Netlink, spec: Spec<'_>, id: u16) -> Result<Option<Link>, Error> {
        let made = nl.create_vlan(&VlanSpec {
            mtu: spec.mtu,
            ..VlanSpec::new(netconf::random_name("vlan"), spec.master, id)
        })?;
        stacked::rename_into_pod(nl, &made, &spec)?;
        Ok(None)
    }

    fn refusal(e: &Error, master: &Link, id: u16) -> Option<DriverError> {
        e.is_exists().then(|| {
            DriverError::config(
                "vlanId",
                format!(
                    "{} already has a VLAN with id {id} (here or in a pod): one id per master",
                    master.name
                ),
            )
        })
    }

    fn mode_of(link: &Link) -> Option<u16> {
        link.vlan_id
    }

    fn mode_name(id: u16) -> String {
        id.to_string()
    }

    fn check_link(conf: &Conf<u16>, link: &Link, master: Option<&Link>) -> Result<(), DriverError> {
        if let Some(master) = master {
            if link.parent != Some(master.index) {
                return Err(check_failed(format!(
                    "master: the container's vlan {} is not on {}",
                    link.name, master.name
                )));
            }
        }
        match conf.mtu {
            Some(mtu) if mtu != 0 && mtu != i64::from(link.mtu) => Err(check_failed(format!(
                "mtu: the container's vlan {} has MTU {}, the configuration says {mtu}",
                link.name, link.mtu
            ))),
            _ => Ok(()),
        }
    }
}
