//! `"ipam": {"type": "whereabouts"}` served in-process: cluster-wide
//! addresses from whereabouts' IPPools, with its configuration keys
//! ([`plexus_ipam::whereabouts::conf`]) and its objects on the API server
//! ([`pools`]), without its cluster-wide Lease; its reconciler
//! ([`reconcile`]), node slices ([`slicer`]) and metrics ([`metrics`]).
//!
//! The invariant ([`plexus_ipam::whereabouts`]): an ADD answers with an
//! address only once
//! 1. its pool holds the attachment's entry, added by a compare-and-swap
//!    on the pool's resourceVersion, decided on the copy of that version
//!    (a write that loses decides again on a fresh copy, after a jittered
//!    pause, until the call's deadline); and
//! 2. with overlapping ranges on (the default), the address's
//!    OverlappingRangeIPReservation, created only if absent, names the
//!    attachment's pod: a pool of another, overlapping range cannot have
//!    handed it out. A reservation another pod holds makes the address
//!    taken: the entry is given back and another chosen.
//!
//! The order is whereabouts' own (pool, then reservation), and it is the
//! one a crash cannot turn into a leak: a process killed at any point of
//! an ADD leaves at most an entry of its container, which the runtime's
//! DEL finds. DEL gives back the reservation first and the entry last, for
//! the same reason: the entry is what a retried DEL looks for. A failed ADD
//! gives back what it took; DEL removes the container's entry (container
//! ID and interface, as whereabouts) and its pod's reservation, never
//! another pod's.

mod batch;
mod claim;
mod metrics;
mod node_slice;
pub mod pools;
pub mod reconcile;
pub mod slicer;
pub mod unrecorded;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipnetwork::IpNetwork;

use crate::cluster::kube::SharedApi;
use crate::cluster::ClusterError;
use crate::cni::delegate::Resolver;
use crate::cni::error::{CniError, ErrorCode};
use crate::cni::names::{ContainerId, IfName};
use crate::cni::result::{CniResult, IpConfig};
use crate::cni::skel::{Plugin, Request, TypedPlugin};
use crate::config::{ApiTimeouts, PlexusConf};
use crate::run::registry::Factory;
pub use metrics::{metrics, IpamMetrics};
use plexus_dataplane::Session;
use plexus_ipam::whereabouts::allocate::Holder;
use plexus_ipam::whereabouts::conf::{self, PoolRange, WhereaboutsConf};
use plexus_ipam::whereabouts::pool::{self, ReservationSpec};
use plexus_ipam::IpamError;
use pools::{namespace_of, PoolWatches, Pools, Reservation};

/// The plugin type it serves.
pub const PLUGIN_TYPE: &str = "whereabouts";

/// How long an ADD or DEL keeps trying against writers that win the pool
/// before it: whereabouts' own DEL limit (its ADD's is 2 min, past most
/// runtimes' patience).
const CALL_BUDGET: Duration = Duration::from_secs(60);

/// What goes wrong, typed; the CNI code of each is chosen in
/// `From<ClusterIpamError> for CniError`.
#[derive(Debug, thiserror::Error)]
pub enum ClusterIpamError {
    #[error(transparent)]
    Ipam(#[from] IpamError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// Other writers won the pool until the deadline.
    #[error("IPPool {pool}: other writers changed it {tries} times in a row within {budget:?}")]
    Contended {
        pool: String,
        tries: u32,
        budget: Duration,
    },
    /// The daemon's calls queued ahead of it on the pool's turn took the
    /// call's whole budget (its ticket withdrawn, nothing taken).
    #[error("IPPool {pool}: the calls ahead of this one on the pool took the whole {budget:?}")]
    TurnTimedOut { pool: String, budget: Duration },
}

/// The protocol layer's errors (the environment, a decoded key) pass
/// through IPAM's.
impl From<CniError> for ClusterIpamError {
    fn from(e: CniError) -> ClusterIpamError {
        ClusterIpamError::Ipam(IpamError::Cni(e))
    }
}

impl From<ClusterIpamError> for CniError {
    fn from(e: ClusterIpamError) -> CniError {
        match e {
            ClusterIpamError::Ipam(e) => e.into(),
            ClusterIpamError::Cluster(e) => e.into(),
            e @ (ClusterIpamError::Contended { .. } | ClusterIpamError::TurnTimedOut { .. }) => {
                CniError::new(ErrorCode::TryAgainLater, "IPPool contended", e.to_string())
            }
        }
    }
}

/// Whether this process served a whereabouts call since it was last asked:
/// work for the reconciler's leader (`reconcile`), which contends for its
/// Lease only when there is some.
static IN_USE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn note_in_use() {
    IN_USE.store(true, std::sync::atomic::Ordering::Release);
}

/// Whether a whereabouts call was served since the last ask (cleared).
fn take_in_use() -> bool {
    IN_USE.swap(false, std::sync::atomic::Ordering::AcqRel)
}

/// The plugin; it connects per call, to the cluster its configuration's
/// `kubernetes.kubeconfig` names, else plexus's own (`kubeconfig` of
/// plexus's conf: then plexus's identity, which `deploy/rbac.yaml` grants
/// whereabouts' objects, writes the pools).
#[derive(Default)]
pub struct Whereabouts {
    pub timeouts: ApiTimeouts,
    pub plexus_kubeconfig: Option<PathBuf>,
    /// In the daemon (thick mode): its connection and its watch cache of
    /// the pools, instead of a connection per call; the kubeconfig then
    /// only names the namespace (its context's).
    pub daemon: Option<InDaemon>,
    /// The node it serves, for node slices: the daemon's; when unset, a
    /// plugin process finds it as whereabouts does
    /// (`node_slice::node_of_process`).
    pub node: Option<String>,
}

/// What the daemon gives its calls: its connection, and its watch caches of
/// the IPPools (one per namespace, started on first use).
#[derive(Clone)]
pub struct InDaemon {
    pub api: SharedApi,
    pub pools: Arc<PoolWatches>,
}

impl InDaemon {
    /// The daemon's, on its connection `api`.
    pub fn new(api: SharedApi) -> InDaemon {
        let pools = Arc::new(PoolWatches::new(api.client.clone(), api.handle.clone()));
        InDaemon { api, pools }
    }
}

/// The registry's factory of the plugin, for plexus's conf when there is
/// one (a call of a delegate plugin alone has none).
pub fn factory(conf: Option<&PlexusConf>, daemon: Option<InDaemon>) -> Factory {
    let plugin = Arc::new(Whereabouts {
        timeouts: conf.map(|c| c.api_timeouts).unwrap_or_default(),
        plexus_kubeconfig: conf.and_then(|c| c.kubeconfig.clone()),
        node: daemon.as_ref().map(|d| d.api.watched.node().to_string()),
        daemon,
    });
    Box::new(move |_: &dyn Resolver, _: &Session| {
        Box::new(SharedPlugin(plugin.clone())) as Box<dyn Plugin>
    })
}

/// The plugin as its own binary (plexus linked as `whereabouts`): one CNI
/// call on this process's environment, stdin and stdout; the exit code.
pub fn run_as_plugin() -> i32 {
    crate::logging::init_call(&crate::logging::LogSettings::default());
    crate::cni::skel::run(
        &Whereabouts::default(),
        |key| std::env::var_os(key),
        &mut std::io::stdin().lock(),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    )
}

/// The registry builds a plugin per use; the settings are shared.
struct SharedPlugin(Arc<Whereabouts>);

impl Plugin for SharedPlugin {
    fn validate(&self, req: &Request) -> Result<(), CniError> {
        Plugin::validate(&*self.0, req)
    }
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        Plugin::add(&*self.0, req)
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        Plugin::del(&*self.0, req)
    }
    fn check(&self, req: &Request) -> Result<(), CniError> {
        Plugin::check(&*self.0, req)
    }
}

/// One call's view: the configuration, who asks, and the pools.
struct Call<'r> {
    conf: WhereaboutsConf,
    container_id: &'r ContainerId,
    ifname: &'r IfName,
    podref: String,
    /// kubelet's `K8S_POD_UID`, noted beside the entry for the reconciler.
    pod_uid: Option<String>,
    pools: Pools,
    deadline: Instant,
    /// With `node_slice_size`: the node whose slice it takes from.
    node: Option<String>,
    /// The network's `name`, whose NodeSlicePool it is without
    /// `network_name`.
    network: String,
    /// The configuration's range, when the call takes from a slice of it:
    /// the addresses it gives carry its prefix, not the slice's.
    sliced_from: Option<IpNetwork>,
    /// The IPAMClaim (`namespace/name`) the attachment is bound to, and
    /// its `status.ips` ([`claim`]).
    claim: Option<(String, Vec<IpAddr>)>,
}

fn read_flat_file(path: &Path) -> Result<Option<String>, IpamError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(IpamError::Config {
            field: path.display().to_string(),
            reason: format!("whereabouts' flat file cannot be read: {e}"),
        }),
    }
}

impl Whereabouts {
    fn conf(&self, req: &Request) -> Result<WhereaboutsConf, ClusterIpamError> {
        let ipam = match req.config.get("ipam") {
            Some(serde_json::Value::Object(section)) => section,
            _ => {
                return Err(CniError::invalid_config("ipam", "must be an object").into());
            }
        };
        Ok(conf::parse(ipam, read_flat_file)?)
    }

    fn call<'r>(&self, req: &'r Request) -> Result<Call<'r>, ClusterIpamError> {
        let conf = self.conf(req)?;
        let params = req.env.require_attachment()?;
        let args = req.env.args();
        let arg = |key: &str| args.get(key).filter(|v| !v.is_empty());
        let (Some(namespace), Some(name)) = (arg("K8S_POD_NAMESPACE"), arg("K8S_POD_NAME")) else {
            return Err(CniError::invalid_env(
                "CNI_ARGS",
                "whereabouts needs K8S_POD_NAMESPACE and K8S_POD_NAME: an address is held by a pod",
            )
            .into());
        };
        let mut conf = conf;
        conf::with_cni_args(&mut conf.result, arg("IP"), arg("GATEWAY"))?;
        let kubeconfig = conf
            .kubeconfig
            .clone()
            .or_else(|| self.plexus_kubeconfig.clone())
            .ok_or_else(|| IpamError::Config {
                field: "ipam.kubernetes.kubeconfig".into(),
                reason: "is required (in the section or whereabouts' flat file) when plexus's \
                         conf names no kubeconfig: the cluster whose IPPools hold the addresses"
                    .into(),
            })?;
        let node = match (&conf.node_slice_size, &self.node) {
            (None, _) => None,
            (Some(_), Some(node)) => Some(node.clone()),
            (Some(_), None) => Some(node_slice::node_of_process(conf.flat_file.as_deref())?),
        };
        let claim = claim::claim_of(&req.config)?;
        if claim.is_some() && conf.node_slice_size.is_some() {
            return Err(IpamError::Config {
                field: "ipam.node_slice_size".into(),
                reason: "cannot serve an IPAMClaim: a claim's address follows its pod to any \
                         node, and a node slice keeps addresses to one node"
                    .into(),
            }
            .into());
        }
        let network = req
            .config
            .get("name")
            .and_then(|n| n.as_str())
            .unwrap_or_default()
            .to_string();
        let pools = match &self.daemon {
            Some(InDaemon { api, pools }) => {
                let namespace = namespace_of(&kubeconfig)?;
                Pools::shared(&api.handle, &api.client, api.timeouts, pools, namespace)
            }
            None => Pools::connect(&kubeconfig, self.timeouts)?,
        };
        Ok(Call {
            conf,
            container_id: &params.container_id,
            ifname: &params.ifname,
            podref: format!("{namespace}/{name}"),
            pod_uid: pod_uid(arg("K8S_POD_UID"))?,
            pools,
            deadline: Instant::now() + CALL_BUDGET,
            node,
            network,
            sliced_from: None,
            claim,
        })
    }
}

/// kubelet's `K8S_POD_UID`, which a note on the pool carries: a UID (up
/// to 64 letters, digits and `-`) or nothing.
fn pod_uid(arg: Option<&str>) -> Result<Option<String>, CniError> {
    let Some(uid) = arg else { return Ok(None) };
    let fits = uid.len() <= 64 && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !fits {
        return Err(CniError::invalid_env(
            "CNI_ARGS",
            "K8S_POD_UID: must be a pod's UID (up to 64 letters, digits and '-')",
        ));
    }
    Ok(Some(uid.to_string()))
}

/// A pause before deciding again: up to 10 ms doubling per loss, at most
/// 2.56 s, drawn at random below that ("full jitter"), so that hundreds of
/// plugin processes racing for one pool thin out instead of colliding in
/// step and flooding the API server.
fn backoff(tries: u32) -> Duration {
    let ceiling = 10u64 << tries.min(8);
    let nanos = u64::from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos()),
    );
    Duration::from_millis(1 + nanos % ceiling)
}

/// Where an attachment's search for a free address starts: a hash of who
/// asks, so writers on different nodes spread over the range instead of
/// all racing for the lowest free address.
fn hint(who: &Holder) -> u128 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in who.podref.bytes().chain(who.ifname.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    u128::from(h)
}

impl Call<'_> {
    fn holder(&self) -> Holder<'_> {
        Holder {
            container_id: self.container_id,
            podref: &self.podref,
            ifname: self.ifname,
        }
    }

    fn pool_name(&self, range: &PoolRange) -> String {
        let node = self.node.as_deref();
        pool::pool_name(range.network, self.conf.network_name.as_deref(), node)
    }

    fn reservation_name(&self, ip: IpAddr) -> String {
        pool::reservation_name(ip, self.conf.network_name.as_deref())
    }

    /// `ip`'s reservation, if any, and whether it is this attachment's:
    /// its pod's, for its interface (whereabouts before 0.8 records no
    /// interface: then the pod's).
    fn reservation(&self, ip: IpAddr) -> Result<Option<(Reservation, bool)>, ClusterIpamError> {
        let held = self.pools.reservation(&self.reservation_name(ip))?;
        Ok(held.map(|r| {
            let interface = r.spec.ifname.as_ref().is_none_or(|i| i == self.ifname);
            let ours = r.spec.podref == self.podref && interface;
            (r, ours)
        }))
    }

    /// Reserves `ip` for this attachment; `Ok(false)`: another pod has it.
    fn reserve(&self, ip: IpAddr) -> Result<bool, ClusterIpamError> {
        let spec = ReservationSpec {
            container_id: Some(self.container_id.clone()),
            podref: self.podref.clone(),
            ifname: Some(self.ifname.clone()),
        };
        if self.pools.reserve(&self.reservation_name(ip), &spec)? {
            return Ok(true);
        }
        // Gone again since (its holder's DEL): the next decision retries.
        Ok(self.reservation(ip)?.is_some_and(|(_, ours)| ours))
    }

    /// Gives back this pod's reservation of `ip`, never another's.
    fn unreserve(&self, ip: IpAddr) -> Result<(), ClusterIpamError> {
        if let Some((held, true)) = self.reservation(ip)? {
            self.pools.unreserve(&self.reservation_name(ip), &held)?;
        }
        Ok(())
    }

    /// One address of `range` for this attachment, written to its pool
    /// (and reserved): the module's invariant.
    fn take(&self, range: &PoolRange) -> Result<IpAddr, ClusterIpamError> {
        let outcome = self.choose_and_hold(range);
        let result = match &outcome {
            Ok(_) => "ok",
            Err(ClusterIpamError::Ipam(IpamError::RangeExhausted(_))) => "exhausted",
            Err(_) => "failed",
        };
        metrics().allocations.with_label_values(&[result]).inc();
        outcome
    }

    fn choose_and_hold(&self, range: &PoolRange) -> Result<IpAddr, ClusterIpamError> {
        // Addresses other pods reserved through overlapping pools.
        let mut taken = BTreeSet::new();
        loop {
            let (ip, took_over) = self.commit_entry(range, &taken)?;
            if !self.conf.overlapping_ranges || self.reserve(ip)? {
                return Ok(ip);
            }
            // A claim's address taken over from its last pod: that pod's
            // reservation moves too.
            if let Some(previous) = took_over {
                if let Some((held, false)) = self.reservation(ip)? {
                    if held.spec.podref == previous.podref {
                        self.pools.unreserve(&self.reservation_name(ip), &held)?;
                        if self.reserve(ip)? {
                            return Ok(ip);
                        }
                    }
                }
            }
            // Another pod holds it through an overlapping pool.
            self.give_back(range)?;
            taken.insert(ip);
        }
    }

    /// After a write lost to another writer: the pause before deciding
    /// again, and the count of tries; an error past the call's deadline.
    fn lost(&self, pool: &str, tries: u32) -> Result<u32, ClusterIpamError> {
        metrics().conflicts.inc();
        let tries = tries + 1;
        if Instant::now() >= self.deadline {
            return Err(ClusterIpamError::Contended {
                pool: pool.to_string(),
                tries,
                budget: CALL_BUDGET,
            });
        }
        std::thread::sleep(backoff(tries));
        Ok(tries)
    }

    /// Gives back this container's address of `range`, if it holds one:
    /// its reservation first (unless another pod's), then its entry in the
    /// pool (container ID and interface, as `DeallocateIP`), so that a DEL
    /// cut short anywhere is finished by the next.
    fn give_back(&self, range: &PoolRange) -> Result<(), ClusterIpamError> {
        if self.conf.overlapping_ranges {
            let name = self.pool_name(range);
            let held = self.existing_or_fresh(&name, false)?.and_then(|copy| {
                copy.key_held_by(self.container_id, self.ifname)
                    .and_then(|key| pool::address_at(range.network, key))
            });
            if let Some(ip) = held {
                self.unreserve(ip)?;
            }
        }
        self.release_entry(range)?;
        Ok(())
    }

    /// Gives back every address this container holds for its interface;
    /// nothing when they are an IPAMClaim's (the reconciler gives those
    /// back once the claim is deleted).
    fn release_all(&self) -> Result<(), ClusterIpamError> {
        if self.claim.is_some() {
            return Ok(());
        }
        for range in &self.conf.ranges {
            self.give_back(range)?;
        }
        Ok(())
    }

    fn ip_config(&self, range: &PoolRange, ip: IpAddr) -> IpConfig {
        let gateway = self.conf.gateway.filter(|g| g.is_ipv4() == ip.is_ipv4());
        IpConfig {
            address: IpNetwork::new(ip, self.sliced_from.unwrap_or(range.network).prefix())
                .expect("prefix of its range"),
            gateway,
            interface: None,
        }
    }
}

impl TypedPlugin for Whereabouts {
    type Error = ClusterIpamError;

    fn validate(&self, req: &Request) -> Result<(), ClusterIpamError> {
        self.conf(req).map(drop)
    }

    fn add(&self, req: &Request) -> Result<CniResult, ClusterIpamError> {
        note_in_use();
        let mut call = self.call(req)?;
        call.on_node_slice(true)?;
        let mut ips = Vec::new();
        for range in &call.conf.ranges {
            match call.take(range) {
                Ok(ip) => ips.push(call.ip_config(range, ip)),
                Err(e) => {
                    // A failed ADD gives back what it took (the ranges
                    // before this one).
                    let _ = call.release_all();
                    return Err(e);
                }
            }
        }
        let mut result = call.conf.result.clone();
        ips.append(&mut result.ips);
        result.ips = ips;
        result.cni_version = Some(req.cni_version);
        Ok(result)
    }

    fn del(&self, req: &Request) -> Result<(), ClusterIpamError> {
        note_in_use();
        let mut call = self.call(req)?;
        call.on_node_slice(false)?;
        call.release_all()
    }

    /// CHECK: every address of prevResult from a range is this container's
    /// in its pool (whereabouts answers CHECK with "not implemented").
    fn check(&self, req: &Request) -> Result<(), ClusterIpamError> {
        let mut call = self.call(req)?;
        if !call.on_node_slice(false)? {
            return Err(IpamError::NotAllocated(format!(
                "node {} has no slice of this network",
                call.node.as_deref().unwrap_or_default()
            ))
            .into());
        }
        let prev = req.prev_result.as_ref().ok_or_else(|| {
            CniError::invalid_config("prevResult", "missing: CHECK compares it with the IPPools")
        })?;
        for range in &call.conf.ranges {
            let name = call.pool_name(range);
            let held = call.pools.existing(&name, false)?.and_then(|copy| {
                copy.key_held_by(call.container_id, call.ifname)
                    .and_then(|key| pool::address_at(range.network, key))
            });
            let Some(ip) = held else {
                return Err(IpamError::NotAllocated(format!(
                    "IPPool {name}: container {} holds no address for {}",
                    call.container_id, call.ifname
                ))
                .into());
            };
            if !prev.ips.iter().any(|p| p.address.ip() == ip) {
                return Err(IpamError::CheckMismatch(format!(
                    "IPPool {name}: {ip} is held for {} but is not in prevResult.ips",
                    call.ifname
                ))
                .into());
            }
        }
        Ok(())
    }
}
