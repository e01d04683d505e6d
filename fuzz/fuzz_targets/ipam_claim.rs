//! IPAMClaim objects (multi-net-spec §8) as the API server returns them:
//! any JSON value must give a claim or an error, never a panic; a claim that
//! parses writes back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus::netattach::ipamclaim::IpamClaim;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Ok(claim) = IpamClaim::from_value(&value) {
        let again = IpamClaim::from_value(&claim.to_value()).expect("a written claim reads back");
        assert_eq!(again, claim);
    }
});
