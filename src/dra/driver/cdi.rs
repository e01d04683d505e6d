//! The Container Device Interface specs of prepared claims: what kubelet
//! hands the runtime (by the CDI device IDs Prepare returns) so that a
//! container gets a claimed device's character devices (`/dev/vfio/N`
//! with `/dev/vfio/vfio` for a DPDK VF, `/dev/vhost-vdpa-N`) and its
//! device ID in its environment. One spec file per claim, written whole
//! (to a temporary name, then renamed) and removed at Unprepare, as
//! dra-driver-sriov and the DRA example driver keep theirs.

use std::io;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::prepared::PreparedClaim;
use super::DRIVER;

/// The CDI version of the specs: 0.5.0 has everything used here.
pub const CDI_VERSION: &str = "0.5.0";
/// The class of plexus's CDI devices.
pub const CLASS: &str = "net";

/// `dra.plexus.dev/net`: the kind of plexus's CDI devices.
pub fn kind() -> String {
    format!("{DRIVER}/{CLASS}")
}

/// The name of the device `device` of claim `uid` in the spec.
pub fn device_name(uid: &str, device: &str) -> String {
    format!("{uid}-{device}")
}

/// The fully qualified CDI device ID Prepare returns: `vendor/class=name`.
pub fn device_id(uid: &str, device: &str) -> String {
    format!("{}={}", kind(), device_name(uid, device))
}

/// `PLEXUS_DEVICE_<DEVICE>`: the variable holding a device's ID.
pub fn env_name(device: &str) -> String {
    let upper = device
        .to_ascii_uppercase()
        .replace(|c: char| !c.is_ascii_alphanumeric(), "_");
    format!("PLEXUS_DEVICE_{upper}")
}

/// The spec of `claim`'s devices.
pub fn spec(claim: &PreparedClaim) -> Value {
    let devices: Vec<Value> = claim
        .devices
        .iter()
        .map(|d| {
            let nodes: Vec<Value> = d.char_devices.iter().map(|p| json!({"path": p})).collect();
            let mut edits = json!({"env": [format!("{}={}", env_name(&d.device), d.device_id)]});
            if !nodes.is_empty() {
                edits["deviceNodes"] = Value::Array(nodes);
            }
            json!({"name": device_name(&claim.uid, &d.device), "containerEdits": edits})
        })
        .collect();
    json!({"cdiVersion": CDI_VERSION, "kind": kind(), "devices": devices})
}

/// Where `uid`'s spec lives in `dir`.
pub fn spec_path(dir: &Path, uid: &str) -> PathBuf {
    dir.join(format!("{DRIVER}-{uid}.json"))
}

/// Write `claim`'s spec into `dir`, whole.
pub fn write(dir: &Path, claim: &PreparedClaim) -> io::Result<()> {
    let body = serde_json::to_vec_pretty(&spec(claim)).map_err(io::Error::other)?;
    plexus_cni::whole_file::replace_durably(&spec_path(dir, &claim.uid), &body)
}

/// Remove `uid`'s spec; absent is done.
pub fn remove(dir: &Path, uid: &str) -> io::Result<()> {
    match std::fs::remove_file(spec_path(dir, uid)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
