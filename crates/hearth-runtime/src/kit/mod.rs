//! The controller kit: the plumbing every Hearth controller is built from, so that
//! each controller's `controller.rs` is wiring plus its own plan and apply.
//!
//! - [`Cache`]: one watch feeding one cache (managed fields stripped, undecodable
//!   objects kept as errors and logged once per version, a synced flag any task can
//!   await, a readiness gate, the [`Changes`] signal bumped on every change), retried
//!   by [`WatchBackoff`].
//! - [`Triggers`]: the loop of a global reconcile (change, resync, leadership gained,
//!   debounce) and [`Backoff`], the one retry policy, also used per object by
//!   [`Runner`].
//! - [`ControllerMetrics`]: reconciles, their errors (typed labels) and durations,
//!   watch errors and undecodable objects; a span per reconcile.
//! - [`Runner`]: the per-object run of a controller over FournosClusters, fed by its
//!   cache's watch, related watches mapped to cluster names ([`RunTriggers`]) and
//!   leadership gained: a work queue (never two reconciles of one object at once, a
//!   bounded number at a time, each requeued when its reconcile asks: [`Next`]), and
//!   around each reconcile its span, metrics, failure log (and Event, where asked) and
//!   [`Backoff`], so a controller's `controller.rs` only wires its watches to its
//!   reconcile.
//! - Waiting for one's own write: [`Changes::wait_until`] with [`Cache::shows`], which
//!   compares `resourceVersion`s for equality only.
//! - Events: [`crate::events::Event`] and [`crate::events::Events::publish`].
//! - Write-behind: [`Ledger`], keyed writes handed to the background (coalesced per key,
//!   taken by priority, remembered until the cache shows them, bounded), and
//!   [`WriteBehind`], the writers that drain it with the key's [`Backoff`].
//! - Answers ([`answer`]): what a 404 or 409 means, and the delete that has nothing
//!   left to do ([`answer::is_gone_or_replaced`]).
//! - Views ([`view_of!`](crate::view_of)): a cache holds what its controller reads of a
//!   kind, as a type of its own.

pub mod answer;
mod cache;
mod failure_reason;
mod ledger;
mod metrics;
mod queue;
mod runner;
mod trigger;
mod view;
mod watch_backoff;
mod write_behind;

pub use cache::{
    Cache, CacheGone, ClusterKind, HandFeed, LIST_PAGE, MAX_DECODE_ERROR, Objects, ReportedOnce,
    WatchContext,
};
pub use failure_reason::FailureReason;
pub use ledger::{Ledger, Outcome, Stage, Submitted};
pub use metrics::{ControllerMetrics, KindLabel, ObjectGauges, ReasonLabel};
pub use runner::{Next, RunTriggers, Runner};
pub use trigger::{Backoff, Changes, RETRY_MAX, RETRY_MIN, Triggers, retry_delay};
pub use view::identity;
pub use watch_backoff::{CALM, WatchBackoff};
pub use write_behind::{WriteBehind, Wrote};

/// Writes one controller keeps in flight at once when many objects need one each (a
/// batch of new clusters, flavors or statuses). This is what protects the apiserver:
/// 32 is a sixth of its default `--max-mutating-requests-inflight` (200), so even the
/// three controllers at full tilt leave most of it to everyone else, while a batch of
/// 1000 small writes takes a few dozen round trips instead of a thousand.
pub const WRITES_IN_FLIGHT: usize = 32;

/// Implements [`FailureReason`] for an error type with an inherent `reason()` method (kept
/// inherent so that callers need no trait import), and optionally an inherent `retry()`.
#[macro_export]
macro_rules! impl_reason {
    ($error:ty) => {
        impl $crate::kit::FailureReason for $error {
            fn reason(&self) -> &'static str {
                <$error>::reason(self)
            }
        }
    };
    ($error:ty, retry) => {
        impl $crate::kit::FailureReason for $error {
            fn reason(&self) -> &'static str {
                <$error>::reason(self)
            }

            fn retry(&self) -> bool {
                <$error>::retry(self)
            }
        }
    };
}
