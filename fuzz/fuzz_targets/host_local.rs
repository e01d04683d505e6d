//! host-local's untrusted inputs:
//! - its files on disk (ipam/src/store.rs): an address file
//!   (`<containerID>\r\n<ifname>`, or a bare ID as versions before 0.7 wrote)
//!   and `last_reserved_ip.<set>`, which the reference plugin, an operator or
//!   a crash may have left in any state. Any bytes must parse, never panic,
//!   and an owner plexus writes reads back as written;
//! - its configuration, from a NAD (`ipam` with `ranges`, the legacy
//!   `subnet`, `routes`, `dataDir`, `resolvConf`) and the runtime
//!   (`runtimeConfig.ipRanges`, `ips`, `args`): input that is a JSON object is
//!   also checked as ADD checks it before touching the store
//!   (`TypedPlugin::validate`: ranges, overlaps, requested addresses), so
//!   the fuzzer reaches past the file parsers into the range arithmetic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus::cni::env::AttachmentParams;
use plexus::cni::env::CniEnv;
use plexus::cni::skel::{Request, TypedPlugin};
use plexus_ipam::HostLocal;
use plexus_ipam::{parse_last_reserved, Owner};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    files(data);
    if let Ok(Value::Object(config)) = serde_json::from_slice::<Value>(data) {
        let params = AttachmentParams::new("fuzz", "eth0").expect("valid names");
        if let Ok(req) = Request::from_config(CniEnv::Add(params), config) {
            let _ = HostLocal::new().validate(&req);
        }
    }
});

fn files(data: &[u8]) {
    let owner = Owner::parse(data);
    let _ = owner.describe();
    let _ = parse_last_reserved(data);
    if let Owner::Attachment { holder, ifname } = &owner {
        let _ = owner.is_held_by(holder, ifname);
        // Interface names never hold whitespace or line breaks (cni-SPEC §2).
        if !ifname.chars().any(char::is_whitespace) && !holder.as_str().contains('\n') {
            let written = Owner::content(holder, ifname);
            assert!(Owner::parse(written.as_bytes()).is_exactly(holder, ifname));
        }
    }
}
