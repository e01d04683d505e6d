//! Helpers shared by the executor's integration tests: plans built by hand,
//! fake CNI plugins as shell scripts, and the executor's context.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use plexus::cni::names::{ContainerId, IfName, NetnsPath};
use plexus::cni::result::CniResult;
use plexus::plan::{Attachment, Plan};
use plexus::run::{Delegates, Registry, RunContext};
use serde_json::{json, Map, Value};

/// A plugin's request JSON as the planner writes it.
pub fn plugin_json(version: &str, name: &str, plugin_type: &str) -> Map<String, Value> {
    json!({"cniVersion": version, "name": name, "type": plugin_type,
           "opaque": {"kept": [1, "two"]}})
    .as_object()
    .unwrap()
    .clone()
}

pub fn attachment(network: &str, ifname: &str, version: &str, types: &[&str]) -> Attachment {
    let name = network.rsplit('/').next().unwrap();
    Attachment {
        network: network.into(),
        ifname: IfName::new(ifname).unwrap(),
        default: ifname == "eth0",
        cni_args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web".into(),
        plugins: types
            .iter()
            .map(|t| plugin_json(version, name, t))
            .collect(),
        source: "test".into(),
        default_route: None,
        clear_default_route: false,
        ipam_claim_reference: None,
        disable_check: false,
        device_info: None,
    }
}

pub fn plan(attachments: Vec<Attachment>) -> Plan {
    Plan {
        attachments,
        warnings: vec![],
        claimed: Vec::new(),
    }
}

/// A result with one interface and one address, distinct per `n`.
pub fn result_json(version: &str, n: u8, ifname: &str) -> Value {
    json!({"cniVersion": version,
           "interfaces": [{"name": ifname, "mac": format!("02:00:00:00:00:{n:02x}"), "mtu": 1400,
                           "sandbox": "/var/run/netns/pod"}],
           "ips": [{"address": format!("10.0.{n}.2/24"), "gateway": format!("10.0.{n}.1"), "interface": 0}],
           "routes": [{"dst": "0.0.0.0/0", "gw": format!("10.0.{n}.1"), "mtu": 1300}],
           "dns": {"nameservers": [format!("10.0.{n}.53")]}})
}

/// What `result_json` means once read in `version`.
pub fn as_result(v: &Value) -> CniResult {
    CniResult::from_value(v).unwrap()
}

const FAKE: &str = r#"#!/bin/sh
# A fake CNI plugin: records its call, answers from files.
t=$(basename "$0")
d=@STATE@
n=$(cat "$d/seq" 2>/dev/null || echo 0)
echo $((n + 1)) > "$d/seq"
cat > "$d/$n.stdin"
env | grep '^CNI_' | sort > "$d/$n.env"
echo "$t $CNI_COMMAND" >> "$d/calls"
a="$d/answers/$t.$CNI_COMMAND"
if [ -f "$a.sleep" ]; then sleep "$(cat "$a.sleep")"; fi
if [ -f "$a.stderr" ]; then cat "$a.stderr" >&2; fi
if [ -f "$a.kill-parent" ]; then kill -9 $PPID; sleep 5; fi
if [ -f "$a.run" ]; then sh "$a.run"; fi
if [ -f "$a.stdout" ]; then cat "$a.stdout"; fi
if [ -f "$a.rc" ]; then exit "$(cat "$a.rc")"; fi
exit 0
"#;

/// A directory of fake plugins and what they were called with.
pub struct Fakes {
    root: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

/// One recorded plugin call.
#[derive(Debug, Clone)]
pub struct Call {
    pub plugin: String,
    pub command: String,
    pub env: BTreeMap<String, String>,
    pub stdin: Value,
}

impl Fakes {
    pub fn new(types: &[&str]) -> Fakes {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        for d in ["bin", "state/answers", "bindir", "cache", "netns"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        // Stands for a pod's netns: it only has to exist.
        fs::write(root.join("netns/pod"), "").unwrap();
        let f = Fakes {
            root,
            _tmp: Some(tmp),
        };
        for t in types {
            f.install(t);
        }
        f
    }

    /// The fakes another process of this test set up at `root`.
    pub fn at(root: &Path) -> Fakes {
        Fakes {
            root: root.to_path_buf(),
            _tmp: None,
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Log a call made to a built-in (in-process) plugin like the fakes do.
    pub fn log_builtin(&self, plugin_type: &str, command: &str, stdin: &Map<String, Value>) {
        self.log_entry(
            &format!("{plugin_type} {command}"),
            &Value::Object(stdin.clone()),
        );
    }

    /// Append a line to the call log (for hooks), numbered like calls.
    pub fn log_line(&self, line: &str) {
        self.log_entry(line, &Value::Null);
    }

    fn log_entry(&self, line: &str, stdin: &Value) {
        use std::io::Write;
        let state = self.state();
        let n: usize = fs::read_to_string(state.join("seq"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        fs::write(state.join("seq"), format!("{}\n", n + 1)).unwrap();
        fs::write(
            state.join(format!("{n}.stdin")),
            serde_json::to_vec(stdin).unwrap(),
        )
        .unwrap();
        fs::write(state.join(format!("{n}.env")), "").unwrap();
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(state.join("calls"))
            .unwrap();
        writeln!(f, "{line}").unwrap();
    }

    pub fn install(&self, plugin_type: &str) {
        let p = self.bin().join(plugin_type);
        let state = self.state();
        fs::write(&p, FAKE.replace("@STATE@", state.to_str().unwrap())).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    }

    pub fn uninstall(&self, plugin_type: &str) {
        fs::remove_file(self.bin().join(plugin_type)).unwrap();
    }

    pub fn bin(&self) -> PathBuf {
        self.root.join("bin")
    }

    pub fn bindir(&self) -> PathBuf {
        self.root.join("bindir")
    }

    pub fn cache_dir(&self) -> PathBuf {
        self.root.join("cache")
    }

    pub fn netns(&self) -> PathBuf {
        self.root.join("netns/pod")
    }

    fn state(&self) -> PathBuf {
        self.root.join("state")
    }

    fn answer(&self, plugin_type: &str, command: &str, what: &str) -> PathBuf {
        self.state()
            .join("answers")
            .join(format!("{plugin_type}.{command}.{what}"))
    }

    /// The plugin prints `stdout` for `command`.
    pub fn answer_stdout(&self, plugin_type: &str, command: &str, stdout: &str) {
        fs::write(self.answer(plugin_type, command, "stdout"), stdout).unwrap();
    }

    /// The plugin answers ADD with `result`.
    pub fn answer_result(&self, plugin_type: &str, result: &Value) {
        self.answer_stdout(plugin_type, "ADD", &result.to_string());
    }

    /// The plugin fails `command` with a CNI error result.
    pub fn answer_error(
        &self,
        plugin_type: &str,
        command: &str,
        code: u32,
        msg: &str,
        details: &str,
    ) {
        let e = json!({"cniVersion": "1.0.0", "code": code, "msg": msg, "details": details});
        self.answer_stdout(plugin_type, command, &e.to_string());
        fs::write(self.answer(plugin_type, command, "rc"), "1").unwrap();
    }

    pub fn answer_file(&self, plugin_type: &str, command: &str, what: &str, content: &str) {
        fs::write(self.answer(plugin_type, command, what), content).unwrap();
    }

    /// Undo every answer of `command` for the plugin (it then succeeds silently).
    pub fn clear_answers(&self, plugin_type: &str, command: &str) {
        for what in ["stdout", "rc", "stderr", "sleep", "kill-parent", "run"] {
            let _ = fs::remove_file(self.answer(plugin_type, command, what));
        }
    }

    /// `"<type> <COMMAND>"` of every call, in order.
    pub fn calls(&self) -> Vec<String> {
        fs::read_to_string(self.state().join("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Forget the calls so far (keeps the sequence numbers going).
    pub fn reset_calls(&self) {
        let _ = fs::remove_file(self.state().join("calls"));
        let _ = fs::remove_file(self.state().join("seq"));
        for e in fs::read_dir(self.state()).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                fs::remove_file(p).unwrap();
            }
        }
    }

    pub fn call(&self, n: usize) -> Call {
        let line = &self.calls()[n];
        let (plugin, command) = line.split_once(' ').unwrap();
        let env = fs::read_to_string(self.state().join(format!("{n}.env")))
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let stdin = fs::read(self.state().join(format!("{n}.stdin"))).unwrap();
        Call {
            plugin: plugin.into(),
            command: command.into(),
            env,
            stdin: serde_json::from_slice(&stdin).unwrap_or_else(|e| {
                panic!("call {n} stdin: {e}: {}", String::from_utf8_lossy(&stdin))
            }),
        }
    }

    pub fn delegates<'a>(&self, registry: &'a Registry) -> Delegates<'a> {
        Delegates {
            cni_path: vec![self.bin()],
            bin_dir: Some(self.bindir()),
            registry,
        }
    }

    pub fn ctx<'a>(&self, registry: &'a Registry, container_id: &str) -> RunContext<'a> {
        RunContext {
            container_id: ContainerId::new(container_id).unwrap(),
            ifname: IfName::new("eth0").unwrap(),
            netns: Some(NetnsPath::new(self.netns().to_str().unwrap()).unwrap()),
            delegates: self.delegates(registry),
        }
    }

    pub fn record_path(&self, container_id: &str) -> PathBuf {
        self.cache_dir().join(format!("{container_id}@eth0.json"))
    }
}

/// The request JSON `config` with `prevResult` added, as a plugin must get it.
pub fn with_prev(config: &Map<String, Value>, prev: Option<Value>) -> Value {
    let mut c = config.clone();
    if let Some(p) = prev {
        c.insert("prevResult".into(), p);
    }
    Value::Object(c)
}

pub fn path_str(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}
