//! What Prepare answered for a claim, kept until Unprepare: the types
//! [`super::prepare`] makes, [`super::reservations`] keeps on disk and
//! [`super::cdi`] turns into a CDI spec.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::inventory::DeviceKind;
use super::opaque::NetworkConfig;

/// A claim as kubelet names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// A claim prepared on this node: what Prepare answered, kept until
/// Unprepare ([`super::reservations::Reservations`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreparedClaim {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The uids of the pods it was reserved for when prepared.
    pub pods: Vec<String>,
    pub devices: Vec<PreparedDevice>,
}

/// One device of a prepared claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreparedDevice {
    /// The claim's request it was allocated for.
    pub request: String,
    pub pool: String,
    /// Its name in the pool.
    pub device: String,
    pub kind: DeviceKind,
    pub device_id: String,
    /// Its netdev on the node when prepared.
    pub netdev: Option<String>,
    pub char_devices: Vec<PathBuf>,
    pub cdi_device_ids: Vec<String>,
    /// How the sandbox's ADD attaches it (the claim's opaque configuration
    /// for plexus); none: the device is the containers' alone (CDI).
    pub network: Option<NetworkConfig>,
}
