//! What a takeover from the Python Hearth must keep, checked the same way whoever built
//! the legacy state (by hand in `tests/migration.rs`, by the real Python Hearth in
//! `tests/takeover_py.rs`): a [`Watcher`] samples the [`Invariants`] all along (no lock
//! lost, no quota lowered before discovery reports, no admitted Workload evicted, the
//! ClusterQueue never inactive), [`not_converged`] says what is still missing from the
//! repaired state, and [`versions`] proves a second run over Hearth's own state writes
//! nothing. It reads the management cluster through [`World`] and the checks of
//! [`crate::invariants`], like every other e2e test.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use hearth_api::kueue::ClusterQueue;
use hearth_api::names::{
    ADOPTED_CLUSTER_UID_ANNOTATION, ADOPTED_FROM_ANNOTATION, ADOPTED_FROM_PYTHON,
    CLUSTER_NAMESPACE_LABEL, CLUSTER_SLOT_RESOURCE, MANAGED_BY_LABEL, MANAGED_BY_VALUE,
    condition_types::{GPU_DISCOVERED, KUBECONFIG_VALID, KUEUE_SYNCED, LOCKED},
};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::ListParams;
use serde_json::json;

use crate::hearth::{self, Controller, Running};
use crate::invariants::{
    cluster_condition, covered, entry, is_active, last_discovery, nonzero, resource_order,
    workload_is,
};
use crate::objects::KUEUE_API_VERSION;
use crate::release::Sampler;
use crate::world::World;

/// `fournos/cluster-slot` per cluster, in the Python Hearth's queue entries and Hearth's.
pub const SLOTS: i64 = 100;
/// Prefix of the GPU resources in the queue.
pub const GPU: &str = "fournos/gpu-";

// ---------------------------------------------------------------------------------------
// What must hold at every instant of the takeover
// ---------------------------------------------------------------------------------------

pub struct Invariants {
    /// Quota per cluster before the takeover; holds until discovery reports.
    pub baseline: BTreeMap<String, BTreeMap<String, i64>>,
    /// The cluster locked without a TTL and its legacy sentinel.
    pub locked: (String, String),
    /// The cluster whose TTL expires during the takeover, and when.
    pub expiring: (String, Timestamp),
    /// The Workload admitted before the takeover.
    pub workload: String,
}

/// The violations of `inv` now.
pub async fn sample(world: &World<'_>, inv: &Invariants) -> Result<Vec<String>> {
    let mut bad = Vec::new();
    // The queue first, then the clusters: a quota lowered in the queue must then show as
    // discovered on the cluster (discovery writes before kueue-sync reacts).
    let queue = world.queue().await?;
    if !is_active(&queue) {
        bad.push(format!(
            "ClusterQueue not Active: {:?}",
            queue.status.as_ref().map(|s| &s.conditions)
        ));
    }
    let clusters = world.clusters.list(&ListParams::default()).await?.items;
    for fc in &clusters {
        let name = fc.name_any();
        let Some(base) = inv.baseline.get(&name) else {
            continue;
        };
        if last_discovery(fc).is_some() {
            continue;
        }
        let Some(entry) = entry(&queue, &name) else {
            bad.push(format!("{name}: queue entry gone before discovery"));
            continue;
        };
        for (resource, min) in base {
            let now = entry.get(resource).copied().unwrap_or(0);
            if now < *min {
                bad.push(format!(
                    "{name}: {resource} = {now} < {min} before discovery"
                ));
            }
        }
    }
    let (locked, sentinel) = &inv.locked;
    let held = world.sentinel_jobs(locked).await?;
    if held.len() != 1 || held[0].name_any() != *sentinel {
        bad.push(format!(
            "{locked}: sentinels {:?}, want exactly {sentinel}",
            held.iter().map(|j| j.name_any()).collect::<Vec<_>>()
        ));
    }
    match world.workloads.get_opt(sentinel).await? {
        Some(w) if workload_is(&w, "Admitted") && !workload_is(&w, "Evicted") => {}
        other => bad.push(format!(
            "{locked}: the sentinel's Workload is not admitted: {:?}",
            other.and_then(|w| w.status).map(|s| s.conditions)
        )),
    }
    if let Some(fc) = clusters.iter().find(|c| c.name_any() == *locked)
        && fc.status.as_ref().and_then(|s| s.locked) != Some(true)
    {
        bad.push(format!("{locked}: status.locked is not true"));
    }
    let (expiring, expires_at) = &inv.expiring;
    let sentinels = world.sentinel_jobs(expiring).await?;
    if sentinels.len() > 1 {
        bad.push(format!("{expiring}: {} sentinels", sentinels.len()));
    }
    // One second of slack for clock granularity (status times are whole seconds).
    if Timestamp::now() + SignedDuration::from_secs(1) < *expires_at && sentinels.is_empty() {
        bad.push(format!("{expiring}: sentinel gone before its TTL ran out"));
    }
    match world.workloads.get_opt(&inv.workload).await? {
        Some(w) if workload_is(&w, "Admitted") && !workload_is(&w, "Evicted") => {}
        other => bad.push(format!(
            "{}: not admitted any more: {:?}",
            inv.workload,
            other.and_then(|w| w.status).map(|s| s.conditions)
        )),
    }
    Ok(bad)
}

/// Samples the invariants in the background until [`finish`](Watcher::finish).
pub struct Watcher(Sampler);

impl Watcher {
    /// Checks the invariants hold now (else the legacy state itself breaks them), then
    /// starts sampling them.
    pub async fn start(world: World<'static>, invariants: Invariants) -> Result<Watcher> {
        let first = sample(&world, &invariants).await?;
        ensure!(
            first.is_empty(),
            "the legacy state itself breaks the invariants: {first:?}"
        );
        let watched = Arc::new((world, invariants));
        Ok(Watcher(Sampler::start(move || {
            let watched = watched.clone();
            async move { sample(&watched.0, &watched.1).await }
        })))
    }

    /// Stops sampling; fails with every violation seen, or when too few samples were
    /// taken to mean anything.
    pub fn finish(self) -> Result<()> {
        let samples = self.0.finish("the takeover")?;
        println!("the watcher took {samples} samples during the takeover");
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// The repaired state
// ---------------------------------------------------------------------------------------

/// What the takeover has not repaired yet (empty once converged): conditions deduplicated
/// and Hearth's, hardware discovered, flavors adopted and labeled for `namespace`, the
/// lock on `locked` held by its legacy sentinel, the TTL of `expiring` honoured, each
/// queue entry the discovered count in `coveredResources` order.
pub async fn not_converged(
    world: &World<'_>,
    clusters: &[String],
    locked: (&str, &str),
    expiring: &str,
) -> Result<Vec<String>> {
    let ns = &world.scope.namespace;
    let mut waiting = Vec::new();
    for name in clusters {
        let fc = world.clusters.get(name).await?;
        let status = fc.status.clone().unwrap_or_default();
        let mut types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
        let n = types.len();
        types.sort();
        types.dedup();
        if types.len() != n {
            waiting.push(format!("{name}: duplicate conditions {types:?}"));
        }
        for t in [KUBECONFIG_VALID, GPU_DISCOVERED, KUEUE_SYNCED] {
            if !cluster_condition(&fc, t)
                .is_some_and(|c| c.status == "True" && c.observed_generation.is_some())
            {
                waiting.push(format!("{name}: {t} not True from Hearth"));
            }
        }
        if last_discovery(&fc).is_none() {
            waiting.push(format!("{name}: not discovered"));
        }
        // Every controller has caught up with the spec (an expired lock clears
        // spec.owner, which moves the generation).
        let stale: Vec<&str> = status
            .conditions
            .iter()
            .filter(|c| c.observed_generation != fc.metadata.generation)
            .map(|c| c.type_.as_str())
            .collect();
        if !stale.is_empty() {
            waiting.push(format!("{name}: stale observedGeneration on {stale:?}"));
        }
        let flavor = world.flavors.get(name).await?;
        let labels = flavor.labels();
        if labels.get(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGED_BY_VALUE)
            || labels.get(CLUSTER_NAMESPACE_LABEL) != Some(ns)
        {
            waiting.push(format!("{name}: flavor not labeled: {labels:?}"));
        }
    }
    let (locked, sentinel) = locked;
    let fc = world.clusters.get(locked).await?;
    let held = cluster_condition(&fc, LOCKED).is_some_and(|c| c.reason == "Held");
    if !held || fc.status.as_ref().and_then(|s| s.lock_job_name.as_deref()) != Some(sentinel) {
        waiting.push(format!("{locked}: not Held by {sentinel}"));
    }
    let fc = world.clusters.get(expiring).await?;
    let expired = cluster_condition(&fc, LOCKED).is_some_and(|c| c.reason == "Expired");
    if fc.spec.owner.is_some() || !expired || !world.sentinel_jobs(expiring).await?.is_empty() {
        waiting.push(format!(
            "{expiring}: TTL not expired yet (owner {:?})",
            fc.spec.owner
        ));
    }
    let queue = world.queue().await?;
    let order = covered(&queue);
    for name in clusters {
        let fc = world.clusters.get(name).await?;
        let mut want = BTreeMap::from([(CLUSTER_SLOT_RESOURCE.to_owned(), SLOTS)]);
        for g in fc
            .status
            .and_then(|s| s.hardware)
            .map(|h| h.gpus)
            .unwrap_or_default()
        {
            *want.entry(format!("{GPU}{}", g.short_name)).or_default() += g.count;
        }
        let names = resource_order(&queue, name);
        let got = nonzero(entry(&queue, name).unwrap_or_default());
        if got != want || names != order {
            waiting.push(format!(
                "{name}: entry {got:?} in order {names:?}, want {want:?} in {order:?}"
            ));
        }
    }
    Ok(waiting)
}

/// resourceVersion of every object Hearth could write: FournosClusters, the ClusterQueue's
/// spec, the `flavors`, the sentinels.
pub async fn versions(world: &World<'_>, flavors: &[&str]) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for fc in world.clusters.list(&ListParams::default()).await?.items {
        out.insert(
            format!("FournosCluster/{}", fc.name_any()),
            fc.resource_version().unwrap_or_default(),
        );
    }
    // Its spec: Kueue itself updates the status (usage) with every admission.
    let queue = world.queue().await?;
    out.insert(
        "ClusterQueue spec (generation)".into(),
        queue.metadata.generation.unwrap_or_default().to_string(),
    );
    for name in flavors {
        let flavor = world.flavors.get(name).await?;
        out.insert(
            format!("ResourceFlavor/{name}"),
            flavor.resource_version().unwrap_or_default(),
        );
    }
    for job in world.jobs.list(&ListParams::default()).await?.items {
        out.insert(
            format!("FournosJob/{}", job.name_any()),
            job.resource_version().unwrap_or_default(),
        );
    }
    Ok(out)
}

/// The takeover's order: kueue-sync and lock-manager first; once kueue-sync has adopted
/// the legacy flavor of every cluster in `baseline` (labeled, `KueueSynced=True`) and
/// still publishes exactly the legacy quota, discovery. That is the window in which the
/// legacy quota and the legacy kubeconfig status are all there is.
pub async fn take_over(
    world: &World<'_>,
    baseline: &BTreeMap<String, BTreeMap<String, i64>>,
    env: &[(&str, &str)],
    deadline: Duration,
) -> Result<Vec<Running>> {
    let mut running = start(
        world,
        &[Controller::KueueSync, Controller::LockManager],
        env,
    )
    .await?;
    crate::process::eventually(
        "kueue-sync to adopt the legacy flavors",
        deadline,
        || async {
            for name in baseline.keys() {
                let flavor = world.flavors.get(name).await?;
                let fc = world.clusters.get(name).await?;
                let synced =
                    cluster_condition(&fc, KUEUE_SYNCED).is_some_and(|c| c.status == "True");
                if flavor.labels().get(MANAGED_BY_LABEL).is_none() || !synced {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        },
    )
    .await?;
    let adopted = world.queue().await?;
    for (name, legacy) in baseline {
        let entry = nonzero(entry(&adopted, name).unwrap_or_default());
        ensure!(
            entry == *legacy,
            "{name}: before discovery, the published quota is the legacy one: {entry:?}"
        );
    }
    running.extend(start(world, &[Controller::Discovery], env).await?);
    Ok(running)
}

/// Waits until [`not_converged`] is empty, then stops `watcher` (its violations fail the
/// takeover too) and returns the ClusterQueue.
pub async fn converge(
    world: &World<'_>,
    watcher: Watcher,
    clusters: &[String],
    locked: (&str, &str),
    expiring: &str,
    deadline: Duration,
) -> Result<ClusterQueue> {
    let converged = crate::process::eventually("the takeover to converge", deadline, || async {
        let waiting = not_converged(world, clusters, locked, expiring).await?;
        if waiting.is_empty() {
            Ok(Some(world.queue().await?))
        } else {
            println!("converging: {waiting:?}");
            Ok(None)
        }
    })
    .await;
    let finished = watcher.finish();
    let queue = converged?;
    finished?;
    Ok(queue)
}

/// The whole takeover, watched: samples `invariants` all along ([`Watcher`]), takes over
/// ([`take_over`]), waits until the clusters of `invariants.baseline` have converged
/// ([`converge`]) and checks `flavors`. Returns the controllers it started.
pub async fn watched_takeover(
    world: &World<'static>,
    invariants: Invariants,
    flavors: &Flavors,
    env: &[(&str, &str)],
    deadline: Duration,
) -> Result<Vec<Running>> {
    let clusters: Vec<String> = invariants.baseline.keys().cloned().collect();
    let baseline = invariants.baseline.clone();
    let (locked, sentinel) = invariants.locked.clone();
    let expiring = invariants.expiring.0.clone();
    // The watcher samples from its own task, so through its own World.
    let watched = World::new(world.plane, world.scope.clone()).await?;
    let watcher = Watcher::start(watched, invariants).await?;
    let running = take_over(world, &baseline, env, deadline).await?;
    let queue = converge(
        world,
        watcher,
        &clusters,
        (&locked, &sentinel),
        &expiring,
        deadline,
    )
    .await?;
    flavors.check(world, &queue).await?;
    Ok(running)
}

/// Starts `controllers` in `world`'s scope, in order (the controllers this returns, not
/// [`World::controllers`]: the takeover stops and restarts them).
pub async fn start(
    world: &World<'_>,
    controllers: &[Controller],
    env: &[(&str, &str)],
) -> Result<Vec<Running>> {
    let mut running = Vec::new();
    for &controller in controllers {
        running.push(
            hearth::start(world.plane, &world.scope, controller, "0", env)
                .await
                .with_context(|| {
                    format!(
                        "starting {} (cargo build --workspace --bins first)",
                        controller.binary()
                    )
                })?,
        );
    }
    Ok(running)
}

/// A flavor no FournosCluster owns (a platform team's, from GitOps): it must never be
/// written, nor its queue entry changed.
pub async fn foreign_flavor(client: &kube::Client, name: &str) -> Result<()> {
    let flavor = json!({
        "apiVersion": KUEUE_API_VERSION, "kind": "ResourceFlavor",
        "metadata": { "name": name, "labels": { "team": "platform" } },
        "spec": { "nodeLabels": { "pool": "gitops" } },
    });
    crate::resources::apply(client, &flavor).await?;
    Ok(())
}

/// The flavors before the takeover: the legacy ones are adopted in place (never
/// recreated), the foreign one is never written and its queue entry never changed.
pub struct Flavors {
    legacy: BTreeMap<String, Option<String>>,
    foreign: String,
    foreign_version: Option<String>,
    foreign_entry: BTreeMap<String, i64>,
}

impl Flavors {
    pub async fn record(world: &World<'_>, legacy: &[String], foreign: &str) -> Result<Flavors> {
        let mut uids = BTreeMap::new();
        for name in legacy {
            uids.insert(name.clone(), world.flavors.get(name).await?.uid());
        }
        let queue = world.queue().await?;
        Ok(Flavors {
            legacy: uids,
            foreign: foreign.to_owned(),
            foreign_version: world.flavors.get(foreign).await?.resource_version(),
            foreign_entry: nonzero(entry(&queue, foreign).context("the foreign entry")?),
        })
    }

    /// Every flavor: the legacy ones and the foreign one.
    pub fn names(&self) -> Vec<&str> {
        self.legacy
            .keys()
            .map(String::as_str)
            .chain([self.foreign.as_str()])
            .collect()
    }

    pub async fn check(&self, world: &World<'_>, queue: &ClusterQueue) -> Result<()> {
        for (name, uid) in &self.legacy {
            let flavor = world.flavors.get(name).await?;
            ensure!(flavor.uid() == *uid, "{name}: the flavor was recreated");
            // Marked as adopted for this FournosCluster: what keeps it under takeover.
            let cluster_uid = world.clusters.get(name).await?.uid();
            let annotations = flavor.annotations();
            ensure!(
                annotations.get(ADOPTED_FROM_ANNOTATION).map(String::as_str)
                    == Some(ADOPTED_FROM_PYTHON)
                    && annotations.get(ADOPTED_CLUSTER_UID_ANNOTATION) == cluster_uid.as_ref(),
                "{name}: the adopted flavor is not marked for FournosCluster uid {cluster_uid:?}: \
                 {annotations:?}"
            );
        }
        ensure!(
            world.flavors.get(&self.foreign).await?.resource_version() == self.foreign_version,
            "the foreign flavor was written"
        );
        let entry = nonzero(entry(queue, &self.foreign).unwrap_or_default());
        ensure!(
            entry == self.foreign_entry,
            "the foreign entry changed: {entry:?}"
        );
        Ok(())
    }
}

/// Stops `running`, starts all three controllers again over their own state and watches
/// `versions` for `window`: any change fails, naming what moved and, for FournosClusters,
/// who wrote it. Stops them at the end.
pub async fn second_run_writes_nothing(
    world: &World<'_>,
    running: Vec<Running>,
    env: &[(&str, &str)],
    flavors: &Flavors,
    window: Duration,
) -> Result<()> {
    let flavors = &flavors.names();
    for r in &running {
        r.stop(world.plane).await?;
    }
    let before = versions(world, flavors).await?;
    let running = start(world, &Controller::ALL, env).await?;
    let end = std::time::Instant::now() + window;
    while std::time::Instant::now() < end {
        let now = versions(world, flavors).await?;
        if now != before {
            let changed: Vec<_> = now
                .iter()
                .filter(|(k, v)| before.get(*k) != Some(v))
                .collect();
            let mut who = Vec::new();
            for (key, _) in &changed {
                if let Some(name) = key.strip_prefix("FournosCluster/") {
                    let fc = world.clusters.get(name).await?;
                    who.push(format!(
                        "{name}: managedFields {} status {}",
                        serde_json::to_string(&fc.metadata.managed_fields)?,
                        serde_json::to_string(&fc.status)?
                    ));
                }
            }
            anyhow::bail!("the second run wrote: {changed:?}\n{}", who.join("\n"));
        }
        // The window is the assertion; this is only its sampling pace.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for r in &running {
        r.stop(world.plane).await?;
    }
    Ok(())
}
