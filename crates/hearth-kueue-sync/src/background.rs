//! What the background writers ([`crate::statuses`], [`crate::new_flavors`]) share: a
//! reconcile hands them writes and plans on, and [`WRITES_IN_FLIGHT`] workers write
//! them, which is what protects the apiserver. Each keeps its own state of what was
//! handed over, remembered until the cache shows it; a failed write waits for its
//! object's backoff and then wakes a reconcile, which asks for it again.

use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use hearth_runtime::kit::{Backoff, Cache, Changes, WRITES_IN_FLIGHT};
use kube::Resource;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::apply::Writer;

/// One background writer: what its workers share. `K`: the kind it writes, whose cache
/// shows its writes; `S`: its state.
pub(crate) struct Background<K, S>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    pub writer: Writer,
    pub cache: Cache<K>,
    leader: watch::Receiver<bool>,
    /// Wakes a reconcile when a failed write is due again.
    changes: Changes,
    /// Wakes a worker when a write waits.
    pub ready: Notify,
    backoff: Backoff,
    state: Mutex<S>,
}

impl<K, S> Background<K, S>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
    S: Default + Send + 'static,
{
    /// Starts [`WRITES_IN_FLIGHT`] workers, each running `work` for good.
    pub fn spawn<W, F>(
        writer: Writer,
        cache: Cache<K>,
        leader: watch::Receiver<bool>,
        changes: Changes,
        work: W,
    ) -> Arc<Self>
    where
        W: Fn(Arc<Self>) -> F,
        F: Future<Output = ()> + Send + 'static,
    {
        let background = Arc::new(Self {
            writer,
            cache,
            leader,
            changes,
            ready: Notify::new(),
            backoff: Backoff::default(),
            state: Mutex::default(),
        });
        for _ in 0..WRITES_IN_FLIGHT {
            tokio::spawn(work(background.clone()));
        }
        background
    }

    pub fn lock(&self) -> MutexGuard<'_, S> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether this replica leads: a standby writes nothing.
    pub fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    /// A write of `name` succeeded: its backoff starts over.
    pub fn succeeded(&self, name: &str) {
        self.backoff.succeeded(&name.to_owned());
    }

    /// A write of `name` failed: when it is due again. A reconcile is woken then, to plan
    /// it and ask for it again.
    pub fn failed(&self, name: &str) -> Instant {
        let delay = self.backoff.failed(name.to_owned());
        self.changes.bump_after(delay);
        Instant::now() + delay
    }
}
