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

use std::time::Duration;

use hearth_runtime::Runtime;
use hearth_runtime::kit::{Cache, CacheGone, ReportedOnce, Triggers, WatchContext};
use kube::api::Api;
use kube::runtime::watcher;
use std::sync::Mutex;

use crate::apply::Writer;
use crate::config::KueueSyncConfig;
use crate::context::{Caches, Context};
use crate::error::Error;
use crate::metrics::Metrics;
use crate::new_flavors::NewFlavors;
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
    let client = rt.client();
    let watch = WatchContext::new(&metrics.controller);
    // The plan reads no label of a cluster but the pool labels.
    let pool_keys = settings.pool_label_keys.clone();
    let (clusters, cluster_objects) = watch.fournos_clusters_trimmed(&rt, move |cluster| {
        crate::cached::CachedCluster::keep_labels(cluster, &pool_keys);
    });
    let (queues, queue_objects) = Cache::watch(
        "ClusterQueue",
        Api::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={}", settings.cluster_queue)),
        rt.readiness().gate("clusterqueue"),
        &watch,
    );
    let (flavors, flavor_objects) = Cache::watch(
        "ResourceFlavor",
        Api::all(client.clone()),
        watcher::Config::default(),
        rt.readiness().gate("resourceflavors"),
        &watch,
    );
    // The execution namespace's Workloads (where Fournos submits), trimmed to what the
    // cordon count reads: how many are still admitted on a cordoned cluster's flavor.
    // Those of other namespaces are not Hearth's to hold in memory.
    let (workloads, workload_objects) = Cache::watch_trimmed(
        "Workload",
        Api::namespaced(client.clone(), &config.execution_namespace),
        watcher::Config::default(),
        rt.readiness().gate("workloads"),
        &watch,
        crate::workloads::trim,
    );
    let watches = tokio::spawn(async move {
        tokio::join!(
            Cache::drive(cluster_objects),
            Cache::drive(queue_objects),
            Cache::drive(flavor_objects),
            Cache::drive(workload_objects),
        );
    });
    let _abort_watches = AbortOnDrop(watches);

    let caches = Caches {
        clusters,
        queues,
        flavors,
        workloads,
    };
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
    let context = Context {
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
    };
    Triggers {
        changes: watch.changes.subscribe(),
        leader: rt.leader(),
        resync: rt.reconcile_interval(),
        debounce: DEBOUNCE,
        shutdown,
    }
    .run(|| {
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
    })
    .await;
    Ok(())
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

/// Aborts the task when dropped, so the watches stop with the controller.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
