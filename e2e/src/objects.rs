//! Kueue objects as tests write them (there are no Rust types for Kueue here), and readers
//! for the status fields tests wait on.

use hearth_api::names::{CLUSTER_NODE_LABEL, CLUSTER_SLOT_RESOURCE};
use serde_json::{Value, json};

/// Kueue's API version Hearth uses.
pub const KUEUE_API_VERSION: &str = "kueue.x-k8s.io/v1beta2";

/// A ResourceFlavor for `cluster`, shaped as Hearth makes them.
pub fn resource_flavor(cluster: &str) -> Value {
    json!({
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": { "name": cluster },
        "spec": { "nodeLabels": { CLUSTER_NODE_LABEL: cluster } },
    })
}

/// A `spec.resourceGroups` with one group covering `fournos/cluster-slot`, one flavor entry
/// per `(cluster, slots)`.
pub fn slot_resource_groups(entries: &[(&str, i64)]) -> Value {
    let flavors: Vec<Value> = entries
        .iter()
        .map(|(cluster, slots)| {
            json!({
                "name": cluster,
                "resources": [{ "name": CLUSTER_SLOT_RESOURCE, "nominalQuota": slots.to_string() }],
            })
        })
        .collect();
    json!([{ "coveredResources": [CLUSTER_SLOT_RESOURCE], "flavors": flavors }])
}

/// A bare Workload (no owner, no pods) that asks `local_queue` for `slots` cluster slots on
/// `cluster`, the way a Fournos job does.
pub fn slot_workload(
    namespace: &str,
    name: &str,
    local_queue: &str,
    cluster: &str,
    slots: i64,
) -> Value {
    workload(
        namespace,
        name,
        local_queue,
        cluster,
        &[(CLUSTER_SLOT_RESOURCE, slots)],
    )
}

/// A bare Workload (no owner, no pods) that asks `local_queue` for `requests` on
/// `cluster` (a nodeSelector on its label), the way a Fournos job does.
pub fn workload(
    namespace: &str,
    name: &str,
    local_queue: &str,
    cluster: &str,
    requests: &[(&str, i64)],
) -> Value {
    let quantity: std::collections::BTreeMap<&str, String> =
        requests.iter().map(|(r, n)| (*r, n.to_string())).collect();
    json!({
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": { "name": name, "namespace": namespace },
        "spec": {
            "queueName": local_queue,
            "podSets": [{
                "name": "main",
                "count": 1,
                "template": { "spec": {
                    "nodeSelector": { CLUSTER_NODE_LABEL: cluster },
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "job",
                        "image": "registry.invalid/hearth-e2e/never-runs",
                        "resources": { "requests": quantity, "limits": quantity },
                    }],
                }},
            }],
        },
    })
}

/// A ClusterQueue spec patch with one resource group that is not Hearth's: flavor
/// `flavor` giving 7 `example.com/widget`, as a GitOps tool would add it.
pub fn foreign_widget_group(flavor: &str) -> Value {
    json!({ "spec": { "resourceGroups": [{
        "coveredResources": ["example.com/widget"],
        "flavors": [{ "name": flavor, "resources": [
            { "name": "example.com/widget", "nominalQuota": "7" }
        ]}],
    }]}})
}

/// A condition of an object (`status.conditions[type]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub status: String,
    pub reason: String,
    pub message: String,
}

pub fn condition(object: &Value, type_: &str) -> Option<Condition> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| Condition {
            status: c["status"].as_str().unwrap_or_default().to_string(),
            reason: c["reason"].as_str().unwrap_or_default().to_string(),
            message: c["message"].as_str().unwrap_or_default().to_string(),
        })
}

/// Whether `object` has condition `type_` with status `True`.
pub fn is_true(object: &Value, type_: &str) -> bool {
    condition(object, type_).is_some_and(|c| c.status == "True")
}

/// The flavor an admitted Workload got for `resource` in its first pod set.
pub fn assigned_flavor(workload: &Value, resource: &str) -> Option<String> {
    workload["status"]["admission"]["podSetAssignments"][0]["flavors"][resource]
        .as_str()
        .map(str::to_string)
}
