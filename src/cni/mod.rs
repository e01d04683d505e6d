//! The CNI protocol, cni-SPEC.md §1–5 and cni-CONVENTIONS.md.

pub mod args;
pub mod casefold;
pub mod config;
pub mod env;
pub mod error;
pub mod names;
pub mod result;
pub mod skel;
pub mod version;

pub use error::{CniError, ErrorCode};
pub use result::CniResult;
pub use version::CniVersion;
