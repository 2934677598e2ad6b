//! What every Hearth controller shares: command-line/env configuration, logs and OTLP
//! traces, the admin server (`/healthz`, `/readyz`, `/metrics`), leader election and
//! shutdown. A controller binary parses its arguments and hands over to [`run`]:
//!
//! ```no_run
//! # use clap::Parser;
//! #[derive(Parser)]
//! struct Args {
//!     #[command(flatten)]
//!     common: hearth_runtime::CommonArgs,
//! }
//!
//! fn main() -> anyhow::Result<()> {
//!     let args = Args::parse();
//!     hearth_runtime::block_on(hearth_runtime::run("hearth-example", args.common, |rt| async move {
//!         let synced = rt.readiness().gate("fournosclusters");
//!         // ... start watches; call synced.ready() once their caches are full;
//!         // write only while rt.is_leader() ...
//!         synced.ready();
//!         rt.shutdown().cancelled().await;
//!         Ok(())
//!     }))
//! }
//! ```

mod admin;
pub mod args;
mod client;
mod connection;
pub mod events;
pub mod kit;
pub mod leadership;
mod lease;
pub mod log_cap;
mod metrics;
mod mutex;
mod otlp_client;
mod readiness;
mod shutdown;
pub mod status;
pub mod telemetry;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod write_activity;

use std::{future::Future, sync::Arc, time::Duration};

use anyhow::Context as _;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

pub use crate::{
    admin::{AdminError, AdminServer, AdminThread, Liveness},
    args::{CommonArgs, LogFormat, LogLevel},
    client::{ClientConfigError, WriteRefused, is_not_leader, kube_config},
    lease::{LeaseError, LeaseSettings, MAX_WRITE_TIMEOUT},
    metrics::{Metrics, OPENMETRICS_CONTENT_TYPE, encode_registry},
    mutex::lock,
    readiness::{Readiness, ReadinessGate},
    shutdown::{SignalError, on_signal},
    telemetry::{OtlpConfig, Telemetry, TelemetryConfig, TelemetryError},
};

/// Runs `future` (a controller's [`run`]) to completion on the Tokio runtime every
/// controller uses: one thread. The work is waiting on the apiserver and the targets,
/// and the CPU it takes (decoding watch events, planning a few thousand objects) is
/// milliseconds per batch, so a second worker would not make onboarding faster; but
/// every worker thread gets a malloc arena of its own that keeps what it freed, which
/// was most of the difference between a controller's live heap and its RSS (see
/// `bench-results/2026-11-25/MEMORY.md`). On one thread every allocation is in the main
/// arena, which gives memory back from its top. Blocking work (DNS lookups, the last
/// trace flush) still runs on Tokio's blocking pool, and the admin server (probes and
/// scrapes) on a thread of its own, so that it answers while this one is busy (see
/// [`AdminServer`]).
pub fn block_on<F>(future: F) -> anyhow::Result<()>
where
    F: Future<Output = anyhow::Result<()>>,
{
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the Tokio runtime")?
        .block_on(future)
}

/// How long the controller may take to return once shutdown is requested; past that it
/// is dropped. Well inside Kubernetes' default 30s termination grace period, leaving room
/// to release the Lease and flush traces.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(15);

/// Everything a controller gets from the runtime. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Runtime {
    controller: &'static str,
    args: Arc<CommonArgs>,
    client: kube::Client,
    write_client: kube::Client,
    /// The write client's writes that clusters wait for (background Events yield to them).
    write_activity: write_activity::WriteActivity,
    shutdown: CancellationToken,
    leader: watch::Receiver<bool>,
    readiness: Readiness,
    metrics: Metrics,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("controller", &self.controller)
            .field("namespace", &self.args.namespace)
            .field("leader", &*self.leader.borrow())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Client for the management cluster's watches and reads.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Client for the management cluster's writes: it sends a write only while this
    /// replica holds the Lease (checked as each request leaves; a refusal is a
    /// [`WriteRefused::NotLeader`] service error, see [`is_not_leader`]) and gives up on
    /// an answer after [`LeaseSettings::write_timeout`]. Every write goes through it.
    pub fn write_client(&self) -> kube::Client {
        self.write_client.clone()
    }

    /// Cancelled on SIGTERM/SIGINT. The controller returns soon after (within
    /// [`SHUTDOWN_GRACE`]).
    pub fn shutdown(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Whether this replica holds the Lease, as a channel to wait on changes.
    pub fn leader(&self) -> watch::Receiver<bool> {
        self.leader.clone()
    }

    /// Whether this replica holds the Lease right now. Check before every write.
    pub fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    /// Readiness gates behind `/readyz`.
    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }

    /// The registry behind `/metrics`, for the controller's own metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Event publisher reporting as this controller and replica; silent on standbys.
    pub fn events(&self) -> events::Events {
        events::Events::new(
            self.write_client(),
            self.controller,
            self.args.identity(),
            self.leader(),
        )
        .yielding_to(self.write_activity.clone())
    }

    /// Namespace where FournosClusters live.
    pub fn namespace(&self) -> &str {
        &self.args.namespace
    }

    /// Period of the resync safety net.
    pub fn reconcile_interval(&self) -> Duration {
        self.args.reconcile_interval()
    }

    pub fn args(&self) -> &CommonArgs {
        &self.args
    }
}

/// Runs a controller: sets up logging and traces, the kube client, the admin server and
/// leader election, calls `controller` with the [`Runtime`], and when it returns or a
/// signal arrives shuts everything down in order: controller, then Lease (so no write
/// follows the release), then admin server, then traces.
///
/// Returns the controller's own result; an `Ok` makes the process exit 0.
pub async fn run<F, Fut>(controller: &'static str, args: CommonArgs, f: F) -> anyhow::Result<()>
where
    F: FnOnce(Runtime) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let identity = args.identity();
    let otlp = OtlpConfig::from_env(controller).map(|otlp| OtlpConfig {
        service_instance_id: Some(identity.clone()),
        ..otlp
    });
    let telemetry = Telemetry::install(TelemetryConfig {
        log_level: args.log_level.clone(),
        log_format: args.log_format,
        otlp,
    })
    .context("cannot set up logging and tracing")?;

    let result = run_installed(controller, args, identity, f).await;
    match &result {
        Ok(()) => tracing::info!("stopped"),
        Err(error) => tracing::error!(error = format!("{error:#}"), "stopped with an error"),
    }
    telemetry.shutdown().await;
    result
}

async fn run_installed<F, Fut>(
    controller: &'static str,
    args: CommonArgs,
    identity: String,
    f: F,
) -> anyhow::Result<()>
where
    F: FnOnce(Runtime) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let shutdown = on_signal()?;
    // The admin server and the Lease stop on their own tokens, after the controller has
    // returned: probes keep answering and no write can follow the Lease release.
    let admin_stop = CancellationToken::new();
    let lease_stop = CancellationToken::new();

    let startup = tracing::info_span!("startup", controller, identity = %identity);
    let started = async {
        let lease = args
            .leader_election
            .then(|| LeaseSettings::new(controller, &args, identity.clone()))
            .transpose()?;
        let config = kube_config(&args.kubeconfig_paths()).await?;

        let readiness = Readiness::new();
        let metrics = Metrics::new(controller);
        let liveness = Liveness::new();
        let admin = AdminServer::bind(
            args.admin_addr,
            readiness.clone(),
            metrics.clone(),
            liveness.clone(),
        )?
        .spawn(admin_stop.clone())?;
        tokio::spawn(liveness.beat_until(admin_stop.clone()));

        let lease_settings = lease.clone();
        let (always_leader, leader, lease_task) = match lease {
            Some(lease) => {
                let (leader, task) =
                    lease::spawn(config.clone(), lease, metrics.clone(), lease_stop.clone());
                (None, leader, Some(task))
            }
            None => {
                let sender = lease::always_leader(&metrics);
                let leader = sender.subscribe();
                (Some(sender), leader, None)
            }
        };
        let write_timeout = lease::write_timeout(lease_settings.as_ref());
        let write_activity = write_activity::WriteActivity::default();
        let client::ManagementClients {
            read: client,
            write: write_client,
        } = client::management_clients(&config, leader.clone(), write_timeout, &write_activity)
            .context("cannot build the kube clients")?;
        tracing::info!(
            namespace = %args.namespace,
            write_timeout_ms = u64::try_from(write_timeout.as_millis()).unwrap_or(u64::MAX),
            reconcile_interval_sec = args.reconcile_interval_sec,
            admin_addr = %args.admin_addr,
            leader_election = args.leader_election,
            lease_namespace = %args.lease_namespace(),
            kubeconfig = ?args.kubeconfig_paths(),
            "started"
        );
        let runtime = Runtime {
            controller,
            args: Arc::new(args),
            client,
            write_client,
            write_activity,
            shutdown: shutdown.clone(),
            leader,
            readiness,
            metrics,
        };
        anyhow::Ok((runtime, admin, always_leader, lease_task))
    }
    .instrument(startup)
    .await;
    let (runtime, admin, always_leader, lease_task) = match started {
        Ok(started) => started,
        Err(error) => {
            shutdown.cancel();
            return Err(error);
        }
    };

    let result = run_controller(f(runtime), &shutdown).await;
    shutdown.cancel();

    lease_stop.cancel();
    if let Some(task) = lease_task
        && let Err(error) = task.await
    {
        tracing::warn!(%error, "leader election task failed");
    }
    drop(always_leader);
    admin_stop.cancel();
    admin.stopped().await;
    result
}

async fn run_controller(
    controller: impl Future<Output = anyhow::Result<()>>,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let mut controller = std::pin::pin!(controller);
    tokio::select! {
        result = controller.as_mut() => result,
        () = shutdown.cancelled() => {
            match tokio::time::timeout(SHUTDOWN_GRACE, controller).await {
                Ok(result) => result,
                Err(_) => {
                    tracing::warn!(grace = ?SHUTDOWN_GRACE, "controller did not stop in time; dropping it");
                    Ok(())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn controller_result_is_returned() {
        let shutdown = CancellationToken::new();
        assert!(run_controller(async { Ok(()) }, &shutdown).await.is_ok());
        let error = run_controller(async { Err(anyhow::anyhow!("boom")) }, &shutdown)
            .await
            .unwrap_err();
        assert_eq!(error.to_string(), "boom");
    }

    #[tokio::test(start_paused = true)]
    async fn controller_gets_the_grace_period_to_stop() {
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let token = shutdown.clone();
        let result = run_controller(
            async move {
                token.cancelled().await;
                tokio::time::sleep(SHUTDOWN_GRACE - Duration::from_secs(1)).await;
                Err(anyhow::anyhow!("finished cleanup"))
            },
            &shutdown,
        )
        .await;
        assert_eq!(result.unwrap_err().to_string(), "finished cleanup");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stuck_controller_is_dropped_after_the_grace_period() {
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let started = tokio::time::Instant::now();
        let result = run_controller(std::future::pending(), &shutdown).await;
        assert!(result.is_ok());
        assert_eq!(started.elapsed(), SHUTDOWN_GRACE);
    }
}
