//! The `bandwidth` chained plugin: token-bucket shaping of a pod's traffic
//! on the host side of its veth pair, behaving as the reference plugin
//! (containernetworking/plugins `plugins/meta/bandwidth`) does.
//!
//! # Configuration
//!
//! `ingressRate`, `ingressBurst`, `egressRate`, `egressBurst`, all in
//! **bits** (per second for rates), either as top-level keys or as the
//! `bandwidth` capability (`runtimeConfig.bandwidth`, cni-CONVENTIONS). As
//! in the reference, the top-level keys win: the capability is used only
//! when none of the four keys is in the configuration. Per direction, rate
//! and burst come together or not at all; 0 means "not shaped".
//!
//! # What is built (in the namespace the plugin runs in, the host's)
//!
//! The host-side interface is the veth peer of `CNI_IFNAME`, which must be
//! listed in prevResult as an interface without `sandbox`.
//!
//! - ingress (traffic *to* the pod, which the host veth transmits): a tbf
//!   qdisc, handle `1:`, as the host veth's root qdisc.
//! - egress (traffic *from* the pod, which the host veth receives): an ifb
//!   device named by [`ifb_name`] with the host veth's MTU, an ingress qdisc
//!   on the host veth, a u32 filter there (priority 1, all protocols)
//!   redirecting every frame to the ifb, and a tbf (handle `1:`) as the ifb's
//!   root qdisc. The ifb is appended to the result's interfaces.
//!
//! Rates and bursts become tbf parameters exactly as in the reference:
//! bytes = bits / 8; buffer = the burst's transmission time at the rate in
//! psched ticks; limit = the bytes sent in 25 ms at the rate + the burst.
//!
//! DEL deletes the ifb (the qdiscs go away with the pod's veth); CHECK
//! verifies every qdisc's parameters, the ifb and the redirect.
//!
//! # Differences from the reference, all on failure paths
//!
//! - Values whose tbf parameters do not fit the kernel's 32-bit fields, and
//!   rates or bursts below 8 bits (0 bytes), are refused with the field's
//!   name instead of producing a broken qdisc.
//! - A failure half-way through ADD removes what was already built.
//! - The redirect filter has one mirred action (the reference's netlink
//!   library adds the same redirect twice, the second never reached).
//! - DEL needs only the network name and container ID, so it succeeds even
//!   for a configuration that ADD would refuse.
//! - CHECK verifies the root qdisc of each device (the reference stops at
//!   the first qdisc that is not a tbf) and the redirect filter.

use crate::drivers::error::{mismatch, sys, DriverError};
use std::fmt;

use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha512};

use plexus_cni::casefold;
use plexus_cni::names::IfName;
use plexus_cni::result::Interface;
use plexus_cni::skel::{Request, TypedPlugin};
use plexus_cni::CniResult;

use super::attachment::{chained_prev_result as prev_result, Attach};
use super::undo::Undo;
use crate::netlink::{
    handle, Link, LinkKind, MirredKind, Netlink, PschedClock, QdiscKind, Tbf, HANDLE_INGRESS,
    HANDLE_ROOT, INGRESS_QDISC, TIME_UNITS_PER_SEC,
};
use crate::session::Session;

const PLUGIN: &str = "bandwidth";

/// Prefix of the ifb devices' names.
pub const IFB_PREFIX: &str = "bwp";
/// How long a packet may wait for tokens: sets the tbf's limit.
pub const LATENCY_MS: f64 = 25.0;
/// The tbf qdiscs' handle, `1:`.
pub const TBF_HANDLE: u32 = handle(1, 0);
/// Priority of the redirect filter.
pub const FILTER_PRIORITY: u16 = 1;

/// The ifb device of network `network` for container `container_id`: the
/// reference's name, `bwp` and the first 12 hex digits of
/// SHA-512(network + container ID), so both implementations find each
/// other's devices.
pub fn ifb_name(network: &str, container_id: &str) -> IfName {
    let digest = Sha512::new()
        .chain_update(network.as_bytes())
        .chain_update(container_id.as_bytes())
        .finalize();
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    IfName::new(format!("{IFB_PREFIX}{hex}"))
        .expect("the prefix and 12 hex digits are 15 bytes of a valid name")
}

/// The four keys, in bits. Absent (or null) is 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BandwidthEntry {
    #[serde(default, deserialize_with = "null_is_zero")]
    pub ingress_rate: u64,
    #[serde(default, deserialize_with = "null_is_zero")]
    pub ingress_burst: u64,
    #[serde(default, deserialize_with = "null_is_zero")]
    pub egress_rate: u64,
    #[serde(default, deserialize_with = "null_is_zero")]
    pub egress_burst: u64,
}

fn null_is_zero<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(Option::<u64>::deserialize(d)?.unwrap_or(0))
}

const KEYS: [&str; 4] = ["ingressRate", "ingressBurst", "egressRate", "egressBurst"];

/// What to build: a tbf per shaped direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shaping {
    pub ingress: Option<Tbf>,
    pub egress: Option<Tbf>,
}

impl Shaping {
    pub fn is_empty(&self) -> bool {
        self.ingress.is_none() && self.egress.is_none()
    }

    /// The shaping an entry asks for. `prefix` is put before the key names
    /// in errors (`runtimeConfig.bandwidth.`).
    pub fn from_entry(
        e: &BandwidthEntry,
        prefix: &str,
        clock: PschedClock,
    ) -> Result<Shaping, DriverError> {
        Ok(Shaping {
            ingress: direction(e.ingress_rate, e.ingress_burst, prefix, "ingress", clock)?,
            egress: direction(e.egress_rate, e.egress_burst, prefix, "egress", clock)?,
        })
    }
}

fn direction(
    rate: u64,
    burst: u64,
    prefix: &str,
    dir: &str,
    clock: PschedClock,
) -> Result<Option<Tbf>, DriverError> {
    let rate_field = format!("{prefix}{dir}Rate");
    let burst_field = format!("{prefix}{dir}Burst");
    match (rate, burst) {
        (0, 0) => return Ok(None),
        (_, 0) => {
            return Err(DriverError::config(
                burst_field,
                format!("missing: {rate_field} is set, so the burst must be set too"),
            ))
        }
        (0, _) => {
            return Err(DriverError::config(
                rate_field,
                format!("missing: {burst_field} is set, so the rate must be set too"),
            ))
        }
        _ => {}
    }
    tbf_for(rate, burst, clock).map(Some).map_err(|e| match e {
        Fault::Rate(reason) => DriverError::config(rate_field, reason),
        Fault::Burst(reason) => DriverError::config(burst_field, reason),
    })
}

/// Why a rate and burst make no tbf: which of the two is at fault, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    Rate(String),
    Burst(String),
}

/// The tbf for `rate_bits` per second and a `burst_bits` bucket, computed as
/// the reference does (with its float-to-integer truncations).
pub fn tbf_for(rate_bits: u64, burst_bits: u64, clock: PschedClock) -> Result<Tbf, Fault> {
    const LIMIT: f64 = 4_294_967_296.0; // 2^32
    let rate = rate_bits / 8;
    let burst = burst_bits / 8;
    if rate == 0 {
        return Err(Fault::Rate(format!(
            "{rate_bits} bits/s is less than one byte per second"
        )));
    }
    if burst == 0 {
        return Err(Fault::Burst(format!(
            "{burst_bits} bits is less than one byte"
        )));
    }
    if burst >= u64::from(u32::MAX) {
        return Err(Fault::Burst("cannot be more than 4GB".into()));
    }
    // The bucket as the time to send it at the rate (µs, then ticks).
    let usec = burst as f64 * TIME_UNITS_PER_SEC / rate as f64;
    let ticks = (usec.trunc() * clock.ticks_per_usec).trunc();
    if usec >= LIMIT || ticks >= LIMIT {
        return Err(Fault::Burst(format!(
            "{burst_bits} bits take {:.0} s to send at {rate_bits} bits/s; the kernel's tbf holds at most {:.0} s",
            usec / TIME_UNITS_PER_SEC,
            LIMIT / clock.ticks_per_usec / TIME_UNITS_PER_SEC
        )));
    }
    let latency_usec = TIME_UNITS_PER_SEC * (LATENCY_MS / 1000.0);
    let queued = (rate as f64 * latency_usec / TIME_UNITS_PER_SEC).trunc();
    let limit = (queued < LIMIT)
        .then_some(queued as u32)
        .and_then(|q| q.checked_add(burst as u32))
        .ok_or_else(|| {
            Fault::Rate(format!(
                "{rate_bits} bits/s queues more than 4GB in {LATENCY_MS} ms"
            ))
        })?;
    Ok(Tbf {
        rate,
        buffer: ticks as u32,
        limit,
    })
}

/// The entry in force: the top-level keys if any of them is present,
/// otherwise the `bandwidth` capability; with the prefix for messages.
fn entry(req: &Request) -> Result<Option<(BandwidthEntry, &'static str)>, DriverError> {
    let top_level = req
        .config
        .keys()
        .any(|k| KEYS.iter().any(|key| casefold::fold_eq(k, key)));
    if top_level {
        let e = casefold::decode(&Value::Object(req.config.clone()))?;
        return Ok(Some((e, "")));
    }
    match req.runtime_config.get("bandwidth") {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Object(_)) => casefold::decode(v)
            .map(|e| Some((e, "runtimeConfig.bandwidth.")))
            .map_err(|e| e.within("runtimeConfig.bandwidth"))
            .map_err(DriverError::from),
        Some(other) => Err(DriverError::config(
            "runtimeConfig.bandwidth",
            format!("must be an object, got {other}"),
        )),
    }
}

/// The shaping a request asks for (empty when none).
pub fn shaping(req: &Request, clock: PschedClock) -> Result<Shaping, DriverError> {
    match entry(req)? {
        None => Ok(Shaping::default()),
        Some((e, prefix)) => Shaping::from_entry(&e, prefix, clock),
    }
}

/// The bandwidth plugin. It works in the namespace it runs in: the host's.
#[derive(Debug, Clone)]
pub struct Bandwidth<'s> {
    /// The psched clock; read from `/proc/net/psched` when `None`.
    pub clock: Option<PschedClock>,
    session: &'s Session,
}

impl<'s> Bandwidth<'s> {
    pub fn new(session: &'s Session) -> Self {
        Bandwidth {
            clock: None,
            session,
        }
    }

    fn clock(&self) -> PschedClock {
        self.clock.unwrap_or_else(PschedClock::read)
    }
}

/// Why a chain has no host-side interface to shape on.
const NEEDS_VETH: &str = "bandwidth shapes a pod's traffic on the host side of its veth pair";

/// The host-side interface of the pod's `ifname`: its veth peer, which must
/// be in this namespace and listed in prevResult without a sandbox.
fn host_interface(prev: &CniResult, at: &Attach<'_>) -> Result<Link, DriverError> {
    let ifname = at.ifname.as_str();
    if !prev.interfaces.iter().any(|i| !i.in_sandbox()) {
        return Err(DriverError::config(
            "prevResult.interfaces",
            format!(
                "no host-side interface (one without \"sandbox\"): {NEEDS_VETH}, and the plugin before it made none (macvlan, ipvlan and host-device attachments have none)"
            ),
        ));
    }
    let pod_link = at.existing_pod_link()?;
    let peer = match (&pod_link.kind, pod_link.parent) {
        (Some(LinkKind::Veth), Some(peer)) => peer,
        (kind, _) => {
            let kind = match kind {
                Some(LinkKind::Other(k)) => k.clone(),
                Some(k) => format!("{k:?}").to_lowercase(),
                None => "device without a link type".into(),
            };
            return Err(DriverError::config(
                "CNI_IFNAME",
                format!("{ifname} in the pod is a {kind}, not a veth: {NEEDS_VETH}"),
            ));
        }
    };
    let host = at
        .host
        .link_by_index(peer)
        .map_err(sys("host-side interface"))?
        .ok_or_else(|| {
            DriverError::config(
                "CNI_IFNAME",
                format!(
                    "the veth peer of {ifname} (index {peer}) is not in the namespace bandwidth runs in: {NEEDS_VETH}"
                ),
            )
        })?;
    if !prev
        .interfaces
        .iter()
        .any(|i| !i.in_sandbox() && i.name == host.name)
    {
        return Err(DriverError::config(
            "prevResult.interfaces",
            format!(
                "the veth peer of {ifname} is {}, which is not listed as a host-side interface",
                host.name
            ),
        ));
    }
    Ok(host)
}

struct ShowTbf<'a>(&'a Tbf);

impl fmt::Display for ShowTbf<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tbf rate {} bytes/s buffer {} ticks limit {} bytes",
            self.0.rate, self.0.buffer, self.0.limit
        )
    }
}

/// The shaping on `host` (and its ifb device), each step registered in
/// `undo`.
fn build<'a>(
    nl: &'a Netlink,
    host: &Link,
    shaping: &Shaping,
    ifb: &'a IfName,
    undo: &mut Undo<'a>,
) -> Result<Option<Link>, DriverError> {
    let index = host.index;
    if let Some(tbf) = &shaping.ingress {
        nl.add_root_tbf(index, TBF_HANDLE, tbf)
            .map_err(sys(format!("ingressRate: shaping {}", host.name)))?;
        undo.push("the root tbf", move || {
            nl.del_qdisc(index, HANDLE_ROOT)
                .map(drop)
                .map_err(sys("delete the root tbf"))
        });
    }
    let Some(tbf) = &shaping.egress else {
        return Ok(None);
    };
    let what = |step: &str| format!("egressRate: {step}");
    let dev = nl
        .create_ifb(ifb, Some(host.mtu))
        .map_err(sys(what("creating the ifb device")))?;
    undo.push(format!("ifb device {ifb}"), move || {
        nl.del_link_by_name(ifb)
            .map(drop)
            .map_err(sys(format_args!("delete {ifb}")))
    });
    nl.add_ingress_qdisc(index).map_err(sys(what(&format!(
        "adding an ingress qdisc to {}",
        host.name
    ))))?;
    undo.push("the ingress qdisc", move || {
        nl.del_qdisc(index, HANDLE_INGRESS)
            .map(drop)
            .map_err(sys("delete the ingress qdisc"))
    });
    nl.add_redirect_filter(host.index, INGRESS_QDISC, FILTER_PRIORITY, dev.index)
        .map_err(sys(what(&format!("redirecting {} to {ifb}", host.name))))?;
    nl.add_root_tbf(dev.index, TBF_HANDLE, tbf)
        .map_err(sys(what(&format!("shaping {ifb}"))))?;
    Ok(Some(dev))
}

fn check_root_tbf(nl: &Netlink, link: &Link, want: &Tbf, field: &str) -> Result<(), DriverError> {
    let root = nl.qdisc_at(link.index, HANDLE_ROOT).map_err(sys(field))?;
    match root.map(|q| q.kind) {
        Some(QdiscKind::Tbf(got)) if got == *want => Ok(()),
        Some(QdiscKind::Tbf(got)) => Err(mismatch(
            field,
            format!(
                "{} has {}, the configuration asks for {}",
                link.name,
                ShowTbf(&got),
                ShowTbf(want)
            ),
        )),
        other => Err(mismatch(
            field,
            format!(
                "the root qdisc of {} is {}, expected a tbf",
                link.name,
                match other {
                    None => "the kernel's default".to_string(),
                    Some(QdiscKind::Ingress) => "ingress".to_string(),
                    Some(QdiscKind::Other(k)) => k,
                    Some(QdiscKind::Tbf(_)) => unreachable!("matched above"),
                }
            ),
        )),
    }
}

impl TypedPlugin for Bandwidth<'_> {
    type Error = DriverError;

    fn validate(&self, req: &Request) -> Result<(), DriverError> {
        shaping(req, self.clock()).map(drop)
    }

    fn add(&self, req: &Request) -> Result<CniResult, DriverError> {
        let shaping = shaping(req, self.clock())?;
        let prev = prev_result(req, PLUGIN)?;
        if shaping.is_empty() {
            return Ok(prev.clone());
        }
        let at = Attach::open(self.session, req)?;
        let host = host_interface(prev, &at)?;
        let ifb = ifb_name(
            req.name.as_deref().unwrap_or(""),
            &req.env.require_attachment()?.container_id,
        );
        let mut undo = Undo::default();
        let built = build(at.host, &host, &shaping, &ifb, &mut undo);
        let dev = undo.finish(built)?;
        let mut result = prev.clone();
        if let Some(dev) = dev {
            result.interfaces.push(Interface {
                name: dev.name.into(),
                mac: dev.mac.map(|m| m.to_string()),
                ..Interface::default()
            });
        }
        Ok(result)
    }

    fn del(&self, req: &Request) -> Result<(), DriverError> {
        let ifb = ifb_name(
            req.name.as_deref().unwrap_or(""),
            &req.env.require_attachment()?.container_id,
        );
        let nl = self
            .session
            .host()
            .map_err(sys("netlink in the host namespace"))?;
        nl.del_link_by_name(&ifb)
            .map(drop)
            .map_err(sys(format!("deleting {ifb}")))
    }

    fn check(&self, req: &Request) -> Result<(), DriverError> {
        let shaping = shaping(req, self.clock())?;
        let prev = prev_result(req, PLUGIN)?;
        if shaping.is_empty() {
            return Ok(());
        }
        let cid = &req.env.require_attachment()?.container_id;
        let at = Attach::open(self.session, req)?;
        let nl = at.host;
        let host = host_interface(prev, &at)?;
        if let Some(want) = &shaping.ingress {
            check_root_tbf(nl, &host, want, "ingressRate")?;
        }
        if let Some(want) = &shaping.egress {
            let name = ifb_name(req.name.as_deref().unwrap_or(""), cid);
            let dev = nl
                .link_by_name(&name)
                .map_err(sys("egressRate"))?
                .ok_or_else(|| {
                    mismatch("egressRate", format!("the ifb device {name} is missing"))
                })?;
            check_root_tbf(nl, &dev, want, "egressRate")?;
            if nl
                .qdisc_at(host.index, HANDLE_INGRESS)
                .map_err(sys("egressRate"))?
                .is_none()
            {
                return Err(mismatch(
                    "egressRate",
                    format!("{} has no ingress qdisc", host.name),
                ));
            }
            let redirected = nl
                .filters(host.index, INGRESS_QDISC)
                .map_err(sys("egressRate"))?
                .iter()
                .flat_map(|f| &f.mirred)
                .any(|m| m.kind == MirredKind::EgressRedirect && m.ifindex == dev.index);
            if !redirected {
                return Err(mismatch(
                    "egressRate",
                    format!("nothing redirects what {} receives to {name}", host.name),
                ));
            }
        }
        Ok(())
    }

    // GC and STATUS are the trait's no-ops. Nothing to collect: ifb names
    // hash the network name with the container ID, so another network's
    // devices can't be told from stale ones of this network.
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const CLOCK: PschedClock = PschedClock::LINUX;

    fn request(config: Value) -> Request {
        super::super::test_support::unit_test_request(config, "")
    }

    #[test]
    fn ifb_name_is_the_references() {
        // The reference bandwidth v1.1.1 named it so for "mynet" + "ctr1".
        assert_eq!(ifb_name("mynet", "ctr1"), "bwp5145007e2a84");
        assert_eq!(ifb_name("", "").len(), 15);
    }

    #[test]
    fn tbf_arithmetic_is_the_references() {
        // 1 Mbit/s, 80000-bit burst: what the reference's qdisc shows as
        // `rate 1Mbit burst 10000b lat 25ms`.
        let t = tbf_for(1_000_000, 80_000, CLOCK).unwrap();
        assert_eq!(t.rate, 125_000);
        assert_eq!(t.buffer, 1_250_000); // 80 ms = 80000 µs * 15.625
        assert_eq!(t.limit, 3_125 + 10_000);
        // Truncations: 1234567 bits/s = 154320 B/s; 99999 bits = 12499 B.
        let t = tbf_for(1_234_567, 99_999, CLOCK).unwrap();
        assert_eq!(t.rate, 154_320);
        // 12499 / 154320 s = 80994.04 µs -> 80994 -> 1265531.25 ticks.
        assert_eq!(t.buffer, 1_265_531);
        assert_eq!(t.limit, 3_858 + 12_499);
        // Beyond 32-bit rates: 100 Gbit/s.
        let t = tbf_for(100_000_000_000, 8_000_000, CLOCK).unwrap();
        assert_eq!(t.rate, 12_500_000_000);
    }

    #[test]
    fn out_of_range_values_are_refused() {
        let burst = |r: Result<Tbf, Fault>| match r.unwrap_err() {
            Fault::Burst(why) => why,
            other => panic!("{other:?}"),
        };
        assert!(matches!(tbf_for(7, 80_000, CLOCK), Err(Fault::Rate(_))));
        assert!(burst(tbf_for(8_000, 7, CLOCK)).contains("less than one byte"));
        assert!(burst(tbf_for(8_000, 8 * u64::from(u32::MAX), CLOCK)).contains("4GB"));
        // 1 byte/s with a 1 MB bucket: a million seconds of burst.
        let why = burst(tbf_for(8, 8_000_000, CLOCK));
        assert!(why.contains("holds at most 275 s"), "{why}");
        // The limit (25 ms of traffic + burst) overflows at ~1.4 Tbit/s.
        assert!(matches!(
            tbf_for(2_000_000_000_000, 8_000, CLOCK),
            Err(Fault::Rate(_))
        ));
    }

    #[test]
    fn rate_and_burst_come_together() {
        let refused = |config: Value, key: &str| {
            let parsed = shaping(&request(config.clone()), CLOCK);
            super::super::test_support::unit_test_refused(parsed, &config, key)
        };
        let d = refused(json!({"ingressRate": 1000}), "ingressBurst");
        assert_eq!(
            d,
            "missing: ingressRate is set, so the burst must be set too"
        );
        let d = refused(json!({"egressBurst": 1000}), "egressRate");
        assert_eq!(
            d,
            "missing: egressBurst is set, so the rate must be set too"
        );
        let d = refused(
            json!({"runtimeConfig": {"bandwidth": {"egressRate": 5}}}),
            "runtimeConfig.bandwidth.egressBurst",
        );
        assert!(d.starts_with("missing"), "{d}");
        let d = refused(json!({"ingressRate": "fast"}), "ingressRate");
        assert!(d.starts_with("invalid type"), "{d}");
        let d = refused(json!({"ingressRate": -1}), "ingressRate");
        assert!(d.starts_with("invalid value"), "{d}");
        let d = refused(
            json!({"runtimeConfig": {"bandwidth": {"ingressRate": true}}}),
            "runtimeConfig.bandwidth.ingressRate",
        );
        assert!(d.starts_with("invalid type"), "{d}");
        let d = refused(
            json!({"runtimeConfig": {"bandwidth": 5}}),
            "runtimeConfig.bandwidth",
        );
        assert_eq!(d, "must be an object, got 5");
    }

    #[test]
    fn top_level_keys_win_over_the_capability() {
        let rc = json!({"bandwidth": {"ingressRate": 8_000_000, "ingressBurst": 80_000}});
        // Only the capability: it applies.
        let s = shaping(&request(json!({"runtimeConfig": rc})), CLOCK).unwrap();
        assert_eq!(s.ingress.unwrap().rate, 1_000_000);
        // Any top-level key, even a zero one, hides the capability (the
        // reference's embedded *BandwidthEntry is then non-nil).
        let s = shaping(
            &request(json!({"runtimeConfig": rc, "egressRate": 0})),
            CLOCK,
        )
        .unwrap();
        assert!(s.is_empty());
        let s = shaping(
            &request(json!({"runtimeConfig": rc, "EgressRate": 16_000, "egressBurst": 800})),
            CLOCK,
        )
        .unwrap();
        assert_eq!((s.ingress, s.egress.unwrap().rate), (None, 2_000));
        // The capability's key is matched case-insensitively too.
        let s = shaping(
            &request(
                json!({"runtimeConfig": {"Bandwidth": {"IngressRate": 8, "ingressburst": 8}}}),
            ),
            CLOCK,
        )
        .unwrap();
        assert_eq!(s.ingress.unwrap().rate, 1);
        assert!(shaping(&request(json!({})), CLOCK).unwrap().is_empty());
    }
}
