//! How the daemon's watches come back after an error, by its kind:
//! - the API server refuses connections (it is down, or restarting): try
//!   again every 250–500 ms, jittered, as long as that lasts. A refused
//!   connection costs the server nothing, and client-go's reflector does
//!   the same (a fixed 1 s). With the backoff below alone, plexus's watches
//!   came back 4–6 s after a restarted API server was ready, Multus's
//!   within one (`plexus-bench --scale`, issue 34);
//! - any other error (a server that answers but fails, refuses or is
//!   overloaded): 250 ms doubling to at most 2 s, jittered so that a
//!   cluster's daemons spread out, reset after two healthy minutes.
//!   kube-rs's default grows to 30 s, and watches came back 5–7.5 s after
//!   a restart.

use std::pin::Pin;
use std::time::Duration;

use backon::BackoffBuilder;
use futures::{Stream, StreamExt};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::watcher;
use kube::runtime::watcher::ExponentialBackoff;

/// The schedules of one watch.
struct Schedules {
    refused: backon::ExponentialBackoff,
    failing: ResetTimerBackoff<ExponentialBackoff>,
}

impl Schedules {
    fn new() -> Schedules {
        let refused = backon::ExponentialBuilder::default()
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
            refused,
            failing: ResetTimerBackoff::new(
                ExponentialBackoff::from(failing),
                Duration::from_secs(120),
            ),
        }
    }

    /// How long to wait before trying again after `error`.
    fn after(&mut self, error: &watcher::Error) -> Duration {
        let next = if connection_refused(error) {
            self.refused.next()
        } else {
            self.failing.next()
        };
        next.unwrap_or(Duration::from_secs(2))
    }
}

/// Whether a connection refused is among `error`'s causes.
fn connection_refused(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        cause = e.source();
    }
    false
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
    fn a_refused_connection_is_told_apart_through_the_causes() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let wrapped = kube::Error::Service(Box::new(refused));
        let error = watcher::Error::WatchStartFailed(wrapped);
        assert!(connection_refused(&error));
        let other = kube::Error::Service(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        )));
        assert!(!connection_refused(&watcher::Error::WatchFailed(other)));
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
        let failing = watcher::Error::NoResourceVersion;
        let waits: Vec<Duration> = (0..8).map(|_| schedules.after(&failing)).collect();
        assert!(waits[0] < Duration::from_millis(500), "{waits:?}");
        assert!(
            waits[7] >= Duration::from_secs(2) && waits[7] < Duration::from_secs(4),
            "{waits:?}"
        );
    }
}
