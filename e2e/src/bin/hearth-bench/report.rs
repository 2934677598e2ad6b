//! `SUMMARY.md` and `results.json`: the tables a person reads.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Result;
use hearth_e2e::bench::{self, ApiLoad, Summary};

use crate::idle::QUIET;
use crate::results::{Load, Results, UsageAt};

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

pub fn fmt(s: &Option<Summary>) -> String {
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

pub fn write(out: &PathBuf, r: &Results) -> Result<()> {
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("results.json"), serde_json::to_string_pretty(r)?)?;
    std::fs::write(out.join("SUMMARY.md"), summary_md(r))?;
    Ok(())
}
