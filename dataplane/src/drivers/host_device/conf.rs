//! The `host-device` driver's configuration keys, read and validated without
//! touching the system (the reference's `loadConf` and the checks of its
//! `getLink`).

use crate::drivers::error::DriverError;
use std::path::{Path, PathBuf};

use plexus_cni::names::IfName;
use plexus_cni::skel::Request;
use serde::Deserialize;

use super::super::netconf::{DnsConf, IpamRef};
use crate::drivers::netconf;
use crate::mac::MacAddr;
use crate::pci::PciAddress;
use crate::Error;

pub(crate) const DEVICE: &str = "device";
pub(crate) const HWADDR: &str = "hwaddr";
pub(crate) const KERNELPATH: &str = "kernelpath";
pub(crate) const PCI_BUS_ID: &str = "pciBusID";
pub(crate) const RUNTIME_DEVICE_ID: &str = "runtimeConfig.deviceID";

/// Where `kernelpath` must point (the reference's rule).
const KERNEL_DEVICES: &str = "/sys/devices/";

#[derive(Debug, Default, Deserialize)]
struct RawConf {
    device: Option<String>,
    hwaddr: Option<String>,
    kernelpath: Option<String>,
    #[serde(rename = "pciBusID")]
    pci_bus_id: Option<String>,
    #[serde(rename = "dataDir")]
    data_dir: Option<String>,
    ipam: Option<IpamRef>,
    dns: Option<DnsConf>,
}

/// How the configuration names the netdev, in the reference's precedence
/// (`getLink`: `device`, then `hwaddr`, then `kernelpath`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Select {
    /// `device`: its name in the node's namespace.
    Name(IfName),
    /// `hwaddr`: its MAC.
    Mac(MacAddr),
    /// `kernelpath`: the device whose `net/` directory holds it.
    KernelPath(PathBuf),
}

impl Select {
    pub fn key(&self) -> &'static str {
        match self {
            Select::Name(_) => DEVICE,
            Select::Mac(_) => HWADDR,
            Select::KernelPath(_) => KERNELPATH,
        }
    }
}

/// The bus device the configuration names: `runtimeConfig.deviceID`, which
/// overrides `pciBusID` (the reference's `handleDeviceID`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Bus {
    /// `pciBusID`.
    Pci(PciAddress),
    /// `runtimeConfig.deviceID`: a device under /sys/bus/pci/devices or
    /// /sys/bus/auxiliary/devices, told apart at ADD.
    DeviceId(String),
}

/// A validated `host-device` configuration.
#[derive(Debug)]
pub(crate) struct Conf {
    /// `device`, `hwaddr` or `kernelpath`, the first set.
    pub select: Option<Select>,
    pub bus: Option<Bus>,
    /// `dataDir`: where device locks and records live (plexus's key; the
    /// default is the driver's).
    pub data_dir: Option<PathBuf>,
    pub ipam: Option<IpamRef>,
    pub dns: Option<DnsConf>,
}

/// Read and validate the configuration. Every key given is checked, also
/// one a key of higher precedence overrides (the reference looks only at
/// the one it uses).
pub(crate) fn parse(req: &Request) -> Result<Conf, DriverError> {
    let c: RawConf = netconf::decode_config(req)?;
    let set = |v: Option<String>| v.filter(|s| !s.is_empty());
    let name = set(c.device)
        .map(|d| {
            IfName::new(d.as_str()).map_err(|why| {
                DriverError::config(DEVICE, format!("{d:?} is not an interface name: {why}"))
            })
        })
        .transpose()?;
    let mac = set(c.hwaddr)
        .map(|h| {
            h.parse::<MacAddr>()
                .map_err(|e: Error| DriverError::config(HWADDR, e.to_string()))
        })
        .transpose()?;
    let path = set(c.kernelpath).map(|p| kernel_path(&p)).transpose()?;
    let select = name
        .map(Select::Name)
        .or(mac.map(Select::Mac))
        .or(path.map(Select::KernelPath));
    let pci = set(c.pci_bus_id)
        .map(|p| PciAddress::parse(&p).map_err(|e| DriverError::config(PCI_BUS_ID, e.to_string())))
        .transpose()?;
    let bus = match netconf::runtime_string(req, "deviceID", RUNTIME_DEVICE_ID)? {
        Some(id) => Some(Bus::DeviceId(netconf::bus_device_name(
            RUNTIME_DEVICE_ID,
            id,
        )?)),
        None => pci.map(Bus::Pci),
    };
    if select.is_none() && bus.is_none() {
        return Err(DriverError::config(
            DEVICE,
            "missing: specify either \"device\", \"hwaddr\", \"kernelpath\" or \"pciBusID\" \
             (or runtimeConfig.deviceID)",
        ));
    }
    Ok(Conf {
        select,
        bus,
        data_dir: set(c.data_dir).map(PathBuf::from),
        ipam: c.ipam,
        dns: c.dns,
    })
}

/// `kernelpath`: absolute and below /sys/devices/ (the reference's rule),
/// without `.` or `..` steps (which the reference would follow out of it).
fn kernel_path(p: &str) -> Result<PathBuf, DriverError> {
    let path = Path::new(p);
    // Split by hand: `Path::components` drops the `.` steps.
    let plain = p.split('/').all(|step| step != "." && step != "..");
    if !path.is_absolute() || !p.starts_with(KERNEL_DEVICES) || !plain {
        return Err(DriverError::config(
            KERNELPATH,
            format!("kernel device path {p:?} must be absolute and begin with {KERNEL_DEVICES}, without . or .. steps"),
        ));
    }
    Ok(path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drivers::test_support::{unit_test_config, unit_test_refused, unit_test_request};
    use serde_json::{json, Value};

    fn config(extra: Value) -> Value {
        let base = json!({"cniVersion": "1.0.0", "name": "n", "type": "host-device"});
        unit_test_config(base, &extra)
    }

    fn parsed(extra: Value) -> Result<Conf, DriverError> {
        parse(&unit_test_request(config(extra), ""))
    }

    #[test]
    fn keys_in_the_reference_precedence() {
        let c = parsed(json!({"device": "eth1", "hwaddr": "02:00:00:00:00:01"})).unwrap();
        assert_eq!(c.select, Some(Select::Name(IfName::new("eth1").unwrap())));
        let c = parsed(json!({"HWAddr": "02:00:00:00:00:01", "kernelpath": "/sys/devices/x"}));
        assert_eq!(
            c.unwrap().select,
            Some(Select::Mac("02:00:00:00:00:01".parse().unwrap()))
        );
        let c = parsed(json!({"kernelPath": "/sys/devices/pci0000:00/0000:00:03.0"})).unwrap();
        assert_eq!(
            c.select,
            Some(Select::KernelPath(
                "/sys/devices/pci0000:00/0000:00:03.0".into()
            ))
        );
        let c = parsed(json!({"pcibusid": "0000:01:00.1"})).unwrap();
        assert_eq!(c.select, None);
        assert_eq!(c.bus, Some(Bus::Pci("0000:01:00.1".parse().unwrap())));
        // runtimeConfig.deviceID overrides pciBusID (handleDeviceID).
        let c = parsed(json!({"pciBusID": "0000:01:00.1",
                              "runtimeConfig": {"deviceID": "mlx5_core.sf.2"}}))
        .unwrap();
        assert_eq!(c.bus, Some(Bus::DeviceId("mlx5_core.sf.2".into())));
        // Empty is unset, as the reference reads it.
        let c = parsed(json!({"device": "", "pciBusID": "0000:01:00.1"})).unwrap();
        assert_eq!(c.select, None);
    }

    /// The refusals, naming each key, are drivers_host_device's
    /// `refused_configurations_name_their_key` (VALIDATE, no system needed).
    #[test]
    fn a_key_of_the_wrong_type_is_refused_as_go_refuses_it() {
        let c = config(json!({"hwaddr": 7}));
        unit_test_refused(parsed(json!({"hwaddr": 7})), &c, "hwaddr");
    }
}
