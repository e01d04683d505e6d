//! DRA (issue 49 item 1): the Multus contract through the API server, in
//! thin mode. A NAD annotated `k8s.v1.cni.cncf.io/resourceName` gets the
//! device a ResourceClaim of the pod was allocated, found in a stand-in DRA
//! driver's ResourceSlice by its `k8s.cni.cncf.io/deviceID` and
//! `k8s.cni.cncf.io/resourceName` attributes, exactly as it gets a device
//! plugin's device (tests/kube/device_info.rs): its device-info in
//! network-status shows which device it got. The API server serves
//! `resource.k8s.io/v1` as custom resources and the test plays the
//! scheduler (`plexus_testkit::dra`); kubelet's PodResources API is the
//! stand-in of `plexus_testkit::podresources`.

use super::*;
use plexus_testkit::dra::{self, network_device, Pick};
use plexus_testkit::podresources::{container, pod, PodResourcesServer};

const DRIVER: &str = "net.example.com";
const RES_A: &str = "example.com/net_a";
const RES_B: &str = "example.com/net_b";

/// A world serving DRA, with NADs `net-a` and `net-b` (macvlan) backed by
/// `RES_A` and `RES_B`, a device-info file for every device ID `dev-<n>`
/// (its PCI address `0000:3b:00.<n>` tells which device an attachment got),
/// and the node `node` (unique to the test: slices are cluster-wide).
struct DraWorld {
    w: World,
    node: String,
    devinfo: std::path::PathBuf,
}

fn dra_world(tag: &str) -> Option<DraWorld> {
    let w = world(tag)?;
    dra::serve(w.kube.api);
    let config = macvlan_network(w.kube.tmp.path());
    for (nad, resource) in [("net-a", RES_A), ("net-b", RES_B)] {
        w.kube.resource_nad(nad, resource, &config);
    }
    let devinfo = w.kube.tmp.path().join("devinfo");
    for resource in [RES_A, RES_B] {
        device_info_files(&devinfo, resource, 0..=9);
    }
    let node = format!("{}-node", w.kube.kube_ns);
    Some(DraWorld { w, node, devinfo })
}

impl DraWorld {
    /// Pod `name` on the node selecting `selection`; its uid.
    fn pod(&self, name: &str, selection: &str) -> String {
        let kube = &self.w.kube;
        kube.api.apply(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {}\n  \
             annotations: {{k8s.v1.cni.cncf.io/networks: \"{selection}\"}}\n\
             spec: {{nodeName: {}, containers: [{{name: c, image: busybox}}]}}\n",
            kube.kube_ns, self.node
        ));
        kube.pod_field(name, "{.metadata.uid}")
    }

    /// The driver's slice `<node>-<suffix>` for `node`, of `devices`.
    fn slice(&self, suffix: &str, node: &str, devices: &[Value]) {
        let name = format!("{}-{suffix}", self.node);
        self.w
            .kube
            .api
            .apply(&dra::slice(&name, DRIVER, node, devices));
    }

    /// Claim `name` of `count` devices, allocated `devices` of this node's
    /// pool and reserved for pod `pod` (name, uid).
    fn claim(&self, name: &str, devices: &[&str], pod: (&str, &str)) {
        let kube = &self.w.kube;
        let count = u32::try_from(devices.len()).unwrap();
        kube.api
            .apply(&dra::claim(&kube.kube_ns, name, "net", count));
        let picks: Vec<Pick> = devices
            .iter()
            .map(|d| (DRIVER, self.node.as_str(), *d))
            .collect();
        dra::allocate(kube.api, &kube.kube_ns, name, &picks, pod);
    }

    /// The conf with `kubelet`'s socket and the device-info directory.
    fn conf(&self, kubelet: &PodResourcesServer) -> String {
        self.w.conf_with(json!({
            "podResourcesSocket": kubelet.socket(), "deviceInfoDir": self.devinfo,
        }))
    }

    /// The PCI address of the device each secondary network of `pod`'s
    /// network-status got: (network, address).
    fn devices_of(&self, pod: &str) -> Vec<(String, String)> {
        let status = self.w.network_status(pod);
        status.as_array().unwrap()[1..]
            .iter()
            .map(|e| {
                let name = e["name"].as_str().unwrap();
                let short = name.rsplit('/').next().unwrap().to_string();
                let address = e["device-info"]["pci"]["pci-address"].as_str();
                (short, address.unwrap_or("none").to_string())
            })
            .collect()
    }

    /// The DRA requests plexus made since `before` (of `requests_all`).
    fn dra_requests(&self, before: usize) -> Vec<plexus_testkit::kube::AuditedRequest> {
        self.w.kube.api.audited()[before..]
            .iter()
            .filter(|r| {
                r.stage == "ResponseComplete"
                    && (r.resource == "resourceslices"
                        || (r.resource == "resourceclaims" && r.namespace == self.w.kube.kube_ns))
            })
            .cloned()
            .collect()
    }
}

/// The Multus contract end to end (Multus's `GetPodResourceMap` cases
/// "should populate separate resource map entries per network", "should
/// append all device IDs", "should populate resource map with all claims
/// sequentially", "should append device IDs to existing entry"): three
/// attachments of two NADs get the devices of two claims and kubelet's,
/// per resourceName, sorted by device ID; a GPU of the same claim (no
/// Multus attributes) is skipped silently, a device in no slice of the
/// node with a Warning event; device-info and network-status as with
/// device plugins; DEL leaves nothing. One LIST of the namespace's claims
/// and the slices' LISTs (the fallback without a node selector here).
#[test]
fn a_nad_with_a_resource_name_gets_the_device_a_claim_was_allocated() {
    let Some(d) = dra_world("dra") else { return };
    let w = &d.w;
    let uid = d.pod("p1", "net-a,net-b,net-a");
    d.slice(
        "net",
        &d.node,
        &[
            network_device("vf-3", "dev-3", RES_A),
            network_device("vf-1", "dev-1", RES_A),
            network_device("vf-9", "dev-9", RES_B),
            json!({"name": "gpu-0", "attributes": {"example.com/model": {"string": "x"}}}),
        ],
    );
    // Another node's slice, listing a device of this node's name.
    d.slice(
        "elsewhere",
        &format!("{}-other", d.node),
        &[network_device("vf-1", "dev-7", RES_A)],
    );
    d.claim("vfs", &["vf-3", "vf-9", "gpu-0"], ("p1", &uid));
    d.claim("more", &["vf-1", "gone"], ("p1", &uid));
    // kubelet's device plugin gave the pod dev-2 of RES_A as well.
    let kubelet = PodResourcesServer::start(vec![pod(
        &w.kube.kube_ns,
        "p1",
        vec![container("c", &[(RES_A, &["dev-2"])])],
    )]);
    let conf = d.conf(&kubelet);
    let before = w.kube.api.audited().len();

    assert_ok("ADD", &w.plexus_with("ADD", 0, true, "p1", &uid, &conf));
    // RES_A's pool: dev-1 and dev-3 (claims), dev-2 (kubelet).
    assert_eq!(
        d.devices_of("p1"),
        [
            ("net-a".to_string(), "0000:3b:00.1".to_string()),
            ("net-b".to_string(), "0000:3b:00.9".to_string()),
            ("net-a".to_string(), "0000:3b:00.2".to_string()),
        ]
    );
    // The plugins were handed those devices (Multus's deviceID and
    // pciBusID), as the record of the ADD keeps their configs.
    let record = std::fs::read_to_string(w.kube.tmp.path().join("cache/c0@eth0.json")).unwrap();
    for (id, handed) in [
        ("dev-1", true),
        ("dev-9", true),
        ("dev-2", true),
        ("dev-3", false),
    ] {
        for key in ["deviceID", "pciBusID"] {
            let said = format!("\"{key}\":\"{id}\"");
            assert_eq!(record.contains(&said), handed, "{said}: {record}");
        }
    }
    let requests = d.dra_requests(before);
    assert_eq!(
        count(&requests, "list", "resourceclaims", ""),
        1,
        "{requests:?}"
    );
    let by_node = format!("fieldSelector=spec.nodeName%3D{}", d.node);
    let selected = requests
        .iter()
        .filter(|r| r.uri.ends_with(&by_node))
        .count();
    assert_eq!(selected, 1, "{requests:?}");
    assert_eq!(
        count(&requests, "get", "resourceclaims", ""),
        0,
        "{requests:?}"
    );
    let warned: Vec<String> = w
        .events("p1")
        .into_iter()
        .filter(|(t, _, m)| t == "Warning" && m.contains("in no ResourceSlice"))
        .map(|(_, _, m)| m)
        .collect();
    assert_eq!(warned.len(), 1, "{:?}", w.events("p1"));
    assert!(
        warned[0].contains(&format!(
            "ResourceClaim {}/more status.allocation.devices.results[1]: device {DRIVER}/{}/gone",
            w.kube.kube_ns, d.node
        )),
        "{warned:?}"
    );
    assert!(!warned[0].contains("gpu-0"), "{warned:?}");

    assert_ok("DEL", &w.plexus_with("DEL", 0, true, "p1", &uid, &conf));
    assert_nothing_left(w.kube.tmp.path());
}

/// Bad input, each a CNI error naming the object and the field, and
/// nothing left: a claim reserved for the pod but not allocated; a slice
/// whose Multus attribute is not a string; a claim's device on another
/// node (skipped with a warning, as Multus does, so the NAD has no device:
/// too few devices, naming the resource).
#[test]
fn bad_claims_and_slices_fail_the_add_naming_the_field() {
    let Some(d) = dra_world("drabad") else { return };
    let w = &d.w;
    let ns = &w.kube.kube_ns;
    let kubelet_of = |pod_name: &str| {
        PodResourcesServer::start(vec![pod(ns, pod_name, vec![container("c", &[])])])
    };

    // The ADD of pod `name` in pod namespace `i` fails with `code`, and
    // leaves nothing: its details.
    let add_fails = |name: &str, i: usize, uid: &str, code: u32| -> String {
        let kubelet = kubelet_of(name);
        let out = w.plexus_with("ADD", i, true, name, uid, &d.conf(&kubelet));
        let e = cni_error(&out);
        assert_eq!(e["code"], code, "{e}");
        assert_nothing_left(w.kube.tmp.path());
        e["details"].as_str().unwrap().to_string()
    };

    // Not allocated, though reserved for the pod.
    let uid = d.pod("p1", "net-a");
    dra::reserved_unallocated(w.kube.api, ns, "unallocated", ("p1", &uid));
    let details = add_fails("p1", 0, &uid, 6);
    assert!(
        details.contains(&format!(
            "whose device may come from the pod's ResourceClaims (DRA): ResourceClaim \
             {ns}/unallocated status.allocation: required"
        )),
        "{details}"
    );

    // A slice whose deviceID is an int.
    let uid = d.pod("p2", "net-a");
    d.slice(
        "bad",
        &d.node,
        &[json!({"name": "vf-1", "attributes": {
            "k8s.cni.cncf.io/deviceID": {"int": 5},
            "k8s.cni.cncf.io/resourceName": {"string": RES_A}}})],
    );
    d.claim("torn", &["vf-1"], ("p2", &uid));
    let details = add_fails("p2", 1, &uid, 6);
    assert!(
        details.contains(&format!(
            "ResourceSlice {}-bad spec.devices[0].attributes[\"k8s.cni.cncf.io/deviceID\"]: \
             must be a string attribute",
            d.node
        )),
        "{details}"
    );

    // A device of another node's pool.
    let uid = d.pod("p3", "net-b");
    let other = format!("{}-far", d.node);
    d.slice("far", &other, &[network_device("vf-5", "dev-5", RES_B)]);
    w.kube.api.apply(&dra::claim(ns, "far", "net", 1));
    dra::allocate(
        w.kube.api,
        ns,
        "far",
        &[(DRIVER, &other, "vf-5")],
        ("p3", &uid),
    );
    let details = add_fails("p3", 0, &uid, 101);
    assert!(
        details.contains(&format!(
            "but kubelet allocated 0 device(s) of it to pod {ns}/p3"
        )),
        "{details}"
    );
    assert!(
        details.contains(&format!(
            "left out: ResourceClaim {ns}/far status.allocation.devices.results[0]: device \
             {DRIVER}/{other}/vf-5 is in no ResourceSlice of the pod's node"
        )),
        "{details}"
    );
}
