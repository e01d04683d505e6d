//! What the `sriov` driver records of the VF it hands to a pod (kept by
//! [`super::super::ownership`]): the owner and what to give back on DEL.

use plexus_cni::names::NetnsPath;
use serde::{Deserialize, Serialize};

use super::super::ownership::{Owned, Owner};
use super::super::passthrough::Found;
use crate::netlink::{VfSettings, VfState};

/// One VF's owner and what to give back on DEL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    pub owner: Owner,
    /// The owner's `CNI_NETNS`.
    pub netns: NetnsPath,
    /// The VF's settings on its PF before the ADD.
    pub saved: VfState,
    /// What the ADD set through the PF.
    pub applied: VfSettings,
    /// How the VF was found; `dpdk` when bound to a userspace driver.
    pub found: Found,
    /// Its RDMA device, moved into the pod with it (exclusive mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma: Option<String>,
}

impl Record {
    pub fn is_dpdk(&self) -> bool {
        self.found == Found::Dpdk
    }
}

impl Owned for Record {
    fn owner(&self) -> &Owner {
        &self.owner
    }
    fn netns(&self) -> &NetnsPath {
        &self.netns
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_cni::names::{ContainerId, IfName};

    #[test]
    fn a_record_keeps_its_json_spelling() {
        let saved: VfState = serde_json::from_value(serde_json::json!({
            "vf": 1, "mac": "00:00:00:00:00:00",
            "vlan": {"id": 0, "qos": 0, "proto": "802.1Q"},
            "spoofchk": true, "trust": false, "link_state": "auto",
            "min_tx_rate": 0, "max_tx_rate": 0, "ib_node_guid": null, "ib_port_guid": null,
        }))
        .unwrap();
        let r = Record {
            owner: Owner {
                container_id: ContainerId::new("ctr1").unwrap(),
                ifname: IfName::new("net1").unwrap(),
            },
            netns: NetnsPath::new("/var/run/netns/pod").unwrap(),
            saved,
            applied: VfSettings {
                trust: Some(true),
                ..VfSettings::default()
            },
            found: Found::Netdev {
                name: IfName::new("enp1s0v1").unwrap(),
                mac: Some("02:00:00:00:00:01".parse().unwrap()),
                mtu: 1500,
            },
            rdma: Some("mlx5_3".into()),
        };
        assert!(!r.is_dpdk());
        let text = serde_json::to_string_pretty(&r).unwrap();
        assert!(text.contains(r#""mode": "netdev""#), "{text}");
        assert!(text.contains(r#""mac": "02:00:00:00:00:01""#), "{text}");
        assert!(text.contains(r#""rdma": "mlx5_3""#), "{text}");
        let back: Record = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        let dpdk = Record {
            found: Found::Dpdk,
            rdma: None,
            ..r
        };
        assert!(dpdk.is_dpdk());
        let text = serde_json::to_string(&dpdk).unwrap();
        assert!(text.contains(r#""mode":"dpdk""#), "{text}");
        // Records written before RDMA devices moved have no such key.
        assert!(!text.contains("rdma"), "{text}");
        assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), dpdk);
    }
}
