//! vDPA devices: found through the `vdpa` generic-netlink family
//! ([`genl`]) and sysfs (`/sys/bus/vdpa`, below a movable [`SysfsRoot`]):
//! which bus driver a device is bound to, its virtio-net netdev
//! (`virtio_vdpa`) or its `/dev/vhost-vdpa-N` (`vhost_vdpa`), and the PCI
//! device (VF or PF) it sits on.

pub mod genl;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::pci::{PciAddress, SysfsRoot};

use plexus_cni::names::IfName;

pub use genl::{VdpaDev, VdpaDevSpec, VdpaNetConfig, VdpaNetlink, VIRTIO_ID_NET};

/// The bus driver `virtio_vdpa`: the device is a virtio device of the
/// kernel's, with a netdev.
pub const VIRTIO_VDPA: &str = "virtio_vdpa";
/// The bus driver `vhost_vdpa`: the device is `/dev/vhost-vdpa-N`, for a
/// userspace (VM, DPDK) driver.
pub const VHOST_VDPA: &str = "vhost_vdpa";

/// What sysfs says of one vDPA device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VdpaSysfsDevice {
    pub name: String,
    /// The bound bus driver (`virtio_vdpa`, `vhost_vdpa`), if any.
    pub driver: Option<String>,
    /// The PCI device it sits on (its parent), if any (a simulator has none).
    pub pci: Option<PciAddress>,
    /// Bound to `virtio_vdpa`: the virtio device (`virtio3`).
    pub virtio: Option<String>,
    /// The virtio device's netdevs, as this namespace's sysfs shows them.
    pub netdevs: Vec<IfName>,
    /// Bound to `vhost_vdpa`: `vhost-vdpa-N`.
    pub vhost: Option<String>,
}

impl VdpaSysfsDevice {
    /// `/dev/vhost-vdpa-N`, when bound to `vhost_vdpa`.
    pub fn vhost_path(&self) -> Option<PathBuf> {
        self.vhost.as_ref().map(|v| Path::new("/dev").join(v))
    }
}

fn entries(dir: &Path) -> io::Result<Vec<String>> {
    let mut names = match fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect::<Vec<_>>(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    names.sort();
    Ok(names)
}

/// `virtio<digits>`, `vhost-vdpa-<digits>`.
fn numbered<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    name.strip_prefix(prefix)
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .map(|_| name)
}

impl SysfsRoot {
    fn vdpa_devices_dir(&self) -> PathBuf {
        self.path().join("bus/vdpa/devices")
    }

    /// The vDPA device `name` as sysfs has it; `None` when there is none.
    pub fn vdpa_device(&self, name: &str) -> io::Result<Option<VdpaSysfsDevice>> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Ok(None);
        }
        let dir = self.vdpa_devices_dir().join(name);
        let real = match fs::canonicalize(&dir) {
            Ok(p) => p,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let driver = match fs::read_link(real.join("driver")) {
            Ok(target) => target
                .file_name()
                .and_then(|n| n.to_str())
                .map(String::from),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let pci = real
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .and_then(|n| PciAddress::parse(n).ok());
        let children = entries(&real)?;
        let virtio = children
            .iter()
            .find_map(|c| numbered(c, "virtio"))
            .map(String::from);
        let netdevs = match &virtio {
            Some(v) => entries(&real.join(v).join("net"))?
                .into_iter()
                .map(|netdev| {
                    IfName::new(netdev.as_str()).map_err(|reason| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("vDPA device {name}: netdev name {netdev:?}: {reason}"),
                        )
                    })
                })
                .collect::<io::Result<_>>()?,
            None => Vec::new(),
        };
        let vhost = children
            .iter()
            .find_map(|c| numbered(c, "vhost-vdpa-"))
            .map(String::from);
        Ok(Some(VdpaSysfsDevice {
            name: name.to_string(),
            driver,
            pci,
            virtio,
            netdevs,
            vhost,
        }))
    }

    /// The names of every vDPA device (sorted).
    pub fn vdpa_devices(&self) -> io::Result<Vec<String>> {
        entries(&self.vdpa_devices_dir())
    }

    /// The vDPA devices on the PCI device at `address` (sorted by name).
    pub fn vdpa_devices_on(&self, address: PciAddress) -> io::Result<Vec<String>> {
        let dir = self.vdpa_devices_dir();
        let mut found = Vec::new();
        for name in entries(&dir)? {
            let Ok(real) = fs::canonicalize(dir.join(&name)) else {
                continue;
            };
            let parent = real.parent().and_then(|p| p.file_name());
            if parent.and_then(|p| p.to_str()) == Some(address.to_string().as_str()) {
                found.push(name);
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    use crate::pci::fake::vdpa_devices as fake;

    #[test]
    fn devices_are_read_from_sysfs() {
        let d = fake();
        let root = SysfsRoot::new(d.path());
        let v0 = root.vdpa_device("vdpa0").unwrap().unwrap();
        assert_eq!(v0.driver.as_deref(), Some(VHOST_VDPA));
        assert_eq!(v0.pci, Some("0000:03:00.2".parse().unwrap()));
        assert_eq!(v0.vhost.as_deref(), Some("vhost-vdpa-7"));
        assert_eq!(v0.vhost_path(), Some(PathBuf::from("/dev/vhost-vdpa-7")));
        assert_eq!((v0.virtio, v0.netdevs.len()), (None, 0));
        let v1 = root.vdpa_device("vdpa1").unwrap().unwrap();
        assert_eq!(v1.driver.as_deref(), Some(VIRTIO_VDPA));
        assert_eq!((v1.pci, v1.vhost), (None, None));
        assert_eq!(v1.virtio.as_deref(), Some("virtio4"));
        assert_eq!(v1.netdevs, ["eth5"]);
        let v2 = root.vdpa_device("vdpa2").unwrap().unwrap();
        assert_eq!((v2.driver, v2.virtio), (None, None));
        for missing in ["vdpa9", "", "..", ".", "../vdpa0", "vdpa0/driver"] {
            assert_eq!(root.vdpa_device(missing).unwrap(), None, "{missing:?}");
        }
    }

    #[test]
    fn a_pci_address_finds_the_devices_on_it() {
        let d = fake();
        let root = SysfsRoot::new(d.path());
        let on = |a: &str| root.vdpa_devices_on(a.parse().unwrap()).unwrap();
        assert_eq!(on("0000:03:00.2"), ["vdpa0"]);
        assert!(on("0000:03:00.3").is_empty());
        assert!(
            on("0000:00:02.0").is_empty(),
            "a grandparent is not the parent"
        );
        // No vDPA bus at all: nothing, not an error.
        let empty = tempfile::tempdir().unwrap();
        let none = SysfsRoot::new(empty.path());
        assert!(none
            .vdpa_devices_on("0000:03:00.2".parse().unwrap())
            .unwrap()
            .is_empty());
    }
}
