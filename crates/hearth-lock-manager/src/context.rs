//! What every reconcile and the sweep share: the caches, the writer, the change signal
//! and the per-cluster retry backoff.

use hearth_api::FournosCluster;
use hearth_api::kueue::Workload;
use hearth_runtime::Runtime;
use hearth_runtime::kit::{Backoff, Cache, Changes};

use crate::apply::Writer;
use crate::sentinel::Sentinel;

/// Shared by every reconcile and the sweep.
pub struct Context<K: Sentinel> {
    pub rt: Runtime,
    pub writer: Writer<K>,
    pub clusters: Cache<FournosCluster>,
    pub sentinels: Cache<K>,
    /// `fournosjob` sentinels only: the Workloads Fournos made (what holds the slots).
    pub lock_workloads: Option<Cache<Workload>>,
    /// Every Workload of the execution namespace: who else holds a cluster's slots.
    pub admitted: Cache<Workload>,
    /// Bumped on every change any cache sees; wakes the sweep.
    pub changes: Changes,
    /// Consecutive failures per cluster, for the retry delay.
    pub(crate) backoff: Backoff,
}
