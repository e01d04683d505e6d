//! The `tuning` chained plugin: network sysctls and link settings of the
//! pod's interface, behaving as the reference plugin
//! (containernetworking/plugins `plugins/meta/tuning`) does.
//!
//! # Configuration
//!
//! | key | meaning |
//! |---|---|
//! | `sysctl` | map of `net.*` sysctl → value (strings), written in the pod's namespace; an `IFNAME` component stands for `CNI_IFNAME` ([`crate::sysctl`]) |
//! | `mac` | MAC address of `CNI_IFNAME` |
//! | `promisc` | `true` turns promiscuous mode on (`false` does nothing) |
//! | `mtu` | MTU (0: unchanged) |
//! | `txQLen` | transmit queue length |
//! | `allmulti` | all-multicast mode on or off |
//! | `dataDir` | where the original values are saved (default [`DEFAULT_DATA_DIR`]) |
//!
//! The MAC may also come from `CNI_ARGS` (`MAC=`), the `mac` capability
//! (`runtimeConfig.mac`) and `args.cni.mac`; each later one in that list
//! wins over the earlier ones and over `mac`. `args.cni` may also carry
//! `sysctl` (merged over `sysctl`, key by key), `promisc`, `mtu`,
//! `allmulti` and `txQLen`, each overriding the top-level key.
//!
//! # What is saved, and restored on DEL
//!
//! Before changing the link, ADD saves the original MAC, promiscuous mode,
//! MTU, all-multicast mode and transmit queue length (only those it is about
//! to change) in `<dataDir>/<containerID>_<ifname>.json`, the reference's
//! file and format (so either implementation can undo the other's ADD).
//! DEL restores them (MTU first, then MAC, promisc, allmulti, txQLen, as the
//! reference) and removes the file. Sysctls are not restored on DEL, as in
//! the reference: they live in the pod's namespace, which goes away with the
//! pod.
//!
//! # Differences from the reference, all on failure paths
//!
//! - Every key and value is validated before anything changes (sysctl keys,
//!   the MAC, and that each sysctl exists in the pod's namespace).
//! - A failure half-way through ADD restores what was already changed,
//!   sysctls included, and removes the saved file.
//! - A repeated ADD keeps the originals saved by the first one.
//! - DEL succeeds without a saved file, without a namespace and without the
//!   interface, and then removes the saved file (the reference leaves it
//!   behind); a restore that fails is reported (the reference ignores it)
//!   and the file is kept so that a retried DEL can finish.
//! - CHECK substitutes `IFNAME` in sysctl keys (v1.1 compares the
//!   unsubstituted path) and compares MACs case-insensitively.

use crate::drivers::error::{mismatch, sys, DriverError};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use plexus_cni::casefold;
use plexus_cni::names::IfName;
use plexus_cni::skel::{Request, TypedPlugin};
use plexus_cni::CniResult;

use super::attachment::{chained_prev_result as prev_result, Attach};
use super::undo::Undo;
use crate::mac::MacAddr;
use crate::netlink::{Link, Netlink};
use crate::session::Session;
use crate::sysctl::{self, SysctlKey};

/// Where the reference plugin saves original values (`dataDir` default).
pub const DEFAULT_DATA_DIR: &str = "/run/cni/tuning";

const PLUGIN: &str = "tuning";

/// The tuning plugin. `data_dir` is used when the configuration has no
/// `dataDir`.
#[derive(Debug, Clone)]
pub struct Tuning<'s> {
    pub data_dir: PathBuf,
    session: &'s Session,
}

impl<'s> Tuning<'s> {
    pub fn new(session: &'s Session) -> Self {
        Tuning {
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            session,
        }
    }
}

/// The file the original values of `ifname` in container `container_id` are
/// saved in.
pub fn saved_path(data_dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    data_dir.join(format!("{container_id}_{ifname}.json"))
}

// ---------------------------------------------------------------------------
// Configuration

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Conf {
    data_dir: Option<String>,
    sysctl: Option<Map<String, Value>>,
    mac: Option<String>,
    promisc: Option<bool>,
    mtu: Option<u32>,
    #[serde(rename = "txQLen")]
    tx_qlen: Option<u32>,
    allmulti: Option<bool>,
    args: Option<ArgsConf>,
}

/// `args.cni`: per-attachment overrides of the same keys (its `dataDir`
/// and `args`, which the reference does not read there, are ignored).
#[derive(Debug, Default, Deserialize)]
struct ArgsConf {
    cni: Option<Box<Conf>>,
}

/// One sysctl to write: the key as written (for messages), resolved.
#[derive(Debug, Clone)]
struct Sysctl {
    field: String,
    key: SysctlKey,
    value: String,
}

/// The effective settings of one invocation, validated.
#[derive(Debug, Clone)]
struct Settings {
    data_dir: PathBuf,
    sysctls: Vec<Sysctl>,
    /// The MAC and the field it came from.
    mac: Option<(MacAddr, String)>,
    promisc: bool,
    mtu: Option<u32>,
    allmulti: Option<bool>,
    tx_qlen: Option<u32>,
}

impl Settings {
    /// Whether any link setting (as opposed to sysctls) is configured: only
    /// then are originals saved.
    fn changes_link(&self) -> bool {
        self.mac.is_some()
            || self.promisc
            || self.mtu.is_some()
            || self.allmulti.is_some()
            || self.tx_qlen.is_some()
    }

    /// The link changes, in the order the reference applies them.
    fn changes(&self) -> Vec<Change> {
        let mut out = Vec::new();
        if let Some((mac, _)) = self.mac {
            out.push(Change::Mac(mac));
        }
        if self.promisc {
            out.push(Change::Promisc(true));
        }
        out.extend(self.mtu.map(Change::Mtu));
        out.extend(self.allmulti.map(Change::Allmulti));
        out.extend(self.tx_qlen.map(Change::TxQLen));
        out
    }
}

/// Decodes the plugin's keys (types only, no semantic checks): what DEL
/// needs.
fn decode(req: &Request) -> Result<Conf, DriverError> {
    casefold::decode(&Value::Object(req.config.clone())).map_err(DriverError::from)
}

/// Decodes and validates everything the configuration, runtimeConfig and
/// CNI_ARGS say. `ifname` resolves `IFNAME` in sysctl keys.
fn settings(
    req: &Request,
    conf: Conf,
    default_dir: &Path,
    ifname: Option<&IfName>,
) -> Result<Settings, DriverError> {
    req.env.args().check_known(&["MAC"])?;
    let cni_args = conf.args.and_then(|a| a.cni).unwrap_or_default();

    // MAC: config < CNI_ARGS < runtimeConfig < args.cni, as the reference.
    let mut mac: Option<(String, String)> = None;
    let mut offer = |value: Option<&str>, field: &str| {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            mac = Some((v.to_string(), field.to_string()));
        }
    };
    offer(conf.mac.as_deref(), "mac");
    offer(req.env.args().get("MAC"), "CNI_ARGS MAC");
    let runtime_mac = match req.runtime_config.get("mac") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(other) => {
            return Err(DriverError::config(
                "runtimeConfig.mac",
                format!("must be a string, got {other}"),
            ))
        }
    };
    offer(runtime_mac, "runtimeConfig.mac");
    if let Some(m) = &cni_args.mac {
        // A present args.cni.mac wins even when empty (then: no MAC).
        mac = Some((m.clone(), "args.cni.mac".into())).filter(|(m, _)| !m.is_empty());
    }
    let mac = mac
        .map(|(text, field)| {
            let parsed: MacAddr = text
                .parse()
                .map_err(|e: crate::Error| DriverError::config(&field, e.to_string()))?;
            if parsed.is_multicast() {
                return Err(DriverError::config(
                    &field,
                    format!("{text:?} is a multicast address, which an interface cannot have"),
                ));
            }
            Ok((parsed, field))
        })
        .transpose()?;

    // Sysctls: args.cni.sysctl overrides the configuration key by key.
    let mut raw: Vec<(String, String, String)> = Vec::new();
    for (prefix, map) in [
        ("sysctl", &conf.sysctl),
        ("args.cni.sysctl", &cni_args.sysctl),
    ] {
        for (key, value) in map.iter().flatten() {
            let field = format!("{prefix}[{key:?}]");
            let Value::String(value) = value else {
                return Err(DriverError::config(
                    field,
                    format!("must be a string, got {value}"),
                ));
            };
            match raw.iter_mut().find(|(k, _, _)| k == key) {
                Some(entry) => *entry = (key.clone(), field, value.clone()),
                None => raw.push((key.clone(), field, value.clone())),
            }
        }
    }
    let sysctls = raw
        .into_iter()
        .map(|(key, field, value)| {
            let resolved = match ifname {
                Some(ifname) => SysctlKey::for_interface(&key, ifname),
                None => SysctlKey::for_any_interface(&key),
            };
            let resolved = resolved.map_err(|e| {
                DriverError::config(
                    &field,
                    format!("{e} (tuning only sets net.* sysctls of the pod's namespace)"),
                )
            })?;
            if value.contains('\0') {
                return Err(DriverError::config(&field, "the value contains NUL"));
            }
            Ok(Sysctl {
                field,
                key: resolved,
                value,
            })
        })
        .collect::<Result<_, DriverError>>()?;

    let data_dir = conf
        .data_dir
        .filter(|d| !d.is_empty())
        .map_or_else(|| default_dir.to_path_buf(), PathBuf::from);
    Ok(Settings {
        data_dir,
        sysctls,
        mac,
        promisc: cni_args.promisc.or(conf.promisc).unwrap_or(false),
        mtu: cni_args.mtu.or(conf.mtu).filter(|m| *m != 0),
        allmulti: cni_args.allmulti.or(conf.allmulti),
        tx_qlen: cni_args.tx_qlen.or(conf.tx_qlen),
    })
}

// ---------------------------------------------------------------------------
// Link changes and the saved originals

/// One link setting to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Mac(MacAddr),
    Promisc(bool),
    Mtu(u32),
    Allmulti(bool),
    TxQLen(u32),
}

impl Change {
    /// The configuration key, for messages.
    fn field(self) -> &'static str {
        match self {
            Change::Mac(_) => "mac",
            Change::Promisc(_) => "promisc",
            Change::Mtu(_) => "mtu",
            Change::Allmulti(_) => "allmulti",
            Change::TxQLen(_) => "txQLen",
        }
    }

    fn apply(self, nl: &Netlink, index: u32) -> crate::Result<()> {
        match self {
            Change::Mac(m) => nl.set_mac(index, m),
            Change::Promisc(on) => nl.set_promisc(index, on),
            Change::Mtu(m) => nl.set_mtu(index, m),
            Change::Allmulti(on) => nl.set_allmulti(index, on),
            Change::TxQLen(q) => nl.set_txqueuelen(index, q),
        }
    }

    /// Whether `link` already has this setting.
    fn holds(self, link: &Link) -> bool {
        match self {
            Change::Mac(m) => link.mac == Some(m),
            Change::Promisc(on) => link.promisc == on,
            Change::Mtu(m) => link.mtu == m,
            Change::Allmulti(on) => link.allmulti == on,
            Change::TxQLen(q) => link.txqueuelen == q,
        }
    }

    fn describe(self) -> String {
        match self {
            Change::Mac(m) => m.to_string(),
            Change::Promisc(on) | Change::Allmulti(on) => on.to_string(),
            Change::Mtu(v) | Change::TxQLen(v) => v.to_string(),
        }
    }
}

fn describe_current(change: Change, link: &Link) -> String {
    match change {
        Change::Mac(_) => link.mac.map_or_else(|| "no MAC".into(), |m| m.to_string()),
        Change::Promisc(_) => link.promisc.to_string(),
        Change::Mtu(_) => link.mtu.to_string(),
        Change::Allmulti(_) => link.allmulti.to_string(),
        Change::TxQLen(_) => link.txqueuelen.to_string(),
    }
}

/// The saved originals: the reference's `configToRestore`, field for field
/// (empty MAC and zero MTU mean "not saved", as Go's `omitempty` writes).
#[serde_with::skip_serializing_none]
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Saved {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    mac: String,
    #[serde(default)]
    promisc: Option<bool>,
    #[serde(default, skip_serializing_if = "is_zero")]
    mtu: u32,
    #[serde(default)]
    allmulti: Option<bool>,
    #[serde(default, rename = "txQLen")]
    tx_qlen: Option<u32>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Saved {
    /// The current values of what `changes` will change.
    fn from_link(link: &Link, changes: &[Change]) -> Saved {
        let mut s = Saved::default();
        for c in changes {
            match c {
                Change::Mac(_) => s.mac = link.mac.map(|m| m.to_string()).unwrap_or_default(),
                Change::Promisc(_) => s.promisc = Some(link.promisc),
                Change::Mtu(_) => s.mtu = link.mtu,
                Change::Allmulti(_) => s.allmulti = Some(link.allmulti),
                Change::TxQLen(_) => s.tx_qlen = Some(link.txqueuelen),
            }
        }
        s
    }

    /// `self` with the fields `older` saved taken from `older`: a repeated
    /// ADD must not replace the true originals with its own earlier values.
    fn under(self, older: Saved) -> Saved {
        Saved {
            mac: if older.mac.is_empty() {
                self.mac
            } else {
                older.mac
            },
            promisc: older.promisc.or(self.promisc),
            mtu: if older.mtu == 0 { self.mtu } else { older.mtu },
            allmulti: older.allmulti.or(self.allmulti),
            tx_qlen: older.tx_qlen.or(self.tx_qlen),
        }
    }

    /// The changes that restore the originals, in the reference's DEL order
    /// (MTU first: a MAC change can depend on nothing, an MTU can be
    /// limited by it).
    fn restores(&self) -> Result<Vec<Change>, String> {
        let mut out = Vec::new();
        if self.mtu != 0 {
            out.push(Change::Mtu(self.mtu));
        }
        if !self.mac.is_empty() {
            let mac = self
                .mac
                .parse()
                .map_err(|e: crate::Error| format!("saved mac: {e}"))?;
            out.push(Change::Mac(mac));
        }
        out.extend(self.promisc.map(Change::Promisc));
        out.extend(self.allmulti.map(Change::Allmulti));
        out.extend(self.tx_qlen.map(Change::TxQLen));
        Ok(out)
    }

    /// The file content: Go's `json.MarshalIndent(v, "", " ")`.
    fn to_bytes(&self) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(
            &mut buf,
            serde_json::ser::PrettyFormatter::with_indent(b" "),
        );
        self.serialize(&mut ser).expect("plain struct serialises");
        buf
    }

    fn from_bytes(bytes: &[u8]) -> Option<Saved> {
        let v: Value = serde_json::from_slice(bytes).ok()?;
        casefold::from_value(&v).ok()
    }
}

fn read_saved(path: &Path) -> Result<Option<Vec<u8>>, DriverError> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(DriverError::io(path, e)),
    }
}

fn remove_saved(path: &Path) -> Result<(), DriverError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(DriverError::io(path, e)),
    }
}

// ---------------------------------------------------------------------------
// The plugin

impl Tuning<'_> {
    fn settings_for(&self, req: &Request) -> Result<Settings, DriverError> {
        // Without an interface (validation before the attachment is known)
        // `IFNAME` stands for itself.
        settings(req, decode(req)?, &self.data_dir, req.env.ifname())
    }

    /// Apply `s` to the pod, each step registered in `undo`: the sysctls,
    /// then the link's changes, in the reference's order. As in the
    /// reference, only link changes need `CNI_IFNAME` to exist: a
    /// sysctl-only tuning also runs where it names no interface (Multus's
    /// auxiliary chain gives it `net<n>`, see plexus's `auxiliary`).
    fn apply<'a>(
        &self,
        s: &'a Settings,
        at: &'a Attach<'a>,
        path: &'a Path,
        undo: &mut Undo<'a>,
    ) -> Result<(), DriverError> {
        let keys: Vec<SysctlKey> = s.sysctls.iter().map(|x| x.key.clone()).collect();
        // Read every sysctl first: a key that does not exist fails here,
        // before anything changed, and the values allow undoing a failure.
        let originals = sysctl::read_all(at.pod_ns, &keys).map_err(|e| {
            if e.errno() == Some(crate::Errno::ENOENT) {
                DriverError::config("sysctl", e.to_string())
            } else {
                sys("sysctl")(e)
            }
        })?;
        let link = if s.changes_link() {
            Some(at.existing_pod_link()?)
        } else {
            None
        };
        let writes: Vec<(SysctlKey, String)> = s
            .sysctls
            .iter()
            .map(|x| (x.key.clone(), x.value.clone()))
            .collect();
        let ns = at.pod_ns;
        let originals: Vec<(SysctlKey, String)> = keys.into_iter().zip(originals).collect();
        if !originals.is_empty() {
            undo.push("sysctls", move || {
                sysctl::write_all(ns, &originals).map_err(sys("restoring sysctls"))
            });
        }
        sysctl::write_all(ns, &writes).map_err(sys("sysctl"))?;
        match link {
            Some(link) => self.change_link(s, at, &link, path, undo),
            None => Ok(()),
        }
    }

    /// Apply the link changes of `s` to `link`, saving its original values
    /// first (DEL restores them).
    fn change_link<'a>(
        &self,
        s: &'a Settings,
        at: &'a Attach<'a>,
        link: &Link,
        path: &'a Path,
        undo: &mut Undo<'a>,
    ) -> Result<(), DriverError> {
        let changes = s.changes();
        let saved_before = read_saved(path)?;
        // Undoing restores the values from before this ADD; the file keeps
        // the originals from before the first one.
        let current = Saved::from_link(link, &changes);
        let saved = match saved_before.as_deref().and_then(Saved::from_bytes) {
            Some(older) => current.clone().under(older),
            None => current.clone(),
        };
        plexus_cni::whole_file::replace_durably(path, &saved.to_bytes()).map_err(|e| {
            DriverError::Io {
                what: format!("saving the original values in {}", path.display()),
                reason: e.to_string(),
            }
        })?;
        undo.push(
            format!("saving {}", path.display()),
            move || match saved_before {
                Some(bytes) => plexus_cni::whole_file::replace_durably(path, &bytes)
                    .map_err(|e| DriverError::io(path, e)),
                None => remove_saved(path),
            },
        );
        let (nl, index) = (at.pod, link.index);
        let restores = current.restores().unwrap_or_default();
        for c in changes {
            // The original value of this field, put back if the ADD fails.
            if let Some(r) = restores.iter().copied().find(|r| r.field() == c.field()) {
                undo.push(c.field(), move || {
                    r.apply(nl, index)
                        .map_err(sys(format_args!("restoring {}", r.field())))
                });
            }
            if let Err(e) = c.apply(nl, index) {
                let field = match (c, &s.mac) {
                    (Change::Mac(_), Some((_, from))) => from.clone(),
                    _ => c.field().to_string(),
                };
                return Err(sys(format_args!(
                    "{field}: setting {} on {}",
                    c.describe(),
                    link.name
                ))(e));
            }
        }
        Ok(())
    }
}

/// prevResult with the MAC of the pod's interface replaced (cni-SPEC,
/// "Appendix: Examples": tuning changes only `interfaces[].mac`). The
/// interface is found by name, preferring one inside a sandbox.
fn with_mac(prev: &CniResult, ifname: &str, mac: MacAddr) -> CniResult {
    let mut out = prev.clone();
    let sandboxed = out
        .interfaces
        .iter()
        .any(|i| i.name == ifname && i.in_sandbox());
    for i in &mut out.interfaces {
        if i.name == ifname && (i.in_sandbox() || !sandboxed) {
            i.mac = Some(mac.to_string());
        }
    }
    out
}

impl TypedPlugin for Tuning<'_> {
    type Error = DriverError;

    fn validate(&self, req: &Request) -> Result<(), DriverError> {
        self.settings_for(req).map(drop)
    }

    fn add(&self, req: &Request) -> Result<CniResult, DriverError> {
        let s = self.settings_for(req)?;
        let prev = prev_result(req, PLUGIN)?;
        let at = Attach::open(self.session, req)?;
        let (cid, ifname) = (&req.env.require_attachment()?.container_id, &at.ifname);
        let path = saved_path(&s.data_dir, cid, ifname);
        let mut undo = Undo::default();
        let applied = self.apply(&s, &at, &path, &mut undo);
        undo.finish(applied)?;
        Ok(match s.mac {
            Some((mac, _)) => with_mac(prev, ifname, mac),
            None => prev.clone(),
        })
    }

    fn del(&self, req: &Request) -> Result<(), DriverError> {
        let conf = decode(req)?;
        let data_dir = conf
            .data_dir
            .filter(|d| !d.is_empty())
            .map_or_else(|| self.data_dir.clone(), PathBuf::from);
        let params = req.env.require_attachment()?;
        let (cid, ifname) = (&params.container_id, &params.ifname);
        let path = saved_path(&data_dir, cid, ifname);
        let Some(bytes) = read_saved(&path)? else {
            return Ok(());
        };
        // A file that can't be read back can't be acted on, now or later.
        let Some(restores) = Saved::from_bytes(&bytes).and_then(|s| s.restores().ok()) else {
            return remove_saved(&path);
        };
        let Some(at) = Attach::open_for_del(self.session, req)? else {
            return remove_saved(&path);
        };
        let nl = at.pod;
        let Some(link) = nl
            .link_by_name(ifname)
            .map_err(sys(format_args!("CNI_IFNAME {ifname}")))?
        else {
            return remove_saved(&path);
        };
        let problems: Vec<String> = restores
            .into_iter()
            .filter_map(|c| {
                c.apply(nl, link.index)
                    .err()
                    .map(|e| format!("{}: {e}", c.field()))
            })
            .collect();
        if !problems.is_empty() {
            return Err(DriverError::RestoreFailed {
                ifname: ifname.clone(),
                path: path.display().to_string(),
                problems,
            });
        }
        remove_saved(&path)
    }

    fn check(&self, req: &Request) -> Result<(), DriverError> {
        let s = self.settings_for(req)?;
        prev_result(req, PLUGIN)?;
        let at = Attach::open(self.session, req)?;
        let ifname = &at.ifname;
        let keys: Vec<SysctlKey> = s.sysctls.iter().map(|x| x.key.clone()).collect();
        let current = sysctl::read_all(at.pod_ns, &keys).map_err(sys("sysctl"))?;
        for (x, now) in s.sysctls.iter().zip(current) {
            if now != x.value {
                return Err(mismatch(
                    &x.field,
                    format!(
                        "is {now:?} in the pod's namespace, the configuration says {:?}",
                        x.value
                    ),
                ));
            }
        }
        let link = at.existing_pod_link()?;
        let mut wanted = s.changes();
        // The reference also checks that promiscuous mode is off when the
        // configuration does not ask for it.
        if !s.promisc {
            wanted.push(Change::Promisc(false));
        }
        for c in wanted {
            if !c.holds(&link) {
                let field = match (c, &s.mac) {
                    (Change::Mac(_), Some((_, from))) => from.clone(),
                    _ => c.field().to_string(),
                };
                return Err(mismatch(
                    field,
                    format!(
                        "{ifname} has {}, the configuration says {}",
                        describe_current(c, &link),
                        c.describe()
                    ),
                ));
            }
        }
        Ok(())
    }

    // GC and STATUS are the trait's no-ops. Nothing to collect: saved files
    // are removed by DEL, and the data directory is shared by every network,
    // so a file can't be told stale from this network's valid attachments
    // alone.
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(config: Value, args: &str) -> Request {
        super::super::test_support::unit_test_request(config, args)
    }

    fn settings_of(config: Value, args: &str) -> Result<Settings, DriverError> {
        let session = Session::new();
        let tuning = Tuning {
            data_dir: "/d".into(),
            ..Tuning::new(&session)
        };
        tuning.settings_for(&request(config, args))
    }

    /// The refusal of `config`: a configuration error about `key`; its
    /// reason.
    fn refused(config: Value, key: &str) -> String {
        super::super::test_support::unit_test_refused(settings_of(config.clone(), ""), &config, key)
    }

    #[test]
    fn mac_precedence_is_the_references() {
        let base = json!({"cniVersion": "1.0.0", "mac": "02:00:00:00:00:01"});
        let mac = |s: &Settings| s.mac.as_ref().map(|(m, f)| (m.to_string(), f.clone()));
        let s = settings_of(base.clone(), "").unwrap();
        assert_eq!(mac(&s), Some(("02:00:00:00:00:01".into(), "mac".into())));
        let s = settings_of(base.clone(), "IgnoreUnknown=1;MAC=02:00:00:00:00:02").unwrap();
        assert_eq!(mac(&s).unwrap().1, "CNI_ARGS MAC");
        let mut c = base.clone();
        c["runtimeConfig"] = json!({"mac": "02:00:00:00:00:03"});
        let s = settings_of(c.clone(), "MAC=02:00:00:00:00:02").unwrap();
        assert_eq!(
            mac(&s),
            Some(("02:00:00:00:00:03".into(), "runtimeConfig.mac".into()))
        );
        c["args"] = json!({"cni": {"mac": "02:00:00:00:00:04"}});
        let s = settings_of(c.clone(), "").unwrap();
        assert_eq!(mac(&s).unwrap().1, "args.cni.mac");
        // An empty args.cni.mac clears it, as the reference's pointer does.
        c["args"] = json!({"cni": {"mac": ""}});
        assert!(settings_of(c, "").unwrap().mac.is_none());
    }

    #[test]
    fn bad_macs_name_their_source() {
        let d = refused(json!({"mac": "zz"}), "mac");
        assert!(d.starts_with("invalid MAC address"), "{d}");
        let d = refused(
            json!({"runtimeConfig": {"mac": "01:00:5e:00:00:01"}}),
            "runtimeConfig.mac",
        );
        assert!(d.starts_with("\"01:00:5e:00:00:01\" is a multicast"), "{d}");
        let d = refused(json!({"runtimeConfig": {"mac": 5}}), "runtimeConfig.mac");
        assert_eq!(d, "must be a string, got 5");
        // CNI_ARGS is the protocol crate's to parse (code 4).
        let e = settings_of(json!({}), "MAC=02:00:00:00:00:01;FOO=1").unwrap_err();
        assert!(
            matches!(&e, DriverError::Cni(e) if e.details.starts_with("CNI_ARGS: unknown argument \"FOO\"")),
            "{e:?}"
        );
    }

    #[test]
    fn sysctls_are_validated_and_merged() {
        let s = settings_of(
            json!({"sysctl": {"net.ipv4.conf.IFNAME.rp_filter": "1", "net.core.somaxconn": "5"},
                   "args": {"cni": {"sysctl": {"net.core.somaxconn": "7", "net.ipv4.ip_forward": "1"}}}}),
            "",
        )
        .unwrap();
        let got: Vec<(String, String, String)> = s
            .sysctls
            .iter()
            .map(|x| (x.field.clone(), x.key.to_string(), x.value.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "sysctl[\"net.ipv4.conf.IFNAME.rp_filter\"]".into(),
                    "net.ipv4.conf.eth0.rp_filter".into(),
                    "1".into()
                ),
                (
                    "args.cni.sysctl[\"net.core.somaxconn\"]".into(),
                    "net.core.somaxconn".into(),
                    "7".into()
                ),
                (
                    "args.cni.sysctl[\"net.ipv4.ip_forward\"]".into(),
                    "net.ipv4.ip_forward".into(),
                    "1".into()
                ),
            ]
        );
        let d = refused(
            json!({"sysctl": {"kernel.hostname": "x"}}),
            "sysctl[\"kernel.hostname\"]",
        );
        assert!(d.starts_with("invalid sysctl key"), "{d}");
        assert!(d.contains("only keys under net"), "{d}");
        refused(
            json!({"sysctl": {"net/../kernel/x": "1"}}),
            "sysctl[\"net/../kernel/x\"]",
        );
        let d = refused(
            json!({"sysctl": {"net.core.somaxconn": 5}}),
            "sysctl[\"net.core.somaxconn\"]",
        );
        assert_eq!(d, "must be a string, got 5");
    }

    #[test]
    fn wrong_types_name_the_key() {
        let d = refused(json!({"mtu": "1400"}), "mtu");
        assert!(d.starts_with("invalid type: string"), "{d}");
        let d = refused(json!({"promisc": 1}), "promisc");
        assert!(d.starts_with("invalid type"), "{d}");
        let d = refused(json!({"args": {"cni": {"txQLen": -1}}}), "args.cni.txQLen");
        assert!(d.starts_with("invalid value"), "{d}");
        // Go decodes keys case-insensitively; unknown keys are ignored.
        let s = settings_of(json!({"MTU": 1400, "TxQlen": 0, "whatever": [1]}), "").unwrap();
        assert_eq!((s.mtu, s.tx_qlen), (Some(1400), Some(0)));
    }

    #[test]
    fn overrides_and_defaults() {
        let s = settings_of(
            json!({"promisc": true, "mtu": 1400, "allmulti": true, "dataDir": "/x",
                   "args": {"cni": {"promisc": false, "mtu": 0, "allmulti": false, "txQLen": 9}}}),
            "",
        )
        .unwrap();
        assert!(!s.promisc);
        assert_eq!(s.mtu, None, "args.cni.mtu 0 means unset");
        assert_eq!(s.allmulti, Some(false));
        assert_eq!(s.tx_qlen, Some(9));
        assert_eq!(s.data_dir, PathBuf::from("/x"));
        assert_eq!(
            settings_of(json!({}), "").unwrap().data_dir,
            PathBuf::from("/d")
        );
        assert!(!settings_of(json!({"sysctl": {"net.a": "1"}}), "")
            .unwrap()
            .changes_link());
    }

    #[test]
    fn saved_file_is_the_references_format() {
        let s = Saved {
            mac: "ca:90:6a:5f:37:a8".into(),
            promisc: Some(false),
            mtu: 1500,
            allmulti: Some(false),
            tx_qlen: None,
        };
        // What tuning v1.1.1 wrote for the same originals.
        let reference = "{\n \"mac\": \"ca:90:6a:5f:37:a8\",\n \"promisc\": false,\n \"mtu\": 1500,\n \"allmulti\": false\n}";
        assert_eq!(String::from_utf8(s.to_bytes()).unwrap(), reference);
        assert_eq!(Saved::from_bytes(reference.as_bytes()), Some(s.clone()));
        assert_eq!(
            s.restores().unwrap(),
            vec![
                Change::Mtu(1500),
                Change::Mac("ca:90:6a:5f:37:a8".parse().unwrap()),
                Change::Promisc(false),
                Change::Allmulti(false)
            ]
        );
        let only_qlen = Saved {
            tx_qlen: Some(1000),
            ..Saved::default()
        };
        assert_eq!(
            String::from_utf8(only_qlen.to_bytes()).unwrap(),
            "{\n \"txQLen\": 1000\n}"
        );
        assert_eq!(Saved::from_bytes(b"not json"), None);
    }

    #[test]
    fn a_repeated_add_keeps_the_first_originals() {
        let first = Saved {
            mtu: 1500,
            mac: "02:00:00:00:00:01".into(),
            ..Saved::default()
        };
        let second = Saved {
            mtu: 1400,
            allmulti: Some(true),
            ..Saved::default()
        };
        let merged = second.under(first);
        assert_eq!(merged.mtu, 1500);
        assert_eq!(merged.mac, "02:00:00:00:00:01");
        assert_eq!(merged.allmulti, Some(true));
    }

    #[test]
    fn result_mac_goes_to_the_sandboxed_interface() {
        let prev = CniResult::from_value(&json!({"cniVersion": "1.0.0", "interfaces": [
            {"name": "eth0"}, {"name": "eth0", "sandbox": "/ns"}]}))
        .unwrap();
        let mac: MacAddr = "02:00:00:00:00:09".parse().unwrap();
        let out = with_mac(&prev, "eth0", mac);
        assert_eq!(out.interfaces[0].mac, None);
        assert_eq!(out.interfaces[1].mac.as_deref(), Some("02:00:00:00:00:09"));
        let prev = CniResult::from_value(
            &json!({"cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}]}),
        )
        .unwrap();
        assert_eq!(
            with_mac(&prev, "eth0", mac).interfaces[0].mac.as_deref(),
            Some("02:00:00:00:00:09")
        );
    }
}
