//! The Network Attachment Status Annotation, `k8s.v1.cni.cncf.io/network-status`
//! (multi-net-spec §5): building an entry from a CNI result (§5.1.1, §5.3.x),
//! and reading and writing the annotation.
//!
//! Reading is lenient about values (addresses are not checked, unknown keys
//! are kept in [`NetworkStatus::extra`]) because entries written by other
//! implementations must survive a read-modify-write; only the types of the
//! keys of §5.3 are checked. Keys match case-insensitively, as when Go clients
//! decode the annotation.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::deviceinfo::DeviceInfo;
use super::error::SpecError;
use super::go_json::{
    as_array, as_object, decode_failure, spell_first_key, GoBool, GoMap, GoStr, GoStrs, GoStruct,
    GoU32,
};
use crate::cni::casefold;
use crate::cni::error::CniError;
use crate::cni::names::IfName;
use crate::cni::result::{CniResult, IpConfig};

pub const NETWORK_STATUS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/network-status";

/// One entry of the status list (§5.3), read and written through its serde
/// form: keys in the order of §5.3 (name, interface, ips, mac, mtu, default,
/// dns, default-route, device-info), empty ones omitted except `default`,
/// then the extra keys. Read it with [`NetworkStatus::from_value`], which
/// matches the keys of §5.3 as Go does.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NetworkStatus {
    /// `namespace/name` of the NAD, or the default network's name (§5.3.1).
    pub name: GoStr,
    pub interface: Option<GoStr>,
    /// Addresses with prefix length, as in the §5.4 example (`192.0.2.2/24`).
    #[serde(default, skip_serializing_if = "GoStrs::is_empty")]
    pub ips: GoStrs,
    pub mac: Option<GoStr>,
    pub mtu: Option<GoU32>,
    /// §5.3.6: always written.
    #[serde(default)]
    pub default: GoBool,
    #[serde(default)]
    pub dns: Option<StatusDns>,
    /// §5.3.7.4 `default-route`: gateways.
    #[serde(default, skip_serializing_if = "GoStrs::is_empty")]
    pub default_route: GoStrs,
    /// §5.3.8 `device-info` (see [`super::deviceinfo`]), kept as written.
    pub device_info: Option<GoMap>,
    /// Other keys (extension keys, or keys of other implementations), as
    /// [`NetworkStatus::from_value`] read them; one spelled like a key of
    /// §5.3 is not written, so it cannot shadow it.
    #[serde(flatten, skip_deserializing, serialize_with = "unshadowing")]
    pub extra: Map<String, Value>,
}

/// §5.3.7 `dns`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StatusDns {
    #[serde(default, skip_serializing_if = "GoStrs::is_empty")]
    pub nameservers: GoStrs,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<GoStr>,
    #[serde(default, skip_serializing_if = "GoStrs::is_empty")]
    pub search: GoStrs,
}

/// The extra keys that are not keys of §5.3.
fn unshadowing<S: serde::Serializer>(
    extra: &Map<String, Value>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(extra.iter().filter(|(k, _)| !KEYS.contains(&k.as_str())))
}

impl StatusDns {
    fn is_empty(&self) -> bool {
        self.nameservers.is_empty() && self.domain.is_none() && self.search.is_empty()
    }
}

/// What [`NetworkStatus::from_result`] needs besides the CNI result.
#[derive(Debug, Clone, Default)]
pub struct StatusInput<'a> {
    /// `ns/name`, or the cluster-wide default network's name.
    pub network: &'a str,
    /// The CNI_IFNAME used; the interface name for results older than 0.3.0
    /// and for attachments that returned no result.
    pub ifname: Option<&'a IfName>,
    /// This is the cluster-wide default network's entry (§5.2).
    pub default: bool,
    /// The `default-route` key of the selection element, when it had one
    /// (§4.1.2.1.9, §5.3.7.4).
    pub gateway_request: Option<&'a [IpAddr]>,
    /// Device information collected for the attachment (§5.3.8: the map
    /// "must contain the keys described in the Device Information
    /// Specification", so only a validated one can be given).
    pub device_info: Option<DeviceInfo>,
}

/// The keys of §5.3, in output order.
const KEYS: [&str; 9] = [
    "name",
    "interface",
    "ips",
    "mac",
    "mtu",
    "default",
    "dns",
    "default-route",
    "device-info",
];

impl NetworkStatus {
    /// The status entry for one attachment (§5.1.1). `result` is `None` when
    /// the ADD returned nothing, which CNI allows; the entry is then the
    /// minimal map (name, interface, default).
    pub fn from_result(result: Option<&CniResult>, input: &StatusInput) -> NetworkStatus {
        let mut s = NetworkStatus {
            name: input.network.into(),
            default: input.default.into(),
            device_info: input
                .device_info
                .as_ref()
                .map(|d| GoMap::object(d.to_value())),
            ..Default::default()
        };
        let Some(r) = result else {
            s.interface = input.ifname.map(|n| GoStr::from(n.as_str()));
            return s;
        };
        let legacy = r.cni_version.is_some_and(|v| v.has_legacy_result());
        let ips: Vec<&IpConfig> = if legacy {
            // §5.3.2.1, §5.3.3.1: before 0.3.0 there are no interfaces; the
            // addresses are ip4 and ip6 together.
            s.interface = input.ifname.map(|n| GoStr::from(n.as_str()));
            r.ips.iter().collect()
        } else if let Some((idx, iface)) = r
            .interfaces
            .iter()
            .enumerate()
            .find(|(_, i)| i.in_sandbox())
        {
            // §5.3.2.1, §5.3.4.1: the first interface with a sandbox;
            // §5.3.3.1 rule 1: the addresses on it. A plugin that left its
            // name empty used CNI_IFNAME.
            s.interface = Some(iface.name.as_str())
                .filter(|n| !n.is_empty())
                .or(input.ifname.map(IfName::as_str))
                .map(GoStr::from);
            s.mac = iface
                .mac
                .as_deref()
                .filter(|m| !m.is_empty())
                .map(GoStr::from);
            s.mtu = iface.mtu.filter(|m| *m > 0).map(GoU32);
            r.ips
                .iter()
                .filter(|ip| ip.interface == Some(idx as i64))
                .collect()
        } else {
            // §5.3.3.1 rule 2: no sandbox interface; the addresses that
            // name no interface.
            r.ips
                .iter()
                .filter(|ip| ip.interface.is_none_or(|i| i < 0))
                .collect()
        };
        // §5.3.3 asks for "addresses"; its examples show prefixes, Multus
        // (the NAD client's `CreateNetworkStatuses`) writes bare addresses,
        // and that is what consumers parse (README "network-status ips").
        s.ips = ips.iter().map(|ip| ip.address.ip().to_string()).collect();

        let dns = StatusDns {
            nameservers: r.dns.nameservers.clone().into(),
            domain: r
                .dns
                .domain
                .as_deref()
                .filter(|d| !d.is_empty())
                .map(GoStr::from),
            search: r.dns.search.clone().into(),
        };
        s.dns = Some(dns).filter(|d| !d.is_empty());

        // §5.3.7.4: only "if the attachment had a "default-route" key in the
        // Network Attachment Selection Annotation": its gateways, or with
        // `[]` the gateways its own result kept.
        s.default_route = match input.gateway_request {
            Some([]) => default_gateways(r, &ips).into(),
            Some(gws) => gws.iter().map(IpAddr::to_string).collect(),
            None => GoStrs::default(),
        };
        // §5.3.4: "If the mac key is present, interface must also be present."
        if s.interface.is_none() {
            s.mac = None;
        }
        s
    }

    /// The entry as JSON (its serde form).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a network-status entry serializes")
    }

    /// Read one entry. Errors name the key (`mtu: must be ...`).
    pub fn from_value(v: &Value) -> Result<NetworkStatus, SpecError> {
        const WHAT: &str = "network-status entry";
        as_object(v).map_err(|r| SpecError::decode(WHAT, r))?;
        let GoStruct { known, other } = casefold::from_value_at::<GoStruct<NetworkStatus>>(v)
            .map_err(|e| {
                let (at, reason) = decode_failure(e, v, WHAT);
                SpecError::from(CniError::decode(
                    spell_first_key::<NetworkStatus>(&at),
                    reason,
                ))
            })?;
        Ok(NetworkStatus {
            extra: other,
            ..known
        })
    }
}

/// §5.3.7.4 without a `default-route` request: the gateways of the result's
/// default routes. A default route without `gw` goes through the gateway of
/// an address of its family on the attachment's interface (`ips`).
fn default_gateways(r: &CniResult, ips: &[&IpConfig]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for route in r.routes.iter().filter(|r| r.is_default()) {
        let v4 = route.dst.is_ipv4();
        let gw = route.gw.filter(|g| g.is_ipv4() == v4).or_else(|| {
            ips.iter()
                .filter_map(|ip| ip.gateway)
                .find(|g| g.is_ipv4() == v4)
        });
        if let Some(gw) = gw.map(|g| g.to_string()) {
            if !out.contains(&gw) {
                out.push(gw);
            }
        }
    }
    out
}

/// Parse the annotation's value: a JSON list of entries. Blank means none.
pub fn parse_status_annotation(s: &str) -> Result<Vec<NetworkStatus>, SpecError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(Vec::new());
    }
    let v: Value = serde_json::from_str(s)
        .map_err(|e| SpecError::decode(NETWORK_STATUS_ANNOTATION, format!("invalid JSON: {e}")))?;
    let list = as_array(&v).map_err(|r| SpecError::decode(NETWORK_STATUS_ANNOTATION, r))?;
    list.iter()
        .enumerate()
        .map(|(i, item)| {
            let path = format!("{NETWORK_STATUS_ANNOTATION}[{i}]");
            as_object(item).map_err(|r| SpecError::decode(&path, r))?;
            NetworkStatus::from_value(item).map_err(|e| e.within(&path))
        })
        .collect()
}

/// The annotation's value for `entries`: a JSON list, indented like Multus
/// writes it.
pub fn status_annotation_value(entries: &[NetworkStatus]) -> String {
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    entries
        .serialize(&mut ser)
        .expect("network-status entries serialize");
    String::from_utf8(buf).expect("serde_json writes UTF-8")
}

/// The list-wide rules: at most one entry has `default` (§5.3.6); `mac`
/// requires `interface` (§5.3.4); `name` is required (§5.3.1).
pub fn validate_entries(entries: &[NetworkStatus]) -> Result<(), String> {
    let mut default_at: Option<usize> = None;
    for (i, e) in entries.iter().enumerate() {
        if e.name.is_empty() {
            return Err(format!("[{i}].name: required (multi-net-spec §5.3.1)"));
        }
        if e.mac.is_some() && e.interface.as_deref().is_none_or(str::is_empty) {
            return Err(format!(
                "[{i}].mac: requires \"interface\" to be present (multi-net-spec §5.3.4)"
            ));
        }
        if *e.default {
            if let Some(first) = default_at {
                return Err(format!(
                    "[{i}].default: only one entry may be the default network, and [{first}] \
                     already is (multi-net-spec §5.3.6)"
                ));
            }
            default_at = Some(i);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::result::{Dns, Interface, Route};
    use crate::cni::version::CniVersion;
    use serde_json::json;

    // multi-net-spec §5.4 "With a single gateway", as printed (the page
    // break in the middle of the first entry removed).
    const EXAMPLE_SINGLE_GATEWAY: &str = include_str!("testdata/section-5-4-single-gateway.json");

    // §5.4 "With multiple gateways". As printed the list is closed after the
    // second entry and the infiniband entry follows after a page break; this
    // is the evident intent: the three entries in one list.
    const EXAMPLE_MULTIPLE_GATEWAYS: &str =
        include_str!("testdata/section-5-4-multiple-gateways.json");

    // §5.4 "With device information". As printed, the list is closed after
    // the third entry and continues after a page break with duplicated
    // closing brackets; joined here. The " 64:1f:..." MACs with a leading
    // space and the misspelt "device" key are as printed.
    const EXAMPLE_DEVICE_INFO: &str = include_str!("testdata/section-5-4-device-info.json");

    /// The example's entries with `"default": false` added where it is
    /// missing: §5.3.6 makes the key required and plexus always writes it,
    /// while some of the §5.4 entries omit it.
    fn with_default_key(text: &str) -> Value {
        let mut v: Value = serde_json::from_str(text).unwrap();
        for e in v.as_array_mut().unwrap() {
            let m = e.as_object_mut().unwrap();
            if !m.contains_key("default") {
                m.insert("default".into(), json!(false));
            }
        }
        v
    }

    fn round_trip(text: &str) -> Vec<NetworkStatus> {
        let entries = parse_status_annotation(text).unwrap();
        let written = status_annotation_value(&entries);
        let rewritten: Value = serde_json::from_str(&written).unwrap();
        assert_eq!(rewritten, with_default_key(text));
        // Reading what we wrote gives the same entries.
        assert_eq!(parse_status_annotation(&written).unwrap(), entries);
        validate_entries(&entries).unwrap();
        entries
    }

    #[test]
    fn example_5_4_single_gateway_round_trips() {
        let e = round_trip(EXAMPLE_SINGLE_GATEWAY);
        assert_eq!(e.len(), 3);
        assert!(*e[0].default);
        assert_eq!(e[0].mtu, Some(GoU32(1500)));
        assert_eq!(e[0].default_route, vec!["192.0.2.1"]);
        assert_eq!(
            e[1].dns,
            Some(StatusDns {
                nameservers: GoStrs(vec!["192.0.2.1".into(), "2001:db8:4860::8888".into()]),
                domain: None,
                search: GoStrs(vec!["eng.example.com".into(), "example.com".into()]),
            })
        );
        assert_eq!(
            e[2].extra.get("infiniband-guid"),
            Some(&json!(
                "80:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22"
            ))
        );
    }

    #[test]
    fn example_5_4_multiple_gateways_round_trips() {
        let e = round_trip(EXAMPLE_MULTIPLE_GATEWAYS);
        assert_eq!(
            e[0].default_route,
            vec!["192.0.2.1", "2001:db8::1", "2001:db8::2"]
        );
        assert_eq!(e[0].mtu, None);
    }

    #[test]
    fn example_5_4_device_info_round_trips() {
        let e = round_trip(EXAMPLE_DEVICE_INFO);
        assert_eq!(e.len(), 5);
        assert!(e.iter().all(|s| !*s.default));
        assert_eq!(
            e[1].device_info.as_ref().unwrap()["pci"]["pci-address"],
            "0000:18:02.5"
        );
        assert_eq!(e[3].mac.as_deref(), Some(" 64:1f:74:32:2e:6d"));
        assert_eq!(e[3].device_info, None);
        assert_eq!(e[3].extra.get("device").unwrap()["type"], "vhost-user");
        assert_eq!(
            e[4].device_info.as_ref().unwrap()["vdpa"]["device"],
            "vdpa2"
        );
    }

    fn net(s: &str) -> ipnetwork::IpNetwork {
        s.parse().unwrap()
    }

    fn ip(addr: &str, gw: Option<&str>, iface: Option<i64>) -> IpConfig {
        IpConfig {
            address: net(addr),
            gateway: gw.map(|g| g.parse().unwrap()),
            interface: iface,
        }
    }

    fn route(dst: &str, gw: Option<&str>) -> Route {
        Route::to(net(dst), gw.map(|g| g.parse().unwrap()))
    }

    fn iface(name: &str, mac: &str, sandbox: Option<&str>) -> Interface {
        Interface {
            name: name.into(),
            mac: Some(mac.into()),
            sandbox: sandbox.map(str::to_string),
            ..Default::default()
        }
    }

    /// A result of `version` with `interfaces` and `ips`, nothing else.
    fn result(version: CniVersion, interfaces: Vec<Interface>, ips: Vec<IpConfig>) -> CniResult {
        CniResult {
            cni_version: Some(version),
            interfaces,
            ips,
            ..Default::default()
        }
    }

    /// `result`'s entry for `network`, attached as `ifname` when given;
    /// `more` sets the rest of its [`StatusInput`].
    fn entry(
        result: Option<&CniResult>,
        network: &str,
        ifname: Option<&str>,
        more: StatusInput<'_>,
    ) -> NetworkStatus {
        let ifname = ifname.map(|name| IfName::new(name).unwrap());
        NetworkStatus::from_result(
            result,
            &StatusInput {
                network,
                ifname: ifname.as_ref(),
                ..more
            },
        )
    }

    /// The rest of the input of an attachment whose selection had
    /// `"default-route": []`, which keeps the result's own gateway
    /// (§5.3.7.4); `default` for the cluster-wide default network's.
    fn own_gateway(default: bool) -> StatusInput<'static> {
        StatusInput {
            default,
            gateway_request: Some(&[]),
            ..Default::default()
        }
    }

    #[test]
    fn from_results_yields_the_5_4_first_example() {
        let default_net = CniResult {
            routes: vec![
                route("0.0.0.0/0", Some("192.0.2.1")),
                route("10.0.0.0/8", Some("192.0.2.9")),
            ],
            ..result(
                CniVersion::V1_0_0,
                vec![
                    iface("veth1a2b", "0a:00:00:00:00:01", None),
                    Interface {
                        mtu: Some(1500),
                        ..iface("eth5", "02:11:22:33:44:54", Some("/var/run/netns/p"))
                    },
                ],
                vec![
                    ip("192.0.2.2/24", Some("192.0.2.1"), Some(1)),
                    ip("2001:db8::2230/32", None, Some(1)),
                ],
            )
        };
        let some_network = CniResult {
            routes: vec![],
            dns: Dns {
                nameservers: vec!["192.0.2.1".into(), "2001:db8:4860::8888".into()],
                search: vec!["eng.example.com".into(), "example.com".into()],
                options: vec!["ndots:2".into()],
                ..Default::default()
            },
            ..result(
                CniVersion::V1_1_0,
                vec![iface("eth1", "02:11:22:33:44:55", Some("/var/run/netns/p"))],
                vec![
                    ip("192.0.2.2/24", None, Some(0)),
                    ip("2001:db8::2234/32", None, Some(0)),
                ],
            )
        };
        let ib = result(
            CniVersion::V0_4_0,
            vec![Interface {
                name: "ib0".into(),
                sandbox: Some("/var/run/netns/p".into()),
                ..Default::default()
            }],
            vec![ip("198.51.100.1/24", None, Some(0))],
        );
        let mut entries = vec![
            entry(
                Some(&default_net),
                "namespace-a/cluster-wide-default",
                Some("eth5"),
                // The example's entry has "default-route": as if its
                // selection had `"default-route": []` (§5.3.7.4).
                own_gateway(true),
            ),
            entry(
                Some(&some_network),
                "namespace-b/some-network",
                Some("eth1"),
                StatusInput::default(),
            ),
            entry(
                Some(&ib),
                "namespace-a/an-ip-over-infiniband-network",
                Some("ib0"),
                StatusInput::default(),
            ),
        ];
        // "infiniband-guid" is not a §5.3 key: a CNI result cannot yield it,
        // so whoever knows it adds it as an extra key.
        entries[2].extra.insert(
            "infiniband-guid".into(),
            json!("80:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22"),
        );
        // The example's addresses carry prefixes; plexus writes them bare,
        // as Multus does (README "network-status ips"). Both read back.
        let mut example = parse_status_annotation(EXAMPLE_SINGLE_GATEWAY).unwrap();
        for e in &mut example {
            for ip in &mut e.ips {
                ip.truncate(ip.find('/').unwrap_or(ip.len()));
            }
        }
        assert_eq!(entries, example);
        let written = status_annotation_value(&entries);
        assert_eq!(parse_status_annotation(&written).unwrap(), example);
    }

    #[test]
    fn cni_spec_appendix_shape_host_interfaces_first() {
        // cni-SPEC.md appendix: bridge result with cni0 and the veth on the
        // host, eth0 in the sandbox, the address on interface 2, and a default
        // route without "gw".
        let r = CniResult {
            routes: vec![route("0.0.0.0/0", None)],
            dns: Dns {
                nameservers: vec!["10.1.0.1".into()],
                ..Default::default()
            },
            ..result(
                CniVersion::V1_1_0,
                vec![
                    iface("cni0", "00:11:22:33:44:55", None),
                    iface("veth3243", "55:44:33:22:11:11", Some("")),
                    iface("eth0", "99:88:77:66:55:44", Some("/var/run/netns/blue")),
                ],
                vec![ip("10.1.0.5/16", Some("10.1.0.1"), Some(2))],
            )
        };
        let s = entry(Some(&r), "dbnet", Some("eth0"), own_gateway(true));
        assert_eq!(
            s.to_value(),
            json!({
                "name": "dbnet", "interface": "eth0", "ips": ["10.1.0.5"],
                "mac": "99:88:77:66:55:44", "default": true,
                "dns": {"nameservers": ["10.1.0.1"]}, "default-route": ["10.1.0.1"]
            })
        );
        // Key order as documented.
        let keys: Vec<String> = s.to_value().as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            [
                "name",
                "interface",
                "ips",
                "mac",
                "default",
                "dns",
                "default-route"
            ]
        );
    }

    #[test]
    fn legacy_0_2_0_result_uses_ip4_ip6_and_cni_ifname() {
        let r = CniResult {
            routes: vec![route("0.0.0.0/0", None), route("::/0", None)],
            dns: Dns {
                domain: Some("example.com".into()),
                ..Default::default()
            },
            ..result(
                CniVersion::V0_2_0,
                vec![],
                vec![
                    ip("10.1.0.5/16", Some("10.1.0.1"), None),
                    ip("2001:db8::5/64", Some("2001:db8::1"), None),
                ],
            )
        };
        let s = entry(Some(&r), "ns/old", Some("net1"), own_gateway(false));
        assert_eq!(
            s.to_value(),
            json!({
                "name": "ns/old", "interface": "net1", "ips": ["10.1.0.5", "2001:db8::5"],
                "default": false, "dns": {"domain": "example.com"},
                "default-route": ["10.1.0.1", "2001:db8::1"]
            })
        );
    }

    #[test]
    fn no_sandbox_interface_uses_rule_2() {
        let r = result(
            CniVersion::V0_3_1,
            vec![iface("vethhost", "0a:00:00:00:00:02", None)],
            vec![
                ip("10.0.0.2/24", None, Some(0)),
                ip("10.0.0.3/24", None, None),
                ip("10.0.0.4/24", None, Some(-1)),
            ],
        );
        let s = entry(Some(&r), "ns/n", Some("net1"), StatusInput::default());
        assert_eq!(s.interface, None);
        assert_eq!(s.mac, None);
        assert_eq!(s.ips, vec!["10.0.0.3", "10.0.0.4"]);
        assert_eq!(
            s.to_value(),
            json!({"name": "ns/n", "ips": ["10.0.0.3", "10.0.0.4"], "default": false})
        );
        // No interfaces at all: rule 2 as well.
        let r = result(
            CniVersion::V1_0_0,
            vec![],
            vec![ip("10.0.0.3/24", None, None)],
        );
        let s = entry(Some(&r), "n", None, StatusInput::default());
        assert_eq!(s.ips, vec!["10.0.0.3"]);
    }

    #[test]
    fn sandbox_interface_without_addresses_has_no_ips() {
        // §5.3.3.1: rule 2 applies only when no interface has a sandbox.
        let r = result(
            CniVersion::V1_0_0,
            vec![iface("net1", "02:00:00:00:00:01", Some("/p"))],
            vec![ip("10.0.0.3/24", None, None)],
        );
        let s = entry(Some(&r), "n", None, StatusInput::default());
        assert_eq!(s.interface.as_deref(), Some("net1"));
        assert!(s.ips.is_empty());
    }

    #[test]
    fn no_result_gives_the_minimal_map() {
        let s = entry(None, "ns/thick", Some("net2"), StatusInput::default());
        assert_eq!(
            s.to_value(),
            json!({"name": "ns/thick", "interface": "net2", "default": false})
        );
    }

    #[test]
    fn gateway_request_and_device_info() {
        let r = CniResult {
            routes: vec![route("0.0.0.0/0", Some("10.0.0.254"))],
            ..result(
                CniVersion::V1_0_0,
                vec![iface("net1", "02:00:00:00:00:01", Some("/p"))],
                vec![ip("10.0.0.3/24", Some("10.0.0.254"), Some(0))],
            )
        };
        let gws: Vec<IpAddr> = vec!["10.0.0.1".parse().unwrap()];
        let dev =
            json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:18:02.5"}});
        let s = entry(
            Some(&r),
            "ns/b",
            None,
            StatusInput {
                gateway_request: Some(&gws),
                device_info: Some(DeviceInfo::from_value(&dev).unwrap()),
                ..Default::default()
            },
        );
        assert_eq!(s.default_route, vec!["10.0.0.1"]);
        assert_eq!(s.to_value()["device-info"], dev);
        // §5.3.7.4: an empty request keeps the attachment's own gateway,
        // which the entry then reports.
        let with = |gateway_request| {
            entry(
                Some(&r),
                "ns/b",
                None,
                StatusInput {
                    gateway_request,
                    ..Default::default()
                },
            )
            .to_value()
        };
        assert_eq!(with(Some(&[]))["default-route"], json!(["10.0.0.254"]));
        // Without the key in the selection, no default-route, though the
        // result has a default gateway.
        assert!(with(None).get("default-route").is_none());
    }

    #[test]
    fn from_value_keys_fold_and_types_are_checked() {
        let s = NetworkStatus::from_value(
            &json!({"Name": "n", "IPs": ["x"], "Default": true, "org.x.y": 1}),
        )
        .unwrap();
        assert_eq!(s.name, "n");
        assert_eq!(s.ips, vec!["x"]);
        assert!(*s.default);
        assert_eq!(s.extra.get("org.x.y"), Some(&json!(1)));

        let err = |v: Value| NetworkStatus::from_value(&v).unwrap_err().to_string();
        assert_eq!(err(json!({})), "name: required");
        assert_eq!(err(json!({"name": 1})), "name: must be a string, got 1");
        // Each key's type checked, beside a valid name.
        for (key, value, want) in [
            ("mtu", json!(-1), "mtu: must be an unsigned integer, got -1"),
            (
                "ips",
                json!("1.2.3.4"),
                "ips: must be a list, got \"1.2.3.4\"",
            ),
            (
                "default",
                json!("true"),
                "default: must be a boolean, got \"true\"",
            ),
            (
                "dns",
                json!({"search": "a"}),
                "dns.search: must be a list, got \"a\"",
            ),
            (
                "default-route",
                json!([1]),
                "default-route[0]: must be a string, got 1",
            ),
            (
                "device-info",
                json!("pci"),
                "device-info: must be an object, got \"pci\"",
            ),
        ] {
            let mut v = json!({"name": "n"});
            v[key] = value;
            assert_eq!(err(v), want, "{key}");
        }
    }

    #[test]
    fn parse_annotation_errors() {
        assert_eq!(parse_status_annotation("  ").unwrap(), vec![]);
        let e = parse_status_annotation("[{").unwrap_err();
        assert!(
            matches!(&e, SpecError::Decode { what, reason }
                if what == NETWORK_STATUS_ANNOTATION && reason.starts_with("invalid JSON")),
            "{e:?}"
        );
        assert_eq!(
            parse_status_annotation("{}").unwrap_err().to_string(),
            "k8s.v1.cni.cncf.io/network-status: must be a list, got {}"
        );
        assert_eq!(
            parse_status_annotation("[{\"name\": \"a\"}, 5]")
                .unwrap_err()
                .to_string(),
            "k8s.v1.cni.cncf.io/network-status[1]: must be an object, got 5"
        );
        assert_eq!(
            parse_status_annotation("[{\"name\": \"a\", \"mtu\": \"x\"}]")
                .unwrap_err()
                .to_string(),
            "k8s.v1.cni.cncf.io/network-status[0].mtu: must be an unsigned integer, got \"x\""
        );
    }

    #[test]
    fn one_serde_type_reads_what_it_writes() {
        // Every key of §5.3 and an extra one, written and read back.
        let s = NetworkStatus {
            name: "ns/a".into(),
            interface: Some("net1".into()),
            ips: GoStrs(vec!["10.0.0.2".into(), "fd00::2".into()]),
            mac: Some("02:00:00:00:00:01".into()),
            mtu: Some(GoU32(9000)),
            default: GoBool(false),
            dns: Some(StatusDns {
                nameservers: GoStrs(vec!["10.0.0.53".into()]),
                domain: Some("example".into()),
                search: GoStrs(vec!["a.example".into()]),
            }),
            default_route: GoStrs(vec!["10.0.0.1".into()]),
            device_info: Some(GoMap::object(json!({"type": "pci", "version": "1.1.0",
                                     "pci": {"pci-address": "0000:01:00.1"}}))),
            extra: [("org.x.y".to_string(), json!({"k": [1]}))]
                .into_iter()
                .collect(),
        };
        assert_eq!(NetworkStatus::from_value(&s.to_value()).unwrap(), s);
        // Go's matching: folded keys, the last of several wins, null is
        // absent, nested keys fold too; others are kept as extra keys.
        let read = NetworkStatus::from_value(&json!({
            "NAME": "x", "name": "ns/a", "MTU": null, "Dns": {"NameServers": ["1.1.1.1"]},
            "Default": true, "vendor": "v"}))
        .unwrap();
        assert_eq!(
            (read.name.as_str(), read.mtu, *read.default),
            ("ns/a", None, true)
        );
        assert_eq!(read.dns.unwrap().nameservers, vec!["1.1.1.1"]);
        assert_eq!(
            read.extra,
            json!({"vendor": "v"}).as_object().unwrap().clone()
        );
    }

    #[test]
    fn validate_entries_rules() {
        let ok = |name: &str, default: bool| NetworkStatus {
            name: name.into(),
            default: default.into(),
            ..Default::default()
        };
        assert_eq!(validate_entries(&[ok("a", true), ok("b", false)]), Ok(()));
        assert_eq!(
            validate_entries(&[ok("a", true), ok("b", false), ok("c", true)]),
            Err(
                "[2].default: only one entry may be the default network, and [0] already is \
                 (multi-net-spec §5.3.6)"
                    .into()
            )
        );
        let mac_only = NetworkStatus {
            mac: Some("02:00:00:00:00:01".into()),
            ..ok("a", false)
        };
        assert_eq!(
            validate_entries(&[mac_only]),
            Err("[0].mac: requires \"interface\" to be present (multi-net-spec §5.3.4)".into())
        );
        assert_eq!(
            validate_entries(&[ok("", false)]),
            Err("[0].name: required (multi-net-spec §5.3.1)".into())
        );
    }

    #[test]
    fn written_value_is_indented_and_extra_cannot_shadow_known_keys() {
        let mut s = NetworkStatus {
            name: "a".into(),
            ..Default::default()
        };
        s.extra.insert("default".into(), json!(true));
        s.extra.insert("org.example.k".into(), json!("v"));
        let text = status_annotation_value(&[s]);
        assert!(
            text.starts_with("[\n    {\n        \"name\": \"a\""),
            "{text}"
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            json!([{"name": "a", "default": false, "org.example.k": "v"}])
        );
    }
}
