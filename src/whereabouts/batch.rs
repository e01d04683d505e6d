//! The daemon's group commit of a pool (issue 33 item 4): its calls queue a
//! ticket each (an address to take, or a container's to give back), and
//! whichever holds the pool's turn decides every ticket queued by then on
//! one copy and writes them in one PATCH. A call whose ticket a
//! turn-holder settled meanwhile finds it done when it gets the turn. The daemon's calls never lose the
//! compare-and-swap to each other, only to other writers (other nodes,
//! whereabouts), and a storm of one node's pods costs a few writes, not one
//! per pod.
//!
//! A plugin process is one call: its ticket is a batch of one, decided and
//! written by the same code.
//!
//! The turns are the process's, by namespace and pool: in the daemon every
//! call goes through its one connection, so one cluster (`Pools::cached`);
//! a plugin process never queues.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use ipnetwork::IpNetwork;

use super::{metrics, Call, ClusterIpamError};
use crate::cluster::ClusterError;
use crate::cni::error::CniError;
use crate::whereabouts::pools::{Change, Note, PoolCopy, Written};
use plexus_ipam::whereabouts::allocate::{self, ClaimAsk, HolderBuf};
use plexus_ipam::whereabouts::conf::PoolRange;
use plexus_ipam::whereabouts::pool::{self, Allocation};
use plexus_ipam::whereabouts::reclaim;
use plexus_ipam::IpamError;

/// `mutex` locked; one a panicking call held is taken as it is (what it
/// guards is whole at every step: a ticket is settled once, a queue
/// pushed or emptied, and a turn guards no data).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a ticket asks of a pool.
enum Want {
    /// An address of `range` (the ADD).
    Take {
        range: PoolRange,
        pod_uid: Option<String>,
        /// Addresses other pods reserved through overlapping pools.
        taken: BTreeSet<IpAddr>,
        hint: u128,
        /// The IPAMClaim the attachment is bound to, and its `status.ips`.
        claim: Option<(String, Vec<IpAddr>)>,
    },
    /// The holder's entry gone (the DEL), if it has one.
    Release,
}

/// One call's request of a pool.
struct Ticket {
    want: Want,
    holder: HolderBuf,
    /// Set by the turn-holder that settled it: the address taken or given
    /// back (`None`: the container held none).
    outcome: Mutex<Option<Result<Option<IpAddr>, Refused>>>,
    /// The entry a claim's address was taken over from (another pod's).
    took_over: Mutex<Option<Allocation>>,
}

/// Why a ticket was not done, shared by a batch.
#[derive(Clone)]
enum Refused {
    Exhausted(String),
    Failed(CniError),
}

impl From<Refused> for ClusterIpamError {
    fn from(refused: Refused) -> ClusterIpamError {
        match refused {
            Refused::Exhausted(why) => IpamError::RangeExhausted(why).into(),
            Refused::Failed(e) => e.into(),
        }
    }
}

impl Ticket {
    fn settle(&self, outcome: Result<Option<IpAddr>, Refused>) {
        lock(&self.outcome).get_or_insert(outcome);
    }

    fn outcome(&self) -> Option<Result<Option<IpAddr>, Refused>> {
        lock(&self.outcome).clone()
    }

    /// Decides this ticket on `allocations` (the pool as the tickets before
    /// it in the batch left it), noting its change.
    fn decide(
        &self,
        network: IpNetwork,
        backups: &BTreeMap<String, Allocation>,
        allocations: &mut BTreeMap<String, Allocation>,
        claims: &mut BTreeMap<String, String>,
        changes: &mut BTreeMap<String, Change>,
    ) -> Result<Option<IpAddr>, Refused> {
        let holder = &self.holder;
        let Want::Take {
            range,
            pod_uid,
            taken,
            hint,
            claim,
        } = &self.want
        else {
            let held =
                allocate::held_key(allocations, backups, &holder.container_id, &holder.ifname);
            let Some(key) = held.cloned() else {
                return Ok(None);
            };
            allocations.remove(&key);
            let ip = pool::address_at(network, &key);
            changes.insert(key, Change::Remove);
            return Ok(ip);
        };
        let who = holder.holder();
        let chosen = match claim {
            None => allocate::assign(range, allocations, taken, &who, *hint),
            Some((claim, preferred)) => {
                let ask = ClaimAsk {
                    claim,
                    claims,
                    preferred,
                };
                allocate::assign_for_claim(range, allocations, &ask, taken, &who, *hint).map(
                    |(chosen, previous)| {
                        *lock(&self.took_over) = previous;
                        chosen
                    },
                )
            }
        }
        .map_err(|full| Refused::Exhausted(full.to_string()))?;
        if let Some(entry) = chosen.write {
            allocations.insert(chosen.key.clone(), entry.clone());
            let note = Note {
                pod_uid: pod_uid.clone(),
                claim: claim.as_ref().map(|(c, _)| c.clone()),
            };
            if let Some(c) = &note.claim {
                let noted = reclaim::claim_note(c, &entry.container_id);
                claims.insert(chosen.key.clone(), noted);
            }
            changes.insert(chosen.key, Change::Set(entry, note));
        }
        Ok(Some(chosen.ip))
    }
}

/// A pool's turn: held while deciding and writing it; the tickets waiting.
#[derive(Default)]
struct Turn {
    held: Mutex<()>,
    queue: Mutex<Vec<Arc<Ticket>>>,
}

/// How often a call waiting for a pool's turn looks again.
const TURN_POLL: Duration = Duration::from_millis(2);

/// Turns by namespace and pool name.
type Turns = Mutex<HashMap<(String, String), Arc<Turn>>>;

/// The daemon's turn of `namespace`'s pool `name`.
fn turn(namespace: &str, name: &str) -> Arc<Turn> {
    static TURNS: OnceLock<Turns> = OnceLock::new();
    let mut turns = lock(TURNS.get_or_init(Mutex::default));
    let key = (namespace.to_string(), name.to_string());
    turns.entry(key).or_default().clone()
}

/// The pool's turn, once the call may decide its `ticket` (`Some(None)`: a
/// turn-holder settled it meanwhile). Past `deadline` a ticket still queued
/// is withdrawn (so no later turn takes an address for a call that has
/// given up) and the answer is `None`; one a holder is deciding already is
/// waited for, which that holder's own deadline bounds.
fn wait_for_turn<'t>(
    turn: &'t Turn,
    ticket: &Arc<Ticket>,
    deadline: Instant,
) -> Option<Option<MutexGuard<'t, ()>>> {
    loop {
        match turn.held.try_lock() {
            Ok(held) => return Some(Some(held)),
            Err(TryLockError::Poisoned(held)) => return Some(Some(held.into_inner())),
            Err(TryLockError::WouldBlock) => {}
        }
        if ticket.outcome().is_some() {
            return Some(None);
        }
        if Instant::now() >= deadline {
            let mut queue = lock(&turn.queue);
            if let Some(at) = queue.iter().position(|t| Arc::ptr_eq(t, ticket)) {
                queue.remove(at);
                return None;
            }
        }
        std::thread::sleep(TURN_POLL);
    }
}

impl Call<'_> {
    /// An entry of `range`'s pool for this attachment, written: its
    /// address (the reservation is the caller's), and the entry of another
    /// pod it was taken over from (a claim's address, moving with it).
    pub(super) fn commit_entry(
        &self,
        range: &PoolRange,
        taken: &BTreeSet<IpAddr>,
    ) -> Result<(IpAddr, Option<Allocation>), ClusterIpamError> {
        let who = self.holder();
        let want = Want::Take {
            range: range.clone(),
            pod_uid: self.pod_uid.clone(),
            taken: taken.clone(),
            hint: super::hint(&who),
            claim: self.claim.clone(),
        };
        let (ip, took_over) = self.in_turn(range, want)?;
        Ok((ip.expect("a take settles with an address"), took_over))
    }

    /// This container's entry for its interface gone from `range`'s pool
    /// (`DeallocateIP`: by container ID and interface); the address it
    /// held, if any.
    pub(super) fn release_entry(
        &self,
        range: &PoolRange,
    ) -> Result<Option<IpAddr>, ClusterIpamError> {
        self.in_turn(range, Want::Release).map(|(ip, _)| ip)
    }

    /// `want` of `range`'s pool, done in a batch: the daemon's (queued for
    /// the pool's turn), or a plugin process's batch of one.
    fn in_turn(
        &self,
        range: &PoolRange,
        want: Want,
    ) -> Result<(Option<IpAddr>, Option<Allocation>), ClusterIpamError> {
        let name = self.pool_name(range);
        let ticket = Arc::new(Ticket {
            want,
            holder: self.holder().to_buf(),
            outcome: Mutex::new(None),
            took_over: Mutex::new(None),
        });
        if !self.pools.cached() {
            self.commit(&name, range, std::slice::from_ref(&ticket));
        } else {
            let turn = turn(self.pools.namespace(), &name);
            lock(&turn.queue).push(ticket.clone());
            let held = wait_for_turn(&turn, &ticket, self.deadline).ok_or_else(|| {
                ClusterIpamError::TurnTimedOut {
                    pool: name.clone(),
                    budget: super::CALL_BUDGET,
                }
            })?;
            if held.is_some() && ticket.outcome().is_none() {
                let mut batch = std::mem::take(&mut *lock(&turn.queue));
                // Taken, and left unsettled, by a holder that panicked.
                if !batch.iter().any(|t| Arc::ptr_eq(t, &ticket)) {
                    batch.push(ticket.clone());
                }
                self.commit(&name, range, &batch);
            }
            drop(held);
        }
        let outcome = ticket
            .outcome()
            .expect("a committed batch settles every ticket");
        let took_over = lock(&ticket.took_over).take();
        outcome
            .map(|ip| (ip, took_over))
            .map_err(ClusterIpamError::from)
    }

    /// Decides every ticket of `batch` on one copy of the pool `name` (of
    /// `range`'s network) and writes them in one compare-and-swap, again on
    /// a fresh copy after each loss until the deadline; settles each. A
    /// batch that only gives back never creates the pool.
    fn commit(&self, name: &str, range: &PoolRange, batch: &[Arc<Ticket>]) {
        let takes = batch.iter().any(|t| matches!(t.want, Want::Take { .. }));
        let mut tries = 0;
        let failed = loop {
            let fresh = tries > 0;
            let copy = if takes {
                let range_text = pool::range_text(range.network);
                self.pools.pool(name, &range_text, fresh).map(Some)
            } else {
                self.existing_or_fresh(name, fresh)
            };
            let copy = match copy {
                Ok(Some(copy)) => copy,
                Ok(None) => {
                    for ticket in batch {
                        ticket.settle(Ok(None));
                    }
                    return;
                }
                Err(e) => break ClusterIpamError::from(e),
            };
            let mut allocations = copy.spec.allocations.clone();
            let mut claims = copy.claims.clone();
            let mut changes = BTreeMap::new();
            let decided: Vec<_> = batch
                .iter()
                .map(|t| {
                    let outcome = t.decide(
                        range.network,
                        &copy.backups,
                        &mut allocations,
                        &mut claims,
                        &mut changes,
                    );
                    (t, outcome)
                })
                .collect();
            let written = if changes.is_empty() {
                Ok(Written::Done)
            } else {
                self.pools.write(&copy, &changes)
            };
            match written {
                Ok(Written::Done) => {
                    metrics().held(name, range, allocations.len());
                    for (ticket, outcome) in decided {
                        if matches!(ticket.want, Want::Release) && matches!(outcome, Ok(Some(_))) {
                            metrics().releases.inc();
                        }
                        ticket.settle(outcome);
                    }
                    return;
                }
                Ok(Written::Lost) => match self.lost(name, tries) {
                    Ok(more) => tries = more,
                    Err(e) => break e,
                },
                Err(e) => break e.into(),
            }
        };
        let failed = Refused::Failed(CniError::from(failed));
        for ticket in batch {
            ticket.settle(Err(failed.clone()));
        }
    }

    /// The pool `name` if it exists; when the daemon's cache says it does
    /// not, the API server is asked (a DEL must not miss an entry the
    /// watch has not brought yet).
    pub(super) fn existing_or_fresh(
        &self,
        name: &str,
        fresh: bool,
    ) -> Result<Option<PoolCopy>, ClusterError> {
        match self.pools.existing(name, fresh)? {
            None if !fresh && self.pools.cached() => self.pools.existing(name, true),
            found => Ok(found),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::names::{ContainerId, IfName};

    fn ticket() -> Arc<Ticket> {
        Arc::new(Ticket {
            want: Want::Release,
            holder: HolderBuf {
                container_id: ContainerId::new("c1").unwrap(),
                podref: "ns/p".into(),
                ifname: IfName::new("net1").unwrap(),
            },
            outcome: Mutex::new(None),
            took_over: Mutex::new(None),
        })
    }

    /// A call never waits for a pool's turn past its own deadline, and a
    /// ticket it gives up on is withdrawn, so no later turn decides it.
    #[test]
    fn a_waiting_call_gives_up_at_its_deadline_and_withdraws() {
        let turn = Turn::default();
        let mine = ticket();
        lock(&turn.queue).push(mine.clone());
        let holder = lock(&turn.held);
        let started = Instant::now();
        let waited = wait_for_turn(&turn, &mine, started + Duration::from_millis(50));
        assert!(waited.is_none());
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(lock(&turn.queue).is_empty(), "withdrawn");
        drop(holder);
        // The turn free: taken at once.
        let waited = wait_for_turn(&turn, &mine, Instant::now());
        assert!(matches!(waited, Some(Some(_))));
    }

    /// A ticket a holder took into its batch is waited for past the
    /// deadline: the holder settles it.
    #[test]
    fn a_ticket_in_a_holders_batch_is_waited_for() {
        let turn = Arc::new(Turn::default());
        let mine = ticket();
        let held = Arc::new(std::sync::Barrier::new(2));
        let settler = {
            let (turn, mine, held) = (turn.clone(), mine.clone(), held.clone());
            std::thread::spawn(move || {
                let _turn = lock(&turn.held);
                held.wait();
                std::thread::sleep(Duration::from_millis(100));
                mine.settle(Ok(None));
            })
        };
        held.wait();
        // Past its deadline at once, but not queued: a holder has it.
        let waited = wait_for_turn(&turn, &mine, Instant::now());
        // Settled by the holder (seen before or after it let the turn go:
        // a turn taken then finds the ticket settled), never given up on.
        assert!(waited.is_some(), "not withdrawn");
        assert!(mine.outcome().is_some(), "settled by the holder");
        drop(waited);
        settler.join().unwrap();
    }
}
