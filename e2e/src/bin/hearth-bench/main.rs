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

mod args;
mod idle;
mod lock_reaction;
mod phase;
mod python;
mod report;
mod results;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Parser;
use hearth_api::kueue_validity::MAX_FLAVORS_PER_GROUP;
use hearth_e2e::bench;
use hearth_e2e::layout::env;
use hearth_e2e::{ControlPlane, PlaneOptions};

use crate::args::Args;
use crate::idle::idle;
use crate::lock_reaction::lock_reaction;
use crate::phase::{
    Phase, converge, converge_quota, lock_latency, onboarding_stages, queue_active, queue_valid,
    secs_between,
};
use crate::python::{fournos_peer, py_lock_latency, python_peer};
use crate::report::write;
use crate::results::{Onboarding, PyOnboarding, Results, Scale, loadavg, machine, versions};

#[tokio::main]
async fn main() -> Result<()> {
    hearth_e2e::init_tool_logging();
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
