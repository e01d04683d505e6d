//! Peers built from their source by `.ci/` scripts, found where those cache
//! them. Only looks: building is the script's (`.ci/install-deps` runs it),
//! so a test never starts a build of its own.

use std::path::{Path, PathBuf};
use std::process::Command;

/// whereabouts as `.ci/whereabouts` caches it: the plugin binary and the
/// directory of its CRDs at the same commit.
#[derive(Debug, Clone)]
pub struct Whereabouts {
    pub binary: PathBuf,
    pub crds: PathBuf,
}

impl Whereabouts {
    /// whereabouts' own CRDs (its `doc/crds`), established on `api`. The
    /// test kit's kube-apiserver (v1.20.2 built with Go 1.19) validates an
    /// empty string in a custom resource as null, and a free slice's
    /// `nodeName` is "" (whereabouts' controller writes it so): the field
    /// is made nullable, as deploy/crds/whereabouts.yaml has it.
    pub fn install_crds(&self, api: &crate::kube::KubeApi) {
        api.kubectl(&["apply", "-f", &self.crds.display().to_string()]);
        api.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/ippools.whereabouts.cni.cncf.io",
            "crd/overlappingrangeipreservations.whereabouts.cni.cncf.io",
            "crd/nodeslicepools.whereabouts.cni.cncf.io",
        ]);
        let nullable = r#"[{"op": "add", "value": true, "path":
            "/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/allocations/items/properties/nodeName/nullable"}]"#;
        api.kubectl(&[
            "patch",
            "crd/nodeslicepools.whereabouts.cni.cncf.io",
            "--type=json",
            "-p",
            nullable,
        ]);
    }
}

/// The slices of the NodeSlicePool `namespace/name` on `api`, as
/// `(node, slice)` in order (an empty node: a free slice).
pub fn node_slices(
    api: &crate::kube::KubeApi,
    namespace: &str,
    name: &str,
) -> Vec<(String, String)> {
    let kind = "nodeslicepools.whereabouts.cni.cncf.io";
    let out = api.kubectl(&["get", kind, "-n", namespace, name, "-o", "json"]);
    let pool: serde_json::Value = serde_json::from_str(&out).expect("kubectl's JSON");
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    pool["status"]["allocations"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| (text(&a["nodeName"]), text(&a["sliceRange"])))
        .collect()
}

/// Runs `.ci/<script> <args>`: the path it prints; why not, when it fails.
pub(crate) fn ci_script(script: &str, args: &[&str]) -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit lives in the workspace")
        .join(".ci")
        .join(script);
    let out = Command::new(&script)
        .args(args)
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    let printed = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(format!("{}: {why}", script.display()));
    }
    Ok(printed)
}

/// The text of `path` (`deploy/daemonset.yaml`) in the previous release's
/// commit (`.ci/previous-release --commit`), from this checkout's history:
/// what a rollback to it restores beside its binary.
pub fn previous_release_file(path: &str) -> Result<String, String> {
    let commit = ci_script("previous-release", &["--commit"])?;
    let spec = format!("{}:{path}", commit.display());
    let out = Command::new("git")
        .arg("-C")
        .arg(crate::kube::repo())
        .args(["show", &spec])
        .output()
        .map_err(|e| format!("git show {spec}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git show {spec}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("git show {spec}: {e}"))
}

/// The cached whereabouts, or why there is none.
pub fn whereabouts() -> Result<Whereabouts, String> {
    let binary = ci_script("whereabouts", &["--path"])?;
    let crds = ci_script("whereabouts", &["--crds"])?;
    if binary.is_file() && crds.is_dir() {
        Ok(Whereabouts { binary, crds })
    } else {
        Err(format!(
            "no whereabouts at {} (build it with .ci/whereabouts)",
            binary.display()
        ))
    }
}

/// rdma-cni's binary as `.ci/rdma-cni` caches it, or why not: the chained
/// peer of plexus's built-in `rdma` type. Only looks: building is for the
/// host (vm-tests/run does it before the VM starts, whose root is
/// read-only), not for a feature probe every test binary runs.
pub fn rdma_cni() -> Result<PathBuf, String> {
    let path = ci_script("rdma-cni", &["--path"])?;
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "no rdma-cni at {} (build it with .ci/rdma-cni)",
            path.display()
        ))
    }
}

/// plexus's previous release, the static binary `.ci/previous-release`
/// builds (once, then cached): the script's output when it is built or
/// could be built here, else why not (its exit 3: the pinned commit is not
/// in this checkout's history).
pub fn previous_release() -> Result<PathBuf, String> {
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let path = ci_script("previous-release", &[])?;
            path.is_file()
                .then_some(path)
                .ok_or_else(|| ".ci/previous-release printed no binary".to_string())
        })
        .clone()
}
