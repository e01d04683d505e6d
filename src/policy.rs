//! Which networks a pod gets, as plexus's configuration says (Multus's keys):
//! one type, held by the configuration ([`crate::config::PlexusConf::policy`])
//! and by the planner's options ([`crate::plan::PlanOptions::policy`]), with
//! its defaults written once.

use std::path::PathBuf;

use crate::cni::config::NetworkConfigList;
use crate::netattach::deviceinfo;

/// Multus's `multusNamespace` default: where cluster-level NADs live.
pub const DEFAULT_PLEXUS_NAMESPACE: &str = "kube-system";
/// Multus's `NonIsolatedNamespaces` default.
pub const DEFAULT_GLOBAL_NAMESPACE: &str = "default";

/// The selection policy.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectionPolicy {
    /// `strictAnnotations`: an invalid selection annotation fails the pod
    /// instead of the spec's "ignore it and attach only the default network"
    /// (§4.1.2.1.x).
    pub strict_annotations: bool,
    /// `delegates[1..]`: attached to every pod right after the cluster
    /// network, as Multus's `LoadNetConf` keeps them (system namespaces
    /// included), interfaces `net1`, `net2`, ... in order.
    pub delegates: Vec<NetworkConfigList>,
    /// `defaultNetworks`: NADs attached to every pod right after the
    /// cluster network.
    pub default_networks: Vec<String>,
    /// `systemNamespaces`: pods here are not given the `defaultNetworks`.
    pub system_namespaces: Vec<String>,
    /// `multusNamespace`: where cluster-level NADs named without a
    /// namespace are.
    pub plexus_namespace: String,
    /// `namespaceIsolation` (§7.4): pods may only select NADs of their own
    /// namespace (or of `global_namespaces`).
    pub namespace_isolation: bool,
    /// `globalNamespaces` as given, else `["default"]` (Multus's
    /// `NonIsolatedNamespaces`).
    pub global_namespaces: Vec<String>,
    /// device-info-SPEC §4 (`deviceInfoDir`): the directory of the device
    /// plugins' files (`dp/`) and the per-attachment copies (`cni/`).
    pub device_info_dir: PathBuf,
}

impl Default for SelectionPolicy {
    fn default() -> SelectionPolicy {
        SelectionPolicy {
            strict_annotations: false,
            delegates: Vec::new(),
            default_networks: Vec::new(),
            system_namespaces: vec!["kube-system".into()],
            plexus_namespace: DEFAULT_PLEXUS_NAMESPACE.into(),
            namespace_isolation: false,
            global_namespaces: vec![DEFAULT_GLOBAL_NAMESPACE.into()],
            device_info_dir: PathBuf::from(deviceinfo::ROOT_DIR),
        }
    }
}
