//! plexus and the cluster network's plugins, through the `plexus` binary
//! invoked as a runtime invokes it, in namespaces the tests create (issue 23
//! items 5, 8 and 11):
//! - DEL without a record DELs the cluster network from the configuration,
//!   as Multus's `CmdDel` does without a cache: a pod the reference bridge
//!   and host-local attached before plexus was installed loses its address
//!   reservation, also with the API server gone.
//! - STATUS asks the cluster network's plugins (cni-SPEC §2 STATUS), built
//!   in and exec'd, and reports the first failure with its code.
//! - `auxiliaryCNIChainName` runs Multus's auxiliary chain after the pod's
//!   networks, and DEL runs it from the record, also after a crash.
//!
//! Where a plugin must misbehave or be observed, a shell script stands in
//! for it (named so below); everything else is the real thing: the reference
//! plugins from Debian, plexus's built-in ones, the kernel.

mod e2e_support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use e2e_support::*;
use serde_json::{json, Value};

fn pod_args(pod: &str) -> String {
    format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME={pod}")
}

/// The cluster network: a bridge `br-pod` on 10.10.0.0/24 from host-local
/// under `tmp`, in `version`.
fn podnet(tmp: &Path, version: &str) -> Value {
    json!({"cniVersion": version, "name": "podnet", "type": "bridge", "bridge": "br-pod",
           "isGateway": true, "ipam": host_local(tmp, "10.10.0.0/24", "pod")})
}

/// host-local's reservations of the cluster network under `tmp`.
fn reservations(tmp: &Path) -> Vec<String> {
    let mut ips: Vec<String> = files_in(&tmp.join("ipam/pod/podnet"))
        .into_iter()
        .filter(|f| f.starts_with("10.10.0."))
        .collect();
    ips.sort();
    ips
}

/// An executable shell script `name` in `dir`.
fn script(dir: &Path, name: &str, body: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_pod_attached_before_plexus_is_deleted_through_plexus() {
    // Issue 23 item 11. Multus's CmdDel without a cache DELs the cluster
    // network from its conf; cni-SPEC §2 DEL makes that harmless when it
    // was deleted already.
    on_node_with_pods("pre", |tmp, node, pods| {
        let podnet = podnet(tmp, "1.0.0");
        std::fs::create_dir_all(tmp.join("net.d")).unwrap();
        std::fs::write(tmp.join("net.d/10-podnet.conf"), podnet.to_string()).unwrap();
        let inline = json!({"cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
            "cniDir": tmp.join("cache"), "confDir": tmp.join("net.d"),
            "delegates": [podnet]})
        .to_string();
        // The API server is gone (nothing listens there): the cluster network,
        // a config of the conf dir, is still found.
        let kubeconfig = tmp.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            "apiVersion: v1\nkind: Config\ncurrent-context: gone\n\
             clusters: [{name: gone, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n\
             users: [{name: u, user: {token: t}}]\n\
             contexts: [{name: gone, context: {cluster: gone, user: u}}]\n",
        )
        .unwrap();
        let by_name = json!({"cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
            "cniDir": tmp.join("cache"), "confDir": tmp.join("net.d"),
            "clusterNetwork": "podnet", "kubeconfig": kubeconfig, "apiTimeout": 2})
        .to_string();

        for (i, (pod_ns, conf)) in pods.iter().zip([&inline, &by_name]).enumerate() {
            let container = format!("c{i}");
            let pod = format!("p{i}");
            // Before plexus: the reference bridge and host-local attach the pod.
            let out = reference_plugin(node, "bridge", &container, pod_ns, &podnet);
            assert_ok("reference ADD", &out);
            let address = addresses(pod_ns, "eth0");
            assert_eq!(reservations(tmp), address, "host-local reserved it");

            // plexus has no record of it; its DEL deletes it all the same.
            let netns = format!("/var/run/netns/{pod_ns}");
            let out = plexus_at(
                node,
                "DEL",
                &container,
                &netns,
                "eth0",
                &pod_args(&pod),
                conf,
            );
            assert_ok("DEL through plexus", &out);
            assert_eq!(link_names(pod_ns), ["lo"]);
            assert!(reservations(tmp).is_empty(), "reservation released");
            // A second DEL, with and without the namespace, is harmless.
            for netns in [netns.as_str(), ""] {
                let out = plexus_at(
                    node,
                    "DEL",
                    &container,
                    netns,
                    "eth0",
                    &pod_args(&pod),
                    conf,
                );
                assert_ok("DEL again", &out);
            }
        }
    });
}

#[test]
fn gc_reclaims_what_a_pod_attached_before_plexus_left() {
    // Issue 23 item 11, GC: cni-SPEC §2 GC is forwarded to the cluster
    // network's plugins with the runtime's valid attachments (as Multus's
    // CmdGC), so a reservation whose DEL never came is reclaimed, and one
    // still valid is kept.
    on_node_with_pods("gc", |tmp, node, pods| {
        for (i, pod_ns) in pods.iter().enumerate() {
            let out = reference_plugin(
                node,
                "bridge",
                &format!("c{i}"),
                pod_ns,
                &podnet(tmp, "1.0.0"),
            );
            assert_ok("reference ADD", &out);
        }
        let kept = addresses(&pods[1], "eth0");
        assert_eq!(reservations(tmp).len(), 2);
        // The node runs plexus now, the cluster network at 1.1.0 (GC exists from
        // 1.1.0), its bridge and host-local built in, on the same data.
        let conf = json!({"cniVersion": "1.1.0", "name": "plexus", "type": "plexus",
            "cniDir": tmp.join("cache"), "confDir": tmp.join("net.d"),
            "delegates": [podnet(tmp, "1.1.0")],
            "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}]})
        .to_string();
        assert_ok("GC", &plexus_at(node, "GC", "", "", "", "", &conf));
        assert_eq!(reservations(tmp), kept);
        let netns = format!("/var/run/netns/{}", pods[1]);
        let del = plexus_at(node, "DEL", "c1", &netns, "eth0", &pod_args("p1"), &conf);
        assert_ok("DEL", &del);
    });
}

#[test]
fn status_asks_the_cluster_networks_plugins() {
    // cni-SPEC §2 STATUS: "If a plugin relies on a delegated plugin ... it
    // must also execute a STATUS request to that plugin"; Multus's
    // CmdStatus; codes 50 and 51.
    on_node_with_pods("st", |tmp, node, pods| {
        let bin = tmp.join("bin");
        let conf = |cluster: Value| {
            json!({"cniVersion": "1.1.0", "name": "plexus", "type": "plexus",
                "cniDir": tmp.join("cache"), "confDir": tmp.join("net.d"),
                "binDir": bin, "delegates": [cluster]})
            .to_string()
        };
        let status = |conf: &str| plexus_at(node, "STATUS", "", "", "", "", conf);

        // Built in: bridge asks its host-local, whose one address (a /30 less
        // its gateway) an ADD takes: not available (50) until it is DEL'd.
        let mut small = podnet(tmp, "1.1.0");
        small["ipam"]["subnet"] = json!("10.10.0.0/30");
        let small = conf(small);
        assert_ok("STATUS", &status(&small));
        let netns = format!("/var/run/netns/{}", pods[0]);
        let add = plexus_at(node, "ADD", "c0", &netns, "eth0", &pod_args("p0"), &small);
        assert_ok("ADD", &add);
        let e = cni_error(&status(&small));
        assert_eq!(e["code"], 50, "{e}");
        let details = e["details"].as_str().unwrap();
        assert!(
            details.starts_with("cluster network podnet plugins[0]: bridge: "),
            "{details}"
        );
        assert!(
            details.ends_with("all 1 addresses of range set 10.10.0.1-10.10.0.2 are allocated"),
            "{details}"
        );
        let del = plexus_at(node, "DEL", "c0", &netns, "eth0", &pod_args("p0"), &small);
        assert_ok("DEL", &del);
        assert_ok("STATUS after DEL", &status(&small));

        // Exec'd: a stand-in for a plugin whose uplink is down answers 51; its
        // error reaches the runtime with its code, naming it.
        let called = tmp.join("stub-called");
        script(
            &bin,
            "status-stub",
            &format!(
                "echo \"$CNI_COMMAND\" >> {called}\n\
                 case \"$CNI_COMMAND\" in\n\
                 STATUS) echo '{{\"cniVersion\": \"1.1.0\", \"code\": 51, \"msg\": \"plugin not available\", \"details\": \"uplink down\"}}'; exit 1;;\n\
                 VERSION) echo '{{\"cniVersion\": \"1.1.0\", \"supportedVersions\": [\"1.0.0\", \"1.1.0\"]}}';;\n\
                 esac\n",
                called = called.display()
            ),
        );
        let chain = |version: &str| {
            let mut bridge = podnet(tmp, version);
            bridge.as_object_mut().unwrap().remove("cniVersion");
            bridge.as_object_mut().unwrap().remove("name");
            conf(json!({"cniVersion": version, "name": "podnet",
                        "plugins": [bridge, {"type": "status-stub"}]}))
        };
        let e = cni_error(&status(&chain("1.1.0")));
        assert_eq!(e["code"], 51, "{e}");
        assert_eq!(e["msg"], "plugin not available");
        assert_eq!(
            e["details"],
            "cluster network podnet plugins[1]: status-stub: uplink down"
        );
        assert_eq!(std::fs::read_to_string(&called).unwrap(), "STATUS\n");
        // A 1.0.0 chain has no STATUS: its plugins are not asked (as libcni).
        std::fs::remove_file(&called).unwrap();
        assert_ok("STATUS of 1.0.0", &status(&chain("1.0.0")));
        assert!(!called.exists());
    });
}

#[test]
fn the_auxiliary_chain_runs_after_the_pods_networks_and_del_runs_it_from_the_record() {
    // Issue 23 item 8: Multus's auxiliary chain (multus-cni CmdAdd,
    // docs/configuration.md "auxiliaryCNIChainName", its e2e test
    // test-subdirectory-chaining-passthru.sh: a tuning sysctl on eth0).
    let Some(NodeWithPods {
        tmp,
        node,
        pods,
        namespaces: _namespaces,
    }) = node_with_pods("aux")
    else {
        return;
    };
    let t = tmp.path();
    let manifests = t.join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    let macnet = macvlan_network(t);
    std::fs::write(
        manifests.join("demo.yaml"),
        format!(
            "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
             metadata: {{name: macnet, namespace: demo}}\nspec:\n  config: '{macnet}'\n---\n\
             kind: Pod\nmetadata: {{name: p0, namespace: demo, annotations: {{k8s.v1.cni.cncf.io/networks: macnet}}}}\n"
        ),
    )
    .unwrap();
    let conf = json!({"cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
        "cniDir": t.join("cache"), "confDir": t.join("net.d"), "binDir": t.join("bin"),
        "manifestDir": manifests, "auxiliaryCNIChainName": "vendor-chain",
        "delegates": [podnet(t, "1.0.0")]})
    .to_string();
    let chain = vendor_chain(&t.join("net.d"));
    std::fs::write(
        chain.join("20-recorder.conf"),
        json!({"type": "recorder"}).to_string(),
    )
    .unwrap();
    std::fs::write(chain.join("30-not-a-plugin.json"), "{").unwrap();
    // A stand-in that records its calls (and, when told, kills plexus in
    // the middle of the ADD: a crash).
    let log = t.join("recorder.log");
    script(
        &t.join("bin"),
        "recorder",
        &format!(
            "cat > {t}/recorder.$CNI_COMMAND.json\n\
             echo \"$CNI_COMMAND $CNI_IFNAME $CNI_ARGS\" >> {log}\n\
             if [ \"$CNI_COMMAND\" = ADD ] && [ -f {t}/crash ]; then kill -9 $PPID; sleep 5; fi\n\
             if [ \"$CNI_COMMAND\" = ADD ]; then echo '{{\"cniVersion\": \"1.0.0\"}}'; fi\n",
            t = t.display(),
            log = log.display()
        ),
    );
    let pod_ns = &pods[0];
    let netns = format!("/var/run/netns/{pod_ns}");
    let run =
        |command: &str| plexus_at(&node, command, "c0", &netns, "eth0", &pod_args("p0"), &conf);
    let log_lines = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };

    let out = run("ADD");
    assert_ok("ADD", &out);
    // The runtime still gets the cluster network's result.
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    let eth0 = format!("{}/24", addresses(pod_ns, "eth0")[0]);
    assert_eq!(result["ips"][0]["address"], eth0.as_str());
    // The chain ran after eth0 and net1 (macnet), as net2, with the pod's
    // CNI_ARGS, passthru's empty result as prevResult, the chain's name and
    // plexus's cniVersion; tuning set the sysctl.
    assert_eq!(log_lines(), [format!("ADD net2 {}", pod_args("p0"))]);
    let seen: Value =
        serde_json::from_str(&std::fs::read_to_string(t.join("recorder.ADD.json")).unwrap())
            .unwrap();
    assert_eq!(seen["name"], "vendor-chain");
    assert_eq!(seen["cniVersion"], "1.0.0");
    assert_eq!(seen["prevResult"]["cniVersion"], "1.0.0");
    assert!(seen["prevResult"].get("interfaces").is_none(), "{seen}");
    assert!(seen["prevResult"].get("ips").is_none(), "{seen}");
    let sysctl = Command::new("ip")
        .args([
            "netns",
            "exec",
            pod_ns,
            "cat",
            "/proc/sys/net/ipv4/conf/eth0/arp_filter",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&sysctl.stdout).trim(), "1");
    assert_eq!(link_names(pod_ns).len(), 3, "lo, eth0, net1");
    // Multus never CHECKs the chain; neither does plexus.
    assert_ok("CHECK", &run("CHECK"));
    assert_eq!(log_lines().len(), 1);

    // DEL runs it from the record, first, as the newest attachment.
    assert_ok("DEL", &run("DEL"));
    assert_eq!(log_lines()[1], format!("DEL net2 {}", pod_args("p0")));
    let seen: Value =
        serde_json::from_str(&std::fs::read_to_string(t.join("recorder.DEL.json")).unwrap())
            .unwrap();
    assert_eq!(seen["name"], "vendor-chain");
    assert_eq!(link_names(pod_ns), ["lo"]);
    assert_nothing_left(t);

    // plexus killed in the middle of the chain's ADD: the record says what
    // was started, and DEL runs the chain too.
    std::fs::write(t.join("crash"), "").unwrap();
    assert!(!run("ADD").status.success());
    std::fs::remove_file(t.join("crash")).unwrap();
    assert_ok("DEL after the crash", &run("DEL"));
    assert_eq!(
        log_lines()[2..],
        [
            format!("ADD net2 {}", pod_args("p0")),
            format!("DEL net2 {}", pod_args("p0"))
        ]
    );
    assert_eq!(link_names(pod_ns), ["lo"]);
    assert_nothing_left(t);

    // A file of the chain that does not parse fails the ADD, naming the key
    // and the file, before anything is added.
    std::fs::write(chain.join("15-broken.conf"), "{").unwrap();
    let e = cni_error(&run("ADD"));
    let details = e["details"].as_str().unwrap();
    assert!(
        details.starts_with("auxiliaryCNIChainName \"vendor-chain\": "),
        "{details}"
    );
    assert!(details.contains("15-broken.conf"), "{details}");
    assert_eq!(link_names(pod_ns), ["lo"]);
    // No chain directory: the pod gets its networks, and stderr says no
    // chain runs (as Multus, whose chain's installer pod needs a network).
    std::fs::remove_dir_all(&chain).unwrap();
    let out = run("ADD");
    assert_ok("ADD without the chain", &out);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no auxiliary chain runs"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ok("DEL", &run("DEL"));
    assert_eq!(log_lines().len(), 4);
    assert_nothing_left(t);
}

#[test]
fn a_del_whose_conf_no_longer_parses_reads_its_dirs_in_any_case() {
    // Issue 37 item 4: the conf's keys are matched as Go decodes them, on
    // ADD and on the DEL that falls back to reading a conf that no longer
    // parses; a `CNIDir` spelled so is the same key on both.
    on_node_with_pods("case", |tmp, node, pods| {
        let mut conf = json!({"cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
            "CNIDir": tmp.join("cache"), "ConfDir": tmp.join("net.d"),
            "delegates": [podnet(tmp, "1.0.0")]});
        let netns = format!("/var/run/netns/{}", pods[0]);
        let add = plexus_at(
            node,
            "ADD",
            "c1",
            &netns,
            "eth0",
            &pod_args("p1"),
            &conf.to_string(),
        );
        assert_ok("ADD", &add);
        assert!(!files_in(&tmp.join("cache")).is_empty());
        // A value of the wrong type: the conf no longer parses.
        conf["apiTimeout"] = json!("soon");
        let del = plexus_at(
            node,
            "DEL",
            "c1",
            &netns,
            "eth0",
            &pod_args("p1"),
            &conf.to_string(),
        );
        assert_ok("DEL", &del);
        assert_eq!(link_names(&pods[0]), ["lo"]);
        assert!(reservations(tmp).is_empty());
    });
}
