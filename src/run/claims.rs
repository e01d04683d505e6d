//! The IPAMClaim side effects of the executor (multi-net-spec §8): the
//! claim book under `cniDir`, which the planner's binding
//! ([`crate::plan::claims::bind`]) only decides on, and the release of a
//! deleted claim's addresses through host-local's DEL, once no pod of the
//! node holds them (its record owes a DEL of an attachment bound to it).

use std::path::{Path, PathBuf};

use crate::cluster::Cluster;
use crate::cni::env::{AttachmentParams, CniEnv};
use crate::cni::names::IfName;
use crate::cni::skel::Request;
use crate::plan::claims::{owners_in, Bound, ClaimEntry, CLAIM_IPAM};
use crate::plan::PlanError;
use crate::record::{Cache, Entry, Lookup};

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

    pub fn path(&self, owner: &str) -> PathBuf {
        self.dir.join(format!("{owner}.json"))
    }

    /// Note the entries of the claims `bound` (before their chains run).
    pub fn note_bound(&self, bound: &[Bound]) -> Result<(), PlanError> {
        bound.iter().try_for_each(|b| self.note(&b.entry))
    }

    /// Note `entry` durably, unless it is noted already as it is.
    pub fn note(&self, entry: &ClaimEntry) -> Result<(), PlanError> {
        let path = self.path(&entry.owner());
        let bytes = serde_json::to_vec(entry).expect("a book entry serializes");
        if std::fs::read(&path).is_ok_and(|old| old == bytes) {
            return Ok(());
        }
        crate::cni::whole_file::replace_durably(&path, &bytes)
            .map_err(|e| PlanError::io(format!("claim book {}", path.display()), e))
    }

    /// Every entry, with the unreadable ones as warnings.
    pub fn entries(&self) -> (Vec<ClaimEntry>, Vec<String>) {
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
                .and_then(|b| serde_json::from_slice::<ClaimEntry>(&b).map_err(|e| e.to_string()));
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

/// What a sweep did.
#[derive(Debug, Default)]
pub struct Swept {
    /// `namespace/name` of each claim whose addresses were released.
    pub released: Vec<String>,
    /// `(owner, interface)` of every noted claim whose addresses are still
    /// held: attachments a GC must treat as valid.
    pub held: Vec<(String, IfName)>,
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
    let wanted = |e: &ClaimEntry| only.is_none_or(|owners| owners.contains(&e.owner()));
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
fn release(entry: &ClaimEntry) -> Result<(), PlanError> {
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
    use std::path::Path;

    use serde_json::json;

    use super::*;
    use crate::cni::names::{ContainerId, IfName};
    use crate::plan::claims::bind;
    use crate::plan::claims::test_fixtures::{attachment, cluster, macvlan, pod, CLAIM};
    use crate::plan::Plan;

    /// `(owner, interface)` of each claim the book holds.
    fn noted(book: &ClaimBook) -> Vec<(String, IfName)> {
        let (entries, _) = book.entries();
        entries
            .iter()
            .map(|e| (e.owner(), e.interface.clone()))
            .collect()
    }

    /// The claim of the one attachment bound and noted in `book`, as an ADD does.
    fn bound_and_noted(tmp: &Path, book: &ClaimBook) -> Plan {
        let mut plan = Plan {
            attachments: vec![attachment(macvlan(tmp, json!(true)))],
            warnings: Vec::new(),
            claimed: Vec::new(),
        };
        let bound = bind(&mut plan, &pod(), &cluster(tmp, CLAIM)).unwrap();
        book.note_bound(&bound).unwrap();
        plan
    }

    #[test]
    fn the_bound_claims_are_noted_durably_once() {
        let tmp = tempfile::tempdir().unwrap();
        let book = ClaimBook::new(&tmp.path().join("cni"));
        bound_and_noted(tmp.path(), &book);
        bound_and_noted(tmp.path(), &book);
        assert_eq!(
            noted(&book),
            [(
                "ipamclaim_ns_vm-a.tenantred".to_string(),
                IfName::new("net1").unwrap()
            )]
        );
    }

    #[test]
    fn a_sweep_releases_only_the_addresses_of_deleted_claims() {
        let tmp = tempfile::tempdir().unwrap();
        let book = ClaimBook::new(&tmp.path().join("cni"));
        bound_and_noted(tmp.path(), &book);
        let present = cluster(tmp.path(), CLAIM);
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
        let plan = bound_and_noted(tmp.path(), &book);
        let held = tmp.path().join("red/10.1.0.9");
        std::fs::create_dir_all(held.parent().unwrap()).unwrap();
        std::fs::write(&held, "ipamclaim_ns_vm-a.tenantred\r\nnet1").unwrap();
        // The running pod: its record owes the attachment's DEL.
        let records = Cache::new(&cni_dir);
        let mut record = Record::new(
            &ContainerId::new("ctr-a").unwrap(),
            &IfName::new("eth0").unwrap(),
            None,
            &plan,
        );
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
        let corrupt = records.path(
            &ContainerId::new("ctr-b").unwrap(),
            &IfName::new("eth0").unwrap(),
        );
        std::fs::write(&corrupt, "{").unwrap();
        records
            .remove(
                &ContainerId::new("ctr-a").unwrap(),
                &IfName::new("eth0").unwrap(),
            )
            .unwrap();
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
