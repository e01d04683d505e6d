//! Link requests: lookup, creation (veth, bridge, macvlan, ipvlan, VLAN, IPoIB),
//! changes, bridge ports and bridge VLANs, deletion. What they take and
//! return is in [`super::link_spec`].

use std::fmt;

use netlink_packet_route::link as nl;
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use plexus_cni::names::IfName;

use super::link_spec::*;
use super::{Netlink, CHANGE, CREATE, DUMP, NLM_F_ECHO, NLM_F_REQUEST};
use crate::error::{Errno, Error, Result};
use crate::mac::MacAddr;
use crate::netns::NetNs;

/// Skip the (large) statistics blocks in link replies: nothing here uses them.
fn skip_stats() -> nl::LinkAttribute {
    nl::LinkAttribute::ExtMask(vec![nl::LinkExtentMask::SkipStats])
}

impl Netlink {
    /// The link named `name`, or `None` if there is none.
    pub fn link_by_name(&self, name: &IfName) -> Result<Option<Link>> {
        let mut msg = nl::LinkMessage::default();
        msg.attributes
            .push(nl::LinkAttribute::IfName(name.to_string()));
        msg.attributes.push(skip_stats());
        self.get_link("get link", &name, msg)
    }

    /// The link with index `index`, or `None` if there is none.
    pub fn link_by_index(&self, index: u32) -> Result<Option<Link>> {
        if index == 0 {
            return Ok(None);
        }
        let mut msg = nl::LinkMessage::default();
        msg.header.index = index;
        msg.attributes.push(skip_stats());
        self.get_link("get link", &format_args!("index {index}"), msg)
    }

    fn get_link(
        &self,
        op: &'static str,
        object: &dyn fmt::Display,
        msg: nl::LinkMessage,
    ) -> Result<Option<Link>> {
        match self.request(op, object, RouteNetlinkMessage::GetLink(msg), NLM_F_REQUEST) {
            Ok(replies) => first_link(&replies).transpose(),
            Err(e) if e.errno() == Some(Errno::ENODEV) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// All links of the namespace.
    pub fn links(&self) -> Result<Vec<Link>> {
        let mut msg = nl::LinkMessage::default();
        msg.attributes.push(skip_stats());
        self.dump(
            "list links",
            &"",
            RouteNetlinkMessage::GetLink(msg),
            |r| match r {
                RouteNetlinkMessage::NewLink(m) => Some(Link::from_message(m)),
                _ => None,
            },
        )?
        .into_iter()
        .collect()
    }

    /// Creates a veth pair and returns the local end as created (its
    /// bridge-port settings, when it was made a port, are not read: see
    /// `create_local`). See [`VethSpec`].
    pub fn create_veth(&self, spec: &VethSpec) -> Result<Link> {
        let mut peer = nl::LinkMessage::default();
        peer.attributes
            .push(nl::LinkAttribute::IfName(spec.peer_name.to_string()));
        common_attributes(&mut peer, spec.mtu, spec.peer_mac, false);
        if let Some(ns) = spec.peer_netns {
            peer.attributes
                .push(nl::LinkAttribute::NetNsFd(ns.raw_fd()));
        }
        let mut msg = new_link_message(
            &spec.name,
            nl::InfoKind::Veth,
            Some(nl::InfoData::Veth(nl::InfoVeth::Peer(peer))),
        );
        common_attributes(&mut msg, spec.mtu, spec.mac, spec.up);
        if let Some(master) = spec.master {
            msg.attributes.push(nl::LinkAttribute::Controller(master));
        }
        let object = match spec.peer_netns {
            Some(ns) => format!(
                "{} (peer {} in {})",
                spec.name,
                spec.peer_name,
                ns.path().display()
            ),
            None => format!("{} (peer {})", spec.name, spec.peer_name),
        };
        self.create_local("create veth", &object, msg, &spec.name)
    }

    /// Creates a bridge and returns it.
    pub fn create_bridge(&self, spec: &BridgeSpec) -> Result<Link> {
        let data = spec
            .vlan_filtering
            .map(|v| nl::InfoData::Bridge(vec![nl::InfoBridge::VlanFiltering(v)]));
        let mut msg = new_link_message(&spec.name, nl::InfoKind::Bridge, data);
        common_attributes(&mut msg, spec.mtu, spec.mac, spec.up);
        self.create_local("create bridge", &spec.name, msg, &spec.name)
    }

    /// Creates a macvlan on `spec.master`. Returns the new link when it was
    /// created in this handle's namespace, `None` when it was created directly
    /// in `spec.netns` (look it up with a handle there). A missing master
    /// fails with ENODEV.
    pub fn create_macvlan(&self, spec: &MacvlanSpec) -> Result<Option<Link>> {
        let data = nl::InfoData::MacVlan(vec![nl::InfoMacVlan::Mode(spec.mode.to_nl())]);
        let mut msg = new_link_message(&spec.name, nl::InfoKind::MacVlan, Some(data));
        msg.attributes.push(nl::LinkAttribute::Link(spec.master));
        common_attributes(&mut msg, spec.mtu, spec.mac, spec.up);
        let object = format!(
            "{} (master index {}, mode {})",
            spec.name, spec.master, spec.mode
        );
        self.create_child("create macvlan", object, msg, &spec.name, spec.netns)
    }

    /// Creates an ipvlan on `spec.master`; returns like
    /// [`Netlink::create_macvlan`]. Kernels without ipvlan support answer
    /// EOPNOTSUPP ("Unknown device type").
    pub fn create_ipvlan(&self, spec: &IpvlanSpec) -> Result<Option<Link>> {
        let data = nl::InfoData::IpVlan(vec![nl::InfoIpVlan::Mode(spec.mode.to_nl())]);
        let mut msg = new_link_message(&spec.name, nl::InfoKind::IpVlan, Some(data));
        msg.attributes.push(nl::LinkAttribute::Link(spec.master));
        common_attributes(&mut msg, spec.mtu, None, spec.up);
        let object = format!(
            "{} (master index {}, mode {})",
            spec.name, spec.master, spec.mode
        );
        self.create_child("create ipvlan", object, msg, &spec.name, spec.netns)
    }

    /// Creates the VLAN of `spec` in this handle's namespace and returns it.
    /// A second VLAN with the same id on one master fails with EEXIST
    /// ("VLAN device already exists"); kernels without 8021q answer
    /// EOPNOTSUPP.
    pub fn create_vlan(&self, spec: &VlanSpec) -> Result<Link> {
        let object = format!(
            "{} (master index {}, id {})",
            spec.name, spec.master, spec.id
        );
        self.create_local("create vlan", &object, spec.message()?, &spec.name)
    }

    /// Creates the IPoIB child of `spec` in this handle's namespace.
    pub fn create_ipoib(&self, spec: &IpoibSpec) -> Result<Link> {
        let object = format!("{} (parent index {})", spec.name, spec.parent);
        self.create_local("create ipoib", &object, spec.message(), &spec.name)
    }

    /// Sends the creation of a device on a lower device (macvlan, ipvlan):
    /// into this namespace (the link is returned), or directly into `netns`
    /// in the same request (`None`).
    fn create_child(
        &self,
        op: &'static str,
        object: String,
        mut msg: nl::LinkMessage,
        name: &IfName,
        netns: Option<&NetNs>,
    ) -> Result<Option<Link>> {
        match netns {
            None => self.create_local(op, &object, msg, name).map(Some),
            Some(ns) => {
                msg.attributes.push(nl::LinkAttribute::NetNsFd(ns.raw_fd()));
                let object = format!("{object} in {}", ns.path().display());
                self.request(op, &object, RouteNetlinkMessage::NewLink(msg), CREATE)?;
                Ok(None)
            }
        }
    }

    /// Sends a creation whose device lands in this namespace and returns it
    /// as the kernel now reports it.
    ///
    /// The new link is read back with a second request rather than asked for
    /// with NLM_F_ECHO: on 6.18 kernels an echoed veth creation whose peer is
    /// brought up fails with ENOTCONN (and is rolled back), and an echo is sent
    /// before the master is attached anyway.
    fn create_local(
        &self,
        op: &'static str,
        object: &dyn fmt::Display,
        msg: nl::LinkMessage,
        name: &IfName,
    ) -> Result<Link> {
        let master = msg.attributes.iter().find_map(|a| match a {
            nl::LinkAttribute::Controller(m) => Some(*m),
            _ => None,
        });
        // NLM_F_ECHO (Linux 6.3+) hands back the new link's message, which
        // spares a lookup; a lookup would also run the link's pending
        // link-state work (linkwatch) on this call. Older kernels send no
        // echo and the lookup follows.
        let replies = self.request(
            op,
            object,
            RouteNetlinkMessage::NewLink(msg),
            CREATE | NLM_F_ECHO,
        )?;
        match first_link(&replies)
            .transpose()?
            .filter(|l| l.name == *name)
        {
            // The echo is sent before IFLA_MASTER is applied, which the
            // acknowledgement confirms.
            Some(link) => Ok(Link {
                master: master.or(link.master),
                ..link
            }),
            None => self.link_by_name(name)?.ok_or_else(|| Error::Netlink {
                op,
                object: object.to_string(),
                reason: "the new link vanished right after creation".into(),
            }),
        }
    }

    /// Applies `update` to link `index` in one request.
    pub fn update_link(&self, index: u32, update: &LinkUpdate) -> Result<()> {
        let mut msg = nl::LinkMessage::default();
        msg.header.index = index;
        if let Some(up) = update.up {
            set_flag(&mut msg.header, nl::LinkFlags::Up, up);
        }
        if let Some(on) = update.promisc {
            set_flag(&mut msg.header, nl::LinkFlags::Promisc, on);
        }
        if let Some(on) = update.allmulti {
            set_flag(&mut msg.header, nl::LinkFlags::Allmulti, on);
        }
        let attrs = &mut msg.attributes;
        if let Some(ns) = update.netns {
            attrs.push(nl::LinkAttribute::NetNsFd(ns.raw_fd()));
        }
        if let Some(name) = &update.name {
            attrs.push(nl::LinkAttribute::IfName(name.to_string()));
        }
        if let Some(mtu) = update.mtu {
            attrs.push(nl::LinkAttribute::Mtu(mtu));
        }
        if let Some(mac) = update.mac {
            attrs.push(nl::LinkAttribute::Address(mac.0.to_vec()));
        }
        if let Some(master) = update.master {
            attrs.push(nl::LinkAttribute::Controller(match master {
                Master::Set(i) => i,
                Master::Release => 0,
            }));
        }
        if let Some(len) = update.txqueuelen {
            attrs.push(nl::LinkAttribute::TxQueueLen(len));
        }
        if let Some(alias) = &update.alias {
            attrs.push(nl::LinkAttribute::IfAlias(alias.clone()));
        }
        self.change_link("update link", index, RouteNetlinkMessage::SetLink(msg))
    }

    pub fn set_up(&self, index: u32) -> Result<()> {
        self.update_link(
            index,
            &LinkUpdate {
                up: Some(true),
                ..Default::default()
            },
        )
    }

    pub fn set_down(&self, index: u32) -> Result<()> {
        self.update_link(
            index,
            &LinkUpdate {
                up: Some(false),
                ..Default::default()
            },
        )
    }

    pub fn set_mtu(&self, index: u32, mtu: u32) -> Result<()> {
        self.update_link(
            index,
            &LinkUpdate {
                mtu: Some(mtu),
                ..Default::default()
            },
        )
    }

    pub fn set_mac(&self, index: u32, mac: MacAddr) -> Result<()> {
        self.update_link(
            index,
            &LinkUpdate {
                mac: Some(mac),
                ..Default::default()
            },
        )
    }

    /// Enslaves link `index` to `master` (a bridge), or releases it.
    pub fn set_master(&self, index: u32, master: Master) -> Result<()> {
        self.update_link(
            index,
            &LinkUpdate {
                master: Some(master),
                ..Default::default()
            },
        )
    }

    pub fn set_promisc(&self, index: u32, on: bool) -> Result<()> {
        self.update_link(
            index,
            &LinkUpdate {
                promisc: Some(on),
                ..Default::default()
            },
        )
    }

    pub fn set_allmulti(&self, index: u32, on: bool) -> Result<()> {
        self.update_link(
            index,
            &LinkUpdate {
                allmulti: Some(on),
                ..Default::default()
            },
        )
    }

    pub fn set_txqueuelen(&self, index: u32, len: u32) -> Result<()> {
        self.update_link(
            index,
            &LinkUpdate {
                txqueuelen: Some(len),
                ..Default::default()
            },
        )
    }

    /// Renames link `index`. Kernels before 6.2 refuse to rename a link that
    /// is up (EBUSY); bring it down first to be portable.
    pub fn rename(&self, index: u32, name: &IfName) -> Result<()> {
        self.update_link(
            index,
            &LinkUpdate {
                name: Some(name.clone()),
                ..Default::default()
            },
        )
    }

    /// Moves link `index` into `ns`. It keeps its name unless that is taken
    /// there (EEXIST); it comes out down.
    pub fn move_to_netns(&self, index: u32, ns: &NetNs) -> Result<()> {
        self.update_link(
            index,
            &LinkUpdate {
                netns: Some(ns),
                ..Default::default()
            },
        )
    }

    /// Deletes link `index`; `Ok(false)` if it did not exist. Deleting one end
    /// of a veth pair deletes both.
    pub fn del_link(&self, index: u32) -> Result<bool> {
        if index == 0 {
            return Ok(false);
        }
        let mut msg = nl::LinkMessage::default();
        msg.header.index = index;
        self.del_link_message(&format_args!("index {index}"), msg)
    }

    /// Deletes the link named `name`; `Ok(false)` if it did not exist.
    pub fn del_link_by_name(&self, name: &IfName) -> Result<bool> {
        let mut msg = nl::LinkMessage::default();
        msg.attributes
            .push(nl::LinkAttribute::IfName(name.to_string()));
        self.del_link_message(name, msg)
    }

    fn del_link_message(&self, object: &dyn fmt::Display, msg: nl::LinkMessage) -> Result<bool> {
        match self.request(
            "delete link",
            object,
            RouteNetlinkMessage::DelLink(msg),
            CHANGE,
        ) {
            Ok(_) => Ok(true),
            Err(e) if e.errno() == Some(Errno::ENODEV) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Sets bridge-port options of link `index` (which must be enslaved to a
    /// bridge).
    pub fn set_bridge_port(&self, index: u32, opts: &BridgePortOptions) -> Result<()> {
        let mut data = Vec::new();
        if let Some(v) = opts.hairpin {
            data.push(nl::InfoBridgePort::HairpinMode(v));
        }
        if let Some(v) = opts.isolated {
            data.push(nl::InfoBridgePort::Isolated(v));
        }
        if data.is_empty() {
            return Ok(());
        }
        let mut msg = nl::LinkMessage::default();
        msg.header.index = index;
        msg.attributes.push(nl::LinkAttribute::LinkInfo(vec![
            nl::LinkInfo::PortKind(nl::InfoPortKind::Bridge),
            nl::LinkInfo::PortData(nl::InfoPortData::BridgePort(data)),
        ]));
        self.change_link(
            "set bridge port options of",
            index,
            RouteNetlinkMessage::NewLink(msg),
        )
    }

    /// Adds (or updates the flags of) a VLAN on bridge port `port`. The
    /// bridge needs vlan filtering for the VLAN to take effect; kernels built
    /// without CONFIG_BRIDGE_VLAN_FILTERING (the build hosts' kernel among
    /// them) answer EOPNOTSUPP, as they do to `vlan_filtering` on creation.
    pub fn bridge_vlan_add(&self, port: u32, vlan: BridgeVlan) -> Result<()> {
        self.bridge_vlan_change(port, vlan, false, true).map(drop)
    }

    /// Removes VLAN `vid` from bridge port `port`; `Ok(false)` if absent.
    pub fn bridge_vlan_del(&self, port: u32, vid: u16) -> Result<bool> {
        self.bridge_vlan_change(port, BridgeVlan::tagged(vid), false, false)
    }

    /// Adds a VLAN on the bridge device itself (`bridge vlan add ... self`),
    /// needed for the bridge's own address to be reachable on that VLAN.
    pub fn bridge_self_vlan_add(&self, bridge: u32, vlan: BridgeVlan) -> Result<()> {
        self.bridge_vlan_change(bridge, vlan, true, true).map(drop)
    }

    /// Removes VLAN `vid` from the bridge device itself; `Ok(false)` if absent.
    pub fn bridge_self_vlan_del(&self, bridge: u32, vid: u16) -> Result<bool> {
        self.bridge_vlan_change(bridge, BridgeVlan::tagged(vid), true, false)
    }

    fn bridge_vlan_change(
        &self,
        index: u32,
        vlan: BridgeVlan,
        on_self: bool,
        add: bool,
    ) -> Result<bool> {
        check_vid(vlan.vid)?;
        // The kernel acknowledges deleting an absent VLAN (its AF_BRIDGE
        // DELLINK handler drops the ENOENT), so look first.
        if !add && !self.bridge_vlans(index)?.iter().any(|v| v.vid == vlan.vid) {
            return Ok(false);
        }
        let mut flags = nl::BridgeVlanInfoFlags::empty();
        flags.set(nl::BridgeVlanInfoFlags::Pvid, vlan.pvid);
        flags.set(nl::BridgeVlanInfoFlags::Untagged, vlan.untagged);
        let mut spec = Vec::new();
        if on_self {
            spec.push(nl::AfSpecBridge::Flags(nl::BridgeFlag::LowerDev));
        }
        spec.push(nl::AfSpecBridge::VlanInfo(nl::BridgeVlanInfo {
            flags,
            vid: vlan.vid,
        }));
        // AF_BRIDGE family: RTM_SETLINK/RTM_DELLINK go to the bridge's VLAN
        // handlers instead of changing or deleting the link itself.
        let mut msg = nl::LinkMessage::default();
        msg.header.interface_family = AddressFamily::Bridge;
        msg.header.index = index;
        msg.attributes.push(nl::LinkAttribute::AfSpecBridge(spec));
        let (op, msg) = if add {
            ("add bridge vlan on", RouteNetlinkMessage::SetLink(msg))
        } else {
            ("delete bridge vlan on", RouteNetlinkMessage::DelLink(msg))
        };
        let object = format_args!("index {index} (vid {})", vlan.vid).to_string();
        match self.request(op, &object, msg, CHANGE) {
            Ok(_) => Ok(true),
            Err(e) if !add && e.errno() == Some(Errno::ENOENT) => Ok(false),
            Err(e) => Err(self.name_link(e, index)),
        }
    }

    /// The VLANs configured on bridge port (or bridge) `index`, by vid.
    pub fn bridge_vlans(&self, index: u32) -> Result<Vec<BridgeVlan>> {
        let mut msg = nl::LinkMessage::default();
        msg.header.interface_family = AddressFamily::Bridge;
        msg.attributes
            .push(nl::LinkAttribute::ExtMask(vec![nl::LinkExtentMask::Brvlan]));
        let replies = self.request(
            "list bridge vlans",
            &"",
            RouteNetlinkMessage::GetLink(msg),
            DUMP,
        )?;
        let mut out: Vec<BridgeVlan> = Vec::new();
        for r in &replies {
            let RouteNetlinkMessage::NewLink(m) = r else {
                continue;
            };
            if m.header.index != index {
                continue;
            }
            for attr in &m.attributes {
                let nl::LinkAttribute::AfSpecBridge(spec) = attr else {
                    continue;
                };
                for s in spec {
                    if let nl::AfSpecBridge::VlanInfo(v) = s {
                        out.push(BridgeVlan {
                            vid: v.vid,
                            pvid: v.flags.contains(nl::BridgeVlanInfoFlags::Pvid),
                            untagged: v.flags.contains(nl::BridgeVlanInfoFlags::Untagged),
                        });
                    }
                }
            }
        }
        out.sort();
        out.dedup_by_key(|v| v.vid);
        Ok(out)
    }

    /// Sends `msg`, a change to link `index` that wants no reply; an error
    /// names the link ([`Netlink::name_link`]).
    fn change_link(&self, op: &'static str, index: u32, msg: RouteNetlinkMessage) -> Result<()> {
        self.request(op, &format_args!("index {index}"), msg, CHANGE)
            .map(drop)
            .map_err(|e| self.name_link(e, index))
    }

    /// Replaces the "index N" object of an error by "NAME (index N)" when the
    /// link can still be found, so messages name the interface.
    pub(super) fn name_link(&self, mut e: Error, index: u32) -> Error {
        if let Error::Kernel { object, .. } | Error::Netlink { object, .. } = &mut e {
            if let Ok(Some(link)) = self.link_by_index(index) {
                *object = format!("{} ({object})", link.name);
            }
        }
        e
    }
}

fn first_link(replies: &[RouteNetlinkMessage]) -> Option<Result<Link>> {
    replies.iter().find_map(|r| match r {
        RouteNetlinkMessage::NewLink(m) => Some(Link::from_message(m)),
        _ => None,
    })
}
