//! Times the built-in bridge driver's ADD and DEL against the reference
//! plugin binaries, in one run so only the ratios matter (run as root,
//! release mode):
//! `cargo run --release -p plexus-dataplane --example driverbench [PODS]`.
//!
//! Works only in throw-away namespaces: a "node" namespace per contender
//! plays the host, one pod namespace per attachment. Ours runs in-process on
//! a thread inside its node namespace with a static in-process IPAM; the
//! reference is exec'd as a runtime would, once with `host-local` and once
//! with `static` as its IPAM. Each figure is the median over PODS
//! attachments made one after another.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use plexus_cni::delegate::Resolver;
use plexus_cni::env::{AttachmentParams, CniCommand, CniEnv};
use plexus_cni::error::CniError;
use plexus_cni::result::CniResult;
use plexus_cni::skel::{Plugin, Request};
use plexus_dataplane::drivers;
use plexus_dataplane::NetNs;
use plexus_testkit::process::output_with_stdin;
use serde_json::{json, Value};

const REFERENCE: &str = "/usr/lib/cni";

/// Answers IPAM ADD with the address in the configuration's `ipam.address`.
struct StaticIpam;

impl Plugin for StaticIpam {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        let ip = &req.config["ipam"]["address"];
        CniResult::from_value(&json!({"cniVersion": "1.0.0", "ips": [{"address": ip}]}))
    }
    fn del(&self, _: &Request) -> Result<(), CniError> {
        Ok(())
    }
}

struct OneIpam;

impl Resolver for OneIpam {
    fn resolve(
        &self,
        _: &plexus_cni::names::PluginType,
        _: &Request,
    ) -> Result<Box<dyn Plugin + '_>, CniError> {
        Ok(Box::new(StaticIpam))
    }
}

/// Named namespaces deleted on drop.
struct Named(Vec<String>);

impl Named {
    fn add(&mut self, name: String) -> NetNs {
        let ns = NetNs::create_named(&name).expect("create namespace");
        self.0.push(name);
        ns
    }
}

impl Drop for Named {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = NetNs::delete_named(n);
        }
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn conf(i: usize, ipam: Value) -> Value {
    json!({"cniVersion": "1.0.0", "name": "bench", "type": "bridge", "bridge": "cni0",
           "isGateway": true, "ipam": ipam, "_pod": i})
}

fn request(command: CniCommand, pod: &str, config: &Value) -> Request {
    let params = AttachmentParams {
        netns: Some(plexus_cni::names::NetnsPath::new(format!("/var/run/netns/{pod}")).unwrap()),
        path: vec![PathBuf::from(REFERENCE)],
        ..AttachmentParams::new(format!("ctr-{pod}"), "eth0").unwrap()
    };
    let env = CniEnv::for_attachment(command, params).unwrap();
    let Value::Object(map) = config.clone() else {
        unreachable!()
    };
    Request::from_config(env, map).expect("request")
}

/// Exec the reference plugin inside `node` as a runtime would.
fn exec_reference(node: &str, command: &str, pod: &str, config: &Value) -> Duration {
    let t = Instant::now();
    let out = output_with_stdin(
        Command::new("ip")
            .args(["netns", "exec", node, &format!("{REFERENCE}/bridge")])
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", format!("ctr-{pod}"))
            .env("CNI_NETNS", format!("/var/run/netns/{pod}"))
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", REFERENCE),
        &config.to_string(),
    );
    let d = t.elapsed();
    assert!(
        out.status.success(),
        "reference {command}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    d
}

/// What `ip netns exec` adds to an exec, to subtract from the reference's
/// figures (a runtime execs the plugin directly).
fn exec_overhead(node: &str, rounds: usize) -> Duration {
    let time = |cmd: &mut Command| {
        median(
            (0..rounds)
                .map(|_| {
                    let t = Instant::now();
                    cmd.status().unwrap();
                    t.elapsed()
                })
                .collect(),
        )
    };
    let wrapped = time(Command::new("ip").args(["netns", "exec", node, "/bin/true"]));
    let plain = time(&mut Command::new("/bin/true"));
    wrapped.saturating_sub(plain)
}

fn main() {
    if std::fs::metadata(format!("{REFERENCE}/bridge")).is_err() {
        eprintln!("needs the reference plugins in {REFERENCE} (containernetworking-plugins)");
        std::process::exit(2);
    }
    let pods: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(40);
    let pid = std::process::id();
    let mut named = Named(Vec::new());
    let data_dir = std::env::temp_dir().join(format!("pxbench-{pid}"));

    let report = |what: &str, d: Duration| println!("{what:<52} median {d:>10.2?}");
    println!("pods: {pods}");

    // Ours, in-process, on one thread inside its node namespace.
    let node = named.add(format!("pxd-{pid}-node"));
    let pod_names: Vec<String> = (0..pods).map(|i| format!("pxd-{pid}-p{i}")).collect();
    for p in &pod_names {
        named.add(p.clone());
    }
    let (adds, dels) = node
        .run(|| {
            let resolver = OneIpam;
            // One session for the run: every pod's namespace is opened once,
            // and the host handle is shared, as in one plexus invocation.
            let session = plexus_dataplane::Session::new();
            let d = drivers::driver("bridge", &resolver, &session).unwrap();
            let mut adds = Vec::new();
            for (i, p) in pod_names.iter().enumerate() {
                let c = conf(i, json!({"type": "static", "address": format!("10.77.{}.{}/16", i / 250, i % 250 + 2)}));
                let req = request(CniCommand::Add, p, &c);
                let t = Instant::now();
                d.add(&req).expect("our ADD");
                adds.push(t.elapsed());
            }
            let mut dels = Vec::new();
            for (i, p) in pod_names.iter().enumerate() {
                let c = conf(i, json!({"type": "static", "address": "10.77.0.2/16"}));
                let req = request(CniCommand::Del, p, &c);
                let t = Instant::now();
                d.del(&req).expect("our DEL");
                dels.push(t.elapsed());
            }
            (adds, dels)
        })
        .unwrap();
    let (ours_add, ours_del) = (median(adds), median(dels));

    // The reference, exec'd, with host-local and with static.
    let overhead = exec_overhead(&format!("pxd-{pid}-node"), 20);
    let mut reference = Vec::new();
    for ipam in ["host-local", "static"] {
        let node = format!("pxd-{pid}-ref-{ipam}");
        named.add(node.clone());
        let pods: Vec<String> = (0..pods)
            .map(|i| format!("pxd-{pid}-r{ipam}-{i}"))
            .collect();
        for p in &pods {
            named.add(p.clone());
        }
        let ipam_conf = |i: usize| match ipam {
            "host-local" => json!({"type": "host-local", "subnet": "10.78.0.0/16",
                                    "dataDir": data_dir.join(&node)}),
            _ => json!({"type": "static",
                        "addresses": [{"address": format!("10.78.{}.{}/16", i / 250, i % 250 + 2)}]}),
        };
        let adds: Vec<Duration> = pods
            .iter()
            .enumerate()
            .map(|(i, p)| exec_reference(&node, "ADD", p, &conf(i, ipam_conf(i))))
            .collect();
        let dels: Vec<Duration> = pods
            .iter()
            .enumerate()
            .map(|(i, p)| exec_reference(&node, "DEL", p, &conf(i, ipam_conf(i))))
            .collect();
        reference.push((ipam, median(adds), median(dels)));
    }
    let _ = std::fs::remove_dir_all(&data_dir);

    report("plexus bridge ADD (in-process, static IPAM)", ours_add);
    report("plexus bridge DEL", ours_del);
    report("(`ip netns exec` overhead, removed below)", overhead);
    for (ipam, add, del) in reference {
        report(&format!("reference bridge + {ipam} ADD"), add);
        report(&format!("reference bridge + {ipam} DEL"), del);
        let add_net = add.saturating_sub(overhead);
        println!(
            "{:<52} {:>10.1}x",
            format!("  ADD speed-up vs {ipam} (overhead removed)"),
            add_net.as_secs_f64() / ours_add.as_secs_f64()
        );
    }
}
