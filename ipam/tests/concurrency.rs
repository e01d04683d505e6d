//! Concurrent host-local allocations never hand out one address twice:
//! threads in one process and separate processes all serialise on the
//! network's flocked `lock` file, and reservation is exclusive even without
//! it. Bounded: fixed numbers of workers and calls, each call bounded by the
//! lock timeout.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::*;
use plexus_ipam::HostLocal;
use serde_json::json;

/// Every address file names exactly the attachment that got it.
fn assert_disk_matches(data_dir: &std::path::Path, got: &[(String, String)]) {
    let on_disk = allocations(data_dir);
    assert_eq!(on_disk.len(), got.len(), "{on_disk:?}");
    for (id, ip) in got {
        assert_eq!(
            on_disk.get(ip).map(String::as_str),
            Some(format!("{id}\r\neth0").as_str()),
            "{ip}"
        );
    }
}

/// `n` threads released at once by a barrier, each running `work` with its
/// number; their results in thread order.
fn race<T: Send + 'static>(n: usize, work: impl Fn(usize) -> T + Send + Sync + 'static) -> Vec<T> {
    let work = Arc::new(work);
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|t| {
            let (work, barrier) = (work.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                work(t)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn threads_never_share_an_address() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 12;
    let (tmp, c) = host_local_net("1.1.0", json!({"subnet": "10.20.0.0/24"}));
    let got: Vec<(String, String)> = race(THREADS, move |t| {
        let p = HostLocal::new().with_lock_timeout(Duration::from_secs(30));
        (0..PER_THREAD)
            .map(|i| {
                let id = format!("t{t}-{i}");
                let ip = ip_of(&add(&p, &c, &id, "eth0").unwrap());
                (id, ip)
            })
            .collect::<Vec<_>>()
    })
    .concat();
    let unique: BTreeSet<&String> = got.iter().map(|(_, ip)| ip).collect();
    assert_eq!(unique.len(), THREADS * PER_THREAD, "duplicates in {got:?}");
    assert_disk_matches(tmp.path(), &got);
    // Round-robin from one shared last_reserved_ip: exactly .2 through .97.
    let expected: BTreeSet<String> = (2..2 + THREADS * PER_THREAD)
        .map(|i| format!("10.20.0.{i}"))
        .collect();
    assert_eq!(
        unique.into_iter().cloned().collect::<BTreeSet<_>>(),
        expected
    );
}

#[test]
fn threads_racing_for_the_last_addresses() {
    // More callers than addresses: exactly as many succeed as there are
    // addresses, the others fail with "no IP addresses available".
    const THREADS: usize = 10;
    let (tmp, c) = host_local_net("1.1.0", json!({"subnet": "10.21.0.0/29"}));
    let results = race(THREADS, move |t| {
        let id = format!("t{t}");
        add(&HostLocal::new(), &c, &id, "eth0").map(|r| (id, ip_of(&r)))
    });
    let got: Vec<(String, String)> = results
        .iter()
        .filter_map(|r| r.as_ref().ok().cloned())
        .collect();
    assert_eq!(got.len(), 5, "{results:?}");
    for e in results.iter().filter_map(|r| r.as_ref().err()) {
        assert_eq!(e.code, plexus_cni::ErrorCode::Plugin(111), "{e:?}");
    }
    assert_disk_matches(tmp.path(), &got);
}

#[test]
fn processes_never_share_an_address() {
    // Separate processes exec'd as a runtime execs a plugin, all at once.
    const PROCS: usize = 24;
    let (tmp, c) = host_local_net(
        "1.0.0",
        json!({"ranges": [[{"subnet": "10.22.0.0/24"}], [{"subnet": "fd22::/64"}]]}),
    );
    let bin = plexus_bin();
    let children: Vec<_> = (0..PROCS)
        .map(|i| {
            (
                format!("p{i}"),
                spawn(&bin, "ADD", &format!("p{i}"), "eth0", "", &c),
            )
        })
        .collect();
    let mut v4 = Vec::new();
    let mut v6 = BTreeSet::new();
    for (id, child) in children {
        let out = finish(child);
        out.ok();
        let v = out.json();
        assert_eq!(v["cniVersion"], "1.0.0");
        let ips = v["ips"].as_array().unwrap();
        assert_eq!(ips.len(), 2, "{v}");
        v4.push((
            id,
            ips[0]["address"]
                .as_str()
                .unwrap()
                .trim_end_matches("/24")
                .to_string(),
        ));
        v6.insert(ips[1]["address"].as_str().unwrap().to_string());
    }
    let unique: BTreeSet<&String> = v4.iter().map(|(_, ip)| ip).collect();
    assert_eq!(unique.len(), PROCS, "{v4:?}");
    assert_eq!(v6.len(), PROCS, "{v6:?}");
    assert_eq!(allocations(tmp.path()).len(), 2 * PROCS);
    // And DEL from many processes at once releases everything.
    let children: Vec<_> = (0..PROCS)
        .map(|i| spawn(&bin, "DEL", &format!("p{i}"), "eth0", "", &c))
        .collect();
    for child in children {
        let out = finish(child);
        assert_eq!((out.code, out.stdout.as_str()), (0, ""), "{out:?}");
    }
    assert!(allocations(tmp.path()).is_empty());
}

#[test]
fn a_held_lock_makes_callers_wait_then_fail_with_code_11() {
    let (tmp, c) = host_local_net("1.1.0", json!({"subnet": "10.23.0.0/24"}));
    let lock = hold_lock(tmp.path());
    let p = HostLocal::new().with_lock_timeout(Duration::from_millis(200));
    let t0 = std::time::Instant::now();
    let e = assert_err(
        add(&p, &c, "a", "eth0"),
        plexus_cni::ErrorCode::TryAgainLater,
        &tmp.path().join(NET).join("lock").display().to_string(),
    );
    assert!(t0.elapsed() >= Duration::from_millis(200));
    assert!(
        e.details
            .contains("still locked by another process after 200 ms"),
        "{}",
        e.details
    );
    assert_err(
        del(&p, &c, "a", "eth0"),
        plexus_cni::ErrorCode::TryAgainLater,
        "",
    );
    assert!(allocations(tmp.path()).is_empty());
    // Released while a caller waits: it proceeds.
    let waiter = {
        let c = c.clone();
        thread::spawn(move || {
            add(
                &HostLocal::new().with_lock_timeout(Duration::from_secs(10)),
                &c,
                "a",
                "eth0",
            )
        })
    };
    thread::sleep(Duration::from_millis(100));
    drop(lock);
    assert_eq!(ip_of(&waiter.join().unwrap().unwrap()), "10.23.0.2");
}
