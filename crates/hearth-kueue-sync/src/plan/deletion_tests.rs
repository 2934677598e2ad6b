//! Deleted clusters and orphaned flavors: the entry goes first, the flavor next, and what
//! Kueue still holds is noted.

use serde_json::json;

use super::tests::{names, q, synced, world_with_published};
use super::*;
use crate::testing::{
    SLOT, World, foreign_flavor, gpu, hearth_flavor, one_flavor_queue, slot_group_quotas,
};

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
        .with_queue(Some(one_flavor_queue("old", &[("cpu", json!("1"))])))
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
    assert_eq!(first.clusters["a"].reason(), SyncReason::WaitingForFlavor);
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
