//! Test object builders, a check of Kueue's ClusterQueue validation, and [`World`]: a
//! small simulation of the apply step and of Kueue's flavor finalizer, to run the plan
//! round after round; [`FakeApi`], an apiserver for the background writers. The one
//! place tests get their objects from.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hearth_api::conditions::set_condition;
use hearth_api::kueue::{ClusterQueueSpec, ResourceFlavor, ResourceFlavorSpec, quantity_to_i64};
use hearth_api::names::controllers::KUEUE_SYNC;
use hearth_api::names::{
    CLUSTER_NAMESPACE_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, POOL_LABEL_KEYS_ANNOTATION,
};
use hearth_api::{
    FournosCluster, FournosClusterSpec, FournosClusterStatus, GpuInfo, Hardware, KubeconfigStatus,
};
use hearth_runtime::events::Events;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use tokio::sync::watch;

use crate::apply::Writer;
use crate::cached::CachedCluster;
use crate::metrics::Metrics;
use crate::plan::{
    ObservedCluster, ObservedFlavor, Plan, PlanInput, PlanSettings, RESOURCE_IN_USE_FINALIZER,
    desired_flavor, plan,
};

pub(crate) const QUEUE: &str = "fournos-queue";
pub(crate) const SLOT: &str = "fournos/cluster-slot";

/// `t0 + secs`.
pub(crate) fn at(secs: i64) -> Time {
    Time(Timestamp::from_second(1_790_000_000 + secs).unwrap())
}

pub(crate) fn settings() -> PlanSettings {
    PlanSettings {
        namespace: "hearth".into(),
        cluster_queue: QUEUE.into(),
        gpu_resource_prefix: "fournos/gpu-".into(),
        cluster_slots: 100,
        pool_label_keys: Vec::new(),
    }
}

/// `fournos/gpu-<short>`.
pub(crate) fn gpu(short: &str) -> String {
    format!("fournos/gpu-{short}")
}

/// A FournosCluster, `Valid`, counted by discovery (no GPUs), created at `t0`,
/// generation 1, uid `uid-<name>`.
pub(crate) fn cluster(name: &str) -> ClusterBuilder {
    ClusterBuilder(FournosCluster {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            namespace: Some("hearth".into()),
            creation_timestamp: Some(at(0)),
            generation: Some(1),
            ..ObjectMeta::default()
        },
        spec: FournosClusterSpec {
            kubeconfig_secret: format!("kubeconfig-{name}"),
            ..FournosClusterSpec::default()
        },
        status: Some(FournosClusterStatus {
            kubeconfig_status: Some(KubeconfigStatus::Valid),
            hardware: Some(Hardware {
                last_discovery: Some(at(0)),
                ..Hardware::default()
            }),
            ..FournosClusterStatus::default()
        }),
    })
}

pub(crate) struct ClusterBuilder(FournosCluster);

/// `cluster` as the cluster cache holds it.
pub(crate) fn cached(cluster: &FournosCluster) -> CachedCluster {
    CachedCluster::from(cluster.clone())
}

/// `count` GPUs of model `NVIDIA-<SHORT>`, one node.
pub(crate) fn gpu_info(short: &str, count: i64) -> GpuInfo {
    GpuInfo {
        vendor: "NVIDIA".into(),
        model: format!("NVIDIA-{}", short.to_uppercase()),
        short_name: short.into(),
        count,
        node_count: 1,
        driver_versions: Vec::new(),
    }
}

impl ClusterBuilder {
    pub fn created(mut self, secs: i64) -> Self {
        self.0.metadata.creation_timestamp = Some(at(secs));
        self
    }

    pub fn gpu(mut self, short: &str, count: i64) -> Self {
        let hardware = self.status().hardware.get_or_insert_with(Hardware::default);
        hardware.gpus.push(gpu_info(short, count));
        hardware.total_gpus += count;
        self
    }

    /// Cordoned by `alice` for `reason`, since `t0`, until `t0 + until` if given.
    pub fn cordoned(mut self, reason: &str, until: Option<i64>) -> Self {
        self.0.spec.cordon = Some(hearth_api::Cordon {
            reason: reason.into(),
            by: Some("alice".into()),
            since: Some(at(0)),
            until: until.map(at),
        });
        self
    }

    /// Label `key=value` on the FournosCluster.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
        self
    }

    pub fn kubeconfig(mut self, status: Option<KubeconfigStatus>) -> Self {
        self.status().kubeconfig_status = status;
        self
    }

    /// As the Python controller left it: the GPUs in `spec.hardware` (with the
    /// `lastDiscovery` the Python Hearth wrote there), no `status.hardware`.
    pub fn legacy(mut self) -> Self {
        let hardware = self.status().hardware.take();
        self.0.spec.hardware = hardware;
        self
    }

    /// hearth-discovery has counted the GPUs (`status.hardware.lastDiscovery` set).
    pub fn discovered(mut self) -> Self {
        let hardware = self.status().hardware.get_or_insert_with(Hardware::default);
        hardware.last_discovery = Some(at(0));
        self
    }

    /// hearth-discovery has never counted the GPUs: `status.hardware` as written (by
    /// anyone) without `lastDiscovery`.
    pub fn uncounted(mut self) -> Self {
        if let Some(hardware) = self.status().hardware.as_mut() {
            hardware.last_discovery = None;
        }
        self
    }

    /// GPUs in `spec.hardware`, as anyone who may edit the FournosCluster can write them.
    pub fn spec_gpu(mut self, short: &str, count: i64) -> Self {
        let gpu = gpu_info(short, count);
        let hardware = self.0.spec.hardware.get_or_insert_with(Hardware::default);
        hardware.gpus.push(gpu);
        hardware.total_gpus += count;
        self
    }

    pub fn deleting(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(at(1_000));
        self
    }

    pub fn build(self) -> FournosCluster {
        self.0
    }

    fn status(&mut self) -> &mut FournosClusterStatus {
        self.0.status.get_or_insert_with(Default::default)
    }
}

/// A ResourceFlavor as Hearth makes it, with Kueue's finalizer.
pub(crate) fn hearth_flavor(name: &str) -> ResourceFlavor {
    let mut flavor = desired_flavor(name, "hearth");
    flavor.metadata.finalizers = Some(vec![RESOURCE_IN_USE_FINALIZER.into()]);
    flavor
}

/// A ResourceFlavor as the Python controller made it: named after the cluster, node
/// label `fournos.dev/cluster=<cluster>`, no Hearth label.
pub(crate) fn legacy_flavor(name: &str) -> ResourceFlavor {
    let mut flavor = desired_flavor(name, "hearth");
    flavor.metadata.labels = None;
    flavor.metadata.finalizers = Some(vec![RESOURCE_IN_USE_FINALIZER.into()]);
    flavor
}

/// A ResourceFlavor someone else made (no managed-by label).
pub(crate) fn foreign_flavor(name: &str) -> ResourceFlavor {
    ResourceFlavor {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([("team".into(), "platform".into())])),
            finalizers: Some(vec![RESOURCE_IN_USE_FINALIZER.into()]),
            ..ObjectMeta::default()
        },
        spec: ResourceFlavorSpec {
            node_labels: BTreeMap::from([("pool".into(), name.into())]),
            node_taints: Vec::new(),
            other: Default::default(),
        },
    }
}

/// A ClusterQueue spec from its JSON.
pub(crate) fn queue(spec: Value) -> ClusterQueueSpec {
    serde_json::from_value(spec).expect("a ClusterQueue spec")
}

/// A ClusterQueue spec with one resource group: one flavor with these nominal quotas, the
/// group covering exactly their resources in this order.
pub(crate) fn one_flavor_queue(flavor: &str, quotas: &[(&str, Value)]) -> ClusterQueueSpec {
    let covered: Vec<&str> = quotas.iter().map(|(resource, _)| *resource).collect();
    let resources: Vec<Value> = quotas
        .iter()
        .map(|(resource, quota)| serde_json::json!({"name": resource, "nominalQuota": quota}))
        .collect();
    queue(serde_json::json!({"resourceGroups": [{
        "coveredResources": covered,
        "flavors": [{"name": flavor, "resources": resources}],
    }]}))
}

/// The JSON of a spec, to compare parts byte for byte.
pub(crate) fn json(spec: &ClusterQueueSpec) -> Value {
    serde_json::to_value(spec).unwrap()
}

/// Flavor → (resource, nominal quota as an integer), in the order written, for the
/// group covering the slot resource.
pub(crate) fn slot_group_quotas(spec: &ClusterQueueSpec) -> Vec<(String, Vec<(String, i64)>)> {
    let group = spec
        .resource_groups
        .iter()
        .find(|g| g.covered_resources.iter().any(|r| r == SLOT))
        .expect("a group covering the slot resource");
    group
        .flavors
        .iter()
        .map(|f| {
            (
                f.name.clone(),
                f.resources
                    .iter()
                    .map(|q| (q.name.clone(), quantity_to_i64(&q.nominal_quota).unwrap()))
                    .collect(),
            )
        })
        .collect()
}

/// What Kueue (CRD rules and webhook) would reject in `spec`: the one oracle, shared
/// with the e2e tests.
pub(crate) fn kueue_problems(spec: &ClusterQueueSpec) -> Vec<String> {
    hearth_api::kueue_validity::problems(spec)
}

/// The observed world, and what the apply step and Kueue do to it.
#[derive(Clone, Debug)]
pub(crate) struct World {
    pub settings: PlanSettings,
    pub clusters: Vec<FournosCluster>,
    pub queue: Option<ClusterQueueSpec>,
    pub flavors: Vec<ResourceFlavor>,
    /// Seconds since `t0`, advanced by each [`World::apply`].
    pub now: i64,
    /// Workloads admitted per flavor, as Kueue would report them.
    pub admitted: BTreeMap<String, i64>,
    /// Names whose flavor creates land on the server but not in the cache yet: a create
    /// of one of them goes to [`Self::in_flight`] instead of [`Self::flavors`].
    pub slow: BTreeSet<String>,
    /// Flavors created, not yet in the cache ([`PlanInput::creating`]); [`Self::deliver`]
    /// brings one in.
    pub in_flight: Vec<ResourceFlavor>,
}

impl World {
    /// No clusters, no flavors, an empty ClusterQueue.
    pub fn new() -> Self {
        Self {
            settings: settings(),
            clusters: Vec::new(),
            queue: Some(ClusterQueueSpec::default()),
            flavors: Vec::new(),
            now: 10_000,
            admitted: BTreeMap::new(),
            slow: BTreeSet::new(),
            in_flight: Vec::new(),
        }
    }

    pub fn with_clusters(mut self, clusters: impl IntoIterator<Item = ClusterBuilder>) -> Self {
        self.clusters
            .extend(clusters.into_iter().map(ClusterBuilder::build));
        self
    }

    pub fn with_flavors(mut self, flavors: impl IntoIterator<Item = ResourceFlavor>) -> Self {
        self.flavors.extend(flavors);
        self
    }

    pub fn with_queue(mut self, queue: Option<ClusterQueueSpec>) -> Self {
        self.queue = queue;
        self
    }

    pub fn input(&self) -> PlanInput {
        PlanInput {
            settings: self.settings.clone(),
            clusters: self
                .clusters
                .iter()
                .map(|c| Arc::new(ObservedCluster::from_cluster(c)))
                .collect(),
            cluster_queue: self.queue.clone(),
            flavors: self
                .flavors
                .iter()
                .map(|f| Arc::new(ObservedFlavor::from_flavor(f, &self.settings.namespace)))
                .collect(),
            creating: self
                .in_flight
                .iter()
                .filter_map(|f| f.metadata.name.clone())
                .collect(),
            admitted: self.admitted.clone(),
            now: at(self.now).0,
        }
    }

    pub fn plan(&self) -> Plan {
        plan(&self.input())
    }

    /// Does what the apply step does with `plan`, checking along the way what Kueue and
    /// the API server would refuse, then what Kueue's flavor controller does.
    pub fn apply(&mut self, plan: &Plan) {
        self.now += 30;
        let ready_before = self.ready_flavors();
        assert_kueue_accepts_flavors(plan);
        for flavor in &plan.flavors_to_create {
            self.create_flavor(flavor);
        }
        for desired in &plan.flavors_to_repair {
            self.repair_flavor(desired);
        }
        for desired in &plan.flavors_to_adopt {
            self.adopt_flavor(desired);
        }
        if let Some(spec) = &plan.cluster_queue {
            self.update_queue(spec, &ready_before);
        }
        for name in &plan.flavors_to_delete {
            self.delete_flavor(name);
        }
        self.release_unreferenced_flavors();
        self.write_statuses(plan);
    }

    /// The flavors that exist and are not being deleted.
    fn ready_flavors(&self) -> Vec<String> {
        self.flavors
            .iter()
            .filter(|f| f.metadata.deletion_timestamp.is_none())
            .filter_map(|f| f.metadata.name.clone())
            .collect()
    }

    /// A create: refused if the flavor exists or its create is under way; Kueue adds
    /// its finalizer. A [`Self::slow`] one is not in the cache yet.
    fn create_flavor(&mut self, flavor: &ResourceFlavor) {
        let name = flavor.metadata.name.clone().unwrap();
        assert!(self.flavor(&name).is_none(), "create {name}: AlreadyExists");
        assert!(
            self.in_flight
                .iter()
                .all(|f| f.metadata.name.as_ref() != Some(&name)),
            "create {name} again while its create is under way"
        );
        let mut flavor = flavor.clone();
        flavor.metadata.finalizers = Some(vec![RESOURCE_IN_USE_FINALIZER.into()]);
        if self.slow.contains(&name) {
            self.in_flight.push(flavor);
        } else {
            self.flavors.push(flavor);
        }
    }

    /// A server-side apply of `desired` over a flavor of Hearth's.
    fn repair_flavor(&mut self, desired: &ResourceFlavor) {
        let name = desired.metadata.name.as_deref().unwrap();
        let flavor = self.flavor_mut(name).expect("repair of an existing flavor");
        // Server-side apply drops the pool labels kueue-sync applied before and leaves
        // out now (the keys it applied are in the annotation).
        let applied_before = flavor
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(POOL_LABEL_KEYS_ANNOTATION))
            .cloned()
            .unwrap_or_default();
        for key in applied_before.split(',') {
            if !desired.spec.node_labels.contains_key(key) {
                flavor.spec.node_labels.remove(key);
            }
        }
        if !desired
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(POOL_LABEL_KEYS_ANNOTATION))
            && let Some(a) = flavor.metadata.annotations.as_mut()
        {
            a.remove(POOL_LABEL_KEYS_ANNOTATION);
        }
        flavor
            .spec
            .node_labels
            .extend(desired.spec.node_labels.clone());
        flavor.spec.node_taints = desired.spec.node_taints.clone();
        flavor
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .extend(desired.metadata.annotations.clone().unwrap_or_default());
    }

    /// An adoption: Hearth's labels, annotations and node labels added to a flavor that
    /// exists and is not being deleted.
    fn adopt_flavor(&mut self, desired: &ResourceFlavor) {
        let name = desired.metadata.name.as_deref().unwrap();
        let flavor = self
            .flavor_mut(name)
            .expect("adoption of an existing flavor");
        assert!(
            flavor.metadata.deletion_timestamp.is_none(),
            "adopted a flavor being deleted"
        );
        flavor
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .extend(desired.metadata.labels.clone().unwrap_or_default());
        flavor
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .extend(desired.metadata.annotations.clone().unwrap_or_default());
        flavor
            .spec
            .node_labels
            .extend(desired.spec.node_labels.clone());
    }

    /// An update of the ClusterQueue, which must exist and which Kueue must accept; an
    /// entry is only added for a flavor that was ready before this round.
    fn update_queue(&mut self, spec: &ClusterQueueSpec, ready_before: &[String]) {
        assert!(
            self.queue.is_some(),
            "the plan wrote a missing ClusterQueue"
        );
        let problems = kueue_problems(spec);
        assert!(
            problems.is_empty(),
            "Kueue would reject the queue: {problems:?}"
        );
        let before = self.queue.as_ref().unwrap();
        for f in spec.resource_groups.iter().flat_map(|g| &g.flavors) {
            let was_listed = before
                .resource_groups
                .iter()
                .flat_map(|g| &g.flavors)
                .any(|o| o.name == f.name);
            assert!(
                was_listed || ready_before.contains(&f.name),
                "entry {} added for a flavor that does not exist",
                f.name
            );
        }
        self.queue = Some(spec.clone());
    }

    /// A delete: only of a flavor the queue no longer references; it stays, being
    /// deleted, until Kueue drops its finalizer.
    fn delete_flavor(&mut self, name: &str) {
        assert!(
            !self.referenced(name),
            "delete of {name}, still referenced by the queue"
        );
        let now = at(self.now);
        let flavor = self.flavor_mut(name).expect("delete of an existing flavor");
        flavor.metadata.deletion_timestamp = Some(now);
    }

    /// Kueue drops its finalizer once no queue references the flavor: a flavor being
    /// deleted is then gone.
    fn release_unreferenced_flavors(&mut self) {
        let referenced: Vec<bool> = self
            .flavors
            .iter()
            .map(|f| self.referenced(f.metadata.name.as_deref().unwrap()))
            .collect();
        let mut referenced = referenced.into_iter();
        self.flavors
            .retain(|f| referenced.next().unwrap() || f.metadata.deletion_timestamp.is_none());
    }

    /// The status writes of `plan`, each checked against what it says changed.
    fn write_statuses(&mut self, plan: &Plan) {
        let now = at(self.now);
        for cluster in &mut self.clusters {
            let name = cluster.metadata.name.clone().unwrap();
            let Some(sync) = plan.clusters.get(&name) else {
                continue;
            };
            let generation = cluster.metadata.generation;
            let status = cluster.status.get_or_insert_with(Default::default);
            let kueue_changed = status.kueue != sync.kueue;
            status.kueue = sync.kueue.clone();
            let condition_changed =
                set_condition(&mut status.conditions, &sync.condition, generation, &now);
            let schedulable_changed =
                set_condition(&mut status.conditions, &sync.schedulable, generation, &now);
            let admitted_changed = status.admitted_workloads != sync.cordon.admitted();
            status.admitted_workloads = sync.cordon.admitted();
            assert_eq!(
                kueue_changed || condition_changed || schedulable_changed || admitted_changed,
                sync.status_changed,
                "status_changed of {name} is wrong"
            );
        }
    }

    /// Plans and applies until a plan changes nothing; returns the number of rounds
    /// that changed something.
    pub fn converge(&mut self) -> usize {
        for round in 0..10 {
            let plan = self.plan();
            if plan.is_noop() {
                return round;
            }
            self.apply(&plan);
        }
        panic!("no fixpoint after 10 rounds: {:#?}", self.plan());
    }

    /// The cache shows the flavor `name` whose create was under way.
    pub fn deliver(&mut self, name: &str) {
        let at = self
            .in_flight
            .iter()
            .position(|f| f.metadata.name.as_deref() == Some(name))
            .expect("a flavor whose create is under way");
        let flavor = self.in_flight.remove(at);
        self.slow.remove(name);
        self.flavors.push(flavor);
    }

    pub fn flavor(&self, name: &str) -> Option<&ResourceFlavor> {
        self.flavors
            .iter()
            .find(|f| f.metadata.name.as_deref() == Some(name))
    }

    fn flavor_mut(&mut self, name: &str) -> Option<&mut ResourceFlavor> {
        self.flavors
            .iter_mut()
            .find(|f| f.metadata.name.as_deref() == Some(name))
    }

    pub fn status(&self, cluster: &str) -> &FournosClusterStatus {
        self.clusters
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(cluster))
            .and_then(|c| c.status.as_ref())
            .expect("a cluster with a status")
    }

    pub fn cluster_mut(&mut self, name: &str) -> &mut FournosCluster {
        self.clusters
            .iter_mut()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .expect("a cluster of that name")
    }

    /// `status.hardware` of cluster `name`, as discovery writes it.
    pub fn hardware_mut(&mut self, name: &str) -> &mut Hardware {
        self.cluster_mut(name)
            .status
            .get_or_insert_with(Default::default)
            .hardware
            .get_or_insert_with(Default::default)
    }

    pub fn add_cluster(&mut self, cluster: ClusterBuilder) {
        self.clusters.push(cluster.build());
    }

    pub fn remove_cluster(&mut self, name: &str) {
        self.clusters
            .retain(|c| c.metadata.name.as_deref() != Some(name));
    }

    /// The queue, which must exist.
    pub fn queue(&self) -> &ClusterQueueSpec {
        self.queue.as_ref().expect("the ClusterQueue")
    }

    fn referenced(&self, flavor: &str) -> bool {
        self.queue.as_ref().is_some_and(|q| {
            q.resource_groups
                .iter()
                .flat_map(|g| &g.flavors)
                .any(|f| f.name == flavor)
        })
    }

    /// Whether a flavor carries Hearth's label.
    pub fn is_hearths(&self, name: &str) -> bool {
        self.flavor(name).is_some_and(|f| {
            let label = |key| f.metadata.labels.as_ref().and_then(|l| l.get(key));
            label(MANAGED_BY_LABEL).is_some_and(|v| v == MANAGED_BY_VALUE)
                && label(CLUSTER_NAMESPACE_LABEL) == Some(&self.settings.namespace)
        })
    }
}

/// Every flavor `plan` writes is one Kueue accepts.
fn assert_kueue_accepts_flavors(plan: &Plan) {
    for flavor in plan
        .flavors_to_create
        .iter()
        .chain(&plan.flavors_to_repair)
        .chain(&plan.flavors_to_adopt)
    {
        let problems = hearth_api::kueue_validity::flavor_problems(&flavor.spec);
        assert!(
            problems.is_empty(),
            "Kueue would reject flavor {:?}: {problems:?}",
            flavor.metadata.name
        );
    }
}

/// A fake apiserver for the background writers' tests. Records the path and body of each
/// write `record` wants as it arrives, then answers once `gate` gives a permit: 500 while
/// `fail` is set, 404 while `gone` counts down, else `answer(path, body,
/// resourceVersion)`. Any other request (an Event) is answered at once with its body.
#[derive(Clone)]
pub(crate) struct FakeApi {
    pub seen: Arc<Mutex<Vec<(String, Value)>>>,
    /// Recorded requests waiting at the gate.
    pub at_gate: Arc<AtomicU64>,
    pub gate: Arc<tokio::sync::Semaphore>,
    pub fail: Arc<AtomicBool>,
    /// How many of the next recorded writes find their object gone.
    pub gone: Arc<AtomicU64>,
    version: Arc<AtomicU64>,
}

/// What a [`FakeApi`] answers to a write it records: from its path, body and new
/// resourceVersion.
pub(crate) type Answer = fn(&str, &Value, &str) -> Value;

impl FakeApi {
    /// `open`: the gate lets every request through; closed, each waits for a permit.
    pub fn new(open: bool) -> Self {
        let permits = if open {
            tokio::sync::Semaphore::MAX_PERMITS
        } else {
            0
        };
        Self {
            seen: Arc::default(),
            at_gate: Arc::default(),
            gate: Arc::new(tokio::sync::Semaphore::new(permits)),
            fail: Arc::default(),
            gone: Arc::default(),
            version: Arc::new(AtomicU64::new(100)),
        }
    }

    /// A [`Writer`] on this apiserver for a leader whose leadership never moves, and that
    /// leadership.
    pub fn writer(
        &self,
        record: fn(&str) -> bool,
        answer: Answer,
    ) -> (Writer, watch::Receiver<bool>) {
        let client = self.client(record, answer);
        let (leader_tx, leader) = watch::channel(true);
        // The sender lives as long as the test's runtime.
        std::mem::forget(leader_tx);
        let mut registry = prometheus_client::registry::Registry::default();
        let events = Events::new(client.clone(), KUEUE_SYNC, "test".into(), leader.clone());
        let writer = Writer::new(client, "hearth", events, Metrics::register(&mut registry));
        (writer, leader)
    }

    fn client(&self, record: fn(&str) -> bool, answer: Answer) -> kube::Client {
        let api = self.clone();
        let service = tower::service_fn(move |request: Request<kube::client::Body>| {
            let api = api.clone();
            async move {
                let path = request.uri().path().to_owned();
                let body: Value =
                    serde_json::from_slice(&request.into_body().collect().await?.to_bytes())?;
                let (status, answered) = if !record(&path) {
                    (StatusCode::CREATED, body)
                } else {
                    api.seen.lock().unwrap().push((path.clone(), body.clone()));
                    api.at_gate.fetch_add(1, Ordering::SeqCst);
                    api.gate.acquire().await?.forget();
                    api.at_gate.fetch_sub(1, Ordering::SeqCst);
                    if api.fail.load(Ordering::SeqCst) {
                        (
                            StatusCode::INTERNAL_SERVER_ERROR,
                            serde_json::json!({"kind": "Status", "apiVersion": "v1",
                                "status": "Failure", "reason": "InternalError", "code": 500,
                                "message": "etcd is down"}),
                        )
                    } else if api
                        .gone
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok()
                    {
                        (
                            StatusCode::NOT_FOUND,
                            serde_json::json!({"kind": "Status", "apiVersion": "v1",
                                "status": "Failure", "reason": "NotFound", "code": 404,
                                "message": "not found"}),
                        )
                    } else {
                        let rv = api.version.fetch_add(1, Ordering::SeqCst).to_string();
                        (StatusCode::OK, answer(&path, &body, &rv))
                    }
                };
                let response = Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(serde_json::to_vec(&answered)?))?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(response)
            }
        });
        kube::Client::new(service, "hearth")
    }
}
