//! Small helpers shared by the decoders of JSON that Go programs write
//! (multi-net annotations and objects, device-info files): Go-style key
//! matching ([`crate::casefold::select`]), value descriptions for error messages, and the
//! address syntaxes the multi-net spec names (IP with prefix, MAC, GUID).

use std::net::IpAddr;

use serde::{de, Deserialize, Deserializer};
use serde_json::{Map, Value};

use crate::casefold::{select, PathError};
use crate::error::CniError;

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

// ---------------------------------------------------------------------------
// serde field readers for JSON that Go programs write: `null` is an absent
// key, and a value of the wrong kind fails with [`want`]'s wording. Decoded
// through [`crate::casefold`], whose path of the failing value
// [`decode_error`] puts in front.

/// The reason of a required key that is absent (or `null`).
pub const REQUIRED: &str = "required";

fn kind<'de, D: Deserializer<'de>, T>(
    d: D,
    expected: &str,
    read: impl FnOnce(Value) -> Result<T, Value>,
) -> Result<Option<T>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v => read(v)
            .map(Some)
            .map_err(|v| de::Error::custom(want(expected, &v))),
    }
}

/// `#[serde(deserialize_with)]` for a required string.
pub fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    optional_string(d)?.ok_or_else(|| de::Error::custom(REQUIRED))
}

/// `#[serde(default, deserialize_with)]` for an optional string.
pub fn optional_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    kind(d, "a string", |v| match v {
        Value::String(s) => Ok(s),
        v => Err(v),
    })
}

/// `#[serde(default, deserialize_with)]` for a list of strings; a bad
/// element is named by its index (`[1]: must be a string, got 5`).
pub fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let Some(items) = kind(d, "a list", |v| match v {
        Value::Array(items) => Ok(items),
        v => Err(v),
    })?
    else {
        return Ok(Vec::new());
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) => Ok(s),
            v => Err(de::Error::custom(format!(
                "[{i}]: {}",
                want("a string", &v)
            ))),
        })
        .collect()
}

/// `#[serde(default, deserialize_with)]` for an optional `u32`.
pub fn optional_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    kind(d, "an unsigned integer", |v| {
        v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or(v)
    })
}

/// `#[serde(default, deserialize_with)]` for a boolean, false when absent.
pub fn boolean<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    kind(d, "a boolean", |v| v.as_bool().ok_or(v)).map(Option::unwrap_or_default)
}

/// `#[serde(default, deserialize_with)]` for an object kept as JSON.
pub fn optional_object<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    kind(
        d,
        "an object",
        |v| if v.is_object() { Ok(v) } else { Err(v) },
    )
}

/// A decoding failure of `input` (read through [`crate::casefold`]) as a
/// code-6 error `key: reason`, the key the path of the value that failed
/// (`pci.pci-address`, `ips[1]`); `what` names the input itself. serde
/// names a missing field in the message of the map holding it, and a map of
/// the wrong type by the Rust type; both are said as the keys are.
pub fn decode_error(e: PathError, input: &Value, what: &str) -> CniError {
    let message = e.error.to_string();
    let join = |key: &str| match (e.path.as_str(), key) {
        ("", key) => key.to_string(),
        (path, key) if key.starts_with('[') => format!("{path}{key}"),
        (path, key) => format!("{path}.{key}"),
    };
    if let Some(key) = message
        .strip_prefix("missing field `")
        .and_then(|m| m.strip_suffix('`'))
    {
        return CniError::decode(join(key), REQUIRED);
    }
    let at = if e.path.is_empty() {
        what
    } else {
        e.path.as_str()
    };
    if message.contains(", expected struct ") {
        let value = e
            .path
            .split('.')
            .filter(|key| !key.is_empty())
            .try_fold(input, |v, key| v.get(key))
            .unwrap_or(&Value::Null);
        return CniError::decode(at, want("an object", value));
    }
    match message.split_once(": ") {
        // A list's element (`[1]: must be ...`).
        Some((index, reason)) if index.starts_with('[') => CniError::decode(join(index), reason),
        _ => CniError::decode(at, message),
    }
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
