//! SR-IOV virtual functions configured through their physical function:
//! `ip link set PF vf N ...` as typed requests ([`Netlink::set_vf`]), and the
//! VF's current settings as the PF reports them ([`Netlink::vf_state`]),
//! which a driver saves on ADD and gives back on DEL
//! ([`VfState::restoring`]).
//!
//! The PF is addressed by its link index in the handle's namespace; VF `N`
//! is the PF's `virtfnN` (see [`crate::pci::VirtualFunction::index`]).
//!
//! What a driver must know (measured with igb on qemu's 82576, see
//! shared/notes/sriov-vm.md):
//! - **Admin MAC vs netdev MAC.** The MAC set here is the PF's *admin* MAC
//!   for the VF. It reaches the VF's netdev only when the VF driver (igbvf)
//!   is rebound, and once it is set an untrusted VF can no longer change its
//!   own MAC (EADDRNOTAVAIL, "Cannot assign requested address"). So on ADD
//!   set the VF netdev's MAC first, then the admin MAC (sriov-cni's order);
//!   on DEL give back the admin MAC (usually clearing it to
//!   00:00:00:00:00:00) *before* restoring the netdev's MAC, or have the VF
//!   trusted meanwhile.
//! - **A saved MAC may be the VF's own.** Without an admin MAC, igb reports
//!   the MAC the VF chose for itself (igbvf's random one, or one set on its
//!   netdev) as the VF's `mac`: [`VfState::mac`] cannot tell the two apart,
//!   and giving back a non-zero saved MAC turns it into an admin MAC, which
//!   then locks an untrusted VF's own MAC. A driver that saw the saved MAC on
//!   the VF's netdev at ADD may rather clear the admin MAC on DEL.
//! - **Partial application.** The kernel applies the settings of one request
//!   in a fixed order (MAC, VLAN, rates, spoofchk, link state, trust, GUIDs)
//!   and stops at the first the driver refuses: the ones before it stay
//!   applied. Save the state before changing it and restore it on failure.
//! - **What drivers refuse.** igb: 802.1ad (EPROTONOSUPPORT), a minimum rate
//!   (EINVAL), link state and InfiniBand GUIDs (EOPNOTSUPP), a maximum rate
//!   while the PF has no link (EINVAL). Refusals are [`Error::Kernel`] with
//!   the errno; the kernel does not say which setting it refused, so the
//!   error's object lists what was asked.
//! - A VF bound to vfio-pci (no netdev) still takes its MAC and VLAN from
//!   the PF.

use std::fmt;
use std::str::FromStr;

use netlink_packet_route::link as nl;
use netlink_packet_route::RouteNetlinkMessage;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Netlink, CHANGE, NLM_F_REQUEST};
use crate::error::{Error, Result};
use crate::mac::MacAddr;

/// The tag protocol of a VF's port VLAN (sriov-cni's `vlanProto`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum VlanProto {
    /// 802.1Q (ethertype 0x8100), the default.
    #[default]
    Dot1Q,
    /// 802.1ad (0x88a8), QinQ's service tag.
    Dot1Ad,
}

impl fmt::Display for VlanProto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            VlanProto::Dot1Q => "802.1Q",
            VlanProto::Dot1Ad => "802.1ad",
        })
    }
}

impl FromStr for VlanProto {
    type Err = Error;

    /// `802.1Q` or `802.1ad`, in either case.
    fn from_str(s: &str) -> Result<Self> {
        if s.eq_ignore_ascii_case("802.1q") {
            Ok(VlanProto::Dot1Q)
        } else if s.eq_ignore_ascii_case("802.1ad") {
            Ok(VlanProto::Dot1Ad)
        } else {
            Err(Error::invalid(
                "VLAN protocol",
                s,
                "expected 802.1Q or 802.1ad",
            ))
        }
    }
}

/// A VF's port VLAN: frames of the VF are tagged `id` (priority `qos`) on
/// the wire. `id` 0 means no VLAN.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VfVlan {
    pub id: u16,
    pub qos: u8,
    pub proto: VlanProto,
}

impl VfVlan {
    /// An 802.1Q VLAN without priority.
    pub fn new(id: u16) -> Self {
        VfVlan {
            id,
            ..VfVlan::default()
        }
    }

    /// VLAN `id` with priority `qos`, tagged as `proto`.
    pub fn tagged(id: u16, qos: u8, proto: VlanProto) -> Self {
        VfVlan { id, qos, proto }
    }
}

netlink_names! {
    /// A VF's link state as the PF forces it (sriov-cni's `link_state`).
    pub enum VfLinkState("VF link state") as nl::VfLinkState {
        /// Follows the PF's link.
        Auto = "auto" <=> Auto,
        /// Always up.
        Enable = "enable" <=> Enable,
        /// Always down.
        Disable = "disable" <=> Disable,
    }
}

/// An InfiniBand GUID, written as 8 colon-separated hex octets
/// (`00:11:22:33:44:55:66:77`, first octet most significant), as `ip link`
/// and the InfiniBand SR-IOV CNI take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Guid(pub u64);

impl Guid {
    /// All ones: the GUID of a VF that has none assigned, which is what a VF
    /// whose GUID was all zeros is given back (ib-sriov-cni's `DefaultGUID`).
    pub const UNASSIGNED: Guid = Guid(u64::MAX);

    /// Why no VF may be given this GUID, if so: all zeros is no GUID at all,
    /// all ones means "none assigned" (ib-sriov-cni's `IsAllZeroGUID`,
    /// `IsAllOnesGUID`).
    pub fn reserved(self) -> Option<&'static str> {
        match self.0 {
            0 => Some("all zeros, which is no GUID"),
            u64::MAX => Some("all ones, which means no GUID assigned"),
            _ => None,
        }
    }

    /// The port GUID in an IPoIB netdev's 20-byte hardware address (4 bytes
    /// of flags and queue pair number, the 8-byte subnet prefix, then the
    /// GUID: ib-sriov-cni's `GetGUIDFromHwAddr`); `None` for any other
    /// length.
    pub fn from_ipoib_address(address: &[u8]) -> Option<Guid> {
        let bytes: [u8; 20] = address.try_into().ok()?;
        let mut guid = [0u8; 8];
        guid.copy_from_slice(&bytes[12..]);
        Some(Guid(u64::from_be_bytes(guid)))
    }
}

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0.to_be_bytes();
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
        )
    }
}

impl FromStr for Guid {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::invalid("GUID", s, "expected 8 octets as hex pairs separated by ':'");
        let octets: Vec<&str> = s.split(':').collect();
        if octets.len() != 8 {
            return Err(bad());
        }
        let mut bytes = [0u8; 8];
        for (byte, octet) in bytes.iter_mut().zip(octets) {
            if octet.len() != 2 || !octet.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad());
            }
            *byte = u8::from_str_radix(octet, 16).map_err(|_| bad())?;
        }
        Ok(Guid(u64::from_be_bytes(bytes)))
    }
}

/// Serde through `Display` and `FromStr`: the record keeps these as text.
macro_rules! serde_as_text {
    ($($t:ty),*) => {$(
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
            }
        }
    )*};
}

serde_as_text!(VlanProto, VfLinkState, Guid);

/// Settings of one VF, each applied through the PF when `Some` (sriov-cni's
/// `mac`, `vlan`/`vlanQoS`/`vlanProto`, `spoofchk`, `trust`, `link_state`,
/// `min_tx_rate`, `max_tx_rate`; ib-sriov's GUIDs). Rates are in Mbit/s, 0
/// meaning no limit. Serializable like [`VfState`], so a driver's record can
/// say what it applied.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VfSettings {
    /// The admin MAC (see the module docs for its order with the netdev's
    /// MAC); 00:00:00:00:00:00 clears it.
    pub mac: Option<MacAddr>,
    /// The port VLAN; id 0 clears it.
    pub vlan: Option<VfVlan>,
    pub spoofchk: Option<bool>,
    pub trust: Option<bool>,
    pub link_state: Option<VfLinkState>,
    /// Set alone, the maximum is kept as it is (read first).
    pub min_tx_rate: Option<u32>,
    /// Set alone, the minimum is kept as it is (by the kernel).
    pub max_tx_rate: Option<u32>,
    /// InfiniBand only: the VF's node GUID.
    pub ib_node_guid: Option<Guid>,
    /// InfiniBand only: the VF's port GUID.
    pub ib_port_guid: Option<Guid>,
}

impl VfSettings {
    pub fn is_empty(&self) -> bool {
        *self == VfSettings::default()
    }

    /// Whether an InfiniBand node or port GUID is set (which a VF takes only
    /// when its driver binds again: [`crate::pci::PciDevice::rebind`]).
    pub fn sets_ib_guid(&self) -> bool {
        self.ib_node_guid.is_some() || self.ib_port_guid.is_some()
    }

    fn validate(&self) -> Result<()> {
        if let Some(vlan) = self.vlan {
            if vlan.id > 4094 {
                return Err(Error::invalid(
                    "VF VLAN id",
                    vlan.id.to_string(),
                    "must be 0 (none) to 4094",
                ));
            }
            if vlan.qos > 7 {
                return Err(Error::invalid(
                    "VF VLAN QoS",
                    vlan.qos.to_string(),
                    "must be 0 to 7",
                ));
            }
        }
        Ok(())
    }
}

/// Written as `ip link set PF vf N` takes them, for error messages.
impl fmt::Display for VfSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let onoff = |b: bool| if b { "on" } else { "off" };
        let mut parts = Vec::new();
        if let Some(mac) = self.mac {
            parts.push(format!("mac {mac}"));
        }
        if let Some(v) = self.vlan {
            parts.push(format!("vlan {} qos {} proto {}", v.id, v.qos, v.proto));
        }
        if let Some(min) = self.min_tx_rate {
            parts.push(format!("min_tx_rate {min}"));
        }
        if let Some(max) = self.max_tx_rate {
            parts.push(format!("max_tx_rate {max}"));
        }
        if let Some(on) = self.spoofchk {
            parts.push(format!("spoofchk {}", onoff(on)));
        }
        if let Some(state) = self.link_state {
            parts.push(format!("state {state}"));
        }
        if let Some(on) = self.trust {
            parts.push(format!("trust {}", onoff(on)));
        }
        if let Some(guid) = self.ib_node_guid {
            parts.push(format!("node_guid {guid}"));
        }
        if let Some(guid) = self.ib_port_guid {
            parts.push(format!("port_guid {guid}"));
        }
        f.write_str(&parts.join(" "))
    }
}

/// A VF's settings as its PF reports them. Serializable (MAC, GUIDs,
/// protocol and link state as text), so a driver can keep the state saved on
/// ADD in its record until DEL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct VfState {
    /// The VF's number on the PF.
    pub vf: u32,
    /// The admin MAC; 00:00:00:00:00:00 when none is set, or (igb) the
    /// VF's own MAC (see the module docs).
    pub mac: MacAddr,
    /// The port VLAN (id 0: none). The protocol is 802.1Q unless the kernel
    /// reports otherwise.
    pub vlan: VfVlan,
    /// `false` also when the driver does not report it (the kernel's -1
    /// comes out as `false`): restore only what you applied.
    pub spoofchk: bool,
    /// As `spoofchk`.
    pub trust: bool,
    /// `None` for a value this crate does not know.
    pub link_state: Option<VfLinkState>,
    pub min_tx_rate: u32,
    pub max_tx_rate: u32,
    /// Reported by InfiniBand drivers only.
    pub ib_node_guid: Option<Guid>,
    pub ib_port_guid: Option<Guid>,
}

impl VfState {
    /// The state of a VF with nothing set.
    pub(crate) fn unset(vf: u32) -> Self {
        VfState {
            vf,
            mac: MacAddr([0; 6]),
            vlan: VfVlan::default(),
            spoofchk: false,
            trust: false,
            link_state: None,
            min_tx_rate: 0,
            max_tx_rate: 0,
            ib_node_guid: None,
            ib_port_guid: None,
        }
    }

    /// The settings that give back this (saved) state for everything
    /// `applied` changed, and leave the rest alone: a driver saves the state
    /// on ADD and applies `saved.restoring(&applied)` on DEL. Settings never
    /// applied are never sent, so a driver that refuses one (igb and link
    /// state) is not asked. A GUID the PF did not report cannot be restored.
    pub fn restoring(&self, applied: &VfSettings) -> VfSettings {
        VfSettings {
            mac: applied.mac.map(|_| self.mac),
            vlan: applied.vlan.map(|_| self.vlan),
            spoofchk: applied.spoofchk.map(|_| self.spoofchk),
            trust: applied.trust.map(|_| self.trust),
            link_state: applied.link_state.and(self.link_state),
            min_tx_rate: applied.min_tx_rate.map(|_| self.min_tx_rate),
            max_tx_rate: applied.max_tx_rate.map(|_| self.max_tx_rate),
            ib_node_guid: applied.ib_node_guid.and(self.ib_node_guid),
            ib_port_guid: applied.ib_port_guid.and(self.ib_port_guid),
        }
    }

    /// [`restoring`](Self::restoring), limited to the settings that differ
    /// between this (saved) state and `now`, the VF's current one: what gives
    /// the VF back after an ADD that the kernel may have applied only in part
    /// (it stops at the first setting the driver refuses), without sending
    /// what never changed, which a driver may refuse (igb and link state).
    /// The two rates go together when either differs.
    pub fn restoring_changed(&self, now: &VfState, applied: &VfSettings) -> VfSettings {
        let all = self.restoring(applied);
        let rates_differ =
            (now.min_tx_rate, now.max_tx_rate) != (self.min_tx_rate, self.max_tx_rate);
        VfSettings {
            mac: all.mac.filter(|_| now.mac != self.mac),
            vlan: all.vlan.filter(|_| now.vlan != self.vlan),
            spoofchk: all.spoofchk.filter(|_| now.spoofchk != self.spoofchk),
            trust: all.trust.filter(|_| now.trust != self.trust),
            link_state: all.link_state.filter(|_| now.link_state != self.link_state),
            min_tx_rate: all.min_tx_rate.filter(|_| rates_differ),
            max_tx_rate: all.max_tx_rate.filter(|_| rates_differ),
            ib_node_guid: all
                .ib_node_guid
                .filter(|_| now.ib_node_guid != self.ib_node_guid),
            ib_port_guid: all
                .ib_port_guid
                .filter(|_| now.ib_port_guid != self.ib_port_guid),
        }
    }
}

impl Netlink {
    /// Applies `settings` to VF `vf` of the PF with link index `pf`, in one
    /// RTM_SETLINK (see the module docs for the kernel's order and partial
    /// application). Nothing is sent for empty settings. A minimum rate set
    /// alone first reads the current maximum, which the kernel would
    /// otherwise reset.
    pub fn set_vf(&self, pf: u32, vf: u32, settings: &VfSettings) -> Result<()> {
        settings.validate()?;
        if settings.is_empty() {
            return Ok(());
        }
        let current_max_rate = || {
            self.vf_state(pf, vf)?
                .map(|s| s.max_tx_rate)
                .ok_or_else(|| {
                    Error::invalid("VF", self.describe_vf(pf, vf), "its PF does not report it")
                })
        };
        let mut msg = nl::LinkMessage::default();
        msg.header.index = pf;
        msg.attributes
            .push(nl::LinkAttribute::VfInfoList(vf_info_list(
                vf,
                settings,
                current_max_rate,
            )?));
        self.request(
            "configure",
            &format_args!("VF {vf} of index {pf}"),
            RouteNetlinkMessage::SetLink(msg),
            CHANGE,
        )
        .map(drop)
        .map_err(|mut e| {
            if let Error::Kernel { object, .. } | Error::Netlink { object, .. } = &mut e {
                *object = format!("{} [{settings}]", self.describe_vf(pf, vf));
            }
            e
        })
    }

    /// The settings of VF `vf` of the PF with link index `pf` (RTM_GETLINK
    /// with RTEXT_FILTER_VF), `None` when the PF has no such VF. A missing PF
    /// is an ENODEV [`Error::Kernel`].
    pub fn vf_state(&self, pf: u32, vf: u32) -> Result<Option<VfState>> {
        Ok(self.vf_states(pf)?.into_iter().find(|s| s.vf == vf))
    }

    /// The settings of every VF of the PF with link index `pf`, by VF number.
    /// They come in one reply of about 200 bytes per VF, which netlink-proto
    /// reads into a 64 KiB buffer: enough for some 300 VFs.
    pub fn vf_states(&self, pf: u32) -> Result<Vec<VfState>> {
        let mut msg = nl::LinkMessage::default();
        msg.header.index = pf;
        msg.attributes.push(nl::LinkAttribute::ExtMask(vec![
            nl::LinkExtentMask::Vf,
            nl::LinkExtentMask::SkipStats,
        ]));
        let replies = self
            .request(
                "read VFs of",
                &format_args!("index {pf}"),
                RouteNetlinkMessage::GetLink(msg),
                NLM_F_REQUEST,
            )
            .map_err(|e| self.name_link(e, pf))?;
        let mut states: Vec<VfState> = replies
            .iter()
            .filter_map(|r| match r {
                RouteNetlinkMessage::NewLink(m) => Some(m),
                _ => None,
            })
            .flat_map(|m| &m.attributes)
            .filter_map(|a| match a {
                nl::LinkAttribute::VfInfoList(list) => Some(list),
                _ => None,
            })
            .flatten()
            .filter_map(decode_vf)
            .collect();
        states.sort_by_key(|s| s.vf);
        Ok(states)
    }

    /// "VF N of NAME (index I)", or "VF N of index I" when the PF cannot be
    /// looked up.
    fn describe_vf(&self, pf: u32, vf: u32) -> String {
        match self.link_by_index(pf) {
            Ok(Some(link)) => format!("VF {vf} of {} (index {pf})", link.name),
            _ => format!("VF {vf} of index {pf}"),
        }
    }
}

/// The IFLA_VFINFO_LIST of a request applying `s` to VF `vf`.
/// `current_max_rate` is asked only for a minimum rate set alone.
///
/// Usually one IFLA_VF_INFO entry. The port GUID goes in a second one: the
/// kernel's handler of an entry returns right after the node GUID, so a port
/// GUID next to it would be ignored silently.
fn vf_info_list(
    vf: u32,
    s: &VfSettings,
    current_max_rate: impl FnOnce() -> Result<u32>,
) -> Result<Vec<nl::LinkVfInfo>> {
    let mut info = Vec::new();
    if let Some(mac) = s.mac {
        info.push(nl::VfInfo::Mac(nl::VfInfoMac::new(vf, &mac.0)));
    }
    if let Some(vlan) = s.vlan {
        let (id, qos) = (u32::from(vlan.id), u32::from(vlan.qos));
        info.push(match vlan.proto {
            // IFLA_VF_VLAN, which every kernel and driver knows, is 802.1Q.
            VlanProto::Dot1Q => nl::VfInfo::Vlan(nl::VfInfoVlan::new(vf, id, qos)),
            VlanProto::Dot1Ad => nl::VfInfo::VlanList(vec![nl::VfVlan::Info(nl::VfVlanInfo::new(
                vf,
                id,
                qos,
                nl::VlanProtocol::Ieee8021Ad,
            ))]),
        });
    }
    match (s.min_tx_rate, s.max_tx_rate) {
        (None, None) => {}
        // IFLA_VF_TX_RATE: the kernel keeps the current minimum.
        (None, Some(max)) => info.push(nl::VfInfo::TxRate(nl::VfInfoTxRate::new(vf, max))),
        (Some(min), max) => {
            let max = match max {
                Some(max) => max,
                None => current_max_rate()?,
            };
            info.push(nl::VfInfo::Rate(nl::VfInfoRate::new(vf, min, max)));
        }
    }
    if let Some(on) = s.spoofchk {
        info.push(nl::VfInfo::SpoofCheck(nl::VfInfoSpoofCheck::new(vf, on)));
    }
    if let Some(state) = s.link_state {
        info.push(nl::VfInfo::LinkState(nl::VfInfoLinkState::new(
            vf,
            state.to_nl(),
        )));
    }
    if let Some(on) = s.trust {
        info.push(nl::VfInfo::Trust(nl::VfInfoTrust::new(vf, on)));
    }
    if let Some(guid) = s.ib_node_guid {
        info.push(nl::VfInfo::IbNodeGuid(nl::VfInfoGuid::new(vf, guid.0)));
    }
    let mut list = Vec::new();
    if !info.is_empty() {
        list.push(nl::LinkVfInfo(info));
    }
    if let Some(guid) = s.ib_port_guid {
        list.push(nl::LinkVfInfo(vec![nl::VfInfo::IbPortGuid(
            nl::VfInfoGuid::new(vf, guid.0),
        )]));
    }
    Ok(list)
}

/// One IFLA_VF_INFO entry of a PF's reply, `None` without the VF's number
/// (every kernel sends IFLA_VF_MAC, which carries it).
fn decode_vf(entry: &nl::LinkVfInfo) -> Option<VfState> {
    let mut state = VfState::unset(0);
    let mut vf = None;
    let (mut have_vlan_list, mut have_rate) = (false, false);
    let vlan = |id: u32, qos: u32, proto| VfVlan {
        id: u16::try_from(id).unwrap_or(u16::MAX),
        qos: u8::try_from(qos).unwrap_or(u8::MAX),
        proto,
    };
    for attr in &entry.0 {
        match attr {
            nl::VfInfo::Mac(m) => {
                vf = Some(m.vf_id);
                state.mac = MacAddr::from_slice(&m.mac[..6]).unwrap_or(state.mac);
            }
            // The list (kernel 4.9+) also has the protocol; it wins.
            nl::VfInfo::VlanList(list) => {
                if let Some(nl::VfVlan::Info(v)) = list.first() {
                    let proto = match v.protocol {
                        nl::VlanProtocol::Ieee8021Ad => VlanProto::Dot1Ad,
                        _ => VlanProto::Dot1Q,
                    };
                    state.vlan = vlan(v.vlan_id, v.qos, proto);
                    have_vlan_list = true;
                }
            }
            nl::VfInfo::Vlan(v) if !have_vlan_list => {
                state.vlan = vlan(v.vlan_id, v.qos, VlanProto::Dot1Q);
            }
            nl::VfInfo::Rate(r) => {
                (state.min_tx_rate, state.max_tx_rate) = (r.min_tx_rate, r.max_tx_rate);
                have_rate = true;
            }
            nl::VfInfo::TxRate(r) if !have_rate => state.max_tx_rate = r.rate,
            nl::VfInfo::SpoofCheck(s) => state.spoofchk = s.enabled,
            nl::VfInfo::Trust(t) => state.trust = t.enabled,
            nl::VfInfo::LinkState(l) => state.link_state = VfLinkState::from_nl(l.state),
            nl::VfInfo::IbNodeGuid(g) => state.ib_node_guid = Some(Guid(g.guid)),
            nl::VfInfo::IbPortGuid(g) => state.ib_port_guid = Some(Guid(g.guid)),
            _ => {}
        }
    }
    state.vf = vf?;
    Some(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtnetlink::packet_core::{Emitable, Parseable};

    fn mac(s: &str) -> MacAddr {
        s.parse().unwrap()
    }

    /// A link message carrying `list`, through its wire form and back, as
    /// the kernel would receive and (for a reply) send it.
    fn round_trip(list: Vec<nl::LinkVfInfo>) -> (Vec<u8>, Vec<nl::LinkVfInfo>) {
        let mut msg = nl::LinkMessage::default();
        msg.attributes.push(nl::LinkAttribute::VfInfoList(list));
        let mut wire = vec![0u8; msg.buffer_len()];
        msg.emit(&mut wire);
        let parsed = nl::LinkMessage::parse(wire.as_slice()).unwrap();
        let Some(nl::LinkAttribute::VfInfoList(list)) = parsed.attributes.into_iter().next() else {
            panic!("no VF info list");
        };
        (wire, list)
    }

    fn no_read() -> Result<u32> {
        panic!("the current rate must not be read")
    }

    #[test]
    fn every_setting_is_encoded_and_decodes_as_state() {
        let settings = VfSettings {
            mac: Some(mac("02:00:00:00:00:07")),
            vlan: Some(VfVlan::tagged(20, 5, VlanProto::Dot1Ad)),
            spoofchk: Some(false),
            trust: Some(true),
            link_state: Some(VfLinkState::Disable),
            min_tx_rate: Some(10),
            max_tx_rate: Some(100),
            ib_node_guid: Some("00:11:22:33:44:55:66:77".parse().unwrap()),
            ib_port_guid: None,
        };
        let (_, list) = round_trip(vf_info_list(3, &settings, no_read).unwrap());
        assert_eq!(list.len(), 1);
        let state = decode_vf(&list[0]).unwrap();
        assert_eq!(
            state,
            VfState {
                vf: 3,
                mac: mac("02:00:00:00:00:07"),
                vlan: VfVlan::tagged(20, 5, VlanProto::Dot1Ad),
                spoofchk: false,
                trust: true,
                link_state: Some(VfLinkState::Disable),
                min_tx_rate: 10,
                max_tx_rate: 100,
                ib_node_guid: Some(Guid(0x0011_2233_4455_6677)),
                ib_port_guid: None,
            }
        );
        assert_eq!(
            settings.to_string(),
            "mac 02:00:00:00:00:07 vlan 20 qos 5 proto 802.1ad min_tx_rate 10 max_tx_rate 100 \
             spoofchk off state disable trust on node_guid 00:11:22:33:44:55:66:77"
        );
    }

    /// No software device takes InfiniBand GUIDs (igb and netdevsim answer
    /// EOPNOTSUPP, and IPoIB cannot exist without RDMA hardware), so the
    /// wire form is checked here: `struct ifla_vf_guid { __u32 vf; __u64
    /// guid; }` with the GUID at offset 8 in host order, and the port GUID
    /// in an IFLA_VF_INFO entry of its own, because the kernel stops reading
    /// an entry after its node GUID.
    #[test]
    fn guids_are_laid_out_as_the_kernel_reads_them() {
        let node: Guid = "00:11:22:33:44:55:66:77".parse().unwrap();
        let port: Guid = "88:99:aa:bb:cc:dd:ee:ff".parse().unwrap();
        assert_eq!(port.to_string(), "88:99:aa:bb:cc:dd:ee:ff");
        let settings = VfSettings {
            ib_node_guid: Some(node),
            ib_port_guid: Some(port),
            ..VfSettings::default()
        };
        let (wire, list) = round_trip(vf_info_list(2, &settings, no_read).unwrap());
        assert_eq!(list.len(), 2, "{list:?}");
        assert_eq!(
            list[0].0,
            vec![nl::VfInfo::IbNodeGuid(nl::VfInfoGuid::new(2, node.0))]
        );
        assert_eq!(
            list[1].0,
            vec![nl::VfInfo::IbPortGuid(nl::VfInfoGuid::new(2, port.0))]
        );
        // After the link header (16 bytes): IFLA_VFINFO_LIST (22), then per
        // entry IFLA_VF_INFO (1) holding IFLA_VF_IB_NODE_GUID (10) or
        // IFLA_VF_IB_PORT_GUID (11), each 4 + 16 bytes.
        let attrs = &wire[16..];
        let u16_at = |b: &[u8], off: usize| u16::from_ne_bytes([b[off], b[off + 1]]);
        assert_eq!(u16_at(attrs, 2), 22);
        let entry = &attrs[4..];
        assert_eq!((u16_at(entry, 0), u16_at(entry, 2)), (24, 1));
        let guid_attr = &entry[4..24];
        assert_eq!((u16_at(guid_attr, 0), u16_at(guid_attr, 2)), (20, 10));
        assert_eq!(guid_attr[4..8], 2u32.to_ne_bytes());
        assert_eq!(guid_attr[12..20], node.0.to_ne_bytes());
        let second = &entry[24..];
        assert_eq!((u16_at(second, 0), u16_at(second, 2)), (24, 1));
        assert_eq!(u16_at(&second[4..], 2), 11);
        assert_eq!(second[16..24], port.0.to_ne_bytes());
    }

    #[test]
    fn vlan_8021q_uses_the_classic_attribute_and_rates_keep_the_other_bound() {
        let settings = VfSettings {
            vlan: Some(VfVlan::tagged(10, 3, VlanProto::Dot1Q)),
            max_tx_rate: Some(100),
            ..VfSettings::default()
        };
        let list = vf_info_list(0, &settings, no_read).unwrap();
        assert_eq!(
            list[0].0,
            vec![
                nl::VfInfo::Vlan(nl::VfInfoVlan::new(0, 10, 3)),
                // The kernel keeps the current minimum.
                nl::VfInfo::TxRate(nl::VfInfoTxRate::new(0, 100)),
            ]
        );
        // A minimum alone keeps the current maximum, read first.
        let min_only = VfSettings {
            min_tx_rate: Some(10),
            ..VfSettings::default()
        };
        let list = vf_info_list(1, &min_only, || Ok(250)).unwrap();
        assert_eq!(
            list[0].0,
            vec![nl::VfInfo::Rate(nl::VfInfoRate::new(1, 10, 250))]
        );
        assert!(vf_info_list(1, &VfSettings::default(), no_read)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn an_entry_without_vlan_list_or_rate_falls_back_to_the_classic_ones() {
        let entry = nl::LinkVfInfo(vec![
            nl::VfInfo::Mac(nl::VfInfoMac::new(4, &mac("02:00:00:00:00:01").0)),
            nl::VfInfo::Vlan(nl::VfInfoVlan::new(4, 7, 1)),
            nl::VfInfo::TxRate(nl::VfInfoTxRate::new(4, 300)),
            nl::VfInfo::LinkState(nl::VfInfoLinkState::new(4, nl::VfLinkState::Other(9))),
        ]);
        let state = decode_vf(&entry).unwrap();
        assert_eq!(state.vf, 4);
        assert_eq!(state.vlan, VfVlan::tagged(7, 1, VlanProto::Dot1Q));
        assert_eq!((state.min_tx_rate, state.max_tx_rate), (0, 300));
        assert_eq!(state.link_state, None);
        assert_eq!(decode_vf(&nl::LinkVfInfo(vec![])), None, "no VF number");
    }

    #[test]
    fn restoring_gives_back_only_what_was_applied() {
        let saved = VfState {
            vf: 1,
            mac: MacAddr([0; 6]),
            vlan: VfVlan::default(),
            spoofchk: true,
            trust: false,
            link_state: Some(VfLinkState::Auto),
            min_tx_rate: 0,
            max_tx_rate: 0,
            ib_node_guid: None,
            ib_port_guid: None,
        };
        let applied = VfSettings {
            mac: Some(mac("02:00:00:00:00:01")),
            vlan: Some(VfVlan::new(10)),
            trust: Some(true),
            max_tx_rate: Some(100),
            ib_node_guid: Some(Guid(1)),
            ..VfSettings::default()
        };
        assert_eq!(
            saved.restoring(&applied),
            VfSettings {
                mac: Some(MacAddr([0; 6])),
                vlan: Some(VfVlan::default()),
                trust: Some(false),
                max_tx_rate: Some(0),
                ..VfSettings::default()
            }
        );
        assert!(saved.restoring(&VfSettings::default()).is_empty());
    }

    #[test]
    fn restoring_changed_skips_what_the_kernel_did_not_take() {
        let saved = VfState::unset(1);
        let applied = VfSettings {
            mac: Some(mac("02:00:00:00:00:01")),
            vlan: Some(VfVlan::new(10)),
            trust: Some(true),
            link_state: Some(VfLinkState::Enable),
            min_tx_rate: Some(0),
            max_tx_rate: Some(100),
            ..VfSettings::default()
        };
        // The kernel stopped at the link state: MAC, VLAN and rates applied,
        // trust (after the link state) not.
        let mut now = saved.clone();
        now.mac = mac("02:00:00:00:00:01");
        now.vlan = VfVlan::new(10);
        now.max_tx_rate = 100;
        let mut saved_with_state = saved.clone();
        saved_with_state.link_state = Some(VfLinkState::Auto);
        now.link_state = Some(VfLinkState::Auto);
        assert_eq!(
            saved_with_state.restoring_changed(&now, &applied),
            VfSettings {
                mac: Some(MacAddr([0; 6])),
                vlan: Some(VfVlan::default()),
                min_tx_rate: Some(0),
                max_tx_rate: Some(0),
                ..VfSettings::default()
            }
        );
        assert!(saved.restoring_changed(&saved, &applied).is_empty());
    }

    #[test]
    fn applied_settings_survive_serialization() {
        let settings = VfSettings {
            mac: Some(mac("02:00:00:00:00:0a")),
            vlan: Some(VfVlan::tagged(5, 1, VlanProto::Dot1Ad)),
            link_state: Some(VfLinkState::Disable),
            ib_port_guid: Some(Guid(3)),
            ..VfSettings::default()
        };
        let text = serde_json::to_string(&settings).unwrap();
        assert!(text.contains(r#""mac":"02:00:00:00:00:0a""#), "{text}");
        assert_eq!(serde_json::from_str::<VfSettings>(&text).unwrap(), settings);
        assert_eq!(
            serde_json::from_str::<VfSettings>("{}").unwrap(),
            VfSettings::default()
        );
        assert!(serde_json::from_str::<VfSettings>(r#"{"mac":"zz"}"#).is_err());
    }

    #[test]
    fn a_saved_state_survives_serialization() {
        let mut state = VfState::unset(2);
        state.mac = mac("02:00:00:00:00:09");
        state.vlan = VfVlan::tagged(30, 1, VlanProto::Dot1Ad);
        state.link_state = Some(VfLinkState::Enable);
        state.ib_port_guid = Some(Guid(0xfe80_0000_0000_0001));
        let text = serde_json::to_string(&state).unwrap();
        assert!(text.contains(r#""mac":"02:00:00:00:00:09""#), "{text}");
        assert!(text.contains(r#""proto":"802.1ad""#), "{text}");
        assert!(
            text.contains(r#""ib_port_guid":"fe:80:00:00:00:00:00:01""#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<VfState>(&text).unwrap(), state);
        let bad = text.replace("802.1ad", "802.1x");
        assert!(serde_json::from_str::<VfState>(&bad).is_err());
    }

    #[test]
    fn values_parse_as_sriov_cni_writes_them() {
        assert_eq!("802.1q".parse::<VlanProto>().unwrap(), VlanProto::Dot1Q);
        assert_eq!("802.1AD".parse::<VlanProto>().unwrap(), VlanProto::Dot1Ad);
        assert!("qinq".parse::<VlanProto>().is_err());
        for &s in VfLinkState::ALL {
            assert_eq!(s.as_str().parse::<VfLinkState>().unwrap(), s);
            assert_eq!(VfLinkState::from_nl(s.to_nl()), Some(s));
        }
        assert!("up".parse::<VfLinkState>().is_err());
        for bad in [
            "",
            "00:11:22:33:44:55:66",
            "00:11:22:33:44:55:66:77:88",
            "0:11:22:33:44:55:66:77",
            "00:11:22:33:44:55:66:zz",
        ] {
            assert!(bad.parse::<Guid>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn reserved_guids_and_the_guid_of_an_ipoib_address() {
        assert!(Guid(0).reserved().unwrap().contains("all zeros"));
        assert!(Guid::UNASSIGNED.reserved().unwrap().contains("all ones"));
        assert_eq!(Guid::UNASSIGNED.to_string(), "ff:ff:ff:ff:ff:ff:ff:ff");
        assert_eq!(Guid(1).reserved(), None);
        // QPN 0x000048, subnet prefix fe80::, port GUID 00:11:..:77.
        let mut address = vec![0x00, 0x00, 0x00, 0x48, 0xfe, 0x80, 0, 0, 0, 0, 0, 0];
        address.extend([0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77]);
        assert_eq!(
            Guid::from_ipoib_address(&address),
            Some(Guid(0x0011_2233_4455_6677))
        );
        assert_eq!(Guid::from_ipoib_address(&address[..6]), None);
    }

    #[test]
    fn out_of_range_vlans_are_refused_before_the_kernel() {
        for vlan in [VfVlan::new(4095), VfVlan::tagged(1, 8, VlanProto::Dot1Q)] {
            let s = VfSettings {
                vlan: Some(vlan),
                ..VfSettings::default()
            };
            assert!(
                matches!(s.validate(), Err(Error::Invalid { .. })),
                "{vlan:?}"
            );
        }
    }
}
