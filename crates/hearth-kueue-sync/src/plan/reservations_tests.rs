//! Places do not depend on flavors: a cluster whose flavor the cache does not show yet
//! (created by this plan, or its create under way) is ranked like the others and, given
//! a place, reserves it until the flavor appears.

use std::collections::BTreeSet;

use serde_json::json;

use super::places_tests::{converged_with_room, hearth_entries, queue_with_room};
use super::random_tests::Rng;
use super::tests::{assert_message, synced};
use super::*;
use crate::testing::{SLOT, World, cluster, gpu, queue, slot_group_quotas};

/// A ClusterQueue whose slot group covers the slot resource and 62 of the platform's,
/// which leaves room for one GPU model.
fn queue_with_room_for_one_model() -> ClusterQueueSpec {
    let resources: Vec<String> = (0..62).map(|i| format!("example.com/r{i:02}")).collect();
    let gitops = json!({"name": "gitops-00", "resources": resources
        .iter()
        .map(|r| json!({"name": r, "nominalQuota": "1"}))
        .collect::<Vec<_>>()});
    let covered: Vec<String> = resources.iter().cloned().chain([SLOT.to_owned()]).collect();
    queue(json!({"resourceGroups": [{"coveredResources": covered, "flavors": [gitops]}]}))
}

/// A world whose flavor creates reach the cache only when [`World::deliver`]ed.
fn slow_world(queue: ClusterQueueSpec, clusters: Vec<crate::testing::ClusterBuilder>) -> World {
    let mut world = World::new().with_queue(Some(queue)).with_clusters(clusters);
    world.slow = world
        .clusters
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    world
}

/// Plans and applies until nothing changes, checking that no cluster lost its entry.
fn rounds(world: &mut World) {
    let before: BTreeSet<String> = hearth_entries(world).into_iter().collect();
    world.converge();
    let now: BTreeSet<String> = hearth_entries(world).into_iter().collect();
    assert!(before.is_subset(&now), "{before:?} → {now:?}");
}

#[test]
fn an_older_cluster_keeps_the_last_place_whatever_order_flavors_and_counts_arrive_in() {
    // Four things happen, a round after each: "old" is counted, "young" is counted, the
    // cache shows old's flavor, young's flavor. Only a cluster counted earlier that already
    // has its entry keeps the place from an older one: "young" wins only when it was
    // counted and its flavor shown before "old" was counted.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Event {
        Counted(&'static str),
        Shown(&'static str),
    }
    use Event::{Counted, Shown};
    let events = [
        Counted("old"),
        Counted("young"),
        Shown("old"),
        Shown("young"),
    ];
    let mut orders = vec![vec![]];
    for _ in 0..events.len() {
        orders = orders
            .into_iter()
            .flat_map(|order: Vec<Event>| {
                events
                    .iter()
                    .filter(|e| !order.contains(e))
                    .map(|e| [order.clone(), vec![*e]].concat())
                    .collect::<Vec<_>>()
            })
            .collect();
    }
    assert_eq!(orders.len(), 24);
    for order in orders {
        let mut world = slow_world(
            queue_with_room(1),
            vec![
                cluster("old").created(0).gpu("a100", 8).uncounted(),
                cluster("young").created(5).gpu("a100", 8).uncounted(),
            ],
        );
        rounds(&mut world);
        assert_eq!(world.in_flight.len(), 2, "both creates under way");
        for event in &order {
            match *event {
                Counted(name) => {
                    world.hardware_mut(name).last_discovery = Some(crate::testing::at(1))
                }
                Shown(name) => world.deliver(name),
            }
            rounds(&mut world);
        }
        let at = |e: Event| order.iter().position(|o| *o == e).unwrap();
        let young_first =
            at(Counted("young")) < at(Counted("old")) && at(Shown("young")) < at(Counted("old"));
        let (winner, waiting) = if young_first {
            ("young", "old")
        } else {
            ("old", "young")
        };
        assert_eq!(hearth_entries(&world), [winner], "{order:?}");
        assert_eq!(synced(&world, winner).reason, "Synced", "{order:?}");
        assert_eq!(synced(&world, waiting).reason, "LimitReached", "{order:?}");
    }
}

#[test]
fn a_reserved_place_becomes_an_entry_when_the_flavor_appears_and_never_before() {
    let mut world = slow_world(
        queue_with_room(1),
        vec![
            cluster("old").created(0).gpu("a100", 8),
            cluster("young").created(5).gpu("h100", 2),
        ],
    );
    let first = world.plan();
    assert_eq!(first.flavors_to_create.len(), 2);
    assert!(
        first.cluster_queue.is_none(),
        "no entry names a missing flavor"
    );
    let old = &first.clusters["old"];
    assert_eq!(old.reason(), SyncReason::WaitingForFlavor);
    assert!(old.kueue.is_none());
    assert_eq!(
        old.condition.message,
        "Creating ResourceFlavor 'old'. Its place in ClusterQueue 'fournos-queue' is kept \
         for it, and its entry is added once the flavor exists (a ClusterQueue that \
         references a missing flavor stops admitting); nothing to do unless this lasts."
    );
    assert_eq!(first.clusters["young"].reason(), SyncReason::LimitReached);
    world.apply(&first);

    // The creates are under way: not asked again, and nothing else changes.
    let waiting = world.plan();
    assert!(waiting.is_noop(), "{waiting:#?}");

    // Young's flavor shows first: the place is still old's.
    world.deliver("young");
    rounds(&mut world);
    assert!(hearth_entries(&world).is_empty());
    assert_message(
        &world,
        "young",
        "LimitReached",
        "63 not Hearth's and 1 of clusters that have their place (old)",
    );
    assert!(
        world.queue().resource_groups[0]
            .covered_resources
            .iter()
            .all(|r| r == SLOT),
        "a reservation covers nothing yet"
    );

    world.deliver("old");
    let entry = world.plan();
    assert_eq!(
        slot_group_quotas(entry.cluster_queue.as_ref().unwrap()).last(),
        Some(&(
            "old".to_owned(),
            vec![(SLOT.to_owned(), 100), (gpu("a100"), 8)]
        ))
    );
    world.apply(&entry);
    assert_eq!(synced(&world, "old").reason, "Synced");
    assert_eq!(synced(&world, "young").reason, "LimitReached");
    assert!(world.plan().is_noop());
}

#[test]
fn a_cluster_with_no_place_is_told_so_while_its_flavor_is_created() {
    let mut world = converged_with_room(1, [cluster("old").created(0).gpu("a100", 1)]);
    world.slow.insert("young".into());
    world.add_cluster(cluster("young").created(5).gpu("a100", 1));
    let plan = world.plan();
    assert_eq!(plan.flavors_to_create.len(), 1);
    assert_eq!(plan.clusters["young"].reason(), SyncReason::LimitReached);
}

#[test]
fn a_never_counted_cluster_reserves_nothing() {
    let mut world = slow_world(
        queue_with_room(1),
        vec![
            cluster("old").created(0).gpu("a100", 8).uncounted(),
            cluster("young").created(5).gpu("a100", 2),
        ],
    );
    rounds(&mut world);
    world.deliver("young");
    rounds(&mut world);
    assert_eq!(hearth_entries(&world), ["young"]);
    assert_eq!(synced(&world, "old").reason, "WaitingForDiscovery");
}

#[test]
fn a_terminating_flavor_reserves_nothing() {
    // It may stay Terminating as long as another queue lists it: its cluster comes back
    // as a newcomer once the flavor is gone and created again.
    let mut world = converged_with_room(1, [cluster("old").created(0).gpu("a100", 1)]);
    world.add_cluster(cluster("young").created(5).gpu("a100", 1));
    world.converge();
    assert_eq!(hearth_entries(&world), ["old"]);
    let old = world
        .flavors
        .iter_mut()
        .find(|f| f.metadata.name.as_deref() == Some("old"))
        .unwrap();
    old.metadata.deletion_timestamp = Some(crate::testing::at(1));
    let plan = world.plan();
    assert_eq!(plan.clusters["old"].reason(), SyncReason::WaitingForFlavor);
    assert_eq!(plan.clusters["young"].reason(), SyncReason::Synced);
    world.converge();
    assert_eq!(hearth_entries(&world), ["young"]);
    assert_eq!(synced(&world, "old").reason, "LimitReached");
}

#[test]
fn a_reservation_keeps_the_room_its_models_need() {
    let spec = queue_with_room_for_one_model();
    let clusters = || {
        vec![
            cluster("old").created(0).gpu("h100", 8),
            cluster("young").created(5).gpu("l40s", 4),
        ]
    };
    // Both flavors ready at once: the older cluster's model gets the room.
    let mut at_once = World::new()
        .with_queue(Some(spec.clone()))
        .with_clusters(clusters());
    at_once.converge();

    // Old's flavor shows only after young has had its entry for a while.
    let mut slow = slow_world(spec, clusters());
    rounds(&mut slow);
    slow.deliver("young");
    rounds(&mut slow);
    assert_eq!(hearth_entries(&slow), ["young"]);
    assert_message(
        &slow,
        "young",
        "LimitReached",
        "but not fournos/gpu-l40s (4 GPUs)",
    );
    slow.deliver("old");
    rounds(&mut slow);

    for world in [&at_once, &slow] {
        assert_eq!(synced(world, "old").reason, "Synced");
        assert_eq!(
            world.status("old").kueue.as_ref().unwrap().quotas[&gpu("h100")],
            8
        );
        assert_eq!(synced(world, "young").reason, "LimitReached");
        assert!(
            !world.queue().resource_groups[0]
                .covered_resources
                .contains(&gpu("l40s"))
        );
        assert!(crate::testing::kueue_problems(world.queue()).is_empty());
    }
}

#[test]
fn random_flavor_arrivals_give_the_places_to_the_oldest() {
    for seed in 1..=80u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let room = 1 + rng.below(5) as usize;
        let count = 1 + rng.below(10);
        let clusters: Vec<_> = (0..count)
            .map(|i| {
                let c = cluster(&format!("c{i}"))
                    .created(rng.below(4) as i64)
                    .gpu(["a100", "h100", "l40s"][rng.below(3) as usize], 1);
                if rng.chance(20) { c.uncounted() } else { c }
            })
            .collect();
        let mut world = slow_world(queue_with_room(room), clusters);
        rounds(&mut world);
        // The flavors show in a random order, a round after each.
        while !world.in_flight.is_empty() {
            let at = rng.below(world.in_flight.len() as u64) as usize;
            let name = world.in_flight[at].metadata.name.clone().unwrap();
            world.deliver(&name);
            rounds(&mut world);
        }
        let mut counted: Vec<&hearth_api::FournosCluster> = world
            .clusters
            .iter()
            .filter(|c| ObservedCluster::from_cluster(c).counted)
            .collect();
        counted.sort_by_key(|c| {
            (
                c.metadata.creation_timestamp.clone(),
                c.metadata.name.clone(),
            )
        });
        let oldest: BTreeSet<String> = counted
            .iter()
            .take(room)
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        let holders: BTreeSet<String> = hearth_entries(&world).into_iter().collect();
        assert_eq!(holders, oldest, "seed {seed}");
    }
}

#[test]
fn an_older_newcomer_never_takes_the_covered_resource_of_a_holders_model() {
    // Models not covered yet go by age; the ones holders publish stay theirs.
    let mut world = World::new()
        .with_queue(Some(queue_with_room_for_one_model()))
        .with_clusters([cluster("young").created(5).gpu("l40s", 4)]);
    world.converge();
    assert_eq!(synced(&world, "young").reason, "Synced");
    world.add_cluster(cluster("old").created(0).gpu("h100", 8));
    rounds(&mut world);
    assert_eq!(synced(&world, "young").reason, "Synced");
    assert_message(
        &world,
        "old",
        "LimitReached",
        "but not fournos/gpu-h100 (8 GPUs)",
    );
}
