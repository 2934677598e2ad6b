//! `hearth-chaos`: while clusters are onboarded, locked, unlocked and offboarded, SIGKILLs
//! Hearth's controllers at random moments (and starts them again), then checks the
//! invariants from the live API until they hold, and reports how long that took.
//!
//! Invariants (checked in one scope: its Secrets, FournosClusters, ResourceFlavors,
//! ClusterQueue and sentinel Workloads):
//! - exactly one FournosCluster per labeled kubeconfig Secret, none for a deleted one;
//! - every FournosCluster `Valid`, `GPUDiscovered=True`, and either `KueueSynced=True` with
//!   exactly one Hearth flavor and one ClusterQueue entry whose quota is its discovered
//!   GPUs and 100 slots, or `KueueSynced=False/LimitReached` with no entry;
//! - no Hearth flavor or entry for a cluster that is gone;
//! - exactly one sentinel per wanted lock, none otherwise; `locked` true exactly for the
//!   clusters with an owner (and quota);
//! - the foreign flavor entry placed in the queue before the run is still there.
//!
//! The management apiserver is restarted once, halfway through the kills
//! ([`ControlPlane::restart_management`]). Then, in a scope of its own, a target apiserver
//! flaps (`--flap-secs`) and the ClusterQueue spec changes it causes are counted. Writes
//! `bench-results/<date>/CHAOS.md` and `chaos.json`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use hearth_api::kueue::{ClusterQueue, quantity_to_i64};
use hearth_api::names::condition_types::{GPU_DISCOVERED, KUEUE_SYNCED};
use hearth_api::names::{CLUSTER_SLOT_RESOURCE, KUBECONFIG_SECRET_SELECTOR, MANAGED_BY_LABEL};
use hearth_api::{FournosCluster, KubeconfigStatus};
use hearth_e2e::hearth::{self, Controller, Running};
use hearth_e2e::invariants;
use hearth_e2e::objects::foreign_widget_group;
use hearth_e2e::process::{until, wait};
use hearth_e2e::resources::apply;
use hearth_e2e::world::World;
use hearth_e2e::{ControlPlane, NodeSpec, PlaneOptions, TargetFleet};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde::Serialize;
use serde_json::json;

#[derive(Parser, Debug, Clone, Serialize)]
#[command(about = "Kills Hearth's controllers while clusters come and go, then checks invariants")]
struct Args {
    /// Clusters onboarded (Kueue takes 64 per resource group; the rest must say LimitReached).
    #[arg(long, default_value_t = 100)]
    clusters: usize,
    /// Clusters locked during the run (half of them unlocked again).
    #[arg(long, default_value_t = 30)]
    locks: usize,
    /// Clusters offboarded during the run (the newest ones).
    #[arg(long, default_value_t = 20)]
    offboard: usize,
    /// SIGKILLs in all, spread over the three controllers.
    #[arg(long, default_value_t = 9)]
    kills: usize,
    /// Longest time to converge after the last kill, in seconds.
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
    /// Restart the management apiserver once, halfway through the kills.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    restart_apiserver: bool,
    /// Then let a target apiserver flap (down 3 s, up 3 s) for this many seconds and count
    /// the ClusterQueue spec changes it causes (0 skips it).
    #[arg(long, default_value_t = 120)]
    flap_secs: u64,
    /// Where CHAOS.md and chaos.json go (default bench-results/<UTC date>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Seed of the random moments.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
}

const CHAOS_ENV: &[(&str, &str)] = &[
    ("HEARTH_RECONCILE_INTERVAL_SEC", "30"),
    ("HEARTH_LOG_LEVEL", "info"),
];

/// xorshift64: reproducible moments from `--seed`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Serialize)]
struct Report {
    command: String,
    started_at: String,
    args: Args,
    kills: Vec<String>,
    /// Invariants sampled every 0.5 s from the workload's last operation until the last
    /// kill, while controllers kept dying.
    during: During,
    converge_secs: Option<f64>,
    violations_at_timeout: Vec<String>,
    final_state: BTreeMap<String, usize>,
    flap: Option<Flap>,
}

#[derive(Serialize, Default)]
struct During {
    /// Samples taken, with violations, and that could not read the API (apiserver down).
    samples: usize,
    violating: usize,
    unreadable: usize,
    /// Seconds after the last operation at which a violation was last seen (`None`:
    /// never): from then on every sample held, kills notwithstanding.
    last_violation_secs: Option<f64>,
    /// The violations of the last violating sample.
    last_violations: Vec<String>,
}

#[derive(Serialize)]
struct Flap {
    secs: f64,
    outages: usize,
    /// `metadata.generation` increments of the ClusterQueue: spec writes that changed it.
    cluster_queue_spec_changes: i64,
    /// Seconds until the flapping cluster had its quota back after the last outage.
    recovered_secs: Option<f64>,
}

/// A target that goes down and up again and again, with one cluster on it and one on a
/// stable target, discovery probing every 5 s: how often does the ClusterQueue change?
async fn flap(plane: &ControlPlane, secs: u64) -> Result<Flap> {
    let iso = plane.isolated("flap").await?;
    let env: &[(&str, &str)] = &[
        ("HEARTH_RECONCILE_INTERVAL_SEC", "30"),
        ("HEARTH_LOG_LEVEL", "info"),
        ("HEARTH_GPU_DISCOVERY_DEFAULT_INTERVAL_SEC", "5"),
        ("HEARTH_GPU_DISCOVERY_TIMEOUT_SEC", "2"),
    ];
    let mut running = Vec::new();
    for c in [Controller::Discovery, Controller::KueueSync] {
        running.push(hearth::start(plane, &iso, c, "0", env).await?);
    }
    let target = plane
        .add_target(TargetFleet::new(
            format!("flap-{}", iso.id),
            vec![NodeSpec::nvidia("flap-gpu-1", "NVIDIA-L40S", 2)],
        ))
        .await?;
    let flapping = format!("flapping-{}", iso.id);
    let stable = format!("stable-{}", iso.id);
    plane
        .create_kubeconfig_secret(
            &iso.secrets_namespace,
            &flapping,
            target.node_reader_kubeconfig(),
        )
        .await?;
    plane
        .create_kubeconfig_secret(
            &iso.secrets_namespace,
            &stable,
            plane.targets()[0].node_reader_kubeconfig(),
        )
        .await?;
    let client = plane.management_client().await?;
    let queues: Api<ClusterQueue> = Api::all(client.clone());
    let with_quota = |cq: &ClusterQueue, name: &str| {
        cq.spec
            .resource_groups
            .iter()
            .flat_map(|g| &g.flavors)
            .any(|f| {
                f.name == name
                    && f.resources.iter().any(|q| {
                        q.name.starts_with("fournos/gpu-")
                            && quantity_to_i64(&q.nominal_quota).is_some_and(|n| n > 0)
                    })
            })
    };
    let wait_both = |timeout: Duration| {
        let queues = queues.clone();
        let (flapping, stable, queue) =
            (flapping.clone(), stable.clone(), iso.cluster_queue.clone());
        async move {
            let t0 = Instant::now();
            let cq = until(
                "the flap scope to have both clusters' quota",
                timeout,
                || async {
                    let cq = queues.get(&queue).await?;
                    Ok(if with_quota(&cq, &flapping) && with_quota(&cq, &stable) {
                        Ok(cq)
                    } else {
                        Err(format!("{:?}", invariants::entries(&cq).keys()))
                    })
                },
            )
            .await?;
            Ok::<_, anyhow::Error>((t0.elapsed().as_secs_f64(), cq))
        }
    };
    let (_, cq) = wait_both(Duration::from_secs(120)).await?;
    let g0 = cq.metadata.generation.unwrap_or(0);
    let t0 = Instant::now();
    let mut outages = 0;
    while t0.elapsed() < Duration::from_secs(secs) {
        plane.stop_target(target.name()).await?;
        outages += 1;
        tokio::time::sleep(Duration::from_secs(3)).await;
        plane.start_target(target.name()).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let recovered = wait_both(Duration::from_secs(120)).await;
    let g1 = queues
        .get(&iso.cluster_queue)
        .await?
        .metadata
        .generation
        .unwrap_or(0);
    for r in &running {
        r.stop(plane).await?;
    }
    Ok(Flap {
        secs: elapsed,
        outages,
        cluster_queue_spec_changes: g1 - g0,
        recovered_secs: recovered.ok().map(|(s, _)| s),
    })
}

/// Cluster `i` of the chaos scope.
fn cluster(w: &World<'_>, i: usize) -> String {
    format!("c{i}-{}", w.scope.id)
}

/// Starts (or restarts) controller `c` in the chaos scope.
async fn start(w: &World<'_>, c: Controller, instance: &str) -> Result<Running> {
    Ok(hearth::start(w.plane, &w.scope, c, instance, CHAOS_ENV).await?)
}

/// Everything wrong with the scope right now; empty when every invariant holds.
async fn violations(
    w: &World<'_>,
    foreign: &str,
    wanted_locks: &BTreeSet<String>,
    state: &mut BTreeMap<String, usize>,
) -> Result<Vec<String>> {
    let mut v = Vec::new();
    let (secrets, clusters, flavors, queues) = (&w.secrets, &w.clusters, &w.flavors, &w.queues);

    let secret_clusters: BTreeSet<String> = secrets
        .list(&ListParams::default().labels(KUBECONFIG_SECRET_SELECTOR))
        .await?
        .items
        .into_iter()
        .filter_map(|s| {
            s.metadata
                .name?
                .strip_prefix("kubeconfig-")
                .map(str::to_owned)
        })
        .collect();
    let fcs: BTreeMap<String, FournosCluster> = clusters
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|c| Some((c.metadata.name.clone()?, c)))
        .collect();
    let names: BTreeSet<String> = fcs.keys().cloned().collect();
    if names != secret_clusters {
        v.push(format!(
            "FournosClusters without Secret {:?}, Secrets without FournosCluster {:?}",
            names.difference(&secret_clusters).collect::<Vec<_>>(),
            secret_clusters.difference(&names).collect::<Vec<_>>()
        ));
    }

    let hearth_flavors: BTreeSet<String> = flavors
        .list(&ListParams::default().labels(&format!("{MANAGED_BY_LABEL}=hearth")))
        .await?
        .items
        .into_iter()
        .filter_map(|f| f.metadata.name)
        .filter(|n| n.ends_with(&w.scope.id))
        .collect();
    let cq = queues.get(&w.scope.cluster_queue).await?;
    let entries: BTreeMap<String, Vec<BTreeMap<String, i64>>> = invariants::entries(&cq)
        .into_iter()
        .map(|(flavor, quotas)| {
            (
                flavor,
                quotas.into_iter().map(invariants::nonzero).collect(),
            )
        })
        .collect();
    if entries.get(foreign).is_none_or(|e| e.len() != 1) {
        v.push(format!("foreign entry {foreign} lost or doubled"));
    }
    for gone in hearth_flavors.difference(&names) {
        v.push(format!("flavor {gone} of a cluster that is gone"));
    }
    for gone in entries
        .keys()
        .filter(|e| **e != foreign && !names.contains(*e))
    {
        v.push(format!("queue entry {gone} of a cluster that is gone"));
    }

    let sentinels = invariants::sentinel_counts(&w.workloads).await?;

    let (mut synced, mut limit, mut locked) = (0, 0, 0);
    for (name, c) in &fcs {
        let Some(s) = &c.status else {
            v.push(format!("{name}: no status"));
            continue;
        };
        let cond = |t: &str| s.conditions.iter().find(|k| k.type_ == t);
        if s.kubeconfig_status != Some(KubeconfigStatus::Valid)
            || cond(GPU_DISCOVERED).is_none_or(|k| k.status != "True")
        {
            v.push(format!(
                "{name}: not Valid with GPUs ({:?})",
                s.kubeconfig_status
            ));
            continue;
        }
        let entry = entries.get(name);
        match cond(KUEUE_SYNCED) {
            Some(k) if k.status == "True" => {
                synced += 1;
                let mut want: BTreeMap<String, i64> =
                    BTreeMap::from([(CLUSTER_SLOT_RESOURCE.to_owned(), 100)]);
                for g in s.hardware.iter().flat_map(|h| &h.gpus) {
                    *want
                        .entry(format!("fournos/gpu-{}", g.short_name))
                        .or_insert(0) += g.count;
                }
                if entry != Some(&vec![want.clone()]) {
                    v.push(format!("{name}: entry {entry:?}, want {want:?}"));
                }
                if !hearth_flavors.contains(name) {
                    v.push(format!("{name}: no Hearth flavor"));
                }
            }
            Some(k) if k.status == "False" && k.reason == "LimitReached" => {
                limit += 1;
                if entry.is_some() {
                    v.push(format!("{name}: LimitReached but has an entry"));
                }
            }
            other => v.push(format!(
                "{name}: KueueSynced {:?}",
                other.map(|k| (&k.status, &k.reason))
            )),
        }
        let wants = wanted_locks.contains(name) && c.spec.owner.is_some();
        let has = sentinels.get(name).copied().unwrap_or(0);
        let is_locked = s.locked == Some(true);
        if is_locked {
            locked += 1;
        }
        let can_lock = entry.is_some();
        // A wanted lock on a cluster without quota (beyond Kueue's limit) waits for its
        // flavor, with or without a sentinel; otherwise exactly one, or none.
        let sentinels_ok = match (wants, can_lock) {
            (true, true) => has == 1,
            (true, false) => has <= 1,
            (false, _) => has == 0,
        };
        if !sentinels_ok {
            v.push(format!("{name}: {has} sentinels, lock wanted: {wants}"));
        }
        if is_locked != (wants && can_lock) {
            v.push(format!(
                "{name}: locked={is_locked}, wanted {wants}, quota {can_lock}"
            ));
        }
    }
    for (c, _) in sentinels.iter().filter(|(c, _)| !names.contains(*c)) {
        v.push(format!("sentinel of {c}, which is gone"));
    }
    *state = BTreeMap::from([
        ("fournos_clusters".to_owned(), fcs.len()),
        ("kueue_synced".to_owned(), synced),
        ("limit_reached".to_owned(), limit),
        ("locked".to_owned(), locked),
        ("sentinels".to_owned(), sentinels.values().sum()),
        ("hearth_flavors".to_owned(), hearth_flavors.len()),
    ]);
    Ok(v)
}

#[tokio::main]
async fn main() -> Result<()> {
    hearth_e2e::init_tool_logging();
    let args = Args::parse();
    if args.locks + args.offboard > args.clusters {
        bail!("--locks + --offboard must not exceed --clusters");
    }
    let started = k8s_openapi::jiff::Timestamp::now();
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("bench-results").join(started.strftime("%Y-%m-%d").to_string())
    });
    let mut rng = Rng(args.seed | 1);

    eprintln!("starting the plane…");
    let plane = ControlPlane::start(PlaneOptions::from_env()?).await?;
    let iso = plane.isolated("chaos").await?;
    let client = plane.management_client().await?;
    let foreign = format!("foreign-{}", iso.id);
    apply(
        &client,
        &json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": { "name": foreign }, "spec": {},
        }),
    )
    .await?;
    Api::<ClusterQueue>::all(client.clone())
        .patch(
            &iso.cluster_queue,
            &PatchParams::default(),
            &Patch::Merge(foreign_widget_group(&foreign)),
        )
        .await
        .context("adding the foreign entry")?;
    let w = World::new(&plane, iso).await?;

    let mut running: BTreeMap<Controller, Running> = BTreeMap::new();
    for c in Controller::ALL {
        running.insert(c, start(&w, c, "0").await?);
    }

    // The workload: onboard everything, then lock, unlock and offboard, with pauses, while
    // the killer runs.
    let targets = w.plane.targets();
    let secrets: Api<Secret> = Api::namespaced(w.client.clone(), &w.scope.secrets_namespace);
    let clusters: Api<FournosCluster> = Api::namespaced(w.client.clone(), &w.scope.namespace);
    let locked: Vec<String> = (0..args.locks).map(|i| cluster(&w, i)).collect();
    let unlocked: BTreeSet<String> = locked.iter().step_by(2).cloned().collect();
    let offboarded: Vec<String> = (args.clusters - args.offboard..args.clusters)
        .map(|i| cluster(&w, i))
        .collect();
    let workload = async {
        for i in 0..args.clusters {
            w.plane
                .create_kubeconfig_secret(
                    &w.scope.secrets_namespace,
                    &cluster(&w, i),
                    targets[i % targets.len()].node_reader_kubeconfig(),
                )
                .await?;
        }
        // Owners go on as soon as the FournosClusters exist.
        for name in &locked {
            until(
                &format!("{name} created"),
                Duration::from_secs(120),
                || async {
                    Ok(match clusters.get_opt(name).await? {
                        Some(_) => Ok(()),
                        None => Err("not yet".to_owned()),
                    })
                },
            )
            .await?;
            clusters
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": { "owner": "chaos" } })),
                )
                .await?;
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        for name in &unlocked {
            clusters
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": { "owner": null } })),
                )
                .await?;
        }
        for name in &offboarded {
            secrets
                .delete(&format!("kubeconfig-{name}"), &DeleteParams::default())
                .await?;
        }
        Ok::<_, anyhow::Error>(())
    };
    let wanted: BTreeSet<String> = locked
        .iter()
        .filter(|n| !unlocked.contains(*n) && !offboarded.contains(n))
        .cloned()
        .collect();
    let killing = std::sync::atomic::AtomicBool::new(true);
    // After the workload's last operation, sample the invariants while the kills go on:
    // convergence under continuing chaos, not just after it.
    let workload_then_watch = async {
        workload.await?;
        let t_ops = Instant::now();
        let mut during = During::default();
        let mut scratch = BTreeMap::new();
        while killing.load(std::sync::atomic::Ordering::SeqCst) {
            during.samples += 1;
            match violations(&w, &foreign, &wanted, &mut scratch).await {
                Ok(v) if v.is_empty() => {}
                Ok(v) => {
                    during.violating += 1;
                    during.last_violation_secs = Some(t_ops.elapsed().as_secs_f64());
                    during.last_violations = v;
                }
                Err(_) => during.unreadable += 1,
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok::<_, anyhow::Error>(during)
    };
    let mut kills = Vec::new();
    let killer = async {
        for k in 0..args.kills {
            tokio::time::sleep(Duration::from_millis(500 + rng.below(4000))).await;
            let c = Controller::ALL[usize::try_from(rng.below(3))?];
            let victim = running.remove(&c).context("controller missing")?;
            victim.kill(w.plane).await?;
            let at = (k8s_openapi::jiff::Timestamp::now(), c.binary());
            // Down for a random moment, then back (a new process, as after a crash).
            tokio::time::sleep(Duration::from_millis(rng.below(3000))).await;
            running.insert(c, start(&w, c, &format!("r{k}")).await?);
            kills.push(format!("{} SIGKILL {}", at.0, at.1));
            if k == args.kills / 2 && args.restart_apiserver {
                let at = k8s_openapi::jiff::Timestamp::now();
                w.plane.restart_management().await?;
                kills.push(format!(
                    "{at} management apiserver restarted (down {:.1} s)",
                    (k8s_openapi::jiff::Timestamp::now() - at)
                        .total(k8s_openapi::jiff::Unit::Second)
                        .unwrap_or(0.0)
                ));
            }
        }
        killing.store(false, std::sync::atomic::Ordering::SeqCst);
        Ok::<_, anyhow::Error>(())
    };
    let (a, b) = tokio::join!(workload_then_watch, killer);
    let during = a.context("the workload")?;
    b.context("the killer")?;

    eprintln!(
        "{} kills and restarts done; waiting for the invariants…",
        kills.len()
    );
    let t0 = Instant::now();
    let last_state = std::cell::RefCell::new(BTreeMap::new());
    let converged = wait(Duration::from_secs(args.timeout_secs), || async {
        let mut state = BTreeMap::new();
        let v = violations(&w, &foreign, &wanted, &mut state).await?;
        *last_state.borrow_mut() = state;
        Ok::<_, anyhow::Error>(if v.is_empty() {
            Ok(())
        } else {
            Err(v.join("\n"))
        })
    })
    .await?;
    let state = last_state.into_inner();
    let (converge_secs, violations_at_timeout) = match converged {
        Ok(()) => (Some(t0.elapsed().as_secs_f64()), Vec::new()),
        Err(last) => (None, last.lines().map(str::to_owned).collect()),
    };

    let flap = if args.flap_secs > 0 {
        eprintln!("flapping a target for {}s…", args.flap_secs);
        Some(flap(w.plane, args.flap_secs).await?)
    } else {
        None
    };

    let report = Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        started_at: started.to_string(),
        args: args.clone(),
        kills,
        during,
        converge_secs,
        violations_at_timeout,
        final_state: state,
        flap,
    };
    std::fs::create_dir_all(&out)?;
    std::fs::write(
        out.join("chaos.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    let mut md = format!(
        "# Chaos run\n\nCommand: `{}` (started {}).\n\n{} clusters onboarded, {} locked (every other one unlocked again), {} offboarded, while {} SIGKILLs hit the controllers at random moments (each restarted after a random pause of up to 3 s); management apiserver restarted once halfway: {}.\n\n",
        report.command,
        report.started_at,
        args.clusters,
        args.locks,
        args.offboard,
        report
            .kills
            .iter()
            .filter(|k| k.contains("SIGKILL"))
            .count(),
        args.restart_apiserver
    );
    let d = &report.during;
    md.push_str(&format!(
        "**While the kills went on** (sampled every 0.5 s from the workload's last operation to the last kill: {} samples, {} unreadable while the apiserver was down): {}\n\n",
        d.samples,
        d.unreadable,
        match d.last_violation_secs {
            None => "every readable sample held every invariant.".to_owned(),
            Some(t) => format!(
                "{} samples saw a violation, the last one {t:.1} s after the last operation ({}); every sample after it held.",
                d.violating,
                d.last_violations.join("; ")
            ),
        }
    ));
    match report.converge_secs {
        Some(s) => md.push_str(&format!(
            "**Every invariant held {s:.1} s after the last restart (checked every 0.5 s).**\n\n"
        )),
        None => md.push_str(&format!(
            "**Invariants still violated after {} s:**\n\n{}\n\n",
            args.timeout_secs,
            report
                .violations_at_timeout
                .iter()
                .map(|v| format!("- {v}"))
                .collect::<Vec<_>>()
                .join("\n")
        )),
    }
    md.push_str(&format!(
        "Final state: {:?}\n\nEvents:\n\n",
        report.final_state
    ));
    for k in &report.kills {
        md.push_str(&format!("- {k}\n"));
    }
    if let Some(f) = &report.flap {
        md.push_str(&format!(
            "\n## Flapping target\n\nA target apiserver stopped for 3 s and started again (start takes a few seconds), {} times in {:.0} s, with discovery probing every 5 s (timeout 2 s) and a stable cluster alongside: the ClusterQueue spec changed **{} times** (`metadata.generation`). The flapping cluster had its quota back {} after the last outage.\n",
            f.outages,
            f.secs,
            f.cluster_queue_spec_changes,
            f.recovered_secs
                .map(|s| format!("{s:.1} s"))
                .unwrap_or_else(|| "not within 120 s".to_owned())
        ));
    }
    std::fs::write(out.join("CHAOS.md"), md)?;
    eprintln!("wrote {}", out.join("CHAOS.md").display());
    drop(w);
    plane.stop().await?;
    if report.converge_secs.is_none() {
        bail!("invariants violated");
    }
    Ok(())
}
