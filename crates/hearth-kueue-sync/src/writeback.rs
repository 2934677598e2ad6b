//! Writeback: what a cluster's status write says, and which Event tells a person about a
//! change. Pure; the apply step sends them.

use hearth_api::conditions::next_condition;
use hearth_api::{KueueStatus, KueueSyncStatus};
use hearth_runtime::events::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::Value;

use crate::cached::CachedCluster;
use crate::plan::{ClusterSync, SyncReason};
use hearth_api::reasons::SchedulableReason;

/// The status fields kueue-sync owns, to server-side apply: `kueue` (left out, hence
/// removed, while the cluster has no entry), `admittedWorkloads` (only while cordoned) and
/// the `KueueSynced` and `Schedulable` conditions, whose `lastTransitionTime` moves only
/// when their status flips. The conditions' `observedGeneration` is
/// `cluster.metadata.generation`.
pub(crate) fn status_patch(cluster: &CachedCluster, sync: &ClusterSync, now: &Time) -> Value {
    let condition = next_condition(
        current_condition(cluster),
        &sync.condition,
        cluster.metadata.generation,
        now,
    );
    let schedulable = next_condition(
        cluster.observed.schedulable_condition.as_ref(),
        &sync.schedulable,
        cluster.metadata.generation,
        now,
    );
    let status = KueueSyncStatus {
        kueue: sync.kueue.clone(),
        admitted_workloads: sync.cordon.admitted(),
        conditions: vec![condition, schedulable],
    };
    serde_json::to_value(status).expect("a status serializes")
}

/// The `KueueSynced` condition as it is now.
fn current_condition(cluster: &CachedCluster) -> Option<&Condition> {
    cluster.observed.synced_condition.as_ref()
}

/// Event reason when a cluster's quota becomes published.
pub(crate) const QUOTA_PUBLISHED: &str = "QuotaPublished";
/// Event reason when a published cluster's quota changes (GPUs added or lost).
pub(crate) const QUOTA_UPDATED: &str = "QuotaUpdated";
/// Event reason for a FournosCluster that cannot be decoded.
pub(crate) const INVALID_OBJECT: &str = "InvalidObject";

const PUBLISH: &str = "PublishQuota";
const DRAIN: &str = "DrainQuota";

/// The Event for a status write that takes `cluster` to `sync`, if it is news to a
/// person: the `KueueSynced` reason changed (published, drained, limit reached, …), or
/// the published quota of a synced cluster changed. Waiting for a new flavor, or for
/// discovery's first count, is a moment of every onboarding, not news (discovery reports
/// its own problems).
pub(crate) fn event_for(cluster: &CachedCluster, sync: &ClusterSync) -> Option<Event> {
    let reason = sync.reason();
    let before = current_condition(cluster).and_then(|c| SyncReason::parse(&c.reason));
    let message = sync.condition.message.clone();
    if before == Some(reason) {
        let old = cluster.observed.kueue.as_ref();
        return (reason == SyncReason::Synced
            && old.map(|k| &k.quotas) != sync.kueue.as_ref().map(|k| &k.quotas))
        .then(|| {
            let (old, new) = (quotas(old), quotas(sync.kueue.as_ref()));
            let note = format!("Quota changed from {old} to {new}. {message}");
            Event::normal(QUOTA_UPDATED, PUBLISH, note)
        });
    }
    Some(match reason {
        SyncReason::WaitingForFlavor | SyncReason::WaitingForDiscovery => return None,
        SyncReason::Synced => Event::normal(QUOTA_PUBLISHED, PUBLISH, message),
        SyncReason::Drained => Event::warning(reason.as_str(), DRAIN, message),
        other => Event::warning(other.as_str(), PUBLISH, message),
    })
}

/// Event reasons of cordons (`Schedulable` transitions).
pub(crate) const CORDONED: &str = "Cordoned";
pub(crate) const CORDON_DRAINED: &str = "CordonDrained";
pub(crate) const CORDON_OVERDUE: &str = "CordonOverdue";
pub(crate) const UNCORDONED: &str = "Uncordoned";

/// The Event for a change of `Schedulable`: cordoned, drained, overdue (a Warning: a
/// person forgot it or the maintenance overran), uncordoned. A cluster's first
/// `Schedulable=True` is not news.
pub(crate) fn cordon_event_for(cluster: &CachedCluster, sync: &ClusterSync) -> Option<Event> {
    let before = cluster
        .observed
        .schedulable_condition
        .as_ref()
        .map(|c| SchedulableReason::parse(&c.reason));
    let now = sync.schedulable.reason;
    if before == Some(Some(now)) {
        return None;
    }
    let note = sync.schedulable.message.clone();
    Some(match now {
        SchedulableReason::Schedulable if before.is_none() => return None,
        SchedulableReason::Schedulable => Event::normal(UNCORDONED, "Cordon", note),
        SchedulableReason::Cordoned => Event::normal(CORDONED, "Cordon", note),
        SchedulableReason::Drained => Event::normal(CORDON_DRAINED, "Cordon", note),
        SchedulableReason::CordonOverdue => Event::warning(CORDON_OVERDUE, "Cordon", note),
    })
}

fn quotas(kueue: Option<&KueueStatus>) -> String {
    match kueue {
        None => "nothing".to_owned(),
        Some(k) => k
            .quotas
            .iter()
            .map(|(r, n)| format!("{r}={n}"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{World, at, cached, cluster};
    use hearth_api::KubeconfigStatus;
    use serde_json::json;

    /// A converged world with cluster `a` (8 A100s), and what the next plan says of `a`
    /// after `change`.
    fn after(change: impl FnOnce(&mut World)) -> (CachedCluster, ClusterSync) {
        let mut world = World::new().with_clusters([cluster("a").gpu("a100", 8)]);
        world.converge();
        let before = cached(&world.clusters[0]);
        change(&mut world);
        let sync = world.plan().clusters["a"].clone();
        (before, sync)
    }

    #[test]
    fn status_patch_holds_only_kueue_and_the_conditions() {
        let (cluster, sync) = after(|w| w.cluster_mut("a").status.as_mut().unwrap().kueue = None);
        let patch = status_patch(&cluster, &sync, &at(5_000));
        assert_eq!(
            patch["kueue"],
            json!({"flavor": "a", "clusterQueue": "fournos-queue",
                   "quotas": {"fournos/cluster-slot": 100, "fournos/gpu-a100": 8},
                   "clusterSlots": 100})
        );
        let conditions = patch["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 2);
        assert_eq!(conditions[0]["type"], "KueueSynced");
        assert_eq!(conditions[1]["type"], "Schedulable");
        assert_eq!(conditions[1]["status"], "True");
        assert_eq!(conditions[0]["status"], "True");
        assert_eq!(conditions[0]["observedGeneration"], 1);
        // Already True: the transition time stays.
        let current = current_condition(&cluster).unwrap();
        assert_eq!(
            conditions[0]["lastTransitionTime"],
            serde_json::to_value(&current.last_transition_time).unwrap()
        );
        assert_eq!(patch.as_object().unwrap().len(), 2, "{patch}");
    }

    #[test]
    fn no_entry_means_no_kueue_field_so_it_is_removed() {
        let (cluster, sync) = after(|w| w.queue = None);
        assert_eq!(sync.reason(), SyncReason::ClusterQueueNotFound);
        let patch = status_patch(&cluster, &sync, &at(5_000));
        assert!(patch.get("kueue").is_none(), "{patch}");
        assert_eq!(patch["conditions"][0]["status"], "False");
        assert_eq!(
            patch["conditions"][0]["lastTransitionTime"],
            serde_json::to_value(at(5_000)).unwrap()
        );
    }

    #[test]
    fn events_say_what_changed() {
        let (cluster, sync) = after(|w| {
            w.cluster_mut("a")
                .status
                .as_mut()
                .unwrap()
                .kubeconfig_status = Some(KubeconfigStatus::Unauthorized)
        });
        let event = event_for(&cluster, &sync).unwrap();
        assert!(event.warning);
        assert_eq!((event.reason, event.action), ("Drained", "DrainQuota"));
        assert!(event.note.contains("Unauthorized"), "{}", event.note);

        let (cluster, sync) = after(|w| w.queue = None);
        let event = event_for(&cluster, &sync).unwrap();
        assert_eq!(event.reason, "ClusterQueueNotFound");
        assert!(event.note.contains("create it"), "{}", event.note);

        let (cluster, sync) = after(|w| {
            let hw = w.cluster_mut("a").status.as_mut().unwrap();
            hw.hardware.as_mut().unwrap().gpus[0].count = 4;
        });
        let event = event_for(&cluster, &sync).unwrap();
        assert!(!event.warning);
        assert_eq!(event.reason, QUOTA_UPDATED);
        assert!(event.note.contains("fournos/gpu-a100=8"), "{}", event.note);
        assert!(event.note.contains("fournos/gpu-a100=4"), "{}", event.note);
    }

    #[test]
    fn waiting_for_a_flavor_or_a_count_and_no_change_are_not_news() {
        let mut world = World::new().with_clusters([cluster("a").gpu("a100", 8)]);
        let plan = world.plan();
        assert_eq!(plan.clusters["a"].reason(), SyncReason::WaitingForFlavor);
        assert_eq!(
            event_for(&cached(&world.clusters[0]), &plan.clusters["a"]),
            None
        );
        let mut uncounted = World::new().with_clusters([cluster("u").uncounted()]);
        uncounted.converge();
        let sync = &uncounted.plan().clusters["u"];
        assert_eq!(sync.reason(), SyncReason::WaitingForDiscovery);
        let mut fresh = uncounted.clusters[0].clone();
        fresh.status.as_mut().unwrap().conditions.clear();
        assert_eq!(event_for(&cached(&fresh), sync), None);
        world.converge();
        let sync = world.plan().clusters["a"].clone();
        assert!(!sync.status_changed);
        assert_eq!(event_for(&cached(&world.clusters[0]), &sync), None);
    }

    #[test]
    fn the_first_published_status_is_an_event() {
        let mut world = World::new().with_clusters([cluster("a").gpu("a100", 8)]);
        let mut published = None;
        for _ in 0..5 {
            let plan = world.plan();
            let sync = plan.clusters["a"].clone();
            if sync.reason() == SyncReason::Synced && sync.status_changed {
                published = event_for(&cached(&world.clusters[0]), &sync);
                break;
            }
            world.apply(&plan);
        }
        let event = published.expect("a round publishes a's quota");
        assert_eq!(event.reason, QUOTA_PUBLISHED);
        assert!(!event.warning);
        assert!(event.note.contains("fournos/gpu-a100=8"), "{}", event.note);
    }
}
