//! Default-route hooks (multi-net-spec §4.1.2.1.9): run after their
//! attachment, they shape the result DEL and CHECK later see; a failing
//! hook fails and rolls back its attachment.

use std::sync::{Arc, Mutex};

use plexus::cni::result::CniResult;
use plexus::run::{RouteChange, RouteHook};

use super::*;

/// Logs its calls into the fakes' log and edits results as a data plane
/// would; fails `set` when asked to.
struct Hook {
    log: Arc<Fakes>,
    fail_set: bool,
    /// The results the hook was given.
    seen: Arc<Mutex<Vec<CniResult>>>,
}

impl RouteHook for Hook {
    fn route(&self, change: &RouteChange, result: &mut CniResult) -> Result<(), RunError> {
        let at = format!("{} {}", change.netns, change.ifname);
        self.log.log_line(&match change.via {
            None => format!("hook clear {at}"),
            Some(gateways) => {
                let gws: Vec<String> = gateways.iter().map(|g| g.to_string()).collect();
                format!("hook set {at} {}", gws.join(","))
            }
        });
        self.seen.lock().unwrap().push(result.clone());
        change.edit(result);
        if self.fail_set && change.via.is_some() {
            // The data plane's own failure, as a CNI error.
            return Err(RunError::Plugin(CniError::plugin(
                codes::PLUGIN_FAILED,
                "route failed",
                "no route to 10.0.2.254",
            )));
        }
        Ok(())
    }
}

#[test]
fn default_route_hooks_run_after_their_attachment_and_shape_the_result() {
    // multi-net-spec §4.1.2.1.9: the default network's default route is
    // cleared, the selected attachment's set through its gateways.
    for fail_set in [false, true] {
        let f = Arc::new(Fakes::new(&["p1", "q1", "r1"]));
        let (r1, r2) = (
            result_json("1.0.0", 1, "eth0"),
            result_json("1.0.0", 2, "net1"),
        );
        f.answer_result("p1", &r1);
        f.answer_result("q1", &r2);
        f.answer_result("r1", &result_json("1.0.0", 3, "net2"));
        let mut a = cluster(&["p1"]);
        a.clear_default_route = true;
        let mut b = attachment("ns/b", "net1", "1.0.0", &["q1"]);
        b.default_route = Some(vec!["10.0.2.254".parse().unwrap()]);
        let c = attachment("ns/c", "net2", "1.0.0", &["r1"]);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let hook = Hook {
            log: Arc::clone(&f),
            fail_set,
            seen: Arc::clone(&seen),
        };
        let registry = Registry::new();
        let ex = executor(&f).with_route_hook(Box::new(hook));
        let ctx = f.ctx(&registry, "ctr1");
        let netns = path_str(&f.netns());
        let outcome = ex.add(&plan(vec![a.clone(), b.clone(), c]), &ctx);

        // Each hook got its attachment's final result, as the plugins made it.
        let mut want_seen = vec![as_result(&r1), as_result(&r2)];
        for r in &mut want_seen {
            r.cni_version = Some(CniVersion::V1_0_0);
        }
        assert_eq!(*seen.lock().unwrap(), want_seen);
        let mut want = vec![
            "p1 ADD".to_string(),
            format!("hook clear {netns} eth0"),
            "q1 ADD".into(),
            format!("hook set {netns} net1 10.0.2.254"),
        ];
        if !fail_set {
            want.push("r1 ADD".into());
            assert_eq!(f.calls(), want);
            let results = outcome.unwrap();
            let a_routes = &results[0].result.as_ref().unwrap().routes;
            assert!(a_routes.iter().all(|r| !r.is_default()), "{a_routes:?}");
            let b_routes: Vec<String> = results[1]
                .result
                .as_ref()
                .unwrap()
                .routes
                .iter()
                .map(|r| format!("{} via {:?}", r.dst, r.gw))
                .collect();
            assert_eq!(b_routes, ["0.0.0.0/0 via Some(10.0.2.254)"]);
            // The cached result is the shaped one: DEL (and CHECK) see it.
            f.reset_calls();
            ex.del(&ctx, None).unwrap();
            let prev = &f.call(2).stdin["prevResult"];
            assert_eq!(f.call(2).plugin, "p1");
            assert_eq!(prev.get("routes"), None, "{prev}");
        } else {
            // A failed route step fails its attachment: the whole chain and
            // the earlier attachments are rolled back, the next never runs.
            want.extend(["q1 DEL".to_string(), "p1 DEL".into()]);
            assert_eq!(f.calls(), want);
            let e = outcome.unwrap_err().answer();
            assert_eq!(
                e.details,
                "ns/b (net1) default route (multi-net-spec §4.1.2.1.9): no route to 10.0.2.254"
            );
            // q1's DEL got what q1 produced, not the hook's half-changed copy.
            assert_eq!(
                f.call(4).stdin["prevResult"],
                prev_in(&r2, CniVersion::V1_0_0)
            );
            // Everything was undone: nothing is owed, no record is left.
            assert!(!f.record_path("ctr1").exists());
        }
    }
}
