//! device-info files around an attachment (device-info-SPEC §4.2.1,
//! multi-net-spec §5.3.8, §6.1.1): the device plugin's copied to the
//! attachment's CNI file before its chain, what the chain left collected
//! after it, the file removed at DEL. All optional: a bad file is a warning.

use std::path::Path;

use super::error::RunError;
use crate::cni::error::CniError;
use crate::netattach::deviceinfo::{self, DeviceInfo};
use crate::plan::Attachment;

/// A device-info file's content, or `None` and, when the file was there
/// but could not be used, the warning saying why (device-info is optional,
/// multi-net-spec §5.3.8).
pub(super) type OptionalDeviceInfo = (Option<DeviceInfo>, Option<String>);

/// device-info-SPEC §4.2.1: the device plugin's information about the
/// attachment's device, read (and checked) before anything is added; `None`
/// when the device plugin wrote none, which device plugins may (§4.1.1).
/// A file that cannot be read or is invalid is the warning beside `None`:
/// the attachment goes on without device-info (multi-net-spec §5.3.8 makes
/// it optional; Multus's `CopyDeviceInfoForCNIFromDP` failing only logs).
pub(super) fn device_plugin_info(att: &Attachment) -> OptionalDeviceInfo {
    let Some(path) = att
        .device_info
        .as_ref()
        .and_then(|f| f.device_plugin.as_ref())
    else {
        return (None, None);
    };
    optional_device_info(att, deviceinfo::load(path))
}

/// A device-info file's content, or, when it cannot be read or is invalid,
/// none and the warning that says so and what follows.
pub(super) fn optional_device_info(
    att: &Attachment,
    loaded: Result<Option<DeviceInfo>, CniError>,
) -> OptionalDeviceInfo {
    match loaded {
        Ok(info) => (info, None),
        Err(e) => (
            None,
            Some(format!(
                "{} ({}): {}; the attachment goes on without device-info \
                 (multi-net-spec §5.3.8)",
                att.network, att.ifname, e.details
            )),
        ),
    }
}

/// §4.2.1: copy the device plugin's information to the attachment's CNI
/// file, where its plugins find it (§5.1.2).
pub(super) fn copy_device_plugin_info(
    att: &Attachment,
    info: Option<&DeviceInfo>,
) -> Result<(), RunError> {
    let (Some(info), Some(files)) = (info, &att.device_info) else {
        return Ok(());
    };
    deviceinfo::store(&files.cni, info).map_err(|e| cni_file_error(att, &files.cni, e))
}

/// A failure on the attachment's CNI device-info file, naming it.
pub(super) fn cni_file_error(att: &Attachment, path: &Path, e: std::io::Error) -> RunError {
    RunError::DeviceInfoFile {
        network: att.network.clone(),
        ifname: att.ifname.clone(),
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// §6.1.1: after the chain, what the attachment's CNI file holds; a file a
/// plugin left unreadable or invalid is a warning, as in
/// [`device_plugin_info`] (Multus's `getDelegateDeviceInfo` failing only
/// logs).
pub(super) fn collect_device_info(att: &Attachment) -> OptionalDeviceInfo {
    let Some(files) = &att.device_info else {
        return (None, None);
    };
    optional_device_info(att, deviceinfo::load(&files.cni))
}

/// §4.2.1: "When CNI DELETE action is called, the NPWG Implementation must
/// delete the CNI Plugin Device Information File"; once every plugin's DEL
/// succeeded, so a DEL retried still finds what its plugins may read.
pub(super) fn remove_device_info(att: &Attachment) -> Result<(), RunError> {
    let Some(files) = &att.device_info else {
        return Ok(());
    };
    deviceinfo::remove(&files.cni).map_err(|e| cni_file_error(att, &files.cni, e))
}
