//! RDMA devices that follow their netdev (issue 50 item 3) against the real
//! kernel: the software RDMA devices rdma_rxe (soft-RoCE) and siw (iWARP)
//! over dummy netdevs and igb VFs, in the VM harness (`Feature::SoftRdma`,
//! whose kernel has them; the build hosts' kernels have no RDMA subsystem).
//!
//! What the kernel allows: a device changes namespace only in exclusive mode
//! and only if its driver can disassociate its user contexts
//! (`ib_device_set_netns_put`: EOPNOTSUPP otherwise). The stock software
//! drivers cannot: siw, as the kernel ships it, shows the refusal, that
//! plexus reports it naming the device, and undoes the ADD.
//!
//! A NIC whose RDMA function can change namespace (mlx5) cannot exist in the
//! VM. Its stand-in is rdma_rxe with vm-tests/kernel-patches/
//! rxe-netns-stand-in.patch: it can disassociate, sits under its netdev's
//! bus device (`<PCI device>/infiniband/<name>`, where rdma-cni looks), and
//! outlives its netdev's namespace moves, as a NIC's RDMA device does. The
//! namespace moves themselves, exclusive mode and a dying namespace giving
//! its devices back are the stock kernel's. [`Feature::RdmaNetnsStandIn`]
//! tells the patched kernel.
//!
//! The RDMA subsystem's mode is the kernel's, and can change only while no
//! namespace but the initial one exists: the tests of this binary run one at
//! a time ([`serial`]), each setting the mode it needs, and the node is the
//! VM's initial namespace ([`Here`]), where the RDMA devices are made.
#[path = "common/chained.rs"]
mod chained;
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

/// The RDMA devices the pod's namespace sees, by name.
fn pod_rdma(pod: &TestNs) -> Vec<String> {
    pod.ns
        .run(|| rdma().devices().unwrap())
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect()
}

/// Waits (up to 10 s) until the node sees `device` again: a namespace
/// that died gives its RDMA devices back from the kernel's cleanup work.
#[track_caller]
fn wait_home(device: &SoftRdma) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !device.seen() {
        assert!(
            Instant::now() < deadline,
            "{} did not come back to the node",
            device.rdma
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn stand_in() -> bool {
    require(&[Feature::RdmaNetnsStandIn])
}

/// The record files a driver's `dataDir` holds.
fn records(data: &std::path::Path) -> Vec<String> {
    plexus_testkit::files::names(data, |n| n.ends_with(".json"))
}

#[test]
fn the_kernel_moves_only_devices_that_can_disassociate_and_only_in_exclusive_mode() {
    if !runnable() || !stand_in() {
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

    // Shared mode (the default): nothing moves, whatever its driver.
    assert_eq!(nl.netns_mode().unwrap(), NetnsMode::Shared);
    let pod = TestNs::new();
    for device in [&of_rxe, &of_siw] {
        let e = nl.move_to(device, &pod.ns).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EOPNOTSUPP), "{device}: {e}");
    }
    drop(pod);

    // Exclusive mode: the stock siw cannot disassociate its users (no
    // `disassociate_ucontext`), so the kernel refuses it still.
    let exclusive = Exclusive::new();
    let pod = TestNs::new();
    let e = rdma().move_to(&of_siw, &pod.ns).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EOPNOTSUPP), "{of_siw}: {e}");
    assert!(siw.seen());
    assert_eq!(pod_rdma(&pod), Vec::<String>::new());
    // The stand-in moves: the pod sees it and the node does not
    // (exclusive: each namespace sees only its own).
    rdma().move_to(&of_rxe, &pod.ns).unwrap();
    assert_eq!(pod_rdma(&pod), ["pxrxe0"]);
    assert!(!rxe.seen());
    // A namespace that dies gives its devices back to the node.
    drop(pod);
    wait_home(&rxe);
    drop(exclusive);
}

#[test]
fn host_device_with_an_rdma_device_that_cannot_move_is_refused_and_undone() {
    if !runnable() {
        return;
    }
    let _one = serial();
    let siw = SoftRdma::new("pxr-hd0", "siw", "pxsiw1");
    let data = tempfile::tempdir().unwrap();
    let c = host_device(data.path(), "pxr-hd0");
    let r = TestResolver::default();
    let exclusive = Exclusive::new();
    let (pod, t) = new_pod("ctr-rdma");

    let e = add(Here, &r, "host-device", &t, &c).unwrap_err();
    assert_eq!(e.code, ErrorCode::Io, "{e}");
    assert!(
        e.details
            .contains("move RDMA device pxsiw1 of host device pxr-hd0 into the pod"),
        "{e}"
    );
    assert!(e.details.contains("EOPNOTSUPP"), "{e}");
    // Undone: the netdev home under its name and up, its RDMA device with
    // it, nothing in the pod, no record.
    let home = node_link("pxr-hd0").expect("back in the node");
    assert!(has_flag(&home, "UP"), "{home}");
    assert!(siw.seen());
    assert_eq!(sorted_links(&pod), ["lo"]);
    assert_eq!(records(data.path()), Vec::<String>::new());
    // DEL of the refused ADD: nothing to do, twice.
    del(Here, &r, "host-device", &t, &c).unwrap();
    del(Here, &r, "host-device", &t, &c).unwrap();
    assert!(siw.seen());
    drop(pod);
    drop(exclusive);
}

/// Exclusive mode: the host device and its RDMA device go into the pod
/// together and come back together at DEL; a failed ADD puts both back.
#[test]
fn host_device_takes_its_rdma_device_into_the_pod_and_back() {
    if !runnable() || !stand_in() {
        return;
    }
    let _one = serial();
    let rxe = SoftRdma::new("pxr-hd2", "rxe", "pxrxe5");
    let data = tempfile::tempdir().unwrap();
    let mut c = host_device(data.path(), "pxr-hd2");
    c["ipam"] = ipam("10.78.0.2/24");
    let r = TestResolver::default();
    let exclusive = Exclusive::new();
    let (pod, t) = new_pod("ctr-hd-rdma");

    // IPAM fails after both moved: both come back.
    let mut failing = c.clone();
    failing["ipam"]["fail"] = json!("ADD");
    let e = add(Here, &r, "host-device", &t, &failing).unwrap_err();
    assert_code(&e, ErrorCode::TryAgainLater, "ipam.fail");
    assert!(e.undone, "{e:?}");
    assert!(node_link("pxr-hd2").is_some());
    assert!(rxe.seen(), "the RDMA device back in the node");
    assert_eq!(pod_rdma(&pod), Vec::<String>::new());
    assert_eq!(records(data.path()), Vec::<String>::new());

    add(Here, &r, "host-device", &t, &c).unwrap();
    assert!(link(&pod, "net1").is_some());
    assert_eq!(pod_rdma(&pod), ["pxrxe5"]);
    assert!(!rxe.seen());
    let record = std::fs::read_to_string(data.path().join("pxr-hd2.json")).unwrap();
    let record: Value = serde_json::from_str(&record).unwrap();
    assert_eq!(record["rdma"], "pxrxe5", "{record}");

    del(Here, &r, "host-device", &t, &c).unwrap();
    assert!(node_link("pxr-hd2").is_some());
    assert!(rxe.seen());
    assert_eq!(pod_rdma(&pod), Vec::<String>::new());
    assert_eq!(sorted_links(&pod), ["lo"]);
    assert_eq!(records(data.path()), Vec::<String>::new());
    del(Here, &r, "host-device", &t, &c).unwrap();
    assert!(rxe.seen());
    drop(pod);
    drop(exclusive);
}

#[test]
fn shared_mode_hands_the_netdev_over_and_moves_no_rdma_device() {
    if !runnable() || !stand_in() {
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
    // Nothing recorded for DEL to move back; the device stays in the node,
    // and every namespace sees it (shared mode).
    let record = std::fs::read_to_string(data.path().join("pxr-hd1.json")).unwrap();
    assert!(!record.contains("rdma"), "{record}");
    assert!(rxe.seen());
    assert_eq!(pod_rdma(&pod), ["pxrxe2"]);
    del(Here, &r, "host-device", &t, &c).unwrap();
    assert!(node_link("pxr-hd1").is_some());
    assert!(rxe.seen());
    assert_eq!(sorted_links(&pod), ["lo"]);
}

/// The "Done when": a VF with its RDMA device reaches a pod and
/// comes back at DEL; a failed ADD gives both back; a pod whose namespace
/// went without DEL gets both back from the kernel and the DEL after.
#[test]
fn a_vf_with_its_rdma_device_reaches_the_pod_and_comes_back_at_del() {
    if !runnable() || !stand_in() || !require(&[Feature::PciSriov]) {
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
    assert!(
        std::path::Path::new(&format!(
            "/sys/bus/pci/devices/{}/infiniband/pxrxe3",
            vf.address
        ))
        .exists(),
        "the stand-in sits under its VF's PCI device"
    );
    let data = tempfile::tempdir().unwrap();
    let (_info_dir, info_file) = device_info_file();
    let c = json!({"cniVersion": "1.1.0", "name": "vf-rdma", "type": "sriov",
                   "deviceID": vf.address, "dataDir": data.path(),
                   "ipam": ipam("10.79.0.2/24"),
                   "runtimeConfig": {"CNIDeviceInfoFile": info_file}});
    let r = TestResolver::default();
    let exclusive = Exclusive::new();
    let given_back = |what: &str| {
        assert_eq!(vf.netdev().as_deref(), Some(netdev.as_str()), "{what}");
        assert_eq!(
            nl.vf_state(pf, vf.index).unwrap().unwrap(),
            before,
            "{what}"
        );
        assert!(rxe.seen(), "{what}: the RDMA device in the node");
        assert_eq!(records(data.path()), Vec::<String>::new(), "{what}");
    };

    // A failed ADD (IPAM, after both moved) gives both back.
    let (pod, t) = new_pod("ctr-vf");
    let mut failing = c.clone();
    failing["ipam"]["fail"] = json!("ADD");
    let e = add(Here, &r, "sriov", &t, &failing).unwrap_err();
    assert!(e.undone, "{e:?}");
    given_back("failed ADD");
    assert_eq!(sorted_links(&pod), ["lo"]);
    assert_eq!(pod_rdma(&pod), Vec::<String>::new());

    // ADD: the VF's netdev and its RDMA device in the pod, named in the
    // device-info (device-info-SPEC §3.1.3.3 "rdma-device").
    add(Here, &r, "sriov", &t, &c).unwrap();
    assert!(link(&pod, "net1").is_some());
    assert_eq!(pod_rdma(&pod), ["pxrxe3"]);
    assert!(!rxe.seen());
    let info: Value = serde_json::from_slice(&std::fs::read(&info_file).unwrap()).unwrap();
    assert_eq!(info["pci"]["rdma-device"], "pxrxe3", "{info}");
    assert_eq!(info["pci"]["pci-address"], vf.address.as_str(), "{info}");
    // DEL: both back; again: nothing.
    del(Here, &r, "sriov", &t, &c).unwrap();
    given_back("DEL");
    assert_eq!(sorted_links(&pod), ["lo"]);
    del(Here, &r, "sriov", &t, &c).unwrap();
    given_back("DEL again");

    // An InfiniBand VF's rebind at ADD names its RDMA device anew after the
    // record was written (mlx5_3 becomes mlx5_7): DEL finds it on the VF's
    // netdev in the pod. The rename in the pod plays the rebind's.
    add(Here, &r, "sriov", &t, &c).unwrap();
    let renamed = pod
        .ns
        .run(|| {
            Command::new("rdma")
                .args(["dev", "set", "pxrxe3", "name", "pxrxe7"])
                .status()
        })
        .unwrap()
        .unwrap();
    assert!(renamed.success());
    assert_eq!(pod_rdma(&pod), ["pxrxe7"]);
    del(Here, &r, "sriov", &t, &c).unwrap();
    assert!(
        rdma().device("pxrxe7").unwrap().is_some(),
        "the renamed device back in the node"
    );
    run("rdma", &["dev", "set", "pxrxe7", "name", "pxrxe3"]);
    given_back("DEL of a device renamed in the pod");

    // The pod's namespace goes without DEL: the kernel gives the netdev
    // (named as in the pod) and the RDMA device back; the DEL after
    // restores the rest.
    add(Here, &r, "sriov", &t, &c).unwrap();
    assert_eq!(pod_rdma(&pod), ["pxrxe3"]);
    drop(pod);
    wait_home(&rxe);
    del(Here, &r, "sriov", &t, &c).unwrap();
    given_back("DEL after the namespace went");
    drop(exclusive);
    drop(rxe);
    drop(vfs);
}

/// rdma-cni's own chain (its examples/rdma_net_crd.yaml, plexus's
/// deploy/examples/rdma.yaml): `sriov` then `rdma`. In exclusive mode
/// plexus's `sriov` moves the RDMA device with the netdev; the chained
/// `rdma` finds it in the pod on the prevResult's interface and leaves it
/// to `sriov`, whose DEL brings it back.
#[test]
fn the_sriov_then_rdma_chain_in_exclusive_mode() {
    if !runnable() || !stand_in() || !require(&[Feature::PciSriov]) {
        return;
    }
    let _one = serial();
    let Some((vfs, _nl, _pf)) = common::vfs_on_pf(1) else {
        return;
    };
    let vf = &vfs.vfs[0];
    let netdev = vf.netdev().expect("igb's VF has a netdev");
    let rxe = SoftRdma::over(&netdev, "rxe", "pxrxe6");
    let data = tempfile::tempdir().unwrap();
    let sriov = json!({"cniVersion": "1.0.0", "name": "sriov-rdma", "type": "sriov",
                       "deviceID": vf.address, "dataDir": data.path().join("sriov"),
                       "ipam": ipam("10.80.0.2/24")});
    let chained = |prev: &Value| {
        json!({"cniVersion": "1.0.0", "name": "sriov-rdma", "type": "rdma",
               "deviceID": vf.address, "dataDir": data.path().join("rdma"),
               "prevResult": prev})
    };
    let r = TestResolver::default();
    let exclusive = Exclusive::new();
    let (pod, t) = new_pod("ctr-chain");

    let first = result_json(&add(Here, &r, "sriov", &t, &sriov).unwrap(), "1.0.0");
    let second = add(Here, &r, "rdma", &t, &chained(&first)).unwrap();
    assert_eq!(result_json(&second, "1.0.0"), first, "returned unchanged");
    assert_eq!(pod_rdma(&pod), ["pxrxe6"]);
    check(Here, &r, "rdma", &t, &chained(&first)).unwrap();
    // DEL in the chain's reverse order: rdma's holds nothing, sriov's
    // brings both back.
    del(Here, &r, "rdma", &t, &chained(&first)).unwrap();
    assert_eq!(pod_rdma(&pod), ["pxrxe6"]);
    del(Here, &r, "sriov", &t, &sriov).unwrap();
    assert!(rxe.seen());
    assert_eq!(vf.netdev().as_deref(), Some(netdev.as_str()));
    assert_eq!(pod_rdma(&pod), Vec::<String>::new());
    drop(pod);
    drop(exclusive);
    drop(rxe);
    drop(vfs);
}

#[test]
fn a_vf_with_an_rdma_device_that_cannot_move_is_refused_and_given_back() {
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
    let siw = SoftRdma::over(&netdev, "siw", "pxsiw3");
    let data = tempfile::tempdir().unwrap();
    let c = json!({"cniVersion": "1.1.0", "name": "vf-rdma", "type": "sriov",
                   "deviceID": vf.address, "dataDir": data.path()});
    let r = TestResolver::default();
    let exclusive = Exclusive::new();
    let (pod, t) = new_pod("ctr-vf");

    let e = add(Here, &r, "sriov", &t, &c).unwrap_err();
    assert!(
        e.details.contains(&format!(
            "move RDMA device pxsiw3 of VF {} into the pod",
            vf.address
        )),
        "{e}"
    );
    assert!(e.details.contains("EOPNOTSUPP"), "{e}");
    // Given back: the netdev in the node under its name, the PF's settings
    // as they were, the RDMA device with it, no record.
    assert_eq!(vf.netdev().as_deref(), Some(netdev.as_str()));
    assert_eq!(nl.vf_state(pf, vf.index).unwrap().unwrap(), before);
    assert!(siw.seen());
    assert_eq!(sorted_links(&pod), ["lo"]);
    assert!(!data.path().join(format!("{}.json", vf.address)).exists());

    // The chained rdma plugin finds a VF's RDMA device as rdma-cni does, in
    // its PCI device's infiniband/ directory: the stock siw's is not there.
    let chained = json!({"cniVersion": "1.1.0", "name": "vf-rdma", "type": "rdma",
                         "deviceID": vf.address, "dataDir": data.path(),
                         "prevResult": {"cniVersion": "1.1.0"}});
    let e = add(Here, &r, "rdma", &t, &chained).unwrap_err();
    assert_code(&e, ErrorCode::InvalidConfig, "deviceID");
    assert!(e.details.contains("has no RDMA device"), "{e}");
    drop(pod);
    drop(exclusive);
    drop(siw);
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
/// Its state cache is `/var/lib/cni/rdma`, which the VM's read-only root
/// cannot hold: it runs in a mount namespace of its own where `state` is
/// mounted there.
fn rdma_cni(
    command: &str,
    t: &Target,
    netns: &str,
    config: &Value,
    state: &std::path::Path,
) -> Result<Value, Value> {
    let bin = plexus_testkit::peers::rdma_cni().expect("Feature::RdmaCni");
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            "mount -t tmpfs none /var/lib && mkdir -p /var/lib/cni/rdma && \
             mount --bind \"$0\" /var/lib/cni/rdma && exec \"$1\"",
        )
        .arg(state)
        .arg(bin)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", t.container_id.as_str())
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", "net1")
        .env("CNI_PATH", "/nonexistent");
    let out = plexus_testkit::process::output_with_stdin(&mut cmd, &config.to_string());
    let text = String::from_utf8_lossy(&out.stdout);
    let printed = serde_json::from_str(&text).unwrap_or_else(
        |_| json!({"stdout": text, "stderr": String::from_utf8_lossy(&out.stderr)}),
    );
    if out.status.success() {
        Ok(printed)
    } else {
        Err(printed)
    }
}

/// rdma-cni and the built-in `rdma` on the same configurations and the
/// same VF, whose RDMA device is the stand-in (under the VF's PCI device,
/// where rdma-cni looks), in both modes.
///
/// Exclusive mode: both move the device into the pod at ADD and print the
/// same result (the prevResult), and both move it back at DEL. Refusals
/// agree. Shared mode is the one documented difference: rdma-cni refuses
/// the ADD (its `ensureRdmaSystemMode`), plexus lets it pass moving nothing
/// (issue 50: "in shared mode it does nothing and says so once").
#[test]
fn side_by_side_with_rdma_cni_on_the_same_configurations() {
    if !runnable() || !stand_in() || !require(&[Feature::PciSriov, Feature::RdmaCni]) {
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
    let state = tempfile::tempdir().unwrap();
    let r = TestResolver::default();
    let mut seen = Vec::new();
    // The mode first: it changes only while no other namespace exists.
    for mode in [NetnsMode::Shared, NetnsMode::Exclusive] {
        set_mode(mode);
        let (pod, t) = new_pod("ctr-peer");
        let netns = netns_path(&pod).display().to_string();
        let prev = json!({"cniVersion": "1.0.0",
                          "interfaces": [{"name": "net1", "sandbox": netns}]});
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
        // Each contender's whole life of one attachment, one after the
        // other (one device): what it answered and where the device was.
        let peer = |command: &str, config: &Value| {
            rdma_cni(command, &t, &netns, config, state.path()).map(chained::normalised)
        };
        let ours = |command: &str, config: &Value| -> Result<Value, Value> {
            let done = match command {
                "ADD" => add(Here, &r, "rdma", &t, config).map(|res| result_json(&res, "1.0.0")),
                "DEL" => del(Here, &r, "rdma", &t, config).map(|()| Value::Null),
                _ => check(Here, &r, "rdma", &t, config).map(|()| Value::Null),
            };
            done.map(chained::normalised)
                .map_err(|e| json!(e.to_string()))
        };
        let shared = mode == NetnsMode::Shared;
        // Where the device is: moved into the pod, or the node's (which in
        // shared mode every namespace sees).
        let in_pod = |moved: bool, what: &str| {
            let pod_sees = moved || shared;
            let expected: &[&str] = if pod_sees { &["pxrxe4"] } else { &[] };
            assert_eq!(pod_rdma(&pod), expected, "{mode}, {what}");
            assert_eq!(rxe.seen(), !moved, "{mode}, {what}");
            assert_eq!(
                vf.netdev().as_deref(),
                Some(netdev.as_str()),
                "{mode}, {what}"
            );
        };
        let moves = !shared;
        let mut answers = Vec::new();
        for (who, run) in [
            (
                "rdma-cni",
                &peer as &dyn Fn(&str, &Value) -> Result<Value, Value>,
            ),
            ("plexus", &ours),
        ] {
            let refusals = [
                run("ADD", &without("prevResult")).is_err(),
                run("ADD", &without("deviceID")).is_err(),
            ];
            in_pod(false, &format!("{who}: refused ADDs"));
            let added = run("ADD", &chained);
            in_pod(moves && added.is_ok(), &format!("{who}: ADD"));
            let checked = run("CHECK", &chained).is_ok();
            let deleted = [run("DEL", &chained).is_ok(), run("DEL", &chained).is_ok()];
            in_pod(false, &format!("{who}: DEL"));
            seen.push(format!("{mode}, {who}: ADD {added:?}"));
            answers.push((refusals, added, checked, deleted));
        }
        let (peer_answers, our_answers) = (&answers[0], &answers[1]);
        assert_eq!(peer_answers.0, [true, true], "{mode}: rdma-cni's refusals");
        assert_eq!(our_answers.0, [true, true], "{mode}: plexus's refusals");
        assert!(peer_answers.2 && our_answers.2, "{mode}: CHECK");
        assert_eq!(peer_answers.3, [true, true], "{mode}: rdma-cni's DELs");
        assert_eq!(our_answers.3, [true, true], "{mode}: plexus's DELs");
        if moves {
            let (peer, ours) = (peer_answers.1.as_ref(), our_answers.1.as_ref());
            assert_eq!(peer.ok(), ours.ok(), "{mode}: the same result");
            assert_eq!(ours.unwrap(), &chained::normalised(prev.clone()));
        } else {
            let e = peer_answers.1.as_ref().unwrap_err();
            assert!(e.to_string().contains("shared"), "{e}");
            assert_eq!(
                our_answers.1.as_ref().unwrap(),
                &chained::normalised(prev.clone())
            );
        }
        drop(pod);
    }
    eprintln!("{}", seen.join("\n"));
    set_mode(NetnsMode::Shared);
    drop(rxe);
    drop(vfs);
}
