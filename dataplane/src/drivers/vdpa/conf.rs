//! The `vdpa` driver's configuration keys, read and validated without
//! touching the system.

use crate::drivers::error::DriverError;
use std::path::PathBuf;

use plexus_cni::skel::Request;
use serde::Deserialize;
use serde_json::Value;

use super::super::netconf::DnsConf;
use super::super::netconf::IpamRef;
use super::super::ownership::DelKeys;
use crate::drivers::netconf;
use crate::mac::MacAddr;
use crate::pci::PciAddress;

const DEVICE_ID: &str = "deviceID";
const RUNTIME_DEVICE_ID: &str = "runtimeConfig.deviceID";
pub(crate) const VDPA_DEVICE: &str = "vdpaDevice";

/// The smallest MTU the kernel takes for an Ethernet device, and the
/// largest a virtio-net config space holds (u16).
const MTU_RANGE: std::ops::RangeInclusive<i64> = 68..=65535;

#[derive(Debug, Default, Deserialize)]
struct RawConf {
    #[serde(rename = "deviceID")]
    device_id: Option<String>,
    #[serde(rename = "vdpaDevice")]
    vdpa_device: Option<String>,
    mac: Option<String>,
    mtu: Option<i64>,
    #[serde(rename = "dataDir")]
    data_dir: Option<String>,
    ipam: Option<IpamRef>,
    dns: Option<DnsConf>,
}

/// How the configuration names the vDPA device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Device {
    /// The PCI device (VF or PF) it sits on, as a device plugin hands it over.
    Pci(PciAddress),
    /// Its name under /sys/bus/vdpa/devices.
    Name(String),
}

/// A validated `vdpa` configuration.
#[derive(Debug)]
pub(crate) struct Conf {
    pub device: Device,
    /// The key `device` came from, for messages.
    pub device_key: &'static str,
    /// The netdev's MAC (`mac`, `CNI_ARGS` `MAC`, `runtimeConfig.mac`: the
    /// last one set wins, as in sriov).
    pub mac: Option<MacAddr>,
    pub mtu: Option<u32>,
    /// `dataDir`: where device locks and records live (default: the
    /// driver's).
    pub data_dir: Option<PathBuf>,
    pub ipam: Option<IpamRef>,
    pub dns: Option<DnsConf>,
}

/// A vDPA device name as it may appear under /sys/bus/vdpa/devices and in
/// a lock file's name: not empty, not a path, printable.
pub(crate) fn device_name(key: &str, name: &str) -> Result<String, DriverError> {
    let why = if name.is_empty() {
        Some("empty")
    } else if name.len() > 64 {
        Some("longer than 64 bytes")
    } else if name == "." || name == ".." || name.contains('/') {
        Some("a path, not a device name")
    } else if !name.bytes().all(|b| b.is_ascii_graphic()) {
        Some("not printable ASCII without spaces")
    } else {
        None
    };
    match why {
        Some(why) => Err(DriverError::config(
            key,
            format!("{name:?} is not a vDPA device name: {why}"),
        )),
        None => Ok(name.to_string()),
    }
}

/// Read and validate the configuration.
pub(crate) fn parse(req: &Request) -> Result<Conf, DriverError> {
    let c: RawConf = netconf::decode_config(req)?;
    let pci = match netconf::runtime_string(req, "deviceID", RUNTIME_DEVICE_ID)? {
        Some(d) => Some((RUNTIME_DEVICE_ID, d)),
        None => c
            .device_id
            .as_deref()
            .filter(|d| !d.is_empty())
            .map(|d| (DEVICE_ID, d)),
    };
    let name = c.vdpa_device.as_deref().filter(|d| !d.is_empty());
    let (device_key, device) = match (pci, name) {
        (Some((key, _)), Some(_)) => {
            return Err(DriverError::config(
                VDPA_DEVICE,
                format!("set with {key}: name the vDPA device by one of them, not both"),
            ))
        }
        (None, None) => {
            return Err(DriverError::config(
                VDPA_DEVICE,
                "missing: set vdpaDevice (a vDPA device name, e.g. vdpa0) or deviceID (the PCI \
                 address of the VF or PF it sits on)",
            ))
        }
        (Some((key, d)), None) => (
            key,
            Device::Pci(PciAddress::parse(d).map_err(|e| DriverError::config(key, e.to_string()))?),
        ),
        (None, Some(n)) => (VDPA_DEVICE, Device::Name(device_name(VDPA_DEVICE, n)?)),
    };
    let mac = netconf::pick_mac(&[
        ("mac", c.mac.as_deref()),
        ("CNI_ARGS MAC", netconf::cni_args_mac(req)?),
        ("runtimeConfig.mac", netconf::runtime_config_mac(req)?),
    ])?;
    let mtu = c
        .mtu
        .map(|m| {
            if MTU_RANGE.contains(&m) {
                Ok(m as u32)
            } else {
                Err(DriverError::config(
                    "mtu",
                    format!(
                        "{m} is out of range: must be {} to {}",
                        MTU_RANGE.start(),
                        MTU_RANGE.end()
                    ),
                ))
            }
        })
        .transpose()?;
    Ok(Conf {
        device,
        device_key,
        mac,
        mtu,
        data_dir: c.data_dir.filter(|d| !d.is_empty()).map(PathBuf::from),
        ipam: c.ipam,
        dns: c.dns,
    })
}

#[derive(Debug, Default, Deserialize)]
struct RawDelKeys {
    #[serde(rename = "vdpaDevice")]
    vdpa_device: Option<Value>,
    #[serde(rename = "dataDir")]
    data_dir: Option<Value>,
}

/// What DEL reads: the device's name when the configuration gives it
/// (`vdpaDevice`; without it, DEL finds the attachment's device by its
/// record), and the data directory.
pub(crate) fn del_keys(req: &Request) -> DelKeys<String> {
    let c: RawDelKeys = netconf::decode_config(req).unwrap_or_default();
    DelKeys::read(&[c.vdpa_device.as_ref()], c.data_dir.as_ref(), |n| {
        device_name(VDPA_DEVICE, n).ok()
    })
}

#[cfg(test)]
mod tests {
    use crate::drivers::test_support;
    use serde_json::json;

    use super::*;

    fn request(config: Value, args: &str) -> Request {
        let base = json!({"cniVersion": "1.0.0", "name": "vdpa-net", "type": "vdpa"});
        test_support::unit_test_request(test_support::unit_test_config(base, &config), args)
    }

    fn parsed(config: Value) -> Conf {
        parse(&request(config, "")).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The error for `config`: code 7, details starting with `key: `.
    fn refused(config: Value, key: &str) -> String {
        test_support::unit_test_refused(parse(&request(config.clone(), "")), &config, key)
    }

    #[test]
    fn every_key_is_read() {
        let c = parsed(json!({
            "vdpaDevice": "vdpa0", "mac": "02:00:00:00:00:01", "mtu": 1400,
            "dataDir": "/tmp/v", "ipam": {"type": "host-local"},
            "dns": {"nameservers": ["10.0.0.53"]},
        }));
        assert_eq!(c.device, Device::Name("vdpa0".into()));
        assert_eq!(c.device_key, VDPA_DEVICE);
        assert_eq!(c.mac, Some("02:00:00:00:00:01".parse().unwrap()));
        assert_eq!(c.mtu, Some(1400));
        assert_eq!(c.data_dir, Some(PathBuf::from("/tmp/v")));
        assert_eq!(c.ipam.unwrap().kind.as_deref(), Some("host-local"));
        assert!(c.dns.unwrap().is_set());
        let c = parsed(json!({"deviceID": "03:00.2"}));
        assert_eq!(c.device, Device::Pci("0000:03:00.2".parse().unwrap()));
        assert_eq!(c.device_key, DEVICE_ID);
        assert_eq!((c.mac, c.mtu, c.data_dir), (None, None, None));
    }

    #[test]
    fn runtime_config_device_id_wins_over_device_id() {
        let c = parsed(json!({
            "deviceID": "0000:03:00.2",
            "runtimeConfig": {"deviceID": "0000:03:00.4"},
        }));
        assert_eq!(c.device, Device::Pci("0000:03:00.4".parse().unwrap()));
        assert_eq!(c.device_key, RUNTIME_DEVICE_ID);
        refused(
            json!({"runtimeConfig": {"deviceID": "vdpa0"}}),
            RUNTIME_DEVICE_ID,
        );
        refused(json!({"runtimeConfig": {"deviceID": 3}}), RUNTIME_DEVICE_ID);
    }

    #[test]
    fn exactly_one_of_device_id_and_vdpa_device() {
        let d = refused(json!({}), VDPA_DEVICE);
        assert!(d.contains("missing"), "{d}");
        refused(json!({"vdpaDevice": "", "deviceID": ""}), VDPA_DEVICE);
        let d = refused(
            json!({"vdpaDevice": "vdpa0", "deviceID": "0000:03:00.2"}),
            VDPA_DEVICE,
        );
        assert!(d.contains("set with deviceID"), "{d}");
        let d = refused(
            json!({"vdpaDevice": "vdpa0", "runtimeConfig": {"deviceID": "0000:03:00.2"}}),
            VDPA_DEVICE,
        );
        assert!(d.contains("set with runtimeConfig.deviceID"), "{d}");
    }

    #[test]
    fn bad_device_names_and_addresses_are_named() {
        for (bad, why) in [
            ("../vdpa0", "a path"),
            ("..", "a path"),
            ("vd pa", "printable"),
            ("vdpa\u{e9}", "printable"),
            (&"v".repeat(65), "longer than 64"),
        ] {
            let d = refused(json!({ "vdpaDevice": bad }), VDPA_DEVICE);
            assert!(d.contains(why), "{d}");
        }
        refused(json!({"vdpaDevice": 0}), VDPA_DEVICE);
        let d = refused(json!({"deviceID": "0000:03:00"}), DEVICE_ID);
        assert!(d.contains("invalid PCI address"), "{d}");
    }

    #[test]
    fn mac_and_mtu_are_validated() {
        let mac = |config: Value, args: &str| parse(&request(config, args)).unwrap().mac;
        let base = json!({"vdpaDevice": "vdpa0", "mac": "02:00:00:00:00:01"});
        assert_eq!(
            mac(base.clone(), "MAC=02:00:00:00:00:02"),
            Some("02:00:00:00:00:02".parse().unwrap())
        );
        let mut rc = base.clone();
        rc["runtimeConfig"] = json!({"mac": "02:00:00:00:00:03"});
        assert_eq!(mac(rc, ""), Some("02:00:00:00:00:03".parse().unwrap()));
        let d = refused(
            json!({"vdpaDevice": "v", "mac": "ff:ff:ff:ff:ff:ff"}),
            "mac",
        );
        assert!(!d.is_empty());
        refused(json!({"vdpaDevice": "v", "mac": "nope"}), "mac");
        assert_eq!(parsed(json!({"vdpaDevice": "v", "mtu": 68})).mtu, Some(68));
        assert_eq!(
            parsed(json!({"vdpaDevice": "v", "mtu": 65535})).mtu,
            Some(65535)
        );
        for bad in [
            json!(67),
            json!(65536),
            json!(-1),
            json!("1500"),
            json!(1.5),
        ] {
            refused(json!({"vdpaDevice": "v", "mtu": bad}), "mtu");
        }
    }

    #[test]
    fn del_reads_what_it_can() {
        let keys = |config: Value| del_keys(&request(config, ""));
        assert_eq!(
            keys(json!({"vdpaDevice": "vdpa1", "dataDir": "/tmp/d"})),
            DelKeys {
                device: Some("vdpa1".into()),
                data_dir: Some("/tmp/d".into())
            }
        );
        assert_eq!(
            keys(json!({"vdpaDevice": "../x", "dataDir": 5, "mtu": "x"})),
            DelKeys::default()
        );
        assert_eq!(keys(json!({"deviceID": "0000:03:00.2"})).device, None);
    }
}
