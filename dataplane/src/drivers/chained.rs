//! What the chained ("meta") plugins share: reading the attachment from a
//! request, opening the pod's namespace, and turning data-plane failures
//! into CNI errors that name what failed.

use std::fmt::Display;

use plexus_cni::env::{CNI_CONTAINERID, CNI_IFNAME, CNI_NETNS};
use plexus_cni::error::codes;
use plexus_cni::skel::Request;
use plexus_cni::{CniError, CniResult, ErrorCode};

use crate::error::{Errno, Error};
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
    NetNs::open(path).map_err(|e| {
        if netns_gone(&e) {
            CniError::new(
                ErrorCode::UnknownContainer,
                "container unknown or does not exist",
                format!("{CNI_NETNS}: {e}"),
            )
        } else {
            failed(CNI_NETNS, &e)
        }
    })
}

/// The pod's namespace for a DEL: `None` when the runtime sent none or it is
/// already gone (deleted: ENOENT; bind mount removed, file left: EINVAL), in
/// which case everything that lived in it is gone too.
pub(crate) fn open_netns_for_del(req: &Request) -> Result<Option<NetNs>, CniError> {
    let Some(path) = req.env.netns.as_deref() else {
        return Ok(None);
    };
    match NetNs::open(path) {
        Ok(ns) => Ok(Some(ns)),
        Err(e) if netns_gone(&e) => Ok(None),
        Err(e) => Err(failed(CNI_NETNS, &e)),
    }
}

fn netns_gone(e: &Error) -> bool {
    matches!(e.errno(), Some(Errno::ENOENT | Errno::EINVAL))
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
