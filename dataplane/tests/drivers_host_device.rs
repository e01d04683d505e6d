//! The built-in `host-device` driver against the real kernel, in
//! namespaces made for each test (the machine's own is never touched), and
//! side by side with the reference plugin (containernetworking/plugins
//! `plugins/main/host-device`, v1.1.1 in /usr/lib/cni). The node's devices
//! are veth ends (the build hosts' kernel has no dummy driver): a veth end
//! moved into a pod keeps its peer in the node, and is destroyed with the
//! pod's namespace, as a dummy would be. PCI devices (a VF's netdev, a VF
//! bound to vfio-pci) exist only in the VM harness (`Feature::PciSriov`);
//! those tests skip elsewhere. Device locks and records go to a temp
//! `dataDir`.
#[path = "common/chained.rs"]
mod chained;
mod common;
mod drivers_support;

use std::path::Path;

use common::TestNs;
use drivers_support::*;
use plexus_cni::env::CniCommand;
use plexus_cni::error::ErrorCode;
use plexus_testkit::files;
use plexus_testkit::sriov::VfioBinding;
use plexus_testkit::{require, Feature};
use serde_json::{json, Value};

const HD: &str = "host-device";

/// Root, or a visible, counted skip.
fn runnable() -> bool {
    require(&[Feature::Root])
}

/// A veth pair `name`/`{name}p` in `node`: `name` (the device a pod gets)
/// with `mac`, MTU 1400 and up, so that a DEL is seen to leave it down.
fn add_device(node: &TestNs, name: &str, mac: &str) {
    let peer = format!("{name}p");
    node.add_veth(name, &peer);
    node.ip(&["link", "set", name, "address", mac, "mtu", "1400", "up"]);
}

/// A node namespace with the device `hd0` (MAC 02:00:00:00:70:01).
fn node_with_hd0() -> TestNs {
    let node = TestNs::new();
    add_device(&node, "hd0", "02:00:00:00:70:01");
    node
}

/// One test's node with `hd0`, the driver's data directory, the test IPAM,
/// and the configuration handing `hd0` over by name.
struct Fixture {
    node: TestNs,
    data: tempfile::TempDir,
    r: TestResolver,
    c: Value,
}

impl Fixture {
    /// `None` (the test skipped) without root.
    fn new() -> Option<Fixture> {
        if !runnable() {
            return None;
        }
        let data = tempfile::tempdir().unwrap();
        let c = conf(data.path(), json!({"device": "hd0"}));
        Some(Fixture {
            node: node_with_hd0(),
            data,
            r: TestResolver::default(),
            c,
        })
    }

    fn conf(&self, extra: Value) -> Value {
        conf(self.data.path(), extra)
    }
}

/// A `host-device` configuration (1.1.0) with records in `data`, the test
/// IPAM handing out 10.70.0.2/24, `dns`, and `extra`'s keys over it.
fn conf(data: &Path, extra: Value) -> Value {
    let base = json!({
        "cniVersion": "1.1.0",
        "name": "hd-net",
        "type": HD,
        "dataDir": data,
        "ipam": ipam("10.70.0.2/24"),
        "dns": {"nameservers": ["10.70.0.53"]},
    });
    with_keys(base, &extra)
}

/// The ADD result for `pod`'s net1 with `mac`, as the reference reports it
/// (cmdAdd: interfaces[0] name, mac and sandbox; the IPs on interface 0;
/// the configuration's dns).
fn want_result(pod: &TestNs, mac: &str) -> Value {
    let mut want = net1_result(pod, mac, "10.70.0.2/24");
    want["dns"] = json!({"nameservers": ["10.70.0.53"]});
    want
}

/// The device `name` as `ns` has it: MAC, MTU, up, alias; `None` when
/// it is not there.
fn device(ns: &TestNs, name: &str) -> Option<Value> {
    link(ns, name).map(|l| {
        json!({"mac": l["address"], "mtu": l["mtu"], "up": has_flag(&l, "UP"),
               "alias": l["ifalias"]})
    })
}

/// The device as DEL leaves it in the node: its MAC and MTU, down (the
/// reference's moveLinkOut "leave the link down"), its alias gone.
fn home(mac: &str) -> Value {
    json!({"mac": mac, "mtu": 1400, "up": false, "alias": null})
}

/// Waits (up to 10 s) until `node` no longer has `name`: the kernel
/// destroys a namespace's devices (a veth with its peer) after its last
/// reference is gone, in the background.
#[track_caller]
fn wait_gone(node: &TestNs, name: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while link(node, name).is_some() {
        assert!(std::time::Instant::now() < deadline, "{name} still there");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The record files in `data`.
fn records(data: &Path) -> Vec<String> {
    files::names(data, |n| n.ends_with(".json"))
}

/// Runs `f` on a thread in `node` that sees a sysfs of `node`'s own (in a
/// mount namespace of its own, as `ip netns exec` gives the reference
/// plugin), so that `/sys/devices/virtual/net` lists the node's virtual
/// devices. The driver is then called with [`Here`] as the host.
fn in_node_sysfs<R: Send>(node: &TestNs, f: impl FnOnce() -> R + Send) -> R {
    use nix::mount::{mount, MsFlags};
    use nix::sched::{unshare, CloneFlags};
    std::thread::scope(|s| {
        s.spawn(|| {
            unshare(CloneFlags::CLONE_NEWNS).expect("a mount namespace of its own");
            let private = MsFlags::MS_REC | MsFlags::MS_PRIVATE;
            mount(None::<&str>, "/", None::<&str>, private, None::<&str>).unwrap();
            node.ns
                .run(|| {
                    let none = MsFlags::empty();
                    mount(Some("sysfs"), "/sys", Some("sysfs"), none, None::<&str>).unwrap();
                    f()
                })
                .unwrap()
        })
        .join()
        .unwrap()
    })
}

/// VALIDATE of `extra` over a configuration without a device: refused,
/// naming `key`.
#[track_caller]
fn refused(extra: Value, key: &str) -> String {
    let data = tempfile::tempdir().unwrap();
    let c = conf(data.path(), extra.clone());
    let e = validate(HD, &Target::nowhere("c1"), &c).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidConfig, "{extra}: {e}");
    assert!(e.details.starts_with(&format!("{key}: ")), "{extra}: {e}");
    e.details
}

#[test]
fn refused_configurations_name_their_key() {
    // The reference's loadConf.
    let none = refused(json!({}), "device");
    assert!(
        none.contains(r#"specify either "device", "hwaddr", "kernelpath" or "pciBusID""#),
        "{none}"
    );
    refused(json!({"device": "", "pciBusID": ""}), "device");
    refused(json!({"device": "eth/0"}), "device");
    refused(json!({"device": 7}), "device");
    refused(json!({"hwaddr": "02:00:00:00:70"}), "hwaddr");
    // The reference's getLink: absolute and below /sys/devices/.
    for bad in [
        "sys/devices/x",
        "/sys/class/net/hd0",
        "/sys/devices/../../etc",
        "/sys/devices/./virtual",
    ] {
        let why = refused(json!({ "kernelpath": bad }), "kernelpath");
        assert!(
            why.contains("must be absolute and begin with /sys/devices/"),
            "{why}"
        );
    }
    refused(json!({"pciBusID": "0000:01"}), "pciBusID");
    refused(
        json!({"runtimeConfig": {"deviceID": "../0000:01:00.0"}}),
        "runtimeConfig.deviceID",
    );
}

#[test]
fn add_by_device_moves_it_into_the_pod_and_del_gives_it_back() {
    let Some(Fixture { node, data, r, c }) = Fixture::new() else {
        return;
    };
    let (pod, t) = new_pod("ctr-a");

    let res = add(&node, &r, HD, &t, &c).unwrap();
    assert_eq!(
        result_json(&res, "1.1.0"),
        want_result(&pod, "02:00:00:00:70:01")
    );
    // In the pod as net1, up, addressed, its node name in its alias (the
    // reference's moveLinkIn); gone from the node, its peer left there.
    assert_eq!(
        device(&pod, "net1").unwrap(),
        json!({"mac": "02:00:00:00:70:01", "mtu": 1400, "up": true, "alias": "hd0"})
    );
    assert!(has_address(&pod, "net1", "10.70.0.2/24"));
    assert_eq!(sorted_links(&node), ["hd0p", "lo"]);
    assert_eq!(records(data.path()), ["hd0.json"]);

    // CHECK (the reference's cmdCheck) passes, and sees a lost address.
    let prev = with_prev(&c, &res);
    check(&node, &r, HD, &t, &prev).unwrap();
    pod.ip(&["addr", "del", "10.70.0.2/24", "dev", "net1"]);
    let e = check(&node, &r, HD, &t, &prev).unwrap_err();
    assert!(
        e.details.contains("address 10.70.0.2/24 is not on net1"),
        "{e}"
    );
    // CHECK without prevResult is refused.
    let e = check(&node, &r, HD, &t, &c).unwrap_err();
    assert_code(&e, ErrorCode::InvalidConfig, "prevResult");

    del(&node, &r, HD, &t, &c).unwrap();
    assert_eq!(link(&pod, "net1"), None);
    assert_eq!(device(&node, "hd0").unwrap(), home("02:00:00:00:70:01"));
    assert_eq!(records(data.path()), Vec::<String>::new());
    assert_eq!(
        r.commands(),
        [
            CniCommand::Add,
            CniCommand::Check,
            CniCommand::Check,
            CniCommand::Check,
            CniCommand::Del
        ]
    );
    // Again, without CNI_NETNS, and with the namespace gone: nothing more.
    dels_again(&node, &r, HD, &t, &c);
    assert_eq!(sorted_links(&node), ["hd0", "hd0p", "lo"]);
    assert_eq!(device(&node, "hd0").unwrap(), home("02:00:00:00:70:01"));
}

#[test]
fn add_by_hwaddr_and_by_kernelpath() {
    let Some(Fixture { node, data, r, .. }) = Fixture::new() else {
        return;
    };
    add_device(&node, "hd1", "02:00:00:00:70:02");

    // hwaddr (the reference's getLink: the node's link with that MAC).
    let (pod, t) = new_pod("ctr-mac");
    let c = conf(data.path(), json!({"hwaddr": "02:00:00:00:70:02"}));
    let res = add(&node, &r, HD, &t, &c).unwrap();
    assert_eq!(
        result_json(&res, "1.1.0"),
        want_result(&pod, "02:00:00:00:70:02")
    );
    assert_eq!(device(&pod, "net1").unwrap()["alias"], "hd1");
    assert!(link(&node, "hd1").is_none());
    del(&node, &r, HD, &t, &c).unwrap();
    assert_eq!(device(&node, "hd1").unwrap(), home("02:00:00:00:70:02"));

    // kernelpath: the first netdev in its net/ directory, as the node's
    // sysfs shows it (hd0 before hd0p, hd1 and lo).
    let (pod, t) = new_pod("ctr-path");
    let c = conf(data.path(), json!({"kernelpath": "/sys/devices/virtual"}));
    let res = in_node_sysfs(&node, || add(Here, &r, HD, &t, &c)).unwrap();
    assert_eq!(
        result_json(&res, "1.1.0"),
        want_result(&pod, "02:00:00:00:70:01")
    );
    assert_eq!(device(&pod, "net1").unwrap()["alias"], "hd0");
    // Its device directory has no net/ of its own: nothing found, code 7.
    let (_other, t2) = new_pod("ctr-path2");
    let c2 = conf(
        data.path(),
        json!({"kernelpath": "/sys/devices/virtual/net/hd1"}),
    );
    let e = in_node_sysfs(&node, || add(Here, &r, HD, &t2, &c2)).unwrap_err();
    assert_code(&e, ErrorCode::InvalidConfig, "kernelpath: the interface of");
    in_node_sysfs(&node, || del(Here, &r, HD, &t, &c)).unwrap();
    assert_eq!(device(&node, "hd0").unwrap(), home("02:00:00:00:70:01"));
    assert_eq!(sorted_links(&node), ["hd0", "hd0p", "hd1", "hd1p", "lo"]);
}

#[test]
fn del_without_netns_or_after_the_namespace_is_gone() {
    let Some(Fixture { node, data, r, c }) = Fixture::new() else {
        return;
    };

    // Without CNI_NETNS while the pod's namespace exists: the record finds
    // it, and the device comes home.
    let (pod, t) = new_pod("ctr-a");
    add(&node, &r, HD, &t, &c).unwrap();
    let no_ns = Target {
        netns: None,
        ..t.clone()
    };
    del(&node, &r, HD, &no_ns, &c).unwrap();
    assert_eq!(link(&pod, "net1"), None);
    assert_eq!(device(&node, "hd0").unwrap(), home("02:00:00:00:70:01"));
    assert_eq!(records(data.path()), Vec::<String>::new());

    // The namespace gone: a virtual device went with it (its peer too),
    // and DEL succeeds, its record and lease released.
    let (pod, t) = new_pod("ctr-b");
    add(&node, &r, HD, &t, &c).unwrap();
    drop(pod);
    del(&node, &r, HD, &t, &c).unwrap();
    assert_eq!(records(data.path()), Vec::<String>::new());
    wait_gone(&node, "hd0p");
    assert_eq!(sorted_links(&node), ["lo"]);
    assert_eq!(r.commands(), add_then_dels(1).repeat(2));
}

#[test]
fn a_second_pod_is_refused_and_the_first_keeps_the_device() {
    let Some(Fixture { node, data, r, c }) = Fixture::new() else {
        return;
    };
    let (pod_a, ta) = new_pod("ctr-a");
    add(&node, &r, HD, &ta, &c).unwrap();

    // By name and by MAC: in use by ctr-a, code 11; IPAM never asked.
    let (pod_b, tb) = new_pod("ctr-b");
    let by_mac = conf(data.path(), json!({"hwaddr": "02:00:00:00:70:01"}));
    for second in [&c, &by_mac] {
        let e = add(&node, &r, HD, &tb, second).unwrap_err();
        assert_code(&e, ErrorCode::TryAgainLater, "is in use by container ctr-a");
        // The runtime's DEL after the failed ADD takes nothing from ctr-a.
        del(&node, &r, HD, &tb, second).unwrap();
    }
    assert_eq!(link_names(&pod_b), ["lo"]);
    assert_eq!(device(&pod_a, "net1").unwrap()["alias"], "hd0");
    assert!(has_address(&pod_a, "net1", "10.70.0.2/24"));
    assert_eq!(
        r.commands(),
        [CniCommand::Add, CniCommand::Del, CniCommand::Del]
    );
    // A device the node never had: code 7 naming the key.
    let nope = conf(data.path(), json!({"device": "nope0"}));
    let e = add(&node, &r, HD, &tb, &nope).unwrap_err();
    assert_code(
        &e,
        ErrorCode::InvalidConfig,
        "device: interface nope0 is not",
    );

    // ctr-a's namespace gone without its DEL: a device of that name made
    // anew goes to the next pod, the stale record given back first.
    drop(pod_a);
    wait_gone(&node, "hd0p");
    add_device(&node, "hd0", "02:00:00:00:70:09");
    let res = add(&node, &r, HD, &tb, &c).unwrap();
    assert_eq!(
        result_json(&res, "1.1.0"),
        want_result(&pod_b, "02:00:00:00:70:09")
    );
    // ctr-a's late DEL leaves ctr-b's device alone.
    del(&node, &r, HD, &ta, &c).unwrap();
    assert_eq!(device(&pod_b, "net1").unwrap()["alias"], "hd0");
    del(&node, &r, HD, &tb, &c).unwrap();
    assert_eq!(device(&node, "hd0").unwrap(), home("02:00:00:00:70:09"));
}

#[test]
fn a_failed_add_leaves_the_device_home_and_its_lease_released() {
    let Some(Fixture { node, data, c, .. }) = Fixture::new() else {
        return;
    };
    node.ip(&["link", "set", "hd0", "alias", "uplink-b"]);
    let before = device(&node, "hd0").unwrap();
    let assert_home = |what: &str| {
        assert_eq!(device(&node, "hd0").unwrap(), before, "{what}");
        assert_eq!(records(data.path()), Vec::<String>::new(), "{what}");
    };

    // IPAM fails: nothing to release.
    let (pod, t) = new_pod("ctr-f");
    let r = TestResolver::default();
    let mut failing = c.clone();
    failing["ipam"]["fail"] = json!("ADD");
    let e = add(&node, &r, HD, &t, &failing).unwrap_err();
    assert_code(&e, ErrorCode::TryAgainLater, "ipam.fail");
    assert!(e.undone, "{e:?}");
    assert_home("IPAM failed");
    assert_eq!(link_names(&pod), ["lo"]);
    assert_eq!(r.commands(), [CniCommand::Add]);

    // A route the kernel refuses (its gateway is not on the link): the
    // lease is released, the device comes home.
    let r = TestResolver::default();
    let mut bad_route = c.clone();
    bad_route["ipam"]["routes"] = json!([{"dst": "10.99.0.0/16", "gw": "10.200.0.1"}]);
    let e = add(&node, &r, HD, &t, &bad_route).unwrap_err();
    assert_code(&e, ErrorCode::Io, "add route 10.99.0.0/16 on net1");
    assert_home("route refused");
    assert_eq!(link_names(&pod), ["lo"]);
    assert_eq!(r.commands(), add_then_dels(1));

    // CNI_IFNAME taken in the pod (cni-SPEC §2): refused, the pod's own
    // interface left alone.
    pod.add_veth("net1", "net1p");
    let r = TestResolver::default();
    let e = add(&node, &r, HD, &t, &c).unwrap_err();
    assert_code(&e, ErrorCode::InvalidConfig, "CNI_IFNAME");
    assert_home("CNI_IFNAME taken");
    assert_eq!(sorted_links(&pod), ["lo", "net1", "net1p"]);
    assert_eq!(r.commands(), []);
}

#[test]
fn layer2_only_without_ipam() {
    let Some(Fixture { node, r, mut c, .. }) = Fixture::new() else {
        return;
    };
    let (pod, t) = new_pod("ctr-l2");
    c.as_object_mut().unwrap().remove("ipam");
    let res = add(&node, &r, HD, &t, &c).unwrap();
    // The reference's printLink: the interface only.
    assert_eq!(
        result_json(&res, "1.1.0"),
        json!({"cniVersion": "1.1.0",
               "interfaces": [{"name": "net1", "mac": "02:00:00:00:70:01",
                               "sandbox": netns_path(&pod).to_str().unwrap()}]})
    );
    assert!(device(&pod, "net1").unwrap()["up"] == true);
    check(&node, &r, HD, &t, &with_prev(&c, &res)).unwrap();
    del(&node, &r, HD, &t, &c).unwrap();
    assert_eq!(device(&node, "hd0").unwrap(), home("02:00:00:00:70:01"));
}

/// A `host-device` config for `device` with host-local handing out from
/// 10.71.0.0/24, its leases in `dir` (a route with its gateway, as in
/// drivers_vlan: the reference's CHECK needs it).
fn host_local_conf(device: &str, data: &Path, dir: &Path) -> Value {
    json!({"cniVersion": "1.0.0", "name": "hd-peer", "type": HD, "device": device,
           "dataDir": data, "dns": {"nameservers": ["10.71.0.53"]},
           "ipam": {"type": "host-local", "subnet": "10.71.0.0/24", "gateway": "10.71.0.1",
                    "routes": [{"dst": "10.99.0.0/16", "gw": "10.71.0.1"}], "dataDir": dir}})
}

/// The pod's device as compared: MAC, MTU, up, alias, addresses, routes.
fn pod_view(pod: &TestNs) -> Value {
    json!({
        "device": device(pod, "eth0"),
        "addresses": addresses(pod, "eth0").into_iter().map(|(a, _)| a).collect::<Vec<_>>(),
        "routes": routes(pod, false),
    })
}

#[test]
fn the_reference_host_device_gives_the_same_result_on_the_same_config() {
    if !runnable() || !chained::have_reference() {
        return;
    }
    // Two devices alike but for their names: hd0 for plexus, hd1 for the
    // reference.
    let node = TestNs::new();
    add_device(&node, "hd0", "02:00:00:00:71:01");
    add_device(&node, "hd1", "02:00:00:00:71:01");
    let data = tempfile::tempdir().unwrap();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let (ours, theirs) = (TestNs::new(), TestNs::new());
    let our_conf = host_local_conf("hd0", data.path(), dirs[0].path());
    let their_conf = host_local_conf("hd1", data.path(), dirs[1].path());
    let r = chained::ReferenceIpam { node: &node };
    let t = Target::new("px", &ours, "eth0");
    let ns = |pod: &TestNs| netns_path(pod).to_str().unwrap().to_string();
    let env = |command| chained::env(command, "ref", Some(&ns(&theirs)), "eth0", "");
    let theirs_with = |command, c: &Value| {
        chained::reference(HD, &node, &env(command), c)
            .unwrap_or_else(|e| panic!("reference host-device {command}: {e}"))
    };

    let our_result = result_json(&add(&node, &r, HD, &t, &our_conf).unwrap(), "1.0.0");
    let their_result = theirs_with(CniCommand::Add, &their_conf);
    let comparable = |mut result: Value| {
        result["interfaces"][0]["sandbox"] = json!("SANDBOX");
        chained::normalised(result)
    };
    assert_eq!(
        comparable(our_result.clone()),
        comparable(their_result.clone())
    );
    assert_eq!(our_result["interfaces"][0]["sandbox"], ns(&ours));
    assert_eq!(their_result["interfaces"][0]["sandbox"], ns(&theirs));
    let (mut our_view, mut their_view) = (pod_view(&ours), pod_view(&theirs));
    assert_eq!(our_view["device"]["alias"], "hd0");
    assert_eq!(their_view["device"]["alias"], "hd1");
    our_view["device"]["alias"] = json!(null);
    their_view["device"]["alias"] = json!(null);
    assert_eq!(our_view, their_view);

    // Each CHECK passes, then each DEL; both devices come home, down.
    let our_prev = with_keys(our_conf.clone(), &json!({ "prevResult": our_result }));
    let their_prev = with_keys(their_conf.clone(), &json!({ "prevResult": their_result }));
    check(&node, &r, HD, &t, &our_prev).unwrap();
    theirs_with(CniCommand::Check, &their_prev);
    del(&node, &r, HD, &t, &our_prev).unwrap();
    theirs_with(CniCommand::Del, &their_prev);
    assert_eq!(link_names(&ours), ["lo"]);
    assert_eq!(link_names(&theirs), ["lo"]);
    assert_eq!(sorted_links(&node), ["hd0", "hd0p", "hd1", "hd1p", "lo"]);
    assert_eq!(device(&node, "hd0").unwrap(), home("02:00:00:00:71:01"));
    // v1.1.1's moveLinkOut leaves its alias on the device (newer
    // references clear it, as plexus does).
    let mut theirs_home = device(&node, "hd1").unwrap();
    assert_eq!(theirs_home["alias"], "hd1");
    theirs_home["alias"] = json!(null);
    assert_eq!(theirs_home, home("02:00:00:00:71:01"));
    for dir in &dirs {
        assert_eq!(files::leases(&dir.path().join("hd-peer")), [""; 0]);
    }
}

#[test]
fn the_reference_host_device_refuses_what_plexus_refuses() {
    if !chained::have_reference() {
        return;
    }
    let Some(f) = Fixture::new() else {
        return;
    };
    let (node, r) = (&f.node, &f.r);
    let mut no_ipam = f.c.clone();
    no_ipam.as_object_mut().unwrap().remove("ipam");
    // The first pod's hd0, which the last one asks for again.
    let first = TestNs::new();
    let first_t = Target::new("first", &first, "eth0");
    add(node, r, HD, &first_t, &no_ipam).unwrap();
    let bad = [
        ("no key", f.conf(json!({}))),
        (
            "relative kernelpath",
            with_keys(
                no_ipam.clone(),
                &json!({"device": "", "kernelpath": "sys/x"}),
            ),
        ),
        (
            "unknown device",
            with_keys(no_ipam.clone(), &json!({"device": "nope0"})),
        ),
        ("the first pod's device", no_ipam.clone()),
    ];
    for (what, c) in bad {
        let (ours, theirs) = (TestNs::new(), TestNs::new());
        let e = add(node, r, HD, &Target::new("px", &ours, "eth0"), &c).unwrap_err();
        assert!(
            matches!(e.code, ErrorCode::InvalidConfig | ErrorCode::TryAgainLater),
            "{what}: {e}"
        );
        let env = chained::env(CniCommand::Add, "ref", Some(&ns_of(&theirs)), "eth0", "");
        let refused = chained::reference(HD, node, &env, &c);
        assert!(
            refused.is_err(),
            "{what}: the reference took it: {refused:?}"
        );
        assert_eq!(link_names(&ours), ["lo"], "{what}");
        assert_eq!(link_names(&theirs), ["lo"], "{what}");
    }
    assert_eq!(device(&first, "eth0").unwrap()["alias"], "hd0");
}

fn ns_of(pod: &TestNs) -> String {
    netns_path(pod).to_str().unwrap().to_string()
}

/// PCI devices: the VM harness's igb VFs (skipped elsewhere, as
/// drivers_sriov's tests are). The PF lives in the VM's root namespace,
/// the test's own: the driver runs with it as the host ([`Here`]).
#[test]
fn a_vf_netdev_by_pci_bus_id_and_a_vfio_bound_vf_with_device_info() {
    let Some((vfs, nl, _)) = common::vfs_on_pf(2) else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let r = TestResolver::default();
    let vf = &vfs.vfs[0];
    let orig = vf.netdev().expect("a netdev");
    let (pod, t) = new_pod("ctr-pci");
    let devinfo = data
        .path()
        .join("devinfo/cni/ns-hd-ctr-pci-net1-device.json");
    let c = conf(
        data.path(),
        json!({"pciBusID": vf.address, "runtimeConfig": {"CNIDeviceInfoFile": devinfo}}),
    );
    add(Here, &r, HD, &t, &c).unwrap();
    let l = link(&pod, "net1").expect("net1 in the pod");
    assert_eq!(l["parentdev"], vf.address.as_str(), "{l}");
    assert_eq!(l["ifalias"], orig.as_str(), "{l}");
    let written: Value = serde_json::from_slice(&std::fs::read(&devinfo).unwrap()).unwrap();
    assert_eq!(
        written,
        json!({"type": "pci", "version": "1.1.0",
               "pci": {"pci-address": vf.address, "pf-pci-address": vfs.pf.address}})
    );
    // The namespace gone: the kernel returns the VF's netdev to the node
    // (as net1 or devN), and DEL finds it and renames it back.
    drop(pod);
    del(Here, &r, HD, &t, &c).unwrap();
    assert_eq!(vf.netdev().as_deref(), Some(orig.as_str()));
    let back = nl.link_by_name(&common::ifname(&orig)).unwrap().unwrap();
    assert_eq!(back.alias, None);

    // A VF bound to vfio-pci (the reference's DPDKMode): no netdev moved,
    // IPAM's address reported for the pod's driver, device-info written.
    let vf = &vfs.vfs[1];
    let _vfio = VfioBinding::bind(vf);
    let pod = TestNs::new();
    let t = Target::new("ctr-dpdk", &pod, "net1");
    let devinfo = data
        .path()
        .join("devinfo/cni/ns-hd-ctr-dpdk-net1-device.json");
    let c = conf(
        data.path(),
        json!({"runtimeConfig": {"deviceID": vf.address, "CNIDeviceInfoFile": devinfo}}),
    );
    let res = add(Here, &r, HD, &t, &c).unwrap();
    let mut want = want_result(&pod, "");
    want["interfaces"][0].as_object_mut().unwrap().remove("mac");
    assert_eq!(result_json(&res, "1.1.0"), want);
    assert_eq!(link_names(&pod), ["lo"], "nothing configured in the pod");
    let written: Value = serde_json::from_slice(&std::fs::read(&devinfo).unwrap()).unwrap();
    assert_eq!(written["pci"]["pci-address"], vf.address.as_str());
    // A second pod asking for it: in use, code 11.
    let (_other, t2) = new_pod("ctr-dpdk2");
    let e = add(Here, &r, HD, &t2, &c).unwrap_err();
    assert_code(&e, ErrorCode::TryAgainLater, "in use by container ctr-dpdk");
    check(Here, &r, HD, &t, &with_prev(&c, &res)).unwrap();
    del(Here, &r, HD, &t, &c).unwrap();
    assert_eq!(records(data.path()), Vec::<String>::new());
}

/// A device of the node took the original name while the device was in the
/// pod: DEL brings it home under the name it had in the pod (as sriov's
/// does), its alias and MAC given back, and finishes.
#[test]
fn del_brings_it_home_under_its_pod_name_when_its_name_was_taken() {
    let Some(Fixture { node, data, r, c }) = Fixture::new() else {
        return;
    };
    let (pod, t) = new_pod("ctr-n");
    add(&node, &r, HD, &t, &c).unwrap();
    node.add_veth("hd0", "squat0");
    del(&node, &r, HD, &t, &c).unwrap();
    assert_eq!(link(&pod, "net1"), None);
    assert_eq!(device(&node, "net1").unwrap(), home("02:00:00:00:70:01"));
    assert_ne!(device(&node, "hd0").unwrap()["mac"], "02:00:00:00:70:01");
    assert_eq!(records(data.path()), Vec::<String>::new());
}
