//! Decoding JSON into typed structs the way Go's encoding/json does: object keys
//! match struct fields case-insensitively (an exact match wins). Runtimes and
//! plugins written in Go rely on this, so what they send may say `PortMappings`
//! where the convention says `portMappings`.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// Decode `value` into `T`, matching object keys to struct fields
/// case-insensitively at every depth.
// STUB: replaced by the real implementation (see module docs).
pub fn from_value<T: DeserializeOwned>(value: &Value) -> Result<T, serde_json::Error> {
    serde_json::from_value(value.clone())
}
