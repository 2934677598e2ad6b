//! The controller: three watches feeding caches, and one loop that runs a global
//! reconcile whenever anything changed.
//!
//! - Watches: FournosClusters in Hearth's namespace, the one ClusterQueue (field
//!   selector on its name) and all ResourceFlavors (foreign ones matter to the plan).
//!   Objects that do not decode stay in the caches as errors (see [`crate::observe`]).
//! - Triggers: any cache change, gaining the Lease, and the resync interval. A trigger
//!   starts a reconcile after [`DEBOUNCE`], so a burst of changes (many clusters at
//!   once) becomes one reconcile and one ClusterQueue write. Changes during a reconcile
//!   start another one after it.
//! - Readiness: one gate per watch, opened once its cache is filled. No reconcile runs
//!   before all three are: with a partial view the plan would sweep live flavors.
//! - Only the lease holder writes; every replica watches.
//! - A failed reconcile is retried with exponential backoff ([`RETRY_MIN`] to
//!   [`RETRY_MAX`]); any trigger retries sooner.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use futures::{Stream, StreamExt};
use hearth_runtime::{ReadinessGate, Runtime};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector::store::Writer as StoreWriter};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::apply::Writer;
use crate::config::KueueSyncConfig;
use crate::error::Error;
use crate::metrics::Metrics;
use crate::observe::{ClusterObject, FlavorObject, QueueObject, Stores};
use crate::reconcile::Context;

/// How long a trigger waits for more changes before the reconcile starts.
pub const DEBOUNCE: Duration = Duration::from_millis(200);
/// First retry delay after a failed reconcile.
pub const RETRY_MIN: Duration = Duration::from_secs(1);
/// Longest retry delay after failed reconciles.
pub const RETRY_MAX: Duration = Duration::from_secs(60);

/// Runs kueue-sync until shutdown.
pub async fn run(rt: Runtime, config: KueueSyncConfig) -> Result<(), Error> {
    let settings = config.plan_settings(rt.namespace());
    let metrics = Metrics::register(&mut rt.metrics().registry());
    let gates = [
        rt.readiness().gate("fournosclusters"),
        rt.readiness().gate("clusterqueue"),
        rt.readiness().gate("resourceflavors"),
    ];
    let client = rt.client();
    let (clusters, clusters_writer) = reflector::store::<ClusterObject>();
    let (queues, queues_writer) = reflector::store::<QueueObject>();
    let (flavors, flavors_writer) = reflector::store::<FlavorObject>();
    let triggers = futures::stream::select_all([
        cache_changes(
            Api::namespaced(client.clone(), rt.namespace()),
            watcher::Config::default(),
            clusters_writer,
            "FournosCluster",
            metrics.clone(),
        )
        .boxed(),
        cache_changes(
            Api::all(client.clone()),
            watcher::Config::default().fields(&format!("metadata.name={}", settings.cluster_queue)),
            queues_writer,
            "ClusterQueue",
            metrics.clone(),
        )
        .boxed(),
        cache_changes(
            Api::all(client.clone()),
            watcher::Config::default(),
            flavors_writer,
            "ResourceFlavor",
            metrics.clone(),
        )
        .boxed(),
        hearth_runtime::leadership::on_acquired(rt.leader()).boxed(),
    ]);
    let (changes_tx, changes) = watch::channel(0u64);
    let watches = tokio::spawn(async move {
        let mut triggers = triggers;
        while triggers.next().await.is_some() {
            changes_tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    });
    let _abort_watches = AbortOnDrop(watches);

    let stores = Stores {
        clusters,
        queues,
        flavors,
    };
    let shutdown = rt.shutdown();
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        synced = caches_synced(&stores, &gates) => synced?,
    }
    tracing::info!(
        cluster_queue = %settings.cluster_queue,
        namespace = %rt.namespace(),
        "caches synced; reconciling"
    );

    let context = Context {
        writer: Writer::new(client, rt.namespace(), rt.events(), metrics.clone()),
        settings,
        stores,
        leader: rt.leader(),
        changes: changes.clone(),
        reported: Mutex::new(BTreeSet::new()),
    };
    trigger_loop(
        &context,
        changes,
        rt.reconcile_interval(),
        &shutdown,
        &metrics,
    )
    .await
}

/// Runs a reconcile on each trigger until shutdown.
async fn trigger_loop(
    context: &Context,
    mut changes: watch::Receiver<u64>,
    interval: Duration,
    shutdown: &tokio_util::sync::CancellationToken,
    metrics: &Metrics,
) -> Result<(), Error> {
    let mut resync = tokio::time::interval(interval);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut retry: Option<(Instant, Duration)> = None;
    loop {
        let retry_at = retry.map(|(at, _)| at);
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            changed = changes.changed() => if changed.is_err() {
                return Err(Error::WatchStopped { kind: "all" });
            },
            _ = resync.tick() => {}
            () = sleep_until(retry_at) => {}
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(DEBOUNCE) => {}
        }
        changes.borrow_and_update();

        let started = std::time::Instant::now();
        let result = context.reconcile().await;
        let elapsed = started.elapsed();
        metrics.reconciled(elapsed, result.as_ref().err().map(Error::reason));
        match result {
            Ok(writes) => {
                retry = None;
                if writes > 0 {
                    tracing::info!(
                        writes,
                        elapsed_ms = elapsed.as_millis() as u64,
                        "reconciled"
                    );
                } else {
                    tracing::debug!(
                        elapsed_ms = elapsed.as_millis() as u64,
                        "reconciled; nothing to write"
                    );
                }
            }
            Err(error) => {
                let delay = next_retry(retry.map(|(_, d)| d));
                tracing::warn!(
                    reason = error.reason(),
                    error = %error,
                    retry_in_ms = delay.as_millis() as u64,
                    "reconcile failed"
                );
                retry = Some((Instant::now() + delay, delay));
            }
        }
    }
}

/// The delay before the next retry, after `previous` (none: the first failure).
pub(crate) fn next_retry(previous: Option<Duration>) -> Duration {
    previous.map_or(RETRY_MIN, |d| (d * 2).min(RETRY_MAX))
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Waits for every cache to be filled, opening each one's readiness gate.
async fn caches_synced(stores: &Stores, gates: &[ReadinessGate; 3]) -> Result<(), Error> {
    async fn synced<K>(
        store: &Store<K>,
        gate: &ReadinessGate,
        kind: &'static str,
    ) -> Result<(), Error>
    where
        K: kube::runtime::reflector::Lookup + Clone + 'static,
        K::DynamicType: Eq + Hash + Clone,
    {
        store
            .wait_until_ready()
            .await
            .map_err(|_| Error::WatchStopped { kind })?;
        gate.ready();
        Ok(())
    }
    tokio::try_join!(
        synced(&stores.clusters, &gates[0], "FournosCluster"),
        synced(&stores.queues, &gates[1], "ClusterQueue"),
        synced(&stores.flavors, &gates[2], "ResourceFlavor"),
    )
    .map(drop)
}

/// A watch feeding `writer`'s cache, yielding once per change the cache takes (after
/// the initial list, once it is complete). Errors are logged and retried with backoff;
/// the stream never ends.
fn cache_changes<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: StoreWriter<K>,
    kind: &'static str,
    metrics: Metrics,
) -> impl Stream<Item = ()> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    watcher::watcher(api, config)
        .default_backoff()
        .modify(hearth_runtime::slim::strip_managed_fields)
        .reflect(writer)
        .filter_map(move |event| {
            let metrics = metrics.clone();
            async move {
                match event {
                    Ok(Event::Apply(_) | Event::Delete(_) | Event::InitDone) => Some(()),
                    Ok(Event::Init | Event::InitApply(_)) => None,
                    Err(error) => {
                        tracing::warn!(kind, %error, "watch failed; retrying with backoff");
                        metrics.watch_error(kind);
                        None
                    }
                }
            }
        })
}

/// Aborts the task when dropped, so the watches stop with the controller.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_up_to_a_minute() {
        let mut delay = None;
        let mut seen = Vec::new();
        for _ in 0..9 {
            let next = next_retry(delay);
            seen.push(next.as_secs());
            delay = Some(next);
        }
        assert_eq!(seen, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }
}
