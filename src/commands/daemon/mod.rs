//! Thick mode: `plexus daemon` serves the node's CNI calls on a unix
//! socket, and the runtime's exec of plexus is a shim that forwards to it
//! ([`shim`]). What the daemon adds over a plugin process is what lives
//! longer than one call: one HTTP/2 connection to the API server and watch
//! caches of the node's pods and the NADs ([`crate::cluster::watch`]), so a
//! warm ADD reads nothing from the API server and writes one PATCH; and
//! metrics. Each call still gets its own data-plane session and runs the
//! same code as in-process. And dynamic networks ([`hotplug`]): running
//! pods' attachments follow their selection annotation.
//!
//! Bounded in a boot storm: at most `max_calls` calls run at once, each on
//! a thread of its own; the others wait in the accept queue before reading
//! their request, so a waiting call costs a socket, not its stdin.
//!
//! The pod's namespace comes with the request, opened by the shim on the
//! node ([`wire`]): the daemon's container need not see `CNI_NETNS`'s path.
//! With `chrootDir`, delegated plugins run chrooted into the node's file
//! system ([`crate::run::exec::ExecSite`]).

pub mod dra;
pub mod hotplug;
pub mod metrics;
pub mod netpolicy;
pub mod sandboxes;
mod socket;

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::UnixStream;
use tokio::sync::Semaphore;

use crate::cluster::kube::{KubeCluster, SharedApi};
use crate::cluster::outbox::{DeliveryObserver, StatusOutbox};
use crate::cluster::watch::Watched;
use crate::cluster::{ClusterError, Opened};
use crate::cni::env::{CniCommand, CNI_NETNS};
use crate::cni::error::{CniError, ErrorCode};
use crate::cni::skel;
use crate::cni::CniVersion;
use crate::config::{ApiTimeouts, PlexusConf};
use crate::plugin::{self, ClusterSource, PlexusPlugin, ThickCall};
use crate::sandbox_dir;
use crate::whereabouts::reconcile::Reconciler;
use crate::whereabouts::InDaemon;
use plexus_dataplane::NetNs;

use self::metrics::Metrics;
use self::netpolicy::Enforcer;
use self::sandboxes::Sandboxes;
use crate::plugin::wire::{self, ShimRequest, ShimResponse, MAX_LINE};

/// How long a caller may take to send its request once a worker is its.
const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// `plexus daemon`'s settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub socket: PathBuf,
    /// The API server; without one, calls whose conf names a kubeconfig
    /// connect per call, as in-process.
    pub kubeconfig: Option<PathBuf>,
    /// The node this daemon serves (its pods are cached; others refused).
    pub node: Option<String>,
    pub metrics_address: Option<SocketAddr>,
    pub max_calls: usize,
    pub api_timeouts: ApiTimeouts,
    /// How long SIGTERM waits for the calls in flight and queued writes.
    pub grace: Duration,
    /// What the daemon keeps on disk.
    pub state: StateFiles,
    /// Hot-plug: reconcile running pods' attachments with their selection
    /// annotation ([`hotplug`]); needs the API server.
    pub dynamic_networks: bool,
    /// MultiNetworkPolicy enforcement ([`netpolicy`]); needs the API server.
    pub multi_network_policy: bool,
    /// Cluster-wide IPAM's reconciler ([`crate::whereabouts::reconcile`]),
    /// when on; needs the API server.
    pub ipam_reconcile: Option<IpamReconcile>,
    /// plexus as a DRA driver ([`dra`]), when on; needs the API server.
    pub dra: Option<dra::DraSettings>,
}

/// Where the daemon keeps what must outlive a call or itself.
#[derive(Debug, Clone)]
pub struct StateFiles {
    /// Where an ADD's status writes are queued ([`StatusOutbox`]); `None`:
    /// written before the ADD answers.
    pub status_outbox: Option<PathBuf>,
    /// Where the sandboxes the daemon ADDed are remembered across its
    /// restarts ([`Sandboxes`]); `None`: in memory only.
    pub sandboxes: Option<PathBuf>,
    /// The `cniDir` under which plugin processes note the sandboxes they
    /// ADDed themselves (thin mode): hot-plugged too.
    pub plugins_cni_dir: Option<PathBuf>,
}

/// The whereabouts reconciler's settings.
#[derive(Debug, Clone)]
pub struct IpamReconcile {
    /// The interval between its passes.
    pub interval: Duration,
    /// The namespaces of the pools it reconciles; empty: every one.
    pub namespaces: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{0}")]
    Settings(String),
    #[error("socket {}: {reason}", path.display())]
    Socket { path: PathBuf, reason: String },
    #[error("kubeconfig {}: {reason}", path.display())]
    Kubeconfig { path: PathBuf, reason: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// What every call shares.
struct Daemon {
    clusters: DaemonClusters,
    metrics: Arc<Metrics>,
    /// The sandboxes ADDed, and the per-sandbox lock of calls and hot-plugs.
    sandboxes: Arc<Sandboxes>,
    /// MultiNetworkPolicy enforcement, when on.
    policy: Option<Arc<Enforcer>>,
}

/// The daemon's views: its shared client and caches for calls whose conf
/// names a kubeconfig (the daemon's own kubeconfig is the one used), the
/// in-process sources for the rest.
struct DaemonClusters {
    api: Option<SharedApi>,
    /// What its calls' cluster-wide IPAM allocates through.
    ipam: Option<InDaemon>,
}

impl ClusterSource for DaemonClusters {
    fn open(&self, conf: &PlexusConf) -> Result<Opened, ClusterError> {
        match (&conf.manifest_dir, &conf.kubeconfig, &self.api) {
            (None, Some(_), Some(api)) => Ok(Opened::api(KubeCluster::shared(api))),
            _ => plugin::cluster(conf),
        }
    }
}

/// Starts one of the daemon's long-running services on its own thread
/// (`name`, as `ps` shows it; `what`, as its failure to start says).
fn spawn_service(
    name: &str,
    what: &str,
    service: impl FnOnce() + Send + 'static,
) -> Result<(), DaemonError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(service)
        .map(drop)
        .map_err(|source| DaemonError::Io {
            what: what.into(),
            source,
        })
}

/// Run the daemon until SIGTERM or SIGINT.
pub fn run(settings: Settings) -> Result<(), DaemonError> {
    if settings.max_calls == 0 {
        return Err(DaemonError::Settings(
            "--max-calls must be at least 1".into(),
        ));
    }
    limit_malloc_arenas();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("plexus-daemon")
        .enable_all()
        .build()
        .map_err(|source| DaemonError::Io {
            what: "tokio runtime".into(),
            source,
        })?;
    let handle = runtime.handle().clone();
    let metrics = Arc::new(Metrics::new());
    let sandboxes = Arc::new(
        Sandboxes::open(
            settings.state.sandboxes.clone(),
            settings.state.plugins_cni_dir.as_deref(),
        )
        .map_err(|source| DaemonError::Io {
            what: "the sandboxes' state directory".into(),
            source,
        })?,
    );
    let (wake, woken) = std::sync::mpsc::channel::<()>();
    let (policy_wake, policy_woken) = std::sync::mpsc::channel::<()>();
    // What the client is built from, read first: a later write is followed.
    let credentials = settings.kubeconfig.as_ref().map(|path| {
        let follows = matches!(
            crate::cluster::credentials::LiveCredentials::follow(path),
            Ok(Some(_))
        );
        KubeconfigFile::read(path.clone(), follows)
    });
    let api = match &settings.kubeconfig {
        None => None,
        Some(path) => {
            let node = settings.node.clone().ok_or_else(|| {
                DaemonError::Settings(
                    "--node-name (or NODE_NAME) is required with --kubeconfig: the daemon \
                     caches and serves that node's pods only"
                        .into(),
                )
            })?;
            let observed = metrics.clone();
            let observe: crate::cluster::kube::RequestObserver =
                Arc::new(move |method, uri| observed.api_request(method, uri));
            let client = KubeCluster::client(path, &handle, settings.api_timeouts, Some(observe))
                .map_err(|reason| DaemonError::Kubeconfig {
                path: path.clone(),
                reason,
            })?;
            // The node's pod events wake hot-plug and policy enforcement.
            let wakes: Vec<_> = [
                settings.dynamic_networks.then(|| wake.clone()),
                settings.multi_network_policy.then(|| policy_wake.clone()),
            ]
            .into_iter()
            .flatten()
            .collect();
            let hook: Option<crate::cluster::watch::PodEventHook> =
                (!wakes.is_empty()).then(|| {
                    let wakes = Mutex::new(wakes);
                    Arc::new(move || {
                        for wake in lock(&wakes).iter() {
                            let _ = wake.send(());
                        }
                    }) as crate::cluster::watch::PodEventHook
                });
            let watched = Arc::new(Watched::start(&client, &node, &handle, hook));
            let outbox = match &settings.state.status_outbox {
                None => None,
                Some(dir) => Some(
                    StatusOutbox::open(
                        dir,
                        client.clone(),
                        handle.clone(),
                        settings.api_timeouts.request,
                        Some(delivered(&metrics)),
                    )
                    .map_err(|e| DaemonError::Settings(e.to_string()))?,
                ),
            };
            Some(SharedApi {
                handle: handle.clone(),
                client,
                timeouts: settings.api_timeouts,
                watched,
                outbox,
                prepared: Default::default(),
            })
        }
    };
    if let (true, Some(api)) = (settings.dynamic_networks, &api) {
        let reconciler = hotplug::Reconciler {
            api: api.clone(),
            sandboxes: sandboxes.clone(),
            metrics: metrics.clone(),
        };
        // The start's resync of every sandbox, once the caches are synced.
        let _ = wake.send(());
        spawn_service("plexus-hotplug", "the hot-plug thread", move || {
            reconciler.run(woken)
        })?;
    }
    let policy = match (settings.multi_network_policy, &api) {
        (false, _) => None,
        (true, None) => {
            // As dynamic networks: nothing to follow without the API server.
            tracing::warn!("--multi-network-policy is off without --kubeconfig: policies live in the API server");
            None
        }
        (true, Some(api)) => {
            let wake = Mutex::new(policy_wake.clone());
            let hook: crate::cluster::policy_watch::PolicyEventHook = Arc::new(move || {
                let _ = lock(&wake).send(());
            });
            let watches =
                crate::cluster::policy_watch::PolicyWatches::start(&api.client, &handle, hook);
            let enforcer = Arc::new(Enforcer::new(api.clone(), watches, sandboxes.clone()));
            let running = enforcer.clone();
            spawn_service("plexus-netpolicy", "the policy thread", move || {
                running.run(policy_woken)
            })?;
            Some(enforcer)
        }
    };
    drop(policy_wake);
    if let (Some(reconcile), Some(api), Some(node)) =
        (&settings.ipam_reconcile, &api, &settings.node)
    {
        let reconciler = Reconciler::new(
            api.handle.clone(),
            api.client.clone(),
            settings.api_timeouts,
            reconcile.namespaces.clone(),
        );
        let interval = reconcile.interval;
        let identity = node.clone();
        spawn_service(
            "plexus-ipam-reconciler",
            "the IPAM reconciler's thread",
            move || reconciler.run(&identity, interval),
        )?;
    }
    let dra_serving = start_dra(&settings, api.as_ref())?;
    let listener = socket::bind(&settings.socket)?;
    let daemon = Arc::new(Daemon {
        clusters: DaemonClusters {
            ipam: api.clone().map(InDaemon::new),
            api,
        },
        metrics,
        sandboxes,
        policy,
    });
    let listening = Arc::new(AtomicBool::new(true));
    runtime.block_on(async {
        let listener =
            tokio::net::UnixListener::from_std(listener).map_err(|source| DaemonError::Io {
                what: "socket".into(),
                source,
            })?;
        if let Some(address) = settings.metrics_address {
            let tcp = tokio::net::TcpListener::bind(address)
                .await
                .map_err(|source| DaemonError::Io {
                    what: format!("metrics address {address}"),
                    source,
                })?;
            tokio::spawn(metrics::serve(tcp, endpoints(&daemon, &listening)));
        }
        tracing::info!(socket = %settings.socket.display(), max_calls = settings.max_calls, "serving");
        serve(listener, &daemon, settings.max_calls, credentials).await;
        listening.store(false, Ordering::Release);
        let _ = std::fs::remove_file(&settings.socket);
        Ok::<_, DaemonError>(())
    })?;
    // Calls in flight run on threads of their own, and queued writes on the
    // runtime; give them the grace. What is still queued after it stays in
    // the outbox for the next daemon.
    let deadline = Instant::now() + settings.grace;
    let queued = || {
        daemon
            .clusters
            .api
            .as_ref()
            .and_then(|a| a.outbox.as_ref())
            .map_or(0, |o| o.len())
    };
    while (daemon.metrics.in_flight.get() > 0 || queued() > 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // kubelet stops calling a plugin whose sockets are gone.
    drop(lock(&dra_serving).take());
    tracing::info!(
        calls = daemon.metrics.in_flight.get(),
        writes = queued(),
        "stopped"
    );
    Ok(())
}

/// The DRA driver's servers, while they run.
type DraServing = Arc<Mutex<Option<dra::Serving>>>;

/// Starts the DRA driver on a thread of its own, when on: it asks whether
/// the API server serves DRA (again every few seconds while it cannot
/// tell), then serves kubelet and publishes the node's devices.
fn start_dra(settings: &Settings, api: Option<&SharedApi>) -> Result<DraServing, DaemonError> {
    let serving: DraServing = Arc::new(Mutex::new(None));
    let (Some(dra_settings), Some(node)) = (&settings.dra, &settings.node) else {
        return Ok(serving);
    };
    let Some(api) = api else {
        tracing::warn!("--dra is off without --kubeconfig: claims live in the API server");
        return Ok(serving);
    };
    let driver_api = crate::cluster::dra_driver::DriverApi {
        client: api.client.clone(),
        handle: api.handle.clone(),
        timeout: settings.api_timeouts.request,
    };
    let (dra_settings, node, watched) = (dra_settings.clone(), node.clone(), api.watched.clone());
    let outbox = api.outbox.clone();
    let slot = api.prepared.clone();
    let kept = serving.clone();
    spawn_service("plexus-dra", "the DRA driver's thread", move || {
        let (wake, woken) = std::sync::mpsc::channel();
        let driver = loop {
            let opened = dra::DraDriver::open(
                dra_settings.clone(),
                &node,
                driver_api.clone(),
                outbox.clone(),
                watched.clone(),
                wake.clone(),
            );
            match opened {
                Ok(Some(driver)) => break driver,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!("the DRA driver waits: {e}");
                    std::thread::sleep(Duration::from_secs(5));
                }
            }
        };
        let _ = slot.set(driver.clone() as Arc<dyn crate::dra::driver::claimed::PreparedClaims>);
        match driver.serve() {
            Ok(servers) => *lock(&kept) = Some(servers),
            Err(e) => {
                tracing::error!("the DRA driver cannot serve kubelet: {e}");
                return;
            }
        }
        driver.run_publisher(woken);
    })?;
    Ok(serving)
}

/// The outbox reports its deliveries to the metrics.
fn delivered(metrics: &Arc<Metrics>) -> DeliveryObserver {
    let metrics = metrics.clone();
    Arc::new(move |outcome, delay| metrics.status_write(outcome, delay))
}

/// One arena per two cores at most: glibc's default of eight per core lets
/// a storm's threads each grow their own and keep it. (On musl the binary's
/// allocator has one heap: nothing to limit.)
fn limit_malloc_arenas() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only tunes the allocator; called before any thread.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

fn endpoints(daemon: &Arc<Daemon>, listening: &Arc<AtomicBool>) -> metrics::Endpoints {
    let (for_ready, for_refresh) = (daemon.clone(), daemon.clone());
    let listening = listening.clone();
    metrics::Endpoints {
        metrics: daemon.metrics.clone(),
        ready: Arc::new(move || {
            if !listening.load(Ordering::Acquire) {
                return Err("the socket is closed (stopping)".into());
            }
            match &for_ready.clusters.api {
                Some(api) if !api.watched.synced() => {
                    Err("the watch cache has not listed the node's pods yet".into())
                }
                _ => Ok(()),
            }
        }),
        refresh: Arc::new(move |metrics: &Metrics| {
            // Scraped from a task of the daemon's runtime.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let tasks = runtime.metrics().num_alive_tasks();
                metrics
                    .tokio_tasks
                    .set(i64::try_from(tasks).unwrap_or(i64::MAX));
            }
            if let Some(api) = &for_refresh.clusters.api {
                let (pods, nads) = api.watched.sizes();
                metrics.cache_sizes(pods, nads);
                metrics.dra_cache_sizes(api.watched.dra_sizes());
                if let Some(policy) = &for_refresh.policy {
                    metrics.policy_cache_sizes(policy.sizes());
                }
                if let Some(outbox) = &api.outbox {
                    metrics.status_writes_queued.set(outbox.len() as i64);
                }
            }
        }),
    }
}

/// The kubeconfig the daemon's client was built from, as it was read.
///
/// The installer rewrites it when the service account's token rotates;
/// the client follows a new token and CA in place
/// ([`crate::cluster::credentials`], issue 47). A change the client cannot
/// follow (another server, client certificates, a DaemonSet applied again
/// whose new account's kubeconfig names other credentials than a token)
/// makes the daemon stop as on SIGTERM, and kubelet starts it again on the
/// new file; queued status writes wait in the outbox meanwhile.
struct KubeconfigFile {
    path: PathBuf,
    loaded: Option<Vec<u8>>,
    /// What of it the client cannot follow, as loaded (`None`: it follows
    /// nothing; every change counts).
    fixed: Option<String>,
}

impl KubeconfigFile {
    /// How often the file is compared with what was loaded.
    const POLL: Duration = Duration::from_secs(2);

    fn read(path: PathBuf, follows: bool) -> KubeconfigFile {
        let loaded = std::fs::read(&path).ok();
        let fixed = follows
            .then(|| crate::cluster::credentials::fixed_part(&path).ok())
            .flatten();
        KubeconfigFile {
            path,
            loaded,
            fixed,
        }
    }

    /// Returns once the file holds (non-empty) content the client cannot
    /// follow.
    async fn changed(&self) {
        loop {
            tokio::time::sleep(Self::POLL).await;
            // A few hundred bytes: read in place rather than on a blocking pool.
            let rewritten = std::fs::read(&self.path)
                .is_ok_and(|now| !now.is_empty() && Some(&now) != self.loaded.as_ref());
            if !rewritten {
                continue;
            }
            let Some(fixed) = &self.fixed else { return };
            // Else a rotation (followed in place), or a file being written.
            if crate::cluster::credentials::fixed_part(&self.path).is_ok_and(|now| &now != fixed) {
                return;
            }
        }
    }
}

/// Accept calls until SIGTERM or SIGINT, or until the kubeconfig changes.
async fn serve(
    listener: tokio::net::UnixListener,
    daemon: &Arc<Daemon>,
    max_calls: usize,
    credentials: Option<KubeconfigFile>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot handle SIGTERM/SIGINT");
        return;
    };
    let workers = Arc::new(Semaphore::new(max_calls));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(connection(stream, daemon.clone(), workers.clone()));
                }
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = async {
                match &credentials {
                    Some(file) => file.changed().await,
                    None => std::future::pending().await,
                }
            } => {
                tracing::warn!(
                    kubeconfig = %credentials.as_ref().map_or_else(String::new, |f| f.path.display().to_string()),
                    "the kubeconfig changed beyond its token and CA: stopping, to be started on it again"
                );
                break;
            }
        }
    }
    tracing::info!("signalled: no new calls");
}

/// One caller: its credentials, a worker, its request, its answer.
async fn connection(mut stream: UnixStream, daemon: Arc<Daemon>, workers: Arc<Semaphore>) {
    if let Err(why) = socket::check_peer(&stream) {
        tracing::warn!(%why, "caller refused");
        let refused = CniError::new(ErrorCode::InvalidEnvironment, "caller refused", why);
        let _ = reply(&mut stream, &error_response(&refused)).await;
        return;
    }
    let metrics = &daemon.metrics;
    metrics.waiting.inc();
    let permit = workers.acquire_owned().await;
    metrics.waiting.dec();
    let Ok(permit) = permit else { return };
    let (request, netns) =
        match tokio::time::timeout(REQUEST_READ_TIMEOUT, read_request(&stream)).await {
            Ok(Ok(read)) => read,
            Ok(Err(error)) => {
                tracing::warn!(%error, "unreadable request");
                return;
            }
            Err(_) => {
                tracing::warn!("no request within {REQUEST_READ_TIMEOUT:?}");
                return;
            }
        };
    metrics.in_flight.inc();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let worker = daemon.clone();
    let spawned = std::thread::Builder::new()
        .name("plexus-call".into())
        .spawn(move || {
            let answer = serve_call(&worker, &request, netns);
            drop(permit);
            let _ = tx.send(answer);
        });
    let answer = match spawned {
        Ok(_) => rx.await.unwrap_or_else(|_| {
            // The call's thread panicked: its record says what to undo.
            error_response(&CniError::new(
                ErrorCode::Plugin(crate::cni::error::codes::PLUGIN_FAILED),
                "internal error",
                "the call's thread panicked (see the daemon's log)",
            ))
        }),
        Err(e) => error_response(&CniError::io("spawning the call's thread", e)),
    };
    if let Err(error) = reply(&mut stream, &answer).await {
        tracing::warn!(%error, "the caller left before its answer");
    }
    // Only now: a stopping daemon waits for the answers, not just the work.
    metrics.in_flight.dec();
}

/// The request line, and the descriptor passed with it (the pod's
/// namespace, see [`wire`]); more than one is a broken caller's, and only the
/// first is kept.
async fn read_request(stream: &UnixStream) -> std::io::Result<(ShimRequest, Option<OwnedFd>)> {
    let (mut line, mut fds) = (Vec::new(), Vec::new());
    let mut buf = vec![0; 64 << 10];
    loop {
        stream.readable().await?;
        let read = stream.try_io(Interest::READABLE, || {
            wire::recv_with_fds(stream.as_fd(), &mut buf)
        });
        let (n, passed) = match read {
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        fds.extend(passed);
        line.extend_from_slice(&buf[..n]);
        // End of input, a whole line, or too long: receive says which.
        if n == 0 || buf[..n].contains(&b'\n') || line.len() as u64 > MAX_LINE {
            break;
        }
    }
    let request = wire::receive(&mut &line[..])?;
    Ok((request, fds.into_iter().next()))
}

async fn reply(stream: &mut UnixStream, answer: &ShimResponse) -> std::io::Result<()> {
    let mut bytes = Vec::new();
    wire::send(&mut bytes, answer)?;
    stream.write_all(&bytes).await?;
    stream.shutdown().await
}

/// Run one call as a plugin process would, on this thread; `netns` is the
/// descriptor the shim passed for `CNI_NETNS`. A call naming a sandbox
/// holds its lock, so it never runs alongside that sandbox's hot-plug. The
/// sandbox is remembered after its ADD, forgotten at its DEL.
fn serve_call(daemon: &Daemon, request: &ShimRequest, netns: Option<OwnedFd>) -> ShimResponse {
    let Some((command, container_id)) = sandbox_dir::named_by(|key| request.env.get(key)) else {
        return run_call(daemon, request, netns);
    };
    // The node's lock of the sandbox is under its conf's cniDir (a conf
    // that does not parse fails the call without touching a sandbox).
    let cni_dir = PlexusConf::from_slice(request.stdin.as_bytes())
        .ok()
        .map(|c| c.cni_dir);
    let served = daemon
        .sandboxes
        .locked(&container_id, cni_dir.as_deref(), || {
            // The ADD's namespace, kept for its policy rules (when enforced).
            let pod_ns = netns
                .as_ref()
                .filter(|_| command == CniCommand::Add && daemon.policy.is_some())
                .and_then(|fd| fd.try_clone().ok())
                .and_then(|fd| pod_netns(request, Some(fd)));
            let answer = run_call(daemon, request, netns);
            match command {
                CniCommand::Add if answer.exit_code == 0 && daemon.clusters.api.is_some() => {
                    if let Some(sandbox) = sandboxes::Sandbox::of_call(&request.env, &request.stdin)
                    {
                        daemon.sandboxes.add(sandbox.clone());
                        if let Some(refused) = enforce_added(daemon, request, &sandbox, pod_ns) {
                            return refused;
                        }
                    }
                }
                CniCommand::Del => {
                    if let (Some(policy), Some(sandbox)) =
                        (&daemon.policy, daemon.sandboxes.get(&container_id))
                    {
                        policy.removed(&sandbox);
                    }
                    daemon.sandboxes.remove(&container_id, cni_dir.as_deref())
                }
                _ => {}
            }
            answer
        });
    served.unwrap_or_else(|e| error_response(&e.into()))
}

/// The policy rules of a sandbox just ADDed, before the ADD answers. When
/// they cannot be written the pod must not run open: the ADD is undone (a
/// DEL of the same request) and fails with why.
fn enforce_added(
    daemon: &Daemon,
    request: &ShimRequest,
    sandbox: &sandboxes::Sandbox,
    netns: Option<NetNs>,
) -> Option<ShimResponse> {
    let policy = daemon.policy.as_ref()?;
    let error = policy.enforce_added(sandbox, netns.as_ref()).err()?;
    tracing::warn!(%error, pod = %sandbox.pod, namespace = %sandbox.namespace, "ADD undone");
    let mut del = request.clone();
    del.env.insert("CNI_COMMAND".into(), "DEL".into());
    let undone = run_call(daemon, &del, None);
    if undone.exit_code != 0 {
        tracing::warn!(stdout = %undone.stdout, "the undoing DEL failed; the runtime's DEL retries it");
    }
    policy.removed(sandbox);
    daemon
        .sandboxes
        .remove(&sandbox.container_id, sandbox.cni_dir().as_deref());
    Some(error_response(&error.into()))
}

fn run_call(daemon: &Daemon, request: &ShimRequest, netns: Option<OwnedFd>) -> ShimResponse {
    let start = Instant::now();
    let thick = ThickCall {
        pod_netns: pod_netns(request, netns),
        api: daemon.clusters.api.clone(),
        ipam: daemon.clusters.ipam.clone(),
    };
    let plugin = PlexusPlugin::new(&daemon.clusters, daemon.metrics.clone(), thick);
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let exit_code = skel::run(
        &plugin,
        |key| request.env.get(key).cloned(),
        &mut request.stdin.as_bytes(),
        &mut stdout,
        &mut stderr,
    );
    let command = request.env.get("CNI_COMMAND").map_or("?", String::as_str);
    let code = (exit_code != 0).then(|| error_code(&stdout));
    // A failure is logged where it happens (skel), with the call's fields.
    daemon.metrics.call_done(command, start.elapsed(), code);
    ShimResponse {
        exit_code,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// The shim's descriptor as the namespace of the request's `CNI_NETNS`;
/// without one (a shim of an older plexus, or a path it could not open) the
/// call looks at the path itself, as in-process.
fn pod_netns(request: &ShimRequest, fd: Option<OwnedFd>) -> Option<NetNs> {
    let fd = fd?;
    let path = request.env.get(CNI_NETNS).filter(|p| !p.is_empty())?;
    NetNs::from_fd(fd, PathBuf::from(path))
        .inspect_err(|error| tracing::warn!(%error, "the shim passed no network namespace"))
        .ok()
}

/// The `code` of an error result (cni-SPEC §5); 0 when there is none.
fn error_code(stdout: &[u8]) -> u32 {
    serde_json::from_slice::<serde_json::Value>(stdout)
        .ok()
        .and_then(|v| v.get("code")?.as_u64())
        .map_or(0, |c| c as u32)
}

/// A failure of the daemon itself, answered as a plugin answers errors.
fn error_response(e: &CniError) -> ShimResponse {
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let exit_code = skel::report_error(e, CniVersion::LATEST.as_str(), &mut stdout, &mut stderr);
    ShimResponse {
        exit_code,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
