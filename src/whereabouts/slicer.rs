//! The keeper of node slices (`node_slice_size`, issue 33 item 5), a step
//! of the reconciler's pass, so it runs in one daemon at a time: the holder
//! of the reconciler's Lease. No other deployment is needed.
//!
//! Each pass, for every NodeSlicePool (listed with the pools):
//! - every Node without a slice gets the first free one, so that a
//!   whereabouts binary beside plexus finds its node's slice as its own
//!   controller would leave it (plexus's ADD claims its node's slice itself
//!   when the leader has not yet: `super::node_slice`);
//! - the slice of a node gone on two passes in a row is freed, and its
//!   IPPool deleted, only once that pool holds no address: the reconciler
//!   gives back the addresses of the gone node's pods first
//!   ([`super::reconcile`]). whereabouts frees it at once, and the next
//!   node hands out its pods' addresses again.
//!
//! Every write is a compare-and-swap on the copy listed; one that loses is
//! judged again on the next pass.

use std::collections::{BTreeSet, HashMap};

use ipnetwork::IpNetwork;

use crate::cluster::ClusterError;
use crate::config::ApiTimeouts;
use crate::whereabouts::pools::{PoolCopy, Pools, SliceCopy, Written};
use plexus_ipam::whereabouts::pool::pool_name;
use plexus_ipam::whereabouts::slice;

/// What one pass did to the slices.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SliceReport {
    /// NodeSlicePools written (slices given or freed).
    pub written: usize,
    /// Slices freed (their nodes gone, their pools empty).
    pub freed: usize,
    /// Writes that lost to another writer (judged again next pass).
    pub lost: usize,
}

/// The nodes each NodeSlicePool (by namespace and name) found missing on
/// the last pass.
#[derive(Default)]
pub struct SliceKeeper {
    missing: HashMap<(String, String), BTreeSet<String>>,
}

/// The IPPools that may hold `node`'s addresses of `slice` in a
/// NodeSlicePool named `network`: the pool is `[<network_name>-]<node>-
/// <slice>`, and a NodeSlicePool named after the network's `name` (no
/// `network_name`) has pools without the prefix, so both are candidates.
fn slice_pools(network: &str, node: &str, slice: IpNetwork) -> [String; 2] {
    [
        pool_name(slice, Some(network), Some(node)),
        pool_name(slice, None, Some(node)),
    ]
}

impl SliceKeeper {
    pub fn forget(&mut self) {
        self.missing.clear();
    }

    /// One pass over `slices`, judged with `pools` (listed just before)
    /// and the cluster's `nodes` (the leader lists them each tick).
    pub fn pass(
        &mut self,
        handle: &tokio::runtime::Handle,
        client: &kube::Client,
        timeouts: ApiTimeouts,
        nodes: &BTreeSet<String>,
        slices: &[(String, SliceCopy)],
        pools: &[(String, PoolCopy)],
    ) -> Result<SliceReport, ClusterError> {
        let mut report = SliceReport::default();
        if slices.is_empty() {
            self.missing.clear();
            return Ok(report);
        }
        let by_name: HashMap<(&str, &str), &PoolCopy> = pools
            .iter()
            .map(|(ns, copy)| ((ns.as_str(), copy.name.as_str()), copy))
            .collect();
        let mut missing_now = HashMap::new();
        for (namespace, copy) in slices {
            let key = (namespace.clone(), copy.name.clone());
            let before = self.missing.remove(&key).unwrap_or_default();
            let held = |node: &str, s: IpNetwork| {
                slice_pools(&copy.name, node, s).iter().any(|name| {
                    by_name
                        .get(&(namespace.as_str(), name.as_str()))
                        .is_some_and(|pool| !pool.spec.allocations.is_empty())
                })
            };
            let mut kept = copy.clone();
            let (missing, changed) = slice::keep(&mut kept.status, nodes, &before, held);
            let freed: Vec<(String, IpNetwork)> = copy
                .status
                .allocations
                .iter()
                .filter(|a| {
                    !a.node_name.is_empty() && slice::slice_of(&kept.status, &a.node_name).is_none()
                })
                .filter_map(|a| Some((a.node_name.clone(), a.slice_range.parse().ok()?)))
                .collect();
            missing_now.insert(key, missing);
            if !changed {
                continue;
            }
            let api = Pools::uncached(handle, client, timeouts, namespace.clone());
            // The empty pools of freed slices first: a write to one since
            // it was listed keeps it (and the next pass judges again).
            let mut unchanged = true;
            for (node, s) in &freed {
                for name in slice_pools(&copy.name, node, *s) {
                    if let Some(pool) = by_name.get(&(namespace.as_str(), name.as_str())) {
                        unchanged &= api.delete_pool(pool)?;
                    }
                }
            }
            if !unchanged {
                report.lost += 1;
                continue;
            }
            match api.write_node_slices(&kept)? {
                Written::Done => {
                    report.written += 1;
                    report.freed += freed.len();
                }
                Written::Lost => report.lost += 1,
            }
        }
        self.missing = missing_now;
        Ok(report)
    }
}
