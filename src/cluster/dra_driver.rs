//! What plexus's DRA driver (`crate::dra::driver`) reads and writes on the
//! API server, every request bounded:
//!
//! - Prepare's GET of the claim kubelet names (fresh: the claim was just
//!   allocated, and a cache may not have it yet);
//! - the claims' `status.devices[]` entries of its devices (KEP-4817: a
//!   Ready condition and the network data of the device's attachment),
//!   written with server-side apply under the driver's field manager, so
//!   other drivers' entries of the same claim stay theirs, and taken back
//!   by applying none at Unprepare;
//! - the node's pool: its slices made to be exactly
//!   [`Pool::slices`](crate::dra::driver::publish::Pool::slices): created,
//!   replaced when they differ, and the node's surplus slices of the driver
//!   deleted.

use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::api::bounded;
use super::error::{ApiRequest, ClusterError, Verb};
use super::watch::{claims_resource, on_node, selector_refused, slices_resource};
use crate::dra::driver::publish::{FoundPool, Pool};
use crate::dra::driver::DRIVER;

/// One device's entry of its claim's `status.devices[]`, after its
/// attachment was added; queued in the daemon's outbox as it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceStatus {
    pub namespace: String,
    pub claim: String,
    pub pool: String,
    pub device: String,
    /// KEP-4817 `networkData`.
    pub interface_name: String,
    /// The addresses with their prefix length (`10.0.0.5/24`).
    pub ips: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_address: Option<String>,
}

impl DeviceStatus {
    /// The entry (AllocatedDeviceStatus), Ready since `now` (RFC 3339).
    pub fn entry(&self, now: &str) -> Value {
        let mut network = json!({"interfaceName": self.interface_name, "ips": self.ips});
        if let Some(mac) = &self.hardware_address {
            network["hardwareAddress"] = json!(mac);
        }
        json!({
            "driver": DRIVER, "pool": self.pool, "device": self.device,
            "conditions": [{"type": "Ready", "status": "True", "reason": "NetworkReady",
                            "message": format!("attached as {}", self.interface_name),
                            "lastTransitionTime": now}],
            "networkData": network,
        })
    }
}

/// The field manager of the driver's writes of claims' status.
const FIELD_MANAGER: &str = DRIVER;

/// Apply `entries` as the driver's part of claim `namespace/name`'s
/// `status.devices` (none: take its part back). A claim that is gone needs
/// no status.
pub(super) fn apply_device_statuses(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    entries: Vec<Value>,
) -> impl std::future::Future<Output = Result<(), kube::Error>> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &claims_resource());
    let body = json!({
        "apiVersion": crate::dra::API_VERSION, "kind": crate::dra::claim::KIND,
        "metadata": {"name": name, "namespace": namespace},
        "status": {"devices": entries},
    });
    let name = name.to_string();
    async move {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match api.patch_status(&name, &params, &Patch::Apply(&body)).await {
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            other => other.map(drop),
        }
    }
}

/// Write `statuses` (one server-side apply per claim, each bounded by
/// `bound`, all at once): what was not written, and why.
pub(super) async fn write_device_statuses(
    client: &kube::Client,
    statuses: &[DeviceStatus],
    bound: Duration,
) -> Vec<String> {
    let now = k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let mut by_claim: std::collections::BTreeMap<(&str, &str), Vec<Value>> = Default::default();
    for s in statuses {
        by_claim
            .entry((&s.namespace, &s.claim))
            .or_default()
            .push(s.entry(&now));
    }
    let writes = by_claim.into_iter().map(|((namespace, claim), entries)| {
        let what = ApiRequest::new(
            Verb::Patch,
            format!("ResourceClaim {namespace}/{claim} status"),
        );
        bounded(
            bound,
            what,
            apply_device_statuses(client, namespace, claim, entries),
        )
    });
    futures::future::join_all(writes)
        .await
        .into_iter()
        .filter_map(|w| w.err().map(|e| e.to_string()))
        .collect()
}

/// The driver's connection to the API server.
#[derive(Clone)]
pub struct DriverApi {
    pub client: kube::Client,
    pub handle: tokio::runtime::Handle,
    pub timeout: Duration,
}

impl DriverApi {
    fn run<T>(
        &self,
        what: ApiRequest,
        request: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ClusterError> {
        self.handle.block_on(bounded(self.timeout, what, request))
    }

    /// The claim `namespace/name` as JSON.
    pub fn claim(&self, namespace: &str, name: &str) -> Result<Value, ClusterError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &claims_resource());
        let what = ApiRequest::new(Verb::Get, format!("ResourceClaim {namespace}/{name}"));
        let found = self.run(what, api.get(name))?;
        Ok(serde_json::to_value(found).unwrap_or_default())
    }

    /// Take the driver's entries of claim `namespace/name`'s
    /// `status.devices` back (Unprepare).
    pub fn clear_device_statuses(&self, namespace: &str, name: &str) -> Result<(), ClusterError> {
        let what = ApiRequest::new(
            Verb::Patch,
            format!("ResourceClaim {namespace}/{name} status"),
        );
        self.run(
            what,
            apply_device_statuses(&self.client, namespace, name, Vec::new()),
        )
    }

    /// The slices of this driver on `node`.
    fn our_slices(&self, node: &str) -> Result<Vec<DynamicObject>, ClusterError> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &slices_resource());
        let what = ApiRequest::new(Verb::Get, format!("ResourceSlices of node {node}"));
        let list = match self.run(
            what.clone(),
            api.list(&ListParams::default().fields(&on_node(node))),
        ) {
            Err(e) if selector_refused(&e) => self.run(what, api.list(&ListParams::default()))?,
            other => other?,
        };
        Ok(list
            .items
            .into_iter()
            .filter(|s| {
                s.data.pointer("/spec/driver").and_then(Value::as_str) == Some(DRIVER)
                    && s.data.pointer("/spec/nodeName").and_then(Value::as_str) == Some(node)
            })
            .collect())
    }

    /// The node's slices of this driver a previous daemon left: a new
    /// daemon's first pool keeps their generation or passes it.
    pub fn found(&self, node: &str) -> Result<FoundPool, ClusterError> {
        let mut slices = self.our_slices(node)?;
        slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let generation_of = |s: &DynamicObject| {
            s.data
                .pointer("/spec/pool/generation")
                .and_then(Value::as_i64)
        };
        let generation = slices.iter().filter_map(generation_of).max().unwrap_or(0);
        let devices = slices
            .iter()
            .filter(|s| generation_of(s) == Some(generation))
            .filter_map(|s| s.data.pointer("/spec/devices").and_then(Value::as_array))
            .flatten()
            .cloned()
            .collect();
        Ok(FoundPool {
            generation,
            devices,
        })
    }

    /// Make the node's slices `pool`'s: create, replace what differs,
    /// delete the rest. Returns how many requests wrote.
    pub fn publish(&self, pool: &Pool) -> Result<usize, ClusterError> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &slices_resource());
        let existing = self.our_slices(&pool.node)?;
        let wanted = pool.slices();
        let mut writes = 0;
        for slice in &wanted {
            let name = slice["metadata"]["name"].as_str().unwrap_or_default();
            let mut object: DynamicObject =
                serde_json::from_value(slice.clone()).map_err(|e| ClusterError::Refused {
                    request: ApiRequest::new(Verb::Create, format!("ResourceSlice {name}")),
                    status: 0,
                    reason: e.to_string(),
                })?;
            match existing
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(name))
            {
                Some(current) if current.data.get("spec") == slice.get("spec") => {}
                Some(current) => {
                    object.metadata.resource_version = current.metadata.resource_version.clone();
                    let what = ApiRequest::new(Verb::Update, format!("ResourceSlice {name}"));
                    self.run(what, api.replace(name, &PostParams::default(), &object))?;
                    writes += 1;
                }
                None => {
                    let what = ApiRequest::new(Verb::Create, format!("ResourceSlice {name}"));
                    self.run(what, api.create(&PostParams::default(), &object))?;
                    writes += 1;
                }
            }
        }
        for stale in &existing {
            let Some(name) = stale.metadata.name.as_deref() else {
                continue;
            };
            if wanted.iter().any(|w| w["metadata"]["name"] == name) {
                continue;
            }
            let what = ApiRequest::new(Verb::Delete, format!("ResourceSlice {name}"));
            match self.run(what, api.delete(name, &DeleteParams::default())) {
                Err(e) if e.status() == Some(404) => {}
                other => {
                    other?;
                    writes += 1;
                }
            }
        }
        Ok(writes)
    }
}
