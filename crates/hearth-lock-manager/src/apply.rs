//! Carrying out a [`LockPlan`]: the only place lock-manager writes.
//!
//! Order matters:
//! 1. `ClearOwner` first, guarded by the `resourceVersion` the plan was made from: if a
//!    person changed the cluster meanwhile (re-locked, moved the TTL) the write fails
//!    with 409 and nothing else happens; the next reconcile plans from their change.
//! 2. Deletes, preconditioned on the observed `uid` (a stale cache never deletes a
//!    newer sentinel of the same name).
//! 3. Creates. The new sentinel's UID goes to status (`lockJobUID`): only that object
//!    can hold the lock. An `AlreadyExists` is either this Hearth's sentinel that the
//!    cache has not shown yet, or an object someone else made under the name: the name's
//!    labels tell, and the second is `SentinelNameTaken`, naming the object.
//! 4. Upkeep of the kept sentinels (a `workload` sentinel's `PodsReady`).
//! 5. Status, by server-side apply of lock-manager's fields, only when it changed;
//!    then the Events and metrics of that change.

use std::sync::Arc;

use hearth_api::names::controllers::LOCK_MANAGER;
use hearth_api::names::{
    CLUSTER_LOCK_LABEL, CLUSTER_NAMESPACE_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE,
    has_sentinel_labels, sentinel_labels,
};
use hearth_api::{FournosCluster, KueueStatus, LockManagerStatus};
use hearth_runtime::events::Event;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::core::{ApiResource, DeserializeGuard, GroupVersionKind};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::error::Error;
use crate::metrics::LockMetrics;
use crate::plan::{LockAction, LockPlan, LockStatus};
use crate::sentinel::{Priority, Sentinel, SentinelSpec, is_legacy};
use crate::state::{LockState, Refusal, Taken};
use crate::status::{became_held, status_patch, transition_events};
use crate::writer::Writer;
use hearth_runtime::kit::answer::{is_conflict, is_gone_or_replaced, is_not_found};

/// What became of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Done,
    /// Done, and the sentinel's name is taken by an object lock-manager does not watch:
    /// nothing will say when it is gone, so look again (with backoff).
    NameTaken,
    /// The cluster changed under the plan (409 on the guarded write): plan again.
    Conflict,
}

/// Carries out `plan` in the order the module docs give.
pub async fn apply_plan<K: Sentinel>(
    ctx: &Writer<K>,
    cluster: &FournosCluster,
    observed: &[Arc<DeserializeGuard<K>>],
    plan: &LockPlan,
    now: Timestamp,
) -> Result<Applied, Error> {
    let regarding = cluster.object_ref(&());
    // After its own spec write, the status is applied to the cluster that write made:
    // the cluster planned from is a version the apiserver has moved past.
    let cleared = match expire(ctx, cluster, plan).await? {
        Expiry::NotDue => None,
        Expiry::Cleared(cleared) => Some(cleared),
        Expiry::Stop(stop) => return Ok(stop),
    };
    let cluster = cleared.as_deref().unwrap_or(cluster);
    // A loss is counted from the state, with its Event and before it: the two report one
    // loss, so whoever sees the Event sees the count, and a write that fails after it
    // loses neither.
    if matches!(plan.state, LockState::WorkloadLost { .. }) {
        ctx.metrics.workloads_lost.inc();
    }
    for event in &plan.events {
        publish(ctx, &regarding, event).await;
    }
    let deleted = delete_planned(ctx, observed, plan).await?;
    let (status, taken) = create_planned((ctx, cluster), plan, now).await?;
    for sentinel in observed
        .iter()
        .filter(|s| !deleted.contains(&s.name_any().as_str()))
    {
        if let Ok(s) = &sentinel.0
            && s.meta().deletion_timestamp.is_none()
            && let Some(status) = s.upkeep(now)
        {
            upkeep(ctx, s, status).await?;
        }
    }
    write_status(ctx, cluster, &regarding, &status, now).await?;
    Ok(if taken {
        Applied::NameTaken
    } else {
        Applied::Done
    })
}

/// What step 1 came to.
enum Expiry {
    /// The plan clears no owner.
    NotDue,
    /// `spec.owner` cleared: the cluster as written.
    Cleared(Box<FournosCluster>),
    /// What to answer instead of going on: the cluster changed or is gone.
    Stop(Applied),
}

/// Step 1: the plan's `ClearOwner`, if it has one.
async fn expire<K: Sentinel>(
    ctx: &Writer<K>,
    cluster: &FournosCluster,
    plan: &LockPlan,
) -> Result<Expiry, Error> {
    let Some(owner) = plan.actions.iter().find_map(|a| match a {
        LockAction::ClearOwner { owner } => Some(owner),
        _ => None,
    }) else {
        return Ok(Expiry::NotDue);
    };
    match clear_owner(&ctx.clusters, cluster).await {
        Ok(cleared) => {
            ctx.metrics.wrote("owner_clear");
            tracing::info!(%owner, "lock expired; spec.owner cleared");
            ctx.metrics.expired.inc();
            Ok(Expiry::Cleared(Box::new(cleared)))
        }
        Err(e) if is_conflict(&e) => {
            tracing::info!(%owner, "the cluster changed while its lock expired; planning again");
            Ok(Expiry::Stop(Applied::Conflict))
        }
        Err(e) if is_not_found(&e) => Ok(Expiry::Stop(Applied::Done)),
        Err(e) => Err(Error::ClearOwner(e)),
    }
}

/// Step 2: the plan's deletes, each preconditioned on the observed UID. The names
/// deleted.
async fn delete_planned<'p, K: Sentinel>(
    ctx: &Writer<K>,
    observed: &[Arc<DeserializeGuard<K>>],
    plan: &'p LockPlan,
) -> Result<Vec<&'p str>, Error> {
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
    Ok(deleted)
}

/// Step 3: the plan's create, or the one it held back, and the status that follows:
/// the new sentinel's name and UID, or the state a refusal leads to. Whether the name
/// is taken by an object this Hearth did not make. A create that fails is said in the
/// status before the error is returned.
async fn create_planned<K: Sentinel>(
    (ctx, cluster): (&Writer<K>, &FournosCluster),
    plan: &LockPlan,
    now: Timestamp,
) -> Result<(LockStatus, bool), Error> {
    let regarding = &cluster.object_ref(&());
    let mut status = plan.status.clone();
    let mut taken = false;
    let kind = K::kind(&()).into_owned();
    let namespace = ctx.config.execution_namespace.clone();
    let name_taken = |name: &str, why: String| {
        Refusal::NameTaken(Taken {
            kind: kind.clone(),
            namespace: namespace.clone(),
            name: name.to_owned(),
            why,
        })
    };
    for action in &plan.actions {
        let LockAction::CreateSentinel { name, owner } = action else {
            continue;
        };
        match create_sentinel(ctx, cluster, regarding, name, owner).await {
            Ok(Creation::Created { uid }) => {
                status.lock_job_name = Some(name.clone());
                status.lock_job_uid = Some(uid);
            }
            Ok(Creation::Exists(Holder::Ours)) => {}
            Ok(Creation::Exists(Holder::Foreign(why))) => {
                taken = true;
                status = refused(plan, name_taken(name, why));
            }
            Err(e) => {
                // Said where people look (the Locked condition), not only in an Event.
                let error = e.to_string();
                let status = refused(plan, Refusal::CreateFailed { error });
                write_status(ctx, cluster, regarding, &status, now).await?;
                return Err(e);
            }
        }
    }
    if let Some(name) = &plan.blocked_create
        && let Holder::Foreign(why) = holder_of(ctx, cluster, name).await?
    {
        taken = true;
        status = refused(plan, name_taken(name, why));
    }
    Ok((status, taken))
}

/// The status of the state a refused create leads to (`SentinelNameTaken`: the name
/// belongs to an object this Hearth did not make, which is left alone, as it may be
/// someone's running job, and named; `SentinelCreateFailed`), from the state machine.
fn refused(plan: &LockPlan, refusal: Refusal) -> LockStatus {
    plan.refused(refusal).unwrap_or_else(|| plan.status.clone())
}

/// Who holds an object name among the sentinels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// Nobody, or this Hearth (its labels).
    Ours,
    /// Another Hearth, a person, or Fournos: why it is not this Hearth's.
    Foreign(String),
}

/// Whose object `name` is (read once, on a refused create or a held one; never in
/// steady state): this Hearth's sentinel of `cluster` only when labelled for it *and* its
/// UID is the one lock-manager recorded or created.
async fn holder_of<K: Sentinel>(
    ctx: &Writer<K>,
    cluster: &FournosCluster,
    name: &str,
) -> Result<Holder, Error> {
    let meta = ctx
        .sentinel_writes
        .get_metadata_opt(name)
        .await
        .map_err(|source| Error::ReadSentinel {
            name: name.to_owned(),
            source,
        })?;
    let recorded = cluster
        .status
        .as_ref()
        .and_then(|s| s.lock_job_uid.as_deref());
    let proven = |uid: &str| recorded == Some(uid) || ctx.created.contains(uid);
    Ok(match meta {
        None => Holder::Ours,
        Some(meta) => holder(
            &meta.metadata,
            &cluster.name_any(),
            &ctx.cluster_namespace,
            proven,
        ),
    })
}

/// [`Holder`] from an object's labels and UID: labels alone never make it ours.
pub fn holder(
    meta: &ObjectMeta,
    cluster: &str,
    cluster_namespace: &str,
    proven: impl Fn(&str) -> bool,
) -> Holder {
    let labels = meta.labels.as_ref();
    // Label values are at most 63 characters; bounded anyway, as anyone may set them.
    let get = |k: &str| {
        labels
            .and_then(|l| l.get(k))
            .map(|v| hearth_api::text::bounded(v, 63))
    };
    if has_sentinel_labels(labels, cluster_namespace) {
        let locks = get(CLUSTER_LOCK_LABEL).unwrap_or_default();
        return if locks != cluster {
            Holder::Foreign(format!(
                "it carries this Hearth's sentinel labels for cluster {locks}, not {cluster}"
            ))
        } else if meta.uid.as_deref().is_some_and(proven) {
            Holder::Ours
        } else {
            Holder::Foreign(
                "it carries this Hearth's sentinel labels, but its UID is not the one lock-manager recorded (status.lockJobUID) when it created the sentinel, and labels prove nothing".to_owned(),
            )
        };
    }
    Holder::Foreign(
        match (get(MANAGED_BY_LABEL), get(CLUSTER_NAMESPACE_LABEL)) {
            (Some(by), Some(ns)) if by == MANAGED_BY_VALUE => {
                format!(
                    "it is the sentinel of the Hearth whose FournosClusters are in namespace {ns}"
                )
            }
            (Some(by), _) if by != MANAGED_BY_VALUE => format!("it is managed by {by}"),
            _ => format!(
                "it lacks the labels {MANAGED_BY_LABEL}={MANAGED_BY_VALUE} and {CLUSTER_NAMESPACE_LABEL}={cluster_namespace}"
            ),
        },
    )
}

/// Adopts the sentinel an older controller made (the Python Hearth, or lock-manager
/// before sentinels carried Hearth's labels), once: when the cluster's status names it,
/// no UID is recorded yet, and it is shaped like a sentinel of this cluster. It gets
/// Hearth's labels (guarded by its resourceVersion) and counts as proven from now on.
/// Whether it was adopted.
pub async fn adopt_legacy<K: Sentinel>(
    ctx: &Writer<K>,
    regarding: &ObjectReference,
    cluster: &str,
    name: &str,
) -> Result<bool, Error> {
    let read = |source| Error::ReadSentinel {
        name: name.to_owned(),
        source,
    };
    let Some(object) = ctx.sentinel_writes.get_opt(name).await.map_err(read)? else {
        return Ok(false);
    };
    if !is_legacy(&object, cluster) {
        return Ok(false);
    }
    let Some(uid) = object.uid() else {
        return Ok(false);
    };
    let patch = json!({
        "metadata": {
            "resourceVersion": object.resource_version(),
            "labels": sentinel_labels(cluster, &ctx.cluster_namespace),
        },
    });
    let params = PatchParams {
        field_manager: Some(LOCK_MANAGER.into()),
        ..PatchParams::default()
    };
    match ctx
        .sentinel_writes
        .patch(name, &params, &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        // Changed or gone meanwhile: the next reconcile looks again.
        Err(e) if is_gone_or_replaced(&e) => return Ok(false),
        Err(source) => {
            return Err(Error::AdoptSentinel {
                name: name.to_owned(),
                source,
            });
        }
    }
    ctx.created.insert(&uid);
    ctx.metrics.wrote("sentinel_adopt");
    tracing::info!(
        sentinel = name,
        "adopted the sentinel of an older controller"
    );
    let note = format!(
        "Sentinel {name} was made by an older controller; it now carries this Hearth's labels and keeps holding the lock."
    );
    ctx.events
        .publish(
            regarding,
            &Event::normal("SentinelAdopted", "AdoptSentinel", note),
        )
        .await;
    Ok(true)
}

/// Applies `status` when it differs from the cluster's, then the metrics and Events of
/// that change. A cluster deleted (or replaced) meanwhile has nothing left to report on.
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
    let written = hearth_runtime::status::apply_status_resting_on(
        &ctx.clusters,
        cluster,
        LOCK_MANAGER,
        patch,
        |live| rests_on(live) == rests_on(cluster),
    )
    .await;
    match written {
        Ok(Some(_)) => ctx.metrics.wrote("status"),
        // Deleted, replaced by another of its name, or changed in what the plan was made
        // from: the change has a reconcile of its own.
        Ok(None) => return Ok(()),
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

/// What a plan reads of its cluster: the spec (by its generation), the deletion, the
/// lock's own stored status and the flavor and slots kueue-sync published. A status
/// planned from one of these is not applied over another (`apply_status_resting_on`):
/// a plan made from a cache that lags the last status write would stamp the lock's start
/// anew over the one that write recorded.
fn rests_on(
    cluster: &FournosCluster,
) -> (Option<i64>, bool, LockManagerStatus, Option<&KueueStatus>) {
    let status = cluster.status.as_ref();
    (
        cluster.metadata.generation,
        cluster.metadata.deletion_timestamp.is_some(),
        status.map(LockManagerStatus::of).unwrap_or_default(),
        status.and_then(|s| s.kueue.as_ref()),
    )
}

/// `spec.owner = null`, only if the cluster is still at the observed resourceVersion;
/// the cluster as written.
async fn clear_owner(
    api: &Api<FournosCluster>,
    cluster: &FournosCluster,
) -> Result<FournosCluster, kube::Error> {
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
        Err(e) if is_gone_or_replaced(&e) => Ok(()),
        Err(source) => Err(Error::DeleteSentinel {
            name: name.to_owned(),
            source,
        }),
    }
}

/// What a create came to.
enum Creation {
    Created {
        uid: String,
    },
    /// The name was taken (409): by this Hearth's sentinel (a cache that has not caught
    /// up), or by someone else's object.
    Exists(Holder),
}

async fn create_sentinel<K: Sentinel>(
    ctx: &Writer<K>,
    cluster: &FournosCluster,
    regarding: &ObjectReference,
    name: &str,
    owner: &str,
) -> Result<Creation, Error> {
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
        cluster_namespace: &ctx.cluster_namespace,
        owner,
        slots,
        local_queue: &ctx.config.local_queue_name,
        priority: priority.as_ref(),
    });
    let params = PostParams {
        field_manager: Some(LOCK_MANAGER.into()),
        ..PostParams::default()
    };
    let uid = match ctx.sentinel_writes.create(&params, &sentinel).await {
        Ok(created) => {
            ctx.metrics.wrote("sentinel_create");
            created.uid().unwrap_or_default()
        }
        Err(e) if is_conflict(&e) => {
            return holder_of(ctx, cluster, name).await.map(Creation::Exists);
        }
        Err(source) => {
            return Err(Error::CreateSentinel {
                name: name.to_owned(),
                source,
            });
        }
    };
    ctx.created.insert(&uid);
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
    Ok(Creation::Created { uid })
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
    sentinel: &K,
    status: serde_json::Value,
) -> Result<(), Error> {
    upkeep_with(&ctx.sentinel_writes, &ctx.metrics, sentinel, status).await
}

/// Applies an upkeep status patch to `object` through `api` (a sentinel, or the Workload
/// Fournos made for a FournosJob sentinel), through the kit's status writer: only to that
/// object, not to another that took its name since it was observed.
pub async fn upkeep_with<R>(
    api: &Api<R>,
    metrics: &LockMetrics,
    object: &R,
    status: serde_json::Value,
) -> Result<(), Error>
where
    R: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let name = object.name_any();
    match hearth_runtime::status::apply_status(api, object, LOCK_MANAGER, status).await {
        Ok(Some(_)) => {
            metrics.wrote("sentinel_upkeep");
            tracing::info!(sentinel = name, "sentinel marked PodsReady for Kueue");
            Ok(())
        }
        // Deleted, or replaced by another of its name: not ours to mark.
        Ok(None) => Ok(()),
        Err(source) => Err(Error::SentinelUpkeep { name, source }),
    }
}

async fn publish<K: Sentinel>(ctx: &Writer<K>, regarding: &ObjectReference, event: &Event) {
    ctx.events.publish(regarding, event).await;
}

/// The requests that matter, exactly: the guarded owner clear comes first and a 409
/// stops everything else.
#[cfg(test)]
mod tests;
