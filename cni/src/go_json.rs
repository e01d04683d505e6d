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

/// `obj` with each key that selects one of `fields` ([`fold_object`])
/// spelled as that field, the other keys as written. serde reads a struct
/// with a `#[serde(flatten)]` field as a map, whose keys
/// [`crate::casefold`] cannot fold: decoders of such structs spell the keys
/// first, as Go matches them.
pub fn spell_keys(obj: &Map<String, Value>, fields: &[&str]) -> Value {
    let f = fold_object(obj, fields);
    let known = f
        .known
        .iter()
        .zip(fields)
        .filter_map(|(entry, field)| entry.map(|(_, v)| (field.to_string(), v.clone())));
    let unknown = f.unknown.iter().map(|(k, v)| (k.to_string(), (*v).clone()));
    Value::Object(known.chain(unknown).collect())
}

/// The keys of the object `v` that select none of `fields` as Go matches
/// them (keys a struct decode ignores), in document order.
pub fn unknown_keys<'a>(v: &'a Value, fields: &[&str]) -> Vec<&'a str> {
    v.as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k.as_str())
        .filter(|k| select(k, fields).is_none())
        .collect()
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
    optional_strings(d).map(Option::unwrap_or_default)
}

/// `#[serde(default, deserialize_with)]` for a list of strings that may be
/// absent, told apart from an empty one.
pub fn optional_strings<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let Some(items) = kind(d, "a list", |v| match v {
        Value::Array(items) => Ok(items),
        v => Err(v),
    })?
    else {
        return Ok(None);
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
        .collect::<Result<_, _>>()
        .map(Some)
}

/// `#[serde(default, deserialize_with)]` for an optional `u32`.
pub fn optional_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    kind(d, "an unsigned integer", |v| {
        v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or(v)
    })
}

/// `#[serde(deserialize_with)]` for a required TCP/UDP/SCTP port, 1 to
/// 65535.
pub fn port<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    kind(d, "an integer from 1 to 65535", |v| {
        v.as_u64()
            .filter(|p| *p > 0)
            .and_then(|p| u16::try_from(p).ok())
            .ok_or(v)
    })?
    .ok_or_else(|| de::Error::custom(REQUIRED))
}

/// `#[serde(default, deserialize_with)]` for an optional integer above 0.
pub fn optional_positive_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    kind(d, "a positive integer", |v| {
        v.as_u64().filter(|n| *n > 0).ok_or(v)
    })
}

/// `#[serde(default, deserialize_with)]` for an optional boolean.
pub fn optional_boolean<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    kind(d, "a boolean", |v| v.as_bool().ok_or(v))
}

/// `#[serde(default, deserialize_with)]` for a boolean, false when absent.
pub fn boolean<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    optional_boolean(d).map(Option::unwrap_or_default)
}

/// `#[serde(default, deserialize_with)]` for an object kept as JSON.
pub fn optional_object<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    optional_map(d).map(|m| m.map(Value::Object))
}

/// `#[serde(default, deserialize_with)]` for an object kept as a JSON map.
pub fn optional_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Map<String, Value>>, D::Error> {
    kind(d, "an object", |v| match v {
        Value::Object(m) => Ok(m),
        v => Err(v),
    })
}

/// `#[serde(default, deserialize_with)]` for a list, empty when absent or
/// `null` (a Go nil slice).
pub fn list<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// `#[serde(default, deserialize_with)]` for an optional struct, which must
/// be written as an object.
pub fn optional_struct<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    Ok(Option::<ObjectOnly<T>>::deserialize(d)?.map(|o| o.0))
}

/// `#[serde(default, deserialize_with)]` for an optional list of structs,
/// each written as an object.
pub fn optional_structs<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Vec<T>>, D::Error> {
    Ok(Option::<Vec<ObjectOnly<T>>>::deserialize(d)?
        .map(|items| items.into_iter().map(|o| o.0).collect()))
}

/// A struct read only from a JSON object: serde_json (and so
/// [`crate::casefold`]) also reads a struct from a list of its fields' values,
/// which Go refuses. The refusal says `expected struct`, which
/// [`decode_error`] words as Go does.
struct ObjectOnly<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ObjectOnly<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(NoSeqStruct(d)).map(ObjectOnly)
    }
}

/// A deserializer handing structs a visitor that refuses a sequence.
struct NoSeqStruct<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for NoSeqStruct<D> {
    type Error = D::Error;

    fn deserialize_any<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_struct<V: de::Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_struct(name, fields, MapOnly(visitor))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// A struct's visitor that accepts a map only (serde's default for the other
/// `visit_*` is an `invalid type` error naming what it expects).
struct MapOnly<V>(V);

impl<'de, V: de::Visitor<'de>> de::Visitor<'de> for MapOnly<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.expecting(f)
    }

    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(map)
    }
}

/// A decoding failure of `input` (read through [`crate::casefold`]) as a
/// code-6 error `key: reason`, the key the path of the value that failed
/// (`pci.pci-address`, `ips[1]`); `what` names the input itself.
pub fn decode_error(e: PathError, input: &Value, what: &str) -> CniError {
    let (at, reason) = decode_failure(e, input, what);
    CniError::decode(at, reason)
}

/// [`decode_error`]'s key and reason, for callers with their own error type.
/// serde names a missing field in the message of the map holding it, and a
/// value of the wrong shape by the Rust type; both are said as the keys are.
pub fn decode_failure(e: PathError, input: &Value, what: &str) -> (String, String) {
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
        return (join(key), REQUIRED.to_string());
    }
    let at = if e.path.is_empty() {
        what.to_string()
    } else {
        e.path.clone()
    };
    let value = || value_at(input, &e.path).unwrap_or(&Value::Null);
    if message.contains(", expected struct ") {
        return (at, want("an object", value()));
    }
    if message.ends_with(", expected a sequence") {
        return (at, want("a list", value()));
    }
    match message.split_once(": ") {
        // A list's element (`[1]: must be ...`).
        Some((index, reason)) if index.starts_with('[') => (join(index), reason.to_string()),
        _ => (at, message),
    }
}

/// The value at a [`PathError`] path (`a.b[2].c`). Keys may hold dots, so
/// each step takes a key of the object that the path continues from.
fn value_at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    if path.is_empty() {
        return Some(v);
    }
    if let Some(rest) = path.strip_prefix('[') {
        let (index, rest) = rest.split_once(']')?;
        return value_at(v.get(index.parse::<usize>().ok()?)?, rest);
    }
    let path = path.strip_prefix('.').unwrap_or(path);
    v.as_object()?.iter().find_map(|(key, child)| {
        let rest = path.strip_prefix(key.as_str())?;
        if rest.is_empty() || rest.starts_with(['.', '[']) {
            value_at(child, rest)
        } else {
            None
        }
    })
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

    #[derive(Debug, serde::Deserialize)]
    struct Inner {
        #[serde(default, deserialize_with = "optional_positive_u64")]
        rate: Option<u64>,
    }

    #[derive(Debug, serde::Deserialize)]
    struct Outer {
        #[serde(default, deserialize_with = "optional_struct")]
        one: Option<Inner>,
        #[serde(default, deserialize_with = "optional_structs")]
        many: Option<Vec<Inner>>,
    }

    fn failure(v: Value) -> (String, String) {
        let e = crate::casefold::from_value_at::<Outer>(&v).unwrap_err();
        decode_failure(e, &v, "outer")
    }

    #[test]
    fn structs_only_from_objects_named_by_path() {
        let o: Outer =
            crate::casefold::from_value(&json!({"ONE": {"Rate": 2}, "many": [{"rate": 3}]}))
                .unwrap();
        assert_eq!(o.one.unwrap().rate, Some(2));
        assert_eq!(o.many.unwrap()[0].rate, Some(3));
        let at = |path: &str, reason: &str| (path.to_string(), reason.to_string());
        assert_eq!(
            failure(json!({"one": [2]})),
            at("one", "must be an object, got [2]")
        );
        assert_eq!(
            failure(json!({"many": {"rate": 1}})),
            at("many", "must be a list, got {\"rate\":1}")
        );
        assert_eq!(
            failure(json!({"many": [{"rate": 1}, 7]})),
            at("many[1]", "must be an object, got 7")
        );
        assert_eq!(
            failure(json!({"many": [{"Rate": 0}]})),
            at("many[0].Rate", "must be a positive integer, got 0")
        );
        assert_eq!(failure(json!(5)), at("outer", "must be an object, got 5"));
    }

    #[test]
    fn value_at_reads_dotted_keys_and_indices() {
        let v = json!({"a.b": [{"c": 1}], "a": {"b": 2}});
        assert_eq!(value_at(&v, "a.b[0].c"), Some(&json!(1)));
        assert_eq!(value_at(&v, "a.b"), Some(&json!([{"c": 1}])));
        assert_eq!(value_at(&v, "x"), None);
    }

    #[test]
    fn spell_keys_and_unknown_keys() {
        let v = json!({"NAME": "a", "ips": null, "Extra": 1, "x.y": 2});
        let fields = ["name", "ips"];
        assert_eq!(
            spell_keys(v.as_object().unwrap(), &fields),
            json!({"name": "a", "Extra": 1, "x.y": 2})
        );
        assert_eq!(unknown_keys(&v, &fields), vec!["Extra", "x.y"]);
    }
}
