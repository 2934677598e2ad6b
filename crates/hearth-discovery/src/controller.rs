//! The discovery controller: watches, the per-cluster probe loop and the onboarding
//! sweep, wired together.
//!
//! - Two watches, each feeding a cache: FournosClusters in the namespace, and Secrets in
//!   the secrets namespace **with the kubeconfig label selector**, so only kubeconfig
//!   Secrets are cached. Objects that do not decode are kept as [`DeserializeGuard`]
//!   errors and skipped: one bad object never stops a watch.
//! - The kit's [`Runner`] runs [`crate::reconcile`] for each FournosCluster (span,
//!   metrics, per-cluster retry backoff), each in a task of its own. A Secret change is
//!   mapped to the clusters that use it, so rotation is probed at once. Reconciles run
//!   [`WRITES_IN_FLIGHT`] at a time, node pages from targets `--discovery-concurrency`
//!   at a time (memory), each probe within its deadline.
//! - The onboarding sweep ([`crate::sweep`]) runs apart, since no reconcile runs for a
//!   cluster that does not exist yet. What both share is [`crate::context`].
//! - Reads come from the caches only. Only the lease holder probes and writes; a replica
//!   that becomes leader reconciles everything at once.

use std::sync::Arc;

use futures::StreamExt as _;
use hearth_api::names::KUBECONFIG_SECRET_SELECTOR;
use hearth_runtime::Runtime;
use hearth_runtime::kit::{Cache, RunTriggers, Runner, WRITES_IN_FLIGHT, WatchContext};
use hearth_runtime::leadership::on_acquired;
use kube::ResourceExt as _;
use kube::api::Api;
use kube::runtime::watcher;

use crate::config::DiscoveryConfig;
use crate::context::{Context, Settings};
use crate::metrics::Metrics;

/// Clusters reconciled at once.
const RECONCILES_AT_ONCE: usize = WRITES_IN_FLIGHT;

/// Secrets per list page: at most about 7 MiB of JSON at a time.
const SECRET_LIST_PAGE: u32 = 5;

/// Runs discovery until shutdown.
pub async fn run(rt: Runtime, config: DiscoveryConfig) {
    let settings = Settings::new(&config, rt.namespace(), rt.reconcile_interval());
    log_settings(&settings);
    let metrics = {
        let mut registry = rt.metrics().registry();
        Metrics::register(&mut registry)
    };
    let client = rt.client();
    let watch = WatchContext::new(&metrics.controller);
    // Each cluster and Secret is cached as the view discovery reads (`cluster_cache`,
    // `secret`): a trimmed Kubernetes object costs three times as much.
    let (clusters, cluster_objects) = watch.fournos_clusters(&rt);
    Metrics::register_cluster_gauges(&mut rt.metrics().registry(), clusters.clone());
    // Only kubeconfig Secrets (the label selector) are cached, each trimmed to what
    // discovery reads. Listed five at a time: a Secret may be 1 MiB, and a list page is
    // held whole in memory while it is decoded.
    let (secrets, secret_objects) = Cache::watch(
        "Secret",
        Api::namespaced(client.clone(), &settings.secrets_namespace),
        watcher::Config::default()
            .labels(KUBECONFIG_SECRET_SELECTOR)
            .page_size(SECRET_LIST_PAGE),
        rt.readiness().gate("secrets"),
        &watch,
    );

    let ctx = Arc::new(Context::new(
        &rt,
        settings,
        clusters.clone(),
        secrets,
        metrics,
    ));
    let watched = ctx.clone();
    let cluster_objects = cluster_objects
        .inspect(move |object| {
            if let Ok(object) = object {
                watched.watched(&object.name_any());
            }
        })
        .boxed();

    let mapper_ctx = ctx.clone();
    let triggers = RunTriggers {
        // A Secret change is probed at once by the clusters that use it (rotation).
        related: vec![
            secret_objects
                .filter_map(move |secret| {
                    // Every Secret event is the sweep's business (onboarding, offboarding).
                    mapper_ctx.changes.bump();
                    std::future::ready(
                        secret
                            .ok()
                            .map(|s| clusters_using(&mapper_ctx, &s.name_any())),
                    )
                })
                .boxed(),
        ],
        everything: on_acquired(rt.leader()).boxed(),
        // Reconciles (each a probe and then one status write) run WRITES_IN_FLIGHT at a
        // time: what bounds discovery's writes, so 100 new targets are probed in a few
        // rounds, not one queue. Memory from targets is bounded apart, per node page.
        concurrency: RECONCILES_AT_ONCE,
        shutdown: rt.shutdown(),
    };
    let reconciles = Runner::new(ctx.metrics.controller.clone()).run(
        clusters.clone(),
        cluster_objects,
        triggers,
        ctx.clone(),
        |object, ctx| async move { crate::reconcile::reconcile(&object, &ctx).await },
    );
    let sweeps = crate::sweep::run(ctx.clone());
    let forget = forget_writes_when_leadership_moves(ctx.clone());
    tokio::join!(reconciles, sweeps, forget);
}

/// The settings discovery runs with, once at start.
fn log_settings(settings: &Settings) {
    tracing::info!(
        namespace = %settings.namespace,
        secrets_namespace = %settings.secrets_namespace,
        pattern = settings.pattern.as_str(),
        default_interval_sec = settings.default_interval.as_secs(),
        timeout_sec = settings.probe.timeout.as_secs(),
        pages_at_once = settings.pages_at_once,
        reconciles_at_once = RECONCILES_AT_ONCE,
        failure_threshold = settings.failure_threshold,
        offboard_locked_grace_sec = settings.offboard_locked_grace.as_secs(),
        "discovery settings"
    );
}

/// While this replica stood by, the leader wrote statuses this one never saw written:
/// what it remembers of its own writes from before is stale once leadership moves.
async fn forget_writes_when_leadership_moves(ctx: Arc<Context>) {
    let mut leader = ctx.rt.leader();
    let shutdown = ctx.rt.shutdown();
    while tokio::select! {
        changed = leader.changed() => changed.is_ok(),
        () = shutdown.cancelled() => false,
    } {
        ctx.forget_writes();
    }
}

/// The clusters whose probe a change of Secret `name` concerns: those naming it, and
/// the one the pattern derives from it (if it exists, it is reconciled).
fn clusters_using(ctx: &Context, name: &str) -> Vec<String> {
    let mut names: Vec<String> = ctx
        .clusters
        .state()
        .iter()
        .filter(|c| c.0.as_ref().is_ok_and(|c| c.spec.kubeconfig_secret == name))
        .map(|c| c.name_any())
        .collect();
    if let Some(cluster) = ctx.settings.pattern.cluster_name(name)
        && !names.iter().any(|n| n == cluster)
    {
        names.push(cluster.to_owned());
    }
    names
}
