//! Which allocations belong to pods that are gone (issue 33 item 6): the
//! pure judgement of the reconciler (`plexus::whereabouts::reconcile`),
//! from the pools and the pods the API server listed.
//!
//! whereabouts' entry names the pod only by `podref` (`namespace/name`),
//! and a pod deleted and made again under its name (a StatefulSet's) is
//! another pod; judged by name, its predecessor's address would look held
//! for ever (whereabouts #176). So plexus notes, beside each entry it
//! writes, the pod's UID (kubelet's `K8S_POD_UID`) and the entry's
//! container, in an annotation of the IPPool written by the same
//! compare-and-swap ([`note_key`], [`note_value`]). whereabouts keeps
//! annotations it does not know when it writes a pool (its PATCH is the
//! difference of `spec.allocations` alone, `KubernetesIPPool.Update`), and the note names the container, so a note
//! outlived by its entry (whereabouts gave the offset to another pod) is
//! never read as the new entry's.
//!
//! An entry bound to an IPAMClaim (multi-net-spec §8) carries a second
//! note, the claim's `namespace/name` ([`claim_key`]): its address
//! outlives every pod while the claim exists, and goes once the claim is
//! deleted and its last pod is gone too.
//!
//! An entry is live, and never reclaimed, when its pod (by `podref`)
//! exists and either the note's UID is that pod's, or there is no note (an
//! entry whereabouts wrote, or one from a runtime that sends no UID: then
//! the name is all there is, and a pod of that name keeps it), or the pod
//! is a static pod's mirror (whose UID is not the one kubelet sends).

use std::collections::{HashMap, HashSet};

use super::pool::{whereabouts_can_read, Allocation};

/// The annotation prefix of the notes: `pod-uid.plexus.io/<offset>`.
pub const NOTE_PREFIX: &str = "pod-uid.plexus.io/";

/// The annotation prefix of the claim notes:
/// `ipam-claim.plexus.io/<offset>: <namespace>/<claim>/<container>`.
pub const CLAIM_PREFIX: &str = "ipam-claim.plexus.io/";

/// The annotation that notes the claim of the entry at `offset`.
pub fn claim_key(offset: &str) -> String {
    format!("{CLAIM_PREFIX}{offset}")
}

/// How many notes a pool carries at most: an object's annotations may
/// hold 256 KiB in all, a note takes about 75 bytes. Entries past it go
/// without one (judged by name).
pub const MAX_NOTES: usize = 2000;

/// The annotation that notes the entry at `offset`.
pub fn note_key(offset: &str) -> String {
    format!("{NOTE_PREFIX}{offset}")
}

/// How many characters of the container ID a note keeps: enough to tell
/// two sandboxes apart (docker's short IDs are 12).
const CONTAINER_PREFIX: usize = 16;

/// A note: `<pod UID>/<container ID's first characters>`.
pub fn note_value(pod_uid: &str, container_id: &str) -> String {
    let short: String = container_id.chars().take(CONTAINER_PREFIX).collect();
    format!("{pod_uid}/{short}")
}

/// Whether a note's `short` form names `container_id`.
fn names_container(short: &str, container_id: &str) -> bool {
    !short.is_empty()
        && container_id.starts_with(short)
        && (short.len() == CONTAINER_PREFIX || short == container_id)
}

/// The pod UID a note gives for `entry`; `None` when the note is of
/// another container (the entry was written anew since) or malformed.
pub fn noted_uid<'a>(note: &'a str, entry: &Allocation) -> Option<&'a str> {
    let (uid, short) = note.rsplit_once('/')?;
    (!uid.is_empty() && names_container(short, &entry.container_id)).then_some(uid)
}

/// A claim note: `<namespace>/<claim>/<container ID's first characters>`.
pub fn claim_note(claim: &str, container_id: &str) -> String {
    let short: String = container_id.chars().take(CONTAINER_PREFIX).collect();
    format!("{claim}/{short}")
}

/// The claim (`namespace/name`) a claim note gives for the offset whose
/// entry is `entry`: when the entry is the noted container's, or there is
/// none (its pod's DEL by whereabouts removed it; the address is free).
/// `None` when the offset is another container's now (whereabouts gave
/// it to another pod) or the note is malformed.
pub fn noted_claim<'a>(note: &'a str, entry: Option<&Allocation>) -> Option<&'a str> {
    let (claim, short) = note.rsplit_once('/')?;
    let of_entry = entry.is_none_or(|e| names_container(short, &e.container_id));
    (claim.contains('/') && of_entry).then_some(claim)
}

/// The annotation prefix of the backups: `entry.plexus.io/<offset>`, the
/// entry's own wire form, kept beside each entry at an offset whereabouts
/// cannot read ([`needs_backup`]).
///
/// Why: whereabouts skips such a key as if its address were free and
/// writes back only the keys it read, so its next write of the pool erases
/// the entry (issue 45). plexus no longer writes such offsets
/// (`allocate::searched`), but pods that earlier plexus releases placed
/// there keep their addresses; the backup, which whereabouts' write keeps
/// (it patches `spec.allocations` alone), lets the reconciler write the
/// entry back while its pod lives ([`judge_backup`]).
pub const BACKUP_PREFIX: &str = "entry.plexus.io/";

/// The annotation of the backup of the entry at `offset`.
pub fn backup_key(offset: &str) -> String {
    format!("{BACKUP_PREFIX}{offset}")
}

/// Whether the entry at the key `offset` needs a backup: its offset is past
/// what whereabouts reads.
pub fn needs_backup(offset: &str) -> bool {
    offset
        .parse::<u128>()
        .is_ok_and(|o| !whereabouts_can_read(o))
}

/// What becomes of a backup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackupFate {
    /// Its entry is there as it was: nothing to do.
    Keep,
    /// Its entry is gone (another writer erased it) and its pod lives:
    /// the entry is written back.
    Restore,
    /// Its entry's pod is gone, or the offset holds another entry now:
    /// the backup goes.
    Drop,
}

/// The fate of `backup`, the backup at an offset whose entry is now
/// `current`, with the offset's pod-UID note `note`: the entry is written
/// back only when its pod is live as [`judge`] tells it (the note's UID
/// is the pod's, so a pod made again under the name never gets it).
pub fn judge_backup(
    backup: &Allocation,
    current: Option<&Allocation>,
    note: Option<&str>,
    pods: &HashMap<String, PodSeen>,
) -> BackupFate {
    match current {
        Some(entry) if entry == backup => BackupFate::Keep,
        Some(_) => BackupFate::Drop,
        None if judge(backup, note, pods).is_none() => BackupFate::Restore,
        None => BackupFate::Drop,
    }
}

/// A pod as the reconciler saw it listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSeen {
    pub uid: String,
    /// A static pod's mirror (`kubernetes.io/config.mirror`).
    pub mirror: bool,
}

/// Why an allocation's holder is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    /// No pod of its `podref`.
    PodMissing,
    /// The pod of that name is another (a different UID).
    PodReplaced,
    /// Bound to an IPAMClaim that was deleted, and no pod holds it.
    ClaimDeleted,
}

impl Gone {
    pub fn as_str(self) -> &'static str {
        match self {
            Gone::PodMissing => "pod-missing",
            Gone::PodReplaced => "pod-replaced",
            Gone::ClaimDeleted => "claim-deleted",
        }
    }
}

/// Whether `entry` (with its pool's note, if any) is held by a pod that is
/// gone; `None`: live. `pods` are keyed by `namespace/name`, listed after
/// the pool was read (so a pod that made an entry of the copy is in it
/// unless deleted since).
pub fn judge(
    entry: &Allocation,
    note: Option<&str>,
    pods: &HashMap<String, PodSeen>,
) -> Option<Gone> {
    let Some(pod) = pods.get(&entry.podref) else {
        return Some(Gone::PodMissing);
    };
    match note.and_then(|n| noted_uid(n, entry)) {
        Some(uid) if uid != pod.uid && !pod.mirror => Some(Gone::PodReplaced),
        _ => None,
    }
}

/// [`judge`] for an entry that may be bound to a claim (`claim`, its
/// claim note): while the claim is in `claims` (listed after the pool) the
/// entry is live whoever held it; once deleted, it goes with its pod.
pub fn judge_claimed(
    entry: &Allocation,
    note: Option<&str>,
    claim: Option<&str>,
    claims: &HashSet<String>,
    pods: &HashMap<String, PodSeen>,
) -> Option<Gone> {
    match claim {
        None => judge(entry, note, pods),
        Some(c) if claims.contains(c) => None,
        Some(_) => judge(entry, note, pods).map(|_| Gone::ClaimDeleted),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, podref: &str) -> Allocation {
        Allocation {
            container_id: plexus_cni::names::ContainerId::new(id).unwrap(),
            podref: podref.into(),
            ifname: Some(plexus_cni::names::IfName::new("net1").unwrap()),
        }
    }

    fn pods(list: &[(&str, &str, bool)]) -> HashMap<String, PodSeen> {
        list.iter()
            .map(|(name, uid, mirror)| {
                let seen = PodSeen {
                    uid: uid.to_string(),
                    mirror: *mirror,
                };
                (name.to_string(), seen)
            })
            .collect()
    }

    const LONG_ID: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_note_names_its_pod_and_container() {
        let note = note_value("u-1", LONG_ID);
        assert_eq!(note, "u-1/0123456789abcdef");
        assert_eq!(note_key("17"), "pod-uid.plexus.io/17");
        assert_eq!(noted_uid(&note, &entry(LONG_ID, "ns/p")), Some("u-1"));
        // Of another container: not this entry's.
        let other = "0123456789abcdef-other";
        assert_eq!(noted_uid(&note, &entry("fedcba", "ns/p")), None);
        assert_eq!(noted_uid(&note, &entry(other, "ns/p")), Some("u-1"));
        // A short container ID is kept whole and must match whole.
        let short = note_value("u-2", "c1");
        assert_eq!(noted_uid(&short, &entry("c1", "ns/p")), Some("u-2"));
        assert_eq!(noted_uid(&short, &entry("c10", "ns/p")), None);
        assert_eq!(noted_uid("garbage", &entry("c1", "ns/p")), None);
        assert_eq!(noted_uid("/c1", &entry("c1", "ns/p")), None);
    }

    #[test]
    fn a_claims_entry_outlives_its_pods_until_the_claim_goes() {
        let seen = pods(&[("ns/vm-2", "u-2", false)]);
        let claims: HashSet<String> = ["ns/vm".to_string()].into();
        let none = HashSet::new();
        let old = entry("c-1", "ns/vm-1");
        assert_eq!(
            judge_claimed(&old, None, Some("ns/vm"), &claims, &seen),
            None
        );
        assert_eq!(
            judge_claimed(&old, None, Some("ns/vm"), &none, &seen),
            Some(Gone::ClaimDeleted)
        );
        // Its pod still runs: kept, claim or none.
        let live = entry("c-2", "ns/vm-2");
        assert_eq!(
            judge_claimed(&live, None, Some("ns/vm"), &none, &seen),
            None
        );
        assert_eq!(
            judge_claimed(&old, None, None, &none, &seen),
            Some(Gone::PodMissing)
        );
        assert_eq!(claim_key("5"), "ipam-claim.plexus.io/5");
        let note = claim_note("ns/vm", "c-2");
        assert_eq!(noted_claim(&note, Some(&live)), Some("ns/vm"));
        assert_eq!(noted_claim(&note, None), Some("ns/vm"));
        assert_eq!(
            noted_claim(&note, Some(&old)),
            None,
            "another container's now"
        );
        assert_eq!(noted_claim("vm/c-2", Some(&live)), None);
    }

    /// Issue 45: an entry erased by another writer comes back while its
    /// pod lives, and only then.
    #[test]
    fn an_erased_entry_comes_back_only_to_its_live_pod() {
        let seen = pods(&[("ns/p", "u-1", false), ("ns/again", "u-new", false)]);
        let mine = entry(LONG_ID, "ns/p");
        let note = note_value("u-1", LONG_ID);
        assert_eq!(
            judge_backup(&mine, Some(&mine), Some(&note), &seen),
            BackupFate::Keep
        );
        assert_eq!(
            judge_backup(&mine, None, Some(&note), &seen),
            BackupFate::Restore
        );
        let other = entry("c-other", "ns/q");
        assert_eq!(
            judge_backup(&mine, Some(&other), Some(&note), &seen),
            BackupFate::Drop,
            "the offset is another's now"
        );
        let gone = entry("c-g", "ns/gone");
        assert_eq!(judge_backup(&gone, None, None, &seen), BackupFate::Drop);
        // The pod made again under its name: another pod.
        let replaced = entry("c-a", "ns/again");
        let old_note = note_value("u-old", "c-a");
        assert_eq!(
            judge_backup(&replaced, None, Some(&old_note), &seen),
            BackupFate::Drop
        );
        assert!(needs_backup("9223372036854775808"));
        assert!(!needs_backup("9223372036854775807"));
        assert!(!needs_backup("x"));
        assert_eq!(backup_key("7"), "entry.plexus.io/7");
    }

    /// whereabouts #176: the pod made again under its name is another pod.
    #[test]
    fn the_uid_not_the_name_decides() {
        let seen = pods(&[
            ("ns/web-0", "u-new", false),
            ("ns/static", "u-mirror", true),
        ]);
        let old = entry("c-old", "ns/web-0");
        let note = note_value("u-old", "c-old");
        assert_eq!(judge(&old, Some(&note), &seen), Some(Gone::PodReplaced));
        let current = note_value("u-new", "c-old");
        assert_eq!(judge(&old, Some(&current), &seen), None);
        // No note (whereabouts wrote it): a pod of that name keeps it.
        assert_eq!(judge(&old, None, &seen), None);
        // A note of another container says nothing of this entry.
        let stale = note_value("u-old", "c-other");
        assert_eq!(judge(&old, Some(&stale), &seen), None);
        // A mirror pod's UID is not kubelet's: kept.
        let mirror = entry("c-s", "ns/static");
        let note = note_value("u-static", "c-s");
        assert_eq!(judge(&mirror, Some(&note), &seen), None);
        // No pod of the name at all.
        let gone = entry("c-g", "ns/gone");
        assert_eq!(judge(&gone, None, &seen), Some(Gone::PodMissing));
    }
}
