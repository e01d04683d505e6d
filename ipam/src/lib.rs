//! plexus's IP address management: the `host-local` and `static` IPAM
//! plugins, run in-process behind [`plexus_cni::skel::Plugin`] (no exec), with
//! the configuration keys and behaviour of the reference plugins
//! (containernetworking/plugins) and, for host-local, their on-disk format.
//!
//! An IPAM plugin receives the complete configuration of the plugin that
//! delegates to it and reads its `ipam` section (cni-SPEC §4); its ADD result
//! has addresses without interface indexes and no interfaces (cni-SPEC §5
//! "Delegated plugins"), in the request's version.
//!
//! See [`host_local`] and [`static_ipam`] for what is reference-compatible
//! and what plexus adds.

pub mod host_local;
pub mod static_ipam;
pub mod whereabouts;

mod common;
mod error;
mod range;
mod resolv;
mod store;

pub use error::IpamError;
pub use host_local::HostLocal;
pub use static_ipam::Static;
/// The parsers of host-local's files on disk, for the fuzz targets.
pub use store::{parse_last_reserved, HolderId, Owner};

use plexus_cni::skel::Plugin;

/// Plugin-specific error codes of plexus IPAM (cni-SPEC §5: 100 and up are
/// the plugin's; plexus-cni's own `codes` start at 100, these at 110).
pub mod codes {
    /// A requested address is allocated to another attachment.
    pub const ADDRESS_IN_USE: u32 = 110;
    /// A range set has no free address left.
    pub const RANGE_EXHAUSTED: u32 = 111;
    /// The attachment already holds an address in the range set.
    pub const DUPLICATE_ALLOCATION: u32 = 112;
    /// CHECK found the attachment's addresses differ from the configuration.
    pub const CHECK_MISMATCH: u32 = 113;
}

/// The built-in IPAM plugin serving `ipam.type`, if plexus has one:
/// `host-local` or `static`. Both work from their configuration and files
/// alone, never from the container's interface.
pub fn builtin(plugin_type: &str) -> Option<Box<dyn Plugin + Send + Sync>> {
    BUILTINS
        .iter()
        .find(|b| b.plugin_type == plugin_type)
        .map(|b| (b.build)())
}

/// One built-in IPAM plugin type.
pub struct Builtin {
    pub plugin_type: &'static str,
    pub build: fn() -> Box<dyn Plugin + Send + Sync>,
}

/// The registration table of the built-in IPAM plugins.
pub const BUILTINS: &[Builtin] = &[
    Builtin {
        plugin_type: "host-local",
        build: || Box::new(HostLocal::new()),
    },
    Builtin {
        plugin_type: "static",
        build: || Box::new(Static),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_serves_host_local_and_static() {
        assert!(builtin("host-local").is_some());
        assert!(builtin("static").is_some());
        for other in ["dhcp", "whereabouts", "", "Host-Local"] {
            assert!(builtin(other).is_none(), "{other}");
        }
    }
}
