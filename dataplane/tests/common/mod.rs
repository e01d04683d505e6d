//! Shared fixtures for the root-only integration tests: uniquely named
//! throw-away namespaces that are deleted on Drop (also when a test panics),
//! and `ip -j` assertions parsed with serde_json.
#![allow(dead_code)]

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use plexus_cni::env::CniEnv;
use plexus_cni::skel::Request;
use plexus_cni::{CniError, ErrorCode};
use plexus_dataplane::netlink::VethSpec;
use plexus_dataplane::{NetNs, Netlink};
use plexus_testkit::sriov::SriovVfs;
use plexus_testkit::{require, Feature};
use serde_json::Value;

/// A request as a runtime would send it: `env` and `config` (an object) on
/// stdin. The one request builder of these tests.
pub fn request(env: CniEnv, config: &Value) -> Request {
    let Value::Object(map) = config.clone() else {
        panic!("config must be an object")
    };
    Request::from_config(env, map).unwrap_or_else(|e| panic!("request: {e}"))
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A named namespace `pxt-<pid>-<n>` that exists for the guard's lifetime.
pub struct TestNs {
    pub name: String,
    pub ns: NetNs,
}

impl TestNs {
    pub fn new() -> TestNs {
        reap_stale();
        let name = format!(
            "pxt-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let ns =
            NetNs::create_named(&name).unwrap_or_else(|e| panic!("create test namespace: {e}"));
        TestNs { name, ns }
    }

    /// `ip -n NAME -j ARGS...` parsed as JSON (an array).
    pub fn ip_json(&self, args: &[&str]) -> Vec<Value> {
        json_array("ip", &self.in_ns(args))
    }

    /// `ip -n NAME ARGS...`, panicking with stderr on failure.
    pub fn ip(&self, args: &[&str]) {
        run("ip", &self.in_ns(args));
    }

    /// A veth `name` here, its peer `peer` beside it.
    pub fn add_veth(&self, name: &str, peer: &str) {
        self.ip(&["link", "add", name, "type", "veth", "peer", "name", peer]);
    }

    /// `tc -n NAME -j ARGS...` parsed as JSON (an array).
    pub fn tc_json(&self, args: &[&str]) -> Vec<Value> {
        json_array("tc", &self.in_ns(args))
    }

    /// `tc -n NAME ARGS...`, panicking with stderr on failure.
    pub fn tc(&self, args: &[&str]) {
        run("tc", &self.in_ns(args));
    }

    /// `args` of an iproute2 command (`ip`, `tc`) run in this namespace.
    fn in_ns<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        [&["-n", self.name.as_str()], args].concat()
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        if let Err(e) = NetNs::delete_named(&self.name) {
            eprintln!(
                "warning: could not delete test namespace {}: {e}",
                self.name
            );
        }
    }
}

/// Deletes `pxt-<pid>-*` namespaces left behind by test processes that no
/// longer exist (killed before their guards could run).
fn reap_stale() {
    let Ok(dir) = std::fs::read_dir(plexus_dataplane::netns::NETNS_RUN_DIR) else {
        return;
    };
    for entry in dir.flatten().take(10_000) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("pxt-").and_then(|r| r.split('-').next()) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !std::path::Path::new("/proc").join(pid).exists() {
            let _ = NetNs::delete_named(&name);
        }
    }
}

pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf8")
}

/// `ip -j ARGS...` parsed as a JSON array.
pub fn ip_json(args: &[&str]) -> Vec<Value> {
    json_array("ip", args)
}

/// `CMD -j ARGS...` (an iproute2 command) parsed as a JSON array; empty
/// output is an empty one.
fn json_array(cmd: &str, args: &[&str]) -> Vec<Value> {
    let out = run(cmd, &[&["-j"], args].concat());
    if out.trim().is_empty() {
        return Vec::new();
    }
    match serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("{cmd} {args:?}: bad JSON {e}: {out}"))
    {
        Value::Array(v) => v,
        other => panic!("{cmd} {args:?}: expected an array, got {other}"),
    }
}

/// `e` has `code` and its details begin with `prefix`.
pub fn assert_error(e: &CniError, code: ErrorCode, prefix: &str) {
    assert_eq!(e.code, code, "{e}");
    assert!(e.details.starts_with(prefix), "{e}");
}

/// Inode of the calling thread's network namespace.
pub fn current_ns_inode() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino()
}

/// Tests need root (CAP_SYS_ADMIN + CAP_NET_ADMIN); skipped visibly and
/// counted otherwise (see `plexus_testkit`).
pub fn is_root() -> bool {
    require(&[Feature::Root])
}

/// A fresh namespace for a test that needs only root and one namespace, or
/// `None` (the test skipped as [`is_root`] says): such a test begins
/// `let Some(t) = root_ns() else { return };`.
pub fn root_ns() -> Option<TestNs> {
    is_root().then(TestNs::new)
}

/// `N` fresh namespaces, each with a netlink handle in it, or `None` (the
/// test skipped as [`is_root`] says).
pub fn root_namespaces<const N: usize>() -> Option<[(TestNs, Netlink); N]> {
    is_root().then(|| {
        std::array::from_fn(|_| {
            let ns = TestNs::new();
            let nl = Netlink::open(&ns.ns).unwrap();
            (ns, nl)
        })
    })
}

/// A veth pair whose local end is in `a` and peer in `b`, both up.
pub fn veth_up(a: &Netlink, b_ns: &TestNs, b: &Netlink, name: &str, peer: &str) -> (u32, u32) {
    let local = a
        .create_veth(&VethSpec {
            peer_netns: Some(&b_ns.ns),
            up: true,
            ..VethSpec::new(ifname(name), ifname(peer))
        })
        .unwrap();
    let peer = b.link_by_name(&ifname(peer)).unwrap().unwrap();
    b.set_up(peer.index).unwrap();
    (local.index, peer.index)
}

/// An nftables table (named `name`) isolating `ifname`'s ingress:
/// established/related and ICMPv6 neighbour discovery pass, then `allow`,
/// then everything else is dropped. The shape the policy tables have.
pub fn ingress_isolated(
    name: &str,
    ifname: &str,
    allow: Vec<plexus_dataplane::nftables::Rule>,
) -> plexus_dataplane::nftables::Table {
    use plexus_dataplane::nftables::{Chain, Hook, Match, Rule, Table, Verdict};
    let rule = |matches, verdict| Rule { matches, verdict };
    let mut rules = vec![
        rule(vec![Match::EstablishedOrRelated], Verdict::Accept),
        rule(vec![Match::Icmpv6Types(133, 137)], Verdict::Accept),
    ];
    rules.extend(allow);
    rules.push(rule(vec![], Verdict::Drop));
    let chain = format!("ingress-{ifname}");
    Table {
        name: name.into(),
        chains: vec![
            Chain {
                name: "input".into(),
                hook: Some(Hook::Input),
                rules: vec![rule(
                    vec![Match::InInterface(self::ifname(ifname))],
                    Verdict::Jump(chain.clone()),
                )],
            },
            Chain {
                name: chain,
                hook: None,
                rules,
            },
        ],
    }
}

/// An interface name the test knows is valid.
pub fn ifname(name: &str) -> plexus_cni::names::IfName {
    plexus_cni::names::IfName::new(name).unwrap_or_else(|e| panic!("{name:?}: {e}"))
}

/// `n` VFs of a real SR-IOV PF, or `None` (a visible, counted skip)
/// without root or such a PF.
pub fn sriov_vfs(n: u32) -> Option<SriovVfs> {
    require(&[Feature::Root, Feature::PciSriov]).then(|| SriovVfs::create(n))
}

/// `n` VFs, a handle on the namespace their PF is in, and the PF's index
/// (`None` as [`sriov_vfs`]).
pub fn vfs_on_pf(n: u32) -> Option<(SriovVfs, Netlink, u32)> {
    let vfs = sriov_vfs(n)?;
    let nl = Netlink::current().unwrap();
    let pf = nl
        .link_by_name(&ifname(&vfs.pf.netdev))
        .unwrap()
        .unwrap()
        .index;
    Some((vfs, nl, pf))
}
