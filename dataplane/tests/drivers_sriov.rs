//! The built-in `sriov` driver on real PCI VFs: qemu's emulated igb in the VM
//! harness (`Feature::PciSriov`, shared/notes/sriov-vm.md). The PF lives in
//! the VM's root namespace, which is the test's own: the driver is called
//! with it as the host ([`Here`]), on pods in namespaces the tests
//! create. VF locks and records go to a temp `dataDir`.
mod common;
use common::ifname;
mod drivers_support;

use std::path::PathBuf;

use common::TestNs;
use drivers_support::*;
use plexus_cni::env::CniCommand;
use plexus_cni::error::ErrorCode;
use plexus_dataplane::netlink::{VfState, VfVlan, VlanProto};
use plexus_dataplane::nftables::Nftables;
use plexus_dataplane::{MacAddr, Netlink};
use plexus_testkit::sriov::{PciVf, SriovVfs, VfioBinding};
use plexus_testkit::{require, Feature};
use serde_json::{json, Value};

const SRIOV: &str = "sriov";

/// One test's VFs (its turn on the PF), the host's netlink handle and the
/// PF's index, and the driver's data directory.
struct Fixture {
    vfs: SriovVfs,
    nl: Netlink,
    pf: u32,
    data: tempfile::TempDir,
}

impl Fixture {
    /// `count` VFs; `None` (the test skipped) without root or PCI SR-IOV.
    fn new(count: u32) -> Option<Fixture> {
        let (vfs, nl, pf) = common::vfs_on_pf(count)?;
        Some(Fixture {
            vfs,
            nl,
            pf,
            data: tempfile::tempdir().unwrap(),
        })
    }

    fn vf(&self, i: usize) -> &PciVf {
        &self.vfs.vfs[i]
    }

    /// A configuration for `vf` with records in the data directory, `extra`
    /// merged in.
    fn conf(&self, vf: &PciVf, extra: Value) -> Value {
        let base = json!({
            "cniVersion": "1.1.0",
            "name": "sriov-net",
            "type": SRIOV,
            "deviceID": vf.address,
            "dataDir": self.data.path(),
        });
        with_keys(base, &extra)
    }

    fn record_path(&self, vf: &PciVf) -> PathBuf {
        self.data.path().join(format!("{}.json", vf.address))
    }

    /// The driver's record of `vf`, if any.
    fn record(&self, vf: &PciVf) -> Option<Value> {
        let bytes = std::fs::read(self.record_path(vf)).ok()?;
        Some(serde_json::from_slice(&bytes).unwrap())
    }

    fn state(&self, vf: &PciVf) -> VfState {
        self.nl
            .vf_state(self.pf, vf.index)
            .unwrap()
            .expect("the PF has it")
    }

    fn snapshot(&self, vf: &PciVf) -> Snapshot {
        let netdev = vf.netdev().map(|name| {
            let link = self
                .nl
                .link_by_name(&ifname(&name))
                .unwrap()
                .expect("sysfs names it");
            (name, link.mac, link.mtu)
        });
        Snapshot {
            state: self.state(vf),
            netdev,
        }
    }

    /// The VF's entry of `ip -d -j link show dev PF` (`vfinfo_list`).
    fn ip_vfinfo(&self, vf: &PciVf) -> Value {
        let pf = common::ip_json(&["-d", "link", "show", "dev", &self.vfs.pf.netdev]);
        pf[0]["vfinfo_list"]
            .as_array()
            .and_then(|l| l.iter().find(|e| e["vf"] == vf.index))
            .cloned()
            .unwrap_or_else(|| panic!("no vfinfo for VF {}: {}", vf.index, pf[0]))
    }
}

/// A VF as the host sees it: its settings on the PF, and its netdev (name,
/// MAC, MTU) when it has one in the host.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    state: VfState,
    netdev: Option<(String, Option<MacAddr>, u32)>,
}

fn mac(s: &str) -> MacAddr {
    s.parse().unwrap()
}

#[test]
fn sriov_driver_add_moves_the_vf_into_the_pod_with_its_settings_and_del_gives_all_back() {
    let Some(f) = Fixture::new(2) else {
        return;
    };
    let vf = f.vf(0);
    let before = f.snapshot(vf);
    let other_before = f.snapshot(f.vf(1));
    let (orig_name, orig_mac, _) = before.netdev.clone().expect("a netdev");
    let (pod, t) = new_pod("ctr-a");
    let r = TestResolver::default();
    // Multus hands the device over in runtimeConfig, which wins.
    let mut c = f.conf(
        vf,
        json!({
            "vlan": 100, "vlanQoS": 3, "spoofchk": "off", "trust": "on", "max_tx_rate": 100,
            "mac": "02:00:00:00:a0:01", "ipam": ipam("10.60.0.2/24"),
            "dns": {"nameservers": ["10.60.0.53"]},
            "runtimeConfig": {"deviceID": vf.address},
        }),
    );
    c["deviceID"] = json!("0000:00:00.0");

    let res = add(Here, &r, SRIOV, &t, &c).unwrap();
    let mut want = net1_result(&pod, "02:00:00:00:a0:01", "10.60.0.2/24");
    want["interfaces"][0]["pciID"] = json!(vf.address);
    want["dns"] = json!({"nameservers": ["10.60.0.53"]});
    assert_eq!(result_json(&res, "1.1.0"), want);
    // The netdev is the pod's net1, up, with its MAC and address.
    let l = link(&pod, "net1").expect("net1 in the pod");
    assert_eq!(l["address"], "02:00:00:00:a0:01", "{l}");
    assert_eq!(l["parentdev"], vf.address.as_str(), "{l}");
    assert!(has_flag(&l, "UP"), "{l}");
    assert!(has_address(&pod, "net1", "10.60.0.2/24"));
    assert_eq!(vf.netdev(), None, "gone from the host's sysfs");
    assert!(f.nl.link_by_name(&ifname(&orig_name)).unwrap().is_none());
    // The PF-side settings, through netlink and through ip.
    let now = f.state(vf);
    assert_eq!(now.mac, mac("02:00:00:00:a0:01"));
    assert_eq!(
        now.vlan,
        VfVlan {
            id: 100,
            qos: 3,
            proto: VlanProto::Dot1Q
        }
    );
    assert_eq!((now.spoofchk, now.trust), (false, true));
    assert_eq!((now.min_tx_rate, now.max_tx_rate), (0, 100));
    let info = f.ip_vfinfo(vf);
    assert_eq!(info["address"], "02:00:00:00:a0:01", "{info}");
    assert_eq!(info["vlan_list"][0]["vlan"], 100, "{info}");
    assert_eq!(info["vlan_list"][0]["qos"], 3, "{info}");
    assert_eq!(info["rate"]["max_tx"], 100, "{info}");
    assert_eq!(
        (&info["spoofchk"], &info["trust"]),
        (&json!(false), &json!(true))
    );
    assert_eq!(f.snapshot(f.vf(1)), other_before, "VF 1 untouched");
    // The record names the owner.
    let record = f.record(vf).expect("a record");
    assert_eq!(record["owner"]["container_id"], "ctr-a", "{record}");
    assert_eq!(record["found"]["name"], orig_name.as_str(), "{record}");

    // CHECK passes, and sees a PF-side setting changed behind its back.
    let with_prev = with_prev(&c, &res);
    check(Here, &r, SRIOV, &t, &with_prev).unwrap();
    common::run(
        "ip",
        &[
            "link",
            "set",
            &f.vfs.pf.netdev,
            "vf",
            &vf.index.to_string(),
            "vlan",
            "200",
        ],
    );
    let e = check(Here, &r, SRIOV, &t, &with_prev).unwrap_err();
    assert_code(&e, ErrorCode::Plugin(103), "vlan: the VF has 200");

    del(Here, &r, SRIOV, &t, &c).unwrap();
    assert_eq!(link(&pod, "net1"), None);
    assert_eq!(f.snapshot(vf), before, "everything given back");
    assert_eq!(vf.netdev().as_deref(), Some(orig_name.as_str()));
    assert_eq!(
        f.nl.link_by_name(&ifname(&orig_name)).unwrap().unwrap().mac,
        orig_mac
    );
    assert!(f.record(vf).is_none());
    assert_eq!(
        r.commands(),
        [
            CniCommand::Add,
            CniCommand::Check,
            CniCommand::Check,
            CniCommand::Del
        ]
    );
    // DEL again changes nothing.
    del(Here, &r, SRIOV, &t, &c).unwrap();
    assert_eq!(f.snapshot(vf), before);
}

#[test]
fn sriov_driver_pods_on_two_vfs_of_one_pf_ping_each_other() {
    let Some(f) = Fixture::new(2) else {
        return;
    };
    let (pod_a, pod_b) = (TestNs::new(), TestNs::new());
    let r = TestResolver::default();
    let ta = Target::new("ctr-a", &pod_a, "net1");
    let tb = Target::new("ctr-b", &pod_b, "net1");
    let ca = f.conf(f.vf(0), json!({"ipam": ipam("10.61.0.2/24")}));
    let cb = f.conf(f.vf(1), json!({"ipam": ipam("10.61.0.3/24")}));
    add(Here, &r, SRIOV, &ta, &ca).unwrap();
    add(Here, &r, SRIOV, &tb, &cb).unwrap();
    // igb's VFs start with carrier only once igbvf talked to the PF; a few
    // pings allow for that and for the first ARP under TCG.
    let reached = (0..10).any(|_| ping(&pod_a, "10.61.0.3"));
    assert!(reached, "pod A -> pod B through the PF's switch");
    assert!(ping(&pod_b, "10.61.0.2"), "pod B -> pod A");
    // A policy table on the VF's netdev filters it as any interface
    // (issue 35: the rules match the pod's interface by name).
    let nft = Nftables::open(&pod_b.ns).unwrap();
    nft.replace(&common::ingress_isolated("plexus-policy", "net1", vec![]))
        .unwrap();
    assert!(!ping(&pod_a, "10.61.0.3"), "refused by pod B's table");
    assert!(ping(&pod_b, "10.61.0.2"), "pod B's own pings: replies pass");
    nft.delete("plexus-policy").unwrap();
    assert!(ping(&pod_a, "10.61.0.3"), "open again");
    del(Here, &r, SRIOV, &ta, &ca).unwrap();
    del(Here, &r, SRIOV, &tb, &cb).unwrap();
}

#[test]
fn sriov_driver_dpdk_mode_sets_the_pf_side_only_and_gives_it_back() {
    let Some(f) = Fixture::new(2) else {
        return;
    };
    let vf = f.vf(1);
    let _vfio = VfioBinding::bind(vf);
    let before = f.snapshot(vf);
    assert_eq!(before.netdev, None);
    let pod = TestNs::new();
    let pod_links = link_names(&pod);
    let r = TestResolver::default();
    let t = Target::new("ctr-d", &pod, "net1");
    // device-info-SPEC §5.1.2: the driver describes the VF in the file the
    // executor hands it (in DPDK mode the pod's only way to find it).
    let devinfo = f
        .data
        .path()
        .join("devinfo/cni/ns-sriov-ctr-d-net1-device.json");
    let c = f.conf(
        vf,
        json!({"mac": "02:00:00:00:d0:01", "vlan": 42, "ipam": ipam("10.62.0.2/24"),
               "runtimeConfig": {"CNIDeviceInfoFile": devinfo}}),
    );
    let res = add(Here, &r, SRIOV, &t, &c).unwrap();
    let written: Value = serde_json::from_slice(&std::fs::read(&devinfo).unwrap()).unwrap();
    assert_eq!(
        written,
        json!({"type": "pci", "version": "1.1.0",
               "pci": {"pci-address": vf.address, "pf-pci-address": f.vfs.pf.address}})
    );
    assert_eq!(
        result_json(&res, "1.1.0"),
        json!({
            "cniVersion": "1.1.0",
            "interfaces": [{"name": "net1", "mac": "02:00:00:00:d0:01",
                            "sandbox": netns_path(&pod).to_str().unwrap(),
                            "pciID": vf.address}],
            "ips": [{"interface": 0, "address": "10.62.0.2/24"}],
        })
    );
    assert_eq!(link_names(&pod), pod_links, "nothing configured in the pod");
    let now = f.state(vf);
    assert_eq!(
        (now.mac, now.vlan),
        (mac("02:00:00:00:d0:01"), VfVlan::new(42))
    );
    let record = f.record(vf).expect("a record");
    assert_eq!(record["found"]["mode"], "dpdk", "{record}");
    // CHECK has only the PF side to look at.
    check(Here, &r, SRIOV, &t, &with_prev(&c, &res)).unwrap();

    del(Here, &r, SRIOV, &t, &c).unwrap();
    assert_eq!(f.snapshot(vf), before);
    assert!(f.record(vf).is_none());
    del(Here, &r, SRIOV, &t, &c).unwrap();
}

#[test]
fn sriov_driver_refuses_what_is_not_a_vf_and_an_invalid_guid() {
    let Some(f) = Fixture::new(1) else {
        return;
    };
    let vf = f.vf(0);
    let before = f.snapshot(vf);
    let (_pod, t) = new_pod("ctr-x");
    let r = TestResolver::default();
    let with_device = |device: &str| {
        let mut c = f.conf(vf, json!({}));
        c["deviceID"] = json!(device);
        c
    };
    for (device, why) in [
        ("0000:7f:1f.7", "PCI device 0000:7f:1f.7 not found"),
        (
            f.vfs.pf.address.as_str(),
            "is not an SR-IOV virtual function",
        ),
        ("0000:00:00.0", "is not an SR-IOV virtual function"),
        ("0000:01:10", "invalid PCI address"),
    ] {
        let e = add(Here, &r, SRIOV, &t, &with_device(device)).unwrap_err();
        assert_code(&e, ErrorCode::InvalidConfig, "deviceID: ");
        assert!(e.details.contains(why), "{device}: {e:?}");
    }
    // ib-sriov-cni's `IsValidGUID` (all zeros) and `IsAllOnesGUID`: refused
    // before anything is looked at, whatever the VF.
    for (guid, why) in [
        ("00:11:22", "expected 8 octets"),
        ("00:00:00:00:00:00:00:00", "is all zeros"),
        ("ff:ff:ff:ff:ff:ff:ff:ff", "is all ones"),
    ] {
        let c = f.conf(vf, json!({"runtimeConfig": {"infinibandGUID": guid}}));
        let e = add(Here, &r, SRIOV, &t, &c).unwrap_err();
        assert_code(
            &e,
            ErrorCode::InvalidConfig,
            "runtimeConfig.infinibandGUID: ",
        );
        assert!(e.details.contains(why), "{guid}: {e:?}");
    }
    // Nothing was locked, recorded or changed, and IPAM never ran.
    assert_eq!(std::fs::read_dir(f.data.path()).unwrap().count(), 0);
    assert_eq!(f.snapshot(vf), before);
    assert!(r.commands().is_empty());

    // A valid GUID on an Ethernet VF is ignored, as sriov-cni does (igb would
    // refuse it).
    let c = f.conf(
        vf,
        json!({"runtimeConfig": {"infinibandGUID": "00:11:22:33:44:55:66:77"}}),
    );
    add(Here, &r, SRIOV, &t, &c).unwrap();
    del(Here, &r, SRIOV, &t, &c).unwrap();
    assert_eq!(f.snapshot(vf), before);
}

#[test]
fn sriov_driver_refuses_a_vf_another_live_pod_owns() {
    let Some(f) = Fixture::new(1) else {
        return;
    };
    let vf = f.vf(0);
    let (pod_a, pod_b) = (TestNs::new(), TestNs::new());
    let r = TestResolver::default();
    let ta = Target::new("ctr-a", &pod_a, "net1");
    let tb = Target::new("ctr-b", &pod_b, "net1");
    let ca = f.conf(vf, json!({"vlan": 10}));
    let cb = f.conf(vf, json!({"vlan": 20, "ipam": ipam("10.63.0.3/24")}));
    add(Here, &r, SRIOV, &ta, &ca).unwrap();
    let owned = f.snapshot(vf);

    let e = add(Here, &r, SRIOV, &tb, &cb).unwrap_err();
    assert_code(&e, ErrorCode::TryAgainLater, "is in use by container ctr-a");
    assert!(
        e.details
            .contains(&netns_path(&pod_a).display().to_string()),
        "{e:?}"
    );
    assert!(link(&pod_a, "net1").is_some());
    assert_eq!(link(&pod_b, "net1"), None);
    assert_eq!(f.snapshot(vf), owned);
    // B's DEL (as a runtime sends after a failed ADD) leaves A's VF alone.
    del(Here, &r, SRIOV, &tb, &cb).unwrap();
    assert!(link(&pod_a, "net1").is_some());
    assert_eq!(f.snapshot(vf), owned);
    // The same attachment twice is refused as well.
    let e = add(Here, &r, SRIOV, &ta, &ca).unwrap_err();
    assert_code(&e, ErrorCode::TryAgainLater, "is in use by container ctr-a");
    del(Here, &r, SRIOV, &ta, &ca).unwrap();
}

/// sriov-cni #219/#313: kubelet gives the VF to pod B while pod A's DEL is
/// still to come. B's ADD gives back what A left (A's namespace is gone)
/// and takes the VF; A's late DEL leaves B's VF alone.
#[test]
fn sriov_driver_late_del_of_the_old_pod_leaves_the_new_owner_alone() {
    let Some(f) = Fixture::new(1) else {
        return;
    };
    let vf = f.vf(0);
    let before = f.snapshot(vf);
    let r = TestResolver::default();
    let (pod_a, ta) = new_pod("ctr-a");
    let ca = f.conf(
        vf,
        json!({"mac": "02:00:00:00:aa:01", "vlan": 10, "trust": "on"}),
    );
    add(Here, &r, SRIOV, &ta, &ca).unwrap();
    // Pod A's namespace goes without a DEL: the kernel moves the VF's
    // netdev back to the root namespace, named as in the pod.
    drop(pod_a);

    let (pod_b, tb) = new_pod("ctr-b");
    let cb = f.conf(
        vf,
        json!({"mac": "02:00:00:00:bb:01", "vlan": 20, "ipam": ipam("10.64.0.3/24")}),
    );
    add(Here, &r, SRIOV, &tb, &cb).unwrap();
    let owned_by_b = f.snapshot(vf);
    assert_eq!(owned_by_b.state.vlan, VfVlan::new(20));
    assert_eq!(owned_by_b.state.mac, mac("02:00:00:00:bb:01"));
    // A's trust was given back before B took the VF.
    assert_eq!(owned_by_b.state.trust, before.state.trust);
    let b_link = link(&pod_b, "net1").expect("B's interface");

    // A's late DEL: its namespace is gone, the record names B.
    del(Here, &r, SRIOV, &ta, &ca).unwrap();
    assert_eq!(f.snapshot(vf), owned_by_b, "B keeps its settings");
    assert_eq!(link(&pod_b, "net1"), Some(b_link), "and its interface");
    assert!(has_address(&pod_b, "net1", "10.64.0.3/24"));

    del(Here, &r, SRIOV, &tb, &cb).unwrap();
    assert_eq!(f.snapshot(vf), before);
}

/// A VF whose pod went without its DEL (a runtime that lost it) is not left
/// with the pod's VLAN, trust and MAC until someone asks for that VF again:
/// the driver's next DEL, of any pod, gives it back, and so does a GC.
#[test]
fn sriov_driver_gives_back_a_vf_whose_del_never_came_at_the_next_del_or_gc() {
    let Some(f) = Fixture::new(2) else {
        return;
    };
    let (orphaned, other) = (f.vf(0), f.vf(1));
    let before = f.snapshot(orphaned);
    let r = TestResolver::default();
    let (pod_a, ta) = new_pod("ctr-lost");
    let ca = f.conf(
        orphaned,
        json!({"mac": "02:00:00:00:aa:02", "vlan": 30, "trust": "on"}),
    );
    add(Here, &r, SRIOV, &ta, &ca).unwrap();
    drop(pod_a);
    assert_eq!(
        f.snapshot(orphaned).state.vlan,
        VfVlan::new(30),
        "left as it was"
    );

    // Another pod comes and goes on the other VF: its DEL sweeps.
    let (_pod_b, tb) = new_pod("ctr-other");
    let cb = f.conf(other, json!({"vlan": 40}));
    add(Here, &r, SRIOV, &tb, &cb).unwrap();
    assert_eq!(
        f.record(orphaned).unwrap()["owner"]["container_id"],
        "ctr-lost"
    );
    del(Here, &r, SRIOV, &tb, &cb).unwrap();
    assert_eq!(
        f.snapshot(orphaned),
        before,
        "given back by another pod's DEL"
    );
    assert_eq!(f.record(orphaned), None);
    // The lost pod's DEL, should it come after all, finds nothing of its own.
    del(Here, &r, SRIOV, &ta, &ca).unwrap();
    assert_eq!(f.snapshot(orphaned), before);

    // GC: a lost pod's VF goes back, a live pod's stays, whatever `valid`
    // says (the data directory is shared by every sriov network).
    let (pod_c, tc) = new_pod("ctr-lost2");
    add(Here, &r, SRIOV, &tc, &ca).unwrap();
    drop(pod_c);
    let (pod_d, td) = new_pod("ctr-live");
    add(Here, &r, SRIOV, &td, &cb).unwrap();
    let live = f.snapshot(other);
    assert_eq!(f.snapshot(orphaned).state.vlan, VfVlan::new(30));
    gc(Here, &r, SRIOV, &f.conf(orphaned, json!({})), &[]).unwrap();
    assert_eq!(f.snapshot(orphaned), before, "given back by GC");
    assert_eq!(f.snapshot(other), live, "the live pod keeps its VF");
    assert!(link(&pod_d, "net1").is_some());
    del(Here, &r, SRIOV, &td, &cb).unwrap();

    // A namespace whose path is gone but which something still holds open
    // keeps the VF's netdev: a DEL's sweep does not wait for it (the DEL is
    // another pod's); GC, once it is released, finishes the job.
    let (pod_e, te) = new_pod("ctr-held");
    add(Here, &r, SRIOV, &te, &ca).unwrap();
    let held = std::fs::File::open(netns_path(&pod_e)).unwrap();
    drop(pod_e);
    let (_pod_f, tf) = new_pod("ctr-other2");
    add(Here, &r, SRIOV, &tf, &cb).unwrap();
    let started = std::time::Instant::now();
    del(Here, &r, SRIOV, &tf, &cb).unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "the DEL waited {:?} for another pod's netdev",
        started.elapsed()
    );
    assert!(f.record(orphaned).is_some(), "not given back yet");
    // GC runs apart from any pod's call: it waits for the netdev.
    drop(held);
    gc(Here, &r, SRIOV, &ca, &[]).unwrap();
    assert_eq!(f.snapshot(orphaned), before, "given back once released");
    assert_eq!(f.record(orphaned), None);
}

#[test]
fn sriov_driver_del_of_a_vf_that_vanished_succeeds() {
    let Some(f) = Fixture::new(1) else {
        return;
    };
    let vf = f.vf(0).clone();
    let (pod, t) = new_pod("ctr-v");
    let r = TestResolver::default();
    let c = f.conf(&vf, json!({"vlan": 5, "ipam": ipam("10.65.0.2/24")}));
    add(Here, &r, SRIOV, &t, &c).unwrap();
    let record = f.record_path(&vf);
    assert!(record.exists());
    // The VFs go (sriov_numvfs 0), the one in the pod with them.
    drop(f.vfs);
    assert_eq!(link(&pod, "net1"), None);

    del(Here, &r, SRIOV, &t, &c).unwrap();
    assert!(!record.exists());
    assert_eq!(r.commands(), [CniCommand::Add, CniCommand::Del]);
    del(Here, &r, SRIOV, &t, &c).unwrap();
}

#[test]
fn sriov_driver_failed_add_leaves_the_vf_as_it_was() {
    let Some(f) = Fixture::new(1) else {
        return;
    };
    let vf = f.vf(0);
    let before = f.snapshot(vf);
    let pod = TestNs::new();
    let pod_links = link_names(&pod);
    // What igb refuses, each after settings the kernel applies first (MAC,
    // VLAN, spoofchk precede the link state; the rates precede spoofchk).
    for (extra, errno) in [
        (json!({"link_state": "enable"}), "EOPNOTSUPP"),
        (json!({"min_tx_rate": 10, "max_tx_rate": 100}), "EINVAL"),
        (json!({"vlanProto": "802.1ad"}), "EPROTONOSUPPORT"),
    ] {
        let r = TestResolver::default();
        let t = Target::new("ctr-f", &pod, "net1");
        let c = f.conf(
            vf,
            json!({"mac": "02:00:00:00:f0:01", "vlan": 30, "spoofchk": "off", "trust": "on",
                   "ipam": ipam("10.66.0.2/24")}),
        );
        let c = with_keys(c, &extra);
        let e = add(Here, &r, SRIOV, &t, &c).unwrap_err();
        assert!(e.details.contains(errno), "{extra}: {e:?}");
        assert!(e.undone, "{extra}: {e:?}");
        assert_eq!(f.snapshot(vf), before, "{extra}");
        assert_eq!(link_names(&pod), pod_links, "{extra}");
        assert!(f.record(vf).is_none(), "{extra}");
        // The PF refused before the VF was in the pod: IPAM never ran.
        assert_eq!(r.commands(), [], "{extra}");
    }

    // CNI_IFNAME taken in the pod: refused, the pod's device and the VF
    // left as they were.
    pod.add_veth("net1", "peer1");
    let r = TestResolver::default();
    let t = Target::new("ctr-f", &pod, "net1");
    let c = f.conf(vf, json!({"mac": "02:00:00:00:f0:02"}));
    let e = add(Here, &r, SRIOV, &t, &c).unwrap_err();
    assert_code(&e, ErrorCode::InvalidConfig, "already exists");
    assert_eq!(link(&pod, "net1").unwrap()["linkinfo"]["info_kind"], "veth");
    assert_eq!(f.snapshot(vf), before);
    assert!(f.record(vf).is_none());
}

/// A device of the host took the VF netdev's original name while the VF was
/// in the pod: DEL brings it home under the name it had in the pod, with
/// its MAC, and finishes.
#[test]
fn sriov_driver_del_brings_the_vf_home_when_its_name_was_taken() {
    if !require(&[Feature::Dummy]) {
        return;
    }
    let Some(f) = Fixture::new(1) else {
        return;
    };
    let vf = f.vf(0);
    let before = f.snapshot(vf);
    let (orig_name, orig_mac, _) = before.netdev.clone().expect("a netdev");
    let pod = TestNs::new();
    let r = TestResolver::default();
    let t = Target::new("ctr-n", &pod, "net7");
    let c = f.conf(vf, json!({"mac": "02:00:00:00:e0:01", "vlan": 7}));
    add(Here, &r, SRIOV, &t, &c).unwrap();
    let squatter = Squatter::new(&orig_name);

    del(Here, &r, SRIOV, &t, &c).unwrap();
    assert_eq!(link(&pod, "net7"), None);
    assert_eq!(
        vf.netdev().as_deref(),
        Some("net7"),
        "home under its pod name"
    );
    let home = f.nl.link_by_name(&ifname("net7")).unwrap().unwrap();
    assert_eq!(home.mac, orig_mac);
    assert_eq!(f.state(vf), before.state);
    assert!(f.record(vf).is_none());
    drop(squatter);
}

/// A dummy link of the given name in the test's (the VM's root) namespace,
/// deleted on drop.
struct Squatter(String);

impl Squatter {
    fn new(name: &str) -> Squatter {
        common::run("ip", &["link", "add", name, "type", "dummy"]);
        Squatter(name.to_string())
    }
}

impl Drop for Squatter {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.0])
            .status();
    }
}
