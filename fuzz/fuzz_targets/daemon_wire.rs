//! The thick daemon's socket protocol (src/plugin/wire.rs): one JSON line
//! each way. Any bytes a client sends must give a request, whose CNI
//! variables then validate (cni-SPEC §2) as the daemon serves it, or an
//! error, never a panic; the shim reads the answer the same way.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus::cni::env::CniEnv;
use plexus::plugin::wire::{self, ShimRequest, ShimResponse};

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = wire::receive::<ShimRequest>(&mut &data[..]) {
        let _ = CniEnv::from_lookup(|var| request.env.get(var).cloned());
        let mut line = Vec::new();
        wire::send(&mut line, &request).expect("a request writes");
        let again: ShimRequest =
            wire::receive(&mut &line[..]).expect("a written request reads back");
        assert_eq!(again, request);
    }
    let _ = wire::receive::<ShimResponse>(&mut &data[..]);
});
