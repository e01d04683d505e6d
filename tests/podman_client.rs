//! podman 4.3 with its CNI backend as a real runtime, the `plexus` binary as
//! the only plugin of its network: libcni execs plexus with podman's
//! `CNI_ARGS` (`IgnoreUnknown=1;K8S_POD_NAME=<container name>`, no pod
//! namespace, `IP`/`MAC` for a single static address), injects runtimeConfig
//! for the capabilities plexus declares, and passes its cached result as
//! prevResult on DEL (cni-SPEC §3). Without pod information plexus attaches
//! what every pod gets: its cluster network (`delegates[0]`, bridge +
//! host-local, eth0) and `defaultNetworks` (a NAD from `manifestDir`, net1),
//! multi-net-spec §6.2. See podman_support for the sandbox.

mod podman_support;

use podman_support::{
    addresses, mac, Podman, CLUSTER_GATEWAY, CLUSTER_V4, CLUSTER_V6, NETWORK, SECONDARY_V4,
};

fn sorted(names: impl Iterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = names.collect();
    v.sort();
    v
}

fn v4(addrs: &[String]) -> Vec<&String> {
    addrs.iter().filter(|a| !a.contains(':')).collect()
}

#[test]
fn run_gets_cluster_and_default_network_addresses() {
    Podman::test(|podman| {
        let out = podman.run(
            &["--rm"],
            NETWORK,
            &["sh", "-c", "ip -o addr; echo ---; ip route"],
        );
        let (addrs, routes) = out.split_once("---").unwrap();
        // §6.2: the cluster network on the runtime's CNI_IFNAME, dual-stack.
        let eth0 = addresses(addrs, "eth0");
        assert_eq!(eth0.len(), 2, "{out}");
        assert!(
            eth0[0].starts_with(CLUSTER_V4) && eth0[0].ends_with("/24"),
            "{out}"
        );
        assert!(
            eth0[1].starts_with(CLUSTER_V6) && eth0[1].ends_with("/64"),
            "{out}"
        );
        // defaultNetworks: attached to every pod after the cluster network.
        let net1 = addresses(addrs, "net1");
        assert_eq!(net1.len(), 1, "{out}");
        assert!(net1[0].starts_with(SECONDARY_V4), "{out}");
        assert!(
            routes
                .lines()
                .any(|r| r.starts_with(&format!("default via {CLUSTER_GATEWAY} dev eth0"))),
            "{out}"
        );
        // The plugin's host side is in the node namespace.
        let links = podman.node_links();
        for bridge in podman_support::BRIDGES {
            assert!(links.iter().any(|l| l == bridge), "{links:?}");
        }
    });
}

#[test]
fn two_containers_ping_each_other_on_both_networks() {
    Podman::test(|podman| {
        podman.run(&["-d", "--name", "server"], NETWORK, &["sleep", "30"]);
        let inside = podman.podman_ok(&["exec", "server", "ip", "-o", "addr"]);
        // podman's record comes from plexus's result: the cluster network's.
        let ip = podman.inspect_ip("server");
        assert_eq!(
            v4(&addresses(&inside, "eth0")),
            [&format!("{ip}/24")],
            "{inside}"
        );
        let secondary = addresses(&inside, "net1");
        let secondary_ip = secondary[0].split('/').next().unwrap();
        for target in [ip.as_str(), secondary_ip] {
            let out = podman.run(&["--rm"], NETWORK, &["ping", "-c1", "-W2", target]);
            assert!(out.contains("1 packets received"), "{target}: {out}");
        }
        podman.podman_ok(&["rm", "--force", "--time", "0", "server"]);
    });
}

#[test]
fn static_ip_and_mac_reach_the_cluster_network_only() {
    Podman::test(|podman| {
        // One address: podman sends CNI_ARGS IP= and MAC=.
        let wanted_mac = "02:42:0a:58:07:32";
        let out = podman.run(
            &["--rm"],
            &format!("{NETWORK}:ip={CLUSTER_V4}50,mac={wanted_mac}"),
            &["sh", "-c", "ip -o addr; ip -o link"],
        );
        assert_eq!(
            v4(&addresses(&out, "eth0")),
            [&format!("{CLUSTER_V4}50/24")],
            "{out}"
        );
        assert_eq!(mac(&out, "eth0").as_deref(), Some(wanted_mac), "{out}");
        // multi-net-spec §7.5: net1 keeps its own address and MAC.
        let net1 = addresses(&out, "net1");
        assert!(
            net1.len() == 1 && net1[0].starts_with(SECONDARY_V4),
            "{out}"
        );
        assert_ne!(mac(&out, "net1").as_deref(), Some(wanted_mac), "{out}");

        // Two addresses: podman sends runtimeConfig {"ips": [...]} (capability
        // `ips`, cni-CONVENTIONS), which plexus passes to its cluster network.
        let out = podman.run(
            &["--rm"],
            &format!("{NETWORK}:ip={CLUSTER_V4}51,ip={CLUSTER_V6}51"),
            &["ip", "-o", "addr"],
        );
        assert_eq!(
            addresses(&out, "eth0"),
            [format!("{CLUSTER_V4}51/24"), format!("{CLUSTER_V6}51/64")],
            "{out}"
        );
        assert!(
            addresses(&out, "net1")[0].starts_with(SECONDARY_V4),
            "{out}"
        );
    });
}

#[test]
fn del_on_rm_and_on_exit_leaves_nothing() {
    Podman::test(|podman| {
        let long = podman.run(&["-d", "--name", "long"], NETWORK, &["sleep", "30"]);
        // `short` exits when told: the rootfs (and so its /tmp) is a host directory.
        let exit_flag = podman.path("rootfs/tmp/exit-now");
        let short = podman.run(
            &["-d", "--name", "short"],
            NETWORK,
            &[
                "sh",
                "-c",
                "i=0; while [ ! -e /tmp/exit-now ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done",
            ],
        );
        let (long, short) = (long.trim(), short.trim());
        let netns = podman.sandbox_key("long");
        assert!(std::path::Path::new(&netns).exists(), "{netns}");
        // While both run: a veth per interface, an address per network and
        // family, plexus's record and libcni's cached result per container.
        let veths = || podman.node_links().len() - 1 - podman_support::BRIDGES.len();
        assert_eq!(veths(), 4, "{:?}", podman.node_links());
        assert_eq!(
            podman.ipam_allocations().len(),
            6,
            "{:?}",
            podman.ipam_allocations()
        );
        // plexus's record and libcni's result, per container (eth0).
        let records = |ids: &[&str]| sorted(ids.iter().map(|id| format!("{id}@eth0.json")));
        let results = |ids: &[&str]| sorted(ids.iter().map(|id| format!("{NETWORK}-{id}-eth0")));
        assert_eq!(podman.plexus_records(), records(&[long, short]));
        assert_eq!(podman.new_libcni_results(), results(&[long, short]));

        // A container that exits: podman's cleanup sends DEL (with prevResult).
        std::fs::write(&exit_flag, "").unwrap();
        assert_eq!(podman.podman_ok(&["wait", "short"]).trim(), "0");
        let mut left = usize::MAX;
        for _ in 0..50 {
            left = veths();
            if left == 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert_eq!(left, 2, "{:?}", podman.node_links());
        assert_eq!(
            podman.ipam_allocations().len(),
            3,
            "{:?}",
            podman.ipam_allocations()
        );
        assert_eq!(podman.plexus_records(), records(&[long]));
        assert_eq!(podman.new_libcni_results(), results(&[long]));
        podman.podman_ok(&["rm", "short"]);

        // podman rm -f: DEL of a running container.
        podman.podman_ok(&["rm", "--force", "--time", "0", "long"]);
        assert!(
            !std::path::Path::new(&netns).exists(),
            "{netns} left mounted"
        );
    });
}

/// `podman restart` and `stop`/`start` reuse the container ID: DEL, then ADD
/// again (cni-SPEC §3: ADD after DEL for the same attachment).
#[test]
fn restart_and_stop_start_reattach_under_the_same_container_id() {
    Podman::test(|podman| {
        let id = podman.run(&["-d", "--name", "r"], NETWORK, &["sleep", "30"]);
        let record = vec![format!("{}@eth0.json", id.trim())];
        let attached = |when: &str| {
            let inside = podman.podman_ok(&["exec", "r", "ip", "-o", "addr"]);
            assert_eq!(addresses(&inside, "eth0").len(), 2, "{when}: {inside}");
            assert_eq!(addresses(&inside, "net1").len(), 1, "{when}: {inside}");
            // Exactly this incarnation's addresses: the previous ones were released.
            assert_eq!(
                podman.ipam_allocations().len(),
                3,
                "{when}: {:?}",
                podman.ipam_allocations()
            );
            assert_eq!(podman.plexus_records(), record, "{when}");
        };
        attached("run");
        podman.podman_ok(&["restart", "--time", "0", "r"]);
        attached("restart");
        podman.podman_ok(&["stop", "--time", "0", "r"]);
        // A stopped container holds no network resources.
        assert_eq!(
            podman.node_links().len(),
            1 + podman_support::BRIDGES.len(),
            "{:?}",
            podman.node_links()
        );
        assert!(
            podman.ipam_allocations().is_empty(),
            "{:?}",
            podman.ipam_allocations()
        );
        assert!(podman.plexus_records().is_empty());
        assert!(podman.new_libcni_results().is_empty());
        podman.podman_ok(&["start", "r"]);
        attached("start");
        podman.podman_ok(&["rm", "--force", "--time", "0", "r"]);
    });
}
