//! Cluster status writes, in the background and latest first.
//!
//! A reconcile hands each changed cluster's [`ClusterSync`] to [`Statuses`] and goes on:
//! the next plan (a new count, a ClusterQueue write) never waits for the status writes of
//! the one before. What protects the apiserver is the bound, [`WRITES_IN_FLIGHT`] writes
//! at a time; what keeps the writes few is that a cluster has at most one write waiting:
//! a newer plan for it replaces the waiting one, so in a burst a cluster whose count
//! arrives while its `WaitingForDiscovery` write still waits gets one write, not two.
//!
//! Waiting is not news: a `WaitingForDiscovery` status is written only when no other
//! status waits, at most [`LATER_IN_FLIGHT`] at a time, and not at all if the cluster
//! cache shows discovery's count by its turn. In a burst, the count of most clusters
//! arrives before their turn; on a quiet fleet it is written at once.
//!
//! What was handed over is remembered until the cluster cache shows the write, so a plan
//! made from a cache that lags behind a write does not ask for it again. A failed write
//! is retried after the cluster's backoff (1 s doubling to a minute), through a reconcile
//! that re-plans it; the reconcile reports the failure (`WriteStatusFailed`). These are
//! the rules of the kit's [`Ledger`] (two lanes: waiting last); what is this module's
//! own is what a write says and what it is written onto.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hearth_runtime::kit::{Cache, Changes, Ledger, Stage, WRITES_IN_FLIGHT, WriteBehind, Wrote};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource as _;
use tokio::sync::watch;

use crate::apply::Writer;
use crate::cached::CachedCluster;
use crate::error::Error;
use crate::plan::{ClusterSync, SyncReason};
use crate::writeback::{cordon_event_for, event_for};
use hearth_runtime::lock;

/// Low-priority writes in flight at most (of [`WRITES_IN_FLIGHT`]).
pub(crate) const LATER_IN_FLIGHT: usize = 2;

/// The ledger's lanes: every other status first, then the ones that only wait.
const NOW: usize = 0;
const LATER: usize = 1;

/// What a write says: the plan's status for one version of one cluster.
#[derive(Clone, Debug, PartialEq)]
struct Said {
    uid: Option<String>,
    /// The generation the plan saw: the status's `observedGeneration`.
    generation: Option<i64>,
    sync: ClusterSync,
}

impl Said {
    /// Whether this waits behind every other write: it says only that the cluster waits.
    fn later(&self) -> bool {
        self.sync.reason() == SyncReason::WaitingForDiscovery
    }
}

/// The status writes of the leader, by cluster name. Cheap to clone; clones share it.
#[derive(Clone)]
pub(crate) struct Statuses {
    writes: Arc<WriteBehind<String, Said>>,
    shared: Arc<Shared>,
}

/// What the writers share besides the ledger.
struct Shared {
    writer: Writer,
    clusters: Cache<CachedCluster>,
    /// What the last write of each cluster returned, as the cache would hold it: the
    /// freshest view of the cluster until the cache shows it (the next write's
    /// transition times and Event compare with it). Kept while the ledger remembers the
    /// cluster.
    last_written: Mutex<HashMap<String, Box<CachedCluster>>>,
    failures: Mutex<Failures>,
}

/// Failed writes not yet reported by a reconcile: cluster names, and the first error.
#[derive(Default)]
struct Failures {
    clusters: Vec<String>,
    first_error: Option<kube::Error>,
}

impl Statuses {
    pub fn new(
        writer: Writer,
        clusters: Cache<CachedCluster>,
        leader: watch::Receiver<bool>,
        changes: Changes,
    ) -> Self {
        // Bounded by the clusters there are: a cluster has one entry.
        let ledger = Ledger::new(usize::MAX, &[usize::MAX, LATER_IN_FLIGHT]);
        let writes = WriteBehind::new(ledger, leader, Some(changes));
        let shared = Arc::new(Shared {
            writer,
            clusters,
            last_written: Mutex::default(),
            failures: Mutex::default(),
        });
        let writing = shared.clone();
        writes.spawn(WRITES_IN_FLIGHT, move |name: String, said: Said| {
            let shared = writing.clone();
            async move { shared.write(&name, said).await }
        });
        Self { writes, shared }
    }

    /// Forgets the writes the cache shows (or whose cluster is gone). Call before taking
    /// the snapshot, so that the plan and this memory agree on what is written.
    pub fn settle(&self) {
        let clusters = &self.shared.clusters;
        let mut ledger = self.writes.lock();
        ledger.retain(|name, _, stage| match stage {
            Stage::Written { version, .. } => !version
                .as_deref()
                .is_some_and(|rv| clusters.shows(name, rv)),
            Stage::Failed { .. } => clusters.named(name).is_some(),
            Stage::Waiting | Stage::Writing { .. } => true,
        });
        lock(&self.shared.last_written).retain(|name, _| ledger.contains(name));
    }

    /// Whether a write for `name` is remembered: the plan must then say what it wants
    /// even when the cache already shows it, or the remembered one would win.
    pub fn remembers(&self, name: &str) -> bool {
        self.writes.lock().contains(&name.to_owned())
    }

    /// Asks for `sync` to be written to `cluster`'s status. False when that is already
    /// said (waiting, being written, written but not yet in the cache, or failed and not
    /// yet due again).
    pub fn submit(&self, cluster: &CachedCluster, sync: &ClusterSync) -> bool {
        let name = cluster.metadata.name.clone().unwrap_or_default();
        let said = Said {
            uid: cluster.metadata.uid.clone(),
            generation: cluster.metadata.generation,
            sync: sync.clone(),
        };
        let lane = if said.later() { LATER } else { NOW };
        {
            let mut last_written = lock(&self.shared.last_written);
            if last_written
                .get(&name)
                .is_some_and(|w| w.metadata.uid != said.uid)
            {
                // A new cluster of the same name: nothing written to the old one counts.
                last_written.remove(&name);
            }
        }
        self.writes.submit(name, said, lane).taken()
    }

    /// The writes that failed since the last call, as one error naming every cluster.
    pub fn take_failure(&self) -> Option<Error> {
        let mut failures = lock(&self.shared.failures);
        let source = failures.first_error.take()?;
        let mut clusters = std::mem::take(&mut failures.clusters);
        clusters.sort();
        clusters.dedup();
        Some(Error::WriteStatus { clusters, source })
    }
}

impl Shared {
    /// Writes `said` to `name`'s status, onto the freshest view of the cluster.
    async fn write(&self, name: &str, said: Said) -> Wrote {
        let Some(base) = self.base(name, &said) else {
            lock(&self.last_written).remove(name);
            return Wrote::Dropped;
        };
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        match self.writer.write_status(&base, &said.sync, &now).await {
            Ok(Some(updated)) => {
                tracing::info!(cluster = %name, reason = said.sync.reason().as_str(), "wrote status");
                // In the background: the other statuses must not wait for them.
                for event in [
                    event_for(&base, &said.sync),
                    cordon_event_for(&base, &said.sync),
                ]
                .into_iter()
                .flatten()
                {
                    self.writer
                        .events
                        .publish_in_background(base.object_ref(&()), event);
                }
                let updated = CachedCluster::from(updated);
                let rv = updated.metadata.resource_version.clone();
                lock(&self.last_written).insert(name.to_owned(), Box::new(updated));
                Wrote::Written(Some(rv.unwrap_or_default()))
            }
            // Deleted, or replaced by another of its name: nothing was written. What a
            // plan said meanwhile (for the successor, if there is one) is still to write.
            Ok(None) => {
                lock(&self.last_written).remove(name);
                Wrote::Gone
            }
            Err(error) => {
                tracing::warn!(cluster = %name, %error, "cannot write status");
                let mut failures = lock(&self.failures);
                failures.clusters.push(name.to_owned());
                failures.first_error.get_or_insert(error);
                Wrote::Failed
            }
        }
    }

    /// What to write `said` onto, or `None` when there is nothing to write any more.
    fn base(&self, name: &str, said: &Said) -> Option<CachedCluster> {
        let last_written = lock(&self.last_written);
        let written = last_written.get(name);
        // The freshest view: our last write until the cache shows it, else the cache.
        let base = match written {
            Some(written)
                if !written
                    .meta()
                    .resource_version
                    .as_deref()
                    .is_some_and(|rv| self.clusters.shows(name, rv)) =>
            {
                Some(CachedCluster::clone(written))
            }
            _ => self
                .clusters
                .named(name)
                .and_then(|c| c.0.as_ref().ok().cloned()),
        };
        // Deleted (or replaced) meanwhile: nothing to say any more.
        let mut base = base.filter(|b| b.metadata.uid == said.uid)?;
        if said.later() && base.observed.counted && written.is_none() {
            // Discovery counted the cluster while this waited its turn: it no longer waits
            // for discovery, and the next plan says what it does wait for (or that it is
            // synced) once the ClusterQueue write that follows is done. Written now, it
            // would be stale news on the apiserver's busiest moment: in a burst of 10, 8
            // of these went out after discovery's own status had.
            return None;
        }
        // The status says which generation its plan saw, not the newest.
        base.metadata.generation = said.generation;
        Some(base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{FakeApi, World, cached, cluster};
    use hearth_api::FournosCluster;
    use hearth_runtime::kit::HandFeed;
    use serde_json::{Value, json};
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    use tokio::time::Instant;

    /// `(cluster, KueueSynced reason)` of each status write `api` saw.
    fn seen(api: &FakeApi) -> Vec<(String, String)> {
        api.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(path, body)| {
                let name = path.trim_end_matches("/status").rsplit('/').next();
                let reason = body["status"]["conditions"][0]["reason"].as_str();
                (
                    name.unwrap_or_default().to_owned(),
                    reason.unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    /// The cluster a status write of `path` answers with, at version `rv`.
    fn written(path: &str, body: &Value, rv: &str) -> Value {
        let name = path.trim_end_matches("/status").rsplit('/').next();
        json!({"apiVersion": "fournos.dev/v1", "kind": "FournosCluster",
               "metadata": {"name": name, "namespace": "hearth", "uid": format!("uid-{}", name.unwrap_or_default()),
                            "generation": 1, "resourceVersion": rv},
               "spec": {"kubeconfigSecret": name},
               "status": body["status"]})
    }

    struct Kit {
        statuses: Statuses,
        server: FakeApi,
        feed: HandFeed<CachedCluster>,
        world: World,
    }

    /// Statuses writing to a [`FakeApi`], with clusters `names` (8 A100s each) cached.
    fn kit(open: bool, names: &[&str]) -> Kit {
        let server = FakeApi::new(open);
        let (writer, leader) = server.writer(|path| path.ends_with("/status"), written);
        let (cache, mut feed) = Cache::by_hand("FournosCluster", Some("hearth"));
        let world = World::new().with_clusters(names.iter().map(|n| cluster(n).gpu("a100", 8)));
        for c in &world.clusters {
            feed.deliver(cached(c));
        }
        let statuses = Statuses::new(writer, cache, leader, Changes::default());
        Kit {
            statuses,
            server,
            feed,
            world,
        }
    }

    impl Kit {
        fn cluster(&self, name: &str) -> &FournosCluster {
            self.world
                .clusters
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(name))
                .unwrap()
        }

        /// Adds clusters discovery has not counted yet (cached), and returns their names.
        fn uncounted<'a>(&mut self, names: &[&'a str]) -> Vec<&'a str> {
            let world = std::mem::replace(&mut self.world, World::new());
            self.world =
                world.with_clusters(names.iter().map(|n| cluster(n).gpu("a100", 8).uncounted()));
            for name in names {
                self.feed.deliver(cached(self.cluster(name)));
            }
            names.to_vec()
        }

        /// What the plan says of `name`, with the `KueueSynced` reason set to `reason`.
        fn sync(&self, name: &str, reason: SyncReason) -> ClusterSync {
            let mut sync = self.world.plan().clusters[name].clone();
            sync.condition.reason = reason;
            sync
        }

        fn submit(&self, name: &str, reason: SyncReason) -> bool {
            let sync = self.sync(name, reason);
            self.statuses.submit(&cached(self.cluster(name)), &sync)
        }

        /// Waits (10 s at most) until no write waits or is under way.
        async fn settled(&self) {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let busy = self.statuses.writes.lock().busy();
                if !busy {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "writes still under way after 10 s"
                );
                tokio::task::yield_now().await;
            }
        }
    }

    #[tokio::test]
    async fn a_newer_status_replaces_the_one_that_waits_so_the_cluster_is_written_once() {
        let kit = kit(true, &["a"]);
        assert!(kit.submit("a", SyncReason::WaitingForDiscovery));
        assert!(kit.submit("a", SyncReason::LimitReached));
        kit.settled().await;
        assert_eq!(
            seen(&kit.server),
            [("a".to_owned(), "LimitReached".to_owned())]
        );
    }

    /// `w1`–`w3` (not counted) submitted as waiting, then `u` as synced, on a closed
    /// server; returns once the writes the workers may start are at its gate.
    async fn three_waiting_behind_one_urgent() -> Kit {
        let mut kit = kit(false, &["u"]);
        for waiting in kit.uncounted(&["w1", "w2", "w3"]) {
            assert!(kit.submit(waiting, SyncReason::WaitingForDiscovery));
        }
        assert!(kit.submit("u", SyncReason::Synced));
        let deadline = Instant::now() + Duration::from_secs(10);
        while seen(&kit.server).len() < 1 + LATER_IN_FLIGHT {
            assert!(Instant::now() < deadline, "{:?}", seen(&kit.server));
            tokio::task::yield_now().await;
        }
        kit
    }

    #[tokio::test]
    async fn the_plan_for_a_successor_outlives_the_write_for_the_cluster_it_replaced() {
        let mut kit = kit(false, &["a"]);
        assert!(kit.submit("a", SyncReason::Synced));
        let deadline = Instant::now() + Duration::from_secs(10);
        while seen(&kit.server).is_empty() {
            assert!(Instant::now() < deadline, "the first write never started");
            tokio::task::yield_now().await;
        }
        // While it is under way, `a` is deleted and created again, and the successor
        // planned; the write for the first then finds it gone.
        let mut successor = kit.cluster("a").clone();
        successor.metadata.uid = Some("uid-a-2".into());
        kit.feed.deliver(cached(&successor));
        let sync = kit.sync("a", SyncReason::LimitReached);
        assert!(kit.statuses.submit(&cached(&successor), &sync));
        kit.server.gone.store(1, Ordering::SeqCst);
        kit.server.gate.add_permits(10);
        kit.settled().await;
        assert_eq!(
            seen(&kit.server),
            [
                ("a".to_owned(), "Synced".to_owned()),
                ("a".to_owned(), "LimitReached".to_owned())
            ],
            "the successor's status was dropped with the first's"
        );
    }

    #[tokio::test]
    async fn waiting_statuses_go_after_every_other_and_few_at_a_time() {
        // Every worker takes what it may: the urgent one first, then two waiting ones.
        let kit = three_waiting_behind_one_urgent().await;
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        let first = seen(&kit.server);
        assert_eq!(first[0], ("u".to_owned(), "Synced".to_owned()));
        assert_eq!(first.len(), 1 + LATER_IN_FLIGHT, "{first:?}");
        kit.server.gate.add_permits(10);
        kit.settled().await;
        assert_eq!(seen(&kit.server).len(), 4);
    }

    #[tokio::test]
    async fn waiting_is_not_written_once_discovery_counted_the_cluster_meanwhile() {
        // The urgent write and two waiting ones are under way; w3 waits its turn…
        let mut kit = three_waiting_behind_one_urgent().await;
        // …while discovery counts it.
        let counted = cluster("w3").gpu("a100", 8).build();
        kit.feed.deliver(cached(&counted));
        kit.server.gate.add_permits(10);
        kit.settled().await;
        let written: Vec<String> = seen(&kit.server).into_iter().map(|(n, _)| n).collect();
        assert_eq!(written.len(), 1 + LATER_IN_FLIGHT, "{written:?}");
        assert!(!written.contains(&"w3".to_owned()), "{written:?}");
        assert!(
            !kit.statuses.remembers("w3"),
            "the next plan says what w3 waits for"
        );
    }

    #[tokio::test]
    async fn a_written_status_is_not_asked_again_until_the_cache_shows_it() {
        let mut kit = kit(true, &["a"]);
        assert!(kit.submit("a", SyncReason::Synced));
        kit.settled().await;
        assert!(
            !kit.submit("a", SyncReason::Synced),
            "written, not yet cached"
        );
        kit.statuses.settle();
        assert!(kit.statuses.remembers("a"));
        let mut written = cached(kit.cluster("a"));
        written.metadata.resource_version = Some("100".into());
        kit.feed.deliver(written);
        kit.statuses.settle();
        assert!(
            !kit.statuses.remembers("a"),
            "the cache shows it: forgotten"
        );
        assert!(
            kit.submit("a", SyncReason::Drained),
            "a new status is written"
        );
        kit.settled().await;
        assert_eq!(seen(&kit.server).len(), 2);
    }

    #[tokio::test]
    async fn a_failed_write_is_reported_once_and_asked_again_only_after_its_backoff() {
        let kit = kit(true, &["a"]);
        kit.server.fail.store(true, Ordering::SeqCst);
        assert!(kit.submit("a", SyncReason::Synced));
        kit.settled().await;
        let Some(Error::WriteStatus { clusters, .. }) = kit.statuses.take_failure() else {
            panic!("the failure is reported");
        };
        assert_eq!(clusters, ["a"]);
        assert!(kit.statuses.take_failure().is_none(), "reported once");
        assert!(
            !kit.submit("a", SyncReason::Synced),
            "not before its backoff"
        );
        assert_eq!(seen(&kit.server).len(), 1);
    }
}
