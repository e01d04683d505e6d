//! The requests to the API server that both publishing paths make: the
//! synchronous one ([`super::kube`]) and the daemon's write-behind
//! ([`super::outbox`]). Each request is bounded, a status PATCH is retried
//! while the server fails transiently, and a failure is a [`ClusterError`]
//! naming the object and the server's reason.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PartialObjectMeta, Patch,
    PatchParams, PostParams,
};
use serde_json::json;

use super::error::{ApiRequest, ClusterError, Verb};
use crate::netattach::ipamclaim;
use crate::netattach::status::NETWORK_STATUS_ANNOTATION;

/// One request (`what`), bounded by `bound`.
pub(crate) async fn bounded<T>(
    bound: Duration,
    what: ApiRequest,
    request: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, ClusterError> {
    match tokio::time::timeout(bound, request).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(ClusterError::from_kube(what, e)),
        Err(_) => Err(ClusterError::Timeout {
            request: what,
            bound,
        }),
    }
}

/// The bounds of a status write: each request, and all tries together.
#[derive(Debug, Clone, Copy)]
pub(super) struct StatusWrite {
    pub request: Duration,
    pub window: Duration,
}

/// The merge patch that sets a pod's network-status; with `uid`, the API
/// server refuses it for any other pod of that name.
pub(super) fn pod_status_patch(uid: Option<&str>, network_status: &str) -> serde_json::Value {
    let mut metadata = json!({"annotations": {NETWORK_STATUS_ANNOTATION: network_status}});
    if let Some(uid) = uid {
        metadata["uid"] = json!(uid);
    }
    json!({ "metadata": metadata })
}

/// The merge patch of a bound claim's status (§8.2).
pub(super) fn claim_patch(claim: &ClaimStatus, pod: &str) -> serde_json::Value {
    json!({"status": {"ips": claim.ips, "ownerPod": {"name": pod}}})
}

/// The IPAMClaims of `namespace`.
pub(crate) fn claims_api(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    custom(client, namespace, "v1alpha1", ipamclaim::KIND, "ipamclaims")
}

/// The namespaced API of a custom resource of `k8s.cni.cncf.io`.
pub(super) fn custom(
    client: &kube::Client,
    namespace: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, version, kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// A merge PATCH of `name`'s status subresource, transient failures
/// retried within the window; `Ok(false)` when the object is gone.
pub(super) async fn patch_status<K>(
    api: &Api<K>,
    name: &str,
    patch: &serde_json::Value,
    object: &str,
    bounds: StatusWrite,
) -> Result<bool, ClusterError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let deadline = tokio::time::Instant::now() + bounds.window;
    let mut backoff = Duration::from_millis(50);
    loop {
        let params = PatchParams::default();
        let sent = bounded(
            bounds.request,
            ApiRequest::new(Verb::Patch, object),
            api.patch_status(name, &params, &Patch::Merge(patch)),
        )
        .await;
        match sent {
            Ok(_) => return Ok(true),
            Err(e) if e.status() == Some(404) => return Ok(false),
            Err(e) if e.is_transient() && tokio::time::Instant::now() + backoff < deadline => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Each event posted at once, each bounded; the failures.
pub(super) async fn post_all(
    api: Api<Event>,
    events: Vec<Event>,
    object: String,
    bound: Duration,
) -> Vec<String> {
    let params = PostParams::default();
    let posts = events.iter().map(|event| {
        let post = api.create(&params, event);
        let what = ApiRequest::new(Verb::Create, object.as_str());
        async move {
            bounded(bound, what, post)
                .await
                .err()
                .map(|e| e.to_string())
        }
    });
    futures::future::join_all(posts)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// An IPAMClaim's new status: the addresses the pod holds for it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClaimStatus {
    pub namespace: String,
    pub name: String,
    pub ips: Vec<String>,
}

/// The API group of the spec's custom resources.
const GROUP: &str = "k8s.cni.cncf.io";

/// Objects listed per page.
const PAGE: u32 = 500;

/// Every object of `api`, metadata only, in pages of [`PAGE`], each request bounded by
/// `timeouts.request`.
pub(crate) fn list_metadata<K>(
    handle: &tokio::runtime::Handle,
    timeouts: crate::config::ApiTimeouts,
    api: &Api<K>,
    what: &str,
) -> Result<Vec<PartialObjectMeta<K>>, ClusterError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut all = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().limit(PAGE);
        if let Some(t) = token.take() {
            params = params.continue_token(&t);
        }
        let request = ApiRequest::new(Verb::Get, what);
        let page = handle.block_on(bounded(
            timeouts.request,
            request,
            api.list_metadata(&params),
        ))?;
        all.extend(page.items);
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(next) => token = Some(next),
            None => return Ok(all),
        }
    }
}
