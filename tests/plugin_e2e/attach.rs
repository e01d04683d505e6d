//! Two pods on the cluster network and the secondary networks their
//! annotation selects (multi-net-spec §4.1.2.1), from further delegates and
//! a default-network directory too (as Multus): results, kernel state,
//! connectivity, and DEL (twice) leaving nothing.

use super::*;

#[test]
fn two_pods_on_a_bridge_and_a_macvlan_network() {
    on_node_with_pods("mac", |tmp, node, pods| {
        // A config list: macvlan, then tuning (a chained plugin).
        let macnet = json!({"cniVersion": "1.0.0", "name": "macnet", "plugins": [
            {"type": "macvlan", "master": "uplink0", "mode": "bridge", "ipam": host_local(tmp, "10.20.0.0/24", "mac")},
            {"type": "tuning", "mtu": 1400, "dataDir": tmp.join("tuning")}]});
        let conf = plexus_conf(tmp, &macnet);

        // ADD: the runtime gets the cluster network's result (as from Multus).
        let mut cluster_ips = Vec::new();
        let mut secondary_ips = Vec::new();
        for (i, pod_ns) in pods.iter().enumerate() {
            let out = pod_call(node, "ADD", i, Some(pod_ns), &conf);
            assert!(
                out.status.success(),
                "ADD: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let result: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(result["cniVersion"], "1.0.0");
            let sandbox = result["interfaces"]
                .as_array()
                .unwrap()
                .iter()
                .find(|i| i.get("sandbox").is_some())
                .unwrap();
            assert_eq!(sandbox["name"], "eth0");
            let eth0 = addresses(pod_ns, "eth0");
            let net1 = addresses(pod_ns, "net1");
            assert_eq!(eth0.len(), 1, "{eth0:?}");
            assert_eq!(net1.len(), 1, "{net1:?}");
            assert!(eth0[0].starts_with("10.10.0.") && net1[0].starts_with("10.20.0."));
            let link: Value =
                serde_json::from_str(&ip(pod_ns, &["-j", "link", "show", "net1"])).unwrap();
            assert_eq!(link[0]["mtu"], 1400, "tuning applied to net1");
            assert_eq!(
                result["ips"][0]["address"]
                    .as_str()
                    .unwrap()
                    .split('/')
                    .next()
                    .unwrap(),
                eth0[0]
            );
            cluster_ips.push(eth0[0].clone());
            secondary_ips.push(net1[0].clone());
        }
        // The pods reach each other on both networks.
        assert_reaches("bridge", &pods[0], &cluster_ips[1]);
        assert_reaches("macvlan", &pods[1], &secondary_ips[0]);

        del_twice(node, pods, &conf);
        assert!(
            files_in(&tmp.join("tuning")).is_empty(),
            "tuning's saved state removed"
        );
    });
}

#[test]
fn further_delegates_and_a_default_network_directory_reach_every_pod() {
    // As Multus: `delegates[1..]` follow the cluster network as net1, ...
    // (LoadNetConf keeps them all; getIfname names them by position), then a
    // `defaultNetworks` entry naming a directory, its first conf
    // (getNetDelegate), then the pod's selection. DEL, twice, leaves nothing.
    on_node_with_pods("dlg", |tmp, node, pods| {
        let mut conf: Value =
            serde_json::from_str(&plexus_conf(tmp, &macvlan_network(tmp))).unwrap();
        conf["delegates"].as_array_mut().unwrap().push(json!({
            "cniVersion": "1.0.0", "name": "storage", "type": "macvlan", "master": "uplink0",
            "ipam": host_local(tmp, "10.40.0.0/24", "storage")}));
        let dir = tmp.join("default-networks");
        std::fs::create_dir(&dir).unwrap();
        let backup = json!({"cniVersion": "1.0.0", "name": "backup", "type": "macvlan",
            "master": "uplink0", "ipam": host_local(tmp, "10.50.0.0/24", "backup")});
        std::fs::write(dir.join("10-backup.conf"), backup.to_string()).unwrap();
        conf["defaultNetworks"] = json!([dir]);
        let conf = conf.to_string();

        for (i, pod_ns) in pods.iter().enumerate() {
            let out = pod_call(node, "ADD", i, Some(pod_ns), &conf);
            assert_ok("ADD", &out);
            assert_eq!(link_names(pod_ns), ["lo", "eth0", "net1", "net2", "net3"]);
            let addr = |ifname: &str| ip(pod_ns, &["-4", "-o", "addr", "show", "dev", ifname]);
            assert!(addr("net1").contains("10.40.0."), "{}", addr("net1"));
            assert!(addr("net2").contains("10.50.0."), "{}", addr("net2"));
            assert!(addr("net3").contains("10.20.0."), "{}", addr("net3"));
        }
        del_twice(node, pods, &conf);
    });
}
