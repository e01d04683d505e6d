//! Pods as policy sees them ([`PodView`]), from what the daemon holds: a
//! pod of another node from its network-status annotation (multi-net-spec
//! §5), a pod of this node from its record (written before its status is
//! published, so it is known the moment its ADD ends); and container ports
//! from a pod's spec, for named ports.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::PodSpec;

use super::resolve::{Attachment, PodView};
use super::spec::{Policy, PortRef, Protocol};
use crate::cni::names::IfName;
use crate::netattach::status::{parse_status_annotation, NetworkStatus};

/// A pod's view from its network-status entries (an annotation that does
/// not parse gives no attachments: such a pod matches no peer).
pub fn from_status(
    namespace: &str,
    name: &str,
    labels: BTreeMap<String, String>,
    network_status: Option<&str>,
) -> PodView {
    let entries = network_status
        .and_then(|s| parse_status_annotation(s).ok())
        .unwrap_or_default();
    view(namespace, name, labels, &entries)
}

/// A pod's view from its entries as its record has them.
pub fn view(
    namespace: &str,
    name: &str,
    labels: BTreeMap<String, String>,
    entries: &[NetworkStatus],
) -> PodView {
    PodView {
        namespace: namespace.to_string(),
        name: name.to_string(),
        labels,
        attachments: entries.iter().map(attachment).collect(),
        named_ports: BTreeMap::new(),
    }
}

/// An entry as an attachment: its addresses without their prefix length.
/// No interface (a DPDK-mode VF has no netdev in the pod), or one no
/// interface can have, is none, which the enforcer reports and cannot
/// filter.
fn attachment(entry: &NetworkStatus) -> Attachment {
    Attachment {
        network: entry.name.to_string(),
        interface: entry
            .interface
            .as_deref()
            .and_then(|name| IfName::new(name).ok()),
        ips: entry
            .ips
            .iter()
            .filter_map(|ip| ip.split('/').next()?.parse::<IpAddr>().ok())
            .collect(),
    }
}

/// Whether any rule of `policies` names a port by name: only then are
/// pods' container ports read.
pub fn uses_named_ports(policies: &[Policy]) -> bool {
    policies.iter().any(|p| {
        let ingress = p.spec.ingress.iter().flat_map(|r| &r.ports);
        let egress = p.spec.egress.iter().flat_map(|r| &r.ports);
        ingress
            .chain(egress)
            .any(|port| matches!(port.port, Some(PortRef::Name(_))))
    })
}

/// The named container ports of `spec` (init containers' too, as
/// NetworkPolicy implementations read them).
pub fn named_ports(spec: &PodSpec) -> BTreeMap<String, (Protocol, u16)> {
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    let mut out = BTreeMap::new();
    for port in containers.flat_map(|c| c.ports.iter().flatten()) {
        let (Some(name), Ok(number)) = (&port.name, u16::try_from(port.container_port)) else {
            continue;
        };
        let protocol = match port.protocol.as_deref() {
            None | Some("TCP") => Protocol::Tcp,
            Some("UDP") => Protocol::Udp,
            Some("SCTP") => Protocol::Sctp,
            Some(_) => continue,
        };
        out.entry(name.clone()).or_insert((protocol, number));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_status_gives_each_network_its_interface_and_bare_addresses() {
        let status = json!([
            {"name": "cluster", "interface": "eth0", "ips": ["10.244.0.5"], "default": true},
            {"name": "ns1/blue", "interface": "net1", "ips": ["10.1.0.5/24", "fd00::5/64"]},
            {"name": "ns1/dpdk", "ips": ["10.2.0.5/24"]},
        ])
        .to_string();
        let v = from_status("ns1", "p", BTreeMap::new(), Some(&status));
        assert_eq!(v.attachments.len(), 3);
        assert_eq!(v.attachments[1].network, "ns1/blue");
        assert_eq!(v.attachments[1].interface.as_deref(), Some("net1"));
        assert_eq!(
            v.attachments[1].ips,
            [
                "10.1.0.5".parse::<IpAddr>().unwrap(),
                "fd00::5".parse().unwrap()
            ]
        );
        assert_eq!(v.attachments[2].interface, None, "no netdev: DPDK");
        assert!(from_status("ns1", "p", BTreeMap::new(), Some("[{"))
            .attachments
            .is_empty());
    }

    #[test]
    fn named_ports_come_from_every_container() {
        let spec: PodSpec = serde_json::from_value(json!({
            "containers": [
                {"name": "a", "ports": [{"name": "http", "containerPort": 8080},
                                        {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                        {"containerPort": 9}]},
                {"name": "b", "ports": [{"name": "sctp", "containerPort": 7, "protocol": "SCTP"}]}
            ]
        }))
        .unwrap();
        assert_eq!(
            named_ports(&spec),
            BTreeMap::from([
                ("dns".to_string(), (Protocol::Udp, 53)),
                ("http".to_string(), (Protocol::Tcp, 8080)),
                ("sctp".to_string(), (Protocol::Sctp, 7)),
            ])
        );
    }
}
