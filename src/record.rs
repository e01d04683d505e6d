//! What plexus attempted for each attachment of a container, on disk, so DEL,
//! CHECK and GC work from the node alone: no API server, no re-planning, and
//! after a crash in the middle of an ADD.
//!
//! One record per plexus attachment, keyed by `(CNI_CONTAINERID, CNI_IFNAME)`
//! (cni-SPEC §3 "Attachment Parameters"): `<dir>/<containerID>@<ifname>.json`.
//! Container IDs cannot contain `@`, so the name is unambiguous, and both
//! parts are validated so no name can leave the directory.
//!
//! The record holds every planned attachment with its exact plugin JSON (the
//! plan's, see [`Attachment::to_value`]), its state, the result of its chain
//! and the plugins whose DEL is still owed. It is written before the first
//! plugin runs and after every step of the ADD, so a reader sees the old
//! record or the new one, never a torn one. The file is JSON lines, one whole
//! record per line, the last complete line standing: the first write of an ADD
//! creates the file whole ([`plexus_cni::whole_file`]; an old file is replaced
//! by a temp file and a rename) and later ones append, so an ADD creates one
//! inode instead of one per step (inode allocation on a journal-less ext4
//! scans past every recently deleted inode, and a rename over an existing
//! file forces its data out, costing like an fsync). A line cut short by a
//! crash is ignored: the record before it stands.
//!
//! Records are not fsync'd: they guard against plexus itself dying mid-ADD,
//! which the page cache survives. A power loss takes every pod namespace
//! with it, and what outlives a reboot on disk (host-local's allocations,
//! which are fsync'd) is reclaimed by the runtime's DEL and GC. Syncing four
//! times per ADD would cost more than the whole kernel work of an attachment. It is removed only when every owed DEL
//! succeeded: Multus dropped its cache even when a delegate's DEL failed
//! (multus-cni #355, #1239), leaking addresses forever.
//!
//! A record that cannot be read (multus-cni #948, #1087: truncated by a crash
//! of a non-atomic writer) is reported as [`Lookup::Corrupt`] with the reason;
//! the executor then falls back to what it can (see `run::Executor::del`).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::attachment::{Attachment, Plan};
use crate::cni::casefold;
use crate::cni::error::CniError;
use crate::cni::names::{ContainerId, IfName, NetnsPath};
use crate::cni::result::CniResult;
use crate::cni::whole_file::{self, Durability};
use crate::cni::CniVersion;
use crate::netattach::deviceinfo::DeviceInfo;
use crate::netattach::status::NetworkStatus;

/// Where records live unless configured (`cniDir`), next to Multus's
/// `/var/lib/cni/multus`.
pub const DEFAULT_DIR: &str = "/var/lib/cni/plexus";

/// The record format this build writes and reads.
const FORMAT: u64 = 1;
const SUFFIX: &str = ".json";
const QUARANTINE_SUFFIX: &str = ".corrupt";
/// Separates the container ID from the interface name in file names; never
/// part of a container ID (cni-SPEC §2).
const SEPARATOR: char = '@';
/// Records are small; anything larger is not one of ours.
const MAX_RECORD: u64 = 64 << 20;
/// Results are stored in the newest format, a superset of all others.
const RESULT_VERSION: CniVersion = CniVersion::LATEST;

/// Where an attachment's ADD got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Not attempted (multi-net-spec §7.2: never attempted after a failure).
    Pending,
    /// ADD started; a record left in this state means plexus stopped in the
    /// middle (crash, kill, reboot).
    Adding,
    /// Every plugin's ADD (and the default-route step) succeeded.
    Added,
    /// An ADD failed; `result` is the last good result of the chain.
    Failed,
}

/// One planned attachment and what happened to it.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedAttachment {
    pub attachment: Attachment,
    pub state: State,
    /// The chain's last good result: the final one once [`State::Added`];
    /// the prevResult of its DEL and CHECK.
    pub result: Option<CniResult>,
    /// Indexes (ascending) of the plugins whose DEL is owed: every plugin once
    /// the ADD started, as it is unknown how far it got; fewer after a
    /// rollback or a partly failed DEL.
    pub pending_del: Vec<usize>,
    /// device-info-SPEC §6.1.1: what the attachment's CNI device-info file
    /// held after its chain, for network-status.
    pub device_info: Option<DeviceInfo>,
}

impl CachedAttachment {
    pub fn owes_del(&self) -> bool {
        !self.pending_del.is_empty()
    }

    /// Every plugin of the chain.
    pub fn all_plugins(&self) -> Vec<usize> {
        (0..self.attachment.plugins.len()).collect()
    }
}

/// Everything plexus knows about one of its attachments to a container.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub container_id: ContainerId,
    /// The runtime's `CNI_IFNAME` for plexus (the default network's).
    pub ifname: IfName,
    /// `CNI_NETNS` of the ADD, for humans.
    pub netns: Option<NetnsPath>,
    pub attachments: Vec<CachedAttachment>,
}

impl Record {
    /// The pod's network-status entries (multi-net-spec §5) for the
    /// attachments that were added, in attachment order.
    pub fn network_status(&self) -> Vec<NetworkStatus> {
        self.attachments
            .iter()
            .filter(|a| a.state == State::Added)
            .map(|a| {
                a.attachment
                    .network_status(a.result.as_ref(), a.device_info.as_ref())
            })
            .collect()
    }

    /// Every attachment of `plan`, none attempted yet.
    pub fn new(
        container_id: &ContainerId,
        ifname: &IfName,
        netns: Option<&NetnsPath>,
        plan: &Plan,
    ) -> Record {
        Record {
            container_id: container_id.clone(),
            ifname: ifname.clone(),
            netns: netns.cloned(),
            attachments: plan
                .attachments
                .iter()
                .map(|a| CachedAttachment {
                    attachment: a.clone(),
                    state: State::Pending,
                    result: None,
                    pending_del: Vec::new(),
                    device_info: None,
                })
                .collect(),
        }
    }

    /// Whether any DEL is still owed.
    pub fn owes_del(&self) -> bool {
        self.attachments.iter().any(CachedAttachment::owes_del)
    }

    /// The record as written to its file.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(WireRecord::from(self)).expect("a record serializes")
    }

    /// The record a file holds: its last complete line (see the module
    /// docs); the error says what is wrong.
    pub fn from_file(bytes: &[u8]) -> Result<Record, String> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err("the file is empty (truncated?)".into());
        }
        let value =
            last_document(bytes).map_err(|e| format!("not valid JSON (truncated?): {e}"))?;
        Record::from_value(&value)
    }

    /// Parse and check a record; the error says what is wrong.
    pub fn from_value(v: &Value) -> Result<Record, String> {
        let wire: WireRecord = casefold::from_value_at(v).map_err(|e| e.to_string())?;
        if wire.plexus_cache != FORMAT {
            return Err(format!(
                "plexusCache: format {} is not the format {FORMAT} this plexus reads",
                wire.plexus_cache
            ));
        }
        let attachments = wire
            .attachments
            .into_iter()
            .enumerate()
            .map(|(i, a)| a.into_cached().map_err(|r| format!("attachments[{i}].{r}")))
            .collect::<Result<_, _>>()?;
        Ok(Record {
            container_id: wire.container_id,
            ifname: wire.ifname,
            netns: wire.netns,
            attachments,
        })
    }
}

/// A record on disk: one serde type, read and written.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireRecord {
    plexus_cache: u64,
    /// Checked as it is read, as every name is ([`ContainerId`], [`IfName`]).
    #[serde(rename = "containerID")]
    container_id: ContainerId,
    ifname: IfName,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    netns: Option<NetnsPath>,
    attachments: Vec<WireCached>,
}

#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireCached {
    state: State,
    pending_del: Vec<usize>,
    plan: Attachment,
    /// In [`RESULT_VERSION`]'s format, and device-info in the spec's
    /// (each checked by its own parser).
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    device_info: Option<Value>,
}

impl From<&Record> for WireRecord {
    fn from(record: &Record) -> WireRecord {
        let attachments = record.attachments.iter().map(|a| WireCached {
            state: a.state,
            pending_del: a.pending_del.clone(),
            plan: a.attachment.clone(),
            // Infallible for the newest version: it has no legacy limits.
            result: a
                .result
                .as_ref()
                .and_then(|r| r.to_value(RESULT_VERSION).ok()),
            device_info: a.device_info.as_ref().map(DeviceInfo::to_value),
        });
        WireRecord {
            plexus_cache: FORMAT,
            container_id: record.container_id.clone(),
            ifname: record.ifname.clone(),
            netns: record.netns.clone(),
            attachments: attachments.collect(),
        }
    }
}

impl WireCached {
    fn into_cached(self) -> Result<CachedAttachment, String> {
        let p = self.plan;
        if p.plugins.is_empty() {
            return Err("plan.plugins: empty".into());
        }
        if let Some(files) = &p.device_info {
            // DEL removes this file: it must be one plexus names.
            files
                .check()
                .map_err(|r| format!("plan.deviceInfo.cni: {r}"))?;
        }
        let mut pending_del = self.pending_del;
        pending_del.sort_unstable();
        pending_del.dedup();
        if let Some(bad) = pending_del.iter().find(|i| **i >= p.plugins.len()) {
            return Err(format!(
                "pendingDel: plugin {bad} does not exist (the chain has {})",
                p.plugins.len()
            ));
        }
        let result = self
            .result
            .map(|v| CniResult::from_value_as(&v, RESULT_VERSION))
            .transpose()
            .map_err(|e| format!("result: {}", e.details))?;
        let device_info = self
            .device_info
            .map(|v| DeviceInfo::from_value(&v))
            .transpose()
            .map_err(|e| format!("deviceInfo: {}", e.details))?;
        Ok(CachedAttachment {
            attachment: p,
            state: self.state,
            result,
            pending_del,
            device_info,
        })
    }
}

/// What goes wrong with the record files. The CNI code of each failure is
/// chosen in `From<RecordError> for CniError`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// A record file or the directory could not be read or written.
    #[error("cache {}: {reason}", path.display())]
    Io { path: PathBuf, reason: String },
    /// The record file is there but holds no valid record.
    #[error("cache {}: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
    /// A record of a format a newer plexus writes (issue 47): never taken
    /// for a corrupt one and moved aside, since the newer plexus, rolled
    /// forward again, still needs it.
    #[error(
        "cache {}: plexusCache format {format} was written by a newer plexus; this one reads \
         format {FORMAT} (roll plexus forward to DEL or CHECK this attachment)",
        path.display()
    )]
    Newer { path: PathBuf, format: u64 },
}

impl From<RecordError> for CniError {
    fn from(e: RecordError) -> CniError {
        match e {
            RecordError::Io { path, reason } => {
                CniError::io(format!("cache {}", path.display()), reason)
            }
            RecordError::Corrupt { path, reason } => {
                CniError::decode(format!("cache {}", path.display()), reason)
            }
            RecordError::Newer { path, format } => CniError::decode(
                format!("cache {}", path.display()),
                format!(
                    "plexusCache format {format} was written by a newer plexus; this one reads \
                     format {FORMAT} (roll plexus forward to DEL or CHECK this attachment)"
                ),
            ),
        }
    }
}

impl RecordError {
    pub(crate) fn io(path: impl Into<PathBuf>, reason: impl std::fmt::Display) -> RecordError {
        RecordError::Io {
            path: path.into(),
            reason: reason.to_string(),
        }
    }
}

/// The outcome of reading a record.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// No record: plexus never started an ADD for this attachment on this
    /// node, or every DEL completed.
    Missing,
    Found(Record),
    /// The file exists but is not a valid record.
    Corrupt {
        path: PathBuf,
        reason: String,
    },
}

/// A file of the cache directory, as GC sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Record {
        container_id: ContainerId,
        ifname: IfName,
    },
    /// A corrupt record moved aside by [`Cache::quarantine`].
    Quarantined {
        path: PathBuf,
        container_id: ContainerId,
        ifname: IfName,
    },
    /// A temporary file left by a writer that died before its rename.
    Temp(PathBuf),
}

/// The record directory.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    pub fn new(dir: impl Into<PathBuf>) -> Cache {
        Cache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `(container_id, ifname)`: their rules keep the path in
    /// the directory.
    pub fn path(&self, container_id: &ContainerId, ifname: &IfName) -> PathBuf {
        self.dir.join(file_name(container_id, ifname))
    }

    /// The last complete record of the file.
    pub fn load(&self, container_id: &ContainerId, ifname: &IfName) -> Result<Lookup, RecordError> {
        let path = self.path(container_id, ifname);
        let bytes = match read_limited(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Lookup::Missing),
            Err(e) => return Err(RecordError::io(path, e)),
        };
        if let Some(format) = newer_format(&bytes) {
            return Err(RecordError::Newer { path, format });
        }
        let corrupt = |reason: String| Lookup::Corrupt {
            path: path.clone(),
            reason,
        };
        let record = match Record::from_file(&bytes) {
            Ok(r) => r,
            Err(reason) => return Ok(corrupt(reason)),
        };
        if record.container_id != *container_id || record.ifname != *ifname {
            return Ok(corrupt(format!(
                "the record is for container {} interface {}, not this file's",
                record.container_id, record.ifname
            )));
        }
        Ok(Lookup::Found(record))
    }

    /// Write `record` atomically, replacing any previous file: the first
    /// write of an ADD.
    pub fn store(&self, record: &Record) -> Result<(), RecordError> {
        let _span = crate::phases::span("record write");
        let (name, line) = record_line(record)?;
        self.write_atomic(&name, &line)
            .map_err(|e| RecordError::io(self.dir.join(&name), e))
    }

    /// Write a newer version of a record [`Cache::store`]d before, by
    /// appending it; a missing file is created. A failed append is cut off
    /// again, so the line before it still stands.
    pub fn update(&self, record: &Record) -> Result<(), RecordError> {
        let _span = crate::phases::span("record write");
        let (name, line) = record_line(record)?;
        let path = self.dir.join(&name);
        self.append(&path, &line)
            .map_err(|e| RecordError::io(&path, e))
    }

    /// Remove the record; a missing one is fine (DEL is idempotent).
    pub fn remove(&self, container_id: &ContainerId, ifname: &IfName) -> Result<(), RecordError> {
        let _span = crate::phases::span("record write");
        let path = self.path(container_id, ifname);
        whole_file::remove(&path).map_err(|e| RecordError::io(&path, e))
    }

    /// Move an unreadable record aside (`<name>.corrupt`), keeping it for an
    /// administrator; GC removes it once the attachment is gone.
    pub fn quarantine(
        &self,
        container_id: &ContainerId,
        ifname: &IfName,
    ) -> Result<PathBuf, RecordError> {
        let path = self.path(container_id, ifname);
        let mut target = path.clone().into_os_string();
        target.push(QUARANTINE_SUFFIX);
        let target = PathBuf::from(target);
        fs::rename(&path, &target).map_err(|e| RecordError::io(&path, e))?;
        Ok(target)
    }

    /// The files of the directory; ones plexus did not write are skipped.
    pub fn entries(&self) -> Result<Vec<Entry>, RecordError> {
        let rd = match fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(RecordError::io(&self.dir, e)),
        };
        let mut out = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| RecordError::io(&self.dir, e))?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if name.starts_with('.') {
                if name.contains(whole_file::TEMP_MARKER) {
                    out.push(Entry::Temp(entry.path()));
                }
                continue;
            }
            if let Some(stem) = name.strip_suffix(SUFFIX) {
                if let Some((container_id, ifname)) = parse_key(stem) {
                    out.push(Entry::Record {
                        container_id,
                        ifname,
                    });
                }
            } else if let Some(stem) = name
                .strip_suffix(QUARANTINE_SUFFIX)
                .and_then(|n| n.strip_suffix(SUFFIX))
            {
                if let Some((container_id, ifname)) = parse_key(stem) {
                    out.push(Entry::Quarantined {
                        path: entry.path(),
                        container_id,
                        ifname,
                    });
                }
            }
        }
        out.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        Ok(out)
    }

    fn ensure_dir(&self) -> std::io::Result<()> {
        if self.dir.is_dir() {
            return Ok(());
        }
        // Records hold network configurations, which may carry secrets.
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        Ok(())
    }

    /// Open `path` with `options`, creating the directory when it is missing.
    fn open_in_dir(&self, options: &OpenOptions, path: &Path) -> std::io::Result<File> {
        match options.open(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.ensure_dir()?;
                options.open(path)
            }
            opened => opened,
        }
    }

    fn append(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let mut f = self.open_in_dir(
            OpenOptions::new().append(true).create(true).mode(0o600),
            path,
        )?;
        let len = f.metadata()?.len();
        f.write_all(bytes).inspect_err(|_| {
            let _ = f.set_len(len);
        })
    }

    fn write_atomic(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let target = self.dir.join(name);
        let write = || whole_file::replace(&target, bytes, 0o600, Durability::Unsynced);
        write().or_else(|e| {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(e);
            }
            self.ensure_dir()?;
            write()
        })
    }
}

/// The file name of `record` and its line: compact JSON and a newline.
fn record_line(record: &Record) -> Result<(String, Vec<u8>), RecordError> {
    let name = file_name(&record.container_id, &record.ifname);
    let mut line =
        serde_json::to_vec(&WireRecord::from(record)).map_err(|e| RecordError::io(&name, e))?;
    line.push(b'\n');
    Ok((name, line))
}

/// The last complete JSON document of `bytes`. A document cut short after
/// complete ones is an append a crash interrupted and is ignored; the first
/// one being incomplete is an error.
/// The format of the record `bytes` hold (their last complete line), when
/// it is one a newer plexus writes.
fn newer_format(bytes: &[u8]) -> Option<u64> {
    let value = last_document(bytes).ok()?;
    let format = value.get("plexusCache")?.as_u64()?;
    (format > FORMAT).then_some(format)
}

fn last_document(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut last = None;
    for document in serde_json::Deserializer::from_slice(bytes).into_iter::<Value>() {
        match (document, &last) {
            (Ok(v), _) => last = Some(v),
            (Err(e), None) => return Err(e),
            (Err(_), Some(_)) => break,
        }
    }
    Ok(last.unwrap_or(Value::Null))
}

/// `<containerID>@<ifname>.json`: neither name can hold the separator or a
/// `/` ([`names`]), so the file is theirs alone and in the directory.
fn file_name(container_id: &ContainerId, ifname: &IfName) -> String {
    format!("{container_id}{SEPARATOR}{ifname}{SUFFIX}")
}

/// The inverse of [`file_name`] (without the suffix); `None` for a name
/// plexus would not write.
fn parse_key(stem: &str) -> Option<(ContainerId, IfName)> {
    let (container_id, ifname) = stem.split_once(SEPARATOR)?;
    Some((
        ContainerId::new(container_id).ok()?,
        IfName::new(ifname).ok()?,
    ))
}

fn read_limited(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)?.take(MAX_RECORD).read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use serde_json::json;

    use super::*;

    fn id(id: &str) -> ContainerId {
        ContainerId::new(id).unwrap()
    }

    fn ifn(name: &str) -> IfName {
        IfName::new(name).unwrap()
    }

    fn attachment(network: &str, ifname: &str, n: usize) -> Attachment {
        Attachment {
            network: network.into(),
            ifname: ifn(ifname),
            default: ifname == "eth0",
            cni_args: "IgnoreUnknown=1;K8S_POD_NAME=web".into(),
            plugins: (0..n)
                .map(|i| {
                    json!({"cniVersion": "1.0.0", "name": network, "type": format!("p{i}")})
                        .as_object()
                        .unwrap()
                        .clone()
                })
                .collect(),
            source: "test".into(),
            default_route: Some(vec!["10.0.0.1".parse().unwrap()]),
            clear_default_route: true,
            ipam_claim_reference: Some("claim".into()),
            disable_check: true,
            device_info: None,
        }
    }

    fn record() -> Record {
        let plan = Plan {
            attachments: vec![attachment("k8s", "eth0", 2), attachment("ns/a", "net1", 1)],
            warnings: vec![],
            claimed: Vec::new(),
        };
        let mut r = Record::new(
            &id("ctr-1"),
            &ifn("eth0"),
            Some(&NetnsPath::new("/run/netns/x").unwrap()),
            &plan,
        );
        r.attachments[0].state = State::Added;
        r.attachments[0].pending_del = vec![0, 1];
        r.attachments[0].result = Some(
            CniResult::from_value(&json!({"cniVersion": "1.1.0",
                "interfaces": [{"name": "eth0", "mtu": 1400, "sandbox": "/run/netns/x"}],
                "ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1", "interface": 0}],
                "routes": [{"dst": "0.0.0.0/0", "table": 5}]}))
            .unwrap(),
        );
        r
    }

    #[test]
    fn records_round_trip_with_the_plan_json() {
        let d = tempfile::tempdir().unwrap();
        let cache = Cache::new(d.path().join("sub/dir"));
        let r = record();
        cache.store(&r).unwrap();
        let path = d.path().join("sub/dir/ctr-1@eth0.json");
        assert!(path.is_file());
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            fs::metadata(d.path().join("sub/dir"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        let Lookup::Found(back) = cache.load(&id("ctr-1"), &ifn("eth0")).unwrap() else {
            panic!("not found")
        };
        assert_eq!(back, r);
        // The plan's own JSON is inside, so DEL needs no API server.
        let v: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        assert_eq!(
            v["attachments"][1]["plan"],
            r.attachments[1].attachment.to_value()
        );
        assert_eq!(v["attachments"][0]["state"], "added");
        // No temp file is left behind.
        assert_eq!(
            cache.entries().unwrap(),
            [Entry::Record {
                container_id: id("ctr-1"),
                ifname: ifn("eth0")
            }]
        );
        cache.remove(&id("ctr-1"), &ifn("eth0")).unwrap();
        cache.remove(&id("ctr-1"), &ifn("eth0")).unwrap();
        assert_eq!(
            cache.load(&id("ctr-1"), &ifn("eth0")).unwrap(),
            Lookup::Missing
        );
    }

    #[test]
    fn the_file_keeps_its_key_order_and_reads_back_byte_for_byte() {
        let r = record();
        let (_, line) = record_line(&r).unwrap();
        let v: Value = serde_json::from_slice(&line).unwrap();
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(
            keys(&v),
            [
                "plexusCache",
                "containerID",
                "ifname",
                "netns",
                "attachments"
            ]
        );
        assert_eq!(
            keys(&v["attachments"][0]),
            ["state", "pendingDel", "plan", "result"]
        );
        let back = Record::from_file(&line).unwrap();
        assert_eq!(back, r);
        assert_eq!(record_line(&back).unwrap().1, line);
    }

    #[test]
    fn names_cannot_escape_the_directory() {
        let cache = Cache::new("/var/lib/cni/plexus");
        for (id, ifname) in [
            ("../x", "eth0"),
            ("a/b", "eth0"),
            ("", "eth0"),
            ("x", "../../etc"),
            ("x", ".."),
            ("x", ""),
        ] {
            // No path can be asked for: the names cannot be made.
            assert!(
                ContainerId::new(id).is_err() || IfName::new(ifname).is_err(),
                "{id} {ifname}"
            );
        }
        assert_eq!(
            cache.path(&id("abc"), &ifn("net1")),
            Path::new("/var/lib/cni/plexus/abc@net1.json")
        );
        // Container IDs have no '@', so keys split back unambiguously.
        assert_eq!(parse_key("a-b@c@d"), Some((id("a-b"), ifn("c@d"))));
        assert_eq!(parse_key("a-b-c"), None);
    }

    /// Issue 47 item 2: a record of a newer format is an error naming the
    /// format, never taken for a corrupt one (moved aside, its DELs lost).
    #[test]
    fn a_record_of_a_newer_plexus_is_an_error_naming_its_format() {
        let d = tempfile::tempdir().unwrap();
        let cache = Cache::new(d.path());
        let mut v = record().to_value();
        v["plexusCache"] = json!(FORMAT + 1);
        v["fieldOfTheFuture"] = json!({"x": 1});
        fs::write(
            cache.path(&id("ctr-1"), &ifn("eth0")),
            serde_json::to_vec(&v).unwrap(),
        )
        .unwrap();
        let e = cache.load(&id("ctr-1"), &ifn("eth0")).unwrap_err();
        assert!(matches!(e, RecordError::Newer { format, .. } if format == FORMAT + 1));
        let cni = CniError::from(e);
        assert!(
            cni.details.contains(&format!(
                "format {} was written by a newer plexus",
                FORMAT + 1
            )),
            "{cni:?}"
        );
    }

    #[test]
    fn corrupt_records_are_reported_with_the_reason() {
        // multus-cni #948 / #1087: truncated files after a reboot.
        let d = tempfile::tempdir().unwrap();
        let cache = Cache::new(d.path());
        let path = cache.path(&id("c1"), &ifn("eth0"));
        let full = serde_json::to_vec(&record().to_value()).unwrap();
        let cases: [(&[u8], &str); 4] = [
            (b"", "the file is empty"),
            (&full[..full.len() / 2], "not valid JSON (truncated?)"),
            (br#"{"plexusCache": 0}"#, "missing field"),
            (&full, "the record is for container ctr-1"),
        ];
        for (bytes, want) in cases {
            fs::write(&path, bytes).unwrap();
            match cache.load(&id("c1"), &ifn("eth0")).unwrap() {
                Lookup::Corrupt { path: p, reason } => {
                    assert_eq!(p, path);
                    assert!(reason.contains(want), "{reason} / {want}");
                }
                other => panic!("{other:?}"),
            }
        }
        let mut v = record().to_value();
        v["containerID"] = json!("c1");
        v["attachments"][0]["pendingDel"] = json!([0, 7]);
        fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
        let Lookup::Corrupt { reason, .. } = cache.load(&id("c1"), &ifn("eth0")).unwrap() else {
            panic!()
        };
        assert_eq!(
            reason,
            "attachments[0].pendingDel: plugin 7 does not exist (the chain has 2)"
        );
        // DEL removes the device-info file a record names: only one plexus
        // could have named.
        for bad in [
            "/etc/passwd",
            "relative-device.json",
            "/run/x/../../etc/a-device.json",
        ] {
            let mut v = record().to_value();
            v["containerID"] = json!("c1");
            v["attachments"][0]["plan"]["deviceInfo"] = json!({"cni": bad});
            fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
            let Lookup::Corrupt { reason, .. } = cache.load(&id("c1"), &ifn("eth0")).unwrap()
            else {
                panic!("{bad}")
            };
            assert!(
                reason.starts_with(&format!("attachments[0].plan.deviceInfo.cni: {bad} is not")),
                "{reason}"
            );
        }
        let mut v = record().to_value();
        v["containerID"] = json!("c1");
        v["attachments"][0]["plan"]["deviceInfo"] =
            json!({"cni": "/run/d/cni/n-c1-net1-device.json"});
        fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
        assert!(matches!(
            cache.load(&id("c1"), &ifn("eth0")).unwrap(),
            Lookup::Found(_)
        ));
        let q = cache.quarantine(&id("c1"), &ifn("eth0")).unwrap();
        assert_eq!(q, d.path().join("c1@eth0.json.corrupt"));
        assert_eq!(
            cache.load(&id("c1"), &ifn("eth0")).unwrap(),
            Lookup::Missing
        );
        assert_eq!(
            cache.entries().unwrap(),
            [Entry::Quarantined {
                path: q,
                container_id: id("c1"),
                ifname: ifn("eth0")
            }]
        );
    }

    #[test]
    fn updates_append_and_the_last_complete_line_stands() {
        let d = tempfile::tempdir().unwrap();
        let cache = Cache::new(d.path().join("records"));
        let mut rec = record();
        cache.store(&rec).unwrap();
        let path = cache.path(&id("ctr-1"), &ifn("eth0"));
        let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&fs::metadata(p).unwrap());
        let first_inode = inode(&path);
        rec.attachments[0].state = State::Added;
        cache.update(&rec).unwrap();
        // Same file, one line per version.
        assert_eq!(inode(&path), first_inode);
        assert_eq!(fs::read_to_string(&path).unwrap().lines().count(), 2);
        assert_eq!(
            cache.load(&id("ctr-1"), &ifn("eth0")).unwrap(),
            Lookup::Found(rec.clone())
        );

        // A crash in the middle of the next append: the version before stands.
        let mut newer = rec.clone();
        newer.attachments[0].state = State::Failed;
        let line = serde_json::to_vec(&newer.to_value()).unwrap();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&line[..line.len() / 2]).unwrap();
        assert_eq!(
            cache.load(&id("ctr-1"), &ifn("eth0")).unwrap(),
            Lookup::Found(rec.clone())
        );

        // store replaces the whole file, torn tail included.
        cache.store(&newer).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap().lines().count(), 1);
        assert_eq!(
            cache.load(&id("ctr-1"), &ifn("eth0")).unwrap(),
            Lookup::Found(newer.clone())
        );

        // update recreates a missing file (and directory) whole.
        fs::remove_dir_all(d.path().join("records")).unwrap();
        cache.update(&rec).unwrap();
        assert_eq!(
            cache.load(&id("ctr-1"), &ifn("eth0")).unwrap(),
            Lookup::Found(rec)
        );
    }

    /// Set for the child run of [`a_failed_append_is_cut_off`]: the record's
    /// path to append to.
    const APPEND_CHILD: &str = "PLEXUS_TEST_APPEND_CHILD";

    #[test]
    fn a_failed_append_is_cut_off() {
        let long_line = vec![b' '; 64 << 10];
        if let Some(path) = std::env::var_os(APPEND_CHILD) {
            // The child: its file size limit stops the append part way.
            let path = PathBuf::from(path);
            let e = Cache::new(path.parent().unwrap())
                .append(&path, &long_line)
                .unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EFBIG), "{e}");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let cache = Cache::new(d.path());
        cache.store(&record()).unwrap();
        let path = cache.path(&id("ctr-1"), &ifn("eth0"));
        let before = fs::read(&path).unwrap();
        // A disk that fills up in the middle of the append: this test again,
        // in a child process whose file size limit makes the write fail
        // (EFBIG; SIGXFSZ ignored). A re-exec, not a fork, since other
        // tests' threads may hold locks a forked child would inherit.
        let limit = (before.len() + 100) as libc::rlim_t;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child
            .args([
                "--exact",
                "record::tests::a_failed_append_is_cut_off",
                "--test-threads=1",
            ])
            .env(APPEND_CHILD, &path);
        // SAFETY: only signal(2) and setrlimit(2), async-signal-safe, run
        // between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut child, move || {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                let rl = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &rl) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = child.output().unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("1 passed"),
            "the child ran no test: {out:?}"
        );
        assert_eq!(fs::read(&path).unwrap(), before);
        assert_eq!(
            cache.load(&id("ctr-1"), &ifn("eth0")).unwrap(),
            Lookup::Found(record())
        );
    }

    #[test]
    fn entries_list_records_and_stale_temp_files_only() {
        let d = tempfile::tempdir().unwrap();
        let cache = Cache::new(d.path());
        cache.store(&record()).unwrap();
        fs::write(d.path().join(".ctr-2@eth0.json.tmp-1-0"), "{").unwrap();
        fs::write(d.path().join("README"), "not ours").unwrap();
        fs::write(d.path().join("-bad@eth0.json"), "{}").unwrap();
        let entries = cache.entries().unwrap();
        assert_eq!(entries.len(), 2, "{entries:?}");
        assert!(entries.contains(&Entry::Temp(d.path().join(".ctr-2@eth0.json.tmp-1-0"))));
        assert!(entries.contains(&Entry::Record {
            container_id: id("ctr-1"),
            ifname: ifn("eth0")
        }));
        // A missing directory has no entries (nothing was ever added).
        assert_eq!(Cache::new(d.path().join("none")).entries().unwrap(), []);
    }

    #[test]
    fn a_failed_write_leaves_no_temp_file() {
        let d = tempfile::tempdir().unwrap();
        let cache = Cache::new(d.path());
        // A directory where the record should go: the rename fails.
        fs::create_dir(d.path().join("ctr-1@eth0.json")).unwrap();
        let e = cache.store(&record()).unwrap_err();
        assert!(
            matches!(&e, RecordError::Io { path, .. } if *path == d.path().join("ctr-1@eth0.json")),
            "{e}"
        );
        let names: Vec<_> = fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["ctr-1@eth0.json"]);
        // A cache "directory" that is a file cannot be written either.
        let cache = Cache::new(d.path().join("ctr-1@eth0.json/x"));
        fs::remove_dir(d.path().join("ctr-1@eth0.json")).unwrap();
        fs::write(d.path().join("ctr-1@eth0.json"), "").unwrap();
        assert!(cache.store(&record()).is_err());
    }

    #[test]
    fn each_failure_has_one_code() {
        use crate::cni::ErrorCode;
        let path = PathBuf::from("/c/x@eth0.json");
        let cases = [
            (
                RecordError::io(&path, "r"),
                ErrorCode::Io,
                "cache /c/x@eth0.json: r",
            ),
            (
                RecordError::Corrupt {
                    path: path.clone(),
                    reason: "r".into(),
                },
                ErrorCode::Decode,
                "cache /c/x@eth0.json: r",
            ),
        ];
        for (e, code, details) in cases {
            let cni = CniError::from(e.clone());
            assert_eq!((cni.code, cni.details.as_str()), (code, details), "{e:?}");
        }
    }
}
