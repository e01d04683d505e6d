//! The ResourceSlices of the node's pool, out of its devices (pure): one
//! pool named after the node, its devices in slices of at most
//! [`MAX_DEVICES_PER_SLICE`] (the v1 API's limit), named
//! `<node>-<driver>-<i>`. A new device set is published under the next
//! generation, so that the scheduler never mixes two ([`Pool::next`]).

use serde_json::{json, Value};

use super::inventory::NodeDevice;
use super::DRIVER;
use crate::dra::API_VERSION;

/// `resource.k8s.io/v1` ResourceSliceMaxDevices.
pub const MAX_DEVICES_PER_SLICE: usize = 128;

/// What the node publishes, and under which generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    pub node: String,
    pub generation: i64,
    pub devices: Vec<NodeDevice>,
}

impl Pool {
    /// The pool of `devices`: the same generation when they are what was
    /// published (by this daemon, or `found` from a previous one), the next
    /// when they changed.
    pub fn next(
        previous: Option<&Pool>,
        found: &FoundPool,
        node: &str,
        devices: Vec<NodeDevice>,
    ) -> Pool {
        let generation = match previous {
            Some(p) if published(&p.devices) == published(&devices) => p.generation,
            Some(p) => p.generation + 1,
            None if found.devices == published(&devices) => found.generation,
            None => found.generation + 1,
        };
        Pool {
            node: node.to_string(),
            generation,
            devices,
        }
    }

    /// The name of its slice `i`.
    pub fn slice_name(&self, i: usize) -> String {
        slice_name(&self.node, i)
    }

    /// Its slices, in order; a pool without devices has one empty slice,
    /// which says the node has none.
    pub fn slices(&self) -> Vec<Value> {
        let chunks: Vec<&[NodeDevice]> = if self.devices.is_empty() {
            vec![&[]]
        } else {
            self.devices.chunks(MAX_DEVICES_PER_SLICE).collect()
        };
        let count = chunks.len();
        chunks
            .into_iter()
            .enumerate()
            .map(|(i, devices)| {
                let devices = published(devices);
                json!({
                    "apiVersion": API_VERSION,
                    "kind": "ResourceSlice",
                    "metadata": {"name": self.slice_name(i)},
                    "spec": {
                        "driver": DRIVER,
                        "nodeName": self.node,
                        "pool": {"name": self.node, "generation": self.generation,
                                 "resourceSliceCount": count},
                        "devices": devices,
                    },
                })
            })
            .collect()
    }
}

/// The node's slices of the driver that a previous daemon left: their
/// highest generation and its devices, as published, in slice order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FoundPool {
    pub generation: i64,
    pub devices: Vec<Value>,
}

/// What of `devices` the slices show: names and attributes (a VF's
/// netdev moving into a pod changes nothing published).
pub fn published(devices: &[NodeDevice]) -> Vec<Value> {
    devices
        .iter()
        .map(|d| json!({"name": d.name, "attributes": d.attributes}))
        .collect()
}

/// `<node>-dra.plexus.dev-<i>`, cut to a valid object name.
pub fn slice_name(node: &str, i: usize) -> String {
    let suffix = format!("-{DRIVER}-{i}");
    let keep = 253usize.saturating_sub(suffix.len());
    let node: String = node.chars().take(keep).collect();
    format!("{node}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::driver::inventory::DeviceKind;
    use crate::dra::slice::{ResourceSlice, Slices};
    use std::collections::BTreeMap;

    fn device(name: &str) -> NodeDevice {
        let mut attributes = BTreeMap::new();
        super::super::attributes::multus(&mut attributes, name, "example.com/vf");
        NodeDevice {
            name: name.into(),
            kind: DeviceKind::Vf,
            device_id: name.into(),
            netdev: None,
            char_devices: vec![],
            attributes,
        }
    }

    #[test]
    fn a_pool_is_sliced_by_the_limit_and_read_back_by_the_multus_contract() {
        let devices: Vec<NodeDevice> = (0..130).map(|i| device(&format!("vf-{i:03}"))).collect();
        let pool = Pool::next(None, &FoundPool::default(), "node-a", devices);
        let slices = pool.slices();
        assert_eq!(slices.len(), 2);
        assert_eq!(slices[0]["spec"]["pool"]["resourceSliceCount"], 2);
        assert_eq!(slices[1]["spec"]["devices"].as_array().unwrap().len(), 2);
        assert_eq!(slices[1]["metadata"]["name"], "node-a-dra.plexus.dev-1");
        // What plexus's own Multus-contract reader makes of them.
        let parsed = ResourceSlice::from_value(&slices[1]).unwrap();
        assert_eq!((parsed.pool.as_str(), parsed.generation), ("node-a", 1));
        let found = Slices {
            raw: &slices,
            node: Some("node-a"),
        }
        .find(DRIVER, "node-a", "vf-129")
        .unwrap()
        .unwrap();
        assert_eq!(found.resource_name.as_deref(), Some("example.com/vf"));
    }

    #[test]
    fn the_generation_moves_only_when_the_devices_change() {
        let one = Pool::next(None, &FoundPool::default(), "n", vec![device("a")]);
        let mut moved = device("a");
        moved.netdev = Some("eth1".into());
        let same = Pool::next(Some(&one), &FoundPool::default(), "n", vec![moved]);
        assert_eq!(same.generation, 1);
        let changed = Pool::next(Some(&same), &FoundPool::default(), "n", vec![]);
        assert_eq!(changed.generation, 2);
        assert_eq!(changed.slices().len(), 1);
        assert_eq!(changed.slices()[0]["spec"]["devices"], json!([]));
        // A new daemon: the generation a previous one left, when the
        // devices are the same; the next when not.
        let found = FoundPool {
            generation: 7,
            devices: published(&[device("a")]),
        };
        assert_eq!(
            Pool::next(None, &found, "n", vec![device("a")]).generation,
            7
        );
        assert_eq!(Pool::next(None, &found, "n", vec![]).generation, 8);
    }
}
