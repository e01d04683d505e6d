//! The tuning plugin against the real kernel, in a node and a pod namespace
//! it creates (root only), and side by side with the reference plugin
//! (containernetworking-plugins v1.1.1).
#[path = "common/chained.rs"]
mod chained;
mod common;

use chained::{env, have_reference, normalised, Attachment, CallResult};
use common::{assert_error, request};
use plexus_cni::env::{CniCommand, CniEnv};
use plexus_cni::skel::Plugin;
use plexus_cni::{CniVersion, ErrorCode};
use plexus_dataplane::drivers::tuning::{saved_path, Tuning};
use plexus_dataplane::{NetNs, Session};
use serde_json::{json, Value};
use std::path::Path;

const CID: &str = "ctr-tuning-1";

fn has_flag(link: &Value, flag: &str) -> bool {
    link["flags"].as_array().unwrap().iter().any(|f| f == flag)
}

/// (mac, mtu, promisc, allmulti, txqlen) of a pod interface per `ip -j`.
fn state(a: &Attachment, name: &str) -> (String, u64, bool, bool, u64) {
    let l = a.pod_link(name);
    (
        l["address"].as_str().unwrap().to_string(),
        l["mtu"].as_u64().unwrap(),
        has_flag(&l, "PROMISC"),
        has_flag(&l, "ALLMULTI"),
        l["txqlen"].as_u64().unwrap(),
    )
}

fn config(a: &Attachment, data_dir: &Path, extra: Value) -> Value {
    a.chained_config(
        json!({"name": "tnet", "type": "tuning", "dataDir": data_dir}),
        extra,
    )
}

/// A root-only test's pod `eth0` (its peer `veth0` in the node), a data
/// directory and the pod's netns path; `None` (the test skipped) without
/// root.
fn pod() -> Option<(Attachment, tempfile::TempDir, String)> {
    let (a, ns) = Attachment::for_root_test()?;
    Some((a, tempfile::tempdir().unwrap(), ns))
}

/// [`pod`] with the tuning configuration for it, `extra`'s keys set over it.
fn pod_with(extra: Value) -> Option<(Attachment, tempfile::TempDir, String, Value)> {
    let (a, dir, ns) = pod()?;
    let conf = config(&a, dir.path(), extra);
    Some((a, dir, ns, conf))
}

/// Runs the tuning plugin for `command` on `a`'s pod interface.
fn run_tuning(
    a: &Attachment,
    command: CniCommand,
    netns: Option<&str>,
    config: &Value,
) -> CallResult {
    a.run_command(&Tuning::new(&Session::new()), command, CID, netns, config)
}

/// Runs the tuning plugin in `a`'s node namespace with `env`.
fn tuning(a: &Attachment, env: CniEnv, config: &Value) -> CallResult {
    a.run_plugin(&Tuning::new(&Session::new()), env, config)
}

#[test]
fn add_applies_everything_del_restores_the_link() {
    let Some((a, dir, ns, conf)) = pod_with(json!({
        "sysctl": {"net.ipv4.conf.IFNAME.rp_filter": "2", "net.core.somaxconn": "1000"},
        "mac": "02:11:22:33:44:55", "mtu": 1400, "promisc": true, "allmulti": true, "txQLen": 500,
    })) else {
        return;
    };
    let before = state(&a, "eth0");

    let result = run_tuning(&a, CniCommand::Add, Some(&ns), &conf).unwrap();
    // cni-SPEC "Appendix: Examples": the result is prevResult with the
    // container interface's mac updated.
    let mut want = a.prev_result("1.0.0");
    want["interfaces"][1]["mac"] = json!("02:11:22:33:44:55");
    assert_eq!(result, want);
    assert_eq!(
        state(&a, "eth0"),
        ("02:11:22:33:44:55".into(), 1400, true, true, 500)
    );
    assert_eq!(a.pod_sysctl("net/ipv4/conf/eth0/rp_filter"), "2");
    assert_eq!(a.pod_sysctl("net/core/somaxconn"), "1000");
    // The originals, in the reference's file and format.
    let path = saved_path(dir.path(), CID, "eth0");
    let saved = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        saved,
        format!(
            "{{\n \"mac\": \"{}\",\n \"promisc\": false,\n \"mtu\": 1500,\n \"allmulti\": false,\n \"txQLen\": 1000\n}}",
            before.0
        )
    );
    run_tuning(&a, CniCommand::Check, Some(&ns), &conf).unwrap();

    run_tuning(&a, CniCommand::Del, Some(&ns), &conf).unwrap();
    assert_eq!(state(&a, "eth0"), before);
    assert!(!path.exists());
    // Sysctls are not restored, as in the reference: they live and die
    // with the pod's namespace.
    assert_eq!(a.pod_sysctl("net/ipv4/conf/eth0/rp_filter"), "2");
    // DEL again: nothing saved, nothing to do.
    run_tuning(&a, CniCommand::Del, Some(&ns), &conf).unwrap();
    assert_eq!(state(&a, "eth0"), before);
}

#[test]
fn check_names_what_drifted() {
    let Some((a, _dir, ns, conf)) = pod_with(
        json!({"sysctl": {"net.ipv4.conf.IFNAME.arp_ignore": "1"}, "mtu": 1300, "allmulti": true}),
    ) else {
        return;
    };
    run_tuning(&a, CniCommand::Add, Some(&ns), &conf).unwrap();
    run_tuning(&a, CniCommand::Check, Some(&ns), &conf).unwrap();

    a.pod.ip(&["link", "set", "eth0", "mtu", "1280"]);
    let e = run_tuning(&a, CniCommand::Check, Some(&ns), &conf).unwrap_err();
    assert_eq!(e.details, "mtu: eth0 has 1280, the configuration says 1300");
    a.pod.ip(&["link", "set", "eth0", "mtu", "1300"]);
    a.pod.ip(&["link", "set", "eth0", "promisc", "on"]);
    let e = run_tuning(&a, CniCommand::Check, Some(&ns), &conf).unwrap_err();
    assert_eq!(
        e.details,
        "promisc: eth0 has true, the configuration says false"
    );
    a.pod.ip(&["link", "set", "eth0", "promisc", "off"]);
    run_tuning(&a, CniCommand::Check, Some(&ns), &conf).unwrap();
    common::run(
        "ip",
        &[
            "netns",
            "exec",
            &a.pod.name,
            "sysctl",
            "-qw",
            "net.ipv4.conf.eth0.arp_ignore=2",
        ],
    );
    let e = run_tuning(&a, CniCommand::Check, Some(&ns), &conf).unwrap_err();
    assert_eq!(
        e.details,
        "sysctl[\"net.ipv4.conf.IFNAME.arp_ignore\"]: is \"2\" in the pod's namespace, the configuration says \"1\""
    );
    // CHECK needs prevResult (cni-SPEC §3: chained).
    let mut no_prev = conf.clone();
    no_prev.as_object_mut().unwrap().remove("prevResult");
    let e = run_tuning(&a, CniCommand::Check, Some(&ns), &no_prev).unwrap_err();
    assert!(e.details.starts_with("prevResult: missing"), "{e}");
}

#[test]
fn del_succeeds_when_the_interface_or_namespace_is_gone() {
    let Some((a, dir, ns)) = pod() else { return };
    a.add_pair("veth1", "net1");
    let conf = config(&a, dir.path(), json!({"mtu": 1400}));
    let add = |ifname: &str| {
        tuning(&a, env(CniCommand::Add, CID, Some(&ns), ifname, ""), &conf).unwrap();
        saved_path(dir.path(), CID, ifname)
    };
    let del = |ifname: &str, netns: Option<&str>| {
        tuning(&a, env(CniCommand::Del, CID, netns, ifname, ""), &conf)
    };
    let (eth0, net1) = (add("eth0"), add("net1"));
    assert!(eth0.exists() && net1.exists());

    // The interface is gone: success, and the saved file goes too.
    a.pod.ip(&["link", "del", "net1"]);
    del("net1", Some(&ns)).unwrap();
    assert!(!net1.exists());
    // No namespace in the request (containerd's late DEL): success.
    del("eth0", None).unwrap();
    assert!(!eth0.exists());

    let eth0 = add("eth0");
    assert!(eth0.exists());
    // The namespace is deleted: success.
    NetNs::delete_named(&a.pod.name).unwrap();
    del("eth0", Some(&ns)).unwrap();
    assert!(!eth0.exists());
    del("eth0", Some(&ns)).unwrap();
}

#[test]
fn bad_input_changes_nothing() {
    let Some((a, dir, ns)) = pod() else { return };
    let before = state(&a, "eth0");
    let somaxconn = a.pod_sysctl("net/core/somaxconn");
    let cases = [
        (
            json!({"mtu": 1400, "sysctl": {"net.core.somaxconn": "7", "kernel.hostname": "x"}}),
            ErrorCode::InvalidConfig,
            "sysctl[\"kernel.hostname\"]: invalid sysctl key \"kernel.hostname\": only keys under net are allowed",
        ),
        (
            json!({"sysctl": {"net.core.somaxconn": 7}}),
            ErrorCode::InvalidConfig,
            "sysctl[\"net.core.somaxconn\"]: must be a string, got 7",
        ),
        (json!({"mtu": "1400"}), ErrorCode::InvalidConfig, "mtu: invalid type: string \"1400\", expected u32"),
        (json!({"allmulti": "yes", "mtu": 1400}), ErrorCode::InvalidConfig, "allmulti: invalid type"),
        (json!({"mac": "02:11:22:33:44"}), ErrorCode::InvalidConfig, "mac: invalid MAC address"),
        // A sysctl the pod's namespace does not have: found before
        // anything changes.
        (
            json!({"mtu": 1400, "sysctl": {"net.core.somaxconn": "7", "net.ipv4.no_such_thing": "1"}}),
            ErrorCode::InvalidConfig,
            "sysctl: read sysctl net.ipv4.no_such_thing in",
        ),
    ];
    for (extra, code, details) in cases {
        let e = run_tuning(
            &a,
            CniCommand::Add,
            Some(&ns),
            &config(&a, dir.path(), extra.clone()),
        )
        .unwrap_err();
        assert_eq!(e.code, code, "{extra}: {e}");
        assert!(e.details.starts_with(details), "{extra}: {e}");
    }
    let mut no_prev = config(&a, dir.path(), json!({"mtu": 1400}));
    no_prev.as_object_mut().unwrap().remove("prevResult");
    let e = run_tuning(&a, CniCommand::Add, Some(&ns), &no_prev).unwrap_err();
    assert_error(
        &e,
        ErrorCode::InvalidConfig,
        "prevResult: missing: tuning is a chained plugin",
    );
    let e = run_tuning(
        &a,
        CniCommand::Add,
        Some("/var/run/netns/pxt-none"),
        &config(&a, dir.path(), json!({})),
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::UnknownContainer, "{e}");

    assert_eq!(state(&a, "eth0"), before);
    assert_eq!(a.pod_sysctl("net/core/somaxconn"), somaxconn);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_failure_half_way_restores_what_was_changed() {
    // The MAC and promiscuous mode are applied, then the kernel refuses
    // the MTU (a veth's maximum is 65535).
    let Some((a, dir, ns, conf)) = pod_with(
        json!({"sysctl": {"net.core.somaxconn": "77"}, "mac": "02:11:22:33:44:55", "promisc": true, "mtu": 70000}),
    ) else {
        return;
    };
    let before = state(&a, "eth0");
    let somaxconn = a.pod_sysctl("net/core/somaxconn");
    let e = run_tuning(&a, CniCommand::Add, Some(&ns), &conf).unwrap_err();
    // A kernel refusal is code 5, as from every built-in plugin.
    assert_error(&e, ErrorCode::Io, "mtu: setting 70000 on eth0: update link");
    assert!(!e.details.contains("undoing"), "{e}");
    assert_eq!(state(&a, "eth0"), before);
    assert_eq!(a.pod_sysctl("net/core/somaxconn"), somaxconn);
    assert!(!saved_path(dir.path(), CID, "eth0").exists());
}

#[test]
fn a_repeated_add_keeps_the_first_originals() {
    let Some((a, dir, ns)) = pod() else { return };
    let before = state(&a, "eth0");
    // Each call with the test's namespace and data directory.
    let run = |command, extra| run_tuning(&a, command, Some(&ns), &config(&a, dir.path(), extra));
    run(CniCommand::Add, json!({"mtu": 1400})).unwrap();
    run(CniCommand::Add, json!({"mtu": 1300, "txQLen": 10})).unwrap();
    assert_eq!(state(&a, "eth0").1, 1300);
    run(CniCommand::Del, json!({})).unwrap();
    assert_eq!(state(&a, "eth0"), before);
}

#[test]
fn runtime_config_mac_and_cni_args() {
    // cni-CONVENTIONS "mac" capability beats CNI_ARGS MAC and the key.
    let Some((a, _dir, ns, conf)) = pod_with(
        json!({"mac": "02:00:00:00:00:0a", "runtimeConfig": {"mac": "02:00:00:00:00:0c"}}),
    ) else {
        return;
    };
    let req = request(
        env(
            CniCommand::Add,
            CID,
            Some(&ns),
            "eth0",
            "IgnoreUnknown=1;K8S_POD_NAME=p;MAC=02:00:00:00:00:0b",
        ),
        &conf,
    );
    let result = a
        .in_node(|| Tuning::new(&Session::new()).add(&req))
        .unwrap();
    assert_eq!(
        result.interfaces[1].mac.as_deref(),
        Some("02:00:00:00:00:0c")
    );
    assert_eq!(state(&a, "eth0").0, "02:00:00:00:00:0c");
    // The result in an older version keeps the change (0.4.0 still has
    // interfaces).
    let v = result.to_value(CniVersion::V0_4_0).unwrap();
    assert_eq!(v["interfaces"][1]["mac"], "02:00:00:00:00:0c");
}

/// The same configuration and prevResult through the reference plugin and
/// ours, on two interfaces that start identical: same result JSON, same
/// kernel state, same saved file; and each one's DEL undoes the other's
/// ADD (the saved files are interchangeable).
#[test]
fn behaves_as_the_reference_plugin() {
    let Some(a) = Attachment::side_by_side() else {
        return;
    };
    let orig_mac = "02:aa:00:00:00:01";
    a.set_pod_mac("eth0", orig_mac);
    a.set_pod_mac("eth1", orig_mac);
    let (ours_dir, ref_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ns = a.netns_path();
    // txQLen is left out: v1.1.1 predates it.
    let extra = json!({
        "sysctl": {"net.ipv4.conf.IFNAME.rp_filter": "2", "net.ipv4.conf.IFNAME.arp_announce": "1"},
        "mac": "02:11:22:33:44:55", "mtu": 1400, "promisc": true, "allmulti": true,
    });
    for version in ["1.0.0", "0.4.0", "0.3.1"] {
        let mut ours_conf = config(&a, ours_dir.path(), extra.clone());
        let mut ref_conf = config(&a, ref_dir.path(), extra.clone());
        for (c, ifname) in [(&mut ours_conf, "eth0"), (&mut ref_conf, "eth1")] {
            c["cniVersion"] = json!(version);
            let mut prev = a.prev_result(version);
            prev["interfaces"][1]["name"] = json!(ifname);
            c["prevResult"] = prev;
        }
        let ours_env = env(CniCommand::Add, CID, Some(&ns), "eth0", "");
        let ref_env = env(CniCommand::Add, CID, Some(&ns), "eth1", "");
        let ours = tuning(&a, ours_env, &ours_conf).unwrap();
        let theirs = a.run_reference("tuning", &ref_env, &ref_conf).unwrap();
        let mut theirs = normalised(theirs);
        theirs["interfaces"][1]["name"] = json!("eth0");
        assert_eq!(ours, theirs, "version {version}");

        let (s0, s1) = (state(&a, "eth0"), state(&a, "eth1"));
        assert_eq!(s0, s1);
        assert_eq!(s0, ("02:11:22:33:44:55".into(), 1400, true, true, 1000));
        for key in ["rp_filter", "arp_announce"] {
            assert_eq!(
                a.pod_sysctl(&format!("net/ipv4/conf/eth0/{key}")),
                a.pod_sysctl(&format!("net/ipv4/conf/eth1/{key}"))
            );
        }
        let ours_file = std::fs::read(saved_path(ours_dir.path(), CID, "eth0")).unwrap();
        let ref_file = std::fs::read(saved_path(ref_dir.path(), CID, "eth1")).unwrap();
        assert_eq!(
            String::from_utf8(ours_file).unwrap(),
            String::from_utf8(ref_file).unwrap()
        );

        // CHECK agrees on both states (CHECK exists from 0.4.0; v1.1.1's
        // CHECK does not substitute IFNAME in sysctl keys, so they are
        // left out).
        for ifname in ["eth0", "eth1"] {
            if version == "0.3.1" {
                break;
            }
            let mut c = ours_conf.clone();
            c.as_object_mut().unwrap().remove("sysctl");
            c["prevResult"]["interfaces"][1]["name"] = json!(ifname);
            let check_env = env(CniCommand::Check, CID, Some(&ns), ifname, "");
            tuning(&a, check_env.clone(), &c).unwrap();
            a.run_reference("tuning", &check_env, &c).unwrap();
        }

        // Cross DEL: the reference restores our ADD and we restore its.
        let mut ours_del_conf = ref_conf.clone();
        ours_del_conf["dataDir"] = json!(ref_dir.path());
        let ours_del = env(CniCommand::Del, CID, Some(&ns), "eth1", "");
        tuning(&a, ours_del, &ours_del_conf).unwrap();
        let ref_del = env(CniCommand::Del, CID, Some(&ns), "eth0", "");
        a.run_reference("tuning", &ref_del, &ours_conf).unwrap();
        for ifname in ["eth0", "eth1"] {
            assert_eq!(
                state(&a, ifname),
                (orig_mac.into(), 1500, false, false, 1000),
                "{version} {ifname}"
            );
        }
        assert_eq!(std::fs::read_dir(ours_dir.path()).unwrap().count(), 0);
        assert_eq!(std::fs::read_dir(ref_dir.path()).unwrap().count(), 0);
    }

    // Both refuse a sysctl outside net.*, naming it.
    let bad = config(
        &a,
        ours_dir.path(),
        json!({"sysctl": {"kernel.hostname": "x"}}),
    );
    let add_eth1 = env(CniCommand::Add, CID, Some(&ns), "eth1", "");
    let e = a.run_reference("tuning", &add_eth1, &bad).unwrap_err();
    assert!(
        e["msg"].as_str().unwrap().contains("kernel.hostname"),
        "{e}"
    );
    let e = run_tuning(&a, CniCommand::Add, Some(&ns), &bad).unwrap_err();
    assert!(e.details.contains("kernel.hostname"), "{e}");
}

#[test]
fn sysctls_alone_need_no_interface_as_in_the_reference() {
    // The reference's cmdAdd looks the link up only for mac, mtu, promisc,
    // allmulti and txQLen, so a sysctl-only tuning runs where CNI_IFNAME
    // names no interface: Multus's auxiliary chain gives it `net<n>`, with
    // the empty result of its passthru as prevResult.
    let Some((a, dir, ns)) = pod() else { return };
    let empty = json!({"cniVersion": "1.0.0"});
    let conf = |key: &str| {
        json!({"cniVersion": "1.0.0", "name": "chain", "type": "tuning",
               "dataDir": dir.path(), "prevResult": empty,
               "sysctl": {format!("net.ipv4.conf.eth0.{key}"): "1"}})
    };
    let add_net1 = env(CniCommand::Add, CID, Some(&ns), "net1", "");
    let result = tuning(&a, add_net1, &conf("arp_filter")).unwrap();
    assert_eq!(result, empty);
    assert_eq!(a.pod_sysctl("net/ipv4/conf/eth0/arp_filter"), "1");
    assert!(!saved_path(dir.path(), CID, "net1").exists());
    let del_net1 = env(CniCommand::Del, CID, Some(&ns), "net1", "");
    tuning(&a, del_net1, &conf("arp_filter")).unwrap();
    // A link change still needs the interface.
    let mut mtu = conf("arp_filter");
    mtu["mtu"] = json!(1400);
    let e = tuning(&a, env(CniCommand::Add, CID, Some(&ns), "net1", ""), &mtu).unwrap_err();
    // Code 7 naming CNI_IFNAME, as bandwidth's for the same failure.
    assert_error(
        &e,
        ErrorCode::InvalidConfig,
        "CNI_IFNAME: no interface \"net1\"",
    );

    if have_reference() {
        let env = env(CniCommand::Add, CID, Some(&ns), "net1", "");
        a.run_reference("tuning", &env, &conf("arp_announce"))
            .unwrap();
        assert_eq!(a.pod_sysctl("net/ipv4/conf/eth0/arp_announce"), "1");
    }
}
