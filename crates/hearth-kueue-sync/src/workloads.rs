//! The Workloads Kueue has admitted on each flavor: what a cordoned cluster's
//! `Schedulable` condition counts down to `Drained`. Pure; the controller's Workload cache
//! (the execution namespace's) keeps only what this reads ([`trim`]).

use std::collections::{BTreeMap, BTreeSet};

use hearth_api::kueue::{Workload, workload_conditions::FINISHED};
use hearth_api::names::{
    CLUSTER_LOCK_LABEL, CLUSTER_NAMESPACE_LABEL, MANAGED_BY_LABEL, has_sentinel_labels,
};

/// The labels [`is_this_hearths_lock`] reads; a Workload's others are never kept.
const LABELS_READ: [&str; 3] = [
    CLUSTER_LOCK_LABEL,
    MANAGED_BY_LABEL,
    CLUSTER_NAMESPACE_LABEL,
];

/// Keeps of a Workload only its identity (names, uid), the labels
/// [`is_this_hearths_lock`] reads, its conditions and the flavors of its admission. Pod
/// templates (images, commands, environment), annotations and other labels can be large
/// and are never read.
pub fn trim(w: &mut Workload) {
    let meta = &mut w.metadata;
    if let Some(labels) = &mut meta.labels {
        labels.retain(|key, _| LABELS_READ.contains(&key.as_str()));
    }
    meta.annotations = None;
    meta.managed_fields = None;
    meta.owner_references = None;
    w.spec.pod_sets.clear();
    w.spec.other.clear();
    if let Some(status) = &mut w.status {
        status.other.clear();
        for c in &mut status.conditions {
            c.message.clear();
        }
        if let Some(admission) = &mut status.admission {
            admission.other.clear();
            for a in &mut admission.pod_set_assignments {
                a.other.clear();
            }
        }
    }
}

/// Whether `w` is this Hearth's own lock, which a cordon does not wait for: a lock taken
/// during a cordon is what the operator waits to hold, not a job to drain. Today: it
/// carries the sentinel labels of `cluster_namespace`.
fn is_this_hearths_lock(w: &Workload, cluster_namespace: &str) -> bool {
    has_sentinel_labels(w.metadata.labels.as_ref(), cluster_namespace)
}

/// Per flavor, the Workloads admitted on it (quota reserved, not finished), each counted
/// once however many of its resources the flavor holds, but for this Hearth's own locks
/// ([`is_this_hearths_lock`]).
pub fn admitted_per_flavor<'a>(
    workloads: impl IntoIterator<Item = &'a Workload>,
    cluster_namespace: &str,
) -> BTreeMap<String, i64> {
    let mut counts = BTreeMap::new();
    for w in workloads {
        if is_this_hearths_lock(w, cluster_namespace) {
            continue;
        }
        let Some(status) = &w.status else { continue };
        let finished = status
            .conditions
            .iter()
            .any(|c| c.type_ == FINISHED && c.status == "True");
        let Some(admission) = status.admission.as_ref().filter(|_| !finished) else {
            continue;
        };
        let flavors: BTreeSet<&String> = admission
            .pod_set_assignments
            .iter()
            .flat_map(|a| a.flavors.values())
            .collect();
        for flavor in flavors {
            *counts.entry(flavor.clone()).or_default() += 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_api::names::sentinel_labels;
    use serde_json::json;

    fn workload(name: &str, flavors: &[&str], finished: bool) -> Workload {
        let assignments: Vec<_> = flavors
            .iter()
            .map(|f| json!({"name": "main", "flavors": {"fournos/cluster-slot": f, "fournos/gpu-a100": f}}))
            .collect();
        let mut conditions = vec![
            json!({"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "m", "lastTransitionTime": "2026-11-25T00:00:00Z"}),
        ];
        if finished {
            conditions.push(json!({"type": "Finished", "status": "True", "reason": "Succeeded", "message": "", "lastTransitionTime": "2026-11-25T00:00:00Z"}));
        }
        let admission = (!flavors.is_empty())
            .then(|| json!({"clusterQueue": "q", "podSetAssignments": assignments}));
        serde_json::from_value(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": name, "namespace": "exec", "annotations": {"big": "x".repeat(1000)}},
            "spec": {"podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}]},
            "status": {"conditions": conditions, "admission": admission},
        }))
        .unwrap()
    }

    #[test]
    fn admitted_workloads_are_counted_per_flavor_once_each() {
        let mut sentinel = workload("cluster-lock-a", &["a"], false);
        sentinel.metadata.labels = Some(sentinel_labels("a", "hearth"));
        let mut other_hearths = workload("cluster-lock-a2", &["a"], false);
        other_hearths.metadata.labels = Some(sentinel_labels("a", "hearth-staging"));
        let all = [
            workload("one", &["a"], false),
            workload("two-podsets", &["a", "a"], false),
            workload("spans", &["a", "b"], false),
            workload("done", &["a"], true),
            workload("pending", &[], false),
            sentinel,
            other_hearths,
        ];
        assert_eq!(
            admitted_per_flavor(&all, "hearth"),
            BTreeMap::from([("a".to_owned(), 4), ("b".to_owned(), 1)])
        );
    }

    #[test]
    fn trimming_keeps_what_the_count_reads() {
        let all = [
            workload("one", &["a"], false),
            workload("done", &["a"], true),
        ];
        let mut trimmed = all.clone();
        trimmed.iter_mut().for_each(trim);
        assert_eq!(
            admitted_per_flavor(&trimmed, "hearth"),
            admitted_per_flavor(&all, "hearth")
        );
        let size = |w: &Workload| serde_json::to_string(w).unwrap().len();
        assert!(size(&trimmed[0]) * 2 < size(&all[0]));
    }

    #[test]
    fn trimming_keeps_only_the_labels_the_count_reads() {
        let mut sentinel = workload("cluster-lock-a", &["a"], false);
        let mut labels = sentinel_labels("a", "hearth");
        labels.extend((0..100).map(|i| (format!("team.example/l{i}"), "v".repeat(63))));
        sentinel.metadata.labels = Some(labels);
        sentinel.metadata.uid = Some("u".into());
        let mut trimmed = sentinel.clone();
        trim(&mut trimmed);
        assert_eq!(
            trimmed.metadata.labels,
            Some(sentinel_labels("a", "hearth")),
            "the sentinel labels, nothing else"
        );
        assert_eq!(trimmed.metadata.uid.as_deref(), Some("u"));
        assert_eq!(
            admitted_per_flavor([&trimmed], "hearth"),
            admitted_per_flavor([&sentinel], "hearth")
        );
    }
}
