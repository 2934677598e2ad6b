//! What the plan reads of each object, and how it is taken from the API objects.

use std::collections::BTreeMap;

use hearth_api::conditions;
use hearth_api::kueue::ResourceFlavor;
use hearth_api::names::{
    CLUSTER_NAMESPACE_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, condition_types,
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
    /// `status.hardware.gpus`.
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
            gpus: status
                .and_then(|s| s.hardware.as_ref())
                .map(|h| h.gpus.clone())
                .unwrap_or_default(),
            kueue: status.and_then(|s| s.kueue.clone()),
            synced_condition: status
                .and_then(|s| conditions::find(&s.conditions, condition_types::KUEUE_SYNCED))
                .cloned(),
        }
    }

    /// Whether the cluster gets zero quota: its kubeconfig is not known to work.
    pub fn drained(&self) -> bool {
        self.kubeconfig_status != Some(KubeconfigStatus::Valid)
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
        Self {
            name: meta.name.clone().unwrap_or_default(),
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

    /// Whether Hearth manages this flavor and its ClusterQueue entry.
    ///
    /// The one place that decides ownership. Today: the managed-by and cluster-namespace
    /// labels, nothing else.
    /// Hook for adopting legacy flavors (made by the Python controller, or by hand,
    /// without the label): decide adoption here — e.g. a flavor whose only node label
    /// is `fournos.dev/cluster=<its own name>` and whose name is a live cluster — and
    /// have the apply step add the label, so ownership stays visible on the object.
    pub fn is_hearths(&self) -> bool {
        self.managed_by_hearth
    }
}
