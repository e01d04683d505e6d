//! What a network's name stands for: a NAD's config (§3.4), a file, a
//! `confDir` entry, as Multus's `getNetDelegate` reads `clusterNetwork` and
//! `defaultNetworks`; and the default network (§6), configured or
//! overridden by the pod's `v1.multus-cni.io/default-network`.

use std::collections::BTreeMap;
use std::path::Path;

use super::error::{NotFound, PlanError, Unresolved};
use super::inputs::{AtPath, ConfFiles, DefaultNetwork, PlanInputs};
use crate::cluster::NadSource;
use crate::cni::config::NetworkConfigList;
use crate::config::ClusterNetwork;
use crate::manifest::Document;
use crate::netattach::nad::NetworkAttachmentDefinition;
use crate::netattach::names::NetworkRef;
use crate::netattach::pod::Pod;
use crate::netattach::selection::{parse_selection_annotation, DEFAULT_NETWORK_ANNOTATION};

/// A network resolved to the config it stands for.
pub(super) struct ResolvedNad {
    /// How it is named in the plan and in network-status: `ns/name` for a
    /// NAD, the config's `name` otherwise.
    pub network: String,
    pub config: NetworkConfigList,
    /// Where the config came from.
    pub source: String,
    /// The device-plugin resource backing the network (its
    /// `k8s.v1.cni.cncf.io/resourceName`).
    pub resource_name: Option<String>,
}

/// §3.4.1: the config a NAD stands for, and where it came from.
pub(super) fn resolve_nad(
    reference: &NetworkRef,
    nads: &dyn NadSource,
    conf_files: Option<&dyn ConfFiles>,
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
    let files = conf_files.ok_or_else(|| {
        not_found(NotFound::NoConfDir {
            network: reference.clone(),
        })
    })?;
    match files.find(&reference.name) {
        Some((path, list)) => Ok(resolved(list.clone(), path.display().to_string())),
        None => Err(not_found(NotFound::NotInConfDir {
            network: reference.clone(),
            dir: files.dir().to_path_buf(),
        })),
    }
}

/// §6: the configured cluster network, unless the pod overrides it with
/// Multus's `v1.multus-cni.io/default-network` annotation.
pub(super) fn resolve_default_network(
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
            .as_deref()
            .unwrap_or(&inputs.options.policy.plexus_namespace)
            .to_string(),
        name: element.name.to_string(),
    };
    let ResolvedNad { config, source, .. } =
        resolve_nad(&reference, inputs.nads, inputs.conf_files)?;
    Ok(DefaultNetwork {
        network: reference.to_string(),
        config,
        source,
    })
}

/// Resolve plexus's configured cluster network: `delegates[0]`, or
/// `clusterNetwork` as `resolve_named` reads it.
pub fn cluster_network(
    conf: &ClusterNetwork,
    nads: &dyn NadSource,
    conf_files: Option<&dyn ConfFiles>,
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
            resolve_named("clusterNetwork", name, nads, conf_files, plexus_namespace)?
        }
    };
    Ok(DefaultNetwork {
        network: resolved.network,
        config: resolved.config,
        source: resolved.source,
    })
}

/// `clusterNetwork` and each `defaultNetworks` entry (`field`), as Multus's
/// `getNetDelegate` reads them: an absolute path is a config file (or a
/// NetworkAttachmentDefinition manifest) or a directory, whose first config
/// in file-name order is taken (plexus's own skipped); anything else is a
/// NAD (in `multusNamespace` unless `ns/name`) if one exists, else the `name`
/// of a config in `confDir`. Without conf files (off the node) a path
/// names nothing.
pub(super) fn resolve_named(
    field: &str,
    name: &str,
    nads: &dyn NadSource,
    conf_files: Option<&dyn ConfFiles>,
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
        let at = match conf_files {
            Some(files) => files.at(path)?,
            None => AtPath::Missing,
        };
        return match at {
            AtPath::Directory(Some((file, list))) => Ok(ResolvedNad {
                network: config_name(&list, &file)?,
                config: list,
                source: file.display().to_string(),
                resource_name: None,
            }),
            AtPath::Directory(None) => Err(not_found(Unresolved::EmptyDirectory)),
            AtPath::File(docs) => network_from(path, &docs),
            AtPath::Missing => Err(not_found(Unresolved::NoSuchPath)),
        };
    }
    if let Ok(reference) = NetworkRef::parse(name, plexus_namespace) {
        if nads.get(&reference.namespace, &reference.name)?.is_some() {
            return resolve_nad(&reference, nads, conf_files);
        }
    }
    if let Some((file, list)) = conf_files.and_then(|d| d.find(name)) {
        return Ok(ResolvedNad {
            network: name.to_string(),
            config: list.clone(),
            source: file.display().to_string(),
            resource_name: None,
        });
    }
    Err(not_found(Unresolved::Unknown {
        namespace: plexus_namespace.to_string(),
        conf_dir: conf_files.map(|d| d.dir().to_path_buf()),
    }))
}

/// A config's `name`, which names its network in the plan and network-status.
pub(super) fn config_name(config: &NetworkConfigList, origin: &Path) -> Result<String, PlanError> {
    config.name.clone().ok_or_else(|| {
        PlanError::config(
            format!("{}: name", origin.display()),
            "a network given as a file needs a name",
        )
    })
}

/// A cluster network from the documents of the file `path`: a CNI config
/// or config list (JSON), or a NetworkAttachmentDefinition manifest.
pub fn network_from_documents(path: &Path, docs: &[Document]) -> Result<DefaultNetwork, PlanError> {
    let resolved = network_from(path, docs)?;
    Ok(DefaultNetwork {
        network: resolved.network,
        config: resolved.config,
        source: resolved.source,
    })
}

/// A network from the documents of the file `path`: a CNI config or config
/// list (JSON), or a NetworkAttachmentDefinition manifest.
fn network_from(path: &Path, docs: &[Document]) -> Result<ResolvedNad, PlanError> {
    let origin = path.display().to_string();
    let [doc] = docs else {
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
