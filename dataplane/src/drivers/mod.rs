//! The built-in plugins of the data plane. Each implements
//! `plexus_cni::skel::Plugin` with the reference plugin's config keys, result
//! and DEL semantics; the executor's registry maps a `type` to one of them
//! through [`driver`], and execs the binary for every other type.

pub mod bandwidth;
mod chained;
pub mod tuning;

use plexus_cni::delegate::Resolver;
use plexus_cni::skel::Plugin;

/// The plugin types served in-process.
pub fn builtin_types() -> &'static [&'static str] {
    &["tuning", "bandwidth"]
}

/// The built-in plugin for `plugin_type`; `resolver` reaches IPAM plugins for
/// the drivers that delegate to one.
pub fn driver<'r>(plugin_type: &str, _resolver: &'r dyn Resolver) -> Option<Box<dyn Plugin + 'r>> {
    match plugin_type {
        "tuning" => Some(Box::new(tuning::Tuning::new())),
        "bandwidth" => Some(Box::new(bandwidth::Bandwidth::new())),
        _ => None,
    }
}
