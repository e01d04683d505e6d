//! The ADD result of a device handed whole to the pod (an SR-IOV VF, a vDPA
//! device), shared by their drivers: configured as a stacked link's when it
//! has a netdev in the pod, else a result naming the interface the pod's
//! userspace driver will drive.

use plexus_cni::result::{CniResult, Interface};
use plexus_cni::skel::Request;

use super::attachment::Attach;
use super::error::DriverError;
use super::iface;
use super::netconf::DnsConf;
use super::stacked;
use crate::mac::MacAddr;
use crate::netlink::Link;

/// The ADD result of a device handed whole to the pod: its netdev
/// `pod_link`, configured as a stacked link's, or, without one (an SR-IOV
/// VF in DPDK mode, a vDPA device on vhost_vdpa), CNI_IFNAME with
/// `admin_mac` and IPAM's addresses for the pod's userspace driver to use,
/// nothing configured; with cni-SPEC 1.1 `pciID`
/// when the device has a PCI address (older versions' results leave it out).
pub(crate) fn pod_result(
    req: &Request,
    dns: Option<&DnsConf>,
    at: &Attach<'_>,
    pod_link: Option<Link>,
    admin_mac: Option<MacAddr>,
    pci_id: Option<String>,
    ipam: Option<CniResult>,
) -> Result<CniResult, DriverError> {
    let mut result = match pod_link {
        Some(link) => stacked::configure(req, dns, false, at, link, ipam, stacked::NOTIFY)?,
        None => {
            let interface = Interface {
                name: at.ifname.to_string(),
                mac: admin_mac.map(|m| m.to_string()),
                sandbox: Some(at.sandbox.to_string()),
                ..Interface::default()
            };
            iface::pod_interface_result(req, ipam, interface, dns)
        }
    };
    if let (Some(interface), Some(pci_id)) = (result.interfaces.first_mut(), pci_id) {
        interface.pci_id = Some(pci_id);
    }
    Ok(result)
}
