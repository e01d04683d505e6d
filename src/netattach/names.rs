//! Object naming rules (multi-net-spec §3.3) and references to
//! NetworkAttachmentDefinition objects (`name` or `namespace/name`, §3.3.1,
//! §4.1.1).

use std::fmt;

/// The longest DNS-1123 label, and so the longest namespace name.
pub const DNS1123_LABEL_MAX: usize = 63;
/// The longest Kubernetes object name (a DNS-1123 subdomain).
pub const OBJECT_NAME_MAX: usize = 253;

/// The regular expression of §3.3, `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, matched
/// against the whole of `s`.
fn matches_label_regex(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && b.iter().all(|c| alnum(c) || *c == b'-')
        }
        _ => false,
    }
}

const LABEL_RULE: &str = "a DNS-1123 label must consist of lower case alphanumeric characters or \
                          '-', and must start and end with an alphanumeric character \
                          (multi-net-spec §3.3)";

/// Not empty, and at most `max` characters; `quoted`: the message starts
/// with the name.
fn check_length(s: &str, max: usize, quoted: bool) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > max {
        let shown = if quoted {
            format!("{s:?} ")
        } else {
            String::new()
        };
        return Err(format!(
            "{shown}must be no more than {max} characters, got {}",
            s.len()
        ));
    }
    Ok(())
}

/// A DNS-1123 label (§3.3 regex), at most 63 characters: the rule for
/// namespace names.
pub fn check_dns1123_label(s: &str) -> Result<(), String> {
    check_length(s, DNS1123_LABEL_MAX, true)?;
    if !matches_label_regex(s) {
        return Err(format!("{s:?} is not valid: {LABEL_RULE}"));
    }
    Ok(())
}

/// A NetworkAttachmentDefinition object name (§3.3): units of the DNS-1123
/// label format separated by '.', at most 253 characters in all (the
/// Kubernetes limit for object names). Units longer than 63 characters are
/// allowed here because §3.3 only recommends that limit; see
/// [`nad_name_warning`].
pub fn check_nad_name(s: &str) -> Result<(), String> {
    check_length(s, OBJECT_NAME_MAX, false)?;
    if !s.split('.').all(matches_label_regex) {
        return Err(format!(
            "{s:?} is not valid: each '.'-separated unit must match \
             [a-z0-9]([-a-z0-9]*[a-z0-9])?; {LABEL_RULE}"
        ));
    }
    Ok(())
}

/// The §3.3 recommendation, as a warning, when a unit of `name` is longer
/// than 63 characters.
pub fn nad_name_warning(name: &str) -> Option<String> {
    name.split('.')
        .find(|unit| unit.len() > DNS1123_LABEL_MAX)
        .map(|unit| {
            format!(
                "{name:?}: unit {unit:?} is {} characters; multi-net-spec §3.3: \
                 \"It is recommended that each unit of DNS-1123 label be 63 characters or less.\"",
                unit.len()
            )
        })
}

/// A reference to a NetworkAttachmentDefinition object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NetworkRef {
    pub namespace: String,
    pub name: String,
}

impl NetworkRef {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        NetworkRef {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Parse `name` (in `default_namespace`) or `namespace/name` (§3.3.1),
    /// validating both parts. The error is the reason only.
    pub fn parse(s: &str, default_namespace: &str) -> Result<NetworkRef, String> {
        let (namespace, name) = match s.split_once('/') {
            Some((ns, name)) => {
                if name.contains('/') {
                    return Err(format!(
                        "{s:?} is not a network reference: expected \"name\" or \"namespace/name\""
                    ));
                }
                check_dns1123_label(ns).map_err(|r| format!("namespace {r}"))?;
                (ns, name)
            }
            None => (default_namespace, s),
        };
        check_nad_name(name).map_err(|r| format!("name {r}"))?;
        Ok(NetworkRef::new(namespace, name))
    }
}

impl fmt::Display for NetworkRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1123_label_per_3_3() {
        for ok in ["a", "0", "net-a", "a-b-c", "123", &"a".repeat(63)] {
            assert_eq!(check_dns1123_label(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "a_b",
            "a.b",
            "a b",
            "é",
            &"a".repeat(64),
        ] {
            assert!(check_dns1123_label(bad).is_err(), "{bad}");
        }
        assert!(check_dns1123_label("Net")
            .unwrap_err()
            .contains("lower case alphanumeric"));
        assert_eq!(
            check_dns1123_label(&"a".repeat(64)).unwrap_err(),
            format!(
                "{:?} must be no more than 63 characters, got 64",
                "a".repeat(64)
            )
        );
    }

    #[test]
    fn nad_names_are_units_of_labels() {
        // multi-net-spec §3.3.1 names, and IPAMClaim-style dotted names (§8.3.1).
        for ok in [
            "attachment-name",
            "vm-a.tenantred",
            "a.b.c",
            &"a".repeat(64),
        ] {
            assert_eq!(check_nad_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "a..b", ".a", "a.", "A", "a/b", "a_b", &"a".repeat(254)] {
            assert!(check_nad_name(bad).is_err(), "{bad}");
        }
        assert!(nad_name_warning("short.name").is_none());
        let w = nad_name_warning(&format!("x.{}", "a".repeat(64))).unwrap();
        assert!(w.contains("63 characters or less"), "{w}");
    }

    #[test]
    fn network_ref_parse_and_display() {
        // multi-net-spec §3.3.1 examples.
        let r = NetworkRef::parse("example-namespace/attachment-name", "pod-ns").unwrap();
        assert_eq!(r, NetworkRef::new("example-namespace", "attachment-name"));
        assert_eq!(r.to_string(), "example-namespace/attachment-name");
        let r = NetworkRef::parse("attachment-name", "pod-ns").unwrap();
        assert_eq!(r.to_string(), "pod-ns/attachment-name");

        assert!(NetworkRef::parse("a/b/c", "ns")
            .unwrap_err()
            .contains("namespace/name"));
        assert!(NetworkRef::parse("/b", "ns")
            .unwrap_err()
            .starts_with("namespace "));
        assert!(NetworkRef::parse("ns/", "ns")
            .unwrap_err()
            .starts_with("name "));
        assert!(NetworkRef::parse("Ns/b", "ns").is_err());
        assert!(NetworkRef::parse("ns/B", "ns").is_err());
    }
}
