//! The two kinds of lock sentinel behind one trait: how to build one for a cluster
//! ([`Sentinel::build`]) and where it stands with Kueue ([`observe`]).
//!
//! - `fournosjob`: a lockOnly FournosJob with exactly the contract's spec and label;
//!   Fournos turns it into a Workload requesting all slots. Holding while its phase is
//!   `Admitted` or `Running` — and, since Fournos stops looking at that Workload once
//!   admitted, while the Workload itself is admitted ([`crate::fournos_lock`]).
//! - `workload`: a bare Kueue Workload requesting all of the cluster's slots. Holding
//!   while Kueue says `Admitted=True`. It has no pods, so lock-manager reports
//!   `PodsReady=True` itself once it is admitted ([`Sentinel::upkeep`]): otherwise
//!   Kueue's WaitForPodsReady (on by default since v0.19) evicts it after its timeout.

use std::collections::BTreeMap;
use std::fmt::Debug;

use hearth_api::conditions::{find as condition, is_true};
use hearth_api::fournosjob::{FournosJob, FournosJobSpec, HOLDING_PHASES};
use hearth_api::kueue::{PodSet, PriorityClassRef, Workload, WorkloadSpec, workload_conditions};
use hearth_api::names::{
    CLUSTER_LOCK_LABEL, CLUSTER_NODE_LABEL, CLUSTER_SLOT_RESOURCE, DEFAULT_CLUSTER_SLOTS,
    OWNER_ANNOTATION,
};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::core::DeserializeGuard;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::plan::{SentinelState, SentinelView};

/// Name of the single pod set (and container) of a `workload` sentinel.
pub const LOCK_POD_SET: &str = "lock";
/// Image of the sentinel's container. Nothing ever runs it: no pods are created for a
/// bare Workload; Kueue only reads the pod set's requests and node selector.
pub const PLACEHOLDER_IMAGE: &str = "registry.invalid/hearth/cluster-lock:never-runs";
/// `PodsReady` condition type and the reason Kueue itself uses once pods run.
pub const PODS_READY: &str = "PodsReady";
pub const PODS_READY_REASON: &str = "Started";

/// A WorkloadPriorityClass as a `workload` sentinel references it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Priority {
    pub class: String,
    pub value: i32,
}

/// Everything needed to build the sentinel of one cluster.
#[derive(Clone, Debug)]
pub struct SentinelSpec<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub cluster: &'a str,
    pub owner: &'a str,
    /// `status.kueue.clusterSlots`: a lock requests all of them.
    pub slots: i64,
    pub local_queue: &'a str,
    pub priority: Option<&'a Priority>,
}

/// A kind of lock sentinel.
pub trait Sentinel:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// Whether `--sentinel-priority-class` applies (Fournos picks a FournosJob's).
    const USES_PRIORITY_CLASS: bool;

    /// The sentinel of `spec.cluster` for `spec.owner`.
    fn build(spec: &SentinelSpec<'_>) -> Self;

    /// The owner it was created for.
    fn owner(&self) -> Option<String>;

    /// Where it stands with Kueue (deletion is handled by [`observe`]).
    fn state(&self) -> SentinelState;

    /// For a FournosJob sentinel, what [`crate::fournos_lock::amend`] needs of it.
    fn job_view(&self) -> Option<crate::fournos_lock::JobView> {
        None
    }

    /// A status patch (server-side apply, lock-manager's field manager) that keeps Kueue
    /// from evicting the sentinel, when one is needed now.
    fn upkeep(&self, _now: Timestamp) -> Option<Value> {
        None
    }
}

/// The cluster a sentinel locks, from its label.
pub fn cluster_of<K: Resource>(sentinel: &K) -> Option<&str> {
    sentinel
        .meta()
        .labels
        .as_ref()?
        .get(CLUSTER_LOCK_LABEL)
        .map(String::as_str)
        .filter(|c| !c.is_empty())
}

/// What the plan needs to know about a sentinel. A sentinel that cannot be decoded
/// is still a sentinel (it carries the label): it waits, and says why.
pub fn observe<K: Sentinel>(sentinel: &DeserializeGuard<K>) -> SentinelView {
    let meta = sentinel.meta();
    let name = meta.name.clone().unwrap_or_default();
    if meta.deletion_timestamp.is_some() {
        let owner = sentinel.0.as_ref().ok().and_then(Sentinel::owner);
        return SentinelView {
            name,
            owner,
            state: SentinelState::Terminating,
        };
    }
    match &sentinel.0 {
        Ok(s) => SentinelView {
            name,
            owner: s.owner(),
            state: s.state(),
        },
        Err(invalid) => SentinelView {
            name,
            owner: None,
            state: SentinelState::Waiting(Some(format!(
                "the sentinel cannot be read: {}",
                invalid.error
            ))),
        },
    }
}

fn labels(cluster: &str) -> BTreeMap<String, String> {
    [(CLUSTER_LOCK_LABEL.to_owned(), cluster.to_owned())].into()
}

impl Sentinel for FournosJob {
    const USES_PRIORITY_CLASS: bool = false;

    fn build(spec: &SentinelSpec<'_>) -> Self {
        let mut job = FournosJob::new(
            spec.name,
            FournosJobSpec::lock_sentinel(spec.cluster, spec.owner),
        );
        job.metadata.namespace = Some(spec.namespace.to_owned());
        job.metadata.labels = Some(labels(spec.cluster));
        job
    }

    fn owner(&self) -> Option<String> {
        self.spec.owner.clone()
    }

    fn job_view(&self) -> Option<crate::fournos_lock::JobView> {
        Some(crate::fournos_lock::observe_job(self))
    }

    fn state(&self) -> SentinelState {
        let status = self.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_deref());
        if phase.is_some_and(|p| HOLDING_PHASES.contains(&p)) {
            return SentinelState::Holding;
        }
        let message = status
            .and_then(|s| s.other.get("message"))
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty());
        SentinelState::Waiting(match (phase, message) {
            (_, Some(m)) => Some(m.to_owned()),
            (Some(p), None) => Some(format!("the FournosJob is {p}")),
            (None, None) => None,
        })
    }
}

impl Sentinel for Workload {
    const USES_PRIORITY_CLASS: bool = true;

    fn build(spec: &SentinelSpec<'_>) -> Self {
        let slots = if spec.slots > 0 {
            spec.slots
        } else {
            DEFAULT_CLUSTER_SLOTS
        };
        let quantity: BTreeMap<String, Quantity> = [(
            CLUSTER_SLOT_RESOURCE.to_owned(),
            Quantity(slots.to_string()),
        )]
        .into();
        let template = PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                node_selector: Some(
                    [(CLUSTER_NODE_LABEL.to_owned(), spec.cluster.to_owned())].into(),
                ),
                restart_policy: Some("Never".into()),
                containers: vec![Container {
                    name: LOCK_POD_SET.into(),
                    image: Some(PLACEHOLDER_IMAGE.into()),
                    resources: Some(ResourceRequirements {
                        requests: Some(quantity.clone()),
                        limits: Some(quantity),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        };
        let mut workload = Workload::new(
            spec.name,
            WorkloadSpec {
                pod_sets: vec![PodSet {
                    name: LOCK_POD_SET.into(),
                    count: 1,
                    template,
                    other: Default::default(),
                }],
                queue_name: Some(spec.local_queue.to_owned()),
                priority_class_ref: spec
                    .priority
                    .map(|p| PriorityClassRef::workload_priority_class(&p.class)),
                priority: spec.priority.map(|p| p.value),
                active: None,
                other: Default::default(),
            },
        );
        workload.metadata = ObjectMeta {
            name: Some(spec.name.to_owned()),
            namespace: Some(spec.namespace.to_owned()),
            labels: Some(labels(spec.cluster)),
            annotations: Some([(OWNER_ANNOTATION.to_owned(), spec.owner.to_owned())].into()),
            ..Default::default()
        };
        workload
    }

    fn owner(&self) -> Option<String> {
        self.metadata
            .annotations
            .as_ref()?
            .get(OWNER_ANNOTATION)
            .cloned()
    }

    fn state(&self) -> SentinelState {
        let conditions = self
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        // Kueue leaves `Admitted=True` for a moment after setting `Evicted=True`: an
        // evicted sentinel is already giving its slots back.
        if is_true(conditions, workload_conditions::ADMITTED)
            && !is_true(conditions, workload_conditions::EVICTED)
        {
            return SentinelState::Holding;
        }
        let said = |type_: &str, status: &str| {
            condition(conditions, type_)
                .filter(|c| c.status == status && !c.message.is_empty())
                .map(|c| c.message.clone())
        };
        let message = if self.spec.active == Some(false) {
            Some("the Workload is deactivated (spec.active=false)".to_owned())
        } else if let Some(m) = said(workload_conditions::FINISHED, "True") {
            Some(format!("Kueue marked the Workload finished: {m}"))
        } else if let Some(m) = said(workload_conditions::QUOTA_RESERVED, "False") {
            Some(m)
        } else if let Some(m) = said(workload_conditions::EVICTED, "True") {
            Some(m)
        } else if is_true(conditions, workload_conditions::QUOTA_RESERVED) {
            Some("quota is reserved; waiting for admission checks".to_owned())
        } else {
            None
        };
        SentinelState::Waiting(message)
    }

    /// `PodsReady=True` once admitted: Kueue evicts an admitted Workload whose
    /// `PodsReady` is not `True` within `waitForPodsReady.timeout` (and counts it as
    /// not ready for `blockAdmission`); a sentinel has no pods to become ready.
    fn upkeep(&self, now: Timestamp) -> Option<Value> {
        let status = self.status.as_ref()?;
        if !is_true(&status.conditions, workload_conditions::ADMITTED)
            || is_true(&status.conditions, PODS_READY)
        {
            return None;
        }
        let condition = Condition {
            type_: PODS_READY.into(),
            status: "True".into(),
            reason: PODS_READY_REASON.into(),
            message: "Lock sentinel: it has no pods and holds the cluster's slots while admitted"
                .into(),
            observed_generation: self.metadata.generation,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
        };
        Some(json!({ "conditions": [condition] }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_api::kueue::WorkloadStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use pretty_assertions::assert_eq;

    fn spec<'a>(priority: Option<&'a Priority>) -> SentinelSpec<'a> {
        SentinelSpec {
            name: "cluster-lock-a",
            namespace: "psap-automation",
            cluster: "a",
            owner: "alice",
            slots: 100,
            local_queue: "fournos-queue",
            priority,
        }
    }

    fn cond(type_: &str, status: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: message.into(),
            observed_generation: None,
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
        }
    }

    fn workload_with(conditions: Vec<Condition>) -> Workload {
        let mut w = Workload::build(&spec(None));
        w.status = Some(WorkloadStatus {
            conditions,
            ..Default::default()
        });
        w
    }

    #[test]
    fn fournosjob_has_exactly_the_contract_spec_and_label() {
        let job = serde_json::to_value(FournosJob::build(&spec(None))).unwrap();
        assert_eq!(
            job,
            json!({
                "apiVersion": "fournos.dev/v1",
                "kind": "FournosJob",
                "metadata": {
                    "name": "cluster-lock-a",
                    "namespace": "psap-automation",
                    "labels": { "fournos.dev/cluster-lock": "a" },
                },
                "spec": {
                    "cluster": "a",
                    "exclusive": true,
                    "lockOnly": true,
                    "owner": "alice",
                    "displayName": "Cluster lock: a (owner: alice)",
                },
            })
        );
    }

    #[test]
    fn fournosjob_holds_in_admitted_and_running_phases() {
        let mut job = FournosJob::build(&spec(None));
        assert_eq!(job.state(), SentinelState::Waiting(None));
        for (phase, holding) in [
            ("Pending", false),
            ("Admitted", true),
            ("Running", true),
            ("Succeeded", false),
        ] {
            job.status = Some(serde_json::from_value(json!({ "phase": phase })).unwrap());
            assert_eq!(job.state() == SentinelState::Holding, holding, "{phase}");
        }
        job.status = Some(
            serde_json::from_value(json!({ "phase": "Pending", "message": "insufficient quota" }))
                .unwrap(),
        );
        assert_eq!(
            job.state(),
            SentinelState::Waiting(Some("insufficient quota".into()))
        );
        assert_eq!(job.owner().as_deref(), Some("alice"));
    }

    #[test]
    fn workload_requests_all_slots_on_the_cluster() {
        let priority = Priority {
            class: "fournos-lock".into(),
            value: 1000,
        };
        let w = serde_json::to_value(Workload::build(&spec(Some(&priority)))).unwrap();
        assert_eq!(
            w["metadata"]["labels"],
            json!({ "fournos.dev/cluster-lock": "a" })
        );
        assert_eq!(
            w["metadata"]["annotations"],
            json!({ "fournos.dev/owner": "alice" })
        );
        assert_eq!(w["spec"]["queueName"], "fournos-queue");
        assert_eq!(
            w["spec"]["priorityClassRef"],
            json!({ "group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "fournos-lock" })
        );
        assert_eq!(w["spec"]["priority"], 1000);
        let ps = &w["spec"]["podSets"][0];
        assert_eq!(ps["count"], 1);
        assert_eq!(
            ps["template"]["spec"]["nodeSelector"],
            json!({ "fournos.dev/cluster": "a" })
        );
        assert_eq!(
            ps["template"]["spec"]["containers"][0]["resources"]["requests"],
            json!({ "fournos/cluster-slot": "100" })
        );
    }

    #[test]
    fn workload_without_priority_class_sets_neither_field() {
        let w = serde_json::to_value(Workload::build(&spec(None))).unwrap();
        assert!(w["spec"].get("priorityClassRef").is_none());
        assert!(w["spec"].get("priority").is_none());
    }

    #[test]
    fn workload_with_no_slots_known_requests_the_default() {
        let mut s = spec(None);
        s.slots = 0;
        let w = serde_json::to_value(Workload::build(&s)).unwrap();
        assert_eq!(
            w["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]["fournos/cluster-slot"],
            "100"
        );
    }

    #[test]
    fn workload_state_follows_kueue() {
        let quota = "couldn't assign flavors to pod set lock: insufficient unused quota for fournos/cluster-slot in flavor a, 1 more needed";
        assert_eq!(workload_with(vec![]).state(), SentinelState::Waiting(None));
        assert_eq!(
            workload_with(vec![cond("QuotaReserved", "False", quota)]).state(),
            SentinelState::Waiting(Some(quota.into()))
        );
        assert_eq!(
            workload_with(vec![
                cond("QuotaReserved", "True", ""),
                cond("Admitted", "True", "")
            ])
            .state(),
            SentinelState::Holding
        );
        assert_eq!(
            workload_with(vec![
                cond("Admitted", "False", ""),
                cond("Evicted", "True", "Exceeded the PodsReady timeout")
            ])
            .state(),
            SentinelState::Waiting(Some("Exceeded the PodsReady timeout".into()))
        );
        assert_eq!(
            workload_with(vec![
                cond("Admitted", "True", ""),
                cond("Evicted", "True", "Exceeded the PodsReady timeout")
            ])
            .state(),
            SentinelState::Waiting(Some("Exceeded the PodsReady timeout".into())),
            "being evicted is not holding"
        );
        let mut inactive = workload_with(vec![]);
        inactive.spec.active = Some(false);
        assert!(
            matches!(inactive.state(), SentinelState::Waiting(Some(m)) if m.contains("deactivated"))
        );
    }

    #[test]
    fn admitted_workload_gets_pods_ready_once() {
        let now = Timestamp::from_second(1_790_000_000).unwrap();
        assert_eq!(workload_with(vec![]).upkeep(now), None);
        let mut admitted = workload_with(vec![cond("Admitted", "True", "")]);
        admitted.metadata.generation = Some(3);
        let patch = admitted.upkeep(now).expect("PodsReady needed");
        assert_eq!(patch["conditions"][0]["type"], "PodsReady");
        assert_eq!(patch["conditions"][0]["status"], "True");
        assert_eq!(patch["conditions"][0]["reason"], "Started");
        assert_eq!(patch["conditions"][0]["observedGeneration"], 3);
        let ready = workload_with(vec![
            cond("Admitted", "True", ""),
            cond("PodsReady", "True", ""),
        ]);
        assert_eq!(
            ready.upkeep(now),
            None,
            "nothing written when nothing changed"
        );
    }

    #[test]
    fn observe_reads_owner_and_deletion() {
        let mut w = workload_with(vec![cond("Admitted", "True", "")]);
        let view = observe(&DeserializeGuard(Ok(w.clone())));
        assert_eq!(
            view,
            SentinelView {
                name: "cluster-lock-a".into(),
                owner: Some("alice".into()),
                state: SentinelState::Holding
            }
        );
        w.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert_eq!(
            observe(&DeserializeGuard(Ok(w))).state,
            SentinelState::Terminating
        );
        assert_eq!(cluster_of(&FournosJob::build(&spec(None))), Some("a"));
    }

    #[test]
    fn undecodable_sentinel_waits_and_says_why() {
        let guard: DeserializeGuard<Workload> = serde_json::from_value(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": { "name": "cluster-lock-a", "labels": { "fournos.dev/cluster-lock": "a" } },
            "spec": { "podSets": "not a list" },
        }))
        .unwrap();
        let view = observe(&guard);
        assert_eq!(view.owner, None);
        assert!(
            matches!(view.state, SentinelState::Waiting(Some(m)) if m.contains("cannot be read"))
        );
        assert_eq!(cluster_of(&guard), Some("a"));
    }
}
