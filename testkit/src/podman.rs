//! podman as the tests run it: isolated from the machine's own.

use std::path::Path;
use std::process::Command;

/// `podman` appended to `cmd` (a wrapper such as `timeout` or `nsenter`),
/// with its whole state under `state`: storage (vfs), run root,
/// `containers.conf` and temp files, so nothing lands in the machine's.
pub fn podman_in<'a>(cmd: &'a mut Command, state: &Path) -> &'a mut Command {
    cmd.arg("podman")
        .arg("--root")
        .arg(state.join("root"))
        .arg("--runroot")
        .arg(state.join("runroot"))
        .args(["--storage-driver", "vfs"])
        .env("CONTAINERS_CONF", state.join("containers.conf"))
        .env("TMPDIR", state.join("tmp"))
}
