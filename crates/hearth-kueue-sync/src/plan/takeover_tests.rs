//! Taking over from the Python controller: its flavors adopted in place with their
//! entries, its hardware and kubeconfig status read until discovery counts.

use hearth_api::names::CLUSTER_NAMESPACE_LABEL;
use hearth_api::{Hardware, KubeconfigStatus};
use serde_json::json;

use super::tests::{names, q};
use super::*;
use crate::testing::{
    SLOT, World, at, cluster, foreign_flavor, gpu, hearth_flavor, legacy_flavor, queue,
    slot_group_quotas,
};

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
    assert_eq!(plan.clusters["a"].reason(), SyncReason::Synced);
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
    assert_eq!(plan.clusters["a"].reason(), SyncReason::FlavorNotManaged);
    assert_eq!(plan.clusters["b"].reason(), SyncReason::FlavorNotManaged);
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
