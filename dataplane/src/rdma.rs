//! RDMA devices: which one belongs to a netdev or a bus device, the RDMA
//! subsystem's namespace mode, and moving a device between namespaces,
//! through the RDMA netlink interface ([`nldev`]) and sysfs.
//!
//! The kernel keeps RDMA devices in one of two modes (`rdma system set
//! netns shared|exclusive`, or the boot parameter `ib_core.netns_mode`):
//! - **shared** (the default): every device is visible in every namespace,
//!   and none can be moved;
//! - **exclusive**: a device is visible only in its own namespace, and moves
//!   with `RDMA_NLDEV_CMD_SET` and a namespace file descriptor, if its driver
//!   can disassociate its user contexts (`ib_device_set_netns_put` refuses
//!   EOPNOTSUPP otherwise: the software devices rdma_rxe and siw cannot). A
//!   namespace that dies gives its devices back to the initial namespace.

pub mod nldev;

use std::fmt;
use std::fs;
use std::io;
use std::path::Path;

use rtnetlink::packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};

use self::nldev::{NldevAttr, NldevCmd, NldevMessage, NETLINK_RDMA};
use crate::error::{Errno, Result};
use crate::netlink::socket::NetlinkSocket;
use crate::netns::NetNs;

/// The RDMA subsystem's namespace mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetnsMode {
    Shared,
    Exclusive,
}

impl NetnsMode {
    fn of(raw: u8) -> NetnsMode {
        if raw == 0 {
            NetnsMode::Exclusive
        } else {
            NetnsMode::Shared
        }
    }
}

impl fmt::Display for NetnsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NetnsMode::Shared => "shared",
            NetnsMode::Exclusive => "exclusive",
        })
    }
}

/// An RDMA device: its index is global and kept across namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaDevice {
    pub index: u32,
    pub name: String,
}

impl fmt::Display for RdmaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RDMA device {}", self.name)
    }
}

/// An RDMA netlink socket in the namespace of the thread that opened it,
/// which sees (in exclusive mode) only that namespace's devices.
pub struct RdmaNetlink {
    socket: NetlinkSocket,
}

impl fmt::Debug for RdmaNetlink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RdmaNetlink").finish_non_exhaustive()
    }
}

impl RdmaNetlink {
    /// A socket in the calling thread's namespace; `Ok(None)` when the
    /// kernel has no RDMA subsystem (EPROTONOSUPPORT: no ib_core).
    pub fn open() -> Result<Option<RdmaNetlink>> {
        match NetlinkSocket::open(NETLINK_RDMA, "the RDMA subsystem") {
            Ok(socket) => Ok(Some(RdmaNetlink { socket })),
            Err(e) if e.errno() == Some(Errno::EPROTONOSUPPORT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn request(
        &self,
        cmd: NldevCmd,
        attrs: Vec<NldevAttr>,
        flags: u16,
        op: &'static str,
        object: &dyn fmt::Display,
    ) -> Result<Vec<NldevMessage>> {
        let mut msg = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::InnerMessage(NldevMessage { cmd, attrs }),
        );
        msg.header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        self.socket.exchange(msg, op, object)
    }

    /// `rdma system show`: the namespace mode.
    pub fn netns_mode(&self) -> Result<NetnsMode> {
        let replies = self.request(
            NldevCmd::SysGet,
            vec![],
            0,
            "read",
            &"the RDMA subsystem's namespace mode",
        )?;
        Ok(replies
            .iter()
            .flat_map(|m| &m.attrs)
            .find_map(|a| match a {
                NldevAttr::NetnsMode(m) => Some(NetnsMode::of(*m)),
                _ => None,
            })
            // Kernels before namespace awareness (5.2) share every device.
            .unwrap_or(NetnsMode::Shared))
    }

    /// `rdma system set netns MODE`: EBUSY while any namespace but the
    /// initial one exists.
    pub fn set_netns_mode(&self, mode: NetnsMode) -> Result<()> {
        let raw = u8::from(mode == NetnsMode::Shared);
        let object = format!("the RDMA subsystem's namespace mode to {mode}");
        self.request(
            NldevCmd::SysSet,
            vec![NldevAttr::NetnsMode(raw)],
            0,
            "set",
            &object,
        )
        .map(drop)
    }

    /// Every device this namespace sees.
    pub fn devices(&self) -> Result<Vec<RdmaDevice>> {
        let replies = self.request(
            NldevCmd::Get,
            vec![],
            NLM_F_DUMP,
            "list",
            &"the RDMA devices",
        )?;
        Ok(replies.into_iter().filter_map(device_of).collect())
    }

    /// The device `name`, if this namespace sees it.
    pub fn device(&self, name: &str) -> Result<Option<RdmaDevice>> {
        Ok(self.devices()?.into_iter().find(|d| d.name == name))
    }

    /// The device whose port's netdev is `ifindex` of this namespace (a
    /// RoCE or iWARP device: rdma_rxe and siw over any netdev, a RoCE VF).
    pub fn device_of_netdev(&self, ifindex: u32) -> Result<Option<RdmaDevice>> {
        self.device_among(self.devices()?, ifindex)
    }

    /// [`Self::device_of_netdev`] among `devices`, listed already.
    pub fn device_among(
        &self,
        devices: Vec<RdmaDevice>,
        ifindex: u32,
    ) -> Result<Option<RdmaDevice>> {
        for device in devices {
            let replies = match self.request(
                NldevCmd::PortGet,
                vec![NldevAttr::DevIndex(device.index)],
                NLM_F_DUMP,
                "list the ports of",
                &device,
            ) {
                Ok(r) => r,
                // Gone or moved away since the list.
                Err(e) if e.errno() == Some(Errno::EINVAL) => continue,
                Err(e) => return Err(e),
            };
            let on_netdev = replies
                .iter()
                .flat_map(|m| &m.attrs)
                .any(|a| *a == NldevAttr::NdevIndex(ifindex));
            if on_netdev {
                return Ok(Some(device));
            }
        }
        Ok(None)
    }

    /// Move `device`, which this namespace sees, into `to`.
    pub fn move_to(&self, device: &RdmaDevice, to: &NetNs) -> Result<()> {
        let fd = u32::try_from(to.raw_fd()).expect("a file descriptor is not negative");
        let object = format!("{device} into {}", to.path().display());
        self.request(
            NldevCmd::Set,
            vec![NldevAttr::DevIndex(device.index), NldevAttr::NetNsFd(fd)],
            0,
            "move",
            &object,
        )
        .map(drop)
    }
}

fn device_of(message: NldevMessage) -> Option<RdmaDevice> {
    let (mut index, mut name) = (None, None);
    for a in message.attrs {
        match a {
            NldevAttr::DevIndex(i) => index = Some(i),
            NldevAttr::DevName(n) => name = Some(n),
            _ => {}
        }
    }
    Some(RdmaDevice {
        index: index?,
        name: name?,
    })
}

/// The names of the RDMA devices of the bus device at `device_dir` (a PCI
/// or auxiliary device's sysfs directory): the entries of its
/// `infiniband/`, as rdma-cni finds a VF's (rdmamap
/// `GetRdmaDevicesForPcidev`, `GetRdmaDevicesForAuxdev`). None when it has
/// no such directory.
pub fn bus_device_rdma_names(device_dir: &Path) -> io::Result<Vec<String>> {
    let entries = match fs::read_dir(device_dir.join("infiniband")) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut names = entries
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<io::Result<Vec<_>>>()?;
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_byte_is_one_for_shared() {
        assert_eq!(NetnsMode::of(1), NetnsMode::Shared);
        assert_eq!(NetnsMode::of(0), NetnsMode::Exclusive);
        assert_eq!(NetnsMode::Exclusive.to_string(), "exclusive");
    }

    #[test]
    fn a_device_reply_needs_its_index_and_name() {
        let reply = |attrs| NldevMessage {
            cmd: NldevCmd::Get,
            attrs,
        };
        let full = reply(vec![
            NldevAttr::DevIndex(2),
            NldevAttr::DevName("mlx5_3".into()),
            NldevAttr::PortIndex(1),
        ]);
        assert_eq!(
            device_of(full),
            Some(RdmaDevice {
                index: 2,
                name: "mlx5_3".into()
            })
        );
        assert_eq!(device_of(reply(vec![NldevAttr::DevIndex(2)])), None);
    }

    #[test]
    fn a_bus_device_lists_its_infiniband_entries() {
        let dir = tempfile::tempdir().unwrap();
        assert!(bus_device_rdma_names(dir.path()).unwrap().is_empty());
        for name in ["mlx5_4", "mlx5_2"] {
            fs::create_dir_all(dir.path().join("infiniband").join(name)).unwrap();
        }
        assert_eq!(
            bus_device_rdma_names(dir.path()).unwrap(),
            ["mlx5_2", "mlx5_4"]
        );
    }
}
