//! Traffic control over rtnetlink: the qdiscs, filters and ifb devices that
//! bandwidth shaping needs.
//!
//! - **tbf** (token bucket filter) shapes what a link transmits. The crate
//!   netlink-packet-route has no typed `tbf` options, so [`Tbf`] is encoded
//!   here as the kernel's `struct tc_tbf_qopt` (`TCA_TBF_PARMS`, plus
//!   `TCA_TBF_RATE64` for rates of 4 GiB/s and more) inside the generic NLA
//!   type of the crate, and decoded the same way from dumps.
//! - **ingress** is the hook for filters on what a link receives.
//! - a **u32 match-all filter with a mirred egress redirect** moves every
//!   received frame to another device (an ifb), where a tbf can shape it:
//!   the usual way to shape what a pod *sends*, seen from its host-side veth.
//! - **ifb** devices are created here too: they exist only to be a target of
//!   such a redirect.
//!
//! Handles are the kernel's 32-bit `major:minor` values ([`handle`]).

use std::fmt;

use netlink_packet_route::link as nl;
use netlink_packet_route::tc::{
    TcAction, TcActionAttribute, TcActionMirrorOption, TcActionOption, TcActionType, TcAttribute,
    TcFilterU32Option, TcHandle, TcHeader, TcMessage, TcMirror, TcMirrorActionType, TcOption,
    TcU32Key, TcU32Selector, TcU32SelectorFlags,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use rtnetlink::packet_core::{DefaultNla, Nla, NlasIterator};

use super::{Link, Netlink, CHANGE, CREATE};
use crate::error::{Errno, Error, Result};
use plexus_cni::names::IfName;

/// `TC_H_ROOT`: the parent of a link's root (egress) qdisc.
pub const HANDLE_ROOT: u32 = 0xffff_ffff;
/// `TC_H_INGRESS`: the parent of a link's ingress qdisc.
pub const HANDLE_INGRESS: u32 = 0xffff_fff1;
/// `ffff:`, the handle an ingress qdisc always has.
pub const INGRESS_QDISC: u32 = 0xffff_0000;
/// `ETH_P_ALL`: a filter protocol matching every frame.
pub const ETH_P_ALL: u16 = 0x0003;

/// Microseconds per second, the "time units" of tc's rate arithmetic.
pub const TIME_UNITS_PER_SEC: f64 = 1_000_000.0;

/// The handle `major:minor`.
pub const fn handle(major: u16, minor: u16) -> u32 {
    ((major as u32) << 16) | minor as u32
}

/// `major:minor` as tc prints it (`1:`, `ffff:`, `1:1`).
pub fn handle_to_string(h: u32) -> String {
    let (major, minor) = (h >> 16, h & 0xffff);
    if minor == 0 {
        format!("{major:x}:")
    } else {
        format!("{major:x}:{minor:x}")
    }
}

// tbf attributes (linux/pkt_sched.h).
const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
/// `sizeof(struct tc_tbf_qopt)`: two 12-byte `tc_ratespec`s, limit, buffer, mtu.
const TBF_QOPT_LEN: usize = 36;
const TC_LINKLAYER_ETHERNET: u8 = 1;

/// Token-bucket parameters, in the kernel's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tbf {
    /// Rate in bytes per second.
    pub rate: u64,
    /// The bucket ("burst") as the time it takes to send at `rate`, in
    /// psched ticks (see [`PschedClock`]).
    pub buffer: u32,
    /// Bytes that may wait in the queue for tokens.
    pub limit: u32,
}

impl Tbf {
    /// The `TCA_OPTIONS` attributes of a tbf qdisc with these parameters.
    fn to_options(self) -> Vec<TcOption> {
        let mut qopt = [0u8; TBF_QOPT_LEN];
        // rate: struct tc_ratespec {cell_log, linklayer, overhead, cell_align,
        // mpu, rate}; only the link layer and the (32-bit) rate are set, as tc
        // does. A rate that does not fit goes in TCA_TBF_RATE64 instead.
        qopt[1] = TC_LINKLAYER_ETHERNET;
        let rate32 = u32::try_from(self.rate).unwrap_or(u32::MAX);
        qopt[8..12].copy_from_slice(&rate32.to_ne_bytes());
        // peakrate (12..24) stays zero: no peak rate.
        qopt[24..28].copy_from_slice(&self.limit.to_ne_bytes());
        qopt[28..32].copy_from_slice(&self.buffer.to_ne_bytes());
        // mtu (32..36) stays zero: only used with a peak rate.
        let mut options = vec![TcOption::Other(DefaultNla::new(
            TCA_TBF_PARMS,
            qopt.to_vec(),
        ))];
        if self.rate > u64::from(u32::MAX) {
            options.push(TcOption::Other(DefaultNla::new(
                TCA_TBF_RATE64,
                self.rate.to_ne_bytes().to_vec(),
            )));
        }
        options
    }

    /// Decodes the nested attributes of a tbf's `TCA_OPTIONS`.
    fn from_options(nested: &[u8]) -> Option<Tbf> {
        let mut parms = None;
        let mut rate64 = None;
        for nla in NlasIterator::new(nested) {
            let nla = nla.ok()?;
            let value = nla.value();
            match nla.kind() {
                TCA_TBF_PARMS if value.len() >= TBF_QOPT_LEN => parms = Some(value.to_vec()),
                TCA_TBF_RATE64 if value.len() >= 8 => {
                    rate64 = Some(u64::from_ne_bytes(value[..8].try_into().ok()?))
                }
                _ => {}
            }
        }
        let p = parms?;
        let word = |at: usize| u32::from_ne_bytes(p[at..at + 4].try_into().expect("4 bytes"));
        Some(Tbf {
            rate: rate64.unwrap_or(u64::from(word(8))),
            limit: word(24),
            buffer: word(28),
        })
    }
}

/// The kernel's packet-scheduler clock, as `/proc/net/psched` describes it:
/// tc expresses times (a tbf's buffer) in ticks of this clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PschedClock {
    /// Ticks per microsecond.
    pub ticks_per_usec: f64,
}

impl PschedClock {
    /// What every kernel since 2.6.x reports (64 ns ticks): 15.625 ticks/µs.
    pub const LINUX: PschedClock = PschedClock {
        ticks_per_usec: 15.625,
    };

    /// Reads `/proc/net/psched` as tc and the reference plugins do, falling
    /// back to [`PschedClock::LINUX`] if it is missing or malformed.
    pub fn read() -> PschedClock {
        std::fs::read_to_string("/proc/net/psched")
            .ok()
            .and_then(|s| Self::parse(&s))
            .unwrap_or(Self::LINUX)
    }

    /// Parses the four hex words `t2us us2t clock_res hz`.
    pub fn parse(s: &str) -> Option<PschedClock> {
        let words: Vec<u64> = s
            .split_whitespace()
            .take(4)
            .map(|w| u64::from_str_radix(w, 16).ok())
            .collect::<Option<_>>()?;
        let [mut t2us, us2t, clock_res, _hz] = words[..] else {
            return None;
        };
        if us2t == 0 || clock_res == 0 {
            return None;
        }
        // iproute2's compatibility rule for a nanosecond clock resolution.
        if clock_res == 1_000_000_000 {
            t2us = us2t;
        }
        let clock_factor = clock_res as f64 / TIME_UNITS_PER_SEC;
        Some(PschedClock {
            ticks_per_usec: t2us as f64 / us2t as f64 * clock_factor,
        })
    }
}

/// A queueing discipline's type and, where decoded, its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum QdiscKind {
    Tbf(Tbf),
    Ingress,
    /// Any other kind, by name (`noqueue`, `pfifo_fast`, `fq_codel`, ...).
    Other(String),
}

/// A qdisc as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Qdisc {
    pub ifindex: u32,
    pub handle: u32,
    /// [`HANDLE_ROOT`], [`HANDLE_INGRESS`] or a class.
    pub parent: u32,
    pub kind: QdiscKind,
}

/// A mirred action: mirror or redirect to a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mirred {
    pub kind: MirredKind,
    /// The target device's index.
    pub ifindex: u32,
}

/// The four mirred actions of tc-mirred(8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirredKind {
    EgressRedirect,
    EgressMirror,
    IngressRedirect,
    IngressMirror,
}

/// A classifier (filter) as the kernel reports it. Only what plexus
/// inspects is decoded: the kind, the flow id and mirred actions.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Filter {
    pub ifindex: u32,
    pub parent: u32,
    pub handle: u32,
    pub priority: u16,
    /// Ethernet protocol in host order (`ETH_P_ALL` = 3).
    pub protocol: u16,
    /// `u32`, `matchall`, ...
    pub kind: String,
    pub classid: Option<u32>,
    pub mirred: Vec<Mirred>,
}

fn tc_header(ifindex: u32, handle: u32, parent: u32, info: u32) -> TcHeader {
    TcHeader {
        family: AddressFamily::Unspec,
        // tcm_ifindex is a C int; kernel indexes are positive ints.
        index: ifindex as i32,
        handle: TcHandle::from(handle),
        parent: TcHandle::from(parent),
        info,
    }
}

fn qdisc_message(ifindex: u32, handle: u32, parent: u32) -> TcMessage {
    TcMessage::from_parts(tc_header(ifindex, handle, parent, 0), Vec::new())
}

/// The bytes of a generic (untyped) option, as emitted on the wire.
fn nla_value(nla: &DefaultNla) -> Vec<u8> {
    let mut buf = vec![0u8; nla.value_len()];
    nla.emit_value(&mut buf);
    buf
}

impl Qdisc {
    fn from_message(m: &TcMessage) -> Option<Qdisc> {
        let mut kind = None;
        let mut options = None;
        for attr in &m.attributes {
            match attr {
                TcAttribute::Kind(k) => kind = Some(k.clone()),
                TcAttribute::Options(o) => options = Some(o),
                _ => {}
            }
        }
        let kind = match kind?.as_str() {
            "tbf" => {
                // An untyped kind's TCA_OPTIONS arrives as one generic
                // attribute holding the nested list.
                let nested = options.and_then(|o| match o.first() {
                    Some(TcOption::Other(nla)) => Some(nla_value(nla)),
                    _ => None,
                });
                match nested.as_deref().and_then(Tbf::from_options) {
                    Some(tbf) => QdiscKind::Tbf(tbf),
                    None => QdiscKind::Other("tbf".into()),
                }
            }
            "ingress" => QdiscKind::Ingress,
            other => QdiscKind::Other(other.to_string()),
        };
        Some(Qdisc {
            ifindex: u32::try_from(m.header.index).ok()?,
            handle: m.header.handle.into(),
            parent: m.header.parent.into(),
            kind,
        })
    }
}

impl Filter {
    fn from_message(m: &TcMessage) -> Option<Filter> {
        let mut f = Filter {
            ifindex: u32::try_from(m.header.index).ok()?,
            parent: m.header.parent.into(),
            handle: m.header.handle.into(),
            priority: (m.header.info >> 16) as u16,
            protocol: u16::from_be(m.header.info as u16),
            kind: String::new(),
            classid: None,
            mirred: Vec::new(),
        };
        for attr in &m.attributes {
            match attr {
                TcAttribute::Kind(k) => f.kind = k.clone(),
                TcAttribute::Options(opts) => {
                    for o in opts {
                        match o {
                            TcOption::U32(TcFilterU32Option::ClassId(h)) => {
                                f.classid = Some((*h).into())
                            }
                            TcOption::U32(TcFilterU32Option::Action(actions)) => {
                                f.mirred.extend(actions.iter().filter_map(mirred_of))
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        Some(f)
    }
}

fn mirred_of(action: &TcAction) -> Option<Mirred> {
    action.attributes.iter().find_map(|a| match a {
        TcActionAttribute::Options(opts) => opts.iter().find_map(|o| match o {
            TcActionOption::Mirror(TcActionMirrorOption::Parms(p)) => Some(Mirred {
                kind: match p.eaction {
                    TcMirrorActionType::EgressRedir => MirredKind::EgressRedirect,
                    TcMirrorActionType::EgressMirror => MirredKind::EgressMirror,
                    TcMirrorActionType::IngressRedir => MirredKind::IngressRedirect,
                    TcMirrorActionType::IngressMirror => MirredKind::IngressMirror,
                    _ => return None,
                },
                ifindex: p.ifindex,
            }),
            _ => None,
        }),
        _ => None,
    })
}

/// A u32 filter matching every frame (one key: zero mask, zero value) whose
/// only action redirects the frame to the egress of `target`; the frame is
/// consumed (`stolen`) by the redirect.
fn redirect_filter(ifindex: u32, parent: u32, priority: u16, target: u32) -> TcMessage {
    let mut selector = TcU32Selector::default();
    selector.flags = TcU32SelectorFlags::Terminal;
    selector.nkeys = 1;
    selector.keys = vec![TcU32Key::default()];

    let mut mirror = TcMirror::default();
    mirror.generic.action = TcActionType::Stolen;
    mirror.eaction = TcMirrorActionType::EgressRedir;
    mirror.ifindex = target;
    let mut action = TcAction::default();
    action.attributes = vec![
        TcActionAttribute::Kind("mirred".into()),
        TcActionAttribute::Options(vec![TcActionOption::Mirror(TcActionMirrorOption::Parms(
            mirror,
        ))]),
    ];

    // tcm_info: priority in the upper half, protocol (network order) below.
    let info = (u32::from(priority) << 16) | u32::from(ETH_P_ALL.to_be());
    TcMessage::from_parts(
        tc_header(ifindex, 0, parent, info),
        vec![
            TcAttribute::Kind("u32".into()),
            TcAttribute::Options(vec![
                TcOption::U32(TcFilterU32Option::Selector(selector)),
                TcOption::U32(TcFilterU32Option::ClassId(TcHandle::from(handle(1, 1)))),
                TcOption::U32(TcFilterU32Option::Action(vec![action])),
            ]),
        ],
    )
}

struct On<'a>(&'a str, u32);

impl fmt::Display for On<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on link index {}", self.0, self.1)
    }
}

impl Netlink {
    /// The qdiscs of link `ifindex` (root, ingress and any others), in the
    /// kernel's order.
    pub fn qdiscs(&self, ifindex: u32) -> Result<Vec<Qdisc>> {
        // The kernel dumps the qdiscs of every link; keep this one's.
        let msg = qdisc_message(ifindex, 0, 0);
        self.dump(
            "list qdiscs",
            &format_args!("of link index {ifindex}"),
            RouteNetlinkMessage::GetQueueDiscipline(msg),
            |r| match r {
                RouteNetlinkMessage::NewQueueDiscipline(m) => {
                    Qdisc::from_message(m).filter(|q| q.ifindex == ifindex)
                }
                _ => None,
            },
        )
    }

    /// The qdisc attached at `parent` ([`HANDLE_ROOT`], [`HANDLE_INGRESS`])
    /// of link `ifindex`, if any.
    pub fn qdisc_at(&self, ifindex: u32, parent: u32) -> Result<Option<Qdisc>> {
        Ok(self
            .qdiscs(ifindex)?
            .into_iter()
            .find(|q| q.parent == parent))
    }

    /// Adds a tbf qdisc with `handle` as the root qdisc of link `ifindex`
    /// (`tc qdisc add dev X root handle H tbf ...`). Fails with EEXIST if the
    /// link already has a root qdisc of its own.
    pub fn add_root_tbf(&self, ifindex: u32, handle: u32, tbf: &Tbf) -> Result<()> {
        if tbf.rate == 0 || tbf.buffer == 0 {
            return Err(Error::invalid(
                "tbf parameters",
                format!("{tbf:?}"),
                "rate and buffer must be positive",
            ));
        }
        self.add_qdisc(
            "add tbf qdisc",
            On("root", ifindex),
            (handle, HANDLE_ROOT),
            vec![
                TcAttribute::Kind("tbf".into()),
                TcAttribute::Options(tbf.to_options()),
            ],
        )
    }

    /// Adds the ingress qdisc (`ffff:`) to link `ifindex`, the hook for
    /// filters on what it receives.
    pub fn add_ingress_qdisc(&self, ifindex: u32) -> Result<()> {
        self.add_qdisc(
            "add ingress qdisc",
            On("ingress", ifindex),
            (INGRESS_QDISC, HANDLE_INGRESS),
            vec![TcAttribute::Kind("ingress".into())],
        )
    }

    /// Adds the qdisc `attributes` describe, with its `(handle, parent)`, to
    /// the link `at` names.
    fn add_qdisc(
        &self,
        op: &'static str,
        at: On<'_>,
        (handle, parent): (u32, u32),
        attributes: Vec<TcAttribute>,
    ) -> Result<()> {
        let ifindex = at.1;
        let mut msg = qdisc_message(ifindex, handle, parent);
        msg.attributes = attributes;
        self.request(
            op,
            &at,
            RouteNetlinkMessage::NewQueueDiscipline(msg),
            CREATE,
        )
        .map(drop)
        .map_err(|e| self.name_link(e, ifindex))
    }

    /// Deletes the qdisc at `parent` ([`HANDLE_ROOT`] or [`HANDLE_INGRESS`])
    /// of link `ifindex`, with its filters; `Ok(false)` if there was none
    /// (or only the kernel's default one) or the link is gone.
    pub fn del_qdisc(&self, ifindex: u32, parent: u32) -> Result<bool> {
        let msg = qdisc_message(ifindex, 0, parent);
        match self.request(
            "delete qdisc",
            &On(&handle_to_string(parent), ifindex),
            RouteNetlinkMessage::DelQueueDiscipline(msg),
            CHANGE,
        ) {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.errno(), Some(Errno::ENOENT | Errno::ENODEV)) => Ok(false),
            Err(e) => Err(self.name_link(e, ifindex)),
        }
    }

    /// Adds, under qdisc `parent` of link `ifindex`, a u32 filter of
    /// `priority` that matches every frame and redirects it to the egress of
    /// link `target` (`tc filter add dev X parent P protocol all prio N u32
    /// match u32 0 0 flowid 1:1 action mirred egress redirect dev T`).
    pub fn add_redirect_filter(
        &self,
        ifindex: u32,
        parent: u32,
        priority: u16,
        target: u32,
    ) -> Result<()> {
        let msg = redirect_filter(ifindex, parent, priority, target);
        self.request(
            "add redirect filter",
            &format_args!(
                "on link index {ifindex} (parent {}, to link index {target})",
                handle_to_string(parent)
            ),
            RouteNetlinkMessage::NewTrafficFilter(msg),
            CREATE,
        )
        .map(drop)
        .map_err(|e| self.name_link(e, ifindex))
    }

    /// The filters under qdisc `parent` of link `ifindex` (for a u32 filter
    /// the kernel also lists its hash table entries, which carry no actions).
    pub fn filters(&self, ifindex: u32, parent: u32) -> Result<Vec<Filter>> {
        let msg = TcMessage::from_parts(tc_header(ifindex, 0, parent, 0), Vec::new());
        self.dump(
            "list filters",
            &On(&handle_to_string(parent), ifindex),
            RouteNetlinkMessage::GetTrafficFilter(msg),
            |r| match r {
                RouteNetlinkMessage::NewTrafficFilter(m) => Filter::from_message(m),
                _ => None,
            },
        )
    }

    /// Creates an ifb device (an "intermediate functional block": what is
    /// redirected to it is shaped by its root qdisc and then dropped back
    /// into the stack where it came from), up, with `mtu`.
    pub fn create_ifb(&self, name: &IfName, mtu: Option<u32>) -> Result<Link> {
        let mut msg = nl::LinkMessage::default();
        msg.header.flags = nl::LinkFlags::Up;
        msg.header.change_mask = nl::LinkFlags::Up;
        msg.attributes
            .push(nl::LinkAttribute::IfName(name.to_string()));
        msg.attributes
            .push(nl::LinkAttribute::LinkInfo(vec![nl::LinkInfo::Kind(
                nl::InfoKind::Ifb,
            )]));
        if let Some(mtu) = mtu {
            msg.attributes.push(nl::LinkAttribute::Mtu(mtu));
        }
        self.request(
            "create ifb",
            name,
            RouteNetlinkMessage::NewLink(msg),
            CREATE,
        )?;
        self.link_by_name(name)?.ok_or_else(|| Error::Netlink {
            op: "create ifb",
            object: name.to_string(),
            reason: "the new link vanished right after creation".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use rtnetlink::packet_core::Emitable;

    use super::*;

    fn emitted(options: &[TcOption]) -> Vec<u8> {
        let mut buf = vec![0u8; options.buffer_len()];
        options.emit(&mut buf);
        buf
    }

    #[test]
    fn tbf_options_are_a_tc_tbf_qopt() {
        let tbf = Tbf {
            rate: 125_000,
            buffer: 1_250_000,
            limit: 13_125,
        };
        let bytes = emitted(&tbf.to_options());
        // One attribute: len 40 = 4 header + 36 struct, type TCA_TBF_PARMS.
        let mut want = Vec::new();
        want.extend_from_slice(&40u16.to_ne_bytes());
        want.extend_from_slice(&TCA_TBF_PARMS.to_ne_bytes());
        // rate: cell_log 0, linklayer ethernet, overhead 0, cell_align 0,
        // mpu 0, rate.
        want.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&125_000u32.to_ne_bytes());
        want.extend_from_slice(&[0; 12]); // peakrate
        want.extend_from_slice(&13_125u32.to_ne_bytes());
        want.extend_from_slice(&1_250_000u32.to_ne_bytes());
        want.extend_from_slice(&0u32.to_ne_bytes()); // mtu
        assert_eq!(bytes, want);
        assert_eq!(Tbf::from_options(&bytes), Some(tbf));
    }

    #[test]
    fn tbf_rates_beyond_32_bits_use_rate64() {
        let tbf = Tbf {
            rate: 5 << 32,
            buffer: 100,
            limit: 1000,
        };
        let bytes = emitted(&tbf.to_options());
        assert_eq!(bytes.len(), 40 + 12);
        // The 32-bit field saturates, as tc sets it.
        assert_eq!(&bytes[12..16], &u32::MAX.to_ne_bytes());
        assert_eq!(&bytes[40..42], &12u16.to_ne_bytes());
        assert_eq!(&bytes[42..44], &TCA_TBF_RATE64.to_ne_bytes());
        assert_eq!(&bytes[44..52], &(5u64 << 32).to_ne_bytes());
        assert_eq!(Tbf::from_options(&bytes), Some(tbf));
    }

    #[test]
    fn tbf_decoding_tolerates_garbage() {
        assert_eq!(Tbf::from_options(&[]), None);
        assert_eq!(Tbf::from_options(&[1, 2, 3]), None);
        // A PARMS attribute that is too short is ignored.
        let mut short = Vec::new();
        short.extend_from_slice(&8u16.to_ne_bytes());
        short.extend_from_slice(&TCA_TBF_PARMS.to_ne_bytes());
        short.extend_from_slice(&[0; 4]);
        assert_eq!(Tbf::from_options(&short), None);
    }

    #[test]
    fn psched_clock() {
        let c = PschedClock::parse("000003e8 00000040 000f4240 3b9aca00\n").unwrap();
        assert_eq!(c, PschedClock::LINUX);
        // Nanosecond clock resolution: iproute2's compatibility rule.
        let c = PschedClock::parse("000003e8 00000040 3b9aca00 3b9aca00").unwrap();
        assert_eq!(c.ticks_per_usec, 1000.0);
        for bad in ["", "1 2 3", "zz 40 f4240 1", "3e8 0 f4240 1"] {
            assert_eq!(PschedClock::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn handles() {
        assert_eq!(handle(1, 0), 0x1_0000);
        assert_eq!(handle(0xffff, 0), INGRESS_QDISC);
        assert_eq!(handle_to_string(handle(1, 0)), "1:");
        assert_eq!(handle_to_string(handle(1, 1)), "1:1");
        assert_eq!(handle_to_string(HANDLE_INGRESS), "ffff:fff1");
    }

    #[test]
    fn redirect_filter_round_trips() {
        let msg = redirect_filter(7, INGRESS_QDISC, 1, 9);
        assert_eq!(msg.header.info, 0x0001_0300);
        let f = Filter::from_message(&msg).unwrap();
        assert_eq!(f.kind, "u32");
        assert_eq!((f.ifindex, f.parent, f.priority), (7, INGRESS_QDISC, 1));
        assert_eq!(f.protocol, ETH_P_ALL);
        assert_eq!(f.classid, Some(handle(1, 1)));
        assert_eq!(
            f.mirred,
            vec![Mirred {
                kind: MirredKind::EgressRedirect,
                ifindex: 9
            }]
        );
    }
}
