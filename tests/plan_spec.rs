//! The planner against every example of multi-net-spec v1.3 §3.2, §3.4.2.1,
//! §4.1 and §4.2.2, plus its rules for failures. Each test names its section.

use std::collections::BTreeMap;
use std::io::Write;

use plexus::cni::config::NetworkConfigList;
use plexus::cni::names::{ContainerId, IfName};
use plexus::conf_files::ConfDir;
use plexus::manifest;
use plexus::netattach::nad::NetworkAttachmentDefinition;
use plexus::netattach::pod::Pod;
use plexus::plan::{plan, ConfFiles, DefaultNetwork, Plan, PlanInputs, PlanOptions};
use plexus::policy::SelectionPolicy;

/// The options of a call whose interface is `eth0`, under `policy`.
fn eth0(policy: SelectionPolicy) -> PlanOptions {
    PlanOptions::new(policy, IfName::new("eth0").unwrap())
}

/// [`eth0`] under the default policy.
fn defaults() -> PlanOptions {
    eth0(SelectionPolicy::default())
}
use serde_json::{json, Value};

type Nads = BTreeMap<(String, String), NetworkAttachmentDefinition>;

fn nads(yaml: &str) -> Nads {
    manifest::nads(&manifest::parse_documents(yaml, "nads.yaml").unwrap()).unwrap()
}

/// A file of `examples/spec/`, where the spec's examples are kept verbatim
/// for users to run `plexus plan` on (tests/cli.rs runs them too).
fn example(name: &str) -> String {
    let path = format!("{}/examples/spec/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The selection annotation of the example pod for spec section `section`.
fn example_annotation(section: &str) -> String {
    let docs =
        manifest::parse_documents(&example(&format!("pod-{section}.yaml")), section).unwrap();
    manifest::single_pod(&docs, section).unwrap().annotations["k8s.v1.cni.cncf.io/networks"].clone()
}

fn pod_with(annotation: Option<&str>) -> Pod {
    let mut annotations = BTreeMap::new();
    if let Some(a) = annotation {
        annotations.insert("k8s.v1.cni.cncf.io/networks".to_string(), a.to_string());
    }
    Pod {
        namespace: "my-namespace".into(),
        name: "my-pod".into(),
        uid: Some("uid-1".into()),
        annotations,
    }
}

fn default_network() -> DefaultNetwork {
    DefaultNetwork {
        network: "cluster-wide-default".into(),
        config: NetworkConfigList::from_value(&json!({
            "cniVersion": "1.0.0", "name": "cluster-wide-default",
            "plugins": [{"type": "bridge", "bridge": "cni0"},
                        {"type": "portmap", "capabilities": {"portMappings": true}}]
        }))
        .unwrap(),
        source: "test".into(),
    }
}

/// NADs for `net-a`, `net-b` (declaring every capability), `other-ns/net-c`.
fn spec_nads() -> String {
    example("nads-4.yaml")
}

/// Plan `pod` against the NADs `all` and [`default_network`]; a failure as
/// the CNI error a runtime would read.
fn plan_pod(
    pod: &Pod,
    all: &Nads,
    conf_dir: Option<&ConfDir>,
    options: &PlanOptions,
) -> Result<Plan, plexus::cni::CniError> {
    let inputs = PlanInputs {
        nads: all,
        conf_files: conf_dir.map(|d| d as &dyn ConfFiles),
        devices: None,
        claims: None,
        default_network: &default_network(),
        options,
    };
    plan(pod, &inputs).map_err(Into::into)
}

fn plan_for(
    annotation: Option<&str>,
    options: &PlanOptions,
    extra_nads: &str,
) -> Result<Plan, plexus::cni::CniError> {
    let all = nads(&format!("{}\n---\n{extra_nads}", spec_nads()));
    plan_pod(&pod_with(annotation), &all, None, options)
}

/// The pod's selection annotation was ignored, the cluster network its
/// only attachment, with a warning naming where in the annotation (`at`,
/// e.g. `[0].ips[0]`) and `why`.
#[track_caller]
fn assert_annotation_ignored(p: &Plan, at: &str, why: &str) {
    assert_eq!(p.attachments.len(), 1);
    assert!(
        p.warnings[0].starts_with(&format!(
            "annotation k8s.v1.cni.cncf.io/networks{at} ignored"
        )) && p.warnings[0].contains(why),
        "{:?}",
        p.warnings
    );
}

/// A NAD `name` of my-namespace holding the CNI config `config`.
fn nad_yaml(name: &str, config: Value) -> String {
    format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
         metadata: {{name: {name}, namespace: my-namespace}}\nspec:\n  config: '{config}'\n"
    )
}

fn ok_plan(annotation: &str) -> Plan {
    plan_for(Some(annotation), &defaults(), "").unwrap()
}

fn summary(p: &Plan) -> Vec<(String, String, bool)> {
    p.attachments
        .iter()
        .map(|a| (a.network.clone(), a.ifname.to_string(), a.default))
        .collect()
}

fn s(network: &str, ifname: &str, default: bool) -> (String, String, bool) {
    (network.into(), ifname.into(), default)
}

/// The attachments after the cluster network's, none a default one:
/// (network, ifname).
fn selected(p: &Plan) -> Vec<(&str, &str)> {
    p.attachments[1..]
        .iter()
        .map(|a| {
            assert!(!a.default, "{} is no default network", a.network);
            (a.network.as_str(), a.ifname.as_str())
        })
        .collect()
}

/// Plan the §3.2 example pod (namespace `default`, selecting
/// `a-bridge-network`) against one of the §3.2 NAD examples.
fn plan_3_2(nad_file: &str, conf_dir: Option<&ConfDir>) -> Result<Plan, plexus::cni::CniError> {
    let all = nads(&example(nad_file));
    let docs = manifest::parse_documents(&example("pod-3.2.yaml"), "pod-3.2.yaml").unwrap();
    let pod = manifest::single_pod(&docs, "pod-3.2.yaml").unwrap();
    plan_pod(&pod, &all, conf_dir, &defaults())
}

#[test]
fn s3_2_1_single_config_in_object() {
    let p = plan_3_2("nad-3.2.1.yaml", None).unwrap();
    assert_eq!(
        summary(&p),
        [
            s("cluster-wide-default", "eth0", true),
            s("default/a-bridge-network", "net1", false)
        ]
    );
    assert_eq!(
        Value::Object(p.attachments[1].plugins[0].clone()),
        json!({"cniVersion": "0.3.0", "name": "a-bridge-network", "type": "bridge", "bridge": "br0",
               "isGateway": true,
               "ipam": {"type": "host-local", "subnet": "192.168.5.0/24", "dataDir": "/mnt/cluster-ipam"}})
    );
}

#[test]
fn s3_2_2_config_list_in_object_and_s7_1_injection() {
    let p = plan_3_2("nad-3.2.2.yaml", None);
    // The pod selects a-bridge-network; §3.2.2 defines another-bridge-network.
    assert_eq!(p.unwrap_err().code.as_u32(), 100);
    let all = nads(&example("nad-3.2.2.yaml"));
    let mut pod = pod_with(Some("default/another-bridge-network"));
    pod.namespace = "default".into();
    let p = plan_pod(&pod, &all, None, &defaults()).unwrap();
    let plugins: Vec<Value> = p.attachments[1]
        .plugins
        .iter()
        .cloned()
        .map(Value::Object)
        .collect();
    // §7.1: cniVersion and name of the list injected into every plugin.
    assert_eq!(
        plugins,
        [
            json!({"cniVersion": "0.3.0", "name": "another-bridge-network", "type": "bridge", "bridge": "br0",
                   "ipam": {"type": "host-local", "subnet": "192.168.5.0/24"}}),
            json!({"cniVersion": "0.3.0", "name": "another-bridge-network", "type": "port-forwarding"}),
            json!({"cniVersion": "0.3.0", "name": "another-bridge-network", "type": "tuning",
                   "sysctl": {"net.ipv4.conf.all.log_martians": "1"}}),
        ]
    );
}

#[test]
fn s3_2_3_and_s3_4_2_1_name_injection() {
    let p = plan_3_2("nad-3.2.3.yaml", None).unwrap();
    // Exactly the JSON §3.4.2.1 says the delegate receives, in that order.
    assert_eq!(
        Value::Object(p.attachments[1].plugins[0].clone()),
        json!({"cniVersion": "0.3.0", "name": "a-bridge-network", "type": "awesome-plugin"})
    );
    let keys: Vec<&String> = p.attachments[1].plugins[0].keys().collect();
    assert_eq!(keys, ["cniVersion", "name", "type"]);
}

fn write(dir: &std::path::Path, file: &str, body: &str) {
    std::fs::File::create(dir.join(file))
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
}

#[test]
fn s3_2_4_and_s3_4_1_resolution_order() {
    // The example's own conf dir holds a config list named a-bridge-network.
    let spec_dir = ConfDir::new(format!(
        "{}/examples/spec/net.d",
        env!("CARGO_MANIFEST_DIR")
    ));
    let p = plan_3_2("nad-3.2.4.yaml", Some(&spec_dir)).unwrap();
    assert_eq!(p.attachments[1].plugins.len(), 2);
    assert!(p.attachments[1]
        .source
        .ends_with("10-a-bridge-network.conflist"));

    let dir = tempfile::tempdir().unwrap();
    // Rule 4: nothing on disk → the request fails.
    let err = plan_3_2("nad-3.2.4.yaml", Some(&ConfDir::new(dir.path()))).unwrap_err();
    assert!(err.details.contains("§3.4.1 rule 4"), "{err}");

    // Rule 3: a single config whose name matches; broken files are skipped.
    write(
        dir.path(),
        "10-single.conf",
        r#"{"cniVersion": "0.4.0", "name": "a-bridge-network", "type": "from-conf"}"#,
    );
    write(
        dir.path(),
        "05-other.conflist",
        r#"{"cniVersion": "0.4.0", "name": "other", "plugins": [{"type": "x"}]}"#,
    );
    write(dir.path(), "01-broken.conf", "{not json");
    let p = plan_3_2("nad-3.2.4.yaml", Some(&ConfDir::new(dir.path()))).unwrap();
    assert_eq!(p.attachments[1].plugins[0]["type"], "from-conf");
    assert!(p.attachments[1].source.ends_with("10-single.conf"));
    assert!(
        p.warnings.iter().any(|w| w.contains("01-broken.conf")),
        "{:?}",
        p.warnings
    );

    // Rule 2 beats rule 3: a config list whose name matches, even later in name order.
    write(
        dir.path(),
        "20-list.conflist",
        r#"{"cniVersion": "0.4.0", "name": "a-bridge-network", "plugins": [{"type": "from-list"}, {"type": "tuning"}]}"#,
    );
    let p = plan_3_2("nad-3.2.4.yaml", Some(&ConfDir::new(dir.path()))).unwrap();
    assert_eq!(p.attachments[1].plugins[0]["type"], "from-list");
    assert_eq!(p.attachments[1].plugins[1]["name"], "a-bridge-network");

    // Rule 1 beats both: spec.config (§3.2.1's NAD has one).
    let p = plan_3_2("nad-3.2.1.yaml", Some(&ConfDir::new(dir.path()))).unwrap();
    assert_eq!(p.attachments[1].plugins[0]["type"], "bridge");
}

/// The runtimeConfig that the example pod of spec section `section` gives
/// plugin `plugin` of its first selected network.
fn example_runtime_config(section: &str, plugin: usize) -> Value {
    example_plan(section).attachments[1].plugins[plugin]["runtimeConfig"].clone()
}

fn example_plan(section: &str) -> Plan {
    plan_for(Some(&example_annotation(section)), &defaults(), "").unwrap()
}

#[test]
fn s4_1_1_comma_delimited_format() {
    let p = example_plan("4.1.1");
    assert_eq!(
        summary(&p),
        [
            s("cluster-wide-default", "eth0", true),
            s("my-namespace/net-a", "net1", false),
            s("my-namespace/net-b", "net2", false),
            s("other-ns/net-c", "net3", false),
        ]
    );
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

#[test]
fn s4_1_2_json_list_format() {
    let p = example_plan("4.1.2");
    assert_eq!(
        selected(&p),
        [
            ("my-namespace/net-a", "net1"),
            ("my-namespace/net-b", "net2"),
            ("other-ns/net-c", "net3")
        ]
    );
    let b = &p.attachments[2].plugins;
    assert_eq!(b[0]["runtimeConfig"], json!({"ips": ["1.2.3.4"]}));
    assert_eq!(b[1]["runtimeConfig"], json!({"mac": "aa:bb:cc:dd:ee:ff"}));
    // Plugins not declaring a capability get no runtimeConfig, and
    // `capabilities` is never passed on (cni-SPEC §3).
    assert!(b[2].get("runtimeConfig").is_none());
    assert!(b.iter().all(|p| p.get("capabilities").is_none()));
}

#[test]
fn s4_1_2_1_3_ips_become_runtime_config() {
    // §4.1.2.1.3.2: exactly the runtimeConfig the spec shows.
    assert_eq!(
        example_runtime_config("4.1.2.1.3.1", 0),
        json!({"ips": ["10.2.2.42/24", "2001:db8::5/64"]})
    );
}

#[test]
fn s4_1_2_1_4_mac_becomes_runtime_config() {
    // §4.1.2.1.4.2.
    assert_eq!(
        example_runtime_config("4.1.2.1.4.1", 1),
        json!({"mac": "02:23:45:67:89:01"})
    );
}

#[test]
fn s4_1_2_1_5_interface_names() {
    let p = ok_plan(
        r#"[{"name": "net-a", "interface": "net2"}, {"name": "net-b"}, {"name": "net-a"}]"#,
    );
    // net-b would be net2 by position, which net-a asked for explicitly.
    assert_eq!(
        p.attachments
            .iter()
            .map(|a| a.ifname.as_str())
            .collect::<Vec<_>>(),
        ["eth0", "net2", "net3", "net4"]
    );

    let err = plan_for(
        Some(r#"[{"name": "net-a", "interface": "x0"}, {"name": "net-b", "interface": "x0"}]"#),
        &defaults(),
        "",
    )
    .unwrap_err();
    assert_eq!(err.code.as_u32(), 101);
    assert!(
        err.details.contains("[1].interface") && err.details.contains("\"x0\""),
        "{err}"
    );

    let err = plan_for(Some("net-a@eth0"), &defaults(), "").unwrap_err();
    assert!(err.details.contains("already used"), "{err}");
}

#[test]
fn s4_1_2_1_6_cni_args_merge_over_nad_args() {
    // §4.1.2.1.6.2: the selection's cni-args win over the NAD's args.
    let p = ok_plan(r#"[{"name": "net-a", "cni-args": {"spoofchk": "on"}}]"#);
    assert_eq!(
        p.attachments[1].plugins[0]["args"],
        json!({"cni": {"spoofchk": "on", "keep": 1}})
    );
    // The example itself: net-b has no args of its own.
    let p = example_plan("4.1.2.1.6.1");
    for plugin in &p.attachments[1].plugins {
        assert_eq!(plugin["args"], json!({"cni": {"spoofchk": "on"}}));
    }
}

#[test]
fn s4_1_2_1_7_port_mappings() {
    assert_eq!(
        example_runtime_config("4.1.2.1.7.1", 2),
        json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
    );
}

#[test]
fn s4_1_2_1_8_bandwidth() {
    // As printed in the spec, the example carries `//` comments: not JSON, so
    // the annotation is invalid and ignored with a warning.
    assert_annotation_ignored(&example_plan("4.1.2.1.8.1"), "", "JSON");

    // The same annotation without the comments.
    let uncommented: String = example_annotation("4.1.2.1.8.1")
        .lines()
        .map(|l| l.split("//").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    let p = ok_plan(&uncommented);
    assert_eq!(
        p.attachments[1].plugins[3]["runtimeConfig"],
        json!({"bandwidth": {"ingressRate": 2048, "ingressBurst": 300, "egressRate": 8000, "egressBurst": 200}})
    );
}

#[test]
fn s4_1_2_1_9_default_route() {
    let cleared = |p: &Plan| -> Vec<bool> {
        p.attachments
            .iter()
            .map(|a| a.clear_default_route)
            .collect()
    };
    // The spec's example: net-b takes the default route; it is cleared from
    // the cluster network and from net-a, which lacks the key ("flush the
    // default route from the default network attachment and any attachments
    // that do not have the "default-route" key set"; Multus's
    // `types.CheckGatewayConfig` marks both for filtering).
    let p = example_plan("4.1.2.1.9.1");
    assert_eq!(cleared(&p), [true, true, false]);
    assert_eq!(
        p.attachments[2].default_route,
        Some(vec!["10.0.0.1".parse().unwrap()])
    );
    assert_eq!(
        p.attachments[2].to_value()["defaultRoute"],
        json!(["10.0.0.1"])
    );
    assert!(p.attachments[1].default_route.is_none());
    assert_eq!(
        p.attachments[1].to_value()["clearDefaultRoute"],
        json!(true)
    );

    // `"default-route": []`: that attachment keeps its own gateway, every
    // other one loses its default route.
    let p = ok_plan(r#"[{"name": "net-a"}, {"name": "net-b", "default-route": []}]"#);
    assert_eq!(cleared(&p), [true, true, false]);
    assert_eq!(p.attachments[2].default_route, Some(vec![]));

    // No selection with the key: every attachment keeps its routes.
    let p = ok_plan(r#"[{"name": "net-a"}, {"name": "net-b"}]"#);
    assert!(p.attachments.iter().all(|a| !a.clear_default_route));

    // More than one element with default-route: the annotation is invalid.
    let p = ok_plan(
        r#"[{"name": "net-a", "default-route": []}, {"name": "net-b", "default-route": ["10.0.0.1"]}]"#,
    );
    assert_eq!(p.attachments.len(), 1);
    assert!(!p.attachments[0].clear_default_route);
}

#[test]
fn s4_1_2_1_10_infiniband_guid() {
    // §4.1.2.1.10.2: runtimeConfig infinibandGUID.
    assert_eq!(
        example_runtime_config("4.1.2.1.10.1", 4),
        json!({"infinibandGUID": "24:8a:07:03:00:8d:ae:2f"})
    );
}

#[test]
fn s4_1_2_1_11_ipam_claim_reference() {
    let p = example_plan("4.1.2.1.11.1");
    assert_eq!(
        p.attachments[2].ipam_claim_reference.as_deref(),
        Some("vm123.tenantblue")
    );
    let err = plan_for(
        Some(r#"[{"name": "net-b", "ips": ["10.0.0.2/24"], "ipam-claim-reference": "c"}]"#),
        &defaults(),
        "",
    )
    .unwrap_err();
    assert!(err.details.contains("§4.1.2.1.11"), "{err}");
}

#[test]
fn capabilities_must_be_declared() {
    // §4.1.2.1.3.2 and siblings: no plugin of net-a declares the capability →
    // the attachment fails.
    for (annotation, key) in [
        (
            r#"[{"name": "net-a", "ips": ["10.1.1.1/24"]}]"#,
            "capabilities.ips",
        ),
        (
            r#"[{"name": "net-a", "mac": "02:00:00:00:00:01"}]"#,
            "capabilities.mac",
        ),
        (
            r#"[{"name": "net-a", "portMappings": [{"hostPort": 1, "containerPort": 2}]}]"#,
            "capabilities.portMappings",
        ),
        (
            r#"[{"name": "net-a", "bandwidth": {"egressRate": 10}}]"#,
            "capabilities.bandwidth",
        ),
        (
            r#"[{"name": "net-a", "infiniband-guid": "00:00:00:00:00:00:00:01"}]"#,
            "capabilities.infinibandGUID",
        ),
    ] {
        let err = plan_for(Some(annotation), &defaults(), "").unwrap_err();
        assert_eq!(err.code.as_u32(), 101, "{err}");
        assert!(
            err.details.contains(key) && err.details.contains("my-namespace/net-a"),
            "{err}"
        );
    }
}

#[test]
fn s4_2_2_same_network_twice() {
    let p = example_plan("4.2.2");
    assert_eq!(
        selected(&p),
        [
            ("my-namespace/net-a", "net1"),
            ("my-namespace/net-a", "net2")
        ]
    );
}

#[test]
fn s6_2_default_network_first_with_runtime_config_s7_5() {
    let options = eth0(SelectionPolicy::default())
        .with_runtime_config(
            json!({"portMappings": [{"hostPort": 80, "containerPort": 8080, "protocol": "tcp"}]})
                .as_object()
                .unwrap()
                .clone(),
        )
        .with_container(ContainerId::new("abc123").unwrap());
    let p = plan_for(Some("net-b"), &options, "").unwrap();
    let d = &p.attachments[0];
    assert!(d.default);
    assert_eq!(
        d.plugins[1]["runtimeConfig"]["portMappings"][0]["hostPort"],
        80
    );
    // §7.5: net-b's portmap declares the capability too, but gets nothing.
    assert!(p.attachments[1].plugins[2].get("runtimeConfig").is_none());
    assert_eq!(
        d.cni_args,
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=my-namespace;K8S_POD_NAME=my-pod;K8S_POD_INFRA_CONTAINER_ID=abc123;K8S_POD_UID=uid-1"
    );
    assert_eq!(p.attachments[1].cni_args, d.cni_args);
}

/// podman sends `--network net:ip=..,mac=..` as `CNI_ARGS` `IP`/`MAC`
/// (cni-CONVENTIONS "CNI_ARGS"), the equivalents of the `ips`/`mac`
/// capabilities: like runtimeConfig they reach the default network only
/// (§7.5); every other key still reaches every attachment.
#[test]
fn s7_5_runtime_ip_and_mac_in_cni_args_reach_the_default_network_only() {
    let runtime_args = "IgnoreUnknown=1;K8S_POD_NAME=web;MAC=02:42:0a:58:07:32;IP=10.88.7.50;X=1";
    let options = eth0(SelectionPolicy {
        default_networks: vec!["net-a".into()],
        plexus_namespace: "my-namespace".into(),
        ..SelectionPolicy::default()
    })
    .with_cni_args(Some(
        plexus::cni::args::CniArgs::parse(runtime_args).unwrap(),
    ));
    let p = plan_for(Some("net-b"), &options, "").unwrap();
    assert_eq!(p.attachments.len(), 3);
    assert_eq!(p.attachments[0].cni_args, runtime_args);
    for secondary in &p.attachments[1..] {
        assert_eq!(
            secondary.cni_args, "IgnoreUnknown=1;K8S_POD_NAME=web;X=1",
            "{}",
            secondary.network
        );
    }
}

#[test]
fn invalid_annotation_is_ignored_or_fails_when_strict() {
    let bad = r#"[{"name": "net-b", "ips": ["1.2.3.4/33"]}]"#;
    let p = plan_for(Some(bad), &defaults(), "").unwrap();
    assert_annotation_ignored(&p, "[0].ips[0]", "\"1.2.3.4/33\" is not an IP address");

    let strict = eth0(SelectionPolicy {
        strict_annotations: true,
        ..SelectionPolicy::default()
    });
    let err = plan_for(Some(bad), &strict, "").unwrap_err();
    assert_eq!(err.code.as_u32(), 7);
    assert!(
        err.details.contains("[0].ips[0]") && err.details.contains("strictAnnotations"),
        "{err}"
    );
}

#[test]
fn missing_network_fails() {
    let err = plan_for(Some("net-zzz"), &defaults(), "").unwrap_err();
    assert_eq!(err.code.as_u32(), 100);
    assert!(err.details.contains("my-namespace/net-zzz"), "{err}");
}

#[test]
fn bad_nad_config_names_the_nad() {
    let nad = nad_yaml(
        "broken",
        json!({"cniVersion": "1.0.0", "plugins": [{"type": 3}]}),
    );
    let err = plan_for(Some("broken"), &defaults(), &nad).unwrap_err();
    assert!(
        err.details.contains("my-namespace/broken spec.config")
            && err.details.contains("plugins[0].type"),
        "{err}"
    );
}

#[test]
fn s7_4_namespace_isolation() {
    let isolated = SelectionPolicy {
        namespace_isolation: true,
        ..SelectionPolicy::default()
    };
    let err = plan_for(Some("net-a,other-ns/net-c"), &eth0(isolated.clone()), "").unwrap_err();
    assert!(
        err.details.contains("other-ns/net-c") && err.details.contains("§7.4"),
        "{err}"
    );
    let global = eth0(SelectionPolicy {
        global_namespaces: vec!["other-ns".into()],
        ..isolated
    });
    assert_eq!(
        plan_for(Some("net-a,other-ns/net-c"), &global, "")
            .unwrap()
            .attachments
            .len(),
        3
    );
}

#[test]
fn system_namespaces_withhold_default_networks_but_honour_the_pods_selection() {
    // §7.2: a selected network is attached or the operation fails; like
    // Multus's `systemNamespaces`, only `defaultNetworks` are withheld.
    let all = nads(&format!(
        "{}\n---\n{}",
        spec_nads(),
        spec_nads().replace("namespace: my-namespace", "namespace: kube-system")
    ));
    let options = eth0(SelectionPolicy {
        default_networks: vec!["my-namespace/net-a".into()],
        ..SelectionPolicy::default()
    });
    let plan_in = |namespace: &str| {
        let mut pod = pod_with(Some("net-b"));
        pod.namespace = namespace.into();
        plan_pod(&pod, &all, None, &options).unwrap()
    };
    let system = plan_in("kube-system");
    assert_eq!(
        selected(&system),
        [("kube-system/net-b", "net1")],
        "{:?}",
        system.warnings
    );
    assert!(system.warnings.is_empty(), "{:?}", system.warnings);
    // Elsewhere the default networks come first.
    let other = plan_in("my-namespace");
    assert_eq!(
        selected(&other),
        [
            ("my-namespace/net-a", "net1"),
            ("my-namespace/net-b", "net2")
        ]
    );
}

#[test]
fn default_networks_follow_the_cluster_network() {
    let options = eth0(SelectionPolicy {
        default_networks: vec!["my-namespace/net-a".into()],
        ..SelectionPolicy::default()
    });
    let p = plan_for(Some("net-b"), &options, "").unwrap();
    assert_eq!(
        selected(&p),
        [
            ("my-namespace/net-a", "net1"),
            ("my-namespace/net-b", "net2")
        ]
    );
}

#[test]
fn pod_can_override_the_default_network() {
    let all = nads(&spec_nads());
    let mut pod = pod_with(None);
    pod.annotations.insert(
        "v1.multus-cni.io/default-network".into(),
        "other-ns/net-c".into(),
    );
    let p = plan_pod(&pod, &all, None, &defaults()).unwrap();
    assert_eq!(summary(&p), [s("other-ns/net-c", "eth0", true)]);
}

#[test]
fn plan_json_contract() {
    let p = ok_plan("net-a");
    let v = p.to_value();
    let a = &v["attachments"][1];
    for key in ["network", "ifname", "default", "cniArgs", "plugins"] {
        assert!(a.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["warnings"], json!([]));
    assert!(a["plugins"][0].get("prevResult").is_none());
}

#[test]
fn s8_a_network_config_cannot_set_plexus_args() {
    // args.plexus carries the IPAMClaim an address belongs to (src/plan/claims.rs);
    // a NAD that set it could take addresses of another namespace's claim.
    let nad = nad_yaml(
        "thief",
        json!({"cniVersion": "1.0.0", "type": "macvlan",
               "args": {"plexus": {"persistentOwner": "ipamclaim_other_vm"}},
               "ipam": {"type": "host-local", "subnet": "10.9.0.0/24"}}),
    );
    let e = plan_for(Some("thief"), &defaults(), &nad).unwrap_err();
    assert_eq!(e.code, plexus::cni::ErrorCode::InvalidConfig);
    assert!(
        e.details
            .contains("plugins[0].args.plexus: reserved for plexus itself"),
        "{e}"
    );
}

/// device-info-SPEC §5.1: a plugin declaring `CNIDeviceInfoFile` gets the
/// attachment's file (§4.2), unique per attachment; plexus's built-in
/// drivers that describe their device (sriov) get it without declaring it,
/// as NADs written for sriov-cni do not; an attachment nothing describes
/// has no file. Without a container ID (`plexus plan`) there is none.
#[test]
fn device_info_file_5_1_goes_to_declaring_plugins_and_built_in_device_drivers() {
    let extra = r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: vf, namespace: my-namespace}
spec:
  config: '{"cniVersion": "1.0.0", "type": "sriov", "deviceID": "0000:3b:02.1"}'
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: declares, namespace: my-namespace}
spec:
  config: '{"cniVersion": "1.0.0", "plugins": [{"type": "x", "capabilities": {"CNIDeviceInfoFile": true}}, {"type": "tuning"}]}'
"#;
    let options = eth0(SelectionPolicy {
        device_info_dir: "/run/devinfo".into(),
        ..SelectionPolicy::default()
    })
    .with_container(ContainerId::new("c1").unwrap());
    let p = plan_for(Some("vf,declares,net-a"), &options, extra).unwrap();
    let file = |i: usize| {
        p.attachments[i]
            .device_info
            .as_ref()
            .map(|f| f.cni.display().to_string())
    };
    let given = |i: usize, k: usize| {
        Value::Object(p.attachments[i].plugins[k].clone())["runtimeConfig"]["CNIDeviceInfoFile"]
            .clone()
    };
    assert_eq!(file(0), None, "the cluster network's plugins take none");
    assert_eq!(
        file(1).as_deref(),
        Some("/run/devinfo/cni/my-namespace-vf-c1-net1-device.json")
    );
    assert_eq!(given(1, 0), json!(file(1).unwrap()));
    assert_eq!(
        file(2).as_deref(),
        Some("/run/devinfo/cni/my-namespace-declares-c1-net2-device.json")
    );
    assert_eq!(given(2, 0), json!(file(2).unwrap()));
    assert_eq!(
        given(2, 1),
        Value::Null,
        "tuning neither declares nor describes"
    );
    assert_eq!(file(3), None);
    assert!(p.attachments.iter().all(|a| a
        .device_info
        .as_ref()
        .is_none_or(|f| f.device_plugin.is_none())));

    // A NAD cannot choose where a built-in driver writes: plexus's path
    // replaces one the NAD's own runtimeConfig names, and without one
    // (off the node) the NAD's is dropped.
    let sneaky = extra.replace(
        r#""deviceID": "0000:3b:02.1"}'"#,
        r#""deviceID": "0000:3b:02.1", "runtimeConfig": {"CNIDeviceInfoFile": "/etc/cron.d/x-device.json"}}'"#,
    );
    assert_ne!(sneaky, extra);
    let p = plan_for(Some("vf"), &options, &sneaky).unwrap();
    assert_eq!(
        Value::Object(p.attachments[1].plugins[0].clone())["runtimeConfig"]["CNIDeviceInfoFile"],
        "/run/devinfo/cni/my-namespace-vf-c1-net1-device.json"
    );
    let off_node = plan_for(Some("vf"), &defaults(), &sneaky).unwrap();
    assert_eq!(
        Value::Object(off_node.attachments[1].plugins[0].clone())["runtimeConfig"],
        json!({})
    );
    let off_node = plan_for(Some("vf"), &defaults(), extra).unwrap();
    assert_eq!(off_node.attachments[1].device_info, None);
    assert_eq!(
        off_node.attachments[1].plugins[0].get("runtimeConfig"),
        None
    );
}

#[test]
fn the_nads_read_ahead_are_those_the_annotation_may_select() {
    // Issue 36: a thin ADD reads its NADs in one round trip
    // (Cluster::prefetch_nads); the list is the planner's own reading of
    // the annotation (§4.1.1, §4.1.2), each NAD once, and §7.4's isolation
    // leaves out what the pod may not select.
    let pod = pod_with(Some("a, other/b, a@net2, global/c"));
    let options = defaults();
    let pair = |ns: &str, name: &str| (ns.to_string(), name.to_string());
    assert_eq!(
        plexus::plan::selected_nads(&pod, &options),
        [
            pair("global", "c"),
            pair("my-namespace", "a"),
            pair("other", "b")
        ]
    );
    let isolated = eth0(SelectionPolicy {
        namespace_isolation: true,
        global_namespaces: vec!["global".into()],
        ..SelectionPolicy::default()
    });
    assert_eq!(
        plexus::plan::selected_nads(&pod, &isolated),
        [pair("global", "c"), pair("my-namespace", "a")]
    );
    // An annotation the planner ignores reads nothing ahead.
    assert!(plexus::plan::selected_nads(&pod_with(Some("[{")), &options).is_empty());
}

/// Devices of the pod's claims prepared by plexus's DRA driver (issue 49):
/// each is attached after the selections, on the network its claim's
/// configuration names, as its `interfaceName` (else `net<position>`),
/// the device handed over as Multus hands a device-plugin device (a PCI
/// address) or by the plugin's own key (a netdev without one); the plan
/// names each claimed attachment for the claim's status. A NAD named by a
/// claim obeys namespace isolation as a selection does.
#[test]
fn dra_claimed_devices_are_attached_after_the_selections() {
    use plexus::dra::driver::claimed::ClaimedNetwork;
    use plexus::dra::driver::inventory::DeviceKind;
    use plexus::dra::driver::opaque::{Network, NetworkConfig};
    use plexus::dra::driver::prepare::PreparedDevice;

    struct Claimed(Vec<ClaimedNetwork>);
    impl plexus::cluster::DraSource for Claimed {
        fn claimed_devices(
            &self,
            _: &Pod,
        ) -> Result<plexus::dra::ClaimedDevices, plexus::cluster::ClusterError> {
            Ok(Default::default())
        }
        fn claimed_networks(&self, pod: &Pod) -> Vec<ClaimedNetwork> {
            assert_eq!(pod.uid.as_deref(), Some("uid-1"));
            self.0.clone()
        }
    }
    let claimed = |device: &str, id: &str, kind, ifname: Option<&str>, network| ClaimedNetwork {
        namespace: "my-namespace".into(),
        name: "c".into(),
        device: PreparedDevice {
            request: "net".into(),
            pool: "node-a".into(),
            device: device.into(),
            kind,
            device_id: id.into(),
            netdev: Some("dra0".into()),
            char_devices: vec![],
            cdi_device_ids: vec![],
            network: None,
        },
        config: NetworkConfig {
            requests: vec![],
            interface_name: ifname.map(String::from),
            network,
            field: "status.allocation.devices.config[0]".into(),
        },
    };
    let nad = |namespace: &str, name: &str| Network::Attachment {
        namespace: namespace.into(),
        name: name.into(),
    };
    let inline =
        Network::Inline(json!({"cniVersion": "1.0.0", "name": "hd", "type": "host-device"}));
    let source = Claimed(vec![
        claimed(
            "vf-a",
            "0000:3b:02.1",
            DeviceKind::Vf,
            Some("net9"),
            nad("my-namespace", "net-a"),
        ),
        claimed("net-dra0", "dra0", DeviceKind::Netdev, None, inline),
    ]);
    let all = nads(&spec_nads());
    let options = defaults();
    let inputs = PlanInputs {
        nads: &all,
        conf_files: None,
        devices: None,
        claims: Some(&source),
        default_network: &default_network(),
        options: &options,
    };
    let p = plan(&pod_with(Some("net-b")), &inputs).unwrap();
    assert_eq!(
        summary(&p),
        [
            s("cluster-wide-default", "eth0", true),
            s("my-namespace/net-b", "net1", false),
            s("my-namespace/net-a", "net9", false),
            s("hd", "net3", false),
        ]
    );
    let vf = &p.attachments[2].plugins[0];
    assert_eq!(
        (vf["deviceID"].as_str(), vf["pciBusID"].as_str()),
        (Some("0000:3b:02.1"), Some("0000:3b:02.1"))
    );
    let hd = &p.attachments[3].plugins[0];
    assert_eq!(hd["device"], "dra0");
    assert!(hd.get("deviceID").is_none(), "{hd:?}");
    let named: Vec<(&str, &str, &str)> = p
        .claimed
        .iter()
        .map(|c| (c.ifname.as_str(), c.claim.as_str(), c.device.as_str()))
        .collect();
    assert_eq!(named, [("net9", "c", "vf-a"), ("net3", "c", "net-dra0")]);

    // Isolation: a claim's NAD of another namespace is refused.
    let mut isolated = defaults();
    isolated.policy.namespace_isolation = true;
    let source = Claimed(vec![claimed(
        "vf-a",
        "0000:3b:02.1",
        DeviceKind::Vf,
        None,
        nad("other-ns", "net-c"),
    )]);
    let inputs = PlanInputs {
        claims: Some(&source),
        options: &isolated,
        ..inputs
    };
    let e = plexus::cni::CniError::from(plan(&pod_with(None), &inputs).unwrap_err());
    assert!(
        e.details
            .contains("ResourceClaim my-namespace/c device vf-a"),
        "{e:?}"
    );
}
