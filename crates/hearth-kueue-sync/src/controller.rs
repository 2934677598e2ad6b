//! The controller: three cached watches and one global reconcile, wired from the
//! runtime's controller kit ([`hearth_runtime::kit`]).
//!
//! - Watches: FournosClusters in Hearth's namespace, the one ClusterQueue (field
//!   selector on its name), all ResourceFlavors (foreign ones matter to the plan) and the
//!   Workloads of the execution namespace, trimmed (a cordoned cluster counts those still
//!   admitted on its flavor). Clusters and flavors are cached as the plan's views of
//!   them ([`crate::cached`]), clusters with only the pool labels.
//!   Objects that do not decode stay in the caches as errors (see [`crate::snapshot`]).
//! - Triggers ([`Triggers`]): any cache change, gaining the Lease, and the resync
//!   interval. A trigger starts a reconcile at once (no debounce): one reconcile runs at
//!   a time, so the changes that arrive while it writes are taken together by the next
//!   one, and a burst of clusters becomes a few ClusterQueue writes, not one per
//!   cluster, without making the first of them wait. A failed reconcile is retried with
//!   the kit's backoff (1 s doubling to a minute); any trigger retries sooner.
//! - Readiness: one gate per watch, opened once its cache is filled. No reconcile runs
//!   before all four are: with a partial view the plan would sweep live flavors.
//! - Only the lease holder writes; every replica watches.

use std::sync::Mutex;
use std::time::Duration;

use hearth_api::kueue::{ClusterQueue, Workload};
use hearth_runtime::Runtime;
use hearth_runtime::kit::{Cache, CacheGone, Objects, ReportedOnce, Triggers, WatchContext};
use kube::api::Api;
use kube::runtime::watcher;

use crate::apply::Writer;
use crate::cached::{CachedCluster, CachedFlavor};
use crate::config::KueueSyncConfig;
use crate::context::{Caches, Context};
use crate::error::Error;
use crate::metrics::Metrics;
use crate::new_flavors::NewFlavors;
use crate::plan::PlanSettings;
use crate::snapshot::Stores;
use crate::statuses::Statuses;

/// How long a trigger waits for more changes before the reconcile starts: not at all.
/// Batching comes from running one reconcile at a time (see the module docs); a wait
/// here would only add itself to every cluster's way to quota.
pub const DEBOUNCE: Duration = Duration::ZERO;

/// Runs kueue-sync until shutdown.
pub async fn run(rt: Runtime, config: KueueSyncConfig) -> Result<(), Error> {
    let settings = config.plan_settings(rt.namespace());
    let metrics = Metrics::register(&mut rt.metrics().registry());
    let watch = WatchContext::new(&metrics.controller);
    let (caches, feeds) = watch_caches(&rt, &config, &settings, &watch);
    let _abort_watches = feeds.drive();

    let shutdown = rt.shutdown();
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        synced = caches_synced(&caches) => synced.map_err(|gone| Error::WatchStopped { kind: gone.kind })?,
    }
    tracing::info!(
        cluster_queue = %settings.cluster_queue,
        namespace = %rt.namespace(),
        "caches synced; reconciling"
    );

    let context = context(&rt, settings, caches, &watch, &metrics);
    Triggers {
        changes: watch.changes.subscribe(),
        leader: rt.leader(),
        resync: rt.reconcile_interval(),
        debounce: DEBOUNCE,
        shutdown,
    }
    .run(|| reconcile_in_span(&context, &metrics))
    .await;
    Ok(())
}

/// The four cached watches, each behind its readiness gate, and the streams that feed
/// them.
fn watch_caches(
    rt: &Runtime,
    config: &KueueSyncConfig,
    settings: &PlanSettings,
    watch: &WatchContext,
) -> (Caches, Feeds) {
    let client = rt.client();
    // The plan reads no label of a cluster but the pool labels.
    let pool_keys = settings.pool_label_keys.clone();
    let (clusters, cluster_objects) = watch.fournos_clusters_trimmed(rt, move |cluster| {
        CachedCluster::keep_labels(cluster, &pool_keys);
    });
    let (queues, queue_objects) = Cache::watch(
        "ClusterQueue",
        Api::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={}", settings.cluster_queue)),
        rt.readiness().gate("clusterqueue"),
        watch,
    );
    let (flavors, flavor_objects) = Cache::watch(
        "ResourceFlavor",
        Api::all(client.clone()),
        watcher::Config::default(),
        rt.readiness().gate("resourceflavors"),
        watch,
    );
    // The execution namespace's Workloads (where Fournos submits), trimmed to what the
    // cordon count reads: how many are still admitted on a cordoned cluster's flavor.
    // Those of other namespaces are not Hearth's to hold in memory.
    let (workloads, workload_objects) = Cache::watch_trimmed(
        "Workload",
        Api::namespaced(client, &config.execution_namespace),
        watcher::Config::default(),
        rt.readiness().gate("workloads"),
        watch,
        crate::workloads::trim,
    );
    let caches = Caches {
        clusters,
        queues,
        flavors,
        workloads,
    };
    let feeds = Feeds {
        clusters: cluster_objects,
        queues: queue_objects,
        flavors: flavor_objects,
        workloads: workload_objects,
    };
    (caches, feeds)
}

/// What the four watches deliver: each cache is filled only while its stream is polled.
struct Feeds {
    clusters: Objects<CachedCluster>,
    queues: Objects<ClusterQueue>,
    flavors: Objects<CachedFlavor>,
    workloads: Objects<Workload>,
}

impl Feeds {
    /// Polls the four streams in a task of their own, until the guard is dropped.
    fn drive(self) -> AbortOnDrop {
        AbortOnDrop(tokio::spawn(async move {
            tokio::join!(
                Cache::drive(self.clusters),
                Cache::drive(self.queues),
                Cache::drive(self.flavors),
                Cache::drive(self.workloads),
            );
        }))
    }
}

/// Waits for every cache to be filled (each opens its readiness gate).
async fn caches_synced(caches: &Caches) -> Result<(), CacheGone> {
    tokio::try_join!(
        caches.clusters.synced(),
        caches.queues.synced(),
        caches.flavors.synced(),
        caches.workloads.synced(),
    )
    .map(drop)
}

/// What every reconcile shares, over the filled caches: the writer and its background
/// writers (cluster statuses, new flavors), the snapshot's stores.
fn context(
    rt: &Runtime,
    settings: PlanSettings,
    caches: Caches,
    watch: &WatchContext,
    metrics: &Metrics,
) -> Context {
    let writer = Writer::new(
        rt.write_client(),
        rt.namespace(),
        rt.events(),
        metrics.clone(),
    );
    let statuses = Statuses::new(
        writer.clone(),
        caches.clusters.clone(),
        rt.leader(),
        watch.changes.clone(),
    );
    let new_flavors = NewFlavors::new(
        writer.clone(),
        caches.flavors.clone(),
        rt.leader(),
        watch.changes.clone(),
    );
    Context {
        writer,
        statuses,
        new_flavors,
        settings,
        stores: Stores {
            clusters: caches.clusters.store(),
            queues: caches.queues.store(),
            flavors: caches.flavors.store(),
            workloads: caches.workloads.store(),
        },
        caches,
        leader: rt.leader(),
        changes: watch.changes.clone(),
        reported: Mutex::new(ReportedOnce::default()),
        written_queue: Mutex::default(),
        planned: Mutex::default(),
    }
}

/// One reconcile, in its span, counted and timed.
async fn reconcile_in_span(context: &Context, metrics: &Metrics) -> Result<(), Error> {
    metrics
        .controller
        .reconcile(tracing::info_span!("reconcile"), async {
            let writes = context.reconcile().await?;
            if writes > 0 {
                tracing::info!(writes, "reconciled");
            } else {
                tracing::debug!("reconciled; nothing to write");
            }
            Ok::<_, Error>(())
        })
        .await
}

/// Aborts the task when dropped, so the watches stop with the controller.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
