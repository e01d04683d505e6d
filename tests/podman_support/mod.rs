//! A throw-away podman (CNI backend) whose only CNI plugin on its network is
//! the `plexus` binary under test. Everything podman owns lives in a temp dir
//! (`--root`, `--runroot`, `CONTAINERS_CONF`, the conflist, the plugin dir, a
//! busybox rootfs), and podman runs inside a "node" network namespace made
//! here, so the plugin's host side (bridges, veth peers) never reaches the
//! machine's own namespace. The fixtures run one at a time, which lets
//! [`Podman::assert_clean`] compare machine-wide state (root namespace links,
//! `/run/netns`, libcni's result cache) before and after.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use plexus_dataplane::NetNs;
use plexus_testkit::podman::podman_in;
use serde_json::{json, Value};

pub const PLEXUS: &str = env!("CARGO_BIN_EXE_plexus");
/// The reference plugins: `CNI_PATH` for anything plexus does not serve itself.
pub const REFERENCE: &str = "/usr/lib/cni";
/// The network podman knows; its only plugin is plexus.
pub const NETWORK: &str = "plexusnet";
/// plexus's cluster network (the delegate): a bridge with dual-stack host-local.
pub const CLUSTER_V4: &str = "10.88.7.";
pub const CLUSTER_V6: &str = "fd00:88:7::";
pub const CLUSTER_GATEWAY: &str = "10.88.7.1";
/// The secondary network every container gets through `defaultNetworks`.
pub const SECONDARY_V4: &str = "10.89.7.";
/// Bridges the plugin leaves in the node namespace (the reference bridge
/// plugin keeps its bridge on DEL too).
pub const BRIDGES: [&str; 2] = ["br-pod", "br-sec"];
/// libcni's result cache: podman 4.3 does not let it be moved.
const LIBCNI_RESULTS: &str = "/var/lib/cni/results";
/// Where rootful podman bind-mounts the container network namespaces.
const NETNS_DIR: &str = "/run/netns";
/// Every command is bounded by this (seconds).
const TIMEOUT: &str = "60";
const INSTALL: &str = "apt-get install podman runc uidmap busybox-static";
const BUSYBOX: [&str; 2] = ["/bin/busybox", "/usr/bin/busybox"];
const APPLETS: [&str; 4] = ["sh", "ip", "ping", "sleep"];

/// True (and reported, see `plexus_testkit`) when the test must be skipped.
/// A missing static busybox is a broken set-up, not a skip: the same
/// packages bring podman and it.
pub fn skip() -> bool {
    use plexus_testkit::Feature;
    if !plexus_testkit::require(&[Feature::Root, Feature::Podman]) {
        return true;
    }
    assert!(
        static_busybox().is_some(),
        "no statically linked busybox for the container image ({INSTALL})"
    );
    false
}

/// busybox without a program interpreter (no PT_INTERP), so it runs in a
/// rootfs that holds nothing else.
fn static_busybox() -> Option<&'static str> {
    BUSYBOX.into_iter().find(|p| {
        let Ok(elf) = std::fs::read(p) else {
            return false;
        };
        let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
        let u64_at = |o: usize| {
            elf.get(o..o + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        };
        // ELF64 little-endian: e_phoff at 0x20, e_phentsize 0x36, e_phnum 0x38.
        if elf.get(..5) != Some(b"\x7fELF\x02") {
            return false;
        }
        let (Some(phoff), Some(size), Some(count)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
        else {
            return false;
        };
        (0..usize::from(count)).all(|i| {
            let at = phoff as usize + i * usize::from(size);
            elf.get(at..at + 4) != Some(&3u32.to_le_bytes()[..])
        })
    })
}

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Machine-wide state a run must leave as it found it.
#[derive(Debug, PartialEq)]
struct Machine {
    root_links: BTreeSet<(u64, String)>,
    netns_mounts: BTreeSet<String>,
    libcni_results: BTreeSet<String>,
}

impl Machine {
    fn now() -> Machine {
        let links: Value = serde_json::from_slice(&checked(
            bounded("ip").args(["-j", "link", "show"]),
            "ip -j link show",
        ))
        .unwrap();
        Machine {
            root_links: links
                .as_array()
                .unwrap()
                .iter()
                .map(|l| {
                    (
                        l["ifindex"].as_u64().unwrap(),
                        l["ifname"].as_str().unwrap().to_string(),
                    )
                })
                .collect(),
            netns_mounts: names_in(Path::new(NETNS_DIR))
                .into_iter()
                .filter(|n| n.starts_with("netns-"))
                .collect(),
            // `<network>-<container>-<ifname>`: only ours, other runtimes may run.
            libcni_results: names_in(Path::new(LIBCNI_RESULTS))
                .into_iter()
                .filter(|n| n.starts_with(&format!("{NETWORK}-")))
                .collect(),
        }
    }
}

fn names_in(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// `program` under `timeout`: killed after TIMEOUT seconds.
fn bounded(program: &str) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", TIMEOUT, program]);
    cmd
}

fn checked(cmd: &mut Command, what: &str) -> Vec<u8> {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

pub struct Podman {
    tmp: tempfile::TempDir,
    pub node: String,
    before: Machine,
    _serial: MutexGuard<'static, ()>,
}

impl Podman {
    /// A node namespace, podman's config and a busybox rootfs;
    /// None (reported) when podman or its dependencies are missing.
    pub fn start() -> Option<Podman> {
        if skip() {
            return None;
        }
        static FIXTURES: AtomicUsize = AtomicUsize::new(0);
        let tag = FIXTURES.fetch_add(1, Ordering::Relaxed);
        let serial = serial();
        let before = Machine::now();
        let tmp = tempfile::tempdir().unwrap();
        let node = format!("pxpm-{}-{tag}", std::process::id());
        NetNs::create_named(&node).unwrap();
        let podman = Podman {
            tmp,
            node,
            before,
            _serial: serial,
        };
        checked(
            bounded("ip").args(["-n", &podman.node, "link", "set", "lo", "up"]),
            "lo up",
        );
        podman.write_config();
        podman.write_rootfs();
        Some(podman)
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    fn write_config(&self) {
        for dir in ["bin", "net.d", "confdir", "manifests", "tmp"] {
            std::fs::create_dir_all(self.path(dir)).unwrap();
        }
        std::os::unix::fs::symlink(PLEXUS, self.path("bin/plexus")).unwrap();
        let quoted = |rel: &str| json!(self.path(rel)).to_string();
        // cni_plugin_dirs is libcni's CNI_PATH: plexus, then the reference plugins.
        let conf = format!(
            "[containers]\ndefault_ulimits = [\"nofile=20000:20000\", \"nproc=32768:32768\"]\n\
             [network]\nnetwork_backend = \"cni\"\ncni_plugin_dirs = [{}, \"{REFERENCE}\"]\n\
             network_config_dir = {}\n\
             [engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n\
             events_logfile_path = {}\ntmp_dir = {}\n",
            quoted("bin"),
            quoted("net.d"),
            quoted("tmp/events.log"),
            quoted("tmp"),
        );
        std::fs::write(self.path("containers.conf"), conf).unwrap();

        let ipam = self.path("ipam");
        let secnet = json!({"cniVersion": "1.0.0", "name": "secnet", "type": "bridge",
            "bridge": BRIDGES[1],
            "ipam": {"type": "host-local", "subnet": format!("{SECONDARY_V4}0/24"), "dataDir": ipam}});
        std::fs::write(
            self.path("manifests/secnet.yaml"),
            format!(
                "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
                 metadata: {{name: secnet, namespace: kube-system}}\nspec:\n  config: '{secnet}'\n"
            ),
        )
        .unwrap();
        // plexus's own conf in Multus form is the network's only plugin. It
        // and its cluster network declare ips/mac so that libcni injects
        // runtimeConfig for podman's static addresses.
        let caps = json!({"ips": true, "mac": true});
        let conflist = json!({"cniVersion": "1.0.0", "name": NETWORK, "plugins": [{
            "type": "plexus", "capabilities": caps,
            "cniDir": self.path("cache"), "confDir": self.path("confdir"),
            "binDir": REFERENCE, "manifestDir": self.path("manifests"),
            "defaultNetworks": ["secnet"],
            "delegates": [{"cniVersion": "1.0.0", "name": "podnet", "plugins": [{
                "type": "bridge", "bridge": BRIDGES[0], "isGateway": true, "capabilities": caps,
                "ipam": {"type": "host-local", "dataDir": ipam,
                         "ranges": [[{"subnet": format!("{CLUSTER_V4}0/24")}],
                                    [{"subnet": format!("{CLUSTER_V6}/64")}]],
                         "routes": [{"dst": "0.0.0.0/0"}]}}]}]}]});
        std::fs::write(
            self.path(&format!("net.d/{NETWORK}.conflist")),
            serde_json::to_vec_pretty(&conflist).unwrap(),
        )
        .unwrap();
    }

    /// A rootfs of static busybox, run with `--rootfs` (no image store, so
    /// nothing lands in /var/lib/containers).
    fn write_rootfs(&self) {
        let root = self.path("rootfs");
        for dir in ["bin", "etc", "proc", "sys", "dev", "tmp"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::copy(static_busybox().unwrap(), root.join("bin/busybox")).unwrap();
        for applet in APPLETS {
            std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
        }
    }

    /// `podman <args>` in the node namespace, bounded.
    pub fn podman(&self, args: &[&str]) -> Output {
        // Only the network namespace: `ip netns exec` would also remount
        // /sys, hiding the cgroup mounts runc needs.
        let mut cmd = bounded("nsenter");
        cmd.arg(format!("--net={NETNS_DIR}/{}", self.node));
        podman_in(&mut cmd, self.tmp.path()).args(args);
        cmd.output().unwrap()
    }

    /// `podman <args>` that must succeed; its stdout.
    pub fn podman_ok(&self, args: &[&str]) -> String {
        let out = self.podman(args);
        assert!(
            out.status.success(),
            "podman {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `podman run` of the busybox rootfs; `network` is the `--network` value.
    pub fn run(&self, extra: &[&str], network: &str, command: &[&str]) -> String {
        let rootfs = self.path("rootfs");
        let mut args = vec!["run"];
        args.extend_from_slice(extra);
        args.extend(["--network", network, "--rootfs", rootfs.to_str().unwrap()]);
        args.extend_from_slice(command);
        self.podman_ok(&args)
    }

    /// The container's address on `plexusnet` as podman recorded it from
    /// plexus's result.
    pub fn inspect_ip(&self, container: &str) -> String {
        let out = self.podman_ok(&["inspect", container]);
        let v: Value = serde_json::from_str(&out).unwrap();
        v[0]["NetworkSettings"]["Networks"][NETWORK]["IPAddress"]
            .as_str()
            .unwrap_or_else(|| panic!("no {NETWORK} address in {out}"))
            .to_string()
    }

    pub fn sandbox_key(&self, container: &str) -> String {
        let v: Value = serde_json::from_str(&self.podman_ok(&["inspect", container])).unwrap();
        v[0]["NetworkSettings"]["SandboxKey"]
            .as_str()
            .unwrap()
            .to_string()
    }

    pub fn node_links(&self) -> Vec<String> {
        let out = checked(
            bounded("ip").args(["-n", &self.node, "-j", "link", "show"]),
            "ip -j link show (node)",
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|l| l["ifname"].as_str().unwrap().to_string())
            .collect()
    }

    /// host-local's allocation files (one per address in use).
    /// host-local's layout: `dataDir/<network>/<address>`, next to its
    /// `lock` and `last_reserved_ip.<range>` files.
    pub fn ipam_allocations(&self) -> Vec<String> {
        let ipam = self.path("ipam");
        names_in(&ipam)
            .into_iter()
            .flat_map(|network| {
                names_in(&ipam.join(&network))
                    .into_iter()
                    .filter(|f| f != "lock" && !f.starts_with("last_reserved_ip"))
                    .map(move |f| format!("{network}/{f}"))
            })
            .collect()
    }

    /// plexus's records (`cniDir/<container>@<ifname>.json`).
    pub fn plexus_records(&self) -> Vec<String> {
        names_in(&self.path("cache"))
            .into_iter()
            .filter(|name| name != "sandboxes")
            .collect()
    }

    /// plexus's sandbox notes and locks (`sandboxes/` under its cniDir, a
    /// directory that stays, as the record directory does).
    pub fn plexus_sandbox_notes(&self) -> Vec<String> {
        names_in(&self.path("cache").join("sandboxes"))
            .into_iter()
            .collect()
    }

    /// libcni results cached by podman since this fixture started.
    pub fn new_libcni_results(&self) -> Vec<String> {
        Machine::now()
            .libcni_results
            .difference(&self.before.libcni_results)
            .cloned()
            .collect()
    }

    /// Runs `test` on a started podman, unless that skips; then nothing of
    /// its containers may be left ([`Podman::assert_clean`]).
    pub fn test(test: impl FnOnce(&Podman)) {
        let Some(podman) = Podman::start() else {
            return;
        };
        test(&podman);
        podman.assert_clean();
    }

    /// After every container is gone: no veth, allocation, plexus record,
    /// libcni result or container netns mount is left, and the machine's own
    /// namespace gained no link.
    pub fn assert_clean(&self) {
        let links = self.node_links();
        assert!(
            links
                .iter()
                .all(|l| l == "lo" || BRIDGES.contains(&l.as_str())),
            "veths left in the node namespace: {links:?}"
        );
        assert_eq!(self.ipam_allocations(), Vec::<String>::new(), "host-local");
        assert_eq!(self.plexus_records(), Vec::<String>::new(), "plexus cache");
        assert_eq!(
            self.plexus_sandbox_notes(),
            Vec::<String>::new(),
            "plexus sandbox notes"
        );
        let now = Machine::now();
        assert_eq!(
            now.libcni_results, self.before.libcni_results,
            "libcni cache"
        );
        assert_eq!(now.netns_mounts, self.before.netns_mounts, "{NETNS_DIR}");
        assert_eq!(
            now.root_links, self.before.root_links,
            "root namespace links"
        );
        assert_eq!(
            self.tmp_mounts(),
            Vec::<String>::new(),
            "mounts in the temp dir"
        );
    }

    fn tmp_mounts(&self) -> Vec<String> {
        let tmp = self.tmp.path().to_string_lossy().into_owned();
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&tmp))
            .map(String::from)
            .collect()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        // Also on failure: stop podman's containers (DEL through plexus),
        // then drop the node namespace and anything still mounted.
        let _ = self.podman(&["rm", "--all", "--force", "--time", "0"]);
        let _ = NetNs::delete_named(&self.node);
        for mount in self.tmp_mounts().iter().rev() {
            let _ = bounded("umount").args(["-l", mount]).status();
        }
    }
}

/// `ip -o addr` lines of busybox: the addresses (with prefix) on `ifname`.
pub fn addresses(ip_o_addr: &str, ifname: &str) -> Vec<String> {
    ip_o_addr
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, name, family, addr) = (f.next()?, f.next()?, f.next()?, f.next()?);
            (name == ifname && (family == "inet" || family == "inet6")).then(|| addr.to_string())
        })
        .filter(|a| !a.starts_with("fe80:"))
        .collect()
}

/// `ip -o link` lines of busybox: the MAC of `ifname` (`eth0@if12` matches eth0).
pub fn mac(ip_o_link: &str, ifname: &str) -> Option<String> {
    ip_o_link.lines().find_map(|l| {
        let name = l.split(": ").nth(1)?.split('@').next()?;
        if name != ifname {
            return None;
        }
        let after = l.split("link/ether ").nth(1)?;
        after.split_whitespace().next().map(String::from)
    })
}
