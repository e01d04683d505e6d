//! RDMA devices that follow their netdev (issue 50 item 3) against the real
//! kernel: the software RDMA device rdma_rxe (soft-RoCE) and siw (iWARP)
//! over dummy netdevs and igb VFs, in the VM harness (`Feature::SoftRdma`,
//! whose kernel has them; the build hosts' kernels have no RDMA subsystem).
//!
//! What the kernel allows: a device changes namespace only in exclusive mode
//! and only if its driver can disassociate its user contexts
//! (`ib_device_set_netns_put`: EOPNOTSUPP otherwise). rdma_rxe and siw
//! cannot, so no software RDMA device can follow a netdev into a pod; these
//! tests show the kernel's refusal, that plexus reports it naming the device
//! and undoes the ADD, and what shared mode does. Moving a device that can
//! move takes hardware (mlx5).
//!
//! The RDMA subsystem's mode is the kernel's, and can change only while no
//! namespace but the initial one exists: the tests of this binary run one at
//! a time ([`serial`]), each setting the mode it needs, and the node is the
//! VM's initial namespace ([`Here`]), where the RDMA devices are made.
mod common;
mod drivers_support;

use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::TestNs;
use drivers_support::*;
use plexus_cni::error::ErrorCode;
use plexus_dataplane::rdma::{NetnsMode, RdmaNetlink};
use plexus_dataplane::Errno;
use plexus_testkit::{require, Feature};
use serde_json::{json, Value};

/// One test at a time: the mode is the kernel's, and changing it needs
/// every other namespace gone.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn rdma() -> RdmaNetlink {
    RdmaNetlink::open()
        .expect("open NETLINK_RDMA")
        .expect("the kernel has an RDMA subsystem")
}

/// Sets the RDMA subsystem's namespace mode, waiting (up to 30 s) while
/// namespaces of earlier tests are still being torn down (EBUSY).
fn set_mode(mode: NetnsMode) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match rdma().set_netns_mode(mode) {
            Ok(()) => break,
            Err(e) if e.errno() == Some(Errno::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(e) => panic!("set the RDMA namespace mode to {mode}: {e}"),
        }
    }
    assert_eq!(rdma().netns_mode().unwrap(), mode);
}

/// Runs `command` (iproute2's `ip` or `rdma`) in the VM's namespace.
#[track_caller]
fn run(command: &str, args: &[&str]) {
    let out = Command::new(command).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{command} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A dummy netdev `netdev` of the VM's namespace with the software RDMA
/// device `rdma` of `kind` (rxe, siw) over it; both removed on drop.
struct SoftRdma {
    netdev: String,
    rdma: String,
}

impl SoftRdma {
    fn new(netdev: &str, kind: &str, rdma: &str) -> SoftRdma {
        run("ip", &["link", "add", netdev, "type", "dummy"]);
        run("ip", &["link", "set", netdev, "up"]);
        Self::over(netdev, kind, rdma)
    }

    /// Over an existing netdev (a VF's): only the RDMA device is removed.
    fn over(netdev: &str, kind: &str, rdma: &str) -> SoftRdma {
        run(
            "rdma",
            &["link", "add", rdma, "type", kind, "netdev", netdev],
        );
        SoftRdma {
            netdev: netdev.into(),
            rdma: rdma.into(),
        }
    }

    /// Whether the VM's namespace sees the RDMA device.
    fn seen(&self) -> bool {
        rdma().device(&self.rdma).unwrap().is_some()
    }
}

impl Drop for SoftRdma {
    fn drop(&mut self) {
        let _ = Command::new("rdma")
            .args(["link", "delete", &self.rdma])
            .output();
        if self.netdev.starts_with("pxr") {
            let _ = Command::new("ip")
                .args(["link", "del", &self.netdev])
                .output();
        }
    }
}

/// Exclusive mode for one test, shared again after it (the namespaces it
/// made gone first: drop it last).
struct Exclusive;

impl Exclusive {
    fn new() -> Exclusive {
        set_mode(NetnsMode::Exclusive);
        Exclusive
    }
}

impl Drop for Exclusive {
    fn drop(&mut self) {
        set_mode(NetnsMode::Shared);
    }
}

fn runnable() -> bool {
    require(&[Feature::Root, Feature::SoftRdma, Feature::Dummy])
}

/// The VM's netdev `name` as `ip -j link` shows it.
fn node_link(name: &str) -> Option<Value> {
    common::ip_json(&["link", "show"])
        .into_iter()
        .find(|l| l["ifname"] == name)
}

fn ifindex(name: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A host-device configuration handing over `device`, records in `data`.
fn host_device(data: &std::path::Path, device: &str) -> Value {
    json!({"cniVersion": "1.1.0", "name": "hd-rdma", "type": "host-device",
           "dataDir": data, "device": device})
}

#[test]
fn the_kernel_refuses_to_move_software_rdma_devices_in_either_mode() {
    if !runnable() {
        return;
    }
    let _one = serial();
    let rxe = SoftRdma::new("pxr-rxe", "rxe", "pxrxe0");
    let siw = SoftRdma::new("pxr-siw", "siw", "pxsiw0");
    let nl = rdma();
    // Found by the netdev of its port, as the drivers find a RoCE device.
    let of_rxe = nl.device_of_netdev(ifindex("pxr-rxe")).unwrap().unwrap();
    assert_eq!(of_rxe.name, "pxrxe0");
    let of_siw = nl.device_of_netdev(ifindex("pxr-siw")).unwrap().unwrap();
    assert_eq!(of_siw.name, "pxsiw0");

    // Shared mode (the default): nothing moves.
    assert_eq!(nl.netns_mode().unwrap(), NetnsMode::Shared);
    let pod = TestNs::new();
    let e = nl.move_to(&of_rxe, &pod.ns).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EOPNOTSUPP), "{e}");
    drop(pod);

    // Exclusive mode: the software devices cannot disassociate their
    // users (no `disassociate_ucontext`), so the kernel refuses them too.
    let exclusive = Exclusive::new();
    let pod = TestNs::new();
    for device in [&of_rxe, &of_siw] {
        let e = rdma().move_to(device, &pod.ns).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EOPNOTSUPP), "{device}: {e}");
    }
    // Both still in the node, none in the pod (exclusive: the pod sees only
    // its own).
    assert!(rxe.seen() && siw.seen());
    let in_pod = pod.ns.run(|| rdma().devices().unwrap()).unwrap();
    assert_eq!(in_pod, []);
    drop(pod);
    drop(exclusive);
}

#[test]
fn host_device_with_an_rdma_device_in_exclusive_mode_is_refused_and_undone() {
    if !runnable() {
        return;
    }
    let _one = serial();
    let rxe = SoftRdma::new("pxr-hd0", "rxe", "pxrxe1");
    let data = tempfile::tempdir().unwrap();
    let c = host_device(data.path(), "pxr-hd0");
    let r = TestResolver::default();
    let exclusive = Exclusive::new();
    let (pod, t) = new_pod("ctr-rdma");

    let e = add(Here, &r, "host-device", &t, &c).unwrap_err();
    assert_eq!(e.code, ErrorCode::Io, "{e}");
    assert!(
        e.details
            .contains("move RDMA device pxrxe1 of host device pxr-hd0 into the pod"),
        "{e}"
    );
    assert!(e.details.contains("EOPNOTSUPP"), "{e}");
    // Undone: the netdev home under its name and up, its RDMA device with
    // it, nothing in the pod, no record.
    let home = node_link("pxr-hd0").expect("back in the node");
    assert!(has_flag(&home, "UP"), "{home}");
    assert!(rxe.seen());
    assert_eq!(sorted_links(&pod), ["lo"]);
    assert!(std::fs::read_dir(data.path()).unwrap().all(|f| !f
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".json")));
    // DEL of the refused ADD: nothing to do, twice.
    del(Here, &r, "host-device", &t, &c).unwrap();
    del(Here, &r, "host-device", &t, &c).unwrap();
    assert!(rxe.seen());
    drop(pod);
    drop(exclusive);
}

#[test]
fn shared_mode_hands_the_netdev_over_and_moves_no_rdma_device() {
    if !runnable() {
        return;
    }
    let _one = serial();
    set_mode(NetnsMode::Shared);
    let rxe = SoftRdma::new("pxr-hd1", "rxe", "pxrxe2");
    let data = tempfile::tempdir().unwrap();
    let c = host_device(data.path(), "pxr-hd1");
    let r = TestResolver::default();
    let (pod, t) = new_pod("ctr-shared");

    add(Here, &r, "host-device", &t, &c).unwrap();
    assert!(link(&pod, "net1").is_some());
    // Nothing recorded for DEL to move back.
    let record = std::fs::read_to_string(data.path().join("pxr-hd1.json")).unwrap();
    assert!(!record.contains("rdma"), "{record}");
    // rdma_rxe unregisters its device when the netdev leaves its namespace
    // (NETDEV_UNREGISTER), a software device's own limit.
    let deadline = Instant::now() + Duration::from_secs(10);
    while rxe.seen() {
        assert!(
            Instant::now() < deadline,
            "pxrxe2 outlived its netdev's move"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    del(Here, &r, "host-device", &t, &c).unwrap();
    assert!(node_link("pxr-hd1").is_some());
    assert_eq!(sorted_links(&pod), ["lo"]);
}

#[test]
fn a_vf_with_an_rdma_device_in_exclusive_mode_is_refused_and_given_back() {
    if !runnable() || !require(&[Feature::PciSriov]) {
        return;
    }
    let _one = serial();
    let Some((vfs, nl, pf)) = common::vfs_on_pf(1) else {
        return;
    };
    let vf = &vfs.vfs[0];
    let netdev = vf.netdev().expect("igb's VF has a netdev");
    let before = nl.vf_state(pf, vf.index).unwrap().unwrap();
    let rxe = SoftRdma::over(&netdev, "rxe", "pxrxe3");
    let data = tempfile::tempdir().unwrap();
    let c = json!({"cniVersion": "1.1.0", "name": "vf-rdma", "type": "sriov",
                   "deviceID": vf.address, "dataDir": data.path()});
    let r = TestResolver::default();
    let exclusive = Exclusive::new();
    let (pod, t) = new_pod("ctr-vf");

    let e = add(Here, &r, "sriov", &t, &c).unwrap_err();
    assert!(
        e.details.contains(&format!(
            "move RDMA device pxrxe3 of VF {} into the pod",
            vf.address
        )),
        "{e}"
    );
    assert!(e.details.contains("EOPNOTSUPP"), "{e}");
    // Given back: the netdev in the node under its name, the PF's settings
    // as they were, the RDMA device with it, no record.
    assert_eq!(vf.netdev().as_deref(), Some(netdev.as_str()));
    assert_eq!(nl.vf_state(pf, vf.index).unwrap().unwrap(), before);
    assert!(rxe.seen());
    assert_eq!(sorted_links(&pod), ["lo"]);
    assert!(!data.path().join(format!("{}.json", vf.address)).exists());

    // The chained rdma plugin finds a VF's RDMA device as rdma-cni does, in
    // its PCI device's infiniband/ directory: rdma_rxe's is not there.
    let chained = json!({"cniVersion": "1.1.0", "name": "vf-rdma", "type": "rdma",
                         "deviceID": vf.address, "dataDir": data.path(),
                         "prevResult": {"cniVersion": "1.1.0"}});
    let e = add(Here, &r, "rdma", &t, &chained).unwrap_err();
    assert_code(&e, ErrorCode::InvalidConfig, "deviceID");
    assert!(e.details.contains("has no RDMA device"), "{e}");
    drop(pod);
    drop(exclusive);
    drop(rxe);
    drop(vfs);
}

/// The chained `rdma` plugin's refusals, on any kernel (root for the
/// namespaces): each names its key.
#[test]
fn the_chained_rdma_plugin_refuses_what_it_cannot_act_on() {
    if !require(&[Feature::Root]) {
        return;
    }
    let _one = serial();
    let node = TestNs::new();
    let data = tempfile::tempdir().unwrap();
    let r = TestResolver::default();
    let (_pod, t) = new_pod("ctr-chained");
    let conf = |extra: Value| {
        let base = json!({"cniVersion": "1.1.0", "name": "rdma-net", "type": "rdma",
                          "dataDir": data.path(), "prevResult": {"cniVersion": "1.1.0"}});
        with_keys(base, &extra)
    };
    let mut no_prev = conf(json!({"deviceID": "0000:00:01.0"}));
    no_prev.as_object_mut().unwrap().remove("prevResult");
    let e = add(&node, &r, "rdma", &t, &no_prev).unwrap_err();
    assert_code(&e, ErrorCode::InvalidConfig, "prevResult");
    let e = add(&node, &r, "rdma", &t, &conf(json!({}))).unwrap_err();
    assert_code(&e, ErrorCode::InvalidConfig, "deviceID");
    assert!(e.details.contains("missing"), "{e}");
    for bad in ["..", "../../devices", "a/b"] {
        let e = validate("rdma", &t, &conf(json!({ "deviceID": bad }))).unwrap_err();
        assert_code(&e, ErrorCode::InvalidConfig, "deviceID");
    }
    let e = validate("rdma", &t, &conf(json!({"deviceID": 7}))).unwrap_err();
    assert_code(&e, ErrorCode::InvalidConfig, "deviceID");
    let e = add(
        &node,
        &r,
        "rdma",
        &t,
        &conf(json!({"deviceID": "0000:7f:1f.7"})),
    )
    .unwrap_err();
    assert_code(&e, ErrorCode::InvalidConfig, "deviceID");
    assert!(
        e.details.contains("not found under /sys/bus/pci/devices"),
        "{e}"
    );
    // runtimeConfig.deviceID when deviceID is not there.
    let e = add(
        &node,
        &r,
        "rdma",
        &t,
        &conf(json!({"runtimeConfig": {"deviceID": "0000:7f:1f.7"}})),
    )
    .unwrap_err();
    assert_code(&e, ErrorCode::InvalidConfig, "runtimeConfig.deviceID");
    // DEL without anything recorded: nothing, and again.
    del(
        &node,
        &r,
        "rdma",
        &t,
        &conf(json!({"deviceID": "0000:7f:1f.7"})),
    )
    .unwrap();
    del(&node, &r, "rdma", &t, &conf(json!({}))).unwrap();
}

/// rdma-cni itself (`.ci/rdma-cni`), exec'd in the VM's namespace as a
/// runtime execs it, for `command` of container `t` with `config`: `Ok`
/// with what it printed on exit code 0, `Err` with its error otherwise.
fn rdma_cni(command: &str, t: &Target, netns: &str, config: &Value) -> Result<Value, Value> {
    let bin = plexus_testkit::peers::rdma_cni().expect("Feature::RdmaCni");
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", t.container_id.as_str())
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", "net1")
        .env("CNI_PATH", "/nonexistent");
    let out = plexus_testkit::process::output_with_stdin(&mut cmd, &config.to_string());
    let text = String::from_utf8_lossy(&out.stdout);
    let printed = serde_json::from_str(&text).unwrap_or(Value::Null);
    if out.status.success() {
        Ok(printed)
    } else {
        Err(printed)
    }
}

/// rdma-cni and the built-in `rdma` on the same configurations and the
/// same VF with an rdma_rxe device, in both modes: what one refuses the
/// other refuses, what one lets pass the other does, and neither changes
/// anything. No software device lets either finish an ADD (rdma-cni finds
/// a VF's RDMA device only in its PCI device's `infiniband/`, where
/// rdma_rxe's is not; plexus likewise), so the results compared are the
/// refusals, DEL and CHECK.
#[test]
fn side_by_side_with_rdma_cni_on_the_same_configurations() {
    if !runnable() || !require(&[Feature::PciSriov, Feature::RdmaCni]) {
        return;
    }
    let _one = serial();
    let Some((vfs, _nl, _pf)) = common::vfs_on_pf(1) else {
        return;
    };
    let vf = &vfs.vfs[0];
    let netdev = vf.netdev().expect("igb's VF has a netdev");
    let rxe = SoftRdma::over(&netdev, "rxe", "pxrxe4");
    let data = tempfile::tempdir().unwrap();
    let r = TestResolver::default();
    let mut seen = Vec::new();
    // The mode first: it changes only while no other namespace exists.
    for mode in [NetnsMode::Shared, NetnsMode::Exclusive] {
        set_mode(mode);
        let (pod, t) = new_pod("ctr-peer");
        let netns = netns_path(&pod).display().to_string();
        let prev = json!({"cniVersion": "1.0.0",
                          "interfaces": [{"name": "net1", "sandbox": netns}], "ips": []});
        // rdma-cni's examples/rdma_net_crd.yaml, as Multus hands it over
        // with the VF's deviceID, plus plexus's dataDir (rdma-cni ignores it).
        let chained = json!({"cniVersion": "1.0.0", "name": "rdma-net", "type": "rdma",
                             "deviceID": vf.address, "dataDir": data.path(),
                             "prevResult": prev});
        let without = |key: &str| {
            let mut c = chained.clone();
            c.as_object_mut().unwrap().remove(key);
            c
        };
        let cases = [
            ("ADD", "ADD", chained.clone()),
            ("ADD without prevResult", "ADD", without("prevResult")),
            ("ADD without deviceID", "ADD", without("deviceID")),
            ("CHECK", "CHECK", chained.clone()),
            ("DEL", "DEL", chained.clone()),
            ("DEL again", "DEL", chained.clone()),
        ];
        for (case, command, config) in cases {
            let peer = rdma_cni(command, &t, &netns, &config);
            let ours = match command {
                "ADD" => add(Here, &r, "rdma", &t, &config).map(drop),
                "DEL" => del(Here, &r, "rdma", &t, &config),
                _ => check(Here, &r, "rdma", &t, &config),
            };
            assert_eq!(
                peer.is_ok(),
                ours.is_ok(),
                "{mode}, {case}: rdma-cni {peer:?}, plexus {ours:?}"
            );
            // Neither changed anything.
            assert_eq!(vf.netdev().as_deref(), Some(netdev.as_str()));
            assert!(rxe.seen());
            assert_eq!(sorted_links(&pod), ["lo"]);
            seen.push(format!(
                "{mode}, {case}: rdma-cni {peer:?}; plexus {ours:?}"
            ));
        }
    }
    eprintln!("{}", seen.join("\n"));
    set_mode(NetnsMode::Shared);
    drop(rxe);
    drop(vfs);
}
