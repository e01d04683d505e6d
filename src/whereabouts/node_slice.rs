//! A call's node slice (`node_slice_size`): the range it takes from is its
//! node's slice of the configuration's range, from the pool
//! `[<network_name>-]<node>-<slice>`, as whereabouts' fast IPAM.
//!
//! The node's slice is read from the network's NodeSlicePool. An ADD on a
//! node that has none yet claims the first free one itself, by a
//! compare-and-swap on the NodeSlicePool (creating it, every slice free,
//! when the network has none): it does not wait for the leader
//! ([`super::slicer`]), which gives every Node a slice and frees those of
//! gone nodes. A DEL or CHECK never claims. The daemon remembers its
//! node's slice for a while, so a warm ADD reads nothing for it.

use std::path::{Path, PathBuf};

use ipnetwork::IpNetwork;

use super::{Call, ClusterIpamError};
use crate::whereabouts::pools::Written;
use plexus_ipam::whereabouts::conf::FLAT_FILES;
use plexus_ipam::whereabouts::pool::{range_text, SliceSize};
use plexus_ipam::whereabouts::slice;
use plexus_ipam::IpamError;

/// Where whereabouts' installer writes the node's name, beside its flat
/// file (`script/lib.sh`), read when `NODENAME` is not set.
const NODENAME_FILE: &str = "nodename";

fn slice_error(reason: String) -> ClusterIpamError {
    IpamError::Config {
        field: "ipam.node_slice_size".into(),
        reason,
    }
    .into()
}

/// The node a plugin process runs on, as whereabouts' `getNodeName` finds
/// it: `NODENAME`, else the `nodename` file beside the flat file (the one
/// merged, else whereabouts' usual places), else `/etc/hostname`.
pub(super) fn node_of_process(flat_file: Option<&Path>) -> Result<String, ClusterIpamError> {
    if let Some(name) = std::env::var("NODENAME")
        .ok()
        .filter(|n| !n.trim().is_empty())
    {
        return Ok(name.trim().to_string());
    }
    let beside: Vec<PathBuf> = flat_file
        .into_iter()
        .chain(FLAT_FILES.iter().map(Path::new))
        .filter_map(|f| Some(f.parent()?.join(NODENAME_FILE)))
        .chain([PathBuf::from("/etc/hostname")])
        .collect();
    for path in &beside {
        if let Ok(text) = std::fs::read_to_string(path) {
            if !text.trim().is_empty() {
                return Ok(text.trim().to_string());
            }
        }
    }
    Err(slice_error(
        "needs this node's name: NODENAME, whereabouts.d/nodename or /etc/hostname".into(),
    ))
}

impl Call<'_> {
    /// With `node_slice_size`, turns the configuration's range into this
    /// node's slice of it, claimed when `claim` and the node has none;
    /// `Ok(false)`: the node has no slice (nothing of it to give back).
    pub(super) fn on_node_slice(&mut self, claim: bool) -> Result<bool, ClusterIpamError> {
        let (Some(size), Some(node)) = (self.conf.node_slice_size.clone(), self.node.clone())
        else {
            return Ok(true);
        };
        let range = self.conf.ranges[0].clone();
        let network = self.network.as_str();
        let name = slice::pool_name(self.conf.network_name.as_deref(), network).to_string();
        if name.is_empty() {
            return Err(slice_error(
                "needs the network's `name` or `ipam.network_name`: its NodeSlicePool is \
                 named after it"
                    .into(),
            ));
        }
        let Some(found) = self.node_slice(&name, &node, range.network, &size, claim)? else {
            self.conf.ranges.clear();
            return Ok(false);
        };
        let Some(sliced) = slice::slice_range(&range, found) else {
            return Err(IpamError::RangeExhausted(format!(
                "node {node}'s slice {} of NodeSlicePool {name} has no address within \
                 range_start..range_end",
                range_text(found)
            ))
            .into());
        };
        self.conf.ranges[0] = sliced;
        self.sliced_from = Some(range.network);
        Ok(true)
    }

    fn node_slice(
        &self,
        name: &str,
        node: &str,
        range: IpNetwork,
        size: &SliceSize,
        claim: bool,
    ) -> Result<Option<IpNetwork>, ClusterIpamError> {
        if let Some((spec, found)) = self.pools.remembered_slice(name) {
            if slice::same_slicing(&spec, range, size) {
                return Ok(Some(found));
            }
        }
        let mut tries = 0;
        loop {
            let Some(copy) = self.pools.node_slices(name)? else {
                if !claim {
                    return Ok(None);
                }
                let (spec, mut status) = slice::fresh(range, size);
                let mine = slice::claim(&mut status, node);
                if self
                    .pools
                    .create_node_slices(name, &spec, &status)?
                    .is_some()
                {
                    if let Some(found) = mine {
                        self.pools.remember_slice(name, &spec, found);
                    }
                    return Ok(mine);
                }
                // Another writer made it first: read it.
                tries = self.lost(name, tries)?;
                continue;
            };
            if !slice::same_slicing(&copy.spec, range, size) {
                return Err(slice_error(format!(
                    "NodeSlicePool {}/{name} slices {} by {}, and this configuration slices {} \
                     by {}: the networks sharing it must agree",
                    self.pools.namespace(),
                    copy.spec.range,
                    copy.spec.slice_size,
                    range_text(range),
                    size.text
                )));
            }
            if let Some(found) = slice::slice_of(&copy.status, node) {
                self.pools.remember_slice(name, &copy.spec, found);
                return Ok(Some(found));
            }
            if !claim {
                return Ok(None);
            }
            let mut claimed = copy.clone();
            let Some(found) = slice::claim(&mut claimed.status, node) else {
                return Err(IpamError::RangeExhausted(format!(
                    "NodeSlicePool {}/{name}: each of its {} slices has a node already",
                    self.pools.namespace(),
                    copy.status.allocations.len()
                ))
                .into());
            };
            match self.pools.write_node_slices(&claimed)? {
                Written::Done => {
                    self.pools.remember_slice(name, &copy.spec, found);
                    return Ok(Some(found));
                }
                Written::Lost => tries = self.lost(name, tries)?,
            }
        }
    }
}
