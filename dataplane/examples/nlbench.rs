//! Measures the hot-path costs of the data plane (run as root, release mode):
//! `cargo run --release -p plexus-dataplane --example nlbench [ROUNDS]`.
//! Works only in throw-away namespaces ("node" and "pod"), never in the root
//! namespace. Each figure is the median of ROUNDS repetitions of one step;
//! creations and deletions are measured in separate passes because a deletion
//! leaves kernel work behind (RCU, workqueues) that slows whatever follows.

use std::time::{Duration, Instant};

use plexus_dataplane::netlink::VethSpec;
use plexus_dataplane::{NetNs, Netlink};

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
            ..VethSpec::new(format!("vb{i}"), format!("e{i}"))
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
        bench(rounds, |i| pod_nl.link_by_name(&format!("e{i}")).unwrap()).0,
    );
    report(
        "del_link (veth pair)",
        bench(rounds, |i| node_nl.del_link(links[i].index).unwrap()).0,
    );
}
