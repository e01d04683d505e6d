//! Dynamic networks: what a running pod's sandbox must change so that its
//! attachments match its selection annotation again (multi-net-spec §4)
//! after the annotation changed. The node daemon applies the answer
//! ([`crate::commands::daemon::hotplug`]); this module only decides.
//!
//! - The wanted attachments are planned by the same planner as ADD: the
//!   same NAD resolution, isolation (§7.4), capability arguments and
//!   interface names. Attachments the sandbox has keep their names: a
//!   selection without `interface` is pinned to the interface its network
//!   already has, so removing one selection never renames the others; a
//!   new one gets the lowest `netN` no interface of the sandbox has (the
//!   auxiliary chain's included) and no selection asks for.
//! - The cluster network, `delegates` and `defaultNetworks` are not the
//!   annotation's and are never touched, nor is the auxiliary chain.
//! - An attachment whose planned form differs (keys of its selection, its
//!   NAD's config) is detached and attached again.
//! - `default-route` (§4.1.2.1.9) is refused on a running pod: it moves
//!   the pod's default route off every other attachment, the cluster
//!   network's included, which were configured at ADD. A selection adding,
//!   removing or changing it is left as it is, with the reason.
//! - An annotation that does not parse changes nothing (the pod keeps its
//!   networks), with the parser's reason, whatever `strictAnnotations` says:
//!   failing is not an option for a running pod.

use super::error::PlanError;
use crate::attachment::{net_n, Attachment, Plan};
use crate::cni::names::IfName;
use crate::netattach::pod::Pod;
use crate::netattach::selection::{parse_selection_annotation, NETWORKS_ANNOTATION};
use crate::record::{CachedAttachment, Record, State};

/// What the sandbox must do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Changes {
    /// Recorded attachments to DEL, one at a time.
    pub detach: Vec<Attachment>,
    /// Planned attachments to ADD, after the detaches.
    pub attach: Vec<Attachment>,
    /// Changes left undone, each with its reason (a Warning event).
    pub refused: Vec<String>,
    /// Why the annotation was ignored, or the planner's warnings.
    pub warnings: Vec<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.detach.is_empty() && self.attach.is_empty()
    }
}

/// The changes that bring `record` (the sandbox's attachments) to what
/// `pod`'s annotation selects; `plan` plans a pod as ADD would. An error is
/// the planner's: a NAD that does not exist (yet), an isolation violation.
pub fn changes(
    pod: &Pod,
    record: &Record,
    plan: impl Fn(&Pod) -> Result<Plan, PlanError>,
) -> Result<Changes, PlanError> {
    let mut changes = Changes::default();
    let mut elements = match pod.annotations.get(NETWORKS_ANNOTATION) {
        None => Vec::new(),
        Some(value) => match parse_selection_annotation(value) {
            Ok(parsed) => parsed.elements,
            Err(e) => {
                changes.warnings.push(format!(
                    "annotation {NETWORKS_ANNOTATION} ignored, the pod keeps its networks: {e}"
                ));
                return Ok(changes);
            }
        },
    };
    // What the pod has whatever it selects: not the annotation's.
    let mut bare = pod.clone();
    bare.annotations.remove(NETWORKS_ANNOTATION);
    let fixed = plan(&bare)?.attachments;
    let selected: Vec<&CachedAttachment> = record
        .attachments
        .iter()
        .filter(|c| {
            let a = &c.attachment;
            !a.default
                && !a.is_auxiliary()
                && !fixed
                    .iter()
                    .any(|f| f.network == a.network && f.ifname == a.ifname)
        })
        .collect();

    // Pin each selection to the interface its network has: explicit
    // names first, then the others to a name no selection asks for.
    let explicit: Vec<IfName> = elements
        .iter()
        .filter_map(|e| e.interface.clone())
        .collect();
    let mut claimed = vec![false; selected.len()];
    for pass_explicit in [true, false] {
        for element in elements
            .iter_mut()
            .filter(|e| e.interface.is_some() == pass_explicit)
        {
            let network = element.network_ref(&pod.namespace).to_string();
            let found = (0..selected.len()).find(|&k| {
                let a = &selected[k].attachment;
                !claimed[k]
                    && a.network == network
                    && match &element.interface {
                        Some(name) => a.ifname == *name,
                        None => !explicit.contains(&a.ifname),
                    }
            });
            if let Some(k) = found {
                claimed[k] = true;
                element.interface = Some(selected[k].attachment.ifname.clone());
            }
        }
    }
    // A new selection without `interface` gets the next free `netN`: free
    // of every interface the sandbox has (the auxiliary chain's, the
    // delegates', one being detached) and of every name the annotation
    // asks for. The planner's positional name would not know the record.
    let mut taken: Vec<IfName> = record
        .attachments
        .iter()
        .map(|c| c.attachment.ifname.clone())
        .chain(elements.iter().filter_map(|e| e.interface.clone()))
        .collect();
    for element in elements.iter_mut().filter(|e| e.interface.is_none()) {
        let name = (1..)
            .map(net_n)
            .find(|n| !taken.contains(n))
            .expect("an unbounded range always has a free name");
        element.interface = Some(name.clone());
        taken.push(name);
    }
    let mut pinned = pod.clone();
    if !elements.is_empty() {
        let list: Vec<_> = elements.iter().map(|e| e.to_value()).collect();
        pinned.annotations.insert(
            NETWORKS_ANNOTATION.into(),
            serde_json::Value::Array(list).to_string(),
        );
    }
    let desired = plan(&pinned)?;
    changes.warnings.extend(desired.warnings);
    let wanted = desired.attachments.get(fixed.len()..).unwrap_or_default();

    let same_place =
        |a: &Attachment, b: &Attachment| a.network == b.network && a.ifname == b.ifname;
    for want in wanted {
        match selected.iter().find(|c| same_place(&c.attachment, want)) {
            Some(have) if have.state == State::Added => {
                let had = &have.attachment;
                if equal_but_routes(had, want) {
                    if had.default_route != want.default_route {
                        changes
                            .refused
                            .push(refusal(want, "change its default-route"));
                    }
                    continue;
                }
                if had.default_route.is_some() || want.default_route.is_some() {
                    changes.refused.push(refusal(want, "change it"));
                    continue;
                }
                changes.detach.push(had.clone());
                changes.attach.push(want.clone());
            }
            // Left mid-way by a plexus that stopped: DEL what it owes, then
            // attach anew.
            Some(have) => {
                changes.detach.push(have.attachment.clone());
                changes.attach.push(want.clone());
            }
            None if want.default_route.is_some() => {
                changes.refused.push(refusal(want, "attach it"));
            }
            None => changes.attach.push(want.clone()),
        }
    }
    for have in &selected {
        if wanted.iter().any(|w| same_place(w, &have.attachment)) {
            continue;
        }
        if have.state == State::Added && have.attachment.default_route.is_some() {
            changes.refused.push(refusal(&have.attachment, "detach it"));
        } else {
            changes.detach.push(have.attachment.clone());
        }
    }
    Ok(changes)
}

/// Equal but for the default-route keys, which a running pod cannot change.
fn equal_but_routes(had: &Attachment, want: &Attachment) -> bool {
    let mut want = want.clone();
    want.clear_default_route = had.clear_default_route;
    want.default_route = had.default_route.clone();
    *had == want
}

fn refusal(a: &Attachment, what: &str) -> String {
    format!(
        "{} ({}): not changed on the running pod: its selection has default-route \
         (multi-net-spec §4.1.2.1.9), which moves the default route of every other \
         attachment, the cluster network's included, configured when the pod started; \
         to {what}, re-create the pod",
        a.network, a.ifname
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::dir::DirCluster;
    use crate::cni::names::{ContainerId, IfName};
    use crate::plan::{PlanInputs, PlanOptions};
    use std::path::Path;

    /// NADs `a`, `b` and `c` (macvlan) in `ns`, a pod selecting `networks`,
    /// its plan as ADD makes it, and the record of that ADD.
    struct Case {
        dir: tempfile::TempDir,
    }

    impl Case {
        fn new() -> Case {
            let dir = tempfile::tempdir().unwrap();
            let mut yaml = String::new();
            for name in ["a", "b", "c"] {
                yaml.push_str(&format!(
                    "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n\
                     metadata: {{name: {name}, namespace: ns}}\nspec:\n  config: '{{\"cniVersion\": \
                     \"1.0.0\", \"type\": \"macvlan\", \"master\": \"eth9\"}}'\n---\n"
                ));
            }
            std::fs::write(dir.path().join("nads.yaml"), yaml).unwrap();
            Case { dir }
        }

        fn pod(&self, networks: &str) -> Pod {
            Pod {
                namespace: "ns".into(),
                name: "p".into(),
                uid: Some("u1".into()),
                annotations: [(NETWORKS_ANNOTATION.to_string(), networks.to_string())].into(),
            }
        }

        fn plan(&self, pod: &Pod) -> Result<Plan, PlanError> {
            let nads = DirCluster::load(self.dir.path()).unwrap();
            let file = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("examples/demo/cluster-network.conflist");
            let docs = crate::manifest::load(&file).unwrap();
            let default_network =
                crate::plan::network_from_documents(&file, &docs).unwrap_or_else(|e| panic!("{e}"));
            let policy = crate::policy::SelectionPolicy {
                namespace_isolation: true,
                ..Default::default()
            };
            let options = PlanOptions::new(policy, IfName::new("eth0").unwrap())
                .with_container(ContainerId::new("c1").unwrap());
            crate::plan::plan(
                pod,
                &PlanInputs::off_node(&nads, &default_network, &options),
            )
        }

        /// The record of an ADD of the pod selecting `networks`.
        fn added(&self, networks: &str) -> Record {
            let plan = self.plan(&self.pod(networks)).unwrap();
            let mut record = Record::new(
                &ContainerId::new("c1").unwrap(),
                &IfName::new("eth0").unwrap(),
                None,
                &plan,
            );
            for c in &mut record.attachments {
                c.state = State::Added;
                c.pending_del = c.all_plugins();
            }
            record
        }

        fn changes(&self, record: &Record, networks: &str) -> Changes {
            changes(&self.pod(networks), record, |p| self.plan(p)).unwrap()
        }
    }

    fn names(list: &[Attachment]) -> Vec<String> {
        list.iter()
            .map(|a| format!("{}@{}", a.network, a.ifname))
            .collect()
    }

    #[test]
    fn an_added_selection_gets_the_next_free_name_and_a_removed_one_renames_nothing() {
        let case = Case::new();
        let record = case.added("a,b");
        assert!(case.changes(&record, "a,b").is_empty());
        let added = case.changes(&record, "a,b,c");
        assert_eq!(names(&added.attach), ["ns/c@net3"]);
        assert!(added.detach.is_empty());
        // Removing `a` leaves `b` on net2 (positional naming would make it net1).
        let removed = case.changes(&record, "b");
        assert_eq!(names(&removed.detach), ["ns/a@net1"]);
        assert!(removed.attach.is_empty(), "{:?}", removed.attach);
    }

    #[test]
    fn a_new_name_is_free_of_the_auxiliary_chain_and_of_the_names_asked_for() {
        let case = Case::new();
        let mut record = case.added("a,b");
        // The auxiliary chain ran after the networks, as `net3` (its
        // position at ADD).
        let mut auxiliary = record.attachments[1].clone();
        auxiliary.attachment.source = "auxiliaryCNIChainName \"aux\"".into();
        auxiliary.attachment.ifname = IfName::new("net3").unwrap();
        assert!(auxiliary.attachment.is_auxiliary());
        record.attachments.push(auxiliary);
        let added = case.changes(&record, "a,b,c");
        assert_eq!(names(&added.attach), ["ns/c@net4"]);
        assert!(added.detach.is_empty(), "{:?}", added.detach);
        // A name the annotation asks for is skipped too.
        let added = case.changes(
            &record,
            r#"[{"name": "a"}, {"name": "b"}, {"name": "c"}, {"name": "c", "interface": "net4"}]"#,
        );
        assert_eq!(names(&added.attach), ["ns/c@net5", "ns/c@net4"]);
        assert!(added.detach.is_empty(), "{:?}", added.detach);
    }

    #[test]
    fn changed_keys_detach_and_attach_again_and_default_route_is_refused() {
        let case = Case::new();
        let record = case.added("a");
        let moved = case.changes(&record, r#"[{"name": "a", "interface": "blue"}]"#);
        assert_eq!(names(&moved.detach), ["ns/a@net1"]);
        assert_eq!(names(&moved.attach), ["ns/a@blue"]);
        let args = case.changes(&record, r#"[{"name": "a", "cni-args": {"x": "1"}}]"#);
        assert_eq!(names(&args.detach), ["ns/a@net1"]);
        assert_eq!(names(&args.attach), ["ns/a@net1"]);
        let routed = case.changes(&record, r#"[{"name": "a", "default-route": ["10.0.0.1"]}]"#);
        assert!(routed.is_empty(), "{routed:?}");
        assert!(routed.refused[0].contains("§4.1.2.1.9"), "{routed:?}");
    }

    #[test]
    fn an_invalid_annotation_changes_nothing_and_says_why() {
        let case = Case::new();
        let record = case.added("a");
        let ignored = case.changes(&record, "[{\"name\": ");
        assert!(ignored.is_empty());
        assert!(
            ignored.warnings[0].contains("keeps its networks"),
            "{ignored:?}"
        );
    }

    #[test]
    fn isolation_applies_as_at_add() {
        // §7.4: with namespaceIsolation, a pod selects NADs of its own
        // namespace only; the change fails, planned as ADD plans it.
        let case = Case::new();
        let record = case.added("a");
        let e = changes(&case.pod("a,other/b"), &record, |p| case.plan(p)).unwrap_err();
        assert!(e.to_string().contains("other/b"), "{e}");
    }

    #[test]
    fn an_attachment_a_crash_left_mid_way_is_deleted_and_attached_again() {
        let case = Case::new();
        let mut record = case.added("a");
        record.attachments[1].state = State::Adding;
        let redo = case.changes(&record, "a");
        assert_eq!(names(&redo.detach), ["ns/a@net1"]);
        assert_eq!(names(&redo.attach), ["ns/a@net1"]);
    }
}
