//! sriov-cni's configuration keys, read and validated without touching the
//! system (the checks of sriov-cni's `LoadConf`, plus those it leaves to the
//! kernel or gets wrong: `spoofchk`/`trust` other than "on"/"off", rates).

use crate::drivers::error::DriverError;
use std::path::PathBuf;

use plexus_cni::skel::Request;
use serde::Deserialize;
use serde_json::Value;

use super::super::netconf::DnsConf;
use super::super::netconf::IpamRef;
use super::super::ownership::DelKeys;
use super::guid;
use crate::drivers::netconf;
use crate::netlink::{Guid, VfLinkState, VfSettings, VfVlan, VlanProto};
use crate::pci::PciAddress;

const DEVICE_ID: &str = "deviceID";
const RUNTIME_DEVICE_ID: &str = "runtimeConfig.deviceID";
pub(crate) const RUNTIME_GUID: &str = "runtimeConfig.infinibandGUID";

#[derive(Debug, Default, Deserialize)]
struct RawConf {
    #[serde(rename = "deviceID")]
    device_id: Option<String>,
    vlan: Option<i64>,
    #[serde(rename = "vlanQoS")]
    vlan_qos: Option<i64>,
    #[serde(rename = "vlanProto")]
    vlan_proto: Option<String>,
    mac: Option<String>,
    spoofchk: Option<String>,
    trust: Option<String>,
    link_state: Option<String>,
    min_tx_rate: Option<i64>,
    max_tx_rate: Option<i64>,
    #[serde(rename = "dataDir")]
    data_dir: Option<String>,
    ipam: Option<IpamRef>,
    dns: Option<DnsConf>,
}

/// A validated `sriov` configuration.
#[derive(Debug)]
pub(crate) struct Conf {
    /// The VF: `runtimeConfig.deviceID` (as Multus hands it over), else
    /// `deviceID`.
    pub device: PciAddress,
    /// The key `device` came from, for messages.
    pub device_key: &'static str,
    /// What to set through the PF, GUIDs aside; `mac` is also the VF
    /// netdev's MAC.
    pub settings: VfSettings,
    /// `runtimeConfig.infinibandGUID`: the node and port GUID of an
    /// InfiniBand VF (ignored on an Ethernet one, as sriov-cni does).
    pub infiniband_guid: Option<Guid>,
    /// `dataDir`: where the VF locks and records live (default: the
    /// driver's).
    pub data_dir: Option<PathBuf>,
    pub ipam: Option<IpamRef>,
    pub dns: Option<DnsConf>,
}

impl Conf {
    /// What to set through the PF, once it is known whether the VF is
    /// InfiniBand.
    pub fn pf_settings(&self, infiniband: bool) -> VfSettings {
        let guid = self.infiniband_guid.filter(|_| infiniband);
        VfSettings {
            ib_node_guid: guid,
            ib_port_guid: guid,
            ..self.settings.clone()
        }
    }
}

/// Read and validate the configuration.
pub(crate) fn parse(req: &Request) -> Result<Conf, DriverError> {
    let c: RawConf = netconf::decode_config(req)?;
    let (device_key, device) = match netconf::runtime_string(req, "deviceID", RUNTIME_DEVICE_ID)? {
        Some(d) => (RUNTIME_DEVICE_ID, d),
        None => match c.device_id.as_deref().filter(|d| !d.is_empty()) {
            Some(d) => (DEVICE_ID, d),
            None => {
                return Err(DriverError::config(
                    DEVICE_ID,
                    "missing: the PCI address of the VF (e.g. 0000:03:02.3)",
                ))
            }
        },
    };
    let device =
        PciAddress::parse(device).map_err(|e| DriverError::config(device_key, e.to_string()))?;
    let mac = netconf::pick_mac(&[
        ("mac", c.mac.as_deref()),
        ("CNI_ARGS MAC", netconf::cni_args_mac(req)?),
        ("runtimeConfig.mac", netconf::runtime_config_mac(req)?),
    ])?;
    let infiniband_guid = netconf::runtime_string(req, "infinibandGUID", RUNTIME_GUID)?
        .map(|g| {
            g.parse::<Guid>()
                .map_err(|e| e.to_string())
                .and_then(guid::check_configured)
                .map_err(|why| DriverError::config(RUNTIME_GUID, why))
        })
        .transpose()?;
    let (min_tx_rate, max_tx_rate) = rates(c.min_tx_rate, c.max_tx_rate)?;
    Ok(Conf {
        device,
        device_key,
        settings: VfSettings {
            mac,
            vlan: vlan(c.vlan, c.vlan_qos, c.vlan_proto.as_deref())?,
            spoofchk: on_off("spoofchk", c.spoofchk.as_deref())?,
            trust: on_off("trust", c.trust.as_deref())?,
            link_state: link_state(c.link_state.as_deref())?,
            min_tx_rate,
            max_tx_rate,
            ib_node_guid: None,
            ib_port_guid: None,
        },
        infiniband_guid,
        data_dir: c.data_dir.filter(|d| !d.is_empty()).map(PathBuf::from),
        ipam: c.ipam,
        dns: c.dns,
    })
}

#[derive(Debug, Default, Deserialize)]
struct RawDelKeys {
    #[serde(rename = "deviceID")]
    device_id: Option<Value>,
    #[serde(rename = "dataDir")]
    data_dir: Option<Value>,
}

/// What DEL reads: the VF (`runtimeConfig.deviceID`, else `deviceID`) and
/// the data directory.
pub(crate) fn del_keys(req: &Request) -> DelKeys<PciAddress> {
    let c: RawDelKeys = netconf::decode_config(req).unwrap_or_default();
    DelKeys::read(
        &[req.runtime_config.get("deviceID"), c.device_id.as_ref()],
        c.data_dir.as_ref(),
        |d| PciAddress::parse(d).ok(),
    )
}

/// `vlan`, `vlanQoS`, `vlanProto`: the QoS and protocol only with a VLAN,
/// a non-zero QoS or 802.1ad only with a non-zero VLAN (sriov-cni's rules).
fn vlan(
    id: Option<i64>,
    qos: Option<i64>,
    proto: Option<&str>,
) -> Result<Option<VfVlan>, DriverError> {
    let Some(id) = id else {
        if qos.is_some() {
            return Err(DriverError::config(
                "vlanQoS",
                "set without vlan: a QoS needs a VLAN",
            ));
        }
        if proto.is_some() {
            return Err(DriverError::config(
                "vlanProto",
                "set without vlan: a protocol needs a VLAN",
            ));
        }
        return Ok(None);
    };
    let id = u16::try_from(id)
        .ok()
        .filter(|id| *id <= 4094)
        .ok_or_else(|| {
            DriverError::config(
                "vlan",
                format!("{id} is out of range: must be 0 (none) to 4094"),
            )
        })?;
    let qos = qos.unwrap_or(0);
    let qos = u8::try_from(qos).ok().filter(|q| *q <= 7).ok_or_else(|| {
        DriverError::config("vlanQoS", format!("{qos} is out of range: must be 0 to 7"))
    })?;
    if qos != 0 && id == 0 {
        return Err(DriverError::config(
            "vlanQoS",
            format!("{qos} needs a non-zero vlan (vlan is 0: none)"),
        ));
    }
    let proto = match proto {
        None => VlanProto::Dot1Q,
        Some(p) => p.parse().map_err(|_| {
            DriverError::config(
                "vlanProto",
                format!("{p:?} is not a VLAN protocol: expected \"802.1q\" or \"802.1ad\""),
            )
        })?,
    };
    if proto == VlanProto::Dot1Ad && id == 0 {
        return Err(DriverError::config(
            "vlanProto",
            "802.1ad needs a non-zero vlan (vlan is 0: none)",
        ));
    }
    Ok(Some(VfVlan { id, qos, proto }))
}

/// `spoofchk`, `trust`: "on" or "off" as sriov-cni writes them (empty: not
/// set). sriov-cni reads anything but "on" as "off"; a typo is refused here.
fn on_off(key: &str, value: Option<&str>) -> Result<Option<bool>, DriverError> {
    match value {
        None | Some("") => Ok(None),
        Some("on") => Ok(Some(true)),
        Some("off") => Ok(Some(false)),
        Some(other) => Err(DriverError::config(
            key,
            format!("{other:?} is not \"on\" or \"off\""),
        )),
    }
}

fn link_state(value: Option<&str>) -> Result<Option<VfLinkState>, DriverError> {
    match value {
        None | Some("") => Ok(None),
        Some(s) => s.parse().map(Some).map_err(|_| {
            DriverError::config(
                "link_state",
                format!("{s:?} is not a link state: expected auto, enable or disable"),
            )
        }),
    }
}

/// `min_tx_rate`, `max_tx_rate` in Mbit/s, 0 meaning no limit. As sriov-cni,
/// setting either sets both (the other 0). The minimum may not exceed a
/// maximum that limits.
fn rates(min: Option<i64>, max: Option<i64>) -> Result<(Option<u32>, Option<u32>), DriverError> {
    if min.is_none() && max.is_none() {
        return Ok((None, None));
    }
    let mbps = |key: &str, v: Option<i64>| {
        let v = v.unwrap_or(0);
        u32::try_from(v).map_err(|_| {
            DriverError::config(
                key,
                format!(
                    "{v} is out of range: must be 0 (no limit) to {} Mbit/s",
                    u32::MAX
                ),
            )
        })
    };
    let (min, max) = (mbps("min_tx_rate", min)?, mbps("max_tx_rate", max)?);
    if max != 0 && min > max {
        return Err(DriverError::config(
            "min_tx_rate",
            format!("{min} Mbit/s is above max_tx_rate ({max} Mbit/s)"),
        ));
    }
    Ok((Some(min), Some(max)))
}

#[cfg(test)]
mod tests {
    use crate::drivers::test_support;
    use serde_json::json;

    use super::*;

    /// `config` over a minimal one naming a VF.
    fn request(config: Value, args: &str) -> Request {
        let base = json!({
            "cniVersion": "1.0.0", "name": "sriov-net", "type": "sriov",
            "deviceID": "0000:01:10.0",
        });
        test_support::unit_test_request(test_support::unit_test_config(base, &config), args)
    }

    fn parsed(config: Value) -> Conf {
        parse(&request(config, "")).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The error for `config`: code 7, details starting with `key: `.
    fn refused(config: Value, key: &str) -> String {
        test_support::unit_test_refused(parse(&request(config.clone(), "")), &config, key)
    }

    fn addr(s: &str) -> PciAddress {
        s.parse().unwrap()
    }

    #[test]
    fn every_key_is_read() {
        let c = parsed(json!({
            "deviceID": "01:10.2", "vlan": 100, "vlanQoS": 5, "vlanProto": "802.1AD",
            "mac": "02:00:00:00:00:01", "spoofchk": "off", "trust": "on",
            "link_state": "enable", "min_tx_rate": 10, "max_tx_rate": 200,
            "dataDir": "/tmp/x", "ipam": {"type": "host-local"},
            "dns": {"nameservers": ["10.0.0.53"]},
            "runtimeConfig": {"infinibandGUID": "00:11:22:33:44:55:66:77"},
        }));
        assert_eq!((c.device, c.device_key), (addr("0000:01:10.2"), "deviceID"));
        assert_eq!(
            c.settings,
            VfSettings {
                mac: Some("02:00:00:00:00:01".parse().unwrap()),
                vlan: Some(VfVlan::tagged(100, 5, VlanProto::Dot1Ad)),
                spoofchk: Some(false),
                trust: Some(true),
                link_state: Some(VfLinkState::Enable),
                min_tx_rate: Some(10),
                max_tx_rate: Some(200),
                ib_node_guid: None,
                ib_port_guid: None,
            }
        );
        let guid = Guid(0x0011_2233_4455_6677);
        assert_eq!(c.infiniband_guid, Some(guid));
        assert_eq!(c.data_dir, Some(PathBuf::from("/tmp/x")));
        assert_eq!(c.ipam.unwrap().kind.as_deref(), Some("host-local"));
        assert!(c.dns.unwrap().is_set());
        // The GUIDs go to an InfiniBand VF only.
        let c = parsed(json!({"runtimeConfig": {"infinibandGUID": "00:11:22:33:44:55:66:77"}}));
        let ib = c.pf_settings(true);
        assert_eq!((ib.ib_node_guid, ib.ib_port_guid), (Some(guid), Some(guid)));
        assert!(c.pf_settings(false).is_empty());
    }

    #[test]
    fn nothing_but_the_device_is_required() {
        let c = parsed(json!({}));
        assert_eq!(c.device, addr("0000:01:10.0"));
        assert!(c.settings.is_empty());
        assert_eq!((c.infiniband_guid, c.data_dir), (None, None));
        // Empty strings mean "not set", as in sriov-cni.
        let c = parsed(json!({"spoofchk": "", "trust": "", "link_state": "", "dataDir": ""}));
        assert!(c.settings.is_empty());
        assert_eq!(c.data_dir, None);
        refused(json!({"deviceID": ""}), "deviceID");
        refused(json!({"deviceID": null}), "deviceID");
    }

    #[test]
    fn runtime_config_device_id_wins() {
        let c = parsed(json!({"runtimeConfig": {"deviceID": "0000:01:10.4"}}));
        assert_eq!(
            (c.device, c.device_key),
            (addr("0000:01:10.4"), "runtimeConfig.deviceID")
        );
        let d = refused(
            json!({"runtimeConfig": {"deviceID": "nope"}}),
            "runtimeConfig.deviceID",
        );
        assert!(d.contains("invalid PCI address \"nope\""), "{d}");
        refused(
            json!({"runtimeConfig": {"deviceID": 5}}),
            "runtimeConfig.deviceID",
        );
        // Empty: the config's.
        let c = parsed(json!({"runtimeConfig": {"deviceID": ""}}));
        assert_eq!(c.device_key, "deviceID");
    }

    #[test]
    fn bad_device_ids_are_named() {
        for bad in ["0000:01:10", "0000:01:20.0", "../0000:01:10.0", "eth0"] {
            let d = refused(json!({ "deviceID": bad }), "deviceID");
            assert!(d.contains("invalid PCI address"), "{d}");
        }
        refused(json!({"deviceID": 1}), "deviceID");
    }

    #[test]
    fn mac_precedence_is_config_then_cni_args_then_runtime_config() {
        let mac = |config: Value, args: &str| {
            parse(&request(config, args))
                .unwrap()
                .settings
                .mac
                .unwrap()
                .to_string()
        };
        let conf = json!({"mac": "02:00:00:00:00:01"});
        assert_eq!(mac(conf.clone(), ""), "02:00:00:00:00:01");
        assert_eq!(
            mac(conf.clone(), "IgnoreUnknown=1;MAC=02:00:00:00:00:02"),
            "02:00:00:00:00:02"
        );
        let mut rc = conf;
        rc["runtimeConfig"] = json!({"mac": "02:00:00:00:00:03"});
        assert_eq!(mac(rc, "MAC=02:00:00:00:00:02"), "02:00:00:00:00:03");
        let d = refused(json!({"mac": "01:00:5e:00:00:01"}), "mac");
        assert!(d.contains("not a unicast address"), "{d}");
        refused(json!({"mac": "zz"}), "mac");
        refused(
            json!({"runtimeConfig": {"mac": "02:00"}}),
            "runtimeConfig.mac",
        );
    }

    #[test]
    fn vlan_rules_follow_sriov_cni() {
        let v = |config: Value| parsed(config).settings.vlan;
        assert_eq!(v(json!({"vlan": 0})), Some(VfVlan::new(0)));
        assert_eq!(v(json!({"vlan": 4094})), Some(VfVlan::new(4094)));
        assert_eq!(
            v(json!({"vlan": 7, "vlanQoS": 7, "vlanProto": "802.1q"})),
            Some(VfVlan::tagged(7, 7, VlanProto::Dot1Q))
        );
        for (config, key, why) in [
            (json!({"vlan": -1}), "vlan", "out of range"),
            (json!({"vlan": 4095}), "vlan", "out of range"),
            (json!({"vlan": 70000}), "vlan", "out of range"),
            (json!({"vlan": 1.5}), "vlan", ""),
            (json!({"vlan": "10"}), "vlan", ""),
            (json!({"vlan": 10, "vlanQoS": 8}), "vlanQoS", "out of range"),
            (
                json!({"vlan": 10, "vlanQoS": -1}),
                "vlanQoS",
                "out of range",
            ),
            (json!({"vlanQoS": 1}), "vlanQoS", "without vlan"),
            (json!({"vlan": 0, "vlanQoS": 1}), "vlanQoS", "non-zero vlan"),
            (json!({"vlanProto": "802.1q"}), "vlanProto", "without vlan"),
            (
                json!({"vlan": 1, "vlanProto": "qinq"}),
                "vlanProto",
                "not a VLAN protocol",
            ),
            (
                json!({"vlan": 0, "vlanProto": "802.1ad"}),
                "vlanProto",
                "non-zero vlan",
            ),
        ] {
            let d = refused(config, key);
            assert!(d.contains(why), "{d}");
        }
    }

    #[test]
    fn switches_and_link_state_take_only_their_words() {
        let c = parsed(json!({"spoofchk": "on", "trust": "off", "link_state": "disable"}));
        assert_eq!(
            (c.settings.spoofchk, c.settings.trust, c.settings.link_state),
            (Some(true), Some(false), Some(VfLinkState::Disable))
        );
        assert_eq!(
            parsed(json!({"link_state": "auto"})).settings.link_state,
            Some(VfLinkState::Auto)
        );
        for (config, key) in [
            (json!({"spoofchk": "yes"}), "spoofchk"),
            (json!({"spoofchk": true}), "spoofchk"),
            (json!({"trust": "ON"}), "trust"),
            (json!({"link_state": "up"}), "link_state"),
            (json!({"link_state": 1}), "link_state"),
        ] {
            refused(config, key);
        }
    }

    #[test]
    fn rates_set_both_and_are_bounded() {
        let r = |config: Value| {
            let s = parsed(config).settings;
            (s.min_tx_rate, s.max_tx_rate)
        };
        assert_eq!(r(json!({})), (None, None));
        assert_eq!(r(json!({"max_tx_rate": 100})), (Some(0), Some(100)));
        assert_eq!(r(json!({"min_tx_rate": 10})), (Some(10), Some(0)));
        assert_eq!(
            r(json!({"min_tx_rate": 100, "max_tx_rate": 100})),
            (Some(100), Some(100))
        );
        for (config, key, why) in [
            (json!({"min_tx_rate": -1}), "min_tx_rate", "out of range"),
            (json!({"max_tx_rate": -5}), "max_tx_rate", "out of range"),
            (
                json!({"max_tx_rate": 5_000_000_000_i64}),
                "max_tx_rate",
                "out of range",
            ),
            (
                json!({"min_tx_rate": 200, "max_tx_rate": 100}),
                "min_tx_rate",
                "above max_tx_rate (100 Mbit/s)",
            ),
            (json!({"min_tx_rate": "10"}), "min_tx_rate", ""),
        ] {
            let d = refused(config, key);
            assert!(d.contains(why), "{d}");
        }
    }

    #[test]
    fn an_invalid_guid_is_named() {
        for bad in [
            json!("00:11:22"),
            json!("zz:11:22:33:44:55:66:77"),
            json!(7),
        ] {
            let d = refused(
                json!({"runtimeConfig": {"infinibandGUID": bad}}),
                "runtimeConfig.infinibandGUID",
            );
            assert!(!d.is_empty());
        }
    }

    /// ib-sriov-cni's `IsValidGUID` refuses all zeros; all ones (its
    /// `DefaultGUID`, "none assigned") is refused here too.
    #[test]
    fn a_guid_no_vf_may_have_is_refused() {
        for (bad, why) in [
            ("00:00:00:00:00:00:00:00", "is all zeros"),
            ("ff:ff:ff:ff:ff:ff:ff:ff", "is all ones"),
            ("FF:FF:FF:FF:FF:FF:FF:FF", "is all ones"),
        ] {
            let d = refused(
                json!({"runtimeConfig": {"infinibandGUID": bad}}),
                RUNTIME_GUID,
            );
            assert!(d.contains(why), "{d}");
        }
    }

    #[test]
    fn del_reads_what_it_can() {
        let keys = |config: Value| del_keys(&request(config, ""));
        assert_eq!(
            keys(json!({"dataDir": "/tmp/d"})),
            DelKeys {
                device: Some(addr("0000:01:10.0")),
                data_dir: Some("/tmp/d".into())
            }
        );
        assert_eq!(
            keys(json!({"runtimeConfig": {"deviceID": "0000:01:10.6"}})).device,
            Some(addr("0000:01:10.6"))
        );
        // Whatever ADD would refuse, DEL reads past.
        assert_eq!(
            keys(json!({"deviceID": 5, "dataDir": [], "vlan": "x"})),
            DelKeys::default()
        );
        assert_eq!(keys(json!({"deviceID": "bad"})).device, None);
    }
}
