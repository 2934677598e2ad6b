//! What the plan's parts share, below all of them: the settings, Kueue's limits, the
//! plan's output, and the name checks.

use std::collections::BTreeMap;

use hearth_api::KueueStatus;
use hearth_api::conditions::DesiredCondition;
use hearth_api::kueue::{ClusterQueueSpec, ResourceFlavor};
use hearth_api::names::{is_dns_label, is_label_name};
use hearth_api::reasons::{KueueSyncedReason, SchedulableReason};

use super::cordon::CordonState;

/// Kueue: at most this many flavors in one resource group.
pub const MAX_FLAVORS_PER_GROUP: usize = 64;
/// Kueue: at most this many flavors across a ClusterQueue's resource groups.
pub const MAX_FLAVORS_PER_QUEUE: usize = 256;
/// Kueue: at most this many covered resources in one resource group.
pub const MAX_COVERED_RESOURCES: usize = 64;
/// Kueue: at most this many resource groups in a ClusterQueue.
pub const MAX_RESOURCE_GROUPS: usize = 16;

/// The settings the plan depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanSettings {
    /// Namespace of the FournosClusters (`HEARTH_NAMESPACE`). Hearth's flavors carry it
    /// in [`CLUSTER_NAMESPACE_LABEL`](hearth_api::names::CLUSTER_NAMESPACE_LABEL); flavors of a Hearth in another namespace are
    /// foreign.
    pub namespace: String,
    /// Name of the shared ClusterQueue (`HEARTH_KUEUE_CLUSTER_QUEUE_NAME`).
    pub cluster_queue: String,
    /// Prefix of GPU quota resources (`HEARTH_GPU_RESOURCE_PREFIX`), e.g. `fournos/gpu-`.
    /// Must not be empty.
    pub gpu_resource_prefix: String,
    /// `fournos/cluster-slot` quota of every cluster.
    pub cluster_slots: i64,
    /// FournosCluster label keys copied into every Hearth flavor's node labels
    /// (`HEARTH_POOL_LABEL_KEYS`; at most [`MAX_POOL_LABEL_KEYS`](hearth_api::names::MAX_POOL_LABEL_KEYS), never
    /// `fournos.dev/cluster`).
    pub pool_label_keys: Vec<String>,
}

impl PlanSettings {
    /// The quota resource of GPU model `short_name`.
    pub fn gpu_resource(&self, short_name: &str) -> String {
        format!("{}{short_name}", self.gpu_resource_prefix)
    }
}

/// What to write, and what each cluster's status should say.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Flavors of clusters that have none yet and whose create is not under way. Create
    /// (server-side apply) them at any time: no entry names a flavor before the cache
    /// shows it, so nothing waits for these writes but the entries of their clusters.
    pub flavors_to_create: Vec<ResourceFlavor>,
    /// Hearth flavors whose `fournos.dev/cluster` node label is wrong: the desired
    /// object, to server-side apply.
    pub flavors_to_repair: Vec<ResourceFlavor>,
    /// Legacy flavors adopted in this round: the desired object (Hearth's labels, the
    /// node label the legacy flavor already has, and the adoption annotations that mark
    /// its cluster as under takeover), to server-side apply. The
    /// flavor is Hearth's already in this plan (its entry is planned as Hearth's).
    pub flavors_to_adopt: Vec<ResourceFlavor>,
    /// Hearth flavors with no live cluster and no ClusterQueue reference. Delete them
    /// after the ClusterQueue write.
    pub flavors_to_delete: Vec<String>,
    /// The new ClusterQueue spec; `None` when nothing changes. Write it with the
    /// `resourceVersion` of the observed queue; on conflict, re-observe and re-plan.
    pub cluster_queue: Option<ClusterQueueSpec>,
    /// Per live cluster: its `status.kueue` and `KueueSynced` condition.
    pub clusters: BTreeMap<String, ClusterSync>,
    /// Flavors Hearth cannot clean up yet, for logs and follow-up.
    pub notes: Vec<FlavorNote>,
}

impl Plan {
    /// Whether the plan writes no Kueue object.
    pub fn writes_nothing(&self) -> bool {
        self.flavors_to_create.is_empty()
            && self.flavors_to_repair.is_empty()
            && self.flavors_to_adopt.is_empty()
            && self.flavors_to_delete.is_empty()
            && self.cluster_queue.is_none()
    }

    /// Whether the plan writes nothing at all, Kueue objects or statuses.
    pub fn is_noop(&self) -> bool {
        self.writes_nothing() && self.clusters.values().all(|c| !c.status_changed)
    }

    /// Whether applying this plan leaves work for a later round: entries of flavors
    /// created now, deletes of flavors whose entry is removed now. The watches on
    /// flavors and the ClusterQueue trigger that round anyway; this says to expect it.
    pub fn expects_another_round(&self) -> bool {
        !self.flavors_to_create.is_empty()
            || self
                .notes
                .iter()
                .any(|n| matches!(n, FlavorNote::DeleteAfterEntryRemoval(_)))
    }
}

/// What a cluster's status should say after the plan is applied.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterSync {
    /// `status.kueue`: `None` until the cluster has an entry in the ClusterQueue.
    pub kueue: Option<KueueStatus>,
    /// The `KueueSynced` condition; turn it into a condition with
    /// [`hearth_api::conditions::next_condition`].
    pub condition: DesiredCondition<KueueSyncedReason>,
    /// The `Schedulable` condition (cordons).
    pub schedulable: DesiredCondition<SchedulableReason>,
    /// Where the cluster's cordon is; its count is `status.admittedWorkloads`.
    pub cordon: CordonState,
    /// Whether the status differs from what the cluster has now.
    pub status_changed: bool,
}

impl ClusterSync {
    pub fn reason(&self) -> KueueSyncedReason {
        self.condition.reason
    }
}

/// A Hearth flavor that cannot be cleaned up in this round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlavorNote {
    /// No live cluster; this plan removes its entry, the delete follows next round.
    DeleteAfterEntryRemoval(String),
    /// No live cluster, but a resource group Hearth does not manage lists it: it stays
    /// until someone removes it from that group.
    ReferencedByForeignGroup(String),
    /// Being deleted, not referenced by Hearth's ClusterQueue, but Kueue still holds it
    /// with its `resource-in-use` finalizer (another ClusterQueue or a Cohort may
    /// reference it).
    HeldByKueue(String),
}

/// How far a live cluster's flavor is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlavorState {
    /// Exists, is Hearth's, not being deleted: the cluster may have an entry.
    Ready,
    /// Not in the cache: created by this plan, or its create is under way. The cluster
    /// may reserve a place.
    Creating,
    /// Hearth's, but Terminating.
    Deleting,
    /// A flavor of that name exists without Hearth's label.
    NotManaged,
    /// The cluster's name cannot be the value of the `fournos.dev/cluster` node label.
    InvalidName,
}

/// Whether `s` is a valid Kubernetes label value (at most 63 characters, alphanumeric
/// at both ends, `-`, `_`, `.` inside).
pub(crate) fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_label_name(s)
}

/// Whether `s` is a valid resource name (a qualified name, as Kueue checks
/// `coveredResources`): an optional DNS-subdomain prefix and `/`, then a label name.
pub(crate) fn is_resource_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, s),
    };
    let prefix_ok =
        prefix.is_none_or(|p| !p.is_empty() && p.len() <= 253 && p.split('.').all(is_dns_label));
    prefix_ok && is_label_name(name)
}
