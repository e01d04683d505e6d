//! plexus: a CNI plugin that attaches Kubernetes pods to many networks at once,
//! implementing the Network Plumbing WG's multi-net spec v1.3.
//!
//! Layers, top to bottom (see README "Architecture"):
//! - [`cli`]: the `plexus` command line; the same binary is the CNI plugin.
//! - [`plugin`]: plexus as a CNI plugin (what a runtime invokes).
//! - [`plan`]: pod + NADs + default network → the ordered attachment plan (pure).
//! - [`config`]: plexus's own CNI conf (Multus-compatible keys).
//! - [`manifest`]: Kubernetes manifests (YAML/JSON) read from files.
//! - [`netattach`]: the multi-net spec model (NAD, selection, status, IPAMClaim).
//! - [`cni`]: the CNI protocol (env, config, results, errors, versions).

pub mod cli;
pub mod cni;
pub mod config;
pub mod manifest;
pub mod netattach;
pub mod plan;
pub mod plugin;
