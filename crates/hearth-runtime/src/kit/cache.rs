//! One watch feeding one cache, the same way in every controller.
//!
//! The watch retries on its own ([`WatchBackoff`]: at once after a calm, then kube's
//! default backoff); its errors are logged, counted (`watch_errors{kind}`) and dropped,
//! so the stream never ends before shutdown.
//! Managed fields are stripped before caching (they are most of an object's size).
//! Objects are cached as [`DeserializeGuard`]s: one that does not decode is kept as an
//! error, skipped by the plans and logged once per version, and never stops the watch.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::ControllerMetrics;
use super::trigger::Changes;
use super::watch_backoff::WatchBackoff;
use crate::ReadinessGate;

/// Versions remembered per object, for [`Cache::shows`]. A write is looked for within
/// seconds of being made, while at most a few more writes land on the same object.
const VERSIONS_KEPT: usize = 8;

/// Longest decode error quoted in a log line.
const MAX_DECODE_ERROR: usize = 300;

/// The stream a [`Cache`] is fed by: the objects the watch touched, for a kube
/// [`Controller`](kube::runtime::Controller) (`for_stream`, `watches_stream`) or to be
/// drained by [`Cache::drive`].
pub type Objects<K> =
    futures::stream::BoxStream<'static, Result<DeserializeGuard<K>, watcher::Error>>;

/// The cache of one watch. Cheap to clone; clones share it.
#[derive(Clone)]
pub struct Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    kind: &'static str,
    store: Store<DeserializeGuard<K>>,
    /// The one namespace the watch covers (`None`: cluster-scoped, or every namespace).
    namespace: Option<String>,
    synced: watch::Receiver<bool>,
    versions: Arc<Mutex<HashMap<String, VecDeque<String>>>>,
}

/// What a watch needs from the controller around it.
#[derive(Clone)]
pub struct WatchContext {
    pub changes: Changes,
    pub metrics: ControllerMetrics,
}

impl WatchContext {
    /// A fresh change signal; watch errors counted in `metrics`.
    pub fn new(metrics: &ControllerMetrics) -> Self {
        Self {
            changes: Changes::default(),
            metrics: metrics.clone(),
        }
    }

    /// The FournosClusters in the controller's namespace, every controller's primary
    /// watch, behind the `fournosclusters` readiness gate.
    pub fn fournos_clusters(
        &self,
        rt: &crate::Runtime,
    ) -> (
        Cache<hearth_api::FournosCluster>,
        Objects<hearth_api::FournosCluster>,
    ) {
        self.fournos_clusters_trimmed(rt, |_| {})
    }

    /// [`Self::fournos_clusters`], each trimmed by `trim` to what the controller reads
    /// (see [`Cache::watch_trimmed`]).
    pub fn fournos_clusters_trimmed(
        &self,
        rt: &crate::Runtime,
        trim: fn(&mut hearth_api::FournosCluster),
    ) -> (
        Cache<hearth_api::FournosCluster>,
        Objects<hearth_api::FournosCluster>,
    ) {
        Cache::watch_trimmed(
            "FournosCluster",
            Api::namespaced(rt.client(), rt.namespace()),
            watcher::Config::default(),
            rt.readiness().gate("fournosclusters"),
            self,
            trim,
        )
    }
}

impl<K> Cache<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    /// Starts nothing: returns the cache and the stream that fills it once polled.
    /// `gate` opens once the first complete list is cached.
    pub fn watch(
        kind: &'static str,
        api: Api<DeserializeGuard<K>>,
        config: watcher::Config,
        gate: ReadinessGate,
        context: &WatchContext,
    ) -> (Self, Objects<K>) {
        Self::watch_trimmed(kind, api, config, gate, context, |_| {})
    }

    /// [`Self::watch`], with `trim` applied to every object before it is cached: what a
    /// controller never reads (a Secret's other keys, `last-applied-configuration`) takes
    /// no memory, whatever size the apiserver allows.
    pub fn watch_trimmed(
        kind: &'static str,
        api: Api<DeserializeGuard<K>>,
        config: watcher::Config,
        gate: ReadinessGate,
        context: &WatchContext,
        trim: fn(&mut K),
    ) -> (Self, Objects<K>) {
        let (store, writer) = reflector::store();
        let (synced_tx, synced) = watch::channel(false);
        let cache = Self {
            kind,
            store,
            namespace: api.namespace().map(str::to_owned),
            synced,
            versions: Arc::default(),
        };
        let versions = cache.versions.clone();
        let store = cache.store.clone();
        let changes = context.changes.clone();
        let metrics = context.metrics.clone();
        let mut logged = HashSet::new();
        let stream = watcher::watcher(api, config)
            .backoff(WatchBackoff::default())
            .modify(move |object: &mut DeserializeGuard<K>| {
                object.meta_mut().managed_fields = None;
                if let Ok(object) = &mut object.0 {
                    trim(object);
                }
            })
            .reflect(writer)
            .inspect(move |event| match event {
                Ok(watcher::Event::InitDone) => {
                    // A re-list delivers no Delete for what went meanwhile.
                    let live: HashSet<String> =
                        store.state().iter().map(|o| o.name_any()).collect();
                    lock(&versions).retain(|name, _| live.contains(name));
                    logged.retain(|(name, _)| live.contains(name));
                    synced_tx.send_replace(true);
                    gate.ready();
                    changes.bump();
                }
                Ok(watcher::Event::Apply(object)) => {
                    remember_version(&versions, object);
                    log_invalid_once(kind, object, &mut logged);
                    changes.bump();
                }
                Ok(watcher::Event::InitApply(object)) => {
                    remember_version(&versions, object);
                    log_invalid_once(kind, object, &mut logged);
                }
                Ok(watcher::Event::Delete(object)) => {
                    let name = object.name_any();
                    logged.retain(|(logged, _)| *logged != name);
                    lock(&versions).remove(&name);
                    changes.bump();
                }
                Ok(watcher::Event::Init) => {}
                Err(error) => {
                    // Management API errors only: no object content in them.
                    tracing::warn!(kind, %error, "watch failed; retrying with backoff");
                    metrics.watch_error(kind);
                }
            })
            .touched_objects()
            .filter(|item| std::future::ready(item.is_ok()))
            .boxed();
        (cache, stream)
    }
}

/// Feeds a [`Cache::by_hand`] the way its watch would.
pub struct HandFeed<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    versions: Arc<Mutex<HashMap<String, VecDeque<String>>>>,
    writer: reflector::store::Writer<DeserializeGuard<K>>,
    synced: watch::Sender<bool>,
}

impl<K> HandFeed<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    /// Delivers `object` as a watch event that adds or changes it.
    pub fn deliver(&mut self, object: K) {
        let object = DeserializeGuard(Ok(object));
        remember_version(&self.versions, &object);
        self.writer
            .apply_watcher_event(&watcher::Event::Apply(object));
    }

    /// Says the first list is complete (a [`Cache::by_hand_unsynced`] cache).
    pub fn synced(&self) {
        self.synced.send_replace(true);
    }
}

impl<K> Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    /// A filled cache without a watch, for tests of code that reads caches: objects
    /// arrive through the returned [`HandFeed`]. `namespace`: the one namespace the
    /// watch would cover (`None`: cluster-scoped, or every namespace).
    pub fn by_hand(kind: &'static str, namespace: Option<&str>) -> (Self, HandFeed<K>) {
        let (cache, feed) = Self::by_hand_unsynced(kind, namespace);
        feed.synced();
        (cache, feed)
    }

    /// [`Self::by_hand`], not synced until [`HandFeed::synced`] says so.
    pub fn by_hand_unsynced(kind: &'static str, namespace: Option<&str>) -> (Self, HandFeed<K>) {
        let (store, writer) = reflector::store();
        let (synced_tx, synced) = watch::channel(false);
        let versions: Arc<Mutex<HashMap<String, VecDeque<String>>>> = Arc::default();
        let cache = Self {
            kind,
            store,
            namespace: namespace.map(str::to_owned),
            synced,
            versions: versions.clone(),
        };
        (
            cache,
            HandFeed {
                versions,
                writer,
                synced: synced_tx,
            },
        )
    }
}

impl<K> Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The kube store, for a [`Controller`](kube::runtime::Controller).
    pub fn store(&self) -> Store<DeserializeGuard<K>> {
        self.store.clone()
    }

    pub fn state(&self) -> Vec<Arc<DeserializeGuard<K>>> {
        self.store.state()
    }

    /// The cached object named `name` (the cache holds one namespace or none). A keyed
    /// lookup where the key is known (one namespace, or a cluster-scoped object): callers
    /// ask once per write of a burst of 1000, which a scan of the cache made quadratic.
    pub fn named(&self, name: &str) -> Option<Arc<DeserializeGuard<K>>>
    where
        K::DynamicType: Default,
    {
        let key = ObjectRef::<DeserializeGuard<K>>::new(name);
        let key = match &self.namespace {
            Some(namespace) => key.within(namespace),
            None => key,
        };
        self.store.get(&key).or_else(|| {
            // Every namespace of a namespaced kind: the name alone is no key.
            self.store.find(|o| o.meta().name.as_deref() == Some(name))
        })
    }

    /// Waits until the cache holds a full list; any number of tasks may wait.
    /// `Err` when the watch is gone (the controller is stopping).
    pub async fn synced(&self) -> Result<(), CacheGone> {
        self.synced
            .clone()
            .wait_for(|synced| *synced)
            .await
            .map(drop)
            .map_err(|_| CacheGone { kind: self.kind })
    }

    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// How many cached objects do not decode.
    pub fn invalid_count(&self) -> usize {
        self.store.state().iter().filter(|o| o.0.is_err()).count()
    }

    /// Whether the cache shows a write of object `name` that returned version
    /// `written`: the watch delivered that very version, or the object is gone.
    /// Versions are opaque and only ever compared for equality; a later version is
    /// recognised because the watch delivered the written one on its way.
    pub fn shows(&self, name: &str, written: &str) -> bool
    where
        K::DynamicType: Default,
    {
        if self.named(name).is_none() {
            return true;
        }
        lock(&self.versions)
            .get(name)
            .is_some_and(|seen| seen.iter().any(|v| v == written))
    }
}

/// The watch behind a cache stopped: the controller is stopping.
#[derive(Debug, thiserror::Error)]
#[error("the {kind} watch stopped")]
pub struct CacheGone {
    pub kind: &'static str,
}

fn remember_version<K: Resource>(
    versions: &Mutex<HashMap<String, VecDeque<String>>>,
    object: &DeserializeGuard<K>,
) {
    let meta = object.meta();
    let (Some(name), Some(rv)) = (&meta.name, &meta.resource_version) else {
        return;
    };
    let mut versions = lock(versions);
    let seen = versions.entry(name.clone()).or_default();
    if seen.len() == VERSIONS_KEPT {
        seen.pop_front();
    }
    seen.push_back(rv.clone());
}

/// Logs an object that does not decode, once per `(name, resourceVersion)`: the watch
/// re-delivers it on every re-list.
fn log_invalid_once<K: Resource>(
    kind: &'static str,
    object: &DeserializeGuard<K>,
    logged: &mut HashSet<(String, String)>,
) {
    let meta = object.meta();
    let key = (
        meta.name.clone().unwrap_or_default(),
        meta.resource_version.clone().unwrap_or_default(),
    );
    match &object.0 {
        Ok(_) => logged.retain(|(name, _)| *name != key.0),
        Err(invalid) => {
            logged.retain(|(name, rv)| *name != key.0 || *rv == key.1);
            if logged.insert(key.clone()) {
                // Bounded, and not for Secrets: their decode error may quote the data.
                let error = if kind == "Secret" {
                    String::from("(not shown: it may quote the Secret's data)")
                } else {
                    bounded(&invalid.error)
                };
                tracing::warn!(kind, name = %key.0, resource_version = %key.1, %error, "object does not decode; skipped");
            }
        }
    }
}

/// `text` cut to [`MAX_DECODE_ERROR`] characters, as [`hearth_api::text::bounded`] shows it.
pub fn bounded(text: &str) -> String {
    hearth_api::text::bounded(text, MAX_DECODE_ERROR)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Keys already reported (an Event, a log line), so each is reported once per object
/// version: keep the keys of what is still current, report the rest.
#[derive(Debug, Default)]
pub struct ReportedOnce<T: Eq + Hash> {
    reported: HashSet<T>,
}

impl<T: Eq + Hash + Clone> ReportedOnce<T> {
    /// Forgets keys no longer current (fixed or gone objects, older versions).
    pub fn retain(&mut self, current: impl Fn(&T) -> bool) {
        self.reported.retain(|k| current(k));
    }

    /// True the first time `key` is seen since it was last forgotten.
    pub fn first(&mut self, key: T) -> bool {
        self.reported.insert(key)
    }

    pub fn contains(&self, key: &T) -> bool {
        self.reported.contains(key)
    }
}

impl<K> Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    /// Polls `objects` until it ends, for a cache no kube Controller consumes.
    pub async fn drive(objects: Objects<K>) {
        objects.for_each(|_| std::future::ready(())).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn config_map(name: &str, rv: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn a_write_is_seen_at_its_version_or_later_or_when_gone() {
        let (cache, mut feed) = Cache::by_hand("ConfigMap", Some("ns"));
        feed.deliver(config_map("q", "9"));
        assert!(!cache.shows("q", "10"), "the cache is behind the write");
        feed.deliver(config_map("q", "10"));
        assert!(cache.shows("q", "10"));
        // Another writer on top: the write was delivered on the way, so it shows.
        feed.deliver(config_map("q", "11"));
        assert!(cache.shows("q", "10"));
        assert!(
            cache.shows("gone", "10"),
            "an object that is gone shows every write"
        );
    }

    #[test]
    fn versions_are_compared_for_equality_only() {
        let (cache, mut feed) = Cache::by_hand("ConfigMap", Some("ns"));
        feed.deliver(config_map("q", "abc"));
        assert!(
            !cache.shows("q", "10"),
            "an opaque version says nothing about order"
        );
        assert!(cache.shows("q", "abc"));
        // A version that looks larger than the write is not taken for it.
        feed.deliver(config_map("p", "99999"));
        assert!(!cache.shows("p", "10"));
    }

    #[test]
    fn an_object_is_found_by_name_in_one_namespace_or_across_all() {
        for namespace in [Some("ns"), None] {
            let (cache, mut feed) = Cache::<ConfigMap>::by_hand("ConfigMap", namespace);
            for name in ["a", "b", "c"] {
                feed.deliver(config_map(name, "1"));
            }
            assert_eq!(cache.named("b").unwrap().name_any(), "b", "{namespace:?}");
            assert!(cache.named("d").is_none(), "{namespace:?}");
        }
    }

    #[test]
    fn reported_once_per_key_until_forgotten() {
        let mut reported = ReportedOnce::default();
        assert!(reported.first(("a", "1")));
        assert!(!reported.first(("a", "1")));
        reported.retain(|k| k.1 == "2");
        assert!(reported.first(("a", "1")));
    }

    #[test]
    fn decode_errors_are_bounded() {
        let long = "x\n".repeat(400);
        let cut = bounded(&long);
        assert_eq!(cut.chars().count(), MAX_DECODE_ERROR + 1);
        assert!(!cut.contains('\n'));
    }
}
