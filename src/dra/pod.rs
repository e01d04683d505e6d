//! The ResourceClaims a pod names itself: `spec.resourceClaims[].resourceClaimName`
//! (a claim made beforehand) and `status.resourceClaimStatuses[].resourceClaimName`
//! (the claim made for the pod from a ResourceClaimTemplate, or `null`
//! when none was needed), where the API server keeps them (1.26+; a 1.20
//! server drops both fields, and the claims' `status.reservedFor` names
//! the pod in any case: [`super::pods_claims`]).

use serde::Deserialize;
use serde_json::Value;

use super::error::DraError;
use crate::cni::casefold;
use crate::netattach::go_json::{decode_failure, GoList, GoObj, GoStr};

/// A claim the pod names, and where (for errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedClaim {
    pub name: String,
    /// `status.resourceClaimStatuses[0].resourceClaimName`.
    pub field: String,
}

#[derive(Deserialize)]
struct WirePod {
    spec: Option<GoObj<WireSpec>>,
    status: Option<GoObj<WireStatus>>,
}

#[derive(Deserialize)]
struct WireSpec {
    #[serde(rename = "resourceClaims", default)]
    resource_claims: GoList<WireClaimRef>,
}

#[derive(Deserialize)]
struct WireStatus {
    #[serde(rename = "resourceClaimStatuses", default)]
    resource_claim_statuses: GoList<WireClaimRef>,
}

/// A `spec.resourceClaims[]` (PodResourceClaim) or
/// `status.resourceClaimStatuses[]` (PodResourceClaimStatus) entry: both
/// have `name` and the claim's `resourceClaimName`.
#[derive(Deserialize)]
struct WireClaimRef {
    #[allow(dead_code)]
    name: GoStr,
    #[serde(rename = "resourceClaimName")]
    resource_claim_name: Option<GoStr>,
}

/// The claims pod `v` (JSON as the API server serves it) names, each once,
/// in the order it names them; `pod` (`namespace/name`) names it in errors.
pub fn named_claims(v: &Value, pod: &str) -> Result<Vec<NamedClaim>, DraError> {
    let wire: WirePod = casefold::from_value_at(v).map_err(|e| {
        let (field, reason) = decode_failure(e, v, "pod");
        DraError::object(format!("pod {pod}"), field, reason)
    })?;
    let spec = wire.spec.map(|s| s.0.resource_claims.0).unwrap_or_default();
    let status = wire
        .status
        .map(|s| s.0.resource_claim_statuses.0)
        .unwrap_or_default();
    let mut named: Vec<NamedClaim> = Vec::new();
    let listed = [
        ("spec.resourceClaims", spec),
        ("status.resourceClaimStatuses", status),
    ];
    for (list, refs) in listed {
        for (i, r) in refs.into_iter().enumerate() {
            let Some(name) = r.resource_claim_name.map(String::from) else {
                continue;
            };
            if name.is_empty() || named.iter().any(|n| n.name == name) {
                continue;
            }
            named.push(NamedClaim {
                name,
                field: format!("{list}[{i}].resourceClaimName"),
            });
        }
    }
    Ok(named)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What a 1.34 API server serves for a pod with a claim of its own and
    /// one made from a template (the 1.20 test server drops these fields,
    /// so only this test reads them).
    #[test]
    fn the_pods_own_claim_fields() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "x",
                     "resources": {"claims": [{"name": "vfs"}]}}],
                     "resourceClaims": [
                        {"name": "shared", "resourceClaimName": "vf-shared"},
                        {"name": "vfs", "resourceClaimTemplateName": "two-vfs"}]},
            "status": {"phase": "Pending", "resourceClaimStatuses": [
                {"name": "vfs", "resourceClaimName": "p-vfs-x7k2q"},
                {"name": "none", "resourceClaimName": null},
                {"name": "shared", "resourceClaimName": "vf-shared"}]},
        });
        assert_eq!(
            named_claims(&pod, "ns/p").unwrap(),
            [
                NamedClaim {
                    name: "vf-shared".into(),
                    field: "spec.resourceClaims[0].resourceClaimName".into()
                },
                NamedClaim {
                    name: "p-vfs-x7k2q".into(),
                    field: "status.resourceClaimStatuses[0].resourceClaimName".into()
                },
            ]
        );
        // A pod of an API server before DRA, or without claims.
        let old = json!({"metadata": {"name": "p"}, "spec": {"containers": []}, "status": {}});
        assert!(named_claims(&old, "ns/p").unwrap().is_empty());
        let bad =
            json!({"status": {"resourceClaimStatuses": [{"name": "x", "resourceClaimName": 3}]}});
        assert_eq!(
            named_claims(&bad, "ns/p").unwrap_err().to_string(),
            "pod ns/p status.resourceClaimStatuses[0].resourceClaimName: must be a string, got 3"
        );
    }
}
