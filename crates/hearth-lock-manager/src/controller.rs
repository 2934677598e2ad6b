//! The controller: FournosClusters in Hearth's namespace, triggered also by their
//! sentinels (mapped by the `fournos.dev/cluster-lock` label) and by becoming leader.
//!
//! Reconcile = observe (watch caches only) → [`plan_lock`] (pure) → [`apply_plan`]
//! (leader only) → requeue at the lock's expiry, so a TTL runs out on time rather than
//! up to a resync interval late.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use hearth_api::FournosCluster;
use hearth_api::fournosjob::FournosJob;
use hearth_api::kueue::Workload;
use hearth_api::names::{CLUSTER_LOCK_LABEL, LOCK_SENTINEL_PREFIX, lock_sentinel_name};
use hearth_runtime::Runtime;
use hearth_runtime::leadership::on_acquired;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Action, Config};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tokio::sync::{Notify, watch};
use tracing::Instrument as _;

use crate::apply::{Applied, Writer, apply_plan};
use crate::config::{LockManagerConfig, SentinelKind};
use crate::error::Error;
use crate::fournos_lock::{self, JOB_NAME_LABEL};
use crate::metrics::LockMetrics;
use crate::plan::{ClusterView, LockAction, plan_lock};
use crate::sentinel::{Sentinel, cluster_of, observe};

/// Longest wait before a failed reconcile is retried (doubling from 1s).
pub const MAX_ERROR_BACKOFF: Duration = Duration::from_secs(60);
/// Retry after the cluster changed under an expiry (the watch event usually comes first).
const CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// Shared by every reconcile and the sweep.
pub struct Context<K: Sentinel> {
    pub rt: Runtime,
    pub writer: Writer<K>,
    pub sentinels: Store<DeserializeGuard<K>>,
    pub synced: Synced,
    /// `fournosjob` sentinels only: the Workloads Fournos made (what holds the slots)
    /// and whether that cache has its first list.
    pub lock_workloads: Option<(Store<DeserializeGuard<Workload>>, watch::Receiver<bool>)>,
    /// Consecutive failures per cluster, for the retry backoff (soft state: losing it
    /// only resets a backoff).
    failures: Mutex<HashMap<String, u32>>,
}

/// Whether each watch cache has its first complete list. Set from the watch streams'
/// `InitDone` rather than awaited with `Store::wait_until_ready`, which wakes only one
/// of several concurrent waiters (the controller itself waits on the cluster cache).
#[derive(Clone, Debug)]
pub struct Synced {
    pub clusters: watch::Receiver<bool>,
    pub sentinels: watch::Receiver<bool>,
}

impl Synced {
    pub async fn clusters(&self) -> Result<(), Error> {
        wait_true(self.clusters.clone()).await
    }

    pub async fn sentinels(&self) -> Result<(), Error> {
        wait_true(self.sentinels.clone()).await
    }
}

async fn wait_true(mut rx: watch::Receiver<bool>) -> Result<(), Error> {
    rx.wait_for(|synced| *synced)
        .await
        .map(drop)
        .map_err(|_| Error::CacheGone)
}

/// Marks `synced` once the watch stream has delivered its first complete list.
fn mark_synced<K>(synced: &watch::Sender<bool>, event: &Result<watcher::Event<K>, watcher::Error>) {
    if matches!(event, Ok(watcher::Event::InitDone)) {
        synced.send_replace(true);
    }
}

/// Runs lock-manager with the configured sentinel kind until shutdown.
pub async fn run(rt: Runtime, config: LockManagerConfig) -> Result<(), Error> {
    match config.sentinel {
        SentinelKind::FournosJob => run_with::<FournosJob>(rt, config).await,
        SentinelKind::Workload => run_with::<Workload>(rt, config).await,
    }
}

async fn run_with<K: Sentinel>(rt: Runtime, config: LockManagerConfig) -> Result<(), Error> {
    let client = rt.client();
    let namespace = rt.namespace().to_owned();
    let clusters_gate = rt.readiness().gate("fournosclusters");
    let sentinels_gate = rt.readiness().gate("sentinels");
    let metrics = LockMetrics::new();
    metrics.register(&mut rt.metrics().registry());
    let poke = Arc::new(Notify::new());

    // One watch per kind, each feeding its cache; every event also pokes the sweep.
    let (cluster_store, cluster_writer) = reflector::store();
    let (clusters_synced_tx, clusters_synced) = watch::channel(false);
    let (sentinels_synced_tx, sentinels_synced) = watch::channel(false);
    let synced = Synced {
        clusters: clusters_synced,
        sentinels: sentinels_synced,
    };
    let poke_clusters = poke.clone();
    let cluster_events = watcher(
        Api::<DeserializeGuard<FournosCluster>>::namespaced(client.clone(), &namespace),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(hearth_runtime::slim::strip_managed_fields)
    .reflect(cluster_writer)
    .inspect(move |event| {
        mark_synced(&clusters_synced_tx, event);
        poke_clusters.notify_one();
    })
    .applied_objects()
    .inspect(log_invalid_cluster);

    let (sentinel_store, sentinel_writer) = reflector::store();
    let poke_sentinels = poke.clone();
    let sentinel_events = watcher(
        Api::<DeserializeGuard<K>>::namespaced(client.clone(), &config.execution_namespace),
        watcher::Config::default().labels(CLUSTER_LOCK_LABEL),
    )
    .default_backoff()
    .modify(hearth_runtime::slim::strip_managed_fields)
    .reflect(sentinel_writer)
    .inspect(move |event| {
        mark_synced(&sentinels_synced_tx, event);
        poke_sentinels.notify_one();
    })
    .touched_objects();

    // `fournosjob`: Fournos's Workloads too, each mapped to the cluster it is pinned to
    // (its node selector) when it is a lock's (named like a sentinel).
    let (workload_store, workload_writer) = reflector::store();
    let (workloads_synced_tx, workloads_synced) = watch::channel(false);
    let watch_workloads = config.sentinel == SentinelKind::FournosJob;
    let poke_workloads = poke.clone();
    let workload_events = watcher(
        Api::<DeserializeGuard<Workload>>::namespaced(client.clone(), &config.execution_namespace),
        watcher::Config::default().labels(JOB_NAME_LABEL),
    )
    .default_backoff()
    .modify(hearth_runtime::slim::strip_managed_fields)
    .reflect(workload_writer)
    .inspect(move |event| {
        mark_synced(&workloads_synced_tx, event);
        poke_workloads.notify_one();
    })
    .touched_objects()
    .filter(move |_| std::future::ready(watch_workloads));
    let lock_workloads = watch_workloads.then(|| (workload_store, workloads_synced.clone()));

    let ctx = Arc::new(Context {
        rt: rt.clone(),
        writer: Writer::new(client, &namespace, config.clone(), rt.events(), metrics),
        sentinels: sentinel_store,
        synced: synced.clone(),
        lock_workloads,
        failures: Mutex::new(HashMap::new()),
    });

    {
        let synced = synced.clone();
        tokio::spawn(async move {
            if synced.clusters().await.is_ok() {
                clusters_gate.ready();
            }
            if synced.sentinels().await.is_ok() {
                sentinels_gate.ready();
            }
        });
    }
    let sweep = tokio::spawn(
        crate::sweep::run(ctx.clone(), cluster_store.clone(), poke)
            .instrument(tracing::info_span!("sweep")),
    );

    tracing::info!(
        sentinel = ?config.sentinel,
        execution_namespace = %config.execution_namespace,
        local_queue = %config.local_queue_name,
        priority_class = ?config.sentinel_priority_class,
        concurrency = config.lock_concurrency.get(),
        "lock-manager starting"
    );
    let mapper_namespace = namespace.clone();
    let workload_namespace = namespace.clone();
    let mut controller = Controller::for_stream(cluster_events, cluster_store).watches_stream(
        sentinel_events,
        move |sentinel: DeserializeGuard<K>| {
            cluster_of(&sentinel).map(|cluster| ObjectRef::new(cluster).within(&mapper_namespace))
        },
    );
    if watch_workloads {
        controller =
            controller.watches_stream(workload_events, move |w: DeserializeGuard<Workload>| {
                let w = w.0.ok()?;
                let job = w.labels().get(JOB_NAME_LABEL)?;
                let cluster = fournos_lock::workload_cluster(&w)?;
                (job.starts_with(LOCK_SENTINEL_PREFIX))
                    .then(|| ObjectRef::new(cluster).within(&workload_namespace))
            });
    }
    controller
        .reconcile_all_on(on_acquired(rt.leader()))
        .with_config(Config::default().concurrency(config.lock_concurrency.get()))
        .graceful_shutdown_on(rt.shutdown().cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "controller event");
            }
        })
        .await;
    sweep.abort();
    Ok(())
}

fn log_invalid_cluster(event: &Result<DeserializeGuard<FournosCluster>, watcher::Error>) {
    match event {
        Ok(DeserializeGuard(Err(invalid))) => tracing::warn!(
            cluster = invalid.metadata.name.as_deref().unwrap_or_default(),
            error = %invalid.error,
            "a FournosCluster cannot be decoded; it is skipped"
        ),
        Err(error) => tracing::warn!(%error, "FournosCluster watch error; retrying"),
        Ok(_) => {}
    }
}

#[tracing::instrument(skip_all, fields(cluster = %object.name_any()))]
async fn reconcile<K: Sentinel>(
    object: Arc<DeserializeGuard<FournosCluster>>,
    ctx: Arc<Context<K>>,
) -> Result<Action, Error> {
    let cluster = match &object.0 {
        Ok(cluster) => cluster,
        Err(invalid) => return Err(Error::InvalidCluster(invalid.error.clone())),
    };
    // Planning from a half-filled sentinel cache would create duplicates.
    ctx.synced.sentinels().await?;
    let name = cluster.name_any();
    let observed = ctx
        .sentinels
        .state_filter(|s| cluster_of(s) == Some(name.as_str()));
    let views: Vec<_> = observed.iter().map(|s| observe(s.as_ref())).collect();
    let status = cluster.status.clone().unwrap_or_default();
    let view = ClusterView {
        name: &name,
        owner: cluster.spec.owner.as_deref(),
        ttl: cluster.spec.ttl.as_deref(),
        deleting: cluster.metadata.deletion_timestamp.is_some(),
        status: &status,
    };
    let now = Timestamp::now();
    let plan = plan_lock(&view, &views, now);
    let (plan, lost, owned) = match &ctx.lock_workloads {
        Some((store, synced)) => {
            // Planning from a half-filled Workload cache would call a lock lost.
            wait_true(synced.clone()).await?;
            amend_from_workloads(store, &name, &status, &observed, plan, now)
        }
        None => (plan, false, None),
    };
    tracing::debug!(?plan, "planned");

    if !ctx.rt.is_leader() {
        // Becoming leader reconciles everything again.
        ctx.writer.metrics.reconciles.inc();
        return Ok(Action::await_change());
    }
    let applied = apply_plan(&ctx.writer, cluster, &observed, &plan, now).await?;
    if applied == Applied::Done {
        if lost {
            ctx.writer.metrics.workloads_lost.inc();
        }
        if let Some(workload) = owned {
            keep_ready(&ctx.writer, &workload, now).await?;
        }
    }
    ctx.failures
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&name);
    ctx.writer.metrics.reconciles.inc();
    Ok(match applied {
        Applied::Conflict => Action::requeue(CONFLICT_RETRY),
        Applied::Done => {
            let resync = ctx.rt.reconcile_interval();
            Action::requeue(plan.requeue_after.map_or(resync, |d| d.min(resync)))
        }
    })
}

/// The plan corrected from Fournos's Workloads ([`fournos_lock::amend`]), whether a
/// held lock was found lost, and the Workload of the kept sentinel (for its upkeep).
fn amend_from_workloads<K: Sentinel>(
    store: &Store<DeserializeGuard<Workload>>,
    cluster: &str,
    status: &hearth_api::FournosClusterStatus,
    observed: &[Arc<DeserializeGuard<K>>],
    plan: crate::plan::LockPlan,
    now: Timestamp,
) -> (crate::plan::LockPlan, bool, Option<Workload>) {
    let jobs: Vec<_> = observed
        .iter()
        .filter_map(|s| s.0.as_ref().ok()?.job_view())
        .collect();
    let canonical = lock_sentinel_name(cluster);
    let names: Vec<&str> = jobs
        .iter()
        .map(|j| j.name.as_str())
        .chain([canonical.as_str()])
        .collect();
    let uids: Vec<&str> = jobs.iter().filter_map(|j| j.uid.as_deref()).collect();
    let mut workloads = Vec::new();
    let mut views = Vec::new();
    for w in store.state() {
        if let Ok(w) = &w.0
            && let Some(v) = fournos_lock::observe_workload(w)
            && fournos_lock::belongs(&v, &names, &uids)
        {
            workloads.push(w.clone());
            views.push(v);
        }
    }
    let slots = status
        .kueue
        .as_ref()
        .map(|k| k.cluster_slots)
        .filter(|s| *s > 0);
    let amended = fournos_lock::amend(plan, slots, &jobs, &views, now);
    // The kept sentinel's own Workload, unless the plan replaces that sentinel.
    let kept = amended.plan.status.lock_job_name.as_deref().filter(|kept| {
        !amended
            .plan
            .actions
            .iter()
            .any(|a| matches!(a, LockAction::DeleteSentinel { name } if name == kept))
    });
    let owned = kept
        .and_then(|kept| {
            jobs.iter()
                .find(|j| j.name == kept && j.deleting_since.is_none())
        })
        .and_then(|job| {
            workloads
                .iter()
                .zip(&views)
                .find_map(|(w, v)| (job.uid.is_some() && v.owner_uid == job.uid).then(|| w.clone()))
        });
    (amended.plan, amended.lost, owned)
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

fn error_policy<K: Sentinel>(
    object: Arc<DeserializeGuard<FournosCluster>>,
    error: &Error,
    ctx: Arc<Context<K>>,
) -> Action {
    let reason = error.reason();
    ctx.writer.metrics.error(reason);
    let name = object.name_any();
    tracing::warn!(cluster = %name, reason, error = %error, "reconcile failed");
    let message = error.to_string();
    let regarding = object.object_ref(&());
    let events = ctx.writer.events.clone();
    tokio::spawn(async move {
        events
            .warning(&regarding, reason, "Reconcile", message)
            .await;
    });
    if matches!(error, Error::InvalidCluster(_)) {
        // Retrying cannot help; a fixed object comes back through the watch.
        return Action::await_change();
    }
    let mut failures = ctx.failures.lock().unwrap_or_else(|p| p.into_inner());
    let count = failures.entry(name).or_insert(0);
    *count = count.saturating_add(1);
    Action::requeue(error_backoff(*count))
}

/// 1s, 2s, 4s, … capped at [`MAX_ERROR_BACKOFF`].
pub fn error_backoff(failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(16);
    Duration::from_secs(1u64 << exponent).min(MAX_ERROR_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_backoff_doubles_and_is_capped() {
        assert_eq!(error_backoff(1), Duration::from_secs(1));
        assert_eq!(error_backoff(2), Duration::from_secs(2));
        assert_eq!(error_backoff(6), Duration::from_secs(32));
        assert_eq!(error_backoff(7), MAX_ERROR_BACKOFF);
        assert_eq!(error_backoff(u32::MAX), MAX_ERROR_BACKOFF);
    }
}
