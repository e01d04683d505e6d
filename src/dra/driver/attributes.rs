//! The device attributes plexus's driver publishes, and their wire form
//! (`resource.k8s.io/v1` DeviceAttribute: exactly one of `string`, `int`,
//! `bool`, `version`).
//!
//! Names follow the peers where they overlap: the Kubernetes standard
//! `resource.kubernetes.io/pciBusID` and `pcieRoot` (k8s.io/dynamic-resource-
//! allocation `deviceattribute`), dranet's and dra-driver-sriov's
//! `dra.net/numaNode`, dranet's `dra.net/ifName`, `mac`, `rdma` and
//! `isSriovVf`; dra-driver-sriov's names (`pciAddress`, `pfName`, `vfID`,
//! `pfPciAddress`, `vendor`) under plexus's driver name; and the two
//! attributes of the Multus contract ([`crate::dra`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::dra::{DEVICE_ID_ATTRIBUTE, RESOURCE_NAME_ATTRIBUTE};

pub const PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";
pub const PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";
pub const NUMA_NODE: &str = "dra.net/numaNode";
pub const IF_NAME: &str = "dra.net/ifName";
pub const MAC: &str = "dra.net/mac";
pub const RDMA: &str = "dra.net/rdma";
pub const IS_SRIOV_VF: &str = "dra.net/isSriovVf";
pub const KIND: &str = "dra.plexus.dev/kind";
pub const PCI_ADDRESS: &str = "dra.plexus.dev/pciAddress";
pub const VENDOR: &str = "dra.plexus.dev/vendor";
pub const PCI_DEVICE: &str = "dra.plexus.dev/pciDevice";
pub const KERNEL_DRIVER: &str = "dra.plexus.dev/driver";
pub const PF_NAME: &str = "dra.plexus.dev/pfName";
pub const PF_PCI_ADDRESS: &str = "dra.plexus.dev/pfPciAddress";
pub const VF_ID: &str = "dra.plexus.dev/vfID";
pub const VDPA_NAME: &str = "dra.plexus.dev/vdpaName";
pub const VDPA_DRIVER: &str = "dra.plexus.dev/vdpaDriver";

/// One attribute's value, as the slice carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Attribute {
    String(String),
    Int(i64),
    Bool(bool),
}

impl Attribute {
    pub fn string(s: &str) -> Attribute {
        Attribute::String(s.to_string())
    }
}

/// The Multus contract's two attributes: the device ID a NAD's plugin
/// gets, and the resource name a NAD's `resourceName` annotation matches.
pub fn multus(into: &mut BTreeMap<String, Attribute>, device_id: &str, resource_name: &str) {
    into.insert(DEVICE_ID_ATTRIBUTE.into(), Attribute::string(device_id));
    into.insert(
        RESOURCE_NAME_ATTRIBUTE.into(),
        Attribute::string(resource_name),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_have_the_wire_form_of_device_attribute() {
        let attrs = BTreeMap::from([
            ("a".to_string(), Attribute::string("x")),
            ("b".to_string(), Attribute::Int(3)),
            ("c".to_string(), Attribute::Bool(true)),
        ]);
        assert_eq!(
            serde_json::to_value(&attrs).unwrap(),
            serde_json::json!({"a": {"string": "x"}, "b": {"int": 3}, "c": {"bool": true}})
        );
    }
}
