//! IPAMClaims with cluster-wide IPAM (multi-net-spec §8, §4.1.2.1.11):
//! the address follows the claim from pod to pod and node to node (a VM's
//! live migration: the target pod gets the address the source pod still
//! has), because the pool notes the claim beside the entry
//! (`ipam-claim.plexus.io/<offset>`) and the next pod of the claim takes
//! that entry over.
//!
//! plexus's binding ([`crate::plan::claims`]) tells the plugin the claim,
//! as it tells host-local: `args.plexus.persistentOwner` names it, and
//! `args.cni.ips` carries its `status.ips` (asked for first when the pool
//! notes no entry for it). A DEL, or a failed ADD, never gives a claim's
//! address back: the reconciler does, once the claim is deleted and no pod
//! holds the address ([`plexus_ipam::whereabouts::reclaim::judge_claimed`]).

use std::net::IpAddr;

use serde_json::{Map, Value};

use super::ClusterIpamError;
use crate::plan::claims::claim_of_owner;
use plexus_ipam::IpamError;

/// The claim (`namespace/name`) of the call's configuration, and the
/// addresses it asks for first.
pub(super) fn claim_of(
    config: &Map<String, Value>,
) -> Result<Option<(String, Vec<IpAddr>)>, ClusterIpamError> {
    let args = config.get("args");
    let owner = args
        .and_then(|a| a.get(crate::plan::PLEXUS_ARGS))
        .and_then(|p| p.get("persistentOwner"));
    let Some(owner) = owner else {
        return Ok(None);
    };
    let field = |reason: String| -> ClusterIpamError {
        IpamError::Config {
            field: "args.plexus.persistentOwner".into(),
            reason,
        }
        .into()
    };
    let claim = owner
        .as_str()
        .and_then(claim_of_owner)
        .ok_or_else(|| field(format!("{owner} names no IPAMClaim")))?;
    let ips = args.and_then(|a| a.get("cni")).and_then(|c| c.get("ips"));
    let preferred = match ips {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ips)) => ips
            .iter()
            .enumerate()
            .map(|(i, ip)| {
                let text = ip.as_str().unwrap_or_default();
                let address = text.split('/').next().unwrap_or_default();
                address.parse().map_err(|_| {
                    ClusterIpamError::from(IpamError::Config {
                        field: format!("args.cni.ips[{i}]"),
                        reason: format!("{ip} is not an address"),
                    })
                })
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(IpamError::Config {
                field: "args.cni.ips".into(),
                reason: format!("must be a list of addresses, not {other}"),
            }
            .into())
        }
    };
    Ok(Some((format!("{}/{}", claim.0, claim.1), preferred)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn claim_of(config: &Value) -> Result<Option<(String, Vec<IpAddr>)>, ClusterIpamError> {
        super::claim_of(config.as_object().unwrap())
    }

    #[test]
    fn the_claim_and_its_addresses_from_args() {
        let config = json!({"args": {"plexus": {"persistentOwner": "ipamclaim_ns1_vm-a.net"},
                                     "cni": {"ips": ["10.1.0.5/24", "fd00::5"]}}});
        let (claim, preferred) = claim_of(&config).unwrap().unwrap();
        assert_eq!(claim, "ns1/vm-a.net");
        assert_eq!(preferred.len(), 2);
        assert!(claim_of(&json!({"args": {}})).unwrap().is_none());
        assert!(claim_of(&json!({"args": {"plexus": {"persistentOwner": "x"}}})).is_err());
        let bad = json!({"args": {"plexus": {"persistentOwner": "ipamclaim_a_b"},
                                  "cni": {"ips": ["nope"]}}});
        assert!(claim_of(&bad).is_err());
    }
}
