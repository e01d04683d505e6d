//! host-local configuration: keys, defaults and every rejected input, each
//! error naming its field path (cni-SPEC §5 "Error"; reference host-local
//! `Range.Canonicalize`, `LoadIPAMConfig`).

mod common;

use common::*;
use plexus_cni::skel::Plugin;
use plexus_cni::ErrorCode;
use plexus_ipam::HostLocal;
use serde_json::{json, Value};

fn ranges(dir: &std::path::Path, ranges: Value) -> Value {
    conf("1.0.0", host_local(dir, json!({"ranges": ranges})))
}

/// `validate` (no disk) and `add` must both fail with this error; the data
/// directory must stay untouched.
#[track_caller]
fn rejected(config: &Value, code: ErrorCode, details: &str) {
    rejected_args(config, "", code, details)
}

/// [`rejected`] as invalid configuration, the error most inputs get.
#[track_caller]
fn invalid(config: &Value, details: &str) {
    rejected(config, ErrorCode::InvalidConfig, details)
}

#[track_caller]
fn rejected_args(config: &Value, args: &str, code: ErrorCode, details: &str) {
    let p = HostLocal::new();
    let req = request("ADD", "ctr1", "eth0", args, config).unwrap();
    let e = assert_err(p.validate(&req), code, details);
    let e2 = assert_err(p.add(&req), code, details);
    assert_eq!(e, e2);
    if let Some(dir) = config["ipam"]["dataDir"].as_str() {
        assert!(
            files(std::path::Path::new(dir)).is_empty(),
            "{dir} was written"
        );
    }
}

#[test]
fn legacy_single_range_defaults() {
    // The single-range form: subnet etc. directly in ipam. Gateway .1,
    // rangeStart .1 with the gateway skipped, so the first address is .2.
    let (_tmp, c) = host_local_net("1.0.0", json!({"subnet": "10.1.2.0/24"}));
    let r = add(&HostLocal::new(), &c, "ctr1", "eth0").unwrap();
    assert_eq!(
        printed(&r, plexus_cni::CniVersion::V1_0_0),
        json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.2.2/24", "gateway": "10.1.2.1"}]})
    );
}

#[test]
fn explicit_range_and_gateway() {
    let tmp = tempfile::tempdir().unwrap();
    let c = ranges(
        tmp.path(),
        json!([[{"subnet": "10.1.2.0/24", "rangeStart": "10.1.2.100", "rangeEnd": "10.1.2.101", "gateway": "10.1.2.254"}]]),
    );
    let p = HostLocal::new();
    let r = add(&p, &c, "a", "eth0").unwrap();
    assert_eq!(addrs(&r), ["10.1.2.100/24"]);
    assert_eq!(r.ips[0].gateway, Some("10.1.2.254".parse().unwrap()));
    fills_in_order(
        &p,
        &c,
        &["10.1.2.101"],
        "ipam.ranges[0]: no IP addresses available in range set 10.1.2.100-10.1.2.101",
    );
}

#[test]
fn keys_match_case_insensitively_like_go() {
    // Runtimes and users writing for Go plugins rely on this.
    let tmp = tempfile::tempdir().unwrap();
    let c = json!({"CNIVersion": "1.0.0", "Name": NET, "IPAM": {
        "Type": "host-local", "DataDir": tmp.path().to_str().unwrap(),
        "Ranges": [[{"Subnet": "10.5.0.0/24", "RANGESTART": "10.5.0.50", "rangeend": "10.5.0.60"}]],
        "Routes": [{"Dst": "0.0.0.0/0", "GW": "10.5.0.1"}]}});
    let r = add(&HostLocal::new(), &c, "a", "eth0").unwrap();
    assert_eq!(addrs(&r), ["10.5.0.50/24"]);
    assert_eq!(r.routes.len(), 1);
    assert_eq!(r.routes[0].gw, Some("10.5.0.1".parse().unwrap()));
    assert!(tmp.path().join(NET).join("10.5.0.50").is_file());
}

#[test]
fn unknown_keys_are_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = ranges(
        tmp.path(),
        json!([[{"subnet": "10.5.0.0/24", "comment": 5}]]),
    );
    c["ipam"]["whatever"] = json!({"deep": [1, 2]});
    c["bridge"] = json!(7);
    c["args"] = json!({"other": true, "cni": {"labels": [1]}});
    assert_eq!(
        ip_of(&add(&HostLocal::new(), &c, "a", "eth0").unwrap()),
        "10.5.0.2"
    );
}

#[test]
fn known_keys_of_the_wrong_type_name_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let ok = || ranges(d, json!([[{"subnet": "10.5.0.0/24"}]]));
    let cases: Vec<(Value, &str)> = vec![
        (
            {
                let mut c = ok();
                c["ipam"]["dataDir"] = json!(5);
                c
            },
            "ipam.dataDir: invalid type: integer `5`, expected a string",
        ),
        (
            {
                let mut c = ok();
                c["ipam"]["ranges"] = json!({});
                c
            },
            "ipam.ranges: invalid type: map",
        ),
        (
            {
                let mut c = ok();
                c["ipam"]["ranges"] = json!(["10.0.0.0/8"]);
                c
            },
            "ipam.ranges[0]: invalid type: string",
        ),
        (
            ranges(d, json!([[{"subnet": 10}]])),
            "ipam.ranges[0][0].subnet: invalid type: integer `10`",
        ),
        (
            ranges(
                d,
                json!([[{"subnet": "10.5.0.0/24"}, {"subnet": "10.6.0.0/24", "rangeStart": ["x"]}]]),
            ),
            "ipam.ranges[0][1].rangeStart: invalid type: sequence",
        ),
        (
            {
                let mut c = ok();
                c["ipam"]["routes"] = json!([{"dst": 5}]);
                c
            },
            "ipam.routes[0].dst: invalid type",
        ),
        (
            {
                let mut c = ok();
                c["ipam"]["routes"] = json!([{"dst": "0.0.0.0/0", "mtu": -1}]);
                c
            },
            "ipam.routes[0].mtu: invalid value",
        ),
        (
            {
                let mut c = ok();
                c["ipam"]["resolvConf"] = json!(true);
                c
            },
            "ipam.resolvConf: invalid type: boolean",
        ),
        (
            {
                let mut c = ok();
                c["ipam"]["subnet"] = json!(1);
                c
            },
            "ipam.subnet: invalid type",
        ),
        (
            {
                let mut c = ok();
                c["ipam"] = json!("host-local");
                c
            },
            "ipam: invalid type: string",
        ),
        (
            with(ok(), "args", json!({"cni": {"ips": "10.5.0.9"}})),
            "args.cni.ips: invalid type: string",
        ),
        (
            with(ok(), "args", json!({"cni": {"ips": [9]}})),
            "args.cni.ips[0]: invalid type: integer",
        ),
        (
            with(ok(), "runtimeConfig", json!({"ips": [{"ip": "10.5.0.9"}]})),
            "runtimeConfig.ips[0]: invalid type: map",
        ),
        (
            with(
                ok(),
                "runtimeConfig",
                json!({"ipRanges": [{"subnet": "10.7.0.0/24"}]}),
            ),
            "runtimeConfig.ipRanges[0]: invalid type: map",
        ),
    ];
    for (c, details) in cases {
        invalid(&c, details);
    }
}

#[test]
fn missing_sections() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = conf("1.0.0", json!(null));
    c["ipam"] = Value::Null;
    invalid(&c, "ipam: missing");
    let c = conf("1.0.0", host_local(tmp.path(), json!({})));
    invalid(
        &c,
        "ipam.ranges: missing: host-local needs at least one range set",
    );
    invalid(&ranges(tmp.path(), json!([])), "ipam.ranges: missing");
    invalid(
        &ranges(tmp.path(), json!([[]])),
        "ipam.ranges[0]: empty range set",
    );
    invalid(
        &ranges(tmp.path(), json!([null])),
        "ipam.ranges[0]: empty range set",
    );
    invalid(
        &ranges(tmp.path(), json!([[{}]])),
        "ipam.ranges[0][0].subnet: missing",
    );
    invalid(
        &ranges(tmp.path(), json!([[{"subnet": ""}]])),
        "ipam.ranges[0][0].subnet: missing",
    );
    // Legacy keys without a subnet would be silently ignored by the reference.
    let c = conf(
        "1.0.0",
        host_local(
            tmp.path(),
            json!({"gateway": "10.0.0.1", "ranges": [[{"subnet": "10.0.0.0/24"}]]}),
        ),
    );
    invalid(&c, "ipam.gateway: set without ipam.subnet");
}

#[test]
fn subnets_too_small_or_with_host_bits() {
    // cni-SPEC §5 "Error" example: "Network 192.168.0.0/31 too small to allocate from".
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for subnet in ["192.168.0.0/31", "192.168.0.7/32", "fd00::/127"] {
        invalid(
            &ranges(d, json!([[{"subnet": subnet}]])),
            &format!("ipam.ranges[0][0].subnet: Network {subnet} too small to allocate from"),
        );
    }
    for (subnet, msg) in [
        (
            "10.0.0.1/24",
            "10.0.0.1/24 has host bits set; the network address for a /24 is 10.0.0.0",
        ),
        (
            "10.0.0.0/33",
            "\"10.0.0.0/33\" is not a subnet in CIDR notation",
        ),
        ("10.0.0.0", "\"10.0.0.0\" is not a subnet in CIDR notation"),
    ] {
        invalid(
            &ranges(d, json!([[{"subnet": subnet}]])),
            &format!("ipam.ranges[0][0].subnet: {msg}"),
        );
    }
    let c = conf("1.0.0", host_local(d, json!({"subnet": "192.168.0.0/31"})));
    invalid(
        &c,
        "ipam.subnet: Network 192.168.0.0/31 too small to allocate from",
    );
    // A /30 is the smallest that works: one address besides the gateway.
    let c = ranges(d, json!([[{"subnet": "192.168.0.0/30"}]]));
    let p = HostLocal::new();
    fills_in_order(
        &p,
        &c,
        &["192.168.0.2"],
        "ipam.ranges[0]: no IP addresses available",
    );
}

#[test]
fn range_bounds_and_gateway_must_be_in_the_subnet() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let r = |extra: Value| {
        let mut range = json!({"subnet": "10.0.0.0/24"});
        range
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        ranges(d, json!([[{"subnet": "10.9.0.0/24"}, range]]))
    };
    for (extra, details) in [
        (
            json!({"rangeStart": "10.0.1.1"}),
            "ipam.ranges[0][1].rangeStart: 10.0.1.1 is not in the subnet 10.0.0.0/24",
        ),
        (
            json!({"rangeEnd": "10.0.1.1"}),
            "ipam.ranges[0][1].rangeEnd: 10.0.1.1 is not in the subnet 10.0.0.0/24",
        ),
        (
            json!({"gateway": "10.0.1.1"}),
            "ipam.ranges[0][1].gateway: 10.0.1.1 is not in the subnet 10.0.0.0/24",
        ),
        (
            json!({"gateway": "fd00::1"}),
            "ipam.ranges[0][1].gateway: fd00::1 is an IPv6 address, the subnet 10.0.0.0/24 is IPv4",
        ),
        (
            json!({"rangeStart": "10.0.0.20", "rangeEnd": "10.0.0.10"}),
            "ipam.ranges[0][1].rangeStart: 10.0.0.20 is after rangeEnd 10.0.0.10",
        ),
        (
            json!({"rangeStart": "10.0.0.255"}),
            "ipam.ranges[0][1].rangeStart: 10.0.0.255 is after the default rangeEnd 10.0.0.254",
        ),
        (
            json!({"rangeEnd": "ten"}),
            "ipam.ranges[0][1].rangeEnd: \"ten\" is not an IP address",
        ),
    ] {
        invalid(&r(extra), details);
    }
    // "" means unset, as Go's net.IP decodes it.
    let c = r(json!({"rangeStart": "", "gateway": ""}));
    let p = HostLocal::new();
    assert_eq!(ip_of(&add(&p, &c, "a", "eth0").unwrap()), "10.9.0.2");
}

#[test]
fn overlaps_and_mixed_families() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    invalid(
        &ranges(d, json!([[{"subnet": "10.0.0.0/24"}, {"subnet": "10.0.0.0/16", "rangeStart": "10.0.0.254"}]])),
        "ipam.ranges[0][1]: range 10.0.0.254-10.0.255.254 overlaps with ipam.ranges[0][0] (10.0.0.1-10.0.0.254)",
    );
    invalid(
        &ranges(d, json!([[{"subnet": "10.0.0.0/24"}], [{"subnet": "10.1.0.0/24"}, {"subnet": "10.0.0.128/25"}]])),
        "ipam.ranges[1]: range set overlaps with range set ipam.ranges[0]: ipam.ranges[1][1] (10.0.0.129-10.0.0.254) overlaps ipam.ranges[0][0] (10.0.0.1-10.0.0.254)",
    );
    // The legacy range is a set of its own, first.
    let c = conf(
        "1.0.0",
        host_local(
            d,
            json!({"subnet": "10.0.0.0/24", "ranges": [[{"subnet": "10.0.0.0/24"}]]}),
        ),
    );
    invalid(
        &c,
        "ipam.ranges[0]: range set overlaps with range set ipam:",
    );
    invalid(
        &ranges(
            d,
            json!([[{"subnet": "10.0.0.0/24"}, {"subnet": "fd00::/64"}]]),
        ),
        "ipam.ranges[0][1].subnet: fd00::/64 is IPv6, but ipam.ranges[0][0] is IPv4",
    );
    // Disjoint ranges of one subnet, in one set or across sets, are fine.
    let c = ranges(
        d,
        json!([
        [{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.10", "rangeEnd": "10.0.0.10"}],
        [{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.20", "rangeEnd": "10.0.0.20"}]]),
    );
    let r = add(&HostLocal::new(), &c, "a", "eth0").unwrap();
    assert_eq!(addrs(&r), ["10.0.0.10/24", "10.0.0.20/24"]);
}

#[test]
fn old_versions_allow_one_address_per_family() {
    // CNI 0.1.0/0.2.0 results have one ip4 and one ip6.
    let tmp = tempfile::tempdir().unwrap();
    let two_v4 = json!([[{"subnet": "10.0.0.0/24"}], [{"subnet": "10.1.0.0/24"}]]);
    let c = conf("0.2.0", host_local(tmp.path(), json!({"ranges": two_v4})));
    rejected(
        &c,
        ErrorCode::IncompatibleVersion,
        "cniVersion: CNI 0.2.0 results hold at most one IPv4 and one IPv6 address",
    );
    let c = conf("0.3.1", host_local(tmp.path(), json!({"ranges": two_v4})));
    assert_eq!(
        add(&HostLocal::new(), &c, "a", "eth0").unwrap().ips.len(),
        2
    );
    let dual = json!([[{"subnet": "10.2.0.0/24"}], [{"subnet": "fd02::/64"}]]);
    let c = conf("0.2.0", host_local(tmp.path(), json!({"ranges": dual})));
    let r = add(&HostLocal::new(), &c, "a", "eth0").unwrap();
    assert_eq!(
        printed(&r, plexus_cni::CniVersion::V0_2_0),
        json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.2.0.2/24", "gateway": "10.2.0.1"},
               "ip6": {"ip": "fd02::2/64", "gateway": "fd02::1"}})
    );
}

#[test]
fn network_names_that_would_escape_data_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let good = ranges(&data, json!([[{"subnet": "10.0.0.0/24"}]]));
    for name in ["../escape", "..", ".", "a/b", "/etc", "", "bad\0name", "x/"] {
        let c = with(good.clone(), "name", json!(name));
        let p = HostLocal::new();
        for cmd in ["ADD", "DEL", "CHECK"] {
            let req = request(cmd, "ctr1", "eth0", "", &c).unwrap();
            let r = match cmd {
                "ADD" => p.add(&req).map(|_| ()),
                "DEL" => p.del(&req),
                _ => p.check(&req),
            };
            assert_err(r, ErrorCode::InvalidConfig, "name: ");
        }
        let c11 = with(c, "cniVersion", json!("1.1.0"));
        let e = assert_err(
            gc(&HostLocal::new(), &c11, &[]),
            ErrorCode::InvalidConfig,
            "name: ",
        );
        assert_err(
            status(&HostLocal::new(), &c11),
            ErrorCode::InvalidConfig,
            "name: ",
        );
        assert!(e.details.len() > "name: ".len());
    }
    let mut nameless = good.clone();
    nameless.as_object_mut().unwrap().remove("name");
    assert_err(
        add(&HostLocal::new(), &nameless, "a", "eth0"),
        ErrorCode::InvalidConfig,
        "name: missing",
    );
    // Nothing was created anywhere, not even dataDir.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn routes_are_validated_and_returned() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let with_routes = |routes: Value| {
        conf(
            "1.1.0",
            host_local(d, json!({"subnet": "10.0.0.0/24", "routes": routes})),
        )
    };
    invalid(
        &with_routes(json!([{"gw": "10.0.0.1"}])),
        "ipam.routes[0].dst: missing",
    );
    invalid(
        &with_routes(json!([{"dst": "0.0.0.0/0"}, {"dst": "10.0.0.0"}])),
        "ipam.routes[1].dst: \"10.0.0.0\" is not an address in CIDR notation",
    );
    invalid(&with_routes(json!([{"dst": "0.0.0.0/0", "gw": "fd00::1"}])), "ipam.routes[0].gw: fd00::1 and the destination 0.0.0.0/0 are of different address families");
    invalid(
        &with_routes(json!([{"dst": "0.0.0.0/0", "gw": "x"}])),
        "ipam.routes[0].gw: \"x\" is not an IP address",
    );
    let c = with_routes(
        json!([{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.0.0.254", "mtu": 1400, "table": 100}]),
    );
    let r = add(&HostLocal::new(), &c, "a", "eth0").unwrap();
    assert_eq!(
        printed(&r, plexus_cni::CniVersion::V1_1_0)["routes"],
        json!([{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.0.0.254", "mtu": 1400, "table": 100}])
    );
}

#[test]
fn resolv_conf_fills_dns() {
    let tmp = tempfile::tempdir().unwrap();
    let resolv = tmp.path().join("resolv.conf");
    std::fs::write(&resolv, "# test\nnameserver 10.0.0.10\nnameserver fd00::10\ndomain cluster.local\nsearch a.svc b.svc\noptions ndots:5\n").unwrap();
    let c = conf(
        "1.0.0",
        host_local(
            &tmp.path().join("d"),
            json!({"subnet": "10.0.0.0/24", "resolvConf": resolv.to_str().unwrap()}),
        ),
    );
    let r = add(&HostLocal::new(), &c, "a", "eth0").unwrap();
    assert_eq!(
        printed(&r, plexus_cni::CniVersion::V1_0_0)["dns"],
        json!({"nameservers": ["10.0.0.10", "fd00::10"], "domain": "cluster.local", "search": ["a.svc", "b.svc"], "options": ["ndots:5"]})
    );
    let c = conf(
        "1.0.0",
        host_local(
            &tmp.path().join("d2"),
            json!({"subnet": "10.0.0.0/24", "resolvConf": "/nonexistent/resolv.conf"}),
        ),
    );
    rejected(
        &c,
        ErrorCode::Io,
        "ipam.resolvConf: cannot read /nonexistent/resolv.conf",
    );
}

#[test]
fn requested_ips_must_fit_the_ranges() {
    let tmp = tempfile::tempdir().unwrap();
    let dual = ranges(
        tmp.path(),
        json!([[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.10", "rangeEnd": "10.0.0.20"}], [{"subnet": "fd00::/64"}]]),
    );
    let rc = |ips: Value| with(dual.clone(), "runtimeConfig", json!({"ips": ips}));
    invalid(&rc(json!(["10.0.0.5"])),
        "runtimeConfig.ips[0]: 10.0.0.5 is in no range set of this network (ipam.ranges[0]: 10.0.0.10-10.0.0.20; ipam.ranges[1]: fd00::1-fd00::ffff:ffff:ffff:ffff)");
    invalid(&rc(json!(["10.0.0.11", "10.0.0.12"])),
        "runtimeConfig.ips[1]: 10.0.0.12 and runtimeConfig.ips[0] (10.0.0.11) are both in range set ipam.ranges[0]");
    invalid(&rc(json!(["fd00::1"])),
        "runtimeConfig.ips[0]: fd00::1 is the gateway of ipam.ranges[1][0] (fd00::/64) and cannot be allocated");
    invalid(
        &rc(json!(["10.0.0.300"])),
        "runtimeConfig.ips[0]: \"10.0.0.300\" is not an IP address",
    );
    invalid(
        &rc(json!(["10.0.0.11/33"])),
        "runtimeConfig.ips[0]: \"10.0.0.11/33\" is not an address in CIDR notation",
    );
    let args = with(
        dual.clone(),
        "args",
        json!({"cni": {"ips": ["10.0.0.12", "192.168.1.1"]}}),
    );
    invalid(&args, "args.cni.ips[1]: 192.168.1.1 is in no range set");
    // CNI_ARGS errors are environment errors (code 4).
    rejected_args(
        &dual,
        "IP=10.0.0.99",
        ErrorCode::InvalidEnvironment,
        "CNI_ARGS IP=10.0.0.99: 10.0.0.99 is in no range set",
    );
    rejected_args(
        &dual,
        "IP=nope",
        ErrorCode::InvalidEnvironment,
        "CNI_ARGS: IP: \"nope\" is not an IP address",
    );
    // The reference reads CNI_ARGS into a struct with only IP.
    rejected_args(
        &dual,
        "K8S_POD_NAME=web",
        ErrorCode::InvalidEnvironment,
        "CNI_ARGS: unknown argument \"K8S_POD_NAME\"",
    );
    let p = HostLocal::new();
    let r = add_args(&p, &dual, "a", "eth0", "IgnoreUnknown=1;K8S_POD_NAME=web").unwrap();
    assert_eq!(addrs(&r), ["10.0.0.10/24", "fd00::2/64"]);
}
