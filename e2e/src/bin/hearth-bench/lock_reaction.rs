//! The lock-reaction phase alone (`--lock-reaction N`): `LOCK-REACTION.md` and
//! `lock-reaction.json`.

use std::path::PathBuf;

use anyhow::Result;
use hearth_e2e::bench;
use hearth_e2e::reaction;
use serde_json::json;

use crate::args::Args;
use crate::results::Results;

/// The reaction phase alone, on a lock plane of its own (Kueue's WaitForPodsReady on, as
/// the lock tests run it).
pub async fn lock_reaction(args: &Args, out: &PathBuf, r: Results) -> Result<()> {
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
