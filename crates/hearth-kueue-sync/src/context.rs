//! What every reconcile shares: the settings, the caches and the snapshot's stores, the
//! writer and its background writers, and what a reconcile remembers for the next one.
//! The reconcile itself is [`crate::reconcile`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hearth_api::conditions::Status;
use hearth_api::kueue::{ClusterQueue, Workload};
use hearth_runtime::kit::{Cache, Changes, ReportedOnce};
use tokio::sync::watch;

use crate::apply::Writer;
use crate::cached::{CachedCluster, CachedFlavor};
use crate::new_flavors::NewFlavors;
use crate::plan::{PlanSettings, SyncReason};
use crate::snapshot::{QueueObject, Stores};
use crate::statuses::Statuses;

/// The four watch caches (their stores are [`Stores`], what the snapshot reads).
pub(crate) struct Caches {
    pub clusters: Cache<CachedCluster>,
    pub queues: Cache<ClusterQueue>,
    pub flavors: Cache<CachedFlavor>,
    pub workloads: Cache<Workload>,
}

/// Everything a reconcile needs.
pub(crate) struct Context {
    pub settings: PlanSettings,
    pub stores: Stores,
    pub caches: Caches,
    pub writer: Writer,
    pub leader: watch::Receiver<bool>,
    /// Bumped on every change any cache sees.
    pub changes: Changes,
    /// Invalid objects already reported, by `(kind, name, resourceVersion)`.
    pub reported: Mutex<ReportedOnce<(&'static str, String, Option<String>)>>,
    /// The cluster status writes, in the background.
    pub statuses: Statuses,
    /// The flavor creates, in the background.
    pub new_flavors: NewFlavors,
    /// The ClusterQueue as the last update returned it, while the cache lags behind it.
    pub written_queue: Mutex<Option<WrittenQueue>>,
    /// What [`Context::log_planned`] said last of each cluster whose status waits.
    pub planned: Mutex<HashMap<String, (SyncReason, Status)>>,
}

/// The ClusterQueue as kueue-sync's last update returned it: what the next plan starts
/// from while the cache still shows a spec older than it.
pub(crate) struct WrittenQueue {
    pub(crate) object: Arc<QueueObject>,
}
