//! Default routes (multi-net-spec §4.1.2.1.9): Multus's quickstart NAD
//! beside the cluster network's default route, and the "default-route" key
//! taking it from every other attachment.

use super::*;

/// The first NetworkAttachmentDefinition of Multus's quickstart
/// (docs/quickstart.md, `macvlan-conf`) unchanged but for its master (the
/// node's uplink here, `eth0` there) and host-local's `dataDir` (under the
/// test's temp dir).
fn multus_quickstart_macvlan(tmp: &Path) -> Value {
    let mut nad = json!({
      "cniVersion": "0.3.0",
      "type": "macvlan",
      "master": "eth0",
      "mode": "bridge",
      "ipam": {
        "type": "host-local",
        "subnet": "192.168.1.0/24",
        "rangeStart": "192.168.1.200",
        "rangeEnd": "192.168.1.216",
        "routes": [
          { "dst": "0.0.0.0/0" }
        ],
        "gateway": "192.168.1.1"
      }
    });
    nad["master"] = json!("uplink0");
    nad["name"] = json!("macvlan-conf");
    nad["ipam"]["dataDir"] = json!(tmp.join("ipam").join("quickstart"));
    nad
}

/// `ip route` of `netns`'s main table: the default routes' devices.
fn default_route_devices(netns: &str, family: &str) -> Vec<String> {
    let routes: Value =
        serde_json::from_str(&ip(netns, &["-j", family, "route", "show", "default"])).unwrap();
    let mut devs: Vec<String> = routes
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| match r["nexthops"].as_array() {
            Some(hops) => hops.clone(),
            None => vec![r.clone()],
        })
        .map(|h| {
            format!(
                "{} {}",
                h["dev"].as_str().unwrap(),
                h["gateway"].as_str().unwrap_or("-")
            )
        })
        .collect();
    devs.sort();
    devs
}

#[test]
fn the_multus_quickstart_nad_attaches_beside_the_cluster_default_route() {
    // Multus's quickstart NAD on a pod whose cluster network set the default
    // route (every real cluster): the reference plugins add result routes
    // without NLM_F_EXCL (plugins' `ipam.ConfigureIface`, `RouteAddEcmp`),
    // so both default routes coexist; this ADD used to fail with EEXIST.
    on_node_with_pods("qs", |tmp, node, pods| {
        let conf = plexus_conf_with(
            tmp,
            &[multus_quickstart_macvlan(tmp)],
            "macvlan-conf",
            json!([{"dst": "0.0.0.0/0"}]),
        );
        let mut net1 = Vec::new();
        for (i, pod_ns) in pods.iter().enumerate() {
            let out = pod_call(node, "ADD", i, Some(pod_ns), &conf);
            assert_ok("ADD", &out);
            assert_eq!(
                default_route_devices(pod_ns, "-4"),
                ["eth0 10.10.0.1", "net1 192.168.1.1"]
            );
            net1.push(addresses(pod_ns, "net1")[0].clone());
        }
        assert!(net1[0].starts_with("192.168.1.2"), "{net1:?}");
        assert_reaches("macvlan-conf", &pods[0], &net1[1]);
        del_twice(node, pods, &conf);
    });
}

#[test]
fn default_route_key_takes_the_default_route_from_every_other_attachment() {
    // multi-net-spec §4.1.2.1.9: with "default-route" on one selection, the
    // default route is flushed "from the default network attachment and any
    // attachments that do not have the "default-route" key set" (Multus:
    // `types.CheckGatewayConfig`, then `netutils.DeleteDefaultGW` per
    // delegate). `"default-route": []` keeps that attachment's own.
    on_node_with_pods("dr", |tmp, node, pods| {
        let second = json!({"cniVersion": "1.0.0", "name": "mac2", "type": "macvlan",
            "master": "uplink0", "ipam": {"type": "host-local", "subnet": "10.30.0.0/24",
            "gateway": "10.30.0.1", "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": tmp.join("ipam").join("mac2")}});
        let selections = [
            // pod 1: mac2 takes the default route through 10.30.0.254.
            (
                r#"[{"name": "macvlan-conf"}, {"name": "mac2", "default-route": ["10.30.0.254"]}]"#,
                vec!["net2 10.30.0.254"],
            ),
            // pod 2: mac2 keeps the gateway its own result gave.
            (
                r#"[{"name": "macvlan-conf"}, {"name": "mac2", "default-route": []}]"#,
                vec!["net2 10.30.0.1"],
            ),
        ];
        for (i, (selection, defaults)) in selections.iter().enumerate() {
            let dir = tmp.join(format!("pod{i}"));
            std::fs::create_dir(&dir).unwrap();
            let conf = plexus_conf_with(
                &dir,
                &[multus_quickstart_macvlan(tmp), second.clone()],
                selection,
                json!([{"dst": "0.0.0.0/0"}]),
            );
            let out = plexus(node, "ADD", &format!("c{i}"), Some(&pods[i]), "p1", &conf);
            assert_ok("ADD", &out);
            assert_eq!(
                &default_route_devices(&pods[i], "-4"),
                defaults,
                "{selection}"
            );
            let out = plexus(node, "DEL", &format!("c{i}"), Some(&pods[i]), "p1", &conf);
            assert_ok("DEL", &out);
            assert_eq!(link_names(&pods[i]), ["lo"]);
            assert_nothing_left(&dir);
        }
    });
}
