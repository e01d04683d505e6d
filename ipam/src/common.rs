//! Configuration pieces host-local and static share, decoded as the Go
//! reference plugins decode them: keys match case-insensitively
//! ([`plexus_cni::casefold`]), `""` for an IP means none, unknown keys are
//! ignored, and every error names the field path.

use crate::error::IpamError;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use plexus_cni::casefold;
use plexus_cni::names::{ContainerId, IfName};
use plexus_cni::result::{parse_cidr, Route};
use plexus_cni::skel::Request;
use plexus_cni::CniVersion;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

/// Decode the request's whole configuration (IPAM plugins receive the upper
/// plugin's complete config, cni-SPEC §4) into `T`.
pub(crate) fn decode_config<T: DeserializeOwned>(req: &Request) -> Result<T, IpamError> {
    Ok(casefold::decode(&Value::Object(req.config.clone()))?)
}

/// Decode the request's `runtimeConfig` into `T`, errors prefixed with it.
pub(crate) fn decode_runtime_config<T: DeserializeOwned>(req: &Request) -> Result<T, IpamError> {
    casefold::decode(&Value::Object(req.runtime_config.clone()))
        .map_err(|e| e.within("runtimeConfig").into())
}

/// `{subnet, rangeStart, rangeEnd, gateway}` as written.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct IpRangeConf {
    pub subnet: Option<String>,
    #[serde(rename = "rangeStart")]
    pub range_start: Option<String>,
    #[serde(rename = "rangeEnd")]
    pub range_end: Option<String>,
    pub gateway: Option<String>,
}

/// The string at `field`, which must be there and not empty; else the
/// error says `reason`.
pub(crate) fn required<'a>(
    value: Option<&'a str>,
    field: &str,
    reason: &str,
) -> Result<&'a str, IpamError> {
    value
        .filter(|s| !s.is_empty())
        .ok_or_else(|| IpamError::config(field, reason))
}

/// `ipam.addresses[]` entries as written (static, whereabouts).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct AddressConf {
    pub address: Option<String>,
    pub gateway: Option<String>,
}

impl AddressConf {
    /// The address (required, CIDR notation, host bits kept) and its
    /// gateway, of one family; `path` is where it was written
    /// (`ipam.addresses[0]`).
    pub fn parse(&self, path: &str) -> Result<(IpNetwork, Option<IpAddr>), IpamError> {
        let text = required(
            self.address.as_deref(),
            &format!("{path}.address"),
            "missing: an address in CIDR notation (like \"10.1.0.5/16\")",
        )?;
        let address =
            parse_address(text).map_err(|r| IpamError::config(format!("{path}.address"), r))?;
        let gateway = parse_ip(self.gateway.as_deref(), &format!("{path}.gateway"))?;
        if let Some(gw) = gateway.filter(|gw| gw.is_ipv4() != address.is_ipv4()) {
            return Err(IpamError::config(
                format!("{path}.gateway"),
                format!("{gw} and the address {address} are of different address families"),
            ));
        }
        Ok((address, gateway))
    }
}

/// `ipam.dns` as written (static, whereabouts).
pub(crate) use plexus_cni::result::DnsConf;

/// `routes[]` entries as written: the same shape as a result's routes.
pub(crate) use plexus_cni::result::RouteJson as RouteConf;

/// What an IPAM plugin reads of the network configuration: its `ipam`
/// section, decoded as `I`, and `args`.
#[derive(Deserialize)]
pub(crate) struct NetConf<I> {
    pub ipam: Option<I>,
    pub args: Option<ArgsConf>,
}

/// `args` (cni-CONVENTIONS "args in network config"): `args.cni.ips`, and
/// plexus's own namespace `args.plexus`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ArgsConf {
    pub cni: Option<CniArgsConf>,
    pub plexus: Option<PlexusArgsConf>,
}

/// `args.plexus`: what plexus tells its built-in IPAM beyond the conventions.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct PlexusArgsConf {
    /// Who holds the addresses instead of the container: an IPAMClaim
    /// (multi-net-spec §8), whose addresses outlive the pod.
    #[serde(rename = "persistentOwner")]
    pub persistent_owner: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct CniArgsConf {
    pub ips: Option<Vec<String>>,
}

impl ArgsConf {
    pub fn ips(args: &Option<ArgsConf>) -> &[String] {
        args.as_ref()
            .and_then(|a| a.cni.as_ref())
            .and_then(|c| c.ips.as_deref())
            .unwrap_or_default()
    }

    /// `args.plexus.persistentOwner`, checked: it takes the container ID's
    /// place in an allocation file, so it is one non-empty line.
    pub fn persistent_owner(args: &Option<ArgsConf>) -> Result<Option<&str>, IpamError> {
        let owner = args
            .as_ref()
            .and_then(|a| a.plexus.as_ref())
            .and_then(|p| p.persistent_owner.as_deref());
        match owner {
            Some(o) if o.trim().is_empty() || o.contains(['\r', '\n', '\0']) => {
                Err(IpamError::config(
                    "args.plexus.persistentOwner",
                    format!("{o:?} must be one non-empty line"),
                ))
            }
            owner => Ok(owner),
        }
    }
}

/// An optional IP address (`""` is none, as Go's `net.IP` decodes it), in
/// canonical form: IPv4-mapped IPv6 addresses become IPv4, as the reference's
/// `canonicalizeIP` does.
pub(crate) fn parse_ip(s: Option<&str>, path: &str) -> Result<Option<IpAddr>, IpamError> {
    match s.filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => s
            .parse::<IpAddr>()
            .map(|ip| Some(ip.to_canonical()))
            .map_err(|_| IpamError::config(path, format!("{s:?} is not an IP address"))),
    }
}

/// `<ip>[/<prefix>]` (cni-CONVENTIONS `ips`): the address; a prefix, when
/// given, must be valid but is otherwise ignored, as the reference does.
pub(crate) fn parse_requested_ip(s: &str) -> Result<IpAddr, String> {
    let ip = if s.contains('/') {
        parse_cidr(s).map(|n| n.ip())?
    } else {
        s.parse::<IpAddr>()
            .map_err(|_| format!("{s:?} is not an IP address (expected <ip>[/<prefix>])"))?
    };
    Ok(ip.to_canonical())
}

/// `routes` as written under `path` (`ipam.routes`).
pub(crate) fn parse_routes(
    list: Option<&[RouteConf]>,
    path: &str,
) -> Result<Vec<Route>, IpamError> {
    list.unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, r)| {
            // A config error (code 7), not a result decoding error.
            let mut route = r
                .clone()
                .into_route(&format!("{path}[{i}]"))
                .map_err(IpamError::BadRoute)?;
            route.gw = route.gw.map(|gw| gw.to_canonical());
            if let Some(gw) = route.gw {
                if gw.is_ipv4() != route.dst.is_ipv4() {
                    return Err(IpamError::config(
                        format!("{path}[{i}].gw"),
                        format!(
                            "{gw} and the destination {} are of different address families",
                            route.dst
                        ),
                    ));
                }
            }
            Ok(route)
        })
        .collect()
}

/// The `CNI_CONTAINERID` and `CNI_IFNAME` of an attachment command, both
/// validated when the environment was read.
pub(crate) fn attachment(req: &Request) -> Result<(&ContainerId, &IfName), IpamError> {
    let params = req.env.require_attachment()?;
    Ok((&params.container_id, &params.ifname))
}

/// Results of CNI 0.1.0 and 0.2.0 hold one address per family (`ip4`,
/// `ip6`); the reference refuses configurations that would yield more.
pub(crate) fn check_legacy_families(
    version: CniVersion,
    addresses: impl Iterator<Item = IpAddr>,
) -> Result<(), IpamError> {
    if !version.has_legacy_result() {
        return Ok(());
    }
    let (v4, v6) = addresses.fold(
        (0, 0),
        |(a, b), ip| {
            if ip.is_ipv4() {
                (a + 1, b)
            } else {
                (a, b + 1)
            }
        },
    );
    if v4 > 1 || v6 > 1 {
        return Err(IpamError::IncompatibleVersion {
            field: "cniVersion".into(),
            reason: format!(
                "CNI {version} results hold at most one IPv4 and one IPv6 address, \
                 this configuration yields {v4} IPv4 and {v6} IPv6 addresses; use 0.3.0 or later"
            ),
        });
    }
    Ok(())
}

/// Whether an error came from `CNI_ARGS` (code 4) rather than the config.
pub(crate) fn env_or_config(from_env: bool, path: &str, reason: String) -> IpamError {
    if from_env {
        IpamError::env(path, reason)
    } else {
        IpamError::config(path, reason)
    }
}

/// An address in CIDR notation (host bits kept), canonical; the error is
/// the reason.
pub(crate) fn parse_address(s: &str) -> Result<IpNetwork, String> {
    parse_cidr(s).map(|n| IpNetwork::new(n.ip().to_canonical(), prefix_for(n)).unwrap_or(n))
}

/// The prefix of `n` once its address is canonical (`::ffff:10.0.0.1/120`
/// is `10.0.0.1/24`).
fn prefix_for(n: IpNetwork) -> u8 {
    match (n.ip(), n.ip().to_canonical()) {
        (IpAddr::V6(_), IpAddr::V4(_)) => n.prefix().saturating_sub(96),
        _ => n.prefix(),
    }
}
