//! Carrying out a [`LockPlan`]: the only place lock-manager writes.
//!
//! Order matters:
//! 1. `ClearOwner` first, guarded by the `resourceVersion` the plan was made from: if a
//!    person changed the cluster meanwhile (re-locked, moved the TTL) the write fails
//!    with 409 and nothing else happens; the next reconcile plans from their change.
//! 2. Deletes, preconditioned on the observed `uid` (a stale cache never deletes a
//!    newer sentinel of the same name).
//! 3. Creates (an `AlreadyExists` is a cache that has not caught up yet).
//! 4. Upkeep of the kept sentinels (a `workload` sentinel's `PodsReady`).
//! 5. Status, by server-side apply of lock-manager's fields, only when it changed;
//!    then the Events and metrics of that change.

use std::sync::Arc;

use hearth_api::FournosCluster;
use hearth_api::conditions::DesiredCondition;
use hearth_api::names::condition_types::LOCKED;
use hearth_api::names::controllers::LOCK_MANAGER;
use hearth_runtime::events::{Event, Events};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::core::{ApiResource, DeserializeGuard, GroupVersionKind};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::config::LockManagerConfig;
use crate::error::{Error, is_status};
use crate::metrics::LockMetrics;
use crate::plan::{LockAction, LockEvent, LockPlan, LockStatus, reasons};
use crate::sentinel::{Priority, Sentinel, SentinelSpec};
use crate::status::{became_held, status_patch, transition_events};

/// What became of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Done,
    /// The cluster changed under the plan (409 on the guarded write): plan again.
    Conflict,
}

/// What the apply step writes with.
pub struct Writer<K: Sentinel> {
    pub client: kube::Client,
    pub config: LockManagerConfig,
    pub clusters: Api<FournosCluster>,
    /// Deletes (an undecodable sentinel can still be deleted).
    pub sentinels: Api<DeserializeGuard<K>>,
    /// Creates and status writes.
    pub sentinel_writes: Api<K>,
    pub events: Events,
    pub metrics: LockMetrics,
}

impl<K: Sentinel> Writer<K> {
    /// FournosClusters in `cluster_namespace`, sentinels in the execution namespace.
    pub fn new(
        client: kube::Client,
        cluster_namespace: &str,
        config: LockManagerConfig,
        events: Events,
        metrics: LockMetrics,
    ) -> Self {
        Self {
            clusters: Api::namespaced(client.clone(), cluster_namespace),
            sentinels: Api::namespaced(client.clone(), &config.execution_namespace),
            sentinel_writes: Api::namespaced(client.clone(), &config.execution_namespace),
            client,
            config,
            events,
            metrics,
        }
    }
}

pub async fn apply_plan<K: Sentinel>(
    ctx: &Writer<K>,
    cluster: &FournosCluster,
    observed: &[Arc<DeserializeGuard<K>>],
    plan: &LockPlan,
    now: Timestamp,
) -> Result<Applied, Error> {
    let regarding = cluster.object_ref(&());

    if let Some(owner) = plan.actions.iter().find_map(|a| match a {
        LockAction::ClearOwner { owner } => Some(owner),
        _ => None,
    }) {
        match clear_owner(&ctx.clusters, cluster).await {
            Ok(()) => {
                ctx.metrics.wrote("owner_clear");
                tracing::info!(%owner, "lock expired; spec.owner cleared");
                ctx.metrics.expired.inc();
            }
            Err(e) if is_status(&e, 409) => {
                tracing::info!(%owner, "the cluster changed while its lock expired; planning again");
                return Ok(Applied::Conflict);
            }
            Err(e) if is_status(&e, 404) => return Ok(Applied::Done),
            Err(e) => return Err(Error::ClearOwner(e)),
        }
    }
    for event in &plan.events {
        publish(ctx, &regarding, event).await;
    }

    let mut deleted = Vec::new();
    for action in &plan.actions {
        if let LockAction::DeleteSentinel { name } = action {
            let uid = observed
                .iter()
                .find(|s| s.name_any() == *name)
                .and_then(|s| s.uid());
            delete_sentinel(ctx, name, uid).await?;
            deleted.push(name.as_str());
        }
    }

    for action in &plan.actions {
        if let LockAction::CreateSentinel { name, owner } = action
            && let Err(e) = create_sentinel(ctx, cluster, &regarding, name, owner).await
        {
            // Said where people look (the Locked condition), not only in an Event.
            let mut status = plan.status.clone();
            status.locked = false;
            status.condition = Some(create_failed(&e));
            write_status(ctx, cluster, &regarding, &status, now).await?;
            return Err(e);
        }
    }

    for sentinel in observed
        .iter()
        .filter(|s| !deleted.contains(&s.name_any().as_str()))
    {
        if let Ok(s) = &sentinel.0
            && s.meta().deletion_timestamp.is_none()
            && let Some(status) = s.upkeep(now)
        {
            upkeep(ctx, &s.name_any(), status).await?;
        }
    }

    write_status(ctx, cluster, &regarding, &plan.status, now).await?;
    Ok(Applied::Done)
}

/// Applies `status` when it differs from the cluster's, then the metrics and Events of
/// that change. A cluster deleted meanwhile has nothing left to report on.
async fn write_status<K: Sentinel>(
    ctx: &Writer<K>,
    cluster: &FournosCluster,
    regarding: &ObjectReference,
    status: &LockStatus,
    now: Timestamp,
) -> Result<(), Error> {
    let current = cluster.status.clone().unwrap_or_default();
    let Some(patch) = status_patch(&current, cluster.metadata.generation, status, now) else {
        return Ok(());
    };
    match hearth_runtime::status::apply_status(&ctx.clusters, cluster, LOCK_MANAGER, patch).await {
        Ok(_) => ctx.metrics.wrote("status"),
        Err(e) if is_status(&e, 404) => return Ok(()),
        Err(e) => return Err(Error::Status(e)),
    }
    if became_held(&current, status)
        && let Some(since) = status.owner_set_at
    {
        let waited = now.duration_since(since).as_secs_f64().max(0.0);
        ctx.metrics.acquisition.observe(waited);
    }
    for event in transition_events(&current, status) {
        publish(ctx, regarding, &event).await;
    }
    Ok(())
}

/// Longest message of a `SentinelCreateFailed` condition.
const MAX_CREATE_FAILED_CHARS: usize = 1024;

/// `Locked=False, SentinelCreateFailed` with the apiserver's reason, bounded.
fn create_failed(error: &Error) -> DesiredCondition {
    let mut message: String = format!(
        "{error}. The lock is not held; Hearth tries again with backoff (a 422 means the \
         sentinel is invalid: check spec.owner)."
    )
    .chars()
    .map(|c| if c.is_control() { ' ' } else { c })
    .collect();
    if let Some((cut, _)) = message.char_indices().nth(MAX_CREATE_FAILED_CHARS) {
        message.truncate(cut);
        message.push('…');
    }
    DesiredCondition::new(LOCKED, false, reasons::SENTINEL_CREATE_FAILED, message)
}

/// `spec.owner = null`, only if the cluster is still at the observed resourceVersion.
async fn clear_owner(
    api: &Api<FournosCluster>,
    cluster: &FournosCluster,
) -> Result<(), kube::Error> {
    let patch = json!({
        "metadata": { "resourceVersion": cluster.resource_version() },
        "spec": { "owner": null },
    });
    let params = PatchParams {
        field_manager: Some(LOCK_MANAGER.into()),
        ..PatchParams::default()
    };
    api.patch(&cluster.name_any(), &params, &Patch::Merge(&patch))
        .await
        .map(drop)
}

async fn delete_sentinel<K: Sentinel>(
    ctx: &Writer<K>,
    name: &str,
    uid: Option<String>,
) -> Result<(), Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match ctx.sentinels.delete(name, &params).await {
        Ok(_) => {
            ctx.metrics.wrote("sentinel_delete");
            tracing::info!(sentinel = name, "sentinel deleted");
            Ok(())
        }
        Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(()),
        Err(source) => Err(Error::DeleteSentinel {
            name: name.to_owned(),
            source,
        }),
    }
}

async fn create_sentinel<K: Sentinel>(
    ctx: &Writer<K>,
    cluster: &FournosCluster,
    regarding: &ObjectReference,
    name: &str,
    owner: &str,
) -> Result<(), Error> {
    let priority = match (&ctx.config.sentinel_priority_class, K::USES_PRIORITY_CLASS) {
        (Some(class), true) => Some(priority(ctx, class).await?),
        _ => None,
    };
    let status = cluster.status.clone().unwrap_or_default();
    let slots = status.kueue.as_ref().map_or(0, |k| k.cluster_slots);
    let cluster_name = cluster.name_any();
    let sentinel = K::build(&SentinelSpec {
        name,
        namespace: &ctx.config.execution_namespace,
        cluster: &cluster_name,
        owner,
        slots,
        local_queue: &ctx.config.local_queue_name,
        priority: priority.as_ref(),
    });
    let params = PostParams {
        field_manager: Some(LOCK_MANAGER.into()),
        ..PostParams::default()
    };
    match ctx.sentinel_writes.create(&params, &sentinel).await {
        Ok(_) => ctx.metrics.wrote("sentinel_create"),
        Err(e) if is_status(&e, 409) => return Ok(()),
        Err(source) => {
            return Err(Error::CreateSentinel {
                name: name.to_owned(),
                source,
            });
        }
    }
    // Someone deleted the sentinel of a lock that is still wanted.
    let recreated = status.lock_job_name.is_some() && status.lock_owner.as_deref() == Some(owner);
    let (reason, note) = if recreated {
        (
            "SentinelRecreated",
            format!(
                "Sentinel {name} for {owner} was gone while the lock is wanted; created it again."
            ),
        )
    } else {
        (
            "SentinelCreated",
            format!("Created sentinel {name} for {owner}; waiting for Kueue to admit it."),
        )
    };
    tracing::info!(sentinel = name, %owner, reason, "sentinel created");
    ctx.events
        .publish(regarding, &Event::normal(reason, "CreateSentinel", note))
        .await;
    Ok(())
}

/// The value of a WorkloadPriorityClass, read when a sentinel is created (not in steady
/// state): Kueue v1beta2 wants both `priorityClassRef` and `priority` on a Workload,
/// and for a bare Workload nobody else fills in the number.
async fn priority<K: Sentinel>(ctx: &Writer<K>, class: &str) -> Result<Priority, Error> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            hearth_api::kueue::KUEUE_GROUP,
            hearth_api::kueue::KUEUE_VERSION,
            "WorkloadPriorityClass",
        ),
        "workloadpriorityclasses",
    );
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
    let object = api
        .get(class)
        .await
        .map_err(|source| Error::PriorityClass {
            class: class.to_owned(),
            source,
        })?;
    let value = object.data.get("value").and_then(serde_json::Value::as_i64);
    let value = value
        .and_then(|v| i32::try_from(v).ok())
        .ok_or_else(|| Error::PriorityValue {
            class: class.to_owned(),
            message: format!("value is {value:?}, not a 32-bit integer"),
        })?;
    Ok(Priority {
        class: class.to_owned(),
        value,
    })
}

async fn upkeep<K: Sentinel>(
    ctx: &Writer<K>,
    name: &str,
    status: serde_json::Value,
) -> Result<(), Error> {
    upkeep_with(&ctx.sentinel_writes, &ctx.metrics, name, status).await
}

/// Applies an upkeep status patch to `name` through `api` (a sentinel, or the Workload
/// Fournos made for a FournosJob sentinel).
pub async fn upkeep_with<R>(
    api: &Api<R>,
    metrics: &LockMetrics,
    name: &str,
    status: serde_json::Value,
) -> Result<(), Error>
where
    R: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({
        "apiVersion": R::api_version(&()),
        "kind": R::kind(&()),
        "status": status,
    });
    let params = PatchParams::apply(LOCK_MANAGER).force();
    match api.patch_status(name, &params, &Patch::Apply(&patch)).await {
        Ok(_) => {
            metrics.wrote("sentinel_upkeep");
            tracing::info!(sentinel = name, "sentinel marked PodsReady for Kueue");
            Ok(())
        }
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(source) => Err(Error::SentinelUpkeep {
            name: name.to_owned(),
            source,
        }),
    }
}

async fn publish<K: Sentinel>(ctx: &Writer<K>, regarding: &ObjectReference, event: &LockEvent) {
    let event = Event {
        warning: event.warning,
        reason: event.reason,
        action: "Lock",
        note: event.message.clone(),
    };
    ctx.events.publish(regarding, &event).await;
}

/// The requests that matter, exactly: the guarded owner clear comes first and a 409
/// stops everything else.
#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use super::*;

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
        let c = create_failed(&e);
        assert_eq!(c.reason, reasons::SENTINEL_CREATE_FAILED);
        assert_eq!(c.status, hearth_api::conditions::Status::False);
        assert!(
            c.message.starts_with(
                "cannot create sentinel cluster-lock-a: metadata.annotations: Too long"
            ),
            "{}",
            c.message
        );
        assert!(!c.message.contains('\n'));
        assert!(c.message.chars().count() <= MAX_CREATE_FAILED_CHARS + 1);
    }
    use crate::config::SentinelKind;
    use crate::plan::{ClusterView, SentinelState, plan_lock};
    use hearth_api::kueue::Workload;
    use hearth_api::{FournosClusterSpec, FournosClusterStatus, KueueStatus};
    use http_body_util::BodyExt;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use pretty_assertions::assert_eq;
    use serde_json::Value;

    #[derive(Debug)]
    struct Seen {
        method: String,
        uri: String,
        content_type: String,
        body: Value,
    }

    /// A client whose apiserver answers `answers` in order and records every request.
    fn fake_client(answers: Vec<(u16, Value)>) -> (kube::Client, Arc<Mutex<Vec<Seen>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(Mutex::new(VecDeque::from(answers)));
        let record = seen.clone();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let record = record.clone();
            let answers = answers.clone();
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect().await?.to_bytes();
                record.lock().unwrap().push(Seen {
                    method: parts.method.to_string(),
                    uri: parts.uri.to_string(),
                    content_type: parts
                        .headers
                        .get(http::header::CONTENT_TYPE)
                        .map(|v| v.to_str().unwrap().to_owned())
                        .unwrap_or_default(),
                    body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                });
                let (code, answer) = answers
                    .lock()
                    .unwrap()
                    .pop_front()
                    .expect("no more requests expected");
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
                    http::Response::builder()
                        .status(code)
                        .body(kube::client::Body::from(serde_json::to_vec(&answer)?))?,
                )
            }
        });
        (kube::Client::new(service, "hearth"), seen)
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
                "labels": { "fournos.dev/cluster-lock": "a" },
                "annotations": { "fournos.dev/owner": "alice" },
            },
            "spec": { "podSets": [] },
            "status": { "conditions": [
                { "type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
                  "lastTransitionTime": "2026-09-21T14:13:20Z" },
                { "type": "PodsReady", "status": "True", "reason": "Started", "message": "",
                  "lastTransitionTime": "2026-09-21T14:13:20Z" },
            ]},
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
            .map(|s| crate::sentinel::observe(s.as_ref()))
            .collect();
        assert_eq!(views[0].state, SentinelState::Holding);
        plan_lock(
            &ClusterView {
                name: "a",
                owner: cluster.spec.owner.as_deref(),
                ttl: cluster.spec.ttl.as_deref(),
                deleting: false,
                status: &status,
            },
            &views,
            now,
        )
    }

    fn status_ok() -> Value {
        json!({ "kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200 })
    }

    #[tokio::test]
    async fn expiry_clears_the_owner_guarded_then_deletes_then_reports() {
        let (cluster, sentinels) = expiring();
        let plan = plan_for(&cluster, &sentinels, at(60));
        let cluster_json = serde_json::to_value(&cluster).unwrap();
        let (client, seen) = fake_client(vec![
            (200, cluster_json.clone()),
            (200, status_ok()),
            (200, cluster_json),
        ]);
        let w = writer(client);
        let applied = apply_plan(&w, &cluster, &sentinels, &plan, at(60))
            .await
            .unwrap();
        assert_eq!(applied, Applied::Done);

        let seen = seen.lock().unwrap();
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
        assert_eq!(condition["observedGeneration"], 3);
        assert_eq!(seen[2].body["status"]["locked"], false);
        assert_eq!(w.metrics.expired.get(), 1);
    }

    #[tokio::test]
    async fn a_conflicting_clear_leaves_the_lock_alone() {
        // A person changed the cluster at that instant (re-locked, moved the TTL).
        let (cluster, sentinels) = expiring();
        let plan = plan_for(&cluster, &sentinels, at(61));
        let conflict = json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict",
            "message": "the object has been modified", "code": 409,
        });
        let (client, seen) = fake_client(vec![(409, conflict)]);
        let w = writer(client);
        let applied = apply_plan(&w, &cluster, &sentinels, &plan, at(61))
            .await
            .unwrap();
        assert_eq!(applied, Applied::Conflict);
        let seen = seen.lock().unwrap();
        assert_eq!(
            seen.len(),
            1,
            "no delete, no status after a conflict: {seen:#?}"
        );
        assert_eq!(w.metrics.expired.get(), 0);
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
        let (client, seen) = fake_client(vec![]);
        let applied = apply_plan(&writer(client), &cluster, &sentinels, &plan, at(31))
            .await
            .unwrap();
        assert_eq!(applied, Applied::Done);
        assert!(seen.lock().unwrap().is_empty());
    }
}
