//! Smoke tests of the kernel features the hardware drivers will need, which
//! only the VM harness's kernel has (vm-tests/): netdevsim SR-IOV VFs taking
//! a MAC and a VLAN over netlink, a vdpa_sim_net device, 802.1q/802.1ad vlan
//! and dummy links. Skipped visibly on hosts without them.
mod common;
#[path = "common/netdevsim.rs"]
mod netdevsim;

use std::path::Path;
use std::process::Command;

use common::{run, TestNs};
use netdevsim::Netdevsim;
use plexus_testkit::{require, Feature};
use serde_json::Value;

/// `ip -n NS -d -j link show` as JSON.
fn links(ns: &TestNs) -> Vec<Value> {
    ns.ip_json(&["-d", "link", "show"])
}

#[test]
fn netdevsim_sriov_vfs_take_mac_vlan_and_qos_over_netlink() {
    // Bound in this order, `dev` is deleted before its namespace.
    let Some((ns, dev)) = Netdevsim::in_new_ns() else {
        return;
    };
    let bus_dev = format!("netdevsim{}", dev.id);
    // The PF: the port netdev whose parent is our bus device.
    let pf = dev.port(&ns);
    dev.set_num_vfs(2);
    assert_eq!(
        std::fs::read_to_string(format!("{}/sriov_numvfs", dev.sysfs()))
            .unwrap()
            .trim(),
        "2"
    );
    ns.ip(&[
        "link",
        "set",
        &pf,
        "vf",
        "1",
        "mac",
        "02:00:00:00:00:01",
        "vlan",
        "10",
        "qos",
        "3",
        "spoofchk",
        "off",
        "trust",
        "on",
    ]);
    let link = ns.ip_json(&["link", "show", "dev", &pf]);
    let vfs = link[0]["vfinfo_list"].as_array().expect("vfinfo_list");
    assert_eq!(vfs.len(), 2, "{vfs:?}");
    let vf1 = vfs.iter().find(|v| v["vf"] == 1).expect("VF 1");
    assert_eq!(vf1["address"], "02:00:00:00:00:01", "{vf1}");
    assert_eq!(vf1["vlan_list"][0]["vlan"], 10, "{vf1}");
    assert_eq!(vf1["vlan_list"][0]["qos"], 3, "{vf1}");
    assert_eq!(vf1["spoofchk"], false, "{vf1}");
    assert_eq!(vf1["trust"], true, "{vf1}");
    // VF 0 is untouched.
    let vf0 = vfs.iter().find(|v| v["vf"] == 0).expect("VF 0");
    assert_eq!(vf0["address"], "00:00:00:00:00:00", "{vf0}");

    drop(dev);
    assert!(
        !Path::new(&format!("/sys/bus/netdevsim/devices/{bus_dev}")).exists(),
        "deleted"
    );
    assert!(links(&ns).iter().all(|l| l["ifname"] != pf.as_str()));
}

/// A vDPA device, deleted on drop.
struct Vdpa(String);

impl Drop for Vdpa {
    fn drop(&mut self) {
        let _ = Command::new("vdpa").args(["dev", "del", &self.0]).status();
    }
}

#[test]
fn vdpa_sim_net_device_is_created_and_deleted() {
    if !require(&[Feature::Root, Feature::VdpaSim]) {
        return;
    }
    let name = format!("pxv{}", std::process::id() % 100_000);
    run(
        "vdpa",
        &[
            "dev",
            "add",
            "mgmtdev",
            "vdpasim_net",
            "name",
            &name,
            "mac",
            "02:00:00:00:00:0a",
            "mtu",
            "1400",
        ],
    );
    let dev = Vdpa(name.clone());
    let shown: Value = serde_json::from_str(&run("vdpa", &["-j", "dev", "show", &name])).unwrap();
    let d = &shown["dev"][name.as_str()];
    assert_eq!(d["type"], "network", "{shown}");
    assert_eq!(d["mgmtdev"], "vdpasim_net", "{shown}");
    let config: Value =
        serde_json::from_str(&run("vdpa", &["-j", "dev", "config", "show", &name])).unwrap();
    let c = &config["config"][name.as_str()];
    assert_eq!(c["mac"], "02:00:00:00:00:0a", "{config}");
    assert_eq!(c["mtu"], 1400, "{config}");
    let sysfs = format!("/sys/bus/vdpa/devices/{name}");
    assert!(Path::new(&sysfs).exists());

    drop(dev);
    assert!(!Path::new(&sysfs).exists(), "{sysfs} deleted");
}

#[test]
fn vlan_8021q_8021ad_and_dummy_links() {
    if !require(&[Feature::Root, Feature::Vlan, Feature::Dummy]) {
        return;
    }
    let ns = TestNs::new();
    ns.ip(&["link", "add", "d0", "type", "dummy"]);
    ns.ip(&[
        "link", "add", "link", "d0", "name", "d0.10", "type", "vlan", "id", "10",
    ]);
    ns.ip(&[
        "link", "add", "link", "d0", "name", "d0.20", "type", "vlan", "proto", "802.1ad", "id",
        "20",
    ]);
    let all = links(&ns);
    let get = |n: &str| all.iter().find(|l| l["ifname"] == n).unwrap().clone();
    assert_eq!(get("d0")["linkinfo"]["info_kind"], "dummy");
    let q = get("d0.10")["linkinfo"]["info_data"].clone();
    assert_eq!(
        (q["protocol"].clone(), q["id"].clone()),
        ("802.1Q".into(), 10.into())
    );
    let ad = get("d0.20")["linkinfo"]["info_data"].clone();
    assert_eq!(
        (ad["protocol"].clone(), ad["id"].clone()),
        ("802.1ad".into(), 20.into())
    );
}
