//! The Network Attachment Selection Annotation, `k8s.v1.cni.cncf.io/networks`
//! (multi-net-spec §4): the comma-delimited format (§4.1.1) and the JSON list
//! format (§4.1.2) with every key of §4.1.2.1 validated.
//!
//! Multus decodes the JSON format with Go's encoding/json, so object keys
//! match case-insensitively here too (an exact match wins; see
//! [`crate::cni::casefold`]), and `null` counts as an absent key.

use std::fmt;
use std::net::IpAddr;

use serde::{de, Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use super::go_json::{
    decode_failure, describe, is_hex_octets, parse_ip_with_prefix, spell_first_key, GoList, GoMap,
    GoPort, GoPositive, GoStr, GoStrs, GoStruct,
};
use super::names::{check_dns1123_label, check_nad_name, nad_name_warning, NetworkRef};
use crate::cni::casefold;
use crate::cni::error::prefix_path;
use crate::cni::names::IfName;

pub const NETWORKS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";

/// Multus's per-pod override of the cluster-wide default network.
pub const DEFAULT_NETWORK_ANNOTATION: &str = "v1.multus-cni.io/default-network";

/// The burst, in bits, put into runtimeConfig `bandwidth` when a rate comes
/// without one (§4.1.2.1.8.2 leaves the default to the implementation). The
/// CNI reference bandwidth plugin refuses a rate without a burst, so one is
/// needed; kubelet's CNI driver used math.MaxInt32 for the same purpose, so
/// the value that pods were shaped with under kubelet stays the same.
pub const DEFAULT_BURST_BITS: u64 = 2_147_483_647;

/// One requested attachment (§4.1.2.1), read and written through its serde
/// form: the keys of §4.1.2.1 in spec order, unset ones omitted, then the
/// extension keys as written. `namespace: None` means the pod's namespace.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct NetworkSelectionElement {
    pub name: GoStr,
    pub namespace: Option<GoStr>,
    pub ips: Option<GoStrs>,
    pub mac: Option<GoStr>,
    /// Checked as read (§4.1.2.1.5), as a pod's interface.
    #[serde(default, deserialize_with = "pod_interface")]
    pub interface: Option<IfName>,
    /// Multus's deprecated spelling of `interface`, which [`decode_element`]
    /// moves there; never written.
    #[serde(
        rename = "interfaceRequest",
        default,
        deserialize_with = "pod_interface",
        skip_serializing
    )]
    pub interface_request: Option<IfName>,
    pub cni_args: Option<GoMap>,
    /// Each with the keys it does not know, which [`decode_element`] warns
    /// about and drops.
    #[serde(rename = "portMappings")]
    pub port_mappings: Option<GoList<GoStruct<PortMapping>>>,
    pub bandwidth: Option<GoStruct<Bandwidth>>,
    #[serde(default, deserialize_with = "gateways")]
    pub default_route: Option<Vec<IpAddr>>,
    pub infiniband_guid: Option<GoStr>,
    pub ipam_claim_reference: Option<GoStr>,
    /// Keys in reverse-DNS notation (containing a '.'), kept as written:
    /// [`decode_element`] sorts them out of the keys the element does not
    /// know.
    #[serde(flatten, skip_deserializing)]
    pub extensions: Map<String, Value>,
}

/// `portMappings[]` (§4.1.2.1.7), in the cni-CONVENTIONS runtimeConfig form
/// too: `{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}`, with
/// `hostIP` when set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMapping {
    #[serde(rename = "hostPort")]
    pub host_port: GoPort,
    #[serde(rename = "containerPort")]
    pub container_port: GoPort,
    /// `tcp`, `udp` or `sctp` (lower case; "TCP" when not given).
    #[serde(default = "tcp", deserialize_with = "protocol")]
    pub protocol: String,
    #[serde(rename = "hostIP", skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<GoStr>,
}

/// `bandwidth` (§4.1.2.1.8): rates in bits per second, bursts in bits.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bandwidth {
    pub ingress_rate: Option<GoPositive>,
    pub ingress_burst: Option<GoPositive>,
    pub egress_rate: Option<GoPositive>,
    pub egress_burst: Option<GoPositive>,
}

fn tcp() -> String {
    "tcp".into()
}

/// `protocol`: "tcp" when absent; checked and lower-cased after decoding.
fn protocol<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<GoStr>::deserialize(d)?.map_or_else(tcp, String::from))
}

/// `interface` (and Multus's `interfaceRequest`): a string as Go reads it,
/// which must name an interface a pod's attachment can own.
fn pod_interface<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IfName>, D::Error> {
    Option::<GoStr>::deserialize(d)?
        .map(|name| pod_ifname(&name).map_err(de::Error::custom))
        .transpose()
}

/// `name` as a pod's interface, or why it cannot be one.
fn pod_ifname(name: &str) -> Result<IfName, String> {
    IfName::for_pod(name).map_err(|r| format!("{name:?} is not a valid interface name: {r}"))
}

/// `default-route`: a list of IP addresses, a bad one named by its index.
fn gateways<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<IpAddr>>, D::Error> {
    let Some(list) = Option::<GoStrs>::deserialize(d)? else {
        return Ok(None);
    };
    list.iter()
        .enumerate()
        .map(|(j, s)| {
            s.parse()
                .map_err(|_| de::Error::custom(format!("[{j}]: {s:?} is not an IP address")))
        })
        .collect::<Result<_, _>>()
        .map(Some)
}

/// Why an annotation is invalid. `field` is `[1].ips[0]` for the JSON format,
/// the item (`net-b@eth0`) or its position (`[2]`) for the comma format, and
/// the annotation name for the value as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct AnnotationError {
    pub field: String,
    pub reason: String,
}

impl fmt::Display for AnnotationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

impl AnnotationError {
    fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        AnnotationError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParsedSelection {
    pub elements: Vec<NetworkSelectionElement>,
    /// Things accepted but worth telling the user (deprecated or unknown keys,
    /// over-long names), each starting with the field it concerns.
    pub warnings: Vec<String>,
}

/// Parse the value of the selection annotation. An empty (or blank) value
/// selects nothing; a value starting with '[' is the JSON list format,
/// anything else the comma-delimited format.
pub fn parse_selection_annotation(value: &str) -> Result<ParsedSelection, AnnotationError> {
    let value = value.trim();
    let mut out = ParsedSelection::default();
    if value.is_empty() {
        return Ok(out);
    }
    if value.starts_with('[') {
        parse_json_list(value, &mut out)?;
    } else if value.starts_with('{') {
        return Err(AnnotationError::new(
            NETWORKS_ANNOTATION,
            "the JSON format must be a list of objects ([{...}, ...]), got a single object \
             (multi-net-spec §4.1.2)",
        ));
    } else {
        for (i, item) in value.split(',').enumerate() {
            let element = parse_comma_item(i, item.trim(), &mut out.warnings)?;
            out.elements.push(element);
        }
    }
    Ok(out)
}

/// One item of the comma-delimited format (§4.1.1): `name` or
/// `namespace/name`, plus the `@ifname` suffix Multus accepts. Like Multus,
/// whitespace around each part is ignored.
fn parse_comma_item(
    index: usize,
    item: &str,
    warnings: &mut Vec<String>,
) -> Result<NetworkSelectionElement, AnnotationError> {
    if item.is_empty() {
        return Err(AnnotationError::new(
            format!("[{index}]"),
            "empty network reference in the comma-delimited list (multi-net-spec §4.1.1)",
        ));
    }
    let bad = |reason: String| AnnotationError::new(item, reason);
    let (reference, ifname) = match item.split_once('@') {
        Some((_, i)) if i.contains('@') => return Err(bad("more than one '@'".into())),
        Some((r, i)) => (r.trim(), Some(i.trim())),
        None => (item, None),
    };
    let (namespace, name) =
        match reference.split_once('/') {
            Some((_, n)) if n.contains('/') => return Err(bad(
                "expected \"name\" or \"namespace/name\", optionally followed by \"@interface\""
                    .into(),
            )),
            Some((ns, n)) => {
                let ns = ns.trim();
                check_dns1123_label(ns).map_err(|r| bad(format!("namespace {r}")))?;
                (Some(ns.into()), n.trim())
            }
            None => (None, reference),
        };
    check_nad_name(name).map_err(|r| bad(format!("name {r}")))?;
    if let Some(w) = nad_name_warning(name) {
        warnings.push(format!("{item}: {w}"));
    }
    let interface = ifname
        .map(|i| IfName::for_pod(i).map_err(|r| bad(format!("interface {i:?}: {r}"))))
        .transpose()?;
    Ok(NetworkSelectionElement {
        name: name.into(),
        namespace,
        interface,
        ..Default::default()
    })
}

fn parse_json_list(value: &str, out: &mut ParsedSelection) -> Result<(), AnnotationError> {
    let v: Value = serde_json::from_str(value)
        .map_err(|e| AnnotationError::new(NETWORKS_ANNOTATION, format!("invalid JSON: {e}")))?;
    // A list of objects (§4.1.2), each kept as written for [`decode_element`].
    let list: Vec<GoMap> = casefold::from_value_at(&v).map_err(|e| {
        let (field, reason) = decode_failure(e, &v, NETWORKS_ANNOTATION);
        AnnotationError::new(field, reason)
    })?;
    let mut default_route_on: Option<usize> = None;
    for (i, obj) in list.into_iter().enumerate() {
        let element = decode_element(i, &Value::from(obj), &mut out.warnings)?;
        if element.default_route.is_some() {
            // multi-net-spec §4.1.2.1.9: only one attachment may carry the key.
            if let Some(first) = default_route_on {
                return Err(AnnotationError::new(
                    format!("[{i}].default-route"),
                    format!(
                        "only one element may carry \"default-route\", and [{first}] already \
                         does (multi-net-spec §4.1.2.1.9)"
                    ),
                ));
            }
            default_route_on = Some(i);
        }
        out.elements.push(element);
    }
    Ok(())
}

const BANDWIDTH_KEYS: [&str; 4] = ["ingressRate", "ingressBurst", "egressRate", "egressBurst"];

/// Decode element `i` through its serde form, then check what the types
/// cannot say.
fn decode_element(
    i: usize,
    obj: &Value,
    warnings: &mut Vec<String>,
) -> Result<NetworkSelectionElement, AnnotationError> {
    let path = |key: &str| format!("[{i}].{key}");
    let at = |key: &str| {
        let field = path(key);
        move |reason: String| AnnotationError::new(field, reason)
    };
    let GoStruct {
        known: mut e,
        other,
    } = casefold::from_value_at::<GoStruct<NetworkSelectionElement>>(obj).map_err(|err| {
        let (field, reason) = decode_failure(err, obj, "");
        let mut field = spell_first_key::<NetworkSelectionElement>(&field);
        prefix_path(&mut field, &format!("[{i}]"));
        AnnotationError::new(field, reason)
    })?;

    check_nad_name(&e.name).map_err(at("name"))?;
    if let Some(w) = nad_name_warning(&e.name) {
        warnings.push(format!("{}: {w}", path("name")));
    }

    // §4.1.2.1.1: missing or empty means the pod's namespace.
    e.namespace = e.namespace.filter(|ns| !ns.is_empty());
    if let Some(ns) = &e.namespace {
        check_dns1123_label(ns).map_err(at("namespace"))?;
    }

    if let Some(ips) = &e.ips {
        if ips.is_empty() {
            return Err(at("ips")(
                "must contain at least one address (multi-net-spec §4.1.2.1.3)".into(),
            ));
        }
        for (j, ip) in ips.iter().enumerate() {
            if parse_ip_with_prefix(ip).is_none() {
                return Err(at(&format!("ips[{j}]"))(format!(
                    "{ip:?} is not an IP address with an optional prefix length"
                )));
            }
        }
    }

    if let Some(mac) = &e.mac {
        if !is_hex_octets(mac, 6, &[':', '-']) {
            return Err(at("mac")(format!(
                "{mac:?} is not a 6-byte Ethernet MAC address (like \"02:23:45:67:89:01\")"
            )));
        }
    }

    if let Some(old) = e.interface_request.take() {
        let w = if e.interface.is_some() {
            "deprecated Multus key ignored because \"interface\" is also set"
        } else {
            "deprecated Multus key, read as \"interface\""
        };
        warnings.push(format!("{}: {w}", path("interfaceRequest")));
        e.interface.get_or_insert(old);
    }

    // The other keys: extension keys, and keys reserved by the spec that
    // plexus does not know.
    let mut unknown = Vec::new();
    for (key, value) in other {
        if key.contains('.') {
            e.extensions.insert(key, value);
        } else {
            unknown.push(key);
        }
    }

    if let Some(pms) = &mut e.port_mappings {
        if pms.is_empty() {
            return Err(at("portMappings")(
                "must contain at least one mapping (multi-net-spec §4.1.2.1.7)".into(),
            ));
        }
        for (j, pm) in pms.iter_mut().enumerate() {
            let at = |key: &str| at(&format!("portMappings[{j}].{key}"));
            let given = std::mem::take(&mut pm.protocol);
            pm.protocol = given.to_ascii_lowercase();
            if !["tcp", "udp", "sctp"].contains(&pm.protocol.as_str()) {
                return Err(at("protocol")(format!(
                    "must be \"TCP\", \"UDP\" or \"SCTP\" (any case), got {}",
                    describe(&Value::String(given))
                )));
            }
            // "" is Go's zero value, which runtimes send for "all addresses".
            pm.host_ip = pm.host_ip.take().filter(|ip| !ip.is_empty());
            if let Some(ip) = &pm.host_ip {
                ip.parse::<IpAddr>()
                    .map_err(|_| at("hostIP")(format!("{ip:?} is not an IP address")))?;
            }
            for key in std::mem::take(&mut pm.other).keys() {
                warnings.push(format!(
                    "{}: unknown key ignored",
                    path(&format!("portMappings[{j}].{key}"))
                ));
            }
        }
    }

    if let Some(bw) = &e.bandwidth {
        check_bandwidth(bw).map_err(|(key, r)| at(&format!("bandwidth{key}"))(r))?;
    }

    if let Some(guid) = &e.infiniband_guid {
        if !is_hex_octets(guid, 8, &[':']) {
            return Err(at("infiniband-guid")(format!(
                "{guid:?} is not an 8-byte InfiniBand GUID (8 hex octets separated by ':', \
                 like \"24:8a:07:03:00:8d:ae:2f\")"
            )));
        }
    }

    // Combined with "ips" it is a valid annotation whose attachment fails
    // (§4.1.2.1.11 "will result in an error"): the planner rejects it.
    if e.ipam_claim_reference.as_deref() == Some("") {
        return Err(at("ipam-claim-reference")("must not be empty".into()));
    }

    for key in unknown {
        warnings.push(format!(
            "{}: unknown key ignored (keys without a '.' are reserved by \
             multi-net-spec §4.1.2.1)",
            path(&key)
        ));
    }
    Ok(e)
}

/// §4.1.2.1.8 beyond the types: only its four keys, at least one of them,
/// and a burst only with its rate. The error is a sub-path (`.ingressBurst`,
/// or empty) and a reason.
fn check_bandwidth(bw: &GoStruct<Bandwidth>) -> Result<(), (String, String)> {
    if let Some(key) = bw.other.keys().next() {
        return Err((
            format!(".{key}"),
            format!(
                "unknown key; allowed: {} (multi-net-spec §4.1.2.1.8)",
                BANDWIDTH_KEYS.join(", ")
            ),
        ));
    }
    let Bandwidth {
        ingress_rate,
        ingress_burst,
        egress_rate,
        egress_burst,
    } = bw.known;
    if [ingress_rate, ingress_burst, egress_rate, egress_burst]
        .iter()
        .all(Option::is_none)
    {
        return Err((
            String::new(),
            format!(
                "must contain at least one of {} (multi-net-spec §4.1.2.1.8)",
                BANDWIDTH_KEYS.join(", ")
            ),
        ));
    }
    for (burst, rate, b, r) in [
        (ingress_burst, ingress_rate, "ingressBurst", "ingressRate"),
        (egress_burst, egress_rate, "egressBurst", "egressRate"),
    ] {
        if burst.is_some() && rate.is_none() {
            return Err((
                format!(".{b}"),
                format!("requires {r:?} to be set too (multi-net-spec §4.1.2.1.8)"),
            ));
        }
    }
    Ok(())
}

impl NetworkSelectionElement {
    /// The NetworkAttachmentDefinition this element selects.
    pub fn network_ref(&self, pod_namespace: &str) -> NetworkRef {
        NetworkRef::new(
            self.namespace.as_deref().unwrap_or(pod_namespace),
            self.name.as_str(),
        )
    }

    /// The element in the JSON list format (its serde form).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a selection element serializes")
    }

    /// runtimeConfig `portMappings` in the cni-CONVENTIONS form:
    /// `[{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]`, with
    /// `hostIP` when set.
    pub fn port_mappings_runtime_config(&self) -> Option<Value> {
        self.port_mappings
            .as_ref()
            .map(|pms| serde_json::to_value(pms).expect("port mappings serialize"))
    }

    /// runtimeConfig `bandwidth` in the cni-CONVENTIONS form, with a burst of
    /// [`DEFAULT_BURST_BITS`] for each rate given without one.
    pub fn bandwidth_runtime_config(&self) -> Option<Value> {
        let b = self.bandwidth.as_ref()?;
        let burst = |rate: Option<GoPositive>, burst: Option<GoPositive>| {
            burst.or(rate.and(Some(GoPositive(DEFAULT_BURST_BITS))))
        };
        let filled = Bandwidth {
            ingress_burst: burst(b.ingress_rate, b.ingress_burst),
            egress_burst: burst(b.egress_rate, b.egress_burst),
            ..**b
        };
        Some(serde_json::to_value(filled).expect("bandwidth serializes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netattach::error::SpecError;
    use serde_json::json;

    fn parse(s: &str) -> ParsedSelection {
        parse_selection_annotation(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn only(s: &str) -> NetworkSelectionElement {
        let p = parse(s);
        assert_eq!(p.elements.len(), 1, "{s}");
        p.elements.into_iter().next().unwrap()
    }

    fn err(s: &str) -> String {
        parse_selection_annotation(s).expect_err(s).to_string()
    }

    fn el(name: &str) -> NetworkSelectionElement {
        NetworkSelectionElement {
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn empty_value_selects_nothing() {
        assert_eq!(parse(""), ParsedSelection::default());
        assert_eq!(parse("  \n "), ParsedSelection::default());
        assert_eq!(parse("[]"), ParsedSelection::default());
    }

    #[test]
    fn comma_format_example_4_1_1() {
        let p = parse("net-a,net-b,other-ns/net-c");
        assert_eq!(
            p.elements,
            vec![
                el("net-a"),
                el("net-b"),
                NetworkSelectionElement {
                    namespace: Some("other-ns".into()),
                    ..el("net-c")
                }
            ]
        );
        assert!(p.warnings.is_empty());
        assert_eq!(
            p.elements[2].network_ref("my-namespace").to_string(),
            "other-ns/net-c"
        );
        assert_eq!(
            p.elements[0].network_ref("my-namespace").to_string(),
            "my-namespace/net-a"
        );
    }

    #[test]
    fn comma_format_interface_suffix_and_whitespace() {
        // The de-facto `[ns/]name@ifname` form Multus accepts.
        let p = parse(" net-a@eth1 ,  other-ns/net-b@net9,net-c ");
        assert_eq!(
            p.elements,
            vec![
                NetworkSelectionElement {
                    interface: Some(IfName::new("eth1").unwrap()),
                    ..el("net-a")
                },
                NetworkSelectionElement {
                    namespace: Some("other-ns".into()),
                    interface: Some(IfName::new("net9").unwrap()),
                    ..el("net-b")
                },
                el("net-c"),
            ]
        );
        // Multus also trims around '/' and '@'.
        assert_eq!(
            only("ns / net @ eth1"),
            NetworkSelectionElement {
                namespace: Some("ns".into()),
                interface: Some(IfName::new("eth1").unwrap()),
                ..el("net")
            }
        );
    }

    #[test]
    fn same_network_twice_example_4_2_2() {
        let p = parse("net-a,net-a");
        assert_eq!(p.elements, vec![el("net-a"), el("net-a")]);
    }

    #[test]
    fn comma_format_bad_inputs() {
        assert_eq!(
            err("net-a,,net-b"),
            "[1]: empty network reference in the comma-delimited list (multi-net-spec §4.1.1)"
        );
        assert!(err("net-a,").starts_with("[1]: empty"));
        assert!(err("Net-A").starts_with("Net-A: name \"Net-A\" is not valid"));
        assert!(err("a/b/c").starts_with("a/b/c: expected"));
        assert!(err("Other_ns/net").starts_with("Other_ns/net: namespace "));
        assert!(err("/net").starts_with("/net: namespace must not be empty"));
        assert!(err("ns/").starts_with("ns/: name must not be empty"));
        assert_eq!(err("net@a@b"), "net@a@b: more than one '@'");
        assert!(err("net@").starts_with("net@: interface \"\""));
        assert!(err("net@waytoolonginterfacename")
            .starts_with("net@waytoolonginterfacename: interface"));
        assert!(err("{\"name\": \"net-a\"}").contains("must be a list of objects"));
        let e = SpecError::from(parse_selection_annotation("net-b@").unwrap_err());
        assert!(
            e.to_string()
                .starts_with("k8s.v1.cni.cncf.io/networks item \"net-b@\": "),
            "{e}"
        );
    }

    #[test]
    fn long_name_is_a_warning_quoting_3_3() {
        let long = "n".repeat(70);
        let p = parse(&format!("net-a,{long}"));
        assert_eq!(p.elements[1].name, long);
        assert_eq!(p.warnings.len(), 1);
        assert!(
            p.warnings[0].contains("63 characters or less"),
            "{}",
            p.warnings[0]
        );
        let p = parse(&format!(r#"[{{"name": "{long}"}}]"#));
        assert!(p.warnings[0].starts_with("[0].name: "), "{}", p.warnings[0]);
    }

    #[test]
    fn json_format_example_4_1_2() {
        let p = parse(
            r#"[
        {"name": "net-a"},
        {
          "name": "net-b",
          "ips": ["1.2.3.4"],
          "mac": "aa:bb:cc:dd:ee:ff"
        },
        {
          "name": "net-c",
          "namespace": "other-ns"
        }
      ]"#,
        );
        assert_eq!(
            p.elements,
            vec![
                el("net-a"),
                NetworkSelectionElement {
                    ips: Some(GoStrs(vec!["1.2.3.4".into()])),
                    mac: Some("aa:bb:cc:dd:ee:ff".into()),
                    ..el("net-b")
                },
                NetworkSelectionElement {
                    namespace: Some("other-ns".into()),
                    ..el("net-c")
                },
            ]
        );
        assert!(p.warnings.is_empty());
    }

    #[test]
    fn ips_example_4_1_2_1_3_1() {
        let e = only(
            r#"[
      {
        "name": "net-b",
        "ips": ["10.2.2.42/24", "2001:db8::5/64"]
      }
    ]"#,
        );
        assert_eq!(
            e.ips,
            Some(GoStrs(vec![
                "10.2.2.42/24".to_string(),
                "2001:db8::5/64".to_string()
            ]))
        );
    }

    #[test]
    fn ips_bad_inputs() {
        assert_eq!(
            err(r#"[{"name": "a"}, {"name": "b", "ips": ["1.2.3.4/33"]}]"#),
            r#"[1].ips[0]: "1.2.3.4/33" is not an IP address with an optional prefix length"#
        );
        assert_eq!(
            err(r#"[{"name": "b", "ips": []}]"#),
            "[0].ips: must contain at least one address (multi-net-spec §4.1.2.1.3)"
        );
        assert_eq!(
            err(r#"[{"name": "b", "ips": "1.2.3.4"}]"#),
            r#"[0].ips: must be a list, got "1.2.3.4""#
        );
        assert_eq!(
            err(r#"[{"name": "b", "ips": ["10.0.0.1", 5]}]"#),
            "[0].ips[1]: must be a string, got 5"
        );
        assert!(err(r#"[{"name": "b", "ips": ["2001:db8::1/129"]}]"#).starts_with("[0].ips[0]: "));
        assert!(err(r#"[{"name": "b", "ips": ["host.example"]}]"#).starts_with("[0].ips[0]: "));
    }

    #[test]
    fn mac_example_4_1_2_1_4_1_and_bad_inputs() {
        let e = only(r#"[{"name": "net-b", "mac": "02:23:45:67:89:01"}]"#);
        assert_eq!(e.mac.as_deref(), Some("02:23:45:67:89:01"));
        assert_eq!(
            only(r#"[{"name": "net-b", "mac": "02-23-45-67-89-0A"}]"#)
                .mac
                .as_deref(),
            Some("02-23-45-67-89-0A")
        );
        for bad in [
            "02:23:45:67:89",
            "02:23:45:67:89:01:02",
            "0223.4567.8901",
            "zz:23:45:67:89:01",
            "",
        ] {
            let m = err(&format!(r#"[{{"name": "net-b", "mac": "{bad}"}}]"#));
            assert_eq!(
                m,
                format!(
                    "[0].mac: {bad:?} is not a 6-byte Ethernet MAC address (like \"02:23:45:67:89:01\")"
                )
            );
        }
    }

    #[test]
    fn interface_key_and_deprecated_interface_request() {
        let e = only(r#"[{"name": "net-b", "interface": "ext0"}]"#);
        assert_eq!(e.interface.as_deref(), Some("ext0"));
        let p = parse(r#"[{"name": "net-b", "interfaceRequest": "ext1"}]"#);
        assert_eq!(p.elements[0].interface.as_deref(), Some("ext1"));
        assert_eq!(
            p.warnings,
            vec!["[0].interfaceRequest: deprecated Multus key, read as \"interface\"".to_string()]
        );
        let p = parse(r#"[{"name": "n", "interface": "a0", "interfaceRequest": "b0"}]"#);
        assert_eq!(p.elements[0].interface.as_deref(), Some("a0"));
        assert!(p.warnings[0].contains("ignored"));
        assert!(err(r#"[{"name": "n", "interface": ""}]"#)
            .starts_with("[0].interface: \"\" is not a valid interface name"));
        assert!(err(r#"[{"name": "n", "interface": "sixteen-chars-xx"}]"#)
            .starts_with("[0].interface: "));
        assert_eq!(
            err(r#"[{"name": "n", "interface": 1}]"#),
            "[0].interface: must be a string, got 1"
        );
    }

    #[test]
    fn cni_args_example_4_1_2_1_6_1() {
        let e = only(
            r#"[  
      {  
        "name": "net-b",  
        "cni-args": {  
          "spoofchk": "on"  
        }  
      }  
    ]"#,
        );
        assert_eq!(Value::from(e.cni_args.unwrap()), json!({"spoofchk": "on"}));
        assert_eq!(
            err(r#"[{"name": "n", "cni-args": ["spoofchk"]}]"#),
            r#"[0].cni-args: must be an object, got ["spoofchk"]"#
        );
    }

    #[test]
    fn port_mappings_example_4_1_2_1_7_1() {
        let e = only(
            r#"[
      {
        "name": "net-b",
        "portMappings": [
          { "hostPort": 8080, "containerPort": 80, "protocol": "tcp" }
        ]
      }
    ]"#,
        );
        assert_eq!(
            e.port_mappings,
            Some(GoList(vec![PortMapping {
                host_port: GoPort(8080),
                container_port: GoPort(80),
                protocol: "tcp".into(),
                host_ip: None
            }
            .into()]))
        );
        // cni-CONVENTIONS "portMappings".
        assert_eq!(
            e.port_mappings_runtime_config(),
            Some(json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]))
        );
    }

    #[test]
    fn port_mappings_protocol_default_case_and_host_ip() {
        let e = only(
            r#"[{"name": "n", "portMappings": [
                {"hostPort": 1, "containerPort": 65535},
                {"hostPort": 53, "containerPort": 53, "protocol": "UDP", "hostIP": "192.0.2.1"},
                {"HostPort": 9, "CONTAINERPORT": 9, "Protocol": "Sctp", "hostIP": ""}
            ]}]"#,
        );
        let pms = e.port_mappings.as_ref().unwrap();
        assert_eq!(pms[0].protocol, "tcp");
        assert_eq!(pms[1].protocol, "udp");
        assert_eq!(pms[1].host_ip.as_deref(), Some("192.0.2.1"));
        assert_eq!(pms[2].protocol, "sctp");
        assert_eq!(pms[2].host_ip, None);
        assert_eq!(
            e.port_mappings_runtime_config().unwrap()[1],
            json!({"hostPort": 53, "containerPort": 53, "protocol": "udp", "hostIP": "192.0.2.1"})
        );
    }

    #[test]
    fn port_mappings_bad_inputs() {
        let pm = |body: &str| err(&format!(r#"[{{"name": "n", "portMappings": {body}}}]"#));
        for (body, want) in [
            (
                "[]",
                "[0].portMappings: must contain at least one mapping (multi-net-spec §4.1.2.1.7)",
            ),
            ("{}", "[0].portMappings: must be a list, got {}"),
            ("[5]", "[0].portMappings[0]: must be an object, got 5"),
            (
                r#"[{"containerPort": 80}]"#,
                "[0].portMappings[0].hostPort: required",
            ),
            (
                r#"[{"hostPort": 80}]"#,
                "[0].portMappings[0].containerPort: required",
            ),
            (
                r#"[{"hostPort": 0, "containerPort": 80}]"#,
                "[0].portMappings[0].hostPort: must be an integer from 1 to 65535, got 0",
            ),
            (
                r#"[{"hostPort": 80, "containerPort": 65536}]"#,
                "[0].portMappings[0].containerPort: must be an integer from 1 to 65535, got 65536",
            ),
        ] {
            assert_eq!(pm(body), want, "{body}");
        }
        assert!(pm(r#"[{"hostPort": "80", "containerPort": 80}]"#).ends_with("got \"80\""));
        assert!(pm(r#"[{"hostPort": 80.5, "containerPort": 80}]"#).ends_with("got 80.5"));
        assert_eq!(
            pm(r#"[{"hostPort": 80, "containerPort": 80, "protocol": "icmp"}]"#),
            "[0].portMappings[0].protocol: must be \"TCP\", \"UDP\" or \"SCTP\" (any case), got \"icmp\""
        );
        assert_eq!(
            pm(
                r#"[{"hostPort": 80, "containerPort": 80}, {"hostPort": 80, "containerPort": 80, "hostIP": "x"}]"#
            ),
            "[0].portMappings[1].hostIP: \"x\" is not an IP address"
        );
        let p = parse(
            r#"[{"name": "n", "portMappings": [{"hostPort": 1, "containerPort": 2, "hostPortRange": 3}]}]"#,
        );
        assert_eq!(
            p.warnings,
            vec!["[0].portMappings[0].hostPortRange: unknown key ignored".to_string()]
        );
    }

    const BANDWIDTH_EXAMPLE_AS_PRINTED: &str = r#"[
      {
        "name": "net-b",
        "bandwidth": {
          "ingressRate": 2048, // Limit ingress to 2Kbps
          "ingressBurst": 300, // Allow small egress bursts of 300b
          "egressRate": 8000, // Limit egress to 8000bps
          "egressBurst": 200  // Allow small egress bursts of 200b
        }
      }
    ]"#;

    #[test]
    fn bandwidth_example_4_1_2_1_8_1() {
        // As printed, the example carries `//` comments, which JSON has not.
        let e = parse_selection_annotation(BANDWIDTH_EXAMPLE_AS_PRINTED).unwrap_err();
        assert_eq!(e.field, NETWORKS_ANNOTATION);
        assert!(e.reason.starts_with("invalid JSON: "), "{e}");
        // Without the comments it is valid.
        let without: String = BANDWIDTH_EXAMPLE_AS_PRINTED
            .lines()
            .map(|l| l.split("//").next().unwrap())
            .collect::<Vec<_>>()
            .join("\n");
        let e = only(&without);
        let want = Bandwidth {
            ingress_rate: Some(GoPositive(2048)),
            ingress_burst: Some(GoPositive(300)),
            egress_rate: Some(GoPositive(8000)),
            egress_burst: Some(GoPositive(200)),
        };
        assert_eq!(e.bandwidth, Some(want.into()));
        assert_eq!(
            e.bandwidth_runtime_config(),
            Some(
                json!({"ingressRate": 2048, "ingressBurst": 300, "egressRate": 8000, "egressBurst": 200})
            )
        );
    }

    #[test]
    fn bandwidth_default_burst_is_filled_in_runtime_config() {
        let e = only(r#"[{"name": "n", "bandwidth": {"egressRate": 1000000}}]"#);
        assert_eq!(e.bandwidth.as_ref().unwrap().egress_burst, None);
        assert_eq!(
            e.bandwidth_runtime_config(),
            Some(json!({"egressRate": 1000000, "egressBurst": 2147483647u64}))
        );
        // The element itself keeps what the user wrote.
        assert_eq!(
            e.to_value(),
            json!({"name": "n", "bandwidth": {"egressRate": 1000000}})
        );
    }

    #[test]
    fn bandwidth_bad_inputs() {
        let bw = |body: &str| err(&format!(r#"[{{"name": "n", "bandwidth": {body}}}]"#));
        assert!(bw("{}").starts_with("[0].bandwidth: must contain at least one of ingressRate"));
        assert!(bw(r#"{"egressRate": "1M"}"#).ends_with("got \"1M\""));
        for (body, want) in [
            ("[]", "[0].bandwidth: must be an object, got []"),
            (
                r#"{"ingressRate": 0}"#,
                "[0].bandwidth.ingressRate: must be a positive integer, got 0",
            ),
            (
                r#"{"egressRate": -5}"#,
                "[0].bandwidth.egressRate: must be a positive integer, got -5",
            ),
            (
                r#"{"ingressRate": 1, "rate": 5}"#,
                "[0].bandwidth.rate: unknown key; allowed: ingressRate, ingressBurst, egressRate, \
                 egressBurst (multi-net-spec §4.1.2.1.8)",
            ),
            (
                r#"{"ingressBurst": 300}"#,
                "[0].bandwidth.ingressBurst: requires \"ingressRate\" to be set too \
                 (multi-net-spec §4.1.2.1.8)",
            ),
            (
                r#"{"ingressRate": 1, "egressBurst": 300}"#,
                "[0].bandwidth.egressBurst: requires \"egressRate\" to be set too \
                 (multi-net-spec §4.1.2.1.8)",
            ),
        ] {
            assert_eq!(bw(body), want, "{body}");
        }
    }

    #[test]
    fn default_route_example_4_1_2_1_9_1() {
        let p = parse(
            r#"[
        { "name": "net-a" },
        {
          "name": "net-b",
          "default-route": ["10.0.0.1"]
        }
      ]"#,
        );
        assert_eq!(p.elements[0], el("net-a"));
        assert_eq!(
            p.elements[1].default_route,
            Some(vec!["10.0.0.1".parse::<IpAddr>().unwrap()])
        );
        // The list may be empty.
        assert_eq!(
            only(r#"[{"name": "n", "default-route": []}]"#).default_route,
            Some(vec![])
        );
    }

    #[test]
    fn default_route_bad_inputs() {
        assert_eq!(
            err(r#"[{"name": "a", "default-route": []}, {"name": "b"}, {"name": "c", "default-route": ["10.0.0.1"]}]"#),
            "[2].default-route: only one element may carry \"default-route\", and [0] already does \
             (multi-net-spec §4.1.2.1.9)"
        );
        assert_eq!(
            err(r#"[{"name": "a", "default-route": ["10.0.0.1/24"]}]"#),
            "[0].default-route[0]: \"10.0.0.1/24\" is not an IP address"
        );
        assert_eq!(
            err(r#"[{"name": "a", "default-route": "10.0.0.1"}]"#),
            "[0].default-route: must be a list, got \"10.0.0.1\""
        );
    }

    #[test]
    fn infiniband_guid_example_4_1_2_1_10_1() {
        let e = only(
            r#"[
        {
          "name": "net-b",
          "infiniband-guid": "24:8a:07:03:00:8d:ae:2f"
        }
      ]"#,
        );
        assert_eq!(
            e.infiniband_guid.as_deref(),
            Some("24:8a:07:03:00:8d:ae:2f")
        );
        for bad in [
            "24:8a:07:03:00:8d:ae",
            "24-8a-07-03-00-8d-ae-2f",
            "24:8a:07:03:00:8d:ae:2g",
        ] {
            assert!(
                err(&format!(r#"[{{"name": "n", "infiniband-guid": "{bad}"}}]"#)).starts_with(
                    &format!("[0].infiniband-guid: {bad:?} is not an 8-byte InfiniBand GUID")
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn ipam_claim_reference_example_4_1_2_1_11_1() {
        let p = parse(
            r#"[
        { "name": "net-a" },
        { "name": "net-b",
          "ipam-claim-reference": "vm123.tenantblue"
        }
      ]"#,
        );
        assert_eq!(
            p.elements[1].ipam_claim_reference.as_deref(),
            Some("vm123.tenantblue")
        );
        // §4.1.2.1.11: combined with "ips" the annotation still parses; the
        // planner fails that attachment (tests/plan_spec.rs).
        let both = parse_selection_annotation(
            r#"[{"name": "n", "ips": ["10.0.0.2/24"], "ipam-claim-reference": "c"}]"#,
        )
        .unwrap();
        assert_eq!(both.elements[0].ipam_claim_reference.as_deref(), Some("c"));
        assert_eq!(
            err(r#"[{"name": "n", "ipam-claim-reference": ""}]"#),
            "[0].ipam-claim-reference: must not be empty"
        );
        assert_eq!(
            err(r#"[{"name": "n", "ipam-claim-reference": 7}]"#),
            "[0].ipam-claim-reference: must be a string, got 7"
        );
    }

    #[test]
    fn name_and_namespace_rules() {
        assert_eq!(err(r#"[{"namespace": "a"}]"#), "[0].name: required");
        assert_eq!(err(r#"[{"name": null}]"#), "[0].name: required");
        assert_eq!(err(r#"[{"name": 1}]"#), "[0].name: must be a string, got 1");
        assert!(err(r#"[{"name": "ns/net"}]"#).starts_with("[0].name: \"ns/net\" is not valid"));
        assert!(err(r#"[{"name": "n", "namespace": "Bad"}]"#).starts_with("[0].namespace: "));
        assert_eq!(
            err(r#"[{"name": "n", "namespace": 3}]"#),
            "[0].namespace: must be a string, got 3"
        );
        // §4.1.2.1.1: an empty namespace is the pod's namespace.
        assert_eq!(only(r#"[{"name": "n", "namespace": ""}]"#).namespace, None);
    }

    #[test]
    fn json_shape_errors() {
        assert_eq!(err(r#"["net-a"]"#), "[0]: must be an object, got \"net-a\"");
        assert!(
            err("[{\"name\": \"a\"}").starts_with("k8s.v1.cni.cncf.io/networks: invalid JSON: ")
        );
        let e = SpecError::from(
            parse_selection_annotation(r#"[{"name": "a", "ips": []}]"#).unwrap_err(),
        );
        assert!(matches!(e, SpecError::Annotation(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "k8s.v1.cni.cncf.io/networks[0].ips: must contain at least one address (multi-net-spec §4.1.2.1.3)"
        );
    }

    #[test]
    fn keys_are_case_insensitive_like_go() {
        let e = only(
            r#"[{"Name": "net-b", "NAMESPACE": "ns", "IPs": ["10.0.0.5/24"], "Mac": "02:00:00:00:00:01",
                 "Interface": "net7", "CNI-Args": {"a": "b"}, "portmappings": [{"hostport": 80, "containerport": 8080}],
                 "Bandwidth": {"IngressRate": 5}, "Default-Route": ["10.0.0.1"],
                 "Infiniband-GUID": "00:11:22:33:44:55:66:77"}]"#,
        );
        assert_eq!(e.name, "net-b");
        assert_eq!(e.namespace.as_deref(), Some("ns"));
        assert_eq!(e.ips, Some(GoStrs(vec!["10.0.0.5/24".into()])));
        assert_eq!(e.mac.as_deref(), Some("02:00:00:00:00:01"));
        assert_eq!(e.interface.as_deref(), Some("net7"));
        assert!(e.cni_args.is_some());
        assert_eq!(
            e.port_mappings.as_ref().unwrap()[0].container_port,
            GoPort(8080)
        );
        assert_eq!(
            e.bandwidth.as_ref().unwrap().ingress_rate,
            Some(GoPositive(5))
        );
        assert!(e.default_route.is_some());
        assert!(e.infiniband_guid.is_some());
        // When both spellings appear, the later one wins, as in Go.
        assert_eq!(only(r#"[{"name": "a", "NAME": "b"}]"#).name, "b");
    }

    #[test]
    fn extension_keys_kept_unknown_keys_warned() {
        let p = parse(
            r#"[{"name": "n", "org.example.color": {"x": 1}, "overrides": {"hairpin": true},
                 "io.example.flag": true}]"#,
        );
        let e = &p.elements[0];
        assert_eq!(
            Value::Object(e.extensions.clone()),
            json!({"org.example.color": {"x": 1}, "io.example.flag": true})
        );
        assert_eq!(
            p.warnings,
            vec![
                "[0].overrides: unknown key ignored (keys without a '.' are reserved by \
                  multi-net-spec §4.1.2.1)"
                    .to_string()
            ]
        );
        assert_eq!(
            e.to_value(),
            json!({"name": "n", "org.example.color": {"x": 1}, "io.example.flag": true})
        );
    }

    #[test]
    fn to_value_round_trips_every_key() {
        let text = r#"[{"name": "net-b", "namespace": "ns", "ips": ["10.2.2.42/24"], "mac": "02:23:45:67:89:01",
            "interface": "net1", "cni-args": {"spoofchk": "on"},
            "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp", "hostIP": "192.0.2.1"}],
            "bandwidth": {"ingressRate": 2048, "ingressBurst": 300}, "default-route": ["10.0.0.1", "2001:db8::1"],
            "infiniband-guid": "24:8a:07:03:00:8d:ae:2f", "org.example.k": "v"}]"#;
        let e = only(text);
        let v = e.to_value();
        let original: Value = serde_json::from_str(text).unwrap();
        assert_eq!(v, original[0]);
        // Key order: spec order then extensions.
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys[0], "name");
        assert_eq!(keys.last().unwrap().as_str(), "org.example.k");
        assert_eq!(only(&format!("[{v}]")), e);
    }

    #[test]
    fn keys_in_another_case_at_every_depth_4_1_2_1() {
        // §4.1.2.1's keys, and those of portMappings (§4.1.2.1.7) and
        // bandwidth (§4.1.2.1.8), as Multus's Go decoder matches them.
        let p = parse(
            r#"[{"NAME": "n", "IPS": ["10.0.0.5/24"], "INTERFACEREQUEST": "net1",
                 "PORTMAPPINGS": [{"HOSTPORT": 80, "ContainerPort": 8080, "HostIp": "192.0.2.1",
                                   "Protocol": "UDP", "hostPortRange": 3}],
                 "BANDWIDTH": {"INGRESSRATE": 5, "IngressBurst": 7}}]"#,
        );
        let e = &p.elements[0];
        assert_eq!(e.ips, Some(GoStrs(vec!["10.0.0.5/24".into()])));
        assert_eq!(e.interface.as_deref(), Some("net1"));
        assert_eq!(
            e.port_mappings,
            Some(GoList(vec![PortMapping {
                host_port: GoPort(80),
                container_port: GoPort(8080),
                protocol: "udp".into(),
                host_ip: Some("192.0.2.1".into()),
            }
            .into()]))
        );
        assert_eq!(
            e.bandwidth,
            Some(
                Bandwidth {
                    ingress_rate: Some(GoPositive(5)),
                    ingress_burst: Some(GoPositive(7)),
                    ..Default::default()
                }
                .into()
            )
        );
        assert_eq!(
            p.warnings,
            vec![
                "[0].interfaceRequest: deprecated Multus key, read as \"interface\"".to_string(),
                "[0].portMappings[0].hostPortRange: unknown key ignored".to_string(),
            ]
        );
        // A nested key is named as written; a top-level one as §4.1.2.1 spells it.
        assert_eq!(
            err(r#"[{"name": "n", "PortMappings": [{"HostPort": 0, "containerPort": 1}]}]"#),
            "[0].portMappings[0].HostPort: must be an integer from 1 to 65535, got 0"
        );
        assert_eq!(
            err(r#"[{"name": "n", "IPS": ["10.0.0.1", 5]}]"#),
            "[0].ips[1]: must be a string, got 5"
        );
        // A list is no object, though serde_json would read a struct from one.
        assert_eq!(
            err(r#"[{"name": "n", "portMappings": [[80, 80]]}]"#),
            "[0].portMappings[0]: must be an object, got [80,80]"
        );
    }
}
