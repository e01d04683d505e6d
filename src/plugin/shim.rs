//! The shim: plexus as the runtime execs it, on a node whose conf names a
//! daemon (`daemonSocket`). It forwards the call as it came (variables and
//! stdin) and hands back what the daemon answers, errors of DEL included:
//! Multus's shim reports success for every DEL, hiding leaks. When nothing
//! listens on the socket it runs the call itself (`daemonFallback: thin`,
//! the default: DEL in particular needs no daemon, only plexus's record) or
//! fails with code 11 (`fail`). Every wait is bounded by `daemonTimeout`.
//!
//! The shim runs on the node, in the runtime's view of it, so it opens
//! `CNI_NETNS` itself and passes the descriptor with the request: the
//! daemon's container need not see the path (containerd's
//! `/var/run/netns/cni-…`, CRI-O's, podman's, a rootless one under
//! `/run/user`, `/proc/PID/ns/net`).

use std::collections::BTreeMap;
use std::io::{self, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use plexus_dataplane::NetNs;

use super::PlexusPlugin;
use crate::cni::call_log::CallLog;
use crate::cni::env::{CniCommand, CNI_NETNS};
use crate::cni::error::{CniError, ErrorCode};
use crate::cni::skel::{self, MAX_STDIN};
use crate::config::{DaemonClient, DaemonFallback, PlexusConf};
use crate::logging::LogSettings;
use crate::phases;

use super::wire::{self, ShimRequest, ShimResponse};
use crate::sandbox_dir::{self, Sandbox, SandboxDir};

/// Why a forwarded call got no answer.
#[derive(Debug)]
pub enum ShimError {
    /// Nothing was sent: no daemon listens (so running the call here
    /// instead cannot do anything twice).
    Unreachable(io::Error),
    /// The call was sent and no whole answer came: the daemon stopped or
    /// timed out mid-call. Running it here too could do it twice.
    NoAnswer(io::Error),
}

/// Forward `request` to the daemon of `daemon`, with the pod's namespace
/// when the shim could open it, and wait for the answer.
pub fn forward(
    daemon: &DaemonClient,
    request: &ShimRequest,
    netns: Option<&NetNs>,
) -> Result<ShimResponse, ShimError> {
    let stream = UnixStream::connect(&daemon.socket).map_err(ShimError::Unreachable)?;
    let answered = (|| {
        stream.set_read_timeout(Some(daemon.timeout))?;
        stream.set_write_timeout(Some(daemon.timeout))?;
        match netns {
            Some(ns) => wire::send_with_fd(&stream, request, ns.as_fd())?,
            None => wire::send(&mut &stream, request)?,
        }
        wire::receive(&mut BufReader::new(&stream))
    })();
    answered.map_err(ShimError::NoAnswer)
}

/// Run the call this process was exec'd for; the exit code.
pub fn run() -> i32 {
    let mut stdin = Vec::new();
    let read = io::stdin()
        .lock()
        .take(MAX_STDIN + 1)
        .read_to_end(&mut stdin);
    let conf = read.is_ok().then(|| parsed_conf(&stdin)).flatten();
    phases::mark("stdin and conf");
    // Without a configuration, the default sinks (stderr) report why.
    let defaults = LogSettings::default();
    crate::logging::init_call(conf.as_ref().map_or(&defaults, |c| &c.logging));
    phases::mark("logging");
    if read.is_err() {
        // The in-process run reads nothing more and reports it.
        return in_process(&stdin, None);
    }
    let Some((daemon, version)) = conf
        .as_ref()
        .and_then(|c| Some((c.daemon.clone()?, c.cni_version.clone())))
    else {
        return in_process(&stdin, conf);
    };
    let Some(request) = request(stdin.clone()) else {
        return in_process(&stdin, conf);
    };
    match forward(&daemon, &request, pod_netns().as_ref()) {
        Ok(answer) => {
            let _ = io::stdout().lock().write_all(answer.stdout.as_bytes());
            let _ = io::stderr().lock().write_all(answer.stderr.as_bytes());
            answer.exit_code
        }
        Err(ShimError::Unreachable(e)) if daemon.fallback == DaemonFallback::Thin => {
            let network = conf.as_ref().map(|c| c.name.as_str());
            CallLog::from_vars(|key| std::env::var(key).ok(), network).warn(format_args!(
                "no daemon at {} ({e}): running the call in this process \
                 (daemonFallback: thin)",
                daemon.socket.display()
            ));
            in_process(&stdin, conf)
        }
        Err(ShimError::Unreachable(e)) => fail(
            &version,
            format!(
                "no daemon at {} ({e}), and daemonFallback is \"fail\"",
                daemon.socket.display()
            ),
        ),
        Err(ShimError::NoAnswer(e)) => fail(
            &version,
            format!(
                "the daemon at {} gave no answer ({e}; daemonTimeout {:?}): the call may be \
                 half done, so it is not run again here; the runtime retries it",
                daemon.socket.display(),
                daemon.timeout
            ),
        ),
    }
}

/// The configuration on stdin, which says whether a daemon takes the call
/// (`daemonSocket`); `None` for VERSION, or for one that does not parse (the
/// in-process run reports it).
fn parsed_conf(stdin: &[u8]) -> Option<PlexusConf> {
    let command = std::env::var("CNI_COMMAND").ok()?;
    if command.parse::<CniCommand>().ok()? == CniCommand::Version {
        return None;
    }
    PlexusConf::from_slice(stdin).ok()
}

/// `CNI_NETNS` opened here, on the node; `None` when unset, gone or not a
/// namespace: the daemon then looks at the path itself and says why, as an
/// in-process call does (a DEL without its namespace succeeds).
fn pod_netns() -> Option<NetNs> {
    let path = std::env::var_os(CNI_NETNS).filter(|p| !p.is_empty())?;
    NetNs::open(PathBuf::from(path)).ok()
}

/// The call as the daemon gets it; `None` when a variable is not UTF-8
/// (the in-process run reports it).
fn request(stdin: Vec<u8>) -> Option<ShimRequest> {
    let mut env = BTreeMap::new();
    for (key, value) in std::env::vars_os() {
        let key = key.into_string().ok()?;
        if key.starts_with("CNI_") {
            env.insert(key, value.into_string().ok()?);
        }
    }
    Some(ShimRequest {
        env,
        stdin: String::from_utf8(stdin).ok()?,
    })
}

/// The call run here; `conf` is stdin's configuration when already parsed.
/// A call naming a sandbox holds the node's lock of it, which the daemon's
/// hot-plug of it holds too ([`SandboxDir`]); a pod ADDed here is noted for
/// the daemon's hot-plug, and the note leaves with its DEL.
fn in_process(stdin: &[u8], conf: Option<PlexusConf>) -> i32 {
    let sandbox = sandbox_dir::named_by(|key| std::env::var_os(key));
    let (Some(conf), Some((command, container_id))) = (conf.as_ref(), sandbox) else {
        return run_here(stdin, conf);
    };
    let dir = SandboxDir::in_cni_dir(&conf.cni_dir);
    let held = match dir.lock(&container_id) {
        Ok(held) => {
            phases::mark("sandbox lock");
            held
        }
        Err(e) => {
            return skel::report_error(
                &e.into(),
                &conf.cni_version,
                &mut io::stdout().lock(),
                &mut io::stderr().lock(),
            )
        }
    };
    let code = run_here(stdin, Some(conf.clone()));
    phases::mark("result");
    match command {
        CniCommand::Add if code == 0 => {
            // The conf parsed once already: only its JSON is needed again.
            let noted = request(stdin.to_vec())
                .zip(serde_json::from_slice(stdin).ok())
                .and_then(|(r, given)| Sandbox::of_parsed_call(&r.env, given, conf))
                .map(|sandbox| dir.note(&sandbox));
            if let Some(Err(error)) = noted {
                CallLog::from_vars(|key| std::env::var(key).ok(), Some(&conf.name)).warn(
                    format_args!("sandbox not noted: the daemon will not hot-plug it: {error}"),
                );
            }
        }
        CniCommand::Del => dir.forget(&container_id),
        _ => {}
    }
    phases::mark("sandbox note");
    held.release(false);
    phases::mark("sandbox lock");
    code
}

/// Not through stdout's and stderr's locks: held across the call, they
/// would stop anything else writing there until it ends (a log sink, an
/// exec'd plugin's stderr).
fn run_here(stdin: &[u8], conf: Option<PlexusConf>) -> i32 {
    skel::run(
        &PlexusPlugin::thin(conf),
        |key| std::env::var_os(key),
        &mut &stdin[..],
        &mut io::stdout(),
        &mut io::stderr(),
    )
}

/// Code 11 (try again later), printed as a plugin prints its errors.
fn fail(version: &str, details: String) -> i32 {
    let e = CniError::new(
        ErrorCode::TryAgainLater,
        "plexus daemon unavailable",
        details,
    );
    skel::report_error(
        &e,
        version,
        &mut io::stdout().lock(),
        &mut io::stderr().lock(),
    )
}
