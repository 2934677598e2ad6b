//! The Kueue Workloads behind `fournosjob` sentinels: what actually holds the slots
//! (Fournos stops looking at them once admitted, [`crate::fournos`]). This module reads
//! the jobs' Workloads ([`LockWorkloadView`]) for the state machine in [`crate::state`],
//! which decides from them (`WorkloadLost`, also for a Workload changed from what
//! Fournos made, `SlotsMismatch`, `WrongFlavor`, `WaitingForRelease`, `Releasing`,
//! `SentinelNotPickedUp`).

use std::sync::Arc;

use hearth_api::kueue::{Workload, admitted_slots_on, pinned_cluster, workload_conditions};
use hearth_api::names::{LOCK_SENTINEL_PREFIX, lock_sentinel_name};
use kube::ResourceExt as _;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::fournos::JOB_NAME_LABEL;
use crate::holders::admitted_flavor;
use crate::plan::{LockAction, LockPlan};
use crate::sentinel::{PODS_READY, Sentinel};
use crate::views::{FournosView, JobView, LockWorkloadView};

/// What a `fournosjob` lock-manager sees behind a cluster's sentinels: the FournosJobs
/// and the Workloads Fournos made for them (or under the canonical sentinel name).
pub struct FournosFacts {
    jobs: Vec<JobView>,
    views: Vec<LockWorkloadView>,
    workloads: Vec<Workload>,
}

impl FournosFacts {
    /// The cluster's FournosJob sentinels and the Workloads of their names (and of the
    /// canonical sentinel name), from `store`: every Workload of the execution namespace.
    /// A Workload is a lock's by its name alone, as Fournos finds it; a label or an
    /// ownerReference anyone can write makes no Workload part of a lock.
    pub fn observe<K: Sentinel>(
        store: &Store<DeserializeGuard<Workload>>,
        namespace: &str,
        cluster: &str,
        observed: &[Arc<DeserializeGuard<K>>],
    ) -> Self {
        let jobs: Vec<_> = observed
            .iter()
            .filter_map(|s| s.0.as_ref().ok()?.job_view())
            .collect();
        let mut names: Vec<String> = jobs.iter().map(|j| j.name.clone()).collect();
        names.push(lock_sentinel_name(cluster));
        names.sort();
        names.dedup();
        let mut workloads = Vec::new();
        let mut views = Vec::new();
        for name in &names {
            let key = ObjectRef::new(name).within(namespace);
            if let Some(w) = store.get(&key)
                && let Ok(w) = &w.0
            {
                views.push(observe_workload(w));
                workloads.push(w.clone());
            }
        }
        Self {
            jobs,
            views,
            workloads,
        }
    }

    pub fn view(&self) -> FournosView<'_> {
        FournosView {
            jobs: &self.jobs,
            workloads: &self.views,
        }
    }

    /// The Workload of the sentinel the plan keeps (for its upkeep), unless the plan
    /// replaces that sentinel.
    pub fn owned_by_kept(&self, plan: &LockPlan) -> Option<Workload> {
        let kept = plan.state.kept().filter(|kept| {
            !plan
                .actions
                .iter()
                .any(|a| matches!(a, LockAction::DeleteSentinel { name } if *name == kept.name))
        })?;
        let job = self
            .jobs
            .iter()
            .find(|j| j.name == kept.name && j.deleting_since.is_none())?;
        self.workloads
            .iter()
            .zip(&self.views)
            .find_map(|(w, v)| (v.name == job.name && v.owner_uid == job.uid).then(|| w.clone()))
    }
}

fn is_true(w: &Workload, type_: &str) -> bool {
    w.status
        .as_ref()
        .is_some_and(|s| hearth_api::conditions::is_true(&s.conditions, type_))
}

/// The cluster a Workload may be a lock's Workload of, for waking that cluster's
/// reconcile: named like a sentinel (the name says the cluster, unless it was shortened)
/// or labelled with such a job, and pinned to a cluster (its node selector). A hint
/// only: whatever it says, the reconcile proves the Workload by name and UID.
pub fn lock_workload_cluster(w: &Workload) -> Option<&str> {
    let name = w.metadata.name.as_deref()?;
    if let Some(cluster) = name.strip_prefix(LOCK_SENTINEL_PREFIX)
        && lock_sentinel_name(cluster) == name
    {
        return Some(cluster);
    }
    let job = w.labels().get(JOB_NAME_LABEL);
    if !(name.starts_with(LOCK_SENTINEL_PREFIX)
        || job.is_some_and(|j| j.starts_with(LOCK_SENTINEL_PREFIX)))
    {
        return None;
    }
    pinned_cluster(w)
}

/// What the state machine needs of a Workload of a lock's name.
pub fn observe_workload(w: &Workload) -> LockWorkloadView {
    let owner_uid = w
        .owner_references()
        .iter()
        .find(|o| o.kind == "FournosJob")
        .map(|o| o.uid.clone());
    let admitted = is_true(w, workload_conditions::ADMITTED);
    let admission = w.status.as_ref().and_then(|s| s.admission.as_ref());
    let cluster_queue = admission.map(|a| a.cluster_queue.clone());
    let slot_flavor = admitted_flavor(w).map(str::to_owned);
    let slots = slot_flavor.as_deref().and_then(|f| admitted_slots_on(w, f));
    let finished = is_true(w, workload_conditions::FINISHED);
    let message = w.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .filter(|c| {
                !c.message.is_empty()
                    && c.status
                        == if c.type_ == workload_conditions::EVICTED {
                            "True"
                        } else {
                            "False"
                        }
            })
            .max_by_key(|c| c.last_transition_time.0)
            .map(|c| c.message.clone())
    });
    LockWorkloadView {
        name: w.name_any(),
        uid: w.uid(),
        created: w.metadata.creation_timestamp.as_ref().map(|t| t.0),
        job: w.labels().get(JOB_NAME_LABEL).cloned(),
        owner_uid,
        pinned: pinned_cluster(w).map(str::to_owned),
        slots,
        cluster_queue,
        queue: w.spec.queue_name.clone(),
        generation: w.metadata.generation,
        slot_flavor,
        admitted,
        evicted: is_true(w, workload_conditions::EVICTED),
        finished,
        holds_quota: !finished && (admitted || is_true(w, workload_conditions::QUOTA_RESERVED)),
        pods_ready: is_true(w, PODS_READY),
        message,
        deleting: w.metadata.deletion_timestamp.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const JOB: &str = "cluster-lock-a";

    #[test]
    fn observes_fournos_workloads() {
        let w: Workload = serde_json::from_value(serde_json::json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": { "name": JOB, "labels": { JOB_NAME_LABEL: JOB },
                "ownerReferences": [{ "apiVersion": "fournos.dev/v1", "kind": "FournosJob", "name": JOB, "uid": "u1" }] },
            "spec": { "podSets": [{ "name": "launcher", "count": 1, "template": { "spec": {
                "nodeSelector": { "fournos.dev/cluster": "a" },
                "containers": [{ "name": "placeholder", "resources": { "requests": { "fournos/cluster-slot": "100" } } }] } } }] },
            "status": { "conditions": [
                { "type": "QuotaReserved", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z" },
                { "type": "Admitted", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z" } ] },
        }))
        .unwrap();
        let v = observe_workload(&w);
        assert_eq!(v.owner_uid.as_deref(), Some("u1"));
        assert_eq!(v.job.as_deref(), Some(JOB));
        assert_eq!(v.pinned.as_deref(), Some("a"));
        assert_eq!(
            v.slots, None,
            "Kueue reported no usage: the count cannot be read"
        );
        assert!(v.admitted && v.holds_quota && !v.evicted && !v.finished);
        assert_eq!(pinned_cluster(&w), Some("a"));
        assert_eq!(lock_workload_cluster(&w), Some("a"));
        let mut not_a_lock = w.clone();
        not_a_lock.metadata.name = Some("training-run".into());
        not_a_lock
            .labels_mut()
            .insert(JOB_NAME_LABEL.into(), "training-run".into());
        assert_eq!(lock_workload_cluster(&not_a_lock), None);
        let mut counted = w.clone();
        let status = counted.status.as_mut().unwrap();
        status.admission = Some(
            serde_json::from_value(serde_json::json!({
            "clusterQueue": "q", "podSetAssignments": [{ "name": "launcher",
                "flavors": { "fournos/cluster-slot": "a" },
                "resourceUsage": { "fournos/cluster-slot": "100" } }] }))
            .unwrap(),
        );
        assert_eq!(observe_workload(&counted).slots, Some(100));
    }
}
