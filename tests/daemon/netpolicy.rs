//! MultiNetworkPolicy (issue 35) through the daemon's
//! `--multi-network-policy`, on the real API server, with real traffic
//! between pod namespaces over `macnet` (macvlan bridge mode on the node's
//! `uplink0`): rules in place before the ADD answers, changes of a policy
//! and of a pod's labels followed within a second, a restart that never
//! drops them, and DEL taking them away.

use std::net::SocketAddr;
use std::path::PathBuf;

use plexus_dataplane::nftables::Nftables;
use plexus_dataplane::NetNs;
use plexus_testkit::traffic::{tcp_connects, udp_echoes, Listener};

use super::*;

/// The table plexus writes in a pod's namespace (`src/netpolicy/render.rs`).
const TABLE: &str = "plexus-policy";

struct PolicyWorld {
    w: World,
    /// Pod name to its network namespace's name.
    netns: Vec<(String, String)>,
}

impl PolicyWorld {
    fn new(tag: &str) -> Option<PolicyWorld> {
        Some(PolicyWorld {
            w: world(tag)?,
            netns: Vec::new(),
        })
    }

    /// Pod `name` on this node with `labels`, selecting `macnet@net1`, and
    /// its network namespace.
    fn pod(&mut self, name: &str, labels: &str) {
        let netns = self
            .w
            .kube
            .namespaces
            .add(&format!("{}-{name}", self.w.tag));
        self.w.kube.api.apply(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {}\n  \
             labels: {{{labels}}}\n  annotations: {{k8s.v1.cni.cncf.io/networks: macnet@net1}}\n\
             spec: {{nodeName: {}, containers: [{{name: c, image: busybox, \
             ports: [{{name: http, containerPort: 8080}}]}}]}}\n",
            self.w.kube.kube_ns, self.w.kube.node
        ));
        self.netns.push((name.to_string(), netns));
    }

    fn netns_name(&self, pod: &str) -> &str {
        &self.netns.iter().find(|(p, _)| p == pod).unwrap().1
    }

    fn path(&self, pod: &str) -> PathBuf {
        PathBuf::from(format!("/var/run/netns/{}", self.netns_name(pod)))
    }

    /// ADD of `pod` through `daemon`, which must succeed.
    fn add(&self, pod: &str, daemon: &Daemon) {
        let out = self.w.call("ADD", pod, self.netns_name(pod), &self.w.conf);
        assert!(
            out.status.success(),
            "ADD {pod}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            daemon.log()
        );
    }

    fn del(&self, pod: &str) {
        assert_ok(
            "DEL",
            &self.w.call("DEL", pod, self.netns_name(pod), &self.w.conf),
        );
    }

    /// Pod `pod`'s address on macnet, with `port`.
    fn at(&self, pod: &str, port: u16) -> SocketAddr {
        let ip = &addresses(self.netns_name(pod), "net1")[0];
        SocketAddr::new(ip.parse().unwrap(), port)
    }

    fn tcp(&self, from: &str, to: &str, port: u16) -> bool {
        tcp_connects(&self.path(from), self.at(to, port))
    }

    /// Whether an ICMP echo from `from` to `to` on macnet is answered.
    fn ping(&self, from: &str, to: &str) -> bool {
        let std::net::IpAddr::V4(target) = self.at(to, 0).ip() else {
            unreachable!("macnet is IPv4")
        };
        let ns = NetNs::open(self.path(from)).unwrap();
        plexus_dataplane::probe::icmp_echo(&ns, target, plexus_testkit::traffic::refusal_wait())
            .is_ok()
    }

    /// Rules in `pod`'s policy table (0: none).
    fn rules(&self, pod: &str) -> usize {
        let ns = NetNs::open(self.path(pod)).unwrap();
        Nftables::open(&ns).unwrap().rule_count(TABLE).unwrap()
    }

    /// `kubectl apply` of MultiNetworkPolicy `name` for macnet.
    fn policy(&self, name: &str, spec: &str) {
        self.w.kube.api.apply(&format!(
            "apiVersion: k8s.cni.cncf.io/v1beta1\nkind: MultiNetworkPolicy\nmetadata:\n  \
             name: {name}\n  namespace: {}\n  annotations: {{k8s.v1.cni.cncf.io/policy-for: macnet}}\n\
             spec: {spec}\n",
            self.w.kube.kube_ns
        ));
    }

    fn label(&self, pod: &str, label: &str) {
        self.w.kube.api.kubectl(&[
            "label",
            "--overwrite",
            "pod",
            pod,
            "-n",
            &self.w.kube.kube_ns,
            label,
        ]);
    }

    /// Waits (at most 5 s) until `check` holds; how long that took.
    fn within(&self, what: &str, daemon: &Daemon, mut check: impl FnMut() -> bool) -> Duration {
        let start = Instant::now();
        daemon.wait_until(what, Duration::from_secs(5), &mut check);
        start.elapsed()
    }
}

#[test]
fn a_policy_isolates_its_pods_before_their_add_answers_and_follows_every_change() {
    let Some(mut t) = PolicyWorld::new("netpol") else {
        return;
    };
    t.pod("server", "app: server");
    t.pod("client-a", "role: a");
    t.pod("client-b", "role: b");
    // Only TCP 8080 from role=a, on macnet (ingress).
    t.policy(
        "allow-a",
        "{podSelector: {matchLabels: {app: server}}, policyTypes: [Ingress], \
         ingress: [{from: [{podSelector: {matchLabels: {role: a}}}], ports: [{port: http}]}]}",
    );
    let daemon = t.w.daemon_with(&["--multi-network-policy"]);
    for pod in ["client-a", "client-b"] {
        t.add(pod, &daemon);
        assert_eq!(t.rules(pod), 0, "{pod} is selected by no policy");
    }
    t.add("server", &daemon);
    // Before anything else: the ADD has answered, so the rules are there.
    assert!(
        t.rules("server") > 0,
        "rules written before the ADD answered"
    );
    let _listening = Listener::new(&t.path("server"), 8080).unwrap();
    let _other = Listener::new(&t.path("server"), 9090).unwrap();
    assert!(
        t.tcp("client-a", "server", 8080),
        "role=a on the named port http"
    );
    assert!(!t.tcp("client-a", "server", 9090), "another port");
    assert!(!t.tcp("client-b", "server", 8080), "role=b");
    assert!(
        !udp_echoes(&t.path("client-a"), t.at("server", 8080)),
        "UDP is not TCP"
    );
    assert!(!t.ping("client-a", "server"), "ICMP is not TCP");
    // The cluster network (eth0, the bridge delegate) is no policy's.
    let eth0 = addresses(t.netns_name("server"), "eth0")[0]
        .parse()
        .unwrap();
    assert!(tcp_connects(
        &t.path("client-b"),
        SocketAddr::new(eth0, 9090)
    ));
    // The server's own connections out are not isolated, and their replies pass.
    let _client_side = Listener::new(&t.path("client-b"), 7000).unwrap();
    assert!(t.tcp("server", "client-b", 7000), "egress is not isolated");

    // A pod's labels change: role=b becomes a peer.
    t.label("client-b", "role=a");
    let took = t.within("relabelled peer allowed", &daemon, || {
        t.tcp("client-b", "server", 8080)
    });
    eprintln!("label change enforced within {took:?}");

    // The policy changes: now UDP 8080 from anyone, and TCP no longer.
    t.policy(
        "allow-a",
        "{podSelector: {matchLabels: {app: server}}, \
         ingress: [{ports: [{protocol: UDP, port: 8080}]}]}",
    );
    let took = t.within("the new policy enforced", &daemon, || {
        !t.tcp("client-a", "server", 8080)
    });
    eprintln!("policy change enforced within {took:?}");
    assert!(udp_echoes(&t.path("client-b"), t.at("server", 8080)));

    // A restart rebuilds the rules in place: never a moment without them.
    drop(daemon);
    let rules = t.rules("server");
    assert!(rules > 0);
    // Watched every 5 ms from the old daemon's end until well after the
    // new one is ready: the table is never empty nor missing.
    let server_ns = t.path("server");
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = {
        let watching = watching.clone();
        std::thread::spawn(move || {
            let nft = Nftables::open(&NetNs::open(&server_ns).unwrap()).unwrap();
            let mut seen = std::collections::BTreeSet::new();
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                seen.insert(nft.rule_count(TABLE).unwrap());
                std::thread::sleep(Duration::from_millis(5));
            }
            seen
        })
    };
    let daemon = t.w.daemon_with(&["--multi-network-policy"]);
    std::thread::sleep(Duration::from_millis(500));
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    let seen = watcher.join().unwrap();
    assert_eq!(seen, [rules].into(), "rule counts seen across the restart");
    assert_eq!(t.rules("server"), rules, "the same rules after the restart");
    assert!(!t.tcp("client-a", "server", 8080));

    // The policy deleted: the table goes.
    t.w.kube.api.kubectl(&[
        "delete",
        "multi-networkpolicy",
        "allow-a",
        "-n",
        &t.w.kube.kube_ns,
    ]);
    t.within("the table removed", &daemon, || t.rules("server") == 0);
    assert!(t.tcp("client-a", "server", 9090));
    assert!(t.ping("client-b", "server"));

    // DEL with a policy in force takes the table with the interface.
    t.policy(
        "deny-all",
        "{podSelector: {}, policyTypes: [Ingress, Egress]}",
    );
    t.within("every pod isolated", &daemon, || t.rules("client-a") > 0);
    assert!(!t.tcp("client-a", "server", 9090), "both isolated");
    t.del("client-a");
    assert_eq!(t.rules("client-a"), 0, "DEL removed the table");
    for pod in ["server", "client-b"] {
        t.del(pod);
    }
    let pods: Vec<String> = t.netns.iter().map(|(_, n)| n.clone()).collect();
    t.w.assert_nothing_left(&pods);
}

#[test]
fn an_attachment_without_a_kernel_interface_is_reported_not_silently_open() {
    let Some(mut t) = PolicyWorld::new("netpol-dpdk") else {
        return;
    };
    // An exec'd plugin answering as a DPDK-mode VF does: its interface is
    // not in the pod (no sandbox), so network-status names none.
    let bin = t.w.kube.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    executable(
        &bin.join("userspace"),
        "#!/bin/sh\ncat >/dev/null\n[ \"$CNI_COMMAND\" = ADD ] && echo \
         '{\"cniVersion\":\"1.0.0\",\"interfaces\":[{\"name\":\"vf0\"}],\"ips\":[{\"address\":\"10.70.0.5/24\"}]}'\n\
         exit 0\n",
    );
    t.w.kube.nad(
        "dpdk",
        &json!({"cniVersion": "1.0.0", "name": "dpdk", "type": "userspace"}),
    );
    t.w.conf = t.w.conf_with(json!({"binDir": bin.display().to_string()}));
    t.pod("vnf", "app: vnf");
    t.w.annotate("vnf", "dpdk");
    t.w.kube.api.apply(&format!(
        "apiVersion: k8s.cni.cncf.io/v1beta1\nkind: MultiNetworkPolicy\nmetadata:\n  \
         name: vnf\n  namespace: {}\n  annotations: {{k8s.v1.cni.cncf.io/policy-for: dpdk}}\n\
         spec: {{podSelector: {{}}, policyTypes: [Ingress]}}\n",
        t.w.kube.kube_ns
    ));
    let daemon =
        t.w.daemon_with(&["--multi-network-policy", "--dynamic-networks=false"]);
    t.add("vnf", &daemon);
    assert_eq!(t.rules("vnf"), 0, "nothing the kernel could filter");
    within_30s("PolicyNotEnforced", &daemon, || {
        t.w.has_event(
            "vnf",
            "Warning",
            "PolicyNotEnforced",
            "has no kernel interface",
        )
    });
    t.del("vnf");
}

#[test]
fn an_add_whose_policies_cannot_be_listed_fails_and_is_undone() {
    let Some(mut w) = world("netpol-nolist") else {
        return;
    };
    // An identity that may do everything an ADD needs but list the
    // policies: the admin, impersonating a user bound to such a role.
    let user = format!("pxt-nopolicy-{}", std::process::id());
    w.kube.api.apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: {user}}}\n\
         rules:\n\
         - {{apiGroups: [''], resources: [pods], verbs: [get, list, watch]}}\n\
         - {{apiGroups: [''], resources: [pods/status], verbs: [patch]}}\n\
         - {{apiGroups: [''], resources: [events], verbs: [create]}}\n\
         - {{apiGroups: [''], resources: [namespaces], verbs: [list, watch]}}\n\
         - {{apiGroups: [k8s.cni.cncf.io], resources: [network-attachment-definitions], \
             verbs: [get, list, watch]}}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
         metadata: {{name: {user}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {user}}}\n\
         subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}]\n"
    ));
    let admin = std::fs::read_to_string(w.kube.api.admin_kubeconfig()).unwrap();
    assert!(admin.contains("{token: "), "{admin}");
    let own = w.own_kubeconfig();
    std::fs::write(
        &own,
        admin.replacen("{token: ", &format!("{{as: {user}, token: "), 1),
    )
    .unwrap();
    let pod_ns = w.pod_here("p", "macnet@net1");
    let daemon = w.daemon_with(&["--multi-network-policy"]);
    let started = Instant::now();
    let out = w.call("ADD", "p", &pod_ns, &w.conf);
    let details = cni_details(&out, 11);
    assert!(details.contains("unprotected"), "{details}");
    assert!(
        started.elapsed() >= Duration::from_secs(10),
        "it waited for the lists"
    );
    assert!(daemon.log().contains("ADD undone"), "{}", daemon.log());
    // Undone: no interface, address or record left, and DEL is still fine.
    // (A pass of the enforcer or of hot-plug may hold the sandbox's lock
    // file a moment longer, finding the sandbox gone.)
    within_30s("the sandbox's lock file released", &daemon, || {
        files_in(&w.kube.tmp.path().join("cache")).is_empty()
    });
    w.assert_nothing_left(std::slice::from_ref(&pod_ns));
    assert_ok("DEL", &w.call("DEL", "p", &pod_ns, &w.conf));
    w.kube
        .api
        .kubectl(&["delete", "clusterrole,clusterrolebinding", &user]);
}

/// Issue 46: a daemon holds only the pods its node's policies can name as
/// peers, watched with the selector on the server, and only while a policy
/// selects a pod of its node: a policy selecting no pod here costs no pod
/// of the cluster; one selecting a pod here costs its peers (here two pods
/// of another node, known by their network-status), not the other pods of
/// the cluster; and its deletion drops them.
#[test]
fn a_daemon_holds_only_the_peers_its_nodes_policies_name() {
    let Some(mut t) = PolicyWorld::new("netscope") else {
        return;
    };
    t.pod("server", "app: server");
    // Pods of other nodes: noise, and two peers with an address on macnet.
    let ns = t.w.kube.kube_ns.clone();
    let mut manifest = String::new();
    for (name, role, ip) in (0..20)
        .map(|i| (format!("noise-{i}"), "noise", format!("10.20.99.{i}")))
        .chain((0..2).map(|i| (format!("peer-{i}"), "a", format!("10.20.98.{i}"))))
    {
        let status = format!(r#"[{{"name":"{ns}/macnet","interface":"net1","ips":["{ip}"]}}]"#);
        manifest.push_str(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  \
             labels: {{role: {role}}}\n  annotations: {{k8s.v1.cni.cncf.io/network-status: '{status}'}}\n\
             spec: {{nodeName: elsewhere, containers: [{{name: c, image: busybox}}]}}\n---\n"
        ));
    }
    t.w.kube.api.apply(&manifest);
    t.policy(
        "far",
        "{podSelector: {matchLabels: {app: nobody}}, ingress: [{from: [{podSelector: {matchLabels: {role: noise}}}]}]}",
    );
    let daemon = t.w.daemon_with(&["--multi-network-policy"]);
    t.add("server", &daemon);
    let held = |kind: &str| {
        t.w.metric(&format!("plexus_cache_objects{{kind=\"{kind}\"}}"))
    };
    // Every policy of the API server is held (they are few): this test's,
    // and those other tests of the binary left in their namespaces, which
    // no namespace controller deletes here.
    let policies =
        t.w.kube
            .api
            .kubectl(&["get", "multi-networkpolicies", "-A", "-o", "name"]);
    assert_eq!(
        held("multi-networkpolicies"),
        policies.lines().count() as f64
    );
    assert_eq!(held("policy-peer-scopes"), 0.0, "no pod here is selected");
    assert_eq!(held("policy-peer-pods"), 0.0);
    assert_eq!(t.rules("server"), 0);

    t.policy(
        "near",
        "{podSelector: {matchLabels: {app: server}}, ingress: [{from: [{podSelector: {matchLabels: {role: a}}}]}]}",
    );
    t.within("the peers watched", &daemon, || {
        held("policy-peer-pods") == 2.0 && t.rules("server") > 0
    });
    assert_eq!(held("policy-peer-scopes"), 1.0);
    // The rules name the peers of the other node: one that leaves the
    // selector (the server's watch says it is gone) takes its rule along.
    let with_both = t.rules("server");
    t.w.kube
        .api
        .kubectl(&["label", "--overwrite", "pod", "-n", &ns, "peer-1", "role=b"]);
    t.within("a peer gone", &daemon, || {
        held("policy-peer-pods") == 1.0 && t.rules("server") == with_both - 1
    });

    t.w.kube
        .api
        .kubectl(&["delete", "multi-networkpolicy", "-n", &ns, "near"]);
    t.within("the peers forgotten", &daemon, || {
        held("policy-peer-scopes") == 0.0 && t.rules("server") == 0
    });
    assert_eq!(held("policy-peer-pods"), 0.0);
    t.del("server");
    t.w.assert_nothing_left(&[t.netns_name("server").to_string()]);
}
