//! MultiNetworkPolicy objects (`k8s.cni.cncf.io/v1beta1`, issue 35) as the
//! API server serves them: any JSON value must give a policy or an error
//! naming the field, never a panic (`src/netpolicy/spec.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus::netpolicy::spec::Policy;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let _ = Policy::from_value(&value);
});
