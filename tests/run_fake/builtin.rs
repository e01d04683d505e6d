//! Built-in (in-process) plugins mixed with exec'd ones in one chain: the
//! result flowing between them, deferred syncs that must finish before ADD
//! succeeds, and a built-in ADD that undid its own work.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use plexus::cni::result::CniResult;
use plexus::cni::skel::{Plugin, Request};

use super::*;

/// An in-process plugin that adds an address to its prevResult and logs
/// its calls into the fakes' log.
struct Mem {
    log: Arc<Fakes>,
}

impl Plugin for Mem {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        self.log.log_builtin("mem", "ADD", &req.config);
        let mut r = req.prev_result.clone().unwrap_or_default();
        let extra = CniResult::from_value(&json!({"cniVersion": "1.0.0",
            "ips": [{"address": "10.9.9.9/32"}]}))
        .unwrap();
        r.ips.extend(extra.ips);
        Ok(r)
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        self.log.log_builtin("mem", "DEL", &req.config);
        Ok(())
    }
    fn check(&self, req: &Request) -> Result<(), CniError> {
        self.log.log_builtin("mem", "CHECK", &req.config);
        Ok(())
    }
}

#[test]
fn built_in_and_exec_plugins_mix_in_one_chain() {
    // One trait for both: prevResult flows exec → built-in → exec.
    let f = Arc::new(Fakes::new(&["p1", "p2"]));
    answer_results(&f, &[("p1", 1, "eth0"), ("p2", 2, "eth0")]);
    let r1 = result_json("1.0.0", 1, "eth0");
    let log = Arc::clone(&f);
    let registry = Registry::new().with_builtin("mem", move |_, _| {
        Box::new(Mem {
            log: Arc::clone(&log),
        })
    });
    let (ex, ctx) = executor_ctx(&f, &registry, "ctr1");
    let a = cluster(&["p1", "mem", "p2"]);
    ex.add(&plan(vec![a.clone()]), &ctx).unwrap();
    assert_eq!(f.calls(), ["p1 ADD", "mem ADD", "p2 ADD"]);
    assert_eq!(
        f.call(1).stdin,
        with_prev(&a.plugins[1], Some(prev_in(&r1, CniVersion::V1_0_0)))
    );
    let p2_add = f.call(2);
    let ips: Vec<&str> = p2_add.stdin["prevResult"]["ips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ip| ip["address"].as_str().unwrap())
        .collect();
    assert_eq!(ips, ["10.0.1.2/24", "10.9.9.9/32"]);
    ex.del(&ctx, None).unwrap();
    assert_eq!(
        f.calls()[3..],
        ["p2 DEL", "mem DEL", "p1 DEL"].map(String::from)
    );
}

/// An in-process plugin whose ADD defers a slow sync (as host-local defers
/// its fsyncs), failing it when asked to.
struct Syncing {
    log: Arc<Fakes>,
    fail: bool,
    synced: Arc<AtomicBool>,
}

impl Plugin for Syncing {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        self.log.log_builtin("syncing", "ADD", &req.config);
        let (fail, synced) = (self.fail, Arc::clone(&self.synced));
        plexus::cni::durable::sync("allocation file", move || {
            std::thread::sleep(Duration::from_millis(50));
            synced.store(true, Ordering::SeqCst);
            if fail {
                return Err(std::io::Error::other("EIO"));
            }
            Ok(())
        })?;
        Ok(req.prev_result.clone().unwrap_or_default())
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        self.log.log_builtin("syncing", "DEL", &req.config);
        Ok(())
    }
}

#[test]
fn add_reports_success_only_once_deferred_syncs_are_done() {
    for fail in [false, true] {
        let f = Arc::new(fakes_answering(&[("p1", 1, "eth0")]));
        let synced = Arc::new(AtomicBool::new(false));
        let (log, flag) = (Arc::clone(&f), Arc::clone(&synced));
        let registry = Registry::new().with_builtin("syncing", move |_, _| {
            Box::new(Syncing {
                log: Arc::clone(&log),
                fail,
                synced: Arc::clone(&flag),
            })
        });
        let (ex, ctx) = executor_ctx(&f, &registry, "ctr1");
        let outcome = ex.add(&plan(vec![cluster(&["p1", "syncing"])]), &ctx);
        assert!(
            synced.load(Ordering::SeqCst),
            "ADD returned before the sync finished"
        );
        if !fail {
            outcome.unwrap();
            continue;
        }
        // A sync that failed means nothing is durably attached: the whole
        // ADD is rolled back and reported failed, naming what did not sync.
        let e = outcome.unwrap_err().answer();
        assert!(e.details.contains("allocation file"), "{e}");
        assert_eq!(
            f.calls(),
            ["p1 ADD", "syncing ADD", "syncing DEL", "p1 DEL"]
        );
        assert!(!f.record_path("ctr1").exists());
    }
}

/// An in-process plugin whose ADD finds its interface name taken and fails
/// having undone its own work (as the built-in drivers do).
struct InTheWay {
    log: Arc<Fakes>,
}

impl Plugin for InTheWay {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        self.log.log_builtin("inway", "ADD", &req.config);
        Err(CniError {
            undone: true,
            ..CniError::invalid_config("CNI_IFNAME", "eth0 already exists")
        })
    }
    fn del(&self, req: &Request) -> Result<(), CniError> {
        self.log.log_builtin("inway", "DEL", &req.config);
        Ok(())
    }
}

#[test]
fn the_del_after_an_add_that_found_its_way_taken_runs_nothing() {
    // The record of an ADD whose failing plugin undid its work stays,
    // owing nothing, so the DEL after it does not fall back to the
    // configuration (which would delete what was in the way); that DEL
    // removes it, and a later DEL falls back as for any missing record.
    let f = Arc::new(Fakes::new(&[]));
    let log = Arc::clone(&f);
    let registry = Registry::new().with_builtin("inway", move |_, _| {
        Box::new(InTheWay {
            log: Arc::clone(&log),
        })
    });
    let (ex, ctx) = executor_ctx(&f, &registry, "ctr1");
    let p = plan(vec![cluster(&["inway"])]);
    let fallback = || Ok(p.clone());
    ex.add(&p, &ctx).unwrap_err().answer();
    assert_eq!(
        record(&f, "ctr1")["attachments"][0]["pendingDel"],
        json!([])
    );
    let report = ex.del(&ctx, Some(&fallback)).unwrap();
    assert!(report.detached.is_empty());
    assert_eq!(f.calls(), ["inway ADD"]);
    assert!(!f.record_path("ctr1").exists());
    ex.del(&ctx, Some(&fallback)).unwrap();
    assert_eq!(f.calls(), ["inway ADD", "inway DEL"]);
}
