//! `plexus install`: the DaemonSet's entrypoint, which makes a node use
//! plexus and keeps it so.
//!
//! Each pass converges the node to one state, whatever it found (a first
//! start, a restart after a crash, a reboot):
//!
//! 1. The binary is in the CNI bin dir: written beside its final name, synced,
//!    then renamed over it (multus-cni #1221: copying in place fails with
//!    "text file busy" while a runtime executes the old one, and a node can be
//!    left with half a binary). An identical binary is left alone.
//! 2. A kubeconfig (mode 0600) from the pod's service-account token and CA,
//!    rewritten when the token rotates.
//! 3. The cluster network's conf: the alphabetically first other conf in the
//!    conf dir (Multus's `auto`), or the one `multusMasterCNI` names, waited
//!    for, with the readiness indicator file when one is configured
//!    (multi-net-spec §6.1.2).
//! 4. `00-plexus.conflist`, written whole, naming that conf as the cluster
//!    network and asking the runtime for the capabilities its plugins
//!    declare, with the ConfigMap's settings.
//!
//! With `--watch` it then watches the conf dir (inotify, and a poll every
//! `--poll-ms`) and the token (the poll) and runs a pass whenever something
//! changed: a cluster network conf that changed is
//! followed, one that disappeared takes plexus's conflist with it (so the
//! runtime reports the network not ready instead of failing pods), one that
//! returns brings it back. On SIGTERM or SIGINT it removes the conflist when
//! `--cleanup` is given. Logs are JSON lines on stderr.
//!
//! Paths are the node's (what the generated files name); `--root` is where
//! the node's file system is mounted in the installer's container.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Map, Value};

use crate::cni::whole_file::{self, Durability};
use crate::conf_files::ConfDir;

pub mod owner;
pub mod settings;

/// The conflist plexus writes; `00-` sorts it before every other conf, so the
/// runtime picks it.
pub const CONFLIST_NAME: &str = "00-plexus.conflist";
/// The network name of the generated conflist.
pub const NETWORK_NAME: &str = "plexus-cni-network";

/// What went wrong, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{what}: {reason}")]
    Invalid { what: String, reason: String },
    #[error("gave up after {waited:?} waiting for {what}")]
    TimedOut { what: String, waited: Duration },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> InstallError + '_ {
    move |source| InstallError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Where things are, as the node sees them, and what to put there.
#[derive(Debug)]
pub struct Installer {
    /// Where the node's root is mounted (`/` when run on the node itself).
    pub root: PathBuf,
    /// The binary to install.
    pub source: PathBuf,
    pub bin_dir: PathBuf,
    pub conf_dir: PathBuf,
    /// The kubeconfig plexus's conf names; `None`: no kubeconfig (nodes
    /// whose pods come from a manifest directory).
    pub kubeconfig: Option<PathBuf>,
    /// The service account's `token` and `ca.crt` (in the installer's view).
    pub service_account: PathBuf,
    /// The API server URL the kubeconfig names.
    pub api_server: Option<String>,
    /// §6.1.2: a file whose existence says the cluster network is ready.
    pub readiness_indicator_file: Option<PathBuf>,
    /// plexus's own settings (the ConfigMap), merged into the plugin entry.
    pub settings: Map<String, Value>,
    /// The cluster network's conf, a file name in the conf dir (Multus's
    /// `multusMasterCNI`); `None`: the first conf, as Multus's `auto`.
    pub cluster_conf: Option<String>,
    /// The installed binary as last found identical to the source, so that
    /// a watching pass does not read both again while it is unchanged.
    pub verified_binary: std::sync::Mutex<Option<FileStamp>>,
}

/// Identity and version of a file: inode, size, modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp(u64, u64, i64, i64);

impl FileStamp {
    fn of(path: &Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = fs::metadata(path).ok()?;
        Some(FileStamp(m.ino(), m.len(), m.mtime(), m.mtime_nsec()))
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    pub binary_replaced: bool,
    pub kubeconfig_written: bool,
    /// The cluster network's conf (node path), when there is one.
    pub cluster_network: Option<PathBuf>,
    pub conflist_written: bool,
    pub conflist_removed: bool,
}

/// Where a pass stopped short of writing the conflist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waiting {
    /// No other conf in the conf dir yet.
    ClusterNetwork,
    /// The named cluster network conf (`multusMasterCNI`) is not there yet.
    ClusterConf(String),
    /// §6.1.2: the readiness indicator file does not exist yet.
    Readiness(PathBuf),
}

impl Waiting {
    fn describe(&self, conf_dir: &Path) -> String {
        match self {
            Waiting::ClusterNetwork => format!(
                "the cluster network's conf (any .conf, .conflist or .json other than \
                 {CONFLIST_NAME}) in {}",
                conf_dir.display()
            ),
            Waiting::ClusterConf(file) => format!(
                "the cluster network's conf {file} (multusMasterCNI) in {}",
                conf_dir.display()
            ),
            Waiting::Readiness(file) => {
                format!("the readiness indicator file {}", file.display())
            }
        }
    }
}

impl Installer {
    /// `path` (a node path) in the installer's view.
    fn host(&self, path: &Path) -> PathBuf {
        self.root.join(path.strip_prefix("/").unwrap_or(path))
    }

    fn conflist(&self) -> PathBuf {
        self.host(&self.conf_dir).join(CONFLIST_NAME)
    }

    /// One pass; `Err(Waiting)` inside `Ok` when the cluster network is not
    /// there yet (the binary and kubeconfig are in place regardless).
    pub fn pass(&self) -> Result<(Pass, Option<Waiting>), InstallError> {
        let mut pass = Pass {
            binary_replaced: self.install_binary()?,
            kubeconfig_written: self.write_kubeconfig()?,
            ..Pass::default()
        };
        let conf_dir = ConfDir::new(self.host(&self.conf_dir));
        let found = match &self.cluster_conf {
            Some(file) => conf_dir
                .file(file)
                .ok_or_else(|| Waiting::ClusterConf(file.clone())),
            None => conf_dir.first().ok_or(Waiting::ClusterNetwork),
        };
        let (found, cluster) = match found {
            Ok(found) => found,
            Err(waiting) => {
                pass.conflist_removed = remove_if_present(&self.conflist())?;
                return Ok((pass, Some(waiting)));
            }
        };
        let file_name = found.file_name().unwrap_or(OsStr::new(""));
        let node_path = self.conf_dir.join(file_name);
        pass.cluster_network = Some(node_path.clone());
        if let Some(file) = &self.readiness_indicator_file {
            if !self.host(file).exists() {
                pass.conflist_removed = remove_if_present(&self.conflist())?;
                return Ok((pass, Some(Waiting::Readiness(file.clone()))));
            }
        }
        let version = cluster.cni_version.clone();
        let capabilities: BTreeMap<String, bool> = cluster
            .plugins
            .iter()
            .flat_map(|p| p.capabilities.iter())
            .filter(|(_, on)| **on)
            .map(|(k, on)| (k.clone(), *on))
            .collect();
        let conflist = self.render(&version, &node_path, &capabilities);
        let mut bytes = serde_json::to_vec_pretty(&conflist).expect("JSON serializes");
        bytes.push(b'\n');
        pass.conflist_written = write_if_changed(&self.conflist(), &bytes, 0o644)?;
        Ok((pass, None))
    }

    /// The conflist: one `plexus` plugin with the ConfigMap's settings,
    /// and the keys the installer owns set last.
    fn render(
        &self,
        version: &str,
        cluster_network: &Path,
        capabilities: &BTreeMap<String, bool>,
    ) -> Value {
        let mut plugin = self.settings.clone();
        plugin.insert("type".into(), "plexus".into());
        plugin.insert(
            "clusterNetwork".into(),
            cluster_network.display().to_string().into(),
        );
        if let Some(k) = &self.kubeconfig {
            plugin.insert("kubeconfig".into(), k.display().to_string().into());
        }
        if let Some(f) = &self.readiness_indicator_file {
            plugin.insert(
                "readinessindicatorfile".into(),
                f.display().to_string().into(),
            );
        }
        if !capabilities.is_empty() {
            plugin.insert("capabilities".into(), json!(capabilities));
        }
        json!({"cniVersion": version, "name": NETWORK_NAME, "plugins": [plugin]})
    }

    /// Step 1: the binary, unless the installed one is identical.
    fn install_binary(&self) -> Result<bool, InstallError> {
        let target = self.host(&self.bin_dir).join("plexus");
        let verified = *self.verified_binary.lock().expect("not poisoned");
        let stamp = FileStamp::of(&target);
        if stamp.is_some() && stamp == verified {
            return Ok(false);
        }
        let new = fs::read(&self.source).map_err(io_at(&self.source))?;
        let remember = |stamp| *self.verified_binary.lock().expect("not poisoned") = stamp;
        if fs::read(&target).is_ok_and(|old| old == new) {
            remember(stamp);
            return Ok(false);
        }
        let dir = self.host(&self.bin_dir);
        fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        // whole_file writes beside the target and renames over it: a running
        // old binary keeps its inode, a runtime exec'ing sees old or new.
        whole_file::replace(&target, &new, 0o755, Durability::Synced).map_err(io_at(&target))?;
        remember(FileStamp::of(&target));
        Ok(true)
    }

    /// Step 2: the kubeconfig, from the service account's token and CA.
    fn write_kubeconfig(&self) -> Result<bool, InstallError> {
        let Some(kubeconfig) = &self.kubeconfig else {
            return Ok(false);
        };
        let token_path = self.service_account.join("token");
        let ca_path = self.service_account.join("ca.crt");
        let token = fs::read_to_string(&token_path).map_err(io_at(&token_path))?;
        let ca = fs::read(&ca_path).map_err(io_at(&ca_path))?;
        let server = self
            .api_server
            .clone()
            .or_else(in_cluster_server)
            .ok_or_else(|| InstallError::Invalid {
                what: "--api-server".into(),
                reason:
                    "not given, and KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set"
                        .into(),
            })?;
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "plexus", "cluster": {
                "server": server,
                "certificate-authority-data": BASE64.encode(&ca),
            }}],
            "users": [{"name": "plexus", "user": {"token": token.trim()}}],
            "contexts": [{"name": "plexus", "context": {"cluster": "plexus", "user": "plexus"}}],
            "current-context": "plexus",
        });
        let path = self.host(kubeconfig);
        let dir = path.parent().unwrap_or(Path::new("/"));
        fs::create_dir_all(dir).map_err(io_at(dir))?;
        // JSON is YAML: kubeconfig readers take it.
        let bytes = serde_json::to_vec_pretty(&config).expect("JSON serializes");
        write_if_changed(&path, &bytes, 0o600)
    }

    /// Run passes until the cluster network is there (bounded by `timeout`),
    /// then, with `watch`, follow changes until `stop` is set.
    pub fn run(
        &self,
        timeout: Option<Duration>,
        watch: bool,
        poll: Duration,
        stop: &AtomicBool,
    ) -> Result<(), InstallError> {
        let started = Instant::now();
        let mut last: Option<(Pass, Option<Waiting>)> = None;
        let mut changes = DirChanges::new(self.host(&self.conf_dir));
        loop {
            let outcome = self.pass()?;
            if last.as_ref() != Some(&outcome) {
                let (pass, waiting) = &outcome;
                tracing::info!(
                    binary_replaced = pass.binary_replaced,
                    kubeconfig_written = pass.kubeconfig_written,
                    cluster_network = ?pass.cluster_network,
                    conflist_written = pass.conflist_written,
                    conflist_removed = pass.conflist_removed,
                    waiting_for = waiting.as_ref().map(|w| w.describe(&self.conf_dir)),
                    "install pass"
                );
            }
            let waiting = outcome.1.clone();
            last = Some(outcome);
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            match (&waiting, watch) {
                (None, false) => return Ok(()),
                (Some(w), _) => {
                    if let Some(limit) = timeout.filter(|t| started.elapsed() >= *t) {
                        return Err(InstallError::TimedOut {
                            what: w.describe(&self.conf_dir),
                            waited: limit,
                        });
                    }
                }
                (None, true) => {}
            }
            changes.wait(poll);
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
        }
    }

    /// `--cleanup`: remove the conflist (the binary stays: pods being torn
    /// down still need it for their DEL).
    pub fn cleanup(&self) -> Result<bool, InstallError> {
        remove_if_present(&self.conflist())
    }

    /// The kubeconfig this installer writes, in its own view.
    pub fn kubeconfig_here(&self) -> Option<PathBuf> {
        self.kubeconfig.as_deref().map(|k| self.host(k))
    }
}

/// Wakes the watch early when the conf dir changes (inotify), so a cluster
/// network conf written, replaced or removed is followed at once, as
/// Multus's fsnotify watch does; the poll still runs, for what lives
/// elsewhere (the token, the readiness indicator) and for a conf dir that
/// does not exist yet.
struct DirChanges {
    dir: PathBuf,
    inotify: Option<nix::sys::inotify::Inotify>,
    /// inotify cannot be had (said once).
    unavailable: bool,
}

impl DirChanges {
    fn new(dir: PathBuf) -> DirChanges {
        let mut changes = DirChanges {
            dir,
            inotify: None,
            unavailable: false,
        };
        changes.watch();
        changes
    }

    /// Watch the directory if it exists and is not watched yet.
    fn watch(&mut self) {
        use nix::sys::inotify::{AddWatchFlags as F, InitFlags, Inotify};
        if self.inotify.is_some() {
            return;
        }
        let inotify = match Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC) {
            Ok(inotify) => inotify,
            Err(errno) => {
                if !self.unavailable {
                    tracing::warn!(%errno, "no inotify: the conf dir is polled only");
                    self.unavailable = true;
                }
                return;
            }
        };
        let events = F::IN_CREATE
            | F::IN_DELETE
            | F::IN_CLOSE_WRITE
            | F::IN_MOVED_TO
            | F::IN_MOVED_FROM
            | F::IN_ATTRIB
            | F::IN_DELETE_SELF
            | F::IN_MOVE_SELF;
        if inotify.add_watch(&self.dir, events).is_ok() {
            self.inotify = Some(inotify);
        }
    }

    /// Wait until the directory changes or `timeout` passes.
    fn wait(&mut self, timeout: Duration) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        self.watch();
        let Some(inotify) = &self.inotify else {
            std::thread::sleep(timeout);
            return;
        };
        let millis = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
        if let Ok(n) = poll(&mut fds, PollTimeout::from(millis)) {
            if n > 0 {
                // A writer's burst (temp file, write, rename) is one change.
                std::thread::sleep(Duration::from_millis(20));
                let mut gone = false;
                while let Ok(events) = inotify.read_events() {
                    gone |= events.iter().any(|e| {
                        e.mask.intersects(
                            nix::sys::inotify::AddWatchFlags::IN_DELETE_SELF
                                | nix::sys::inotify::AddWatchFlags::IN_MOVE_SELF
                                | nix::sys::inotify::AddWatchFlags::IN_IGNORED,
                        )
                    });
                }
                if gone {
                    self.inotify = None;
                }
            }
        }
    }
}

/// The API server as a pod sees it.
fn in_cluster_server() -> Option<String> {
    let host = std::env::var("KUBERNETES_SERVICE_HOST").ok()?;
    let port = std::env::var("KUBERNETES_SERVICE_PORT").ok()?;
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    Some(format!("https://{host}:{port}"))
}

/// Replace `path` with `bytes` unless it holds them already; whether it wrote.
fn write_if_changed(path: &Path, bytes: &[u8], mode: u32) -> Result<bool, InstallError> {
    let same_mode = |m: &fs::Metadata| m.permissions().mode() & 0o777 == mode;
    if fs::read(path).is_ok_and(|old| old == bytes)
        && fs::metadata(path).is_ok_and(|m| same_mode(&m))
    {
        return Ok(false);
    }
    whole_file::replace(path, bytes, mode, Durability::Synced).map_err(io_at(path))?;
    Ok(true)
}

fn remove_if_present(path: &Path) -> Result<bool, InstallError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(InstallError::Io {
            path: path.to_path_buf(),
            source: e,
        }),
    }
}

/// Sets `stop` on SIGTERM or SIGINT.
pub fn stop_on_signals() -> Result<Arc<AtomicBool>, InstallError> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, stop.clone()).map_err(|source| InstallError::Io {
            path: PathBuf::from("signal handler"),
            source,
        })?;
    }
    Ok(stop)
}
