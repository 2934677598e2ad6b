//! One global reconcile: snapshot (the caches, with the flavors whose create is under
//! way and the ClusterQueue as kueue-sync last wrote it) → [`plan`] → apply (with its
//! writeback), in the order the plan requires:
//!
//! 1. repair and adopt existing ResourceFlavors (an entry may name them this round);
//! 2. hand the new flavors to [`NewFlavors`], which creates them in the background: no
//!    entry names a flavor before the cache shows it, so neither this round nor the next
//!    plan waits for them (their clusters reserve their places meanwhile);
//! 3. update the ClusterQueue, guarded by the observed `resourceVersion`. On 409
//!    Conflict, wait briefly for the cache to show the other writer's version (one GET
//!    if it does not), re-plan from that and try again, a bounded number of times;
//! 4. delete orphaned flavors (the plan lists only those no entry references); and, only
//!    once the ClusterQueue write succeeded, hand each changed cluster's status to
//!    [`Statuses`], which writes it in the background (with an Event when its news
//!    changed), so that no plan waits for the status writes of the one before.
//!
//! The next plan starts from the ClusterQueue the update returned, until the cache shows
//! that version or a later one, so it neither waits for the watch nor races its own write
//! into a conflict. Only repairs and adoptions of existing flavors are waited for
//! (bounded) until the cache shows them: a plan that missed one would ask for it again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use hearth_api::FournosCluster;
use hearth_runtime::events::Event;
use hearth_runtime::kit::WRITES_IN_FLIGHT;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

use crate::apply::{FlavorAction, is_spec_conflict};
use crate::context::{Context, WrittenQueue};
use crate::error::Error;
use crate::metrics::Outcome;
use crate::plan::{Plan, SyncReason, cluster_queue_changes_summary, plan, plan_summary};
use crate::snapshot::{QueueObject, Snapshot};
use crate::writeback::INVALID_OBJECT;
use hearth_runtime::kit::answer::is_not_found;
use hearth_runtime::lock;

/// How the ClusterQueue step of one attempt ended.
enum QueueWrite {
    /// The plan leaves the ClusterQueue as it is (or there is none).
    Unchanged,
    /// Updated.
    Written,
    /// Another writer won, or it was deleted: plan again from this ClusterQueue.
    Replan(Option<Option<Arc<QueueObject>>>),
    Failed(Error),
    /// Leadership was lost before the write.
    NotLeader,
}

/// ClusterQueue updates per reconcile before giving up (and retrying with backoff).
pub(crate) const MAX_ATTEMPTS: usize = 5;
/// How long to wait after a conflict for the cache to show the winner's version.
const CACHE_LAG: Duration = Duration::from_secs(2);
/// How long to wait for the cache to show this reconcile's repairs and adoptions.
const CATCH_UP: Duration = Duration::from_secs(5);

impl WrittenQueue {
    /// Whether its spec is newer than that of the ClusterQueue the cache shows (`None`:
    /// the cache has none, so it was deleted since). `metadata.generation` counts the
    /// spec's changes, so a cached object of the same uid at a lower generation lacks
    /// the update; at the same or a higher one it has it (and maybe a later writer's).
    /// Kueue's status writes move neither.
    fn newer_than(&self, cached: Option<&ObjectMeta>) -> bool {
        let written = self.object.meta();
        cached.is_some_and(|cached| {
            cached.uid == written.uid
                && cached
                    .generation
                    .zip(written.generation)
                    .is_some_and(|(cached, written)| cached < written)
        })
    }
}

impl Context {
    fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    /// Runs one reconcile. Returns the number of writes made.
    pub async fn reconcile(&self) -> Result<usize, Error> {
        let mut fresh_queue: Option<Option<Arc<QueueObject>>> = None;
        let mut handed = 0;
        for attempt in 1..=MAX_ATTEMPTS {
            self.statuses.settle();
            self.new_flavors.settle();
            let creating = self.new_flavors.creating();
            let queue = fresh_queue.take().or_else(|| self.written_queue());
            let snapshot = self.stores.snapshot(&self.settings, queue, creating)?;
            self.writer
                .metrics
                .observed(snapshot.hearth_flavors(), &snapshot.invalid_counts());
            // A standby only keeps its caches warm.
            if !self.is_leader() {
                return Ok(handed);
            }
            self.report_invalid(&snapshot).await;
            let plan = plan(&snapshot.input);
            self.log_planned(&plan);
            if plan.is_noop() {
                self.writer.metrics.published(&plan);
                return Ok(handed);
            }
            tracing::debug!(
                plan = %plan_summary(&plan, snapshot.input.cluster_queue.as_ref()),
                attempt,
                "plan"
            );

            let (written, mut errors) = self.apply_existing_flavors(&plan).await;
            handed += plan
                .flavors_to_create
                .iter()
                .filter(|f| self.new_flavors.submit(f))
                .count();
            let queue_written = match self.write_queue(&snapshot, &plan, attempt).await? {
                QueueWrite::Unchanged | QueueWrite::Written => true,
                QueueWrite::Failed(error) => {
                    errors.push(error);
                    false
                }
                QueueWrite::Replan(fresh) => {
                    fresh_queue = fresh;
                    continue;
                }
                QueueWrite::NotLeader => return Ok(written.len() + handed),
            };
            // The statuses describe the world after the ClusterQueue write. They are
            // written in the background (see [`Statuses`]): the next plan does not wait.
            let statuses = if queue_written {
                let submitted = self.submit_statuses(&snapshot, &plan);
                self.writer.metrics.published(&plan);
                submitted
            } else {
                0
            };
            let (deletes, delete_errors) = self.delete_flavors(&snapshot, &plan).await;
            errors.extend(delete_errors);
            errors.extend(self.new_flavors.take_failure());
            errors.extend(self.statuses.take_failure());

            let writes = written.len() + handed + deletes + statuses;
            self.catch_up(&written).await;
            return errors.into_iter().next().map_or(Ok(writes), Err);
        }
        Err(Error::ConflictsExhausted {
            name: self.settings.cluster_queue.clone(),
            attempts: MAX_ATTEMPTS,
        })
    }

    /// Repairs and adopts the planned existing flavors, [`WRITES_IN_FLIGHT`] at a time
    /// (flavors are independent objects): `(name, resourceVersion)` of each written,
    /// and the errors.
    async fn apply_existing_flavors(&self, plan: &Plan) -> (Vec<(String, String)>, Vec<Error>) {
        let flavors = plan
            .flavors_to_repair
            .iter()
            .map(|f| (f, FlavorAction::Repair))
            .chain(
                plan.flavors_to_adopt
                    .iter()
                    .map(|f| (f, FlavorAction::Adopt)),
            );
        let writes = flavors.map(|(flavor, action)| self.writer.apply_flavor(flavor, action));
        let (applied, errors) = in_flight(writes).await;
        (applied.iter().filter_map(version_of).collect(), errors)
    }

    /// Updates the ClusterQueue when the plan changes it, guarded by the observed
    /// generation (see [`crate::apply`]).
    async fn write_queue(
        &self,
        snapshot: &Snapshot,
        plan: &Plan,
        attempt: usize,
    ) -> Result<QueueWrite, Error> {
        let (Some(spec), Some(observed)) = (&plan.cluster_queue, snapshot.queue()) else {
            return Ok(QueueWrite::Unchanged);
        };
        if !self.is_leader() {
            return Ok(QueueWrite::NotLeader);
        }
        match self.writer.update_cluster_queue(observed, spec).await {
            Ok(mut updated) => {
                self.writer.metrics.cluster_queue_write(Outcome::Ok);
                tracing::info!(
                    cluster_queue = %self.settings.cluster_queue,
                    resource_version = updated.metadata.resource_version.as_deref().unwrap_or_default(),
                    generation = updated.metadata.generation.unwrap_or_default(),
                    changes = %cluster_queue_changes_summary(Some(&observed.spec), spec),
                    "updated ClusterQueue"
                );
                // As the cache would hold it.
                updated.metadata.managed_fields = None;
                *lock(&self.written_queue) = Some(WrittenQueue {
                    object: Arc::new(kube::core::DeserializeGuard(Ok(updated))),
                });
                Ok(QueueWrite::Written)
            }
            Err(error) if is_spec_conflict(&error) => {
                self.writer.metrics.cluster_queue_write(Outcome::Conflict);
                tracing::info!(
                    cluster_queue = %self.settings.cluster_queue,
                    generation = observed.metadata.generation.unwrap_or_default(),
                    attempt,
                    "ClusterQueue spec changed by another writer; re-planning from its new version"
                );
                // Neither our last update nor what the cache held before it is the latest.
                lock(&self.written_queue).take();
                Ok(QueueWrite::Replan(
                    self.fresh_queue(&observed.metadata).await?,
                ))
            }
            Err(error) if is_not_found(&error) => {
                self.writer.metrics.cluster_queue_write(Outcome::Error);
                tracing::info!(cluster_queue = %self.settings.cluster_queue, "ClusterQueue deleted meanwhile; re-planning");
                Ok(QueueWrite::Replan(Some(None)))
            }
            Err(source) => {
                self.writer.metrics.cluster_queue_write(Outcome::Error);
                Ok(QueueWrite::Failed(Error::UpdateClusterQueue {
                    name: self.settings.cluster_queue.clone(),
                    source,
                }))
            }
        }
    }

    /// Deletes the orphaned flavors the plan lists, [`WRITES_IN_FLIGHT`] at a time;
    /// returns how many went, and the errors.
    async fn delete_flavors(&self, snapshot: &Snapshot, plan: &Plan) -> (usize, Vec<Error>) {
        if plan.flavors_to_delete.is_empty() {
            return (0, Vec::new());
        }
        let versions = snapshot.flavor_versions();
        let (deleted, errors) = in_flight(plan.flavors_to_delete.iter().map(|name| {
            let (uid, rv) = versions.get(name.as_str()).cloned().unwrap_or_default();
            self.writer.delete_flavor(name, uid, rv)
        }))
        .await;
        (deleted.len(), errors)
    }

    /// The ClusterQueue to re-plan from after a conflict on `stale` (the object the
    /// plan started from): the cache's, once it shows another spec (`None`: use the
    /// cache), else one GET.
    async fn fresh_queue(
        &self,
        stale: &ObjectMeta,
    ) -> Result<Option<Option<Arc<QueueObject>>>, Error> {
        let name = &self.settings.cluster_queue;
        let moved = self
            .changes
            .wait_until(CACHE_LAG, || {
                self.stores.queue(name).is_none_or(|q| {
                    let cached = q.meta();
                    cached.uid != stale.uid || cached.generation != stale.generation
                })
            })
            .await;
        if moved {
            return Ok(None);
        }
        tracing::debug!(cluster_queue = %name, "the cache lags; reading the ClusterQueue once");
        Ok(Some(
            self.writer.get_cluster_queue(name).await?.map(Arc::new),
        ))
    }

    /// Hands the status of every live cluster whose status changes (or whose earlier
    /// status is still on its way) to [`Statuses`]; returns how many were new. A
    /// `WaitingForFlavor` of a flavor whose create is on its way is held back (see
    /// [`waiting_for_new_flavor`]).
    fn submit_statuses(&self, snapshot: &Snapshot, plan: &Plan) -> usize {
        let held = waiting_for_new_flavor(plan, |name| self.new_flavors.on_its_way(name));
        plan.clusters
            .iter()
            .filter(|(name, sync)| sync.status_changed || self.statuses.remembers(name))
            .filter(|(name, _)| !held.contains(*name))
            .filter_map(|(name, sync)| snapshot.cluster(name).map(|c| (c, sync)))
            .filter(|(cluster, sync)| self.statuses.submit(cluster, sync))
            .count()
    }

    /// The ClusterQueue to plan from instead of the cache's: the one the last update
    /// returned, while the cache still shows a spec older than it.
    fn written_queue(&self) -> Option<Option<Arc<QueueObject>>> {
        let cached = self.stores.queue(&self.settings.cluster_queue);
        let mut written = lock(&self.written_queue);
        match written.as_ref() {
            Some(w) if w.newer_than(cached.as_deref().map(|q| q.meta())) => {
                Some(Some(w.object.clone()))
            }
            _ => {
                *written = None;
                None
            }
        }
    }

    /// One debug line per cluster whose status a plan changes, the first time a plan says
    /// it: when kueue-sync saw what a cluster's status will say (the benchmark's stage
    /// table reads it). Not again while the status waits to be written: rounds follow each
    /// other faster than statuses are written, and the lines cost more than the rounds.
    fn log_planned(&self, plan: &Plan) {
        if !tracing::enabled!(target: "hearth_kueue_sync::plan", tracing::Level::DEBUG) {
            return;
        }
        let mut logged = lock(&self.planned);
        logged.retain(|name, _| plan.clusters.get(name).is_some_and(|s| s.status_changed));
        for (cluster, sync) in plan.clusters.iter().filter(|(_, s)| s.status_changed) {
            let said = (sync.reason(), sync.condition.status);
            if logged.get(cluster) == Some(&said) {
                continue;
            }
            tracing::debug!(
                target: "hearth_kueue_sync::plan",
                %cluster,
                reason = sync.reason().as_str(),
                synced = sync.condition.status.as_str(),
                "planned"
            );
            logged.insert(cluster.clone(), said);
        }
    }

    /// Logs, and for FournosClusters also reports as a Warning Event, each object that
    /// does not decode, once per version.
    async fn report_invalid(&self, snapshot: &Snapshot) {
        let current: BTreeSet<_> = snapshot
            .invalid
            .iter()
            .map(|i| (i.kind, i.name.clone(), i.resource_version.clone()))
            .collect();
        let new: Vec<_> = {
            let mut reported = lock(&self.reported);
            reported.retain(|key| current.contains(key));
            snapshot
                .invalid
                .iter()
                .filter(|i| reported.first((i.kind, i.name.clone(), i.resource_version.clone())))
                .cloned()
                .collect()
        };
        for invalid in new {
            tracing::warn!(
                kind = invalid.kind,
                name = %invalid.name,
                error = %invalid.message,
                "object does not decode; skipped"
            );
            if invalid.kind == "FournosCluster" {
                let mut cluster = FournosCluster::new(&invalid.name, Default::default());
                cluster.metadata.namespace = Some(self.settings.namespace.clone());
                let regarding = cluster.object_ref(&());
                let note = format!(
                    "Hearth cannot read this FournosCluster ({}), so it publishes zero quota \
                     for it and does not update its status. Fix the object (kubectl edit) so \
                     that it matches the CRD.",
                    invalid.message
                );
                let event = Event::warning(INVALID_OBJECT, "ReadCluster", note);
                self.writer.events.publish(&regarding, &event).await;
            }
        }
    }

    /// Waits until the flavor cache shows the repairs and adoptions `written` (or
    /// [`CATCH_UP`] passes): a plan that missed one would ask for it again.
    async fn catch_up(&self, written: &[(String, String)]) {
        if written.is_empty() {
            return;
        }
        let flavors = &self.caches.flavors;
        let caught_up = self
            .changes
            .wait_until(CATCH_UP, || {
                written.iter().all(|(name, rv)| flavors.shows(name, rv))
            })
            .await;
        if !caught_up {
            // The writes' names, not all of them: a first round writes every status.
            tracing::debug!(
                writes = written.len(),
                first = ?written.iter().take(3).collect::<Vec<_>>(),
                "the caches do not show every write yet"
            );
        }
    }
}

/// The clusters whose flavor's create is `on_its_way` (handed over, not failed) and that
/// wait: for that flavor (a place reserved) or for discovery's count. Their status is not
/// written: the plan that sees the flavor, which follows as soon as the cache shows it,
/// has the answer that matters (the entry, or why there is none), and in a burst
/// discovery's count of a new cluster mostly comes first. Written once the create has
/// failed: then the wait is news. One status write per new cluster instead of two, in a
/// burst of onboardings where the apiserver's writes are what every cluster waits for
/// (measured at 100 at once: 21 `WaitingForDiscovery` writes, 16 of them after the
/// cluster's answer was planned and ahead of it, when only `WaitingForFlavor` was held).
/// A wait for a Terminating flavor is not held back: it ends only when Kueue lets go.
pub(crate) fn waiting_for_new_flavor(
    plan: &Plan,
    on_its_way: impl Fn(&str) -> bool,
) -> BTreeSet<String> {
    let waits = [
        SyncReason::WaitingForFlavor,
        SyncReason::WaitingForDiscovery,
    ];
    plan.clusters
        .iter()
        .filter(|(name, sync)| waits.contains(&sync.reason()) && on_its_way(name))
        .map(|(name, _)| name.clone())
        .collect()
}

/// Runs `writes`, at most [`WRITES_IN_FLIGHT`] at a time: what they returned, and their
/// errors.
async fn in_flight<T>(
    writes: impl Iterator<Item = impl Future<Output = Result<T, Error>>>,
) -> (Vec<T>, Vec<Error>) {
    let results: Vec<_> = futures::stream::iter(writes)
        .buffer_unordered(WRITES_IN_FLIGHT)
        .collect()
        .await;
    let (done, errors): (Vec<_>, Vec<_>) = results.into_iter().partition(Result::is_ok);
    let errors = errors.into_iter().filter_map(Result::err).collect();
    (done.into_iter().flatten().collect(), errors)
}

/// `(name, resourceVersion)` of a written object.
fn version_of<K: Resource>(object: &K) -> Option<(String, String)> {
    let meta = object.meta();
    Some((meta.name.clone()?, meta.resource_version.clone()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{World, cluster};

    #[test]
    fn the_written_queue_is_planned_from_only_while_the_cache_shows_an_older_spec() {
        let meta = |uid: &str, generation: i64| ObjectMeta {
            name: Some("q".into()),
            uid: Some(uid.into()),
            generation: Some(generation),
            ..ObjectMeta::default()
        };
        let mut queue = hearth_api::kueue::ClusterQueue::new("q", Default::default());
        queue.metadata = meta("u", 5);
        let written = WrittenQueue {
            object: Arc::new(kube::core::DeserializeGuard(Ok(queue))),
        };
        assert!(
            written.newer_than(Some(&meta("u", 4))),
            "the spec it replaced"
        );
        assert!(
            written.newer_than(Some(&meta("u", 3))),
            "the cache lags by more"
        );
        assert!(
            !written.newer_than(Some(&meta("u", 5))),
            "its own (or its own with Kueue's status written since)"
        );
        assert!(!written.newer_than(Some(&meta("u", 6))), "a later writer's");
        assert!(!written.newer_than(Some(&meta("v", 1))), "recreated since");
        assert!(!written.newer_than(None), "deleted since");
    }

    /// [`waiting_for_new_flavor`] of `world`'s plan, with the creates of
    /// [`World::in_flight`] on their way.
    fn held(world: &World) -> BTreeSet<String> {
        let on_its_way = |name: &str| {
            world
                .in_flight
                .iter()
                .any(|f| f.metadata.name.as_deref() == Some(name))
        };
        waiting_for_new_flavor(&world.plan(), on_its_way)
    }

    #[test]
    fn only_a_wait_that_a_create_on_its_way_ends_is_held_back() {
        let mut world = crate::testing::World::new()
            .with_queue(Some(crate::testing::queue(serde_json::json!({
                "resourceGroups": [{"coveredResources": ["fournos/cluster-slot"],
                    "flavors": (0..63).map(|i| serde_json::json!({"name": format!("gitops-{i}"),
                        "resources": [{"name": "fournos/cluster-slot", "nominalQuota": "1"}]}))
                        .collect::<Vec<_>>()}]
            }))))
            .with_clusters([
                cluster("a").created(0).gpu("a100", 8),
                cluster("u").created(1).gpu("a100", 8).uncounted(),
                cluster("z").created(2).gpu("a100", 8),
            ]);
        world.slow = ["a", "u", "z"].map(String::from).into();
        let plan = world.plan();
        assert_eq!(plan.clusters["a"].reason(), SyncReason::WaitingForFlavor);
        assert_eq!(plan.clusters["u"].reason(), SyncReason::WaitingForDiscovery);
        assert_eq!(plan.clusters["z"].reason(), SyncReason::LimitReached);
        // Before the creates are handed over, and while they are on their way: "a" waits
        // for its flavor, "u" for discovery, "z" has its answer (no room), written.
        assert!(
            waiting_for_new_flavor(&plan, |_| false).is_empty(),
            "failed: news"
        );
        world.apply(&plan);
        assert_eq!(held(&world), ["a", "u"].map(String::from).into());
        // The plan that sees a flavor has the answer that matters, written.
        world.deliver("a");
        world.deliver("u");
        assert_eq!(world.plan().clusters["a"].reason(), SyncReason::Synced);
        assert_eq!(
            world.plan().clusters["u"].reason(),
            SyncReason::WaitingForDiscovery
        );
        assert!(held(&world).is_empty());
        // A flavor being deleted is a wait no create ends: not held back. (Its place
        // goes to "z", whose create is on its way.)
        world.converge();
        world.flavors[0].metadata.deletion_timestamp = Some(crate::testing::at(1));
        assert_eq!(
            world.plan().clusters["a"].reason(),
            SyncReason::WaitingForFlavor
        );
        assert_eq!(held(&world), ["z"].map(String::from).into());
    }
}
