//! whereabouts' objects on the API server (`whereabouts.cni.cncf.io/v1alpha1`,
//! its `pkg/api` at 467b3c28): their wire form, names and offset encoding,
//! byte for byte where whereabouts reads them.
//!
//! - An `IPPool` is named after its range in network form with `:` and `/`
//!   turned into `-` (`10.77.0.0-24`, `fd77---64`), after
//!   `<network_name>-` and, with node slices, `<node>-`
//!   (`IPPoolName`). Its `spec.allocations` are keyed by the decimal offset
//!   of the address from the range's network address.
//! - An `OverlappingRangeIPReservation` is named after the address, `:`
//!   turned into `-` (`NormalizeIP`), after `<network_name>-`.
//! - A `NodeSlicePool` is named after `network_name`, else the network's
//!   `name`; its `status.allocations` say which node has which slice.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use plexus_cni::names::{empty_is_none, ContainerId, IfName};
use serde::{Deserialize, Serialize};

use crate::range::{from_u128, to_u128};

/// The API group and version of whereabouts' objects.
pub const GROUP: &str = "whereabouts.cni.cncf.io";
pub const VERSION: &str = "v1alpha1";

/// The namespace whereabouts keeps its objects in when the kubeconfig's
/// context names none (`wbNamespaceFromCtx`).
pub const DEFAULT_NAMESPACE: &str = "kube-system";

/// One holder of an address: `spec.allocations[offset]` of an IPPool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// `CNI_CONTAINERID` of the sandbox that holds it (checked as read).
    #[serde(rename = "id")]
    pub container_id: ContainerId,
    /// `<namespace>/<pod>`.
    pub podref: String,
    /// Empty (or left out) by whereabouts versions that did not write it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "empty_is_none"
    )]
    pub ifname: Option<IfName>,
}

impl Allocation {
    /// Whether this is the attachment `podref`/`ifname`'s: whereabouts hands
    /// a pod's interface the address it already holds (`AssignIP`).
    pub fn is_of(&self, podref: &str, ifname: &IfName) -> bool {
        self.podref == podref && self.is_on(ifname)
    }

    /// Whether the entry names interface `ifname`.
    pub fn is_on(&self, ifname: &IfName) -> bool {
        self.ifname.as_ref() == Some(ifname)
    }
}

/// `spec` of an IPPool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolSpec {
    pub range: String,
    /// By offset. whereabouts writes decimal strings; one that is not a
    /// number is kept (and its address treated as taken by nobody plexus
    /// knows, never handed out) rather than dropped.
    #[serde(default)]
    pub allocations: BTreeMap<String, Allocation>,
}

/// `spec` of an OverlappingRangeIPReservation.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationSpec {
    #[serde(default, rename = "containerid", with = "empty_is_none")]
    pub container_id: Option<ContainerId>,
    pub podref: String,
    #[serde(default, with = "empty_is_none")]
    pub ifname: Option<IfName>,
}

/// `spec` and `status` of a NodeSlicePool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSliceSpec {
    pub range: String,
    #[serde(rename = "sliceSize")]
    pub slice_size: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSliceStatus {
    #[serde(default)]
    pub allocations: Vec<NodeSliceAllocation>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSliceAllocation {
    #[serde(rename = "nodeName")]
    pub node_name: String,
    #[serde(rename = "sliceRange")]
    pub slice_range: String,
}

/// `node_slice_size`: the prefix length of each node's slice (`/28` or
/// `28`), as whereabouts' `DivideRangeBySize` reads it, and its text as
/// given (whereabouts writes it so to a NodeSlicePool's `spec.sliceSize`
/// and compares it as text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceSize {
    pub prefix: u8,
    pub text: String,
}

impl SliceSize {
    pub fn parse(s: &str) -> Result<SliceSize, String> {
        let digits = s.strip_prefix('/').unwrap_or(s);
        match digits.parse::<u8>() {
            Ok(prefix) if prefix <= 128 => Ok(SliceSize {
                prefix,
                text: s.to_string(),
            }),
            _ => Err(format!(
                "{s:?} is not a prefix length (like \"/28\" or \"28\")"
            )),
        }
    }
}

/// The most slices a range is cut into: each is an entry of one object's
/// status, which etcd stores whole (a /8 cut into /24s, 65,536 entries,
/// is past its 1.5 MB limit).
pub const MAX_SLICES: u128 = 4096;

impl SliceSize {
    /// Whether `range` can be cut into slices of this size: a slice no
    /// larger than the range, with a usable address left besides its
    /// network and broadcast addresses, and at most [`MAX_SLICES`] of them.
    pub fn check(&self, range: IpNetwork) -> Result<(), String> {
        let size = self;
        let bits = if range.is_ipv4() { 32 } else { 128 };
        let prefix = size.prefix;
        if prefix < range.prefix() {
            return Err(format!(
                "{} is wider than the range {} it slices",
                size.text,
                range_text(range)
            ));
        }
        if prefix > bits - 2 {
            return Err(format!(
                "{} leaves a slice no usable address (at most /{} here)",
                size.text,
                bits - 2
            ));
        }
        let count = 1u128.checked_shl(u32::from(prefix - range.prefix()));
        if count.is_none_or(|n| n > MAX_SLICES) {
            return Err(format!(
                "{} cuts {} into more than {MAX_SLICES} slices (a NodeSlicePool holds them all)",
                size.text,
                range_text(range)
            ));
        }
        Ok(())
    }
}

/// The text of `network` as Go's `net.IPNet.String()` writes it, which is
/// also what whereabouts' config normalises `range` to.
pub fn range_text(network: IpNetwork) -> String {
    format!("{}/{}", network.network(), network.prefix())
}

/// `:` and `/` turned into `-`, a trailing `:` completed with `0` first
/// (`normalizeRange`, `NormalizeIP`).
fn normalize(text: &str) -> String {
    let mut text = text.to_string();
    if text.ends_with(':') {
        text.push('0');
    }
    text.replace([':', '/'], "-")
}

/// The IPPool of `range` (`IPPoolName`): `[<network_name>-][<node>-]<range>`.
pub fn pool_name(range: IpNetwork, network_name: Option<&str>, node: Option<&str>) -> String {
    let mut name = String::new();
    for part in [network_name, node].into_iter().flatten() {
        name.push_str(part);
        name.push('-');
    }
    name.push_str(&normalize(&range_text(range)));
    name
}

/// The OverlappingRangeIPReservation of `ip` (`NormalizeIP`).
pub fn reservation_name(ip: IpAddr, network_name: Option<&str>) -> String {
    let address = normalize(&ip.to_string());
    match network_name {
        Some(n) => format!("{n}-{address}"),
        None => address,
    }
}

/// The key of `ip` in the allocations of the pool of `range`: its decimal
/// offset from the network address.
pub fn offset_key(range: IpNetwork, ip: IpAddr) -> String {
    (to_u128(ip) - to_u128(range.network())).to_string()
}

/// The address at the allocation key `key` of the pool of `range`; `None`
/// for a key that is no offset within it.
pub fn address_at(range: IpNetwork, key: &str) -> Option<IpAddr> {
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let offset: u128 = key.parse().ok()?;
    let base = to_u128(range.network());
    let ip = from_u128(base.checked_add(offset)?, range.is_ipv4());
    range.contains(ip).then_some(ip)
}

/// Whether whereabouts can read the key of an offset: it parses keys as
/// signed 64-bit integers and skips any other, so an address at a larger
/// offset (IPv6 ranges wider than /65) would look free to it.
pub fn whereabouts_can_read(offset: u128) -> bool {
    offset <= i64::MAX as u128
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNetwork {
        s.parse().unwrap()
    }

    #[test]
    fn names_as_whereabouts_writes_them() {
        // IPPoolName and normalizeRange (pkg/storage/kubernetes/ipam.go).
        assert_eq!(pool_name(net("10.77.0.0/24"), None, None), "10.77.0.0-24");
        assert_eq!(pool_name(net("fd77::/64"), None, None), "fd77---64");
        assert_eq!(
            pool_name(net("10.77.0.0/24"), Some("blue"), None),
            "blue-10.77.0.0-24"
        );
        assert_eq!(
            pool_name(net("10.77.0.0/28"), Some("blue"), Some("node-1")),
            "blue-node-1-10.77.0.0-28"
        );
        assert_eq!(
            pool_name(net("10.77.0.16/28"), None, Some("node-1")),
            "node-1-10.77.0.16-28"
        );
        // NormalizeIP: a trailing ':' gets a 0 first.
        assert_eq!(
            reservation_name("10.77.0.5".parse().unwrap(), None),
            "10.77.0.5"
        );
        assert_eq!(reservation_name("fd77::".parse().unwrap(), None), "fd77--0");
        assert_eq!(
            reservation_name("fd77::5".parse().unwrap(), Some("blue")),
            "blue-fd77--5"
        );
    }

    #[test]
    fn offsets_from_the_network_address() {
        let range = net("10.77.0.0/24");
        assert_eq!(offset_key(range, "10.77.0.1".parse().unwrap()), "1");
        assert_eq!(
            address_at(range, "200"),
            Some("10.77.0.200".parse().unwrap())
        );
        assert_eq!(address_at(range, "256"), None);
        assert_eq!(address_at(range, "-1"), None);
        assert_eq!(address_at(range, "+1"), None);
        assert_eq!(address_at(range, "x"), None);
        let wide = net("fd77::/32");
        let far: IpAddr = "fd77:0:ffff:ffff:ffff:ffff:ffff:fffe".parse().unwrap();
        let key = offset_key(wide, far);
        assert_eq!(address_at(wide, &key), Some(far));
        assert!(!whereabouts_can_read(key.parse().unwrap()));
        assert!(whereabouts_can_read(5));
    }

    #[test]
    fn allocation_wire_form() {
        let a: Allocation =
            serde_json::from_str(r#"{"id":"c1","podref":"ns/p","ifname":"net1"}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            r#"{"id":"c1","podref":"ns/p","ifname":"net1"}"#
        );
        assert!(a.is_of("ns/p", &IfName::new("net1").unwrap()));
        assert!(!a.is_of("ns/p", &IfName::new("net2").unwrap()));
        // Older whereabouts wrote no interface: none, and none written back.
        let old: Allocation =
            serde_json::from_str(r#"{"id":"c1","podref":"ns/p","ifname":""}"#).unwrap();
        assert_eq!(old.ifname, None);
        let back = serde_json::to_string(&old).unwrap();
        assert_eq!(back, r#"{"id":"c1","podref":"ns/p"}"#);
        // A name no runtime can give is refused as it is read.
        let bad = serde_json::from_str::<Allocation>(r#"{"id":"-c","podref":"ns/p"}"#);
        assert!(bad.unwrap_err().to_string().contains("alphanumeric"));
    }
}
