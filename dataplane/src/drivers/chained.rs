//! What the chained ("meta") plugins share: reading the attachment from a
//! request, opening the pod's namespace, and turning data-plane failures
//! into CNI errors that name what failed.

use std::fmt::Display;

use plexus_cni::env::{CniCommand, CNI_CONTAINERID, CNI_IFNAME, CNI_NETNS};
use plexus_cni::error::codes;
use plexus_cni::skel::Request;
use plexus_cni::{CniError, CniResult, ErrorCode};

use super::common::open_pod_ns;
use crate::error::Error;
use crate::netns::NetNs;

/// cni-SPEC §3 "Chained plugins": a chained plugin acts on the result of
/// the plugins before it, so ADD and CHECK need `prevResult`.
pub(crate) fn prev_result<'a>(req: &'a Request, plugin: &str) -> Result<&'a CniResult, CniError> {
    req.prev_result.as_ref().ok_or_else(|| {
        CniError::invalid_config(
            "prevResult",
            format!("missing: {plugin} is a chained plugin and works on the result of the plugins before it"),
        )
    })
}

pub(crate) fn container_id(req: &Request) -> Result<&str, CniError> {
    req.env
        .container_id
        .as_deref()
        .ok_or_else(|| CniError::invalid_env(CNI_CONTAINERID, "not set"))
}

pub(crate) fn ifname(req: &Request) -> Result<&str, CniError> {
    req.env
        .ifname
        .as_deref()
        .ok_or_else(|| CniError::invalid_env(CNI_IFNAME, "not set"))
}

/// The pod's namespace. A namespace that does not exist (any more) is code 3.
pub(crate) fn open_netns(req: &Request) -> Result<NetNs, CniError> {
    let path = req
        .env
        .netns
        .as_deref()
        .ok_or_else(|| CniError::invalid_env(CNI_NETNS, "not set"))?;
    open_pod_ns(path, req.env.command)?.ok_or_else(|| {
        CniError::new(
            ErrorCode::UnknownContainer,
            "container unknown or does not exist",
            format!(
                "{CNI_NETNS}: {} is not a network namespace (any more)",
                path.display()
            ),
        )
    })
}

/// The pod's namespace for a DEL: `None` when the runtime sent none or it is
/// already gone, in which case everything that lived in it is gone too (or
/// it is the node's, where nothing of a pod lives: see `open_pod_ns`).
pub(crate) fn open_netns_for_del(req: &Request) -> Result<Option<NetNs>, CniError> {
    match req.env.netns.as_deref() {
        None => Ok(None),
        Some(path) => open_pod_ns(path, CniCommand::Del),
    }
}

/// A data-plane failure while doing `what` (code 103, "plugin failed").
pub(crate) fn failed(what: impl Display, e: &Error) -> CniError {
    CniError::plugin(
        codes::PLUGIN_FAILED,
        "plugin failed",
        format!("{what}: {e}"),
    )
}

/// A state that CHECK found different from what the configuration asks
/// (code 103): `what: reason`.
pub(crate) fn mismatch(what: impl Display, reason: impl Display) -> CniError {
    CniError::plugin(
        codes::PLUGIN_FAILED,
        "check failed",
        format!("{what}: {reason}"),
    )
}
