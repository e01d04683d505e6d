//! host-local's files on disk (ipam/src/store.rs): an address file
//! (`<containerID>\r\n<ifname>`, or a bare ID as versions before 0.7 wrote)
//! and `last_reserved_ip.<set>`, which the reference plugin, an operator or a
//! crash may have left in any state: any bytes must parse, never panic. An
//! owner plexus writes reads back as written.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus_ipam::{parse_last_reserved, Owner};

fuzz_target!(|data: &[u8]| {
    let owner = Owner::parse(data);
    let _ = owner.describe();
    let _ = parse_last_reserved(data);
    if let Owner::Attachment {
        container_id,
        ifname,
    } = &owner
    {
        let _ = owner.is_held_by(container_id, ifname);
        // Interface names never hold whitespace or line breaks (cni-SPEC §2).
        if !ifname.chars().any(char::is_whitespace) && !container_id.contains('\n') {
            let written = Owner::content(container_id, ifname);
            assert!(Owner::parse(written.as_bytes()).is_exactly(container_id, ifname));
        }
    }
});
