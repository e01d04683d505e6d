//! What goes wrong reading or writing the cluster, typed: the Kubernetes
//! client's errors with the object and the verb's outcome they concern, so
//! callers (readiness, DEL without the API server) match on the kind of
//! failure. The CNI code of each is chosen in one place,
//! `From<ClusterError> for CniError`, where plexus answers.

use std::path::PathBuf;
use std::time::Duration;

use crate::cni::error::{codes, CniError, ErrorCode};
use crate::dra::DraError;
use crate::netattach::error::SpecError;

/// A request to the API server: its verb and what it was about
/// (`pod ns/name`, `IPAMClaim ns/name status`, ...), which errors name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiRequest {
    pub verb: Verb,
    pub object: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    Patch,
    Create,
    Update,
    Delete,
}

impl ApiRequest {
    pub(crate) fn new(verb: Verb, object: impl Into<String>) -> ApiRequest {
        ApiRequest {
            verb,
            object: object.into(),
        }
    }
}

/// Every variant displays as the CNI error's `details`, which name the
/// object (not the verb: the object's wording says it, `... status`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The API server refused the request for want of permission (403).
    /// `reason` as kubectl prints it (`forbidden: User "..." cannot get
    /// resource "pods" ...`).
    #[error("{}: {reason}", request.object)]
    Forbidden { request: ApiRequest, reason: String },
    /// The API server refused the request otherwise (404 on a write, 422
    /// invalid, ...): asking again does not mend it.
    #[error("{}: {reason}", request.object)]
    Refused {
        request: ApiRequest,
        status: u16,
        reason: String,
    },
    /// The API server answered that it cannot serve now (429, 5xx).
    #[error("{}: {reason}", request.object)]
    Unavailable {
        request: ApiRequest,
        status: u16,
        reason: String,
    },
    /// No answer at all, the API server down or unreachable: the
    /// connection failed (the client's error chain).
    #[error("{}: {reason}", request.object)]
    Unreachable { request: ApiRequest, reason: String },
    /// No answer within the request's bound (`apiTimeout`).
    #[error(
        "{}: no answer from the API server within {bound:?} (apiTimeout)",
        request.object
    )]
    Timeout {
        request: ApiRequest,
        bound: Duration,
    },
    /// The kubeconfig cannot be read or gives no usable client.
    #[error("kubeconfig {}: {reason}", path.display())]
    Kubeconfig { path: PathBuf, reason: String },
    /// The daemon was asked about a pod another node runs.
    #[error(
        "{object} is scheduled to node {}, and this daemon serves node {serves} only",
        node.as_deref().unwrap_or("(none)")
    )]
    PodOnOtherNode {
        object: String,
        node: Option<String>,
        serves: String,
    },
    /// The pod kubelet's `CNI_ARGS` name does not exist on the API server.
    #[error("pod {namespace}/{name} (CNI_ARGS K8S_POD_NAMESPACE, K8S_POD_NAME) does not exist")]
    PodMissing { namespace: String, name: String },
    /// The pod by that name is another one than kubelet's (its uid differs).
    #[error(
        "pod {namespace}/{name}: CNI_ARGS K8S_POD_UID is {want} but the pod's uid is {have}: \
         the pod was deleted and re-created"
    )]
    PodRecreated {
        namespace: String,
        name: String,
        want: String,
        have: String,
    },
    /// A local means of the client failed (its runtime, the outbox).
    #[error("{what}: {reason}")]
    Io { what: String, reason: String },
    /// An object the API server returned is not JSON plexus can read.
    #[error("{object}: {reason}")]
    Decode { object: String, reason: String },
    /// An object of the cluster (from the API server or a manifest
    /// directory) is not a valid one of its kind.
    #[error(transparent)]
    Object(#[from] SpecError),
    /// A ResourceClaim or ResourceSlice (DRA) the pod's devices come from
    /// is not one plexus can use.
    #[error(transparent)]
    Dra(#[from] DraError),
}

impl ClusterError {
    /// A failed request, as kube-rs reports it.
    pub(super) fn from_kube(request: ApiRequest, e: kube::Error) -> ClusterError {
        match e {
            kube::Error::Api(status) => {
                let code = status.code;
                let reason = if status.reason.is_empty() {
                    status.message.clone()
                } else {
                    // "Forbidden" -> "forbidden: <message>", as kubectl prints it.
                    format!("{}: {}", status.reason.to_lowercase(), status.message)
                };
                match code {
                    403 => ClusterError::Forbidden { request, reason },
                    429 | 500.. => ClusterError::Unavailable {
                        request,
                        status: code,
                        reason,
                    },
                    _ => ClusterError::Refused {
                        request,
                        status: code,
                        reason,
                    },
                }
            }
            other => ClusterError::Unreachable {
                request,
                reason: error_chain(&other),
            },
        }
    }

    pub(super) fn io(what: impl Into<String>, reason: impl std::fmt::Display) -> ClusterError {
        ClusterError::Io {
            what: what.into(),
            reason: reason.to_string(),
        }
    }

    /// The HTTP status, when the API server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClusterError::Forbidden { .. } => Some(403),
            ClusterError::Refused { status, .. } | ClusterError::Unavailable { status, .. } => {
                Some(*status)
            }
            _ => None,
        }
    }

    /// The API server gave no answer, or not now: worth asking again later.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ClusterError::Unavailable { .. }
                | ClusterError::Unreachable { .. }
                | ClusterError::Timeout { .. }
        )
    }
}

/// An error and its sources on one line: kube's outer errors say little
/// ("failed to connect") without the inner ones ("connection refused").
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

impl From<ClusterError> for CniError {
    fn from(e: ClusterError) -> CniError {
        let details = e.to_string();
        match e {
            // What may pass: code 11, try again later.
            ClusterError::Unavailable { .. }
            | ClusterError::Unreachable { .. }
            | ClusterError::Timeout { .. } => CniError::new(
                ErrorCode::TryAgainLater,
                "Kubernetes API request failed",
                details,
            ),
            ClusterError::Forbidden { .. } | ClusterError::Refused { .. } => CniError::plugin(
                codes::KUBERNETES_API,
                "Kubernetes API request failed",
                details,
            ),
            ClusterError::Kubeconfig { .. } => {
                CniError::new(ErrorCode::InvalidConfig, "invalid kubeconfig", details)
            }
            ClusterError::PodOnOtherNode { .. } => {
                CniError::new(ErrorCode::UnknownContainer, "pod not on this node", details)
            }
            ClusterError::PodMissing { .. } | ClusterError::PodRecreated { .. } => {
                CniError::new(ErrorCode::UnknownContainer, "pod unknown", details)
            }
            ClusterError::Io { what, reason } => CniError::io(what, reason),
            ClusterError::Decode { object, reason } => CniError::decode(object, reason),
            ClusterError::Object(e) => e.into(),
            ClusterError::Dra(e) => e.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netattach::error::assert_answers_as;

    #[test]
    fn each_failure_has_one_code() {
        let request = || ApiRequest::new(Verb::Get, "pod ns/p");
        let object = || "pod ns/p".to_string();
        let later = ErrorCode::TryAgainLater;
        let refused = ErrorCode::Plugin(codes::KUBERNETES_API);
        let cases = [
            (
                ClusterError::Forbidden {
                    request: request(),
                    reason: "forbidden: no".into(),
                },
                refused,
            ),
            (
                ClusterError::Refused {
                    request: request(),
                    status: 422,
                    reason: "invalid: no".into(),
                },
                refused,
            ),
            (
                ClusterError::Unavailable {
                    request: request(),
                    status: 503,
                    reason: "x".into(),
                },
                later,
            ),
            (
                ClusterError::Unreachable {
                    request: request(),
                    reason: "connection refused".into(),
                },
                later,
            ),
            (
                ClusterError::Timeout {
                    request: request(),
                    bound: Duration::from_secs(1),
                },
                later,
            ),
            (
                ClusterError::Kubeconfig {
                    path: "/k".into(),
                    reason: "x".into(),
                },
                ErrorCode::InvalidConfig,
            ),
            (
                ClusterError::PodOnOtherNode {
                    object: object(),
                    node: None,
                    serves: "n".into(),
                },
                ErrorCode::UnknownContainer,
            ),
            (
                ClusterError::PodMissing {
                    namespace: "ns".into(),
                    name: "p".into(),
                },
                ErrorCode::UnknownContainer,
            ),
            (
                ClusterError::PodRecreated {
                    namespace: "ns".into(),
                    name: "p".into(),
                    want: "u1".into(),
                    have: "u2".into(),
                },
                ErrorCode::UnknownContainer,
            ),
            (ClusterError::io("tokio runtime", "x"), ErrorCode::Io),
            (
                ClusterError::Decode {
                    object: object(),
                    reason: "x".into(),
                },
                ErrorCode::Decode,
            ),
            (
                ClusterError::Object(SpecError::invalid("metadata.name", "required")),
                ErrorCode::InvalidConfig,
            ),
        ];
        for (e, code) in cases {
            assert_eq!(e.is_transient(), code == later, "{e:?}");
            assert_answers_as(&e, code);
        }
    }

    #[test]
    fn kube_errors_are_typed_by_status() {
        let api = |code: u16| {
            kube::Error::Api(
                kube::core::Status::failure("m", "Forbidden")
                    .with_code(code)
                    .boxed(),
            )
        };
        let get = || ApiRequest::new(Verb::Get, "pod ns/p");
        let forbidden = ClusterError::from_kube(get(), api(403));
        assert!(
            matches!(&forbidden, ClusterError::Forbidden { request, reason }
                if reason == "forbidden: m" && request.verb == Verb::Get),
            "{forbidden:?}"
        );
        assert_eq!(forbidden.to_string(), "pod ns/p: forbidden: m");
        assert!(matches!(
            ClusterError::from_kube(get(), api(422)),
            ClusterError::Refused { status: 422, .. }
        ));
        assert!(matches!(
            ClusterError::from_kube(get(), api(503)),
            ClusterError::Unavailable { status: 503, .. }
        ));
        assert!(matches!(
            ClusterError::from_kube(get(), api(429)),
            ClusterError::Unavailable { status: 429, .. }
        ));
    }
}
