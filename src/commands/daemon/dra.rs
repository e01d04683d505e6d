//! `plexus daemon --dra`: plexus as a DRA driver's kubelet plugin
//! (`crate::dra::driver`), the way kubelet's DRA manager expects one
//! (k8s.io/dynamic-resource-allocation `kubeletplugin`):
//!
//! 1. it asks once whether the API server serves `resource.k8s.io/v1`
//!    (Kubernetes 1.34+); if not, it says so once and stays off;
//! 2. it serves the v1 `DRAPlugin` service (`NodePrepareResources`,
//!    `NodeUnprepareResources`) on `<plugin dir>/dra.sock`, then the
//!    plugin-registration service on
//!    `<plugins_registry>/dra.plexus.dev-reg.sock`, where kubelet's plugin
//!    watcher finds it and asks for the endpoint ([`Registration`]);
//! 3. it publishes the node's devices as its pool's ResourceSlices, and
//!    again whenever they change (a rescan every few seconds, and right
//!    after each Prepare and Unprepare). A prepared device stays published
//!    while it is in a pod, even when its netdev left the node's view.
//!
//! Prepare and Unprepare hold one lock: two claims never race for a
//! device. Each claim gets its own answer (its `error` says what is wrong
//! with it, naming the field); a claim that fails leaves nothing reserved.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::Incoming;
use plexus_dataplane::pci::SysfsRoot;
use plexus_podresources::dra_v1::{
    self, Claim, Device, NodePrepareResourceResponse, NodePrepareResourcesRequest,
    NodePrepareResourcesResponse, NodeUnprepareResourceResponse, NodeUnprepareResourcesRequest,
    NodeUnprepareResourcesResponse,
};
use plexus_podresources::pluginregistration::{
    self, InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};
use plexus_podresources::server::{unknown_method, Answering, Routes, Server};
use tonic::codec::ProstCodec;
use tonic::server::Grpc;
use tonic::{Request, Response, Status};

use crate::cluster::dra_driver::DriverApi;
use crate::cluster::outbox::StatusOutbox;
use crate::cluster::watch::Watched;
use crate::dra::driver::claimed::PreparedClaims;
use crate::dra::driver::inventory::{self, NodeDevice, Scope};
use crate::dra::driver::prepare::{self, ClaimRef, Node};
use crate::dra::driver::publish::{FoundPool, Pool};
use crate::dra::driver::reservations::{valid_uid, Reservations};
use crate::dra::driver::{cdi, DRIVER};

/// kubelet's directory of plugin registration sockets.
pub const REGISTRY_DIR: &str = "/var/lib/kubelet/plugins_registry";
/// kubelet's directory of plugins' own sockets; plexus's is `dra.plexus.dev/`.
pub const PLUGINS_DIR: &str = "/var/lib/kubelet/plugins";
/// Where container runtimes read CDI specs.
pub const CDI_DIR: &str = "/var/run/cdi";

/// The driver's settings (`plexus daemon --dra ...`).
#[derive(Debug, Clone)]
pub struct DraSettings {
    /// kubelet's `plugins_registry` ([`REGISTRY_DIR`]).
    pub registry_dir: PathBuf,
    /// The plugin's own directory (`<PLUGINS_DIR>/dra.plexus.dev`), where
    /// `dra.sock` is served.
    pub plugin_dir: PathBuf,
    pub cdi_dir: PathBuf,
    /// The reservations of prepared claims ([`Reservations`]).
    pub state_dir: PathBuf,
    pub sysfs: PathBuf,
    /// The whole netdevs to offer, by name.
    pub netdevs: Vec<String>,
    /// Multus resource names, by PF netdev (or `vdpa`, `netdev`).
    pub resource_names: BTreeMap<String, String>,
    /// How often the devices are looked at again.
    pub rescan: Duration,
}

/// The running driver. Its sockets go when it is dropped.
pub struct DraDriver {
    node: String,
    api: DriverApi,
    /// Where the daemon's ADDs queue their devices' status (write-behind).
    outbox: Option<Arc<StatusOutbox>>,
    watched: Arc<Watched>,
    settings: DraSettings,
    state: Mutex<State>,
    wake: Mutex<Sender<()>>,
}

struct State {
    reservations: Reservations,
    /// What was last published, or tried.
    pool: Option<Pool>,
    /// Whether it was published (the API server took it).
    published: bool,
    /// The slices a previous daemon left.
    found: FoundPool,
}

/// The two servers, alive while this is.
pub struct Serving {
    _dra: Server,
    _registration: Server,
    sockets: [PathBuf; 2],
}

impl Drop for Serving {
    fn drop(&mut self) {
        for socket in &self.sockets {
            let _ = std::fs::remove_file(socket);
        }
    }
}

impl DraDriver {
    /// The driver, when the API server serves `resource.k8s.io/v1`;
    /// `Ok(None)` (logged once) when it does not.
    pub fn open(
        settings: DraSettings,
        node: &str,
        api: DriverApi,
        outbox: Option<Arc<StatusOutbox>>,
        watched: Arc<Watched>,
        wake: Sender<()>,
    ) -> Result<Option<Arc<DraDriver>>, String> {
        // The daemon's one question (its caches ask the same): nothing more
        // is sent to an API server without the group.
        match watched.dra_served() {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(
                    "the DRA driver {DRIVER} stays off: {} is not served here",
                    crate::dra::API_VERSION
                );
                return Ok(None);
            }
            Err(e) => return Err(format!("whether DRA is served: {e}")),
        }
        let reservations = Reservations::open(&settings.state_dir)
            .map_err(|e| format!("{}: {e}", settings.state_dir.display()))?;
        let found = api.found(node).map_err(|e| e.to_string())?;
        Ok(Some(Arc::new(DraDriver {
            node: node.to_string(),
            api,
            outbox,
            watched,
            settings,
            state: Mutex::new(State {
                reservations,
                pool: None,
                published: false,
                found,
            }),
            wake: Mutex::new(wake),
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serve kubelet: the DRA service first, then the registration that
    /// names it.
    pub fn serve(self: &Arc<Self>) -> Result<Serving, String> {
        let endpoint = self.settings.plugin_dir.join("dra.sock");
        let registration = self
            .settings
            .registry_dir
            .join(format!("{DRIVER}-reg.sock"));
        let bind = |path: &Path| super::socket::bind(path).map_err(|e| e.to_string());
        let dra = Server::start(bind(&endpoint)?, self.clone());
        let info = Arc::new(Registration {
            endpoint: endpoint.clone(),
        });
        let registered = Server::start(bind(&registration)?, info);
        tracing::info!(endpoint = %endpoint.display(), registration = %registration.display(), "DRA driver {DRIVER} serving");
        Ok(Serving {
            _dra: dra,
            _registration: registered,
            sockets: [registration, endpoint],
        })
    }

    fn scope(&self) -> Scope {
        Scope {
            sysfs: SysfsRoot::new(&self.settings.sysfs),
            class_net: self.settings.sysfs.join("class/net"),
            netdevs: self.settings.netdevs.clone(),
            resource_names: self.settings.resource_names.clone(),
        }
    }

    /// The node's devices as sysfs shows them now (read without the lock).
    fn scan(&self) -> Vec<NodeDevice> {
        inventory::scan(&self.scope()).unwrap_or_else(|e| {
            tracing::warn!("the node's devices could not be read: {e}");
            Vec::new()
        })
    }

    /// `devices` (a scan), with the prepared ones kept from the last pool
    /// when they left the node's view (a netdev in a pod).
    fn with_prepared(state: &State, mut devices: Vec<NodeDevice>) -> Vec<NodeDevice> {
        let previous = state.pool.iter().flat_map(|p| p.devices.iter());
        for kept in previous {
            let held = state.reservations.holder(&kept.name).is_some();
            if held && !devices.iter().any(|d| d.name == kept.name) {
                devices.push(kept.clone());
            }
        }
        devices.sort_by(|a, b| a.name.cmp(&b.name));
        devices
    }

    /// Publish the pool when it changed or was not taken yet. The lock is
    /// not held while the API server is written (Prepare, Unprepare and
    /// the ADDs' look-ups go on meanwhile); this thread alone writes the
    /// pool.
    fn publish(&self) {
        let scanned = self.scan();
        let pool = {
            let mut state = self.lock();
            let devices = Self::with_prepared(&state, scanned);
            let pool = Pool::next(state.pool.as_ref(), &state.found, &self.node, devices);
            let same = state.pool.as_ref().map(|p| p.generation) == Some(pool.generation);
            let done = state.published && same;
            state.pool = Some(pool.clone());
            if done {
                return;
            }
            pool
        };
        let result = self.api.publish(&pool);
        self.lock().published = result.is_ok();
        match result {
            Ok(writes) => tracing::info!(
                generation = pool.generation,
                devices = pool.devices.len(),
                writes,
                "published the node's ResourceSlices"
            ),
            Err(e) => tracing::warn!("the node's ResourceSlices were not published: {e}"),
        }
    }

    /// Publish now and whenever woken or `rescan` passed, until the wake
    /// channel closes.
    pub fn run_publisher(&self, woken: Receiver<()>) {
        loop {
            self.publish();
            match woken.recv_timeout(self.settings.rescan) {
                Ok(()) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            // Several wakes in a row are one pass.
            while woken.try_recv().is_ok() {}
        }
    }

    fn wake_publisher(&self) {
        let _ = self.wake.lock().unwrap_or_else(|e| e.into_inner()).send(());
    }

    /// `NodePrepareResources` for one claim.
    fn prepare(&self, i: usize, claim: &Claim) -> Result<Vec<Device>, String> {
        if !valid_uid(&claim.uid) {
            return Err(format!(
                "claims[{i}].uid: {:?} is no Kubernetes uid",
                claim.uid
            ));
        }
        if let Some(done) = self.lock().reservations.get(&claim.uid) {
            // kubelet asks again after its restart: the same answer.
            return Ok(answer(done));
        }
        let raw = self
            .api
            .claim(&claim.namespace, &claim.name)
            .map_err(|e| e.to_string())?;
        let pods = self.watched.synced().then(|| self.watched.pod_uids());
        let scanned = self.scan();
        let mut state = self.lock();
        let devices = Self::with_prepared(&state, scanned);
        let wanted = ClaimRef {
            namespace: claim.namespace.clone(),
            name: claim.name.clone(),
            uid: claim.uid.clone(),
        };
        let node = Node {
            name: &self.node,
            devices: &devices,
            reservations: &state.reservations,
            pods: pods.as_ref(),
        };
        let prepared = prepare::prepare(&wanted, &raw, &node).map_err(|e| e.to_string())?;
        cdi::write(&self.settings.cdi_dir, &prepared)
            .map_err(|e| format!("the CDI spec of claim {}: {e}", claim.uid))?;
        let devices = answer(&prepared);
        if let Err(e) = state.reservations.put(prepared) {
            let _ = cdi::remove(&self.settings.cdi_dir, &claim.uid);
            return Err(format!("the reservation of claim {}: {e}", claim.uid));
        }
        drop(state);
        self.wake_publisher();
        Ok(devices)
    }

    /// `NodeUnprepareResources` for one claim: idempotent.
    fn unprepare(&self, i: usize, claim: &Claim) -> Result<(), String> {
        if !valid_uid(&claim.uid) {
            return Err(format!(
                "claims[{i}].uid: {:?} is no Kubernetes uid",
                claim.uid
            ));
        }
        let mut state = self.lock();
        cdi::remove(&self.settings.cdi_dir, &claim.uid)
            .map_err(|e| format!("the CDI spec of claim {}: {e}", claim.uid))?;
        let freed = state
            .reservations
            .remove(&claim.uid)
            .map_err(|e| format!("the reservation of claim {}: {e}", claim.uid))?;
        drop(state);
        let Some(freed) = freed else {
            return Ok(());
        };
        self.wake_publisher();
        // The status entries an ADD wrote for its networked devices go with
        // it, queued ones first (a late write would mark them Ready again);
        // the claim may be gone already, and a failure here frees the device
        // all the same.
        if freed.devices.iter().any(|d| d.network.is_some()) {
            if let Some(outbox) = &self.outbox {
                outbox.forget_claim(&claim.namespace, &claim.name);
            }
            if let Err(e) = self
                .api
                .clear_device_statuses(&claim.namespace, &claim.name)
            {
                tracing::warn!(
                    "the status of claim {}/{}: {e}",
                    claim.namespace,
                    claim.name
                );
            }
        }
        Ok(())
    }

    fn prepare_all(&self, request: NodePrepareResourcesRequest) -> NodePrepareResourcesResponse {
        let mut claims = std::collections::HashMap::new();
        for (i, claim) in request.claims.iter().enumerate() {
            let answer = match self.prepare(i, claim) {
                Ok(devices) => NodePrepareResourceResponse {
                    devices,
                    error: String::new(),
                },
                Err(error) => {
                    tracing::warn!(claim = %format!("{}/{}", claim.namespace, claim.name), "Prepare: {error}");
                    NodePrepareResourceResponse {
                        devices: Vec::new(),
                        error,
                    }
                }
            };
            claims.insert(claim.uid.clone(), answer);
        }
        NodePrepareResourcesResponse { claims }
    }

    fn unprepare_all(
        &self,
        request: NodeUnprepareResourcesRequest,
    ) -> NodeUnprepareResourcesResponse {
        let mut claims = std::collections::HashMap::new();
        for (i, claim) in request.claims.iter().enumerate() {
            let error = self.unprepare(i, claim).err().unwrap_or_default();
            claims.insert(claim.uid.clone(), NodeUnprepareResourceResponse { error });
        }
        NodeUnprepareResourcesResponse { claims }
    }
}

impl PreparedClaims for DraDriver {
    fn for_pod(&self, uid: &str) -> Vec<prepare::PreparedClaim> {
        self.lock()
            .reservations
            .all()
            .filter(|c| c.pods.iter().any(|p| p == uid))
            .cloned()
            .collect()
    }
}

/// Prepare's answer for a prepared claim.
fn answer(prepared: &prepare::PreparedClaim) -> Vec<Device> {
    prepared
        .devices
        .iter()
        .map(|d| Device {
            request_names: vec![d.request.clone()],
            pool_name: d.pool.clone(),
            device_name: d.device.clone(),
            cdi_device_ids: d.cdi_device_ids.clone(),
            share_id: None,
        })
        .collect()
}

/// Runs `work` on a blocking thread of the server's runtime: it reads the
/// API server through the daemon's runtime.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Status::internal(format!("the call failed: {e}")))
}

/// One unary method of `driver`: `work` on the request, on a blocking
/// thread ([`blocking`]).
async fn unary_on<Q, R>(
    driver: Arc<DraDriver>,
    request: http::Request<Incoming>,
    work: fn(&DraDriver, Q) -> R,
) -> plexus_podresources::server::Answer
where
    Q: prost::Message + Default + Send + 'static,
    R: prost::Message + Send + 'static,
{
    let method = tower::service_fn(move |r: Request<Q>| {
        let driver = driver.clone();
        async move {
            let answer = blocking(move || work(&driver, r.into_inner())).await?;
            Ok::<_, Status>(Response::new(answer))
        }
    });
    Grpc::new(ProstCodec::<R, Q>::default())
        .unary(method, request)
        .await
}

impl Routes for DraDriver {
    fn route(self: Arc<Self>, request: http::Request<Incoming>) -> Answering {
        Box::pin(async move {
            match request.uri().path() {
                dra_v1::PREPARE_PATH => unary_on(self, request, DraDriver::prepare_all).await,
                dra_v1::UNPREPARE_PATH => unary_on(self, request, DraDriver::unprepare_all).await,
                other => unknown_method(other),
            }
        })
    }
}

/// The registration service kubelet's plugin watcher calls.
struct Registration {
    endpoint: PathBuf,
}

impl Routes for Registration {
    fn route(self: Arc<Self>, request: http::Request<Incoming>) -> Answering {
        Box::pin(async move {
            match request.uri().path() {
                pluginregistration::GET_INFO_PATH => {
                    let info = tower::service_fn(|_: Request<InfoRequest>| {
                        let endpoint = self.endpoint.display().to_string();
                        async move {
                            Ok::<_, Status>(Response::new(PluginInfo {
                                r#type: pluginregistration::DRA_PLUGIN.into(),
                                name: DRIVER.into(),
                                endpoint,
                                supported_versions: vec![dra_v1::SERVICE.into()],
                            }))
                        }
                    });
                    Grpc::new(ProstCodec::default()).unary(info, request).await
                }
                pluginregistration::NOTIFY_PATH => {
                    let notify = tower::service_fn(|r: Request<RegistrationStatus>| async move {
                        let status = r.into_inner();
                        if status.plugin_registered {
                            tracing::info!("kubelet registered the DRA driver {DRIVER}");
                        } else {
                            tracing::warn!(
                                "kubelet refused the DRA driver {DRIVER}: {}",
                                status.error
                            );
                        }
                        Ok::<_, Status>(Response::new(RegistrationStatusResponse {}))
                    });
                    Grpc::new(ProstCodec::default())
                        .unary(notify, request)
                        .await
                }
                other => unknown_method(other),
            }
        })
    }
}
