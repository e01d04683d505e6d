//! What a plan is: the attachments of a pod, in order, each one CNI config
//! list invoked with one `CNI_IFNAME` (README "Plan output"). A leaf: the
//! planner makes these, the executor runs them, and the record keeps them,
//! so this module imports neither.

use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::cni::names::IfName;
use crate::cni::result::CniResult;
use crate::netattach::deviceinfo::{self, DeviceInfo};
use crate::netattach::status::{NetworkStatus, StatusInput};

/// `args.<this>`: plexus's namespace in a plugin's `args` (cni-CONVENTIONS),
/// reserved: a network config cannot set it, only IPAMClaim binding does.
pub const PLEXUS_ARGS: &str = "plexus";

/// The `source` of Multus's auxiliary chain's attachment
/// (`crate::plan::auxiliary::add_chain`).
pub const AUXILIARY_SOURCE: &str = "auxiliaryCNIChainName";

/// One attachment: one CNI config list invoked with one `CNI_IFNAME`. Its
/// JSON (the plan output, README "Plan output", and each attachment of the
/// record) is this type's serde form.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    pub network: String,
    pub ifname: IfName,
    pub default: bool,
    pub cni_args: String,
    /// The request JSON of each plugin of the chain, in order, without prevResult.
    pub plugins: Vec<Map<String, Value>>,
    /// Where the config came from.
    pub source: String,
    /// §4.1.2.1.9: gateways this attachment's default route goes to.
    #[serde(default)]
    pub default_route: Option<Vec<IpAddr>>,
    /// §4.1.2.1.9: another attachment's selection has `default-route`, so
    /// this one's default routes are removed after it is attached.
    #[serde(default, skip_serializing_if = "is_false")]
    pub clear_default_route: bool,
    /// §4.1.2.1.11: the IPAMClaim the IPAM of this attachment must honour.
    #[serde(default)]
    pub ipam_claim_reference: Option<String>,
    /// cni-SPEC §1 `disableCheck` of the network's config list: CHECK skips it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_check: bool,
    /// device-info-SPEC §4.2: the attachment's device-info files, when it
    /// is backed by a device-plugin resource or a plugin of it takes one.
    #[serde(default)]
    pub device_info: Option<DeviceInfoFiles>,
}

/// `net<n>`: the name Multus gives the attachment at position `n` that asks
/// for none (`net` and at most 12 digits fit the kernel's 15 bytes).
pub fn net_n(n: usize) -> IfName {
    IfName::new(format!("net{n}")).expect("net<n> is a valid interface name")
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// device-info-SPEC §4: where an attachment's device information comes
/// from and goes to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceInfoFiles {
    /// §4.2: the CNI file, unique to the attachment: the copy of the device
    /// plugin's, or what a plugin wrote (`CNIDeviceInfoFile`, §5.1); its
    /// content goes into network-status (§6.1.1); DEL removes it.
    pub cni: PathBuf,
    /// §4.1: the device plugin's file for the attachment's device, copied
    /// to `cni` before the chain runs (§4.2.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_plugin: Option<PathBuf>,
}

impl DeviceInfoFiles {
    /// The CNI file is one [`deviceinfo::cni_file`] could name
    /// ([`deviceinfo::check_cni_file`]). A record read back from disk is
    /// checked, since DEL removes the file.
    pub fn check(&self) -> Result<(), String> {
        deviceinfo::check_cni_file(&self.cni)
    }
}

impl Attachment {
    /// Its network-status entry (multi-net-spec §5) once added with
    /// `result`, with the device information collected after its chain
    /// (device-info-SPEC §6.1).
    pub fn network_status(
        &self,
        result: Option<&CniResult>,
        device_info: Option<&DeviceInfo>,
    ) -> NetworkStatus {
        let input = StatusInput {
            network: &self.network,
            ifname: Some(&self.ifname),
            default: self.default,
            gateway_request: self.default_route.as_deref(),
            device_info: device_info.cloned(),
        };
        NetworkStatus::from_result(result, &input)
    }

    /// Multus's auxiliary chain (`crate::plan::auxiliary::add_chain`), not a network.
    pub fn is_auxiliary(&self) -> bool {
        self.source.starts_with(AUXILIARY_SOURCE)
    }

    /// The plan's JSON contract (README "Plan output"); optional keys only when set.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("an attachment serializes")
    }
}

/// The plan output (README "Plan output"): this type's serde form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub attachments: Vec<Attachment>,
    pub warnings: Vec<String>,
    /// The attachments of devices of the pod's claims from plexus's DRA
    /// driver, whose claims' status the ADD writes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claimed: Vec<ClaimedAttachment>,
}

/// An attachment of a device of one of the pod's ResourceClaims: what the
/// claim's `status.devices[]` entry names (KEP-4817).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedAttachment {
    pub ifname: IfName,
    pub namespace: String,
    pub claim: String,
    pub pool: String,
    pub device: String,
}

impl Plan {
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a plan serializes")
    }
}
