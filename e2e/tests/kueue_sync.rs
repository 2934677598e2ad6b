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

use anyhow::{Context as _, Result, ensure};
use hearth_api::names::{CLUSTER_NAMESPACE_LABEL, CLUSTER_NODE_LABEL, CLUSTER_SLOT_RESOURCE};
use hearth_api::{GpuInfo, KueueStatus};
use hearth_e2e::ControlPlane;
use hearth_e2e::downstream::{
    DEADLINE, discover, gpu, onboard, synced, wait_admitted, wait_event, wait_pending, wait_reason,
    workload_condition,
};
use hearth_e2e::fixtures::cluster_queue;
use hearth_e2e::hearth::{self, Controller, Running, metric_sum};
use hearth_e2e::invariants::{entry, is_active, nonzero};
use hearth_e2e::kueue_sync::{
    DeletionOrder, SLOTS, TwoClusters, Writer, discovered_gpus, gpu_resource, hearth_entries_are,
    quota_of, slot_group, two_clusters, wait_active, wait_metric_at_least, wait_queue, workload,
};
use hearth_e2e::objects::KUEUE_API_VERSION;
use hearth_e2e::process::until;
use hearth_e2e::resources::apply;
use hearth_e2e::world::World;
use kube::api::DeleteParams;
use serde_json::json;

// ---------------------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------------------

/// The fleet is published (flavor per cluster, one entry per cluster, the union of GPU
/// resources covered, status and Event on each cluster), and the real Kueue admits a job on
/// the cluster it names and refuses one that asks for more A100s than that cluster has.
#[tokio::test]
async fn published_quota_admits_on_the_cluster_flavor_and_refuses_more_than_it_has() -> Result<()> {
    let TwoClusters {
        plane,
        scope,
        k,
        a,
        b,
        gpus_a,
        gpus_b,
    } = two_clusters("ks_admission").await?;
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
    let cq = k
        .wait_entries("both clusters published", &ks, &expected)
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
    let cq = k.wait_active(&ks).await?;
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
    let TwoClusters {
        plane,
        scope,
        k,
        a,
        b,
        gpus_a,
        gpus_b,
    } = two_clusters("ks_delete").await?;
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
    k.wait_entries("both published", &ks, &both).await?;
    let own = k.flavors.get(&a).await?.metadata.labels.unwrap_or_default();
    assert_eq!(own.get(CLUSTER_NAMESPACE_LABEL), Some(&scope.namespace));

    // Record, in etcd order, when the entry leaves the queue and when the flavor starts
    // being deleted.
    let order = DeletionOrder::watch(&k, &scope.cluster_queue, &a).await?;
    k.clusters.delete(&a, &DeleteParams::default()).await?;

    let only_b = BTreeMap::from([(b.clone(), quota_of(&gpus_b))]);
    let cq = k.wait_entries("a's entry removed", &ks, &only_b).await?;
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
    k.wait_active(&ks).await?;
    Ok(ks.stop_cleanly(plane).await?)
}

/// A cluster deleted while kueue-sync is not running is cleaned up once it runs again:
/// cleanup is a derived sweep, not a finalizer.
#[tokio::test]
async fn a_cluster_deleted_while_kueue_sync_is_stopped_is_cleaned_up_after_restart() -> Result<()> {
    let TwoClusters {
        plane,
        scope,
        k,
        a,
        b,
        gpus_a,
        gpus_b,
    } = two_clusters("ks_restart").await?;
    let ks = hearth::start(plane, &scope, Controller::KueueSync, "first", &[]).await?;
    let both = BTreeMap::from([
        (a.clone(), quota_of(&gpus_a)),
        (b.clone(), quota_of(&gpus_b)),
    ]);
    k.wait_entries("both published", &ks, &both).await?;
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
    k.wait_entries("a's entry removed", &ks, &only_b).await?;
    ks.until("a's flavor deleted", DEADLINE, || async {
        Ok(match k.flavors.get_opt(&a).await? {
            None => Ok(()),
            Some(f) => Err(format!("still there: {:?}", f.metadata.deletion_timestamp)),
        })
    })
    .await?;
    k.wait_active(&ks).await?;
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
    wait_active(&k.queues, &late, &ks).await?;
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
    k.wait_active(&ks).await?;
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

/// Once converged, resyncs every second find nothing to write: no ClusterQueue,
/// ResourceFlavor or FournosCluster changes, and the write counters stand still.
#[tokio::test]
async fn steady_state_writes_nothing() -> Result<()> {
    let TwoClusters {
        plane,
        scope,
        k,
        a,
        b,
        ..
    } = two_clusters("ks_steady").await?;
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
    k.wait_entries("a published", &one, &expected).await?;

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
    k.wait_entries("b published by the new leader", &standby, &both)
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
    k.wait_entries("64 clusters published", &ks, &expected)
        .await?;
    let cluster = wait_reason(&k.clusters, newest, "LimitReached", &ks).await?;
    let (_, _, message) = synced(&cluster).unwrap();
    assert!(message.contains("64"), "{message}");
    wait_event(&k.client, &scope.namespace, newest, "LimitReached").await?;
    assert!(
        k.flavors.get_opt(newest).await?.is_some(),
        "its flavor waits too"
    );
    k.wait_active(&ks).await?;
    // No write storm: the entries of 64 new clusters went in a few writes, not one per
    // cluster. Their flavors are created in the background (32 at a time) and an entry
    // follows its flavor into the cache, so the writes follow the flavors' arrival: 3 to 5
    // on this machine, loaded or not. Kueue's own status writes do not make one fail
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
    k.wait_entries(
        "the newest cluster takes the oldest's place",
        &ks,
        &expected,
    )
    .await?;
    wait_reason(&k.clusters, newest, "Synced", &ks).await?;
    Ok(ks.stop_cleanly(plane).await?)
}
