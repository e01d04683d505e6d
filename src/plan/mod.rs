//! The attachment planner: pod + NetworkAttachmentDefinitions + conf files +
//! cluster-wide default network → the ordered list of attachments, each
//! with its `CNI_IFNAME`, `CNI_ARGS` and the exact JSON every plugin of its
//! chain receives (without `prevResult`, which only exists at run time).
//!
//! The planner is pure: no netlink, no files, no API calls and no waiting of
//! its own, so every rule of the spec is a fast unit test and `plexus plan`
//! shows users exactly what will happen. It reads only through the sources
//! of [`PlanInputs`]: NADs from the cluster, the conf dir's files
//! ([`ConfFiles`], asked only when a NAD has no `spec.config`, §3.4.1 rules
//! 2–3, or a network is a path), and the pod's devices from kubelet, asked
//! once and only when a network is backed by a device-plugin resource.
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

pub mod auxiliary;
pub mod claims;
mod device_info;
pub mod devices;
pub mod error;
pub mod hotplug;
mod inputs;
mod resolve;

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

pub use crate::attachment::{
    net_n, Attachment, ClaimedAttachment, DeviceInfoFiles, Plan, AUXILIARY_SOURCE, PLEXUS_ARGS,
};
use crate::cluster::NadSource;
use crate::cni::config::{derive_request, NetworkConfigList};
use crate::cni::names::IfName;
use crate::dra::driver::claimed::{ClaimedNetwork, HandOver};
use crate::dra::driver::opaque::Network;
use crate::netattach::deviceinfo;
use crate::netattach::names::NetworkRef;
use crate::netattach::pod::Pod;
use crate::netattach::selection::{
    parse_selection_annotation, NetworkSelectionElement, NETWORKS_ANNOTATION,
};
use device_info::{cni_device_info_file, device_info_files, offer_device_info_file};
use devices::DeviceNeed;
use error::annotation_field;
pub use error::NotReady;
pub use error::{NotFound, PlanError, Unresolved};
pub use inputs::{AtPath, ConfFiles, DefaultNetwork, PlanInputs, PlanOptions};
pub use resolve::{cluster_network, network_from_documents};
use resolve::{resolve_default_network, resolve_nad, resolve_named, ResolvedNad};

pub use crate::netattach::selection::DEFAULT_NETWORK_ANNOTATION;

/// A network to attach, before its config is resolved.
struct Wanted {
    target: Target,
    /// Where it was asked for, for error messages (`defaultNetworks[1]`,
    /// the annotation's `[2]`).
    label: String,
    selection: Option<NetworkSelectionElement>,
    /// A device of the pod's claim from plexus's DRA driver, and its
    /// network configuration.
    claimed: Option<ClaimedNetwork>,
}

impl Wanted {
    /// The interface name asked for: the selection's `interface`, the
    /// claim's `interfaceName`.
    fn explicit_ifname(&self) -> Option<IfName> {
        if let Some(s) = &self.selection {
            return s.interface.clone();
        }
        let claimed = self.claimed.as_ref()?;
        IfName::new(claimed.config.interface_name.as_deref()?).ok()
    }
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
            claimed: None,
        });
    }
    for (i, name) in default_networks.iter().enumerate() {
        wanted.push(Wanted {
            target: Target::Named(name.clone()),
            label: format!("defaultNetworks[{i}]"),
            selection: None,
            claimed: None,
        });
    }
    for (i, element) in selections(pod, options, &mut warnings)?
        .into_iter()
        .enumerate()
    {
        let namespace = element
            .namespace
            .as_deref()
            .unwrap_or(&pod.namespace)
            .to_string();
        wanted.push(Wanted {
            target: Target::Nad(NetworkRef {
                namespace,
                name: element.name.to_string(),
            }),
            label: format!("{NETWORKS_ANNOTATION}[{i}]"),
            selection: Some(element),
            claimed: None,
        });
    }
    // The devices of the pod's claims from plexus's own DRA driver, after
    // the selections, each on the network its claim configures.
    for claimed in inputs
        .claims
        .map(|c| c.claimed_networks(pod))
        .unwrap_or_default()
    {
        wanted.push(claimed_wanted(claimed)?);
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
                inputs.conf_files,
                &options.policy.plexus_namespace,
            )
        })
        .collect::<Result<Vec<_>, PlanError>>()?;
    let device_ids = device_ids(pod, &wanted, &resolved, inputs, &mut warnings)?;

    let mut claimed = Vec::new();
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
        let cni_args_override = selection.and_then(|s| s.cni_args.as_deref());
        let mut plugins = requests(&config, &network, &capability_args, cni_args_override)?;
        if let Some(id) = &device_id {
            devices::hand_over(&mut plugins, id);
        }
        if let Some(c) = &want.claimed {
            claimed.push(ClaimedAttachment {
                ifname: ifname.clone(),
                namespace: c.namespace.clone(),
                claim: c.name.clone(),
                pool: c.device.pool.clone(),
                device: c.device.device.clone(),
            });
        }
        if let Some(HandOver::Key(key, value)) = want.claimed.as_ref().map(|c| c.hand_over()) {
            for plugin in &mut plugins {
                plugin.insert(key.into(), json!(value));
            }
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
            ipam_claim_reference: selection
                .and_then(|s| s.ipam_claim_reference.as_deref())
                .map(String::from),
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

    if let Some(files) = inputs.conf_files {
        warnings.extend(files.warnings());
    }
    Ok(Plan {
        attachments,
        warnings,
        claimed,
    })
}

/// The device of each wanted network backed by a device-plugin resource
/// (see [`devices`] for the order), from one look-up of the pod (kubelet,
/// and its ResourceClaims where the cluster has them), and only when one
/// is: `None` for the others. Without a device source (`plexus
/// plan` off the node) such networks get none, with a warning.
fn device_ids(
    pod: &Pod,
    wanted: &[Wanted],
    resolved: &[ResolvedNad],
    inputs: &PlanInputs,
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
    let mut ids: Vec<Option<String>> = wanted
        .iter()
        .map(|w| match w.claimed.as_ref()?.hand_over() {
            HandOver::DeviceId(id) => Some(id),
            HandOver::Key(..) => None,
        })
        .collect();
    if needs.is_empty() {
        return Ok(ids);
    }
    let Some(source) = inputs.devices else {
        warnings.extend(needs.iter().map(|need| {
            format!(
                "{}: NetworkAttachmentDefinition {} has resourceName {}: its deviceID comes from \
                 kubelet's PodResources API at ADD time and is not looked up here",
                need.label, need.network, need.resource
            )
        }));
        return Ok(ids);
    };
    let found = devices::look_up(pod, &needs, source, inputs.claims, warnings)?;
    for (i, id) in positions.into_iter().zip(found) {
        ids[i] = Some(id);
    }
    Ok(ids)
}

/// A claimed device's network as a wanted one: its claim's NAD, or its
/// inline configuration.
fn claimed_wanted(claimed: ClaimedNetwork) -> Result<Wanted, PlanError> {
    let label = claimed.label();
    let target = match &claimed.config.network {
        Network::Attachment { namespace, name } => Target::Nad(NetworkRef {
            namespace: namespace.clone(),
            name: name.clone(),
        }),
        Network::Inline(config) => {
            Target::Inline(NetworkConfigList::from_value(config).map_err(|e| {
                PlanError::config(
                    format!("{label}: {}.opaque.parameters.config", claimed.config.field),
                    e.to_string(),
                )
            })?)
        }
    };
    Ok(Wanted {
        target,
        label,
        selection: None,
        claimed: Some(claimed),
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
        .map(|e| {
            let ns = e
                .namespace
                .map_or_else(|| pod.namespace.clone(), String::from);
            (ns, e.name.into())
        })
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
fn assign_ifnames(default_ifname: &IfName, wanted: &[Wanted]) -> Result<Vec<IfName>, PlanError> {
    let explicit: BTreeSet<IfName> = wanted.iter().filter_map(Wanted::explicit_ifname).collect();
    let mut used: BTreeSet<IfName> = BTreeSet::from([default_ifname.clone()]);
    let mut names = Vec::with_capacity(wanted.len());
    for (i, want) in wanted.iter().enumerate() {
        let name = match want.explicit_ifname() {
            // Checked as the selection was read (§4.1.2.1.5).
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
                    .map(net_n)
                    .find(|n| !used.contains(n) && !explicit.contains(n))
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
    // A claim's NAD is the pod's choice as much as a selection.
    let chosen = want.selection.is_some() || want.claimed.is_some();
    let (Target::Nad(reference), true) = (&want.target, chosen) else {
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

/// The config a wanted network stands for.
fn resolve_wanted(
    want: &Wanted,
    nads: &dyn NadSource,
    conf_files: Option<&dyn ConfFiles>,
    plexus_namespace: &str,
) -> Result<ResolvedNad, PlanError> {
    match &want.target {
        Target::Nad(reference) => resolve_nad(reference, nads, conf_files),
        Target::Named(name) => resolve_named(&want.label, name, nads, conf_files, plexus_namespace),
        Target::Inline(list) => Ok(ResolvedNad {
            network: list.name.clone().unwrap_or_else(|| want.label.clone()),
            config: list.clone(),
            source: want.label.clone(),
            resource_name: None,
        }),
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
