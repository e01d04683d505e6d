//! `plexus status`: the network-status entry (multi-net-spec §5) a CNI
//! result yields, as the plugin would publish it.

use std::net::IpAddr;
use std::path::PathBuf;

use crate::cni::error::CniError;
use crate::cni::names::IfName;
use crate::cni::result::CniResult;
use crate::cni::version::CniVersion;
use crate::netattach::deviceinfo::DeviceInfo;
use crate::netattach::status::{NetworkStatus, StatusInput};

use super::{pretty, read_json};

#[derive(clap::Args)]
pub struct StatusArgs {
    /// A CNI ADD result (JSON, any version 0.1.0 – 1.1.0).
    #[arg(long, value_name = "FILE")]
    result: PathBuf,
    /// The network's name as the status shows it: `ns/name`, or the default network's name.
    #[arg(long, value_name = "NS/NAME")]
    network: String,
    /// CNI_IFNAME of the attachment (used for results older than 0.3.0).
    #[arg(long, value_name = "NAME")]
    ifname: Option<IfName>,
    /// The attachment is the cluster-wide default network.
    #[arg(long)]
    default: bool,
    /// The selection's `default-route` (multi-net-spec §5.3.7.4: the entry
    /// has one only then): its gateways, or none for `[]`, which reports the
    /// result's own default gateways.
    #[arg(long = "default-route", value_name = "IP", num_args = 0..)]
    default_route: Option<Vec<IpAddr>>,
    /// A device-info file (device-info spec) to include.
    #[arg(long, value_name = "FILE")]
    device_info: Option<PathBuf>,
    /// The result's version when the file has no cniVersion (an IPAM result).
    #[arg(long, value_name = "VERSION")]
    cni_version: Option<String>,
}

/// `plexus status`: the network-status entry, or the CNI error.
pub fn run(args: &StatusArgs) -> Result<String, CniError> {
    let value = read_json(&args.result)?;
    let origin = args.result.display().to_string();
    let result = match &args.cni_version {
        Some(v) => CniResult::from_value_as(&value, CniVersion::parse_field(v, "--cni-version")?),
        None => CniResult::from_value(&value),
    }
    .map_err(|e| e.within(origin.as_str()))?;
    // §5.3.8: only a map that is valid device information (device-info-SPEC
    // §3.1) may be published.
    let device_info = args
        .device_info
        .as_deref()
        .map(|path| {
            DeviceInfo::from_value(&read_json(path)?).map_err(|e| CniError {
                details: format!("--device-info {}: {}", path.display(), e.details),
                ..e
            })
        })
        .transpose()?;
    let input = StatusInput {
        network: &args.network,
        ifname: args.ifname.as_ref(),
        default: args.default,
        gateway_request: args.default_route.as_deref(),
        device_info,
    };
    Ok(pretty(
        &NetworkStatus::from_result(Some(&result), &input).to_value(),
    ))
}
