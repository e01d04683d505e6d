//! kubelet's PodResources API as the source of device IDs: the client
//! against the test kit's stand-in kubelet, and the plexus binary end to end, invoked as a runtime invokes it
//! with a manifest directory for the cluster and fake delegates (shell
//! scripts that record their stdin) for the networks: a network whose NAD
//! names a device-plugin resource gets its `deviceID` from the devices
//! kubelet allocated to the pod, in a stable order, from one look-up per ADD,
//! and DEL hands over the same device without asking kubelet. The device
//! plugins' device-info files (device-info-SPEC §4) are copied for each
//! attachment, handed to the plugins that take them (§5.1), reported in
//! network-status (§6.1) and removed on DEL.
//!
//! Nothing here touches a network namespace: the delegates are fakes.
//!
//! The stand-in, not a real kubelet: these tests run everywhere, the VM
//! harness included, where no kubelet runs, and play kubelets other than
//! the one built here (with `Get`, with it disabled, hung). The same client
//! and plexus's daemon against a real kubelet and device plugin:
//! tests/cluster_devices.rs.

mod e2e_support;
mod run_support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use e2e_support::assert_ok;
use plexus::cni::names::{ContainerId, IfName};
use plexus::plan::devices::podresources::v1::PodResources;
use plexus::plan::devices::podresources::{Client, Code, Error};
use plexus::record::{Cache, Lookup};
use plexus_testkit::podresources::{container, pod, Kubelet, PodResourcesServer};
use plexus_testkit::process::output_with_stdin;
use run_support::{result_json, Fakes};
use serde_json::{json, Value};

const VF_A: &str = "intel.com/sriov_a";
const VF_B: &str = "intel.com/sriov_b";
const BOUND: Duration = Duration::from_secs(5);

/// Pod `demo/web` with VFs of two resources in two containers, listed in
/// no particular order, and another pod.
fn node_pods() -> Vec<PodResources> {
    vec![
        pod(
            "demo",
            "other",
            vec![container("app", &[(VF_A, &["0000:3b:02.0"])])],
        ),
        pod(
            "demo",
            "web",
            vec![
                container("app", &[(VF_A, &["0000:3b:02.2", "0000:3b:02.1"])]),
                container("sidecar", &[(VF_B, &["0000:5e:00.1"])]),
            ],
        ),
    ]
}

fn web() -> PodResources {
    node_pods().remove(1)
}

fn client(server: &PodResourcesServer) -> Client {
    Client::new(server.socket(), BOUND)
}

#[test]
fn list_and_get_answer_what_kubelet_reports() {
    let kubelet = PodResourcesServer::start(node_pods());
    let client = client(&kubelet);
    assert_eq!(client.list().unwrap(), node_pods());
    assert_eq!(client.get("demo", "web").unwrap(), web());
    assert_eq!(client.pod("demo", "web").unwrap(), web());
    assert_eq!(kubelet.calls(), ["List", "Get", "Get"]);
}

#[test]
fn kubelets_without_get_are_asked_with_list() {
    for (kind, code) in [
        (Kubelet::WithoutGet, Code::Unimplemented),
        (Kubelet::GetDisabled, Code::Unknown),
    ] {
        let kubelet = PodResourcesServer::start_as(kind, node_pods());
        let client = client(&kubelet);
        match client.get("demo", "web") {
            Err(Error::Refused {
                method: "Get",
                code: got,
                ..
            }) => assert_eq!(got, code, "{kind:?}"),
            other => panic!("{kind:?}: {other:?}"),
        }
        assert_eq!(client.pod("demo", "web").unwrap(), web(), "{kind:?}");
        assert_eq!(kubelet.calls(), ["Get", "Get", "List"], "{kind:?}");
    }
}

#[test]
fn a_pod_kubelet_does_not_know_is_pod_not_found() {
    let kubelet = PodResourcesServer::start(node_pods());
    let not_found = Error::PodNotFound {
        namespace: "demo".into(),
        name: "gone".into(),
    };
    assert_eq!(client(&kubelet).pod("demo", "gone"), Err(not_found.clone()));
    // kubelet's Get answers Unknown for it; List has the last word.
    assert_eq!(kubelet.calls(), ["Get", "List"]);
    let older = PodResourcesServer::start_as(Kubelet::WithoutGet, node_pods());
    assert_eq!(client(&older).pod("demo", "gone"), Err(not_found));
}

#[test]
fn a_missing_socket_and_a_dead_one_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let client = Client::new(&socket, BOUND);
    assert_eq!(
        client.list(),
        Err(Error::SocketMissing {
            socket: socket.clone()
        })
    );
    let message = client.list().unwrap_err().to_string();
    assert!(
        message.starts_with(&format!("{}: no such socket", socket.display())),
        "{message}"
    );
    // A socket kubelet left behind: nobody listens on it.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    match client.pod("demo", "web") {
        Err(Error::Unreachable { socket: s, reason }) => {
            assert_eq!(s, socket);
            assert!(!reason.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_kubelet_that_never_answers_times_out_within_the_bound() {
    let kubelet = PodResourcesServer::start_as(Kubelet::Hung, node_pods());
    // Long enough for the request to reach the stand-in under a loaded TCG
    // VM (it records a call only once the request is in).
    let bound = Duration::from_millis(1000);
    let client = Client::new(kubelet.socket(), bound);
    type Call = fn(&Client) -> Result<(), Error>;
    let calls: [Call; 2] = [|c| c.list().map(drop), |c| c.pod("demo", "web").map(drop)];
    for call in calls {
        let started = Instant::now();
        assert_eq!(
            call(&client),
            Err(Error::TimedOut {
                socket: kubelet.socket().to_path_buf(),
                after: bound
            })
        );
        let took = started.elapsed();
        assert!(took >= bound && took < Duration::from_secs(4), "{took:?}");
    }
    assert_eq!(kubelet.calls(), ["List", "Get"]);
}

/// A node as plexus sees it: fake delegates (`podnet` for the cluster
/// network, `vf` and `plain` for the NADs: `sriov` is built in), a manifest directory with
/// the pod `demo/web` selecting `selection`, and plexus's conf.
struct Node {
    fakes: Fakes,
    conf: String,
}

impl Node {
    fn new(selection: &str, socket: &Path) -> Node {
        let fakes = Fakes::new(&["podnet", "vf", "plain"]);
        fakes.answer_result("podnet", &result_json("1.0.0", 1, "eth0"));
        fakes.answer_result("vf", &result_json("1.0.0", 2, "net1"));
        fakes.answer_result("plain", &result_json("1.0.0", 3, "net1"));
        let manifests = fakes.root().join("manifests");
        std::fs::create_dir(&manifests).unwrap();
        // sriov-b's config declares the deviceID capability (cni-CONVENTIONS)
        // and the CNIDeviceInfoFile one (device-info-SPEC §5.1).
        let nad = |name: &str, resource: Option<&str>, config: Value| {
            let annotations = resource
                .map(|r| format!(", annotations: {{k8s.v1.cni.cncf.io/resourceName: {r}}}"))
                .unwrap_or_default();
            format!(
                "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
                 metadata: {{name: {name}, namespace: demo{annotations}}}\nspec:\n  config: '{config}'\n---\n"
            )
        };
        let text = [
            nad(
                "sriov-a",
                Some(VF_A),
                json!({"cniVersion": "1.0.0", "type": "vf", "vlan": 10}),
            ),
            nad(
                "sriov-b",
                Some(VF_B),
                json!({"cniVersion": "1.0.0", "plugins": [
                    {"type": "vf", "capabilities": {"deviceID": true, "CNIDeviceInfoFile": true}},
                    {"type": "plain"}]}),
            ),
            nad(
                "plain",
                None,
                json!({"cniVersion": "1.0.0", "type": "plain"}),
            ),
            format!(
                "kind: Pod\nmetadata: {{name: web, namespace: demo, annotations: \
                 {{k8s.v1.cni.cncf.io/networks: \"{selection}\"}}}}\n"
            ),
        ]
        .concat();
        std::fs::write(manifests.join("demo.yaml"), text).unwrap();
        let conf = json!({
            "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
            "cniDir": fakes.cache_dir(), "binDir": fakes.bindir(), "manifestDir": manifests,
            "podResourcesSocket": socket, "podResourcesTimeout": 2,
            "deviceInfoDir": fakes.root().join("devinfo"),
            "delegates": [{"cniVersion": "1.0.0", "name": "podnet", "type": "podnet"}],
        })
        .to_string();
        Node { fakes, conf }
    }

    /// The device-info directory (`deviceInfoDir`): `dp/` and `cni/`.
    fn devinfo(&self, sub: &str, name: &str) -> std::path::PathBuf {
        self.fakes.root().join("devinfo").join(sub).join(name)
    }

    /// The device plugin's device-info file for sriov-a's device
    /// (0000:3b:02.1), written with `contents`; its path.
    fn device_plugin_file(&self, contents: &str) -> std::path::PathBuf {
        let dp = self.devinfo("dp", "intel.com-sriov_a-0000:3b:02.1-device.json");
        std::fs::create_dir_all(dp.parent().unwrap()).unwrap();
        std::fs::write(&dp, contents).unwrap();
        dp
    }

    /// The pod has two attachments (the cluster network and the selected
    /// one), neither with device-info.
    fn assert_attached_without_device_info(&self) {
        let status = self.network_status();
        assert_eq!(status.len(), 2, "{status:?}");
        assert!(
            status.iter().all(|e| e.get("device-info").is_none()),
            "{status:?}"
        );
    }

    /// The pod's network-status entries (multi-net-spec §5) from plexus's
    /// record, what it publishes on a cluster.
    fn network_status(&self) -> Vec<Value> {
        let Ok(Lookup::Found(record)) = Cache::new(self.fakes.cache_dir()).load(
            &ContainerId::new("ctr1").unwrap(),
            &IfName::new("eth0").unwrap(),
        ) else {
            panic!("no readable record");
        };
        record
            .network_status()
            .iter()
            .map(|e| e.to_value())
            .collect()
    }

    /// plexus run as kubelet's runtime runs it, for pod demo/web.
    fn plexus(&self, command: &str) -> Output {
        let mut plexus = Command::new(env!("CARGO_BIN_EXE_plexus"));
        plexus
            .env_clear()
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", "ctr1")
            .env("CNI_NETNS", self.fakes.netns())
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", self.fakes.bin())
            .env(
                "CNI_ARGS",
                "IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME=web",
            );
        output_with_stdin(&mut plexus, &self.conf)
    }

    /// An ADD that fails with CNI error `code` before any plugin runs; its details.
    fn failed_add(&self, code: u32) -> String {
        let out = self.plexus("ADD");
        assert!(!out.status.success(), "expected a failure");
        let e: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(e["code"], code, "{e}");
        assert!(self.fakes.calls().is_empty(), "{:?}", self.fakes.calls());
        e["details"].as_str().unwrap().to_string()
    }

    /// `(plugin type, CNI_IFNAME, its stdin)` of every call with `command`.
    fn requests(&self, command: &str) -> Vec<(String, String, Value)> {
        (0..self.fakes.calls().len())
            .map(|n| self.fakes.call(n))
            .filter(|c| c.command == command)
            .map(|c| (c.plugin, c.env["CNI_IFNAME"].clone(), c.stdin))
            .collect()
    }
}

/// The device each plugin call was handed: `(type, ifname, deviceID,
/// runtimeConfig.deviceID)`, with `pciBusID` checked to be the same.
fn handed(requests: &[(String, String, Value)]) -> Vec<(&str, &str, Value, Value)> {
    requests
        .iter()
        .map(|(plugin, ifname, stdin)| {
            let id = stdin.get("deviceID").cloned().unwrap_or(Value::Null);
            assert_eq!(
                stdin.get("pciBusID").cloned().unwrap_or(Value::Null),
                id,
                "{stdin}"
            );
            let runtime = stdin["runtimeConfig"]["deviceID"].clone();
            (plugin.as_str(), ifname.as_str(), id, runtime)
        })
        .collect()
}

#[test]
fn each_network_of_a_resource_gets_its_device_in_stable_order_from_one_look_up() {
    let kubelet = PodResourcesServer::start(node_pods());
    // Two selections of sriov-a around one of sriov-b and one without a resource.
    let node = Node::new("sriov-a,plain,sriov-b,sriov-a", kubelet.socket());
    assert_ok("ADD", &node.plexus("ADD"));
    assert_eq!(kubelet.calls(), ["Get"], "one look-up per ADD");
    let (a1, a2, b) = (
        json!("0000:3b:02.1"),
        json!("0000:3b:02.2"),
        json!("0000:5e:00.1"),
    );
    let null = Value::Null;
    let want = [
        ("podnet", "eth0", null.clone(), null.clone()),
        ("vf", "net1", a1.clone(), null.clone()),
        ("plain", "net2", null.clone(), null.clone()),
        // Only the plugin declaring the capability gets runtimeConfig.deviceID;
        // every plugin of the chain gets deviceID and pciBusID, as from Multus.
        ("vf", "net3", b.clone(), b.clone()),
        ("plain", "net3", b.clone(), null.clone()),
        ("vf", "net4", a2.clone(), null.clone()),
    ];
    assert_eq!(handed(&node.requests("ADD")), want);
    assert_eq!(
        node.requests("ADD")[1].2["vlan"],
        10,
        "the NAD's config is kept"
    );

    // DEL hands the same devices over (in reverse) from the record, and
    // does not ask kubelet.
    drop(kubelet);
    assert_ok("DEL", &node.plexus("DEL"));
    // Attachments and the plugins of a chain are deleted in reverse.
    let mut del_want = want.to_vec();
    del_want.reverse();
    assert_eq!(handed(&node.requests("DEL")), del_want);
}

#[test]
fn networks_without_a_resource_never_ask_kubelet() {
    let kubelet = PodResourcesServer::start(node_pods());
    let node = Node::new("plain", kubelet.socket());
    assert_ok("ADD", &node.plexus("ADD"));
    assert_ok("DEL", &node.plexus("DEL"));
    assert!(kubelet.calls().is_empty(), "{:?}", kubelet.calls());
    // Not even a socket is needed.
    let node = Node::new("plain", Path::new("/nonexistent/kubelet.sock"));
    assert_ok("ADD", &node.plexus("ADD"));
}

#[test]
fn too_few_devices_fail_the_add_before_any_plugin_runs() {
    let kubelet = PodResourcesServer::start(node_pods());
    let node = Node::new("sriov-a,sriov-a,sriov-a", kubelet.socket());
    let details = node.failed_add(101);
    assert!(
        details.starts_with(
            "k8s.v1.cni.cncf.io/networks[2]: NetworkAttachmentDefinition demo/sriov-a \
             has resourceName intel.com/sriov_a, but kubelet allocated 2 device(s) of it to pod \
             demo/web for 3 attachment(s)"
        ),
        "{details}"
    );
}

#[test]
fn an_unreachable_kubelet_fails_the_add_naming_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let node = Node::new("plain,sriov-b", &socket);
    let details = node.failed_add(105);
    assert!(
        details.starts_with(
            "k8s.v1.cni.cncf.io/networks[1]: NetworkAttachmentDefinition demo/sriov-b \
             has resourceName intel.com/sriov_b, whose device comes from kubelet's PodResources \
             API (podResourcesSocket, podResourcesTimeout)"
        ) && details.ends_with(&format!(
            "{}: no such socket (kubelet is not running, or serves its PodResources API elsewhere)",
            socket.display()
        )),
        "{details}"
    );

    // One that does not answer in time: try again later (code 11).
    let hung = PodResourcesServer::start_as(Kubelet::Hung, node_pods());
    let node = Node::new("sriov-b", hung.socket());
    let started = Instant::now();
    let details = node.failed_add(11);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(details.contains("no answer within 2s"), "{details}");
}

#[test]
fn plexus_plan_shows_the_devices_when_given_kubelets_socket() {
    let kubelet = PodResourcesServer::start(node_pods());
    let node = Node::new("sriov-b,sriov-a", kubelet.socket());
    let conf = node.fakes.root().join("plexus.conf");
    std::fs::write(&conf, &node.conf).unwrap();
    let manifests = node.fakes.root().join("manifests/demo.yaml");
    let plan = |extra: &[&Path]| {
        let out = Command::new(env!("CARGO_BIN_EXE_plexus"))
            .arg("plan")
            .args([
                Path::new("--pod"),
                &manifests,
                Path::new("--nad"),
                &manifests,
            ])
            .args([Path::new("--config"), &conf])
            .args(extra)
            .output()
            .unwrap();
        assert_ok("plan", &out);
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let devices = |plan: &Value| -> Vec<Value> {
        plan["attachments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["plugins"][0]["deviceID"].clone())
            .collect()
    };

    let with = plan(&[Path::new("--pod-resources"), kubelet.socket()]);
    assert_eq!(
        devices(&with),
        [Value::Null, json!("0000:5e:00.1"), json!("0000:3b:02.1")]
    );
    assert_eq!(with["warnings"], json!([]));
    assert_eq!(kubelet.calls(), ["Get"]);

    // Off the node: no device, and a warning saying why.
    let without = plan(&[]);
    assert_eq!(devices(&without), [Value::Null, Value::Null, Value::Null]);
    let warnings = without["warnings"].to_string();
    assert!(
        warnings.contains(
            "k8s.v1.cni.cncf.io/networks[0]: NetworkAttachmentDefinition demo/sriov-b has \
             resourceName intel.com/sriov_b: its deviceID comes from kubelet's PodResources API \
             at ADD time"
        ),
        "{warnings}"
    );
    assert_eq!(kubelet.calls(), ["Get"]);
}

/// A device plugin's device-info file for `device` of `resource`.
fn pci_info(device: &str, pf: &str) -> Value {
    json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": device, "pf-pci-address": pf}})
}

#[test]
fn device_info_is_copied_handed_to_plugins_reported_and_removed_on_del() {
    let kubelet = PodResourcesServer::start(node_pods());
    let node = Node::new("sriov-a,sriov-b,plain", kubelet.socket());
    // §4.1: the device plugin wrote a file for sriov-a's device, none for
    // sriov-b's; sriov-b's vf plugin writes its own (§5.1.2).
    let from_dp = pci_info("0000:3b:02.1", "0000:3b:00.0");
    let dp = node.device_plugin_file(&from_dp.to_string());
    let net1 = node.devinfo("cni", "demo-sriov-a-ctr1-net1-device.json");
    let net2 = node.devinfo("cni", "demo-sriov-b-ctr1-net2-device.json");
    let written = json!({"type": "vdpa", "version": "1.1.0", "vdpa": {
        "parent-device": "vdpa0", "driver": "vhost", "path": "/dev/vhost-vdpa-0"}});
    node.fakes.answer_file(
        "vf",
        "ADD",
        "run",
        &format!(
            "if [ \"$CNI_IFNAME\" = net2 ]; then echo '{written}' > {}; fi",
            net2.display()
        ),
    );
    assert_ok("ADD", &node.plexus("ADD"));

    // §4.2.1: the copy, unique to the attachment, kept until DEL.
    let read = |p: &Path| serde_json::from_slice::<Value>(&std::fs::read(p).unwrap()).unwrap();
    assert_eq!(read(&net1), from_dp);
    assert_eq!(read(&net2), written);
    // §5.1.1: only a plugin declaring the capability is given the path.
    let adds = node.requests("ADD");
    let given = |n: usize| adds[n].2["runtimeConfig"]["CNIDeviceInfoFile"].clone();
    assert_eq!(adds[1].0, "vf");
    assert_eq!(given(1), Value::Null, "sriov-a does not declare it");
    assert_eq!((adds[2].0.as_str(), adds[2].1.as_str()), ("vf", "net2"));
    assert_eq!(given(2), json!(net2));
    assert_eq!(given(3), Value::Null, "plain does not declare it");

    // §6.1.1 (multi-net-spec §5.3.8): into network-status.
    let status = node.network_status();
    let device_info: Vec<Value> = status.iter().map(|e| e["device-info"].clone()).collect();
    assert_eq!(
        device_info,
        [Value::Null, from_dp, written, Value::Null],
        "{status:?}"
    );

    // §4.2.1: DEL removes the copies; the device plugin's file stays.
    assert_ok("DEL", &node.plexus("DEL"));
    assert!(!net1.exists() && !net2.exists());
    assert!(dp.exists());
    assert_ok("DEL again", &node.plexus("DEL"));
}

#[test]
fn a_bad_device_plugin_file_is_left_out_and_the_attachment_goes_on() {
    // multi-net-spec §5.3.8: device-info is optional. Multus's
    // `CopyDeviceInfoForCNIFromDP` failing only logs; plexus also warns (a
    // Warning event on a cluster, tests/kube/device_info.rs) and attaches the network
    // without device-info.
    let kubelet = PodResourcesServer::start(node_pods());
    let node = Node::new("sriov-a", kubelet.socket());
    let dp = node.device_plugin_file(r#"{"type": "pci", "version": "1.1.0"}"#);
    assert_ok("ADD", &node.plexus("ADD"));
    let net1 = node.devinfo("cni", "demo-sriov-a-ctr1-net1-device.json");
    assert!(!net1.exists(), "nothing copied");
    node.assert_attached_without_device_info();
    assert_ok("DEL", &node.plexus("DEL"));
    assert!(dp.exists(), "the device plugin's file is not plexus's");
}

#[test]
fn bad_device_info_from_a_plugin_is_left_out_and_the_attachment_goes_on() {
    // Multus's `getDelegateDeviceInfo` failing only logs: the attachment
    // stays, without device-info (multi-net-spec §5.3.8); DEL removes the
    // file the plugin wrote (device-info-SPEC §4.2.1).
    let kubelet = PodResourcesServer::start(node_pods());
    let node = Node::new("sriov-b", kubelet.socket());
    let net1 = node.devinfo("cni", "demo-sriov-b-ctr1-net1-device.json");
    node.fakes.answer_file(
        "vf",
        "ADD",
        "run",
        &format!(
            "mkdir -p {0}; echo 'not json' > {1}",
            net1.parent().unwrap().display(),
            net1.display()
        ),
    );
    assert_ok("ADD", &node.plexus("ADD"));
    assert!(node.requests("DEL").is_empty(), "nothing rolled back");
    node.assert_attached_without_device_info();
    assert_ok("DEL", &node.plexus("DEL"));
    assert!(!net1.exists());
    assert!(!node.fakes.record_path("ctr1").exists());
}
