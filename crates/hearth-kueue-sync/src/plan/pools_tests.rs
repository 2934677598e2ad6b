//! Pools: the FournosCluster labels of `HEARTH_POOL_LABEL_KEYS` on every Hearth flavor.

use std::collections::BTreeMap;

use hearth_api::names::{CLUSTER_NODE_LABEL, POOL_LABEL, POOL_LABEL_KEYS_ANNOTATION};

use super::tests::{message_of, synced};
use crate::testing::{World, cluster};

const TEAM: &str = "example.com/team";

fn pooled(world: World, keys: &[&str]) -> World {
    let mut world = world;
    world.settings.pool_label_keys = keys.iter().map(|k| (*k).to_owned()).collect();
    world
}

fn node_labels(world: &World, name: &str) -> BTreeMap<String, String> {
    world
        .flavor(name)
        .expect("a flavor")
        .spec
        .node_labels
        .clone()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn every_key_goes_on_every_flavor_with_none_where_the_cluster_lacks_it() {
    let mut world = pooled(
        World::new().with_clusters([
            cluster("a").label(POOL_LABEL, "b").label(TEAM, "perf"),
            cluster("b").label(POOL_LABEL, "b"),
            cluster("c"),
        ]),
        &[POOL_LABEL, TEAM],
    );
    world.converge();
    assert_eq!(
        node_labels(&world, "a"),
        labels(&[(CLUSTER_NODE_LABEL, "a"), (POOL_LABEL, "b"), (TEAM, "perf")])
    );
    assert_eq!(
        node_labels(&world, "b"),
        labels(&[(CLUSTER_NODE_LABEL, "b"), (POOL_LABEL, "b"), (TEAM, "none")])
    );
    assert_eq!(
        node_labels(&world, "c"),
        labels(&[
            (CLUSTER_NODE_LABEL, "c"),
            (POOL_LABEL, "none"),
            (TEAM, "none")
        ])
    );
    let annotations = world.flavor("c").unwrap().metadata.annotations.clone();
    assert_eq!(
        annotations.unwrap()[POOL_LABEL_KEYS_ANNOTATION],
        format!("{POOL_LABEL},{TEAM}")
    );
    for name in ["a", "b", "c"] {
        assert_eq!(synced(&world, name).reason, "Synced");
    }
    assert!(world.plan().is_noop(), "converged: nothing more to write");
}

#[test]
fn relabelling_a_cluster_repairs_its_flavor_only() {
    let mut world = pooled(
        World::new().with_clusters([cluster("a").label(POOL_LABEL, "a"), cluster("b")]),
        &[POOL_LABEL],
    );
    world.converge();
    world
        .cluster_mut("b")
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(POOL_LABEL.into(), "a".into());
    let plan = world.plan();
    let repaired: Vec<_> = plan
        .flavors_to_repair
        .iter()
        .map(|f| f.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(repaired, ["b"]);
    assert!(plan.cluster_queue.is_none(), "quota does not move");
    world.converge();
    assert_eq!(node_labels(&world, "b")[POOL_LABEL], "a");

    // The label removed: back to `none`.
    world.cluster_mut("b").metadata.labels = None;
    world.converge();
    assert_eq!(node_labels(&world, "b")[POOL_LABEL], "none");
}

#[test]
fn a_key_taken_off_the_setting_leaves_every_flavor() {
    let mut world = pooled(
        World::new().with_clusters([cluster("a").label(TEAM, "perf")]),
        &[POOL_LABEL, TEAM],
    );
    world.converge();
    world.settings.pool_label_keys = vec![POOL_LABEL.into()];
    world.converge();
    assert_eq!(
        node_labels(&world, "a"),
        labels(&[(CLUSTER_NODE_LABEL, "a"), (POOL_LABEL, "none")])
    );
    world.settings.pool_label_keys = Vec::new();
    world.converge();
    assert_eq!(
        node_labels(&world, "a"),
        labels(&[(CLUSTER_NODE_LABEL, "a")])
    );
    let annotations = world.flavor("a").unwrap().metadata.annotations.clone();
    assert!(
        annotations.is_none_or(|a| !a.contains_key(POOL_LABEL_KEYS_ANNOTATION)),
        "the record of applied keys goes too"
    );
}

#[test]
fn a_value_that_is_not_a_label_value_is_none_on_the_flavor_and_a_reason() {
    let bad = "not a label value\u{202e}";
    let mut world = pooled(
        World::new().with_clusters([
            cluster("a").gpu("a100", 8).label(POOL_LABEL, bad),
            cluster("b").label(POOL_LABEL, &"x".repeat(64)),
        ]),
        &[POOL_LABEL],
    );
    world.converge();
    assert_eq!(node_labels(&world, "a")[POOL_LABEL], "none");
    let message = message_of(&world, "a", "InvalidPoolLabel");
    assert!(message.contains(POOL_LABEL), "{message}");
    assert!(
        message.contains("fournos/gpu-a100=8"),
        "quota is still published: {message}"
    );
    assert!(
        !message.contains("not a label"),
        "the value is never quoted: {message}"
    );
    assert_eq!(synced(&world, "a").status, "False");
    assert_eq!(synced(&world, "b").reason, "InvalidPoolLabel");
}

/// Random fleets under random settings: every flavor Hearth writes is one Kueue accepts,
/// carries every key, and the ClusterQueue stays valid (the World checks both on apply).
#[test]
fn any_pool_labels_keep_flavors_and_queue_valid_for_kueue() {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let keys = [
        POOL_LABEL,
        TEAM,
        "gpu-tier",
        "example.com/region",
        "a",
        "b",
        "c",
    ];
    let values = [
        "b",
        "none",
        "",
        "perf",
        "x.y_z-1",
        "-bad",
        "not valid",
        "é",
        "z",
    ];
    for round in 0..200 {
        let key_count = next(keys.len() as u64 + 1) as usize;
        let chosen: Vec<&str> = keys[..key_count].to_vec();
        let clusters = (0..next(6) + 1).map(|i| {
            let mut c = cluster(&format!("c{i}")).gpu("a100", next(9) as i64);
            for key in keys {
                if next(2) == 0 {
                    c = c.label(key, values[next(values.len() as u64) as usize]);
                }
            }
            c
        });
        let mut world = pooled(World::new().with_clusters(clusters), &chosen);
        world.converge();
        for c in &world.clusters {
            let name = c.metadata.name.clone().unwrap();
            let on_flavor = node_labels(&world, &name);
            assert_eq!(
                on_flavor.len(),
                chosen.len() + 1,
                "round {round}: {on_flavor:?}"
            );
            for key in &chosen {
                assert!(on_flavor.contains_key(*key), "round {round}: {key}");
            }
        }
        assert!(world.plan().is_noop(), "round {round}: converged");
    }
}
