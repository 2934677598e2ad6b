//! The lock plan: from the state a cluster's lock is in ([`crate::state`]) to the
//! actions that make it true and the status that says where it stands, the words made
//! from the state's typed facts. Pure: the reconciler observes, calls [`plan_lock`]
//! ([`classify`] then [`plan`]), and applies the result. The rules are the state table
//! in the crate docs, one [`LockState`] per row.

use std::time::Duration;

use hearth_api::names::{CLUSTER_NODE_LABEL, CLUSTER_SLOT_RESOURCE, lock_sentinel_name};
use hearth_api::reasons::LockedReason;
use hearth_api::text::{bounded, quoted};
use hearth_api::{ExpiredLock, FournosClusterStatus};
use hearth_runtime::events::Event;
use k8s_openapi::jiff::Timestamp;

use crate::fournos_lock::{
    FOURNOS_EXCLUSIVE_SLOTS, PICKUP_GRACE, REPAIR_GRACE, WORKLOAD_LOST_EVENT,
};
pub use crate::state::{
    Change, Doubt, FournosView, Kept, Lock, LockState, Lost, Mismatch, Refusal, Wait, classify,
};

/// Condition reasons of `Locked` (see [`hearth_api::reasons::LockedReason`]).
pub mod reasons {
    use hearth_api::reasons::LockedReason as L;
    pub const HELD: &str = L::Held.as_str();
    pub const WAITING_FOR_ADMISSION: &str = L::WaitingForAdmission.as_str();
    pub const WAITING_FOR_FLAVOR: &str = L::WaitingForFlavor.as_str();
    pub const EXPIRED: &str = L::Expired.as_str();
    pub const RELEASED: &str = L::Released.as_str();
    pub const INVALID_OWNER: &str = L::InvalidOwner.as_str();
    pub const SENTINEL_CREATE_FAILED: &str = L::SentinelCreateFailed.as_str();
}

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

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockAction {
    CreateSentinel {
        name: String,
        owner: String,
    },
    DeleteSentinel {
        name: String,
    },
    /// Clear `spec.owner` if it still is `owner`.
    ClearOwner {
        owner: String,
    },
}

/// What lock-manager's Events say they were doing.
pub const ACTION: &str = "Lock";

/// The `Locked` condition a state says: a typed reason and its words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockCondition {
    pub reason: LockedReason,
    pub message: String,
}

/// The status fields hearth-lock-manager owns.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LockStatus {
    pub locked: bool,
    pub lock_job_name: Option<String>,
    /// The UID of the kept sentinel; for a sentinel created now, the apply step fills it
    /// in from the create's answer.
    pub lock_job_uid: Option<String>,
    /// The proven Workload that holds the cluster's slots, while the lock is held.
    pub lock_workload_uid: Option<String>,
    pub owner_set_at: Option<Timestamp>,
    pub lock_expires_at: Option<Timestamp>,
    pub lock_owner: Option<String>,
    /// The lock that ran out, in the `Expired` states.
    pub expired_lock: Option<ExpiredLock>,
    /// `None` for a cluster that was never locked: nothing to say, nothing to write.
    pub condition: Option<LockCondition>,
    /// Who else holds the cluster's slots ([`crate::holders`]); filled in by the
    /// reconciler from the Workload cache, whatever the lock's state.
    pub slot_holders: Vec<hearth_api::SlotHolder>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockPlan {
    /// The state the plan makes true.
    pub state: LockState,
    /// The cluster's name, for the words of a state the apply step enters.
    pub cluster: String,
    pub actions: Vec<LockAction>,
    pub events: Vec<Event>,
    pub status: LockStatus,
    /// When to look again even if nothing changes: the expiry, or sooner when a
    /// `fournosjob` grace runs out.
    pub requeue_after: Option<Duration>,
    /// A create held back because something of the sentinel's name is still there
    /// (`fournosjob`: a Workload Fournos made). The apply step looks up that name: if an
    /// object this Hearth did not make holds it, the lock says `SentinelNameTaken`.
    pub blocked_create: Option<String>,
}

impl LockPlan {
    /// The status to write instead when the apply step could not create the sentinel:
    /// the state [`LockState::refused`] leads to, with the lock's term and the slot
    /// holders kept. `None` when this plan's state has no lock.
    pub fn refused(&self, refusal: Refusal) -> Option<LockStatus> {
        let state = self.state.refused(refusal)?;
        Some(LockStatus {
            slot_holders: self.status.slot_holders.clone(),
            ..status_of(&state, &self.cluster)
        })
    }
}

fn fmt_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Longest text taken from Kueue or Fournos into a message.
const MAX_QUOTED: usize = 300;
/// Longest message of a `SentinelCreateFailed` condition.
const MAX_CREATE_FAILED_CHARS: usize = 1024;

/// Deletes every live sentinel of ours except the one named `keep`. An object that is not
/// ours by its UID is never deleted, whatever its labels say: anyone who may patch an
/// object in the execution namespace may give it the labels, and a label must not turn
/// into a delete. One of ours that someone changed (no longer proven) is deleted: kept
/// by nothing, it would hold whatever it now asks for until someone else removed it.
fn delete_all_but(sentinels: &[SentinelView], keep: Option<&str>) -> Vec<LockAction> {
    sentinels
        .iter()
        .filter(|s| {
            s.ours && s.state != SentinelState::Terminating && Some(s.name.as_str()) != keep
        })
        .map(|s| LockAction::DeleteSentinel {
            name: s.name.clone(),
        })
        .collect()
}

/// The sentinel a state keeps (and its status names), unless it replaces it.
fn kept_name(state: &LockState) -> Option<&Kept> {
    match state {
        LockState::Misplaced {
            mismatch: Mismatch::WrongSlots { .. },
            ..
        }
        | LockState::WorkloadLost { .. } => None,
        _ => state.kept(),
    }
}

/// The status slice that says `state`.
fn status_of(state: &LockState, cluster: &str) -> LockStatus {
    let condition = message(state, cluster).map(|message| LockCondition {
        reason: state.reason().expect("a state with words has a reason"),
        message,
    });
    let expired_lock = match state {
        LockState::Expired { lock, .. } => Some(lock.clone()),
        LockState::Expiring { expired, .. } => Some(expired.clone()),
        _ => None,
    };
    let Some(lock) = state.lock() else {
        return LockStatus {
            condition,
            expired_lock,
            ..LockStatus::default()
        };
    };
    // A sentinel is named only with the UID that proves it (a created one gets both from
    // the apply step): a name alone would let a later reconcile adopt whatever holds it.
    let kept = match state {
        // WorkloadLost names the sentinel it replaces until the new one exists.
        LockState::WorkloadLost { sentinel, .. } => Some(sentinel),
        _ => kept_name(state),
    };
    let (lock_job_name, lock_job_uid) = kept
        .and_then(|k| Some((Some(k.name.clone()), Some(k.uid.clone()?))))
        .unwrap_or_default();
    let lock_workload_uid = match state {
        LockState::Held { workload, .. } => workload.clone(),
        _ => None,
    };
    LockStatus {
        locked: matches!(state, LockState::Held { .. }),
        lock_job_name,
        lock_job_uid,
        lock_workload_uid,
        owner_set_at: Some(lock.owner_set_at),
        lock_expires_at: lock.expires_at,
        lock_owner: Some(lock.owner.clone()),
        expired_lock,
        condition,
        slot_holders: Vec::new(),
    }
}

/// What a release still waits for, in words.
fn waits_text(waits: &[Wait]) -> String {
    let words: Vec<String> = waits
        .iter()
        .map(|w| match w {
            Wait::JobDeleting {
                job,
                since,
                finalizers,
            } => format!(
                "Fournos to let FournosJob {job} go (deleting since {}, finalizers: {}; is Fournos running?)",
                fmt_time(*since),
                if finalizers.is_empty() {
                    "none".to_owned()
                } else {
                    bounded(&finalizers.join(", "), MAX_QUOTED)
                }
            ),
            Wait::JobToDelete { job } => format!("FournosJob {job} to be deleted"),
            Wait::WorkloadHoldsQuota { workload } => format!(
                "Workload {workload} to be deleted by the garbage collector once its FournosJob is gone; it still holds the cluster's slots"
            ),
        })
        .collect();
    words.join("; ")
}

/// What `Locked` says once a lock ran out, from the typed record of it, and what the
/// release still waits for.
fn expired_message(lock: &ExpiredLock, waits: &[Wait]) -> String {
    let ttl = lock
        .ttl
        .as_deref()
        .map(|t| format!(" (ttl {t})"))
        .unwrap_or_default();
    let still = if waits.is_empty() {
        String::new()
    } else {
        format!(" Still releasing: waiting for {}.", waits_text(waits))
    };
    format!(
        "The lock of {} expired at {}{ttl}; the cluster was released and spec.owner cleared.{still}",
        lock.owner,
        fmt_time(lock.expired_at.0)
    )
}

fn lost_text(lost: &Lost) -> String {
    let said = |m: &Option<String>| {
        m.as_deref()
            .map(|m| format!(": {}", bounded(m, MAX_QUOTED)))
            .unwrap_or_default()
    };
    match lost {
        Lost::NoWorkload => "there is no Workload of its name (deleted, or never made)".to_owned(),
        Lost::Finished { workload } => format!("its Workload {workload} is finished"),
        Lost::Evicted { workload, said: s } => {
            format!("Kueue evicted its Workload {workload}{}", said(s))
        }
        Lost::NotAdmitted { workload, said: s } => {
            format!("its Workload {workload} is not admitted{}", said(s))
        }
        Lost::Changed { workload, change } => format!(
            "its Workload {workload} is not as Fournos made it ({}): someone changed it while it waited for quota",
            match change {
                Change::Pinned { to: Some(to) } =>
                    format!("it is pinned to cluster {}", bounded(to, MAX_QUOTED)),
                Change::Pinned { to: None } =>
                    format!("it is pinned to no cluster by {CLUSTER_NODE_LABEL}"),
                Change::Slots { holds } => format!(
                    "Kueue admitted it with {holds} {CLUSTER_SLOT_RESOURCE}, and Fournos asks {FOURNOS_EXCLUSIVE_SLOTS} for a lock"
                ),
            }
        ),
    }
}

fn doubt_text(doubt: &Doubt, job: &str) -> String {
    let found = |v: &Option<String>| {
        v.as_deref()
            .map_or_else(|| "none".to_owned(), |v| quoted(v, MAX_QUOTED))
    };
    match doubt {
        Doubt::Label { found: f } => format!(
            "it is not labelled {}={job} (found {})",
            crate::fournos_lock::JOB_NAME_LABEL,
            found(f)
        ),
        Doubt::Owner { found: f } => format!(
            "its owner is not FournosJob {job} by UID (found {})",
            found(f)
        ),
        Doubt::Older {
            created,
            job_created,
        } => format!(
            "it was created at {}, before the sentinel ({})",
            fmt_time(*created),
            fmt_time(*job_created)
        ),
        Doubt::Uncounted => format!(
            "Kueue's count of the {CLUSTER_SLOT_RESOURCE} it holds cannot be read (status.admission.podSetAssignments[].resourceUsage)"
        ),
    }
}

/// The words of `Locked` in `state`; `None` for a never-locked cluster.
fn message(state: &LockState, cluster: &str) -> Option<String> {
    let Some(lock) = state.lock() else {
        return match state {
            LockState::NeverLocked => None,
            LockState::Released { deleting: true } => {
                Some("The cluster is being deleted; its lock was released.".to_owned())
            }
            LockState::Released { deleting: false } => {
                Some("No owner: the cluster is not locked. Set spec.owner to lock it.".to_owned())
            }
            LockState::Releasing { waits } => Some(format!(
                "The lock is being released: waiting for {}.",
                waits_text(waits)
            )),
            LockState::Expired { lock, waits } => Some(expired_message(lock, waits)),
            LockState::InvalidOwner { problem } => Some(format!(
                "{problem}. The cluster is not locked until spec.owner is valid."
            )),
            _ => unreachable!("every state with a lock has one"),
        };
    };
    let owner = &lock.owner;
    let canonical = lock_sentinel_name(cluster);
    let note = lock
        .ttl_problem
        .as_deref()
        .map(|e| format!(" The ttl is ignored ({e}); set a valid ttl or remove it."))
        .unwrap_or_default();
    let until = lock
        .expires_at
        .map(|t| format!(" until {}", fmt_time(t)))
        .unwrap_or_default();
    Some(match state {
        LockState::Expiring { expired, waits, .. } => expired_message(expired, waits),
        LockState::WaitingForFlavor { .. } => format!(
            "Waiting for hearth-kueue-sync to publish the cluster's ResourceFlavor and quota (status.kueue) before taking the lock for {owner}; check the KueueSynced condition.{note}"
        ),
        LockState::Replacing { waits, .. } | LockState::Creating { waits, .. }
            if !waits.is_empty() =>
        {
            format!(
                "Replacing the previous sentinel: waiting for {}.{note}",
                waits_text(waits)
            )
        }
        LockState::Replacing { .. } => {
            format!("Replacing the previous sentinel {canonical} with one for {owner}.{note}")
        }
        LockState::Creating { .. } => format!(
            "Created sentinel {canonical} for {owner}; waiting for Kueue to admit it.{note}"
        ),
        LockState::OldWorkload {
            sentinel,
            workload,
            holds_quota,
            leftover,
            ..
        } => {
            let holds = if *holds_quota {
                "; it still holds the cluster's slots"
            } else {
                ""
            };
            if *leftover {
                format!(
                    "Waiting for the previous lock's Workload {workload} to be deleted by the garbage collector once its FournosJob is gone{holds}, before creating sentinel {sentinel} for {owner}: Fournos would adopt a Workload of that name. If it stays, delete it (kubectl delete workload {workload} in the execution namespace).{note}"
                )
            } else {
                format!(
                    "Workload {workload} in the execution namespace has the name Fournos gives the Workload of sentinel {sentinel}, and was not left by a lock{holds}: Fournos would adopt it, so the cluster is not locked for {owner}. Delete it (kubectl delete workload {workload} in the execution namespace); lock-manager then takes the lock on its own.{note}"
                )
            }
        }
        LockState::Unproven {
            sentinel,
            workload,
            doubt,
            ..
        } => format!(
            "Workload {workload} is admitted for sentinel {} but is not proven to be the one Fournos made for it: {}. It is not trusted to hold the cluster, so the cluster is not locked for {owner}. Delete the Workload (kubectl delete workload {workload} in the execution namespace); lock-manager then replaces the sentinel.{note}",
            sentinel.name,
            doubt_text(doubt, &sentinel.name),
        ),
        LockState::NameTaken {
            refusal:
                Refusal::NameTaken {
                    kind,
                    namespace,
                    name,
                    why,
                },
            ..
        } => format!(
            "{kind} {namespace}/{name} already exists and is not this Hearth's sentinel ({why}), so the cluster cannot be locked for {owner} under that name. If it is not in use, delete it; lock-manager looks again (at least once a minute) and then takes the lock on its own."
        ),
        LockState::CreateFailed {
            refusal: Refusal::CreateFailed { error },
            ..
        } => bounded(
            &format!(
                "{error}. The lock is not held; Hearth tries again with backoff (a 422 means the \
                 sentinel is invalid: check spec.owner)."
            ),
            MAX_CREATE_FAILED_CHARS,
        ),
        LockState::NameTaken { .. } | LockState::CreateFailed { .. } => {
            unreachable!("LockState::refused pairs each refusal with its state")
        }
        LockState::Waiting {
            sentinel,
            why,
            until_uncordon,
            ..
        } => format!(
            "Sentinel {} waits for Kueue to admit it{}. {}{note}",
            sentinel.name,
            why.as_deref().map(|w| format!(": {w}")).unwrap_or_default(),
            if *until_uncordon {
                format!(
                    "The cluster is cordoned (spec.cordon) and the lock's Workload does not \
                     tolerate the cordon: the lock waits for `kubectl fournos uncordon {cluster}`."
                )
            } else {
                "The lock is held once running work on the cluster finishes.".to_owned()
            }
        ),
        LockState::NotPickedUp {
            sentinel,
            created,
            fournos_said,
            ..
        } => format!(
            // The creation time, not the seconds waited: the message must not change
            // from one reconcile to the next (each change is a status write).
            "Fournos has not picked up sentinel {} (no status.phase since it was created at {}, over {}s ago).{} Check that Fournos runs and watches this namespace, and its log.{note}",
            sentinel.name,
            fmt_time(*created),
            PICKUP_GRACE.as_secs(),
            fournos_said
                .as_deref()
                .map(|m| format!(" Fournos said: {}", bounded(m, MAX_QUOTED)))
                .unwrap_or_default(),
        ),
        LockState::AwaitingWorkload {
            sentinel, phase, ..
        } => format!(
            "Sentinel {} says {} but {} yet.{note}",
            sentinel.name,
            phase.as_deref().unwrap_or("nothing"),
            lost_text(&Lost::NoWorkload)
        ),
        LockState::WorkloadLost {
            sentinel,
            phase,
            lost,
            ..
        } => format!(
            "Sentinel {} says {} but {}: the cluster is not held. Replacing the sentinel so that Fournos makes a new Workload.{note}",
            sentinel.name,
            phase.as_deref().unwrap_or("nothing"),
            lost_text(lost)
        ),
        LockState::Held { sentinel, .. } => format!(
            "Locked for {owner}{until}: sentinel {} holds all of the cluster's slots.{note}",
            sentinel.name
        ),
        LockState::Misplaced {
            sentinel, mismatch, ..
        } => match mismatch {
            Mismatch::WrongFlavor { workload, why } => format!(
                "{} is admitted but {why}: it does not hold this cluster, so the cluster is not locked for {owner}. Check which ResourceFlavors select {CLUSTER_NODE_LABEL}={cluster} and the ClusterQueue's cohort.{note}",
                match workload {
                    Some(w) => format!("Workload {w} of sentinel {}", sentinel.name),
                    None => format!("Sentinel {}", sentinel.name),
                }
            ),
            // Replaced by one that asks for every slot: it waits for admission again.
            Mismatch::WrongSlots { why } => format!(
                "Sentinel {} does not lock the cluster: {why}. Replacing it with one that requests exactly the cluster's slots; the cluster is not locked for {owner} meanwhile.{note}",
                sentinel.name
            ),
            Mismatch::FournosTooFew {
                workload,
                holds,
                cluster,
            } => format!(
                "Workload {workload} of sentinel {} holds {holds} {CLUSTER_SLOT_RESOURCE} but the cluster has {cluster}: other jobs can still be admitted, so the cluster is not locked. Fournos requests {FOURNOS_EXCLUSIVE_SLOTS} for a lock: set HEARTH_CLUSTER_SLOTS={FOURNOS_EXCLUSIVE_SLOTS} on hearth-kueue-sync.{note}",
                sentinel.name
            ),
            Mismatch::FournosAsksOther { cluster } => format!(
                "The cluster has {cluster} {CLUSTER_SLOT_RESOURCE} but Fournos requests {FOURNOS_EXCLUSIVE_SLOTS} for a lock, {}: set HEARTH_CLUSTER_SLOTS={FOURNOS_EXCLUSIVE_SLOTS} on hearth-kueue-sync.{note}",
                if *cluster > FOURNOS_EXCLUSIVE_SLOTS {
                    "which would leave room for other jobs"
                } else {
                    "more than the cluster's quota, so Kueue can never admit it"
                }
            ),
        },
        LockState::NeverLocked
        | LockState::Released { .. }
        | LockState::Releasing { .. }
        | LockState::Expired { .. }
        | LockState::InvalidOwner { .. } => unreachable!("states without a lock are said above"),
    })
}

/// The actions, Events and status that make `state` true.
pub fn plan(
    state: &LockState,
    cluster: &ClusterView<'_>,
    sentinels: &[SentinelView],
    now: Timestamp,
) -> LockPlan {
    let status = status_of(state, cluster.name);
    let mut actions = delete_all_but(sentinels, kept_name(state).map(|k| k.name.as_str()));
    let mut events = vec![];
    let event_message = || {
        status
            .condition
            .as_ref()
            .map(|c| c.message.clone())
            .unwrap_or_default()
    };
    match state {
        LockState::Expiring { lock, .. } => {
            actions.push(LockAction::ClearOwner {
                owner: lock.owner.clone(),
            });
            events.push(Event::normal("LockExpired", ACTION, event_message()));
        }
        LockState::Creating { lock, .. } => actions.push(LockAction::CreateSentinel {
            name: lock_sentinel_name(cluster.name),
            owner: lock.owner.clone(),
        }),
        LockState::WorkloadLost { .. } => {
            events.push(Event::warning(WORKLOAD_LOST_EVENT, ACTION, event_message()))
        }
        _ => {}
    }
    let until_expiry = state
        .lock()
        .filter(|_| !matches!(state, LockState::Expiring { .. }))
        .and_then(|lock| lock.expires_at)
        .map(|exp| Duration::try_from(exp.duration_since(now)).unwrap_or(Duration::ZERO));
    let recheck = match state {
        LockState::Waiting { recheck_in, .. } => *recheck_in,
        LockState::AwaitingWorkload { .. } => Some(REPAIR_GRACE),
        _ => None,
    };
    let requeue_after = match (until_expiry, recheck) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let blocked_create = match state {
        LockState::OldWorkload { sentinel, .. } => Some(sentinel.clone()),
        _ => None,
    };
    LockPlan {
        state: state.clone(),
        cluster: cluster.name.to_owned(),
        actions,
        events,
        status,
        requeue_after,
        blocked_create,
    }
}

/// [`classify`] then [`plan`]. `fournos`: what a `fournosjob` lock-manager sees of the
/// FournosJobs and Workloads behind the sentinels; `None` for `workload` sentinels.
pub fn plan_lock(
    cluster: &ClusterView<'_>,
    sentinels: &[SentinelView],
    fournos: Option<&FournosView<'_>>,
    now: Timestamp,
) -> LockPlan {
    let state = classify(cluster, sentinels, fournos, now);
    plan(&state, cluster, sentinels, now)
}

#[cfg(test)]
mod tests;
