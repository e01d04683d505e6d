//! whereabouts' objects on the API server (`whereabouts.cni.cncf.io`): the
//! IPPools, read and written by compare-and-swap, and the
//! OverlappingRangeIPReservations. A thin client, as [`crate::cluster::kube`]'s: one
//! runtime and one connection per plugin process, every request bounded by
//! `apiTimeout`.
//!
//! A write names the resourceVersion of the copy it was decided on (a
//! merge PATCH with `metadata.resourceVersion`, which the API server
//! refuses with 409 when the pool changed since): it is the same
//! compare-and-swap as whereabouts' JSON Patch `test` of that field, so
//! plexus and whereabouts can write the same pool side by side. A write
//! that only removes entries (a DEL's) instead `test`s each entry's holder
//! in a JSON Patch ([`removals`]): other writers elsewhere in the pool cost
//! it no retry.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, Preconditions,
};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;
use serde_json::{json, Value};

use crate::cluster::api::bounded;
use crate::cluster::client::{context_namespace, owned_client, Driver};
use crate::cluster::error::{ApiRequest, ClusterError, Verb};
use crate::cluster::watch::NamespacedWatch;
use crate::cni::names::{ContainerId, IfName};
use crate::config::ApiTimeouts;
use plexus_ipam::whereabouts::allocate::held_key;
use plexus_ipam::whereabouts::pool::{
    Allocation, NodeSliceSpec, NodeSliceStatus, PoolSpec, ReservationSpec, DEFAULT_NAMESPACE,
    GROUP, VERSION,
};
use plexus_ipam::whereabouts::reclaim::{
    backup_key, claim_key, claim_note, needs_backup, note_key, note_value, BACKUP_PREFIX,
    CLAIM_PREFIX, MAX_NOTES, NOTE_PREFIX,
};

mod slices;

/// An IPPool as read: what a compare-and-swap write names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolCopy {
    pub name: String,
    pub resource_version: String,
    pub spec: PoolSpec,
    /// plexus's notes of its entries, by offset
    /// ([`plexus_ipam::whereabouts::reclaim`]).
    pub notes: BTreeMap<String, String>,
    /// The claim notes of entries bound to an IPAMClaim, by offset
    /// ([`plexus_ipam::whereabouts::reclaim::claim_note`]).
    pub claims: BTreeMap<String, String>,
    /// The backups of entries at offsets whereabouts cannot read, by
    /// offset ([`plexus_ipam::whereabouts::reclaim::BACKUP_PREFIX`]; one
    /// that does not parse is left out).
    pub backups: BTreeMap<String, Allocation>,
}

impl PoolCopy {
    /// The key of the address the container's `ifname` holds
    /// ([`held_key`]).
    pub fn key_held_by(&self, container_id: &ContainerId, ifname: &IfName) -> Option<&String> {
        held_key(&self.spec.allocations, &self.backups, container_id, ifname)
    }
}

/// What plexus notes beside an entry it sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Note {
    /// kubelet's `K8S_POD_UID`, when it sent one.
    pub pod_uid: Option<String>,
    /// The IPAMClaim the entry is bound to.
    pub claim: Option<String>,
}

/// What a write sets at one offset of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The entry, and what to note beside it.
    Set(Allocation, Note),
    /// No entry (nor notes) there.
    Remove,
    /// Notes there gone (the pod UID's, the claim's, the backup), the
    /// entry left as it is (a note that outlived its entry or names
    /// another container).
    Unnote {
        uid: bool,
        claim: bool,
        backup: bool,
    },
    /// A backup of the entry there, written beside it (an entry an
    /// earlier release put past what whereabouts reads).
    BackUp(Allocation),
    /// The entry written back from its backup, the notes left as they are.
    Restore(Allocation),
}

/// An OverlappingRangeIPReservation as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub spec: ReservationSpec,
    /// Which object it is: a delete names it.
    pub uid: String,
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
    slices: Api<DynamicObject>,
    namespace: String,
    timeouts: ApiTimeouts,
    /// The daemon's watch cache of the namespace's pools, read before any
    /// GET.
    cache: Option<Arc<PoolWatch>>,
}

/// The namespace whereabouts keeps its objects in for `kubeconfig`: its
/// current context's, else `kube-system` (`wbNamespaceFromCtx`).
pub fn namespace_of(kubeconfig: &Path) -> Result<String, ClusterError> {
    Ok(context_namespace(kubeconfig)?.unwrap_or_else(|| DEFAULT_NAMESPACE.to_string()))
}

/// The daemon's watch caches of IPPools, one per namespace, each started
/// when a call first needs it and kept for the daemon's lifetime; a warm
/// ADD reads its pool from here (0 reads) and writes it once.
pub struct PoolWatches {
    client: kube::Client,
    handle: tokio::runtime::Handle,
    namespaces: Mutex<HashMap<String, Arc<PoolWatch>>>,
}

/// One namespace's IPPools, as the watch last said and as this daemon last
/// wrote them (a write's answer is newer than the watch until its event
/// arrives).
pub struct PoolWatch {
    store: Store<DynamicObject>,
    resource: ApiResource,
    synced: Arc<AtomicBool>,
    written: Mutex<HashMap<String, PoolCopy>>,
    /// The daemon's node's slice of each NodeSlicePool, by its name.
    slices: Mutex<HashMap<String, RememberedSlice>>,
}

impl PoolWatches {
    pub fn new(client: kube::Client, handle: tokio::runtime::Handle) -> PoolWatches {
        PoolWatches {
            client,
            handle,
            namespaces: Mutex::default(),
        }
    }

    /// The cache of `namespace`'s pools, its watch started on first use.
    fn of(&self, namespace: &str) -> Arc<PoolWatch> {
        let mut namespaces = self.namespaces.lock().unwrap_or_else(|e| e.into_inner());
        namespaces
            .entry(namespace.to_string())
            .or_insert_with(|| {
                let resource = resource("IPPool", "ippools");
                let NamespacedWatch { store, synced, .. } = NamespacedWatch::start(
                    &self.client,
                    &self.handle,
                    namespace,
                    &resource,
                    "IPPools",
                );
                Arc::new(PoolWatch {
                    store,
                    resource,
                    synced,
                    written: Mutex::default(),
                    slices: Mutex::default(),
                })
            })
            .clone()
    }
}

/// A resourceVersion as a number, to tell the newer of two copies (the API
/// server's are etcd revisions; one that is not a number is never newer).
fn revision(copy: &PoolCopy) -> Option<u64> {
    copy.resource_version.parse().ok()
}

impl PoolWatch {
    /// The newest copy of `name` known here (until the watch has listed,
    /// the one this daemon last wrote); `None` when the cache cannot say.
    fn get(&self, name: &str) -> Option<PoolCopy> {
        if !self.synced.load(Ordering::Acquire) {
            return self.lock_written().get(name).cloned();
        }
        let key = ObjectRef::new_with(name, self.resource.clone());
        let watched = self
            .store
            .get(&key)
            .and_then(|found| pool_copy(name, (*found).clone()).ok());
        let written = self.lock_written().get(name).cloned();
        match (watched, written) {
            (Some(w), Some(mine)) if revision(&mine) > revision(&w) => Some(mine),
            (Some(w), _) => Some(w),
            (None, mine) => mine,
        }
    }

    fn remember(&self, copy: PoolCopy) {
        self.lock_written().insert(copy.name.clone(), copy);
    }

    fn forget(&self, name: &str) {
        self.lock_written().remove(name);
    }

    fn lock_written(&self) -> std::sync::MutexGuard<'_, HashMap<String, PoolCopy>> {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_slices(&self) -> std::sync::MutexGuard<'_, HashMap<String, RememberedSlice>> {
        self.slices.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural)
}

impl Pools {
    /// A client of the cluster `kubeconfig` names, for its namespace.
    pub fn connect(kubeconfig: &Path, timeouts: ApiTimeouts) -> Result<Pools, ClusterError> {
        let namespace = namespace_of(kubeconfig)?;
        let (runtime, client) = owned_client(kubeconfig, timeouts)?;
        Ok(Pools::on(
            Driver::Owned(runtime),
            client,
            namespace,
            timeouts,
            None,
        ))
    }

    /// Pools of `namespace` on the daemon's connection, without its watch
    /// cache: every read is a request (the reconciler's).
    pub fn uncached(
        handle: &tokio::runtime::Handle,
        client: &kube::Client,
        timeouts: ApiTimeouts,
        namespace: String,
    ) -> Pools {
        let driver = Driver::Shared(handle.clone());
        Pools::on(driver, client.clone(), namespace, timeouts, None)
    }

    /// The daemon's: its connection (`client` on the runtime of `handle`),
    /// and its watch cache of `namespace` in `watches`.
    pub fn shared(
        handle: &tokio::runtime::Handle,
        client: &kube::Client,
        timeouts: ApiTimeouts,
        watches: &PoolWatches,
        namespace: String,
    ) -> Pools {
        let cache = watches.of(&namespace);
        let driver = Driver::Shared(handle.clone());
        Pools::on(driver, client.clone(), namespace, timeouts, Some(cache))
    }

    fn on(
        driver: Driver,
        client: kube::Client,
        namespace: String,
        timeouts: ApiTimeouts,
        cache: Option<Arc<PoolWatch>>,
    ) -> Pools {
        let reservation = resource(
            "OverlappingRangeIPReservation",
            "overlappingrangeipreservations",
        );
        Pools {
            driver,
            pools: Api::namespaced_with(client.clone(), &namespace, &resource("IPPool", "ippools")),
            reservations: Api::namespaced_with(client.clone(), &namespace, &reservation),
            slices: Api::namespaced_with(client, &namespace, &slices_resource()),
            namespace,
            timeouts,
            cache,
        }
    }

    /// One request about `object`, bounded by `apiTimeout`.
    fn send<T>(
        &self,
        verb: Verb,
        object: &str,
        request: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ClusterError> {
        let what = ApiRequest::new(verb, object);
        self.driver
            .block_on(bounded(self.timeouts.request, what, request))
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Whether reads come from the daemon's watch cache (the daemon's
    /// connection: one cluster for every call it serves).
    pub fn cached(&self) -> bool {
        self.cache.is_some()
    }

    fn object(&self, kind: &str, name: &str) -> String {
        format!("{kind} {}/{name}", self.namespace)
    }

    /// The IPPool `name`, if there is one: from the daemon's cache unless
    /// `fresh` (after a write lost to a newer version than the cache had).
    pub fn existing(&self, name: &str, fresh: bool) -> Result<Option<PoolCopy>, ClusterError> {
        if let Some(cache) = self.cache.as_ref().filter(|_| !fresh) {
            if let Some(copy) = cache.get(name) {
                return Ok(Some(copy));
            }
        }
        let object = self.object("IPPool", name);
        let got = self.send(Verb::Get, &object, self.pools.get_opt(name))?;
        let copy = got.map(|found| pool_copy(&object, found)).transpose()?;
        if let (Some(cache), Some(copy)) = (&self.cache, &copy) {
            // Newer than the watch has said, likely: the next call's copy.
            cache.remember(copy.clone());
        }
        Ok(copy)
    }

    /// The IPPool `name` of `range`, created empty when there is none (a
    /// creation that loses to another is no failure).
    pub fn pool(&self, name: &str, range: &str, fresh: bool) -> Result<PoolCopy, ClusterError> {
        let object = self.object("IPPool", name);
        for _ in 0..2 {
            if let Some(copy) = self.existing(name, fresh)? {
                return Ok(copy);
            }
            let empty = new_object("IPPool", name, json!({"range": range, "allocations": {}}));
            let created = self.send(
                Verb::Create,
                &object,
                self.pools.create(&PostParams::default(), &empty),
            );
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

    /// Makes each of `changes` in the pool, if the pool is still at
    /// `copy`'s resourceVersion; a note goes with each entry set (while the
    /// pool has room for them), and one that would outlive or mislabel its
    /// entry goes.
    pub fn write(
        &self,
        copy: &PoolCopy,
        changes: &BTreeMap<String, Change>,
    ) -> Result<Written, ClusterError> {
        let object = self.object("IPPool", &copy.name);
        if let Some(patch) = removals(copy, changes) {
            return self.written(&object, copy, Patch::Json(patch));
        }
        let mut entries = serde_json::Map::new();
        let mut notes = serde_json::Map::new();
        for (key, change) in changes {
            // The annotation `name` as it must be after the write: `value`,
            // or none (`had`: there is one to remove).
            let mut annotate = |name: String, value: Option<String>, had: bool| match value {
                Some(v) => {
                    notes.insert(name, json!(v));
                }
                None if had => {
                    notes.insert(name, Value::Null);
                }
                None => {}
            };
            let had_backup = copy.backups.contains_key(key);
            let (entry, note, claim) = match change {
                Change::Set(entry, note) => {
                    let room = copy.notes.len() < MAX_NOTES || copy.notes.contains_key(key);
                    let uid = note.pod_uid.as_deref().filter(|_| room);
                    let uid_note = uid.map(|uid| note_value(uid, &entry.container_id));
                    let claim = note.claim.as_deref();
                    let claim_note = claim.map(|c| claim_note(c, &entry.container_id));
                    let backup = needs_backup(key).then(|| json!(entry).to_string());
                    annotate(backup_key(key), backup, had_backup);
                    (json!(entry), uid_note, claim_note)
                }
                Change::Remove => {
                    annotate(backup_key(key), None, had_backup);
                    (Value::Null, None, None)
                }
                Change::Unnote { uid, claim, backup } => {
                    annotate(note_key(key), None, *uid && copy.notes.contains_key(key));
                    annotate(
                        claim_key(key),
                        None,
                        *claim && copy.claims.contains_key(key),
                    );
                    annotate(backup_key(key), None, *backup && had_backup);
                    continue;
                }
                Change::BackUp(entry) => {
                    annotate(backup_key(key), Some(json!(entry).to_string()), had_backup);
                    continue;
                }
                Change::Restore(entry) => {
                    entries.insert(key.clone(), json!(entry));
                    continue;
                }
            };
            entries.insert(key.clone(), entry);
            annotate(note_key(key), note, copy.notes.contains_key(key));
            annotate(claim_key(key), claim, copy.claims.contains_key(key));
        }
        let mut metadata = json!({"resourceVersion": copy.resource_version});
        if !notes.is_empty() {
            metadata["annotations"] = Value::Object(notes);
        }
        let patch = json!({"metadata": metadata, "spec": {"allocations": entries}});
        self.written(&object, copy, Patch::Merge(patch))
    }

    /// Sends `patch` of the pool `copy` was read from; a refusal because it
    /// changed since (409, or 422: a JSON Patch `test` that failed) is
    /// [`Written::Lost`].
    fn written(
        &self,
        object: &str,
        copy: &PoolCopy,
        patch: Patch<Value>,
    ) -> Result<Written, ClusterError> {
        let sent = self.send(
            Verb::Patch,
            object,
            self.pools
                .patch(&copy.name, &PatchParams::default(), &patch),
        );
        match sent {
            Ok(written) => {
                if let (Some(cache), Ok(copy)) = (&self.cache, pool_copy(object, written)) {
                    cache.remember(copy);
                }
                Ok(Written::Done)
            }
            Err(e) if matches!(e.status(), Some(409 | 422)) => {
                if let Some(cache) = &self.cache {
                    cache.forget(&copy.name);
                }
                Ok(Written::Lost)
            }
            Err(e) => Err(e),
        }
    }

    /// Every IPPool of the namespace (`plexus pools`).
    pub fn list(&self) -> Result<Vec<PoolCopy>, ClusterError> {
        let object = format!("IPPools of {}", self.namespace);
        let listed = self.send(Verb::Get, &object, self.pools.list(&Default::default()))?;
        listed
            .items
            .into_iter()
            .map(|found| pool_copy(&object, found))
            .collect()
    }

    /// Every OverlappingRangeIPReservation of the namespace, by name.
    pub fn reservations(&self) -> Result<Vec<(String, Reservation)>, ClusterError> {
        let object = format!("OverlappingRangeIPReservations of {}", self.namespace);
        let listed = self.send(
            Verb::Get,
            &object,
            self.reservations.list(&Default::default()),
        )?;
        listed
            .items
            .into_iter()
            .map(|found| {
                let name = found.name_any();
                Ok((name, reservation_copy(&object, found)?))
            })
            .collect()
    }

    /// The OverlappingRangeIPReservation `name`, if there is one.
    pub fn reservation(&self, name: &str) -> Result<Option<Reservation>, ClusterError> {
        let object = self.object("OverlappingRangeIPReservation", name);
        let got = self.send(Verb::Get, &object, self.reservations.get_opt(name))?;
        got.map(|o| reservation_copy(&object, o)).transpose()
    }

    /// Creates the reservation `name`; `Ok(false)` when it exists already.
    pub fn reserve(&self, name: &str, spec: &ReservationSpec) -> Result<bool, ClusterError> {
        let object = self.object("OverlappingRangeIPReservation", name);
        let reservation = new_object("OverlappingRangeIPReservation", name, json!(spec));
        let created = self.send(
            Verb::Create,
            &object,
            self.reservations
                .create(&PostParams::default(), &reservation),
        );
        match created {
            Ok(_) => Ok(true),
            Err(e) if e.status() == Some(409) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deletes `reservation` (named `name`), if it is still that object
    /// (a precondition on its UID: one made anew since it was read, for
    /// another pod, stays); one that is gone is no failure.
    pub fn unreserve(&self, name: &str, reservation: &Reservation) -> Result<(), ClusterError> {
        let object = self.object("OverlappingRangeIPReservation", name);
        let only = Preconditions {
            uid: Some(reservation.uid.clone()),
            resource_version: None,
        };
        self.delete_if(&self.reservations, &object, name, only)
            .map(drop)
    }

    /// A merge PATCH of `name` (`object` in errors) through `api`.
    fn merge_patch(
        &self,
        api: &Api<DynamicObject>,
        object: &str,
        name: &str,
        patch: &Value,
    ) -> Result<DynamicObject, ClusterError> {
        let params = PatchParams::default();
        self.send(
            Verb::Patch,
            object,
            api.patch(name, &params, &Patch::Merge(patch)),
        )
    }

    /// Deletes `name` (`object` in errors) through `api` if it still meets
    /// `only`: `Ok(false)` when it does not (409: it stays); one gone
    /// already (404) is no failure.
    fn delete_if(
        &self,
        api: &Api<DynamicObject>,
        object: &str,
        name: &str,
        only: Preconditions,
    ) -> Result<bool, ClusterError> {
        let params = DeleteParams {
            preconditions: Some(only),
            ..DeleteParams::default()
        };
        match self.send(Verb::Delete, object, api.delete(name, &params)) {
            Ok(_) => Ok(true),
            Err(e) if e.status() == Some(404) => Ok(true),
            Err(e) if e.status() == Some(409) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// `name` as one token of a JSON Pointer: `~` and `/` escaped (RFC 6901).
fn pointer_token(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// The write of `changes` as a JSON Patch that names only the entries it
/// removes, when every change removes an entry the copy holds (a DEL's):
/// for each, `test`s of the holder (container ID, pod, interface) and
/// `remove`s of the entry and of its notes in the copy. Other writers'
/// changes elsewhere in the pool then cost no retry, where a
/// resourceVersion would lose to each (100 DELs of one pool at once, issue
/// 45). It is as safe as the compare-and-swap: an entry removed is the one
/// decided on, or the server refuses the whole patch (422), and the notes
/// at an offset are its entry's. Anything else, `None`: the write names the
/// resourceVersion.
fn removals(copy: &PoolCopy, changes: &BTreeMap<String, Change>) -> Option<json_patch::Patch> {
    if changes.is_empty() {
        return None;
    }
    let mut ops = Vec::new();
    for (key, change) in changes {
        let entry = copy.spec.allocations.get(key)?;
        if *change != Change::Remove {
            return None;
        }
        // A key whereabouts wrote need not be a number: escaped as well.
        let at = format!("/spec/allocations/{}", pointer_token(key));
        let held = [
            ("id", entry.container_id.as_str()),
            ("podref", entry.podref.as_str()),
            ("ifname", entry.ifname.as_deref().unwrap_or_default()),
        ];
        // whereabouts before 0.8 writes no interface.
        for (field, value) in held.into_iter().filter(|(_, v)| !v.is_empty()) {
            ops.push(json!({"op": "test", "path": format!("{at}/{field}"), "value": value}));
        }
        ops.push(json!({"op": "remove", "path": at}));
        let notes = [
            (note_key(key), copy.notes.contains_key(key)),
            (claim_key(key), copy.claims.contains_key(key)),
            (backup_key(key), copy.backups.contains_key(key)),
        ];
        for (name, _) in notes.into_iter().filter(|(_, had)| *had) {
            let path = format!("/metadata/annotations/{}", pointer_token(&name));
            ops.push(json!({"op": "remove", "path": path}));
        }
    }
    serde_json::from_value(Value::Array(ops)).ok()
}

/// Every IPPool, OverlappingRangeIPReservation and NodeSlicePool of
/// `namespace`, or of the cluster (`None`), each with its namespace: three
/// LISTs (the reconciler's pass).
pub fn listed(
    handle: &tokio::runtime::Handle,
    client: &kube::Client,
    timeouts: ApiTimeouts,
    namespace: Option<&str>,
) -> Result<Listed, ClusterError> {
    let scope = namespace.unwrap_or("every namespace").to_string();
    let list =
        |resource: ApiResource| -> Result<Vec<(String, String, DynamicObject)>, ClusterError> {
            let api: Api<DynamicObject> = match namespace {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
                None => Api::all_with(client.clone(), &resource),
            };
            let what = format!("{}s of {scope}", resource.kind);
            let request = async move { api.list(&Default::default()).await };
            let listed = handle.block_on(bounded(
                timeouts.request,
                ApiRequest::new(Verb::Get, what),
                request,
            ))?;
            Ok(listed
                .items
                .into_iter()
                .map(|found| {
                    let namespace = found.namespace().unwrap_or_default();
                    let object = format!("{} {namespace}/{}", resource.kind, found.name_any());
                    (namespace, object, found)
                })
                .collect())
        };
    let pools = list(resource("IPPool", "ippools"))?
        .into_iter()
        .map(|(namespace, object, found)| Ok((namespace, pool_copy(&object, found)?)))
        .collect::<Result<_, ClusterError>>()?;
    let reservations = list(resource(
        "OverlappingRangeIPReservation",
        "overlappingrangeipreservations",
    ))?
    .into_iter()
    .map(|(namespace, object, found)| {
        Ok(ReservationSeen {
            namespace,
            name: found.name_any(),
            reservation: Reservation {
                spec: spec_of(&object, &found.data)?,
                uid: found.metadata.uid.unwrap_or_default(),
            },
        })
    })
    .collect::<Result<_, ClusterError>>()?;
    let slices = list(slices_resource())?
        .into_iter()
        .map(|(namespace, object, found)| Ok((namespace, slice_copy(&object, found)?)))
        .collect::<Result<_, ClusterError>>()?;
    Ok(Listed {
        pools,
        reservations,
        slices,
    })
}

/// Whether the cluster holds any IPPool (one LIST of at most one); none
/// when whereabouts' CRDs are not installed.
pub fn any_pool(
    handle: &tokio::runtime::Handle,
    client: &kube::Client,
    timeouts: ApiTimeouts,
) -> Result<bool, ClusterError> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource("IPPool", "ippools"));
    let request = async move { api.list_metadata(&ListParams::default().limit(1)).await };
    let what = ApiRequest::new(Verb::Get, "IPPools of every namespace");
    match handle.block_on(bounded(timeouts.request, what, request)) {
        Ok(listed) => Ok(!listed.items.is_empty()),
        Err(e) if e.status() == Some(404) => Ok(false),
        Err(e) => Err(e),
    }
}

/// What [`listed`] gives: the pools, each with its namespace, the
/// reservations, and the NodeSlicePools, each with its namespace.
#[derive(Debug, Default)]
pub struct Listed {
    pub pools: Vec<(String, PoolCopy)>,
    pub reservations: Vec<ReservationSeen>,
    pub slices: Vec<(String, SliceCopy)>,
}

/// A reservation as a LIST gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationSeen {
    pub namespace: String,
    pub name: String,
    pub reservation: Reservation,
}

/// A NodeSlicePool as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceCopy {
    pub name: String,
    pub resource_version: String,
    pub spec: NodeSliceSpec,
    pub status: NodeSliceStatus,
}

/// What the daemon remembers of its node's slice of one network.
#[derive(Debug, Clone)]
struct RememberedSlice {
    spec: NodeSliceSpec,
    slice: ipnetwork::IpNetwork,
    at: std::time::Instant,
}

fn slice_copy(object: &str, found: DynamicObject) -> Result<SliceCopy, ClusterError> {
    let status = match found.data.get("status") {
        None | Some(serde_json::Value::Null) => NodeSliceStatus::default(),
        Some(status) => {
            serde_json::from_value(status.clone()).map_err(|e| ClusterError::Decode {
                object: object.to_string(),
                reason: format!("status: {e}"),
            })?
        }
    };
    Ok(SliceCopy {
        spec: spec_of(object, &found.data)?,
        name: found.name_any(),
        resource_version: found.metadata.resource_version.unwrap_or_default(),
        status,
    })
}

/// The NodeSlicePool resource.
fn slices_resource() -> ApiResource {
    resource("NodeSlicePool", "nodeslicepools")
}

/// A new object of `kind` named `name` with `spec`.
fn new_object(kind: &str, name: &str, spec: Value) -> DynamicObject {
    DynamicObject {
        types: Some(kube::core::TypeMeta {
            api_version: format!("{GROUP}/{VERSION}"),
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

fn reservation_copy(object: &str, found: DynamicObject) -> Result<Reservation, ClusterError> {
    Ok(Reservation {
        spec: spec_of(object, &found.data)?,
        uid: found.metadata.uid.unwrap_or_default(),
    })
}

/// `kind` as JSON, as the API server serves it.
fn object_of_json(kind: &str, json: Value) -> Result<DynamicObject, ClusterError> {
    serde_json::from_value(json).map_err(|e| ClusterError::Decode {
        object: kind.to_string(),
        reason: e.to_string(),
    })
}

// whereabouts' objects as JSON, decoded as this client decodes what it
// reads from the API server (the fuzz target `whereabouts_objects` feeds
// them anything).

/// An IPPool as JSON, decoded as read.
pub fn pool_from_json(json: Value) -> Result<PoolCopy, ClusterError> {
    pool_copy("IPPool", object_of_json("IPPool", json)?)
}

/// An OverlappingRangeIPReservation as JSON, decoded as read.
pub fn reservation_from_json(json: Value) -> Result<Reservation, ClusterError> {
    let kind = "OverlappingRangeIPReservation";
    reservation_copy(kind, object_of_json(kind, json)?)
}

/// A NodeSlicePool as JSON, decoded as read.
pub fn node_slices_from_json(json: Value) -> Result<SliceCopy, ClusterError> {
    slice_copy("NodeSlicePool", object_of_json("NodeSlicePool", json)?)
}

pub(crate) fn pool_copy(object: &str, found: DynamicObject) -> Result<PoolCopy, ClusterError> {
    let spec: PoolSpec = spec_of(object, &found.data)?;
    let annotations = found.metadata.annotations.unwrap_or_default();
    let by_prefix = |prefix: &str| -> BTreeMap<String, String> {
        annotations
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(prefix)?.to_string(), v.clone())))
            .collect()
    };
    Ok(PoolCopy {
        name: found.metadata.name.unwrap_or_default(),
        resource_version: found.metadata.resource_version.unwrap_or_default(),
        spec,
        notes: by_prefix(NOTE_PREFIX),
        claims: by_prefix(CLAIM_PREFIX),
        backups: by_prefix(BACKUP_PREFIX)
            .into_iter()
            .filter_map(|(offset, json)| Some((offset, serde_json::from_str(&json).ok()?)))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, ifname: &str) -> Allocation {
        Allocation {
            container_id: ContainerId::new(id).unwrap(),
            podref: format!("ns/{id}"),
            ifname: (!ifname.is_empty()).then(|| IfName::new(ifname).unwrap()),
        }
    }

    fn copy() -> PoolCopy {
        let mut spec = PoolSpec {
            range: "fd20::/64".into(),
            allocations: BTreeMap::new(),
        };
        spec.allocations.insert("5".into(), entry("c5", "net1"));
        spec.allocations.insert("9".into(), entry("c9", ""));
        PoolCopy {
            name: "fd20--64".into(),
            resource_version: "7".into(),
            spec,
            notes: BTreeMap::from([("5".to_string(), "uid/c5".to_string())]),
            claims: BTreeMap::new(),
            backups: BTreeMap::new(),
        }
    }

    /// A DEL's write names its entry's holder and no resourceVersion, so
    /// other writers elsewhere in the pool cost it nothing.
    #[test]
    fn a_removal_tests_its_holder_instead_of_the_resource_version() {
        let changes = BTreeMap::from([("5".to_string(), Change::Remove)]);
        let patch = removals(&copy(), &changes).expect("a removal");
        let ops = serde_json::to_value(patch).unwrap();
        assert_eq!(
            ops,
            json!([
                {"op": "test", "path": "/spec/allocations/5/id", "value": "c5"},
                {"op": "test", "path": "/spec/allocations/5/podref", "value": "ns/c5"},
                {"op": "test", "path": "/spec/allocations/5/ifname", "value": "net1"},
                {"op": "remove", "path": "/spec/allocations/5"},
                {"op": "remove", "path": "/metadata/annotations/pod-uid.plexus.io~15"},
            ])
        );
        assert!(!ops.to_string().contains("resourceVersion"));
        // An entry whereabouts wrote without an interface is tested
        // without one.
        let changes = BTreeMap::from([("9".to_string(), Change::Remove)]);
        let ops = serde_json::to_value(removals(&copy(), &changes).unwrap()).unwrap();
        assert!(!ops.to_string().contains("ifname"));
        // A key that is not a number is one escaped pointer token.
        let mut odd = copy();
        odd.spec
            .allocations
            .insert("a/b~c".into(), entry("cx", "net1"));
        let changes = BTreeMap::from([("a/b~c".to_string(), Change::Remove)]);
        let ops = serde_json::to_value(removals(&odd, &changes).unwrap()).unwrap();
        assert_eq!(ops[3]["path"], "/spec/allocations/a~1b~0c");
    }

    /// Anything but removals of entries the copy holds is a
    /// compare-and-swap on the resourceVersion.
    #[test]
    fn other_writes_keep_the_compare_and_swap() {
        let copy = copy();
        let absent = BTreeMap::from([("6".to_string(), Change::Remove)]);
        let set = BTreeMap::from([(
            "6".to_string(),
            Change::Set(entry("c6", "net1"), Note::default()),
        )]);
        let mixed = BTreeMap::from([
            ("5".to_string(), Change::Remove),
            (
                "9".to_string(),
                Change::Unnote {
                    uid: true,
                    claim: false,
                    backup: false,
                },
            ),
        ]);
        for changes in [absent, set, mixed, BTreeMap::new()] {
            assert!(removals(&copy, &changes).is_none(), "{changes:?}");
        }
    }
}
