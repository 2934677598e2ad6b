//! What the plan reads of each object, and how it is taken from the API objects.

use std::collections::{BTreeMap, BTreeSet};

use hearth_api::cluster::{
    MAX_CORDON_REASON_CHARS, MAX_KUBECONFIG_SECRET_CHARS, MAX_OWNER_CHARS, legacy_hardware_problem,
};
use hearth_api::conditions;
use hearth_api::kueue::ResourceFlavor;
use hearth_api::names::{
    ADOPTED_CLUSTER_UID_ANNOTATION, ADOPTED_FROM_ANNOTATION, ADOPTED_FROM_PYTHON,
    CLUSTER_NAMESPACE_LABEL, CLUSTER_NODE_LABEL, CORDON_TAINT_KEY, MANAGED_BY_LABEL,
    MANAGED_BY_VALUE, POOL_LABEL_KEYS_ANNOTATION, condition_types,
};
use hearth_api::text::capped;
use hearth_api::{Cordon, FournosCluster, GpuInfo, Hardware, KubeconfigStatus, KueueStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

/// Kueue's finalizer on a ResourceFlavor that a ClusterQueue (or Cohort) references.
pub const RESOURCE_IN_USE_FINALIZER: &str = "kueue.x-k8s.io/resource-in-use";

/// A FournosCluster as the plan sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ObservedCluster {
    pub name: String,
    /// `metadata.uid`: a flavor adopted for this cluster names it
    /// ([`ADOPTED_CLUSTER_UID_ANNOTATION`]).
    pub uid: Option<String>,
    /// `metadata.creationTimestamp`: among newcomers, older clusters get room first.
    pub created: Option<Timestamp>,
    /// `metadata.deletionTimestamp` is set: treated as gone.
    pub deleting: bool,
    /// `metadata.generation`, for the condition's `observedGeneration`.
    pub generation: Option<i64>,
    /// `metadata.labels`: the pool labels (`HEARTH_POOL_LABEL_KEYS`) are copied from here
    /// into the flavor's node labels. The cache keeps those keys only
    /// ([`Self::keep_labels`]): anyone who may label a FournosCluster may add as many
    /// others as the apiserver accepts.
    pub labels: Labels,
    /// `spec.kubeconfigSecret`, named in the `Drained` message (at most one character
    /// beyond the CRD's limit is kept: [`capped`]).
    pub kubeconfig_secret: String,
    /// `status.kubeconfigStatus`; anything but `Valid` drains the cluster.
    pub kubeconfig_status: Option<KubeconfigStatus>,
    /// hearth-discovery has counted the cluster's GPUs at least once
    /// (`status.hardware.lastDiscovery` is set; discovery keeps it when a later probe
    /// fails).
    pub counted: bool,
    /// `status.hardware.gpus`: what discovery counted (meaningful once [`Self::counted`]).
    pub gpus: Vec<GpuInfo>,
    /// The legacy `spec.hardware.gpus` the Python Hearth wrote. Anyone who may edit the
    /// FournosCluster may write it, so it is read only for a cluster under takeover
    /// ([`Self::quota_gpus`]), and kept only within the CRD's bounds.
    pub legacy_gpus: LegacyGpus,
    /// `status.kueue` as it is now.
    pub kueue: Option<KueueStatus>,
    /// The `KueueSynced` condition as it is now.
    pub synced_condition: Option<Condition>,
    /// `spec.cordon`: the flavor carries the cordon taint while it is set.
    pub cordon: Option<Cordon>,
    /// The `Schedulable` condition as it is now.
    pub schedulable_condition: Option<Condition>,
    /// `status.admittedWorkloads` as it is now.
    pub admitted_workloads: Option<i64>,
    /// `status.lockWorkloadUID`: the Workload lock-manager proved holds the cluster's
    /// lock, left out of every flavor's admitted count (a lock is what an operator waits
    /// to hold, not a job to drain).
    pub lock_workload_uid: Option<String>,
    /// Known by its metadata only (it does not decode): nothing can be said of its
    /// count, so it keeps a place it holds (at zero quota) and claims no new one.
    pub undecodable: bool,
}

impl ObservedCluster {
    pub fn from_cluster(cluster: &FournosCluster) -> Self {
        let meta = &cluster.metadata;
        let status = cluster.status.as_ref();
        let hardware = status.and_then(|s| s.hardware.as_ref());
        Self {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
            deleting: meta.deletion_timestamp.is_some(),
            generation: meta.generation,
            labels: meta.labels.as_ref().map(Labels::from).unwrap_or_default(),
            kubeconfig_secret: capped(&cluster.spec.kubeconfig_secret, MAX_KUBECONFIG_SECRET_CHARS),
            kubeconfig_status: status.and_then(|s| s.kubeconfig_status),
            counted: hardware.is_some_and(|h| h.last_discovery.is_some()),
            gpus: hardware.map(|h| h.gpus.clone()).unwrap_or_default(),
            legacy_gpus: LegacyGpus::of(cluster.spec.hardware.as_ref()),
            kueue: status.and_then(|s| s.kueue.clone()),
            synced_condition: status
                .and_then(|s| conditions::find(&s.conditions, condition_types::KUEUE_SYNCED))
                .cloned(),
            cordon: cluster.spec.cordon.as_ref().map(bounded_cordon),
            schedulable_condition: status
                .and_then(|s| conditions::find(&s.conditions, condition_types::SCHEDULABLE))
                .cloned(),
            admitted_workloads: status.and_then(|s| s.admitted_workloads),
            lock_workload_uid: status.and_then(|s| s.lock_workload_uid.clone()),
            undecodable: false,
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

    /// The GPUs the quota is computed from, or `None` when the cluster has no claim on
    /// the ClusterQueue at all. Only discovery publishes hardware: once it has counted
    /// ([`Self::counted`]), `status.hardware.gpus`. Before that, only a cluster *under
    /// takeover* (see [`ObservedFlavor::under_takeover`]) counts, with the legacy
    /// `spec.hardware.gpus` it brings, so a takeover never lowers the quota the Python
    /// Hearth published before discovery reports the real count. Any other cluster
    /// discovery has never counted claims nothing: its `spec.hardware` is ignored, and it
    /// takes neither a place nor a covered resource.
    ///
    /// A legacy `spec.hardware` beyond the CRD's bounds ([`LegacyGpus::Refused`]) brings
    /// no GPU: the cluster keeps its place with its slots only, and says why
    /// (`InvalidLegacyHardware`), rather than publishing a part of what it lists.
    pub fn quota_gpus(&self, under_takeover: bool) -> Option<&[GpuInfo]> {
        if self.counted {
            Some(&self.gpus)
        } else if under_takeover {
            Some(match &self.legacy_gpus {
                LegacyGpus::Listed(gpus) => gpus,
                LegacyGpus::Absent | LegacyGpus::Refused(_) => &[],
            })
        } else {
            None
        }
    }

    /// Keeps only the labels of `keys` (the pool label keys): the plan reads no other.
    pub fn keep_labels(&mut self, keys: &[String]) {
        if self.labels.iter().all(|(k, _)| keys.contains(k)) {
            return;
        }
        self.labels = Labels(
            self.labels
                .0
                .iter()
                .filter(|(k, _)| keys.contains(k))
                .cloned()
                .collect(),
        );
    }
}

/// The legacy `spec.hardware.gpus`, as the plan may read it.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum LegacyGpus {
    /// No `spec.hardware`.
    #[default]
    Absent,
    /// Within the CRD's bounds ([`hearth_api::cluster::legacy_hardware_problem`]).
    Listed(Vec<GpuInfo>),
    /// Beyond them (stored before the CRD said so): none of it is kept; why.
    Refused(String),
}

impl LegacyGpus {
    pub fn of(hardware: Option<&Hardware>) -> Self {
        match hardware {
            None => Self::Absent,
            Some(h) => match legacy_hardware_problem(h) {
                Some(problem) => Self::Refused(problem),
                None => Self::Listed(h.gpus.clone()),
            },
        }
    }

    /// Why it is not read, when it is beyond the CRD's bounds.
    pub fn refused(&self) -> Option<&str> {
        match self {
            Self::Refused(why) => Some(why),
            Self::Absent | Self::Listed(_) => None,
        }
    }
}

/// `spec.cordon` with its texts capped to the CRD's limits (for one stored before it
/// said so): what the plan shows of them is bounded to those limits anyway.
fn bounded_cordon(cordon: &Cordon) -> Cordon {
    Cordon {
        reason: capped(&cordon.reason, MAX_CORDON_REASON_CHARS),
        by: cordon.by.as_deref().map(|b| capped(b, MAX_OWNER_CHARS)),
        since: cordon.since.clone(),
        until: cordon.until.clone(),
    }
}

/// A label map as the plan reads it: sorted pairs in one allocation of their exact size.
/// Every cluster and every flavor has one, kept in the caches for as long as the object
/// lives; a `BTreeMap` takes a 0.5 kB node even for the one label most of them carry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels(Box<[(String, String)]>);

impl Labels {
    pub fn get(&self, key: &str) -> Option<&String> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .map(|i| &self.0[i].1)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The labels, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &String)> {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl From<&BTreeMap<String, String>> for Labels {
    fn from(map: &BTreeMap<String, String>) -> Self {
        // A map iterates in key order: what `get` searches.
        Self(map.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
    }
}

impl From<BTreeMap<String, String>> for Labels {
    fn from(map: BTreeMap<String, String>) -> Self {
        Self(map.into_iter().collect())
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
    pub node_labels: Labels,
    /// The pool label keys kueue-sync applied last ([`POOL_LABEL_KEYS_ANNOTATION`]).
    pub pool_label_keys: Option<String>,
    /// `spec.nodeTaints` holds the cordon taint ([`CORDON_TAINT_KEY`]).
    pub cordon_tainted: bool,
    /// Has the shape of a flavor made by the Python controller Hearth replaces: neither
    /// of Hearth's labels, and node labels exactly `{fournos.dev/cluster: <its name>}`.
    pub legacy: bool,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// Carries Kueue's [`RESOURCE_IN_USE_FINALIZER`].
    pub in_use: bool,
    /// Adopted from the Python Hearth ([`ADOPTED_FROM_ANNOTATION`] =
    /// [`ADOPTED_FROM_PYTHON`]) for the FournosCluster of this uid
    /// ([`ADOPTED_CLUSTER_UID_ANNOTATION`]; empty when the adoption named none).
    pub adopted_for: Option<String>,
}

impl ObservedFlavor {
    /// `flavor` as seen by the Hearth whose FournosClusters live in `namespace`.
    pub fn from_flavor(flavor: &ResourceFlavor, namespace: &str) -> Self {
        let meta = &flavor.metadata;
        let label = |key: &str| meta.labels.as_ref().and_then(|l| l.get(key));
        let annotation = |key: &str| meta.annotations.as_ref().and_then(|a| a.get(key));
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
            node_labels: Labels::from(&flavor.spec.node_labels),
            pool_label_keys: annotation(POOL_LABEL_KEYS_ANNOTATION).cloned(),
            cordon_tainted: flavor
                .spec
                .node_taints
                .iter()
                .any(|t| t.key == CORDON_TAINT_KEY),
            deleting: meta.deletion_timestamp.is_some(),
            adopted_for: (annotation(ADOPTED_FROM_ANNOTATION)
                == Some(&ADOPTED_FROM_PYTHON.to_owned()))
            .then(|| {
                annotation(ADOPTED_CLUSTER_UID_ANNOTATION)
                    .cloned()
                    .unwrap_or_default()
            }),
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

    /// Whether `cluster`, whose flavor this is, is *under takeover* from the Python
    /// Hearth: its flavor is a legacy one adopted in this very round ([`Self::is_adopted`]),
    /// or one kueue-sync adopted earlier for this same FournosCluster (the adoption
    /// annotations name its uid). Only then does its legacy `spec.hardware` count, until
    /// discovery has counted ([`ObservedCluster::quota_gpus`]).
    ///
    /// Why the flavor carries the mark: `spec.hardware` is in the FournosCluster's spec, so
    /// anyone who may edit or create a FournosCluster could claim GPUs with it, and the
    /// Python Hearth's `kubeconfigStatus: Valid` can be imitated just as well. A
    /// ResourceFlavor is cluster-scoped and only the platform and kueue-sync write it: the
    /// legacy flavor (made by the Python Hearth, with its entry in the queue) is the
    /// evidence that the cluster was the Python Hearth's, and the annotations kueue-sync adds
    /// when adopting keep that evidence after the flavor carries Hearth's labels. The uid
    /// ties it to the FournosCluster it was adopted for: one deleted and created again under
    /// the same name (while the flavor still exists) is a new cluster, not under takeover.
    pub fn under_takeover(
        &self,
        cluster: &ObservedCluster,
        live_clusters: &BTreeSet<&str>,
    ) -> bool {
        self.is_adopted(live_clusters)
            || (self.managed_by_hearth
                && !self.deleting
                && cluster
                    .uid
                    .as_deref()
                    .is_some_and(|uid| !uid.is_empty() && self.adopted_for.as_deref() == Some(uid)))
    }
}
