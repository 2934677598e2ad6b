//! The Workloads Kueue has admitted on each flavor: what a cordoned cluster's
//! `Schedulable` condition counts down to `Drained`. Pure; the controller's Workload cache
//! (the execution namespace's) keeps only what this reads ([`trim`]).

use std::collections::{BTreeMap, BTreeSet};

use hearth_api::kueue::{Workload, workload_conditions::FINISHED};

/// Keeps of a Workload only its identity (names, uid: a lock's Workload is left out of
/// the count by its UID), its conditions and the flavors of its admission. Pod templates
/// (images, commands, environment), labels and annotations can be large, are written by
/// whoever may create Workloads, and are never read.
pub fn trim(w: &mut Workload) {
    let meta = &mut w.metadata;
    meta.labels = None;
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
                a.resource_usage.clear();
                a.count = None;
            }
        }
    }
}

/// Per flavor, the Workloads admitted on it (quota reserved, not finished), each counted
/// once however many of its resources the flavor holds. The Workloads lock-manager proved
/// to hold a cluster's lock (`locks`, their UIDs from `status.lockWorkloadUID`) are not
/// counted: a lock taken during a cordon is what the operator waits to hold, not a job
/// to drain. Nothing else is left out: labels anyone may write prove nothing.
pub fn admitted_per_flavor<'a>(
    workloads: impl IntoIterator<Item = &'a Workload>,
    locks: &BTreeSet<&str>,
) -> BTreeMap<String, i64> {
    let mut counts = BTreeMap::new();
    for w in workloads {
        if w.metadata.uid.as_deref().is_some_and(|u| locks.contains(u)) {
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
            "metadata": {"name": name, "namespace": "exec", "uid": format!("uid-{name}"), "annotations": {"big": "x".repeat(1000)}},
            "spec": {"podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}]},
            "status": {"conditions": conditions, "admission": admission},
        }))
        .unwrap()
    }

    #[test]
    fn admitted_workloads_are_counted_per_flavor_once_each() {
        // A job's Workload relabelled as a sentinel still runs: only the proven lock's
        // UID is left out.
        let mut relabelled = workload("job-in-disguise", &["a"], false);
        relabelled.metadata.labels = Some(sentinel_labels("a", "hearth"));
        let all = [
            workload("one", &["a"], false),
            workload("two-podsets", &["a", "a"], false),
            workload("spans", &["a", "b"], false),
            workload("done", &["a"], true),
            workload("pending", &[], false),
            workload("cluster-lock-a", &["a"], false),
            relabelled,
        ];
        assert_eq!(
            admitted_per_flavor(&all, &BTreeSet::from(["uid-cluster-lock-a"])),
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
        let none = BTreeSet::new();
        assert_eq!(
            admitted_per_flavor(&trimmed, &none),
            admitted_per_flavor(&all, &none)
        );
        let size = |w: &Workload| serde_json::to_string(w).unwrap().len();
        assert!(size(&trimmed[0]) * 2 < size(&all[0]));
    }

    #[test]
    fn trimming_keeps_no_label_and_the_uid_the_count_reads() {
        let mut lock = workload("cluster-lock-a", &["a"], false);
        let mut labels = sentinel_labels("a", "hearth");
        labels.extend((0..100).map(|i| (format!("team.example/l{i}"), "v".repeat(63))));
        lock.metadata.labels = Some(labels);
        let mut trimmed = lock.clone();
        trim(&mut trimmed);
        assert_eq!(trimmed.metadata.labels, None, "no label is read");
        assert_eq!(trimmed.metadata.uid, lock.metadata.uid);
        let locks = BTreeSet::from(["uid-cluster-lock-a"]);
        assert_eq!(
            admitted_per_flavor([&trimmed], &locks),
            admitted_per_flavor([&lock], &locks)
        );
    }
}
