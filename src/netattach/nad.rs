//! The NetworkAttachmentDefinition object (multi-net-spec §3.1, §3.2).
//!
//! Keys match as Go's encoding/json matches them (an exact match wins, else
//! case-insensitively), like the Go clients that read these objects
//! ([`crate::cni::casefold`]); `null` is an absent key.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::SpecError;
use super::go_json::{decode_failure, GoMap, GoObj, GoStr};
use super::meta::ObjectMeta;
use super::names::NetworkRef;
use crate::cni::casefold;

pub const API_VERSION: &str = "k8s.cni.cncf.io/v1";
pub const KIND: &str = "NetworkAttachmentDefinition";
/// The NAD annotation naming the device-plugin resource that backs the
/// network (device-info-SPEC §4.1).
pub const RESOURCE_NAME_ANNOTATION: &str = "k8s.v1.cni.cncf.io/resourceName";

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetworkAttachmentDefinition {
    pub metadata: ObjectMeta,
    /// `spec.config` as written: a CNI config or config list in JSON (§3.2).
    pub config: Option<String>,
}

/// A Kubernetes object of the spec (NAD, IPAMClaim) on the wire, read and
/// written. `metadata` stays JSON for [`ObjectMeta::from_value`], which
/// validates it and names its keys.
#[derive(Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    bound(deserialize = "Spec: Deserialize<'de>, Status: Deserialize<'de>")
)]
pub(crate) struct WireObject<Spec, Status> {
    pub api_version: Option<GoStr>,
    pub kind: Option<GoStr>,
    pub metadata: Option<GoMap>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<GoObj<Spec>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<GoObj<Status>>,
}

impl<Spec: DeserializeOwned, Status: DeserializeOwned> WireObject<Spec, Status> {
    /// Decode `v` (errors name the key: `spec.config: must be a string, got
    /// 5`), check `apiVersion` and `kind` ([`check_type_meta`]) and read the
    /// required `metadata`.
    pub(crate) fn decode(
        v: &Value,
        api_versions: &[&str],
        kind: &str,
    ) -> Result<(Self, ObjectMeta), SpecError> {
        let wire: Self = casefold::from_value_at(v).map_err(|e| {
            let (field, reason) = decode_failure(e, v, kind);
            SpecError::invalid(field, reason)
        })?;
        check_type_meta(
            wire.api_version.as_deref(),
            wire.kind.as_deref(),
            api_versions,
            kind,
        )?;
        let metadata = match &wire.metadata {
            None => return Err(SpecError::invalid("metadata", "required")),
            Some(m) => ObjectMeta::from_value(&Value::Object(m.0.clone()))?,
        };
        Ok((wire, metadata))
    }

    /// The object as JSON.
    pub(crate) fn to_value(&self) -> Value
    where
        Spec: Serialize,
        Status: Serialize,
    {
        serde_json::to_value(self).expect("a Kubernetes object serializes")
    }
}

/// §3.2 `spec`.
#[derive(Serialize, Deserialize)]
struct Spec {
    config: Option<GoStr>,
}

/// A NAD's `status`, which plexus neither reads nor writes.
type NoStatus = Value;

impl NetworkAttachmentDefinition {
    /// Decode and validate a NAD object. `apiVersion` and `kind` are checked
    /// when present; `metadata.name` is required and must follow §3.3; `spec`
    /// may be absent (§3.2.4); `spec.config` must be a string when present.
    pub fn from_value(v: &Value) -> Result<Self, SpecError> {
        let (wire, metadata) = WireObject::<Spec, NoStatus>::decode(v, &[API_VERSION], KIND)?;
        Ok(NetworkAttachmentDefinition {
            metadata,
            config: wire.spec.and_then(|s| s.0.config).map(String::from),
        })
    }

    /// The object as Kubernetes would print it.
    pub fn to_value(&self) -> Value {
        WireObject::<Spec, NoStatus> {
            api_version: Some(API_VERSION.into()),
            kind: Some(KIND.into()),
            metadata: Some(GoMap::object(self.metadata.to_value())),
            spec: self.config.as_deref().map(|c| {
                GoObj(Spec {
                    config: Some(c.into()),
                })
            }),
            status: None,
        }
        .to_value()
    }

    /// The CNI configuration of §3.4.1 rule 1, or `None` when `spec.config`
    /// is absent or blank (then rules 2–4 apply: an on-disk config named
    /// after the object, else failure).
    pub fn spec_config(&self) -> Option<&str> {
        self.config.as_deref().filter(|c| !c.trim().is_empty())
    }

    /// `namespace/name` of this object; `default_namespace` when the object
    /// carries no namespace (a manifest without one).
    pub fn network_ref(&self, default_namespace: &str) -> NetworkRef {
        NetworkRef::new(
            self.metadata
                .namespace
                .as_deref()
                .unwrap_or(default_namespace),
            self.metadata.name.as_str(),
        )
    }

    /// The `k8s.v1.cni.cncf.io/resourceName` annotation, if set and not blank.
    pub fn resource_name(&self) -> Option<&str> {
        self.metadata
            .annotation(RESOURCE_NAME_ANNOTATION)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    }
}

/// Check `apiVersion` (one of `api_versions`) and `kind` when present.
pub(crate) fn check_type_meta(
    api_version: Option<&str>,
    kind: Option<&str>,
    api_versions: &[&str],
    want_kind: &str,
) -> Result<(), SpecError> {
    if let Some(s) = api_version.filter(|s| !api_versions.contains(s)) {
        let want: Vec<String> = api_versions.iter().map(|a| format!("{a:?}")).collect();
        return Err(SpecError::invalid(
            "apiVersion",
            format!("must be {}, got {s:?}", want.join(" or ")),
        ));
    }
    if let Some(s) = kind.filter(|s| *s != want_kind) {
        return Err(SpecError::invalid(
            "kind",
            format!("must be {want_kind:?}, got {s:?}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Parse YAML text as the Kubernetes API would hand it over (JSON).
    fn yaml(text: &str) -> Value {
        serde_yaml_ng::from_str(text).unwrap()
    }

    /// A §3.2 example: the NAD `name` whose `spec.config` is `config`, in
    /// the envelope the spec's examples share.
    fn spec_example(name: &str, config: &str) -> NetworkAttachmentDefinition {
        let text = format!(
            "apiVersion: \"k8s.cni.cncf.io/v1\"\nkind: NetworkAttachmentDefinition\n\
             metadata:\n  name: {name}\nspec:\n  config: '{config}'\n"
        );
        NetworkAttachmentDefinition::from_value(&yaml(&text)).unwrap()
    }

    fn config_json(nad: &NetworkAttachmentDefinition) -> Value {
        serde_json::from_str(nad.spec_config().unwrap()).unwrap()
    }

    #[test]
    fn example_3_2_1_config_in_object() {
        let nad = spec_example(
            "a-bridge-network",
            r#"{
    "cniVersion": "0.3.0",
    "name": "a-bridge-network",
    "type": "bridge",
    "bridge": "br0",
    "isGateway": true,
    "ipam": {
      "type": "host-local",
      "subnet": "192.168.5.0/24",
      "dataDir": "/mnt/cluster-ipam"
    }
  }"#,
        );
        assert_eq!(nad.metadata.name, "a-bridge-network");
        assert_eq!(
            nad.network_ref("default").to_string(),
            "default/a-bridge-network"
        );
        let c = config_json(&nad);
        assert_eq!(c["type"], "bridge");
        assert_eq!(c["ipam"]["dataDir"], "/mnt/cluster-ipam");
        assert_eq!(nad.resource_name(), None);
    }

    #[test]
    fn example_3_2_2_configlist_in_object() {
        let nad = spec_example(
            "another-bridge-network",
            r#"{
    "cniVersion": "0.3.0",
    "name": "another-bridge-network",
    "plugins": [
      {
        "type": "bridge",
        "bridge": "br0",
        "ipam": {
          "type": "host-local",
          "subnet": "192.168.5.0/24"
        }
      },
      {
        "type": "port-forwarding"
      },
      {
        "type": "tuning",
        "sysctl": {
          "net.ipv4.conf.all.log_martians": "1"
        }
      }
    ]
  }"#,
        );
        let c = config_json(&nad);
        assert_eq!(c["name"], "another-bridge-network");
        assert_eq!(c["plugins"].as_array().unwrap().len(), 3);
        assert_eq!(
            c["plugins"][2]["sysctl"]["net.ipv4.conf.all.log_martians"],
            "1"
        );
    }

    #[test]
    fn example_3_2_3_thick_plugin() {
        let nad = spec_example(
            "a-bridge-network",
            r#"{
    "cniVersion": "0.3.0",
    "type": "awesome-plugin"
  }"#,
        );
        let c = config_json(&nad);
        assert_eq!(c, json!({"cniVersion": "0.3.0", "type": "awesome-plugin"}));
    }

    #[test]
    fn example_3_2_4_implementation_specific_reference() {
        let v = yaml(
            r#"
apiVersion: "k8s.cni.cncf.io/v1"
kind: NetworkAttachmentDefinition
metadata:
  name: a-bridge-network
"#,
        );
        let nad = NetworkAttachmentDefinition::from_value(&v).unwrap();
        assert_eq!(nad.config, None);
        assert_eq!(nad.spec_config(), None);
        assert_eq!(nad.to_value(), v);
    }

    #[test]
    fn blank_config_is_no_config_and_namespace_and_resource_name() {
        let nad = NetworkAttachmentDefinition::from_value(&json!({
            "metadata": {
                "name": "sriov-a", "namespace": "tenant",
                "annotations": {"k8s.v1.cni.cncf.io/resourceName": "intel.com/sriov_a"}
            },
            "spec": {"config": "  \n"}
        }))
        .unwrap();
        assert_eq!(nad.config.as_deref(), Some("  \n"));
        assert_eq!(nad.spec_config(), None);
        assert_eq!(nad.network_ref("other").to_string(), "tenant/sriov-a");
        assert_eq!(nad.resource_name(), Some("intel.com/sriov_a"));
        // spec: {} and spec.config: null are §3.2.4 too.
        for spec in [json!({}), json!({"config": null}), Value::Null] {
            let nad = NetworkAttachmentDefinition::from_value(
                &json!({"metadata": {"name": "n"}, "spec": spec}),
            )
            .unwrap();
            assert_eq!(nad.config, None);
        }
    }

    #[test]
    fn bad_inputs_name_the_field() {
        let err = |v: Value| {
            NetworkAttachmentDefinition::from_value(&v)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(json!("x")),
            "NetworkAttachmentDefinition: must be an object, got \"x\""
        );
        assert_eq!(
            err(json!({"apiVersion": "v1", "metadata": {"name": "a"}})),
            "apiVersion: must be \"k8s.cni.cncf.io/v1\", got \"v1\""
        );
        assert_eq!(
            err(json!({"kind": "Pod", "metadata": {"name": "a"}})),
            "kind: must be \"NetworkAttachmentDefinition\", got \"Pod\""
        );
        assert_eq!(err(json!({"kind": KIND})), "metadata: required");
        assert_eq!(err(json!({"metadata": {}})), "metadata.name: required");
        assert!(matches!(
            NetworkAttachmentDefinition::from_value(&json!({"metadata": {"name": "A_B"}})),
            Err(SpecError::Invalid { field, .. }) if field == "metadata.name"
        ));
        assert_eq!(
            err(json!({"metadata": {"name": "a"}, "spec": "x"})),
            "spec: must be an object, got \"x\""
        );
        assert_eq!(
            err(json!({"metadata": {"name": "a"}, "spec": {"config": {"type": "bridge"}}})),
            "spec.config: must be a string, got {\"type\":\"bridge\"}"
        );
        let e = NetworkAttachmentDefinition::from_value(&json!({"metadata": {}})).unwrap_err();
        assert!(
            matches!(&e, SpecError::Invalid { field, .. } if field == "metadata.name"),
            "{e:?}"
        );
    }

    #[test]
    fn keys_in_another_case_3_2() {
        // §3.2 (§3.4.1 calls the key `Spec.Config`), as Go's decoder matches it.
        let nad = NetworkAttachmentDefinition::from_value(&json!({
            "APIVersion": API_VERSION, "Kind": KIND,
            "Metadata": {"name": "a-bridge-network"},
            "Spec": {"Config": "{\"cniVersion\": \"0.3.0\", \"type\": \"bridge\"}"}
        }))
        .unwrap();
        assert_eq!(nad.metadata.name, "a-bridge-network");
        assert_eq!(config_json(&nad)["type"], "bridge");
        assert_eq!(
            NetworkAttachmentDefinition::from_value(&nad.to_value()).unwrap(),
            nad
        );
        assert_eq!(
            NetworkAttachmentDefinition::from_value(
                &json!({"KIND": "Pod", "metadata": {"name": "a"}})
            )
            .unwrap_err()
            .to_string(),
            "kind: must be \"NetworkAttachmentDefinition\", got \"Pod\""
        );
        assert_eq!(
            NetworkAttachmentDefinition::from_value(
                &json!({"metadata": {"name": "a"}, "SPEC": [{"config": "{}"}]})
            )
            .unwrap_err()
            .to_string(),
            "SPEC: must be an object, got [{\"config\":\"{}\"}]"
        );
    }
}
