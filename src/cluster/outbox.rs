//! The daemon's write-behind of what an ADD publishes (the pod's
//! network-status, its claims' status): the ADD answers once the write is
//! queued here, not once the API server took it, so a thick ADD costs what
//! the attachments cost (issue 12: at most 1.2× the ADD from a manifest
//! directory; the PATCH alone is a third of that).
//!
//! Nothing is lost for it:
//! - each queued write is a file in the outbox directory (on `/run`, which
//!   a crash of the daemon survives) before the ADD answers, and a daemon
//!   that starts delivers what its predecessor left;
//! - one write per pod at a time, the newest winning: a pod whose sandbox
//!   was re-created never gets the old sandbox's status after the new one;
//! - the PATCH names the pod's uid, so a pod deleted and re-created under
//!   the same name (a StatefulSet's) is refused the old pod's status by the
//!   API server instead of getting it;
//! - transient failures are retried for [`DELIVERY_WINDOW`], long enough
//!   to ride out an API server restart; what still fails is logged, counted
//!   and reported as a Warning event on the pod.
//!
//! The trade-off, documented for operators: a container created in the
//! milliseconds after its sandbox may not see the annotation yet, as with
//! any reader of the pod racing kubelet's own cache. `--status-write sync`
//! makes the daemon write before it answers, as a plugin process does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Pod as ApiPod};
use kube::api::Api;
use serde::{Deserialize, Serialize};

use super::api::{
    bounded, claim_patch, claims_api, patch_status, pod_status_patch, post_all, ClaimStatus,
    StatusWrite,
};
use super::dra_driver::{write_device_statuses, DeviceStatus};
use super::error::{ApiRequest, Verb};
use super::events::{pod_event, EventType, PodEvent};
use crate::cni::whole_file::{self, Durability};
use crate::netattach::pod::Pod;

/// How long a queued write keeps being retried while the API server fails
/// transiently.
pub const DELIVERY_WINDOW: Duration = Duration::from_secs(600);

/// One pod's queued write: the outbox file's format, read and written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingStatus {
    pub namespace: String,
    pub pod: String,
    /// The pod this status is for; never written to another.
    pub uid: String,
    /// The network-status annotation's value (multi-net-spec §5).
    pub network_status: String,
    /// The bound IPAMClaims' new status (§8.2).
    #[serde(default)]
    pub claims: Vec<ClaimStatus>,
    /// The claimed devices' ResourceClaim status entries (KEP-4817).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceStatus>,
}

/// How delivering one write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    Written,
    /// The pod was deleted (or re-created: another uid) first.
    PodGone,
    Failed,
}

impl Delivery {
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Written => "written",
            Delivery::PodGone => "pod_gone",
            Delivery::Failed => "failed",
        }
    }
}

/// Sees each delivery: how it ended, and how long after it was queued
/// (the daemon's metrics).
pub type DeliveryObserver = Arc<dyn Fn(Delivery, Duration) + Send + Sync>;

pub struct StatusOutbox {
    dir: PathBuf,
    client: kube::Client,
    handle: tokio::runtime::Handle,
    request_timeout: Duration,
    /// By pod uid: the newest write queued, and whether a task delivers it.
    pending: Mutex<HashMap<String, Queued>>,
    generations: AtomicU64,
    observe: Option<DeliveryObserver>,
}

struct Queued {
    generation: u64,
    status: PendingStatus,
    queued_at: Instant,
    delivering: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    #[error("status outbox {}: {source}", dir.display())]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("pod {0}: uid {1:?} cannot name an outbox file")]
    BadUid(String, String),
}

impl StatusOutbox {
    /// The outbox in `dir` (created 0700), delivering on `handle`'s runtime
    /// what an earlier daemon left there.
    pub fn open(
        dir: &Path,
        client: kube::Client,
        handle: tokio::runtime::Handle,
        request_timeout: Duration,
        observe: Option<DeliveryObserver>,
    ) -> Result<Arc<StatusOutbox>, OutboxError> {
        let io = |source| OutboxError::Io {
            dir: dir.to_path_buf(),
            source,
        };
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
        let outbox = Arc::new(StatusOutbox {
            dir: dir.to_path_buf(),
            client,
            handle,
            request_timeout,
            pending: Mutex::new(HashMap::new()),
            generations: AtomicU64::new(0),
            observe,
        });
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let left = std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()));
            match left {
                Ok(status) => outbox.queue(status, false)?,
                Err(reason) => {
                    tracing::warn!(file = %path.display(), %reason, "unreadable outbox entry dropped");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        Ok(outbox)
    }

    /// Queue `status` for delivery; once this returns, it survives the
    /// daemon's crash.
    pub fn submit(self: &Arc<Self>, status: PendingStatus) -> Result<(), OutboxError> {
        self.queue(status, true)
    }

    /// Drop the status entries of claim `namespace/name` from the writes
    /// not yet delivered: its devices were unprepared, and a late write
    /// would mark them Ready again. (A delivery under way has its copy;
    /// Unprepare's own clearing follows it.)
    pub fn forget_claim(&self, namespace: &str, name: &str) {
        let mut pending = self.lock();
        for (uid, queued) in pending.iter_mut() {
            let devices = &mut queued.status.devices;
            let before = devices.len();
            devices.retain(|d| d.namespace != namespace || d.claim != name);
            if devices.len() == before {
                continue;
            }
            let bytes = serde_json::to_vec(&queued.status).expect("a pending status serializes");
            if let Err(error) =
                whole_file::replace(&self.file(uid), &bytes, 0o600, Durability::Unsynced)
            {
                tracing::warn!(%error, uid, "outbox entry not rewritten");
            }
        }
    }

    /// Writes queued and not yet delivered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn queue(self: &Arc<Self>, status: PendingStatus, write_file: bool) -> Result<(), OutboxError> {
        let uid = status.uid.clone();
        if uid.is_empty() || !uid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(OutboxError::BadUid(
                format!("{}/{}", status.namespace, status.pod),
                uid,
            ));
        }
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        let mut pending = self.lock();
        if write_file {
            // Under the lock: the file always holds the newest write.
            let bytes = serde_json::to_vec(&status).expect("a pending status serializes");
            whole_file::replace(&self.file(&uid), &bytes, 0o600, Durability::Unsynced).map_err(
                |source| OutboxError::Io {
                    dir: self.dir.clone(),
                    source,
                },
            )?;
        }
        let delivering = pending.get(&uid).is_some_and(|q| q.delivering);
        pending.insert(
            uid.clone(),
            Queued {
                generation,
                status,
                queued_at: Instant::now(),
                delivering: true,
            },
        );
        drop(pending);
        if !delivering {
            self.handle.spawn(self.clone().deliver(uid));
        }
        Ok(())
    }

    /// Deliver the pod's newest write until none is newer than the one
    /// delivered; one task per pod, so writes land in order.
    async fn deliver(self: Arc<Self>, uid: String) {
        loop {
            let Some((generation, status, queued_at)) = self
                .lock()
                .get(&uid)
                .map(|q| (q.generation, q.status.clone(), q.queued_at))
            else {
                return;
            };
            let outcome = self.write(&status).await;
            if let Some(observe) = &self.observe {
                observe(outcome, queued_at.elapsed());
            }
            let mut pending = self.lock();
            if pending
                .get(&uid)
                .is_some_and(|q| q.generation == generation)
            {
                pending.remove(&uid);
                if let Err(error) = std::fs::remove_file(self.file(&uid)) {
                    tracing::warn!(%error, uid, "outbox entry not removed");
                }
                return;
            }
        }
    }

    /// The pod's status, then its claims'; what became of it.
    async fn write(&self, status: &PendingStatus) -> Delivery {
        let who = format!("pod {}/{}", status.namespace, status.pod);
        let pods: Api<ApiPod> = Api::namespaced(self.client.clone(), &status.namespace);
        let patch = pod_status_patch(Some(&status.uid), &status.network_status);
        let bounds = StatusWrite {
            request: self.request_timeout,
            window: DELIVERY_WINDOW,
        };
        let object = format!("{who} status");
        let failure = match patch_status(&pods, &status.pod, &patch, &object, bounds).await {
            Ok(true) => None,
            Ok(false) => return Delivery::PodGone,
            // The API server refuses (422, uid immutable) a uid the pod
            // does not have; whether that was the reason, the pod says.
            Err(e) if e.status() == Some(422) && self.recreated(&pods, status).await => {
                tracing::info!(%e, "network-status not written: the pod was re-created");
                return Delivery::PodGone;
            }
            Err(e) => Some(e.to_string()),
        };
        let mut failures: Vec<String> = failure.into_iter().collect();
        for claim in &status.claims {
            let api = claims_api(&self.client, &claim.namespace);
            let object = format!("IPAMClaim {}/{} status", claim.namespace, claim.name);
            let patch = claim_patch(claim, &status.pod);
            match patch_status(&api, &claim.name, &patch, &object, bounds).await {
                Ok(true) => {}
                Ok(false) => tracing::info!(object, "deleted before its status was written"),
                Err(e) => failures.push(e.to_string()),
            }
        }
        let devices = write_device_statuses(&self.client, &status.devices, self.request_timeout);
        failures.extend(devices.await);
        if failures.is_empty() {
            return Delivery::Written;
        }
        let message = failures.join("; ");
        tracing::error!(%message, "status not written");
        self.warn(status, message).await;
        Delivery::Failed
    }

    /// Whether the pod named by `status` now has another uid (or is gone).
    async fn recreated(&self, pods: &Api<ApiPod>, status: &PendingStatus) -> bool {
        let object = format!("pod {}/{}", status.namespace, status.pod);
        let what = ApiRequest::new(Verb::Get, object);
        match bounded(self.request_timeout, what, pods.get_opt(&status.pod)).await {
            Ok(Some(pod)) => pod.metadata.uid.as_deref() != Some(&status.uid),
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// A Warning event on the pod, best effort.
    async fn warn(&self, status: &PendingStatus, message: String) {
        let pod = Pod {
            namespace: status.namespace.clone(),
            name: status.pod.clone(),
            uid: Some(status.uid.clone()),
            annotations: Default::default(),
        };
        let event = pod_event(
            &pod,
            &PodEvent {
                event_type: EventType::Warning,
                reason: "NetworkStatusNotWritten",
                message,
            },
        );
        let api: Api<Event> = Api::namespaced(self.client.clone(), &status.namespace);
        let object = format!("events of pod {}/{}", status.namespace, status.pod);
        for failure in post_all(api, vec![event], object, self.request_timeout).await {
            tracing::warn!(%failure, "event not posted");
        }
    }

    fn file(&self, uid: &str) -> PathBuf {
        self.dir.join(format!("{uid}.json"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Queued>> {
        // A panic while holding it leaves the map whole: every update is
        // one insert or remove.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_status_reads_back_as_written() {
        let status = PendingStatus {
            namespace: "ns".into(),
            pod: "p".into(),
            uid: "0b1c-22".into(),
            network_status: "[]".into(),
            claims: vec![ClaimStatus {
                namespace: "ns".into(),
                name: "c".into(),
                ips: vec!["10.0.0.2/24".into()],
            }],
            devices: vec![DeviceStatus {
                namespace: "ns".into(),
                claim: "vf".into(),
                pool: "node-a".into(),
                device: "vf-0000-01-10-2".into(),
                interface_name: "net1".into(),
                ips: vec!["10.1.0.2/24".into()],
                hardware_address: None,
            }],
        };
        let text = serde_json::to_string(&status).unwrap();
        assert!(text.contains("\"networkStatus\":\"[]\""), "{text}");
        assert!(text.contains("\"interfaceName\":\"net1\""), "{text}");
        assert_eq!(
            serde_json::from_str::<PendingStatus>(&text).unwrap(),
            status
        );
    }

    /// An outbox file as the previous release (`.ci/previous-release`,
    /// 4ab6c00, whose outbox.rs this one's format keeps) wrote it is read
    /// by this one, and this one's is that release's to the byte: a daemon
    /// rolled either way delivers what the other queued (issue 47 item 2).
    #[test]
    fn the_previous_releases_outbox_file_reads_both_ways() {
        let previous = r#"{"namespace":"ns","pod":"p","uid":"0b1c-22","networkStatus":"[{\"name\":\"cbr0\",\"default\":true}]","claims":[{"namespace":"ns","name":"c","ips":["10.0.0.2/24"]}]}"#;
        let read: PendingStatus = serde_json::from_str(previous).unwrap();
        assert_eq!(read.uid, "0b1c-22");
        assert_eq!(read.claims.len(), 1);
        assert_eq!(serde_json::to_string(&read).unwrap(), previous);
        // Before IPAMClaims (no `claims`): still read.
        let older = r#"{"namespace":"ns","pod":"p","uid":"u","networkStatus":"[]"}"#;
        let read: PendingStatus = serde_json::from_str(older).unwrap();
        assert!(read.claims.is_empty());
    }
}
