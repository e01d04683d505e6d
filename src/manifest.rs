//! Kubernetes manifests read from files the way `kubectl apply -f` takes them:
//! YAML or JSON, one or many documents per file (`---`), `kind: List` wrappers,
//! and a directory meaning every `.yaml`, `.yml` and `.json` file in it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::netattach::error::SpecError;
use crate::netattach::meta::ObjectMeta;
use crate::netattach::nad::NetworkAttachmentDefinition;
use crate::netattach::pod::Pod;

/// The namespace kubectl applies an object to when it names none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// One document of a manifest file, with where it came from for error messages.
#[derive(Debug, Clone)]
pub struct Document {
    pub origin: String,
    pub value: Value,
}

impl Document {
    pub fn kind(&self) -> Option<&str> {
        self.value.get("kind").and_then(Value::as_str)
    }
}

/// Read every document under `path` (a file, or a directory's manifest files in
/// name order; not recursive, like `kubectl apply -f DIR`).
pub fn load(path: &Path) -> Result<Vec<Document>, SpecError> {
    let meta = std::fs::metadata(path).map_err(|e| SpecError::io(path.display().to_string(), e))?;
    if !meta.is_dir() {
        return load_file(path);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| SpecError::io(path.display().to_string(), e))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("yaml" | "yml" | "json")
                )
        })
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for file in files {
        docs.extend(load_file(&file)?);
    }
    Ok(docs)
}

fn load_file(path: &Path) -> Result<Vec<Document>, SpecError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| SpecError::io(path.display().to_string(), e))?;
    parse_documents(&text, &path.display().to_string())
}

/// Parse manifest text: JSON when it is a JSON value, otherwise a YAML stream
/// (YAML is a superset of JSON, but serde_json gives better JSON errors).
pub fn parse_documents(text: &str, origin: &str) -> Result<Vec<Document>, SpecError> {
    let trimmed = text.trim_start();
    let mut raw = Vec::new();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| SpecError::decode(origin, format!("invalid JSON: {e}")))?;
        match value {
            // A bare JSON array is a list of objects, as kubectl accepts.
            Value::Array(items) => raw.extend(items),
            other => raw.push(other),
        }
    } else {
        for (index, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
            let value = Value::deserialize(doc).map_err(|e| {
                SpecError::decode(
                    format!("{origin} (document {})", index + 1),
                    format!("invalid YAML: {e}"),
                )
            })?;
            raw.push(value);
        }
    }

    let mut docs = Vec::new();
    for (index, value) in raw.into_iter().enumerate() {
        let where_ = format!("{origin} (document {})", index + 1);
        flatten_into(value, &where_, &mut docs)?;
    }
    Ok(docs)
}

/// Unwrap `kind: List` (and `*List`) documents; drop empty documents.
fn flatten_into(value: Value, origin: &str, out: &mut Vec<Document>) -> Result<(), SpecError> {
    match value {
        Value::Null => Ok(()),
        Value::Object(ref map) => {
            let is_list = map
                .get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k.ends_with("List"));
            if is_list {
                let items = map.get("items").and_then(Value::as_array).ok_or_else(|| {
                    SpecError::invalid(
                        format!("{origin}: items"),
                        "a List must have an items array",
                    )
                })?;
                for (i, item) in items.iter().enumerate() {
                    flatten_into(item.clone(), &format!("{origin} items[{i}]"), out)?;
                }
                Ok(())
            } else {
                out.push(Document {
                    origin: origin.to_string(),
                    value,
                });
                Ok(())
            }
        }
        other => Err(SpecError::invalid(
            origin,
            format!(
                "a manifest document must be an object, got {}",
                json_type(&other)
            ),
        )),
    }
}

pub(crate) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A pod from a `kind: Pod` manifest document.
pub fn pod(doc: &Document) -> Result<Pod, SpecError> {
    let metadata = doc.value.get("metadata").ok_or_else(|| {
        SpecError::invalid(format!("{}: metadata", doc.origin), "a Pod needs metadata")
    })?;
    let meta: ObjectMeta = serde_json::from_value(metadata.clone())
        .map_err(|e| SpecError::invalid(format!("{}: metadata", doc.origin), e.to_string()))?;
    if meta.name.is_empty() {
        return Err(SpecError::invalid(
            format!("{}: metadata.name", doc.origin),
            "a Pod needs a name",
        ));
    }
    Ok(Pod {
        namespace: meta
            .namespace
            .filter(|ns| !ns.is_empty())
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string()),
        name: meta.name,
        uid: meta.uid.filter(|u| !u.is_empty()),
        annotations: meta.annotations,
    })
}

/// The single Pod among `docs`.
pub fn single_pod(docs: &[Document], origin: &str) -> Result<Pod, SpecError> {
    let pods: Vec<&Document> = docs.iter().filter(|d| d.kind() == Some("Pod")).collect();
    match pods.as_slice() {
        [one] => pod(one),
        pods => Err(SpecError::PodCount {
            origin: origin.to_string(),
            found: pods.len(),
        }),
    }
}

/// NetworkAttachmentDefinitions among `docs`, keyed by (namespace, name); a
/// NAD that names no namespace lands in `default`, as with kubectl.
pub fn nads(
    docs: &[Document],
) -> Result<BTreeMap<(String, String), NetworkAttachmentDefinition>, SpecError> {
    let mut out = BTreeMap::new();
    for doc in docs
        .iter()
        .filter(|d| d.kind() == Some("NetworkAttachmentDefinition"))
    {
        let nad = NetworkAttachmentDefinition::from_value(&doc.value)
            .map_err(|e| e.within(doc.origin.as_str()))?;
        let r = nad.network_ref(DEFAULT_NAMESPACE);
        out.insert((r.namespace, r.name), nad);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_stream_with_list_and_empty_documents() {
        let text = "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\n---\n---\n\
                    apiVersion: v1\nkind: List\nitems:\n- {kind: A}\n- {kind: B}\n";
        let docs = parse_documents(text, "x.yaml").unwrap();
        let kinds: Vec<_> = docs.iter().map(|d| d.kind().unwrap()).collect();
        assert_eq!(kinds, ["Pod", "A", "B"]);
        assert_eq!(docs[1].origin, "x.yaml (document 3) items[0]");
    }

    #[test]
    fn json_object_and_array() {
        assert_eq!(parse_documents(r#"{"kind":"Pod"}"#, "a").unwrap().len(), 1);
        assert_eq!(
            parse_documents(r#"[{"kind":"A"},{"kind":"B"}]"#, "a")
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn bad_documents_name_file_and_reason() {
        let err = parse_documents("{\"kind\": ", "pod.json").unwrap_err();
        assert!(
            matches!(&err, SpecError::Decode { what, reason }
                if what == "pod.json" && reason.starts_with("invalid JSON")),
            "{err:?}"
        );
        let err = parse_documents("a: [1,\n", "pod.yaml").unwrap_err();
        assert!(
            matches!(&err, SpecError::Decode { what, reason }
                if what == "pod.yaml (document 1)" && reason.starts_with("invalid YAML")),
            "{err:?}"
        );
        let err = parse_documents("- 1\n- 2\n", "x.yaml").unwrap_err();
        assert!(
            matches!(&err, SpecError::Invalid { reason, .. } if reason.contains("must be an object")),
            "{err:?}"
        );
        let err = parse_documents("kind: List\n", "l.yaml").unwrap_err();
        assert!(
            matches!(&err, SpecError::Invalid { field, .. } if field == "l.yaml (document 1): items"),
            "{err:?}"
        );
    }

    #[test]
    fn pod_defaults_and_errors() {
        let docs = parse_documents(
            "kind: Pod\nmetadata:\n  name: p\n  annotations: {a: b}\n",
            "p.yaml",
        )
        .unwrap();
        let pod = single_pod(&docs, "p.yaml").unwrap();
        assert_eq!(pod.namespace, "default");
        assert_eq!(pod.annotations["a"], "b");
        assert!(matches!(
            single_pod(&[], "none.yaml"),
            Err(SpecError::PodCount { origin, found: 0 }) if origin == "none.yaml"
        ));
        let docs = parse_documents("kind: Pod\nmetadata: {}\n", "p.yaml").unwrap();
        assert!(single_pod(&docs, "p.yaml").is_err());
    }
}
