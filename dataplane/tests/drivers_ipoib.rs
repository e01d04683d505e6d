//! The built-in `ipoib` driver. No InfiniBand device can exist in software
//! on these machines (rdma_rxe and siw give RDMA devices with an Ethernet
//! link layer, so there is no `ib0` to make a child of: see
//! shared/notes/vm-kernel.md), so what the kernel would receive is checked
//! by decoding the netlink message the driver builds, and the refusals that
//! come before any message run against the real kernel.
mod common;
use common::ifname;
mod drivers_support;

use common::{is_root, TestNs};
use drivers_support::*;
use netlink_packet_route::link::{
    InfoData, InfoIpoib, InfoKind, IpoibMode, LinkAttribute, LinkInfo,
};
use netlink_packet_route::RouteNetlinkMessage;
use plexus_cni::error::ErrorCode;
use plexus_dataplane::netlink::{IpoibInfo, IpoibSpec};
use rtnetlink::packet_core::{NetlinkMessage, NetlinkPayload};
use serde_json::{json, Value};

fn conf(extra: Value) -> Value {
    let mut c = json!({
        "cniVersion": "1.0.0",
        "name": "ib",
        "type": "ipoib",
        "master": "ib0",
        "ipam": {"type": IPAM, "addresses": [{"address": "10.60.0.5/24"}]},
    });
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

/// The child's RTM_NEWLINK, through the wire format and back, carries what
/// ipoib-cni's does: the name, IFLA_LINK = the master, kind `ipoib` with the
/// master's pkey and mode, and the MTU.
#[test]
fn the_child_link_message_decodes_as_the_kernel_reads_it() {
    let spec = IpoibSpec {
        name: ifname("ib3f2a"),
        parent: 7,
        info: IpoibInfo {
            pkey: Some(0x8001),
            mode: Some(1),
            umcast: None,
        },
        mtu: Some(2044),
    };
    let mut msg = NetlinkMessage::from(RouteNetlinkMessage::NewLink(spec.message()));
    msg.finalize();
    let mut wire = vec![0u8; msg.buffer_len()];
    msg.serialize(&mut wire);
    let back = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&wire).unwrap();
    let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(link)) = back.payload else {
        panic!("not a NewLink: {back:?}")
    };
    let attrs = &link.attributes;
    assert!(attrs.contains(&LinkAttribute::IfName("ib3f2a".into())));
    assert!(attrs.contains(&LinkAttribute::Link(7)));
    assert!(attrs.contains(&LinkAttribute::Mtu(2044)));
    let info = attrs
        .iter()
        .find_map(|a| match a {
            LinkAttribute::LinkInfo(i) => Some(i),
            _ => None,
        })
        .expect("IFLA_LINKINFO");
    assert!(info.contains(&LinkInfo::Kind(InfoKind::Ipoib)));
    assert!(info.contains(&LinkInfo::Data(InfoData::Ipoib(vec![
        InfoIpoib::Pkey(0x8001),
        InfoIpoib::Mode(IpoibMode::Connected),
    ]))));
}

#[test]
fn a_master_that_is_missing_or_not_ipoib_is_refused_before_ipam() {
    if !is_root() {
        return;
    }
    let (node, pod) = (TestNs::new(), TestNs::new());
    node.add_veth("eth9", "eth8");
    let r = TestResolver::default();
    let t = Target::new("c1", &pod, "net1");
    let cases = [
        ("eth9", "master: eth9 is a veth, not an IPoIB interface"),
        (
            "ib7",
            "master: interface \"ib7\" not found in the host namespace",
        ),
        ("", "master: missing: the IPoIB device to make a child of"),
        ("a/b", "master: "),
    ];
    for (master, details) in cases {
        let extra = json!({ "master": master });
        let e = add(&node, &r, "ipoib", &t, &conf(extra.clone())).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidConfig, "{extra}: {e}");
        assert!(e.details.starts_with(details), "{extra}: {e}");
    }
    assert_nothing_made(&pod, &r);
    // DEL of an attachment that never was succeeds and touches nothing.
    del(&node, &r, "ipoib", &t, &conf(json!({}))).unwrap();
}
