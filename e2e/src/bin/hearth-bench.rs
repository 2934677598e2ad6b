//! `hearth-bench`: measures Hearth on the local control plane and writes
//! `bench-results/<date>/SUMMARY.md` and `results.json`.
//!
//! Phases, each in a scope of its own (own namespaces, ClusterQueue and controllers, so
//! one phase's clusters never reach another's controllers):
//! 1. **Onboarding latency** for N clusters created at once (`--sizes`): labeled Secret
//!    created → FournosCluster `Valid` with GPUs and its flavor with quota in the
//!    ClusterQueue (or, past Kueue's 64 flavors per group, a `KueueSynced=False` answer).
//!    All clusters point at the plane's targets, round robin. Observed by watches
//!    ([`hearth_e2e::bench_watch`]), each event timestamped as it arrives, and broken into
//!    stages with the controllers' own log timestamps (the probe, kueue-sync's plan).
//! 2. **Lock latency** on the scope of 10: `spec.owner` set → `status.locked=true`
//!    (workload sentinel, idle cluster), one cluster at a time.
//! 3. **Memory and CPU** of each controller after each phase (`/proc/<pid>`).
//! 4. **Steady-state API load** of the scope of `--idle-clusters` (10), idle for
//!    `--idle-secs` once the controllers have stopped writing, per process from the
//!    management apiserver's audit log: reads, writes and Lease requests apart, and the
//!    CPU each process used meanwhile; then the ClusterQueue's validity.
//! 5. **The Python Hearth** (`--py-sizes`, when `../shared/peers/hearth-py` is there):
//!    the same onboarding batches (Secret → GPU quota, with a deadline: it may never get
//!    there), memory, the same idle window and ClusterQueue check (see `bench_peer`);
//!    on its first batch, when `../shared/peers/fournos` is there, its lock latency
//!    (`--py-lock-samples`) with the real Fournos turning its sentinel into a Workload:
//!    owner set → its own `status.locked=true`, and owner set → that Workload admitted.
//! 6. **Scale**: `--scale` FournosClusters in one scope: time until every one has its
//!    three conditions, what the ones beyond Kueue's limit say, whether the queue is
//!    still valid, and memory/CPU. The run fails when more clusters ever had quota than
//!    fit, or one lost it to another.
//!
//! Controllers run with production intervals (resync 30 s, discovery every 5 min) and
//! leader election, logging JSON at level info plus the debug lines the stage table reads. Build first: `cargo build --release --workspace --bins`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use futures::{StreamExt as _, stream};
use hearth_api::FournosCluster;
use hearth_api::fournosjob::FournosJob;
use hearth_api::kueue::{ClusterQueue, Workload};
use hearth_api::kueue_validity::MAX_FLAVORS_PER_GROUP;
use hearth_e2e::bench::{self, ApiLoad, Stage, Summary, Usage};
use hearth_e2e::bench_peer::{self, PyHearth};
use hearth_e2e::bench_watch::{Done, FINAL_REFUSALS, Observer};
use hearth_e2e::fournos_real::{self, Fournos};
use hearth_e2e::hearth::{self, Controller, Running};
use hearth_e2e::invariants::workload_is;
use hearth_e2e::peers::Peer;
use hearth_e2e::plane::env;
use hearth_e2e::protocol::{PIDS_FILE, Pids};
use hearth_e2e::reaction;
use hearth_e2e::{ControlPlane, Isolated, PlaneOptions};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde::Serialize;
use serde_json::json;

#[derive(Parser, Debug, Clone, Serialize)]
#[command(about = "Benchmarks Hearth on the local control plane")]
struct Args {
    /// Where SUMMARY.md and results.json go (default bench-results/<UTC date>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Onboarding batch sizes (clusters created at once).
    #[arg(long, value_delimiter = ',', default_value = "1,10,100")]
    sizes: Vec<usize>,
    /// Lock/unlock cycles measured on the batch of 10.
    #[arg(long, default_value_t = 20)]
    lock_samples: usize,
    /// Idle window for the API load, in seconds (on the batch of --idle-clusters); one
    /// discovery interval by default. 0 skips it.
    #[arg(long, default_value_t = 300)]
    idle_secs: u64,
    /// The onboarding batch that stays up for the idle window (one of --sizes).
    #[arg(long, default_value_t = 10)]
    idle_clusters: usize,
    /// Batch sizes run on the real Python Hearth too, when it is in the peers folder
    /// (HEARTH_PEERS_DIR, default ../shared/peers); 0 skips it.
    #[arg(long, value_delimiter = ',', default_value = "1,10")]
    py_sizes: Vec<usize>,
    /// How long each Python batch may take to get its quota, in seconds; what it has by
    /// then is reported (it may never get there).
    #[arg(long, default_value_t = 120)]
    py_timeout_secs: u64,
    /// Lock/unlock cycles measured on the first Python batch, with the real Fournos
    /// (HEARTH_PEERS_DIR/fournos) turning its sentinels into Workloads; 0 skips it.
    #[arg(long, default_value_t = 5)]
    py_lock_samples: usize,
    /// FournosClusters in the scale phase (0 skips it).
    #[arg(long, default_value_t = 1000)]
    scale: usize,
    /// Longest any phase may take to converge, in seconds.
    #[arg(long, default_value_t = 1200)]
    timeout_secs: u64,
    /// Measure only lock-manager's reaction (see `hearth_e2e::reaction`): N sentinel
    /// evictions and N deletions under a held lock, each timed from the write to
    /// `locked` going false; written to LOCK-REACTION.md and lock-reaction.json in --out.
    /// 0 runs the other phases.
    #[arg(long, default_value_t = 0)]
    lock_reaction: usize,
}

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

#[derive(Serialize, Default)]
struct Results {
    command: String,
    started_at: String,
    finished_at: String,
    machine: BTreeMap<String, String>,
    versions: BTreeMap<String, String>,
    args: Option<Args>,
    onboarding: Vec<Onboarding>,
    lock: Option<Summary>,
    lock_samples: Vec<f64>,
    usage: Vec<UsageAt>,
    api_load: Option<Load>,
    scale: Option<Scale>,
    /// CPU seconds each process used during the idle window.
    idle_cpu: BTreeMap<String, f64>,
    /// The idle batch's ClusterQueue once the idle window is over.
    queue_after_idle: Option<QueueCheck>,
    python: PythonSide,
    /// `/proc/loadavg` when each phase started: the machine is shared.
    load: Vec<(String, String)>,
    notes: Vec<String>,
}

/// `/proc/loadavg` now (1, 5 and 15 minute load averages, running/total tasks).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.trim().to_owned())
        .unwrap_or_default()
}

/// The same measurements on the real Python Hearth.
#[derive(Serialize, Default)]
struct PythonSide {
    /// Why it did not run (the one line printed).
    skipped: Option<String>,
    onboarding: Vec<PyOnboarding>,
    usage: Vec<UsageAt>,
    api_load: Option<Load>,
    idle_cpu: BTreeMap<String, f64>,
    queue_after_idle: Option<QueueCheck>,
    /// Owner set → its own `status.locked=true` (written as it creates the sentinel).
    lock_claimed: Option<Summary>,
    /// Owner set → the real Fournos's Workload for its sentinel admitted by Kueue.
    lock_admitted: Option<Summary>,
    /// (claimed, admitted) per cycle, in seconds.
    lock_samples: Vec<(f64, f64)>,
    /// Why its lock latency was not measured.
    lock_skipped: Option<String>,
}

#[derive(Serialize)]
struct PyOnboarding {
    clusters: usize,
    /// Secret created → flavor with GPU quota in the ClusterQueue, of those that got it.
    latency: Option<Summary>,
    /// The same, each as it was measured (those that got quota before the deadline).
    #[serde(default)]
    latencies: Vec<f64>,
    with_quota: usize,
    deadline_secs: u64,
}

#[derive(Serialize, Clone)]
struct QueueCheck {
    /// Flavors whose resources are not the group's coveredResources.
    invalid_flavors: usize,
    active: bool,
}

#[derive(Serialize)]
struct Onboarding {
    clusters: usize,
    /// Secret created → Valid + GPUs + quota in the queue (or a KueueSynced answer).
    latency: Option<Summary>,
    /// Secret created → FournosCluster Valid with GPUs (discovery alone).
    discovered: Option<Summary>,
    with_quota: usize,
    kueue_synced_false: BTreeMap<String, usize>,
    queue_valid: bool,
    /// Where the time goes, stage by stage.
    stages: Vec<Stage>,
}

#[derive(Serialize)]
struct UsageAt {
    fournos_clusters: usize,
    controller: String,
    usage: Usage,
}

#[derive(Serialize)]
struct Load {
    clusters: usize,
    window_secs: f64,
    /// Per controller: totals, and per minute.
    per_controller: BTreeMap<String, ApiLoad>,
    /// Per controller, per minute: reads, writes, Lease requests.
    per_minute: BTreeMap<String, (f64, f64, f64)>,
}

#[derive(Serialize)]
struct Scale {
    clusters: usize,
    converge_secs: f64,
    with_quota: usize,
    kueue_synced_false: BTreeMap<String, usize>,
    queue_valid: bool,
    queue_active: bool,
    /// How many fit: Kueue's flavors per resource group (all in one group here).
    fit: usize,
    /// Clusters whose flavor had GPU quota in any version of the queue the bench's watch
    /// saw: more than `fit` means quota was taken from one cluster and given to another.
    ever_with_quota: usize,
    /// Clusters whose `KueueSynced` went from True to a final refusal.
    lost_quota: Vec<String>,
    /// Times the bench's watches had to list again (changes in between unseen).
    watch_relists: usize,
    stages: Vec<Stage>,
}

fn sh(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

fn machine() -> BTreeMap<String, String> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let mem = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .unwrap_or_default()
        .to_owned();
    BTreeMap::from([
        ("nproc".to_owned(), sh("nproc", &[])),
        ("cpu".to_owned(), model),
        ("memory".to_owned(), mem),
        ("kernel".to_owned(), sh("uname", &["-sr"])),
    ])
}

fn versions() -> BTreeMap<String, String> {
    let go_mod = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/kube/go.mod"),
    )
    .unwrap_or_default();
    let pin = |module: &str| {
        go_mod
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{module} ")))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|| "unknown".to_owned())
    };
    // Results of earlier runs waiting to be committed do not change what is measured.
    let dirty = !sh(
        "git",
        &[
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            ".",
            ":(exclude)bench-results",
        ],
    )
    .is_empty();
    BTreeMap::from([
        (
            "hearth".to_owned(),
            format!(
                "{}{}",
                sh("git", &["rev-parse", "HEAD"]),
                if dirty {
                    " (with uncommitted changes)"
                } else {
                    ""
                }
            ),
        ),
        ("rustc".to_owned(), sh("rustc", &["--version"])),
        ("kubernetes".to_owned(), pin("k8s.io/kubernetes")),
        ("kueue".to_owned(), pin("sigs.k8s.io/kueue")),
        ("etcd".to_owned(), pin("go.etcd.io/etcd/server/v3")),
    ])
}

/// The Python Hearth's settings besides the scope's: its defaults (resync 30 s, GPU
/// discovery every 5 min), as its deployment runs it.
const PY_ENV: &[(&str, &str)] = &[("HEARTH_LOG_LEVEL", "INFO")];

/// Where the Python Hearth is and its venv.
struct PeerPaths {
    source: PathBuf,
    venv: PathBuf,
}

/// One phase's scope and controllers.
struct Phase {
    iso: Isolated,
    controllers: Vec<Running>,
    python: Option<PyHearth>,
    clusters: Api<FournosCluster>,
    queues: Api<ClusterQueue>,
    /// The bench's watches on the scope, started before any Secret.
    observer: Observer,
}

/// When the bench sent a Secret's create request, and when the apiserver answered.
#[derive(Clone, Copy, Debug)]
struct Sent {
    at: Timestamp,
    answered: Timestamp,
}

fn secs_between(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64()
}

impl Phase {
    async fn start(plane: &ControlPlane, name: &str) -> Result<Phase> {
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
    async fn start_python(plane: &ControlPlane, name: &str, peer: &PeerPaths) -> Result<Phase> {
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
    async fn observe(client: &kube::Client, iso: &Isolated) -> Result<Observer> {
        Observer::start(
            client.clone(),
            &iso.namespace,
            &iso.cluster_queue,
            WATCH_SYNC,
        )
        .await
    }

    fn cluster(&self, i: usize) -> String {
        format!("c{i}-{}", self.iso.id)
    }

    /// Creates `n` kubeconfig Secrets at once (32 requests in flight); returns when each
    /// was sent and answered.
    async fn onboard(&self, plane: &ControlPlane, n: usize) -> Result<BTreeMap<String, Sent>> {
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

    async fn usage(&self, plane: &ControlPlane, fournos_clusters: usize) -> Result<Vec<UsageAt>> {
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

    async fn stop(&mut self, plane: &ControlPlane) -> Result<()> {
        for c in &self.controllers {
            c.stop(plane).await?;
        }
        if let Some(py) = &mut self.python {
            py.stop().await;
        }
        Ok(())
    }

    /// The ClusterQueue as JSON (a peer may write quotas as numbers).
    async fn queue_json(&self) -> Result<serde_json::Value> {
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

fn queue_valid(cq: &ClusterQueue) -> bool {
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

fn queue_active(cq: &ClusterQueue) -> bool {
    cq.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Active" && c.status == "True")
    })
}

/// What the watches showed of one batch once every cluster in it converged.
struct Converged {
    /// Secret sent → discovery's status (Valid with GPUs), per cluster.
    discovered: Vec<f64>,
    /// Secret sent → converged ([`Done`]), per cluster.
    latency: Vec<f64>,
    with_quota: usize,
    refused: BTreeMap<String, usize>,
    queue: ClusterQueue,
    /// Clusters of the batch whose flavor ever had GPU quota in the queue.
    ever_with_quota: usize,
    lost_quota: Vec<String>,
    relists: usize,
}

/// Waits, on the bench's watches, until every cluster in `sent` converged ([`Done`]).
async fn converge(
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
fn onboarding_stages(phase: &Phase, sent: &BTreeMap<String, Sent>) -> Vec<Stage> {
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
    stages.push(Stage {
        stage: "Kueue reports the flavor (after the ClusterQueue write)".to_owned(),
        source: "bench watch: ClusterQueue status.flavorsReservation".to_owned(),
        since_secret: bench::summarize(&since),
        step: bench::summarize(&reported.into_iter().flatten().collect::<Vec<_>>()),
    });
    stages
}

async fn lock_latency(phase: &Phase, clusters: usize, samples: usize) -> Result<Vec<f64>> {
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

/// The real Fournos's source and venv, with its CRDs on the plane, or why the Python
/// Hearth's lock latency is not measured.
async fn fournos_peer(
    plane: &ControlPlane,
    samples: usize,
) -> std::result::Result<PeerPaths, String> {
    if samples == 0 {
        return Err("--py-lock-samples 0".to_owned());
    }
    let source = Peer::Fournos.source()?;
    let venv = Peer::Fournos
        .venv(&source)
        .map_err(|e| format!("the real Fournos could not be installed: {e}"))?;
    let client = plane.management_client().await.map_err(|e| e.to_string())?;
    fournos_real::install_crds(&client, &source)
        .await
        .map_err(|e| format!("the real Fournos's CRDs: {e}"))?;
    Ok(PeerPaths { source, venv })
}

/// The Python Hearth's lock latency on `phase`'s clusters with GPU quota, with the real
/// Fournos (and its [`fournos_real::World`]) running in the phase's scope as in
/// `takeover_py`: per cycle, (owner set → its `status.locked=true`, owner set → the
/// sentinel's Workload admitted), then unlocked until the sentinel's Workload is gone.
async fn py_lock_latency(
    plane: &ControlPlane,
    phase: &Phase,
    fournos: &PeerPaths,
    clusters: usize,
    samples: usize,
) -> Result<std::result::Result<Vec<(f64, f64)>, String>> {
    let cq = phase.queue_json().await?;
    let lockable: Vec<String> = (0..clusters)
        .map(|i| phase.cluster(i))
        .filter(|name| bench::flavor_has_gpu_quota(&cq, name))
        .collect();
    if lockable.is_empty() {
        return Ok(Err("no cluster of its batch got GPU quota".to_owned()));
    }
    let client = plane.management_client().await?;
    let exec = &phase.iso.execution_namespace;
    fournos_real::install_pipelines(&client, &fournos.source, exec).await?;
    let world = tokio::spawn(fournos_real::World::new(&client, exec).run());
    let mut operator = Fournos::start(plane, &fournos.source, &fournos.venv, &phase.iso)
        .await
        .context("starting the real Fournos")?;
    let workloads: Api<Workload> = Api::namespaced(client.clone(), exec);
    let jobs: Api<FournosJob> = Api::namespaced(client, exec);
    let measured = async {
        let mut out = Vec::new();
        for i in 0..samples {
            let name = &lockable[i % lockable.len()];
            let sentinel = bench_peer::sentinel_name(name);
            let t0 = Instant::now();
            phase
                .clusters
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": { "owner": "bench" } })),
                )
                .await?;
            let (mut claimed, mut admitted) = (None, None);
            while claimed.is_none() || admitted.is_none() {
                let fc = phase.clusters.get(name).await?;
                if claimed.is_none() && fc.status.as_ref().and_then(|s| s.locked) == Some(true) {
                    claimed = Some(t0.elapsed().as_secs_f64());
                }
                if admitted.is_none()
                    && workloads
                        .get_opt(&sentinel)
                        .await?
                        .is_some_and(|w| workload_is(&w, "Admitted"))
                {
                    admitted = Some(t0.elapsed().as_secs_f64());
                }
                if t0.elapsed() > PY_LOCK_DEADLINE {
                    bail!(
                        "{name}: locked after {claimed:?} s, sentinel {sentinel} admitted after {admitted:?} s, after {PY_LOCK_DEADLINE:?}"
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            out.push((claimed.unwrap_or_default(), admitted.unwrap_or_default()));
            phase
                .clusters
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": { "owner": null } })),
                )
                .await?;
            let t1 = Instant::now();
            loop {
                let fc = phase.clusters.get(name).await?;
                let unlocked = fc.status.as_ref().and_then(|s| s.locked) != Some(true);
                if unlocked
                    && jobs.get_opt(&sentinel).await?.is_none()
                    && workloads.get_opt(&sentinel).await?.is_none()
                {
                    break;
                }
                if t1.elapsed() > PY_LOCK_DEADLINE {
                    bail!("{name}: still locked or sentinel {sentinel} still there after {PY_LOCK_DEADLINE:?}");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(out)
    }
    .await;
    world.abort();
    let log = operator.log();
    operator.stop().await;
    measured
        .map(Ok)
        .map_err(|e: anyhow::Error| e.context(format!("Fournos log:\n{log}")))
}

/// Longest one lock or unlock of the Python Hearth may take.
const PY_LOCK_DEADLINE: Duration = Duration::from_secs(120);

/// How long the controllers must write nothing (Lease renewals aside) before the idle
/// window opens: longer than the gaps between the last status writes of onboarding.
const QUIET: Duration = Duration::from_secs(15);

fn audit_log(plane: &ControlPlane) -> PathBuf {
    plane
        .state_dir()
        .join("pki")
        .join(hearth_e2e::supervisor::MANAGEMENT)
        .join(hearth_e2e::apiserver::AUDIT_LOG_FILE)
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
struct Idle {
    load: Load,
    cpu: BTreeMap<String, f64>,
    queue: QueueCheck,
    quiet: bool,
}

/// Waits for onboarding's writes to settle, then measures `window` of idleness: API load,
/// CPU per process, and the ClusterQueue at the end.
async fn idle(
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

/// Waits on the bench's watches until every cluster in `sent` has GPU quota or `timeout`
/// passes; returns the seconds from each Secret to its quota, for those that got it.
async fn converge_quota(
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

/// The Python Hearth's source and venv, or the one line that says why it is skipped.
fn python_peer(sizes: &[usize]) -> std::result::Result<PeerPaths, String> {
    if sizes.iter().all(|&n| n == 0) {
        return Err("skipped: the Python Hearth (--py-sizes 0)".to_owned());
    }
    let source = Peer::HearthPy
        .source()
        .map_err(|why| format!("skipped: {why}"))?;
    let venv = Peer::HearthPy
        .venv(&source)
        .map_err(|e| format!("skipped: the Python Hearth could not be installed: {e}"))?;
    Ok(PeerPaths { source, venv })
}

/// Requests per controller of `phase` over `window`, from the audit log.
async fn api_load(
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

/// `LimitReached 36, patch leases 8`, or `none`: counts a person reads in a table cell.
fn counts<V: std::fmt::Display>(m: &BTreeMap<String, V>) -> String {
    if m.is_empty() {
        return "none".to_string();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn fmt(s: &Option<Summary>) -> String {
    match s {
        Some(s) => format!("{:.2} | {:.2} | {:.2} | {}", s.p50, s.p95, s.max, s.n),
        None => "– | – | – | 0".to_owned(),
    }
}

/// `python / hearth`, as "54×" (or "–" when either is missing or zero).
fn ratio(python: Option<f64>, hearth: Option<f64>) -> String {
    match (python, hearth) {
        (Some(p), Some(h)) if h > 0.0 && p > 0.0 => format!("{:.1}×", p / h),
        _ => "–".to_owned(),
    }
}

fn secs(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.2} s"))
        .unwrap_or_else(|| "–".to_owned())
}

/// Per cluster per minute: reads, writes, Lease requests (all processes of a side).
fn per_cluster_minute(load: &Load) -> (f64, f64, f64) {
    let minutes = load.window_secs / 60.0;
    let n = load.clusters.max(1) as f64 * minutes;
    let sum = |f: fn(&ApiLoad) -> u64| load.per_controller.values().map(f).sum::<u64>() as f64 / n;
    (sum(|l| l.reads), sum(|l| l.writes), sum(|l| l.leases))
}

/// The table the README quotes: the Python Hearth next to this project.
fn side_by_side(r: &Results, idle_clusters: usize) -> String {
    let py = &r.python;
    let mut md =
        String::from("| metric | Python Hearth | this project | ratio |\n|---|---|---|---|\n");
    for p in &py.onboarding {
        let Some(h) = r.onboarding.iter().find(|o| o.clusters == p.clusters) else {
            continue;
        };
        let got = format!(
            " ({} of {} within {} s)",
            p.with_quota, p.clusters, p.deadline_secs
        );
        let hgot = format!(" ({} of {} with quota)", h.with_quota, h.clusters);
        for (label, q, hv) in [
            ("p50", 0.50, h.latency.as_ref().map(|s| s.p50)),
            ("p95", 0.95, h.latency.as_ref().map(|s| s.p95)),
        ] {
            // With one Secret, p95 is the p50 again: one row says it.
            if p.clusters == 1 && label == "p95" {
                continue;
            }
            // Over every cluster of the batch: one still without quota at the deadline
            // counts as slower than the deadline, so a quantile that falls on it is
            // "> deadline" and the ratio a lower bound.
            let pv = bench::censored_quantile(&p.latencies, p.clusters, q);
            let deadline = p.deadline_secs as f64;
            let (python, times) = match pv {
                Some(v) => (secs(Some(v)), ratio(Some(v), hv)),
                None => (
                    format!("> {deadline:.0} s"),
                    match ratio(Some(deadline), hv).as_str() {
                        "–" => "–".to_owned(),
                        r => format!("> {r}"),
                    },
                ),
            };
            let secrets = if p.clusters == 1 { "Secret" } else { "Secrets" };
            md.push_str(&format!(
                "| {} {secrets} at once → flavor + GPU quota, {label} | {python}{got} | {}{hgot} | {times} |\n",
                p.clusters,
                secs(hv),
            ));
        }
    }
    if let (Some(pl), Some(hl)) = (&py.api_load, &r.api_load) {
        let (pr, pw, plz) = per_cluster_minute(pl);
        let (hr, hw, hlz) = per_cluster_minute(hl);
        md.push_str(&format!(
            "| idle requests per cluster per minute, {idle_clusters} clusters, {:.0} s: reads / writes | {pr:.2} / {pw:.2} | {hr:.2} / {hw:.2} | {} / {} |\n",
            hl.window_secs,
            ratio(Some(pr), Some(hr)),
            ratio(Some(pw), Some(hw)),
        ));
        md.push_str(&format!(
            "| idle Lease requests per minute (all processes; leader election) | {:.2} | {:.2} | |\n",
            plz * idle_clusters as f64,
            hlz * idle_clusters as f64
        ));
    }
    let rss = |usage: &[UsageAt]| {
        let at: Vec<&UsageAt> = usage
            .iter()
            .filter(|u| u.fournos_clusters == idle_clusters)
            .collect();
        (!at.is_empty()).then(|| {
            (
                at.iter().map(|u| u.usage.rss_kib).sum::<u64>() as f64 / 1024.0,
                at.len(),
            )
        })
    };
    if let (Some((p, pn)), Some((h, hn))) = (rss(&py.usage), rss(&r.usage)) {
        md.push_str(&format!(
            "| RSS, all processes, {idle_clusters} clusters | {p:.1} MiB ({pn} process) | {h:.1} MiB ({hn} processes) | {} |\n",
            ratio(Some(p), Some(h))
        ));
    }
    if !py.idle_cpu.is_empty() && !r.idle_cpu.is_empty() {
        let p: f64 = py.idle_cpu.values().sum();
        let h: f64 = r.idle_cpu.values().sum();
        md.push_str(&format!(
            "| CPU during the idle window, all processes | {p:.2} s | {h:.2} s | {} |\n",
            ratio(Some(p), Some(h))
        ));
    }
    if let (Some(p), Some(h)) = (&py.queue_after_idle, &r.queue_after_idle) {
        md.push_str(&format!(
            "| ClusterQueue flavors breaking Kueue's validation after the idle window (queue Active) | {} ({}) | {} ({}) | |\n",
            p.invalid_flavors, p.active, h.invalid_flavors, h.active
        ));
    }
    let hearth_lock = r.lock.as_ref().map(|l| l.p50);
    let py_lock = match (&py.lock_skipped, &py.lock_claimed, &py.lock_admitted) {
        (Some(why), _, _) => format!("not measured: {why}"),
        (None, claimed, admitted) => format!(
            "{} its own `status.locked=true` (written as it creates the sentinel, before any admission); {} the real Fournos's Workload for its sentinel admitted by Kueue",
            secs(claimed.as_ref().map(|l| l.p50)),
            secs(admitted.as_ref().map(|l| l.p50)),
        ),
    };
    md.push_str(&format!(
        "| owner set → locked, p50 | {py_lock} | {} (`status.locked=true` only once Kueue admitted the sentinel) | {} |\n",
        secs(hearth_lock),
        ratio(py.lock_admitted.as_ref().map(|l| l.p50), hearth_lock)
    ));
    md
}

fn summary_md(r: &Results) -> String {
    let mut md = String::new();
    md.push_str("# Hearth benchmark results\n\n");
    md.push_str(&format!(
        "Command: `{}`  \nStarted {}, finished {} (UTC).\n\n",
        r.command, r.started_at, r.finished_at
    ));
    let idle_clusters = r.args.as_ref().map_or(10, |a| a.idle_clusters);
    match &r.python.skipped {
        Some(line) => md.push_str(&format!("Python Hearth: {line}\n\n")),
        None => {
            md.push_str("## Side by side with the Python Hearth\n\nSame plane, same Secrets, same emulated targets, one after the other; this project is a release build with leader election on. The Python Hearth runs as packaged (`kopf run -m hearth.operator` on its two namespaces, its own RBAC from `deploy/`, its defaults) on a ClusterQueue pre-seeded with the one resource group it needs. Ratio: Python / this project.\n\n");
            md.push_str(&side_by_side(r, idle_clusters));
            md.push('\n');
        }
    }
    md.push_str("## Machine and versions\n\n");
    for (k, v) in r.machine.iter().chain(&r.versions) {
        md.push_str(&format!("- {k}: {v}\n"));
    }
    md.push_str("\nLoad (`/proc/loadavg`) when each phase started; the machine's 2 CPUs are shared with other builds:\n\n");
    for (phase, load) in &r.load {
        md.push_str(&format!("- {phase}: {load}\n"));
    }
    md.push_str("\nThe plane (etcd, management and target kube-apiservers, Kueue) runs on the same machine as the controllers; the controllers are release builds with production intervals (resync 30 s, discovery every 5 min), log level info.\n");
    md.push_str("\n## Onboarding latency (s)\n\nLabeled Secret created → FournosCluster `Valid` with GPUs and its flavor with GPU quota in the ClusterQueue; clusters beyond Kueue's 64 flavors per resource group count as done when they get their `KueueSynced=False` answer. Observed by watches (a FournosCluster watch and a ClusterQueue watch), each event timestamped as it arrived; nothing is polled.\n\n");
    md.push_str("| clusters at once | p50 | p95 | max | n | discovery only p50 / p95 | with quota | KueueSynced=False | queue valid |\n|---|---|---|---|---|---|---|---|---|\n");
    for o in &r.onboarding {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            o.clusters,
            fmt(&o.latency),
            o.discovered
                .as_ref()
                .map(|d| format!("{:.2} / {:.2}", d.p50, d.p95))
                .unwrap_or_default(),
            o.with_quota,
            counts(&o.kueue_synced_false),
            o.queue_valid
        ));
    }
    md.push_str(&stages_md(r));
    md.push_str("\n## Lock latency (s)\n\n`spec.owner` set → `status.locked=true` (workload sentinel admitted by Kueue), idle cluster, one at a time. Observed by a watch on the cluster.\n\n| p50 | p95 | max | n |\n|---|---|---|---|\n");
    md.push_str(&format!("| {} |\n", fmt(&r.lock)));
    if r.python.lock_claimed.is_some() {
        md.push_str("\nThe Python Hearth, with the real Fournos, on its first batch (same polling): owner set → its own `status.locked=true` (written as it creates the sentinel), and owner set → the sentinel's Workload admitted by Kueue.\n\n| what | p50 | p95 | max | n |\n|---|---|---|---|---|\n");
        md.push_str(&format!(
            "| `locked=true` | {} |\n",
            fmt(&r.python.lock_claimed)
        ));
        md.push_str(&format!(
            "| sentinel admitted | {} |\n",
            fmt(&r.python.lock_admitted)
        ));
    }
    if !r.idle_cpu.is_empty() {
        let cpu = r
            .idle_cpu
            .iter()
            .map(|(process, secs)| format!("{process} {secs:.2} s"))
            .collect::<Vec<_>>()
            .join(", ");
        let queue = match &r.queue_after_idle {
            Some(q) => format!(
                "{} flavors breaking Kueue's validation, queue Active: {}",
                q.invalid_flavors, q.active
            ),
            None => "not checked".to_string(),
        };
        md.push_str(&format!(
            "\nCPU seconds per process during the idle window: {cpu}. The ClusterQueue after it: {queue}.\n"
        ));
    }
    md.push_str("\n## Memory and CPU\n\nRSS (`VmRSS`, split into anonymous memory and file pages such as the binary's code) and CPU seconds (user+system since start) of each controller after the phase with that many FournosClusters in its namespace.\n\n| FournosClusters | controller | RSS (MiB) | anon / file (MiB) | CPU (s) |\n|---|---|---|---|---|\n");
    for u in r.usage.iter().chain(&r.python.usage) {
        md.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} / {:.1} | {:.2} |\n",
            u.fournos_clusters,
            u.controller,
            u.usage.rss_kib as f64 / 1024.0,
            u.usage.rss_anon_kib as f64 / 1024.0,
            u.usage.rss_file_kib as f64 / 1024.0,
            u.usage.cpu_seconds
        ));
    }
    if let Some(l) = &r.api_load {
        md.push_str(&format!(
            "\n## Steady-state API load\n\n{} onboarded clusters idle for {:.0} s (the window opens once the controllers have written nothing but Lease renewals for {} s); requests to the management apiserver from its audit log (watches counted when they start). Lease requests (leader election: a GET and a PATCH per renewal) are counted apart from reads and writes.\n\n| controller | reads/min | writes/min | Lease/min | writes/min per cluster | requests |\n|---|---|---|---|---|---|\n",
            l.clusters, l.window_secs, QUIET.as_secs()
        ));
        for (c, load) in &l.per_controller {
            let (r, w, lease) = l.per_minute.get(c).copied().unwrap_or_default();
            md.push_str(&format!(
                "| {c} | {r:.2} | {w:.2} | {lease:.2} | {:.3} | {} |\n",
                w / l.clusters.max(1) as f64,
                counts(&load.by_request)
            ));
        }
    }
    if let Some(s) = &r.scale {
        md.push_str(&format!(
            "\n## Scale\n\n{} FournosClusters created at once in one namespace and ClusterQueue: every one `Valid` with GPUs and a `KueueSynced` answer **{:.1} s** after the first Secret was sent. With quota: {}; `KueueSynced=False`: {}. ClusterQueue valid for Kueue: {}; Active: {}.\n\nQuota that stays: **{}** clusters ever had GPU quota in any version of the ClusterQueue the bench's watch saw, where {} fit; {} went from `KueueSynced=True` to a final refusal; the watches re-listed {} times. The run fails when more than fit ever had quota or any lost it.\n",
            s.clusters, s.converge_secs, s.with_quota, counts(&s.kueue_synced_false), s.queue_valid, s.queue_active,
            s.ever_with_quota, s.fit, s.lost_quota.len(), s.watch_relists
        ));
    }
    if !r.notes.is_empty() {
        md.push_str("\n## Notes\n\n");
        for n in &r.notes {
            md.push_str(&format!("- {n}\n"));
        }
    }
    md
}

/// One table per batch: when each stage happened after the Secret was sent, and how long
/// it took after the stage before it.
fn stages_md(r: &Results) -> String {
    let mut md = String::from(
        "\n## Where the time goes (s)\n\nPer stage: seconds from the Secret's create request (p50 / p95 / max), and from the stage before it for the same cluster (p50 / p95 / max). Sources: *bench watch* is the arrival of the watch event at the bench; *discovery log* / *kueue-sync log* are the controllers' own JSON log timestamps (debug lines `probe started`, `probed`, `planned`; same machine, same clock). A step can be negative when two watchers see the same write in the other order.\n",
    );
    let batches = r
        .onboarding
        .iter()
        .map(|o| (o.clusters, &o.stages))
        .chain(r.scale.iter().map(|s| (s.clusters, &s.stages)));
    for (clusters, stages) in batches {
        md.push_str(&format!(
            "\n### {clusters} at once\n\n| stage | source | since Secret p50 / p95 / max | step p50 / p95 / max | n |\n|---|---|---|---|---|\n"
        ));
        for s in stages {
            let pair = |s: &Option<Summary>| {
                s.as_ref()
                    .map(|s| format!("{:.3} / {:.3} / {:.3}", s.p50, s.p95, s.max))
                    .unwrap_or_else(|| "–".to_owned())
            };
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                s.stage,
                s.source,
                pair(&s.since_secret),
                pair(&s.step),
                s.since_secret.as_ref().map_or(0, |x| x.n)
            ));
        }
    }
    md
}

fn write(out: &PathBuf, r: &Results) -> Result<()> {
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("results.json"), serde_json::to_string_pretty(r)?)?;
    std::fs::write(out.join("SUMMARY.md"), summary_md(r))?;
    Ok(())
}

/// The reaction phase alone, on a lock plane of its own (Kueue's WaitForPodsReady on, as
/// the lock tests run it).
async fn lock_reaction(args: &Args, out: &PathBuf, r: Results) -> Result<()> {
    eprintln!("starting the plane…");
    let plane = hearth_e2e::lab::lock_plane().await?;
    let lab = hearth_e2e::lab::LockLab::new(plane, "bench-reaction").await?;
    eprintln!(
        "lock reaction, {} samples of each kind…",
        args.lock_reaction
    );
    let samples = reaction::measure(&lab, args.lock_reaction).await?;
    let of = |kind: Option<reaction::Kind>, pick: fn(&reaction::Sample) -> f64| {
        let values: Vec<f64> = samples
            .iter()
            .filter(|s| kind.is_none_or(|k| s.kind == k))
            .map(pick)
            .collect();
        bench::summarize(&values)
    };
    let rows = [
        ("evicted", Some(reaction::Kind::Evicted)),
        ("deleted", Some(reaction::Kind::Deleted)),
        ("all", None),
    ];
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut md = format!(
        "# Lock-manager's reaction: how long `locked=true` outlives the sentinel's hold\n\n\
         Command: `{}`, run as `HEARTH_E2E_BIN_DIR=\"$(e2e/tools/build.sh)\" \
         HEARTH_E2E_NO_BUILD=1 cargo run -p hearth-e2e --bin hearth-bench -- --lock-reaction \
         {}` (debug build of the workspace, as the e2e tests run it).\n\n\
         Started {}; machine: {}; load average at the end: {}.\n\n\
         One cluster, `workload` sentinels, lock-manager with production settings \
         ({:?}), a real Kueue (WaitForPodsReady on). Each sample takes the slots from a held \
         lock: **evicted** sets `spec.active=false` on the sentinel so that Kueue evicts \
         it (`Evicted=True`, reason `Deactivated`; the lock comes back by deleting that \
         sentinel, not measured); **deleted** deletes the sentinel (lock-manager makes a \
         new one). Seen through two watches of the bench process, \
         each event stamped on arrival: *from write* is the write to the FournosCluster \
         watch showing `locked` no longer true; *from sentinel* is the sentinel watch \
         showing it no longer holding (evicted or being deleted) to that same moment: \
         lock-manager's own reaction.\n\n\
         | samples | measured from | n | p50 | p95 | p99 | max | mean |\n\
         |---|---|---|---|---|---|---|---|\n",
        r.command,
        args.lock_reaction,
        r.started_at,
        r.machine
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        load.trim(),
        reaction::LOCK_MANAGER_ENV,
    );
    for (name, kind) in rows {
        for (from, pick) in [
            (
                "write",
                (|s: &reaction::Sample| s.from_write) as fn(&reaction::Sample) -> f64,
            ),
            ("sentinel", |s: &reaction::Sample| s.from_sentinel),
        ] {
            if let Some(s) = of(kind, pick) {
                md.push_str(&format!(
                    "| {name} | {from} | {} | {:.3} s | {:.3} s | {:.3} s | {:.3} s | {:.3} s |\n",
                    s.n, s.p50, s.p95, s.p99, s.max, s.mean
                ));
            }
        }
    }
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("LOCK-REACTION.md"), md)?;
    std::fs::write(
        out.join("lock-reaction.json"),
        serde_json::to_string_pretty(&json!({
            "command": r.command,
            "started_at": r.started_at,
            "machine": r.machine,
            "samples": samples,
        }))?,
    )?;
    eprintln!("wrote {}", out.join("LOCK-REACTION.md").display());
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let args = Args::parse();
    let now = k8s_openapi::jiff::Timestamp::now();
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("bench-results").join(now.strftime("%Y-%m-%d").to_string())
    });
    let timeout = Duration::from_secs(args.timeout_secs);
    let mut r = Results {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        started_at: now.to_string(),
        machine: machine(),
        versions: versions(),
        args: Some(args.clone()),
        ..Results::default()
    };

    if args.lock_reaction > 0 {
        return lock_reaction(&args, &out, r).await;
    }
    // The supervisor inherits it and turns on the management apiserver's audit log.
    if std::env::var_os(env::AUDIT).is_none() {
        bail!("run with {}=1 (just bench does)", env::AUDIT);
    }
    eprintln!("starting the plane…");
    let plane = ControlPlane::start(PlaneOptions::from_env()?).await?;

    let mut idle_phase = None;
    for &n in &args.sizes {
        eprintln!("onboarding {n} clusters at once…");
        r.load.push((format!("onboarding {n}"), loadavg()));
        let mut phase = Phase::start(&plane, &format!("bench-onboard-{n}")).await?;
        let sent = phase.onboard(&plane, n).await?;
        let c = converge(&phase, &sent, timeout).await?;
        r.onboarding.push(Onboarding {
            clusters: n,
            latency: bench::summarize(&c.latency),
            discovered: bench::summarize(&c.discovered),
            with_quota: c.with_quota,
            kueue_synced_false: c.refused,
            queue_valid: queue_valid(&c.queue) && queue_active(&c.queue),
            stages: onboarding_stages(&phase, &sent),
        });
        r.usage.extend(phase.usage(&plane, n).await?);
        if n == 10 && args.lock_samples > 0 {
            eprintln!("lock latency, {} samples…", args.lock_samples);
            r.lock_samples = lock_latency(&phase, n, args.lock_samples).await?;
            r.lock = bench::summarize(&r.lock_samples);
        }
        write(&out, &r)?;
        if n == args.idle_clusters && args.idle_secs > 0 {
            idle_phase = Some(phase);
        } else {
            phase.stop(&plane).await?;
        }
    }

    let window = Duration::from_secs(args.idle_secs);
    if let Some(mut phase) = idle_phase {
        eprintln!("idle window of {}s…", args.idle_secs);
        let measured = idle(&plane, &phase, args.idle_clusters, window, timeout).await?;
        if !measured.quiet {
            r.notes.push(
                "Hearth still wrote (besides Lease renewals) when the idle window opened."
                    .to_owned(),
            );
        }
        r.api_load = Some(measured.load);
        r.idle_cpu = measured.cpu;
        r.queue_after_idle = Some(measured.queue);
        if args.idle_secs < 300 {
            r.notes.push(format!(
                "The idle window was {} s, shorter than one discovery interval (5 min).",
                args.idle_secs
            ));
        }
        phase.stop(&plane).await?;
        write(&out, &r)?;
    }

    match python_peer(&args.py_sizes) {
        Err(line) => {
            eprintln!("{line}");
            r.python.skipped = Some(line);
        }
        Ok(peer) => {
            let py_timeout = Duration::from_secs(args.py_timeout_secs);
            let mut fournos = fournos_peer(&plane, args.py_lock_samples).await;
            if let Err(why) = &fournos {
                eprintln!("Python Hearth lock latency not measured: {why}");
                r.python.lock_skipped = Some(why.clone());
            }
            for &n in args.py_sizes.iter().filter(|&&n| n > 0) {
                eprintln!("Python Hearth: onboarding {n} clusters at once…");
                r.load.push((format!("Python Hearth {n}"), loadavg()));
                let mut phase =
                    Phase::start_python(&plane, &format!("bench-py-{n}"), &peer).await?;
                let sent = phase.onboard(&plane, n).await?;
                let latencies = converge_quota(&phase, &sent, py_timeout).await?;
                r.python.onboarding.push(PyOnboarding {
                    clusters: n,
                    latency: bench::summarize(&latencies),
                    latencies: latencies.clone(),
                    with_quota: latencies.len(),
                    deadline_secs: args.py_timeout_secs,
                });
                r.python.usage.extend(phase.usage(&plane, n).await?);
                // Once, on the first batch: each cycle takes seconds, not minutes.
                if let Ok(f) = fournos.as_ref() {
                    eprintln!(
                        "Python Hearth: lock latency, {} samples…",
                        args.py_lock_samples
                    );
                    // A peer's failure must not cost the phases still to run: it is
                    // printed in full and named in the table.
                    match py_lock_latency(&plane, &phase, f, n, args.py_lock_samples)
                        .await
                        .unwrap_or_else(|e| {
                            eprintln!("Python Hearth lock latency failed: {e:#}");
                            Err(format!(
                                "failed: {}",
                                e.to_string().lines().next().unwrap_or("")
                            ))
                        }) {
                        Ok(samples) => {
                            let (claimed, admitted): (Vec<f64>, Vec<f64>) =
                                samples.iter().copied().unzip();
                            r.python.lock_claimed = bench::summarize(&claimed);
                            r.python.lock_admitted = bench::summarize(&admitted);
                            r.python.lock_samples = samples;
                        }
                        Err(why) => r.python.lock_skipped = Some(why),
                    }
                    fournos = Err("measured once".to_owned());
                }
                if n == args.idle_clusters && args.idle_secs > 0 {
                    eprintln!("Python Hearth: idle window of {}s…", args.idle_secs);
                    let measured = idle(&plane, &phase, n, window, timeout).await?;
                    if !measured.quiet {
                        r.notes.push(
                            "The Python Hearth still wrote when its idle window opened.".to_owned(),
                        );
                    }
                    r.python.api_load = Some(measured.load);
                    r.python.idle_cpu = measured.cpu;
                    r.python.queue_after_idle = Some(measured.queue);
                }
                phase.stop(&plane).await?;
                write(&out, &r)?;
            }
        }
    }

    if args.scale > 0 {
        eprintln!("scale: {} FournosClusters…", args.scale);
        r.load.push((format!("scale {}", args.scale), loadavg()));
        let mut phase = Phase::start(&plane, "bench-scale").await?;
        let sent = phase.onboard(&plane, args.scale).await?;
        let c = converge(&phase, &sent, timeout).await?;
        let first_sent = sent.values().map(|s| s.at).min();
        let last_done = {
            let seen = phase.observer.lock();
            sent.keys()
                .filter_map(|n| Some(seen.clusters.get(n)?.done.as_ref()?.0))
                .max()
        };
        let fit = args.scale.min(MAX_FLAVORS_PER_GROUP);
        let scale = Scale {
            clusters: args.scale,
            converge_secs: first_sent
                .zip(last_done)
                .map_or(0.0, |(from, to)| secs_between(from, to)),
            with_quota: c.with_quota,
            kueue_synced_false: c.refused,
            queue_valid: queue_valid(&c.queue),
            queue_active: queue_active(&c.queue),
            fit,
            ever_with_quota: c.ever_with_quota,
            lost_quota: c.lost_quota,
            watch_relists: c.relists,
            stages: onboarding_stages(&phase, &sent),
        };
        let moved = scale.ever_with_quota > fit || !scale.lost_quota.is_empty();
        if moved {
            r.notes.push(format!(
                "FAILED: in the scale phase {} clusters ever had GPU quota where {fit} fit, and {} lost it to another cluster ({}).",
                scale.ever_with_quota,
                scale.lost_quota.len(),
                scale.lost_quota.iter().take(10).cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        r.scale = Some(scale);
        r.usage.extend(phase.usage(&plane, args.scale).await?);
        phase.stop(&plane).await?;
        if moved {
            r.finished_at = k8s_openapi::jiff::Timestamp::now().to_string();
            write(&out, &r)?;
            plane.stop().await?;
            bail!(
                "quota moved between clusters in the scale phase: see {}",
                out.display()
            );
        }
    }

    r.finished_at = k8s_openapi::jiff::Timestamp::now().to_string();
    write(&out, &r)?;
    eprintln!("wrote {}", out.display());
    plane.stop().await?;
    Ok(())
}
