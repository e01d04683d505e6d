//! The subset of Kubernetes object metadata plexus needs (name, namespace,
//! uid, annotations, labels). Other metadata keys are ignored.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::error::SpecError;
use super::go_json::{as_object, as_str, describe};
use super::names::{check_dns1123_label, check_nad_name};

#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub uid: Option<String>,
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub annotations: BTreeMap<String, String>,
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub labels: BTreeMap<String, String>,
}

/// Kubernetes serialises empty maps as `null` in places; treat that as empty.
fn null_as_empty<'de, D>(d: D) -> Result<BTreeMap<String, String>, D::Error>
where
    D: Deserializer<'de>,
{
    Ok(Option::<BTreeMap<String, String>>::deserialize(d)?.unwrap_or_default())
}

impl ObjectMeta {
    /// Decode and validate `metadata` of a namespaced object: `name` is
    /// required and must be a valid object name (multi-net-spec §3.3, a
    /// DNS-1123 subdomain); `namespace`, when present and non-empty, must be a
    /// DNS-1123 label. Errors name the path under `metadata`.
    pub fn from_value(v: &Value) -> Result<ObjectMeta, SpecError> {
        let bad = |field: &str, reason: String| SpecError::invalid(field, reason);
        let obj = as_object(v).map_err(|r| bad("metadata", r))?;
        let opt_str = |key: &str| -> Result<Option<String>, SpecError> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => as_str(v)
                    .map(|s| Some(s.to_string()))
                    .map_err(|r| bad(&format!("metadata.{key}"), r)),
            }
        };
        let name = opt_str("name")?.ok_or_else(|| bad("metadata.name", "required".into()))?;
        check_nad_name(&name).map_err(|r| bad("metadata.name", r))?;
        let namespace = opt_str("namespace")?.filter(|s| !s.is_empty());
        if let Some(ns) = &namespace {
            check_dns1123_label(ns).map_err(|r| bad("metadata.namespace", r))?;
        }
        let uid = opt_str("uid")?;
        let string_map = |key: &str| -> Result<BTreeMap<String, String>, SpecError> {
            let mut out = BTreeMap::new();
            let Some(m) = obj.get(key).filter(|v| !v.is_null()) else {
                return Ok(out);
            };
            let m = as_object(m).map_err(|r| bad(&format!("metadata.{key}"), r))?;
            for (k, v) in m {
                let s = v.as_str().ok_or_else(|| {
                    bad(
                        &format!("metadata.{key}[{k:?}]"),
                        format!("must be a string, got {}", describe(v)),
                    )
                })?;
                out.insert(k.clone(), s.to_string());
            }
            Ok(out)
        };
        Ok(ObjectMeta {
            name,
            namespace,
            uid,
            annotations: string_map("annotations")?,
            labels: string_map("labels")?,
        })
    }

    /// The metadata as a JSON object (keys as Kubernetes writes them).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn serde_ignores_other_keys_and_nulls() {
        let m: ObjectMeta = serde_json::from_value(json!({
            "name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
            "annotations": {"a": "b"}, "labels": null, "creationTimestamp": null
        }))
        .unwrap();
        assert_eq!(m.name, "p");
        assert_eq!(m.namespace.as_deref(), Some("ns"));
        assert_eq!(m.uid.as_deref(), Some("u-1"));
        assert_eq!(m.annotation("a"), Some("b"));
        assert!(m.labels.is_empty());
        assert_eq!(
            m.to_value(),
            json!({"name": "p", "namespace": "ns", "uid": "u-1", "annotations": {"a": "b"}})
        );
    }

    #[test]
    fn from_value_validates_with_paths() {
        let m =
            ObjectMeta::from_value(&json!({"name": "a.b", "namespace": "", "labels": {"x": "y"}}))
                .unwrap();
        assert_eq!(m.namespace, None);
        assert_eq!(m.labels.get("x").map(String::as_str), Some("y"));

        let err = |v: Value| ObjectMeta::from_value(&v).unwrap_err().to_string();
        assert_eq!(err(json!({})), "metadata.name: required");
        assert_eq!(err(json!([])), "metadata: must be an object, got []");
        assert_eq!(
            err(json!({"name": 5})),
            "metadata.name: must be a string, got 5"
        );
        let field = |v: Value| match ObjectMeta::from_value(&v) {
            Err(SpecError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(json!({"name": "Bad_Name"})), "metadata.name");
        assert_eq!(
            field(json!({"name": "a", "namespace": "a.b"})),
            "metadata.namespace"
        );
        assert_eq!(
            err(json!({"name": "a", "annotations": {"k": 1}})),
            "metadata.annotations[\"k\"]: must be a string, got 1"
        );
    }
}
