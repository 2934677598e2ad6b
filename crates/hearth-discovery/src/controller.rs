//! The discovery controller: watches, the per-cluster probe loop and the onboarding
//! sweep, wired together.
//!
//! - Two watches, each feeding a cache: FournosClusters in the namespace, and Secrets in
//!   the secrets namespace **with the kubeconfig label selector**, so only kubeconfig
//!   Secrets are cached. Objects that do not decode are kept as [`DeserializeGuard`]
//!   errors and skipped: one bad object never stops a watch.
//! - A kube [`Controller`] over FournosClusters runs [`crate::reconcile`] through the
//!   kit's [`Runner`] (span, metrics, per-cluster retry backoff). A Secret change is
//!   mapped to the clusters that use it, so rotation is probed at once. Reconciles run
//!   [`WRITES_IN_FLIGHT`] at a time, node pages from targets `--discovery-concurrency`
//!   at a time (memory), each probe within its deadline.
//! - The onboarding sweep ([`crate::sweep`]) runs apart, since the Controller never
//!   reconciles a cluster that does not exist yet.
//! - Reads come from the caches only. Only the lease holder probes and writes; a replica
//!   that becomes leader reconciles everything at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;

use futures::StreamExt as _;
use std::time::Duration;

use hearth_api::names::KUBECONFIG_SECRET_SELECTOR;
use hearth_api::{FournosCluster, FournosClusterStatus};

use crate::cluster_cache::CachedCluster;
use crate::secret::CachedSecret;
use hearth_runtime::Runtime;
use hearth_runtime::events::Events;
use hearth_runtime::kit::{Cache, Changes, RunTriggers, Runner, WRITES_IN_FLIGHT, WatchContext};
use hearth_runtime::leadership::on_acquired;
use kube::ResourceExt as _;
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::watcher;

use crate::config::DiscoveryConfig;
use crate::memory::{Cached, Memory, Written};
use crate::metrics::Metrics;
use crate::onboarding::SecretPattern;
use crate::probe::ProbeSettings;

pub(crate) type ClusterObject = DeserializeGuard<CachedCluster>;
pub(crate) type SecretObject = DeserializeGuard<CachedSecret>;

/// Clusters reconciled at once.
const RECONCILES_AT_ONCE: usize = WRITES_IN_FLIGHT;

/// Secrets per list page: at most about 7 MiB of JSON at a time.
const SECRET_LIST_PAGE: u32 = 5;

/// Discovery's settings, resolved from the command line.
#[derive(Debug, Clone)]
pub struct Settings {
    pub namespace: String,
    pub secrets_namespace: String,
    pub pattern: SecretPattern,
    pub default_interval: Duration,
    pub probe: ProbeSettings,
    pub failure_threshold: u32,
    pub expiry_window: Duration,
    /// Node pages read from targets at once (`--discovery-concurrency`).
    pub pages_at_once: usize,
    /// Resync safety net: no cluster waits longer than this for a reconcile.
    pub resync: Duration,
    /// How long a locked auto-discovered cluster outlives its Secret.
    pub offboard_locked_grace: Duration,
}

impl Settings {
    pub fn new(config: &DiscoveryConfig, namespace: &str, resync: Duration) -> Self {
        Self {
            namespace: namespace.to_owned(),
            secrets_namespace: config.secrets_namespace.clone(),
            // clap has checked the placeholder already.
            pattern: SecretPattern::new(&config.kubeconfig_secret_pattern)
                .expect("the pattern holds {cluster} once"),
            default_interval: Duration::from_secs(config.gpu_discovery_default_interval_sec),
            probe: ProbeSettings::with_pages_at_once(
                Duration::from_secs(config.gpu_discovery_timeout_sec),
                config.discovery_concurrency.get(),
            ),
            failure_threshold: config.failure_threshold,
            expiry_window: config.credentials_expiry_warning,
            pages_at_once: config.discovery_concurrency.get(),
            resync: resync.max(Duration::from_secs(1)),
            offboard_locked_grace: Duration::from_secs(config.offboard_locked_grace_sec),
        }
    }
}

/// Shared by the reconciles and the sweep.
pub(crate) struct Context {
    pub rt: Runtime,
    pub settings: Settings,
    pub clusters: Cache<CachedCluster>,
    pub secrets: Cache<CachedSecret>,
    pub cluster_api: Api<FournosCluster>,
    pub events: Events,
    pub metrics: Metrics,
    /// Wakes the sweep: bumped by every Secret event and by the cluster events that
    /// change what the sweep reads ([`Context::watched`]).
    pub changes: Changes,
    memory: Mutex<Memory>,
    /// What the sweep read of each cached cluster when its last event came (a hash of
    /// [`crate::sweep::observe_cluster`]), by name.
    swept: Mutex<HashMap<String, u64>>,
}

impl Context {
    /// Waits until both caches hold a full list; false if that never happens (the
    /// controller is stopping).
    pub async fn wait_synced(&self) -> bool {
        let shutdown = self.rt.shutdown();
        tokio::select! {
            synced = async { tokio::try_join!(self.clusters.synced(), self.secrets.synced()) } => synced.is_ok(),
            () = shutdown.cancelled() => false,
        }
    }

    /// The cached labeled Secret named `name`, if any.
    pub fn secret(&self, name: &str) -> Option<Arc<SecretObject>> {
        self.secrets.named(name)
    }

    /// `namespace/name` of a Secret, for messages.
    pub fn secret_ref(&self, name: &str) -> String {
        format!("{}/{name}", self.settings.secrets_namespace)
    }

    /// Forgets clusters that are gone (by uid), and what the sweep read of clusters no
    /// longer cached (a re-list delivers no event for what went meanwhile).
    pub fn forget_except(&self, live: impl Fn(&str) -> bool) {
        self.lock_memory().forget_except(live);
        self.swept
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .retain(|name, _| self.clusters.named(name).is_some());
    }

    fn lock_memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn recall(
        &self,
        cluster: &CachedCluster,
    ) -> (Option<u64>, Option<FournosClusterStatus>) {
        let name = cluster.metadata.name.as_deref().unwrap_or_default();
        let shows = |written: &str| self.clusters.shows(name, written);
        self.lock_memory().recall(&cached_view(cluster, &shows))
    }

    /// After a reconcile: its fingerprint and write, the write forgotten at once if the
    /// watch delivered it already (it can beat the apiserver's answer).
    pub(crate) fn remember(
        &self,
        cluster: &CachedCluster,
        fingerprint: u64,
        written: Option<Written>,
    ) {
        let uid = cluster.metadata.uid.as_deref().unwrap_or_default();
        let wrote = written.is_some();
        let mut memory = self.lock_memory();
        memory.remember(uid, fingerprint, written);
        let name = cluster.metadata.name.as_deref().unwrap_or_default();
        if let Some(current) = wrote.then(|| self.clusters.named(name)).flatten()
            && let Ok(current) = &current.0
        {
            let delivered = |written: &str| self.clusters.delivered(name, written);
            memory.forget_delivered(&cached_view(current, &delivered));
        }
    }

    /// On each watch event of a cluster (the cache holds it already): forgets the write
    /// it delivers, so a written status is not kept beside the cached one it became, and
    /// wakes the sweep only when what the sweep reads of the cluster changed, or it went.
    /// In an onboarding burst most events are status writes (discovery's, kueue-sync's,
    /// lock-manager's), and a sweep reads every cluster: waking it for each would make
    /// the burst cost clusters × events.
    pub(crate) fn watched(&self, name: &str) {
        let cached = self.clusters.named(name);
        if let Some(cluster) = cached.as_deref().and_then(|c| c.0.as_ref().ok()) {
            let mut memory = self.lock_memory();
            if memory.awaits_any() {
                let delivered = |written: &str| self.clusters.delivered(name, written);
                memory.forget_delivered(&cached_view(cluster, &delivered));
            }
        }
        let seen = cached.as_deref().map(crate::sweep::sweep_fingerprint);
        let mut swept = self
            .swept
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let before = match seen {
            Some(seen) => swept.insert(name.to_owned(), seen),
            None => swept.remove(name),
        };
        if before != seen {
            self.changes.bump();
        }
    }
}

/// `cluster` as [`Memory`] sees it; `delivered` says which versions the watch delivered.
fn cached_view<'a>(cluster: &'a CachedCluster, delivered: &'a dyn Fn(&str) -> bool) -> Cached<'a> {
    Cached {
        uid: cluster.metadata.uid.as_deref().unwrap_or_default(),
        resource_version: cluster.metadata.resource_version.as_deref(),
        status: cluster.status.as_ref(),
        delivered: Some(delivered),
    }
}

/// Runs discovery until shutdown.
pub async fn run(rt: Runtime, config: DiscoveryConfig) {
    let settings = Settings::new(&config, rt.namespace(), rt.reconcile_interval());
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
    let metrics = {
        let mut registry = rt.metrics().registry();
        Metrics::register(&mut registry)
    };
    let client = rt.client();
    let watch = WatchContext::new(&metrics.controller);
    // Each cluster and Secret is cached as the view discovery reads (`cluster_cache`,
    // `secret`): a trimmed Kubernetes object costs three times as much.
    let (clusters, cluster_objects) = Cache::watch(
        "FournosCluster",
        Api::namespaced(client.clone(), &settings.namespace),
        watcher::Config::default(),
        rt.readiness().gate("fournosclusters"),
        &watch,
    );
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

    let ctx = Arc::new(Context {
        events: rt.events(),
        cluster_api: Api::namespaced(rt.write_client(), &settings.namespace),
        rt: rt.clone(),
        settings,
        clusters: clusters.clone(),
        secrets,
        metrics,
        changes: Changes::default(),
        memory: Mutex::default(),
        swept: Mutex::default(),
    });
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

/// While this replica stood by, the leader wrote statuses this one never saw written:
/// what it remembers of its own writes from before is stale once leadership moves.
async fn forget_writes_when_leadership_moves(ctx: Arc<Context>) {
    let mut leader = ctx.rt.leader();
    let shutdown = ctx.rt.shutdown();
    loop {
        tokio::select! {
            changed = leader.changed() => {
                if changed.is_err() {
                    return;
                }
                ctx.lock_memory().forget_writes();
            }
            () = shutdown.cancelled() => return,
        }
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
