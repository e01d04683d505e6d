//! The auxiliary CNI chain's plugin configs (`auxiliaryCNIChainName`, see
//! [`crate::plan::auxiliary`] for how the chain runs): `<dir>/<name>/*.conf`
//! in file-name order (libcni's `NetworkPluginConfsFromFiles`), after
//! `passthru`. `<dir>` is the directory of `clusterNetwork` when that is a
//! path, as in Multus; otherwise `confDir`. No subdirectory, or one without
//! `.conf` files: nothing runs, as in Multus; a file that does not parse
//! fails the ADD naming the key and the file.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::cni::config::NetworkConfigList;
use crate::config::{ClusterNetwork, PlexusConf};
use crate::plan::auxiliary::PASSTHRU;
use crate::plan::PlanError;

/// The key, for errors and messages.
const KEY: &str = "auxiliaryCNIChainName";

/// The keys of plexus's conf the chain is found and made with.
#[derive(Debug, Clone, Copy)]
pub struct ChainKeys<'c> {
    /// `auxiliaryCNIChainName`.
    pub name: Option<&'c str>,
    /// Beside a `clusterNetwork` given as a path ...
    pub cluster_network: &'c ClusterNetwork,
    /// ... else in `confDir`.
    pub conf_dir: &'c Path,
    /// The chain's `cniVersion`: plexus's own.
    pub cni_version: &'c str,
}

impl<'c> ChainKeys<'c> {
    pub fn of(conf: &'c PlexusConf) -> ChainKeys<'c> {
        ChainKeys {
            name: conf.auxiliary_chain.as_deref(),
            cluster_network: &conf.cluster_network,
            conf_dir: &conf.conf_dir,
            cni_version: &conf.cni_version,
        }
    }

    /// The directory the chain `name`'s plugin configs are read from.
    pub fn directory(&self, name: &str) -> PathBuf {
        let base = match self.cluster_network {
            ClusterNetwork::Reference(r) if Path::new(r).is_absolute() => {
                Path::new(r).parent().map(Path::to_path_buf)
            }
            _ => None,
        };
        base.unwrap_or_else(|| self.conf_dir.to_path_buf())
            .join(name)
    }
}

/// What the configuration asks for: the chain to run, or `None` (unset, or
/// nothing to run, with a warning saying why).
pub fn load(keys: ChainKeys) -> Result<Option<NetworkConfigList>, PlanError> {
    let Some(name) = keys.name else {
        return Ok(None);
    };
    let dir = keys.directory(name);
    let files = conf_files(&dir)
        .map_err(|e| PlanError::io(format!("{KEY} {name:?}: directory {}", dir.display()), e))?;
    if files.is_empty() {
        tracing::warn!(
            "{KEY} {name:?}: no plugin configs (*.conf) in {}: no auxiliary chain runs",
            dir.display()
        );
        return Ok(None);
    }
    let mut plugins = vec![json!({"type": PASSTHRU, "name": "passthru-cni"})];
    for file in &files {
        let within = |e: PlanError| e.within(format!("{KEY} {name:?}: {}", file.display()));
        let bytes = std::fs::read(file).map_err(|e| within(PlanError::io("read", e)))?;
        let plugin: Value = serde_json::from_slice(&bytes).map_err(|e| {
            within(PlanError::Decode {
                what: "plugin configuration".into(),
                reason: e.to_string(),
            })
        })?;
        plugins.push(plugin);
    }
    let list = json!({"cniVersion": keys.cni_version, "name": name, "plugins": plugins});
    let list = NetworkConfigList::from_value(&list)
        .map_err(|e| e.within(format!("{KEY} {name:?} ({})", dir.display())))?;
    Ok(Some(list))
}

/// The regular `.conf` files of `dir` in file-name order; none when `dir`
/// does not exist (libcni's `ConfFiles`).
fn conf_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        if !entry.file_type()?.is_dir() && path.extension().is_some_and(|e| e == "conf") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(value: Value) -> PlexusConf {
        PlexusConf::from_value(&value).unwrap()
    }

    #[test]
    fn the_directory_is_beside_a_cluster_network_file_else_in_conf_dir() {
        let by_path = conf(json!({"clusterNetwork": "/host/net.d/10-kindnet.conflist",
                                  "auxiliaryCNIChainName": "chain"}));
        assert_eq!(
            ChainKeys::of(&by_path).directory("chain"),
            Path::new("/host/net.d/chain")
        );
        let by_name = conf(json!({"clusterNetwork": "kindnet", "confDir": "/etc/cni/net.d"}));
        assert_eq!(
            ChainKeys::of(&by_name).directory("chain"),
            Path::new("/etc/cni/net.d/chain")
        );
    }

    #[test]
    fn the_chain_is_passthru_then_the_conf_files_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        let c = conf(json!({"cniVersion": "1.1.0", "clusterNetwork": "podnet",
                            "confDir": dir.path(), "auxiliaryCNIChainName": "chain"}));
        // No directory, then an empty one: nothing to run.
        assert_eq!(load(ChainKeys::of(&c)).unwrap(), None);
        let chain = dir.path().join("chain");
        std::fs::create_dir(&chain).unwrap();
        std::fs::write(chain.join("ignored.json"), "{}").unwrap();
        assert_eq!(load(ChainKeys::of(&c)).unwrap(), None);
        std::fs::write(chain.join("20-b.conf"), r#"{"type": "b", "name": "x"}"#).unwrap();
        std::fs::write(chain.join("10-a.conf"), r#"{"type": "a"}"#).unwrap();
        let list = load(ChainKeys::of(&c)).unwrap().unwrap();
        assert_eq!(list.name.as_deref(), Some("chain"));
        assert_eq!(list.cni_version, "1.1.0");
        let types: Vec<&str> = list
            .plugins
            .iter()
            .map(|p| p.plugin_type.as_str())
            .collect();
        assert_eq!(types, [PASSTHRU, "a", "b"]);
        // A broken file fails, naming the key and the file.
        std::fs::write(chain.join("30-c.conf"), "{").unwrap();
        let e = load(ChainKeys::of(&c)).unwrap_err();
        assert!(
            matches!(&e, PlanError::Decode { what, .. }
                if what.starts_with("auxiliaryCNIChainName \"chain\": ")
                    && what.contains("30-c.conf")),
            "{e:?}"
        );
        std::fs::write(chain.join("30-c.conf"), r#"{"name": "no type"}"#).unwrap();
        let e = load(ChainKeys::of(&c)).unwrap_err();
        assert!(
            matches!(&e, PlanError::Cni(e) if e.details.contains("plugins[3].type: missing")),
            "{e:?}"
        );
    }
}
