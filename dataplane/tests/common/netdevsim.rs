//! A netdevsim device for tests (kernels with CONFIG_NETDEVSIM: the VM
//! harness's): its ports are created in a test namespace, its SR-IOV VFs
//! take settings over netlink like a real PF's (they have no netdevs in
//! legacy mode), and it is deleted on drop.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::common::{run, TestNs};
use plexus_testkit::{require, Feature};

/// A netdevsim device, deleted on drop.
pub struct Netdevsim {
    pub id: u32,
}

impl Netdevsim {
    /// Creates a device with `ports` ports, which appear in `ns` (netdevsim
    /// puts them in the namespace of the process that writes `new_device`).
    pub fn new(ns: &TestNs, ports: u32) -> Netdevsim {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        // IDs are global: derive them from the pid so concurrent runs differ.
        let id =
            100 + (std::process::id() % 10_000) * 16 + NEXT.fetch_add(1, Ordering::Relaxed) % 16;
        let cmd = format!("echo '{id} {ports}' > /sys/bus/netdevsim/new_device");
        run("ip", &["netns", "exec", &ns.name, "sh", "-c", &cmd]);
        Netdevsim { id }
    }

    /// A one-port device in a fresh namespace, or `None` (the test skipped)
    /// without root and netdevsim.
    pub fn in_new_ns() -> Option<(TestNs, Netdevsim)> {
        if !require(&[Feature::Root, Feature::Netdevsim]) {
            return None;
        }
        let ns = TestNs::new();
        let dev = Netdevsim::new(&ns, 1);
        Some((ns, dev))
    }

    pub fn sysfs(&self) -> String {
        format!("/sys/bus/netdevsim/devices/netdevsim{}", self.id)
    }

    /// The name of its first port in `ns`, waiting (bounded) for it to
    /// appear: devices appear asynchronously.
    pub fn port(&self, ns: &TestNs) -> String {
        let bus_dev = format!("netdevsim{}", self.id);
        wait_for("the netdevsim port", || {
            ns.ip_json(&["-d", "link", "show"])
                .into_iter()
                .find(|l| l["parentbus"] == "netdevsim" && l["parentdev"] == bus_dev.as_str())
                .map(|l| l["ifname"].as_str().unwrap().to_string())
        })
    }

    /// Gives its PF `count` SR-IOV VFs.
    pub fn set_num_vfs(&self, count: u32) {
        std::fs::write(format!("{}/sriov_numvfs", self.sysfs()), count.to_string()).unwrap();
    }
}

impl Drop for Netdevsim {
    fn drop(&mut self) {
        let _ = std::fs::write("/sys/bus/netdevsim/del_device", self.id.to_string());
    }
}

/// Polls `f` every 20 ms for up to 5 s.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
