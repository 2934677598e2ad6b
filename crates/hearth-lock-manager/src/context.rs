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
    /// `fournosjob` sentinels: the lock is held by the Workload Fournos makes for one.
    pub fournos: bool,
    /// Every Workload of the execution namespace, trimmed ([`crate::holders::trim`]): who
    /// else holds a cluster's slots, and for `fournosjob` the Workloads of a lock's name.
    pub admitted: Cache<Workload>,
    /// Bumped on every change any cache sees; wakes the sweep.
    pub changes: Changes,
    /// Sentinel UIDs seen recorded in clusters' statuses ([`crate::sweep::Recorded`]).
    pub recorded: crate::sweep::Recorded,
    /// Consecutive failures per cluster, for the retry delay.
    pub(crate) backoff: Backoff,
}
