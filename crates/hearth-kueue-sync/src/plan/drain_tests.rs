//! A drained cluster keeps its flavor and entry, with zero quota, until its kubeconfig is
//! valid again.

use hearth_api::KubeconfigStatus;
use hearth_api::conditions;
use serde_json::json;

use super::tests::{message_of, q, synced, world_with_published};
use super::*;
use crate::testing::{SLOT, World, cluster, gpu, json, slot_group_quotas};

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
    assert_eq!(a.reason(), SyncReason::Drained);
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
    let message = message_of(&world, "a", "Drained");
    assert!(
        message.starts_with("Drained: hearth-discovery has not validated its kubeconfig yet"),
        "{message}"
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
