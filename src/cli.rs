//! The `plexus` command line. The same binary is the CNI plugin: invoked with
//! `CNI_COMMAND` set and no arguments (as every runtime invokes a plugin), it
//! speaks the CNI protocol on stdin/stdout instead.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};
use serde_json::{Map, Value};

use crate::cni::args::CniArgs;
use crate::cni::error::CniError;
use crate::cni::result::CniResult;
use crate::cni::version::CniVersion;
use crate::commands::daemon::DaemonError;
use crate::commands::install::InstallError;
use crate::config::{PlexusConf, PodResourcesClient};
use crate::manifest;
use crate::netattach::deviceinfo::DeviceInfo;
use crate::netattach::status::{NetworkStatus, StatusInput};
use crate::plan::devices::DeviceSource;
use crate::plan::{self, ConfDir, DefaultNetwork, PlanInputs, PlanOptions};
use plexus_podresources::client as podresources;

#[derive(Parser)]
#[command(
    name = "plexus",
    version,
    about = "A multi-network CNI plugin (Kubernetes multi-net spec v1.3).",
    long_about = "A multi-network CNI plugin implementing the Network Plumbing WG's multi-net spec v1.3.\n\n\
                  Invoked by a container runtime with CNI_COMMAND set, plexus is a CNI plugin; \
                  the subcommands below are for people and scripts."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the attachment plan for a pod as JSON (README "Plan output").
    Plan(PlanArgs),
    /// Print the network-status entry (multi-net-spec §5) a CNI result yields.
    Status(StatusArgs),
    /// Attach two example pods (examples/demo) to a bridge and a macvlan
    /// network inside namespaces it creates, ping, print their network-status,
    /// tear down. Needs root; no cluster.
    Demo,
    /// Make this node use plexus, and keep it so with --watch (the
    /// DaemonSet's entrypoint): install the binary, write a kubeconfig and
    /// 00-plexus.conflist around the cluster network's conf.
    Install(InstallArgs),
    /// Serve the node's CNI calls on a unix socket (thick mode): the
    /// runtime's exec of plexus forwards to it when the conf names the
    /// socket (`daemonSocket`).
    Daemon(DaemonArgs),
    /// Print plexus's version and the spec versions it speaks.
    Version,
}

#[derive(clap::Args)]
struct InstallArgs {
    /// Where the node's root file system is mounted; the other paths are
    /// the node's, as the generated files name them.
    #[arg(long, default_value = "/")]
    root: PathBuf,
    /// The binary to install (default: this one).
    #[arg(long, value_name = "FILE")]
    source: Option<PathBuf>,
    #[arg(long, default_value = "/opt/cni/bin")]
    bin_dir: PathBuf,
    #[arg(long, default_value = "/etc/cni/net.d")]
    conf_dir: PathBuf,
    /// The kubeconfig to write from the service account and name in the conf.
    #[arg(long, default_value = "/etc/cni/net.d/plexus.d/plexus.kubeconfig")]
    kubeconfig: PathBuf,
    /// Write no kubeconfig (pods and NADs come from `manifestDir` in --settings).
    #[arg(long)]
    no_kubeconfig: bool,
    /// The service account's token and ca.crt (in this container).
    #[arg(long, default_value = "/var/run/secrets/kubernetes.io/serviceaccount")]
    service_account: PathBuf,
    /// The API server URL (default: from KUBERNETES_SERVICE_HOST and _PORT).
    #[arg(long)]
    api_server: Option<String>,
    /// §6.1.2: wait for this file (a node path) before writing the conf.
    #[arg(long, value_name = "FILE")]
    readiness_indicator_file: Option<PathBuf>,
    /// plexus's settings (a JSON object: the ConfigMap), merged into the conf;
    /// or a Multus thick daemon-config.json, whose keys are mapped or explained.
    #[arg(long, value_name = "FILE")]
    settings: Option<PathBuf>,
    /// Thick mode: the socket `plexus daemon --socket` serves, named as the
    /// conf's `daemonSocket` unless the settings name one.
    #[arg(long, value_name = "SOCKET")]
    daemon_socket: Option<PathBuf>,
    /// Without --watch: seconds to wait for the cluster network, then fail.
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
    /// Keep watching the conf dir and the token, converging on every change.
    #[arg(long)]
    watch: bool,
    /// Milliseconds between checks while waiting or watching.
    #[arg(long, default_value_t = 1000)]
    poll_ms: u64,
    /// On SIGTERM/SIGINT, remove 00-plexus.conflist, unless --pod names a
    /// pod whose DaemonSet remains (a rolling update: src/commands/install/owner.rs).
    #[arg(long)]
    cleanup: bool,
    /// This installer's pod, `NAMESPACE/NAME` (deploy/ sets POD from the
    /// downward API), for --cleanup.
    #[arg(long, env = "POD", value_name = "NAMESPACE/NAME")]
    pod: Option<String>,
}

#[derive(clap::Args)]
struct DaemonArgs {
    /// The socket to serve on; its directory is made root-only.
    #[arg(long, default_value = "/run/plexus/plexus.sock")]
    socket: PathBuf,
    /// The API server to watch and write to (calls whose conf names a
    /// kubeconfig use this one).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The node served: its pods are cached, other nodes' pods refused.
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    node_name: Option<String>,
    /// Where /metrics, /healthz and /readyz are served; "none" for nowhere.
    #[arg(long, default_value = "127.0.0.1:9109", value_name = "ADDR:PORT")]
    metrics_address: String,
    /// Calls served at once; the rest wait their turn.
    #[arg(long, default_value_t = 8)]
    max_calls: usize,
    /// Seconds one API request may take.
    #[arg(long, default_value_t = 10.0)]
    api_timeout: f64,
    /// Seconds all tries of a network-status write may take (with
    /// `--status-write sync`).
    #[arg(long, default_value_t = 20.0)]
    api_status_timeout: f64,
    /// When an ADD's network-status and claim status are written: `async`,
    /// queued in the outbox (surviving a crash) and written right after the
    /// ADD answers; `sync`, before it answers, as a plugin process does.
    #[arg(long, value_enum, default_value_t = StatusWriteArg::Async)]
    status_write: StatusWriteArg,
    /// The daemon's state (the status outbox), surviving its restarts.
    #[arg(long, default_value = "/run/plexus/state", value_name = "DIR")]
    state_dir: PathBuf,
    /// plexus's `cniDir` on the node: plugin processes that ADD a pod
    /// themselves (thin mode, `daemonFallback: thin`) note its sandbox
    /// there, and hot-plug serves it too.
    #[arg(long, default_value = crate::config::DEFAULT_CNI_DIR, value_name = "DIR")]
    cni_dir: PathBuf,
    /// Seconds SIGTERM waits for the calls in flight and queued writes.
    #[arg(long, default_value_t = 20.0)]
    grace: f64,
    /// Attach and detach secondary networks on running pods when their
    /// `k8s.v1.cni.cncf.io/networks` annotation changes (needs
    /// --kubeconfig); `--dynamic-networks=false` turns it off.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    dynamic_networks: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum StatusWriteArg {
    Async,
    Sync,
}

#[derive(clap::Args)]
struct PlanArgs {
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
    ifname: String,
    /// The sandbox's container ID (goes into K8S_POD_INFRA_CONTAINER_ID).
    #[arg(long, value_name = "ID")]
    container_id: Option<String>,
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

#[derive(clap::Args)]
struct StatusArgs {
    /// A CNI ADD result (JSON, any version 0.1.0 – 1.1.0).
    #[arg(long, value_name = "FILE")]
    result: PathBuf,
    /// The network's name as the status shows it: `ns/name`, or the default network's name.
    #[arg(long, value_name = "NS/NAME")]
    network: String,
    /// CNI_IFNAME of the attachment (used for results older than 0.3.0).
    #[arg(long, value_name = "NAME")]
    ifname: Option<String>,
    /// The attachment is the cluster-wide default network.
    #[arg(long)]
    default: bool,
    /// The selection's `default-route` (multi-net-spec §5.3.7.4: the entry
    /// has one only then): its gateways, or none for `[]`, which reports the
    /// result's own default gateways.
    #[arg(long = "default-route", value_name = "IP", num_args = 0..)]
    default_route: Option<Vec<IpAddr>>,
    /// A device-info file (device-info spec) to include.
    #[arg(long, value_name = "FILE")]
    device_info: Option<PathBuf>,
    /// The result's version when the file has no cniVersion (an IPAM result).
    #[arg(long, value_name = "VERSION")]
    cni_version: Option<String>,
}

/// How a command ended, for `main` to report: the process's only writer to
/// stderr outside logging.
pub enum Outcome {
    /// A CNI plugin call (cni-SPEC §2): its result or error is already on
    /// stdout; the process exits with this code.
    PluginCall(i32),
    /// A command's output, printed on stdout (install prints nothing: it
    /// reports through its logs).
    Done(String),
    /// A command failed: `plexus <command>: <error>` on stderr, exit 1.
    Failed {
        command: &'static str,
        error: String,
    },
}

/// Entry point: runs the plugin call or the command the arguments name.
pub fn main() -> Outcome {
    let plugin_mode = std::env::var_os("CNI_COMMAND").is_some() && std::env::args_os().len() <= 1;
    if plugin_mode {
        return Outcome::PluginCall(crate::commands::daemon::shim::run());
    }
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Install(_) | Command::Daemon(_)) {
        // Warnings on stderr, as a plugin call without logging keys has them.
        crate::logging::init_call(&crate::logging::LogSettings::default());
    }
    let (command, outcome) = match cli.command {
        Command::Plan(args) => ("plan", run_plan(&args).map_err(|e| e.to_string())),
        Command::Status(args) => ("status", run_status(&args).map_err(|e| e.to_string())),
        Command::Demo => (
            "demo",
            crate::commands::demo::run().map_err(|e| e.to_string()),
        ),
        Command::Install(args) => ("install", run_install(&args).map_err(|e| e.to_string())),
        Command::Daemon(args) => ("daemon", run_daemon(&args).map_err(|e| e.to_string())),
        Command::Version => ("version", Ok(version_text())),
    };
    match outcome {
        Ok(text) => Outcome::Done(text),
        Err(error) => Outcome::Failed { command, error },
    }
}

/// `plexus install`; its failures are the installer's own ([`InstallError`]),
/// never CNI codes: no runtime reads them.
fn run_install(args: &InstallArgs) -> Result<String, InstallError> {
    use crate::commands::install::{stop_on_signals, Installer};
    crate::logging::init_service();
    let source = match &args.source {
        Some(s) => s.clone(),
        None => std::env::current_exe().map_err(|source| InstallError::Io {
            path: "this binary (/proc/self/exe)".into(),
            source,
        })?,
    };
    let settings = match &args.settings {
        None => Map::new(),
        Some(path) => match read_json(path) {
            Ok(Value::Object(m)) => m,
            Ok(other) => {
                return Err(InstallError::Invalid {
                    what: format!("--settings {}", path.display()),
                    reason: format!("must be a JSON object, got {other}"),
                })
            }
            Err(e) => {
                return Err(InstallError::Invalid {
                    what: "--settings".into(),
                    reason: e.details,
                })
            }
        },
    };
    // plexus's settings, or a Multus thick daemon-config.json as it is.
    let settings = crate::commands::install::settings::Settings::from_map(
        settings,
        &args.root,
        args.daemon_socket.as_deref(),
    )?;
    if let (Some(flag), Some(setting)) = (
        &args.readiness_indicator_file,
        &settings.readiness_indicator_file,
    ) {
        if flag != setting {
            tracing::warn!(
                key = "readinessindicatorfile",
                "settings: not used: --readiness-indicator-file {} wins over {}",
                flag.display(),
                setting.display()
            );
        }
    }
    for note in &settings.notes {
        if note.mapped {
            tracing::info!(key = %note.key, "settings: {}", note.text);
        } else {
            tracing::warn!(key = %note.key, "settings: not used: {}", note.text);
        }
    }
    if !(args.timeout > 0.0 && args.timeout <= 86_400.0) {
        return Err(InstallError::Invalid {
            what: "--timeout".into(),
            reason: format!("{} is out of range (0, 86400]", args.timeout),
        });
    }
    let installer = Installer {
        root: args.root.clone(),
        source,
        bin_dir: args.bin_dir.clone(),
        conf_dir: settings.conf_dir.unwrap_or_else(|| args.conf_dir.clone()),
        kubeconfig: (!args.no_kubeconfig).then(|| args.kubeconfig.clone()),
        service_account: args.service_account.clone(),
        api_server: args.api_server.clone(),
        readiness_indicator_file: args
            .readiness_indicator_file
            .clone()
            .or(settings.readiness_indicator_file),
        settings: settings.conf,
        cluster_conf: settings.cluster_conf,
        verified_binary: Default::default(),
    };
    let stop = stop_on_signals()?;
    let timeout = (!args.watch).then(|| std::time::Duration::from_secs_f64(args.timeout));
    let poll = std::time::Duration::from_millis(args.poll_ms.clamp(10, 60_000));
    installer.run(timeout, args.watch, poll, &stop)?;
    if args.cleanup && stop.load(std::sync::atomic::Ordering::Relaxed) {
        use crate::commands::install::owner::{on_stop, OnStop};
        let pod = args.pod.as_deref().and_then(|p| p.split_once('/'));
        let decision = match (pod, installer.kubeconfig_here()) {
            (Some((namespace, name)), Some(kubeconfig)) => on_stop(&kubeconfig, namespace, name),
            _ => OnStop::Remove {
                why: "no --pod (or no kubeconfig) to ask whether plexus stays".into(),
            },
        };
        match decision {
            OnStop::Keep { daemon_set } => tracing::info!(
                daemon_set,
                "kept {}: its DaemonSet remains (a rolling update), the next pod takes over",
                crate::commands::install::CONFLIST_NAME
            ),
            OnStop::Remove { why } => {
                installer.cleanup()?;
                tracing::info!(why, "removed {}", crate::commands::install::CONFLIST_NAME);
            }
        }
    }
    Ok(String::new())
}

/// `plexus daemon`; its failures are the daemon's own ([`DaemonError`]).
fn run_daemon(args: &DaemonArgs) -> Result<String, DaemonError> {
    use std::time::Duration;
    crate::logging::init_service();
    let seconds = |flag: &str, s: f64| {
        if s > 0.0 && s <= 3600.0 {
            Ok(Duration::from_secs_f64(s))
        } else {
            Err(DaemonError::Settings(format!(
                "{flag}: {s} is out of range (0, 3600]"
            )))
        }
    };
    let metrics_address = match args.metrics_address.as_str() {
        "none" => None,
        a => Some(
            a.parse()
                .map_err(|e| DaemonError::Settings(format!("--metrics-address: {a:?}: {e}")))?,
        ),
    };
    let settings = crate::commands::daemon::Settings {
        socket: args.socket.clone(),
        kubeconfig: args.kubeconfig.clone(),
        node: args.node_name.clone().filter(|n| !n.is_empty()),
        metrics_address,
        max_calls: args.max_calls,
        api_timeouts: crate::config::ApiTimeouts {
            request: seconds("--api-timeout", args.api_timeout)?,
            status_write: seconds("--api-status-timeout", args.api_status_timeout)?,
        },
        grace: seconds("--grace", args.grace)?,
        status_outbox: (args.status_write == StatusWriteArg::Async)
            .then(|| args.state_dir.join("status")),
        sandboxes: Some(args.state_dir.join("sandboxes")),
        plugins_cni_dir: Some(args.cni_dir.clone()),
        dynamic_networks: args.dynamic_networks,
    };
    crate::commands::daemon::run(settings)?;
    Ok(String::new())
}

fn version_text() -> String {
    format!(
        "plexus {}\nCNI spec versions: {}\nmulti-net spec: v1.3",
        env!("CARGO_PKG_VERSION"),
        CniVersion::ALL.map(|v| v.as_str()).join(", ")
    )
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).expect("serde_json::Value always serialises")
}

fn run_plan(args: &PlanArgs) -> Result<String, CniError> {
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

    crate::cni::names::check_ifname(&args.ifname)
        .map_err(|reason| CniError::invalid_config("--ifname", reason))?;
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
        (Some(path), _) => plan::default_network_from_file(path)?,
        (None, Some(conf)) => plan::cluster_network(
            &conf.cluster_network,
            &nads,
            conf_dir.as_ref(),
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
        conf_dir: conf_dir.as_ref(),
        devices: kubelet.as_ref().map(|k| k as &dyn DeviceSource),
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
            crate::plan::auxiliary::load(crate::plan::auxiliary::ChainKeys::of(&conf))?
        {
            plan::add_auxiliary_chain(&mut plan, &chain, &pod, &options)?;
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
                dir.path().display()
            ),
        )
    })?;
    Ok(DefaultNetwork {
        network: list.name.clone().unwrap_or_else(|| "default".into()),
        config: list.clone(),
        source: path.display().to_string(),
    })
}

fn parse_object(text: &str, field: &str) -> Result<Map<String, Value>, CniError> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(CniError::invalid_config(
            field,
            format!("must be a JSON object, got {}", manifest::json_type(&other)),
        )),
        Err(e) => Err(CniError::decode(field, e.to_string())),
    }
}

fn read_json(path: &Path) -> Result<Value, CniError> {
    let text = std::fs::read(path).map_err(|e| CniError::io(path.display().to_string(), e))?;
    serde_json::from_slice(&text)
        .map_err(|e| CniError::decode(path.display().to_string(), e.to_string()))
}

fn run_status(args: &StatusArgs) -> Result<String, CniError> {
    let value = read_json(&args.result)?;
    let origin = args.result.display().to_string();
    let result = match &args.cni_version {
        Some(v) => CniResult::from_value_as(&value, CniVersion::parse_field(v, "--cni-version")?),
        None => CniResult::from_value(&value),
    }
    .map_err(|e| e.within(origin.as_str()))?;
    if let Some(ifname) = &args.ifname {
        crate::cni::names::check_ifname(ifname)
            .map_err(|reason| CniError::invalid_config("--ifname", reason))?;
    }
    // §5.3.8: only a map that is valid device information (device-info-SPEC
    // §3.1) may be published.
    let device_info = args
        .device_info
        .as_deref()
        .map(|path| {
            DeviceInfo::from_value(&read_json(path)?).map_err(|e| CniError {
                details: format!("--device-info {}: {}", path.display(), e.details),
                ..e
            })
        })
        .transpose()?;
    let input = StatusInput {
        network: &args.network,
        ifname: args.ifname.as_deref(),
        default: args.default,
        gateway_request: args.default_route.as_deref(),
        device_info,
    };
    Ok(pretty(
        &NetworkStatus::from_result(Some(&result), &input).to_value(),
    ))
}
