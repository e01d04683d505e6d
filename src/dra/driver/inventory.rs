//! The devices of this node that plexus's DRA driver offers, read from
//! sysfs (below a movable [`SysfsRoot`], so tests point it at a fake
//! tree):
//!
//! - every SR-IOV VF of every PF that has VFs (`bus/pci/devices/*`), named
//!   `vf-<PCI address, : and . as ->` as dra-driver-sriov names them;
//! - every vDPA device (`bus/vdpa/devices/*`), `vdpa-<name>`;
//! - the whole netdevs the administrator names (`--dra-netdev`), for
//!   host-device: `net-<name>`. None is offered unless named: a node's
//!   uplink handed to a pod would cut the node off.
//!
//! Each device carries the attributes a DeviceClass or a request selects
//! on ([`attributes`]) and what Prepare and ADD need: its device ID (what a
//! CNI plugin gets as `runtimeConfig.deviceID`) and the character devices
//! a container needs for a userspace driver.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use plexus_dataplane::pci::{PciAddress, PciDevice, SriovRole, SysfsRoot};
use serde::{Deserialize, Serialize};

use super::attributes::{self, Attribute};

/// What kind of device, and so which built-in driver attaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DeviceKind {
    /// An SR-IOV VF: `sriov` (or `host-device`).
    Vf,
    /// A vDPA device: `vdpa`.
    Vdpa,
    /// A whole netdev: `host-device`.
    Netdev,
}

impl DeviceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceKind::Vf => "vf",
            DeviceKind::Vdpa => "vdpa",
            DeviceKind::Netdev => "netdev",
        }
    }
}

/// One device of the node, as published and prepared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeDevice {
    /// Its name in the ResourceSlice (a DNS label).
    pub name: String,
    pub kind: DeviceKind,
    /// What a CNI plugin gets as `runtimeConfig.deviceID`: the PCI address
    /// of a VF or of a PCI netdev, the vDPA device's PCI parent; else its
    /// name (a vDPA simulator, a virtual netdev).
    pub device_id: String,
    /// Its netdev on the node, when it has one now.
    pub netdev: Option<String>,
    /// The character devices a container's userspace driver needs:
    /// `/dev/vfio/N` of a VF bound to vfio-pci, `/dev/vhost-vdpa-N`.
    pub char_devices: Vec<PathBuf>,
    /// The slice attributes, by qualified name.
    pub attributes: BTreeMap<String, Attribute>,
}

/// Where and what to look for.
#[derive(Debug, Clone)]
pub struct Scope {
    pub sysfs: SysfsRoot,
    /// `sys/class/net` as this process's network namespace sees it: the
    /// node's netdevs (a daemon in a test's node namespace sees that one's).
    pub class_net: PathBuf,
    /// The whole netdevs to offer, by name.
    pub netdevs: Vec<String>,
    /// The Multus resource name per PF netdev (`k8s.cni.cncf.io/resourceName`);
    /// a PF not named gets `<driver>/<pf>` ([`default_resource_name`]).
    pub resource_names: BTreeMap<String, String>,
}

/// The resource name of a VF of `pf` (its PF's netdev, else PCI address),
/// or of a vDPA device or netdev (`pf` = `vdpa`, `netdev`) when none is
/// configured.
pub fn default_resource_name(pf: &str) -> String {
    format!("{}/{pf}", super::DRIVER)
}

/// A DNS label out of `prefix` and `name`: lowercase letters, digits and
/// `-`, at most 63 characters.
fn label(prefix: &str, name: &str) -> String {
    let mut out = format!("{prefix}-");
    for c in name.chars() {
        out.push(if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '-'
        });
    }
    out.truncate(63);
    out.trim_end_matches('-').to_string()
}

/// Every device of the node in `scope`, sorted by name.
pub fn scan(scope: &Scope) -> io::Result<Vec<NodeDevice>> {
    let mut devices = Vec::new();
    for address in scope.sysfs.pci_addresses()? {
        let Ok(pf) = scope.sysfs.pci_device(address) else {
            continue;
        };
        if let Ok(SriovRole::PhysicalFunction { num_vfs, .. }) = pf.sriov_role() {
            if num_vfs > 0 {
                devices.extend(virtual_functions(scope, &pf));
            }
        }
    }
    for name in scope.sysfs.vdpa_devices()? {
        if let Some(device) = vdpa(scope, &name)? {
            devices.push(device);
        }
    }
    for name in &scope.netdevs {
        if let Some(device) = netdev(scope, name) {
            devices.push(device);
        }
    }
    devices.sort_by(|a, b| a.name.cmp(&b.name));
    devices.dedup_by(|a, b| a.name == b.name);
    Ok(devices)
}

/// The PCI facts of `device` as attributes: addresses, vendor, device,
/// NUMA node, PCIe root, bound driver, RDMA.
fn pci_attributes(device: &PciDevice, into: &mut BTreeMap<String, Attribute>) {
    let address = device.address().to_string();
    let read = |name: &str| device.attribute(name).ok().flatten();
    let hex = |name: &str| read(name).map(|v| v.trim_start_matches("0x").to_string());
    into.insert(attributes::PCI_ADDRESS.into(), Attribute::string(&address));
    into.insert(attributes::PCI_BUS_ID.into(), Attribute::string(&address));
    if let Some(vendor) = hex("vendor") {
        into.insert(attributes::VENDOR.into(), Attribute::string(&vendor));
    }
    if let Some(id) = hex("device") {
        into.insert(attributes::PCI_DEVICE.into(), Attribute::string(&id));
    }
    // -1: the machine has no NUMA; the attribute is then absent.
    if let Some(node) = read("numa_node").and_then(|n| n.parse::<i64>().ok()) {
        if node >= 0 {
            into.insert(attributes::NUMA_NODE.into(), Attribute::Int(node));
        }
    }
    if let Some(root) = pcie_root(device.path()) {
        into.insert(attributes::PCIE_ROOT.into(), Attribute::string(&root));
    }
    if let Ok(Some(driver)) = device.driver() {
        into.insert(attributes::KERNEL_DRIVER.into(), Attribute::string(&driver));
    }
    let rdma = device.path().join("infiniband").is_dir();
    into.insert(attributes::RDMA.into(), Attribute::Bool(rdma));
}

/// `pci0000:00` of `.../devices/pci0000:00/0000:00:01.0/0000:01:10.0`.
fn pcie_root(path: &Path) -> Option<String> {
    let real = std::fs::canonicalize(path).ok()?;
    real.components()
        .filter_map(|c| c.as_os_str().to_str())
        .find(|c| c.starts_with("pci") && c.contains(':'))
        .map(String::from)
}

fn virtual_functions(scope: &Scope, pf: &PciDevice) -> Vec<NodeDevice> {
    let pf_name = pf
        .netdevs()
        .ok()
        .and_then(|n| n.first().map(|n| n.to_string()));
    let pf_label = pf_name.clone().unwrap_or_else(|| pf.address().to_string());
    let resource_name = scope
        .resource_names
        .get(&pf_label)
        .cloned()
        .unwrap_or_else(|| default_resource_name(&pf_label));
    let mut out = Vec::new();
    for (index, address) in pf.virtual_functions().unwrap_or_default() {
        let Ok(vf) = scope.sysfs.virtual_function(address) else {
            continue;
        };
        let Ok(device) = scope.sysfs.pci_device(address) else {
            continue;
        };
        let mut attrs = BTreeMap::new();
        pci_attributes(&device, &mut attrs);
        attrs.insert(attributes::KIND.into(), Attribute::string("vf"));
        attrs.insert(attributes::VF_ID.into(), Attribute::Int(index.into()));
        attrs.insert(attributes::IS_SRIOV_VF.into(), Attribute::Bool(true));
        attrs.insert(
            attributes::PF_PCI_ADDRESS.into(),
            Attribute::string(&pf.address().to_string()),
        );
        if let Some(name) = &pf_name {
            attrs.insert(attributes::PF_NAME.into(), Attribute::string(name));
        }
        let id = address.to_string();
        attributes::multus(&mut attrs, &id, &resource_name);
        let char_devices = match (&vf.vfio_device, vf.has_userspace_driver()) {
            (Some(node), true) => vec![node.clone(), PathBuf::from("/dev/vfio/vfio")],
            _ => Vec::new(),
        };
        out.push(NodeDevice {
            name: label("vf", &id),
            kind: DeviceKind::Vf,
            device_id: id,
            netdev: vf.netdev.map(|n| n.to_string()),
            char_devices,
            attributes: attrs,
        });
    }
    out
}

fn vdpa(scope: &Scope, name: &str) -> io::Result<Option<NodeDevice>> {
    let Some(found) = scope.sysfs.vdpa_device(name)? else {
        return Ok(None);
    };
    let mut attrs = BTreeMap::new();
    if let Some(parent) = found.pci.and_then(|a| scope.sysfs.pci_device(a).ok()) {
        pci_attributes(&parent, &mut attrs);
    }
    attrs.insert(attributes::KIND.into(), Attribute::string("vdpa"));
    attrs.insert(attributes::VDPA_NAME.into(), Attribute::string(name));
    if let Some(driver) = &found.driver {
        attrs.insert(attributes::VDPA_DRIVER.into(), Attribute::string(driver));
    }
    let id = found
        .pci
        .map_or_else(|| name.to_string(), |a| a.to_string());
    let resource_name = resource_for(scope, "vdpa");
    attributes::multus(&mut attrs, &id, &resource_name);
    Ok(Some(NodeDevice {
        name: label("vdpa", name),
        kind: DeviceKind::Vdpa,
        device_id: id,
        netdev: found.netdevs.first().map(|n| n.to_string()),
        char_devices: found.vhost_path().into_iter().collect(),
        attributes: attrs,
    }))
}

fn netdev(scope: &Scope, name: &str) -> Option<NodeDevice> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return None;
    }
    let dir = scope.class_net.join(name);
    if !dir.exists() {
        return None;
    }
    let mut attrs = BTreeMap::new();
    let pci = std::fs::read_link(dir.join("device"))
        .ok()
        .and_then(|t| t.file_name().and_then(|n| n.to_str()).map(String::from))
        .and_then(|n| PciAddress::parse(&n).ok());
    if let Some(device) = pci.and_then(|a| scope.sysfs.pci_device(a).ok()) {
        pci_attributes(&device, &mut attrs);
    }
    attrs.insert(attributes::KIND.into(), Attribute::string("netdev"));
    attrs.insert(attributes::IF_NAME.into(), Attribute::string(name));
    if let Ok(mac) = std::fs::read_to_string(dir.join("address")) {
        attrs.insert(attributes::MAC.into(), Attribute::string(mac.trim()));
    }
    let id = pci.map_or_else(|| name.to_string(), |a| a.to_string());
    attributes::multus(&mut attrs, &id, &resource_for(scope, "netdev"));
    Some(NodeDevice {
        name: label("net", name),
        kind: DeviceKind::Netdev,
        device_id: id,
        netdev: Some(name.to_string()),
        char_devices: Vec::new(),
        attributes: attrs,
    })
}

fn resource_for(scope: &Scope, what: &str) -> String {
    scope
        .resource_names
        .get(what)
        .cloned()
        .unwrap_or_else(|| default_resource_name(what))
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_dataplane::pci::fake::FakeSysfs;

    fn scope(sys: &FakeSysfs, class_net: &Path) -> Scope {
        Scope {
            sysfs: sys.root(),
            class_net: class_net.to_path_buf(),
            netdevs: vec!["dummy0".into(), "absent".into()],
            resource_names: BTreeMap::from([("enp1s0".into(), "intel.com/sriov".into())]),
        }
    }

    #[test]
    fn vfs_of_pfs_and_named_netdevs_are_offered_with_their_attributes() {
        let sys = FakeSysfs::new();
        sys.pf_with_vfs(2);
        sys.bind_vfio("0000:01:10.2", 7, false);
        let net = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(net.path().join("dummy0")).unwrap();
        std::fs::write(net.path().join("dummy0/address"), "02:00:00:00:00:01\n").unwrap();
        let devices = scan(&scope(&sys, net.path())).unwrap();
        let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["net-dummy0", "vf-0000-01-10-0", "vf-0000-01-10-2"]);
        let vf = &devices[1];
        assert_eq!(vf.kind, DeviceKind::Vf);
        assert_eq!(vf.device_id, "0000:01:10.0");
        assert_eq!(vf.netdev.as_deref(), Some("enp1s0v0"));
        assert!(vf.char_devices.is_empty());
        let attr = |d: &NodeDevice, k: &str| d.attributes.get(k).cloned();
        assert_eq!(
            attr(vf, "k8s.cni.cncf.io/deviceID"),
            Some(Attribute::string("0000:01:10.0"))
        );
        assert_eq!(
            attr(vf, "k8s.cni.cncf.io/resourceName"),
            Some(Attribute::string("intel.com/sriov"))
        );
        assert_eq!(
            attr(vf, attributes::PF_NAME),
            Some(Attribute::string("enp1s0"))
        );
        assert_eq!(attr(vf, attributes::VF_ID), Some(Attribute::Int(0)));
        assert_eq!(
            attr(vf, attributes::VENDOR),
            Some(Attribute::string("8086"))
        );
        assert_eq!(
            attr(vf, attributes::PCI_DEVICE),
            Some(Attribute::string("10ca"))
        );
        assert_eq!(attr(vf, attributes::NUMA_NODE), Some(Attribute::Int(0)));
        assert_eq!(
            attr(vf, attributes::PCIE_ROOT),
            Some(Attribute::string("pci0000:00"))
        );
        assert_eq!(attr(vf, attributes::RDMA), Some(Attribute::Bool(false)));
        // Bound to vfio-pci: its group's node for the container.
        let dpdk = &devices[2];
        assert_eq!(
            dpdk.char_devices,
            [
                PathBuf::from("/dev/vfio/7"),
                PathBuf::from("/dev/vfio/vfio")
            ]
        );
        assert_eq!(attr(dpdk, attributes::VF_ID), Some(Attribute::Int(1)));
        assert_eq!(
            attr(dpdk, attributes::KERNEL_DRIVER),
            Some(Attribute::string("vfio-pci"))
        );
        let dummy = &devices[0];
        assert_eq!(dummy.device_id, "dummy0");
        assert_eq!(
            attr(dummy, "k8s.cni.cncf.io/resourceName"),
            Some(Attribute::string("dra.plexus.dev/netdev"))
        );
        assert_eq!(
            attr(dummy, attributes::MAC),
            Some(Attribute::string("02:00:00:00:00:01"))
        );
    }

    /// vDPA devices (the fake tree of `plexus_dataplane::pci::fake`): on
    /// vhost_vdpa the container gets `/dev/vhost-vdpa-N`; the device ID is
    /// the PCI parent's address, or the name of a simulator's device.
    #[test]
    fn vdpa_devices_are_offered_with_their_vhost_node() {
        let tree = plexus_dataplane::pci::fake::vdpa_devices();
        let scope = Scope {
            sysfs: SysfsRoot::new(tree.path()),
            class_net: tree.path().join("class/net"),
            netdevs: vec![],
            resource_names: BTreeMap::new(),
        };
        let devices = scan(&scope).unwrap();
        let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["vdpa-vdpa0", "vdpa-vdpa1", "vdpa-vdpa2"]);
        let (vhost, virtio) = (&devices[0], &devices[1]);
        assert_eq!(vhost.kind, DeviceKind::Vdpa);
        assert_eq!(vhost.device_id, "0000:03:00.2");
        assert_eq!(vhost.char_devices, [PathBuf::from("/dev/vhost-vdpa-7")]);
        assert_eq!(
            vhost.attributes.get(attributes::VDPA_DRIVER),
            Some(&Attribute::string("vhost_vdpa"))
        );
        assert_eq!(virtio.device_id, "vdpa1");
        assert_eq!(virtio.netdev.as_deref(), Some("eth5"));
        assert!(virtio.char_devices.is_empty());
        assert_eq!(
            virtio.attributes.get("k8s.cni.cncf.io/resourceName"),
            Some(&Attribute::string("dra.plexus.dev/vdpa"))
        );
    }

    #[test]
    fn labels_are_dns_labels() {
        assert_eq!(label("vf", "0000:3B:02.1"), "vf-0000-3b-02-1");
        assert_eq!(label("net", &"x".repeat(80)).len(), 63);
        assert_eq!(label("net", "a_"), "net-a");
    }
}
