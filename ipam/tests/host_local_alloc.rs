//! host-local allocation, release, CHECK, GC and STATUS against the on-disk
//! state, in the reference plugin's format (cni-SPEC §2 operations, §5
//! results; cni-CONVENTIONS `ips` and CNI_ARGS `IP`).

mod common;

use std::fs;
use std::path::Path;

use common::*;
use plexus_cni::{CniResult, CniVersion, ErrorCode};
use plexus_ipam::HostLocal;
use serde_json::{json, Value};

/// host-local's keys for a dual-stack network: an IPv4 and an IPv6 range
/// set.
fn dual_stack() -> Value {
    json!({"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "fd00::/64"}]]})
}

fn one_range(d: &Path, range: Value) -> Value {
    conf("1.1.0", host_local(d, json!({"ranges": [[range]]})))
}

/// The results of ADDs of `eth0` of containers `c0`, `c1`... (`n` of them),
/// in order.
fn add_each(p: &HostLocal, c: &Value, n: usize) -> Vec<CniResult> {
    (0..n)
        .map(|i| add(p, c, &format!("c{i}"), "eth0").unwrap())
        .collect()
}

/// [`one_range`] in a fresh data directory, which lives as long as the
/// guard.
fn one_range_net(range: Value) -> (tempfile::TempDir, Value) {
    host_local_net("1.1.0", json!({ "ranges": [[range]] }))
}

#[test]
fn on_disk_format_is_the_references() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let c = conf(
        "1.1.0",
        host_local(
            d,
            json!({"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "fd00:1::/64"}]]}),
        ),
    );
    let r = add(&HostLocal::new(), &c, "ctr-1", "eth0").unwrap();
    assert_eq!(addrs(&r), ["10.0.0.2/24", "fd00:1::2/64"]);
    let f = files(d);
    assert_eq!(
        f.into_iter().collect::<Vec<_>>(),
        [
            ("10.0.0.2".to_string(), "ctr-1\r\neth0".to_string()),
            ("fd00:1::2".into(), "ctr-1\r\neth0".into()),
            ("last_reserved_ip.0".into(), "10.0.0.2".into()),
            ("last_reserved_ip.1".into(), "fd00:1::2".into()),
            ("lock".into(), "".into()),
        ]
    );
}

#[test]
fn result_is_an_ipam_result_in_the_request_version() {
    // cni-SPEC §5 "Delegated plugins": ips without interface, no interfaces.
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for (version, want) in [
        (
            "1.1.0",
            json!({"cniVersion": "1.1.0", "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1"}], "routes": [{"dst": "0.0.0.0/0"}]}),
        ),
        (
            "0.4.0",
            json!({"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.0.0.3/24", "gateway": "10.0.0.1"}], "routes": [{"dst": "0.0.0.0/0"}]}),
        ),
        (
            "0.1.0",
            json!({"cniVersion": "0.1.0", "ip4": {"ip": "10.0.0.4/24", "gateway": "10.0.0.1", "routes": [{"dst": "0.0.0.0/0"}]}}),
        ),
    ] {
        let c = conf(
            version,
            host_local(
                d,
                json!({"subnet": "10.0.0.0/24", "routes": [{"dst": "0.0.0.0/0"}]}),
            ),
        );
        let r = add(&HostLocal::new(), &c, &format!("c{version}"), "eth0").unwrap();
        let v: CniVersion = version.parse().unwrap();
        assert_eq!(r.cni_version, Some(v));
        assert!(r.interfaces.is_empty() && r.ips.iter().all(|i| i.interface.is_none()));
        assert_eq!(printed(&r, v), want);
    }
}

#[test]
fn round_robin_continues_after_the_last_reserved() {
    let (tmp, c) = one_range_net(json!({"subnet": "10.0.0.0/24"}));
    let p = HostLocal::new();
    assert_eq!(ip_of(&add(&p, &c, "a", "eth0").unwrap()), "10.0.0.2");
    assert_eq!(ip_of(&add(&p, &c, "b", "eth0").unwrap()), "10.0.0.3");
    del(&p, &c, "a", "eth0").unwrap();
    // .2 is free again, but round-robin goes on: a crash-looping pod does not
    // get its predecessor's address back at once.
    assert_eq!(ip_of(&add(&p, &c, "c", "eth0").unwrap()), "10.0.0.4");
    // A last_reserved_ip outside the set (config changed) restarts at the
    // beginning, as with the reference.
    fs::write(
        tmp.path().join(NET).join("last_reserved_ip.0"),
        "192.168.9.9",
    )
    .unwrap();
    assert_eq!(ip_of(&add(&p, &c, "d", "eth0").unwrap()), "10.0.0.2");
    // Garbage there is ignored too.
    fs::write(tmp.path().join(NET).join("last_reserved_ip.0"), "garbage").unwrap();
    assert_eq!(ip_of(&add(&p, &c, "e", "eth0").unwrap()), "10.0.0.5");
}

#[test]
fn wraps_around_and_skips_the_gateway() {
    let tmp = tempfile::tempdir().unwrap();
    // .1-.6 usable, gateway .3 in the middle.
    let c = one_range(
        tmp.path(),
        json!({"subnet": "10.0.0.0/29", "gateway": "10.0.0.3"}),
    );
    let p = HostLocal::new();
    let got: Vec<String> = add_each(&p, &c, 5).iter().map(ip_of).collect();
    assert_eq!(
        got,
        ["10.0.0.1", "10.0.0.2", "10.0.0.4", "10.0.0.5", "10.0.0.6"]
    );
    let e = assert_exhausted(
        add(&p, &c, "full", "eth0"),
        "ipam.ranges[0]: no IP addresses available in range set 10.0.0.1-10.0.0.6",
    );
    assert_eq!(e.msg, "no IP addresses available");
    del(&p, &c, "c3", "eth0").unwrap(); // .5
    del(&p, &c, "c1", "eth0").unwrap(); // .2
                                        // The last reserved is .6: the walk wraps to .1 (taken), .2 (free).
    fills_in_order(&p, &c, &["10.0.0.2", "10.0.0.5"], "ipam.ranges[0]");
    // The failed ADDs left nothing behind.
    assert_eq!(allocations(tmp.path()).len(), 5);
}

#[test]
fn ranges_of_a_set_are_used_in_order() {
    let (_tmp, c) = host_local_net(
        "1.1.0",
        json!({"ranges": [[
        {"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.10", "rangeEnd": "10.0.0.11"},
        {"subnet": "10.0.5.0/24", "rangeStart": "10.0.5.20", "rangeEnd": "10.0.5.21", "gateway": "10.0.5.254"}]]}),
    );
    let p = HostLocal::new();
    let got: Vec<CniResultLite> = add_each(&p, &c, 4).iter().map(lite).collect();
    assert_eq!(
        got,
        [
            ("10.0.0.10/24".into(), "10.0.0.1".into()),
            ("10.0.0.11/24".into(), "10.0.0.1".into()),
            ("10.0.5.20/24".into(), "10.0.5.254".into()),
            ("10.0.5.21/24".into(), "10.0.5.254".into()),
        ]
    );
    assert_exhausted(add(&p, &c, "c5", "eth0"), "ipam.ranges[0]: no IP addresses available in range set 10.0.0.10-10.0.0.11,10.0.5.20-10.0.5.21");
}

type CniResultLite = (String, String);

fn lite(r: &CniResult) -> CniResultLite {
    (
        r.ips[0].address.to_string(),
        r.ips[0].gateway.unwrap().to_string(),
    )
}

#[test]
fn dual_stack_allocates_one_address_per_set() {
    let (tmp, c) = host_local_net(
        "1.1.0",
        json!({"ranges": [
        [{"subnet": "10.0.0.0/30"}],
        [{"subnet": "fd00::/120", "rangeStart": "fd00::10"}]]}),
    );
    let p = HostLocal::new();
    let r = add(&p, &c, "a", "eth0").unwrap();
    assert_eq!(addrs(&r), ["10.0.0.2/30", "fd00::10/120"]);
    assert_eq!(r.ips[1].gateway, Some("fd00::1".parse().unwrap()));
    // The IPv4 set is full: the IPv6 address reserved for b is released.
    assert_exhausted(
        add(&p, &c, "b", "eth0"),
        "ipam.ranges[0]: no IP addresses available",
    );
    assert_eq!(
        allocations(tmp.path()).keys().collect::<Vec<_>>(),
        ["10.0.0.2", "fd00::10"]
    );
    del(&p, &c, "a", "eth0").unwrap();
    assert!(allocations(tmp.path()).is_empty());
    let r = add(&p, &c, "b", "eth0").unwrap();
    assert_eq!(addrs(&r), ["10.0.0.2/30", "fd00::11/120"]);
}

#[test]
fn requested_ips_priority_runtime_config_then_args_then_cni_args() {
    // cni-CONVENTIONS: `args` beat CNI_ARGS; the capability comes first.
    let (tmp, base) = one_range_net(json!({"subnet": "10.0.0.0/24"}));
    let p = HostLocal::new();
    let all = with(
        with(
            base.clone(),
            "runtimeConfig",
            json!({"ips": ["10.0.0.50/24"]}),
        ),
        "args",
        json!({"cni": {"ips": ["10.0.0.60"]}}),
    );
    let r = add_args(&p, &all, "a", "eth0", "IP=10.0.0.70").unwrap();
    assert_eq!(addrs(&r), ["10.0.0.50/24"]);
    let args = with(base.clone(), "args", json!({"cni": {"ips": ["10.0.0.60"]}}));
    assert_eq!(
        ip_of(&add_args(&p, &args, "b", "eth0", "IP=10.0.0.70").unwrap()),
        "10.0.0.60"
    );
    assert_eq!(
        ip_of(&add_args(&p, &base, "c", "eth0", "IgnoreUnknown=1;IP=10.0.0.70").unwrap()),
        "10.0.0.70"
    );
    // An empty list is no request.
    let empty = with(base.clone(), "runtimeConfig", json!({"ips": []}));
    assert_eq!(
        ip_of(&add_args(&p, &empty, "d", "eth0", "IP=10.0.0.80").unwrap()),
        "10.0.0.80"
    );
    // A requested address counts as the set's last reservation.
    assert_eq!(
        fs::read_to_string(tmp.path().join(NET).join("last_reserved_ip.0")).unwrap(),
        "10.0.0.80"
    );
    assert_eq!(ip_of(&add(&p, &base, "e", "eth0").unwrap()), "10.0.0.81");
}

#[test]
fn requested_ips_dual_stack_and_partial() {
    let (_tmp, c) = host_local_net("1.1.0", dual_stack());
    let p = HostLocal::new();
    // CNI_ARGS IP may list several (comma-separated), one per set.
    let r = add_args(&p, &c, "a", "eth0", "IP=fd00::abcd,10.0.0.9").unwrap();
    assert_eq!(addrs(&r), ["10.0.0.9/24", "fd00::abcd/64"]);
    // Only one set requested: the other allocates as usual.
    let r = add(
        &p,
        &with(c.clone(), "runtimeConfig", json!({"ips": ["fd00::77/64"]})),
        "b",
        "eth0",
    )
    .unwrap();
    assert_eq!(addrs(&r), ["10.0.0.10/24", "fd00::77/64"]);
}

#[test]
fn requested_ip_already_taken_names_its_owner() {
    let (tmp, c) = host_local_net("1.1.0", dual_stack());
    let p = HostLocal::new();
    add(
        &p,
        &with(c.clone(), "runtimeConfig", json!({"ips": ["10.0.0.42"]})),
        "owner-ctr",
        "net1",
    )
    .unwrap();
    let e = assert_err(
        add(&p, &with(c.clone(), "runtimeConfig", json!({"ips": ["fd00::5", "10.0.0.42"]})), "b", "eth0"),
        ErrorCode::Plugin(110),
        "runtimeConfig.ips[1]: 10.0.0.42 is already allocated to container owner-ctr (interface net1)",
    );
    assert_eq!(e.msg, "address in use");
    // Nothing of b's ADD stayed (fd00::5 was not even reserved: set 0 failed first).
    assert_eq!(allocations(tmp.path()).len(), 2);
    // An empty address file (a reference process crashed mid-write) is taken.
    fs::write(tmp.path().join(NET).join("10.0.0.43"), "").unwrap();
    assert_err(
        add_args(&p, &c, "b", "eth0", "IP=10.0.0.43"),
        ErrorCode::Plugin(110),
        "CNI_ARGS IP=10.0.0.43: 10.0.0.43 is already allocated to an unknown owner",
    );
    // And skipped by allocation.
    fs::write(tmp.path().join(NET).join("last_reserved_ip.0"), "10.0.0.42").unwrap();
    assert_eq!(addrs(&add(&p, &c, "b", "eth0").unwrap())[0], "10.0.0.44/24");
}

#[test]
fn second_add_of_the_same_attachment_is_refused() {
    // The reference: "<ip> has been allocated to <id>, duplicate allocation
    // is not allowed".
    let (tmp, c) = one_range_net(json!({"subnet": "10.0.0.0/24"}));
    let p = HostLocal::new();
    add(&p, &c, "a", "eth0").unwrap();
    let e = assert_err(
        add(&p, &c, "a", "eth0"),
        ErrorCode::Plugin(112),
        "ipam.ranges[0]: 10.0.0.2 has been allocated to a, duplicate allocation is not allowed",
    );
    assert_eq!(e.msg, "duplicate allocation");
    assert_err(
        add(
            &p,
            &with(c.clone(), "runtimeConfig", json!({"ips": ["10.0.0.9"]})),
            "a",
            "eth0",
        ),
        ErrorCode::Plugin(112),
        "ipam.ranges[0]: 10.0.0.2",
    );
    // Another interface of the same container is another attachment.
    assert_eq!(ip_of(&add(&p, &c, "a", "net1").unwrap()), "10.0.0.3");
    // An old-format file (container ID only) holds for every interface.
    fs::write(tmp.path().join(NET).join("10.0.0.77"), "old").unwrap();
    assert_err(
        add(&p, &c, "old", "eth5"),
        ErrorCode::Plugin(112),
        "ipam.ranges[0]: 10.0.0.77 has been allocated to old",
    );
    assert_eq!(allocations(tmp.path()).len(), 3);
}

#[test]
fn a_persistent_owner_holds_addresses_across_containers_until_released_by_name() {
    // args.plexus.persistentOwner: plexus's IPAMClaim binding (multi-net-spec
    // §8). The owner, not the container, holds the addresses; a later
    // container of the same owner gets them back; DEL keeps them; a DEL
    // without the key, with the owner as container ID, releases them.
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("data");
    let plain = conf("1.1.0", host_local(&d, dual_stack()));
    let claimed = with(
        plain.clone(),
        "args",
        json!({"plexus": {"persistentOwner": "ipamclaim_ns_vm1"}}),
    );
    let p = HostLocal::new();
    add(&p, &plain, "other", "net1").unwrap();
    let first = add(&p, &claimed, "pod-a", "net1").unwrap();
    assert_eq!(addrs(&first), ["10.0.0.3/24", "fd00::3/64"]);
    assert_eq!(
        allocations(&d).get("10.0.0.3").map(String::as_str),
        Some("ipamclaim_ns_vm1\r\nnet1")
    );
    check(&p, &claimed, "pod-a", "net1").unwrap();
    del(&p, &claimed, "pod-a", "net1").unwrap();
    assert_eq!(
        allocations(&d).len(),
        4,
        "DEL keeps a persistent owner's addresses"
    );
    // The re-created pod: same addresses, nothing new reserved.
    let again = add(&p, &claimed, "pod-b", "net1").unwrap();
    assert_eq!(addrs(&again), addrs(&first));
    assert_eq!(allocations(&d).len(), 4);
    // Requested addresses (the claim's status.ips) that it holds already.
    let requested = with(
        claimed.clone(),
        "runtimeConfig",
        json!({"ips": ["10.0.0.3/24", "fd00::3/64"]}),
    );
    assert_eq!(
        addrs(&add(&p, &requested, "pod-c", "net1").unwrap()),
        addrs(&first)
    );
    // Released by name once the claim is gone.
    del(&p, &plain, "ipamclaim_ns_vm1", "net1").unwrap();
    assert_eq!(allocations(&d).len(), 2);
    let two_lines = with(
        plain,
        "args",
        json!({"plexus": {"persistentOwner": "a\nb"}}),
    );
    assert_err(
        add(&p, &two_lines, "x", "net1"),
        ErrorCode::InvalidConfig,
        "args.plexus.persistentOwner: \"a\\nb\" must be one non-empty line",
    );
}

#[test]
fn del_is_idempotent_and_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("data");
    let c = conf("1.1.0", host_local(&d, dual_stack()));
    let p = HostLocal::new();
    // Nothing there at all: success, and nothing is created.
    del(&p, &c, "a", "eth0").unwrap();
    assert!(!d.exists());
    add(&p, &c, "a", "eth0").unwrap();
    add(&p, &c, "a", "net1").unwrap();
    add(&p, &c, "b", "eth0").unwrap();
    del(&p, &c, "a", "eth0").unwrap();
    let left: Vec<String> = allocations(&d).values().cloned().collect();
    assert_eq!(left, ["a\r\nnet1", "b\r\neth0", "a\r\nnet1", "b\r\neth0"]);
    del(&p, &c, "a", "eth0").unwrap();
    assert_eq!(allocations(&d).len(), 4);
    // DEL needs only name and dataDir: a config broken since still cleans up.
    let broken = conf(
        "1.1.0",
        host_local(&d, json!({"ranges": [[{"subnet": "10.0.0.0/33"}]]})),
    );
    del(&p, &broken, "b", "eth0").unwrap();
    assert_eq!(allocations(&d).len(), 2);
    // Old-format files are released when no current-format file matches.
    fs::write(d.join(NET).join("10.0.0.99"), "legacy\n").unwrap();
    fs::write(d.join(NET).join("10.0.0.98"), "legacy").unwrap();
    del(&p, &c, "legacy", "eth0").unwrap();
    assert_eq!(allocations(&d).len(), 2);
    // DEL without a usable data dir location still names the field.
    let bad_dir = with(c, "ipam", json!({"type": "host-local", "dataDir": 1}));
    assert_err(
        del(&p, &bad_dir, "a", "eth0"),
        ErrorCode::InvalidConfig,
        "ipam.dataDir: invalid type",
    );
}

#[test]
fn check_needs_an_address_of_the_attachment() {
    let (tmp, c) = one_range_net(json!({"subnet": "10.0.0.0/24"}));
    let p = HostLocal::new();
    let e = assert_err(
        check(&p, &c, "a", "eth0"),
        ErrorCode::UnknownContainer,
        "CNI_CONTAINERID: container a (interface eth0) holds no address in network testnet",
    );
    assert!(e
        .details
        .contains(&tmp.path().join(NET).display().to_string()));
    add(&p, &c, "a", "eth0").unwrap();
    check(&p, &c, "a", "eth0").unwrap();
    assert_err(
        check(&p, &c, "a", "net1"),
        ErrorCode::UnknownContainer,
        "CNI_CONTAINERID: container a (interface net1)",
    );
    del(&p, &c, "a", "eth0").unwrap();
    assert_err(
        check(&p, &c, "a", "eth0"),
        ErrorCode::UnknownContainer,
        "CNI_CONTAINERID: container a",
    );
    fs::write(tmp.path().join(NET).join("10.0.0.50"), "legacy").unwrap();
    check(&p, &c, "legacy", "eth0").unwrap();
    // CHECK validates the configuration.
    assert_err(
        check(
            &p,
            &one_range(tmp.path(), json!({"subnet": "10.0.0.0/31"})),
            "a",
            "eth0",
        ),
        ErrorCode::InvalidConfig,
        "ipam.ranges[0][0].subnet: Network 10.0.0.0/31 too small",
    );
}

#[test]
fn gc_releases_what_is_not_valid_and_leaves_the_rest() {
    // cni-SPEC §2 GC with cni.dev/valid-attachments.
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let c = conf("1.1.0", host_local(d, dual_stack()));
    let p = HostLocal::new();
    for (id, ifname) in [
        ("keep", "eth0"),
        ("keep", "net1"),
        ("gone", "eth0"),
        ("gone2", "eth0"),
    ] {
        add(&p, &c, id, ifname).unwrap();
    }
    let dir = d.join(NET);
    fs::write(dir.join("10.0.0.200"), "legacy-kept").unwrap();
    fs::write(dir.join("10.0.0.201"), "legacy-gone").unwrap();
    // Empty: a crash between a file's creation and its content (the
    // reference's O_EXCL write, or plexus's before its sync): no attachment
    // can own it, so GC reclaims it.
    fs::write(dir.join("10.0.0.202"), "").unwrap();
    fs::write(dir.join("notes.txt"), "gone\r\neth0").unwrap(); // not an address: left alone
    fs::write(dir.join(".plexus-tmp.10.0.0.9"), "gone\r\neth0").unwrap(); // crash leftover: removed
    gc(
        &p,
        &c,
        &[("keep", "eth0"), ("keep", "net1"), ("legacy-kept", "eth3")],
    )
    .unwrap();
    let f = files(d);
    let names: Vec<&str> = f.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "10.0.0.2",
            "10.0.0.200",
            "10.0.0.3",
            "fd00::2",
            "fd00::3",
            "last_reserved_ip.0",
            "last_reserved_ip.1",
            "lock",
            "notes.txt"
        ]
    );
    assert_eq!(f["10.0.0.3"], "keep\r\nnet1");
    // Nothing valid: everything of ours goes, the rest stays.
    gc(&p, &c, &[]).unwrap();
    assert!(allocations(d).is_empty());
    assert!(files(d).contains_key("notes.txt"));
    // No directory: nothing to do, nothing created.
    let other = conf(
        "1.1.0",
        host_local(&d.join("none"), json!({"subnet": "10.0.0.0/24"})),
    );
    gc(&p, &other, &[]).unwrap();
    assert!(!d.join("none").exists());
}

#[test]
fn status_reports_exhaustion_with_code_50() {
    // cni-SPEC §2 STATUS: 50 = "The plugin is not available".
    let (tmp, c) = host_local_net(
        "1.1.0",
        json!({"ranges": [
        [{"subnet": "10.0.0.0/29", "rangeStart": "10.0.0.2", "rangeEnd": "10.0.0.3"}],
        [{"subnet": "fd00::/64"}]]}),
    );
    let p = HostLocal::new();
    status(&p, &c).unwrap();
    add(&p, &c, "a", "eth0").unwrap();
    status(&p, &c).unwrap();
    add(&p, &c, "b", "eth0").unwrap();
    // The IPv4 set is full: no ADD can succeed although IPv6 has room.
    let e = assert_err(
        status(&p, &c),
        ErrorCode::NotAvailable,
        "ipam.ranges[0]: all 2 addresses of range set 10.0.0.2-10.0.0.3 are allocated",
    );
    assert_eq!(e.msg, "no IP addresses available");
    del(&p, &c, "a", "eth0").unwrap();
    status(&p, &c).unwrap();
    // A range that is nothing but its gateway is exhausted from the start.
    let only_gw = one_range(
        &tmp.path().join("x"),
        json!({"subnet": "10.1.0.0/24", "rangeStart": "10.1.0.1", "rangeEnd": "10.1.0.1"}),
    );
    assert_err(
        status(&p, &only_gw),
        ErrorCode::NotAvailable,
        "ipam.ranges[0]: all 0 addresses",
    );
    assert_exhausted(add(&p, &only_gw, "a", "eth0"), "ipam.ranges[0]");
}

#[test]
fn leftover_temp_files_are_ignored() {
    // Crash safety: a temp file left by a crash is neither an allocation nor
    // an obstacle.
    let (tmp, c) = one_range_net(json!({"subnet": "10.0.0.0/24"}));
    let dir = tmp.path().join(NET);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(".plexus-tmp.10.0.0.2"), "crashed\r\neth0").unwrap();
    fs::write(dir.join(".plexus-tmp.last_reserved_ip.0"), "10.0.0.200").unwrap();
    let p = HostLocal::new();
    assert_err(
        check(&p, &c, "crashed", "eth0"),
        ErrorCode::UnknownContainer,
        "CNI_CONTAINERID: container crashed",
    );
    assert_eq!(ip_of(&add(&p, &c, "a", "eth0").unwrap()), "10.0.0.2");
    assert_eq!(
        fs::read_to_string(dir.join("10.0.0.2")).unwrap(),
        "a\r\neth0"
    );
    // Addresses are written unnamed (O_TMPFILE) and the hint in place, so
    // temp files (a crashed older plexus's) stay until GC.
    assert_eq!(
        files(tmp.path()).keys().collect::<Vec<_>>(),
        [
            ".plexus-tmp.10.0.0.2",
            ".plexus-tmp.last_reserved_ip.0",
            "10.0.0.2",
            "last_reserved_ip.0",
            "lock"
        ]
    );
    fs::write(dir.join(".plexus-tmp.10.0.0.99"), "x").unwrap();
    assert_eq!(ip_of(&add(&p, &c, "b", "eth0").unwrap()), "10.0.0.3");
    gc(&p, &c, &[("a", "eth0"), ("b", "eth0")]).unwrap();
    assert!(!dir.join(".plexus-tmp.10.0.0.2").exists());
    assert!(!dir.join(".plexus-tmp.10.0.0.99").exists());
    assert!(!dir.join(".plexus-tmp.last_reserved_ip.0").exists());
    assert_eq!(allocations(tmp.path()).len(), 2);
}

#[test]
fn data_dir_default_and_errors() {
    let tmp = tempfile::tempdir().unwrap();
    // A dataDir that cannot be created is an I/O error naming the path.
    let file = tmp.path().join("file");
    fs::write(&file, "").unwrap();
    let c = one_range(&file, json!({"subnet": "10.0.0.0/24"}));
    let e = assert_err(
        add(&HostLocal::new(), &c, "a", "eth0"),
        ErrorCode::Io,
        &file.join(NET).display().to_string(),
    );
    assert!(e.details.contains("ot a directory"), "{}", e.details);
    // Without dataDir the default directory is named in errors about it.
    let mut c = conf(
        "1.1.0",
        json!({"type": "host-local", "subnet": "10.0.0.0/24"}),
    );
    c["name"] = json!("plexus-test-never-created");
    let e = assert_err(
        check(&HostLocal::new(), &c, "a", "eth0"),
        ErrorCode::UnknownContainer,
        "CNI_CONTAINERID",
    );
    assert!(
        e.details
            .contains("/var/lib/cni/networks/plexus-test-never-created"),
        "{}",
        e.details
    );
}

#[test]
fn ip_ranges_capability_and_legacy_range_come_first() {
    // cni-CONVENTIONS `ipRanges`: the runtime's range sets are prepended, then
    // the legacy single range, then ipam.ranges; the order fixes the index
    // of last_reserved_ip.<n>.
    let (tmp, c) = host_local_net(
        "1.1.0",
        json!({
        "subnet": "10.1.0.0/24",
        "ranges": [[{"subnet": "10.2.0.0/24"}]]}),
    );
    let c = with(
        c,
        "runtimeConfig",
        json!({"ipRanges": [[{"subnet": "10.3.0.0/24", "rangeStart": "10.3.0.50"}]]}),
    );
    let r = add(&HostLocal::new(), &c, "a", "eth0").unwrap();
    assert_eq!(addrs(&r), ["10.3.0.50/24", "10.1.0.2/24", "10.2.0.2/24"]);
    let f = files(tmp.path());
    assert_eq!(
        (
            f["last_reserved_ip.0"].as_str(),
            f["last_reserved_ip.1"].as_str(),
            f["last_reserved_ip.2"].as_str()
        ),
        ("10.3.0.50", "10.1.0.2", "10.2.0.2")
    );
    // A runtime range overlapping the configured ones is rejected.
    let bad = with(
        c.clone(),
        "runtimeConfig",
        json!({"ipRanges": [[{"subnet": "10.2.0.0/16"}]]}),
    );
    assert_err(
        add(&HostLocal::new(), &bad, "b", "eth0"),
        ErrorCode::InvalidConfig,
        "ipam.ranges[0]: range set overlaps with range set runtimeConfig.ipRanges[0]: ipam.ranges[0][0] (10.2.0.1-10.2.0.254) overlaps runtimeConfig.ipRanges[0][0]",
    );
    assert_err(
        add(
            &HostLocal::new(),
            &with(
                c,
                "runtimeConfig",
                json!({"ipRanges": [[{"subnet": "10.4.0.0/31"}]]}),
            ),
            "b",
            "eth0",
        ),
        ErrorCode::InvalidConfig,
        "runtimeConfig.ipRanges[0][0].subnet: Network 10.4.0.0/31 too small to allocate from",
    );
}
