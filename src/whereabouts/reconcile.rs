//! The reconciler of cluster-wide IPAM (issue 33 item 6): addresses held
//! by pods that are gone (deleted, their node deleted, a crash between ADD
//! and DEL that no DEL followed) are given back, and a live pod's address
//! never is.
//!
//! It runs in the daemons already deployed (`plexus daemon`), one of them
//! at a time: the holder of the Lease [`LEASE_NAME`] in `kube-system`
//! ([`crate::cluster::lease`]). Each pass makes a fixed number of requests
//! whatever the pools hold: one LIST of the IPPools and one of the
//! OverlappingRangeIPReservations of the cluster (or of each namespace
//! `--ipam-reconcile-namespaces` names), then one LIST of pod
//! metadata per namespace that holds addresses (pages of 500), then a
//! write per pool that has something to give back.
//!
//! Safety:
//! - the pods are listed after the pools: a pod that wrote an entry of the
//!   copy is in the list unless it was deleted since;
//! - an entry is judged by the pod's UID and the entry's container
//!   ([`plexus_ipam::whereabouts::reclaim`]), never by the pod's name
//!   alone;
//! - only what two passes in a row found gone, the same container at the
//!   same offset, is given back;
//! - the entry goes by a compare-and-swap on the copy it was judged on (a
//!   pool written since, by a DEL or by the pod's new sandbox, is judged
//!   again next pass), then its reservation, by the reservation's UID (one
//!   a new sandbox made since stays).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};

use super::metrics;
use super::slicer::{SliceKeeper, SliceReport};
use crate::cluster::api::{bounded, list_metadata};
use crate::cluster::error::{ApiRequest, Verb};
use crate::cluster::lease::LeaderLease;
use crate::cluster::ClusterError;
use crate::cni::names::ContainerId;
use crate::config::ApiTimeouts;
use crate::whereabouts::pools::{self, Change, PoolCopy, Pools, ReservationSeen, Written};
use plexus_ipam::whereabouts::pool::Allocation;
use plexus_ipam::whereabouts::pool::DEFAULT_NAMESPACE;
use plexus_ipam::whereabouts::reclaim::{
    judge_backup, judge_claimed, needs_backup, noted_claim, noted_uid, BackupFate, PodSeen,
};

/// The Lease the daemons contend for.
pub const LEASE_NAME: &str = "plexus-ipam-reconciler";

/// How long the Lease holds after a renewal; renewed every third of it.
const LEASE_DURATION: Duration = Duration::from_secs(60);

/// The annotation kubelet puts on a static pod's mirror.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// What one pass found and did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassReport {
    /// Entries held by pods found gone (given back only on a second pass).
    pub suspects: usize,
    /// Entries given back.
    pub reclaimed: usize,
    /// Reservations deleted.
    pub unreserved: usize,
    /// The pools, reservations and node slice pools the pass found.
    pub objects: usize,
    /// Entries of live pods that another writer had erased, written back
    /// from their backups.
    pub restored: usize,
    /// Pool writes that lost to another writer (judged again next pass).
    pub lost: usize,
    /// What it did to node slices ([`super::slicer`]).
    pub slices: SliceReport,
}

/// Something found held by a pod that is gone, on one pass.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Suspect {
    Entry {
        namespace: String,
        pool: String,
        offset: String,
        container_id: ContainerId,
    },
    Reservation {
        namespace: String,
        name: String,
        uid: String,
    },
}

/// How long the reconciler hurries after a Node is deleted: the pod
/// garbage collector deletes a deleted node's pods once they have been
/// orphans for 40 s (it looks every 20 s), then two passes give their
/// addresses back.
const HURRY_FOR: Duration = Duration::from_secs(180);

/// The time between passes while hurrying.
const HURRY_INTERVAL: Duration = Duration::from_secs(10);

/// Whether a Node was deleted lately (issue 34 item 3: a dead node's
/// addresses come back within a bounded time, not after the next passes
/// of a 5-minute interval): the leader compares the Nodes it lists each
/// tick with the last list.
#[derive(Debug, Default)]
struct Hurry {
    nodes: Option<BTreeSet<String>>,
    until: Option<Instant>,
}

impl Hurry {
    /// The Nodes listed at `now`: one gone since the last list starts a
    /// hurry of [`HURRY_FOR`], and so does the first list of a new leader,
    /// which knows nothing of what went while the Lease was unheld (its
    /// holder may have died with its node).
    fn saw(&mut self, nodes: BTreeSet<String>, now: Instant) {
        if self
            .nodes
            .as_ref()
            .is_none_or(|before| before.iter().any(|n| !nodes.contains(n)))
        {
            self.until = Some(now + HURRY_FOR);
        }
        self.nodes = Some(nodes);
    }

    /// The Nodes of the last list that answered.
    fn nodes(&self) -> Option<&BTreeSet<String>> {
        self.nodes.as_ref()
    }

    /// `normal`, or at most [`HURRY_INTERVAL`] while hurrying.
    fn interval(&self, normal: Duration, now: Instant) -> Duration {
        match self.until {
            Some(until) if now < until => normal.min(HURRY_INTERVAL),
            _ => normal,
        }
    }
}

/// The reconciler of one daemon: its connection, and what its last pass
/// suspected.
pub struct Reconciler {
    handle: tokio::runtime::Handle,
    client: kube::Client,
    timeouts: ApiTimeouts,
    /// The namespaces whose pools it reconciles; empty: every namespace.
    namespaces: Vec<String>,
    suspects: HashSet<Suspect>,
    slices: SliceKeeper,
}

impl Reconciler {
    pub fn new(
        handle: tokio::runtime::Handle,
        client: kube::Client,
        timeouts: ApiTimeouts,
        namespaces: Vec<String>,
    ) -> Reconciler {
        Reconciler {
            handle,
            client,
            timeouts,
            namespaces,
            suspects: HashSet::new(),
            slices: SliceKeeper::default(),
        }
    }

    /// Runs for ever on this (blocking) thread: contends for the Lease and,
    /// while holding it, makes a pass every `interval`.
    pub fn run(mut self, identity: &str, interval: Duration) {
        let mut lease = LeaderLease::new(
            self.client.clone(),
            &self.handle,
            DEFAULT_NAMESPACE,
            LEASE_NAME,
            identity,
            LEASE_DURATION,
        );
        let tick = interval.min(LEASE_DURATION / 3);
        let mut last_pass: Option<Instant> = None;
        let mut hurry = Hurry::default();
        // Pools from before this daemon (one LIST at start): then there is
        // work for a leader before any call of this node.
        let mut work = match pools::any_pool(&self.handle, &self.client, self.timeouts) {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "IPAM reconciler: looking for pools");
                true
            }
        };
        let mut lease_seen = false;
        let mut empty_passes = 0;
        loop {
            // No request at all unless there is work: a Lease (another
            // daemon found some), this node's own whereabouts calls, or
            // pools at start. A Lease given up clears what this node knew.
            if lease.synced() {
                let exists = lease.exists();
                if lease_seen && !exists {
                    work = false;
                    super::take_in_use();
                }
                lease_seen = exists;
            }
            work |= super::take_in_use();
            if !lease.synced() || !(work || lease.exists()) {
                std::thread::sleep(tick);
                continue;
            }
            let held = self.handle.block_on(async {
                tokio::time::timeout(self.timeouts.request, lease.hold()).await
            });
            match held {
                Ok(Ok(true)) => {
                    match self.node_names() {
                        Ok(nodes) => hurry.saw(nodes, Instant::now()),
                        Err(e) => tracing::warn!(error = %e, "IPAM reconciler: listing the Nodes"),
                    }
                    let due = hurry.interval(interval, Instant::now());
                    if last_pass.is_none_or(|at| at.elapsed() >= due) {
                        last_pass = Some(Instant::now());
                        match self.pass(hurry.nodes()) {
                            Ok(report) => {
                                tracing::info!(?report, "IPAM reconciler pass");
                                empty_passes = if report.objects == 0 {
                                    empty_passes + 1
                                } else {
                                    0
                                };
                            }
                            Err(e) => tracing::warn!(error = %e, "IPAM reconciler pass failed"),
                        }
                        // Nothing to keep, twice in a row: the Lease goes,
                        // and every daemon is idle until one has work.
                        if empty_passes >= 2 {
                            let released = self.handle.block_on(async {
                                tokio::time::timeout(self.timeouts.request, lease.release()).await
                            });
                            if let Ok(Err(e)) = released {
                                tracing::warn!(error = %e, "IPAM reconciler: giving up the Lease");
                            }
                            work = false;
                            empty_passes = 0;
                            last_pass = None;
                        }
                    }
                }
                Ok(Ok(false)) => {
                    // Another daemon reconciles; what this one suspected
                    // is stale by the time it leads again.
                    self.suspects.clear();
                    self.slices.forget();
                    last_pass = None;
                    hurry = Hurry::default();
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "IPAM reconciler's Lease"),
                Err(_) => tracing::warn!("IPAM reconciler's Lease: no answer in time"),
            }
            std::thread::sleep(hurry.interval(tick, Instant::now()));
        }
    }

    /// The names of the cluster's Nodes, from the API server's cache
    /// (`resourceVersion=0`: no read of etcd, whatever the cluster's size).
    fn node_names(&self) -> Result<BTreeSet<String>, ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let params = ListParams::default().match_any();
        let list = self.handle.block_on(bounded(
            self.timeouts.request,
            ApiRequest::new(Verb::Get, "nodes"),
            api.list_metadata(&params),
        ))?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|node| node.metadata.name)
            .collect())
    }

    /// One pass: lists, judges, and gives back what the previous pass
    /// judged gone too; `nodes`, the leader's last list of the Nodes,
    /// judges the node slices (none: they wait for a list).
    pub fn pass(&mut self, nodes: Option<&BTreeSet<String>>) -> Result<PassReport, ClusterError> {
        let mut all = pools::Listed::default();
        let scopes: Vec<Option<&str>> = match self.namespaces.as_slice() {
            [] => vec![None],
            some => some.iter().map(|ns| Some(ns.as_str())).collect(),
        };
        for scope in scopes {
            let listed = pools::listed(&self.handle, &self.client, self.timeouts, scope)?;
            all.pools.extend(listed.pools);
            all.reservations.extend(listed.reservations);
            all.slices.extend(listed.slices);
        }
        let pools::Listed {
            pools,
            reservations,
            slices,
        } = all;
        let objects = pools.len() + reservations.len() + slices.len();
        let namespaces: BTreeSet<String> = pools
            .iter()
            .flat_map(|(_, copy)| copy.spec.allocations.values().map(|a| a.podref.clone()))
            .chain(
                reservations
                    .iter()
                    .map(|r| r.reservation.spec.podref.clone()),
            )
            .chain(
                pools
                    .iter()
                    .flat_map(|(_, copy)| copy.backups.values().map(|a| a.podref.clone())),
            )
            .filter_map(|podref| podref.split_once('/').map(|(ns, _)| ns.to_string()))
            .collect();
        let mut pods = HashMap::new();
        for namespace in &namespaces {
            self.list_pods(namespace, &mut pods)?;
        }
        // The IPAMClaims that entries are bound to, listed after the pools
        // too: a claim that bound an entry of the copy is in the list
        // unless deleted since.
        let claim_namespaces: BTreeSet<String> = pools
            .iter()
            .flat_map(|(_, copy)| copy.claims.values())
            .filter_map(|note| Some(noted_claim(note, None)?.split_once('/')?.0.to_string()))
            .collect();
        let mut claims = HashSet::new();
        for namespace in &claim_namespaces {
            self.list_claims(namespace, &mut claims)?;
        }
        let mut report = PassReport {
            objects,
            ..PassReport::default()
        };
        let mut seen = HashSet::new();
        // Containers whose entries are given back: their reservations go too.
        let mut reclaimed: HashSet<(String, ContainerId)> = HashSet::new();
        for (namespace, copy) in &pools {
            let mut changes = BTreeMap::new();
            let mut why = HashMap::new();
            for (offset, entry) in &copy.spec.allocations {
                let note = copy.notes.get(offset).map(String::as_str);
                let claim = copy
                    .claims
                    .get(offset)
                    .and_then(|c| noted_claim(c, Some(entry)));
                let Some(gone) = judge_claimed(entry, note, claim, &claims, &pods) else {
                    continue;
                };
                let suspect = Suspect::Entry {
                    namespace: namespace.clone(),
                    pool: copy.name.clone(),
                    offset: offset.clone(),
                    container_id: entry.container_id.clone(),
                };
                report.suspects += 1;
                if self.suspects.contains(&suspect) {
                    changes.insert(offset.clone(), Change::Remove);
                    why.insert(offset, gone);
                }
                seen.insert(suspect);
            }
            let restored = backups(copy, &pods, &mut changes);
            // Notes their entries outlived (whereabouts gave the offset
            // back, or to another container) go with the next write.
            for offset in copy.notes.keys().chain(copy.claims.keys()) {
                let current = copy.spec.allocations.get(offset);
                let stale_uid = copy
                    .notes
                    .get(offset)
                    .is_some_and(|note| current.is_none_or(|e| noted_uid(note, e).is_none()));
                // A claim's note stays beside no entry (its address is
                // free, the claim's next pod asks for it), not beside
                // another container's.
                let stale_claim = copy
                    .claims
                    .get(offset)
                    .is_some_and(|note| current.is_some() && noted_claim(note, current).is_none());
                if stale_uid || stale_claim {
                    // The notes only: the entry, if any, is another's.
                    unnote(&mut changes, offset, stale_uid, stale_claim, false);
                }
            }
            if changes.is_empty() {
                continue;
            }
            let pool =
                Pools::uncached(&self.handle, &self.client, self.timeouts, namespace.clone());
            match pool.write(copy, &changes)? {
                Written::Done => {
                    for (offset, entry) in restored {
                        report.restored += 1;
                        metrics().restored.inc();
                        tracing::warn!(
                            pool = %copy.name,
                            offset,
                            podref = %entry.podref,
                            container = %entry.container_id,
                            ifname = entry.ifname.as_deref().unwrap_or_default(),
                            "IPAM reconciler: another writer erased a live pod's entry \
                             (an offset whereabouts cannot read); written back"
                        );
                    }
                    for (offset, gone) in why {
                        if let Some(entry) = copy.spec.allocations.get(offset) {
                            report.reclaimed += 1;
                            let reason = gone.as_str();
                            metrics().reclaimed.with_label_values(&[reason]).inc();
                            reclaimed.insert((entry.podref.clone(), entry.container_id.clone()));
                        }
                    }
                }
                Written::Lost => report.lost += 1,
            }
        }
        for seen_reservation in &reservations {
            let ReservationSeen {
                namespace,
                name,
                reservation,
            } = seen_reservation;
            let spec = &reservation.spec;
            let of_reclaimed = spec
                .container_id
                .as_ref()
                .is_some_and(|id| reclaimed.contains(&(spec.podref.clone(), id.clone())));
            let suspect = Suspect::Reservation {
                namespace: namespace.clone(),
                name: name.clone(),
                uid: reservation.uid.clone(),
            };
            let pod_gone = !pods.contains_key(&spec.podref);
            if pod_gone {
                seen.insert(suspect.clone());
            }
            if of_reclaimed || (pod_gone && self.suspects.contains(&suspect)) {
                let pool =
                    Pools::uncached(&self.handle, &self.client, self.timeouts, namespace.clone());
                pool.unreserve(name, reservation)?;
                report.unreserved += 1;
            }
        }
        self.suspects = seen;
        // The slices after the addresses: a gone node's slice is freed
        // once this pass (or an earlier one) emptied its pool.
        match nodes {
            Some(nodes) => {
                report.slices = self.slices.pass(
                    &self.handle,
                    &self.client,
                    self.timeouts,
                    nodes,
                    &slices,
                    &pools,
                )?
            }
            None if !slices.is_empty() => {
                tracing::warn!("IPAM reconciler: node slices not judged, the Nodes not listed")
            }
            None => {}
        }
        Ok(report)
    }

    /// The IPAMClaims of `namespace` (metadata only) into `claims`, as
    /// `namespace/name`.
    fn list_claims(
        &self,
        namespace: &str,
        claims: &mut HashSet<String>,
    ) -> Result<(), ClusterError> {
        let api = crate::cluster::api::claims_api(&self.client, namespace);
        let what = format!("IPAMClaims of {namespace}");
        for claim in list_metadata(&self.handle, self.timeouts, &api, &what)? {
            let name = claim.metadata.name.unwrap_or_default();
            claims.insert(format!("{namespace}/{name}"));
        }
        Ok(())
    }

    /// The pods of `namespace` (metadata only, page by page) into `pods`,
    /// by `namespace/name`.
    fn list_pods(
        &self,
        namespace: &str,
        pods: &mut HashMap<String, PodSeen>,
    ) -> Result<(), ClusterError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let what = format!("pods of {namespace}");
        for pod in list_metadata(&self.handle, self.timeouts, &api, &what)? {
            let meta = pod.metadata;
            let name = meta.name.unwrap_or_default();
            let mirror = meta
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION));
            let seen = PodSeen {
                uid: meta.uid.unwrap_or_default(),
                mirror,
            };
            pods.insert(format!("{namespace}/{name}"), seen);
        }
        Ok(())
    }
}

/// The backups of `copy`'s entries past what whereabouts reads (issue 45),
/// as changes: an entry another writer erased is written back while its
/// pod lives, a backup whose entry is gone for good goes, and an entry
/// without one gets one (an earlier release wrote it). Returns the entries
/// written back, by offset.
fn backups<'c>(
    copy: &'c PoolCopy,
    pods: &HashMap<String, PodSeen>,
    changes: &mut BTreeMap<String, Change>,
) -> Vec<(&'c String, &'c Allocation)> {
    let mut restored = Vec::new();
    for (offset, backup) in &copy.backups {
        let current = copy.spec.allocations.get(offset);
        let note = copy.notes.get(offset).map(String::as_str);
        match judge_backup(backup, current, note, pods) {
            BackupFate::Keep => {}
            BackupFate::Restore => {
                changes.insert(offset.clone(), Change::Restore(backup.clone()));
                restored.push((offset, backup));
            }
            BackupFate::Drop => unnote(changes, offset, false, false, true),
        }
    }
    for (offset, entry) in &copy.spec.allocations {
        if needs_backup(offset) && !copy.backups.contains_key(offset) {
            changes
                .entry(offset.clone())
                .or_insert_with(|| Change::BackUp(entry.clone()));
        }
    }
    restored
}

/// Notes at `offset` to remove, merged with any already to remove there; a
/// change of the entry itself there stands (it sets or removes its notes).
fn unnote(
    changes: &mut BTreeMap<String, Change>,
    offset: &str,
    uid: bool,
    claim: bool,
    backup: bool,
) {
    let change = changes.entry(offset.to_string()).or_insert(Change::Unnote {
        uid: false,
        claim: false,
        backup: false,
    });
    if let Change::Unnote {
        uid: u,
        claim: c,
        backup: b,
    } = change
    {
        *u |= uid;
        *c |= claim;
        *b |= backup;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_deleted_node_makes_the_leader_hurry_for_a_while() {
        let normal = Duration::from_secs(300);
        let t0 = Instant::now();
        let mut hurry = Hurry::default();
        hurry.saw(names(&["a", "b"]), t0);
        assert_eq!(
            hurry.interval(normal, t0),
            HURRY_INTERVAL,
            "a new leader's first list"
        );
        let t1 = t0 + HURRY_FOR;
        assert_eq!(hurry.interval(normal, t1), normal, "over");
        hurry.saw(names(&["a", "b", "c"]), t1);
        assert_eq!(hurry.interval(normal, t1), normal, "a node joined");
        let t0 = t1;
        hurry.saw(names(&["a", "c"]), t0);
        assert_eq!(hurry.interval(normal, t0), HURRY_INTERVAL, "b was deleted");
        assert_eq!(
            hurry.interval(Duration::from_secs(5), t0),
            Duration::from_secs(5),
            "never slower than asked"
        );
        hurry.saw(names(&["a", "c"]), t0 + Duration::from_secs(60));
        assert_eq!(
            hurry.interval(normal, t0 + Duration::from_secs(60)),
            HURRY_INTERVAL,
            "still within HURRY_FOR"
        );
        assert_eq!(hurry.interval(normal, t0 + HURRY_FOR), normal, "over");
    }
}
