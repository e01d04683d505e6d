//! The attachment planner: pod + NetworkAttachmentDefinitions + on-disk conf
//! dir + cluster-wide default network → the ordered list of attachments, each
//! with its `CNI_IFNAME`, `CNI_ARGS` and the exact JSON every plugin of its
//! chain receives (without `prevResult`, which only exists at run time).
//!
//! The planner does no netlink and no API calls of its own, so every rule of
//! the spec is a fast unit test and `plexus plan` shows users exactly what
//! will happen. Its I/O is reading the conf dir, only when a NAD has no
//! `spec.config` (§3.4.1 rules 2–3), and what its sources do: NADs from the
//! cluster, and the pod's devices from kubelet, asked once and only when a
//! network is backed by a device-plugin resource.
//!
//! Rules implemented (multi-net-spec v1.3 unless noted):
//! - §6.2: the cluster-wide default network is attached first, then Multus's
//!   `defaultNetworks`, then each selection in annotation order; §4.2: a network
//!   selected twice is attached twice.
//! - §3.4.1: config from `spec.config`, else an on-disk config list whose
//!   `name` matches the NAD, else a single config whose `name` matches, else fail.
//! - §3.4.2 / §7.1: `name` injected when missing; `cniVersion` and `name` of the
//!   list injected into every plugin.
//! - §4.1.2.1.3–.10: `ips`, `mac`, `portMappings`, `bandwidth`, `infinibandGUID`
//!   become runtimeConfig of the plugins declaring the capability; the
//!   attachment fails when no plugin of its chain declares it.
//! - §4.1.2.1.5: explicit interface names; a name used twice fails.
//! - §4.1.2.1.6: `cni-args` merged over the NAD's `args.cni`.
//! - §4.1.2.1.9: `default-route` recorded for the executor; the default
//!   network's default route is then cleared.
//! - §4.1.2.1.11: `ipam-claim-reference` recorded; combined with `ips` it fails.
//! - §7.4: namespace isolation; §7.5: the runtime's runtimeConfig reaches the
//!   default network only.
//! - device-info-SPEC §4.2.1 (Multus's `resourceName`): a network whose NAD
//!   names a device-plugin resource gets one of the devices kubelet
//!   allocated to the pod, as `deviceID` (and `pciBusID`, and
//!   `runtimeConfig.deviceID` for plugins with that capability), in the
//!   stable order of [`crate::plan::devices`]; too few devices fail the pod.
//! - An invalid selection annotation is ignored with a warning (the spec's
//!   rule), or fails the pod with `strictAnnotations`.

pub mod attachment;
pub mod auxiliary;
pub mod claims;
pub mod devices;
pub mod error;
pub mod hotplug;
pub mod readiness;

use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::cluster::NadSource;
use crate::cni::args::CniArgs;
use crate::cni::config::{derive_request, NetworkConfigList};
use crate::config::ClusterNetwork;
use crate::netattach::deviceinfo;
use crate::netattach::nad::NetworkAttachmentDefinition;
use crate::netattach::names::NetworkRef;
use crate::netattach::pod::Pod;
use crate::netattach::selection::{
    parse_selection_annotation, NetworkSelectionElement, NETWORKS_ANNOTATION,
};
use crate::policy::SelectionPolicy;
pub use attachment::{Attachment, DeviceInfoFiles, Plan, AUXILIARY_SOURCE, PLEXUS_ARGS};
use devices::{DeviceNeed, DeviceSource};
use error::annotation_field;
pub use error::{NotFound, PlanError, Unresolved};

pub use crate::netattach::selection::DEFAULT_NETWORK_ANNOTATION;

/// The CNI config files of a directory (`.conf`, `.conflist`, `.json`), read
/// on first use. Invalid files and plexus's own conf are skipped with a warning.
pub struct ConfDir {
    path: PathBuf,
    loaded: OnceCell<LoadedConfDir>,
}

/// The configs of a conf dir in file-name order, and warnings about skipped files.
type LoadedConfDir = (Vec<(PathBuf, NetworkConfigList)>, Vec<String>);

impl ConfDir {
    pub fn new(path: impl Into<PathBuf>) -> ConfDir {
        ConfDir {
            path: path.into(),
            loaded: OnceCell::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn entries(&self) -> &LoadedConfDir {
        self.loaded.get_or_init(|| load_conf_dir(&self.path))
    }

    /// Warnings about files that were skipped (empty until the dir is read).
    pub fn warnings(&self) -> &[String] {
        self.loaded.get().map(|(_, w)| w.as_slice()).unwrap_or(&[])
    }

    /// §3.4.1 rules 2 and 3: a config list named `name`, else a single config
    /// named `name`; in file-name order within each rule.
    pub fn find(&self, name: &str) -> Option<(&Path, &NetworkConfigList)> {
        let (entries, _) = self.entries();
        let named = |single: bool| {
            entries
                .iter()
                .find(|(_, l)| l.single == single && l.name.as_deref() == Some(name))
                .map(|(p, l)| (p.as_path(), l))
        };
        named(false).or_else(|| named(true))
    }

    /// The config in the file named `file_name`, when it is one.
    pub fn file(&self, file_name: &str) -> Option<(&Path, &NetworkConfigList)> {
        self.entries()
            .0
            .iter()
            .find(|(p, _)| p.file_name().is_some_and(|n| n == file_name))
            .map(|(p, l)| (p.as_path(), l))
    }

    /// The first config in file-name order: the cluster network when none is
    /// configured, as Multus's `--multus-conf-file=auto` picks it.
    pub fn first(&self) -> Option<(&Path, &NetworkConfigList)> {
        self.entries().0.first().map(|(p, l)| (p.as_path(), l))
    }
}

fn load_conf_dir(dir: &Path) -> LoadedConfDir {
    let mut warnings = Vec::new();
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("conf" | "conflist" | "json")
                )
            })
            .collect(),
        Err(e) => {
            warnings.push(format!("conf dir {}: {e}", dir.display()));
            Vec::new()
        }
    };
    files.sort();
    let mut entries = Vec::new();
    for file in files {
        let parsed = std::fs::read(&file)
            .map_err(|e| e.to_string())
            .and_then(|bytes| NetworkConfigList::from_slice(&bytes).map_err(|e| e.to_string()));
        match parsed {
            Ok(list) if list.plugins.iter().any(|p| p.plugin_type == "plexus") => {
                // Our own conf: planning with it would recurse.
            }
            Ok(list) => entries.push((file, list)),
            Err(e) => warnings.push(format!("skipped {}: {e}", file.display())),
        }
    }
    (entries, warnings)
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

/// Everything the planner takes besides the pod.
pub struct PlanInputs<'a> {
    pub nads: &'a dyn NadSource,
    pub conf_dir: Option<&'a ConfDir>,
    /// kubelet's PodResources API, asked only when a network is backed by
    /// a device-plugin resource; `None` off the node (no device IDs then).
    pub devices: Option<&'a dyn DeviceSource>,
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
            conf_dir: None,
            devices: None,
            default_network,
            options,
        }
    }
}

/// What a plan is made of besides the pod and the cluster: the conf's
/// selection policy, and the call it is for.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    pub policy: SelectionPolicy,
    /// `CNI_IFNAME` the runtime gave: the default network's interface.
    pub ifname: String,
    pub container_id: Option<String>,
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
    pub fn new(policy: SelectionPolicy, ifname: impl Into<String>) -> PlanOptions {
        PlanOptions {
            policy,
            ifname: ifname.into(),
            container_id: None,
            cni_args: None,
            runtime_config: Map::new(),
        }
    }

    pub fn with_container(mut self, container_id: impl Into<String>) -> PlanOptions {
        self.container_id = Some(container_id.into());
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

/// A network to attach, before its config is resolved.
struct Wanted {
    target: Target,
    /// Where it was asked for, for error messages (`defaultNetworks[1]`,
    /// the annotation's `[2]`).
    label: String,
    selection: Option<NetworkSelectionElement>,
}

/// How a wanted network is named.
enum Target {
    /// A selection: a NAD (§4.1).
    Nad(NetworkRef),
    /// A `defaultNetworks` entry, resolved as Multus's `getNetDelegate` does
    /// ([`resolve_named`]).
    Named(String),
    /// `delegates[i]`, a config given inline.
    Inline(NetworkConfigList),
}

/// Plan the attachments of `pod`.
pub fn plan(pod: &Pod, inputs: &PlanInputs) -> Result<Plan, PlanError> {
    let options = inputs.options;
    let mut warnings = Vec::new();

    let default_network = resolve_default_network(pod, inputs, &mut warnings)?;

    let mut wanted: Vec<Wanted> = Vec::new();
    // As Multus's `systemNamespaces`: pods there are not given the
    // `defaultNetworks`, but what they select themselves is attached, since
    // §7.2 allows no silent drop of a selection.
    let default_networks: &[String] = if options.policy.system_namespaces.contains(&pod.namespace) {
        &[]
    } else {
        &options.policy.default_networks
    };
    // Multus's LoadNetConf keeps every delegate, whatever the pod's namespace.
    for (i, list) in options.policy.delegates.iter().enumerate() {
        wanted.push(Wanted {
            target: Target::Inline(list.clone()),
            label: format!("delegates[{}]", i + 1),
            selection: None,
        });
    }
    for (i, name) in default_networks.iter().enumerate() {
        wanted.push(Wanted {
            target: Target::Named(name.clone()),
            label: format!("defaultNetworks[{i}]"),
            selection: None,
        });
    }
    for (i, element) in selections(pod, options, &mut warnings)?
        .into_iter()
        .enumerate()
    {
        let namespace = element
            .namespace
            .clone()
            .unwrap_or_else(|| pod.namespace.clone());
        wanted.push(Wanted {
            target: Target::Nad(NetworkRef {
                namespace,
                name: element.name.clone(),
            }),
            label: format!("{NETWORKS_ANNOTATION}[{i}]"),
            selection: Some(element),
        });
    }

    let ifnames = assign_ifnames(&options.ifname, &wanted)?;
    let cni_args = cni_args_for(pod, options);
    let secondary_cni_args = secondary_cni_args(pod, options);

    let mut attachments = Vec::with_capacity(wanted.len() + 1);
    let cni_file = cni_device_info_file(&default_network.network, &options.ifname, options);
    let mut runtime_config = options.runtime_config.clone();
    offer_device_info_file(&mut runtime_config, cni_file.as_deref());
    let mut plugins = requests(
        &default_network.config,
        &default_network.network,
        &runtime_config,
        None,
    )?;
    attachments.push(Attachment {
        network: default_network.network.clone(),
        ifname: options.ifname.clone(),
        default: true,
        cni_args: cni_args.clone(),
        device_info: device_info_files(cni_file, &mut plugins, None),
        plugins,
        source: default_network.source.clone(),
        default_route: None,
        clear_default_route: false,
        ipam_claim_reference: None,
        disable_check: default_network.config.disable_check,
    });

    let resolved = wanted
        .iter()
        .map(|want| {
            check_isolation(pod, want, options)?;
            resolve_wanted(
                want,
                inputs.nads,
                inputs.conf_dir,
                &options.policy.plexus_namespace,
            )
        })
        .collect::<Result<Vec<_>, PlanError>>()?;
    let device_ids = device_ids(pod, &wanted, &resolved, inputs.devices, &mut warnings)?;

    for (((want, ifname), nad), device_id) in
        wanted.iter().zip(ifnames).zip(resolved).zip(device_ids)
    {
        let ResolvedNad {
            network,
            config,
            source,
            resource_name,
        } = nad;
        let selection = want.selection.as_ref();
        let mut capability_args = match selection {
            Some(s) => capability_args(s, &config, &network)?,
            None => Map::new(),
        };
        if let Some(id) = &device_id {
            capability_args.insert(devices::DEVICE_ID_CAPABILITY.into(), json!(id));
        }
        let cni_file = cni_device_info_file(&network, &ifname, options);
        offer_device_info_file(&mut capability_args, cni_file.as_deref());
        let cni_args_override = selection.and_then(|s| s.cni_args.as_ref());
        let mut plugins = requests(&config, &network, &capability_args, cni_args_override)?;
        if let Some(id) = &device_id {
            devices::hand_over(&mut plugins, id);
        }
        let device_plugin_file = resource_name
            .as_deref()
            .zip(device_id.as_deref())
            .map(|(resource, id)| {
                deviceinfo::dp_file(&options.policy.device_info_dir, resource, id)
            })
            .transpose()
            .map_err(|reason| PlanError::config(format!("{}: deviceID", want.label), reason))?;
        attachments.push(Attachment {
            device_info: device_info_files(cni_file, &mut plugins, device_plugin_file),
            network,
            ifname,
            default: false,
            cni_args: secondary_cni_args.clone(),
            plugins,
            source,
            default_route: selection.and_then(|s| s.default_route.clone()),
            clear_default_route: false,
            ipam_claim_reference: selection.and_then(|s| s.ipam_claim_reference.clone()),
            disable_check: config.disable_check,
        });
    }

    // §4.1.2.1.9: "the default route and gateway will be cleared from the
    // cluster-wide default network attachment", and, as the spec's example
    // implementation "will flush the default route from [...] any
    // attachments that do not have the "default-route" key set" (Multus's
    // `CheckGatewayConfig` marks every delegate without a gateway request
    // for filtering): one selection with the key takes the pod's default
    // route from every other attachment. `"default-route": []` keeps that
    // attachment's own gateway.
    if attachments.iter().any(|a| a.default_route.is_some()) {
        for a in attachments.iter_mut().filter(|a| a.default_route.is_none()) {
            a.clear_default_route = true;
        }
    }

    if let Some(dir) = inputs.conf_dir {
        warnings.extend(dir.warnings().iter().cloned());
    }
    Ok(Plan {
        attachments,
        warnings,
    })
}

/// The device of each wanted network backed by a device-plugin resource
/// (see [`devices`] for the order), from one look-up of the pod, and only
/// when one is: `None` for the others. Without a device source (`plexus
/// plan` off the node) such networks get none, with a warning.
fn device_ids(
    pod: &Pod,
    wanted: &[Wanted],
    resolved: &[ResolvedNad],
    source: Option<&dyn DeviceSource>,
    warnings: &mut Vec<String>,
) -> Result<Vec<Option<String>>, PlanError> {
    let (positions, needs): (Vec<usize>, Vec<DeviceNeed>) = resolved
        .iter()
        .enumerate()
        .filter_map(|(i, nad)| {
            let resource = nad.resource_name.as_deref()?;
            let need = DeviceNeed {
                label: &wanted[i].label,
                network: &nad.network,
                resource,
            };
            Some((i, need))
        })
        .unzip();
    let mut ids = vec![None; wanted.len()];
    if needs.is_empty() {
        return Ok(ids);
    }
    let Some(source) = source else {
        warnings.extend(needs.iter().map(|need| {
            format!(
                "{}: NetworkAttachmentDefinition {} has resourceName {}: its deviceID comes from \
                 kubelet's PodResources API at ADD time and is not looked up here",
                need.label, need.network, need.resource
            )
        }));
        return Ok(ids);
    };
    for (i, id) in positions
        .into_iter()
        .zip(devices::look_up(pod, &needs, source)?)
    {
        ids[i] = Some(id);
    }
    Ok(ids)
}

/// device-info-SPEC §4.2: the attachment's CNI device-info file, unique to
/// it; `None` without a container ID (`plexus plan` off a runtime call).
fn cni_device_info_file(network: &str, ifname: &str, options: &PlanOptions) -> Option<PathBuf> {
    let container_id = options.container_id.as_deref()?;
    Some(deviceinfo::cni_file(
        &options.policy.device_info_dir,
        network,
        container_id,
        ifname,
    ))
}

/// device-info-SPEC §5.1.1: the file for the plugins that declare the
/// `CNIDeviceInfoFile` capability.
fn offer_device_info_file(capability_args: &mut Map<String, Value>, cni: Option<&Path>) {
    if let Some(cni) = cni {
        capability_args.insert(
            deviceinfo::FILE_CAPABILITY.into(),
            cni.display().to_string().into(),
        );
    }
}

/// The attachment's device-info files, when it has any: a device plugin's
/// file to copy (§4.2.1) or a plugin that takes the CNI file, which the
/// built-in drivers that describe their device always do
/// ([`plexus_dataplane::drivers::describes_device`]). Without either the
/// attachment has no device information and costs no file I/O.
fn device_info_files(
    cni: Option<PathBuf>,
    plugins: &mut [Map<String, Value>],
    device_plugin: Option<PathBuf>,
) -> Option<DeviceInfoFiles> {
    let path = cni.as_ref().map(|c| Value::from(c.display().to_string()));
    let mut taken = false;
    for plugin in plugins.iter_mut() {
        let describes = plugin
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(plexus_dataplane::drivers::describes_device);
        if describes {
            // The path is plexus's to give: one a NAD's own runtimeConfig
            // names would have the driver write a file anywhere on the node.
            match &path {
                Some(p) => {
                    let rc = plugin.entry("runtimeConfig").or_insert_with(|| json!({}));
                    if let Some(rc) = rc.as_object_mut() {
                        rc.insert(deviceinfo::FILE_CAPABILITY.into(), p.clone());
                    }
                }
                None => {
                    if let Some(Value::Object(rc)) = plugin.get_mut("runtimeConfig") {
                        rc.remove(deviceinfo::FILE_CAPABILITY);
                    }
                }
            }
        }
        taken |= plugin
            .get("runtimeConfig")
            .and_then(|rc| rc.get(deviceinfo::FILE_CAPABILITY))
            .is_some();
    }
    let cni = cni?;
    (taken || device_plugin.is_some()).then_some(DeviceInfoFiles { cni, device_plugin })
}

/// §6: the configured cluster network, unless the pod overrides it with
/// Multus's `v1.multus-cni.io/default-network` annotation.
fn resolve_default_network(
    pod: &Pod,
    inputs: &PlanInputs,
    warnings: &mut Vec<String>,
) -> Result<DefaultNetwork, PlanError> {
    let Some(value) = pod.annotations.get(DEFAULT_NETWORK_ANNOTATION) else {
        return Ok(inputs.default_network.clone());
    };
    let field = format!("annotation {DEFAULT_NETWORK_ANNOTATION}");
    let parsed = parse_selection_annotation(value).map_err(PlanError::DefaultNetworkAnnotation)?;
    warnings.extend(parsed.warnings.into_iter().map(|w| format!("{field}: {w}")));
    let [element] = parsed.elements.as_slice() else {
        return Err(PlanError::DefaultNetworkCount {
            found: parsed.elements.len(),
        });
    };
    let reference = NetworkRef {
        namespace: element
            .namespace
            .clone()
            .unwrap_or_else(|| inputs.options.policy.plexus_namespace.clone()),
        name: element.name.clone(),
    };
    let ResolvedNad { config, source, .. } = resolve_nad(&reference, inputs.nads, inputs.conf_dir)?;
    Ok(DefaultNetwork {
        network: reference.to_string(),
        config,
        source,
    })
}

/// The NADs (`namespace`, `name`) the pod's selection annotation names and
/// may select (§7.4 isolation applied), for a source to read ahead of
/// planning ([`crate::cluster::Cluster::prefetch_nads`]): a hint only, the
/// plan reads and checks each itself.
pub fn selected_nads(pod: &Pod, options: &PlanOptions) -> Vec<(String, String)> {
    let mut nads: Vec<(String, String)> = selections(pod, options, &mut Vec::new())
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.namespace.unwrap_or_else(|| pod.namespace.clone()), e.name))
        .filter(|(ns, _)| {
            !options.policy.namespace_isolation
                || *ns == pod.namespace
                || options.policy.global_namespaces.contains(ns)
        })
        .collect();
    nads.sort();
    nads.dedup();
    nads
}

/// The pod's selections (§4), or none when the annotation is absent or
/// invalid (then with a warning, or an error under `strictAnnotations`).
fn selections(
    pod: &Pod,
    options: &PlanOptions,
    warnings: &mut Vec<String>,
) -> Result<Vec<NetworkSelectionElement>, PlanError> {
    let Some(value) = pod.annotations.get(NETWORKS_ANNOTATION) else {
        return Ok(Vec::new());
    };
    match parse_selection_annotation(value) {
        Ok(parsed) => {
            warnings.extend(
                parsed
                    .warnings
                    .into_iter()
                    .map(|w| format!("annotation {NETWORKS_ANNOTATION}: {w}")),
            );
            Ok(parsed.elements)
        }
        Err(e) if options.policy.strict_annotations => Err(PlanError::StrictSelection(e)),
        Err(e) => {
            warnings.push(format!(
                "{} ignored, only the default network is attached: {}",
                annotation_field(&e.field),
                e.reason
            ));
            Ok(Vec::new())
        }
    }
}

/// `CNI_IFNAME` of every wanted network: the explicit `interface`, else
/// `net<position>` as Multus names them (the default network is position 0),
/// skipping names requested explicitly elsewhere in the pod. §4.1.2.1.5: an
/// explicit name already used fails.
fn assign_ifnames(default_ifname: &str, wanted: &[Wanted]) -> Result<Vec<String>, PlanError> {
    let explicit: BTreeSet<&str> = wanted
        .iter()
        .filter_map(|w| w.selection.as_ref()?.interface.as_deref())
        .collect();
    let mut used: BTreeSet<String> = BTreeSet::from([default_ifname.to_string()]);
    let mut names = Vec::with_capacity(wanted.len());
    for (i, want) in wanted.iter().enumerate() {
        let name = match want.selection.as_ref().and_then(|s| s.interface.clone()) {
            Some(name) => {
                if used.contains(&name) {
                    return Err(PlanError::InterfaceTaken {
                        label: want.label.clone(),
                        ifname: name,
                    });
                }
                name
            }
            None => {
                // Bounded: at most explicit.len() + used.len() candidates collide.
                (i + 1..)
                    .map(|n| format!("net{n}"))
                    .find(|n| !used.contains(n) && !explicit.contains(n.as_str()))
                    .expect("an unbounded range always has a free name")
            }
        };
        used.insert(name.clone());
        names.push(name);
    }
    Ok(names)
}

/// The runtime's `CNI_ARGS`, or what kubelet would send for this pod.
fn cni_args_for(pod: &Pod, options: &PlanOptions) -> String {
    if let Some(args) = &options.cni_args {
        return args.to_string();
    }
    let mut parts = vec![
        "IgnoreUnknown=1".to_string(),
        format!("K8S_POD_NAMESPACE={}", pod.namespace),
        format!("K8S_POD_NAME={}", pod.name),
    ];
    if let Some(id) = &options.container_id {
        parts.push(format!("K8S_POD_INFRA_CONTAINER_ID={id}"));
    }
    if let Some(uid) = &pod.uid {
        parts.push(format!("K8S_POD_UID={uid}"));
    }
    parts.join(";")
}

/// `CNI_ARGS` for the attachments other than the default network: `IP` and
/// `MAC` are the CNI_ARGS forms of the `ips` and `mac` capabilities
/// (cni-CONVENTIONS "CNI_ARGS"), which podman sends for `--network net:ip=..,mac=..`,
/// so like runtimeConfig they belong to the default network only
/// (multi-net-spec §7.5): another network would be asked for the same MAC, or
/// for an address outside its ranges.
fn secondary_cni_args(pod: &Pod, options: &PlanOptions) -> String {
    let Some(args) = &options.cni_args else {
        return cni_args_for(pod, options);
    };
    args.pairs()
        .iter()
        .filter(|(k, _)| k != "IP" && k != "MAC")
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";")
}

/// §7.4 via Multus's `namespaceIsolation`: a pod may select NADs of its own
/// namespace and of `globalNamespaces` only.
fn check_isolation(pod: &Pod, want: &Wanted, options: &PlanOptions) -> Result<(), PlanError> {
    // Only what the pod selects is checked, as Multus's GetNetworkDelegates
    // does: the cluster's own networks are the operator's choice.
    let (Target::Nad(reference), Some(_)) = (&want.target, &want.selection) else {
        return Ok(());
    };
    if !options.policy.namespace_isolation {
        return Ok(());
    }
    let ns = &reference.namespace;
    if *ns == pod.namespace || options.policy.global_namespaces.iter().any(|g| g == ns) {
        return Ok(());
    }
    Err(PlanError::NetworkNotAllowed {
        label: want.label.clone(),
        pod: format!("{}/{}", pod.namespace, pod.name),
        network: reference.clone(),
        global: options.policy.global_namespaces.clone(),
    })
}

/// A network resolved to the config it stands for.
struct ResolvedNad {
    /// How it is named in the plan and in network-status: `ns/name` for a
    /// NAD, the config's `name` otherwise.
    network: String,
    config: NetworkConfigList,
    /// Where the config came from.
    source: String,
    /// The device-plugin resource backing the network (its
    /// `k8s.v1.cni.cncf.io/resourceName`).
    resource_name: Option<String>,
}

/// §3.4.1: the config a NAD stands for, and where it came from.
fn resolve_nad(
    reference: &NetworkRef,
    nads: &dyn NadSource,
    conf_dir: Option<&ConfDir>,
) -> Result<ResolvedNad, PlanError> {
    let not_found = PlanError::NetworkNotFound;
    let nad = nads
        .get(&reference.namespace, &reference.name)?
        .ok_or_else(|| {
            not_found(NotFound::Nad {
                network: reference.clone(),
            })
        })?;
    let resolved = |config, source| ResolvedNad {
        network: reference.to_string(),
        config,
        source,
        resource_name: nad.resource_name().map(String::from),
    };
    if let Some(text) = nad.spec_config() {
        let source = format!("NetworkAttachmentDefinition {reference} spec.config");
        let mut list = NetworkConfigList::from_slice(text.as_bytes())
            .map_err(|e| e.within(source.as_str()))?;
        // §3.4.2: a config that omits `name` gets the NAD's.
        if list.name.as_deref().is_none_or(str::is_empty) {
            list.name = Some(reference.name.clone());
        }
        return Ok(resolved(list, source));
    }
    let dir = conf_dir.ok_or_else(|| {
        not_found(NotFound::NoConfDir {
            network: reference.clone(),
        })
    })?;
    match dir.find(&reference.name) {
        Some((path, list)) => Ok(resolved(list.clone(), path.display().to_string())),
        None => Err(not_found(NotFound::NotInConfDir {
            network: reference.clone(),
            dir: dir.path().to_path_buf(),
        })),
    }
}

/// §4.1.2.1.3–.10: the runtimeConfig a selection asks for, after checking that
/// a plugin of the chain declares each capability.
fn capability_args(
    selection: &NetworkSelectionElement,
    config: &NetworkConfigList,
    reference: &str,
) -> Result<Map<String, Value>, PlanError> {
    if selection.ips.is_some() && selection.ipam_claim_reference.is_some() {
        return Err(PlanError::ConflictingKeys {
            network: reference.to_string(),
        });
    }
    let requested: [(&str, &str, &str, Option<Value>); 5] = [
        (
            "ips",
            "ips",
            "§4.1.2.1.3.2",
            selection.ips.as_ref().map(|v| json!(v)),
        ),
        (
            "mac",
            "mac",
            "§4.1.2.1.4.2",
            selection.mac.as_ref().map(|v| json!(v)),
        ),
        (
            "portMappings",
            "portMappings",
            "§4.1.2.1.7.2",
            selection.port_mappings_runtime_config(),
        ),
        (
            "bandwidth",
            "bandwidth",
            "§4.1.2.1.8.2",
            selection.bandwidth_runtime_config(),
        ),
        (
            "infiniband-guid",
            "infinibandGUID",
            "§4.1.2.1.10.2",
            selection.infiniband_guid.as_ref().map(|v| json!(v)),
        ),
    ];
    let mut args = Map::new();
    for (key, capability, section, value) in requested {
        let Some(value) = value else { continue };
        if !config.supports_capability(capability) {
            return Err(PlanError::CapabilityMissing {
                network: reference.to_string(),
                key: key.to_string(),
                capability: capability.to_string(),
                section: section.to_string(),
            });
        }
        args.insert(capability.to_string(), value);
    }
    Ok(args)
}

/// Request JSON for every plugin of `list` (cni-SPEC §3, multi-net-spec §7.1),
/// with `cni-args` merged over each plugin's `args.cni` (§4.1.2.1.6.2).
fn requests(
    list: &NetworkConfigList,
    fallback_name: &str,
    capability_args: &Map<String, Value>,
    cni_args: Option<&Map<String, Value>>,
) -> Result<Vec<Map<String, Value>>, PlanError> {
    let version = list.select_version()?;
    let name = list.name.as_deref().unwrap_or(fallback_name);
    list.plugins
        .iter()
        .enumerate()
        .map(|(i, plugin)| {
            let mut request = derive_request(plugin, name, version, capability_args, None);
            if request
                .get("args")
                .and_then(|a| a.get(PLEXUS_ARGS))
                .is_some()
            {
                // What it carries decides who holds addresses (IPAMClaims):
                // a NAD that set it could take another namespace's.
                return Err(PlanError::config(
                    format!("plugins[{i}].args.{}", PLEXUS_ARGS),
                    "reserved for plexus itself; a network config cannot set it",
                ));
            }
            if let Some(extra) = cni_args {
                merge_cni_args(&mut request, extra)
                    .map_err(|e| e.within(format!("plugins[{i}]")))?;
            }
            Ok(request)
        })
        .collect()
}

fn merge_cni_args(
    request: &mut Map<String, Value>,
    extra: &Map<String, Value>,
) -> Result<(), PlanError> {
    let args = request.entry("args").or_insert_with(|| json!({}));
    let args = args
        .as_object_mut()
        .ok_or_else(|| PlanError::config("args", "must be an object to receive cni-args"))?;
    let cni = args.entry("cni").or_insert_with(|| json!({}));
    let cni = cni
        .as_object_mut()
        .ok_or_else(|| PlanError::config("args.cni", "must be an object to receive cni-args"))?;
    for (k, v) in extra {
        cni.insert(k.clone(), v.clone());
    }
    Ok(())
}

/// Multus's auxiliary chain (see [`crate::plan::auxiliary`]) as the last
/// attachment of `plan`: `CNI_IFNAME` `net<position>` (the first such name
/// no attachment uses), the secondary networks' `CNI_ARGS`, no capability
/// arguments, and never CHECKed, as Multus never CHECKs it.
pub fn add_auxiliary_chain(
    plan: &mut Plan,
    chain: &NetworkConfigList,
    pod: &Pod,
    options: &PlanOptions,
) -> Result<(), PlanError> {
    let network = chain.name.clone().unwrap_or_default();
    let plugins = requests(chain, &network, &Map::new(), None)
        .map_err(|e| e.within(format!("auxiliaryCNIChainName {network:?}")))?;
    let used = |name: &str| plan.attachments.iter().any(|a| a.ifname == name);
    let ifname = (plan.attachments.len()..)
        .map(|n| format!("net{n}"))
        .find(|n| !used(n))
        .expect("an unbounded range always has a free name");
    plan.attachments.push(Attachment {
        source: format!("{AUXILIARY_SOURCE} {network:?}"),
        network,
        ifname,
        default: false,
        cni_args: secondary_cni_args(pod, options),
        plugins,
        default_route: None,
        clear_default_route: false,
        ipam_claim_reference: None,
        disable_check: true,
        device_info: None,
    });
    Ok(())
}

/// Resolve plexus's configured cluster network: `delegates[0]`, or
/// `clusterNetwork` as `resolve_named` reads it.
pub fn cluster_network(
    conf: &ClusterNetwork,
    nads: &dyn NadSource,
    conf_dir: Option<&ConfDir>,
    plexus_namespace: &str,
) -> Result<DefaultNetwork, PlanError> {
    let resolved = match conf {
        ClusterNetwork::Inline(list) => ResolvedNad {
            network: list.name.clone().unwrap_or_else(|| "default".into()),
            config: list.clone(),
            source: "delegates[0]".into(),
            resource_name: None,
        },
        ClusterNetwork::Reference(name) => {
            resolve_named("clusterNetwork", name, nads, conf_dir, plexus_namespace)?
        }
    };
    Ok(DefaultNetwork {
        network: resolved.network,
        config: resolved.config,
        source: resolved.source,
    })
}

/// The config a wanted network stands for.
fn resolve_wanted(
    want: &Wanted,
    nads: &dyn NadSource,
    conf_dir: Option<&ConfDir>,
    plexus_namespace: &str,
) -> Result<ResolvedNad, PlanError> {
    match &want.target {
        Target::Nad(reference) => resolve_nad(reference, nads, conf_dir),
        Target::Named(name) => resolve_named(&want.label, name, nads, conf_dir, plexus_namespace),
        Target::Inline(list) => Ok(ResolvedNad {
            network: list.name.clone().unwrap_or_else(|| want.label.clone()),
            config: list.clone(),
            source: want.label.clone(),
            resource_name: None,
        }),
    }
}

/// `clusterNetwork` and each `defaultNetworks` entry (`field`), as Multus's
/// `getNetDelegate` reads them: an absolute path is a config file (or a
/// NetworkAttachmentDefinition manifest) or a directory, whose first config
/// in file-name order is taken (plexus's own skipped); anything else is a
/// NAD (in `multusNamespace` unless `ns/name`) if one exists, else the `name`
/// of a config in `confDir`.
fn resolve_named(
    field: &str,
    name: &str,
    nads: &dyn NadSource,
    conf_dir: Option<&ConfDir>,
    plexus_namespace: &str,
) -> Result<ResolvedNad, PlanError> {
    let not_found = |why: Unresolved| {
        PlanError::NetworkNotFound(NotFound::Name {
            field: field.to_string(),
            name: name.to_string(),
            why,
        })
    };
    let path = Path::new(name);
    if path.is_absolute() {
        if path.is_dir() {
            let dir = ConfDir::new(path);
            let (file, list) = dir
                .first()
                .ok_or_else(|| not_found(Unresolved::EmptyDirectory))?;
            return Ok(ResolvedNad {
                network: config_name(list, file)?,
                config: list.clone(),
                source: file.display().to_string(),
                resource_name: None,
            });
        }
        if path.is_file() {
            return network_from_file(path);
        }
        return Err(not_found(Unresolved::NoSuchPath));
    }
    if let Ok(reference) = NetworkRef::parse(name, plexus_namespace) {
        if nads.get(&reference.namespace, &reference.name)?.is_some() {
            return resolve_nad(&reference, nads, conf_dir);
        }
    }
    if let Some((file, list)) = conf_dir.and_then(|d| d.find(name)) {
        return Ok(ResolvedNad {
            network: name.to_string(),
            config: list.clone(),
            source: file.display().to_string(),
            resource_name: None,
        });
    }
    Err(not_found(Unresolved::Unknown {
        namespace: plexus_namespace.to_string(),
        conf_dir: conf_dir.map(|d| d.path().to_path_buf()),
    }))
}

/// A config's `name`, which names its network in the plan and network-status.
fn config_name(config: &NetworkConfigList, origin: &Path) -> Result<String, PlanError> {
    config.name.clone().ok_or_else(|| {
        PlanError::config(
            format!("{}: name", origin.display()),
            "a network given as a file needs a name",
        )
    })
}

/// A cluster network from a file: a CNI config or config list (JSON), or a
/// NetworkAttachmentDefinition manifest.
pub fn default_network_from_file(path: &Path) -> Result<DefaultNetwork, PlanError> {
    let resolved = network_from_file(path)?;
    Ok(DefaultNetwork {
        network: resolved.network,
        config: resolved.config,
        source: resolved.source,
    })
}

/// A network from a file: a CNI config or config list (JSON), or a
/// NetworkAttachmentDefinition manifest.
fn network_from_file(path: &Path) -> Result<ResolvedNad, PlanError> {
    let origin = path.display().to_string();
    let docs = crate::manifest::load(path)?;
    let [doc] = docs.as_slice() else {
        return Err(PlanError::config(
            &origin,
            format!("must hold one network, holds {} documents", docs.len()),
        ));
    };
    if doc.kind() == Some("NetworkAttachmentDefinition") {
        let nad = NetworkAttachmentDefinition::from_value(&doc.value)
            .map_err(|e| e.within(origin.as_str()))?;
        let reference = nad.network_ref(crate::manifest::DEFAULT_NAMESPACE);
        let mut nads = BTreeMap::new();
        nads.insert((reference.namespace.clone(), reference.name.clone()), nad);
        return resolve_nad(&reference, &nads, None);
    }
    let config =
        NetworkConfigList::from_value(&doc.value).map_err(|e| e.within(origin.as_str()))?;
    Ok(ResolvedNad {
        network: config_name(&config, path)?,
        config,
        source: origin,
        resource_name: None,
    })
}
