//! The opaque configuration of a claim's devices for plexus's driver
//! (`status.allocation.devices.config[i].opaque.parameters` with `driver`
//! plexus's): how the pod's sandbox ADD attaches each device, so that a
//! pod needs no network annotation for it.
//!
//! ```json
//! {"apiVersion": "dra.plexus.dev/v1alpha1", "kind": "NetworkConfig",
//!  "interfaceName": "net1",
//!  "networkAttachment": "sriov-net"}
//! ```
//!
//! with exactly one of `networkAttachment` (a NAD, `name` in the claim's
//! namespace or `namespace/name`) and `config` (an inline CNI network
//! configuration, an object with `type`). `interfaceName` is optional (the
//! next free `netN` then). Unknown keys are refused, so that a misspelt
//! key is not silently dropped.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::DRIVER;
use crate::dra::claim::{DeviceConfig, ResourceClaim};
use crate::dra::DraError;
use plexus_cni::config::NetworkConfigList;
use plexus_cni::names::check_ifname;

/// `apiVersion` of the parameters.
pub const API_VERSION: &str = "dra.plexus.dev/v1alpha1";
/// `kind` of the parameters.
pub const KIND: &str = "NetworkConfig";

/// What the network of a claimed device is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Network {
    /// A NAD: its namespace and name.
    Attachment { namespace: String, name: String },
    /// An inline CNI configuration.
    Inline(Value),
}

/// The configuration of some requests' devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkConfig {
    /// The requests it applies to; empty: all of the claim's.
    pub requests: Vec<String>,
    pub interface_name: Option<String>,
    pub network: Network,
    /// `status.allocation.devices.config[i]`, for errors.
    pub field: String,
}

impl NetworkConfig {
    pub fn applies_to(&self, request: &str) -> bool {
        // A request of a claim's `firstAvailable` list is `request/sub`.
        let top = request.split('/').next().unwrap_or(request);
        self.requests.is_empty() || self.requests.iter().any(|r| r == request || r == top)
    }
}

/// The configurations for plexus's driver in `claim`, in order (a later
/// one wins for a request, as the API defines: the claim's after the
/// class's). Others' opaque configurations are not read.
pub fn network_configs(claim: &ResourceClaim) -> Result<Vec<NetworkConfig>, DraError> {
    let object = format!("{} {}", crate::dra::claim::KIND, claim.key());
    let mut out = Vec::new();
    for (i, config) in claim.config.iter().enumerate() {
        let DeviceConfig {
            requests, opaque, ..
        } = config;
        let Some(opaque) = opaque.as_ref().map(|o| &o.0) else {
            continue;
        };
        if opaque.driver.as_str() != DRIVER {
            continue;
        }
        let field = format!("status.allocation.devices.config[{i}]");
        let parameters = format!("{field}.opaque.parameters");
        let bad = |key: &str, reason: &str| {
            let at = if key.is_empty() {
                parameters.clone()
            } else {
                format!("{parameters}.{key}")
            };
            DraError::object(&object, at, reason)
        };
        let Some(p) = opaque.parameters.as_object() else {
            return Err(bad("", "must be an object (a NetworkConfig)"));
        };
        check_type(p, &bad)?;
        let interface_name = match p.get("interfaceName") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => {
                check_ifname(s).map_err(|r| bad("interfaceName", &r))?;
                Some(s.clone())
            }
            Some(_) => return Err(bad("interfaceName", "must be a string")),
        };
        let network = match (p.get("networkAttachment"), p.get("config")) {
            (Some(Value::String(nad)), None) => {
                attachment(nad, &claim.namespace).ok_or_else(|| {
                    bad(
                        "networkAttachment",
                        "must be a NetworkAttachmentDefinition's name or namespace/name",
                    )
                })?
            }
            (Some(_), None) => return Err(bad("networkAttachment", "must be a string")),
            (None, Some(c)) => {
                // Read as a NAD's `spec.config` is: one plugin or a list.
                if let Err(e) = NetworkConfigList::from_value(c) {
                    let reason = format!("is no CNI network configuration: {}", e.details);
                    return Err(bad("config", &reason));
                }
                Network::Inline(c.clone())
            }
            (None, None) => return Err(bad("", "one of networkAttachment and config is required")),
            (Some(_), Some(_)) => {
                return Err(bad(
                    "config",
                    "networkAttachment and config exclude each other",
                ))
            }
        };
        out.push(NetworkConfig {
            requests: requests.0.iter().map(|r| r.to_string()).collect(),
            interface_name,
            network,
            field,
        });
    }
    Ok(out)
}

fn check_type(
    p: &Map<String, Value>,
    bad: &dyn Fn(&str, &str) -> DraError,
) -> Result<(), DraError> {
    const KEYS: [&str; 5] = [
        "apiVersion",
        "kind",
        "interfaceName",
        "networkAttachment",
        "config",
    ];
    if let Some(unknown) = p.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(bad(unknown, "unknown key"));
    }
    if p.get("apiVersion").and_then(Value::as_str) != Some(API_VERSION) {
        return Err(bad("apiVersion", &format!("must be {API_VERSION}")));
    }
    if p.get("kind").and_then(Value::as_str) != Some(KIND) {
        return Err(bad("kind", &format!("must be {KIND}")));
    }
    Ok(())
}

/// `name` or `namespace/name`, both DNS names as NADs' are.
fn attachment(s: &str, claim_namespace: &str) -> Option<Network> {
    let (namespace, name) = s.split_once('/').unwrap_or((claim_namespace, s));
    let valid = |n: &str| {
        !n.is_empty()
            && n.len() <= 253
            && n.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    (valid(namespace) && valid(name)).then(|| Network::Attachment {
        namespace: namespace.to_string(),
        name: name.to_string(),
    })
}

/// Leave out of `claims`' results the devices of plexus's driver that
/// their claim configures a network for: those are attached by that
/// configuration (`super::claimed`), not handed to a NAD's
/// `resourceName` as well (the Multus contract, `crate::dra`).
pub fn drop_configured(claims: &mut [ResourceClaim]) {
    for claim in claims {
        let configs = network_configs(claim).unwrap_or_default();
        if let Some(results) = &mut claim.results {
            results.retain(|r| {
                r.driver.as_str() != DRIVER || for_request(&configs, &r.request).is_none()
            });
        }
    }
}

/// The configuration for the device of `request`: the last that applies.
pub fn for_request<'a>(configs: &'a [NetworkConfig], request: &str) -> Option<&'a NetworkConfig> {
    configs.iter().rev().find(|c| c.applies_to(request))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(config: Value) -> ResourceClaim {
        ResourceClaim::from_value(&json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
            "status": {"allocation": {"devices": {"results": [], "config": config}}}}))
        .unwrap()
    }

    fn params(p: Value) -> Value {
        json!([{"source": "FromClaim", "requests": ["vf"],
                "opaque": {"driver": DRIVER, "parameters": p}}])
    }

    #[test]
    fn a_nad_or_an_inline_config_with_an_interface_name() {
        let c = claim(json!([
            {"source": "FromClass", "opaque": {"driver": "other.example.com", "parameters": 5}},
            {"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": {
                "apiVersion": API_VERSION, "kind": KIND, "networkAttachment": "other/sriov-net"}}},
            {"source": "FromClaim", "requests": ["vf"], "opaque": {"driver": DRIVER, "parameters": {
                "apiVersion": API_VERSION, "kind": KIND, "interfaceName": "dra0",
                "config": {"cniVersion": "1.0.0", "name": "n", "type": "sriov"}}}},
        ]));
        let configs = network_configs(&c).unwrap();
        assert_eq!(configs.len(), 2);
        assert_eq!(
            configs[0].network,
            Network::Attachment {
                namespace: "other".into(),
                name: "sriov-net".into()
            }
        );
        let vf = for_request(&configs, "vf").unwrap();
        assert_eq!(vf.interface_name.as_deref(), Some("dra0"));
        assert!(matches!(vf.network, Network::Inline(_)));
        // Another request gets the class's.
        assert_eq!(
            for_request(&configs, "gpu").unwrap().field,
            "status.allocation.devices.config[1]"
        );
    }

    /// A device of plexus's own driver whose claim configures its network
    /// is attached by that configuration, not handed to a NAD's
    /// `resourceName` too; one without is the NAD's, as any driver's.
    #[test]
    fn configured_devices_of_plexus_are_left_out_of_the_multus_contract() {
        let result = |driver: &str, request: &str| json!({"request": request, "driver": driver, "pool": "node-a", "device": "d"});
        let mut claims = [ResourceClaim::from_value(&json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns"},
            "status": {"allocation": {"devices": {
                "results": [result(DRIVER, "vf"), result(DRIVER, "plain"),
                            result("other.example.com", "vf")],
                "config": params(json!({"apiVersion": API_VERSION, "kind": KIND,
                                        "networkAttachment": "n"}))}}}}))
        .unwrap()];
        drop_configured(&mut claims);
        let left: Vec<(&str, &str)> = claims[0]
            .results
            .iter()
            .flatten()
            .map(|r| (r.driver.as_str(), r.request.as_str()))
            .collect();
        assert_eq!(left, [(DRIVER, "plain"), ("other.example.com", "vf")]);
    }

    #[test]
    fn malformed_parameters_name_the_field() {
        let ok = || json!({"apiVersion": API_VERSION, "kind": KIND, "networkAttachment": "n"});
        let with = |key: &str, value: Value| {
            let mut p = ok();
            p[key] = value;
            p
        };
        let at = "ResourceClaim ns/c status.allocation.devices.config[0].opaque.parameters";
        let cases = [
            (json!(5), format!("{at}: must be an object (a NetworkConfig)")),
            (with("kind", json!("Other")), format!("{at}.kind: must be NetworkConfig")),
            (with("ifname", json!("x")), format!("{at}.ifname: unknown key")),
            (
                with("interfaceName", json!("a/b")),
                format!("{at}.interfaceName: "),
            ),
            (
                with("networkAttachment", json!("Bad_Name")),
                format!("{at}.networkAttachment: must be a NetworkAttachmentDefinition's name or namespace/name"),
            ),
            (
                with("config", json!({"type": "sriov"})),
                format!("{at}.config: networkAttachment and config exclude each other"),
            ),
            (
                json!({"apiVersion": API_VERSION, "kind": KIND, "config": {"name": "x"}}),
                format!("{at}.config: is no CNI network configuration: "),
            ),
            (
                json!({"apiVersion": API_VERSION, "kind": KIND}),
                format!("{at}: one of networkAttachment and config is required"),
            ),
        ];
        for (p, want) in cases {
            let e = network_configs(&claim(params(p.clone())))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(&want), "{p}: {e}");
        }
    }
}
