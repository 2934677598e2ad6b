//! When to reconcile: the change signal every watch bumps, the resync interval,
//! leadership gained, a debounce, and the one retry policy ([`Backoff`]).

use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[cfg(doc)]
use super::ControllerMetrics;
use super::FailureReason;

/// Bumped on every change any watch delivers. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Changes(watch::Sender<u64>);

impl Default for Changes {
    fn default() -> Self {
        Self(watch::Sender::new(0))
    }
}

impl Changes {
    pub fn bump(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Bumps once `delay` has passed, from a task of its own: a wake-up at a moment no
    /// watched change marks (a deadline, a retry). Abort the task to cancel it.
    pub fn bump_after(&self, delay: Duration) -> tokio::task::JoinHandle<()> {
        let changes = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            changes.bump();
        })
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }

    /// Waits until `ready()` holds, re-checking on every change, for at most `timeout`.
    /// Returns whether it holds. This is how a reconcile waits for the caches to show
    /// its own writes (see [`Cache::shows`](super::Cache::shows)).
    pub async fn wait_until(&self, timeout: Duration, ready: impl Fn() -> bool) -> bool {
        let mut changes = self.subscribe();
        let deadline = Instant::now() + timeout;
        loop {
            changes.borrow_and_update();
            if ready() {
                return true;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return ready(),
            }
        }
    }
}

/// The one retry policy: exponential per object (1 s, 2 s, 4 s, … capped at a
/// minute), reset by a success. Per object, so one broken cluster never slows the
/// others; exponential with a cap, so a persistent failure costs a request a minute
/// while a blip is retried within a second.
#[derive(Debug)]
pub struct Backoff<Key = String> {
    failures: Mutex<HashMap<Key, u32>>,
}

impl<Key> Default for Backoff<Key> {
    fn default() -> Self {
        Self {
            failures: Mutex::new(HashMap::new()),
        }
    }
}

/// First retry delay after a failure.
pub const RETRY_MIN: Duration = Duration::from_secs(1);
/// Longest retry delay after consecutive failures.
pub const RETRY_MAX: Duration = Duration::from_secs(60);

/// The delay after `failures` consecutive failures (1 for the first).
pub fn retry_delay(failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(16);
    (RETRY_MIN * (1u32 << exponent)).min(RETRY_MAX)
}

impl<Key: Eq + Hash> Backoff<Key> {
    /// Counts a failure of `key`; returns when to retry it.
    pub fn failed(&self, key: Key) -> Duration {
        let mut failures = crate::mutex::lock(&self.failures);
        let count = failures.entry(key).or_insert(0);
        *count = count.saturating_add(1);
        retry_delay(*count)
    }

    /// Forgets the failures of `key` (soft state: losing it only resets a backoff).
    pub fn succeeded(&self, key: &Key) {
        crate::mutex::lock(&self.failures).remove(key);
    }
}

/// What starts a global reconcile (one that looks at every object at once).
pub struct Triggers {
    pub changes: watch::Receiver<u64>,
    pub leader: watch::Receiver<bool>,
    pub resync: Duration,
    /// How long a trigger waits for more changes: a burst becomes one reconcile.
    pub debounce: Duration,
    pub shutdown: CancellationToken,
}

impl Triggers {
    /// Runs `reconcile` at once, then on every trigger until shutdown. A failure is
    /// retried after [`Backoff`] (sooner if anything triggers); changes during a
    /// reconcile start another one after it. Metrics and span are the caller's (a
    /// sweep is not a reconcile): see [`ControllerMetrics::reconcile`].
    pub async fn run<T, E, F, Fut>(mut self, mut reconcile: F)
    where
        E: FailureReason + Display,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let backoff = Backoff::<()>::default();
        let mut resync = tokio::time::interval(self.resync);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        resync.reset();
        let mut retry_at: Option<Instant> = None;
        let mut first = true;
        loop {
            if !first {
                tokio::select! {
                    () = self.shutdown.cancelled() => return,
                    changed = self.changes.changed() => if changed.is_err() { return },
                    changed = self.leader.changed() => if changed.is_err() { return },
                    _ = resync.tick() => {}
                    () = sleep_until(retry_at) => {}
                }
                tokio::select! {
                    () = self.shutdown.cancelled() => return,
                    () = tokio::time::sleep(self.debounce) => {}
                }
            }
            first = false;
            self.changes.borrow_and_update();
            self.leader.borrow_and_update();
            match reconcile().await {
                Ok(_) => {
                    backoff.succeeded(&());
                    retry_at = None;
                }
                Err(error) => {
                    let delay = backoff.failed(());
                    tracing::warn!(
                        reason = error.reason(),
                        error = %error,
                        retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                        "reconcile failed"
                    );
                    retry_at = Some(Instant::now() + delay);
                }
            }
        }
    }
}

/// Waits until `at`, or forever when `None` (a `select!` branch that never fires).
pub(super) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_up_to_a_minute() {
        let seen: Vec<u64> = (1..=9).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(seen, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(retry_delay(u32::MAX), RETRY_MAX);
    }

    #[test]
    fn backoff_is_per_key_and_reset_by_success() {
        let backoff = Backoff::default();
        assert_eq!(backoff.failed("a"), Duration::from_secs(1));
        assert_eq!(backoff.failed("a"), Duration::from_secs(2));
        assert_eq!(backoff.failed("b"), Duration::from_secs(1), "per key");
        backoff.succeeded(&"a");
        assert_eq!(backoff.failed("a"), Duration::from_secs(1));
    }

    #[tokio::test]
    async fn waiting_for_a_condition_wakes_on_changes() {
        let changes = Changes::default();
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let setter = {
            let (changes, flag) = (changes.clone(), flag.clone());
            tokio::spawn(async move {
                tokio::task::yield_now().await;
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                changes.bump();
            })
        };
        let held = changes
            .wait_until(Duration::from_secs(10), || {
                flag.load(std::sync::atomic::Ordering::SeqCst)
            })
            .await;
        assert!(held);
        setter.await.unwrap();
        assert!(
            !changes
                .wait_until(Duration::from_millis(10), || false)
                .await,
            "false once the deadline passes"
        );
    }
}
