//! What the planner takes besides the pod: where NADs, confs and devices
//! come from, the default network, and the policy and call it plans for.
//! Each source is a trait the planner asks; what reads the disk, the API
//! server or kubelet implements it outside the planner.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::devices::DeviceSource;
use super::error::PlanError;
use crate::cluster::DraSource;
use crate::cluster::NadSource;
use crate::cni::args::CniArgs;
use crate::cni::config::NetworkConfigList;
use crate::cni::names::{ContainerId, IfName};
use crate::manifest::Document;
use crate::policy::SelectionPolicy;

/// Everything the planner takes besides the pod.
pub struct PlanInputs<'a> {
    pub nads: &'a dyn NadSource,
    /// `None` off the node: no conf dir, and no network given as a path.
    pub conf_files: Option<&'a dyn ConfFiles>,
    /// kubelet's PodResources API, asked only when a network is backed by
    /// a device-plugin resource; `None` off the node (no device IDs then).
    pub devices: Option<&'a dyn DeviceSource>,
    /// The pod's ResourceClaims (DRA), asked beside `devices`; `None`
    /// where the cluster has none (a manifest directory, off the node).
    pub claims: Option<&'a dyn DraSource>,
    pub default_network: &'a DefaultNetwork,
    pub options: &'a PlanOptions,
}

impl<'a> PlanInputs<'a> {
    /// Inputs with NADs and no conf directory (no `clusterNetwork` file
    /// beside plexus's conf) or kubelet to ask for devices: a plan made off
    /// the node.
    pub fn off_node(
        nads: &'a dyn NadSource,
        default_network: &'a DefaultNetwork,
        options: &'a PlanOptions,
    ) -> PlanInputs<'a> {
        PlanInputs {
            nads,
            conf_files: None,
            devices: None,
            claims: None,
            default_network,
            options,
        }
    }
}

/// The CNI config files planning reads: a conf dir's, searched by name
/// (§3.4.1 rules 2 and 3), and a network given as an absolute path (as
/// Multus's `getNetDelegate` reads `clusterNetwork` and `defaultNetworks`).
/// [`crate::conf_files::ConfDir`] reads them from the disk.
pub trait ConfFiles {
    /// The directory searched by name, for messages.
    fn dir(&self) -> &Path;
    /// §3.4.1 rules 2 and 3: the config list named `name`, else the single
    /// config named `name`, in file-name order within each rule.
    fn find(&self, name: &str) -> Option<(&Path, &NetworkConfigList)>;
    /// What the absolute `path` holds.
    fn at(&self, path: &Path) -> Result<AtPath, PlanError>;
    /// Why files read so far were skipped: the plan's warnings.
    fn warnings(&self) -> Vec<String>;
}

/// What an absolute path given as a network holds.
pub enum AtPath {
    /// A directory, and its first config in file-name order (plexus's own
    /// skipped), if it has one.
    Directory(Option<(PathBuf, NetworkConfigList)>),
    /// A file's documents: a CNI config or list, or a NAD manifest.
    File(Vec<Document>),
    /// Nothing by that name.
    Missing,
}

/// What a plan is made of besides the pod and the cluster: the conf's
/// selection policy, and the call it is for.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    pub policy: SelectionPolicy,
    /// `CNI_IFNAME` the runtime gave: the default network's interface.
    pub ifname: IfName,
    pub container_id: Option<ContainerId>,
    /// The runtime's `CNI_ARGS`, passed unchanged to the default network and
    /// without `IP`/`MAC` to the others (§7.5); when absent they are made
    /// from the pod as kubelet would send them.
    pub cni_args: Option<CniArgs>,
    /// The runtime's capability arguments (§7.5: default network only).
    pub runtime_config: Map<String, Value>,
}

impl PlanOptions {
    /// A plan under `policy` for the attachment the runtime names `ifname`,
    /// with no container, `CNI_ARGS` or capability arguments until the
    /// `with_` methods give them.
    pub fn new(policy: SelectionPolicy, ifname: IfName) -> PlanOptions {
        PlanOptions {
            policy,
            ifname,
            container_id: None,
            cni_args: None,
            runtime_config: Map::new(),
        }
    }

    pub fn with_container(mut self, container_id: ContainerId) -> PlanOptions {
        self.container_id = Some(container_id);
        self
    }

    pub fn with_cni_args(mut self, cni_args: Option<CniArgs>) -> PlanOptions {
        self.cni_args = cni_args;
        self
    }

    pub fn with_runtime_config(mut self, runtime_config: Map<String, Value>) -> PlanOptions {
        self.runtime_config = runtime_config;
        self
    }
}

/// The cluster-wide default network, resolved to a config list.
#[derive(Debug, Clone)]
pub struct DefaultNetwork {
    /// How it is named in the plan and in network-status: `ns/name` for a NAD,
    /// the config's `name` otherwise.
    pub network: String,
    pub config: NetworkConfigList,
    /// Where the config came from, for humans.
    pub source: String,
}
