//! Fixtures for the driver tests: a tiny in-test IPAM plugin with static
//! addresses (so these tests don't depend on the ipam crate), a resolver
//! serving it, request builders, and helpers that run a driver inside a
//! "node" namespace standing in for the host (the machine's own namespace is
//! never touched).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use plexus_cni::args::CniArgs;
use plexus_cni::delegate::Resolver;
use plexus_cni::env::{AttachmentParams, CniCommand, CniEnv};
use plexus_cni::error::{CniError, ErrorCode};
use plexus_cni::names::{ContainerId, IfName, NetnsPath, PluginType};
use plexus_cni::result::CniResult;
use plexus_cni::skel::{
    valid_attachments_value, Plugin, Request, ValidAttachment, VALID_ATTACHMENTS,
};
use plexus_cni::CniVersion;
use plexus_dataplane::drivers;
use plexus_dataplane::Session;
use serde_json::{json, Value};

use crate::common::TestNs;

pub mod stacked;

/// The IPAM type the test resolver serves.
pub const IPAM: &str = "test-static";

/// One call the test IPAM received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpamCall {
    pub command: CniCommand,
    pub container_id: Option<ContainerId>,
    pub ifname: Option<IfName>,
}

/// Serves `test-static`, logging every call. Its configuration, under
/// `ipam`: `addresses[{address, gateway}]`, `routes[{dst, gw}]`, `dns`, and
/// `fail` (a command name, e.g. "ADD") to fail that command.
#[derive(Default)]
pub struct TestResolver {
    pub calls: Mutex<Vec<IpamCall>>,
}

impl TestResolver {
    pub fn commands(&self) -> Vec<CniCommand> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.command)
            .collect()
    }
}

struct StaticIpam<'a> {
    calls: &'a Mutex<Vec<IpamCall>>,
}

impl StaticIpam<'_> {
    fn record(&self, req: &Request) -> Result<(), CniError> {
        self.calls.lock().unwrap().push(IpamCall {
            command: req.env.command(),
            container_id: req.env.container_id().cloned(),
            ifname: req.env.ifname().cloned(),
        });
        let fail = req.config["ipam"]["fail"].as_str();
        if fail == Some(req.env.command().as_str()) {
            return Err(CniError::new(
                ErrorCode::TryAgainLater,
                "test IPAM failure",
                format!("ipam.fail: {} fails as asked", req.env.command()),
            ));
        }
        Ok(())
    }
}

impl Plugin for StaticIpam<'_> {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        self.record(req)?;
        let ipam = &req.config["ipam"];
        let ips: Vec<Value> = ipam["addresses"].as_array().cloned().unwrap_or_default();
        let mut out = json!({"cniVersion": "1.1.0", "ips": ips});
        for key in ["routes", "dns"] {
            if !ipam[key].is_null() {
                out[key] = ipam[key].clone();
            }
        }
        CniResult::from_value(&out)
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        self.record(req)
    }
    fn check(&self, req: &Request) -> Result<(), CniError> {
        self.record(req)
    }
    fn gc(&self, req: &Request, _valid: &[ValidAttachment]) -> Result<(), CniError> {
        self.record(req)
    }
    fn status(&self, req: &Request) -> Result<(), CniError> {
        self.record(req)
    }
}

impl Resolver for TestResolver {
    fn resolve(
        &self,
        plugin_type: &PluginType,
        _req: &Request,
    ) -> Result<Box<dyn Plugin + '_>, CniError> {
        if plugin_type == IPAM {
            Ok(Box::new(StaticIpam { calls: &self.calls }))
        } else {
            Err(CniError::invalid_config(
                "ipam.type",
                format!("{plugin_type:?} is not served by the test resolver"),
            ))
        }
    }
}

/// The attachment a request is about.
#[derive(Clone)]
pub struct Target {
    pub container_id: ContainerId,
    /// `None`: no CNI_NETNS (a late DEL).
    pub netns: Option<PathBuf>,
    pub ifname: IfName,
    pub args: String,
}

impl Target {
    pub fn new(container_id: &str, pod: &TestNs, ifname: &str) -> Target {
        Target {
            container_id: ContainerId::new(container_id).unwrap(),
            netns: Some(netns_path(pod)),
            ifname: IfName::new(ifname).unwrap(),
            args: String::new(),
        }
    }

    /// `eth0` of `container_id` in a namespace that does not exist: enough
    /// for VALIDATE, which opens none.
    pub fn nowhere(container_id: &str) -> Target {
        Target {
            container_id: ContainerId::new(container_id).unwrap(),
            netns: Some("/var/run/netns/none".into()),
            ifname: IfName::new("eth0").unwrap(),
            args: String::new(),
        }
    }
}

/// A new pod namespace and the attachment `net1` of `container_id` in it.
pub fn new_pod(container_id: &str) -> (TestNs, Target) {
    let ns = TestNs::new();
    let t = Target::new(container_id, &ns, "net1");
    (ns, t)
}

pub fn netns_path(ns: &TestNs) -> PathBuf {
    PathBuf::from(format!("/var/run/netns/{}", ns.name))
}

/// A request as a runtime would send it.
pub fn request(command: CniCommand, t: &Target, config: &Value) -> Request {
    let params = AttachmentParams {
        netns: t
            .netns
            .as_ref()
            .map(|ns| NetnsPath::new(ns.to_str().unwrap()).unwrap()),
        args: CniArgs::parse(&t.args).unwrap(),
        path: vec![PathBuf::from("/opt/cni/bin")],
        ..AttachmentParams::of(t.container_id.clone(), t.ifname.clone())
    };
    let env = CniEnv::for_attachment(command, params).unwrap();
    crate::common::request(env, config)
}

/// A node namespace with an uplink: the veth pair `up0`/`up1`, both ends up
/// (so links on `up0` have carrier), `up0` with `NET.2/24` and the default
/// route through `NET.1` (`net`: the first three octets).
pub fn node_with_uplink(net: &str) -> TestNs {
    let node = TestNs::new();
    node.add_veth("up0", "up1");
    node.ip(&["link", "set", "up1", "up"]);
    node.ip(&["link", "set", "up0", "up"]);
    node.ip(&["addr", "add", &format!("{net}.2/24"), "dev", "up0"]);
    node.ip(&["route", "add", "default", "via", &format!("{net}.1")]);
    node
}

/// `base` (an object) with the keys of `extra` set over it.
pub fn with_keys(mut base: Value, extra: &Value) -> Value {
    for (k, v) in extra.as_object().unwrap() {
        base[k] = v.clone();
    }
    base
}

/// A configuration of the built-in `ty` named `name`, with the test IPAM
/// handing out `addresses`.
pub fn driver_conf(ty: &str, name: &str, addresses: Value) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "type": ty,
        "ipam": {"type": IPAM, "addresses": addresses},
    })
}

/// The test IPAM's `addresses`: `address` alone, without a gateway.
pub fn v4(address: &str) -> Value {
    json!([{ "address": address }])
}

/// The `ipam` section of the test IPAM giving out `address`.
pub fn ipam(address: &str) -> Value {
    json!({"type": IPAM, "addresses": [{"address": address}]})
}

/// A path for `runtimeConfig.CNIDeviceInfoFile` in a new temp directory
/// (removed when the returned handle drops).
pub fn device_info_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    // A name plexus could give it (deviceinfo::check_cni_file).
    let file = dir.path().join("ns-net-ctr-net1-device.json");
    (dir, file)
}

/// The ADD result (1.1.0) of a device handed whole to `pod` as `net1`, with
/// `mac` and the test IPAM's `address`.
pub fn net1_result(pod: &TestNs, mac: &str, address: &str) -> Value {
    json!({
        "cniVersion": "1.1.0",
        "interfaces": [{"name": "net1", "mac": mac,
                        "sandbox": netns_path(pod).to_str().unwrap()}],
        "ips": [{"interface": 0, "address": address}],
    })
}

/// `e` has `code` and its details contain `details`.
pub fn assert_code(e: &CniError, code: ErrorCode, details: &str) {
    assert_eq!(e.code, code, "{e:?}");
    assert!(
        e.details.contains(details),
        "{details:?} not in {:?}",
        e.details
    );
}

/// `config` with `prevResult` set to `result` (in the config's version).
pub fn with_prev(config: &Value, result: &CniResult) -> Value {
    let version: CniVersion = config["cniVersion"].as_str().unwrap().parse().unwrap();
    let mut c = config.clone();
    c["prevResult"] = result.to_value(version).unwrap();
    c
}

/// The namespace a driver is called in as the host.
pub trait Host: Copy {
    fn run<R>(self, f: impl FnOnce() -> R) -> R;
}

/// A thread inside a test's "node" namespace.
impl Host for &TestNs {
    fn run<R>(self, f: impl FnOnce() -> R) -> R {
        self.ns.run(f).expect("enter the node namespace")
    }
}

/// The calling thread's own namespace: for drivers whose devices live in
/// the machine's namespace (the VM's SR-IOV PF).
#[derive(Debug, Clone, Copy)]
pub struct Here;

impl Host for Here {
    fn run<R>(self, f: impl FnOnce() -> R) -> R {
        f()
    }
}

/// Run `command` of the built-in `plugin_type` driver with `node` as the
/// host.
pub fn call(
    node: impl Host,
    resolver: &dyn Resolver,
    plugin_type: &str,
    command: CniCommand,
    t: &Target,
    config: &Value,
) -> Result<Option<CniResult>, CniError> {
    let req = request(command, t, config);
    node.run(|| {
        // A fresh session per call, as each CNI invocation has its own.
        let session = Session::new();
        let d = drivers::driver(plugin_type, resolver, &session).expect("a built-in type");
        match command {
            CniCommand::Add => d.add(&req).map(Some),
            CniCommand::Del => d.del(&req).map(|()| None),
            CniCommand::Check => d.check(&req).map(|()| None),
            CniCommand::Status => d.status(&req).map(|()| None),
            other => panic!("{other} not used here"),
        }
    })
}

pub fn add(
    node: impl Host,
    r: &dyn Resolver,
    ty: &str,
    t: &Target,
    config: &Value,
) -> Result<CniResult, CniError> {
    call(node, r, ty, CniCommand::Add, t, config).map(|r| r.expect("ADD returns a result"))
}

/// A command without a result: DEL, CHECK.
pub type Done = Result<(), CniError>;

pub fn del(node: impl Host, r: &dyn Resolver, ty: &str, t: &Target, config: &Value) -> Done {
    call(node, r, ty, CniCommand::Del, t, config).map(drop)
}

pub fn check(node: impl Host, r: &dyn Resolver, ty: &str, t: &Target, config: &Value) -> Done {
    call(node, r, ty, CniCommand::Check, t, config).map(drop)
}

/// cni-SPEC §2 GC of the built-in `ty` driver with `node` as the host:
/// `valid` are the attachments the runtime still has.
pub fn gc(
    node: impl Host,
    r: &TestResolver,
    ty: &str,
    config: &Value,
    valid: &[(&str, &str)],
) -> Result<(), CniError> {
    let valid: Vec<ValidAttachment> = valid
        .iter()
        .map(|(c, i)| (ContainerId::new(*c).unwrap(), IfName::new(*i).unwrap()))
        .collect();
    let mut config = config.clone();
    config[VALID_ATTACHMENTS] = valid_attachments_value(&valid);
    let req = crate::common::request(CniEnv::gc(vec![PathBuf::from("/opt/cni/bin")]), &config);
    node.run(|| {
        let session = Session::new();
        let d = drivers::driver(ty, r, &session).expect("a built-in type");
        d.gc(&req, &valid)
    })
}

/// `validate` of the built-in driver (no namespace needed: it must not touch
/// the system).
pub fn validate(ty: &str, t: &Target, config: &Value) -> Result<(), CniError> {
    let r = TestResolver::default();
    let session = Session::new();
    let d = drivers::driver(ty, &r, &session).expect("a built-in type");
    // Bound first: a tail-expression temporary would outlive `r`.
    #[allow(clippy::let_and_return)]
    let out = d.validate(&request(CniCommand::Add, t, config));
    out
}

/// The result as the request's version prints it.
pub fn result_json(r: &CniResult, version: &str) -> Value {
    r.to_value(version.parse().unwrap()).unwrap()
}

/// The names of the links of `ns` ([`link_names`]), sorted.
pub fn sorted_links(ns: &TestNs) -> Vec<String> {
    let mut names = link_names(ns);
    names.sort();
    names
}

/// `ip -d -j link show dev NAME` in `ns`, or `None` if there is no such link.
pub fn link(ns: &TestNs, name: &str) -> Option<Value> {
    ns.ip_json(&["-d", "link", "show"])
        .into_iter()
        .find(|l| l["ifname"] == name)
}

/// Devices some kernels create in every new namespace (the fallback tunnel
/// devices of built-in sit, ipip, gre... as in the VM harness kernel).
const FALLBACK_DEVICES: [&str; 9] = [
    "sit0", "tunl0", "ip6tnl0", "gre0", "gretap0", "erspan0", "ip_vti0", "ip6_vti0", "ip6gre0",
];

/// The names of the links of `ns`, without the kernel's fallback devices.
pub fn link_names(ns: &TestNs) -> Vec<String> {
    ns.ip_json(&["link", "show"])
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_string())
        .filter(|n| !FALLBACK_DEVICES.contains(&n.as_str()))
        .collect()
}

/// `ADDRESS/PREFIX` of every address of `dev` in `ns`, with its flags.
pub fn addresses(ns: &TestNs, dev: &str) -> Vec<(String, Value)> {
    ns.ip_json(&["addr", "show", "dev", dev])
        .iter()
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .map(|a| {
            (
                format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]),
                a,
            )
        })
        .collect()
}

pub fn has_address(ns: &TestNs, dev: &str, cidr: &str) -> bool {
    addresses(ns, dev).iter().any(|(a, _)| a == cidr)
}

/// `ip -j [-6] route show` in `ns` as `"DST via GW dev DEV"` lines.
pub fn routes(ns: &TestNs, v6: bool) -> Vec<String> {
    let args: &[&str] = if v6 {
        &["-6", "route", "show"]
    } else {
        &["route", "show"]
    };
    ns.ip_json(args)
        .iter()
        .map(|r| {
            let mut s = r["dst"].as_str().unwrap().to_string();
            if let Some(gw) = r["gateway"].as_str() {
                s.push_str(&format!(" via {gw}"));
            }
            s.push_str(&format!(" dev {}", r["dev"].as_str().unwrap_or("?")));
            s
        })
        .collect()
}

/// `ns` has `route`, as [`routes`] prints it (an IPv6 route when it has a
/// ':').
#[track_caller]
pub fn assert_route(ns: &TestNs, route: &str) {
    let all = routes(ns, route.contains(':'));
    assert!(all.iter().any(|r| r == route), "{route:?} not in {all:?}");
}

/// What a refused ADD leaves: `ns` with only `lo`, and IPAM never called
/// (it runs only once the link exists).
#[track_caller]
pub fn assert_nothing_made(ns: &TestNs, r: &TestResolver) {
    assert_eq!(link_names(ns), ["lo"]);
    assert_eq!(r.commands(), [], "IPAM runs only once the link exists");
}

/// DEL of `t` again as runtimes repeat it, each a success: without
/// prevResult, without CNI_NETNS (containerd's last DEL), and once the
/// namespace is gone (three IPAM DELs).
pub fn dels_again(node: impl Host, r: &TestResolver, ty: &str, t: &Target, config: &Value) {
    del(node, r, ty, t, config).unwrap();
    let no_ns = Target {
        netns: None,
        ..t.clone()
    };
    del(node, r, ty, &no_ns, config).unwrap();
    let gone = {
        let p = TestNs::new();
        Target::new("gone", &p, &t.ifname)
    };
    del(node, r, ty, &gone, config).unwrap();
}

/// The IPAM calls of one ADD and then `dels` DELs.
pub fn add_then_dels(dels: usize) -> Vec<CniCommand> {
    let mut calls = vec![CniCommand::Add];
    calls.extend(vec![CniCommand::Del; dels]);
    calls
}

/// A sysctl (dotted or slash form) as `ip netns exec NS sysctl -n` reads it.
pub fn sysctl(ns: &TestNs, key: &str) -> String {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    crate::common::run("ip", &["netns", "exec", &ns.name, "cat", &path])
        .trim()
        .to_string()
}

/// One ping from inside `ns`, bounded to about a second.
pub fn ping(ns: &TestNs, ip: &str) -> bool {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns.name, "ping", "-c1", "-W1"]);
    if ip.contains(':') {
        cmd.arg("-6");
    }
    cmd.arg(ip).output().expect("spawn ping").status.success()
}

/// The root namespace's sysctls a driver must never change.
pub fn root_forwarding() -> (String, String) {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    (
        read("/proc/sys/net/ipv4/ip_forward"),
        read("/proc/sys/net/ipv6/conf/all/forwarding"),
    )
}

/// The flags of an `ip -j link` object.
pub fn has_flag(link: &Value, flag: &str) -> bool {
    link["flags"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == flag))
}
