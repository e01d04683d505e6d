//! Device information (device-info-SPEC.md v1.1.0): the map a device plugin or
//! CNI plugin writes to describe the device behind an attachment, carried in
//! the network-status `device-info` key (multi-net-spec §5.3.8).
//!
//! Multus reads these with Go's encoding/json, so keys match
//! case-insensitively; unknown keys are ignored (and not written back).
//! [`DeviceInfo`] is the one serde type both directions use: its field
//! names are the spec's keys, its enums' one list of spellings (`Spelled`) their values.

use std::io;
use std::path::{Path, PathBuf};

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::casefold;
use crate::error::CniError;
use crate::go_json::{decode_error, GoStr};

/// The Device Information Specification version plexus writes.
pub const SPEC_VERSION: &str = "1.1.0";
/// device-info-SPEC §4: the directory holding `dp/` (§4.1, the device
/// plugins' files) and `cni/` (§4.2, the per-attachment CNI copies).
pub const ROOT_DIR: &str = "/var/run/k8s.cni.cncf.io/devinfo";
/// device-info-SPEC §5.1: the capability, and `runtimeConfig` key, that
/// carries the path of an attachment's CNI device-info file.
pub const FILE_CAPABILITY: &str = "CNIDeviceInfoFile";

/// device-info-SPEC §3.1.1 `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceType {
    Pci,
    Vdpa,
    VhostUser,
    Memif,
}

/// §3.1.4.2 vDPA `driver`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VdpaDriver {
    Vhost,
    Virtio,
}

/// §3.1.5.1 vhost-user `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VhostUserMode {
    Client,
    Server,
}

/// §3.1.6.1 memif `role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemifRole {
    Master,
    Slave,
}

/// §3.1.6.3 memif `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemifMode {
    Ethernet,
    Ip,
    InjectPunt,
}

/// The spelling of each enum value in JSON, shared by parsing and printing.
trait Spelled: Sized + Copy + 'static {
    const ALL: &'static [(Self, &'static str)];

    fn as_str(self) -> &'static str
    where
        Self: PartialEq,
    {
        Self::ALL
            .iter()
            .find(|(v, _)| *v == self)
            .map(|(_, s)| *s)
            .unwrap_or_default()
    }

    fn parse(s: &str) -> Result<Self, String> {
        Self::ALL
            .iter()
            .find(|(_, name)| *name == s)
            .map(|(v, _)| *v)
            .ok_or_else(|| {
                let names: Vec<String> = Self::ALL.iter().map(|(_, n)| format!("{n:?}")).collect();
                format!("must be one of {}, got {s:?}", names.join(", "))
            })
    }
}

impl Spelled for DeviceType {
    const ALL: &'static [(Self, &'static str)] = &[
        (DeviceType::Pci, "pci"),
        (DeviceType::Vdpa, "vdpa"),
        (DeviceType::VhostUser, "vhost-user"),
        (DeviceType::Memif, "memif"),
    ];
}
impl Spelled for VdpaDriver {
    const ALL: &'static [(Self, &'static str)] =
        &[(VdpaDriver::Vhost, "vhost"), (VdpaDriver::Virtio, "virtio")];
}
impl Spelled for VhostUserMode {
    const ALL: &'static [(Self, &'static str)] = &[
        (VhostUserMode::Client, "client"),
        (VhostUserMode::Server, "server"),
    ];
}
impl Spelled for MemifRole {
    const ALL: &'static [(Self, &'static str)] =
        &[(MemifRole::Master, "master"), (MemifRole::Slave, "slave")];
}
impl Spelled for MemifMode {
    const ALL: &'static [(Self, &'static str)] = &[
        (MemifMode::Ethernet, "ethernet"),
        (MemifMode::Ip, "ip"),
        (MemifMode::InjectPunt, "inject-punt"),
    ];
}

/// Serialize and deserialize an enum by its [`Spelled`] spelling; a value
/// not in the list fails with the list.
macro_rules! serde_by_spelling {
    ($($t:ty),+) => {$(
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(Spelled::as_str(*self))
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = GoStr::deserialize(d)?;
                <$t as Spelled>::parse(&text).map_err(de::Error::custom)
            }
        }
    )+};
}

serde_by_spelling!(DeviceType, VdpaDriver, VhostUserMode, MemifRole, MemifMode);

impl DeviceType {
    /// The spec's spelling (`pci`, `vdpa`, `vhost-user`, `memif`), which is
    /// also the key of the type's own map.
    pub fn as_str(self) -> &'static str {
        Spelled::as_str(self)
    }
}

/// §3.1.3 `pci`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PciDevice {
    pub pci_address: GoStr,
    pub vhost_net: Option<GoStr>,
    pub rdma_device: Option<GoStr>,
    pub pf_pci_address: Option<GoStr>,
    pub representor_device: Option<GoStr>,
}

/// §3.1.4 `vdpa`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct VdpaDevice {
    pub parent_device: GoStr,
    pub driver: VdpaDriver,
    pub path: GoStr,
    pub pci_address: Option<GoStr>,
    pub pf_pci_address: Option<GoStr>,
    pub representor_device: Option<GoStr>,
}

/// §3.1.5 `vhost-user`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VhostUserDevice {
    pub mode: VhostUserMode,
    pub path: GoStr,
}

/// §3.1.6 `memif`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemifDevice {
    pub role: MemifRole,
    pub path: GoStr,
    pub mode: MemifMode,
}

/// A device information map (§3.1), keys in the spec's order. The map named
/// by `device_type` is always present after [`DeviceInfo::from_value`]; the
/// others may be too.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct DeviceInfo {
    #[serde(rename = "type")]
    pub device_type: DeviceType,
    /// `MAJOR.MINOR.PATCH` of the Device Information Specification.
    pub version: GoStr,
    #[serde(default)]
    pub pci: Option<PciDevice>,
    #[serde(default)]
    pub vdpa: Option<VdpaDevice>,
    #[serde(default)]
    pub vhost_user: Option<VhostUserDevice>,
    #[serde(default)]
    pub memif: Option<MemifDevice>,
}

fn is_semver_triple(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

impl DeviceInfo {
    /// A `pci` device in this plexus's spec version.
    pub fn pci(pci: PciDevice) -> DeviceInfo {
        DeviceInfo {
            pci: Some(pci),
            ..DeviceInfo::bare(DeviceType::Pci)
        }
    }

    /// A `vdpa` device in this plexus's spec version.
    pub fn vdpa(vdpa: VdpaDevice) -> DeviceInfo {
        DeviceInfo {
            vdpa: Some(vdpa),
            ..DeviceInfo::bare(DeviceType::Vdpa)
        }
    }

    fn bare(device_type: DeviceType) -> DeviceInfo {
        DeviceInfo {
            device_type,
            version: SPEC_VERSION.into(),
            pci: None,
            vdpa: None,
            vhost_user: None,
            memif: None,
        }
    }

    /// Decode and validate a device information map. Errors name the key
    /// (`pci.pci-address: required`); callers prefix `device-info` or a
    /// file name with [`CniError::within`].
    pub fn from_value(v: &Value) -> Result<DeviceInfo, CniError> {
        let info: DeviceInfo =
            casefold::from_value_at(v).map_err(|e| decode_error(e, v, "device information"))?;
        if !is_semver_triple(&info.version) {
            return Err(CniError::decode(
                "version",
                format!(
                    "must be MAJOR.MINOR.PATCH (like {SPEC_VERSION:?}), got {:?}",
                    info.version
                ),
            ));
        }
        // §3.1.3–§3.1.6: the map of the given type is required.
        let present = match info.device_type {
            DeviceType::Pci => info.pci.is_some(),
            DeviceType::Vdpa => info.vdpa.is_some(),
            DeviceType::VhostUser => info.vhost_user.is_some(),
            DeviceType::Memif => info.memif.is_some(),
        };
        if !present {
            let key = info.device_type.as_str();
            return Err(CniError::decode(
                key,
                format!("required when \"type\" is {key:?} (device-info-SPEC §3.1)"),
            ));
        }
        Ok(info)
    }

    /// The map as JSON, keys in spec order, optional keys omitted when unset.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("strings and maps serialize")
    }
}

/// device-info-SPEC §4.1: the file name a device plugin uses for one device,
/// `<resourceName>-<deviceID>-device.json` with '/' in the resource name
/// replaced by '-'. Fails when the result could leave [`DP_DIR`].
fn dp_file_name(resource_name: &str, device_id: &str) -> Result<String, String> {
    if device_id.is_empty() || device_id.contains(['/', '\0']) || device_id == ".." {
        return Err(format!(
            "device ID {device_id:?} cannot be part of a file name"
        ));
    }
    if resource_name.is_empty() || resource_name.contains('\0') {
        return Err(format!(
            "resource name {resource_name:?} cannot be part of a file name"
        ));
    }
    Ok(format!(
        "{}-{device_id}-device.json",
        resource_name.replace('/', "-")
    ))
}

/// device-info-SPEC §4.2: the CNI file name of one attachment, unique per
/// (network, container, interface) as Multus makes it:
/// `<namespace>-<network>-<containerID>-<ifname>-device.json`. Every part
/// is a checked name without '/' once the network's '/' is replaced.
fn cni_file_name(network: &str, container_id: &str, ifname: &str) -> String {
    format!(
        "{}-{container_id}-{ifname}-device.json",
        network.replace('/', "-")
    )
}

/// §4.1: the device plugin's file for `device_id` of `resource_name`, under
/// `root` ([`ROOT_DIR`] on a node).
pub fn dp_file(root: &Path, resource_name: &str, device_id: &str) -> Result<PathBuf, String> {
    Ok(root
        .join("dp")
        .join(dp_file_name(resource_name, device_id)?))
}

/// §4.2: the CNI file of one attachment, under `root`.
pub fn cni_file(root: &Path, network: &str, container_id: &str, ifname: &str) -> PathBuf {
    root.join("cni")
        .join(cni_file_name(network, container_id, ifname))
}

/// Whether `path` could be a CNI device-info file [`cni_file`] names: an
/// absolute path to a `...-device.json` file with no `..` in it. What
/// plexus writes and removes on its strength is no other file of the node.
pub fn check_cni_file(path: &Path) -> Result<(), String> {
    use std::path::Component;
    let plain = path
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    let named = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with("-device.json"));
    if path.is_absolute() && plain && named {
        Ok(())
    } else {
        Err(format!(
            "{} is not a CNI device-info file (an absolute path to a ...-device.json file)",
            path.display()
        ))
    }
}

/// Read a device-info file: `None` when there is none; an error naming the
/// file when it is not valid device information.
pub fn load(path: &Path) -> Result<Option<DeviceInfo>, CniError> {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(CniError::io(
                format!("device-info file {}", path.display()),
                e,
            ))
        }
    };
    let named = |details: String| {
        CniError::invalid_config(format!("device-info file {}", path.display()), details)
    };
    let v: Value = serde_json::from_slice(&text).map_err(|e| named(e.to_string()))?;
    DeviceInfo::from_value(&v)
        .map(Some)
        .map_err(|e| named(e.details))
}

/// Write `info` to `path` whole (a reader never sees half a file), making
/// its directory if needed (device-info-SPEC §4.2.1, §5.1.2).
pub fn store(path: &Path, info: &DeviceInfo) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)?;
    }
    let mut bytes = serde_json::to_vec_pretty(info).expect("strings and maps serialize");
    bytes.push(b'\n');
    crate::whole_file::replace(path, &bytes, 0o644, crate::whole_file::Durability::Unsynced)
}

/// Remove a CNI device-info file (device-info-SPEC §4.2.1, on DEL);
/// idempotent.
pub fn remove(path: &Path) -> io::Result<()> {
    crate::whole_file::remove(path)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(text: &str) -> DeviceInfo {
        let v: Value = serde_json::from_str(text).unwrap();
        DeviceInfo::from_value(&v).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn err(v: Value) -> String {
        DeviceInfo::from_value(&v).unwrap_err().details
    }

    // device-info-SPEC §4.3 as printed: curly quotes (and, in the vdpa one, a
    // missing closing quote) make them invalid JSON.
    const PRINTED_4_3: [&str; 2] = [
        "{\n    \"type\": \"pci\",\n    \"version\": \"1.1.0\",\n    \"pci\": {\n        \"pci-address\": \"0000:01:02.2\",\n        \u{201c}pf-pci-address\u{201d}: \"0000:01:02.0\"\n    }\n}",
        "{\n    \"type\": \"vdpa\",\n    \"version\": \"1.1.0\",\n    \"vdpa\": {\n        \u{201c}parent-device\u{201d}: \u{201c}vdpa3\u{201d},\n        \"driver\": \"vhost\",\n        \"path: \"/dev/vdpa-vhost0\"\n    }\n}",
    ];

    #[test]
    fn examples_4_3_as_printed_are_not_json() {
        for text in PRINTED_4_3 {
            assert!(serde_json::from_str::<Value>(text).is_err());
        }
    }

    #[test]
    fn example_4_3_pci() {
        let text = r#"{
    "type": "pci",
    "version": "1.1.0",
    "pci": {
        "pci-address": "0000:01:02.2",
        "pf-pci-address": "0000:01:02.0"
    }
}"#;
        let d = parse(text);
        assert_eq!(d.device_type, DeviceType::Pci);
        assert_eq!(d.version, "1.1.0");
        assert_eq!(
            d.pci,
            Some(PciDevice {
                pci_address: "0000:01:02.2".into(),
                pf_pci_address: Some("0000:01:02.0".into()),
                ..Default::default()
            })
        );
        assert_eq!(d.to_value(), serde_json::from_str::<Value>(text).unwrap());
    }

    #[test]
    fn example_4_3_vdpa() {
        let text = r#"{
    "type": "vdpa",
    "version": "1.1.0",
    "vdpa": {
        "parent-device": "vdpa3",
        "driver": "vhost",
        "path": "/dev/vdpa-vhost0"
    }
}"#;
        let d = parse(text);
        assert_eq!(
            d.vdpa,
            Some(VdpaDevice {
                parent_device: "vdpa3".into(),
                driver: VdpaDriver::Vhost,
                path: "/dev/vdpa-vhost0".into(),
                pci_address: None,
                pf_pci_address: None,
                representor_device: None,
            })
        );
        assert_eq!(d.to_value(), serde_json::from_str::<Value>(text).unwrap());
    }

    #[test]
    fn example_4_3_vhost_user() {
        let text = r#"{
    "type": "vhost-user",
    "version": "1.1.0",
    "vhost-user": {
        "mode": "server",
        "path": "/var/run/vhost.sock"
    }
}"#;
        let d = parse(text);
        assert_eq!(
            d.vhost_user,
            Some(VhostUserDevice {
                mode: VhostUserMode::Server,
                path: "/var/run/vhost.sock".into()
            })
        );
        assert_eq!(d.to_value(), serde_json::from_str::<Value>(text).unwrap());
    }

    #[test]
    fn example_6_1_2_maps() {
        // device-info-SPEC §6.1.2, with the printed example's curly quotes
        // straightened and its missing commas added.
        let sriov_b = parse(
            r#"{"type": "pci", "version": "1.1.0",
                "pci": {"pci-address": "0000:18:0a.2", "vhost-net": "/dev/vhost-net",
                        "pf-pci-address": "0000:18:00.1"}}"#,
        );
        assert_eq!(
            sriov_b.pci.unwrap().vhost_net.as_deref(),
            Some("/dev/vhost-net")
        );
        let vdpa = parse(
            r#"{"type": "vdpa", "version": "1.1.0",
                "vdpa": {"parent-device": "vdpa2", "driver": "vhost", "path": "/dev/vhost-vdpa0",
                         "pci-address": "0000:02:01:6", "pf-pci-address": "0000:02:01:0"}}"#,
        );
        let v = vdpa.vdpa.unwrap();
        assert_eq!(v.pci_address.as_deref(), Some("0000:02:01:6"));
        assert_eq!(v.pf_pci_address.as_deref(), Some("0000:02:01:0"));
        let user = parse(
            r#"{"type": "vhost-user", "version": "1.1.0",
                "vhost-user": {"mode": "client", "path": "/var/run/net3/vhost.sock"}}"#,
        );
        assert_eq!(user.vhost_user.unwrap().mode, VhostUserMode::Client);
    }

    #[test]
    fn multi_net_5_4_vdpa_map_drops_unknown_key() {
        // multi-net-spec §5.4 "With device information": the vdpa map carries
        // a "device" key the device-info spec does not define.
        let d = parse(
            r#"{"type": "vdpa", "version": "1.0.0",
                "vdpa": {"parent-device": "/sys/bus/vdpa/devices", "driver": "vhost", "device": "vdpa2",
                         "path": "/dev/vhost-vdpa0", "pci-address": "0000:04:02.7",
                         "pf-pci-address": "0000:04:00.0"}}"#,
        );
        assert_eq!(
            d.to_value(),
            json!({"type": "vdpa", "version": "1.0.0",
                   "vdpa": {"parent-device": "/sys/bus/vdpa/devices", "driver": "vhost",
                            "path": "/dev/vhost-vdpa0", "pci-address": "0000:04:02.7",
                            "pf-pci-address": "0000:04:00.0"}})
        );
    }

    #[test]
    fn memif_and_case_insensitive_keys() {
        let d = parse(
            r#"{"Type": "memif", "VERSION": "1.1.0",
                "memif": {"Role": "master", "path": "/run/memif.sock", "mode": "inject-punt"}}"#,
        );
        assert_eq!(
            d.memif,
            Some(MemifDevice {
                role: MemifRole::Master,
                path: "/run/memif.sock".into(),
                mode: MemifMode::InjectPunt
            })
        );
        assert_eq!(
            d.to_value(),
            json!({"type": "memif", "version": "1.1.0",
                   "memif": {"role": "master", "path": "/run/memif.sock", "mode": "inject-punt"}})
        );
    }

    #[test]
    fn bad_inputs_name_the_key() {
        assert_eq!(
            err(json!("pci")),
            "device information: must be an object, got \"pci\""
        );
        assert_eq!(err(json!({"version": "1.1.0"})), "type: required");
        assert_eq!(
            err(json!({"type": "usb", "version": "1.1.0"})),
            "type: must be one of \"pci\", \"vdpa\", \"vhost-user\", \"memif\", got \"usb\""
        );
        assert_eq!(
            err(json!({"type": "pci", "pci": {"pci-address": "x"}})),
            "version: required"
        );
        assert_eq!(
            err(json!({"type": "pci", "version": "1.1", "pci": {"pci-address": "x"}})),
            "version: must be MAJOR.MINOR.PATCH (like \"1.1.0\"), got \"1.1\""
        );
        assert_eq!(
            err(json!({"type": "pci", "version": "1.1.0"})),
            "pci: required when \"type\" is \"pci\" (device-info-SPEC §3.1)"
        );
        assert_eq!(
            err(json!({"type": "pci", "version": "1.1.0", "pci": {}})),
            "pci.pci-address: required"
        );
        assert_eq!(
            err(json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": 5}})),
            "pci.pci-address: must be a string, got 5"
        );
        assert_eq!(
            err(json!({"type": "vdpa", "version": "1.1.0",
                       "vdpa": {"parent-device": "v", "driver": "mlx5", "path": "/dev/x"}})),
            "vdpa.driver: must be one of \"vhost\", \"virtio\", got \"mlx5\""
        );
        assert_eq!(
            err(
                json!({"type": "vdpa", "version": "1.1.0", "vdpa": {"driver": "vhost", "path": "/p"}})
            ),
            "vdpa.parent-device: required"
        );
        assert_eq!(
            err(
                json!({"type": "vhost-user", "version": "1.1.0", "vhost-user": {"mode": "peer", "path": "/p"}})
            ),
            "vhost-user.mode: must be one of \"client\", \"server\", got \"peer\""
        );
        assert_eq!(
            err(
                json!({"type": "vhost-user", "version": "1.1.0", "vhost-user": {"mode": "client"}})
            ),
            "vhost-user.path: required"
        );
        assert_eq!(
            err(
                json!({"type": "memif", "version": "1.1.0", "memif": {"role": "leader", "path": "/p", "mode": "ip"}})
            ),
            "memif.role: must be one of \"master\", \"slave\", got \"leader\""
        );
        assert_eq!(
            err(
                json!({"type": "memif", "version": "1.1.0", "memif": {"role": "slave", "path": "/p", "mode": "raw"}})
            ),
            "memif.mode: must be one of \"ethernet\", \"ip\", \"inject-punt\", got \"raw\""
        );
        assert_eq!(
            err(json!({"type": "memif", "version": "1.1.0", "memif": []})),
            "memif: must be an object, got []"
        );
        let e = DeviceInfo::from_value(&json!({"type": "pci", "version": "1.1.0"}))
            .unwrap_err()
            .within("device-info");
        assert_eq!(
            e.details,
            "device-info.pci: required when \"type\" is \"pci\" (device-info-SPEC §3.1)"
        );
    }

    #[test]
    fn null_is_absent_as_go_reads_it() {
        let d = parse(
            r#"{"type": "pci", "version": "1.1.0", "vdpa": null,
                "pci": {"pci-address": "0000:01:00.1", "vhost-net": null}}"#,
        );
        assert_eq!((d.vdpa, d.pci.unwrap().vhost_net), (None, None));
        assert_eq!(
            err(json!({"type": null, "version": "1.1.0"})),
            "type: required"
        );
        assert_eq!(
            err(json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": null}})),
            "pci.pci-address: required"
        );
    }

    #[test]
    fn one_type_reads_and_writes() {
        // The serde type is the wire format: what serde writes, plain serde
        // and the Go-folding reader both read back to the same value.
        let info = DeviceInfo::vdpa(VdpaDevice {
            parent_device: "vdpa0".into(),
            driver: VdpaDriver::Virtio,
            path: "/dev/vhost-vdpa-0".into(),
            pci_address: Some("0000:65:00.2".into()),
            pf_pci_address: None,
            representor_device: None,
        });
        let v = serde_json::to_value(&info).unwrap();
        assert_eq!(v, info.to_value());
        assert_eq!(
            serde_json::from_value::<DeviceInfo>(v.clone()).unwrap(),
            info
        );
        assert_eq!(DeviceInfo::from_value(&v).unwrap(), info);
    }

    #[test]
    fn device_plugin_file_name_4_1() {
        assert_eq!(
            dp_file_name("intel.com/sriov_net_a", "0000:18:02.5").unwrap(),
            "intel.com-sriov_net_a-0000:18:02.5-device.json"
        );
        assert!(dp_file_name("r", "../x").is_err());
        assert!(dp_file_name("r", "..").is_err());
        assert!(dp_file_name("r", "").is_err());
        assert!(dp_file_name("", "d").is_err());
    }

    #[test]
    fn cni_file_name_4_2_is_unique_per_attachment() {
        assert_eq!(
            cni_file_name("ns/sriov-a", "c0ffee", "net1"),
            "ns-sriov-a-c0ffee-net1-device.json"
        );
        assert_ne!(
            cni_file_name("ns/a", "c", "net1"),
            cni_file_name("ns/a", "c", "net2")
        );
    }

    #[test]
    fn cni_files_are_absolute_device_json_paths_without_dot_dot() {
        let root = Path::new("/run/devinfo");
        check_cni_file(&cni_file(root, "ns/a", "c1", "net1")).unwrap();
        for bad in [
            "/etc/passwd",
            "x-device.json",
            "/run/../etc/x-device.json",
            "./x-device.json",
        ] {
            assert!(check_cni_file(Path::new(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn store_load_remove_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        // §4.2.1: the directory is made when missing.
        let path = dir.path().join("cni/x-device.json");
        assert_eq!(load(&path).unwrap(), None);
        let info = parse(
            r#"{"type": "vdpa", "version": "1.1.0",
            "vdpa": {"parent-device": "vdpa0", "driver": "vhost", "path": "/dev/vhost-vdpa-0"}}"#,
        );
        store(&path, &info).unwrap();
        assert_eq!(load(&path).unwrap(), Some(info));
        remove(&path).unwrap();
        remove(&path).unwrap();
        assert_eq!(load(&path).unwrap(), None);
    }

    #[test]
    fn load_names_the_file_and_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.json");
        std::fs::write(&path, "{\"type\": \"pci\", \"version\": \"1.1.0\"}").unwrap();
        let e = load(&path).unwrap_err();
        assert_eq!(e.code, crate::error::ErrorCode::InvalidConfig);
        assert!(
            e.details.contains(&path.display().to_string()),
            "{}",
            e.details
        );
        assert!(e.details.contains("pci: required"), "{}", e.details);
        std::fs::write(&path, "not json").unwrap();
        assert!(load(&path).unwrap_err().details.contains("bad.json"));
    }
}
