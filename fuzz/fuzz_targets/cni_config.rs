//! A network configuration on a runtime's stdin or on disk (cni-SPEC.md §1):
//! any bytes must give a config list or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus::cni::config::NetworkConfigList;

fuzz_target!(|data: &[u8]| {
    let _ = NetworkConfigList::from_slice(data);
});
