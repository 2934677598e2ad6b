//! What the apply step writes with ([`Writer`]), and the sentinels this process made
//! ([`Created`]), which are its own from the moment they exist.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hearth_api::FournosCluster;
use hearth_runtime::events::Events;
use kube::api::Api;
use kube::core::DeserializeGuard;

use crate::config::LockManagerConfig;
use crate::metrics::LockMetrics;
use crate::sentinel::Sentinel;

/// UIDs of the sentinels this process created or adopted, so that a sentinel is
/// proven from the moment it exists, before the cluster cache shows the status write
/// that records its UID. A UID in here is this lock-manager's whatever happened since
/// (another leader, a restart only forgets); entries go after ten minutes.
#[derive(Clone, Default)]
pub struct Created(Arc<Mutex<HashMap<String, Instant>>>);

/// Longer than any cache lag: by then the status that records the UID is in the cache.
const PROVEN_FOR: Duration = Duration::from_secs(600);

impl Created {
    pub fn insert(&self, uid: &str) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, at| at.elapsed() < PROVEN_FOR);
        map.insert(uid.to_owned(), Instant::now());
    }

    pub fn contains(&self, uid: &str) -> bool {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(uid).is_some_and(|at| at.elapsed() < PROVEN_FOR)
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
