//! CNI results (cni-SPEC.md §5 "ADD Success") in one canonical model, the 1.1.0
//! shape, which is a superset of every earlier version. Parsing accepts any
//! version 0.1.0 – 1.1.0; serialising converts to the requested version (see
//! the conversion rules on [`CniResult::to_value`]).
//!
//! Wire formats, as libcni defines them:
//! - 0.1.0, 0.2.0: `ip4`/`ip6` objects `{ip, gateway, routes[{dst, gw}]}` and `dns`.
//! - 0.3.0, 0.3.1, 0.4.0: `interfaces[{name, mac, sandbox}]`,
//!   `ips[{version, interface, address, gateway}]`, `routes[{dst, gw}]`, `dns`.
//! - 1.0.0: as 0.4.0 without `ips[].version`.
//! - 1.1.0: adds `interfaces[].mtu/socketPath/pciID` and
//!   `routes[].mtu/advmss/priority/table/scope`.
//!
//! Parsing matches keys case-insensitively (results come from Go plugins) and
//! reads every field the model knows whatever the version, as libcni's
//! `types100` does; printing writes only what the target version has, and
//! omits empty values as Go's `omitempty` would (plus an empty `dns`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::casefold;
use super::config::describe;
use super::error::CniError;
use super::version::CniVersion;

/// A success result of any version, held in the 1.1.0 shape.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CniResult {
    /// The version the result was parsed from (or is meant to be printed as).
    pub cni_version: Option<CniVersion>,
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

/// `interfaces[]` (0.3.0+). `mtu`, `socket_path` and `pci_id` exist from 1.1.0.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Interface {
    pub name: String,
    pub mac: Option<String>,
    pub mtu: Option<u32>,
    /// The namespace path for interfaces inside the sandbox; `None` (or empty
    /// in JSON) for host interfaces.
    pub sandbox: Option<String>,
    pub socket_path: Option<String>,
    pub pci_id: Option<String>,
}

impl Interface {
    /// multi-net-spec §5.3.2.1: a "valid sandbox property" is a non-empty one.
    pub fn in_sandbox(&self) -> bool {
        self.sandbox.as_deref().is_some_and(|s| !s.is_empty())
    }
}

/// `ips[]` (0.3.0+), or `ip4`/`ip6` of 0.1.0/0.2.0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpConfig {
    /// Address with prefix length; host bits are kept (`10.1.0.5/16`).
    pub address: IpNetwork,
    pub gateway: Option<IpAddr>,
    /// Index into `interfaces`. Signed because runtimes and plugins written in
    /// Go use `*int` and multi-net-spec §5.3.3.1 speaks of values below zero.
    pub interface: Option<i64>,
}

/// `routes[]`. `mtu`, `advmss`, `priority`, `table` and `scope` exist from 1.1.0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dst: IpNetwork,
    pub gw: Option<IpAddr>,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
    pub priority: Option<u32>,
    pub table: Option<u32>,
    pub scope: Option<u32>,
}

impl Route {
    /// A route to `dst` through `gw` (none: on the link), with no other
    /// attributes.
    pub fn to(dst: IpNetwork, gw: Option<IpAddr>) -> Route {
        Route {
            dst,
            gw,
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }

    /// The default route of `gw`'s family (`0.0.0.0/0` or `::/0`) through it.
    pub fn default_via(gw: IpAddr) -> Route {
        let any: IpAddr = match gw {
            IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
            IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
        };
        let dst = IpNetwork::new(any, 0).expect("a /0 network is valid");
        Route::to(dst, Some(gw))
    }

    /// `0.0.0.0/0` or `::/0`.
    pub fn is_default(&self) -> bool {
        self.dst.prefix() == 0
    }
}

/// `dns`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dns {
    pub nameservers: Vec<String>,
    pub domain: Option<String>,
    pub search: Vec<String>,
    pub options: Vec<String>,
}

/// A `dns` key of a configuration as written (cni-SPEC §1, and an IPAM
/// section's): each list or the domain may be left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct DnsConf {
    pub nameservers: Option<Vec<String>>,
    pub domain: Option<String>,
    pub search: Option<Vec<String>>,
    pub options: Option<Vec<String>>,
}

impl DnsConf {
    /// Any field given, even empty (Go's non-nil check).
    pub fn is_set(&self) -> bool {
        self.nameservers.is_some()
            || self.search.is_some()
            || self.options.is_some()
            || self.domain.as_deref().is_some_and(|d| !d.is_empty())
    }

    pub fn to_dns(&self) -> Dns {
        Dns {
            nameservers: self.nameservers.clone().unwrap_or_default(),
            domain: self.domain.clone().filter(|d| !d.is_empty()),
            search: self.search.clone().unwrap_or_default(),
            options: self.options.clone().unwrap_or_default(),
        }
    }
}

impl Dns {
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_none()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

// ---------------------------------------------------------------------------
// Parsing

/// Code 6 for result content: `path: reason`.
fn bad(path: impl AsRef<str>, reason: impl AsRef<str>) -> CniError {
    CniError::decode(path, reason)
}

// One wire type per shape, read and written: parsing takes any of its
// fields (absent or null is `None`), printing fills in what the target
// version has and leaves the rest `None`, which is omitted (Go's
// `omitempty`). Fields are in libcni's order, which printing keeps.

/// A printed result: `cniVersion` first, then the version's shape.
#[derive(Serialize)]
struct Printed<T> {
    #[serde(rename = "cniVersion")]
    cni_version: &'static str,
    #[serde(flatten)]
    result: T,
}

#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize)]
struct WireModern {
    interfaces: Option<Vec<WireInterface>>,
    ips: Option<Vec<WireIp>>,
    routes: Option<Vec<RouteJson>>,
    dns: Option<WireDns>,
}

#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize)]
struct WireLegacy {
    ip4: Option<WireLegacyIp>,
    ip6: Option<WireLegacyIp>,
    dns: Option<WireDns>,
}

#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize)]
struct WireInterface {
    name: Option<String>,
    mac: Option<String>,
    mtu: Option<u32>,
    sandbox: Option<String>,
    #[serde(rename = "socketPath")]
    socket_path: Option<String>,
    #[serde(rename = "pciID")]
    pci_id: Option<String>,
}

#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize)]
struct WireIp {
    version: Option<String>,
    interface: Option<i64>,
    address: Option<String>,
    gateway: Option<String>,
}

/// A `routes[]` entry as written (cni-SPEC §5), shared with IPAM configs,
/// whose `routes` have the same shape.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RouteJson {
    dst: Option<String>,
    gw: Option<String>,
    mtu: Option<u32>,
    advmss: Option<u32>,
    priority: Option<u32>,
    table: Option<u32>,
    scope: Option<u32>,
}

#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize)]
struct WireDns {
    nameservers: Option<Vec<String>>,
    domain: Option<String>,
    search: Option<Vec<String>>,
    options: Option<Vec<String>>,
}

#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize)]
struct WireLegacyIp {
    ip: Option<String>,
    gateway: Option<String>,
    routes: Option<Vec<RouteJson>>,
}

/// `Some(list)` unless it is empty (Go's `omitempty` on a slice).
fn non_empty_list<T>(list: Vec<T>) -> Option<Vec<T>> {
    Some(list).filter(|l| !l.is_empty())
}

/// Go's `omitempty` makes "" and absent the same.
fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// Go's `int` fields with `omitempty` make 0 and absent the same.
fn non_zero(n: Option<u32>) -> Option<u32> {
    n.filter(|n| *n != 0)
}

/// An address in CIDR notation, as Go's `net.ParseCIDR` reads it (host bits
/// kept, decimal prefix length only).
pub fn parse_cidr(s: &str) -> Result<IpNetwork, String> {
    let invalid = || format!("{s:?} is not an address in CIDR notation (like \"10.1.0.5/16\")");
    let (addr, prefix) = s.split_once('/').ok_or_else(invalid)?;
    let addr: IpAddr = addr.parse().map_err(|_| invalid())?;
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    let prefix: u8 = prefix.parse().map_err(|_| invalid())?;
    IpNetwork::new(addr, prefix).map_err(|_| invalid())
}

fn required_cidr(s: Option<String>, path: &str) -> Result<IpNetwork, CniError> {
    let s = s.ok_or_else(|| bad(path, "missing"))?;
    parse_cidr(&s).map_err(|r| bad(path, r))
}

/// An optional IP; "" means none, as Go's `net.IP` decodes it.
fn optional_ip(s: Option<String>, path: &str) -> Result<Option<IpAddr>, CniError> {
    match non_empty(s) {
        None => Ok(None),
        Some(s) => s
            .parse()
            .map(Some)
            .map_err(|_| bad(path, format!("{s:?} is not an IP address"))),
    }
}

fn family(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() {
        "4"
    } else {
        "6"
    }
}

impl RouteJson {
    /// The route, or a code-6 error naming `path.dst` / `path.gw`.
    pub fn into_route(self, path: &str) -> Result<Route, CniError> {
        Ok(Route {
            dst: required_cidr(self.dst, &format!("{path}.dst"))?,
            gw: optional_ip(self.gw, &format!("{path}.gw"))?,
            mtu: non_zero(self.mtu),
            advmss: non_zero(self.advmss),
            priority: non_zero(self.priority),
            table: self.table,
            scope: self.scope,
        })
    }
}

impl WireDns {
    fn into_dns(self) -> Dns {
        Dns {
            nameservers: self.nameservers.unwrap_or_default(),
            domain: non_empty(self.domain),
            search: self.search.unwrap_or_default(),
            options: self.options.unwrap_or_default(),
        }
    }
}

fn decode<T: serde::de::DeserializeOwned>(v: &Value) -> Result<T, CniError> {
    casefold::from_value_at(v).map_err(|e| {
        let path = if e.path.is_empty() { "result" } else { &e.path };
        bad(path, e.error.to_string())
    })
}

impl CniResult {
    /// Parse a result that names its version in `cniVersion` (what a plugin
    /// prints on ADD).
    pub fn from_value(v: &Value) -> Result<CniResult, CniError> {
        let obj = v.as_object().ok_or_else(|| {
            bad(
                "result",
                format!("must be a JSON object, got {}", describe(v)),
            )
        })?;
        let version = match obj.get("cniVersion") {
            None => return Err(bad("cniVersion", "missing: a result must name its version")),
            Some(Value::String(s)) => CniVersion::parse_field(s, "cniVersion")?,
            Some(other) => {
                return Err(bad(
                    "cniVersion",
                    format!("must be a string, got {}", describe(other)),
                ))
            }
        };
        CniResult::from_value_as(v, version)
    }

    /// Parse a result in the format of `version`, whatever its `cniVersion`
    /// says: a `prevResult` (whose version is the request's) or an IPAM
    /// plugin's result.
    pub fn from_value_as(v: &Value, version: CniVersion) -> Result<CniResult, CniError> {
        if !v.is_object() {
            return Err(bad(
                "result",
                format!("must be a JSON object, got {}", describe(v)),
            ));
        }
        let mut result = if version.has_legacy_result() {
            CniResult::from_legacy(decode(v)?)?
        } else {
            CniResult::from_modern(decode(v)?, version)?
        };
        result.cni_version = Some(version);
        Ok(result)
    }

    fn from_modern(w: WireModern, version: CniVersion) -> Result<CniResult, CniError> {
        let interfaces = w
            .interfaces
            .unwrap_or_default()
            .into_iter()
            .map(|i| Interface {
                name: i.name.unwrap_or_default(),
                mac: non_empty(i.mac),
                mtu: non_zero(i.mtu),
                sandbox: non_empty(i.sandbox),
                socket_path: non_empty(i.socket_path),
                pci_id: non_empty(i.pci_id),
            })
            .collect();
        let ips = w
            .ips
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(n, ip)| {
                let path = format!("ips[{n}]");
                let address = required_cidr(ip.address, &format!("{path}.address"))?;
                // `version` exists in 0.3.0-0.4.0 only; later ones ignore it.
                if version < CniVersion::V1_0_0 {
                    if let Some(ver) = ip.version {
                        if ver != "4" && ver != "6" {
                            return Err(bad(
                                format!("{path}.version"),
                                format!("must be \"4\" or \"6\", got {ver:?}"),
                            ));
                        }
                        if ver != family(address.ip()) {
                            return Err(bad(
                                format!("{path}.version"),
                                format!("{ver:?} does not match the address {address}"),
                            ));
                        }
                    }
                }
                Ok(IpConfig {
                    address,
                    gateway: optional_ip(ip.gateway, &format!("{path}.gateway"))?,
                    interface: ip.interface,
                })
            })
            .collect::<Result<_, CniError>>()?;
        let routes = w
            .routes
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(n, r)| r.into_route(&format!("routes[{n}]")))
            .collect::<Result<_, _>>()?;
        Ok(CniResult {
            cni_version: None,
            interfaces,
            ips,
            routes,
            dns: w.dns.map(WireDns::into_dns).unwrap_or_default(),
        })
    }

    fn from_legacy(w: WireLegacy) -> Result<CniResult, CniError> {
        let mut result = CniResult {
            dns: w.dns.map(WireDns::into_dns).unwrap_or_default(),
            ..CniResult::default()
        };
        for (key, ip, want_v4) in [("ip4", w.ip4, true), ("ip6", w.ip6, false)] {
            let Some(ip) = ip else { continue };
            let address = required_cidr(ip.ip, &format!("{key}.ip"))?;
            if address.is_ipv4() != want_v4 {
                return Err(bad(
                    format!("{key}.ip"),
                    format!("{address} is not an IPv{} address", &key[2..]),
                ));
            }
            result.ips.push(IpConfig {
                address,
                gateway: optional_ip(ip.gateway, &format!("{key}.gateway"))?,
                interface: None,
            });
            for (n, r) in ip.routes.unwrap_or_default().into_iter().enumerate() {
                result
                    .routes
                    .push(r.into_route(&format!("{key}.routes[{n}]"))?);
            }
        }
        Ok(result)
    }

    // -----------------------------------------------------------------------
    // Printing

    /// The result as `version` prints it, converted as libcni converts:
    /// - to 0.1.0/0.2.0: the first IPv4 and the first IPv6 of `ips` (with their
    ///   gateways) become `ip4`/`ip6`; each route goes to the `routes` of its
    ///   destination's family (dropped if that family has no address);
    ///   `interfaces` are dropped. A result without any IP address cannot be
    ///   written in these versions: that is an error (code 1).
    /// - to 0.3.0–0.4.0: `ips[].version` is written from the address family;
    ///   the 1.1.0-only fields are dropped; 1.0.0 likewise, without `version`.
    /// - `cniVersion` is always written; empty lists and an empty `dns` are not.
    pub fn to_value(&self, version: CniVersion) -> Result<Value, CniError> {
        let cni_version = version.as_str();
        let printed = if version.has_legacy_result() {
            let result = self.to_legacy(version)?;
            serde_json::to_value(Printed {
                cni_version,
                result,
            })
        } else {
            let result = self.to_modern(version);
            serde_json::to_value(Printed {
                cni_version,
                result,
            })
        };
        // Plain structs of strings and numbers always serialize.
        Ok(printed.expect("a result serializes"))
    }

    fn to_modern(&self, version: CniVersion) -> WireModern {
        let v1_1 = version >= CniVersion::V1_1_0;
        let interfaces = self.interfaces.iter().map(|i| WireInterface {
            name: Some(i.name.clone()),
            mac: non_empty(i.mac.clone()),
            mtu: non_zero(i.mtu).filter(|_| v1_1),
            sandbox: non_empty(i.sandbox.clone()),
            socket_path: non_empty(i.socket_path.clone()).filter(|_| v1_1),
            pci_id: non_empty(i.pci_id.clone()).filter(|_| v1_1),
        });
        let ips = self.ips.iter().map(|ip| WireIp {
            version: (version < CniVersion::V1_0_0).then(|| family(ip.address.ip()).into()),
            interface: ip.interface,
            address: Some(ip.address.to_string()),
            gateway: ip.gateway.map(|gw| gw.to_string()),
        });
        WireModern {
            interfaces: non_empty_list(interfaces.collect()),
            ips: non_empty_list(ips.collect()),
            routes: non_empty_list(self.routes.iter().map(|r| r.to_json(v1_1)).collect()),
            dns: self.dns.to_wire(),
        }
    }

    fn to_legacy(&self, version: CniVersion) -> Result<WireLegacy, CniError> {
        let first = |v4: bool| self.ips.iter().find(|ip| ip.address.is_ipv4() == v4);
        let (ip4, ip6) = (first(true), first(false));
        if ip4.is_none() && ip6.is_none() {
            return Err(CniError::incompatible_version(
                "ips",
                format!(
                    "cannot write this result as CNI {version}: it has no IP address, \
                     and {version} results consist of ip4/ip6 addresses"
                ),
            ));
        }
        let legacy = |ip: &IpConfig| WireLegacyIp {
            ip: Some(ip.address.to_string()),
            gateway: ip.gateway.map(|gw| gw.to_string()),
            routes: non_empty_list(
                self.routes
                    .iter()
                    .filter(|r| r.dst.is_ipv4() == ip.address.is_ipv4())
                    .map(|r| r.to_json(false))
                    .collect(),
            ),
        };
        Ok(WireLegacy {
            ip4: ip4.map(legacy),
            ip6: ip6.map(legacy),
            dns: self.dns.to_wire(),
        })
    }
}

impl Route {
    /// `{dst, gw}`, plus the 1.1.0 fields when `v1_1`. `mtu`, `advmss` and
    /// `priority` are omitted when 0 (Go `int,omitempty`); `table` and `scope`
    /// are written whenever set (Go `*int`).
    fn to_json(&self, v1_1: bool) -> RouteJson {
        let v1_1_only = |n: Option<u32>| n.filter(|_| v1_1);
        RouteJson {
            dst: Some(self.dst.to_string()),
            gw: self.gw.map(|gw| gw.to_string()),
            mtu: v1_1_only(non_zero(self.mtu)),
            advmss: v1_1_only(non_zero(self.advmss)),
            priority: v1_1_only(non_zero(self.priority)),
            table: v1_1_only(self.table),
            scope: v1_1_only(self.scope),
        }
    }
}

impl Dns {
    /// `None` when empty: an empty `dns` is not printed.
    fn to_wire(&self) -> Option<WireDns> {
        let dns = WireDns {
            nameservers: non_empty_list(self.nameservers.clone()),
            domain: non_empty(self.domain.clone()),
            search: non_empty_list(self.search.clone()),
            options: non_empty_list(self.options.clone()),
        };
        let empty = dns.nameservers.is_none()
            && dns.domain.is_none()
            && dns.search.is_none()
            && dns.options.is_none();
        (!empty).then_some(dns)
    }
}

#[cfg(test)]
mod tests {
    use proptest::collection::vec;
    use proptest::option;
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::error::details_of;
    use crate::ErrorCode;

    /// cni-SPEC Appendix "Add example": the result of `host-local`.
    const HOST_LOCAL: &str = r#"{
        "ips": [
            {
              "address": "10.1.0.5/16",
              "gateway": "10.1.0.1"
            }
        ],
        "routes": [
          {
            "dst": "0.0.0.0/0"
          }
        ],
        "dns": {
          "nameservers": [ "10.1.0.1" ]
        }
    }"#;

    /// cni-SPEC Appendix "Add example": the result of `bridge`.
    const BRIDGE: &str = include_str!("testdata/appendix-bridge-result.json");

    /// cni-SPEC Appendix "Add example": the result of `tuning`.
    const TUNING: &str = include_str!("testdata/appendix-tuning-result.json");

    fn parse_json(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    fn without_version(mut v: Value) -> Value {
        v.as_object_mut().unwrap().remove("cniVersion");
        v
    }

    #[test]
    fn default_via_takes_the_gateways_family() {
        let v4 = Route::default_via("10.0.0.1".parse().unwrap());
        let v6 = Route::default_via("fd00::1".parse().unwrap());
        assert_eq!(
            (v4.dst.to_string(), v6.dst.to_string()),
            ("0.0.0.0/0".to_string(), "::/0".to_string())
        );
        assert!(v4.is_default() && v6.is_default());
        assert_eq!(v6, Route::to("::/0".parse().unwrap(), v6.gw));
    }

    #[test]
    fn appendix_results_print_back_identically() {
        // cni-SPEC Appendix "Add example": the IPAM result is read with the
        // request's version, as a plugin reads its delegate's output.
        for text in [HOST_LOCAL, BRIDGE, TUNING] {
            let v = parse_json(text);
            let r = CniResult::from_value_as(&v, CniVersion::V1_1_0).unwrap();
            assert_eq!(r.cni_version, Some(CniVersion::V1_1_0));
            let out = r.to_value(CniVersion::V1_1_0).unwrap();
            assert_eq!(out["cniVersion"], "1.1.0");
            assert_eq!(without_version(out), v);
        }
        let r = CniResult::from_value_as(&parse_json(BRIDGE), CniVersion::V1_1_0).unwrap();
        assert_eq!(r.interfaces.len(), 3);
        assert!(r.interfaces[2].in_sandbox() && !r.interfaces[0].in_sandbox());
        assert_eq!(r.ips[0].interface, Some(2));
        assert_eq!(r.ips[0].address.to_string(), "10.1.0.5/16");
        assert!(r.routes[0].is_default());
        assert_eq!(r.dns.nameservers, ["10.1.0.1"]);
        // Key order is libcni's.
        let out = r.to_value(CniVersion::V1_1_0).unwrap();
        let keys: Vec<&str> = out
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["cniVersion", "interfaces", "ips", "routes", "dns"]);
    }

    fn rich() -> Value {
        json!({
            "cniVersion": "1.1.0",
            "interfaces": [
                {"name": "cni0", "mac": "00:11:22:33:44:55", "mtu": 1500},
                {"name": "eth0", "mac": "99:88:77:66:55:44", "mtu": 1450,
                 "sandbox": "/var/run/netns/blue", "socketPath": "/run/vhost.sock",
                 "pciID": "0000:04:00.5"}
            ],
            "ips": [
                {"interface": 1, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
                {"interface": 1, "address": "10.2.0.5/16"},
                {"interface": 1, "address": "fd00::5/64", "gateway": "fd00::1"}
            ],
            "routes": [
                {"dst": "0.0.0.0/0", "gw": "10.1.0.1", "mtu": 1400, "advmss": 1360,
                 "priority": 10, "table": 100, "scope": 0},
                {"dst": "::/0"},
                {"dst": "192.168.0.0/16"}
            ],
            "dns": {"nameservers": ["10.1.0.1"], "domain": "example.com",
                    "search": ["a.example.com"], "options": ["ndots:5"]}
        })
    }

    fn rich_1_0_0() -> Value {
        json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "cni0", "mac": "00:11:22:33:44:55"},
                {"name": "eth0", "mac": "99:88:77:66:55:44", "sandbox": "/var/run/netns/blue"}
            ],
            "ips": [
                {"interface": 1, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
                {"interface": 1, "address": "10.2.0.5/16"},
                {"interface": 1, "address": "fd00::5/64", "gateway": "fd00::1"}
            ],
            "routes": [
                {"dst": "0.0.0.0/0", "gw": "10.1.0.1"},
                {"dst": "::/0"},
                {"dst": "192.168.0.0/16"}
            ],
            "dns": {"nameservers": ["10.1.0.1"], "domain": "example.com",
                    "search": ["a.example.com"], "options": ["ndots:5"]}
        })
    }

    fn rich_0_x(version: &str) -> Value {
        let mut v = rich_1_0_0();
        v["cniVersion"] = json!(version);
        for (i, fam) in ["4", "4", "6"].into_iter().enumerate() {
            v["ips"][i]
                .as_object_mut()
                .unwrap()
                .insert("version".into(), json!(fam));
        }
        v
    }

    fn rich_legacy(version: &str) -> Value {
        json!({
            "cniVersion": version,
            "ip4": {"ip": "10.1.0.5/16", "gateway": "10.1.0.1",
                    "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}, {"dst": "192.168.0.0/16"}]},
            "ip6": {"ip": "fd00::5/64", "gateway": "fd00::1", "routes": [{"dst": "::/0"}]},
            "dns": {"nameservers": ["10.1.0.1"], "domain": "example.com",
                    "search": ["a.example.com"], "options": ["ndots:5"]}
        })
    }

    #[test]
    fn converts_down_to_every_version() {
        let r = CniResult::from_value(&rich()).unwrap();
        assert_eq!(r.interfaces[1].pci_id.as_deref(), Some("0000:04:00.5"));
        assert_eq!(r.routes[0].table, Some(100));
        assert_eq!(r.routes[0].scope, Some(0));
        let expected = [
            (CniVersion::V0_1_0, rich_legacy("0.1.0")),
            (CniVersion::V0_2_0, rich_legacy("0.2.0")),
            (CniVersion::V0_3_0, rich_0_x("0.3.0")),
            (CniVersion::V0_3_1, rich_0_x("0.3.1")),
            (CniVersion::V0_4_0, rich_0_x("0.4.0")),
            (CniVersion::V1_0_0, rich_1_0_0()),
            (CniVersion::V1_1_0, rich()),
        ];
        for (version, want) in expected {
            assert_eq!(r.to_value(version).unwrap(), want, "{version}");
            // And each of those parses back to something that prints the same.
            let back = CniResult::from_value(&want).unwrap();
            assert_eq!(back.cni_version, Some(version));
            assert_eq!(back.to_value(version).unwrap(), want, "{version}");
        }
    }

    #[test]
    fn converts_up_from_legacy_without_interface_indexes() {
        // libcni's 0.2.0 -> 0.4.0 conversion: ips without `interface`.
        let legacy = json!({
            "cniVersion": "0.2.0",
            "ip4": {"ip": "10.1.0.5/16", "gateway": "10.1.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
            "dns": {"nameservers": ["8.8.8.8"]}
        });
        let r = CniResult::from_value(&legacy).unwrap();
        assert_eq!(
            r.to_value(CniVersion::V0_4_0).unwrap(),
            json!({"cniVersion": "0.4.0",
                   "ips": [{"version": "4", "address": "10.1.0.5/16", "gateway": "10.1.0.1"}],
                   "routes": [{"dst": "0.0.0.0/0"}], "dns": {"nameservers": ["8.8.8.8"]}})
        );
        assert_eq!(
            r.to_value(CniVersion::V1_1_0).unwrap(),
            json!({"cniVersion": "1.1.0",
                   "ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1"}],
                   "routes": [{"dst": "0.0.0.0/0"}], "dns": {"nameservers": ["8.8.8.8"]}})
        );
        // The legacy IPv6 part and its routes come after IPv4.
        let legacy = json!({"cniVersion": "0.1.0", "ip6": {"ip": "fd00::2/64"},
                            "ip4": {"ip": "10.0.0.2/8", "routes": [{"dst": "10.0.0.0/8"}]}});
        let r = CniResult::from_value(&legacy).unwrap();
        let addrs: Vec<String> = r.ips.iter().map(|i| i.address.to_string()).collect();
        assert_eq!(addrs, ["10.0.0.2/8", "fd00::2/64"]);
        assert_eq!(r.to_value(CniVersion::V0_1_0).unwrap(), legacy);
    }

    #[test]
    fn legacy_drops_routes_of_a_family_without_address() {
        let r = CniResult::from_value(&json!({"cniVersion": "1.0.0",
            "ips": [{"address": "10.0.0.2/24"}],
            "routes": [{"dst": "::/0"}, {"dst": "0.0.0.0/0", "gw": "10.0.0.1"}]}))
        .unwrap();
        assert_eq!(
            r.to_value(CniVersion::V0_2_0).unwrap(),
            json!({"cniVersion": "0.2.0",
                   "ip4": {"ip": "10.0.0.2/24", "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}]}})
        );
    }

    #[test]
    fn legacy_without_any_ip_is_a_clear_error() {
        let r = CniResult::from_value(&json!({"cniVersion": "1.1.0",
            "interfaces": [{"name": "eth0"}], "dns": {"nameservers": ["1.1.1.1"]}}))
        .unwrap();
        for v in [CniVersion::V0_1_0, CniVersion::V0_2_0] {
            let details = details_of(r.to_value(v), ErrorCode::IncompatibleVersion);
            assert!(
                details.starts_with("ips: cannot write this result as CNI"),
                "{details}"
            );
            assert!(details.contains("no IP address"), "{details}");
        }
        assert!(r.to_value(CniVersion::V0_3_0).is_ok());
    }

    #[test]
    fn empty_parts_are_omitted() {
        let r = CniResult::from_value(&json!({"cniVersion": "1.0.0", "interfaces": [],
            "ips": null, "routes": [], "dns": {}}))
        .unwrap();
        assert_eq!(
            r.to_value(CniVersion::V1_0_0).unwrap(),
            json!({"cniVersion": "1.0.0"})
        );
        // Go's omitempty: "" and 0 are the same as absent.
        let r = CniResult::from_value(&json!({"cniVersion": "1.1.0",
            "interfaces": [{"name": "eth0", "mac": "", "sandbox": "", "mtu": 0, "pciID": ""}],
            "ips": [{"address": "10.0.0.2/24", "gateway": ""}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "", "mtu": 0, "table": 0}],
            "dns": {"domain": "", "nameservers": []}}))
        .unwrap();
        assert_eq!(
            r.interfaces[0],
            Interface {
                name: "eth0".into(),
                ..Interface::default()
            }
        );
        assert_eq!(r.ips[0].gateway, None);
        assert_eq!((r.routes[0].mtu, r.routes[0].table), (None, Some(0)));
        assert!(r.dns.is_empty());
        assert_eq!(
            r.to_value(CniVersion::V1_1_0).unwrap(),
            json!({"cniVersion": "1.1.0", "interfaces": [{"name": "eth0"}],
                   "ips": [{"address": "10.0.0.2/24"}],
                   "routes": [{"dst": "0.0.0.0/0", "table": 0}]})
        );
    }

    #[test]
    fn keys_match_case_insensitively() {
        // Results from Go plugins may use any case.
        let r = CniResult::from_value(&json!({"cniVersion": "1.1.0",
            "Interfaces": [{"Name": "eth0", "SANDBOX": "/x", "pciId": "0000:01:00.1", "SocketPath": "/s"}],
            "IPs": [{"Address": "10.0.0.2/24", "Interface": 0, "GateWay": "10.0.0.1"}],
            "Routes": [{"Dst": "0.0.0.0/0", "GW": "10.0.0.1", "AdvMSS": 1000}],
            "DNS": {"Nameservers": ["10.0.0.1"]}}))
        .unwrap();
        assert_eq!(r.interfaces[0].sandbox.as_deref(), Some("/x"));
        assert_eq!(r.interfaces[0].pci_id.as_deref(), Some("0000:01:00.1"));
        assert_eq!(r.interfaces[0].socket_path.as_deref(), Some("/s"));
        assert_eq!(r.ips[0].interface, Some(0));
        assert_eq!(r.ips[0].gateway, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(r.routes[0].advmss, Some(1000));
        assert_eq!(r.dns.nameservers, ["10.0.0.1"]);
    }

    #[test]
    fn negative_interface_index_is_kept() {
        // multi-net-spec §5.3.3.1 speaks of "interface" values below zero.
        let v =
            json!({"cniVersion": "1.0.0", "ips": [{"interface": -1, "address": "10.0.0.2/24"}]});
        let r = CniResult::from_value(&v).unwrap();
        assert_eq!(r.ips[0].interface, Some(-1));
        assert_eq!(r.to_value(CniVersion::V1_0_0).unwrap(), v);
    }

    fn err(v: Value) -> String {
        details_of(CniResult::from_value(&v), ErrorCode::Decode)
    }

    #[test]
    fn invalid_results_name_the_field() {
        let ips = |ip: Value| json!({"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.0.0.2/24"}, ip]});
        assert!(err(ips(json!({"address": "10.0.0.3"})))
            .starts_with("ips[1].address: \"10.0.0.3\" is not an address in CIDR notation"));
        for a in [
            "10.0.0.3/33",
            "10.0.0.3/255.255.0.0",
            "10.0.0.3/+8",
            "10.0.0.3/",
            "x/8",
            "fd00::1/129",
        ] {
            assert!(
                err(ips(json!({"address": a}))).starts_with("ips[1].address: "),
                "{a}"
            );
        }
        assert_eq!(
            err(ips(json!({"gateway": "10.0.0.1"}))),
            "ips[1].address: missing"
        );
        assert_eq!(
            err(ips(json!({"address": "10.0.0.3/24", "gateway": "nope"}))),
            "ips[1].gateway: \"nope\" is not an IP address"
        );
        assert_eq!(
            err(ips(json!({"version": "6", "address": "10.0.0.3/24"}))),
            "ips[1].version: \"6\" does not match the address 10.0.0.3/24"
        );
        assert_eq!(
            err(ips(json!({"version": "5", "address": "10.0.0.3/24"}))),
            "ips[1].version: must be \"4\" or \"6\", got \"5\""
        );
        assert!(err(ips(json!({"version": 4, "address": "10.0.0.3/24"})))
            .starts_with("ips[1].version: invalid type"));
        // 1.0.0 has no `version`; a stray one is ignored.
        let v = json!({"cniVersion": "1.0.0", "ips": [{"version": "6", "address": "10.0.0.3/24"}]});
        assert!(CniResult::from_value(&v).is_ok());

        let base = |k: &str, v: Value| {
            let mut r = json!({"cniVersion": "1.1.0"});
            r[k] = v;
            r
        };
        assert!(err(base("interfaces", json!([{"name": "a", "mtu": -1}])))
            .starts_with("interfaces[0].mtu: invalid value: integer `-1`"));
        assert!(
            err(base("interfaces", json!([{"name": "a", "sandbox": 5}])))
                .starts_with("interfaces[0].sandbox: invalid type")
        );
        assert!(
            err(base("interfaces", json!({"name": "a"}))).starts_with("interfaces: invalid type")
        );
        assert_eq!(
            err(base(
                "routes",
                json!([{"dst": "0.0.0.0/0"}, {"gw": "10.0.0.1"}])
            )),
            "routes[1].dst: missing"
        );
        assert!(err(base(
            "routes",
            json!([{"dst": "0.0.0.0/0", "priority": -5}])
        ))
        .starts_with("routes[0].priority: invalid value"));
        assert!(
            err(base("routes", json!([{"dst": "0.0.0.0/0", "table": 1.5}])))
                .starts_with("routes[0].table: invalid type")
        );
        assert_eq!(
            err(base(
                "routes",
                json!([{"dst": "0.0.0.0/0", "gw": "fe80::1%eth0"}])
            )),
            "routes[0].gw: \"fe80::1%eth0\" is not an IP address"
        );
        assert!(err(base("dns", json!({"nameservers": "1.1.1.1"})))
            .starts_with("dns.nameservers: invalid type"));
        assert!(err(base(
            "ips",
            json!([{"address": "10.0.0.2/24", "interface": "0"}])
        ))
        .starts_with("ips[0].interface: invalid type"));

        let legacy = |v: Value| {
            let mut r = json!({"cniVersion": "0.2.0"});
            r.as_object_mut()
                .unwrap()
                .extend(v.as_object().unwrap().clone());
            r
        };
        assert_eq!(
            err(legacy(json!({"ip4": {"ip": "fd00::1/64"}}))),
            "ip4.ip: fd00::1/64 is not an IPv4 address"
        );
        assert_eq!(
            err(legacy(json!({"ip6": {"ip": "10.0.0.1/8"}}))),
            "ip6.ip: 10.0.0.1/8 is not an IPv6 address"
        );
        assert_eq!(
            err(legacy(json!({"ip4": {"gateway": "10.0.0.1"}}))),
            "ip4.ip: missing"
        );
        assert_eq!(
            err(legacy(json!({"ip4": {"ip": "10.0.0.2/8", "routes": [{"dst": "10.0.0.0"}]}}))),
            "ip4.routes[0].dst: \"10.0.0.0\" is not an address in CIDR notation (like \"10.1.0.5/16\")"
        );

        assert_eq!(
            err(json!({"ips": []})),
            "cniVersion: missing: a result must name its version"
        );
        assert_eq!(
            err(json!({"cniVersion": 1})),
            "cniVersion: must be a string, got 1"
        );
        assert_eq!(
            err(json!([])),
            "result: must be a JSON object, got an array"
        );
        let details = details_of(
            CniResult::from_value(&json!({"cniVersion": "2.0.0"})),
            ErrorCode::IncompatibleVersion,
        );
        assert!(details.starts_with("cniVersion: \"2.0.0\""), "{details}");
        let e = CniResult::from_value_as(&json!("x"), CniVersion::V1_0_0).unwrap_err();
        assert_eq!(e.details, "result: must be a JSON object, got \"x\"");
        // Errors compose with `within` for callers such as prevResult.
        let e = CniResult::from_value_as(&json!({"ips": [{"address": "1"}]}), CniVersion::V1_0_0)
            .unwrap_err()
            .within("prevResult");
        assert!(
            e.details.starts_with("prevResult.ips[0].address: "),
            "{}",
            e.details
        );
    }

    #[test]
    fn from_value_as_ignores_the_embedded_version() {
        // A prevResult is read in the request's version.
        let v = json!({"cniVersion": "0.2.0", "ips": [{"address": "10.0.0.2/24"}]});
        let r = CniResult::from_value_as(&v, CniVersion::V1_0_0).unwrap();
        assert_eq!(r.cni_version, Some(CniVersion::V1_0_0));
        assert_eq!(r.ips.len(), 1);
    }

    // -- property tests ------------------------------------------------------

    fn arb_v4() -> impl Strategy<Value = IpAddr> {
        any::<[u8; 4]>().prop_map(IpAddr::from)
    }

    fn arb_v6() -> impl Strategy<Value = IpAddr> {
        any::<[u16; 8]>().prop_map(IpAddr::from)
    }

    fn arb_net(v4: bool) -> BoxedStrategy<IpNetwork> {
        if v4 {
            (arb_v4(), 0u8..=32)
                .prop_map(|(a, p)| IpNetwork::new(a, p).unwrap())
                .boxed()
        } else {
            (arb_v6(), 0u8..=128)
                .prop_map(|(a, p)| IpNetwork::new(a, p).unwrap())
                .boxed()
        }
    }

    fn arb_gw(v4: bool) -> BoxedStrategy<Option<IpAddr>> {
        if v4 {
            option::of(arb_v4()).boxed()
        } else {
            option::of(arb_v6()).boxed()
        }
    }

    fn arb_ip(v4: bool, with_interface: bool) -> impl Strategy<Value = IpConfig> {
        let iface = if with_interface {
            option::of(-1i64..4).boxed()
        } else {
            Just(None).boxed()
        };
        (arb_net(v4), arb_gw(v4), iface).prop_map(|(address, gateway, interface)| IpConfig {
            address,
            gateway,
            interface,
        })
    }

    fn arb_route(v4: bool, extras: bool) -> impl Strategy<Value = Route> {
        let extra = if extras {
            (
                option::of(0u32..10_000),
                option::of(0u32..10_000),
                option::of(0u32..100),
                option::of(any::<u32>()),
                option::of(0u32..=255),
            )
                .boxed()
        } else {
            Just((None, None, None, None, None)).boxed()
        };
        (arb_net(v4), arb_gw(v4), extra).prop_map(
            |(dst, gw, (mtu, advmss, priority, table, scope))| Route {
                dst,
                gw,
                mtu,
                advmss,
                priority,
                table,
                scope,
            },
        )
    }

    fn arb_interface() -> impl Strategy<Value = Interface> {
        (
            "[a-z][a-z0-9]{0,7}",
            option::of("[0-9a-f]{2}(:[0-9a-f]{2}){5}"),
            option::of(0u32..9000),
            option::of("(/[a-z]{1,6}){0,3}"),
            option::of("(/[a-z]{1,6}){0,2}"),
            option::of("[0-9]{4}:[0-9]{2}:[0-9]{2}\\.[0-7]"),
        )
            .prop_map(|(name, mac, mtu, sandbox, socket_path, pci_id)| Interface {
                name,
                mac,
                mtu,
                sandbox,
                socket_path,
                pci_id,
            })
    }

    fn arb_dns() -> impl Strategy<Value = Dns> {
        (
            vec("[0-9a-f.:]{1,15}", 0..3),
            option::of("[a-z.]{0,10}"),
            vec("[a-z.]{1,10}", 0..3),
            vec("[a-z:0-9]{1,8}", 0..3),
        )
            .prop_map(|(nameservers, domain, search, options)| Dns {
                nameservers,
                domain,
                search,
                options,
            })
    }

    fn arb_result() -> impl Strategy<Value = CniResult> {
        (
            vec(arb_interface(), 0..4),
            vec(prop_oneof![arb_ip(true, true), arb_ip(false, true)], 0..4),
            vec(
                prop_oneof![arb_route(true, true), arb_route(false, true)],
                0..4,
            ),
            arb_dns(),
        )
            .prop_map(|(interfaces, ips, routes, dns)| CniResult {
                cni_version: None,
                interfaces,
                ips,
                routes,
                dns,
            })
    }

    /// At most one address per family, no interfaces, no 1.1.0 extras, and
    /// routes only for a family that has an address, IPv4 first: what 0.2.0
    /// can hold.
    fn arb_legacy_compatible() -> impl Strategy<Value = CniResult> {
        (
            option::of(arb_ip(true, false)),
            option::of(arb_ip(false, false)),
            vec(arb_route(true, false), 0..3),
            vec(arb_route(false, false), 0..3),
            arb_dns(),
        )
            .prop_filter("0.2.0 needs an address", |(a, b, ..)| {
                a.is_some() || b.is_some()
            })
            .prop_map(|(ip4, ip6, r4, r6, dns)| {
                let mut routes = Vec::new();
                if ip4.is_some() {
                    routes.extend(r4);
                }
                if ip6.is_some() {
                    routes.extend(r6);
                }
                CniResult {
                    cni_version: None,
                    interfaces: Vec::new(),
                    ips: ip4.into_iter().chain(ip6).collect(),
                    routes,
                    dns,
                }
            })
    }

    fn strip_1_1_extras(mut r: CniResult) -> CniResult {
        for i in &mut r.interfaces {
            i.mtu = None;
            i.socket_path = None;
            i.pci_id = None;
        }
        for rt in &mut r.routes {
            (rt.mtu, rt.advmss, rt.priority, rt.table, rt.scope) = (None, None, None, None, None);
        }
        r
    }

    proptest! {
        #[test]
        fn print_parse_print_is_stable_for_every_version(r in arb_result()) {
            for version in CniVersion::ALL {
                match r.to_value(version) {
                    Ok(out) => {
                        let back = CniResult::from_value(&out).unwrap();
                        let again = back.to_value(version).unwrap();
                        // Same text, so the same key order too.
                        prop_assert_eq!(out.to_string(), again.to_string());
                    }
                    Err(e) => {
                        prop_assert!(version.has_legacy_result() && r.ips.is_empty(), "{}", e);
                    }
                }
            }
        }

        #[test]
        fn legacy_compatible_results_survive_0_2_0(r in arb_legacy_compatible()) {
            let legacy = r.to_value(CniVersion::V0_2_0).unwrap();
            let back = CniResult::from_value(&legacy).unwrap();
            prop_assert_eq!(back.to_value(CniVersion::LATEST).unwrap(), r.to_value(CniVersion::LATEST).unwrap());
            prop_assert_eq!(back.ips, r.ips);
            prop_assert_eq!(back.routes, r.routes);
        }

        #[test]
        fn via_0_4_0_loses_exactly_the_1_1_extras(r in arb_result()) {
            let down = r.to_value(CniVersion::V0_4_0).unwrap();
            let back = CniResult::from_value(&down).unwrap();
            prop_assert_eq!(
                back.to_value(CniVersion::V1_1_0).unwrap(),
                strip_1_1_extras(r).to_value(CniVersion::V1_1_0).unwrap()
            );
        }
    }
}
