//! Interoperability with the reference plugins of containernetworking/plugins
//! (Debian's v1.1.1 in /usr/lib/cni), exec'd exactly as a runtime execs them
//! (CNI_* environment, config on stdin; cni-SPEC §2): a node can move its
//! host-local state from the reference to plexus and back, and both can even
//! allocate at the same time. Skipped, with a message, when the reference
//! binaries are not installed.

mod common;

use std::collections::BTreeSet;
use std::fs;
use tempfile::TempDir;

use common::*;
use plexus_cni::ErrorCode;
use plexus_ipam::{HostLocal, Static};
use serde_json::{json, Value};

/// An IPv4 network in a fresh data dir (the reference v1.1.1 speaks CNI up
/// to 1.0.0).
fn v4_net() -> (TempDir, Value) {
    host_local_net("1.0.0", json!({"ranges": [[{"subnet": "10.30.0.0/24"}]]}))
}

/// A dual-stack network in a fresh data dir.
fn dual_net() -> (TempDir, Value) {
    host_local_net(
        "1.0.0",
        json!({"ranges": [[{"subnet": "10.31.0.0/24"}], [{"subnet": "fd31:0:0:1::/64"}]]}),
    )
}

#[test]
fn reference_allocates_then_plexus_continues() {
    let Some(reference) = reference(REFERENCE_HOST_LOCAL) else {
        return;
    };
    let (tmp, c) = v4_net();
    for (i, want) in ["10.30.0.2", "10.30.0.3", "10.30.0.4"].iter().enumerate() {
        assert_eq!(
            exec(&reference, "ADD", &format!("ref{i}"), "eth0", "", &c).ip(),
            *want
        );
    }
    let p = HostLocal::new();
    // Round-robin continues after the reference's last reservation.
    assert_eq!(ip_of(&add(&p, &c, "px0", "eth0").unwrap()), "10.30.0.5");
    // plexus sees the reference's allocations: same attachment is a duplicate,
    // CHECK finds it, a requested taken address names the reference's owner.
    assert_err(
        add(&p, &c, "ref1", "eth0"),
        ErrorCode::Plugin(112),
        "ipam.ranges[0]: 10.30.0.3 has been allocated to ref1",
    );
    check(&p, &c, "ref0", "eth0").unwrap();
    assert_err(
        add_args(&p, &c, "px1", "eth0", "IP=10.30.0.4"),
        ErrorCode::Plugin(110),
        "CNI_ARGS IP=10.30.0.4: 10.30.0.4 is already allocated to container ref2 (interface eth0)",
    );
    // plexus releases a reference allocation.
    del(&p, &c, "ref1", "eth0").unwrap();
    assert!(!allocations(tmp.path()).contains_key("10.30.0.3"));
    // ... and the reference sees plexus's work: its next address follows
    // plexus's last reservation, and it releases plexus's allocation.
    assert_eq!(
        exec(&reference, "ADD", "ref3", "eth0", "", &c).ip(),
        "10.30.0.6"
    );
    exec(&reference, "DEL", "px0", "eth0", "", &c).ok();
    assert!(!allocations(tmp.path()).contains_key("10.30.0.5"));
    exec(&reference, "CHECK", "ref3", "eth0", "", &c).ok();
    let left: Vec<(String, String)> = allocations(tmp.path()).into_iter().collect();
    assert_eq!(
        left,
        [
            ("10.30.0.2".to_string(), "ref0\r\neth0".to_string()),
            ("10.30.0.4".into(), "ref2\r\neth0".into()),
            ("10.30.0.6".into(), "ref3\r\neth0".into())
        ]
    );
}

#[test]
fn plexus_allocates_then_reference_continues() {
    let Some(reference) = reference(REFERENCE_HOST_LOCAL) else {
        return;
    };
    let (tmp, c) = dual_net();
    let p = HostLocal::new();
    for i in 0..3 {
        add(&p, &c, &format!("px{i}"), "eth0").unwrap();
    }
    // The reference reads plexus's last_reserved_ip.<n> and address files.
    let out = exec(&reference, "ADD", "ref0", "eth0", "", &c);
    out.ok();
    let v = out.json();
    assert_eq!(v["ips"][0]["address"], "10.31.0.5/24");
    assert_eq!(v["ips"][1]["address"], "fd31:0:0:1::5/64");
    // The reference's duplicate check sees plexus's allocation.
    let dup = exec(&reference, "ADD", "px1", "eth0", "", &c);
    assert_ne!(dup.code, 0);
    assert!(
        dup.stdout.contains("duplicate allocation is not allowed"),
        "{dup:?}"
    );
    exec(&reference, "CHECK", "px2", "eth0", "", &c).ok();
    // The reference releases plexus's allocation (both families).
    exec(&reference, "DEL", "px1", "eth0", "", &c).ok();
    let names: BTreeSet<String> = allocations(tmp.path()).into_keys().collect();
    let want: BTreeSet<String> = [
        "10.31.0.2",
        "10.31.0.4",
        "10.31.0.5",
        "fd31:0:0:1::2",
        "fd31:0:0:1::4",
        "fd31:0:0:1::5",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(names, want);
    // Back to plexus, which continues after the reference.
    let r = add(&p, &c, "px3", "eth0").unwrap();
    assert_eq!(addrs(&r), ["10.31.0.6/24", "fd31:0:0:1::6/64"]);
    // plexus's GC collects the reference's allocations too.
    let c11 = with(c.clone(), "cniVersion", json!("1.1.0"));
    gc(&p, &c11, &[("px0", "eth0"), ("px3", "eth0")]).unwrap();
    let names: Vec<String> = allocations(tmp.path()).into_keys().collect();
    assert_eq!(
        names,
        ["10.31.0.2", "10.31.0.6", "fd31:0:0:1::2", "fd31:0:0:1::6"]
    );
}

#[test]
fn plexus_binary_and_reference_allocate_at_the_same_time() {
    let Some(reference) = reference(REFERENCE_HOST_LOCAL) else {
        return;
    };
    const EACH: usize = 12;
    let (tmp, c) = dual_net();
    let plexus = plexus_bin();
    let children: Vec<_> = (0..EACH)
        .flat_map(|i| {
            [
                (
                    format!("ref{i}"),
                    spawn(&reference, "ADD", &format!("ref{i}"), "eth0", "", &c),
                ),
                (
                    format!("px{i}"),
                    spawn(&plexus, "ADD", &format!("px{i}"), "eth0", "", &c),
                ),
            ]
        })
        .collect();
    let mut seen = BTreeSet::new();
    for (id, child) in children {
        let out = finish(child);
        out.ok();
        for ip in out.json()["ips"].as_array().unwrap() {
            let addr = ip["address"]
                .as_str()
                .unwrap()
                .split('/')
                .next()
                .unwrap()
                .to_string();
            assert!(
                seen.insert(addr.clone()),
                "{addr} handed out twice (second to {id})"
            );
        }
    }
    assert_eq!(seen.len(), 4 * EACH);
    let on_disk = allocations(tmp.path());
    assert_eq!(on_disk.keys().cloned().collect::<BTreeSet<_>>(), seen);
    // Cross release: plexus deletes the reference's, the reference plexus's.
    let p = HostLocal::new();
    for i in 0..EACH {
        del(&p, &c, &format!("ref{i}"), "eth0").unwrap();
        exec(&reference, "DEL", &format!("px{i}"), "eth0", "", &c).ok();
    }
    assert!(allocations(tmp.path()).is_empty());
}

#[test]
fn legacy_form_and_requested_ip_interop() {
    let Some(reference) = reference(REFERENCE_HOST_LOCAL) else {
        return;
    };
    let (_tmp, c) = host_local_net(
        "1.0.0",
        json!({"subnet": "10.32.0.0/24", "rangeStart": "10.32.0.100", "gateway": "10.32.0.254"}),
    );
    // A requested address through the ips capability, in the reference.
    let rc = with(c.clone(), "runtimeConfig", json!({"ips": ["10.32.0.150"]}));
    let out = exec(&reference, "ADD", "ref0", "eth0", "", &rc);
    assert_eq!(out.ip(), "10.32.0.150");
    assert_eq!(out.json()["ips"][0]["gateway"], "10.32.0.254");
    // plexus continues after it (requested addresses count as last reserved).
    let r = add(&p(), &c, "px0", "eth0").unwrap();
    assert_eq!(addrs(&r), ["10.32.0.151/24"]);
    assert_eq!(r.ips[0].gateway, Some("10.32.0.254".parse().unwrap()));
    // The reference refuses plexus's address when requested.
    let taken = with(c.clone(), "runtimeConfig", json!({"ips": ["10.32.0.151"]}));
    let out = exec(&reference, "ADD", "ref1", "eth0", "", &taken);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("10.32.0.151"), "{out:?}");
}

fn p() -> HostLocal {
    HostLocal::new()
}

#[test]
fn old_format_files_of_early_reference_versions() {
    // Reference versions before the interface name was recorded wrote only
    // the container ID; today's reference and plexus both release them.
    let Some(reference) = reference(REFERENCE_HOST_LOCAL) else {
        return;
    };
    let (tmp, c) = v4_net();
    let dir = tmp.path().join(NET);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("10.30.0.7"), "oldctr").unwrap();
    fs::write(dir.join("10.30.0.8"), "oldctr2").unwrap();
    check(&HostLocal::new(), &c, "oldctr", "eth0").unwrap();
    exec(&reference, "CHECK", "oldctr2", "eth0", "", &c).ok();
    del(&HostLocal::new(), &c, "oldctr", "eth0").unwrap();
    exec(&reference, "DEL", "oldctr2", "eth0", "", &c).ok();
    assert!(allocations(tmp.path()).is_empty());
}

#[test]
fn static_results_match_the_reference() {
    let Some(reference) = reference(REFERENCE_STATIC) else {
        return;
    };
    let ipam = json!({"type": "static",
        "addresses": [{"address": "10.10.0.1/24", "gateway": "10.10.0.254"}, {"address": "3ffe:ffff:0:01ff::1/64", "gateway": "3ffe:ffff:0::1"}],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.10.5.1"}, {"dst": "3ffe:ffff:0:01ff::1/64"}],
        "dns": {"nameservers": ["8.8.8.8"], "domain": "example.com", "search": ["example.com"], "options": ["ndots:2"]}});
    let base = conf("1.0.0", ipam);
    let cases: Vec<(Value, &str)> = vec![
        (base.clone(), ""),
        (base.clone(), "IP=10.10.0.5/24,fd00::5/64;GATEWAY=10.10.0.1"),
        (
            with(
                base.clone(),
                "args",
                json!({"cni": {"ips": ["10.10.0.9/24"]}}),
            ),
            "IP=10.10.0.5/24",
        ),
        (
            with(
                with(
                    base.clone(),
                    "args",
                    json!({"cni": {"ips": ["10.10.0.9/24"]}}),
                ),
                "runtimeConfig",
                json!({"ips": ["10.10.0.7/24", "fd00::7/64"]}),
            ),
            "",
        ),
        (with(base.clone(), "cniVersion", json!("0.4.0")), ""),
    ];
    for (c, args) in cases {
        let out = exec(&reference, "ADD", "ctr", "eth0", args, &c);
        out.ok();
        let mut theirs = out.json();
        // Go prints an empty dns object; plexus omits it (both mean none).
        if theirs["dns"] == json!({}) {
            theirs.as_object_mut().unwrap().remove("dns");
        }
        let ours = add_args(&Static, &c, "ctr", "eth0", args).unwrap();
        let version = c["cniVersion"].as_str().unwrap().parse().unwrap();
        assert_eq!(printed(&ours, version), theirs, "args {args:?}, config {c}");
        // And plexus's binary prints the same.
        let bin_dir = tempfile::tempdir().unwrap();
        let bin = bin_dir.path().join("static");
        std::os::unix::fs::symlink(plexus_bin(), &bin).unwrap();
        let out = exec(&bin, "ADD", "ctr", "eth0", args, &c);
        assert_eq!(out.ok().json(), printed(&ours, version));
    }
}

#[test]
fn reference_and_plexus_share_the_lock() {
    // While plexus holds the network's flock, the reference waits for it.
    let Some(reference) = reference(REFERENCE_HOST_LOCAL) else {
        return;
    };
    let (tmp, c) = v4_net();
    let lock = hold_lock(tmp.path());
    let mut child = spawn(&reference, "ADD", "ref0", "eth0", "", &c);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the reference did not wait for the lock"
    );
    assert!(allocations(tmp.path()).is_empty());
    drop(lock);
    assert_eq!(finish(child).ip(), "10.30.0.2");
    // And plexus waits while the reference holds it: plexus's add after the
    // reference's shows no interleaving (round-robin goes on).
    assert_eq!(
        ip_of(&add(&HostLocal::new(), &c, "px0", "eth0").unwrap()),
        "10.30.0.3"
    );
}
