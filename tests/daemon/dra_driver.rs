//! plexus as a DRA driver (issue 49 item 2): `plexus daemon --dra` in the
//! node namespace registers with kubelet's DRA manager, publishes the
//! node's devices as its pool's ResourceSlices and prepares claims for
//! them. The host has no SR-IOV here, so the devices are whole netdevs
//! named with `--dra-netdev` (veths in the node namespace); VFs are the
//! VM suite's. Stand-ins, each for a Kubernetes 1.34+ part these machines
//! cannot build: kubelet's DRA manager (`plexus_testkit::kubelet_dra`), the
//! scheduler (`plexus_testkit::dra::allocate`) and `resource.k8s.io/v1`
//! itself, served as custom resources (`plexus_testkit::dra::serve`).

use super::*;
use plexus_testkit::dra::{self, Pick};
use plexus_testkit::kubelet_dra::{claim, KubeletDra, Registered};

const DRIVER: &str = "dra.plexus.dev";

/// The daemon's DRA directories below the test's tmp.
struct Dirs {
    registry: PathBuf,
    plugins: PathBuf,
    cdi: PathBuf,
    state: PathBuf,
}

fn dirs(w: &World) -> Dirs {
    let tmp = w.kube.tmp.path();
    Dirs {
        registry: tmp.join("kubelet/plugins_registry"),
        plugins: tmp.join("kubelet/plugins"),
        cdi: tmp.join("cdi"),
        state: tmp.join("state/dra"),
    }
}

/// `--dra` with the test's directories, then `more`.
fn dra_args(d: &Dirs, more: &[&str]) -> Vec<String> {
    let mut args = vec![
        "--dra".to_string(),
        format!("--dra-registry-dir={}", d.registry.display()),
        format!("--dra-plugins-dir={}", d.plugins.display()),
        format!("--dra-cdi-dir={}", d.cdi.display()),
    ];
    args.extend(more.iter().map(|a| a.to_string()));
    args
}

fn dra_daemon(w: &World, d: &Dirs) -> Daemon {
    let args = dra_args(
        d,
        &[
            "--dra-netdev=dra0,dra1",
            "--dra-resource-name=netdev=example.com/veths",
            "--dra-rescan=0.3",
        ],
    );
    w.daemon_with(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The node's pool as published, once it has a slice: its generation and
/// its devices of the kinds of `want` (names `<kind>-...`). Devices of
/// other kinds are left out: the daemon offers whatever VFs or vDPA
/// devices the machine itself has, which are no part of the test.
fn pool(w: &World, want: &[&str]) -> Option<(i64, Vec<Value>)> {
    let text = w
        .kube
        .api
        .kubectl(&["get", "resourceslices.resource.k8s.io", "-o", "json"]);
    let list: Value = serde_json::from_str(&text).ok()?;
    let slice = list["items"]
        .as_array()?
        .iter()
        // One pool per node, named after it.
        .find(|s| {
            s["spec"]["driver"] == DRIVER
                && s["spec"]["nodeName"] == *w.kube.node
                && s["spec"]["pool"]["name"] == *w.kube.node
        })?;
    let kind = |name: &str| name.split('-').next().unwrap_or_default().to_string();
    let kinds: Vec<String> = want.iter().map(|n| kind(n)).collect();
    let devices = slice["spec"]["devices"]
        .as_array()?
        .iter()
        .filter(|d| kinds.contains(&kind(d["name"].as_str().unwrap_or_default())))
        .cloned()
        .collect();
    Some((slice["spec"]["pool"]["generation"].as_i64()?, devices))
}

/// Wait (at most 20 s) until the pool's devices of `want`'s kinds are
/// `want`: its generation and those devices.
fn pool_is(w: &World, daemon: &Daemon, want: &[&str]) -> (i64, Vec<Value>) {
    let names = |devices: &[Value]| -> Vec<String> {
        devices
            .iter()
            .filter_map(|d| d["name"].as_str().map(String::from))
            .collect()
    };
    let mut last = None;
    daemon.wait_until("the node's pool", Duration::from_secs(20), || {
        last = pool(w, want);
        last.as_ref()
            .is_some_and(|(_, devices)| names(devices) == want)
    });
    last.expect("the pool, as waited for")
}

/// A claim `name` of the test's namespace allocated `devices` for `pod`
/// (name, uid), with `config` as its allocation's configuration; its uid.
fn allocated_claim(
    w: &World,
    name: &str,
    devices: &[Pick],
    pod: (&str, &str),
    config: Value,
) -> String {
    let api = w.kube.api;
    let ns = &w.kube.kube_ns;
    api.apply(&dra::claim(ns, name, "plexus-netdev", devices.len() as u32));
    let mut status = dra::allocated(devices, pod);
    status["allocation"]["devices"]["config"] = config;
    dra::write_status(api, ns, name, &status);
    api.kubectl(&[
        "get",
        "resourceclaims.resource.k8s.io",
        name,
        "-n",
        ns,
        "-o",
        "jsonpath={.metadata.uid}",
    ])
}

/// The opaque configuration of plexus's driver: the NAD `macnet` as `dra1`.
fn network_config(parameters: Value) -> Value {
    json!([{"source": "FromClaim", "requests": ["net"],
            "opaque": {"driver": DRIVER, "parameters": parameters}}])
}

fn macnet() -> Value {
    json!({"apiVersion": "dra.plexus.dev/v1alpha1", "kind": "NetworkConfig",
           "interfaceName": "dra1", "networkAttachment": "macnet"})
}

/// Prepare one claim: its devices' (pool, name, CDI IDs), or its error.
fn prepare_one(
    plugin: &Registered,
    ns: &str,
    name: &str,
    uid: &str,
) -> Result<Vec<(String, String, Vec<String>)>, String> {
    let answers = plugin
        .prepare(&[claim(ns, name, uid)])
        .expect("Prepare answered");
    let answer = &answers[uid];
    if !answer.error.is_empty() {
        return Err(answer.error.clone());
    }
    Ok(answer
        .devices
        .iter()
        .map(|d| {
            (
                d.pool_name.clone(),
                d.device_name.clone(),
                d.cdi_device_ids.clone(),
            )
        })
        .collect())
}

fn files(dir: &std::path::Path) -> Vec<String> {
    plexus_testkit::files::names(dir, |_| true)
}

#[test]
fn the_driver_registers_publishes_prepares_and_unprepares_durably() {
    let Some(w) = world("dradrv") else { return };
    let api = w.kube.api;
    dra::serve(api);
    let node = w.kube.node.clone();
    let ns = w.kube.kube_ns.clone();
    // veths: the host's kernel has no dummy.
    for (dev, peer) in [("dra0", "dra0p"), ("dra1", "dra1p")] {
        ip(
            &node,
            &["link", "add", dev, "type", "veth", "peer", "name", peer],
        );
    }
    let d = dirs(&w);
    let daemon = dra_daemon(&w, &d);

    // kubelet's plugin watcher finds the registration socket.
    let kubelet = KubeletDra {
        registry: d.registry.clone(),
    };
    let plugin = kubelet.register(Duration::from_secs(20)).unwrap();
    assert_eq!(plugin.driver, DRIVER);
    assert_eq!(plugin.endpoint, d.plugins.join("dra.plexus.dev/dra.sock"));
    assert!(
        daemon.log().contains("kubelet registered the DRA driver"),
        "{}",
        daemon.log()
    );

    // The pool: the two netdevs, with the Multus contract's attributes.
    let (generation, devices) = pool_is(&w, &daemon, &["net-dra0", "net-dra1"]);
    let dra0 = &devices[0]["attributes"];
    assert_eq!(
        dra0["k8s.cni.cncf.io/deviceID"],
        json!({"string": "dra0"}),
        "{devices:?}"
    );
    assert_eq!(
        dra0["k8s.cni.cncf.io/resourceName"],
        json!({"string": "example.com/veths"})
    );
    assert_eq!(dra0["dra.net/ifName"], json!({"string": "dra0"}));
    assert_eq!(dra0["dra.plexus.dev/kind"], json!({"string": "netdev"}));

    w.pods(&["p1".into(), "p2".into()], &node, "");
    let (p1, p2) = (w.uid("p1"), w.uid("p2"));
    let on = |device| -> [Pick; 1] { [(DRIVER, node.as_str(), device)] };
    let c1 = allocated_claim(
        &w,
        "c1",
        &on("net-dra0"),
        ("p1", &p1),
        network_config(macnet()),
    );
    let prepared = prepare_one(&plugin, &ns, "c1", &c1).unwrap();
    assert_eq!(
        prepared,
        [(
            node.clone(),
            "net-dra0".to_string(),
            vec![format!("dra.plexus.dev/net={c1}-net-dra0")]
        )]
    );
    let spec: Value = serde_json::from_slice(
        &std::fs::read(d.cdi.join(format!("dra.plexus.dev-{c1}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(spec["kind"], "dra.plexus.dev/net");
    assert_eq!(
        spec["devices"][0]["containerEdits"]["env"],
        json!(["PLEXUS_DEVICE_NET_DRA0=dra0"])
    );
    assert_eq!(files(&d.state), [format!("{c1}.json")]);

    // Bad claims: each refused naming the field; nothing reserved for them.
    let other_pod = ("elsewhere", "0000-not-on-this-node");
    let bad = [
        (
            "b-absent",
            allocated_claim(&w, "b-absent", &on("net-nope"), ("p2", &p2), json!([])),
            "status.allocation.devices.results[0].device: \"net-nope\" is not a device of node",
        ),
        (
            "b-taken",
            allocated_claim(&w, "b-taken", &on("net-dra0"), ("p2", &p2), json!([])),
            "status.allocation.devices.results[0].device: \"net-dra0\" is prepared for claim",
        ),
        (
            "b-pod",
            allocated_claim(&w, "b-pod", &on("net-dra1"), other_pod, json!([])),
            "status.reservedFor: names pods [\"0000-not-on-this-node\"], none of them on node",
        ),
        (
            "b-config",
            allocated_claim(
                &w,
                "b-config",
                &on("net-dra1"),
                ("p2", &p2),
                network_config(
                    json!({"apiVersion": "dra.plexus.dev/v1alpha1", "kind": "NetworkConfig",
                                   "networkAttachment": "macnet", "ifName": "x"}),
                ),
            ),
            "status.allocation.devices.config[0].opaque.parameters.ifName: unknown key",
        ),
    ];
    for (name, uid, want) in &bad {
        let e = prepare_one(&plugin, &ns, name, uid).unwrap_err();
        assert!(
            e.contains(want) && e.contains(&format!("ResourceClaim {ns}/{name}")),
            "{name}: {e}"
        );
    }
    let pool_node = format!("other-{node}");
    let foreign: [Pick; 1] = [(DRIVER, &pool_node, "net-dra1")];
    let uid = allocated_claim(&w, "b-pool", &foreign, ("p2", &p2), json!([]));
    let e = prepare_one(&plugin, &ns, "b-pool", &uid).unwrap_err();
    assert!(
        e.contains("status.allocation.devices.results[0].pool: is \"other-"),
        "{e}"
    );
    // A uid kubelet has that the API server's claim does not: made anew.
    let e = prepare_one(&plugin, &ns, "c1", "00000000-0000-0000-0000-000000000000").unwrap_err();
    assert!(e.contains("metadata.uid: is"), "{e}");
    let e = prepare_one(&plugin, &ns, "c1", "../../etc").unwrap_err();
    assert!(
        e.starts_with("claims[0].uid: \"../../etc\" is no Kubernetes uid"),
        "{e}"
    );
    assert_eq!(
        files(&d.state),
        [format!("{c1}.json")],
        "a failed Prepare reserves nothing"
    );
    assert_eq!(files(&d.cdi), [format!("dra.plexus.dev-{c1}.json")]);

    // A restarted daemon keeps the reservation: kubelet's repeated Prepare
    // gets the same answer, and the device is still c1's.
    drop(daemon);
    let daemon = dra_daemon(&w, &d);
    let plugin = kubelet.register(Duration::from_secs(20)).unwrap();
    assert_eq!(prepare_one(&plugin, &ns, "c1", &c1).unwrap(), prepared);
    let (_, taken, _) = &bad[1];
    let e = prepare_one(&plugin, &ns, "b-taken", taken).unwrap_err();
    assert!(e.contains("is prepared for claim"), "{e}");
    let (again, _) = pool_is(&w, &daemon, &["net-dra0", "net-dra1"]);
    assert_eq!(again, generation, "the same devices: the same generation");

    // A device that goes is unpublished under the next generation.
    ip(&node, &["link", "del", "dra1"]);
    let (next, _) = pool_is(&w, &daemon, &["net-dra0"]);
    assert!(next > generation, "{next} after {generation}");

    // Unprepare frees the device, and again is no error; then the other
    // claim gets it.
    let errors = plugin.unprepare(&[claim(&ns, "c1", &c1)]).unwrap();
    assert_eq!(errors[&c1], "");
    assert_eq!(plugin.unprepare(&[claim(&ns, "c1", &c1)]).unwrap()[&c1], "");
    assert!(files(&d.state).is_empty());
    assert!(files(&d.cdi).is_empty());
    assert!(prepare_one(&plugin, &ns, "b-taken", taken).is_ok());
    assert_eq!(
        plugin.unprepare(&[claim(&ns, "b-taken", taken)]).unwrap()[taken.as_str()],
        ""
    );

    // Stopped, the daemon takes its sockets away.
    let mut daemon = daemon;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(
        daemon.exit_within(Duration::from_secs(10)).success(),
        "{}",
        daemon.log()
    );
    assert!(kubelet.sockets().is_empty());
}

/// The daemon's ADD attaches a device of the pod's claim, prepared by its
/// own driver, on the network the claim's configuration names, with no
/// selection annotation: here a veth of the node by the built-in
/// host-device, on host-local, as `claimed0`. DEL gives it back to the node
/// under its own name; Unprepare then frees it.
#[test]
fn a_claimed_netdev_reaches_its_pod_through_the_daemons_add() {
    let Some(mut w) = world("draadd") else { return };
    let api = w.kube.api;
    dra::serve(api);
    let node = w.kube.node.clone();
    let ns = w.kube.kube_ns.clone();
    ip(
        &node,
        &[
            "link", "add", "dra0", "type", "veth", "peer", "name", "dra0p",
        ],
    );
    let d = dirs(&w);
    let daemon = dra_daemon(&w, &d);
    let plugin = KubeletDra {
        registry: d.registry.clone(),
    }
    .register(Duration::from_secs(20))
    .unwrap();
    pool_is(&w, &daemon, &["net-dra0"]);

    let netns = w.kube.namespaces.add("draadd-p1");
    w.pods(&["p1".into()], &node, "");
    let p1 = w.uid("p1");
    let inline = json!({"cniVersion": "1.0.0", "name": "claimed", "type": "host-device",
                        "ipam": host_local(w.kube.tmp.path(), "10.40.0.0/24", "claimed")});
    let config = network_config(json!({"apiVersion": "dra.plexus.dev/v1alpha1",
        "kind": "NetworkConfig", "interfaceName": "claimed0", "config": inline}));
    let on: [Pick; 1] = [(DRIVER, node.as_str(), "net-dra0")];
    let c1 = allocated_claim(&w, "c1", &on, ("p1", &p1), config);
    prepare_one(&plugin, &ns, "c1", &c1).unwrap();

    // Killed between Prepare and ADD: the restarted daemon has the
    // reservation, and the ADD attaches the claimed device all the same.
    drop(daemon);
    let daemon = dra_daemon(&w, &d);
    let kubelet = KubeletDra {
        registry: d.registry.clone(),
    };
    kubelet.register(Duration::from_secs(20)).unwrap();

    // The ADD reads nothing from the API server: the pod from the watch
    // cache, the claimed device and its network from the driver's
    // reservation; it writes the pod's network-status and the claim's
    // status.
    let before = api.audited().len();
    let out = w.call("ADD", "p1", &netns, &w.conf);
    assert_ok("ADD", &out);
    w.writes_delivered(&daemon);
    assert_eq!(addresses(&netns, "claimed0"), ["10.40.0.2"]);
    assert!(!link_names(&node).contains(&"dra0".to_string()));
    let statuses = w.network_statuses();
    let (_, status) = statuses.iter().find(|(p, _)| p == "p1").unwrap();
    let claimed: Vec<&Value> = status
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["interface"] == "claimed0")
        .collect();
    assert_eq!(claimed.len(), 1, "{status}");
    assert_eq!(claimed[0]["name"], "claimed", "{status}");
    assert_eq!(claimed[0]["ips"], json!(["10.40.0.2"]), "{status}");

    // KEP-4817: the device's entry in the claim's status, Ready, with
    // its network data.
    let mac = ip(&netns, &["-j", "link", "show", "claimed0"]);
    let mac: Value = serde_json::from_str(&mac).unwrap();
    let devices = claim_devices_once(&w, "c1", true);
    assert_eq!(devices.len(), 1, "{devices:?}");
    let entry = &devices[0];
    assert_eq!(
        (
            entry["driver"].as_str(),
            entry["pool"].as_str(),
            entry["device"].as_str()
        ),
        (Some(DRIVER), Some(node.as_str()), Some("net-dra0")),
        "{entry}"
    );
    assert_eq!(entry["conditions"][0]["type"], "Ready", "{entry}");
    assert_eq!(entry["conditions"][0]["status"], "True", "{entry}");
    assert_eq!(
        entry["networkData"],
        json!({"interfaceName": "claimed0", "ips": ["10.40.0.2/24"],
               "hardwareAddress": mac[0]["address"]}),
    );

    let add: Vec<_> = api.audited()[before..]
        .iter()
        .filter(|r| r.stage == "ResponseComplete" && r.namespace == ns)
        .map(|r| (r.verb.clone(), r.resource.clone(), r.subresource.clone()))
        .collect();
    let reads: Vec<_> = add
        .iter()
        .filter(|(verb, ..)| verb == "get" || verb == "list")
        .collect();
    assert!(reads.is_empty(), "the ADD read: {add:?}");

    // Killed between DEL and Unprepare: the restarted daemon frees the
    // device and takes back the claim's status.
    assert_ok("DEL", &w.call("DEL", "p1", &netns, &w.conf));
    assert!(link_names(&node).contains(&"dra0".to_string()));
    drop(daemon);
    let _daemon = dra_daemon(&w, &d);
    let plugin = KubeletDra {
        registry: d.registry.clone(),
    }
    .register(Duration::from_secs(20))
    .unwrap();
    assert_eq!(plugin.unprepare(&[claim(&ns, "c1", &c1)]).unwrap()[&c1], "");
    assert_eq!(claim_devices_once(&w, "c1", false), Vec::<Value>::new());
    assert!(files(&d.state).is_empty());
    assert!(files(&d.cdi).is_empty());
    ip(&node, &["link", "del", "dra0"]);
    w.assert_nothing_left(&[netns]);
}

/// Claim `name`'s `status.devices` now (the ADD writes them before it
/// answers, Unprepare takes them back before it does).
/// The claim's `status.devices` once it has entries (`written`) or none:
/// the daemon writes them behind the ADD, with the pod's network-status
/// (its outbox), and Unprepare takes them back. Waits up to 10 s.
fn claim_devices_once(w: &World, name: &str, written: bool) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let devices = claim_devices(w, name);
        if devices.is_empty() != written || std::time::Instant::now() >= deadline {
            return devices;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn claim_devices(w: &World, name: &str) -> Vec<Value> {
    let text = w.kube.api.kubectl(&[
        "get",
        "resourceclaims.resource.k8s.io",
        name,
        "-n",
        &w.kube.kube_ns,
        "-o",
        "json",
    ]);
    let claim: Value = serde_json::from_str(&text).unwrap();
    claim["status"]["devices"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// In the VM, whose root namespace is the node (the PF and its VFs are
/// there, as the vdpa and sriov driver tests use it): the daemon there,
/// its readiness told by its registration socket (its metrics port is the
/// node's own loopback, which the test's node namespace cannot reach).
fn dra_daemon_on_the_vm(w: &World, d: &Dirs, extra: &[&str]) -> (Daemon, Registered) {
    let cni_dir = format!("--cni-dir={}", w.kube.tmp.path().join("cache").display());
    let mut args = dra_args(d, extra);
    args.push(cni_dir);
    let daemon = w.spawn_daemon(
        None,
        "none",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let kubelet = KubeletDra {
        registry: d.registry.clone(),
    };
    let registered = kubelet.register(Duration::from_secs(120));
    let plugin = registered.unwrap_or_else(|e| panic!("{e}: {}", daemon.log()));
    (daemon, plugin)
}

/// Issue 49's end to end on real VFs (qemu's igb, `Feature::PciSriov`):
/// the node's VFs published with their PCI attributes; two pods, each with
/// a VF claimed through plexus's driver and configured by its claim (the
/// built-in `sriov` on host-local, as `vf0`), ping each other through the
/// PF's switch; each claim's status has the VF's network data; DEL and
/// Unprepare give everything back. Then a VF bound to vfio-pci (DPDK):
/// Prepare's CDI spec hands the container its `/dev/vfio` nodes.
#[test]
fn claimed_vfs_reach_their_pods_with_traffic_and_network_data() {
    if !plexus_testkit::require(&[plexus_testkit::Feature::PciSriov]) {
        return;
    }
    let Some(mut w) = world_beside_devices("dravf") else {
        return;
    };
    let api = w.kube.api;
    dra::serve(api);
    let node = w.kube.node.clone();
    let ns = w.kube.kube_ns.clone();
    let sriov = plexus_testkit::sriov::SriovVfs::create(2);
    let pf = sriov.pf.netdev.clone();
    let d = dirs(&w);
    let resource = format!("--dra-resource-name={pf}=example.com/igb_vfs");
    let (daemon, plugin) = dra_daemon_on_the_vm(&w, &d, &[&resource]);
    let names: Vec<String> = sriov
        .vfs
        .iter()
        .map(|vf| format!("vf-{}", vf.address.replace([':', '.'], "-")))
        .collect();
    let want: Vec<&str> = names.iter().map(String::as_str).collect();
    let (_, devices) = pool_is(&w, &daemon, &want);
    let attributes = &devices[0]["attributes"];
    let vf0 = &sriov.vfs[0];
    for (key, value) in [
        (
            "resource.kubernetes.io/pciBusID",
            json!({"string": vf0.address}),
        ),
        ("dra.plexus.dev/pfName", json!({"string": pf})),
        ("dra.plexus.dev/vfID", json!({"int": vf0.index})),
        ("dra.plexus.dev/vendor", json!({"string": "8086"})),
        ("dra.net/isSriovVf", json!({"bool": true})),
        ("k8s.cni.cncf.io/deviceID", json!({"string": vf0.address})),
        (
            "k8s.cni.cncf.io/resourceName",
            json!({"string": "example.com/igb_vfs"}),
        ),
    ] {
        assert_eq!(attributes[key], value, "{key}: {devices:?}");
    }

    let pods = ["p1", "p2"];
    let netns: Vec<String> = pods
        .iter()
        .map(|p| w.kube.namespaces.add(&format!("dravf-{p}")))
        .collect();
    let pod_names: Vec<String> = pods.iter().map(|p| p.to_string()).collect();
    w.pods(&pod_names, &node, "");
    let data = w.kube.tmp.path().join("sriov-data");
    let mut claims = Vec::new();
    for (i, pod) in pods.iter().enumerate() {
        let uid = w.uid(pod);
        let config = json!({"cniVersion": "1.0.0", "name": "vfnet", "type": "sriov",
            "dataDir": data,
            "ipam": host_local(w.kube.tmp.path(), "10.50.0.0/24", "vfnet")});
        let parameters = json!({"apiVersion": "dra.plexus.dev/v1alpha1", "kind": "NetworkConfig",
                                "interfaceName": "vf0", "config": config});
        let name = format!("{pod}-vf");
        let on: [Pick; 1] = [(DRIVER, node.as_str(), names[i].as_str())];
        let claim_uid = allocated_claim(&w, &name, &on, (pod, &uid), network_config(parameters));
        let prepared = prepare_one(&plugin, &ns, &name, &claim_uid).unwrap();
        assert_eq!(prepared[0].1, names[i]);
        claims.push((name, claim_uid));
    }
    for (pod, netns) in pods.iter().zip(&netns) {
        assert_ok("ADD", &w.call("ADD", pod, netns, &w.conf));
    }
    let ips = ["10.50.0.2", "10.50.0.3"];
    assert_eq!(addresses(&netns[0], "vf0"), [ips[0]]);
    assert_eq!(addresses(&netns[1], "vf0"), [ips[1]]);
    // igb's VFs get carrier once igbvf talked to the PF; the first pings
    // allow for that and for the first ARP under TCG.
    assert!(
        (0..10).any(|_| ping(&netns[0], ips[1])),
        "p1 -> p2: {}",
        daemon.log()
    );
    assert!(ping(&netns[1], ips[0]), "p2 -> p1");
    for (i, (name, _)) in claims.iter().enumerate() {
        let mac: Value =
            serde_json::from_str(&ip(&netns[i], &["-j", "link", "show", "vf0"])).unwrap();
        let devices = claim_devices_once(&w, name, true);
        assert_eq!(devices[0]["device"], names[i], "{devices:?}");
        assert_eq!(
            devices[0]["networkData"],
            json!({"interfaceName": "vf0", "ips": [format!("{}/24", ips[i])],
                   "hardwareAddress": mac[0]["address"]}),
        );
    }

    for (pod, netns) in pods.iter().zip(&netns) {
        assert_ok("DEL", &w.call("DEL", pod, netns, &w.conf));
        assert_eq!(link_names(netns), ["lo"], "{netns}");
    }
    for (name, uid) in &claims {
        assert_eq!(
            plugin.unprepare(&[claim(&ns, name, uid)]).unwrap()[uid.as_str()],
            ""
        );
        assert_eq!(claim_devices_once(&w, name, false), Vec::<Value>::new());
    }
    for vf in &sriov.vfs {
        assert!(vf.netdev().is_some(), "{} is back on the node", vf.address);
    }
    assert!(files(&d.state).is_empty());
    assert!(files(&d.cdi).is_empty());

    // DPDK: the VF on vfio-pci; its claim's CDI spec gives its nodes.
    let bound = plexus_testkit::sriov::VfioBinding::bind(&sriov.vfs[1]);
    let uid = w.uid("p2");
    let on: [Pick; 1] = [(DRIVER, node.as_str(), names[1].as_str())];
    let dpdk = allocated_claim(&w, "dpdk", &on, ("p2", &uid), json!([]));
    let deadline = Instant::now() + Duration::from_secs(20);
    let spec = loop {
        prepare_one(&plugin, &ns, "dpdk", &dpdk).unwrap();
        let path = d.cdi.join(format!("dra.plexus.dev-{dpdk}.json"));
        let spec: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        if spec["devices"][0]["containerEdits"]["deviceNodes"].is_array() {
            break spec;
        }
        // Prepared before the rescan saw the binding: again.
        plugin.unprepare(&[claim(&ns, "dpdk", &dpdk)]).unwrap();
        assert!(Instant::now() < deadline, "{spec}");
        std::thread::sleep(Duration::from_millis(300));
    };
    let nodes = &spec["devices"][0]["containerEdits"]["deviceNodes"];
    let first = nodes[0]["path"].as_str().unwrap();
    assert!(first.starts_with("/dev/vfio/"), "{spec}");
    assert_eq!(nodes[1]["path"], "/dev/vfio/vfio", "{spec}");
    assert_eq!(
        plugin.unprepare(&[claim(&ns, "dpdk", &dpdk)]).unwrap()[dpdk.as_str()],
        ""
    );
    drop(bound);
    assert_nothing_left(w.kube.tmp.path());
}
