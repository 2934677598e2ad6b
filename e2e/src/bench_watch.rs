//! The bench's observer: watches on a scope's FournosClusters and its ClusterQueue, each
//! event timestamped as it arrives, so every figure is the moment the apiserver told a
//! watcher, never a polling period. Objects are read as JSON: a peer (the Python Hearth)
//! may write what Hearth's types refuse, such as quotas as numbers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use hearth_api::names::condition_types::{GPU_DISCOVERED, KUEUE_SYNCED};
use hearth_api::{FournosCluster, KubeconfigStatus};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::Value;
use tokio::sync::watch;

use crate::bench::flavor_has_gpu_quota;

/// `KueueSynced=False` reasons that are an answer, not a step on the way (unlike
/// `WaitingForFlavor`, `Drained` or `Conflict`).
pub const FINAL_REFUSALS: &[&str] = &[
    "LimitReached",
    "FlavorNotManaged",
    "InvalidName",
    "InvalidResourceName",
];

/// How a cluster's onboarding ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    /// Discovered, GPU quota in the queue and `KueueSynced=True`.
    Quota,
    /// Discovered, and a final `KueueSynced=False` answer (beyond Kueue's limit).
    Refused(String),
}

/// What the watches showed of one cluster, each the first moment it was seen.
#[derive(Debug, Clone, Default)]
pub struct Track {
    /// The FournosCluster's first event.
    pub created: Option<Timestamp>,
    /// `Valid`, GPUs counted and `GpuDiscovered=True`: discovery's status written.
    pub discovered: Option<Timestamp>,
    /// Its flavor with nonzero GPU quota in the ClusterQueue's spec.
    pub quota: Option<Timestamp>,
    /// Its flavor listed in the ClusterQueue's `status.flavorsReservation` (Kueue took
    /// the spec in).
    pub reported: Option<Timestamp>,
    /// Converged (see [`Done`]).
    pub done: Option<(Timestamp, Done)>,
    /// Every `KueueSynced` `(status, reason)` the watch delivered, changes only.
    pub synced_history: Vec<(String, String)>,
    /// The latest object, to judge it again when the queue changes.
    latest: Option<FournosCluster>,
}

impl Track {
    /// Whether it ever had `KueueSynced=True` and later a final refusal: quota taken back.
    pub fn lost_quota(&self) -> bool {
        let first_true = self.synced_history.iter().position(|(s, _)| s == "True");
        first_true.is_some_and(|i| {
            self.synced_history[i..]
                .iter()
                .any(|(s, r)| s == "False" && FINAL_REFUSALS.contains(&r.as_str()))
        })
    }

    pub fn ever_synced(&self) -> bool {
        self.synced_history.iter().any(|(s, _)| s == "True")
    }
}

/// Everything observed so far.
#[derive(Debug, Default)]
pub struct Seen {
    pub clusters: BTreeMap<String, Track>,
    /// The latest ClusterQueue, as JSON.
    pub queue: Option<Value>,
    /// Flavors that had nonzero GPU quota in any version of the queue the watch delivered.
    pub ever_quota: BTreeSet<String>,
    /// Times a watch had to list again (events between two lists may be missed).
    pub relists: usize,
}

/// The running watches of one scope. Dropping it stops them.
pub struct Observer {
    seen: Arc<Mutex<Seen>>,
    changes: watch::Receiver<u64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Observer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Observer {
    /// Starts watching FournosClusters in `namespace` and the ClusterQueue
    /// `cluster_queue`; returns once both watches hold their first full list.
    pub async fn start(
        client: kube::Client,
        namespace: &str,
        cluster_queue: &str,
        timeout: Duration,
    ) -> anyhow::Result<Observer> {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (tx, changes) = watch::channel(0u64);
        let tx = Arc::new(tx);
        let clusters: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            namespace,
            &ApiResource::erase::<FournosCluster>(&()),
        );
        let queues: Api<DynamicObject> = Api::all_with(
            client,
            &ApiResource::erase::<hearth_api::kueue::ClusterQueue>(&()),
        );
        let (synced_tx, mut synced) = watch::channel(0u8);
        let synced_tx = Arc::new(synced_tx);
        let tasks = vec![
            tokio::spawn(run(
                clusters,
                watcher::Config::default(),
                seen.clone(),
                tx.clone(),
                synced_tx.clone(),
                on_cluster,
            )),
            tokio::spawn(run(
                queues,
                watcher::Config::default().fields(&format!("metadata.name={cluster_queue}")),
                seen.clone(),
                tx,
                synced_tx,
                on_queue,
            )),
        ];
        let observer = Observer {
            seen,
            changes,
            tasks,
        };
        tokio::time::timeout(timeout, synced.wait_for(|n| *n >= 2))
            .await
            .map_err(|_| anyhow::anyhow!("the bench's watches did not list within {timeout:?}"))?
            .map_err(|_| anyhow::anyhow!("the bench's watches stopped"))?;
        Ok(observer)
    }

    /// Waits until `ready` holds for what was seen, re-checked on every event; `Err`
    /// with what `ready` last said when `timeout` passes first.
    pub async fn wait_until<T>(
        &self,
        timeout: Duration,
        mut ready: impl FnMut(&Seen) -> Result<T, String>,
    ) -> anyhow::Result<T> {
        let mut changes = self.changes.clone();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            changes.borrow_and_update();
            let last = match ready(&self.lock()) {
                Ok(value) => return Ok(value),
                Err(why) => why,
            };
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => anyhow::bail!("the bench's watches stopped: {last}"),
                Err(_) => anyhow::bail!("not within {}s: {last}", timeout.as_secs()),
            }
        }
    }

    /// What was seen, for reading.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

async fn run(
    api: Api<DynamicObject>,
    config: watcher::Config,
    seen: Arc<Mutex<Seen>>,
    changes: Arc<watch::Sender<u64>>,
    synced: Arc<watch::Sender<u8>>,
    on_object: fn(&mut Seen, Value, Timestamp),
) {
    let mut lists = 0usize;
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        // The moment the event arrived, before anything else is done with it.
        let at = Timestamp::now();
        let object = match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => o,
            Ok(watcher::Event::Init) => {
                lists += 1;
                if lists > 1 {
                    lock(&seen).relists += 1;
                }
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                if lists == 1 {
                    synced.send_modify(|n| *n += 1);
                }
                continue;
            }
            Ok(watcher::Event::Delete(_)) => continue,
            Err(error) => {
                tracing::warn!(%error, "bench watch failed; retrying with backoff");
                continue;
            }
        };
        let Ok(value) = serde_json::to_value(object) else {
            continue;
        };
        on_object(&mut lock(&seen), value, at);
        changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}

fn lock(seen: &Mutex<Seen>) -> std::sync::MutexGuard<'_, Seen> {
    seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn on_cluster(seen: &mut Seen, value: Value, at: Timestamp) {
    // One that does not decode (a peer's) still counts as created.
    let Some(name) = value["metadata"]["name"].as_str().map(str::to_owned) else {
        return;
    };
    let queue = seen.queue.take();
    let track = seen.clusters.entry(name.clone()).or_default();
    track.created.get_or_insert(at);
    if let Ok(cluster) = serde_json::from_value::<FournosCluster>(value) {
        if let Some(k) = condition(&cluster, KUEUE_SYNCED) {
            let entry = (k.status.clone(), k.reason.clone());
            if track.synced_history.last() != Some(&entry) {
                track.synced_history.push(entry);
            }
        }
        if discovered(&cluster) {
            track.discovered.get_or_insert(at);
        }
        track.latest = Some(cluster);
        judge(track, &name, queue.as_ref(), at);
    }
    seen.queue = queue;
}

fn on_queue(seen: &mut Seen, value: Value, at: Timestamp) {
    let reported: BTreeSet<&str> = value["status"]["flavorsReservation"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["name"].as_str())
        .collect();
    for (name, track) in &mut seen.clusters {
        if flavor_has_gpu_quota(&value, name) {
            track.quota.get_or_insert(at);
            seen.ever_quota.insert(name.clone());
        }
        if reported.contains(name.as_str()) {
            track.reported.get_or_insert(at);
        }
        judge(track, name, Some(&value), at);
    }
    // Flavors of clusters the FournosCluster watch has not shown yet.
    for group in value["spec"]["resourceGroups"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for flavor in group["flavors"].as_array().into_iter().flatten() {
            if let Some(name) = flavor["name"].as_str()
                && !seen.clusters.contains_key(name)
                && flavor_has_gpu_quota(&value, name)
            {
                seen.ever_quota.insert(name.to_owned());
                let track = seen.clusters.entry(name.to_owned()).or_default();
                track.quota.get_or_insert(at);
            }
        }
    }
    seen.queue = Some(value);
}

/// Marks `track` done at `at` when its latest object and `queue` say it converged.
fn judge(track: &mut Track, name: &str, queue: Option<&Value>, at: Timestamp) {
    if track.done.is_some() {
        return;
    }
    let Some(cluster) = &track.latest else {
        return;
    };
    if let Some(done) = done(cluster, name, queue) {
        track.done = Some((at, done));
    }
}

fn condition<'a>(
    c: &'a FournosCluster,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|x| x.type_ == type_)
}

/// Discovery's part is done: `Valid`, GPUs counted, `GpuDiscovered=True`.
pub fn discovered(c: &FournosCluster) -> bool {
    c.status.as_ref().is_some_and(|s| {
        s.kubeconfig_status == Some(KubeconfigStatus::Valid)
            && s.hardware.as_ref().is_some_and(|h| h.total_gpus > 0)
    }) && condition(c, GPU_DISCOVERED).is_some_and(|k| k.status == "True")
}

/// Discovered, and either with GPU quota in the queue and `KueueSynced=True`, or with a
/// final `KueueSynced=False` answer.
pub fn done(c: &FournosCluster, name: &str, queue: Option<&Value>) -> Option<Done> {
    if !discovered(c) {
        return None;
    }
    let synced = condition(c, KUEUE_SYNCED)?;
    if synced.status == "True" && queue.is_some_and(|q| flavor_has_gpu_quota(q, name)) {
        return Some(Done::Quota);
    }
    (synced.status == "False" && FINAL_REFUSALS.contains(&synced.reason.as_str()))
        .then(|| Done::Refused(synced.reason.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_taken_back_is_a_true_followed_by_a_final_refusal() {
        let history = |h: &[(&str, &str)]| Track {
            synced_history: h
                .iter()
                .map(|(s, r)| ((*s).to_owned(), (*r).to_owned()))
                .collect(),
            ..Track::default()
        };
        assert!(!history(&[("False", "WaitingForDiscovery"), ("True", "Synced")]).lost_quota());
        assert!(!history(&[("False", "LimitReached")]).lost_quota());
        assert!(history(&[("True", "Synced"), ("False", "LimitReached")]).lost_quota());
        assert!(!history(&[("True", "Synced"), ("False", "Drained")]).lost_quota());
    }
}
