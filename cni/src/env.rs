//! The execution parameters of cni-SPEC §2, read from `CNI_*` environment
//! variables and validated per command. Every error is code 4 and names the
//! variable.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::args::CniArgs;
use super::error::CniError;
use super::names::{ContainerId, IfName, NetnsPath};

pub const CNI_COMMAND: &str = "CNI_COMMAND";
pub const CNI_CONTAINERID: &str = "CNI_CONTAINERID";
pub const CNI_NETNS: &str = "CNI_NETNS";
pub const CNI_IFNAME: &str = "CNI_IFNAME";
pub const CNI_ARGS: &str = "CNI_ARGS";
pub const CNI_PATH: &str = "CNI_PATH";

/// cni-SPEC §2 "CNI operations".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CniCommand {
    Add,
    Del,
    Check,
    Gc,
    Status,
    Version,
}

impl CniCommand {
    pub const ALL: [CniCommand; 6] = [
        CniCommand::Add,
        CniCommand::Del,
        CniCommand::Check,
        CniCommand::Gc,
        CniCommand::Status,
        CniCommand::Version,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CniCommand::Add => "ADD",
            CniCommand::Del => "DEL",
            CniCommand::Check => "CHECK",
            CniCommand::Gc => "GC",
            CniCommand::Status => "STATUS",
            CniCommand::Version => "VERSION",
        }
    }

    /// ADD, DEL and CHECK act on one attachment (cni-SPEC §3 "Attachment
    /// Parameters"); GC, STATUS and VERSION have none.
    pub fn is_attachment(self) -> bool {
        matches!(self, CniCommand::Add | CniCommand::Del | CniCommand::Check)
    }
}

impl fmt::Display for CniCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CniCommand {
    type Err = CniError;
    fn from_str(s: &str) -> Result<Self, CniError> {
        CniCommand::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| {
                CniError::invalid_env(
                    CNI_COMMAND,
                    format!(
                        "unknown command {s:?} (expected one of {})",
                        CniCommand::ALL.map(|c| c.as_str()).join(", ")
                    ),
                )
            })
    }
}

/// cni-SPEC §3 "Attachment Parameters": what ADD, DEL and CHECK act on,
/// validated when read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachmentParams {
    pub container_id: ContainerId,
    /// Always set for ADD and CHECK; for DEL only when the runtime still
    /// has one.
    pub netns: Option<NetnsPath>,
    pub ifname: IfName,
    /// `CNI_ARGS`.
    pub args: CniArgs,
    /// `CNI_PATH` directories (empty entries dropped).
    pub path: Vec<PathBuf>,
}

impl AttachmentParams {
    /// An attachment's names, checked as the environment's are (code 4
    /// naming the variable), without namespace, `CNI_ARGS` or `CNI_PATH`.
    pub fn new(
        container_id: impl Into<String>,
        ifname: impl Into<String>,
    ) -> Result<AttachmentParams, CniError> {
        Ok(AttachmentParams::of(
            ContainerId::new(container_id)
                .map_err(|r| CniError::invalid_env(CNI_CONTAINERID, r))?,
            IfName::new(ifname).map_err(|r| CniError::invalid_env(CNI_IFNAME, r))?,
        ))
    }

    /// An attachment's names, already checked by their types.
    pub fn of(container_id: ContainerId, ifname: IfName) -> AttachmentParams {
        AttachmentParams {
            container_id,
            netns: None,
            ifname,
            args: CniArgs::default(),
            path: Vec::new(),
        }
    }
}

/// The parameters of one plugin invocation: per command, what cni-SPEC §2
/// gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CniEnv {
    Add(AttachmentParams),
    Del(AttachmentParams),
    Check(AttachmentParams),
    /// `CNI_PATH` (read from the environment, it names a directory).
    Gc {
        path: Vec<PathBuf>,
    },
    Status {
        path: Vec<PathBuf>,
    },
    Version,
}

/// The `CNI_ARGS` of a command without any.
static NO_ARGS: CniArgs = CniArgs::EMPTY;

impl CniEnv {
    /// A GC's parameters: cni-SPEC §2 gives it only `CNI_COMMAND` and
    /// `CNI_PATH`.
    pub fn gc(path: Vec<PathBuf>) -> CniEnv {
        CniEnv::Gc { path }
    }

    /// The parameters of `command` on one attachment. Only ADD, DEL and
    /// CHECK have one (code 4 otherwise); ADD and CHECK need `netns`.
    pub fn for_attachment(
        command: CniCommand,
        params: AttachmentParams,
    ) -> Result<CniEnv, CniError> {
        if params.netns.is_none() && command != CniCommand::Del && command.is_attachment() {
            return Err(missing(CNI_NETNS, command));
        }
        match command {
            CniCommand::Add => Ok(CniEnv::Add(params)),
            CniCommand::Del => Ok(CniEnv::Del(params)),
            CniCommand::Check => Ok(CniEnv::Check(params)),
            CniCommand::Gc | CniCommand::Status | CniCommand::Version => {
                Err(no_attachment(command))
            }
        }
    }

    /// The parameters of a command about the network rather than an
    /// attachment (GC, STATUS): cni-SPEC §2 gives them only `CNI_COMMAND`
    /// and `CNI_PATH`. VERSION has not even that.
    pub fn config_only(command: CniCommand, path: Vec<PathBuf>) -> Result<CniEnv, CniError> {
        match command {
            CniCommand::Gc => Ok(CniEnv::Gc { path }),
            CniCommand::Status => Ok(CniEnv::Status { path }),
            CniCommand::Version => Ok(CniEnv::Version),
            CniCommand::Add | CniCommand::Del | CniCommand::Check => Err(CniError::invalid_env(
                CNI_COMMAND,
                format!(
                    "{command} acts on an attachment: it needs {CNI_CONTAINERID} and {CNI_IFNAME}"
                ),
            )),
        }
    }

    /// The same parameters for `command` (a delegate's: cni-SPEC §4 "only
    /// the command changes"). An attachment's parameters serve any command;
    /// GC's and STATUS's only the commands without an attachment.
    pub fn with_command(&self, command: CniCommand) -> Result<CniEnv, CniError> {
        match self.attachment() {
            Some(params) if command.is_attachment() => {
                CniEnv::for_attachment(command, params.clone())
            }
            _ if !command.is_attachment() => CniEnv::config_only(command, self.path().to_vec()),
            _ => Err(no_attachment(self.command())),
        }
    }

    pub fn command(&self) -> CniCommand {
        match self {
            CniEnv::Add(_) => CniCommand::Add,
            CniEnv::Del(_) => CniCommand::Del,
            CniEnv::Check(_) => CniCommand::Check,
            CniEnv::Gc { .. } => CniCommand::Gc,
            CniEnv::Status { .. } => CniCommand::Status,
            CniEnv::Version => CniCommand::Version,
        }
    }

    /// The attachment ADD, DEL and CHECK act on; `None` for the others.
    pub fn attachment(&self) -> Option<&AttachmentParams> {
        match self {
            CniEnv::Add(p) | CniEnv::Del(p) | CniEnv::Check(p) => Some(p),
            CniEnv::Gc { .. } | CniEnv::Status { .. } | CniEnv::Version => None,
        }
    }

    pub fn attachment_mut(&mut self) -> Option<&mut AttachmentParams> {
        match self {
            CniEnv::Add(p) | CniEnv::Del(p) | CniEnv::Check(p) => Some(p),
            CniEnv::Gc { .. } | CniEnv::Status { .. } | CniEnv::Version => None,
        }
    }

    /// The attachment, or code 4 naming the command that has none: what a
    /// plugin's ADD, DEL or CHECK reads its names from.
    pub fn require_attachment(&self) -> Result<&AttachmentParams, CniError> {
        self.attachment()
            .ok_or_else(|| no_attachment(self.command()))
    }

    pub fn container_id(&self) -> Option<&ContainerId> {
        self.attachment().map(|p| &p.container_id)
    }

    pub fn ifname(&self) -> Option<&IfName> {
        self.attachment().map(|p| &p.ifname)
    }

    pub fn netns(&self) -> Option<&Path> {
        self.attachment()
            .and_then(|p| p.netns.as_ref())
            .map(NetnsPath::as_path)
    }

    /// `CNI_ARGS`; empty for the commands without an attachment.
    pub fn args(&self) -> &CniArgs {
        self.attachment().map_or(&NO_ARGS, |p| &p.args)
    }

    /// `CNI_PATH`; empty for VERSION.
    pub fn path(&self) -> &[PathBuf] {
        match self {
            CniEnv::Add(p) | CniEnv::Del(p) | CniEnv::Check(p) => &p.path,
            CniEnv::Gc { path } | CniEnv::Status { path } => path,
            CniEnv::Version => &[],
        }
    }

    /// Read and validate the variables that cni-SPEC §2 defines for the
    /// command. Variables a command does not use are not read, so stray values
    /// (say `CNI_IFNAME` on GC) cannot fail it. `lookup` gives a variable's
    /// raw value (an `OsString` from the process environment, or a `String`);
    /// one that is not UTF-8 is an error naming it.
    pub fn from_lookup<V: Into<OsString>>(
        lookup: impl Fn(&str) -> Option<V>,
    ) -> Result<CniEnv, CniError> {
        // An empty value counts as unset: runtimes written in Go cannot tell
        // the two apart, and containerd sends `CNI_NETNS=` on late DELs.
        let get = |var: &str| -> Result<Option<String>, CniError> {
            match lookup(var).map(|v| v.into().into_string()) {
                None => Ok(None),
                Some(Ok(v)) => Ok(Some(v).filter(|v| !v.is_empty())),
                Some(Err(raw)) => Err(CniError::invalid_env(
                    var,
                    format!(
                        "{:?} is not valid UTF-8 (CNI parameters are text)",
                        raw.to_string_lossy()
                    ),
                )),
            }
        };

        let command: CniCommand = get(CNI_COMMAND)?
            .ok_or_else(|| CniError::invalid_env(CNI_COMMAND, "not set"))?
            .parse()?;
        if command == CniCommand::Version {
            return Ok(CniEnv::Version);
        }

        let attachment = if command.is_attachment() {
            let id = get(CNI_CONTAINERID)?.ok_or_else(|| missing(CNI_CONTAINERID, command))?;

            let netns = match get(CNI_NETNS)? {
                Some(ns) => {
                    Some(NetnsPath::new(ns).map_err(|r| CniError::invalid_env(CNI_NETNS, r))?)
                }
                // cni-SPEC §2 DEL: CNI_NETNS is optional.
                None if command == CniCommand::Del => None,
                None => return Err(missing(CNI_NETNS, command)),
            };

            let ifname = get(CNI_IFNAME)?.ok_or_else(|| missing(CNI_IFNAME, command))?;
            let names = AttachmentParams::new(id, ifname)?;

            let args = match get(CNI_ARGS)? {
                Some(args) => CniArgs::parse(&args)?,
                None => CniArgs::default(),
            };
            Some(AttachmentParams {
                netns,
                args,
                ..names
            })
        } else {
            None
        };

        let path = match get(CNI_PATH)? {
            Some(p) => {
                let path: Vec<PathBuf> = p
                    .split(':')
                    .filter(|d| !d.is_empty())
                    .map(PathBuf::from)
                    .collect();
                if path.is_empty() && command == CniCommand::Gc {
                    return Err(CniError::invalid_env(
                        CNI_PATH,
                        format!("{p:?} names no directory"),
                    ));
                }
                path
            }
            // cni-SPEC §2 GC: CNI_PATH is required.
            None if command == CniCommand::Gc => return Err(missing(CNI_PATH, command)),
            None => Vec::new(),
        };
        match attachment {
            Some(params) => CniEnv::for_attachment(command, AttachmentParams { path, ..params }),
            None => CniEnv::config_only(command, path),
        }
    }

    /// Read the process environment.
    pub fn from_process() -> Result<CniEnv, CniError> {
        CniEnv::from_lookup(|k| std::env::var_os(k))
    }
}

fn missing(var: &str, command: CniCommand) -> CniError {
    CniError::invalid_env(var, format!("required for {command} but not set"))
}

fn no_attachment(command: CniCommand) -> CniError {
    CniError::invalid_env(
        CNI_COMMAND,
        format!("{command} acts on no attachment (cni-SPEC §3 \"Attachment Parameters\" are ADD's, DEL's and CHECK's)"),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::ErrorCode;

    fn env<K: AsRef<str>, V: AsRef<str>>(vars: &[(K, V)]) -> Result<CniEnv, CniError> {
        let m: HashMap<&str, &str> = vars.iter().map(|(k, v)| (k.as_ref(), v.as_ref())).collect();
        CniEnv::from_lookup(|k| m.get(k).map(|v| v.to_string()))
    }

    const FULL: [(&str, &str); 6] = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "abc123"),
        ("CNI_NETNS", "/var/run/netns/blue"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=web"),
        ("CNI_PATH", "/opt/cni/bin::/usr/lib/cni:"),
    ];

    /// FULL with CNI_COMMAND=cmd, without `drop`, and with `set` applied.
    fn with(cmd: &str, drop: &[&str], set: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut m: HashMap<&str, &str> = FULL.into_iter().collect();
        m.insert("CNI_COMMAND", cmd);
        m.retain(|k, _| !drop.contains(k));
        m.extend(set.iter().copied());
        m.into_iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    fn err_details<K: AsRef<str>, V: AsRef<str>>(vars: &[(K, V)]) -> String {
        let e = env(vars).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidEnvironment, "{e}");
        e.details
    }

    #[test]
    fn full_add() {
        let e = env(&FULL).unwrap();
        assert_eq!(e.command(), CniCommand::Add);
        assert_eq!(e.container_id().unwrap(), "abc123");
        assert_eq!(e.netns(), Some(Path::new("/var/run/netns/blue")));
        assert_eq!(e.ifname().unwrap(), "eth0");
        assert_eq!(e.args().k8s_pod_name(), Some("web"));
        assert_eq!(
            e.path(),
            [PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")]
        );
    }

    #[test]
    fn command_parsing() {
        for c in CniCommand::ALL {
            assert_eq!(c.as_str().parse::<CniCommand>().unwrap(), c);
        }
        assert!(err_details::<&str, &str>(&[]).starts_with("CNI_COMMAND: not set"));
        assert!(err_details(&[("CNI_COMMAND", "")]).starts_with("CNI_COMMAND: not set"));
        let d = err_details(&[("CNI_COMMAND", "add")]);
        assert!(d.starts_with("CNI_COMMAND: unknown command \"add\""), "{d}");
    }

    #[test]
    fn add_and_check_require_containerid_netns_ifname() {
        // cni-SPEC §2 ADD / CHECK "Required environment parameters".
        for cmd in ["ADD", "CHECK"] {
            for var in ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"] {
                let d = err_details(&with(cmd, &[var], &[]));
                assert_eq!(d, format!("{var}: required for {cmd} but not set"));
                let d = err_details(&with(cmd, &[], &[(var, "")]));
                assert_eq!(d, format!("{var}: required for {cmd} but not set"));
            }
            // CNI_ARGS and CNI_PATH are optional.
            let e = env(&with(cmd, &["CNI_ARGS", "CNI_PATH"], &[])).unwrap();
            assert!(e.args().is_empty() && e.path().is_empty());
        }
    }

    #[test]
    fn del_netns_is_optional_and_empty_means_absent() {
        // cni-SPEC §2 DEL: CNI_NETNS optional; containerd sends it empty.
        let e = env(&with("DEL", &["CNI_NETNS"], &[])).unwrap();
        assert_eq!(e.netns(), None);
        let e = env(&with("DEL", &[], &[("CNI_NETNS", "")])).unwrap();
        assert_eq!(e.netns(), None);
        assert_eq!(e.container_id().unwrap(), "abc123");
        let e = env(&with("DEL", &[], &[])).unwrap();
        assert_eq!(e.netns(), Some(Path::new("/var/run/netns/blue")));
        for var in ["CNI_CONTAINERID", "CNI_IFNAME"] {
            let d = err_details(&with("DEL", &[var], &[]));
            assert_eq!(d, format!("{var}: required for DEL but not set"));
        }
    }

    #[test]
    fn invalid_values_name_the_variable() {
        let d = err_details(&with("ADD", &[], &[("CNI_CONTAINERID", "-bad")]));
        assert!(d.starts_with("CNI_CONTAINERID: \"-bad\" must start"), "{d}");
        let d = err_details(&with("DEL", &[], &[("CNI_IFNAME", "eth0/x")]));
        assert_eq!(d, r#"CNI_IFNAME: "eth0/x" must not contain '/'"#);
        let d = err_details(&with(
            "CHECK",
            &[],
            &[("CNI_IFNAME", "averyveryverylongname")],
        ));
        assert!(d.starts_with("CNI_IFNAME: "), "{d}");
        let d = err_details(&with("ADD", &[], &[("CNI_NETNS", "run/netns/x")]));
        assert_eq!(d, r#"CNI_NETNS: "run/netns/x" must be an absolute path"#);
        let d = err_details(&with("DEL", &[], &[("CNI_NETNS", "x")]));
        assert!(d.starts_with("CNI_NETNS:"), "{d}");
        let d = err_details(&with("ADD", &[], &[("CNI_ARGS", "novalue")]));
        assert!(d.starts_with("CNI_ARGS: invalid pair \"novalue\""), "{d}");
    }

    #[test]
    fn a_value_that_is_not_utf8_is_named_as_such() {
        // Once reported as "required for ADD but not set" (issue 9).
        use std::os::unix::ffi::OsStringExt;
        for var in [
            "CNI_CONTAINERID",
            "CNI_IFNAME",
            "CNI_NETNS",
            "CNI_ARGS",
            "CNI_COMMAND",
        ] {
            let vars: HashMap<String, OsString> = with("ADD", &[], &[])
                .into_iter()
                .map(|(k, v)| (k, OsString::from(v)))
                .chain([(var.to_string(), OsString::from_vec(b"ab\xffcd".to_vec()))])
                .collect();
            let e = CniEnv::from_lookup(|k| vars.get(k).cloned()).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidEnvironment, "{e}");
            assert_eq!(
                e.details,
                format!("{var}: \"ab\u{fffd}cd\" is not valid UTF-8 (CNI parameters are text)")
            );
        }
    }

    #[test]
    fn gc_requires_only_cni_path() {
        // cni-SPEC §2 GC: CNI_COMMAND and CNI_PATH.
        let e = env(&[("CNI_COMMAND", "GC"), ("CNI_PATH", "/opt/cni/bin")]).unwrap();
        assert_eq!(e, CniEnv::gc(vec![PathBuf::from("/opt/cni/bin")]));
        let d = err_details(&[("CNI_COMMAND", "GC")]);
        assert_eq!(d, "CNI_PATH: required for GC but not set");
        let d = err_details(&[("CNI_COMMAND", "GC"), ("CNI_PATH", "::")]);
        assert!(d.starts_with("CNI_PATH: \"::\" names no directory"), "{d}");
        // Attachment variables are not read for GC, even when invalid.
        let e = env(&with("GC", &[], &[("CNI_IFNAME", "bad/name")])).unwrap();
        assert_eq!(e.ifname(), None);
    }

    #[test]
    fn status_and_version_need_only_the_command() {
        let e = env(&[("CNI_COMMAND", "STATUS")]).unwrap();
        assert_eq!(e, CniEnv::Status { path: vec![] });
        let e = env(&[("CNI_COMMAND", "STATUS"), ("CNI_PATH", "/a:/b")]).unwrap();
        assert_eq!(e.path().len(), 2);
        let e = env(&[("CNI_COMMAND", "VERSION"), ("CNI_ARGS", "garbage")]).unwrap();
        assert_eq!(e, CniEnv::Version);
        assert!(e.args().is_empty() && e.path().is_empty());
    }

    #[test]
    fn commands_change_only_between_those_with_the_same_parameters() {
        // cni-SPEC §4: a delegate gets the same environment, another command.
        let add = env(&FULL).unwrap();
        let del = add.with_command(CniCommand::Del).unwrap();
        assert_eq!(del.command(), CniCommand::Del);
        assert_eq!(del.attachment(), add.attachment());
        let status = add.with_command(CniCommand::Status).unwrap();
        assert_eq!(status.path(), add.path());
        let gc = CniEnv::gc(vec!["/bin".into()]);
        let e = gc.with_command(CniCommand::Add).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidEnvironment);
        assert!(
            e.details
                .starts_with("CNI_COMMAND: GC acts on no attachment"),
            "{e}"
        );
        // A DEL without its namespace cannot become an ADD.
        let mut del = del;
        del.attachment_mut().unwrap().netns = None;
        let e = del.with_command(CniCommand::Add).unwrap_err();
        assert_eq!(e.details, "CNI_NETNS: required for ADD but not set");
    }
}
