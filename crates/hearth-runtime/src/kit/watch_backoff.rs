//! When a watch fails, how long before it is tried again.
//!
//! kube's default (client-go's: 0.8 s doubling to 30 s) waits 0.8 s even after the
//! first error in a long while. The most common such error is benign: the apiserver
//! answers a watch with 410 `Expired` ("too old resource version") when the version
//! it was started from has left the watch cache (seen right after a controller starts,
//! between its list and its watch), and the cure is an immediate re-list. Waiting 0.8 s
//! for it left every cluster created meanwhile unprobed for 0.8–2 s
//! (bench-results/2026-11-25/size/SUMMARY.md, "watch failed" in the discovery log).
//!
//! So the first error after [`CALM`] without errors is retried at once; an error
//! within [`CALM`] of the last one gets kube's schedule, which is what protects the
//! apiserver from a watch that keeps failing (at most one extra re-list per [`CALM`]).

use std::time::Duration;

use kube::runtime::utils::Backoff;
use kube::runtime::watcher::DefaultBackoff;
use tokio::time::Instant;

/// How long without a watch error makes the next one "first" again.
pub const CALM: Duration = Duration::from_secs(10);

/// [`DefaultBackoff`], but the first error after [`CALM`] is retried at once.
#[derive(Default)]
pub struct WatchBackoff {
    inner: DefaultBackoff,
    last_error: Option<Instant>,
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let now = Instant::now();
        let first = self
            .last_error
            .is_none_or(|last| now.duration_since(last) >= CALM);
        self.last_error = Some(now);
        if first {
            self.inner.reset();
            Some(Duration::ZERO)
        } else {
            self.inner.next()
        }
    }
}

impl Backoff for WatchBackoff {
    // kube's stream resets the backoff on every event that is not an error; the time
    // of the last error is kept, so a watch that lists fine and then fails again within
    // CALM still waits.
    fn reset(&mut self) {
        self.inner.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_first_error_after_a_calm_is_retried_at_once_and_repeats_back_off() {
        let mut backoff = WatchBackoff::default();
        assert_eq!(backoff.next(), Some(Duration::ZERO), "first error ever");

        // Failing again at once, even with events in between: kube's schedule.
        backoff.reset();
        let second = backoff.next().unwrap();
        assert!(second >= Duration::from_millis(800), "{second:?}");
        let third = backoff.next().unwrap();
        assert!(third >= Duration::from_millis(1600), "{third:?}");

        tokio::time::advance(CALM - Duration::from_millis(1)).await;
        assert!(
            backoff.next().unwrap() >= Duration::from_millis(800),
            "within the calm"
        );

        tokio::time::advance(CALM).await;
        assert_eq!(backoff.next(), Some(Duration::ZERO), "after a calm");
        let after = backoff.next().unwrap();
        assert!(
            (Duration::from_millis(800)..=Duration::from_millis(1600)).contains(&after),
            "the schedule starts over after a calm: {after:?}"
        );
    }
}
