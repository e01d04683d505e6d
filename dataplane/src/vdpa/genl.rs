//! The `vdpa` generic-netlink family (linux `include/uapi/linux/vdpa.h`):
//! its commands and attributes as typed [`GenlFamily`] messages, and a
//! blocking socket that resolves the family and exchanges them.
//!
//! The kernel registers the family with `netnsok = false`: it answers only
//! in the initial network namespace, the node's, where plexus runs.

use netlink_packet_generic::ctrl::nlas::GenlCtrlAttrs;
use netlink_packet_generic::ctrl::{GenlCtrl, GenlCtrlCmd};
use netlink_packet_generic::{GenlFamily, GenlHeader, GenlMessage};
use rtnetlink::packet_core::{
    parse_string, parse_u16, parse_u32, DecodeError, DefaultNla, Emitable, ErrorContext,
    NetlinkDeserializable, NetlinkMessage, NetlinkSerializable, Nla, NlaBuffer, NlasIterator,
    Parseable, ParseableParametrized, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL,
    NLM_F_REQUEST,
};
use rtnetlink::sys::protocols::NETLINK_GENERIC;

use crate::error::{Errno, Error, Result};
use crate::mac::MacAddr;
use crate::netlink::socket::NetlinkSocket;

/// `VDPA_GENL_NAME`, `VDPA_GENL_VERSION`.
pub const FAMILY: &str = "vdpa";
const VERSION: u8 = 1;

// enum vdpa_command
const VDPA_CMD_DEV_NEW: u8 = 3;
const VDPA_CMD_DEV_DEL: u8 = 4;
const VDPA_CMD_DEV_GET: u8 = 5;
const VDPA_CMD_DEV_CONFIG_GET: u8 = 6;

// enum vdpa_attr
const VDPA_ATTR_MGMTDEV_BUS_NAME: u16 = 1;
const VDPA_ATTR_MGMTDEV_DEV_NAME: u16 = 2;
const VDPA_ATTR_DEV_NAME: u16 = 4;
const VDPA_ATTR_DEV_ID: u16 = 5;
const VDPA_ATTR_DEV_VENDOR_ID: u16 = 6;
const VDPA_ATTR_DEV_MAX_VQS: u16 = 7;
const VDPA_ATTR_DEV_NET_CFG_MACADDR: u16 = 10;
const VDPA_ATTR_DEV_NET_CFG_MTU: u16 = 13;

/// The virtio device ID of a network device (virtio spec §5: 1).
pub const VIRTIO_ID_NET: u32 = 1;

/// A `vdpa` family command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VdpaCmd {
    DevNew,
    DevDel,
    DevGet,
    DevConfigGet,
    Other(u8),
}

impl From<VdpaCmd> for u8 {
    fn from(cmd: VdpaCmd) -> u8 {
        match cmd {
            VdpaCmd::DevNew => VDPA_CMD_DEV_NEW,
            VdpaCmd::DevDel => VDPA_CMD_DEV_DEL,
            VdpaCmd::DevGet => VDPA_CMD_DEV_GET,
            VdpaCmd::DevConfigGet => VDPA_CMD_DEV_CONFIG_GET,
            VdpaCmd::Other(c) => c,
        }
    }
}

impl From<u8> for VdpaCmd {
    fn from(cmd: u8) -> VdpaCmd {
        match cmd {
            VDPA_CMD_DEV_NEW => VdpaCmd::DevNew,
            VDPA_CMD_DEV_DEL => VdpaCmd::DevDel,
            VDPA_CMD_DEV_GET => VdpaCmd::DevGet,
            VDPA_CMD_DEV_CONFIG_GET => VdpaCmd::DevConfigGet,
            other => VdpaCmd::Other(other),
        }
    }
}

/// A `vdpa` family attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VdpaAttr {
    /// The management device's bus (`pci`); absent for a simulator.
    MgmtdevBusName(String),
    /// The management device (`0000:03:00.2`, `vdpasim_net`).
    MgmtdevDevName(String),
    DevName(String),
    /// The virtio device ID (1: net).
    DevId(u32),
    DevVendorId(u32),
    DevMaxVqs(u32),
    NetMac(MacAddr),
    NetMtu(u16),
    Other(DefaultNla),
}

impl Nla for VdpaAttr {
    fn value_len(&self) -> usize {
        match self {
            VdpaAttr::MgmtdevBusName(s) | VdpaAttr::MgmtdevDevName(s) | VdpaAttr::DevName(s) => {
                s.len() + 1
            }
            VdpaAttr::DevId(_) | VdpaAttr::DevVendorId(_) | VdpaAttr::DevMaxVqs(_) => 4,
            VdpaAttr::NetMac(_) => 6,
            VdpaAttr::NetMtu(_) => 2,
            VdpaAttr::Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            VdpaAttr::MgmtdevBusName(_) => VDPA_ATTR_MGMTDEV_BUS_NAME,
            VdpaAttr::MgmtdevDevName(_) => VDPA_ATTR_MGMTDEV_DEV_NAME,
            VdpaAttr::DevName(_) => VDPA_ATTR_DEV_NAME,
            VdpaAttr::DevId(_) => VDPA_ATTR_DEV_ID,
            VdpaAttr::DevVendorId(_) => VDPA_ATTR_DEV_VENDOR_ID,
            VdpaAttr::DevMaxVqs(_) => VDPA_ATTR_DEV_MAX_VQS,
            VdpaAttr::NetMac(_) => VDPA_ATTR_DEV_NET_CFG_MACADDR,
            VdpaAttr::NetMtu(_) => VDPA_ATTR_DEV_NET_CFG_MTU,
            VdpaAttr::Other(nla) => nla.kind(),
        }
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            VdpaAttr::MgmtdevBusName(s) | VdpaAttr::MgmtdevDevName(s) | VdpaAttr::DevName(s) => {
                buffer[..s.len()].copy_from_slice(s.as_bytes());
                buffer[s.len()] = 0;
            }
            VdpaAttr::DevId(v) | VdpaAttr::DevVendorId(v) | VdpaAttr::DevMaxVqs(v) => {
                buffer[..4].copy_from_slice(&v.to_ne_bytes())
            }
            VdpaAttr::NetMac(mac) => buffer[..6].copy_from_slice(&mac.0),
            VdpaAttr::NetMtu(v) => buffer[..2].copy_from_slice(&v.to_ne_bytes()),
            VdpaAttr::Other(nla) => nla.emit_value(buffer),
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>> for VdpaAttr {
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        let v = buf.value();
        Ok(match buf.kind() {
            VDPA_ATTR_MGMTDEV_BUS_NAME => VdpaAttr::MgmtdevBusName(parse_string(v)?),
            VDPA_ATTR_MGMTDEV_DEV_NAME => VdpaAttr::MgmtdevDevName(parse_string(v)?),
            VDPA_ATTR_DEV_NAME => VdpaAttr::DevName(parse_string(v)?),
            VDPA_ATTR_DEV_ID => VdpaAttr::DevId(parse_u32(v)?),
            VDPA_ATTR_DEV_VENDOR_ID => VdpaAttr::DevVendorId(parse_u32(v)?),
            VDPA_ATTR_DEV_MAX_VQS => VdpaAttr::DevMaxVqs(parse_u32(v)?),
            VDPA_ATTR_DEV_NET_CFG_MACADDR => {
                let mac: [u8; 6] = v
                    .try_into()
                    .map_err(|_| DecodeError::from("VDPA_ATTR_DEV_NET_CFG_MACADDR: not 6 bytes"))?;
                VdpaAttr::NetMac(MacAddr(mac))
            }
            VDPA_ATTR_DEV_NET_CFG_MTU => VdpaAttr::NetMtu(parse_u16(v)?),
            _ => VdpaAttr::Other(DefaultNla::parse(buf)?),
        })
    }
}

/// One `vdpa` family message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VdpaMessage {
    pub cmd: VdpaCmd,
    pub attrs: Vec<VdpaAttr>,
}

impl GenlFamily for VdpaMessage {
    fn family_name() -> &'static str {
        FAMILY
    }
    fn command(&self) -> u8 {
        self.cmd.into()
    }
    fn version(&self) -> u8 {
        VERSION
    }
}

impl Emitable for VdpaMessage {
    fn buffer_len(&self) -> usize {
        self.attrs.as_slice().buffer_len()
    }
    fn emit(&self, buffer: &mut [u8]) {
        self.attrs.as_slice().emit(buffer)
    }
}

impl ParseableParametrized<[u8], GenlHeader> for VdpaMessage {
    fn parse_with_param(buf: &[u8], header: GenlHeader) -> Result<Self, DecodeError> {
        let attrs = NlasIterator::new(buf)
            .map(|nla| nla.and_then(|nla| VdpaAttr::parse(&nla)))
            .collect::<Result<Vec<_>, _>>()
            .context("failed to parse vdpa message attributes")?;
        Ok(VdpaMessage {
            cmd: header.cmd.into(),
            attrs,
        })
    }
}

/// A vDPA device as `VDPA_CMD_DEV_GET` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VdpaDev {
    pub name: String,
    /// The management device's bus (`pci`), `None` for a simulator.
    pub mgmt_bus: Option<String>,
    /// The management device: a PCI address on the `pci` bus, `vdpasim_net`.
    pub mgmt_dev: String,
    /// The virtio device ID ([`VIRTIO_ID_NET`] for a network device).
    pub device_id: u32,
    pub vendor_id: u32,
    pub max_vqs: u32,
}

impl VdpaDev {
    fn from_attrs(attrs: Vec<VdpaAttr>) -> VdpaDev {
        let mut d = VdpaDev::default();
        for a in attrs {
            match a {
                VdpaAttr::DevName(n) => d.name = n,
                VdpaAttr::MgmtdevBusName(b) => d.mgmt_bus = Some(b),
                VdpaAttr::MgmtdevDevName(m) => d.mgmt_dev = m,
                VdpaAttr::DevId(v) => d.device_id = v,
                VdpaAttr::DevVendorId(v) => d.vendor_id = v,
                VdpaAttr::DevMaxVqs(v) => d.max_vqs = v,
                _ => {}
            }
        }
        d
    }
}

/// A network vDPA device's configuration (`VDPA_CMD_DEV_CONFIG_GET`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VdpaNetConfig {
    pub mac: Option<MacAddr>,
    pub mtu: Option<u16>,
}

/// A vDPA device to create (`VDPA_CMD_DEV_NEW`, as `vdpa dev add`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VdpaDevSpec {
    pub name: String,
    pub mgmt_bus: Option<String>,
    pub mgmt_dev: String,
    pub mac: Option<MacAddr>,
    pub mtu: Option<u16>,
}

/// A generic-netlink socket speaking the `vdpa` family.
pub struct VdpaNetlink {
    socket: NetlinkSocket,
    family: u16,
}

impl std::fmt::Debug for VdpaNetlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VdpaNetlink")
            .field("family", &self.family)
            .finish_non_exhaustive()
    }
}

fn decode(op: &'static str, object: &str, e: impl std::fmt::Display) -> Error {
    Error::Netlink {
        op,
        object: object.to_string(),
        reason: e.to_string(),
    }
}

impl VdpaNetlink {
    /// Opens a socket in the calling thread's namespace and resolves the
    /// family; `Ok(None)` when the kernel has no `vdpa` family here (no
    /// vDPA support, or not the initial network namespace).
    pub fn open() -> Result<Option<VdpaNetlink>> {
        let socket = NetlinkSocket::open(NETLINK_GENERIC, "the node's namespace")?;
        let mut nl = VdpaNetlink { socket, family: 0 };
        let get = GenlMessage::from_payload(GenlCtrl {
            cmd: GenlCtrlCmd::GetFamily,
            nlas: vec![GenlCtrlAttrs::FamilyName(FAMILY.into())],
        });
        let replies =
            match nl.exchange(get, NLM_F_REQUEST, "resolve", "generic netlink family vdpa") {
                Ok(r) => r,
                Err(e) if e.errno() == Some(Errno::ENOENT) => return Ok(None),
                Err(e) => return Err(e),
            };
        nl.family = replies
            .into_iter()
            .flat_map(|m| m.payload.nlas)
            .find_map(|a| match a {
                GenlCtrlAttrs::FamilyId(id) => Some(id),
                _ => None,
            })
            .ok_or_else(|| decode("resolve", "generic netlink family vdpa", "no family ID"))?;
        Ok(Some(nl))
    }

    /// Send `msg` and collect the replies up to the ACK (or, for a dump,
    /// DONE); a kernel error is [`Error::Kernel`] with its errno.
    fn exchange<F>(
        &self,
        mut msg: GenlMessage<F>,
        flags: u16,
        op: &'static str,
        object: &str,
    ) -> Result<Vec<GenlMessage<F>>>
    where
        F: GenlFamily + Emitable + ParseableParametrized<[u8], GenlHeader> + std::fmt::Debug,
        GenlMessage<F>: NetlinkSerializable + NetlinkDeserializable,
    {
        msg.finalize();
        let mut nlmsg = NetlinkMessage::from(msg);
        nlmsg.header.flags = flags | NLM_F_ACK;
        self.socket.exchange(nlmsg, op, &object)
    }

    fn vdpa(
        &self,
        cmd: VdpaCmd,
        attrs: Vec<VdpaAttr>,
        flags: u16,
        op: &'static str,
        object: &str,
    ) -> Result<Vec<VdpaMessage>> {
        let mut msg = GenlMessage::from_payload(VdpaMessage { cmd, attrs });
        msg.set_resolved_family_id(self.family);
        Ok(self
            .exchange(msg, flags, op, object)?
            .into_iter()
            .map(|m| m.payload)
            .collect())
    }

    /// `cmd` for the one device `name`: the replies, or `None` when there
    /// is no such device (ENODEV).
    fn on_device(
        &self,
        cmd: VdpaCmd,
        op: &'static str,
        name: &str,
    ) -> Result<Option<Vec<VdpaMessage>>> {
        let object = format!("vDPA device {name}");
        let attrs = vec![VdpaAttr::DevName(name.into())];
        match self.vdpa(cmd, attrs, NLM_F_REQUEST, op, &object) {
            Ok(replies) => Ok(Some(replies)),
            Err(e) if e.errno() == Some(Errno::ENODEV) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `VDPA_CMD_DEV_GET` of one device; `None` when there is none.
    pub fn device(&self, name: &str) -> Result<Option<VdpaDev>> {
        Ok(self
            .on_device(VdpaCmd::DevGet, "get", name)?
            .and_then(|replies| {
                replies
                    .into_iter()
                    .map(|m| VdpaDev::from_attrs(m.attrs))
                    .find(|d| d.name == name)
            }))
    }

    /// Every vDPA device (`VDPA_CMD_DEV_GET` dump).
    pub fn devices(&self) -> Result<Vec<VdpaDev>> {
        Ok(self
            .vdpa(
                VdpaCmd::DevGet,
                vec![],
                NLM_F_REQUEST | NLM_F_DUMP,
                "list",
                "vDPA devices",
            )?
            .into_iter()
            .map(|m| VdpaDev::from_attrs(m.attrs))
            .collect())
    }

    /// `VDPA_CMD_DEV_CONFIG_GET` of a network device: its MAC and MTU as
    /// its virtio config space has them; `None` when there is no device.
    pub fn net_config(&self, name: &str) -> Result<Option<VdpaNetConfig>> {
        let op = "read the configuration of";
        let Some(replies) = self.on_device(VdpaCmd::DevConfigGet, op, name)? else {
            return Ok(None);
        };
        let mut config = VdpaNetConfig::default();
        for a in replies.into_iter().flat_map(|m| m.attrs) {
            match a {
                VdpaAttr::NetMac(m) => config.mac = Some(m),
                VdpaAttr::NetMtu(m) => config.mtu = Some(m),
                _ => {}
            }
        }
        Ok(Some(config))
    }

    /// `VDPA_CMD_DEV_NEW` (`vdpa dev add`): EEXIST when the name is taken.
    pub fn add_device(&self, spec: &VdpaDevSpec) -> Result<()> {
        let mut attrs = Vec::new();
        if let Some(bus) = &spec.mgmt_bus {
            attrs.push(VdpaAttr::MgmtdevBusName(bus.clone()));
        }
        attrs.push(VdpaAttr::MgmtdevDevName(spec.mgmt_dev.clone()));
        attrs.push(VdpaAttr::DevName(spec.name.clone()));
        if let Some(mac) = spec.mac {
            attrs.push(VdpaAttr::NetMac(mac));
        }
        if let Some(mtu) = spec.mtu {
            attrs.push(VdpaAttr::NetMtu(mtu));
        }
        let object = format!("vDPA device {} on {}", spec.name, spec.mgmt_dev);
        self.vdpa(
            VdpaCmd::DevNew,
            attrs,
            NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL,
            "create",
            &object,
        )
        .map(drop)
    }

    /// `VDPA_CMD_DEV_DEL`; `Ok(false)` when there was no such device.
    pub fn del_device(&self, name: &str) -> Result<bool> {
        Ok(self.on_device(VdpaCmd::DevDel, "delete", name)?.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_with_their_uapi_numbers() {
        let msg = VdpaMessage {
            cmd: VdpaCmd::DevNew,
            attrs: vec![
                VdpaAttr::MgmtdevBusName("pci".into()),
                VdpaAttr::MgmtdevDevName("0000:03:00.2".into()),
                VdpaAttr::DevName("vdpa0".into()),
                VdpaAttr::DevId(1),
                VdpaAttr::NetMac("02:00:00:00:00:01".parse().unwrap()),
                VdpaAttr::NetMtu(1500),
            ],
        };
        let mut buf = vec![0; msg.buffer_len()];
        msg.emit(&mut buf);
        // The first attribute: length 8 (4 + "pci\0"), type 1.
        assert_eq!(&buf[..8], &[8, 0, 1, 0, b'p', b'c', b'i', 0]);
        let header = GenlHeader {
            cmd: VDPA_CMD_DEV_NEW,
            version: VERSION,
        };
        let back = VdpaMessage::parse_with_param(&buf, header).unwrap();
        assert_eq!(back, msg);
        assert_eq!(msg.command(), 3);
        assert_eq!(u8::from(VdpaCmd::DevGet), 5);
        assert_eq!(VdpaCmd::from(6), VdpaCmd::DevConfigGet);
        let dev = VdpaDev::from_attrs(back.attrs);
        assert_eq!(dev.name, "vdpa0");
        assert_eq!(dev.mgmt_bus.as_deref(), Some("pci"));
        assert_eq!((dev.mgmt_dev.as_str(), dev.device_id), ("0000:03:00.2", 1));
    }

    #[test]
    fn a_short_mac_is_a_decode_error() {
        let mut buf = vec![0u8; 8];
        buf[..2].copy_from_slice(&8u16.to_ne_bytes());
        buf[2..4].copy_from_slice(&VDPA_ATTR_DEV_NET_CFG_MACADDR.to_ne_bytes());
        let header = GenlHeader {
            cmd: VDPA_CMD_DEV_GET,
            version: VERSION,
        };
        assert!(VdpaMessage::parse_with_param(&buf, header).is_err());
    }
}
