//! Writes in the background: a [`Ledger`] and the tasks that drain it. A controller
//! hands writes over and plans on; a bounded number of writers make them, which is what
//! protects the apiserver. A failed write waits for its key's [`Backoff`] and then wakes
//! a reconcile ([`Changes`]), which asks for it again. A standby writes nothing: what
//! it was handed is dropped, and its leader plans from scratch.

use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::ledger::{Ledger, Outcome, Submitted};
use super::trigger::{Backoff, Changes};

/// How a write ended, as the writer says it ([`Outcome`] without the retry time, which
/// the key's backoff gives).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wrote {
    /// Landed as this version.
    Written(Option<String>),
    /// Failed: asked again after the key's backoff.
    Failed,
    /// Nothing was written (the object is gone).
    Gone,
    /// Nothing to write any more.
    Dropped,
}

/// A ledger, its writers' wake-up, and the retry policy. Shared by the writers.
pub struct WriteBehind<K, W> {
    ledger: Mutex<Ledger<K, W>>,
    ready: Notify,
    backoff: Backoff<K>,
    /// Wakes a reconcile when a failed write is due again; `None`: nothing retries.
    changes: Option<Changes>,
    leader: watch::Receiver<bool>,
}

impl<K, W> WriteBehind<K, W>
where
    K: Clone + Eq + Hash + Send + 'static,
    W: Clone + PartialEq + Send + 'static,
{
    /// A write-behind over `ledger`; its writers start with [`Self::spawn`].
    pub fn new(
        ledger: Ledger<K, W>,
        leader: watch::Receiver<bool>,
        changes: Option<Changes>,
    ) -> Arc<Self> {
        Arc::new(Self {
            ledger: Mutex::new(ledger),
            ready: Notify::new(),
            backoff: Backoff::default(),
            changes,
            leader,
        })
    }

    /// Starts `writers` tasks, each making one write at a time with `write` for good.
    pub fn spawn<F, Fut>(self: &Arc<Self>, writers: usize, write: F)
    where
        Self: Send + Sync,
        F: Fn(K, W) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Wrote> + Send,
    {
        for _ in 0..writers {
            let (this, write) = (self.clone(), write.clone());
            tokio::spawn(async move { this.work(write).await });
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Ledger<K, W>> {
        crate::mutex::lock(&self.ledger)
    }

    /// Hands `write` for `key` over (see [`Ledger::submit`]).
    pub fn submit(&self, key: K, write: W, lane: usize) -> Submitted {
        let submitted = self.lock().submit(key, write, lane, Instant::now());
        if submitted != Submitted::Known {
            self.ready.notify_one();
        }
        submitted
    }

    fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    /// One writer: the next waiting write, then any that arrived for its key meanwhile.
    async fn work<F, Fut>(&self, write: F)
    where
        F: Fn(K, W) -> Fut,
        Fut: Future<Output = Wrote>,
    {
        loop {
            let next = self.lock().take();
            let Some((key, mut said)) = next else {
                self.ready.notified().await;
                continue;
            };
            loop {
                let wrote = if self.is_leader() {
                    write(key.clone(), said).await
                } else {
                    Wrote::Dropped
                };
                let outcome = self.outcome(&key, wrote);
                match self.lock().finish(&key, outcome, Instant::now()) {
                    Some(again) => said = again,
                    None => break,
                }
            }
            // Its lane may have a slot again.
            self.ready.notify_one();
        }
    }

    fn outcome(&self, key: &K, wrote: Wrote) -> Outcome {
        match wrote {
            Wrote::Written(version) => {
                self.backoff.succeeded(key);
                Outcome::Written(version)
            }
            Wrote::Failed => {
                let delay = self.backoff.failed(key.clone());
                if let Some(changes) = &self.changes {
                    changes.bump_after(delay);
                }
                Outcome::Failed {
                    retry_at: Instant::now() + delay,
                }
            }
            Wrote::Gone => Outcome::Gone,
            Wrote::Dropped => Outcome::Dropped,
        }
    }
}
