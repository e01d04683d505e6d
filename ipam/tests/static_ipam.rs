//! static IPAM: addresses from the config, CNI_ARGS, `args` and the `ips`
//! capability with the reference's precedence; errors naming their field;
//! DEL/GC/STATUS with nothing to do; CHECK against prevResult (cni-SPEC §2).

mod common;

use common::*;
use plexus_cni::result::CniResult;
use plexus_cni::skel::Plugin;
use plexus_cni::{CniVersion, ErrorCode};
use plexus_ipam::Static;
use serde_json::{json, Value};

fn base() -> Value {
    conf(
        "1.1.0",
        json!({"type": "static",
            "addresses": [{"address": "10.10.0.1/24", "gateway": "10.10.0.254"}, {"address": "fd10::1/64"}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.10.0.254"}],
            "dns": {"nameservers": ["10.10.0.53"], "domain": "example.com", "search": ["a.example.com"], "options": ["ndots:2"]}}),
    )
}

fn result(config: &Value, args: &str) -> Value {
    let r = add_args(&Static, config, "ctr", "eth0", args).unwrap();
    printed(&r, r.cni_version.unwrap())
}

#[track_caller]
fn rejected(config: &Value, args: &str, code: ErrorCode, details: &str) {
    let req = request("ADD", "ctr", "eth0", args, config).unwrap();
    let e = assert_err(Static.validate(&req), code, details);
    assert_eq!(Static.add(&req).unwrap_err(), e);
}

#[test]
fn config_addresses_routes_and_dns() {
    assert_eq!(
        result(&base(), ""),
        json!({"cniVersion": "1.1.0",
            "ips": [{"address": "10.10.0.1/24", "gateway": "10.10.0.254"}, {"address": "fd10::1/64"}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.10.0.254"}],
            "dns": {"nameservers": ["10.10.0.53"], "domain": "example.com", "search": ["a.example.com"], "options": ["ndots:2"]}})
    );
    // Keys fold as in Go.
    let c = json!({"cniVersion": "0.4.0", "name": "n", "IPAM": {"Type": "static", "Addresses": [{"Address": "10.0.0.5/8", "Gateway": "10.0.0.1"}]}});
    assert_eq!(
        result(&c, ""),
        json!({"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.0.0.5/8", "gateway": "10.0.0.1"}]})
    );
}

#[test]
fn precedence_follows_the_reference() {
    // CNI_ARGS IP adds to the configured addresses; GATEWAY applies to those.
    let r = result(
        &base(),
        "IP=10.20.0.5/16, fd20::5/64;GATEWAY=10.20.0.1,10.10.0.9",
    );
    assert_eq!(
        r["ips"],
        json!([{"address": "10.10.0.1/24", "gateway": "10.10.0.254"}, {"address": "fd10::1/64"},
               {"address": "10.20.0.5/16", "gateway": "10.20.0.1"}, {"address": "fd20::5/64"}])
    );
    // args.cni.ips replaces everything before it (cni-CONVENTIONS: args beat CNI_ARGS).
    let args = with(base(), "args", json!({"cni": {"ips": ["10.30.0.5/24"]}}));
    assert_eq!(
        result(&args, "IP=10.20.0.5/16")["ips"],
        json!([{"address": "10.30.0.5/24"}])
    );
    // The ips capability replaces that again.
    let rc = with(
        args.clone(),
        "runtimeConfig",
        json!({"ips": ["10.40.0.5/24", "fd40::5/64"]}),
    );
    assert_eq!(
        result(&rc, "IP=10.20.0.5/16")["ips"],
        json!([{"address": "10.40.0.5/24"}, {"address": "fd40::5/64"}])
    );
    // Empty lists are no replacement.
    let empty = with(
        with(base(), "args", json!({"cni": {"ips": []}})),
        "runtimeConfig",
        json!({"ips": []}),
    );
    assert_eq!(result(&empty, "")["ips"].as_array().unwrap().len(), 2);
    // Routes and DNS stay from the config whatever the address source.
    assert_eq!(result(&rc, "")["dns"]["nameservers"], json!(["10.10.0.53"]));
}

#[test]
fn bad_input_names_the_field() {
    let ipam = |addresses: Value| conf("1.1.0", json!({"type": "static", "addresses": addresses}));
    let mut dns = ipam(json!([]));
    dns["ipam"]["dns"] = json!({"nameservers": "8.8.8.8"});
    let mut routes = ipam(json!([]));
    routes["ipam"]["routes"] = json!([{"dst": "0.0.0.0/0", "gw": "fd00::1"}]);
    let mut no_ipam = ipam(json!([]));
    no_ipam.as_object_mut().unwrap().remove("ipam");
    let runtime_ips = |ips: Value| with(ipam(json!([])), "runtimeConfig", json!({ "ips": ips }));
    for (config, details) in [
        (
            ipam(json!([{"gateway": "10.0.0.1"}])),
            "ipam.addresses[0].address: missing",
        ),
        (
            ipam(json!([{"address": "10.0.0.5/24"}, {"address": "10.0.0.6"}])),
            "ipam.addresses[1].address: \"10.0.0.6\" is not an address in CIDR notation",
        ),
        (
            ipam(json!([{"address": "10.0.0.5/24", "gateway": "nope"}])),
            "ipam.addresses[0].gateway: \"nope\" is not an IP address",
        ),
        (
            ipam(json!([{"address": "10.0.0.5/24", "gateway": "fd00::1"}])),
            "ipam.addresses[0].gateway: fd00::1 and the address 10.0.0.5/24 are of different address families",
        ),
        (
            ipam(json!([{"address": 5}])),
            "ipam.addresses[0].address: invalid type: integer `5`",
        ),
        (
            ipam(json!({"address": "10.0.0.5/24"})),
            "ipam.addresses: invalid type: map",
        ),
        (
            runtime_ips(json!(["10.0.0.5"])),
            "runtimeConfig.ips[0]: \"10.0.0.5\" is not an address in CIDR notation",
        ),
        (
            runtime_ips(json!("10.0.0.5/24")),
            "runtimeConfig.ips: invalid type: string",
        ),
        (
            with(ipam(json!([])), "args", json!({"cni": {"ips": ["x/24"]}})),
            "args.cni.ips[0]: \"x/24\" is not an address in CIDR notation",
        ),
        (dns, "ipam.dns.nameservers: invalid type: string"),
        (
            routes,
            "ipam.routes[0].gw: fd00::1 and the destination 0.0.0.0/0",
        ),
        (no_ipam, "ipam: missing"),
    ] {
        rejected(&config, "", ErrorCode::InvalidConfig, details);
    }
    // CNI_ARGS problems are environment errors.
    for (args, details) in [
        (
            "IP=10.0.0.5",
            "CNI_ARGS: IP: \"10.0.0.5\" is not an address in CIDR notation",
        ),
        (
            "IP=10.0.0.5/24;GATEWAY=x",
            "CNI_ARGS: GATEWAY: \"x\" is not an IP address",
        ),
        (
            "K8S_POD_NAME=a",
            "CNI_ARGS: unknown argument \"K8S_POD_NAME\"",
        ),
    ] {
        rejected(
            &ipam(json!([])),
            args,
            ErrorCode::InvalidEnvironment,
            details,
        );
    }
    assert!(add_args(
        &Static,
        &ipam(json!([])),
        "c",
        "eth0",
        "IgnoreUnknown=1;K8S_POD_NAME=a"
    )
    .is_ok());
    // Old versions hold one address per family.
    let two = conf(
        "0.2.0",
        json!({"type": "static", "addresses": [{"address": "10.0.0.5/24"}, {"address": "10.0.1.5/24"}]}),
    );
    rejected(
        &two,
        "",
        ErrorCode::IncompatibleVersion,
        "cniVersion: CNI 0.2.0 results hold at most one IPv4",
    );
}

#[test]
fn del_gc_status_have_nothing_to_do() {
    // Nothing is allocated, so even a config static could not use deletes.
    let broken = conf(
        "1.1.0",
        json!({"type": "static", "addresses": [{"address": "garbage"}]}),
    );
    del(&Static, &broken, "ctr", "eth0").unwrap();
    gc(&Static, &broken, &[]).unwrap();
    status(&Static, &base()).unwrap();
}

fn with_prev(config: Value, prev: &CniResult) -> Value {
    with(
        config,
        "prevResult",
        prev.to_value(CniVersion::V1_1_0).unwrap(),
    )
}

#[test]
fn check_compares_with_prev_result() {
    let p = Static;
    let c = base();
    let prev = add(&p, &c, "ctr", "eth0").unwrap();
    check(&p, &with_prev(c.clone(), &prev), "ctr", "eth0").unwrap();
    // cni-SPEC §2 CHECK: the runtime passes the result of ADD.
    assert_err(
        check(&p, &c, "ctr", "eth0"),
        ErrorCode::InvalidConfig,
        "prevResult: missing",
    );
    let mut other_gw = prev.clone();
    other_gw.ips[0].gateway = Some("10.10.0.1".parse().unwrap());
    let e = assert_err(
        check(&p, &with_prev(c.clone(), &other_gw), "ctr", "eth0"),
        ErrorCode::Plugin(113),
        "ipam.addresses[0]: 10.10.0.1 has gateway 10.10.0.1 in prevResult, the configuration says 10.10.0.254",
    );
    assert_eq!(e.msg, "address does not match");
    let mut missing = prev.clone();
    missing.ips.remove(1);
    assert_err(
        check(&p, &with_prev(c.clone(), &missing), "ctr", "eth0"),
        ErrorCode::Plugin(113),
        "ipam.addresses[1]: fd10::1 is not in prevResult.ips of interface eth0",
    );
    // An address without configured gateway accepts any.
    let mut any_gw = prev.clone();
    any_gw.ips[1].gateway = Some("fd10::ff".parse().unwrap());
    check(&p, &with_prev(c, &any_gw), "ctr", "eth0").unwrap();
}
