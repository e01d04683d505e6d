//! A device-info file (device-info-SPEC §4): written by a device plugin
//! (`dp/`) or a CNI plugin (`cni/`) plexus does not control, read as
//! `deviceinfo::load` does. Any bytes must give device information or an
//! error, never a panic; what parses writes back to itself (§3 keys).
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus::cni::deviceinfo::DeviceInfo;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Ok(info) = DeviceInfo::from_value(&value) {
        let again =
            DeviceInfo::from_value(&info.to_value()).expect("written device-info reads back");
        assert_eq!(again, info);
    }
});
