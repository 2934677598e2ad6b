//! Content that is not Hearth's stays as its owner wrote it: GitOps fields, flavors and
//! groups, unlabeled flavors named like a cluster, and another Hearth's flavors.

use hearth_api::names::{CLUSTER_NAMESPACE_LABEL, CLUSTER_NODE_LABEL};
use serde_json::json;

use super::tests::{assert_message, q, synced, world_with_published};
use super::*;
use crate::testing::{
    SLOT, World, cluster, foreign_flavor, gpu, hearth_flavor, json, kueue_problems,
    one_flavor_queue, queue, slot_group_quotas,
};

/// A queue as a GitOps tool might keep it: fields Hearth does not model everywhere, a
/// foreign flavor in the slot group and a foreign group.
pub(super) fn gitops_queue() -> serde_json::Value {
    json!({
        "cohortName": "gpu-fleet",
        "namespaceSelector": {"matchLabels": {"fournos.dev/queue-access": "true"}},
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "futureSpecField": {"nested": [1, {"deep": true}]},
        "resourceGroups": [
            {
                "coveredResources": [SLOT, gpu("h100")],
                "futureGroupField": "kept",
                "flavors": [{
                    "name": "gitops",
                    "futureFlavorField": 7,
                    "resources": [
                        {"name": SLOT, "nominalQuota": "5", "borrowingLimit": "1"},
                        {"name": gpu("h100"), "nominalQuota": "2", "futureQuotaField": "z"},
                    ],
                }],
            },
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [{"name": "default", "resources": [
                    {"name": "cpu", "nominalQuota": "10"},
                    {"name": "memory", "nominalQuota": "64Gi"},
                ]}],
            },
        ],
    })
}

#[test]
fn foreign_flavors_groups_and_fields_are_preserved() {
    let original = gitops_queue();
    let mut world = World::new()
        .with_queue(Some(queue(original.clone())))
        .with_clusters([
            cluster("a").created(1).gpu("a100", 8),
            cluster("b").created(2).gpu("h100", 4),
        ])
        .with_flavors([foreign_flavor("gitops"), foreign_flavor("default")]);
    assert!(world.converge() <= 3);
    let spec = json(world.queue());

    for field in [
        "cohortName",
        "namespaceSelector",
        "preemption",
        "futureSpecField",
    ] {
        assert_eq!(spec[field], original[field], "{field}");
    }
    assert_eq!(spec["resourceGroups"][1], original["resourceGroups"][1]);
    let group = &spec["resourceGroups"][0];
    assert_eq!(group["futureGroupField"], "kept");
    assert_eq!(
        group["coveredResources"],
        json!([SLOT, gpu("a100"), gpu("h100")])
    );
    let gitops = &group["flavors"][0];
    let own = &original["resourceGroups"][0]["flavors"][0];
    assert_eq!(gitops["name"], "gitops");
    assert_eq!(gitops["futureFlavorField"], 7);
    assert_eq!(gitops["resources"][0], own["resources"][0]);
    assert_eq!(
        gitops["resources"][1],
        json!({"name": gpu("a100"), "nominalQuota": "0"})
    );
    assert_eq!(gitops["resources"][2], own["resources"][1]);
    assert!(world.flavor("gitops").is_some() && world.flavor("default").is_some());
    assert_eq!(synced(&world, "a").reason, "Synced");
    assert_eq!(synced(&world, "b").reason, "Synced");
}

#[test]
fn foreign_flavor_gets_zero_entries_for_new_gpu_models_in_covered_order() {
    let mut world = World::new()
        .with_queue(Some(one_flavor_queue(
            "gitops",
            &[(SLOT, json!("5")), (&gpu("h100"), json!("2"))],
        )))
        .with_clusters([cluster("a").gpu("b200", 8).gpu("mi300x", 8)])
        .with_flavors([hearth_flavor("a")]);
    let plan = world.plan();
    let spec = plan.cluster_queue.as_ref().unwrap();
    assert_eq!(
        slot_group_quotas(spec),
        [
            (
                "gitops".to_owned(),
                q(&[
                    (SLOT, 5),
                    (&gpu("b200"), 0),
                    (&gpu("h100"), 2),
                    (&gpu("mi300x"), 0)
                ])
            ),
            (
                "a".to_owned(),
                q(&[
                    (SLOT, 100),
                    (&gpu("b200"), 8),
                    (&gpu("h100"), 0),
                    (&gpu("mi300x"), 8)
                ])
            ),
        ]
    );
    assert!(kueue_problems(spec).is_empty());
    world.apply(&plan);
    assert!(world.plan().is_noop());
}

#[test]
fn entries_keep_their_position_and_new_ones_are_appended() {
    let mut world = world_with_published(&[("a", 1), ("b", 2)]);
    let mut spec = world.queue().clone();
    // Someone put a foreign flavor first and swapped Hearth's entries.
    spec.resource_groups[0].flavors.swap(0, 1);
    let mut gitops = spec.resource_groups[0].flavors[0].clone();
    gitops.name = "gitops".into();
    spec.resource_groups[0].flavors.insert(0, gitops);
    world.queue = Some(spec);
    world.flavors.push(foreign_flavor("gitops"));
    world.add_cluster(cluster("c").created(10).gpu("a100", 3));
    world.converge();
    let order: Vec<String> = slot_group_quotas(world.queue())
        .into_iter()
        .map(|(f, _)| f)
        .collect();
    assert_eq!(order, ["gitops", "b", "a", "c"]);
}

#[test]
fn unlabeled_flavor_named_like_a_cluster_is_not_touched() {
    let foreign_entry = json!({"name": "a", "resources": [
        {"name": SLOT, "nominalQuota": "7"},
        {"name": gpu("a100"), "nominalQuota": "1"},
    ]});
    let original = json!({"resourceGroups": [{
        "coveredResources": [SLOT, gpu("a100")],
        "flavors": [foreign_entry],
    }]});
    let mut legacy = foreign_flavor("a");
    legacy.spec.node_labels = BTreeMap::from([(CLUSTER_NODE_LABEL.into(), "somewhere".into())]);
    let mut world = World::new()
        .with_queue(Some(queue(original.clone())))
        .with_clusters([cluster("a").gpu("a100", 8)])
        .with_flavors([legacy.clone()]);
    let plan = world.plan();
    assert!(plan.writes_nothing(), "{plan:#?}");
    let a = &plan.clusters["a"];
    assert_eq!(a.reason(), SyncReason::FlavorNotManaged);
    assert!(a.kueue.is_none());
    assert!(
        a.condition
            .message
            .contains("lacks the labels app.kubernetes.io/managed-by=hearth and"),
        "{}",
        a.condition.message
    );
    world.apply(&plan);
    assert!(world.plan().is_noop());
    assert_eq!(json(world.queue()), original);
    assert_eq!(
        world.flavor("a").unwrap().spec.node_labels,
        legacy.spec.node_labels
    );
}

#[test]
fn flavors_of_a_hearth_in_another_namespace_are_foreign() {
    // Another Hearth (namespace hearth-staging) on the same management cluster made "s",
    // listed in this queue, and a flavor named like this Hearth's cluster "a".
    let theirs = |name: &str| {
        let mut flavor = desired_flavor(name, "hearth-staging");
        flavor.metadata.finalizers = Some(vec![RESOURCE_IN_USE_FINALIZER.into()]);
        flavor
    };
    let mut world = World::new()
        .with_clusters([cluster("a").gpu("a100", 8), cluster("b").gpu("a100", 4)])
        .with_flavors([theirs("s"), theirs("a")])
        .with_queue(Some(one_flavor_queue("s", &[(SLOT, json!("7"))])));
    world.converge();

    assert!(
        world.flavor("s").is_some(),
        "another Hearth's flavor is not swept"
    );
    assert_eq!(
        world.flavor("a").unwrap().metadata.labels.as_ref().unwrap()[CLUSTER_NAMESPACE_LABEL],
        "hearth-staging",
        "nor adopted"
    );
    let quotas = slot_group_quotas(world.queue());
    assert_eq!(quotas[0], ("s".into(), q(&[(SLOT, 7), (&gpu("a100"), 0)])));
    assert!(quotas.iter().all(|(name, _)| name != "a"));
    assert_message(
        &world,
        "a",
        "FlavorNotManaged",
        "fournos.dev/cluster-namespace=hearth",
    );
    assert_eq!(synced(&world, "b").reason, "Synced");
}
