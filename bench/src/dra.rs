//! The DRA case (`--dra`, issue 49): a VF claimed through plexus's own DRA
//! driver beside the same kind of VF through the device-plugin path, one
//! pod after the other, both through `plexus daemon` (thick) on the test
//! API server, on VFs of the machine's SR-IOV PF: in the test VM only
//! (`vm-tests/run --bench -- --dra`), which has qemu's igb and starts the
//! API server there.
//!
//! - **DRA:** the pod's claim is allocated a VF of the daemon's pool (the
//!   test kit plays the scheduler), the stand-in kubelet DRA manager has the
//!   daemon prepare it (not timed: kubelet does it before the sandbox), and
//!   the pod's ADD attaches it as the claim's configuration says (`sriov`
//!   with host-local, `net1`), then writes the claim's status.
//! - **Device plugin:** the pod selects a NAD with the same configuration
//!   and a `resourceName`, and kubelet's PodResources (the test kit's
//!   stand-in) gives it the other VF, as sriov-network-device-plugin would.
//!
//! Both ADDs attach the cluster network too (a bridge), alike. The target:
//! a claimed VF's ADD no slower than the device plugin's (within 10% for
//! the VM's noise).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use plexus_dataplane::NetNs;
use plexus_testkit::dra as stand_in;
use plexus_testkit::kube::api;
use plexus_testkit::kubelet_dra::{claim, KubeletDra};
use plexus_testkit::podresources::{container, pod, PodResourcesServer};
use plexus_testkit::sriov::{find_pf, SriovVfs};
use serde_json::{json, Value};

use crate::daemons::{Daemons, NodeDaemon};
use crate::{cni_env_as, invoke, percentile, print_table, verdict, Namespaces};

const NODE_NAME: &str = "bench-dra";
const DRIVER: &str = "dra.plexus.dev";
const RESOURCE: &str = "example.com/igb_vfs";
/// The most a claimed VF's ADD may take against the device plugin's.
const RATIO_MAX: f64 = 1.10;

/// What the case needs from the main benchmark.
pub struct Setup<'a> {
    pub plexus: &'a Path,
    pub namespaces: &'a mut Namespaces,
    pub tmp: &'a Path,
    pub pods: usize,
}

/// The configuration of the VF's network, both ways.
fn vf_network(tmp: &Path) -> Value {
    json!({"cniVersion": "1.0.0", "name": "vfnet", "type": "sriov",
           "dataDir": tmp.join("sriov-data"),
           "ipam": {"type": "host-local", "subnet": "10.77.0.0/24",
                    "dataDir": tmp.join("ipam")}})
}

/// Runs the case and prints its table; `Ok(false)` when the target was missed.
pub fn run(setup: &mut Setup) -> Result<bool, String> {
    if std::env::var("PLEXUS_VM").as_deref() != Ok("1") {
        return Err("--dra recreates the PF's VFs: run it in the test VM \
                    (vm-tests/run --bench -- --dra)"
            .into());
    }
    find_pf().ok_or("no SR-IOV PF here")?;
    let vfs = SriovVfs::create(2);
    let kube = api();
    stand_in::serve(kube);
    let ns = kube.namespace("pxbench-dra");
    let tmp = setup.tmp;
    let node = NetNs::current().map_err(|e| e.to_string())?;
    let config = vf_network(tmp);
    kube.apply(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
         metadata: {{name: vfnet, namespace: {ns}, annotations: \
         {{k8s.v1.cni.cncf.io/resourceName: {RESOURCE}}}}}\nspec:\n  config: '{config}'\n"
    ));
    let pods: Vec<(String, String)> = (0..setup.pods)
        .map(|i| (format!("dra-{i}"), format!("dp-{i}")))
        .collect();
    let manifest: String = pods
        .iter()
        .flat_map(|(dra, dp)| [(dra, ""), (dp, "vfnet")])
        .map(|(name, networks)| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  \
                 annotations: {{k8s.v1.cni.cncf.io/networks: \"{networks}\"}}\n\
                 spec: {{nodeName: {NODE_NAME}, containers: [{{name: c, image: busybox}}]}}\n---\n"
            )
        })
        .collect();
    kube.apply(&manifest);
    // kubelet's PodResources: each device-plugin pod has the second VF.
    let dp_vf = vfs.vfs[1].address.clone();
    let kubelet = PodResourcesServer::start(
        pods.iter()
            .map(|(_, dp)| {
                pod(
                    &ns,
                    dp,
                    vec![container("c", &[(RESOURCE, &[dp_vf.as_str()])])],
                )
            })
            .collect(),
    );
    let dirs = tmp.join("kubelet");
    let pf = &vfs.pf.netdev;
    let mut daemon = Command::new(setup.plexus);
    daemon
        .arg("daemon")
        .arg("--socket")
        .arg(tmp.join("plexus.sock"))
        .arg("--kubeconfig")
        .arg(kube.plexus_kubeconfig())
        .args(["--node-name", NODE_NAME, "--metrics-address=none"])
        .arg("--state-dir")
        .arg(tmp.join("state"))
        .arg("--cni-dir")
        .arg(tmp.join("cache"))
        .args([
            "--ipam-reconcile-interval=0",
            "--dynamic-networks=false",
            "--dra",
        ])
        .arg(format!(
            "--dra-registry-dir={}",
            dirs.join("plugins_registry").display()
        ))
        .arg(format!(
            "--dra-plugins-dir={}",
            dirs.join("plugins").display()
        ))
        .arg(format!("--dra-cdi-dir={}", tmp.join("cdi").display()))
        .arg(format!("--dra-resource-name={pf}={RESOURCE}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let log = tmp.join("daemon.log");
    let err = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let child = daemon
        .stderr(err)
        .spawn()
        .map_err(|e| format!("plexus daemon: {e}"))?;
    // Killed when the case ends, however it ends.
    let daemons = Daemons(vec![NodeDaemon {
        child,
        log,
        port: 0,
    }]);
    let plugin = KubeletDra {
        registry: dirs.join("plugins_registry"),
    }
    .register(Duration::from_secs(120))?;
    let conf = json!({
        "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
        "kubeconfig": kube.plexus_kubeconfig(),
        "daemonSocket": tmp.join("plexus.sock"),
        "cniDir": tmp.join("shim-cache"), "confDir": tmp.join("net.d"),
        "podResourcesSocket": kubelet.socket(),
        "delegates": [{"cniVersion": "1.0.0", "name": "podnet", "type": "bridge",
                       "bridge": "br-dra", "isGateway": true,
                       "ipam": {"type": "host-local", "subnet": "10.76.0.0/16",
                                "dataDir": tmp.join("pod-ipam")}}],
    })
    .to_string();
    let dra_vf = format!("vf-{}", vfs.vfs[0].address.replace([':', '.'], "-"));
    let claim_config = json!([{"source": "FromClaim", "requests": ["net"], "opaque": {"driver": DRIVER, "parameters": {
        "apiVersion": "dra.plexus.dev/v1alpha1", "kind": "NetworkConfig",
        "interfaceName": "net1", "config": config}}}]);
    let (mut dra_add, mut dra_del, mut dp_add, mut dp_del) = (vec![], vec![], vec![], vec![]);
    let uid = |name: &str| {
        kube.kubectl(&[
            "get",
            "pod",
            name,
            "-n",
            &ns,
            "-o",
            "jsonpath={.metadata.uid}",
        ])
    };
    for (dra, dp) in &pods {
        // DRA: allocated, prepared, then the sandbox's ADD and DEL.
        let claim_name = format!("{dra}-vf");
        kube.apply(&stand_in::claim(&ns, &claim_name, "plexus-vf", 1));
        let mut status = stand_in::allocated(&[(DRIVER, NODE_NAME, &dra_vf)], (dra, &uid(dra)));
        status["allocation"]["devices"]["config"] = claim_config.clone();
        stand_in::write_status(kube, &ns, &claim_name, &status);
        let claim_uid = kube.kubectl(&[
            "get",
            "resourceclaims.resource.k8s.io",
            &claim_name,
            "-n",
            &ns,
            "-o",
            "jsonpath={.metadata.uid}",
        ]);
        let answers = plugin.prepare(&[claim(&ns, &claim_name, &claim_uid)])?;
        let error = &answers[&claim_uid].error;
        if !error.is_empty() {
            return Err(format!("Prepare {claim_name}: {error}"));
        }
        let (add, del) = add_del(setup, &node, &ns, dra, &conf)?;
        dra_add.push(add);
        dra_del.push(del);
        plugin.unprepare(&[claim(&ns, &claim_name, &claim_uid)])?;
        // The device plugin's: the NAD's resourceName, kubelet's VF.
        let (add, del) = add_del(setup, &node, &ns, dp, &conf)?;
        dp_add.push(add);
        dp_del.push(del);
    }
    drop(daemons);
    println!(
        "\nDRA: a VF claimed through plexus's driver against the device-plugin path \
         ({} pods each, thick, on igb VFs in the VM; the cluster network too)",
        setup.pods
    );
    print_table(
        28,
        &[
            ("claimed (plexus's DRA)", &dra_add, &dra_del),
            ("device plugin (NAD)", &dp_add, &dp_del),
        ],
    );
    let ratio = percentile(&dra_add, 0.5).as_secs_f64() / percentile(&dp_add, 0.5).as_secs_f64();
    let met = ratio <= RATIO_MAX;
    println!(
        "ADD median, claimed / device plugin: {ratio:.2} (target <= {RATIO_MAX:.2}: {})",
        verdict(met)
    );
    Ok(met)
}

/// The ADD and DEL of pod `name` through the shim, timed; its namespace
/// made for it and its interfaces checked gone after the DEL.
fn add_del(
    setup: &mut Setup,
    node: &NetNs,
    namespace: &str,
    name: &str,
    conf: &str,
) -> Result<(Duration, Duration), String> {
    let netns = setup
        .namespaces
        .create(format!("pxb-dra-{}-{name}", std::process::id()))?;
    let id = format!("c-{name}");
    let args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name}");
    let cni_path = Path::new("/usr/lib/cni");
    let env = cni_env_as("ADD", &id, &netns, "eth0", &args, cni_path);
    let add = invoke(node, setup.plexus, &[], &env, conf.as_bytes())
        .map_err(|e| format!("ADD {name}: {e}"))?;
    let env = cni_env_as("DEL", &id, &netns, "eth0", &args, cni_path);
    let del = invoke(node, setup.plexus, &[], &env, conf.as_bytes())
        .map_err(|e| format!("DEL {name}: {e}"))?;
    Ok((add.elapsed, del.elapsed))
}
