//! What the end-to-end tests share: named namespaces that clean up after
//! themselves, `ip` in a namespace, the plexus binary invoked as a runtime
//! invokes it, and checks that nothing is left.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use plexus_dataplane::NetNs;
use plexus_testkit::kube::{api, AuditedRequest, KubeApi, Relay};
use plexus_testkit::process::output_with_stdin;
use plexus_testkit::process::stdout_ok;
use plexus_testkit::Feature;
use serde_json::{json, Value};

pub const PLEXUS: &str = env!("CARGO_BIN_EXE_plexus");
pub const REFERENCE: &str = "/usr/lib/cni";

/// Named namespaces deleted on drop, even when the test fails.
pub struct Namespaces(pub Vec<String>);

impl Namespaces {
    pub fn add(&mut self, tag: &str) -> String {
        let name = format!("pxe-{}-{tag}", std::process::id());
        NetNs::create_named(&name).unwrap();
        self.0.push(name.clone());
        name
    }

    /// A new namespace, as [`Namespaces::add`] names it, opened.
    pub fn open(&mut self, tag: &str) -> NetNs {
        NetNs::open(format!("/var/run/netns/{}", self.add(tag))).unwrap()
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in self.0.drain(..).rev() {
            let _ = NetNs::delete_named(&name);
        }
    }
}

pub fn ip(netns: &str, args: &[&str]) -> String {
    let out = Command::new("ip").arg("-n").arg(netns).args(args).output();
    stdout_ok(out.unwrap(), format!("ip -n {netns} {args:?}"))
}

pub fn addresses(netns: &str, ifname: &str) -> Vec<String> {
    let v: Value =
        serde_json::from_str(&ip(netns, &["-j", "-4", "addr", "show", "dev", ifname])).unwrap();
    v[0]["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["local"].as_str().unwrap().to_string())
        .collect()
}

pub fn link_names(netns: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(&ip(netns, &["-j", "link", "show"])).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_string())
        .collect()
}

/// One ping from the namespace `from` reaches `to` (over `network`, as a
/// failure says).
#[track_caller]
pub fn assert_reaches(network: &str, from: &str, to: &str) {
    assert!(ping(from, to), "{network}: {from} -> {to}");
}

pub fn ping(from: &str, to: &str) -> bool {
    Command::new("ip")
        .args(["netns", "exec", from, "ping", "-c1", "-W2", to])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// plexus run as a runtime runs it: in the node namespace, env + stdin, with
/// any `CNI_NETNS` path (empty: unset), `CNI_IFNAME` and `CNI_ARGS`.
pub fn plexus_at(
    node: &str,
    command: &str,
    container: &str,
    netns: &str,
    ifname: &str,
    cni_args: &str,
    conf: &str,
) -> Output {
    cni_at(
        node,
        PLEXUS,
        [command, container, netns, ifname, cni_args],
        conf,
    )
}

/// The reference plugin `plugin` of `/usr/lib/cni` ADDing `eth0` in pod
/// namespace `pod_ns`, run by hand in `node` as the runtime ran the cluster
/// network before plexus was installed.
pub fn reference_plugin(
    node: &str,
    plugin: &str,
    container: &str,
    pod_ns: &str,
    conf: &Value,
) -> Output {
    let netns = format!("/var/run/netns/{pod_ns}");
    cni_at(
        node,
        &format!("{REFERENCE}/{plugin}"),
        ["ADD", container, &netns, "eth0", ""],
        &conf.to_string(),
    )
}

/// `binary` run as a runtime runs a plugin: in the node namespace, its
/// `CNI_COMMAND`, `CNI_CONTAINERID`, `CNI_NETNS`, `CNI_IFNAME` and
/// `CNI_ARGS` given in that order, the conf on stdin.
fn cni_at(node: &str, binary: &str, env: [&str; 5], conf: &str) -> Output {
    plugin_at(node, binary, REFERENCE, env, conf)
}

/// [`cni_at`] with the plugins of `cni_path` (`CNI_PATH`) as delegates.
pub fn plugin_at(
    node: &str,
    binary: &str,
    cni_path: &str,
    [command, container, netns, ifname, cni_args]: [&str; 5],
    conf: &str,
) -> Output {
    let mut plugin = Command::new("ip");
    plugin
        .args(["netns", "exec", node, binary])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", container)
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", ifname)
        .env("CNI_PATH", cni_path)
        .env("CNI_ARGS", cni_args);
    output_with_stdin(&mut plugin, conf)
}

pub fn files_in(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_dir() {
                out.extend(
                    files_in(&e.path())
                        .into_iter()
                        .map(|f| format!("{name}/{f}")),
                );
            } else {
                out.push(name);
            }
        }
    }
    out
}

/// A test's temporary directory and namespaces: a node with two pods.
pub struct NodeWithPods {
    pub tmp: tempfile::TempDir,
    pub node: String,
    pub pods: [String; 2],
    pub namespaces: Namespaces,
}

/// [`node_and_pods`] with a temporary directory; `None` (the test skips)
/// without root or the reference plugins.
pub fn node_with_pods(tag: &str) -> Option<NodeWithPods> {
    node_with_pods_requiring(&[Feature::Root, Feature::ReferencePlugins], tag)
}

/// [`node_with_pods`], skipping without any of `features` instead.
pub fn node_with_pods_requiring(features: &[Feature], tag: &str) -> Option<NodeWithPods> {
    if !plexus_testkit::require(features) {
        return None;
    }
    let mut namespaces = Namespaces(Vec::new());
    let (node, pods) = node_and_pods(&mut namespaces, tag);
    Some(NodeWithPods {
        tmp: tempfile::tempdir().unwrap(),
        node,
        pods,
        namespaces,
    })
}

/// Runs `test` on a [`node_with_pods`] (its temporary directory, node and
/// pods), unless that skips; then nothing the test made may be left.
pub fn on_node_with_pods(tag: &str, test: impl FnOnce(&Path, &str, &[String; 2])) {
    let Some(w) = node_with_pods(tag) else { return };
    test(w.tmp.path(), &w.node, &w.pods);
    assert_nothing_left(w.tmp.path());
}

/// A node namespace (lo up, and `uplink0`, one end of a veth with both ends
/// up, as the master of macvlan/ipvlan networks) and two pod namespaces.
pub fn node_and_pods(namespaces: &mut Namespaces, tag: &str) -> (String, [String; 2]) {
    let node = namespaces.add(&format!("{tag}-node"));
    let pods = [
        namespaces.add(&format!("{tag}-pod1")),
        namespaces.add(&format!("{tag}-pod2")),
    ];
    ip(&node, &["link", "set", "lo", "up"]);
    ip(
        &node,
        &[
            "link", "add", "uplink0", "type", "veth", "peer", "name", "uplink0p",
        ],
    );
    // Both ends up: without carrier on the master, its children are down.
    ip(&node, &["link", "set", "uplink0", "up"]);
    ip(&node, &["link", "set", "uplink0p", "up"]);
    (node, pods)
}

pub fn host_local(tmp: &Path, subnet: &str, who: &str) -> Value {
    json!({"type": "host-local", "subnet": subnet, "dataDir": tmp.join("ipam").join(who)})
}

/// Multus's auxiliary chain `vendor-chain` under `conf_dir` (its e2e test
/// test-subdirectory-chaining-passthru.sh: a tuning sysctl on eth0); the
/// chain's directory, for more plugin confs.
pub fn vendor_chain(conf_dir: &Path) -> PathBuf {
    let chain = conf_dir.join("vendor-chain");
    std::fs::create_dir_all(&chain).unwrap();
    std::fs::write(
        chain.join("10-sysctltwiddle.conf"),
        json!({"cniVersion": "1.0.0", "name": "sysctltwiddle", "type": "tuning",
               "sysctl": {"net.ipv4.conf.eth0.arp_filter": "1"}})
        .to_string(),
    )
    .unwrap();
    chain
}

/// `macnet`: a macvlan network on the node's `uplink0`, host-local
/// 10.20.0.0/24 under `tmp`.
pub fn macvlan_network(tmp: &Path) -> Value {
    json!({"cniVersion": "1.0.0", "name": "macnet", "type": "macvlan",
        "master": "uplink0", "ipam": host_local(tmp, "10.20.0.0/24", "mac")})
}

/// No record and no IP allocation is left under `tmp` (host-local keeps
/// only its lock and last_reserved_ip files).
pub fn assert_nothing_left(tmp: &Path) {
    assert!(files_in(&tmp.join("cache")).is_empty());
    let left: Vec<String> = files_in(&tmp.join("ipam"))
        .into_iter()
        .filter(|f| !f.ends_with("/lock") && !f.contains("last_reserved_ip"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

pub fn assert_ok(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The node namespace's links with their addresses and its routes: what
/// must not change. IPv6 link-local addresses and their routes are left out:
/// the kernel adds them and ends their DAD by itself, at its own pace (on
/// the VM's emulated CPUs, in the middle of a test).
pub fn node_state(node: &str) -> (Value, Vec<String>) {
    let addrs: Value = serde_json::from_str(&ip(node, &["-j", "addr", "show"])).unwrap();
    let links: Value = addrs
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let configured: Vec<String> = l["addr_info"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|a| a["scope"] != "link")
                .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
                .collect();
            json!([l["ifname"], l["operstate"], configured])
        })
        .collect();
    let routes = ip(node, &["route", "show", "table", "all"])
        .lines()
        .filter(|r| !r.contains("fe80:"))
        .map(str::to_string)
        .collect();
    (links, routes)
}

/// The details of the CNI error a failed call printed, whose code must be
/// `code`.
pub fn cni_details(out: &Output, code: u32) -> String {
    let e = cni_error(out);
    assert_eq!(e["code"], code, "{e}");
    e["details"]
        .as_str()
        .unwrap_or_else(|| panic!("no details in {e}"))
        .to_string()
}

/// The CNI error a failed call printed.
pub fn cni_error(out: &Output) -> Value {
    assert!(!out.status.success(), "expected a failure");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A node (and two pod) namespaces reaching the test API server through a
/// relay, and a Kubernetes namespace of the test's own holding the NAD
/// `macnet` with the config `macnet` makes (given the temp dir).
pub struct KubeNode {
    pub api: &'static KubeApi,
    pub kube_ns: String,
    pub node: String,
    pub pods: [String; 2],
    pub relay: Relay,
    pub tmp: tempfile::TempDir,
    pub namespaces: Namespaces,
}

/// `None` (the test skips) without root, the reference plugins or the API
/// server.
pub fn kube_node(tag: &str, ns_prefix: &str, macnet: impl Fn(&Path) -> Value) -> Option<KubeNode> {
    kube_node_on(api, tag, ns_prefix, macnet)
}

/// [`kube_node`] on the API server `api` gives (called once the test's
/// requirements are met).
pub fn kube_node_on(
    api: impl FnOnce() -> &'static KubeApi,
    tag: &str,
    ns_prefix: &str,
    macnet: impl Fn(&Path) -> Value,
) -> Option<KubeNode> {
    kube_node_needing(Feature::KubeApiServer, api, tag, ns_prefix, macnet)
}

/// [`kube_node_on`] with the API server `server` names: for a test of
/// devices only the VM has, [`Feature::KubeApiServerBesideDevices`].
pub fn kube_node_needing(
    server: Feature,
    api: impl FnOnce() -> &'static KubeApi,
    tag: &str,
    ns_prefix: &str,
    macnet: impl Fn(&Path) -> Value,
) -> Option<KubeNode> {
    if !plexus_testkit::require(&[Feature::Root, Feature::ReferencePlugins, server]) {
        return None;
    }
    let api = api();
    let tmp = tempfile::tempdir().unwrap();
    let mut namespaces = Namespaces(Vec::new());
    let (node, pods) = node_and_pods(&mut namespaces, tag);
    let relay = Relay::into_netns(Path::new(&format!("/var/run/netns/{node}")), api.port).unwrap();
    let kube_ns = api.namespace(&format!("{ns_prefix}-{tag}"));
    let macnet = macnet(tmp.path());
    let kube = KubeNode {
        api,
        kube_ns,
        node,
        pods,
        relay,
        tmp,
        namespaces,
    };
    kube.nad("macnet", &macnet);
    Some(kube)
}

impl KubeNode {
    /// Create the NAD `name` in this test's namespace with `config`.
    pub fn nad(&self, name: &str, config: &Value) {
        self.api.apply(&format!(
            "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
             metadata: {{name: {name}, namespace: {}}}\nspec:\n  config: '{config}'\n",
            self.kube_ns
        ));
    }

    /// Create the NAD `name` in this test's namespace with `config`, backed
    /// by the device resource `resource` (`k8s.v1.cni.cncf.io/resourceName`).
    pub fn resource_nad(&self, name: &str, resource: &str, config: &Value) {
        let annotations = [("k8s.v1.cni.cncf.io/resourceName", resource)];
        let manifest = plexus_testkit::kube::nad_manifest(name, &annotations, config);
        let mut nad: Value = serde_json::from_str(&manifest).unwrap();
        nad["metadata"]["namespace"] = json!(self.kube_ns);
        self.api.apply(&nad.to_string());
    }

    /// Pod `pod`'s field at `jsonpath` (`kubectl get pod -o jsonpath=`).
    pub fn pod_field(&self, pod: &str, jsonpath: &str) -> String {
        self.api.kubectl(&[
            "get",
            "pod",
            "-n",
            &self.kube_ns,
            pod,
            "-o",
            &format!("jsonpath={jsonpath}"),
        ])
    }

    /// plexus's requests in this test's Kubernetes namespace.
    pub fn requests(&self) -> Vec<AuditedRequest> {
        self.api
            .audited()
            .into_iter()
            .filter(|r| r.namespace == self.kube_ns && r.stage == "ResponseComplete")
            .collect()
    }
}

/// The events of pod `pod` in Kubernetes namespace `namespace`: `(type,
/// reason, message)`.
pub fn pod_events(api: &KubeApi, namespace: &str, pod: &str) -> Vec<(String, String, String)> {
    let v: Value = serde_json::from_str(&api.kubectl(&[
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        &format!("involvedObject.name={pod}"),
        "-o",
        "json",
    ]))
    .unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (s("type"), s("reason"), s("message"))
        })
        .collect()
}

/// How many of `requests` are `verb` on `resource`'s `subresource`.
pub fn count(requests: &[AuditedRequest], verb: &str, resource: &str, subresource: &str) -> usize {
    requests
        .iter()
        .filter(|r| r.verb == verb && r.resource == resource && r.subresource == subresource)
        .count()
}

/// The JSON conf `conf` with `changes` merged in (`null` removes a key).
pub fn conf_with(conf: &str, changes: Value) -> String {
    let mut conf: Value = serde_json::from_str(conf).unwrap();
    for (k, v) in changes.as_object().unwrap() {
        if v.is_null() {
            conf.as_object_mut().unwrap().remove(k);
        } else {
            conf[k] = v.clone();
        }
    }
    conf.to_string()
}

/// The device plugin's device-info files (device-info-SPEC §4.1) of
/// devices `dev-<n>` of `resource` under `<dir>/dp`, each of type `pci`
/// with the address `0000:3b:00.<n>`: an attachment's device-info in
/// network-status tells which device it got.
pub fn device_info_files(dir: &Path, resource: &str, devices: std::ops::RangeInclusive<u32>) {
    std::fs::create_dir_all(dir.join("dp")).unwrap();
    for n in devices {
        let info = json!({"type": "pci", "version": "1.1.0",
                          "pci": {"pci-address": format!("0000:3b:00.{n}")}});
        let file = format!("{}-dev-{n}-device.json", resource.replace('/', "-"));
        std::fs::write(dir.join("dp").join(file), info.to_string()).unwrap();
    }
}

/// Write `script` to `path`, executable: a plugin exec'd from binDir.
pub fn executable(path: &Path, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, script).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
