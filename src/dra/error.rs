//! What is wrong with a ResourceClaim, a ResourceSlice or a pod's claim
//! fields as plexus reads them for the Multus contract, typed. Each names
//! the object and the field (`ResourceClaim ns/x
//! status.allocation.devices.results[0].device: required`); the CNI code
//! is chosen in one place, `From<DraError> for CniError`.

use crate::cni::error::{CniError, ErrorCode};
use crate::netattach::error::SpecError;

/// Every variant displays as the CNI error's `details`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DraError {
    /// A field of an object is missing, of the wrong kind, or says what
    /// plexus cannot use (a claim reserved for the pod but not allocated).
    #[error("{object} {field}: {reason}")]
    Object {
        /// `ResourceClaim ns/name`, `ResourceSlice name`, `pod ns/name`.
        object: String,
        field: String,
        reason: String,
    },
    /// A claim the pod names (`spec.resourceClaims`,
    /// `status.resourceClaimStatuses`) is not on the API server.
    #[error("ResourceClaim {claim}, named by pod {pod} {field}, does not exist")]
    ClaimMissing {
        claim: String,
        pod: String,
        field: String,
    },
}

impl DraError {
    pub(crate) fn object(
        object: impl Into<String>,
        field: impl Into<String>,
        reason: impl Into<String>,
    ) -> DraError {
        DraError::Object {
            object: object.into(),
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// A decoding failure of `object` from the spec model's decoder.
    pub(crate) fn of_spec(object: &str, e: SpecError) -> DraError {
        match e {
            SpecError::Invalid { field, reason } => DraError::object(object, field, reason),
            SpecError::Decode { what, reason } => DraError::object(object, what, reason),
            e => DraError::object(object, "", e.to_string()),
        }
    }
}

impl From<DraError> for CniError {
    fn from(e: DraError) -> CniError {
        let details = e.to_string();
        match e {
            DraError::Object { .. } => CniError::new(
                ErrorCode::Decode,
                "invalid ResourceClaim or ResourceSlice",
                details,
            ),
            // kubelet does not start a pod whose claims are missing: the
            // API server will have it, or the pod is gone.
            DraError::ClaimMissing { .. } => {
                CniError::new(ErrorCode::TryAgainLater, "ResourceClaim not found", details)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netattach::error::assert_answers_as;

    #[test]
    fn each_failure_has_one_code_and_names_the_field() {
        let e = DraError::object(
            "ResourceClaim ns/x",
            "status.allocation.devices.results[0].device",
            "required",
        );
        assert_eq!(
            e.to_string(),
            "ResourceClaim ns/x status.allocation.devices.results[0].device: required"
        );
        assert_answers_as(&e, ErrorCode::Decode);
        let e = DraError::ClaimMissing {
            claim: "ns/x".into(),
            pod: "ns/p".into(),
            field: "status.resourceClaimStatuses[0].resourceClaimName".into(),
        };
        assert_answers_as(&e, ErrorCode::TryAgainLater);
    }
}
