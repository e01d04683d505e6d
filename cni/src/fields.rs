//! Small helpers shared by the decoders of JSON that Go programs write
//! (multi-net annotations and objects, device-info files): Go-style key
//! matching ([`crate::casefold::select`]), value descriptions for error messages, and the
//! address syntaxes the multi-net spec names (IP with prefix, MAC, GUID).

use std::net::IpAddr;

use serde_json::{Map, Value};

use crate::casefold::select;

/// The fields of `obj` sorted into the known ones and the rest, the way Go
/// decodes an object into a struct: a key selects the field it names exactly,
/// else the first field it case-folds to; when several keys select one field
/// the last in document order wins. `null` values count as absent (Go leaves
/// the field unset).
pub struct Folded<'a> {
    /// Per entry of `known`: the key as written and its value.
    pub known: Vec<Option<(&'a str, &'a Value)>>,
    /// Keys matching no known field, in document order.
    pub unknown: Vec<(&'a str, &'a Value)>,
}

pub fn fold_object<'a>(obj: &'a Map<String, Value>, known: &[&str]) -> Folded<'a> {
    let mut out = Folded {
        known: vec![None; known.len()],
        unknown: Vec::new(),
    };
    for (key, value) in obj {
        let idx = select(key, known);
        match idx {
            Some(_) if value.is_null() => {}
            Some(i) => out.known[i] = Some((key.as_str(), value)),
            None => out.unknown.push((key.as_str(), value)),
        }
    }
    out
}

/// A short rendering of a JSON value for error messages: `5`, `"eth0"`, or an
/// abbreviated object.
pub fn describe(v: &Value) -> String {
    const MAX: usize = 60;
    let s = v.to_string();
    if s.chars().count() <= MAX {
        return s;
    }
    let cut: String = s.chars().take(MAX).collect();
    format!("{cut}...")
}

/// `must be a string, got 5`.
pub fn want(kind: &str, got: &Value) -> String {
    format!("must be {kind}, got {}", describe(got))
}

pub fn as_str(v: &Value) -> Result<&str, String> {
    v.as_str().ok_or_else(|| want("a string", v))
}

pub fn as_object(v: &Value) -> Result<&Map<String, Value>, String> {
    v.as_object().ok_or_else(|| want("an object", v))
}

pub fn as_array(v: &Value) -> Result<&Vec<Value>, String> {
    v.as_array().ok_or_else(|| want("a list", v))
}

pub fn as_bool(v: &Value) -> Result<bool, String> {
    v.as_bool().ok_or_else(|| want("a boolean", v))
}

/// An IPv4 or IPv6 address with an optional `/prefix` whose length fits the
/// family (cni-CONVENTIONS "ips": `<ip>[/<prefix>]`). Zones are not allowed.
pub fn parse_ip_with_prefix(s: &str) -> Option<(IpAddr, Option<u8>)> {
    let (addr, prefix) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let ip: IpAddr = addr.parse().ok()?;
    let prefix = match prefix {
        None => None,
        Some(p) => {
            if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let n: u8 = p.parse().ok()?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            if n > max {
                return None;
            }
            Some(n)
        }
    };
    Some((ip, prefix))
}

/// `count` two-digit hex octets joined by one separator out of `seps`, used
/// consistently (`aa:bb:cc:dd:ee:ff`, `aa-bb-cc-dd-ee-ff`).
pub fn is_hex_octets(s: &str, count: usize, seps: &[char]) -> bool {
    let Some(sep) = s.chars().find(|c| !c.is_ascii_hexdigit()) else {
        return false;
    };
    if !seps.contains(&sep) {
        return false;
    }
    let parts: Vec<&str> = s.split(sep).collect();
    parts.len() == count
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fold_object_prefers_exact_and_last_wins() {
        let v = json!({"Name": "a", "name": "b", "NAME": "c", "x.y": 1, "ips": null});
        let f = fold_object(v.as_object().unwrap(), &["name", "ips"]);
        assert_eq!(f.known[0], Some(("NAME", &json!("c"))));
        assert_eq!(f.known[1], None);
        assert_eq!(f.unknown, vec![("x.y", &json!(1))]);
    }

    #[test]
    fn ip_with_prefix() {
        assert_eq!(
            parse_ip_with_prefix("10.2.2.42/24"),
            Some(("10.2.2.42".parse().unwrap(), Some(24)))
        );
        assert_eq!(
            parse_ip_with_prefix("2001:db8::5"),
            Some(("2001:db8::5".parse().unwrap(), None))
        );
        assert!(parse_ip_with_prefix("2001:db8::5/128").is_some());
        for bad in [
            "1.2.3.4/33",
            "2001:db8::/129",
            "1.2.3.4/",
            "1.2.3.4/+1",
            "1.2.3",
            "01.2.3.4",
            "fe80::1%eth0",
            "",
            "1.2.3.4/24/1",
        ] {
            assert_eq!(parse_ip_with_prefix(bad), None, "{bad}");
        }
    }

    #[test]
    fn hex_octets() {
        assert!(is_hex_octets("aa:bb:cc:dd:ee:FF", 6, &[':', '-']));
        assert!(is_hex_octets("aa-bb-cc-dd-ee-ff", 6, &[':', '-']));
        assert!(!is_hex_octets("aa:bb-cc:dd:ee:ff", 6, &[':', '-']));
        assert!(!is_hex_octets("aa:bb:cc:dd:ee", 6, &[':']));
        assert!(!is_hex_octets("aabb.ccdd.eeff", 6, &[':', '-']));
        assert!(!is_hex_octets("a:bb:cc:dd:ee:ff", 6, &[':']));
        assert!(!is_hex_octets("aabbccddeeff", 6, &[':']));
        assert!(is_hex_octets("24:8a:07:03:00:8d:ae:2f", 8, &[':']));
    }

    #[test]
    fn describe_abbreviates() {
        assert_eq!(describe(&json!("x")), "\"x\"");
        let long = json!({"k": "a".repeat(100)});
        assert!(describe(&long).ends_with("..."));
        assert_eq!(want("a string", &json!(5)), "must be a string, got 5");
    }
}
