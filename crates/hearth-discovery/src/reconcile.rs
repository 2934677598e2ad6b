//! One reconcile of one FournosCluster: probe when due ([`probe_due`]), plan the status
//! ([`plan_status`]), write it only when it differs ([`diff_status`]), publish the
//! transition Events, and requeue for the next probe.
//!
//! Nothing here waits but the probe and the writes: a cluster that is due is probed at
//! once, and the requeue is the time until its next probe (at most the resync interval,
//! at least 100 ms so that a clock step never spins it).

use std::sync::Arc;
use std::time::Duration;

use hearth_api::names::controllers::DISCOVERY;
use hearth_api::{DiscoveryStatus, FournosClusterStatus};
use hearth_runtime::events::Event;
use hearth_runtime::kit::Next;
use hearth_runtime::status::apply_status;
use jiff::Timestamp;
use kube::{Resource as _, ResourceExt as _};

use crate::cluster_cache::{CachedCluster, ClusterObject, lock_holder};
use crate::context::Context;
use crate::credentials::Expiry;
use crate::error::Error;
use crate::memory::Written;
use crate::probe::probe;
use crate::schedule::{DueInput, Known, ProbeDue, probe_due, probe_interval, until_due};
use crate::secret::{SecretKubeconfig, SecretObject, fingerprint};
use crate::source::{Source, SourceInput, plan_source, status_behind};
use crate::status::{OffboardHold, PlanInput, ProbeOutcome, StatusDiff, diff_status, plan_status};
use hearth_api::conditions::find;
use hearth_api::names::condition_types::KUBECONFIG_VALID;
use hearth_api::reasons::KubeconfigValidReason;

/// Probes one cluster if due, and writes what changed. Run by the kit's
/// [`Runner`](hearth_runtime::kit::Runner): span, metrics and retries are its own.
pub(crate) async fn reconcile(object: &ClusterObject, ctx: &Context) -> Result<Next, Error> {
    // Clusters that do not decode are reported by the sweep; nothing to probe.
    let Ok(cluster) = &object.0 else {
        return Ok(Next::OnChange);
    };
    // Before the Secret cache is full, every Secret would look missing. The caches fill
    // together, so this waits a moment at startup and never after. Not leading: standing
    // by, as the new leader reconciles everything when it takes over.
    if cluster.meta().deletion_timestamp.is_some()
        || !ctx.wait_synced().await
        || !ctx.rt.is_leader()
    {
        return Ok(Next::OnChange);
    }
    reconcile_cluster(cluster, ctx).await
}

async fn reconcile_cluster(cluster: &CachedCluster, ctx: &Context) -> Result<Next, Error> {
    let settings = &ctx.settings;
    let (current, secret) = secret_of(cluster, ctx);
    let interval = probe_interval(
        cluster.spec.gpu_discovery_interval.as_deref(),
        settings.default_interval,
    );
    let (remembered, previous) = ctx.recall(cluster);
    let source = source_of(cluster, ctx, previous.as_ref());

    // The kubeconfig is read (decoded and validated) only when needed: see `Known`.
    let mut kubeconfig = None;
    let known = match remembered {
        Some(fingerprint) => Known::Probed(fingerprint),
        None => Known::Unprobed(
            kubeconfig
                .insert(read_kubeconfig(cluster, ctx, secret.as_deref()))
                .view(),
        ),
    };
    let due = probe_due(&DueInput {
        now: Timestamp::now(),
        interval,
        status: previous.as_ref(),
        known,
        fingerprint: current,
        generation: cluster.metadata.generation,
        source_behind: source_behind(&source, previous.as_ref()),
    });
    let kubeconfig_changed = match due {
        ProbeDue::After(wait) => {
            tracing::debug!(
                wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                "not due yet"
            );
            ctx.remember(cluster, current, None);
            return Ok(Next::After(wait.min(settings.resync)));
        }
        ProbeDue::Now { kubeconfig_changed } => kubeconfig_changed,
    };

    let kubeconfig = kubeconfig.unwrap_or_else(|| read_kubeconfig(cluster, ctx, secret.as_deref()));
    let (outcome, credentials, elapsed) = run_probe(&cluster.name_any(), kubeconfig, ctx).await;
    let probed = Probed {
        outcome,
        credentials,
        elapsed,
        kubeconfig_changed,
        interval,
    };
    let Some(written) = plan_and_write(cluster, ctx, previous.as_ref(), &source, &probed).await?
    else {
        // Deleted while it was probed, or no longer the leader: nothing left to do.
        return Ok(Next::OnChange);
    };
    ctx.remember(cluster, current, written.write);
    publish_events(cluster, ctx, &written.events);

    let next = until_due(written.next_probe_at, Timestamp::now());
    Ok(Next::After(
        next.min(settings.resync).max(Duration::from_millis(100)),
    ))
}

/// Whether the status lags behind where the cluster came from (see [`status_behind`]).
fn source_behind(source: &Source, previous: Option<&FournosClusterStatus>) -> bool {
    status_behind(
        source,
        previous.and_then(|s| s.source_secret.as_ref()),
        previous
            .and_then(|s| find(&s.conditions, KUBECONFIG_VALID))
            .and_then(|c| KubeconfigValidReason::parse(&c.reason)),
    )
}

/// What a probe of one cluster found, and how it was asked.
struct Probed {
    outcome: ProbeOutcome,
    credentials: Option<Expiry>,
    elapsed: Duration,
    kubeconfig_changed: bool,
    interval: Duration,
}

/// What a reconcile wrote and has to say.
struct Done {
    /// The status write, when there was one.
    write: Option<Written>,
    events: Vec<Event>,
    next_probe_at: Option<Timestamp>,
}

/// Plans the status after `probed` and writes it when it differs; `None` when the
/// cluster is gone or this replica stopped leading.
async fn plan_and_write(
    cluster: &CachedCluster,
    ctx: &Context,
    previous: Option<&FournosClusterStatus>,
    source: &Source,
    probed: &Probed,
) -> Result<Option<Done>, Error> {
    let settings = &ctx.settings;
    let secret_ref = ctx.secret_ref(&cluster.spec.kubeconfig_secret);
    // Only a cluster the sweep would delete has its offboarding held back.
    let holder = source
        .record
        .is_some()
        .then(|| lock_holder(cluster))
        .flatten();
    let plan = plan_status(&PlanInput {
        outcome: &probed.outcome,
        previous,
        generation: cluster.metadata.generation,
        now: Timestamp::now(),
        secret: &secret_ref,
        credentials: probed.credentials,
        interval: probed.interval,
        failure_threshold: settings.failure_threshold,
        expiry_window: settings.expiry_window,
        kubeconfig_changed: probed.kubeconfig_changed,
        offboard_hold: holder.as_deref().map(|holder| OffboardHold {
            holder,
            grace: settings.offboard_locked_grace,
        }),
        source,
        secrets_namespace: &settings.secrets_namespace,
    });
    let diff = diff_status(previous, &plan.status);
    tracing::event!(
        target: "hearth_discovery::probe",
        tracing::Level::DEBUG,
        cluster = %cluster.name_any(),
        result = probed.outcome.result_label(),
        elapsed_ms = u64::try_from(probed.elapsed.as_millis()).unwrap_or(u64::MAX),
        kubeconfig_changed = probed.kubeconfig_changed,
        ?diff,
        "probed"
    );
    let write = match diff {
        StatusDiff::Same => None,
        StatusDiff::TimestampsOnly | StatusDiff::Changed => {
            if !ctx.rt.is_leader() {
                return Ok(None);
            }
            match write_status(ctx, cluster, &plan.status).await? {
                Some(written) => Some(written),
                None => return Ok(None),
            }
        }
    };
    if diff == StatusDiff::Changed {
        log_status_change(&probed.outcome, &plan.status);
    }
    Ok(Some(Done {
        write,
        events: plan.events,
        next_probe_at: plan.status.next_probe_at.map(|t| t.0),
    }))
}

/// The cluster's Secret as cached (`None` when it does not decode), with the
/// fingerprint that tells a rotation apart.
fn secret_of(cluster: &CachedCluster, ctx: &Context) -> (u64, Option<Arc<SecretObject>>) {
    let secret_name = &cluster.spec.kubeconfig_secret;
    let cached = ctx.secret(secret_name);
    let decoded = match cached.as_deref().map(|s| &s.0) {
        None => None,
        Some(Ok(secret)) => Some(secret),
        Some(Err(_)) => {
            // Never print the decode error: it may quote the Secret's data.
            tracing::warn!(secret = %ctx.secret_ref(secret_name), "the Secret does not decode; treating it as holding no kubeconfig");
            None
        }
    };
    (fingerprint(secret_name, decoded), cached)
}

/// Where the cluster came from ([`plan_source`]), from what status recorded (`previous`),
/// what this replica created it from, and the cached Secrets.
fn source_of(
    cluster: &CachedCluster,
    ctx: &Context,
    previous: Option<&FournosClusterStatus>,
) -> Source {
    let created = ctx.created(cluster.metadata.uid.as_deref().unwrap_or_default());
    let name = cluster.name_any();
    let input = SourceInput {
        cluster: &name,
        auto_discovered: cluster.auto_discovered,
        spec_secret: &cluster.spec.kubeconfig_secret,
        recorded: previous.and_then(|s| s.source_secret.as_ref()),
        created_from: created.as_ref(),
        pattern: &ctx.settings.pattern,
    };
    plan_source(&input, |secret| {
        ctx.secret(secret).and_then(|s| s.meta().uid.clone())
    })
}

/// What the cached Secret (from [`secret_of`]) holds for the cluster: decoding and
/// validating its kubeconfig is the CPU-heavy part of a look at a cluster.
fn read_kubeconfig(
    cluster: &CachedCluster,
    ctx: &Context,
    cached: Option<&SecretObject>,
) -> SecretKubeconfig {
    let secret_name = &cluster.spec.kubeconfig_secret;
    match cached.map(|s| s.0.as_ref()) {
        Some(Err(_)) => SecretKubeconfig::KeyMissing,
        decoded => SecretKubeconfig::read_for(
            decoded.and_then(Result::ok),
            secret_name,
            &cluster.name_any(),
            &ctx.settings.pattern,
        ),
    }
}

/// Probes a usable kubeconfig; a missing or refused one is the outcome without a call.
async fn run_probe(
    cluster: &str,
    kubeconfig: SecretKubeconfig,
    ctx: &Context,
) -> (ProbeOutcome, Option<Expiry>, Duration) {
    // With `probed`, the two timestamps the benchmark's stage table reads.
    tracing::event!(
        target: "hearth_discovery::probe",
        tracing::Level::DEBUG,
        cluster,
        "probe started"
    );
    let started = std::time::Instant::now();
    let (outcome, credentials) = match kubeconfig {
        SecretKubeconfig::SecretMissing => (ProbeOutcome::SecretMissing, None),
        SecretKubeconfig::KeyMissing => (ProbeOutcome::KeyMissing, None),
        SecretKubeconfig::Invalid(error) => (ProbeOutcome::Invalid(error), None),
        SecretKubeconfig::Usable { kubeconfig, expiry } => {
            (probe(&kubeconfig, &ctx.settings.probe).await, expiry)
        }
    };
    let elapsed = started.elapsed();
    ctx.metrics.probed(outcome.result_label(), elapsed);
    (outcome, credentials, elapsed)
}

fn log_status_change(outcome: &ProbeOutcome, status: &DiscoveryStatus) {
    tracing::info!(
        result = outcome.result_label(),
        kubeconfig_status = status.kubeconfig_status.map_or("", |s| s.as_str()),
        gpus = status.gpu_summary.as_deref().unwrap_or_default(),
        consecutive_failures = status.hardware.as_ref().map(|h| h.consecutive_failures),
        "status changed"
    );
}

/// The Events of a probe, in the background: the status they report is written.
fn publish_events(cluster: &CachedCluster, ctx: &Context, events: &[Event]) {
    let reference = cluster.object_ref(&());
    for event in events {
        ctx.events
            .publish_in_background(reference.clone(), event.clone());
    }
}

/// Applies discovery's status fields; `None` when the cluster is gone (deleted, or
/// replaced by another of its name).
async fn write_status(
    ctx: &Context,
    cluster: &CachedCluster,
    status: &DiscoveryStatus,
) -> Result<Option<Written>, Error> {
    let name = ctx.cluster_ref(&cluster.name_any());
    let value = serde_json::to_value(status).map_err(|source| Error::StatusEncode {
        cluster: name.clone(),
        source,
    })?;
    match apply_status(&ctx.cluster_api, cluster, DISCOVERY, value).await {
        Ok(Some(applied)) => {
            ctx.metrics.status_write(true);
            Ok(Some(Written {
                resource_version: applied.resource_version(),
                status: status.clone().into(),
            }))
        }
        Ok(None) => Ok(None),
        Err(source) => {
            ctx.metrics.status_write(false);
            Err(Error::StatusWrite {
                cluster: name,
                source,
            })
        }
    }
}
