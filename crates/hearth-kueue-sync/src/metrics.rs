//! kueue-sync's metrics, exported as `hearth_kueue_sync_*` (the runtime adds `hearth_`).

use hearth_runtime::kit::{ControllerMetrics, ObjectGauges};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;

use crate::plan::{CordonState, Plan, SyncReason};
use hearth_api::reasons::SchedulableReason;

type Labels1 = [(&'static str, String); 1];
type Labels2 = [(&'static str, String); 2];

/// Outcome label of a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    Conflict,
    Error,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Conflict => "conflict",
            Self::Error => "error",
        }
    }
}

/// The handles; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Reconciles, their errors and durations, watch errors, undecodable objects.
    pub(crate) controller: ControllerMetrics,
    cluster_queue_writes: Family<Labels1, Counter>,
    cluster_queue_conflicts: Counter,
    flavor_writes: Family<Labels2, Counter>,
    status_writes: Family<Labels1, Counter>,
    flavors_managed: Gauge,
    quota_published: ObjectGauges<Labels2>,
    clusters: Family<Labels1, Gauge>,
    schedulable: Family<Labels1, Gauge>,
    cordon_overdue: ObjectGauges<Labels1>,
}

impl Metrics {
    /// Registers every metric under `kueue_sync` in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        let r = registry.sub_registry_with_prefix("kueue_sync");
        metrics.controller.register(r);
        r.register(
            "cluster_queue_writes",
            "generation-guarded ClusterQueue spec updates, by outcome (ok, conflict, error)",
            metrics.cluster_queue_writes.clone(),
        );
        r.register(
            "cluster_queue_conflicts",
            "ClusterQueue updates refused because another writer changed it first (then re-planned)",
            metrics.cluster_queue_conflicts.clone(),
        );
        r.register(
            "flavor_writes",
            "ResourceFlavor writes, by action (create, repair, delete) and outcome",
            metrics.flavor_writes.clone(),
        );
        r.register(
            "status_writes",
            "FournosCluster status writes (status.kueue, KueueSynced), by outcome",
            metrics.status_writes.clone(),
        );
        r.register(
            "flavors_managed",
            "ResourceFlavors carrying app.kubernetes.io/managed-by=hearth",
            metrics.flavors_managed.clone(),
        );
        r.register(
            "quota_published",
            "Quota published in the ClusterQueue, per cluster and resource (0 while drained)",
            metrics.quota_published.family(),
        );
        r.register(
            "clusters",
            "Live FournosClusters by KueueSynced reason",
            metrics.clusters.clone(),
        );
        r.register(
            "schedulable_clusters",
            "Live FournosClusters by Schedulable reason (Schedulable, Cordoned, Drained, CordonOverdue)",
            metrics.schedulable.clone(),
        );
        r.register(
            "cordon_overdue",
            "1 per cluster cordoned past its spec.cordon.until (Hearth never lifts a cordon)",
            metrics.cordon_overdue.family(),
        );
        metrics
    }

    pub(crate) fn cluster_queue_write(&self, outcome: Outcome) {
        self.cluster_queue_writes
            .get_or_create(&[("outcome", outcome.as_str().to_owned())])
            .inc();
        if outcome == Outcome::Conflict {
            self.cluster_queue_conflicts.inc();
        }
    }

    pub(crate) fn flavor_write(&self, action: &'static str, ok: bool) {
        let outcome = if ok { Outcome::Ok } else { Outcome::Error };
        self.flavor_writes
            .get_or_create(&[
                ("action", action.to_owned()),
                ("outcome", outcome.as_str().to_owned()),
            ])
            .inc();
    }

    pub(crate) fn status_write(&self, ok: bool) {
        let outcome = if ok { Outcome::Ok } else { Outcome::Error };
        self.status_writes
            .get_or_create(&[("outcome", outcome.as_str().to_owned())])
            .inc();
    }

    pub(crate) fn observed(&self, flavors_managed: usize, invalid: &BTreeMap<&'static str, usize>) {
        self.flavors_managed
            .set(i64::try_from(flavors_managed).unwrap_or(i64::MAX));
        for kind in ["FournosCluster", "ClusterQueue", "ResourceFlavor"] {
            self.controller
                .invalid_objects(kind, invalid.get(kind).copied().unwrap_or(0));
        }
    }

    /// What `plan` says every cluster publishes and why: call once its writes succeeded.
    pub(crate) fn published(&self, plan: &Plan) {
        let mut by_reason: BTreeMap<&str, i64> =
            SyncReason::ALL.iter().map(|r| (r.as_str(), 0)).collect();
        let mut by_schedulable: BTreeMap<&str, i64> = SchedulableReason::ALL
            .iter()
            .map(|r| (r.as_str(), 0))
            .collect();
        let mut overdue = Vec::new();
        let mut quotas = Vec::new();
        for (cluster, sync) in &plan.clusters {
            *by_reason.entry(sync.reason().as_str()).or_default() += 1;
            *by_schedulable
                .entry(sync.cordon.reason().as_str())
                .or_default() += 1;
            if matches!(sync.cordon, CordonState::Overdue(_)) {
                overdue.push(([("cluster", cluster.clone())], 1));
            }
            for (resource, quota) in sync.kueue.iter().flat_map(|k| &k.quotas) {
                quotas.push((
                    [("cluster", cluster.clone()), ("resource", resource.clone())],
                    *quota,
                ));
            }
        }
        for (reason, n) in by_reason {
            self.clusters
                .get_or_create(&[("reason", reason.to_owned())])
                .set(n);
        }
        for (reason, n) in by_schedulable {
            self.schedulable
                .get_or_create(&[("reason", reason.to_owned())])
                .set(n);
        }
        self.quota_published.replace(quotas);
        self.cordon_overdue.replace(overdue);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{World, cluster};
    use hearth_runtime::encode_registry;

    #[test]
    fn published_quota_follows_the_clusters() {
        let mut registry = Registry::with_prefix("hearth");
        let metrics = Metrics::register(&mut registry);
        let mut world = World::new().with_clusters([
            cluster("a").gpu("a100", 8),
            cluster("b").gpu("h100", 4).created(1),
        ]);
        world.converge();
        metrics.published(&world.plan());
        let out = encode_registry(&registry).unwrap();
        assert!(
            out.contains(
                "hearth_kueue_sync_quota_published{cluster=\"a\",resource=\"fournos/gpu-a100\"} 8"
            ),
            "{out}"
        );
        assert!(
            out.contains("hearth_kueue_sync_clusters{reason=\"Synced\"} 2"),
            "{out}"
        );
        assert!(
            out.contains("hearth_kueue_sync_clusters{reason=\"Drained\"} 0"),
            "{out}"
        );

        world.remove_cluster("a");
        world.converge();
        metrics.published(&world.plan());
        let out = encode_registry(&registry).unwrap();
        assert!(!out.contains("cluster=\"a\""), "{out}");
        assert!(
            out.contains(
                "hearth_kueue_sync_quota_published{cluster=\"b\",resource=\"fournos/gpu-h100\"} 4"
            ),
            "{out}"
        );
    }

    #[derive(Debug)]
    struct WriteStatusFailed;

    impl hearth_runtime::kit::FailureReason for WriteStatusFailed {
        fn reason(&self) -> &'static str {
            "WriteStatusFailed"
        }
    }

    #[tokio::test]
    async fn writes_are_counted_by_outcome() {
        let mut registry = Registry::with_prefix("hearth");
        let metrics = Metrics::register(&mut registry);
        metrics.cluster_queue_write(Outcome::Ok);
        metrics.cluster_queue_write(Outcome::Conflict);
        metrics.flavor_write("create", true);
        let failed = metrics
            .controller
            .reconcile(tracing::Span::none(), async {
                Err::<(), _>(WriteStatusFailed)
            })
            .await;
        assert!(failed.is_err());
        let out = encode_registry(&registry).unwrap();
        for line in [
            "hearth_kueue_sync_cluster_queue_writes_total{outcome=\"ok\"} 1",
            "hearth_kueue_sync_cluster_queue_writes_total{outcome=\"conflict\"} 1",
            "hearth_kueue_sync_cluster_queue_conflicts_total 1",
            "hearth_kueue_sync_flavor_writes_total{action=\"create\",outcome=\"ok\"} 1",
            "hearth_kueue_sync_reconcile_errors_total{reason=\"WriteStatusFailed\"} 1",
            "hearth_kueue_sync_reconciles_total 1",
        ] {
            assert!(out.contains(line), "{line} in\n{out}");
        }
    }
}
