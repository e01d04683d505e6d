//! How the daemon's watches come back after an error, by its kind:
//! - the API server is not there (a connection refused, reset or closed
//!   before an answer, a connection that fails before TLS is up: it is
//!   down or restarting, or a load balancer in front of it has no
//!   backend), or its watch cache no longer has the watch's
//!   resourceVersion (410 Gone: a restarted server), or it answers with an
//!   error within [`STARTING`] of having been away (a starting server
//!   refuses with 403 until its authorizer has synced, or fails with a
//!   5xx): try again, listing anew after a 410, every 250–500 ms,
//!   jittered, for as long as that lasts. A connection that gets nowhere
//!   costs the server nothing, and client-go's reflector does much the same
//!   (a fixed 1 s when refused, a relist at once after a 410). With the
//!   backoff below alone, plexus's watches came back 4–7 s after a
//!   restarted API server was ready, Multus's within one
//!   (`plexus-bench --scale`, issue 34);
//! - any other error (a server that has been answering fails, refuses or
//!   is overloaded; a TLS certificate that does not verify): 250 ms
//!   doubling to at most 2 s, jittered so that a cluster's daemons spread
//!   out, reset after two healthy minutes. kube-rs's default grows to
//!   30 s, and watches came back 5–7.5 s after a restart.

use std::pin::Pin;
use std::time::{Duration, Instant};

use backon::BackoffBuilder;
use futures::{Stream, StreamExt};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::watcher;
use kube::runtime::watcher::ExponentialBackoff;

/// How long after the API server was away its errors are taken for a
/// start's.
const STARTING: Duration = Duration::from_secs(15);

/// The schedules of one watch.
struct Schedules {
    /// When the server was last away.
    away: Option<Instant>,
    /// When the server is away, or a 410 calls for a list.
    prompt: backon::ExponentialBackoff,
    failing: ResetTimerBackoff<ExponentialBackoff>,
}

impl Schedules {
    fn new() -> Schedules {
        let prompt = backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(250))
            .with_max_delay(Duration::from_millis(250))
            .with_factor(1.0)
            .with_jitter()
            .without_max_times()
            .build();
        let failing = backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(250))
            .with_max_delay(Duration::from_secs(2))
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Schedules {
            away: None,
            prompt,
            failing: ResetTimerBackoff::new(
                ExponentialBackoff::from(failing),
                Duration::from_secs(120),
            ),
        }
    }

    /// How long to wait before trying again after `error`.
    fn after(&mut self, error: &watcher::Error) -> Duration {
        let away = server_away(error);
        if away {
            self.away = Some(Instant::now());
        }
        let starting = self.away.is_some_and(|at| at.elapsed() < STARTING);
        let next = if away || starting || resource_version_gone(error) {
            self.prompt.next()
        } else {
            self.failing.next()
        };
        next.unwrap_or(Duration::from_secs(2))
    }
}

/// Whether the connection to the API server got nowhere: among `error`'s
/// causes, a connection refused, reset, aborted or closed before an
/// answer, or one that failed before TLS was up for any reason but a
/// certificate (invalid data).
fn server_away(error: &(dyn std::error::Error + 'static)) -> bool {
    connect_failed(error) || transport_lost(error)
}

fn connect_failed(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    let mut connect = false;
    while let Some(e) = cause {
        if e.downcast_ref::<hyper_util::client::legacy::Error>()
            .is_some_and(|e| e.is_connect())
        {
            connect = true;
        }
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::InvalidData)
        {
            return false;
        }
        cause = e.source();
    }
    connect
}

fn transport_lost(error: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind::{
        BrokenPipe, ConnectionAborted, ConnectionRefused, ConnectionReset, NotConnected,
        UnexpectedEof,
    };
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                ConnectionRefused
                    | ConnectionReset
                    | ConnectionAborted
                    | NotConnected
                    | BrokenPipe
                    | UnexpectedEof
            ) {
                return true;
            }
        }
        if let Some(http) = e.downcast_ref::<hyper::Error>() {
            if http.is_incomplete_message() || http.is_closed() || http.is_canceled() {
                return true;
            }
        }
        cause = e.source();
    }
    false
}

/// A watch from a resourceVersion the API server's cache no longer has:
/// the watcher lists anew.
fn resource_version_gone(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::WatchError(response) if response.code == 410)
}

/// `events` (a kube-rs watcher), each error followed by the wait its kind
/// calls for before the watcher tries again (it does on the next poll).
pub(crate) fn reconnecting<S, T>(events: S) -> impl Stream<Item = Result<T, watcher::Error>> + Send
where
    S: Stream<Item = Result<T, watcher::Error>> + Send + 'static,
    T: Send + 'static,
{
    type Events<T> = Pin<Box<dyn Stream<Item = Result<T, watcher::Error>> + Send>>;
    let state: (Events<T>, Schedules, Option<Duration>) = (events.boxed(), Schedules::new(), None);
    futures::stream::unfold(state, |(mut events, mut schedules, wait)| async move {
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
        let event = events.next().await?;
        let wait = event.as_ref().err().map(|e| schedules.after(e));
        Some((event, (events, schedules, wait)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_away_is_told_apart_through_the_causes() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let wrapped = kube::Error::Service(Box::new(refused));
        let error = watcher::Error::WatchStartFailed(wrapped);
        assert!(server_away(&error));
        let reset = kube::Error::Service(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        )));
        assert!(server_away(&watcher::Error::WatchFailed(reset)));
        let tls = kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "invalid peer certificate",
        )));
        assert!(!server_away(&watcher::Error::InitialListFailed(tls)));
    }

    #[test]
    fn refused_waits_stay_short_and_others_grow_to_the_cap() {
        let mut schedules = Schedules::new();
        let refused = kube::Error::Service(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        let refused = watcher::Error::WatchStartFailed(refused);
        for _ in 0..20 {
            let wait = schedules.after(&refused);
            assert!(
                wait >= Duration::from_millis(250) && wait < Duration::from_millis(500),
                "{wait:?}"
            );
        }
        let gone = watcher::Error::WatchError(
            kube::core::Status::failure("too old resource version", "Expired")
                .with_code(410)
                .boxed(),
        );
        assert!(schedules.after(&gone) < Duration::from_millis(500));
        // Within STARTING of the server being away, its answers are a
        // start's: still prompt.
        assert!(schedules.after(&watcher::Error::NoResourceVersion) < Duration::from_millis(500));
        schedules.away = None;
        let failing = watcher::Error::NoResourceVersion;
        let waits: Vec<Duration> = (0..8).map(|_| schedules.after(&failing)).collect();
        assert!(waits[0] < Duration::from_millis(500), "{waits:?}");
        assert!(
            waits[7] >= Duration::from_secs(2) && waits[7] < Duration::from_secs(4),
            "{waits:?}"
        );
    }
}
