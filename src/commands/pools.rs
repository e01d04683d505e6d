//! `plexus pools`: the IPPools of cluster-wide IPAM (`"ipam": {"type":
//! "whereabouts"}`, README "From whereabouts") and who holds each address,
//! as JSON: a pool's name, range, how many addresses it hands out and holds,
//! and each holder (address, pod, interface, container ID).

use std::path::PathBuf;

use ipnetwork::IpNetwork;
use serde_json::{json, Value};

use crate::cni::error::CniError;
use crate::config::ApiTimeouts;
use crate::whereabouts::pools::Pools;
use plexus_ipam::whereabouts::allocate::capacity;
use plexus_ipam::whereabouts::conf::PoolRange;
use plexus_ipam::whereabouts::pool::address_at;

use super::pretty;

#[derive(clap::Args)]
pub struct PoolsArgs {
    /// The cluster, and (its context's namespace, else kube-system) where
    /// the pools are, as whereabouts reads `kubernetes.kubeconfig`.
    #[arg(long, value_name = "FILE")]
    kubeconfig: PathBuf,
    /// Only the pools of this `network_name` (their names start with it).
    #[arg(long, value_name = "NAME")]
    network: Option<String>,
}

/// `plexus pools`: the pools as JSON, or the CNI error.
pub fn run(args: &PoolsArgs) -> Result<String, CniError> {
    let pools = Pools::connect(&args.kubeconfig, ApiTimeouts::default())?;
    let prefix = args.network.as_ref().map(|n| format!("{n}-"));
    let mut shown = Vec::new();
    for pool in pools.list()? {
        if prefix
            .as_ref()
            .is_some_and(|p| !pool.name.starts_with(p.as_str()))
        {
            continue;
        }
        let range: Option<IpNetwork> = pool.spec.range.parse().ok();
        let holders: Vec<Value> = pool
            .spec
            .allocations
            .iter()
            .map(|(key, a)| {
                let address = range.and_then(|r| address_at(r, key));
                json!({"offset": key, "address": address.map(|ip| ip.to_string()),
                       "pod": a.podref, "interface": a.ifname, "containerID": a.container_id})
            })
            .collect();
        let capacity = range.map(|network| {
            let whole = PoolRange {
                network,
                start: None,
                end: None,
                exclude: Vec::new(),
            };
            capacity(&whole).to_string()
        });
        shown.push(json!({"name": pool.name, "namespace": pools.namespace(),
                          "range": pool.spec.range, "usable": capacity,
                          "held": holders.len(), "allocations": holders}));
    }
    Ok(pretty(&Value::Array(shown)))
}
