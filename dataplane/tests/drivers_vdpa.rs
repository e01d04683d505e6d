//! The built-in `vdpa` driver on real kernel objects: `vdpa_sim_net`
//! devices (`Feature::VdpaSim`, which only the VM harness's kernel has),
//! created through the driver's own `vdpa` generic-netlink client and bound
//! to `virtio_vdpa` (a virtio-net netdev) or `vhost_vdpa`
//! (`/dev/vhost-vdpa-N`). The vdpa family answers only in the initial
//! network namespace, the VM's, which is the test's own: the driver is
//! called with it as the host ([`Here`]), on pods in namespaces the tests
//! create. Records go to a temp `dataDir`. vdpa_sim devices have no PCI
//! parent: the lookup by PCI address is tested on a fake sysfs tree
//! (`plexus_dataplane::vdpa` unit tests); here only its refusal.
mod common;
use common::ifname;
mod drivers_support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::TestNs;
use drivers_support::*;
use plexus_cni::deviceinfo::{self, VdpaDriver};
use plexus_cni::error::ErrorCode;
use plexus_cni::result::CniResult;
use plexus_dataplane::pci::SysfsRoot;
use plexus_dataplane::vdpa::{VdpaDevSpec, VdpaNetlink, VHOST_VDPA, VIRTIO_VDPA};
use plexus_dataplane::{MacAddr, Netlink};
use plexus_testkit::{require, Feature};
use serde_json::{json, Value};

const VDPA: &str = "vdpa";
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A vdpa_sim_net device, deleted on drop.
struct SimDev {
    name: String,
    mac: MacAddr,
}

fn write(path: impl AsRef<Path>, value: &str) {
    let path = path.as_ref();
    std::fs::write(path, value).unwrap_or_else(|e| panic!("write {value} to {path:?}: {e}"));
}

impl SimDev {
    /// A new device (bound to virtio_vdpa, which binds first), or `None`
    /// when the test is skipped.
    fn new() -> Option<SimDev> {
        if !require(&[Feature::Root, Feature::VdpaSim]) {
            return None;
        }
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("pxv{}x{n}", std::process::id() % 100_000);
        let mac: MacAddr = format!(
            "02:00:00:5a:{:02x}:{:02x}",
            n % 256,
            std::process::id() % 256
        )
        .parse()
        .unwrap();
        let nl = VdpaNetlink::open().unwrap().expect("the vdpa family");
        nl.add_device(&VdpaDevSpec {
            name: name.clone(),
            mgmt_bus: None,
            mgmt_dev: "vdpasim_net".into(),
            mac: Some(mac),
            mtu: Some(1500),
        })
        .unwrap();
        let dev = SimDev { name, mac };
        assert_eq!(
            nl.device(&dev.name).unwrap().unwrap().mgmt_dev,
            "vdpasim_net"
        );
        Some(dev)
    }

    fn sysfs(&self) -> plexus_dataplane::vdpa::VdpaSysfsDevice {
        SysfsRoot::default()
            .vdpa_device(&self.name)
            .unwrap()
            .expect("in sysfs")
    }

    /// Its netdev in the host (the VM's namespace), waiting a little for
    /// the kernel.
    fn host_netdev(&self) -> Option<String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let dev = self.sysfs();
            if let Some(n) = dev.netdevs.first() {
                return Some(n.to_string());
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its netdev, renamed to the device's own name: the kernel's `ethN`
    /// is free while the netdev is in a pod, and a device another test
    /// makes meanwhile may take it, so DEL could not name it back.
    fn own_netdev(&self) -> String {
        let netdev = self.host_netdev().expect("a virtio netdev");
        let nl = Netlink::current().unwrap();
        let link = nl
            .link_by_name(&ifname(&netdev))
            .unwrap()
            .expect("in the host");
        nl.rename(link.index, &ifname(&self.name)).unwrap();
        self.name.clone()
    }

    fn unbind(&self) {
        if let Some(driver) = self.sysfs().driver {
            write(format!("/sys/bus/vdpa/drivers/{driver}/unbind"), &self.name);
        }
    }

    fn bind(&self, driver: &str) {
        self.unbind();
        write(
            format!("/sys/bus/vdpa/devices/{}/driver_override", self.name),
            driver,
        );
        write("/sys/bus/vdpa/drivers_probe", &self.name);
        assert_eq!(self.sysfs().driver.as_deref(), Some(driver));
    }
}

impl Drop for SimDev {
    fn drop(&mut self) {
        if let Ok(Some(nl)) = VdpaNetlink::open() {
            let _ = nl.del_device(&self.name);
        }
    }
}

fn conf(dev: &SimDev, data: &tempfile::TempDir, extra: Value) -> Value {
    let base = json!({
        "cniVersion": "1.1.0",
        "name": "vdpa-net",
        "type": VDPA,
        "vdpaDevice": dev.name,
        "dataDir": data.path(),
    });
    with_keys(base, &extra)
}

/// [`conf`] with a device-info file for the driver to write
/// (`runtimeConfig.CNIDeviceInfoFile`): the file's directory (removed when
/// dropped), the file, the configuration.
fn conf_with_info_file(
    dev: &SimDev,
    data: &tempfile::TempDir,
    extra: Value,
) -> (tempfile::TempDir, PathBuf, Value) {
    let (dir, file) = device_info_file();
    let mut c = conf(dev, data, extra);
    c["runtimeConfig"] = json!({"CNIDeviceInfoFile": file});
    (dir, file, c)
}

/// CHECK of `t` against `res`, the result of its ADD with `c` (without the
/// device-info file, which only ADD writes).
fn check_added(r: &TestResolver, t: &Target, c: &Value, res: &CniResult) {
    let mut cc = with_prev(c, res);
    cc["runtimeConfig"] = json!({});
    check(Here, r, VDPA, t, &cc).unwrap();
}

fn host_link(name: &str) -> Option<plexus_dataplane::netlink::Link> {
    Netlink::current()
        .unwrap()
        .link_by_name(&ifname(name))
        .unwrap()
}

#[test]
fn vdpa_virtio_netdev_moves_into_the_pod_and_del_gives_it_back() {
    let Some(dev) = SimDev::new() else { return };
    let data = tempfile::tempdir().unwrap();
    assert_eq!(dev.sysfs().driver.as_deref(), Some(VIRTIO_VDPA));
    let virtio = dev.sysfs().virtio.expect("a virtio device");
    let orig = dev.own_netdev();
    let before = host_link(&orig).expect("in the host");
    assert_eq!(before.mac, Some(dev.mac));
    let (pod, t) = new_pod("ctr-v");
    let r = TestResolver::default();
    let (_info_dir, info_file, c) = conf_with_info_file(
        &dev,
        &data,
        json!({"mac": "02:00:00:00:b0:01", "mtu": 1400, "ipam": ipam("10.61.0.2/24")}),
    );
    let res = add(Here, &r, VDPA, &t, &c).unwrap();
    assert_eq!(
        result_json(&res, "1.1.0"),
        net1_result(&pod, "02:00:00:00:b0:01", "10.61.0.2/24")
    );
    let l = link(&pod, "net1").expect("net1 in the pod");
    assert_eq!(l["address"], "02:00:00:00:b0:01", "{l}");
    assert_eq!(l["mtu"], 1400, "{l}");
    assert_eq!(l["parentdev"], virtio.as_str(), "{l}");
    assert!(has_flag(&l, "UP"), "{l}");
    assert!(has_address(&pod, "net1", "10.61.0.2/24"));
    assert!(host_link(&orig).is_none(), "gone from the host");
    // device-info-SPEC §3.1.4: driver virtio, the virtio device's path.
    let info = deviceinfo::load(&info_file)
        .unwrap()
        .expect("a device-info file");
    let v = info.vdpa.expect("a vdpa map");
    assert_eq!(v.parent_device, dev.name);
    assert_eq!(v.driver, VdpaDriver::Virtio);
    assert_eq!(v.path, format!("/sys/bus/virtio/devices/{virtio}"));
    assert_eq!(v.pci_address, None, "vdpa_sim has no PCI parent");
    // CHECK against the result passes.
    check_added(&r, &t, &c, &res);

    del(Here, &r, VDPA, &t, &c).unwrap();
    let back = host_link(&orig).expect("back under its name");
    assert_eq!((back.mac, back.mtu), (before.mac, before.mtu));
    assert!(link(&pod, "net1").is_none());
    assert_eq!(
        std::fs::read_dir(data.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".json")
            })
            .count(),
        0,
        "no record left"
    );
    // DEL is idempotent.
    del(Here, &r, VDPA, &t, &c).unwrap();
    assert!(host_link(&orig).is_some());
}

#[test]
fn vdpa_vhost_device_is_given_through_device_info() {
    let Some(dev) = SimDev::new() else { return };
    dev.bind(VHOST_VDPA);
    let vhost = dev.sysfs().vhost_path().expect("a vhost-vdpa device");
    assert!(vhost.exists(), "{vhost:?}");
    let data = tempfile::tempdir().unwrap();
    let (pod, t) = new_pod("ctr-h");
    let r = TestResolver::default();
    let (_info_dir, info_file, c) = conf_with_info_file(
        &dev,
        &data,
        json!({"ipam": ipam("10.62.0.2/24"), "mac": dev.mac.to_string()}),
    );
    let res = add(Here, &r, VDPA, &t, &c).unwrap();
    assert_eq!(
        result_json(&res, "1.1.0"),
        net1_result(&pod, &dev.mac.to_string(), "10.62.0.2/24")
    );
    // Nothing in the pod: the pod's userspace driver opens the device.
    assert!(link(&pod, "net1").is_none());
    // device-info-SPEC §3.1.4: parent-device, driver vhost, /dev path.
    let text = std::fs::read_to_string(&info_file).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["type"], "vdpa", "{text}");
    assert_eq!(v["vdpa"]["parent-device"], dev.name.as_str(), "{text}");
    assert_eq!(v["vdpa"]["driver"], "vhost", "{text}");
    assert_eq!(v["vdpa"]["path"], vhost.to_str().unwrap(), "{text}");
    assert!(v["vdpa"].get("pci-address").is_none(), "{text}");
    check_added(&r, &t, &c, &res);
    // Another pod is refused while this one lives.
    let (_pod2, t2) = new_pod("ctr-h2");
    let e = add(Here, &r, VDPA, &t2, &conf(&dev, &data, json!({}))).unwrap_err();
    assert_code(&e, ErrorCode::TryAgainLater, "is in use by container ctr-h");
    del(Here, &r, VDPA, &t, &c).unwrap();
    del(Here, &r, VDPA, &t, &c).unwrap();
    // Free again.
    add(Here, &r, VDPA, &t2, &conf(&dev, &data, json!({}))).unwrap();
    del(Here, &r, VDPA, &t2, &conf(&dev, &data, json!({}))).unwrap();
}

#[test]
fn vdpa_vhost_refuses_a_mac_or_mtu_it_cannot_set() {
    let Some(dev) = SimDev::new() else { return };
    dev.bind(VHOST_VDPA);
    let data = tempfile::tempdir().unwrap();
    let (_pod, t) = new_pod("ctr-m");
    let r = TestResolver::default();
    for (extra, refused) in [
        (
            json!({"mac": "02:00:00:00:00:99"}),
            "mac: 02:00:00:00:00:99",
        ),
        (json!({"mtu": 9000}), "mtu: 9000"),
    ] {
        let e = add(Here, &r, VDPA, &t, &conf(&dev, &data, extra)).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidConfig, "{e:?}");
        assert!(e.details.starts_with(refused), "{e:?}");
    }
}

#[test]
fn vdpa_refusals_name_the_field_and_the_device() {
    let Some(dev) = SimDev::new() else { return };
    let data = tempfile::tempdir().unwrap();
    let (_pod, t) = new_pod("ctr-r");
    let r = TestResolver::default();
    let mut c = conf(&dev, &data, json!({}));
    c["vdpaDevice"] = json!("pxv-nope");
    let e = add(Here, &r, VDPA, &t, &c).unwrap_err();
    assert_code(
        &e,
        ErrorCode::InvalidConfig,
        "vdpaDevice: no vDPA device pxv-nope",
    );
    let mut c = conf(&dev, &data, json!({"deviceID": "0000:7f:1f.7"}));
    c.as_object_mut().unwrap().remove("vdpaDevice");
    let e = add(Here, &r, VDPA, &t, &c).unwrap_err();
    assert_code(
        &e,
        ErrorCode::InvalidConfig,
        "deviceID: no vDPA device on PCI device 0000:7f:1f.7",
    );
    // Both keys.
    let c = conf(&dev, &data, json!({"deviceID": "0000:7f:1f.7"}));
    let e = add(Here, &r, VDPA, &t, &c).unwrap_err();
    assert_code(
        &e,
        ErrorCode::InvalidConfig,
        "vdpaDevice: set with deviceID",
    );
    dev.unbind();
    let e = add(Here, &r, VDPA, &t, &conf(&dev, &data, json!({}))).unwrap_err();
    assert_code(&e, ErrorCode::InvalidConfig, "is bound to no driver");
    // Nothing was taken, nothing to DEL.
    del(Here, &r, VDPA, &t, &conf(&dev, &data, json!({}))).unwrap();
}

#[test]
fn vdpa_failed_add_is_undone_when_ifname_is_taken() {
    let Some(dev) = SimDev::new() else { return };
    let orig = dev.own_netdev();
    let data = tempfile::tempdir().unwrap();
    let pod = TestNs::new();
    pod.ip(&["link", "add", "net1", "type", "dummy"]);
    let r = TestResolver::default();
    let t = Target::new("ctr-t", &pod, "net1");
    let c = conf(&dev, &data, json!({"mac": "02:00:00:00:b1:01"}));
    let e = add(Here, &r, VDPA, &t, &c).unwrap_err();
    assert_code(&e, ErrorCode::InvalidConfig, "CNI_IFNAME");
    let back = host_link(&orig).expect("still in the host under its name");
    assert_eq!(back.mac, Some(dev.mac), "its MAC given back");
    assert_eq!(
        link(&pod, "net1").unwrap()["linkinfo"]["info_kind"],
        "dummy",
        "the pod's own net1 untouched"
    );
    assert!(!data.path().join(format!("{}.json", dev.name)).exists());
    // The device is free: a pod with the name free gets it.
    let (_pod2, t2) = new_pod("ctr-t2");
    add(Here, &r, VDPA, &t2, &c).unwrap();
    del(Here, &r, VDPA, &t2, &c).unwrap();
    assert!(host_link(&orig).is_some());
}

#[test]
fn vdpa_del_after_the_pod_namespace_is_gone_a_late_del_leaves_the_new_owner_alone_and_gc_gives_back_orphans(
) {
    let Some(dev) = SimDev::new() else { return };
    let orig = dev.own_netdev();
    let data = tempfile::tempdir().unwrap();
    let r = TestResolver::default();
    let c = conf(&dev, &data, json!({"ipam": ipam("10.63.0.2/24")}));

    // DEL after the namespace is gone: the kernel returned the netdev to
    // the initial namespace (maybe renamed); DEL names it back.
    let (pod, t) = new_pod("ctr-g");
    add(Here, &r, VDPA, &t, &c).unwrap();
    drop(pod);
    del(Here, &r, VDPA, &t, &c).unwrap();
    assert!(host_link(&orig).is_some(), "{orig} back");
    let no_netns = Target {
        netns: None,
        ..t.clone()
    };
    del(Here, &r, VDPA, &no_netns, &c).unwrap();

    // An owner whose namespace is gone without DEL: the next ADD reclaims
    // the device; the old owner's late DEL then leaves it alone.
    let (old, t_old) = new_pod("ctr-old");
    add(Here, &r, VDPA, &t_old, &c).unwrap();
    drop(old);
    let (new, t_new) = new_pod("ctr-new");
    add(Here, &r, VDPA, &t_new, &c).unwrap();
    assert!(link(&new, "net1").is_some());
    del(Here, &r, VDPA, &t_old, &c).unwrap();
    let l = link(&new, "net1").expect("still the new pod's");
    assert_eq!(l["parentdev"], dev.sysfs().virtio.unwrap().as_str());
    del(Here, &r, VDPA, &t_new, &c).unwrap();
    assert!(host_link(&orig).is_some());

    // An owner gone without DEL and no ADD for the device since: GC gives
    // the netdev back under its own name.
    let (lost, t_lost) = new_pod("ctr-lost");
    add(Here, &r, VDPA, &t_lost, &c).unwrap();
    drop(lost);
    let record = data.path().join(format!("{}.json", dev.name));
    assert!(record.exists() && host_link(&orig).is_none());
    gc(Here, &r, VDPA, &c, &[]).unwrap();
    assert!(host_link(&orig).is_some(), "{orig} back by GC");
    assert!(!record.exists());
}
