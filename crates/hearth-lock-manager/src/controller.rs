//! The controller: FournosClusters in Hearth's namespace, triggered also by their
//! sentinels (mapped by the `fournos.dev/cluster-lock` label) and by becoming leader.
//!
//! Wiring only: the watches, the triggers, the kit's runner around
//! [`crate::reconcile`], and the sweep. What they share is [`crate::context`].

use std::sync::Arc;

use futures::StreamExt;
use hearth_api::fournosjob::FournosJob;
use hearth_api::kueue::Workload;
use hearth_api::names::sentinel_selector;
use hearth_runtime::Runtime;
use hearth_runtime::kit::{Backoff, Cache, RunTriggers, Runner, WatchContext};
use hearth_runtime::leadership::on_acquired;
use kube::api::Api;
use kube::runtime::watcher;
use tracing::Instrument as _;

use crate::apply::Writer;
use crate::config::{LockManagerConfig, SentinelKind};
use crate::error::Error;
use crate::fournos_lock::{self, JOB_NAME_LABEL};
use crate::holders;
use crate::metrics::LockMetrics;
use crate::sentinel::{Sentinel, cluster_of};

use crate::context::Context;
use crate::reconcile::reconcile_lock;

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
