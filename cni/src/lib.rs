//! The CNI protocol (cni-SPEC.md §1–5 and cni-CONVENTIONS.md) as plexus speaks it:
//! environment, CNI_ARGS, network configuration and config lists, results of every
//! version 0.1.0 – 1.1.0 with conversion, errors, and the plugin-side protocol
//! driver; and the device information a device plugin or a CNI plugin writes
//! (device-info-SPEC.md). Shared by the `plexus` binary, the data plane and IPAM.

pub mod args;
pub mod call_log;
pub mod casefold;
pub mod config;
pub mod delegate;
pub mod deviceinfo;
pub mod durable;
pub mod env;
pub mod error;
pub mod flock;
pub mod go_json;
pub mod names;
pub mod result;
pub mod skel;
pub mod version;
pub mod whole_file;

pub use error::{CniError, ErrorCode};
pub use result::CniResult;
pub use version::CniVersion;
