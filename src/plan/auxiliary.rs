//! Multus's auxiliary CNI chain (`auxiliaryCNIChainName`), run as Multus runs
//! it (`CmdAdd` in multus-cni pkg/multus/multus.go, `loadSubdirectoryChain`
//! in pkg/k8sclient/k8sclient.go, docs/configuration.md):
//!
//! - The chain is a config list named after the key, `cniVersion` plexus's
//!   own, whose first plugin is `passthru` (it returns an empty result, the
//!   `prevResult` chained plugins such as `tuning` require), followed by the
//!   plugin configs `<dir>/<name>/*.conf` in file-name order (libcni's
//!   `NetworkPluginConfsFromFiles`). `<dir>` is the directory of
//!   `clusterNetwork` when that is a path, as in Multus; otherwise (a NAD, a
//!   conf-dir name, inline `delegates`, where Multus fails every ADD) `confDir`.
//! - It runs for every pod after all its networks, as one more attachment
//!   with `CNI_IFNAME` `net<position>` (Multus's name for a delegate without
//!   an interface request), the pod's `CNI_ARGS` without `IP`/`MAC`, and no
//!   capability arguments. It is in plexus's record, so DEL (first, as the
//!   newest attachment) and GC run it even after a crash. Multus's CHECK
//!   never runs it, so neither does plexus's; it is no network of the pod, so
//!   it has no network-status entry.
//! - No subdirectory, or one without `.conf` files: nothing runs, as in
//!   Multus (whose chain's own installer pod needs networking before the
//!   files exist); plexus says so on stderr. A file that does not parse fails
//!   the ADD naming the key and the file, where Multus would silently run no
//!   chain at all. ([`crate::conf_files::auxiliary`] reads those files.)

use serde_json::Map;

use super::{requests, secondary_cni_args, PlanError, PlanOptions};
use crate::attachment::{net_n, Attachment, Plan, AUXILIARY_SOURCE};
use crate::cni::config::NetworkConfigList;
use crate::cni::names::IfName;
use crate::netattach::pod::Pod;

/// The chain's first plugin, built in (Multus ships it as a binary).
pub const PASSTHRU: &str = "passthru";

/// Multus's auxiliary chain (see [`crate::plan::auxiliary`]) as the last
/// attachment of `plan`: `CNI_IFNAME` `net<position>` (the first such name
/// no attachment uses), the secondary networks' `CNI_ARGS`, no capability
/// arguments, and never CHECKed, as Multus never CHECKs it.
pub fn add_chain(
    plan: &mut Plan,
    chain: &NetworkConfigList,
    pod: &Pod,
    options: &PlanOptions,
) -> Result<(), PlanError> {
    let network = chain.name.clone().unwrap_or_default();
    let plugins = requests(chain, &network, &Map::new(), None)
        .map_err(|e| e.within(format!("auxiliaryCNIChainName {network:?}")))?;
    let used = |name: &IfName| plan.attachments.iter().any(|a| a.ifname == *name);
    let ifname = (plan.attachments.len()..)
        .map(net_n)
        .find(|n| !used(n))
        .expect("an unbounded range always has a free name");
    plan.attachments.push(Attachment {
        source: format!("{AUXILIARY_SOURCE} {network:?}"),
        network,
        ifname,
        default: false,
        cni_args: secondary_cni_args(pod, options),
        plugins,
        default_route: None,
        clear_default_route: false,
        ipam_claim_reference: None,
        disable_check: true,
        device_info: None,
    });
    Ok(())
}
