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
    let mut child = piped(cmd);
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

/// `cmd` started with all three of its standard streams piped.
fn piped(cmd: &mut Command) -> Child {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// [`output_with_stdin`] bounded by `limit`: past it the command is killed
/// and the test fails, with what it printed so far (a hung CNI call fails
/// its test in seconds, not at the harness's timeout). Its output and how
/// long it took.
#[track_caller]
pub fn output_within(cmd: &mut Command, stdin: &str, limit: Duration) -> (Output, Duration) {
    use std::io::Read;
    use std::sync::mpsc;
    let started = Instant::now();
    let mut child = piped(cmd);
    let input = stdin.as_bytes().to_vec();
    let mut pipe_in = child.stdin.take().unwrap();
    std::thread::spawn(move || {
        let _ = pipe_in.write_all(&input);
    });
    let drain = |mut pipe: Box<dyn Read + Send>| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
        rx
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() >= limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = started.elapsed();
    // A child of the command may hold its pipes: take what came by then.
    let grace = Duration::from_secs(2);
    let stdout = stdout.recv_timeout(grace).unwrap_or_default();
    let stderr = stderr.recv_timeout(grace).unwrap_or_default();
    let Some(status) = status else {
        panic!(
            "still running after {limit:?}, killed; stdout: {}; stderr: {}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        );
    };
    (
        Output {
            status,
            stdout,
            stderr,
        },
        took,
    )
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

/// The value in KiB of `key` (`VmRSS`, `VmHWM`) in `/proc/<pid>/status`.
pub fn proc_status_kb(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
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
        proc_status_kb(self.pid(), "VmHWM").expect("VmHWM in /proc/PID/status")
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
