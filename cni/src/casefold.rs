//! Decoding JSON into typed structs the way Go's encoding/json does: object keys
//! match struct fields case-insensitively (an exact match wins). Runtimes and
//! plugins written in Go rely on this, so what they send may say `PortMappings`
//! where the convention says `portMappings`.
//!
//! The decoder is a `serde::Deserializer` over `&serde_json::Value` that
//! intercepts `deserialize_struct` (the only place serde reveals the field
//! names) and renames each object key to the field it folds to before handing
//! the entries to the struct's visitor. Sequences, maps, options, newtypes and
//! externally tagged enums are wrapped recursively, so folding applies at every
//! depth; scalars are forwarded to serde_json's own `Value` deserializer.
//!
//! Matching follows Go: a key goes to the field of the exact same name if there
//! is one, otherwise to the first field that equals it case-insensitively.
//! When several keys land on one field the last one wins (no "duplicate field"
//! error). Keys that match no field are passed on unchanged, so serde ignores
//! them (or rejects them under `deny_unknown_fields`).
//!
//! Limits: `#[serde(flatten)]`, internally tagged and untagged enums buffer the
//! input in serde's private `Content` type, below which keys match exactly.
//!
//! Errors name the path of the value that failed (`ips[0].address: ...`),
//! spelled with the keys as written in the input.

use std::cell::RefCell;
use std::fmt;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, EnumAccess, IntoDeserializer, MapAccess,
    SeqAccess, Unexpected, VariantAccess, Visitor,
};
use serde::forward_to_deserialize_any;
use serde_json::Value;

/// Decode `value` into `T`, matching object keys to struct fields
/// case-insensitively at every depth. The error message starts with the path
/// of the offending value when it is not the top level.
pub fn from_value<T: DeserializeOwned>(value: &Value) -> Result<T, serde_json::Error> {
    from_value_at(value).map_err(PathError::into_json_error)
}

/// Like [`from_value`], but keeps the path and the error apart so callers can
/// build their own field-path messages.
pub fn from_value_at<T: DeserializeOwned>(value: &Value) -> Result<T, PathError> {
    let failed = RefCell::new(None);
    let de = De {
        value,
        path: Path::Root,
        failed: &failed,
    };
    T::deserialize(de).map_err(|error| PathError {
        path: failed.take().unwrap_or_default(),
        error,
    })
}

/// Decode a configuration object into `T` as [`from_value`] does, with a
/// code-7 CNI error naming the offending field (`strictAnnotations: invalid
/// type: string "yes", expected a boolean`).
pub fn decode<T: DeserializeOwned>(value: &Value) -> Result<T, crate::error::CniError> {
    from_value_at(value).map_err(|e| {
        let field = if e.path.is_empty() {
            "configuration"
        } else {
            e.path.as_str()
        };
        crate::error::CniError::invalid_config(field, e.error.to_string())
    })
}

/// A decoding error and where it happened.
#[derive(Debug)]
pub struct PathError {
    /// `a.b[2].c`, as written in the input; empty for the top level.
    pub path: String,
    pub error: serde_json::Error,
}

impl PathError {
    pub fn into_json_error(self) -> serde_json::Error {
        if self.path.is_empty() {
            self.error
        } else {
            de::Error::custom(self)
        }
    }
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.error)
        } else {
            write!(f, "{}: {}", self.path, self.error)
        }
    }
}

impl std::error::Error for PathError {}

/// Does JSON object key `key` select the struct field `field` the way Go's
/// encoding/json does when no key matches exactly? This is the one place
/// plexus folds keys. Go compares with Unicode simple case folding
/// (`bytes.EqualFold`); onto the ASCII letters of field names that folds
/// ASCII case plus the two non-ASCII letters whose fold orbit holds an ASCII
/// one: U+017F (ſ, with s) and U+212A (the Kelvin sign, with k). Any other
/// character must be the same in both.
pub fn fold_eq(key: &str, field: &str) -> bool {
    let mut field = field.chars();
    key.chars().all(|k| {
        let Some(f) = field.next() else {
            return false;
        };
        let k = match k {
            '\u{017F}' => 's',
            '\u{212A}' => 'k',
            k => k,
        };
        k == f || k.is_ascii() && k.eq_ignore_ascii_case(&f)
    }) && field.next().is_none()
}

/// The index of the field of `fields` that `key` selects as Go's
/// encoding/json decides: the field of exactly that name, else the first
/// that `key` [`fold_eq`]s onto.
pub fn select<S: AsRef<str>>(key: &str, fields: &[S]) -> Option<usize> {
    fields
        .iter()
        .position(|f| f.as_ref() == key)
        .or_else(|| fields.iter().position(|f| fold_eq(key, f.as_ref())))
}

/// The value Go's encoding/json decodes into the field `field` of a struct
/// from `obj`: that of the last key [`select`]ing it (later keys overwrite
/// earlier ones). For a lookup of one field where a struct would be too much.
pub fn get<'a>(obj: &'a serde_json::Map<String, Value>, field: &str) -> Option<&'a Value> {
    obj.iter()
        .rev()
        .find(|(key, _)| fold_eq(key, field))
        .map(|(_, value)| value)
}

/// Where a value sits in the input, as a chain of borrowed links.
#[derive(Clone, Copy)]
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Key(Path::Root, key) => f.write_str(key),
            Path::Key(parent, key) => write!(f, "{parent}.{key}"),
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

type Failed = RefCell<Option<String>>;

/// Remember the innermost path an error came out of. Errors travel outwards,
/// so the first one recorded is the deepest.
fn record(failed: &Failed, path: &Path<'_>) {
    let mut slot = failed.borrow_mut();
    if slot.is_none() {
        *slot = Some(path.to_string());
    }
}

fn unexpected(value: &Value) -> Unexpected<'_> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Unexpected::Unsigned(u)
            } else if let Some(i) = n.as_i64() {
                Unexpected::Signed(i)
            } else {
                Unexpected::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

struct De<'de, 'p> {
    value: &'de Value,
    path: Path<'p>,
    failed: &'p Failed,
}

/// Forward scalar requests to serde_json's own `&Value` deserializer.
macro_rules! forward_to_value {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
                self.value.$method(visitor)
            }
        )*
    };
}

impl<'de> De<'de, '_> {
    fn visit_seq<V: Visitor<'de>>(
        self,
        items: &'de [Value],
        visitor: V,
    ) -> Result<V::Value, serde_json::Error> {
        let mut seq = SeqDe {
            items: items.iter().enumerate(),
            path: self.path,
            failed: self.failed,
        };
        let out = visitor.visit_seq(&mut seq)?;
        if seq.items.len() == 0 {
            Ok(out)
        } else {
            Err(de::Error::invalid_length(
                items.len(),
                &"fewer elements in array",
            ))
        }
    }

    fn visit_entries<V: Visitor<'de>>(
        self,
        entries: Vec<Entry<'de>>,
        visitor: V,
    ) -> Result<V::Value, serde_json::Error> {
        let total = entries.len();
        let mut map = MapDe {
            entries: entries.into_iter(),
            pending: None,
            path: self.path,
            failed: self.failed,
        };
        let out = visitor.visit_map(&mut map)?;
        if map.entries.len() == 0 {
            Ok(out)
        } else {
            Err(de::Error::invalid_length(total, &"fewer elements in map"))
        }
    }
}

/// One object entry: the key the visitor sees, the key as written (for error
/// paths) and the value.
struct Entry<'de> {
    key: &'de str,
    written: &'de str,
    value: &'de Value,
}

fn plain_entries(map: &serde_json::Map<String, Value>) -> Vec<Entry<'_>> {
    map.iter()
        .map(|(k, v)| Entry {
            key: k,
            written: k,
            value: v,
        })
        .collect()
}

/// Rename each key to the struct field it matches (exact first, then folded);
/// several keys for one field collapse into one entry holding the last value.
fn folded_entries<'de>(
    map: &'de serde_json::Map<String, Value>,
    fields: &'static [&'static str],
) -> Vec<Entry<'de>> {
    let mut out: Vec<Entry<'de>> = Vec::with_capacity(map.len());
    for (written, value) in map {
        let key: &'de str = select(written, fields).map_or(written.as_str(), |i| fields[i]);
        match out.iter_mut().find(|e| e.key == key) {
            Some(existing) => {
                existing.written = written;
                existing.value = value;
            }
            None => out.push(Entry {
                key,
                written,
                value,
            }),
        }
    }
    out
}

impl<'de> Deserializer<'de> for De<'de, '_> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.value {
            Value::Array(items) => self.visit_seq(items, visitor),
            Value::Object(map) => self.visit_entries(plain_entries(map), visitor),
            other => other.deserialize_any(visitor),
        }
    }

    forward_to_value! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char deserialize_str
        deserialize_string deserialize_bytes deserialize_byte_buf deserialize_unit
        deserialize_identifier
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.value.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.value {
            Value::Array(items) => self.visit_seq(items, visitor),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.value {
            Value::Object(map) => self.visit_entries(plain_entries(map), visitor),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.value {
            Value::Object(map) => self.visit_entries(folded_entries(map, fields), visitor),
            // serde_json accepts a struct written as an array; so do we.
            Value::Array(items) => self.visit_seq(items, visitor),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.value {
            Value::Object(map) if map.len() == 1 => {
                let (variant, value) = map.iter().next().expect("one entry");
                visitor.visit_enum(EnumDe {
                    variant,
                    value,
                    path: self.path,
                    failed: self.failed,
                })
            }
            other => other.deserialize_enum(name, variants, visitor),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_unit()
    }
}

struct SeqDe<'de, 'p> {
    items: std::iter::Enumerate<std::slice::Iter<'de, Value>>,
    path: Path<'p>,
    failed: &'p Failed,
}

impl<'de> SeqAccess<'de> for SeqDe<'de, '_> {
    type Error = serde_json::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        let Some((i, value)) = self.items.next() else {
            return Ok(None);
        };
        let path = Path::Index(&self.path, i);
        let child = De {
            value,
            path,
            failed: self.failed,
        };
        seed.deserialize(child)
            .map(Some)
            .inspect_err(|_| record(self.failed, &path))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct MapDe<'de, 'p> {
    entries: std::vec::IntoIter<Entry<'de>>,
    pending: Option<(&'de str, &'de Value)>,
    path: Path<'p>,
    failed: &'p Failed,
}

impl<'de> MapAccess<'de> for MapDe<'de, '_> {
    type Error = serde_json::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        let Some(entry) = self.entries.next() else {
            return Ok(None);
        };
        self.pending = Some((entry.written, entry.value));
        seed.deserialize(KeyDe(entry.key))
            .map(Some)
            .inspect_err(|_| record(self.failed, &Path::Key(&self.path, entry.written)))
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<T::Value, Self::Error> {
        let (written, value) = self
            .pending
            .take()
            .ok_or_else(|| de::Error::custom("value requested before key"))?;
        let path = Path::Key(&self.path, written);
        let child = De {
            value,
            path,
            failed: self.failed,
        };
        seed.deserialize(child)
            .inspect_err(|_| record(self.failed, &path))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// An object key. Like serde_json's own key deserializer it also yields
/// numbers and booleans parsed from the key text, for maps keyed by them.
struct KeyDe<'de>(&'de str);

macro_rules! parse_key {
    ($($method:ident => $ty:ty, $visit:ident;)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
                match self.0.parse::<$ty>() {
                    Ok(n) => visitor.$visit(n),
                    Err(_) => Err(de::Error::invalid_value(Unexpected::Str(self.0), &visitor)),
                }
            }
        )*
    };
}

impl<'de> Deserializer<'de> for KeyDe<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_borrowed_str(self.0)
    }

    parse_key! {
        deserialize_bool => bool, visit_bool;
        deserialize_i8 => i8, visit_i8;
        deserialize_i16 => i16, visit_i16;
        deserialize_i32 => i32, visit_i32;
        deserialize_i64 => i64, visit_i64;
        deserialize_i128 => i128, visit_i128;
        deserialize_u8 => u8, visit_u8;
        deserialize_u16 => u16, visit_u16;
        deserialize_u32 => u32, visit_u32;
        deserialize_u64 => u64, visit_u64;
        deserialize_u128 => u128, visit_u128;
        deserialize_f32 => f32, visit_f32;
        deserialize_f64 => f64, visit_f64;
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_enum(IntoDeserializer::<serde_json::Error>::into_deserializer(
            self.0,
        ))
    }

    forward_to_deserialize_any! {
        char str string bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

struct EnumDe<'de, 'p> {
    variant: &'de str,
    value: &'de Value,
    path: Path<'p>,
    failed: &'p Failed,
}

impl<'de, 'p> EnumAccess<'de> for EnumDe<'de, 'p> {
    type Error = serde_json::Error;
    type Variant = Self;

    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Self), Self::Error> {
        let v = seed.deserialize(KeyDe(self.variant))?;
        Ok((v, self))
    }
}

impl<'de> EnumDe<'de, '_> {
    /// Deserialize the variant's content with `f`, recording its path on error.
    fn content<R>(
        self,
        f: impl FnOnce(De<'de, '_>) -> Result<R, serde_json::Error>,
    ) -> Result<R, serde_json::Error> {
        let path = Path::Key(&self.path, self.variant);
        f(De {
            value: self.value,
            path,
            failed: self.failed,
        })
        .inspect_err(|_| record(self.failed, &path))
    }
}

impl<'de> VariantAccess<'de> for EnumDe<'de, '_> {
    type Error = serde_json::Error;

    fn unit_variant(self) -> Result<(), Self::Error> {
        match self.value {
            Value::Null => Ok(()),
            other => Err(de::Error::invalid_type(unexpected(other), &"unit variant")),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, Self::Error> {
        self.content(|de| seed.deserialize(de))
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.content(|de| de.deserialize_seq(visitor))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.content(|de| de.deserialize_struct("", fields, visitor))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct PortMapping {
        host_port: u16,
        container_port: u16,
        #[serde(default)]
        protocol: Option<String>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Runtime {
        #[serde(default)]
        port_mappings: Vec<PortMapping>,
        mac: Option<String>,
        #[serde(default)]
        by_name: HashMap<String, PortMapping>,
        inner: Option<Inner>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Inner {
        #[serde(rename = "deviceID")]
        device_id: String,
        count: u32,
    }

    #[test]
    fn nested_structs_fold_at_every_depth() {
        let v = json!({
            "PortMappings": [{"HOSTPORT": 8080, "containerport": 80, "Protocol": "tcp"}],
            "MAC": "00:11:22:33:44:55",
            "Inner": {"DeviceId": "0000:04:00.5", "COUNT": 2},
        });
        let r: Runtime = from_value(&v).unwrap();
        assert_eq!(
            r.port_mappings,
            vec![PortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: Some("tcp".into())
            }]
        );
        assert_eq!(r.mac.as_deref(), Some("00:11:22:33:44:55"));
        // `#[serde(rename)]`d names are what the fields list holds.
        assert_eq!(
            r.inner,
            Some(Inner {
                device_id: "0000:04:00.5".into(),
                count: 2
            })
        );
    }

    #[test]
    fn get_reads_one_field_as_a_struct_would() {
        let v = json!({"Code": 1, "msg": "a", "CODE": 2, "MSG": "b", "details": "d"});
        let obj = v.as_object().unwrap();
        // Later keys overwrite earlier ones, whatever their case.
        assert_eq!(get(obj, "code"), Some(&json!(2)));
        assert_eq!(get(obj, "msg"), Some(&json!("b")));
        assert_eq!(get(obj, "details"), Some(&json!("d")));
        assert_eq!(get(obj, "detail"), None);
        // The same value a struct with that field decodes.
        #[derive(Deserialize)]
        struct Err {
            code: u32,
        }
        assert_eq!(from_value::<Err>(&v).unwrap().code, 2);
    }

    #[test]
    fn option_null_and_absent() {
        let r: Runtime = from_value(&json!({"mac": null, "inner": null})).unwrap();
        assert_eq!(r.mac, None);
        assert_eq!(r.inner, None);
        let o: Option<Inner> = from_value(&json!({"DEVICEID": "x", "count": 1})).unwrap();
        assert_eq!(o.unwrap().device_id, "x");
    }

    #[test]
    fn map_values_fold_but_map_keys_stay() {
        let v = json!({"byName": {"Web": {"hostport": 1, "ContainerPort": 2}}});
        let r: Runtime = from_value(&v).unwrap();
        let web = &r.by_name["Web"];
        assert_eq!((web.host_port, web.container_port), (1, 2));
        assert!(!r.by_name.contains_key("web"));
        let m: HashMap<u32, Vec<Inner>> =
            from_value(&json!({"7": [{"deviceid": "a", "Count": 3}]})).unwrap();
        assert_eq!(m[&7][0].count, 3);
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Twins {
        #[serde(rename = "name")]
        lower: Option<String>,
        #[serde(rename = "NAME")]
        upper: Option<String>,
    }

    #[test]
    fn exact_match_beats_folded_match() {
        let t: Twins = from_value(&json!({"NAME": "u", "name": "l"})).unwrap();
        assert_eq!(t.lower.as_deref(), Some("l"));
        assert_eq!(t.upper.as_deref(), Some("u"));
        // Without an exact match, the first field (declaration order) folds.
        let t: Twins = from_value(&json!({"Name": "x"})).unwrap();
        assert_eq!(t.lower.as_deref(), Some("x"));
        assert_eq!(t.upper, None);
    }

    #[test]
    fn last_key_wins_without_duplicate_error() {
        let r: Runtime = from_value(&json!({"mac": "a", "Mac": "b", "MAC": "c"})).unwrap();
        assert_eq!(r.mac.as_deref(), Some("c"));
        let r: Runtime = from_value(&json!({"MAC": "c", "mac": "a"})).unwrap();
        assert_eq!(r.mac.as_deref(), Some("a"));
    }

    #[test]
    fn unknown_keys_are_ignored() {
        let r: Runtime = from_value(&json!({"whatever": [1, 2], "mac": "m"})).unwrap();
        assert_eq!(r.mac.as_deref(), Some("m"));
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Strict {
        a: u8,
    }

    #[test]
    fn deny_unknown_fields_still_applies() {
        assert!(from_value::<Strict>(&json!({"A": 1})).is_ok());
        let e = from_value::<Strict>(&json!({"A": 1, "b": 2})).unwrap_err();
        assert!(e.to_string().contains("unknown field `b`"), "{e}");
    }

    #[test]
    fn errors_name_the_field_path() {
        let e = from_value::<Runtime>(
            &json!({"PortMappings": [{"hostPort": 1, "containerPort": "x"}]}),
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("PortMappings[0].containerPort: invalid type"),
            "{msg}"
        );
        let e = from_value::<Runtime>(&json!({"inner": {"deviceID": "x"}})).unwrap_err();
        assert_eq!(e.to_string(), "inner: missing field `count`");
        let e =
            from_value::<Runtime>(&json!({"byName": {"w": {"hostPort": -1, "containerPort": 1}}}))
                .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("byName.w.hostPort: invalid value"),
            "{e}"
        );
        // The top level has no path.
        let e = from_value::<Inner>(&json!({"deviceID": "x"})).unwrap_err();
        assert_eq!(e.to_string(), "missing field `count`");
        let pe = from_value_at::<Inner>(&json!({"deviceID": 5, "count": 1})).unwrap_err();
        assert_eq!(pe.path, "deviceID");
        assert!(pe.error.to_string().contains("expected a string"));
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Shape {
        Unit,
        Wrapped(Inner),
        Pair(u8, u8),
        Rec { count: u8 },
    }

    #[test]
    fn externally_tagged_enums_fold_inside() {
        let s: Vec<Shape> = from_value(&json!([
            "unit",
            {"wrapped": {"DEVICEID": "d", "Count": 1}},
            {"pair": [1, 2]},
            {"rec": {"COUNT": 9}},
        ]))
        .unwrap();
        assert_eq!(
            s,
            vec![
                Shape::Unit,
                Shape::Wrapped(Inner {
                    device_id: "d".into(),
                    count: 1
                }),
                Shape::Pair(1, 2),
                Shape::Rec { count: 9 },
            ]
        );
        let e = from_value::<Vec<Shape>>(&json!([{"rec": {"count": "x"}}])).unwrap_err();
        assert!(
            e.to_string().starts_with("[0].rec.count: invalid type"),
            "{e}"
        );
    }

    #[test]
    fn scalars_and_values_forward_to_serde_json() {
        assert_eq!(from_value::<u8>(&json!(7)).unwrap(), 7);
        assert_eq!(
            from_value::<(u8, String)>(&json!([1, "a"])).unwrap(),
            (1, "a".into())
        );
        assert!(from_value::<(u8,)>(&json!([1, 2])).is_err());
        let v = json!({"A": [1, {"b": null}]});
        assert_eq!(from_value::<Value>(&v).unwrap(), v);
        assert!(from_value::<u8>(&json!(300)).is_err());
    }

    #[test]
    fn keys_fold_as_go_folds_them_onto_field_names() {
        assert!(fold_eq("portMappings", "portMappings"));
        assert!(fold_eq("PORTMAPPINGS", "portMappings"));
        assert!(fold_eq("ip\u{017F}", "ips"));
        assert!(fold_eq("\u{212A}ind", "kind"));
        assert!(fold_eq("STRAßE", "straße"));
        assert!(!fold_eq("ipss", "ips"));
        assert!(!fold_eq("ip", "ips"));
        assert!(!fold_eq("mac", "macs"));
        assert!(!fold_eq("cni_args", "cni-args"));
        assert!(!fold_eq("ïps", "ips"));
        // Dotless and dotted i fold onto i only under Turkic rules, which Go
        // does not apply; neither does the Kelvin sign match a field that
        // spells it (the key folds to k).
        assert!(!fold_eq("\u{0131}ps", "ips"));
        assert!(!fold_eq("\u{0130}PS", "ips"));
    }

    #[test]
    fn an_exact_field_wins_over_an_earlier_folded_one() {
        assert_eq!(select("Mac", &["mac", "Mac"]), Some(1));
        assert_eq!(select("MAC", &["mac", "Mac"]), Some(0));
        assert_eq!(select("macs", &["mac"]), None);
    }
}
