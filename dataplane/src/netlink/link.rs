//! Links: lookup, creation (veth, bridge, macvlan, ipvlan), changes, bridge
//! ports and bridge VLANs, deletion.

use std::fmt;
use std::str::FromStr;

use netlink_packet_route::link as nl;
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{Guid, Netlink, CHANGE, CREATE, DUMP, NLM_F_ECHO, NLM_F_REQUEST};
use crate::error::{Errno, Error, Result};
use crate::mac::MacAddr;
use crate::netns::NetNs;

/// A network interface as the kernel reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Link {
    pub index: u32,
    pub name: String,
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
    pub name: String,
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
    fn from_kernel(kind: &str) -> LinkKind {
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

/// Macvlan modes, named as in `ip link` and the CNI macvlan plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MacvlanMode {
    Bridge,
    Private,
    Vepa,
    Passthru,
    Source,
}

impl MacvlanMode {
    pub const ALL: [MacvlanMode; 5] = [
        MacvlanMode::Bridge,
        MacvlanMode::Private,
        MacvlanMode::Vepa,
        MacvlanMode::Passthru,
        MacvlanMode::Source,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MacvlanMode::Bridge => "bridge",
            MacvlanMode::Private => "private",
            MacvlanMode::Vepa => "vepa",
            MacvlanMode::Passthru => "passthru",
            MacvlanMode::Source => "source",
        }
    }

    fn to_nl(self) -> nl::MacVlanMode {
        match self {
            MacvlanMode::Bridge => nl::MacVlanMode::Bridge,
            MacvlanMode::Private => nl::MacVlanMode::Private,
            MacvlanMode::Vepa => nl::MacVlanMode::Vepa,
            MacvlanMode::Passthru => nl::MacVlanMode::Passthrough,
            MacvlanMode::Source => nl::MacVlanMode::Source,
        }
    }

    fn from_nl(mode: &nl::MacVlanMode) -> Option<Self> {
        Some(match mode {
            nl::MacVlanMode::Bridge => MacvlanMode::Bridge,
            nl::MacVlanMode::Private => MacvlanMode::Private,
            nl::MacVlanMode::Vepa => MacvlanMode::Vepa,
            nl::MacVlanMode::Passthrough => MacvlanMode::Passthru,
            nl::MacVlanMode::Source => MacvlanMode::Source,
            _ => return None,
        })
    }
}

impl fmt::Display for MacvlanMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MacvlanMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        MacvlanMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "macvlan mode",
                    s,
                    "expected bridge, private, vepa, passthru or source",
                )
            })
    }
}

/// Ipvlan modes, named as in `ip link` and the CNI ipvlan plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpvlanMode {
    L2,
    L3,
    L3s,
}

impl IpvlanMode {
    pub const ALL: [IpvlanMode; 3] = [IpvlanMode::L2, IpvlanMode::L3, IpvlanMode::L3s];

    pub fn as_str(self) -> &'static str {
        match self {
            IpvlanMode::L2 => "l2",
            IpvlanMode::L3 => "l3",
            IpvlanMode::L3s => "l3s",
        }
    }

    fn to_nl(self) -> nl::IpVlanMode {
        match self {
            IpvlanMode::L2 => nl::IpVlanMode::L2,
            IpvlanMode::L3 => nl::IpVlanMode::L3,
            IpvlanMode::L3s => nl::IpVlanMode::L3S,
        }
    }

    fn from_nl(mode: &nl::IpVlanMode) -> Option<Self> {
        Some(match mode {
            nl::IpVlanMode::L2 => IpvlanMode::L2,
            nl::IpVlanMode::L3 => IpvlanMode::L3,
            nl::IpVlanMode::L3S => IpvlanMode::L3s,
            _ => return None,
        })
    }
}

impl fmt::Display for IpvlanMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for IpvlanMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        IpvlanMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| Error::invalid("ipvlan mode", s, "expected l2, l3 or l3s"))
    }
}

/// A veth pair to create. The local end (`name`) is created in the handle's
/// namespace; the peer is created directly in `peer_netns` (one kernel round
/// trip, no create-then-move) or next to the local end when `None`.
#[derive(Debug, Clone)]
pub struct VethSpec<'a> {
    pub name: String,
    pub peer_name: String,
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
    pub fn new(name: impl Into<String>, peer_name: impl Into<String>) -> Self {
        VethSpec {
            name: name.into(),
            peer_name: peer_name.into(),
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
    pub name: String,
    pub mtu: Option<u32>,
    pub mac: Option<MacAddr>,
    pub vlan_filtering: Option<bool>,
    pub up: bool,
}

impl BridgeSpec {
    pub fn new(name: impl Into<String>) -> Self {
        BridgeSpec {
            name: name.into(),
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
    pub name: String,
    pub master: u32,
    pub mode: MacvlanMode,
    pub netns: Option<&'a NetNs>,
    pub mtu: Option<u32>,
    pub mac: Option<MacAddr>,
    pub up: bool,
}

impl<'a> MacvlanSpec<'a> {
    pub fn new(name: impl Into<String>, master: u32, mode: MacvlanMode) -> Self {
        MacvlanSpec {
            name: name.into(),
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
    pub name: String,
    pub master: u32,
    pub mode: IpvlanMode,
    pub netns: Option<&'a NetNs>,
    pub mtu: Option<u32>,
    pub up: bool,
}

impl<'a> IpvlanSpec<'a> {
    pub fn new(name: impl Into<String>, master: u32, mode: IpvlanMode) -> Self {
        IpvlanSpec {
            name: name.into(),
            master,
            mode,
            netns: None,
            mtu: None,
            up: false,
        }
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
    pub name: Option<String>,
    /// Move the link into this namespace (IFLA_NET_NS_FD).
    pub netns: Option<&'a NetNs>,
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

/// Checks an interface name the way the kernel's `dev_valid_name` does
/// (the one rule, [`plexus_cni::names::check_ifname`]), so the error names
/// the field instead of coming back as a bare EINVAL.
pub fn validate_ifname(name: &str) -> Result<()> {
    plexus_cni::names::check_ifname(name)
        .map_err(|reason| Error::invalid("interface name", name, reason))
}

fn check_vid(vid: u16) -> Result<()> {
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
    fn from_message(m: &nl::LinkMessage) -> Link {
        let flags = m.header.flags;
        let mut link = Link {
            index: m.header.index,
            up: flags.contains(nl::LinkFlags::Up),
            lower_up: flags.contains(nl::LinkFlags::LowerUp),
            promisc: flags.contains(nl::LinkFlags::Promisc),
            allmulti: flags.contains(nl::LinkFlags::Allmulti),
            infiniband: m.header.link_layer_type == nl::LinkLayerType::Infiniband,
            ..Link::default()
        };
        for attr in &m.attributes {
            match attr {
                nl::LinkAttribute::IfName(n) => link.name = n.clone(),
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
                _ => {}
            }
        }
        link
    }

    fn apply_info(&mut self, infos: &[nl::LinkInfo]) {
        for info in infos {
            match info {
                nl::LinkInfo::Kind(k) => self.kind = Some(LinkKind::from_kernel(&k.to_string())),
                nl::LinkInfo::Data(nl::InfoData::MacVlan(data)) => {
                    for d in data {
                        if let nl::InfoMacVlan::Mode(m) = d {
                            self.macvlan_mode = MacvlanMode::from_nl(m);
                        }
                    }
                }
                nl::LinkInfo::Data(nl::InfoData::IpVlan(data)) => {
                    for d in data {
                        if let nl::InfoIpVlan::Mode(m) = d {
                            self.ipvlan_mode = IpvlanMode::from_nl(m);
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

fn set_flag(header: &mut nl::LinkHeader, flag: nl::LinkFlags, on: bool) {
    header.flags.set(flag, on);
    header.change_mask |= flag;
}

/// A NEWLINK message for a device of `kind` named `name`.
fn new_link_message(name: &str, kind: nl::InfoKind, data: Option<nl::InfoData>) -> nl::LinkMessage {
    let mut msg = nl::LinkMessage::default();
    msg.attributes
        .push(nl::LinkAttribute::IfName(name.to_string()));
    let mut info = vec![nl::LinkInfo::Kind(kind)];
    info.extend(data.map(nl::LinkInfo::Data));
    msg.attributes.push(nl::LinkAttribute::LinkInfo(info));
    msg
}

/// Attributes shared by every creation: MTU, MAC, admin state.
fn common_attributes(msg: &mut nl::LinkMessage, mtu: Option<u32>, mac: Option<MacAddr>, up: bool) {
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

/// Skip the (large) statistics blocks in link replies: nothing here uses them.
fn skip_stats() -> nl::LinkAttribute {
    nl::LinkAttribute::ExtMask(vec![nl::LinkExtentMask::SkipStats])
}

impl Netlink {
    /// The link named `name`, or `None` if there is none.
    pub fn link_by_name(&self, name: &str) -> Result<Option<Link>> {
        validate_ifname(name)?;
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
            Ok(replies) => Ok(first_link(&replies)),
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
        )
    }

    /// Creates a veth pair and returns the local end as created (its
    /// bridge-port settings, when it was made a port, are not read: see
    /// `create_local`). See [`VethSpec`].
    pub fn create_veth(&self, spec: &VethSpec) -> Result<Link> {
        validate_ifname(&spec.name)?;
        validate_ifname(&spec.peer_name)?;
        let mut peer = nl::LinkMessage::default();
        peer.attributes
            .push(nl::LinkAttribute::IfName(spec.peer_name.clone()));
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
        validate_ifname(&spec.name)?;
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
        validate_ifname(&spec.name)?;
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
        validate_ifname(&spec.name)?;
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

    /// Creates the IPoIB child of `spec` in this handle's namespace.
    pub fn create_ipoib(&self, spec: &IpoibSpec) -> Result<Link> {
        validate_ifname(&spec.name)?;
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
        name: &str,
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
        name: &str,
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
        match first_link(&replies).filter(|l| l.name == name) {
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
        if let Some(name) = &update.name {
            validate_ifname(name)?;
        }
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
            attrs.push(nl::LinkAttribute::IfName(name.clone()));
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
        self.request(
            "update link",
            &format_args!("index {index}"),
            RouteNetlinkMessage::SetLink(msg),
            CHANGE,
        )
        .map(drop)
        .map_err(|e| self.name_link(e, index))
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
    pub fn rename(&self, index: u32, name: &str) -> Result<()> {
        self.update_link(
            index,
            &LinkUpdate {
                name: Some(name.to_string()),
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
    pub fn del_link_by_name(&self, name: &str) -> Result<bool> {
        validate_ifname(name)?;
        let mut msg = nl::LinkMessage::default();
        msg.attributes
            .push(nl::LinkAttribute::IfName(name.to_string()));
        self.del_link_message(&name, msg)
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
        self.request(
            "set bridge port options of",
            &format_args!("index {index}"),
            RouteNetlinkMessage::NewLink(msg),
            CHANGE,
        )
        .map(drop)
        .map_err(|e| self.name_link(e, index))
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

fn first_link(replies: &[RouteNetlinkMessage]) -> Option<Link> {
    replies.iter().find_map(|r| match r {
        RouteNetlinkMessage::NewLink(m) => Some(Link::from_message(m)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifname_rules_match_the_kernel() {
        for ok in ["eth0", "eth0.100", "veth1234567890a", "net1", "a-b_c@d"] {
            validate_ifname(ok).unwrap();
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a:b",
            "a b",
            "a\tb",
            "veth1234567890ab",
            "a\0",
        ] {
            assert!(
                matches!(validate_ifname(bad), Err(Error::Invalid { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn macvlan_modes_parse_and_display() {
        for m in MacvlanMode::ALL {
            assert_eq!(m.as_str().parse::<MacvlanMode>().unwrap(), m);
            assert_eq!(MacvlanMode::from_nl(&m.to_nl()), Some(m));
        }
        assert!("passthrough".parse::<MacvlanMode>().is_err());
    }

    #[test]
    fn ipvlan_modes_parse_and_display() {
        for m in IpvlanMode::ALL {
            assert_eq!(m.as_str().parse::<IpvlanMode>().unwrap(), m);
            assert_eq!(IpvlanMode::from_nl(&m.to_nl()), Some(m));
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
        let link = Link::from_message(&msg);
        assert_eq!(link.parent_device.as_deref(), Some("0000:01:10.2"));
        assert!(link.infiniband);
        assert_eq!((link.mac, link.ib_guid), (None, Some(Guid(9))));
        let plain = Link::from_message(&nl::LinkMessage::default());
        assert_eq!((plain.parent_device, plain.infiniband), (None, false));
        assert_eq!(plain.ib_guid, None);
    }

    #[test]
    fn vid_range() {
        assert!(check_vid(0).is_err());
        assert!(check_vid(4095).is_err());
        check_vid(1).unwrap();
        check_vid(4094).unwrap();
    }
}
