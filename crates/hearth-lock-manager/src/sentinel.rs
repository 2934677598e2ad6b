//! The two kinds of lock sentinel behind one trait: how to build one for a cluster
//! ([`Sentinel::build`]) and where it stands with Kueue ([`observe`]).
//!
//! - `fournosjob`: a lockOnly FournosJob with exactly the contract's spec and label;
//!   Fournos turns it into a Workload requesting all slots. Holding while its phase is
//!   `Admitted` or `Running` — and, since Fournos stops looking at that Workload once
//!   admitted, while the Workload itself is admitted ([`crate::fournos_workloads`]).
//! - `workload`: a bare Kueue Workload requesting all of the cluster's slots. Holding
//!   while Kueue says `Admitted=True`. It has no pods, so lock-manager reports
//!   `PodsReady=True` itself once it is admitted ([`Sentinel::upkeep`]): otherwise
//!   Kueue's WaitForPodsReady (on by default since v0.19) evicts it after its timeout.

use std::collections::BTreeMap;
use std::fmt::Debug;

use hearth_api::conditions::{find as condition, is_true};
use hearth_api::fournosjob::{FournosJob, FournosJobSpec, HOLDING_PHASES};
use hearth_api::kueue::{
    PodSet, PriorityClassRef, Workload, WorkloadSpec, pinned_cluster, requested_slots,
    workload_conditions,
};
use hearth_api::names::{
    CLUSTER_LOCK_LABEL, CLUSTER_NAMESPACE_LABEL, CLUSTER_NODE_LABEL, CLUSTER_SLOT_RESOURCE,
    CORDON_TAINT_KEY, DEFAULT_CLUSTER_SLOTS, MANAGED_BY_LABEL, OWNER_ANNOTATION, sentinel_labels,
};
use hearth_api::text::bounded;
use hearth_runtime::kit::MAX_DECODE_ERROR;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{
    Container, PodSpec, PodTemplateSpec, ResourceRequirements, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::core::DeserializeGuard;
use kube::{Resource, ResourceExt as _};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::holders::admitted_flavor;
use crate::views::{Expect, JobView, MAX_QUOTED, Misplaced, SentinelState, SentinelView};

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
    /// Where this Hearth's FournosClusters live: the `fournos.dev/cluster-namespace`
    /// label that tells its sentinels from another Hearth's.
    pub cluster_namespace: &'a str,
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

    /// Where it stands with Kueue (deletion is handled by [`observe`]), given what a
    /// sentinel of this cluster must hold to lock it.
    fn state(&self, expect: &Expect<'_>) -> SentinelState;

    /// Why this object is not a sentinel lock-manager would have built for `cluster`
    /// (someone changed it, or made it), or `None` when it is one. `local_queue`, when
    /// given, is the LocalQueue a sentinel lock-manager submits itself must be in.
    fn shape_problem(&self, cluster: &str, local_queue: Option<&str>) -> Option<String>;

    /// For a FournosJob sentinel, what the state machine ([`crate::state`]) needs of it.
    fn job_view(&self) -> Option<JobView> {
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

/// What the plan needs to know about a sentinel, which carries this Hearth's labels.
/// `ours`: its UID is the one this lock-manager created (or adopted) for the cluster; only
/// one of ours still shaped as built is trusted to hold a lock. A sentinel that cannot be
/// decoded is still labelled as one: it waits, and says why.
pub fn observe<K: Sentinel>(
    sentinel: &DeserializeGuard<K>,
    expect: &Expect<'_>,
    ours: impl Fn(&str) -> bool,
) -> SentinelView {
    let meta = sentinel.meta();
    let name = meta.name.clone().unwrap_or_default();
    let uid = meta.uid.clone();
    let cluster = cluster_of(sentinel).unwrap_or_default();
    let ours = uid.as_deref().is_some_and(ours);
    let proven = ours
        && sentinel
            .0
            .as_ref()
            .is_ok_and(|s| s.shape_problem(cluster, expect.local_queue).is_none());
    if meta.deletion_timestamp.is_some() {
        let owner = sentinel.0.as_ref().ok().and_then(Sentinel::owner);
        return SentinelView {
            name,
            uid,
            owner,
            ours,
            proven,
            state: SentinelState::Terminating,
        };
    }
    match &sentinel.0 {
        Ok(s) => SentinelView {
            name,
            uid,
            owner: s.owner(),
            ours,
            proven,
            state: s.state(expect),
        },
        Err(invalid) => SentinelView {
            name,
            uid,
            owner: None,
            ours,
            proven,
            state: SentinelState::Waiting(Some(format!(
                "the sentinel cannot be read: {}",
                bounded(&invalid.error, MAX_DECODE_ERROR)
            ))),
        },
    }
}

/// A sentinel of an older controller, labelled only `fournos.dev/cluster-lock`: the
/// Python Hearth's, or this one's before sentinels carried Hearth's labels. Adopted once
/// (labelled) when the cluster's status names it and no sentinel UID is recorded yet.
pub fn is_legacy<K: Sentinel>(sentinel: &K, cluster: &str) -> bool {
    let labels = sentinel.meta().labels.as_ref();
    let get = |k: &str| labels.and_then(|l| l.get(k));
    get(CLUSTER_LOCK_LABEL).is_some_and(|c| c == cluster)
        && get(MANAGED_BY_LABEL).is_none()
        && get(CLUSTER_NAMESPACE_LABEL).is_none()
        && sentinel.shape_problem(cluster, None).is_none()
}

fn labels(spec: &SentinelSpec<'_>) -> BTreeMap<String, String> {
    sentinel_labels(spec.cluster, spec.cluster_namespace)
}

impl Sentinel for FournosJob {
    const USES_PRIORITY_CLASS: bool = false;

    fn build(spec: &SentinelSpec<'_>) -> Self {
        let mut job = FournosJob::new(
            spec.name,
            FournosJobSpec::lock_sentinel(spec.cluster, spec.owner),
        );
        job.metadata.namespace = Some(spec.namespace.to_owned());
        job.metadata.labels = Some(labels(spec));
        job
    }

    fn owner(&self) -> Option<String> {
        self.spec.owner.clone()
    }

    /// A lock is a `lockOnly` job for this cluster: Fournos then requests all of its
    /// slots and runs nothing. An exclusive job that runs work is no lock.
    fn shape_problem(&self, cluster: &str, _local_queue: Option<&str>) -> Option<String> {
        if self.spec.lock_only != Some(true) {
            return Some("it is not a lockOnly FournosJob".to_owned());
        }
        match self.spec.cluster.as_deref() {
            Some(c) if c == cluster => None,
            Some(c) => Some(format!("its spec.cluster is {}", bounded(c, MAX_QUOTED))),
            None => Some("it names no spec.cluster".to_owned()),
        }
    }

    fn job_view(&self) -> Option<JobView> {
        Some(observe_job(self))
    }

    /// Fournos's phase only: what holds the slots is the Workload Fournos made, which
    /// [`crate::fournos_workloads`] checks against `expect`.
    fn state(&self, _expect: &Expect<'_>) -> SentinelState {
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
                // A cordon keeps new jobs off the cluster, not its lock: an operator
                // cordons, waits for Drained, then locks (docs/fleet.md: Maintenance).
                tolerations: Some(vec![Toleration {
                    key: Some(CORDON_TAINT_KEY.to_owned()),
                    operator: Some("Exists".into()),
                    effect: Some("NoSchedule".into()),
                    ..Default::default()
                }]),
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
            labels: Some(labels(spec)),
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

    fn state(&self, expect: &Expect<'_>) -> SentinelState {
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
            let queue = self
                .status
                .as_ref()
                .and_then(|s| s.admission.as_ref())
                .map_or("", |a| a.cluster_queue.as_str());
            if let Some(why) = expect.misplaced(queue, admitted_flavor(self)) {
                return SentinelState::Misplaced(Misplaced::WrongFlavor(why));
            }
            if let Some(why) = expect.too_few(requested_slots(self)) {
                return SentinelState::Misplaced(Misplaced::WrongSlots(why));
            }
            return SentinelState::Holding;
        }
        let requested = requested_slots(self);
        if let Some(want) = expect.slots.filter(|want| requested != Some(*want))
            && self.metadata.deletion_timestamp.is_none()
        {
            return SentinelState::Misplaced(Misplaced::WrongSlots(format!(
                "it requests {} {CLUSTER_SLOT_RESOURCE} but the cluster has {want}",
                requested.unwrap_or_default()
            )));
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

    /// A lock is one pod set pinned to the cluster requesting its slots, in the
    /// LocalQueue lock-manager submits it to: a Fournos user may move a waiting
    /// Workload to another queue (Kueue allows it until quota is reserved), where it is
    /// admitted against another ClusterQueue and holds nothing of the cluster.
    fn shape_problem(&self, cluster: &str, local_queue: Option<&str>) -> Option<String> {
        if pinned_cluster(self) != Some(cluster) {
            return Some(format!(
                "its first pod set is not pinned to {CLUSTER_NODE_LABEL}={cluster}"
            ));
        }
        if let Some(want) = local_queue.filter(|q| self.spec.queue_name.as_deref() != Some(*q)) {
            return Some(match &self.spec.queue_name {
                Some(q) => format!("it is in LocalQueue {}, not {want}", bounded(q, MAX_QUOTED)),
                None => format!("it names no LocalQueue (lock-manager submits to {want})"),
            });
        }
        requested_slots(self)
            .is_none()
            .then(|| format!("it requests no {CLUSTER_SLOT_RESOURCE}"))
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

/// What the state machine needs of a FournosJob sentinel.
pub fn observe_job(job: &FournosJob) -> JobView {
    let status = job.status.as_ref();
    let admitted_at = status
        .and_then(|s| s.other.get("conditions"))
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter().find(|c| {
                c.get("type").and_then(Value::as_str) == Some("WorkloadAdmitted")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
        .and_then(|c| c.get("lastTransitionTime")?.as_str()?.parse().ok());
    // kopf keeps each handler's progress as JSON in an annotation; a failing handler's
    // record carries the exception's text.
    let fournos_said = job
        .annotations()
        .iter()
        .filter(|(k, _)| k.starts_with("kopf.zalando.org/"))
        .filter_map(|(_, v)| serde_json::from_str::<Value>(v).ok())
        .filter(|v| v.get("success").and_then(Value::as_bool) != Some(true))
        .find_map(|v| v.get("message")?.as_str().map(str::to_owned));
    JobView {
        name: job.name_any(),
        uid: job.uid(),
        created: job.metadata.creation_timestamp.as_ref().map(|t| t.0),
        phase: status.and_then(|s| s.phase.clone()),
        admitted_at,
        deleting_since: job.metadata.deletion_timestamp.as_ref().map(|t| t.0),
        finalizers: job.finalizers().to_vec(),
        fournos_said,
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
            cluster_namespace: "hearth",
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
                    "labels": {
                        "fournos.dev/cluster-lock": "a",
                        "app.kubernetes.io/managed-by": "hearth",
                        "fournos.dev/cluster-namespace": "hearth",
                    },
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
        assert_eq!(job.state(&Expect::default()), SentinelState::Waiting(None));
        for (phase, holding) in [
            ("Pending", false),
            ("Admitted", true),
            ("Running", true),
            ("Succeeded", false),
        ] {
            job.status = Some(serde_json::from_value(json!({ "phase": phase })).unwrap());
            assert_eq!(
                job.state(&Expect::default()) == SentinelState::Holding,
                holding,
                "{phase}"
            );
        }
        job.status = Some(
            serde_json::from_value(json!({ "phase": "Pending", "message": "insufficient quota" }))
                .unwrap(),
        );
        assert_eq!(
            job.state(&Expect::default()),
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
            json!({
                "fournos.dev/cluster-lock": "a",
                "app.kubernetes.io/managed-by": "hearth",
                "fournos.dev/cluster-namespace": "hearth",
            })
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
        // It tolerates the cordon taint: a lock taken during a cordon is held once drained.
        assert_eq!(
            ps["template"]["spec"]["tolerations"],
            json!([{ "key": "fournos.dev/cordoned", "operator": "Exists", "effect": "NoSchedule" }])
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
        assert_eq!(
            workload_with(vec![]).state(&Expect::default()),
            SentinelState::Waiting(None)
        );
        assert_eq!(
            workload_with(vec![cond("QuotaReserved", "False", quota)]).state(&Expect::default()),
            SentinelState::Waiting(Some(quota.into()))
        );
        assert_eq!(
            workload_with(vec![
                cond("QuotaReserved", "True", ""),
                cond("Admitted", "True", "")
            ])
            .state(&Expect::default()),
            SentinelState::Holding
        );
        assert_eq!(
            workload_with(vec![
                cond("Admitted", "False", ""),
                cond("Evicted", "True", "Exceeded the PodsReady timeout")
            ])
            .state(&Expect::default()),
            SentinelState::Waiting(Some("Exceeded the PodsReady timeout".into()))
        );
        assert_eq!(
            workload_with(vec![
                cond("Admitted", "True", ""),
                cond("Evicted", "True", "Exceeded the PodsReady timeout")
            ])
            .state(&Expect::default()),
            SentinelState::Waiting(Some("Exceeded the PodsReady timeout".into())),
            "being evicted is not holding"
        );
        let mut inactive = workload_with(vec![]);
        inactive.spec.active = Some(false);
        assert!(
            matches!(inactive.state(&Expect::default()), SentinelState::Waiting(Some(m)) if m.contains("deactivated"))
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
        w.metadata.uid = Some("u1".into());
        let view = observe(&DeserializeGuard(Ok(w.clone())), &Expect::default(), |u| {
            u == "u1"
        });
        assert_eq!(
            view,
            SentinelView {
                name: "cluster-lock-a".into(),
                uid: Some("u1".into()),
                owner: Some("alice".into()),
                ours: true,
                proven: true,
                state: SentinelState::Holding
            }
        );
        let other = observe(&DeserializeGuard(Ok(w.clone())), &Expect::default(), |u| {
            u == "u2"
        });
        assert!(
            !other.proven,
            "another UID is not the one lock-manager created"
        );
        w.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert_eq!(
            observe(&DeserializeGuard(Ok(w)), &Expect::default(), |_| true).state,
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
        let view = observe(&guard, &Expect::default(), |_| true);
        assert_eq!(view.owner, None);
        assert!(
            matches!(view.state, SentinelState::Waiting(Some(m)) if m.contains("cannot be read"))
        );
        assert_eq!(cluster_of(&guard), Some("a"));
    }

    fn admitted_on(queue: &str, flavor: &str, slots: i64) -> Workload {
        let mut s = spec(None);
        s.slots = slots;
        let mut w = Workload::build(&s);
        w.status = Some(
            serde_json::from_value(json!({
                "conditions": [cond("QuotaReserved", "True", ""), cond("Admitted", "True", "")],
                "admission": {
                    "clusterQueue": queue,
                    "podSetAssignments": [{"name": "lock", "flavors": {"fournos/cluster-slot": flavor}, "count": 1}],
                },
            }))
            .unwrap(),
        );
        w
    }

    /// Issue 24 (3): admitted is not enough; it must be the cluster's queue, the cluster's
    /// flavor and every slot.
    #[test]
    fn a_workload_holds_only_the_clusters_queue_flavor_and_slots() {
        let expect = Expect {
            cluster_queue: Some("fournos-queue"),
            flavor: Some("a"),
            slots: Some(100),
            local_queue: None,
        };
        assert_eq!(
            admitted_on("fournos-queue", "a", 100).state(&expect),
            SentinelState::Holding
        );
        assert_eq!(
            admitted_on("fournos-queue", "a", 150).state(&expect),
            SentinelState::Holding,
            "more than all is all"
        );
        assert!(matches!(
            admitted_on("other-queue", "a", 100).state(&expect),
            SentinelState::Misplaced(Misplaced::WrongFlavor(m)) if m.contains("other-queue")
        ));
        assert!(matches!(
            admitted_on("fournos-queue", "spot", 100).state(&expect),
            SentinelState::Misplaced(Misplaced::WrongFlavor(m)) if m.contains("spot")
        ));
        assert!(matches!(
            admitted_on("fournos-queue", "a", 1).state(&expect),
            SentinelState::Misplaced(Misplaced::WrongSlots(m)) if m.contains("holds 1")
        ));
    }

    #[test]
    fn only_a_sentinel_shaped_as_built_can_be_proven() {
        assert_eq!(
            FournosJob::build(&spec(None)).shape_problem("a", None),
            None
        );
        assert_eq!(Workload::build(&spec(None)).shape_problem("a", None), None);
        assert!(
            FournosJob::build(&spec(None))
                .shape_problem("b", None)
                .is_some()
        );
        let mut exclusive = FournosJob::build(&spec(None));
        exclusive.spec.lock_only = Some(false);
        assert!(
            exclusive
                .shape_problem("a", None)
                .unwrap()
                .contains("lockOnly")
        );
        let mut unpinned = Workload::build(&spec(None));
        unpinned.spec.pod_sets[0]
            .template
            .spec
            .as_mut()
            .unwrap()
            .node_selector = None;
        assert!(unpinned.shape_problem("a", None).is_some());
        // A Workload moved to another LocalQueue while it waited is not the one built.
        let built = Workload::build(&spec(None));
        let queue = built.spec.queue_name.clone().unwrap();
        assert_eq!(built.shape_problem("a", Some(&queue)), None);
        let mut moved = built.clone();
        moved.spec.queue_name = Some("side-queue".into());
        assert!(
            moved
                .shape_problem("a", Some(&queue))
                .unwrap()
                .contains("LocalQueue side-queue, not")
        );
        moved.spec.queue_name = None;
        assert!(moved.shape_problem("a", Some(&queue)).is_some());
        assert_eq!(
            moved.shape_problem("a", None),
            None,
            "unchecked without a queue"
        );
        // A UID lock-manager knows does not make a changed object a sentinel it trusts,
        // but it is still its own (to replace).
        exclusive.metadata.uid = Some("u1".into());
        let view = observe(&DeserializeGuard(Ok(exclusive)), &Expect::default(), |_| {
            true
        });
        assert!(!view.proven && view.ours);
    }

    #[test]
    fn legacy_sentinels_have_only_the_lock_label_and_the_right_shape() {
        let mut python = FournosJob::build(&spec(None));
        python.metadata.name = Some("hearth-lock-a".into());
        python.metadata.labels = Some([(CLUSTER_LOCK_LABEL.to_owned(), "a".to_owned())].into());
        assert!(is_legacy(&python, "a"));
        assert!(!is_legacy(&python, "b"), "another cluster's");
        let mut job = python.clone();
        job.spec.lock_only = Some(false);
        assert!(!is_legacy(&job, "a"), "an exclusive job is no lock");
        assert!(
            !is_legacy(&FournosJob::build(&spec(None)), "a"),
            "already this Hearth's"
        );
        let mut other_hearth = FournosJob::build(&spec(None));
        other_hearth
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .remove(MANAGED_BY_LABEL);
        assert!(
            !is_legacy(&other_hearth, "a"),
            "a cluster-namespace label is not legacy"
        );
    }

    #[test]
    fn observes_fournos_jobs() {
        const JOB: &str = "cluster-lock-a";
        let j: FournosJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "fournos.dev/v1", "kind": "FournosJob",
            "metadata": { "name": JOB, "uid": "u1", "annotations": {
                "kopf.zalando.org/on_create": "{\"started\":\"2026-01-01T00:00:00\",\"retries\":2,\"success\":false,\"failure\":false,\"message\":\"(422) Reason: Unprocessable Entity\"}" } },
            "spec": {},
            "status": { "phase": "Admitted", "conditions": [
                { "type": "WorkloadAdmitted", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z" } ] },
        }))
        .unwrap();
        let v = observe_job(&j);
        assert_eq!(v.phase.as_deref(), Some("Admitted"));
        assert_eq!(v.admitted_at, Some("2026-01-01T00:00:05Z".parse().unwrap()));
        assert_eq!(
            v.fournos_said.as_deref(),
            Some("(422) Reason: Unprocessable Entity")
        );
    }
}
