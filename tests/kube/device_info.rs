//! device-info (device-info-SPEC §4.2.1, §6.1; multi-net-spec §5.3.8)
//! through the API server: a resource-backed network's device in the
//! published network-status.

use super::*;

/// device-info-SPEC §4.2.1 and §6.1 (multi-net-spec §5.3.8) through the API
/// server: a NAD backed by a device-plugin resource gets the device kubelet
/// allocated (from the stand-in kubelet: this API server has no node; the
/// real kubelet's path is tests/cluster_devices.rs), the device plugin's
/// file for it is copied for the attachment, and its content is in the
/// network-status plexus writes; DEL removes the copy.
#[test]
fn device_info_of_a_resource_backed_network_is_in_the_published_status() {
    use plexus_testkit::podresources::{container, pod, PodResourcesServer};
    let Some(w) = world("devinfo") else { return };
    let resource = "example.com/macvlan_dev";
    let macnet = macvlan_network(w.kube.tmp.path());
    w.kube.api.apply(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
         metadata: {{name: devnet, namespace: {}, annotations: {{k8s.v1.cni.cncf.io/resourceName: {resource}}}}}\n\
         spec:\n  config: '{macnet}'\n",
        w.kube.kube_ns
    ));
    let uid = w.pod("p1", Some("devnet"));
    let kubelet = PodResourcesServer::start(vec![pod(
        &w.kube.kube_ns,
        "p1",
        vec![container("c", &[(resource, &["dev-7"])])],
    )]);
    let devinfo = w.kube.tmp.path().join("devinfo");
    let dp = devinfo.join("dp/example.com-macvlan_dev-dev-7-device.json");
    std::fs::create_dir_all(dp.parent().unwrap()).unwrap();
    let info = json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:3b:02.7"}});
    std::fs::write(&dp, info.to_string()).unwrap();
    let conf = w.conf_with(json!({
        "podResourcesSocket": kubelet.socket(), "deviceInfoDir": devinfo,
    }));

    assert_ok("ADD", &w.plexus_with("ADD", 0, true, "p1", &uid, &conf));
    let status = w.network_status("p1");
    assert_eq!(status[0].get("device-info"), None, "{status}");
    assert_eq!(status[1]["name"], format!("{}/devnet", w.kube.kube_ns));
    assert_eq!(status[1]["device-info"], info, "{status}");
    let copy = devinfo.join(format!("cni/{}-devnet-c0-net1-device.json", w.kube.kube_ns));
    assert!(copy.exists());

    assert_ok("DEL", &w.plexus_with("DEL", 0, true, "p1", &uid, &conf));
    assert!(!copy.exists());
    assert!(dp.exists(), "the device plugin's own file is not plexus's");

    // An invalid device plugin file: device-info is optional (§5.3.8), so
    // the pod gets the network without it and a Warning event naming the
    // file (Multus only logs, `CopyDeviceInfoForCNIFromDP`).
    std::fs::write(&dp, r#"{"type": "pci", "version": "1.1.0"}"#).unwrap();
    let uid = w.pod("p2", Some("devnet"));
    let kubelet = PodResourcesServer::start(vec![pod(
        &w.kube.kube_ns,
        "p2",
        vec![container("c", &[(resource, &["dev-7"])])],
    )]);
    let conf = conf_with(&conf, json!({"podResourcesSocket": kubelet.socket()}));
    assert_ok("ADD", &w.plexus_with("ADD", 1, true, "p2", &uid, &conf));
    let status = w.network_status("p2");
    assert_eq!(status[1]["name"], format!("{}/devnet", w.kube.kube_ns));
    assert_eq!(status[1].get("device-info"), None, "{status}");
    let warned: Vec<String> = w
        .events("p2")
        .into_iter()
        .filter(|(t, reason, _)| t == "Warning" && reason == "InvalidDeviceInfo")
        .map(|(_, _, message)| message)
        .collect();
    assert_eq!(warned.len(), 1, "{:?}", w.events("p2"));
    assert!(
        warned[0].contains(&dp.display().to_string())
            && warned[0].contains("goes on without device-info"),
        "{warned:?}"
    );
    assert_ok("DEL", &w.plexus_with("DEL", 1, true, "p2", &uid, &conf));
    assert_nothing_left(w.kube.tmp.path());
}
