//! Logging as Multus users configure it (`logFile`, `logLevel`,
//! `logToStderr`, `logOptions`; Multus's pkg/logging and the lumberjack
//! logger it writes `logFile` through), with the `plexus` binary exec'd as a
//! runtime execs it. The cluster network is a fake plugin (a shell script
//! printing a canned result: no namespace or device is touched), the pod
//! comes from a manifest directory, and its selection annotation is invalid,
//! so each ADD has a warning to log (multi-net-spec §4.1.2.1: an invalid
//! annotation is ignored, the pod gets the cluster network only).

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use plexus_testkit::files;
use plexus_testkit::process::{output_with_stdin, LoggedChild};
use serde_json::{json, Value};

const PLEXUS: &str = env!("CARGO_BIN_EXE_plexus");

/// The fake cluster network: ADD prints a result, anything else succeeds;
/// with `fail` in its config it fails with CNI error 11.
const FAKE_PLUGIN: &str = r#"#!/bin/sh
conf=$(cat)
case "$conf" in *'"fail"'*)
  echo '{"cniVersion":"1.0.0","code":11,"msg":"not now","details":"the fake says so"}'; exit 1;;
esac
if [ "$CNI_COMMAND" = ADD ]; then
  echo '{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}],"ips":[{"address":"10.1.0.2/24","interface":0}]}'
fi
"#;

/// The warning the pod's annotation causes.
const WARNING: &str = "networks[0].name ignored";

struct Node {
    tmp: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let tmp = tempfile::tempdir().unwrap();
        for dir in ["bin", "manifests", "cache", "log"] {
            std::fs::create_dir_all(tmp.path().join(dir)).unwrap();
        }
        let plugin = tmp.path().join("bin/fakenet");
        std::fs::write(&plugin, FAKE_PLUGIN).unwrap();
        std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Stands for the pod's network namespace: the fake only needs a path.
        std::fs::write(tmp.path().join("netns"), "").unwrap();
        std::fs::write(
            tmp.path().join("manifests/pod.yaml"),
            "kind: Pod\nmetadata:\n  name: p\n  namespace: ns\n  annotations:\n    \
             k8s.v1.cni.cncf.io/networks: '[{\"name\": 1}]'\n",
        )
        .unwrap();
        Node { tmp }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    fn log_file(&self) -> PathBuf {
        self.path("log/plexus.log")
    }

    /// plexus's conf with the logging keys of `logging` (and any other key
    /// it names) merged in.
    fn conf(&self, logging: Value) -> String {
        let mut conf = json!({
            "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
            "manifestDir": self.path("manifests"), "cniDir": self.path("cache"),
            "binDir": self.path("bin"),
            "delegates": [{"cniVersion": "1.0.0", "name": "podnet", "type": "fakenet"}],
        });
        let map = conf.as_object_mut().unwrap();
        for (k, v) in logging.as_object().unwrap() {
            map.insert(k.clone(), v.clone());
        }
        conf.to_string()
    }

    /// One call of `plexus` for container `id` as the runtime makes it.
    fn call(&self, command: &str, id: &str, conf: &str) -> Output {
        let mut plexus = Command::new(PLEXUS);
        plexus
            .env_clear()
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", id)
            .env("CNI_NETNS", self.path("netns"))
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", self.path("bin"))
            .env("CNI_ARGS", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p");
        output_with_stdin(&mut plexus, conf)
    }

    fn add_ok(&self, id: &str, conf: &str) -> Output {
        let out = self.call("ADD", id, conf);
        assert!(out.status.success(), "ADD {id}: {}", text(&out.stderr));
        out
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The JSON lines of a log.
fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn file_lines(path: &Path) -> Vec<Value> {
    json_lines(&std::fs::read_to_string(path).unwrap_or_default())
}

fn the_warning(lines: &[Value]) -> &Value {
    lines
        .iter()
        .find(|l| l["message"].as_str().is_some_and(|m| m.contains(WARNING)))
        .unwrap_or_else(|| panic!("no warning in {lines:#?}"))
}

#[test]
fn a_calls_warning_lands_in_log_file_with_the_call_fields() {
    let node = Node::new();
    let conf = node.conf(json!({"logFile": node.log_file()}));
    let out = node.add_ok("c1", &conf);
    let lines = file_lines(&node.log_file());
    let warning = the_warning(&lines);
    assert_eq!(warning["level"], "WARN");
    assert_eq!(warning["pod"], "ns/p");
    assert_eq!(warning["container_id"], "c1");
    assert_eq!(warning["interface"], "eth0");
    assert_eq!(warning["network"], "plexus");
    // logToStderr defaults to true (Multus's default): the runtime sees it
    // too, as text; stdout holds the result only.
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(WARNING) && stderr.contains("pod=\"ns/p\""),
        "{stderr}"
    );
    serde_json::from_slice::<Value>(&out.stdout).expect("stdout is the result alone");

    // logToStderr: false leaves stderr to errors alone.
    let conf = node.conf(json!({"logFile": node.log_file(), "logToStderr": false}));
    let out = node.add_ok("c2", &conf);
    assert_eq!(text(&out.stderr), "");
    let lines = file_lines(&node.log_file());
    assert!(
        lines.iter().any(|l| l["container_id"] == "c2"),
        "{lines:#?}"
    );
}

#[test]
fn a_failed_call_is_logged_once_with_its_code() {
    let node = Node::new();
    let mut conf: Value =
        serde_json::from_str(&node.conf(json!({"logFile": node.log_file()}))).unwrap();
    conf["delegates"][0]["fail"] = json!(true);
    let out = node.call("ADD", "c1", &conf.to_string());
    assert!(!out.status.success());
    // cni-SPEC §5: the error result on stdout, one line on stderr, as
    // without logging.
    let stderr = text(&out.stderr);
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("the fake says so"))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].starts_with("CNI error 11: "), "{stderr}");
    let lines = file_lines(&node.log_file());
    let failed: Vec<&Value> = lines.iter().filter(|l| l["level"] == "ERROR").collect();
    assert_eq!(failed.len(), 1, "{lines:#?}");
    assert_eq!(failed[0]["code"], 11);
    assert_eq!(failed[0]["command"], "ADD");
    assert_eq!(failed[0]["pod"], "ns/p");
    assert_eq!(failed[0]["container_id"], "c1");
    assert!(failed[0]["message"]
        .as_str()
        .unwrap()
        .contains("the fake says so"));
}

#[test]
fn log_level_filters_and_an_unknown_one_is_warned_about() {
    let node = Node::new();
    // panic shows errors only: the warning is not written, and the file,
    // opened at its first event, is not even created.
    let conf = node.conf(json!({"logFile": node.log_file(), "logLevel": "panic"}));
    let out = node.add_ok("c1", &conf);
    assert!(!node.log_file().exists());
    assert!(
        !text(&out.stderr).contains(WARNING),
        "{}",
        text(&out.stderr)
    );
    // An unknown level: Multus says so and keeps its default; so does plexus.
    let conf = node.conf(json!({"logFile": node.log_file(), "logLevel": "LOUD"}));
    node.add_ok("c2", &conf);
    let lines = file_lines(&node.log_file());
    assert!(
        lines.iter().any(|l| l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("logLevel: \"LOUD\" is not one of"))),
        "{lines:#?}"
    );
    the_warning(&lines);
    // Verbose adds progress: each attachment added, with its network and
    // interface.
    let conf = node.conf(json!({"logFile": node.log_file(), "logLevel": "Verbose"}));
    node.add_ok("c3", &conf);
    let lines = file_lines(&node.log_file());
    let added = lines
        .iter()
        .find(|l| l["container_id"] == "c3" && l["level"] == "INFO")
        .unwrap_or_else(|| panic!("{lines:#?}"));
    assert_eq!(added["message"], "added [10.1.0.2/24]");
    assert_eq!(added["network"], "podnet");
    assert_eq!(added["interface"], "eth0");
    assert!(lines
        .iter()
        .any(|l| l["container_id"] == "c3" && l["level"] == "WARN"));
}

#[test]
fn bad_logging_keys_fail_the_call_naming_the_key() {
    let node = Node::new();
    for (logging, want) in [
        (
            json!({"logOptions": {"maxSize": 0}}),
            "logOptions.maxSize: must be a positive integer (megabytes), got 0",
        ),
        (json!({"logToStderr": "yes"}), "logToStderr: invalid type"),
    ] {
        let out = node.call("ADD", "c1", &node.conf(logging));
        assert!(!out.status.success());
        let result: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(result["code"], 7, "{result}");
        assert!(
            result["details"].as_str().unwrap().contains(want),
            "{result}"
        );
    }
}

/// Fill the log file up to exactly 1 MB, so the next line rotates it.
fn fill_to_a_megabyte(path: &Path, marker: u8) {
    let have = std::fs::metadata(path).map_or(0, |m| m.len());
    let mut filler = vec![marker; (1 << 20) - have as usize];
    *filler.last_mut().unwrap() = b'\n';
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
        .write_all(&filler)
        .unwrap();
}

fn backups(node: &Node) -> Vec<String> {
    files::names(&node.path("log"), |n| n != "plexus.log")
}

fn gunzip(path: &Path) -> Vec<u8> {
    let out = Command::new("gzip").arg("-dc").arg(path).output().unwrap();
    assert!(out.status.success(), "gzip -dc {}", path.display());
    out.stdout
}

#[test]
fn rotation_at_max_size_keeps_max_backups_gzipped() {
    let node = Node::new();
    let conf = node.conf(json!({
        "logFile": node.log_file(), "logToStderr": false,
        "logOptions": {"maxSize": 1, "maxBackups": 2, "compress": true},
    }));
    for (round, marker) in [b'a', b'b', b'c', b'd'].into_iter().enumerate() {
        fill_to_a_megabyte(&node.log_file(), marker);
        node.add_ok(&format!("c{round}"), &conf);
        // The line did not fit: the file was rotated and holds it alone.
        let lines = file_lines(&node.log_file());
        assert_eq!(lines.len(), 1, "round {round}: {lines:#?}");
        assert_eq!(lines[0]["container_id"], format!("c{round}"));
    }
    // maxBackups 2: the newest two (filled with c, d), gzipped; lumberjack's
    // names: plexus-<UTC time>.log.gz.
    let names = backups(&node);
    assert_eq!(names.len(), 2, "{names:?}");
    for (name, marker) in names.iter().zip([b'c', b'd']) {
        assert!(
            name.starts_with("plexus-") && name.ends_with(".log.gz"),
            "{name}"
        );
        let content = gunzip(&node.path("log").join(name));
        // The previous round's line, then that round's filler.
        assert_eq!(content.len(), 1 << 20, "{name}");
        assert!(content.ends_with(&[marker, marker, b'\n']), "{name}");
    }
}

#[test]
fn rotation_without_compress_keeps_plain_backups() {
    let node = Node::new();
    let conf = node.conf(json!({
        "logFile": node.log_file(), "logToStderr": false,
        "logOptions": {"maxSize": 1, "compress": false},
    }));
    fill_to_a_megabyte(&node.log_file(), b'a');
    node.add_ok("c1", &conf);
    let names = backups(&node);
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].ends_with(".log") && !names[0].contains(".gz"));
    let backup = std::fs::read(node.path("log").join(&names[0])).unwrap();
    assert_eq!(backup.len(), 1 << 20);
}

/// A `plexus daemon` without an API server (calls read the manifest
/// directory), killed on drop; returned once its socket exists.
fn start_daemon(node: &Node) -> LoggedChild {
    let log = node.path("daemon.log");
    let socket = node.path("run/plexus.sock");
    // Its log is its stderr; it prints nothing else.
    let daemon = LoggedChild::spawn(
        Command::new(PLEXUS)
            .args(["daemon", "--metrics-address", "none", "--socket"])
            .arg(&socket)
            .env_clear(),
        log,
    );
    daemon.wait_until("no socket within 20 s", Duration::from_secs(20), || {
        socket.exists()
    });
    daemon
}

#[test]
fn the_daemons_json_log_and_a_calls_log_file_carry_the_same_fields() {
    let node = Node::new();
    let conf = node.conf(json!({"logFile": node.log_file(), "logToStderr": false}));
    node.add_ok("thin", &conf);
    let daemon = start_daemon(&node);
    let thick = node.conf(json!({
        "daemonSocket": node.path("run/plexus.sock"), "daemonFallback": "fail",
    }));
    node.add_ok("thick", &thick);
    let file = file_lines(&node.log_file());
    let daemon_log = json_lines(&daemon.log());
    let keys =
        |line: &Value| -> BTreeSet<String> { line.as_object().unwrap().keys().cloned().collect() };
    let (in_file, in_daemon) = (the_warning(&file), the_warning(&daemon_log));
    assert_eq!(keys(in_file), keys(in_daemon), "{in_file}\n{in_daemon}");
    let want: BTreeSet<String> = [
        "timestamp",
        "level",
        "target",
        "message",
        "pod",
        "container_id",
        "network",
        "interface",
    ]
    .map(String::from)
    .into();
    assert_eq!(keys(in_file), want);
    assert_eq!(in_daemon["container_id"], "thick");
    assert_eq!(in_file["container_id"], "thin");
    assert_eq!(in_daemon["pod"], in_file["pod"]);
}
