//! Cordons: the taint on the flavor, the `Schedulable` condition and its count.

use hearth_api::conditions;
use hearth_api::names::CORDON_TAINT_KEY;
use hearth_api::names::condition_types::SCHEDULABLE;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::testing::{World, cached, cluster};
use crate::writeback::cordon_event_for;

fn schedulable<'a>(world: &'a World, name: &str) -> &'a Condition {
    conditions::find(&world.status(name).conditions, SCHEDULABLE).expect("Schedulable")
}

fn tainted(world: &World, name: &str) -> bool {
    world
        .flavor(name)
        .unwrap()
        .spec
        .node_taints
        .iter()
        .any(|t| t.key == CORDON_TAINT_KEY && t.effect == "NoSchedule")
}

#[test]
fn an_uncordoned_cluster_is_schedulable_and_its_flavor_untainted() {
    let mut world = World::new().with_clusters([cluster("a").gpu("a100", 8)]);
    world.converge();
    let c = schedulable(&world, "a");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "Schedulable")
    );
    assert!(!tainted(&world, "a"));
    assert_eq!(world.status("a").admitted_workloads, None);
}

#[test]
fn a_cordon_taints_the_flavor_keeps_the_quota_and_counts_down_to_drained() {
    let mut world = World::new().with_clusters([cluster("a").gpu("a100", 8)]);
    world.converge();
    let queue_before = world.queue().clone();
    world.admitted.insert("a".into(), 2);
    world.cluster_mut("a").spec.cordon = cluster("x")
        .cordoned("driver upgrade, OPS-1", None)
        .build()
        .spec
        .cordon;
    let plan = world.plan();
    assert!(plan.cluster_queue.is_none(), "quota unchanged: {plan:#?}");
    assert_eq!(plan.flavors_to_repair.len(), 1);
    let sync = plan.clusters["a"].clone();
    let event = cordon_event_for(&cached(&world.clusters[0]), &sync).expect("an Event");
    assert_eq!((event.reason, event.warning), ("Cordoned", false));
    world.converge();
    assert!(tainted(&world, "a"));
    assert_eq!(world.queue(), &queue_before);
    let c = schedulable(&world, "a");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "Cordoned")
    );
    assert!(c.message.contains("2 Workloads"), "{}", c.message);
    assert!(c.message.contains("by alice"), "{}", c.message);
    assert!(c.message.contains("driver upgrade, OPS-1"), "{}", c.message);
    assert!(
        c.message.contains("kubectl fournos uncordon a"),
        "{}",
        c.message
    );
    assert_eq!(world.status("a").admitted_workloads, Some(2));
    assert_eq!(
        super::tests::synced(&world, "a").reason,
        "Synced",
        "a cordon is not a drain of quota"
    );

    world.admitted.insert("a".into(), 1);
    world.converge();
    assert!(
        schedulable(&world, "a")
            .message
            .contains("1 Workload admitted")
    );

    let before = cached(&world.clusters[0]);
    world.admitted.clear();
    let sync = world.plan().clusters["a"].clone();
    assert_eq!(
        cordon_event_for(&before, &sync).map(|e| e.reason),
        Some("CordonDrained")
    );
    world.converge();
    let c = schedulable(&world, "a");
    assert_eq!(c.reason, "Drained");
    assert_eq!(world.status("a").admitted_workloads, Some(0));

    // Uncordoned: untainted, schedulable, no count.
    let before = cached(&world.clusters[0]);
    world.cluster_mut("a").spec.cordon = None;
    let sync = world.plan().clusters["a"].clone();
    assert_eq!(
        cordon_event_for(&before, &sync).map(|e| e.reason),
        Some("Uncordoned")
    );
    world.converge();
    assert!(!tainted(&world, "a"));
    assert_eq!(schedulable(&world, "a").reason, "Schedulable");
    assert_eq!(world.status("a").admitted_workloads, None);
}

#[test]
fn a_cordon_past_its_end_is_reported_not_lifted_and_says_the_same_each_round() {
    // World::new starts at t0 + 10000 s; the cordon ends at t0 + 10100 s.
    let mut world = World::new().with_clusters([cluster("a").cordoned("rack move", Some(10_100))]);
    world.converge();
    assert_eq!(schedulable(&world, "a").reason, "Drained");
    let before = cached(&world.clusters[0]);
    world.now += 200;
    let sync = world.plan().clusters["a"].clone();
    let event = cordon_event_for(&before, &sync).expect("an Event");
    assert_eq!((event.reason, event.warning), ("CordonOverdue", true));
    world.converge();
    let c = schedulable(&world, "a").clone();
    assert_eq!(c.reason, "CordonOverdue");
    assert!(tainted(&world, "a"), "never lifted by Hearth");
    assert!(world.cluster_mut("a").spec.cordon.is_some());
    // Later rounds write nothing: the message does not count the time since.
    world.now += 3_600;
    assert!(world.plan().is_noop());
}

#[test]
fn cordon_text_is_bounded_and_plain_in_the_message() {
    let hostile = format!("\u{1b}[31mred\u{202e}{}", "x".repeat(5_000));
    let mut world = World::new().with_clusters([cluster("a").cordoned(&hostile, None)]);
    world.converge();
    let message = &schedulable(&world, "a").message;
    assert!(
        !message.contains('\u{1b}') && !message.contains('\u{202e}'),
        "{message:?}"
    );
    assert!(message.chars().count() < 1_500, "{}", message.len());
}
