//! Running a command from a test: its stdin given, its stdout required.

use std::fmt::Display;
use std::io::Write;
use std::process::{Command, Output, Stdio};

/// `cmd` run with `stdin` written to it, its stdout and stderr captured.
/// A plugin may exit before reading stdin (an environment error comes first,
/// as in libcni's skel); like Go's exec, the broken pipe is ignored.
pub fn output_with_stdin(cmd: &mut Command, stdin: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

/// `out`'s stdout; panics with `what` and its stderr when it failed.
#[track_caller]
pub fn stdout_ok(out: Output, what: impl Display) -> String {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
