//! deploy/ for real: `kubectl apply -k deploy/` (kubectl from Debian's
//! kubernetes-client, a real client) against the test kube-apiserver, the
//! example NADs applied and listed with the CRD's printer columns, the
//! service account's rights checked from the API server's side, and the
//! container image built with podman (offline: FROM scratch) running
//! `plexus version`.

mod image_support;

use std::process::Command;

use image_support::Images;
use plexus_testkit::kube::{api, KubeApi};
use plexus_testkit::Feature;

fn deploy(path: &str) -> String {
    format!("{}/deploy/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// The API server with `kubectl apply -k deploy/` done, once per test
/// binary (the tests run concurrently, and two applies racing to create an
/// object fail), and the apply's output; `None` (the test skips) without
/// the API server.
fn deployed() -> Option<(&'static KubeApi, &'static str)> {
    if !plexus_testkit::require(&[Feature::KubeApiServer]) {
        return None;
    }
    static APPLIED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let applied = APPLIED.get_or_init(|| api().kubectl(&["apply", "-k", &deploy("")]));
    Some((api(), applied))
}

#[test]
fn apply_k_deploy_installs_everything_and_is_idempotent() {
    let Some((api, applied)) = deployed() else {
        return;
    };
    for object in [
        "customresourcedefinition.apiextensions.k8s.io/network-attachment-definitions.k8s.cni.cncf.io",
        "customresourcedefinition.apiextensions.k8s.io/ipamclaims.k8s.cni.cncf.io",
        "serviceaccount/plexus",
        "clusterrole.rbac.authorization.k8s.io/plexus",
        "clusterrolebinding.rbac.authorization.k8s.io/plexus",
        "configmap/plexus-config",
        "daemonset.apps/plexus",
    ] {
        assert!(applied.contains(object), "{object} in {applied}");
    }
    api.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=30s",
        "crd/network-attachment-definitions.k8s.cni.cncf.io",
        "crd/ipamclaims.k8s.cni.cncf.io",
    ]);
    // Applied again (a re-deploy): nothing to change.
    let again = api.kubectl(&["apply", "-k", &deploy("")]);
    assert!(again.lines().all(|l| l.ends_with(" unchanged")), "{again}");
    // kustomize's image tag reached the DaemonSet.
    let image = api.kubectl(&[
        "get",
        "daemonset",
        "-n",
        "kube-system",
        "plexus",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ]);
    assert_eq!(image, "plexus:latest");
}

#[test]
fn example_nads_apply_and_list_with_the_printer_columns() {
    let Some((api, _)) = deployed() else {
        return;
    };
    let ns = api.namespace("pxdeploy");
    api.kubectl(&["apply", "-n", &ns, "-f", &deploy("examples/")]);
    // The short name and the Resource column (device-info spec §4.1).
    let listed = api.kubectl(&["get", "net-attach-def", "-n", &ns]);
    let mut lines = listed.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "RESOURCE", "AGE"], "{listed}");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    assert!(rows.len() >= 5, "{listed}");
    let sriov = rows.iter().find(|r| r[0] == "sriov-net").unwrap();
    assert_eq!(sriov[1], "intel.com/sriov_netdevice");
    // IPAMClaim: its columns, and status only through the subresource.
    api.apply(&format!(
        "apiVersion: k8s.cni.cncf.io/v1alpha1\nkind: IPAMClaim\nmetadata: {{name: c1, namespace: {ns}}}\n\
         spec: {{network: bridge-net, interface: net1}}\n"
    ));
    let claims = api.kubectl(&["get", "ipamclaims", "-n", &ns]);
    let header: Vec<&str> = claims.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "NETWORK", "INTERFACE", "IPS", "OWNER", "AGE"]
    );
}

#[test]
fn the_service_account_may_do_exactly_what_plexus_does() {
    let Some((api, _)) = deployed() else {
        return;
    };
    let can = |verb: &str, resource: &str| {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(api.admin_kubeconfig())
            .args(["auth", "can-i", verb, resource, "--all-namespaces"])
            .arg(format!("--subresource={subresource}"))
            .args(["--as", "system:serviceaccount:kube-system:plexus"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim() == "yes"
    };
    for (verb, resource) in [
        ("get", "pods"),
        ("patch", "pods/status"),
        ("create", "events"),
        ("get", "network-attachment-definitions.k8s.cni.cncf.io"),
        // The node daemon's watch caches.
        ("list", "pods"),
        ("watch", "pods"),
        ("list", "network-attachment-definitions.k8s.cni.cncf.io"),
        ("watch", "network-attachment-definitions.k8s.cni.cncf.io"),
        ("get", "ipamclaims.k8s.cni.cncf.io"),
        ("patch", "ipamclaims.k8s.cni.cncf.io/status"),
        // Cluster-wide IPAM's reconciler: the claims entries are bound to,
        // and with node slices the Nodes and NodeSlicePools.
        ("list", "ipamclaims.k8s.cni.cncf.io"),
        ("list", "nodes"),
        ("list", "nodeslicepools.whereabouts.cni.cncf.io"),
        ("patch", "nodeslicepools.whereabouts.cni.cncf.io"),
    ] {
        assert!(can(verb, resource), "may {verb} {resource}");
    }
    for (verb, resource) in [
        ("watch", "ipamclaims.k8s.cni.cncf.io"),
        ("get", "nodes"),
        ("delete", "nodeslicepools.whereabouts.cni.cncf.io"),
        ("delete", "pods"),
        ("patch", "pods"),
        ("update", "network-attachment-definitions.k8s.cni.cncf.io"),
        ("patch", "ipamclaims.k8s.cni.cncf.io"),
        ("get", "secrets"),
        ("patch", "nodes"),
    ] {
        assert!(!can(verb, resource), "may not {verb} {resource}");
    }
}

#[test]
fn the_image_builds_offline_with_podman_and_runs_plexus_version() {
    if !plexus_testkit::require(&[Feature::Root, Feature::Podman]) {
        return;
    }
    // The image around the test's own build of the binary (static like
    // every build of this workspace, .cargo/config.toml).
    let images = Images::new();
    let tag = format!("localhost/plexus-test:{}", std::process::id());
    images.build_plexus(&tag);
    let podman = |args: &[&str]| images.podman_ok(args);
    let version = podman(&["run", "--rm", "--network=none", &tag, "version"]);
    assert!(
        version.starts_with(&format!("plexus {}", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    // The image is the binary and nothing else.
    let layers = podman(&[
        "image",
        "inspect",
        "--format",
        "{{len .RootFS.Layers}}",
        &tag,
    ]);
    assert_eq!(layers.trim(), "1");
}
