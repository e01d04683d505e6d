//! What is wrong with a Kubernetes object or manifest plexus reads (a NAD,
//! an IPAMClaim, a Pod, the selection and status annotations), typed. The
//! CNI code of each failure is chosen in one place, `From<SpecError> for
//! CniError`, where plexus answers.

use std::fmt::Display;

use crate::cni::error::{prefix_path, CniError};

use super::selection::{AnnotationError, NETWORKS_ANNOTATION};

/// Every variant displays as the CNI error's `details`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A key of an object or a manifest is invalid (`metadata.name`,
    /// `spec.interface`, `p.yaml: metadata`).
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    /// Content that could not be decoded at all (invalid JSON or YAML, the
    /// network-status annotation).
    #[error("{what}: {reason}")]
    Decode { what: String, reason: String },
    /// The manifest `origin` holds `found` Pods where one is wanted.
    #[error("{origin}: {}", pod_count(*found))]
    PodCount { origin: String, found: usize },
    /// A manifest file or directory could not be read.
    #[error("{what}: {reason}")]
    Io { what: String, reason: String },
    /// The selection annotation is invalid.
    #[error("{}", annotation_path(.0))]
    Annotation(#[from] AnnotationError),
    /// A decoding error of the protocol crate (a network-status entry read
    /// through its Go-style key folding), already a CNI error with its code.
    #[error("{}", .0.details)]
    Cni(#[from] CniError),
}

impl SpecError {
    pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> SpecError {
        SpecError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn decode(what: impl Into<String>, reason: impl Into<String>) -> SpecError {
        SpecError::Decode {
            what: what.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn io(what: impl Into<String>, reason: impl Display) -> SpecError {
        SpecError::Io {
            what: what.into(),
            reason: reason.to_string(),
        }
    }

    /// The error found inside `outer` (a file, an object, a list entry):
    /// its path gets `outer` in front, as [`CniError::within`] does.
    pub fn within(self, outer: impl AsRef<str>) -> SpecError {
        let outer = outer.as_ref();
        let mut e = match self {
            // Inside something else, it is no longer the annotation's own
            // error: its path starts with `outer`.
            SpecError::Annotation(e) => SpecError::decode(annotation_field(&e), e.reason),
            SpecError::Cni(e) => return SpecError::Cni(e.within(outer)),
            e => e,
        };
        if let SpecError::Invalid { field: path, .. }
        | SpecError::Decode { what: path, .. }
        | SpecError::Io { what: path, .. }
        | SpecError::PodCount { origin: path, .. } = &mut e
        {
            prefix_path(path, outer);
        }
        e
    }
}

/// Where in the selection annotation the error is, starting with the
/// annotation's name.
fn annotation_field(e: &AnnotationError) -> String {
    if e.field == NETWORKS_ANNOTATION {
        e.field.clone()
    } else if e.field.starts_with('[') {
        format!("{NETWORKS_ANNOTATION}{}", e.field)
    } else {
        format!("{NETWORKS_ANNOTATION} item {:?}", e.field)
    }
}

fn pod_count(found: usize) -> String {
    match found {
        0 => "no document of kind Pod".to_string(),
        n => format!("{n} documents of kind Pod; give exactly one"),
    }
}

fn annotation_path(e: &AnnotationError) -> String {
    format!("{}: {}", annotation_field(e), e.reason)
}

impl From<SpecError> for CniError {
    fn from(e: SpecError) -> CniError {
        match e {
            SpecError::Invalid { field, reason } => CniError::invalid_config(field, reason),
            SpecError::PodCount { origin, found } => {
                CniError::invalid_config(origin, pod_count(found))
            }
            SpecError::Decode { what, reason } => CniError::decode(what, reason),
            SpecError::Io { what, reason } => CniError::io(what, reason),
            // A decode error (code 6) whose details start with the annotation name.
            SpecError::Annotation(e) => CniError::decode(annotation_field(&e), e.reason),
            SpecError::Cni(e) => e,
        }
    }
}

/// For tests: `e` answers the runtime with `code`, its own text as the
/// details.
#[cfg(test)]
#[track_caller]
pub(crate) fn assert_answers_as<E>(e: &E, code: crate::cni::error::ErrorCode)
where
    E: Clone + std::fmt::Debug + std::fmt::Display + Into<CniError>,
{
    let cni: CniError = e.clone().into();
    assert_eq!((cni.code, cni.details), (code, e.to_string()), "{e:?}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::error::ErrorCode;
    use crate::netattach::selection::parse_selection_annotation;

    #[test]
    fn each_failure_has_one_code() {
        let annotation = parse_selection_annotation("net-b@").unwrap_err();
        let cases = [
            (
                SpecError::invalid("metadata.name", "required"),
                ErrorCode::InvalidConfig,
            ),
            (
                SpecError::decode("p.yaml", "invalid YAML"),
                ErrorCode::Decode,
            ),
            (SpecError::io("/m", "ENOENT"), ErrorCode::Io),
            (
                SpecError::PodCount {
                    origin: "p.yaml".into(),
                    found: 2,
                },
                ErrorCode::InvalidConfig,
            ),
            (SpecError::from(annotation), ErrorCode::Decode),
        ];
        for (e, code) in cases {
            assert_answers_as(&e, code);
        }
        // A protocol error passes through unchanged.
        let inner = CniError::decode("mtu", "must be an unsigned integer");
        assert_eq!(CniError::from(SpecError::from(inner.clone())), inner);
    }

    #[test]
    fn within_prefixes_the_path_as_cni_errors_do() {
        let inner = || SpecError::invalid("metadata.name", "required");
        let cni = CniError::from(inner()).within("f.yaml");
        assert_eq!(CniError::from(inner().within("f.yaml")), cni);
        let indexed = SpecError::decode("[1]", "must be an object");
        assert_eq!(
            indexed.within("status").to_string(),
            "status[1]: must be an object"
        );
        let annotation = SpecError::from(parse_selection_annotation("net-b@").unwrap_err());
        assert_eq!(
            CniError::from(annotation.clone().within("pod")),
            CniError::from(annotation).within("pod")
        );
    }
}
