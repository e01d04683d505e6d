//! `plexus plan`: the attachment plan of a pod, as the plugin would make it,
//! from manifests and confs on disk (README "Plan output").

use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::cni::args::CniArgs;
use crate::cni::error::CniError;
use crate::cni::names::{ContainerId, IfName};
use crate::conf_files::{self, ConfDir};
use crate::config::{PlexusConf, PodResourcesClient};
use crate::manifest;
use crate::plan::devices::DeviceSource;
use crate::plan::{self, ConfFiles, DefaultNetwork, PlanInputs, PlanOptions};
use plexus_podresources::client as podresources;

use super::pretty;

#[derive(clap::Args)]
pub struct PlanArgs {
    /// The pod manifest (YAML or JSON; exactly one Pod document).
    #[arg(long, value_name = "FILE")]
    pod: PathBuf,
    /// NetworkAttachmentDefinition manifests: files or directories; repeatable.
    #[arg(long = "nad", value_name = "PATH")]
    nads: Vec<PathBuf>,
    /// CNI config directory for NADs without spec.config (§3.4.1 rules 2–3).
    #[arg(long, value_name = "DIR")]
    conf_dir: Option<PathBuf>,
    /// The cluster-wide default network: a CNI config or config list, or a NAD manifest.
    /// Default: the network of --config, else the first config in --conf-dir.
    #[arg(long, value_name = "FILE")]
    default_network: Option<PathBuf>,
    /// plexus's own CNI conf (policy keys such as strictAnnotations, defaultNetworks).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Fail on an invalid selection annotation instead of ignoring it.
    #[arg(long)]
    strict_annotations: bool,
    /// CNI_IFNAME of the default network.
    #[arg(long, default_value = "eth0", value_name = "NAME")]
    ifname: IfName,
    /// The sandbox's container ID (goes into K8S_POD_INFRA_CONTAINER_ID).
    #[arg(long, value_name = "ID")]
    container_id: Option<ContainerId>,
    /// CNI_ARGS as the runtime sends them; default: made from the pod.
    #[arg(long, value_name = "K=V;...")]
    cni_args: Option<String>,
    /// The runtime's runtimeConfig (JSON object), given to the default network only (§7.5).
    #[arg(long, value_name = "JSON")]
    runtime_config: Option<String>,
    /// kubelet's PodResources socket, asked for the devices of networks backed by a
    /// device-plugin resource; without it their deviceID is left out, with a warning.
    #[arg(long, value_name = "SOCKET")]
    pod_resources: Option<PathBuf>,
}

/// `plexus plan`: the plan as JSON, or the CNI error the plugin would answer.
pub fn run(args: &PlanArgs) -> Result<String, CniError> {
    let pod_docs = manifest::load(&args.pod)?;
    let pod = manifest::single_pod(&pod_docs, &args.pod.display().to_string())?;
    let mut nad_docs = Vec::new();
    for path in &args.nads {
        nad_docs.extend(manifest::load(path)?);
    }
    let nads = manifest::nads(&nad_docs)?;

    let conf = args
        .config
        .as_deref()
        .map(|path| {
            let bytes =
                std::fs::read(path).map_err(|e| CniError::io(path.display().to_string(), e))?;
            PlexusConf::from_slice(&bytes)
                .map_err(|e| CniError::from(e).within(path.display().to_string()))
        })
        .transpose()?;
    let conf_dir = args
        .conf_dir
        .clone()
        .or_else(|| conf.as_ref().map(|c| c.conf_dir.clone()))
        .map(ConfDir::new);

    let mut policy = conf.as_ref().map(|c| c.policy.clone()).unwrap_or_default();
    policy.strict_annotations |= args.strict_annotations;
    let cni_args = args
        .cni_args
        .as_deref()
        .map(|text| CniArgs::parse(text).map_err(|e| e.within("--cni-args")))
        .transpose()?;
    let runtime_config = match (&args.runtime_config, &conf) {
        (Some(text), _) => parse_object(text, "--runtime-config")?,
        (None, Some(conf)) => conf.runtime_config.clone(),
        (None, None) => Default::default(),
    };
    let mut options =
        PlanOptions::new(policy, args.ifname.clone()).with_runtime_config(runtime_config);
    options.container_id = args.container_id.clone();
    options = options.with_cni_args(cni_args);

    let default_network = match (&args.default_network, &conf) {
        (Some(path), _) => conf_files::network_file(path)?,
        (None, Some(conf)) => plan::cluster_network(
            &conf.cluster_network,
            &nads,
            conf_dir.as_ref().map(|d| d as &dyn ConfFiles),
            &conf.policy.plexus_namespace,
        )?,
        (None, None) => first_conf(conf_dir.as_ref())?,
    };

    let kubelet = args
        .pod_resources
        .as_ref()
        .map(|socket| PodResourcesClient::new(socket, podresources::DEFAULT_TIMEOUT));
    let inputs = PlanInputs {
        nads: &nads,
        conf_files: conf_dir.as_ref().map(|d| d as &dyn ConfFiles),
        devices: kubelet.as_ref().map(|k| k as &dyn DeviceSource),
        claims: None,
        default_network: &default_network,
        options: &options,
    };
    let mut plan = plan::plan(&pod, &inputs)?;
    if let Some(conf) = &conf {
        plan.warnings.splice(0..0, conf.warnings.iter().cloned());
        // The auxiliary chain runs after the pod's networks (`--conf-dir`
        // replaces the conf's `confDir` there too).
        let conf = PlexusConf {
            conf_dir: args
                .conf_dir
                .clone()
                .unwrap_or_else(|| conf.conf_dir.clone()),
            ..conf.clone()
        };
        if let Some(chain) =
            conf_files::auxiliary::load(conf_files::auxiliary::ChainKeys::of(&conf))?
        {
            plan::auxiliary::add_chain(&mut plan, &chain, &pod, &options)?;
        }
    }
    Ok(pretty(&plan.to_value()))
}

fn first_conf(conf_dir: Option<&ConfDir>) -> Result<DefaultNetwork, CniError> {
    let dir = conf_dir.ok_or_else(|| {
        CniError::invalid_config(
            "--default-network",
            "no cluster-wide default network (multi-net-spec §6): give --default-network FILE, \
             --config FILE or --conf-dir DIR",
        )
    })?;
    let (path, list) = dir.first().ok_or_else(|| {
        CniError::invalid_config(
            "--conf-dir",
            format!(
                "{} holds no CNI config to use as the default network",
                dir.dir().display()
            ),
        )
    })?;
    Ok(DefaultNetwork {
        network: list.name.clone().unwrap_or_else(|| "default".into()),
        config: list.clone(),
        source: path.display().to_string(),
    })
}

pub(crate) fn parse_object(text: &str, field: &str) -> Result<Map<String, Value>, CniError> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(CniError::invalid_config(
            field,
            format!("must be a JSON object, got {}", manifest::json_type(&other)),
        )),
        Err(e) => Err(CniError::decode(field, e.to_string())),
    }
}
