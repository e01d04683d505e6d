//! A built-in plugin's network configuration (the NAD's `config`, or one
//! plugin of a conflist, as plexus hands it to bridge, host-device, ipoib,
//! ipvlan, macvlan, sriov, vdpa, vlan, tuning or bandwidth): any JSON object
//! must validate or give an error naming the key, never a panic. Each input
//! goes to every built-in's `validate`, which reads the configuration only:
//! nothing touches the system, and no IPAM plugin is ever asked.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus::cni::delegate::Resolver;
use plexus::cni::env::{AttachmentParams, CniCommand, CniEnv};
use plexus::cni::error::CniError;
use plexus::cni::names::{NetnsPath, PluginType};
use plexus::cni::skel::{Plugin, Request};
use plexus_dataplane::drivers::BUILTINS;
use plexus_dataplane::Session;

/// Validation never resolves the IPAM plugin; were it asked, it fails.
struct NoIpam;

impl Resolver for NoIpam {
    fn resolve(&self, t: &PluginType, _: &Request) -> Result<Box<dyn Plugin + '_>, CniError> {
        panic!("validate resolved the plugin {t}")
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(serde_json::Value::Object(config)) = serde_json::from_slice(data) else {
        return;
    };
    let mut params = AttachmentParams::new("fuzz", "net1").unwrap();
    params.netns = Some(NetnsPath::new("/var/run/netns/fuzz").unwrap());
    let env = CniEnv::for_attachment(CniCommand::Add, params).unwrap();
    let Ok(req) = Request::from_config(env, config) else {
        return;
    };
    let session = Session::new();
    for builtin in BUILTINS {
        let plugin = (builtin.build)(&NoIpam, &session);
        let _ = plugin.validate(&req);
    }
});
