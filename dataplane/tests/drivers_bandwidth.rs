//! The bandwidth plugin against the real kernel, in a node namespace (the
//! host) and a pod namespace it creates (root only), and side by side with
//! the reference plugin (containernetworking-plugins v1.1.1).
#[path = "common/chained.rs"]
mod chained;
mod common;
use common::ifname;

use chained::{env, normalised, Attachment, CallResult};
use common::{assert_error, is_root, run, TestNs};
use plexus_cni::env::{CniCommand, CniEnv};
use plexus_cni::ErrorCode;
use plexus_dataplane::drivers::bandwidth::{ifb_name, Bandwidth};
use plexus_dataplane::netlink::{MacvlanMode, MacvlanSpec};
use plexus_dataplane::{NetNs, Session};
use serde_json::{json, Value};

const CID: &str = "ctr-bw-1";
const NET: &str = "bwnet";

fn config(a: &Attachment, extra: Value) -> Value {
    a.chained_config(json!({"name": NET, "type": "bandwidth"}), extra)
}

fn both_ways() -> Value {
    json!({"ingressRate": 1_000_000, "ingressBurst": 80_000, "egressRate": 2_000_000, "egressBurst": 160_000})
}

/// Runs the bandwidth plugin for `command` on `a`'s pod interface.
fn run_bw(a: &Attachment, command: CniCommand, netns: Option<&str>, config: &Value) -> CallResult {
    let session = Session::new();
    a.run_command(&Bandwidth::new(&session), command, CID, netns, config)
}

/// Runs the bandwidth plugin in `a`'s node namespace with `env`.
fn bandwidth(a: &Attachment, env: CniEnv, config: &Value) -> CallResult {
    a.run_plugin(&Bandwidth::new(&Session::new()), env, config)
}

/// `tc -j qdisc show dev DEV` in `ns`, without counters, keyed "root" or
/// "ingress".
fn qdiscs(ns: &TestNs, dev: &str) -> Vec<Value> {
    ns.tc_json(&["qdisc", "show", "dev", dev])
        .into_iter()
        .map(|mut q| {
            let o = q.as_object_mut().unwrap();
            for k in [
                "dev",
                "refcnt",
                "bytes",
                "packets",
                "drops",
                "overlimits",
                "requeues",
                "backlog",
                "qlen",
            ] {
                o.remove(k);
            }
            q
        })
        .collect()
}

fn tbf_options(ns: &TestNs, dev: &str) -> Value {
    let q = qdiscs(ns, dev);
    let root = q.iter().find(|q| q["root"] == true).expect("a root qdisc");
    assert_eq!(root["kind"], "tbf", "{q:?}");
    assert_eq!(root["handle"], "1:");
    root["options"].clone()
}

/// The mirred actions of the filters under the ingress qdisc of `dev`.
fn redirects(ns: &TestNs, dev: &str) -> Vec<Value> {
    ns.tc_json(&["filter", "show", "dev", dev, "ingress"])
        .iter()
        .filter_map(|f| f["options"]["actions"].as_array())
        .flatten()
        .cloned()
        .collect()
}

fn link_exists(ns: &TestNs, name: &str) -> bool {
    ns.ip_json(&["link", "show"])
        .iter()
        .any(|l| l["ifname"] == name)
}

#[test]
fn add_shapes_both_directions_del_removes_the_ifb() {
    if !is_root() {
        return;
    }
    let a = Attachment::new("veth0", "eth0");
    a.node.ip(&["link", "set", "veth0", "mtu", "1450"]);
    let ns = a.netns_path();
    let conf = config(&a, both_ways());
    let ifb = ifb_name(NET, CID);

    let result = run_bw(&a, CniCommand::Add, Some(&ns), &conf).unwrap();
    let link = a
        .node
        .ip_json(&["-d", "link", "show", "dev", &ifb])
        .remove(0);
    assert_eq!(link["linkinfo"]["info_kind"], "ifb");
    assert_eq!(link["mtu"], 1450, "the ifb takes the host veth's MTU");
    assert!(link["flags"].as_array().unwrap().iter().any(|f| f == "UP"));
    // The result is prevResult plus the ifb.
    let mut want = a.prev_result("1.0.0");
    want["interfaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": ifb, "mac": link["address"]}));
    assert_eq!(result, want);

    // Ingress: tbf on the host veth. Egress: ingress qdisc + redirect on
    // the host veth, tbf on the ifb. Bits in the configuration, bytes here.
    assert_eq!(
        tbf_options(&a.node, "veth0"),
        json!({"rate": 125_000, "burst": 10_000, "lat": 25_000})
    );
    assert_eq!(
        tbf_options(&a.node, &ifb),
        json!({"rate": 250_000, "burst": 20_000, "lat": 25_000})
    );
    assert!(qdiscs(&a.node, "veth0")
        .iter()
        .any(|q| q["kind"] == "ingress" && q["handle"] == "ffff:"));
    let r = redirects(&a.node, "veth0");
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(
        (
            &r[0]["kind"],
            &r[0]["mirred_action"],
            &r[0]["direction"],
            &r[0]["to_dev"]
        ),
        (
            &json!("mirred"),
            &json!("redirect"),
            &json!("egress"),
            &json!(ifb)
        )
    );
    run_bw(&a, CniCommand::Check, Some(&ns), &conf).unwrap();

    run_bw(&a, CniCommand::Del, Some(&ns), &conf).unwrap();
    assert!(!link_exists(&a.node, &ifb));
    // DEL again, and DEL without a namespace: nothing left to do.
    run_bw(&a, CniCommand::Del, Some(&ns), &conf).unwrap();
    run_bw(&a, CniCommand::Del, None, &conf).unwrap();
}

#[test]
fn one_direction_and_the_capability() {
    let Some((a, ns)) = Attachment::for_root_test() else {
        return;
    };
    // Only egress, from the `bandwidth` capability (cni-CONVENTIONS).
    let conf = config(
        &a,
        json!({"runtimeConfig": {"bandwidth": {"egressRate": 8_000_000, "egressBurst": 800_000}}}),
    );
    let result = run_bw(&a, CniCommand::Add, Some(&ns), &conf).unwrap();
    assert_eq!(result["interfaces"].as_array().unwrap().len(), 3);
    let ifb = ifb_name(NET, CID);
    assert_eq!(
        tbf_options(&a.node, &ifb),
        json!({"rate": 1_000_000, "burst": 100_000, "lat": 25_000})
    );
    assert!(qdiscs(&a.node, "veth0").iter().all(|q| q["kind"] != "tbf"));
    run_bw(&a, CniCommand::Check, Some(&ns), &conf).unwrap();
    run_bw(&a, CniCommand::Del, Some(&ns), &conf).unwrap();
    assert!(!link_exists(&a.node, &ifb));

    // Only ingress: no ifb, no result change.
    let a = Attachment::new("veth0", "eth0");
    let ns = a.netns_path();
    let conf = config(&a, json!({"ingressRate": 16_000, "ingressBurst": 16_000}));
    let result = run_bw(&a, CniCommand::Add, Some(&ns), &conf).unwrap();
    assert_eq!(result, a.prev_result("1.0.0"));
    assert_eq!(tbf_options(&a.node, "veth0")["rate"], 2_000);
    assert!(!link_exists(&a.node, &ifb_name(NET, CID)));
    run_bw(&a, CniCommand::Check, Some(&ns), &conf).unwrap();

    // Nothing configured: prevResult passes through untouched.
    let b = Attachment::new("veth0", "eth0");
    let conf = config(&b, json!({}));
    assert_eq!(
        run_bw(&b, CniCommand::Add, Some(&b.netns_path()), &conf).unwrap(),
        b.prev_result("1.0.0")
    );
    assert!(qdiscs(&b.node, "veth0").iter().all(|q| q["kind"] != "tbf"));
}

#[test]
fn check_names_what_drifted() {
    let Some((a, ns)) = Attachment::for_root_test() else {
        return;
    };
    let conf = config(&a, both_ways());
    run_bw(&a, CniCommand::Add, Some(&ns), &conf).unwrap();
    let ifb = ifb_name(NET, CID);

    a.node.tc(&[
        "qdisc", "change", "dev", "veth0", "root", "handle", "1:", "tbf", "rate", "2mbit", "burst",
        "10000", "limit", "13125",
    ]);
    let e = run_bw(&a, CniCommand::Check, Some(&ns), &conf).unwrap_err();
    assert!(
        e.details
            .starts_with("ingressRate: veth0 has tbf rate 250000 bytes/s"),
        "{e}"
    );
    a.node.tc(&["qdisc", "del", "dev", "veth0", "root"]);
    let e = run_bw(&a, CniCommand::Check, Some(&ns), &conf).unwrap_err();
    assert_eq!(
        e.details,
        "ingressRate: the root qdisc of veth0 is noqueue, expected a tbf"
    );

    let ingress_only = config(&a, json!({"egressRate": 2_000_000, "egressBurst": 160_000}));
    run_bw(&a, CniCommand::Check, Some(&ns), &ingress_only).unwrap();
    a.node.tc(&["filter", "del", "dev", "veth0", "ingress"]);
    let e = run_bw(&a, CniCommand::Check, Some(&ns), &ingress_only).unwrap_err();
    assert_eq!(
        e.details,
        format!("egressRate: nothing redirects what veth0 receives to {ifb}")
    );
    a.node.ip(&["link", "del", &ifb]);
    let e = run_bw(&a, CniCommand::Check, Some(&ns), &ingress_only).unwrap_err();
    assert_eq!(
        e.details,
        format!("egressRate: the ifb device {ifb} is missing")
    );
}

#[test]
fn bad_input_builds_nothing() {
    let Some((a, ns)) = Attachment::for_root_test() else {
        return;
    };
    let cases = [
        (
            json!({"ingressRate": 1_000_000}),
            "ingressBurst: missing: ingressRate is set, so the burst must be set too",
        ),
        (
            json!({"egressBurst": 1_000_000}),
            "egressRate: missing: egressBurst is set, so the rate must be set too",
        ),
        (
            json!({"ingressRate": "1M", "ingressBurst": 8}),
            "ingressRate: invalid type: string \"1M\"",
        ),
        (
            json!({"egressRate": 1_000, "egressBurst": 4}),
            "egressBurst: 4 bits is less than one byte",
        ),
        (
            json!({"ingressRate": 8, "ingressBurst": 80_000_000}),
            "ingressBurst: 80000000 bits take 10000000 s to send",
        ),
    ];
    for (extra, details) in cases {
        let e = run_bw(&a, CniCommand::Add, Some(&ns), &config(&a, extra.clone())).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidConfig, "{extra}: {e}");
        assert!(e.details.starts_with(details), "{extra}: {e}");
    }
    let mut no_prev = config(&a, both_ways());
    no_prev.as_object_mut().unwrap().remove("prevResult");
    let e = run_bw(&a, CniCommand::Add, Some(&ns), &no_prev).unwrap_err();
    assert!(
        e.details
            .starts_with("prevResult: missing: bandwidth is a chained plugin"),
        "{e}"
    );

    // prevResult lists the veth's host side under another name.
    let mut wrong = config(&a, both_ways());
    wrong["prevResult"]["interfaces"][0]["name"] = json!("vethX");
    let e = run_bw(&a, CniCommand::Add, Some(&ns), &wrong).unwrap_err();
    assert_eq!(
        e.details,
        "prevResult.interfaces: the veth peer of eth0 is veth0, which is not listed as a host-side interface"
    );
    assert!(qdiscs(&a.node, "veth0")
        .iter()
        .all(|q| q["kind"] == "noqueue"));
    assert!(!link_exists(&a.node, &ifb_name(NET, CID)));
}

#[test]
fn no_host_side_interface_is_a_clear_error() {
    if !is_root() {
        return;
    }
    // A macvlan attachment: its pod interface has no peer on the host.
    let a = Attachment::new("up0", "upstream");
    a.node_nl
        .create_macvlan(&MacvlanSpec {
            netns: Some(&a.pod.ns),
            ..MacvlanSpec::new(
                ifname("net1"),
                a.node_nl
                    .link_by_name(&ifname("up0"))
                    .unwrap()
                    .unwrap()
                    .index,
                MacvlanMode::Bridge,
            )
        })
        .unwrap();
    let ns = a.netns_path();
    let macvlan_prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "net1", "mac": "02:00:00:00:00:01", "sandbox": ns}],
        "ips": [{"address": "10.1.0.2/24", "interface": 0}],
    });
    let mut conf = config(&a, both_ways());
    conf["prevResult"] = macvlan_prev;
    let e = bandwidth(&a, env(CniCommand::Add, CID, Some(&ns), "net1", ""), &conf).unwrap_err();
    assert_error(&e, ErrorCode::InvalidConfig, "prevResult.interfaces: no host-side interface (one without \"sandbox\"): bandwidth shapes a pod's traffic on the host side of its veth pair");
    // Even when prevResult names some host interface, a macvlan is no veth.
    conf["prevResult"]["interfaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "up0"}));
    let e = bandwidth(&a, env(CniCommand::Add, CID, Some(&ns), "net1", ""), &conf).unwrap_err();
    assert_eq!(
        e.details,
        "CNI_IFNAME: net1 in the pod is a macvlan, not a veth: bandwidth shapes a pod's traffic on the host side of its veth pair"
    );
    // No interface of that name in the pod: code 7 naming CNI_IFNAME, as
    // tuning's for the same failure.
    let e = bandwidth(&a, env(CniCommand::Add, CID, Some(&ns), "net9", ""), &conf).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidConfig, "{e}");
    assert_eq!(
        e.details,
        format!("CNI_IFNAME: no interface \"net9\" in {ns}")
    );
    assert!(!link_exists(&a.node, &ifb_name(NET, CID)));
}

#[test]
fn a_failure_half_way_removes_what_was_built() {
    let Some((a, ns)) = Attachment::for_root_test() else {
        return;
    };
    // Someone else's ingress qdisc on the host veth: ours can't be added
    // after the ingress tbf and the ifb were.
    a.node.tc(&["qdisc", "add", "dev", "veth0", "ingress"]);
    let e = run_bw(&a, CniCommand::Add, Some(&ns), &config(&a, both_ways())).unwrap_err();
    // A kernel refusal is code 5, as from every built-in plugin.
    assert_error(
        &e,
        ErrorCode::Io,
        "egressRate: adding an ingress qdisc to veth0: add ingress qdisc",
    );
    assert!(!e.details.contains("undoing"), "{e}");
    assert!(!link_exists(&a.node, &ifb_name(NET, CID)));
    let q = qdiscs(&a.node, "veth0");
    assert!(q.iter().all(|q| q["kind"] != "tbf"), "{q:?}");
    assert!(
        q.iter().any(|q| q["kind"] == "ingress"),
        "the other ingress qdisc stays: {q:?}"
    );
}

#[test]
fn del_needs_neither_the_namespace_nor_a_valid_config() {
    let Some((a, ns)) = Attachment::for_root_test() else {
        return;
    };
    run_bw(&a, CniCommand::Add, Some(&ns), &config(&a, both_ways())).unwrap();
    let ifb = ifb_name(NET, CID);
    assert!(link_exists(&a.node, &ifb));
    NetNs::delete_named(&a.pod.name).unwrap();
    let conf = config(&a, json!({"ingressRate": 5}));
    run_bw(&a, CniCommand::Del, Some(&ns), &conf).unwrap();
    assert!(!link_exists(&a.node, &ifb));
}

/// The same configuration and prevResult through the reference plugin and
/// ours, on two veth pairs: same result (but for the ifb's name and MAC),
/// same qdisc parameters as `tc -j` shows them; each one's CHECK accepts
/// the other's qdiscs (the reference compares rate, buffer and limit
/// exactly) and each one's DEL removes the other's ifb.
#[test]
fn behaves_as_the_reference_plugin() {
    let Some(a) = Attachment::side_by_side() else {
        return;
    };
    let ns = a.netns_path();
    // Odd values exercise the reference's truncations.
    let shaping = json!({"ingressRate": 1_234_567, "ingressBurst": 99_999, "egressRate": 7_654_321, "egressBurst": 333_333});
    let (ours_cid, ref_cid) = ("ctr-ours", "ctr-ref");
    let (ours_ifb, ref_ifb) = (ifb_name(NET, ours_cid), ifb_name(NET, ref_cid));
    for version in ["1.0.0", "0.4.0", "0.3.1"] {
        let conf_for = |host: &str, pod: &str| {
            let mut c = config(&a, shaping.clone());
            c["cniVersion"] = json!(version);
            let mut prev = a.prev_result(version);
            prev["interfaces"][0]["name"] = json!(host);
            prev["interfaces"][1]["name"] = json!(pod);
            c["prevResult"] = prev;
            c
        };
        let (ours_conf, ref_conf) = (conf_for("veth0", "eth0"), conf_for("veth1", "eth1"));
        let ours_env = env(CniCommand::Add, ours_cid, Some(&ns), "eth0", "");
        let ours = bandwidth(&a, ours_env, &ours_conf).unwrap();
        let ref_env = env(CniCommand::Add, ref_cid, Some(&ns), "eth1", "");
        let theirs = normalised(a.run_reference("bandwidth", &ref_env, &ref_conf).unwrap());
        // Same shape: prevResult + {name, mac} of the ifb.
        let mut ours_cmp = ours.clone();
        ours_cmp["interfaces"][0]["name"] = json!("veth1");
        ours_cmp["interfaces"][1]["name"] = json!("eth1");
        ours_cmp["interfaces"][2] = json!({"name": ref_ifb, "mac": theirs["interfaces"][2]["mac"]});
        assert_eq!(ours_cmp, theirs, "version {version}");
        assert_eq!(ours["interfaces"][2]["name"], json!(ours_ifb));

        // Same qdiscs.
        assert_eq!(
            qdiscs(&a.node, "veth0"),
            qdiscs(&a.node, "veth1"),
            "{version}"
        );
        assert_eq!(
            qdiscs(&a.node, &ours_ifb),
            qdiscs(&a.node, &ref_ifb),
            "{version}"
        );
        assert_eq!(tbf_options(&a.node, "veth0")["rate"], 154_320);
        let strip = |mut v: Vec<Value>| {
            for x in &mut v {
                let o = x.as_object_mut().unwrap();
                o.remove("index");
                o.remove("to_dev");
            }
            v
        };
        let (ours_r, ref_r) = (
            strip(redirects(&a.node, "veth0")),
            strip(redirects(&a.node, "veth1")),
        );
        // The reference's filter carries the redirect twice, the second
        // never reached (the first one steals the frame).
        assert_eq!(ours_r.len(), 1);
        assert_eq!(ref_r.len(), 2);
        assert_eq!(ours_r[0], ref_r[0]);

        if version != "0.3.1" {
            // Cross CHECK (CHECK exists from 0.4.0).
            let ours_check = env(CniCommand::Check, ours_cid, Some(&ns), "eth0", "");
            a.run_reference("bandwidth", &ours_check, &ours_conf)
                .unwrap();
            let ref_check = env(CniCommand::Check, ref_cid, Some(&ns), "eth1", "");
            bandwidth(&a, ref_check, &ref_conf).unwrap();
        }

        // Cross DEL: each removes the other's ifb.
        let ours_del = env(CniCommand::Del, ours_cid, Some(&ns), "eth0", "");
        a.run_reference("bandwidth", &ours_del, &ours_conf).unwrap();
        let ref_del = env(CniCommand::Del, ref_cid, Some(&ns), "eth1", "");
        bandwidth(&a, ref_del, &ref_conf).unwrap();
        assert!(!link_exists(&a.node, &ours_ifb));
        assert!(!link_exists(&a.node, &ref_ifb));
        for dev in ["veth0", "veth1"] {
            a.node.tc(&["qdisc", "del", "dev", dev, "root"]);
            a.node.tc(&["qdisc", "del", "dev", dev, "ingress"]);
        }
    }

    // Both refuse a rate without a burst.
    let bad = config(&a, json!({"egressRate": 1000}));
    let add_eth1 = env(CniCommand::Add, CID, Some(&ns), "eth1", "");
    let e = a.run_reference("bandwidth", &add_eth1, &bad).unwrap_err();
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("if rate is set, burst must also be set"),
        "{e}"
    );
    let e = run_bw(&a, CniCommand::Add, Some(&ns), &bad).unwrap_err();
    assert!(e.details.starts_with("egressBurst: missing"), "{e}");
}

/// Bytes received in `ns` on `ip`:9999 (UDP) while `sender_ns` sends
/// 1000-byte datagrams to it for half a second as fast as it can. Bounded:
/// 0.5 s of sending, 1.2 s of receiving from the first datagram (which may
/// come late where starting python is slow, as in vm-tests' emulated CPU;
/// at most 10 s of waiting for it), at most 100000 datagrams.
fn udp_blast(receiver_ns: &TestNs, ip: &str, sender_ns: &TestNs) -> u64 {
    const RECEIVE: &str = "import socket,sys,time\n\
        s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
        s.setsockopt(socket.SOL_SOCKET,socket.SO_RCVBUF,1<<22)\n\
        s.bind((sys.argv[1],9999)); s.settimeout(0.1); n=0; end=time.time()+10\n\
        print('ready',flush=True)\n\
        while time.time()<end:\n\
        \x20try:\n\
        \x20\x20m=len(s.recv(65535))\n\
        \x20\x20if n==0: end=time.time()+1.2\n\
        \x20\x20n+=m\n\
        \x20except socket.timeout: pass\n\
        print(n)\n";
    const SEND: &str = "import socket,sys,time\n\
        s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.setblocking(False)\n\
        end=time.time()+0.5; i=0; d=b'x'*1000\n\
        while time.time()<end and i<100000:\n\
        \x20i+=1\n\
        \x20try: s.sendto(d,(sys.argv[1],9999))\n\
        \x20except OSError: pass\n";
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut rx = Command::new("ip")
        .args([
            "netns",
            "exec",
            &receiver_ns.name,
            "python3",
            "-c",
            RECEIVE,
            ip,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(rx.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    run(
        "ip",
        &["netns", "exec", &sender_ns.name, "python3", "-c", SEND, ip],
    );
    line.clear();
    out.read_line(&mut line).unwrap();
    rx.wait().unwrap();
    line.trim().parse().unwrap()
}

/// Shaping applies to real traffic, both ways: at 1 Mbit/s (125 kB/s, a
/// 10 kB bucket) a half-second flood delivers about 72 kB, unshaped many
/// megabytes.
#[test]
fn shaping_limits_real_traffic() {
    use plexus_testkit::Feature;
    if !plexus_testkit::require(&[Feature::Root, Feature::Python3]) {
        return;
    }
    let a = Attachment::new("veth0", "eth0");
    a.node.ip(&["addr", "add", "10.99.0.1/24", "dev", "veth0"]);
    a.pod.ip(&["addr", "add", "10.99.0.2/24", "dev", "eth0"]);
    let to_pod = udp_blast(&a.pod, "10.99.0.2", &a.node);
    let from_pod = udp_blast(&a.node, "10.99.0.1", &a.pod);
    eprintln!("unshaped: {to_pod} bytes to the pod, {from_pod} from it in half a second");
    assert!(
        to_pod > 1_000_000 && from_pod > 1_000_000,
        "unshaped: {to_pod} / {from_pod} bytes"
    );

    let conf = config(
        &a,
        json!({"ingressRate": 1_000_000, "ingressBurst": 80_000, "egressRate": 1_000_000, "egressBurst": 80_000}),
    );
    run_bw(&a, CniCommand::Add, Some(&a.netns_path()), &conf).unwrap();
    let to_pod = udp_blast(&a.pod, "10.99.0.2", &a.node);
    let from_pod = udp_blast(&a.node, "10.99.0.1", &a.pod);
    eprintln!("shaped: {to_pod} bytes to the pod, {from_pod} from it in half a second");
    // The upper bound is the shaping; the lower one only that traffic still
    // flows: a loaded machine's sender may get out little more than the
    // bucket (33 kB was seen while a kernel built alongside).
    for got in [to_pod, from_pod] {
        assert!(
            (10_000..150_000).contains(&got),
            "shaped: {to_pod} / {from_pod} bytes"
        );
    }
}
