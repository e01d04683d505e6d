//! InfiniBand VF GUIDs as ib-sriov-cni (k8snetworkplumbingwg/ib-sriov-cni)
//! handles them: which GUIDs a VF may be given, and what its DEL gives back.

use crate::netlink::{Guid, Link, VfState};

/// A configured GUID, refused when no VF may have it (all zeros or all
/// ones: ib-sriov-cni's `IsValidGUID` refuses the first, and the second is
/// what "none assigned" looks like, so a pod given it has no GUID).
pub(crate) fn check_configured(guid: Guid) -> Result<Guid, String> {
    match guid.reserved() {
        Some(why) => Err(format!("{guid} is {why}: a VF needs a GUID of its own")),
        None => Ok(guid),
    }
}

/// An InfiniBand VF taken without a configured GUID keeps its own, which
/// must be one: ib-sriov-cni's `applyVFGuid` refuses a VF netdev whose
/// address carries no GUID, or all zeros, or all ones (nothing assigned it
/// one: the subnet manager would not route to it).
pub(crate) fn check_own(netdev: &Link) -> Result<(), String> {
    let why = match netdev.ib_guid {
        None => "has no InfiniBand address".to_string(),
        Some(guid) => match guid.reserved() {
            Some(why) => format!("has the GUID {guid}, {why}"),
            None => return Ok(()),
        },
    };
    Err(format!(
        "missing, and the VF's netdev {} {why}: set one (ib-kubernetes does)",
        netdev.name
    ))
}

/// Completes the state saved before an ADD that sets GUIDs, so that its DEL
/// gives GUIDs back even where the PF does not report its VFs' GUIDs (most
/// drivers; the kernel's IFLA_VF_IB_*_GUID in replies are recent). As
/// ib-sriov-cni's `applyVFGuid` and `ResetVFConfig`: the GUID in the VF
/// netdev's address (node and port alike), all ones for a VF without a
/// netdev (DPDK mode), and all ones for a saved GUID of all zeros, which
/// cannot be set.
pub(crate) fn save_for_give_back(saved: &mut VfState, netdev: Option<&Link>) {
    let own = netdev.and_then(|l| l.ib_guid).unwrap_or(Guid::UNASSIGNED);
    for guid in [&mut saved.ib_node_guid, &mut saved.ib_port_guid] {
        let g = guid.get_or_insert(own);
        if g.0 == 0 {
            *g = Guid::UNASSIGNED;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::VfSettings;

    fn ipoib(name: &str, guid: Option<Guid>) -> Link {
        Link {
            infiniband: true,
            ib_guid: guid,
            ..Link::bare(0, plexus_cni::names::IfName::new(name).unwrap())
        }
    }

    /// The state of an unset VF as a PF reports it, GUIDs as given.
    fn reported(node: Option<Guid>, port: Option<Guid>) -> VfState {
        let mut s = VfState::unset(0);
        (s.ib_node_guid, s.ib_port_guid) = (node, port);
        s
    }

    /// ib-sriov-cni's `IsValidGUID` (all zeros) and `IsAllOnesGUID`.
    #[test]
    fn all_zeros_and_all_ones_are_refused() {
        let e = check_configured(Guid(0)).unwrap_err();
        assert_eq!(
            e,
            "00:00:00:00:00:00:00:00 is all zeros, which is no GUID: a VF needs a GUID of its own"
        );
        let e = check_configured(Guid::UNASSIGNED).unwrap_err();
        assert!(e.starts_with("ff:ff:ff:ff:ff:ff:ff:ff is all ones"), "{e}");
        assert_eq!(check_configured(Guid(7)), Ok(Guid(7)));
    }

    /// ib-sriov-cni's `applyVFGuid`, without a configured GUID.
    #[test]
    fn a_vf_kept_with_its_own_guid_needs_a_real_one() {
        check_own(&ipoib("ib0v1", Some(Guid(0x1122)))).unwrap();
        for (guid, why) in [
            (None, "has no InfiniBand address"),
            (Some(Guid(0)), "00:00:00:00:00:00:00:00, all zeros"),
            (Some(Guid::UNASSIGNED), "ff:ff:ff:ff:ff:ff:ff:ff, all ones"),
        ] {
            let e = check_own(&ipoib("ib0v1", guid)).unwrap_err();
            assert!(e.starts_with("missing, and the VF's netdev ib0v1 "), "{e}");
            assert!(e.contains(why), "{e}");
        }
    }

    /// ib-sriov-cni's `applyVFGuid` saves the VF netdev's GUID (all ones in
    /// VFIO mode) and `ResetVFConfig` sets it back as node and port GUID,
    /// all ones for all zeros. Here a PF that reports GUIDs is believed.
    #[test]
    fn what_del_gives_back_where_the_pf_reports_no_guids() {
        let own = Guid(0x0011_2233_4455_6677);
        let cases = [
            // PF silent: the netdev's GUID, for both.
            (reported(None, None), Some(own), (own, own)),
            // PF silent, a VF netdev with GUID all zeros (a fresh VF).
            (
                reported(None, None),
                Some(Guid(0)),
                (Guid::UNASSIGNED, Guid::UNASSIGNED),
            ),
            // DPDK mode: no netdev to read.
            (
                reported(None, None),
                None,
                (Guid::UNASSIGNED, Guid::UNASSIGNED),
            ),
            // The PF reports: its values, all zeros made all ones.
            (
                reported(Some(Guid(5)), Some(Guid(0))),
                Some(own),
                (Guid(5), Guid::UNASSIGNED),
            ),
        ];
        for (mut saved, netdev_guid, (node, port)) in cases {
            let netdev = netdev_guid.map(|g| ipoib("ib0v1", Some(g)));
            save_for_give_back(&mut saved, netdev.as_ref());
            assert_eq!(
                (saved.ib_node_guid, saved.ib_port_guid),
                (Some(node), Some(port))
            );
        }

        // The DEL of a VF whose PF reports no GUIDs: `now` has none, so both
        // are sent (unlike a setting the PF reports unchanged).
        let mut saved = reported(None, None);
        save_for_give_back(&mut saved, Some(&ipoib("ib0v1", Some(own))));
        let applied = VfSettings {
            ib_node_guid: Some(Guid(9)),
            ib_port_guid: Some(Guid(9)),
            ..VfSettings::default()
        };
        let back = saved.restoring_changed(&reported(None, None), &applied);
        assert_eq!(
            back,
            VfSettings {
                ib_node_guid: Some(own),
                ib_port_guid: Some(own),
                ..VfSettings::default()
            }
        );
        // Where the PF reports them, what never changed is not sent.
        let now = saved.clone();
        assert!(saved.restoring_changed(&now, &applied).is_empty());
    }
}
