//! Running one plugin binary failed, typed: [`ExecError`]. Its CNI code is
//! chosen in `From<ExecError> for CniError`, where the [`super::ExecPlugin`]
//! answers as a [`crate::cni::skel::Plugin`].

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::cni::env::CniCommand;
use crate::cni::error::{codes, CniError, ErrorCode};
use crate::cni::names;

/// What a plugin binary printed besides its answer, for error messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Printed {
    /// The tail of its stderr, trimmed.
    pub stderr: String,
    /// Its stdout, trimmed (not a CNI error result).
    pub stdout: String,
}

/// Why a file named as the plugin cannot be run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    NotExecutable,
    NotAFile,
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unusable::NotExecutable => "is not executable",
            Unusable::NotAFile => "is not a regular file",
        })
    }
}

/// Running one plugin binary (cni-SPEC §3 "Adding an attachment" steps 1
/// and 3) failed.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecError {
    /// `type` is not a bare binary name.
    PluginType(String),
    /// No executable of that name in the `CNI_PATH` directories.
    NotFound {
        plugin_type: names::PluginType,
        dirs: Vec<PathBuf>,
        /// `chrootDir`, when plugins are looked up under it.
        root: Option<PathBuf>,
        /// Files of that name that cannot be run, and why.
        skipped: Vec<(PathBuf, Unusable)>,
    },
    /// The child could not be set up to chroot into `chrootDir`.
    ChrootDir { root: PathBuf, reason: String },
    /// The binary could not be started.
    Spawn {
        plugin_type: names::PluginType,
        binary: PathBuf,
        reason: String,
    },
    /// Talking to the plugin failed (`what`: stdin, stdout, wait).
    Io {
        plugin_type: names::PluginType,
        what: &'static str,
        reason: String,
    },
    /// The plugin did not finish in time and was killed.
    Timeout {
        plugin_type: names::PluginType,
        binary: PathBuf,
        command: CniCommand,
        timeout: Duration,
        /// The tail of what it wrote to stderr before it was killed.
        stderr: String,
    },
    /// The plugin's error result (cni-SPEC §5 "Error").
    Replied {
        plugin_type: names::PluginType,
        code: u32,
        msg: String,
        details: String,
    },
    /// The plugin exited non-zero without an error result.
    Exited {
        plugin_type: names::PluginType,
        status: i32,
        printed: Printed,
    },
    /// The plugin was killed by a signal.
    Killed {
        plugin_type: names::PluginType,
        signal: i32,
        printed: Printed,
    },
    /// ADD succeeded but printed no result.
    NoResult { plugin_type: names::PluginType },
    /// ADD's result is not JSON.
    NotJson {
        plugin_type: names::PluginType,
        reason: String,
        stdout: String,
    },
    /// ADD's result is JSON but not a valid result (the protocol crate's
    /// error, naming the field).
    BadResult {
        plugin_type: names::PluginType,
        error: CniError,
    },
}

/// As the CNI error it answers with.
impl fmt::Display for ExecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let answer: CniError = self.clone().into();
        answer.fmt(f)
    }
}

impl std::error::Error for ExecError {}

impl ExecError {
    /// Whether the CNI error this converts to starts its details with the
    /// plugin type (so a caller naming the plugin does not name it twice):
    /// every failure but a bad `type` or `chrootDir`.
    pub fn names_plugin(&self) -> bool {
        !matches!(self, ExecError::PluginType(_) | ExecError::ChrootDir { .. })
    }
}

/// The first 200 characters of a text, for error messages.
pub(crate) fn snippet(s: &str) -> String {
    if s.chars().count() <= 200 {
        return s.to_string();
    }
    let cut: String = s.chars().take(200).collect();
    format!("{cut}...")
}

/// `{plugin_type}: {how it ended}` and what it printed.
fn ended(plugin_type: &str, how: String, printed: &Printed) -> String {
    let mut details = format!("{plugin_type}: {how}");
    if !printed.stderr.is_empty() {
        details.push_str(&format!("; stderr: {}", printed.stderr));
    }
    if !printed.stdout.is_empty() {
        details.push_str(&format!(
            "; stdout is not a CNI error: {}",
            snippet(&printed.stdout)
        ));
    }
    details
}

impl From<ExecError> for CniError {
    fn from(e: ExecError) -> CniError {
        let failed =
            |msg: &str, details: String| CniError::plugin(codes::PLUGIN_FAILED, msg, details);
        match e {
            ExecError::PluginType(reason) => CniError::invalid_config("type", reason),
            ExecError::NotFound {
                plugin_type,
                dirs,
                root,
                skipped,
            } => {
                let searched = if dirs.is_empty() {
                    "no directory (CNI_PATH is empty)".to_string()
                } else {
                    dirs.iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(":")
                };
                let mut details =
                    format!("{plugin_type}: no executable named {plugin_type:?} in {searched}");
                if let Some(root) = root {
                    details.push_str(&format!(" under chrootDir {}", root.display()));
                }
                if !skipped.is_empty() {
                    let skipped: Vec<String> = skipped
                        .iter()
                        .map(|(path, why)| format!("{} {why}", path.display()))
                        .collect();
                    details.push_str(&format!(" ({})", skipped.join("; ")));
                }
                failed("failed to find plugin", details)
            }
            ExecError::ChrootDir { root, reason } => {
                CniError::invalid_config("chrootDir", format!("{}: {reason}", root.display()))
            }
            ExecError::Spawn {
                plugin_type,
                binary,
                reason,
            } => failed(
                "failed to run plugin",
                format!("{plugin_type}: {}: {reason}", binary.display()),
            ),
            ExecError::Io {
                plugin_type,
                what,
                reason,
            } => CniError::io(format!("{plugin_type}: {what}"), reason),
            ExecError::Timeout {
                plugin_type,
                binary,
                command,
                timeout,
                stderr,
            } => failed(
                "plugin timed out",
                ended(
                    &plugin_type,
                    format!(
                        "{} {command} did not finish within {timeout:?} and was killed",
                        binary.display()
                    ),
                    &Printed {
                        stderr,
                        stdout: String::new(),
                    },
                ),
            ),
            ExecError::Replied {
                plugin_type,
                code,
                msg,
                details,
            } => {
                let details = if details.is_empty() {
                    format!("{plugin_type}: {msg}")
                } else {
                    format!("{plugin_type}: {details}")
                };
                CniError::new(ErrorCode::from_u32(code), msg, details)
            }
            ExecError::Exited {
                plugin_type,
                status,
                printed,
            } => failed(
                "plugin failed",
                ended(
                    &plugin_type,
                    format!("exited with status {status}"),
                    &printed,
                ),
            ),
            ExecError::Killed {
                plugin_type,
                signal,
                printed,
            } => failed(
                "plugin failed",
                ended(&plugin_type, format!("killed by signal {signal}"), &printed),
            ),
            ExecError::NoResult { plugin_type } => CniError::decode(
                format!("{plugin_type}: result"),
                "the plugin exited 0 but printed no result on ADD",
            ),
            ExecError::NotJson {
                plugin_type,
                reason,
                stdout,
            } => CniError::decode(
                format!("{plugin_type}: result"),
                format!("not JSON ({reason}): {}", snippet(&stdout)),
            ),
            ExecError::BadResult { plugin_type, error } => {
                error.within(format!("{plugin_type}: result"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_has_one_code() {
        let t = || names::PluginType::new("p").unwrap();
        let failed = ErrorCode::Plugin(codes::PLUGIN_FAILED);
        let exec = [
            (ExecError::PluginType("r".into()), ErrorCode::InvalidConfig),
            (
                ExecError::NotFound {
                    plugin_type: t(),
                    dirs: vec![],
                    root: None,
                    skipped: vec![],
                },
                failed,
            ),
            (
                ExecError::ChrootDir {
                    root: "/h".into(),
                    reason: "r".into(),
                },
                ErrorCode::InvalidConfig,
            ),
            (
                ExecError::Spawn {
                    plugin_type: t(),
                    binary: "/b/p".into(),
                    reason: "r".into(),
                },
                failed,
            ),
            (
                ExecError::Io {
                    plugin_type: t(),
                    what: "stdout",
                    reason: "r".into(),
                },
                ErrorCode::Io,
            ),
            (
                ExecError::Timeout {
                    plugin_type: t(),
                    binary: "/b/p".into(),
                    command: CniCommand::Add,
                    timeout: Duration::from_secs(1),
                    stderr: String::new(),
                },
                failed,
            ),
            (
                ExecError::Replied {
                    plugin_type: t(),
                    code: 11,
                    msg: "m".into(),
                    details: String::new(),
                },
                ErrorCode::TryAgainLater,
            ),
            (
                ExecError::Exited {
                    plugin_type: t(),
                    status: 1,
                    printed: Printed::default(),
                },
                failed,
            ),
            (
                ExecError::Killed {
                    plugin_type: t(),
                    signal: 9,
                    printed: Printed::default(),
                },
                failed,
            ),
            (ExecError::NoResult { plugin_type: t() }, ErrorCode::Decode),
            (
                ExecError::NotJson {
                    plugin_type: t(),
                    reason: "r".into(),
                    stdout: "x".into(),
                },
                ErrorCode::Decode,
            ),
        ];
        for (e, code) in exec {
            let answer = CniError::from(e.clone());
            assert_eq!(answer.code, code, "{e:?}");
            // What the executor relies on not to name the plugin twice.
            assert_eq!(
                e.names_plugin(),
                answer.details.starts_with("p: "),
                "{answer}"
            );
        }
    }
}
