//! What the reconciles and the sweep share: discovery's settings, its two caches, its
//! clients, and what it remembers between them (its own writes until the watch delivers
//! them, what the sweep last read of each cluster).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hearth_api::{FournosCluster, FournosClusterStatus, SourceSecret};
use hearth_runtime::events::Events;
use hearth_runtime::kit::{Cache, Changes};
use hearth_runtime::{Runtime, lock};
use kube::api::Api;

use crate::cluster_cache::CachedCluster;
use crate::config::DiscoveryConfig;
use crate::memory::{Cached, Memory, Written};
use crate::metrics::Metrics;
use crate::observe::sweep_fingerprint;
use crate::probe::ProbeSettings;
use crate::secret::{CachedSecret, SecretObject};
use crate::secret_pattern::SecretPattern;

/// Discovery's settings, resolved from the command line.
#[derive(Debug, Clone)]
pub struct Settings {
    pub namespace: String,
    pub secrets_namespace: String,
    pub pattern: SecretPattern,
    pub default_interval: Duration,
    pub probe: ProbeSettings,
    pub failure_threshold: u32,
    pub expiry_window: Duration,
    /// Node pages read from targets at once (`--discovery-concurrency`).
    pub pages_at_once: usize,
    /// Resync safety net: no cluster waits longer than this for a reconcile.
    pub resync: Duration,
    /// How long a locked auto-discovered cluster outlives its Secret.
    pub offboard_locked_grace: Duration,
}

impl Settings {
    pub fn new(config: &DiscoveryConfig, namespace: &str, resync: Duration) -> Self {
        Self {
            namespace: namespace.to_owned(),
            secrets_namespace: config.secrets_namespace.clone(),
            // clap has checked the placeholder already.
            pattern: SecretPattern::new(&config.kubeconfig_secret_pattern)
                .expect("the pattern holds {cluster} once"),
            default_interval: Duration::from_secs(config.gpu_discovery_default_interval_sec),
            probe: ProbeSettings::with_pages_at_once(
                Duration::from_secs(config.gpu_discovery_timeout_sec),
                config.discovery_concurrency.get(),
            ),
            failure_threshold: config.failure_threshold,
            expiry_window: config.credentials_expiry_warning,
            pages_at_once: config.discovery_concurrency.get(),
            resync: resync.max(Duration::from_secs(1)),
            offboard_locked_grace: Duration::from_secs(config.offboard_locked_grace_sec),
        }
    }
}

/// Shared by the reconciles and the sweep.
pub(crate) struct Context {
    pub rt: Runtime,
    pub settings: Settings,
    pub clusters: Cache<CachedCluster>,
    pub secrets: Cache<CachedSecret>,
    pub cluster_api: Api<FournosCluster>,
    pub events: Events,
    pub metrics: Metrics,
    /// Wakes the sweep: bumped by every Secret event and by the cluster events that
    /// change what the sweep reads ([`Context::watched`]).
    pub changes: Changes,
    memory: Mutex<Memory>,
    /// What the sweep read of each cached cluster when its last event came (a hash of
    /// [`crate::observe::observe_cluster`]), by name.
    swept: Mutex<HashMap<String, u64>>,
    /// The Secret this replica created each cluster from, by cluster uid, until the
    /// cluster is gone: its first status write records it even if the Secret went in
    /// between (see [`crate::source`]).
    created: Mutex<HashMap<String, SourceSecret>>,
}

impl Context {
    pub fn new(
        rt: &Runtime,
        settings: Settings,
        clusters: Cache<CachedCluster>,
        secrets: Cache<CachedSecret>,
        metrics: Metrics,
    ) -> Self {
        Self {
            events: rt.events(),
            cluster_api: Api::namespaced(rt.write_client(), &settings.namespace),
            rt: rt.clone(),
            settings,
            clusters,
            secrets,
            metrics,
            changes: Changes::default(),
            memory: Mutex::default(),
            swept: Mutex::default(),
            created: Mutex::default(),
        }
    }

    /// Waits until both caches hold a full list; false if that never happens (the
    /// controller is stopping).
    pub async fn wait_synced(&self) -> bool {
        let shutdown = self.rt.shutdown();
        tokio::select! {
            synced = async { tokio::try_join!(self.clusters.synced(), self.secrets.synced()) } => synced.is_ok(),
            () = shutdown.cancelled() => false,
        }
    }

    /// The cached labeled Secret named `name`, if any.
    pub fn secret(&self, name: &str) -> Option<Arc<SecretObject>> {
        self.secrets.named(name)
    }

    /// `namespace/name` of a Secret, for messages.
    pub fn secret_ref(&self, name: &str) -> String {
        format!("{}/{name}", self.settings.secrets_namespace)
    }

    /// `namespace/name` of a FournosCluster, for errors.
    pub fn cluster_ref(&self, name: &str) -> String {
        format!("{}/{name}", self.settings.namespace)
    }

    /// Forgets clusters that are gone (by uid), and what the sweep read of clusters no
    /// longer cached (a re-list delivers no event for what went meanwhile).
    pub fn forget_except(&self, live: impl Fn(&str) -> bool) {
        self.lock_memory().forget_except(&live);
        lock(&self.created).retain(|uid, _| live(uid));
        lock(&self.swept).retain(|name, _| self.clusters.named(name).is_some());
    }

    /// Remembers that this replica created the cluster of uid `uid` from Secret `secret`.
    pub(crate) fn created_from(&self, uid: &str, secret: &str, secret_uid: &str) {
        let source = SourceSecret {
            name: secret.to_owned(),
            uid: secret_uid.to_owned(),
        };
        lock(&self.created).insert(uid.to_owned(), source);
    }

    /// The Secret this replica created the cluster of uid `uid` from, if it did.
    pub(crate) fn created(&self, uid: &str) -> Option<SourceSecret> {
        lock(&self.created).get(uid).cloned()
    }

    /// Forgets every write this replica remembers: after leadership moved, the leader
    /// meanwhile wrote statuses this replica never saw written.
    pub(crate) fn forget_writes(&self) {
        self.lock_memory().forget_writes();
    }

    fn lock_memory(&self) -> MutexGuard<'_, Memory> {
        lock(&self.memory)
    }

    /// The fingerprint remembered for `cluster` and the status to plan from: see
    /// [`recall_from`].
    pub(crate) fn recall(
        &self,
        cluster: &CachedCluster,
    ) -> (Option<u64>, Option<FournosClusterStatus>) {
        recall_from(&mut self.lock_memory(), &self.clusters, cluster)
    }

    /// After a reconcile: its fingerprint and write, the write forgotten at once if the
    /// watch delivered it already (it can beat the apiserver's answer).
    pub(crate) fn remember(
        &self,
        cluster: &CachedCluster,
        fingerprint: u64,
        written: Option<Written>,
    ) {
        let uid = cluster.metadata.uid.as_deref().unwrap_or_default();
        let wrote = written.is_some();
        let mut memory = self.lock_memory();
        memory.remember(uid, fingerprint, written);
        let name = cluster.metadata.name.as_deref().unwrap_or_default();
        if let Some(current) = wrote.then(|| self.clusters.named(name)).flatten()
            && let Ok(current) = &current.0
        {
            let delivered = |written: &str| self.clusters.delivered(name, written);
            memory.forget_delivered(&cached_view(current, Some(&delivered)));
        }
    }

    /// On each watch event of a cluster (the cache holds it already): forgets the write
    /// it delivers, so a written status is not kept beside the cached one it became, and
    /// wakes the sweep only when what the sweep reads of the cluster changed, or it went.
    /// In an onboarding burst most events are status writes (discovery's, kueue-sync's,
    /// lock-manager's), and a sweep reads every cluster: waking it for each would make
    /// the burst cost clusters × events.
    pub(crate) fn watched(&self, name: &str) {
        let cached = self.clusters.named(name);
        if let Some(cluster) = cached.as_deref().and_then(|c| c.0.as_ref().ok()) {
            let mut memory = self.lock_memory();
            if memory.awaits_any() {
                let delivered = |written: &str| self.clusters.delivered(name, written);
                memory.forget_delivered(&cached_view(cluster, Some(&delivered)));
            }
        }
        let seen = cached.as_deref().map(sweep_fingerprint);
        let mut swept = lock(&self.swept);
        let before = match seen {
            Some(seen) => swept.insert(name.to_owned(), seen),
            None => swept.remove(name),
        };
        if before != seen {
            self.changes.bump();
        }
    }
}

/// `cluster` as [`Memory`] sees it; `delivered` says which versions the watch delivered.
fn cached_view<'a>(
    cluster: &'a CachedCluster,
    delivered: Option<&'a dyn Fn(&str) -> bool>,
) -> Cached<'a> {
    Cached {
        uid: cluster.metadata.uid.as_deref().unwrap_or_default(),
        resource_version: cluster.metadata.resource_version.as_deref(),
        status: cluster.status.as_ref(),
        delivered,
    }
}

/// [`Memory::recall`] against the cache as it is now. `snapshot` is the cluster as the
/// runner took it from the cache to start the reconcile; the watch may have delivered
/// newer versions since, this replica's own status write among them. So the order
/// matters: first forget a write the watch delivered, then read the cache, which holds
/// that write or something after it by then (the kit records a version as delivered only
/// once the cache holds it). Asked of the snapshot instead, a delivered write counts as
/// shown while the status planned from is older than it: the cluster was probed again,
/// and its status and Events written twice (a fifth of the clusters of some 10-cluster
/// bench runs).
fn recall_from(
    memory: &mut Memory,
    clusters: &Cache<CachedCluster>,
    snapshot: &CachedCluster,
) -> (Option<u64>, Option<FournosClusterStatus>) {
    let name = snapshot.metadata.name.as_deref().unwrap_or_default();
    let shows = |written: &str| clusters.shows(name, written);
    memory.forget_delivered(&cached_view(snapshot, Some(&shows)));
    let current = clusters.named(name);
    let cluster = current
        .as_deref()
        .and_then(|c| c.0.as_ref().ok())
        .filter(|c| c.metadata.uid == snapshot.metadata.uid)
        .unwrap_or(snapshot);
    // No `delivered` here: a version delivered after this read is not in it.
    memory.recall(&cached_view(cluster, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_api::KubeconfigStatus;
    use hearth_runtime::kit::HandFeed;

    fn cluster(version: &str, status: Option<FournosClusterStatus>) -> CachedCluster {
        let mut cluster = CachedCluster::default();
        cluster.metadata.name = Some("a".into());
        cluster.metadata.namespace = Some("ns".into());
        cluster.metadata.uid = Some("uid-a".into());
        cluster.metadata.resource_version = Some(version.into());
        cluster.status = status;
        cluster
    }

    fn snapshot(cache: &Cache<CachedCluster>) -> CachedCluster {
        cache.named("a").unwrap().0.as_ref().unwrap().clone()
    }

    /// The cache after version 1 (no status) and another controller's status write,
    /// version 2 (none of discovery's fields); discovery remembers writing `status` as
    /// version 3, with kubeconfig fingerprint 7. Version 3 is not delivered yet.
    fn wrote_version_3(
        status: &FournosClusterStatus,
    ) -> (Cache<CachedCluster>, HandFeed<CachedCluster>, Memory) {
        let (cache, mut feed) = Cache::by_hand("FournosCluster", Some("ns"));
        feed.deliver(cluster("1", None));
        let mut memory = Memory::default();
        let written = Written {
            resource_version: Some("3".into()),
            status: status.clone(),
        };
        memory.remember("uid-a", 7, Some(written));
        feed.deliver(cluster("2", Some(FournosClusterStatus::default())));
        (cache, feed, memory)
    }

    /// The race of the 10-cluster bench: discovery writes version 3 and reconciles again
    /// (another writer's version 2 queued it); the runner hands it version 2, and only
    /// then does the watch deliver version 3.
    #[test]
    fn a_write_delivered_after_the_snapshot_is_planned_from_not_lost() {
        let valid = FournosClusterStatus {
            kubeconfig_status: Some(KubeconfigStatus::Valid),
            gpu_summary: Some("8x NVIDIA-A100-SXM4-80GB".into()),
            ..Default::default()
        };
        let (cache, mut feed, mut memory) = wrote_version_3(&valid);
        let taken = snapshot(&cache);
        feed.deliver(cluster("3", Some(valid.clone())));

        let (fingerprint, status) = recall_from(&mut memory, &cache, &taken);
        assert_eq!(fingerprint, Some(7));
        assert_eq!(
            status.and_then(|s| s.kubeconfig_status),
            Some(KubeconfigStatus::Valid),
            "planned from a status older than discovery's own write"
        );
    }

    #[test]
    fn a_write_not_yet_delivered_is_planned_from() {
        let valid = FournosClusterStatus {
            kubeconfig_status: Some(KubeconfigStatus::Valid),
            ..Default::default()
        };
        let (cache, mut feed, mut memory) = wrote_version_3(&valid);
        let (_, status) = recall_from(&mut memory, &cache, &snapshot(&cache));
        assert_eq!(status, Some(valid.clone()));
        // Once delivered, and another writer's version on top: the cache is planned from.
        let mut later = valid.clone();
        later.locked = Some(true);
        feed.deliver(cluster("3", Some(valid)));
        feed.deliver(cluster("4", Some(later.clone())));
        let (_, status) = recall_from(&mut memory, &cache, &snapshot(&cache));
        assert_eq!(status, Some(later));
    }
}
