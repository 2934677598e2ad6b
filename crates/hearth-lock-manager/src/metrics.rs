//! lock-manager's metrics, exported as `hearth_lock_manager_*`.

use hearth_runtime::kit::ControllerMetrics;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of the writes counter: what was written.
pub type WriteLabels = Vec<(&'static str, &'static str)>;

#[derive(Clone, Debug)]
pub struct LockMetrics {
    /// Clusters whose lock is held (`status.locked=true`).
    pub held: Gauge,
    /// Clusters with an owner whose lock is not held yet.
    pub waiting: Gauge,
    /// Locks released because their TTL ran out.
    pub expired: Counter,
    /// Held locks found without their Workload (deleted, evicted, not admitted) and
    /// repaired by replacing the sentinel (`fournosjob` sentinels).
    pub workloads_lost: Counter,
    /// Seconds from `ownerSetAt` to the sentinel being admitted.
    pub acquisition: Histogram,
    /// Sentinels deleted because their cluster no longer exists.
    pub orphans_deleted: Counter,
    /// Sentinels whose FournosCluster no longer exists that lock-manager cannot prove its
    /// own (labels prove nothing), so it leaves them for a person.
    pub orphans_unproven: Gauge,
    /// Reconciles, their errors and durations, watch errors, undecodable objects.
    pub controller: ControllerMetrics,
    /// Writes to the API, by what was written: zero in steady state.
    pub writes: Family<WriteLabels, Counter>,
}

impl LockMetrics {
    pub fn new() -> Self {
        Self {
            held: Gauge::default(),
            waiting: Gauge::default(),
            expired: Counter::default(),
            workloads_lost: Counter::default(),
            // 1s … ~9h: a lock on a busy cluster waits for running jobs to finish.
            acquisition: Histogram::new(exponential_buckets(1.0, 2.0, 16)),
            orphans_deleted: Counter::default(),
            orphans_unproven: Gauge::default(),
            controller: ControllerMetrics::default(),
            writes: Family::default(),
        }
    }

    /// Registers every metric under `lock_manager` in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("lock_manager");
        r.register(
            "locks_held",
            "Clusters whose lock sentinel is admitted and holds all of the cluster's slots",
            self.held.clone(),
        );
        r.register(
            "locks_waiting",
            "Clusters with an owner whose lock is not held yet",
            self.waiting.clone(),
        );
        r.register(
            "locks_expired",
            "Locks released because their TTL ran out",
            self.expired.clone(),
        );
        r.register(
            "lock_workloads_lost",
            "Held locks found without their admitted Workload and repaired by replacing the sentinel",
            self.workloads_lost.clone(),
        );
        r.register(
            "lock_acquisition_seconds",
            "Time from ownerSetAt to the lock being held",
            self.acquisition.clone(),
        );
        r.register(
            "orphan_sentinels_deleted",
            "Sentinels deleted because their FournosCluster no longer exists",
            self.orphans_deleted.clone(),
        );
        r.register(
            "orphan_sentinels_unproven",
            "Labelled sentinels of FournosClusters that no longer exist, whose UID lock-manager never created or saw recorded: left for a person to delete",
            self.orphans_unproven.clone(),
        );
        r.register(
            "writes",
            "Writes to the API by what was written (status, sentinel_create, sentinel_delete, sentinel_upkeep, owner_clear)",
            self.writes.clone(),
        );
        self.controller.register(r);
    }

    pub fn error(&self, reason: &'static str) {
        self.controller.error(reason);
    }

    pub fn wrote(&self, what: &'static str) {
        self.writes.get_or_create(&vec![("what", what)]).inc();
    }
}

impl Default for LockMetrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_exported_under_their_names() {
        let metrics = hearth_runtime::Metrics::new("hearth-lock-manager");
        let lock = LockMetrics::new();
        lock.register(&mut metrics.registry());
        lock.held.set(2);
        lock.expired.inc();
        lock.acquisition.observe(3.0);
        lock.error("SentinelCreateFailed");
        lock.wrote("status");
        let text = metrics.encode().unwrap();
        for line in [
            "hearth_lock_manager_locks_held 2\n",
            "hearth_lock_manager_locks_waiting 0\n",
            "hearth_lock_manager_locks_expired_total 1\n",
            "hearth_lock_manager_lock_acquisition_seconds_count 1\n",
            "hearth_lock_manager_reconcile_errors_total{reason=\"SentinelCreateFailed\"} 1\n",
            "hearth_lock_manager_writes_total{what=\"status\"} 1\n",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
