//! The protocol driver a plugin binary runs (cni-SPEC §2, §5): read the
//! environment and stdin, validate them, call the plugin for the command, and
//! print the result or the error. Modelled on what libcni's `skel` does for Go
//! plugins, so runtimes see the same behaviour:
//! - VERSION answers without calling the plugin;
//! - CHECK needs a request version of 0.4.0 or later, GC and STATUS 1.1.0;
//! - `prevResult` is read in the request's version;
//! - top-level keys (`cniVersion`, `runtimeConfig`, ...) match
//!   case-insensitively, as Go plugins decode them ([`casefold::get`]);
//! - errors are printed as the error result of cni-SPEC §5 on stdout (plus one
//!   line on stderr) with exit code 1.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::call_log::CallLog;
use super::casefold;
use super::config::{wrong_type, WELL_KNOWN_CAPABILITIES};
use super::env::{self, CniCommand, CniEnv};
use super::error::{CniError, ErrorCode};
use super::names::{ContainerId, IfName};
use super::result::CniResult;
use super::version::CniVersion;

/// Stdin larger than this is refused (code 5): no configuration, even with a
/// large prevResult, comes near it.
pub const MAX_STDIN: u64 = 16 << 20;

/// The key of cni-SPEC §2 GC carrying the still-valid attachments.
pub const VALID_ATTACHMENTS: &str = "cni.dev/valid-attachments";

/// One invocation, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub env: CniEnv,
    /// The configuration from stdin, as sent.
    pub config: Map<String, Value>,
    /// `cniVersion` of the configuration (0.1.0 when absent).
    pub cni_version: CniVersion,
    pub name: Option<String>,
    pub plugin_type: Option<String>,
    /// `runtimeConfig` with the well-known capability keys in their canonical
    /// spelling (runtimes written in Go may send `PortMappings`); other keys
    /// and all values as sent. Empty when absent.
    pub runtime_config: Map<String, Value>,
    pub prev_result: Option<CniResult>,
}

/// The CNI operations (cni-SPEC §2) as an in-process trait: what plexus
/// itself, every built-in plugin (data plane, IPAM) and an exec'd external
/// plugin implement, so a chain mixes them freely. [`run`] does the stdin /
/// stdout protocol around one.
pub trait Plugin {
    /// Check the configuration without touching the system, so a chain can
    /// refuse a bad config before anything needs undoing.
    fn validate(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }
    fn add(&self, req: &Request) -> Result<CniResult, CniError>;
    fn del(&self, req: &Request) -> Result<(), CniError>;
    /// CHECK, GC and STATUS succeed doing nothing unless a plugin has
    /// something to check, collect or report, as in the reference skel
    /// (containernetworking/cni pkg/skel `checkVersionAndCall` with no
    /// function given).
    fn check(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }
    /// `valid`: the attachments still in use (cni-SPEC §2 GC).
    fn gc(&self, _req: &Request, _valid: &[ValidAttachment]) -> Result<(), CniError> {
        Ok(())
    }
    fn status(&self, _req: &Request) -> Result<(), CniError> {
        Ok(())
    }
}

/// A [`Plugin`] whose operations fail with its own error type (a layer's
/// error enum). Its [`Plugin`] impl converts each error into a
/// [`CniError`], so `From<Self::Error> for CniError` is the one place that
/// layer's CNI codes are chosen.
pub trait TypedPlugin {
    type Error: Into<CniError>;
    fn validate(&self, _req: &Request) -> Result<(), Self::Error> {
        Ok(())
    }
    fn add(&self, req: &Request) -> Result<CniResult, Self::Error>;
    fn del(&self, req: &Request) -> Result<(), Self::Error>;
    /// As [`Plugin::check`], [`Plugin::gc`] and [`Plugin::status`]: nothing
    /// to do unless the plugin says otherwise.
    fn check(&self, _req: &Request) -> Result<(), Self::Error> {
        Ok(())
    }
    fn gc(&self, _req: &Request, _valid: &[ValidAttachment]) -> Result<(), Self::Error> {
        Ok(())
    }
    fn status(&self, _req: &Request) -> Result<(), Self::Error> {
        Ok(())
    }
}

impl<T: TypedPlugin> Plugin for T {
    fn validate(&self, req: &Request) -> Result<(), CniError> {
        TypedPlugin::validate(self, req).map_err(Into::into)
    }
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        TypedPlugin::add(self, req).map_err(Into::into)
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        TypedPlugin::del(self, req).map_err(Into::into)
    }
    fn check(&self, req: &Request) -> Result<(), CniError> {
        TypedPlugin::check(self, req).map_err(Into::into)
    }
    fn gc(&self, req: &Request, valid: &[ValidAttachment]) -> Result<(), CniError> {
        TypedPlugin::gc(self, req, valid).map_err(Into::into)
    }
    fn status(&self, req: &Request) -> Result<(), CniError> {
        TypedPlugin::status(self, req).map_err(Into::into)
    }
}

/// Run one CNI invocation and return the process exit code.
pub fn run<V: Into<std::ffi::OsString>>(
    plugin: &dyn Plugin,
    lookup: impl Fn(&str) -> Option<V>,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> i32 {
    // cni-SPEC §5 "Error": the version in use, once the request names one.
    let mut version = CniVersion::LATEST;
    let mut network = None;
    let e = match drive(plugin, &lookup, stdin, &mut version, &mut network) {
        Ok(None) => return 0,
        Ok(Some(out)) => match write_json(stdout, &out) {
            Ok(()) => return 0,
            Err(e) => CniError::io("stdout", e),
        },
        Err(e) => e,
    };
    log_failure(&e, &lookup, network.as_deref());
    report_error(&e, version.as_str(), stdout, stderr)
}

/// The failure as an event for the log sinks, with as much of the call as
/// its variables say (even when they were what failed).
fn log_failure<V: Into<std::ffi::OsString>>(
    e: &CniError,
    lookup: impl Fn(&str) -> Option<V>,
    network: Option<&str>,
) {
    let var = |key: &str| lookup(key).and_then(|v| v.into().into_string().ok());
    let command = var(env::CNI_COMMAND).unwrap_or_default();
    CallLog::from_vars(var, network).failed(&command, e.code.as_u32(), e);
}

/// Print `e` as a plugin reports a failure: the error result of cni-SPEC §5
/// (in `cni_version`) on stdout, one line on stderr; the exit code, 1.
pub fn report_error(
    e: &CniError,
    cni_version: &str,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> i32 {
    // Best effort: if stdout is gone there is nobody left to tell but stderr.
    let _ = write_json(stdout, &e.to_json(cni_version));
    let line = format!("CNI error {}: {e}", e.code.as_u32()).replace(['\n', '\r'], " ");
    let _ = writeln!(stderr, "{line}");
    1
}

/// One write for the whole document: stdout is line-buffered, and a write
/// per line costs a system call per line.
fn write_json(w: &mut dyn Write, v: &Value) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(v)?;
    bytes.push(b'\n');
    w.write_all(&bytes)?;
    w.flush()
}

/// Everything but the printing: the JSON to print on success, if any.
fn drive<V: Into<std::ffi::OsString>>(
    plugin: &dyn Plugin,
    lookup: impl Fn(&str) -> Option<V>,
    stdin: &mut dyn Read,
    version: &mut CniVersion,
    network: &mut Option<String>,
) -> Result<Option<Value>, CniError> {
    let env = CniEnv::from_lookup(lookup)?;
    let mut bytes = Vec::new();
    stdin
        .take(MAX_STDIN + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CniError::io("stdin", e))?;
    if bytes.len() as u64 > MAX_STDIN {
        return Err(CniError::io(
            "stdin",
            format!("more than {MAX_STDIN} bytes"),
        ));
    }

    if env.command() == CniCommand::Version {
        return Ok(Some(version_output(&bytes)));
    }

    let (req, valid) = parse_request(env, &bytes, version)?;
    network.clone_from(&req.name);
    match req.env.command() {
        CniCommand::Add => {
            let result = plugin.add(&req)?;
            Ok(Some(result.to_value(req.cni_version)?))
        }
        CniCommand::Del => plugin.del(&req).map(|()| None),
        CniCommand::Check => plugin.check(&req).map(|()| None),
        CniCommand::Gc => plugin.gc(&req, &valid).map(|()| None),
        CniCommand::Status => plugin.status(&req).map(|()| None),
        CniCommand::Version => unreachable!("answered above"),
    }
}

/// cni-SPEC §5 "VERSION Success": echo the input's `cniVersion` (1.1.0 when
/// there is none to echo) and list every supported version.
fn version_output(stdin: &[u8]) -> Value {
    let echoed = serde_json::from_slice::<Value>(stdin)
        .ok()
        .and_then(|v| {
            casefold::get(v.as_object()?, "cniVersion")?
                .as_str()
                .map(str::to_string)
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| CniVersion::LATEST.to_string());
    json!({
        "cniVersion": echoed,
        "supportedVersions": CniVersion::supported_versions(),
    })
}

/// The oldest request version each command exists in (libcni's skel refuses
/// older ones with code 1).
fn minimum_version(command: CniCommand) -> CniVersion {
    match command {
        CniCommand::Check => CniVersion::V0_4_0,
        CniCommand::Gc | CniCommand::Status => CniVersion::V1_1_0,
        _ => CniVersion::V0_1_0,
    }
}

fn parse_request(
    env: CniEnv,
    bytes: &[u8],
    version_out: &mut CniVersion,
) -> Result<(Request, Vec<ValidAttachment>), CniError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(CniError::decode(
            "stdin",
            "empty: expected the network configuration as a JSON object",
        ));
    }
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| CniError::decode("stdin", e.to_string()))?;
    let Value::Object(config) = value else {
        return Err(wrong_type("network configuration", "a JSON object", &value));
    };
    // cni-SPEC §5 "Error": answer in the request's version once it is known.
    if let Some(Value::String(s)) = casefold::get(&config, "cniVersion") {
        if let Ok(v) = s.parse() {
            *version_out = v;
        }
    }
    let valid = if env.command() == CniCommand::Gc {
        valid_attachments(&config)?
    } else {
        Vec::new()
    };
    Ok((Request::from_config(env, config)?, valid))
}

impl Request {
    /// The call this request is, on the network its configuration names,
    /// for its warnings and errors.
    pub fn call_log(&self) -> CallLog {
        CallLog::of_env(&self.env, self.name.as_deref())
    }

    /// A request from a configuration object, validated as a plugin reads
    /// its stdin: what the executor uses to run a plugin in-process.
    pub fn from_config(env: CniEnv, config: Map<String, Value>) -> Result<Request, CniError> {
        // A missing cniVersion means 0.1.0, as libcni's version decoder says.
        let cni_version = match casefold::get(&config, "cniVersion") {
            None => CniVersion::V0_1_0,
            Some(Value::String(s)) if s.is_empty() => CniVersion::V0_1_0,
            Some(Value::String(s)) => CniVersion::parse_field(s, "cniVersion")?,
            Some(other) => return Err(wrong_type("cniVersion", "a string", other)),
        };
        let command = env.command();
        let minimum = minimum_version(command);
        if cni_version < minimum {
            return Err(CniError::incompatible_version(
                "cniVersion",
                format!(
                    "{command} needs CNI {minimum} or later, the configuration is {cni_version}"
                ),
            ));
        }

        let string_field = |key: &str| match casefold::get(&config, key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(wrong_type(key, "a string", other)),
        };
        let name = string_field("name")?;
        let plugin_type = string_field("type")?;

        let runtime_config = match casefold::get(&config, "runtimeConfig") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(rc)) => canonical_runtime_config(rc),
            Some(other) => return Err(wrong_type("runtimeConfig", "an object", other)),
        };

        let prev_result = match casefold::get(&config, "prevResult") {
            None | Some(Value::Null) => None,
            Some(v) if !v.is_object() => return Err(wrong_type("prevResult", "a JSON object", v)),
            Some(v) => Some(CniResult::from_value_as(v, cni_version).map_err(|e| {
                // A bad prevResult is a bad configuration (code 7); a version
                // problem keeps its code.
                let e = e.within("prevResult");
                match e.code {
                    ErrorCode::Decode => CniError::new(
                        ErrorCode::InvalidConfig,
                        "invalid network configuration",
                        e.details,
                    ),
                    _ => e,
                }
            })?),
        };

        Ok(Request {
            env,
            config,
            cni_version,
            name,
            plugin_type,
            runtime_config,
            prev_result,
        })
    }
}

/// Rename keys that fold to a well-known capability to its canonical spelling
/// (as a Go runtime's case-insensitive decoding would read them); when several
/// do, the last one wins, at the place of the first.
fn canonical_runtime_config(rc: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, value) in rc {
        let canonical = casefold::select(key, &WELL_KNOWN_CAPABILITIES)
            .map_or_else(|| key.clone(), |i| WELL_KNOWN_CAPABILITIES[i].to_string());
        out.insert(canonical, value.clone());
    }
    out
}

/// One element of `cni.dev/valid-attachments` (cni-SPEC §2 GC): an
/// attachment the runtime still has, its names checked when read.
pub type ValidAttachment = (ContainerId, IfName);

/// One element of `cni.dev/valid-attachments` on the wire.
#[derive(Serialize, Deserialize)]
struct GcAttachment {
    #[serde(rename = "containerID")]
    container_id: ContainerId,
    ifname: IfName,
}

/// The value of `cni.dev/valid-attachments` for a GC of `valid`.
pub fn valid_attachments_value(valid: &[ValidAttachment]) -> Value {
    let list: Vec<GcAttachment> = valid
        .iter()
        .map(|(c, i)| GcAttachment {
            container_id: c.clone(),
            ifname: i.clone(),
        })
        .collect();
    serde_json::to_value(list).expect("plain strings serialize")
}

/// cni-SPEC §2 GC: `cni.dev/valid-attachments`, required (a GC without it
/// would treat every attachment as stale); `null` means none is valid.
fn valid_attachments(config: &Map<String, Value>) -> Result<Vec<ValidAttachment>, CniError> {
    let items = match casefold::get(config, VALID_ATTACHMENTS) {
        None => {
            return Err(CniError::invalid_config(
                VALID_ATTACHMENTS,
                "missing: GC needs the list of still-valid attachments",
            ))
        }
        Some(Value::Null) => return Ok(Vec::new()),
        Some(v @ Value::Array(_)) => v,
        Some(other) => {
            return Err(wrong_type(
                VALID_ATTACHMENTS,
                "an array of {containerID, ifname} objects",
                other,
            ))
        }
    };
    let list: Vec<GcAttachment> = casefold::from_value_at(items).map_err(|e| {
        CniError::invalid_config(
            format!("{VALID_ATTACHMENTS}{}", e.path),
            e.error.to_string(),
        )
    })?;
    Ok(list
        .into_iter()
        .map(|a| (a.container_id, a.ifname))
        .collect())
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::path::Path;

    use super::*;

    /// Records what it was called with; answers with canned values.
    #[derive(Default)]
    struct Fake {
        calls: RefCell<Vec<(CniCommand, Request)>>,
        gc_valid: RefCell<Vec<ValidAttachment>>,
        result: Option<CniResult>,
        fail: Option<CniError>,
    }

    impl Fake {
        /// A plugin whose ADD answers `result`.
        fn adding(result: CniResult) -> Fake {
            Fake {
                result: Some(result),
                ..Fake::default()
            }
        }

        fn answer<T>(&self, req: &Request, ok: T) -> Result<T, CniError> {
            self.calls
                .borrow_mut()
                .push((req.env.command(), req.clone()));
            match &self.fail {
                Some(e) => Err(e.clone()),
                None => Ok(ok),
            }
        }

        fn last(&self) -> Request {
            self.calls
                .borrow()
                .last()
                .expect("plugin was called")
                .1
                .clone()
        }
    }

    impl Plugin for Fake {
        fn add(&self, req: &Request) -> Result<CniResult, CniError> {
            self.answer(req, self.result.clone().unwrap_or_default())
        }
        fn del(&self, req: &Request) -> Result<(), CniError> {
            self.answer(req, ())
        }
        fn check(&self, req: &Request) -> Result<(), CniError> {
            self.answer(req, ())
        }
        fn gc(&self, req: &Request, valid: &[ValidAttachment]) -> Result<(), CniError> {
            *self.gc_valid.borrow_mut() = valid.to_vec();
            self.answer(req, ())
        }
        fn status(&self, req: &Request) -> Result<(), CniError> {
            self.answer(req, ())
        }
    }

    struct Out {
        code: i32,
        stdout: String,
        stderr: String,
    }

    impl Out {
        fn json(&self) -> Value {
            serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {:?}", self.stdout))
        }

        /// The error result, checked for the cni-SPEC §5 shape and exit code.
        fn error(&self, code: u32, version: &str) -> String {
            assert_eq!(self.code, 1, "stdout: {}", self.stdout);
            let v = self.json();
            assert_eq!(v["code"], code, "{v}");
            assert_eq!(v["cniVersion"], version, "{v}");
            assert!(v["msg"].as_str().is_some_and(|m| !m.is_empty()));
            let details = v["details"].as_str().unwrap().to_string();
            // One line on stderr, naming the code.
            assert_eq!(self.stderr.lines().count(), 1, "{:?}", self.stderr);
            assert!(
                self.stderr.starts_with(&format!("CNI error {code}: ")),
                "{}",
                self.stderr
            );
            assert!(self.stderr.contains(&details), "{}", self.stderr);
            details
        }
    }

    fn attach_env(cmd: &str) -> Vec<(&'static str, String)> {
        vec![
            ("CNI_COMMAND", cmd.to_string()),
            ("CNI_CONTAINERID", "ctr1".into()),
            ("CNI_NETNS", "/var/run/netns/blue".into()),
            ("CNI_IFNAME", "eth0".into()),
            ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=web".into()),
            ("CNI_PATH", "/opt/cni/bin".into()),
        ]
    }

    fn drive_with(plugin: &dyn Plugin, env: &[(&str, String)], stdin: &[u8]) -> Out {
        let vars: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(
            plugin,
            |k| vars.get(k).cloned(),
            &mut &stdin[..],
            &mut out,
            &mut err,
        );
        Out {
            code,
            stdout: String::from_utf8(out).unwrap(),
            stderr: String::from_utf8(err).unwrap(),
        }
    }

    fn conf(version: &str, extra: Value) -> Vec<u8> {
        let mut v = json!({"cniVersion": version, "name": "dbnet", "type": "plexus"});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::to_vec(&v).unwrap()
    }

    fn sample_result() -> CniResult {
        CniResult::from_value(&json!({"cniVersion": "1.1.0",
            "interfaces": [{"name": "eth0", "mac": "00:11:22:33:44:66", "sandbox": "/var/run/netns/blue"}],
            "ips": [{"interface": 0, "address": "10.1.0.5/16", "gateway": "10.1.0.1"}],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {"nameservers": ["10.1.0.1"]}}))
        .unwrap()
    }

    #[test]
    fn version_answers_without_the_plugin() {
        // cni-SPEC §5 "VERSION Success".
        let all = json!(["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]);
        let fake = Fake::default();
        let env = [("CNI_COMMAND", "VERSION".to_string())];
        let out = drive_with(&fake, &env, br#"{"cniVersion": "0.4.0"}"#);
        assert_eq!(out.code, 0);
        assert_eq!(
            out.json(),
            json!({"cniVersion": "0.4.0", "supportedVersions": all})
        );
        for stdin in [&b""[..], b"not json", b"[]", br#"{"cniVersion": 1}"#] {
            let out = drive_with(&fake, &env, stdin);
            assert_eq!(out.code, 0);
            assert_eq!(
                out.json(),
                json!({"cniVersion": "1.1.0", "supportedVersions": all})
            );
        }
        assert!(fake.calls.borrow().is_empty());
        assert!(out.stderr.is_empty());
    }

    #[test]
    fn add_builds_the_request_and_prints_the_result_in_its_version() {
        let fake = Fake::adding(sample_result());
        let stdin = conf(
            "1.1.0",
            json!({"runtimeConfig": {"PortMappings": [{"hostPort": 80}], "MAC": "x", "mac": "y",
                                     "custom": 1, "deviceid": "0000:01:00.1"},
                   "bridge": "cni0"}),
        );
        let out = drive_with(&fake, &attach_env("ADD"), &stdin);
        assert_eq!(out.code, 0, "{}", out.stdout);
        assert_eq!(
            out.json(),
            sample_result().to_value(CniVersion::V1_1_0).unwrap()
        );
        assert!(out.stderr.is_empty());
        let req = fake.last();
        assert_eq!(req.env.command(), CniCommand::Add);
        assert_eq!(req.env.container_id().unwrap(), "ctr1");
        assert_eq!(req.env.netns(), Some(Path::new("/var/run/netns/blue")));
        assert_eq!(req.env.args().k8s_pod_name(), Some("web"));
        assert_eq!(req.cni_version, CniVersion::V1_1_0);
        assert_eq!(req.name.as_deref(), Some("dbnet"));
        assert_eq!(req.plugin_type.as_deref(), Some("plexus"));
        assert_eq!(req.config["bridge"], "cni0");
        assert_eq!(req.prev_result, None);
        // Well-known capability keys canonicalised; the last of MAC/mac wins.
        assert_eq!(
            Value::Object(req.runtime_config),
            json!({"portMappings": [{"hostPort": 80}], "mac": "y", "custom": 1,
                   "deviceID": "0000:01:00.1"})
        );
    }

    #[test]
    fn top_level_keys_fold_like_go() {
        // Go plugins decode the configuration case-insensitively; so do we.
        let fake = Fake::adding(sample_result());
        let prev = sample_result().to_value(CniVersion::V1_0_0).unwrap();
        let stdin = serde_json::to_vec(&json!({"CNIVersion": "1.0.0", "Name": "n", "TYPE": "t",
            "RuntimeConfig": {"IPs": ["10.0.0.2/24"]}, "PrevResult": prev}))
        .unwrap();
        let out = drive_with(&fake, &attach_env("ADD"), &stdin);
        assert_eq!(out.code, 0, "{}", out.stdout);
        assert_eq!(out.json()["cniVersion"], "1.0.0");
        let req = fake.last();
        assert_eq!(
            (req.name.as_deref(), req.plugin_type.as_deref()),
            (Some("n"), Some("t"))
        );
        assert_eq!(
            Value::Object(req.runtime_config),
            json!({"ips": ["10.0.0.2/24"]})
        );
        assert!(req.prev_result.is_some());
        let env = [("CNI_COMMAND", "VERSION".to_string())];
        let out = drive_with(&fake, &env, br#"{"cniversion": "0.3.1"}"#);
        assert_eq!(out.json()["cniVersion"], "0.3.1");
    }

    #[test]
    fn add_converts_to_older_versions() {
        let fake = Fake::adding(sample_result());
        let out = drive_with(&fake, &attach_env("ADD"), &conf("0.3.1", json!({})));
        assert_eq!(out.code, 0);
        assert_eq!(out.json()["cniVersion"], "0.3.1");
        assert_eq!(out.json()["ips"][0]["version"], "4");
        // No cniVersion at all means 0.1.0.
        let stdin = serde_json::to_vec(&json!({"name": "n", "type": "plexus"})).unwrap();
        let out = drive_with(&fake, &attach_env("ADD"), &stdin);
        assert_eq!(out.code, 0);
        assert_eq!(
            out.json(),
            json!({"cniVersion": "0.1.0",
                   "ip4": {"ip": "10.1.0.5/16", "gateway": "10.1.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
                   "dns": {"nameservers": ["10.1.0.1"]}})
        );
        // A result 0.2.0 cannot express is an error in the request's version.
        let fake = Fake::default();
        let out = drive_with(&fake, &attach_env("ADD"), &conf("0.2.0", json!({})));
        let d = out.error(1, "0.2.0");
        assert!(d.contains("no IP address"), "{d}");
    }

    #[test]
    fn prev_result_is_read_in_the_request_version() {
        let fake = Fake::adding(sample_result());
        let prev = sample_result().to_value(CniVersion::V0_4_0).unwrap();
        let out = drive_with(
            &fake,
            &attach_env("ADD"),
            &conf("0.4.0", json!({"prevResult": prev})),
        );
        assert_eq!(out.code, 0);
        let req = fake.last();
        let got = req.prev_result.unwrap();
        assert_eq!(got.cni_version, Some(CniVersion::V0_4_0));
        assert_eq!(got.ips, sample_result().ips);
        // A bad prevResult is an invalid configuration naming the path.
        let bad = json!({"prevResult": {"ips": [{"address": "10.1.0.5"}]}});
        let out = drive_with(&fake, &attach_env("DEL"), &conf("1.0.0", bad));
        let d = out.error(7, "1.0.0");
        assert!(
            d.starts_with("prevResult.ips[0].address: \"10.1.0.5\" is not"),
            "{d}"
        );
        let out = drive_with(
            &fake,
            &attach_env("DEL"),
            &conf("1.0.0", json!({"prevResult": 5})),
        );
        assert_eq!(
            out.error(7, "1.0.0"),
            "prevResult: must be a JSON object, got 5"
        );
        // null is no prevResult (DEL must cope with an empty one).
        let out = drive_with(
            &fake,
            &attach_env("DEL"),
            &conf("1.0.0", json!({"prevResult": null})),
        );
        assert_eq!(out.code, 0);
        assert_eq!(fake.last().prev_result, None);
    }

    #[test]
    fn del_prints_nothing_and_tolerates_no_netns() {
        // cni-SPEC §2 DEL: CNI_NETNS optional; containerd sends it empty.
        let fake = Fake::default();
        let mut env = attach_env("DEL");
        env.retain(|(k, _)| *k != "CNI_NETNS");
        env.push(("CNI_NETNS", String::new()));
        let out = drive_with(&fake, &env, &conf("1.1.0", json!({})));
        assert_eq!(
            (out.code, out.stdout.as_str(), out.stderr.as_str()),
            (0, "", "")
        );
        assert_eq!(fake.last().env.netns(), None);
    }

    #[test]
    fn check_needs_0_4_0() {
        let fake = Fake::default();
        let out = drive_with(&fake, &attach_env("CHECK"), &conf("0.4.0", json!({})));
        assert_eq!((out.code, out.stdout.as_str()), (0, ""));
        assert_eq!(fake.calls.borrow().len(), 1);
        for old in ["0.3.1", "0.3.0", "0.2.0", "0.1.0"] {
            let out = drive_with(&fake, &attach_env("CHECK"), &conf(old, json!({})));
            let d = out.error(1, old);
            assert_eq!(
                d,
                format!("cniVersion: CHECK needs CNI 0.4.0 or later, the configuration is {old}")
            );
        }
        assert_eq!(fake.calls.borrow().len(), 1);
    }

    #[test]
    fn valid_attachments_are_written_as_they_are_read() {
        let pair = |c: &str, i: &str| (ContainerId::new(c).unwrap(), IfName::new(i).unwrap());
        let valid = vec![pair("ctr1", "eth0"), pair("ctr2", "net1")];
        let value = valid_attachments_value(&valid);
        assert_eq!(
            value,
            json!([{"containerID": "ctr1", "ifname": "eth0"},
                   {"containerID": "ctr2", "ifname": "net1"}])
        );
        let mut config = Map::new();
        config.insert(VALID_ATTACHMENTS.into(), value);
        assert_eq!(valid_attachments(&config).unwrap(), valid);
        assert_eq!(valid_attachments_value(&[]), json!([]));
    }

    #[test]
    fn gc_passes_valid_attachments() {
        // cni-SPEC §2 GC.
        let fake = Fake::default();
        let env = [
            ("CNI_COMMAND", "GC".to_string()),
            ("CNI_PATH", "/opt/cni/bin".to_string()),
        ];
        let va = json!({"cni.dev/valid-attachments": [
            {"containerID": "ctr1", "ifname": "eth0"}, {"ContainerId": "ctr2", "IfName": "net1"}]});
        let out = drive_with(&fake, &env, &conf("1.1.0", va));
        assert_eq!((out.code, out.stdout.as_str()), (0, ""), "{}", out.stdout);
        assert_eq!(
            *fake.gc_valid.borrow(),
            [
                (
                    ContainerId::new("ctr1").unwrap(),
                    IfName::new("eth0").unwrap()
                ),
                (
                    ContainerId::new("ctr2").unwrap(),
                    IfName::new("net1").unwrap()
                )
            ]
        );
        let out = drive_with(
            &fake,
            &env,
            &conf("1.1.0", json!({"cni.dev/valid-attachments": null})),
        );
        assert_eq!(out.code, 0);
        assert!(fake.gc_valid.borrow().is_empty());

        let out = drive_with(
            &fake,
            &env,
            &conf("1.0.0", json!({"cni.dev/valid-attachments": []})),
        );
        assert_eq!(
            out.error(1, "1.0.0"),
            "cniVersion: GC needs CNI 1.1.0 or later, the configuration is 1.0.0"
        );
        let out = drive_with(&fake, &env, &conf("1.1.0", json!({})));
        assert!(out
            .error(7, "1.1.0")
            .starts_with("cni.dev/valid-attachments: missing"));
        let out = drive_with(
            &fake,
            &env,
            &conf("1.1.0", json!({"cni.dev/valid-attachments": {}})),
        );
        assert!(out
            .error(7, "1.1.0")
            .starts_with("cni.dev/valid-attachments: must be an array"));
        let bad = json!({"cni.dev/valid-attachments": [{"containerID": "a", "ifname": "eth0"},
                                                       {"containerID": "b", "ifname": "bad/if"}]});
        let out = drive_with(&fake, &env, &conf("1.1.0", bad));
        assert_eq!(
            out.error(7, "1.1.0"),
            "cni.dev/valid-attachments[1].ifname: \"bad/if\" must not contain '/'"
        );
        let bad = json!({"cni.dev/valid-attachments": [{"containerID": "-a", "ifname": "eth0"}]});
        let out = drive_with(&fake, &env, &conf("1.1.0", bad));
        assert!(out
            .error(7, "1.1.0")
            .starts_with("cni.dev/valid-attachments[0].containerID: \"-a\" must start"));
        let bad = json!({"cni.dev/valid-attachments": [{"containerID": "a"}]});
        let out = drive_with(&fake, &env, &conf("1.1.0", bad));
        assert_eq!(
            out.error(7, "1.1.0"),
            "cni.dev/valid-attachments[0]: missing field `ifname`"
        );
        // GC without CNI_PATH is an environment error.
        let out = drive_with(&fake, &env[..1], &conf("1.1.0", json!({})));
        assert_eq!(
            out.error(4, "1.1.0"),
            "CNI_PATH: required for GC but not set"
        );
    }

    #[test]
    fn check_gc_and_status_succeed_for_a_plugin_that_has_none() {
        // As the reference skel answers a plugin that gives no CHECK, GC or
        // STATUS function: success, nothing on stdout.
        struct AddAndDelOnly;
        impl Plugin for AddAndDelOnly {
            fn add(&self, _: &Request) -> Result<CniResult, CniError> {
                Ok(CniResult::default())
            }
            fn del(&self, _: &Request) -> Result<(), CniError> {
                Ok(())
            }
        }
        let gc = vec![
            ("CNI_COMMAND", "GC".to_string()),
            ("CNI_PATH", "/opt/cni/bin".to_string()),
        ];
        for (env, stdin) in [
            (
                attach_env("CHECK"),
                conf("1.1.0", json!({"prevResult": {}})),
            ),
            (gc, conf("1.1.0", json!({"cni.dev/valid-attachments": []}))),
            (
                vec![("CNI_COMMAND", "STATUS".into())],
                conf("1.1.0", json!({})),
            ),
        ] {
            let out = drive_with(&AddAndDelOnly, &env, &stdin);
            assert_eq!((out.code, out.stdout.as_str()), (0, ""), "{}", env[0].1);
        }
    }

    #[test]
    fn status_needs_1_1_0() {
        let fake = Fake::default();
        let env = [("CNI_COMMAND", "STATUS".to_string())];
        let out = drive_with(&fake, &env, &conf("1.1.0", json!({})));
        assert_eq!((out.code, out.stdout.as_str()), (0, ""));
        assert_eq!(fake.last().env.command(), CniCommand::Status);
        let out = drive_with(&fake, &env, &conf("1.0.0", json!({})));
        assert!(out
            .error(1, "1.0.0")
            .starts_with("cniVersion: STATUS needs CNI 1.1.0"));
        // cni-SPEC §2 STATUS: 50 = not available, passed through.
        let fake = Fake {
            fail: Some(CniError::new(
                ErrorCode::NotAvailable,
                "not ready",
                "no IPs left",
            )),
            ..Fake::default()
        };
        let out = drive_with(&fake, &env, &conf("1.1.0", json!({})));
        assert_eq!(out.error(50, "1.1.0"), "no IPs left");
    }

    #[test]
    fn plugin_errors_are_printed_in_the_request_version() {
        let fake = Fake {
            fail: Some(CniError::new(ErrorCode::TryAgainLater, "busy", "lock held")),
            ..Fake::default()
        };
        for cmd in ["ADD", "DEL", "CHECK"] {
            let out = drive_with(&fake, &attach_env(cmd), &conf("0.4.0", json!({})));
            assert_eq!(out.error(11, "0.4.0"), "lock held");
            assert_eq!(out.json()["msg"], "busy");
        }
    }

    #[test]
    fn environment_errors_are_code_4_in_1_1_0() {
        let fake = Fake::default();
        let stdin = conf("0.4.0", json!({}));
        let out = drive_with(&fake, &[], &stdin);
        assert_eq!(out.error(4, "1.1.0"), "CNI_COMMAND: not set");
        let out = drive_with(&fake, &[("CNI_COMMAND", "FROB".into())], &stdin);
        assert!(out
            .error(4, "1.1.0")
            .starts_with("CNI_COMMAND: unknown command \"FROB\""));
        for cmd in ["ADD", "CHECK", "DEL"] {
            for var in ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"] {
                if cmd == "DEL" && var == "CNI_NETNS" {
                    continue;
                }
                let mut env = attach_env(cmd);
                env.retain(|(k, _)| k != &var);
                let out = drive_with(&fake, &env, &stdin);
                assert_eq!(
                    out.error(4, "1.1.0"),
                    format!("{var}: required for {cmd} but not set")
                );
            }
        }
        for (var, value, starts) in [
            (
                "CNI_CONTAINERID",
                "a b",
                "CNI_CONTAINERID: \"a b\" must contain only",
            ),
            (
                "CNI_NETNS",
                "netns/x",
                "CNI_NETNS: \"netns/x\" must be an absolute path",
            ),
            (
                "CNI_IFNAME",
                "eth0:1",
                "CNI_IFNAME: \"eth0:1\" must not contain ':'",
            ),
            ("CNI_ARGS", "A=1;B", "CNI_ARGS: invalid pair \"B\""),
            (
                "CNI_ARGS",
                "IgnoreUnknown=maybe",
                "CNI_ARGS: IgnoreUnknown=\"maybe\"",
            ),
        ] {
            let mut env = attach_env("ADD");
            env.retain(|(k, _)| *k != var);
            env.push((var, value.to_string()));
            let out = drive_with(&fake, &env, &stdin);
            let d = out.error(4, "1.1.0");
            assert!(d.starts_with(starts), "{d}");
        }
        assert!(fake.calls.borrow().is_empty());
    }

    struct FailingReader;
    impl Read for FailingReader {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("pipe broke"))
        }
    }

    #[test]
    fn bad_stdin() {
        let fake = Fake::default();
        let env = attach_env("ADD");
        let vars: HashMap<&str, String> = env.iter().cloned().collect();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(
            &fake,
            |k| vars.get(k).cloned(),
            &mut FailingReader,
            &mut out,
            &mut err,
        );
        let out = Out {
            code,
            stdout: String::from_utf8(out).unwrap(),
            stderr: String::from_utf8(err).unwrap(),
        };
        assert_eq!(out.error(5, "1.1.0"), "stdin: pipe broke");

        for empty in [&b""[..], b"  \n"] {
            let out = drive_with(&fake, &env, empty);
            assert!(out.error(6, "1.1.0").starts_with("stdin: empty"));
        }
        let out = drive_with(&fake, &env, b"{\"cniVersion\": \"1.0.0\",\n \"name\": }");
        let d = out.error(6, "1.1.0");
        assert!(
            d.starts_with("stdin: ") && d.contains("line 2 column"),
            "{d}"
        );
        let out = drive_with(&fake, &env, b"[1]");
        assert_eq!(
            out.error(7, "1.1.0"),
            "network configuration: must be a JSON object, got an array"
        );
        let out = drive_with(&fake, &env, br#"{"cniVersion": 1.0}"#);
        assert_eq!(
            out.error(7, "1.1.0"),
            "cniVersion: must be a string, got 1.0"
        );
        let out = drive_with(&fake, &env, br#"{"cniVersion": "9.9.9"}"#);
        assert!(out
            .error(1, "1.1.0")
            .starts_with("cniVersion: \"9.9.9\" is not a CNI version"));
        let out = drive_with(&fake, &env, &conf("1.0.0", json!({"name": 5})));
        assert_eq!(out.error(7, "1.0.0"), "name: must be a string, got 5");
        let out = drive_with(&fake, &env, &conf("1.0.0", json!({"type": []})));
        assert_eq!(
            out.error(7, "1.0.0"),
            "type: must be a string, got an array"
        );
        let out = drive_with(&fake, &env, &conf("1.0.0", json!({"runtimeConfig": "x"})));
        assert_eq!(
            out.error(7, "1.0.0"),
            "runtimeConfig: must be an object, got \"x\""
        );
        let mut huge = b"{\"a\": \"".to_vec();
        huge.resize(MAX_STDIN as usize + 10, b'x');
        let out = drive_with(&fake, &env, &huge);
        assert!(out.error(5, "1.1.0").starts_with("stdin: more than"));
        assert!(fake.calls.borrow().is_empty());
    }

    struct BrokenPipe;
    impl Write for BrokenPipe {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("closed"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn unwritable_stdout_fails_with_a_message_on_stderr() {
        let fake = Fake::adding(sample_result());
        let env = attach_env("ADD");
        let vars: HashMap<&str, String> = env.iter().cloned().collect();
        let mut err = Vec::new();
        let stdin = conf("1.1.0", json!({}));
        let code = run(
            &fake,
            |k| vars.get(k).cloned(),
            &mut &stdin[..],
            &mut BrokenPipe,
            &mut err,
        );
        assert_eq!(code, 1);
        assert_eq!(
            String::from_utf8(err).unwrap(),
            "CNI error 5: I/O failure: stdout: closed\n"
        );
    }
}
