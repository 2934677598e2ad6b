//! One watch feeding one cache, the same way in every controller.
//!
//! The watch retries on its own ([`WatchBackoff`]: at once after a calm, then kube's
//! default backoff); its errors are logged, counted (`watch_errors{kind}`) and dropped,
//! so the stream never ends before shutdown.
//! Managed fields are stripped before caching (they are most of an object's size).
//! The first list, and every re-list, asks for pages of at most [`LIST_PAGE`] objects:
//! a page is held whole, as text, while it is decoded, before any trim.
//! Objects are cached as [`DeserializeGuard`]s: one that does not decode is kept as an
//! error, skipped by the plans and logged once per version, and never stops the watch.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;

use crate::mutex::lock;
use std::hash::{BuildHasher as _, Hash, RandomState};
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

/// Longest decode error shown (in a log line, an Event, a status): serde's words may quote
/// the object.
pub const MAX_DECODE_ERROR: usize = 300;

/// Objects per list page, at most, on every watch the kit starts (a watch may ask for
/// fewer). A page is held whole before any trim: kube's client collects its body, copies
/// it into text and decodes every object of it, and a full `FournosCluster` page is
/// decoded whole before the first object is trimmed. An object may be as large as etcd
/// accepts (1.5 MiB by default), and the people who share the cluster write most of what
/// Hearth watches (FournosCluster labels and spec, Workloads), so a page costs up to
/// about four times its objects' size for the moment it is read: five such objects,
/// 7.5 MiB of text, are some 30 MiB, within the chart's 128 Mi limit with room for the
/// rest. Measured with pages of ten: a controller restarted into 60 FournosClusters of
/// 1.2 MB peaked at up to 92 MiB (docs/performance.md). kube asks for 500. At 1000
/// small clusters a list is 200 round trips instead of two, a few milliseconds each,
/// paid at start and on a re-list only: events arrive one object at a time.
pub const LIST_PAGE: u32 = 5;

/// The stream a [`Cache`] is fed by: the objects the watch touched, drained by
/// [`Cache::drive`].
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
    versions: Arc<Mutex<Delivered>>,
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
    /// watch, behind the `fournosclusters` readiness gate. `K` is `FournosCluster`, or
    /// the view of it the controller caches ([`view_of!`](crate::view_of)); either way
    /// only what [`ClusterKind::drop_unread`] leaves is cached.
    pub fn fournos_clusters<K: ClusterKind>(&self, rt: &crate::Runtime) -> (Cache<K>, Objects<K>) {
        self.fournos_clusters_trimmed(rt, |_| {})
    }

    /// [`Self::fournos_clusters`], with `trim` applied to each object after
    /// [`ClusterKind::drop_unread`]: for what only the controller's settings say it
    /// does not read (kueue-sync's pool label keys).
    pub fn fournos_clusters_trimmed<K: ClusterKind>(
        &self,
        rt: &crate::Runtime,
        trim: impl Fn(&mut K) + Send + 'static,
    ) -> (Cache<K>, Objects<K>) {
        Cache::watch_trimmed(
            "FournosCluster",
            Api::namespaced(rt.client(), rt.namespace()),
            watcher::Config::default(),
            rt.readiness().gate("fournosclusters"),
            self,
            move |cluster: &mut K| {
                cluster.drop_unread();
                trim(cluster);
            },
        )
    }
}

/// What a controller caches a FournosCluster as: the full kind or a view of it.
pub trait ClusterKind:
    Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    /// Drops, before the object is cached, what no controller reads of it from this
    /// kind. A view keeps only its own fields when it is made: nothing more to drop.
    fn drop_unread(&mut self) {}
}

/// The full kind (lock-manager's cache). Labels, annotations and the legacy
/// `spec.hardware` are written by anyone who may edit a FournosCluster, may be as large
/// as the apiserver accepts, and a controller that reads one caches a view instead.
/// Every write of a cached cluster is a patch, never the object sent back whole, so
/// nothing dropped here is lost on the server.
impl ClusterKind for hearth_api::FournosCluster {
    fn drop_unread(&mut self) {
        self.metadata.labels = None;
        self.metadata.annotations = None;
        self.spec.hardware = None;
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
        trim: impl Fn(&mut K) + Send + 'static,
    ) -> (Self, Objects<K>) {
        let config = small_pages(config);
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
                    lock(&versions).keep_only(live.iter().map(String::as_str));
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
                    lock(&versions).forget(&name);
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

/// `config` listing at most [`LIST_PAGE`] objects a page (fewer if it asks for fewer).
fn small_pages(config: watcher::Config) -> watcher::Config {
    let page = config
        .page_size
        .map_or(LIST_PAGE, |asked| asked.min(LIST_PAGE));
    config.page_size(page)
}

/// Feeds a [`Cache::by_hand`] the way its watch would.
pub struct HandFeed<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    versions: Arc<Mutex<Delivered>>,
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
        let versions: Arc<Mutex<Delivered>> = Arc::default();
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

    /// The kube store the watch fills.
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

    /// Whether the cache shows a write of object `name` that returned version
    /// `written`: the watch delivered that very version, or the object is gone.
    /// Versions are opaque and only ever compared for equality; a later version is
    /// recognised because the watch delivered the written one on its way.
    pub fn shows(&self, name: &str, written: &str) -> bool
    where
        K::DynamicType: Default,
    {
        self.named(name).is_none() || self.delivered(name, written)
    }

    /// Whether the watch delivered version `version` of object `name` (one of its last
    /// [`VERSIONS_KEPT`]): [`Self::shows`] for an object known to be cached, without the
    /// lookup (which allocates a key) that finds a gone one.
    pub fn delivered(&self, name: &str, version: &str) -> bool {
        lock(&self.versions).delivered(name, version)
    }
}

/// The watch behind a cache stopped: the controller is stopping.
#[derive(Debug, thiserror::Error)]
#[error("the {kind} watch stopped")]
pub struct CacheGone {
    pub kind: &'static str,
}

fn remember_version<K: Resource>(versions: &Mutex<Delivered>, object: &DeserializeGuard<K>) {
    let meta = object.meta();
    if let (Some(name), Some(rv)) = (&meta.name, &meta.resource_version) {
        lock(versions).remember(name, rv);
    }
}

/// The versions the watch delivered lately, per object, for [`Cache::shows`].
///
/// Every controller keeps this for every object it caches (a thousand clusters, and as
/// many Secrets or flavors), so it holds no string: names and versions are kept as
/// 64-bit hashes, keyed at random per process, an object's last [`VERSIONS_KEPT`] versions
/// in one fixed array. That is sound because `resourceVersion`s are opaque and only ever
/// compared for equality: equal strings have equal hashes. Two different strings share a
/// hash with probability 2^-64, and [`Self::delivered`] compares a version with at most
/// [`VERSIONS_KEPT`] others, so it takes an undelivered version for a delivered one with
/// probability at most 2^-61 per call: at a billion calls a day, once in some six million
/// years. Two live names sharing a hash (about n² / 2^65: 3 × 10^-14 for a thousand
/// objects) would share one array, so one object's versions could push out the other's:
/// a write would then show late, as it does after eight newer versions (callers wait with
/// a deadline, or plan from what they wrote), and early only with the 2^-61 above. The
/// keys are random per process, so nobody who picks names (anyone who may label a Secret)
/// can aim for either.
#[derive(Debug, Default)]
struct Delivered {
    keys: RandomState,
    /// By name hash: the version hashes delivered, oldest first; 0 is an empty slot (no
    /// hash is 0, see [`Self::hash`]).
    recent: HashMap<u64, [u64; VERSIONS_KEPT]>,
}

impl Delivered {
    fn hash(&self, text: &str) -> u64 {
        self.keys.hash_one(text).max(1)
    }

    fn remember(&mut self, name: &str, version: &str) {
        let version = self.hash(version);
        let seen = self.recent.entry(self.hash(name)).or_default();
        // The oldest makes room: the last VERSIONS_KEPT stay, in delivery order.
        seen.rotate_left(1);
        seen[VERSIONS_KEPT - 1] = version;
    }

    fn delivered(&self, name: &str, version: &str) -> bool {
        let version = self.hash(version);
        self.recent
            .get(&self.hash(name))
            .is_some_and(|seen| seen.contains(&version))
    }

    fn forget(&mut self, name: &str) {
        let name = self.hash(name);
        self.recent.remove(&name);
    }

    /// Forgets every object but those named.
    fn keep_only<'a>(&mut self, live: impl IntoIterator<Item = &'a str>) {
        let live: HashSet<u64> = live.into_iter().map(|name| self.hash(name)).collect();
        self.recent.retain(|name, _| live.contains(name));
    }
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
                    hearth_api::text::bounded(&invalid.error, MAX_DECODE_ERROR)
                };
                tracing::warn!(kind, name = %key.0, resource_version = %key.1, %error, "object does not decode; skipped");
            }
        }
    }
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
    fn the_last_versions_of_each_object_are_kept_as_hashes() {
        let (cache, mut feed) = Cache::by_hand("ConfigMap", Some("ns"));
        let long = "7".repeat(1000);
        feed.deliver(config_map("q", &long));
        for rv in 1..VERSIONS_KEPT {
            feed.deliver(config_map("q", &rv.to_string()));
        }
        feed.deliver(config_map("p", "900"));
        assert!(cache.shows("q", &long), "a long opaque version is its hash");
        assert!(cache.delivered("q", &long) && !cache.delivered("gone", &long));
        assert!(
            !cache.shows("q", &format!("{long}8")),
            "a version that differs from a delivered one by a byte is not it"
        );
        assert!(!cache.shows("q", "900"), "p's version is not q's");
        feed.deliver(config_map("q", "8"));
        assert!(!cache.shows("q", &long), "the oldest made room");
        assert!((1..=VERSIONS_KEPT).all(|rv| cache.shows("q", &rv.to_string())));
        // Per object one fixed array of hashes, whatever the lengths of names and versions.
        let delivered = lock(&cache.versions);
        assert_eq!(delivered.recent.len(), 2);
        assert_eq!(
            size_of_val(delivered.recent.values().next().unwrap()),
            VERSIONS_KEPT * 8
        );
    }

    #[test]
    fn versions_of_objects_gone_are_forgotten() {
        let mut delivered = Delivered::default();
        delivered.remember("a", "1");
        delivered.remember("b", "2");
        delivered.remember("c", "3");
        delivered.forget("a");
        delivered.keep_only(["c"]);
        assert!(!delivered.delivered("a", "1") && !delivered.delivered("b", "2"));
        assert!(delivered.delivered("c", "3"));
        assert_eq!(delivered.recent.len(), 1);
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
    fn lists_are_paged_small() {
        assert_eq!(
            small_pages(watcher::Config::default()).page_size,
            Some(LIST_PAGE)
        );
        let asked = |n| small_pages(watcher::Config::default().page_size(n)).page_size;
        assert_eq!(asked(2), Some(2), "a watch may ask for fewer");
        assert_eq!(asked(500), Some(LIST_PAGE));
        let unpaged = watcher::Config {
            page_size: None,
            ..watcher::Config::default()
        };
        assert_eq!(small_pages(unpaged).page_size, Some(LIST_PAGE));
    }

    #[test]
    fn a_full_fournos_cluster_is_cached_without_what_anyone_may_bloat() {
        use hearth_api::{FournosCluster, FournosClusterSpec, GpuInfo, Hardware};
        let mut cluster = FournosCluster::new(
            "a",
            FournosClusterSpec {
                kubeconfig_secret: "kubeconfig-a".into(),
                owner: Some("bob".into()),
                hardware: Some(Hardware {
                    gpus: vec![GpuInfo::default(); 100],
                    ..Hardware::default()
                }),
                ..FournosClusterSpec::default()
            },
        );
        cluster.metadata.labels = Some([("k".to_owned(), "v".repeat(63))].into());
        cluster.metadata.annotations = Some([("k".to_owned(), "v".repeat(9000))].into());
        cluster.metadata.uid = Some("u".into());
        let mut kept = cluster.clone();
        kept.drop_unread();
        assert_eq!(kept.metadata.labels, None);
        assert_eq!(kept.metadata.annotations, None);
        assert_eq!(kept.spec.hardware, None);
        assert_eq!(kept.metadata.uid, cluster.metadata.uid);
        assert_eq!(kept.spec.owner, cluster.spec.owner);
        assert_eq!(kept.spec.kubeconfig_secret, cluster.spec.kubeconfig_secret);
    }
}
