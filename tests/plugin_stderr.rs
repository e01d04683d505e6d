//! Issue 36: exec'd plugins that write to stderr (cni-SPEC §4: "plugins may
//! log to stderr") never hold up a call, and what they write is passed on:
//! - thin: on plexus's own stderr, as libcni passes a plugin's stderr to
//!   the runtime;
//! - thick: into the daemon's log, an event a line, naming the plugin, the
//!   pod, the container and the network.
//!
//! Through the real `plexus` binary, run as a runtime runs it in a node
//! namespace the test creates, with a noisy plugin as the cluster network,
//! as a NAD's plugin (a delegate) and as an IPAM plugin. Each noisy plugin is
//! a shell script, a stand-in that writes to stderr and then execs the real
//! reference plugin of /usr/lib/cni; everything else is real. Every call
//! must answer within [`call_limit`].

mod e2e_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use e2e_support::*;
use plexus_testkit::process::{output_within, LoggedChild};
use serde_json::{json, Value};

/// Any call, thin or thick, answers within this (on the host; longer in
/// the VM harness, `plexus_testkit::bound`), or the test fails.
fn call_limit() -> Duration {
    plexus_testkit::bound(Duration::from_secs(5))
}

/// What a stand-in does with its stderr around the reference plugin it
/// wraps. Each writes the line `<its name> says <CNI_COMMAND>` once.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Noise {
    /// One line, first.
    Line,
    /// 1 MB without a newline, then the line: sixteen times what a pipe holds.
    Megabytes,
    /// The line after the plugin's stdout (its result) is closed.
    AfterStdout,
    /// The line from a helper process that keeps stderr (not stdout) open
    /// for 5 s past the plugin's exit.
    Helper,
    /// On ADD, the line, then no answer at all (killed at `pluginTimeout`);
    /// other commands as [`Noise::Line`].
    HangOnAdd,
}

const MEGABYTES: usize = 1_000_000;

impl Noise {
    /// The script of stand-in `name` wrapping the reference plugin `real`.
    fn script(self, name: &str, real: &str) -> String {
        let real = format!("{REFERENCE}/{real}");
        let say = format!("echo \"{name} says $CNI_COMMAND\" >&2");
        match self {
            Noise::Line => format!("{say}\nexec {real}"),
            Noise::Megabytes => {
                format!(
                    "head -c {MEGABYTES} /dev/zero | tr '\\0' x >&2\necho >&2\n{say}\nexec {real}"
                )
            }
            Noise::AfterStdout => format!(
                "out=$({real}); rc=$?\nprintf '%s' \"$out\"\nexec 1>&-\nsleep 0.1\n{say}\nexit $rc"
            ),
            Noise::Helper => format!("(exec >/dev/null; {say}; sleep 5) &\nexec {real}"),
            Noise::HangOnAdd => {
                format!("{say}\nif [ \"$CNI_COMMAND\" = ADD ]; then exec sleep 60; fi\nexec {real}")
            }
        }
    }
}

/// The three places a plugin is exec'd from, each its own stand-in.
const CLUSTER_NETWORK: &str = "noisy-bridge";
const DELEGATE: &str = "noisy-macvlan";
const IPAM: &str = "noisy-ipam";
const ROLES: [(&str, &str); 3] = [
    (CLUSTER_NETWORK, "bridge"),
    (DELEGATE, "macvlan"),
    (IPAM, "host-local"),
];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Thin,
    Thick,
}

/// A node namespace with two pods, the stand-ins in a `CNI_PATH` directory
/// before the reference plugins, and in thick mode the daemon.
struct World {
    node: NodeWithPods,
    mode: Mode,
    cni_path: String,
    daemon: Option<LoggedChild>,
}

impl World {
    fn new(tag: &str, mode: Mode) -> Option<World> {
        let node = node_with_pods(tag)?;
        let bin = node.tmp.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let cni_path = format!("{}:{REFERENCE}", bin.display());
        let mut world = World {
            node,
            mode,
            cni_path,
            daemon: None,
        };
        if mode == Mode::Thick {
            world.daemon = Some(world.start_daemon());
        }
        Some(world)
    }

    fn tmp(&self) -> &Path {
        self.node.tmp.path()
    }

    fn socket(&self) -> PathBuf {
        self.tmp().join("run/plexus.sock")
    }

    /// `plexus daemon` in the node namespace, without an API server (its
    /// calls read the manifest directory), once its socket is there.
    fn start_daemon(&self) -> LoggedChild {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.node.node, PLEXUS, "daemon"])
            .arg("--socket")
            .arg(self.socket())
            .args(["--metrics-address", "none", "--dynamic-networks=false"])
            .arg("--state-dir")
            .arg(self.tmp().join("state"))
            .arg("--cni-dir")
            .arg(self.tmp().join("cache"))
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        let daemon = LoggedChild::spawn(&mut cmd, self.tmp().join("daemon.log"));
        daemon.wait_until("the daemon's socket", Duration::from_secs(30), || {
            self.socket().exists()
        });
        daemon
    }

    /// Write the stand-ins, each making `noise` (`quiet` ones just exec the
    /// reference plugin).
    fn stand_ins(&self, noise: impl Fn(&str) -> Option<Noise>) {
        for (name, real) in ROLES {
            let body = match noise(name) {
                Some(noise) => noise.script(name, real),
                None => format!("exec {REFERENCE}/{real}"),
            };
            write_script(&self.tmp().join("bin"), name, &body);
        }
    }

    /// plexus's conf: the cluster network is the noisy bridge; the pods
    /// select `noisymac` (the noisy macvlan, host-local) and `macnet`
    /// (plexus's macvlan, the noisy IPAM), from a manifest directory.
    fn conf(&self, plugin_timeout: Option<u64>) -> String {
        let tmp = self.tmp();
        let manifests = tmp.join("manifests");
        std::fs::create_dir_all(&manifests).unwrap();
        let noisymac = json!({"cniVersion": "1.0.0", "name": "noisymac", "type": DELEGATE,
            "master": "uplink0", "ipam": host_local(tmp, "10.21.0.0/24", "noisymac")});
        let macnet = json!({"cniVersion": "1.0.0", "name": "macnet", "type": "macvlan",
            "master": "uplink0",
            "ipam": {"type": IPAM, "subnet": "10.22.0.0/24", "dataDir": tmp.join("ipam/macnet")}});
        let mut text = String::new();
        for nad in [&noisymac, &macnet] {
            text.push_str(&format!(
                "---\napiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
                 metadata: {{name: {}, namespace: demo}}\nspec:\n  config: '{nad}'\n",
                nad["name"].as_str().unwrap()
            ));
        }
        for pod in ["p1", "p2"] {
            text.push_str(&format!(
                "---\nkind: Pod\nmetadata: {{name: {pod}, namespace: demo, \
                 annotations: {{k8s.v1.cni.cncf.io/networks: \"noisymac,macnet\"}}}}\n"
            ));
        }
        std::fs::write(manifests.join("demo.yaml"), text).unwrap();
        let mut conf = json!({
            "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
            "cniDir": tmp.join("cache"), "confDir": tmp.join("net.d"),
            "manifestDir": manifests,
            "delegates": [{"cniVersion": "1.0.0", "name": "podnet", "type": CLUSTER_NETWORK,
                           "bridge": "br-pod", "isGateway": true,
                           "ipam": host_local(tmp, "10.10.0.0/24", "pod")}],
        });
        self.finish(&mut conf, plugin_timeout);
        conf.to_string()
    }

    /// `conf` as this mode runs it, with its `pluginTimeout`.
    fn finish(&self, conf: &mut Value, plugin_timeout: Option<u64>) {
        if self.mode == Mode::Thick {
            conf["daemonSocket"] = json!(self.socket());
        }
        if let Some(seconds) = plugin_timeout {
            conf["pluginTimeout"] = json!(seconds);
        }
    }

    /// `command` for pod `i` (0 or 1), as the runtime runs plexus, within
    /// [`call_limit`]; what it printed, how long it took, and what the
    /// plugins wrote as this mode passes it on: plexus's stderr (thin), the
    /// daemon's log lines of the call (thick).
    fn call(&self, command: &str, i: usize, conf: &str) -> (Output, Duration, String) {
        let pod = ["p1", "p2"][i];
        let logged_before = self.daemon_log().len();
        let (out, took) = plexus_within(
            &self.node.node,
            &self.node.pods[i],
            &format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME={pod}"),
            &self.cni_path,
            [command, &format!("c-{pod}")],
            conf,
        );
        let passed_on = match self.mode {
            Mode::Thin => String::from_utf8_lossy(&out.stderr).into_owned(),
            Mode::Thick => self.daemon_log_settled()[logged_before..].to_string(),
        };
        (out, took, passed_on)
    }

    /// The daemon's log once it has stopped growing for 300 ms (at most
    /// `bound(10 s)`): the daemon passes a plugin's lines on as it gets
    /// them, never holding up the call for them, so on slow (emulated) CPUs
    /// the last may land just after the answer.
    fn daemon_log_settled(&self) -> String {
        let deadline = Instant::now() + plexus_testkit::bound(Duration::from_secs(10));
        let mut log = self.daemon_log();
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(300));
            let now = self.daemon_log();
            if now.len() == log.len() {
                break;
            }
            log = now;
        }
        log
    }

    fn daemon_log(&self) -> String {
        self.daemon
            .as_ref()
            .map(LoggedChild::log)
            .unwrap_or_default()
    }

    /// `name`'s line for `command` was passed on: as it was written (thin),
    /// or as a daemon log event naming the plugin plexus exec'd (`name`,
    /// or the plugin that exec'd it: `by`), the pod and the container of
    /// pod `pod` (thick).
    fn assert_said_by(&self, passed_on: &str, name: &str, by: &str, command: &str, pod: usize) {
        let line = format!("{name} says {command}");
        match self.mode {
            Mode::Thin => assert!(
                passed_on.lines().any(|l| l == line),
                "{line:?} not on plexus's stderr: {}",
                tail(passed_on)
            ),
            Mode::Thick => {
                let pod = ["p1", "p2"][pod];
                let found = passed_on
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .any(|event| {
                        event["target"] == "plexus::plugin_stderr"
                            && event["message"] == line.as_str()
                            && event["plugin"] == by
                            && event["pod"] == format!("demo/{pod}").as_str()
                            && event["container_id"] == format!("c-{pod}").as_str()
                            && event["level"] == "INFO"
                    });
                assert!(
                    found,
                    "{line:?} not in the daemon's log: {}",
                    tail(passed_on)
                );
            }
        }
    }
}

impl World {
    /// [`World::assert_said_by`] of a plugin plexus exec'd itself.
    fn assert_said(&self, passed_on: &str, name: &str, command: &str, pod: usize) {
        self.assert_said_by(passed_on, name, name, command, pod);
    }
}

/// plexus run as the runtime runs it in namespace `node`, for the pod in
/// namespace `pod_ns` (`eth0`), `[command, container ID]`, within
/// [`call_limit`]: what it printed and how long it took.
fn plexus_within(
    node: &str,
    pod_ns: &str,
    cni_args: &str,
    cni_path: &str,
    [command, container]: [&str; 2],
    conf: &str,
) -> (Output, Duration) {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", node, PLEXUS])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", container)
        .env("CNI_NETNS", format!("/var/run/netns/{pod_ns}"))
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", cni_path)
        .env("CNI_ARGS", cni_args);
    output_within(&mut cmd, conf, call_limit())
}

/// The end of a long text, for a failure message.
fn tail(text: &str) -> &str {
    let start = text.len().saturating_sub(2000);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    &text[start..]
}

fn write_script(dir: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// ADD and DEL of pod p1 with every stand-in making `noise`: both answer
/// within the limit, every stand-in's line is passed on, the pod has its
/// three interfaces, and nothing is left after the DEL.
fn every_role_makes(noise: Noise, w: &World) {
    let mode = w.mode;
    w.stand_ins(|_| Some(noise));
    let conf = w.conf(None);
    for command in ["ADD", "DEL"] {
        let (out, took, passed_on) = w.call(command, 0, &conf);
        assert_ok(&format!("{command} ({noise:?}, {mode:?}, {took:?})"), &out);
        for (name, _) in ROLES {
            w.assert_said(&passed_on, name, command, 0);
        }
        if noise == Noise::Megabytes && mode == Mode::Thin {
            // All of it, nothing dropped: the runtime reads as it comes.
            let xs = out.stderr.iter().filter(|&&b| b == b'x').count();
            assert!(xs >= ROLES.len() * MEGABYTES, "{xs} bytes of x");
            assert!(!passed_on.contains("were dropped"), "{}", tail(&passed_on));
        }
        if command == "ADD" {
            let mut links = link_names(&w.node.pods[0]);
            links.sort();
            assert_eq!(links, ["eth0", "lo", "net1", "net2"]);
        }
    }
    assert_eq!(link_names(&w.node.pods[0]), ["lo"]);
    assert_nothing_left(w.tmp());
}

impl Noise {
    fn tag(self) -> &'static str {
        match self {
            Noise::Line => "sl",
            Noise::Megabytes => "sm",
            Noise::AfterStdout => "sa",
            Noise::Helper => "sh",
            Noise::HangOnAdd => "sx",
        }
    }
}

impl Mode {
    fn tag(self) -> &'static str {
        match self {
            Mode::Thin => "n",
            Mode::Thick => "k",
        }
    }
}

/// `case` in a world of each mode, named `tag` and the mode's.
fn in_both_modes(tag: &str, case: impl Fn(&World)) {
    for mode in [Mode::Thin, Mode::Thick] {
        if let Some(world) = World::new(&format!("{tag}{}", mode.tag()), mode) {
            case(&world);
        }
    }
}

#[test]
fn a_line_on_stderr() {
    in_both_modes(Noise::Line.tag(), |w| every_role_makes(Noise::Line, w));
}

#[test]
fn megabytes_on_stderr() {
    in_both_modes(Noise::Megabytes.tag(), |w| {
        every_role_makes(Noise::Megabytes, w)
    });
}

#[test]
fn stderr_after_stdout_closed() {
    in_both_modes(Noise::AfterStdout.tag(), |w| {
        every_role_makes(Noise::AfterStdout, w)
    });
}

#[test]
fn a_helper_holding_stderr() {
    in_both_modes(Noise::Helper.tag(), |w| every_role_makes(Noise::Helper, w));
}

/// Each stand-in in turn hangs on ADD after its line (the others quiet):
/// the ADD fails at `pluginTimeout` with the plugin's words in the error,
/// the line was passed on, the failed ADD left no interface, and the
/// runtime's DEL after it leaves nothing.
fn a_plugin_that_logs_then_hangs_in(w: &World) {
    // 1 s on the host; the runtime's DEL after the failed ADD runs with the
    // same conf, and the reference plugins' DELs must fit in it in the VM too.
    let timeout = plexus_testkit::bound(Duration::from_secs(1));
    let conf = w.conf(Some(timeout.as_secs()));
    for (hung, _) in ROLES {
        w.stand_ins(|name| (name == hung).then_some(Noise::HangOnAdd));
        let (out, took, passed_on) = w.call("ADD", 0, &conf);
        let details = cni_details(&out, 103);
        assert!(
            details.contains(&format!("{hung}: "))
                && details.contains(&format!("did not finish within {}s", timeout.as_secs())),
            "{details}"
        );
        assert!(
            details.ends_with(&format!("; stderr: {hung} says ADD")),
            "{details}"
        );
        assert!(took >= timeout, "{took:?}");
        w.assert_said(&passed_on, hung, "ADD", 0);
        assert_eq!(link_names(&w.node.pods[0]), ["lo"], "{hung}");
        // cni-SPEC §3: the runtime DELs after a failed ADD.
        let (out, _, _) = w.call("DEL", 0, &conf);
        assert_ok(&format!("DEL after {hung} hung"), &out);
        assert_nothing_left(w.tmp());
    }
}

/// Issue 36's reproduction as it was filed: the cluster network is a
/// macvlan whose IPAM, `noisy`, writes a line and execs host-local. The ADD
/// hung until the runtime killed it; now ADD and DEL answer in
/// milliseconds, the line on plexus's stderr.
fn the_filed_reproduction_in(w: &World) {
    write_script(
        &w.tmp().join("bin"),
        "noisy",
        &format!("echo hello-from-ipam >&2\nexec {REFERENCE}/host-local"),
    );
    let mut conf = json!({"cniVersion": "1.0.0", "name": "npnet", "type": "plexus",
        "cniDir": w.tmp().join("cache"),
        "delegates": [{"cniVersion": "1.0.0", "name": "npnet", "type": "macvlan",
            "master": "uplink0",
            "ipam": {"type": "noisy", "dataDir": w.tmp().join("ipam/np"),
                     "subnet": "10.98.0.0/24"}}]});
    w.finish(&mut conf, None);
    let conf = conf.to_string();
    for command in ["ADD", "DEL"] {
        let started = Instant::now();
        let (out, took, passed_on) = w.call(command, 0, &conf);
        assert_ok(command, &out);
        assert!(
            took < plexus_testkit::bound(Duration::from_secs(2)),
            "{command}: {took:?}"
        );
        match w.mode {
            Mode::Thin => assert!(passed_on.contains("hello-from-ipam\n"), "{passed_on}"),
            Mode::Thick => assert!(
                passed_on.contains("\"message\":\"hello-from-ipam\""),
                "{passed_on}"
            ),
        }
        eprintln!("{command} ({:?}): {:?}", w.mode, started.elapsed());
    }
    assert_nothing_left(w.tmp());
}

/// The reference plugins, each wrapped so that it logs every call, as the
/// cluster network (a conflist: bridge with host-local, then tuning and
/// portmap) and as a NAD's plugin (macvlan with host-local): ADD, CHECK
/// and DEL of two pods work as with the quiet ones, and every wrapped
/// plugin's line of each command is passed on.
fn reference_plugins_that_log_in(w: &World) {
    let plugins = ["bridge", "host-local", "tuning", "portmap", "macvlan"];
    for real in plugins {
        write_script(
            &w.tmp().join("bin"),
            &format!("logging-{real}"),
            &Noise::Line.script(&format!("logging-{real}"), real),
        );
    }
    let tmp = w.tmp();
    let ipam = |subnet: &str, who: &str| json!({"type": "logging-host-local", "subnet": subnet, "dataDir": tmp.join("ipam").join(who)});
    let manifests = tmp.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let nad = json!({"cniVersion": "1.0.0", "name": "lognet", "type": "logging-macvlan",
        "master": "uplink0", "ipam": ipam("10.23.0.0/24", "lognet")});
    let mut text = format!(
        "---\napiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
         metadata: {{name: lognet, namespace: demo}}\nspec:\n  config: '{nad}'\n"
    );
    for pod in ["p1", "p2"] {
        text.push_str(&format!(
            "---\nkind: Pod\nmetadata: {{name: {pod}, namespace: demo, \
             annotations: {{k8s.v1.cni.cncf.io/networks: lognet}}}}\n"
        ));
    }
    std::fs::write(manifests.join("demo.yaml"), text).unwrap();
    let mut conf = json!({
        "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
        "cniDir": tmp.join("cache"), "confDir": tmp.join("net.d"), "manifestDir": manifests,
        "delegates": [{"cniVersion": "1.0.0", "name": "podnet", "plugins": [
            {"type": "logging-bridge", "bridge": "br-pod", "isGateway": true,
             "ipam": ipam("10.10.0.0/24", "pod")},
            {"type": "logging-tuning", "sysctl": {"net.ipv4.conf.eth0.arp_filter": "1"}},
            {"type": "logging-portmap", "capabilities": {"portMappings": true}},
        ]}],
    });
    w.finish(&mut conf, None);
    let conf = conf.to_string();
    for command in ["ADD", "CHECK", "DEL"] {
        for i in 0..2 {
            let (out, _, passed_on) = w.call(command, i, &conf);
            assert_ok(&format!("{command} of pod {i}"), &out);
            for real in ["bridge", "tuning", "portmap", "macvlan"] {
                w.assert_said(&passed_on, &format!("logging-{real}"), command, i);
            }
            // host-local is exec'd by the reference plugins, whose stderr it
            // shares (libcni's default), one line for each network.
            for by in ["logging-bridge", "logging-macvlan"] {
                w.assert_said_by(&passed_on, "logging-host-local", by, command, i);
            }
        }
        if command == "ADD" {
            assert!(ping(
                &w.node.pods[0],
                &addresses(&w.node.pods[1], "eth0")[0]
            ));
            assert!(ping(
                &w.node.pods[0],
                &addresses(&w.node.pods[1], "net1")[0]
            ));
        }
    }
    assert_nothing_left(tmp);
}

/// A NAD whose macvlan takes its address from whereabouts' IPPools, through
/// plexus in thin mode against the real API server, with deploy/'s CRDs and
/// whereabouts' flat configuration file (which names the kubeconfig); no
/// whereabouts binary is on the plugin path. Issue 36 filed this with the whereabouts binary
/// exec'd, whose leader-election lines on stderr hung thin mode; since
/// issue 33 plexus serves `whereabouts` in-process (`src/whereabouts/`),
/// so this is its end-to-end check, and the exec'd stderr cases are this
/// file's others. Two pods get distinct addresses within the call limit,
/// and their DELs free them.
#[test]
fn whereabouts_as_a_nads_ipam_in_thin_mode() {
    // No whereabouts binary and no CRDs of its own: plexus serves the
    // type, and kube-up applied deploy/crds/.
    let flat = |tmp: &Path| tmp.join("whereabouts.conf");
    let Some(kube) = kube_node("swa", "pxs", |tmp| {
        json!({"cniVersion": "1.0.0", "name": "macnet", "type": "macvlan", "master": "uplink0",
               "ipam": {"type": "whereabouts", "range": "10.77.0.0/24",
                        "configuration_path": flat(tmp)}})
    }) else {
        return;
    };
    let api = kube.api;
    let tmp = kube.tmp.path();
    std::fs::write(
        flat(tmp),
        json!({"datastore": "kubernetes",
               "kubernetes": {"kubeconfig": api.admin_kubeconfig()}})
        .to_string(),
    )
    .unwrap();
    let cni_path = REFERENCE.to_string();
    let conf = json!({
        "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
        "kubeconfig": api.plexus_kubeconfig(), "apiTimeout": 5,
        "cniDir": tmp.join("cache"), "confDir": tmp.join("net.d"),
        "delegates": [{"cniVersion": "1.0.0", "name": "podnet", "type": "bridge",
                       "bridge": "br-pod", "isGateway": true,
                       "ipam": host_local(tmp, "10.10.0.0/24", "pod")}],
    })
    .to_string();
    let args = |pod: &str| {
        format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={pod}",
            kube.kube_ns
        )
    };
    for pod in ["p1", "p2"] {
        api.apply(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\n  namespace: {}\n  \
             annotations: {{k8s.v1.cni.cncf.io/networks: macnet}}\n\
             spec: {{containers: [{{name: c, image: busybox}}]}}\n",
            kube.kube_ns
        ));
    }
    // `command` for pod `i` (p1 or p2), answered within the call limit.
    let call = |command: &str, i: usize| {
        let pod = ["p1", "p2"][i];
        let (out, took) = plexus_within(
            &kube.node,
            &kube.pods[i],
            &args(pod),
            &cni_path,
            [command, &format!("c-{pod}")],
            &conf,
        );
        assert_ok(&format!("{command} of {pod} ({took:?})"), &out);
        eprintln!("{command} of {pod} through whereabouts: {took:?}");
    };
    let mut addresses_given = Vec::new();
    for i in 0..2 {
        call("ADD", i);
        let net1 = addresses(&kube.pods[i], "net1");
        assert!(net1[0].starts_with("10.77.0."), "{net1:?}");
        addresses_given.push(net1[0].clone());
    }
    assert_ne!(addresses_given[0], addresses_given[1]);
    let pools = api.kubectl(&["get", "ippools.whereabouts.cni.cncf.io", "-A", "-o", "json"]);
    for given in &addresses_given {
        let offset = given.rsplit('.').next().unwrap();
        assert!(
            pools.contains(&format!("\"{offset}\"")),
            "{given} not in {pools}"
        );
    }
    for i in 0..2 {
        call("DEL", i);
    }
    let pools: Value = serde_json::from_str(&api.kubectl(&[
        "get",
        "ippools.whereabouts.cni.cncf.io",
        "-A",
        "-o",
        "json",
    ]))
    .unwrap();
    for pool in pools["items"].as_array().unwrap() {
        if pool["spec"]["range"] == "10.77.0.0/24" {
            let left = &pool["spec"]["allocations"];
            assert!(
                left.as_object().is_none_or(|a| a.is_empty()),
                "allocations left: {left}"
            );
        }
    }
}

#[test]
fn a_plugin_that_logs_then_hangs() {
    in_both_modes("sx", a_plugin_that_logs_then_hangs_in);
}

#[test]
fn the_filed_reproduction() {
    in_both_modes("sr", the_filed_reproduction_in);
}

#[test]
fn reference_plugins_that_log() {
    in_both_modes("sw", reference_plugins_that_log_in);
}
