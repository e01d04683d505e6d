//! PCI devices as sysfs shows them, for SR-IOV: which device is a physical
//! function (PF) or a virtual function (VF), a VF's PF and index, the
//! network interfaces (netdevs) and the driver of a device, and the
//! `/dev/vfio` node of a VF handed to userspace (sriov-cni's "DPDK mode").
//!
//! Everything is read below a [`SysfsRoot`] (normally `/sys`) so tests can
//! point it at a fake tree. The layout relied on, for a VF `0000:01:10.0`
//! of the PF `0000:01:00.0`:
//!
//! ```text
//! bus/pci/devices/0000:01:10.0 -> ../../../devices/pci0000:00/0000:00:01.0/0000:01:10.0
//! devices/pci0000:00/0000:00:01.0/0000:01:00.0/
//!     sriov_totalvfs, sriov_numvfs
//!     virtfn0 -> ../0000:01:10.0
//!     net/enp1s0/
//! devices/pci0000:00/0000:00:01.0/0000:01:10.0/
//!     physfn -> ../0000:01:00.0
//!     driver -> ../../../../bus/pci/drivers/igbvf
//!     iommu_group -> ../../../../kernel/iommu_groups/5
//!     net/enp1s0v0/           (absent while bound to vfio-pci, or while the
//!                              netdev is in another network namespace)
//! class/net/<netdev>/phys_switch_id, phys_port_name   (switchdev representors)
//! ```
//!
//! A [`PciAddress`] is parsed strictly before it becomes a path component,
//! so nothing outside `bus/pci/devices/` can be reached through one. Errors
//! are [`PciError`]s naming the device and what is wrong; the crate's error
//! type wraps them (`Error::Pci`), so this module depends on nothing above it.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use nix::errno::Errno;
use plexus_cni::names::IfName;

/// Drivers that hand a device to userspace instead of making a netdev of it
/// (sriov-cni's "DPDK mode").
pub const USERSPACE_DRIVERS: [&str; 3] = ["vfio-pci", "uio_pci_generic", "igb_uio"];

/// The name the vfio driver gives an IOMMU group it made up for a device
/// without an IOMMU (`enable_unsafe_noiommu_mode`); its device node is then
/// `/dev/vfio/noiommu-<group>` instead of `/dev/vfio/<group>`.
const VFIO_NOIOMMU_GROUP_NAME: &str = "vfio-noiommu";

/// Whether `driver` hands the device to userspace (see [`USERSPACE_DRIVERS`]).
pub fn is_userspace_driver(driver: &str) -> bool {
    USERSPACE_DRIVERS.contains(&driver)
}

/// A PCI device address, `domain:bus:device.function`, displayed as sysfs
/// names devices (`0000:01:10.0`, lowercase).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl PciAddress {
    /// Parses `DDDD:BB:DD.F`, or `BB:DD.F` meaning domain 0000 (as sriov-cni
    /// accepts a `deviceID`). Hex digits in either case; the domain may have
    /// up to 8 digits (some hosts number domains from 0x10000).
    pub fn parse(s: &str) -> Result<Self, PciError> {
        let bad = |reason: &'static str| PciError::InvalidAddress {
            value: s.to_string(),
            reason,
        };
        let hex = |digits: &str, min: usize, max: usize, what: &'static str| {
            if digits.len() < min
                || digits.len() > max
                || !digits.bytes().all(|b| b.is_ascii_hexdigit())
            {
                return Err(bad(what));
            }
            u32::from_str_radix(digits, 16).map_err(|_| bad(what))
        };
        let (rest, function) = s
            .rsplit_once('.')
            .ok_or_else(|| bad("expected DDDD:BB:DD.F or BB:DD.F"))?;
        let parts: Vec<&str> = rest.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [bus, device] => (0, *bus, *device),
            [domain, bus, device] => (
                hex(domain, 4, 8, "the domain must be 4 to 8 hex digits")?,
                *bus,
                *device,
            ),
            _ => return Err(bad("expected DDDD:BB:DD.F or BB:DD.F")),
        };
        let bus = hex(bus, 2, 2, "the bus must be 2 hex digits")?;
        let device = hex(device, 2, 2, "the device must be 2 hex digits")?;
        if device > 0x1f {
            return Err(bad("the device must be 00 to 1f"));
        }
        let function = hex(function, 1, 1, "the function must be one digit 0 to 7")?;
        if function > 7 {
            return Err(bad("the function must be one digit 0 to 7"));
        }
        Ok(PciAddress {
            domain,
            bus: bus as u8,
            device: device as u8,
            function: function as u8,
        })
    }
}

impl FromStr for PciAddress {
    type Err = PciError;

    fn from_str(s: &str) -> Result<Self, PciError> {
        PciAddress::parse(s)
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// What went wrong finding or reading a PCI device. Every variant names the
/// device's address; match on the variant, never on the text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PciError {
    /// The text is not a PCI address.
    #[error("invalid PCI address {value:?}: {reason}")]
    InvalidAddress { value: String, reason: &'static str },
    /// No such device in sysfs.
    #[error("PCI device {address} not found ({} does not exist)", path.display())]
    NotFound { address: PciAddress, path: PathBuf },
    /// The device exists but is not an SR-IOV VF (it has no `physfn`).
    #[error("PCI device {address} is not an SR-IOV virtual function")]
    NotVirtualFunction { address: PciAddress },
    /// The device exists but is not an SR-IOV PF (no `sriov_totalvfs`, or 0).
    #[error("PCI device {address} is not an SR-IOV physical function")]
    NotPhysicalFunction { address: PciAddress },
    /// The VF's PF has no `virtfnN` link back to it.
    #[error("PCI device {address}: its physical function {pf} has no virtfnN link to it")]
    VfIndexNotFound { address: PciAddress, pf: PciAddress },
    /// Reading sysfs failed (other than the file being absent where that
    /// has a meaning).
    #[error("PCI device {address}: {op} {}: {errno}", path.display())]
    Sysfs {
        address: PciAddress,
        op: &'static str,
        path: PathBuf,
        errno: Errno,
    },
    /// sysfs holds something this module does not expect (a link target
    /// that is not a PCI address, a count that is not a number...).
    #[error("PCI device {address}: {}: {reason}", path.display())]
    Unexpected {
        address: PciAddress,
        path: PathBuf,
        reason: String,
    },
}

impl PciError {
    /// The errno of a failed sysfs read.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            PciError::Sysfs { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

type Result<T, E = PciError> = std::result::Result<T, E>;

/// Where sysfs is mounted: `/sys` ([`SysfsRoot::default`]), or a fake tree in
/// tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysfsRoot(PathBuf);

impl Default for SysfsRoot {
    fn default() -> Self {
        SysfsRoot(PathBuf::from("/sys"))
    }
}

impl SysfsRoot {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SysfsRoot(path.into())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The addresses of every PCI device (`bus/pci/devices/`), sorted;
    /// entries that are no PCI address are left out.
    pub fn pci_addresses(&self) -> io::Result<Vec<PciAddress>> {
        let dir = self.0.join("bus/pci/devices");
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut addresses = Vec::new();
        for entry in entries {
            if let Ok(address) = PciAddress::parse(&entry?.file_name().to_string_lossy()) {
                addresses.push(address);
            }
        }
        addresses.sort();
        Ok(addresses)
    }

    /// The device at `address`; [`PciError::NotFound`] when there is none.
    pub fn pci_device(&self, address: PciAddress) -> Result<PciDevice> {
        let path = self.0.join("bus/pci/devices").join(address.to_string());
        match fs::metadata(&path) {
            Ok(_) => Ok(PciDevice {
                root: self.clone(),
                address,
                path,
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(PciError::NotFound { address, path })
            }
            Err(e) => Err(sysfs_error(address, "stat", &path, &e)),
        }
    }

    /// Everything a VF driver needs to know about the VF at `address`, read
    /// in one go: [`PciError::NotVirtualFunction`] when it is not a VF.
    pub fn virtual_function(&self, address: PciAddress) -> Result<VirtualFunction> {
        let vf = self.pci_device(address)?;
        let pf = vf
            .physical_function()?
            .ok_or(PciError::NotVirtualFunction { address })?;
        let index = pf
            .virtual_functions()?
            .into_iter()
            .find_map(|(index, a)| (a == address).then_some(index))
            .ok_or(PciError::VfIndexNotFound {
                address,
                pf: pf.address,
            })?;
        let driver = vf.driver()?;
        let vfio_device = match driver.as_deref() {
            Some("vfio-pci") => Some(vf.vfio_device_node()?),
            _ => None,
        };
        Ok(VirtualFunction {
            address,
            pf: pf.address,
            pf_netdevs: pf.netdevs()?,
            index,
            netdev: vf.netdevs()?.into_iter().next(),
            driver,
            vfio_device,
        })
    }
}

impl SysfsRoot {
    /// The VF's representor: in switchdev mode, the host-side netdev that
    /// stands for the VF on the PF's embedded switch (device-info-SPEC
    /// §3.1.3.5 "representor-device"). It shares the PF's `phys_switch_id`
    /// and names the VF in its `phys_port_name`: `pf<P>vf<V>` (with a
    /// `c<C>` controller prefix on multi-host NICs), or the bare `<V>` of
    /// older kernels. `None` when the PF has no switch (legacy mode, or a
    /// NIC without switchdev: reading `phys_switch_id` then fails with
    /// EOPNOTSUPP) or no netdev matches: the key is optional.
    pub fn vf_representor(&self, vf: &VirtualFunction) -> Option<String> {
        let net = self.0.join("class/net");
        let attribute = |netdev: &str, name: &str| {
            fs::read_to_string(net.join(netdev).join(name))
                .ok()
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let (pf, switch) = vf
            .pf_netdevs
            .iter()
            .find_map(|pf| Some((pf, attribute(pf, "phys_switch_id")?)))?;
        // A PF's own port is `p<P>`; a representor of one of its VFs then
        // says `pf<P>`.
        let pf_port =
            attribute(pf, "phys_port_name").and_then(|n| n.strip_prefix('p')?.parse::<u32>().ok());
        let mut candidates: Vec<String> = fs::read_dir(&net)
            .ok()?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| name != pf)
            .collect();
        candidates.sort();
        candidates.into_iter().find(|name| {
            attribute(name, "phys_switch_id").as_ref() == Some(&switch)
                && attribute(name, "phys_port_name")
                    .and_then(|port| representor_port(&port))
                    .is_some_and(|(pf_index, vf_index)| {
                        vf_index == vf.index
                            && match (pf_index, pf_port) {
                                (Some(theirs), Some(ours)) => theirs == ours,
                                _ => true,
                            }
                    })
        })
    }
}

/// The (PF, VF) numbers a representor's `phys_port_name` gives:
/// `[c<C>]pf<P>vf<V>`, or a bare `<V>`.
fn representor_port(port: &str) -> Option<(Option<u32>, u32)> {
    if let Ok(vf) = port.parse() {
        return Some((None, vf));
    }
    let port = match port.strip_prefix('c') {
        Some(rest) => rest.trim_start_matches(|c: char| c.is_ascii_digit()),
        None => port,
    };
    let (pf, vf) = port.strip_prefix("pf")?.split_once("vf")?;
    Some((Some(pf.parse().ok()?), vf.parse().ok()?))
}

/// A VF as a driver sees it ([`SysfsRoot::virtual_function`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualFunction {
    pub address: PciAddress,
    /// Its physical function.
    pub pf: PciAddress,
    /// The PF's netdevs (sorted; a multi-port PF may have several, a PF in
    /// another namespace none visible). VF settings go through one of them.
    pub pf_netdevs: Vec<IfName>,
    /// Its number on the PF (`virtfnN`), the `vf N` of `ip link set PF vf N`.
    pub index: u32,
    /// Its own netdev, if it has one in the namespace sysfs was mounted in:
    /// none while bound to a userspace driver, nor while the netdev sits in
    /// another namespace (a pod's): a driver must remember the name.
    pub netdev: Option<IfName>,
    /// The bound driver (`igbvf`, `vfio-pci`...), `None` when unbound.
    pub driver: Option<String>,
    /// For a VF bound to vfio-pci: its device node, `/dev/vfio/<group>`, or
    /// `/dev/vfio/noiommu-<group>` in no-IOMMU mode.
    pub vfio_device: Option<PathBuf>,
}

impl VirtualFunction {
    /// Bound to a userspace driver (sriov-cni's "DPDK mode").
    pub fn has_userspace_driver(&self) -> bool {
        self.driver.as_deref().is_some_and(is_userspace_driver)
    }
}

/// A device's part in SR-IOV ([`PciDevice::sriov_role`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SriovRole {
    /// It can have VFs: at most `total_vfs`, `num_vfs` now.
    PhysicalFunction { total_vfs: u32, num_vfs: u32 },
    /// A VF of `pf`.
    VirtualFunction { pf: PciAddress },
    /// Neither.
    None,
}

/// One PCI device in sysfs (it existed when looked up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciDevice {
    root: SysfsRoot,
    address: PciAddress,
    path: PathBuf,
}

impl PciDevice {
    pub fn address(&self) -> PciAddress {
        self.address
    }

    /// `<sysfs>/bus/pci/devices/<address>`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// PF, VF or neither.
    pub fn sriov_role(&self) -> Result<SriovRole> {
        if let Some(pf) = self.physical_function()? {
            return Ok(SriovRole::VirtualFunction { pf: pf.address });
        }
        match self.read_u32("sriov_totalvfs")? {
            Some(total_vfs) if total_vfs > 0 => Ok(SriovRole::PhysicalFunction {
                total_vfs,
                num_vfs: self.read_u32("sriov_numvfs")?.unwrap_or(0),
            }),
            _ => Ok(SriovRole::None),
        }
    }

    /// The PF of this device when it is a VF (its `physfn` link).
    pub fn physical_function(&self) -> Result<Option<PciDevice>> {
        let Some(name) = self.link_name("physfn")? else {
            return Ok(None);
        };
        let pf = self.parse_linked_address("physfn", &name)?;
        self.root.pci_device(pf).map(Some)
    }

    /// The VFs of this device as (index, address), by index: its `virtfnN`
    /// links. Empty for a PF without VFs and for any other device.
    pub fn virtual_functions(&self) -> Result<Vec<(u32, PciAddress)>> {
        let mut vfs = Vec::new();
        for name in self.list_dir(&self.path)? {
            let Some(index) = name
                .strip_prefix("virtfn")
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(target) = self.link_name(&name)? {
                vfs.push((index, self.parse_linked_address(&name, &target)?));
            }
        }
        vfs.sort();
        Ok(vfs)
    }

    /// The names of this device's netdevs (its `net/` directory), sorted;
    /// a name the kernel took but [`IfName`] refuses is
    /// [`PciError::Unexpected`].
    pub fn netdevs(&self) -> Result<Vec<IfName>> {
        let dir = self.path.join("net");
        let mut names = self
            .list_dir(&dir)?
            .into_iter()
            .map(|name| {
                IfName::new(name.as_str()).map_err(|reason| PciError::Unexpected {
                    address: self.address,
                    path: dir.join(&name),
                    reason: format!(
                        "the netdev name {name:?} is not a valid interface name: {reason}"
                    ),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        names.sort();
        Ok(names)
    }

    /// The bound driver's name, `None` when unbound.
    pub fn driver(&self) -> Result<Option<String>> {
        self.link_name("driver")
    }

    /// Unbind the device from its driver and bind it to the same driver
    /// again; the driver's `Some(name)`, `None` (nothing done) when unbound.
    /// An InfiniBand VF takes node and port GUIDs set through its PF only
    /// when its driver binds (mlx5; ib-sriov-cni rebinds the same way). Its
    /// netdev is destroyed wherever it is (a pod's namespace too) and made
    /// again in the initial namespace under a name the kernel picks.
    pub fn rebind(&self) -> Result<Option<String>> {
        let Some(driver) = self.driver()? else {
            return Ok(None);
        };
        let address = self.address.to_string();
        let unbind = self.path.join("driver/unbind");
        fs::write(&unbind, &address)
            .map_err(|e| sysfs_error(self.address, "write", &unbind, &e))?;
        let bind = self
            .root
            .0
            .join("bus/pci/drivers")
            .join(&driver)
            .join("bind");
        fs::write(&bind, &address).map_err(|e| sysfs_error(self.address, "write", &bind, &e))?;
        Ok(Some(driver))
    }

    /// The IOMMU group number (`iommu_group` link), `None` when it has none.
    pub fn iommu_group(&self) -> Result<Option<u32>> {
        let Some(name) = self.link_name("iommu_group")? else {
            return Ok(None);
        };
        name.parse().map(Some).map_err(|_| {
            self.unexpected(
                "iommu_group",
                format!("links to {name:?}, not a group number"),
            )
        })
    }

    /// The vfio device node of this device's IOMMU group:
    /// `/dev/vfio/noiommu-<group>` for a group vfio made up in no-IOMMU mode
    /// (named `vfio-noiommu`), else `/dev/vfio/<group>`. Meaningful while
    /// bound to vfio-pci.
    pub fn vfio_device_node(&self) -> Result<PathBuf> {
        let group = self
            .iommu_group()?
            .ok_or_else(|| self.unexpected("iommu_group", "absent: no IOMMU group".into()))?;
        let name = self.read_trimmed("iommu_group/name")?;
        let node = if name.as_deref() == Some(VFIO_NOIOMMU_GROUP_NAME) {
            format!("/dev/vfio/noiommu-{group}")
        } else {
            format!("/dev/vfio/{group}")
        };
        Ok(PathBuf::from(node))
    }

    /// The last component of the symlink `name` in the device directory,
    /// `None` when there is no such link.
    fn link_name(&self, name: &str) -> Result<Option<String>> {
        let path = self.path.join(name);
        match fs::read_link(&path) {
            Ok(target) => target
                .file_name()
                .map(|n| Some(n.to_string_lossy().into_owned()))
                .ok_or_else(|| self.unexpected(name, format!("links to {}", target.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(sysfs_error(self.address, "read link", &path, &e)),
        }
    }

    fn parse_linked_address(&self, link: &str, target: &str) -> Result<PciAddress> {
        PciAddress::parse(target)
            .map_err(|_| self.unexpected(link, format!("links to {target:?}, not a PCI device")))
    }

    /// The entries of `dir`; empty when it does not exist.
    fn list_dir(&self, dir: &Path) -> Result<Vec<String>> {
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(sysfs_error(self.address, "list", dir, &e)),
        };
        entries
            .map(|entry| {
                entry
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .map_err(|e| sysfs_error(self.address, "list", dir, &e))
            })
            .collect()
    }

    /// The trimmed content of the device's file `name` (`vendor`,
    /// `numa_node`), `None` when it does not exist.
    pub fn attribute(&self, name: &str) -> Result<Option<String>> {
        self.read_trimmed(name)
    }

    /// The trimmed content of file `name`, `None` when it does not exist.
    fn read_trimmed(&self, name: &str) -> Result<Option<String>> {
        let path = self.path.join(name);
        match fs::read_to_string(&path) {
            Ok(s) => Ok(Some(s.trim().to_string())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(sysfs_error(self.address, "read", &path, &e)),
        }
    }

    fn read_u32(&self, name: &str) -> Result<Option<u32>> {
        let Some(text) = self.read_trimmed(name)? else {
            return Ok(None);
        };
        text.parse()
            .map(Some)
            .map_err(|_| self.unexpected(name, format!("holds {text:?}, not a count")))
    }

    fn unexpected(&self, name: &str, reason: String) -> PciError {
        PciError::Unexpected {
            address: self.address,
            path: self.path.join(name),
            reason,
        }
    }
}

fn sysfs_error(address: PciAddress, op: &'static str, path: &Path, e: &io::Error) -> PciError {
    PciError::Sysfs {
        address,
        op,
        path: path.to_path_buf(),
        errno: e.raw_os_error().map_or(Errno::EIO, Errno::from_raw),
    }
}

#[cfg(any(test, feature = "fake-sysfs"))]
pub mod fake;

#[cfg(test)]
mod tests {
    use super::fake::{FakeSysfs, PARENT};
    use super::*;
    use std::os::unix::fs::symlink;

    fn addr(s: &str) -> PciAddress {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_parse_strictly_and_display_as_sysfs_names() {
        assert_eq!(addr("0000:01:10.0").to_string(), "0000:01:10.0");
        assert_eq!(
            addr("01:10.2"),
            PciAddress {
                domain: 0,
                bus: 1,
                device: 0x10,
                function: 2
            }
        );
        assert_eq!(addr("01:10.2").to_string(), "0000:01:10.2");
        assert_eq!(addr("ABCD:EF:1F.7").to_string(), "abcd:ef:1f.7");
        assert_eq!(addr("10000:e0:00.0").to_string(), "10000:e0:00.0");
        for bad in [
            "",
            "0000:01:10",
            "0000:01:10.8",
            "0000:01:20.0",
            "000:01:10.0",
            "0000:1:10.0",
            "0000:01:10.00",
            "0000:01:10.+1",
            "+000:01:10.0",
            "0000:01:10.0/../../x",
            "../0000:01:10.0",
            "0000:01:10.0 ",
            "0000:0g:10.0",
            "0:0000:01:10.0",
            "123456789:01:10.0",
        ] {
            let e = PciAddress::parse(bad).unwrap_err();
            assert!(
                matches!(&e, PciError::InvalidAddress { value, .. } if value == bad),
                "{bad:?}: {e}"
            );
            assert!(e.to_string().starts_with("invalid PCI address"), "{e}");
        }
    }

    #[test]
    fn rebind_writes_the_address_to_unbind_then_to_the_drivers_bind() {
        // A fake tree records the writes; the real unbind and bind run on
        // igb's VFs in the VM (dataplane/tests/sriov.rs).
        let f = FakeSysfs::new();
        f.pf_with_vfs(1);
        let vf = f.root().pci_device(addr("0000:01:10.0")).unwrap();
        assert_eq!(vf.rebind().unwrap().as_deref(), Some("igbvf"));
        let written = |p: &str| fs::read_to_string(f.path(p)).unwrap();
        assert_eq!(written("bus/pci/drivers/igbvf/unbind"), "0000:01:10.0");
        assert_eq!(written("bus/pci/drivers/igbvf/bind"), "0000:01:10.0");
        // Unbound: nothing to do.
        let unbound = f.device("0000:02:00.0", None, None);
        drop(unbound);
        let dev = f.root().pci_device(addr("0000:02:00.0")).unwrap();
        assert_eq!(dev.rebind().unwrap(), None);
    }

    #[test]
    fn representor_port_names_give_pf_and_vf() {
        assert_eq!(representor_port("pf0vf3"), Some((Some(0), 3)));
        assert_eq!(representor_port("c1pf1vf12"), Some((Some(1), 12)));
        assert_eq!(representor_port("7"), Some((None, 7)));
        for not_a_vf in ["p0", "pf0", "pf0sf3", "pfxvf1", "vf1", "", "c1p0"] {
            assert_eq!(representor_port(not_a_vf), None, "{not_a_vf}");
        }
    }

    #[test]
    fn a_vf_representor_shares_the_pfs_switch_and_names_the_vf() {
        // What a switchdev NIC shows in class/net (no such NIC here: the
        // VM's igb has no switchdev mode, so this tree stands in for one).
        let f = FakeSysfs::new();
        f.pf_with_vfs(2);
        let root = f.root();
        let vf1 = root
            .virtual_function("0000:01:10.2".parse().unwrap())
            .unwrap();
        assert_eq!(root.vf_representor(&vf1), None, "no class/net at all");
        let netdev = |name: &str, switch: Option<&str>, port: Option<&str>| {
            let dir = f.path(&format!("class/net/{name}"));
            fs::create_dir_all(&dir).unwrap();
            if let Some(switch) = switch {
                fs::write(dir.join("phys_switch_id"), format!("{switch}\n")).unwrap();
            }
            if let Some(port) = port {
                fs::write(dir.join("phys_port_name"), format!("{port}\n")).unwrap();
            }
        };
        // Legacy mode: the PF has no switch id.
        netdev("enp1s0", None, Some("p0"));
        netdev("eth9", Some("aabb"), Some("pf0vf1"));
        assert_eq!(root.vf_representor(&vf1), None);
        // switchdev: the representor of VF 1 of PF port 0 on its switch,
        // not VF 0's, not another switch's, not another PF port's.
        netdev("enp1s0", Some("aabb"), Some("p0"));
        netdev("eth1", Some("aabb"), Some("pf0vf0"));
        netdev("eth2", Some("ccdd"), Some("pf0vf1"));
        netdev("eth3", Some("aabb"), Some("pf1vf1"));
        assert_eq!(root.vf_representor(&vf1).as_deref(), Some("eth9"));
        let vf0 = root
            .virtual_function("0000:01:10.0".parse().unwrap())
            .unwrap();
        assert_eq!(root.vf_representor(&vf0).as_deref(), Some("eth1"));
        // An older kernel's bare VF number.
        fs::remove_dir_all(f.path("class/net/eth9")).unwrap();
        netdev("rep1", Some("aabb"), Some("1"));
        assert_eq!(root.vf_representor(&vf1).as_deref(), Some("rep1"));
    }

    #[test]
    fn a_vf_names_its_pf_index_netdevs_and_driver() {
        let sys = FakeSysfs::new();
        sys.pf_with_vfs(2);
        let vf = sys.root().virtual_function(addr("01:10.2")).unwrap();
        assert_eq!(
            vf,
            VirtualFunction {
                address: addr("0000:01:10.2"),
                pf: addr("0000:01:00.0"),
                pf_netdevs: vec![IfName::new("enp1s0").unwrap()],
                index: 1,
                netdev: Some(IfName::new("enp1s0v1").unwrap()),
                driver: Some("igbvf".into()),
                vfio_device: None,
            }
        );
        assert!(!vf.has_userspace_driver());
    }

    #[test]
    fn roles_pf_vf_and_neither() {
        let sys = FakeSysfs::new();
        sys.pf_with_vfs(2);
        sys.device("0000:00:02.0", Some("virtio-pci"), None);
        let root = sys.root();
        let role = |a: &str| root.pci_device(addr(a)).unwrap().sriov_role().unwrap();
        assert_eq!(
            role("0000:01:00.0"),
            SriovRole::PhysicalFunction {
                total_vfs: 7,
                num_vfs: 2
            }
        );
        assert_eq!(
            role("0000:01:10.0"),
            SriovRole::VirtualFunction {
                pf: addr("0000:01:00.0")
            }
        );
        assert_eq!(role("0000:00:02.0"), SriovRole::None);
        let pf = root.pci_device(addr("0000:01:00.0")).unwrap();
        assert_eq!(
            pf.virtual_functions().unwrap(),
            vec![(0, addr("0000:01:10.0")), (1, addr("0000:01:10.2"))]
        );
        // A PF with SR-IOV disabled by its firmware reports 0 total VFs.
        fs::write(pf.path().join("sriov_totalvfs"), "0\n").unwrap();
        assert_eq!(role("0000:01:00.0"), SriovRole::None);
    }

    #[test]
    fn not_found_and_not_a_vf_are_their_own_errors() {
        let sys = FakeSysfs::new();
        sys.pf_with_vfs(1);
        let root = sys.root();
        let e = root.virtual_function(addr("0000:02:00.0")).unwrap_err();
        assert!(
            matches!(e, PciError::NotFound { address, .. } if address == addr("0000:02:00.0")),
            "{e}"
        );
        assert!(
            e.to_string()
                .starts_with("PCI device 0000:02:00.0 not found"),
            "{e}"
        );
        let e = root.virtual_function(addr("0000:01:00.0")).unwrap_err();
        assert!(matches!(e, PciError::NotVirtualFunction { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "PCI device 0000:01:00.0 is not an SR-IOV virtual function"
        );
    }

    #[test]
    fn a_vf_its_pf_does_not_list_is_reported() {
        let sys = FakeSysfs::new();
        let pf = sys.pf_with_vfs(2);
        fs::remove_file(pf.join("virtfn1")).unwrap();
        let e = sys
            .root()
            .virtual_function(addr("0000:01:10.2"))
            .unwrap_err();
        assert!(
            matches!(e, PciError::VfIndexNotFound { pf, .. } if pf == addr("0000:01:00.0")),
            "{e}"
        );
    }

    #[test]
    fn a_vf_bound_to_vfio_has_no_netdev_and_a_vfio_node() {
        let sys = FakeSysfs::new();
        sys.pf_with_vfs(2);
        sys.bind_vfio("0000:01:10.0", 3, true);
        sys.bind_vfio("0000:01:10.2", 4, false);
        let vf = sys.root().virtual_function(addr("0000:01:10.0")).unwrap();
        assert_eq!(vf.driver.as_deref(), Some("vfio-pci"));
        assert!(vf.has_userspace_driver());
        assert_eq!(vf.netdev, None);
        assert_eq!(vf.vfio_device, Some(PathBuf::from("/dev/vfio/noiommu-3")));
        let vf = sys.root().virtual_function(addr("0000:01:10.2")).unwrap();
        assert_eq!(vf.vfio_device, Some(PathBuf::from("/dev/vfio/4")));
        for d in USERSPACE_DRIVERS {
            assert!(is_userspace_driver(d));
        }
        assert!(!is_userspace_driver("igbvf"));
    }

    #[test]
    fn an_unbound_vf_has_no_driver() {
        let sys = FakeSysfs::new();
        sys.pf_with_vfs(1);
        fs::remove_file(sys.path(&format!("{PARENT}/0000:01:10.0/driver"))).unwrap();
        let vf = sys.root().virtual_function(addr("0000:01:10.0")).unwrap();
        assert_eq!((vf.driver, vf.vfio_device), (None, None));
    }

    #[test]
    fn unexpected_sysfs_content_is_named() {
        let sys = FakeSysfs::new();
        let pf = sys.pf_with_vfs(1);
        fs::write(pf.join("sriov_totalvfs"), "many\n").unwrap();
        let e = sys
            .root()
            .pci_device(addr("0000:01:00.0"))
            .unwrap()
            .sriov_role()
            .unwrap_err();
        assert!(matches!(e, PciError::Unexpected { .. }), "{e}");
        assert!(
            e.to_string().contains("sriov_totalvfs: holds \"many\""),
            "{e}"
        );
        fs::remove_file(pf.join("virtfn0")).unwrap();
        symlink("../not-a-device", pf.join("virtfn0")).unwrap();
        let e = sys
            .root()
            .virtual_function(addr("0000:01:10.0"))
            .unwrap_err();
        assert!(e.to_string().contains("not a PCI device"), "{e}");
    }
}
