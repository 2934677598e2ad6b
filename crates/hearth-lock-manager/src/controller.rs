//! The controller: FournosClusters in Hearth's namespace, triggered also by their
//! sentinels (mapped by the `fournos.dev/cluster-lock` label) and by becoming leader.
//!
//! Reconcile = observe (watch caches only) → [`plan_lock`] (pure) → [`apply_plan`]
//! (leader only) → requeue at the lock's expiry, so a TTL runs out on time rather than
//! up to a resync interval late.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use hearth_api::FournosCluster;
use hearth_api::fournosjob::FournosJob;
use hearth_api::kueue::Workload;
use hearth_api::names::sentinel_selector;
use hearth_runtime::Runtime;
use hearth_runtime::kit::{Backoff, Cache, Changes, Next, RunTriggers, Runner, WatchContext};
use hearth_runtime::leadership::on_acquired;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use tracing::Instrument as _;

use crate::apply::{Applied, Writer, adopt_legacy, apply_plan};
use crate::config::{LockManagerConfig, SentinelKind};
use crate::error::Error;
use crate::fournos_lock::{self, JOB_NAME_LABEL};
use crate::holders;
use crate::metrics::LockMetrics;
use crate::plan::{ClusterView, plan_lock};
use crate::sentinel::{Expect, Sentinel, cluster_of, observe};

/// Retry after the cluster changed under an expiry (the watch event usually comes first).
const CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// Shared by every reconcile and the sweep.
pub struct Context<K: Sentinel> {
    pub rt: Runtime,
    pub writer: Writer<K>,
    pub clusters: Cache<FournosCluster>,
    pub sentinels: Cache<K>,
    /// `fournosjob` sentinels only: the Workloads Fournos made (what holds the slots).
    pub lock_workloads: Option<Cache<Workload>>,
    /// Every Workload of the execution namespace: who else holds a cluster's slots.
    pub admitted: Cache<Workload>,
    /// Bumped on every change any cache sees; wakes the sweep.
    pub changes: Changes,
    /// Consecutive failures per cluster, for the retry delay.
    backoff: Backoff,
}

/// Runs lock-manager with the configured sentinel kind until shutdown.
pub async fn run(rt: Runtime, config: LockManagerConfig) -> Result<(), Error> {
    match config.sentinel {
        SentinelKind::FournosJob => run_with::<FournosJob>(rt, config).await,
        SentinelKind::Workload => run_with::<Workload>(rt, config).await,
    }
}

fn log_settings(config: &LockManagerConfig) {
    tracing::info!(
        sentinel = ?config.sentinel,
        execution_namespace = %config.execution_namespace,
        local_queue = %config.local_queue_name,
        priority_class = ?config.sentinel_priority_class,
        concurrency = config.lock_concurrency.get(),
        "lock-manager starting"
    );
}

async fn run_with<K: Sentinel>(rt: Runtime, config: LockManagerConfig) -> Result<(), Error> {
    let client = rt.client();
    let namespace = rt.namespace().to_owned();
    let metrics = LockMetrics::new();
    metrics.register(&mut rt.metrics().registry());
    // One cached watch per kind; every change also wakes the sweep.
    let watch = WatchContext::new(&metrics.controller);
    let (clusters, cluster_objects) = watch.fournos_clusters(&rt);
    let (sentinels, sentinel_objects) = Cache::<K>::watch(
        "Sentinel",
        Api::namespaced(client.clone(), &config.execution_namespace),
        // Only this Hearth's sentinels: another Hearth's, or an object someone labelled
        // `fournos.dev/cluster-lock` alone, is never read, counted or deleted.
        watcher::Config::default().labels(&sentinel_selector(&namespace)),
        rt.readiness().gate("sentinels"),
        &watch,
    );
    // `fournosjob`: Fournos's Workloads too, each mapped to the cluster it is pinned to
    // (its node selector) when it is a lock's (named like a sentinel).
    let lock_workloads = (config.sentinel == SentinelKind::FournosJob).then(|| {
        Cache::<Workload>::watch(
            "Workload",
            Api::namespaced(client.clone(), &config.execution_namespace),
            watcher::Config::default().labels(JOB_NAME_LABEL),
            rt.readiness().gate("workloads"),
            &watch,
        )
    });

    // Every Workload, mapped to the cluster whose flavor it is admitted on: a change of
    // who holds a cluster's slots is said in its status (`slotHolders`).
    let (admitted, admitted_objects) = Cache::<Workload>::watch_trimmed(
        "AdmittedWorkload",
        Api::namespaced(client.clone(), &config.execution_namespace),
        watcher::Config::default(),
        rt.readiness().gate("admitted-workloads"),
        &watch,
        holders::trim,
    );

    let ctx = Arc::new(Context {
        rt: rt.clone(),
        writer: Writer::new(
            rt.write_client(),
            &namespace,
            config.clone(),
            rt.events(),
            metrics,
        ),
        clusters: clusters.clone(),
        sentinels,
        lock_workloads: lock_workloads.as_ref().map(|(cache, _)| cache.clone()),
        admitted,
        changes: watch.changes.clone(),
        backoff: Backoff::default(),
    });

    let sweep =
        tokio::spawn(crate::sweep::run(ctx.clone()).instrument(tracing::info_span!("sweep")));

    log_settings(&config);
    // Related objects, each mapped to the cluster it concerns: the cluster's sentinels,
    // every Workload admitted on its flavor (who holds its slots) and, for `fournosjob`,
    // the Workloads Fournos made for its sentinels.
    let one = |cluster: Option<&str>| std::future::ready(cluster.map(|c| vec![c.to_owned()]));
    let mut related = vec![
        sentinel_objects
            .filter_map(move |s| one(s.ok().as_ref().and_then(cluster_of)))
            .boxed(),
        admitted_objects
            .filter_map(move |w| {
                one(w
                    .ok()
                    .and_then(|w| w.0.ok())
                    .as_ref()
                    .and_then(holders::admitted_flavor))
            })
            .boxed(),
    ];
    if let Some((_, workload_objects)) = lock_workloads {
        related.push(
            workload_objects
                .filter_map(move |w| {
                    one(w
                        .ok()
                        .and_then(|w| w.0.ok())
                        .as_ref()
                        .and_then(fournos_lock::lock_workload_cluster))
                })
                .boxed(),
        );
    }
    let triggers = RunTriggers {
        related,
        everything: on_acquired(rt.leader()).boxed(),
        concurrency: usize::from(config.lock_concurrency.get()),
        shutdown: rt.shutdown(),
    };
    Runner::new(ctx.writer.metrics.controller.clone())
        .with_failure_events(ctx.writer.events.clone())
        .run(clusters, cluster_objects, triggers, ctx, |object, ctx| {
            reconcile_lock(object, ctx)
        })
        .await;
    sweep.abort();
    Ok(())
}

async fn reconcile_lock<K: Sentinel>(
    object: Arc<DeserializeGuard<FournosCluster>>,
    ctx: Arc<Context<K>>,
) -> Result<Next, Error> {
    let cluster = match &object.0 {
        Ok(cluster) => cluster,
        Err(invalid) => return Err(Error::InvalidCluster(invalid.error.clone())),
    };
    // Planning from a half-filled sentinel cache would create duplicates.
    ctx.sentinels.synced().await.map_err(|_| Error::CacheGone)?;
    let name = cluster.name_any();
    let status = cluster.status.clone().unwrap_or_default();
    if ctx.rt.is_leader()
        && status.lock_job_uid.is_none()
        && let Some(legacy) = status.lock_job_name.as_deref()
        && ctx.sentinels.named(legacy).is_none()
        && adopt_legacy(&ctx.writer, &cluster.object_ref(&()), &name, legacy).await?
    {
        // Its watch event, now that it carries the labels, plans the lock with it.
        return Ok(Next::After(ctx.rt.reconcile_interval()));
    }
    let observed = ctx
        .sentinels
        .store()
        .state_filter(|s| cluster_of(s) == Some(name.as_str()));
    let expect = Expect::of(&status);
    let recorded = status.lock_job_uid.as_deref();
    let proven = |uid: &str| recorded == Some(uid) || ctx.writer.created.contains(uid);
    let views: Vec<_> = observed
        .iter()
        .map(|s| observe(s.as_ref(), &expect, proven))
        .collect();
    let view = ClusterView {
        name: &name,
        owner: cluster.spec.owner.as_deref(),
        ttl: cluster.spec.ttl.as_deref(),
        deleting: cluster.metadata.deletion_timestamp.is_some(),
        cordoned: cluster.spec.cordon.is_some(),
        status: &status,
    };
    let now = Timestamp::now();
    let (mut plan, owned) = match &ctx.lock_workloads {
        Some(workloads) => {
            // Planning from a half-filled Workload cache would call a lock lost.
            workloads.synced().await.map_err(|_| Error::CacheGone)?;
            let facts = fournos_lock::FournosFacts::observe(&workloads.store(), &name, &observed);
            let plan = plan_lock(&view, &views, Some(&facts.view()), now);
            let owned = facts.owned_by_kept(&plan);
            (plan, owned)
        }
        None => (plan_lock(&view, &views, None, now), None),
    };
    if let Some(flavor) = status.kueue.as_ref().map(|k| k.flavor.as_str()) {
        ctx.admitted.synced().await.map_err(|_| Error::CacheGone)?;
        // This Hearth's lock is not a foreign holder: its proven sentinels, and for
        // `fournosjob` the Workloads Fournos made for them.
        let ours: Vec<&str> = views
            .iter()
            .filter(|v| v.proven)
            .filter_map(|v| v.uid.as_deref())
            .collect();
        let workloads = ctx.admitted.state();
        plan.status.slot_holders = holders::slot_holders(
            workloads.iter().filter_map(|w| w.0.as_ref().ok()),
            flavor,
            |w| {
                w.uid().is_some_and(|u| ours.contains(&u.as_str()))
                    || w.owner_references()
                        .iter()
                        .any(|o| ours.contains(&o.uid.as_str()))
            },
        );
    }
    tracing::debug!(plan = %crate::summary::plan_summary(&plan), "planned");

    if !ctx.rt.is_leader() {
        // Becoming leader reconciles everything again.
        return Ok(Next::OnChange);
    }
    let applied = apply_plan(&ctx.writer, cluster, &observed, &plan, now).await?;
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
    crate::apply::upkeep_with(&api, &writer.metrics, &workload.name_any(), status).await
}
