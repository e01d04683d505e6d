//! Which address of a pool an attachment gets, and which it gives back: pure
//! functions of the pool's allocations, so the caller can retry them on a
//! fresh copy whenever its compare-and-swap write loses (see
//! `crate::whereabouts`'s invariant).
//!
//! As whereabouts' `AssignIP`/`IterateForAssignment`/`DeallocateIP`: an
//! attachment (`podref` + `ifname`) that already holds an address of the
//! pool gets it again; otherwise the first free address from the hint on,
//! skipping `exclude`, other pools' reservations, and the range's network
//! and broadcast addresses. DEL matches the container ID and `ifname`.

use plexus_cni::names::{ContainerId, IfName};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::conf::{usable, PoolRange};
use super::pool::{address_at, offset_key, Allocation};
use super::reclaim::noted_claim;
use crate::range::{from_u128, to_u128};

/// Who asks for an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder<'a> {
    pub container_id: &'a ContainerId,
    /// `<namespace>/<pod>`.
    pub podref: &'a str,
    pub ifname: &'a IfName,
}

/// A [`Holder`] that owns its names: a request queued for a pool's turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderBuf {
    pub container_id: ContainerId,
    pub podref: String,
    pub ifname: IfName,
}

impl HolderBuf {
    pub fn holder(&self) -> Holder<'_> {
        Holder {
            container_id: &self.container_id,
            podref: &self.podref,
            ifname: &self.ifname,
        }
    }
}

impl Holder<'_> {
    pub fn to_buf(&self) -> HolderBuf {
        HolderBuf {
            container_id: self.container_id.clone(),
            podref: self.podref.to_string(),
            ifname: self.ifname.clone(),
        }
    }

    pub fn allocation(&self) -> Allocation {
        Allocation {
            container_id: self.container_id.clone(),
            podref: self.podref.to_string(),
            ifname: Some(self.ifname.clone()),
        }
    }
}

/// What [`assign`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub ip: IpAddr,
    /// The pool's key of it (its offset).
    pub key: String,
    /// The entry to write at `key`; `None` when the pool already holds it
    /// exactly so (nothing to write).
    pub write: Option<Allocation>,
}

/// The range has no free address left (whereabouts' `AssignmentError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no free address in {range} from {first} to {last} (exclude: {exclude:?})")]
pub struct Exhausted {
    pub range: String,
    pub first: IpAddr,
    pub last: IpAddr,
    pub exclude: Vec<String>,
}

/// The first and last address `range` hands out.
pub fn bounds(range: &PoolRange) -> (IpAddr, IpAddr) {
    let (first, last) = usable(range.network);
    (range.start.unwrap_or(first), range.end.unwrap_or(last))
}

/// How many addresses `range` hands out at most (before `exclude`).
pub fn capacity(range: &PoolRange) -> u128 {
    let (first, last) = bounds(range);
    to_u128(last) - to_u128(first) + 1
}

/// The first and last address [`assign`] searches: [`bounds`], ending at
/// the last address whose offset whereabouts can read
/// ([`super::pool::whereabouts_can_read`]).
///
/// Why the bound: whereabouts parses a pool's keys as signed 64-bit
/// integers (`strconv.ParseInt` in `toIPReservationList`,
/// `pkg/storage/kubernetes/ipam.go`), skips any other as if its address
/// were free, and writes back only what it read: its next write to the pool
/// erases the entry (issue 45). In an IPv6 /64 and wider, half the range
/// lies past 2^63. Only a range that starts past it (`range_start` there)
/// is searched whole: no key in it can be read, whereabouts' own neither.
pub fn searched(range: &PoolRange) -> (IpAddr, IpAddr) {
    let (first, last) = bounds(range);
    let readable_end = to_u128(range.network.network()).saturating_add(i64::MAX as u128);
    if to_u128(first) > readable_end || to_u128(last) <= readable_end {
        return (first, last);
    }
    (first, from_u128(readable_end, range.network.is_ipv4()))
}

/// The address `who` gets from `range`, whose pool holds `allocations`;
/// `taken` are addresses held through other pools (overlapping ranges).
/// The search starts `hint` addresses after the first and wraps around, so
/// that writers on different nodes need not all race for the same one; it
/// stays within [`searched`], so whereabouts can read every key it writes.
pub fn assign(
    range: &PoolRange,
    allocations: &BTreeMap<String, Allocation>,
    taken: &BTreeSet<IpAddr>,
    who: &Holder,
    hint: u128,
) -> Result<Assignment, Exhausted> {
    if let Some((key, held)) = allocations
        .iter()
        .find(|(_, a)| a.is_of(who.podref, who.ifname))
    {
        if let Some(ip) = address_at(range.network, key) {
            let write = (held.container_id != *who.container_id).then(|| who.allocation());
            return Ok(Assignment {
                ip,
                key: key.clone(),
                write,
            });
        }
    }
    let held: BTreeSet<u128> = allocations
        .keys()
        .filter_map(|k| address_at(range.network, k))
        .chain(taken.iter().copied())
        .map(to_u128)
        .collect();
    let (first, last) = searched(range);
    let (lo, hi) = (to_u128(first), to_u128(last));
    let span = hi - lo + 1;
    let start = lo + hint % span;
    let free = first_free(range, &held, start, hi).or_else(|| {
        (start > lo)
            .then(|| first_free(range, &held, lo, start - 1))
            .flatten()
    });
    if let Some(at) = free {
        let ip = from_u128(at, range.network.is_ipv4());
        return Ok(Assignment {
            ip,
            key: offset_key(range.network, ip),
            write: Some(who.allocation()),
        });
    }
    Err(Exhausted {
        range: range.network.to_string(),
        first,
        last,
        exclude: range.exclude.iter().map(|n| n.to_string()).collect(),
    })
}

/// What an attachment bound to an IPAMClaim asks for (multi-net-spec §8):
/// the claim (`namespace/name`), the pool's claim notes by offset
/// ([`super::reclaim::claim_note`]), and the claim's `status.ips` (the
/// addresses it had).
pub struct ClaimAsk<'a> {
    pub claim: &'a str,
    pub claims: &'a BTreeMap<String, String>,
    pub preferred: &'a [IpAddr],
}

/// The address an attachment bound to a claim gets: the one the pool notes
/// for the claim, whoever held it last (it follows the claim from pod to
/// pod, and node to node); else the first of the claim's `status.ips`
/// that is free here; else as [`assign`]. Also returns the entry the
/// claim's address was taken over from, if another's.
pub fn assign_for_claim(
    range: &PoolRange,
    allocations: &BTreeMap<String, Allocation>,
    ask: &ClaimAsk,
    taken: &BTreeSet<IpAddr>,
    who: &Holder,
    hint: u128,
) -> Result<(Assignment, Option<Allocation>), Exhausted> {
    let noted = ask
        .claims
        .iter()
        .find(|(key, note)| noted_claim(note, allocations.get(*key)) == Some(ask.claim));
    if let Some((key, ip)) = noted.and_then(|(k, _)| Some((k, address_at(range.network, k)?))) {
        let mine = who.allocation();
        let previous = allocations.get(key).filter(|held| **held != mine).cloned();
        let write = (allocations.get(key) != Some(&mine)).then_some(mine);
        let assignment = Assignment {
            ip,
            key: key.clone(),
            write,
        };
        return Ok((assignment, previous));
    }
    let (first, last) = bounds(range);
    let free = |ip: &&IpAddr| {
        let at = to_u128(**ip);
        ip.is_ipv4() == range.network.is_ipv4()
            && (to_u128(first)..=to_u128(last)).contains(&at)
            && !range.exclude.iter().any(|n| n.contains(**ip))
            && !taken.contains(ip)
            && !allocations.contains_key(&offset_key(range.network, **ip))
    };
    if let Some(ip) = ask.preferred.iter().find(free) {
        let assignment = Assignment {
            ip: *ip,
            key: offset_key(range.network, *ip),
            write: Some(who.allocation()),
        };
        return Ok((assignment, None));
    }
    assign(range, allocations, taken, who, hint).map(|a| (a, None))
}

/// The first address from `from` to `to` (inclusive) that is neither held
/// nor excluded.
fn first_free(range: &PoolRange, held: &BTreeSet<u128>, from: u128, to: u128) -> Option<u128> {
    let v4 = range.network.is_ipv4();
    let mut at = from;
    while at <= to {
        let ip = from_u128(at, v4);
        if let Some(net) = range.exclude.iter().find(|n| n.contains(ip)) {
            // On past the excluded network's last address.
            at = to_u128(net.broadcast_or_last()).checked_add(1)?;
        } else if held.contains(&at) {
            at += 1;
        } else {
            return Some(at);
        }
    }
    None
}

/// The key of the address the container's `ifname` holds in the pool, to
/// remove (`DeallocateIP`: by container ID and interface, not by pod).
pub fn release<'a>(
    allocations: &'a BTreeMap<String, Allocation>,
    container_id: &ContainerId,
    ifname: &IfName,
) -> Option<&'a String> {
    allocations
        .iter()
        .find(|(_, a)| a.container_id == *container_id && a.is_on(ifname))
        .map(|(k, _)| k)
}

/// The key of the address the container's `ifname` holds: [`release`]'s,
/// else that of a backup of its entry (`reclaim::BACKUP_PREFIX`) that
/// another writer erased, whose address is still the container's until its
/// DEL.
pub fn held_key<'a>(
    allocations: &'a BTreeMap<String, Allocation>,
    backups: &'a BTreeMap<String, Allocation>,
    container_id: &ContainerId,
    ifname: &IfName,
) -> Option<&'a String> {
    release(allocations, container_id, ifname).or_else(|| {
        let erased = release(backups, container_id, ifname)?;
        (!allocations.contains_key(erased)).then_some(erased)
    })
}

trait LastAddress {
    fn broadcast_or_last(&self) -> IpAddr;
}

impl LastAddress for ipnetwork::IpNetwork {
    /// The network's last address (all host bits set).
    fn broadcast_or_last(&self) -> IpAddr {
        match self {
            ipnetwork::IpNetwork::V4(n) => IpAddr::V4(n.broadcast()),
            ipnetwork::IpNetwork::V6(n) => {
                let host_bits = 128 - u32::from(n.prefix());
                let mask = 1u128.checked_shl(host_bits).map_or(u128::MAX, |m| m - 1);
                IpAddr::V6((u128::from(n.network()) | mask).into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::pool::whereabouts_can_read;
    use super::*;
    use ipnetwork::IpNetwork;
    use std::sync::LazyLock;

    fn range(net: &str, exclude: &[&str]) -> PoolRange {
        PoolRange {
            network: net.parse().unwrap(),
            start: None,
            end: None,
            exclude: exclude
                .iter()
                .map(|e| e.parse::<IpNetwork>().unwrap())
                .collect(),
        }
    }

    #[test]
    fn a_claims_address_follows_the_claim() {
        let r = range("10.0.0.0/24", &["10.0.0.8/29"]);
        let held = holding(&[("5", "c-old", "ns/vm-a-1"), ("6", "c-x", "ns/x")]);
        let claims: BTreeMap<String, String> = [
            ("5".to_string(), "ns/vm-a/c-old".to_string()),
            // Another container holds offset 6 now: not the claim's.
            ("6".to_string(), "ns/vm-b/c-gone".to_string()),
        ]
        .into();
        let none = BTreeSet::new();
        let ask = ClaimAsk {
            claim: "ns/vm-a",
            claims: &claims,
            preferred: &[],
        };
        // The claim's entry, taken over from the pod that held it.
        let (got, previous) = assign_for_claim(&r, &held, &ask, &none, &who(), 0).unwrap();
        assert_eq!(got.ip.to_string(), "10.0.0.5");
        assert_eq!(got.write, Some(who().allocation()));
        assert_eq!(previous.unwrap().container_id, "c-old");
        // Held by this attachment already: nothing to write.
        let mine = holding(&[("5", "c1", "ns/p")]);
        let claims_now: BTreeMap<String, String> =
            [("5".to_string(), "ns/vm-a/c1".to_string())].into();
        let now = ClaimAsk {
            claims: &claims_now,
            ..ask
        };
        let (got, previous) = assign_for_claim(&r, &mine, &now, &none, &who(), 0).unwrap();
        assert_eq!((got.write, previous), (None, None));
        // No entry for the claim: its status.ips first, when free here.
        let other = ClaimAsk {
            claim: "ns/vm-b",
            claims: &claims,
            preferred: &[
                "10.0.0.6".parse().unwrap(),
                "10.0.0.9".parse().unwrap(),
                "10.1.0.1".parse().unwrap(),
                "10.0.0.20".parse().unwrap(),
            ],
        };
        let (got, _) = assign_for_claim(&r, &held, &other, &none, &who(), 0).unwrap();
        assert_eq!(
            got.ip.to_string(),
            "10.0.0.20",
            "held, excluded, out of range skipped"
        );
        let nothing = ClaimAsk {
            preferred: &[],
            ..other
        };
        let (got, _) = assign_for_claim(&r, &held, &nothing, &none, &who(), 0).unwrap();
        assert_eq!(got.ip.to_string(), "10.0.0.1");
    }

    static C1: LazyLock<ContainerId> = LazyLock::new(|| ContainerId::new("c1").unwrap());
    static NET1: LazyLock<IfName> = LazyLock::new(|| IfName::new("net1").unwrap());

    fn cid(id: &str) -> ContainerId {
        ContainerId::new(id).unwrap()
    }

    fn ifn(name: &str) -> IfName {
        IfName::new(name).unwrap()
    }

    fn who() -> Holder<'static> {
        Holder {
            container_id: &C1,
            podref: "ns/p",
            ifname: &NET1,
        }
    }

    fn holding(entries: &[(&str, &str, &str)]) -> BTreeMap<String, Allocation> {
        entries
            .iter()
            .map(|(k, id, podref)| {
                let a = Allocation {
                    container_id: ContainerId::new(*id).unwrap(),
                    podref: podref.to_string(),
                    ifname: Some(NET1.clone()),
                };
                (k.to_string(), a)
            })
            .collect()
    }

    #[test]
    fn lowest_free_address_skipping_network_excluded_and_held() {
        // IterateForAssignment: from the first usable address (.1).
        let r = range("10.0.0.0/24", &["10.0.0.2/31", "10.0.0.5"]);
        let none = BTreeSet::new();
        let a = assign(&r, &BTreeMap::new(), &none, &who(), 0).unwrap();
        assert_eq!((a.ip.to_string(), a.key.as_str()), ("10.0.0.1".into(), "1"));
        let held = holding(&[("1", "x", "ns/x"), ("4", "y", "ns/y")]);
        let a = assign(&r, &held, &none, &who(), 0).unwrap();
        assert_eq!(a.ip.to_string(), "10.0.0.6");
        let taken: BTreeSet<IpAddr> = ["10.0.0.6".parse().unwrap()].into();
        let a = assign(&r, &held, &taken, &who(), 0).unwrap();
        assert_eq!(a.ip.to_string(), "10.0.0.7");
    }

    #[test]
    fn the_same_pod_interface_gets_its_address_again() {
        // AssignIP: by podref and ifname; a new container ID is written.
        let r = range("10.0.0.0/24", &[]);
        let held = holding(&[("9", "old", "ns/p")]);
        let a = assign(&r, &held, &BTreeSet::new(), &who(), 0).unwrap();
        assert_eq!(a.ip.to_string(), "10.0.0.9");
        assert_eq!(a.write.unwrap().container_id, "c1");
        let held = holding(&[("9", "c1", "ns/p")]);
        let a = assign(&r, &held, &BTreeSet::new(), &who(), 0).unwrap();
        assert_eq!(a.write, None);
    }

    #[test]
    fn hints_spread_and_wrap() {
        let r = range("10.0.0.0/29", &[]); // .1 to .6
        let held = holding(&[("5", "x", "ns/x"), ("6", "y", "ns/y")]);
        let a = assign(&r, &held, &BTreeSet::new(), &who(), 4).unwrap();
        assert_eq!(a.ip.to_string(), "10.0.0.1", "wrapped past .5 and .6");
        let a = assign(&r, &BTreeMap::new(), &BTreeSet::new(), &who(), 2).unwrap();
        assert_eq!(a.ip.to_string(), "10.0.0.3");
    }

    #[test]
    fn a_full_range_is_exhausted() {
        let mut r = range("10.0.0.0/29", &["10.0.0.4/30"]);
        r.start = Some("10.0.0.2".parse().unwrap());
        let held = holding(&[("2", "x", "ns/x"), ("3", "y", "ns/y")]);
        for hint in 0..8 {
            let e = assign(&r, &held, &BTreeSet::new(), &who(), hint).unwrap_err();
            assert_eq!(e.first.to_string(), "10.0.0.2");
            assert_eq!(e.last.to_string(), "10.0.0.6");
        }
    }

    #[test]
    fn ipv6_beyond_the_first_2_pow_64_offsets() {
        let mut r = range("fd00::/32", &[]);
        r.start = Some("fd00:0:ffff:ffff:ffff:ffff:ffff:fff0".parse().unwrap());
        let a = assign(&r, &BTreeMap::new(), &BTreeSet::new(), &who(), 0).unwrap();
        assert_eq!(a.ip.to_string(), "fd00:0:ffff:ffff:ffff:ffff:ffff:fff0");
        assert_eq!(address_at(r.network, &a.key), Some(a.ip));
    }

    /// Issue 45: in a /64 every key written is one whereabouts' `ParseInt`
    /// reads, whatever the hint; the hints still spread.
    #[test]
    fn a_wide_ipv6_range_gets_keys_whereabouts_reads() {
        let r = range("fd77::/64", &[]);
        let none = BTreeSet::new();
        let mut keys = BTreeSet::new();
        for hint in [
            0,
            1,
            u128::from(u64::MAX),
            u128::from(u64::MAX) - 7,
            1 << 63,
            3 << 62,
        ] {
            let a = assign(&r, &BTreeMap::new(), &none, &who(), hint).unwrap();
            let offset: u128 = a.key.parse().unwrap();
            assert!(whereabouts_can_read(offset), "{} from hint {hint}", a.key);
            assert_eq!(address_at(r.network, &a.key), Some(a.ip));
            keys.insert(a.key);
        }
        assert!(keys.len() >= 4, "spread: {keys:?}");
        // The searched part ends at offset 2^63 - 1; past it, a search
        // wraps to the first address.
        let (first, last) = searched(&r);
        assert_eq!(first.to_string(), "fd77::1");
        assert_eq!(last.to_string(), "fd77::7fff:ffff:ffff:ffff");
        let held = holding(&[(&i64::MAX.to_string(), "x", "ns/x")]);
        let a = assign(&r, &held, &none, &who(), i64::MAX as u128 - 1).unwrap();
        assert_eq!(a.ip.to_string(), "fd77::1");
        // A /120 or an IPv4 range is searched whole.
        let small = range("fd94::/120", &[]);
        assert_eq!(searched(&small), bounds(&small));
        // A range that starts past the readable part is searched whole.
        let mut far = range("fd00::/32", &[]);
        far.start = Some("fd00:0:ffff::1".parse().unwrap());
        assert_eq!(searched(&far), bounds(&far));
    }

    #[test]
    fn release_matches_container_and_interface() {
        let held = holding(&[("3", "c1", "ns/p"), ("4", "c2", "ns/p")]);
        assert_eq!(
            release(&held, &cid("c2"), &ifn("net1")).map(String::as_str),
            Some("4")
        );
        assert_eq!(release(&held, &cid("c2"), &ifn("net2")), None);
        assert_eq!(release(&held, &cid("c3"), &ifn("net1")), None);
        // An erased entry's backup is found; one whose offset another
        // entry holds now is not.
        let backups = holding(&[("9", "c3", "ns/q"), ("4", "c4", "ns/r")]);
        let found = held_key(&held, &backups, &cid("c3"), &ifn("net1"));
        assert_eq!(found.map(String::as_str), Some("9"));
        assert_eq!(held_key(&held, &backups, &cid("c4"), &ifn("net1")), None);
        let found = held_key(&held, &backups, &cid("c1"), &ifn("net1"));
        assert_eq!(found.map(String::as_str), Some("3"));
    }
}
