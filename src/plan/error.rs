//! What goes wrong planning a pod's attachments, typed: what the planner
//! finds itself (a network that does not resolve, a selection it must
//! reject, a device or claim it cannot give) and what it calls (the cluster,
//! the spec model, the protocol crate's config parser). The CNI code of
//! each failure is chosen in one place, `From<PlanError> for CniError`,
//! where plexus answers.

use std::path::PathBuf;
use std::time::Duration;

use crate::cluster::ClusterError;
use crate::cni::error::prefix_path;
use crate::cni::error::{codes, CniError, ErrorCode};
use crate::cni::names::IfName;
use crate::netattach::error::SpecError;
use crate::netattach::names::NetworkRef;
use crate::netattach::selection::AnnotationError;

use crate::netattach::selection::{DEFAULT_NETWORK_ANNOTATION, NETWORKS_ANNOTATION};
use plexus_podresources as podresources;

/// Every variant displays as the CNI error's `details`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A key of a configuration, of an annotation or of a network given as
    /// a file is invalid (`plugins[0].args.plexus`).
    #[error("{field}: {reason}")]
    Config { field: String, reason: String },
    /// The pod's selection annotation is invalid and `strictAnnotations`
    /// is on (else the planner warns and attaches the default network only).
    #[error(
        "{}: {} (strictAnnotations is on)",
        annotation_field(&.0.field),
        .0.reason
    )]
    StrictSelection(AnnotationError),
    /// The pod's default-network annotation is invalid.
    #[error("annotation {DEFAULT_NETWORK_ANNOTATION}: {0}")]
    DefaultNetworkAnnotation(AnnotationError),
    /// The pod's default-network annotation names `found` networks, not one.
    #[error(
        "annotation {DEFAULT_NETWORK_ANNOTATION}: must name exactly one network, names {found}"
    )]
    DefaultNetworkCount { found: usize },
    /// A network the pod, the configuration or a default names does not
    /// resolve (multi-net-spec §3.4.1 rule 4).
    #[error("{0}")]
    NetworkNotFound(NotFound),
    /// Two attachments of the pod ask for one interface name.
    #[error(
        "{label}.interface: {ifname:?} is already used by a previous attachment of this pod \
         (multi-net-spec §4.1.2.1.5)"
    )]
    InterfaceTaken { label: String, ifname: IfName },
    /// `namespaceIsolation` keeps the pod from a network of another namespace.
    #[error(
        "{label}: pod {pod} may not use {network} (namespaceIsolation: only its own namespace \
         and {global:?}; multi-net-spec §7.4)"
    )]
    NetworkNotAllowed {
        label: String,
        /// `namespace/name`.
        pod: String,
        network: NetworkRef,
        global: Vec<String>,
    },
    /// A selection gives both `ips` and `ipam-claim-reference`.
    #[error(
        "{network}: \"ips\" and \"ipam-claim-reference\" cannot both be given \
         (multi-net-spec §4.1.2.1.11)"
    )]
    ConflictingKeys { network: String },
    /// A selection asks for what no plugin of the network declares.
    #[error(
        "{network}: the selection asks for {key:?} but no plugin of the network declares \
         capabilities.{capability} (multi-net-spec {section})"
    )]
    CapabilityMissing {
        network: String,
        key: String,
        capability: String,
        section: String,
    },
    /// kubelet's PodResources API could not say which device the pod has.
    /// `need`: the attachment, its network and resource.
    #[error(
        "{need}, whose device comes from kubelet's PodResources API (podResourcesSocket, \
         podResourcesTimeout): {source}"
    )]
    PodResources {
        need: String,
        source: podresources::Error,
    },
    /// The pod's ResourceClaims (DRA) could not be read, or one of them or
    /// of the node's ResourceSlices is not usable. `need`: the attachment,
    /// its network and resource.
    #[error("{need}, whose device may come from the pod's ResourceClaims (DRA): {source}")]
    Claims { need: String, source: ClusterError },
    /// kubelet and the pod's ResourceClaims allocated the pod fewer devices
    /// of a resource than the attachments backed by it.
    #[error(
        "{need}, but kubelet allocated {allocated} device(s) of it to pod {pod} for {wanted} \
         attachment(s) backed by it (device plugins, and ResourceClaims' devices published \
         with k8s.cni.cncf.io/resourceName {resource}); each takes one, so the pod's \
         containers must request {wanted}: {resource} in their resources, or its \
         ResourceClaims be allocated {wanted} such devices{}",
        skipped_claimed(skipped)
    )]
    TooFewDevices {
        need: String,
        /// `namespace/name`.
        pod: String,
        resource: String,
        allocated: usize,
        wanted: usize,
        /// Devices of the pod's ResourceClaims left out, and why.
        skipped: Vec<String>,
    },
    /// The IPAMClaim a selection references cannot be used.
    #[error("{network}: ipam-claim-reference {reference:?}: {problem} (multi-net-spec §8)")]
    ClaimRejected {
        network: String,
        reference: String,
        problem: ClaimProblem,
    },
    /// A file of the planner's (the claim book, the auxiliary chain's
    /// directory) could not be read or written.
    #[error("{what}: {reason}")]
    Io { what: String, reason: String },
    /// A file the planner reads is not JSON.
    #[error("{what}: {reason}")]
    Decode { what: String, reason: String },
    /// ADD waited `readinessTimeout` and the cluster network is still not
    /// ready (multi-net-spec §6.1.2).
    #[error("waited {waited:?} (readinessTimeout) for {missing} (multi-net-spec §6.1.2)")]
    NotReadyInTime {
        waited: Duration,
        missing: Box<NotReady>,
    },
    /// STATUS: the cluster network is not ready.
    #[error("not ready: {0} (multi-net-spec §6.1.2)")]
    NotReady(Box<NotReady>),
    /// The cluster could not say (the API server refused or did not answer).
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// An object or manifest the planner reads is invalid.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// An error of the protocol crate (a CNI config that does not parse,
    /// its version, a delegated IPAM's reply), already a CNI error.
    #[error("{}", .0.details)]
    Cni(#[from] CniError),
}

/// Why a network does not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotFound {
    #[error("NetworkAttachmentDefinition {network} does not exist")]
    Nad { network: NetworkRef },
    #[error(
        "NetworkAttachmentDefinition {network} has no spec.config and no conf dir is configured \
         to find a config named {:?} in (multi-net-spec §3.4.1)",
        network.name
    )]
    NoConfDir { network: NetworkRef },
    #[error(
        "NetworkAttachmentDefinition {network} has no spec.config and {} holds no config list \
         or config named {:?} (multi-net-spec §3.4.1 rule 4)",
        dir.display(),
        network.name
    )]
    NotInConfDir { network: NetworkRef, dir: PathBuf },
    /// A name given by `field` (`clusterNetwork`, `defaultNetworks[0]`) is
    /// none of what a name may be.
    #[error("{field}: {name:?} {why}")]
    Name {
        field: String,
        name: String,
        why: Unresolved,
    },
}

/// Why a network's name (not a NAD reference alone) resolves to nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unresolved {
    /// An absolute path of a directory without a CNI config in it.
    #[error("is a directory holding no CNI config (.conf, .conflist, .json)")]
    EmptyDirectory,
    /// An absolute path of nothing.
    #[error("does not exist")]
    NoSuchPath,
    /// Neither a NAD (in `namespace` unless namespaced), nor a config of
    /// the conf dir, nor a path.
    #[error(
        "is neither a NetworkAttachmentDefinition (in {namespace} unless namespaced), nor the \
         name of a config in the conf dir ({}), nor an absolute path of a config file or \
         directory",
        conf_dir.as_ref().map_or("no conf dir".into(), |d| d.display().to_string())
    )]
    Unknown {
        namespace: String,
        conf_dir: Option<PathBuf>,
    },
}

impl PlanError {
    pub(crate) fn config(field: impl Into<String>, reason: impl Into<String>) -> PlanError {
        PlanError::Config {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn io(what: impl Into<String>, reason: impl std::fmt::Display) -> PlanError {
        PlanError::Io {
            what: what.into(),
            reason: reason.to_string(),
        }
    }

    /// The API server did not answer (or not now): asking later may work.
    pub fn is_transient(&self) -> bool {
        match self {
            PlanError::Cluster(e) | PlanError::Claims { source: e, .. } => e.is_transient(),
            PlanError::NotReadyInTime { .. } => true,
            _ => false,
        }
    }

    /// The error found inside `outer` (`plugins[1]`, a file): the variants
    /// that carry a path get `outer` in front, as [`CniError::within`] does.
    pub fn within(self, outer: impl AsRef<str>) -> PlanError {
        let outer = outer.as_ref();
        let mut e = match self {
            PlanError::Spec(e) => return PlanError::Spec(e.within(outer)),
            PlanError::Cni(e) => return PlanError::Cni(e.within(outer)),
            e => e,
        };
        if let PlanError::Config { field: path, .. }
        | PlanError::Io { what: path, .. }
        | PlanError::Decode { what: path, .. } = &mut e
        {
            prefix_path(path, outer);
        }
        e
    }
}

impl From<PlanError> for CniError {
    fn from(e: PlanError) -> CniError {
        let details = e.to_string();
        let rejected = |msg: &str| CniError::plugin(codes::ATTACHMENT_REJECTED, msg, &details);
        let default_network = || format!("annotation {DEFAULT_NETWORK_ANNOTATION}");
        match e {
            PlanError::Config { field, reason } => CniError::invalid_config(field, reason),
            PlanError::StrictSelection(a) => CniError::invalid_config(
                annotation_field(&a.field),
                format!("{} (strictAnnotations is on)", a.reason),
            ),
            PlanError::DefaultNetworkAnnotation(a) => {
                CniError::invalid_config(default_network(), a.to_string())
            }
            PlanError::DefaultNetworkCount { found } => CniError::invalid_config(
                default_network(),
                format!("must name exactly one network, names {found}"),
            ),
            PlanError::NetworkNotFound(_) => {
                CniError::plugin(codes::NETWORK_NOT_FOUND, "network not found", details)
            }
            PlanError::InterfaceTaken { .. } => rejected("interface name already used"),
            PlanError::NetworkNotAllowed { .. } => rejected("network not allowed for this pod"),
            PlanError::ConflictingKeys { .. } => rejected("conflicting selection keys"),
            PlanError::CapabilityMissing { .. } => {
                rejected("capability not supported by the network")
            }
            PlanError::TooFewDevices { .. } => rejected("no device left for the network"),
            PlanError::ClaimRejected { .. } => rejected("IPAMClaim not usable"),
            // kubelet could not say: code 11 when it did not answer in time
            // (it may yet), else plexus's code for the PodResources API.
            PlanError::PodResources { source, .. } => match source {
                podresources::Error::TimedOut { .. } => {
                    CniError::new(ErrorCode::TryAgainLater, "kubelet did not answer", details)
                }
                podresources::Error::Runtime(_) => {
                    CniError::new(ErrorCode::Io, "I/O failure", details)
                }
                _ => CniError::plugin(
                    codes::POD_RESOURCES,
                    "device look-up in kubelet's PodResources API failed",
                    details,
                ),
            },
            PlanError::Io { what, reason } => CniError::io(what, reason),
            PlanError::Decode { what, reason } => CniError::decode(what, reason),
            PlanError::NotReadyInTime { .. } => CniError::new(
                ErrorCode::TryAgainLater,
                "cluster network not ready",
                details,
            ),
            PlanError::NotReady(_) => CniError::new(
                ErrorCode::NotAvailable,
                "cluster network not ready",
                details,
            ),
            PlanError::Claims { source, .. } => CniError {
                details,
                ..source.into()
            },
            PlanError::Cluster(e) => e.into(),
            PlanError::Spec(e) => e.into(),
            PlanError::Cni(e) => e,
        }
    }
}

/// The devices of the pod's claims left out, for [`PlanError::TooFewDevices`].
fn skipped_claimed(skipped: &[String]) -> String {
    if skipped.is_empty() {
        return String::new();
    }
    format!("; left out: {}", skipped.join("; "))
}

/// `annotation k8s.v1.cni.cncf.io/networks[1].ips[0]` from the parser's field.
/// Where in the selection annotation `field` (an `AnnotationError`'s) is,
/// as warnings and errors name it.
pub(super) fn annotation_field(field: &str) -> String {
    let field = field.strip_prefix(NETWORKS_ANNOTATION).unwrap_or(field);
    match field {
        "" => format!("annotation {NETWORKS_ANNOTATION}"),
        f if f.starts_with('[') => format!("annotation {NETWORKS_ANNOTATION}{f}"),
        f => format!("annotation {NETWORKS_ANNOTATION} {f}"),
    }
}

/// §4.1.2.1.11: the key of a network's config that lets a pod's selection
/// name an IPAMClaim.
pub const ALLOW_PERSISTENT_IPS: &str = "allowPersistentIPs";

/// The node's IPAM that holds a claim's addresses (released through its
/// DEL once the claim is deleted: `crate::run::claims`).
pub const CLAIM_IPAM: &str = "host-local";

/// The IPAMs that hold a claim's addresses: host-local, and cluster-wide
/// `whereabouts` (whose reconciler releases them: `crate::whereabouts`).
pub const CLAIM_IPAMS: [&str; 2] = [CLAIM_IPAM, "whereabouts"];

/// Why the IPAMClaim a selection references cannot be used (§8).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimProblem {
    #[error(
        "the claim is in namespace {namespace}; a pod of {pod_namespace} may only use claims of \
         its own namespace"
    )]
    OtherNamespace {
        namespace: String,
        pod_namespace: String,
    },
    #[error("IPAMClaim {namespace}/{name} does not exist")]
    Missing { namespace: String, name: String },
    /// §8.2: the claim is for another network.
    #[error(
        "the claim's spec.network is {claimed:?}, not this network ({network:?}{})",
        config_name.as_ref().map(|n| format!(" or {n:?}")).unwrap_or_default()
    )]
    OtherNetwork {
        claimed: String,
        network: String,
        /// The name in the network's config, another name a claim may use.
        config_name: Option<String>,
    },
    /// §8.2: the claim is for another pod interface.
    #[error(
        "the claim's spec.interface is {claimed:?}, but this attachment's interface is {ifname:?}"
    )]
    OtherInterface { claimed: IfName, ifname: IfName },
    /// The chain has no IPAM that can hold the claim's addresses.
    #[error(
        "\"{ALLOW_PERSISTENT_IPS}\" needs the built-in host-local or whereabouts IPAM to hold \
         the claim's addresses; this network's chain has neither"
    )]
    NoClaimIpam,
}

/// What is not there yet.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NotReady {
    /// The cluster network's config does not resolve (yet): no such NAD,
    /// conf-dir config or file, or the API server gave no answer.
    #[error("the cluster network: {0}")]
    ClusterNetwork(PlanError),
    /// `readinessindicatorfile` does not exist.
    #[error("readinessindicatorfile {} does not exist", .0.display())]
    IndicatorFile(PathBuf),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::error::{ApiRequest, Verb};
    use crate::netattach::selection::parse_selection_annotation;

    #[test]
    fn each_failure_has_one_code() {
        let network = || NetworkRef::new("ns", "a");
        let annotation = || parse_selection_annotation("net-b@").unwrap_err();
        let text = || "x".to_string();
        let rejected = ErrorCode::Plugin(codes::ATTACHMENT_REJECTED);
        let socket = PathBuf::from("/run/x.sock");
        let kubelet = |source| PlanError::PodResources {
            need: text(),
            source,
        };
        let cases = [
            (PlanError::config("args", "x"), ErrorCode::InvalidConfig),
            (
                PlanError::StrictSelection(annotation()),
                ErrorCode::InvalidConfig,
            ),
            (
                PlanError::DefaultNetworkAnnotation(annotation()),
                ErrorCode::InvalidConfig,
            ),
            (
                PlanError::DefaultNetworkCount { found: 2 },
                ErrorCode::InvalidConfig,
            ),
            (
                PlanError::NetworkNotFound(NotFound::Nad { network: network() }),
                ErrorCode::Plugin(codes::NETWORK_NOT_FOUND),
            ),
            (
                PlanError::NetworkNotFound(NotFound::Name {
                    field: "clusterNetwork".into(),
                    name: "podnet".into(),
                    why: Unresolved::Unknown {
                        namespace: "kube-system".into(),
                        conf_dir: None,
                    },
                }),
                ErrorCode::Plugin(codes::NETWORK_NOT_FOUND),
            ),
            (
                PlanError::InterfaceTaken {
                    label: text(),
                    ifname: IfName::new("net1").unwrap(),
                },
                rejected,
            ),
            (
                PlanError::NetworkNotAllowed {
                    label: text(),
                    pod: "ns/p".into(),
                    network: network(),
                    global: Vec::new(),
                },
                rejected,
            ),
            (PlanError::ConflictingKeys { network: text() }, rejected),
            (
                PlanError::CapabilityMissing {
                    network: text(),
                    key: "ips".into(),
                    capability: "ips".into(),
                    section: text(),
                },
                rejected,
            ),
            (
                PlanError::TooFewDevices {
                    need: text(),
                    pod: "ns/p".into(),
                    resource: text(),
                    allocated: 1,
                    wanted: 2,
                    skipped: vec![text()],
                },
                rejected,
            ),
            (
                PlanError::ClaimRejected {
                    network: text(),
                    reference: text(),
                    problem: ClaimProblem::NoClaimIpam,
                },
                rejected,
            ),
            (
                kubelet(podresources::Error::TimedOut {
                    socket: socket.clone(),
                    after: Duration::from_secs(1),
                }),
                ErrorCode::TryAgainLater,
            ),
            (kubelet(podresources::Error::Runtime(text())), ErrorCode::Io),
            (
                kubelet(podresources::Error::SocketMissing { socket }),
                ErrorCode::Plugin(codes::POD_RESOURCES),
            ),
            (PlanError::io("claim book /b", "EIO"), ErrorCode::Io),
            (
                PlanError::Decode {
                    what: text(),
                    reason: text(),
                },
                ErrorCode::Decode,
            ),
            (
                PlanError::NotReadyInTime {
                    waited: Duration::from_secs(1),
                    missing: Box::new(NotReady::IndicatorFile("/r".into())),
                },
                ErrorCode::TryAgainLater,
            ),
            (
                PlanError::NotReady(Box::new(NotReady::IndicatorFile("/r".into()))),
                ErrorCode::NotAvailable,
            ),
            (
                PlanError::Cluster(ClusterError::Timeout {
                    request: ApiRequest::new(Verb::Get, "pod ns/p"),
                    bound: Duration::from_secs(1),
                }),
                ErrorCode::TryAgainLater,
            ),
            (
                PlanError::Spec(SpecError::invalid("metadata", "required")),
                ErrorCode::InvalidConfig,
            ),
        ];
        for (e, code) in cases {
            let details = e.to_string();
            let cni = CniError::from(e.clone());
            assert_eq!((cni.code, cni.details), (code, details), "{e:?}");
        }
        let inner = CniError::invalid_config("type", "missing");
        assert_eq!(CniError::from(PlanError::from(inner.clone())), inner);
        let unknown = Unresolved::Unknown {
            namespace: "kube-system".into(),
            conf_dir: None,
        };
        assert_eq!(
            unknown.to_string(),
            "is neither a NetworkAttachmentDefinition (in kube-system unless namespaced), nor the \
             name of a config in the conf dir (no conf dir), nor an absolute path of a config \
             file or directory"
        );
    }

    #[test]
    fn within_prefixes_the_path_as_cni_errors_do() {
        let inner = || PlanError::config("args.cni", "must be an object");
        assert_eq!(
            CniError::from(inner().within("plugins[1]")),
            CniError::from(inner()).within("plugins[1]")
        );
    }
}
