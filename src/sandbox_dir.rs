//! A directory of sandbox notes (`<container ID>.json`, a [`Sandbox`]
//! each), and the per-sandbox lock every process of the node shares.
//!
//! `<cniDir>/sandboxes/` is what the node's plugin processes and its daemon
//! share about each sandbox: every CNI call naming a sandbox (ADD, DEL,
//! CHECK), in a plugin process or in the daemon, and every hot-plug of it
//! hold its lock (`<container ID>.lock`, an `flock`), so they never run at
//! once whichever process runs them: a DEL waits for a hot-plug in
//! progress. A plugin process that ADDed a pod itself (thin mode, or
//! `daemonFallback: thin`) notes the sandbox there, so the daemon hot-plugs
//! it too; the sandbox's DEL removes the note. A lock file is removed under
//! its lock once the sandbox is known nowhere: nothing is left after the
//! DEL. The daemon's own notes (the sandboxes it ADDed) live in its state
//! directory, in the same format.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::Flock;
use serde::{Deserialize, Serialize};

use crate::cni::env::{CniCommand, CniEnv};
use crate::cni::error::CniError;
use crate::cni::flock::{lock_file, LockFileError};
use crate::cni::names::{ContainerId, IfName, NetnsPath};
use crate::cni::whole_file::{self, Durability};
use crate::config::PlexusConf;

/// One sandbox, as its ADD named it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    /// Checked as a note is read, as every name is.
    #[serde(rename = "containerID")]
    pub container_id: ContainerId,
    pub ifname: IfName,
    pub netns: NetnsPath,
    #[serde(default)]
    pub cni_path: Vec<PathBuf>,
    pub namespace: String,
    pub pod: String,
    /// kubelet's `K8S_POD_UID`, when it sent one: the pod this sandbox is
    /// for, never another by the same name.
    pub uid: Option<String>,
    /// The plexus conf of the ADD (its stdin).
    pub conf: serde_json::Value,
    /// Read back from a note (written by a daemon before this one, or by a
    /// plugin process), whose status write this daemon did not see through.
    #[serde(skip)]
    pub restored: bool,
}

impl Sandbox {
    /// The sandbox a successful ADD served, when its pod is named
    /// (kubelet's `CNI_ARGS`) and read from the API server (a conf with
    /// `kubeconfig`, no `manifestDir`): what a later hot-plug needs.
    pub fn of_call(env: &BTreeMap<String, String>, stdin: &str) -> Option<Sandbox> {
        let conf: serde_json::Value = serde_json::from_str(stdin).ok()?;
        let parsed = PlexusConf::from_value(&conf).ok()?;
        Sandbox::of_parsed_call(env, conf, &parsed)
    }

    /// [`Sandbox::of_call`] with the conf parsed already: `conf` as given,
    /// `parsed` as read.
    pub fn of_parsed_call(
        env: &BTreeMap<String, String>,
        conf: serde_json::Value,
        parsed: &PlexusConf,
    ) -> Option<Sandbox> {
        if parsed.kubeconfig.is_none() || parsed.manifest_dir.is_some() {
            return None;
        }
        let env = CniEnv::from_lookup(|key| env.get(key).cloned()).ok()?;
        let call = env.attachment()?;
        let args = &call.args;
        Some(Sandbox {
            container_id: call.container_id.clone(),
            ifname: call.ifname.clone(),
            netns: call.netns.clone()?,
            cni_path: call.path.clone(),
            namespace: args.k8s_pod_namespace()?.to_string(),
            pod: args.k8s_pod_name()?.to_string(),
            uid: args.k8s_pod_uid().map(String::from),
            conf,
            restored: false,
        })
    }

    /// The `cniDir` of its conf: where its lock and records are.
    pub fn cni_dir(&self) -> Option<PathBuf> {
        PlexusConf::from_value(&self.conf).ok().map(|c| c.cni_dir)
    }
}

/// The command and the sandbox of a call that names one (ADD, DEL, CHECK),
/// from its environment as the CNI layer reads it (`lookup`: a variable's
/// value); none for another command, or an environment that is not a
/// valid call (the call fails on it then, touching no sandbox).
pub fn named_by<V: Into<OsString>>(
    lookup: impl Fn(&str) -> Option<V>,
) -> Option<(CniCommand, ContainerId)> {
    let env = CniEnv::from_lookup(lookup).ok()?;
    let command = env.command();
    let on_sandbox = matches!(
        command,
        CniCommand::Add | CniCommand::Del | CniCommand::Check
    );
    Some((command, env.container_id().filter(|_| on_sandbox)?.clone()))
}

/// The subdirectory of `cniDir` shared by plugin processes and the daemon.
pub const SUBDIR: &str = "sandboxes";
/// How long a call or a hot-plug waits for the sandbox's lock: longer than
/// a hot-plug of many networks takes.
const LOCK_WAIT: Duration = Duration::from_secs(120);
/// Tries at a lock whose file its holder removed while this one waited.
const LOCK_TRIES: usize = 100;

pub struct SandboxDir {
    dir: PathBuf,
}

/// Why a sandbox's lock was not taken. Its CNI code is chosen in
/// `From<SandboxLockError> for CniError`, where the call answers.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SandboxLockError {
    /// The directory or the lock file could not be made or kept.
    #[error("{what}: {reason}")]
    Io { what: String, reason: String },
    /// The lock file: held by another call past the bound (code 11, try
    /// again later), or not opened.
    #[error(transparent)]
    Lock(#[from] LockFileError),
}

impl From<SandboxLockError> for CniError {
    fn from(e: SandboxLockError) -> CniError {
        match e {
            SandboxLockError::Io { what, reason } => CniError::io(what, reason),
            SandboxLockError::Lock(e) => e.into(),
        }
    }
}

/// A sandbox's lock, held until dropped or [`Held::release`]d.
pub struct Held {
    note: PathBuf,
    path: PathBuf,
    _lock: Flock<File>,
}

impl SandboxDir {
    pub fn new(dir: PathBuf) -> SandboxDir {
        SandboxDir { dir }
    }

    /// The directory shared under `cni_dir`.
    pub fn in_cni_dir(cni_dir: &Path) -> SandboxDir {
        SandboxDir::new(cni_dir.join(SUBDIR))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Create the directory (0700) if it is missing.
    pub fn create(&self) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
    }

    fn note_path(&self, container_id: &ContainerId) -> PathBuf {
        self.dir.join(format!("{container_id}.json"))
    }

    /// Take sandbox `container_id`'s lock, waiting at most `LOCK_WAIT`
    /// (then code 11: the runtime tries again later).
    pub fn lock(&self, container_id: &ContainerId) -> Result<Held, SandboxLockError> {
        self.create().map_err(|e| SandboxLockError::Io {
            what: self.dir.display().to_string(),
            reason: e.to_string(),
        })?;
        let path = self.dir.join(format!("{container_id}.lock"));
        for _ in 0..LOCK_TRIES {
            let lock = lock_file(&path, LOCK_WAIT, "sandbox busy")?;
            // A holder that removed the file as this one waited left this
            // one the lock of a file no one else opens: take the new one.
            let held = lock.metadata().map(|m| (m.dev(), m.ino()));
            let named = std::fs::metadata(&path).map(|m| (m.dev(), m.ino()));
            if let (Ok(held), Ok(named)) = (held, named) {
                if held == named {
                    return Ok(Held {
                        note: self.note_path(container_id),
                        path,
                        _lock: lock,
                    });
                }
            }
        }
        Err(SandboxLockError::Io {
            what: path.display().to_string(),
            reason: "removed and re-created by others on every try".into(),
        })
    }

    /// Note `sandbox` (under its lock).
    pub fn note(&self, sandbox: &Sandbox) -> std::io::Result<()> {
        self.create()?;
        let bytes = serde_json::to_vec(sandbox).expect("a sandbox serializes");
        whole_file::replace(
            &self.note_path(&sandbox.container_id),
            &bytes,
            0o600,
            Durability::Unsynced,
        )
    }

    /// Remove the note of `container_id` (under its lock); a missing one is
    /// fine.
    pub fn forget(&self, container_id: &ContainerId) {
        let path = self.note_path(container_id);
        if let Err(error) = crate::cni::whole_file::remove(&path) {
            tracing::warn!(%error, file = %path.display(), "sandbox note not removed");
        }
    }

    /// The note of `container_id`, if there is one.
    pub fn read(&self, container_id: &ContainerId) -> Option<Sandbox> {
        read_note(&self.note_path(container_id)).ok()
    }

    /// Remove every note (and its lock file) but those `keep` names, each
    /// under its lock; a sandbox busy past the lock's bound is kept.
    pub fn forget_all_but(&self, keep: impl Fn(&str) -> bool) {
        for sandbox in self.all() {
            if keep(&sandbox.container_id) {
                continue;
            }
            if let Ok(held) = self.lock(&sandbox.container_id) {
                self.forget(&sandbox.container_id);
                held.release(false);
            }
        }
    }

    /// Every note; one that does not parse is dropped, with a warning.
    pub fn all(&self) -> Vec<Sandbox> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for path in entries.flatten().map(|e| e.path()) {
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            match read_note(&path) {
                Ok(sandbox) => out.push(sandbox),
                // Read between a writer's create and rename: gone already.
                Err(_) if !path.exists() => {}
                Err(reason) => {
                    tracing::warn!(file = %path.display(), %reason, "unreadable sandbox note dropped");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        out
    }
}

impl Held {
    /// Release the lock, removing its file first unless the sandbox is
    /// still known: noted beside it, or `known_elsewhere` (the daemon's).
    pub fn release(self, known_elsewhere: bool) {
        if !known_elsewhere && !self.note.exists() {
            if let Err(error) = crate::cni::whole_file::remove(&self.path) {
                tracing::warn!(%error, file = %self.path.display(), "sandbox lock not removed");
            }
        }
    }
}

/// A note, as written by a plexus before this one too (`restored`).
fn read_note(path: &Path) -> Result<Sandbox, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let sandbox: Sandbox = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    Ok(Sandbox {
        restored: true,
        ..sandbox
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_lock_is_exclusive_and_its_file_leaves_with_the_sandbox() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SandboxDir::in_cni_dir(tmp.path());
        let held = dir.lock(&ContainerId::new("c1").unwrap()).unwrap();
        let inside = Arc::new(AtomicBool::new(true));
        let waiter = {
            let inside = inside.clone();
            let cni_dir = tmp.path().to_path_buf();
            std::thread::spawn(move || {
                // Waits for the holder, then takes a fresh file: the
                // holder removed the one it waited on.
                let held = SandboxDir::in_cni_dir(&cni_dir)
                    .lock(&ContainerId::new("c1").unwrap())
                    .unwrap();
                assert!(!inside.load(Ordering::SeqCst), "two holders at once");
                held.release(false);
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        inside.store(false, Ordering::SeqCst);
        held.release(false);
        waiter.join().unwrap();
        assert_eq!(
            std::fs::read_dir(tmp.path().join(SUBDIR)).unwrap().count(),
            0
        );
        // A name that could leave the directory is no ContainerId at all.
        assert!(ContainerId::new("../x").is_err());

        // GC: the notes of sandboxes not valid leave, with their locks.
        let note = |id: &str| {
            serde_json::json!({"containerID": id, "ifname": "eth0",
            "netns": "/run/netns/x", "namespace": "ns", "pod": "p", "uid": null, "conf": {}})
        };
        for id in ["kept", "stale"] {
            let sandbox: Sandbox = serde_json::from_value(note(id)).unwrap();
            let held = dir.lock(&ContainerId::new(id).unwrap()).unwrap();
            dir.note(&sandbox).unwrap();
            held.release(false);
        }
        dir.forget_all_but(|id| id == "kept");
        let mut left: Vec<String> = std::fs::read_dir(tmp.path().join(SUBDIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["kept.json", "kept.lock"]);
    }
}
