//! Logging as Multus users configure it (`logFile`, `logLevel`,
//! `logToStderr`, `logOptions`; Multus's pkg/logging), through `tracing`.
//!
//! A plugin call installs its sinks from its configuration ([`init_call`]):
//! the log file, JSON lines rotated by [`rotate`], and stderr, as text. The
//! daemon and `plexus install` log JSON lines to stderr ([`init_service`])
//! in the same format as the file, so one ADD's events carry the same fields
//! wherever it runs (the fields: [`plexus_cni::call_log`]). Nothing goes to
//! stdout: a plugin's result is printed there.
//!
//! Start-up stays cheap, as every CNI call is a process of its own: without
//! sinks no subscriber is installed at all; with them, they are built at the
//! first event their level lets through (`deferred`) and the file is
//! opened at the first line, so a call that logs nothing pays for neither.

mod deferred;
pub mod rotate;

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use crate::cni::call_log::CALL_FAILED_TARGET;
use crate::cni::error::CniError;
pub use rotate::Rotation;

/// What is wrong with the logging keys of a configuration. The CNI code is
/// chosen in `From<LogError> for CniError` (through the configuration's
/// error, `crate::config::ConfigError::Log`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// A key that parsed but is not valid (`logOptions.maxSize`).
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    /// The protocol crate's failure decoding `logOptions`, naming its path.
    #[error(transparent)]
    Cni(CniError),
}

impl From<LogError> for CniError {
    fn from(e: LogError) -> CniError {
        match e {
            LogError::Invalid { field, reason } => CniError::invalid_config(field, reason),
            LogError::Cni(e) => e,
        }
    }
}

impl LogError {
    pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> LogError {
        LogError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// Multus's `logLevel`s, least verbose first, and what each shows:
///
/// | `logLevel` | tracing levels shown |
/// |---|---|
/// | `panic` | ERROR |
/// | `error` | WARN and ERROR (Multus prints its warnings at `error`) |
/// | `verbose` | INFO and up |
/// | `debug` | DEBUG and up |
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Panic,
    Error,
    Verbose,
    Debug,
}

impl LogLevel {
    pub const ALL: [LogLevel; 4] = [
        LogLevel::Panic,
        LogLevel::Error,
        LogLevel::Verbose,
        LogLevel::Debug,
    ];

    /// Multus's `getLoggingLevel`: the names, in any case.
    pub fn parse(name: &str) -> Option<LogLevel> {
        LogLevel::ALL
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(name))
    }

    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Panic => "panic",
            LogLevel::Error => "error",
            LogLevel::Verbose => "verbose",
            LogLevel::Debug => "debug",
        }
    }

    /// The most verbose tracing level shown.
    pub fn filter(self) -> LevelFilter {
        match self {
            LogLevel::Panic => LevelFilter::ERROR,
            LogLevel::Error => LevelFilter::WARN,
            LogLevel::Verbose => LevelFilter::INFO,
            LogLevel::Debug => LevelFilter::DEBUG,
        }
    }
}

/// A call's logging, from its configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct LogSettings {
    /// `logFile`: JSON lines, rotated by `rotation`.
    pub file: Option<PathBuf>,
    /// `logLevel`; `error` when not given: the warnings a runtime saw on
    /// plexus's stderr before it had these keys (Multus's default, `panic`,
    /// would hide them).
    pub level: LogLevel,
    /// `logLevel` as given when it names no level. Multus says so on stderr
    /// and keeps its default; plexus too, as a warning in the sinks.
    pub unknown_level: Option<String>,
    /// `logToStderr`; true when not given, as in Multus.
    pub to_stderr: bool,
    /// `logOptions`.
    pub rotation: Rotation,
}

impl Default for LogSettings {
    fn default() -> LogSettings {
        LogSettings {
            file: None,
            level: LogLevel::Error,
            unknown_level: None,
            to_stderr: true,
            rotation: Rotation::default(),
        }
    }
}

/// `logOptions` as written: Multus's keys, any JSON value (checked in
/// [`rotation`]).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RawLogOptions {
    max_size: Option<Value>,
    max_age: Option<Value>,
    max_backups: Option<Value>,
    compress: Option<bool>,
}

impl LogSettings {
    /// The settings of a configuration's logging keys; an empty `logFile` or
    /// `logLevel` counts as not given, as in Multus.
    pub fn new(
        file: Option<String>,
        level: Option<String>,
        to_stderr: Option<bool>,
        options: Option<&Value>,
    ) -> Result<LogSettings, LogError> {
        let defaults = LogSettings::default();
        let level = level.filter(|l| !l.is_empty());
        Ok(LogSettings {
            file: file.filter(|f| !f.is_empty()).map(PathBuf::from),
            level: level
                .as_deref()
                .and_then(LogLevel::parse)
                .unwrap_or(defaults.level),
            unknown_level: level.filter(|l| LogLevel::parse(l).is_none()),
            to_stderr: to_stderr.unwrap_or(defaults.to_stderr),
            rotation: match options.filter(|o| !o.is_null()) {
                None => defaults.rotation,
                Some(options) => rotation(options)?,
            },
        })
    }
}

/// `logOptions`: an object of Multus's keys, matched case-insensitively.
fn rotation(options: &Value) -> Result<Rotation, LogError> {
    if !options.is_object() {
        return Err(LogError::invalid(
            "logOptions",
            format!("must be a JSON object, got {options}"),
        ));
    }
    let raw: RawLogOptions =
        crate::cni::casefold::decode(options).map_err(|e| LogError::Cni(e.within("logOptions")))?;
    let defaults = Rotation::default();
    let max_size = match whole("maxSize", raw.max_size, 1, "megabytes")? {
        None => defaults.max_size,
        Some(mb) => mb.checked_mul(rotate::MEGABYTE).ok_or_else(|| {
            LogError::invalid("logOptions.maxSize", format!("{mb} megabytes is too large"))
        })?,
    };
    // 0: no limit, as in lumberjack.
    let max_age = match whole("maxAge", raw.max_age, 0, "days")? {
        None => defaults.max_age,
        Some(0) => None,
        Some(days) => Some(
            u32::try_from(days)
                .ok()
                .and_then(|d| rotate::DAY.checked_mul(d))
                .ok_or_else(|| {
                    LogError::invalid("logOptions.maxAge", format!("{days} days is too long"))
                })?,
        ),
    };
    let max_backups = match whole("maxBackups", raw.max_backups, 0, "files")? {
        None => defaults.max_backups,
        Some(0) => None,
        Some(n) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
    };
    Ok(Rotation {
        max_size,
        max_age,
        max_backups,
        compress: raw.compress.unwrap_or(defaults.compress),
    })
}

/// A `logOptions` count: a whole number, at least `min` (Go decodes these
/// keys into an int and rejects `1.5` and `"10"`).
fn whole(key: &str, value: Option<Value>, min: u64, unit: &str) -> Result<Option<u64>, LogError> {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match value.as_u64() {
        Some(n) if n >= min => Ok(Some(n)),
        _ => Err(LogError::invalid(
            format!("logOptions.{key}"),
            format!(
                "must be a {} integer ({unit}), got {value}",
                if min == 0 { "non-negative" } else { "positive" }
            ),
        )),
    }
}

/// The target of a panic's event (in the log file; stderr has the panic
/// from Rust's own hook).
const PANIC_TARGET: &str = "plexus::panic";

/// Install a plugin call's sinks as the process's subscriber. Without a
/// log file and with `logToStderr: false`, none is installed: events are
/// then dropped where they are made.
pub fn init_call(settings: &LogSettings) {
    if settings.file.is_none() && !settings.to_stderr {
        return;
    }
    let level = settings.level.filter();
    let sinks = settings.clone();
    let deferred = deferred::Deferred::new(level, move || {
        let file = sinks
            .file
            .as_ref()
            .map(|path| json_layer(FileSink::new(path, sinks.rotation)).with_filter(level));
        // The call's own failure is on stderr already, as the runtime reads
        // it (cni-SPEC §5), and so is a panic: only the file gets those.
        let stderr = sinks.to_stderr.then(|| {
            tracing_subscriber::fmt::layer()
                .with_writer(io::stderr)
                .with_filter(
                    Targets::new()
                        .with_default(level)
                        .with_target(CALL_FAILED_TARGET, LevelFilter::OFF)
                        .with_target(PANIC_TARGET, LevelFilter::OFF),
                )
        });
        tracing_subscriber::registry()
            .with(file)
            .with(stderr)
            .into()
    });
    if tracing::subscriber::set_global_default(deferred).is_err() {
        return; // one was installed already (a test harness, say)
    }
    if settings.file.is_some() {
        // Multus logs its panics (`Panicf`, shown at every level); the
        // default hook still prints them on stderr.
        let print = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |panic| {
            tracing::error!(target: PANIC_TARGET, "{panic}");
            print(panic);
        }));
    }
    if let Some(given) = &settings.unknown_level {
        let names: Vec<&str> = LogLevel::ALL.iter().map(|l| l.name()).collect();
        tracing::warn!(
            "logLevel: {given:?} is not one of {}: logging at {:?}",
            names.join(", "),
            settings.level.name()
        );
    }
}

/// A long-running command's log (`plexus daemon`, `plexus install`): JSON
/// lines on stderr, INFO and up.
pub fn init_service() {
    let _ = tracing_subscriber::registry()
        .with(json_layer(io::stderr).with_filter(LevelFilter::INFO))
        .try_init();
}

/// The one JSON format of every log that is read by programs: an object a
/// line with `timestamp`, `level`, `target`, `message` and the event's
/// fields at the top level.
pub fn json_layer<S, W>(writer: W) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_writer(writer)
}

/// `logFile`, opened at its first event.
struct FileSink {
    path: PathBuf,
    rotation: Rotation,
    /// `None` until the first event; `Err` once opening failed (said once).
    file: Mutex<Option<Result<rotate::RotatingFile, ()>>>,
}

impl FileSink {
    fn new(path: &Path, rotation: Rotation) -> FileSink {
        FileSink {
            path: path.to_path_buf(),
            rotation,
            file: Mutex::new(None),
        }
    }

    fn append(&self, line: &[u8]) {
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let opened = file.get_or_insert_with(|| {
            rotate::RotatingFile::open(&self.path, self.rotation)
                .map_err(|e| self.report("cannot be opened", &e))
        });
        if let Ok(log) = opened {
            if let Err(e) = log.append(line) {
                self.report("cannot be written", &e);
            }
        }
    }

    /// The log's own failure cannot go into the log: stderr gets it (never
    /// stdout, the result's).
    fn report(&self, what: &str, e: &io::Error) {
        let _ = writeln!(
            io::stderr(),
            "plexus: logFile {} {what}: {e}",
            self.path.display()
        );
    }
}

impl<'a> MakeWriter<'a> for FileSink {
    type Writer = FileSinkWriter<'a>;

    fn make_writer(&'a self) -> FileSinkWriter<'a> {
        FileSinkWriter(self)
    }
}

/// One event's line: tracing's formatter hands it over in one `write_all`.
struct FileSinkWriter<'a>(&'a FileSink);

impl Write for FileSinkWriter<'_> {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        // Logging never fails the call.
        self.0.append(line);
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_failure_has_one_code() {
        let e = CniError::from(LogError::invalid("logOptions.maxAge", "too long"));
        assert_eq!(e.code, crate::cni::ErrorCode::InvalidConfig);
        assert_eq!(e.details, "logOptions.maxAge: too long");
        // A protocol error passes through unchanged.
        let inner = CniError::invalid_config("logOptions.compress", "invalid type");
        assert_eq!(CniError::from(LogError::Cni(inner.clone())), inner);
    }

    fn options(v: Value) -> Result<LogSettings, LogError> {
        LogSettings::new(Some("/l".into()), None, None, Some(&v))
    }

    #[test]
    fn multus_levels_map_onto_tracing_levels() {
        let want = [
            ("panic", LevelFilter::ERROR),
            ("error", LevelFilter::WARN),
            ("verbose", LevelFilter::INFO),
            ("debug", LevelFilter::DEBUG),
        ];
        for (name, filter) in want {
            let level = LogLevel::parse(name).unwrap();
            assert_eq!(level.filter(), filter, "{name}");
            assert_eq!(level.name(), name);
        }
        // Multus lower-cases the name first.
        assert_eq!(LogLevel::parse("VERBOSE"), Some(LogLevel::Verbose));
        assert_eq!(LogLevel::parse("info"), None);
    }

    #[test]
    fn defaults_are_multus_but_for_the_level() {
        let s = LogSettings::new(None, None, None, None).unwrap();
        assert_eq!(s, LogSettings::default());
        assert!(s.to_stderr);
        assert_eq!(s.level, LogLevel::Error);
        assert_eq!(
            s.rotation,
            Rotation {
                max_size: 100 * rotate::MEGABYTE,
                max_age: Some(5 * rotate::DAY),
                max_backups: Some(5),
                compress: true,
            }
        );
        // Empty strings are unset, as Multus's `!= ""` checks have them.
        let s = LogSettings::new(Some(String::new()), Some(String::new()), None, None).unwrap();
        assert_eq!(s, LogSettings::default());
    }

    #[test]
    fn an_unknown_level_falls_back_and_is_kept_for_the_warning() {
        let s = LogSettings::new(None, Some("loud".into()), Some(false), None).unwrap();
        assert_eq!(s.level, LogLevel::Error);
        assert_eq!(s.unknown_level.as_deref(), Some("loud"));
        assert!(!s.to_stderr);
    }

    #[test]
    fn log_options_are_multus_units_with_zero_meaning_no_limit() {
        let s = options(json!({"maxSize": 2, "MaxAge": 0, "maxBackups": 0, "compress": false}))
            .unwrap();
        assert_eq!(
            s.rotation,
            Rotation {
                max_size: 2 * rotate::MEGABYTE,
                max_age: None,
                max_backups: None,
                compress: false,
            }
        );
        let s = options(json!({"maxAge": 1, "maxBackups": 3, "maxSize": null})).unwrap();
        assert_eq!(s.rotation.max_age, Some(rotate::DAY));
        assert_eq!(s.rotation.max_backups, Some(3));
        assert_eq!(s.rotation.max_size, 100 * rotate::MEGABYTE);
    }

    #[test]
    fn bad_log_options_name_the_key() {
        let cases = [
            (
                json!({"maxSize": 0}),
                "logOptions.maxSize: must be a positive integer (megabytes), got 0",
            ),
            (
                json!({"maxSize": "10"}),
                "logOptions.maxSize: must be a positive integer",
            ),
            (
                json!({"maxSize": 1.5}),
                "logOptions.maxSize: must be a positive integer",
            ),
            (
                json!({"maxSize": u64::MAX}),
                "logOptions.maxSize: 18446744073709551615 megabytes is too large",
            ),
            (
                json!({"maxAge": -1}),
                "logOptions.maxAge: must be a non-negative integer (days), got -1",
            ),
            (
                json!({"maxBackups": true}),
                "logOptions.maxBackups: must be a non-negative integer (files)",
            ),
            (
                json!({"compress": "yes"}),
                "logOptions.compress: invalid type: string \"yes\", expected a boolean",
            ),
            (json!([]), "logOptions: must be a JSON object, got []"),
        ];
        for (input, want) in cases {
            let e = options(input.clone()).unwrap_err();
            let (field, reason) = want.split_once(": ").unwrap();
            let named = match &e {
                LogError::Invalid {
                    field: f,
                    reason: r,
                } => f == field && r.starts_with(reason),
                // Decoding is the protocol crate's; it names the path.
                LogError::Cni(c) => c.details.starts_with(want),
            };
            assert!(named, "{input}: {e:?}");
        }
    }
}
