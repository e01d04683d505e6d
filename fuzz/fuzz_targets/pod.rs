//! Pod objects as the API server returns them (k8s-openapi's `Pod`, as
//! `cluster::kube` decodes a GET and the daemon's watch a list): any bytes
//! must decode or give an error, and a pod's annotations must plan (the
//! selection of §4.1, default-network override, §4.1.2 keys against real
//! NADs of §3.2) or give an error, never panic.
#![no_main]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::Pod as ApiPod;
use libfuzzer_sys::fuzz_target;
use plexus::cni::config::NetworkConfigList;
use plexus::cni::names::{ContainerId, IfName};
use plexus::netattach::nad::NetworkAttachmentDefinition;
use plexus::netattach::pod::Pod;
use plexus::plan::{plan, DefaultNetwork, PlanInputs, PlanOptions};

type Nads = BTreeMap<(String, String), NetworkAttachmentDefinition>;

/// Two NADs a selection can name: a bridge with host-local, and a
/// device-plugin-backed one (`resourceName`, §3.2.3).
fn nads() -> &'static Nads {
    static NADS: OnceLock<Nads> = OnceLock::new();
    NADS.get_or_init(|| {
        let nad = |name: &str, annotations: serde_json::Value, config: &str| {
            let v = serde_json::json!({
                "apiVersion": "k8s.cni.cncf.io/v1",
                "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": name, "namespace": "default", "annotations": annotations},
                "spec": {"config": config},
            });
            let nad = NetworkAttachmentDefinition::from_value(&v).expect("a valid NAD");
            (("default".to_string(), name.to_string()), nad)
        };
        [
            nad(
                "net-a",
                serde_json::json!({}),
                r#"{"cniVersion":"1.0.0","name":"net-a","type":"bridge","bridge":"br-a",
                   "ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}"#,
            ),
            nad(
                "sriov-net",
                serde_json::json!({"k8s.v1.cni.cncf.io/resourceName": "intel.com/sriov"}),
                r#"{"cniVersion":"1.0.0","name":"sriov-net","type":"sriov"}"#,
            ),
        ]
        .into()
    })
}

fn default_network() -> &'static DefaultNetwork {
    static DEFAULT: OnceLock<DefaultNetwork> = OnceLock::new();
    DEFAULT.get_or_init(|| DefaultNetwork {
        network: "cluster".into(),
        config: NetworkConfigList::from_slice(
            br#"{"cniVersion":"1.0.0","name":"cluster","type":"ptp",
                "ipam":{"type":"host-local","subnet":"10.0.0.0/16"}}"#,
        )
        .expect("a valid conf"),
        source: "fuzz".into(),
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(found) = serde_json::from_slice::<ApiPod>(data) else {
        return;
    };
    // As `cluster::kube` makes the planner's pod of an API object.
    let pod = Pod {
        namespace: found.metadata.namespace.unwrap_or_else(|| "default".into()),
        name: found.metadata.name.unwrap_or_else(|| "pod".into()),
        uid: found.metadata.uid.filter(|u| !u.is_empty()),
        annotations: found.metadata.annotations.unwrap_or_default(),
    };
    let options = PlanOptions::new(Default::default(), IfName::new("eth0").unwrap())
        .with_container(ContainerId::new("fuzz-container").unwrap());
    let inputs = PlanInputs::off_node(nads(), default_network(), &options);
    if let Ok(planned) = plan(&pod, &inputs) {
        let _ = planned.to_value();
    }
});
