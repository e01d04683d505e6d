//! whereabouts' configuration keys (its `pkg/types.IPAMConfig` and
//! `pkg/config.LoadIPAMConfig` at 467b3c28), decoded as its Go decoder does
//! (keys match case-insensitively), merged with its flat file, and checked:
//! every key is honoured, or refused naming it, or (the keys of whereabouts'
//! leader election and logging, which have nothing to act on in plexus)
//! accepted without effect, as the README's "From whereabouts" says.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ipnetwork::IpNetwork;
use plexus_cni::casefold;
use plexus_cni::result::{CniResult, IpConfig};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::pool::SliceSize;
use crate::common::{
    parse_address, parse_ip, parse_routes, required, AddressConf, DnsConf, RouteConf,
};
use crate::error::IpamError;
use crate::range::{from_u128, to_u128};

/// Where whereabouts looks for its flat file after `configuration_path`
/// (`GetFlatIPAM`), in order; the first that exists is read.
pub const FLAT_FILES: &[&str] = &[
    "/etc/kubernetes/cni/net.d/whereabouts.d/whereabouts.conf",
    "/etc/cni/net.d/whereabouts.d/whereabouts.conf",
    "/host/etc/cni/net.d/whereabouts.d/whereabouts.conf",
];

/// The `ipam` section as written (and the flat file, the same keys).
#[derive(Debug, Default, Deserialize)]
struct Keys {
    range: Option<String>,
    range_start: Option<String>,
    range_end: Option<String>,
    exclude: Option<Vec<String>>,
    #[serde(rename = "ipRanges")]
    ip_ranges: Option<Vec<RangeKeys>>,
    gateway: Option<String>,
    routes: Option<Vec<RouteConf>>,
    dns: Option<DnsConf>,
    addresses: Option<Vec<AddressConf>>,
    network_name: Option<String>,
    enable_overlapping_ranges: Option<bool>,
    node_slice_size: Option<String>,
    kubernetes: Option<KubernetesKeys>,
    datastore: Option<String>,
    sleep_for_race: Option<i64>,
    // The `etcd_*` keys are refused by name (`refuse_etcd`). Accepted
    // without effect, as unknown keys are (module doc): `leader_*` (plexus
    // takes no Lease), `log_file` and `log_level` (plexus logs through its
    // own settings), `reconciler_cron_expression`.
}

#[derive(Debug, Default, Deserialize)]
struct RangeKeys {
    range: Option<String>,
    range_start: Option<String>,
    range_end: Option<String>,
    exclude: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
struct KubernetesKeys {
    kubeconfig: Option<String>,
    k8s_api_root: Option<String>,
}

/// One range a pool serves: `range` in network form (the IPPool's
/// `spec.range`, and its name's part), and the addresses of it handed out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolRange {
    /// The network, host bits cleared (`10.77.0.0/24`).
    pub network: IpNetwork,
    /// `range_start`, or the range's first usable address.
    pub start: Option<IpAddr>,
    /// `range_end`, or the range's last usable address.
    pub end: Option<IpAddr>,
    /// `exclude`: networks (an address alone is its /32 or /128).
    pub exclude: Vec<IpNetwork>,
}

/// A whereabouts configuration, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct WhereaboutsConf {
    /// The ranges, `range` first, then `ipRanges` (dual-stack): one address
    /// of each.
    pub ranges: Vec<PoolRange>,
    pub gateway: Option<IpAddr>,
    /// What every ADD result carries besides the ranges' addresses:
    /// `addresses` (handed out as they are), `routes` and `dns`.
    pub result: CniResult,
    /// `network_name`: pools and reservations of other networks are apart.
    pub network_name: Option<String>,
    /// `enable_overlapping_ranges` (default on, as whereabouts): an address
    /// is also reserved cluster-wide (OverlappingRangeIPReservation), so
    /// that pools whose ranges overlap never give it twice.
    pub overlapping_ranges: bool,
    pub node_slice_size: Option<SliceSize>,
    /// `kubernetes.kubeconfig`: whose cluster, and (its context's
    /// namespace, else `kube-system`) where the pools live.
    pub kubeconfig: Option<PathBuf>,
    /// The flat file that was merged in, if any.
    pub flat_file: Option<PathBuf>,
}

/// The IPAM section `ipam` of a network configuration, merged with the flat
/// file whereabouts would read (`configuration_path`, then
/// [`FLAT_FILES`]; `read` reads one, `Ok(None)` when it does not exist).
pub fn parse(
    ipam: &Map<String, Value>,
    read: impl Fn(&Path) -> Result<Option<String>, IpamError>,
) -> Result<WhereaboutsConf, IpamError> {
    let mut section = ipam.clone();
    let path_key = key_of(&section, "configuration_path");
    let configured = match path_key.and_then(|k| section.get(k)) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(PathBuf::from(s)),
        Some(_) => {
            return Err(IpamError::config(
                "ipam.configuration_path",
                "must be a string: the path of whereabouts' flat file",
            ))
        }
    };
    let mut flat_file = None;
    let candidates = configured
        .iter()
        .cloned()
        .chain(FLAT_FILES.iter().map(PathBuf::from));
    for path in candidates {
        if let Some(text) = read(&path)? {
            let flat: Value = serde_json::from_str(&text).map_err(|e| {
                IpamError::config(
                    path.display().to_string(),
                    format!("whereabouts' flat file is not JSON: {e}"),
                )
            })?;
            let Value::Object(flat) = flat else {
                return Err(IpamError::config(
                    path.display().to_string(),
                    "whereabouts' flat file must hold a JSON object",
                ));
            };
            // Its `enable_overlapping_ranges` never overrides the
            // section's (`LoadIPAMConfig` keeps the section's).
            fill_empty(&mut section, &flat, &["enable_overlapping_ranges"]);
            flat_file = Some(path);
            break;
        }
    }
    refuse_etcd(&section)?;
    let keys: Keys = decode(&section, "ipam")?;
    let mut conf = check(keys)?;
    conf.flat_file = flat_file;
    Ok(conf)
}

fn decode<T: serde::de::DeserializeOwned>(
    section: &Map<String, Value>,
    path: &str,
) -> Result<T, IpamError> {
    casefold::decode(&Value::Object(section.clone())).map_err(|e| IpamError::from(e.within(path)))
}

/// The key of `map` that matches `name` as Go's decoder does (exact first,
/// then case-insensitively).
fn key_of<'m>(map: &'m Map<String, Value>, name: &str) -> Option<&'m String> {
    map.keys()
        .find(|k| *k == name)
        .or_else(|| map.keys().find(|k| k.eq_ignore_ascii_case(name)))
}

/// Go's zero value, which `mergo.Merge` fills: absent, null, "", 0, false,
/// or an empty list.
fn is_empty(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Bool(b)) => !b,
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(_)) => false,
    }
}

/// `mergo.Merge(section, flat)`: each key the section leaves empty takes the
/// flat file's value; objects merge key by key. `keep` are the section's
/// whatever they are.
fn fill_empty(section: &mut Map<String, Value>, flat: &Map<String, Value>, keep: &[&str]) {
    for (key, value) in flat {
        if keep.iter().any(|k| k.eq_ignore_ascii_case(key)) {
            continue;
        }
        let own = key_of(section, key).cloned();
        match (own.as_ref().and_then(|k| section.get_mut(k)), value) {
            (Some(Value::Object(mine)), Value::Object(theirs)) => fill_empty(mine, theirs, &[]),
            (mine, _) if is_empty(mine.as_deref()) => {
                section.insert(own.unwrap_or_else(|| key.clone()), value.clone());
            }
            _ => {}
        }
    }
}

/// whereabouts' `etcd_host`, `etcd_username`, `etcd_password`,
/// `etcd_key_file`, `etcd_cert_file`, `etcd_ca_cert_file`: set, each is
/// refused by name.
fn refuse_etcd(section: &Map<String, Value>) -> Result<(), IpamError> {
    for (key, value) in section {
        let etcd = key
            .get(..5)
            .is_some_and(|p| p.eq_ignore_ascii_case("etcd_"));
        if etcd && !is_empty(Some(value)) {
            return Err(IpamError::config(
                format!("ipam.{key}"),
                "there is no etcd datastore: pools live on the Kubernetes API",
            ));
        }
    }
    Ok(())
}

fn refuse_if_set(value: &Option<String>, key: &str, reason: &str) -> Result<(), IpamError> {
    match value.as_deref() {
        Some(v) if !v.is_empty() => Err(IpamError::config(key, reason)),
        _ => Ok(()),
    }
}

fn check(keys: Keys) -> Result<WhereaboutsConf, IpamError> {
    match keys.datastore.as_deref() {
        None | Some("") | Some("kubernetes") => {}
        Some(other) => {
            return Err(IpamError::config(
                "ipam.datastore",
                format!(
                    "{other:?}: plexus keeps whereabouts' pools on the Kubernetes API only \
                     (\"kubernetes\"); whereabouts itself dropped its etcd datastore"
                ),
            ))
        }
    }
    if keys.sleep_for_race.unwrap_or(0) != 0 {
        return Err(IpamError::config(
            "ipam.sleep_for_race",
            "a test knob of whereabouts (a sleep before each pool write); plexus has no use for it",
        ));
    }
    let kubernetes = keys.kubernetes.unwrap_or_default();
    refuse_if_set(
        &kubernetes.k8s_api_root,
        "ipam.kubernetes.k8s_api_root",
        "not read by whereabouts either: name the cluster with kubernetes.kubeconfig",
    )?;

    let mut ranges = Vec::new();
    if let Some(range) = keys.range.as_deref().filter(|r| !r.is_empty()) {
        ranges.push(pool_range(
            range,
            keys.range_start.as_deref(),
            keys.range_end.as_deref(),
            keys.exclude.as_deref().unwrap_or_default(),
            "ipam",
        )?);
    } else {
        for (key, value) in [
            ("ipam.range_start", &keys.range_start),
            ("ipam.range_end", &keys.range_end),
        ] {
            refuse_if_set(value, key, "has no `range` to apply to")?;
        }
        if !keys.exclude.as_deref().unwrap_or_default().is_empty() {
            return Err(IpamError::config(
                "ipam.exclude",
                "has no `range` to apply to (each ipRanges entry has its own exclude)",
            ));
        }
    }
    for (i, r) in keys.ip_ranges.iter().flatten().enumerate() {
        let path = format!("ipam.ipRanges[{i}]");
        let range = required(
            r.range.as_deref(),
            &format!("{path}.range"),
            "is required: the range in CIDR notation",
        )?;
        ranges.push(pool_range(
            range,
            r.range_start.as_deref(),
            r.range_end.as_deref(),
            r.exclude.as_deref().unwrap_or_default(),
            &path,
        )?);
    }
    if ranges.is_empty() {
        return Err(IpamError::config(
            "ipam.range",
            "whereabouts needs a range: `range` or `ipRanges`",
        ));
    }

    let node_slice_size = match keys.node_slice_size.as_deref() {
        None | Some("") => None,
        Some(size) => Some(node_slices(size, &ranges)?),
    };
    let ips = keys
        .addresses
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, a)| {
            let (address, gateway) = a.parse(&format!("ipam.addresses[{i}]"))?;
            Ok(IpConfig {
                address,
                gateway,
                interface: None,
            })
        })
        .collect::<Result<Vec<_>, IpamError>>()?;
    Ok(WhereaboutsConf {
        ranges,
        gateway: parse_ip(keys.gateway.as_deref(), "ipam.gateway")?,
        result: CniResult {
            cni_version: None,
            interfaces: Vec::new(),
            ips,
            routes: parse_routes(keys.routes.as_deref(), "ipam.routes")?,
            dns: keys.dns.as_ref().map(DnsConf::to_dns).unwrap_or_default(),
        },
        network_name: keys.network_name.filter(|n| !n.is_empty()),
        overlapping_ranges: keys.enable_overlapping_ranges.unwrap_or(true),
        node_slice_size,
        kubeconfig: kubernetes
            .kubeconfig
            .filter(|k| !k.is_empty())
            .map(PathBuf::from),
        flat_file: None,
    })
}

/// `range` (`10.0.0.0/24`, or whereabouts' `10.0.0.5-10.0.0.9/24`: a first
/// address, a dash, then the last address with the prefix), `range_start`,
/// `range_end` and `exclude` of one range, under `path`.
fn pool_range(
    range: &str,
    start: Option<&str>,
    end: Option<&str>,
    exclude: &[String],
    path: &str,
) -> Result<PoolRange, IpamError> {
    let bad = |key: &str, reason: String| IpamError::config(format!("{path}.{key}"), reason);
    let (dashed_start, cidr) = match range.split_once('-') {
        Some((first, rest)) => (Some(first), rest),
        None => (None, range),
    };
    let written = parse_address(cidr).map_err(|r| bad("range", r))?;
    let network = IpNetwork::new(written.network(), written.prefix())
        .map_err(|e| bad("range", e.to_string()))?;
    if network.size_u128() < 4 {
        return Err(bad(
            "range",
            format!("{range:?} has no usable address (whereabouts keeps the network and broadcast addresses out)"),
        ));
    }
    let mut start = parse_ip(start, &format!("{path}.range_start"))?;
    let mut end = parse_ip(end, &format!("{path}.range_end"))?;
    if let Some(first) = dashed_start {
        let first = parse_ip(Some(first), &format!("{path}.range"))?;
        start = first;
        end = Some(written.ip());
    }
    let (first, last) = usable(network);
    for (key, ip) in [("range_start", start), ("range_end", end)] {
        if let Some(ip) = ip {
            let inside = ip.is_ipv4() == network.is_ipv4()
                && to_u128(ip) >= to_u128(first)
                && to_u128(ip) <= to_u128(last);
            if !inside {
                return Err(bad(
                    key,
                    format!("{ip} is not a usable address of {network} ({first} to {last})"),
                ));
            }
        }
    }
    if let (Some(s), Some(e)) = (start, end) {
        if to_u128(s) > to_u128(e) {
            return Err(bad("range_end", format!("{e} is before range_start {s}")));
        }
    }
    let exclude = exclude
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let parsed = if x.contains('/') {
                parse_address(x).map(|n| IpNetwork::new(n.network(), n.prefix()).unwrap_or(n))
            } else {
                x.parse::<IpAddr>()
                    .map(|ip| IpNetwork::from(ip.to_canonical()))
                    .map_err(|_| format!("{x:?} is neither a CIDR nor an IP address"))
            };
            parsed.map_err(|r| bad(&format!("exclude[{i}]"), r))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(PoolRange {
        network,
        start,
        end,
        exclude,
    })
}

/// `CNI_ARGS`' `IP` and `GATEWAY` (whereabouts' `handleEnvArgs`): each
/// address of `IP` (comma-separated, with its prefix: `10.1.1.5/24`) is
/// handed out as it is, as `addresses` are; each gateway of `GATEWAY` is
/// given to the static addresses whose network contains it.
pub fn with_cni_args(
    result: &mut CniResult,
    ip: Option<&str>,
    gateway: Option<&str>,
) -> Result<(), IpamError> {
    let env = |key: &str, reason: String| IpamError::Env {
        var: "CNI_ARGS".into(),
        reason: format!("{key}: {reason}"),
    };
    let items = |text: Option<&str>| -> Vec<String> {
        text.into_iter()
            .flat_map(|t| t.split(','))
            .map(|i| i.trim().to_string())
            .filter(|i| !i.is_empty())
            .collect()
    };
    for item in items(ip) {
        let address: IpNetwork = item
            .parse()
            .ok()
            .filter(|_| item.contains('/'))
            .ok_or_else(|| env("IP", format!("{item:?} is not an address with its prefix")))?;
        result.ips.push(IpConfig {
            address,
            gateway: None,
            interface: None,
        });
    }
    for item in items(gateway) {
        let gw: IpAddr = item
            .parse()
            .map_err(|_| env("GATEWAY", format!("{item:?} is not an address")))?;
        for config in result.ips.iter_mut().filter(|c| c.address.contains(gw)) {
            config.gateway = Some(gw);
        }
    }
    Ok(())
}

/// `node_slice_size`, checked against the one range it slices (a
/// NodeSlicePool slices one: whereabouts slices `ipRanges[0]` and gives
/// every other range that node's slice of it).
fn node_slices(size: &str, ranges: &[PoolRange]) -> Result<SliceSize, IpamError> {
    let field = "ipam.node_slice_size";
    let size = SliceSize::parse(size).map_err(|reason| IpamError::config(field, reason))?;
    if ranges.len() > 1 {
        return Err(IpamError::config(
            field,
            format!(
                "slices one range, and this configuration has {} (a NodeSlicePool holds one)",
                ranges.len()
            ),
        ));
    }
    size.check(ranges[0].network)
        .map_err(|reason| IpamError::config(field, reason))?;
    Ok(size)
}

/// The first and last usable addresses of `network`: its network and
/// broadcast (all-ones) addresses are kept out, for IPv6 too, as
/// whereabouts' `GetIPRange` does.
pub fn usable(network: IpNetwork) -> (IpAddr, IpAddr) {
    let base = to_u128(network.network());
    let v4 = network.is_ipv4();
    let bits = if v4 { 32 } else { 128 };
    // The host bits all ones: the last address, computed so that a network
    // at the top of the address space (`f800::/5`) does not overflow.
    let hosts = 1u128
        .checked_shl(bits - u32::from(network.prefix()))
        .map_or(u128::MAX, |size| size - 1);
    let last = base | hosts;
    (
        from_u128(base.saturating_add(1), v4),
        from_u128(last.saturating_sub(1), v4),
    )
}

trait SizeU128 {
    fn size_u128(&self) -> u128;
}

impl SizeU128 for IpNetwork {
    /// How many addresses: 2^(bits - prefix), saturating for a /0 of IPv6.
    fn size_u128(&self) -> u128 {
        let bits = if self.is_ipv4() { 32 } else { 128 };
        1u128
            .checked_shl(bits - u32::from(self.prefix()))
            .unwrap_or(u128::MAX)
    }
}

#[cfg(test)]
mod tests {

    /// A range at the top of the address space has usable addresses, not
    /// an overflow (found by the fuzz target `whereabouts_conf`:
    /// `"range": "fd20::/05"` is `f800::/5`, whose end is 2^128).
    #[test]
    fn a_range_at_the_top_of_the_address_space_has_a_last_address() {
        let top: IpNetwork = "f800::/5".parse().unwrap();
        let (first, last) = usable(top);
        assert_eq!(first, "f800::1".parse::<IpAddr>().unwrap());
        assert_eq!(
            last,
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"
                .parse::<IpAddr>()
                .unwrap()
        );
        let all: IpNetwork = "::/0".parse().unwrap();
        assert_eq!(
            usable(all).1,
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"
                .parse::<IpAddr>()
                .unwrap()
        );
        let v4: IpNetwork = "10.10.0.0/16".parse().unwrap();
        assert_eq!(
            usable(v4),
            (
                "10.10.0.1".parse().unwrap(),
                "10.10.255.254".parse().unwrap()
            )
        );
        let ipam = serde_json::json!({"type": "whereabouts", "range": "fd20::/05"});
        let parsed = parse(ipam.as_object().unwrap(), |_| Ok(None)).unwrap();
        assert_eq!(parsed.ranges.len(), 1);
    }
    use super::*;
    use serde_json::json;

    fn ipam(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn no_files(_: &Path) -> Result<Option<String>, IpamError> {
        Ok(None)
    }

    /// The field a configuration error names (a type error is the
    /// decoder's, with the path in its details).
    fn field_of(e: IpamError) -> String {
        match e {
            IpamError::Config { field, .. } => field,
            IpamError::Cni(e) if e.code == plexus_cni::error::ErrorCode::InvalidConfig => {
                e.details.split(':').next().unwrap().to_string()
            }
            other => panic!("not a config error: {other:?}"),
        }
    }

    #[test]
    fn range_forms_as_load_ipam_config_reads_them() {
        let c = parse(
            &ipam(json!({"type": "whereabouts", "range": "10.77.0.9/24"})),
            no_files,
        )
        .unwrap();
        assert_eq!(c.ranges[0].network.to_string(), "10.77.0.0/24");
        assert_eq!((c.ranges[0].start, c.ranges[0].end), (None, None));
        assert!(c.overlapping_ranges, "on unless turned off");
        // `<first>-<last>/<prefix>`.
        let c = parse(&ipam(json!({"range": "10.77.0.5-10.77.0.9/24"})), no_files).unwrap();
        let r = &c.ranges[0];
        assert_eq!(r.network.to_string(), "10.77.0.0/24");
        assert_eq!(r.start.unwrap().to_string(), "10.77.0.5");
        assert_eq!(r.end.unwrap().to_string(), "10.77.0.9");
        // Keys match as Go's decoder matches them; ipRanges follow `range`.
        let c = parse(
            &ipam(json!({"Range": "10.0.0.0/30", "ipRanges": [
                {"range": "fd00::/64", "exclude": ["fd00::1", "fd00::10/124"]}],
                "enable_overlapping_ranges": false, "network_name": "blue"})),
            no_files,
        )
        .unwrap();
        assert_eq!(c.ranges.len(), 2);
        assert_eq!(c.ranges[1].exclude[0].to_string(), "fd00::1/128");
        assert_eq!(c.ranges[1].exclude[1].to_string(), "fd00::10/124");
        assert!(!c.overlapping_ranges);
        assert_eq!(c.network_name.as_deref(), Some("blue"));
    }

    #[test]
    fn the_flat_file_fills_what_the_section_leaves_empty() {
        // GetFlatIPAM + mergo.Merge: configuration_path first; the
        // section's enable_overlapping_ranges always wins.
        let read = |p: &Path| -> Result<Option<String>, IpamError> {
            Ok((p == Path::new("/x/wb.conf")).then(|| {
                json!({"datastore": "kubernetes", "range": "10.9.0.0/16",
                       "enable_overlapping_ranges": true,
                       "kubernetes": {"kubeconfig": "/k/wb.kubeconfig"}})
                .to_string()
            }))
        };
        let c = parse(
            &ipam(
                json!({"range": "10.77.0.0/24", "configuration_path": "/x/wb.conf",
                         "enable_overlapping_ranges": false, "kubernetes": {}}),
            ),
            read,
        )
        .unwrap();
        assert_eq!(c.ranges[0].network.to_string(), "10.77.0.0/24");
        assert_eq!(c.kubeconfig.unwrap(), Path::new("/k/wb.kubeconfig"));
        assert!(!c.overlapping_ranges);
        assert_eq!(c.flat_file.unwrap(), Path::new("/x/wb.conf"));
        // Without a configuration_path, the first of FLAT_FILES there is.
        let read =
            |p: &Path| -> Result<Option<String>, IpamError> {
                Ok((p == Path::new(FLAT_FILES[1]))
                    .then(|| json!({"range": "10.1.0.0/24"}).to_string()))
            };
        let c = parse(&ipam(json!({})), read).unwrap();
        assert_eq!(c.ranges[0].network.to_string(), "10.1.0.0/24");
        let bad = |_: &Path| -> Result<Option<String>, IpamError> { Ok(Some("{".into())) };
        let e = parse(&ipam(json!({"range": "10.0.0.0/24"})), bad).unwrap_err();
        assert_eq!(
            field_of(e),
            "/etc/kubernetes/cni/net.d/whereabouts.d/whereabouts.conf"
        );
    }

    #[test]
    fn keys_plexus_cannot_honour_are_refused_naming_them() {
        let r = json!("10.0.0.0/24");
        let cases = [
            (json!({"range": r, "datastore": "etcd"}), "ipam.datastore"),
            (json!({"range": r, "etcd_host": "h:2379"}), "ipam.etcd_host"),
            (
                json!({"range": r, "sleep_for_race": 2}),
                "ipam.sleep_for_race",
            ),
            (
                json!({"range": r, "kubernetes": {"k8s_api_root": "https://x"}}),
                "ipam.kubernetes.k8s_api_root",
            ),
            (json!({}), "ipam.range"),
            (json!({"range": "10.0.0.0/31"}), "ipam.range"),
            (json!({"range": "10.0.0.0"}), "ipam.range"),
            (
                json!({"range": r, "range_start": "10.0.1.1"}),
                "ipam.range_start",
            ),
            (
                json!({"range": r, "range_end": "10.0.0.255"}),
                "ipam.range_end",
            ),
            (
                json!({"range": r, "range_start": "10.0.0.9", "range_end": "10.0.0.3"}),
                "ipam.range_end",
            ),
            (json!({"range": r, "exclude": ["x"]}), "ipam.exclude[0]"),
            (json!({"exclude": ["10.0.0.1"]}), "ipam.exclude"),
            (json!({"ipRanges": [{}]}), "ipam.ipRanges[0].range"),
            (json!({"range": r, "gateway": "gw"}), "ipam.gateway"),
            (
                json!({"range": r, "node_slice_size": "/x"}),
                "ipam.node_slice_size",
            ),
            (
                json!({"range": r, "node_slice_size": "/16"}),
                "ipam.node_slice_size",
            ),
            (
                json!({"ipRanges": [{"range": r}, {"range": "fd00::/64"}], "node_slice_size": "/28"}),
                "ipam.node_slice_size",
            ),
            (
                json!({"range": r, "addresses": [{"address": "10.1.1.1"}]}),
                "ipam.addresses[0].address",
            ),
            (json!({"range": 5}), "ipam.range"),
        ];
        for (section, field) in cases {
            let e = parse(&ipam(section.clone()), no_files).unwrap_err();
            assert_eq!(field_of(e), field, "{section}");
        }
    }

    #[test]
    fn cni_args_ip_and_gateway_as_handle_env_args() {
        let mut result = CniResult::default();
        with_cni_args(
            &mut result,
            Some("10.1.1.5/24, fd01::5/64"),
            Some("10.1.1.1,fd01::1"),
        )
        .unwrap();
        let shown: Vec<(String, Option<String>)> = result
            .ips
            .iter()
            .map(|c| (c.address.to_string(), c.gateway.map(|g| g.to_string())))
            .collect();
        assert_eq!(
            shown,
            [
                ("10.1.1.5/24".to_string(), Some("10.1.1.1".to_string())),
                ("fd01::5/64".to_string(), Some("fd01::1".to_string()))
            ]
        );
        for (ip, gw) in [
            (Some("10.1.1.5"), None),
            (Some("x/24"), None),
            (None, Some("gw")),
        ] {
            let e = with_cni_args(&mut CniResult::default(), ip, gw).unwrap_err();
            assert!(
                matches!(e, IpamError::Env { ref var, .. } if var == "CNI_ARGS"),
                "{e}"
            );
        }
    }

    #[test]
    fn accepted_keys_without_effect_are_not_errors() {
        let c = parse(
            &ipam(
                json!({"range": "10.0.0.0/24", "leader_lease_duration": 1500,
                         "leader_renew_deadline": 1000, "leader_retry_period": 500,
                         "log_file": "/tmp/wb.log", "log_level": "debug",
                         "reconciler_cron_expression": "30 4 * * *",
                         "node_slice_size": "/28", "gateway": "10.0.0.1",
                         "routes": [{"dst": "0.0.0.0/0"}], "dns": {"nameservers": ["1.1.1.1"]},
                         "addresses": [{"address": "10.5.0.1/24", "gateway": "10.5.0.254"}]}),
            ),
            no_files,
        )
        .unwrap();
        assert_eq!(
            c.node_slice_size.map(|s| (s.prefix, s.text)),
            Some((28, "/28".into()))
        );
        assert_eq!(c.gateway.unwrap().to_string(), "10.0.0.1");
        assert_eq!(c.result.routes.len(), 1);
        assert_eq!(c.result.dns.nameservers, ["1.1.1.1"]);
        assert_eq!(c.result.ips[0].address.to_string(), "10.5.0.1/24");
    }
}
