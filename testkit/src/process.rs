//! Running a command from a test: its stdin given, its stdout required, or
//! in the background with its log.

use std::fmt::Display;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

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

/// A process whose stderr is its log file (a daemon's log), killed and
/// reaped on drop.
pub struct LoggedChild {
    child: Child,
    log: PathBuf,
}

impl LoggedChild {
    /// `cmd` started without stdin or stdout, its stderr written to `log`.
    pub fn spawn(cmd: &mut Command, log: PathBuf) -> LoggedChild {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .unwrap();
        LoggedChild { child, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether it has not exited yet.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Peak resident memory so far (VmHWM), in KiB.
    pub fn peak_rss_kb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/PID/status")
    }

    /// Its exit status, once it exits; panics with its log after `bound`.
    #[track_caller]
    pub fn exit_within(&mut self, bound: Duration) -> ExitStatus {
        let deadline = Instant::now() + bound;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "still running: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Polls `done` every 20 ms until it holds; after `bound`, panics with
    /// `what` and the log.
    #[track_caller]
    pub fn wait_until(&self, what: &str, bound: Duration, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + bound;
        while !done() {
            assert!(Instant::now() < deadline, "{what}: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for LoggedChild {
    fn drop(&mut self) {
        self.kill();
    }
}
