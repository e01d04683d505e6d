//! The RDMA device interface's netlink messages (`NETLINK_RDMA`, client
//! `RDMA_NL_NLDEV`: linux `include/uapi/rdma/rdma_netlink.h`), as typed
//! commands and attributes. Unlike generic netlink there is no family
//! header: the command is in the message type, `RDMA_NL_GET_TYPE(client,
//! op) = client << 10 | op`, and the attributes follow the netlink header.

use rtnetlink::packet_core::{
    parse_string, parse_u32, parse_u8, DecodeError, DefaultNla, Emitable, ErrorContext,
    NetlinkDeserializable, NetlinkHeader, NetlinkSerializable, Nla, NlaBuffer, NlasIterator,
    Parseable,
};

/// `NETLINK_RDMA` (linux/netlink.h).
pub const NETLINK_RDMA: isize = 20;

/// `RDMA_NL_NLDEV`: the client of the message type's upper six bits.
const RDMA_NL_NLDEV: u16 = 5;
const OP_BITS: u16 = 10;

// enum rdma_nldev_command
const CMD_GET: u16 = 1;
const CMD_SET: u16 = 2;
const CMD_PORT_GET: u16 = 5;
const CMD_SYS_GET: u16 = 6;
const CMD_SYS_SET: u16 = 7;

// enum rdma_nldev_attr
const ATTR_DEV_INDEX: u16 = 1;
const ATTR_DEV_NAME: u16 = 2;
const ATTR_PORT_INDEX: u16 = 3;
const ATTR_NDEV_INDEX: u16 = 50;
const ATTR_NDEV_NAME: u16 = 51;
const SYS_ATTR_NETNS_MODE: u16 = 66;
const NET_NS_FD: u16 = 68;

/// An `RDMA_NL_NLDEV` command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NldevCmd {
    /// A device (doit by `DevIndex`) or every device (dump).
    Get,
    /// Rename a device, or move it to the namespace of `NetNsFd`.
    Set,
    /// The ports of the device `DevIndex` (dump).
    PortGet,
    /// The subsystem's settings: its namespace mode.
    SysGet,
    SysSet,
    Other(u16),
}

impl NldevCmd {
    fn op(self) -> u16 {
        match self {
            NldevCmd::Get => CMD_GET,
            NldevCmd::Set => CMD_SET,
            NldevCmd::PortGet => CMD_PORT_GET,
            NldevCmd::SysGet => CMD_SYS_GET,
            NldevCmd::SysSet => CMD_SYS_SET,
            NldevCmd::Other(op) => op,
        }
    }

    fn of_op(op: u16) -> NldevCmd {
        match op {
            CMD_GET => NldevCmd::Get,
            CMD_SET => NldevCmd::Set,
            CMD_PORT_GET => NldevCmd::PortGet,
            CMD_SYS_GET => NldevCmd::SysGet,
            CMD_SYS_SET => NldevCmd::SysSet,
            other => NldevCmd::Other(other),
        }
    }
}

/// An `RDMA_NL_NLDEV` attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NldevAttr {
    /// The device's index: global, kept across namespaces.
    DevIndex(u32),
    DevName(String),
    /// A port (in a port reply); in a device reply, the number of ports.
    PortIndex(u32),
    /// The port's netdev, reported only to a socket of the netdev's own
    /// namespace.
    NdevIndex(u32),
    NdevName(String),
    /// `RDMA_NLDEV_SYS_ATTR_NETNS_MODE`: 1 shared, 0 exclusive.
    NetnsMode(u8),
    /// A namespace file descriptor of the sender's, the target of a move.
    NetNsFd(u32),
    Other(DefaultNla),
}

impl Nla for NldevAttr {
    fn value_len(&self) -> usize {
        match self {
            NldevAttr::DevName(s) | NldevAttr::NdevName(s) => s.len() + 1,
            NldevAttr::DevIndex(_)
            | NldevAttr::PortIndex(_)
            | NldevAttr::NdevIndex(_)
            | NldevAttr::NetNsFd(_) => 4,
            NldevAttr::NetnsMode(_) => 1,
            NldevAttr::Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            NldevAttr::DevIndex(_) => ATTR_DEV_INDEX,
            NldevAttr::DevName(_) => ATTR_DEV_NAME,
            NldevAttr::PortIndex(_) => ATTR_PORT_INDEX,
            NldevAttr::NdevIndex(_) => ATTR_NDEV_INDEX,
            NldevAttr::NdevName(_) => ATTR_NDEV_NAME,
            NldevAttr::NetnsMode(_) => SYS_ATTR_NETNS_MODE,
            NldevAttr::NetNsFd(_) => NET_NS_FD,
            NldevAttr::Other(nla) => nla.kind(),
        }
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            NldevAttr::DevName(s) | NldevAttr::NdevName(s) => {
                buffer[..s.len()].copy_from_slice(s.as_bytes());
                buffer[s.len()] = 0;
            }
            NldevAttr::DevIndex(v)
            | NldevAttr::PortIndex(v)
            | NldevAttr::NdevIndex(v)
            | NldevAttr::NetNsFd(v) => buffer[..4].copy_from_slice(&v.to_ne_bytes()),
            NldevAttr::NetnsMode(v) => buffer[0] = *v,
            NldevAttr::Other(nla) => nla.emit_value(buffer),
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>> for NldevAttr {
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        let v = buf.value();
        Ok(match buf.kind() {
            ATTR_DEV_INDEX => NldevAttr::DevIndex(parse_u32(v)?),
            ATTR_DEV_NAME => NldevAttr::DevName(parse_string(v)?),
            ATTR_PORT_INDEX => NldevAttr::PortIndex(parse_u32(v)?),
            ATTR_NDEV_INDEX => NldevAttr::NdevIndex(parse_u32(v)?),
            ATTR_NDEV_NAME => NldevAttr::NdevName(parse_string(v)?),
            SYS_ATTR_NETNS_MODE => NldevAttr::NetnsMode(parse_u8(v)?),
            NET_NS_FD => NldevAttr::NetNsFd(parse_u32(v)?),
            _ => NldevAttr::Other(DefaultNla::parse(buf)?),
        })
    }
}

/// One `RDMA_NL_NLDEV` message: a command and its attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NldevMessage {
    pub cmd: NldevCmd,
    pub attrs: Vec<NldevAttr>,
}

impl NetlinkSerializable for NldevMessage {
    fn message_type(&self) -> u16 {
        (RDMA_NL_NLDEV << OP_BITS) | self.cmd.op()
    }
    fn buffer_len(&self) -> usize {
        self.attrs.as_slice().buffer_len()
    }
    fn serialize(&self, buffer: &mut [u8]) {
        self.attrs.as_slice().emit(buffer)
    }
}

impl NetlinkDeserializable for NldevMessage {
    type Error = DecodeError;

    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Self, DecodeError> {
        let client = header.message_type >> OP_BITS;
        if client != RDMA_NL_NLDEV {
            return Err(DecodeError::from(format!(
                "message type {:#x}: RDMA netlink client {client}, not RDMA_NL_NLDEV",
                header.message_type
            )));
        }
        let attrs = NlasIterator::new(payload)
            .map(|nla| nla.and_then(|nla| NldevAttr::parse(&nla)))
            .collect::<Result<Vec<_>, _>>()
            .context("failed to parse RDMA_NL_NLDEV attributes")?;
        Ok(NldevMessage {
            cmd: NldevCmd::of_op(header.message_type & ((1 << OP_BITS) - 1)),
            attrs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(message_type: u16) -> NetlinkHeader {
        let mut h = NetlinkHeader::default();
        h.message_type = message_type;
        h
    }

    #[test]
    fn messages_round_trip_with_their_uapi_numbers() {
        let msg = NldevMessage {
            cmd: NldevCmd::Set,
            attrs: vec![
                NldevAttr::DevIndex(3),
                NldevAttr::NetNsFd(7),
                NldevAttr::DevName("rxe0".into()),
                NldevAttr::NetnsMode(0),
            ],
        };
        // RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_SET) = 5 << 10 | 2.
        assert_eq!(msg.message_type(), 5122);
        let mut buf = vec![0; msg.buffer_len()];
        msg.serialize(&mut buf);
        // The first attribute: length 8, type 1 (RDMA_NLDEV_ATTR_DEV_INDEX), 3.
        assert_eq!(&buf[..8], &[8, 0, 1, 0, 3, 0, 0, 0]);
        // RDMA_NLDEV_NET_NS_FD is 68.
        assert_eq!(&buf[8..12], &[8, 0, 68, 0]);
        // The u8 mode is padded to four bytes: 4 + 1 + 3.
        assert_eq!(buf.len(), 8 + 8 + (4 + 8) + 8);
        let back = NldevMessage::deserialize(&header(5122), &buf).unwrap();
        assert_eq!(back, msg);
        assert_eq!(
            NldevMessage::deserialize(&header(5 << 10 | 5), &[])
                .unwrap()
                .cmd,
            NldevCmd::PortGet
        );
    }

    #[test]
    fn another_client_or_a_short_attribute_is_a_decode_error() {
        // RDMA_NL_LS (4) is not ours.
        assert!(NldevMessage::deserialize(&header(4 << 10 | 1), &[]).is_err());
        // RDMA_NLDEV_ATTR_DEV_INDEX of two bytes.
        let short = [6, 0, 1, 0, 1, 0, 0, 0];
        assert!(NldevMessage::deserialize(&header(5 << 10 | 1), &short).is_err());
    }
}
