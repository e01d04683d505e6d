//! The release artifact, `cargo dist` (.cargo/config.toml): `plexus` static
//! against musl, its hot functions gathered (bench/hot-text/). The everyday
//! build is the host's and dynamic; what needs the artifact (a `FROM
//! scratch` image, the benchmark, the hot-function list's check) finds it
//! here.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The target and profile of `cargo dist`.
pub const TARGET: &str = "x86_64-unknown-linux-musl";
pub const PROFILE: &str = "dist";

/// A cold `cargo dist` (every dependency, fat LTO) on a busy 2-core machine.
const BUILD_BOUND: Duration = Duration::from_secs(1800);

/// The dist `plexus` of the cargo target directory that holds `exe` (a
/// test or benchmark binary: `<target>/debug/deps/...`,
/// `<target>/release/...`, `<target>/x86_64-unknown-linux-musl/dist/...`),
/// if it has been built.
pub fn plexus_beside(exe: &Path) -> Option<PathBuf> {
    exe.ancestors()
        .skip(1)
        .take(4)
        .map(|dir| dir.join(TARGET).join(PROFILE).join("plexus"))
        .find(|p| p.is_file())
}

/// Runs `cargo dist` (once per process; cargo makes it a no-op when the
/// artifact is fresh) and returns the dist `plexus` of this test binary's
/// target directory.
pub fn build() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(build_once).clone()
}

fn build_once() -> Result<PathBuf, String> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit is a workspace member");
    // cargo's own output goes to a file: a pipe nobody reads while waiting
    // could fill and stall it.
    let log = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_for_a_crate) {
            command.env_remove(name);
        }
    }
    let mut child = command
        .arg("dist")
        .current_dir(workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log.reopen().map_err(|e| e.to_string())?)
        .spawn()
        .map_err(|e| format!("cargo dist: {e}"))?;
    let deadline = Instant::now() + BUILD_BOUND;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("cargo dist: not done within {BUILD_BOUND:?}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if !status.success() {
        let output = std::fs::read_to_string(log.path()).unwrap_or_default();
        return Err(format!("cargo dist: {status}\n{output}"));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    plexus_beside(&exe).ok_or_else(|| {
        format!(
            "cargo dist built no {TARGET}/{PROFILE}/plexus in the target directory of {}",
            exe.display()
        )
    })
}

/// Whether cargo sets env var `name` for the crate it runs (a test binary
/// gets its package's). `ring`'s build script asks to rerun when
/// `CARGO_PKG_NAME` or `CARGO_MANIFEST_DIR` change, and cargo compares them
/// with its own environment: a `cargo dist` inheriting a test's would
/// rebuild `ring` and all that depends on it, fat LTO included (444 s of a
/// CI run went to building the same artifact a second time). Without them
/// every test binary, the shell and `node-deploy` share one build.
fn set_by_cargo_for_a_crate(name: &str) -> bool {
    ["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_BIN_", "CARGO_CFG_"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
        || matches!(
            name,
            "CARGO_CRATE_NAME" | "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR" | "OUT_DIR"
        )
}

#[cfg(test)]
mod tests {
    use super::set_by_cargo_for_a_crate;

    #[test]
    fn only_what_cargo_sets_per_crate_is_dropped() {
        for name in [
            "CARGO_PKG_NAME",
            "CARGO_MANIFEST_DIR",
            "CARGO_CRATE_NAME",
            "OUT_DIR",
        ] {
            assert!(set_by_cargo_for_a_crate(name), "{name}");
        }
        for name in [
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
            "PATH",
        ] {
            assert!(!set_by_cargo_for_a_crate(name), "{name}");
        }
    }
}
