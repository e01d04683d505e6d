//! plexus's commands besides the CNI plugin itself ([`crate::plugin`]):
//! thick mode's daemon and shim, the DaemonSet's installer, and the demo.

pub mod daemon;
pub mod demo;
pub mod install;
