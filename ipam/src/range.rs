//! Address ranges and range sets as host-local defines them, with its
//! defaults and its allocation order.
//!
//! A range is `{subnet, rangeStart, rangeEnd, gateway}`; a range set is a
//! list of ranges of one address family from which exactly one address is
//! allocated. Defaults (as the reference's `Range.Canonicalize`): gateway =
//! the subnet's first address (`.1`), rangeStart = `.1` as well (the gateway
//! is skipped when allocating, not excluded from the range), rangeEnd = the
//! last address, minus the broadcast address for IPv4.

use crate::error::IpamError;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;

use crate::common::{parse_ip, IpRangeConf};

/// An address as an integer, to walk ranges.
pub(crate) fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The address of `family` with integer value `v` (truncated for IPv4).
pub(crate) fn from_u128(v: u128, v4: bool) -> IpAddr {
    if v4 {
        IpAddr::V4(Ipv4Addr::from(v as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(v))
    }
}

fn family(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}

/// One validated range with every default filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Range {
    /// The subnet, host bits clear.
    pub subnet: IpNetwork,
    /// First allocatable address, inclusive.
    pub start: IpAddr,
    /// Last allocatable address, inclusive.
    pub end: IpAddr,
    /// Never allocated; returned as the gateway of addresses from this range.
    pub gateway: IpAddr,
    /// Where the range was configured, for errors (`ipam.ranges[0][1]`).
    pub path: String,
}

impl Range {
    /// Validate one configured range and fill in the defaults. `path` is the
    /// range's place in the configuration; a legacy single range (fields
    /// directly in `ipam`) has path `ipam`.
    pub fn from_conf(conf: &IpRangeConf, path: &str) -> Result<Range, IpamError> {
        let field = |name: &str| format!("{path}.{name}");
        let subnet_s = conf
            .subnet
            .as_deref()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                IpamError::config(field("subnet"), "missing: every range needs a subnet")
            })?;
        let subnet = plexus_cni::result::parse_cidr(subnet_s).map_err(|_| {
            IpamError::config(
                field("subnet"),
                format!("{subnet_s:?} is not a subnet in CIDR notation (like \"10.1.0.0/16\")"),
            )
        })?;
        let max = if subnet.is_ipv4() { 32 } else { 128 };
        // The reference's rule and message (cni-SPEC §5 cites it): /31, /32,
        // /127 and /128 leave nothing to allocate.
        if subnet.prefix() > max - 2 {
            return Err(IpamError::config(
                field("subnet"),
                format!("Network {subnet} too small to allocate from"),
            ));
        }
        let network = subnet.network();
        if network != subnet.ip() {
            return Err(IpamError::config(
                field("subnet"),
                format!(
                    "{subnet} has host bits set; the network address for a /{} is {network}",
                    subnet.prefix()
                ),
            ));
        }
        let subnet = IpNetwork::new(network, subnet.prefix()).expect("prefix already valid");
        let v4 = subnet.is_ipv4();
        let first = from_u128(to_u128(network) + 1, v4);
        let last = {
            let broadcast = to_u128(subnet.broadcast());
            from_u128(if v4 { broadcast - 1 } else { broadcast }, v4)
        };

        let inside = |name: &str, value: &Option<String>| -> Result<Option<IpAddr>, IpamError> {
            let Some(ip) = parse_ip(value.as_deref(), &field(name))? else {
                return Ok(None);
            };
            if ip.is_ipv4() != v4 {
                return Err(IpamError::config(
                    field(name),
                    format!(
                        "{ip} is an {} address, the subnet {subnet} is {}",
                        family(ip),
                        family(network)
                    ),
                ));
            }
            if !subnet.contains(ip) {
                return Err(IpamError::config(
                    field(name),
                    format!("{ip} is not in the subnet {subnet}"),
                ));
            }
            Ok(Some(ip))
        };
        let gateway = inside("gateway", &conf.gateway)?.unwrap_or(first);
        let start = inside("rangeStart", &conf.range_start)?.unwrap_or(first);
        let end_given = inside("rangeEnd", &conf.range_end)?;
        let end = end_given.unwrap_or(last);
        if to_u128(start) > to_u128(end) {
            let which = if end_given.is_some() {
                format!("rangeEnd {end}")
            } else {
                format!("the default rangeEnd {end} (the last usable address of {subnet})")
            };
            return Err(IpamError::config(
                field("rangeStart"),
                format!("{start} is after {which}"),
            ));
        }
        Ok(Range {
            subnet,
            start,
            end,
            gateway,
            path: path.to_string(),
        })
    }

    pub fn is_ipv4(&self) -> bool {
        self.subnet.is_ipv4()
    }

    /// Whether `ip` is allocatable from this range (the gateway included:
    /// callers skip it).
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.is_ipv4()
            && (to_u128(self.start)..=to_u128(self.end)).contains(&to_u128(ip))
    }

    pub fn overlaps(&self, other: &Range) -> bool {
        self.is_ipv4() == other.is_ipv4()
            && to_u128(self.start) <= to_u128(other.end)
            && to_u128(other.start) <= to_u128(self.end)
    }

    /// The number of addresses this range can hand out.
    pub fn capacity(&self) -> u128 {
        let size = (to_u128(self.end) - to_u128(self.start)).saturating_add(1);
        size - u128::from(self.contains(self.gateway))
    }

    /// `ip` with this range's prefix length, as the result reports it.
    pub fn address(&self, ip: IpAddr) -> IpNetwork {
        IpNetwork::new(ip, self.subnet.prefix()).expect("same family as the subnet")
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

/// The ranges one address is allocated from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RangeSet {
    pub ranges: Vec<Range>,
    /// Where the set was configured (`ipam.ranges[1]`, `ipam` for the legacy
    /// single range, `runtimeConfig.ipRanges[0]`).
    pub path: String,
}

impl RangeSet {
    /// Validate a configured set: not empty, one family, no overlaps.
    /// `range_path(j)` names range `j`.
    pub fn from_confs(
        confs: &[IpRangeConf],
        path: &str,
        range_path: impl Fn(usize) -> String,
    ) -> Result<RangeSet, IpamError> {
        if confs.is_empty() {
            return Err(IpamError::config(
                path,
                "empty range set: a range set needs at least one range",
            ));
        }
        let mut ranges: Vec<Range> = Vec::with_capacity(confs.len());
        for (j, conf) in confs.iter().enumerate() {
            let r = Range::from_conf(conf, &range_path(j))?;
            if let Some(first) = ranges.first() {
                if first.is_ipv4() != r.is_ipv4() {
                    return Err(IpamError::config(
                        format!("{}.subnet", r.path),
                        format!(
                            "{} is {}, but {} is {}: the ranges of a set must be of one address family",
                            r.subnet,
                            family(r.subnet.ip()),
                            first.path,
                            family(first.subnet.ip())
                        ),
                    ));
                }
            }
            if let Some(other) = ranges.iter().find(|o| o.overlaps(&r)) {
                return Err(IpamError::config(
                    &r.path,
                    format!("range {r} overlaps with {} ({other})", other.path),
                ));
            }
            ranges.push(r);
        }
        Ok(RangeSet {
            ranges,
            path: path.to_string(),
        })
    }

    pub fn range_for(&self, ip: IpAddr) -> Option<&Range> {
        self.ranges.iter().find(|r| r.contains(ip))
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.range_for(ip).is_some()
    }

    /// The first pair of ranges (one from each set) that overlap.
    pub fn overlap_with<'a>(&'a self, other: &'a RangeSet) -> Option<(&'a Range, &'a Range)> {
        self.ranges
            .iter()
            .find_map(|a| other.ranges.iter().find(|b| a.overlaps(b)).map(|b| (a, b)))
    }

    pub fn capacity(&self) -> u128 {
        self.ranges
            .iter()
            .fold(0u128, |n, r| n.saturating_add(r.capacity()))
    }

    /// Candidate addresses in the reference's round-robin order: from the
    /// address after `last` (the last one reserved, if it is in the set)
    /// through the end of its range, then on through the following ranges,
    /// wrapping around, back to `last` itself; from the first range's start
    /// when there is no usable `last`. Gateways are skipped. Every candidate
    /// comes once, so the walk is bounded by the set's size.
    pub fn candidates(&self, last: Option<IpAddr>) -> Candidates<'_> {
        let start = last
            .and_then(|ip| {
                let idx = self.ranges.iter().position(|r| r.contains(ip))?;
                Some(self.successor(idx, to_u128(ip)))
            })
            .unwrap_or((0, to_u128(self.ranges[0].start)));
        Candidates {
            set: self,
            pos: start,
            left: self.ranges.iter().fold(0u128, |n, r| {
                n.saturating_add((to_u128(r.end) - to_u128(r.start)).saturating_add(1))
            }),
        }
    }

    /// The position after `(idx, v)`: the next address, or the start of the
    /// next range (wrapping) after a range's end.
    fn successor(&self, idx: usize, v: u128) -> (usize, u128) {
        if v >= to_u128(self.ranges[idx].end) {
            let next = (idx + 1) % self.ranges.len();
            (next, to_u128(self.ranges[next].start))
        } else {
            (idx, v + 1)
        }
    }
}

impl fmt::Display for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// See [`RangeSet::candidates`].
pub(crate) struct Candidates<'a> {
    set: &'a RangeSet,
    pos: (usize, u128),
    /// Positions not yet visited (gateways included).
    left: u128,
}

impl<'a> Iterator for Candidates<'a> {
    type Item = (&'a Range, IpAddr);

    fn next(&mut self) -> Option<Self::Item> {
        while self.left > 0 {
            self.left -= 1;
            let (idx, v) = self.pos;
            self.pos = self.set.successor(idx, v);
            let range = &self.set.ranges[idx];
            let ip = from_u128(v, range.is_ipv4());
            if ip != range.gateway {
                return Some((range, ip));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(subnet: &str) -> IpRangeConf {
        IpRangeConf {
            subnet: Some(subnet.into()),
            ..IpRangeConf::default()
        }
    }

    fn range(
        subnet: &str,
        start: Option<&str>,
        end: Option<&str>,
        gw: Option<&str>,
    ) -> Result<Range, IpamError> {
        let c = IpRangeConf {
            subnet: Some(subnet.into()),
            range_start: start.map(Into::into),
            range_end: end.map(Into::into),
            gateway: gw.map(Into::into),
        };
        Range::from_conf(&c, "ipam.ranges[0][0]")
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn defaults_follow_the_reference() {
        // host-local: gateway .1, rangeStart .1 (the gateway is skipped when
        // allocating), rangeEnd the last address but the IPv4 broadcast.
        let r = Range::from_conf(&conf("10.1.2.0/24"), "ipam").unwrap();
        assert_eq!(
            (r.gateway, r.start, r.end),
            (ip("10.1.2.1"), ip("10.1.2.1"), ip("10.1.2.254"))
        );
        assert_eq!(r.capacity(), 253);
        assert_eq!(r.to_string(), "10.1.2.1-10.1.2.254");
        let r = Range::from_conf(&conf("fd00::/120"), "ipam").unwrap();
        assert_eq!(
            (r.gateway, r.start, r.end),
            (ip("fd00::1"), ip("fd00::1"), ip("fd00::ff"))
        );
        // A /30 has two usable addresses, one of them the gateway.
        let r = Range::from_conf(&conf("10.0.0.0/30"), "ipam").unwrap();
        assert_eq!(
            (r.start, r.end, r.capacity()),
            (ip("10.0.0.1"), ip("10.0.0.2"), 1)
        );
        // A gateway outside the range does not reduce it.
        let r = range("10.0.0.0/24", Some("10.0.0.10"), Some("10.0.0.19"), None).unwrap();
        assert_eq!(r.capacity(), 10);
    }

    #[test]
    fn bad_ranges_name_the_field() {
        let d = |r: Result<Range, IpamError>| config_details(r.unwrap_err());
        assert_eq!(
            d(range("192.168.0.0/31", None, None, None)),
            "ipam.ranges[0][0].subnet: Network 192.168.0.0/31 too small to allocate from"
        );
        assert_eq!(
            d(range("fd00::/127", None, None, None)),
            "ipam.ranges[0][0].subnet: Network fd00::/127 too small to allocate from"
        );
        assert_eq!(
            d(range("10.0.0.1/24", None, None, None)),
            "ipam.ranges[0][0].subnet: 10.0.0.1/24 has host bits set; the network address for a /24 is 10.0.0.0"
        );
        assert!(d(range("10.0.0.0", None, None, None))
            .starts_with("ipam.ranges[0][0].subnet: \"10.0.0.0\" is not a subnet in CIDR"));
        assert_eq!(
            d(range("10.0.0.0/24", Some("10.0.1.5"), None, None)),
            "ipam.ranges[0][0].rangeStart: 10.0.1.5 is not in the subnet 10.0.0.0/24"
        );
        assert_eq!(
            d(range("10.0.0.0/24", None, Some("10.0.1.5"), None)),
            "ipam.ranges[0][0].rangeEnd: 10.0.1.5 is not in the subnet 10.0.0.0/24"
        );
        assert_eq!(
            d(range("10.0.0.0/24", None, None, Some("10.9.0.1"))),
            "ipam.ranges[0][0].gateway: 10.9.0.1 is not in the subnet 10.0.0.0/24"
        );
        assert_eq!(
            d(range("10.0.0.0/24", None, None, Some("fd00::1"))),
            "ipam.ranges[0][0].gateway: fd00::1 is an IPv6 address, the subnet 10.0.0.0/24 is IPv4"
        );
        assert_eq!(
            d(range(
                "10.0.0.0/24",
                Some("10.0.0.9"),
                Some("10.0.0.5"),
                None
            )),
            "ipam.ranges[0][0].rangeStart: 10.0.0.9 is after rangeEnd 10.0.0.5"
        );
        assert!(
            d(range("10.0.0.0/24", Some("10.0.0.255"), None, None)).starts_with(
                "ipam.ranges[0][0].rangeStart: 10.0.0.255 is after the default rangeEnd 10.0.0.254"
            )
        );
        assert_eq!(
            d(range("10.0.0.0/24", Some("nope"), None, None)),
            "ipam.ranges[0][0].rangeStart: \"nope\" is not an IP address"
        );
        let e = Range::from_conf(&IpRangeConf::default(), "ipam").unwrap_err();
        assert_eq!(
            config_details(e),
            "ipam.subnet: missing: every range needs a subnet"
        );
    }

    /// `field: reason` of a configuration error; any other variant fails.
    fn config_details(e: IpamError) -> String {
        assert!(matches!(e, IpamError::Config { .. }), "{e:?}");
        e.to_string()
    }

    fn set(ranges: &[(&str, Option<&str>, Option<&str>)]) -> Result<RangeSet, IpamError> {
        let confs: Vec<IpRangeConf> = ranges
            .iter()
            .map(|(s, a, b)| IpRangeConf {
                subnet: Some(s.to_string()),
                range_start: a.map(Into::into),
                range_end: b.map(Into::into),
                gateway: None,
            })
            .collect();
        RangeSet::from_confs(&confs, "ipam.ranges[0]", |j| format!("ipam.ranges[0][{j}]"))
    }

    #[test]
    fn sets_reject_overlap_mixed_families_and_emptiness() {
        assert_eq!(
            config_details(set(&[]).unwrap_err()),
            "ipam.ranges[0]: empty range set: a range set needs at least one range"
        );
        assert_eq!(
            config_details(set(&[("10.0.0.0/24", None, None), ("10.0.0.0/16", Some("10.0.0.200"), Some("10.0.1.5"))]).unwrap_err()),
            "ipam.ranges[0][1]: range 10.0.0.200-10.0.1.5 overlaps with ipam.ranges[0][0] (10.0.0.1-10.0.0.254)"
        );
        assert!(config_details(
            set(&[("10.0.0.0/24", None, None), ("fd00::/64", None, None)]).unwrap_err()
        )
        .starts_with("ipam.ranges[0][1].subnet: fd00::/64 is IPv6, but ipam.ranges[0][0] is IPv4"));
        // Same subnet, disjoint ranges: fine.
        let s = set(&[
            ("10.0.0.0/24", Some("10.0.0.10"), Some("10.0.0.19")),
            ("10.0.0.0/24", Some("10.0.0.20"), Some("10.0.0.29")),
        ])
        .unwrap();
        assert_eq!(s.to_string(), "10.0.0.10-10.0.0.19,10.0.0.20-10.0.0.29");
        assert_eq!(s.capacity(), 20);
    }

    fn walk(s: &RangeSet, last: Option<&str>) -> Vec<String> {
        s.candidates(last.map(ip))
            .map(|(_, a)| a.to_string())
            .collect()
    }

    #[test]
    fn candidates_round_robin_and_wrap() {
        let s = set(&[
            ("10.0.0.0/29", None, None),                         // .1 gw, .2-.6
            ("10.0.1.0/24", Some("10.0.1.5"), Some("10.0.1.6")), // gw .1 outside
        ])
        .unwrap();
        assert_eq!(
            walk(&s, None),
            ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.1.5", "10.0.1.6"]
        );
        // After the last reserved one, wrapping back to it.
        assert_eq!(
            walk(&s, Some("10.0.0.5")),
            ["10.0.0.6", "10.0.1.5", "10.0.1.6", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"]
        );
        assert_eq!(
            walk(&s, Some("10.0.1.6")),
            ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.1.5", "10.0.1.6"]
        );
        // A last IP outside the set (config changed) restarts at the start.
        assert_eq!(walk(&s, Some("10.9.9.9")), walk(&s, None));
        // Just before the gateway: the gateway is skipped, not the end.
        let s = set(&[("10.0.0.0/30", None, None)]).unwrap();
        assert_eq!(walk(&s, Some("10.0.0.2")), ["10.0.0.2"]);
        assert_eq!(walk(&s, None), ["10.0.0.2"]);
    }

    #[test]
    fn huge_ipv6_sets_are_walked_lazily() {
        let s = set(&[("fd00::/64", None, None)]).unwrap();
        let first: Vec<String> = s
            .candidates(Some(ip("fd00::ffff:ffff:ffff:ffff")))
            .take(2)
            .map(|(_, a)| a.to_string())
            .collect();
        assert_eq!(first, ["fd00::2", "fd00::3"]);
        assert_eq!(s.capacity(), (1u128 << 64) - 2);
        let s = set(&[("::/0", None, None)]).unwrap();
        assert_eq!(s.capacity(), u128::MAX - 1);
        assert_eq!(s.candidates(None).next().map(|(_, a)| a), Some(ip("::2")));
    }
}
