use hearth_api::conditions;
use hearth_api::names::{
    CLUSTER_NAMESPACE_LABEL, CLUSTER_NODE_LABEL, MANAGED_BY_LABEL, condition_types::KUEUE_SYNCED,
};
use hearth_api::{Hardware, KubeconfigStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::json;

use super::*;
use crate::testing::{
    QUEUE, SLOT, World, at, cluster, foreign_flavor, gpu, hearth_flavor, json, kueue_problems,
    legacy_flavor, queue, slot_group_quotas,
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

fn names(v: &[ResourceFlavor]) -> Vec<&str> {
    v.iter()
        .map(|f| f.metadata.name.as_deref().unwrap())
        .collect()
}

/// `(resource, quota)` pairs, owned.
fn q(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
    pairs.iter().map(|(r, n)| (r.to_string(), *n)).collect()
}

fn covered(spec: &ClusterQueueSpec, group: usize) -> Vec<&str> {
    spec.resource_groups[group]
        .covered_resources
        .iter()
        .map(String::as_str)
        .collect()
}

/// A queue whose slot group holds Hearth's entries for `clusters` (with `a100` quota)
/// and nothing else.
fn world_with_published(clusters: &[(&str, i64)]) -> World {
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
    assert_eq!(a.reason(), "WaitingForFlavor");
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
    assert_eq!(a.reason(), "Synced");
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
    assert!(plan.clusters.values().all(|c| c.reason() == "Synced"));
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
    let a = synced(&world, "a");
    assert_eq!(a.reason, "LimitReached");
    assert!(
        a.message
            .contains("no resource group covers fournos/cluster-slot and the queue already has 16"),
        "{}",
        a.message
    );
    assert!(world.status("a").kueue.is_none());
}

// ---- foreign content ----

/// A queue as a GitOps tool might keep it: fields Hearth does not model everywhere, a
/// foreign flavor in the slot group and a foreign group.
fn gitops_queue() -> serde_json::Value {
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
        .with_queue(Some(queue(json!({"resourceGroups": [{
            "coveredResources": [SLOT, gpu("h100")],
            "flavors": [{"name": "gitops", "resources": [
                {"name": SLOT, "nominalQuota": "5"},
                {"name": gpu("h100"), "nominalQuota": "2"},
            ]}],
        }]}))))
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
    world
        .clusters
        .push(cluster("c").created(10).gpu("a100", 3).build());
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
    assert_eq!(a.reason(), "FlavorNotManaged");
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

// ---- GPU models ----

#[test]
fn gpu_model_coming_and_going() {
    let mut world = World::new()
        .with_queue(Some(queue(json!({"resourceGroups": [{
            "coveredResources": [SLOT, gpu("l40s")],
            "flavors": [{"name": "gitops", "resources": [
                {"name": SLOT, "nominalQuota": "5"},
                {"name": gpu("l40s"), "nominalQuota": "3"},
            ]}],
        }]}))))
        .with_clusters([cluster("a").gpu("a100", 8)]);
    world.converge();
    assert_eq!(
        covered(world.queue(), 0),
        [SLOT, &gpu("a100"), &gpu("l40s")]
    );

    // h100 arrives on a: covered everywhere, zero on the foreign flavor.
    world.cluster_mut("a").status.as_mut().unwrap().hardware = cluster("x")
        .gpu("a100", 8)
        .gpu("h100", 4)
        .build()
        .status
        .unwrap()
        .hardware;
    let plan = world.plan();
    assert_eq!(
        cluster_queue_changes_summary(world.queue.as_ref(), plan.cluster_queue.as_ref().unwrap()),
        "a: fournos/gpu-h100 +4; gitops: fournos/gpu-h100 +0; \
         resourceGroups[0].coveredResources: +fournos/gpu-h100"
    );
    world.apply(&plan);
    assert!(world.plan().is_noop());
    assert_eq!(
        slot_group_quotas(world.queue())[0].1,
        q(&[
            (SLOT, 5),
            (&gpu("a100"), 0),
            (&gpu("h100"), 0),
            (&gpu("l40s"), 3)
        ])
    );

    // Both go: they leave coveredResources and the foreign flavor's zero entries with
    // them; l40s stays, the foreign flavor gives it quota.
    world.cluster_mut("a").status.as_mut().unwrap().hardware =
        cluster("x").build().status.unwrap().hardware;
    world.converge();
    assert_eq!(covered(world.queue(), 0), [SLOT, &gpu("l40s")]);
    assert_eq!(
        slot_group_quotas(world.queue()),
        [
            ("gitops".to_owned(), q(&[(SLOT, 5), (&gpu("l40s"), 3)])),
            ("a".to_owned(), q(&[(SLOT, 100), (&gpu("l40s"), 0)])),
        ]
    );
    assert_eq!(
        world.status("a").kueue.as_ref().unwrap().quotas,
        BTreeMap::from([(SLOT.to_owned(), 100)])
    );
}

#[test]
fn foreign_zero_entry_with_other_fields_is_deliberate_and_stays() {
    let mut world = World::new()
        .with_queue(Some(queue(
            json!({"cohortName": "fleet", "resourceGroups": [{
                "coveredResources": [SLOT, gpu("a100"), gpu("h100")],
                "flavors": [{"name": "gitops", "resources": [
                    {"name": SLOT, "nominalQuota": "5"},
                    {"name": gpu("a100"), "nominalQuota": "0"},
                    {"name": gpu("h100"), "nominalQuota": "0", "borrowingLimit": "4"},
                ]}],
            }]}),
        )))
        .with_clusters([cluster("a")]);
    world.converge();
    // Plain zero a100 was indistinguishable from Hearth's and went; h100 says more.
    assert_eq!(covered(world.queue(), 0), [SLOT, &gpu("h100")]);
    assert_eq!(
        json(world.queue())["resourceGroups"][0]["flavors"][0]["resources"][1],
        json!({"name": gpu("h100"), "nominalQuota": "0", "borrowingLimit": "4"})
    );
}

#[test]
fn resources_outside_hearths_namespace_are_never_dropped() {
    let mut world = World::new()
        .with_queue(Some(queue(json!({"resourceGroups": [{
            "coveredResources": ["cpu", SLOT],
            "flavors": [{"name": "gitops", "resources": [
                {"name": "cpu", "nominalQuota": "0"},
                {"name": SLOT, "nominalQuota": "0"},
            ]}],
        }]}))))
        .with_clusters([cluster("a")]);
    world.converge();
    assert_eq!(covered(world.queue(), 0), ["cpu", SLOT]);
    assert_eq!(
        slot_group_quotas(world.queue())[1],
        ("a".to_owned(), q(&[("cpu", 0), (SLOT, 100)]))
    );
}

#[test]
fn models_sharing_a_short_name_are_summed_and_negative_counts_are_zero() {
    let world = World::new()
        .with_clusters([cluster("a").gpu("a100", 4).gpu("a100", 4).gpu("h100", -3)])
        .with_flavors([hearth_flavor("a")]);
    let plan = world.plan();
    assert_eq!(
        slot_group_quotas(plan.cluster_queue.as_ref().unwrap())[0].1,
        q(&[(SLOT, 100), (&gpu("a100"), 8), (&gpu("h100"), 0)])
    );
}

#[test]
fn invalid_gpu_short_name_is_left_out_and_reported() {
    let mut world = World::new().with_clusters([cluster("a").gpu("a100", 8).gpu("bad name!", 2)]);
    world.converge();
    assert_eq!(covered(world.queue(), 0), [SLOT, &gpu("a100")]);
    let a = synced(&world, "a");
    assert_eq!(a.reason, "InvalidResourceName");
    assert!(
        a.message
            .contains("fournos/gpu-bad name! (2 GPUs): not a valid resource name"),
        "{}",
        a.message
    );
    assert!(world.status("a").kueue.is_some(), "the rest is published");
}

#[test]
fn gpu_resource_covered_by_another_group_is_left_out() {
    let mut world = World::new()
        .with_queue(Some(queue(json!({"resourceGroups": [{
            "coveredResources": [gpu("h100")],
            "flavors": [{"name": "other", "resources": [{"name": gpu("h100"), "nominalQuota": "1"}]}],
        }]}))))
        .with_clusters([cluster("a").gpu("a100", 8).gpu("h100", 4)]);
    world.converge();
    assert_eq!(covered(world.queue(), 1), [SLOT, &gpu("a100")]);
    let a = synced(&world, "a");
    assert_eq!(a.reason, "Conflict");
    assert!(
        a.message.contains("resourceGroups[0] covers it"),
        "{}",
        a.message
    );
}

#[test]
fn flavor_listed_in_another_group_is_a_conflict() {
    let mut world = World::new()
        .with_queue(Some(queue(json!({"resourceGroups": [{
            "coveredResources": ["cpu"],
            "flavors": [{"name": "a", "resources": [{"name": "cpu", "nominalQuota": "1"}]}],
        }]}))))
        .with_clusters([cluster("a"), cluster("b").created(5)]);
    world.converge();
    assert_eq!(synced(&world, "a").reason, "Conflict");
    assert!(world.status("a").kueue.is_none());
    assert_eq!(synced(&world, "b").reason, "Synced");
    let order: Vec<String> = slot_group_quotas(world.queue())
        .into_iter()
        .map(|(f, _)| f)
        .collect();
    assert_eq!(order, ["b"]);
}

// ---- drain ----

#[test]
fn drained_cluster_keeps_flavor_and_entry_with_zero_quota() {
    let mut world = world_with_published(&[("a", 8), ("b", 4)]);
    world
        .cluster_mut("a")
        .status
        .as_mut()
        .unwrap()
        .kubeconfig_status = Some(KubeconfigStatus::Unreachable);
    let plan = world.plan();
    assert!(plan.flavors_to_delete.is_empty() && plan.flavors_to_create.is_empty());
    let spec = plan.cluster_queue.as_ref().unwrap();
    assert_eq!(
        slot_group_quotas(spec),
        [
            ("a".to_owned(), q(&[(SLOT, 0), (&gpu("a100"), 0)])),
            ("b".to_owned(), q(&[(SLOT, 100), (&gpu("a100"), 4)])),
        ]
    );
    let a = &plan.clusters["a"];
    assert_eq!(a.reason(), "Drained");
    assert_eq!(a.condition.status, conditions::Status::False);
    assert_eq!(
        a.condition.message,
        "Drained: its kubeconfig is Unreachable (see condition KubeconfigValid), so its entry \
         in ClusterQueue 'fournos-queue' publishes zero quota and no new job is admitted on \
         it; ResourceFlavor 'a' and the entry stay. Fix the kubeconfig in Secret \
         'kubeconfig-a' (or the cluster); the quota returns as soon as the kubeconfig is \
         Valid."
    );
    let kueue = a.kueue.as_ref().unwrap();
    assert_eq!(
        kueue.quotas,
        BTreeMap::from([(SLOT.into(), 0), (gpu("a100"), 0)])
    );
    assert_eq!(kueue.cluster_slots, 100);
    world.apply(&plan);
    assert!(world.plan().is_noop());

    world
        .cluster_mut("a")
        .status
        .as_mut()
        .unwrap()
        .kubeconfig_status = Some(KubeconfigStatus::Valid);
    world.converge();
    assert_eq!(
        slot_group_quotas(world.queue())[0].1,
        q(&[(SLOT, 100), (&gpu("a100"), 8)])
    );
    assert_eq!(synced(&world, "a").reason, "Synced");
}

#[test]
fn cluster_never_validated_is_drained() {
    let mut world = World::new().with_clusters([cluster("a").gpu("a100", 2).kubeconfig(None)]);
    world.converge();
    assert_eq!(
        slot_group_quotas(world.queue())[0].1,
        q(&[(SLOT, 0), (&gpu("a100"), 0)])
    );
    let a = synced(&world, "a");
    assert_eq!(a.reason, "Drained");
    assert!(
        a.message
            .starts_with("Drained: hearth-discovery has not validated its kubeconfig yet"),
        "{}",
        a.message
    );
}

#[test]
fn lending_limit_is_lowered_with_the_quota_and_other_fields_are_kept() {
    let mut world = world_with_published(&[("a", 8)]);
    let mut spec = world.queue().clone();
    spec.other.insert("cohortName".into(), json!("fleet"));
    let entry = &mut spec.resource_groups[0].flavors[0];
    entry.other.insert("futureFlavorField".into(), json!(1));
    entry.resources[1]
        .other
        .insert("lendingLimit".into(), json!(6));
    entry.resources[1]
        .other
        .insert("borrowingLimit".into(), json!("2"));
    world.queue = Some(spec);
    assert!(
        world.plan().is_noop(),
        "fields Hearth does not set are kept"
    );

    world
        .cluster_mut("a")
        .status
        .as_mut()
        .unwrap()
        .kubeconfig_status = Some(KubeconfigStatus::Invalid);
    world.converge();
    let entry = &json(world.queue())["resourceGroups"][0]["flavors"][0];
    assert_eq!(entry["futureFlavorField"], 1);
    assert_eq!(
        entry["resources"][1],
        json!({"name": gpu("a100"), "nominalQuota": "0", "lendingLimit": "0", "borrowingLimit": "2"})
    );
}

// ---- deletion ----

#[test]
fn deleted_cluster_loses_its_entry_first_and_its_flavor_next_round() {
    for gone in ["being deleted", "gone"] {
        let mut world = world_with_published(&[("a", 8), ("b", 4)]);
        if gone == "gone" {
            world.remove_cluster("a");
        } else {
            world.cluster_mut("a").metadata.deletion_timestamp = Some(crate::testing::at(99));
        }

        let first = world.plan();
        assert!(first.flavors_to_delete.is_empty(), "{gone}: entry first");
        assert_eq!(
            first.notes,
            [FlavorNote::DeleteAfterEntryRemoval("a".into())]
        );
        assert!(first.expects_another_round());
        assert!(
            !first.clusters.contains_key("a"),
            "no status for a cluster that is going"
        );
        let spec = first.cluster_queue.as_ref().unwrap();
        assert_eq!(
            slot_group_quotas(spec),
            [("b".to_owned(), q(&[(SLOT, 100), (&gpu("a100"), 4)]))]
        );
        assert_eq!(
            cluster_queue_changes_summary(world.queue.as_ref(), spec),
            "removed flavors a"
        );
        world.apply(&first);
        assert!(world.flavor("a").is_some());

        let second = world.plan();
        assert_eq!(second.flavors_to_delete, ["a"], "{gone}");
        assert!(second.cluster_queue.is_none());
        world.apply(&second);
        assert!(world.flavor("a").is_none());
        assert!(world.plan().is_noop(), "{gone}");
    }
}

#[test]
fn orphaned_hearth_flavor_not_in_the_queue_is_deleted_at_once() {
    for queue in [Some(ClusterQueueSpec::default()), None] {
        let world = World::new()
            .with_queue(queue)
            .with_flavors([hearth_flavor("old"), foreign_flavor("theirs")]);
        let plan = world.plan();
        assert_eq!(plan.flavors_to_delete, ["old"]);
        assert!(plan.cluster_queue.is_none());
    }
}

#[test]
fn orphan_listed_in_a_foreign_group_is_kept_and_noted() {
    let world = World::new()
        .with_queue(Some(queue(json!({"resourceGroups": [{
            "coveredResources": ["cpu"],
            "flavors": [{"name": "old", "resources": [{"name": "cpu", "nominalQuota": "1"}]}],
        }]}))))
        .with_flavors([hearth_flavor("old")]);
    let plan = world.plan();
    assert!(plan.writes_nothing());
    assert_eq!(
        plan.notes,
        [FlavorNote::ReferencedByForeignGroup("old".into())]
    );
}

#[test]
fn terminating_flavor_of_a_live_cluster_is_released_then_recreated() {
    let mut world = world_with_published(&[("a", 8)]);
    // Deleted by someone; Kueue's finalizer holds it while the queue lists it.
    let now = crate::testing::at(5);
    world.flavors[0].metadata.deletion_timestamp = Some(now);

    let first = world.plan();
    assert!(first.flavors_to_create.is_empty() && first.flavors_to_delete.is_empty());
    assert!(
        first
            .cluster_queue
            .as_ref()
            .unwrap()
            .resource_groups
            .is_empty()
    );
    assert_eq!(first.clusters["a"].reason(), "WaitingForFlavor");
    assert!(first.clusters["a"].kueue.is_none());
    world.apply(&first);
    assert!(world.flavor("a").is_none(), "Kueue let it go");

    assert_eq!(names(&world.plan().flavors_to_create), ["a"]);
    world.converge();
    assert_eq!(synced(&world, "a").reason, "Synced");
}

#[test]
fn terminating_orphan_still_in_the_queue_loses_its_entry_and_nothing_else() {
    let mut world = world_with_published(&[("a", 8), ("b", 1)]);
    world.remove_cluster("a");
    let now = crate::testing::at(5);
    world.flavors[0].metadata.deletion_timestamp = Some(now);
    let plan = world.plan();
    assert!(plan.flavors_to_delete.is_empty() && plan.notes.is_empty());
    let order: Vec<String> = slot_group_quotas(plan.cluster_queue.as_ref().unwrap())
        .into_iter()
        .map(|(f, _)| f)
        .collect();
    assert_eq!(order, ["b"]);
    world.apply(&plan);
    assert!(world.flavor("a").is_none());
    assert!(world.plan().is_noop());
}

#[test]
fn terminating_orphan_held_by_kueue_is_noted() {
    let mut flavor = hearth_flavor("old");
    flavor.metadata.deletion_timestamp = Some(crate::testing::at(1));
    let plan = World::new().with_flavors([flavor]).plan();
    assert!(plan.writes_nothing());
    assert_eq!(plan.notes, [FlavorNote::HeldByKueue("old".into())]);
}

// ---- limits ----

#[test]
fn flavor_limit_keeps_the_oldest_clusters_and_says_why() {
    // Names in another order than ages, so the order is by age, not name.
    let name = |age: i64| format!("c{:02}", (age * 37) % 70);
    let mut world = World::new()
        .with_queue(Some(queue(json!({"resourceGroups": [{
            "coveredResources": [SLOT],
            "flavors": [
                {"name": "gitops-1", "resources": [{"name": SLOT, "nominalQuota": "1"}]},
                {"name": "gitops-2", "resources": [{"name": SLOT, "nominalQuota": "1"}]},
            ],
        }]}))))
        .with_clusters((0..70).map(|age| cluster(&name(age)).created(age).gpu("a100", 1)));
    assert!(world.converge() <= 3);

    let spec = world.queue();
    assert!(kueue_problems(spec).is_empty());
    let listed: Vec<String> = slot_group_quotas(spec)
        .into_iter()
        .map(|(f, _)| f)
        .collect();
    assert_eq!(listed.len(), 64);
    let expected: Vec<String> = ["gitops-1".to_owned(), "gitops-2".to_owned()]
        .into_iter()
        .chain((0..62).map(name))
        .collect();
    assert_eq!(listed, expected, "foreign flavors stay, then the 62 oldest");
    for age in 62..70 {
        let c = synced(&world, &name(age));
        assert_eq!(c.reason, "LimitReached");
        assert_eq!(c.status, "False");
        assert_eq!(
            c.message,
            "No room for this cluster in ClusterQueue 'fournos-queue': the resource group \
             covering fournos/cluster-slot holds 64 flavors (Kueue's maximum): 2 not \
             Hearth's and 62 of clusters that have their place (c00, c37, c04 and 59 more), \
             which keep it. Delete clusters that are no longer used or move other flavors to \
             another resource group. It is added as soon as there is room; until then no job \
             is admitted on it."
        );
        assert!(world.status(&name(age)).kueue.is_none());
        assert!(
            world.flavor(&name(age)).is_some(),
            "its flavor exists, ready for room"
        );
    }

    // An old cluster leaves: the oldest waiting one takes its place.
    world.remove_cluster(&name(3));
    world.converge();
    assert_eq!(synced(&world, &name(62)).reason, "Synced");
    assert_eq!(synced(&world, &name(63)).reason, "LimitReached");
    assert!(world.flavor(&name(3)).is_none());
}

#[test]
fn queue_flavor_limit_counts_the_other_groups() {
    let groups: Vec<_> = (0..4)
        .map(|g| {
            let flavors: Vec<_> = (0..50)
                .map(|f| json!({"name": format!("g{g}-f{f}"), "resources": [{"name": format!("example.com/r{g}"), "nominalQuota": "1"}]}))
                .collect();
            json!({"coveredResources": [format!("example.com/r{g}")], "flavors": flavors})
        })
        .collect();
    let mut world = World::new()
        .with_queue(Some(queue(json!({"resourceGroups": groups}))))
        .with_clusters((0..60).map(|i| cluster(&format!("c{i:02}")).created(i)));
    world.converge();
    assert!(kueue_problems(world.queue()).is_empty());
    assert_eq!(world.queue().resource_groups[4].flavors.len(), 56);
    let c = synced(&world, "c56");
    assert_eq!(c.reason, "LimitReached");
    assert!(
        c.message
            .contains("the queue holds 256 flavors (Kueue's maximum): 200 not Hearth's and 56"),
        "{}",
        c.message
    );
    assert_eq!(synced(&world, "c55").reason, "Synced");
}

#[test]
fn covered_resource_limit_leaves_out_the_youngest_models_only() {
    // cpu, memory, pods (foreign) and the slot resource leave room for 60 GPU models.
    let mut world = World::new()
        .with_queue(Some(queue(json!({"resourceGroups": [{
            "coveredResources": ["cpu", "memory", "pods", SLOT],
            "flavors": [{"name": "gitops", "resources": [
                {"name": "cpu", "nominalQuota": "1"},
                {"name": "memory", "nominalQuota": "1Gi"},
                {"name": "pods", "nominalQuota": "1"},
                {"name": SLOT, "nominalQuota": "1"},
            ]}],
        }]}))))
        .with_clusters(
            (0..62)
                .map(|i| {
                    cluster(&format!("c{i:02}"))
                        .created(i)
                        .gpu(&format!("m{i:02}"), 2)
                })
                // The youngest has an already covered model and a new one.
                .chain([cluster("late").created(100).gpu("m00", 1).gpu("zz", 1)]),
        );
    assert!(world.converge() <= 3);
    let spec = world.queue();
    assert!(kueue_problems(spec).is_empty());
    assert_eq!(spec.resource_groups[0].covered_resources.len(), 64);
    assert!(covered(spec, 0).contains(&gpu("m59").as_str()));
    assert!(!covered(spec, 0).contains(&gpu("m60").as_str()));

    assert_eq!(synced(&world, "c59").reason, "Synced");
    let c60 = synced(&world, "c60");
    assert_eq!(c60.reason, "LimitReached");
    assert_eq!(
        c60.message,
        "ResourceFlavor 'c60' and its entry in ClusterQueue 'fournos-queue' publish \
         fournos/cluster-slot=100, but not fournos/gpu-m60 (2 GPUs): the resource group \
         covering fournos/cluster-slot already covers 64 resources (Kueue's maximum) and \
         older clusters keep their models. Remove unused resources from that group or \
         retire a GPU model."
    );
    assert_eq!(
        world.status("c60").kueue.as_ref().unwrap().quotas,
        BTreeMap::from([(SLOT.to_owned(), 100)]),
        "the entry exists, with its slots"
    );
    let late = world.status("late").kueue.as_ref().unwrap();
    assert_eq!(
        late.quotas,
        BTreeMap::from([(SLOT.to_owned(), 100), (gpu("m00"), 1)])
    );
    assert_eq!(synced(&world, "late").reason, "LimitReached");
}

// ---- the queue missing ----

#[test]
fn missing_queue_is_reported_and_picked_up_when_it_appears() {
    let mut world = World::new()
        .with_queue(None)
        .with_clusters([cluster("a").gpu("a100", 8)]);
    world.converge();
    assert!(world.flavor("a").is_some(), "flavors need no queue");
    let a = synced(&world, "a");
    assert_eq!(a.reason, "ClusterQueueNotFound");
    assert!(
        a.message
            .contains("ClusterQueue 'fournos-queue' does not exist")
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
        .with_queue(Some(queue(json!({"resourceGroups": [{
            "coveredResources": [SLOT, gpu("a100")],
            "flavors": [{"name": "a", "resources": [
                {"name": SLOT, "nominalQuota": "1k"},
                {"name": gpu("a100"), "nominalQuota": 8},
            ]}],
        }]}))))
        .with_clusters([cluster("a").gpu("a100", 8)])
        .with_flavors([hearth_flavor("a")]);
    world.settings.cluster_slots = 1000;
    let plan = world.plan();
    assert!(plan.cluster_queue.is_none(), "{:#?}", plan.cluster_queue);
    assert_eq!(plan.clusters["a"].reason(), "Synced");

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

// ---- observing objects ----

#[test]
fn observed_views_read_the_api_objects() {
    let mut flavor = hearth_flavor("a");
    flavor.metadata.deletion_timestamp = Some(crate::testing::at(1));
    let observed = ObservedFlavor::from_flavor(&flavor, "hearth");
    assert_eq!(
        observed,
        ObservedFlavor {
            name: "a".into(),
            managed_by_hearth: true,
            node_labels: BTreeMap::from([(CLUSTER_NODE_LABEL.into(), "a".into())]).into(),
            pool_label_keys: None,
            cordon_tainted: false,
            legacy: false,
            deleting: true,
            in_use: true,
            adopted_for: None,
        }
    );
    assert!(
        !ObservedFlavor::from_flavor(&foreign_flavor("x"), "hearth").is_hearths(&BTreeSet::new())
    );
    assert!(
        !ObservedFlavor::from_flavor(&flavor, "hearth-staging").is_hearths(&BTreeSet::new()),
        "another Hearth's flavor"
    );

    let c = ObservedCluster::from_cluster(
        &cluster("a")
            .created(7)
            .gpu("a100", 2)
            .kubeconfig(Some(KubeconfigStatus::Missing))
            .deleting()
            .build(),
    );
    assert_eq!(c.name, "a");
    assert_eq!(c.created, Some(crate::testing::at(7).0));
    assert!(c.deleting && c.drained());
    assert_eq!(c.kubeconfig_secret, "kubeconfig-a");
    assert_eq!(c.gpus.len(), 1);
    assert!(c.counted && c.legacy_gpus == crate::plan::LegacyGpus::Absent && !c.undecodable);
    assert_eq!(c.uid.as_deref(), Some("uid-a"));
    assert_eq!(c.generation, Some(1));
}

#[test]
fn labels_are_found_by_key_as_in_the_map_they_come_from() {
    let map: BTreeMap<String, String> = [("team", "perf"), ("a/pool", "b"), ("zone", "")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let labels = Labels::from(&map);
    for key in ["team", "a/pool", "zone", "", "pool", "zzz"] {
        assert_eq!(labels.get(key), map.get(key), "{key}");
    }
    assert_eq!(labels.len(), 3);
    assert!(labels.iter().eq(map.iter()));
    assert_eq!(labels, Labels::from(map));
    assert!(Labels::default().is_empty() && Labels::default().get("team").is_none());
}

#[test]
fn desired_flavor_is_the_contract() {
    assert_eq!(
        serde_json::to_value(desired_flavor("gpu-a", "hearth")).unwrap(),
        json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "gpu-a", "labels": {
                "app.kubernetes.io/managed-by": "hearth",
                "fournos.dev/cluster-namespace": "hearth",
            }},
            "spec": {"nodeLabels": {"fournos.dev/cluster": "gpu-a"}},
        })
    );
}

#[test]
fn resource_and_label_names_are_checked_like_kubernetes_does() {
    for ok in [
        "fournos/gpu-a100",
        "fournos/cluster-slot",
        "cpu",
        "example.com/x_y.z",
    ] {
        assert!(is_resource_name(ok), "{ok}");
    }
    for bad in [
        "fournos/gpu-",
        "fournos/gpu-a100!",
        "Fournos/gpu",
        "/x",
        "a/b/c",
        "",
    ] {
        assert!(!is_resource_name(bad), "{bad}");
    }
    assert!(is_resource_name(&format!("fournos/{}", "a".repeat(63))));
    assert!(!is_resource_name(&format!("fournos/{}", "a".repeat(64))));
    assert!(is_label_value("a.b-c_d") && !is_label_value("-a") && !is_label_value(&"a".repeat(64)));
}

#[test]
fn summary_names_what_changed() {
    let old = queue(json!({"resourceGroups": [{
        "coveredResources": [SLOT, gpu("a100")],
        "flavors": [
            {"name": "a", "resources": [{"name": SLOT, "nominalQuota": "100"}, {"name": gpu("a100"), "nominalQuota": "8"}]},
            {"name": "b", "resources": [{"name": SLOT, "nominalQuota": "100"}, {"name": gpu("a100"), "nominalQuota": "4"}]},
        ],
    }]}));
    let new = queue(json!({"resourceGroups": [{
        "coveredResources": [SLOT, gpu("h100")],
        "flavors": [
            {"name": "a", "resources": [{"name": SLOT, "nominalQuota": "0"}, {"name": gpu("h100"), "nominalQuota": "0"}]},
            {"name": "c", "resources": [{"name": SLOT, "nominalQuota": "100"}, {"name": gpu("h100"), "nominalQuota": "2"}]},
        ],
    }]}));
    assert_eq!(
        cluster_queue_changes_summary(Some(&old), &new),
        "added flavors c; removed flavors b; a: fournos/cluster-slot 100→0, \
         fournos/gpu-h100 +0, fournos/gpu-a100 -; \
         resourceGroups[0].coveredResources: +fournos/gpu-h100 -fournos/gpu-a100"
    );
    assert_eq!(cluster_queue_changes_summary(Some(&old), &old), "no change");
    assert_eq!(
        cluster_queue_changes_summary(None, &old),
        "added flavors a, b; resourceGroups[0].coveredResources: +fournos/cluster-slot \
         +fournos/gpu-a100; resourceGroups: 0 → 1"
    );
}

// ---- randomized worlds ----

/// xorshift64*: deterministic, no dependency.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const MODELS: [&str; 5] = ["a100", "h100", "l40s", "mi300x", "b200"];
const STATUSES: [Option<KubeconfigStatus>; 4] = [
    Some(KubeconfigStatus::Valid),
    Some(KubeconfigStatus::Valid),
    Some(KubeconfigStatus::Unreachable),
    None,
];

fn random_cluster(rng: &mut Rng, i: u64) -> crate::testing::ClusterBuilder {
    let mut c = cluster(&format!("c{i}"))
        .created(rng.below(50) as i64)
        .kubeconfig(STATUSES[rng.below(4) as usize]);
    for model in MODELS {
        if rng.chance(30) {
            c = c.gpu(model, rng.below(9) as i64);
        }
    }
    if rng.chance(15) {
        c = c.uncounted();
    }
    c
}

/// Live clusters with an entry in the queue.
fn holders(world: &World) -> BTreeSet<String> {
    let Some(spec) = &world.queue else {
        return BTreeSet::new();
    };
    spec.resource_groups
        .iter()
        .flat_map(|g| &g.flavors)
        .map(|f| f.name.clone())
        .filter(|name| world.is_hearths(name))
        .collect()
}

/// Quota, once given, stays: every cluster of `before` that is still live and counted
/// still has its entry.
fn check_places_kept(world: &World, before: &BTreeSet<String>, seed: u64) {
    let now = holders(world);
    for c in &world.clusters {
        let name = c.metadata.name.as_deref().unwrap();
        let observed = ObservedCluster::from_cluster(c);
        if before.contains(name) && !observed.deleting && observed.counted {
            assert!(now.contains(name), "seed {seed}: {name} lost its place");
        }
    }
}

/// Everything a converged world must satisfy.
fn check_converged(world: &World, foreign_group: &serde_json::Value, seed: u64) {
    let plan = world.plan();
    assert!(plan.is_noop(), "seed {seed}: {plan:#?}");
    let Some(spec) = &world.queue else {
        return;
    };
    assert!(
        kueue_problems(spec).is_empty(),
        "seed {seed}: {:?}",
        kueue_problems(spec)
    );
    let spec_json = json(spec);
    assert_eq!(
        spec_json["resourceGroups"][0], *foreign_group,
        "seed {seed}"
    );
    // Every Hearth entry names a live cluster with a flavor, and says what it reports.
    for group in &spec.resource_groups {
        for flavor in &group.flavors {
            if !world.is_hearths(&flavor.name) {
                continue;
            }
            let status = world.status(&flavor.name);
            let kueue = status.kueue.as_ref().expect("an entry has status.kueue");
            for quota in &flavor.resources {
                let n = hearth_api::kueue::quantity_to_i64(&quota.nominal_quota).unwrap();
                assert_eq!(
                    kueue.quotas.get(&quota.name).copied().unwrap_or(0),
                    n,
                    "seed {seed}"
                );
            }
        }
    }
    // No Hearth flavor without a live cluster.
    for flavor in &world.flavors {
        let name = flavor.metadata.name.as_deref().unwrap();
        if world.is_hearths(name) {
            assert!(
                world
                    .clusters
                    .iter()
                    .any(|c| c.metadata.name.as_deref() == Some(name)
                        && c.metadata.deletion_timestamp.is_none()),
                "seed {seed}: orphan {name} left"
            );
        }
    }
    for c in &world.clusters {
        if c.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = c.metadata.name.as_deref().unwrap();
        let status = world.status(name);
        let reason = &conditions::find(&status.conditions, KUEUE_SYNCED)
            .unwrap()
            .reason;
        let has_entry = spec
            .resource_groups
            .iter()
            .flat_map(|g| &g.flavors)
            .any(|f| f.name == name);
        assert_eq!(
            status.kueue.is_some(),
            has_entry,
            "seed {seed}: {name} {reason}"
        );
        if matches!(reason.as_str(), "Synced" | "Drained") {
            assert!(has_entry, "seed {seed}: {name} {reason}");
        }
        if !ObservedCluster::from_cluster(c).counted {
            assert!(!has_entry, "seed {seed}: {name} never counted, {reason}");
            assert_eq!(reason, "WaitingForDiscovery", "seed {seed}: {name}");
        }
    }
}

#[test]
fn random_worlds_converge_to_a_valid_fixpoint_and_stay_there() {
    for seed in 1..=150u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let foreign_group = json!({
            "coveredResources": ["cpu"],
            "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "10"}]}],
        });
        let mut groups = vec![foreign_group.clone()];
        if rng.chance(50) {
            groups.push(json!({
                "coveredResources": [SLOT, gpu("h100"), "memory"],
                "flavors": [{"name": "gitops", "resources": [
                    {"name": SLOT, "nominalQuota": "3"},
                    {"name": gpu("h100"), "nominalQuota": rng.below(3).to_string()},
                    {"name": "memory", "nominalQuota": "1Gi"},
                ]}],
            }));
        }
        let count = if rng.chance(10) { 70 } else { rng.below(12) };
        let mut world = World::new()
            .with_queue(Some(queue(
                json!({"cohortName": "x", "resourceGroups": groups}),
            )))
            .with_clusters((0..count).map(|i| random_cluster(&mut rng, i)))
            .with_flavors([foreign_flavor("default"), foreign_flavor("gitops")]);
        if rng.chance(30) {
            world.flavors.push(hearth_flavor("orphan"));
        }
        assert!(world.converge() <= 3, "seed {seed}");
        check_converged(&world, &foreign_group, seed);

        // The fleet changes: clusters go, come, change; then it converges again.
        for _ in 0..3 {
            let before = holders(&world);
            for i in 0..count {
                let name = format!("c{i}");
                if !world
                    .clusters
                    .iter()
                    .any(|c| c.metadata.name.as_deref() == Some(&name))
                {
                    // Arriving now, but possibly older than clusters with a place (a
                    // late watch event, a restart): it must not displace them.
                    if rng.chance(30) {
                        let created = rng.below(150) as i64;
                        world
                            .clusters
                            .push(random_cluster(&mut rng, i).created(created).build());
                    }
                    continue;
                }
                match rng.below(10) {
                    0 => world.remove_cluster(&name),
                    1 => {
                        world.cluster_mut(&name).metadata.deletion_timestamp =
                            Some(crate::testing::at(1))
                    }
                    2 | 3 => {
                        let fresh = random_cluster(&mut rng, i).build();
                        let c = world.cluster_mut(&name);
                        if c.metadata.deletion_timestamp.is_none() {
                            c.status.as_mut().unwrap().hardware =
                                fresh.status.as_ref().unwrap().hardware.clone();
                            c.status.as_mut().unwrap().kubeconfig_status =
                                fresh.status.unwrap().kubeconfig_status;
                        }
                    }
                    _ => {}
                }
            }
            assert!(world.converge() <= 3, "seed {seed}");
            check_converged(&world, &foreign_group, seed);
            check_places_kept(&world, &before, seed);
        }
    }
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
        .with_queue(Some(queue(json!({"resourceGroups": [{
            "coveredResources": [SLOT],
            "flavors": [{"name": "s", "resources": [{"name": SLOT, "nominalQuota": "7"}]}],
        }]}))));
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
    let a = synced(&world, "a");
    assert_eq!(a.reason, "FlavorNotManaged");
    assert!(
        a.message.contains("fournos.dev/cluster-namespace=hearth"),
        "{}",
        a.message
    );
    assert_eq!(synced(&world, "b").reason, "Synced");
}

// ---- taking over from the Python controller ----

/// The Python controller's queue: its entries for `a` (resources out of covered order)
/// and `b`, and a GitOps flavor.
fn legacy_queue() -> serde_json::Value {
    json!({"resourceGroups": [{
        "coveredResources": [SLOT, gpu("a100"), gpu("h100")],
        "flavors": [
            {"name": "gitops", "resources": [
                {"name": SLOT, "nominalQuota": "5"},
                {"name": gpu("a100"), "nominalQuota": "1"},
                {"name": gpu("h100"), "nominalQuota": "0"},
            ]},
            {"name": "a", "resources": [
                {"name": gpu("a100"), "nominalQuota": "8"},
                {"name": SLOT, "nominalQuota": "100"},
                {"name": gpu("h100"), "nominalQuota": "0"},
            ]},
            {"name": "b", "resources": [
                {"name": SLOT, "nominalQuota": "100"},
                {"name": gpu("a100"), "nominalQuota": "0"},
                {"name": gpu("h100"), "nominalQuota": "4"},
            ]},
        ],
    }]})
}

fn legacy_world() -> World {
    World::new()
        .with_queue(Some(queue(legacy_queue())))
        .with_clusters([
            cluster("a").gpu("a100", 8).legacy(),
            cluster("b").gpu("h100", 4).legacy(),
        ])
        .with_flavors([
            legacy_flavor("a"),
            legacy_flavor("b"),
            foreign_flavor("gitops"),
        ])
}

#[test]
fn legacy_flavors_are_adopted_in_place_with_their_entries() {
    let mut world = legacy_world();
    let plan = world.plan();
    assert_eq!(names(&plan.flavors_to_adopt), ["a", "b"]);
    assert_eq!(
        serde_json::to_value(&plan.flavors_to_adopt[0]).unwrap(),
        serde_json::to_value(adopted(desired_flavor("a", "hearth"), Some("uid-a"))).unwrap(),
        "adoption applies Hearth's labels, the node label it already has, and the mark"
    );
    assert!(plan.flavors_to_create.is_empty(), "{plan:#?}");
    assert!(plan.flavors_to_delete.is_empty(), "{plan:#?}");
    assert!(plan.flavors_to_repair.is_empty(), "{plan:#?}");
    let spec = plan.cluster_queue.as_ref().expect("a's entry is reordered");
    assert_eq!(
        slot_group_quotas(spec),
        vec![
            (
                "gitops".into(),
                q(&[(SLOT, 5), (&gpu("a100"), 1), (&gpu("h100"), 0)])
            ),
            (
                "a".into(),
                q(&[(SLOT, 100), (&gpu("a100"), 8), (&gpu("h100"), 0)])
            ),
            (
                "b".into(),
                q(&[(SLOT, 100), (&gpu("a100"), 0), (&gpu("h100"), 4)])
            ),
        ],
        "entries keep their place and their quota; only the order is fixed"
    );
    assert_eq!(plan.clusters["a"].reason(), "Synced");
    world.apply(&plan);
    assert!(world.plan().is_noop(), "{:#?}", world.plan());
    for name in ["a", "b"] {
        assert!(world.is_hearths(name), "{name} is labeled");
    }
    assert_eq!(
        serde_json::to_value(world.flavor("gitops").unwrap()).unwrap(),
        serde_json::to_value(foreign_flavor("gitops")).unwrap(),
        "the foreign flavor is untouched"
    );
}

#[test]
fn legacy_hardware_is_the_quota_until_discovery_counts() {
    let mut world = legacy_world();
    world.converge();
    let a_quota = |world: &World| slot_group_quotas(world.queue())[1].1.clone();
    assert_eq!(
        a_quota(&world),
        q(&[(SLOT, 100), (&gpu("a100"), 8), (&gpu("h100"), 0)])
    );
    assert_eq!(
        world.status("a").kueue.as_ref().unwrap().quotas[&gpu("a100")],
        8
    );

    // Discovery's first probe failed: status.hardware holds only the failure count.
    world.cluster_mut("a").status.as_mut().unwrap().hardware = Some(Hardware {
        consecutive_failures: 1,
        last_error: Some("timeout".into()),
        ..Hardware::default()
    });
    assert!(
        world.plan().is_noop(),
        "no count yet, the legacy quota stays"
    );

    // Discovery counted: its count wins, also when it is lower.
    let hardware = world.hardware_mut("a");
    hardware.last_discovery = Some(at(5));
    hardware.gpus = cluster("x")
        .gpu("a100", 4)
        .build()
        .status
        .unwrap()
        .hardware
        .unwrap()
        .gpus;
    world.converge();
    assert_eq!(
        a_quota(&world),
        q(&[(SLOT, 100), (&gpu("a100"), 4), (&gpu("h100"), 0)])
    );
}

#[test]
fn discovered_hardware_wins_over_legacy_spec_hardware() {
    let mut legacy = cluster("a").gpu("a100", 8).legacy().build();
    legacy.status.as_mut().unwrap().hardware = cluster("a")
        .gpu("h100", 2)
        .discovered()
        .build()
        .status
        .unwrap()
        .hardware;
    let observed = ObservedCluster::from_cluster(&legacy);
    assert_eq!(observed.gpus.len(), 1);
    assert_eq!(observed.gpus[0].short_name, "h100");

    // A cluster Hearth made has no spec.hardware: status.hardware as always.
    let native = ObservedCluster::from_cluster(&cluster("n").gpu("a100", 3).build());
    assert_eq!(native.gpus[0].count, 3);
}

#[test]
fn legacy_valid_kubeconfig_status_keeps_the_cluster_undrained() {
    let legacy = cluster("a").gpu("a100", 8).legacy().build();
    assert_eq!(
        legacy.status.as_ref().unwrap().kubeconfig_status,
        Some(KubeconfigStatus::Valid)
    );
    assert!(!ObservedCluster::from_cluster(&legacy).drained());
    let missing = cluster("a")
        .gpu("a100", 8)
        .legacy()
        .kubeconfig(Some(KubeconfigStatus::Missing))
        .build();
    assert!(ObservedCluster::from_cluster(&missing).drained());
}

#[test]
fn only_legacy_shaped_flavors_of_live_clusters_are_adopted() {
    let mut extra_label = legacy_flavor("a");
    extra_label
        .spec
        .node_labels
        .insert("pool".into(), "gpu".into());
    let mut other_hearth = legacy_flavor("b");
    other_hearth.metadata.labels = Some(BTreeMap::from([(
        CLUSTER_NAMESPACE_LABEL.into(),
        "hearth-staging".into(),
    )]));
    let mut world = World::new()
        .with_clusters([
            cluster("a").gpu("a100", 1),
            cluster("b").gpu("a100", 1),
            cluster("c").gpu("a100", 1).deleting(),
        ])
        .with_flavors([
            extra_label.clone(),
            other_hearth.clone(),
            legacy_flavor("c"),
            legacy_flavor("gone"),
        ]);
    let plan = world.plan();
    assert!(plan.flavors_to_adopt.is_empty(), "{plan:#?}");
    assert!(plan.writes_nothing(), "{plan:#?}");
    assert_eq!(plan.clusters["a"].reason(), "FlavorNotManaged");
    assert_eq!(plan.clusters["b"].reason(), "FlavorNotManaged");
    world.converge();
    let as_json = |f: &ResourceFlavor| serde_json::to_value(f).unwrap();
    assert_eq!(as_json(world.flavor("a").unwrap()), as_json(&extra_label));
    assert_eq!(as_json(world.flavor("b").unwrap()), as_json(&other_hearth));
    assert_eq!(
        as_json(world.flavor("gone").unwrap()),
        as_json(&legacy_flavor("gone")),
        "a legacy flavor of no cluster is not Hearth's to delete"
    );
    assert!(world.flavor("c").is_some());
}

#[test]
fn legacy_flavor_shape_is_read_from_the_object() {
    let observed = ObservedFlavor::from_flavor(&legacy_flavor("a"), "hearth");
    assert!(observed.legacy && !observed.managed_by_hearth);
    let live = BTreeSet::from(["a"]);
    assert!(observed.is_hearths(&live) && observed.is_adopted(&live));
    assert!(!observed.is_hearths(&BTreeSet::new()));
    let mine = ObservedFlavor::from_flavor(&hearth_flavor("a"), "hearth");
    assert!(!mine.legacy && mine.is_hearths(&BTreeSet::new()) && !mine.is_adopted(&live));
    let mut renamed = legacy_flavor("a");
    renamed.metadata.name = Some("a2".into());
    assert!(!ObservedFlavor::from_flavor(&renamed, "hearth").legacy);
}
