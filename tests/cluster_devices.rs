//! Devices from a real kubelet (issue 24 item 5), on the one-node cluster
//! of `testkit/node-up` with plexus deployed from deploy/ unchanged (thick
//! mode, `testkit/node-deploy`).
//!
//! The test kit's device plugin (`plexus_testkit::device_plugin`) registers
//! `plexus.test/netdev` with kubelet over the device-plugin API v1beta1;
//! kubelet advertises it, allocates its devices to a pod that requests it
//! (Allocate: the plugin writes their device-info files, device-info-SPEC
//! §4.1), and reports them in its PodResources API, which plexus's daemon
//! reads through deploy/'s pod-resources mount. A NAD annotated
//! `k8s.v1.cni.cncf.io/resourceName` (multi-net spec v1.3 §4.1.1,
//! device-info-SPEC §4.2.1) then gives each of its attachments one of the
//! pod's devices, and the device's info is in the pod's network-status
//! (§6.1, multi-net spec §5.3.8), read with kubectl.
//!
//! The devices are made-up PCI addresses: no SR-IOV hardware is here (on a
//! node with VFs, sriov-network-device-plugin takes the plugin's place and
//! the NAD's delegate is sriov). So the NAD's delegate must work whatever
//! the device: it is `plexus-test-record`, a shell script the test puts in
//! the node's /opt/cni/bin that saves its stdin (what plexus hands the
//! plugin: `deviceID`, `pciBusID`, and `runtimeConfig.deviceID` for the
//! `deviceID` capability, as Multus does) and then runs the reference
//! macvlan plugin on that same config, which ignores the device keys and
//! gives the pod a real interface. Reading the delegate's own input checks
//! what a device-using plugin (sriov-cni, host-device) would receive, not
//! plexus's record of it.
//!
//! The plugin runs in the test's process, with its socket in kubelet's
//! device-plugins directory and its device-info files in the node's
//! `/run`, both reached from the machine (kubelet sees the same files as
//! from a process on the node; the plugin ends with the test, whatever
//! happens). The `plexus-test-device-plugin` binary runs the same plugin on
//! a node by hand. A kubelet restart in the middle checks that the plugin
//! registers again, as device plugins must.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use plexus::plan::devices::podresources::{Client, Code, Error};
use plexus_testkit::device_plugin::{Config, DevicePlugin};
use plexus_testkit::kube::nad_manifest;
use plexus_testkit::node::{node, Node};
use plexus_testkit::Feature;
use serde_json::{json, Value};

const RESOURCE: &str = "plexus.test/netdev";
const DEVICES: [&str; 3] = ["0000:f0:00.3", "0000:f0:00.1", "0000:f0:00.2"];
/// The recording delegate, in the node's /opt/cni/bin.
const RECORDER: &str = "plexus-test-record";
/// Where it records, on the node (`DIR/root/var/lib/...` from the machine).
const RECORDS: &str = "var/lib/plexus-test-record";
const POD_RUNNING: Duration = Duration::from_secs(60);

/// kubelet's PodResources socket, from the machine.
fn pod_resources(node: &Node) -> Client {
    let socket = node
        .dir
        .join("root/var/lib/kubelet/pod-resources/kubelet.sock");
    Client::new(socket, Duration::from_secs(10))
}

/// Puts the recording delegate in the node's /opt/cni/bin (see the top).
fn install_recorder(node: &Node) -> PathBuf {
    let records = node.dir.join("root").join(RECORDS);
    let _ = std::fs::remove_dir_all(&records);
    let script = format!(
        "#!/bin/sh\n\
         # Saves what plexus hands this plugin, then is the macvlan plugin.\n\
         mkdir -p /{RECORDS}\n\
         tee \"/{RECORDS}/$CNI_CONTAINERID-$CNI_IFNAME-$CNI_COMMAND.json\" | exec /opt/cni/bin/macvlan\n"
    );
    let path = node.dir.join("root/opt/cni/bin").join(RECORDER);
    std::fs::write(&path, script).expect("the recorder is written");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    records
}

/// What the recorder saved for each interface's ADD: ifname -> its stdin.
fn recorded_adds(records: &std::path::Path) -> BTreeMap<String, Value> {
    let mut adds = BTreeMap::new();
    for file in std::fs::read_dir(records).expect("records").flatten() {
        let name = file.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix("-ADD.json") else {
            continue;
        };
        let ifname = stem.rsplit('-').next().unwrap().to_string();
        let text = std::fs::read_to_string(file.path()).unwrap();
        let conf = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}: {text}"));
        adds.insert(ifname, conf);
    }
    adds
}

/// The NAD backed by the resource (device-info-SPEC §4.2.1): the
/// recorder, which declares the `deviceID` capability, on the node's link.
fn device_nad(master: &str) -> String {
    nad_manifest(
        "devnet",
        &[("k8s.v1.cni.cncf.io/resourceName", RESOURCE)],
        &json!({"cniVersion": "1.0.0", "name": "devnet", "plugins": [{
            "type": RECORDER, "capabilities": {"deviceID": true},
            "master": master, "mode": "bridge",
            "ipam": {"type": "host-local", "subnet": "10.40.0.0/24"}}]}),
    )
}

/// A sleeping pod on `networks` whose container requests `devices` of the
/// resource (as a pod requests SR-IOV VFs).
fn device_pod(node: &Node, name: &str, networks: &str, devices: usize) -> String {
    // `command` is the container's last key: its resources follow it.
    format!(
        "{}      resources: {{limits: {{{RESOURCE}: {devices}}}}}\n",
        node.sleeping_pod(name, networks)
    )
}

#[test]
fn a_resource_backed_network_gets_kubelets_devices_and_reports_their_device_info() {
    if !plexus_testkit::require(&[Feature::KubeNode]) {
        return;
    }
    let node = node();
    node.deploy(&[]);
    let plugin = DevicePlugin::start(Config {
        plugin_dir: node.dir.join("root/var/lib/kubelet/device-plugins"),
        // The node's /var/run/k8s.cni.cncf.io (`/var/run` is `/run`).
        devinfo_dir: node.path("/run/k8s.cni.cncf.io/devinfo/dp"),
        resource: RESOURCE.into(),
        devices: DEVICES.iter().map(|d| d.to_string()).collect(),
    })
    .unwrap_or_else(|e| panic!("the device plugin: {e}"));
    // kubelet took the registration: the node advertises the devices.
    let allocatable = || {
        let jsonpath = format!(
            "jsonpath={{.status.allocatable.{}}}",
            RESOURCE.replace('.', "\\.")
        );
        node.kubectl(&["get", "node", &node.name, "-o", &jsonpath])
    };
    node.wait_for(
        "the node advertising 3 plexus.test/netdev",
        Duration::from_secs(60),
        || allocatable() == "3",
    );
    assert!(
        plugin.calls().contains(&"ListAndWatch"),
        "{:?}",
        plugin.calls()
    );

    let records = install_recorder(node);
    let ns = node.namespace("devices");
    node.apply(&ns, &device_nad(&node.iface));
    // Two attachments of the network, so two devices.
    node.apply(&ns, &device_pod(node, "two", "devnet, devnet", 2));
    node.wait_running(&ns, "two", POD_RUNNING);

    // What kubelet allocated, from its real PodResources API. kubelet 1.20
    // has no Get (1.27+): the client falls back to List, as with the
    // stand-in's `Kubelet::WithoutGet` in tests/podresources.rs.
    let kubelet = pod_resources(node);
    let reported = kubelet.pod(&ns, "two").expect("kubelet reports the pod");
    let mut ids: Vec<String> = reported
        .containers
        .iter()
        .flat_map(|c| &c.devices)
        .filter(|d| d.resource_name == RESOURCE)
        .flat_map(|d| d.device_ids.clone())
        .collect();
    ids.sort();
    assert_eq!(ids.len(), 2, "{reported:?}");
    let mut allocated: Vec<String> = plugin.allocations().concat();
    allocated.sort();
    assert_eq!(allocated, ids, "kubelet reports what it allocated");
    match kubelet.get(&ns, "two") {
        Ok(pod) => assert_eq!(pod, reported, "Get and List agree"),
        Err(Error::Refused { code, .. }) => assert_eq!(code, Code::Unimplemented),
        Err(e) => panic!("Get: {e}"),
    }
    assert_eq!(
        kubelet.pod(&ns, "no-such-pod"),
        Err(Error::PodNotFound {
            namespace: ns.clone(),
            name: "no-such-pod".into()
        })
    );
    assert!(
        kubelet.list().unwrap().iter().any(|p| p.name == "two"),
        "List has the pod"
    );

    // Each attachment got one device, in device-ID order (src/plan/devices.rs),
    // and its device-info is in network-status (device-info-SPEC §6.1).
    // The daemon writes the status after its answer (--status-write=async).
    let devnet = format!("{ns}/devnet");
    let mut status: Vec<Value> = Vec::new();
    node.wait_for(
        "network-status with both devnet attachments",
        Duration::from_secs(30),
        || {
            status =
                serde_json::from_str(&node.network_status_text(&ns, "two")).unwrap_or_default();
            status.iter().filter(|e| e["name"] == devnet).count() == 2
        },
    );
    let attachments: Vec<&Value> = status.iter().filter(|e| e["name"] == devnet).collect();
    for (entry, (ifname, id)) in attachments
        .iter()
        .zip([("net1", &ids[0]), ("net2", &ids[1])])
    {
        assert_eq!(entry["interface"], ifname, "{status:#?}");
        let info: Value = serde_json::from_str(&DevicePlugin::device_info(id)).unwrap();
        assert_eq!(entry["device-info"], info, "{status:#?}");
    }
    assert_eq!(status[0].get("device-info"), None, "{status:#?}");

    // What the delegate received: the device as Multus hands it over.
    let adds = recorded_adds(&records);
    for (ifname, id) in [("net1", &ids[0]), ("net2", &ids[1])] {
        let conf = adds
            .get(ifname)
            .unwrap_or_else(|| panic!("no ADD recorded for {ifname}: {adds:#?}"));
        assert_eq!(conf["deviceID"], **id, "{conf:#}");
        assert_eq!(conf["pciBusID"], **id, "{conf:#}");
        assert_eq!(conf["runtimeConfig"]["deviceID"], **id, "{conf:#}");
    }

    // The pod: its interfaces, and its devices in the environment the
    // plugin's Allocate gave.
    let links = node.kubectl(&["exec", "-n", &ns, "two", "--", "ip", "-o", "link"]);
    for ifname in ["eth0", "net1", "net2"] {
        assert!(
            links.contains(&format!(": {ifname}@")),
            "{ifname} in {links}"
        );
    }
    let env = node.kubectl(&["exec", "-n", &ns, "two", "--", "env"]);
    assert!(
        env.lines().any(|l| {
            l.strip_prefix("PCIDEVICE_PLEXUS_TEST_NETDEV=")
                .is_some_and(|v| {
                    v.split(',').count() == 2 && ids.iter().all(|id| v.contains(id.as_str()))
                })
        }),
        "{env}"
    );
    // plexus's copies for the attachments (§4.2.1), on the node.
    let cni_copies = || {
        node.exec_ok(&[
            "sh",
            "-c",
            "ls /run/k8s.cni.cncf.io/devinfo/cni 2>/dev/null || true",
        ])
    };
    assert_eq!(cni_copies().lines().count(), 2, "{}", cni_copies());

    // kubelet restarts (removing every plugin's socket): the plugin serves
    // anew and registers again, and the next pod's devices come from it.
    let watches = || {
        plugin
            .calls()
            .iter()
            .filter(|c| **c == "ListAndWatch")
            .count()
    };
    node.restart("kubelet");
    node.wait_for(
        "kubelet watching the plugin again after its restart",
        Duration::from_secs(60),
        || watches() >= 2,
    );

    // One device left, two attachments wanting one each: the sandbox fails
    // with the reason, naming the resource.
    node.apply(&ns, &device_pod(node, "short", "devnet, devnet", 1));
    node.wait_for(
        "a FailedCreatePodSandBox event naming the resource",
        Duration::from_secs(90),
        || {
            let failed = node.events(&ns, "short", "FailedCreatePodSandBox");
            failed.contains(RESOURCE) && failed.contains("allocated 1 device(s)")
        },
    );

    // DEL removes plexus's copies (§4.2.1); the plugin's own files stay
    // until it stops, which removes them (§4.1.1).
    // (kubectl's own wait would outlast its 60 s bound on a busy machine.)
    node.kubectl(&["delete", "pods", "--all", "-n", &ns, "--wait=false"]);
    node.wait_for("the pods deleted", Duration::from_secs(180), || {
        node.kubectl(&["get", "pods", "-n", &ns, "-o", "name"])
            .is_empty()
    });
    node.wait_for(
        "plexus's device-info copies removed",
        Duration::from_secs(30),
        || cni_copies().is_empty(),
    );
    node.kubectl(&["delete", "namespace", &ns, "--wait=false"]);
    let files: Vec<PathBuf> = ids.iter().map(|id| plugin.device_info_file(id)).collect();
    assert!(files.iter().all(|f| f.exists()), "{files:?}");
    drop(plugin);
    assert!(files.iter().all(|f| !f.exists()), "{files:?}");
    let _ = std::fs::remove_dir_all(&records);
    let _ = std::fs::remove_file(node.dir.join("root/opt/cni/bin").join(RECORDER));
    assert!(node.ready(), "the node stays Ready");
}
