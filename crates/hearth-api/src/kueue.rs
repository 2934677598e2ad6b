//! The Kueue `v1beta2` objects Hearth reads or writes.
//!
//! The ClusterQueue is shared with the platform team and their GitOps tools, and
//! Hearth updates it with a read-modify-write. So every level Hearth touches keeps
//! the fields it does not model in `other` and writes them back untouched: an
//! update never drops a field added by a newer Kueue or by someone else.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodTemplateSpec, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::names::{CLUSTER_NODE_LABEL, CLUSTER_SLOT_RESOURCE};

pub const KUEUE_GROUP: &str = "kueue.x-k8s.io";
pub const KUEUE_VERSION: &str = "v1beta2";

/// Fields of an object that Hearth does not model, kept verbatim.
pub type Unmodeled = BTreeMap<String, Value>;

/// `ResourceFlavor` spec: Hearth sets `nodeLabels` (the cluster and its pool labels) and
/// `nodeTaints` (the cordon taint).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "ResourceFlavor",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceFlavorSpec {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_taints: Vec<Taint>,
    #[serde(flatten)]
    pub other: Unmodeled,
}

/// `ClusterQueue` spec: Hearth models `resourceGroups`; everything else passes through.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "ClusterQueue",
    status = "ClusterQueueStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_groups: Vec<ResourceGroup>,
    #[serde(flatten)]
    pub other: Unmodeled,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceGroup {
    #[serde(default)]
    pub covered_resources: Vec<String>,
    #[serde(default)]
    pub flavors: Vec<FlavorQuotas>,
    #[serde(flatten)]
    pub other: Unmodeled,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FlavorQuotas {
    pub name: String,
    #[serde(default)]
    pub resources: Vec<ResourceQuota>,
    #[serde(flatten)]
    pub other: Unmodeled,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQuota {
    pub name: String,
    pub nominal_quota: Quantity,
    /// `borrowingLimit`, `lendingLimit` and anything newer.
    #[serde(flatten)]
    pub other: Unmodeled,
}

/// ClusterQueue status: Hearth only reads its conditions (e.g. `Active`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(flatten)]
    pub other: Unmodeled,
}

/// `LocalQueue` spec (test fixtures and the workload sentinel's queue).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "LocalQueue",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueSpec {
    pub cluster_queue: String,
    #[serde(flatten)]
    pub other: Unmodeled,
}

/// `Workload`: the lock sentinel of kind `workload`, and what Fournos makes of a job.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "Workload",
    namespaced,
    status = "WorkloadStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpec {
    pub pod_sets: Vec<PodSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_name: Option<String>,
    /// In v1beta2 a CRD rule requires `priority` whenever this is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_ref: Option<PriorityClassRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<bool>,
    #[serde(flatten)]
    pub other: Unmodeled,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSet {
    pub name: String,
    pub count: i32,
    pub template: PodTemplateSpec,
    #[serde(flatten)]
    pub other: Unmodeled,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PriorityClassRef {
    pub group: String,
    pub kind: String,
    pub name: String,
}

impl PriorityClassRef {
    /// A reference to a Kueue `WorkloadPriorityClass`.
    pub fn workload_priority_class(name: impl Into<String>) -> Self {
        Self {
            group: KUEUE_GROUP.into(),
            kind: "WorkloadPriorityClass".into(),
            name: name.into(),
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
    #[serde(flatten)]
    pub other: Unmodeled,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    pub cluster_queue: String,
    #[serde(default)]
    pub pod_set_assignments: Vec<PodSetAssignment>,
    #[serde(flatten)]
    pub other: Unmodeled,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSetAssignment {
    pub name: String,
    /// Resource name → ResourceFlavor the resource was admitted on.
    #[serde(default)]
    pub flavors: BTreeMap<String, String>,
    /// Resource name → what the pod set uses of it in all (Kueue's own accounting).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_usage: BTreeMap<String, Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    #[serde(flatten)]
    pub other: Unmodeled,
}

/// Workload condition types Hearth reads.
pub mod workload_conditions {
    pub const QUOTA_RESERVED: &str = "QuotaReserved";
    pub const ADMITTED: &str = "Admitted";
    pub const EVICTED: &str = "Evicted";
    pub const FINISHED: &str = "Finished";
}

/// The integer value of a quantity Hearth publishes (`100`, `8`; also `1k`, `2Ki`,
/// `100000m`). Fractional or unparsable quantities give `None`: Hearth never writes
/// those, so such a value belongs to someone else and is left alone.
pub fn quantity_to_i64(q: &Quantity) -> Option<i64> {
    crate::quantity::exact_i64(&q.0)
}

/// The cluster a Workload's first pod set is pinned to: its node selector on
/// [`CLUSTER_NODE_LABEL`], as Fournos and lock-manager pin a job to its cluster.
pub fn pinned_cluster(w: &Workload) -> Option<&str> {
    w.spec
        .pod_sets
        .first()?
        .template
        .spec
        .as_ref()?
        .node_selector
        .as_ref()?
        .get(CLUSTER_NODE_LABEL)
        .map(String::as_str)
}

/// `fournos/cluster-slot` requested by a Workload's first pod set.
pub fn requested_slots(w: &Workload) -> Option<i64> {
    pod_set_slots(w.spec.pod_sets.first()?)
}

/// `fournos/cluster-slot` a pod set requests: its containers' requests times its count.
pub fn pod_set_slots(ps: &PodSet) -> Option<i64> {
    let each = ps
        .template
        .spec
        .as_ref()?
        .containers
        .iter()
        .filter_map(|c| {
            c.resources
                .as_ref()?
                .requests
                .as_ref()?
                .get(CLUSTER_SLOT_RESOURCE)
                .and_then(quantity_to_i64)
        })
        .sum::<i64>();
    (each > 0).then(|| each.saturating_mul(i64::from(ps.count.max(1))))
}

/// The `fournos/cluster-slot` a Workload holds on `flavor`, as Kueue counted it: the
/// `resourceUsage` of every pod set assigned that resource on the flavor, each rounded
/// up as Kueue rounds (`Quantity.Value()`). `Some(0)` when it holds none there; `None`
/// when it is not admitted, or a pod set on the flavor has no readable usage (a Kueue
/// that does not report usage, or a value outside the grammar): a count that cannot be
/// read never proves a lock.
pub fn admitted_slots_on(w: &Workload, flavor: &str) -> Option<i64> {
    w.status.as_ref()?.admission.as_ref()?;
    slots_of(assignments_on(w, flavor))
}

/// The pod sets Kueue admitted `w` with `fournos/cluster-slot` on `flavor` (none when it
/// is not admitted).
pub fn assignments_on<'a>(
    w: &'a Workload,
    flavor: &'a str,
) -> impl Iterator<Item = &'a PodSetAssignment> + 'a {
    w.status
        .iter()
        .flat_map(|s| s.admission.iter())
        .flat_map(|a| a.pod_set_assignments.iter())
        .filter(move |a| {
            a.flavors
                .get(CLUSTER_SLOT_RESOURCE)
                .is_some_and(|f| f == flavor)
        })
}

/// The `fournos/cluster-slot` those pod sets used, as in [`admitted_slots_on`].
pub fn slots_of<'a>(mut assignments: impl Iterator<Item = &'a PodSetAssignment>) -> Option<i64> {
    assignments.try_fold(0i64, |total, a| {
        let used = a.resource_usage.get(CLUSTER_SLOT_RESOURCE)?;
        total.checked_add(crate::quantity::ceil_i64(&used.0)?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// A ClusterQueue as a newer Kueue and a GitOps tool might write it: fields
    /// Hearth's types do not know at every level, a foreign flavor and a foreign group.
    fn foreign_cluster_queue() -> Value {
        serde_json::json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {
                "name": "fournos-queue",
                "resourceVersion": "4242",
                "labels": {"team": "platform"},
                "annotations": {"argocd.argoproj.io/tracking-id": "x"}
            },
            "spec": {
                "cohortName": "gpu-fleet",
                "namespaceSelector": {"matchLabels": {"fournos.dev/queue-access": "true"}},
                "queueingStrategy": "BestEffortFIFO",
                "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                "futureSpecField": {"nested": [1, 2, {"deep": true}]},
                "resourceGroups": [
                    {
                        "coveredResources": ["fournos/cluster-slot", "fournos/gpu-a100"],
                        "futureGroupField": "kept",
                        "flavors": [
                            {
                                "name": "cluster-a",
                                "futureFlavorField": 7,
                                "resources": [
                                    {"name": "fournos/cluster-slot", "nominalQuota": "100", "borrowingLimit": "0"},
                                    {"name": "fournos/gpu-a100", "nominalQuota": "8", "lendingLimit": "2", "futureQuotaField": "z"}
                                ]
                            },
                            {
                                "name": "gitops-flavor",
                                "resources": [
                                    {"name": "fournos/cluster-slot", "nominalQuota": "5"},
                                    {"name": "fournos/gpu-a100", "nominalQuota": "1"}
                                ]
                            }
                        ]
                    },
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [{"name": "default", "resources": [
                            {"name": "cpu", "nominalQuota": "10"},
                            {"name": "memory", "nominalQuota": "64Gi"}
                        ]}]
                    }
                ]
            },
            "status": {
                "conditions": [{"type": "Active", "status": "True", "reason": "Ready", "message": "Can admit new workloads", "lastTransitionTime": "2026-11-21T00:00:00Z"}],
                "pendingWorkloads": 0,
                "flavorsUsage": [{"name": "cluster-a", "resources": [{"name": "fournos/cluster-slot", "total": "1"}]}]
            }
        })
    }

    #[test]
    fn cluster_queue_round_trip_keeps_every_field() {
        let original = foreign_cluster_queue();
        let cq: ClusterQueue = serde_json::from_value(original.clone()).unwrap();
        assert_eq!(serde_json::to_value(&cq).unwrap(), original);
    }

    #[test]
    fn cluster_queue_modification_keeps_unmodeled_fields() {
        let original = foreign_cluster_queue();
        let mut cq: ClusterQueue = serde_json::from_value(original.clone()).unwrap();
        // What a Hearth update does: change one quota it manages.
        cq.spec.resource_groups[0].flavors[0].resources[1].nominal_quota = Quantity("4".into());
        let written = serde_json::to_value(&cq).unwrap();

        let mut expected = original;
        expected["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] =
            serde_json::json!("4");
        assert_eq!(written, expected);
    }

    #[test]
    fn workload_round_trip_keeps_every_field() {
        let original = serde_json::json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": "cluster-lock-a", "namespace": "psap-automation"},
            "spec": {
                "queueName": "fournos-queue",
                "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "fournos-lock"},
                "priority": 1000,
                "active": true,
                "maximumExecutionTimeSeconds": 60,
                "podSets": [{
                    "name": "lock",
                    "count": 1,
                    "minCount": 1,
                    "template": {"spec": {
                        "nodeSelector": {"fournos.dev/cluster": "a"},
                        "containers": [{"name": "lock", "resources": {"requests": {"fournos/cluster-slot": "100"}}}]
                    }}
                }]
            },
            "status": {
                "conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": "2026-11-21T00:00:00Z"}],
                "admission": {"clusterQueue": "fournos-queue", "podSetAssignments": [{"name": "lock", "flavors": {"fournos/cluster-slot": "a"}, "count": 1}]},
                "requeueState": {"count": 1}
            }
        });
        let wl: Workload = serde_json::from_value(original.clone()).unwrap();
        assert_eq!(serde_json::to_value(&wl).unwrap(), original);
    }

    #[test]
    fn quantities_hearth_publishes_parse() {
        let q = |s: &str| quantity_to_i64(&Quantity(s.into()));
        assert_eq!(q("100"), Some(100));
        assert_eq!(q("0"), Some(0));
        assert_eq!(q("2k"), Some(2000));
        assert_eq!(q("1Ki"), Some(1024));
        assert_eq!(q("500m"), None);
        assert_eq!(q("1.5"), None);
        assert_eq!(q(""), None);
        assert_eq!(q("9223372036854775807Ki"), None);
    }
}
