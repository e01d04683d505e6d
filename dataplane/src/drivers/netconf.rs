//! The network configuration as the built-in plugins read it: decoded the
//! way the reference plugins (Go) decode theirs, with the keys they share
//! (`ipam`, `dns`, `mtu`, the MAC from `CNI_ARGS`, `args` or
//! `runtimeConfig`), and the host-side names they pick.

use crate::drivers::error::DriverError;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use plexus_cni::casefold;
use plexus_cni::names::{empty_is_none, IfName, PluginType};

use plexus_cni::skel::Request;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::{Error, MacAddr};

/// Tries at a free random host-side name before giving up.
pub(crate) const NAME_ATTEMPTS: usize = 10;

/// Decode the request's configuration into `T` the way the reference plugins
/// (Go) do: keys match case-insensitively, unknown keys are ignored, a known
/// key of the wrong type is a code-7 error naming its path.
pub(crate) fn decode_config<T: DeserializeOwned>(req: &Request) -> Result<T, DriverError> {
    casefold::decode(&Value::Object(req.config.clone())).map_err(DriverError::from)
}

/// The `ipam` section, as far as a driver reads it.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct IpamRef {
    /// Empty means none, as in the reference plugins.
    #[serde(
        rename = "type",
        default,
        deserialize_with = "empty_is_none::deserialize"
    )]
    pub kind: Option<PluginType>,
}

/// Whether the configuration delegates to an IPAM plugin. As in the
/// reference plugins an `ipam` section without a type (`"ipam": {}`) means
/// none: a layer-2 attachment.
pub(crate) fn has_ipam(ipam: &Option<IpamRef>) -> bool {
    ipam.as_ref().is_some_and(|i| i.kind.is_some())
}

/// The top-level `dns` key of a network configuration (cni-SPEC §1).
pub(crate) use plexus_cni::result::DnsConf;

/// Reject a feature the configuration turns on that plexus cannot honour
/// yet, naming the key.
pub(crate) fn unsupported(key: &str, on: Option<bool>, why: &str) -> Result<(), DriverError> {
    if on == Some(true) {
        return Err(DriverError::Unsupported {
            key: key.to_string(),
            why: why.to_string(),
        });
    }
    Ok(())
}

/// An MTU from the configuration: 0 or absent means the kernel's default,
/// anything else must lie in `min..=max` (`max_what` says where the upper
/// bound comes from).
pub(crate) fn check_mtu(
    mtu: Option<i64>,
    min: u32,
    max: u32,
    max_what: &str,
) -> Result<Option<u32>, DriverError> {
    match mtu {
        None | Some(0) => Ok(None),
        Some(m) if (i64::from(min)..=i64::from(max)).contains(&m) => Ok(Some(m as u32)),
        Some(m) => Err(DriverError::config(
            "mtu",
            format!("{m} is out of range: must be 0 (the default) or {min} to {max_what} ({max})"),
        )),
    }
}

/// The runtime-requested MAC address: the last non-empty of `candidates`
/// (given in increasing precedence as `(field, value)`), checked.
pub(crate) fn pick_mac(
    candidates: &[(&str, Option<&str>)],
) -> Result<Option<MacAddr>, DriverError> {
    let Some((field, value)) = candidates
        .iter()
        .rev()
        .find_map(|(f, v)| v.filter(|v| !v.is_empty()).map(|v| (*f, v)))
    else {
        return Ok(None);
    };
    let mac: MacAddr = value
        .parse()
        .map_err(|e: Error| DriverError::config(field, e.to_string()))?;
    if mac.is_multicast() || mac.0 == [0; 6] {
        return Err(DriverError::config(
            field,
            format!("{mac} is not a unicast address"),
        ));
    }
    Ok(Some(mac))
}

/// `runtimeConfig.mac` (cni-CONVENTIONS "mac" capability), if sent.
pub(crate) fn runtime_config_mac(req: &Request) -> Result<Option<&str>, DriverError> {
    match req.runtime_config.get("mac") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(DriverError::config(
            "runtimeConfig.mac",
            format!("must be a string, got {other}"),
        )),
    }
}

/// `CNI_ARGS` `MAC=...`, after the reference's rule that other keys need
/// `IgnoreUnknown=1`.
pub(crate) fn cni_args_mac(req: &Request) -> Result<Option<&str>, DriverError> {
    req.env.args().check_known(&["MAC"])?;
    Ok(req.env.args().get("MAC"))
}

/// A random `<prefix><8 hex digits>` name, the reference plugins' pattern
/// (`veth…` for a bridge's host end).
pub(crate) fn random_name(prefix: &'static str) -> IfName {
    // RandomState is seeded from the OS once per process and varies per
    // instance; the clock separates calls further.
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    IfName::new(format!("{prefix}{:08x}", h.finish() as u32))
        .expect("a short literal prefix and 8 hex digits make a valid name")
}

/// A string of runtimeConfig, `None` when absent or empty.
pub(crate) fn runtime_string<'r>(
    req: &'r Request,
    key: &str,
    field: &str,
) -> Result<Option<&'r str>, DriverError> {
    match req.runtime_config.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str()).filter(|s| !s.is_empty())),
        Some(other) => Err(DriverError::config(
            field,
            format!("must be a string, got {other}"),
        )),
    }
}

/// A bus device's name as `key` gives it (a PCI address, an auxiliary
/// device): one name under /sys/bus/*/devices, never a path out of it.
pub(crate) fn bus_device_name(key: &str, id: &str) -> Result<String, DriverError> {
    if id == "." || id == ".." || id.contains('/') || id.contains('\0') {
        return Err(DriverError::config(
            key,
            format!("{id:?} is not a device name (a PCI address or an auxiliary device)"),
        ));
    }
    Ok(id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_bounds() {
        assert_eq!(check_mtu(None, 68, 1500, "x").unwrap(), None);
        assert_eq!(check_mtu(Some(0), 68, 1500, "x").unwrap(), None);
        assert_eq!(check_mtu(Some(1400), 68, 1500, "x").unwrap(), Some(1400));
        for bad in [-1, 67, 1501] {
            let e = check_mtu(Some(bad), 68, 1500, "the master's MTU").unwrap_err();
            assert!(
                matches!(&e, DriverError::Config { field, reason }
                    if field == "mtu" && reason.starts_with(&format!("{bad} is out of range"))),
                "{e:?}"
            );
        }
    }

    #[test]
    fn mac_precedence_and_checks() {
        let m = pick_mac(&[
            ("CNI_ARGS MAC", Some("02:00:00:00:00:01")),
            ("args.cni.mac", None),
            ("runtimeConfig.mac", Some("")),
        ])
        .unwrap();
        assert_eq!(m.unwrap().to_string(), "02:00:00:00:00:01");
        let m = pick_mac(&[
            ("a", Some("02:00:00:00:00:01")),
            ("b", Some("02:00:00:00:00:02")),
        ]);
        assert_eq!(m.unwrap().unwrap().to_string(), "02:00:00:00:00:02");
        let e = pick_mac(&[("runtimeConfig.mac", Some("zz"))]).unwrap_err();
        assert!(
            matches!(&e, DriverError::Config { field, .. } if field == "runtimeConfig.mac"),
            "{e:?}"
        );
        let e = pick_mac(&[("mac", Some("01:00:5e:00:00:01"))]).unwrap_err();
        assert_eq!(
            e,
            DriverError::config("mac", "01:00:5e:00:00:01 is not a unicast address")
        );
        assert_eq!(pick_mac(&[]).unwrap(), None);
    }

    #[test]
    fn random_names_are_valid_and_differ() {
        let a = random_name("veth");
        let b = random_name("veth");
        assert_eq!(a.len(), 12);
        assert!(a.starts_with("veth"));
        assert_ne!(a, b);
    }

    #[test]
    fn dns_conf_is_set_like_go() {
        assert!(!DnsConf::default().is_set());
        let d = DnsConf {
            search: Some(vec![]),
            ..Default::default()
        };
        assert!(d.is_set());
        let d = DnsConf {
            domain: Some(String::new()),
            ..Default::default()
        };
        assert!(!d.is_set());
    }
}
