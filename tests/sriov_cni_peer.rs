//! plexus as a drop-in for sriov-cni, proven against sriov-cni itself
//! (k8snetworkplumbingwg/sriov-cni 36db6d96, as `.ci/sriov-cni` builds it).
//!
//! The network configurations of sriov-cni's own documentation (README.md
//! "Example configurations", docs/configuration-reference.md) go through
//! both, one after the other, on a real VF (qemu's igb in the VM harness,
//! `Feature::PciSriov`): sriov-cni exec'd as a runtime execs it, and the
//! `plexus` binary with the same configuration as its one delegate, served
//! by its built-in `sriov` driver. Each configuration gets the VF's PCI
//! address as `deviceID` (and `pciBusID`), as Multus adds it
//! (`delegateAddDeviceID`), and host-local IPAM as written there.
//!
//! What is compared: the ADD's result JSON (or that it failed), the VF's
//! settings on its PF after ADD, the pod's interface (name, MAC, up, MTU,
//! addresses, routes, arp_notify), the VF's netdev in the host, and all of
//! it again after DEL. Each contender starts from VFs created afresh, so
//! nothing one left behind meets the other; the VF's own MAC and netdev
//! name (new with each creation) are written as `<own MAC>` and `<own name>`.
//! Every difference found is listed with its reason in [`Case::differences`]:
//! the test fails on any other, and on a listed one that did not occur.
//!
//! sriov-cni and host-local keep state under `/var/lib/cni`, which the VM's
//! read-only root lacks: each contender runs in a mount namespace of its own
//! with a temp directory bound over `/var/lib` (`unshare --mount`), which
//! also keeps the two contenders' IPAM apart (both get the subnet's first
//! address). The observations are written to `sriov-cni-peer.json` beside
//! `PLEXUS_SKIP_LOG` (in the VM: vm-tests' `last-run/results/`).

mod e2e_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use e2e_support::{addresses, ip, link_names, Namespaces, PLEXUS, REFERENCE};
use plexus_dataplane::Netlink;
use plexus_testkit::process::output_with_stdin;
use plexus_testkit::sriov::{sriov_cni, PciVf, SriovVfs, VfioBinding};
use plexus_testkit::{require, Feature};
use serde_json::{json, Value};

const IFNAME: &str = "net1";
const CONTAINER: &str = "ctr-sriov-peer";

/// One configuration from sriov-cni's documentation.
struct Case {
    /// Where it comes from.
    name: &'static str,
    conf: Value,
    /// The VF bound to vfio-pci (sriov-cni's "DPDK mode").
    dpdk: bool,
    /// Every way plexus differs from sriov-cni here: (path in the
    /// observation, why).
    differences: Vec<(&'static str, &'static str)>,
}

impl Case {
    /// A case of the VF's kernel driver where plexus differs only in
    /// leaving out the empty `dns`.
    fn kernel_driver(name: &'static str, conf: Value) -> Case {
        Case {
            name,
            conf,
            dpdk: false,
            differences: vec![("/ADD/result/dns", EMPTY_DNS)],
        }
    }
}

/// `why` for each of `paths`: one reason behind several observations.
fn because(why: &'static str, paths: &[&'static str]) -> Vec<(&'static str, &'static str)> {
    paths.iter().map(|path| (*path, why)).collect()
}

// Why plexus differs, where it does.
const EMPTY_DNS: &str = "plexus leaves out an empty `dns` (cni-SPEC: optional, and an empty one \
    says nothing); sriov-cni's Go result types print `{}`";
const MAC_AS_WRITTEN: &str = "sriov-cni's result echoes the configured MAC as written (`SetupVF` \
    returns conf.MAC); plexus reports the MAC the netdev has, in the kernel's lower case";
const ADMIN_MAC_LEFT: &str = "sriov-cni's `ResetVFConfig` sets the admin MAC back to what \
    `FillOriginalVfInfo` read, and igb reports a VF's own MAC when no admin MAC is set: sriov-cni \
    leaves an admin MAC, and an untrusted VF can no longer change its own MAC; plexus saw the \
    netdev had that MAC and clears the admin MAC";
const FAILED_ADD_LEFT: &str = "sriov-cni's `cmdAdd` returns ApplyVFConfig's error in a shadowed \
    `err`, so its deferred `ResetVFConfig` never runs, and its DEL finds no cached config and \
    does nothing: the VLAN and admin MAC applied before igb refused min_tx_rate stay; plexus \
    gives back what the kernel applied";
const DPDK_MAC: &str = "in DPDK mode sriov-cni's result has no MAC; plexus reports the VF's \
    MAC as the PF reports it (the configured one, else an admin MAC set before; igb reports a \
    VF's own MAC when none is set)";
const ADMIN_MAC_FIRST: &str = "sriov-cni sets the admin MAC (`ApplyVFConfig`) before the \
    netdev's (`SetupVF`): igb then refuses an untrusted VF its own MAC, the ADD fails after 5 \
    tries and its cleanup (`ReleaseVF` needs the pod's interface) leaves the netdev down as \
    temp_N, and an admin MAC set; plexus sets the netdev's MAC first, as igb requires";

/// host-local as sriov-cni's README configures it.
fn readme_ipam() -> Value {
    json!({"type": "host-local", "subnet": "10.56.217.0/24",
           "routes": [{"dst": "0.0.0.0/0"}], "gateway": "10.56.217.1"})
}

fn cases() -> Vec<Case> {
    vec![
        Case::kernel_driver(
            "README: kernel driver config",
            json!({"type": "sriov", "cniVersion": "0.3.1", "name": "sriov-network",
                   "ipam": readme_ipam()}),
        ),
        Case::kernel_driver(
            "README: extended kernel driver config",
            json!({"cniVersion": "0.3.1", "name": "sriov-advanced", "type": "sriov",
                   "vlan": 1000, "spoofchk": "off", "trust": "on",
                   "ipam": readme_ipam()}),
        ),
        Case {
            name: "README: DPDK userspace driver config",
            conf: json!({"cniVersion": "0.3.1", "name": "sriov-dpdk", "type": "sriov",
                         "vlan": 1000}),
            dpdk: true,
            differences: vec![
                ("/ADD/result/dns", EMPTY_DNS),
                ("/ADD/result/interfaces/0/mac", DPDK_MAC),
            ],
        },
        Case {
            // Its `type` ("sriovi-net") is a typo there; the rest as written.
            // igb refuses min_tx_rate and link_state: both fail.
            name: "configuration-reference.md: every field",
            conf: json!({"cniVersion": "0.3.1", "name": "sriov-dpdk", "type": "sriov",
                         "vlan": 1000, "mac": "CA:FE:C0:FF:EE:00", "vlanQoS": 4,
                         "min_tx_rate": 100, "max_tx_rate": 200, "spoofchk": "off",
                         "trust": "on", "link_state": "enable"}),
            dpdk: false,
            differences: because(
                FAILED_ADD_LEFT,
                &[
                    "/after ADD/host/vf on the PF/mac",
                    "/after ADD/host/vf on the PF/vlan/id",
                    "/after ADD/host/vf on the PF/vlan/qos",
                    "/after DEL/host/vf on the PF/mac",
                    "/after DEL/host/vf on the PF/vlan/id",
                    "/after DEL/host/vf on the PF/vlan/qos",
                    "/then the VF may set its own MAC",
                ],
            ),
        },
        Case {
            name: "configuration-reference.md: the fields igb takes, with the README's IPAM",
            conf: json!({"cniVersion": "0.3.1", "name": "sriov-net", "type": "sriov",
                         "vlan": 1000, "mac": "CA:FE:C0:FF:EE:00", "vlanQoS": 4,
                         "max_tx_rate": 200, "spoofchk": "off", "trust": "on",
                         "ipam": readme_ipam()}),
            dpdk: false,
            differences: vec![
                ("/ADD/result/dns", EMPTY_DNS),
                ("/ADD/result/interfaces/0/mac", MAC_AS_WRITTEN),
                ("/then the VF may set its own MAC", ADMIN_MAC_LEFT),
            ],
        },
        Case {
            // As Multus hands over the pod annotation's "mac" (capability
            // "mac"), on an untrusted VF.
            name: "configuration-reference.md: runtime configuration MAC",
            conf: json!({"type": "sriov", "cniVersion": "0.3.1", "name": "sriov-net",
                         "capabilities": {"mac": true},
                         "runtimeConfig": {"mac": "CA:FE:C0:FF:EE:00"},
                         "ipam": readme_ipam()}),
            dpdk: false,
            differences: because(
                ADMIN_MAC_FIRST,
                &[
                    "/ADD/ok",
                    "/ADD/result",
                    "/after ADD/host/netdev in the host",
                    "/after ADD/host/vf on the PF/mac",
                    "/after ADD/pod/addresses",
                    "/after ADD/pod/arp_notify",
                    "/after ADD/pod/links",
                    "/after ADD/pod/mac",
                    "/after ADD/pod/mtu",
                    "/after ADD/pod/name",
                    "/after ADD/pod/routes",
                    "/after ADD/pod/up",
                    "/after DEL/host/netdev in the host/name",
                    "/then the VF may set its own MAC",
                ],
            ),
        },
    ]
}

/// A pod's network namespace, deleted on drop.
struct Pod {
    name: String,
    _ns: Namespaces,
}

impl Pod {
    fn new(tag: &str) -> Pod {
        let mut ns = Namespaces(Vec::new());
        let name = ns.add(tag);
        ip(&name, &["link", "set", "lo", "up"]);
        Pod { name, _ns: ns }
    }

    fn path(&self) -> String {
        format!("/var/run/netns/{}", self.name)
    }

    fn ip_json(&self, args: &[&str]) -> Value {
        let mut argv = vec!["-j"];
        argv.extend_from_slice(args);
        serde_json::from_str(ip(&self.name, &argv).trim()).unwrap_or(Value::Null)
    }

    /// The pod's side: its interface, addresses, routes and ARP notify.
    fn view(&self) -> Value {
        let links = link_names(&self.name);
        if !links.iter().any(|l| l == IFNAME) {
            return json!({ "links": links });
        }
        let link = &self.ip_json(&["link", "show", "dev", IFNAME])[0];
        let routes: Vec<String> = self
            .ip_json(&["route", "show"])
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                let via = r["gateway"].as_str().map(|g| format!(" via {g}"));
                let (dst, dev) = (r["dst"].as_str().unwrap(), r["dev"].as_str().unwrap());
                format!("{dst}{} dev {dev}", via.unwrap_or_default())
            })
            .collect();
        let sysctl = format!("/proc/sys/net/ipv4/conf/{IFNAME}/arp_notify");
        let arp_notify = Command::new("ip")
            .args(["netns", "exec", &self.name, "cat", &sysctl])
            .output()
            .unwrap()
            .stdout;
        json!({
            "name": link["ifname"], "mac": link["address"], "mtu": link["mtu"],
            "up": link["flags"].as_array().is_some_and(|f| f.contains(&json!("UP"))),
            "addresses": addresses(&self.name, IFNAME), "routes": routes,
            "arp_notify": String::from_utf8_lossy(&arp_notify).trim(),
        })
    }
}

/// Who serves the configuration.
#[derive(Debug, Clone, Copy)]
enum Contender {
    SriovCni,
    Plexus,
}

impl Contender {
    /// The binary and the configuration it is given: sriov-cni the NAD's,
    /// plexus one with it as the only delegate (what Multus's config would
    /// hold for such a pod).
    fn invocation(self, sriov_cni: &Path, nad: &Value) -> (PathBuf, Value) {
        match self {
            Contender::SriovCni => (sriov_cni.to_path_buf(), nad.clone()),
            Contender::Plexus => (
                PathBuf::from(PLEXUS),
                json!({"cniVersion": nad["cniVersion"], "name": "plexus", "type": "plexus",
                       "delegates": [nad]}),
            ),
        }
    }
}

/// Runs `plugin` as a runtime does, with `state` as its `/var/lib`.
fn exec(plugin: &Path, state: &Path, command: &str, pod: &Pod, conf: &Value) -> Output {
    let mut unshare = Command::new("unshare");
    unshare
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(r#"mount --bind "$0" /var/lib && exec "$@""#)
        .arg(state)
        .arg(plugin)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", CONTAINER)
        .env("CNI_NETNS", pod.path())
        .env("CNI_IFNAME", IFNAME)
        .env("CNI_PATH", REFERENCE)
        .env("CNI_ARGS", "IgnoreUnknown=1");
    output_with_stdin(&mut unshare, &conf.to_string())
}

/// What a call gave: its result, or that it failed (the error's code and
/// message, kept for reading; the comparison looks at `ok` only).
fn outcome(out: &Output) -> Value {
    let stdout: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    if out.status.success() {
        json!({"ok": true, "result": stdout})
    } else {
        json!({"ok": false, "error": stdout, "stderr": String::from_utf8_lossy(&out.stderr)})
    }
}

/// The VF as the host sees it: its settings on the PF, its netdev here.
fn host_view(nl: &Netlink, pf: u32, vf: &PciVf) -> Value {
    let state = nl.vf_state(pf, vf.index).unwrap().expect("the PF has it");
    let netdev = vf.netdev().map(|name| {
        let link = nl
            .link_by_name(&name.parse().unwrap())
            .unwrap()
            .expect("sysfs names it");
        json!({"name": name, "mac": link.mac.map(|m| m.to_string()), "mtu": link.mtu,
               "up": link.up})
    });
    json!({"vf on the PF": state, "netdev in the host": netdev})
}

/// Everything one contender did with `case` on fresh VFs.
fn observe(contender: Contender, case: &Case, sriov_cni: &Path) -> Value {
    let vfs = SriovVfs::create(1);
    let vf = &vfs.vfs[0];
    let nl = Netlink::current().unwrap();
    let pf = nl
        .link_by_name(&vfs.pf.netdev.parse().unwrap())
        .unwrap()
        .unwrap()
        .index;
    // The name and MAC the VF got with its creation, for normalizing.
    let own_name = vf.netdev();
    let own_mac = own_name
        .as_ref()
        .and_then(|n| nl.link_by_name(&n.parse().unwrap()).unwrap())
        .and_then(|l| l.mac)
        .map(|m| m.to_string());
    let vfio = case.dpdk.then(|| VfioBinding::bind(vf));

    let state = tempfile::tempdir().unwrap();
    let pod = Pod::new(&format!("{contender:?}").to_lowercase());
    let mut nad = case.conf.clone();
    nad["deviceID"] = json!(vf.address);
    nad["pciBusID"] = json!(vf.address);
    let (plugin, conf) = contender.invocation(sriov_cni, &nad);

    let before = host_view(&nl, pf, vf);
    let add = exec(&plugin, state.path(), "ADD", &pod, &conf);
    let added = outcome(&add);
    let after_add = json!({"host": host_view(&nl, pf, vf), "pod": pod.view()});
    // DEL with the ADD's result, as runtimes send it.
    let mut del_conf = conf.clone();
    if added["ok"] == true {
        del_conf["prevResult"] = added["result"].clone();
    }
    let del = outcome(&exec(&plugin, state.path(), "DEL", &pod, &del_conf));
    let after_del = json!({"host": host_view(&nl, pf, vf), "pod": pod.view()});
    let del_again = outcome(&exec(&plugin, state.path(), "DEL", &pod, &del_conf));
    // An admin MAC left set through the PF (igb reports it like the VF's own
    // MAC) shows as an untrusted VF that may no longer change its own.
    let may_set_own_mac = vf.netdev().map(|name| {
        Command::new("ip")
            .args(["link", "set", "dev", &name, "address", "02:00:00:5e:00:99"])
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
    });
    drop(vfio);

    let mut seen = json!({
        "before": before, "ADD": added, "after ADD": after_add,
        "DEL": del, "after DEL": after_del, "DEL again": del_again["ok"],
        "then the VF may set its own MAC": may_set_own_mac,
    });
    normalize(
        &mut seen,
        &pod.path(),
        own_name.as_deref(),
        own_mac.as_deref(),
    );
    seen
}

/// The pod's path and the VF's own name and MAC, as placeholders: they
/// differ between the contenders' pods and VF creations.
fn normalize(v: &mut Value, pod: &str, own_name: Option<&str>, own_mac: Option<&str>) {
    match v {
        Value::String(s) => {
            if s == pod {
                *s = "<pod>".into();
            } else if own_name == Some(s.as_str()) {
                *s = "<own name>".into();
            } else if own_mac.is_some_and(|m| m.eq_ignore_ascii_case(s)) {
                *s = "<own MAC>".into();
            }
        }
        Value::Array(a) => a
            .iter_mut()
            .for_each(|v| normalize(v, pod, own_name, own_mac)),
        Value::Object(o) => o
            .values_mut()
            .for_each(|v| normalize(v, pod, own_name, own_mac)),
        _ => {}
    }
}

/// The paths where `a` and `b` differ, with both values. An error's code,
/// message and stderr are not compared: the outcome is.
fn differences(a: &Value, b: &Value, path: &str, out: &mut BTreeMap<String, (Value, Value)>) {
    if path.ends_with("/error") || path.ends_with("/stderr") {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (va, vb) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                differences(va, vb, &format!("{path}/{k}"), out);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                differences(va, vb, &format!("{path}/{i}"), out);
            }
        }
        _ if a != b => {
            out.insert(path.to_string(), (a.clone(), b.clone()));
        }
        _ => {}
    }
}

#[test]
fn sriov_cni_documented_configurations_give_what_sriov_cni_gives() {
    if !require(&[
        Feature::Root,
        Feature::PciSriov,
        Feature::ReferencePlugins,
        Feature::SriovCni,
    ]) {
        return;
    }
    let peer = sriov_cni().unwrap();
    let mut report = Vec::new();
    let mut unexpected = Vec::new();
    for case in cases() {
        let theirs = observe(Contender::SriovCni, &case, &peer);
        let ours = observe(Contender::Plexus, &case, &peer);
        let mut found = BTreeMap::new();
        differences(&theirs, &ours, "", &mut found);
        for (path, (a, b)) in &found {
            if !case.differences.iter().any(|(p, _)| p == path) {
                unexpected.push(format!("{}: {path}: sriov-cni {a}, plexus {b}", case.name));
            }
        }
        for (path, why) in &case.differences {
            if !found.contains_key(*path) {
                unexpected.push(format!(
                    "{}: {path} was expected to differ ({why}), and did not",
                    case.name
                ));
            }
        }
        report.push(
            json!({"case": case.name, "sriov-cni": theirs, "plexus": ours,
                           "differences": found.keys().collect::<Vec<_>>()}),
        );
    }
    let text = serde_json::to_string_pretty(&report).unwrap();
    if let Some(log) = std::env::var_os("PLEXUS_SKIP_LOG") {
        if let Some(dir) = Path::new(&log).parent() {
            let _ = std::fs::write(dir.join("sriov-cni-peer.json"), &text);
        }
    }
    assert!(
        unexpected.is_empty(),
        "differences from sriov-cni:\n{}",
        unexpected.join("\n")
    );
}
