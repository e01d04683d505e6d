//! A real kube-apiserver for the Kubernetes tests, and a way to reach it
//! from a test's node namespace.
//!
//! [`api`] gives the API server of this test run: the one `./test-all`
//! started for the whole run (`PLEXUS_KUBE_DIR`), else one this test binary
//! starts on first use with `testkit/kube-up`, which stops it when the binary
//! exits. Tests share it, each in Kubernetes namespaces of its own.
//!
//! A node namespace cannot reach the machine's 127.0.0.1, so [`Relay`]
//! listens on `127.0.0.1:<port>` inside it and connects out to the real
//! server: TLS stays end to end, the certificate for 127.0.0.1 verifies, and
//! stopping the relay is an unreachable API server ("connection refused").

use std::fs::File;
use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sched::{setns, CloneFlags};

use crate::process::stdout_ok;

/// A NetworkAttachmentDefinition named `name`, with `annotations`, whose
/// `spec.config` is `config` (multi-net spec §3.2), as a manifest for
/// `kubectl apply`: JSON, which kubectl reads as YAML.
pub fn nad_manifest(
    name: &str,
    annotations: &[(&str, &str)],
    config: &serde_json::Value,
) -> String {
    let annotations: serde_json::Map<String, serde_json::Value> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
        .collect();
    serde_json::json!({
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"config": config.to_string()},
    })
    .to_string()
}

/// Runs `kubectl` (`cmd`, with its options) with `args` and `stdin`, for 60 s
/// at most.
pub(crate) fn run_kubectl(cmd: Command, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut child = Command::new("timeout")
        .arg("60")
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    let mut input = child.stdin.take().expect("piped");
    if let Some(text) = stdin {
        let _ = input.write_all(text.as_bytes());
    }
    drop(input);
    child.wait_with_output().expect("kubectl finishes")
}

/// `out`'s stdout; panics with its stderr when kubectl `args` failed.
pub(crate) fn succeeded(out: Output, args: &[&str]) -> String {
    stdout_ok(out, format_args!("kubectl {args:?}"))
}

/// Panics with kubectl's stderr when `kubectl apply` of `manifest` failed.
pub(crate) fn applied(out: Output, manifest: &str) {
    assert!(
        out.status.success(),
        "kubectl apply: {}\n{manifest}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A name for a test's own Kubernetes namespace, `<prefix>-<pid>-<n>`.
pub(crate) fn namespace_name(prefix: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The running API server.
#[derive(Debug)]
pub struct KubeApi {
    /// What `kube-up` wrote: certificates, kubeconfigs, logs, `audit.log`.
    pub dir: PathBuf,
    /// The port of `https://127.0.0.1:<port>`, the address in the kubeconfigs.
    pub port: u16,
}

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit lives in the workspace")
        .to_path_buf()
}

/// Why the API server cannot run here, or `None`.
pub(crate) fn missing() -> Option<std::borrow::Cow<'static, str>> {
    if crate::in_vm() {
        return Some("the VM runs no API server (the host suite does)".into());
    }
    missing_binaries()
}

/// What is missing to start the API server here, VM or not.
pub(crate) fn missing_binaries() -> Option<std::borrow::Cow<'static, str>> {
    if let Some(dir) = std::env::var_os("PLEXUS_KUBE_DIR") {
        if Path::new(&dir).join("env").is_file() {
            return None;
        }
    }
    for tool in ["etcd", "openssl", "kubectl", "curl", "python3"] {
        if !crate::on_path(tool) {
            return Some(format!("{tool} is missing (run .ci/install-deps unit)").into());
        }
    }
    let path = Command::new(repo().join(".ci/kube-apiserver"))
        .arg("--path")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    match path {
        Some(p) if p.is_file() => None,
        Some(p) => Some(
            format!(
                "no kube-apiserver at {} (build it with .ci/kube-apiserver)",
                p.display()
            )
            .into(),
        ),
        None => Some(".ci/kube-apiserver --path failed".into()),
    }
}

/// The entries of a network-status annotation (multi-net-spec §5) as
/// `(name, interface)`; none when it does not parse.
pub fn status_entries(text: &str) -> Vec<(String, String)> {
    let list: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    list.as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let field = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (field("name"), field("interface"))
        })
        .collect()
}

/// The API server of this run, started on first use. Call it after
/// `require(&[Feature::KubeApiServer])`; a server that fails to start fails
/// the test with `kube-up`'s reason.
pub fn api() -> &'static KubeApi {
    static API: OnceLock<Result<KubeApi, String>> = OnceLock::new();
    started_once(&API, start, "the test API server")
}

fn start() -> Result<KubeApi, String> {
    let dir = match std::env::var_os("PLEXUS_KUBE_DIR") {
        Some(dir) if Path::new(&dir).join("env").is_file() => PathBuf::from(dir),
        _ => started_by("kube-up", &[])?,
    };
    let port = env_value(&dir, "KUBE_PORT")?;
    Ok(KubeApi {
        port: port.parse().map_err(|e| format!("KUBE_PORT: {e}"))?,
        dir,
    })
}

/// What `start` starts, on first use, kept in `cell` for every test of the
/// binary; a start that failed fails each test that needs it, naming `what`.
pub(crate) fn started_once<T>(
    cell: &'static OnceLock<Result<T, String>>,
    start: fn() -> Result<T, String>,
    what: &str,
) -> &'static T {
    cell.get_or_init(start)
        .as_ref()
        .unwrap_or_else(|e| panic!("{what} did not start: {e}"))
}

/// Runs `testkit/<script> --owner <this process> <args> <dir>` (kube-up
/// or node-up) and returns the directory it describes its service in.
pub(crate) fn started_by(script: &str, args: &[&str]) -> Result<PathBuf, String> {
    let name = script.trim_end_matches("-up");
    started_in(
        script,
        &format!("plexus-{name}-{}", std::process::id()),
        args,
    )
}

/// Runs `testkit/<script>` with `args` into the temporary directory `name`.
fn started_in(script: &str, name: &str, args: &[&str]) -> Result<PathBuf, String> {
    // Not removed at exit: the script's reaper stops the processes when this
    // one is gone, and the logs stay for a failing test to point at.
    let dir = std::env::temp_dir().join(name);
    let out = Command::new(repo().join("testkit").join(script))
        .arg("--owner")
        .arg(std::process::id().to_string())
        .args(args)
        .arg(&dir)
        .output()
        .map_err(|e| format!("testkit/{script}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "testkit/{script} failed: {} (logs: {}/*.log)",
            String::from_utf8_lossy(&out.stderr),
            dir.display()
        ));
    }
    Ok(dir)
}

/// `key`'s value in `dir/env`, the shell-syntax file kube-up and node-up write.
pub(crate) fn env_value(dir: &Path, key: &str) -> Result<String, String> {
    let path = dir.join("env");
    let env = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    env.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
        .ok_or_else(|| format!("{}: no {key}", path.display()))
}

/// An API server of the calling test's own (its own etcd too), for a test
/// that stops it ([`KubeApi::restart`]) and so cannot share the run's;
/// `tag` names it among this binary's. It stops when the binary exits.
pub fn private_api(tag: &str) -> KubeApi {
    let name = format!("plexus-kube-{tag}-{}", std::process::id());
    let dir = started_in("kube-up", &name, &[]).unwrap_or_else(|e| panic!("{e}"));
    let port = env_value(&dir, "KUBE_PORT").unwrap_or_else(|e| panic!("{e}"));
    KubeApi {
        port: port.parse().expect("KUBE_PORT is a port"),
        dir,
    }
}

impl KubeApi {
    /// Kills the API server (SIGKILL: requests in flight get no answer),
    /// leaves it down for `down`, and starts it again on the same etcd;
    /// returns once it is ready. Only for a [`private_api`].
    pub fn restart(&self, down: Duration) {
        let out = Command::new(self.dir.join("restart-apiserver"))
            .arg(format!("{:.1}", down.as_secs_f64()))
            .stdin(std::process::Stdio::null())
            .output()
            .expect("restart-apiserver runs");
        stdout_ok(
            out,
            format_args!("{}/restart-apiserver", self.dir.display()),
        );
    }

    /// The admin's kubeconfig (system:masters).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// plexus's kubeconfig: its service account's token, bound by
    /// `deploy/rbac.yaml` only.
    pub fn plexus_kubeconfig(&self) -> PathBuf {
        self.dir.join("plexus.kubeconfig")
    }

    /// The same identity as [`KubeApi::plexus_kubeconfig`], by a client
    /// certificate the API server's client CA signed.
    pub fn plexus_cert_kubeconfig(&self) -> PathBuf {
        self.dir.join("plexus-cert.kubeconfig")
    }

    /// `kubectl` as the admin, bounded; panics with its stderr on failure.
    pub fn kubectl(&self, args: &[&str]) -> String {
        succeeded(self.kubectl_output(args, None), args)
    }

    /// `kubectl apply -f -` of `manifest` as the admin.
    pub fn apply(&self, manifest: &str) {
        applied(
            self.kubectl_output(&["apply", "-f", "-"], Some(manifest)),
            manifest,
        );
    }

    /// `kubectl create -f -` of `manifest` as the admin (new objects: no
    /// read before each write, as apply makes).
    pub fn create(&self, manifest: &str) {
        applied(
            self.kubectl_output(&["create", "-f", "-"], Some(manifest)),
            manifest,
        );
    }

    /// `kubectl` as the admin, bounded, whatever its outcome.
    pub fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig").arg(self.admin_kubeconfig());
        run_kubectl(cmd, args, stdin)
    }

    /// A fresh Kubernetes namespace for one test, `<prefix>-<pid>-<n>`.
    pub fn namespace(&self, prefix: &str) -> String {
        let name = namespace_name(prefix);
        self.kubectl(&["create", "namespace", &name]);
        name
    }

    /// The plexus identity's requests the API server logged so far (its
    /// audit log, Metadata level): `(verb, resource, subresource, namespace,
    /// name)` each.
    pub fn audited(&self) -> Vec<AuditedRequest> {
        let text = std::fs::read_to_string(self.dir.join("audit.log")).unwrap_or_default();
        text.lines().filter_map(audit_line::request).collect()
    }
}

/// One request as the API server's audit log has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditedRequest {
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub stage: String,
    /// The request's path and query, as the audit log writes it (JSON
    /// escapes: `&` is `\u0026`).
    pub uri: String,
    /// The client's `User-Agent`, to tell clients with one identity apart.
    pub user_agent: String,
}

/// Just enough JSON reading for audit lines, so the testkit needs no JSON
/// dependency: the string values of `objectRef` and of `verb`/`stage`.
mod audit_line {
    use super::AuditedRequest;

    fn string_after(line: &str, key: &str) -> String {
        let pat = format!("\"{key}\":\"");
        line.find(&pat)
            .map(|i| {
                let rest = &line[i + pat.len()..];
                rest[..rest.find('"').unwrap_or(rest.len())].to_string()
            })
            .unwrap_or_default()
    }

    pub(super) fn request(line: &str) -> Option<AuditedRequest> {
        let object = &line[line.find("\"objectRef\":{")?..];
        let object = &object[..object.find('}')?];
        Some(AuditedRequest {
            verb: string_after(line, "verb"),
            resource: string_after(object, "resource"),
            subresource: string_after(object, "subresource"),
            namespace: string_after(object, "namespace"),
            name: string_after(object, "name"),
            stage: string_after(line, "stage"),
            uri: string_after(line, "requestURI"),
            user_agent: string_after(line, "userAgent"),
        })
    }
}

/// A TCP relay from `127.0.0.1:<port>` inside a network namespace to the
/// same address in the namespace that created it. Stops on drop.
pub struct Relay {
    stop: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<JoinHandle<()>>,
}

impl Relay {
    /// Listen in the namespace at `netns` (its `lo` must be up).
    pub fn into_netns(netns: &Path, port: u16) -> io::Result<Relay> {
        let listener = listen_in(netns, port)?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let accept = {
            let (stop, open) = (stop.clone(), open.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // Woken at once by a connection, and every 50 ms to see
                    // whether to stop: a relay must add no latency of its own.
                    let mut pending = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
                    if !matches!(poll(&mut pending, PollTimeout::from(50u8)), Ok(n) if n > 0) {
                        continue;
                    }
                    match listener.accept() {
                        Ok((inside, _)) => {
                            let _ = inside.set_nonblocking(false);
                            if let Ok(outside) = TcpStream::connect(("127.0.0.1", port)) {
                                pipe(inside, outside, &open);
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(_) => std::thread::sleep(Duration::from_millis(50)),
                    }
                }
            })
        };
        Ok(Relay {
            stop,
            open,
            accept: Some(accept),
        })
    }

    /// Close the listener and every relayed connection: from inside the
    /// namespace the API server is unreachable (connection refused).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for s in self.open.lock().expect("not poisoned").drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Both directions of one relayed connection, each on a thread of its own
/// that ends when its side closes.
fn pipe(a: TcpStream, b: TcpStream, open: &Arc<Mutex<Vec<TcpStream>>>) {
    // Segments go on as they come: with Nagle, a relayed small write can
    // wait for a delayed ACK (40 ms) that a direct connection never sees.
    let _ = a.set_nodelay(true);
    let _ = b.set_nodelay(true);
    let mut held = open.lock().expect("not poisoned");
    for s in [&a, &b] {
        if let Ok(c) = s.try_clone() {
            held.push(c);
        }
    }
    drop(held);
    let copy = |mut from: TcpStream, mut to: TcpStream| {
        std::thread::spawn(move || {
            let _ = io::copy(&mut from, &mut to);
            let _ = to.shutdown(Shutdown::Write);
        })
    };
    if let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) {
        copy(a, b2);
        copy(b, a2);
    }
}

/// A listener bound inside `netns`: the socket keeps the namespace it was
/// made in, so only the bind needs a thread there, briefly.
fn listen_in(netns: &Path, port: u16) -> io::Result<TcpListener> {
    let target = File::open(netns)?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // A thread of its own: it ends in the namespace it switched to.
            setns(&target, CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match TcpListener::bind(("127.0.0.1", port)) {
                    Ok(l) => return Ok(l),
                    // A relay of an earlier test may still be closing.
                    Err(e) if e.kind() == io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    Err(e) => return Err(e),
                }
            }
        })
        .join()
        .expect("the bind thread does not panic")
    })
}
