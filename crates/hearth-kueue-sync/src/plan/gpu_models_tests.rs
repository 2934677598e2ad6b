//! GPU models coming and going in `coveredResources`, zero entries, short names, and
//! resources another group covers.

use serde_json::json;

use super::tests::{assert_message, covered, q, synced};
use super::*;
use crate::testing::{
    SLOT, World, cluster, gpu, hearth_flavor, json, one_flavor_queue, queue, slot_group_quotas,
};

#[test]
fn gpu_model_coming_and_going() {
    let mut world = World::new()
        .with_queue(Some(one_flavor_queue(
            "gitops",
            &[(SLOT, json!("5")), (&gpu("l40s"), json!("3"))],
        )))
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
        .with_queue(Some(one_flavor_queue(
            "gitops",
            &[("cpu", json!("0")), (SLOT, json!("0"))],
        )))
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
    assert_message(
        &world,
        "a",
        "InvalidResourceName",
        "fournos/gpu-bad name! (2 GPUs): not a valid resource name",
    );
    assert!(world.status("a").kueue.is_some(), "the rest is published");
}

#[test]
fn gpu_resource_covered_by_another_group_is_left_out() {
    let mut world = World::new()
        .with_queue(Some(one_flavor_queue(
            "other",
            &[(&gpu("h100"), json!("1"))],
        )))
        .with_clusters([cluster("a").gpu("a100", 8).gpu("h100", 4)]);
    world.converge();
    assert_eq!(covered(world.queue(), 1), [SLOT, &gpu("a100")]);
    assert_message(&world, "a", "Conflict", "resourceGroups[0] covers it");
}

#[test]
fn flavor_listed_in_another_group_is_a_conflict() {
    let mut world = World::new()
        .with_queue(Some(one_flavor_queue("a", &[("cpu", json!("1"))])))
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
