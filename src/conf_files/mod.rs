//! The CNI config files on disk that planning asks for ([`ConfFiles`]): a
//! directory of them (`confDir`, §3.4.1 rules 2 and 3), which NADs without
//! `spec.config` and `defaultNetworks` names resolve to; a network given as
//! a path; and the auxiliary chain's directory ([`auxiliary`]). The planner
//! itself reads nothing.

pub mod auxiliary;

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use crate::cni::config::NetworkConfigList;
use crate::plan::{self, AtPath, ConfFiles, DefaultNetwork, PlanError};

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

impl ConfFiles for ConfDir {
    fn dir(&self) -> &Path {
        &self.path
    }

    fn find(&self, name: &str) -> Option<(&Path, &NetworkConfigList)> {
        let (entries, _) = self.entries();
        let named = |single: bool| {
            entries
                .iter()
                .find(|(_, l)| l.single == single && l.name.as_deref() == Some(name))
                .map(|(p, l)| (p.as_path(), l))
        };
        named(false).or_else(|| named(true))
    }

    fn at(&self, path: &Path) -> Result<AtPath, PlanError> {
        Ok(if path.is_dir() {
            AtPath::Directory(
                ConfDir::new(path)
                    .first()
                    .map(|(p, l)| (p.into(), l.clone())),
            )
        } else if path.is_file() {
            AtPath::File(crate::manifest::load(path)?)
        } else {
            AtPath::Missing
        })
    }

    /// Empty until the directory is read.
    fn warnings(&self) -> Vec<String> {
        self.loaded
            .get()
            .map(|(_, w)| w.clone())
            .unwrap_or_default()
    }
}

/// A cluster network from the file `path`: a CNI config or config list
/// (JSON), or a NetworkAttachmentDefinition manifest.
pub fn network_file(path: &Path) -> Result<DefaultNetwork, PlanError> {
    plan::network_from_documents(path, &crate::manifest::load(path)?)
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
