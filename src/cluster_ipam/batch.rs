//! The daemon's group commit of a pool (issue 33 item 4): its calls queue a
//! ticket each for an address, and whichever holds the pool's turn decides
//! every ticket queued by then on one copy and writes them in one PATCH. A
//! call whose ticket a turn-holder settled meanwhile finds its address
//! ready when it gets the turn. The daemon's calls never lose the
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
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::{metrics, Call, ClusterIpamError};
use crate::cluster::pools::{Change, Written};
use crate::cni::error::CniError;
use plexus_ipam::whereabouts::allocate::{self, Holder};
use plexus_ipam::whereabouts::conf::PoolRange;
use plexus_ipam::whereabouts::pool::{self, Allocation};
use plexus_ipam::IpamError;

/// `mutex` locked; one a panicking call held is taken as it is (what it
/// guards is whole at every step: a ticket is settled once, a queue
/// pushed or emptied, and a turn guards no data).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// One call's request for an address of a pool.
struct Ticket {
    range: PoolRange,
    holder: Allocation,
    pod_uid: Option<String>,
    /// Addresses other pods reserved through overlapping pools.
    taken: BTreeSet<IpAddr>,
    hint: u128,
    /// Set by the turn-holder that settled it.
    outcome: Mutex<Option<Result<IpAddr, Refused>>>,
}

/// Why a ticket got no address, shared by a batch.
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
    fn settle(&self, outcome: Result<IpAddr, Refused>) {
        lock(&self.outcome).get_or_insert(outcome);
    }

    fn outcome(&self) -> Option<Result<IpAddr, Refused>> {
        lock(&self.outcome).clone()
    }
}

/// A pool's turn: held while deciding and writing it; the tickets waiting.
#[derive(Default)]
pub(super) struct Turn {
    held: Mutex<()>,
    queue: Mutex<Vec<Arc<Ticket>>>,
}

impl Turn {
    pub(super) fn hold(&self) -> MutexGuard<'_, ()> {
        lock(&self.held)
    }
}

/// Turns by namespace and pool name.
type Turns = Mutex<HashMap<(String, String), Arc<Turn>>>;

/// The daemon's turn of `namespace`'s pool `name`.
pub(super) fn turn(namespace: &str, name: &str) -> Arc<Turn> {
    static TURNS: OnceLock<Turns> = OnceLock::new();
    let mut turns = lock(TURNS.get_or_init(Mutex::default));
    let key = (namespace.to_string(), name.to_string());
    turns.entry(key).or_default().clone()
}

impl Call<'_> {
    /// An entry of `range`'s pool for this attachment, written: its
    /// address (the reservation is the caller's).
    pub(super) fn commit_entry(
        &self,
        range: &PoolRange,
        taken: &BTreeSet<IpAddr>,
    ) -> Result<IpAddr, ClusterIpamError> {
        let name = self.pool_name(range);
        let who = self.holder();
        let ticket = Arc::new(Ticket {
            range: range.clone(),
            holder: who.allocation(),
            pod_uid: self.pod_uid.clone(),
            taken: taken.clone(),
            hint: super::hint(&who),
            outcome: Mutex::new(None),
        });
        if !self.pools.cached() {
            self.commit(&name, range, std::slice::from_ref(&ticket));
        } else {
            let turn = turn(self.pools.namespace(), &name);
            lock(&turn.queue).push(ticket.clone());
            let _held = turn.hold();
            if ticket.outcome().is_none() {
                let mut batch = std::mem::take(&mut *lock(&turn.queue));
                // Taken, and left unsettled, by a holder that panicked.
                if !batch.iter().any(|t| Arc::ptr_eq(t, &ticket)) {
                    batch.push(ticket.clone());
                }
                self.commit(&name, range, &batch);
            }
        }
        let outcome = ticket
            .outcome()
            .expect("a committed batch settles every ticket");
        outcome.map_err(ClusterIpamError::from)
    }

    /// Decides every ticket of `batch` on one copy of the pool `name` (of
    /// `range`'s network) and writes them in one compare-and-swap, again on
    /// a fresh copy after each loss until the deadline; settles each.
    fn commit(&self, name: &str, range: &PoolRange, batch: &[Arc<Ticket>]) {
        let mut tries = 0;
        let failed = loop {
            let copy = match self
                .pools
                .pool(name, &pool::range_text(range.network), tries > 0)
            {
                Ok(copy) => copy,
                Err(e) => break ClusterIpamError::from(e),
            };
            let mut allocations = copy.spec.allocations.clone();
            let mut changes = BTreeMap::new();
            let mut decided = Vec::new();
            for ticket in batch {
                let who = Holder {
                    container_id: &ticket.holder.container_id,
                    podref: &ticket.holder.podref,
                    ifname: &ticket.holder.ifname,
                };
                let chosen = allocate::assign(
                    &ticket.range,
                    &allocations,
                    &ticket.taken,
                    &who,
                    ticket.hint,
                );
                let outcome = match chosen {
                    Ok(chosen) => {
                        if let Some(entry) = chosen.write {
                            allocations.insert(chosen.key.clone(), entry.clone());
                            let change = Change::Set(entry, ticket.pod_uid.clone());
                            changes.insert(chosen.key, change);
                        }
                        Ok(chosen.ip)
                    }
                    Err(full) => Err(Refused::Exhausted(full.to_string())),
                };
                decided.push((ticket, outcome));
            }
            let written = if changes.is_empty() {
                Ok(Written::Done)
            } else {
                self.pools.write(&copy, &changes)
            };
            match written {
                Ok(Written::Done) => {
                    metrics().held(name, range, allocations.len());
                    for (ticket, outcome) in decided {
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
}
