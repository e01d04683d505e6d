//! device-info-SPEC §5.1.2 for the built-in drivers: a driver that knows
//! its device (a VF, a vDPA device) describes it, and the description goes
//! to the attachment's CNI device-info file, `runtimeConfig.CNIDeviceInfoFile`,
//! which the executor puts in the pod's network-status (§6.1.1).

use crate::drivers::error::{sys_error, DriverError};
use std::path::Path;

use plexus_cni::deviceinfo::{self, DeviceInfo};
use plexus_cni::skel::Request;
use serde_json::Value;

/// Where this attachment's device-info goes: `runtimeConfig.CNIDeviceInfoFile`,
/// or `None` when the runtime gave none.
fn file(req: &Request) -> Result<Option<&Path>, DriverError> {
    let field = || format!("runtimeConfig.{}", deviceinfo::FILE_CAPABILITY);
    match req.runtime_config.get(deviceinfo::FILE_CAPABILITY) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => deviceinfo::check_cni_file(Path::new(s))
            .map(|()| Some(Path::new(s)))
            .map_err(|reason| DriverError::config(field(), reason)),
        Some(other) => Err(DriverError::config(
            field(),
            format!("must be a string, got {other}"),
        )),
    }
}

/// Write `info` to the attachment's device-info file unless there already
/// is one: a copy of the device plugin's file (§4.2.1), which describes the
/// device as the pod was promised it, is kept as it is.
pub(crate) fn publish(req: &Request, info: &DeviceInfo) -> Result<(), DriverError> {
    let Some(path) = file(req)? else {
        return Ok(());
    };
    if path.exists() {
        return Ok(());
    }
    deviceinfo::store(path, info)
        .map_err(|e| sys_error(format!("device-info file {}", path.display()), e))
}

/// Check the `runtimeConfig.CNIDeviceInfoFile` value without writing.
pub(crate) fn validate(req: &Request) -> Result<(), DriverError> {
    file(req).map(drop)
}
