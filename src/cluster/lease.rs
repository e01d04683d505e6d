//! Leader election among the daemons by a `coordination.k8s.io/v1` Lease,
//! for work one daemon of the cluster does at a time (the cluster-wide
//! IPAM reconciler, `crate::whereabouts::reconcile`).
//!
//! As client-go's `leaderelection`: the holder renews the Lease well within
//! its duration; another takes it only once it has seen the Lease unchanged
//! for a whole duration, timed by its own clock (never by comparing the
//! holder's timestamps with its own, so skewed clocks cannot make two
//! leaders). Every write names the resourceVersion it read, so of two that
//! try at once one loses (409).
//!
//! Unlike client-go, a daemon that does not hold the Lease never asks for
//! it (issue 47 item 5): it watches the one Lease (a field selector on its
//! name) and writes only to create it, to take it over once expired, or to
//! renew its own. An idle cluster's daemons make no request for it, where
//! polling made one per daemon every 20 s (50 a second at 1,000 nodes).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;

use super::reconnect::reconnecting;
use super::watch::{drive, watch_config};

/// One Lease, as this daemon contends for it.
pub struct LeaderLease {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    /// The watch of the Lease: the copy the last event brought.
    seen: Store<Lease>,
    synced: Arc<AtomicBool>,
    watch: tokio::task::JoinHandle<()>,
    /// What this daemon's last write returned: newer than the watch's
    /// copy until the watch brings its event.
    written: Option<Lease>,
    /// The holder and renew time last read, and when (this clock) they
    /// last changed.
    observed: Option<(String, Option<MicroTime>, Instant)>,
}

impl Drop for LeaderLease {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

impl LeaderLease {
    /// The Lease `name` of `namespace`, contended for as `identity` (the
    /// node's name), held for `duration` after each renewal; its watch
    /// runs on the runtime of `handle`.
    pub fn new(
        client: kube::Client,
        handle: &tokio::runtime::Handle,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> LeaderLease {
        let api: Api<Lease> = Api::namespaced(client, namespace);
        let (seen, writer) = reflector::store();
        let config = watch_config().fields(&format!("metadata.name={name}"));
        let events = reconnecting(watcher(api.clone(), config))
            .modify(|l: &mut Lease| l.managed_fields_mut().clear())
            .reflect(writer);
        let synced = Arc::new(AtomicBool::new(false));
        let watch = handle.spawn(drive(
            "the reconciler's Lease",
            events,
            seen.clone(),
            synced.clone(),
        ));
        LeaderLease {
            api,
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
            seen,
            synced,
            watch,
            written: None,
            observed: None,
        }
    }

    /// Whether the watch has listed the Lease (or its absence).
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Whether the Lease exists, as last seen.
    pub fn exists(&self) -> bool {
        self.current().is_some()
    }

    /// The newest copy known: the watch's, or this daemon's last write's.
    fn current(&self) -> Option<Lease> {
        let seen = self.seen.state().into_iter().next().map(|l| (*l).clone());
        let revision = |l: &Lease| -> Option<u64> { l.resource_version()?.parse().ok() };
        match (seen, &self.written) {
            (Some(seen), Some(mine)) if revision(mine) > revision(&seen) => Some(mine.clone()),
            (seen, _) => seen,
        }
    }

    /// Takes or renews the Lease; whether this daemon holds it now. Call it
    /// more often than the duration (a third of it, as client-go). It asks
    /// the API server nothing while another holds a Lease that has not
    /// expired.
    pub async fn hold(&mut self) -> Result<bool, kube::Error> {
        let Some(current) = self.current() else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(None)),
            };
            let created = self.api.create(&PostParams::default(), &lease).await;
            return self.wrote(created);
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let now = Instant::now();
        let record = (holder.clone(), spec.renew_time.clone());
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|(h, r, _)| (h, r) != (&record.0, &record.1));
        if changed {
            self.observed = Some((record.0, record.1, now));
        }
        let seen_since = self.observed.as_ref().map_or(now, |(_, _, at)| *at);
        let expired = now.duration_since(seen_since) >= self.duration;
        if holder != self.identity && !holder.is_empty() && !expired {
            return Ok(false);
        }
        let acquired = (holder == self.identity).then_some(spec.acquire_time);
        let renewed = Lease {
            metadata: current.metadata.clone(),
            spec: Some(self.spec(acquired.flatten())),
        };
        let replaced = self
            .api
            .replace(&self.name, &PostParams::default(), &renewed)
            .await;
        self.wrote(replaced)
    }

    /// Gives the Lease up, if this daemon holds it (deleted, so that no
    /// daemon contends until one has work for it again).
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(current) = self.current() else {
            return Ok(());
        };
        let holder = current
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone());
        if holder.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: current.uid(),
                resource_version: current.resource_version(),
            }),
            ..DeleteParams::default()
        };
        self.written = None;
        match self.api.delete(&self.name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn spec(&self, acquired: Option<MicroTime>) -> LeaseSpec {
        let now = MicroTime(jiff::Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(acquired.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            ..Default::default()
        }
    }

    /// A write's outcome: held when it succeeded (its answer remembered);
    /// not held when another daemon's write beat it (409).
    fn wrote(&mut self, written: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
        match written {
            Ok(lease) => {
                self.written = Some(lease);
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                self.written = None;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}
