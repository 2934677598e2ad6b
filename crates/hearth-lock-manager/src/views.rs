//! What lock-manager's rules read: the observed cluster, its sentinels and, for
//! `fournosjob`, the FournosJobs and Workloads behind them, as plain views, and what a
//! sentinel must hold to lock the cluster ([`Expect`]). The bottom of the crate: the
//! observers ([`crate::sentinel`], [`crate::fournos_workloads`]) fill these in, the state
//! machine ([`crate::state`]) and the plan ([`crate::plan`]) read them. Imports nothing
//! of the crate.

use hearth_api::FournosClusterStatus;
use hearth_api::names::CLUSTER_SLOT_RESOURCE;
use hearth_api::text::bounded;
use k8s_openapi::jiff::Timestamp;

/// What the plan needs to know about a FournosCluster.
#[derive(Clone, Debug)]
pub struct ClusterView<'a> {
    pub name: &'a str,
    pub owner: Option<&'a str>,
    pub ttl: Option<&'a str>,
    pub deleting: bool,
    /// `spec.cordon` is set: the flavor carries the cordon taint.
    pub cordoned: bool,
    pub status: &'a FournosClusterStatus,
}

/// Where a sentinel stands with Kueue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SentinelState {
    /// Admitted in the cluster's ClusterQueue on the cluster's flavor with all of its
    /// slots (for `fournosjob`: Fournos says it is admitted, which
    /// [`crate::state::classify`] checks against its Workload): it holds the cluster.
    Holding,
    /// Admitted, but what it holds is not all of this cluster.
    Misplaced(Misplaced),
    /// Not admitted yet; Kueue's own explanation when it gave one.
    Waiting(Option<String>),
    /// Being deleted.
    Terminating,
}

/// Why a `workload` sentinel does not hold its cluster, or cannot come to, with the
/// words to say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Misplaced {
    /// Admitted in another ClusterQueue or on another flavor (a foreign flavor with the
    /// same node label, cohort borrowing): replacing it would end the same way.
    WrongFlavor(String),
    /// Admitted with fewer slots than the cluster has (its slot setting was raised), or
    /// waiting with another number than the cluster has (which Kueue may never admit):
    /// it is replaced by one that asks for exactly the cluster's slots.
    WrongSlots(String),
}

/// A sentinel carrying this Hearth's labels for the cluster, as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentinelView {
    pub name: String,
    pub uid: Option<String>,
    pub owner: Option<String>,
    /// Its UID is the one lock-manager created (or adopted, or recorded) for this
    /// cluster: lock-manager may delete it, whatever it has become since.
    pub ours: bool,
    /// Ours, and still shaped as lock-manager built it. Only a proven sentinel can hold a
    /// lock; one that is ours but was changed is replaced, and any other object with the
    /// labels is left alone.
    pub proven: bool,
    pub state: SentinelState,
}

/// What a `fournosjob` lock-manager knows besides the sentinels: the FournosJobs behind
/// them and the Workloads Fournos made for them (what actually holds the slots).
#[derive(Clone, Copy, Debug, Default)]
pub struct FournosView<'a> {
    /// The cluster's sentinels, as FournosJobs.
    pub jobs: &'a [JobView],
    /// The Workloads of those jobs and of the cluster's canonical sentinel name.
    pub workloads: &'a [LockWorkloadView],
}

/// A FournosJob sentinel as the state machine needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobView {
    pub name: String,
    pub uid: Option<String>,
    pub created: Option<Timestamp>,
    pub phase: Option<String>,
    /// When Fournos's `WorkloadAdmitted` condition last became true.
    pub admitted_at: Option<Timestamp>,
    pub deleting_since: Option<Timestamp>,
    pub finalizers: Vec<String>,
    /// The last failure kopf recorded for one of Fournos's handlers.
    pub fournos_said: Option<String>,
}

/// A Workload of a lock's name in the execution namespace: the one Fournos made for a
/// FournosJob sentinel, or whatever else took that name (Fournos adopts any Workload of
/// the job's name). Everything here but Kueue's admission may be written by anyone who
/// may create Workloads; [`crate::state`] proves it before trusting it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockWorkloadView {
    pub name: String,
    pub uid: Option<String>,
    pub created: Option<Timestamp>,
    /// `fournos.dev/job-name`, as labelled.
    pub job: Option<String>,
    /// UID of the FournosJob its ownerReference names.
    pub owner_uid: Option<String>,
    /// The cluster its first pod set is pinned to (its node selector): Fournos pins a
    /// lock's Workload to the job's cluster.
    pub pinned: Option<String>,
    /// `fournos/cluster-slot` Kueue admitted it with on [`Self::slot_flavor`]
    /// ([`hearth_api::kueue::admitted_slots_on`]); `None` when not admitted or unreadable.
    pub slots: Option<i64>,
    /// Admitted in this ClusterQueue (`status.admission`).
    pub cluster_queue: Option<String>,
    /// `spec.queueName`: the LocalQueue it is submitted to.
    pub queue: Option<String>,
    /// `metadata.generation`: 1 until someone changes its spec (Fournos never does).
    pub generation: Option<i64>,
    /// The flavor its `fournos/cluster-slot` was admitted on.
    pub slot_flavor: Option<String>,
    pub admitted: bool,
    pub evicted: bool,
    pub finished: bool,
    /// Kueue counts its quota as used (reserved or admitted, not finished).
    pub holds_quota: bool,
    pub pods_ready: bool,
    /// Kueue's latest explanation, when it gave one.
    pub message: Option<String>,
    pub deleting: bool,
}

/// What a sentinel of a cluster must hold to lock it: all of the cluster's slots, in the
/// cluster's ClusterQueue, on the cluster's own ResourceFlavor (from `status.kueue`;
/// unknown parts are not checked), and, for a `workload` sentinel, submitted to the
/// LocalQueue lock-manager submits to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expect<'a> {
    pub cluster_queue: Option<&'a str>,
    pub flavor: Option<&'a str>,
    pub slots: Option<i64>,
    /// `HEARTH_LOCAL_QUEUE_NAME`, where the controller knows it.
    pub local_queue: Option<&'a str>,
}

impl<'a> Expect<'a> {
    pub fn of(status: &'a hearth_api::FournosClusterStatus) -> Self {
        let kueue = status.kueue.as_ref();
        Self {
            cluster_queue: kueue.map(|k| k.cluster_queue.as_str()),
            flavor: kueue.map(|k| k.flavor.as_str()),
            slots: kueue.map(|k| k.cluster_slots).filter(|s| *s > 0),
            local_queue: None,
        }
    }

    /// This, with the LocalQueue `workload` sentinels are submitted to.
    pub fn queued_in(self, local_queue: &'a str) -> Self {
        Self {
            local_queue: Some(local_queue),
            ..self
        }
    }

    /// Why an admission in `cluster_queue` with the slots on `flavor` does not hold this
    /// cluster, if it does not: `WrongFlavor` with the words to say.
    pub fn misplaced(&self, cluster_queue: &str, flavor: Option<&str>) -> Option<String> {
        if let Some(want) = self.cluster_queue.filter(|w| *w != cluster_queue) {
            return Some(format!(
                "it is admitted in ClusterQueue {} but the cluster's quota is in {want}",
                bounded(cluster_queue, MAX_QUOTED)
            ));
        }
        match (self.flavor, flavor) {
            (Some(want), Some(got)) if want != got => Some(format!(
                "its {CLUSTER_SLOT_RESOURCE} is admitted on ResourceFlavor {} but the cluster's flavor is {want}",
                bounded(got, MAX_QUOTED)
            )),
            (Some(want), None) => Some(format!(
                "its admission assigns no ResourceFlavor to {CLUSTER_SLOT_RESOURCE} (the cluster's flavor is {want})"
            )),
            _ => None,
        }
    }

    /// Why `requested` slots do not hold this cluster, if they do not.
    pub fn too_few(&self, requested: Option<i64>) -> Option<String> {
        let want = self.slots?;
        match requested {
            Some(n) if n >= want => None,
            Some(n) => Some(format!(
                "it holds {n} {CLUSTER_SLOT_RESOURCE} but the cluster has {want}, so other jobs can still be admitted there"
            )),
            None => Some(format!("it requests no {CLUSTER_SLOT_RESOURCE}")),
        }
    }
}

/// Longest untrusted text (from a person's or Kueue's object) quoted in a message.
pub const MAX_QUOTED: usize = 253;
