//! Persistent IPs through IPAMClaims (multi-net-spec §8, §4.1.2.1.11).
//!
//! A selection's `ipam-claim-reference` names an IPAMClaim in the pod's
//! namespace. When the network's config sets `"allowPersistentIPs": true`
//! (the key OVN-Kubernetes users know), plexus binds the claim to the
//! attachment:
//! - the claim must be for this network (`spec.network`: the NAD's name,
//!   `namespace/name`, or its config's `name`) and this interface
//!   (`spec.interface`), else the attachment fails;
//! - built-in host-local allocates for the claim instead of the container
//!   (`args.plexus.persistentOwner`), asking first for the claim's
//!   `status.ips`, so a re-created pod gets the same addresses;
//! - after the ADD, the claim's `status.ips` and `status.ownerPod` are
//!   written;
//! - the addresses outlive every pod: they are released once the claim is
//!   deleted, by the next DEL of a pod that used it or the next GC, never
//!   while it exists (§8: "cannot be de-allocated before the IPAMClaim is
//!   deleted"), and never while a pod of this node still holds them (its
//!   record owes a DEL of an attachment bound to the claim): a deleted
//!   claim's addresses are released at that pod's DEL.
//!
//! Without `allowPersistentIPs` the reference is ignored with a warning, as
//! §4.1.2.1.11 allows for an IPAM that does not implement claims.
//!
//! Binding decides; it writes nothing. The claim book
//! (`<cniDir>/ipamclaims/<owner>.json`, written durably before the first
//! allocation for a claim) is how a release finds the addresses after the
//! pods are gone: it and the release are the executor's
//! (`crate::run::claims`).

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

pub use super::error::ClaimProblem;
use super::error::PlanError;
use crate::attachment::{Attachment, Plan, PLEXUS_ARGS};
use crate::cluster::Cluster;
use crate::cni::names::IfName;
use crate::netattach::ipamclaim::IpamClaim;
use crate::netattach::pod::Pod;

/// The network-config key that lets a network's addresses follow a claim.
pub use super::error::ALLOW_PERSISTENT_IPS;
pub use super::error::{CLAIM_IPAM, CLAIM_IPAMS};

/// Who holds a claim's addresses in host-local's files. Namespaces and
/// object names have no `_`, so the key is unambiguous.
pub fn owner_key(namespace: &str, name: &str) -> String {
    format!("ipamclaim_{namespace}_{name}")
}

/// The claim (`namespace`, `name`) an owner key names, if it is one.
pub fn claim_of_owner(owner: &str) -> Option<(&str, &str)> {
    let (namespace, name) = owner.strip_prefix("ipamclaim_")?.split_once('_')?;
    (!namespace.is_empty() && !name.is_empty()).then_some((namespace, name))
}

/// A claim bound to an attachment of this ADD.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound {
    /// Index into the plan's attachments.
    pub attachment: usize,
    pub namespace: String,
    pub name: String,
    /// What the claim book must note before the chain runs.
    pub entry: ClaimEntry,
}

/// What a release needs once every pod of the claim is gone: the claim
/// book's entry (`crate::run::claims::ClaimBook`), its serde form the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimEntry {
    pub namespace: String,
    pub name: String,
    /// Checked as the claim book is read, as every name is.
    pub interface: IfName,
    /// `cniVersion`, `name` and `ipam` of each host-local plugin of the chain.
    pub ipam: Vec<Map<String, Value>>,
}

impl ClaimEntry {
    /// Who holds its addresses in host-local's files.
    pub fn owner(&self) -> String {
        owner_key(&self.namespace, &self.name)
    }
}

/// Bind the claims of `plan`'s attachments (see the module docs): check each
/// against the cluster and point its host-local at the claim; the caller
/// notes each bound claim's entry in the claim book before the chain runs.
/// Ignored references become plan warnings.
pub fn bind(plan: &mut Plan, pod: &Pod, cluster: &dyn Cluster) -> Result<Vec<Bound>, PlanError> {
    let mut bound = Vec::new();
    for (index, attachment) in plan.attachments.iter_mut().enumerate() {
        let Some(reference) = attachment.ipam_claim_reference.clone() else {
            continue;
        };
        if !persistent_ips_allowed(attachment)? {
            plan.warnings.push(format!(
                "{}: ipam-claim-reference {reference:?} ignored: the network's config does not \
                 set \"{ALLOW_PERSISTENT_IPS}\": true (multi-net-spec §4.1.2.1.11)",
                attachment.network
            ));
            attachment.ipam_claim_reference = None;
            continue;
        }
        let network = attachment.network.clone();
        let rejected = |problem: ClaimProblem| PlanError::ClaimRejected {
            network: network.clone(),
            reference: reference.clone(),
            problem,
        };
        let name = match reference.split_once('/') {
            Some((namespace, _)) if namespace != pod.namespace => {
                return Err(rejected(ClaimProblem::OtherNamespace {
                    namespace: namespace.to_string(),
                    pod_namespace: pod.namespace.clone(),
                }))
            }
            Some((_, name)) => name,
            None => reference.as_str(),
        };
        let claim = cluster.ipam_claim(&pod.namespace, name)?.ok_or_else(|| {
            rejected(ClaimProblem::Missing {
                namespace: pod.namespace.clone(),
                name: name.to_string(),
            })
        })?;
        check_claim_fits(&claim, attachment).map_err(rejected)?;
        let owner = owner_key(&pod.namespace, name);
        let ips = claim.status.map(|s| s.ips).unwrap_or_default();
        let Some(ipam) = point_at_claim(attachment, &owner, &ips)? else {
            return Err(rejected(ClaimProblem::NoClaimIpam));
        };
        bound.push(Bound {
            attachment: index,
            namespace: pod.namespace.clone(),
            name: name.to_string(),
            entry: ClaimEntry {
                namespace: pod.namespace.clone(),
                name: name.to_string(),
                interface: attachment.ifname.clone(),
                ipam,
            },
        });
    }
    Ok(bound)
}

/// `allowPersistentIPs` in any plugin of the chain (a single config's keys
/// land in its one plugin).
fn persistent_ips_allowed(attachment: &Attachment) -> Result<bool, PlanError> {
    let mut allowed = false;
    for (i, plugin) in attachment.plugins.iter().enumerate() {
        match plugin.get(ALLOW_PERSISTENT_IPS) {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => allowed |= b,
            Some(other) => {
                return Err(PlanError::config(
                    format!(
                        "{}: plugins[{i}].{ALLOW_PERSISTENT_IPS}",
                        attachment.network
                    ),
                    format!("must be true or false, not {other}"),
                ))
            }
        }
    }
    Ok(allowed)
}

/// §8.2: a claim is for one network and one pod interface.
fn check_claim_fits(claim: &IpamClaim, attachment: &Attachment) -> Result<(), ClaimProblem> {
    let nad_name = attachment
        .network
        .rsplit_once('/')
        .map_or(attachment.network.as_str(), |(_, n)| n);
    let config_name = attachment
        .plugins
        .first()
        .and_then(|p| p.get("name")?.as_str());
    let network = claim.spec.network.as_str();
    if network != attachment.network && network != nad_name && Some(network) != config_name {
        return Err(ClaimProblem::OtherNetwork {
            claimed: network.to_string(),
            network: attachment.network.clone(),
            config_name: config_name.map(String::from),
        });
    }
    if *claim.spec.interface != attachment.ifname {
        return Err(ClaimProblem::OtherInterface {
            claimed: claim.spec.interface.clone(),
            ifname: attachment.ifname.clone(),
        });
    }
    Ok(())
}

/// Point each claim-holding IPAM of the chain ([`CLAIM_IPAMS`]) at the
/// claim: `args.plexus.persistentOwner`, and the claim's addresses as
/// `args.cni.ips`. Returns what a release needs of each host-local (the
/// node's; the cluster's whereabouts is released by its reconciler), or
/// `None` when the chain has no such IPAM.
fn point_at_claim(
    attachment: &mut Attachment,
    owner: &str,
    ips: &[String],
) -> Result<Option<Vec<Map<String, Value>>>, PlanError> {
    let mut released_by = Vec::new();
    let mut pointed = false;
    for (i, plugin) in attachment.plugins.iter_mut().enumerate() {
        let ipam_type = plugin.get("ipam").and_then(|i| i.get("type")?.as_str());
        if !ipam_type.is_some_and(|t| CLAIM_IPAMS.contains(&t)) {
            continue;
        }
        pointed = true;
        if ipam_type == Some(CLAIM_IPAM) {
            released_by.push(
                ["cniVersion", "name", "ipam"]
                    .iter()
                    .filter_map(|k| Some((k.to_string(), plugin.get(*k)?.clone())))
                    .collect(),
            );
        }
        let path = format!("plugins[{i}].args");
        let args = object_at(plugin, "args", &path)?;
        args.insert(PLEXUS_ARGS.into(), json!({"persistentOwner": owner}));
        if !ips.is_empty() {
            let cni = object_at(args, "cni", &format!("{path}.cni"))?;
            cni.insert("ips".into(), json!(ips));
        }
    }
    Ok(pointed.then_some(released_by))
}

/// The object at `key` of `map`, created empty when absent.
fn object_at<'m>(
    map: &'m mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'m mut Map<String, Value>, PlanError> {
    map.entry(key)
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| PlanError::config(path, "must be an object"))
}

/// The claims a container's attachments hold addresses for (their owners),
/// read from the plugins' `args.plexus.persistentOwner`.
pub fn owners_in<'a>(attachments: impl IntoIterator<Item = &'a Attachment>) -> Vec<String> {
    let mut owners: Vec<String> = attachments
        .into_iter()
        .flat_map(|a| &a.plugins)
        .filter_map(|p| {
            let owner = p.get("args")?.get(PLEXUS_ARGS)?.get("persistentOwner")?;
            owner.as_str().map(String::from)
        })
        .collect();
    owners.sort();
    owners.dedup();
    owners
}

/// What the claim tests here and in `crate::run::claims` share: an
/// attachment referencing the claim `vm-a.tenantred` of namespace `ns`.
#[cfg(test)]
pub(crate) mod test_fixtures {
    use std::path::Path;

    use serde_json::{json, Value};

    use crate::cluster::dir::DirCluster;
    use crate::cni::names::IfName;
    use crate::netattach::pod::Pod;
    use crate::plan::Attachment;

    pub fn attachment(config: Value) -> Attachment {
        Attachment {
            network: "ns/tenantred".into(),
            ifname: IfName::new("net1").unwrap(),
            default: false,
            cni_args: String::new(),
            plugins: vec![config.as_object().unwrap().clone()],
            source: "test".into(),
            default_route: None,
            clear_default_route: false,
            ipam_claim_reference: Some("vm-a.tenantred".into()),
            disable_check: false,
            device_info: None,
        }
    }

    /// A macvlan whose host-local allocates in `data_dir`.
    pub fn macvlan(data_dir: &Path, allow: Value) -> Value {
        json!({"cniVersion": "1.0.0", "name": "red", "type": "macvlan",
               "allowPersistentIPs": allow,
               "ipam": {"type": "host-local", "dataDir": data_dir,
                        "ranges": [[{"subnet": "10.1.0.0/24"}]]}})
    }

    pub fn pod() -> Pod {
        Pod {
            namespace: "ns".into(),
            name: "virt-launcher-a".into(),
            uid: None,
            annotations: Default::default(),
        }
    }

    /// A manifest directory holding `claims` (YAML documents).
    pub fn cluster(dir: &Path, claims: &str) -> DirCluster {
        std::fs::write(dir.join("claims.yaml"), claims).unwrap();
        DirCluster::load(&dir.join("claims.yaml")).unwrap()
    }

    pub const CLAIM: &str = "apiVersion: k8s.cni.cncf.io/v1alpha1\nkind: IPAMClaim\n\
        metadata: {name: vm-a.tenantred, namespace: ns}\n\
        spec: {network: tenantred, interface: net1}\n\
        status: {ips: [10.1.0.9/24]}\n";
}

#[cfg(test)]
mod tests {
    use super::test_fixtures::*;
    use super::*;

    fn plan(att: Attachment) -> Plan {
        Plan {
            attachments: vec![att],
            warnings: Vec::new(),
            claimed: Vec::new(),
        }
    }

    #[test]
    fn a_bound_claim_points_host_local_at_it_and_gives_its_book_entry() {
        let tmp = tempfile::tempdir().unwrap();
        let mut plan = plan(attachment(macvlan(tmp.path(), json!(true))));
        let bound = bind(&mut plan, &pod(), &cluster(tmp.path(), CLAIM)).unwrap();
        let ipam = json!({"cniVersion": "1.0.0", "name": "red",
            "ipam": {"type": "host-local", "dataDir": tmp.path(),
                     "ranges": [[{"subnet": "10.1.0.0/24"}]]}});
        assert_eq!(
            bound,
            [Bound {
                attachment: 0,
                namespace: "ns".into(),
                name: "vm-a.tenantred".into(),
                entry: ClaimEntry {
                    namespace: "ns".into(),
                    name: "vm-a.tenantred".into(),
                    interface: IfName::new("net1").unwrap(),
                    ipam: vec![ipam.as_object().unwrap().clone()],
                },
            }]
        );
        assert_eq!(bound[0].entry.owner(), "ipamclaim_ns_vm-a.tenantred");
        let plugin = &plan.attachments[0].plugins[0];
        assert_eq!(
            plugin["args"],
            json!({"plexus": {"persistentOwner": "ipamclaim_ns_vm-a.tenantred"},
                   "cni": {"ips": ["10.1.0.9/24"]}})
        );
        assert_eq!(
            owners_in(&plan.attachments),
            ["ipamclaim_ns_vm-a.tenantred"]
        );
    }

    #[test]
    fn without_allow_persistent_ips_the_reference_is_ignored_with_a_warning() {
        let tmp = tempfile::tempdir().unwrap();
        for allow in [json!(false), Value::Null] {
            let mut plan = plan(attachment(macvlan(tmp.path(), allow)));
            let bound = bind(&mut plan, &pod(), &cluster(tmp.path(), CLAIM)).unwrap();
            assert!(bound.is_empty());
            assert_eq!(plan.attachments[0].ipam_claim_reference, None);
            assert!(
                plan.warnings[0].contains("\"allowPersistentIPs\": true"),
                "{:?}",
                plan.warnings
            );
            assert!(plan.attachments[0].plugins[0].get("args").is_none());
        }
        let mut plan = plan(attachment(macvlan(tmp.path(), json!("yes"))));
        let e = bind(&mut plan, &pod(), &cluster(tmp.path(), CLAIM)).unwrap_err();
        assert!(
            matches!(&e, PlanError::Config { field, reason }
                if field.ends_with("plugins[0].allowPersistentIPs")
                    && reason.starts_with("must be true or false")),
            "{e:?}"
        );
    }

    #[test]
    fn claims_of_other_namespaces_networks_or_interfaces_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let refused = |att: Attachment, claims: &str, want: fn(&ClaimProblem) -> bool| {
            let mut plan = plan(att);
            let e = bind(&mut plan, &pod(), &cluster(tmp.path(), claims)).unwrap_err();
            assert!(
                matches!(&e, PlanError::ClaimRejected { problem, .. } if want(problem)),
                "{e:?}"
            );
            assert!(e.to_string().contains("§8"), "{e}");
        };
        let allowed = || attachment(macvlan(tmp.path(), json!(true)));
        refused(
            Attachment {
                ipam_claim_reference: Some("other/vm-a.tenantred".into()),
                ..allowed()
            },
            CLAIM,
            |p| {
                p.to_string()
                    == "the claim is in namespace other; a pod of ns may only use claims of its \
                        own namespace"
            },
        );
        refused(allowed(), "", |p| {
            p == &ClaimProblem::Missing {
                namespace: "ns".into(),
                name: "vm-a.tenantred".into(),
            }
        });
        refused(
            allowed(),
            &CLAIM.replace("network: tenantred", "network: tenantblue"),
            |p| {
                p.to_string()
                    == "the claim's spec.network is \"tenantblue\", not this network \
                        (\"ns/tenantred\" or \"red\")"
            },
        );
        refused(
            allowed(),
            &CLAIM.replace("interface: net1", "interface: net2"),
            |p| {
                p == &ClaimProblem::OtherInterface {
                    claimed: IfName::new("net2").unwrap(),
                    ifname: IfName::new("net1").unwrap(),
                }
            },
        );
        let static_ipam = json!({"cniVersion": "1.0.0", "name": "red", "type": "macvlan",
            "allowPersistentIPs": true, "ipam": {"type": "static"}});
        refused(attachment(static_ipam), CLAIM, |p| {
            p == &ClaimProblem::NoClaimIpam
        });
        // The claim's network may also be named as namespace/name.
        let mut plan = plan(allowed());
        let claims = CLAIM.replace("network: tenantred", "network: ns/tenantred");
        bind(&mut plan, &pod(), &cluster(tmp.path(), &claims)).unwrap();
    }
}
