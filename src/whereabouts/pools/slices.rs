//! NodeSlicePools (`node_slice_size`): read, created with every slice free,
//! and written, as pools are, only by a compare-and-swap on the copy's
//! resourceVersion, so that a node claiming its own slice and the leader
//! keeping them all never overwrite each other. The choices are
//! [`plexus_ipam::whereabouts::slice`]'s.

use std::time::{Duration, Instant};

use ipnetwork::IpNetwork;
use kube::api::{PostParams, Preconditions};
use serde_json::json;

use super::{new_object, slice_copy, PoolCopy, Pools, RememberedSlice, SliceCopy, Written};
use crate::cluster::error::{ClusterError, Verb};
use plexus_ipam::whereabouts::pool::{NodeSliceSpec, NodeSliceStatus};

/// How long the daemon trusts the slice it last read for its node: the
/// leader frees a slice only once its node has been gone two passes, so a
/// node that still runs learns of it well before.
const REMEMBERED: Duration = Duration::from_secs(30);

impl Pools {
    /// The NodeSlicePool `name`, if there is one.
    pub fn node_slices(&self, name: &str) -> Result<Option<SliceCopy>, ClusterError> {
        let object = self.object("NodeSlicePool", name);
        let got = self.send(Verb::Get, &object, self.slices.get_opt(name))?;
        got.map(|found| slice_copy(&object, found)).transpose()
    }

    /// Creates the NodeSlicePool `name`; `Ok(None)` when another writer
    /// made it first.
    pub fn create_node_slices(
        &self,
        name: &str,
        spec: &NodeSliceSpec,
        status: &NodeSliceStatus,
    ) -> Result<Option<SliceCopy>, ClusterError> {
        let object = self.object("NodeSlicePool", name);
        let mut made = new_object("NodeSlicePool", name, json!(spec));
        made.data["status"] = json!(status);
        let created = self.send(
            Verb::Create,
            &object,
            self.slices.create(&PostParams::default(), &made),
        );
        match created {
            Ok(found) => slice_copy(&object, found).map(Some),
            Err(e) if e.status() == Some(409) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes `copy`'s status, if the NodeSlicePool is still at its
    /// resourceVersion.
    pub fn write_node_slices(&self, copy: &SliceCopy) -> Result<Written, ClusterError> {
        let object = self.object("NodeSlicePool", &copy.name);
        let patch = json!({
            "metadata": {"resourceVersion": copy.resource_version},
            "status": copy.status,
        });
        match self.merge_patch(&self.slices, &object, &copy.name, &patch) {
            Ok(_) => Ok(Written::Done),
            Err(e) if e.status() == Some(409) => Ok(Written::Lost),
            Err(e) => Err(e),
        }
    }

    /// Deletes the IPPool of `copy` if it is still that version (the pool
    /// of a freed slice, judged empty on it): `Ok(false)` when it changed
    /// since (it stays); one gone already is no failure.
    pub fn delete_pool(&self, copy: &PoolCopy) -> Result<bool, ClusterError> {
        let object = self.object("IPPool", &copy.name);
        let only = Preconditions {
            uid: None,
            resource_version: Some(copy.resource_version.clone()),
        };
        self.delete_if(&self.pools, &object, &copy.name, only)
    }

    /// The slice the daemon last read for its node on the NodeSlicePool
    /// `name`, if it read one lately (a warm ADD makes no read for it).
    pub fn remembered_slice(&self, name: &str) -> Option<(NodeSliceSpec, IpNetwork)> {
        let cache = self.cache.as_ref()?;
        let remembered = cache.lock_slices().get(name).cloned()?;
        (remembered.at.elapsed() < REMEMBERED).then_some((remembered.spec, remembered.slice))
    }

    pub fn remember_slice(&self, name: &str, spec: &NodeSliceSpec, slice: IpNetwork) {
        if let Some(cache) = &self.cache {
            let remembered = RememberedSlice {
                spec: spec.clone(),
                slice,
                at: Instant::now(),
            };
            cache.lock_slices().insert(name.to_string(), remembered);
        }
    }
}
