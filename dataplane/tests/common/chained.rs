//! Fixtures for the chained-plugin tests (tuning, bandwidth): a "node"
//! namespace standing in for the host and a "pod" namespace joined by a
//! veth pair; the environments of their requests; and the reference
//! plugins (containernetworking-plugins v1.1.1 in /usr/lib/cni) run on the
//! same namespaces for side-by-side comparisons. Plugin code runs on a
//! thread inside the node namespace; the machine's namespace is never
//! touched.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use plexus_cni::args::CniArgs;
use plexus_cni::delegate::Resolver;
use plexus_cni::env::{AttachmentParams, CniCommand, CniEnv};
use plexus_cni::error::ErrorCode;
use plexus_cni::names::{NetnsPath, PluginType};
use plexus_cni::result::CniResult;
use plexus_cni::skel::{Plugin, Request};
use plexus_cni::CniError;
use plexus_dataplane::{MacAddr, Netlink};
use plexus_testkit::process::output_with_stdin;
use serde_json::{json, Value};

use crate::common::{ifname, is_root, request, run, veth_up, TestNs};

/// Where Debian's containernetworking-plugins put the reference binaries.
pub const REFERENCE_DIR: &str = "/usr/lib/cni";

/// A node namespace and a pod namespace joined by a veth pair: `host_if`
/// in the node, `pod_if` in the pod, both up.
pub struct Attachment {
    pub node: TestNs,
    pub pod: TestNs,
    pub node_nl: Netlink,
    pub pod_nl: Netlink,
    pub host_if: String,
    pub pod_if: String,
}

impl Attachment {
    /// For running plexus and the reference plugin side by side: `veth0`
    /// and `eth0` for plexus, `veth1` and `eth1` for the reference; `None`
    /// (the test skipped) without root or the reference binaries.
    pub fn side_by_side() -> Option<Attachment> {
        if !is_root() || !have_reference() {
            return None;
        }
        let a = Attachment::new("veth0", "eth0");
        a.add_pair("veth1", "eth1");
        Some(a)
    }

    /// A root-only test's pod `eth0` (its peer `veth0` in the node) and
    /// the pod's netns path; `None` (the test skipped) without root.
    pub fn for_root_test() -> Option<(Attachment, String)> {
        if !is_root() {
            return None;
        }
        let a = Attachment::new("veth0", "eth0");
        let ns = a.netns_path();
        Some((a, ns))
    }

    pub fn new(host_if: &str, pod_if: &str) -> Attachment {
        let node = TestNs::new();
        let pod = TestNs::new();
        let node_nl = Netlink::open(&node.ns).unwrap();
        let pod_nl = Netlink::open(&pod.ns).unwrap();
        veth_up(&node_nl, &pod, &pod_nl, host_if, pod_if);
        Attachment {
            node,
            pod,
            node_nl,
            pod_nl,
            host_if: host_if.into(),
            pod_if: pod_if.into(),
        }
    }

    /// Another veth pair between the same namespaces.
    pub fn add_pair(&self, host_if: &str, pod_if: &str) {
        veth_up(&self.node_nl, &self.pod, &self.pod_nl, host_if, pod_if);
    }

    pub fn netns_path(&self) -> String {
        self.pod.ns.path().display().to_string()
    }

    /// Sets the MAC of `name` in the pod (to make two pairs comparable).
    pub fn set_pod_mac(&self, name: &str, mac: &str) {
        let link = self.pod_nl.link_by_name(&ifname(name)).unwrap().unwrap();
        let mac: MacAddr = mac.parse().unwrap();
        self.pod_nl.set_mac(link.index, mac).unwrap();
    }

    /// `ip -d -j link show dev NAME` in the pod.
    pub fn pod_link(&self, name: &str) -> Value {
        self.pod
            .ip_json(&["-d", "link", "show", "dev", name])
            .remove(0)
    }

    /// A sysctl as read inside the pod (`ip netns exec POD cat ...`).
    pub fn pod_sysctl(&self, path: &str) -> String {
        run(
            "ip",
            &[
                "netns",
                "exec",
                &self.pod.name,
                "cat",
                &format!("/proc/sys/{path}"),
            ],
        )
        .trim()
        .to_string()
    }

    /// Runs `f` on a thread inside the node namespace, as a plugin process
    /// started there would run.
    pub fn in_node<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.node.ns.run(f).unwrap()
    }

    /// prevResult as a veth-creating plugin (bridge, ptp) reports it.
    pub fn prev_result(&self, version: &str) -> Value {
        json!({
            "cniVersion": version,
            "interfaces": [
                {"name": self.host_if, "mac": "aa:bb:cc:dd:ee:ff"},
                {"name": self.pod_if, "mac": "02:00:00:00:00:01", "sandbox": self.netns_path()},
            ],
            "ips": [{"address": "10.1.0.2/24", "gateway": "10.1.0.1", "interface": 1}],
        })
    }

    /// The 1.0.0 configuration of a plugin chained after this attachment:
    /// `base` (name, type, the plugin's keys), the attachment as prevResult,
    /// then `extra`'s keys set over it.
    pub fn chained_config(&self, mut base: Value, extra: Value) -> Value {
        base["cniVersion"] = json!("1.0.0");
        base["prevResult"] = self.prev_result("1.0.0");
        for (k, v) in extra.as_object().unwrap() {
            base[k] = v.clone();
        }
        base
    }

    /// Runs the reference `plugin` in the node namespace ([`reference`]).
    pub fn run_reference(
        &self,
        plugin: &str,
        env: &CniEnv,
        config: &Value,
    ) -> Result<Value, Value> {
        reference(plugin, &self.node, env, config)
    }

    /// Runs `plugin` in the node namespace, as a runtime runs it with `env`
    /// and `config`: ADD's result as JSON, `Null` for DEL and CHECK.
    pub fn run_plugin(
        &self,
        plugin: &(impl Plugin + Sync),
        env: CniEnv,
        config: &Value,
    ) -> CallResult {
        let command = env.command();
        let req = request(env, config);
        self.in_node(|| match command {
            CniCommand::Add => plugin.add(&req).and_then(|r| r.to_value(req.cni_version)),
            CniCommand::Del => plugin.del(&req).map(|()| Value::Null),
            CniCommand::Check => plugin.check(&req).map(|()| Value::Null),
            other => panic!("{other}"),
        })
    }

    /// [`Self::run_plugin`] for `command` on the pod's interface of
    /// `container_id`, with no CNI_ARGS.
    pub fn run_command(
        &self,
        plugin: &(impl Plugin + Sync),
        command: CniCommand,
        container_id: &str,
        netns: Option<&str>,
        config: &Value,
    ) -> CallResult {
        let env = env(command, container_id, netns, &self.pod_if, "");
        self.run_plugin(plugin, env, config)
    }
}

/// What a chained plugin's call gave: ADD's result as JSON, `Null` for DEL
/// and CHECK.
pub type CallResult = Result<Value, CniError>;

/// The environment of one invocation.
pub fn env(
    command: CniCommand,
    container_id: &str,
    netns: Option<&str>,
    ifname: &str,
    args: &str,
) -> CniEnv {
    let params = AttachmentParams {
        netns: netns.map(|ns| NetnsPath::new(ns).unwrap()),
        args: CniArgs::parse(args).unwrap(),
        path: vec![REFERENCE_DIR.into()],
        ..AttachmentParams::new(container_id, ifname).unwrap()
    };
    CniEnv::for_attachment(command, params).unwrap()
}

/// Runs the reference `plugin` inside `ns` (`ip netns exec`) with the
/// environment of `env` and `config` on stdin: the printed JSON, `Ok` on
/// exit code 0 (`Null` when nothing was printed), `Err` otherwise.
pub fn reference(plugin: &str, ns: &TestNs, env: &CniEnv, config: &Value) -> Result<Value, Value> {
    let bin = Path::new(REFERENCE_DIR).join(plugin);
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns.name])
        .arg(&bin)
        .env_clear()
        .env("CNI_COMMAND", env.command().as_str())
        .env(
            "CNI_CONTAINERID",
            env.container_id().map_or("", |id| id.as_str()),
        )
        .env(
            "CNI_NETNS",
            env.netns()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        )
        .env("CNI_IFNAME", env.ifname().map_or("", |n| n.as_str()))
        .env("CNI_ARGS", env.args().to_string())
        .env("CNI_PATH", REFERENCE_DIR);
    let out = output_with_stdin(&mut cmd, &config.to_string());
    let text = String::from_utf8_lossy(&out.stdout);
    let value = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{plugin}: {e}: {text}"))
    };
    if out.status.success() {
        Ok(value)
    } else {
        Err(value)
    }
}

/// Whether the reference binaries are installed (tests comparing with them
/// are skipped visibly and counted otherwise).
pub fn have_reference() -> bool {
    plexus_testkit::require(&[plexus_testkit::Feature::ReferencePlugins])
}

/// A result as compared between implementations: Go prints an empty `dns`
/// object, plexus omits it (both are "no DNS" to every reader).
pub fn normalised(mut result: Value) -> Value {
    if result.get("dns") == Some(&json!({})) {
        result.as_object_mut().unwrap().remove("dns");
    }
    result
}

/// Serves every IPAM type by exec'ing the reference binary of that name
/// (host-local) in `node`, as the reference plugin delegates to it.
pub struct ReferenceIpam<'n> {
    pub node: &'n TestNs,
}

impl Plugin for ReferenceIpam<'_> {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let out = self
            .exec(req)
            .map_err(|e| CniError::new(ErrorCode::Io, "ipam", e))?;
        CniResult::from_value(&out)
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        self.exec(req)
            .map(drop)
            .map_err(|e| CniError::new(ErrorCode::Io, "ipam", e))
    }
    fn check(&self, req: &Request) -> Result<(), CniError> {
        self.del(req)
    }
}

impl ReferenceIpam<'_> {
    fn exec(&self, req: &Request) -> Result<Value, String> {
        let ty = req.config["ipam"]["type"].as_str().unwrap_or_default();
        let config = Value::Object(req.config.clone());
        reference(ty, self.node, &req.env, &config).map_err(|e| e.to_string())
    }
}

impl Resolver for ReferenceIpam<'_> {
    fn resolve(&self, _: &PluginType, _: &Request) -> Result<Box<dyn Plugin + '_>, CniError> {
        Ok(Box::new(ReferenceIpam { node: self.node }))
    }
}
