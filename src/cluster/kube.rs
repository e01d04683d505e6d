//! The cluster as the Kubernetes API server sees it, for plexus on a real
//! node: the pod of a CNI call, the NetworkAttachmentDefinitions and
//! IPAMClaims it selects, and the writes back (the network-status
//! annotation, claim status, events).
//!
//! A thin client, as a CNI plugin must be: one current-thread tokio runtime
//! per invocation (owned here, driven by the calling thread), one TLS
//! connection (HTTP/2), the pod read once, each NAD read once and only when
//! the planner asks for it, and one merge PATCH of the pod's status
//! subresource. Every request is bounded by
//! `apiTimeout` (plexus's conf), and an error names the object and the
//! reason as the API server gave them
//! (`pod ns/name: forbidden: User "..." cannot get resource "pods" ...`).

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use elsa::FrozenMap;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Event, Pod as ApiPod};
use kube::api::{Api, ApiResource, DynamicObject};

use super::api::{
    bounded, claim_patch, claims_api, custom, patch_status, pod_status_patch, post_all,
    ClaimStatus, StatusWrite,
};
pub use super::client::RequestObserver;
use super::client::{http2_client, load_kubeconfig, owned_client, Driver};
use super::credentials::LiveCredentials;
use super::dra_driver::{write_device_statuses, DeviceStatus};
use super::error::{error_chain, ApiRequest, ClusterError, Verb};
use super::events::{pod_event, PodEvent};
use super::outbox::{PendingStatus, StatusOutbox};
use super::watch::Watched;
use super::DraSource;
use super::NadSource;
use super::{Cluster, Publisher};
use crate::config::ApiTimeouts;
use crate::dra::{DraError, NamedClaim};
use crate::netattach::error::SpecError;
use crate::netattach::ipamclaim::IpamClaim;
use crate::netattach::nad::NetworkAttachmentDefinition;
use crate::netattach::pod::Pod;
use crate::netattach::status::{status_annotation_value, NetworkStatus};

pub struct KubeCluster {
    driver: Driver,
    client: kube::Client,
    timeouts: ApiTimeouts,
    /// NADs read so far (`None`: it does not exist), so each is read once.
    nads: FrozenMap<(String, String), Box<Option<NetworkAttachmentDefinition>>>,
    /// The daemon's watch caches, looked in before any GET.
    watched: Option<Arc<Watched>>,
    /// The daemon's write-behind of what an ADD publishes; `None`: written
    /// before the ADD answers.
    outbox: Option<Arc<StatusOutbox>>,
    /// Whether a request was sent yet (for [`crate::phases`] only).
    connected: std::sync::atomic::AtomicBool,
    /// What each pod's GET told of it for DRA (its node, the claims it
    /// names), for [`super::dra`].
    placements: FrozenMap<(String, String), Box<Placement>>,
    /// The daemon's DRA driver's prepared claims (`None` in a plugin
    /// process), for the networks of claimed devices ([`super::dra`]).
    prepared: Option<crate::dra::driver::claimed::PreparedSlot>,
}

/// What the pod's GET told of it for DRA: its node, and the claims it
/// names itself (or why those fields do not read).
#[derive(Debug, Clone)]
pub(super) struct Placement {
    pub node: Option<String>,
    pub named: Result<Vec<NamedClaim>, DraError>,
}

/// What the daemon keeps for all its calls: one client (one HTTP/2
/// connection) on its runtime, and the watch caches.
#[derive(Clone)]
pub struct SharedApi {
    pub handle: tokio::runtime::Handle,
    pub client: kube::Client,
    pub timeouts: ApiTimeouts,
    pub watched: Arc<Watched>,
    pub outbox: Option<Arc<StatusOutbox>>,
    /// The daemon's DRA driver's prepared claims, once it runs.
    pub prepared: crate::dra::driver::claimed::PreparedSlot,
}

impl KubeCluster {
    /// A client for the cluster `kubeconfig` names (its current context: CA
    /// and bearer token, or client certificates).
    pub fn connect(kubeconfig: &Path, timeouts: ApiTimeouts) -> Result<KubeCluster, ClusterError> {
        let (runtime, client) = owned_client(kubeconfig, timeouts)?;
        Ok(KubeCluster {
            driver: Driver::Owned(runtime),
            client,
            timeouts,
            nads: FrozenMap::new(),
            connected: Default::default(),
            placements: FrozenMap::new(),
            watched: None,
            outbox: None,
            prepared: None,
        })
    }

    /// The daemon's view for one call: its shared client and caches, and
    /// this call's own memo of the NADs it read.
    pub fn shared(api: &SharedApi) -> KubeCluster {
        KubeCluster {
            driver: Driver::Shared(api.handle.clone()),
            client: api.client.clone(),
            timeouts: api.timeouts,
            nads: FrozenMap::new(),
            connected: Default::default(),
            placements: FrozenMap::new(),
            watched: Some(api.watched.clone()),
            outbox: api.outbox.clone(),
            prepared: Some(api.prepared.clone()),
        }
    }

    /// A client for the cluster `kubeconfig` names, built on the runtime of
    /// `handle`; `observe` sees every request it sends.
    pub fn client(
        kubeconfig: &Path,
        handle: &tokio::runtime::Handle,
        timeouts: ApiTimeouts,
        observe: Option<RequestObserver>,
    ) -> Result<kube::Client, String> {
        let config = handle.block_on(load_kubeconfig(kubeconfig, timeouts))?;
        let live = LiveCredentials::follow(kubeconfig)?;
        let _guard = handle.enter();
        http2_client(&config, observe, live).map_err(|e| error_chain(&e))
    }

    /// The client its requests go through.
    pub(super) fn api_client(&self) -> &kube::Client {
        &self.client
    }

    /// The daemon's DRA driver's prepared claims, once it runs.
    pub(super) fn prepared(
        &self,
    ) -> Option<&std::sync::Arc<dyn crate::dra::driver::claimed::PreparedClaims>> {
        self.prepared.as_ref()?.get()
    }

    /// The daemon's watch caches; `None` in a plugin process.
    pub(super) fn watched(&self) -> Option<&Watched> {
        self.watched.as_deref()
    }

    /// What pod `namespace/name`'s GET told of it for DRA, if it was read
    /// with one.
    pub(super) fn placement(&self, namespace: &str, name: &str) -> Option<Placement> {
        let key = (namespace.to_string(), name.to_string());
        self.placements.get(&key).cloned()
    }

    /// Run one GET of `object` to completion, bounded by the request timeout.
    pub(super) fn read<T>(
        &self,
        object: &str,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ClusterError> {
        let what = ApiRequest::new(Verb::Get, object);
        let _span = crate::phases::span(self.read_span());
        self.driver
            .block_on(bounded(self.timeouts.request, what, request))
    }

    /// The phase a read is (`crate::phases`): the first of a plugin process
    /// opens its connection (TCP, TLS, HTTP/2) too.
    fn read_span(&self) -> &'static str {
        let first = matches!(self.driver, Driver::Owned(_))
            && !self
                .connected
                .swap(true, std::sync::atomic::Ordering::Relaxed);
        if first {
            "API connect and read"
        } else {
            "API read"
        }
    }

    /// Everything an ADD writes back, all at once on the one HTTP/2
    /// connection, so the claims and events take no time beyond the
    /// network-status write:
    /// - the pod's network-status annotation (multi-net-spec §5), a merge
    ///   PATCH of that one key on the status subresource, never a
    ///   whole-object PUT (which wipes other status fields: multus-cni
    ///   #1511), naming the pod's uid so that a pod re-created under the
    ///   same name is refused it;
    /// - each bound IPAMClaim's `status` (§8.2: `ips`, and `ownerPod`), a
    ///   merge PATCH of its status subresource, the only part of a claim an
    ///   IPAM may write;
    /// - the events, best effort: they never fail the ADD.
    ///
    /// The PATCHes retry transient failures within `status_write`; an object
    /// deleted meanwhile is no failure (see [`Published`]). The daemon
    /// queues the PATCHes in its outbox instead ([`StatusOutbox`]).
    pub fn publish(&self, publication: &Publication) -> Result<Published, ClusterError> {
        let pod = publication.pod;
        let network_status = status_annotation_value(publication.network_status);
        if let (Some(outbox), Driver::Shared(handle), Some(uid)) =
            (&self.outbox, &self.driver, &pod.uid)
        {
            let uid = uid.clone();
            post_in_background(handle, self.posts(pod, &publication.events));
            outbox
                .submit(PendingStatus {
                    namespace: pod.namespace.clone(),
                    pod: pod.name.clone(),
                    uid,
                    network_status,
                    claims: publication.claims.clone(),
                    devices: publication.devices.clone(),
                })
                .map_err(|e| ClusterError::io("queueing the network-status write", e))?;
            return Ok(Published {
                pod_found: true,
                gone_claims: Vec::new(),
                event_failures: Vec::new(),
                device_failures: Vec::new(),
            });
        }
        let pods: Api<ApiPod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let status_patch = pod_status_patch(pod.uid.as_deref(), &network_status);
        let status_object = format!("pod {}/{} status", pod.namespace, pod.name);
        let bounds = StatusWrite {
            request: self.timeouts.request,
            window: self.timeouts.status_write,
        };
        let status = patch_status(&pods, &pod.name, &status_patch, &status_object, bounds);
        let claim_patches: Vec<_> = publication
            .claims
            .iter()
            .map(|c| {
                let object = format!("IPAMClaim {}/{} status", c.namespace, c.name);
                (c, claim_patch(c, &pod.name), object)
            })
            .collect();
        let claims = futures::future::join_all(claim_patches.iter().map(|(c, patch, object)| {
            let api = claims_api(&self.client, &c.namespace);
            async move { patch_status(&api, &c.name, patch, object, bounds).await }
        }));
        let devices = write_device_statuses(&self.client, &publication.devices, bounds.request);
        let events = self.posts(pod, &publication.events);
        let (status, claims, device_failures, event_failures) = match &self.driver {
            // Alongside the PATCHes, on the one connection.
            Driver::Owned(runtime) => {
                runtime.block_on(async { futures::join!(status, claims, devices, events) })
            }
            Driver::Shared(handle) => {
                post_in_background(handle, events);
                let (status, claims, devices) =
                    handle.block_on(async { futures::join!(status, claims, devices) });
                (status, claims, devices, Vec::new())
            }
        };
        let mut gone_claims = Vec::new();
        for ((claim, _, _), written) in claim_patches.iter().zip(claims) {
            if !written? {
                gone_claims.push(format!("{}/{}", claim.namespace, claim.name));
            }
        }
        Ok(Published {
            pod_found: status?,
            gone_claims,
            event_failures,
            device_failures,
        })
    }

    /// Post `events` on the pod; what failed, and why. A plugin process
    /// waits for them (it exits next, and they would be lost); the daemon
    /// posts them in the background, logging failures, since events are
    /// best effort and no call should wait for them.
    pub fn post_events(&self, pod: &Pod, events: &[PodEvent]) -> Vec<String> {
        let posts = self.posts(pod, events);
        match &self.driver {
            Driver::Owned(runtime) => runtime.block_on(posts),
            Driver::Shared(handle) => {
                post_in_background(handle, posts);
                Vec::new()
            }
        }
    }

    /// Posting `events`, not yet started; it owns what it needs.
    fn posts(
        &self,
        pod: &Pod,
        events: &[PodEvent],
    ) -> impl Future<Output = Vec<String>> + Send + 'static {
        let object = format!("events of pod {}/{}", pod.namespace, pod.name);
        let api: Api<Event> = Api::namespaced(self.client.clone(), &pod.namespace);
        let events: Vec<Event> = events.iter().map(|e| pod_event(pod, e)).collect();
        post_all(api, events, object, self.timeouts.request)
    }
}

fn post_in_background(
    handle: &tokio::runtime::Handle,
    posts: impl Future<Output = Vec<String>> + Send + 'static,
) {
    handle.spawn(async move {
        for failure in posts.await {
            tracing::warn!(%failure, "event not posted");
        }
    });
}

/// What an ADD writes back to the API server ([`KubeCluster::publish`]).
pub struct Publication<'a> {
    pub pod: &'a Pod,
    pub network_status: &'a [NetworkStatus],
    pub claims: Vec<ClaimStatus>,
    /// The claimed devices' ResourceClaim status entries (KEP-4817).
    pub devices: Vec<DeviceStatus>,
    pub events: Vec<PodEvent>,
}

/// How the write-back went, short of an error.
#[derive(Debug)]
pub struct Published {
    /// `false`: the pod was deleted before its status was written.
    pub pod_found: bool,
    /// `namespace/name` of claims deleted before their status was written.
    pub gone_claims: Vec<String>,
    /// Events that were not posted, and why.
    pub event_failures: Vec<String>,
    /// Claimed devices' status entries not written, and why.
    pub device_failures: Vec<String>,
}

impl KubeCluster {
    /// Pod `namespace/name` as the API server has it now (one GET), or None.
    fn api_pod(&self, namespace: &str, name: &str) -> Result<Option<ApiPod>, ClusterError> {
        let api: Api<ApiPod> = Api::namespaced(self.client.clone(), namespace);
        self.read(&format!("pod {namespace}/{name}"), api.get_opt(name))
    }

    /// The DaemonSet controlling pod `namespace/name`, when it exists (the
    /// very one: same uid) and is not being deleted; `None` otherwise
    /// (install/owner.rs).
    pub fn remaining_daemon_set_of(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<String>, ClusterError> {
        let Some(pod) = self.api_pod(namespace, name)? else {
            return Ok(None);
        };
        let Some(owner) = pod
            .metadata
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .find(|o| o.kind == "DaemonSet" && o.controller == Some(true))
        else {
            return Ok(None);
        };
        let sets: Api<DaemonSet> = Api::namespaced(self.client.clone(), namespace);
        let object = format!("DaemonSet {namespace}/{}", owner.name);
        let set = self.read(&object, sets.get_opt(&owner.name))?;
        let remains = set.is_some_and(|s| {
            s.metadata.uid.as_deref() == Some(owner.uid.as_str())
                && s.metadata.deletion_timestamp.is_none()
        });
        Ok(remains.then_some(owner.name))
    }

    fn custom(
        &self,
        namespace: &str,
        version: &str,
        kind: &str,
        plural: &str,
    ) -> Api<DynamicObject> {
        custom(&self.client, namespace, version, kind, plural)
    }

    /// GET `object` through `api`, decoded by `decode`; `None` when it does
    /// not exist.
    fn get_decoded<T>(
        &self,
        api: Api<DynamicObject>,
        name: &str,
        object: &str,
        decode: impl FnOnce(&serde_json::Value) -> Result<T, SpecError>,
    ) -> Result<Option<T>, ClusterError> {
        let found = self.read(object, api.get_opt(name))?;
        found
            .map(|o| {
                let value = serde_json::to_value(&o).map_err(|e| ClusterError::Decode {
                    object: object.to_string(),
                    reason: e.to_string(),
                })?;
                Ok(decode(&value).map_err(|e| e.within(object))?)
            })
            .transpose()
    }
}

impl NadSource for KubeCluster {
    fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<&NetworkAttachmentDefinition>, ClusterError> {
        let key = (namespace.to_string(), name.to_string());
        if let Some(known) = self.nads.get(&key) {
            return Ok(known.as_ref());
        }
        let object = format!("NetworkAttachmentDefinition {namespace}/{name}");
        // A NAD the cache lacks may be younger than its last event: read.
        if let Some(cached) = self.watched.as_ref().and_then(|w| w.nad(namespace, name)) {
            let nad =
                NetworkAttachmentDefinition::from_value(&cached).map_err(|e| e.within(&object))?;
            return Ok(self.nads.insert(key, Box::new(Some(nad))).as_ref());
        }
        let api = self.custom(
            namespace,
            "v1",
            "NetworkAttachmentDefinition",
            "network-attachment-definitions",
        );
        let nad = self.get_decoded(api, name, &object, NetworkAttachmentDefinition::from_value)?;
        Ok(self.nads.insert(key, Box::new(nad)).as_ref())
    }
}

impl Cluster for KubeCluster {
    fn dra(&self) -> Option<&dyn DraSource> {
        Some(self)
    }

    /// The NADs not known yet (read before, or in the daemon's watch cache)
    /// in one round trip: the one HTTP/2 connection carries the GETs side
    /// by side, where the planner would send them one after another.
    fn prefetch_nads(&self, keys: &[(String, String)]) {
        let unknown: Vec<&(String, String)> = keys
            .iter()
            .filter(|key| self.nads.get(*key).is_none())
            .filter(|(ns, name)| {
                let watched = self.watched.as_ref();
                watched.and_then(|w| w.nad(ns, name)).is_none()
            })
            .collect();
        // One read gains nothing from going ahead.
        if unknown.len() < 2 {
            return;
        }
        let _span = crate::phases::span(self.read_span());
        let reads = unknown.into_iter().map(|(namespace, name)| {
            let api = self.custom(
                namespace,
                "v1",
                "NetworkAttachmentDefinition",
                "network-attachment-definitions",
            );
            let object = format!("NetworkAttachmentDefinition {namespace}/{name}");
            let what = ApiRequest::new(Verb::Get, &object);
            async move {
                let read = bounded(self.timeouts.request, what, api.get_opt(name)).await;
                (namespace, name, read)
            }
        });
        let read = self.driver.block_on(futures::future::join_all(reads));
        for (namespace, name, found) in read {
            let decoded = match found {
                Ok(None) => None,
                Ok(Some(object)) => match serde_json::to_value(&object)
                    .ok()
                    .and_then(|v| NetworkAttachmentDefinition::from_value(&v).ok())
                {
                    Some(nad) => Some(nad),
                    // The planner's own read reports what is wrong with it.
                    None => continue,
                },
                Err(_) => continue,
            };
            self.nads
                .insert((namespace.clone(), name.clone()), Box::new(decoded));
        }
    }

    fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, ClusterError> {
        match self.watched.as_ref().and_then(|w| w.pod(namespace, name)) {
            Some(pod) => Ok(Some(pod)),
            None => self.pod_fresh(namespace, name),
        }
    }

    /// A GET; the daemon refuses a pod of another node, so that a call can
    /// never make it publish for pods it does not serve.
    fn pod_fresh(&self, namespace: &str, name: &str) -> Result<Option<Pod>, ClusterError> {
        let object = format!("pod {namespace}/{name}");
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            namespace,
            &ApiResource::erase::<ApiPod>(&()),
        );
        let Some(raw) = self.read(&object, api.get_opt(name))? else {
            return Ok(None);
        };
        let decode_failed = |e: serde_json::Error| ClusterError::Decode {
            object: object.clone(),
            reason: e.to_string(),
        };
        let raw = serde_json::to_value(raw).map_err(decode_failed)?;
        let found: ApiPod = serde_json::from_value(raw.clone()).map_err(decode_failed)?;
        self.placements.insert(
            (namespace.to_string(), name.to_string()),
            Box::new(Placement {
                node: found.spec.as_ref().and_then(|s| s.node_name.clone()),
                named: crate::dra::pod::named_claims(&raw, &format!("{namespace}/{name}")),
            }),
        );
        if let Some(watched) = &self.watched {
            let node = found.spec.as_ref().and_then(|s| s.node_name.as_deref());
            if node != Some(watched.node()) {
                return Err(ClusterError::PodOnOtherNode {
                    object,
                    node: node.map(String::from),
                    serves: watched.node().to_string(),
                });
            }
        }
        Ok(Some(Pod {
            namespace: found.metadata.namespace.unwrap_or_else(|| namespace.into()),
            name: found.metadata.name.unwrap_or_else(|| name.into()),
            uid: found.metadata.uid.filter(|u| !u.is_empty()),
            annotations: found.metadata.annotations.unwrap_or_default(),
        }))
    }

    fn ipam_claim(&self, namespace: &str, name: &str) -> Result<Option<IpamClaim>, ClusterError> {
        let object = format!("IPAMClaim {namespace}/{name}");
        self.get_decoded(
            claims_api(&self.client, namespace),
            name,
            &object,
            IpamClaim::from_value,
        )
    }
}

impl Publisher for KubeCluster {
    fn publish(&self, publication: &Publication) -> Result<Published, ClusterError> {
        KubeCluster::publish(self, publication)
    }

    fn post_events(&self, pod: &Pod, events: &[PodEvent]) -> Vec<String> {
        KubeCluster::post_events(self, pod, events)
    }
}
