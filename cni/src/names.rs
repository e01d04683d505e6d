//! Name rules of the CNI protocol and the kernel: interface names, container
//! IDs, network namespace paths, network names and plugin types. Each check
//! returns the human reason a name is invalid; callers prefix it with the
//! field or variable it came from.
//!
//! [`IfName`], [`ContainerId`], [`NetnsPath`] and [`PluginType`] carry a name
//! that passed its check: made once where the name enters (the CNI
//! environment, a file, a config, a kernel reply), they need no checking
//! where they are used, down to netlink and the IPAM stores.

use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Serialize};

/// A string newtype whose every value passed `$check`: built by `new` (or
/// `TryFrom<String>`, which serde uses), read as a `&str`.
macro_rules! checked_name {
    ($(#[$doc:meta])* $name:ident, $check:path) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// The name, if it passes the rule; else the reason it does not.
            pub fn new(name: impl Into<String>) -> Result<$name, String> {
                let name = name.into();
                $check(&name)?;
                Ok($name(name))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<std::path::Path> for $name {
            fn as_ref(&self) -> &std::path::Path {
                self.0.as_ref()
            }
        }

        /// As the string: messages quote a name with `{:?}`.
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(name: &str) -> Result<$name, String> {
                $name::new(name)
            }
        }

        impl TryFrom<String> for $name {
            type Error = String;
            fn try_from(name: String) -> Result<$name, String> {
                $name::new(name)
            }
        }

        impl From<$name> for String {
            fn from(name: $name) -> String {
                name.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }
    };
}

checked_name!(
    /// A kernel interface name ([`check_ifname`]): `CNI_IFNAME`, and any
    /// name plexus gives a link.
    IfName,
    check_ifname
);

checked_name!(
    /// A container ID ([`check_container_id`], cni-SPEC §2 `CNI_CONTAINERID`).
    ContainerId,
    check_container_id
);

checked_name!(
    /// A network namespace's path ([`check_netns_path`], cni-SPEC §2
    /// `CNI_NETNS`): the one type for it from the environment to the record
    /// files, read as a [`Path`](std::path::Path) by [`NetnsPath::as_path`].
    NetnsPath,
    check_netns_path
);

checked_name!(
    /// A plugin's `type` ([`check_plugin_type`], cni-SPEC §1): the name of the
    /// binary that runs it.
    PluginType,
    check_plugin_type
);

impl NetnsPath {
    pub fn as_path(&self) -> &std::path::Path {
        self.0.as_ref()
    }
}

impl IfName {
    /// `lo`, the loopback device every network namespace has.
    pub fn loopback() -> IfName {
        IfName("lo".into())
    }

    /// A name a pod's attachment can own ([`check_pod_ifname`]): not `lo`.
    pub fn for_pod(name: impl Into<String>) -> Result<IfName, String> {
        let name = name.into();
        check_pod_ifname(&name)?;
        Ok(IfName(name))
    }
}

/// Serde for an optional name whose wire form writes "none" as an empty
/// string or leaves it out (whereabouts' `ifname`, `containerid`, a plugin's
/// `master`): `""`, `null` and a missing key read as `None`, and `None` is left out (use with
/// `#[serde(default, skip_serializing_if = "Option::is_none", with = …)]`).
pub mod empty_is_none {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T, S>(name: &Option<T>, s: S) -> Result<S::Ok, S::Error>
    where
        T: AsRef<str>,
        S: Serializer,
    {
        name.as_ref().map_or("", AsRef::as_ref).serialize(s)
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<Option<T>, D::Error>
    where
        T: TryFrom<String, Error = String>,
        D: Deserializer<'de>,
    {
        // `null` is Go's zero value too: encoding/json leaves the string empty.
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(name) if name.is_empty() => Ok(None),
            Some(name) => T::try_from(name)
                .map(Some)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// Longest interface name the kernel accepts (IFNAMSIZ - 1).
pub const MAX_IFNAME_LEN: usize = 15;

/// A kernel interface name (`dev_valid_name`): 1–15 bytes, not `.` or `..`, no
/// `/`, `:`, NUL or whitespace.
pub fn check_ifname(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > MAX_IFNAME_LEN {
        return Err(format!(
            "{name:?} is {} bytes long, the kernel allows at most {MAX_IFNAME_LEN}",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Err(format!("{name:?} is not a valid interface name"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| matches!(c, '/' | ':' | '\0') || c.is_whitespace())
    {
        return Err(format!("{name:?} must not contain {c:?}"));
    }
    Ok(())
}

/// An interface name a pod's attachment can own: a valid name
/// ([`check_ifname`]) other than `lo`, the loopback device every network
/// namespace has from its start (multi-net-spec §4.1.2.1.5: "must be a valid
/// Linux kernel interface name"; an attachment named `lo` could only fail,
/// and its DEL would take the pod's loopback).
pub fn check_pod_ifname(name: &str) -> Result<(), String> {
    check_ifname(name)?;
    if name == "lo" {
        return Err("\"lo\" is the loopback interface every network namespace has; no attachment can own it".into());
    }
    Ok(())
}

/// cni-SPEC §2 `CNI_CONTAINERID`: not empty, an alphanumeric character, then
/// any of alphanumerics, `_`, `.` and `-`.
pub fn check_container_id(id: &str) -> Result<(), String> {
    check_identifier(id)
}

/// cni-SPEC §2 `CNI_NETNS`: an absolute path.
pub fn check_netns_path(path: &str) -> Result<(), String> {
    if !std::path::Path::new(path).is_absolute() {
        return Err(format!("{path:?} must be an absolute path"));
    }
    Ok(())
}

/// cni-SPEC §1 `name`: the same character rule as container IDs, which also
/// keeps the name safe to use as a file name.
pub fn check_network_name(name: &str) -> Result<(), String> {
    check_identifier(name)
}

/// The shared rule of cni-SPEC §1 (`name`) and §2 (`CNI_CONTAINERID`).
fn check_identifier(s: &str) -> Result<(), String> {
    let mut chars = s.chars();
    match chars.next() {
        None => return Err("must not be empty".into()),
        Some(c) if !c.is_ascii_alphanumeric() => {
            return Err(format!(
                "{s:?} must start with an alphanumeric character, not {c:?}"
            ))
        }
        Some(_) => {}
    }
    if let Some(c) = chars.find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))) {
        return Err(format!(
            "{s:?} must contain only alphanumerics, '_', '.' and '-', not {c:?}"
        ));
    }
    Ok(())
}

/// cni-SPEC §1 plugin `type`: the name of a binary, so no path separators (`/`,
/// `\`), no NUL and not `.` or `..`.
pub fn check_plugin_type(t: &str) -> Result<(), String> {
    if t.is_empty() {
        return Err("must not be empty".into());
    }
    if t == "." || t == ".." {
        return Err(format!("{t:?} is not a plugin binary name"));
    }
    if let Some(c) = t.chars().find(|c| matches!(c, '/' | '\\' | '\0')) {
        return Err(format!("{t:?} must not contain {c:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `check` accepts every name of `ok` and refuses every one of `bad`.
    #[track_caller]
    fn sorts(check: fn(&str) -> Result<(), String>, ok: &[&str], bad: &[&str]) {
        for name in ok {
            assert_eq!(check(name), Ok(()), "{name:?}");
        }
        for name in bad {
            assert!(check(name).is_err(), "{name:?}");
        }
    }

    #[test]
    fn typed_names_are_checked_at_construction_and_in_serde() {
        assert_eq!(IfName::new("eth0").unwrap(), "eth0");
        assert_eq!(format!("{:?}", IfName::new("eth0").unwrap()), "\"eth0\"");
        assert_eq!(
            IfName::new("eth0/x").unwrap_err(),
            check_ifname("eth0/x").unwrap_err()
        );
        assert_eq!(
            ContainerId::new("-x").unwrap_err(),
            check_container_id("-x").unwrap_err()
        );
        let id: ContainerId = serde_json::from_str("\"abc-1\"").unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"abc-1\"");
        let e = serde_json::from_str::<IfName>("\"a:b\"").unwrap_err();
        assert!(e.to_string().contains("must not contain ':'"), "{e}");
        let ns: NetnsPath = serde_json::from_str("\"/run/netns/x\"").unwrap();
        assert_eq!(ns.as_path(), std::path::Path::new("/run/netns/x"));
        assert_eq!(serde_json::to_string(&ns).unwrap(), "\"/run/netns/x\"");
        assert_eq!(
            NetnsPath::new("netns/x").unwrap_err(),
            r#""netns/x" must be an absolute path"#
        );
        assert_eq!(PluginType::new("bridge").unwrap(), "bridge");
        assert_eq!(
            PluginType::new("../x").unwrap_err(),
            check_plugin_type("../x").unwrap_err()
        );
    }

    #[test]
    fn empty_is_none_reads_an_empty_name_as_none() {
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct Entry {
            #[serde(
                default,
                skip_serializing_if = "Option::is_none",
                with = "empty_is_none"
            )]
            ifname: Option<IfName>,
        }
        let read = |json: &str| serde_json::from_str::<Entry>(json);
        assert_eq!(read(r#"{"ifname": ""}"#).unwrap(), Entry { ifname: None });
        assert_eq!(read("{}").unwrap(), Entry { ifname: None });
        assert_eq!(read(r#"{"ifname": null}"#).unwrap(), Entry { ifname: None });
        let net1 = read(r#"{"ifname": "net1"}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&net1).unwrap(),
            r#"{"ifname":"net1"}"#
        );
        assert_eq!(
            serde_json::to_string(&Entry { ifname: None }).unwrap(),
            "{}"
        );
        let e = read(r#"{"ifname": "a b"}"#).unwrap_err();
        assert!(e.to_string().contains("must not contain ' '"), "{e}");
    }

    #[test]
    fn ifname_kernel_rules() {
        sorts(
            check_ifname,
            &["eth0", "a", "net1", "123456789012345", "veth-x_y.z", "é"],
            &[
                ".", "..", "eth:0", "eth 0", "eth\t0", "eth\n", "a\u{a0}b", "a\0",
            ],
        );
        assert_eq!(check_ifname("").unwrap_err(), "must not be empty");
        assert!(check_ifname("1234567890123456")
            .unwrap_err()
            .contains("16 bytes long"));
        // 15 characters but 16 bytes: the kernel counts bytes.
        assert!(check_ifname("éééééééé").unwrap_err().contains("bytes long"));
        assert!(check_ifname("...").is_ok());
        assert_eq!(
            check_ifname("eth0/x").unwrap_err(),
            r#""eth0/x" must not contain '/'"#
        );
        // The cases the data plane's own check had, moved here.
        sorts(
            check_ifname,
            &["eth0.100", "veth1234567890a", "a-b_c@d"],
            &["veth1234567890ab"],
        );
    }

    #[test]
    fn container_id_rules() {
        // cni-SPEC §2 CNI_CONTAINERID.
        sorts(
            check_container_id,
            &["a", "0", "abc-123_x.y", "A.B", "deadbeef"],
            &["-a", "_a", ".a", "a b", "a/b", "a:b", "ä", "a\0"],
        );
        assert_eq!(check_container_id("").unwrap_err(), "must not be empty");
        assert!(check_container_id("-x")
            .unwrap_err()
            .contains("must start with an alphanumeric"));
    }

    #[test]
    fn network_name_rules() {
        // cni-SPEC §1 `name`.
        sorts(
            check_network_name,
            &["dbnet", "k8s-pod-network.v1_2"],
            &["", "-net", "my net", "net/1", "..", "net\\x"],
        );
    }

    #[test]
    fn plugin_type_rules() {
        // cni-SPEC §1 `type`: no characters disallowed in file paths.
        sorts(
            check_plugin_type,
            &["bridge", "host-local", "my.plugin", "...", "weird name"],
            &["", ".", "..", "../bridge", "/usr/bin/x", "a\\b", "a\0b"],
        );
    }
}
