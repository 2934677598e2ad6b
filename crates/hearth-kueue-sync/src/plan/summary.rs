//! A one-line account of a ClusterQueue change, for logs and Events.

use std::collections::{BTreeMap, BTreeSet};

use hearth_api::kueue::ClusterQueueSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::queue::{equivalent_specs, same_quantity};

/// What changes from `old` to `new`, flavor by flavor: e.g.
/// `added flavors a, b; removed flavors c; d: fournos/gpu-a100 8→4;
/// resourceGroups[0].coveredResources: +fournos/gpu-h100 -fournos/gpu-l40s`.
/// `old` is `None` when the queue did not exist. Says `no change` when there is none
/// and `entries reordered or other fields changed` when no quota,
/// flavor or covered resource changes.
pub fn cluster_queue_changes_summary(
    old: Option<&ClusterQueueSpec>,
    new: &ClusterQueueSpec,
) -> String {
    let empty = ClusterQueueSpec::default();
    let old = old.unwrap_or(&empty);
    let (old_flavors, new_flavors) = (flavor_quotas(old), flavor_quotas(new));
    let mut parts = Vec::new();

    let added: Vec<&str> = new_flavors
        .keys()
        .filter(|f| !old_flavors.contains_key(*f))
        .map(|f| f.as_str())
        .collect();
    if !added.is_empty() {
        parts.push(format!("added flavors {}", added.join(", ")));
    }
    let removed: Vec<&str> = old_flavors
        .keys()
        .filter(|f| !new_flavors.contains_key(*f))
        .map(|f| f.as_str())
        .collect();
    if !removed.is_empty() {
        parts.push(format!("removed flavors {}", removed.join(", ")));
    }
    for (flavor, new_quotas) in &new_flavors {
        let Some(old_quotas) = old_flavors.get(flavor) else {
            continue;
        };
        let mut changes = Vec::new();
        for (resource, new_q) in new_quotas {
            match old_quotas.get(resource) {
                None => changes.push(format!("{resource} +{}", new_q.0)),
                Some(old_q) if !same_quantity(old_q, new_q) => {
                    changes.push(format!("{resource} {}→{}", old_q.0, new_q.0));
                }
                Some(_) => {}
            }
        }
        for resource in old_quotas.keys().filter(|r| !new_quotas.contains_key(*r)) {
            changes.push(format!("{resource} -"));
        }
        if !changes.is_empty() {
            parts.push(format!("{flavor}: {}", changes.join(", ")));
        }
    }
    for (i, group) in new.resource_groups.iter().enumerate() {
        let before: BTreeSet<&String> = old
            .resource_groups
            .get(i)
            .map(|g| g.covered_resources.iter().collect())
            .unwrap_or_default();
        let after: BTreeSet<&String> = group.covered_resources.iter().collect();
        let mut changes: Vec<String> = after.difference(&before).map(|r| format!("+{r}")).collect();
        changes.extend(before.difference(&after).map(|r| format!("-{r}")));
        if !changes.is_empty() {
            parts.push(format!(
                "resourceGroups[{i}].coveredResources: {}",
                changes.join(" ")
            ));
        }
    }
    if old.resource_groups.len() != new.resource_groups.len() {
        parts.push(format!(
            "resourceGroups: {} → {}",
            old.resource_groups.len(),
            new.resource_groups.len()
        ));
    }
    if !parts.is_empty() {
        parts.join("; ")
    } else if equivalent_specs(old, new) {
        "no change".to_owned()
    } else {
        "entries reordered or other fields changed".to_owned()
    }
}

/// Flavor → resource → nominal quota, over all groups.
fn flavor_quotas(spec: &ClusterQueueSpec) -> BTreeMap<&String, BTreeMap<&String, &Quantity>> {
    spec.resource_groups
        .iter()
        .flat_map(|g| &g.flavors)
        .map(|f| {
            (
                &f.name,
                f.resources
                    .iter()
                    .map(|q| (&q.name, &q.nominal_quota))
                    .collect(),
            )
        })
        .collect()
}
