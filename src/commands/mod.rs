//! plexus's commands besides the CNI plugin itself ([`crate::plugin`]):
//! thick mode's daemon and shim, the DaemonSet's installer, the demo, and
//! `plexus plan`, `plexus status` and `plexus pools`.

pub mod daemon;
pub mod demo;
pub mod install;
pub mod plan;
pub mod pools;
pub mod status;

use std::path::Path;

use serde_json::Value;

use crate::cni::error::CniError;

/// The JSON file at `path`, or the CNI error naming it.
pub(crate) fn read_json(path: &Path) -> Result<Value, CniError> {
    let text = std::fs::read(path).map_err(|e| CniError::io(path.display().to_string(), e))?;
    serde_json::from_slice(&text)
        .map_err(|e| CniError::decode(path.display().to_string(), e.to_string()))
}

/// JSON as the commands print it.
pub(crate) fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).expect("serde_json::Value always serialises")
}
