//! One reconcile of one FournosCluster's lock: observe (watch caches only) →
//! [`plan_lock`] (pure) → [`apply_plan`] (leader only) → requeue at the lock's expiry,
//! so a TTL runs out on time rather than up to a resync interval late.

use std::sync::Arc;
use std::time::Duration;

use hearth_api::kueue::Workload;
use hearth_api::{FournosCluster, SlotHolder};
use hearth_runtime::kit::Next;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::{Resource, ResourceExt};

use crate::apply::{Applied, adopt_legacy, apply_plan};
use crate::error::Error;
use crate::fournos_workloads::FournosFacts;
use crate::holders;
use crate::plan::{LockPlan, plan_lock};
use crate::sentinel::{Sentinel, cluster_of, observe};
use crate::views::{ClusterView, Expect, SentinelView};
use crate::writer::Writer;

use crate::context::Context;

/// Retry after the cluster changed under an expiry (the watch event usually comes first).
const CONFLICT_RETRY: Duration = Duration::from_secs(1);
pub(crate) async fn reconcile_lock<K: Sentinel>(
    object: Arc<DeserializeGuard<FournosCluster>>,
    ctx: Arc<Context<K>>,
) -> Result<Next, Error> {
    let cluster = match &object.0 {
        Ok(cluster) => cluster,
        Err(invalid) => {
            return Err(Error::InvalidCluster(hearth_api::text::bounded(
                &invalid.error,
                hearth_runtime::kit::MAX_DECODE_ERROR,
            )));
        }
    };
    // Planning from a half-filled sentinel cache would create duplicates.
    ctx.sentinels.synced().await.map_err(|_| Error::CacheGone)?;
    let name = cluster.name_any();
    let status = cluster.status.clone().unwrap_or_default();
    if adopted_legacy(&ctx, cluster).await? {
        // Its watch event, now that it carries the labels, plans the lock with it.
        return Ok(Next::After(ctx.rt.reconcile_interval()));
    }
    let observed = ctx
        .sentinels
        .store()
        .state_filter(|s| cluster_of(s) == Some(name.as_str()));
    let expect = Expect::of(&status).queued_in(&ctx.writer.config.local_queue_name);
    let recorded = status.lock_job_uid.as_deref();
    let ours = |uid: &str| recorded == Some(uid) || ctx.writer.created.contains(uid);
    let views: Vec<_> = observed
        .iter()
        .map(|s| observe(s.as_ref(), &expect, ours))
        .collect();
    let now = Timestamp::now();
    // Planning from a half-filled Workload cache would call a lock lost.
    ctx.admitted.synced().await.map_err(|_| Error::CacheGone)?;
    let view = ClusterView {
        name: &name,
        owner: cluster.spec.owner.as_deref(),
        ttl: cluster.spec.ttl.as_deref(),
        deleting: cluster.metadata.deletion_timestamp.is_some(),
        cordoned: cluster.spec.cordon.is_some(),
        status: &status,
    };
    let (mut plan, owned) = plan_with_facts(&ctx, &view, &observed, &views, now);
    if let Some(flavor) = status.kueue.as_ref().map(|k| k.flavor.as_str()) {
        plan.status.slot_holders = other_holders(&ctx, flavor, &plan, &views);
    }
    tracing::debug!(plan = %crate::summary::plan_summary(&plan), "planned");

    if !ctx.rt.is_leader() {
        // Becoming leader reconciles everything again.
        return Ok(Next::OnChange);
    }
    let applied = apply_plan(&ctx.writer, cluster, &observed, &plan, now).await?;
    // After the lock's own writes, which a failure here must not hold back.
    ctx.booked.reconcile(&name).await?;
    if applied == Applied::Done
        && let Some(workload) = owned
    {
        keep_ready(&ctx.writer, &workload, now).await?;
    }
    let action = match applied {
        // Kept growing (to a minute) while the name stays taken: one read and one refused
        // create per look.
        Applied::NameTaken => return Ok(Next::After(ctx.backoff.failed(name))),
        Applied::Conflict => Next::After(CONFLICT_RETRY),
        Applied::Done => {
            let resync = ctx.rt.reconcile_interval();
            Next::After(plan.requeue_after.map_or(resync, |d| d.min(resync)))
        }
    };
    ctx.backoff.succeeded(&name);
    Ok(action)
}

/// Adopts the sentinel a lock of the Python Hearth's era names, when it is one (leader
/// only). Its status names the sentinel without `lockOwner` and `lockJobUID`, which
/// every lock-manager writes with a sentinel's name: a name this lock-manager wrote is
/// never a reason to adopt. Whether it adopted one.
async fn adopted_legacy<K: Sentinel>(
    ctx: &Context<K>,
    cluster: &FournosCluster,
) -> Result<bool, Error> {
    let Some(status) = cluster.status.as_ref() else {
        return Ok(false);
    };
    let Some(legacy) = status.lock_job_name.as_deref() else {
        return Ok(false);
    };
    if !ctx.rt.is_leader()
        || status.lock_job_uid.is_some()
        || status.lock_owner.is_some()
        || ctx.sentinels.named(legacy).is_some()
    {
        return Ok(false);
    }
    let name = cluster.name_any();
    adopt_legacy(&ctx.writer, &cluster.object_ref(&()), &name, legacy).await
}

/// The plan, from the sentinels and, for `fournosjob`, the FournosJobs and Workloads
/// behind them; with the Workload of the sentinel the plan keeps, for its upkeep.
fn plan_with_facts<K: Sentinel>(
    ctx: &Context<K>,
    view: &ClusterView<'_>,
    observed: &[Arc<DeserializeGuard<K>>],
    views: &[SentinelView],
    now: Timestamp,
) -> (LockPlan, Option<Workload>) {
    if !ctx.fournos {
        return (plan_lock(view, views, None, now), None);
    }
    let facts = FournosFacts::observe(
        &ctx.admitted.store(),
        &ctx.writer.config.execution_namespace,
        view.name,
        observed,
    );
    let plan = plan_lock(view, views, Some(&facts.view()), now);
    let owned = facts.owned_by_kept(&plan);
    (plan, owned)
}

/// Who else holds the cluster's slots on `flavor`. This Hearth's lock is not a foreign
/// holder: the Workload proven to hold it and, for `workload`, the proven sentinels
/// (each its own Workload). Only a UID proven by this Hearth hides a holder; a label or
/// an ownerReference never does.
fn other_holders<K: Sentinel>(
    ctx: &Context<K>,
    flavor: &str,
    plan: &LockPlan,
    views: &[SentinelView],
) -> Vec<SlotHolder> {
    let mut ours: Vec<&str> = plan
        .status
        .lock_workload_uid
        .as_deref()
        .into_iter()
        .collect();
    if !ctx.fournos {
        ours.extend(
            views
                .iter()
                .filter(|v| v.proven)
                .filter_map(|v| v.uid.as_deref()),
        );
    }
    let workloads = ctx.admitted.state();
    holders::slot_holders(
        workloads.iter().filter_map(|w| w.0.as_ref().ok()),
        flavor,
        |w| w.uid().is_some_and(|u| ours.contains(&u.as_str())),
    )
}

/// `PodsReady=True` on the kept sentinel's admitted Workload, as for a `workload`
/// sentinel: it has no pods, and Kueue's WaitForPodsReady would evict it.
async fn keep_ready<K: Sentinel>(
    writer: &Writer<K>,
    workload: &Workload,
    now: Timestamp,
) -> Result<(), Error> {
    let Some(status) = Sentinel::upkeep(workload, now) else {
        return Ok(());
    };
    let api: Api<Workload> =
        Api::namespaced(writer.client.clone(), &writer.config.execution_namespace);
    crate::apply::upkeep_with(&api, &writer.metrics, workload, status).await
}
