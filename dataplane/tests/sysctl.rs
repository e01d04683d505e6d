//! Sysctls inside throw-away namespaces; the root namespace's values must not
//! change.
mod common;
use common::ifname;

use common::{root_ns, run, TestNs};
use plexus_dataplane::netlink::VethSpec;
use plexus_dataplane::sysctl::{self, SysctlKey};
use plexus_dataplane::{Errno, Error, Netlink};

fn root_value(path: &str) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// `cat FILE` run by iproute2 inside the namespace: an independent reader.
fn ns_cat(t: &TestNs, path: &str) -> String {
    run("ip", &["netns", "exec", &t.name, "cat", path])
        .trim_end()
        .to_string()
}

#[test]
fn write_and_read_inside_namespace_only() {
    let Some(t) = root_ns() else { return };
    let fwd = SysctlKey::parse("net.ipv4.ip_forward").unwrap();
    let somaxconn = SysctlKey::parse("net/core/somaxconn").unwrap();
    let root_fwd = root_value("/proc/sys/net/ipv4/ip_forward");
    let root_somax = root_value("/proc/sys/net/core/somaxconn");
    // Pick values that differ from the root's, so a leak would show.
    let want_fwd = if root_fwd.trim() == "1" { "0" } else { "1" };
    let want_somax = if root_somax.trim() == "1234" {
        "1235"
    } else {
        "1234"
    };
    sysctl::write_all(
        &t.ns,
        &[
            (fwd.clone(), want_fwd.to_string()),
            (somaxconn.clone(), want_somax.to_string()),
        ],
    )
    .unwrap();
    assert_eq!(sysctl::read(&t.ns, &fwd).unwrap(), want_fwd);
    assert_eq!(
        sysctl::read_all(&t.ns, &[fwd.clone(), somaxconn.clone()]).unwrap(),
        vec![want_fwd.to_string(), want_somax.to_string()]
    );
    assert_eq!(ns_cat(&t, "/proc/sys/net/ipv4/ip_forward"), want_fwd);
    assert_eq!(ns_cat(&t, "/proc/sys/net/core/somaxconn"), want_somax);
    // The root namespace is untouched.
    assert_eq!(root_value("/proc/sys/net/ipv4/ip_forward"), root_fwd);
    assert_eq!(root_value("/proc/sys/net/core/somaxconn"), root_somax);
}

#[test]
fn per_interface_keys_with_dotted_names() {
    let Some(t) = root_ns() else { return };
    let nl = Netlink::open(&t.ns).unwrap();
    // A vlan-style name on a veth (the host has no 8021q).
    nl.create_veth(&VethSpec::new(ifname("eth0.100"), ifname("peer0")))
        .unwrap();
    let file = "/proc/sys/net/ipv4/conf/eth0.100/rp_filter";
    let root_all = root_value("/proc/sys/net/ipv4/conf/all/rp_filter");
    // The tuning plugin's placeholder form.
    let k =
        SysctlKey::for_interface("net.ipv4.conf.IFNAME.rp_filter", &ifname("eth0.100")).unwrap();
    sysctl::write(&t.ns, &k, "2").unwrap();
    assert_eq!(ns_cat(&t, file), "2");
    // The slash form and sysctl(8)'s '/'-for-dot form reach the same file.
    let slash = SysctlKey::parse("net/ipv4/conf/eth0.100/rp_filter").unwrap();
    sysctl::write(&t.ns, &slash, "1").unwrap();
    assert_eq!(ns_cat(&t, file), "1");
    let escaped = SysctlKey::parse("net.ipv4.conf.eth0/100.rp_filter").unwrap();
    assert_eq!(sysctl::read(&t.ns, &escaped).unwrap(), "1");
    assert_eq!(escaped, slash);
    // The literal dotted name splits at the vlan dot: no such setting, as
    // with the reference plugin; the error names key, namespace and errno.
    let literal = SysctlKey::parse("net.ipv4.conf.eth0.100.rp_filter").unwrap();
    let e = sysctl::write(&t.ns, &literal, "1").unwrap_err();
    assert_eq!(e.errno(), Some(Errno::ENOENT), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("net.ipv4.conf.eth0.100.rp_filter") && text.contains(&t.name),
        "{text}"
    );
    // The interface exists only in the test namespace.
    assert!(!std::path::Path::new(file).exists());
    assert_eq!(
        root_value("/proc/sys/net/ipv4/conf/all/rp_filter"),
        root_all
    );
}

#[test]
fn bad_values_and_keys() {
    let Some(t) = root_ns() else { return };
    let k = SysctlKey::parse("net.ipv4.ip_forward").unwrap();
    let e = sysctl::write(&t.ns, &k, "not-a-number").unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EINVAL), "{e}");
    assert!(matches!(
        sysctl::write(&t.ns, &k, "1\0"),
        Err(Error::Invalid { .. })
    ));
    let missing = SysctlKey::parse("net.ipv4.conf.nosuchif.rp_filter").unwrap();
    let e = sysctl::read(&t.ns, &missing).unwrap_err();
    assert!(e.is_not_found(), "{e}");
    // Keys that would leave /proc/sys/net never reach the filesystem.
    for key in [
        "kernel.hostname",
        "net/../kernel/hostname",
        "/proc/sys/net/ipv4/ip_forward",
        "net..ipv4",
    ] {
        assert!(
            matches!(SysctlKey::parse(key), Err(Error::Invalid { .. })),
            "{key}"
        );
    }
    // write_all stops at the first failure; earlier writes stay.
    let fwd_before = sysctl::read(&t.ns, &k).unwrap();
    let want = if fwd_before == "1" { "0" } else { "1" };
    let e = sysctl::write_all(
        &t.ns,
        &[(k.clone(), want.into()), (missing.clone(), "1".into())],
    )
    .unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert_eq!(sysctl::read(&t.ns, &k).unwrap(), want);
}
