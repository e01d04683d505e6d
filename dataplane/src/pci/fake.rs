//! A fake sysfs for tests of what reads PCI and vDPA devices (this crate's,
//! and the DRA driver's inventory in the plexus crate): the kernel's layout
//! in a temporary directory, with the PF 0000:01:00.0 (igb) and its VFs
//! ([`FakeSysfs`]), or three vDPA devices ([`vdpa_devices`]).

use std::fs;
use std::os::unix::fs::symlink;
use std::path::PathBuf;

use super::SysfsRoot;

/// A fake sysfs shaped like the real one: devices under
/// `devices/pci0000:00/0000:00:01.0/`, `bus/pci/devices/` symlinks to
/// them, and the relative links sysfs uses between them.
pub struct FakeSysfs {
    dir: tempfile::TempDir,
}

/// Where the devices sit, below the root.
pub const PARENT: &str = "devices/pci0000:00/0000:00:01.0";

#[allow(clippy::new_without_default)]
impl FakeSysfs {
    pub fn new() -> Self {
        let f = FakeSysfs {
            dir: tempfile::tempdir().unwrap(),
        };
        for d in [
            "devices",
            "drivers/igb",
            "drivers/igbvf",
            "drivers/vfio-pci",
        ] {
            fs::create_dir_all(f.path(&format!("bus/pci/{d}"))).unwrap();
        }
        f
    }

    pub fn root(&self) -> SysfsRoot {
        SysfsRoot::new(self.dir.path())
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn device(&self, address: &str, driver: Option<&str>, netdev: Option<&str>) -> PathBuf {
        let dev = self.path(&format!("{PARENT}/{address}"));
        fs::create_dir_all(&dev).unwrap();
        symlink(
            format!("../../../{PARENT}/{address}"),
            self.path(&format!("bus/pci/devices/{address}")),
        )
        .unwrap();
        if let Some(driver) = driver {
            symlink(
                format!("../../../../bus/pci/drivers/{driver}"),
                dev.join("driver"),
            )
            .unwrap();
        }
        if let Some(netdev) = netdev {
            fs::create_dir_all(dev.join("net").join(netdev)).unwrap();
        }
        dev
    }

    /// The PF 0000:01:00.0 (igb, enp1s0) with VFs at 01:10.0, 01:10.2...
    pub fn pf_with_vfs(&self, vfs: u32) -> PathBuf {
        let pf = self.device("0000:01:00.0", Some("igb"), Some("enp1s0"));
        fs::write(pf.join("sriov_totalvfs"), "7\n").unwrap();
        fs::write(pf.join("sriov_numvfs"), format!("{vfs}\n")).unwrap();
        for n in 0..vfs {
            let a = format!("0000:01:10.{}", n * 2);
            let vf = self.device(&a, Some("igbvf"), Some(&format!("enp1s0v{n}")));
            symlink("../0000:01:00.0", vf.join("physfn")).unwrap();
            symlink(format!("../{a}"), pf.join(format!("virtfn{n}"))).unwrap();
            fs::write(vf.join("vendor"), "0x8086\n").unwrap();
            fs::write(vf.join("device"), "0x10ca\n").unwrap();
            fs::write(vf.join("numa_node"), "0\n").unwrap();
        }
        pf
    }

    /// Rebinds `vf` to vfio-pci: no netdev, an IOMMU group (named
    /// vfio-noiommu in no-IOMMU mode).
    pub fn bind_vfio(&self, vf: &str, group: u32, noiommu: bool) {
        let dev = self.path(&format!("{PARENT}/{vf}"));
        fs::remove_file(dev.join("driver")).unwrap();
        fs::remove_dir_all(dev.join("net")).unwrap();
        symlink("../../../../bus/pci/drivers/vfio-pci", dev.join("driver")).unwrap();
        let g = self.path(&format!("kernel/iommu_groups/{group}"));
        fs::create_dir_all(&g).unwrap();
        if noiommu {
            fs::write(g.join("name"), "vfio-noiommu\n").unwrap();
        }
        symlink(
            format!("../../../../kernel/iommu_groups/{group}"),
            dev.join("iommu_group"),
        )
        .unwrap();
    }
}

/// vDPA devices in a fake sysfs shaped like the real one. No PCI vDPA
/// device exists in the VM harness (vdpa_sim has no PCI parent), so what
/// looks a PCI parent up is tested on this: `vdpa0` on the VF 0000:03:00.2
/// bound to vhost_vdpa (`vhost-vdpa-7`),
/// `vdpa1` on the simulator bound to virtio_vdpa with netdev eth5,
/// `vdpa2` bound to nothing.
pub fn vdpa_devices() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let p = |s: &str| d.path().join(s);
    for dir in [
        "bus/vdpa/devices",
        "bus/vdpa/drivers/vhost_vdpa",
        "bus/vdpa/drivers/virtio_vdpa",
        "devices/pci0000:00/0000:00:02.0/0000:03:00.2/vdpa0/vhost-vdpa-7",
        "devices/vdpasim_net/vdpa1/virtio4/net/eth5",
        "devices/vdpasim_net/vdpa2",
    ] {
        fs::create_dir_all(p(dir)).unwrap();
    }
    let links = [
        (
            "../../../devices/pci0000:00/0000:00:02.0/0000:03:00.2/vdpa0",
            "bus/vdpa/devices/vdpa0",
        ),
        (
            "../../../devices/vdpasim_net/vdpa1",
            "bus/vdpa/devices/vdpa1",
        ),
        (
            "../../../devices/vdpasim_net/vdpa2",
            "bus/vdpa/devices/vdpa2",
        ),
        (
            "../../../../../bus/vdpa/drivers/vhost_vdpa",
            "devices/pci0000:00/0000:00:02.0/0000:03:00.2/vdpa0/driver",
        ),
        (
            "../../../bus/vdpa/drivers/virtio_vdpa",
            "devices/vdpasim_net/vdpa1/driver",
        ),
    ];
    for (target, link) in links {
        symlink(target, p(link)).unwrap();
    }
    d
}
