//! `host-local`: addresses from configured ranges, allocated round-robin and
//! recorded in files on the node, run in-process.
//!
//! # Compatible with the reference plugin (containernetworking/plugins)
//!
//! - Configuration keys, read case-insensitively as Go does: `ipam.ranges`
//!   (a list of range sets, each a list of `{subnet, rangeStart, rangeEnd,
//!   gateway}`; one address per set, so dual stack is one set per family),
//!   the legacy single range (`subnet`, `rangeStart`, `rangeEnd`, `gateway`
//!   directly in `ipam`, used as the first set), `routes`, `dataDir` (default
//!   `/var/lib/cni/networks`), `resolvConf`, and the `ipRanges` capability
//!   (sets prepended to the configured ones).
//! - Defaults and checks: gateway = the subnet's first address, rangeStart =
//!   that same address (the gateway is skipped when allocating), rangeEnd =
//!   the last address (the broadcast address excluded for IPv4); subnets
//!   smaller than /30 (/126) are "too small to allocate from"; host bits,
//!   mixed families in a set and overlapping ranges within or across sets are
//!   rejected; CNI 0.1.0/0.2.0 allow one set per family.
//! - The on-disk state, byte for byte: `<dataDir>/<name>/<ip>` holding
//!   `<containerID>\r\n<ifname>` (files of early reference versions, holding
//!   only the container ID, are read and released too),
//!   `<dataDir>/<name>/last_reserved_ip.<set index>` holding the bare
//!   address, and `<dataDir>/<name>/lock`, `flock`ed around every operation.
//!   A node can switch between the reference binary and plexus in either
//!   direction, and both can even run at once, since they lock the same file
//!   and reservation is exclusive (the reference creates address files with
//!   `O_EXCL`; plexus hard-links a complete temp file into place, which fails
//!   the same way when the name exists).
//! - Allocation order: round-robin from the address after
//!   `last_reserved_ip.<set>`, through the set's ranges, wrapping around.
//! - ADD fails when the attachment already holds an address in a set
//!   ("... has been allocated to ..., duplicate allocation is not allowed");
//!   a requested address must be free and not a gateway; on failure the
//!   addresses reserved so far are released.
//! - DEL releases every address of (container ID, interface), or, if there
//!   is none in the current format, every old-format file of the container.
//!   CHECK succeeds when the attachment holds at least one address.
//!
//! # What plexus adds or does differently
//!
//! - GC (CNI 1.1, cni-SPEC §2): releases every address whose (container ID,
//!   interface) is not among the valid attachments; old-format files are kept
//!   while their container has any valid attachment; files it does not
//!   recognise (empty ones, other names) are left alone, its own crash
//!   leftovers (temp files) are removed.
//! - STATUS (CNI 1.1): code 50 when some range set has no free address left,
//!   since every ADD needs one address from each set.
//! - Requested addresses come from one source, the first present of
//!   runtimeConfig `ips`, `args.cni.ips`, and CNI_ARGS `IP` (cni-CONVENTIONS:
//!   a plugin that understands `args` ignores the CNI_ARGS equivalent); the
//!   reference merges all three. CNI_ARGS `IP` may be a comma-separated list.
//! - The duplicate check also covers requested addresses (the reference
//!   checks only addresses it picks itself), and a failed ADD releases only
//!   what it reserved (the reference releases all the attachment holds).
//! - Specific error codes ([`crate::codes`]: 110 address in use, 111 range
//!   set exhausted, 112 duplicate allocation; 3 when CHECK finds no address;
//!   11 on lock timeout) where the reference reports the generic 999.
//! - Stricter validation, each error naming the field: a gateway outside its
//!   subnet, rangeStart after rangeEnd, legacy range keys without `subnet`, a
//!   requested address in no set or two in one set, and a network `name`
//!   that is empty or would leave `dataDir` (`/`, NUL, `.`, `..`).
//! - Files appear atomically with their content; those of a persistent
//!   owner (below) are fsynced, the directory too, before success is
//!   reported; temp files (`.plexus-tmp.*`)
//!   never parse as an address, so a crash's leftovers are ignored by both
//!   implementations (and removed by GC). The lock wait is bounded (code 11
//!   after [`DEFAULT_LOCK_TIMEOUT`], see [`HostLocal::with_lock_timeout`]).
//! - `args.plexus.persistentOwner` (set by plexus for an IPAMClaim,
//!   multi-net-spec §8): the owner takes the container ID's place in the
//!   allocation files, so the addresses belong to the claim. ADD gives an
//!   owner the addresses it already holds (a re-created pod gets its IPs
//!   back) instead of refusing a duplicate; DEL with the key keeps them;
//!   plexus releases them, once the claim is deleted, with a DEL whose
//!   CNI_CONTAINERID is the owner.
//! - DEL and GC need only `name` and `dataDir` to be valid, so a network
//!   whose ranges were since misconfigured can still be cleaned up; they
//!   never create the directory.

use crate::error::IpamError;
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use plexus_cni::names::IfName;
use plexus_cni::result::{CniResult, Dns, IpConfig, Route};
use plexus_cni::skel::{Request, TypedPlugin, ValidAttachment};
use serde::Deserialize;

use crate::common::{
    attachment, check_legacy_families, decode_config, decode_runtime_config, env_or_config,
    parse_requested_ip, parse_routes, ArgsConf, IpRangeConf, NetConf, RouteConf,
};
use crate::range::{Range, RangeSet};
use crate::resolv;
use crate::store::{self, Allocation, HolderId, LockedStore, Owner};

/// Where allocations live when `ipam.dataDir` is not set.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";

/// How long an operation waits for another process's lock on the network.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(60);

/// The host-local IPAM plugin.
#[derive(Debug, Clone)]
pub struct HostLocal {
    lock_timeout: Duration,
}

impl Default for HostLocal {
    fn default() -> Self {
        HostLocal::new()
    }
}

impl HostLocal {
    pub fn new() -> HostLocal {
        HostLocal {
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
        }
    }

    /// Wait at most `timeout` for the network's lock (then fail with code 11).
    pub fn with_lock_timeout(mut self, timeout: Duration) -> HostLocal {
        self.lock_timeout = timeout;
        self
    }

    fn open(&self, loc: &Location, create: bool) -> Result<Option<LockedStore>, IpamError> {
        store::open(&loc.data_dir, &loc.name, create, self.lock_timeout)
    }
}

// ---------------------------------------------------------------------------
// Configuration

type RangeSetConfs = Vec<Option<Vec<Option<IpRangeConf>>>>;

#[derive(Deserialize)]
struct IpamConf {
    // Decoded so a wrong type fails as in Go; the caller chose the plugin.
    #[serde(rename = "type")]
    _plugin_type: Option<String>,
    routes: Option<Vec<RouteConf>>,
    #[serde(rename = "dataDir")]
    data_dir: Option<String>,
    #[serde(rename = "resolvConf")]
    resolv_conf: Option<String>,
    ranges: Option<RangeSetConfs>,
    // The legacy single range.
    subnet: Option<String>,
    #[serde(rename = "rangeStart")]
    range_start: Option<String>,
    #[serde(rename = "rangeEnd")]
    range_end: Option<String>,
    gateway: Option<String>,
}

#[derive(Deserialize)]
struct RuntimeConf {
    ips: Option<Vec<String>>,
    #[serde(rename = "ipRanges")]
    ip_ranges: Option<RangeSetConfs>,
}

/// Only what DEL and GC need of `ipam`.
#[derive(Deserialize)]
struct LocationIpam {
    #[serde(rename = "dataDir")]
    data_dir: Option<String>,
}

/// `<dataDir>/<name>`: where a network's allocations live.
#[derive(Debug, Clone)]
struct Location {
    name: String,
    data_dir: PathBuf,
}

impl Location {
    fn new(req: &Request, data_dir: Option<&str>) -> Result<Location, IpamError> {
        let name = checked_network_name(req.name.as_deref())?;
        let data_dir = match data_dir {
            Some(d) if !d.is_empty() => {
                if d.contains('\0') {
                    return Err(IpamError::config("ipam.dataDir", "must not contain NUL"));
                }
                PathBuf::from(d)
            }
            _ => PathBuf::from(DEFAULT_DATA_DIR),
        };
        Ok(Location {
            name: name.to_string(),
            data_dir,
        })
    }

    /// What DEL and GC read: `name`, `ipam.dataDir` and `args`, nothing else.
    fn load(req: &Request) -> Result<(Location, Option<ArgsConf>), IpamError> {
        let conf: NetConf<LocationIpam> = decode_config(req)?;
        let ipam = conf.ipam.ok_or_else(missing_ipam)?;
        Ok((Location::new(req, ipam.data_dir.as_deref())?, conf.args))
    }

    fn dir(&self) -> PathBuf {
        self.data_dir.join(&self.name)
    }
}

fn missing_ipam() -> IpamError {
    IpamError::config(
        "ipam",
        "missing: host-local reads its configuration from the ipam section",
    )
}

/// The network name becomes a directory under `dataDir`: it must be exactly
/// one ordinary path component.
fn checked_network_name(name: Option<&str>) -> Result<&str, IpamError> {
    let bad = |reason: String| IpamError::config("name", reason);
    let name = match name {
        None | Some("") => {
            return Err(bad(
                "missing: host-local keeps a network's addresses in <dataDir>/<name>".into(),
            ))
        }
        Some(n) => n,
    };
    if let Some(c) = name.chars().find(|c| matches!(c, '/' | '\0')) {
        return Err(bad(format!(
            "{name:?} must not contain {c:?}: it names a directory under dataDir"
        )));
    }
    let mut parts = Path::new(name).components();
    match (parts.next(), parts.next()) {
        (Some(Component::Normal(_)), None) => Ok(name),
        _ => Err(bad(format!(
            "{name:?} cannot name a directory of its own under dataDir"
        ))),
    }
}

/// An address asked for by the runtime.
#[derive(Debug, Clone)]
struct Requested {
    ip: IpAddr,
    /// `runtimeConfig.ips[0]`, `args.cni.ips[1]`, `CNI_ARGS` ...
    path: String,
    /// From CNI_ARGS: errors are code 4.
    from_env: bool,
}

impl Requested {
    fn error(&self, reason: String) -> IpamError {
        env_or_config(self.from_env, &self.path, reason)
    }
}

/// Who an allocation file names.
#[derive(Debug, Clone)]
struct Holder<'a> {
    /// The container ID, or the persistent owner in its place.
    id: HolderId,
    ifname: &'a IfName,
    /// A persistent owner gets back what it holds instead of a duplicate
    /// error.
    persistent: bool,
}

/// A validated host-local configuration.
#[derive(Debug)]
struct Config {
    location: Location,
    sets: Vec<RangeSet>,
    routes: Vec<Route>,
    resolv_conf: Option<PathBuf>,
    /// Per range set, the address requested from it.
    requested: Vec<Option<Requested>>,
    /// `args.plexus.persistentOwner`: holds the addresses instead of the
    /// container.
    persistent_owner: Option<HolderId>,
}

impl Config {
    fn load(req: &Request) -> Result<Config, IpamError> {
        let conf: NetConf<IpamConf> = decode_config(req)?;
        let runtime: RuntimeConf = decode_runtime_config(req)?;
        let ipam = conf.ipam.ok_or_else(missing_ipam)?;
        let location = Location::new(req, ipam.data_dir.as_deref())?;

        // Runtime ranges first, then the legacy range, then ipam.ranges, as
        // the reference orders them (the order fixes last_reserved_ip.<n>).
        let mut sets = Vec::new();
        add_sets(
            &mut sets,
            runtime.ip_ranges.as_deref(),
            "runtimeConfig.ipRanges",
        )?;
        if let Some(legacy) = legacy_range(&ipam)? {
            sets.push(RangeSet::from_confs(&[legacy], "ipam", |_| "ipam".into())?);
        }
        add_sets(&mut sets, ipam.ranges.as_deref(), "ipam.ranges")?;
        if sets.is_empty() {
            return Err(IpamError::config(
                "ipam.ranges",
                "missing: host-local needs at least one range set (ipam.ranges, or ipam.subnet)",
            ));
        }
        check_legacy_families(req.cni_version, sets.iter().map(|s| s.ranges[0].start))?;
        for (j, later) in sets.iter().enumerate() {
            for earlier in &sets[..j] {
                if let Some((a, b)) = later.overlap_with(earlier) {
                    return Err(IpamError::config(
                        &later.path,
                        format!(
                            "range set overlaps with range set {}: {} ({a}) overlaps {} ({b})",
                            earlier.path, a.path, b.path
                        ),
                    ));
                }
            }
        }

        let requested = assign_requested(&sets, requested_ips(req, &conf.args, &runtime)?)?;
        Ok(Config {
            location,
            sets,
            routes: parse_routes(ipam.routes.as_deref(), "ipam.routes")?,
            resolv_conf: ipam
                .resolv_conf
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
            requested,
            persistent_owner: ArgsConf::persistent_owner(&conf.args)?.map(HolderId::new),
        })
    }

    /// Who holds this attachment's addresses: the persistent owner, else the
    /// container (CNI_CONTAINERID), with CNI_IFNAME.
    fn holder<'a>(&'a self, req: &'a Request) -> Result<Holder<'a>, IpamError> {
        let (id, ifname) = attachment(req)?;
        Ok(Holder {
            id: self.persistent_owner.clone().unwrap_or_else(|| id.into()),
            ifname,
            persistent: self.persistent_owner.is_some(),
        })
    }

    fn dns(&self) -> Result<Dns, IpamError> {
        match &self.resolv_conf {
            Some(path) => resolv::read(path, "ipam.resolvConf"),
            None => Ok(Dns::default()),
        }
    }
}

fn add_sets(
    sets: &mut Vec<RangeSet>,
    confs: Option<&[Option<Vec<Option<IpRangeConf>>>]>,
    path: &str,
) -> Result<(), IpamError> {
    for (i, set) in confs.unwrap_or_default().iter().enumerate() {
        let ranges: Vec<IpRangeConf> = set
            .iter()
            .flatten()
            .map(|r| r.clone().unwrap_or_default())
            .collect();
        let set_path = format!("{path}[{i}]");
        sets.push(RangeSet::from_confs(&ranges, &set_path, |j| {
            format!("{set_path}[{j}]")
        })?);
    }
    Ok(())
}

/// The legacy single range, when `ipam.subnet` is set. Its other keys
/// without a subnet are an error (the reference ignores them silently).
fn legacy_range(ipam: &IpamConf) -> Result<Option<IpRangeConf>, IpamError> {
    let given = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.is_empty());
    if !given(&ipam.subnet) {
        for (key, v) in [
            ("rangeStart", &ipam.range_start),
            ("rangeEnd", &ipam.range_end),
            ("gateway", &ipam.gateway),
        ] {
            if given(v) {
                return Err(IpamError::config(
                    format!("ipam.{key}"),
                    "set without ipam.subnet: the single-range form needs a subnet \
                     (or move the range into ipam.ranges)",
                ));
            }
        }
        return Ok(None);
    }
    Ok(Some(IpRangeConf {
        subnet: ipam.subnet.clone(),
        range_start: ipam.range_start.clone(),
        range_end: ipam.range_end.clone(),
        gateway: ipam.gateway.clone(),
    }))
}

/// Requested addresses from the first source that has any: runtimeConfig
/// `ips` (capability), `args.cni.ips`, CNI_ARGS `IP` (cni-CONVENTIONS: args
/// beat CNI_ARGS).
fn requested_ips(
    req: &Request,
    args: &Option<ArgsConf>,
    runtime: &RuntimeConf,
) -> Result<Vec<Requested>, IpamError> {
    // The reference reads CNI_ARGS into a struct with only `IP`: other keys
    // need IgnoreUnknown.
    req.env.args().check_known(&["IP"])?;
    let from_list = |list: &[String], path: &str| -> Result<Vec<Requested>, IpamError> {
        list.iter()
            .enumerate()
            .map(|(i, s)| {
                let path = format!("{path}[{i}]");
                let ip = parse_requested_ip(s).map_err(|r| IpamError::config(&path, r))?;
                Ok(Requested {
                    ip,
                    path,
                    from_env: false,
                })
            })
            .collect()
    };
    let rc = runtime.ips.as_deref().unwrap_or_default();
    if !rc.is_empty() {
        return from_list(rc, "runtimeConfig.ips");
    }
    let args = ArgsConf::ips(args);
    if !args.is_empty() {
        return from_list(args, "args.cni.ips");
    }
    let Some(value) = req.env.args().get("IP").filter(|v| !v.is_empty()) else {
        return Ok(Vec::new());
    };
    value
        .split(',')
        .map(str::trim)
        .map(|s| {
            let ip = parse_requested_ip(s)
                .map_err(|r| IpamError::env("CNI_ARGS", format!("IP: {r}")))?;
            Ok(Requested {
                ip,
                path: format!("CNI_ARGS IP={s}"),
                from_env: true,
            })
        })
        .collect()
}

/// Each requested address to the one range set that holds it.
fn assign_requested(
    sets: &[RangeSet],
    requested: Vec<Requested>,
) -> Result<Vec<Option<Requested>>, IpamError> {
    let mut per_set: Vec<Option<Requested>> = vec![None; sets.len()];
    for r in requested {
        let Some(idx) = sets.iter().position(|s| s.contains(r.ip)) else {
            let sets: Vec<String> = sets.iter().map(|s| format!("{}: {s}", s.path)).collect();
            return Err(r.error(format!(
                "{} is in no range set of this network ({})",
                r.ip,
                sets.join("; ")
            )));
        };
        let set = &sets[idx];
        if let Some(first) = &per_set[idx] {
            return Err(r.error(format!(
                "{} and {} ({}) are both in range set {}, and host-local allocates one address per set",
                r.ip, first.path, first.ip, set.path
            )));
        }
        if let Some(range) = set.range_for(r.ip).filter(|range| range.gateway == r.ip) {
            return Err(r.error(format!(
                "{} is the gateway of {} ({}) and cannot be allocated",
                r.ip, range.path, range.subnet
            )));
        }
        per_set[idx] = Some(r);
    }
    Ok(per_set)
}

// ---------------------------------------------------------------------------
// Operations

/// Allocate one address from `set` (index `idx`) for the attachment.
fn allocate<'a>(
    store: &LockedStore,
    allocs: &[Allocation],
    taken: &HashMap<IpAddr, &Allocation>,
    idx: usize,
    set: &'a RangeSet,
    requested: Option<&Requested>,
    holder: &Holder,
) -> Result<(IpAddr, &'a Range, bool), IpamError> {
    let Holder { id, ifname, .. } = holder;
    if let Some(a) = allocs
        .iter()
        .find(|a| set.contains(a.ip) && a.owner.is_held_by(id, ifname))
    {
        if let (true, Some(range)) = (holder.persistent, set.range_for(a.ip)) {
            return Ok((a.ip, range, false));
        }
        return Err(IpamError::DuplicateAllocation(format!(
            "{}: {} has been allocated to {id}, duplicate allocation is not allowed",
            set.path, a.ip
        )));
    }
    if let Some(r) = requested {
        let in_use = |owner: &Owner| {
            IpamError::AddressInUse(format!(
                "{}: {} is already allocated to {}",
                r.path,
                r.ip,
                owner.describe()
            ))
        };
        let range = set
            .range_for(r.ip)
            .ok_or_else(|| r.error(format!("{} is not in range set {}", r.ip, set.path)))?;
        if let Some(a) = taken.get(&r.ip) {
            return Err(in_use(&a.owner));
        }
        if !store.reserve(r.ip, id, ifname)? {
            // Written since the scan by a process that ignores the lock.
            return Err(in_use(&store.owner_of(r.ip)));
        }
        store.set_last_reserved(idx, r.ip)?;
        return Ok((r.ip, range, true));
    }
    for (range, ip) in set.candidates(store.last_reserved(idx)) {
        if taken.contains_key(&ip) {
            continue;
        }
        if store.reserve(ip, id, ifname)? {
            store.set_last_reserved(idx, ip)?;
            return Ok((ip, range, true));
        }
    }
    Err(IpamError::RangeExhausted(format!(
        "{}: no IP addresses available in range set {set}",
        set.path
    )))
}

impl TypedPlugin for HostLocal {
    type Error = IpamError;

    fn validate(&self, req: &Request) -> Result<(), IpamError> {
        Config::load(req)?.dns().map(|_| ())
    }

    fn add(&self, req: &Request) -> Result<CniResult, IpamError> {
        let conf = Config::load(req)?;
        let who = conf.holder(req)?;
        let dns = conf.dns()?;
        let store = self.open(&conf.location, true)?.ok_or_else(|| {
            IpamError::io(conf.location.dir().display().to_string(), "not created")
        })?;
        let allocs = store.allocations()?;
        let taken = LockedStore::by_ip(&allocs);

        let mut ips = Vec::with_capacity(conf.sets.len());
        let mut reserved: Vec<IpAddr> = Vec::new();
        for (idx, set) in conf.sets.iter().enumerate() {
            match allocate(
                &store,
                &allocs,
                &taken,
                idx,
                set,
                conf.requested[idx].as_ref(),
                &who,
            ) {
                Ok((ip, range, fresh)) => {
                    if fresh {
                        reserved.push(ip);
                    }
                    ips.push(IpConfig {
                        address: range.address(ip),
                        gateway: Some(range.gateway),
                        interface: None,
                    });
                }
                Err(e) => {
                    // Undo this ADD's reservations only (the reference
                    // releases everything the attachment holds).
                    for ip in &reserved {
                        let _ = store.release(&ip.to_string());
                    }
                    let _ = store.sync();
                    return Err(e);
                }
            }
        }
        // Only addresses that outlive their pod need to outlive a power cut:
        // an ordinary pod dies with the node, so a reservation lost with it
        // can hand out nothing twice (the reference never syncs either). An
        // IPAMClaim's addresses come back to the re-created pod.
        if who.persistent {
            store.make_durable(&reserved)?;
        }
        Ok(CniResult {
            cni_version: Some(req.cni_version),
            interfaces: Vec::new(),
            ips,
            routes: conf.routes,
            dns,
        })
    }

    fn del(&self, req: &Request) -> Result<(), IpamError> {
        let (loc, args) = Location::load(req)?;
        let (id, ifname) = attachment(req)?;
        let id = HolderId::from(id);
        if ArgsConf::persistent_owner(&args)?.is_some() {
            // The owner's addresses outlive the pod: plexus releases them
            // once the IPAMClaim is deleted (multi-net-spec §8).
            return Ok(());
        }
        let Some(store) = self.open(&loc, false)? else {
            return Ok(());
        };
        let allocs = store.allocations()?;
        let mut mine: Vec<&Allocation> = allocs
            .iter()
            .filter(|a| a.owner.is_exactly(&id, ifname))
            .collect();
        if mine.is_empty() {
            // Files of reference versions that did not record the interface.
            mine = allocs
                .iter()
                .filter(|a| a.owner.is_legacy_of(&id))
                .collect();
        }
        if mine.is_empty() {
            return Ok(());
        }
        for a in mine {
            store.release(&a.file_name)?;
        }
        store.sync()
    }

    fn check(&self, req: &Request) -> Result<(), IpamError> {
        let conf = Config::load(req)?;
        let Holder { id, ifname, .. } = conf.holder(req)?;
        let held = match self.open(&conf.location, false)? {
            Some(store) => store
                .allocations()?
                .iter()
                .any(|a| a.owner.is_held_by(&id, ifname)),
            None => false,
        };
        if held {
            return Ok(());
        }
        Err(IpamError::NotAllocated(format!(
                "CNI_CONTAINERID: container {id} (interface {ifname}) holds no address in network {} ({})",
                conf.location.name,
                conf.location.dir().display()
            ),
        ))
    }

    fn gc(&self, req: &Request, valid: &[ValidAttachment]) -> Result<(), IpamError> {
        let (loc, _) = Location::load(req)?;
        let Some(store) = self.open(&loc, false)? else {
            return Ok(());
        };
        store.remove_stale_temps()?;
        let valid: Vec<(HolderId, &IfName)> = valid.iter().map(|(c, i)| (c.into(), i)).collect();
        let is_valid = |a: &Allocation| match &a.owner {
            Owner::Attachment { .. } => valid.iter().any(|(c, i)| a.owner.is_exactly(c, i)),
            Owner::Container(_) => valid.iter().any(|(c, _)| a.owner.is_legacy_of(c)),
            // Empty content is crash debris (see the store docs): under
            // the lock no writer is half-way, and no attachment owns it;
            // nor does one own a file naming no interface.
            Owner::Unknown | Owner::Foreign(_) => false,
        };
        for a in store.allocations()?.iter().filter(|a| !is_valid(a)) {
            store.release(&a.file_name)?;
        }
        store.sync()
    }

    fn status(&self, req: &Request) -> Result<(), IpamError> {
        let conf = Config::load(req)?;
        let allocs = match self.open(&conf.location, false)? {
            Some(store) => store.allocations()?,
            None => Vec::new(),
        };
        for set in &conf.sets {
            let capacity = set.capacity();
            let used = allocs
                .iter()
                .filter(|a| set.range_for(a.ip).is_some_and(|r| r.gateway != a.ip))
                .count() as u128;
            if used >= capacity {
                return Err(IpamError::Full(format!(
                    "{}: all {capacity} addresses of range set {set} are allocated",
                    set.path
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_names_stay_inside_data_dir() {
        for ok in ["net", "my-net.v1", "a..b", "...", "with space"] {
            assert_eq!(checked_network_name(Some(ok)), Ok(ok), "{ok}");
        }
        for bad in [
            None,
            Some(""),
            Some("."),
            Some(".."),
            Some("a/b"),
            Some("/abs"),
            Some("../x"),
            Some("a\0b"),
            Some("net/"),
        ] {
            let e = checked_network_name(bad).unwrap_err();
            assert!(
                matches!(&e, IpamError::Config { field, .. } if field == "name"),
                "{e:?}"
            );
        }
    }
}
