//! One-line accounts of a plan and of a ClusterQueue change, for logs and Events. With a
//! thousand clusters a plan's `Debug` is some 180,000 characters; these stay under
//! [`MAX_SUMMARY_CHARS`] whatever the fleet's size, by counting and naming a few.

use std::collections::{BTreeMap, BTreeSet};

use hearth_api::kueue::{ClusterQueueSpec, ResourceFlavor};
use hearth_api::text::bounded;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::common::Plan;
use super::queue::{equivalent_specs, same_quantity};

/// Longest summary, in characters (plus an ellipsis where it is cut).
pub const MAX_SUMMARY_CHARS: usize = 4096;
/// Names shown of a list before `and N more`.
const MAX_NAMED: usize = 5;
/// Changes of a ClusterQueue shown before `and N more changes`.
const MAX_CHANGES: usize = 12;

/// What `plan` writes, for the debug log: e.g. `flavors: create 2 (a, b), repair 0,
/// adopt 0, delete 0; ClusterQueue: added flavors a, b; statuses: 2 of 40 change (a, b);
/// notes: 0`. `old_queue` is the observed ClusterQueue's spec.
pub fn plan_summary(plan: &Plan, old_queue: Option<&ClusterQueueSpec>) -> String {
    let flavors = |list: &[ResourceFlavor]| {
        counted(
            list.iter()
                .map(|f| f.metadata.name.as_deref().unwrap_or_default()),
        )
    };
    let queue = plan.cluster_queue.as_ref().map_or_else(
        || "unchanged".to_owned(),
        |new| cluster_queue_changes_summary(old_queue, new),
    );
    let changed: Vec<&str> = plan
        .clusters
        .iter()
        .filter(|(_, sync)| sync.status_changed)
        .map(|(name, _)| name.as_str())
        .collect();
    let notes: Vec<String> = plan
        .notes
        .iter()
        .take(MAX_NAMED + 1)
        .map(|note| format!("{note:?}"))
        .collect();
    let summary = format!(
        "flavors: create {}, repair {}, adopt {}, delete {}; ClusterQueue: {queue}; \
         statuses: {} of {} change{}; notes: {}{}",
        flavors(&plan.flavors_to_create),
        flavors(&plan.flavors_to_repair),
        flavors(&plan.flavors_to_adopt),
        counted(plan.flavors_to_delete.iter().map(String::as_str)),
        changed.len(),
        plan.clusters.len(),
        named(changed.iter().copied(), changed.len()),
        plan.notes.len(),
        named(notes.iter().map(String::as_str), plan.notes.len()),
    );
    bounded(&summary, MAX_SUMMARY_CHARS)
}

/// `0`, or the count and the first few names: `7 (a, b, c, d, e and 2 more)`.
fn counted<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> String {
    let count = names.len();
    match count {
        0 => "0".to_owned(),
        _ => format!("{count}{}", named(names, count)),
    }
}

/// ` (a, b and 3 more)` of `total` names, or nothing when there are none.
pub(crate) fn named<'a>(names: impl Iterator<Item = &'a str>, total: usize) -> String {
    if total == 0 {
        return String::new();
    }
    let shown: Vec<&str> = names.take(MAX_NAMED).collect();
    let more = total.saturating_sub(shown.len());
    match more {
        0 => format!(" ({})", shown.join(", ")),
        _ => format!(" ({} and {more} more)", shown.join(", ")),
    }
}

/// `a, b, c, d, e and 995 more`.
fn listed(names: &[&str]) -> String {
    match names.len().checked_sub(MAX_NAMED) {
        Some(more) if more > 0 => format!("{} and {more} more", names[..MAX_NAMED].join(", ")),
        _ => names.join(", "),
    }
}

/// What changes from `old` to `new`, flavor by flavor: e.g.
/// `added flavors a, b; removed flavors c; d: fournos/gpu-a100 8→4;
/// resourceGroups[0].coveredResources: +fournos/gpu-h100 -fournos/gpu-l40s`.
/// `old` is `None` when the queue did not exist. Says `no change` when there is none
/// and `entries reordered or other fields changed` when no quota,
/// flavor or covered resource changes. Lists [`MAX_NAMED`] flavors and [`MAX_CHANGES`]
/// changes at most.
pub fn cluster_queue_changes_summary(
    old: Option<&ClusterQueueSpec>,
    new: &ClusterQueueSpec,
) -> String {
    let empty = ClusterQueueSpec::default();
    let old = old.unwrap_or(&empty);
    let (old_flavors, new_flavors) = (flavor_quotas(old), flavor_quotas(new));
    let mut parts = Vec::new();

    for (what, from, without) in [
        ("added", &new_flavors, &old_flavors),
        ("removed", &old_flavors, &new_flavors),
    ] {
        let names: Vec<&str> = from
            .keys()
            .filter(|f| !without.contains_key(*f))
            .map(|f| f.as_str())
            .collect();
        if !names.is_empty() {
            parts.push(format!("{what} flavors {}", listed(&names)));
        }
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
    parts.extend(covered_resources_changes(old, new));
    if old.resource_groups.len() != new.resource_groups.len() {
        parts.push(format!(
            "resourceGroups: {} → {}",
            old.resource_groups.len(),
            new.resource_groups.len()
        ));
    }
    if parts.len() > MAX_CHANGES {
        let more = parts.len() - MAX_CHANGES;
        parts.truncate(MAX_CHANGES);
        parts.push(format!("and {more} more changes"));
    }
    if !parts.is_empty() {
        bounded(&parts.join("; "), MAX_SUMMARY_CHARS)
    } else if equivalent_specs(old, new) {
        "no change".to_owned()
    } else {
        "entries reordered or other fields changed".to_owned()
    }
}

/// `resourceGroups[i].coveredResources: +added -removed`, for each group that changed.
fn covered_resources_changes(old: &ClusterQueueSpec, new: &ClusterQueueSpec) -> Vec<String> {
    let mut parts = Vec::new();
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
    parts
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{World, cluster};

    /// A fleet's first two rounds: every flavor created, then every entry and status.
    fn fleet(clusters: usize) -> (World, Plan, Plan) {
        let mut world = World::new().with_clusters(
            (0..clusters).map(|i| cluster(&format!("cluster-{i:04}")).gpu("a100", 8)),
        );
        let creates = world.plan();
        world.apply(&creates);
        let publishes = world.plan();
        (world, creates, publishes)
    }

    #[test]
    fn a_thousand_clusters_fit_in_one_log_line() {
        let (world, creates, publishes) = fleet(1000);
        for plan in [&creates, &publishes] {
            assert!(
                format!("{plan:?}").len() > 20 * MAX_SUMMARY_CHARS,
                "the plan is big enough to need a summary"
            );
            let summary = plan_summary(plan, world.queue.as_ref());
            assert!(
                summary.chars().count() <= MAX_SUMMARY_CHARS + 1,
                "{} characters: {summary}",
                summary.chars().count()
            );
            assert!(!summary.contains('\n'), "{summary}");
        }
        let created = plan_summary(&creates, None);
        assert!(
            created.starts_with(
                "flavors: create 1000 (cluster-0000, cluster-0001, cluster-0002, cluster-0003, \
                 cluster-0004 and 995 more), repair 0, adopt 0, delete 0; ClusterQueue: "
            ),
            "{created}"
        );
        // Every cluster is told at once: 64 have a place reserved, the rest no room.
        assert!(
            created.contains("statuses: 1000 of 1000 change (cluster-0000, "),
            "{created}"
        );
        let published = plan_summary(&publishes, world.queue.as_ref());
        assert!(
            published.contains("added flavors cluster-0000, "),
            "{published}"
        );
    }

    #[test]
    fn a_small_plan_is_named_in_full() {
        let (world, creates, _) = fleet(2);
        assert_eq!(
            plan_summary(&creates, world.queue.as_ref()),
            "flavors: create 2 (cluster-0000, cluster-0001), repair 0, adopt 0, delete 0; \
             ClusterQueue: unchanged; statuses: 2 of 2 change (cluster-0000, cluster-0001); \
             notes: 0"
        );
    }
}
