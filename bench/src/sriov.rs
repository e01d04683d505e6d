//! The SR-IOV case (`--sriov`): a VF per pod on a real PCI SR-IOV PF, which
//! only the test VM has (qemu's emulated Intel 82576, igb; run it with
//! `vm-tests/run --bench -- --sriov`). It recreates the PF's VFs, so it
//! refuses to run outside the VM (`PLEXUS_VM=1`).
//!
//! For N pods, each in a fresh namespace, the `plexus` binary attaches a VF
//! as the runtime invokes it: one delegate, a NAD-like `sriov` config (the
//! VF's `deviceID`, `mac`, `vlan`, `spoofchk` off, `trust` on,
//! `max_tx_rate`, host-local IPAM). After each ADD the VF's settings are read
//! back from the PF over netlink and the pod checked for its netdev (named
//! `net1`, the MAC, up, the address); after each DEL the VF must be back in
//! the host with its name, MAC and PF-side settings as before. Failed checks
//! are counted, printed and make the run fail: a benchmark that applies
//! nothing must not look fast.
//!
//! The peer is sriov-cni itself (36db6d96, built by `.ci/sriov-cni` on the
//! host, which vm-tests/run does before the VM starts), with the same
//! configuration and its exec of host-local, as Multus would exec it. Beside
//! it, an iproute2 floor: the same kernel work done by iproute2 commands
//! exec'd one after another in sriov-cni's order, one `ip` per netlink
//! request it makes, plus its exec of host-local (a floor for the kernel
//! work, not for process start-ups: 7 execs per ADD where sriov-cni has 2).
//! Without a built sriov-cni the floor alone is measured, and the output
//! says why. Pods take turns between the contenders, on different VFs, so
//! machine noise hits all alike.
//!
//! sriov-cni keeps its state in `/var/lib/cni/sriov`, a fixed path, and the
//! VM's root is read-only: the benchmark moves into a mount namespace of its
//! own with a temp directory bound over `/var/lib` before anything else, so
//! every contender inherits it at no cost per exec.

use std::path::Path;
use std::time::Duration;

use plexus_cni::names::IfName;
use plexus_dataplane::netlink::VfState;
use plexus_dataplane::{MacAddr, NetNs, Netlink};
use plexus_testkit::sriov::{find_pf, sriov_cni, PciVf, SriovVfs};
use serde_json::{json, Value};

use crate::{cni_env_as, invoke, ip, percentile, print_table, with_prev_result, Namespaces, Run};

/// VFs created on the PF: each contender's pods take turns on two of its
/// own. Not shared: sriov-cni's DEL leaves an admin MAC on an igb VF (it
/// restores the one it read, which igb reports as the VF's own when none is
/// set), and an untrusted VF can then no longer set its own MAC, which the
/// floor's ADD does first.
const VFS: u32 = 6;
const VFS_EACH: usize = 2;
/// The pod's name for its VF's netdev.
const IFNAME: &str = "net1";

/// A name the kernel or this benchmark gave, as the data plane takes it.
fn ifname(name: &str) -> Result<IfName, String> {
    IfName::new(name).map_err(|e| format!("interface name {name:?}: {e}"))
}
const MAX_TX_RATE: u32 = 100;

const FLOOR: &str = "iproute2 floor";
const PEER: &str = "sriov-cni";

/// What the case needs from the main benchmark.
pub struct Setup<'a> {
    pub plexus: &'a Path,
    pub reference_dir: &'a Path,
    pub namespaces: &'a mut Namespaces,
    pub tmp: &'a Path,
    pub pods: usize,
}

/// A VF as the host sees it right before a pod's ADD: what its DEL must
/// give back (so a VF one contender failed to restore counts against that
/// one only).
struct Snapshot {
    netdev: String,
    mac: MacAddr,
    state: VfState,
}

/// One pod's attachment: where, and what it asks of its VF.
struct Pod<'v> {
    ns: NetNs,
    ns_name: String,
    id: String,
    vf: &'v PciVf,
    before: Snapshot,
    mac: MacAddr,
    vlan: u16,
}

/// The node: the VM's own namespace, where the PF is.
struct Node {
    ns: NetNs,
    nl: Netlink,
    pf: String,
    pf_index: u32,
}

/// The per-contender counts and samples.
#[derive(Default)]
struct Tally {
    who: &'static str,
    add: Vec<Duration>,
    del: Vec<Duration>,
    applied: usize,
    restored: usize,
    failures: Vec<String>,
}

impl Tally {
    fn new(who: &'static str) -> Tally {
        Tally {
            who,
            ..Tally::default()
        }
    }

    /// The ADD of `pod` by the contender's plugin `binary`, timed, and the
    /// VF settings it applied checked; its result.
    fn timed_add(
        &mut self,
        node: &Node,
        binary: &Path,
        pod: &Pod,
        conf: &Value,
        cni_path: &Path,
    ) -> Result<Value, String> {
        let env = cni_env_as("ADD", &pod.id, &pod.ns, IFNAME, "", cni_path);
        let add = invoke(&node.ns, binary, &[], &env, conf.to_string().as_bytes())?;
        self.add.push(add.elapsed);
        let result = parse(&add)?;
        let wrong = check_applied(node, pod, &first_address(&result)?)?;
        self.applied += self.verified("after ADD", pod, wrong) as usize;
        Ok(result)
    }

    /// The DEL of `pod` (with its ADD's `result`) by `binary`, timed, and
    /// the VF checked restored.
    fn timed_del(
        &mut self,
        node: &Node,
        binary: &Path,
        pod: &Pod,
        conf: &Value,
        result: &Value,
        cni_path: &Path,
    ) -> Result<(), String> {
        let env = cni_env_as("DEL", &pod.id, &pod.ns, IFNAME, "", cni_path);
        let del = invoke(&node.ns, binary, &[], &env, &with_prev_result(conf, result))?;
        self.del.push(del.elapsed);
        let wrong = check_restored(node, pod)?;
        self.restored += self.verified("after DEL", pod, wrong) as usize;
        Ok(())
    }

    fn verified(&mut self, what: &str, pod: &Pod, wrong: Vec<String>) -> bool {
        if wrong.is_empty() {
            return true;
        }
        self.failures.push(format!(
            "{}, {} on VF {} ({what}): {}",
            self.who,
            pod.id,
            pod.vf.address,
            wrong.join("; ")
        ));
        false
    }
}

/// Runs the case; `Err` also when a check failed (after the table).
pub fn run(setup: Setup) -> Result<bool, String> {
    if std::env::var("PLEXUS_VM").as_deref() != Ok("1") {
        return Err(
            "the SR-IOV case runs only in the test VM (`vm-tests/run --bench -- \
                    --sriov`): it replaces the VFs of the machine's SR-IOV PF"
                .into(),
        );
    }
    // Looked up with the machine's /var/lib (its key has dpkg's versions).
    let peer = sriov_cni();
    // Then, while the process has one thread (unshare needs that).
    private_var_lib(&setup.tmp.join("var-lib"))?;
    let Some(found) = find_pf() else {
        return Err("no PCI SR-IOV PF with a netdev here".into());
    };
    let host_local = setup.reference_dir.join("host-local");
    if !host_local.is_file() {
        return Err(format!("{} not found", host_local.display()));
    }
    if found.total_vfs < VFS {
        return Err(format!(
            "the PF {} has {} VFs at most, the case needs {VFS}",
            found.address, found.total_vfs
        ));
    }
    let created = SriovVfs::create(VFS);
    let nl = Netlink::current().map_err(|e| e.to_string())?;
    let pf_index = nl
        .link_by_name(&ifname(&created.pf.netdev)?)
        .map_err(|e| e.to_string())?
        .ok_or("the PF has no netdev here")?
        .index;
    let node = Node {
        ns: NetNs::current().map_err(|e| e.to_string())?,
        nl,
        pf: created.pf.netdev.clone(),
        pf_index,
    };
    let vfs = &created.vfs;
    let pid = std::process::id();
    let ipam = |who: &str, subnet: &str| {
        json!({"type": "host-local", "subnet": subnet,
               "dataDir": setup.tmp.join("sriov-ipam").join(who)})
    };
    // plexus's configuration: the VF's network as its one delegate.
    let plexus_conf = |vf: &PciVf, mac: MacAddr, vlan: u16| {
        let sriov = json!({"cniVersion": "1.0.0", "name": "bench-sriov", "type": "sriov",
               "deviceID": vf.address, "mac": mac.to_string(), "vlan": vlan,
               "spoofchk": "off", "trust": "on", "max_tx_rate": MAX_TX_RATE,
               "dataDir": setup.tmp.join("sriov-data"),
               "ipam": ipam("px", "10.90.0.0/16")});
        json!({"cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
               "delegates": [sriov], "cniDir": setup.tmp.join("sriov-cache")})
    };
    let floor_ipam = json!({"cniVersion": "1.0.0", "name": "bench-sriov-floor",
                            "ipam": ipam("floor", "10.91.0.0/16")});
    // sriov-cni's: the same network, as the NAD's config Multus hands it.
    let peer_conf = |vf: &PciVf, mac: MacAddr, vlan: u16| {
        json!({"cniVersion": "1.0.0", "name": "bench-sriov", "type": "sriov",
               "deviceID": vf.address, "mac": mac.to_string(), "vlan": vlan,
               "spoofchk": "off", "trust": "on", "max_tx_rate": MAX_TX_RATE,
               "ipam": ipam("sriov-cni", "10.92.0.0/16")})
    };

    println!(
        "plexus-bench: SR-IOV, {} pods per contender, one after another; {} VFs of the PF {} ({})",
        setup.pods,
        vfs.len(),
        node.pf,
        created.pf.address
    );
    println!(
        "each pod: its VF as {IFNAME} with mac, vlan, spoofchk off, trust on, max_tx_rate \
         {MAX_TX_RATE}, host-local IPAM"
    );
    match &peer {
        Ok(path) => println!(
            "peer: {PEER} ({}), exec'd with the same network config, and its host-local exec",
            path.display()
        ),
        Err(why) => println!("peer: {PEER} is not measured: {why}"),
    }
    println!(
        "floor: sriov-cni's netlink requests as `ip` execs in its order plus its host-local \
         exec (6 + 1 execs per ADD, 5 + 1 per DEL): a floor for the kernel work, not for \
         process start-ups (sriov-cni is 2 execs per call)"
    );
    let (mut ours, mut floor, mut theirs) =
        (Tally::new("plexus"), Tally::new(FLOOR), Tally::new(PEER));
    for i in 0..setup.pods {
        let mut pod = |n: usize, who: &str, octet: u8| {
            let ns_name = format!("pxb-{pid}-s{who}{i}");
            let ns = setup.namespaces.create(ns_name.clone())?;
            let vf = &vfs[n * VFS_EACH + i % VFS_EACH];
            let mac = MacAddr([0x02, 0, 0, octet, (i >> 8) as u8, i as u8]);
            Ok::<_, String>(Pod {
                ns,
                ns_name,
                id: format!("{who}{i}"),
                vf,
                before: snapshot(&node, vf)?,
                mac,
                vlan: 100 + (i % 1000) as u16,
            })
        };
        let (px, fl) = (pod(0, "px", 0x90)?, pod(1, "fl", 0x91)?);

        let conf = plexus_conf(px.vf, px.mac, px.vlan);
        let result = ours.timed_add(&node, setup.plexus, &px, &conf, setup.reference_dir)?;

        let (elapsed, address) =
            floor_add(&node, &fl, &host_local, &floor_ipam, setup.reference_dir)?;
        floor.add.push(elapsed);
        let wrong = check_applied(&node, &fl, &address)?;
        floor.applied += floor.verified("after ADD", &fl, wrong) as usize;

        ours.timed_del(
            &node,
            setup.plexus,
            &px,
            &conf,
            &result,
            setup.reference_dir,
        )?;

        floor.del.push(floor_del(
            &node,
            &fl,
            &host_local,
            &floor_ipam,
            setup.reference_dir,
        )?);
        let wrong = check_restored(&node, &fl)?;
        floor.restored += floor.verified("after DEL", &fl, wrong) as usize;

        let Ok(peer) = &peer else { continue };
        let sc = pod(2, "sc", 0x92)?;
        let conf = peer_conf(sc.vf, sc.mac, sc.vlan);
        let result = theirs.timed_add(&node, peer, &sc, &conf, setup.reference_dir)?;
        theirs.timed_del(&node, peer, &sc, &conf, &result, setup.reference_dir)?;
    }

    println!();
    let mut contenders = vec![(FLOOR, &floor)];
    if peer.is_ok() {
        contenders.insert(0, (PEER, &theirs));
    }
    let mut rows: Vec<(&str, &[Duration], &[Duration])> = contenders
        .iter()
        .map(|(who, t)| (*who, t.add.as_slice(), t.del.as_slice()))
        .collect();
    rows.push(("plexus", &ours.add, &ours.del));
    print_table(14, &rows);
    let ratio = |f: &[Duration], o: &[Duration]| {
        percentile(f, 0.5).as_secs_f64() / percentile(o, 0.5).as_secs_f64()
    };
    let n = setup.pods;
    for (who, t) in &contenders {
        println!(
            "ADD: plexus is {:.2}x faster than {who}",
            ratio(&t.add, &ours.add)
        );
        println!(
            "DEL: plexus is {:.2}x faster than {who}",
            ratio(&t.del, &ours.del)
        );
    }
    let counts = |pick: fn(&Tally) -> usize| {
        let mut parts = vec![format!("{}/{n} plexus", pick(&ours))];
        parts.extend(
            contenders
                .iter()
                .map(|(who, t)| format!("{}/{n} {who}", pick(t))),
        );
        parts.join(", ")
    };
    println!("VF settings applied: {}", counts(|t| t.applied));
    println!("restored: {}", counts(|t| t.restored));
    let failures: Vec<String> = ours
        .failures
        .into_iter()
        .chain(floor.failures)
        .chain(theirs.failures)
        .collect();
    for failure in &failures {
        println!("FAILED: {failure}");
    }
    if !failures.is_empty() {
        return Err(format!("{} verification failures (above)", failures.len()));
    }
    // No latency target for this case: verification is what fails it.
    Ok(true)
}

fn parse(run: &Run) -> Result<Value, String> {
    serde_json::from_slice(&run.stdout).map_err(|e| format!("ADD result: {e}"))
}

/// The first address of a CNI result, `10.90.0.2/16`.
fn first_address(result: &Value) -> Result<String, String> {
    result["ips"][0]["address"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("no address in the result {result}"))
}

fn vf_state(node: &Node, vf: &PciVf) -> Result<VfState, String> {
    node.nl
        .vf_state(node.pf_index, vf.index)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("the PF does not report VF {}", vf.index))
}

fn snapshot(node: &Node, vf: &PciVf) -> Result<Snapshot, String> {
    let netdev = vf.netdev().ok_or("the VF has no netdev in the host")?;
    let link = node
        .nl
        .link_by_name(&ifname(&netdev)?)
        .map_err(|e| e.to_string())?;
    Ok(Snapshot {
        mac: link.and_then(|l| l.mac).ok_or("a VF netdev without MAC")?,
        netdev,
        state: vf_state(node, vf)?,
    })
}

/// The PF-side settings a pod's attachment touches, short.
fn settings(s: &VfState) -> String {
    format!(
        "mac {} vlan {} qos {} spoofchk {} trust {} max_tx_rate {}",
        s.mac, s.vlan.id, s.vlan.qos, s.spoofchk, s.trust, s.max_tx_rate
    )
}

/// Times a sequence of execs.
#[derive(Default)]
struct Stopwatch(Duration);

impl Stopwatch {
    fn ip(&mut self, netns: &NetNs, argv: &[&str]) -> Result<(), String> {
        self.0 += ip(netns, argv)?.elapsed;
        Ok(())
    }

    fn run(&mut self, run: Result<Run, String>) -> Result<Run, String> {
        let run = run?;
        self.0 += run.elapsed;
        Ok(run)
    }

    /// `ip link set dev PF vf N SETTINGS...` in the node: the VF's PF-side
    /// settings.
    fn set_vf(&mut self, node: &Node, vf: &PciVf, settings: &[&str]) -> Result<(), String> {
        let index = vf.index.to_string();
        let mut argv = vec!["link", "set", "dev", &node.pf, "vf", &index];
        argv.extend_from_slice(settings);
        self.ip(&node.ns, &argv)
    }

    /// host-local's `command` (ADD, DEL) for `pod`, as a runtime runs it.
    fn host_local(
        &mut self,
        command: &str,
        node: &Node,
        pod: &Pod,
        host_local: &Path,
        ipam: &Value,
        reference_dir: &Path,
    ) -> Result<Run, String> {
        let env = cni_env_as(command, &pod.id, &pod.ns, IFNAME, "", reference_dir);
        self.run(invoke(
            &node.ns,
            host_local,
            &[],
            &env,
            ipam.to_string().as_bytes(),
        ))
    }
}

/// sriov-cni's ADD as execs: the VF's netdev MAC, then its PF-side settings
/// (ApplyVFConfig), the move into the pod (SetupVF), host-local, and in the
/// pod the name, address and up (ConfigureIface). Returns the time and the
/// address.
fn floor_add(
    node: &Node,
    pod: &Pod,
    host_local: &Path,
    ipam: &Value,
    reference_dir: &Path,
) -> Result<(Duration, String), String> {
    let netdev = pod.vf.netdev().ok_or("the VF has no netdev in the host")?;
    let mac = pod.mac.to_string();
    let (vlan, rate) = (pod.vlan.to_string(), MAX_TX_RATE.to_string());
    let mut t = Stopwatch::default();
    t.ip(&node.ns, &["link", "set", "dev", &netdev, "address", &mac])?;
    t.set_vf(
        node,
        pod.vf,
        &[
            "mac",
            &mac,
            "vlan",
            &vlan,
            "spoofchk",
            "off",
            "trust",
            "on",
            "max_tx_rate",
            &rate,
        ],
    )?;
    t.ip(
        &node.ns,
        &["link", "set", "dev", &netdev, "netns", &pod.ns_name],
    )?;
    let run = t.host_local("ADD", node, pod, host_local, ipam, reference_dir)?;
    let address = first_address(&parse(&run)?)?;
    t.ip(&pod.ns, &["link", "set", "dev", &netdev, "name", IFNAME])?;
    t.ip(&pod.ns, &["addr", "add", &address, "dev", IFNAME])?;
    t.ip(&pod.ns, &["link", "set", "dev", IFNAME, "up"])?;
    Ok((t.0, address))
}

/// sriov-cni's DEL as execs: host-local, the PF-side settings as they were
/// (ResetVFConfig; the admin MAC first, as an untrusted VF could not take
/// its own MAC back), the netdev down, renamed and moved home
/// (ReleaseVF), its MAC as it was.
fn floor_del(
    node: &Node,
    pod: &Pod,
    host_local: &Path,
    ipam: &Value,
    reference_dir: &Path,
) -> Result<Duration, String> {
    let vf = &pod.before;
    let saved = &vf.state;
    // Without an admin MAC, igb reports the VF's own MAC: there was none.
    let admin = if saved.mac == vf.mac {
        MacAddr([0; 6])
    } else {
        saved.mac
    };
    let on_off = |b: bool| if b { "on" } else { "off" };
    let admin = admin.to_string();
    let (vlan, qos) = (saved.vlan.id.to_string(), saved.vlan.qos.to_string());
    let rate = saved.max_tx_rate.to_string();
    let home = std::process::id().to_string();
    let mut t = Stopwatch::default();
    t.host_local("DEL", node, pod, host_local, ipam, reference_dir)?;
    t.set_vf(
        node,
        pod.vf,
        &[
            "mac",
            &admin,
            "vlan",
            &vlan,
            "qos",
            &qos,
            "spoofchk",
            on_off(saved.spoofchk),
            "trust",
            on_off(saved.trust),
            "max_tx_rate",
            &rate,
        ],
    )?;
    t.ip(&pod.ns, &["link", "set", "dev", IFNAME, "down"])?;
    t.ip(&pod.ns, &["link", "set", "dev", IFNAME, "name", &vf.netdev])?;
    t.ip(&pod.ns, &["link", "set", "dev", &vf.netdev, "netns", &home])?;
    t.ip(
        &node.ns,
        &[
            "link",
            "set",
            "dev",
            &vf.netdev,
            "address",
            &vf.mac.to_string(),
        ],
    )?;
    Ok(t.0)
}

/// What differs from the pod's attachment: the VF's settings on the PF, and
/// its netdev in the pod (name, device, MAC, up, address).
fn check_applied(node: &Node, pod: &Pod, address: &str) -> Result<Vec<String>, String> {
    let mut wrong = Vec::new();
    let s = vf_state(node, pod.vf)?;
    let mut differs = |what: &str, have: String, want: String| {
        if have != want {
            wrong.push(format!("{what} {have}, not {want}"));
        }
    };
    differs("admin MAC", s.mac.to_string(), pod.mac.to_string());
    differs("vlan", s.vlan.id.to_string(), pod.vlan.to_string());
    differs("spoofchk", s.spoofchk.to_string(), "false".into());
    differs("trust", s.trust.to_string(), "true".into());
    differs(
        "max_tx_rate",
        s.max_tx_rate.to_string(),
        MAX_TX_RATE.to_string(),
    );
    if let Some(netdev) = pod.vf.netdev() {
        wrong.push(format!("its netdev {netdev} is still in the host"));
    }
    let nl = Netlink::open(&pod.ns).map_err(|e| e.to_string())?;
    let Some(link) = nl
        .link_by_name(&ifname(IFNAME)?)
        .map_err(|e| e.to_string())?
    else {
        wrong.push(format!("no {IFNAME} in the pod"));
        return Ok(wrong);
    };
    if link.parent_device.as_deref() != Some(pod.vf.address.as_str()) {
        wrong.push(format!("{IFNAME} is {:?}", link.parent_device));
    }
    if link.mac != Some(pod.mac) {
        wrong.push(format!("{IFNAME} has MAC {:?}", link.mac));
    }
    if !link.up {
        wrong.push(format!("{IFNAME} is down"));
    }
    let addresses = nl.addresses(link.index).map_err(|e| e.to_string())?;
    if !addresses.iter().any(|a| a.addr.to_string() == address) {
        wrong.push(format!("{IFNAME} lacks {address}"));
    }
    Ok(wrong)
}

/// What differs from the VF before any pod had it: its PF-side settings,
/// its netdev's namespace, name and MAC.
fn check_restored(node: &Node, pod: &Pod) -> Result<Vec<String>, String> {
    let (vf, before) = (pod.vf, &pod.before);
    let mut wrong = Vec::new();
    let now = vf_state(node, vf)?;
    if now != before.state {
        let (now, was) = (settings(&now), settings(&before.state));
        wrong.push(format!("settings {now}, were {was}"));
    }
    match vf.netdev() {
        None => wrong.push("no netdev in the host".into()),
        Some(name) if name != before.netdev => {
            wrong.push(format!("netdev {name}, was {}", before.netdev))
        }
        Some(name) => {
            let link = node
                .nl
                .link_by_name(&ifname(&name)?)
                .map_err(|e| e.to_string())?;
            let mac = link.and_then(|l| l.mac);
            if mac != Some(before.mac) {
                let mac = mac.map(|m| m.to_string()).unwrap_or_default();
                wrong.push(format!("netdev MAC {mac}, was {}", before.mac));
            }
        }
    }
    Ok(wrong)
}

/// Moves the benchmark into a mount namespace of its own in which `dir` is
/// `/var/lib` (see the module docs). Must run before any thread starts.
pub(crate) fn private_var_lib(dir: &Path) -> Result<(), String> {
    use nix::mount::{mount, MsFlags};
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let none: Option<&str> = None;
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
        .map_err(|e| format!("unshare(CLONE_NEWNS): {e}"))?;
    // Nothing mounted here reaches the machine's namespace.
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)
        .map_err(|e| format!("mount --make-rprivate /: {e}"))?;
    mount(Some(dir), "/var/lib", none, MsFlags::MS_BIND, none)
        .map_err(|e| format!("mount --bind {} /var/lib: {e}", dir.display()))?;
    Ok(())
}
