//! Kueue's limits on flavors (per group and per queue) and covered resources: the oldest
//! clusters keep their place and the others say why.

use serde_json::json;

use super::tests::{assert_message, covered, synced};
use super::*;
use crate::testing::{
    SLOT, World, cluster, gpu, kueue_problems, one_flavor_queue, queue, slot_group_quotas,
};

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
    assert_message(
        &world,
        "c56",
        "LimitReached",
        "the queue holds 256 flavors (Kueue's maximum): 200 not Hearth's and 56",
    );
    assert_eq!(synced(&world, "c55").reason, "Synced");
}

#[test]
fn covered_resource_limit_leaves_out_the_youngest_models_only() {
    // cpu, memory, pods (foreign) and the slot resource leave room for 60 GPU models.
    let mut world = World::new()
        .with_queue(Some(one_flavor_queue(
            "gitops",
            &[
                ("cpu", json!("1")),
                ("memory", json!("1Gi")),
                ("pods", json!("1")),
                (SLOT, json!("1")),
            ],
        )))
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
