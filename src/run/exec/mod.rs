//! An external CNI plugin, run exactly as a runtime runs it (cni-SPEC §2, §3
//! "Adding an attachment" step 1 and 3): the binary named by `type` is looked
//! up in the `CNI_PATH` directories, executed with the `CNI_*` variables and
//! the request configuration on stdin, and its stdout read as a result or an
//! error. Its stderr is forwarded to ours (cni-SPEC §4: "plugins may log to
//! stderr") and the tail kept for error messages.
//!
//! Every run is bounded by a timeout; on expiry the plugin's whole process
//! group is killed, so helpers it started (iptables, ...) go with it.
//!
//! In thick mode the daemon's calls may run plugins elsewhere ([`ExecSite`]):
//! chrooted into the node's file system (Multus's `chrootDir`), where the
//! node's dynamically linked plugins find their libc, and with `CNI_NETNS`
//! a path that reaches the namespace the shim passed.

pub mod error;
mod stderr;

use std::ffi::{CString, OsString};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use crate::cni::casefold;
use crate::cni::env::{CNI_ARGS, CNI_COMMAND, CNI_CONTAINERID, CNI_IFNAME, CNI_NETNS, CNI_PATH};
use crate::cni::names::PluginType;
use crate::cni::result::CniResult;
use crate::cni::skel::{Request, ValidAttachment};
use crate::cni::CniVersion;

pub use error::ExecError;
use error::{Printed, Unusable};
use stderr::Destination;
pub use stderr::StderrSink;

/// A plugin printing more than this on stdout is broken; nothing legitimate
/// comes close.
const MAX_STDOUT: u64 = 16 << 20;

/// Where exec'd plugins run; the default is where plexus runs.
#[derive(Debug, Clone, Default)]
pub struct ExecSite {
    /// `chrootDir`: plugins are looked up under this directory and run
    /// chrooted into it, so every path they get (`CNI_PATH`, `CNI_NETNS`,
    /// the paths in their configuration) is read in the node's file system.
    pub root: Option<PathBuf>,
    /// `(CNI_NETNS as the runtime gave it, the path plugins get instead)`:
    /// the daemon holds the shim's descriptor of the pod's namespace, and
    /// plugins open it as `/proc/PID/fd/N`, whatever their mounts.
    pub netns_alias: Option<(PathBuf, PathBuf)>,
    /// Where plugins' stderr goes: passed on as it is where plexus runs as a
    /// plugin, into the log where the daemon runs the call.
    pub stderr: StderrSink,
}

impl ExecSite {
    /// The first regular executable file named `plugin_type` in `dirs`, as
    /// seen from [`ExecSite::root`]; the path is the one to run there.
    pub fn find(&self, plugin_type: &str, dirs: &[PathBuf]) -> Result<PathBuf, ExecError> {
        find_plugin_under(&parse_type(plugin_type)?, dirs, self.root.as_deref())
    }

    /// `CNI_NETNS` for a plugin of a request whose namespace is `netns`.
    fn netns<'p>(&'p self, netns: Option<&'p Path>) -> &'p Path {
        match (&self.netns_alias, netns) {
            (Some((given, alias)), Some(netns)) if given == netns => alias,
            (_, netns) => netns.unwrap_or(Path::new("")),
        }
    }
}

/// An external plugin binary behind the `TypedPlugin` trait (and so `Plugin`).
#[derive(Debug, Clone)]
pub struct ExecPlugin {
    plugin_type: PluginType,
    timeout: Duration,
    site: Arc<ExecSite>,
}

impl ExecPlugin {
    /// `plugin_type` must be a bare binary name (cni-SPEC §1 `type`), so a
    /// configuration cannot make plexus run `../../bin/x`.
    pub fn new(plugin_type: &str, timeout: Duration) -> Result<ExecPlugin, ExecError> {
        Ok(ExecPlugin::of(parse_type(plugin_type)?, timeout))
    }

    /// The plugin of a type already checked by its [`PluginType`].
    pub fn of(plugin_type: PluginType, timeout: Duration) -> ExecPlugin {
        ExecPlugin {
            plugin_type,
            timeout,
            site: Arc::default(),
        }
    }

    /// Run where `site` says.
    pub fn at(mut self, site: Arc<ExecSite>) -> ExecPlugin {
        self.site = site;
        self
    }

    pub fn plugin_type(&self) -> &str {
        &self.plugin_type
    }

    /// The binary serving this type in `dirs`: the first regular, executable
    /// file of that name (symlinks followed), as libcni's `FindInPath`.
    pub fn find(&self, dirs: &[PathBuf]) -> Result<PathBuf, ExecError> {
        find_plugin_under(&self.plugin_type, dirs, self.site.root.as_deref())
    }

    /// Run the plugin for `req.env`'s command and return its stdout.
    fn invoke(&self, req: &Request) -> Result<Vec<u8>, ExecError> {
        let binary = self.find(req.env.path())?;
        let stdin = serde_json::to_vec(&req.config).map_err(|e| self.io("stdin", e))?;
        let mut cmd = Command::new(&binary);
        // A runtime's environment, as libcni builds it: the process's own
        // (PATH, ...) without any inherited CNI_*, then all six CNI_*
        // variables, empty where a command has no value (cni-SPEC §2).
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("CNI_") {
                cmd.env_remove(key);
            }
        }
        let env = &req.env;
        cmd.env(CNI_COMMAND, env.command().as_str())
            .env(
                CNI_CONTAINERID,
                env.container_id().map_or("", |id| id.as_str()),
            )
            .env(CNI_NETNS, self.site.netns(env.netns()))
            .env(CNI_IFNAME, env.ifname().map_or("", |n| n.as_str()))
            .env(CNI_ARGS, env.args().to_string())
            .env(CNI_PATH, join_path(env.path()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so a timeout kills its helpers too.
            .process_group(0);
        if let Some(root) = &self.site.root {
            chroot_in_child(&mut cmd, root).map_err(|e| ExecError::ChrootDir {
                root: root.clone(),
                reason: e.to_string(),
            })?;
        }
        let to = match self.site.stderr {
            StderrSink::Passthrough => Destination::Passthrough,
            StderrSink::Log => Destination::Log {
                plugin_type: self.plugin_type.to_string(),
                call: req.call_log(),
            },
        };
        let output = run_bounded(cmd, stdin, self.timeout, to).map_err(|(e, tail)| match e {
            Unfinished::Spawn(e) => ExecError::Spawn {
                plugin_type: self.plugin_type.clone(),
                binary: binary.clone(),
                reason: e.to_string(),
            },
            Unfinished::Io(what, e) => self.io(what, e),
            Unfinished::Timeout => ExecError::Timeout {
                plugin_type: self.plugin_type.clone(),
                binary: binary.clone(),
                command: env.command(),
                timeout: self.timeout,
                stderr: printed_text(&tail),
            },
        })?;
        if output.status.success() {
            return Ok(output.stdout);
        }
        Err(self.failure(&output))
    }

    /// The error of a plugin that exited non-zero: its CNI error result
    /// (cni-SPEC §5 "Error") when stdout holds one, else the exit status and
    /// stderr.
    fn failure(&self, output: &Output) -> ExecError {
        let plugin_type = self.plugin_type.clone();
        if let Some((code, msg, details)) = error_result(&output.stdout) {
            return ExecError::Replied {
                plugin_type,
                code,
                msg,
                details,
            };
        }
        let printed = Printed {
            stderr: printed_text(&output.stderr_tail),
            stdout: printed_text(&output.stdout),
        };
        match (output.status.code(), output.status.signal()) {
            (None, Some(signal)) => ExecError::Killed {
                plugin_type,
                signal,
                printed,
            },
            // Neither a status nor a signal: not for a process that ended.
            (status, _) => ExecError::Exited {
                plugin_type,
                status: status.unwrap_or_else(|| output.status.into_raw()),
                printed,
            },
        }
    }

    /// Talking to the plugin failed.
    fn io(&self, what: &'static str, e: impl std::fmt::Display) -> ExecError {
        ExecError::Io {
            plugin_type: self.plugin_type.clone(),
            what,
            reason: e.to_string(),
        }
    }

    /// cni-SPEC §5 "ADD Success": the result, read in its own `cniVersion`
    /// (the request's when it names none, as libcni does) and held as the
    /// request's version.
    fn parse_result(&self, stdout: &[u8], req: &Request) -> Result<CniResult, ExecError> {
        let plugin_type = || self.plugin_type.clone();
        let text = String::from_utf8_lossy(stdout);
        if text.trim().is_empty() {
            return Err(ExecError::NoResult {
                plugin_type: plugin_type(),
            });
        }
        let value: Value = serde_json::from_slice(stdout).map_err(|e| ExecError::NotJson {
            plugin_type: plugin_type(),
            reason: e.to_string(),
            stdout: text.trim().to_string(),
        })?;
        let bad = |error| ExecError::BadResult {
            plugin_type: plugin_type(),
            error,
        };
        let version = match value.get("cniVersion") {
            Some(Value::String(s)) if !s.is_empty() => {
                CniVersion::parse_field(s, "cniVersion").map_err(bad)?
            }
            _ => req.cni_version,
        };
        let mut result = CniResult::from_value_as(&value, version).map_err(bad)?;
        result.cni_version = Some(req.cni_version);
        Ok(result)
    }
}

/// Typed, so the executor keeps an exec'd plugin's failure an
/// [`ExecError`] (which names the plugin); as a `Plugin` (a built-in
/// plugin's IPAM delegate) it answers with the CNI error it converts to.
impl crate::cni::skel::TypedPlugin for ExecPlugin {
    type Error = ExecError;

    /// The binary must exist: a configuration naming a plugin the node does
    /// not have fails before anything is added.
    fn validate(&self, req: &Request) -> Result<(), ExecError> {
        self.find(req.env.path()).map(|_| ())
    }

    fn add(&self, req: &Request) -> Result<CniResult, ExecError> {
        let stdout = self.invoke(req)?;
        self.parse_result(&stdout, req)
    }

    fn del(&self, req: &Request) -> Result<(), ExecError> {
        self.invoke(req).map(|_| ())
    }

    fn check(&self, req: &Request) -> Result<(), ExecError> {
        self.invoke(req).map(|_| ())
    }

    fn gc(&self, req: &Request, _valid: &[ValidAttachment]) -> Result<(), ExecError> {
        // The valid attachments are in the request configuration already.
        self.invoke(req).map(|_| ())
    }

    fn status(&self, req: &Request) -> Result<(), ExecError> {
        self.invoke(req).map(|_| ())
    }
}

/// Make the child that `cmd` spawns chroot into `root` (and start in its
/// `/`) before exec, as Go's `SysProcAttr.Chroot` does for Multus thick.
fn chroot_in_child(cmd: &mut Command, root: &Path) -> std::io::Result<()> {
    let root = CString::new(root.as_os_str().as_bytes())?;
    // SAFETY: only chroot(2) and chdir(2), async-signal-safe syscalls on a
    // string allocated before the fork, run in the child before exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::chroot(root.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

/// The first regular executable file named `plugin_type` in `dirs`.
pub fn find_plugin(plugin_type: &str, dirs: &[PathBuf]) -> Result<PathBuf, ExecError> {
    find_plugin_under(&parse_type(plugin_type)?, dirs, None)
}

/// `type` as a configuration gives it: a bare binary name (cni-SPEC §1), so
/// a configuration cannot make plexus run `../../bin/x`.
pub(crate) fn parse_type(plugin_type: &str) -> Result<PluginType, ExecError> {
    PluginType::new(plugin_type).map_err(ExecError::PluginType)
}

/// What `path` is when looked up in `root` (symlinks resolved inside it, as
/// a process chrooted there sees them), or in this process's view.
fn metadata_under(path: &Path, root: Option<&Path>) -> std::io::Result<std::fs::Metadata> {
    use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
    let Some(root) = root else {
        return std::fs::metadata(path);
    };
    let dir = std::fs::File::open(root)?;
    let inside = path.strip_prefix("/").unwrap_or(path);
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT);
    let found = std::fs::File::from(openat2(&dir, inside, how)?);
    found.metadata()
}

/// [`find_plugin`] as a process chrooted into `root` finds it.
fn find_plugin_under(
    plugin_type: &PluginType,
    dirs: &[PathBuf],
    root: Option<&Path>,
) -> Result<PathBuf, ExecError> {
    let mut skipped = Vec::new();
    for dir in dirs {
        let candidate = dir.join(plugin_type);
        match metadata_under(&candidate, root) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => return Ok(candidate),
            Ok(m) if m.is_file() => skipped.push((candidate, Unusable::NotExecutable)),
            Ok(_) => skipped.push((candidate, Unusable::NotAFile)),
            Err(_) => {}
        }
    }
    Err(ExecError::NotFound {
        plugin_type: plugin_type.clone(),
        dirs: dirs.to_vec(),
        root: root.map(Path::to_path_buf),
        skipped,
    })
}

/// What a plugin printed, as error messages quote it.
fn printed_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

fn join_path(dirs: &[PathBuf]) -> OsString {
    let mut out = OsString::new();
    for (i, d) in dirs.iter().enumerate() {
        if i > 0 {
            out.push(":");
        }
        out.push(d.as_os_str());
    }
    out
}

/// `{code, msg, details}` when `stdout` is a CNI error result.
fn error_result(stdout: &[u8]) -> Option<(u32, String, String)> {
    let v: Value = serde_json::from_slice(stdout).ok()?;
    let obj = v.as_object()?;
    // Go plugins' keys, matched as Go decodes them.
    let get = |key: &str| casefold::get(obj, key);
    let code = u32::try_from(get("code")?.as_u64()?).ok()?;
    let text = |key: &str| {
        get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Some((code, text("msg"), text("details")))
}

struct Output {
    status: ExitStatus,
    stdout: Vec<u8>,
    /// The last [`stderr::STDERR_TAIL`] bytes of stderr.
    stderr_tail: Vec<u8>,
}

/// Why a bounded run did not end with the plugin's exit.
enum Unfinished {
    Spawn(std::io::Error),
    Io(&'static str, std::io::Error),
    Timeout,
}

/// Spawn `cmd`, feed it `stdin`, collect stdout, pass stderr on to `to`,
/// all within `timeout`. Reader and writer threads do the I/O, so a plugin
/// that fills a pipe cannot deadlock us; a plugin (or a helper it left
/// behind) that keeps its pipes open past the deadline is killed and its
/// threads abandoned. Once the plugin has exited, its stdout and stderr get
/// at most [`stderr::LINGER`] more: a helper holding them open does not hold
/// the call.
fn run_bounded(
    mut cmd: Command,
    stdin: Vec<u8>,
    timeout: Duration,
    to: Destination,
) -> Result<Output, (Unfinished, Vec<u8>)> {
    let deadline = Instant::now() + timeout;
    let _span = crate::phases::span("exec'd plugin");
    let mut child =
        spawn_once_written(&mut cmd, deadline).map_err(|e| (Unfinished::Spawn(e), vec![]))?;

    let mut pipe_in = child.stdin.take().expect("stdin is piped");
    thread::spawn(move || {
        // A plugin may exit without reading everything: EPIPE is its business.
        let _ = pipe_in.write_all(&stdin);
    });

    let (closed_tx, stdout_closed) = mpsc::channel();
    let stdout = Arc::new(Mutex::new(Vec::new()));
    let mut pipe_out = child.stdout.take().expect("stdout is piped");
    let read = stdout.clone();
    thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        let closed = loop {
            match pipe_out.read(&mut chunk) {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    let mut read = read.lock().unwrap_or_else(|p| p.into_inner());
                    read.extend_from_slice(&chunk[..n]);
                    if read.len() as u64 > MAX_STDOUT {
                        break Err(std::io::Error::other(format!(
                            "more than {MAX_STDOUT} bytes"
                        )));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        let _ = closed_tx.send(closed);
    });

    let stderr = stderr::copy(child.stderr.take().expect("stderr is piped"), to);

    let ended = exited(&mut child, &stdout_closed, deadline).map(|status| {
        let stdout = std::mem::take(&mut *stdout.lock().unwrap_or_else(|p| p.into_inner()));
        (status, stdout)
    });
    if ended.is_err() {
        kill(&mut child);
    }
    let stderr_tail = stderr.finish(Instant::now() + stderr::LINGER);
    match ended {
        Ok((status, stdout)) => Ok(Output {
            status,
            stdout,
            stderr_tail,
        }),
        Err(unfinished) => Err((unfinished, stderr_tail)),
    }
}

/// The plugin's exit status, once it has exited and closed stdout (its
/// result is complete). A plugin that exited while a helper it started
/// still holds its stdout gets [`stderr::LINGER`] more, then its result is
/// what it wrote by then: the helper does not hold the call to the deadline.
fn exited(
    child: &mut Child,
    stdout_closed: &mpsc::Receiver<std::io::Result<()>>,
    deadline: Instant,
) -> Result<ExitStatus, Unfinished> {
    /// How often a call whose plugin has not closed stdout looks whether it
    /// exited.
    const POLL: Duration = Duration::from_millis(10);
    let remaining = || deadline.saturating_duration_since(Instant::now());
    let closed = loop {
        match stdout_closed.recv_timeout(remaining().min(POLL)) {
            Ok(closed) => break closed,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break Err(std::io::Error::other("the reader stopped"))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        match child.try_wait() {
            Ok(Some(status)) => {
                return match stdout_closed.recv_timeout(stderr::LINGER.min(remaining())) {
                    Ok(Err(e)) => Err(Unfinished::Io("stdout", e)),
                    _ => Ok(status),
                }
            }
            Ok(None) if remaining().is_zero() => return Err(Unfinished::Timeout),
            Ok(None) => {}
            Err(e) => return Err(Unfinished::Io("wait", e)),
        }
    };
    closed.map_err(|e| Unfinished::Io("stdout", e))?;
    wait_until(child, deadline)
}

/// How long exec may keep failing with ETXTBSY before that is the answer.
const BUSY_FOR_AT_MOST: Duration = Duration::from_secs(1);

/// Spawn `cmd`, retrying for a moment (bounded by [`BUSY_FOR_AT_MOST`] and
/// `deadline`) while exec fails with ETXTBSY: the binary is still open for
/// writing, by an installer that is copying it in place, or by a child
/// another thread forked between its open and its close (the descriptor
/// lives in that child until it execs). Both last moments.
fn spawn_once_written(cmd: &mut Command, deadline: Instant) -> std::io::Result<Child> {
    let give_up = deadline.min(Instant::now() + BUSY_FOR_AT_MOST);
    let mut pause = Duration::from_millis(1);
    loop {
        match cmd.spawn() {
            Err(e)
                if e.raw_os_error() == Some(libc::ETXTBSY) && Instant::now() + pause < give_up =>
            {
                thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            spawned => return spawned,
        }
    }
}

/// Wait for the child to exit, polling (it closed stdout, so it is usually
/// gone already), until the deadline.
fn wait_until(child: &mut Child, deadline: Instant) -> Result<ExitStatus, Unfinished> {
    let mut pause = Duration::from_micros(50);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) => {}
            Err(e) => return Err(Unfinished::Io("wait", e)),
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(Unfinished::Timeout);
        }
        thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Kill the plugin's process group, then reap the plugin.
fn kill(child: &mut Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // The group is the child's own (process_group(0) at spawn), and the
        // child is not reaped yet, so its pid (= pgid) cannot be reused.
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use std::fs;

    use serde_json::{json, Map};

    use super::*;
    use crate::cni::env::{AttachmentParams, CniCommand, CniEnv};
    use crate::cni::error::{CniError, ErrorCode};
    use crate::config::DEFAULT_PLUGIN_TIMEOUT;
    // The exec'd plugin as a runtime sees it: its CNI errors.
    use crate::cni::skel::Plugin;

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn request(command: CniCommand, dirs: Vec<PathBuf>, config: Value) -> Request {
        let params = AttachmentParams {
            netns: Some(crate::cni::names::NetnsPath::new("/var/run/netns/x").unwrap()),
            path: dirs,
            ..AttachmentParams::new("ctr1", "eth0").unwrap()
        };
        let env = CniEnv::for_attachment(command, params).unwrap();
        let Value::Object(config) = config else {
            panic!("object")
        };
        Request::from_config(env, config).unwrap()
    }

    fn conf(t: &str) -> Value {
        json!({"cniVersion": "1.0.0", "name": "n", "type": t})
    }

    #[test]
    fn a_binary_still_open_for_writing_is_run_once_closed() {
        let d = tempfile::tempdir().unwrap();
        let p = script(d.path(), "p", "cat >/dev/null; echo '{}'");
        let plugin = ExecPlugin::new("p", Duration::from_secs(10)).unwrap();
        let req = request(CniCommand::Add, vec![d.path().into()], conf("p"));
        // Held open for writing a little while: exec fails with ETXTBSY
        // until the writer lets go, then it runs.
        let writer = fs::OpenOptions::new().append(true).open(&p).unwrap();
        let release = thread::spawn(move || {
            thread::sleep(Duration::from_millis(150));
            drop(writer);
        });
        assert_eq!(plugin.invoke(&req).unwrap(), b"{}\n");
        release.join().unwrap();
        // Held for good: the error, within BUSY_FOR_AT_MOST.
        let _writer = fs::OpenOptions::new().append(true).open(&p).unwrap();
        let t0 = Instant::now();
        let e = plugin.invoke(&req).unwrap_err();
        assert!(
            matches!(&e, ExecError::Spawn { reason, .. } if reason.contains("Text file busy")),
            "{e:?}"
        );
        assert!(t0.elapsed() < BUSY_FOR_AT_MOST + Duration::from_millis(500));
    }

    #[test]
    fn find_takes_the_first_regular_executable() {
        // cni-SPEC §3 "Adding an attachment" step 1.
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let c = tempfile::tempdir().unwrap();
        // a: not executable; b: a directory; c: the real one.
        fs::write(a.path().join("p"), "x").unwrap();
        fs::create_dir(b.path().join("p")).unwrap();
        let good = script(c.path(), "p", "exit 0");
        let dirs = vec![
            a.path().to_path_buf(),
            b.path().to_path_buf(),
            c.path().to_path_buf(),
        ];
        assert_eq!(find_plugin("p", &dirs).unwrap(), good);
        let e = find_plugin("p", &dirs[..2]).unwrap_err();
        let ExecError::NotFound { skipped, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(
            skipped,
            &[
                (a.path().join("p"), Unusable::NotExecutable),
                (b.path().join("p"), Unusable::NotAFile)
            ]
        );
        let details = CniError::from(e).details;
        assert!(
            details.starts_with("p: no executable named \"p\" in "),
            "{details}"
        );
        assert!(
            details.ends_with(&format!(
                " ({}/p is not executable; {}/p is not a regular file)",
                a.path().display(),
                b.path().display()
            )),
            "{details}"
        );
        let e = CniError::from(find_plugin("p", &[]).unwrap_err());
        assert!(e.details.contains("CNI_PATH is empty"), "{e}");
    }

    #[test]
    fn under_chroot_dir_plugins_are_found_as_the_chrooted_plugin_sees_them() {
        let root = tempfile::tempdir().unwrap();
        let node = |rel: &str| root.path().join(rel);
        fs::create_dir_all(node("usr/lib/cni")).unwrap();
        fs::create_dir_all(node("opt/cni/bin")).unwrap();
        script(&node("usr/lib/cni"), "p", "exit 0");
        // An absolute symlink, as distributions link /opt/cni/bin: resolved
        // inside the root, as the chrooted process resolves it.
        std::os::unix::fs::symlink("/usr/lib/cni/p", node("opt/cni/bin/p")).unwrap();
        let site = ExecSite {
            root: Some(root.path().to_path_buf()),
            ..ExecSite::default()
        };
        let dirs = [PathBuf::from("/opt/cni/bin")];
        assert_eq!(site.find("p", &dirs).unwrap(), Path::new("/opt/cni/bin/p"));
        // This process's /opt/cni/bin is not the node's.
        let e = site.find("sh", &[PathBuf::from("/bin")]).unwrap_err();
        assert!(
            matches!(&e, ExecError::NotFound { root: Some(r), .. } if r == root.path()),
            "{e:?}"
        );
    }

    #[test]
    fn the_passed_namespace_is_given_by_its_alias_and_others_as_they_are() {
        let site = ExecSite {
            netns_alias: Some(("/var/run/netns/cni-1".into(), "/proc/7/fd/9".into())),
            ..ExecSite::default()
        };
        let given = Path::new("/var/run/netns/cni-1");
        assert_eq!(site.netns(Some(given)), Path::new("/proc/7/fd/9"));
        let other = Path::new("/var/run/netns/cni-2");
        assert_eq!(site.netns(Some(other)), other);
        assert_eq!(site.netns(None), Path::new(""));
    }

    #[test]
    fn type_cannot_escape_the_path() {
        // cni-SPEC §1 `type`: a binary name, never a path.
        let d = tempfile::tempdir().unwrap();
        script(d.path(), "evil", "exit 0");
        let sub = d.path().join("sub");
        fs::create_dir(&sub).unwrap();
        for bad in ["../evil", "/bin/sh", "..", "a\\b"] {
            let e = find_plugin(bad, std::slice::from_ref(&sub)).unwrap_err();
            assert!(matches!(e, ExecError::PluginType(_)), "{bad}: {e:?}");
            assert!(matches!(
                ExecPlugin::new(bad, DEFAULT_PLUGIN_TIMEOUT),
                Err(ExecError::PluginType(_))
            ));
        }
    }

    #[test]
    fn add_parses_the_result_in_the_request_version() {
        let d = tempfile::tempdir().unwrap();
        // Answers in 1.1.0 to a 1.0.0 request; libcni converts, so do we.
        script(
            d.path(),
            "p",
            r#"cat >/dev/null; echo '{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.2/24"}]}'"#,
        );
        let p = ExecPlugin::new("p", DEFAULT_PLUGIN_TIMEOUT).unwrap();
        let req = request(CniCommand::Add, vec![d.path().into()], conf("p"));
        let r = p.add(&req).unwrap();
        assert_eq!(r.cni_version, Some(CniVersion::V1_0_0));
        assert_eq!(r.ips[0].address.to_string(), "10.0.0.2/24");
        // No cniVersion in the result: the request's is assumed.
        script(d.path(), "q", r#"echo '{"ip4":{"ip":"10.0.0.3/24"}}'"#);
        let p = ExecPlugin::new("q", DEFAULT_PLUGIN_TIMEOUT).unwrap();
        let mut c = conf("q");
        c["cniVersion"] = json!("0.2.0");
        let req = request(CniCommand::Add, vec![d.path().into()], c);
        let r = p.add(&req).unwrap();
        assert_eq!(r.ips[0].address.to_string(), "10.0.0.3/24");
    }

    #[test]
    fn error_results_pass_through_with_the_type() {
        // cni-SPEC §5 "Error": code, msg, details kept.
        let d = tempfile::tempdir().unwrap();
        script(
            d.path(),
            "p",
            r#"echo '{"cniVersion":"1.0.0","code":11,"msg":"busy","details":"lock held"}'; exit 1"#,
        );
        let p = ExecPlugin::new("p", DEFAULT_PLUGIN_TIMEOUT).unwrap();
        let req = request(CniCommand::Del, vec![d.path().into()], conf("p"));
        assert!(matches!(
            p.invoke(&req).unwrap_err(),
            ExecError::Replied { code: 11, ref details, .. } if details == "lock held"
        ));
        // The wire: the reply's code, msg and details, the details naming the type.
        let e = p.del(&req).unwrap_err();
        assert_eq!(
            e,
            CniError::new(ErrorCode::TryAgainLater, "busy", "p: lock held")
        );
        script(
            d.path(),
            "q",
            r#"echo '{"code":107,"msg":"no details"}'; exit 2"#,
        );
        let q = ExecPlugin::new("q", DEFAULT_PLUGIN_TIMEOUT).unwrap();
        let e = q.check(&req).unwrap_err();
        assert_eq!(
            e,
            CniError::new(ErrorCode::Plugin(107), "no details", "q: no details")
        );
    }

    #[test]
    fn failure_without_error_json_carries_stderr() {
        let d = tempfile::tempdir().unwrap();
        script(
            d.path(),
            "p",
            "echo 'half a line' ; echo 'boom: no such device' >&2; exit 3",
        );
        let p = ExecPlugin::new("p", DEFAULT_PLUGIN_TIMEOUT).unwrap();
        let req = request(CniCommand::Add, vec![d.path().into()], conf("p"));
        let e = p.invoke(&req).unwrap_err();
        assert!(
            matches!(&e, ExecError::Exited { status: 3, printed, .. }
                if printed.stderr == "boom: no such device" && printed.stdout == "half a line"),
            "{e:?}"
        );
        assert_eq!(
            CniError::from(e).details,
            "p: exited with status 3; stderr: boom: no such device; \
             stdout is not a CNI error: half a line"
        );
        script(d.path(), "k", "kill -9 $$");
        let k = ExecPlugin::new("k", DEFAULT_PLUGIN_TIMEOUT).unwrap();
        let e = k.invoke(&req).unwrap_err();
        assert!(matches!(e, ExecError::Killed { signal: 9, .. }), "{e:?}");
        assert_eq!(CniError::from(e).details, "k: killed by signal 9");
    }

    #[test]
    fn garbage_and_empty_results_are_decode_errors() {
        let d = tempfile::tempdir().unwrap();
        script(d.path(), "g", "echo 'hello, I am not JSON'");
        script(d.path(), "e", "exit 0");
        script(
            d.path(),
            "b",
            r#"echo '{"cniVersion":"1.0.0","ips":[{"address":"nope"}]}'"#,
        );
        let dirs = vec![d.path().to_path_buf()];
        let run = |t: &str| {
            let p = ExecPlugin::new(t, DEFAULT_PLUGIN_TIMEOUT).unwrap();
            let req = request(CniCommand::Add, dirs.clone(), conf(t));
            let stdout = p.invoke(&req).unwrap();
            p.parse_result(&stdout, &req).unwrap_err()
        };
        let e = run("g");
        assert!(
            matches!(&e, ExecError::NotJson { stdout, .. } if stdout == "hello, I am not JSON"),
            "{e:?}"
        );
        assert!(matches!(run("e"), ExecError::NoResult { .. }));
        let e = run("b");
        assert!(
            matches!(&e, ExecError::BadResult { error, .. } if error.details.starts_with("ips[0].address")),
            "{e:?}"
        );
        assert!(CniError::from(e)
            .details
            .starts_with("b: result.ips[0].address"));
        // DEL ignores stdout, as libcni does.
        let p = ExecPlugin::new("g", DEFAULT_PLUGIN_TIMEOUT).unwrap();
        assert_eq!(p.del(&request(CniCommand::Del, dirs, conf("g"))), Ok(()));
    }

    #[test]
    fn env_and_stdin_are_what_a_runtime_sends() {
        // cni-SPEC §2: all six CNI_* variables; inherited ones never leak.
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("log");
        script(
            d.path(),
            "p",
            &format!(
                "cat > {0}.stdin; env | grep -e '^CNI_' -e '^PATH=' | sort > {0}.env",
                log.display()
            ),
        );
        let p = ExecPlugin::new("p", DEFAULT_PLUGIN_TIMEOUT).unwrap();
        let mut c = conf("p");
        c["extra"] = json!({"k": [1, 2]});
        let mut req = request(
            CniCommand::Del,
            vec![d.path().into(), "/nonexistent".into()],
            c,
        );
        req.env.attachment_mut().unwrap().netns = None;
        req.env.attachment_mut().unwrap().args =
            crate::cni::args::CniArgs::parse("IgnoreUnknown=1;K8S_POD_NAME=web").unwrap();
        p.del(&req).unwrap();
        let env = fs::read_to_string(format!("{}.env", log.display())).unwrap();
        let lines: Vec<&str> = env.lines().filter(|l| l.starts_with("CNI_")).collect();
        assert_eq!(
            lines,
            [
                "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAME=web",
                "CNI_COMMAND=DEL",
                "CNI_CONTAINERID=ctr1",
                "CNI_IFNAME=eth0",
                "CNI_NETNS=",
                &format!("CNI_PATH={}:/nonexistent", d.path().display()),
            ]
        );
        assert!(env.lines().any(|l| l.starts_with("PATH=")), "{env}");
        let stdin: Map<String, Value> =
            serde_json::from_slice(&fs::read(format!("{}.stdin", log.display())).unwrap()).unwrap();
        assert_eq!(stdin, req.config);
    }

    #[test]
    fn timeout_kills_the_plugin_and_its_helpers() {
        let d = tempfile::tempdir().unwrap();
        let marker = d.path().join("survived");
        // The helper would write the marker after 2 s unless killed with
        // the plugin's process group.
        script(
            d.path(),
            "slow",
            &format!("(sleep 2; touch {}) & sleep 30", marker.display()),
        );
        let p = ExecPlugin::new("slow", Duration::from_millis(300)).unwrap();
        let start = Instant::now();
        let e = p
            .invoke(&request(
                CniCommand::Add,
                vec![d.path().into()],
                conf("slow"),
            ))
            .unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        assert!(
            matches!(e, ExecError::Timeout { command: CniCommand::Add, timeout, .. }
                if timeout == Duration::from_millis(300)),
            "{e:?}"
        );
        thread::sleep(Duration::from_millis(2500));
        assert!(!marker.exists(), "the helper outlived the timeout");
    }

    /// [`plexus_testkit::bound`]: a bound stated for the host, longer in the
    /// VM harness's emulated CPUs.
    fn bound(on_host: Duration) -> Duration {
        plexus_testkit::bound(on_host)
    }

    /// A plugin answering `{}` after `noise`, as `ExecPlugin` runs it where
    /// `sink` says; the call's outcome and how long it took.
    fn noisy_add(
        noise: &str,
        timeout: Duration,
        sink: StderrSink,
    ) -> (Result<CniResult, ExecError>, Duration) {
        let d = tempfile::tempdir().unwrap();
        script(
            d.path(),
            "noisy",
            &format!("{noise}\necho '{{\"cniVersion\":\"1.0.0\"}}'"),
        );
        let site = Arc::new(ExecSite {
            stderr: sink,
            ..ExecSite::default()
        });
        let p = ExecPlugin::new("noisy", timeout).unwrap().at(site);
        let req = request(CniCommand::Add, vec![d.path().into()], conf("noisy"));
        let started = Instant::now();
        let answer = crate::cni::skel::TypedPlugin::add(&p, &req);
        (answer, started.elapsed())
    }

    #[test]
    fn a_plugin_logging_while_the_caller_holds_stderr_answers_at_once() {
        // Issue 36: a thin call held stderr's lock across its plugins, and
        // the copy of a plugin's stderr waited for it until the deadline.
        let held = std::io::stderr().lock();
        let (answer, took) = noisy_add(
            "echo hello-from-ipam >&2",
            Duration::from_secs(20),
            StderrSink::Passthrough,
        );
        drop(held);
        answer.unwrap();
        assert!(took < bound(Duration::from_secs(2)), "{took:?}");
    }

    #[test]
    fn megabytes_of_stderr_are_drained_and_their_tail_kept() {
        let noise =
            "head -c 3000000 /dev/zero | tr '\\0' x >&2; echo >&2; echo last-words >&2; exit 4";
        let (answer, took) = noisy_add(noise, Duration::from_secs(20), StderrSink::Log);
        assert!(took < bound(Duration::from_secs(5)), "{took:?}");
        let Err(ExecError::Exited { printed, .. }) = answer else {
            panic!("{answer:?}")
        };
        assert!(
            printed.stderr.ends_with("xxx\nlast-words"),
            "{}",
            printed.stderr
        );
        assert!(printed.stderr.len() <= stderr::STDERR_TAIL);
    }

    #[test]
    fn stderr_after_stdout_closed_is_kept() {
        let noise = "exec 1>&-; sleep 0.1; echo after-stdout >&2; exit 2";
        let (answer, _) = noisy_add(noise, Duration::from_secs(20), StderrSink::Log);
        let Err(ExecError::Exited { printed, .. }) = answer else {
            panic!("{answer:?}")
        };
        assert_eq!(printed.stderr, "after-stdout");
    }

    #[test]
    fn a_helper_holding_stderr_past_the_plugins_exit_does_not_hold_the_call() {
        // The helper keeps stderr (not stdout) open for 10 s.
        let noise = "(exec >/dev/null; echo helper-started >&2; sleep 10) & sleep 0.1";
        let (answer, took) = noisy_add(noise, Duration::from_secs(20), StderrSink::Log);
        answer.unwrap();
        assert!(took < bound(Duration::from_secs(2)), "{took:?}");
    }

    #[test]
    fn a_helper_holding_stdout_past_the_plugins_exit_does_not_hold_the_call() {
        // libcni would wait for the helper here (Go's Cmd.Wait waits for
        // its copy of stdout); the result was complete when the plugin exited.
        let (answer, took) = noisy_add("(sleep 10) &", Duration::from_secs(20), StderrSink::Log);
        answer.unwrap();
        assert!(took < bound(Duration::from_secs(2)), "{took:?}");
    }

    #[test]
    fn a_plugin_that_logs_then_hangs_is_killed_at_the_deadline_with_its_words() {
        let (answer, took) = noisy_add(
            "echo about-to-hang >&2; exec sleep 30",
            Duration::from_millis(500),
            StderrSink::Log,
        );
        assert!(took < bound(Duration::from_secs(2)), "{took:?}");
        let Err(e @ ExecError::Timeout { .. }) = answer else {
            panic!("{answer:?}")
        };
        assert!(CniError::from(e)
            .details
            .ends_with("and was killed; stderr: about-to-hang"),);
    }

    #[test]
    fn large_stdin_and_stdout_do_not_deadlock() {
        let d = tempfile::tempdir().unwrap();
        // Writes a large result before reading stdin: both pipes full at once.
        script(
            d.path(),
            "p",
            r#"printf '{"cniVersion":"1.0.0","dns":{"search":["'; head -c 300000 /dev/zero | tr '\0' 'a'; printf '"]}}'; cat >/dev/null"#,
        );
        let p = ExecPlugin::new("p", Duration::from_secs(20)).unwrap();
        let mut c = conf("p");
        c["big"] = json!("b".repeat(400_000));
        let r = p
            .add(&request(CniCommand::Add, vec![d.path().into()], c))
            .unwrap();
        assert_eq!(r.dns.search[0].len(), 300_000);
    }
}
