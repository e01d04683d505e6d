//! The `plexus-ipam` binary speaks the CNI protocol around the in-process
//! plugins (cni-SPEC §2 environment and stdin, §5 results and errors).

mod common;

use common::*;
use serde_json::json;

#[test]
fn version_add_gc_status_through_the_protocol() {
    let bin = plexus_bin();
    let out = exec(&bin, "VERSION", "", "", "", &json!({"cniVersion": "1.0.0"}));
    assert_eq!(
        out.ok().json()["supportedVersions"]
            .as_array()
            .unwrap()
            .len(),
        7
    );

    let (tmp, c) = host_local_net("1.1.0", json!({"subnet": "10.40.0.0/30"}));
    assert_eq!(exec(&bin, "ADD", "a", "eth0", "", &c).ip(), "10.40.0.2");
    exec(&bin, "CHECK", "a", "eth0", "", &c).ok();
    // Exhausted: the error result of cni-SPEC §5, in the request's version.
    let out = exec(&bin, "ADD", "b", "eth0", "", &c);
    assert_eq!(out.code, 1);
    assert_eq!(
        out.json(),
        json!({"cniVersion": "1.1.0", "code": 111, "msg": "no IP addresses available",
               "details": "ipam: no IP addresses available in range set 10.40.0.1-10.40.0.2"})
    );
    let out = exec(&bin, "STATUS", "", "", "", &c);
    assert_eq!(
        (out.code, out.json()["code"].as_u64()),
        (1, Some(50)),
        "{out:?}"
    );
    // GC with the valid attachments on stdin (cni-SPEC §2 GC).
    let gc_conf = with(
        c.clone(),
        "cni.dev/valid-attachments",
        json!([{"containerID": "other", "ifname": "eth0"}]),
    );
    let out = exec(&bin, "GC", "", "", "", &gc_conf);
    assert_eq!((out.code, out.stdout.as_str()), (0, ""), "{out:?}");
    assert!(allocations(tmp.path()).is_empty());
    exec(&bin, "STATUS", "", "", "", &c).ok();
    // Bad config: code 7 naming the field.
    let bad = conf(
        "1.0.0",
        host_local(tmp.path(), json!({"subnet": "192.168.0.0/31"})),
    );
    let out = exec(&bin, "ADD", "a", "eth0", "", &bad);
    assert_eq!(out.json()["code"], 7);
    assert_eq!(
        out.json()["details"],
        "ipam.subnet: Network 192.168.0.0/31 too small to allocate from"
    );
}
