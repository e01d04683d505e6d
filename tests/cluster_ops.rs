//! Operations a cluster lives through (issue 24 item 4), on the one-node
//! cluster of `testkit/node-up` with plexus deployed as an operator does:
//! `kubectl apply -k deploy/` unchanged (thick mode, the daemon container
//! serving the calls). Each ends with every pod Running with its networks
//! (kubelet's retries allowed: no pod failing for good) and, once the pods
//! are deleted, nothing left on the node: no plexus record, host-local
//! reservation, device-info file, pod netns or veth.
//!
//! - a DaemonSet rolling update to a new image while pods start: the
//!   installer replaces `/opt/cni/bin/plexus` (by rename: a runtime exec'ing
//!   it sees the old binary or the new one, never half of one);
//! - the daemon container killed (SIGKILL) during a burst of 30 pods;
//! - a node reboot (`node-up`'s power cut): the sandboxes are gone, and the
//!   DELs kubelet and containerd run for them afterwards leave no record or
//!   reservation of theirs;
//! - an upgrade from the previous release and a rollback (issue 47).
//!
//! (The kubelet and containerd restarts are tests/cluster.rs's.) The node
//! starts once for this binary (about 30 s) and is shared; the tests take
//! turns, each in a Kubernetes namespace of its own.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use plexus_testkit::kube::nad_manifest;
use plexus_testkit::node::{self, Node};
use plexus_testkit::Feature;
use serde_json::json;

/// How long pods may take to be Running with their networks when something
/// was in the way (kubelet retries a failed sandbox with a backoff).
const PODS_RECOVER: Duration = Duration::from_secs(180);

/// The secondary network every pod of these tests is attached to.
const NAD: &str = "side";

/// A test's [`node::Turn`], and when the test's own work started.
type Turn = (node::Turn, Instant);

/// The node's turn, with deploy/ applied as it is (thick mode), and the
/// test's namespace holding the [`NAD`].
fn turn(prefix: &str) -> Option<Turn> {
    let (alone, node, ns, before) = node::turn(&[], prefix)?;
    // A macvlan on the node's link with host-local: a reservation on the
    // node's disk per attachment, which a lost DEL would leave.
    node.apply(
        &ns,
        &nad_manifest(
            NAD,
            &[],
            &json!({"cniVersion": "1.0.0", "name": ns, "type": "macvlan", "master": node.iface,
                    "mode": "bridge", "ipam": {"type": "host-local", "subnet": "10.31.0.0/24"}}),
        ),
    );
    Some(((alone, node, ns, before), Instant::now()))
}

/// The test's pods deleted, leaving nothing on the node, and the test's time
/// (`what` test, since `started`) reported.
fn leave_nothing(node: &Node, ns: &str, before: &BTreeSet<String>, what: &str, started: Instant) {
    node.delete_pods_leaving_nothing(ns, before);
    eprintln!("{what} test: {:?}", started.elapsed());
}

/// `count` sleeping pods `{prefix}-{i}` attached to the [`NAD`], created by
/// one `kubectl apply` (a burst); their names.
fn create_pods(node: &Node, ns: &str, prefix: &str, count: usize) -> Vec<String> {
    let names: Vec<String> = (0..count).map(|i| format!("{prefix}-{i}")).collect();
    let manifest: Vec<String> = names.iter().map(|n| node.sleeping_pod(n, NAD)).collect();
    node.apply(ns, &manifest.join("---\n"));
    names
}

/// Whether pod `ns/name` is Running and its network-status (multi-net spec
/// v1.3 §5) has the [`NAD`]: the runtime called plexus, not the cluster
/// network alone.
fn attached(node: &Node, ns: &str, name: &str) -> bool {
    let text = node.pod_field(
        ns,
        name,
        r"{.status.phase} {.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}",
    );
    text.starts_with("Running ") && text.contains(&format!("\"{ns}/{NAD}\""))
}

/// Waits until every pod of `names` is [`attached`], within [`PODS_RECOVER`].
fn wait_attached(node: &Node, ns: &str, names: &[String]) {
    let started = Instant::now();
    for name in names {
        let left = PODS_RECOVER.saturating_sub(started.elapsed());
        node.wait_for(
            &format!("pod {ns}/{name} Running with network {NAD}"),
            left,
            || attached(node, ns, name),
        );
    }
    eprintln!(
        "{} pods of {ns} Running with their networks {:?} after the first check",
        names.len(),
        started.elapsed()
    );
}

/// A jsonpath of the DaemonSet's pod (`app=plexus`, one on the one node).
fn plexus_pod(node: &Node, jsonpath: &str) -> String {
    node.plexus_pods(&format!("{{.items[0]{jsonpath}}}"))
}

/// Waits until the DaemonSet's pod is Ready again (its daemon serving).
fn wait_plexus_ready(node: &Node) {
    node.wait_rolled_out(Duration::from_secs(120));
    let ready = [
        "wait",
        "pod",
        "-n",
        "kube-system",
        "-l",
        "app=plexus",
        "--for=condition=Ready",
        "--timeout=45s",
    ];
    node.wait_for("plexus's pod Ready", Duration::from_secs(120), || {
        node.kubectl_output(&ready, None).status.success()
    });
}

#[test]
fn a_rolling_update_while_pods_start_replaces_the_binary_and_fails_no_pod() {
    let Some(((_alone, node, ns, before), started)) = turn("rollout") else {
        return;
    };
    let installed = || node.exec_ok(&["stat", "-c", "%i", "/opt/cni/bin/plexus"]);
    let old_inode = installed();
    // The new image: its binary differs from the deployed one (node-deploy
    // --tag marks it), so the installer must replace it.
    node.deploy(&["--tag", "rollout"]);

    // Pods are created one after another from before the update until after
    // it, so some start while the old DaemonSet pod stops, while neither
    // runs, and while the new one installs.
    let names = roll_while_pods_start(node, &ns, "rollout", "pod");
    eprintln!("{} pods created around the rolling update", names.len());
    wait_attached(node, &ns, &names);

    // The installer of the new image put its binary in place by rename (a
    // new inode), leaving no temporary file beside it.
    assert_ne!(installed(), old_inode, "/opt/cni/bin/plexus was replaced");
    let tail = node.exec_ok(&["tail", "-c", "40", "/opt/cni/bin/plexus"]);
    assert!(tail.contains("plexus image tag rollout"), "{tail:?}");
    let beside = node.exec_ok(&["ls", "-a", "/opt/cni/bin"]);
    let plexus_files: Vec<&str> = beside.lines().filter(|f| f.contains("plexus")).collect();
    assert_eq!(plexus_files, ["plexus"], "in /opt/cni/bin");
    assert!(plexus_pod(node, ".spec.containers[1].image").ends_with("plexus:rollout"));

    leave_nothing(node, &ns, &before, "rolling update", started);
}

#[test]
fn the_daemon_killed_during_a_burst_of_30_pods_fails_none_and_leaks_nothing() {
    let Some(((_alone, node, ns, before), started)) = turn("killed") else {
        return;
    };
    let restarts = || {
        plexus_pod(
            node,
            ".status.containerStatuses[?(@.name==\"daemon\")].restartCount",
        )
    };
    let restarts_before: u32 = restarts().parse().expect("a restart count");
    let names = create_pods(node, &ns, "burst", 30);
    // Killed once the runtime is calling it: the first records are written.
    node.wait_for(
        "plexus's first records of the burst",
        Duration::from_secs(60),
        || {
            let records = node.exec(&["ls", "/var/lib/cni/plexus"]);
            String::from_utf8_lossy(&records.stdout).lines().count() >= 3
        },
    );
    let daemon = node.pids_of(&["/usr/local/bin/plexus", "daemon"]);
    assert_eq!(daemon.len(), 1, "one daemon on the node: {daemon:?}");
    let status = std::process::Command::new("kill")
        .args(["-KILL", &daemon[0].to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "the daemon {} killed", daemon[0]);
    eprintln!(
        "daemon {} killed {:?} after the burst",
        daemon[0],
        started.elapsed()
    );

    wait_attached(node, &ns, &names);
    wait_plexus_ready(node);
    let restarts_after: u32 = restarts().parse().expect("a restart count");
    assert!(
        restarts_after > restarts_before,
        "kubelet restarted the killed daemon ({restarts_before} -> {restarts_after})"
    );
    leave_nothing(node, &ns, &before, "daemon kill", started);
}

#[test]
fn after_a_node_reboot_the_old_sandboxes_leave_nothing_and_pods_get_their_networks() {
    let Some(((_alone, node, ns, before), started)) = turn("reboot") else {
        return;
    };
    let names = create_pods(node, &ns, "survivor", 3);
    wait_attached(node, &ns, &names);
    let started_at = |name: &str| {
        node.pod_field(
            &ns,
            name,
            "{.status.containerStatuses[0].state.running.startedAt}",
        )
    };
    let first_start: Vec<String> = names.iter().map(|n| started_at(n)).collect();
    // The sandboxes of before the reboot, by their container IDs: plexus's
    // records are named `<id>@<ifname>.json`.
    let records = node.exec_ok(&["ls", "/var/lib/cni/plexus"]);
    let old_sandboxes: BTreeSet<String> = records
        .lines()
        .filter_map(|r| r.split_once('@').map(|(id, _)| id.to_string()))
        .collect();
    assert_eq!(old_sandboxes.len(), names.len(), "{records}");

    let reboot = Instant::now();
    node.reboot();
    eprintln!("node rebooted and Ready in {:?}", reboot.elapsed());

    // kubelet starts the pods again, in new sandboxes, with their networks.
    for (name, first) in names.iter().zip(&first_start) {
        node.wait_for(
            &format!("{name} started again after the reboot"),
            PODS_RECOVER,
            || {
                let now = started_at(name);
                !now.is_empty() && now != *first
            },
        );
    }
    wait_attached(node, &ns, &names);
    // The old sandboxes' DELs (kubelet stopping them, with no netns) leave
    // no record or reservation of theirs.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut left = old_sandbox_files(node, &old_sandboxes);
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        left = old_sandbox_files(node, &old_sandboxes);
    }
    assert_eq!(
        left,
        Vec::<String>::new(),
        "left by the sandboxes of before the reboot"
    );
    wait_plexus_ready(node);

    // A pod created after the reboot gets its networks.
    let after = create_pods(node, &ns, "after-reboot", 1);
    wait_attached(node, &ns, &after);
    leave_nothing(node, &ns, &before, "reboot", started);
}

/// Files of plexus's records and host-local's reservations on the node that
/// name one of `sandboxes` (container IDs), in their names or contents.
fn old_sandbox_files(node: &Node, sandboxes: &BTreeSet<String>) -> Vec<String> {
    let dirs = ["/var/lib/cni/networks", "/var/lib/cni/plexus"];
    let mut grep = vec!["grep", "-rl"];
    for id in sandboxes {
        grep.extend(["-e", id]);
    }
    grep.extend(dirs);
    let by_content = node.exec(&grep);
    let all = node.exec_ok(&[&["find"], &dirs[..]].concat());
    let mut files: BTreeSet<String> = String::from_utf8_lossy(&by_content.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    files.extend(
        all.lines()
            .filter(|f| sandboxes.iter().any(|id| f.contains(id.as_str())))
            .map(str::to_string),
    );
    files.into_iter().collect()
}

/// Rolls the DaemonSet to the image `plexus:<tag>` (imported by
/// `node-deploy --tag`) and waits until its pod is Ready.
fn roll_to(node: &Node, tag: &str) {
    let image = format!("plexus:{tag}");
    let daemonset = node.kubectl(&[
        "get",
        "daemonset",
        "plexus",
        "-n",
        "kube-system",
        "-o",
        "json",
    ]);
    let daemonset: serde_json::Value = serde_json::from_str(&daemonset).expect("the DaemonSet");
    let containers = daemonset["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("its containers");
    // One change of the pod template, one roll: every image, and the
    // daemon's arguments as the version has them.
    let mut patch = Vec::new();
    for (i, container) in containers.iter().enumerate() {
        let at = |field: &str| format!("/spec/template/spec/containers/{i}/{field}");
        patch.push(json!({"op": "replace", "path": at("image"), "value": image}));
        if container["name"] == "daemon" {
            let args = release_daemon_args(tag);
            patch.push(json!({"op": "replace", "path": at("args"), "value": args}));
        }
    }
    let patch = serde_json::Value::Array(patch).to_string();
    node.kubectl(&[
        "patch",
        "daemonset",
        "plexus",
        "-n",
        "kube-system",
        "--type=json",
        "-p",
        &patch,
    ]);
    wait_plexus_ready(node);
}

/// The daemon's arguments in the DaemonSet of release `tag`: this tree's
/// `deploy/daemonset.yaml`, or the previous release's own at its commit, as
/// `kubectl rollout undo` restores its pod template (it knows none of the
/// flags added since, `--dra` among them).
fn release_daemon_args(tag: &str) -> Vec<String> {
    let text = match tag {
        "previous" => plexus_testkit::peers::previous_release_file("deploy/daemonset.yaml")
            .expect("the previous release's DaemonSet"),
        _ => std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/daemonset.yaml"),
        )
        .expect("deploy/daemonset.yaml"),
    };
    let docs = plexus::manifest::parse_documents(&text, "daemonset.yaml").expect("it parses");
    let daemonset = docs
        .iter()
        .find(|d| d.value["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    let containers = daemonset.value["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("its containers");
    let daemon = containers
        .iter()
        .find(|c| c["name"] == "daemon")
        .expect("its daemon container");
    daemon["args"]
        .as_array()
        .expect("the daemon's arguments")
        .iter()
        .filter_map(|a| a.as_str().map(String::from))
        .collect()
}

/// Rolls the DaemonSet to the image `plexus:<tag>` while pods `<prefix>-N`
/// are created one after another, and checks meanwhile that the conflist
/// is never absent or unreadable and is rewritten at most once; the pods
/// created.
fn roll_while_pods_start(node: &Node, ns: &str, tag: &str, prefix: &str) -> Vec<String> {
    let rolled = AtomicBool::new(false);
    std::thread::scope(|s| {
        let creator = s.spawn(|| {
            let mut names = Vec::new();
            let mut after = 0;
            while after < 2 && names.len() < 30 {
                if rolled.load(Ordering::Relaxed) {
                    after += 1;
                }
                let name = format!("{prefix}-{}", names.len());
                node.apply(ns, &node.sleeping_pod(&name, NAD));
                names.push(name);
                std::thread::sleep(Duration::from_millis(500));
            }
            names
        });
        // The conflist's inode and content every 100 ms: never absent or
        // torn, and written at most once (a rename: a new inode).
        let watcher = s.spawn(|| {
            let mut missing = 0;
            let mut inodes = BTreeSet::new();
            let look = "stat -c %i /etc/cni/net.d/00-plexus.conflist && cat /etc/cni/net.d/00-plexus.conflist";
            while !rolled.load(Ordering::Relaxed) {
                let out = node.exec(&["sh", "-c", look]);
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                let (inode, conflist) = text.split_once('\n').unwrap_or_default();
                let parses = serde_json::from_str::<serde_json::Value>(conflist).is_ok();
                if !out.status.success() || !parses {
                    missing += 1;
                } else {
                    inodes.insert(inode.to_string());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (missing, inodes)
        });
        std::thread::sleep(Duration::from_secs(1));
        roll_to(node, tag);
        rolled.store(true, Ordering::Relaxed);
        let names = creator.join().expect("the pod creator ran");
        let (missing, inodes) = watcher.join().expect("the conflist watcher ran");
        assert_eq!(
            missing, 0,
            "the conflist was absent or torn during the roll to {tag}"
        );
        assert!(
            inodes.len() <= 2,
            "the conflist was written {} times during the roll to {tag}",
            inodes.len().saturating_sub(1)
        );
        names
    })
}

/// The network-status of each pod of `names`, as kubectl prints it.
fn statuses(node: &Node, ns: &str, names: &[String]) -> Vec<String> {
    names
        .iter()
        .map(|name| node.network_status_text(ns, name))
        .collect()
}

/// The pods `names` still have the networks they had (`had`: their
/// [`statuses`]).
#[track_caller]
fn assert_kept(node: &Node, ns: &str, names: &[String], had: &[String]) {
    assert_eq!(statuses(node, ns, names), had, "a pod lost a network");
}

/// Issue 47 item 2: an upgrade from the previous release
/// (`.ci/previous-release`, the last landed main before the issue) to this
/// one, and a rollback, with pods running and pods starting throughout:
/// - no pod loses a network (every network-status unchanged, every pod's
///   `net1` still there), and every pod started during a roll gets its
///   networks with no failed sandbox;
/// - pods of one version are deleted by the other (each reads the other's
///   records) and leave nothing;
/// - the conflist is never absent or torn while the installers replace
///   each other.
#[test]
fn an_upgrade_from_the_previous_release_and_a_rollback_lose_nothing() {
    if !plexus_testkit::require(&[Feature::KubeNode, Feature::PreviousRelease]) {
        return;
    }
    let previous = plexus_testkit::peers::previous_release().expect("required above");
    let Some(((_alone, node, ns, before), started)) = turn("upgrade") else {
        return;
    };
    node.deploy_binary(&previous, &["--tag", "previous"]);
    node.deploy(&["--tag", "current"]);
    // The previous release serves the node, with pods running.
    roll_while_pods_start(node, &ns, "previous", "warmup");
    let old = create_pods(node, &ns, "old", 4);
    wait_attached(node, &ns, &old);
    let old_status = statuses(node, &ns, &old);

    // The upgrade.
    let during_up = roll_while_pods_start(node, &ns, "current", "up");
    wait_attached(node, &ns, &during_up);
    assert_kept(node, &ns, &old, &old_status);
    for name in &old {
        node.kubectl(&[
            "exec",
            "-n",
            &ns,
            name,
            "--",
            "cat",
            "/sys/class/net/net1/address",
        ]);
    }
    // This version deletes pods the previous one added.
    let (gone, old) = old.split_at(2);
    let pods = |verb: &str, more: &[&str]| {
        let args = [&[verb, "pod", "-n", &ns][..], more, &[&gone[0], &gone[1]]].concat();
        node.kubectl(&args)
    };
    pods("delete", &["--wait=false"]);
    node.wait_for("the previous release's pods deleted", PODS_RECOVER, || {
        pods("get", &["--ignore-not-found", "-o", "name"])
            .trim()
            .is_empty()
    });
    let new = create_pods(node, &ns, "new", 2);
    wait_attached(node, &ns, &new);
    let new_status = statuses(node, &ns, &new);

    // The rollback.
    let during_back = roll_while_pods_start(node, &ns, "previous", "back");
    wait_attached(node, &ns, &during_back);
    assert_kept(node, &ns, old, &old_status[2..]);
    assert_kept(node, &ns, &new, &new_status);
    let every: Vec<String> = [old, &new, &during_up, &during_back].concat();
    let failed: Vec<String> = every
        .iter()
        .map(|pod| node.events(&ns, pod, "FailedCreatePodSandBox"))
        .filter(|e| !e.trim().is_empty())
        .collect();
    assert!(
        failed.is_empty(),
        "sandboxes failed during the rolls: {failed:?}"
    );
    // The previous release deletes pods this one added, and the rest.
    node.delete_pods_leaving_nothing(&ns, &before);
    // The node back on this version for the tests after this one.
    roll_to(node, "current");
    eprintln!("upgrade and rollback test: {:?}", started.elapsed());
}
