//! Network configurations (cni-SPEC §1) and the request configuration a
//! runtime derives from them for one plugin invocation (cni-SPEC §3 "Deriving
//! request configuration from plugin configuration").
//!
//! Plugin configuration objects keep every key intact and in written order
//! (serde_json's `preserve_order`), because the runtime must pass unknown keys
//! through unchanged (cni-SPEC §1 "Plugin configuration objects").
//!
//! Keys are matched exactly here: these are files written by administrators to
//! the spec's spelling, and libcni reads the list keys exactly as well.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::error::CniError;
use super::names::{self, PluginType};
use super::version::CniVersion;

/// The capability names of cni-CONVENTIONS "Well-known Capabilities", plus
/// `CNIDeviceInfoFile` (device-info-SPEC §5.1).
pub const WELL_KNOWN_CAPABILITIES: [&str; 11] = [
    "portMappings",
    "ipRanges",
    "bandwidth",
    "dns",
    "ips",
    "mac",
    "infinibandGUID",
    "deviceID",
    "aliases",
    "cgroupPath",
    "CNIDeviceInfoFile",
];

/// A short description of a JSON value for error messages: scalars as JSON
/// (long strings cut), containers by kind.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
        Value::String(s) if s.chars().count() > 40 => {
            let cut: String = s.chars().take(40).collect();
            format!("{:?}...", cut)
        }
        other => other.to_string(),
    }
}

/// Code 7: `field: must be <what>, got <value>`.
pub(crate) fn wrong_type(field: impl AsRef<str>, what: &str, got: &Value) -> CniError {
    CniError::invalid_config(field, format!("must be {what}, got {}", describe(got)))
}

fn opt_string<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, CniError> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(wrong_type(key, "a string", other)),
    }
}

fn opt_bool(obj: &Map<String, Value>, key: &str) -> Result<bool, CniError> {
    match obj.get(key) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(wrong_type(key, "a boolean", other)),
    }
}

/// One plugin configuration object (cni-SPEC §1 "Plugin configuration
/// objects").
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConfig {
    /// `type`: the plugin binary's name.
    pub plugin_type: PluginType,
    /// `capabilities` (cni-SPEC §3 "Deriving runtimeConfig").
    pub capabilities: BTreeMap<String, bool>,
    /// The whole object as written, `type` and `capabilities` included.
    pub raw: Map<String, Value>,
}

impl PluginConfig {
    /// Validate one plugin object. Error paths are relative to the object.
    pub fn from_value(v: &Value) -> Result<PluginConfig, CniError> {
        match v {
            Value::Object(obj) => PluginConfig::from_map(obj),
            other => Err(wrong_type("plugin configuration", "a JSON object", other)),
        }
    }

    fn from_map(obj: &Map<String, Value>) -> Result<PluginConfig, CniError> {
        let plugin_type = match obj.get("type") {
            None => {
                return Err(CniError::invalid_config(
                    "type",
                    "missing (the name of the plugin binary to run)",
                ))
            }
            Some(Value::String(s)) => {
                PluginType::new(s.as_str()).map_err(|r| CniError::invalid_config("type", r))?
            }
            Some(other) => return Err(wrong_type("type", "a string", other)),
        };

        let mut capabilities = BTreeMap::new();
        match obj.get("capabilities") {
            None => {}
            Some(Value::Object(caps)) => {
                for (cap, v) in caps {
                    match v {
                        Value::Bool(b) => {
                            capabilities.insert(cap.clone(), *b);
                        }
                        other => {
                            return Err(wrong_type(
                                format!("capabilities.{cap}"),
                                "a boolean",
                                other,
                            ))
                        }
                    }
                }
            }
            Some(other) => return Err(wrong_type("capabilities", "an object", other)),
        }
        Ok(PluginConfig {
            plugin_type,
            capabilities,
            raw: obj.clone(),
        })
    }

    /// Whether the plugin declares `cap` true.
    pub fn supports_capability(&self, cap: &str) -> bool {
        self.capabilities.get(cap).copied().unwrap_or(false)
    }
}

/// A network configuration (cni-SPEC §1 "Configuration format"), or a single
/// plugin configuration standing for a one-plugin list.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkConfigList {
    /// `cniVersion` as written; empty when absent (which means 0.1.0).
    pub cni_version: String,
    /// `cniVersions` as written, supported or not.
    pub cni_versions: Vec<String>,
    pub name: Option<String>,
    pub disable_check: bool,
    pub disable_gc: bool,
    pub load_only_inlined_plugins: bool,
    pub plugins: Vec<PluginConfig>,
    /// The document had no `plugins` but a `type`: it is one plugin's
    /// configuration, which is also `plugins[0]`.
    pub single: bool,
    /// The whole document as written.
    pub raw: Map<String, Value>,
}

impl NetworkConfigList {
    /// Parse JSON text. Malformed JSON is code 6 with serde's position.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, CniError> {
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|e| CniError::decode("network configuration", e.to_string()))?;
        NetworkConfigList::from_value(&v)
    }

    /// Validate a parsed document; errors are code 7 naming the field path.
    pub fn from_value(v: &Value) -> Result<Self, CniError> {
        let Value::Object(obj) = v else {
            return Err(wrong_type("network configuration", "a JSON object", v));
        };
        let cni_version = opt_string(obj, "cniVersion")?
            .unwrap_or_default()
            .to_string();
        let cni_versions = match obj.get("cniVersions") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(wrong_type(format!("cniVersions[{i}]"), "a string", other)),
                })
                .collect::<Result<_, _>>()?,
            Some(other) => return Err(wrong_type("cniVersions", "an array of strings", other)),
        };
        let name = opt_string(obj, "name")?.map(str::to_string);
        if let Some(n) = &name {
            names::check_network_name(n).map_err(|r| CniError::invalid_config("name", r))?;
        }
        let disable_check = disable_check(obj)?;
        let disable_gc = opt_bool(obj, "disableGC")?;
        let load_only_inlined_plugins = opt_bool(obj, "loadOnlyInlinedPlugins")?;

        let (plugins, single) = match (obj.get("plugins"), obj.get("type")) {
            (Some(Value::Array(items)), _) if !items.is_empty() => {
                let plugins = items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| {
                        let at = format!("plugins[{i}]");
                        match item {
                            Value::Object(p) => {
                                PluginConfig::from_map(p).map_err(|e| e.within(&at))
                            }
                            other => Err(wrong_type(&at, "a plugin configuration object", other)),
                        }
                    })
                    .collect::<Result<_, _>>()?;
                (plugins, false)
            }
            (Some(other), _) => {
                return Err(wrong_type(
                    "plugins",
                    "a non-empty array of plugin configuration objects",
                    other,
                ))
            }
            (None, Some(_)) => {
                if load_only_inlined_plugins {
                    // cni-SPEC §1 `loadOnlyInlinedPlugins`.
                    return Err(CniError::invalid_config(
                        "loadOnlyInlinedPlugins",
                        "cannot be true when \"plugins\" is not present",
                    ));
                }
                (vec![PluginConfig::from_map(obj)?], true)
            }
            (None, None) => {
                return Err(CniError::invalid_config(
                    "plugins",
                    "missing: a network configuration needs a \"plugins\" list, \
                     or a \"type\" when it is a single plugin configuration",
                ))
            }
        };

        Ok(NetworkConfigList {
            cni_version,
            cni_versions,
            name,
            disable_check,
            disable_gc,
            load_only_inlined_plugins,
            plugins,
            single,
            raw: obj.clone(),
        })
    }

    /// cni-SPEC §1 "Version considerations": the highest version plexus
    /// supports among `cniVersion` and `cniVersions`. A missing `cniVersion`
    /// means 0.1.0, as libcni and Go plugins assume; entries plexus does not
    /// know are skipped.
    pub fn select_version(&self) -> Result<CniVersion, CniError> {
        let declared = if self.cni_version.is_empty() {
            CniVersion::V0_1_0.as_str()
        } else {
            self.cni_version.as_str()
        };
        let offered: Vec<&str> = std::iter::once(declared)
            .chain(self.cni_versions.iter().map(String::as_str))
            .collect();
        offered
            .iter()
            .filter_map(|s| s.parse::<CniVersion>().ok())
            .max()
            .ok_or_else(|| {
                CniError::incompatible_version(
                    "cniVersion",
                    format!(
                        "none of {offered:?} (cniVersion and cniVersions) is a version plexus supports \
                         (supported: {})",
                        CniVersion::supported_versions().join(", ")
                    ),
                )
            })
    }

    /// Whether any plugin declares `cap` true.
    pub fn supports_capability(&self, cap: &str) -> bool {
        self.plugins.iter().any(|p| p.supports_capability(cap))
    }
}

/// `disableCheck` is a boolean; like libcni, also accept the strings "true"
/// and "false" (any case), which configurations in the wild use.
fn disable_check(obj: &Map<String, Value>) -> Result<bool, CniError> {
    match obj.get("disableCheck") {
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Ok(true),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => Ok(false),
        _ => opt_bool(obj, "disableCheck"),
    }
}

/// cni-SPEC §3 "Deriving request configuration from plugin configuration":
/// the JSON a plugin receives on stdin.
///
/// Keys, in order: `cniVersion`, `name`, the plugin's own keys as written
/// (without `capabilities` and `cni.dev/*`), `runtimeConfig`, `prevResult`.
/// `runtimeConfig` is the plugin's own `runtimeConfig` object (if any) plus
/// every capability the plugin declares true and `capability_args` provides;
/// it is only added when that is non-empty. `prevResult` is only set when
/// given (never for the first ADD of a chain), and a `prevResult` written in
/// the plugin configuration is dropped. Keys the runtime injects replace ones
/// the plugin configuration already has, at their place.
pub fn derive_request(
    plugin: &PluginConfig,
    network_name: &str,
    version: CniVersion,
    capability_args: &Map<String, Value>,
    prev_result: Option<&Value>,
) -> Map<String, Value> {
    // cni-SPEC §3 "Deriving runtimeConfig", in the runtime's order.
    let granted: Vec<(&String, &Value)> = capability_args
        .iter()
        .filter(|(cap, _)| plugin.supports_capability(cap))
        .collect();
    let mut runtime_config = (!granted.is_empty()).then(|| {
        let mut rc = match plugin.raw.get("runtimeConfig") {
            Some(Value::Object(existing)) => existing.clone(),
            _ => Map::new(),
        };
        for (cap, v) in granted {
            rc.insert(cap.clone(), v.clone());
        }
        Value::Object(rc)
    });
    let mut prev_result = prev_result.cloned();

    let mut out = Map::new();
    out.insert("cniVersion".into(), version.as_str().into());
    out.insert("name".into(), network_name.into());
    for (key, value) in &plugin.raw {
        match key.as_str() {
            "cniVersion" | "name" | "capabilities" => {}
            k if k.starts_with("cni.dev/") => {}
            "runtimeConfig" => {
                let v = runtime_config.take().unwrap_or_else(|| value.clone());
                out.insert(key.clone(), v);
            }
            "prevResult" => {
                if let Some(p) = prev_result.take() {
                    out.insert(key.clone(), p);
                }
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    if let Some(rc) = runtime_config {
        out.insert("runtimeConfig".into(), rc);
    }
    if let Some(p) = prev_result {
        out.insert("prevResult".into(), p);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::error::details_of;
    use crate::ErrorCode;

    /// cni-SPEC §1 "Example configuration", comments removed.
    const DBNET: &str = include_str!("testdata/section-1-dbnet.json");

    /// The §1 example as the Appendix's requests imply it: the Appendix's
    /// bridge requests carry an `ipam` without the `routes` of §1 (the spec is
    /// inconsistent there; see `ipam_routes_of_section_1_pass_through`).
    fn dbnet_as_in_appendix() -> NetworkConfigList {
        let mut v: Value = serde_json::from_str(DBNET).unwrap();
        v["plugins"][0]["ipam"]
            .as_object_mut()
            .unwrap()
            .remove("routes");
        NetworkConfigList::from_value(&v).unwrap()
    }

    /// The Appendix's capability arguments.
    fn cap_args() -> Map<String, Value> {
        json!({
            "portMappings": [{ "hostPort": 8080, "containerPort": 80, "protocol": "tcp" }],
            "mac": "00:11:22:33:44:66",
        })
        .as_object()
        .unwrap()
        .clone()
    }

    /// The result of `bridge` in the Appendix "Add example" (mac 99:88:...).
    fn bridge_result() -> Value {
        serde_json::from_str(APPENDIX_BRIDGE_RESULT).unwrap()
    }

    /// The result of `tuning` (= final ADD result), with the changed mac.
    fn tuning_result() -> Value {
        let mut v = bridge_result();
        v["interfaces"][2]["mac"] = json!("00:11:22:33:44:66");
        v
    }

    /// cni-SPEC Appendix "Add example": the result of `bridge`.
    const APPENDIX_BRIDGE_RESULT: &str = include_str!("testdata/appendix-bridge-result.json");

    // The request configurations of the Appendix, verbatim.
    const APPENDIX_BRIDGE_ADD: &str = include_str!("testdata/appendix-bridge-add.json");

    const APPENDIX_TUNING_NO_PREV: &str = include_str!("testdata/appendix-tuning-add.json");

    const APPENDIX_PORTMAP_NO_PREV: &str = include_str!("testdata/appendix-portmap-add.json");

    fn with_prev(base: &str, prev: Value) -> Value {
        let mut v: Value = serde_json::from_str(base).unwrap();
        v.as_object_mut().unwrap().insert("prevResult".into(), prev);
        v
    }

    fn derive(list: &NetworkConfigList, i: usize, prev: Option<&Value>) -> Value {
        Value::Object(derive_request(
            &list.plugins[i],
            list.name.as_deref().unwrap(),
            list.select_version().unwrap(),
            &cap_args(),
            prev,
        ))
    }

    #[test]
    fn appendix_add_example() {
        // cni-SPEC Appendix "Add example", steps 1-3.
        let list = dbnet_as_in_appendix();
        // The keys keep the order the appendix prints them in.
        let keys_of = |v: &Value| -> String {
            let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
            keys.join(" ")
        };
        let step1 = derive(&list, 0, None);
        assert_eq!(
            step1,
            serde_json::from_str::<Value>(APPENDIX_BRIDGE_ADD).unwrap()
        );
        assert_eq!(keys_of(&step1), "cniVersion name type bridge keyA ipam dns");
        let step2 = derive(&list, 1, Some(&bridge_result()));
        assert_eq!(step2, with_prev(APPENDIX_TUNING_NO_PREV, bridge_result()));
        assert_eq!(
            keys_of(&step2),
            "cniVersion name type sysctl runtimeConfig prevResult"
        );
        let step3 = derive(&list, 2, Some(&tuning_result()));
        assert_eq!(step3, with_prev(APPENDIX_PORTMAP_NO_PREV, tuning_result()));
    }

    #[test]
    fn appendix_check_example() {
        // cni-SPEC Appendix "Check example", steps 1-3: prevResult is always
        // the final ADD result.
        let list = dbnet_as_in_appendix();
        let fin = tuning_result();
        assert_eq!(
            derive(&list, 0, Some(&fin)),
            with_prev(APPENDIX_BRIDGE_ADD, fin.clone())
        );
        assert_eq!(
            derive(&list, 1, Some(&fin)),
            with_prev(APPENDIX_TUNING_NO_PREV, fin.clone())
        );
        assert_eq!(
            derive(&list, 2, Some(&fin)),
            with_prev(APPENDIX_PORTMAP_NO_PREV, fin.clone())
        );
    }

    #[test]
    fn appendix_delete_example() {
        // cni-SPEC Appendix "Delete example": reverse order, final ADD result.
        let list = dbnet_as_in_appendix();
        let fin = tuning_result();
        let got: Vec<Value> = (0..3).rev().map(|i| derive(&list, i, Some(&fin))).collect();
        assert_eq!(
            got,
            vec![
                with_prev(APPENDIX_PORTMAP_NO_PREV, fin.clone()),
                with_prev(APPENDIX_TUNING_NO_PREV, fin.clone()),
                with_prev(APPENDIX_BRIDGE_ADD, fin.clone()),
            ]
        );
    }

    #[test]
    fn ipam_routes_of_section_1_pass_through() {
        // cni-SPEC §1: unknown fields are passed through unchanged.
        let list = NetworkConfigList::from_slice(DBNET.as_bytes()).unwrap();
        let req = derive(&list, 0, None);
        assert_eq!(req["ipam"]["routes"], json!([{"dst": "0.0.0.0/0"}]));
    }

    #[test]
    fn parses_the_section_1_example() {
        let list = NetworkConfigList::from_slice(DBNET.as_bytes()).unwrap();
        assert_eq!(list.cni_version, "1.1.0");
        assert_eq!(list.cni_versions, ["0.3.1", "0.4.0", "1.0.0", "1.1.0"]);
        assert_eq!(list.name.as_deref(), Some("dbnet"));
        assert!(!list.single && !list.disable_check && !list.disable_gc);
        let types: Vec<&str> = list
            .plugins
            .iter()
            .map(|p| p.plugin_type.as_str())
            .collect();
        assert_eq!(types, ["bridge", "tuning", "portmap"]);
        assert!(list.supports_capability("mac"));
        assert!(list.supports_capability("portMappings"));
        assert!(!list.supports_capability("ips"));
        assert_eq!(list.select_version().unwrap(), CniVersion::V1_1_0);
        let keys: Vec<&str> = list.plugins[0].raw.keys().map(String::as_str).collect();
        assert_eq!(keys, ["type", "bridge", "keyA", "ipam", "dns"]);
    }

    #[test]
    fn single_plugin_configuration() {
        let list = NetworkConfigList::from_value(&json!({
            "cniVersion": "0.4.0", "name": "mynet", "type": "bridge",
            "capabilities": {"ips": true, "mac": false}, "ipam": {"type": "host-local"}
        }))
        .unwrap();
        assert!(list.single);
        assert_eq!(list.name.as_deref(), Some("mynet"));
        assert_eq!(list.plugins.len(), 1);
        assert_eq!(list.plugins[0].plugin_type, "bridge");
        assert_eq!(list.plugins[0].raw, list.raw);
        assert!(list.supports_capability("ips"));
        assert!(!list.supports_capability("mac"));
        assert_eq!(list.select_version().unwrap(), CniVersion::V0_4_0);
        // Its own name/cniVersion are replaced at their place by the injected ones.
        let caps = json!({"ips": ["10.0.0.2/24"], "mac": "x"});
        let req = derive_request(
            &list.plugins[0],
            "other",
            CniVersion::V1_0_0,
            caps.as_object().unwrap(),
            None,
        );
        assert_eq!(
            Value::Object(req.clone()),
            json!({"cniVersion": "1.0.0", "name": "other", "type": "bridge",
                   "ipam": {"type": "host-local"}, "runtimeConfig": {"ips": ["10.0.0.2/24"]}})
        );
        let keys: Vec<&str> = req.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["cniVersion", "name", "type", "ipam", "runtimeConfig"]
        );
    }

    #[test]
    fn derive_merges_existing_runtime_config_in_place_and_strips_reserved() {
        let p = PluginConfig::from_value(&json!({
            "type": "x",
            "runtimeConfig": {"keep": 1, "mac": "old"},
            "cni.dev/valid-attachments": [],
            "cni.dev/other": 1,
            "prevResult": {"stale": true},
            "capabilities": {"mac": true, "bandwidth": true, "ips": false},
            "after": true
        }))
        .unwrap();
        let caps = json!({"ips": ["1.2.3.4/24"], "mac": "new", "portMappings": []});
        let prev = json!({"cniVersion": "1.1.0"});
        let req = derive_request(
            &p,
            "n",
            CniVersion::V1_1_0,
            caps.as_object().unwrap(),
            Some(&prev),
        );
        let keys: Vec<&str> = req.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "cniVersion",
                "name",
                "type",
                "runtimeConfig",
                "prevResult",
                "after"
            ]
        );
        assert_eq!(req["runtimeConfig"], json!({"keep": 1, "mac": "new"}));
        assert_eq!(req["prevResult"], prev);
        // First ADD: no prevResult at all, and an existing runtimeConfig is
        // passed through when no capability applies.
        let req = derive_request(&p, "n", CniVersion::V1_1_0, &Map::new(), None);
        assert!(!req.contains_key("prevResult"));
        assert_eq!(req["runtimeConfig"], json!({"keep": 1, "mac": "old"}));
        // No capability granted and no runtimeConfig written: none is added.
        let p =
            PluginConfig::from_value(&json!({"type": "x", "capabilities": {"mac": true}})).unwrap();
        let req = derive_request(&p, "n", CniVersion::V1_1_0, caps.as_object().unwrap(), None);
        assert_eq!(req["runtimeConfig"], json!({"mac": "new"}));
        let req = derive_request(&p, "n", CniVersion::V1_1_0, &Map::new(), None);
        assert!(!req.contains_key("runtimeConfig") && !req.contains_key("capabilities"));
    }

    #[test]
    fn version_selection() {
        // cni-SPEC §1 "Version considerations".
        let sel = |v: Value| NetworkConfigList::from_value(&v).unwrap().select_version();
        let base = |extra: Value| {
            let mut v = json!({"name": "n", "type": "bridge"});
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            v
        };
        assert_eq!(sel(base(json!({}))).unwrap(), CniVersion::V0_1_0);
        assert_eq!(
            sel(base(json!({"cniVersion": ""}))).unwrap(),
            CniVersion::V0_1_0
        );
        assert_eq!(
            sel(base(json!({"cniVersion": "0.3.1"}))).unwrap(),
            CniVersion::V0_3_1
        );
        assert_eq!(
            sel(base(
                json!({"cniVersion": "0.4.0", "cniVersions": ["1.0.0", "0.3.0"]})
            ))
            .unwrap(),
            CniVersion::V1_0_0
        );
        // cniVersion above what plexus knows, cniVersions rescues it.
        assert_eq!(
            sel(base(
                json!({"cniVersion": "2.0.0", "cniVersions": ["9.9.9", "1.1.0", "junk"]})
            ))
            .unwrap(),
            CniVersion::V1_1_0
        );
        assert_eq!(
            sel(base(
                json!({"cniVersion": "1.1.0", "cniVersions": ["0.2.0"]})
            ))
            .unwrap(),
            CniVersion::V1_1_0
        );
        let details = details_of(
            sel(base(
                json!({"cniVersion": "2.0.0", "cniVersions": ["3.0.0"]}),
            )),
            ErrorCode::IncompatibleVersion,
        );
        assert!(
            details.starts_with("cniVersion: none of [\"2.0.0\", \"3.0.0\"]"),
            "{details}"
        );
    }

    #[test]
    fn disable_flags() {
        let v = json!({"name": "n", "disableCheck": true, "disableGC": true,
                       "loadOnlyInlinedPlugins": true, "plugins": [{"type": "a"}]});
        let l = NetworkConfigList::from_value(&v).unwrap();
        assert!(l.disable_check && l.disable_gc && l.load_only_inlined_plugins);
        // libcni accepts disableCheck as a string.
        let v = json!({"name": "n", "disableCheck": "TRUE", "plugins": [{"type": "a"}]});
        assert!(NetworkConfigList::from_value(&v).unwrap().disable_check);
        let v = json!({"name": "n", "disableCheck": "false", "plugins": [{"type": "a"}]});
        assert!(!NetworkConfigList::from_value(&v).unwrap().disable_check);
    }

    fn bad(v: Value) -> String {
        details_of(NetworkConfigList::from_value(&v), ErrorCode::InvalidConfig)
    }

    #[test]
    fn malformed_json_is_code_6_with_position() {
        let e = NetworkConfigList::from_slice(b"{\"name\": \"x\",\n  \"plugins\": [}").unwrap_err();
        assert_eq!(e.code, ErrorCode::Decode);
        assert!(
            e.details.starts_with("network configuration: "),
            "{}",
            e.details
        );
        assert!(e.details.contains("line 2 column"), "{}", e.details);
        let e = NetworkConfigList::from_slice(b"").unwrap_err();
        assert_eq!(e.code, ErrorCode::Decode);
    }

    #[test]
    fn bad_inputs_name_the_field() {
        let p = |plugins: Value| json!({"cniVersion": "1.1.0", "name": "n", "plugins": plugins});
        assert_eq!(
            bad(json!([])),
            "network configuration: must be a JSON object, got an array"
        );
        assert_eq!(
            bad(json!("x")),
            "network configuration: must be a JSON object, got \"x\""
        );
        assert!(bad(json!({"name": "n"})).starts_with("plugins: missing"));
        assert!(bad(json!({"name": "n"})).contains("\"type\""));
        assert_eq!(
            bad(p(json!([]))),
            "plugins: must be a non-empty array of plugin configuration objects, got an array"
        );
        assert_eq!(
            bad(p(json!({"type": "a"}))),
            "plugins: must be a non-empty array of plugin configuration objects, got an object"
        );
        assert_eq!(
            bad(p(json!(null))),
            "plugins: must be a non-empty array of plugin configuration objects, got null"
        );
        assert_eq!(
            bad(p(json!([{"type": "a"}, "b"]))),
            "plugins[1]: must be a plugin configuration object, got \"b\""
        );
        assert!(
            bad(p(json!([{"type": "a"}, {"bridge": "x"}]))).starts_with("plugins[1].type: missing")
        );
        assert_eq!(
            bad(p(json!([{"type": 5}]))),
            "plugins[0].type: must be a string, got 5"
        );
        assert_eq!(
            bad(p(json!([{"type": "../bin/x"}]))),
            "plugins[0].type: \"../bin/x\" must not contain '/'"
        );
        assert_eq!(
            bad(p(json!([{"type": ""}]))),
            "plugins[0].type: must not be empty"
        );
        assert_eq!(
            bad(p(
                json!([{"type": "a"}, {"type": "b", "capabilities": {"ips": "yes"}}])
            )),
            "plugins[1].capabilities.ips: must be a boolean, got \"yes\""
        );
        assert_eq!(
            bad(p(json!([{"type": "a", "capabilities": ["ips"]}]))),
            "plugins[0].capabilities: must be an object, got an array"
        );
        assert_eq!(
            bad(json!({"cniVersion": 1, "plugins": [{"type": "a"}]})),
            "cniVersion: must be a string, got 1"
        );
        assert_eq!(
            bad(json!({"cniVersions": "1.0.0", "plugins": [{"type": "a"}]})),
            "cniVersions: must be an array of strings, got \"1.0.0\""
        );
        assert_eq!(
            bad(json!({"cniVersions": ["1.0.0", 1], "plugins": [{"type": "a"}]})),
            "cniVersions[1]: must be a string, got 1"
        );
        assert_eq!(
            bad(json!({"name": 3, "plugins": [{"type": "a"}]})),
            "name: must be a string, got 3"
        );
        assert!(bad(json!({"name": "my net", "plugins": [{"type": "a"}]}))
            .starts_with("name: \"my net\""));
        assert!(bad(json!({"name": "", "plugins": [{"type": "a"}]}))
            .starts_with("name: must not be empty"));
        for key in ["disableCheck", "disableGC", "loadOnlyInlinedPlugins"] {
            let mut v = json!({"name": "n", "plugins": [{"type": "a"}]});
            v[key] = json!("yes");
            assert_eq!(bad(v), format!("{key}: must be a boolean, got \"yes\""));
        }
        assert_eq!(
            bad(json!({"name": "n", "type": "bridge", "loadOnlyInlinedPlugins": true})),
            "loadOnlyInlinedPlugins: cannot be true when \"plugins\" is not present"
        );
        // Single plugin configurations report paths without a plugins[] prefix.
        assert_eq!(
            bad(json!({"name": "n", "type": "a", "capabilities": {"mac": 1}})),
            "capabilities.mac: must be a boolean, got 1"
        );
        assert_eq!(
            bad(json!({"type": null})),
            "type: must be a string, got null"
        );
        let e = PluginConfig::from_value(&json!(7)).unwrap_err();
        assert_eq!(
            e.details,
            "plugin configuration: must be a JSON object, got 7"
        );
    }
}
