//! The queue write: the first cluster, resource groups, the queue missing, and no write
//! when nothing changed; and the helpers the sibling test modules share.

use hearth_api::conditions;
use hearth_api::names::{CLUSTER_NODE_LABEL, MANAGED_BY_LABEL, condition_types::KUEUE_SYNCED};
use hearth_api::{KubeconfigStatus, KueueStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::json;

use super::foreign_tests::gitops_queue;
use super::*;
use crate::testing::{
    QUEUE, SLOT, World, cluster, foreign_flavor, gpu, hearth_flavor, json, one_flavor_queue, queue,
    slot_group_quotas,
};

/// The `KueueSynced` condition of `cluster` in `world`.
pub(super) fn synced<'a>(world: &'a World, cluster: &str) -> &'a Condition {
    conditions::find(&world.status(cluster).conditions, KUEUE_SYNCED).expect("KueueSynced")
}

/// The `KueueSynced` message of `cluster` in `world`, whose reason must be `reason`.
pub(super) fn message_of<'a>(world: &'a World, cluster: &str, reason: &str) -> &'a str {
    let condition = synced(world, cluster);
    assert_eq!(condition.reason, reason, "{cluster}: {}", condition.message);
    &condition.message
}

/// Asserts that `cluster`'s Synced condition has `reason` and a message containing `part`.
#[track_caller]
pub(super) fn assert_message(world: &World, cluster: &str, reason: &str, part: &str) {
    let message = message_of(world, cluster, reason);
    assert!(message.contains(part), "{message}");
}

pub(super) fn names(v: &[ResourceFlavor]) -> Vec<&str> {
    v.iter()
        .map(|f| f.metadata.name.as_deref().unwrap())
        .collect()
}

/// `(resource, quota)` pairs, owned.
pub(super) fn q(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
    pairs.iter().map(|(r, n)| (r.to_string(), *n)).collect()
}

pub(super) fn covered(spec: &ClusterQueueSpec, group: usize) -> Vec<&str> {
    spec.resource_groups[group]
        .covered_resources
        .iter()
        .map(String::as_str)
        .collect()
}

/// A queue whose slot group holds Hearth's entries for `clusters` (with `a100` quota)
/// and nothing else.
pub(super) fn world_with_published(clusters: &[(&str, i64)]) -> World {
    let mut world = World::new().with_clusters(
        clusters
            .iter()
            .enumerate()
            .map(|(i, (name, a100))| cluster(name).created(i as i64).gpu("a100", *a100)),
    );
    world.converge();
    world
}

// ---- the empty world and the first cluster ----

#[test]
fn empty_world_plans_nothing() {
    let world = World::new();
    let plan = world.plan();
    assert!(plan.is_noop(), "{plan:#?}");
    assert!(!plan.expects_another_round());

    let world = World::new().with_queue(None);
    assert!(world.plan().is_noop());
}

#[test]
fn one_cluster_gets_its_flavor_first_then_its_entry() {
    let mut world = World::new().with_clusters([cluster("a").gpu("a100", 8)]);

    let first = world.plan();
    assert_eq!(names(&first.flavors_to_create), ["a"]);
    let flavor = &first.flavors_to_create[0];
    assert_eq!(
        flavor.metadata.labels.as_ref().unwrap()[MANAGED_BY_LABEL],
        "hearth"
    );
    assert_eq!(
        flavor.spec.node_labels,
        BTreeMap::from([(CLUSTER_NODE_LABEL.to_owned(), "a".to_owned())])
    );
    assert!(
        first.cluster_queue.is_none(),
        "no entry before the flavor exists"
    );
    assert!(first.expects_another_round());
    let a = &first.clusters["a"];
    assert_eq!(a.reason(), SyncReason::WaitingForFlavor);
    assert_eq!(a.condition.status, conditions::Status::False);
    assert!(a.kueue.is_none(), "no status.kueue before the entry exists");
    world.apply(&first);

    let second = world.plan();
    assert!(second.flavors_to_create.is_empty());
    let spec = second.cluster_queue.as_ref().expect("the entry is added");
    assert_eq!(
        json(spec),
        json!({"resourceGroups": [{
            "coveredResources": [SLOT, gpu("a100")],
            "flavors": [{"name": "a", "resources": [
                {"name": SLOT, "nominalQuota": "100"},
                {"name": gpu("a100"), "nominalQuota": "8"},
            ]}],
        }]})
    );
    let a = &second.clusters["a"];
    assert_eq!(a.reason(), SyncReason::Synced);
    assert_eq!(a.condition.status, conditions::Status::True);
    assert_eq!(
        a.condition.message,
        "ResourceFlavor 'a' and its entry in ClusterQueue 'fournos-queue' publish \
         fournos/cluster-slot=100, fournos/gpu-a100=8."
    );
    assert_eq!(
        a.kueue,
        Some(KueueStatus {
            flavor: "a".into(),
            cluster_queue: QUEUE.into(),
            quotas: BTreeMap::from([(SLOT.into(), 100), (gpu("a100"), 8)]),
            cluster_slots: 100,
        })
    );
    world.apply(&second);

    assert!(world.plan().is_noop(), "{:#?}", world.plan());
    assert_eq!(synced(&world, "a").reason, "Synced");
}

#[test]
fn many_clusters_are_published_in_one_queue_write_oldest_first() {
    let mut world = World::new()
        .with_clusters([
            cluster("e").created(5).gpu("h100", 4),
            cluster("b").created(1).gpu("a100", 8),
            cluster("d").created(3),
            cluster("a").created(4).gpu("a100", 2).gpu("l40s", 2),
            cluster("c").created(2).gpu("h100", 8),
        ])
        .with_flavors(["a", "b", "c", "d", "e"].map(hearth_flavor));
    let plan = world.plan();
    assert!(plan.flavors_to_create.is_empty());
    let spec = plan.cluster_queue.as_ref().expect("one write");
    assert_eq!(
        covered(spec, 0),
        [SLOT, &gpu("a100"), &gpu("h100"), &gpu("l40s")]
    );
    let quotas = slot_group_quotas(spec);
    let order: Vec<&str> = quotas.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(order, ["b", "c", "d", "a", "e"], "appended oldest first");
    assert_eq!(
        quotas[3].1,
        q(&[
            (SLOT, 100),
            (&gpu("a100"), 2),
            (&gpu("h100"), 0),
            (&gpu("l40s"), 2)
        ])
    );
    assert!(
        plan.clusters
            .values()
            .all(|c| c.reason() == SyncReason::Synced)
    );
    world.apply(&plan);
    assert!(world.plan().is_noop());
}

// ---- resource groups ----

#[test]
fn queue_without_resource_groups_gets_one_and_keeps_its_other_fields() {
    let spec = json!({
        "namespaceSelector": {},
        "cohortName": "fleet",
        "queueingStrategy": "StrictFIFO",
        "futureField": {"x": [1, 2]},
    });
    let mut world = World::new()
        .with_queue(Some(queue(spec.clone())))
        .with_clusters([cluster("a")])
        .with_flavors([hearth_flavor("a")]);
    let plan = world.plan();
    let new = json(plan.cluster_queue.as_ref().unwrap());
    let mut expected = spec;
    expected["resourceGroups"] = json!([{
        "coveredResources": [SLOT],
        "flavors": [{"name": "a", "resources": [{"name": SLOT, "nominalQuota": "100"}]}],
    }]);
    assert_eq!(new, expected);
    world.apply(&plan);
    assert!(world.plan().is_noop());
}

#[test]
fn queue_whose_groups_do_not_cover_slots_gets_a_group_appended() {
    let cpu_group = json!({
        "coveredResources": ["cpu", "memory"],
        "flavors": [{"name": "default", "resources": [
            {"name": "cpu", "nominalQuota": 10},
            {"name": "memory", "nominalQuota": "64Gi"},
        ]}],
    });
    let mut world = World::new()
        .with_queue(Some(queue(json!({"resourceGroups": [cpu_group.clone()]}))))
        .with_clusters([cluster("a").gpu("a100", 8)])
        .with_flavors([hearth_flavor("a")]);
    world.converge();
    let spec = json(world.queue());
    assert_eq!(spec["resourceGroups"].as_array().unwrap().len(), 2);
    // The number 10 is read as a quantity and written back as "10": the same value.
    let mut cpu_group = cpu_group;
    cpu_group["flavors"][0]["resources"][0]["nominalQuota"] = json!("10");
    assert_eq!(spec["resourceGroups"][0], cpu_group);
    assert_eq!(covered(world.queue(), 1), [SLOT, &gpu("a100")]);
}

#[test]
fn slot_group_left_without_flavors_is_removed_and_foreign_groups_stay() {
    let cpu_group = json!({
        "coveredResources": ["cpu"],
        "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "10"}]}],
    });
    let mut world = World::new()
        .with_queue(Some(queue(json!({"resourceGroups": [cpu_group.clone()]}))))
        .with_clusters([cluster("a")]);
    world.converge();
    assert_eq!(world.queue().resource_groups.len(), 2);

    world.remove_cluster("a");
    world.converge();
    assert_eq!(json(world.queue()), json!({"resourceGroups": [cpu_group]}));
    assert!(world.flavor("a").is_none());
}

#[test]
fn sixteen_groups_and_none_covering_slots_leaves_no_room() {
    let groups: Vec<_> = (0..16)
        .map(|i| {
            json!({"coveredResources": [format!("example.com/r{i}")], "flavors": [
                {"name": format!("f{i}"), "resources": [{"name": format!("example.com/r{i}"), "nominalQuota": "1"}]}
            ]})
        })
        .collect();
    let mut world = World::new()
        .with_queue(Some(queue(json!({"resourceGroups": groups}))))
        .with_clusters([cluster("a")]);
    world.converge();
    assert_eq!(world.queue().resource_groups.len(), 16);
    assert_message(
        &world,
        "a",
        "LimitReached",
        "no resource group covers fournos/cluster-slot and the queue already has 16",
    );
    assert!(world.status("a").kueue.is_none());
}

// ---- the queue missing ----

#[test]
fn missing_queue_is_reported_and_picked_up_when_it_appears() {
    let mut world = World::new()
        .with_queue(None)
        .with_clusters([cluster("a").gpu("a100", 8)]);
    world.converge();
    assert!(world.flavor("a").is_some(), "flavors need no queue");
    assert_message(
        &world,
        "a",
        "ClusterQueueNotFound",
        "ClusterQueue 'fournos-queue' does not exist",
    );
    assert!(world.status("a").kueue.is_none());

    world.queue = Some(queue(json!({"namespaceSelector": {}})));
    assert_eq!(world.converge(), 1);
    assert_eq!(synced(&world, "a").reason, "Synced");
    assert_eq!(
        slot_group_quotas(world.queue())[0].1,
        q(&[(SLOT, 100), (&gpu("a100"), 8)])
    );
}

// ---- no change, no write ----

#[test]
fn converged_world_plans_nothing() {
    let mut world = World::new()
        .with_queue(Some(queue(gitops_queue())))
        .with_clusters([
            cluster("a").created(1).gpu("a100", 8).gpu("h100", 1),
            cluster("b")
                .created(2)
                .kubeconfig(Some(KubeconfigStatus::Unauthorized)),
            cluster("c").created(3).gpu("bad name", 1),
        ])
        .with_flavors([foreign_flavor("gitops"), hearth_flavor("orphan")]);
    assert!(world.converge() <= 3);
    let plan = world.plan();
    assert!(plan.is_noop(), "{plan:#?}");
    assert!(plan.notes.is_empty());
    // And the status writes were exactly the ones asked for (World::apply checks).
    let before = world.clone();
    world.apply(&plan);
    assert_eq!(json(world.queue()), json(before.queue()));
}

#[test]
fn quantities_compare_numerically() {
    let mut world = World::new()
        .with_queue(Some(one_flavor_queue(
            "a",
            &[(SLOT, json!("1k")), (&gpu("a100"), json!(8))],
        )))
        .with_clusters([cluster("a").gpu("a100", 8)])
        .with_flavors([hearth_flavor("a")]);
    world.settings.cluster_slots = 1000;
    let plan = world.plan();
    assert!(plan.cluster_queue.is_none(), "{:#?}", plan.cluster_queue);
    assert_eq!(plan.clusters["a"].reason(), SyncReason::Synced);

    // A real change keeps the spelling of what did not change.
    world.cluster_mut("a").status.as_mut().unwrap().hardware =
        cluster("x").gpu("a100", 4).build().status.unwrap().hardware;
    let spec = world.plan().cluster_queue.unwrap();
    assert_eq!(
        json(&spec)["resourceGroups"][0]["flavors"][0]["resources"],
        json!([
            {"name": SLOT, "nominalQuota": "1k"},
            {"name": gpu("a100"), "nominalQuota": "4"},
        ])
    );
}

#[test]
fn resources_out_of_covered_order_are_reordered() {
    let mut world = World::new()
        .with_queue(Some(queue(json!({"resourceGroups": [{
            "coveredResources": [gpu("a100"), SLOT],
            "flavors": [
                {"name": "gitops", "resources": [
                    {"name": SLOT, "nominalQuota": "5"},
                    {"name": gpu("a100"), "nominalQuota": "1", "futureQuotaField": true},
                ]},
                {"name": "a", "resources": [
                    {"name": gpu("a100"), "nominalQuota": "8"},
                    {"name": SLOT, "nominalQuota": "100"},
                ]},
            ],
        }]}))))
        .with_clusters([cluster("a").gpu("a100", 8)])
        .with_flavors([hearth_flavor("a"), foreign_flavor("gitops")]);
    let plan = world.plan();
    let spec = plan.cluster_queue.as_ref().expect("a reorder is a change");
    assert_eq!(
        json(spec),
        json!({"resourceGroups": [{
            "coveredResources": [SLOT, gpu("a100")],
            "flavors": [
                {"name": "gitops", "resources": [
                    {"name": SLOT, "nominalQuota": "5"},
                    {"name": gpu("a100"), "nominalQuota": "1", "futureQuotaField": true},
                ]},
                {"name": "a", "resources": [
                    {"name": SLOT, "nominalQuota": "100"},
                    {"name": gpu("a100"), "nominalQuota": "8"},
                ]},
            ],
        }]})
    );
    assert_eq!(
        cluster_queue_changes_summary(world.queue.as_ref(), spec),
        "entries reordered or other fields changed"
    );
    world.apply(&plan);
    assert!(world.plan().is_noop());
}

#[test]
fn status_is_written_only_when_it_changes() {
    let mut world = world_with_published(&[("a", 8)]);
    assert!(world.plan().clusters.values().all(|c| !c.status_changed));

    // A new generation (someone edited the spec) is a new observedGeneration.
    world.cluster_mut("a").metadata.generation = Some(2);
    let plan = world.plan();
    assert!(plan.writes_nothing());
    assert!(plan.clusters["a"].status_changed);
    world.apply(&plan);
    assert_eq!(synced(&world, "a").observed_generation, Some(2));
    assert!(world.plan().is_noop());
}

#[test]
fn wrong_node_label_on_a_hearth_flavor_is_repaired() {
    let mut flavor = hearth_flavor("a");
    flavor.spec.node_labels = BTreeMap::from([
        (CLUSTER_NODE_LABEL.into(), "b".into()),
        ("extra".into(), "kept".into()),
    ]);
    let mut world = World::new()
        .with_clusters([cluster("a")])
        .with_flavors([flavor]);
    let plan = world.plan();
    assert_eq!(names(&plan.flavors_to_repair), ["a"]);
    world.converge();
    assert_eq!(
        world.flavor("a").unwrap().spec.node_labels,
        BTreeMap::from([
            (CLUSTER_NODE_LABEL.into(), "a".into()),
            ("extra".into(), "kept".into())
        ])
    );
}

#[test]
fn cluster_name_too_long_for_a_node_label_gets_nothing() {
    let long = "a".repeat(64);
    let mut world = World::new().with_clusters([cluster(&long), cluster("b")]);
    world.converge();
    assert!(world.flavor(&long).is_none());
    assert_eq!(synced(&world, &long).reason, "InvalidName");
    assert_eq!(synced(&world, "b").reason, "Synced");
}
