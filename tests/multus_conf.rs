//! The cluster network and the networks of every pod, configured as a Multus
//! user configures them (Multus's pkg/types/conf.go `LoadNetConf`,
//! pkg/k8sclient/k8sclient.go `getNetDelegate`, `GetDefaultNetworks`,
//! `GetNetworkDelegates`), planned against NADs from manifests and conf dirs
//! made here. Sections are multi-net-spec v1.3's.

use std::collections::BTreeMap;
use std::path::Path;

use plexus::cni::error::{codes, ErrorCode};
use plexus::cni::names::IfName;
use plexus::conf_files::ConfDir;
use plexus::config::PlexusConf;
use plexus::manifest;
use plexus::netattach::nad::NetworkAttachmentDefinition;
use plexus::netattach::pod::Pod;
use plexus::plan::{cluster_network, plan, Plan, PlanInputs, PlanOptions};
use serde_json::{json, Value};

type Nads = BTreeMap<(String, String), NetworkAttachmentDefinition>;

/// NADs: `kube-system/cluster-nad` (the operator's), `kube-system/extra`,
/// `my-namespace/mine`, `other-ns/theirs`, `default/shared`; each a macvlan
/// named after itself.
fn nads() -> Nads {
    let nad = |ns: &str, name: &str| {
        format!(
            "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
             metadata: {{name: {name}, namespace: {ns}}}\n\
             spec:\n  config: '{{\"cniVersion\": \"1.0.0\", \"type\": \"macvlan\", \"master\": \"{name}0\"}}'\n"
        )
    };
    let yaml = [
        nad("kube-system", "cluster-nad"),
        nad("kube-system", "extra"),
        nad("my-namespace", "mine"),
        nad("other-ns", "theirs"),
        nad("default", "shared"),
    ]
    .join("---\n");
    manifest::nads(&manifest::parse_documents(&yaml, "nads.yaml").unwrap()).unwrap()
}

fn pod(namespace: &str, selection: Option<&str>) -> Pod {
    let mut annotations = BTreeMap::new();
    if let Some(s) = selection {
        annotations.insert("k8s.v1.cni.cncf.io/networks".to_string(), s.to_string());
    }
    Pod {
        namespace: namespace.into(),
        name: "p".into(),
        uid: Some("uid-1".into()),
        annotations,
    }
}

fn write(dir: &Path, file: &str, value: Value) {
    std::fs::write(dir.join(file), value.to_string()).unwrap();
}

/// A CNI config `name` of one plugin, of type `kind`.
fn single(name: &str, kind: &str) -> Value {
    json!({"cniVersion": "1.0.0", "name": name, "type": kind})
}

/// A CNI config list `name` of plugins of types `kinds`.
fn list(name: &str, kinds: &[&str]) -> Value {
    let plugins: Vec<Value> = kinds.iter().map(|k| json!({"type": k})).collect();
    json!({"cniVersion": "1.0.0", "name": name, "plugins": plugins})
}

fn conf(value: Value) -> PlexusConf {
    PlexusConf::from_value(&value).unwrap()
}

/// Plan `pod` with plexus's conf `value` as the runtime would: the cluster
/// network resolved from the conf, `confDir` read from disk.
fn plan_with(value: Value, pod: &Pod) -> Result<Plan, plexus::cni::CniError> {
    let conf = conf(value);
    let nads = nads();
    let conf_dir = ConfDir::new(&conf.conf_dir);
    let default_network = cluster_network(
        &conf.cluster_network,
        &nads,
        Some(&conf_dir),
        &conf.policy.plexus_namespace,
    )?;
    let options = PlanOptions::new(conf.policy.clone(), IfName::new("eth0").unwrap())
        .with_runtime_config(conf.runtime_config.clone());
    Ok(plan(
        pod,
        &PlanInputs {
            nads: &nads,
            conf_files: Some(&conf_dir),
            devices: None,
            claims: None,
            default_network: &default_network,
            options: &options,
        },
    )?)
}

/// (network, ifname, first plugin's type, source) of each attachment.
fn summary(p: &Plan) -> Vec<(String, String, String, String)> {
    p.attachments
        .iter()
        .map(|a| {
            (
                a.network.clone(),
                a.ifname.to_string(),
                a.plugins[0]["type"].as_str().unwrap_or("").to_string(),
                a.source.clone(),
            )
        })
        .collect()
}

fn networks(p: &Plan) -> Vec<(&str, &str)> {
    p.attachments
        .iter()
        .map(|a| (a.network.as_str(), a.ifname.as_str()))
        .collect()
}

#[test]
fn cluster_network_naming_a_directory_takes_its_first_conf() {
    // getNetDelegate "option3": a directory's first config in file-name
    // order (plexus's own conflist skipped, as Multus skips 00-multus).
    let dir = tempfile::tempdir().unwrap();
    let net_d = dir.path().join("net.d");
    std::fs::create_dir(&net_d).unwrap();
    let cluster = json!({"clusterNetwork": net_d.to_str().unwrap()});

    let err = plan_with(cluster.clone(), &pod("my-namespace", None)).unwrap_err();
    assert_eq!(err.code, ErrorCode::Plugin(codes::NETWORK_NOT_FOUND));
    assert!(
        err.details.starts_with("clusterNetwork: ")
            && err.details.contains("holding no CNI config"),
        "{err}"
    );

    write(
        &net_d,
        "00-plexus.conflist",
        list("plexus-cni-network", &["plexus"]),
    );
    write(&net_d, "20-late.conf", single("late", "ptp"));
    write(
        &net_d,
        "10-flannel.conflist",
        list("cbr0", &["bridge", "portmap"]),
    );
    let p = plan_with(cluster, &pod("my-namespace", None)).unwrap();
    let s = summary(&p);
    assert_eq!(
        (s[0].0.as_str(), s[0].1.as_str(), s[0].2.as_str()),
        ("cbr0", "eth0", "bridge")
    );
    assert!(s[0].3.ends_with("10-flannel.conflist"), "{}", s[0].3);
    assert!(p.attachments[0].default);
}

#[test]
fn cluster_network_wins_over_delegates() {
    // LoadNetConf loads `delegates` only when `clusterNetwork` is empty.
    let value = json!({
        "clusterNetwork": "cluster-nad",
        "delegates": [{"cniVersion": "1.0.0", "name": "podnet", "type": "bridge"},
                      {"cniVersion": "1.0.0", "name": "second", "type": "ptp"}],
    });
    assert_eq!(
        conf(value.clone()).warnings,
        ["delegates: not used, clusterNetwork is given and wins (as in Multus)"]
    );
    let p = plan_with(value, &pod("my-namespace", None)).unwrap();
    assert_eq!(networks(&p), [("kube-system/cluster-nad", "eth0")]);
}

#[test]
fn further_delegates_are_attached_to_every_pod_as_net1_net2() {
    // Multus: LoadNetConf keeps every delegate, [0] the master plugin; CmdAdd
    // attaches them in order, `getIfname` naming each non-master
    // `net<index in the delegate list>`; the pod's selections follow.
    // Unlike `defaultNetworks`, system namespaces get them too.
    let value = json!({
        "multusNamespace": "kube-system",
        "delegates": [
            {"cniVersion": "1.0.0", "name": "podnet", "type": "bridge"},
            {"cniVersion": "1.0.0", "name": "storage", "type": "macvlan", "master": "eth1"},
            {"cniVersion": "1.0.0", "name": "backup", "plugins": [{"type": "ipvlan", "master": "eth2"}]},
        ],
    });
    let p = plan_with(value.clone(), &pod("my-namespace", Some("mine"))).unwrap();
    assert_eq!(
        networks(&p),
        [
            ("podnet", "eth0"),
            ("storage", "net1"),
            ("backup", "net2"),
            ("my-namespace/mine", "net3"),
        ]
    );
    assert_eq!(p.attachments[1].source, "delegates[1]");
    assert!(!p.attachments[1].default && !p.attachments[2].default);
    assert_eq!(p.attachments[2].plugins[0]["master"], "eth2");
    assert_eq!(p.attachments[2].plugins[0]["name"], "backup");

    let system = plan_with(value, &pod("kube-system", None)).unwrap();
    assert_eq!(
        networks(&system),
        [("podnet", "eth0"), ("storage", "net1"), ("backup", "net2")]
    );
}

#[test]
fn default_networks_in_every_form_getnetdelegate_knows() {
    // getNetDelegate: a NAD (in multusNamespace), else a config's `name` in
    // confDir; a path: a .conflist or .conf file, or a directory's first conf.
    let dir = tempfile::tempdir().unwrap();
    let conf_dir = dir.path().join("multus.d");
    let by_path = dir.path().join("by-path");
    let a_dir = dir.path().join("a-dir");
    for d in [&conf_dir, &by_path, &a_dir] {
        std::fs::create_dir(d).unwrap();
    }
    write(&conf_dir, "10-storage.conf", single("storage", "ipvlan"));
    write(&by_path, "file-net.conflist", list("file-net", &["ptp"]));
    write(&by_path, "single.conf", single("single", "tap"));
    write(&a_dir, "50-b.conf", single("dir-b", "vlan"));
    write(&a_dir, "40-a.conflist", list("dir-a", &["host-device"]));
    let value = json!({
        "delegates": [{"cniVersion": "1.0.0", "name": "podnet", "type": "bridge"}],
        "confDir": conf_dir.to_str().unwrap(),
        "defaultNetworks": [
            "extra",
            "other-ns/theirs",
            "storage",
            by_path.join("file-net.conflist").to_str().unwrap(),
            by_path.join("single.conf").to_str().unwrap(),
            a_dir.to_str().unwrap(),
        ],
    });
    let p = plan_with(value.clone(), &pod("my-namespace", Some("mine"))).unwrap();
    let s = summary(&p);
    let short: Vec<(&str, &str, &str)> = s
        .iter()
        .map(|(n, i, t, _)| (n.as_str(), i.as_str(), t.as_str()))
        .collect();
    assert_eq!(
        short,
        [
            ("podnet", "eth0", "bridge"),
            ("kube-system/extra", "net1", "macvlan"),
            ("other-ns/theirs", "net2", "macvlan"),
            ("storage", "net3", "ipvlan"),
            ("file-net", "net4", "ptp"),
            ("single", "net5", "tap"),
            ("dir-a", "net6", "host-device"),
            ("my-namespace/mine", "net7", "macvlan"),
        ]
    );
    assert!(s[3].3.ends_with("multus.d/10-storage.conf"), "{}", s[3].3);
    assert!(s[6].3.ends_with("a-dir/40-a.conflist"), "{}", s[6].3);

    // Each failure names its entry.
    let mut missing = value.clone();
    missing["defaultNetworks"] = json!(["storage", "nowhere"]);
    let err = plan_with(missing, &pod("my-namespace", None)).unwrap_err();
    assert_eq!(err.code, ErrorCode::Plugin(codes::NETWORK_NOT_FOUND));
    assert!(
        err.details
            .starts_with("defaultNetworks[1]: \"nowhere\" is neither"),
        "{err}"
    );
    let mut gone = value;
    gone["defaultNetworks"] = json!([by_path.join("gone.conf").to_str().unwrap()]);
    let err = plan_with(gone, &pod("my-namespace", None)).unwrap_err();
    assert!(err.details.contains("does not exist"), "{err}");
}

#[test]
fn s7_4_namespace_isolation_allows_default_as_multus_nonisolatednamespaces() {
    // Multus's GetDefaultNetConf: NonIsolatedNamespaces = ["default"], which
    // GetNetworkDelegates lets any pod use under namespaceIsolation;
    // `globalNamespaces` replaces that list.
    let isolated = json!({"clusterNetwork": "cluster-nad", "namespaceIsolation": true});
    let p = plan_with(
        isolated.clone(),
        &pod("my-namespace", Some("mine,default/shared")),
    )
    .unwrap();
    assert_eq!(p.attachments.len(), 3);
    let err = plan_with(
        isolated.clone(),
        &pod("my-namespace", Some("other-ns/theirs")),
    )
    .unwrap_err();
    assert!(
        err.details.contains("other-ns/theirs") && err.details.contains("§7.4"),
        "{err}"
    );

    let mut global = isolated;
    global["globalNamespaces"] = json!("other-ns");
    assert_eq!(
        plan_with(
            global.clone(),
            &pod("my-namespace", Some("other-ns/theirs"))
        )
        .unwrap()
        .attachments
        .len(),
        2
    );
    let err = plan_with(global, &pod("my-namespace", Some("default/shared"))).unwrap_err();
    assert!(err.details.contains("default/shared"), "{err}");
}

#[test]
fn conf_dir_defaults_to_multus_conf_dir() {
    // Multus's defaultConfDir (pkg/types/conf.go): where NADs without
    // spec.config find their config (§3.4.1 rules 2-3).
    let c = conf(json!({"clusterNetwork": "x"}));
    assert_eq!(c.conf_dir, Path::new("/etc/cni/multus/net.d"));
}
