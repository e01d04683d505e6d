//! The networks of the devices of a pod's claims that plexus's driver
//! prepared with a network configuration: what the sandbox's ADD attaches
//! beside the pod's selections ([`ClaimedNetwork`]), and where the daemon's
//! driver is asked for them ([`PreparedClaims`]).

use super::inventory::DeviceKind;
use super::opaque::NetworkConfig;
use super::prepared::{PreparedClaim, PreparedDevice};

/// The claims prepared on this node, as the sandbox's ADD asks for them
/// (the daemon's driver holds them; a plugin process has none).
pub trait PreparedClaims: Send + Sync {
    /// The prepared claims reserved for the pod of uid `uid`.
    fn for_pod(&self, uid: &str) -> Vec<PreparedClaim>;
}

/// Where the daemon's driver is found once it runs (it starts after the
/// API client, and not at all on a cluster without DRA).
pub type PreparedSlot = std::sync::Arc<std::sync::OnceLock<std::sync::Arc<dyn PreparedClaims>>>;

/// The network of a device a claim of the pod was allocated from plexus's
/// driver, prepared on this node with a network configuration: the
/// sandbox's ADD attaches it beside the pod's selections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedNetwork {
    /// The claim's namespace and name.
    pub namespace: String,
    pub name: String,
    pub device: PreparedDevice,
    pub config: NetworkConfig,
}

/// How a claimed device reaches its network's plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandOver {
    /// A PCI device: `deviceID` (with `pciBusID` and
    /// `runtimeConfig.deviceID`), as Multus hands a device-plugin device.
    DeviceId(String),
    /// A device with no PCI address: the plugin's own key for it
    /// (host-device's `device`, vdpa's `vdpaDevice`).
    Key(&'static str, String),
}

impl ClaimedNetwork {
    /// `ResourceClaim ns/c device net-x`, for the plan and its errors.
    pub fn label(&self) -> String {
        format!(
            "{} {}/{} device {}",
            crate::dra::claim::KIND,
            self.namespace,
            self.name,
            self.device.device
        )
    }

    pub fn hand_over(&self) -> HandOver {
        let id = &self.device.device_id;
        if plexus_dataplane::pci::PciAddress::parse(id).is_ok() {
            return HandOver::DeviceId(id.clone());
        }
        match self.device.kind {
            DeviceKind::Vdpa => HandOver::Key("vdpaDevice", id.clone()),
            DeviceKind::Netdev | DeviceKind::Vf => HandOver::Key(
                "device",
                self.device.netdev.clone().unwrap_or_else(|| id.clone()),
            ),
        }
    }
}

/// The networks of `claims`' devices that have a network configuration, in
/// claim and device order.
pub fn claimed_networks(claims: &[PreparedClaim]) -> Vec<ClaimedNetwork> {
    let mut sorted: Vec<&PreparedClaim> = claims.iter().collect();
    sorted.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    sorted
        .into_iter()
        .flat_map(|c| {
            c.devices.iter().filter_map(move |d| {
                Some(ClaimedNetwork {
                    namespace: c.namespace.clone(),
                    name: c.name.clone(),
                    device: d.clone(),
                    config: d.network.clone()?,
                })
            })
        })
        .collect()
}
