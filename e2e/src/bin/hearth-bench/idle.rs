//! The idle window: wait until the controllers stop writing, then count their requests to
//! the management apiserver (from its audit log) and the CPU they use.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use hearth_e2e::ControlPlane;
use hearth_e2e::bench::{self, ApiLoad};
use hearth_e2e::layout::{self, env};

use crate::phase::Phase;
use crate::results::{Load, QueueCheck};

/// How long the controllers must write nothing (Lease renewals aside) before the idle
/// window opens: longer than the gaps between the last status writes of onboarding.
pub const QUIET: Duration = Duration::from_secs(15);

fn audit_log(plane: &ControlPlane) -> PathBuf {
    plane
        .state_dir()
        .join(layout::PKI_DIR)
        .join(layout::MANAGEMENT)
        .join(layout::AUDIT_LOG_FILE)
}

fn audit_len(log: &std::path::Path) -> Result<u64> {
    Ok(std::fs::metadata(log)
        .with_context(|| {
            format!(
                "{} (was the plane started with {}?)",
                log.display(),
                env::AUDIT
            )
        })?
        .len())
}

/// The audit log's requests from `users` since byte `start`.
fn tally_since(
    log: &std::path::Path,
    start: u64,
    users: &[String],
) -> Result<BTreeMap<String, ApiLoad>> {
    let bytes = std::fs::read(log)?;
    let text = String::from_utf8_lossy(&bytes[usize::try_from(start)?.min(bytes.len())..]);
    Ok(bench::tally_audit(text.lines(), users))
}

fn users(phase: &Phase) -> Vec<String> {
    phase
        .controllers
        .iter()
        .map(|c| {
            format!(
                "system:serviceaccount:{}:{}",
                phase.iso.namespace,
                c.controller.binary()
            )
        })
        .chain(phase.python.as_ref().map(|py| py.user.clone()))
        .collect()
}

/// Waits until `phase`'s controllers have written nothing but Lease renewals for `quiet`;
/// `false` if they were still writing after `timeout`.
async fn wait_quiet(
    plane: &ControlPlane,
    phase: &Phase,
    quiet: Duration,
    timeout: Duration,
) -> Result<bool> {
    let log = audit_log(plane);
    let start = audit_len(&log)?;
    let users = users(phase);
    let deadline = Instant::now() + timeout;
    let (mut writes, mut since) = (0, Instant::now());
    loop {
        let now: u64 = tally_since(&log, start, &users)?
            .values()
            .map(|l| l.writes)
            .sum();
        if now != writes {
            (writes, since) = (now, Instant::now());
        } else if since.elapsed() >= quiet {
            return Ok(true);
        }
        if Instant::now() > deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// What the idle window measured on one phase.
pub struct Idle {
    pub load: Load,
    pub cpu: BTreeMap<String, f64>,
    pub queue: QueueCheck,
    pub quiet: bool,
}

/// Waits for onboarding's writes to settle, then measures `window` of idleness: API load,
/// CPU per process, and the ClusterQueue at the end.
pub async fn idle(
    plane: &ControlPlane,
    phase: &Phase,
    clusters: usize,
    window: Duration,
    timeout: Duration,
) -> Result<Idle> {
    let quiet = wait_quiet(plane, phase, QUIET, timeout).await?;
    let before = phase.usage(plane, clusters).await?;
    let load = api_load(plane, phase, clusters, window).await?;
    let after = phase.usage(plane, clusters).await?;
    let cpu = before
        .iter()
        .zip(&after)
        .map(|(b, a)| {
            (
                a.controller.clone(),
                a.usage.cpu_seconds - b.usage.cpu_seconds,
            )
        })
        .collect();
    let cq = phase.queue_json().await?;
    let queue = QueueCheck {
        invalid_flavors: bench::invalid_flavors(&cq),
        active: cq["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Active" && c["status"] == "True"),
    };
    Ok(Idle {
        load,
        cpu,
        queue,
        quiet,
    })
}

/// Requests per controller of `phase` over `window`, from the audit log.
pub async fn api_load(
    plane: &ControlPlane,
    phase: &Phase,
    clusters: usize,
    window: Duration,
) -> Result<Load> {
    let log = audit_log(plane);
    let start = audit_len(&log)?;
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let elapsed = t0.elapsed().as_secs_f64();
    let tally = tally_since(&log, start, &users(phase))?;
    let per_controller: BTreeMap<String, ApiLoad> = tally
        .into_iter()
        .map(|(user, load)| (user.rsplit(':').next().unwrap_or(&user).to_owned(), load))
        .collect();
    let minutes = elapsed / 60.0;
    let per_minute = per_controller
        .iter()
        .map(|(c, l)| {
            (
                c.clone(),
                (
                    l.reads as f64 / minutes,
                    l.writes as f64 / minutes,
                    l.leases as f64 / minutes,
                ),
            )
        })
        .collect();
    Ok(Load {
        clusters,
        window_secs: elapsed,
        per_controller,
        per_minute,
    })
}
