//! plexus's own CNI configuration: what the runtime passes on stdin when it
//! invokes `plexus`. The keys are Multus's, so an operator can swap the `type`
//! and keep the rest:
//!
//! ```json
//! {"cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
//!  "delegates": [<the cluster-wide default network: a CNI config or config list>],
//!  "defaultNetworks": ["extra-net"], "systemNamespaces": ["kube-system"],
//!  "strictAnnotations": false}
//! ```
//!
//! Keys are matched case-insensitively, as Multus (written in Go) matches them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::cni::casefold;
use crate::cni::config::NetworkConfigList;
use crate::logging::LogSettings;
use crate::policy::SelectionPolicy;
use plexus_podresources::client as podresources;
pub use plexus_podresources::Client as PodResourcesClient;

pub mod error;
pub mod keys;

pub use error::ConfigError;

/// Where a NAD without `spec.config` finds its config (§3.4.1 rules 2-3),
/// and a `clusterNetwork`/`defaultNetworks` entry given as a config's name:
/// Multus's `defaultConfDir`, so a Multus user's configs are found where they
/// are; and not the runtime's own conf dir, whose cluster network conf (and
/// plexus's conflist) a NAD should not pick up by name.
pub const DEFAULT_CONF_DIR: &str = "/etc/cni/multus/net.d";
pub const DEFAULT_CNI_DIR: &str = "/var/lib/cni/plexus";
pub const DEFAULT_BIN_DIR: &str = "/opt/cni/bin";
pub use crate::policy::{DEFAULT_GLOBAL_NAMESPACE, DEFAULT_PLEXUS_NAMESPACE};

/// How long an ADD waits for the cluster network by default: Multus's 45 s.
pub const DEFAULT_READINESS_TIMEOUT: Duration = Duration::from_secs(45);

/// How long a plugin may run before it is killed (`pluginTimeout`):
/// generous, since `dhcp` and plugins talking to remote controllers can
/// take seconds, but well inside kubelet's runtime request timeout.
pub const DEFAULT_PLUGIN_TIMEOUT: Duration = Duration::from_secs(120);

/// Bounds on the API server, from plexus's conf.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ApiTimeouts {
    /// One request, connecting included (Multus hard-codes its own, which
    /// breaks slow control planes: multus-cni #1461).
    pub request: Duration,
    /// All tries of the network-status write together.
    pub status_write: Duration,
}

impl Default for ApiTimeouts {
    fn default() -> Self {
        ApiTimeouts {
            request: Duration::from_secs(10),
            status_write: Duration::from_secs(20),
        }
    }
}

/// The cluster-wide default network (multi-net-spec §6), as configured.
#[derive(Debug, Clone, PartialEq)]
pub enum ClusterNetwork {
    /// `delegates[0]`: an inline CNI config or config list.
    Inline(NetworkConfigList),
    /// `clusterNetwork`: a NAD name (in `multusNamespace`, or `ns/name`), the
    /// `name` of a config in `confDir`, or a path to a config file; resolved in
    /// that order, as Multus does.
    Reference(String),
}

/// plexus's configuration, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct PlexusConf {
    pub cni_version: String,
    pub name: String,
    pub cluster_network: ClusterNetwork,
    /// Which networks a pod gets: `delegates[1..]`, `defaultNetworks`,
    /// `systemNamespaces`, `multusNamespace`, `namespaceIsolation`,
    /// `globalNamespaces`, `strictAnnotations`, `deviceInfoDir`.
    pub policy: SelectionPolicy,
    pub conf_dir: PathBuf,
    pub cni_dir: PathBuf,
    pub bin_dir: PathBuf,
    pub kubeconfig: Option<PathBuf>,
    /// Bounds on the API server (`apiTimeout`, `apiStatusTimeout`, seconds).
    pub api_timeouts: ApiTimeouts,
    /// A directory of Pod and NetworkAttachmentDefinition manifests read
    /// instead of the API server (plexus's own key).
    pub manifest_dir: Option<PathBuf>,
    /// §6.1.2: a file whose existence says the cluster network is ready.
    pub readiness_indicator_file: Option<PathBuf>,
    /// How long an ADD waits for the cluster network (`readinessTimeout`).
    pub readiness_timeout: Duration,
    /// How long an exec'd plugin may run before it is killed
    /// (`pluginTimeout`, plexus's own key).
    pub plugin_timeout: Duration,
    /// kubelet's PodResources API (`podResourcesSocket`, `podResourcesTimeout`):
    /// where networks backed by a device-plugin resource learn their device.
    pub pod_resources: PodResourcesClient,
    /// Thick mode (`daemonSocket`, `daemonFallback`, `daemonTimeout`): the
    /// runtime's exec of plexus forwards the call to `plexus daemon`.
    pub daemon: Option<DaemonClient>,
    /// Multus's `chrootDir`: where the daemon sees the node's root; the
    /// plugins of the calls it serves run chrooted there (README "Thick
    /// mode"). A call run in-process runs on the node already and ignores it.
    pub chroot_dir: Option<PathBuf>,
    /// `logFile`, `logLevel`, `logToStderr`, `logOptions` (Multus's).
    pub logging: LogSettings,
    /// Capabilities plexus asks the runtime for (passed on to the default network).
    pub capabilities: BTreeMap<String, bool>,
    /// What the runtime injected for those capabilities (§7.5: default network only).
    pub runtime_config: Map<String, Value>,
    /// Multus's `auxiliaryCNIChainName`: a chain of plugin configs read from
    /// the subdirectory of this name, run for every pod (see `auxiliary`).
    pub auxiliary_chain: Option<String>,
    /// What the operator should know about the conf (a key that has no
    /// effect, `delegates` overridden by `clusterNetwork`): logged, never fatal.
    pub warnings: Vec<String>,
}

/// Where the shim finds the node daemon, and what it does without one.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonClient {
    /// The daemon's unix socket (`daemonSocket`).
    pub socket: PathBuf,
    /// `daemonFallback`: what a call does when the daemon cannot be reached.
    pub fallback: DaemonFallback,
    /// `daemonTimeout`: the longest a forwarded call waits for its answer.
    pub timeout: Duration,
}

/// What the shim does when nothing listens on `daemonSocket`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonFallback {
    /// Run the call in this process, as without a daemon (the default).
    Thin,
    /// Fail with code 11 (try again later), naming the socket.
    Fail,
}

/// A forwarded call's default bound: longer than an ADD's own waits
/// (`readinessTimeout`, the API requests), short of hanging a runtime.
pub const DEFAULT_DAEMON_TIMEOUT: Duration = Duration::from_secs(120);

/// Multus writes `globalNamespaces` as one comma-separated string; a list is
/// accepted too.
#[derive(Deserialize)]
#[serde(untagged)]
enum NamespaceList {
    Text(String),
    List(Vec<String>),
}

impl NamespaceList {
    fn into_vec(self) -> Vec<String> {
        match self {
            NamespaceList::Text(s) => s
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            NamespaceList::List(v) => v,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RawConf {
    cni_version: Option<String>,
    name: Option<String>,
    #[serde(rename = "type")]
    plugin_type: Option<String>,
    cluster_network: Option<String>,
    delegates: Option<Vec<Value>>,
    default_networks: Option<Vec<String>>,
    system_namespaces: Option<NamespaceList>,
    multus_namespace: Option<String>,
    namespace_isolation: Option<bool>,
    global_namespaces: Option<NamespaceList>,
    conf_dir: Option<String>,
    cni_dir: Option<String>,
    bin_dir: Option<String>,
    kubeconfig: Option<String>,
    api_timeout: Option<f64>,
    api_status_timeout: Option<f64>,
    manifest_dir: Option<String>,
    strict_annotations: Option<bool>,
    #[serde(rename = "readinessindicatorfile")]
    readiness_indicator_file: Option<String>,
    readiness_timeout: Option<f64>,
    plugin_timeout: Option<f64>,
    pod_resources_socket: Option<String>,
    pod_resources_timeout: Option<f64>,
    device_info_dir: Option<String>,
    daemon_socket: Option<String>,
    daemon_fallback: Option<String>,
    daemon_timeout: Option<f64>,
    chroot_dir: Option<String>,
    log_file: Option<String>,
    log_level: Option<String>,
    log_to_stderr: Option<bool>,
    log_options: Option<Value>,
    capabilities: Option<BTreeMap<String, bool>>,
    runtime_config: Option<Map<String, Value>>,
    #[serde(rename = "auxiliaryCNIChainName")]
    auxiliary_cni_chain_name: Option<String>,
}

/// A bound in seconds: more than 0, at most an hour.
fn seconds(key: &str, v: Option<f64>) -> Result<Option<Duration>, ConfigError> {
    match v {
        None => Ok(None),
        Some(s) if s > 0.0 && s <= 3600.0 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(ConfigError::invalid(
            key,
            format!("{s} is out of range: give seconds, more than 0 and at most 3600"),
        )),
    }
}

/// Thick mode's keys; `None` without `daemonSocket`.
fn daemon_client(
    socket: Option<String>,
    fallback: Option<String>,
    timeout: Option<f64>,
) -> Result<Option<DaemonClient>, ConfigError> {
    let fallback = match fallback.as_deref() {
        None | Some("thin") => DaemonFallback::Thin,
        Some("fail") => DaemonFallback::Fail,
        Some(other) => {
            return Err(ConfigError::invalid(
                "daemonFallback",
                format!("{other:?} is not one of \"thin\", \"fail\""),
            ))
        }
    };
    let timeout = seconds("daemonTimeout", timeout)?.unwrap_or(DEFAULT_DAEMON_TIMEOUT);
    match socket {
        None => Ok(None),
        Some(s) if !s.starts_with('/') => Err(ConfigError::invalid(
            "daemonSocket",
            format!("{s:?} is not an absolute path"),
        )),
        Some(s) => Ok(Some(DaemonClient {
            socket: PathBuf::from(s),
            fallback,
            timeout,
        })),
    }
}

/// `chrootDir`: an absolute directory; empty means unset, as in Multus.
fn chroot_dir(dir: Option<String>) -> Result<Option<PathBuf>, ConfigError> {
    match dir {
        None => Ok(None),
        Some(dir) if dir.is_empty() => Ok(None),
        Some(dir) if !dir.starts_with('/') => Err(ConfigError::invalid(
            "chrootDir",
            format!("{dir:?} is not an absolute path"),
        )),
        Some(dir) => Ok(Some(PathBuf::from(dir))),
    }
}

/// `auxiliaryCNIChainName`: empty means unset, as in Multus; the name must
/// be a CNI network name, as it names a directory (Multus checks the same).
fn auxiliary_chain(name: Option<String>) -> Result<Option<String>, ConfigError> {
    match name {
        None => Ok(None),
        Some(name) if name.is_empty() => Ok(None),
        Some(name) => crate::cni::names::check_network_name(&name)
            .map(|()| Some(name))
            .map_err(|reason| ConfigError::invalid("auxiliaryCNIChainName", reason)),
    }
}

/// The cluster network and the further `delegates`, as Multus's `LoadNetConf`
/// reads them: `clusterNetwork` wins over `delegates` (which are then not
/// read at all, so a warning says so); otherwise `delegates[0]` is the
/// cluster network and the rest are attached to every pod after it.
fn cluster_network(
    delegates: Option<Vec<Value>>,
    reference: Option<String>,
    warnings: &mut Vec<String>,
) -> Result<(ClusterNetwork, Vec<NetworkConfigList>), ConfigError> {
    // Beside `delegates`, an empty `clusterNetwork` is none (Multus tests `== ""`).
    let reference = reference
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty() || delegates.is_none());
    match (delegates, reference) {
        (_, Some(name)) if name.is_empty() => {
            Err(ConfigError::invalid("clusterNetwork", "must not be empty"))
        }
        (delegates, Some(name)) => {
            if delegates.is_some_and(|d| !d.is_empty()) {
                warnings.push(
                    "delegates: not used, clusterNetwork is given and wins (as in Multus)".into(),
                );
            }
            Ok((ClusterNetwork::Reference(name), Vec::new()))
        }
        (None, None) => Err(ConfigError::invalid(
            "delegates",
            "missing: plexus needs the cluster-wide default network (multi-net-spec §6) \
             as delegates[0] or as clusterNetwork",
        )),
        (Some(delegates), None) => {
            let mut lists = delegates.iter().enumerate().map(|(i, d)| {
                NetworkConfigList::from_value(d).map_err(|e| e.within(format!("delegates[{i}]")))
            });
            let first = lists.next().ok_or_else(|| {
                ConfigError::invalid("delegates", "must hold the cluster-wide default network")
            })??;
            Ok((
                ClusterNetwork::Inline(first),
                lists.collect::<Result<_, _>>()?,
            ))
        }
    }
}

/// Whether plexus's conf reads `key` (matched as Go matches keys).
pub fn reads(key: &str) -> bool {
    keys::read_by::<RawConf>(key)
}

impl PlexusConf {
    pub fn from_slice(bytes: &[u8]) -> Result<PlexusConf, ConfigError> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| ConfigError::NotJson(e.to_string()))?;
        Self::from_value(&value)
    }

    pub fn from_value(value: &Value) -> Result<PlexusConf, ConfigError> {
        if !value.is_object() {
            return Err(ConfigError::invalid(
                "plexus configuration",
                "must be a JSON object",
            ));
        }
        let raw: RawConf = casefold::decode(value)?;

        let mut warnings = value
            .as_object()
            .map(keys::warnings::<RawConf>)
            .unwrap_or_default();
        let (cluster_network, delegates) =
            cluster_network(raw.delegates, raw.cluster_network, &mut warnings)?;

        if let Some(t) = raw.plugin_type.as_deref() {
            if t.is_empty() {
                return Err(ConfigError::invalid("type", "must not be empty"));
            }
        }
        let path =
            |v: Option<String>, default: &str| PathBuf::from(v.unwrap_or_else(|| default.into()));
        let defaults = ApiTimeouts::default();
        let api_timeouts = ApiTimeouts {
            request: seconds("apiTimeout", raw.api_timeout)?.unwrap_or(defaults.request),
            status_write: seconds("apiStatusTimeout", raw.api_status_timeout)?
                .unwrap_or(defaults.status_write),
        };
        let policy = SelectionPolicy::default();
        Ok(PlexusConf {
            cni_version: raw.cni_version.unwrap_or_else(|| "1.0.0".into()),
            name: raw.name.unwrap_or_else(|| "plexus".into()),
            cluster_network,
            policy: SelectionPolicy {
                strict_annotations: raw.strict_annotations.unwrap_or(policy.strict_annotations),
                delegates,
                default_networks: raw.default_networks.unwrap_or_default(),
                system_namespaces: raw
                    .system_namespaces
                    .map(NamespaceList::into_vec)
                    .unwrap_or(policy.system_namespaces),
                plexus_namespace: raw
                    .multus_namespace
                    .filter(|s| !s.is_empty())
                    .unwrap_or(policy.plexus_namespace),
                namespace_isolation: raw
                    .namespace_isolation
                    .unwrap_or(policy.namespace_isolation),
                global_namespaces: raw
                    .global_namespaces
                    .map(NamespaceList::into_vec)
                    .filter(|list| !list.is_empty())
                    .unwrap_or(policy.global_namespaces),
                device_info_dir: raw
                    .device_info_dir
                    .map_or(policy.device_info_dir, PathBuf::from),
            },
            conf_dir: path(raw.conf_dir, DEFAULT_CONF_DIR),
            cni_dir: path(raw.cni_dir, DEFAULT_CNI_DIR),
            bin_dir: path(raw.bin_dir, DEFAULT_BIN_DIR),
            kubeconfig: raw.kubeconfig.map(PathBuf::from),
            api_timeouts,
            manifest_dir: raw.manifest_dir.map(PathBuf::from),
            readiness_indicator_file: raw
                .readiness_indicator_file
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
            readiness_timeout: seconds("readinessTimeout", raw.readiness_timeout)?
                .unwrap_or(DEFAULT_READINESS_TIMEOUT),
            plugin_timeout: seconds("pluginTimeout", raw.plugin_timeout)?
                .unwrap_or(DEFAULT_PLUGIN_TIMEOUT),
            pod_resources: PodResourcesClient::new(
                path(raw.pod_resources_socket, podresources::DEFAULT_SOCKET),
                seconds("podResourcesTimeout", raw.pod_resources_timeout)?
                    .unwrap_or(podresources::DEFAULT_TIMEOUT),
            ),
            daemon: daemon_client(raw.daemon_socket, raw.daemon_fallback, raw.daemon_timeout)?,
            chroot_dir: chroot_dir(raw.chroot_dir)?,
            logging: LogSettings::new(
                raw.log_file,
                raw.log_level,
                raw.log_to_stderr,
                raw.log_options.as_ref(),
            )?,
            capabilities: raw.capabilities.unwrap_or_default(),
            runtime_config: raw.runtime_config.unwrap_or_default(),
            auxiliary_chain: auxiliary_chain(raw.auxiliary_cni_chain_name)?,
            warnings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logging::LogError;
    use serde_json::json;

    fn bridge() -> Value {
        json!({"cniVersion": "1.0.0", "name": "podnet", "type": "bridge"})
    }

    #[test]
    fn multus_shaped_conf_with_defaults() {
        let conf = PlexusConf::from_value(&json!({
            "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
            "delegates": [bridge()],
        }))
        .unwrap();
        assert!(
            matches!(conf.cluster_network, ClusterNetwork::Inline(ref l) if l.name.as_deref() == Some("podnet"))
        );
        assert_eq!(conf.policy.system_namespaces, ["kube-system"]);
        assert_eq!(conf.policy.plexus_namespace, "kube-system");
        // Multus's defaultConfDir (pkg/types/conf.go), for NADs without spec.config.
        assert_eq!(conf.conf_dir, PathBuf::from("/etc/cni/multus/net.d"));
        assert!(!conf.policy.strict_annotations);
        assert_eq!(
            conf.pod_resources,
            PodResourcesClient::new(
                "/var/lib/kubelet/pod-resources/kubelet.sock",
                Duration::from_secs(10)
            )
        );
    }

    #[test]
    fn keys_match_case_insensitively_like_go() {
        let conf = PlexusConf::from_value(&json!({
            "ClusterNetwork": "ovn", "StrictAnnotations": true,
            "globalNamespaces": "default, shared", "RuntimeConfig": {"mac": "02:00:00:00:00:01"},
            "podResourcesSocket": "/run/k/kubelet.sock", "PodResourcesTimeout": 0.5,
        }))
        .unwrap();
        assert_eq!(
            conf.pod_resources,
            PodResourcesClient::new("/run/k/kubelet.sock", Duration::from_millis(500))
        );
        assert_eq!(
            conf.cluster_network,
            ClusterNetwork::Reference("ovn".into())
        );
        assert!(conf.policy.strict_annotations);
        assert_eq!(conf.policy.global_namespaces, ["default", "shared"]);
        assert_eq!(conf.runtime_config["mac"], "02:00:00:00:00:01");
    }

    #[test]
    fn bad_confs_name_the_field() {
        let cases = [
            (json!({}), "delegates: missing"),
            (json!({"delegates": []}), "delegates: must hold"),
            (
                json!({"delegates": [bridge(), {"name": "x"}]}),
                "delegates[1]",
            ),
            (
                json!({"clusterNetwork": " "}),
                "clusterNetwork: must not be empty",
            ),
            (json!({"delegates": [{"name": "x"}]}), "delegates[0]"),
            (
                json!({"clusterNetwork": "x", "strictAnnotations": "yes"}),
                "strictAnnotations",
            ),
            (
                json!({"clusterNetwork": "x", "systemNamespaces": 3}),
                "systemNamespaces",
            ),
            (
                json!({"clusterNetwork": "x", "podResourcesTimeout": 0}),
                "podResourcesTimeout: 0 is out of range",
            ),
            (
                json!({"clusterNetwork": "x", "daemonSocket": "run/plexus.sock"}),
                "daemonSocket: \"run/plexus.sock\" is not an absolute path",
            ),
            (
                json!({"clusterNetwork": "x", "chrootDir": "hostroot"}),
                "chrootDir: \"hostroot\" is not an absolute path",
            ),
            (
                json!({"clusterNetwork": "x", "daemonSocket": "/s", "daemonFallback": "retry"}),
                "daemonFallback: \"retry\" is not one of",
            ),
            (
                json!({"clusterNetwork": "x", "daemonSocket": "/s", "daemonTimeout": -1}),
                "daemonTimeout: -1 is out of range",
            ),
            (
                json!({"clusterNetwork": "x", "logToStderr": "no"}),
                "logToStderr: invalid type",
            ),
            (
                json!({"clusterNetwork": "x", "logLevel": 3}),
                "logLevel: invalid type",
            ),
            (
                json!({"clusterNetwork": "x", "logOptions": {"maxSize": -5}}),
                "logOptions.maxSize: must be a positive integer (megabytes), got -5",
            ),
            (
                json!({"clusterNetwork": "x", "logOptions": {"compress": 1}}),
                "logOptions.compress: invalid type",
            ),
            (
                json!({"clusterNetwork": "x", "logOptions": []}),
                "logOptions: must be a JSON object",
            ),
            (
                json!({"clusterNetwork": "x", "auxiliaryCNIChainName": "../etc"}),
                "auxiliaryCNIChainName: ",
            ),
        ];
        for (input, want) in cases {
            let err = PlexusConf::from_value(&input).unwrap_err();
            let (field, reason) = want.split_once(": ").unwrap_or((want, ""));
            let named = match &err {
                ConfigError::Invalid {
                    field: f,
                    reason: r,
                }
                | ConfigError::Log(LogError::Invalid {
                    field: f,
                    reason: r,
                }) => f == field && r.starts_with(reason),
                // Decoding is the protocol crate's; it names the path.
                ConfigError::Cni(e) | ConfigError::Log(LogError::Cni(e)) => {
                    e.details.starts_with(want)
                }
                ConfigError::NotJson(_) => false,
            };
            assert!(named, "{input}: {err:?}");
        }
        assert!(matches!(
            PlexusConf::from_slice(b"{"),
            Err(ConfigError::NotJson(_))
        ));
        assert!(matches!(
            PlexusConf::from_value(&json!([1])),
            Err(ConfigError::Invalid { .. })
        ));
    }

    #[test]
    fn multus_logging_keys() {
        let conf = PlexusConf::from_value(&json!({
            "clusterNetwork": "x", "logFile": "/var/log/plexus.log", "LogLevel": "Debug",
            "logToStderr": false, "logOptions": {"maxSize": 1, "maxBackups": 2, "compress": false},
        }))
        .unwrap();
        let log = conf.logging;
        assert_eq!(
            log.file.as_deref(),
            Some(std::path::Path::new("/var/log/plexus.log"))
        );
        assert_eq!(log.level, crate::logging::LogLevel::Debug);
        assert!(!log.to_stderr);
        assert_eq!(log.rotation.max_size, crate::logging::rotate::MEGABYTE);
        assert_eq!(log.rotation.max_backups, Some(2));
        assert!(!log.rotation.compress);
    }

    #[test]
    fn cluster_network_wins_over_delegates_as_in_multus() {
        // Multus's LoadNetConf reads `delegates` only without `clusterNetwork`.
        let conf = PlexusConf::from_value(&json!({
            "clusterNetwork": "ovn", "delegates": [bridge(), {"not": "a config"}],
        }))
        .unwrap();
        assert_eq!(
            conf.cluster_network,
            ClusterNetwork::Reference("ovn".into())
        );
        assert!(conf.policy.delegates.is_empty());
        assert_eq!(
            conf.warnings,
            ["delegates: not used, clusterNetwork is given and wins (as in Multus)"]
        );
        // An empty list is no conflict.
        let conf =
            PlexusConf::from_value(&json!({"clusterNetwork": "ovn", "delegates": []})).unwrap();
        assert!(conf.warnings.is_empty());
        // An empty clusterNetwork is none: the delegates are the networks.
        let conf = PlexusConf::from_value(&json!({"clusterNetwork": "", "delegates": [bridge()]}))
            .unwrap();
        assert!(matches!(conf.cluster_network, ClusterNetwork::Inline(_)));
    }

    #[test]
    fn a_multus_thin_conf_warns_only_about_what_has_no_effect() {
        // Multus's own thin conf keys (pkg/types/types.go NetConf), as its
        // docs write them.
        let conf = PlexusConf::from_value(&json!({
            "cniVersion": "0.3.1", "name": "multus-cni-network", "type": "multus",
            "capabilities": {"portMappings": true}, "confDir": "/etc/cni/multus/net.d",
            "cniDir": "/var/lib/cni/multus", "binDir": "/opt/cni/bin",
            "kubeconfig": "/etc/cni/net.d/multus.d/multus.kubeconfig",
            "logFile": "/var/log/multus.log", "logLevel": "debug", "logToStderr": true,
            "readinessindicatorfile": "", "namespaceIsolation": false,
            "globalNamespaces": "default,shared", "systemNamespaces": ["kube-system"],
            "multusNamespace": "kube-system", "retryDeleteOnError": true,
            "clusterNetwork": "default-net", "defaultNetworks": ["extra"],
        }))
        .unwrap();
        // logToStderr is the logging's to read; until it does, it warns.
        assert!(
            conf.warnings.iter().all(|w| w.starts_with("logToStderr: ")),
            "{:?}",
            conf.warnings
        );
    }

    #[test]
    fn further_delegates_are_kept_in_order() {
        let second = json!({"cniVersion": "1.0.0", "name": "storage", "type": "macvlan"});
        let third = json!({"cniVersion": "1.0.0", "name": "backup",
                           "plugins": [{"type": "ipvlan"}]});
        let conf =
            PlexusConf::from_value(&json!({"delegates": [bridge(), second, third]})).unwrap();
        assert!(matches!(conf.cluster_network, ClusterNetwork::Inline(ref l)
                         if l.name.as_deref() == Some("podnet")));
        let names: Vec<_> = conf
            .policy
            .delegates
            .iter()
            .map(|l| l.name.clone())
            .collect();
        assert_eq!(names, [Some("storage".into()), Some("backup".into())]);
    }

    #[test]
    fn global_namespaces_default_to_default_as_multus() {
        // Multus's GetDefaultNetConf: NonIsolatedNamespaces ["default"],
        // replaced (not extended) by `globalNamespaces`.
        let conf = PlexusConf::from_value(&json!({"clusterNetwork": "x"})).unwrap();
        assert_eq!(conf.policy.global_namespaces, ["default"]);
        let conf =
            PlexusConf::from_value(&json!({"clusterNetwork": "x", "globalNamespaces": "shared"}))
                .unwrap();
        assert_eq!(conf.policy.global_namespaces, ["shared"]);
        let conf = PlexusConf::from_value(&json!({"clusterNetwork": "x", "globalNamespaces": ""}))
            .unwrap();
        assert_eq!(conf.policy.global_namespaces, ["default"]);
    }

    #[test]
    fn thick_mode_keys() {
        let conf = PlexusConf::from_value(&json!({"clusterNetwork": "x"})).unwrap();
        assert_eq!(conf.daemon, None);
        let conf = PlexusConf::from_value(&json!({
            "clusterNetwork": "x", "daemonSocket": "/run/plexus/plexus.sock",
        }))
        .unwrap();
        assert_eq!(
            conf.daemon,
            Some(DaemonClient {
                socket: "/run/plexus/plexus.sock".into(),
                fallback: DaemonFallback::Thin,
                timeout: DEFAULT_DAEMON_TIMEOUT,
            })
        );
        let conf = PlexusConf::from_value(&json!({
            "clusterNetwork": "x", "daemonSocket": "/s", "daemonFallback": "fail",
            "daemonTimeout": 5,
        }))
        .unwrap()
        .daemon
        .unwrap();
        assert_eq!(conf.fallback, DaemonFallback::Fail);
        assert_eq!(conf.timeout, Duration::from_secs(5));
    }
}
