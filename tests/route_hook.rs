//! multi-net-spec §4.1.2.1.9 in the kernel: the default-route step after an
//! attachment, in a pod namespace this test creates (the machine's own
//! namespace is never touched).

use std::net::IpAddr;
use std::process::Command;

use plexus::cni::names::{IfName, NetnsPath};
use plexus::cni::result::{CniResult, Route};
use plexus::run::routes::NetlinkRouteHook;
use plexus::run::{RouteChange, RouteHook, RunError};
use plexus_dataplane::NetNs;

/// A named namespace deleted on drop, even when the test fails.
struct Pod(String);

impl Pod {
    fn new(tag: &str) -> Pod {
        let name = format!("pxrh-{}-{tag}", std::process::id());
        NetNs::create_named(&name).unwrap();
        Pod(name)
    }
    fn path(&self) -> std::path::PathBuf {
        plexus_dataplane::netns::named_path(&self.0).unwrap()
    }
    fn ip(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .arg("-n")
            .arg(&self.0)
            .args(args)
            .output();
        plexus_testkit::process::stdout_ok(out.unwrap(), format!("ip {args:?}"))
    }
    fn defaults(&self, family: &str) -> Vec<(String, u64)> {
        let json: serde_json::Value =
            serde_json::from_str(&self.ip(&["-j", family, "route", "show", "default"])).unwrap();
        json.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["gateway"].as_str().unwrap_or("").to_string(),
                    r["metric"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = NetNs::delete_named(&self.0);
    }
}

fn pod_with_link(tag: &str) -> Pod {
    let pod = Pod::new(tag);
    pod.ip(&[
        "link", "add", "net1", "type", "veth", "peer", "name", "peer1",
    ]);
    pod.ip(&["link", "set", "net1", "up"]);
    pod.ip(&["link", "set", "peer1", "up"]);
    pod.ip(&["addr", "add", "10.0.0.2/24", "dev", "net1"]);
    pod.ip(&["-6", "addr", "add", "fd00::2/64", "dev", "net1", "nodad"]);
    pod
}

/// A pod whose plugin made a default route via 10.0.0.254 on net1, and the
/// plugin's result that says so.
fn pod_with_plugin_default(tag: &str) -> (Pod, CniResult) {
    let pod = pod_with_link(tag);
    pod.ip(&[
        "route",
        "add",
        "default",
        "via",
        "10.0.0.254",
        "dev",
        "net1",
    ]);
    let result = CniResult {
        routes: vec![Route::default_via("10.0.0.254".parse().unwrap())],
        ..CniResult::default()
    };
    (pod, result)
}

#[test]
fn set_default_route_replaces_the_plugins_and_orders_gateways() {
    let (pod, mut result) = pod_with_plugin_default("set");
    let gateways: Vec<IpAddr> = vec![
        "10.0.0.1".parse().unwrap(),
        "10.0.0.9".parse().unwrap(),
        "fd00::1".parse().unwrap(),
    ];
    let path = NetnsPath::new(pod.path().to_str().unwrap()).unwrap();
    let set = RouteChange {
        netns: &path,
        ifname: &IfName::new("net1").unwrap(),
        via: Some(&gateways),
    };
    NetlinkRouteHook::default()
        .route(&set, &mut result)
        .unwrap();
    // One route per gateway, metric in list order; the plugin's is gone.
    assert_eq!(
        pod.defaults("-4"),
        [("10.0.0.1".to_string(), 0), ("10.0.0.9".to_string(), 1)]
    );
    assert_eq!(
        pod.defaults("-6")
            .iter()
            .map(|(g, _)| g.as_str())
            .collect::<Vec<_>>(),
        ["fd00::1"]
    );
    // The result says what the kernel now has.
    let gws: Vec<String> = result
        .routes
        .iter()
        .filter(|r| r.is_default())
        .map(|r| r.gw.unwrap().to_string())
        .collect();
    assert_eq!(gws, ["10.0.0.1", "10.0.0.9", "fd00::1"]);
}

#[test]
fn clear_default_route_removes_both_families() {
    let (pod, mut result) = pod_with_plugin_default("clear");
    pod.ip(&[
        "-6", "route", "add", "default", "via", "fd00::fe", "dev", "net1",
    ]);
    let path = NetnsPath::new(pod.path().to_str().unwrap()).unwrap();
    let clear = RouteChange {
        netns: &path,
        ifname: &IfName::new("net1").unwrap(),
        via: None,
    };
    NetlinkRouteHook::default()
        .route(&clear, &mut result)
        .unwrap();
    assert!(pod.defaults("-4").is_empty());
    assert!(pod.defaults("-6").is_empty());
    assert!(result.routes.is_empty());
    // Clearing again finds nothing to remove and succeeds.
    NetlinkRouteHook::default()
        .route(&clear, &mut result)
        .unwrap();
}

#[test]
fn a_missing_interface_is_named() {
    let pod = Pod::new("missing");
    let path = NetnsPath::new(pod.path().to_str().unwrap()).unwrap();
    let missing = RouteChange {
        netns: &path,
        ifname: &IfName::new("nope0").unwrap(),
        via: None,
    };
    let err = NetlinkRouteHook::default()
        .route(&missing, &mut CniResult::default())
        .unwrap_err();
    assert!(
        matches!(&err, RunError::Route { ifname, .. } if ifname == "nope0"),
        "{err:?}"
    );
}
