//! The daemon's lifecycle: SIGTERM stops it and removes its socket (a
//! second daemon on the socket is refused); a rotated token in its
//! kubeconfig is followed in place, and another rewrite stops it to be
//! started on the new file.

use std::path::Path;

use super::*;

#[test]
fn sigterm_stops_the_daemon_and_takes_its_socket_along() {
    let Some(w) = world("term") else { return };
    let mut daemon = w.daemon();
    assert!(w.socket().exists());
    // Root-only: the socket 0600 in a directory only root may enter.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&w.socket()), 0o600);
    assert_eq!(mode(w.socket().parent().unwrap()), 0o700);
    // A second daemon on the same socket is refused, the first untouched.
    let second = Command::new(PLEXUS)
        .args(["daemon", "--metrics-address", "none", "--socket"])
        .arg(w.socket())
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("another daemon is serving"),
        "{second:?}"
    );
    assert_eq!(w.http("/readyz").0, 200);

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = daemon.exit_within(Duration::from_secs(10));
    assert!(status.success(), "{}", daemon.log());
    assert!(!w.socket().exists());
}

/// A token of plexus's service account bound to the Secret `secret` of
/// kube-system (made here): deleting the Secret revokes it, as deleting a
/// Secret-bound token's Secret does on a cluster.
fn bound_token(w: &World, secret: &str) -> String {
    let api = &w.kube.api;
    api.kubectl(&["create", "secret", "generic", secret, "-n", "kube-system"]);
    let uid = api.kubectl(&[
        "get",
        "secret",
        secret,
        "-n",
        "kube-system",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600,
                 "boundObjectRef": {"apiVersion": "v1", "kind": "Secret", "name": secret, "uid": uid}}});
    let file = w.kube.tmp.path().join(format!("{secret}.json"));
    std::fs::write(&file, request.to_string()).unwrap();
    let path = "/api/v1/namespaces/kube-system/serviceaccounts/plexus/token";
    let answer: Value = serde_json::from_str(&api.kubectl(&[
        "create",
        "--raw",
        path,
        "-f",
        file.to_str().unwrap(),
    ]))
    .unwrap();
    answer["status"]["token"].as_str().unwrap().to_string()
}

/// `kubeconfig` rewritten as the installer writes it (whole, by rename)
/// with `token` instead of `was`, and `server` changed to `to`.
fn rewrite(kubeconfig: &Path, (was, token): (&str, &str), (server, to): (&str, &str)) {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    assert!(text.contains(was), "{text}");
    let text = text.replace(was, token).replace(server, to);
    let tmp = kubeconfig.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, kubeconfig).unwrap();
}

/// Issue 47 item 1: the installer rewrites the kubeconfig at every token
/// rotation (about every 48 min); the daemon follows it in place. Its
/// token, bound to a Secret, is rotated and the old one revoked (the
/// Secret deleted): the daemon keeps its PID, and a pod added after it
/// gets its networks and its network-status (written with the new token).
/// A rewrite the client cannot follow (another server) still stops it, to
/// be started on the new file.
#[test]
fn a_rotated_token_is_followed_in_place() {
    let Some(mut w) = world("kcfg") else { return };
    let kubeconfig = w.own_kubeconfig();
    let first = bound_token(&w, "plexus-kcfg-a");
    let static_token = std::fs::read_to_string(w.kube.api.dir.join("env"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("PLEXUS_TOKEN=").map(str::to_string))
        .unwrap();
    rewrite(&kubeconfig, (&static_token, &first), ("", ""));
    let mut daemon = w.daemon();
    let pid = daemon.pid();
    let p1 = w.pod_here("p1", "macnet@net1");
    assert_ok("ADD p1", &w.call("ADD", "p1", &p1, &w.conf));
    w.writes_delivered(&daemon);
    assert_eq!(w.status_of("p1").len(), 2, "cluster network and net1");

    // The rotation: a new token written, the old one revoked.
    let second = bound_token(&w, "plexus-kcfg-b");
    rewrite(&kubeconfig, (&first, &second), ("", ""));
    w.kube
        .api
        .kubectl(&["delete", "secret", "plexus-kcfg-a", "-n", "kube-system"]);
    // The API server's token cache keeps a revoked token valid for 10 s.
    std::thread::sleep(Duration::from_secs(12));
    assert!(daemon.running(), "{}", daemon.log());
    assert_eq!(daemon.pid(), pid);
    let p2 = w.kube.namespaces.add("kcfg-p2");
    w.pods(&["p2".to_string()], &w.kube.node.clone(), "macnet@net1");
    assert_ok("ADD p2", &w.call("ADD", "p2", &p2, &w.conf));
    w.writes_delivered(&daemon);
    assert_eq!(w.status_of("p2").len(), 2, "{}", daemon.log());
    assert_eq!(w.http("/readyz").0, 200);
    assert!(
        daemon.log().contains("credentials read again"),
        "{}",
        daemon.log()
    );
    for (pod, netns) in [("p1", &p1), ("p2", &p2)] {
        assert_ok(&format!("DEL {pod}"), &w.call("DEL", pod, netns, &w.conf));
    }

    // Another server: not a rotation.
    rewrite(
        &kubeconfig,
        (&second, &second),
        ("https://127.0.0.1:", "https://localhost:"),
    );
    let status = daemon.exit_within(Duration::from_secs(15));
    assert!(status.success(), "{}", daemon.log());
    assert!(
        daemon
            .log()
            .contains("the kubeconfig changed beyond its token and CA"),
        "{}",
        daemon.log()
    );
    assert!(!w.socket().exists());
    w.assert_nothing_left(&[p1, p2]);
}
