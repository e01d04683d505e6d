//! plexus's DRA driver (issue 49 item 2) on untrusted input: a
//! ResourceClaim as Prepare reads it from the API server (with its opaque
//! configuration for plexus), checked against a node of two devices, and
//! a reservation file as a restarted daemon reads it from disk. Any input
//! gives a result or an error, never a panic; a prepared claim holds only
//! devices of the node's pool that the node has, each with its CDI ID.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use plexus::dra::claim::ResourceClaim;
use plexus::dra::driver::inventory::{DeviceKind, NodeDevice};
use plexus::dra::driver::opaque::network_configs;
use plexus::dra::driver::prepare::{prepare, ClaimRef, Node, PreparedClaim};
use plexus::dra::driver::reservations::Reservations;
use serde_json::Value;

fn device(name: &str) -> NodeDevice {
    NodeDevice {
        name: name.into(),
        kind: DeviceKind::Vf,
        device_id: format!("0000:3b:02.{}", name.len() % 8),
        netdev: None,
        char_devices: vec![],
        attributes: Default::default(),
    }
}

/// An empty reservations directory, made once.
fn empty() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("plexus-fuzz-dra-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<PreparedClaim>(data);
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if let Ok(claim) = ResourceClaim::from_value(&value) {
        let _ = network_configs(&claim);
    }
    let uid = value
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("u-1");
    let wanted = ClaimRef {
        namespace: "ns".into(),
        name: "c".into(),
        uid: uid.into(),
    };
    let devices = [device("vf-a"), device("vf-b")];
    let reservations = Reservations::open(empty()).unwrap();
    let node = Node {
        name: "node-a",
        devices: &devices,
        reservations: &reservations,
        pods: None,
    };
    if let Ok(prepared) = prepare(&wanted, &value, &node) {
        for d in &prepared.devices {
            assert_eq!(d.pool, "node-a");
            assert!(devices.iter().any(|n| n.name == d.device), "{d:?}");
            assert_eq!(d.cdi_device_ids.len(), 1, "{d:?}");
        }
    }
});
