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
