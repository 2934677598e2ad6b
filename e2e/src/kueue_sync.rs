//! hearth-kueue-sync under test, for its end-to-end tests: the quota discovery would
//! report for a target, waits on the ClusterQueue and the check of Hearth's entries in it,
//! a Workload of the scope, a watch that sees in which order a cluster's entry and flavor
//! go ([`DeletionOrder`]), and a GitOps-like [`Writer`] that updates the same ClusterQueue.
//! Every wait polls with a deadline.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result, bail};
use futures::StreamExt;
use hearth_api::GpuInfo;
use hearth_api::kueue::{ClusterQueue, FlavorQuotas, ResourceGroup, ResourceQuota};
use hearth_api::names::CLUSTER_SLOT_RESOURCE;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt as _;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

use crate::downstream::{DEADLINE, onboard};
use crate::hearth::Running;
use crate::invariants::{entry, is_active, kueue_problems, nonzero};
use crate::objects;
use crate::world::World;
use crate::{ControlPlane, Isolated, Target};

/// `fournos/cluster-slot` per cluster (the default).
pub const SLOTS: i64 = 100;

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
pub fn discovered_gpus(target: &Target) -> Vec<GpuInfo> {
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

/// A new scope on the shared plane with two FournosClusters, `a` and `b`, onboarded as
/// discovery reports the plane's first two targets; kueue-sync not started yet.
pub struct TwoClusters {
    pub plane: &'static ControlPlane,
    pub scope: Isolated,
    pub k: World<'static>,
    pub a: String,
    pub b: String,
    pub gpus_a: Vec<GpuInfo>,
    pub gpus_b: Vec<GpuInfo>,
}

pub async fn two_clusters(test: &str) -> Result<TwoClusters> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated(test).await?;
    let k = World::new(plane, scope.clone()).await?;
    let targets = plane.targets();
    let (a, b) = (scope.cluster("a"), scope.cluster("b"));
    let (gpus_a, gpus_b) = (discovered_gpus(&targets[0]), discovered_gpus(&targets[1]));
    onboard(&k.clusters, &a, &gpus_a).await?;
    onboard(&k.clusters, &b, &gpus_b).await?;
    Ok(TwoClusters {
        plane,
        scope,
        k,
        a,
        b,
        gpus_a,
        gpus_b,
    })
}

/// The quota kueue-sync should publish for `gpus`: slots and one resource per model.
pub fn quota_of(gpus: &[GpuInfo]) -> BTreeMap<String, i64> {
    let mut quota = BTreeMap::from([(CLUSTER_SLOT_RESOURCE.to_owned(), SLOTS)]);
    for g in gpus {
        *quota.entry(gpu_resource(&g.short_name)).or_default() += g.count;
    }
    quota
}

pub fn gpu_resource(short: &str) -> String {
    format!("fournos/gpu-{short}")
}

// ---------------------------------------------------------------------------------------
// Kueue objects.
// ---------------------------------------------------------------------------------------

pub fn slot_group(cq: &ClusterQueue) -> Option<&ResourceGroup> {
    cq.spec.resource_groups.iter().find(|g| {
        g.covered_resources
            .iter()
            .any(|r| r == CLUSTER_SLOT_RESOURCE)
    })
}

/// Waits until the ClusterQueue satisfies `check` (`Err(why)` while it does not).
pub async fn wait_queue(
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

/// [`wait_queue`] until `name` is Active.
pub async fn wait_active(
    queues: &Api<ClusterQueue>,
    name: &str,
    log: &Running,
) -> Result<ClusterQueue> {
    wait_queue(queues, name, "queue Active", log, |cq| {
        is_active(cq)
            .then_some(())
            .ok_or_else(|| format!("{:?}", cq.status))
    })
    .await
}

impl World<'_> {
    /// [`wait_queue`] on the scope's ClusterQueue until Hearth's entries in it are exactly
    /// `expected` ([`hearth_entries_are`], no foreign entry).
    pub async fn wait_entries(
        &self,
        what: &str,
        log: &Running,
        expected: &BTreeMap<String, BTreeMap<String, i64>>,
    ) -> Result<ClusterQueue> {
        let check = hearth_entries_are(expected, &[]);
        wait_queue(&self.queues, &self.scope.cluster_queue, what, log, check).await
    }

    /// [`wait_active`] on the scope's ClusterQueue.
    pub async fn wait_active(&self, log: &Running) -> Result<ClusterQueue> {
        wait_active(&self.queues, &self.scope.cluster_queue, log).await
    }
}

/// The check that Hearth's entries in the queue are exactly `expected` (flavor → nonzero
/// quota), the queue is valid for Kueue, and its `coveredResources` sorted.
pub fn hearth_entries_are(
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
pub fn workload(scope: &Isolated, name: &str, cluster: &str, requests: &[(&str, i64)]) -> Value {
    objects::workload(
        &scope.execution_namespace,
        name,
        &scope.local_queue,
        cluster,
        requests,
    )
}

/// The resourceVersions at which the ClusterQueue first lists no entry for a flavor and
/// the flavor first carries a deletionTimestamp (or is gone), from watches started before
/// the deletion. On one etcd these versions are ordered.
pub struct DeletionOrder {
    entry_gone: Arc<Mutex<Option<u64>>>,
    flavor_deleting: Arc<Mutex<Option<u64>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Watches object `name` of `api`, says on `synced` once the first list is in, and keeps
/// in `found` the resourceVersion of the first event `marks` picks (the object, and
/// whether the event is its deletion).
fn first_version<K>(
    api: Api<K>,
    name: &str,
    synced: tokio::sync::mpsc::Sender<()>,
    found: Arc<Mutex<Option<u64>>>,
    marks: impl Fn(&K, bool) -> bool + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let events = watcher::watcher(
        api,
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    );
    tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            let (object, deleted) = match event {
                Ok(watcher::Event::InitDone) => {
                    synced.send(()).await.ok();
                    continue;
                }
                Ok(watcher::Event::Apply(object)) => (object, false),
                Ok(watcher::Event::Delete(object)) => (object, true),
                _ => continue,
            };
            if marks(&object, deleted) {
                let version = object
                    .meta()
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse::<u64>().ok());
                found.lock().unwrap().get_or_insert(version.unwrap_or(0));
            }
        }
    })
}

impl DeletionOrder {
    pub async fn watch(k: &World<'_>, queue: &str, flavor: &str) -> Result<DeletionOrder> {
        let entry_gone = Arc::new(Mutex::new(None));
        let flavor_deleting = Arc::new(Mutex::new(None));
        let (synced_tx, mut synced_rx) = tokio::sync::mpsc::channel(2);

        let name = flavor.to_owned();
        let queue_task = first_version(
            k.queues.clone(),
            queue,
            synced_tx.clone(),
            entry_gone.clone(),
            move |cq, deleted| !deleted && entry(cq, &name).is_none(),
        );
        let flavor_task = first_version(
            k.flavors.clone(),
            flavor,
            synced_tx,
            flavor_deleting.clone(),
            |f, deleted| deleted || f.metadata.deletion_timestamp.is_some(),
        );
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

    pub async fn result(self, log: &Running) -> Result<(u64, u64)> {
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

/// The concurrent writer: what it last wrote, and the read-modify-write that checks it.
pub struct Writer {
    queues: Api<ClusterQueue>,
    queue: String,
    flavor: String,
    /// Last written: annotation value, queueingStrategy, own entry's slot quota (None:
    /// entry removed).
    last: Option<(String, String, Option<i64>)>,
    pub writes: u32,
    pub conflicts: u32,
}

const WRITER_ANNOTATION: &str = "e2e.hearth.dev/writer-step";

impl Writer {
    pub fn new(queues: Api<ClusterQueue>, queue: String, flavor: String) -> Self {
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
    pub fn check(&self, cq: &ClusterQueue) -> std::result::Result<(), String> {
        let Some((annotation, strategy, slots)) = &self.last else {
            return Ok(());
        };
        let found_annotation = cq.annotations().get(WRITER_ANNOTATION);
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
    pub async fn step(&mut self, i: u32) -> Result<()> {
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
    pub fn set_entry(&self, cq: &mut ClusterQueue, slots: Option<i64>) {
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

pub async fn wait_metric_at_least(ks: &Running, name: &str, value: f64) -> Result<()> {
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
