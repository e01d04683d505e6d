//! Which keys a plexus conf may hold, and what becomes of those plexus does
//! not read. A Multus user's conf must keep working with `type` changed, so
//! nothing Multus reads is refused here; but nothing is silently ignored
//! either: a Multus key without effect in plexus, or a key nobody knows,
//! gives a warning (never an error: a newer Multus's key must not fail pods).
//!
//! The keys plexus reads are the fields of its raw conf, found by asking
//! serde for them, so a key added there is known here at once.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::cni::casefold::fold_eq;
use crate::cni::go_json::struct_fields;

/// What plexus does with a key it does not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unread {
    /// plexus already behaves as the key asks, or the runtime sets it
    /// (cni-SPEC): accepted without a word.
    Accepted,
    /// It has no effect in plexus: accepted, with this reason as a warning.
    NoEffect(&'static str),
}

/// Keys plexus does not read, with what becomes of them: the CNI keys every
/// plugin conf may hold, and the Multus keys (its `NetConf`, the thick shim's
/// conf and `daemon-config.json`, which Multus's daemon merges into every
/// call's conf) that have no reader in plexus.
pub const UNREAD: &[(&str, Unread)] = &[
    // cni-SPEC §1, §3: what a runtime or a conflist puts into a plugin's conf.
    ("args", Unread::Accepted),
    ("prevResult", Unread::Accepted),
    ("disableCheck", Unread::Accepted),
    ("disableGC", Unread::Accepted),
    ("cniVersions", Unread::Accepted),
    // cni-SPEC's well-known plugin keys: plexus's networks have their own.
    (
        "ipam",
        Unread::NoEffect("plexus has no IPAM of its own: each network's config has its ipam"),
    ),
    (
        "dns",
        Unread::NoEffect("plexus reports no DNS of its own: the cluster network's result has it"),
    ),
    (
        "ipMasq",
        Unread::NoEffect("plexus sets up no masquerading: the networks' plugins do"),
    ),
    // Multus's NetConf.
    // plexus's DEL always goes on past a failed attachment and reports the failures.
    ("retryDeleteOnError", Unread::Accepted),
    // Multus thick: the shim's conf and daemon-config.json (`plexus install
    // --settings` maps or explains these before they reach a conf).
    (
        "daemonSocketDir",
        Unread::NoEffect(
            "Multus thick's socket directory; plexus's thick mode is daemonSocket, which \
             plexus's settings (deploy/configmap.yaml) set (README \"Thick mode\")",
        ),
    ),
    (
        "socketDir",
        Unread::NoEffect(
            "Multus thick's socket directory; plexus's daemon listens on `plexus daemon --socket`, \
             which `plexus install --daemon-socket` names as daemonSocket for a file that has \
             socketDir",
        ),
    ),
    (
        "metricsPort",
        Unread::NoEffect("plexus's daemon serves /metrics on `plexus daemon --metrics-address`"),
    ),
    (
        "enablePprof",
        Unread::NoEffect("plexus has no profiling endpoint"),
    ),
    (
        "connectionLimit",
        Unread::NoEffect("plexus's daemon bounds its calls with `plexus daemon --max-calls`"),
    ),
    (
        "perNodeCertificate",
        Unread::NoEffect(
            "plexus authenticates with the kubeconfig `plexus install` writes from its service account",
        ),
    ),
    (
        "cniConfigDir",
        Unread::NoEffect("an installer setting: `plexus install --conf-dir`"),
    ),
    (
        "multusAutoconfigDir",
        Unread::NoEffect("an installer setting: `plexus install --conf-dir`"),
    ),
    (
        "multusConfigFile",
        Unread::NoEffect("an installer setting: `plexus install` always generates its conflist"),
    ),
    (
        "multusMasterCNI",
        Unread::NoEffect("an installer setting: see `plexus install --settings`"),
    ),
    (
        "forceCNIVersion",
        Unread::NoEffect(
            "an installer setting: plexus never rewrites the cluster network's conf; its conflist \
             takes that conf's cniVersion",
        ),
    ),
    (
        "overrideNetworkName",
        Unread::NoEffect(
            "an installer setting: plexus's conflist is always named plexus-cni-network",
        ),
    ),
];

/// What becomes of `key`, a key plexus does not read; `None` when nobody knows it.
pub fn unread(key: &str) -> Option<Unread> {
    // cni-SPEC: keys under `cni.dev/` are the runtime's (GC's
    // `cni.dev/valid-attachments`).
    if key.starts_with("cni.dev/") {
        return Some(Unread::Accepted);
    }
    UNREAD
        .iter()
        .find(|(known, _)| fold_eq(key, known))
        .map(|(_, unread)| *unread)
}

/// Warnings about the keys of `conf` that `T` (the raw conf) does not read:
/// each Multus key without effect, with its reason, and each unknown key.
pub fn warnings<T: DeserializeOwned>(conf: &Map<String, Value>) -> Vec<String> {
    conf.keys()
        .filter(|key| !read_by::<T>(key))
        .filter_map(|key| match unread(key) {
            Some(Unread::Accepted) => None,
            Some(Unread::NoEffect(reason)) => Some(format!("{key}: has no effect: {reason}")),
            None => Some(format!(
                "{key}: unknown key, ignored (neither plexus's nor Multus's; README \"Configuration\")"
            )),
        })
        .collect()
}

/// Whether `T` (the raw conf) reads `key`, matched as Go matches keys.
pub fn read_by<T: DeserializeOwned>(key: &str) -> bool {
    struct_fields::<T>().iter().any(|field| fold_eq(key, field))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Raw {
        cluster_network: Option<String>,
        #[serde(rename = "readinessindicatorfile")]
        readiness: Option<String>,
    }

    #[test]
    fn fields_come_from_serde() {
        assert_eq!(
            struct_fields::<Raw>(),
            ["clusterNetwork", "readinessindicatorfile"]
        );
        assert!(struct_fields::<String>().is_empty());
    }

    #[test]
    fn read_and_accepted_keys_are_quiet_others_warn() {
        let conf = json!({
            "ClusterNetwork": "x", "readinessIndicatorFile": "/f", "args": {},
            "cni.dev/valid-attachments": [],
            "retryDeleteOnError": true, "metricsPort": 9091, "fancyNewKey": 1,
        });
        let mut warnings = warnings::<Raw>(conf.as_object().unwrap());
        warnings.sort();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("fancyNewKey: unknown key, ignored"));
        assert!(warnings[1].starts_with("metricsPort: has no effect: plexus's daemon serves"));
    }
}
