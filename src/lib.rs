//! plexus: a CNI plugin that attaches Kubernetes pods to many networks at once,
//! implementing the Network Plumbing WG's multi-net spec v1.3.
//!
//! Layers, top to bottom (see README "Architecture"):
//! - [`cli`]: the `plexus` command line; the same binary is the CNI plugin.
//! - [`plugin`]: plexus as a CNI plugin (what a runtime invokes).
//! - [`commands`]: the other commands: [`commands::daemon`] (thick mode,
//!   `plexus daemon` and the shim that forwards to it), [`commands::install`]
//!   (`plexus install`, the DaemonSet's entrypoint) and [`commands::demo`].
//! - [`plan`]: pod + NADs + default network → the ordered attachment plan
//!   (pure), with what planning reads: [`plan::devices`] (the device kubelet
//!   allocated to each network backed by a device-plugin resource),
//!   [`plan::claims`] (persistent IPs through IPAMClaims, §8),
//!   [`plan::readiness`] (waiting for the cluster network, §6.1.2),
//!   [`plan::auxiliary`] (Multus's auxiliary CNI chain) and [`plan::hotplug`]
//!   (what a running sandbox must change to match its annotation).
//! - [`config`]: plexus's own CNI conf (Multus-compatible keys).
//! - [`logging`]: `logFile`, `logLevel`, `logToStderr`, `logOptions`.
//! - [`manifest`]: Kubernetes manifests (YAML/JSON) read from files.
//! - [`netattach`]: the multi-net spec model (NAD, selection, status, IPAMClaim).
//! - [`run`]: executes a plan: plugin chains (built-in or exec'd), prevResult,
//!   rollback, DEL/CHECK/GC from the [`record`] of what was attempted.
//! - [`cni`]: the CNI protocol (env, config, results, errors, versions), its own
//!   crate `plexus-cni` so the data plane and IPAM share it.

pub mod cli;
pub mod cluster;
pub mod cluster_ipam;
pub mod commands;
/// The CNI protocol layer (the `plexus-cni` crate).
pub use plexus_cni as cni;
pub mod config;
pub mod logging;
pub mod manifest;
pub mod netattach;
pub mod netpolicy;
pub mod phases;
pub mod plan;
pub mod plugin;
pub mod policy;
pub mod record;
pub mod run;
