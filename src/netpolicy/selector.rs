//! Kubernetes' `LabelSelector` (`metav1.LabelSelector`), as
//! NetworkPolicy's `podSelector` and `namespaceSelector` use it: every
//! `matchLabels` pair and every `matchExpressions` requirement must hold
//! (AND); the empty selector matches everything.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::PolicyError;

/// A label selector as the API server stores it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<Requirement>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl LabelSelector {
    /// Whether `labels` satisfy every term.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.holds(labels))
    }

    /// The API server's own checks (`ValidateLabelSelector`): `In` and
    /// `NotIn` need values, `Exists` and `DoesNotExist` take none.
    pub fn validate(&self, field: &str) -> Result<(), PolicyError> {
        for (i, r) in self.match_expressions.iter().enumerate() {
            let needs_values = matches!(r.operator, Operator::In | Operator::NotIn);
            if needs_values == r.values.is_empty() {
                return Err(PolicyError::new(
                    format!("{field}.matchExpressions[{i}].values"),
                    if needs_values {
                        format!("{:?} needs at least one value", r.operator)
                    } else {
                        format!("{:?} takes no values", r.operator)
                    },
                ));
            }
        }
        Ok(())
    }

    /// The selector as the API server's `labelSelector` parameter reads it,
    /// for a watch that selects on the server (issue 46); `None` when it
    /// matches no pod at all.
    ///
    /// The API server refuses a label key or value outside label syntax,
    /// and no pod has such a label, so a term naming one is turned into
    /// what it means for real pods: `In` and `matchLabels` cannot hold (the
    /// selector matches nothing), `NotIn` excludes nothing by it, `Exists`
    /// cannot hold and `DoesNotExist` always holds. The result selects
    /// exactly the pods [`LabelSelector::matches`] matches.
    pub fn to_query(&self) -> Option<String> {
        let mut terms = Vec::new();
        for (key, value) in &self.match_labels {
            if !is_label_key(key) || !is_label_value(value) {
                return None;
            }
            terms.push(format!("{key}={value}"));
        }
        for r in &self.match_expressions {
            let valid_key = is_label_key(&r.key);
            let values: Vec<&str> = r
                .values
                .iter()
                .map(String::as_str)
                .filter(|v| is_label_value(v))
                .collect();
            let key = &r.key;
            match r.operator {
                Operator::In if !valid_key || values.is_empty() => return None,
                Operator::In => terms.push(format!("{key} in ({})", values.join(","))),
                Operator::NotIn if !valid_key || values.is_empty() => {}
                Operator::NotIn => terms.push(format!("{key} notin ({})", values.join(","))),
                Operator::Exists if !valid_key => return None,
                Operator::Exists => terms.push(key.clone()),
                Operator::DoesNotExist if !valid_key => {}
                Operator::DoesNotExist => terms.push(format!("!{key}")),
            }
        }
        Some(terms.join(","))
    }
}

/// A label's name part or value: up to 63 letters, digits, `-`, `_` and
/// `.`, beginning and ending with a letter or digit (a value may be empty).
fn is_label_value(v: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    v.is_empty()
        || (v.len() <= 63
            && edge(v.chars().next())
            && edge(v.chars().last())
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
}

/// A label key: a name, after an optional DNS subdomain prefix and `/`.
fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, k),
    };
    let subdomain = |p: &str| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part.len() <= 63
                    && !part.starts_with('-')
                    && !part.ends_with('-')
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    };
    !name.is_empty() && is_label_value(name) && prefix.is_none_or(subdomain)
}

impl Requirement {
    fn holds(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            // A label that is not there is not in the set.
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn selector(v: serde_json::Value) -> LabelSelector {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn empty_matches_all_and_terms_are_anded() {
        assert!(LabelSelector::default().matches(&labels(&[])));
        let s = selector(json!({"matchLabels": {"app": "db"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}));
        assert!(s.matches(&labels(&[("app", "db"), ("tier", "b")])));
        assert!(!s.matches(&labels(&[("app", "db"), ("tier", "c")])));
        assert!(!s.matches(&labels(&[("tier", "a")])));
    }

    #[test]
    fn operators_as_kubernetes_reads_them() {
        let not_in = selector(
            json!({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}),
        );
        assert!(not_in.matches(&labels(&[])));
        assert!(not_in.matches(&labels(&[("env", "dev")])));
        assert!(!not_in.matches(&labels(&[("env", "prod")])));
        let exists = selector(json!({"matchExpressions": [{"key": "env", "operator": "Exists"}]}));
        assert!(exists.matches(&labels(&[("env", "")])));
        assert!(!exists.matches(&labels(&[])));
        let absent =
            selector(json!({"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]}));
        assert!(absent.matches(&labels(&[])));
    }

    /// Issue 46: the server selects exactly what `matches` matches.
    #[test]
    fn a_selector_as_the_api_servers_query() {
        assert_eq!(LabelSelector::default().to_query().as_deref(), Some(""));
        let s = selector(
            json!({"matchLabels": {"app": "db", "example.com/tier": "a"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["dev", "qa"]},
                {"key": "zone", "operator": "NotIn", "values": ["x"]},
                {"key": "team", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist"}]}),
        );
        assert_eq!(
            s.to_query().as_deref(),
            Some("app=db,example.com/tier=a,env in (dev,qa),zone notin (x),team,!legacy")
        );
        // Terms outside label syntax, as they hold for real pods.
        let never = selector(json!({"matchLabels": {"a,b": "c"}}));
        assert_eq!(never.to_query(), None);
        let never = selector(
            json!({"matchExpressions": [{"key": "env", "operator": "In", "values": ["a b"]}]}),
        );
        assert_eq!(never.to_query(), None);
        let some = selector(json!({"matchExpressions": [
            {"key": "env", "operator": "In", "values": ["a b", "dev"]},
            {"key": "bad key", "operator": "DoesNotExist"},
            {"key": "zone", "operator": "NotIn", "values": ["(x)"]}]}));
        assert_eq!(some.to_query().as_deref(), Some("env in (dev)"));
        let exists = selector(json!({"matchExpressions": [{"key": "a=b", "operator": "Exists"}]}));
        assert_eq!(exists.to_query(), None);
        assert!(is_label_key("k8s.v1.cni.cncf.io/x_y"));
        assert!(!is_label_key("Example.com/x"));
        assert!(!is_label_key("/x"));
        assert!(is_label_value(""));
        assert!(!is_label_value("-a"));
    }

    #[test]
    fn values_the_operator_needs_or_refuses_name_the_field() {
        let e = selector(json!({"matchExpressions": [{"key": "env", "operator": "In"}]}))
            .validate("spec.podSelector")
            .unwrap_err();
        assert_eq!(e.field, "spec.podSelector.matchExpressions[0].values");
        let e = selector(
            json!({"matchExpressions": [{"key": "env", "operator": "Exists", "values": ["x"]}]}),
        )
        .validate("spec.podSelector")
        .unwrap_err();
        assert!(e.reason.contains("takes no values"), "{e}");
    }
}
