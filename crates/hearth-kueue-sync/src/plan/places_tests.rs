//! Who claims a place in the ClusterQueue and who keeps it: only what discovery counted
//! (or a cluster under takeover) claims one, quota once given stays, ties are decided the
//! same way on every plan, and a cluster publishes at most `MAX_GPU_MODELS` models.

use std::collections::BTreeSet;

use hearth_api::KubeconfigStatus;
use hearth_api::cluster::MAX_GPU_MODELS;
use hearth_api::names::{
    ADOPTED_CLUSTER_UID_ANNOTATION, ADOPTED_FROM_ANNOTATION, CLUSTER_NODE_LABEL,
};
use serde_json::json;

use super::tests::{assert_message, message_of, synced};
use super::*;
use crate::testing::{
    ClusterBuilder, SLOT, World, cluster, gpu, hearth_flavor, kueue_problems, legacy_flavor,
    one_flavor_queue, queue, slot_group_quotas,
};

/// A ClusterQueue whose slot group leaves room for `room` of Hearth's entries: the rest
/// of Kueue's 64 flavors are GitOps entries, which Hearth never evicts.
pub(super) fn queue_with_room(room: usize) -> ClusterQueueSpec {
    let flavors: Vec<_> = (0..MAX_FLAVORS_PER_GROUP - room)
        .map(|i| {
            json!({"name": format!("gitops-{i:02}"),
                   "resources": [{"name": SLOT, "nominalQuota": "1"}]})
        })
        .collect();
    queue(json!({"resourceGroups": [{"coveredResources": [SLOT], "flavors": flavors}]}))
}

/// Hearth's entries (not the GitOps ones) in the slot group, in order.
/// A world whose queue has room for `room` Hearth flavors, converged over `clusters`.
pub(super) fn converged_with_room(
    room: usize,
    clusters: impl IntoIterator<Item = ClusterBuilder>,
) -> World {
    let mut world = World::new()
        .with_queue(Some(queue_with_room(room)))
        .with_clusters(clusters);
    world.converge();
    world
}

pub(super) fn hearth_entries(world: &World) -> Vec<String> {
    slot_group_quotas(world.queue())
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| !name.starts_with("gitops-"))
        .collect()
}

fn covered(world: &World) -> Vec<String> {
    world.queue().resource_groups[0].covered_resources.clone()
}

// ---- ties and arrival order ----

#[test]
fn same_second_ties_go_the_same_way_whatever_the_order_observed() {
    let clusters = || ["d", "b", "a", "c"].map(|n| cluster(n).created(7).gpu("a100", 1));
    let mut forward = World::new()
        .with_queue(Some(queue_with_room(2)))
        .with_clusters(clusters());
    let mut backward = World::new()
        .with_queue(Some(queue_with_room(2)))
        .with_clusters(clusters().into_iter().rev());
    forward.converge();
    backward.converge();
    assert_eq!(hearth_entries(&forward), ["a", "b"]);
    assert_eq!(forward.queue(), backward.queue());
    for name in ["c", "d"] {
        assert_eq!(synced(&forward, name).reason, "LimitReached");
        assert_eq!(synced(&forward, name), synced(&backward, name));
    }
}

#[test]
fn a_newcomer_that_sorts_earlier_does_not_displace_a_holder() {
    // "z" got the last place; then "a" shows up (a watch event late, a restart): created in
    // the same second and earlier by name, or even created earlier.
    for a_created in [5, 0] {
        let mut world = converged_with_room(1, [cluster("z").created(5).gpu("a100", 1)]);
        assert_eq!(hearth_entries(&world), ["z"]);

        world.add_cluster(cluster("a").created(a_created).gpu("h100", 4));
        world.converge();
        assert_eq!(hearth_entries(&world), ["z"], "created at {a_created}");
        assert_eq!(synced(&world, "z").reason, "Synced");
        assert_message(
            &world,
            "a",
            "LimitReached",
            "63 not Hearth's and 1 of clusters that have their place (z)",
        );
        assert!(
            !covered(&world).contains(&gpu("h100")),
            "a waiting cluster covers nothing"
        );
    }
}

#[test]
fn an_old_cluster_counted_only_now_does_not_displace_a_holder() {
    let mut world = converged_with_room(
        1,
        [
            cluster("old").created(0).gpu("a100", 8).uncounted(),
            cluster("young").created(100).gpu("h100", 2),
        ],
    );
    assert_eq!(hearth_entries(&world), ["young"]);
    assert_eq!(synced(&world, "old").reason, "WaitingForDiscovery");

    // Discovery counts "old" at last: it is a newcomer, and there is no room.
    let hardware = world.hardware_mut("old");
    hardware.last_discovery = Some(crate::testing::at(500));
    world.converge();
    assert_eq!(hearth_entries(&world), ["young"]);
    assert_eq!(synced(&world, "young").reason, "Synced");
    assert_eq!(synced(&world, "old").reason, "LimitReached");

    // It takes the place once the holder is offboarded.
    world.remove_cluster("young");
    world.converge();
    assert_eq!(hearth_entries(&world), ["old"]);
    assert_eq!(synced(&world, "old").reason, "Synced");
}

#[test]
fn a_drained_holder_keeps_its_place_with_zero_quota() {
    let mut world = converged_with_room(1, [cluster("b").created(5).gpu("a100", 8)]);
    world
        .cluster_mut("b")
        .status
        .as_mut()
        .unwrap()
        .kubeconfig_status = Some(KubeconfigStatus::Unreachable);
    world.add_cluster(cluster("a").created(0).gpu("a100", 4));
    world.converge();
    let quotas = slot_group_quotas(world.queue());
    assert_eq!(
        quotas.last().unwrap(),
        &("b".to_owned(), vec![(SLOT.to_owned(), 0), (gpu("a100"), 0)])
    );
    assert_eq!(synced(&world, "b").reason, "Drained");
    assert_eq!(synced(&world, "a").reason, "LimitReached");
}

#[test]
fn waiting_clusters_are_told_who_holds_the_places() {
    let mut world = World::new().with_clusters(
        (0..MAX_FLAVORS_PER_GROUP + 2).map(|i| cluster(&format!("c{i:02}")).created(i as i64)),
    );
    world.converge();
    let c = synced(&world, "c65");
    assert_eq!(c.reason, "LimitReached");
    assert_eq!(c.status, "False");
    assert_eq!(
        c.message,
        "No room for this cluster in ClusterQueue 'fournos-queue': the resource group \
         covering fournos/cluster-slot holds 64 flavors (Kueue's maximum): 0 not Hearth's \
         and 64 of clusters that have their place (c00, c01, c02 and 61 more), which keep \
         it. Delete clusters that are no longer used or move other flavors to another \
         resource group. It is added as soon as there is room; until then no job is \
         admitted on it."
    );
}

#[test]
fn random_arrivals_never_take_a_place_from_a_holder() {
    for seed in 1..=60u64 {
        let mut rng = super::random_tests::Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let room = 1 + rng.below(6) as usize;
        let mut world = World::new().with_queue(Some(queue_with_room(room)));
        let mut ever = BTreeSet::new();
        for step in 0..40u64 {
            let before: BTreeSet<String> = hearth_entries(&world).into_iter().collect();
            let name = format!("c{}", rng.below(25));
            let exists = world
                .clusters
                .iter()
                .any(|c| c.metadata.name.as_deref() == Some(name.as_str()));
            // The cache shows a flavor whose create was under way.
            if !world.in_flight.is_empty() && rng.chance(30) {
                let at = rng.below(world.in_flight.len() as u64) as usize;
                let flavor = world.in_flight[at].metadata.name.clone().unwrap();
                world.deliver(&flavor);
            }
            match (exists, rng.below(10)) {
                // Arrives now, created any time (same seconds as others, or earlier); its
                // flavor may reach the cache only later.
                (false, _) => {
                    let mut c = cluster(&name)
                        .created(rng.below(8) as i64)
                        .gpu("a100", 1 + rng.below(4) as i64);
                    if rng.chance(40) {
                        c = c.uncounted();
                    }
                    if rng.chance(50) {
                        world.slow.insert(name.clone());
                    }
                    world.clusters.push(c.build());
                }
                (true, 0) => world.remove_cluster(&name),
                (true, 1..=3) => {
                    world.hardware_mut(&name).last_discovery =
                        Some(crate::testing::at(step as i64));
                }
                (true, 4 | 5) => {
                    let status = world.cluster_mut(&name).status.as_mut().unwrap();
                    status.kubeconfig_status = if status.kubeconfig_status.is_some() {
                        None
                    } else {
                        Some(KubeconfigStatus::Valid)
                    };
                }
                _ => {}
            }
            world.converge();
            let now: BTreeSet<String> = hearth_entries(&world).into_iter().collect();
            assert!(now.len() <= room, "seed {seed}");
            for held in &before {
                assert!(
                    now.contains(held)
                        || world
                            .clusters
                            .iter()
                            .all(|c| c.metadata.name.as_ref() != Some(held)),
                    "seed {seed} step {step}: {held} lost its place"
                );
            }
            // Room left over goes to every counted cluster that waits; a reservation
            // takes room.
            let waiting = |reason: &str| {
                world
                    .clusters
                    .iter()
                    .filter(|c| ObservedCluster::from_cluster(c).counted)
                    .filter(|c| !now.contains(c.metadata.name.as_deref().unwrap()))
                    .filter(|c| {
                        synced(&world, c.metadata.name.as_deref().unwrap()).reason == reason
                    })
                    .count()
            };
            let (reserved, no_room) = (waiting("WaitingForFlavor"), waiting("LimitReached"));
            assert!(
                no_room == 0 || now.len() + reserved == room,
                "seed {seed} step {step}"
            );
            ever.extend(now);
        }
        assert!(!ever.is_empty(), "seed {seed}");
    }
}

// ---- never counted ----

#[test]
fn a_never_counted_cluster_claims_no_place_and_no_covered_resource() {
    let mut world = World::new().with_clusters([
        // status.hardware written without a count, and spec.hardware: neither is published.
        cluster("x")
            .created(0)
            .gpu("h100", 8)
            .spec_gpu("mi300x", 64)
            .uncounted(),
        cluster("y").created(10).gpu("a100", 2),
    ]);
    world.converge();
    assert_eq!(hearth_entries(&world), ["y"]);
    assert_eq!(covered(&world), [SLOT.to_owned(), gpu("a100")]);
    let x = synced(&world, "x");
    assert_eq!(x.reason, "WaitingForDiscovery");
    assert_eq!(x.status, "False");
    assert_eq!(
        x.message,
        "hearth-discovery has not counted this cluster's GPUs yet \
         (status.hardware.lastDiscovery is not set), so it takes no place in ClusterQueue \
         'fournos-queue' and publishes no quota. Only discovery publishes hardware \
         (spec.hardware is not read). It gets its place, if there is room, once discovery \
         has counted it: see conditions KubeconfigValid and GPUDiscovered (kubectl fournos \
         why x)."
    );
    assert!(world.status("x").kueue.is_none());
    assert!(world.flavor("x").is_some(), "its flavor is ready for later");
}

#[test]
fn never_counted_clusters_do_not_starve_a_counted_one() {
    // More hand-made, Secret-less clusters than there is room, all older than the real one.
    let mut world = World::new()
        .with_queue(Some(queue_with_room(2)))
        .with_clusters(
            (0..5)
                .map(|i| {
                    cluster(&format!("fake{i}"))
                        .created(i)
                        .kubeconfig(Some(KubeconfigStatus::Missing))
                        .uncounted()
                })
                .chain([cluster("real").created(100).gpu("a100", 8)]),
        );
    world.converge();
    assert_eq!(hearth_entries(&world), ["real"]);
    assert_eq!(synced(&world, "real").reason, "Synced");
    for i in 0..5 {
        assert_eq!(
            synced(&world, &format!("fake{i}")).reason,
            "WaitingForDiscovery"
        );
    }
}

#[test]
fn a_never_counted_cluster_loses_the_entry_an_older_hearth_gave_it() {
    // Published by a kueue-sync that still gave never-counted clusters a place.
    let mut world = World::new()
        .with_clusters([cluster("x").gpu("a100", 8).uncounted()])
        .with_flavors([hearth_flavor("x"), hearth_flavor("y")])
        .with_queue(Some(one_flavor_queue(
            "x",
            &[(SLOT, json!("0")), (&gpu("a100"), json!("0"))],
        )));
    world.add_cluster(cluster("y").created(9));
    world.converge();
    assert_eq!(hearth_entries(&world), ["y"]);
    assert_eq!(covered(&world), [SLOT]);
    assert_eq!(synced(&world, "x").reason, "WaitingForDiscovery");
}

// ---- spec.hardware and takeover ----

#[test]
fn spec_hardware_is_ignored_outside_a_takeover() {
    // Counted: status wins, whatever spec says.
    let mut world = World::new().with_clusters([cluster("a")
        .gpu("a100", 2)
        .spec_gpu("a100", 100)
        .spec_gpu("h200", 100)]);
    world.converge();
    assert_eq!(
        world.status("a").kueue.as_ref().unwrap().quotas,
        BTreeMap::from([(SLOT.to_owned(), 100), (gpu("a100"), 2)])
    );

    // Not counted, with a legacy kubeconfigStatus and a flavor Hearth made itself: no claim.
    let mut world = World::new()
        .with_clusters([cluster("b").gpu("a100", 8).legacy()])
        .with_flavors([hearth_flavor("b")]);
    world.converge();
    assert_eq!(synced(&world, "b").reason, "WaitingForDiscovery");
    assert!(world.queue().resource_groups.is_empty());

    // A flavor adopted for another FournosCluster of that name (deleted and created
    // again): not under takeover either.
    let mut adopted_before = hearth_flavor("c");
    adopted_before.metadata.annotations = Some(BTreeMap::from([
        (ADOPTED_FROM_ANNOTATION.to_owned(), "hearth-py".to_owned()),
        (
            ADOPTED_CLUSTER_UID_ANNOTATION.to_owned(),
            "uid-of-the-old-c".to_owned(),
        ),
    ]));
    let mut world = World::new()
        .with_clusters([cluster("c").gpu("a100", 8).legacy()])
        .with_flavors([adopted_before.clone()]);
    world.converge();
    assert_eq!(synced(&world, "c").reason, "WaitingForDiscovery");

    // The same flavor adopted for this very cluster: its legacy count is its quota.
    adopted_before
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(
            ADOPTED_CLUSTER_UID_ANNOTATION.to_owned(),
            "uid-c".to_owned(),
        );
    let mut world = World::new()
        .with_clusters([cluster("c").gpu("a100", 8).legacy()])
        .with_flavors([adopted_before]);
    world.converge();
    assert_eq!(synced(&world, "c").reason, "Synced");
    assert_eq!(
        world.status("c").kueue.as_ref().unwrap().quotas[&gpu("a100")],
        8
    );
}

#[test]
fn adopting_marks_the_flavor_and_a_repair_keeps_the_mark() {
    let mut world = World::new()
        .with_clusters([cluster("a").gpu("a100", 8).legacy()])
        .with_flavors([legacy_flavor("a")]);
    let plan = world.plan();
    let adopted = &plan.flavors_to_adopt[0];
    let annotations = adopted.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations[ADOPTED_FROM_ANNOTATION], "hearth-py");
    assert_eq!(annotations[ADOPTED_CLUSTER_UID_ANNOTATION], "uid-a");
    world.converge();
    assert_eq!(synced(&world, "a").reason, "Synced");

    // Someone breaks the node label: the repair re-applies the mark too (server-side
    // apply would otherwise drop it), and the cluster stays under takeover.
    world
        .flavors
        .iter_mut()
        .find(|f| f.metadata.name.as_deref() == Some("a"))
        .unwrap()
        .spec
        .node_labels
        .insert(CLUSTER_NODE_LABEL.into(), "b".into());
    let plan = world.plan();
    let repaired = &plan.flavors_to_repair[0];
    assert_eq!(
        repaired.metadata.annotations.as_ref().unwrap()[ADOPTED_CLUSTER_UID_ANNOTATION],
        "uid-a"
    );
    assert!(plan.cluster_queue.is_none(), "{plan:#?}");
    world.converge();
    assert_eq!(
        world.status("a").kueue.as_ref().unwrap().quotas[&gpu("a100")],
        8
    );
}

// ---- the model limit ----

#[test]
fn a_cluster_publishes_at_most_the_model_limit() {
    let models: Vec<String> = (0..MAX_GPU_MODELS + 2)
        .map(|i| format!("m{i:02}"))
        .collect();
    let many = models.iter().rev().fold(cluster("a"), |c, m| c.gpu(m, 1));
    let mut world = World::new()
        .with_clusters([many])
        .with_flavors([hearth_flavor("a")]);
    world.converge();
    assert!(kueue_problems(world.queue()).is_empty());
    let expected: Vec<String> = std::iter::once(SLOT.to_owned())
        .chain(models[..MAX_GPU_MODELS].iter().map(|m| gpu(m)))
        .collect();
    assert_eq!(covered(&world), expected);
    let kueue = world.status("a").kueue.as_ref().unwrap();
    assert_eq!(kueue.quotas.len(), MAX_GPU_MODELS + 1);
    let message = message_of(&world, "a", "LimitReached");
    assert!(
        message.ends_with(
            "but not fournos/gpu-m08 (1 GPUs), fournos/gpu-m09 (1 GPUs): a cluster \
             publishes at most 8 GPU models (each is a resource of the shared \
             ClusterQueue), the first in name order. Check the GPU models in \
             status.hardware."
        ),
        "{message}"
    );
}

/// A legacy spec.hardware beyond the CRD's bounds (stored before it set them) is not
/// read, not a part of it: the cluster under takeover keeps its place with its slots
/// and no GPU, and says why, until discovery counts it.
#[test]
fn legacy_hardware_beyond_the_crd_is_not_read() {
    let models: Vec<String> = (0..MAX_GPU_MODELS + 2)
        .map(|i| format!("m{i:02}"))
        .collect();
    let many = models
        .iter()
        .fold(cluster("b"), |c, m| c.gpu(m, 1))
        .legacy();
    let long = cluster("c").gpu(&"x".repeat(64), 4).legacy();
    let fine = cluster("d").gpu("a100", 4).legacy();
    let mut world = World::new()
        .with_clusters([many, long, fine])
        .with_flavors([legacy_flavor("b"), legacy_flavor("c"), legacy_flavor("d")]);
    world.converge();
    assert!(kueue_problems(world.queue()).is_empty());
    assert_eq!(covered(&world), [SLOT.to_owned(), gpu("a100")]);
    for (name, why) in [
        (
            "b",
            "spec.hardware.gpus lists 10 GPU models; at most 8 are accepted",
        ),
        ("c", "longer than 63 characters"),
    ] {
        let kueue = world.status(name).kueue.as_ref().unwrap();
        assert_eq!(
            kueue.quotas,
            BTreeMap::from([(SLOT.to_owned(), 100)]),
            "{name}"
        );
        let message = message_of(&world, name, "InvalidLegacyHardware");
        assert!(message.contains(why), "{message}");
        assert!(message.contains("fournos/cluster-slot=100"), "{message}");
    }
    assert_eq!(synced(&world, "d").reason, "Synced");

    // Once discovery has counted it, spec.hardware is not read at all.
    let counted = cluster("b").gpu("h100", 2).discovered();
    let mut counted = counted.build();
    counted.spec.hardware = world.cluster_mut("b").spec.hardware.take();
    *world.cluster_mut("b") = counted;
    world.converge();
    assert_eq!(synced(&world, "b").reason, "Synced");
}
