//! DEL of a sandbox plexus never added (issue 45 item 2): a pod that
//! Multus and whereabouts attached before the migration has no record, so
//! plexus's DEL cannot know its networks; its whereabouts addresses are
//! found in the pools instead, by the sandbox's container ID, and given
//! back at once rather than by the reconciler minutes after the pod is gone.
//!
//! What is given back is what whereabouts' own DEL of each of the
//! sandbox's attachments would give back:
//! - the entries whose container ID is the sandbox's (`DeallocateIP`
//!   matches `containerID` and `ifName`, `pkg/allocate/allocate.go`; every
//!   interface of the sandbox is DEL'd, so every such entry goes). An entry
//!   of another container at the same `podref`, the pod's next sandbox, is
//!   not the sandbox's and stays;
//! - the OverlappingRangeIPReservation of each address given back, when it
//!   names the sandbox's pod and interface (whereabouts' DEL deletes the
//!   reservation of the address it deallocated,
//!   `UpdateOverlappingRangeAllocation`).
//!
//! The pools are those of plexus's kubeconfig's namespace (whereabouts' own
//! default, `wbNamespaceFromCtx`). The order is DEL's: reservations first,
//! the entries last (what a retried DEL looks for).

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::{ClusterIpamError, CALL_BUDGET};
use crate::cluster::kube::SharedApi;
use crate::cni::names::ContainerId;
use crate::config::PlexusConf;
use crate::whereabouts::pools::{namespace_of, Change, PoolCopy, Pools, Written};
use plexus_ipam::whereabouts::pool::{self, Allocation};

/// What was given back.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Released {
    /// `pool/offset` of each entry removed.
    pub entries: Vec<String>,
    /// Names of the reservations deleted.
    pub reservations: Vec<String>,
}

/// How many times a pool's write is tried against other writers.
const TRIES: u32 = 8;

/// Gives back every whereabouts address the sandbox `container_id` of the
/// pod `podref` (`namespace/name`) holds in the pools of plexus's
/// kubeconfig: the daemon's connection when there is one, else one of its
/// own. Nothing without a kubeconfig, or without whereabouts' CRDs.
pub fn release_unrecorded(
    conf: &PlexusConf,
    daemon: Option<&SharedApi>,
    container_id: &ContainerId,
    podref: &str,
) -> Result<Released, ClusterIpamError> {
    let Some(kubeconfig) = &conf.kubeconfig else {
        return Ok(Released::default());
    };
    let namespace = namespace_of(kubeconfig)?;
    let pools = match daemon {
        Some(api) => Pools::uncached(&api.handle, &api.client, api.timeouts, namespace),
        None => Pools::connect(kubeconfig, conf.api_timeouts)?,
    };
    let listed = match pools.list() {
        Ok(listed) => listed,
        // whereabouts is not installed: nothing can be held.
        Err(e) if e.status() == Some(404) => return Ok(Released::default()),
        Err(e) => return Err(e.into()),
    };
    let mut released = Released::default();
    let held: Vec<(PoolCopy, BTreeMap<String, Allocation>)> = listed
        .into_iter()
        .filter_map(|copy| {
            let mine = sandbox_entries(&copy, container_id, podref);
            (!mine.is_empty()).then_some((copy, mine))
        })
        .collect();
    if held.is_empty() {
        return Ok(released);
    }
    let reservations = pools.reservations()?;
    for (copy, mine) in &held {
        let Some(network) = copy.spec.range.parse().ok() else {
            continue;
        };
        for (key, entry) in mine {
            let Some(ip) = pool::address_at(network, key) else {
                continue;
            };
            for (name, held) in &reservations {
                // A reservation without interface or container is the pod's.
                let ours = held.spec.podref == entry.podref
                    && (held.spec.ifname.is_none() || held.spec.ifname == entry.ifname)
                    && held
                        .spec
                        .container_id
                        .as_ref()
                        .is_none_or(|id| *id == entry.container_id);
                if ours && names_reservation_of(name, &copy.name, ip) {
                    pools.unreserve(name, held)?;
                    released.reservations.push(name.clone());
                }
            }
        }
        remove_entries(&pools, copy, container_id, podref)?;
        released
            .entries
            .extend(mine.keys().map(|key| format!("{}/{key}", copy.name)));
    }
    Ok(released)
}

/// The entries (and erased entries' backups) of `copy` that the sandbox
/// `container_id` of `podref` holds.
fn sandbox_entries(
    copy: &PoolCopy,
    container_id: &ContainerId,
    podref: &str,
) -> BTreeMap<String, Allocation> {
    let of = |a: &Allocation| a.container_id == *container_id && a.podref == podref;
    let erased = copy
        .backups
        .iter()
        .filter(|(key, _)| !copy.spec.allocations.contains_key(*key));
    copy.spec
        .allocations
        .iter()
        .chain(erased)
        .filter(|(_, a)| of(a))
        .map(|(k, a)| (k.clone(), a.clone()))
        .collect()
}

/// Removes the sandbox's entries from the pool `copy` by compare-and-swap,
/// deciding again on a fresh copy after each loss.
fn remove_entries(
    pools: &Pools,
    copy: &PoolCopy,
    container_id: &ContainerId,
    podref: &str,
) -> Result<(), ClusterIpamError> {
    let mut copy = copy.clone();
    for tries in 1..=TRIES {
        let changes: BTreeMap<String, Change> = sandbox_entries(&copy, container_id, podref)
            .into_keys()
            .map(|key| (key, Change::Remove))
            .collect();
        if changes.is_empty() || pools.write(&copy, &changes)? == Written::Done {
            return Ok(());
        }
        std::thread::sleep(super::backoff(tries));
        match pools.existing(&copy.name, true)? {
            Some(fresh) => copy = fresh,
            None => return Ok(()),
        }
    }
    Err(ClusterIpamError::Contended {
        pool: copy.name.clone(),
        tries: TRIES,
        budget: CALL_BUDGET,
    })
}

/// Whether the reservation `name` is that of `ip` for the network of the
/// pool `pool_name`: `[<network_name>-]<ip>` (`NormalizeIP`), where the
/// pool is named `[<network_name>-][<node>-]<range>` (`IPPoolName`), so the
/// reservation's prefix is one the pool's name starts with.
fn names_reservation_of(name: &str, pool_name: &str, ip: IpAddr) -> bool {
    let address = pool::reservation_name(ip, None);
    let Some(prefix) = name.strip_suffix(&address) else {
        return false;
    };
    prefix.is_empty() || (prefix.ends_with('-') && pool_name.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_is_matched_by_its_address_and_network() {
        let ip: IpAddr = "fd77::5".parse().unwrap();
        assert!(names_reservation_of("fd77--5", "fd77---64", ip));
        assert!(names_reservation_of("blue-fd77--5", "blue-fd77---64", ip));
        assert!(names_reservation_of(
            "blue-fd77--5",
            "blue-node-1-fd77---64",
            ip
        ));
        assert!(!names_reservation_of("red-fd77--5", "blue-fd77---64", ip));
        assert!(!names_reservation_of("fd77--55", "fd77---64", ip));
        assert!(!names_reservation_of("xfd77--5", "xfd77---64", ip));
        let v4: IpAddr = "10.0.0.5".parse().unwrap();
        assert!(names_reservation_of("net-10.0.0.5", "net-10.0.0.0-24", v4));
        assert!(!names_reservation_of(
            "net-110.0.0.5",
            "net-10.0.0.0-24",
            v4
        ));
    }

    #[test]
    fn only_the_sandboxes_entries_are_its() {
        let entry = |id: &str, podref: &str| Allocation {
            container_id: ContainerId::new(id).unwrap(),
            podref: podref.into(),
            ifname: Some(crate::cni::names::IfName::new("net1").unwrap()),
        };
        let mut copy = PoolCopy {
            name: "p".into(),
            resource_version: "1".into(),
            spec: Default::default(),
            notes: Default::default(),
            claims: Default::default(),
            backups: Default::default(),
        };
        copy.spec
            .allocations
            .insert("1".into(), entry("c1", "ns/a"));
        copy.spec
            .allocations
            .insert("2".into(), entry("c2", "ns/a"));
        copy.spec
            .allocations
            .insert("3".into(), entry("c1", "ns/b"));
        let mut net2 = entry("c1", "ns/a");
        net2.ifname = Some(crate::cni::names::IfName::new("net2").unwrap());
        copy.spec.allocations.insert("4".into(), net2);
        copy.backups.insert("9".into(), entry("c1", "ns/a"));
        copy.backups.insert("2".into(), entry("c1", "ns/a"));
        let mine: Vec<String> = sandbox_entries(&copy, &ContainerId::new("c1").unwrap(), "ns/a")
            .into_keys()
            .collect();
        assert_eq!(
            mine,
            ["1", "4", "9"],
            "the next sandbox's and another pod's stay"
        );
    }
}
