//! NetworkAttachmentDefinition objects (multi-net-spec §3.2) as the API server
//! or a manifest file hands them over: any JSON value must give a NAD or an
//! error, never a panic. That includes `spec.config`, a CNI config or config
//! list embedded as a string (§3.2.1, §3.2.2).
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus::netattach::nad::NetworkAttachmentDefinition;

fuzz_target!(|data: &[u8]| {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = NetworkAttachmentDefinition::from_value(&value);
    }
});
