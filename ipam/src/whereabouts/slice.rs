//! Node slices (`node_slice_size`, whereabouts' "fast IPAM by node"): a
//! range cut into equal slices, one per node, each node allocating from its
//! own slice's IPPool (`[<network_name>-]<node>-<slice>`), so that nodes
//! never contend for one pool.
//!
//! Which node has which slice is a NodeSlicePool's `status.allocations`
//! (an empty `nodeName` is a free slice), written, like a pool, only by a
//! compare-and-swap on its resourceVersion. These are pure functions of it.
//!
//! Where plexus differs from whereabouts, and why (its users' duplicates):
//! - a slice is freed only once its node is gone *and* the node's pool of
//!   it holds no address (whereabouts' `removeUnusedNodes` frees it while
//!   the gone node's pods still hold addresses, so the next node gives them
//!   again);
//! - a slice hands out only what the configuration allows: the slice's
//!   usable addresses within `range_start`..`range_end`, minus `exclude`
//!   (whereabouts drops both for a slice);
//! - IPv6 ranges are sliced too (whereabouts' `DivideRangeBySize` is IPv4
//!   only).

use std::collections::BTreeSet;

use ipnetwork::IpNetwork;

use super::conf::{usable, PoolRange};
pub use super::pool::MAX_SLICES;
use super::pool::{range_text, NodeSliceAllocation, NodeSliceSpec, NodeSliceStatus, SliceSize};
use crate::range::{from_u128, to_u128};

/// The slices of `range`, in order (whereabouts' `DivideRangeBySize`);
/// `size` must have passed [`SliceSize::check`].
pub fn divide(range: IpNetwork, size: &SliceSize) -> Vec<IpNetwork> {
    let bits = if range.is_ipv4() { 32 } else { 128 };
    let step_bits = u32::from(bits - size.prefix);
    let count = 1u128 << (size.prefix - range.prefix());
    let base = to_u128(range.network());
    (0..count)
        .map(|i| {
            let first = from_u128(base + (i << step_bits), range.is_ipv4());
            IpNetwork::new(first, size.prefix).expect("a prefix checked against the range")
        })
        .collect()
}

/// The NodeSlicePool of a network: named `network_name`, else the
/// network's `name` (whereabouts' `getSliceName`).
pub fn pool_name<'a>(network_name: Option<&'a str>, network: &'a str) -> &'a str {
    network_name.unwrap_or(network)
}

/// A new NodeSlicePool of `range`: every slice free.
pub fn fresh(range: IpNetwork, size: &SliceSize) -> (NodeSliceSpec, NodeSliceStatus) {
    let spec = NodeSliceSpec {
        range: range_text(range),
        slice_size: size.text.clone(),
    };
    let allocations = divide(range, size)
        .into_iter()
        .map(|slice| NodeSliceAllocation {
            node_name: String::new(),
            slice_range: range_text(slice),
        })
        .collect();
    (spec, NodeSliceStatus { allocations })
}

/// Whether a NodeSlicePool's `spec` cuts `range` into slices of `size`
/// (its text as whereabouts compares it, or the same prefix length).
pub fn same_slicing(spec: &NodeSliceSpec, range: IpNetwork, size: &SliceSize) -> bool {
    let spec_range = spec.range.parse::<IpNetwork>().ok();
    let spec_size = SliceSize::parse(&spec.slice_size).ok();
    spec_range.map(range_text) == Some(range_text(range))
        && spec_size.map(|s| s.prefix) == Some(size.prefix)
}

/// `node`'s slice, if it has one.
pub fn slice_of(status: &NodeSliceStatus, node: &str) -> Option<IpNetwork> {
    status
        .allocations
        .iter()
        .find(|a| a.node_name == node)
        .and_then(|a| a.slice_range.parse().ok())
}

/// Gives `node` the first free slice, unless it has one (whereabouts'
/// `assignNodeToSlice`); `None`: every slice is taken.
pub fn claim(status: &mut NodeSliceStatus, node: &str) -> Option<IpNetwork> {
    if let Some(slice) = slice_of(status, node) {
        return Some(slice);
    }
    let free = status
        .allocations
        .iter_mut()
        .find(|a| a.node_name.is_empty() && a.slice_range.parse::<IpNetwork>().is_ok())?;
    free.node_name = node.to_string();
    free.slice_range.parse().ok()
}

/// What the addresses of `slice` handed out are, for an attachment whose
/// configuration's range is `range`: the slice's usable addresses within
/// `range_start`..`range_end`, without `exclude`; `None` when that leaves
/// none.
pub fn slice_range(range: &PoolRange, slice: IpNetwork) -> Option<PoolRange> {
    let (first, last) = usable(slice);
    let start = match range.start {
        Some(s) if to_u128(s) > to_u128(first) => s,
        _ => first,
    };
    let end = match range.end {
        Some(e) if to_u128(e) < to_u128(last) => e,
        _ => last,
    };
    (to_u128(start) <= to_u128(end)).then(|| PoolRange {
        network: slice,
        start: Some(start),
        end: Some(end),
        exclude: range.exclude.clone(),
    })
}

/// One pass of the slices' keeper (the leader's): every node of `nodes`
/// without a slice gets the first free one, and the slice of a node that
/// is in neither `nodes` nor `missing_before` (gone on the last pass too)
/// is freed when `held(node, slice)` says its pool holds nothing. Returns
/// the nodes found missing this pass (the next pass's `missing_before`)
/// and whether `status` changed.
pub fn keep(
    status: &mut NodeSliceStatus,
    nodes: &BTreeSet<String>,
    missing_before: &BTreeSet<String>,
    held: impl Fn(&str, IpNetwork) -> bool,
) -> (BTreeSet<String>, bool) {
    let mut missing = BTreeSet::new();
    let mut changed = false;
    for entry in &mut status.allocations {
        if entry.node_name.is_empty() || nodes.contains(&entry.node_name) {
            continue;
        }
        let Ok(slice) = entry.slice_range.parse::<IpNetwork>() else {
            continue;
        };
        if !missing_before.contains(&entry.node_name) || held(&entry.node_name, slice) {
            missing.insert(entry.node_name.clone());
            continue;
        }
        entry.node_name.clear();
        changed = true;
    }
    for node in nodes {
        if slice_of(status, node).is_none() && claim(status, node).is_some() {
            changed = true;
        }
    }
    (missing, changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNetwork {
        s.parse().unwrap()
    }

    fn size(s: &str) -> SliceSize {
        SliceSize::parse(s).unwrap()
    }

    #[test]
    fn divides_as_whereabouts_and_ipv6_too() {
        let slices = divide(net("10.9.0.0/24"), &size("/26"));
        let texts: Vec<String> = slices.iter().map(|s| range_text(*s)).collect();
        // DivideRangeBySize("10.9.0.0/24", "/26").
        assert_eq!(
            texts,
            [
                "10.9.0.0/26",
                "10.9.0.64/26",
                "10.9.0.128/26",
                "10.9.0.192/26"
            ]
        );
        let v6 = divide(net("fd09::/64"), &size("66"));
        assert_eq!(range_text(v6[1]), "fd09::4000:0:0:0/66");
        assert_eq!(v6.len(), 4);
    }

    #[test]
    fn refuses_slicings_that_cannot_serve() {
        let check = |range: &str, s: &str| size(s).check(net(range));
        assert!(check("10.9.0.0/24", "/23").is_err());
        assert!(check("10.9.0.0/24", "/31").is_err());
        assert!(check("10.0.0.0/8", "/24").is_err());
        assert!(check("fd09::/48", "/64").is_err());
        assert!(check("10.9.0.0/16", "/28").is_ok());
        assert!(check("10.9.0.0/24", "/30").is_ok());
    }

    #[test]
    fn claims_the_first_free_slice_once() {
        let (spec, mut status) = fresh(net("10.9.0.0/24"), &size("/26"));
        assert_eq!(spec.range, "10.9.0.0/24");
        assert_eq!(spec.slice_size, "/26");
        assert_eq!(claim(&mut status, "a"), Some(net("10.9.0.0/26")));
        assert_eq!(claim(&mut status, "b"), Some(net("10.9.0.64/26")));
        assert_eq!(claim(&mut status, "a"), Some(net("10.9.0.0/26")));
        assert_eq!(claim(&mut status, "c"), Some(net("10.9.0.128/26")));
        assert_eq!(claim(&mut status, "d"), Some(net("10.9.0.192/26")));
        assert_eq!(claim(&mut status, "e"), None);
        assert_eq!(slice_of(&status, "b"), Some(net("10.9.0.64/26")));
        assert!(same_slicing(&spec, net("10.9.0.0/24"), &size("26")));
        assert!(!same_slicing(&spec, net("10.9.0.0/24"), &size("/27")));
        assert!(!same_slicing(&spec, net("10.9.1.0/24"), &size("/26")));
    }

    #[test]
    fn a_slice_keeps_the_ranges_bounds_and_excludes() {
        let range = PoolRange {
            network: net("10.9.0.0/24"),
            start: Some("10.9.0.70".parse().unwrap()),
            end: Some("10.9.0.200".parse().unwrap()),
            exclude: vec![net("10.9.0.80/28")],
        };
        let first = slice_range(&range, net("10.9.0.0/26"));
        assert_eq!(first, None, "below range_start");
        let second = slice_range(&range, net("10.9.0.64/26")).unwrap();
        assert_eq!(second.start, Some("10.9.0.70".parse().unwrap()));
        assert_eq!(second.end, Some("10.9.0.126".parse().unwrap()));
        assert_eq!(second.exclude, range.exclude);
        let third = slice_range(&range, net("10.9.0.128/26")).unwrap();
        assert_eq!(third.start, Some("10.9.0.129".parse().unwrap()));
        assert_eq!(third.end, Some("10.9.0.190".parse().unwrap()));
        let last = slice_range(&range, net("10.9.0.192/26")).unwrap();
        assert_eq!(last.end, Some("10.9.0.200".parse().unwrap()));
    }

    #[test]
    fn keeper_frees_only_empty_slices_of_nodes_gone_twice() {
        let (_, mut status) = fresh(net("10.9.0.0/24"), &size("/26"));
        claim(&mut status, "a");
        claim(&mut status, "b");
        claim(&mut status, "c");
        let nodes: BTreeSet<String> = ["a".to_string(), "d".to_string()].into();
        let held_by_c = |node: &str, _| node == "c";
        // First pass: d gets the free slice; b and c are only suspected.
        let (missing, changed) = keep(&mut status, &nodes, &BTreeSet::new(), held_by_c);
        assert!(changed);
        assert_eq!(missing, ["b".to_string(), "c".to_string()].into());
        assert_eq!(slice_of(&status, "d"), Some(net("10.9.0.192/26")));
        assert!(slice_of(&status, "b").is_some());
        // Second pass: b's empty slice is freed; c's pool still holds.
        let (missing, changed) = keep(&mut status, &nodes, &missing, held_by_c);
        assert!(changed);
        assert_eq!(missing, ["c".to_string()].into());
        assert_eq!(slice_of(&status, "b"), None);
        assert_eq!(slice_of(&status, "c"), Some(net("10.9.0.128/26")));
        // Nothing to do: no change.
        let (_, changed) = keep(&mut status, &nodes, &missing, held_by_c);
        assert!(!changed);
    }
}
