use hearth_api::kueue::Workload;
use hearth_api::{FournosClusterSpec, FournosClusterStatus, KueueStatus};
use hearth_runtime::events::Events;
use hearth_runtime::testing::scripted;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use pretty_assertions::assert_eq;
use serde_json::Value;

use super::*;
use crate::config::{LockManagerConfig, SentinelKind};
use crate::plan::plan_lock;
use crate::views::{ClusterView, SentinelState};

/// A 409 on the sentinel's name is ours only for the object lock-manager recorded:
/// labelled for this very cluster and with the recorded (or created) UID.
#[test]
fn an_existing_name_is_ours_only_by_label_for_the_cluster_and_recorded_uid() {
    let meta = |cluster: &str, uid: &str| ObjectMeta {
        uid: Some(uid.into()),
        labels: Some(sentinel_labels(cluster, "hearth")),
        ..ObjectMeta::default()
    };
    let recorded = |uid: &str| uid == "u1";
    assert_eq!(
        holder(&meta("a", "u1"), "a", "hearth", recorded),
        Holder::Ours
    );
    let Holder::Foreign(why) = holder(&meta("a", "u2"), "a", "hearth", recorded) else {
        panic!("labels alone made it ours");
    };
    assert!(why.contains("status.lockJobUID"), "{why}");
    let Holder::Foreign(why) = holder(&meta("other", "u1"), "a", "hearth", recorded) else {
        panic!("another cluster's label made it ours");
    };
    assert!(why.contains("cluster other"), "{why}");
    let Holder::Foreign(why) = holder(&meta("a", "u1"), "a", "elsewhere", recorded) else {
        panic!("another Hearth's sentinel made it ours");
    };
    assert!(why.contains("namespace hearth"), "{why}");
}

#[test]
fn a_refused_sentinel_is_a_bounded_condition_with_the_apiservers_reason() {
    let status = kube::core::Status::failure(
        &format!("metadata.annotations: Too long: {}\nmore", "x".repeat(5000)),
        "Invalid",
    )
    .with_code(422);
    let e = Error::CreateSentinel {
        name: "cluster-lock-a".into(),
        source: kube::Error::Api(status.boxed()),
    };
    let cluster = FournosClusterStatus {
        kueue: Some(KueueStatus::default()),
        ..FournosClusterStatus::default()
    };
    let view = ClusterView {
        name: "a",
        owner: Some("alice"),
        ttl: None,
        deleting: false,
        cordoned: false,
        status: &cluster,
    };
    let plan = plan_lock(&view, &[], None, Timestamp::UNIX_EPOCH);
    let refused = refused(
        &plan,
        Refusal::CreateFailed {
            error: e.to_string(),
        },
    );
    assert!(!refused.locked);
    assert_eq!(refused.lock_owner.as_deref(), Some("alice"));
    let c = refused.condition.expect("a Locked condition");
    assert_eq!(
        c.reason,
        hearth_api::reasons::LockedReason::SentinelCreateFailed
    );
    assert!(
        c.message
            .starts_with("cannot create sentinel cluster-lock-a: metadata.annotations: Too long"),
        "{}",
        c.message
    );
    assert!(!c.message.contains('\n'));
    assert!(c.message.chars().count() <= 1025);
}

fn writer(client: kube::Client) -> Writer<Workload> {
    let (_leader, standby) = tokio::sync::watch::channel(false);
    let config = LockManagerConfig {
        execution_namespace: "psap-automation".into(),
        sentinel: SentinelKind::Workload,
        local_queue_name: "fournos-queue".into(),
        sentinel_priority_class: None,
        lock_concurrency: std::num::NonZeroU16::new(1).unwrap(),
    };
    // Events are silent without the Lease: no requests from them.
    let events = Events::new(client.clone(), LOCK_MANAGER, "test".into(), standby);
    Writer::new(client, "hearth", config, events, LockMetrics::new())
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_790_000_000 + secs).unwrap()
}

/// A cluster locked by alice at `at(0)` with a 1m TTL, at resourceVersion 42, and
/// its admitted sentinel.
fn expiring() -> (FournosCluster, Vec<Arc<DeserializeGuard<Workload>>>) {
    let mut cluster = FournosCluster::new(
        "a",
        FournosClusterSpec {
            kubeconfig_secret: "kubeconfig-a".into(),
            owner: Some("alice".into()),
            ttl: Some("1m".into()),
            ..Default::default()
        },
    );
    cluster.metadata.namespace = Some("hearth".into());
    cluster.metadata.resource_version = Some("42".into());
    cluster.metadata.generation = Some(3);
    cluster.status = Some(FournosClusterStatus {
        kueue: Some(KueueStatus {
            flavor: "a".into(),
            cluster_queue: "fournos-queue".into(),
            cluster_slots: 100,
            ..Default::default()
        }),
        owner_set_at: Some(Time(at(0))),
        lock_owner: Some("alice".into()),
        locked: Some(true),
        ..Default::default()
    });
    let sentinel: DeserializeGuard<Workload> = serde_json::from_value(json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {
            "name": "cluster-lock-a", "namespace": "psap-automation", "uid": "u-1",
            "labels": {
                "fournos.dev/cluster-lock": "a",
                "app.kubernetes.io/managed-by": "hearth",
                "fournos.dev/cluster-namespace": "hearth",
            },
            "annotations": { "fournos.dev/owner": "alice" },
        },
        "spec": { "podSets": [{ "name": "lock", "count": 1, "template": { "spec": {
            "nodeSelector": { "fournos.dev/cluster": "a" },
            "containers": [{ "name": "lock", "resources": {
                "requests": { "fournos/cluster-slot": "100" } } }],
        } } }] },
        "status": {
            "conditions": [
                { "type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
                  "lastTransitionTime": "2026-09-21T14:13:20Z" },
                { "type": "PodsReady", "status": "True", "reason": "Started", "message": "",
                  "lastTransitionTime": "2026-09-21T14:13:20Z" },
            ],
            "admission": { "clusterQueue": "fournos-queue", "podSetAssignments": [
                { "name": "lock", "flavors": { "fournos/cluster-slot": "a" }, "count": 1 },
            ] },
        },
    }))
    .unwrap();
    (cluster, vec![Arc::new(sentinel)])
}

fn plan_for(
    cluster: &FournosCluster,
    sentinels: &[Arc<DeserializeGuard<Workload>>],
    now: Timestamp,
) -> LockPlan {
    let status = cluster.status.clone().unwrap();
    let views: Vec<_> = sentinels
        .iter()
        .map(|s| crate::sentinel::observe(s.as_ref(), &crate::views::Expect::of(&status), |_| true))
        .collect();
    assert_eq!(views[0].state, SentinelState::Holding);
    plan_lock(
        &ClusterView {
            name: "a",
            owner: cluster.spec.owner.as_deref(),
            ttl: cluster.spec.ttl.as_deref(),
            deleting: false,
            cordoned: false,
            status: &status,
        },
        &views,
        None,
        now,
    )
}

fn conflict() -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict",
        "message": "the object has been modified", "code": 409,
    })
}

fn status_ok() -> Value {
    json!({ "kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200 })
}

#[tokio::test]
async fn expiry_clears_the_owner_guarded_then_deletes_then_reports() {
    let (cluster, sentinels) = expiring();
    let plan = plan_for(&cluster, &sentinels, at(60));
    let cluster_json = serde_json::to_value(&cluster).unwrap();
    // The cluster as the clear wrote it: a new version and generation.
    let mut cleared = cluster_json.clone();
    cleared["metadata"]["resourceVersion"] = json!("43");
    cleared["metadata"]["generation"] = json!(4);
    cleared["spec"]["owner"] = Value::Null;
    let (client, seen) = scripted(vec![
        (200, cleared),
        (200, status_ok()),
        (200, cluster_json),
    ]);
    let w = writer(client);
    let applied = apply_plan(&w, &cluster, &sentinels, &plan, at(60))
        .await
        .unwrap();
    assert_eq!(applied, Applied::Done);

    let seen = seen.all();
    assert_eq!(seen.len(), 3, "{seen:#?}");
    assert_eq!(seen[0].method, "PATCH");
    assert_eq!(
        seen[0].uri,
        "/apis/fournos.dev/v1/namespaces/hearth/fournosclusters/a?&fieldManager=hearth-lock-manager"
    );
    assert_eq!(seen[0].content_type, "application/merge-patch+json");
    assert_eq!(
        seen[0].body,
        json!({ "metadata": { "resourceVersion": "42" }, "spec": { "owner": null } })
    );

    assert_eq!(seen[1].method, "DELETE");
    assert_eq!(
        seen[1].uri,
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/psap-automation/workloads/cluster-lock-a?"
    );
    assert_eq!(seen[1].body["preconditions"], json!({ "uid": "u-1" }));

    assert_eq!(seen[2].method, "PATCH");
    assert_eq!(
        seen[2].uri,
        "/apis/fournos.dev/v1/namespaces/hearth/fournosclusters/a/status?&force=true&fieldManager=hearth-lock-manager"
    );
    assert_eq!(seen[2].content_type, "application/apply-patch+yaml");
    let condition = &seen[2].body["status"]["conditions"][0];
    assert_eq!(condition["reason"], "Expired");
    assert_eq!(condition["status"], "False");
    assert_eq!(
        condition["observedGeneration"], 4,
        "the spec the clear made is the one observed"
    );
    assert_eq!(
        seen[2].body["metadata"]["resourceVersion"], "43",
        "applied to the cluster the clear wrote, not over it"
    );
    assert_eq!(seen[2].body["status"]["locked"], false);
    assert_eq!(w.metrics.expired.get(), 1);
}

#[tokio::test]
async fn a_conflicting_clear_leaves_the_lock_alone() {
    // A person changed the cluster at that instant (re-locked, moved the TTL).
    let (cluster, sentinels) = expiring();
    let plan = plan_for(&cluster, &sentinels, at(61));
    let (client, seen) = scripted(vec![(409, conflict())]);
    let w = writer(client);
    let applied = apply_plan(&w, &cluster, &sentinels, &plan, at(61))
        .await
        .unwrap();
    assert_eq!(applied, Applied::Conflict);
    let seen = seen.all();
    assert_eq!(
        seen.len(),
        1,
        "no delete, no status after a conflict: {seen:#?}"
    );
    assert_eq!(w.metrics.expired.get(), 0);
}

/// The loss is counted with its Event, before any write: a status write that fails
/// afterwards (and a next round that no longer sees the loss) cannot lose the count.
#[tokio::test]
async fn a_lost_workload_is_counted_with_its_event_even_when_the_status_write_fails() {
    let (mut cluster, sentinels) = expiring();
    cluster.spec.ttl = None;
    let mut plan = plan_for(&cluster, &sentinels, at(30));
    // The state a fournosjob lock enters when Fournos's Workload is gone, with the
    // Event its plan carries: the count follows the state, not the Event's words.
    plan.state = LockState::WorkloadLost {
        lock: plan.state.lock().cloned().expect("alice's lock"),
        sentinel: crate::state::Kept {
            name: "cluster-lock-a".into(),
            uid: None,
        },
        phase: Some("Admitted".into()),
        lost: crate::state::Lost::NoWorkload,
    };
    plan.events.push(Event::warning(
        crate::plan::WORKLOAD_LOST_EVENT,
        crate::plan::ACTION,
        "its Workload is gone",
    ));
    let failure = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "etcdserver: request timed out", "code": 500,
    });
    let (client, seen) = scripted(vec![(500, failure)]);
    let w = writer(client);
    let applied = apply_plan(&w, &cluster, &sentinels, &plan, at(30)).await;
    assert!(applied.is_err(), "{applied:?}");
    assert_eq!(seen.all().len(), 1, "the status write, refused");
    assert_eq!(w.metrics.workloads_lost.get(), 1);
}

/// The restart flake of `lock_manager::restart_loses_and_duplicates_nothing`: a plan
/// made from a cache that does not show the status just written stamps the lock's
/// start anew; applied at the version read, it would put the older plan over the
/// newer one. It is dropped after the conflict, and the change's reconcile plans again.
#[tokio::test]
async fn a_status_planned_behind_the_last_write_is_not_applied_over_it() {
    let (mut cluster, sentinels) = expiring();
    cluster.spec.ttl = None;
    let mut live = serde_json::to_value(&cluster).unwrap();
    live["metadata"]["resourceVersion"] = json!("43");
    // The cache shows the cluster before the write that recorded alice's lock.
    let status = cluster.status.as_mut().unwrap();
    status.owner_set_at = None;
    status.lock_owner = None;
    let plan = plan_for(&cluster, &sentinels, at(31));
    assert_eq!(plan.status.owner_set_at, Some(at(31)), "stamped anew");
    let (client, seen) = scripted(vec![(409, conflict()), (200, live)]);
    let w = writer(client);
    let applied = apply_plan(&w, &cluster, &sentinels, &plan, at(31))
        .await
        .unwrap();
    assert_eq!(applied, Applied::Done);
    let seen = seen.all();
    let methods: Vec<&str> = seen.iter().map(|s| s.method.as_str()).collect();
    assert_eq!(methods, ["PATCH", "GET"], "not applied again: {seen:#?}");
    assert_eq!(seen[0].body["metadata"]["resourceVersion"], "42");
}

#[tokio::test]
async fn nothing_is_written_when_nothing_changed() {
    let (mut cluster, sentinels) = expiring();
    cluster.spec.ttl = None;
    let plan = plan_for(&cluster, &sentinels, at(30));
    // Make the stored status what the plan wants.
    let patch = crate::status::status_patch(
        &cluster.status.clone().unwrap(),
        Some(3),
        &plan.status,
        at(30),
    )
    .unwrap();
    let mut status: FournosClusterStatus = serde_json::from_value(patch).unwrap();
    status.kueue = cluster.status.as_ref().unwrap().kueue.clone();
    cluster.status = Some(status);
    let (client, seen) = scripted(vec![]);
    let applied = apply_plan(&writer(client), &cluster, &sentinels, &plan, at(31))
        .await
        .unwrap();
    assert_eq!(applied, Applied::Done);
    assert!(seen.all().is_empty());
}
