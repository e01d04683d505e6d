//! The plexus image, built as an operator builds it: `podman build -f
//! deploy/Containerfile` around the release artifact (`cargo dist`: static,
//! musl; the test's own build is the host's, dynamic), with
//! podman's whole state (storage, run root, containers.conf) in a temp dir
//! that goes with [`Images`], images and containers included.

use std::path::Path;
use std::process::{Command, Output};

use plexus_testkit::podman::podman_in;
use plexus_testkit::process::stdout_ok;

/// Every podman command is bounded by this (seconds).
const TIMEOUT: &str = "120";

/// A throw-away podman store.
pub struct Images {
    state: tempfile::TempDir,
}

impl Images {
    pub fn new() -> Images {
        // runc, cgroupfs and the ulimits this machine kind allows
        // (../shared/notes/environment.md).
        let state = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(state.path().join("tmp")).unwrap();
        std::fs::write(
            state.path().join("containers.conf"),
            "[containers]\ndefault_ulimits = [\"nofile=20000:20000\", \"nproc=32768:32768\"]\n\
             [engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n",
        )
        .unwrap();
        Images { state }
    }

    /// podman `args`, bounded; its output whatever the outcome.
    pub fn podman(&self, args: &[&str]) -> Output {
        podman_in(Command::new("timeout").arg(TIMEOUT), self.state.path())
            .args(args)
            .output()
            .unwrap()
    }

    /// podman `args`, which must succeed; its stdout.
    pub fn podman_ok(&self, args: &[&str]) -> String {
        stdout_ok(self.podman(args), format_args!("podman {args:?}"))
    }

    /// `deploy/Containerfile` built offline around the release artifact
    /// (`plexus_testkit::dist::build`), tagged `tag`.
    pub fn build_plexus(&self, tag: &str) {
        let plexus = plexus_testkit::dist::build().unwrap_or_else(|e| panic!("{e}"));
        let context = tempfile::tempdir().unwrap();
        std::fs::copy(plexus, context.path().join("plexus")).unwrap();
        let containerfile = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/Containerfile");
        self.podman_ok(&[
            "build",
            "--network=none",
            "-f",
            &containerfile.display().to_string(),
            "--build-arg",
            "PLEXUS_BINARY=plexus",
            "-t",
            tag,
            &context.path().display().to_string(),
        ]);
    }
}
