//! plexus: a CNI plugin that attaches Kubernetes pods to many networks at once,
//! implementing the Network Plumbing WG's multi-net spec v1.3.
//!
//! Layers, top to bottom (see README "Architecture"). A module imports only
//! from the layers below its own; `.ci/import-cycles` checks this list.
//! - [`cli`]: the `plexus` command line; the same binary is the CNI plugin.
//! - [`commands`]: the other commands: [`commands::daemon`] (thick mode,
//!   `plexus daemon`), [`commands::install`] (`plexus install`, the
//!   DaemonSet's entrypoint), [`commands::demo`], `plan`, `status`, `pools`.
//! - [`plugin`]: plexus as a CNI plugin (what a runtime invokes): the
//!   composition root, and [`plugin::shim`] with its protocol
//!   [`plugin::wire`], which forwards a call to the daemon.
//! - [`pipeline`]: ADD, DEL, CHECK, GC and STATUS end to end, for the
//!   plugin process, the daemon's calls and hot-plug alike: readiness
//!   ([`pipeline::readiness`], §6.1.2, which waits), pod, plan, claims,
//!   executor, publishing ([`pipeline::publish`]), claim release.
//! - [`whereabouts`]: `"ipam": {"type": "whereabouts"}` in-process, a
//!   built-in plugin of the executor's registry: its client of whereabouts'
//!   objects ([`whereabouts::pools`]), its reconciler and its metrics.
//! - [`run`]: executes a plan: plugin chains (built-in or exec'd), prevResult,
//!   rollback, DEL/CHECK/GC from the [`record`] of what was attempted.
//! - [`conf_files`]: the CNI config files on disk that planning asks for
//!   (`confDir`, networks given as paths, the auxiliary chain's files).
//! - [`plan`]: pod + NADs + default network → the ordered attachment plan,
//!   pure: what it reads comes through traits its callers implement (NADs,
//!   [`plan::ConfFiles`], [`plan::devices::DeviceSource`] for the device
//!   kubelet allocated to each network backed by a device-plugin resource).
//!   Also [`plan::claims`] (persistent IPs through IPAMClaims, §8),
//!   [`plan::auxiliary`] (Multus's auxiliary CNI chain) and [`plan::hotplug`]
//!   (what a running sandbox must change to match its annotation).
//! - [`record`]: the crash-safe record of each ADD, which DELs are owed.
//! - [`attachment`]: the plan's types, a leaf the executor and the record share.
//! - [`cluster`]: pods, NADs and IPAMClaims from a manifest directory or the
//!   API server; status, events, watches, the Lease; the pod's DRA claims
//!   read for [`dra`] (`cluster::dra`).
//! - [`dra`]: Dynamic Resource Allocation's ResourceClaims and
//!   ResourceSlices as the Multus contract reads them, and which devices a
//!   pod's claims give its networks (pure); [`dra::driver`], plexus as a
//!   DRA driver: the node's devices, their slices, Prepare's checks, the
//!   reservations and CDI specs, the claimed devices' networks.
//! - [`netpolicy`]: MultiNetworkPolicy, from spec to an nftables table.
//! - [`sandbox_dir`]: the per-sandbox lock and notes every process shares.
//! - [`config`]: plexus's own CNI conf (Multus-compatible keys).
//! - [`policy`]: which networks a pod may get (the conf's selection keys).
//! - [`logging`]: `logFile`, `logLevel`, `logToStderr`, `logOptions`.
//! - [`manifest`]: Kubernetes manifests (YAML/JSON) read from files.
//! - [`netattach`]: the multi-net spec model (NAD, selection, status, IPAMClaim).
//! - [`phases`]: where one call's time goes (`PLEXUS_PHASES`).
//! - [`cni`]: the CNI protocol (env, config, results, errors, versions), its own
//!   crate `plexus-cni` so the data plane and IPAM share it.

pub mod attachment;
pub mod cli;
pub mod cluster;
pub mod commands;
pub mod conf_files;
pub mod dra;
pub mod whereabouts;
/// The CNI protocol layer (the `plexus-cni` crate).
pub use plexus_cni as cni;
pub mod config;
pub mod logging;
pub mod manifest;
pub mod netattach;
pub mod netpolicy;
pub mod phases;
pub mod pipeline;
pub mod plan;
pub mod plugin;
pub mod policy;
pub mod record;
pub mod run;
pub mod sandbox_dir;
