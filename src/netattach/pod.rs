//! A pod as plexus needs it: who it is and its annotations (multi-net-spec
//! §4: the selection annotation, §5: network-status), whether it came from
//! the API server or a manifest file.

use std::collections::BTreeMap;

/// What the planner needs of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub annotations: BTreeMap<String, String>,
}
