//! Small helpers shared by the decoders of JSON that Go programs write
//! (multi-net annotations and objects, device-info files): Go-style key
//! matching ([`crate::casefold::select`]), value descriptions for error messages, and the
//! address syntaxes the multi-net spec names (IP with prefix, MAC, GUID).

use std::fmt;
use std::net::IpAddr;
use std::ops::Deref;

use serde::{de, Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::casefold::{select, PathError};
use crate::error::CniError;

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
// serde field types for JSON that Go programs write. Each carries one of Go's
// encoding/json rules: `null` is an absent key (`Option<GoStr>` reads it as
// `None`, a required [`GoStr`] fails [`REQUIRED`], a [`GoStrs`] or
// [`GoList`] is empty as Go's nil slice is, a [`GoBool`] false), a struct is
// read only from an object, and a value of the wrong kind fails with
// [`want`]'s wording. Decoded through [`crate::casefold`], whose path of the
// failing value [`decode_error`] puts in front. Each is written as the value
// it holds.

/// The reason of a required key that is absent (or `null`).
pub const REQUIRED: &str = "required";

/// The value `d` holds, `None` for `null`.
fn non_null<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Ok(Some(Value::deserialize(d)?).filter(|v| !v.is_null()))
}

/// `f(v)`, where the closure's argument type is inferred.
fn read<A, B, E>(v: A, f: impl FnOnce(A) -> Result<B, E>) -> Result<B, E> {
    f(v)
}

/// A scalar (or map) field type: `$kind` names what it must be, `$read` reads
/// it from a non-null value, `$null` is what a bare `null` gives.
macro_rules! go_scalar {
    ($(#[$doc:meta])* $name:ident($inner:ty) as $target:ty,
     $kind:literal, null: $null:expr, read: $read:expr) => {
        go_scalar!($(#[$doc])* $name($inner) as $target, $kind, null: $null, read: $read,
                   then: |v: $inner| Ok::<_, String>(v));
    };
    ($(#[$doc:meta])* $name:ident($inner:ty) as $target:ty,
     $kind:literal, null: $null:expr, read: $read:expr, then: $then:expr) => {
        $(#[$doc])*
        #[derive(Clone, Default, PartialEq, Eq, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(pub $inner);

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let Some(v) = non_null(d)? else {
                    let null: Result<$inner, &str> = $null;
                    return null.map($name).map_err(de::Error::custom);
                };
                let v = read(v, $read).map_err(|v| de::Error::custom(want($kind, &v)))?;
                read(v, $then).map($name).map_err(de::Error::custom)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl Deref for $name {
            type Target = $target;

            fn deref(&self) -> &$target {
                &self.0
            }
        }

        impl From<$inner> for $name {
            fn from(v: $inner) -> Self {
                $name(v)
            }
        }

        impl From<$name> for $inner {
            fn from(v: $name) -> Self {
                v.0
            }
        }
    };
}

go_scalar!(
    /// A string; `null` is absent, so a required one fails [`REQUIRED`].
    GoStr(String) as str,
    "a string",
    null: Err(REQUIRED),
    read: |v| match v {
        Value::String(s) => Ok(s),
        v => Err(v),
    }
);

go_scalar!(
    /// A boolean, false when absent or `null`.
    GoBool(bool) as bool,
    "a boolean",
    null: Ok(false),
    read: |v| v.as_bool().ok_or(v)
);

go_scalar!(
    /// An unsigned 32-bit integer.
    GoU32(u32) as u32,
    "an unsigned integer",
    null: Err(REQUIRED),
    read: |v| v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or(v)
);

go_scalar!(
    /// An integer above 0.
    GoPositive(u64) as u64,
    "a positive integer",
    null: Err(REQUIRED),
    read: |v| v.as_u64().filter(|n| *n > 0).ok_or(v)
);

go_scalar!(
    /// A TCP/UDP/SCTP port, 1 to 65535.
    GoPort(u16) as u16,
    "an integer from 1 to 65535",
    null: Err(REQUIRED),
    read: |v| v.as_u64().filter(|p| *p > 0).and_then(|p| u16::try_from(p).ok()).ok_or(v)
);

go_scalar!(
    /// An object kept as JSON.
    GoMap(Map<String, Value>) as Map<String, Value>,
    "an object",
    null: Err(REQUIRED),
    read: |v| match v {
        Value::Object(m) => Ok(m),
        v => Err(v),
    }
);

go_scalar!(
    /// A list of strings, empty when absent or `null` (a Go nil slice); a
    /// bad element is named by its index (`[1]: must be a string, got 5`).
    GoStrs(Vec<String>) as Vec<String>,
    "a list",
    null: Ok(Vec::new()),
    read: |v| match v {
        Value::Array(items) => Ok(items),
        v => Err(v),
    },
    then: |items: Vec<Value>| items
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) => Ok(s),
            v => Err(format!("[{i}]: {}", want("a string", &v))),
        })
        .collect::<Result<_, _>>()
);

impl Copy for GoBool {}
impl Copy for GoU32 {}
impl Copy for GoPositive {}
impl Copy for GoPort {}

impl GoStr {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for GoStr {
    fn from(s: &str) -> Self {
        GoStr(s.to_string())
    }
}

impl fmt::Display for GoStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for GoStr {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for GoStr {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for GoStr {
    fn eq(&self, other: &String) -> bool {
        self.0 == *other
    }
}

impl PartialEq<GoStr> for String {
    fn eq(&self, other: &GoStr) -> bool {
        *self == other.0
    }
}

impl PartialEq<GoStr> for str {
    fn eq(&self, other: &GoStr) -> bool {
        self == other.0
    }
}

impl PartialEq<GoStr> for &str {
    fn eq(&self, other: &GoStr) -> bool {
        *self == other.0
    }
}

impl std::borrow::Borrow<str> for GoStr {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for GoStr {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::ops::DerefMut for GoStrs {
    fn deref_mut(&mut self) -> &mut Vec<String> {
        &mut self.0
    }
}

impl GoStrs {
    /// For `skip_serializing_if`.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl PartialEq<Vec<String>> for GoStrs {
    fn eq(&self, other: &Vec<String>) -> bool {
        self.0 == *other
    }
}

impl PartialEq<Vec<&str>> for GoStrs {
    fn eq(&self, other: &Vec<&str>) -> bool {
        self.0 == *other
    }
}

impl FromIterator<String> for GoStrs {
    fn from_iter<I: IntoIterator<Item = String>>(iter: I) -> Self {
        GoStrs(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a mut GoStrs {
    type Item = &'a mut String;
    type IntoIter = std::slice::IterMut<'a, String>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter_mut()
    }
}

impl<'a> IntoIterator for &'a GoStrs {
    type Item = &'a String;
    type IntoIter = std::slice::Iter<'a, String>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl GoMap {
    /// `v`, a serialized struct, which is an object.
    pub fn object(v: Value) -> GoMap {
        match v {
            Value::Object(m) => GoMap(m),
            v => panic!("a struct serializes to an object, not {v}"),
        }
    }
}

impl From<GoMap> for Value {
    fn from(m: GoMap) -> Self {
        Value::Object(m.0)
    }
}

/// A struct, read only from an object: serde_json (and so
/// [`crate::casefold`]) also reads a struct from a list of its fields'
/// values, which Go refuses. The refusal says `expected struct`, which
/// [`decode_error`] words as Go does.
#[derive(Clone, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct GoObj<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for GoObj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(NoSeqStruct(d)).map(GoObj)
    }
}

/// A list, empty when absent or `null` (a Go nil slice), each struct in it
/// read only from an object ([`GoObj`]).
#[derive(Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct GoList<T>(pub Vec<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for GoList<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let items = Option::<Vec<GoObj<T>>>::deserialize(d)?.unwrap_or_default();
        Ok(GoList(items.into_iter().map(|o| o.0).collect()))
    }
}

impl<T> Default for GoList<T> {
    fn default() -> Self {
        GoList(Vec::new())
    }
}

impl<T> GoList<T> {
    /// For `skip_serializing_if`.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A struct read as Go reads an object into it, with the keys that select
/// none of its fields kept as written ([`GoStruct::other`], in document
/// order), for the decoders that keep extension keys or warn about unknown
/// ones. Read only from an object, as [`GoObj`]. Written as the struct
/// alone: the other keys are the reader's to keep or drop.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GoStruct<T> {
    #[serde(flatten)]
    pub known: T,
    #[serde(skip)]
    pub other: Map<String, Value>,
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for GoStruct<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Asking for T's own fields lets the decoder match keys to them as
        // Go does ([`crate::casefold`]) before the split.
        let fields = struct_fields::<T>();
        d.deserialize_struct(
            "GoStruct",
            fields,
            SplitVisitor {
                fields,
                known: std::marker::PhantomData,
            },
        )
    }
}

impl<T> Deref for GoStruct<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.known
    }
}

impl<T> std::ops::DerefMut for GoStruct<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.known
    }
}

impl<T> From<T> for GoStruct<T> {
    fn from(known: T) -> Self {
        GoStruct {
            known,
            other: Map::new(),
        }
    }
}

/// The field names serde's derive gives the decoder for `T`, learned by
/// asking `T` to decode from a deserializer that only records them (empty for
/// a type that is not a struct).
pub fn struct_fields<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    struct Probe<'a>(&'a mut &'static [&'static str]);

    impl<'de> Deserializer<'de> for Probe<'_> {
        type Error = de::value::Error;

        fn deserialize_any<V: de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }

        fn deserialize_struct<V: de::Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("fields recorded"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }

    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

/// `field`, a path [`decode_failure`] gave for a `T`, with its first key
/// spelled as the field of `T` that it selects: Go names a field by its name,
/// whatever the case of the key it was read from.
pub fn spell_first_key<'de, T: Deserialize<'de>>(field: &str) -> String {
    let (head, rest) = field.split_at(field.find(['.', '[']).unwrap_or(field.len()));
    let fields = struct_fields::<T>();
    match select(head, fields) {
        Some(i) => format!("{}{rest}", fields[i]),
        None => field.to_string(),
    }
}

/// [`GoStruct`]'s visitor: an object only; its entries split between `T`
/// and the other keys as they stream by, so errors inside `T` keep their
/// path.
struct SplitVisitor<T> {
    fields: &'static [&'static str],
    known: std::marker::PhantomData<T>,
}

impl<'de, T: Deserialize<'de>> de::Visitor<'de> for SplitVisitor<T> {
    type Value = GoStruct<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `struct` is the word [`decode_failure`] turns into Go's wording.
        f.write_str("struct GoStruct")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<GoStruct<T>, A::Error> {
        let mut other = Map::new();
        let split = Split {
            map,
            fields: self.fields,
            other: &mut other,
        };
        let known = T::deserialize(de::value::MapAccessDeserializer::new(split))?;
        Ok(GoStruct { known, other })
    }
}

/// The entries of an object whose keys name one of `fields`, the others put
/// aside into `other`.
struct Split<'a, A> {
    map: A,
    fields: &'static [&'static str],
    other: &'a mut Map<String, Value>,
}

impl<'de, A: de::MapAccess<'de>> de::MapAccess<'de> for Split<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        while let Some(key) = self.map.next_key::<String>()? {
            if self.fields.contains(&key.as_str()) {
                return seed
                    .deserialize(de::IntoDeserializer::into_deserializer(key))
                    .map(Some);
            }
            let value = self.map.next_value::<Value>()?;
            self.other.insert(key, value);
        }
        Ok(None)
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// The wrappers holding a value, seen as it.
macro_rules! go_wrapper {
    ($($name:ident<T>($inner:ty)),+) => {$(
        impl<T: fmt::Debug> fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl<T> Deref for $name<T> {
            type Target = $inner;

            fn deref(&self) -> &$inner {
                &self.0
            }
        }

        impl<T> std::ops::DerefMut for $name<T> {
            fn deref_mut(&mut self) -> &mut $inner {
                &mut self.0
            }
        }

        impl<T> From<$inner> for $name<T> {
            fn from(v: $inner) -> Self {
                $name(v)
            }
        }
    )+};
}

go_wrapper!(GoObj<T>(T), GoList<T>(Vec<T>));

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
        rate: Option<GoPositive>,
    }

    #[derive(Debug, serde::Deserialize)]
    struct Outer {
        one: Option<GoObj<Inner>>,
        many: Option<GoList<Inner>>,
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
        assert_eq!(o.one.unwrap().rate, Some(GoPositive(2)));
        assert_eq!(o.many.unwrap()[0].rate, Some(GoPositive(3)));
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

    #[derive(Debug, serde::Deserialize)]
    struct Kinds {
        s: GoStr,
        o: Option<GoStr>,
        #[serde(default)]
        l: GoStrs,
        #[serde(default)]
        b: GoBool,
        p: Option<GoPort>,
    }

    #[test]
    fn null_is_an_absent_key_and_kinds_are_named() {
        let k: Kinds =
            crate::casefold::from_value(&json!({"S": "x", "o": null, "l": null, "b": null}))
                .unwrap();
        assert_eq!(
            (k.s.as_str(), k.o, k.l.is_empty(), *k.b, k.p),
            ("x", None, true, false, None)
        );
        let fails = |v: Value| {
            let e = crate::casefold::from_value_at::<Kinds>(&v).unwrap_err();
            decode_failure(e, &v, "kinds")
        };
        let at = |path: &str, reason: &str| (path.to_string(), reason.to_string());
        assert_eq!(fails(json!({})), at("s", REQUIRED));
        assert_eq!(fails(json!({"s": null})), at("s", REQUIRED));
        assert_eq!(fails(json!({"s": 5})), at("s", "must be a string, got 5"));
        assert_eq!(
            fails(json!({"s": "x", "l": ["a", null]})),
            at("l[1]", "must be a string, got null")
        );
        assert_eq!(
            fails(json!({"s": "x", "b": "yes"})),
            at("b", "must be a boolean, got \"yes\"")
        );
        assert_eq!(
            fails(json!({"s": "x", "p": 0})),
            at("p", "must be an integer from 1 to 65535, got 0")
        );
    }

    #[test]
    fn value_at_reads_dotted_keys_and_indices() {
        let v = json!({"a.b": [{"c": 1}], "a": {"b": 2}});
        assert_eq!(value_at(&v, "a.b[0].c"), Some(&json!(1)));
        assert_eq!(value_at(&v, "a.b"), Some(&json!([{"c": 1}])));
        assert_eq!(value_at(&v, "x"), None);
    }

    #[test]
    fn go_struct_keeps_the_other_keys_and_spells_error_paths() {
        #[derive(Debug, PartialEq, Deserialize, Serialize)]
        struct Two {
            name: GoStr,
            #[serde(rename = "ips")]
            addresses: Option<GoStrs>,
        }
        // Go: each key selects its field, exactly or folded; the last wins.
        let v = json!({"Name": "b", "name": "c", "NAME": "a", "ips": null, "Extra": 1, "x.y": 2});
        let s: GoStruct<Two> = crate::casefold::from_value(&v).unwrap();
        assert_eq!(s.name, "a");
        assert_eq!(s.addresses, None);
        let other: Vec<&str> = s.other.keys().map(String::as_str).collect();
        assert_eq!(other, ["Extra", "x.y"]);
        // Written as the struct alone.
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            json!({"name": "a", "ips": null})
        );
        // Only from an object, in Go's words.
        let e = crate::casefold::from_value_at::<GoStruct<Two>>(&json!([1])).unwrap_err();
        assert_eq!(
            decode_failure(e, &json!([1]), "x").1,
            "must be an object, got [1]"
        );
        // Errors inside keep their path, as written.
        let bad = json!({"IPS": ["a", 5]});
        let e = crate::casefold::from_value_at::<GoStruct<Two>>(&bad).unwrap_err();
        let (at, reason) = decode_failure(e, &bad, "x");
        assert_eq!(
            (at.as_str(), reason.as_str()),
            ("IPS[1]", "must be a string, got 5")
        );
        assert_eq!(spell_first_key::<Two>(&at), "ips[1]");
        assert_eq!(spell_first_key::<Two>("Name"), "name");
        assert_eq!(spell_first_key::<Two>("other.x"), "other.x");
    }
}
