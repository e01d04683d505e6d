//! Where an attachment's device information goes (device-info-SPEC §4.2,
//! §5.1): its CNI device-info file, offered to the plugins that take it, and
//! the device plugin's file to copy.

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::inputs::PlanOptions;
use crate::attachment::DeviceInfoFiles;
use crate::netattach::deviceinfo;

/// device-info-SPEC §4.2: the attachment's CNI device-info file, unique to
/// it; `None` without a container ID (`plexus plan` off a runtime call).
pub(super) fn cni_device_info_file(
    network: &str,
    ifname: &str,
    options: &PlanOptions,
) -> Option<PathBuf> {
    let container_id = options.container_id.as_deref()?;
    Some(deviceinfo::cni_file(
        &options.policy.device_info_dir,
        network,
        container_id,
        ifname,
    ))
}

/// device-info-SPEC §5.1.1: the file for the plugins that declare the
/// `CNIDeviceInfoFile` capability.
pub(super) fn offer_device_info_file(capability_args: &mut Map<String, Value>, cni: Option<&Path>) {
    if let Some(cni) = cni {
        capability_args.insert(
            deviceinfo::FILE_CAPABILITY.into(),
            cni.display().to_string().into(),
        );
    }
}

/// The attachment's device-info files, when it has any: a device plugin's
/// file to copy (§4.2.1) or a plugin that takes the CNI file, which the
/// built-in drivers that describe their device always do
/// ([`plexus_dataplane::drivers::describes_device`]). Without either the
/// attachment has no device information and costs no file I/O.
pub(super) fn device_info_files(
    cni: Option<PathBuf>,
    plugins: &mut [Map<String, Value>],
    device_plugin: Option<PathBuf>,
) -> Option<DeviceInfoFiles> {
    let path = cni.as_ref().map(|c| Value::from(c.display().to_string()));
    let mut taken = false;
    for plugin in plugins.iter_mut() {
        let describes = plugin
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(plexus_dataplane::drivers::describes_device);
        if describes {
            // The path is plexus's to give: one a NAD's own runtimeConfig
            // names would have the driver write a file anywhere on the node.
            match &path {
                Some(p) => {
                    let rc = plugin.entry("runtimeConfig").or_insert_with(|| json!({}));
                    if let Some(rc) = rc.as_object_mut() {
                        rc.insert(deviceinfo::FILE_CAPABILITY.into(), p.clone());
                    }
                }
                None => {
                    if let Some(Value::Object(rc)) = plugin.get_mut("runtimeConfig") {
                        rc.remove(deviceinfo::FILE_CAPABILITY);
                    }
                }
            }
        }
        taken |= plugin
            .get("runtimeConfig")
            .and_then(|rc| rc.get(deviceinfo::FILE_CAPABILITY))
            .is_some();
    }
    let cni = cni?;
    (taken || device_plugin.is_some()).then_some(DeviceInfoFiles { cni, device_plugin })
}
