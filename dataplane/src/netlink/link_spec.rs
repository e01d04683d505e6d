//! What a link is (as the kernel reports it) and what a caller asks for
//! (the specs of veth, bridge, macvlan, ipvlan, 802.1q VLAN and IPoIB links, changes,
//! bridge ports and VLANs), with their netlink encodings; the requests that
//! use them are in [`super::link`].

use netlink_packet_route::link as nl;
use plexus_cni::names::IfName;

use super::Guid;
use crate::error::{Error, Result};
use crate::mac::MacAddr;
use crate::netns::NetNs;

/// A network interface as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Link {
    pub index: u32,
    /// Parsed from the kernel's reply by [`IfName`]'s rule, which the kernel's
    /// own is (a name the kernel took but that rule refuses is an
    /// [`Error::KernelName`], never a panic).
    pub name: IfName,
    /// `None` for devices without rtnl link ops (e.g. `lo`, physical NICs).
    pub kind: Option<LinkKind>,
    pub mtu: u32,
    /// `None` when the device has no 6-byte hardware address.
    pub mac: Option<MacAddr>,
    /// Administratively up (IFF_UP).
    pub up: bool,
    /// Carrier present (IFF_LOWER_UP).
    pub lower_up: bool,
    /// Promiscuous mode set by a user (not counting bridge membership).
    pub promisc: bool,
    pub allmulti: bool,
    pub txqueuelen: u32,
    /// Index of the master device (bridge), if enslaved.
    pub master: Option<u32>,
    /// IFLA_LINK: the veth peer's or macvlan lower device's index, which may
    /// be in another namespace (then `parent_netnsid` is set).
    pub parent: Option<u32>,
    pub parent_netnsid: Option<i32>,
    pub macvlan_mode: Option<MacvlanMode>,
    pub ipvlan_mode: Option<IpvlanMode>,
    /// The VLAN id (IFLA_VLAN_ID), when this link is a VLAN.
    pub vlan_id: Option<u16>,
    /// Bridge settings, when this link is a bridge.
    pub bridge: Option<BridgeInfo>,
    /// Bridge-port settings, when this link is enslaved to a bridge.
    pub bridge_port: Option<BridgePortInfo>,
    /// IPoIB settings, when this link is an IPoIB device.
    pub ipoib: Option<IpoibInfo>,
    /// The device the netdev belongs to (IFLA_PARENT_DEV_NAME, kernel 5.15+):
    /// a PCI address such as `0000:01:10.0` for a NIC or an SR-IOV VF, in
    /// whatever namespace the netdev sits. `None` for virtual links.
    pub parent_device: Option<String>,
    /// The link layer is InfiniBand (ARPHRD_INFINIBAND): a 20-byte hardware
    /// address, and SR-IOV VFs with node and port GUIDs.
    pub infiniband: bool,
    /// The port GUID in an IPoIB netdev's 20-byte hardware address.
    pub ib_guid: Option<Guid>,
    /// The interface's alias (IFLA_IFALIAS, `ip link set ... alias`);
    /// `None` when it has none (the kernel reports an empty one as none).
    pub alias: Option<String>,
}

/// What an IPoIB device's `IFLA_INFO_DATA` says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IpoibInfo {
    /// The partition key (0x8000 set: full membership).
    pub pkey: Option<u16>,
    /// `IPOIB_MODE_DATAGRAM` (0) or `IPOIB_MODE_CONNECTED` (1).
    pub mode: Option<u16>,
    pub umcast: Option<u16>,
}

/// An IPoIB child of the IPoIB device `parent`, created in the handle's
/// namespace (the kernel cannot create one straight into another: the
/// InfiniBand port belongs to the host's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpoibSpec {
    pub name: IfName,
    pub parent: u32,
    pub info: IpoibInfo,
    pub mtu: Option<u32>,
}

impl IpoibSpec {
    /// The RTM_NEWLINK body that creates this child.
    pub fn message(&self) -> nl::LinkMessage {
        let mut data = Vec::new();
        data.extend(self.info.pkey.map(nl::InfoIpoib::Pkey));
        data.extend(self.info.mode.map(|m| nl::InfoIpoib::Mode(m.into())));
        data.extend(self.info.umcast.map(nl::InfoIpoib::UmCast));
        let mut msg = new_link_message(
            &self.name,
            nl::InfoKind::Ipoib,
            (!data.is_empty()).then_some(nl::InfoData::Ipoib(data)),
        );
        msg.attributes.push(nl::LinkAttribute::Link(self.parent));
        common_attributes(&mut msg, self.mtu, None, false);
        msg
    }
}

/// The kernel's link type (IFLA_INFO_KIND).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkKind {
    Veth,
    Bridge,
    Macvlan,
    Macvtap,
    Ipvlan,
    Vlan,
    Vxlan,
    Ifb,
    Dummy,
    Tun,
    Ipoib,
    Other(String),
}

impl LinkKind {
    pub(super) fn from_kernel(kind: &str) -> LinkKind {
        match kind {
            "veth" => LinkKind::Veth,
            "bridge" => LinkKind::Bridge,
            "macvlan" => LinkKind::Macvlan,
            "macvtap" => LinkKind::Macvtap,
            "ipvlan" => LinkKind::Ipvlan,
            "vlan" => LinkKind::Vlan,
            "vxlan" => LinkKind::Vxlan,
            "ifb" => LinkKind::Ifb,
            "dummy" => LinkKind::Dummy,
            "tun" => LinkKind::Tun,
            "ipoib" => LinkKind::Ipoib,
            other => LinkKind::Other(other.to_string()),
        }
    }
}

/// Bridge-level settings of a bridge link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BridgeInfo {
    pub vlan_filtering: bool,
}

/// Per-port settings of a link enslaved to a bridge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BridgePortInfo {
    pub hairpin: bool,
    pub isolated: bool,
}

netlink_names! {
    /// Macvlan modes, named as in `ip link` and the CNI macvlan plugin.
    pub enum MacvlanMode("macvlan mode") as nl::MacVlanMode {
        Bridge = "bridge" <=> Bridge,
        Private = "private" <=> Private,
        Vepa = "vepa" <=> Vepa,
        Passthru = "passthru" <=> Passthrough,
        Source = "source" <=> Source,
    }
}

netlink_names! {
    /// Ipvlan modes, named as in `ip link` and the CNI ipvlan plugin.
    pub enum IpvlanMode("ipvlan mode") as nl::IpVlanMode {
        L2 = "l2" <=> L2,
        L3 = "l3" <=> L3,
        L3s = "l3s" <=> L3S,
    }
}

/// A veth pair to create. The local end (`name`) is created in the handle's
/// namespace; the peer is created directly in `peer_netns` (one kernel round
/// trip, no create-then-move) or next to the local end when `None`.
#[derive(Debug, Clone)]
pub struct VethSpec<'a> {
    pub name: IfName,
    pub peer_name: IfName,
    pub peer_netns: Option<&'a NetNs>,
    /// MTU of both ends.
    pub mtu: Option<u32>,
    pub mac: Option<MacAddr>,
    pub peer_mac: Option<MacAddr>,
    /// Enslave the local end to this bridge (index in the handle's
    /// namespace) as part of the creation; if that fails nothing is created.
    pub master: Option<u32>,
    /// Bring the local end up as part of the creation. (There is no
    /// `peer_up`: the kernel opens the peer before the pair is linked, and
    /// veth refuses that with ENOTCONN. Bring the peer up with a handle in
    /// its namespace.)
    pub up: bool,
}

impl<'a> VethSpec<'a> {
    /// Both ends in the handle's namespace, down, kernel-chosen MTU and MACs.
    pub fn new(name: IfName, peer_name: IfName) -> Self {
        VethSpec {
            name,
            peer_name,
            peer_netns: None,
            mtu: None,
            mac: None,
            peer_mac: None,
            master: None,
            up: false,
        }
    }
}

/// A bridge to create in the handle's namespace.
#[derive(Debug, Clone)]
pub struct BridgeSpec {
    pub name: IfName,
    pub mtu: Option<u32>,
    pub mac: Option<MacAddr>,
    pub vlan_filtering: Option<bool>,
    pub up: bool,
}

impl BridgeSpec {
    pub fn new(name: IfName) -> Self {
        BridgeSpec {
            name,
            mtu: None,
            mac: None,
            vlan_filtering: None,
            up: false,
        }
    }
}

/// A macvlan to create on `master` (an index in the handle's namespace),
/// directly inside `netns` when given.
#[derive(Debug, Clone)]
pub struct MacvlanSpec<'a> {
    pub name: IfName,
    pub master: u32,
    pub mode: MacvlanMode,
    pub netns: Option<&'a NetNs>,
    pub mtu: Option<u32>,
    pub mac: Option<MacAddr>,
    pub up: bool,
}

impl<'a> MacvlanSpec<'a> {
    pub fn new(name: IfName, master: u32, mode: MacvlanMode) -> Self {
        MacvlanSpec {
            name,
            master,
            mode,
            netns: None,
            mtu: None,
            mac: None,
            up: false,
        }
    }
}

/// An ipvlan to create on `master` (an index in the handle's namespace),
/// directly inside `netns` when given. Ipvlan devices share the master's MAC
/// address, so there is no `mac`.
#[derive(Debug, Clone)]
pub struct IpvlanSpec<'a> {
    pub name: IfName,
    pub master: u32,
    pub mode: IpvlanMode,
    pub netns: Option<&'a NetNs>,
    pub mtu: Option<u32>,
    pub up: bool,
}

impl<'a> IpvlanSpec<'a> {
    pub fn new(name: IfName, master: u32, mode: IpvlanMode) -> Self {
        IpvlanSpec {
            name,
            master,
            mode,
            netns: None,
            mtu: None,
            up: false,
        }
    }
}

/// The highest 802.1q VLAN id a VLAN link may have (4095 is reserved).
pub const VLAN_ID_MAX: u16 = 4094;

/// An 802.1q VLAN link with id `id` on `master` (an index in the handle's
/// namespace), created in the handle's namespace under `name`. Id 0 is
/// valid (priority tagging), as in `ip link` and the CNI vlan plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VlanSpec {
    pub name: IfName,
    pub master: u32,
    pub id: u16,
    pub mtu: Option<u32>,
}

impl VlanSpec {
    pub fn new(name: IfName, master: u32, id: u16) -> Self {
        VlanSpec {
            name,
            master,
            id,
            mtu: None,
        }
    }

    /// The RTM_NEWLINK body that creates this VLAN, from rtnetlink's typed
    /// builder; an id above [`VLAN_ID_MAX`] is refused before the kernel
    /// sees it.
    pub fn message(&self) -> Result<nl::LinkMessage> {
        if self.id > VLAN_ID_MAX {
            return Err(Error::invalid(
                "VLAN id",
                self.id.to_string(),
                "must be 0..=4094",
            ));
        }
        let mut builder = rtnetlink::LinkVlan::new(self.name.as_str(), self.master, self.id);
        if let Some(mtu) = self.mtu {
            builder = builder.mtu(mtu);
        }
        Ok(builder.build())
    }
}

/// Master (controller) change for [`LinkUpdate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Master {
    /// Enslave to the device with this index (a bridge).
    Set(u32),
    /// Leave the current master.
    Release,
}

/// Changes applied to one link in a single RTM_SETLINK request. Fields left
/// `None` are not touched. The kernel applies them in its own fixed order
/// (namespace move first, admin state last). Kernels before 6.2 refuse to
/// rename a link that is up.
#[derive(Debug, Clone, Default)]
pub struct LinkUpdate<'a> {
    pub up: Option<bool>,
    pub mtu: Option<u32>,
    pub mac: Option<MacAddr>,
    pub master: Option<Master>,
    pub promisc: Option<bool>,
    pub allmulti: Option<bool>,
    pub txqueuelen: Option<u32>,
    pub name: Option<IfName>,
    /// Move the link into this namespace (IFLA_NET_NS_FD).
    pub netns: Option<&'a NetNs>,
    /// Set the alias (IFLA_IFALIAS); an empty one removes it.
    pub alias: Option<String>,
}

/// Bridge-port options; `None` leaves an option unchanged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BridgePortOptions {
    /// Reflect frames back out of the port they came in on.
    pub hairpin: Option<bool>,
    /// Isolated ports can only talk to non-isolated ports.
    pub isolated: Option<bool>,
}

/// A VLAN on a bridge port (or on the bridge itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BridgeVlan {
    pub vid: u16,
    /// Untagged ingress frames are assigned to this VLAN.
    pub pvid: bool,
    /// Frames of this VLAN leave the port untagged.
    pub untagged: bool,
}

impl BridgeVlan {
    /// A tagged VLAN (neither PVID nor untagged).
    pub fn tagged(vid: u16) -> Self {
        BridgeVlan {
            vid,
            pvid: false,
            untagged: false,
        }
    }

    /// The port's native VLAN: PVID and untagged.
    pub fn native(vid: u16) -> Self {
        BridgeVlan {
            vid,
            pvid: true,
            untagged: true,
        }
    }
}

pub(super) fn check_vid(vid: u16) -> Result<()> {
    if (1..=4094).contains(&vid) {
        Ok(())
    } else {
        Err(Error::invalid(
            "VLAN id",
            vid.to_string(),
            "must be 1..=4094",
        ))
    }
}

impl Link {
    /// Link `index` named `name`, with nothing else known yet.
    pub(crate) fn bare(index: u32, name: IfName) -> Link {
        Link {
            index,
            name,
            kind: None,
            mtu: 0,
            mac: None,
            up: false,
            lower_up: false,
            promisc: false,
            allmulti: false,
            txqueuelen: 0,
            master: None,
            parent: None,
            parent_netnsid: None,
            macvlan_mode: None,
            ipvlan_mode: None,
            vlan_id: None,
            bridge: None,
            bridge_port: None,
            ipoib: None,
            parent_device: None,
            infiniband: false,
            ib_guid: None,
            alias: None,
        }
    }

    /// The link a kernel reply describes; its name must pass [`IfName`]'s
    /// rule (a reply without one has none to pass).
    pub(super) fn from_message(m: &nl::LinkMessage) -> Result<Link> {
        let index = m.header.index;
        let name = m
            .attributes
            .iter()
            .find_map(|a| match a {
                nl::LinkAttribute::IfName(n) => Some(n.as_str()),
                _ => None,
            })
            .unwrap_or_default();
        let name = IfName::new(name).map_err(|reason| Error::KernelName {
            index,
            name: name.to_string(),
            reason,
        })?;
        let flags = m.header.flags;
        let mut link = Link {
            up: flags.contains(nl::LinkFlags::Up),
            lower_up: flags.contains(nl::LinkFlags::LowerUp),
            promisc: flags.contains(nl::LinkFlags::Promisc),
            allmulti: flags.contains(nl::LinkFlags::Allmulti),
            infiniband: m.header.link_layer_type == nl::LinkLayerType::Infiniband,
            ..Link::bare(index, name)
        };
        for attr in &m.attributes {
            match attr {
                nl::LinkAttribute::Mtu(v) => link.mtu = *v,
                nl::LinkAttribute::Address(b) => {
                    link.mac = MacAddr::from_slice(b);
                    link.ib_guid = Guid::from_ipoib_address(b);
                }
                nl::LinkAttribute::TxQueueLen(v) => link.txqueuelen = *v,
                nl::LinkAttribute::Controller(v) => link.master = Some(*v).filter(|v| *v != 0),
                nl::LinkAttribute::Link(v) => link.parent = Some(*v).filter(|v| *v != 0),
                nl::LinkAttribute::LinkNetNsId(id) => link.parent_netnsid = Some(*id),
                nl::LinkAttribute::LinkInfo(infos) => link.apply_info(infos),
                nl::LinkAttribute::ParentDevName(name) => link.parent_device = Some(name.clone()),
                nl::LinkAttribute::IfAlias(alias) => {
                    link.alias = Some(alias.clone()).filter(|a| !a.is_empty())
                }
                _ => {}
            }
        }
        Ok(link)
    }

    pub(super) fn apply_info(&mut self, infos: &[nl::LinkInfo]) {
        for info in infos {
            match info {
                nl::LinkInfo::Kind(k) => self.kind = Some(LinkKind::from_kernel(&k.to_string())),
                nl::LinkInfo::Data(nl::InfoData::MacVlan(data)) => {
                    for d in data {
                        if let nl::InfoMacVlan::Mode(m) = d {
                            self.macvlan_mode = MacvlanMode::from_nl(*m);
                        }
                    }
                }
                nl::LinkInfo::Data(nl::InfoData::IpVlan(data)) => {
                    for d in data {
                        if let nl::InfoIpVlan::Mode(m) = d {
                            self.ipvlan_mode = IpvlanMode::from_nl(*m);
                        }
                    }
                }
                nl::LinkInfo::Data(nl::InfoData::Vlan(data)) => {
                    for d in data {
                        if let nl::InfoVlan::Id(id) = d {
                            self.vlan_id = Some(*id);
                        }
                    }
                }
                nl::LinkInfo::Data(nl::InfoData::Ipoib(data)) => {
                    let mut info = IpoibInfo::default();
                    for d in data {
                        match d {
                            nl::InfoIpoib::Pkey(v) => info.pkey = Some(*v),
                            nl::InfoIpoib::Mode(m) => info.mode = Some(u16::from(*m)),
                            nl::InfoIpoib::UmCast(v) => info.umcast = Some(*v),
                            _ => {}
                        }
                    }
                    self.ipoib = Some(info);
                }
                nl::LinkInfo::Data(nl::InfoData::Bridge(data)) => {
                    let mut b = BridgeInfo::default();
                    for d in data {
                        if let nl::InfoBridge::VlanFiltering(v) = d {
                            b.vlan_filtering = *v;
                        }
                    }
                    self.bridge = Some(b);
                }
                nl::LinkInfo::PortData(nl::InfoPortData::BridgePort(data)) => {
                    let mut p = BridgePortInfo::default();
                    for d in data {
                        match d {
                            nl::InfoBridgePort::HairpinMode(v) => p.hairpin = *v,
                            nl::InfoBridgePort::Isolated(v) => p.isolated = *v,
                            _ => {}
                        }
                    }
                    self.bridge_port = Some(p);
                }
                _ => {}
            }
        }
    }
}

pub(super) fn set_flag(header: &mut nl::LinkHeader, flag: nl::LinkFlags, on: bool) {
    header.flags.set(flag, on);
    header.change_mask |= flag;
}

/// A NEWLINK message for a device of `kind` named `name`.
pub(super) fn new_link_message(
    name: &IfName,
    kind: nl::InfoKind,
    data: Option<nl::InfoData>,
) -> nl::LinkMessage {
    let mut msg = nl::LinkMessage::default();
    msg.attributes
        .push(nl::LinkAttribute::IfName(name.to_string()));
    let mut info = vec![nl::LinkInfo::Kind(kind)];
    info.extend(data.map(nl::LinkInfo::Data));
    msg.attributes.push(nl::LinkAttribute::LinkInfo(info));
    msg
}

/// Attributes shared by every creation: MTU, MAC, admin state.
pub(super) fn common_attributes(
    msg: &mut nl::LinkMessage,
    mtu: Option<u32>,
    mac: Option<MacAddr>,
    up: bool,
) {
    if let Some(mtu) = mtu {
        msg.attributes.push(nl::LinkAttribute::Mtu(mtu));
    }
    if let Some(mac) = mac {
        msg.attributes
            .push(nl::LinkAttribute::Address(mac.0.to_vec()));
    }
    if up {
        set_flag(&mut msg.header, nl::LinkFlags::Up, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_name_outside_the_rule_is_an_error_naming_the_link() {
        let mut msg = nl::LinkMessage::default();
        msg.header.index = 9;
        // The kernel refuses only ASCII whitespace; IfName all of Unicode's.
        msg.attributes
            .push(nl::LinkAttribute::IfName("a\u{a0}b".into()));
        let e = Link::from_message(&msg).unwrap_err();
        assert!(
            matches!(&e, Error::KernelName { index: 9, name, .. } if name == "a\u{a0}b"),
            "{e:?}"
        );
        assert!(e.to_string().contains("link index 9"), "{e}");
        msg.attributes = vec![nl::LinkAttribute::IfName("eth0".into())];
        assert_eq!(Link::from_message(&msg).unwrap().name, "eth0");
    }

    #[test]
    fn macvlan_modes_parse_and_display() {
        for &m in MacvlanMode::ALL {
            assert_eq!(m.as_str().parse::<MacvlanMode>().unwrap(), m);
            assert_eq!(MacvlanMode::from_nl(m.to_nl()), Some(m));
        }
        assert_eq!(
            "passthrough"
                .parse::<MacvlanMode>()
                .unwrap_err()
                .to_string(),
            Error::invalid(
                "macvlan mode",
                "passthrough",
                "expected bridge, private, vepa, passthru or source"
            )
            .to_string()
        );
    }

    #[test]
    fn ipvlan_modes_parse_and_display() {
        for &m in IpvlanMode::ALL {
            assert_eq!(m.as_str().parse::<IpvlanMode>().unwrap(), m);
            assert_eq!(IpvlanMode::from_nl(m.to_nl()), Some(m));
        }
        assert!("L2".parse::<IpvlanMode>().is_err());
    }

    #[test]
    fn a_reply_names_the_parent_device_and_the_link_layer() {
        let mut msg = nl::LinkMessage::default();
        msg.header.index = 7;
        msg.header.link_layer_type = nl::LinkLayerType::Infiniband;
        msg.attributes
            .push(nl::LinkAttribute::ParentDevName("0000:01:10.2".into()));
        msg.attributes
            .push(nl::LinkAttribute::ParentDevBusName("pci".into()));
        let mut ipoib_address = vec![0, 0, 0, 0x48, 0xfe, 0x80, 0, 0, 0, 0, 0, 0];
        ipoib_address.extend([0, 0, 0, 0, 0, 0, 0, 9]);
        msg.attributes
            .push(nl::LinkAttribute::Address(ipoib_address));
        msg.attributes.push(nl::LinkAttribute::IfName("ib0".into()));
        let link = Link::from_message(&msg).unwrap();
        assert_eq!(link.parent_device.as_deref(), Some("0000:01:10.2"));
        assert!(link.infiniband);
        assert_eq!((link.mac, link.ib_guid), (None, Some(Guid(9))));
        let mut plain = nl::LinkMessage::default();
        plain
            .attributes
            .push(nl::LinkAttribute::IfName("eth0".into()));
        let plain = Link::from_message(&plain).unwrap();
        assert_eq!((plain.parent_device, plain.infiniband), (None, false));
        assert_eq!(plain.ib_guid, None);
    }

    #[test]
    fn a_vlan_spec_is_typed_and_read_back() {
        let spec = VlanSpec {
            mtu: Some(1400),
            ..VlanSpec::new(IfName::new("v0").unwrap(), 7, 100)
        };
        let msg = spec.message().unwrap();
        assert!(msg.attributes.contains(&nl::LinkAttribute::Link(7)));
        assert!(msg.attributes.contains(&nl::LinkAttribute::Mtu(1400)));
        let mut reply = msg.clone();
        reply
            .attributes
            .push(nl::LinkAttribute::IfName("v0".into()));
        let link = Link::from_message(&reply).unwrap();
        assert_eq!((link.kind, link.vlan_id), (Some(LinkKind::Vlan), Some(100)));
        VlanSpec::new(IfName::new("v0").unwrap(), 7, 0)
            .message()
            .unwrap();
        VlanSpec::new(IfName::new("v0").unwrap(), 7, 4094)
            .message()
            .unwrap();
        let e = VlanSpec::new(IfName::new("v0").unwrap(), 7, 4095)
            .message()
            .unwrap_err();
        assert!(e.to_string().contains("4095"), "{e}");
    }

    #[test]
    fn vid_range() {
        assert!(check_vid(0).is_err());
        assert!(check_vid(4095).is_err());
        check_vid(1).unwrap();
        check_vid(4094).unwrap();
    }
}
