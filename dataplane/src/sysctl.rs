//! Network sysctls of one namespace.
//!
//! `/proc/sys/net` shows the network namespace of the thread that *opens* the
//! file, so reads and writes run inside the namespace through
//! [`NetNs::run`]; the calling thread never moves. Several keys can be applied
//! in one visit ([`write_all`], [`read_all`]).
//!
//! # Keys
//!
//! Only keys under `net` are accepted, as a [`SysctlKey`]:
//!
//! - **Separator.** A key is written with dots (`net.ipv4.ip_forward`) or
//!   slashes (`net/ipv4/ip_forward`); the first separator in the key decides
//!   which, as in sysctl(8) and the reference plugins' `pkg/utils/sysctl`.
//! - **Dots inside a component** (an interface such as the vlan `eth0.100`):
//!   - in the slash form, dots are literal: `net/ipv4/conf/eth0.100/rp_filter`;
//!   - in the dotted form, every dot separates, and the reference `tuning`
//!     plugin's placeholder is the way in: a component `IFNAME` is replaced
//!     by the interface name given to [`SysctlKey::for_interface`], *after*
//!     splitting, so `net.ipv4.conf.IFNAME.rp_filter` with `eth0.100` is
//!     `/proc/sys/net/ipv4/conf/eth0.100/rp_filter`. As in sysctl(8), a `/`
//!     inside a dotted key also stands for a literal dot
//!     (`net.ipv4.conf.eth0/100.rp_filter`).
//!   - A literal `net.ipv4.conf.eth0.100.rp_filter` means
//!     `.../conf/eth0/100/rp_filter`, which does not exist (ENOENT when
//!     used), exactly as in the reference tuning plugin. Keys the reference
//!     accepts resolve to the same file here.
//! - **Rejected** before any file is touched: an empty key or component
//!   (`net..x`, a trailing separator), `.` or `..` components, NUL, an
//!   absolute path, a first component other than `net`, a bare `net`, and an
//!   interface name that is not a valid one. Every key therefore names a file
//!   strictly below `/proc/sys/net`.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Errno, Error, Result};
use crate::netns::NetNs;
use plexus_cni::names::IfName;

/// The placeholder the reference tuning plugin replaces by the interface
/// name.
pub const IFNAME_PLACEHOLDER: &str = "IFNAME";

const MAX_KEY_LEN: usize = 1024;

/// A validated network sysctl key: the components of a path under
/// `/proc/sys`, the first being `net`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SysctlKey {
    components: Vec<String>,
}

impl SysctlKey {
    /// Parses a key without interface substitution (an `IFNAME` component is
    /// rejected: use [`SysctlKey::for_interface`]).
    pub fn parse(key: &str) -> Result<Self> {
        Self::build(key, None)
    }

    /// Parses a key, replacing an `IFNAME` component by `ifname`.
    pub fn for_interface(key: &str, ifname: &IfName) -> Result<Self> {
        Self::build(key, Some(ifname))
    }

    /// Parses a key for an interface not known yet (a configuration checked
    /// before its attachment): `IFNAME` stands for itself, which is a valid
    /// interface name, so the key is refused exactly when it would be for
    /// any interface.
    pub fn for_any_interface(key: &str) -> Result<Self> {
        Self::build(key, Some(IFNAME_PLACEHOLDER))
    }

    fn build(key: &str, ifname: Option<&str>) -> Result<Self> {
        let bad = |reason: &str| Err(Error::invalid("sysctl key", key, reason));
        if key.is_empty() {
            return bad("empty");
        }
        if key.len() > MAX_KEY_LEN {
            return bad("too long");
        }
        if key.contains('\0') {
            return bad("contains NUL");
        }
        if key.starts_with('/') {
            return bad("must be relative to /proc/sys (no leading '/')");
        }
        let dotted = key
            .find(['.', '/'])
            .map(|i| key.as_bytes()[i] == b'.')
            .unwrap_or(false);
        let mut components = Vec::new();
        let parts: Box<dyn Iterator<Item = &str>> = if dotted {
            Box::new(key.split('.'))
        } else {
            Box::new(key.split('/'))
        };
        for part in parts {
            let component = if dotted {
                part.replace('/', ".")
            } else {
                part.to_string()
            };
            if component.is_empty() {
                return bad("empty component (leading, trailing or doubled separator)");
            }
            if component == "." || component == ".." {
                return bad("'.' and '..' components are not allowed");
            }
            if component == IFNAME_PLACEHOLDER {
                match ifname {
                    Some(name) => {
                        components.push(name.to_string());
                        continue;
                    }
                    None => return bad("IFNAME placeholder without an interface name"),
                }
            }
            components.push(component);
        }
        if components[0] != "net" {
            return bad("only keys under net are allowed");
        }
        if components.len() < 2 {
            return bad("names a directory, not a setting");
        }
        Ok(SysctlKey { components })
    }

    /// The file under `/proc/sys` (as seen from inside the namespace).
    pub fn path(&self) -> PathBuf {
        let mut p = PathBuf::from("/proc/sys");
        p.extend(&self.components);
        p
    }

    /// The path components, starting with `net`.
    pub fn components(&self) -> &[String] {
        &self.components
    }
}

impl fmt::Display for SysctlKey {
    /// The sysctl(8) dotted form (a dot inside a component shown as `/`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.components.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            f.write_str(&c.replace('.', "/"))?;
        }
        Ok(())
    }
}

impl std::str::FromStr for SysctlKey {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        SysctlKey::parse(s)
    }
}

fn sysctl_error(op: &'static str, key: &SysctlKey, ns: &NetNs, e: &std::io::Error) -> Error {
    Error::Sysctl {
        op,
        key: key.to_string(),
        netns: ns.path().to_path_buf(),
        errno: e.raw_os_error().map_or(Errno::EIO, Errno::from_raw),
    }
}

fn read_file(path: &Path) -> std::io::Result<String> {
    let mut s = std::fs::read_to_string(path)?;
    if s.ends_with('\n') {
        s.pop();
    }
    Ok(s)
}

fn write_file(path: &Path, value: &str) -> std::io::Result<()> {
    // No O_CREAT / O_TRUNC: /proc/sys files exist or the key is wrong.
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(value.as_bytes())
}

fn check_value(key: &SysctlKey, value: &str) -> Result<()> {
    if value.contains('\0') {
        return Err(Error::invalid(
            "sysctl value",
            value,
            format!("for {key}: contains NUL"),
        ));
    }
    Ok(())
}

/// Reads `key` inside `ns` (without the trailing newline).
pub fn read(ns: &NetNs, key: &SysctlKey) -> Result<String> {
    Ok(read_all(ns, std::slice::from_ref(key))?.remove(0))
}

/// Reads several keys inside `ns` in one visit, in order.
pub fn read_all(ns: &NetNs, keys: &[SysctlKey]) -> Result<Vec<String>> {
    ns.run(|| {
        keys.iter()
            .map(|k| read_file(&k.path()).map_err(|e| sysctl_error("read", k, ns, &e)))
            .collect()
    })?
}

/// Writes `value` to `key` inside `ns`.
pub fn write(ns: &NetNs, key: &SysctlKey, value: &str) -> Result<()> {
    write_all(ns, &[(key.clone(), value.to_string())])
}

/// Writes several keys inside `ns` in one visit, in order, stopping at the
/// first failure (earlier writes stay applied).
pub fn write_all(ns: &NetNs, entries: &[(SysctlKey, String)]) -> Result<()> {
    for (k, v) in entries {
        check_value(k, v)?;
    }
    ns.run(|| {
        entries.iter().try_for_each(|(k, v)| {
            write_file(&k.path(), v).map_err(|e| sysctl_error("write", k, ns, &e))
        })
    })?
}

/// The calling thread's own namespace, for messages.
const CURRENT_NS: &str = "/proc/thread-self/ns/net";

fn current_error(op: &'static str, key: &SysctlKey, e: &std::io::Error) -> Error {
    Error::Sysctl {
        op,
        key: key.to_string(),
        netns: PathBuf::from(CURRENT_NS),
        errno: e.raw_os_error().map_or(Errno::EIO, Errno::from_raw),
    }
}

/// Reads `key` in the calling thread's own namespace, without the thread
/// hop of [`read`]: for code that already runs in the namespace it means
/// (a driver in the host namespace, or a closure given to [`NetNs::run`]).
pub fn read_current(key: &SysctlKey) -> Result<String> {
    read_file(&key.path()).map_err(|e| current_error("read", key, &e))
}

/// Writes `key` in the calling thread's own namespace (see [`read_current`]).
pub fn write_current(key: &SysctlKey, value: &str) -> Result<()> {
    check_value(key, value)?;
    write_file(&key.path(), value).map_err(|e| current_error("write", key, &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(key: &str) -> String {
        SysctlKey::parse(key).unwrap().path().display().to_string()
    }

    fn path_if(key: &str, ifname: &str) -> String {
        SysctlKey::for_interface(key, &IfName::new(ifname).unwrap())
            .unwrap()
            .path()
            .display()
            .to_string()
    }

    #[test]
    fn dotted_and_slash_forms() {
        assert_eq!(path("net.ipv4.ip_forward"), "/proc/sys/net/ipv4/ip_forward");
        assert_eq!(path("net/ipv4/ip_forward"), "/proc/sys/net/ipv4/ip_forward");
        assert_eq!(path("net.core.somaxconn"), "/proc/sys/net/core/somaxconn");
    }

    #[test]
    fn dotted_interface_names() {
        // Slash form: dots are literal.
        assert_eq!(
            path("net/ipv4/conf/eth0.100/rp_filter"),
            "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"
        );
        // Dotted form: the tuning plugin's IFNAME placeholder, substituted
        // after splitting.
        assert_eq!(
            path_if("net.ipv4.conf.IFNAME.rp_filter", "eth0.100"),
            "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"
        );
        assert_eq!(
            path_if("net/ipv6/conf/IFNAME/accept_ra", "net1"),
            "/proc/sys/net/ipv6/conf/net1/accept_ra"
        );
        // sysctl(8): '/' in a dotted key is a literal dot.
        assert_eq!(
            path("net.ipv4.conf.eth0/100.rp_filter"),
            "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"
        );
        // A literal dotted name splits, as in the reference plugin.
        assert_eq!(
            path("net.ipv4.conf.eth0.100.rp_filter"),
            "/proc/sys/net/ipv4/conf/eth0/100/rp_filter"
        );
    }

    #[test]
    fn display_is_the_sysctl_dotted_form() {
        let eth0_100 = IfName::new("eth0.100").unwrap();
        let k = SysctlKey::for_interface("net.ipv4.conf.IFNAME.rp_filter", &eth0_100).unwrap();
        assert_eq!(k.to_string(), "net.ipv4.conf.eth0/100.rp_filter");
        assert_eq!(SysctlKey::parse(&k.to_string()).unwrap(), k);
        assert_eq!(k.components()[3], "eth0.100");
    }

    #[test]
    fn rejections() {
        let cases = [
            "",
            "/proc/sys/net/ipv4/ip_forward",
            "/net/ipv4/ip_forward",
            "net",
            "net.",
            "net/",
            ".net.ipv4",
            "net..ipv4",
            "net//ipv4",
            "net/ipv4/../../kernel/hostname",
            "net.ipv4.conf.../..",
            "net/./ipv4",
            "net.ipv4.conf./.rp_filter", // '/' becomes '.' → a "." component
            "net.ipv4.conf.//.rp_filter",
            "kernel.hostname",
            "kernel/hostname",
            "vm.swappiness",
            "netx.ipv4",
            "NET.ipv4.ip_forward",
            "net.ipv4\0.ip_forward",
            "net.ipv4.conf.IFNAME.rp_filter", // placeholder without a name
        ];
        for key in cases {
            let e = SysctlKey::parse(key).unwrap_err();
            assert!(matches!(e, Error::Invalid { .. }), "{key:?}: {e}");
        }
        let long = format!("net.{}", "a".repeat(MAX_KEY_LEN));
        assert!(SysctlKey::parse(&long).is_err());
    }

    #[test]
    fn interface_names_are_validated() {
        // A key takes an IfName: none of these can become a path component.
        for bad in ["", "..", "a/b", "../../kernel", "x".repeat(16).as_str()] {
            assert!(IfName::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_accepted_key_stays_below_proc_sys_net() {
        use std::path::Component;
        let keys = [
            "net.a",
            "net/a/b.c",
            "net.a/b.c",
            "net.ipv4.conf.IFNAME.x",
            "net/ipv4/conf/IFNAME/x",
        ];
        for key in keys {
            let k = SysctlKey::for_interface(key, &IfName::new("eth0.5").unwrap()).unwrap();
            let p = k.path();
            assert!(p.starts_with("/proc/sys/net/"), "{p:?}");
            assert!(
                p.components()
                    .skip(1)
                    .all(|c| matches!(c, Component::Normal(_))),
                "{p:?}"
            );
        }
    }
}
