//! `static`: fixed addresses from the configuration or the runtime, run
//! in-process. Nothing is stored, so DEL, GC and STATUS have nothing to do.
//!
//! # Compatible with the reference plugin (containernetworking/plugins)
//!
//! - Keys, read case-insensitively as Go does: `ipam.addresses`
//!   (`[{address, gateway}]`, the address in CIDR notation with its host
//!   bits), `ipam.routes`, `ipam.dns` (`{nameservers, domain, search,
//!   options}`).
//! - Where addresses come from, in the reference's order: the configured
//!   `addresses`, plus CNI_ARGS `IP` (comma-separated CIDRs); CNI_ARGS
//!   `GATEWAY` (comma-separated) becomes the gateway of every CNI_ARGS
//!   address whose subnet holds it (configured addresses keep theirs, as
//!   with the reference); a non-empty `args.cni.ips` then replaces all of those,
//!   and a non-empty runtimeConfig `ips` (capability) replaces everything
//!   (so its addresses carry no gateway). CNI_ARGS keys other than `IP` and
//!   `GATEWAY` need `IgnoreUnknown`.
//! - CNI 0.1.0/0.2.0 allow one address per family.
//! - CHECK needs `prevResult` and fails when a configured address appears
//!   there with another gateway.
//!
//! # What plexus does differently
//!
//! - CHECK also fails when a configured address is missing from
//!   `prevResult` (the reference lets that pass).
//! - A configured gateway of the other address family than its address is
//!   an error naming the field.
//! - GC and STATUS (CNI 1.1) succeed: there is no state to collect and
//!   nothing to run out of.

use crate::error::IpamError;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use plexus_cni::result::{CniResult, Dns, IpConfig, Route};
use plexus_cni::skel::{Request, TypedPlugin};
use serde::Deserialize;

use crate::common::{
    check_legacy_families, decode_config, decode_runtime_config, parse_address, parse_routes,
    AddressConf, ArgsConf, DnsConf, NetConf, RouteConf,
};

/// The static IPAM plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Static;

#[derive(Deserialize)]
struct IpamConf {
    #[serde(rename = "type")]
    _plugin_type: Option<String>,
    routes: Option<Vec<RouteConf>>,
    addresses: Option<Vec<AddressConf>>,
    dns: Option<DnsConf>,
}

#[derive(Deserialize)]
struct RuntimeConf {
    ips: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Address {
    address: IpNetwork,
    gateway: Option<IpAddr>,
    /// Where it came from, for errors.
    path: String,
}

#[derive(Debug)]
struct Config {
    addresses: Vec<Address>,
    routes: Vec<Route>,
    dns: Dns,
}

fn from_list(list: &[String], path: &str) -> Result<Vec<Address>, IpamError> {
    list.iter()
        .enumerate()
        .map(|(i, s)| {
            let path = format!("{path}[{i}]");
            Ok(Address {
                address: parse_address(s).map_err(|r| IpamError::config(&path, r))?,
                gateway: None,
                path,
            })
        })
        .collect()
}

impl Config {
    fn load(req: &Request) -> Result<Config, IpamError> {
        let conf: NetConf<IpamConf> = decode_config(req)?;
        let runtime: RuntimeConf = decode_runtime_config(req)?;
        let ipam = conf.ipam.ok_or_else(|| {
            IpamError::config(
                "ipam",
                "missing: static reads its configuration from the ipam section",
            )
        })?;
        req.env.args().check_known(&["IP", "GATEWAY"])?;

        let mut addresses = Vec::new();
        for (i, a) in ipam.addresses.iter().flatten().enumerate() {
            let path = format!("ipam.addresses[{i}]");
            let (address, gateway) = a.parse(&path)?;
            addresses.push(Address {
                address,
                gateway,
                path,
            });
        }

        let cni_args = |key: &str| {
            req.env
                .args()
                .get(key)
                .filter(|v| !v.is_empty())
                .map(|v| v.split(',').map(str::trim).collect::<Vec<_>>())
                .unwrap_or_default()
        };
        // GATEWAY applies to the CNI_ARGS addresses only: the reference
        // matches it before it has parsed the configured ones.
        let configured = addresses.len();
        for s in cni_args("IP") {
            addresses.push(Address {
                address: parse_address(s)
                    .map_err(|r| IpamError::env("CNI_ARGS", format!("IP: {r}")))?,
                gateway: None,
                path: format!("CNI_ARGS IP={s}"),
            });
        }
        for s in cni_args("GATEWAY") {
            let gw: IpAddr = s.parse().map_err(|_| {
                IpamError::env("CNI_ARGS", format!("GATEWAY: {s:?} is not an IP address"))
            })?;
            let gw = gw.to_canonical();
            for a in addresses[configured..]
                .iter_mut()
                .filter(|a| a.address.contains(gw))
            {
                a.gateway = Some(gw);
            }
        }

        // args, then runtimeConfig, each replacing what came before.
        let args = ArgsConf::ips(&conf.args);
        if !args.is_empty() {
            addresses = from_list(args, "args.cni.ips")?;
        }
        if let Some(ips) = runtime.ips.as_deref().filter(|l| !l.is_empty()) {
            addresses = from_list(ips, "runtimeConfig.ips")?;
        }
        check_legacy_families(req.cni_version, addresses.iter().map(|a| a.address.ip()))?;

        let dns = ipam.dns.as_ref().map(DnsConf::to_dns).unwrap_or_default();
        Ok(Config {
            addresses,
            routes: parse_routes(ipam.routes.as_deref(), "ipam.routes")?,
            dns,
        })
    }
}

impl TypedPlugin for Static {
    type Error = IpamError;

    fn validate(&self, req: &Request) -> Result<(), IpamError> {
        Config::load(req).map(|_| ())
    }

    fn add(&self, req: &Request) -> Result<CniResult, IpamError> {
        let conf = Config::load(req)?;
        Ok(CniResult {
            cni_version: Some(req.cni_version),
            interfaces: Vec::new(),
            ips: conf
                .addresses
                .iter()
                .map(|a| IpConfig {
                    address: a.address,
                    gateway: a.gateway,
                    interface: None,
                })
                .collect(),
            routes: conf.routes,
            dns: conf.dns,
        })
    }

    fn del(&self, _req: &Request) -> Result<(), IpamError> {
        // Nothing was allocated; like the reference, not even the config is
        // read, so DEL always cleans up.
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<(), IpamError> {
        let conf = Config::load(req)?;
        let prev = req.prev_result.as_ref().ok_or_else(|| {
            IpamError::config(
                "prevResult",
                "missing: CHECK compares the configured addresses with the result of ADD",
            )
        })?;
        for a in &conf.addresses {
            let ip = a.address.ip();
            let mismatch =
                |reason: String| IpamError::CheckMismatch(format!("{}: {reason}", a.path));
            match prev.ips.iter().find(|p| p.address.ip() == ip) {
                None => {
                    return Err(mismatch(format!(
                        "{ip} is not in prevResult.ips of interface {}",
                        req.env.ifname().map_or("?", |n| n.as_str())
                    )))
                }
                Some(p) if a.gateway.is_some() && p.gateway != a.gateway => {
                    return Err(mismatch(format!(
                        "{ip} has gateway {} in prevResult, the configuration says {}",
                        p.gateway.map_or("none".into(), |g| g.to_string()),
                        a.gateway.map_or("none".into(), |g| g.to_string()),
                    )))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}
