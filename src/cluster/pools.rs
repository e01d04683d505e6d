//! whereabouts' objects on the API server (`whereabouts.cni.cncf.io`): the
//! IPPools, read and written by compare-and-swap, and the
//! OverlappingRangeIPReservations. A thin client, as [`super::kube`]'s: one
//! runtime and one connection per plugin process, every request bounded by
//! `apiTimeout`.
//!
//! A write names the resourceVersion of the copy it was decided on (a
//! merge PATCH with `metadata.resourceVersion`, which the API server
//! refuses with 409 when the pool changed since): it is the same
//! compare-and-swap as whereabouts' JSON Patch `test` of that field, so
//! plexus and whereabouts can write the same pool side by side.

use std::collections::BTreeMap;
use std::path::Path;

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{json, Value};

use super::api::bounded;
use super::error::{ApiRequest, ClusterError, Verb};
use super::kube::{context_namespace, owned_client, Driver};
use crate::config::ApiTimeouts;
use plexus_ipam::whereabouts::pool::{
    Allocation, PoolSpec, ReservationSpec, API_VERSION, DEFAULT_NAMESPACE, GROUP, VERSION,
};

/// An IPPool as read: what a compare-and-swap write names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolCopy {
    pub name: String,
    pub resource_version: String,
    pub spec: PoolSpec,
}

/// How a compare-and-swap write went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Done,
    /// The pool changed since the copy (409): decide again on a fresh one.
    Lost,
}

/// The pools of one namespace (the kubeconfig context's, else
/// `kube-system`, as whereabouts).
pub struct Pools {
    driver: Driver,
    pools: Api<DynamicObject>,
    reservations: Api<DynamicObject>,
    namespace: String,
    timeouts: ApiTimeouts,
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural)
}

impl Pools {
    /// A client of the cluster `kubeconfig` names, for its namespace.
    pub fn connect(kubeconfig: &Path, timeouts: ApiTimeouts) -> Result<Pools, ClusterError> {
        let namespace =
            context_namespace(kubeconfig)?.unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        let (runtime, client) = owned_client(kubeconfig, timeouts)?;
        Ok(Pools {
            driver: Driver::Owned(runtime),
            pools: Api::namespaced_with(client.clone(), &namespace, &resource("IPPool", "ippools")),
            reservations: Api::namespaced_with(
                client,
                &namespace,
                &resource(
                    "OverlappingRangeIPReservation",
                    "overlappingrangeipreservations",
                ),
            ),
            namespace,
            timeouts,
        })
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn object(&self, kind: &str, name: &str) -> String {
        format!("{kind} {}/{name}", self.namespace)
    }

    /// The IPPool `name`, if there is one.
    pub fn existing(&self, name: &str) -> Result<Option<PoolCopy>, ClusterError> {
        let object = self.object("IPPool", name);
        let got = self.driver.block_on(bounded(
            self.timeouts.request,
            ApiRequest::new(Verb::Get, &object),
            self.pools.get_opt(name),
        ))?;
        got.map(|found| pool_copy(&object, found)).transpose()
    }

    /// The IPPool `name` of `range`, created empty when there is none (a
    /// creation that loses to another is no failure).
    pub fn pool(&self, name: &str, range: &str) -> Result<PoolCopy, ClusterError> {
        let object = self.object("IPPool", name);
        for _ in 0..2 {
            if let Some(copy) = self.existing(name)? {
                return Ok(copy);
            }
            let empty = new_object("IPPool", name, json!({"range": range, "allocations": {}}));
            let created = self.driver.block_on(bounded(
                self.timeouts.request,
                ApiRequest::new(Verb::Create, &object),
                self.pools.create(&PostParams::default(), &empty),
            ));
            match created {
                Ok(made) => return pool_copy(&object, made),
                Err(e) if e.status() == Some(409) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(ClusterError::Decode {
            object,
            reason: "created by another writer and then gone again".into(),
        })
    }

    /// Sets each key of `changes` in the pool's allocations (`None`
    /// removes it), if the pool is still at `copy`'s resourceVersion.
    pub fn write(
        &self,
        copy: &PoolCopy,
        changes: &BTreeMap<String, Option<Allocation>>,
    ) -> Result<Written, ClusterError> {
        let object = self.object("IPPool", &copy.name);
        let patch = json!({
            "metadata": {"resourceVersion": copy.resource_version},
            "spec": {"allocations": changes},
        });
        let sent = self.driver.block_on(bounded(
            self.timeouts.request,
            ApiRequest::new(Verb::Patch, &object),
            self.pools
                .patch(&copy.name, &PatchParams::default(), &Patch::Merge(&patch)),
        ));
        match sent {
            Ok(_) => Ok(Written::Done),
            Err(e) if e.status() == Some(409) => Ok(Written::Lost),
            Err(e) => Err(e),
        }
    }

    /// The OverlappingRangeIPReservation `name`, if there is one.
    pub fn reservation(&self, name: &str) -> Result<Option<ReservationSpec>, ClusterError> {
        let object = self.object("OverlappingRangeIPReservation", name);
        let got = self.driver.block_on(bounded(
            self.timeouts.request,
            ApiRequest::new(Verb::Get, &object),
            self.reservations.get_opt(name),
        ))?;
        got.map(|o| spec_of(&object, &o.data)).transpose()
    }

    /// Creates the reservation `name`; `Ok(false)` when it exists already.
    pub fn reserve(&self, name: &str, spec: &ReservationSpec) -> Result<bool, ClusterError> {
        let object = self.object("OverlappingRangeIPReservation", name);
        let reservation = new_object("OverlappingRangeIPReservation", name, json!(spec));
        let created = self.driver.block_on(bounded(
            self.timeouts.request,
            ApiRequest::new(Verb::Create, &object),
            self.reservations
                .create(&PostParams::default(), &reservation),
        ));
        match created {
            Ok(_) => Ok(true),
            Err(e) if e.status() == Some(409) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deletes the reservation `name`; one that is gone is no failure.
    pub fn unreserve(&self, name: &str) -> Result<(), ClusterError> {
        let object = self.object("OverlappingRangeIPReservation", name);
        let deleted = self.driver.block_on(bounded(
            self.timeouts.request,
            ApiRequest::new(Verb::Delete, &object),
            self.reservations.delete(name, &DeleteParams::default()),
        ));
        match deleted {
            Ok(_) => Ok(()),
            Err(e) if e.status() == Some(404) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// A new object of `kind` named `name` with `spec`.
fn new_object(kind: &str, name: &str, spec: Value) -> DynamicObject {
    DynamicObject {
        types: Some(kube::core::TypeMeta {
            api_version: API_VERSION.to_string(),
            kind: kind.to_string(),
        }),
        metadata: kube::core::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        data: json!({ "spec": spec }),
    }
}

fn spec_of<T: serde::de::DeserializeOwned>(object: &str, data: &Value) -> Result<T, ClusterError> {
    serde_json::from_value(data.get("spec").cloned().unwrap_or(Value::Null)).map_err(|e| {
        ClusterError::Decode {
            object: object.to_string(),
            reason: format!("spec: {e}"),
        }
    })
}

fn pool_copy(object: &str, found: DynamicObject) -> Result<PoolCopy, ClusterError> {
    let spec: PoolSpec = spec_of(object, &found.data)?;
    Ok(PoolCopy {
        name: found.metadata.name.unwrap_or_default(),
        resource_version: found.metadata.resource_version.unwrap_or_default(),
        spec,
    })
}
