//! Where one plugin call's time goes: with `PLEXUS_PHASES=<file>` in its
//! environment, a plugin process appends one JSON line to that file as it
//! exits, `{"pid":…,"command":"ADD","marks":[["main",ns],["conf",ns],…]}`:
//! each mark is the moment (CLOCK_MONOTONIC, in nanoseconds, the clock a
//! caller on the same machine reads too) the phase of that name ended, so
//! the time between two marks is the later one's. The same name may come
//! more than once; a reader sums them. Work of one kind that happens inside
//! several phases (API requests, record writes, exec'd plugins) is a span,
//! `["name", start, end]` in `spans`, whose time a reader takes out of the
//! phase it fell in. `plexus-bench` reads these (docs/benchmarks.md,
//! "Where a thin ADD's time goes").
//!
//! Without the variable a mark costs one relaxed atomic load. Only plugin
//! processes mark: the daemon never sets it up.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// The variable naming the file.
pub const PHASES_ENV: &str = "PLEXUS_PHASES";

static ON: AtomicBool = AtomicBool::new(false);
static FILE: OnceLock<PathBuf> = OnceLock::new();
static MARKS: Mutex<Vec<(&'static str, u64)>> = Mutex::new(Vec::new());
static SPANS: Mutex<Vec<(&'static str, u64, u64)>> = Mutex::new(Vec::new());

/// Start marking when the environment asks for it; the first mark,
/// `main`, is now.
pub fn start() {
    let Some(file) = std::env::var_os(PHASES_ENV).filter(|f| !f.is_empty()) else {
        return;
    };
    let _ = FILE.set(PathBuf::from(file));
    ON.store(true, Ordering::Relaxed);
    mark("main");
}

/// The phase `name` ends now.
#[inline]
pub fn mark(name: &'static str) {
    if ON.load(Ordering::Relaxed) {
        let now = now_ns();
        MARKS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((name, now));
    }
}

/// Work of kind `name`, from now until the span is dropped.
#[must_use = "the span ends when dropped"]
pub struct Span {
    name: &'static str,
    start: u64,
}

/// Start a span of `name`; `None` (nothing to do) when not marking.
#[inline]
pub fn span(name: &'static str) -> Option<Span> {
    ON.load(Ordering::Relaxed).then(|| Span {
        name,
        start: now_ns(),
    })
}

impl Drop for Span {
    fn drop(&mut self) {
        let end = now_ns();
        SPANS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((self.name, self.start, end));
    }
}

/// Append this call's marks to the file (best effort: a profile never
/// fails a call).
pub fn finish() {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    mark("exit");
    let Some(path) = FILE.get() else { return };
    let marks = std::mem::take(&mut *MARKS.lock().unwrap_or_else(|p| p.into_inner()));
    let spans = std::mem::take(&mut *SPANS.lock().unwrap_or_else(|p| p.into_inner()));
    let line = serde_json::json!({
        "pid": std::process::id(),
        "command": std::env::var("CNI_COMMAND").unwrap_or_default(),
        "marks": marks,
        "spans": spans,
    });
    let mut text = line.to_string();
    text.push('\n');
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = file.write_all(text.as_bytes());
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds.
pub fn now_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_appended_as_one_line_at_the_end() {
        let file = tempfile::NamedTempFile::new().unwrap();
        // Not started: nothing is kept.
        mark("ignored");
        assert!(MARKS.lock().unwrap().is_empty());
        let _ = FILE.set(file.path().to_path_buf());
        ON.store(true, Ordering::Relaxed);
        mark("conf");
        drop(span("record write"));
        mark("record");
        finish();
        ON.store(false, Ordering::Relaxed);
        let text = std::fs::read_to_string(file.path()).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        let names: Vec<&str> = v["marks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m[0].as_str().unwrap())
            .collect();
        assert_eq!(names, ["conf", "record", "exit"]);
        let times: Vec<u64> = v["marks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m[1].as_u64().unwrap())
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        let span = &v["spans"][0];
        assert_eq!(span[0], "record write");
        assert!(span[1].as_u64() <= span[2].as_u64() && span[2].as_u64() <= Some(times[1]));
    }
}
