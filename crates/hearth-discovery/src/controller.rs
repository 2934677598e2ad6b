//! The discovery controller: watches, the per-cluster probe loop and the onboarding
//! sweep, wired together.
//!
//! - Two watches, each feeding a cache: FournosClusters in the namespace, and Secrets in
//!   the secrets namespace **with the kubeconfig label selector**, so only kubeconfig
//!   Secrets are cached. Objects that do not decode are kept as [`DeserializeGuard`]
//!   errors and skipped: one bad object never stops a watch.
//! - A kube [`Controller`] over FournosClusters runs [`reconcile`]: probe when due
//!   ([`probe_due`]), plan the status ([`plan_status`]), write it only when it differs
//!   ([`diff_status`]), publish the transition Events, and requeue for the next probe.
//!   A Secret change is mapped to the clusters that use it, so rotation is probed at
//!   once. Concurrency is bounded by `--discovery-concurrency`; each probe by its deadline.
//! - The onboarding sweep ([`crate::sweep`]) runs apart, since the Controller never
//!   reconciles a cluster that does not exist yet.
//! - Reads come from the caches only. Only the lease holder probes and writes; a replica
//!   that becomes leader reconciles everything at once.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use hearth_api::names::{KUBECONFIG_SECRET_SELECTOR, controllers::DISCOVERY};
use hearth_api::{FournosCluster, FournosClusterStatus};
use hearth_runtime::Runtime;
use hearth_runtime::events::{Event, Events};
use hearth_runtime::kit::{Backoff, Cache, Changes, WatchContext};
use hearth_runtime::leadership::on_acquired;
use hearth_runtime::status::apply_status;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource as _, ResourceExt as _};
use tracing::info_span;

use crate::config::DiscoveryConfig;
use crate::credentials::Expiry;
use crate::error::Error;
use crate::memory::{Cached, Memory, Written};
use crate::metrics::Metrics;
use crate::onboarding::{ObservedCluster, SecretPattern, lock_holder};
use crate::probe::{ProbeSettings, probe};
use crate::schedule::{DueInput, ProbeDue, probe_due, probe_interval, until_due};
use crate::secret::{SecretKubeconfig, fingerprint};
use crate::status::{
    EventType, OffboardHold, PlanInput, PlannedEvent, ProbeOutcome, StatusDiff, diff_status,
    plan_status,
};

pub(crate) type ClusterObject = DeserializeGuard<FournosCluster>;
pub(crate) type SecretObject = DeserializeGuard<Secret>;

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
    pub concurrency: u16,
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
            probe: ProbeSettings::new(Duration::from_secs(config.gpu_discovery_timeout_sec)),
            failure_threshold: config.failure_threshold,
            expiry_window: config.credentials_expiry_warning,
            concurrency: u16::try_from(config.discovery_concurrency.get()).unwrap_or(u16::MAX),
            resync: resync.max(Duration::from_secs(1)),
            offboard_locked_grace: Duration::from_secs(config.offboard_locked_grace_sec),
        }
    }
}

/// Shared by the reconciles and the sweep.
pub(crate) struct Context {
    pub rt: Runtime,
    pub settings: Settings,
    pub clusters: Cache<FournosCluster>,
    pub secrets: Cache<Secret>,
    pub cluster_api: Api<FournosCluster>,
    pub events: Events,
    pub metrics: Metrics,
    /// Bumped on every change either cache sees; wakes the sweep.
    pub changes: Changes,
    /// Consecutive failures per cluster, for the retry delay.
    backoff: Backoff,
    memory: Mutex<Memory>,
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

    /// Forgets clusters that are gone (by uid).
    pub fn forget_except(&self, live: &std::collections::HashSet<String>) {
        self.lock_memory().forget_except(live);
    }

    fn lock_memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn recall(&self, cluster: &FournosCluster) -> (Option<u64>, Option<FournosClusterStatus>) {
        let uid = cluster.uid().unwrap_or_default();
        let name = cluster.name_any();
        let delivered = |written: &str| self.clusters.shows(&name, written);
        self.lock_memory().recall(&Cached {
            uid: &uid,
            resource_version: cluster.metadata.resource_version.as_deref(),
            status: cluster.status.as_ref(),
            delivered: Some(&delivered),
        })
    }

    fn remember(&self, cluster: &FournosCluster, fingerprint: u64, written: Option<Written>) {
        let uid = cluster.uid().unwrap_or_default();
        self.lock_memory().remember(&uid, fingerprint, written);
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
        concurrency = settings.concurrency,
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
    let (clusters, cluster_objects) = watch.fournos_clusters(&rt);
    // Only kubeconfig Secrets (the label selector) are cached, each trimmed to what
    // discovery reads. Listed five at a time: a Secret may be 1 MiB, and a list page is
    // held whole in memory while it is decoded.
    let (secrets, secret_objects) = Cache::watch_trimmed(
        "Secret",
        Api::namespaced(client.clone(), &settings.secrets_namespace),
        watcher::Config::default()
            .labels(KUBECONFIG_SECRET_SELECTOR)
            .page_size(SECRET_LIST_PAGE),
        rt.readiness().gate("secrets"),
        &watch,
        crate::secret::trim,
    );

    let ctx = Arc::new(Context {
        events: rt.events(),
        cluster_api: Api::namespaced(rt.write_client(), &settings.namespace),
        rt: rt.clone(),
        settings,
        clusters: clusters.clone(),
        secrets,
        metrics,
        changes: watch.changes.clone(),
        backoff: Backoff::default(),
        memory: Mutex::default(),
    });

    let mapper_ctx = ctx.clone();
    let controller = Controller::for_stream(cluster_objects, clusters.store())
        .with_config(ControllerConfig::default().concurrency(ctx.settings.concurrency))
        .watches_stream(secret_objects, move |secret| {
            clusters_using(&mapper_ctx, &secret.name_any())
        })
        .reconcile_all_on(on_acquired(rt.leader()))
        .graceful_shutdown_on(rt.shutdown().cancelled_owned());

    let reconciles = controller
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|result| async move {
            match result {
                Ok(_) => {}
                Err(kube::runtime::controller::Error::ReconcilerFailed(error, object)) => {
                    tracing::warn!(cluster = %object.name, reason = error.reason(), error = %error, "reconcile failed");
                }
                Err(error) => tracing::debug!(error = %error, "controller"),
            }
        });
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
fn clusters_using(ctx: &Context, name: &str) -> Vec<ObjectRef<ClusterObject>> {
    let namespace = &ctx.settings.namespace;
    let mut refs: Vec<ObjectRef<ClusterObject>> = ctx
        .clusters
        .state()
        .iter()
        .filter(|c| c.0.as_ref().is_ok_and(|c| c.spec.kubeconfig_secret == name))
        .map(|c| ObjectRef::new(&c.name_any()).within(namespace))
        .collect();
    if let Some(cluster) = ctx.settings.pattern.cluster_name(name) {
        let derived = ObjectRef::new(cluster).within(namespace);
        if !refs.contains(&derived) {
            refs.push(derived);
        }
    }
    refs
}

fn error_policy(object: Arc<ClusterObject>, _: &Error, ctx: Arc<Context>) -> Action {
    Action::requeue(ctx.backoff.failed(object.name_any()))
}

/// One reconcile, in its span, timed and counted.
async fn reconcile(object: Arc<ClusterObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let span = info_span!("reconcile", cluster = %object.name_any());
    let metrics = ctx.metrics.controller.clone();
    let action = metrics
        .reconcile(span, reconcile_object(&object, &ctx))
        .await?;
    ctx.backoff.succeeded(&object.name_any());
    Ok(action)
}

/// Probes one cluster if due, and writes what changed.
async fn reconcile_object(object: &ClusterObject, ctx: &Context) -> Result<Action, Error> {
    // Clusters that do not decode are reported by the sweep; nothing to probe.
    let Ok(cluster) = &object.0 else {
        return Ok(Action::await_change());
    };
    if cluster.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // Before the Secret cache is full, every Secret would look missing. The caches fill
    // together, so this waits a moment at startup and never after.
    if !ctx.wait_synced().await {
        return Ok(Action::await_change());
    }
    if !ctx.rt.is_leader() {
        // Standing by: the new leader reconciles everything when it takes over.
        return Ok(Action::await_change());
    }
    reconcile_cluster(cluster, ctx).await
}

async fn reconcile_cluster(cluster: &FournosCluster, ctx: &Context) -> Result<Action, Error> {
    let settings = &ctx.settings;
    let (current, kubeconfig) = read_kubeconfig(cluster, ctx);
    let interval = probe_interval(
        cluster.spec.gpu_discovery_interval.as_deref(),
        settings.default_interval,
    );
    let (remembered, previous) = ctx.recall(cluster);

    let due = probe_due(&DueInput {
        now: Timestamp::now(),
        interval,
        status: previous.as_ref(),
        remembered,
        fingerprint: current,
        secret: kubeconfig.view(),
        generation: cluster.metadata.generation,
    });
    let kubeconfig_changed = match due {
        ProbeDue::After(wait) => {
            tracing::debug!(
                wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                "not due yet"
            );
            ctx.remember(cluster, current, None);
            return Ok(Action::requeue(wait.min(settings.resync)));
        }
        ProbeDue::Now { kubeconfig_changed } => kubeconfig_changed,
    };

    let (outcome, credentials, elapsed) = run_probe(kubeconfig, ctx).await;
    let secret_ref = ctx.secret_ref(&cluster.spec.kubeconfig_secret);
    // Only a cluster the sweep would delete has its offboarding held back.
    let holder = ObservedCluster::is_auto_discovered(cluster.metadata.labels.as_ref())
        .then(|| lock_holder(cluster))
        .flatten();
    let plan = plan_status(&PlanInput {
        outcome: &outcome,
        previous: previous.as_ref(),
        generation: cluster.metadata.generation,
        now: Timestamp::now(),
        secret: &secret_ref,
        credentials,
        interval,
        failure_threshold: settings.failure_threshold,
        expiry_window: settings.expiry_window,
        kubeconfig_changed,
        offboard_hold: holder.as_deref().map(|holder| OffboardHold {
            holder,
            grace: settings.offboard_locked_grace,
        }),
    });
    let diff = diff_status(previous.as_ref(), &plan.status);
    tracing::event!(
        target: "hearth_discovery::probe",
        tracing::Level::DEBUG,
        result = outcome.result_label(),
        elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        kubeconfig_changed,
        ?diff,
        "probed"
    );

    let written = match diff {
        StatusDiff::Same => None,
        StatusDiff::TimestampsOnly | StatusDiff::Changed => {
            if !ctx.rt.is_leader() {
                return Ok(Action::await_change());
            }
            match write_status(ctx, cluster, &plan.status).await? {
                Some(written) => Some(written),
                // Deleted while it was probed: nothing left to report on.
                None => return Ok(Action::await_change()),
            }
        }
    };
    if diff == StatusDiff::Changed {
        log_status_change(&outcome, &plan.status);
    }
    ctx.remember(cluster, current, written);
    publish_events(cluster, ctx, &plan.events).await;

    let next = until_due(
        plan.status.next_probe_at.as_ref().map(|t| t.0),
        Timestamp::now(),
    );
    Ok(Action::requeue(
        next.min(settings.resync).max(Duration::from_millis(100)),
    ))
}

/// The cluster's kubeconfig as the Secret cache shows it, with the fingerprint that tells
/// a rotation apart.
fn read_kubeconfig(cluster: &FournosCluster, ctx: &Context) -> (u64, SecretKubeconfig) {
    let secret_name = &cluster.spec.kubeconfig_secret;
    let cached = ctx.secret(secret_name);
    let secret = match cached.as_deref().map(|s| &s.0) {
        None => None,
        Some(Ok(secret)) => Some(secret),
        Some(Err(_)) => {
            // Never print the decode error: it may quote the Secret's data.
            tracing::warn!(secret = %ctx.secret_ref(secret_name), "the Secret does not decode; treating it as holding no kubeconfig");
            None
        }
    };
    let current = fingerprint(secret_name, secret);
    let kubeconfig = match (cached.is_some(), secret) {
        (true, None) => SecretKubeconfig::KeyMissing,
        (_, secret) => SecretKubeconfig::read_for(
            secret,
            secret_name,
            &cluster.name_any(),
            &ctx.settings.pattern,
        ),
    };
    (current, kubeconfig)
}

/// Probes a usable kubeconfig; a missing or refused one is the outcome without a call.
async fn run_probe(
    kubeconfig: SecretKubeconfig,
    ctx: &Context,
) -> (ProbeOutcome, Option<Expiry>, Duration) {
    let started = std::time::Instant::now();
    let (outcome, credentials) = match kubeconfig {
        SecretKubeconfig::SecretMissing => (ProbeOutcome::SecretMissing, None),
        SecretKubeconfig::KeyMissing => (ProbeOutcome::KeyMissing, None),
        SecretKubeconfig::Invalid(error) => (ProbeOutcome::Invalid(error), None),
        SecretKubeconfig::Usable { kubeconfig, expiry } => {
            (probe(&kubeconfig, ctx.settings.probe).await, expiry)
        }
    };
    let elapsed = started.elapsed();
    ctx.metrics.probed(outcome.result_label(), elapsed);
    (outcome, credentials, elapsed)
}

fn log_status_change(outcome: &ProbeOutcome, status: &FournosClusterStatus) {
    tracing::info!(
        result = outcome.result_label(),
        kubeconfig_status = status.kubeconfig_status.map_or("", |s| s.as_str()),
        gpus = status.gpu_summary.as_deref().unwrap_or_default(),
        consecutive_failures = status.hardware.as_ref().map(|h| h.consecutive_failures),
        "status changed"
    );
}

async fn publish_events(cluster: &FournosCluster, ctx: &Context, events: &[PlannedEvent]) {
    let reference = cluster.object_ref(&());
    for event in events {
        let event = Event {
            warning: event.type_ == EventType::Warning,
            reason: event.reason,
            action: "Probe",
            note: event.message.clone(),
        };
        ctx.events.publish(&reference, &event).await;
    }
}

/// Applies discovery's status fields; `None` when the cluster is gone.
async fn write_status(
    ctx: &Context,
    cluster: &FournosCluster,
    status: &FournosClusterStatus,
) -> Result<Option<Written>, Error> {
    let name = format!("{}/{}", ctx.settings.namespace, cluster.name_any());
    let value = serde_json::to_value(status).map_err(|source| Error::StatusEncode {
        cluster: name.clone(),
        source,
    })?;
    match apply_status(&ctx.cluster_api, cluster, DISCOVERY, value).await {
        Ok(applied) => {
            ctx.metrics.status_write(true);
            Ok(Some(Written {
                resource_version: applied.resource_version(),
                status: status.clone(),
            }))
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(source) => {
            ctx.metrics.status_write(false);
            Err(Error::StatusWrite {
                cluster: name,
                source,
            })
        }
    }
}
