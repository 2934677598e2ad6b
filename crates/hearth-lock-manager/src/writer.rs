//! What the apply step writes with ([`Writer`]), and the sentinels this process made
//! ([`Created`]), which are its own from the moment they exist.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hearth_api::FournosCluster;
use hearth_runtime::events::Events;
use hearth_runtime::kit::{Ledger, Stage};
use kube::api::Api;
use kube::core::DeserializeGuard;

use crate::config::LockManagerConfig;
use crate::metrics::LockMetrics;
use crate::sentinel::Sentinel;

/// UIDs of the sentinels this process created or adopted, so that a sentinel is
/// proven from the moment it exists, before the cluster cache shows the status write
/// that records its UID. A UID in here is this lock-manager's whatever happened since
/// (another leader, a restart only forgets); entries go after ten minutes. Written in
/// the foreground, remembered in the kit's ledger.
/// Bounded by the sentinels created in ten minutes: one a lock taken.
#[derive(Clone, Default)]
pub struct Created(Arc<Mutex<Ledger<String, ()>>>);

/// Longer than any cache lag: by then the status that records the UID is in the cache.
const PROVEN_FOR: Duration = Duration::from_secs(600);

impl Created {
    pub fn insert(&self, uid: &str) {
        let mut ledger = hearth_runtime::lock(&self.0);
        let now = tokio::time::Instant::now();
        ledger.retain(|_, _, stage| !stage.written_long_ago(now, PROVEN_FOR));
        ledger.remember(uid.to_owned(), (), now);
    }

    pub fn contains(&self, uid: &str) -> bool {
        let ledger = hearth_runtime::lock(&self.0);
        let old = |stage: &Stage| stage.written_long_ago(tokio::time::Instant::now(), PROVEN_FOR);
        ledger
            .get(&uid.to_owned())
            .is_some_and(|(_, stage)| !old(stage))
    }
}

/// What the apply step writes with.
pub struct Writer<K: Sentinel> {
    pub client: kube::Client,
    pub config: LockManagerConfig,
    /// Where this Hearth's FournosClusters live: its sentinels' cluster-namespace label.
    pub cluster_namespace: String,
    pub created: Created,
    pub clusters: Api<FournosCluster>,
    /// Deletes (an undecodable sentinel can still be deleted).
    pub sentinels: Api<DeserializeGuard<K>>,
    /// Creates and status writes.
    pub sentinel_writes: Api<K>,
    pub events: Events,
    pub metrics: LockMetrics,
}

impl<K: Sentinel> Writer<K> {
    /// FournosClusters in `cluster_namespace`, sentinels in the execution namespace.
    pub fn new(
        client: kube::Client,
        cluster_namespace: &str,
        config: LockManagerConfig,
        events: Events,
        metrics: LockMetrics,
    ) -> Self {
        Self {
            cluster_namespace: cluster_namespace.to_owned(),
            created: Created::default(),
            clusters: Api::namespaced(client.clone(), cluster_namespace),
            sentinels: Api::namespaced(client.clone(), &config.execution_namespace),
            sentinel_writes: Api::namespaced(client.clone(), &config.execution_namespace),
            client,
            config,
            events,
            metrics,
        }
    }
}
