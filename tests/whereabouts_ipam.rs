//! Issue 33: `"ipam": {"type": "whereabouts"}` served in-process by plexus,
//! beside the real whereabouts (built here at a pinned commit by
//! `.ci/whereabouts`), on the real kube-apiserver, with whereabouts' CRDs.
//!
//! plexus's plugin runs through its CNI entry point (`skel::run`, the
//! protocol a runtime speaks); whereabouts is exec'd as the CNI plugin it
//! is. Each test keeps to pools of its own `network_name`, as the API
//! server is shared.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use plexus::whereabouts::Whereabouts;
use plexus_testkit::kube::{api, KubeApi};
use plexus_testkit::process::{output_within, stdout_ok};
use plexus_testkit::{peers, require, Feature};
use serde_json::{json, Value};

/// One CNI call: what it is and for whom.
struct Call<'a> {
    command: &'a str,
    container: &'a str,
    ifname: &'a str,
    /// `namespace/pod`.
    pod: &'a str,
    /// The node a plugin process runs on (`NODENAME`, whereabouts' way to
    /// say it), for node slices.
    node: Option<&'a str>,
    /// More of `CNI_ARGS` (`;KEY=VALUE...`).
    more_args: &'a str,
}

impl<'a> Call<'a> {
    /// `command` for `container` of `pod` (`namespace/pod`) on `net1`.
    fn new(command: &'a str, container: &'a str, pod: &'a str) -> Call<'a> {
        Call {
            command,
            container,
            ifname: "net1",
            pod,
            node: None,
            more_args: "",
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let (ns, name) = self.pod.split_once('/').unwrap();
        let args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={ns};K8S_POD_NAME={name}{}",
            self.more_args
        );
        // An IPAM plugin never opens the namespace.
        let netns = "/var/run/netns/unused-by-ipam";
        [
            ("CNI_COMMAND", self.command),
            ("CNI_CONTAINERID", self.container),
            ("CNI_IFNAME", self.ifname),
            ("CNI_NETNS", netns),
            ("CNI_PATH", "/nonexistent"),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.to_string()))
        .chain([("CNI_ARGS", args)])
        .chain(self.node.map(|n| ("NODENAME", n.to_string())))
        .collect()
    }
}

/// plexus's plugin, in-process: the result, or the error object.
fn plexus(call: &Call, conf: &Value) -> Result<Value, Value> {
    plexus_as(&Whereabouts::default(), call, conf)
}

fn plexus_as(plugin: &Whereabouts, call: &Call, conf: &Value) -> Result<Value, Value> {
    let env = call.env();
    let lookup = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = plexus::cni::skel::run(
        plugin,
        lookup,
        &mut conf.to_string().as_bytes(),
        &mut out,
        &mut err,
    );
    answer(code == 0, &out)
}

/// The real whereabouts binary.
fn whereabouts(call: &Call, conf: &Value) -> Result<Value, Value> {
    exec(&peers::whereabouts().unwrap().binary, call, conf)
}

/// A directory for the whole test binary's run (kept: the files in it are
/// shared by its tests).
fn kept_dir(prefix: &str) -> std::path::PathBuf {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    dir.keep()
}

/// The plexus binary installed as `whereabouts` (a link by that name), as
/// a runtime or Multus execs an IPAM plugin.
fn plexus_exec(call: &Call, conf: &Value) -> Result<Value, Value> {
    exec(&plexus_link(), call, conf)
}

/// The plexus binary linked as `whereabouts`, once per binary.
fn plexus_link() -> std::path::PathBuf {
    static LINK: OnceLock<std::path::PathBuf> = OnceLock::new();
    LINK.get_or_init(|| {
        let link = kept_dir("plexus-as-wb").join("whereabouts");
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_plexus"), &link).unwrap();
        link
    })
    .clone()
}

/// A CNI plugin binary run with `call`'s environment and `conf` on stdin.
fn exec(binary: &std::path::Path, call: &Call, conf: &Value) -> Result<Value, Value> {
    let mut cmd = Command::new(binary);
    cmd.env_clear().envs(call.env());
    let (out, _) = output_within(&mut cmd, &conf.to_string(), Duration::from_secs(120));
    answer(out.status.success(), &out.stdout)
}

fn answer(ok: bool, out: &[u8]) -> Result<Value, Value> {
    let v: Value = if out.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(out)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(out)))
    };
    if ok {
        Ok(v)
    } else {
        Err(v)
    }
}

fn address(result: &Value) -> String {
    result["ips"][0]["address"].as_str().unwrap().to_string()
}

/// The API server with whereabouts' CRDs, once per binary.
fn cluster() -> Option<&'static KubeApi> {
    if !require(&[Feature::KubeApiServer, Feature::Whereabouts]) {
        return None;
    }
    static CRDS: OnceLock<()> = OnceLock::new();
    let api = api();
    CRDS.get_or_init(|| with_whereabouts_crds(api));
    Some(api)
}

/// whereabouts' own CRDs, established on `api`.
fn with_whereabouts_crds(api: &KubeApi) {
    peers::whereabouts().unwrap().install_crds(api);
}

/// A NAD's configuration with whereabouts IPAM on `range` for the network
/// `network_name`.
fn conf(api: &KubeApi, network_name: &str, range: &str) -> Value {
    json!({"cniVersion": "1.0.0", "name": network_name, "type": "macvlan",
           "ipam": {"type": "whereabouts", "range": range, "network_name": network_name,
                    "kubernetes": {"kubeconfig": api.admin_kubeconfig()},
                    // whereabouts fails every call without its flat file.
                    "configuration_path": flat_file(api)}})
}

/// whereabouts' flat file naming `api`'s admin kubeconfig, one per API
/// server.
fn flat_file(api: &KubeApi) -> String {
    static PATHS: std::sync::Mutex<Vec<(std::path::PathBuf, String)>> =
        std::sync::Mutex::new(Vec::new());
    let mut paths = PATHS.lock().unwrap();
    if let Some((_, path)) = paths.iter().find(|(dir, _)| *dir == api.dir) {
        return path.clone();
    }
    let path = kept_dir("plexus-wb-flat").join("whereabouts.conf");
    let flat = json!({"datastore": "kubernetes",
                      "kubernetes": {"kubeconfig": api.admin_kubeconfig()}});
    std::fs::write(&path, flat.to_string()).unwrap();
    let path = path.display().to_string();
    paths.push((api.dir.clone(), path.clone()));
    path
}

/// The allocations of the pool `name` (in kube-system: the admin
/// kubeconfig's context names no namespace), as `offset -> (id, podref)`.
fn allocations(api: &KubeApi, name: &str) -> Vec<(String, String, String)> {
    let kind = "ippools.whereabouts.cni.cncf.io";
    let get = ["get", kind, "-n", "kube-system", name, "-o", "json"];
    let out = api.kubectl(&[&get[..], &["--ignore-not-found"]].concat());
    if out.trim().is_empty() {
        return Vec::new();
    }
    let pool: Value = serde_json::from_str(&out).unwrap();
    let mut found: Vec<_> = pool["spec"]["allocations"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, a)| {
                    let id = a["id"].as_str().unwrap_or_default().to_string();
                    (
                        k.clone(),
                        id,
                        a["podref"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

const RESERVATIONS: &str = "overlappingrangeipreservations.whereabouts.cni.cncf.io";

/// The reservations of `network_name`'s addresses.
fn reservations(api: &KubeApi, network_name: &str) -> Vec<String> {
    let out = api.kubectl(&["get", RESERVATIONS, "-n", "kube-system", "-o", "name"]);
    out.lines()
        .filter(|l| l.contains(&format!("/{network_name}-")))
        .map(str::to_string)
        .collect()
}

/// Issue 33 item 2: whereabouts beside plexus never takes an address plexus
/// holds and plexus never takes one whereabouts holds; each releases the
/// other's allocation, including one whereabouts made for a sandbox plexus
/// never ADDed.
#[test]
fn interop_with_whereabouts_both_ways() {
    let Some(api) = cluster() else { return };
    let (net, conf) = ("wbi", conf(api, "wbi", "10.91.0.0/24"));
    let pool = "wbi-10.91.0.0-24";
    let call = Call::new;
    let a = whereabouts(&call("ADD", "ca", "ns1/a"), &conf).expect("whereabouts ADD a");
    let b = plexus(&call("ADD", "cb", "ns1/b"), &conf).expect("plexus ADD b");
    let c = whereabouts(&call("ADD", "cc", "ns1/c"), &conf).expect("whereabouts ADD c");
    // plexus installed as the `whereabouts` binary, exec'd.
    let d = plexus_exec(&call("ADD", "cd", "ns1/d"), &conf).expect("plexus ADD d (exec'd)");
    let given: BTreeSet<String> = [&a, &b, &c, &d].iter().map(|r| address(r)).collect();
    assert_eq!(given.len(), 4, "each address once: {given:?}");
    let held = allocations(api, pool);
    assert_eq!(held.len(), 4, "{held:?}");
    for (result, id) in [(&a, "ca"), (&b, "cb"), (&c, "cc"), (&d, "cd")] {
        let ip = address(result);
        let offset = ip.split('/').next().unwrap().rsplit('.').next().unwrap();
        assert!(
            held.iter().any(|(k, i, _)| k == offset && i == id),
            "{ip} of {id} not in {held:?}"
        );
    }
    assert_eq!(reservations(api, net).len(), 4, "one reservation each");
    // The same pod's interface gets its address again (AssignIP's rule).
    let again = plexus(&call("ADD", "cb2", "ns1/b"), &conf).unwrap();
    assert_eq!(address(&again), address(&b));
    assert!(allocations(api, pool).iter().any(|(_, id, _)| id == "cb2"));
    // plexus releases whereabouts' allocation (a sandbox it never saw), and
    // whereabouts plexus's.
    plexus(&call("DEL", "ca", "ns1/a"), &conf).expect("plexus DEL a");
    whereabouts(&call("DEL", "cb2", "ns1/b"), &conf).expect("whereabouts DEL b");
    let mut ids: Vec<String> = allocations(api, pool)
        .into_iter()
        .map(|(_, id, _)| id)
        .collect();
    ids.sort();
    assert_eq!(ids, ["cc", "cd"]);
    // DEL is idempotent.
    plexus(&call("DEL", "ca", "ns1/a"), &conf).expect("a second DEL");
    plexus(&call("DEL", "cc", "ns1/c"), &conf).unwrap();
    plexus_exec(&call("DEL", "cd", "ns1/d"), &conf).unwrap();
    assert_eq!(allocations(api, pool), vec![]);
    assert_eq!(reservations(api, net), Vec::<String>::new());
}

/// Issue 33 item 3: many writers at once (plexus processes' worth of
/// clients, and whereabouts binaries) fill a pool of 14 addresses exactly,
/// never sharing one; the 15th is refused; every DEL leaves it empty.
#[test]
fn racing_writers_never_share_an_address() {
    let Some(api) = cluster() else { return };
    let (net, conf) = ("wbr", conf(api, "wbr", "10.92.0.0/28"));
    let pool = "wbr-10.92.0.0-28";
    let plexus_writers = 10;
    let whereabouts_writers = 4;
    let results: Vec<(String, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..plexus_writers + whereabouts_writers)
            .map(|i| {
                let conf = &conf;
                s.spawn(move || {
                    let container = format!("r{i}");
                    let pod = format!("ns2/p{i}");
                    let call = Call::new("ADD", &container, &pod);
                    let result = if i < plexus_writers {
                        plexus(&call, conf)
                    } else {
                        whereabouts(&call, conf)
                    };
                    let result = result.unwrap_or_else(|e| panic!("ADD {container}: {e}"));
                    (container, address(&result))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let distinct: BTreeSet<&String> = results.iter().map(|(_, ip)| ip).collect();
    assert_eq!(
        distinct.len(),
        results.len(),
        "an address given twice: {results:?}"
    );
    assert_eq!(allocations(api, pool).len(), 14);
    let full = Call::new("ADD", "r-late", "ns2/late");
    let e = plexus(&full, &conf).unwrap_err();
    assert_eq!(e["code"], 111, "{e}");
    std::thread::scope(|s| {
        for (container, _) in &results {
            let conf = &conf;
            s.spawn(move || {
                let i: usize = container[1..].parse().unwrap();
                let pod = format!("ns2/p{i}");
                let call = Call::new("DEL", container, &pod);
                plexus(&call, conf).unwrap_or_else(|e| panic!("DEL {container}: {e}"));
            });
        }
    });
    assert_eq!(allocations(api, pool), vec![]);
    assert_eq!(reservations(api, net), Vec::<String>::new());
}

/// `e` is an invalid-configuration error (code 7) naming `key` first.
#[track_caller]
fn assert_config_error(e: &Value, key: &str) {
    assert_eq!(e["code"], 7, "{e}");
    let details = e["details"].as_str().unwrap_or_default();
    assert!(details.starts_with(&format!("{key}:")), "{e}");
}

/// A configuration plexus cannot honour is refused naming the key, before
/// any request.
#[test]
fn refusals_name_the_key() {
    let Some(api) = cluster() else { return };
    let call = Call::new("ADD", "x1", "ns3/x");
    let mut bad = conf(api, "wbx", "10.93.0.0/24");
    bad["ipam"]["datastore"] = json!("etcd");
    let e = plexus(&call, &bad).unwrap_err();
    assert_config_error(&e, "ipam.datastore");
    let mut bad = conf(api, "wbx", "10.93.0.0/24");
    bad["ipam"]["range_start"] = json!("10.94.0.1");
    let e = plexus(&call, &bad).unwrap_err();
    assert!(
        e["details"]
            .as_str()
            .unwrap()
            .starts_with("ipam.range_start:"),
        "{e}"
    );
}

/// `CNI_ARGS` `IP` and `GATEWAY` (whereabouts' `handleEnvArgs`): static
/// addresses handed out beside the range's, as the real whereabouts does.
#[test]
fn cni_args_ip_and_gateway_as_whereabouts() {
    let Some(api) = cluster() else { return };
    let conf = conf(api, "wbe", "10.95.0.0/24");
    let call = |command, container, pod| Call {
        more_args: ";IP=10.99.1.5/24,fd99::5/64;GATEWAY=10.99.1.1",
        ..Call::new(command, container, pod)
    };
    let theirs = whereabouts(&call("ADD", "e1", "ns9/e1"), &conf).expect("whereabouts ADD");
    let ours = plexus(&call("ADD", "e2", "ns9/e2"), &conf).expect("plexus ADD");
    let statics = |r: &Value| -> Vec<Value> {
        r["ips"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|ip| !ip["address"].as_str().unwrap().starts_with("10.95."))
            .cloned()
            .collect()
    };
    assert_eq!(statics(&ours), statics(&theirs), "{ours} {theirs}");
    assert_eq!(statics(&ours).len(), 2, "{ours}");
    assert_eq!(statics(&ours)[0]["gateway"], "10.99.1.1");
    assert_eq!(ours["ips"].as_array().unwrap().len(), 3, "{ours}");
    let bad = Call {
        more_args: ";IP=10.99.1.5",
        ..Call::new("ADD", "e3", "ns9/e3")
    };
    let e = plexus(&bad, &conf).unwrap_err();
    assert!(e["details"].as_str().unwrap().contains("IP:"), "{e}");
    plexus(&call("DEL", "e1", "ns9/e1"), &conf).unwrap();
    whereabouts(&call("DEL", "e2", "ns9/e2"), &conf).unwrap();
    assert_eq!(allocations(api, "wbe-10.95.0.0-24"), vec![]);
}

/// The compare-and-swap itself: a write decided on a copy the pool has moved
/// past is refused (409), and nothing of it lands; a write notes the pod's
/// UID beside its entry, and removes the note with it.
#[test]
fn a_write_on_a_stale_copy_loses() {
    use plexus::whereabouts::pools::{Change, Note, Pools, Written};
    use plexus_ipam::whereabouts::pool::Allocation;
    let Some(api) = cluster() else { return };
    let pools = Pools::connect(&api.admin_kubeconfig(), Default::default()).unwrap();
    assert_eq!(pools.namespace(), "kube-system");
    let name = "wbs-10.95.0.0-24";
    let copy = pools.pool(name, "10.95.0.0/24", true).unwrap();
    let entry = |id: &str| {
        let allocation = Allocation {
            container_id: id.parse().unwrap(),
            podref: format!("ns4/{id}"),
            ifname: Some("net1".parse().unwrap()),
        };
        Change::Set(
            allocation,
            Note {
                pod_uid: Some(format!("uid-{id}")),
                claim: None,
            },
        )
    };
    let first = [("1".to_string(), entry("c1"))].into();
    assert_eq!(pools.write(&copy, &first).unwrap(), Written::Done);
    let second = [("2".to_string(), entry("c2"))].into();
    assert_eq!(pools.write(&copy, &second).unwrap(), Written::Lost);
    let now = pools.existing(name, true).unwrap().unwrap();
    assert_eq!(now.spec.allocations.keys().collect::<Vec<_>>(), ["1"]);
    // The pod's UID is noted beside the entry, in the same write.
    let annotation = api.kubectl(&[
        "get",
        "ippools.whereabouts.cni.cncf.io",
        "-n",
        "kube-system",
        name,
        "-o",
        "jsonpath={.metadata.annotations.pod-uid\\.plexus\\.io/1}",
    ]);
    assert_eq!(annotation, "uid-c1/c1");
    assert_eq!(now.notes.get("1").map(String::as_str), Some("uid-c1/c1"));
    // A DEL's removal names its entry's holder, not the resourceVersion:
    // another writer's entry since costs it no retry, and stays.
    let second = [("2".to_string(), entry("c2"))].into();
    assert_eq!(pools.write(&now, &second).unwrap(), Written::Done);
    let gone = [("1".to_string(), Change::Remove)].into();
    assert_eq!(pools.write(&now, &gone).unwrap(), Written::Done);
    let emptied = pools.existing(name, true).unwrap().unwrap();
    assert_eq!(emptied.spec.allocations.keys().collect::<Vec<_>>(), ["2"]);
    assert_eq!(
        emptied.notes.keys().collect::<Vec<_>>(),
        ["2"],
        "the note goes with its entry"
    );
    // An entry given back and taken by another container since is not
    // removed on the old copy's word (the JSON Patch `test` fails: 422).
    let gone = [("2".to_string(), Change::Remove)].into();
    assert_eq!(pools.write(&emptied, &gone).unwrap(), Written::Done);
    let retaken = pools.existing(name, true).unwrap().unwrap();
    let third = [("2".to_string(), entry("c3"))].into();
    assert_eq!(pools.write(&retaken, &third).unwrap(), Written::Done);
    assert_eq!(pools.write(&emptied, &gone).unwrap(), Written::Lost);
    let kept = pools.existing(name, true).unwrap().unwrap();
    assert_eq!(kept.spec.allocations["2"].container_id, "c3");
    assert_eq!(kept.notes.get("2").map(String::as_str), Some("uid-c3/c3"));
}

/// A NAD that names no kubeconfig of its own uses plexus's (plexus's conf),
/// whose identity `deploy/rbac.yaml` grants exactly what this needs.
#[test]
fn plexus_identity_from_deploy_rbac_suffices() {
    let Some(api) = cluster() else { return };
    let plugin = Whereabouts {
        plexus_kubeconfig: Some(api.plexus_kubeconfig()),
        ..Default::default()
    };
    let conf = json!({"cniVersion": "1.0.0", "name": "wbp", "type": "macvlan",
                      "ipam": {"type": "whereabouts", "range": "10.96.0.0/24",
                               "network_name": "wbp",
                               "configuration_path": "/nonexistent/whereabouts.conf"}});
    let call = |command| Call::new(command, "p1", "ns5/p1");
    let added = plexus_as(&plugin, &call("ADD"), &conf).unwrap();
    assert!(address(&added).starts_with("10.96.0."), "{added}");
    assert_eq!(allocations(api, "wbp-10.96.0.0-24").len(), 1);
    let mut check = conf.clone();
    check["prevResult"] = added;
    plexus_as(&plugin, &call("CHECK"), &check).unwrap();
    plexus_as(&plugin, &call("DEL"), &conf).unwrap();
    assert_eq!(allocations(api, "wbp-10.96.0.0-24"), vec![]);
    assert_eq!(reservations(api, "wbp"), Vec::<String>::new());
    let e = plexus_as(&plugin, &call("CHECK"), &check).unwrap_err();
    assert_eq!(e["code"], 3, "CHECK after DEL: no address allocated: {e}");
}

/// Issue 33 item 8: `plexus pools` shows a pool's allocations and who holds
/// them.
#[test]
fn plexus_pools_shows_who_holds_each_address() {
    let Some(api) = cluster() else { return };
    let conf = conf(api, "wbc", "10.98.0.0/28");
    let call = |command| Call {
        ifname: "net2",
        ..Call::new(command, "c9", "ns6/holder")
    };
    let added = plexus(&call("ADD"), &conf).unwrap();
    let plexus_pools = Command::new(env!("CARGO_BIN_EXE_plexus"))
        .args(["pools", "--network", "wbc", "--kubeconfig"])
        .arg(api.admin_kubeconfig())
        .output();
    let shown: Value =
        serde_json::from_str(&stdout_ok(plexus_pools.unwrap(), "plexus pools")).unwrap();
    assert_eq!(shown.as_array().unwrap().len(), 1, "{shown}");
    let pool = &shown[0];
    assert_eq!(pool["name"], "wbc-10.98.0.0-28");
    assert_eq!(pool["namespace"], "kube-system");
    assert_eq!(pool["range"], "10.98.0.0/28");
    assert_eq!(pool["usable"], "14");
    assert_eq!(pool["held"], 1);
    let holder = &pool["allocations"][0];
    assert_eq!(
        holder["address"].as_str().unwrap(),
        address(&added).split('/').next().unwrap()
    );
    assert_eq!(holder["pod"], "ns6/holder");
    assert_eq!(holder["interface"], "net2");
    assert_eq!(holder["containerID"], "c9");
    plexus(&call("DEL"), &conf).unwrap();
}

/// The NodeSlicePool `name`'s slices (in kube-system), as `(node, slice)`.
fn node_slices(api: &KubeApi, name: &str) -> Vec<(String, String)> {
    peers::node_slices(api, "kube-system", name)
}

/// Issue 33 item 5: with `node_slice_size`, each node allocates from its
/// own slice's pool (`<network_name>-<node>-<slice>`, whereabouts' fast
/// IPAM by node). plexus's ADD on a node without a slice claims the first
/// free one (creating the NodeSlicePool, in whereabouts' form); the real
/// whereabouts on that node then finds the slice and allocates beside
/// plexus from the same pool, and each gives back the other's address.
#[test]
fn node_slices_shared_with_whereabouts() {
    let Some(api) = cluster() else { return };
    let mut conf = conf(api, "wbs", "10.92.0.0/24");
    conf["ipam"]["node_slice_size"] = json!("/28");
    let on = |node: &'static str| Whereabouts {
        node: Some(node.into()),
        ..Default::default()
    };
    let call = |command, container, pod, node| Call {
        node: Some(node),
        ..Call::new(command, container, pod)
    };
    let a1 = plexus_as(&on("node-a"), &call("ADD", "a1", "ns7/a1", "node-a"), &conf)
        .expect("plexus ADD on node-a");
    let b1 = plexus_as(&on("node-b"), &call("ADD", "b1", "ns7/b1", "node-b"), &conf)
        .expect("plexus ADD on node-b");
    let slices = node_slices(api, "wbs");
    assert_eq!(slices.len(), 16, "a /24 cut into /28s: {slices:?}");
    assert_eq!(slices[0], ("node-a".into(), "10.92.0.0/28".into()));
    assert_eq!(slices[1], ("node-b".into(), "10.92.0.16/28".into()));
    assert!(slices[2..].iter().all(|(node, _)| node.is_empty()));
    // Each address is of its node's slice, with the whole range's prefix
    // (whereabouts' AssignIP answers with the range's mask).
    let ip = |r: &Value| address(r).split('/').next().unwrap().to_string();
    let last = |r: &Value| ip(r).rsplit('.').next().unwrap().parse::<u32>().unwrap();
    assert!(address(&a1).ends_with("/24"), "{a1}");
    assert!((1..=14).contains(&last(&a1)), "{a1}");
    assert!((17..=30).contains(&last(&b1)), "{b1}");
    let pool_a = "wbs-node-a-10.92.0.0-28";
    let pool_b = "wbs-node-b-10.92.0.16-28";
    // Offsets from the slice's network address, as whereabouts keys them.
    let held_a = allocations(api, pool_a);
    assert_eq!(held_a.len(), 1, "{held_a:?}");
    assert_eq!(held_a[0].0, last(&a1).to_string());
    assert_eq!(allocations(api, pool_b)[0].0, (last(&b1) - 16).to_string());
    // The real whereabouts on node-a: the slice plexus claimed, the pool
    // plexus wrote, never plexus's address.
    let w1 = whereabouts(&call("ADD", "w1", "ns7/w1", "node-a"), &conf).expect("whereabouts ADD");
    assert!((1..=14).contains(&last(&w1)), "{w1}");
    assert_ne!(ip(&w1), ip(&a1));
    // plexus installed as the whereabouts binary finds its node by
    // NODENAME, as whereabouts does.
    let b2 = plexus_exec(&call("ADD", "b2", "ns7/b2", "node-b"), &conf).expect("exec'd on node-b");
    assert!((17..=30).contains(&last(&b2)), "{b2}");
    assert_ne!(ip(&b2), ip(&b1));
    // A configuration that slices the network otherwise is refused,
    // naming the key; so is a node with no slice on DEL: nothing to give.
    let mut other = conf.clone();
    other["ipam"]["node_slice_size"] = json!("/27");
    let e = plexus_as(&on("node-a"), &call("ADD", "x", "ns7/x", "node-a"), &other).unwrap_err();
    assert_config_error(&e, "ipam.node_slice_size");
    plexus_as(&on("node-z"), &call("DEL", "z", "ns7/z", "node-z"), &conf).expect("DEL, no slice");
    // Each releases the other's.
    whereabouts(&call("DEL", "a1", "ns7/a1", "node-a"), &conf).expect("whereabouts DEL a1");
    plexus_as(&on("node-a"), &call("DEL", "w1", "ns7/w1", "node-a"), &conf).expect("DEL w1");
    plexus_as(&on("node-b"), &call("DEL", "b1", "ns7/b1", "node-b"), &conf).unwrap();
    plexus_exec(&call("DEL", "b2", "ns7/b2", "node-b"), &conf).unwrap();
    assert_eq!(allocations(api, pool_a), vec![]);
    assert_eq!(allocations(api, pool_b), vec![]);
    assert_eq!(reservations(api, "wbs"), Vec::<String>::new());
}

/// Issue 33 item 7: IPv6 across the whole range. In a /32, plexus hands
/// out and gives back addresses past the first 2^64 offsets, keyed by
/// their full decimal offset; in a range whereabouts can read (offsets
/// below 2^63), the two share an IPv6 pool both ways.
#[test]
fn ipv6_offsets_past_2_pow_64_and_shared_below() {
    let Some(api) = cluster() else { return };
    let mut wide = conf(api, "wb6", "fd93::/32");
    wide["ipam"]["range_start"] = json!("fd93:0:1::1");
    wide["ipam"]["range_end"] = json!("fd93:0:1::ff");
    let call = Call::new;
    let a = plexus(&call("ADD", "c6a", "ns8/a"), &wide).expect("plexus ADD a");
    let b = plexus(&call("ADD", "c6b", "ns8/b"), &wide).expect("plexus ADD b");
    let ip = |r: &Value| -> std::net::Ipv6Addr {
        address(r).split('/').next().unwrap().parse().unwrap()
    };
    let base = u128::from("fd93::".parse::<std::net::Ipv6Addr>().unwrap());
    let mut offsets: Vec<String> = [&a, &b]
        .iter()
        .map(|r| {
            let offset = u128::from(ip(r)) - base;
            assert!(offset > 1 << 64, "{} at offset {offset}", ip(r));
            offset.to_string()
        })
        .collect();
    offsets.sort();
    assert!(address(&a).ends_with("/32"), "{a}");
    let pool = "wb6-fd93---32";
    let held: Vec<String> = allocations(api, pool)
        .into_iter()
        .map(|(k, _, _)| k)
        .collect();
    assert_eq!(held, offsets, "keys are the full decimal offsets");
    plexus(&call("DEL", "c6a", "ns8/a"), &wide).unwrap();
    plexus(&call("DEL", "c6b", "ns8/b"), &wide).unwrap();
    assert_eq!(allocations(api, pool), vec![]);
    // Within whereabouts' reach: one IPv6 pool, both ways.
    let narrow = conf(api, "wb7", "fd94::/120");
    let w = whereabouts(&call("ADD", "c7w", "ns8/w"), &narrow).expect("whereabouts ADD");
    let p = plexus(&call("ADD", "c7p", "ns8/p"), &narrow).expect("plexus ADD");
    let q = whereabouts(&call("ADD", "c7q", "ns8/q"), &narrow).expect("whereabouts ADD q");
    let given: BTreeSet<String> = [&w, &p, &q].iter().map(|r| address(r)).collect();
    assert_eq!(given.len(), 3, "{given:?}");
    assert_eq!(allocations(api, "wb7-fd94---120").len(), 3);
    plexus(&call("DEL", "c7w", "ns8/w"), &narrow).unwrap();
    whereabouts(&call("DEL", "c7p", "ns8/p"), &narrow).unwrap();
    plexus(&call("DEL", "c7q", "ns8/q"), &narrow).unwrap();
    assert_eq!(allocations(api, "wb7-fd94---120"), vec![]);
    assert_eq!(reservations(api, "wb6"), Vec::<String>::new());
    assert_eq!(reservations(api, "wb7"), Vec::<String>::new());
}

/// The runtime's DEL after a failed ADD (CNI SPEC "ADD ... the runtime
/// must call DEL"), retried as kubelet retries it, for 60 s at most.
fn del_until_done(call: &Call, conf: &Value) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match plexus(call, conf) {
            Ok(_) => return,
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("DEL {} again: {e}", call.container);
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(e) => panic!("DEL {}: {e}", call.container),
        }
    }
}

/// Every pool entry and reservation of `network_name` is one of `held`
/// (`(container, address)`), and each of `held` is there.
fn exactly_held(api: &KubeApi, pool: &str, network_name: &str, held: &[(String, String)]) {
    let mut entries: Vec<String> = allocations(api, pool)
        .into_iter()
        .map(|(_, id, _)| id)
        .collect();
    entries.sort();
    let mut want: Vec<String> = held.iter().map(|(c, _)| c.clone()).collect();
    want.sort();
    assert_eq!(
        entries, want,
        "the pool's entries against the ADDs that succeeded"
    );
    let mut reserved: Vec<String> = reservations(api, network_name);
    reserved.sort();
    let mut want: Vec<String> = held
        .iter()
        .map(|(_, ip)| {
            let ip = ip.split('/').next().unwrap();
            format!("overlappingrangeipreservation.whereabouts.cni.cncf.io/{network_name}-{ip}")
        })
        .collect();
    want.sort();
    assert_eq!(
        reserved, want,
        "the reservations against the ADDs that succeeded"
    );
}

fn all_distinct(held: &[(String, String)]) {
    let distinct: BTreeSet<&String> = held.iter().map(|(_, ip)| ip).collect();
    assert_eq!(
        distinct.len(),
        held.len(),
        "an address given twice: {held:?}"
    );
}

/// Issue 33 item 3 and 10: plexus processes SIGKILLed at every point of
/// an ADD (before, during and after the pool's PATCH and the reservation,
/// and between a PATCH and its answer) never make an address held twice,
/// and the runtime's DEL of each killed sandbox leaves nothing behind.
#[test]
fn sigkill_mid_add_leaks_nothing() {
    use std::io::Write;
    use std::process::Stdio;
    let Some(api) = cluster() else { return };
    let (net, conf) = ("wbk", conf(api, "wbk", "10.99.0.0/26"));
    let pool = "wbk-10.99.0.0-26";
    let link = plexus_link();
    let spawn = |call: &Call| {
        let mut child = Command::new(&link)
            .env_clear()
            .envs(call.env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(conf.to_string().as_bytes()).unwrap();
        child
    };
    // How long a whole ADD takes here, to spread the kills over it.
    let started = std::time::Instant::now();
    let probe = spawn(&Call::new("ADD", "k-probe", "ns7/probe"));
    let out = probe.wait_with_output().unwrap();
    let whole = started.elapsed();
    let probe_result = answer(out.status.success(), &out.stdout).expect("ADD of the probe");
    let mut held = vec![("k-probe".to_string(), address(&probe_result))];
    let mut killed = Vec::new();
    // Waves of 4 at once, each killed at its own point from 0 to 2 whole
    // ADDs, so that some die before, some inside and some after the PATCH.
    let (waves, wave) = (6u32, 4u32);
    let mut outcomes: Vec<(String, Option<String>)> = Vec::new();
    for w in 0..waves {
        outcomes.extend(std::thread::scope(|s| {
            let handles: Vec<_> = (0..wave)
                .map(|j| {
                    let spawn = &spawn;
                    let i = w * wave + j;
                    s.spawn(move || {
                        let container = format!("k{i}");
                        let mut child = spawn(&Call::new("ADD", &container, &format!("ns7/k{i}")));
                        std::thread::sleep(whole * 2 * (i % 8) / 7);
                        let _ = child.kill();
                        let out = child.wait_with_output().unwrap();
                        let got = answer(out.status.success(), &out.stdout).ok();
                        (container, got.map(|r| address(&r)))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        }));
    }
    for (container, got) in outcomes {
        match got {
            Some(ip) => held.push((container, ip)),
            None => killed.push(container),
        }
    }
    eprintln!(
        "an ADD takes {whole:?}; {} answered, {} killed",
        held.len(),
        killed.len()
    );
    assert!(
        !killed.is_empty(),
        "no ADD was cut short: the test proved nothing"
    );
    all_distinct(&held);
    let entries = allocations(api, pool);
    let written_then_killed = killed
        .iter()
        .filter(|c| entries.iter().any(|(_, id, _)| id == *c))
        .count();
    eprintln!("{written_then_killed} killed after their PATCH landed");
    for container in &killed {
        let i = &container[1..];
        del_until_done(&Call::new("DEL", container, &format!("ns7/k{i}")), &conf);
    }
    exactly_held(api, pool, net, &held);
    for (container, _) in &held {
        let pod = if container == "k-probe" {
            "ns7/probe".to_string()
        } else {
            format!("ns7/k{}", &container[1..])
        };
        plexus(&Call::new("DEL", container, &pod), &conf).unwrap();
    }
    exactly_held(api, pool, net, &[]);
}

/// Issue 33 item 3 and 10: the API server killed and started again in
/// the middle of a storm of ADDs (the answers of requests in flight lost,
/// a PATCH applied whose answer never came among them). Each pod's ADD is
/// retried as kubelet does, with a new sandbox after the DEL of the
/// failed one; in the end every pod holds one address, no two the same,
/// and the pool holds exactly those.
#[test]
fn api_server_restart_mid_storm() {
    if !require(&[Feature::KubeApiServer, Feature::Whereabouts]) {
        return;
    }
    let api = plexus_testkit::kube::private_api("restart");
    with_whereabouts_crds(&api);
    let (net, conf) = ("wbz", conf(&api, "wbz", "10.100.0.0/26"));
    let pool = "wbz-10.100.0.0-26";
    let (threads, pods_each) = (8, 6);
    let failures = std::sync::atomic::AtomicU32::new(0);
    let held: Vec<(String, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (conf, failures) = (&conf, &failures);
                s.spawn(move || {
                    let mut held = Vec::new();
                    for p in 0..pods_each {
                        let pod = format!("ns8/z{t}-{p}");
                        held.push(add_as_kubelet(&pod, conf, failures));
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    held
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        api.restart(Duration::from_millis(1500));
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let failed = failures.into_inner();
    eprintln!("{} pods, {failed} ADDs failed on the way", held.len());
    assert!(
        failed > 0,
        "no ADD met the restart: the test proved nothing"
    );
    all_distinct(&held);
    exactly_held(&api, pool, net, &held);
    for (container, _) in &held {
        let pod = format!("ns8/{}", container.rsplit_once('.').unwrap().0);
        plexus(&Call::new("DEL", container, &pod), &conf).unwrap();
    }
    exactly_held(&api, pool, net, &[]);
}

/// A pod's sandbox ADDed as kubelet does: a failed ADD is DELeted and
/// tried again with a new sandbox (container `<pod's name>.<n>`), for 60 s at
/// most; the container and address that took.
fn add_as_kubelet(
    pod: &str,
    conf: &Value,
    failures: &std::sync::atomic::AtomicU32,
) -> (String, String) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for sandbox in 0.. {
        let name = pod.split_once('/').unwrap().1;
        let container = format!("{name}.{sandbox}");
        match plexus(&Call::new("ADD", &container, pod), conf) {
            Ok(result) => return (container, address(&result)),
            Err(e) => {
                failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                assert!(std::time::Instant::now() < deadline, "ADD of {pod}: {e}");
                del_until_done(&Call::new("DEL", &container, pod), conf);
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    unreachable!("the loop returns or panics")
}
