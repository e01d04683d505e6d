//! The storm through plexus thick: a `plexus daemon` per simulated node
//! (its own node name, socket and state, all in one node namespace that a
//! relay connects to the API server), each holding the IPPools in its watch
//! cache. Each pod is an API object on its node whose cluster network is
//! macvlan with whereabouts IPAM; its ADD is the shim, exec'd as a runtime
//! execs it in the pod's own network namespace, forwarding to its node's
//! daemon. So each plexus thick call also makes and removes a real macvlan
//! interface and writes the pod's network-status: more work than the
//! IPAM-only calls of the other contenders.

use std::collections::HashMap;
use std::path::Path;

use std::time::{Duration, Instant};

use plexus_testkit::kube::{KubeApi, Relay};
use serde_json::{json, Value};

use super::{macvlan_whereabouts, pods, storm as run_storm, Answer, Setup, Storm};
use crate::daemons::{wait_ready, Daemons, Launch};
use crate::{cni_env_as, invoke, Namespaces};

/// The first daemon's metrics port in the node namespace; one per node on.
const METRICS_BASE: u16 = 19_300;

/// The storm through one daemon per node; what the pool holds after.
pub(super) fn storm(
    api: &KubeApi,
    network: &str,
    flat: &Path,
    setup: &Setup,
) -> Result<Storm, String> {
    let pid = std::process::id();
    let mut namespaces = Namespaces(Vec::new());
    let node = crate::node(&mut namespaces, pid)?;
    let _relay = Relay::into_netns(node.path(), api.port)
        .map_err(|e| format!("relay into the node namespace: {e}"))?;
    let ns = api.namespace("pxipam");
    let pods = pods(setup);
    let mut manifests = String::new();
    for (node_name, pod) in &pods {
        manifests.push_str(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {pod}, namespace: {ns}}}\n\
             spec: {{nodeName: {node_name}, containers: [{{name: c, image: busybox}}]}}\n---\n"
        ));
    }
    api.apply(&manifests);

    let mut daemons = Daemons::default();
    let work = setup.tmp.join("thick-ipam");
    let kubeconfig = api.plexus_kubeconfig();
    let launch = Launch {
        node: &node,
        plexus: setup.plexus,
        kubeconfig: &kubeconfig,
        work: &work,
    };
    let mut confs = HashMap::new();
    for n in 0..setup.nodes {
        let node_name = format!("node-{n}");
        let port = METRICS_BASE + u16::try_from(n).map_err(|e| e.to_string())?;
        daemons.0.push(launch.spawn(&node_name, port)?);
        wait_ready(&node, port, Duration::from_secs(60))?;
        let socket = launch.socket(&node_name);
        let conf = json!({
            "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
            "kubeconfig": api.plexus_kubeconfig(), "cniDir": work.join(&node_name).join("cache"),
            "daemonSocket": socket,
            "delegates": [macvlan_whereabouts(network, flat, setup)],
        });
        confs.insert(node_name, conf.to_string());
    }
    let mut netns = HashMap::new();
    for (_, pod) in &pods {
        let made = namespaces.create(format!("pxb-{pid}-i{pod}"))?;
        netns.insert(pod.clone(), made);
    }
    let call = |command: &str, node_name: &str, pod: &str| -> Answer {
        let args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={ns};K8S_POD_NAME={pod}");
        let env = cni_env_as(
            command,
            &format!("c-{pod}"),
            &netns[pod],
            "eth0",
            &args,
            Path::new("/nonexistent"),
        );
        let started = Instant::now();
        match invoke(&node, setup.plexus, &[], &env, confs[node_name].as_bytes()) {
            Ok(run) if run.stdout.is_empty() => (run.elapsed, Ok(Value::Null)),
            Ok(run) => (
                run.elapsed,
                serde_json::from_slice(&run.stdout).map_err(|e| format!("{command} {pod}: {e}")),
            ),
            Err(e) => (started.elapsed(), Err(format!("{command} {pod}: {e}"))),
        }
    };
    let storm = run_storm(api, network, setup, &call, &mut |_| {});
    drop(daemons);
    storm
}
