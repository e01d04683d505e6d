//! What plexus's integration tests need from the kernel and the machine.
//!
//! One test source runs on the host and in the VM harness (`vm-tests/`).
//! Each test states the features it needs with [`require`]; a missing one
//! skips the test *visibly*: a `SKIPPED <test>: ...` line on stderr and, when
//! `PLEXUS_SKIP_LOG` names a file, a line there, which `./test-all` counts
//! and lists. Inside the VM (`PLEXUS_VM=1`, set by its init) the kernel is
//! built to have everything, so a missing feature fails the test instead:
//! nothing is skipped there.
//!
//! Features are probed once per test binary, in throw-away network
//! namespaces (`unshare --net`), so probing changes nothing on the machine.

pub mod device_plugin;
pub mod dist;
pub mod dra;
pub mod files;
pub mod kube;
pub mod kubelet_dra;
pub mod node;
pub mod peers;
pub mod podman;
pub mod podresources;
pub mod process;
pub mod sriov;
pub mod traffic;

use std::borrow::Cow;
use std::fmt;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Something a test needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Feature {
    /// CAP_SYS_ADMIN and CAP_NET_ADMIN: creating namespaces and links.
    Root,
    /// ipvlan links (l2, l3, l3s).
    Ipvlan,
    /// Bridges with `vlan_filtering 1`.
    BridgeVlanFiltering,
    /// 802.1q and 802.1ad vlan links.
    Vlan,
    /// dummy links.
    Dummy,
    /// netdevsim devices with SR-IOV VFs (`/sys/bus/netdevsim`).
    Netdevsim,
    /// The vDPA bus with the `vdpasim_net` simulator.
    VdpaSim,
    /// The RDMA subsystem with its netlink interface, iproute2's `rdma`,
    /// and the software RDMA device rdma_rxe (soft-RoCE) over a netdev.
    SoftRdma,
    /// The VM harness's stand-in for an RDMA NIC that can change namespace:
    /// its kernel carries vm-tests/kernel-patches/rxe-netns-stand-in.patch
    /// (rdma_rxe able to move, under its netdev's bus device). The harness
    /// says which patches its kernel has (`PLEXUS_VM_KERNEL_PATCHES`).
    RdmaNetnsStandIn,
    /// A real PCI SR-IOV physical function with a netdev (`sriov_totalvfs`
    /// above 0): qemu's igb in the VM harness ([`sriov`] creates its VFs).
    /// Only there: the tests create and remove VFs of a machine-wide device,
    /// so a host's own SR-IOV NIC is never used.
    PciSriov,
    /// Debian's reference CNI plugins in `/usr/lib/cni`.
    ReferencePlugins,
    /// `python3`, for traffic generators.
    Python3,
    /// SCTP sockets (`CONFIG_IP_SCTP`), for policy tests of SCTP ports.
    Sctp,
    /// podman with runc (its CNI backend as a real client), on a machine
    /// with cgroups mounted, which runc needs.
    Podman,
    /// The real kube-apiserver `.ci/kube-apiserver` builds, with etcd,
    /// openssl, curl and kubectl to run it ([`kube`]).
    KubeApiServer,
    /// The same API server for a test of devices only the VM has (a VF
    /// claimed through DRA): in the VM too, started there from the host's
    /// cache (about 60 s under TCG), where [`Feature::KubeApiServer`]'s
    /// tests are left to the host.
    KubeApiServerBesideDevices,
    /// sriov-cni, the peer of plexus's `sriov` driver, as `.ci/sriov-cni`
    /// builds and caches it ([`sriov::sriov_cni`]).
    SriovCni,
    /// rdma-cni, the chained peer of plexus's built-in `rdma` type, as
    /// `.ci/rdma-cni` builds and caches it ([`peers::rdma_cni`]).
    RdmaCni,
    /// whereabouts, the cluster-wide IPAM plugin, as `.ci/whereabouts`
    /// builds and caches it ([`peers::whereabouts`]).
    Whereabouts,
    /// The previous release of plexus (a static binary of a pinned commit),
    /// as `.ci/previous-release` builds and caches it
    /// ([`peers::previous_release`]).
    PreviousRelease,
    /// A one-node cluster with a real kubelet and containerd
    /// (`testkit/node-up`, [`node`]): the binaries `.ci/kube-node` builds,
    /// containerd, runc and cgroup v1.
    KubeNode,
}

impl Feature {
    const ALL: [Feature; 21] = [
        Feature::Root,
        Feature::Ipvlan,
        Feature::BridgeVlanFiltering,
        Feature::Vlan,
        Feature::Dummy,
        Feature::Netdevsim,
        Feature::VdpaSim,
        Feature::SoftRdma,
        Feature::RdmaNetnsStandIn,
        Feature::PciSriov,
        Feature::ReferencePlugins,
        Feature::Python3,
        Feature::Sctp,
        Feature::Podman,
        Feature::KubeApiServer,
        Feature::KubeApiServerBesideDevices,
        Feature::SriovCni,
        Feature::RdmaCni,
        Feature::Whereabouts,
        Feature::PreviousRelease,
        Feature::KubeNode,
    ];

    /// Whether the VM harness must have it. podman is the one exception: it
    /// is a runtime, not a kernel feature; runc needs cgroups and podman a
    /// writable `/var/lib`, which the VM's minimal kernel and read-only root
    /// leave out. Its tests run in the host suite, and in the VM they are
    /// skipped visibly like anywhere else it is missing.
    fn vm_provides(self) -> bool {
        // The API server is a service of a few hundred MB, not a kernel
        // feature: its tests run in the host suite.
        // sriov-cni and rdma-cni are built on the host from source
        // repositories a machine may lack; vm-tests/run builds them before
        // the VM starts.
        !matches!(
            self,
            Feature::Podman
                | Feature::KubeApiServer
                | Feature::SriovCni
                | Feature::RdmaCni
                | Feature::Whereabouts
                | Feature::PreviousRelease
                | Feature::KubeNode
        )
    }

    /// Why it is missing, or `None` when it is there; each feature probed
    /// once, when first asked about (a probe may build what it checks:
    /// [`peers::previous_release`]).
    fn missing(self) -> Option<&'static str> {
        static PROBED: [OnceLock<Option<Cow<'static, str>>>; Feature::ALL.len()] =
            [const { OnceLock::new() }; Feature::ALL.len()];
        let index = Feature::ALL
            .iter()
            .position(|f| *f == self)
            .expect("listed");
        PROBED[index].get_or_init(|| self.probe()).as_deref()
    }

    fn probe(self) -> Option<Cow<'static, str>> {
        let root = nix::unistd::geteuid().is_root();
        let reason = |missing: bool, why: &'static str| missing.then_some(Cow::Borrowed(why));
        match self {
            Feature::Root => reason(!root, "not running as root"),
            _ if !root && !matches!(self, Feature::ReferencePlugins | Feature::Python3) => {
                reason(true, "probing it needs root")
            }
            Feature::Ipvlan => in_scratch_netns(
                "ip link add p0 type veth peer name p1 && ip link add i0 link p0 type ipvlan mode l2",
                "this kernel has no ipvlan (EOPNOTSUPP)",
            ),
            Feature::BridgeVlanFiltering => in_scratch_netns(
                "ip link add b0 type bridge vlan_filtering 1",
                "this kernel's bridge has no VLAN filtering (EOPNOTSUPP)",
            ),
            Feature::Vlan => in_scratch_netns(
                "ip link add p0 type veth peer name p1 && ip link add link p0 name v0 type vlan id 10 \
                 && ip link add link p0 name v1 type vlan proto 802.1ad id 20",
                "this kernel has no 802.1q/802.1ad vlan (EOPNOTSUPP)",
            ),
            Feature::Dummy => in_scratch_netns(
                "ip link add d0 type dummy",
                "this kernel has no dummy links (EOPNOTSUPP)",
            ),
            // The rxe device dies with its dummy, and so with the namespace.
            Feature::SoftRdma => in_scratch_netns(
                "ip link add d0 type dummy && rdma link add pxt-probe-rxe type rxe netdev d0",
                "this kernel has no RDMA subsystem with rdma_rxe, or iproute2 no `rdma`",
            ),
            Feature::RdmaNetnsStandIn => reason(
                !std::env::var("PLEXUS_VM_KERNEL_PATCHES")
                    .is_ok_and(|p| p.split_whitespace().any(|p| p == "rxe-netns-stand-in.patch")),
                "not the VM harness's kernel with vm-tests/kernel-patches/rxe-netns-stand-in.patch",
            ),
            Feature::Netdevsim => reason(
                !Path::new("/sys/bus/netdevsim/new_device").exists(),
                "this kernel has no netdevsim",
            ),
            Feature::VdpaSim => {
                let why = "this kernel has no vDPA bus with vdpasim_net";
                if !Path::new("/sys/bus/vdpa").exists() {
                    return reason(true, why);
                }
                match bounded(Command::new("vdpa").args(["mgmtdev", "show"]), PROBE_TIMEOUT) {
                    Ok(out) => reason(!String::from_utf8_lossy(&out.stdout).contains("vdpasim_net"), why),
                    Err(e) => Some(e.into()),
                }
            }
            Feature::PciSriov => match sriov::find_pf() {
                None => reason(
                    true,
                    "no PCI device with SR-IOV (sriov_totalvfs > 0) and a netdev, like the VM's igb",
                ),
                Some(pf) if !in_vm() => Some(Cow::Owned(format!(
                    "the SR-IOV tests create and remove the VFs of {} ({}): they run in the VM harness only",
                    pf.address, pf.netdev
                ))),
                Some(_) => None,
            },
            Feature::ReferencePlugins => reason(
                !REFERENCE_PLUGINS
                    .iter()
                    .all(|p| Path::new("/usr/lib/cni").join(p).is_file()),
                "/usr/lib/cni lacks reference plugins (apt-get install containernetworking-plugins)",
            ),
            Feature::Sctp => reason(
                nix::sys::socket::socket(
                    nix::sys::socket::AddressFamily::Inet,
                    nix::sys::socket::SockType::Stream,
                    nix::sys::socket::SockFlag::empty(),
                    nix::sys::socket::SockProtocol::Sctp,
                )
                .is_err(),
                "this kernel has no SCTP (EPROTONOSUPPORT)",
            ),
            Feature::Python3 => match bounded(Command::new("python3").arg("-V"), PROBE_TIMEOUT) {
                Ok(out) => reason(!out.status.success(), "no python3 on PATH (apt-get install python3)"),
                Err(e) => Some(e.into()),
            },
            Feature::KubeApiServer => kube::missing(),
            Feature::KubeApiServerBesideDevices => kube::missing_binaries(),
            Feature::SriovCni => sriov::sriov_cni().err().map(Cow::Owned),
            Feature::RdmaCni => peers::rdma_cni().err().map(Cow::Owned),
            Feature::Whereabouts => peers::whereabouts().err().map(Cow::Owned),
            Feature::PreviousRelease => peers::previous_release().err().map(Cow::Owned),
            Feature::KubeNode => node::missing(),
            Feature::Podman => {
                if !["podman", "runc", "nsenter", "timeout"].iter().all(|t| on_path(t)) {
                    reason(true, "podman, runc, nsenter or timeout is missing (apt-get install podman runc uidmap busybox-static)")
                } else {
                    reason(
                        std::fs::read_dir("/sys/fs/cgroup").map_or(true, |mut d| d.next().is_none()),
                        "no cgroup file system is mounted, which runc needs",
                    )
                }
            }
        }
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Feature::Root => "root",
            Feature::Ipvlan => "ipvlan",
            Feature::BridgeVlanFiltering => "bridge VLAN filtering",
            Feature::Vlan => "vlan",
            Feature::Dummy => "dummy",
            Feature::Netdevsim => "netdevsim",
            Feature::VdpaSim => "vdpa_sim_net",
            Feature::SoftRdma => "rdma_rxe",
            Feature::RdmaNetnsStandIn => "rdma_rxe able to change namespace (the VM's stand-in)",
            Feature::PciSriov => "PCI SR-IOV",
            Feature::ReferencePlugins => "the reference CNI plugins",
            Feature::Python3 => "python3",
            Feature::Sctp => "SCTP",
            Feature::Podman => "podman",
            Feature::KubeApiServer => "a kube-apiserver",
            Feature::KubeApiServerBesideDevices => "a kube-apiserver beside the devices",
            Feature::SriovCni => "sriov-cni",
            Feature::RdmaCni => "rdma-cni",
            Feature::Whereabouts => "whereabouts",
            Feature::PreviousRelease => "plexus's previous release",
            Feature::KubeNode => "a one-node cluster (kubelet, containerd)",
        };
        f.write_str(name)
    }
}

/// The reference plugins the tests run or compare with.
const REFERENCE_PLUGINS: [&str; 8] = [
    "bridge",
    "host-local",
    "static",
    "macvlan",
    "ipvlan",
    "tuning",
    "bandwidth",
    "ptp",
];

/// Whether the machine has `feature` (probed once).
pub fn has(feature: Feature) -> bool {
    feature.missing().is_none()
}

/// Whether this runs inside the VM harness.
pub fn in_vm() -> bool {
    std::env::var_os("PLEXUS_VM").is_some_and(|v| v == "1")
}

/// A bound on how long something may take, as a test states it for this
/// machine: ten times as long in the VM harness, whose CPUs qemu emulates
/// (TCG). The VM ran 3-4 times slower than the host here, and CI's machine
/// ran it about 3 times slower again (a 5 s call limit, 20 s in the VM, was
/// hit there on 2026-11-29). Still a bound: a hang fails the test either way.
pub fn bound(on_host: std::time::Duration) -> std::time::Duration {
    if in_vm() {
        on_host * 10
    } else {
        on_host
    }
}

/// `true` when every feature is there. Otherwise the calling test is
/// reported skipped (see the crate docs) and `false` returned, so the test
/// returns early; in the VM it fails instead.
#[track_caller]
pub fn require(features: &[Feature]) -> bool {
    for &feature in features {
        if let Some(why) = feature.missing() {
            if in_vm() && feature.vm_provides() {
                panic!(
                    "{}: needs {feature}, which the VM harness must provide ({why})",
                    test_name()
                );
            }
            skip(&format!("needs {feature}: {why}"));
            return false;
        }
    }
    true
}

/// For tests of how plexus copes *without* `feature`: `true` when the
/// machine lacks it; otherwise the test is reported skipped (also in the VM,
/// whose kernel has everything) and `false` returned.
pub fn require_absent(feature: Feature) -> bool {
    if !has(Feature::Root) {
        skip("needs root");
        return false;
    }
    if has(feature) {
        skip(&format!(
            "tests the behaviour without {feature}, which this kernel has"
        ));
        return false;
    }
    true
}

fn skip(reason: &str) {
    let test = test_name();
    // The real stderr, not libtest's captured one: a passing run shows it.
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {reason}");
    if let Some(log) = std::env::var_os("PLEXUS_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            // One write per line: concurrent tests append whole lines.
            let _ = f.write_all(format!("{test}\t{reason}\n").as_bytes());
        }
    }
}

/// libtest runs each test on a thread named after it.
fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("unnamed test")
        .to_string()
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// How long one probe command may take: a kernel that blocks (the emulated
/// CPU of vm-tests is slow, but not this slow) fails the probe with a reason
/// instead of hanging every test of the binary on the probe's lock.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `script` with `sh` in a fresh network namespace that disappears with
/// it: `None` when it succeeded, else `missing`, or why it could not tell.
fn in_scratch_netns(script: &str, missing: &'static str) -> Option<Cow<'static, str>> {
    match bounded(
        Command::new("unshare").args(["--net", "sh", "-c", script]),
        PROBE_TIMEOUT,
    ) {
        Ok(out) => (!out.status.success()).then_some(Cow::Borrowed(missing)),
        Err(e) => Some(e.into()),
    }
}

/// Runs `cmd` (stdin and stderr closed, stdout collected) for at most
/// `timeout`, polling; at the deadline it is killed and the error says so.
fn bounded(cmd: &mut Command, timeout: Duration) -> Result<Output, String> {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("probing it failed: {what}: {e}"))?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            // Probe output is small: the pipe never fills before the exit.
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("probing it timed out after {timeout:?}: {what}"));
            }
            Err(e) => return Err(format!("probing it failed: {what}: {e}")),
        }
    }
    child
        .wait_with_output()
        .map_err(|e| format!("probing it failed: {what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_agree_with_the_machine() {
        assert_eq!(has(Feature::Root), nix::unistd::geteuid().is_root());
        assert_eq!(
            has(Feature::ReferencePlugins),
            REFERENCE_PLUGINS
                .iter()
                .all(|p| Path::new("/usr/lib/cni").join(p).is_file())
        );
        if in_vm() {
            // The VM kernel is built for every feature it must provide.
            for f in Feature::ALL.into_iter().filter(|f| f.vm_provides()) {
                assert!(has(f), "{f}: {:?}", f.missing());
            }
        }
        // Every feature has a reason when missing.
        for f in Feature::ALL {
            if let Some(why) = f.missing() {
                assert!(!why.is_empty(), "{f}");
            }
        }
    }

    #[test]
    fn probe_commands_are_bounded() {
        let t0 = Instant::now();
        let e = bounded(Command::new("sleep").arg("10"), Duration::from_millis(200)).unwrap_err();
        assert!(e.starts_with("probing it timed out after 200ms"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        let out = bounded(Command::new("echo").arg("hi"), PROBE_TIMEOUT).unwrap();
        assert_eq!(out.stdout, b"hi\n");
        let e = bounded(&mut Command::new("/nonexistent/probe"), PROBE_TIMEOUT).unwrap_err();
        assert!(e.starts_with("probing it failed"), "{e}");
    }

    #[test]
    fn test_names_come_from_the_thread() {
        assert_eq!(test_name(), "tests::test_names_come_from_the_thread");
    }
}
