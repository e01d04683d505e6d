//! plexus on a cluster: the `plexus` binary, invoked as kubelet's runtime
//! invokes it inside a node namespace this test creates, reads the pod and
//! its NetworkAttachmentDefinitions from a real kube-apiserver (testkit::kube,
//! reached through a relay into the node namespace), with the token of its
//! service account bound by `deploy/rbac.yaml` only, so a missing verb fails
//! here. It writes network-status (multi-net-spec §5) and events back, and
//! its requests are counted from the API server's audit log.
//!
//! Modules: `add_del` (the pod and its NADs read, status and events
//! written, errors, a SIGKILL mid-ADD), `selection` (multi-net-spec §4.1.2
//! keys, namespace isolation, Warning events), `ipamclaims` (§8),
//! `cluster_network` (readiness, certificates, a NAD as the cluster
//! network), `device_info` and `install` (the installer's cleanup); the
//! world they share is here.

#[path = "../e2e_support/mod.rs"]
mod e2e_support;

mod add_del;
mod cluster_network;
mod device_info;
mod dra;
mod install;
mod ipamclaims;
mod selection;

use std::process::Output;
use std::time::{Duration, Instant};

use e2e_support::*;
use serde_json::{json, Value};

/// One test's world: a node namespace with a relay to the API server, two
/// pod namespaces, a Kubernetes namespace with the NAD `macnet` (macvlan on
/// the node's `uplink0`, host-local), and plexus's conf.
struct World {
    kube: KubeNode,
    conf: String,
}

fn world(tag: &str) -> Option<World> {
    let kube = kube_node(tag, "pxk", macvlan_network)?;
    let conf = json!({
        "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
        "kubeconfig": kube.api.plexus_kubeconfig(),
        "cniDir": kube.tmp.path().join("cache"), "confDir": kube.tmp.path().join("net.d"),
        "apiTimeout": 5,
        "delegates": [{"cniVersion": "1.0.0", "name": "podnet", "type": "bridge", "bridge": "br-pod",
                       "isGateway": true, "ipam": host_local(kube.tmp.path(), "10.10.0.0/24", "pod")}],
    })
    .to_string();
    Some(World { kube, conf })
}

impl World {
    /// Create pod `name` whose selection annotation is `selection`; its uid.
    fn pod(&self, name: &str, selection: Option<&str>) -> String {
        let annotations = selection
            .map(|s| {
                format!(
                    "  annotations: {{k8s.v1.cni.cncf.io/networks: {}}}\n",
                    serde_json::to_string(s).unwrap()
                )
            })
            .unwrap_or_default();
        self.kube.api.apply(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {}\n{annotations}\
             spec: {{containers: [{{name: c, image: busybox}}]}}\n",
            self.kube.kube_ns
        ));
        self.kube.pod_field(name, "{.metadata.uid}")
    }

    /// plexus for pod `pod` in pod namespace `i` (`None`: no CNI_NETNS), as
    /// kubelet's runtime calls it (`uid` as K8S_POD_UID when given).
    fn plexus(&self, command: &str, i: usize, netns: bool, pod: &str, uid: &str) -> Output {
        self.plexus_with(command, i, netns, pod, uid, &self.conf)
    }

    fn plexus_with(
        &self,
        command: &str,
        i: usize,
        netns: bool,
        pod: &str,
        uid: &str,
        conf: &str,
    ) -> Output {
        let netns = if netns {
            format!("/var/run/netns/{}", self.kube.pods[i])
        } else {
            String::new()
        };
        let mut args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={pod};K8S_POD_INFRA_CONTAINER_ID=c{i}",
            self.kube.kube_ns
        );
        if !uid.is_empty() {
            args.push_str(&format!(";K8S_POD_UID={uid}"));
        }
        plexus_at(
            &self.kube.node,
            command,
            &format!("c{i}"),
            &netns,
            "eth0",
            &args,
            conf,
        )
    }

    /// The pod's network-status annotation, read back with a GET.
    fn network_status(&self, pod: &str) -> Value {
        let text = self.kube.pod_field(
            pod,
            r"{.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}",
        );
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"))
    }

    /// The events of the pod: `(type, reason, message)`.
    fn events(&self, pod: &str) -> Vec<(String, String, String)> {
        pod_events(self.kube.api, &self.kube.kube_ns, pod)
    }

    /// plexus's conf with `changes` merged in (`null` removes a key).
    fn conf_with(&self, changes: Value) -> String {
        conf_with(&self.conf, changes)
    }

    /// An object as the admin reads it (`kubectl get KIND NAME -o json`).
    fn get(&self, kind: &str, name: &str) -> Value {
        serde_json::from_str(&self.kube.api.kubectl(&[
            "get",
            kind,
            "-n",
            &self.kube.kube_ns,
            name,
            "-o",
            "json",
        ]))
        .unwrap()
    }
}
