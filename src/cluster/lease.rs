//! Leader election among the daemons by a `coordination.k8s.io/v1` Lease,
//! for work one daemon of the cluster does at a time (the cluster-wide
//! IPAM reconciler, `crate::cluster_ipam::reconcile`).
//!
//! As client-go's `leaderelection`: the holder renews the Lease well within
//! its duration; another takes it only once it has seen the Lease unchanged
//! for a whole duration, timed by its own clock (never by comparing the
//! holder's timestamps with its own, so skewed clocks cannot make two
//! leaders). Every write names the resourceVersion it read, so of two that
//! try at once one loses (409).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};

/// One Lease, as this daemon contends for it.
pub struct LeaderLease {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    /// The holder and renew time last read, and when (this clock) they
    /// last changed.
    observed: Option<(String, Option<MicroTime>, Instant)>,
}

impl LeaderLease {
    /// The Lease `name` of `namespace`, contended for as `identity` (the
    /// node's name), held for `duration` after each renewal.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> LeaderLease {
        LeaderLease {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
            observed: None,
        }
    }

    /// Takes or renews the Lease; whether this daemon holds it now. Call it
    /// more often than the duration (a third of it, as client-go).
    pub async fn hold(&mut self) -> Result<bool, kube::Error> {
        let Some(current) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(None)),
            };
            return conflict_is_false(self.api.create(&PostParams::default(), &lease).await);
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
        conflict_is_false(replaced)
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
}

/// A write that another daemon's beat (409): not held.
fn conflict_is_false(written: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
    match written {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}
