//! The cases the macvlan, ipvlan and vlan tests share: the drivers stack a
//! link on the node's uplink `up0` ([`node_with_uplink`]) and make it the
//! pod's CNI_IFNAME, through the one `stacked` driver code, so they refuse,
//! check and delete it alike.

use plexus_cni::result::CniResult;
use plexus_dataplane::netlink::{Link, VethSpec};
use plexus_dataplane::Netlink;
use serde_json::{json, Value};

use super::*;
use crate::common::{assert_error, ifname, TestNs};

/// A configuration of the stacked kind `ty` (network `name`) on `up0`, the
/// test IPAM handing out `addresses`, `extra`'s keys set over it.
pub fn conf(ty: &str, name: &str, addresses: Value, extra: Value) -> Value {
    let mut c = driver_conf(ty, name, addresses);
    c["master"] = json!("up0");
    with_keys(c, &extra)
}

/// The netlink handle of `node` and a veth `m0` made there (its peer `m1`):
/// the master a typed-creation test stacks its link on.
pub fn veth_master(node: &TestNs) -> (Netlink, Link) {
    let nl = Netlink::open(&node.ns).unwrap();
    let master = nl
        .create_veth(&VethSpec::new(ifname("m0"), ifname("m1")))
        .unwrap();
    (nl, master)
}

/// Two pods attached as `eth0` on `node`, by `confs` (with the addresses
/// `ips`), reach each other; the first pod and its ADD's result.
pub fn two_pods_reach_each_other(
    ty: &str,
    node: &TestNs,
    confs: [Value; 2],
    ips: [&str; 2],
) -> (TestNs, CniResult) {
    let (pod1, pod2) = (TestNs::new(), TestNs::new());
    let r = TestResolver::default();
    let res = add(node, &r, ty, &Target::new("c1", &pod1, "eth0"), &confs[0]).unwrap();
    add(node, &r, ty, &Target::new("c2", &pod2, "eth0"), &confs[1]).unwrap();
    assert!(ping(&pod1, ips[1]), "pod1 -> pod2");
    assert!(ping(&pod2, ips[0]), "pod2 -> pod1");
    (pod1, res)
}

/// ADD of `t` with `conf` refused by the key's name for a master the node
/// does not have; the error for `mtu`, above the master's, returned for the
/// caller to read.
pub fn unknown_master_and_large_mtu(
    ty: &str,
    node: &TestNs,
    r: &TestResolver,
    t: &Target,
    conf: Value,
    mtu: u32,
) -> CniError {
    let e = add(
        node,
        r,
        ty,
        t,
        &with_keys(conf.clone(), &json!({"master": "nope0"})),
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidConfig);
    assert_eq!(
        e.details,
        "master: interface \"nope0\" not found in the host namespace"
    );
    let e = add(node, r, ty, t, &with_keys(conf, &json!({"mtu": mtu}))).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidConfig);
    e
}

/// ADD with `conf` of a new pod's `eth0` on `node`, failing half way,
/// leaves the pod and the node as they were: once when IPAM's ADD fails, once when the
/// kernel refuses a route IPAM gave (then IPAM's ADD is undone too, cni-SPEC
/// §2).
pub fn failures_half_way_leave_nothing(ty: &str, node: &TestNs, conf: &Value) {
    let (pod, r) = (TestNs::new(), TestResolver::default());
    let t = Target::new("c1", &pod, "eth0");
    let node_links = sorted_links(node);
    let mut failing = conf.clone();
    failing["ipam"]["fail"] = json!("ADD");
    add(node, &r, ty, &t, &failing).unwrap_err();
    assert_eq!(link_names(&pod), ["lo"]);
    assert_eq!(sorted_links(node), node_links, "no link left on the node");
    assert_eq!(r.commands(), [CniCommand::Add]);

    let mut unreachable = conf.clone();
    unreachable["ipam"]["routes"] = json!([{"dst": "10.98.0.0/16", "gw": "172.31.9.9"}]);
    let e = add(node, &r, ty, &t, &unreachable).unwrap_err();
    assert!(e.details.contains("ENETUNREACH"), "{e}");
    assert_eq!(link_names(&pod), ["lo"]);
    assert_eq!(sorted_links(node), node_links, "no link left on the node");
    assert_eq!(
        r.commands(),
        [CniCommand::Add, CniCommand::Add, CniCommand::Del]
    );
}

/// ADD of `t` with `conf` when the pod has its CNI_IFNAME already: refused
/// by name, and the pod's own link stays.
pub fn ifname_taken(
    ty: &str,
    node: &TestNs,
    r: &TestResolver,
    pod: &TestNs,
    t: &Target,
    conf: &Value,
) {
    pod.add_veth(&t.ifname, "mine0");
    let e = add(node, r, ty, t, conf).unwrap_err();
    assert!(
        e.details
            .starts_with(&format!("CNI_IFNAME: \"{}\" already exists", t.ifname)),
        "{e}"
    );
    assert_eq!(
        link(pod, &t.ifname).unwrap()["linkinfo"]["info_kind"],
        "veth"
    );
}

/// Each of `modes` reaches the kernel: ADD with `conf(mode)` makes a link
/// in that mode, which CHECK accepts and DEL removes.
pub fn every_mode(ty: &str, node: &TestNs, modes: &[&str], conf: impl Fn(&str) -> Value) {
    let r = TestResolver::default();
    for &mode in modes {
        let pod = TestNs::new();
        let t = Target::new("c1", &pod, "eth0");
        let c = conf(mode);
        let res = add(node, &r, ty, &t, &c).unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert_eq!(
            link(&pod, "eth0").unwrap()["linkinfo"]["info_data"]["mode"],
            mode
        );
        check(node, &r, ty, &t, &with_prev(&c, &res)).unwrap();
        del(node, &r, ty, &t, &c).unwrap();
        assert_eq!(link_names(&pod), ["lo"]);
    }
}

/// CHECK of `t`, attached in `mode` (`with`: its config with the
/// prevResult), against the same config in mode `other`: the drift named.
pub fn mode_drift(
    ty: &str,
    node: &TestNs,
    r: &TestResolver,
    t: &Target,
    with: &Value,
    (mode, other): (&str, &str),
) {
    let e = check(
        node,
        r,
        ty,
        t,
        &with_keys(with.clone(), &json!({"mode": other})),
    )
    .unwrap_err();
    assert_eq!(
        e.details,
        format!("mode: the container's {ty} is in mode {mode}, the configuration says {other}")
    );
}

/// A node with its uplink on `net` ([`node_with_uplink`]), a pod, a
/// resolver and the pod's `eth0` of container `c1`; `None` (the test
/// skipped) when the test is not `runnable` here.
pub fn pod_on_uplink(runnable: bool, net: &str) -> Option<(TestNs, TestNs, TestResolver, Target)> {
    if !runnable {
        return None;
    }
    let (node, pod) = (node_with_uplink(net), TestNs::new());
    let t = Target::new("c1", &pod, "eth0");
    Some((node, pod, TestResolver::default(), t))
}

/// VALIDATE refuses `mode`, which `ty` does not have, naming the `expected`
/// ones; `conf` is the kind's configuration with `extra` keys.
pub fn unknown_mode(ty: &str, conf: impl Fn(Value, Value) -> Value, mode: &str, expected: &str) {
    let c = conf(json!([]), json!({ "mode": mode }));
    let e = validate(ty, &Target::nowhere("c1"), &c).unwrap_err();
    assert_eq!(
        e.details,
        format!("mode: unknown {ty} mode {mode:?} (expected {expected})")
    );
}

/// ADD of `conf` (the kind `ty` on `up0` of a node on `net`) on a kernel
/// without `ty`: the kernel's EOPNOTSUPP, named, and nothing made.
pub fn fails_cleanly_without_the_kind(ty: &str, net: &str, conf: &Value) {
    let (node, pod) = (node_with_uplink(net), TestNs::new());
    let before = link_names(&node);
    let r = TestResolver::default();
    let e = add(&node, &r, ty, &Target::new("c1", &pod, "eth0"), conf).unwrap_err();
    assert_error(&e, ErrorCode::Io, &format!("create {ty} eth0 on up0: "));
    assert!(e.details.contains("EOPNOTSUPP"), "{e}");
    assert_nothing_made(&pod, &r);
    assert_eq!(link_names(&node), before);
}

/// ADD of `t` with `conf`, then its DEL with the prevResult, again as
/// runtimes repeat it ([`dels_again`]) and with a master that no longer
/// exists (`gone0`): each a success, and nothing left in the pod.
pub fn dels_after_add(
    ty: &str,
    node: &TestNs,
    r: &TestResolver,
    (pod, t): (&TestNs, &Target),
    conf: &Value,
) {
    let res = add(node, r, ty, t, conf).unwrap();
    del(node, r, ty, t, &with_prev(conf, &res)).unwrap();
    assert_eq!(link_names(pod), ["lo"]);
    dels_again(node, r, ty, t, conf);
    let gone = with_keys(conf.clone(), &json!({"master": "gone0"}));
    del(node, r, ty, t, &gone).unwrap();
    assert_eq!(link_names(pod), ["lo"]);
}

/// For `linkInContainer`: a node without uplink and a pod whose own `m0`
/// (a veth to `m1`, up) is the master; `None` (the test skipped) when the
/// test is not `runnable` here.
pub fn pod_with_master(runnable: bool) -> Option<(TestNs, TestNs, TestResolver, Target)> {
    if !runnable {
        return None;
    }
    let (node, pod) = (TestNs::new(), TestNs::new());
    pod.add_veth("m0", "m1");
    pod.ip(&["link", "set", "m0", "up"]);
    let t = Target::new("c1", &pod, "eth0");
    Some((node, pod, TestResolver::default(), t))
}

/// ADD of `conf` (the kind `ty` on the node's `up0`) for a pod interface
/// named `up0` too, then its DEL: the link is made under a temporary name
/// beside its master and renamed in the pod, as the references do (before
/// Linux 6.14 the kernel refused a link made for another namespace under a
/// name the node has, `eth0` on most nodes: the VM's kernel shows it).
pub fn named_like_a_node_link(
    ty: &str,
    node: &TestNs,
    r: &TestResolver,
    pod: &TestNs,
    conf: &Value,
) {
    let before = sorted_links(node);
    let t = Target::new("c9", pod, "up0");
    let res = add(node, r, ty, &t, conf).unwrap();
    assert_eq!(link(pod, "up0").unwrap()["linkinfo"]["info_kind"], ty);
    assert_eq!(sorted_links(node), before, "nothing left in the node");
    del(node, r, ty, &t, &with_prev(conf, &res)).unwrap();
    assert!(link(pod, "up0").is_none());
}
