//! Helpers shared by the IPAM integration tests: requests as a runtime would
//! build them, the network directory's files, and exec of plugin binaries
//! (plexus's own and the reference ones) the way a runtime execs them.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use plexus_cni::env::CniEnv;
use plexus_cni::names::{ContainerId, IfName};
use plexus_cni::result::CniResult;
use plexus_cni::skel::{Plugin, Request, ValidAttachment};
use plexus_cni::{CniError, CniVersion, ErrorCode};
use serde_json::{json, Map, Value};

pub const NET: &str = "testnet";
/// The reference host-local of Debian's containernetworking-plugins (v1.1.1).
pub const REFERENCE_HOST_LOCAL: &str = "/usr/lib/cni/host-local";
pub const REFERENCE_STATIC: &str = "/usr/lib/cni/static";

/// A network configuration of an upper plugin delegating to `ipam`
/// (cni-SPEC §4: the IPAM plugin gets the complete config).
pub fn conf(version: &str, ipam: Value) -> Value {
    json!({"cniVersion": version, "name": NET, "type": "bridge", "ipam": ipam})
}

/// host-local `ipam` with `dataDir` and the given extra keys.
pub fn host_local(data_dir: &Path, extra: Value) -> Value {
    let mut ipam = json!({"type": "host-local", "dataDir": data_dir.to_str().unwrap()});
    ipam.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    ipam
}

/// A host-local network (`conf(version, host_local(..))`) whose data
/// directory is a fresh temporary one, which lives as long as the guard.
pub fn host_local_net(version: &str, extra: Value) -> (tempfile::TempDir, Value) {
    let tmp = tempfile::tempdir().unwrap();
    let c = conf(version, host_local(tmp.path(), extra));
    (tmp, c)
}

/// Set `key` at the top level of a configuration.
pub fn with(mut config: Value, key: &str, value: Value) -> Value {
    config.as_object_mut().unwrap().insert(key.into(), value);
    config
}

fn env_vars(command: &str, id: &str, ifname: &str, args: &str) -> HashMap<String, String> {
    let mut m = HashMap::from([
        ("CNI_COMMAND".to_string(), command.to_string()),
        ("CNI_PATH".to_string(), "/usr/lib/cni".to_string()),
    ]);
    if matches!(command, "ADD" | "DEL" | "CHECK") {
        m.insert("CNI_CONTAINERID".into(), id.into());
        m.insert("CNI_NETNS".into(), format!("/var/run/netns/{id}"));
        m.insert("CNI_IFNAME".into(), ifname.into());
        if !args.is_empty() {
            m.insert("CNI_ARGS".into(), args.into());
        }
    }
    m
}

/// A request as the skel builds it from the environment and stdin.
pub fn request(
    command: &str,
    id: &str,
    ifname: &str,
    args: &str,
    config: &Value,
) -> Result<Request, CniError> {
    let vars = env_vars(command, id, ifname, args);
    let env = CniEnv::from_lookup(|k| vars.get(k).cloned())?;
    let Value::Object(map) = config.clone() else {
        panic!("config must be an object")
    };
    Request::from_config(env, map)
}

pub fn add(p: &dyn Plugin, config: &Value, id: &str, ifname: &str) -> Result<CniResult, CniError> {
    add_args(p, config, id, ifname, "")
}

pub fn add_args(
    p: &dyn Plugin,
    config: &Value,
    id: &str,
    ifname: &str,
    args: &str,
) -> Result<CniResult, CniError> {
    p.add(&request("ADD", id, ifname, args, config)?)
}

pub fn del(p: &dyn Plugin, config: &Value, id: &str, ifname: &str) -> Result<(), CniError> {
    p.del(&request("DEL", id, ifname, "", config)?)
}

pub fn check(p: &dyn Plugin, config: &Value, id: &str, ifname: &str) -> Result<(), CniError> {
    p.check(&request("CHECK", id, ifname, "", config)?)
}

pub fn gc(p: &dyn Plugin, config: &Value, valid: &[(&str, &str)]) -> Result<(), CniError> {
    let valid: Vec<ValidAttachment> = valid
        .iter()
        .map(|(c, i)| (ContainerId::new(*c).unwrap(), IfName::new(*i).unwrap()))
        .collect();
    p.gc(&request("GC", "", "", "", config)?, &valid)
}

pub fn status(p: &dyn Plugin, config: &Value) -> Result<(), CniError> {
    p.status(&request("STATUS", "", "", "", config)?)
}

/// The addresses of a result, as `ip/prefix`.
pub fn addrs(r: &CniResult) -> Vec<String> {
    r.ips.iter().map(|i| i.address.to_string()).collect()
}

/// The single address of a result, without prefix.
pub fn ip_of(r: &CniResult) -> String {
    assert_eq!(r.ips.len(), 1, "{r:?}");
    r.ips[0].address.ip().to_string()
}

/// Every file of the network directory with its content.
pub fn files(data_dir: &Path) -> BTreeMap<String, String> {
    let dir = data_dir.join(NET);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return BTreeMap::new();
    };
    entries
        .map(|e| {
            let e = e.unwrap();
            let content = std::fs::read(e.path()).unwrap_or_default();
            (
                e.file_name().to_string_lossy().into_owned(),
                String::from_utf8_lossy(&content).into_owned(),
            )
        })
        .collect()
}

/// The address files only: name → content.
pub fn allocations(data_dir: &Path) -> BTreeMap<String, String> {
    files(data_dir)
        .into_iter()
        .filter(|(name, _)| name.parse::<std::net::IpAddr>().is_ok())
        .collect()
}

/// host-local's range-exhausted error ([`plexus_ipam::codes::RANGE_EXHAUSTED`])
/// whose details start with `details_start`.
pub fn assert_exhausted(
    r: Result<impl std::fmt::Debug, CniError>,
    details_start: &str,
) -> CniError {
    assert_err(
        r,
        ErrorCode::Plugin(plexus_ipam::codes::RANGE_EXHAUSTED),
        details_start,
    )
}

/// The ADDs of containers `fill-0`, `fill-1`, ... (on `eth0`), in turn, get
/// `ips`; the next is refused as [`assert_exhausted`] says.
#[track_caller]
pub fn fills_in_order(p: &dyn Plugin, config: &Value, ips: &[&str], details_start: &str) {
    for (i, ip) in ips.iter().enumerate() {
        let r = add(p, config, &format!("fill-{i}"), "eth0").unwrap();
        assert_eq!(ip_of(&r), *ip, "fill-{i}");
    }
    let next = format!("fill-{}", ips.len());
    assert_exhausted(add(p, config, &next, "eth0"), details_start);
}

/// Assert an error's code and the start of its details.
#[track_caller]
pub fn assert_err(
    r: Result<impl std::fmt::Debug, CniError>,
    code: ErrorCode,
    details_start: &str,
) -> CniError {
    let e = r.expect_err("expected an error");
    assert_eq!(e.code, code, "{e:?}");
    assert!(
        e.details.starts_with(details_start),
        "details {:?} should start with {details_start:?}",
        e.details
    );
    e
}

/// The result as a plugin prints it in `version`.
pub fn printed(r: &CniResult, version: CniVersion) -> Value {
    r.to_value(version).unwrap()
}

// ---------------------------------------------------------------------------
// Exec, as a runtime does

/// The outcome of one exec'd plugin call.
#[derive(Debug)]
pub struct Exec {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Exec {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }

    #[track_caller]
    pub fn ok(&self) -> &Self {
        assert_eq!(self.code, 0, "{self:?}");
        self
    }

    /// The single address of an ADD result, without prefix.
    pub fn ip(&self) -> String {
        self.ok();
        let v = self.json();
        let ips = v["ips"].as_array().unwrap_or_else(|| panic!("{v}"));
        assert_eq!(ips.len(), 1, "{v}");
        ips[0]["address"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string()
    }
}

/// Start `bin` with the CNI environment for `command` and `config` on stdin.
pub fn spawn(
    bin: &Path,
    command: &str,
    id: &str,
    ifname: &str,
    args: &str,
    config: &Value,
) -> std::process::Child {
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .envs(env_vars(command, id, ifname, args))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    let bytes = serde_json::to_vec(config).unwrap();
    child.stdin.take().unwrap().write_all(&bytes).unwrap();
    child
}

pub fn finish(child: std::process::Child) -> Exec {
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().unwrap();
    Exec {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

pub fn exec(bin: &Path, command: &str, id: &str, ifname: &str, args: &str, config: &Value) -> Exec {
    finish(spawn(bin, command, id, ifname, args, config))
}

/// plexus's IPAM plugin binary (host-local under its own name).
pub fn plexus_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_plexus-ipam"))
}

/// The reference binary, or `None` with the test reported skipped (see
/// `plexus_testkit`).
pub fn reference(path: &str) -> Option<PathBuf> {
    plexus_testkit::require(&[plexus_testkit::Feature::ReferencePlugins])
        .then(|| PathBuf::from(path))
}

pub fn map(v: &Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

/// Hold the network's lock as another process would.
pub fn hold_lock(data_dir: &std::path::Path) -> nix::fcntl::Flock<std::fs::File> {
    let dir = data_dir.join(NET);
    std::fs::create_dir_all(&dir).unwrap();
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("lock"))
        .unwrap();
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .unwrap()
}
