//! A plugin's result or a `prevResult` (cni-SPEC.md §5 "ADD Success", any
//! version 0.1.0 – 1.1.0): any JSON value must parse or give an error, and a
//! parsed result must convert to every version or give an error, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus::cni::result::CniResult;
use plexus::cni::version::CniVersion;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Ok(result) = CniResult::from_value(&value) {
        for version in CniVersion::ALL {
            let _ = result.to_value(version);
        }
    }
});
