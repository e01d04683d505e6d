//! Real PCI SR-IOV for tests ([`Feature::PciSriov`](crate::Feature)): the
//! physical function (PF) the probe finds, in the VM harness qemu's emulated
//! Intel 82576 (igb, shared/notes/sriov-vm.md); virtual functions (VFs)
//! created on it, with the PF up, for the life of a guard; and a VF handed
//! to vfio-pci in no-IOMMU mode (sriov-cni's "DPDK mode") until its guard
//! drops.
//!
//! The PF is one for the whole machine, so the guards of one test binary
//! take turns ([`SriovVfs::create`] waits for the previous guard). Every wait
//! is bounded; a failure panics naming what did not happen, as a test
//! fixture should. Drops clean up as far as they can and only warn.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const PCI_DEVICES: &str = "/sys/bus/pci/devices";
const CLASS_NET: &str = "/sys/class/net";
const PCI_DRIVERS_PROBE: &str = "/sys/bus/pci/drivers_probe";
const VFIO_NOIOMMU: &str = "/sys/module/vfio/parameters/enable_unsafe_noiommu_mode";

/// How long the kernel may take to create or remove VFs, or to rebind one.
/// Generous: under qemu's TCG, creating 2 VFs took 1.7 s and removing them
/// 3.3 s on an idle machine.
pub const SRIOV_TIMEOUT: Duration = Duration::from_secs(60);

/// A PCI device that can have VFs and has a netdev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciPf {
    /// Its PCI address, e.g. `0000:01:00.0`.
    pub address: String,
    /// Its netdev (first by name), in the machine's namespace.
    pub netdev: String,
    /// `sriov_totalvfs`.
    pub total_vfs: u32,
}

impl PciPf {
    fn path(&self, file: &str) -> PathBuf {
        Path::new(PCI_DEVICES).join(&self.address).join(file)
    }

    /// The addresses of its VFs now, by index (`virtfnN`).
    fn vf_addresses(&self) -> Vec<(u32, String)> {
        let mut vfs: Vec<(u32, String)> = entries(&self.path(""))
            .into_iter()
            .filter_map(|name| {
                let index = name.strip_prefix("virtfn")?.parse().ok()?;
                Some((index, link_name(&self.path(&name))?))
            })
            .collect();
        vfs.sort();
        vfs
    }

    fn set_num_vfs(&self, count: u32) {
        write(&self.path("sriov_numvfs"), &count.to_string());
    }

    /// Whether its netdev is administratively up (IFF_UP in `flags`).
    fn is_up(&self) -> bool {
        let flags = fs::read_to_string(Path::new(CLASS_NET).join(&self.netdev).join("flags"))
            .unwrap_or_default();
        u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).is_ok_and(|f| f & 1 == 1)
    }

    /// Brings its netdev up or down (`ip link`).
    fn set_up(&self, up: bool) -> Result<(), String> {
        let state = if up { "up" } else { "down" };
        let out = crate::bounded(
            Command::new("ip").args(["link", "set", "dev", &self.netdev, state]),
            SRIOV_TIMEOUT,
        )?;
        if !out.status.success() {
            return Err(format!("ip link set dev {} {state} failed", self.netdev));
        }
        Ok(())
    }

    /// Waits for its netdev's carrier.
    fn wait_for_carrier(&self) -> Result<(), String> {
        // Reading `carrier` of a link that is down gives EINVAL.
        let carrier = Path::new(CLASS_NET).join(&self.netdev).join("carrier");
        wait_for(&format!("carrier on {}", self.netdev), || {
            (fs::read_to_string(&carrier).ok()?.trim() == "1").then_some(())
        })
    }
}

/// The first PCI device (by address) with `sriov_totalvfs` > 0 and a netdev.
pub fn find_pf() -> Option<PciPf> {
    let mut addresses = entries(Path::new(PCI_DEVICES));
    addresses.sort();
    addresses.into_iter().find_map(|address| {
        let dir = Path::new(PCI_DEVICES).join(&address);
        let total_vfs: u32 = fs::read_to_string(dir.join("sriov_totalvfs"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let mut netdevs = entries(&dir.join("net"));
        netdevs.sort();
        let netdev = netdevs.into_iter().next()?;
        (total_vfs > 0).then_some(PciPf {
            address,
            netdev,
            total_vfs,
        })
    })
}

/// One VF created by [`SriovVfs::create`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciVf {
    pub address: String,
    /// Its number on the PF (`virtfnN`).
    pub index: u32,
}

impl PciVf {
    fn path(&self, file: &str) -> PathBuf {
        Path::new(PCI_DEVICES).join(&self.address).join(file)
    }

    /// Its netdev in the machine's namespace now: none while bound to
    /// vfio-pci or moved into another namespace, and the name may change
    /// when its driver is rebound.
    pub fn netdev(&self) -> Option<String> {
        let mut names = entries(&self.path("net"));
        names.sort();
        names.into_iter().next()
    }

    /// The bound driver's name now.
    pub fn driver(&self) -> Option<String> {
        link_name(&self.path("driver"))
    }
}

/// VFs on the probed PF, which is up meanwhile; on drop the VFs are removed
/// (`sriov_numvfs` 0) and the PF goes back down if it was.
#[derive(Debug)]
pub struct SriovVfs {
    pub pf: PciPf,
    pub vfs: Vec<PciVf>,
    pf_was_up: bool,
    _turn: MutexGuard<'static, ()>,
}

impl SriovVfs {
    /// Creates `count` VFs on the PF [`find_pf`] finds: brings the PF up,
    /// then `sriov_numvfs` 0 (a different non-zero count is refused with
    /// EBUSY), then `count`; returns once every VF has its netdev and the PF
    /// its carrier again (igb resets when its VF count changes).
    ///
    /// The PF is up first because igbvf probed under a PF that is down
    /// ("PF still in reset state") does not reach the PF's mailbox until
    /// reset: the PF would never learn the VF's own MAC. And igb takes a
    /// VF's maximum rate only with link.
    pub fn create(count: u32) -> SriovVfs {
        static TURN: Mutex<()> = Mutex::new(());
        // A test that panicked holding the turn has dropped its VFs anyway.
        let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let pf = find_pf().expect("no SR-IOV PF: check require(&[Feature::PciSriov]) first");
        assert!(
            count <= pf.total_vfs,
            "{} VFs asked, the PF {} has {} at most",
            count,
            pf.address,
            pf.total_vfs
        );
        // The guard first: a step that fails below is cleaned up by its drop.
        let mut guard = SriovVfs {
            pf_was_up: pf.is_up(),
            pf,
            vfs: Vec::new(),
            _turn: turn,
        };
        let pf = &guard.pf;
        pf.set_up(true).unwrap_or_else(|e| panic!("{e}"));
        pf.set_num_vfs(0);
        pf.set_num_vfs(count);
        let vfs = wait_for(
            &format!("{count} VFs with netdevs on {}", pf.address),
            || {
                let vfs: Vec<PciVf> = pf
                    .vf_addresses()
                    .into_iter()
                    .map(|(index, address)| PciVf { address, index })
                    .collect();
                (vfs.len() == count as usize && vfs.iter().all(|vf| vf.netdev().is_some()))
                    .then_some(vfs)
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        pf.wait_for_carrier().unwrap_or_else(|e| panic!("{e}"));
        guard.vfs = vfs;
        guard
    }
}

impl Drop for SriovVfs {
    fn drop(&mut self) {
        let removed = try_write(&self.pf.path("sriov_numvfs"), "0").and_then(|()| {
            wait_for("the test's VFs to go", || {
                self.pf.vf_addresses().is_empty().then_some(())
            })
        });
        let restored = if self.pf_was_up {
            Ok(())
        } else {
            self.pf.set_up(false)
        };
        for e in [removed, restored].into_iter().filter_map(Result::err) {
            eprintln!("warning: {e}");
        }
    }
}

/// A VF bound to vfio-pci in no-IOMMU mode; rebound to its netdev driver
/// on drop (where its netdev comes back, maybe under another name), and
/// no-IOMMU mode put back as it was.
#[derive(Debug)]
pub struct VfioBinding<'a> {
    vf: &'a PciVf,
    netdev_driver: String,
    noiommu_before: String,
}

impl<'a> VfioBinding<'a> {
    /// Unbinds `vf` from its driver and binds it to vfio-pci
    /// (`driver_override`, `drivers_probe`); returns once it is bound.
    /// `/dev/vfio/noiommu-<group>` then exists. Taints the kernel.
    pub fn bind(vf: &'a PciVf) -> VfioBinding<'a> {
        let netdev_driver = vf
            .driver()
            .unwrap_or_else(|| panic!("VF {} has no driver to come back to", vf.address));
        let noiommu_before = fs::read_to_string(VFIO_NOIOMMU)
            .unwrap_or_else(|e| panic!("{VFIO_NOIOMMU}: {e}: the kernel lacks VFIO_NOIOMMU"));
        write(Path::new(VFIO_NOIOMMU), "1");
        let binding = VfioBinding {
            vf,
            netdev_driver,
            noiommu_before: noiommu_before.trim().to_string(),
        };
        rebind(vf, "vfio-pci", "vfio-pci").unwrap_or_else(|e| panic!("{e}"));
        binding
    }
}

impl Drop for VfioBinding<'_> {
    fn drop(&mut self) {
        let vf = self.vf;
        let back = rebind(vf, "", &self.netdev_driver).and_then(|()| {
            wait_for(&format!("VF {} to have a netdev again", vf.address), || {
                vf.netdev().map(drop)
            })
        });
        if let Err(e) = back {
            eprintln!("warning: {e}");
        }
        // The kernel shows the bool as Y or N and reads both back.
        if let Err(e) = fs::write(VFIO_NOIOMMU, &self.noiommu_before) {
            eprintln!("warning: restoring {VFIO_NOIOMMU}: {e}");
        }
    }
}

/// Unbinds `vf` and has the PCI core probe it again, with `driver_override`
/// set to `override_to` ("" clears it: the driver matching its IDs binds);
/// waits until `expected` is bound.
fn rebind(vf: &PciVf, override_to: &str, expected: &str) -> Result<(), String> {
    // A lone newline clears the override.
    let override_to = if override_to.is_empty() {
        "\n"
    } else {
        override_to
    };
    try_write(&vf.path("driver_override"), override_to)?;
    if vf.driver().is_some() {
        try_write(&vf.path("driver/unbind"), &vf.address)?;
    }
    try_write(Path::new(PCI_DRIVERS_PROBE), &vf.address)?;
    wait_for(&format!("VF {} bound to {expected}", vf.address), || {
        (vf.driver()? == expected).then_some(())
    })
}

/// Polls `f` every 20 ms until it gives a value, for at most
/// [`SRIOV_TIMEOUT`]; after that the error names `what`.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> Result<T, String> {
    let deadline = Instant::now() + SRIOV_TIMEOUT;
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "timed out after {SRIOV_TIMEOUT:?} waiting for {what}"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn try_write(path: &Path, value: &str) -> Result<(), String> {
    fs::write(path, value).map_err(|e| format!("writing {value:?} to {}: {e}", path.display()))
}

fn write(path: &Path, value: &str) {
    try_write(path, value).unwrap_or_else(|e| panic!("{e}"));
}

/// The names in `dir`; none when it cannot be read.
fn entries(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The last component of the symlink at `path`.
fn link_name(path: &Path) -> Option<String> {
    let target = fs::read_link(path).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

/// sriov-cni's binary as `.ci/sriov-cni` caches it, or why not. Only looks:
/// building is for the host (vm-tests/run does it before the VM starts, whose
/// root is read-only), not for a feature probe every test binary runs.
pub fn sriov_cni() -> Result<PathBuf, String> {
    let path = crate::peers::ci_script("sriov-cni", &["--path"])?;
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "no sriov-cni at {} (build it with .ci/sriov-cni)",
            path.display()
        ))
    }
}
