//! Boot storms through the daemon: 200 pods at once get distinct addresses
//! within the memory bound (issue 12), and a daemon SIGKILLed mid-storm
//! leaks nothing once the runtime DELs.

use std::sync::Arc;

use super::*;

/// The daemon's memory bound in a boot storm (issue 12).
const RSS_LIMIT_KB: u64 = 64 * 1024;

/// Run `calls` at once, one thread each; their outputs in order.
fn all_at_once<F>(calls: usize, call: F) -> Vec<Output>
where
    F: Fn(usize) -> Output + Send + Sync + 'static,
{
    let call = Arc::new(call);
    let threads: Vec<_> = (0..calls)
        .map(|i| {
            let call = call.clone();
            std::thread::spawn(move || call(i))
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// `command` for every pod `names[i]` in `netns[i]` at once, through the
/// daemon; each must succeed. Their outputs in order.
fn storm_succeeds(
    w: &Arc<World>,
    command: &'static str,
    names: &[String],
    netns: &[String],
) -> Vec<Output> {
    let world = w.clone();
    let (n, ns) = (names.to_vec(), netns.to_vec());
    let outs = all_at_once(names.len(), move |i| {
        world.call(command, &n[i], &ns[i], &world.conf)
    });
    for (i, out) in outs.iter().enumerate() {
        assert_ok(&format!("{command} {}", names[i]), out);
    }
    outs
}

/// `pods` pod namespaces and pod objects on the node, named `<tag>-<i>`.
fn storm_pods(w: &mut World, tag: &str, pods: usize) -> (Vec<String>, Vec<String>) {
    let names: Vec<String> = (0..pods).map(|i| format!("{tag}-{i}")).collect();
    let netns: Vec<String> = names.iter().map(|n| w.kube.namespaces.add(n)).collect();
    w.pods(&names, &w.kube.node.clone(), "macnet");
    (names, netns)
}

#[test]
fn a_boot_storm_of_200_pods_gets_distinct_addresses_within_the_memory_bound() {
    const PODS: usize = 200;
    let Some(mut w) = world("storm") else { return };
    let (names, netns) = storm_pods(&mut w, "s", PODS);
    let daemon = w.daemon();
    let w = Arc::new(w);
    let before = w.kube.requests().len();

    let added = storm_succeeds(&w, "ADD", &names, &netns);
    w.writes_delivered(&daemon);
    // No address twice, on the cluster network (the results) or on macnet
    // (the network-status the daemon wrote).
    let mut cluster: Vec<String> = added.iter().map(cluster_ip).collect();
    cluster.sort();
    cluster.dedup();
    assert_eq!(cluster.len(), PODS);
    let statuses = w.network_statuses();
    assert_eq!(statuses.len(), PODS);
    let mut macnet: Vec<String> = statuses
        .iter()
        .map(|(_, s)| s[1]["ips"][0].as_str().unwrap().to_string())
        .collect();
    macnet.sort();
    macnet.dedup();
    assert_eq!(macnet.len(), PODS);

    // Warm: no GET per ADD at all, one PATCH each.
    let add = w.kube.requests()[before..].to_vec();
    assert_eq!(count(&add, "get", "pods", ""), 0);
    assert_eq!(count(&add, "get", "network-attachment-definitions", ""), 0);
    assert_eq!(count(&add, "patch", "pods", "status"), PODS);

    storm_succeeds(&w, "DEL", &names, &netns);
    let peak = daemon.peak_rss_kb();
    eprintln!(
        "daemon peak RSS over {PODS} ADDs and DELs at once: {} KiB",
        peak
    );
    assert!(peak < RSS_LIMIT_KB, "peak RSS {peak} KiB");
    w.assert_nothing_left(&netns);
}

#[test]
fn a_daemon_killed_mid_storm_leaks_nothing_once_the_runtime_deletes() {
    const PODS: usize = 60;
    let Some(mut w) = world("restart") else {
        return;
    };
    let (names, netns) = storm_pods(&mut w, "r", PODS);
    let mut daemon = w.daemon();
    let w = Arc::new(w);

    let world = w.clone();
    let (n, ns) = (names.clone(), netns.clone());
    let storm = std::thread::spawn(move || {
        all_at_once(PODS, move |i| {
            // Spread over the kill and the restart.
            std::thread::sleep(Duration::from_millis(20 * i as u64));
            world.call("ADD", &n[i], &ns[i], &world.conf)
        })
    });
    // SIGKILL while calls are in flight, and a new daemon on the socket.
    let deadline = Instant::now() + Duration::from_secs(30);
    while w.metric("plexus_cni_calls_total{command=\"ADD\",result=\"ok\"}") < 5.0
        || w.metric("plexus_cni_calls_in_flight") < 1.0
    {
        assert!(
            Instant::now() < deadline,
            "no ADD finished: {}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    daemon.kill();
    let _restarted = w.daemon();
    let added = storm.join().unwrap();

    // Each ADD succeeded or failed with a CNI error; a lost one says so.
    let mut lost = 0;
    for (i, out) in added.iter().enumerate() {
        if !out.status.success() {
            let e = cni_error(out);
            assert!(e["code"] == 11 || e["code"] == 5, "{}: {e}", names[i]);
            lost += 1;
        }
    }
    eprintln!("{lost} of {PODS} ADDs lost to the kill");
    // The runtime DELs every sandbox it set up (failed ADDs included).
    storm_succeeds(&w, "DEL", &names, &netns);
    w.assert_nothing_left(&netns);
}
