//! The SR-IOV building blocks on real kernels: PCI discovery in sysfs and VF
//! settings over netlink on qemu's igb, whose VFs are real PCI functions
//! (`Feature::PciSriov`: the VM harness only, where the PF lives in the VM's
//! own root namespace and is up while the test's VFs exist), and on
//! netdevsim's VFs what igb refuses (link state, a minimum rate, 802.1ad), in
//! a namespace of the test's own. Skipped visibly on hosts without them.
mod common;
use common::{ifname, sriov_vfs, vfs_on_pf};
#[path = "common/netdevsim.rs"]
mod netdevsim;

use netdevsim::Netdevsim;
use plexus_dataplane::netlink::{Guid, VfLinkState, VfSettings, VfVlan, VlanProto};
use plexus_dataplane::pci::{PciAddress, PciError, SriovRole, SysfsRoot};
use plexus_dataplane::{Errno, Error, MacAddr, Netlink};
use plexus_testkit::sriov::VfioBinding;

fn addr(s: &str) -> PciAddress {
    s.parse().unwrap()
}

fn mac(s: &str) -> MacAddr {
    s.parse().unwrap()
}

/// The kernel's errno of a refused request.
fn refused(e: Error) -> Errno {
    match e {
        Error::Kernel { errno, .. } => errno,
        other => panic!("expected a kernel refusal, got {other:?}"),
    }
}

#[test]
fn pci_discovery_on_real_sysfs() {
    let Some(vfs) = sriov_vfs(2) else { return };
    let sys = SysfsRoot::default();
    let pf_addr = addr(&vfs.pf.address);
    let pf = sys.pci_device(pf_addr).unwrap();
    assert_eq!(
        pf.sriov_role().unwrap(),
        SriovRole::PhysicalFunction {
            total_vfs: vfs.pf.total_vfs,
            num_vfs: 2
        }
    );
    let expected: Vec<(u32, PciAddress)> = vfs
        .vfs
        .iter()
        .map(|v| (v.index, addr(&v.address)))
        .collect();
    assert_eq!(pf.virtual_functions().unwrap(), expected);
    assert!(pf.netdevs().unwrap().contains(&ifname(&vfs.pf.netdev)));
    for made in &vfs.vfs {
        let vf = sys.virtual_function(addr(&made.address)).unwrap();
        assert_eq!(vf.pf, pf_addr);
        assert!(vf.pf_netdevs.contains(&ifname(&vfs.pf.netdev)), "{vf:?}");
        assert_eq!(vf.index, made.index);
        assert!(vf.netdev.is_some(), "{vf:?}");
        assert_eq!(vf.netdev.as_deref().map(String::from), made.netdev());
        assert_eq!(vf.driver.as_deref(), Some("igbvf"));
        assert!(!vf.has_userspace_driver());
        assert_eq!(vf.vfio_device, None);
        assert_eq!(
            sys.pci_device(vf.address).unwrap().sriov_role().unwrap(),
            SriovRole::VirtualFunction { pf: pf_addr }
        );
    }
    // The short form names domain 0000, where qemu puts everything.
    let short = vfs.vfs[0].address.trim_start_matches("0000:");
    assert_eq!(
        sys.virtual_function(addr(short)).unwrap().address,
        addr(&vfs.vfs[0].address)
    );
    // q35's host bridge is neither PF nor VF.
    let bridge = sys.pci_device(addr("0000:00:00.0")).unwrap();
    assert_eq!(bridge.sriov_role().unwrap(), SriovRole::None);
    let e = sys.virtual_function(addr("0000:00:00.0")).unwrap_err();
    assert!(matches!(e, PciError::NotVirtualFunction { .. }), "{e}");
    let e = sys.virtual_function(pf_addr).unwrap_err();
    assert!(matches!(e, PciError::NotVirtualFunction { .. }), "{e}");
    // Nothing sits at the last function of the last device of bus 7f.
    let e = sys.virtual_function(addr("0000:7f:1f.7")).unwrap_err();
    assert!(matches!(e, PciError::NotFound { .. }), "{e}");
    assert!(Error::from(e).is_not_found());
}

#[test]
fn a_vf_bound_to_vfio_pci_has_no_netdev_and_a_noiommu_node() {
    let Some(vfs) = sriov_vfs(2) else { return };
    let sys = SysfsRoot::default();
    let made = &vfs.vfs[1];
    let nl = Netlink::current().unwrap();
    let pf = nl.link_by_name(&ifname(&vfs.pf.netdev)).unwrap().unwrap();
    {
        let _vfio = VfioBinding::bind(made);
        let vf = sys.virtual_function(addr(&made.address)).unwrap();
        assert_eq!(vf.driver.as_deref(), Some("vfio-pci"));
        assert!(vf.has_userspace_driver());
        assert_eq!(vf.netdev, None);
        let node = vf.vfio_device.clone().expect("a vfio device node");
        let name = node.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("noiommu-"), "{}", node.display());
        assert!(node.exists(), "{} exists", node.display());
        // The PF still configures a VF without netdev.
        let settings = VfSettings {
            mac: Some(mac("02:00:00:00:0f:01")),
            vlan: Some(VfVlan::new(42)),
            ..VfSettings::default()
        };
        nl.set_vf(pf.index, vf.index, &settings).unwrap();
        let state = nl.vf_state(pf.index, vf.index).unwrap().unwrap();
        assert_eq!(
            (state.mac, state.vlan),
            (mac("02:00:00:00:0f:01"), VfVlan::new(42))
        );
    }
    // Back on igbvf, with a netdev again.
    let vf = sys.virtual_function(addr(&made.address)).unwrap();
    assert_eq!(vf.driver.as_deref(), Some("igbvf"));
    assert!(vf.netdev.is_some(), "{vf:?}");
    assert_eq!(vf.vfio_device, None);
}

#[test]
fn igb_vf_settings_are_applied_read_back_and_restored() {
    let Some((vfs, nl, pf)) = vfs_on_pf(2) else {
        return;
    };
    let (vf, other) = (vfs.vfs[0].index, vfs.vfs[1].index);
    let saved = nl.vf_state(pf, vf).unwrap().expect("VF 0");
    let other_saved = nl.vf_state(pf, other).unwrap().expect("VF 1");
    assert_eq!(saved.vf, vf);
    assert_eq!((saved.vlan, saved.max_tx_rate), (VfVlan::default(), 0));

    let applied = VfSettings {
        mac: Some(mac("02:00:00:00:0a:01")),
        vlan: Some(VfVlan::tagged(10, 3, VlanProto::Dot1Q)),
        spoofchk: Some(!saved.spoofchk),
        trust: Some(!saved.trust),
        max_tx_rate: Some(100),
        ..VfSettings::default()
    };
    nl.set_vf(pf, vf, &applied).unwrap();
    let now = nl.vf_state(pf, vf).unwrap().unwrap();
    assert_eq!(now.mac, mac("02:00:00:00:0a:01"));
    assert_eq!(now.vlan, VfVlan::tagged(10, 3, VlanProto::Dot1Q));
    assert_eq!((now.spoofchk, now.trust), (!saved.spoofchk, !saved.trust));
    assert_eq!((now.min_tx_rate, now.max_tx_rate), (0, 100));
    assert_eq!(nl.vf_state(pf, other).unwrap().unwrap(), other_saved);
    assert_eq!(nl.vf_states(pf).unwrap().len(), 2);

    // (The saved MAC is the VF's own, which igb reports as its MAC: given
    // back, it becomes an admin MAC; see the netlink::vf docs.)
    nl.set_vf(pf, vf, &saved.restoring(&applied)).unwrap();
    assert_eq!(nl.vf_state(pf, vf).unwrap().unwrap(), saved);
    // A VF the PF does not have.
    assert_eq!(nl.vf_state(pf, 5).unwrap(), None);
}

/// The ordering facts of the netlink::vf docs: igb reports a VF's own MAC as
/// its `mac` when no admin MAC is set (a saved state cannot tell them
/// apart), and an admin MAC locks an untrusted VF's netdev MAC until it is
/// cleared.
#[test]
fn igb_admin_mac_locks_an_untrusted_vfs_own_mac_until_cleared() {
    let Some((vfs, nl, pf)) = vfs_on_pf(1) else {
        return;
    };
    let vf = vfs.vfs[0].index;
    let netdev = nl
        .link_by_name(&ifname(&vfs.vfs[0].netdev().unwrap()))
        .unwrap()
        .unwrap()
        .index;
    let admin = |m: &str| VfSettings {
        mac: Some(mac(m)),
        ..VfSettings::default()
    };
    assert!(!nl.vf_state(pf, vf).unwrap().unwrap().trust);

    nl.set_mac(netdev, mac("02:00:00:00:0c:01")).unwrap();
    assert_eq!(
        nl.vf_state(pf, vf).unwrap().unwrap().mac,
        mac("02:00:00:00:0c:01"),
        "the VF's own MAC, reported as if the PF had set it"
    );
    nl.set_vf(pf, vf, &admin("02:00:00:00:0c:02")).unwrap();
    let e = nl.set_mac(netdev, mac("02:00:00:00:0c:03")).unwrap_err();
    assert_eq!(refused(e), Errno::EADDRNOTAVAIL);
    nl.set_vf(pf, vf, &admin("00:00:00:00:00:00")).unwrap();
    nl.set_mac(netdev, mac("02:00:00:00:0c:03")).unwrap();
    let link = nl.link_by_index(netdev).unwrap().unwrap();
    assert_eq!(link.mac, Some(mac("02:00:00:00:0c:03")));
}

#[test]
fn igb_refusals_are_kernel_errors_with_their_errno() {
    let Some((vfs, nl, pf)) = vfs_on_pf(1) else {
        return;
    };
    let vf = vfs.vfs[0].index;
    let saved = nl.vf_state(pf, vf).unwrap().unwrap();
    let cases = [
        (
            VfSettings {
                link_state: Some(VfLinkState::Enable),
                ..VfSettings::default()
            },
            Errno::EOPNOTSUPP,
            "state enable",
        ),
        (
            VfSettings {
                min_tx_rate: Some(10),
                max_tx_rate: Some(100),
                ..VfSettings::default()
            },
            Errno::EINVAL,
            "min_tx_rate 10 max_tx_rate 100",
        ),
        (
            VfSettings {
                vlan: Some(VfVlan::tagged(10, 0, VlanProto::Dot1Ad)),
                ..VfSettings::default()
            },
            Errno::EPROTONOSUPPORT,
            "proto 802.1ad",
        ),
        (
            VfSettings {
                ib_node_guid: Some(Guid(0x0011_2233_4455_6677)),
                ..VfSettings::default()
            },
            Errno::EOPNOTSUPP,
            "node_guid 00:11:22:33:44:55:66:77",
        ),
        (
            VfSettings {
                ib_port_guid: Some(Guid(1)),
                ..VfSettings::default()
            },
            Errno::EOPNOTSUPP,
            "port_guid 00:00:00:00:00:00:00:01",
        ),
    ];
    for (settings, errno, shown) in cases {
        let e = nl.set_vf(pf, vf, &settings).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(&format!("VF {vf} of {} (index {pf})", vfs.pf.netdev)),
            "{text}"
        );
        assert!(text.contains(shown), "{text}");
        assert_eq!(refused(e), errno, "{settings}: {text}");
    }
    // A VF the PF does not have.
    let e = nl
        .set_vf(
            pf,
            5,
            &VfSettings {
                trust: Some(true),
                ..VfSettings::default()
            },
        )
        .unwrap_err();
    assert_eq!(refused(e), Errno::EINVAL);
    assert_eq!(nl.vf_state(pf, vf).unwrap().unwrap(), saved, "unchanged");
}

#[test]
fn netdevsim_vfs_take_what_igb_refuses() {
    // Bound in this order, `dev` is deleted before its namespace.
    let Some((ns, dev)) = Netdevsim::in_new_ns() else {
        return;
    };
    let port = dev.port(&ns);
    dev.set_num_vfs(2);
    let nl = Netlink::open(&ns.ns).unwrap();
    let pf = nl.link_by_name(&ifname(&port)).unwrap().unwrap().index;
    let saved = nl.vf_state(pf, 1).unwrap().expect("VF 1");
    let vf0 = nl.vf_state(pf, 0).unwrap().expect("VF 0");

    let applied = VfSettings {
        mac: Some(mac("02:00:00:00:0b:01")),
        vlan: Some(VfVlan::tagged(20, 2, VlanProto::Dot1Ad)),
        spoofchk: Some(true),
        trust: Some(true),
        link_state: Some(VfLinkState::Disable),
        min_tx_rate: Some(10),
        max_tx_rate: Some(100),
        ..VfSettings::default()
    };
    nl.set_vf(pf, 1, &applied).unwrap();
    let now = nl.vf_state(pf, 1).unwrap().unwrap();
    assert_eq!(now.mac, mac("02:00:00:00:0b:01"));
    assert_eq!(now.vlan, VfVlan::tagged(20, 2, VlanProto::Dot1Ad));
    assert_eq!((now.spoofchk, now.trust), (true, true));
    assert_eq!(now.link_state, Some(VfLinkState::Disable));
    assert_eq!((now.min_tx_rate, now.max_tx_rate), (10, 100));
    assert_eq!(nl.vf_state(pf, 0).unwrap().unwrap(), vf0, "VF 0 untouched");

    // One bound alone keeps the other.
    let rates = |min, max| VfSettings {
        min_tx_rate: min,
        max_tx_rate: max,
        ..VfSettings::default()
    };
    nl.set_vf(pf, 1, &rates(Some(20), None)).unwrap();
    let now = nl.vf_state(pf, 1).unwrap().unwrap();
    assert_eq!((now.min_tx_rate, now.max_tx_rate), (20, 100));
    nl.set_vf(pf, 1, &rates(None, Some(200))).unwrap();
    let now = nl.vf_state(pf, 1).unwrap().unwrap();
    assert_eq!((now.min_tx_rate, now.max_tx_rate), (20, 200));
    for &state in VfLinkState::ALL {
        let s = VfSettings {
            link_state: Some(state),
            ..VfSettings::default()
        };
        nl.set_vf(pf, 1, &s).unwrap();
        assert_eq!(nl.vf_state(pf, 1).unwrap().unwrap().link_state, Some(state));
    }

    nl.set_vf(pf, 1, &saved.restoring(&applied)).unwrap();
    assert_eq!(nl.vf_state(pf, 1).unwrap().unwrap(), saved);

    // No software device takes InfiniBand GUIDs; a VF beyond the count.
    let guid = VfSettings {
        ib_node_guid: Some(Guid(7)),
        ..VfSettings::default()
    };
    assert_eq!(
        refused(nl.set_vf(pf, 1, &guid).unwrap_err()),
        Errno::EOPNOTSUPP
    );
    assert_eq!(
        refused(nl.set_vf(pf, 2, &applied).unwrap_err()),
        Errno::EINVAL
    );
    assert_eq!(nl.vf_state(pf, 2).unwrap(), None);
    // A PF that is gone.
    let e = nl.vf_states(999_999).unwrap_err();
    assert!(e.is_not_found(), "{e}");
}

#[test]
fn a_rebound_vf_comes_back_on_its_driver_with_a_new_netdev() {
    // What the sriov driver does after setting an InfiniBand VF's GUIDs
    // (igb has no GUIDs: the rebind itself is what runs here).
    let Some(vfs) = sriov_vfs(1) else { return };
    let sys = SysfsRoot::default();
    let nl = Netlink::current().unwrap();
    let address = addr(&vfs.vfs[0].address);
    let old = sys.virtual_function(address).unwrap().netdev.unwrap();
    let old_index = nl.link_by_name(&old).unwrap().unwrap().index;
    let driver = sys.pci_device(address).unwrap().rebind().unwrap();
    assert_eq!(driver.as_deref(), Some("igbvf"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (vf, link) = loop {
        let vf = sys.virtual_function(address).unwrap();
        if let Some(link) = vf.netdev.as_ref().and_then(|n| nl.link_by_name(n).unwrap()) {
            break (vf, link);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no netdev 10 s after the rebind: {vf:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(vf.driver.as_deref(), Some("igbvf"));
    assert_ne!(
        link.index, old_index,
        "the old netdev went with the old bind"
    );
    assert!(nl.link_by_index(old_index).unwrap().is_none());
}
