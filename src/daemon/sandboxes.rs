//! The sandboxes the daemon ADDed for pods of its node: what a hot-plug
//! needs to reach one later, when no runtime call names it (its container
//! ID, `CNI_IFNAME`, netns, `CNI_PATH`, and the plexus conf of its ADD),
//! one file each under the daemon's state directory, so a restarted daemon
//! knows them too. And the per-sandbox lock that serializes a sandbox's CNI
//! calls with its hot-plugs: a DEL waits for a hot-plug in progress, and a
//! hot-plug after the DEL finds no sandbox.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::cni::whole_file::{self, Durability};

/// One sandbox, as its ADD named it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
    pub netns: PathBuf,
    #[serde(default)]
    pub cni_path: Vec<PathBuf>,
    pub namespace: String,
    pub pod: String,
    /// kubelet's `K8S_POD_UID`, when it sent one: the pod this sandbox is
    /// for, never another by the same name.
    pub uid: Option<String>,
    /// The plexus conf of the ADD (its stdin).
    pub conf: serde_json::Value,
    /// Read back by a daemon that started after its ADD (whose status
    /// write it may not have seen through).
    #[serde(skip)]
    pub restored: bool,
}

pub struct Sandboxes {
    /// `None`: remembered in memory only (no state directory).
    dir: Option<PathBuf>,
    known: Mutex<HashMap<String, Sandbox>>,
    locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

impl Sandboxes {
    /// The sandboxes an earlier daemon left in `dir` (created 0700).
    pub fn open(dir: Option<PathBuf>) -> std::io::Result<Sandboxes> {
        let mut known = HashMap::new();
        if let Some(dir) = &dir {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
            for entry in std::fs::read_dir(dir)? {
                let path = entry?.path();
                if path.extension().is_none_or(|e| e != "json") {
                    continue;
                }
                let read = std::fs::read(&path)
                    .map_err(|e| e.to_string())
                    .and_then(|b| serde_json::from_slice::<Sandbox>(&b).map_err(|e| e.to_string()));
                match read {
                    Ok(sandbox) => {
                        let sandbox = Sandbox {
                            restored: true,
                            ..sandbox
                        };
                        known.insert(sandbox.container_id.clone(), sandbox);
                    }
                    Err(reason) => {
                        tracing::warn!(file = %path.display(), %reason, "unreadable sandbox entry dropped");
                        let _ = std::fs::remove_file(&path);
                    }
                }
            }
        }
        Ok(Sandboxes {
            dir,
            known: Mutex::new(known),
            locks: Mutex::new(HashMap::new()),
        })
    }

    /// Run `f` holding the lock of sandbox `container_id`.
    pub fn locked<T>(&self, container_id: &str, f: impl FnOnce() -> T) -> T {
        let sandbox = lock(&self.locks)
            .entry(container_id.to_string())
            .or_default()
            .clone();
        let held = lock(&sandbox);
        let out = f();
        drop(held);
        // The last holder drops the entry: the map holds live sandboxes' only.
        let mut locks = lock(&self.locks);
        if Arc::strong_count(&sandbox) == 2 {
            locks.remove(container_id);
        }
        out
    }

    /// Remember `sandbox` (under its lock).
    pub fn add(&self, sandbox: Sandbox) {
        if let Some(dir) = &self.dir {
            // Container IDs are checked by the ADD that succeeded: a file name.
            let path = dir.join(format!("{}.json", sandbox.container_id));
            let bytes = serde_json::to_vec(&sandbox).expect("a sandbox serializes");
            if let Err(error) = whole_file::replace(&path, &bytes, 0o600, Durability::Unsynced) {
                tracing::warn!(%error, file = %path.display(), "sandbox not saved: no hot-plug after a restart");
            }
        }
        lock(&self.known).insert(sandbox.container_id.clone(), sandbox);
    }

    /// Forget `container_id` (under its lock).
    pub fn remove(&self, container_id: &str) {
        if lock(&self.known).remove(container_id).is_none() {
            return;
        }
        if let Some(dir) = &self.dir {
            let path = dir.join(format!("{container_id}.json"));
            if let Err(error) = crate::cache::remove_file(&path) {
                tracing::warn!(%error, file = %path.display(), "sandbox entry not removed");
            }
        }
    }

    /// The sandbox `container_id`, if it is still known.
    pub fn get(&self, container_id: &str) -> Option<Sandbox> {
        lock(&self.known).get(container_id).cloned()
    }

    /// Every known sandbox.
    pub fn all(&self) -> Vec<Sandbox> {
        lock(&self.known).values().cloned().collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update is one insert or remove: a panic leaves the map whole.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandboxes_outlive_the_daemon_and_leave_with_their_del() {
        let dir = tempfile::tempdir().unwrap();
        let sandbox = Sandbox {
            container_id: "c1".into(),
            ifname: "eth0".into(),
            netns: "/run/netns/p".into(),
            cni_path: vec!["/opt/cni/bin".into()],
            namespace: "ns".into(),
            pod: "p".into(),
            uid: Some("u".into()),
            conf: serde_json::json!({"type": "plexus"}),
            restored: false,
        };
        let first = Sandboxes::open(Some(dir.path().to_path_buf())).unwrap();
        first.locked("c1", || first.add(sandbox.clone()));
        std::fs::write(dir.path().join("bad.json"), "{").unwrap();
        let next = Sandboxes::open(Some(dir.path().to_path_buf())).unwrap();
        let restored = Sandbox {
            restored: true,
            ..sandbox
        };
        assert_eq!(next.all(), [restored]);
        assert!(!dir.path().join("bad.json").exists());
        next.locked("c1", || next.remove("c1"));
        assert!(next.get("c1").is_none());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(lock(&next.locks).is_empty());
    }
}
