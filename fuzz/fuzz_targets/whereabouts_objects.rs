//! whereabouts' objects as the API server serves them, decoded as plexus's
//! client decodes them (`src/whereabouts/pools.rs`, `*_from_json`): an IPPool
//! (its allocations and plexus's notes and backups beside them), an
//! OverlappingRangeIPReservation, a NodeSlicePool. The input's first byte
//! picks the kind, the rest is the object: any JSON must give a copy or an
//! error, never a panic; each key of a pool that decodes is looked up as
//! DEL looks up a container's entry.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus::whereabouts::pools;

fuzz_target!(|data: &[u8]| {
    let Some((kind, object)) = data.split_first() else {
        return;
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(object) else {
        return;
    };
    match kind % 3 {
        0 => {
            if let Ok(pool) = pools::pool_from_json(value) {
                for entry in pool.spec.allocations.values() {
                    if let Some(ifname) = &entry.ifname {
                        let _ = pool.key_held_by(&entry.container_id, ifname);
                    }
                }
            }
        }
        1 => {
            let _ = pools::reservation_from_json(value);
        }
        _ => {
            let _ = pools::node_slices_from_json(value);
        }
    }
});
