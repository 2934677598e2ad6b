//! End-to-end tests of hearth-kueue-sync on the local control plane: a real kube-apiserver
//! and a real Kueue admitting Workloads, no mocks.
//!
//! Each test isolates itself (own namespaces, own ClusterQueue, cluster names unique to the
//! test; see the `hearth_e2e` crate docs) and runs its own kueue-sync process, built from
//! this workspace and started by the plane as the chart's ServiceAccount (so the chart's
//! RBAC is tested too). The tests play hearth-discovery: they write `status.kubeconfigStatus` and
//! `status.hardware` (with `lastDiscovery`, the mark of a cluster discovery has counted) of
//! their FournosClusters themselves, under a field manager of their own, so they do not
//! depend on discovery. Every wait polls with a deadline; nothing
//! sleeps to synchronise.
//!
//! Run: `cargo test -p hearth-e2e --test kueue_sync` (the e2e kit builds the controllers
//! first unless `HEARTH_E2E_NO_BUILD` is set; needs a plane of its own, not an attached one, since the
//! controllers run under the plane's supervisor).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result, bail, ensure};
use futures::StreamExt;
use hearth_api::kueue::{ClusterQueue, FlavorQuotas, ResourceGroup, ResourceQuota};
use hearth_api::names::{CLUSTER_NAMESPACE_LABEL, CLUSTER_NODE_LABEL, CLUSTER_SLOT_RESOURCE};
use hearth_api::{FournosCluster, FournosClusterSpec, GpuInfo, Hardware, KueueStatus};
use hearth_e2e::fixtures::{KUEUE_API_VERSION, cluster_queue};
use hearth_e2e::hearth::{self, Controller, Running, metric_sum};
use hearth_e2e::invariants::{entry, is_active, kueue_problems, nonzero};
use hearth_e2e::objects;
use hearth_e2e::process::until;
use hearth_e2e::published::{
    DEADLINE, discover, gpu, onboard, synced, wait_admitted, wait_event, wait_pending, wait_reason,
    workload_condition, write_status,
};
use hearth_e2e::resources::apply;
use hearth_e2e::world::World;
use hearth_e2e::{ControlPlane, Isolated, Target};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

/// `fournos/cluster-slot` per cluster (the default).
const SLOTS: i64 = 100;

// ---------------------------------------------------------------------------------------
// The controller under test, as a process.
// ---------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// FournosClusters, as a person and hearth-discovery make them.
// ---------------------------------------------------------------------------------------

/// GPU short names of the emulated fleet's models (what discovery computes).
fn short_name(model: &str) -> &'static str {
    match model {
        "NVIDIA-A100-SXM4-80GB" => "a100",
        "NVIDIA-H200-SXM-141GB" => "h200",
        "NVIDIA-L40S" => "l40s",
        "AMD_Instinct_MI300X" => "mi300x",
        "NVIDIA-L4" => "l4",
        other => panic!("no short name for {other}"),
    }
}

/// What discovery reports for `target`: schedulable GPUs per model.
fn discovered_gpus(target: &Target) -> Vec<GpuInfo> {
    let fleet = target.fleet();
    let mut gpus: Vec<GpuInfo> = fleet
        .schedulable_gpus()
        .into_iter()
        .map(|((vendor, model), count)| GpuInfo {
            vendor: format!("{vendor:?}").to_uppercase(),
            short_name: short_name(&model).to_owned(),
            node_count: fleet
                .nodes
                .iter()
                .filter(|n| n.counts_toward_quota())
                .filter(|n| n.gpus.as_ref().is_some_and(|g| g.model == model))
                .count() as i32,
            model,
            count: i64::from(count),
            driver_versions: Vec::new(),
        })
        .collect();
    gpus.sort_by(|a, b| a.short_name.cmp(&b.short_name));
    gpus
}

/// The quota kueue-sync should publish for `gpus`: slots and one resource per model.
fn quota_of(gpus: &[GpuInfo]) -> BTreeMap<String, i64> {
    let mut quota = BTreeMap::from([(CLUSTER_SLOT_RESOURCE.to_owned(), SLOTS)]);
    for g in gpus {
        *quota.entry(gpu_resource(&g.short_name)).or_default() += g.count;
    }
    quota
}

fn gpu_resource(short: &str) -> String {
    format!("fournos/gpu-{short}")
}

// ---------------------------------------------------------------------------------------
// Kueue objects.
// ---------------------------------------------------------------------------------------

fn slot_group(cq: &ClusterQueue) -> Option<&ResourceGroup> {
    cq.spec.resource_groups.iter().find(|g| {
        g.covered_resources
            .iter()
            .any(|r| r == CLUSTER_SLOT_RESOURCE)
    })
}

/// Waits until the ClusterQueue satisfies `check` (`Err(why)` while it does not).
async fn wait_queue(
    queues: &Api<ClusterQueue>,
    name: &str,
    what: &str,
    log: &Running,
    check: impl Fn(&ClusterQueue) -> std::result::Result<(), String>,
) -> Result<ClusterQueue> {
    log.until(what, DEADLINE, || async {
        Ok(match queues.get_opt(name).await? {
            None => Err(format!("ClusterQueue {name} does not exist")),
            Some(cq) => check(&cq).map(|()| cq),
        })
    })
    .await
}

/// The check that Hearth's entries in the queue are exactly `expected` (flavor → nonzero
/// quota), the queue is valid for Kueue, and its `coveredResources` sorted.
fn hearth_entries_are(
    expected: &BTreeMap<String, BTreeMap<String, i64>>,
    foreign: &[&str],
) -> impl Fn(&ClusterQueue) -> std::result::Result<(), String> {
    let expected = expected.clone();
    let foreign: BTreeSet<String> = foreign.iter().map(|s| s.to_string()).collect();
    move |cq| {
        let problems = kueue_problems(cq);
        if !problems.is_empty() {
            return Err(format!("invalid for Kueue: {problems:?}"));
        }
        let found: BTreeMap<String, BTreeMap<String, i64>> = cq
            .spec
            .resource_groups
            .iter()
            .flat_map(|g| &g.flavors)
            .filter(|f| !foreign.contains(&f.name))
            .map(|f| {
                (
                    f.name.clone(),
                    nonzero(entry(cq, &f.name).unwrap_or_default()),
                )
            })
            .collect();
        if found != expected {
            return Err(format!("entries {found:?}, want {expected:?}"));
        }
        if let Some(group) = slot_group(cq) {
            let mut sorted = group.covered_resources.clone();
            sorted.sort();
            if sorted != group.covered_resources {
                return Err(format!(
                    "coveredResources not sorted: {:?}",
                    group.covered_resources
                ));
            }
        }
        Ok(())
    }
}

/// A bare Workload of the scope asking for `requests` on `cluster`.
fn workload(scope: &Isolated, name: &str, cluster: &str, requests: &[(&str, i64)]) -> Value {
    objects::workload(
        &scope.execution_namespace,
        name,
        &scope.local_queue,
        cluster,
        requests,
    )
}

// ---------------------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------------------

/// The fleet is published (flavor per cluster, one entry per cluster, the union of GPU
/// resources covered, status and Event on each cluster), and the real Kueue admits a job on
/// the cluster it names and refuses one that asks for more A100s than that cluster has.
#[tokio::test]
async fn published_quota_admits_on_the_cluster_flavor_and_refuses_more_than_it_has() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("ks_admission").await?;
    let k = World::new(plane, scope.clone()).await?;
    let targets = plane.targets();
    let (a, b) = (scope.cluster("a"), scope.cluster("b"));
    let (gpus_a, gpus_b) = (discovered_gpus(&targets[0]), discovered_gpus(&targets[1]));
    onboard(&k.clusters, &a, &gpus_a).await?;
    onboard(&k.clusters, &b, &gpus_b).await?;
    let ks = hearth::start(plane, &scope, Controller::KueueSync, "main", &[]).await?;

    let expected = BTreeMap::from([
        (a.clone(), quota_of(&gpus_a)),
        (b.clone(), quota_of(&gpus_b)),
    ]);
    assert_eq!(
        expected[&a][&gpu_resource("a100")],
        8,
        "the fleet table changed"
    );
    let cq = wait_queue(
        &k.queues,
        &scope.cluster_queue,
        "both clusters published",
        &ks,
        hearth_entries_are(&expected, &[]),
    )
    .await?;
    let group = slot_group(&cq).context("a slot group")?;
    let mut union: BTreeSet<String> = expected.values().flat_map(|q| q.keys().cloned()).collect();
    union.insert(CLUSTER_SLOT_RESOURCE.into());
    assert_eq!(
        group.covered_resources,
        union.into_iter().collect::<Vec<_>>()
    );
    // Zero for what a cluster does not have: a's entry lists b's models too.
    assert_eq!(entry(&cq, &a).unwrap()[&gpu_resource("h200")], 0);

    for (name, gpus) in [(&a, &gpus_a), (&b, &gpus_b)] {
        let flavor = k.flavors.get(name).await?;
        assert_eq!(flavor.spec.node_labels.get(CLUSTER_NODE_LABEL), Some(name));
        assert_eq!(
            flavor
                .metadata
                .labels
                .unwrap_or_default()
                .get("app.kubernetes.io/managed-by"),
            Some(&"hearth".to_owned())
        );
        let cluster = wait_reason(&k.clusters, name, "Synced", &ks).await?;
        let (status, _, message) = synced(&cluster).unwrap();
        assert_eq!(status, "True");
        assert!(message.contains(&scope.cluster_queue), "{message}");
        assert_eq!(
            cluster.status.unwrap().kueue,
            Some(KueueStatus {
                flavor: name.clone(),
                cluster_queue: scope.cluster_queue.clone(),
                quotas: quota_of(gpus),
                cluster_slots: SLOTS,
            })
        );
        let event = wait_event(&k.client, &scope.namespace, name, "QuotaPublished").await?;
        assert_eq!(event.type_.as_deref(), Some("Normal"));
    }
    let cq = wait_queue(&k.queues, &scope.cluster_queue, "queue Active", &ks, |cq| {
        is_active(cq)
            .then_some(())
            .ok_or_else(|| format!("{:?}", cq.status))
    })
    .await?;
    drop(cq);

    // Kueue admits 4 A100 and one slot on a, on a's flavor.
    let a100 = gpu_resource("a100");
    apply(
        &k.client,
        &workload(
            &scope,
            "fits",
            &a,
            &[(CLUSTER_SLOT_RESOURCE, 1), (&a100, 4)],
        ),
    )
    .await?;
    let flavors = wait_admitted(&k.workloads, "fits").await?;
    assert_eq!(flavors.get(&a100), Some(&a));
    assert_eq!(flavors.get(CLUSTER_SLOT_RESOURCE), Some(&a));

    // More A100s than a has: pending, and Kueue says why.
    apply(
        &k.client,
        &workload(
            &scope,
            "too-many",
            &a,
            &[(CLUSTER_SLOT_RESOURCE, 1), (&a100, 9)],
        ),
    )
    .await?;
    let message = wait_pending(
        &k.workloads,
        "too-many",
        &[
            &format!("insufficient quota for {a100} in flavor {a}"),
            "maximum capacity (8)",
        ],
    )
    .await?;
    eprintln!("Kueue on too-many: {message}");

    Ok(ks.stop_cleanly(plane).await?)
}

/// A cluster whose kubeconfig stops working keeps its flavor and entry at zero quota: the
/// real Kueue admits nothing new there until the kubeconfig is Valid again.
#[tokio::test]
async fn a_drained_cluster_admits_nothing_new_until_it_is_valid_again() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("ks_drain").await?;
    let k = World::new(plane, scope.clone()).await?;
    let a = scope.cluster("a");
    let gpus = discovered_gpus(&plane.targets()[0]);
    onboard(&k.clusters, &a, &gpus).await?;
    let ks = hearth::start(plane, &scope, Controller::KueueSync, "main", &[]).await?;
    wait_reason(&k.clusters, &a, "Synced", &ks).await?;
    let a100 = gpu_resource("a100");
    apply(
        &k.client,
        &workload(
            &scope,
            "before",
            &a,
            &[(CLUSTER_SLOT_RESOURCE, 1), (&a100, 4)],
        ),
    )
    .await?;
    wait_admitted(&k.workloads, "before").await?;

    discover(&k.clusters, &a, "Unauthorized", &gpus).await?;
    let cluster = wait_reason(&k.clusters, &a, "Drained", &ks).await?;
    let (status, _, message) = synced(&cluster).unwrap();
    assert_eq!(status, "False");
    assert!(
        message.contains("Unauthorized") && message.contains(&format!("kubeconfig-{a}")),
        "{message}"
    );
    assert_eq!(
        cluster.status.unwrap().kueue.map(|k| k.quotas),
        Some(quota_of(&gpus).into_keys().map(|r| (r, 0)).collect())
    );
    let cq = wait_queue(
        &k.queues,
        &scope.cluster_queue,
        "a's entry at zero",
        &ks,
        |cq| match entry(cq, &a) {
            Some(q) if q.values().all(|n| *n == 0) && is_active(cq) => Ok(()),
            other => Err(format!("{other:?}, active {}", is_active(cq))),
        },
    )
    .await?;
    assert!(
        entry(&cq, &a).unwrap().contains_key(&a100),
        "the model stays covered"
    );
    assert!(k.flavors.get_opt(&a).await?.is_some(), "the flavor stays");
    let event = wait_event(&k.client, &scope.namespace, &a, "Drained").await?;
    assert_eq!(event.type_.as_deref(), Some("Warning"));

    apply(
        &k.client,
        &workload(
            &scope,
            "while-drained",
            &a,
            &[(CLUSTER_SLOT_RESOURCE, 1), (&a100, 1)],
        ),
    )
    .await?;
    let message = wait_pending(
        &k.workloads,
        "while-drained",
        &[
            "insufficient quota",
            &format!("in flavor {a}"),
            "maximum capacity (0)",
        ],
    )
    .await?;
    eprintln!("Kueue on while-drained: {message}");
    // Draining stops new admissions; what runs there already is not evicted.
    let before = k.workloads.get("before").await?;
    assert_eq!(
        workload_condition(&before, "Admitted").map(|(s, _, _)| s),
        Some("True".to_owned()),
        "{:?}",
        before.status
    );

    discover(&k.clusters, &a, "Valid", &gpus).await?;
    wait_reason(&k.clusters, &a, "Synced", &ks).await?;
    let flavors = wait_admitted(&k.workloads, "while-drained").await?;
    assert_eq!(flavors.get(&a100), Some(&a));
    Ok(ks.stop_cleanly(plane).await?)
}

/// Deleting a FournosCluster takes its entry out of the ClusterQueue first and deletes its
/// ResourceFlavor only after that; the queue stays Active, the other cluster keeps its
/// entry, and a GPU model nobody has any more leaves `coveredResources`.
#[tokio::test]
async fn deleting_a_cluster_removes_its_entry_then_its_flavor_and_the_queue_stays_active()
-> Result<()> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("ks_delete").await?;
    let k = World::new(plane, scope.clone()).await?;
    let targets = plane.targets();
    let (a, b) = (scope.cluster("a"), scope.cluster("b"));
    let (gpus_a, gpus_b) = (discovered_gpus(&targets[0]), discovered_gpus(&targets[1]));
    onboard(&k.clusters, &a, &gpus_a).await?;
    onboard(&k.clusters, &b, &gpus_b).await?;
    // A flavor of a Hearth in another namespace: not this one's to sweep.
    let staging = scope.cluster("staging");
    apply(
        &k.client,
        &json!({
            "apiVersion": KUEUE_API_VERSION,
            "kind": "ResourceFlavor",
            "metadata": {"name": staging, "labels": {
                "app.kubernetes.io/managed-by": "hearth",
                CLUSTER_NAMESPACE_LABEL: format!("staging-{}", scope.id),
            }},
            "spec": {"nodeLabels": {CLUSTER_NODE_LABEL: staging}},
        }),
    )
    .await?;
    let ks = hearth::start(plane, &scope, Controller::KueueSync, "main", &[]).await?;
    let both = BTreeMap::from([
        (a.clone(), quota_of(&gpus_a)),
        (b.clone(), quota_of(&gpus_b)),
    ]);
    wait_queue(
        &k.queues,
        &scope.cluster_queue,
        "both published",
        &ks,
        hearth_entries_are(&both, &[]),
    )
    .await?;
    let own = k.flavors.get(&a).await?.metadata.labels.unwrap_or_default();
    assert_eq!(own.get(CLUSTER_NAMESPACE_LABEL), Some(&scope.namespace));

    // Record, in etcd order, when the entry leaves the queue and when the flavor starts
    // being deleted.
    let order = DeletionOrder::watch(&k, &scope.cluster_queue, &a).await?;
    k.clusters.delete(&a, &DeleteParams::default()).await?;

    let only_b = BTreeMap::from([(b.clone(), quota_of(&gpus_b))]);
    let cq = wait_queue(
        &k.queues,
        &scope.cluster_queue,
        "a's entry removed",
        &ks,
        hearth_entries_are(&only_b, &[]),
    )
    .await?;
    ks.until("a's flavor deleted", DEADLINE, || async {
        Ok(match k.flavors.get_opt(&a).await? {
            None => Ok(()),
            Some(f) => Err(format!("still there: {:?}", f.metadata)),
        })
    })
    .await?;
    let (entry_gone, flavor_deleting) = order.result(&ks).await?;
    assert!(
        k.flavors.get_opt(&staging).await?.is_some(),
        "another Hearth's flavor was swept"
    );
    ensure!(
        entry_gone < flavor_deleting,
        "the flavor was deleted (resourceVersion {flavor_deleting}) before its entry left the \
         queue (resourceVersion {entry_gone})"
    );
    let covered = &slot_group(&cq).unwrap().covered_resources;
    assert!(!covered.contains(&gpu_resource("a100")), "{covered:?}");
    wait_queue(&k.queues, &scope.cluster_queue, "queue Active", &ks, |cq| {
        is_active(cq)
            .then_some(())
            .ok_or_else(|| format!("{:?}", cq.status))
    })
    .await?;
    Ok(ks.stop_cleanly(plane).await?)
}

/// The resourceVersions at which the ClusterQueue first lists no entry for a flavor and
/// the flavor first carries a deletionTimestamp (or is gone), from watches started before
/// the deletion. On one etcd these versions are ordered.
struct DeletionOrder {
    entry_gone: Arc<Mutex<Option<u64>>>,
    flavor_deleting: Arc<Mutex<Option<u64>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl DeletionOrder {
    async fn watch(k: &World<'_>, queue: &str, flavor: &str) -> Result<DeletionOrder> {
        let entry_gone = Arc::new(Mutex::new(None));
        let flavor_deleting = Arc::new(Mutex::new(None));
        let (synced_tx, mut synced_rx) = tokio::sync::mpsc::channel(2);
        let rv = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            m.resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        };

        let (name, found, tx) = (flavor.to_owned(), entry_gone.clone(), synced_tx.clone());
        let queues = watcher::watcher(
            k.queues.clone(),
            watcher::Config::default().fields(&format!("metadata.name={queue}")),
        );
        let queue_task = tokio::spawn(async move {
            let mut queues = std::pin::pin!(queues);
            while let Some(event) = queues.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => drop(tx.send(()).await),
                    Ok(watcher::Event::Apply(cq)) if entry(&cq, &name).is_none() => {
                        found
                            .lock()
                            .unwrap()
                            .get_or_insert(rv(&cq.metadata).unwrap_or(0));
                    }
                    _ => {}
                }
            }
        });
        let found = flavor_deleting.clone();
        let flavors = watcher::watcher(
            k.flavors.clone(),
            watcher::Config::default().fields(&format!("metadata.name={flavor}")),
        );
        let flavor_task = tokio::spawn(async move {
            let mut flavors = std::pin::pin!(flavors);
            while let Some(event) = flavors.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => drop(synced_tx.send(()).await),
                    Ok(watcher::Event::Apply(f)) if f.metadata.deletion_timestamp.is_some() => {
                        found
                            .lock()
                            .unwrap()
                            .get_or_insert(rv(&f.metadata).unwrap_or(0));
                    }
                    Ok(watcher::Event::Delete(f)) => {
                        found
                            .lock()
                            .unwrap()
                            .get_or_insert(rv(&f.metadata).unwrap_or(0));
                    }
                    _ => {}
                }
            }
        });
        for _ in 0..2 {
            tokio::time::timeout(DEADLINE, synced_rx.recv())
                .await
                .context("watches did not sync")?;
        }
        Ok(DeletionOrder {
            entry_gone,
            flavor_deleting,
            tasks: vec![queue_task, flavor_task],
        })
    }

    async fn result(self, log: &Running) -> Result<(u64, u64)> {
        let result = log
            .until(
                "both deletion steps seen by the watches",
                DEADLINE,
                || async {
                    let entry = *self.entry_gone.lock().unwrap();
                    let flavor = *self.flavor_deleting.lock().unwrap();
                    Ok(match (entry, flavor) {
                        (Some(e), Some(f)) => Ok((e, f)),
                        other => Err(format!("{other:?}")),
                    })
                },
            )
            .await;
        for task in &self.tasks {
            task.abort();
        }
        result
    }
}

/// A cluster deleted while kueue-sync is not running is cleaned up once it runs again:
/// cleanup is a derived sweep, not a finalizer.
#[tokio::test]
async fn a_cluster_deleted_while_kueue_sync_is_stopped_is_cleaned_up_after_restart() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("ks_restart").await?;
    let k = World::new(plane, scope.clone()).await?;
    let targets = plane.targets();
    let (a, b) = (scope.cluster("a"), scope.cluster("b"));
    let (gpus_a, gpus_b) = (discovered_gpus(&targets[0]), discovered_gpus(&targets[1]));
    onboard(&k.clusters, &a, &gpus_a).await?;
    onboard(&k.clusters, &b, &gpus_b).await?;
    let ks = hearth::start(plane, &scope, Controller::KueueSync, "first", &[]).await?;
    let both = BTreeMap::from([
        (a.clone(), quota_of(&gpus_a)),
        (b.clone(), quota_of(&gpus_b)),
    ]);
    wait_queue(
        &k.queues,
        &scope.cluster_queue,
        "both published",
        &ks,
        hearth_entries_are(&both, &[]),
    )
    .await?;
    ks.stop_cleanly(plane).await?;

    k.clusters.delete(&a, &DeleteParams::default()).await?;
    until("FournosCluster a gone", DEADLINE, || async {
        Ok(match k.clusters.get_opt(&a).await? {
            None => Ok(()),
            Some(_) => Err("still there".to_owned()),
        })
    })
    .await?;
    // Nobody cleaned up: kueue-sync is not running and Hearth put no finalizer anywhere.
    let cq = k.queues.get(&scope.cluster_queue).await?;
    assert!(entry(&cq, &a).is_some());
    assert!(k.flavors.get_opt(&a).await?.is_some());

    let ks = hearth::start(plane, &scope, Controller::KueueSync, "second", &[]).await?;
    let only_b = BTreeMap::from([(b.clone(), quota_of(&gpus_b))]);
    wait_queue(
        &k.queues,
        &scope.cluster_queue,
        "a's entry removed",
        &ks,
        hearth_entries_are(&only_b, &[]),
    )
    .await?;
    ks.until("a's flavor deleted", DEADLINE, || async {
        Ok(match k.flavors.get_opt(&a).await? {
            None => Ok(()),
            Some(f) => Err(format!("still there: {:?}", f.metadata.deletion_timestamp)),
        })
    })
    .await?;
    wait_queue(&k.queues, &scope.cluster_queue, "queue Active", &ks, |cq| {
        is_active(cq)
            .then_some(())
            .ok_or_else(|| format!("{:?}", cq.status))
    })
    .await?;
    wait_reason(&k.clusters, &b, "Synced", &ks).await?;
    Ok(ks.stop_cleanly(plane).await?)
}

/// kueue-sync never creates the ClusterQueue; clusters say it is missing, and everything
/// is published as soon as someone creates it.
#[tokio::test]
async fn a_cluster_queue_created_after_the_controller_started_is_picked_up() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("ks_late_queue").await?;
    let k = World::new(plane, scope.clone()).await?;
    let a = scope.cluster("a");
    let gpus = discovered_gpus(&plane.targets()[0]);
    // The chart lets kueue-sync update only the ClusterQueue it is configured with: take
    // the scope's away (Kueue lets it go at once: nothing uses it) and bring it back later.
    let late = scope.cluster_queue.clone();
    k.queues.delete(&late, &DeleteParams::default()).await?;
    until("the scope's ClusterQueue deleted", DEADLINE, || async {
        Ok(match k.queues.get_opt(&late).await? {
            None => Ok(()),
            Some(cq) => Err(format!("still there: {:?}", cq.metadata.finalizers)),
        })
    })
    .await?;
    onboard(&k.clusters, &a, &gpus).await?;
    let ks = hearth::start(plane, &scope, Controller::KueueSync, "main", &[]).await?;

    let cluster = wait_reason(&k.clusters, &a, "ClusterQueueNotFound", &ks).await?;
    let (status, _, message) = synced(&cluster).unwrap();
    assert_eq!(status, "False");
    assert!(message.contains(&late), "{message}");
    assert_eq!(cluster.status.unwrap().kueue, None);
    let event = wait_event(&k.client, &scope.namespace, &a, "ClusterQueueNotFound").await?;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(
        k.queues.get_opt(&late).await?.is_none(),
        "Hearth must not create the queue"
    );
    // The flavor costs nothing and exists already.
    assert!(k.flavors.get_opt(&a).await?.is_some());

    apply(&k.client, &cluster_queue(&late)).await?;
    let expected = BTreeMap::from([(a.clone(), quota_of(&gpus))]);
    wait_queue(
        &k.queues,
        &late,
        "a published in the new queue",
        &ks,
        hearth_entries_are(&expected, &[]),
    )
    .await?;
    wait_reason(&k.clusters, &a, "Synced", &ks).await?;
    wait_queue(&k.queues, &late, "queue Active", &ks, |cq| {
        is_active(cq)
            .then_some(())
            .ok_or_else(|| format!("{:?}", cq.status))
    })
    .await?;
    Ok(ks.stop_cleanly(plane).await?)
}

/// A GitOps-like writer updates the same ClusterQueue in a loop (its own flavor entry in
/// Hearth's resource group, added and removed, and an unrelated spec field and
/// annotation), always read-modify-write with the resourceVersion, while clusters come,
/// change and go. Before each of its writes it checks that its previous write is still
/// there; at the end both sides' last state must be in the queue.
#[tokio::test]
async fn a_concurrent_writer_and_kueue_sync_lose_none_of_each_others_updates() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("ks_concurrent").await?;
    let k = World::new(plane, scope.clone()).await?;
    let gitops = format!("gitops-{}", scope.id);
    apply(
        &k.client,
        &json!({
            "apiVersion": KUEUE_API_VERSION,
            "kind": "ResourceFlavor",
            "metadata": {"name": gitops},
            "spec": {"nodeLabels": {"pool": "gitops"}},
        }),
    )
    .await?;
    let names: Vec<String> = (0..5).map(|i| scope.cluster(&format!("c{i}"))).collect();
    // The test's model of the fleet: live clusters, their GPUs and kubeconfig status.
    let mut fleet: BTreeMap<String, (Vec<GpuInfo>, &str)> = BTreeMap::new();
    fleet.insert(names[0].clone(), (vec![gpu("a100", 8)], "Valid"));
    onboard(&k.clusters, &names[0], &fleet[&names[0]].0).await?;
    let ks = hearth::start(plane, &scope, Controller::KueueSync, "main", &[]).await?;
    wait_reason(&k.clusters, &names[0], "Synced", &ks).await?;

    let mut writer = Writer::new(
        k.queues.clone(),
        scope.cluster_queue.clone(),
        gitops.clone(),
    );
    for i in 0..60u32 {
        writer.step(i).await?;
        if !i.is_multiple_of(4) {
            continue;
        }
        // One change to the fleet every few writer steps.
        let (name, change): (&String, Option<(Vec<GpuInfo>, &str)>) = match i / 4 {
            0 => (&names[1], Some((vec![gpu("h200", 8)], "Valid"))),
            1 => (
                &names[2],
                Some((vec![gpu("l4", 1), gpu("a100", 2)], "Valid")),
            ),
            2 => (&names[1], None),
            3 => (&names[0], Some((vec![gpu("a100", 4)], "Valid"))),
            4 => (&names[3], Some((vec![gpu("mi300x", 8)], "Valid"))),
            5 => (
                &names[2],
                Some((vec![gpu("l4", 1), gpu("a100", 2)], "Unauthorized")),
            ),
            6 => (&names[2], None),
            7 => (&names[1], Some((vec![gpu("h100", 16)], "Valid"))),
            8 => (&names[0], Some((vec![gpu("a100", 8)], "Valid"))),
            9 => (&names[3], None),
            10 => (&names[4], Some((vec![gpu("l40s", 2)], "Valid"))),
            11 => (&names[2], Some((vec![gpu("a100", 1)], "Valid"))),
            12 => (&names[4], Some((vec![gpu("l40s", 2)], "Unreachable"))),
            13 => (&names[3], Some((vec![gpu("h200", 4)], "Valid"))),
            _ => (&names[1], None),
        };
        match change {
            None => {
                fleet.remove(name);
                k.clusters.delete(name, &DeleteParams::default()).await?;
            }
            Some((gpus, status)) => {
                if !fleet.contains_key(name) {
                    // A deleted cluster of the same name may still be on its way out.
                    until(
                        &format!("{name} gone before re-creating it"),
                        DEADLINE,
                        || async {
                            Ok(match k.clusters.get_opt(name).await? {
                                None => Ok(()),
                                Some(_) => Err("still there".to_owned()),
                            })
                        },
                    )
                    .await?;
                    onboard(&k.clusters, name, &gpus).await?;
                }
                discover(&k.clusters, name, status, &gpus).await?;
                fleet.insert(name.clone(), (gpus, status));
            }
        }
    }

    // Hearth converges to the fleet as it ended, and the writer's last write is intact.
    let expected: BTreeMap<String, BTreeMap<String, i64>> = fleet
        .iter()
        .map(|(name, (gpus, status))| {
            let quota = if *status == "Valid" {
                nonzero(quota_of(gpus))
            } else {
                BTreeMap::new()
            };
            (name.clone(), quota)
        })
        .collect();
    let cq = wait_queue(
        &k.queues,
        &scope.cluster_queue,
        "Hearth's entries match the final fleet",
        &ks,
        hearth_entries_are(&expected, &[&gitops]),
    )
    .await?;
    writer.check(&cq).map_err(|e| anyhow::anyhow!(e))?;
    for (name, (_, status)) in &fleet {
        let reason = if *status == "Valid" {
            "Synced"
        } else {
            "Drained"
        };
        wait_reason(&k.clusters, name, reason, &ks).await?;
    }
    for name in names.iter().filter(|n| !fleet.contains_key(*n)) {
        ks.until(&format!("flavor {name} deleted"), DEADLINE, || async {
            Ok(match k.flavors.get_opt(name).await? {
                None => Ok(()),
                Some(_) => Err("still there".to_owned()),
            })
        })
        .await?;
    }
    assert!(
        k.flavors.get_opt(&gitops).await?.is_some(),
        "a foreign flavor is never deleted"
    );
    wait_queue(&k.queues, &scope.cluster_queue, "queue Active", &ks, |cq| {
        is_active(cq)
            .then_some(())
            .ok_or_else(|| format!("{:?}", cq.status))
    })
    .await?;
    let metrics = ks.metrics().await?;
    eprintln!(
        "writer: {} writes, {} conflicts; kueue-sync: {} ClusterQueue writes, {} conflicts",
        writer.writes,
        writer.conflicts,
        metric_sum(&metrics, "hearth_kueue_sync_cluster_queue_writes_total"),
        metric_sum(&metrics, "hearth_kueue_sync_cluster_queue_conflicts_total"),
    );
    Ok(ks.stop_cleanly(plane).await?)
}

/// The concurrent writer: what it last wrote, and the read-modify-write that checks it.
struct Writer {
    queues: Api<ClusterQueue>,
    queue: String,
    flavor: String,
    /// Last written: annotation value, queueingStrategy, own entry's slot quota (None:
    /// entry removed).
    last: Option<(String, String, Option<i64>)>,
    writes: u32,
    conflicts: u32,
}

const WRITER_ANNOTATION: &str = "e2e.hearth.dev/writer-step";

impl Writer {
    fn new(queues: Api<ClusterQueue>, queue: String, flavor: String) -> Self {
        Writer {
            queues,
            queue,
            flavor,
            last: None,
            writes: 0,
            conflicts: 0,
        }
    }

    /// Whether `cq` still holds this writer's last write.
    fn check(&self, cq: &ClusterQueue) -> std::result::Result<(), String> {
        let Some((annotation, strategy, slots)) = &self.last else {
            return Ok(());
        };
        let found_annotation = cq
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(WRITER_ANNOTATION));
        let found_strategy = cq
            .spec
            .other
            .get("queueingStrategy")
            .and_then(Value::as_str);
        let found_slots = entry(cq, &self.flavor).map(|q| q.get(CLUSTER_SLOT_RESOURCE).copied());
        if found_annotation != Some(annotation)
            || found_strategy != Some(strategy.as_str())
            || found_slots != slots.map(Some)
        {
            return Err(format!(
                "the writer's last write is lost: wrote ({annotation}, {strategy}, {slots:?}), \
                 found ({found_annotation:?}, {found_strategy:?}, {found_slots:?}) in {:?}",
                cq.spec
            ));
        }
        Ok(())
    }

    /// Step `i`: read, check the previous write survived, modify, write with the
    /// resourceVersion; on conflict start over.
    async fn step(&mut self, i: u32) -> Result<()> {
        for _ in 0..50 {
            let mut cq = self.queues.get(&self.queue).await?;
            self.check(&cq).map_err(|e| anyhow::anyhow!(e))?;
            let annotation = i.to_string();
            let strategy = if i.is_multiple_of(2) {
                "StrictFIFO"
            } else {
                "BestEffortFIFO"
            };
            let slots = (i % 5 != 4).then_some(1_000 + i64::from(i));
            cq.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(WRITER_ANNOTATION.into(), annotation.clone());
            cq.spec
                .other
                .insert("queueingStrategy".into(), json!(strategy));
            self.set_entry(&mut cq, slots);
            cq.metadata.managed_fields = None;
            cq.status = None;
            match self
                .queues
                .replace(&self.queue, &PostParams::default(), &cq)
                .await
            {
                Ok(_) => {
                    self.writes += 1;
                    self.last = Some((annotation, strategy.to_owned(), slots));
                    return Ok(());
                }
                Err(kube::Error::Api(status)) if status.code == 409 => self.conflicts += 1,
                Err(e) => return Err(e).context("the writer's update"),
            }
        }
        bail!("the writer lost 50 races in a row")
    }

    /// Puts the writer's own entry in the group covering the slot resource (listing every
    /// covered resource in order, zero but the slots), or takes it out.
    fn set_entry(&self, cq: &mut ClusterQueue, slots: Option<i64>) {
        let groups = &mut cq.spec.resource_groups;
        for group in groups.iter_mut() {
            group.flavors.retain(|f| f.name != self.flavor);
        }
        groups.retain(|g| !g.flavors.is_empty());
        let Some(slots) = slots else { return };
        let index = match groups.iter().position(|g| {
            g.covered_resources
                .iter()
                .any(|r| r == CLUSTER_SLOT_RESOURCE)
        }) {
            Some(index) => index,
            None => {
                groups.push(ResourceGroup {
                    covered_resources: vec![CLUSTER_SLOT_RESOURCE.into()],
                    ..ResourceGroup::default()
                });
                groups.len() - 1
            }
        };
        let group = &mut groups[index];
        let resources = group
            .covered_resources
            .iter()
            .map(|r| ResourceQuota {
                name: r.clone(),
                nominal_quota: Quantity(
                    if r == CLUSTER_SLOT_RESOURCE { slots } else { 0 }.to_string(),
                ),
                other: Default::default(),
            })
            .collect();
        group.flavors.push(FlavorQuotas {
            name: self.flavor.clone(),
            resources,
            other: Default::default(),
        });
    }
}

/// Once converged, resyncs every second find nothing to write: no ClusterQueue,
/// ResourceFlavor or FournosCluster changes, and the write counters stand still.
#[tokio::test]
async fn steady_state_writes_nothing() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("ks_steady").await?;
    let k = World::new(plane, scope.clone()).await?;
    let targets = plane.targets();
    let (a, b) = (scope.cluster("a"), scope.cluster("b"));
    onboard(&k.clusters, &a, &discovered_gpus(&targets[0])).await?;
    onboard(&k.clusters, &b, &discovered_gpus(&targets[1])).await?;
    let ks = hearth::start(
        plane,
        &scope,
        Controller::KueueSync,
        "main",
        &[("HEARTH_RECONCILE_INTERVAL_SEC", "1")],
    )
    .await?;
    wait_reason(&k.clusters, &a, "Synced", &ks).await?;
    wait_reason(&k.clusters, &b, "Synced", &ks).await?;

    const WRITES: [&str; 3] = [
        "hearth_kueue_sync_cluster_queue_writes_total",
        "hearth_kueue_sync_flavor_writes_total",
        "hearth_kueue_sync_status_writes_total",
    ];
    let reconciles = "hearth_kueue_sync_reconciles_total";
    // Let the reconcile its own last writes trigger pass, then take the baseline.
    let start = ks.metric_sum(reconciles).await?;
    wait_metric_at_least(&ks, reconciles, start + 2.0).await?;
    // What kueue-sync writes, object by object. Not the ClusterQueue's or the flavors'
    // resourceVersion: Kueue writes the queue's status and the flavors' finalizer on its
    // own schedule (late, on a loaded machine: seen once under two concurrent CI runs,
    // the queue's version moved and its generation did not). kueue-sync writes only the
    // queue's spec (which moves its generation) and the flavors' spec, labels and
    // annotations; the write counters below catch any write at all.
    let versions = || async {
        let cq = k.queues.get(&scope.cluster_queue).await?;
        let mut v = vec![(
            "ClusterQueue".to_owned(),
            format!("{:?}", cq.metadata.generation),
            serde_json::to_string(&cq.spec)?,
        )];
        for name in [&a, &b] {
            let c = k.clusters.get(name).await?;
            v.push((
                format!("FournosCluster {name}"),
                format!("{:?}", c.metadata.resource_version),
                format!("{:?}", c.metadata.generation),
            ));
            let f = k.flavors.get(name).await?;
            v.push((
                format!("ResourceFlavor {name}"),
                format!("{:?}", f.metadata.generation),
                serde_json::to_string(&(&f.spec, &f.metadata.labels, &f.metadata.annotations))?,
            ));
        }
        anyhow::Ok(v)
    };
    let before = versions().await?;
    let metrics = ks.metrics().await?;
    let writes_before: Vec<f64> = WRITES.iter().map(|m| metric_sum(&metrics, m)).collect();
    let baseline = metric_sum(&metrics, reconciles);

    // A few resync intervals pass.
    wait_metric_at_least(&ks, reconciles, baseline + 3.0).await?;

    assert_eq!(versions().await?, before, "objects changed in steady state");
    let metrics = ks.metrics().await?;
    let writes_after: Vec<f64> = WRITES.iter().map(|m| metric_sum(&metrics, m)).collect();
    assert_eq!(
        writes_after, writes_before,
        "kueue-sync wrote in steady state"
    );
    assert_eq!(
        metric_sum(&metrics, "hearth_kueue_sync_reconcile_errors_total"),
        0.0
    );
    Ok(ks.stop_cleanly(plane).await?)
}

async fn wait_metric_at_least(ks: &Running, name: &str, value: f64) -> Result<()> {
    ks.until(&format!("{name} ≥ {value}"), DEADLINE, || async {
        let now = ks.metric_sum(name).await?;
        Ok(if now >= value {
            Ok(())
        } else {
            Err(format!("{now}"))
        })
    })
    .await
}

/// Two replicas with leader election: both ready, only the Lease holder writes; when it
/// dies the other takes over and publishes what changed meanwhile.
#[tokio::test]
async fn only_the_leader_writes_and_a_standby_takes_over() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("ks_leader").await?;
    let k = World::new(plane, scope.clone()).await?;
    let targets = plane.targets();
    let (a, b) = (scope.cluster("a"), scope.cluster("b"));
    let (gpus_a, gpus_b) = (discovered_gpus(&targets[0]), discovered_gpus(&targets[1]));
    onboard(&k.clusters, &a, &gpus_a).await?;
    let election = [
        ("HEARTH_LEADER_ELECTION", "true"),
        ("HEARTH_LEASE_DURATION_SEC", "4"),
        ("HEARTH_LEASE_GRACE_SEC", "2"),
    ];
    let with_id = |id: &'static str| {
        let mut env = election.to_vec();
        env.push(("HEARTH_POD_NAME", id));
        env
    };
    let one = hearth::start(
        plane,
        &scope,
        Controller::KueueSync,
        "one",
        &with_id("replica-one"),
    )
    .await?;
    let two = hearth::start(
        plane,
        &scope,
        Controller::KueueSync,
        "two",
        &with_id("replica-two"),
    )
    .await?;
    let expected = BTreeMap::from([(a.clone(), quota_of(&gpus_a))]);
    wait_queue(
        &k.queues,
        &scope.cluster_queue,
        "a published",
        &one,
        hearth_entries_are(&expected, &[]),
    )
    .await?;

    async fn leader_of(ks: &Running) -> Result<bool> {
        Ok(ks.metric_sum("hearth_leader").await? == 1.0)
    }
    let (leader, standby) = if leader_of(&one).await? {
        (one, two)
    } else {
        (two, one)
    };
    ensure!(
        leader_of(&leader).await? && !leader_of(&standby).await?,
        "exactly one leader"
    );
    let standby_writes = |text: &str| {
        [
            "hearth_kueue_sync_cluster_queue_writes_total",
            "hearth_kueue_sync_flavor_writes_total",
            "hearth_kueue_sync_status_writes_total",
        ]
        .iter()
        .map(|m| metric_sum(text, m))
        .sum::<f64>()
    };
    assert_eq!(
        standby_writes(&standby.metrics().await?),
        0.0,
        "the standby wrote"
    );

    // The leader crashes; b arrives; the standby takes over and publishes it.
    leader.kill(plane).await?;
    onboard(&k.clusters, &b, &gpus_b).await?;
    let both = BTreeMap::from([
        (a.clone(), quota_of(&gpus_a)),
        (b.clone(), quota_of(&gpus_b)),
    ]);
    wait_queue(
        &k.queues,
        &scope.cluster_queue,
        "b published by the new leader",
        &standby,
        hearth_entries_are(&both, &[]),
    )
    .await?;
    wait_reason(&k.clusters, &b, "Synced", &standby).await?;
    ensure!(leader_of(&standby).await?, "the standby leads now");
    ensure!(standby_writes(&standby.metrics().await?) > 0.0);
    Ok(standby.stop_cleanly(plane).await?)
}

/// Kueue allows 64 flavors in a resource group: with 65 clusters the newest waits
/// (`LimitReached`), the queue stays valid and Active, and a few ClusterQueue writes carry
/// all the entries. When an older cluster goes, the newest takes its place.
#[tokio::test]
async fn the_sixty_fifth_cluster_waits_for_room_and_the_queue_stays_valid() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated("ks_limit").await?;
    let k = World::new(plane, scope.clone()).await?;
    // Created in name order before kueue-sync starts: age, then name, decides the order.
    let names: Vec<String> = (0..65)
        .map(|i| scope.cluster(&format!("c{i:02}")))
        .collect();
    let gpus = vec![gpu("a100", 1)];
    for name in &names {
        onboard(&k.clusters, name, &gpus).await?;
    }
    let ks = hearth::start(plane, &scope, Controller::KueueSync, "main", &[]).await?;
    let (newest, oldest) = (&names[64], &names[0]);
    let expected: BTreeMap<String, BTreeMap<String, i64>> = names[..64]
        .iter()
        .map(|n| (n.clone(), quota_of(&gpus)))
        .collect();
    wait_queue(
        &k.queues,
        &scope.cluster_queue,
        "64 clusters published",
        &ks,
        hearth_entries_are(&expected, &[]),
    )
    .await?;
    let cluster = wait_reason(&k.clusters, newest, "LimitReached", &ks).await?;
    let (_, _, message) = synced(&cluster).unwrap();
    assert!(message.contains("64"), "{message}");
    wait_event(&k.client, &scope.namespace, newest, "LimitReached").await?;
    assert!(
        k.flavors.get_opt(newest).await?.is_some(),
        "its flavor waits too"
    );
    wait_queue(&k.queues, &scope.cluster_queue, "queue Active", &ks, |cq| {
        is_active(cq)
            .then_some(())
            .ok_or_else(|| format!("{:?}", cq.status))
    })
    .await?;
    // No write storm: the entries of 64 new clusters went in a few writes, not one per
    // cluster. Their flavors are created in the background (32 at a time) and an entry
    // follows its flavor into the cache, so the writes follow the flavors' arrival: 3 to 5
    // on this machine, loaded or not. Kueue's own status writes no longer make one fail
    // (the write is guarded by the spec's generation), so none is a conflict.
    let writes = ks
        .metric_sum("hearth_kueue_sync_cluster_queue_writes_total")
        .await?;
    let conflicts = ks
        .metric("hearth_kueue_sync_cluster_queue_writes_total{outcome=\"conflict\"}")
        .await?;
    ensure!(
        writes <= 8.0 && conflicts == 0.0,
        "{writes} ClusterQueue writes ({conflicts} conflicts) for one batch of clusters"
    );

    k.clusters.delete(oldest, &DeleteParams::default()).await?;
    let expected: BTreeMap<String, BTreeMap<String, i64>> = names[1..]
        .iter()
        .map(|n| (n.clone(), quota_of(&gpus)))
        .collect();
    wait_queue(
        &k.queues,
        &scope.cluster_queue,
        "the newest cluster takes the oldest's place",
        &ks,
        hearth_entries_are(&expected, &[]),
    )
    .await?;
    wait_reason(&k.clusters, newest, "Synced", &ks).await?;
    Ok(ks.stop_cleanly(plane).await?)
}

// ---------------------------------------------------------------------------------------
// Who gets a place: only what discovery counted, and quota once given stays.
// ---------------------------------------------------------------------------------------

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
    let cq = wait_queue(
        &k.queues,
        &scope.cluster_queue,
        "only the counted cluster published",
        &ks,
        hearth_entries_are(&expected, &[]),
    )
    .await?;
    assert_eq!(
        slot_group(&cq).context("a slot group")?.covered_resources,
        [CLUSTER_SLOT_RESOURCE.to_owned(), gpu_resource("a100")]
    );

    // Discovery counts it: its count is the quota; spec.hardware's h200 never shows.
    discover(&k.clusters, &forged, "Valid", &[gpu("mi300x", 8)]).await?;
    expected.insert(forged.clone(), quota_of(&[gpu("mi300x", 8)]));
    let cq = wait_queue(
        &k.queues,
        &scope.cluster_queue,
        "the counted GPUs published",
        &ks,
        hearth_entries_are(&expected, &[]),
    )
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
