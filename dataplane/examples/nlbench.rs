//! Measures the hot-path costs of the data plane (run as root, release mode):
//! `cargo run --release -p plexus-dataplane --example nlbench [ROUNDS]`.
//! Works only in throw-away namespaces ("node" and "pod"), never in the root
//! namespace. Each figure is the median of ROUNDS repetitions of one step;
//! creations and deletions are measured in separate passes because a deletion
//! leaves kernel work behind (RCU, workqueues) that slows whatever follows.

use std::time::{Duration, Instant};

use plexus_dataplane::netlink::{AddressOptions, BridgeSpec, Route, VethSpec};
use plexus_dataplane::sysctl::{self, SysctlKey};
use plexus_dataplane::{NetNs, Netlink};

/// An interface name this benchmark knows is valid.
fn name(name: impl Into<String>) -> plexus_cni::names::IfName {
    plexus_cni::names::IfName::new(name).unwrap()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn bench<R>(rounds: usize, mut f: impl FnMut(usize) -> R) -> (Duration, Vec<R>) {
    let mut times = Vec::with_capacity(rounds);
    let mut out = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let t = Instant::now();
        out.push(f(i));
        times.push(t.elapsed());
    }
    (median(times), out)
}

struct Named(String);
impl Drop for Named {
    fn drop(&mut self) {
        let _ = NetNs::delete_named(&self.0);
    }
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let pid = std::process::id();
    let (node_name, pod_name) = (format!("pxb-{pid}-node"), format!("pxb-{pid}-pod"));
    let node = NetNs::create_named(&node_name).expect("create node ns");
    let _g1 = Named(node_name.clone());
    let pod = NetNs::create_named(&pod_name).expect("create pod ns");
    let _g2 = Named(pod_name.clone());
    let node_nl = Netlink::open(&node).unwrap();
    let pod_nl = Netlink::open(&pod).unwrap();

    let report = |what: &str, d: Duration| println!("{what:<48} median {d:>10.1?}");
    println!("rounds: {rounds}");
    report(
        "thread spawn+join (no setns)",
        bench(rounds, |_| {
            std::thread::scope(|s| s.spawn(|| ()).join().unwrap())
        })
        .0,
    );
    report(
        "NetNs::open_named",
        bench(rounds, |_| NetNs::open_named(&pod_name).unwrap()).0,
    );
    report(
        "NetNs::run (thread + setns)",
        bench(rounds, |_| pod.run(|| ()).unwrap()).0,
    );
    report(
        "Netlink::current()",
        bench(rounds, |_| Netlink::current().unwrap()).0,
    );
    report(
        "Netlink::open(ns)",
        bench(rounds, |_| Netlink::open(&pod).unwrap()).0,
    );
    let (d, links) = bench(rounds, |i| {
        let spec = VethSpec {
            peer_netns: Some(&pod),
            mtu: Some(1400),
            up: true,
            ..VethSpec::new(name(format!("vb{i}")), name(format!("e{i}")))
        };
        node_nl.create_veth(&spec).unwrap()
    });
    report("create_veth (peer in other ns, mtu, up)", d);
    report(
        "link_by_index",
        bench(rounds, |i| node_nl.link_by_index(links[i].index).unwrap()).0,
    );
    report(
        "link_by_name (in pod ns)",
        bench(rounds, |i| {
            pod_nl.link_by_name(&name(format!("e{i}"))).unwrap()
        })
        .0,
    );
    report(
        "del_link (veth pair)",
        bench(rounds, |i| node_nl.del_link(links[i].index).unwrap()).0,
    );

    // The kernel work of a bridge-plugin ADD, as a driver will do it, one
    // fresh pod namespace per round (namespace creation not timed): open the
    // pod handle, veth (host end enslaved and up, peer in the pod), peer up,
    // address, default route, one sysctl.
    let br = node_nl
        .create_bridge(&BridgeSpec {
            up: true,
            ..BridgeSpec::new(name("cni0"))
        })
        .unwrap();
    node_nl
        .add_address(
            br.index,
            "10.88.0.1/16".parse().unwrap(),
            AddressOptions::default(),
        )
        .unwrap();
    let add_rounds = rounds.min(50);
    let pods: Vec<(Named, NetNs)> = (0..add_rounds)
        .map(|i| {
            let name = format!("pxb-{pid}-p{i}");
            let ns = NetNs::create_named(&name).unwrap();
            (Named(name), ns)
        })
        .collect();
    let key = SysctlKey::for_interface("net.ipv4.conf.IFNAME.arp_notify", &name("eth0")).unwrap();
    let (d, _) = bench(add_rounds, |i| {
        let pod = &pods[i].1;
        let pod_nl = Netlink::open(pod).unwrap();
        node_nl
            .create_veth(&VethSpec {
                peer_netns: Some(pod),
                master: Some(br.index),
                mtu: Some(1500),
                up: true,
                ..VethSpec::new(name(format!("veth{i}")), name("eth0"))
            })
            .unwrap();
        let eth0 = pod_nl.link_by_name(&name("eth0")).unwrap().unwrap();
        pod_nl.set_up(eth0.index).unwrap();
        let addr = format!("10.88.{}.{}/16", i / 200, i % 200 + 2)
            .parse()
            .unwrap();
        pod_nl
            .add_address(eth0.index, addr, AddressOptions::default())
            .unwrap();
        pod_nl
            .add_route(&Route::default_via("10.88.0.1".parse().unwrap()).dev(eth0.index))
            .unwrap();
        sysctl::write(pod, &key, "1").unwrap();
    });
    report("bridge-style ADD kernel work (per pod)", d);
    // SAFETY: getrusage only fills the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    println!(
        "{:<48} {:>10} KiB (whole benchmark)",
        "peak RSS", ru.ru_maxrss
    );
}
