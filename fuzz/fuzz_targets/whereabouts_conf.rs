//! whereabouts' IPAM configuration (`ipam/src/whereabouts/conf.rs`): a NAD's
//! `ipam` section (the input's first line) merged with the flat file
//! whereabouts would read (the rest of the input, served for any path
//! asked): any bytes must give a configuration or an error naming the key,
//! never a panic; each range a configuration names has a capacity.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus_ipam::whereabouts::{allocate, conf};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (section, flat) = text.split_once('\n').unwrap_or((&text, ""));
    let Ok(Value::Object(ipam)) = serde_json::from_str::<Value>(section) else {
        return;
    };
    let read = |_: &std::path::Path| Ok((!flat.is_empty()).then(|| flat.to_string()));
    if let Ok(parsed) = conf::parse(&ipam, read) {
        for range in &parsed.ranges {
            let _ = allocate::capacity(range);
        }
    }
});
