//! The `plexus` binary as users and runtimes run it: subcommands, and plugin
//! mode (CNI_COMMAND set, config on stdin, result or error on stdout).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use plexus_testkit::process::output_with_stdin;
use serde_json::{json, Value};

const PLEXUS: &str = env!("CARGO_BIN_EXE_plexus");

fn run(args: &[&str]) -> Output {
    Command::new(PLEXUS)
        .args(args)
        .env_remove("CNI_COMMAND")
        .output()
        .expect("plexus runs")
}

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JSON `out` printed, which must have come with success.
fn ok_json(out: &Output) -> Value {
    assert!(out.status.success(), "{}", stderr(out));
    stdout_json(out)
}

/// `plexus plan --pod POD MORE...`, which must succeed: the plan.
fn run_plan(pod: &str, more: &[&str]) -> Value {
    let mut args = vec!["plan", "--pod", pod];
    args.extend(more);
    ok_json(&run(&args))
}

/// `plexus status --result RESULT --network NETWORK MORE...`.
fn status(result: &str, network: &str, more: &[&str]) -> Output {
    let mut args = vec!["status", "--result", result, "--network", network];
    args.extend(more);
    run(&args)
}

fn write(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path.display().to_string()
}

/// A test's input files, in a directory of their own that goes with it.
struct Inputs(tempfile::TempDir);

impl Inputs {
    fn new() -> Inputs {
        Inputs(tempfile::tempdir().unwrap())
    }

    /// A new directory with `body` written to `name` in it, and that file's
    /// path.
    fn with_file(name: &str, body: &str) -> (Inputs, String) {
        let dir = Inputs::new();
        let path = dir.file(name, body);
        (dir, path)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    /// `body` written to `name` here: its path, as an argument.
    fn file(&self, name: &str, body: &str) -> String {
        write(self.path(), name, body)
    }

    /// The directory `name` here, made with its parents.
    fn subdir(&self, name: &str) -> PathBuf {
        let dir = self.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}

/// The JSON blocks the demo prints after each "network-status of" line.
fn status_blocks(stdout: &str) -> Vec<Value> {
    let mut blocks = Vec::new();
    let mut lines = stdout.lines();
    while let Some(line) = lines.next() {
        if line.starts_with("network-status of ") {
            let block: Vec<&str> = lines.by_ref().take_while(|l| !l.is_empty()).collect();
            blocks.push(serde_json::from_str(&block.join("\n")).unwrap());
        }
    }
    blocks
}

fn link_names_here() -> Vec<String> {
    let out = Command::new("ip")
        .args(["-j", "link", "show"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut names: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn demo_attaches_two_pods_pings_and_leaves_nothing() {
    // The README's main job: two pods on a bridge network and a macvlan
    // network (multi-net-spec §4.1.1 and §4.1.2 selections), network-status
    // per §5, torn down again.
    if !plexus_testkit::require(&[plexus_testkit::Feature::Root]) {
        return;
    }
    let root_links = link_names_here();
    let out = run(&["demo"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}{}", stderr(&out));

    let pings: Vec<&str> = stdout.lines().filter(|l| l.starts_with("ping ")).collect();
    assert_eq!(pings.len(), 4, "{stdout}");
    for (from, to) in [("pod-a", "pod-b"), ("pod-b", "pod-a")] {
        for network in ["on podnet (eth0)", "on demo/macvlan-net (data0)"] {
            let prefix = format!("ping demo/{from} -> demo/{to} ");
            assert!(
                pings.iter().any(|l| l.starts_with(&prefix)
                    && l.contains(network)
                    && l.contains("reply in")),
                "{from} -> {to} {network}: {stdout}"
            );
        }
    }

    let blocks = status_blocks(&stdout);
    assert_eq!(blocks.len(), 2, "{stdout}");
    for block in &blocks {
        let entries = block.as_array().unwrap();
        assert_eq!(entries.len(), 2);
        let want = [
            ("podnet", "eth0", true, "10.88.0."),
            ("demo/macvlan-net", "data0", false, "192.168.50."),
        ];
        for (entry, (name, interface, default, subnet)) in entries.iter().zip(want) {
            assert_eq!(entry["name"], name);
            assert_eq!(entry["interface"], interface);
            assert_eq!(entry["default"], default);
            let ip = entry["ips"][0].as_str().unwrap();
            assert!(ip.starts_with(subnet), "{entry}");
        }
    }
    assert!(
        stdout.trim_end().ends_with("scratch directory are removed"),
        "{stdout}"
    );

    // The machine's own namespace is untouched and the demo's are gone.
    assert_eq!(link_names_here(), root_links);
    let left: Vec<String> = std::fs::read_dir("/var/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("plexus-demo-"))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn demo_without_root_says_why() {
    if !plexus_testkit::require(&[plexus_testkit::Feature::Root]) {
        return;
    }
    let out = Command::new("/usr/bin/setpriv")
        .args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            PLEXUS,
            "demo",
        ])
        .env_remove("CNI_COMMAND")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("must run as root: it creates network namespaces"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn plan_reads_manifest_files_and_directories() {
    let (dir, pod) = Inputs::with_file(
        "pod.json",
        r#"{"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns1",
                         "annotations": {"k8s.v1.cni.cncf.io/networks": "net-a@data1,ns2/net-b"}}}"#,
    );
    let nad_dir = dir.subdir("nads");
    write(
        &nad_dir,
        "a.yaml",
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: net-a, namespace: ns1}\n\
         spec:\n  config: '{\"cniVersion\": \"1.0.0\", \"type\": \"macvlan\"}'\n",
    );
    write(
        &nad_dir,
        "b.json",
        r#"{"kind": "List", "items": [{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": "net-b", "namespace": "ns2"},
            "spec": {"config": "{\"cniVersion\": \"0.4.0\", \"name\": \"b\", \"plugins\": [{\"type\": \"bridge\"}]}"}}]}"#,
    );
    let default = dir.file(
        "default.conflist",
        r#"{"cniVersion": "1.0.0", "name": "podnet", "plugins": [{"type": "bridge"}]}"#,
    );
    let nad_arg = nad_dir.display().to_string();

    let plan = run_plan(
        &pod,
        &[
            "--nad",
            &nad_arg,
            "--default-network",
            &default,
            "--container-id",
            "c1",
        ],
    );
    assert_eq!(
        plan["attachments"][1],
        json!({"network": "ns1/net-a", "ifname": "data1", "default": false,
               "cniArgs": "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=p;K8S_POD_INFRA_CONTAINER_ID=c1",
               "plugins": [{"cniVersion": "1.0.0", "name": "net-a", "type": "macvlan"}],
               "source": "NetworkAttachmentDefinition ns1/net-a spec.config"})
    );
    assert_eq!(plan["attachments"][2]["plugins"][0]["name"], "b");
    assert_eq!(plan["attachments"][2]["ifname"], "net2");

    // The default network from --conf-dir's first config, as Multus's "auto".
    let conf_dir = dir.subdir("net.d");
    write(
        &conf_dir,
        "10-first.conf",
        r#"{"cniVersion": "1.0.0", "name": "first", "type": "ptp"}"#,
    );
    let conf_dir_arg = conf_dir.display().to_string();
    let plan_in_conf_dir = |more: &[&str]| {
        let mut args = vec!["--nad", &nad_arg, "--conf-dir", &conf_dir_arg];
        args.extend(more);
        run_plan(&pod, &args)
    };
    assert_eq!(plan_in_conf_dir(&[])["attachments"][0]["network"], "first");

    // Keys of --config plexus does not read are listed with the warnings.
    let config = dir.file(
        "plexus.conf",
        r#"{"clusterNetwork": "first", "metricsPort": 9091, "fancyNewKey": true}"#,
    );
    let warnings = plan_in_conf_dir(&["--config", &config])["warnings"].to_string();
    assert!(
        warnings.contains("metricsPort: has no effect")
            && warnings.contains("fancyNewKey: unknown key, ignored"),
        "{warnings}"
    );
}

#[test]
fn plan_shows_the_auxiliary_chain_after_the_pods_networks() {
    // multus-cni docs/configuration.md "auxiliaryCNIChainName": passthru,
    // then the chain directory's *.conf in name order, as net<position>.
    let (dir, pod) = Inputs::with_file(
        "pod.yaml",
        "kind: Pod\nmetadata: {name: p, namespace: ns1}\n",
    );
    let chain = dir.subdir("net.d/vendor-chain");
    write(
        &chain,
        "10-sysctl.conf",
        r#"{"name": "ignored", "type": "tuning", "sysctl": {"net.ipv4.conf.eth0.arp_filter": "1"}}"#,
    );
    let conf = json!({"cniVersion": "1.1.0", "name": "plexus", "type": "plexus",
        "confDir": dir.path().join("net.d"), "auxiliaryCNIChainName": "vendor-chain",
        "delegates": [{"cniVersion": "1.0.0", "name": "podnet", "type": "bridge"}]});
    let conf = dir.file("plexus.conf", &conf.to_string());
    let plan = run_plan(&pod, &["--config", &conf]);
    assert_eq!(
        plan["attachments"][1],
        json!({"network": "vendor-chain", "ifname": "net1", "default": false,
               "cniArgs": "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=p",
               "plugins": [
                   {"cniVersion": "1.1.0", "name": "vendor-chain", "type": "passthru"},
                   {"cniVersion": "1.1.0", "name": "vendor-chain", "type": "tuning",
                    "sysctl": {"net.ipv4.conf.eth0.arp_filter": "1"}}],
               "source": "auxiliaryCNIChainName \"vendor-chain\"", "disableCheck": true})
    );
}

#[test]
fn plan_errors_name_the_input_and_reason() {
    let (dir, pod) = Inputs::with_file(
        "pod.yaml",
        "kind: Pod\nmetadata: {name: p, annotations: {k8s.v1.cni.cncf.io/networks: missing}}\n",
    );
    let default = dir.file(
        "d.conf",
        r#"{"cniVersion": "1.0.0", "name": "d", "type": "bridge"}"#,
    );
    let nope = dir.path().join("nope.yaml").display().to_string();
    let with_default = |more: &[&'static str]| {
        let mut args = vec!["--pod", &pod, "--default-network", &default];
        args.extend(more);
        args
    };
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--pod", &nope, "--default-network", &default],
            "nope.yaml",
        ),
        (
            vec!["--pod", &default, "--default-network", &default],
            "no document of kind Pod",
        ),
        (vec!["--pod", &pod], "no cluster-wide default network"),
        (with_default(&[]), "default/missing does not exist"),
        (
            with_default(&["--runtime-config", "[1]"]),
            "--runtime-config: must be a JSON object",
        ),
        (with_default(&["--cni-args", "A"]), "--cni-args"),
    ];
    for (args, want) in cases {
        let mut full = vec!["plan"];
        full.extend(args);
        let out = run(&full);
        assert_eq!(out.status.code(), Some(1), "{full:?}");
        assert!(stderr(&out).contains(want), "{full:?}: {}", stderr(&out));
    }
    // Names are typed as clap reads them: a usage error (exit 2) naming the
    // flag and the rule, before anything is read.
    for (flag, value, reason) in [
        ("--ifname", "a/b", "must not contain '/'"),
        ("--container-id", "a b", "must contain only alphanumerics"),
    ] {
        let mut full = vec!["plan"];
        full.extend(with_default(&[flag, value]));
        let out = run(&full);
        assert_eq!(out.status.code(), Some(2), "{full:?}");
        let err = stderr(&out);
        assert!(
            err.contains(flag) && err.contains(reason),
            "{full:?}: {err}"
        );
    }
}

#[test]
fn status_from_a_result_file() {
    let (dir, result) = Inputs::with_file(
        "result.json",
        r#"{"cniVersion": "1.0.0",
            "interfaces": [{"name": "cni0", "mac": "00:11:22:33:44:55"},
                           {"name": "eth0", "mac": "99:88:77:66:55:44", "sandbox": "/var/run/netns/blue"}],
            "ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1", "interface": 1}],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {"nameservers": ["10.1.0.1"]}}"#,
    );
    let out = status(&result, "ns/net", &["--default"]);
    // §5.3.7.4: no default-route without the selection's key...
    // The address bare, as Multus writes it (README "network-status ips").
    let without_key = json!({"name": "ns/net", "interface": "eth0", "ips": ["10.1.0.5"],
        "mac": "99:88:77:66:55:44", "default": true, "dns": {"nameservers": ["10.1.0.1"]}});
    assert_eq!(ok_json(&out), without_key);
    // ...and with `"default-route": []`, the gateway the result kept.
    let out = status(&result, "ns/net", &["--default", "--default-route"]);
    let mut with_key = without_key.clone();
    with_key["default-route"] = json!(["10.1.0.1"]);
    assert_eq!(ok_json(&out), with_key);
    let bad = dir.file(
        "bad.json",
        r#"{"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5"}]}"#,
    );
    let out = status(&bad, "n", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("ips[0].address"), "{}", stderr(&out));
}

#[test]
fn status_mac_comes_with_an_interface() {
    // multi-net-spec §5.3.4: "If the mac key is present, interface must also
    // be present." A sandbox interface whose name the plugin left empty.
    let (_dir, result) = Inputs::with_file(
        "result.json",
        r#"{"cniVersion": "1.0.0",
            "interfaces": [{"name": "", "mac": "02:00:00:00:00:07", "sandbox": "/var/run/netns/blue"}],
            "ips": [{"address": "10.1.0.5/16", "interface": 0}]}"#,
    );
    // With the CNI_IFNAME it was added as, that is the interface.
    let entry = ok_json(&status(&result, "ns/n", &["--ifname", "net1"]));
    assert_eq!(entry["interface"], "net1", "{entry}");
    assert_eq!(entry["mac"], "02:00:00:00:00:07", "{entry}");
    // Without one, no interface is known: no mac either.
    let entry = ok_json(&status(&result, "ns/n", &[]));
    assert!(
        entry.get("mac").is_none() && entry.get("interface").is_none(),
        "{entry}"
    );
    assert_eq!(entry["ips"], json!(["10.1.0.5"]));
}

#[test]
fn status_device_info_must_be_valid_device_information() {
    // multi-net-spec §5.3.8: the map "must contain the keys described in the
    // Device Information Specification" (device-info-SPEC §3.1).
    let (dir, result) = Inputs::with_file(
        "result.json",
        r#"{"cniVersion": "1.0.0", "interfaces": [{"name": "net1", "sandbox": "/p"}],
            "ips": [{"address": "10.1.0.5/16", "interface": 0}]}"#,
    );
    let with_info = |info: &str| {
        let file = dir.file("info.json", info);
        status(&result, "ns/n", &["--device-info", &file])
    };
    for (info, field) in [
        (r#"{"type": "pci"}"#, "version: required"),
        (r#"{"type": "pci", "version": "1.1.0"}"#, "pci: required"),
        (
            r#"{"type": "pci", "version": "1.1.0", "pci": {}}"#,
            "pci.pci-address: required",
        ),
        (r#"{"type": "gpu", "version": "1.1.0"}"#, "type: "),
        (r#"["pci"]"#, "device information"),
    ] {
        let out = with_info(info);
        assert_eq!(out.status.code(), Some(1), "{info}");
        let err = stderr(&out);
        assert!(
            err.contains("--device-info ") && err.contains(field),
            "{info}: {err}"
        );
    }
    let valid = r#"{"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:18:02.5"}}"#;
    assert_eq!(
        ok_json(&with_info(valid))["device-info"],
        serde_json::from_str::<Value>(valid).unwrap()
    );
}

#[test]
fn version_names_the_spec_versions() {
    let out = run(&["version"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"),
        "{text}"
    );
}

fn plugin(env: &[(&str, &str)], stdin: &str) -> Output {
    output_with_stdin(
        Command::new(PLEXUS).env_clear().envs(env.iter().copied()),
        stdin,
    )
}

fn plexus_conf(cni_dir: &Path) -> String {
    json!({"cniVersion": "1.0.0", "name": "plexus", "type": "plexus", "cniDir": cni_dir,
           "delegates": [{"cniVersion": "1.0.0", "name": "podnet", "type": "ptp"}]})
    .to_string()
}

#[test]
fn plugin_mode_speaks_cni() {
    // cni-SPEC §2 VERSION.
    let out = plugin(&[("CNI_COMMAND", "VERSION")], r#"{"cniVersion": "0.4.0"}"#);
    assert!(out.status.success());
    assert_eq!(
        stdout_json(&out),
        json!({"cniVersion": "0.4.0", "supportedVersions": ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]})
    );

    let cni_dir = tempfile::tempdir().unwrap();
    let conf = plexus_conf(cni_dir.path());
    let add_env = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "abc"),
        ("CNI_NETNS", "/var/run/netns/plexus-test-does-not-exist"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/nonexistent/cni/bin"),
    ];
    // A delegate plexus does not build in (ptp) is exec'd; one that cannot
    // be found fails ADD with an error naming it and
    // where plexus looked; nothing is left owing.
    let out = plugin(&add_env, &conf);
    assert_eq!(out.status.code(), Some(1));
    let err = stdout_json(&out);
    assert_eq!(err["cniVersion"], "1.0.0");
    let details = err["details"].as_str().unwrap();
    assert!(
        details.contains("ptp") && details.contains("/nonexistent/cni/bin"),
        "{err}"
    );

    // A bad conf is reported as such, naming the field.
    let out = plugin(
        &add_env,
        r#"{"cniVersion": "1.0.0", "name": "plexus", "type": "plexus"}"#,
    );
    assert_eq!(stdout_json(&out)["code"], 7);
    assert!(stdout_json(&out)["details"]
        .as_str()
        .unwrap()
        .contains("delegates"));

    // A missing variable is code 4 naming it.
    let out = plugin(&add_env[..3], &conf);
    assert_eq!(stdout_json(&out)["code"], 4);
    assert!(stdout_json(&out)["details"]
        .as_str()
        .unwrap()
        .contains("CNI_IFNAME"));

    // DEL succeeds, twice, and without CNI_NETNS (containerd's last DEL), and
    // leaves no record behind.
    let del_env = [
        ("CNI_COMMAND", "DEL"),
        ("CNI_CONTAINERID", "abc"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_NETNS", ""),
        ("CNI_PATH", "/nonexistent/cni/bin"),
    ];
    for _ in 0..2 {
        let out = plugin(&del_env, &conf);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(out.stdout.is_empty());
    }
    // The sandboxes' notes and locks directory stays (empty), as the
    // record directory itself does.
    let sandboxes = cni_dir.path().join("sandboxes");
    let notes: Vec<_> = std::fs::read_dir(&sandboxes)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    assert!(notes.is_empty(), "{notes:?}");
    let left: Vec<_> = std::fs::read_dir(cni_dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|name| name != "sandboxes")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

fn example(name: &str) -> String {
    format!("{}/examples/spec/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn spec_examples_plan_as_the_spec_says() {
    // (pod file, the attachments as (network, ifname) after the default
    // network's, whether the annotation is ignored with a warning)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);
    let cases: [Case; 11] = [
        (
            "4.1.1",
            &[
                ("my-namespace/net-a", "net1"),
                ("my-namespace/net-b", "net2"),
                ("other-ns/net-c", "net3"),
            ],
            false,
        ),
        (
            "4.1.2",
            &[
                ("my-namespace/net-a", "net1"),
                ("my-namespace/net-b", "net2"),
                ("other-ns/net-c", "net3"),
            ],
            false,
        ),
        ("4.1.2.1.3.1", &[("my-namespace/net-b", "net1")], false),
        ("4.1.2.1.4.1", &[("my-namespace/net-b", "net1")], false),
        ("4.1.2.1.6.1", &[("my-namespace/net-b", "net1")], false),
        ("4.1.2.1.7.1", &[("my-namespace/net-b", "net1")], false),
        ("4.1.2.1.8.1", &[], true),
        (
            "4.1.2.1.9.1",
            &[
                ("my-namespace/net-a", "net1"),
                ("my-namespace/net-b", "net2"),
            ],
            false,
        ),
        ("4.1.2.1.10.1", &[("my-namespace/net-b", "net1")], false),
        (
            "4.1.2.1.11.1",
            &[
                ("my-namespace/net-a", "net1"),
                ("my-namespace/net-b", "net2"),
            ],
            false,
        ),
        (
            "4.2.2",
            &[
                ("my-namespace/net-a", "net1"),
                ("my-namespace/net-a", "net2"),
            ],
            false,
        ),
    ];
    let (nads, default) = (example("nads-4.yaml"), example("cluster-network.conflist"));
    for (section, want, warned) in cases {
        let pod = example(&format!("pod-{section}.yaml"));
        let plan = run_plan(&pod, &["--nad", &nads, "--default-network", &default]);
        let got: Vec<(String, String)> = plan["attachments"].as_array().unwrap()[1..]
            .iter()
            .map(|a| {
                (
                    a["network"].as_str().unwrap().into(),
                    a["ifname"].as_str().unwrap().into(),
                )
            })
            .collect();
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(n, i)| (n.to_string(), i.to_string()))
            .collect();
        assert_eq!(got, want, "§{section}");
        assert_eq!(
            plan["attachments"][0]["network"], "cluster-wide-default",
            "§{section}: §6.2 default first"
        );
        assert_eq!(
            !plan["warnings"].as_array().unwrap().is_empty(),
            warned,
            "§{section}: {}",
            plan["warnings"]
        );
    }
}

#[test]
fn spec_3_2_examples_plan_as_the_spec_says() {
    let (pod, default) = (example("pod-3.2.yaml"), example("cluster-network.conflist"));
    let conf_dir = example("net.d");
    for (nad, first_type) in [
        ("nad-3.2.1.yaml", "bridge"),
        ("nad-3.2.3.yaml", "awesome-plugin"),
        ("nad-3.2.4.yaml", "bridge"),
    ] {
        let plan = run_plan(
            &pod,
            &[
                "--nad",
                &example(nad),
                "--conf-dir",
                &conf_dir,
                "--default-network",
                &default,
            ],
        );
        let first = &plan["attachments"][1]["plugins"][0];
        assert_eq!(first["type"], first_type, "{nad}");
        // §3.4.2: the name is there, injected where the config had none.
        assert_eq!(first["name"], "a-bridge-network", "{nad}");
    }
}

#[test]
fn spec_5_4_status_entries() {
    // The example's entry has "default-route": as if its selection had the
    // key (§5.3.7.4).
    let out = status(
        &example("result-5.4-default.json"),
        "namespace-a/cluster-wide-default",
        &["--default", "--default-route"],
    );
    assert_eq!(
        ok_json(&out),
        json!({"name": "namespace-a/cluster-wide-default", "interface": "eth5",
               // Bare, as Multus writes them; the spec's example shows prefixes.
               "ips": ["192.0.2.2", "2001:db8::2230"], "mac": "02:11:22:33:44:54", "mtu": 1500,
               "default-route": ["192.0.2.1"], "default": true})
    );
    let out = status(
        &example("result-5.4-some-network.json"),
        "namespace-b/some-network",
        &[],
    );
    assert_eq!(
        ok_json(&out),
        json!({"name": "namespace-b/some-network", "interface": "eth1",
               "ips": ["192.0.2.2", "2001:db8::2234"], "mac": "02:11:22:33:44:55",
               "dns": {"nameservers": ["192.0.2.1", "2001:db8:4860::8888"], "search": ["eng.example.com", "example.com"]},
               "default": false})
    );
}
