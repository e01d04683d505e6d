//! What the pipeline writes back to the cluster after a sandbox's networks
//! changed: the pod's network-status (§5), the bound IPAMClaims' status
//! (§8.2) and events, worded as Multus words them; and, after attachments
//! went, the release of a deleted claim's addresses (§8).

use std::path::Path;

use crate::cluster::api::ClaimStatus;
use crate::cluster::dra_driver::DeviceStatus;
use crate::cluster::events::{EventType, PodEvent};
use crate::cluster::kube::Publication;
use crate::cluster::{Cluster, ClusterError, Publisher};
use crate::cni::error::CniError;
use crate::cni::result::CniResult;
use crate::netattach::pod::Pod;
use crate::netattach::status::NetworkStatus;
use crate::plan::{self, claims};
use crate::record::{Record, State};
use crate::run::claims::{self as claim_book, ClaimBook};
use crate::run::AttachmentResult;

/// Write the pod's `network_status`, the claims' status, the claimed
/// devices' (KEP-4817) and the events
/// (best effort; a pod or claim deleted meanwhile is no failure): what did
/// not go through, as warnings.
pub fn publish(
    kube: &dyn Publisher,
    pod: &Pod,
    network_status: &[NetworkStatus],
    claims: Vec<ClaimStatus>,
    devices: Vec<DeviceStatus>,
    events: Vec<PodEvent>,
) -> Result<Vec<String>, ClusterError> {
    let published = kube.publish(&Publication {
        pod,
        network_status,
        claims,
        devices,
        events,
    })?;
    let mut warnings = Vec::new();
    if !published.pod_found {
        warnings.push("the pod was deleted before its network-status was written".into());
    }
    warnings.extend(
        published
            .gone_claims
            .iter()
            .map(|claim| format!("IPAMClaim {claim} was deleted before its status was written")),
    );
    warnings.extend(
        published
            .event_failures
            .iter()
            .map(|failure| format!("event not posted: {failure}")),
    );
    warnings.extend(
        published
            .device_failures
            .iter()
            .map(|failure| format!("claim status not written: {failure}")),
    );
    Ok(warnings)
}

/// The Warning event of attachments that failed: `AttachmentFailed`, with
/// the CNI error's details.
pub fn failed(kube: &dyn Publisher, pod: &Pod, error: &CniError) {
    let event = PodEvent {
        event_type: EventType::Warning,
        reason: "AttachmentFailed",
        message: error.details.clone(),
    };
    let _ = kube.post_events(pod, &[event]);
}

/// The network-status of a plan's networks, from their results.
pub fn network_status(plan: &plan::Plan, results: &[AttachmentResult]) -> Vec<NetworkStatus> {
    plan.attachments
        .iter()
        .zip(results)
        .map(|(att, r)| att.network_status(r.result.as_ref(), r.device_info.as_ref()))
        .collect()
}

/// The network-status of a sandbox from its record: the networks added (an
/// auxiliary chain is none).
pub fn recorded_status(record: &Record) -> Vec<NetworkStatus> {
    record
        .attachments
        .iter()
        .filter(|c| c.state == State::Added && !c.attachment.is_auxiliary())
        .map(|c| {
            c.attachment
                .network_status(c.result.as_ref(), c.device_info.as_ref())
        })
        .collect()
}

/// A Normal `AddedInterface` event per attachment added, as Multus words it
/// (`Add net1 [10.1.1.5/24] from ns/net`).
pub fn added_events(status: &[NetworkStatus], results: &[AttachmentResult]) -> Vec<PodEvent> {
    status
        .iter()
        .zip(results)
        .map(|(entry, r)| PodEvent {
            event_type: EventType::Normal,
            reason: "AddedInterface",
            message: format!(
                "Add {} [{}] from {}",
                entry.interface.as_deref().unwrap_or("?"),
                with_prefixes(&entry.ips, r.result.as_ref()).join(","),
                entry.name
            ),
        })
        .collect()
}

/// A Warning `InvalidDeviceInfo` event per device-info warning of the results.
pub fn device_info_warnings(results: &[AttachmentResult]) -> impl Iterator<Item = PodEvent> + '_ {
    results
        .iter()
        .flat_map(|r| &r.warnings)
        .map(|w| warning("InvalidDeviceInfo", w))
}

/// A Warning `InvalidNetworkSelection` event per planner warning.
pub fn selection_warnings(warnings: &[String]) -> impl Iterator<Item = PodEvent> + '_ {
    warnings
        .iter()
        .map(|w| warning("InvalidNetworkSelection", w))
}

/// A Warning event.
pub fn warning(reason: &'static str, message: &str) -> PodEvent {
    PodEvent {
        event_type: EventType::Warning,
        reason,
        message: message.to_string(),
    }
}

/// The status entry's addresses with their prefixes from the result, as
/// Multus's `AddedInterface` event shows them (`[10.1.1.5/24]`).
fn with_prefixes(ips: &[String], result: Option<&CniResult>) -> Vec<String> {
    let configs = result.map(|r| r.ips.as_slice()).unwrap_or_default();
    ips.iter()
        .map(|ip| {
            configs
                .iter()
                .find(|c| c.address.ip().to_string() == *ip)
                .map_or_else(|| ip.clone(), |c| c.address.to_string())
        })
        .collect()
}

/// The status of each bound claim (§8.2): the addresses its attachment got.
pub(crate) fn claim_statuses(
    claims: &[claims::Bound],
    results: &[AttachmentResult],
) -> Vec<ClaimStatus> {
    claims
        .iter()
        .map(|c| ClaimStatus {
            namespace: c.namespace.clone(),
            name: c.name.clone(),
            ips: results[c.attachment]
                .result
                .iter()
                .flat_map(|r| &r.ips)
                .map(|ip| ip.address.to_string())
                .collect(),
        })
        .collect()
}

/// After attachments were DELed: release the addresses of their claims
/// that were deleted (a claim that exists keeps them, §8); what happened,
/// as warnings.
pub(crate) fn release_deleted_claims(
    cni_dir: &Path,
    cluster: &dyn Cluster,
    detached: &[plan::Attachment],
) -> Vec<String> {
    let owners = claims::owners_in(detached);
    if owners.is_empty() {
        return Vec::new();
    }
    sweep_warnings(claim_book::sweep(
        &ClaimBook::new(cni_dir),
        cluster,
        Some(&owners),
    ))
    .collect()
}

/// What a claim sweep says, as warnings: releases are worth a line too.
pub(crate) fn sweep_warnings(swept: claim_book::Swept) -> impl Iterator<Item = String> {
    let released = swept
        .released
        .into_iter()
        .map(|c| format!("IPAMClaim {c} was deleted: its addresses are released"));
    released.chain(swept.warnings)
}

/// KEP-4817: the `status.devices[]` entry of each claimed device of the
/// plan, with the network data of its attachment's result: its interface
/// in the pod, the addresses on it (with prefix length), its MAC.
pub fn claimed_device_statuses(
    claimed: &[crate::plan::ClaimedAttachment],
    results: &[AttachmentResult],
) -> Vec<DeviceStatus> {
    claimed
        .iter()
        .filter_map(|c| {
            let attached = results.iter().find(|r| r.ifname == c.ifname)?;
            let result = attached.result.as_ref();
            let in_pod = |i: &crate::cni::result::Interface| {
                i.name == c.ifname.as_str() && i.sandbox.as_deref().is_some_and(|s| !s.is_empty())
            };
            let interface = result.and_then(|r| r.interfaces.iter().position(in_pod));
            let ips = result
                .into_iter()
                .flat_map(|r| &r.ips)
                .filter(|ip| interface.is_none() || ip.interface.map(|i| i as usize) == interface)
                .map(|ip| ip.address.to_string())
                .collect();
            let hardware_address = interface
                .and_then(|i| result?.interfaces[i].mac.clone())
                .filter(|m| !m.is_empty());
            Some(DeviceStatus {
                namespace: c.namespace.clone(),
                claim: c.claim.clone(),
                pool: c.pool.clone(),
                device: c.device.clone(),
                interface_name: c.ifname.to_string(),
                ips,
                hardware_address,
            })
        })
        .collect()
}
