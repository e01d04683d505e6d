//! CNI results (cni-SPEC.md §5 "ADD Success") in one canonical model, the 1.1.0
//! shape, which is a superset of every earlier version. Parsing accepts any
//! version 0.1.0 – 1.1.0; serialising converts to the requested version (see
//! `convert` rules on [`CniResult::to_json`]).

use std::net::IpAddr;

use ipnetwork::IpNetwork;

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

impl Dns {
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_none()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}
