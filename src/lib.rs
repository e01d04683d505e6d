//! plexus: a CNI plugin that attaches Kubernetes pods to many networks at once,
//! implementing the Network Plumbing WG's multi-net spec v1.3.
//!
//! Layers, top to bottom (see README "Architecture"):
//! - [`cli`]: the `plexus` command line; the same binary is the CNI plugin.
//! - [`plugin`]: plexus as a CNI plugin (what a runtime invokes).
//! - [`daemon`]: thick mode, `plexus daemon` and the shim that forwards to it.
//! - [`claims`]: persistent IPs through IPAMClaims (§8).
//! - [`install`]: `plexus install`, the DaemonSet's entrypoint.
//! - [`readiness`]: waiting for the cluster network (§6.1.2).
//! - [`auxiliary`]: Multus's auxiliary CNI chain, run for every pod.
//! - [`plan`]: pod + NADs + default network → the ordered attachment plan (pure).
//! - [`config`]: plexus's own CNI conf (Multus-compatible keys).
//! - [`logging`]: `logFile`, `logLevel`, `logToStderr`, `logOptions`.
//! - [`devices`]: which device kubelet allocated to the pod each network backed
//!   by a device-plugin resource gets (kubelet's PodResources API).
//! - [`manifest`]: Kubernetes manifests (YAML/JSON) read from files.
//! - [`netattach`]: the multi-net spec model (NAD, selection, status, IPAMClaim).
//! - [`run`]: executes a plan: plugin chains (built-in or exec'd), prevResult,
//!   rollback, DEL/CHECK/GC from the [`cache`] of what was attempted.
//! - [`cni`]: the CNI protocol (env, config, results, errors, versions), its own
//!   crate `plexus-cni` so the data plane and IPAM share it.

pub mod auxiliary;
pub mod cache;
pub mod claims;
pub mod cli;
pub mod cluster;
/// The CNI protocol layer (the `plexus-cni` crate).
pub use plexus_cni as cni;
pub mod config;
pub mod daemon;
pub mod demo;
pub mod devices;
pub mod hotplug;
pub mod install;
pub mod logging;
pub mod manifest;
pub mod netattach;
pub mod plan;
pub mod plugin;
pub mod readiness;
pub mod run;
