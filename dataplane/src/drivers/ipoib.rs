//! The `ipoib` driver: an IPoIB child of an InfiniBand port's IPoIB device,
//! with ipoib-cni's keys (`master`, required; `mtu`; `ipam`; also `dns`).
//!
//! ADD creates the child in the host namespace under a temporary name, with
//! the master's partition key and mode (the kernel cannot create it in
//! another namespace), then moves it into the pod and renames it to
//! `CNI_IFNAME` in one request; the shared flow of `stacked` does
//! the rest (IPAM, addresses, undo, CHECK). DEL deletes it. Its hardware
//! address is 20 bytes, so the result names no `mac`.

use crate::drivers::error::DriverError;
use plexus_cni::names::{empty_is_none, IfName};
use plexus_cni::skel::Request;
use serde::Deserialize;

use super::netconf::DnsConf;
use super::netconf::IpamRef;
use super::stacked::{self, Conf, Spec, Stacked};
use crate::drivers::netconf;
use crate::netlink::{IpoibSpec, Link, LinkKind, Netlink};
use crate::Error;

#[derive(Debug, Default, Deserialize)]
struct IpoibConf {
    /// Empty means none, as the reference reads it.
    #[serde(default, deserialize_with = "empty_is_none::deserialize")]
    master: Option<IfName>,
    mtu: Option<i64>,
    ipam: Option<IpamRef>,
    dns: Option<DnsConf>,
}

/// ipoib-cni's plugin, built in.
pub struct Ipoib;

impl Stacked for Ipoib {
    /// An IPoIB child has no mode of its own to configure: it takes its
    /// master's.
    type Mode = ();
    const KIND: &'static str = "ipoib";
    const LINK_KIND: LinkKind = LinkKind::Ipoib;
    const CHAINS: bool = false;
    const MADE_IN_POD: bool = false;

    fn parse(req: &Request) -> Result<Conf<()>, DriverError> {
        let c: IpoibConf = netconf::decode_config(req)?;
        let master = c.master.ok_or_else(|| {
            DriverError::config("master", "missing: the IPoIB device to make a child of")
        })?;
        Ok(Conf {
            master: Some(master),
            mode: (),
            mtu: c.mtu,
            mac: None,
            link_in_container: false,
            ipam: c.ipam,
            dns: c.dns,
        })
    }

    fn check_master(master: &Link) -> Result<(), DriverError> {
        if master.kind == Some(LinkKind::Ipoib) {
            return Ok(());
        }
        let kind = match &master.kind {
            Some(LinkKind::Other(k)) => k.clone(),
            Some(k) => format!("{k:?}").to_lowercase(),
            None => "device without a link type".into(),
        };
        Err(DriverError::config(
            "master",
            format!("{} is a {kind}, not an IPoIB interface", master.name),
        ))
    }

    fn create(nl: &Netlink, spec: Spec<'_>, _: ()) -> Result<Option<Link>, Error> {
        let master = nl.link_by_index(spec.master)?;
        let info = master.and_then(|m| m.ipoib).unwrap_or_default();
        let child = IpoibSpec {
            name: netconf::random_name("ib"),
            parent: spec.master,
            info: crate::netlink::IpoibInfo {
                umcast: None,
                ..info
            },
            mtu: spec.mtu,
        };
        let link = nl.create_ipoib(&child)?;
        stacked::rename_into_pod(nl, &link, &spec)?;
        Ok(None)
    }

    fn mode_of(link: &Link) -> Option<()> {
        link.ipoib.map(drop)
    }

    fn mode_name(_: ()) -> String {
        "the master's".into()
    }
}
