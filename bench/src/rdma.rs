//! The RDMA case (`--rdma`, issue 50): a VF handed whole to a pod with its
//! RDMA device, in the RDMA subsystem's exclusive mode, on qemu's igb in the
//! test VM only (`vm-tests/run --bench -- --rdma`): it recreates the PF's
//! VFs and changes the kernel's RDMA mode.
//!
//! The VF's RDMA device is the VM kernel's stand-in for a NIC's RDMA
//! function (rdma_rxe patched to change namespace and to sit under its
//! VF's PCI device: vm-tests/kernel-patches/rxe-netns-stand-in.patch); no
//! stock software device can move.
//!
//! Each pod's network is the chain rdma-cni documents, with `host-device`
//! handing the VF over (its `pciBusID`) and `rdma` moving its RDMA device
//! (`deviceID`):
//! - **reference:** the runtime's way: Debian's `host-device` binary, then
//!   rdma-cni (`.ci/rdma-cni`) with the first's result as `prevResult`, two
//!   execs per ADD and per DEL (DEL in reverse order), both timed;
//! - **plexus:** one exec of `plexus` with the chain as its delegate.
//!
//! After every ADD the pod must see the VF's netdev as `net1` and its RDMA
//! device, and the node neither; after every DEL the reverse. A contender
//! that fails a check fails the run: a benchmark that moves nothing must
//! not look fast. Contenders take turns, each on a VF of its own.
//!
//! rdma-cni keeps its state in `/var/lib/cni/rdma` and the VM's root is
//! read-only: the benchmark runs in a mount namespace of its own with a
//! temp directory over `/var/lib`, as the SR-IOV case does.

use std::path::Path;
use std::time::{Duration, Instant};

use plexus_dataplane::rdma::{NetnsMode, RdmaNetlink};
use plexus_dataplane::NetNs;
use plexus_testkit::peers::rdma_cni;
use plexus_testkit::sriov::{find_pf, PciVf, SriovVfs};
use plexus_testkit::{has, Feature};
use serde_json::{json, Value};

use crate::sriov::private_var_lib;
use crate::{cni_env_as, invoke, ip, percentile, print_table, verdict, Namespaces};

/// The pod's name for its VF's netdev.
const IFNAME: &str = "net1";
const PEER: &str = "host-device + rdma-cni";

/// What the case needs from the main benchmark: what the SR-IOV case does.
pub use crate::sriov::Setup;

/// A contender's VF, its netdev's name in the node and its RDMA device.
struct Device<'v> {
    vf: &'v PciVf,
    netdev: String,
    rdma: String,
}

/// The RDMA devices `ns` sees, by name.
fn rdma_devices(ns: &NetNs) -> Result<Vec<String>, String> {
    let list = || -> Result<Vec<String>, String> {
        let rdma = RdmaNetlink::open()
            .map_err(|e| e.to_string())?
            .ok_or("the kernel has no RDMA subsystem")?;
        let devices = rdma.devices().map_err(|e| e.to_string())?;
        Ok(devices.into_iter().map(|d| d.name).collect())
    };
    ns.run(list).map_err(|e| e.to_string())?
}

/// Sets the kernel's RDMA namespace mode. It changes only while no
/// namespace but the initial one exists: before any pod's.
fn set_mode(mode: NetnsMode) -> Result<(), String> {
    RdmaNetlink::open()
        .map_err(|e| e.to_string())?
        .ok_or("the kernel has no RDMA subsystem")?
        .set_netns_mode(mode)
        .map_err(|e| format!("set the RDMA namespace mode to {mode}: {e}"))
}

/// Shared mode again when the run ends: dropped after the pods'
/// namespaces, waiting (up to 30 s) while the kernel still tears them down
/// (EBUSY).
struct SharedAgain;

impl Drop for SharedAgain {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Err(e) = set_mode(NetnsMode::Shared) {
            if Instant::now() >= deadline {
                eprintln!("plexus-bench: the RDMA subsystem stays exclusive: {e}");
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Whether the device is where it should be: in the pod (`in_pod`) or in
/// the node; what is wrong otherwise.
fn placed(node: &NetNs, pod: &NetNs, d: &Device, in_pod: bool) -> Result<Vec<String>, String> {
    let mut wrong = Vec::new();
    let pod_rdma = rdma_devices(pod)?.contains(&d.rdma);
    let node_rdma = rdma_devices(node)?.contains(&d.rdma);
    if (pod_rdma, node_rdma) != (in_pod, !in_pod) {
        wrong.push(format!(
            "RDMA device {}: in the pod {pod_rdma}, in the node {node_rdma}",
            d.rdma
        ));
    }
    let pod_netdev = ip(pod, &["link", "show", IFNAME]).is_ok();
    let node_netdev = d.vf.netdev().as_deref() == Some(d.netdev.as_str());
    if (pod_netdev, node_netdev) != (in_pod, !in_pod) {
        wrong.push(format!(
            "netdev: {IFNAME} in the pod {pod_netdev}, {} in the node {node_netdev}",
            d.netdev
        ));
    }
    Ok(wrong)
}

/// Runs the case and prints its table; `Ok(false)` when plexus's ADD was
/// not faster, `Err` when a check failed.
pub fn run(setup: Setup) -> Result<bool, String> {
    if std::env::var("PLEXUS_VM").as_deref() != Ok("1") {
        return Err(
            "--rdma recreates the PF's VFs and changes the kernel's RDMA mode: run \
                    it in the test VM (vm-tests/run --bench -- --rdma)"
                .into(),
        );
    }
    if !has(Feature::RdmaNetnsStandIn) {
        return Err("--rdma needs the VM kernel's RDMA stand-in \
                    (vm-tests/kernel-patches/rxe-netns-stand-in.patch)"
            .into());
    }
    // Looked up with the machine's /var/lib, then a private one (see the
    // module docs), while the process has one thread.
    let peer = rdma_cni()?;
    private_var_lib(&setup.tmp.join("var-lib"))?;
    let host_device = setup.reference_dir.join("host-device");
    if !host_device.is_file() {
        return Err(format!("{} not found", host_device.display()));
    }
    find_pf().ok_or("no PCI SR-IOV PF with a netdev here")?;
    set_mode(NetnsMode::Exclusive)?;
    let _shared_again = SharedAgain;
    // The pods' namespaces, gone before the mode goes back (dropped first).
    let mut namespaces = Namespaces(Vec::new());
    let created = SriovVfs::create(2);
    let node = NetNs::current().map_err(|e| e.to_string())?;
    let mut devices = Vec::new();
    for (n, vf) in created.vfs.iter().enumerate() {
        let netdev = vf.netdev().ok_or("a VF without netdev")?;
        let rdma = format!("pxbrxe{n}");
        let added = invoke(
            &node,
            Path::new("/usr/bin/rdma"),
            &["link", "add", &rdma, "type", "rxe", "netdev", &netdev],
            &[],
            &[],
        );
        added.map_err(|e| format!("rdma link add {rdma}: {e}"))?;
        devices.push(Device { vf, netdev, rdma });
    }
    let (theirs, ours) = (&devices[0], &devices[1]);
    let pid = std::process::id();
    // The chain, as rdma-cni's example NAD has it with `host-device`.
    let host_device_conf = |d: &Device| {
        json!({"cniVersion": "1.0.0", "name": "bench-rdma", "type": "host-device",
               "pciBusID": d.vf.address, "dataDir": setup.tmp.join("host-device")})
    };
    let rdma_conf = |d: &Device| {
        json!({"cniVersion": "1.0.0", "name": "bench-rdma", "type": "rdma",
               "deviceID": d.vf.address, "dataDir": setup.tmp.join("rdma")})
    };
    let plexus_conf = json!({
        "cniVersion": "1.0.0", "name": "plexus", "type": "plexus",
        "cniDir": setup.tmp.join("rdma-cache"),
        "delegates": [{"cniVersion": "1.0.0", "name": "bench-rdma",
                       "plugins": [host_device_conf(ours), rdma_conf(ours)]}]});
    println!(
        "plexus-bench: RDMA, {} pods per contender, one after another, exclusive mode; \
         VFs {} and {} of the PF {} with rdma_rxe stand-ins",
        setup.pods, theirs.vf.address, ours.vf.address, created.pf.address
    );
    println!(
        "each pod: host-device (pciBusID) then rdma (deviceID); reference: {} then {} \
         (two execs per call), plexus: one exec",
        host_device.display(),
        peer.display()
    );

    let (mut ref_add, mut ref_del) = (Vec::new(), Vec::new());
    let (mut our_add, mut our_del) = (Vec::new(), Vec::new());
    let mut failures = Vec::new();
    let mut check = |who: &str, i: usize, pod: &NetNs, d: &Device, in_pod: bool| {
        let when = if in_pod { "ADD" } else { "DEL" };
        placed(&node, pod, d, in_pod).map(|wrong| {
            failures.extend(
                wrong
                    .into_iter()
                    .map(|w| format!("{who} pod {i} after {when}: {w}")),
            )
        })
    };
    // One timed CNI call of `binary` for container `id` in `pod`, and what
    // it printed.
    let cni = |binary: &Path, command: &str, id: &str, pod: &NetNs, conf: &Value| {
        let env = cni_env_as(command, id, pod, IFNAME, "", setup.reference_dir);
        let run = invoke(&node, binary, &[], &env, conf.to_string().as_bytes())?;
        let printed = match command {
            "ADD" => serde_json::from_slice(&run.stdout).map_err(|e| format!("{command}: {e}"))?,
            _ => Value::Null,
        };
        Ok::<_, String>((run.elapsed, printed))
    };
    let with_prev = |conf: &Value, prev: &Value| {
        let mut conf = conf.clone();
        conf["prevResult"] = prev.clone();
        conf
    };
    for i in 0..setup.pods {
        // The reference: two execs each way, as libcni runs a chain.
        let pod = namespaces.create(format!("pxb-{pid}-rr{i}"))?;
        let id = format!("ref{i}");
        let first = host_device_conf(theirs);
        let (attached, result) = cni(&host_device, "ADD", &id, &pod, &first)?;
        let second = with_prev(&rdma_conf(theirs), &result);
        let (moved, _) = cni(&peer, "ADD", &id, &pod, &second)?;
        ref_add.push(attached + moved);
        check("reference", i, &pod, theirs, true)?;
        let (moved_back, _) = cni(&peer, "DEL", &id, &pod, &second)?;
        let (given_back, _) = cni(&host_device, "DEL", &id, &pod, &with_prev(&first, &result))?;
        ref_del.push(moved_back + given_back);
        check("reference", i, &pod, theirs, false)?;

        // plexus: one exec each way.
        let pod = namespaces.create(format!("pxb-{pid}-rp{i}"))?;
        let id = format!("px{i}");
        let (added, result) = cni(setup.plexus, "ADD", &id, &pod, &plexus_conf)?;
        our_add.push(added);
        check("plexus", i, &pod, ours, true)?;
        let (deleted, _) = cni(
            setup.plexus,
            "DEL",
            &id,
            &pod,
            &with_prev(&plexus_conf, &result),
        )?;
        our_del.push(deleted);
        check("plexus", i, &pod, ours, false)?;
    }

    println!();
    print_table(
        24,
        &[(PEER, &ref_add, &ref_del), ("plexus", &our_add, &our_del)],
    );
    let ratio = |theirs: &[Duration], ours: &[Duration]| {
        percentile(theirs, 0.5).as_secs_f64() / percentile(ours, 0.5).as_secs_f64()
    };
    let add = ratio(&ref_add, &our_add);
    let met = add >= 1.0;
    println!(
        "ADD: plexus is {add:.2}x faster than {PEER} (target >= 1.00x: {})",
        verdict(met)
    );
    println!(
        "DEL: plexus is {:.2}x faster than {PEER}",
        ratio(&ref_del, &our_del)
    );
    if !failures.is_empty() {
        return Err(format!(
            "{} checks failed:\n  {}",
            failures.len(),
            failures.join("\n  ")
        ));
    }
    println!(
        "checks: after each of the {} ADDs and DELs per contender the VF's netdev and RDMA \
         device were where they belong",
        setup.pods
    );
    Ok(met)
}
