//! The `plexus` command line. The same binary is the CNI plugin: invoked with
//! `CNI_COMMAND` set and no arguments (as every runtime invokes a plugin), it
//! speaks the CNI protocol on stdin/stdout instead.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use serde_json::{Map, Value};

use crate::cni::version::CniVersion;
use crate::commands::daemon::DaemonError;
use crate::commands::install::InstallError;

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
    Plan(crate::commands::plan::PlanArgs),
    /// Print the network-status entry (multi-net-spec §5) a CNI result yields.
    Status(crate::commands::status::StatusArgs),
    /// Print the IPPools of cluster-wide IPAM (`"ipam": {"type":
    /// "whereabouts"}`) and who holds each address, as JSON.
    Pools(crate::commands::pools::PoolsArgs),
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
    /// The socket `plexus daemon --socket` serves, named as the conf's
    /// `daemonSocket` when the settings are a Multus thick daemon-config
    /// (they have `socketDir`) that names none. plexus's own settings choose
    /// thin or thick by their `daemonSocket` alone.
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
    /// Enforce MultiNetworkPolicy (k8s.cni.cncf.io) on the node's pods'
    /// secondary interfaces, with nftables rules in each pod's namespace
    /// written before its ADD answers (needs --kubeconfig, without which it
    /// is off, and the CRD deploy/crds/multi-networkpolicy.yaml).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL",
          num_args = 0..=1, default_missing_value = "true")]
    multi_network_policy: bool,
    /// Seconds between passes of cluster-wide IPAM's reconciler, which
    /// gives back the addresses of pods that are gone; one daemon of the
    /// cluster runs it at a time (the holder of the Lease
    /// kube-system/plexus-ipam-reconciler). 0 turns it off.
    #[arg(long, default_value_t = 300.0, value_name = "SECONDS")]
    ipam_reconcile_interval: f64,
    /// The namespaces whose IPPools the reconciler looks after (whereabouts
    /// keeps them in its kubeconfig context's namespace, else
    /// kube-system); every namespace when none is named.
    #[arg(long, value_delimiter = ',', value_name = "NAMESPACE,...")]
    ipam_reconcile_namespaces: Vec<String>,
    /// Be a DRA driver (dra.plexus.dev, Kubernetes 1.34+): register with
    /// kubelet, publish the node's SR-IOV VFs, vDPA devices and the
    /// --dra-netdev netdevs as ResourceSlices, prepare claims for them
    /// (needs --kubeconfig; off on an API server without resource.k8s.io/v1).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL",
          num_args = 0..=1, default_missing_value = "true")]
    dra: bool,
    /// kubelet's plugin registration directory.
    #[arg(long, default_value = crate::commands::daemon::dra::REGISTRY_DIR, value_name = "DIR")]
    dra_registry_dir: PathBuf,
    /// kubelet's plugins directory; the driver's socket is
    /// `<DIR>/dra.plexus.dev/dra.sock`.
    #[arg(long, default_value = crate::commands::daemon::dra::PLUGINS_DIR, value_name = "DIR")]
    dra_plugins_dir: PathBuf,
    /// Where the container runtime reads CDI specs.
    #[arg(long, default_value = crate::commands::daemon::dra::CDI_DIR, value_name = "DIR")]
    dra_cdi_dir: PathBuf,
    /// The sysfs the devices are read from.
    #[arg(long, default_value = "/sys", value_name = "DIR")]
    dra_sysfs: PathBuf,
    /// A whole netdev to offer for host-device (repeat, or comma-separated);
    /// none is offered unless named.
    #[arg(long, value_delimiter = ',', value_name = "NAME,...")]
    dra_netdev: Vec<String>,
    /// The Multus resource name (k8s.cni.cncf.io/resourceName) of the VFs
    /// of a PF, or of `vdpa` or `netdev` devices: `PF=NAME` (repeat);
    /// default `dra.plexus.dev/<PF>`.
    #[arg(long, value_delimiter = ',', value_name = "PF=NAME,...")]
    dra_resource_name: Vec<String>,
    /// Seconds between looks at the node's devices.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    dra_rescan: f64,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum StatusWriteArg {
    Async,
    Sync,
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

/// Whether this binary was run by the file name `name` (a link to it).
fn invoked_as(name: &str) -> bool {
    std::env::args_os()
        .next()
        .and_then(|argv0| {
            let path = std::path::PathBuf::from(argv0);
            path.file_name().map(|n| n == name)
        })
        .unwrap_or(false)
}

/// Entry point: runs the plugin call or the command the arguments name.
pub fn main() -> Outcome {
    let plugin_mode = std::env::var_os("CNI_COMMAND").is_some() && std::env::args_os().len() <= 1;
    if plugin_mode && invoked_as(crate::whereabouts::PLUGIN_TYPE) {
        // Installed as `whereabouts` (README "From whereabouts"): the IPAM
        // plugin alone, for a runtime or a meta-plugin that execs it.
        return Outcome::PluginCall(crate::whereabouts::run_as_plugin());
    }
    if plugin_mode {
        return Outcome::PluginCall(crate::plugin::shim::run());
    }
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Install(_) | Command::Daemon(_)) {
        // Warnings on stderr, as a plugin call without logging keys has them.
        crate::logging::init_call(&crate::logging::LogSettings::default());
    }
    let (command, outcome) = match cli.command {
        Command::Plan(args) => (
            "plan",
            crate::commands::plan::run(&args).map_err(|e| e.to_string()),
        ),
        Command::Status(args) => (
            "status",
            crate::commands::status::run(&args).map_err(|e| e.to_string()),
        ),
        Command::Pools(args) => (
            "pools",
            crate::commands::pools::run(&args).map_err(|e| e.to_string()),
        ),
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
        Some(path) => match crate::commands::read_json(path) {
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
        state: crate::commands::daemon::StateFiles {
            status_outbox: (args.status_write == StatusWriteArg::Async)
                .then(|| args.state_dir.join("status")),
            sandboxes: Some(args.state_dir.join("sandboxes")),
            plugins_cni_dir: Some(args.cni_dir.clone()),
        },
        dynamic_networks: args.dynamic_networks,
        multi_network_policy: args.multi_network_policy,
        ipam_reconcile: {
            // The namespaces are checked even with the reconciler off.
            let interval = match args.ipam_reconcile_interval {
                0.0 => None,
                s => Some(seconds("--ipam-reconcile-interval", s)?),
            };
            let namespaces = args
                .ipam_reconcile_namespaces
                .iter()
                .map(|ns| {
                    crate::netattach::names::check_dns1123_label(ns)
                        .map(|()| ns.clone())
                        .map_err(|e| {
                            DaemonError::Settings(format!("--ipam-reconcile-namespaces: {e}"))
                        })
                })
                .collect::<Result<_, _>>()?;
            interval.map(|interval| crate::commands::daemon::IpamReconcile {
                interval,
                namespaces,
            })
        },
        dra: match args.dra {
            false => None,
            true => Some(crate::commands::daemon::dra::DraSettings {
                registry_dir: args.dra_registry_dir.clone(),
                plugin_dir: args.dra_plugins_dir.join(crate::dra::driver::DRIVER),
                cdi_dir: args.dra_cdi_dir.clone(),
                state_dir: args.state_dir.join("dra"),
                sysfs: args.dra_sysfs.clone(),
                netdevs: args.dra_netdev.clone(),
                resource_names: args
                    .dra_resource_name
                    .iter()
                    .map(|pair| match pair.split_once('=') {
                        Some((pf, name)) if !pf.is_empty() && !name.is_empty() => {
                            Ok((pf.to_string(), name.to_string()))
                        }
                        _ => Err(DaemonError::Settings(format!(
                            "--dra-resource-name: {pair:?} is not PF=NAME"
                        ))),
                    })
                    .collect::<Result<_, _>>()?,
                rescan: seconds("--dra-rescan", args.dra_rescan)?,
            }),
        },
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
