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
//! The claim book (`<cniDir>/ipamclaims/<owner>.json`, written durably before
//! the first allocation for a claim) is how a release finds the addresses
//! after the pods are gone.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::cluster::Cluster;
use crate::cni::env::{AttachmentParams, CniEnv};
use crate::cni::skel::Request;
use crate::manifest::Pod;
use crate::netattach::ipamclaim::IpamClaim;
use crate::plan::{Attachment, Plan, PlanError, PLEXUS_ARGS};
use crate::record::{Cache, Entry, Lookup};

/// The network-config key that lets a network's addresses follow a claim.
pub const ALLOW_PERSISTENT_IPS: &str = "allowPersistentIPs";
/// The only IPAM that can hold addresses for a claim.
const CLAIM_IPAM: &str = "host-local";

/// Who holds a claim's addresses in host-local's files. Namespaces and
/// object names have no `_`, so the key is unambiguous.
pub fn owner_key(namespace: &str, name: &str) -> String {
    format!("ipamclaim_{namespace}_{name}")
}

/// A claim bound to an attachment of this ADD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// Index into the plan's attachments.
    pub attachment: usize,
    pub namespace: String,
    pub name: String,
}

/// What a release needs once every pod of the claim is gone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BookEntry {
    namespace: String,
    name: String,
    interface: String,
    /// `cniVersion`, `name` and `ipam` of each host-local plugin of the chain.
    ipam: Vec<Map<String, Value>>,
}

impl BookEntry {
    fn owner(&self) -> String {
        owner_key(&self.namespace, &self.name)
    }
}

/// The claims plexus has allocated for on this node.
pub struct ClaimBook {
    dir: PathBuf,
    /// plexus's records, which tell the claims the node's pods still hold.
    records: Cache,
}

impl ClaimBook {
    /// The book under plexus's `cniDir`.
    pub fn new(cni_dir: &Path) -> ClaimBook {
        ClaimBook {
            dir: cni_dir.join("ipamclaims"),
            records: Cache::new(cni_dir),
        }
    }

    fn path(&self, owner: &str) -> PathBuf {
        self.dir.join(format!("{owner}.json"))
    }

    /// Note `entry` durably, unless it is noted already as it is.
    fn note(&self, entry: &BookEntry) -> Result<(), PlanError> {
        let path = self.path(&entry.owner());
        let bytes = serde_json::to_vec(entry).expect("a book entry serializes");
        if std::fs::read(&path).is_ok_and(|old| old == bytes) {
            return Ok(());
        }
        crate::cni::whole_file::replace_durably(&path, &bytes)
            .map_err(|e| PlanError::io(format!("claim book {}", path.display()), e))
    }

    /// Every entry, with the unreadable ones as warnings.
    fn entries(&self) -> (Vec<BookEntry>, Vec<String>) {
        let mut entries = Vec::new();
        let mut warnings = Vec::new();
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return (entries, warnings);
        };
        for path in dir.flatten().map(|e| e.path()) {
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let read = std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<BookEntry>(&b).map_err(|e| e.to_string()));
            match read {
                Ok(entry) if self.path(&entry.owner()) == path => entries.push(entry),
                Ok(_) => warnings.push(format!(
                    "claim book {}: names another claim than its file; left alone",
                    path.display()
                )),
                Err(e) => warnings.push(format!("claim book {}: {e}; left alone", path.display())),
            }
        }
        entries.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        (entries, warnings)
    }
}

/// Bind the claims of `plan`'s attachments (see the module docs): check each
/// against the cluster, point its host-local at the claim, and note it in the
/// book. Ignored references become plan warnings.
pub fn bind(
    plan: &mut Plan,
    pod: &Pod,
    cluster: &dyn Cluster,
    book: &ClaimBook,
) -> Result<Vec<Bound>, PlanError> {
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
        let ipam = point_at_claim(attachment, &owner, &ips)?;
        if ipam.is_empty() {
            return Err(rejected(ClaimProblem::NoClaimIpam));
        }
        book.note(&BookEntry {
            namespace: pod.namespace.clone(),
            name: name.to_string(),
            interface: attachment.ifname.clone(),
            ipam,
        })?;
        bound.push(Bound {
            attachment: index,
            namespace: pod.namespace.clone(),
            name: name.to_string(),
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

/// Why the IPAMClaim a selection references cannot be used (§8).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimProblem {
    #[error(
        "the claim is in namespace {namespace}; a pod of {pod_namespace} may only use claims of \
         its own namespace"
    )]
    OtherNamespace {
        namespace: String,
        pod_namespace: String,
    },
    #[error("IPAMClaim {namespace}/{name} does not exist")]
    Missing { namespace: String, name: String },
    /// §8.2: the claim is for another network.
    #[error(
        "the claim's spec.network is {claimed:?}, not this network ({network:?}{})",
        config_name.as_ref().map(|n| format!(" or {n:?}")).unwrap_or_default()
    )]
    OtherNetwork {
        claimed: String,
        network: String,
        /// The name in the network's config, another name a claim may use.
        config_name: Option<String>,
    },
    /// §8.2: the claim is for another pod interface.
    #[error(
        "the claim's spec.interface is {claimed:?}, but this attachment's interface is {ifname:?}"
    )]
    OtherInterface { claimed: String, ifname: String },
    /// The chain has no IPAM that can hold the claim's addresses.
    #[error(
        "\"{ALLOW_PERSISTENT_IPS}\" needs the built-in {CLAIM_IPAM} IPAM to hold the claim's \
         addresses; this network's chain has none"
    )]
    NoClaimIpam,
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
    if claim.spec.interface != attachment.ifname {
        return Err(ClaimProblem::OtherInterface {
            claimed: claim.spec.interface.clone(),
            ifname: attachment.ifname.clone(),
        });
    }
    Ok(())
}

/// Point each host-local of the chain at the claim: `args.plexus.
/// persistentOwner`, and the claim's addresses as `args.cni.ips`. Returns
/// what a release needs of each.
fn point_at_claim(
    attachment: &mut Attachment,
    owner: &str,
    ips: &[String],
) -> Result<Vec<Map<String, Value>>, PlanError> {
    let mut released_by = Vec::new();
    for (i, plugin) in attachment.plugins.iter_mut().enumerate() {
        let ipam_type = plugin.get("ipam").and_then(|i| i.get("type")?.as_str());
        if ipam_type != Some(CLAIM_IPAM) {
            continue;
        }
        released_by.push(
            ["cniVersion", "name", "ipam"]
                .iter()
                .filter_map(|k| Some((k.to_string(), plugin.get(*k)?.clone())))
                .collect(),
        );
        let path = format!("plugins[{i}].args");
        let args = object_at(plugin, "args", &path)?;
        args.insert(PLEXUS_ARGS.into(), json!({"persistentOwner": owner}));
        if !ips.is_empty() {
            let cni = object_at(args, "cni", &format!("{path}.cni"))?;
            cni.insert("ips".into(), json!(ips));
        }
    }
    Ok(released_by)
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

/// What a sweep did.
#[derive(Debug, Default)]
pub struct Swept {
    /// `namespace/name` of each claim whose addresses were released.
    pub released: Vec<String>,
    /// `(owner, interface)` of every noted claim whose addresses are still
    /// held: attachments a GC must treat as valid.
    pub held: Vec<(String, String)>,
    pub warnings: Vec<String>,
}

/// The owners of the claims a pod of this node still holds: those of the
/// attachments of every record that still owes a DEL. An unreadable record
/// may hold any claim: its reason is the error.
fn held_by_pods(records: &Cache) -> Result<Vec<String>, String> {
    let mut owners = Vec::new();
    for entry in records.entries().map_err(|e| e.to_string())? {
        let Entry::Record {
            container_id,
            ifname,
        } = entry
        else {
            continue;
        };
        match records
            .load(&container_id, &ifname)
            .map_err(|e| e.to_string())?
        {
            Lookup::Found(record) => owners.extend(owners_in(
                record
                    .attachments
                    .iter()
                    .filter(|a| a.owes_del())
                    .map(|a| &a.attachment),
            )),
            // Deleted meanwhile: it holds nothing any more.
            Lookup::Missing => {}
            Lookup::Corrupt { path, reason } => {
                return Err(format!(
                    "record {} is unreadable ({reason})",
                    path.display()
                ))
            }
        }
    }
    owners.sort();
    owners.dedup();
    Ok(owners)
}

/// Release the addresses of noted claims that no longer exist: those of
/// `only` (owners), or all. A claim the cluster cannot tell about (the API
/// server unreachable) is kept for a later sweep, and so is a deleted claim
/// whose addresses a pod of this node still holds: that pod's DEL releases
/// them.
pub fn sweep(book: &ClaimBook, cluster: &dyn Cluster, only: Option<&[String]>) -> Swept {
    let (entries, warnings) = book.entries();
    let mut swept = Swept {
        warnings,
        ..Swept::default()
    };
    let mut in_use: Option<Result<Vec<String>, String>> = None;
    let wanted = |e: &BookEntry| only.is_none_or(|owners| owners.contains(&e.owner()));
    for entry in &entries {
        let claim = format!("IPAMClaim {}/{}", entry.namespace, entry.name);
        let held = (entry.owner(), entry.interface.clone());
        if !wanted(entry) {
            swept.held.push(held);
            continue;
        }
        match cluster.ipam_claim(&entry.namespace, &entry.name) {
            Ok(Some(_)) => {
                swept.held.push(held);
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                swept.warnings.push(format!(
                    "{claim}: addresses kept, cannot tell whether the claim still exists: {e}"
                ));
                swept.held.push(held);
                continue;
            }
        }
        // Deleted: released only once no pod of the node holds the addresses.
        match in_use.get_or_insert_with(|| held_by_pods(&book.records)) {
            Ok(owners) if owners.contains(&entry.owner()) => {
                swept.held.push(held);
                continue;
            }
            Ok(_) => {}
            Err(reason) => {
                swept.warnings.push(format!(
                    "{claim} is deleted, but its addresses are kept: cannot tell whether a pod \
                     still holds them: {reason}"
                ));
                swept.held.push(held);
                continue;
            }
        }
        match release(entry).and_then(|()| {
            let path = book.path(&entry.owner());
            std::fs::remove_file(&path)
                .map_err(|e| PlanError::io(format!("claim book {}", path.display()), e))
        }) {
            Ok(()) => swept
                .released
                .push(format!("{}/{}", entry.namespace, entry.name)),
            Err(e) => {
                swept.warnings.push(format!(
                    "{claim} is deleted, but its addresses were not released: {e}"
                ));
                swept.held.push(held);
            }
        }
    }
    swept
}

/// host-local's DEL for the claim's owner, on each of its networks. Its
/// errors are the protocol crate's (a request it builds) and host-local's
/// reply.
fn release(entry: &BookEntry) -> Result<(), PlanError> {
    let host_local = plexus_ipam::builtin(CLAIM_IPAM).expect("host-local is built in");
    for config in &entry.ipam {
        let env = CniEnv::Del(AttachmentParams::new(
            entry.owner(),
            entry.interface.clone(),
        )?);
        let request = Request::from_config(env, config.clone())?;
        host_local.del(&request)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::dir::DirCluster;

    fn attachment(config: Value) -> Attachment {
        Attachment {
            network: "ns/tenantred".into(),
            ifname: "net1".into(),
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

    fn macvlan(data_dir: &Path, allow: Value) -> Value {
        json!({"cniVersion": "1.0.0", "name": "red", "type": "macvlan",
               "allowPersistentIPs": allow,
               "ipam": {"type": "host-local", "dataDir": data_dir,
                        "ranges": [[{"subnet": "10.1.0.0/24"}]]}})
    }

    /// `(owner, interface)` of each claim the book holds.
    fn noted(book: &ClaimBook) -> Vec<(String, String)> {
        let (entries, _) = book.entries();
        entries
            .iter()
            .map(|e| (e.owner(), e.interface.clone()))
            .collect()
    }

    fn pod() -> Pod {
        Pod {
            namespace: "ns".into(),
            name: "virt-launcher-a".into(),
            uid: None,
            annotations: Default::default(),
        }
    }

    /// A manifest directory holding `claims` (YAML documents).
    fn cluster(dir: &Path, claims: &str) -> DirCluster {
        std::fs::write(dir.join("claims.yaml"), claims).unwrap();
        DirCluster::load(&dir.join("claims.yaml")).unwrap()
    }

    const CLAIM: &str = "apiVersion: k8s.cni.cncf.io/v1alpha1\nkind: IPAMClaim\n\
        metadata: {name: vm-a.tenantred, namespace: ns}\n\
        spec: {network: tenantred, interface: net1}\n\
        status: {ips: [10.1.0.9/24]}\n";

    fn plan(att: Attachment) -> Plan {
        Plan {
            attachments: vec![att],
            warnings: Vec::new(),
        }
    }

    #[test]
    fn a_bound_claim_points_host_local_at_it_and_is_noted_durably() {
        let tmp = tempfile::tempdir().unwrap();
        let book = ClaimBook::new(&tmp.path().join("cni"));
        let mut plan = plan(attachment(macvlan(tmp.path(), json!(true))));
        let bound = bind(&mut plan, &pod(), &cluster(tmp.path(), CLAIM), &book).unwrap();
        assert_eq!(
            bound,
            [Bound {
                attachment: 0,
                namespace: "ns".into(),
                name: "vm-a.tenantred".into()
            }]
        );
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
        assert_eq!(
            noted(&book),
            [(
                "ipamclaim_ns_vm-a.tenantred".to_string(),
                "net1".to_string()
            )]
        );
    }

    #[test]
    fn without_allow_persistent_ips_the_reference_is_ignored_with_a_warning() {
        let tmp = tempfile::tempdir().unwrap();
        let book = ClaimBook::new(&tmp.path().join("cni"));
        for allow in [json!(false), Value::Null] {
            let mut plan = plan(attachment(macvlan(tmp.path(), allow)));
            let bound = bind(&mut plan, &pod(), &cluster(tmp.path(), CLAIM), &book).unwrap();
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
        let e = bind(&mut plan, &pod(), &cluster(tmp.path(), CLAIM), &book).unwrap_err();
        assert!(
            matches!(&e, PlanError::Config { field, reason }
                if field.ends_with("plugins[0].allowPersistentIPs")
                    && reason.starts_with("must be true or false")),
            "{e:?}"
        );
        assert!(noted(&book).is_empty());
    }

    #[test]
    fn claims_of_other_namespaces_networks_or_interfaces_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let book = ClaimBook::new(&tmp.path().join("cni"));
        let refused = |att: Attachment, claims: &str, want: fn(&ClaimProblem) -> bool| {
            let mut plan = plan(att);
            let e = bind(&mut plan, &pod(), &cluster(tmp.path(), claims), &book).unwrap_err();
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
                    claimed: "net2".into(),
                    ifname: "net1".into(),
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
        bind(&mut plan, &pod(), &cluster(tmp.path(), &claims), &book).unwrap();
    }

    #[test]
    fn a_sweep_releases_only_the_addresses_of_deleted_claims() {
        let tmp = tempfile::tempdir().unwrap();
        let book = ClaimBook::new(&tmp.path().join("cni"));
        let mut plan = plan(attachment(macvlan(tmp.path(), json!(true))));
        let present = cluster(tmp.path(), CLAIM);
        bind(&mut plan, &pod(), &present, &book).unwrap();
        // The address host-local allocated for the claim.
        let held = tmp.path().join("red/10.1.0.9");
        std::fs::create_dir_all(held.parent().unwrap()).unwrap();
        std::fs::write(&held, "ipamclaim_ns_vm-a.tenantred\r\nnet1").unwrap();

        let swept = sweep(&book, &present, None);
        assert!(
            swept.released.is_empty() && swept.warnings.is_empty(),
            "{swept:?}"
        );
        assert_eq!(swept.held, noted(&book));
        assert!(held.exists(), "never released while the claim exists");

        let deleted = cluster(tmp.path(), "");
        let swept = sweep(&book, &deleted, Some(&["ipamclaim_ns_other".to_string()]));
        assert!(swept.released.is_empty(), "only the owners asked for");
        let swept = sweep(&book, &deleted, None);
        assert_eq!(swept.released, ["ns/vm-a.tenantred"]);
        assert!(!held.exists());
        assert!(noted(&book).is_empty() && swept.held.is_empty());
    }

    #[test]
    fn a_deleted_claims_addresses_stay_while_a_pod_holds_them() {
        // A GC or another pod's DEL must not free them under a running pod;
        // that pod's DEL (its record gone, or owing nothing) releases them.
        use crate::record::Record;
        let tmp = tempfile::tempdir().unwrap();
        let cni_dir = tmp.path().join("cni");
        let book = ClaimBook::new(&cni_dir);
        let mut plan = plan(attachment(macvlan(tmp.path(), json!(true))));
        bind(&mut plan, &pod(), &cluster(tmp.path(), CLAIM), &book).unwrap();
        let held = tmp.path().join("red/10.1.0.9");
        std::fs::create_dir_all(held.parent().unwrap()).unwrap();
        std::fs::write(&held, "ipamclaim_ns_vm-a.tenantred\r\nnet1").unwrap();
        // The running pod: its record owes the attachment's DEL.
        let records = Cache::new(&cni_dir);
        let mut record = Record::new("ctr-a", "eth0", None, &plan);
        record.attachments[0].pending_del = record.attachments[0].all_plugins();
        records.store(&record).unwrap();

        let deleted = cluster(tmp.path(), "");
        let owner = "ipamclaim_ns_vm-a.tenantred".to_string();
        for only in [None, Some(std::slice::from_ref(&owner))] {
            let swept = sweep(&book, &deleted, only);
            assert!(
                swept.released.is_empty() && swept.warnings.is_empty(),
                "{swept:?}"
            );
            assert_eq!(
                swept.held,
                noted(&book),
                "held, so a GC keeps the attachment"
            );
            assert!(held.exists());
        }

        // A record that cannot be read may hold the claim: kept, with a warning.
        let corrupt = records.path("ctr-b", "eth0").unwrap();
        std::fs::write(&corrupt, "{").unwrap();
        records.remove("ctr-a", "eth0").unwrap();
        let swept = sweep(&book, &deleted, None);
        assert!(swept.released.is_empty(), "{swept:?}");
        assert!(
            swept.warnings[0].contains("cannot tell whether a pod still holds them"),
            "{swept:?}"
        );
        assert!(held.exists());

        // The pod's DEL done (no record owes anything): released.
        std::fs::remove_file(&corrupt).unwrap();
        let swept = sweep(&book, &deleted, Some(std::slice::from_ref(&owner)));
        assert_eq!(swept.released, ["ns/vm-a.tenantred"]);
        assert!(!held.exists());
    }
}
