//! End-to-end tests of who gets a place in the ClusterQueue, on the local control plane
//! (a real kube-apiserver and a real Kueue, no mocks): only what discovery counted, and
//! quota once given stays.
//!
//! As in `kueue_sync.rs`, each test isolates itself (own namespaces, own ClusterQueue,
//! cluster names unique to the test; see the `hearth_e2e` crate docs), runs its own
//! kueue-sync process as the chart's ServiceAccount, and plays hearth-discovery: it writes
//! `status.kubeconfigStatus` and `status.hardware` of its FournosClusters itself. Every
//! wait polls with a deadline; nothing sleeps to synchronise.
//!
//! Run: `cargo test -p hearth-e2e --test kueue_sync_places` (needs a plane of its own, not
//! an attached one, since the controllers run under the plane's supervisor).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result, ensure};
use futures::StreamExt;
use hearth_api::kueue::ClusterQueue;
use hearth_api::names::{CLUSTER_NAMESPACE_LABEL, CLUSTER_NODE_LABEL, CLUSTER_SLOT_RESOURCE};
use hearth_api::{FournosCluster, FournosClusterSpec, GpuInfo, Hardware};
use hearth_e2e::downstream::{DEADLINE, discover, gpu, onboard, synced, wait_reason, write_status};
use hearth_e2e::hearth::{self, Controller, Running};
use hearth_e2e::invariants::kueue_problems;
use hearth_e2e::kueue_sync::{gpu_resource, quota_of, slot_group};
use hearth_e2e::objects::KUEUE_API_VERSION;
use hearth_e2e::resources::apply;
use hearth_e2e::world::World;
use hearth_e2e::{ControlPlane, Isolated};
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

/// Leaves room for only `room` of Hearth's entries in the scope's ClusterQueue: the rest of
/// Kueue's 64 flavors in the slot group are a platform team's (GitOps) flavors, which
/// Hearth never evicts. The same limit as 64 clusters, for the price of a few objects.
async fn leave_room(k: &World<'_>, room: usize) -> Result<()> {
    let names: Vec<String> = (0..64 - room)
        .map(|i| k.scope.cluster(&format!("gitops{i:02}")))
        .collect();
    let created: Vec<Result<()>> = futures::stream::iter(&names)
        .map(|name| hearth_e2e::takeover::foreign_flavor(&k.client, name))
        .buffer_unordered(8)
        .collect()
        .await;
    created.into_iter().collect::<Result<Vec<()>>>()?;
    let flavors: Vec<Value> = names
        .iter()
        .map(|name| {
            json!({"name": name,
                   "resources": [{"name": CLUSTER_SLOT_RESOURCE, "nominalQuota": "1"}]})
        })
        .collect();
    k.patch_queue(&json!({"spec": {"resourceGroups": [{
        "coveredResources": [CLUSTER_SLOT_RESOURCE],
        "flavors": flavors,
    }]}}))
    .await?;
    Ok(())
}

/// Creates FournosCluster `name` as a person may: any `spec.hardware` they like, and no
/// Secret behind `spec.kubeconfigSecret`.
async fn create_by_hand(
    clusters: &Api<FournosCluster>,
    name: &str,
    spec_gpus: &[GpuInfo],
) -> Result<()> {
    let hardware = (!spec_gpus.is_empty()).then(|| Hardware {
        gpus: spec_gpus.to_vec(),
        total_gpus: spec_gpus.iter().map(|g| g.count).sum(),
        ..Hardware::default()
    });
    let cluster = FournosCluster::new(
        name,
        FournosClusterSpec {
            kubeconfig_secret: format!("kubeconfig-{name}"),
            hardware,
            ..FournosClusterSpec::default()
        },
    );
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .with_context(|| format!("creating FournosCluster {name}"))?;
    Ok(())
}

/// Hearth's entries in the scope's queue, not the GitOps ones `leave_room` made.
fn hearth_flavors_in(cq: &ClusterQueue, scope: &Isolated) -> BTreeSet<String> {
    let gitops = scope.cluster("gitops");
    let gitops_suffix = gitops.trim_start_matches("gitops");
    cq.spec
        .resource_groups
        .iter()
        .flat_map(|g| &g.flavors)
        .map(|f| f.name.clone())
        .filter(|name| !(name.starts_with("gitops") && name.ends_with(gitops_suffix)))
        .collect()
}

/// Only discovery publishes hardware: a FournosCluster whose `spec.hardware` claims GPUs
/// (anyone who may edit a FournosCluster can write it), reported `Valid` with GPUs in
/// `status.hardware` but never counted by discovery (no `lastDiscovery`, as when RBAC
/// forbids listing the target's nodes), gets no queue entry and adds no covered resource;
/// once discovery counts it, what it counted is the quota, never what spec says.
#[tokio::test]
async fn a_cluster_discovery_never_counted_publishes_nothing_whatever_its_spec_says() -> Result<()>
{
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("ks_forged").await?;
    let k = World::new(plane, scope.clone()).await?;
    let (real, forged) = (scope.cluster("real"), scope.cluster("forged"));
    onboard(&k.clusters, &real, &[gpu("a100", 1)]).await?;
    create_by_hand(&k.clusters, &forged, &[gpu("h200", 64)]).await?;
    write_status(&k.clusters, &forged, "Valid", &[gpu("mi300x", 8)], false).await?;
    let ks = hearth::start(plane, &scope, Controller::KueueSync, "main", &[]).await?;

    wait_reason(&k.clusters, &real, "Synced", &ks).await?;
    let cluster = wait_reason(&k.clusters, &forged, "WaitingForDiscovery", &ks).await?;
    let (status, _, message) = synced(&cluster).unwrap();
    assert_eq!(status, "False");
    assert!(message.contains("spec.hardware is not read"), "{message}");
    assert_eq!(cluster.status.and_then(|s| s.kueue), None);
    // The status describes the queue as written before it: no entry, nothing covered.
    let mut expected = BTreeMap::from([(real.clone(), quota_of(&[gpu("a100", 1)]))]);
    let cq = k
        .wait_entries("only the counted cluster published", &ks, &expected)
        .await?;
    assert_eq!(
        slot_group(&cq).context("a slot group")?.covered_resources,
        [CLUSTER_SLOT_RESOURCE.to_owned(), gpu_resource("a100")]
    );

    // Discovery counts it: its count is the quota; spec.hardware's h200 never shows.
    discover(&k.clusters, &forged, "Valid", &[gpu("mi300x", 8)]).await?;
    expected.insert(forged.clone(), quota_of(&[gpu("mi300x", 8)]));
    let cq = k
        .wait_entries("the counted GPUs published", &ks, &expected)
        .await?;
    assert_eq!(
        slot_group(&cq).context("a slot group")?.covered_resources,
        [
            CLUSTER_SLOT_RESOURCE.to_owned(),
            gpu_resource("a100"),
            gpu_resource("mi300x")
        ]
    );
    wait_reason(&k.clusters, &forged, "Synced", &ks).await?;
    Ok(ks.stop_cleanly(plane).await?)
}

/// FournosClusters made by hand without a Secret (never probed, never counted), more of
/// them than there is room for and all older, take no place: a cluster discovery counts
/// later gets its quota.
#[tokio::test]
async fn never_counted_clusters_do_not_starve_a_counted_one() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("ks_starve").await?;
    let k = World::new(plane, scope.clone()).await?;
    leave_room(&k, 2).await?;
    let fakes: Vec<String> = (0..4).map(|i| scope.cluster(&format!("fake{i}"))).collect();
    for fake in &fakes {
        create_by_hand(&k.clusters, fake, &[]).await?;
    }
    let ks = hearth::start(plane, &scope, Controller::KueueSync, "main", &[]).await?;
    for fake in &fakes {
        wait_reason(&k.clusters, fake, "WaitingForDiscovery", &ks).await?;
    }

    let real = scope.cluster("real");
    onboard(&k.clusters, &real, &[gpu("a100", 2)]).await?;
    let cluster = wait_reason(&k.clusters, &real, "Synced", &ks).await?;
    assert_eq!(
        cluster.status.and_then(|s| s.kueue).map(|k| k.quotas),
        Some(quota_of(&[gpu("a100", 2)]))
    );
    let cq = k.queue().await?;
    assert_eq!(
        hearth_flavors_in(&cq, &scope),
        BTreeSet::from([real.clone()])
    );
    assert!(kueue_problems(&cq).is_empty(), "{:?}", kueue_problems(&cq));
    for fake in &fakes {
        let (_, reason, _) = synced(&k.clusters.get(fake).await?).unwrap();
        assert_eq!(reason, "WaitingForDiscovery", "{fake}");
    }
    Ok(ks.stop_cleanly(plane).await?)
}

/// What a watch saw of each cluster's `KueueSynced` reason, in order (repeats dropped),
/// and whether it ever had `status.kueue`.
#[derive(Default)]
struct SyncHistory {
    reasons: BTreeMap<String, Vec<String>>,
}

impl SyncHistory {
    /// Records every FournosCluster of `clusters` from a watch started (and synced) now.
    async fn record(
        clusters: Api<FournosCluster>,
    ) -> Result<(Arc<Mutex<SyncHistory>>, tokio::task::JoinHandle<()>)> {
        let history = Arc::new(Mutex::new(SyncHistory::default()));
        let (synced_tx, mut synced_rx) = tokio::sync::mpsc::channel(1);
        let seen = history.clone();
        let task = tokio::spawn(async move {
            let events = watcher::watcher(clusters, watcher::Config::default());
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => drop(synced_tx.send(()).await),
                    Ok(watcher::Event::Apply(fc) | watcher::Event::InitApply(fc)) => {
                        let Some((_, reason, _)) = synced(&fc) else {
                            continue;
                        };
                        let name = fc.metadata.name.clone().unwrap_or_default();
                        let mut seen = seen.lock().unwrap();
                        let reasons = seen.reasons.entry(name).or_default();
                        if reasons.last() != Some(&reason) {
                            reasons.push(reason);
                        }
                    }
                    _ => {}
                }
            }
        });
        tokio::time::timeout(DEADLINE, synced_rx.recv())
            .await
            .context("the FournosCluster watch did not sync")?;
        Ok((history, task))
    }

    /// Clusters that were ever `Synced`.
    fn ever_synced(&self) -> BTreeSet<String> {
        self.reasons
            .iter()
            .filter(|(_, r)| r.iter().any(|r| r == "Synced"))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Clusters that went from `Synced` to `LimitReached` at some point, with their history.
    fn displaced(&self) -> BTreeMap<String, Vec<String>> {
        self.reasons
            .iter()
            .filter(|(_, r)| {
                r.iter()
                    .position(|r| r == "Synced")
                    .is_some_and(|first| r[first..].iter().any(|r| r == "LimitReached"))
            })
            .map(|(name, r)| (name.clone(), r.clone()))
            .collect()
    }
}

/// Creates `names` at once (concurrently), each counted as discovery gets to it.
async fn onboard_at_once(k: &World<'_>, names: &[String], gpus: &[GpuInfo]) -> Result<()> {
    let onboarded: Vec<Result<()>> = futures::stream::iter(names)
        .map(|name| onboard(&k.clusters, name, gpus))
        .buffer_unordered(names.len().max(1))
        .collect()
        .await;
    onboarded.into_iter().collect::<Result<Vec<()>>>()?;
    Ok(())
}

/// Waits until every one of `names` has its answer: `Synced` for those the queue lists,
/// `LimitReached` for the others, with `room` of them listed. Returns those listed.
async fn wait_settled(
    k: &World<'_>,
    ks: &Running,
    names: &[String],
    room: usize,
) -> Result<BTreeSet<String>> {
    ks.until(
        "every cluster answered, the room filled",
        DEADLINE,
        || async {
            let held = hearth_flavors_in(&k.queue().await?, &k.scope);
            let mut waiting = Vec::new();
            for name in names {
                let reason = synced(&k.clusters.get(name).await?).map(|s| s.1);
                let want = if held.contains(name) {
                    "Synced"
                } else {
                    "LimitReached"
                };
                if reason.as_deref() != Some(want) {
                    waiting.push(format!("{name}: {reason:?}, want {want}"));
                }
            }
            Ok(if held.len() == room && waiting.is_empty() {
                Ok(held)
            } else {
                Err(format!("held {held:?}; {waiting:?}"))
            })
        },
    )
    .await
}

/// Quota, once given, stays, whatever order clusters arrive and become candidates in. With
/// room for 4, twenty clusters are onboarded at once while kueue-sync is down: the ten
/// younger ones' flavors exist already (they were published before); the ten older ones,
/// which sort earlier, have none yet. Places do not depend on flavors: the four oldest
/// reserve theirs while their flavors are created, and none of the younger ones gets an
/// entry in between. Then, with kueue-sync running, ten more arrive at once. A watch
/// records every cluster's `KueueSynced`: no cluster ever goes from having quota to
/// `LimitReached`, exactly as many clusters ever had quota as fit (the ones in the queue at
/// the end), and those waiting are told who holds the places.
#[tokio::test]
async fn quota_once_given_stays_while_many_clusters_arrive_at_once() -> Result<()> {
    const ROOM: usize = 4;
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("ks_stable").await?;
    let k = World::new(plane, scope.clone()).await?;
    leave_room(&k, ROOM).await?;
    let (history, watch) = SyncHistory::record(k.clusters.clone()).await?;
    let named = |prefix: &str| -> Vec<String> {
        (0..10)
            .map(|i| scope.cluster(&format!("{prefix}{i:02}")))
            .collect()
    };
    let (older, younger, later) = (named("a"), named("b"), named("c"));
    let gpus = [gpu("a100", 1)];

    onboard_at_once(&k, &older, &gpus).await?;
    onboard_at_once(&k, &younger, &gpus).await?;
    for name in &younger {
        apply(
            &k.client,
            &json!({
                "apiVersion": KUEUE_API_VERSION, "kind": "ResourceFlavor",
                "metadata": {"name": name, "labels": {
                    "app.kubernetes.io/managed-by": "hearth",
                    CLUSTER_NAMESPACE_LABEL: scope.namespace,
                }},
                "spec": {"nodeLabels": {CLUSTER_NODE_LABEL: name}},
            }),
        )
        .await?;
    }
    let ks = hearth::start(plane, &scope, Controller::KueueSync, "main", &[]).await?;
    let first: Vec<String> = older.iter().chain(&younger).cloned().collect();
    let holders = wait_settled(&k, &ks, &first, ROOM).await?;
    let mut by_age = Vec::new();
    for name in &first {
        let created = k.clusters.get(name).await?.metadata.creation_timestamp;
        by_age.push((created.map(|t| t.0), name.clone()));
    }
    by_age.sort();
    let oldest: BTreeSet<String> = by_age.into_iter().take(ROOM).map(|(_, n)| n).collect();
    ensure!(
        holders == oldest,
        "the places went to {holders:?}, not to the {ROOM} oldest {oldest:?}"
    );

    onboard_at_once(&k, &later, &gpus).await?;
    let all: Vec<String> = first.iter().chain(&later).cloned().collect();
    let holders_now = wait_settled(&k, &ks, &all, ROOM).await?;
    ensure!(
        holders_now == holders,
        "the places moved from {holders:?} to {holders_now:?}"
    );
    // Whatever the watch has yet to deliver of the answers.
    ks.until("the watch to see the answers", DEADLINE, || async {
        let seen = history.lock().unwrap();
        let behind: Vec<&String> = all
            .iter()
            .filter(|n| {
                let want = if holders.contains(*n) {
                    "Synced"
                } else {
                    "LimitReached"
                };
                seen.reasons
                    .get(*n)
                    .and_then(|r| r.last())
                    .map(String::as_str)
                    != Some(want)
            })
            .collect();
        Ok(if behind.is_empty() {
            Ok(())
        } else {
            Err(format!("{behind:?} in {:?}", seen.reasons))
        })
    })
    .await?;
    watch.abort();

    let (displaced, ever) = {
        let seen = history.lock().unwrap();
        (seen.displaced(), seen.ever_synced())
    };
    ensure!(
        displaced.is_empty(),
        "clusters lost the quota they had: {displaced:?}"
    );
    ensure!(
        ever == holders,
        "{} clusters ever had quota ({ever:?}), room for {ROOM}; holding now: {holders:?}",
        ever.len()
    );
    // Those waiting are told who holds the places.
    for name in all.iter().filter(|n| !holders.contains(*n)) {
        let (_, _, message) = synced(&k.clusters.get(name).await?).unwrap();
        ensure!(
            message.contains(&format!("{ROOM} of clusters that have their place (")),
            "{name}: {message}"
        );
    }
    Ok(ks.stop_cleanly(plane).await?)
}
