//! One phase of the bench: its scope and controllers (or the Python Hearth), the Secrets it
//! creates, and what the bench's watches saw of them: convergence, the stage table, lock
//! latency.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use futures::{StreamExt as _, stream};
use hearth_api::FournosCluster;
use hearth_api::kueue::ClusterQueue;
use hearth_api::kueue_validity::MAX_FLAVORS_PER_GROUP;
use hearth_e2e::bench::{self, OnboardingStage};
use hearth_e2e::bench_peer::{self, PyHearth};
use hearth_e2e::bench_watch::{Done, FINAL_REFUSALS, Observer};
use hearth_e2e::hearth::{self, Controller, Running};
use hearth_e2e::layout::PIDS_FILE;
use hearth_e2e::protocol::Pids;
use hearth_e2e::{ControlPlane, Isolated};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::json;

use crate::results::UsageAt;

/// Production settings, not the tests' fast ones.
const BENCH_ENV: &[(&str, &str)] = &[
    ("HEARTH_RECONCILE_INTERVAL_SEC", "30"),
    // Leader election on, with the default Lease timings, as the chart deploys it.
    ("HEARTH_LEADER_ELECTION", "true"),
    // Info, plus the two per-cluster debug lines the stage table reads: discovery's
    // probe start and end, kueue-sync's plan for a cluster. JSON, for their timestamps.
    (
        "HEARTH_LOG_LEVEL",
        "info,hearth_discovery::probe=debug,hearth_kueue_sync::plan=debug",
    ),
    ("HEARTH_LOG_FORMAT", "json"),
];

/// How long the bench's own watches may take to list.
const WATCH_SYNC: Duration = Duration::from_secs(60);

/// The Python Hearth's settings besides the scope's: its defaults (resync 30 s, GPU
/// discovery every 5 min), as its deployment runs it.
const PY_ENV: &[(&str, &str)] = &[("HEARTH_LOG_LEVEL", "INFO")];

/// Where the Python Hearth is and its venv.
pub struct PeerPaths {
    pub source: PathBuf,
    pub venv: PathBuf,
}

/// One phase's scope and controllers.
pub struct Phase {
    pub iso: Isolated,
    pub controllers: Vec<Running>,
    pub python: Option<PyHearth>,
    pub clusters: Api<FournosCluster>,
    pub queues: Api<ClusterQueue>,
    /// The bench's watches on the scope, started before any Secret.
    pub observer: Observer,
}

/// When the bench sent a Secret's create request, and when the apiserver answered.
#[derive(Clone, Copy, Debug)]
pub struct Sent {
    pub at: Timestamp,
    pub answered: Timestamp,
}

pub fn secs_between(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64()
}

impl Phase {
    pub async fn start(plane: &ControlPlane, name: &str) -> Result<Phase> {
        let iso = plane.isolated(name).await?;
        let mut controllers = Vec::new();
        for c in Controller::ALL {
            controllers.push(hearth::start(plane, &iso, c, "0", BENCH_ENV).await?);
        }
        let client = plane.management_client().await?;
        let observer = Self::observe(&client, &iso).await?;
        Ok(Phase {
            clusters: Api::namespaced(client.clone(), &iso.namespace),
            queues: Api::all(client),
            iso,
            controllers,
            python: None,
            observer,
        })
    }

    /// The Python Hearth alone, on a queue pre-seeded with the resource group it needs.
    pub async fn start_python(plane: &ControlPlane, name: &str, peer: &PeerPaths) -> Result<Phase> {
        let iso = plane.isolated(name).await?;
        let client = plane.management_client().await?;
        bench_peer::seed_resource_group(&client, &iso.cluster_queue).await?;
        let observer = Self::observe(&client, &iso).await?;
        let py = PyHearth::start(plane, &iso, &peer.source, &peer.venv, PY_ENV).await?;
        Ok(Phase {
            clusters: Api::namespaced(client.clone(), &iso.namespace),
            queues: Api::all(client),
            iso,
            controllers: Vec::new(),
            python: Some(py),
            observer,
        })
    }

    /// The watches that timestamp every stage of the phase's onboardings.
    pub async fn observe(client: &kube::Client, iso: &Isolated) -> Result<Observer> {
        Observer::start(
            client.clone(),
            &iso.namespace,
            &iso.cluster_queue,
            WATCH_SYNC,
        )
        .await
    }

    pub fn cluster(&self, i: usize) -> String {
        format!("c{i}-{}", self.iso.id)
    }

    /// Creates `n` kubeconfig Secrets at once (32 requests in flight); returns when each
    /// was sent and answered.
    pub async fn onboard(&self, plane: &ControlPlane, n: usize) -> Result<BTreeMap<String, Sent>> {
        let targets = plane.targets();
        let created = stream::iter(0..n)
            .map(|i| {
                let name = self.cluster(i);
                let target = &targets[i % targets.len()];
                async move {
                    let at = Timestamp::now();
                    plane
                        .create_kubeconfig_secret(
                            &self.iso.secrets_namespace,
                            &name,
                            target.node_reader_kubeconfig(),
                        )
                        .await?;
                    let answered = Timestamp::now();
                    Ok::<_, anyhow::Error>((name, Sent { at, answered }))
                }
            })
            .buffer_unordered(32)
            .collect::<Vec<_>>()
            .await;
        created.into_iter().collect()
    }

    pub async fn usage(
        &self,
        plane: &ControlPlane,
        fournos_clusters: usize,
    ) -> Result<Vec<UsageAt>> {
        let pids: Pids = serde_json::from_slice(
            &std::fs::read(plane.state_dir().join(PIDS_FILE)).context("reading pids")?,
        )?;
        let ticks = bench::clock_ticks();
        let mut out = Vec::new();
        for c in &self.controllers {
            let pid = pids
                .processes
                .iter()
                .find(|p| p.name == c.name())
                .with_context(|| format!("{} not in {PIDS_FILE}", c.name()))?
                .pid;
            out.push(UsageAt {
                fournos_clusters,
                controller: c.controller.binary().to_owned(),
                usage: bench::usage(pid, ticks)?,
            });
        }
        if let Some(py) = &self.python {
            out.push(UsageAt {
                fournos_clusters,
                controller: bench_peer::SERVICE_ACCOUNT.to_owned(),
                usage: bench::usage(py.pid(), ticks)?,
            });
        }
        Ok(out)
    }

    pub async fn stop(&mut self, plane: &ControlPlane) -> Result<()> {
        for c in &self.controllers {
            c.stop(plane).await?;
        }
        if let Some(py) = &mut self.python {
            py.stop().await;
        }
        Ok(())
    }

    /// The ClusterQueue as JSON (a peer may write quotas as numbers).
    pub async fn queue_json(&self) -> Result<serde_json::Value> {
        let api: Api<DynamicObject> = Api::all_with(
            self.queues.clone().into_client(),
            &ApiResource::erase::<ClusterQueue>(&()),
        );
        let cq = api
            .get(&self.iso.cluster_queue)
            .await
            .context("reading the ClusterQueue")?;
        Ok(serde_json::to_value(cq)?)
    }
}

pub fn queue_valid(cq: &ClusterQueue) -> bool {
    cq.spec.resource_groups.iter().all(|g| {
        !g.flavors.is_empty()
            && g.flavors.len() <= MAX_FLAVORS_PER_GROUP
            && g.covered_resources.len() <= 64
            && g.flavors.iter().all(|f| {
                f.resources.iter().map(|q| &q.name).collect::<Vec<_>>()
                    == g.covered_resources.iter().collect::<Vec<_>>()
            })
    }) && cq.spec.resource_groups.len() <= 16
}

pub fn queue_active(cq: &ClusterQueue) -> bool {
    cq.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Active" && c.status == "True")
    })
}

/// What the watches showed of one batch once every cluster in it converged.
pub struct Converged {
    /// Secret sent → discovery's status (Valid with GPUs), per cluster.
    pub discovered: Vec<f64>,
    /// Secret sent → converged ([`Done`]), per cluster.
    pub latency: Vec<f64>,
    pub with_quota: usize,
    pub refused: BTreeMap<String, usize>,
    pub queue: ClusterQueue,
    /// Clusters of the batch whose flavor ever had GPU quota in the queue.
    pub ever_with_quota: usize,
    pub lost_quota: Vec<String>,
    pub relists: usize,
}

/// Waits, on the bench's watches, until every cluster in `sent` converged ([`Done`]).
pub async fn converge(
    phase: &Phase,
    sent: &BTreeMap<String, Sent>,
    timeout: Duration,
) -> Result<Converged> {
    phase
        .observer
        .wait_until(timeout, |seen| {
            let tracks = || sent.keys().filter_map(|n| seen.clusters.get(n));
            let done = tracks().filter(|t| t.done.is_some()).count();
            if done == sent.len() {
                return Ok(());
            }
            Err(format!(
                "{done} of {} clusters converged ({} discovered)",
                sent.len(),
                tracks().filter(|t| t.discovered.is_some()).count()
            ))
        })
        .await
        .map_err(|e| hearth::with_logs(e, &phase.controllers))?;
    let seen = phase.observer.lock();
    let mut out = Converged {
        discovered: Vec::new(),
        latency: Vec::new(),
        with_quota: 0,
        refused: BTreeMap::new(),
        queue: serde_json::from_value(seen.queue.clone().context("no ClusterQueue")?)
            .context("reading the ClusterQueue")?,
        ever_with_quota: sent.keys().filter(|n| seen.ever_quota.contains(*n)).count(),
        lost_quota: Vec::new(),
        relists: seen.relists,
    };
    for (name, sent) in sent {
        let track = &seen.clusters[name];
        out.discovered
            .extend(track.discovered.map(|at| secs_between(sent.at, at)));
        if let Some((at, done)) = &track.done {
            out.latency.push(secs_between(sent.at, *at));
            match done {
                Done::Quota => out.with_quota += 1,
                Done::Refused(reason) => *out.refused.entry(reason.clone()).or_insert(0) += 1,
            }
        }
        if track.lost_quota() {
            out.lost_quota.push(name.clone());
        }
    }
    Ok(out)
}

/// The stage table of one batch: the bench's watches (arrival of each event) and the
/// controllers' own JSON log lines (their timestamps; same machine, same clock).
pub fn onboarding_stages(phase: &Phase, sent: &BTreeMap<String, Sent>) -> Vec<OnboardingStage> {
    let log_of = |c: Controller| {
        phase
            .controllers
            .iter()
            .find(|r| r.controller == c)
            .map(|r| r.log())
            .unwrap_or_default()
    };
    let discovery = bench::log_events(&log_of(Controller::Discovery), &["probe started", "probed"]);
    let planned = bench::log_events(&log_of(Controller::KueueSync), &["planned"]);
    let first =
        |events: &[bench::LogEvent], name: &str, message: &str, after: Option<Timestamp>| {
            events
                .iter()
                .filter(|e| e.cluster == name && e.message == message)
                .map(|e| e.at)
                .find(|at| after.is_none_or(|after| *at >= after))
        };
    let seen = phase.observer.lock();
    let mut columns: Vec<(&str, &str, Vec<Option<f64>>)> = vec![
        ("Secret created", "the bench: create answered", vec![]),
        ("FournosCluster created", "bench watch", vec![]),
        ("probe started", "discovery log", vec![]),
        ("probe done", "discovery log", vec![]),
        ("status written (Valid, GPUs)", "bench watch", vec![]),
        ("kueue-sync planned it", "kueue-sync log", vec![]),
        ("ClusterQueue written (GPU quota)", "bench watch", vec![]),
        ("KueueSynced written (done)", "bench watch", vec![]),
    ];
    let mut reported = Vec::new();
    for (name, sent) in sent {
        let track = seen.clusters.get(name).cloned().unwrap_or_default();
        let since = |at: Option<Timestamp>| at.map(|at| secs_between(sent.at, at));
        let started = first(&discovery, name, "probe started", None);
        let kueue = planned
            .iter()
            .filter(|e| e.cluster == *name)
            .find(|e| {
                e.fields["synced"] == "True"
                    || e.fields["reason"]
                        .as_str()
                        .is_some_and(|r| FINAL_REFUSALS.contains(&r))
            })
            .map(|e| e.at);
        let times = [
            Some(sent.answered),
            track.created,
            started,
            first(&discovery, name, "probed", started),
            track.discovered,
            kueue,
            track.quota,
            track.done.as_ref().map(|(at, _)| *at),
        ];
        for (column, at) in columns.iter_mut().zip(times) {
            column.2.push(since(at));
        }
        reported.push(
            track
                .reported
                .zip(track.quota)
                .map(|(r, q)| secs_between(q, r)),
        );
    }
    let mut stages = bench::stages(&columns);
    // Kueue's own report follows the ClusterQueue write, not kueue-sync's status write.
    let since: Vec<f64> = sent
        .iter()
        .filter_map(|(name, sent)| {
            let at = seen.clusters.get(name)?.reported?;
            Some(secs_between(sent.at, at))
        })
        .collect();
    stages.push(OnboardingStage {
        stage: "Kueue reports the flavor (after the ClusterQueue write)".to_owned(),
        source: "bench watch: ClusterQueue status.flavorsReservation".to_owned(),
        since_secret: bench::summarize(&since),
        step: bench::summarize(&reported.into_iter().flatten().collect::<Vec<_>>()),
    });
    stages
}

pub async fn lock_latency(phase: &Phase, clusters: usize, samples: usize) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    let pp = PatchParams::default();
    for i in 0..samples {
        let name = phase.cluster(i % clusters);
        let t0 = Instant::now();
        phase
            .clusters
            .patch(
                &name,
                &pp,
                &Patch::Merge(json!({ "spec": { "owner": "bench" } })),
            )
            .await?;
        wait_locked(phase, &name, true).await?;
        out.push(t0.elapsed().as_secs_f64());
        phase
            .clusters
            .patch(
                &name,
                &pp,
                &Patch::Merge(json!({ "spec": { "owner": null } })),
            )
            .await?;
        wait_locked(phase, &name, false).await?;
    }
    Ok(out)
}

/// Waits on a watch of the cluster until `status.locked` is `locked` (and, for an
/// unlock, its sentinel is gone from status).
async fn wait_locked(phase: &Phase, name: &str, locked: bool) -> Result<()> {
    let condition = move |c: Option<&FournosCluster>| {
        let status = c.and_then(|c| c.status.as_ref());
        let is = status.and_then(|s| s.locked).unwrap_or(false);
        let sentinel_gone = locked || status.and_then(|s| s.lock_job_name.as_ref()).is_none();
        is == locked && sentinel_gone
    };
    tokio::time::timeout(
        Duration::from_secs(120),
        kube::runtime::wait::await_condition(phase.clusters.clone(), name, condition),
    )
    .await
    .with_context(|| format!("{name}: not locked={locked} within 120 s"))??;
    Ok(())
}

/// Waits on the bench's watches until every cluster in `sent` has GPU quota or `timeout`
/// passes; returns the seconds from each Secret to its quota, for those that got it.
pub async fn converge_quota(
    phase: &Phase,
    sent: &BTreeMap<String, Sent>,
    timeout: Duration,
) -> Result<Vec<f64>> {
    let all = phase
        .observer
        .wait_until(timeout, |seen| {
            let got = sent
                .keys()
                .filter(|n| seen.clusters.get(*n).is_some_and(|t| t.quota.is_some()))
                .count();
            if got == sent.len() {
                Ok(())
            } else {
                Err(format!("{got} of {} with GPU quota", sent.len()))
            }
        })
        .await;
    if let Err(e) = all {
        eprintln!("Python Hearth: {e:#}");
    }
    let seen = phase.observer.lock();
    Ok(sent
        .iter()
        .filter_map(|(name, sent)| {
            let at = seen.clusters.get(name)?.quota?;
            Some(secs_between(sent.at, at))
        })
        .collect())
}
