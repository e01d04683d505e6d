//! The test kit's device plugin ([`plexus_testkit::device_plugin`]) as a
//! process, for a node run by hand (`testkit/node-up`'s `node-exec`):
//!
//!   plexus-test-device-plugin RESOURCE DEVICE_ID... [--plugin-dir DIR] [--devinfo-dir DIR]
//!
//! It registers RESOURCE's devices (PCI addresses) with kubelet and serves
//! them until SIGTERM or SIGINT, then removes its socket and the
//! device-info files it wrote. Tests run the same plugin in their own
//! process instead.

use std::path::PathBuf;

use nix::sys::signal::{SigSet, Signal};
use plexus_testkit::device_plugin::{Config, DevicePlugin, DEVINFO_DIR, PLUGIN_DIR};

fn main() {
    // Blocked before any thread starts, so every thread inherits the mask
    // and only the wait below takes the signals.
    let signals = termination_signals();
    let mut config = Config {
        plugin_dir: PLUGIN_DIR.into(),
        devinfo_dir: DEVINFO_DIR.into(),
        resource: String::new(),
        devices: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    let mut positional = Vec::new();
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            PathBuf::from(
                args.next()
                    .unwrap_or_else(|| usage(&format!("{flag} needs a value"))),
            )
        };
        match arg.as_str() {
            "--plugin-dir" => config.plugin_dir = value("--plugin-dir"),
            "--devinfo-dir" => config.devinfo_dir = value("--devinfo-dir"),
            flag if flag.starts_with('-') => usage(&format!("unknown option {flag}")),
            _ => positional.push(arg),
        }
    }
    let Some((resource, devices)) = positional.split_first() else {
        usage("RESOURCE is missing");
    };
    if devices.is_empty() {
        usage("no DEVICE_ID");
    }
    config.resource = resource.clone();
    config.devices = devices.to_vec();
    let plugin = DevicePlugin::start(config).unwrap_or_else(|e| {
        eprintln!("plexus-test-device-plugin: {e}");
        std::process::exit(1)
    });
    eprintln!(
        "plexus-test-device-plugin: registered {resource} ({} devices)",
        devices.len()
    );
    wait_for(&signals);
    drop(plugin);
}

fn usage(why: &str) -> ! {
    eprintln!(
        "plexus-test-device-plugin: {why}\nusage: plexus-test-device-plugin RESOURCE DEVICE_ID... \
         [--plugin-dir DIR] [--devinfo-dir DIR]"
    );
    std::process::exit(2)
}

/// SIGTERM and SIGINT, blocked in this thread (and so in the ones it starts).
fn termination_signals() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.thread_block().expect("block SIGTERM and SIGINT");
    set
}

fn wait_for(signals: &SigSet) {
    let _ = signals.wait();
}
