//! Lock-manager's reaction time: how long it may keep saying `locked=true` after its
//! sentinel stopped holding the cluster's slots (Kueue evicted it, or someone deleted
//! it). Measured by `hearth-bench --lock-reaction N` on one cluster of a lock scope with
//! a real Kueue and the real lock-manager (`workload` sentinels, production settings).
//!
//! Everything is seen through two watches of this process, each event stamped when it
//! arrives: the FournosCluster (`status.locked`) and the cluster's sentinels. A sample is
//! one write that takes the slots away from a held lock:
//! - **evicted**: `spec.active=false` on the sentinel, so that Kueue evicts it
//!   (`Evicted=True`, reason `Deactivated`); the lock comes back by deleting that
//!   sentinel (Kueue keeps a deactivated bare Workload's admission), not measured;
//! - **deleted**: the sentinel deleted; lock-manager makes a new one.
//!
//! For each it records the time from the write, and from the moment the sentinel watch
//! showed the sentinel no longer holding, to the cluster watch showing `locked` no longer
//! true. The second is lock-manager's own reaction (plus one watch delivery, the same for
//! both watches); the first adds Kueue's.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use futures::StreamExt as _;
use hearth_api::FournosCluster;
use hearth_api::kueue::Workload;
use hearth_api::names::CLUSTER_LOCK_LABEL;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::watcher::{self, Event};
use serde::Serialize;
use serde_json::json;
use tokio::sync::mpsc;

use crate::hearth::{self, Controller, Running};
use crate::invariants::workload_is;
use crate::lab::{LockLab, SLOTS, says_locked};

/// How long one step (a lock coming back, or going) may take before the run fails.
const STEP_DEADLINE: Duration = Duration::from_secs(120);

/// Production settings (the chart's): resync 30 s, leader election on, log level info.
pub const LOCK_MANAGER_ENV: &[(&str, &str)] = &[
    ("HEARTH_SENTINEL", "workload"),
    ("HEARTH_RECONCILE_INTERVAL_SEC", "30"),
    ("HEARTH_LEADER_ELECTION", "true"),
    ("HEARTH_LOG_LEVEL", "info"),
];

/// How the slots were taken away.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Evicted,
    Deleted,
}

/// One measured loss of a held lock, in seconds.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    pub kind: Kind,
    /// From the write (deactivation or deletion) to `locked` no longer true.
    pub from_write: f64,
    /// From the sentinel watch showing it no longer holding to `locked` no longer true
    /// (negative if the cluster's watch event arrived first).
    pub from_sentinel: f64,
}

/// What the two watches say, each event stamped on arrival.
enum Seen {
    Cluster {
        at: Instant,
        locked: bool,
    },
    Sentinel {
        at: Instant,
        name: String,
        uid: String,
        holding: bool,
    },
}

/// The latest of each watch.
#[derive(Default)]
struct Now {
    locked: bool,
    /// The live sentinel's name and UID, while one holds the slots.
    holding: Option<(String, String)>,
}

/// Whether a sentinel holds the slots: admitted, not evicted, not being deleted.
fn holding(w: &Workload) -> bool {
    workload_is(w, "Admitted")
        && !workload_is(w, "Evicted")
        && w.metadata.deletion_timestamp.is_none()
}

fn watch_cluster(api: Api<FournosCluster>, name: &str, tx: mpsc::UnboundedSender<Seen>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher::watcher(api, config));
        while let Some(event) = events.next().await {
            let at = Instant::now();
            if let Err(e) = &event {
                tracing::warn!(error = %e, "the FournosCluster watch failed; it retries");
            }
            if let Ok(Event::Apply(fc) | Event::InitApply(fc)) = event
                && tx
                    .send(Seen::Cluster {
                        at,
                        locked: says_locked(&fc),
                    })
                    .is_err()
            {
                return;
            }
        }
    });
}

fn watch_sentinels(api: Api<Workload>, cluster: &str, tx: mpsc::UnboundedSender<Seen>) {
    let config = watcher::Config::default().labels(&format!("{CLUSTER_LOCK_LABEL}={cluster}"));
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher::watcher(api, config));
        while let Some(event) = events.next().await {
            let at = Instant::now();
            let (w, gone) = match event {
                Ok(Event::Apply(w) | Event::InitApply(w)) => (w, false),
                Ok(Event::Delete(w)) => (w, true),
                Err(e) => {
                    tracing::warn!(error = %e, "the sentinel watch failed; it retries");
                    continue;
                }
                _ => continue,
            };
            let seen = Seen::Sentinel {
                at,
                name: w.name_any(),
                uid: w.uid().unwrap_or_default(),
                holding: !gone && holding(&w),
            };
            if tx.send(seen).is_err() {
                return;
            }
        }
    });
}

/// Lock-manager's reaction, `samples` times each way, on one cluster of `lab`.
pub async fn measure(lab: &LockLab, samples: usize) -> Result<Vec<Sample>> {
    let cluster = lab.scope.cluster("reaction");
    lab.queue_cluster(&cluster).await?;
    lab.publish_slots(&cluster, SLOTS).await?;
    let running: Running = hearth::start(
        lab.plane,
        &lab.scope,
        Controller::LockManager,
        "0",
        LOCK_MANAGER_ENV,
    )
    .await
    .context("starting hearth-lock-manager")?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    watch_cluster(lab.clusters.clone(), &cluster, tx.clone());
    let sentinels: Api<Workload> =
        Api::namespaced(lab.client.clone(), &lab.scope.execution_namespace);
    watch_sentinels(sentinels.clone(), &cluster, tx);
    lab.set_spec(&cluster, json!({ "owner": "bench" })).await?;

    let out = samples_of(&mut rx, &sentinels, samples)
        .await
        .map_err(|e| hearth::with_logs(e, std::slice::from_ref(&running)));
    lab.set_spec(&cluster, json!({ "owner": null })).await?;
    running.kill(lab.plane).await?;
    out
}

/// `samples` losses of each kind, alternating.
async fn samples_of(
    rx: &mut mpsc::UnboundedReceiver<Seen>,
    sentinels: &Api<Workload>,
    samples: usize,
) -> Result<Vec<Sample>> {
    let mut now = Now::default();
    let mut out = Vec::new();
    for i in 0..samples * 2 {
        let kind = if i % 2 == 0 {
            Kind::Evicted
        } else {
            Kind::Deleted
        };
        // Held, and the sentinel that holds it known.
        step(rx, &mut now, "the lock held", |n| {
            n.locked && n.holding.is_some()
        })
        .await?;
        let (name, uid) = now.holding.clone().expect("checked above");
        let written = Instant::now();
        match kind {
            Kind::Evicted => {
                sentinels
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "spec": { "active": false } })),
                    )
                    .await
                    .with_context(|| format!("deactivating {name}"))?;
            }
            Kind::Deleted => delete(sentinels, &name, &uid).await?,
        }
        let (unlocked, lost) = loss(rx, &mut now, &uid).await?;
        out.push(Sample {
            kind,
            from_write: unlocked.duration_since(written).as_secs_f64(),
            from_sentinel: signed_secs(unlocked, lost),
        });
        if kind == Kind::Evicted {
            // Kueue keeps a deactivated bare Workload's admission and its Evicted
            // condition even once active again: the lock comes back with a new sentinel.
            delete(sentinels, &name, &uid).await?;
        }
    }
    Ok(out)
}

/// Deletes sentinel `name` if it still is `uid`.
async fn delete(sentinels: &Api<Workload>, name: &str, uid: &str) -> Result<()> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    sentinels
        .delete(name, &params)
        .await
        .with_context(|| format!("deleting {name}"))?;
    Ok(())
}

/// `a - b` in seconds, negative when `a` came first.
fn signed_secs(a: Instant, b: Instant) -> f64 {
    if a >= b {
        a.duration_since(b).as_secs_f64()
    } else {
        -b.duration_since(a).as_secs_f64()
    }
}

/// Applies one event to what is known.
fn apply(now: &mut Now, seen: Seen) {
    match seen {
        Seen::Cluster { locked, .. } => now.locked = locked,
        Seen::Sentinel {
            name, uid, holding, ..
        } => {
            if holding {
                now.holding = Some((name, uid));
            } else if now.holding.as_ref().is_some_and(|(_, u)| *u == uid) {
                now.holding = None;
            }
        }
    }
}

/// Consumes events until `done` holds (with a deadline).
async fn step(
    rx: &mut mpsc::UnboundedReceiver<Seen>,
    now: &mut Now,
    what: &str,
    done: impl Fn(&Now) -> bool,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + STEP_DEADLINE;
    while !done(now) {
        let seen = next(rx, deadline, what).await.with_context(|| {
            format!(
                "last seen: locked={}, holding={:?}",
                now.locked, now.holding
            )
        })?;
        apply(now, seen);
    }
    Ok(())
}

/// The next event, unless `deadline` passes first.
async fn next(
    rx: &mut mpsc::UnboundedReceiver<Seen>,
    deadline: tokio::time::Instant,
    what: &str,
) -> Result<Seen> {
    tokio::time::timeout_at(deadline, rx.recv())
        .await
        .map_err(|_| anyhow!("{what}: not within {STEP_DEADLINE:?}"))?
        .ok_or_else(|| anyhow!("the watches ended"))
}

/// After a write that takes the slots from sentinel `uid`: when the cluster watch first
/// showed `locked` not true, and when the sentinel watch first showed that sentinel not
/// holding.
async fn loss(
    rx: &mut mpsc::UnboundedReceiver<Seen>,
    now: &mut Now,
    uid: &str,
) -> Result<(Instant, Instant)> {
    let deadline = tokio::time::Instant::now() + STEP_DEADLINE;
    let (mut unlocked, mut lost) = (None, None);
    while unlocked.is_none() || lost.is_none() {
        let what = "locked=true to end after the sentinel lost the slots";
        let seen = next(rx, deadline, what).await?;
        match &seen {
            Seen::Cluster { at, locked: false } if unlocked.is_none() => unlocked = Some(*at),
            Seen::Sentinel {
                at,
                uid: u,
                holding: false,
                ..
            } if u == uid && lost.is_none() => lost = Some(*at),
            _ => {}
        }
        apply(now, seen);
    }
    match (unlocked, lost) {
        (Some(u), Some(l)) => Ok((u, l)),
        _ => bail!("unreachable: both are set"),
    }
}
