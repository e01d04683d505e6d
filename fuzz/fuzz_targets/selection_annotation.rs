//! The pod's `k8s.v1.cni.cncf.io/networks` annotation (multi-net-spec §4.1):
//! any string, in the comma-delimited (§4.1.1) or JSON list (§4.1.2) format,
//! must give a selection or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Annotation values are strings; other bytes never reach the parser.
    if let Ok(annotation) = std::str::from_utf8(data) {
        let _ = plexus::netattach::selection::parse_selection_annotation(annotation);
    }
});
