//! The Network Attachment Selection Annotation, `k8s.v1.cni.cncf.io/networks`
//! (multi-net-spec §4): the comma-delimited format (§4.1.1) and the JSON list
//! format (§4.1.2) with every key of §4.1.2.1 validated.
//!
//! Multus decodes the JSON format with Go's encoding/json, so object keys
//! match case-insensitively here too (an exact match wins; see
//! [`super::go_json::fold_object`]), and `null` counts as an absent key.

use std::fmt;
use std::net::IpAddr;

use serde_json::{json, Map, Value};

use super::go_json::{
    as_array, as_object, as_str, describe, fold_object, is_hex_octets, parse_ip_with_prefix,
};
use super::names::{check_dns1123_label, check_nad_name, nad_name_warning, NetworkRef};
use crate::cni::names::check_pod_ifname;

pub const NETWORKS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";

/// Multus's per-pod override of the cluster-wide default network.
pub const DEFAULT_NETWORK_ANNOTATION: &str = "v1.multus-cni.io/default-network";

/// The burst, in bits, put into runtimeConfig `bandwidth` when a rate comes
/// without one (§4.1.2.1.8.2 leaves the default to the implementation). The
/// CNI reference bandwidth plugin refuses a rate without a burst, so one is
/// needed; kubelet's CNI driver used math.MaxInt32 for the same purpose, so
/// the value that pods were shaped with under kubelet stays the same.
pub const DEFAULT_BURST_BITS: u64 = 2_147_483_647;

/// One requested attachment (§4.1.2.1). `namespace: None` means the pod's
/// namespace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetworkSelectionElement {
    pub name: String,
    pub namespace: Option<String>,
    pub ips: Option<Vec<String>>,
    pub mac: Option<String>,
    pub interface: Option<String>,
    pub cni_args: Option<Map<String, Value>>,
    pub port_mappings: Option<Vec<PortMapping>>,
    pub bandwidth: Option<Bandwidth>,
    pub default_route: Option<Vec<IpAddr>>,
    pub infiniband_guid: Option<String>,
    pub ipam_claim_reference: Option<String>,
    /// Keys in reverse-DNS notation (containing a '.'), kept as written.
    pub extensions: Map<String, Value>,
}

/// `portMappings[]` (§4.1.2.1.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    /// `tcp`, `udp` or `sctp` (lower case; "TCP" when not given).
    pub protocol: String,
    pub host_ip: Option<String>,
}

/// `bandwidth` (§4.1.2.1.8): rates in bits per second, bursts in bits.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bandwidth {
    pub ingress_rate: Option<u64>,
    pub ingress_burst: Option<u64>,
    pub egress_rate: Option<u64>,
    pub egress_burst: Option<u64>,
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
                (Some(ns.to_string()), n.trim())
            }
            None => (None, reference),
        };
    check_nad_name(name).map_err(|r| bad(format!("name {r}")))?;
    if let Some(w) = nad_name_warning(name) {
        warnings.push(format!("{item}: {w}"));
    }
    if let Some(ifname) = ifname {
        check_pod_ifname(ifname).map_err(|r| bad(format!("interface {ifname:?}: {r}")))?;
    }
    Ok(NetworkSelectionElement {
        name: name.to_string(),
        namespace,
        interface: ifname.map(str::to_string),
        ..Default::default()
    })
}

fn parse_json_list(value: &str, out: &mut ParsedSelection) -> Result<(), AnnotationError> {
    let v: Value = serde_json::from_str(value)
        .map_err(|e| AnnotationError::new(NETWORKS_ANNOTATION, format!("invalid JSON: {e}")))?;
    let list = as_array(&v).map_err(|r| AnnotationError::new(NETWORKS_ANNOTATION, r))?;
    let mut default_route_on: Option<usize> = None;
    for (i, item) in list.iter().enumerate() {
        let obj = as_object(item).map_err(|r| AnnotationError::new(format!("[{i}]"), r))?;
        let element = decode_element(i, obj, &mut out.warnings)?;
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

/// The keys of §4.1.2.1, plus Multus's deprecated `interfaceRequest`.
const KEYS: [&str; 12] = [
    "name",
    "namespace",
    "ips",
    "mac",
    "interface",
    "interfaceRequest",
    "cni-args",
    "portMappings",
    "bandwidth",
    "default-route",
    "infiniband-guid",
    "ipam-claim-reference",
];

fn decode_element(
    i: usize,
    obj: &Map<String, Value>,
    warnings: &mut Vec<String>,
) -> Result<NetworkSelectionElement, AnnotationError> {
    let folded = fold_object(obj, &KEYS);
    let get = |key: &str| {
        let idx = KEYS.iter().position(|k| *k == key).unwrap_or(0);
        folded.known[idx].map(|(_, v)| v)
    };
    let path = |key: &str| format!("[{i}].{key}");
    let at = |key: &str| {
        let field = path(key);
        move |reason: String| AnnotationError::new(field, reason)
    };

    let mut e = NetworkSelectionElement::default();

    let name = get("name").ok_or_else(|| at("name")("required".into()))?;
    let name = as_str(name).map_err(at("name"))?;
    check_nad_name(name).map_err(at("name"))?;
    if let Some(w) = nad_name_warning(name) {
        warnings.push(format!("{}: {w}", path("name")));
    }
    e.name = name.to_string();

    if let Some(ns) = get("namespace") {
        let ns = as_str(ns).map_err(at("namespace"))?;
        // §4.1.2.1.1: missing or empty means the pod's namespace.
        if !ns.is_empty() {
            check_dns1123_label(ns).map_err(at("namespace"))?;
            e.namespace = Some(ns.to_string());
        }
    }

    if let Some(ips) = get("ips") {
        e.ips =
            Some(decode_ips(ips).map_err(|(sub, r)| AnnotationError::new(path("ips") + &sub, r))?);
    }

    if let Some(mac) = get("mac") {
        let mac = as_str(mac).map_err(at("mac"))?;
        if !is_hex_octets(mac, 6, &[':', '-']) {
            return Err(at("mac")(format!(
                "{mac:?} is not a 6-byte Ethernet MAC address (like \"02:23:45:67:89:01\")"
            )));
        }
        e.mac = Some(mac.to_string());
    }

    let ifname = |key: &str| -> Result<Option<String>, AnnotationError> {
        let Some(v) = get(key) else { return Ok(None) };
        let s = as_str(v).map_err(at(key))?;
        check_pod_ifname(s)
            .map_err(|r| at(key)(format!("{s:?} is not a valid interface name: {r}")))?;
        Ok(Some(s.to_string()))
    };
    e.interface = ifname("interface")?;
    if let Some(old) = ifname("interfaceRequest")? {
        let w = if e.interface.is_some() {
            "deprecated Multus key ignored because \"interface\" is also set"
        } else {
            "deprecated Multus key, read as \"interface\""
        };
        warnings.push(format!("{}: {w}", path("interfaceRequest")));
        e.interface.get_or_insert(old);
    }

    if let Some(args) = get("cni-args") {
        e.cni_args = Some(as_object(args).map_err(at("cni-args"))?.clone());
    }

    if let Some(pm) = get("portMappings") {
        e.port_mappings = Some(
            decode_port_mappings(pm, warnings, &path("portMappings"))
                .map_err(|(sub, r)| AnnotationError::new(path("portMappings") + &sub, r))?,
        );
    }

    if let Some(bw) = get("bandwidth") {
        e.bandwidth = Some(
            decode_bandwidth(bw)
                .map_err(|(sub, r)| AnnotationError::new(path("bandwidth") + &sub, r))?,
        );
    }

    if let Some(gws) = get("default-route") {
        let list = as_array(gws).map_err(at("default-route"))?;
        let mut out = Vec::with_capacity(list.len());
        for (j, gw) in list.iter().enumerate() {
            let here =
                |r: String| AnnotationError::new(format!("{}[{j}]", path("default-route")), r);
            let s = as_str(gw).map_err(here)?;
            out.push(
                s.parse::<IpAddr>()
                    .map_err(|_| here(format!("{s:?} is not an IP address")))?,
            );
        }
        e.default_route = Some(out);
    }

    if let Some(guid) = get("infiniband-guid") {
        let guid = as_str(guid).map_err(at("infiniband-guid"))?;
        if !is_hex_octets(guid, 8, &[':']) {
            return Err(at("infiniband-guid")(format!(
                "{guid:?} is not an 8-byte InfiniBand GUID (8 hex octets separated by ':', \
                 like \"24:8a:07:03:00:8d:ae:2f\")"
            )));
        }
        e.infiniband_guid = Some(guid.to_string());
    }

    if let Some(claim) = get("ipam-claim-reference") {
        let claim = as_str(claim).map_err(at("ipam-claim-reference"))?;
        if claim.is_empty() {
            return Err(at("ipam-claim-reference")("must not be empty".into()));
        }
        // Combined with "ips" it is a valid annotation whose attachment fails
        // (§4.1.2.1.11 "will result in an error"): the planner rejects it.
        e.ipam_claim_reference = Some(claim.to_string());
    }

    for (key, value) in folded.unknown {
        if key.contains('.') {
            e.extensions.insert(key.to_string(), value.clone());
        } else {
            warnings.push(format!(
                "[{i}].{key}: unknown key ignored (keys without a '.' are reserved by \
                 multi-net-spec §4.1.2.1)"
            ));
        }
    }
    Ok(e)
}

/// A sub-path (`[0]`, `.protocol`, `[1].hostPort`) and a reason.
type SubError = (String, String);

fn whole(reason: String) -> SubError {
    (String::new(), reason)
}

fn decode_ips(v: &Value) -> Result<Vec<String>, SubError> {
    let list = as_array(v).map_err(whole)?;
    if list.is_empty() {
        return Err(whole(
            "must contain at least one address (multi-net-spec §4.1.2.1.3)".into(),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(j, ip)| {
            let s = as_str(ip).map_err(|r| (format!("[{j}]"), r))?;
            parse_ip_with_prefix(s).ok_or_else(|| {
                (
                    format!("[{j}]"),
                    format!("{s:?} is not an IP address with an optional prefix length"),
                )
            })?;
            Ok(s.to_string())
        })
        .collect()
}

const PORT_MAPPING_KEYS: [&str; 4] = ["hostPort", "containerPort", "protocol", "hostIP"];

fn decode_port_mappings(
    v: &Value,
    warnings: &mut Vec<String>,
    path: &str,
) -> Result<Vec<PortMapping>, SubError> {
    let list = as_array(v).map_err(whole)?;
    if list.is_empty() {
        return Err(whole(
            "must contain at least one mapping (multi-net-spec §4.1.2.1.7)".into(),
        ));
    }
    let mut out = Vec::with_capacity(list.len());
    for (j, item) in list.iter().enumerate() {
        let at = |key: &str| {
            let sub = if key.is_empty() {
                format!("[{j}]")
            } else {
                format!("[{j}].{key}")
            };
            move |r: String| (sub, r)
        };
        let obj = as_object(item).map_err(at(""))?;
        let f = fold_object(obj, &PORT_MAPPING_KEYS);
        let port = |idx: usize| -> Result<u16, SubError> {
            let key = PORT_MAPPING_KEYS[idx];
            let v = f.known[idx]
                .map(|(_, v)| v)
                .ok_or_else(|| at(key)("required".into()))?;
            v.as_u64()
                .filter(|p| (1..=65535).contains(p))
                .map(|p| p as u16)
                .ok_or_else(|| {
                    at(key)(format!(
                        "must be an integer from 1 to 65535, got {}",
                        describe(v)
                    ))
                })
        };
        let host_port = port(0)?;
        let container_port = port(1)?;
        let protocol = match f.known[2] {
            None => "tcp".to_string(),
            Some((_, v)) => {
                let p = as_str(v).map_err(at("protocol"))?.to_ascii_lowercase();
                if !["tcp", "udp", "sctp"].contains(&p.as_str()) {
                    return Err(at("protocol")(format!(
                        "must be \"TCP\", \"UDP\" or \"SCTP\" (any case), got {}",
                        describe(v)
                    )));
                }
                p
            }
        };
        let host_ip = match f.known[3] {
            None => None,
            Some((_, v)) => {
                let s = as_str(v).map_err(at("hostIP"))?;
                // "" is Go's zero value, which runtimes send for "all addresses".
                if s.is_empty() {
                    None
                } else {
                    s.parse::<IpAddr>()
                        .map_err(|_| at("hostIP")(format!("{s:?} is not an IP address")))?;
                    Some(s.to_string())
                }
            }
        };
        for (key, _) in f.unknown {
            warnings.push(format!("{path}[{j}].{key}: unknown key ignored"));
        }
        out.push(PortMapping {
            host_port,
            container_port,
            protocol,
            host_ip,
        });
    }
    Ok(out)
}

const BANDWIDTH_KEYS: [&str; 4] = ["ingressRate", "ingressBurst", "egressRate", "egressBurst"];

fn decode_bandwidth(v: &Value) -> Result<Bandwidth, SubError> {
    let obj = as_object(v).map_err(whole)?;
    let f = fold_object(obj, &BANDWIDTH_KEYS);
    if let Some((key, _)) = f.unknown.first() {
        return Err((
            format!(".{key}"),
            format!(
                "unknown key; allowed: {} (multi-net-spec §4.1.2.1.8)",
                BANDWIDTH_KEYS.join(", ")
            ),
        ));
    }
    let mut values = [None; 4];
    for (idx, slot) in values.iter_mut().enumerate() {
        if let Some((_, v)) = f.known[idx] {
            let n = v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                (
                    format!(".{}", BANDWIDTH_KEYS[idx]),
                    format!("must be a positive integer, got {}", describe(v)),
                )
            })?;
            *slot = Some(n);
        }
    }
    let [ingress_rate, ingress_burst, egress_rate, egress_burst] = values;
    if values.iter().all(Option::is_none) {
        return Err(whole(format!(
            "must contain at least one of {} (multi-net-spec §4.1.2.1.8)",
            BANDWIDTH_KEYS.join(", ")
        )));
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
    Ok(Bandwidth {
        ingress_rate,
        ingress_burst,
        egress_rate,
        egress_burst,
    })
}

impl NetworkSelectionElement {
    /// The NetworkAttachmentDefinition this element selects.
    pub fn network_ref(&self, pod_namespace: &str) -> NetworkRef {
        NetworkRef::new(
            self.namespace.as_deref().unwrap_or(pod_namespace),
            self.name.as_str(),
        )
    }

    /// The element in the JSON list format (§4.1.2.1 keys in spec order, then
    /// the extension keys as written).
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), json!(self.name));
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                m.insert(k.into(), v);
            }
        };
        put("namespace", self.namespace.as_ref().map(|v| json!(v)));
        put("ips", self.ips.as_ref().map(|v| json!(v)));
        put("mac", self.mac.as_ref().map(|v| json!(v)));
        put("interface", self.interface.as_ref().map(|v| json!(v)));
        put("cni-args", self.cni_args.clone().map(Value::Object));
        put("portMappings", self.port_mappings_runtime_config());
        put(
            "bandwidth",
            self.bandwidth.as_ref().map(|b| b.to_value(None)),
        );
        put(
            "default-route",
            self.default_route
                .as_ref()
                .map(|gws| json!(gws.iter().map(|g| g.to_string()).collect::<Vec<_>>())),
        );
        put(
            "infiniband-guid",
            self.infiniband_guid.as_ref().map(|v| json!(v)),
        );
        put(
            "ipam-claim-reference",
            self.ipam_claim_reference.as_ref().map(|v| json!(v)),
        );
        for (k, v) in &self.extensions {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }

    /// runtimeConfig `portMappings` in the cni-CONVENTIONS form:
    /// `[{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]`, with
    /// `hostIP` when set.
    pub fn port_mappings_runtime_config(&self) -> Option<Value> {
        let pms = self.port_mappings.as_ref()?;
        Some(Value::Array(
            pms.iter()
                .map(|p| {
                    let mut v = json!({
                        "hostPort": p.host_port,
                        "containerPort": p.container_port,
                        "protocol": p.protocol,
                    });
                    if let Some(ip) = &p.host_ip {
                        v["hostIP"] = json!(ip);
                    }
                    v
                })
                .collect(),
        ))
    }

    /// runtimeConfig `bandwidth` in the cni-CONVENTIONS form, with a burst of
    /// [`DEFAULT_BURST_BITS`] for each rate given without one.
    pub fn bandwidth_runtime_config(&self) -> Option<Value> {
        self.bandwidth
            .as_ref()
            .map(|b| b.to_value(Some(DEFAULT_BURST_BITS)))
    }
}

impl Bandwidth {
    /// The set keys; with `default_burst`, a rate without a burst gets it.
    fn to_value(&self, default_burst: Option<u64>) -> Value {
        let mut m = Map::new();
        for (rate, burst, rk, bk) in [
            (
                self.ingress_rate,
                self.ingress_burst,
                "ingressRate",
                "ingressBurst",
            ),
            (
                self.egress_rate,
                self.egress_burst,
                "egressRate",
                "egressBurst",
            ),
        ] {
            let burst = burst.or(rate.and(default_burst));
            if let Some(r) = rate {
                m.insert(rk.into(), json!(r));
            }
            if let Some(b) = burst {
                m.insert(bk.into(), json!(b));
            }
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netattach::error::SpecError;

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
                    interface: Some("eth1".into()),
                    ..el("net-a")
                },
                NetworkSelectionElement {
                    namespace: Some("other-ns".into()),
                    interface: Some("net9".into()),
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
                interface: Some("eth1".into()),
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
                    ips: Some(vec!["1.2.3.4".into()]),
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
            Some(vec![
                "10.2.2.42/24".to_string(),
                "2001:db8::5/64".to_string()
            ])
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
        assert_eq!(
            Value::Object(e.cni_args.unwrap()),
            json!({"spoofchk": "on"})
        );
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
            Some(vec![PortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: "tcp".into(),
                host_ip: None
            }])
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
        assert_eq!(
            pm("[]"),
            "[0].portMappings: must contain at least one mapping (multi-net-spec §4.1.2.1.7)"
        );
        assert_eq!(pm("{}"), "[0].portMappings: must be a list, got {}");
        assert_eq!(pm("[5]"), "[0].portMappings[0]: must be an object, got 5");
        assert_eq!(
            pm(r#"[{"containerPort": 80}]"#),
            "[0].portMappings[0].hostPort: required"
        );
        assert_eq!(
            pm(r#"[{"hostPort": 80}]"#),
            "[0].portMappings[0].containerPort: required"
        );
        assert_eq!(
            pm(r#"[{"hostPort": 0, "containerPort": 80}]"#),
            "[0].portMappings[0].hostPort: must be an integer from 1 to 65535, got 0"
        );
        assert_eq!(
            pm(r#"[{"hostPort": 80, "containerPort": 65536}]"#),
            "[0].portMappings[0].containerPort: must be an integer from 1 to 65535, got 65536"
        );
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
            ingress_rate: Some(2048),
            ingress_burst: Some(300),
            egress_rate: Some(8000),
            egress_burst: Some(200),
        };
        assert_eq!(e.bandwidth, Some(want));
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
        assert_eq!(bw("[]"), "[0].bandwidth: must be an object, got []");
        assert_eq!(
            bw(r#"{"ingressRate": 0}"#),
            "[0].bandwidth.ingressRate: must be a positive integer, got 0"
        );
        assert_eq!(
            bw(r#"{"egressRate": -5}"#),
            "[0].bandwidth.egressRate: must be a positive integer, got -5"
        );
        assert!(bw(r#"{"egressRate": "1M"}"#).ends_with("got \"1M\""));
        assert_eq!(
            bw(r#"{"ingressRate": 1, "rate": 5}"#),
            "[0].bandwidth.rate: unknown key; allowed: ingressRate, ingressBurst, egressRate, \
             egressBurst (multi-net-spec §4.1.2.1.8)"
        );
        assert_eq!(
            bw(r#"{"ingressBurst": 300}"#),
            "[0].bandwidth.ingressBurst: requires \"ingressRate\" to be set too (multi-net-spec §4.1.2.1.8)"
        );
        assert_eq!(
            bw(r#"{"ingressRate": 1, "egressBurst": 300}"#),
            "[0].bandwidth.egressBurst: requires \"egressRate\" to be set too (multi-net-spec §4.1.2.1.8)"
        );
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
        assert_eq!(e.ips, Some(vec!["10.0.0.5/24".into()]));
        assert_eq!(e.mac.as_deref(), Some("02:00:00:00:00:01"));
        assert_eq!(e.interface.as_deref(), Some("net7"));
        assert!(e.cni_args.is_some());
        assert_eq!(e.port_mappings.as_ref().unwrap()[0].container_port, 8080);
        assert_eq!(e.bandwidth.as_ref().unwrap().ingress_rate, Some(5));
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
}
