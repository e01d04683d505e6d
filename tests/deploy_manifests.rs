//! The manifests in deploy/ parse and say what operators rely on.

use plexus::manifest;
use serde_json::Value;

fn docs(file: &str) -> Vec<Value> {
    let path = format!("{}/deploy/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    manifest::parse_documents(&text, &path)
        .unwrap()
        .into_iter()
        .map(|d| d.value)
        .collect()
}

/// The `spec` of the CRD in `file`, which must be named `name`.
fn crd_spec(file: &str, name: &str) -> Value {
    let crd = &docs(file)[0];
    assert_eq!(crd["metadata"]["name"], name);
    crd["spec"].clone()
}

#[test]
fn nad_crd_follows_multi_net_spec_3_1() {
    let spec = &crd_spec(
        "crds/network-attachment-definition.yaml",
        "network-attachment-definitions.k8s.cni.cncf.io",
    );
    assert_eq!(spec["group"], "k8s.cni.cncf.io");
    assert_eq!(spec["scope"], "Namespaced");
    assert_eq!(spec["names"]["kind"], "NetworkAttachmentDefinition");
    assert_eq!(spec["names"]["shortNames"][0], "net-attach-def");
    assert_eq!(spec["versions"][0]["name"], "v1");
    assert_eq!(
        spec["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["config"]["type"],
        "string"
    );
}

#[test]
fn ipamclaim_crd_follows_multi_net_spec_8_1() {
    let crd = &docs("crds/ipamclaim.yaml")[0];
    let version = &crd["spec"]["versions"][0];
    assert_eq!(crd["spec"]["names"]["kind"], "IPAMClaim");
    assert_eq!(version["name"], "v1alpha1");
    assert!(version["subresources"]["status"].is_object());
    let schema = &version["schema"]["openAPIV3Schema"]["properties"];
    assert_eq!(
        schema["spec"]["required"],
        serde_json::json!(["interface", "network"])
    );
    assert_eq!(
        schema["status"]["properties"]["ips"]["items"]["type"],
        "string"
    );
    // Kept by the API server (a structural schema prunes unknown fields):
    // plexus writes the pod holding the claim.
    assert_eq!(
        schema["status"]["properties"]["ownerPod"]["properties"]["name"]["type"],
        "string"
    );
}

#[test]
fn rbac_grants_exactly_what_plexus_uses() {
    // Least privilege: the requests src/cluster/kube.rs and the daemon's
    // watches (src/cluster/watch.rs) make, no more (tests/kube/ and
    // tests/daemon/ prove they suffice, with this role's token). The
    // daemon's hot-plug (issue 26) adds none: it reads the pods it already
    // watches, writes network-status with the same pods/status PATCH, posts
    // events, and binds a hot-plugged IPAMClaim with the same ipamclaims
    // GET and status PATCH as ADD; it never updates a pod (no pods
    // patch/update).
    // The installer, stopping, reads its DaemonSet (tests/cluster_ops.rs:
    // kept through a rolling update). Cluster-wide IPAM (issue 33) reads,
    // creates and compare-and-swaps IPPools (the daemon lists and watches them:
    // tests/daemon/whereabouts.rs), and reads, creates and deletes
    // reservations (tests/whereabouts_ipam.rs, with this role's token); its
    // reconciler lists both, and the pods' metadata (tests/daemon/
    // whereabouts.rs), and holds one Lease of kube-system's. Node slices
    // read, create and compare-and-swap NodeSlicePools; the leader lists
    // them and the Nodes, and deletes a freed slice's emptied IPPool
    // (tests/daemon/whereabouts.rs). The reconciler lists the IPAMClaims
    // that entries are bound to (tests/daemon/whereabouts.rs). DRA's
    // Multus contract (issue 49) lists a pod's namespace's ResourceClaims
    // and its node's ResourceSlices (tests/kube/dra.rs), and the daemon
    // watches them (tests/daemon/dra.rs). plexus as a DRA driver (the
    // daemon's --dra) GETs the claim kubelet prepares, applies its devices'
    // entries of the claim's status, and creates, updates and deletes its
    // node's ResourceSlices (tests/daemon/dra_driver.rs); deploy/dra/
    // keeps those writes to the node's own slices on 1.30+.
    let all = docs("rbac.yaml");
    let role = all.iter().find(|d| d["kind"] == "ClusterRole").unwrap();
    let mut granted: Vec<(String, String)> = Vec::new();
    for rule in role["rules"].as_array().unwrap() {
        for resource in rule["resources"].as_array().unwrap() {
            for verb in rule["verbs"].as_array().unwrap() {
                granted.push((
                    resource.as_str().unwrap().into(),
                    verb.as_str().unwrap().into(),
                ));
            }
        }
    }
    granted.sort();
    let want = [
        ("daemonsets", "get"),
        ("events", "create"),
        ("ipamclaims", "get"),
        ("ipamclaims", "list"),
        ("ipamclaims/status", "patch"),
        ("ippools", "create"),
        ("ippools", "delete"),
        ("ippools", "get"),
        ("ippools", "list"),
        ("ippools", "patch"),
        ("ippools", "watch"),
        ("multi-networkpolicies", "list"),
        ("multi-networkpolicies", "watch"),
        ("namespaces", "list"),
        ("namespaces", "watch"),
        ("network-attachment-definitions", "get"),
        ("network-attachment-definitions", "list"),
        ("network-attachment-definitions", "watch"),
        ("nodes", "list"),
        ("nodeslicepools", "create"),
        ("nodeslicepools", "get"),
        ("nodeslicepools", "list"),
        ("nodeslicepools", "patch"),
        ("overlappingrangeipreservations", "create"),
        ("overlappingrangeipreservations", "delete"),
        ("overlappingrangeipreservations", "get"),
        ("overlappingrangeipreservations", "list"),
        ("pods", "get"),
        ("pods", "list"),
        ("pods", "watch"),
        ("pods/status", "patch"),
        ("resourceclaims", "get"),
        ("resourceclaims", "list"),
        ("resourceclaims", "watch"),
        ("resourceclaims/status", "patch"),
        ("resourceslices", "create"),
        ("resourceslices", "delete"),
        ("resourceslices", "list"),
        ("resourceslices", "update"),
        ("resourceslices", "watch"),
    ];
    assert_eq!(
        granted,
        want.map(|(r, v)| (r.to_string(), v.to_string())).to_vec()
    );
    let binding = all
        .iter()
        .find(|d| d["kind"] == "ClusterRoleBinding")
        .unwrap();
    assert_eq!(binding["subjects"][0]["name"], "plexus");
    // The reconciler's Lease: created, then watched, renewed and given up
    // by its name only, in kube-system only.
    let lease_role = all.iter().find(|d| d["kind"] == "Role").unwrap();
    assert_eq!(lease_role["metadata"]["namespace"], "kube-system");
    let rules = lease_role["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 2, "{rules:?}");
    assert_eq!(rules[0]["verbs"], serde_json::json!(["create"]));
    assert!(rules[0]["resourceNames"].is_null());
    assert_eq!(
        rules[1]["verbs"],
        serde_json::json!(["get", "list", "watch", "update", "delete"])
    );
    assert_eq!(
        rules[1]["resourceNames"],
        serde_json::json!(["plexus-ipam-reconciler"])
    );
    for rule in rules {
        assert_eq!(rule["resources"], serde_json::json!(["leases"]));
    }
    let lease_binding = all.iter().find(|d| d["kind"] == "RoleBinding").unwrap();
    assert_eq!(lease_binding["roleRef"]["name"], "plexus-ipam-reconciler");
    assert_eq!(lease_binding["subjects"][0]["name"], "plexus");
}

#[test]
fn multi_network_policy_crd_serves_both_versions_with_end_port() {
    let spec = &crd_spec(
        "crds/multi-networkpolicy.yaml",
        "multi-networkpolicies.k8s.cni.cncf.io",
    );
    assert_eq!(spec["names"]["kind"], "MultiNetworkPolicy");
    assert_eq!(spec["names"]["plural"], "multi-networkpolicies");
    assert_eq!(spec["scope"], "Namespaced");
    let versions: Vec<(&str, bool, bool)> = items(&spec["versions"])
        .map(|v| {
            (
                v["name"].as_str().unwrap(),
                v["served"] == true,
                v["storage"] == true,
            )
        })
        .collect();
    // v1beta1 stored (what the daemon and the peers watch), v1beta2 served.
    assert_eq!(
        versions,
        [("v1beta1", true, true), ("v1beta2", true, false)]
    );
    for version in items(&spec["versions"]) {
        let rules = &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        for (direction, peers) in [("ingress", "from"), ("egress", "to")] {
            let rule = &rules[direction]["items"]["properties"];
            let port = &rule["ports"]["items"]["properties"];
            assert_eq!(port["endPort"]["type"], "integer", "{direction}");
            assert_eq!(port["port"]["x-kubernetes-int-or-string"], true);
            let peer = &rule[peers]["items"]["properties"];
            assert_eq!(peer["ipBlock"]["required"], serde_json::json!(["cidr"]));
            assert!(peer["namespaceSelector"]["properties"]["matchLabels"].is_object());
        }
    }
    let kustomization = &docs("kustomization.yaml")[0];
    assert!(items(&kustomization["resources"]).any(|r| r == "crds/multi-networkpolicy.yaml"));
}

#[test]
fn daemonset_runs_plexus_install_on_every_node() {
    let ds = &docs("daemonset.yaml")[0];
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["tolerations"][0]["operator"], "Exists");
    let plexus = &pod["containers"][0];
    assert_eq!(plexus["securityContext"]["privileged"], true);
    // The installer converges and watches (tests/install.rs); the image is
    // FROM scratch, so no shell: exec form only.
    assert_eq!(
        plexus["args"],
        serde_json::json!([
            "install",
            "--root=/host",
            "--watch",
            "--cleanup",
            "--settings=/etc/plexus/settings.json",
            "--daemon-socket=/run/plexus/plexus.sock"
        ])
    );
    // --cleanup asks whether the pod's DaemonSet remains (a rolling
    // update keeps the conflist): the pod is named from the downward API.
    let env = plexus["env"].as_array().unwrap();
    assert_eq!(env[2]["name"], "POD");
    assert_eq!(env[2]["value"], "$(POD_NAMESPACE)/$(POD_NAME)");
    let mounts: Vec<&str> = items(&pod["volumes"])
        .filter_map(|v| v["hostPath"]["path"].as_str())
        .collect();
    for path in [
        "/etc/cni/net.d",
        "/opt/cni/bin",
        "/var/lib/cni",
        "/run/netns",
        "/var/run/k8s.cni.cncf.io",
        "/var/lib/kubelet/pod-resources",
        // confDir's default, Multus's: configs of NADs without spec.config.
        "/etc/cni/multus/net.d",
    ] {
        assert!(mounts.contains(&path), "{path}");
    }
    let netns = items(&plexus["volumeMounts"])
        .find(|m| m["name"] == "netns")
        .unwrap();
    assert_eq!(netns["mountPropagation"], "HostToContainer");

    // Thick mode: the daemon beside the installer, serving the socket the
    // ConfigMap's settings name, probed on its local port.
    assert_eq!(pod["hostPID"], true);
    let daemon = &pod["containers"][1];
    let args: Vec<&str> = items(&daemon["args"])
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[0], "daemon");
    assert!(args.contains(&"--multi-network-policy"), "{args:?}");
    // plexus as a DRA driver: kubelet's plugin directories and the CDI
    // specs' directory are the node's, at kubelet's and the runtimes' paths.
    assert!(args.contains(&"--dra"), "{args:?}");
    for (volume, path) in [
        (
            "kubelet-plugins-registry",
            "/var/lib/kubelet/plugins_registry",
        ),
        ("kubelet-plugins", "/var/lib/kubelet/plugins"),
        ("cdi", "/var/run/cdi"),
    ] {
        let (host, mount) = mount_of(daemon, pod, volume);
        assert_eq!(host["hostPath"]["path"], path);
        assert_eq!(mount["mountPath"], path);
    }
    assert!(
        args.contains(&"--socket=/run/plexus/plexus.sock"),
        "{args:?}"
    );
    assert_eq!(
        daemon["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );
    assert_eq!(daemon["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(daemon["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert!(mounts.contains(&"/run/plexus"));
    let settings: Value = serde_json::from_str(
        docs("configmap.yaml")[0]["data"]["settings.json"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(settings["daemonSocket"], "/run/plexus/plexus.sock");
    // Delegated plugins run in the node's file system (Multus thick's
    // chrootDir): the node's root is mounted where chrootDir says, seeing
    // the node's later mounts, and /proc is the node's (the passed netns
    // is /proc/PID/fd/N to them).
    let hostroot = mount_of(daemon, pod, "hostroot");
    assert_eq!(hostroot.0["hostPath"]["path"], "/");
    assert_eq!(hostroot.1["mountPath"], settings["chrootDir"]);
    assert_eq!(hostroot.1["mountPropagation"], "HostToContainer");
    assert_ne!(hostroot.1["readOnly"], true, "delegates write their state");
    // Device records name their owner's CNI_NETNS as the runtime gave it
    // (containerd's and CRI-O's /var/run/netns/...): the daemon sees them.
    let netns_paths: Vec<&Value> = items(&daemon["volumeMounts"])
        .filter(|m| m["name"] == "netns")
        .map(|m| &m["mountPath"])
        .collect();
    assert_eq!(netns_paths, ["/run/netns", "/var/run/netns"]);
    // Hot-plug in thin mode (issue 26): the daemon reads the sandboxes
    // plugin processes note under cniDir (its --cni-dir default, as the
    // settings leave cniDir at its default) and takes their locks there.
    let cni_state = mount_of(daemon, pod, "cni-state");
    assert_eq!(cni_state.0["hostPath"]["path"], "/var/lib/cni");
    assert_eq!(cni_state.1["mountPath"], "/var/lib/cni");
    assert_ne!(cni_state.1["readOnly"], true, "the locks are taken there");
    assert!(settings.get("cniDir").is_none(), "{settings}");
    assert!(!args.iter().any(|a| a.starts_with("--cni-dir")), "{args:?}");
}

/// The elements of the JSON array `list`.
fn items(list: &Value) -> std::slice::Iter<'_, Value> {
    list.as_array()
        .unwrap_or_else(|| panic!("not an array: {list}"))
        .iter()
}

/// The volume named `name` and `container`'s mount of it.
fn mount_of<'a>(container: &'a Value, pod: &'a Value, name: &str) -> (&'a Value, &'a Value) {
    let named = |list: &'a Value| {
        items(list)
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {list}"))
    };
    (named(&pod["volumes"]), named(&container["volumeMounts"]))
}

#[test]
fn configmap_settings_are_a_plexus_conf_once_installed() {
    let cm = &docs("configmap.yaml")[0];
    let settings: Value =
        serde_json::from_str(cm["data"]["settings.json"].as_str().unwrap()).unwrap();
    let mut conf = settings.as_object().unwrap().clone();
    // What `plexus install` adds (src/commands/install.rs).
    conf.insert("type".into(), "plexus".into());
    conf.insert(
        "clusterNetwork".into(),
        "/etc/cni/net.d/10-cluster.conflist".into(),
    );
    conf.insert("cniVersion".into(), "1.0.0".into());
    conf.insert("name".into(), "plexus-cni-network".into());
    plexus::config::PlexusConf::from_slice(Value::Object(conf).to_string().as_bytes()).unwrap();
}

#[test]
fn every_built_in_interface_driver_has_an_example_nad_that_parses() {
    let dir = format!("{}/deploy/examples", env!("CARGO_MANIFEST_DIR"));
    let docs = manifest::load(std::path::Path::new(&dir)).unwrap();
    let nads = manifest::nads(&docs).unwrap();
    let mut types: Vec<String> = Vec::new();
    for nad in nads.values() {
        let text = nad.spec_config().expect("spec.config");
        let config = plexus::cni::config::NetworkConfigList::from_slice(text.as_bytes()).unwrap();
        types.extend(config.plugins.iter().map(|p| p.plugin_type.to_string()));
    }
    for builtin in plexus_dataplane::drivers::builtin_types() {
        assert!(
            types.iter().any(|t| t == builtin),
            "no example uses {builtin}"
        );
    }
}

/// deploy/dra/: the admission policy that keeps each daemon's
/// ResourceSlice writes to its own node (1.32+; RBAC cannot), bound, and
/// naming the service account deploy/rbac.yaml makes. Its CEL runs on a
/// 1.30+ API server only, which these machines cannot build: what is
/// checked here is that it matches the daemon and slices' writes.
#[test]
fn the_dra_policy_keeps_each_daemon_to_its_nodes_slices() {
    let all = docs("dra/node-pool-policy.yaml");
    let (policy, binding) = (&all[0], &all[1]);
    assert_eq!(policy["kind"], "ValidatingAdmissionPolicy");
    assert_eq!(binding["kind"], "ValidatingAdmissionPolicyBinding");
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(
        binding["spec"]["validationActions"],
        serde_json::json!(["Deny"])
    );
    let rule = &policy["spec"]["matchConstraints"]["resourceRules"][0];
    assert_eq!(rule["resources"], serde_json::json!(["resourceslices"]));
    assert_eq!(
        rule["operations"],
        serde_json::json!(["CREATE", "UPDATE", "DELETE"])
    );
    let account = docs("rbac.yaml")
        .into_iter()
        .find(|d| d["kind"] == "ServiceAccount")
        .unwrap();
    let user = format!(
        "system:serviceaccount:{}:{}",
        account["metadata"]["namespace"].as_str().unwrap(),
        account["metadata"]["name"].as_str().unwrap()
    );
    let condition = policy["spec"]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap();
    assert!(condition.contains(&format!("\"{user}\"")), "{condition}");
    let validations = policy["spec"]["validations"].as_array().unwrap();
    assert_eq!(
        validations[1]["expression"],
        "variables.tokenNode == variables.sliceNode"
    );
    // Not part of `kubectl apply -k deploy/`: a cluster before 1.30 does
    // not serve the kinds.
    let kustomization = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kustomization.yaml"),
    )
    .unwrap();
    assert!(!kustomization.contains("dra/"), "{kustomization}");
}
