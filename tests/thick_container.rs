//! Thick mode as deployed: the daemon container of deploy/daemonset.yaml,
//! run from the image deploy/Containerfile builds, with exactly the mounts,
//! security context, host network and host PID the DaemonSet declares (read
//! from the YAML), and the shim exec'd on the "node" as a runtime execs it.
//!
//! - The node is a network namespace made here (the DaemonSet's
//!   `hostNetwork`), never the machine's own; the node's file system is the
//!   machine's (the `hostroot` volume, `/`), and every other hostPath volume
//!   is a directory of the test's, so the daemon's mounts do not show the
//!   pod namespaces: it must use what the shim passes (issue 24; the outside
//!   run's error was `CNI_NETNS: /var/run/netns/cni-… is not a network
//!   namespace (any more)`).
//! - Pod namespaces in each runtime's style: containerd's
//!   `/var/run/netns/cni-…`, CRI-O's `/var/run/netns/<uuid>`, podman's
//!   `/run/netns/netns-…`, rootless podman's bind mount under
//!   `/run/user/UID/…` (here under a temp dir), and `/proc/PID/ns/net`.
//! - The cluster network is Debian's `ptp` with Debian's `host-local`
//!   (dynamically linked; the image has no libc): they run only chrooted
//!   into the node (`chrootDir`, Multus thick's key, as the ConfigMap sets
//!   it). They are in `/usr/lib/cni` on this machine, which is the node's
//!   `CNI_PATH` here, where a cluster's is `/opt/cni/bin` (this machine's
//!   `/opt/cni/bin` belongs to whoever runs a kubelet on it). A NAD with
//!   plexus's built-in bridge is attached too, so built-in drivers use the
//!   passed namespace as well.
//! - The daemon runs without `--kubeconfig` (no API server here): pods and
//!   NADs come from a manifest directory (`manifestDir`).

mod image_support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use image_support::Images;
use plexus_dataplane::NetNs;
use plexus_testkit::Feature;
use serde_json::{json, Value};

const PLEXUS: &str = env!("CARGO_BIN_EXE_plexus");
/// Where this machine has Debian's reference plugins (the node's CNI_PATH).
const REFERENCE: &str = "/usr/lib/cni";
const CLUSTER_V4: &str = "10.77.9.";
const EXTRA_V4: &str = "10.77.10.";

/// The DaemonSet's pod spec and its `daemon` container.
fn daemonset() -> (Value, Value) {
    let path = format!("{}/deploy/daemonset.yaml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let ds = plexus::manifest::parse_documents(&text, &path).unwrap()[0]
        .value
        .clone();
    let pod = ds["spec"]["template"]["spec"].clone();
    let daemon = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "daemon")
        .expect("a daemon container")
        .clone();
    (pod, daemon)
}

/// `podman run` options for the daemon container as the DaemonSet declares
/// it; hostPath volumes other than the node's root map into `node_dir`.
fn run_options(pod: &Value, daemon: &Value, node_netns: &Path, node_dir: &Path) -> Vec<String> {
    let mut options = vec![format!("--name=pxthick-{}", std::process::id())];
    assert_eq!(pod["hostNetwork"], true);
    options.push(format!("--network=ns:{}", node_netns.display()));
    if pod["hostPID"] == true {
        options.push("--pid=host".into());
    }
    if daemon["securityContext"]["privileged"] == true {
        options.push("--privileged".into());
    }
    for env in daemon["env"].as_array().into_iter().flatten() {
        // NODE_NAME from the downward API; anything else is taken as it is.
        let value = env["value"].as_str().unwrap_or("node");
        options.push(format!("--env={}={value}", env["name"].as_str().unwrap()));
    }
    let volumes = pod["volumes"].as_array().unwrap();
    for mount in daemon["volumeMounts"].as_array().unwrap() {
        let name = &mount["name"];
        let volume = volumes.iter().find(|v| v["name"] == *name).unwrap();
        let host = volume["hostPath"]["path"]
            .as_str()
            .unwrap_or_else(|| panic!("the daemon's volume {name} is not a hostPath"));
        let source = if host == "/" {
            PathBuf::from("/")
        } else {
            let dir = node_dir.join(host.trim_start_matches('/'));
            std::fs::create_dir_all(&dir).unwrap();
            dir
        };
        let mut opts = vec![match mount["mountPropagation"].as_str() {
            None | Some("None") => "rprivate",
            Some("HostToContainer") => "rslave",
            Some("Bidirectional") => "rshared",
            Some(other) => panic!("mountPropagation {other}"),
        }];
        if mount["readOnly"] == true {
            opts.push("ro");
        }
        options.push(format!(
            "--volume={}:{}:{}",
            source.display(),
            mount["mountPath"].as_str().unwrap(),
            opts.join(",")
        ));
    }
    options
}

/// Everything the test made, removed on every exit path.
struct Node {
    images: Images,
    container: String,
    netns_names: Vec<String>,
    holders: Vec<Child>,
    bind_mounts: Vec<PathBuf>,
    dir: tempfile::TempDir,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self
            .images
            .podman(&["rm", "-f", "-t", "2", &self.container]);
        for path in &self.bind_mounts {
            let _ = nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH);
        }
        for holder in &mut self.holders {
            let _ = holder.kill();
            let _ = holder.wait();
        }
        for name in &self.netns_names {
            let _ = NetNs::delete_named(name);
        }
        // podman's store (the image) goes with `images`, the node's files
        // with `dir`.
        let _ = &self.dir;
    }
}

impl Node {
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// A named namespace; its path as `ip netns` makes it.
    fn named_netns(&mut self, name: &str) -> PathBuf {
        NetNs::create_named(name).unwrap();
        self.netns_names.push(name.to_string());
        PathBuf::from("/var/run/netns").join(name)
    }

    /// A process in a namespace of its own: `/proc/PID/ns/net`.
    fn process_netns(&mut self) -> PathBuf {
        let child = Command::new("unshare")
            .args(["--net", "sleep", "300"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let path = PathBuf::from(format!("/proc/{}/ns/net", child.id()));
        self.holders.push(child);
        // unshare execs sleep once it has its namespace: bounded wait.
        let deadline = Instant::now() + Duration::from_secs(10);
        let own = std::fs::read_link("/proc/self/ns/net").unwrap();
        while std::fs::read_link(&path).ok().as_ref() == Some(&own) {
            assert!(Instant::now() < deadline, "unshare --net did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        path
    }

    /// A namespace bind-mounted on a file under a temp dir, as rootless
    /// podman keeps them under `/run/user/UID/netns`.
    fn bound_netns(&mut self) -> PathBuf {
        let source = self.process_netns();
        let file = self.path("run/user/1000/netns/netns-rootless");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "").unwrap();
        nix::mount::mount(
            Some(&source),
            &file,
            None::<&str>,
            nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap();
        self.bind_mounts.push(file.clone());
        file
    }

    /// The shim as the runtime execs it, on the node.
    fn cni(&self, command: &str, container_id: &str, netns: &Path, conf: &Value) -> Output {
        let node = &self.netns_names[0];
        // The configuration on stdin, from a file: nothing to feed.
        let mut stdin = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut stdin, conf.to_string().as_bytes()).unwrap();
        std::io::Seek::rewind(&mut stdin).unwrap();
        Command::new("timeout")
            .args(["60", "ip", "netns", "exec", node, PLEXUS])
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", container_id)
            .env("CNI_NETNS", netns)
            .env("CNI_IFNAME", "eth0")
            .env(
                "CNI_ARGS",
                "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=thick",
            )
            .env("CNI_PATH", REFERENCE)
            .stdin(stdin)
            .output()
            .unwrap()
    }

    /// `ip -o` `what` in the namespace at `netns`.
    fn ip(netns: &Path, what: &str) -> String {
        let out = Command::new("timeout")
            .args(["10", "nsenter"])
            .arg(format!("--net={}", netns.display()))
            .args(["ip", "-o", what])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn node_links(&self) -> Vec<String> {
        let node = PathBuf::from("/var/run/netns").join(&self.netns_names[0]);
        let links = Self::ip(&node, "link");
        let mut names: Vec<String> = links
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|n| n.split('@').next().unwrap().to_string())
            .collect();
        names.sort();
        names
    }

    /// Files left in a directory tree: names, relative.
    fn files(dir: &Path) -> Vec<String> {
        let mut found = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = entry.path();
                if p.is_dir() {
                    todo.push(p);
                } else {
                    found.push(p.strip_prefix(dir).unwrap().display().to_string());
                }
            }
        }
        found.sort();
        found
    }
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_daemon_container_serves_every_runtimes_netns_with_the_nodes_dynamic_plugins() {
    if !plexus_testkit::require(&[Feature::Root, Feature::Podman]) {
        return;
    }
    let id = std::process::id();
    let mut node = Node {
        images: Images::new(),
        container: format!("pxthick-{id}"),
        netns_names: Vec::new(),
        holders: Vec::new(),
        bind_mounts: Vec::new(),
        dir: tempfile::tempdir().unwrap(),
    };
    let node_netns = node.named_netns(&format!("pxthick-node-{id}"));
    // A node's loopback is up (the daemon's metrics listen on 127.0.0.1).
    let lo = Command::new("ip")
        .args(["-n", &node.netns_names[0], "link", "set", "lo", "up"])
        .status()
        .unwrap();
    assert!(lo.success());
    let tag = format!("localhost/plexus-thick:{id}");
    node.images.build_plexus(&tag);

    let (pod, daemon) = daemonset();
    let node_dir = node.path("node");
    let mut run = vec!["run".to_string(), "-d".to_string()];
    run.extend(run_options(&pod, &daemon, &node_netns, &node_dir));
    run.push(tag.clone());
    // The DaemonSet's args but the kubeconfig (no API server: see the top).
    run.extend(
        daemon["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .filter(|a| !a.starts_with("--kubeconfig")),
    );
    let socket_arg = run
        .iter()
        .find_map(|a| a.strip_prefix("--socket="))
        .unwrap();
    let socket = node_dir.join(socket_arg.trim_start_matches('/'));
    let run: Vec<&str> = run.iter().map(String::as_str).collect();
    node.images.podman_ok(&run);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !socket.exists() {
        let logs = node.images.podman(&["logs", &node.container]);
        assert!(
            Instant::now() < deadline,
            "no daemon socket at {}: {}",
            socket.display(),
            String::from_utf8_lossy(&logs.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // The node's files as the daemon sees them (its mounts of node_dir),
    // and the node's root as the chrooted plugins see it (this machine's).
    let conf_dir = node_dir.join("etc/cni/net.d");
    let ipam_dir = node.path("ipam");
    std::fs::write(
        conf_dir.join("10-ptp.conflist"),
        json!({
            "cniVersion": "1.0.0", "name": "ptpnet",
            "plugins": [{"type": "ptp", "ipam": {
                "type": "host-local", "ranges": [[{"subnet": format!("{CLUSTER_V4}0/24")}]],
                "dataDir": ipam_dir,
            }}]
        })
        .to_string(),
    )
    .unwrap();
    let manifests = conf_dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let extra = json!({
        "cniVersion": "1.0.0", "name": "extra", "type": "bridge", "bridge": "pxthk-br",
        "ipam": {"type": "host-local", "ranges": [[{"subnet": format!("{EXTRA_V4}0/24")}]],
                 "dataDir": "/var/lib/cni/pxthick-extra"},
    });
    std::fs::write(
        manifests.join("pod.yaml"),
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: thick\n  namespace: default\n  \
             annotations:\n    k8s.v1.cni.cncf.io/networks: extra\n---\n\
             apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  \
             name: extra\n  namespace: default\nspec:\n  config: '{extra}'\n"
        ),
    )
    .unwrap();
    // The ConfigMap's settings, as `plexus install` puts them into the
    // conflist, and what it adds; the socket is the node's path of it.
    let settings_path = format!("{}/deploy/configmap.yaml", env!("CARGO_MANIFEST_DIR"));
    let settings_text = std::fs::read_to_string(&settings_path).unwrap();
    let configmap = plexus::manifest::parse_documents(&settings_text, &settings_path).unwrap();
    let settings: Value = serde_json::from_str(
        configmap[0].value["data"]["settings.json"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let mut conf = settings.clone();
    conf["cniVersion"] = json!("1.0.0");
    conf["name"] = json!("plexus-cni-network");
    conf["type"] = json!("plexus");
    conf["clusterNetwork"] = json!("/etc/cni/net.d/10-ptp.conflist");
    conf["manifestDir"] = json!("/etc/cni/net.d/manifests");
    conf["daemonSocket"] = json!(socket);
    // Served by the daemon or failed: never run here instead.
    conf["daemonFallback"] = json!("fail");
    assert_eq!(
        conf["chrootDir"], "/hostroot",
        "the ConfigMap sets chrootDir"
    );

    let links_before = node.node_links();
    let styles = [
        ("containerd", node.named_netns(&format!("cni-pxthick-{id}"))),
        (
            "CRI-O",
            node.named_netns(&format!("5c0ffee0-7e57-4a11-b0b0-{id:012}")),
        ),
        (
            "podman",
            PathBuf::from("/run/netns").join(
                node.named_netns(&format!("netns-pxthick-{id}"))
                    .file_name()
                    .unwrap(),
            ),
        ),
        ("rootless podman", node.bound_netns()),
        ("/proc/PID/ns/net", node.process_netns()),
    ];
    let records = node_dir.join("var/lib/cni/plexus");
    for (i, (style, netns)) in styles.iter().enumerate() {
        let container_id = format!("pxthick{i}");
        let added = node.cni("ADD", &container_id, netns, &conf);
        assert!(added.status.success(), "{style} ADD: {}", text(&added));
        let result: Value = serde_json::from_slice(&added.stdout).unwrap();
        let address = result["ips"][0]["address"].as_str().unwrap_or_default();
        assert!(address.starts_with(CLUSTER_V4), "{style}: {result}");
        // Both attachments are in the pod's namespace: Debian's ptp (run
        // chrooted, through the passed namespace's /proc/PID/fd path) and
        // the built-in bridge (through the descriptor itself).
        let addrs = Node::ip(netns, "addr");
        assert!(
            addrs
                .lines()
                .any(|l| l.contains(" eth0 ") && l.contains(CLUSTER_V4)),
            "{style}: {addrs}"
        );
        assert!(
            addrs
                .lines()
                .any(|l| l.contains(" net1 ") && l.contains(EXTRA_V4)),
            "{style}: {addrs}"
        );
        // The daemon's record of the call, on the node (its cniDir mount).
        let recorded = Node::files(&records);
        assert!(
            recorded.iter().any(|f| f.contains(&container_id)),
            "{style}: no record in {recorded:?}"
        );
        // ptp's host end is in the node's namespace, the daemon's.
        assert!(
            node.node_links().len() > links_before.len(),
            "{style}: {:?}",
            node.node_links()
        );

        let deleted = node.cni("DEL", &container_id, netns, &conf);
        assert!(deleted.status.success(), "{style} DEL: {}", text(&deleted));
        let links = Node::ip(netns, "link");
        assert!(
            !links.contains(" eth0") && !links.contains(" net1"),
            "{style}: {links}"
        );
        // DEL again (kubelet repeats it): nothing to do, success.
        let again = node.cni("DEL", &container_id, netns, &conf);
        assert!(
            again.status.success(),
            "{style} DEL again: {}",
            text(&again)
        );
    }
    // Nothing left: the node's links but the built-in bridge (kept, as the
    // reference bridge keeps its), addresses, records.
    let mut links_after = node.node_links();
    links_after.retain(|l| l != "pxthk-br");
    assert_eq!(links_after, links_before);
    let reserved = |dir: &Path| -> Vec<String> {
        Node::files(dir)
            .into_iter()
            .filter(|f| f.contains(CLUSTER_V4) || f.contains(EXTRA_V4))
            .collect()
    };
    assert_eq!(reserved(&ipam_dir), Vec::<String>::new());
    assert_eq!(
        reserved(&node_dir.join("var/lib/cni/pxthick-extra")),
        Vec::<String>::new()
    );
    let left: Vec<String> = Node::files(&records)
        .into_iter()
        .filter(|f| f.contains("pxthick"))
        .collect();
    assert!(left.is_empty(), "plexus records left: {left:?}");

    // A namespace gone before its DEL: DEL succeeds (cni-SPEC §2 DEL); an
    // ADD into it is refused naming the path, as in-process.
    let (_, gone) = &styles[0];
    let added = node.cni("ADD", "pxthick-gone", gone, &conf);
    assert!(added.status.success(), "{}", text(&added));
    NetNs::delete_named(gone.file_name().unwrap().to_str().unwrap()).unwrap();
    let deleted = node.cni("DEL", "pxthick-gone", gone, &conf);
    assert!(
        deleted.status.success(),
        "DEL without netns: {}",
        text(&deleted)
    );
    let refused = node.cni("ADD", "pxthick-gone2", gone, &conf);
    assert!(!refused.status.success());
    let error: Value = serde_json::from_slice(&refused.stdout).unwrap();
    assert!(
        error["details"]
            .as_str()
            .unwrap_or_default()
            .contains(&gone.display().to_string()),
        "{error}"
    );
    let del_refused = node.cni("DEL", "pxthick-gone2", gone, &conf);
    assert!(del_refused.status.success(), "{}", text(&del_refused));
    let mut links_after = node.node_links();
    links_after.retain(|l| l != "pxthk-br");
    assert_eq!(links_after, links_before, "the gone pod's ptp end");
    assert_eq!(reserved(&ipam_dir), Vec::<String>::new());
}
