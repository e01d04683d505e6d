//! The ADD result of a device handed whole to the pod (an SR-IOV VF, a vDPA
//! device), shared by their drivers: configured as a stacked link's when it
//! has a netdev in the pod, else the netdev-less result of
//! [`super::passthrough`].

use plexus_cni::result::CniResult;
use plexus_cni::skel::Request;

use super::attachment::Attach;
use super::error::DriverError;
use super::netconf::DnsConf;
use super::passthrough::netdevless_result;
use super::stacked;
use crate::mac::MacAddr;
use crate::netlink::Link;

/// The ADD result of a device handed whole to the pod: its netdev
/// `pod_link`, configured as a stacked link's, or, without one, the
/// netdev-less result reporting `admin_mac`; with cni-SPEC 1.1 `pciID`
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
        None => netdevless_result(req, dns, at, admin_mac, ipam),
    };
    if let (Some(interface), Some(pci_id)) = (result.interfaces.first_mut(), pci_id) {
        interface.pci_id = Some(pci_id);
    }
    Ok(result)
}
