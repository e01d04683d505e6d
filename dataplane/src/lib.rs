//! plexus's in-process data plane: network namespaces, one netlink socket per
//! namespace, and namespace-scoped sysctls. The built-in drivers build on
//! these; nothing here knows about CNI JSON.
//!
//! - [`netns`]: namespace handles; code that must run *inside* a namespace
//!   runs on a short-lived dedicated thread (see the module docs for why).
//! - [`error`]: the one [`Error`] type, carrying the operation, the object and
//!   the kernel errno.

pub mod error;
pub mod mac;
pub mod netns;

pub use error::{Errno, Error, Result};
pub use mac::MacAddr;
pub use netns::NetNs;
