//! What every reconcile and the sweep share: the caches, the writer, the change signal,
//! the per-cluster retry backoff and the sentinel UIDs clusters recorded ([`Recorded`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use hearth_api::FournosCluster;
use hearth_api::kueue::Workload;
use hearth_runtime::Runtime;
use hearth_runtime::kit::{Backoff, Cache, Changes};
use kube::core::DeserializeGuard;
use kube::{Resource, ResourceExt};

use crate::booked::Booked;
use crate::sentinel::Sentinel;
use crate::writer::Writer;

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
    /// Sentinel UIDs seen recorded in clusters' statuses, for the sweep.
    pub recorded: Recorded,
    /// Consecutive failures per cluster, for the retry delay.
    pub(crate) backoff: Backoff,
    /// Reservations ([`crate::booked`]).
    pub booked: Booked,
}

/// The sentinel UIDs this process saw recorded in a cluster's `status.lockJobUID`, kept
/// while such a sentinel exists, so that a lock's sentinel is still proven once its
/// cluster (and with it the record) is gone. Bounded by the sentinels in the cache;
/// losing it on restart only leaves orphans for a person to delete.
#[derive(Default)]
pub struct Recorded(Mutex<HashSet<String>>);

impl Recorded {
    /// Adds every UID `clusters` record, forgets those no sentinel has any longer, and
    /// says whether `uid` is one of them.
    pub(crate) fn update<K: Resource>(
        &self,
        clusters: &[Arc<DeserializeGuard<FournosCluster>>],
        sentinels: &[Arc<DeserializeGuard<K>>],
    ) -> HashSet<String> {
        let mut set = hearth_runtime::lock(&self.0);
        set.extend(
            clusters
                .iter()
                .filter_map(|c| c.0.as_ref().ok()?.status.as_ref()?.lock_job_uid.clone()),
        );
        let live: HashSet<String> = sentinels.iter().filter_map(|s| s.uid()).collect();
        set.retain(|uid| live.contains(uid));
        set.clone()
    }
}
