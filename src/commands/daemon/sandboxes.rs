//! The sandboxes the daemon hot-plugs: what a hot-plug needs to reach one
//! later, when no runtime call names it (its container ID, `CNI_IFNAME`,
//! netns, `CNI_PATH`, and the plexus conf of its ADD). Those the daemon
//! ADDed are noted under its state directory, so a restarted daemon knows
//! them too; those plugin processes ADDed (thin mode) are read from the
//! notes they leave under `cniDir` ([`SandboxDir`]). And the per-sandbox
//! lock that serializes a sandbox's CNI calls with its hot-plugs, in this
//! process and with the node's plugin processes: a DEL waits for a hot-plug
//! in progress, and a hot-plug after the DEL finds no sandbox.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::cni::names::ContainerId;
pub use crate::sandbox_dir::Sandbox;
use crate::sandbox_dir::{SandboxDir, SandboxLockError};

pub struct Sandboxes {
    /// The daemon's notes; `None`: remembered in memory only.
    own: Option<SandboxDir>,
    /// The notes of the sandboxes plugin processes ADDed.
    plugins: Option<SandboxDir>,
    known: Mutex<HashMap<ContainerId, Sandbox>>,
    locks: Mutex<HashMap<ContainerId, Arc<Mutex<()>>>>,
}

impl Sandboxes {
    /// The sandboxes an earlier daemon noted in `dir` (created 0700), and
    /// those plugin processes note under `plugins_cni_dir`.
    pub fn open(
        dir: Option<PathBuf>,
        plugins_cni_dir: Option<&Path>,
    ) -> std::io::Result<Sandboxes> {
        let own = dir.map(SandboxDir::new);
        let mut known = HashMap::new();
        if let Some(own) = &own {
            own.create()?;
            for sandbox in own.all() {
                known.insert(sandbox.container_id.clone(), sandbox);
            }
        }
        Ok(Sandboxes {
            own,
            plugins: plugins_cni_dir.map(SandboxDir::in_cni_dir),
            known: Mutex::new(known),
            locks: Mutex::new(HashMap::new()),
        })
    }

    /// Run `f` holding the lock of sandbox `container_id`: this process's,
    /// and with `cni_dir` (its conf's) the node's, shared with plugin
    /// processes. Err: the node's lock was not had (busy past its bound).
    pub fn locked<T>(
        &self,
        container_id: &ContainerId,
        cni_dir: Option<&Path>,
        f: impl FnOnce() -> T,
    ) -> Result<T, SandboxLockError> {
        let sandbox = lock(&self.locks)
            .entry(container_id.clone())
            .or_default()
            .clone();
        let held = lock(&sandbox);
        let node_lock = cni_dir
            .map(|d| SandboxDir::in_cni_dir(d).lock(container_id))
            .transpose();
        let out = node_lock.map(|node_lock| {
            let out = f();
            if let Some(node_lock) = node_lock {
                node_lock.release(lock(&self.known).contains_key(container_id));
            }
            out
        });
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
        if let Some(own) = &self.own {
            if let Err(error) = own.note(&sandbox) {
                tracing::warn!(%error, "sandbox not saved: no hot-plug after a restart");
            }
        }
        lock(&self.known).insert(sandbox.container_id.clone(), sandbox);
    }

    /// Forget `container_id` (under its lock), and its plugin process's
    /// note, here and under `cni_dir` (its DEL's conf's).
    pub fn remove(&self, container_id: &ContainerId, cni_dir: Option<&Path>) {
        let dirs = self.own.iter().chain(&self.plugins);
        for dir in dirs.chain(cni_dir.map(SandboxDir::in_cni_dir).as_ref()) {
            dir.forget(container_id);
        }
        lock(&self.known).remove(container_id);
    }

    /// The sandbox `container_id`, if it is still known.
    pub fn get(&self, container_id: &ContainerId) -> Option<Sandbox> {
        let known = lock(&self.known).get(container_id).cloned();
        known.or_else(|| self.plugins.as_ref()?.read(container_id))
    }

    /// Every known sandbox.
    pub fn all(&self) -> Vec<Sandbox> {
        let mut all: Vec<Sandbox> = lock(&self.known).values().cloned().collect();
        for noted in self.plugins.iter().flat_map(SandboxDir::all) {
            if !all.iter().any(|s| s.container_id == noted.container_id) {
                all.push(noted);
            }
        }
        all
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update is one insert or remove: a panic leaves the map whole.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::names::{ContainerId, IfName};

    fn sandbox(id: &str) -> Sandbox {
        Sandbox {
            container_id: ContainerId::new(id).unwrap(),
            ifname: IfName::new("eth0").unwrap(),
            netns: crate::cni::names::NetnsPath::new("/run/netns/p").unwrap(),
            cni_path: vec!["/opt/cni/bin".into()],
            namespace: "ns".into(),
            pod: "p".into(),
            uid: Some("u".into()),
            conf: serde_json::json!({"type": "plexus"}),
            restored: false,
        }
    }

    #[test]
    fn sandboxes_outlive_the_daemon_and_leave_with_their_del() {
        let tmp = tempfile::tempdir().unwrap();
        let (state, cni_dir) = (tmp.path().join("state"), tmp.path().join("cni"));
        let first = Sandboxes::open(Some(state.clone()), Some(&cni_dir)).unwrap();
        first
            .locked(&ContainerId::new("c1").unwrap(), Some(&cni_dir), || {
                first.add(sandbox("c1"))
            })
            .unwrap();
        std::fs::write(state.join("bad.json"), "{").unwrap();
        // A plugin process's ADD, noted under cniDir.
        SandboxDir::in_cni_dir(&cni_dir)
            .note(&sandbox("c2"))
            .unwrap();
        let next = Sandboxes::open(Some(state.clone()), Some(&cni_dir)).unwrap();
        let restored = |id| Sandbox {
            restored: true,
            ..sandbox(id)
        };
        let mut all = next.all();
        all.sort_by(|a, b| a.container_id.cmp(&b.container_id));
        assert_eq!(all, [restored("c1"), restored("c2")]);
        assert_eq!(
            next.get(&ContainerId::new("c2").unwrap()),
            Some(restored("c2"))
        );
        assert!(!state.join("bad.json").exists());
        for id in ["c1", "c2"] {
            next.locked(&ContainerId::new(id).unwrap(), Some(&cni_dir), || {
                next.remove(&ContainerId::new(id).unwrap(), Some(&cni_dir))
            })
            .unwrap();
            assert!(next.get(&ContainerId::new(id).unwrap()).is_none());
        }
        assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0);
        let shared = cni_dir.join(crate::sandbox_dir::SUBDIR);
        assert_eq!(std::fs::read_dir(shared).unwrap().count(), 0);
        assert!(lock(&next.locks).is_empty());
    }
}
