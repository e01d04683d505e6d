//! An exec'd plugin's stderr, passed on (cni-SPEC §4: "plugins may log to
//! stderr") without ever holding up the call.
//!
//! Each plugin's stderr pipe is drained by a reader thread of its own, which
//! keeps the tail for error messages and queues what it read for one
//! process-wide writer thread. The reader never waits for the destination,
//! and no lock it needs is held across a plugin call: the queue's lock is
//! held only to push or pop, and [`StderrSink::Passthrough`] writes to file
//! descriptor 2 directly, not through `std::io::stderr()`, whose lock a
//! caller (or a log sink) may hold while the plugin runs. A destination that
//! stops reading costs the plugin's output beyond [`MAX_QUEUED`] bytes (and
//! says how much was dropped), never the call: while the queue is full the
//! reader waits for the writer, and drops output only once the writer has
//! made no progress for [`STALLED`].
//!
//! Once the plugin has exited, the call waits at most [`LINGER`] for its
//! stderr to close (a helper it started may keep it open) and for what was
//! read to be written, so a thin call's output is out before its process
//! exits, in order, before plexus's own answer.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::cni::call_log::CallLog;

/// How much of a plugin's stderr is kept for the error message.
pub(super) const STDERR_TAIL: usize = 2048;

/// Output waiting for the writer, at most: beyond it, output is dropped
/// (and counted) rather than making a plugin wait on a full pipe.
pub const MAX_QUEUED: usize = 1 << 20;

/// A destination that took nothing for this long while the queue was full
/// is not reading: output is dropped until it does.
const STALLED: Duration = Duration::from_millis(200);

/// How long a call waits, once its plugin has exited, for the plugin's
/// stderr to close and be written out.
pub const LINGER: Duration = Duration::from_millis(250);

/// A line longer than this is logged in pieces of this size.
const MAX_LINE: usize = 8 << 10;

/// Where exec'd plugins' stderr goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StderrSink {
    /// Unchanged to this process's stderr, as libcni passes a plugin's
    /// stderr to the runtime: a thin call's runtime reads it there.
    #[default]
    Passthrough,
    /// A line at a time into this process's log (target
    /// [`crate::cni::call_log::PLUGIN_STDERR_TARGET`]), naming the plugin,
    /// the pod, the container, the network and the interface: the daemon's
    /// calls, whose stderr nobody reads as a plugin's.
    Log,
}

/// One plugin run's destination: the sink, and for [`StderrSink::Log`]
/// whose output it is.
#[derive(Debug, Clone)]
pub(super) enum Destination {
    Passthrough,
    Log { plugin_type: String, call: CallLog },
}

/// The copying of one plugin's stderr, started by [`copy`].
pub(super) struct StderrCopy {
    tail: Arc<Mutex<Vec<u8>>>,
    /// The sequence number of the last piece queued, once stderr closed.
    closed: mpsc::Receiver<u64>,
}

/// Start draining `pipe` to `to`.
pub(super) fn copy(mut pipe: impl Read + Send + 'static, to: Destination) -> StderrCopy {
    let tail = Arc::new(Mutex::new(Vec::new()));
    let (closed_tx, closed) = mpsc::channel();
    let kept = tail.clone();
    let to = Arc::new(to);
    thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        let mut pending = Vec::new();
        let mut last = 0;
        loop {
            let n = match pipe.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            keep_tail(&mut lock(&kept), &chunk[..n]);
            match *to {
                // Raw bytes as they come: prompt even without a newline.
                Destination::Passthrough => last = forwarder().push(&to, chunk[..n].to_vec()),
                Destination::Log { .. } => {
                    pending.extend_from_slice(&chunk[..n]);
                    if let Some(lines) = whole_lines(&mut pending) {
                        last = forwarder().push(&to, lines);
                    }
                }
            }
        }
        if !pending.is_empty() {
            last = forwarder().push(&to, pending);
        }
        let _ = closed_tx.send(last);
    });
    StderrCopy { tail, closed }
}

impl StderrCopy {
    /// Wait until stderr closed and what it said is written, but not past
    /// `until`; the tail read so far. A reader left behind (a helper holds
    /// the pipe) goes on copying until the pipe closes.
    pub(super) fn finish(self, until: Instant) -> Vec<u8> {
        let remaining = || until.saturating_duration_since(Instant::now());
        if let Ok(last) = self.closed.recv_timeout(remaining()) {
            forwarder().written_up_to(last, until);
        }
        std::mem::take(&mut *lock(&self.tail))
    }
}

fn keep_tail(tail: &mut Vec<u8>, bytes: &[u8]) {
    tail.extend_from_slice(bytes);
    if tail.len() > STDERR_TAIL {
        tail.drain(..tail.len() - STDERR_TAIL);
    }
}

/// The whole lines at the start of `pending` (all of it once it is too long
/// for a line), taken out of it.
fn whole_lines(pending: &mut Vec<u8>) -> Option<Vec<u8>> {
    let end = match pending.iter().rposition(|&b| b == b'\n') {
        Some(newline) => newline + 1,
        None if pending.len() >= MAX_LINE => pending.len(),
        None => return None,
    };
    let rest = pending.split_off(end);
    Some(std::mem::replace(pending, rest))
}

/// The process-wide writer: a bounded queue of pieces and the thread that
/// writes them out.
struct Forwarder {
    queue: Mutex<Queue>,
    /// Signalled when a piece is queued (the writer waits on it) and when
    /// one is written (calls finishing wait on it).
    changed: Condvar,
}

#[derive(Default)]
struct Queue {
    pieces: VecDeque<(u64, Arc<Destination>, Vec<u8>)>,
    bytes: usize,
    /// The sequence number of the last piece queued, and of the last written.
    queued: u64,
    written: u64,
    /// Bytes dropped since the last note saying so, and where the note goes
    /// (where the last of them would have gone).
    dropped: usize,
    dropped_from: Option<Arc<Destination>>,
}

fn forwarder() -> &'static Forwarder {
    static FORWARDER: OnceLock<&'static Forwarder> = OnceLock::new();
    FORWARDER.get_or_init(|| {
        let forwarder: &'static Forwarder = Box::leak(Box::new(Forwarder {
            queue: Mutex::default(),
            changed: Condvar::new(),
        }));
        thread::Builder::new()
            .name("plugin-stderr".into())
            .spawn(move || forwarder.write_forever())
            .expect("a thread for plugins' stderr");
        forwarder
    })
}

impl Forwarder {
    /// Queue `bytes` for `to`; the sequence number a finishing call waits
    /// for. While the queue is full, wait for the writer, but drop `bytes`
    /// (counted) once it has written nothing for [`STALLED`].
    fn push(&self, to: &Arc<Destination>, bytes: Vec<u8>) -> u64 {
        let mut queue = lock(&self.queue);
        while queue.bytes > 0 && queue.bytes + bytes.len() > MAX_QUEUED {
            let written = queue.written;
            let (waited, timeout) = self
                .changed
                .wait_timeout(queue, STALLED)
                .unwrap_or_else(|p| p.into_inner());
            queue = waited;
            if timeout.timed_out() && queue.written == written {
                queue.dropped += bytes.len();
                queue.dropped_from = Some(to.clone());
                return queue.queued;
            }
        }
        queue.queued += 1;
        let seq = queue.queued;
        queue.bytes += bytes.len();
        queue.pieces.push_back((seq, to.clone(), bytes));
        self.changed.notify_all();
        seq
    }

    /// Wait until piece `seq` is written, but not past `until`.
    fn written_up_to(&self, seq: u64, until: Instant) {
        let mut queue = lock(&self.queue);
        while queue.written < seq {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            queue = self
                .changed
                .wait_timeout(queue, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn write_forever(&self) {
        loop {
            let (seq, to, bytes) = {
                let mut queue = lock(&self.queue);
                while queue.pieces.is_empty() && queue.dropped_from.is_none() {
                    queue = self.changed.wait(queue).unwrap_or_else(|p| p.into_inner());
                }
                match queue.pieces.pop_front() {
                    Some((seq, to, bytes)) => {
                        queue.bytes -= bytes.len();
                        (seq, to, bytes)
                    }
                    // Said once the queue has room again.
                    None => {
                        let dropped = std::mem::take(&mut queue.dropped);
                        let note = format!(
                            "plexus: {dropped} bytes of exec'd plugins' stderr were dropped: \
                             more than {MAX_QUEUED} bytes waited to be written\n"
                        );
                        let to = queue.dropped_from.take().expect("dropped output");
                        (queue.written, to, note.into_bytes())
                    }
                }
            };
            match &*to {
                Destination::Passthrough => write_fd2(&bytes),
                Destination::Log { plugin_type, call } => {
                    for line in String::from_utf8_lossy(&bytes).lines() {
                        call.plugin_stderr(plugin_type, line);
                    }
                }
            }
            lock(&self.queue).written = seq;
            self.changed.notify_all();
        }
    }
}

/// Write to file descriptor 2 itself: `std::io::stderr()` would take its
/// process-wide lock, which the caller of a plugin may hold.
fn write_fd2(bytes: &[u8]) {
    // SAFETY: descriptor 2 is open for the life of the process; ManuallyDrop
    // keeps this handle from closing it.
    let mut fd2 = ManuallyDrop::new(unsafe { File::from_raw_fd(2) });
    let _ = fd2.write_all(bytes);
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_bytes() {
        let mut tail = Vec::new();
        keep_tail(&mut tail, &[b'a'; STDERR_TAIL]);
        keep_tail(&mut tail, b"xyz");
        assert_eq!(tail.len(), STDERR_TAIL);
        assert!(tail.ends_with(b"axyz"));
    }

    #[test]
    fn lines_are_taken_whole_and_an_overlong_one_in_pieces() {
        let mut pending = b"one\ntwo\nthr".to_vec();
        assert_eq!(whole_lines(&mut pending).unwrap(), b"one\ntwo\n");
        assert_eq!(pending, b"thr");
        assert_eq!(whole_lines(&mut pending), None);
        let mut long = vec![b'x'; MAX_LINE];
        assert_eq!(whole_lines(&mut long).unwrap().len(), MAX_LINE);
        assert!(long.is_empty());
    }

    #[test]
    fn a_stuck_destination_drops_output_rather_than_blocking_the_reader() {
        // A queue full and not drained (no writer) takes nothing more once
        // it stalled, and counts what it turned away.
        let full = Forwarder {
            queue: Mutex::new(Queue {
                bytes: MAX_QUEUED,
                ..Queue::default()
            }),
            changed: Condvar::new(),
        };
        let to = Arc::new(Destination::Passthrough);
        let started = Instant::now();
        assert_eq!(full.push(&to, vec![b'x'; 100]), 0);
        assert!(started.elapsed() >= STALLED);
        assert!(started.elapsed() < plexus_testkit::bound(Duration::from_secs(1)));
        assert_eq!(lock(&full.queue).dropped, 100);
        // And a call waiting for it gives up at its bound.
        let started = Instant::now();
        full.written_up_to(1, Instant::now() + Duration::from_millis(50));
        assert!(started.elapsed() < plexus_testkit::bound(Duration::from_secs(1)));
    }
}
