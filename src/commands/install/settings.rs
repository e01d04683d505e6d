//! `plexus install --settings FILE`: plexus's own settings (keys of its
//! conf), or a Multus thick `daemon-config.json` as it is. Multus's daemon
//! reads that file three ways (pkg/server/types.go `ControllerNetConf`,
//! pkg/server/config/generator.go `MultusConf`, and as an overlay on every
//! call's conf, server.go `overrideCNIConfigWithServerConfig`), so its keys
//! are the daemon's, the conf generator's, and Multus's `NetConf` keys.
//!
//! The `NetConf` keys go into the conflist as they are (plexus's conf takes
//! them). The generator's keys are the installer's and are mapped to what it
//! does. The daemon's keys have no meaning in plexus and are explained (see
//! [`crate::config::keys::UNREAD`]). Every key ends up in exactly one of the
//! three, and [`Settings::notes`] says what became of each of the last two.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::InstallError;
use crate::cni::casefold::fold_eq;
use crate::config::keys::{self, Unread};
use crate::config::PlexusConf;

/// Keys of the conflist's plexus entry that the installer sets itself.
const INSTALLER_OWNED: &[(&str, &str)] = &[
    ("type", "plexus"),
    ("name", "the conflist is plexus-cni-network"),
    (
        "clusterNetwork",
        "the conf dir's first conf, or multusMasterCNI's",
    ),
    ("kubeconfig", "the one it writes (--kubeconfig)"),
];

/// The settings, split into the conf's keys and the installer's.
#[derive(Debug, Default, PartialEq)]
pub struct Settings {
    /// Keys for plexus's entry in the conflist.
    pub conf: Map<String, Value>,
    /// `cniConfigDir` / `multusAutoconfigDir` (node path): the conf dir.
    pub conf_dir: Option<PathBuf>,
    /// `multusMasterCNI`: the cluster network's conf, a file of the conf
    /// dir, instead of the first one.
    pub cluster_conf: Option<String>,
    /// `readinessindicatorfile` (node path): wait for it before writing
    /// the conflist (multi-net-spec §6.1.2).
    pub readiness_indicator_file: Option<PathBuf>,
    /// What became of each key that did not go into the conf, to be logged.
    pub notes: Vec<Note>,
}

/// What became of a settings key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub key: String,
    /// Whether the key took effect (mapped to the installer's equivalent).
    pub mapped: bool,
    pub text: String,
}

impl Settings {
    /// Split `map`; `root` is where the installer sees the node (`--root`),
    /// which Multus's paths (its container's view) are read against.
    ///
    /// Thin or thick is the settings' `daemonSocket`, and nothing else: with
    /// it the runtime's exec forwards to the daemon, without it every call
    /// runs on the host. `daemon_socket` (`--daemon-socket`) only translates
    /// a Multus thick daemon-config.json, which says thick by its
    /// `socketDir`, into plexus's socket; plexus's own settings without
    /// `daemonSocket` stay thin whatever the flag says.
    pub fn from_map(
        map: Map<String, Value>,
        root: &Path,
        daemon_socket: Option<&Path>,
    ) -> Result<Settings, InstallError> {
        let mut settings = Settings::default();
        let names_socket = map.keys().any(|k| fold_eq(k, "daemonSocket"));
        let mut dirs: Vec<(String, PathBuf)> = Vec::new();
        for (key, value) in map {
            let is = |name: &str| fold_eq(&key, name);
            if let (true, false, Some(socket)) = (is("socketDir"), names_socket, daemon_socket) {
                let socket = socket.display().to_string();
                let what = format!(
                    "a Multus thick daemon-config: plexus runs thick too, daemonSocket {socket} \
                     (--daemon-socket)"
                );
                settings.conf.insert("daemonSocket".into(), socket.into());
                settings.note(key, true, what);
            } else if is("cniConfigDir") || is("multusAutoconfigDir") {
                let dir = text(&key, &value)?;
                dirs.push((key, PathBuf::from(dir)));
            } else if is("multusConfigFile") {
                match text(&key, &value)? {
                    "auto" => settings.note(
                        key,
                        true,
                        "plexus always generates its conflist around the cluster network's conf",
                    ),
                    file => {
                        return Err(invalid(
                            &key,
                            format!(
                                "{file:?}: plexus writes its own 00-plexus.conflist around the \
                                 cluster network's conf (Multus's \"auto\"); put the keys of that \
                                 file into the settings instead"
                            ),
                        ))
                    }
                }
            } else if is("multusMasterCNI") {
                let file = text(&key, &value)?;
                if !file.is_empty() {
                    if file.contains('/') {
                        return Err(invalid(
                            &key,
                            format!("{file:?} must be a file name in the conf dir"),
                        ));
                    }
                    settings.cluster_conf = Some(file.to_string());
                    let what = format!("the cluster network is the conf dir's {file}");
                    settings.note(key, true, what);
                }
            } else if is("readinessindicatorfile") {
                // The conflist names it too: an ADD waits for it (§6.1.2).
                let file = text(&key, &value)?;
                if !file.is_empty() {
                    let node = node_path(Path::new(file), root);
                    let what = format!(
                        "waited for before the conflist is written: {}",
                        node.display()
                    );
                    settings.readiness_indicator_file = Some(node);
                    settings.note(key, true, what);
                }
            } else if let Some(owned) = INSTALLER_OWNED.iter().find(|(k, _)| is(k)) {
                settings.note(key, false, format!("set by plexus install: {}", owned.1));
            } else if is("cniVersion") {
                settings.note(
                    key,
                    false,
                    "the conflist takes the cluster network conf's cniVersion (plexus speaks 0.1.0 to 1.1.0)",
                );
            } else {
                match keys::unread(&key).filter(|_| !crate::config::reads(&key)) {
                    Some(Unread::NoEffect(reason)) if !asks_nothing(&value) => {
                        settings.note(key, false, reason)
                    }
                    // `"forceCNIVersion": false` and the like ask for nothing.
                    Some(Unread::NoEffect(_)) => {}
                    // plexus's conf reads it, or accepts it, or warns about it.
                    _ => {
                        settings.conf.insert(key, value);
                    }
                }
            }
        }
        settings.conf_dir(dirs, root)?;
        settings.check_conf()?;
        Ok(settings)
    }

    fn note(&mut self, key: String, mapped: bool, text: impl Into<String>) {
        self.notes.push(Note {
            key,
            mapped,
            text: text.into(),
        });
    }

    /// `cniConfigDir` (where Multus writes its conf) and `multusAutoconfigDir`
    /// (where it finds the cluster network's): plexus does both in one conf
    /// dir, so they must agree. They are Multus's container's paths: one not
    /// under `root` is no directory of the node the installer sees, and
    /// `--conf-dir` stays.
    fn conf_dir(&mut self, dirs: Vec<(String, PathBuf)>, root: &Path) -> Result<(), InstallError> {
        let mut chosen: Option<(String, PathBuf)> = None;
        for (key, dir) in dirs {
            let Some(node) = under_root(&dir, root) else {
                let what = format!(
                    "{} is not under --root {}: the conf dir is --conf-dir",
                    dir.display(),
                    root.display()
                );
                self.note(key, false, what);
                continue;
            };
            if let Some((first, other)) = &chosen {
                if *other != node {
                    return Err(invalid(
                        &key,
                        format!(
                            "{} is not {first} ({}): plexus finds the cluster network's conf in the \
                             directory it writes its conflist to",
                            node.display(),
                            other.display()
                        ),
                    ));
                }
            }
            let what = format!("the conf dir is {}", node.display());
            self.note(key.clone(), true, what);
            chosen.get_or_insert((key, node));
        }
        self.conf_dir = chosen.map(|(_, dir)| dir);
        Ok(())
    }

    /// The conf keys must make a valid plexus conf (with the cluster
    /// network the installer adds), so a bad one fails here, not every pod;
    /// what plexus's conf warns about is noted.
    fn check_conf(&mut self) -> Result<(), InstallError> {
        let mut conf = self.conf.clone();
        conf.insert("clusterNetwork".into(), "cluster".into());
        let parsed =
            PlexusConf::from_value(&Value::Object(conf)).map_err(|e| InstallError::Invalid {
                what: "--settings".into(),
                reason: crate::cni::CniError::from(e).details,
            })?;
        for warning in parsed.warnings {
            let key = warning.split(':').next().unwrap_or_default().to_string();
            self.note(key, false, warning);
        }
        Ok(())
    }
}

/// `false` (or `0`, `""`, `null`): a Multus switch left off.
fn asks_nothing(value: &Value) -> bool {
    matches!(value, Value::Bool(false) | Value::Null)
        || value.as_str() == Some("")
        || value.as_i64() == Some(0)
}

fn text<'a>(key: &str, value: &'a Value) -> Result<&'a str, InstallError> {
    value
        .as_str()
        .ok_or_else(|| invalid(key, format!("must be a string, got {value}")))
}

fn invalid(key: &str, reason: impl Into<String>) -> InstallError {
    InstallError::Invalid {
        what: format!("--settings {key}"),
        reason: reason.into(),
    }
}

/// A path as Multus's daemon saw it (in its container) as the node's, when
/// it is under the installer's `root`, that mount of the node.
fn under_root(path: &Path, root: &Path) -> Option<PathBuf> {
    let rest = path.strip_prefix(root).ok()?;
    Some(Path::new("/").join(rest).components().collect())
}

/// A file named by Multus's settings as the node's: under `root` as
/// [`under_root`] says, else taken as a node path already (a thin Multus
/// conf names the node's own paths).
fn node_path(path: &Path, root: &Path) -> PathBuf {
    under_root(path, root).unwrap_or_else(|| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn split(v: Value, root: &str) -> Result<Settings, InstallError> {
        Settings::from_map(v.as_object().unwrap().clone(), Path::new(root), None)
    }

    #[test]
    fn plexus_settings_pass_through() {
        let s = split(
            json!({"namespaceIsolation": true, "daemonSocket": "/run/plexus/plexus.sock"}),
            "/host",
        )
        .unwrap();
        assert_eq!(s.conf.len(), 2);
        assert!(s.notes.is_empty(), "{:?}", s.notes);
        assert_eq!(s.conf_dir, None);
        // What the installer sets itself is said so, not dropped unsaid.
        let s = split(json!({"type": "multus-shim", "ClusterNetwork": "x"}), "/").unwrap();
        assert!(s.conf.is_empty());
        let keys: Vec<_> = s.notes.iter().map(|n| (n.key.as_str(), n.mapped)).collect();
        assert_eq!(keys, [("type", false), ("ClusterNetwork", false)]);
    }

    #[test]
    fn daemon_socket_translates_a_multus_thick_file_and_never_overrides_the_settings() {
        let socket = Path::new("/run/plexus/plexus.sock");
        let map = |v: Value| v.as_object().unwrap().clone();
        let s = Settings::from_map(
            map(json!({"socketDir": "/host/run/multus/"})),
            Path::new("/host"),
            Some(socket),
        )
        .unwrap();
        assert_eq!(
            s.conf,
            map(json!({"daemonSocket": "/run/plexus/plexus.sock"}))
        );
        assert_eq!(s.notes[0].key, "socketDir");
        assert!(s.notes[0].mapped, "{:?}", s.notes);
        // plexus's own settings without daemonSocket are thin mode, the flag
        // notwithstanding: the ConfigMap is the one switch (deploy/README.md).
        let s = Settings::from_map(
            map(json!({"namespaceIsolation": true})),
            Path::new("/host"),
            Some(socket),
        )
        .unwrap();
        assert_eq!(s.conf, map(json!({"namespaceIsolation": true})));
        let s = Settings::from_map(
            map(json!({"DaemonSocket": "/run/other.sock"})),
            Path::new("/"),
            Some(socket),
        )
        .unwrap();
        assert_eq!(s.conf, map(json!({"DaemonSocket": "/run/other.sock"})));
        let err = Settings::from_map(
            map(json!({"socketDir": "/run/multus/"})),
            Path::new("/"),
            Some(Path::new("run/x.sock")),
        )
        .unwrap_err();
        assert!(err.to_string().contains("daemonSocket"), "{err}");
    }

    #[test]
    fn multus_installer_keys_are_mapped() {
        let s = split(
            json!({
                "cniConfigDir": "/host/etc/cni/net.d", "multusAutoconfigDir": "/host/etc/cni/net.d/",
                "multusConfigFile": "auto", "multusMasterCNI": "10-calico.conflist",
                "readinessindicatorfile": "/host/run/ready", "forceCNIVersion": false,
            }),
            "/host",
        )
        .unwrap();
        assert_eq!(s.conf_dir.as_deref(), Some(Path::new("/etc/cni/net.d")));
        assert_eq!(s.cluster_conf.as_deref(), Some("10-calico.conflist"));
        assert_eq!(
            s.readiness_indicator_file.as_deref(),
            Some(Path::new("/run/ready"))
        );
        assert!(s.conf.is_empty(), "{:?}", s.conf);
        assert!(s.notes.iter().all(|n| n.mapped), "{:?}", s.notes);
        assert_eq!(s.notes.len(), 5);
    }

    #[test]
    fn multus_thick_example_daemon_config_as_it_is() {
        // deployments/multus-daemonset-thick.yml's ConfigMap, verbatim; the
        // root is plexus's DaemonSet's, /host, as Multus's mounts the node's
        // conf dir at /host/etc/cni/net.d.
        let example: Value =
            serde_json::from_str(include_str!("../../../examples/multus/daemon-config.json"))
                .unwrap();
        let s = split(example, "/host").unwrap();
        assert_eq!(s.conf_dir.as_deref(), Some(Path::new("/etc/cni/net.d")));
        // logToStderr is the logging's to read; until it does, it is noted.
        let logging_reads = crate::config::reads("logToStderr");
        let mut conf = json!({"chrootDir": "/hostroot", "logLevel": "verbose"});
        if logging_reads {
            conf["logToStderr"] = json!(true);
        }
        assert_eq!(Value::Object(s.conf), conf);
        let mut notes: Vec<(&str, bool)> =
            s.notes.iter().map(|n| (n.key.as_str(), n.mapped)).collect();
        notes.sort();
        let mut want = vec![
            ("cniConfigDir", true),
            ("cniVersion", false),
            ("multusAutoconfigDir", true),
            ("multusConfigFile", true),
            ("socketDir", false),
        ];
        if !logging_reads {
            want.insert(2, ("logToStderr", false));
        }
        assert_eq!(notes, want);
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_naming_the_key() {
        let cases = [
            (
                json!({"multusConfigFile": "/etc/multus.conf"}),
                "--settings multusConfigFile",
            ),
            (
                json!({"cniConfigDir": "/host/a", "multusAutoconfigDir": "/host/b"}),
                "plexus finds the cluster network's conf",
            ),
            (json!({"multusMasterCNI": "../x.conf"}), "multusMasterCNI"),
            (json!({"cniConfigDir": 3}), "must be a string"),
            (json!({"namespaceIsolation": "yes"}), "namespaceIsolation"),
        ];
        for (input, want) in cases {
            let err = split(input.clone(), "/host").unwrap_err().to_string();
            assert!(err.contains(want), "{input}: {err}");
        }
    }

    #[test]
    fn node_paths_drop_the_root() {
        let host = Path::new("/host");
        assert_eq!(
            under_root(Path::new("/host/etc/cni/net.d/"), host).as_deref(),
            Some(Path::new("/etc/cni/net.d"))
        );
        assert_eq!(
            under_root(Path::new("/etc/cni/net.d"), Path::new("/")).as_deref(),
            Some(Path::new("/etc/cni/net.d"))
        );
        assert_eq!(under_root(Path::new("/elsewhere"), host), None);
        assert_eq!(
            node_path(Path::new("/run/ready"), host),
            Path::new("/run/ready")
        );
        // Not under --root: noted, --conf-dir stays.
        let s = split(json!({"cniConfigDir": "/etc/cni/net.d"}), "/host").unwrap();
        assert_eq!(s.conf_dir, None);
        assert!(!s.notes[0].mapped && s.notes[0].text.contains("not under --root"));
    }
}
