//! The controller: FournosClusters in Hearth's namespace, triggered also by their
//! sentinels (mapped by the `fournos.dev/cluster-lock` label) and by becoming leader.
//!
//! Wiring only: the watches, the triggers, the kit's runner around
//! [`crate::reconcile`], and the sweep. What they share is [`crate::context`].

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use hearth_api::fournosjob::FournosJob;
use hearth_api::kueue::Workload;
use hearth_api::names::sentinel_selector;
use hearth_runtime::Runtime;
use hearth_runtime::kit::{Backoff, Cache, Objects, RunTriggers, Runner, WatchContext};
use hearth_runtime::leadership::on_acquired;
use kube::api::Api;
use kube::runtime::watcher;
use tracing::Instrument as _;

use crate::booked::Booked;
use crate::config::{LockManagerConfig, SentinelKind};
use crate::error::Error;
use crate::fournos_workloads::lock_workload_cluster;
use crate::holders;
use crate::metrics::LockMetrics;
use crate::sentinel::{Sentinel, cluster_of};
use crate::writer::Writer;

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
    // Every Workload of the execution namespace, trimmed to what is read: who holds a
    // cluster's slots (`slotHolders`) and, for `fournosjob`, the Workload Fournos made for
    // a sentinel, found by name as Fournos finds it (a label would miss a Workload someone
    // made under that name, and Fournos adopts whatever has the name).
    let (admitted, admitted_objects) = Cache::<Workload>::watch_trimmed(
        "AdmittedWorkload",
        Api::namespaced(client.clone(), &config.execution_namespace),
        watcher::Config::default(),
        rt.readiness().gate("admitted-workloads"),
        &watch,
        holders::trim,
    );

    let (booked, booking_objects) = Booked::watch(&rt, &watch);

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
        fournos: config.sentinel == SentinelKind::FournosJob,
        admitted,
        changes: watch.changes.clone(),
        recorded: Default::default(),
        backoff: Backoff::default(),
        booked,
    });

    let sweep =
        tokio::spawn(crate::sweep::run(ctx.clone()).instrument(tracing::info_span!("sweep")));

    log_settings(&config);
    let mut related = related(sentinel_objects, admitted_objects);
    // A reservation's change wakes the cluster it books.
    related.push(
        booking_objects
            .filter_map(|r| {
                let cluster = r.ok().and_then(|r| r.0.ok()).map(|r| vec![r.spec.cluster]);
                std::future::ready(cluster)
            })
            .boxed(),
    );
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

/// Related objects, each mapped to the clusters it concerns: the cluster's sentinels,
/// and every Workload admitted on its flavor (who holds its slots) or, for
/// `fournosjob`, of a lock's name (what holds a lock).
fn related<K: Sentinel>(
    sentinel_objects: Objects<K>,
    admitted_objects: Objects<Workload>,
) -> Vec<BoxStream<'static, Vec<String>>> {
    let one = |cluster: Option<&str>| std::future::ready(cluster.map(|c| vec![c.to_owned()]));
    vec![
        sentinel_objects
            .filter_map(move |s| one(s.ok().as_ref().and_then(cluster_of)))
            .boxed(),
        admitted_objects
            .filter_map(move |w| {
                let clusters = w.ok().and_then(|w| w.0.ok()).map(|w| {
                    let mut clusters: Vec<String> =
                        [holders::admitted_flavor(&w), lock_workload_cluster(&w)]
                            .into_iter()
                            .flatten()
                            .map(str::to_owned)
                            .collect();
                    clusters.dedup();
                    clusters
                });
                std::future::ready(clusters.filter(|c| !c.is_empty()))
            })
            .boxed(),
    ]
}
