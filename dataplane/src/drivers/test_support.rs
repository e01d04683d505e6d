//! What the drivers' unit tests share: requests and configurations as a
//! runtime would send them, and the check of a refused configuration.

use crate::drivers::error::DriverError;

use plexus_cni::skel::Request;
use serde_json::Value;

/// An ADD request for the drivers' unit tests: container `ctr1` in
/// `/var/run/netns/x`, CNI_IFNAME `eth0`, `CNI_ARGS` `args`, `config` (an
/// object) on stdin.
pub(crate) fn unit_test_request(config: Value, args: &str) -> Request {
    let env = plexus_cni::env::CniEnv::Add(plexus_cni::env::AttachmentParams {
        container_id: plexus_cni::names::ContainerId::new("ctr1").unwrap(),
        netns: Some(plexus_cni::names::NetnsPath::new("/var/run/netns/x").unwrap()),
        ifname: plexus_cni::names::IfName::new("eth0").unwrap(),
        args: plexus_cni::args::CniArgs::parse(args).unwrap(),
        path: Vec::new(),
    });
    let Value::Object(map) = config else {
        panic!("the configuration must be an object: {config}")
    };
    Request::from_config(env, map).unwrap()
}

/// `base` (an object) with the keys of `config` set over it, for the
/// drivers' unit tests.
pub(crate) fn unit_test_config(mut base: Value, config: &Value) -> Value {
    for (k, v) in config.as_object().unwrap() {
        base[k] = v.clone();
    }
    base
}

/// A drivers' unit test's refusal of `config`: `parsed` must be a
/// configuration error about `key`, found by the driver or by decoding
/// (the protocol crate's code 7). Returns the reason.
pub(crate) fn unit_test_refused<T: std::fmt::Debug>(
    parsed: Result<T, DriverError>,
    config: &Value,
    key: &str,
) -> String {
    match parsed.expect_err(&config.to_string()) {
        DriverError::Config { field, reason } if field == key => reason,
        DriverError::Cni(e) if e.code == plexus_cni::ErrorCode::InvalidConfig => e
            .details
            .strip_prefix(&format!("{key}: "))
            .unwrap_or_else(|| panic!("{config}: {e}"))
            .to_string(),
        e => panic!("{config}: {e:?}"),
    }
}
