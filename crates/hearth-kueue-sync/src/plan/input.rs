//! What the plan reads of each object, and how it is taken from the API objects.

use std::collections::{BTreeMap, BTreeSet};

use hearth_api::conditions;
use hearth_api::kueue::ResourceFlavor;
use hearth_api::names::{
    CLUSTER_NAMESPACE_LABEL, CLUSTER_NODE_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE,
    condition_types,
};
use hearth_api::{FournosCluster, GpuInfo, KubeconfigStatus, KueueStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

/// Kueue's finalizer on a ResourceFlavor that a ClusterQueue (or Cohort) references.
pub const RESOURCE_IN_USE_FINALIZER: &str = "kueue.x-k8s.io/resource-in-use";

/// A FournosCluster as the plan sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ObservedCluster {
    pub name: String,
    /// `metadata.creationTimestamp`: older clusters keep their place under Kueue's limits.
    pub created: Option<Timestamp>,
    /// `metadata.deletionTimestamp` is set: treated as gone.
    pub deleting: bool,
    /// `metadata.generation`, for the condition's `observedGeneration`.
    pub generation: Option<i64>,
    /// `spec.kubeconfigSecret`, named in the `Drained` message.
    pub kubeconfig_secret: String,
    /// `status.kubeconfigStatus`; anything but `Valid` drains the cluster.
    pub kubeconfig_status: Option<KubeconfigStatus>,
    /// The GPUs the quota is computed from: `status.hardware.gpus` once hearth-discovery
    /// has counted them (`status.hardware.lastDiscovery` is set). Until then, on a
    /// cluster taken over from the Python controller, its legacy `spec.hardware.gpus`:
    /// the quota it published stays until discovery reports the real count, so a
    /// takeover never lowers quota. Without either: `status.hardware.gpus`, if any.
    pub gpus: Vec<GpuInfo>,
    /// `status.kueue` as it is now.
    pub kueue: Option<KueueStatus>,
    /// The `KueueSynced` condition as it is now.
    pub synced_condition: Option<Condition>,
}

impl ObservedCluster {
    pub fn from_cluster(cluster: &FournosCluster) -> Self {
        let meta = &cluster.metadata;
        let status = cluster.status.as_ref();
        Self {
            name: meta.name.clone().unwrap_or_default(),
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
            deleting: meta.deletion_timestamp.is_some(),
            generation: meta.generation,
            kubeconfig_secret: cluster.spec.kubeconfig_secret.clone(),
            kubeconfig_status: status.and_then(|s| s.kubeconfig_status),
            gpus: quota_gpus(cluster),
            kueue: status.and_then(|s| s.kueue.clone()),
            synced_condition: status
                .and_then(|s| conditions::find(&s.conditions, condition_types::KUEUE_SYNCED))
                .cloned(),
        }
    }

    /// Whether the cluster gets zero quota: its kubeconfig is not known to work.
    ///
    /// A legacy `kubeconfigStatus: Valid` (the Python controller's, meaning only that the
    /// Secret exists) counts as `Valid` until hearth-discovery writes its own verdict over
    /// it on its first probe, so a taken-over cluster is not drained in between.
    pub fn drained(&self) -> bool {
        self.kubeconfig_status != Some(KubeconfigStatus::Valid)
    }
}

/// See [`ObservedCluster::gpus`].
fn quota_gpus(cluster: &FournosCluster) -> Vec<GpuInfo> {
    let discovered = cluster.status.as_ref().and_then(|s| s.hardware.as_ref());
    let legacy = cluster.spec.hardware.as_ref();
    match (discovered, legacy) {
        (Some(h), _) if h.last_discovery.is_some() => h.gpus.clone(),
        (_, Some(legacy)) => legacy.gpus.clone(),
        (Some(h), None) => h.gpus.clone(),
        (None, None) => Vec::new(),
    }
}

/// A ResourceFlavor as the plan sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedFlavor {
    pub name: String,
    /// Carries `app.kubernetes.io/managed-by=hearth` and
    /// `fournos.dev/cluster-namespace=<this Hearth's namespace>`.
    pub managed_by_hearth: bool,
    /// `spec.nodeLabels`.
    pub node_labels: BTreeMap<String, String>,
    /// Has the shape of a flavor made by the Python controller Hearth replaces: neither
    /// of Hearth's labels, and node labels exactly `{fournos.dev/cluster: <its name>}`.
    pub legacy: bool,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// Carries Kueue's [`RESOURCE_IN_USE_FINALIZER`].
    pub in_use: bool,
}

impl ObservedFlavor {
    /// `flavor` as seen by the Hearth whose FournosClusters live in `namespace`.
    pub fn from_flavor(flavor: &ResourceFlavor, namespace: &str) -> Self {
        let meta = &flavor.metadata;
        let label = |key: &str| meta.labels.as_ref().and_then(|l| l.get(key));
        let name = meta.name.clone().unwrap_or_default();
        let legacy = label(MANAGED_BY_LABEL).is_none()
            && label(CLUSTER_NAMESPACE_LABEL).is_none()
            && flavor.spec.node_labels.len() == 1
            && flavor.spec.node_labels.get(CLUSTER_NODE_LABEL) == Some(&name);
        Self {
            legacy,
            name,
            managed_by_hearth: label(MANAGED_BY_LABEL).is_some_and(|v| v == MANAGED_BY_VALUE)
                && label(CLUSTER_NAMESPACE_LABEL).is_some_and(|v| v == namespace),
            node_labels: flavor.spec.node_labels.clone(),
            deleting: meta.deletion_timestamp.is_some(),
            in_use: meta
                .finalizers
                .as_ref()
                .is_some_and(|f| f.iter().any(|f| f == RESOURCE_IN_USE_FINALIZER)),
        }
    }

    /// Whether Hearth manages this flavor and its ClusterQueue entry, given the names of
    /// the live FournosClusters of this Hearth's namespace.
    ///
    /// The one place that decides ownership: the flavor carries the managed-by and
    /// cluster-namespace labels, or Hearth adopts it ([`Self::is_adopted`]).
    pub fn is_hearths(&self, live_clusters: &BTreeSet<&str>) -> bool {
        self.managed_by_hearth || self.is_adopted(live_clusters)
    }

    /// A legacy flavor (see [`Self::legacy`]) named like a live FournosCluster of this
    /// namespace and not being deleted: Hearth takes it over as it is — its entry is
    /// managed from now on, and the apply step adds Hearth's labels so ownership shows
    /// on the object. It is never deleted and recreated (a ClusterQueue referencing a
    /// missing flavor goes inactive). A flavor with other node labels, or with the
    /// cluster-namespace label of another Hearth, stays foreign.
    pub fn is_adopted(&self, live_clusters: &BTreeSet<&str>) -> bool {
        !self.managed_by_hearth
            && self.legacy
            && !self.deleting
            && live_clusters.contains(self.name.as_str())
    }
}
