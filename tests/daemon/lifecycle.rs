//! The daemon's lifecycle: SIGTERM stops it and removes its socket (a
//! second daemon on the socket is refused), and a rewritten kubeconfig
//! stops it to be started on the new credentials.

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

/// The installer rewrites the kubeconfig when the service account's token
/// changes (`kubectl delete -k deploy/` then `apply -k`: a new account).
/// A daemon that started on the old file stops as on SIGTERM once the file
/// changes, so kubelet starts it again on the new credentials, instead of
/// serving on unready with a token the API server refuses.
#[test]
fn a_rewritten_kubeconfig_stops_the_daemon_to_be_started_on_it() {
    let Some(w) = world("kcfg") else { return };
    let kubeconfig = w.own_kubeconfig();
    let mut daemon = w.daemon();
    // Written again unchanged: not a change.
    std::fs::copy(w.kube.api.plexus_kubeconfig(), &kubeconfig).unwrap();
    std::thread::sleep(Duration::from_secs(5));
    assert!(daemon.running(), "{}", daemon.log());
    // New content (the installer's rewrite with another token; here the
    // same credentials, re-serialized).
    let mut text = std::fs::read_to_string(&kubeconfig).unwrap();
    text.push('\n');
    std::fs::write(&kubeconfig, text).unwrap();
    let status = daemon.exit_within(Duration::from_secs(15));
    assert!(status.success(), "{}", daemon.log());
    assert!(
        daemon.log().contains("the kubeconfig changed"),
        "{}",
        daemon.log()
    );
    assert!(!w.socket().exists());
    // Started again, it serves on the new file.
    let _again = w.daemon();
    assert_eq!(w.http("/readyz").0, 200);
}
