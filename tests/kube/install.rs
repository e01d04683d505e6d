//! `plexus install --watch --cleanup` (deploy/'s installer) against the API
//! server: the conflist stays while the installer's DaemonSet remains.

use std::time::{Duration, Instant};

use plexus_testkit::kube::KubeApi;

/// `plexus install --watch --cleanup --pod NS/NAME` (deploy/'s installer)
/// with `deploy/rbac.yaml`'s token, stopped with SIGTERM: whether it leaves
/// `00-plexus.conflist` (its log line says which and why).
fn installer_stopped_leaves_conflist(api: &KubeApi, pod: &str) -> (bool, String) {
    let tmp = tempfile::tempdir().unwrap();
    let (root, sa) = (tmp.path().join("host"), tmp.path().join("sa"));
    let conf_dir = root.join("etc/cni/net.d");
    std::fs::create_dir_all(&conf_dir).unwrap();
    std::fs::create_dir_all(&sa).unwrap();
    std::fs::write(
        conf_dir.join("10-cluster.conf"),
        r#"{"cniVersion": "1.0.0", "name": "c", "type": "bridge"}"#,
    )
    .unwrap();
    let env = std::fs::read_to_string(api.dir.join("env")).unwrap();
    let token = env
        .lines()
        .find_map(|l| l.strip_prefix("PLEXUS_TOKEN="))
        .expect("kube-up's env names plexus's token");
    std::fs::write(sa.join("token"), token).unwrap();
    std::fs::copy(api.dir.join("ca.crt"), sa.join("ca.crt")).unwrap();
    let mut installer = std::process::Command::new(env!("CARGO_BIN_EXE_plexus"))
        .arg("install")
        .arg("--root")
        .arg(&root)
        .arg("--service-account")
        .arg(&sa)
        .args(["--api-server", &format!("https://127.0.0.1:{}", api.port)])
        .args(["--watch", "--cleanup", "--poll-ms", "50", "--pod", pod])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let conflist = conf_dir.join("00-plexus.conflist");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !conflist.exists() {
        assert!(Instant::now() < deadline, "no conflist within 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = nix::unistd::Pid::from_raw(installer.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while installer.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the installer ran on after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = installer.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = String::from_utf8_lossy(&out.stderr);
    let last = log.lines().last().unwrap_or_default().to_string();
    (conflist.exists(), last)
}

#[test]
fn install_cleanup_keeps_the_conflist_while_its_daemonset_remains() {
    if !plexus_testkit::require(&[plexus_testkit::Feature::KubeApiServer]) {
        return;
    }
    let api = plexus_testkit::kube::api();
    let ns = api.namespace("cleanup");
    // A DaemonSet and a pod it controls (no controller-manager runs here:
    // the pod is made by hand, as the DaemonSet controller makes it).
    api.apply(&format!(
        r#"apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: plexus, namespace: {ns}}}
spec:
  selector: {{matchLabels: {{app: plexus}}}}
  template:
    metadata: {{labels: {{app: plexus}}}}
    spec: {{containers: [{{name: plexus, image: plexus}}]}}
"#
    ));
    let uid = api.kubectl(&[
        "get",
        "daemonset",
        "-n",
        &ns,
        "plexus",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    api.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: plexus-x1
  namespace: {ns}
  labels: {{app: plexus}}
  ownerReferences:
    - {{apiVersion: apps/v1, kind: DaemonSet, name: plexus, uid: "{uid}", controller: true}}
spec: {{containers: [{{name: plexus, image: plexus}}]}}
"#
    ));
    let pod = format!("{ns}/plexus-x1");

    // A rolling update stops the pod while its DaemonSet remains: the
    // conflist stays for the pods created before the next one installs.
    let (kept, log) = installer_stopped_leaves_conflist(api, &pod);
    assert!(kept, "kept while the DaemonSet remains: {log}");
    assert!(log.contains("DaemonSet remains"), "{log}");

    // `kubectl delete -k`: the DaemonSet goes (at once, background
    // cascade: the pod stays, no garbage collector runs here), so does the
    // conflist.
    api.kubectl(&["delete", "daemonset", "-n", &ns, "plexus"]);
    let (kept, log) = installer_stopped_leaves_conflist(api, &pod);
    assert!(!kept, "removed with the DaemonSet gone: {log}");
    assert!(log.contains("has no DaemonSet that remains"), "{log}");
    // A pod the API server does not know has no DaemonSet either.
    let (kept, log) = installer_stopped_leaves_conflist(api, &format!("{ns}/no-such-pod"));
    assert!(!kept, "{log}");
    api.kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}
