//! Thin mode (issue 26): the runtime's exec of plexus serves the call itself
//! (no `daemonSocket`), and the daemon runs beside it, as deploy/ with
//! `testkit/node-deploy --thin` runs it. The plugin process notes the
//! sandbox it ADDed under `cniDir`/sandboxes, and holds the sandbox's lock
//! there for each call, as the daemon's hot-plug does: the daemon hot-plugs
//! the pods it added, and its DEL racing a hot-plug leaks nothing.

use super::*;

impl World {
    /// `slownet`'s conf (`pxslow`, which marks its start in binDir and
    /// sleeps 2 s on ADD, then macvlan on uplink0 with its own host-local),
    /// and the binDir with pxslow.
    fn slow_chain(&self) -> (Value, PathBuf) {
        let bin = self.kube.tmp.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let slow = bin.join("pxslow");
        executable(
            &slow,
            "#!/usr/bin/python3\nimport json, os, sys, time\n\
             conf = json.load(sys.stdin)\n\
             if os.environ.get('CNI_COMMAND') == 'ADD':\n\
             \x20   open(os.path.join(os.path.dirname(sys.argv[0]), 'started'), 'w').close()\n\
             \x20   time.sleep(2)\n\
             \x20   print(json.dumps({'cniVersion': conf['cniVersion']}))\n",
        );
        let conf = json!({"cniVersion": "1.0.0", "name": "slownet", "plugins": [
            {"type": "pxslow"},
            {"type": "macvlan", "master": "uplink0",
             "ipam": host_local(self.kube.tmp.path(), "10.22.0.0/16", "slow")}]});
        (conf, bin)
    }

    /// Where plugin processes note sandboxes and take their locks.
    fn shared_sandboxes(&self) -> Vec<String> {
        let mut files = files_in(&self.kube.tmp.path().join("cache/sandboxes"));
        files.sort();
        files
    }
}

#[test]
fn pods_a_plugin_process_added_are_hot_plugged_and_its_del_racing_a_hotplug_leaks_nothing() {
    let Some(mut w) = world("hpthin") else {
        return;
    };
    let pod_ns = w.pod_here("p1", "macnet@net1");
    // The thin conf (no `daemonSocket`: every call runs in the plugin
    // process), with the binDir of slownet's slow plugin (below).
    let (slow_conf, bin) = w.slow_chain();
    let thin = w.conf_with(json!({"daemonSocket": null, "binDir": bin}));
    w.kube.nad("slownet", &slow_conf);
    // ADDed with no daemon running at all; the daemon started later finds it.
    assert_ok("ADD", &w.call("ADD", "p1", &pod_ns, &thin));
    assert_eq!(w.shared_sandboxes(), ["c-p1.json", "c-p1.lock"]);
    let cni_dir = w.kube.tmp.path().join("cache");
    let daemon = w.daemon_with(&["--cni-dir", cni_dir.to_str().unwrap()]);

    w.annotate("p1", "macnet@net1,macnet");
    within_30s("net2 attached", &daemon, || {
        sorted_links(&pod_ns) == ["eth0", "lo", "net1", "net2"] && w.status_of("p1").len() == 3
    });
    within_30s("AddedInterface", &daemon, || {
        w.has_event("p1", "Normal", "AddedInterface", "Add net2 [")
    });
    // A CHECK by a plugin process takes the same lock, and leaves the note.
    assert_ok("CHECK", &w.call("CHECK", "p1", &pod_ns, &thin));
    assert_eq!(w.shared_sandboxes(), ["c-p1.json", "c-p1.lock"]);

    // The plugin process's DEL racing a hot-plug in the middle of a chain
    // (`slownet`: a plugin exec'd from binDir that takes 2 s to ADD, then
    // macvlan): it waits for the daemon's pass to end (the lock), then DELs
    // every attachment, hot-plugged or not; the note and the lock leave
    // with it. Unserialized, the rest of the chain would run after the DEL:
    // a leaked link, address and record.
    w.annotate("p1", "macnet@net1,macnet@net2,slownet@net3");
    within_30s("slownet's chain started", &daemon, || {
        bin.join("started").exists()
    });
    let started = Instant::now();
    assert_ok("DEL", &w.call("DEL", "p1", &pod_ns, &thin));
    let waited = started.elapsed();
    eprintln!("the plugin's DEL took {waited:?}");
    assert!(
        waited > Duration::from_millis(500),
        "the DEL did not wait: {waited:?}"
    );
    assert_eq!(link_names(&pod_ns), ["lo"]);
    // A pass woken after the DEL finds no sandbox, and makes no lock.
    w.annotate("p1", "macnet@net1");
    std::thread::sleep(Duration::from_millis(500));
    w.assert_nothing_left(std::slice::from_ref(&pod_ns));
    assert_eq!(w.macnet_leases(), 0);
    assert!(
        w.shared_sandboxes().is_empty(),
        "{:?}",
        w.shared_sandboxes()
    );
    // DEL is idempotent, also for the lock.
    assert_ok("DEL", &w.call("DEL", "p1", &pod_ns, &thin));
    assert!(
        w.shared_sandboxes().is_empty(),
        "{:?}",
        w.shared_sandboxes()
    );
    drop(daemon);
}
