//! The resourceVersion guard of [`apply_status`] and what it does with a refusal, against
//! a scripted apiserver (`e2e/tests/status_uid.rs` shows what the real one answers).

use hearth_api::{FournosCluster, FournosClusterSpec};
use serde_json::{Value, json};

use super::*;
use crate::testing::{Recorded, scripted};

/// A scripted apiserver answering `answers` (status code, body) in order.
fn fake(answers: Vec<(u16, Value)>) -> (Api<FournosCluster>, Recorded) {
    let (client, seen) = scripted(answers);
    (Api::namespaced(client, "hearth"), seen)
}

fn stored(uid: &str, version: &str) -> Value {
    json!({"apiVersion": "fournos.dev/v1", "kind": "FournosCluster",
           "metadata": {"name": "a", "namespace": "hearth", "uid": uid, "resourceVersion": version},
           "spec": {"kubeconfigSecret": "s"}})
}

fn refused(code: u16, reason: &str) -> Value {
    crate::testing::refusal(code, reason, &format!("{reason} (scripted)"))
}

/// The cluster as a cache saw it: uid `old`, version 7.
fn planned() -> FournosCluster {
    let mut cluster = FournosCluster::new("a", FournosClusterSpec::default());
    cluster.metadata.namespace = Some("hearth".into());
    cluster.metadata.uid = Some("old".into());
    cluster.metadata.resource_version = Some("7".into());
    cluster
}

/// The requests of a write refused with a conflict and the read that follows it.
fn conflict_then_read() -> [(String, Value); 2] {
    [("PATCH".into(), json!("7")), ("GET".into(), Value::Null)]
}

fn versions(seen: &Recorded) -> Vec<(String, Value)> {
    seen.all()
        .into_iter()
        .map(|s| (s.method, s.body["metadata"]["resourceVersion"].clone()))
        .collect()
}

#[test]
fn the_apply_body_carries_the_planned_version_and_only_the_status() {
    let status = json!({"gpuSummary": "8x A100"});
    assert_eq!(
        apply_body::<FournosCluster>(&status, Some("7")),
        json!({"apiVersion": "fournos.dev/v1", "kind": "FournosCluster",
               "metadata": {"resourceVersion": "7"}, "status": {"gpuSummary": "8x A100"}})
    );
    assert_eq!(
        apply_body::<FournosCluster>(&status, None),
        json!({"apiVersion": "fournos.dev/v1", "kind": "FournosCluster",
               "status": {"gpuSummary": "8x A100"}}),
        "nothing to guard with: an unguarded apply, as before"
    );
}

#[test]
fn only_another_uid_is_a_replacement() {
    let live: FournosCluster = serde_json::from_value(stored("new", "9")).unwrap();
    assert_eq!(replacement(Some("old"), &live), Some("new"));
    assert_eq!(replacement(Some("new"), &live), None);
    assert_eq!(
        replacement(None, &live),
        None,
        "an unknown plan is not judged"
    );
}

/// What [`apply_status`] of [`planned`] comes to when its first apply is refused as a
/// conflict and the apiserver then answers `then`; and the requests it sent.
async fn after_a_conflict(
    then: Vec<(u16, Value)>,
) -> (
    Result<Option<FournosCluster>, kube::Error>,
    Vec<(String, Value)>,
) {
    let mut answers = vec![(409, refused(409, "Conflict"))];
    answers.extend(then);
    let (api, seen) = fake(answers);
    let written = apply_status(&api, &planned(), "t", json!({"gpuSummary": "x"})).await;
    (written, versions(&seen))
}

#[tokio::test]
async fn a_write_planned_for_a_replaced_object_is_dropped_after_one_read() {
    let (written, sent) = after_a_conflict(vec![(200, stored("new", "9"))]).await;
    assert!(matches!(written, Ok(None)), "{written:?}");
    assert_eq!(
        sent,
        conflict_then_read(),
        "no write after the successor was seen"
    );
}

#[tokio::test]
async fn a_write_to_the_same_object_is_applied_again_at_the_version_read() {
    let then = vec![(200, stored("old", "9")), (200, stored("old", "10"))];
    let (written, sent) = after_a_conflict(then).await;
    let version = written.unwrap().and_then(|c| c.metadata.resource_version);
    assert_eq!(version.as_deref(), Some("10"));
    assert_eq!(sent[..2], conflict_then_read());
    assert_eq!(sent[2], ("PATCH".into(), json!("9")));
}

/// A plan that rests on the stored version's `gpuSummary`: after a conflict, applied again
/// only if the object read still has it; and the requests it sent.
async fn resting_on_the_summary(
    read: Value,
) -> (
    Result<Option<FournosCluster>, kube::Error>,
    Vec<(String, Value)>,
) {
    let (api, seen) = fake(vec![
        (409, refused(409, "Conflict")),
        (200, read),
        (200, stored("old", "10")),
    ]);
    let summary = |c: &FournosCluster| c.status.as_ref().and_then(|s| s.gpu_summary.clone());
    let planned_from = summary(&planned());
    let written = apply_status_resting_on(&api, &planned(), "t", json!({}), |live| {
        summary(live) == planned_from
    })
    .await;
    (written, versions(&seen))
}

#[tokio::test]
async fn a_plan_whose_basis_changed_is_not_applied_again() {
    let mut read = stored("old", "9");
    read["status"] = json!({"gpuSummary": "written by a newer plan"});
    let (written, sent) = resting_on_the_summary(read).await;
    assert!(matches!(written, Ok(None)), "{written:?}");
    assert_eq!(
        sent,
        conflict_then_read(),
        "the stale plan is dropped after the read"
    );
}

#[tokio::test]
async fn a_plan_whose_basis_is_unchanged_is_applied_again() {
    let mut read = stored("old", "9");
    read["status"] =
        json!({"kueue": {"flavor": "f", "clusterQueue": "q", "quotas": {}, "clusterSlots": 1}});
    let (written, sent) = resting_on_the_summary(read).await;
    assert!(matches!(written, Ok(Some(_))), "{written:?}");
    assert_eq!(
        sent[2],
        ("PATCH".into(), json!("9")),
        "another writer's field changed only"
    );
}

#[tokio::test]
async fn a_deleted_object_is_gone_not_an_error() {
    let (api, _) = fake(vec![(404, refused(404, "NotFound"))]);
    let written = apply_status(&api, &planned(), "t", json!({})).await;
    assert!(matches!(written, Ok(None)), "{written:?}");
    let (written, _) = after_a_conflict(vec![(404, refused(404, "NotFound"))]).await;
    assert!(matches!(written, Ok(None)), "{written:?}");
}

#[tokio::test]
async fn conflicts_on_every_attempt_are_the_callers() {
    let mut answers = Vec::new();
    for n in 0..ATTEMPTS {
        answers.push((409, refused(409, "Conflict")));
        if n + 1 < ATTEMPTS {
            answers.push((200, stored("old", &format!("{}", 8 + n))));
        }
    }
    let (api, seen) = fake(answers);
    let written = apply_status(&api, &planned(), "t", json!({})).await;
    assert!(
        matches!(&written, Err(kube::Error::Api(s)) if s.code == 409),
        "{written:?}"
    );
    let patches = versions(&seen).iter().filter(|(m, _)| m == "PATCH").count();
    assert_eq!(patches, ATTEMPTS);
}
