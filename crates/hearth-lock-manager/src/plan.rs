//! The lock plan: from the state a cluster's lock is in ([`crate::state`]) to the
//! actions that make it true and the status that says where it stands, the words made
//! from the state's typed facts. Pure: the reconciler observes, calls [`plan_lock`]
//! ([`classify`] then [`plan`]), and applies the result. The rules are the state table
//! in the crate docs, one [`LockState`] per row.

use std::time::Duration;

use hearth_api::ExpiredLock;
use hearth_api::names::lock_sentinel_name;
use hearth_api::reasons::LockedReason;
use hearth_runtime::events::Event;
use k8s_openapi::jiff::Timestamp;

use crate::fournos::REPAIR_GRACE;
use crate::state::{Kept, LockState, Mismatch, Refusal, classify};
use crate::views::{ClusterView, FournosView, SentinelState, SentinelView};

mod message;
use message::message;

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

/// What `Locked` says in `state`: `None` for a never-locked cluster, the only state
/// without a reason or words.
fn condition(state: &LockState, cluster: &str) -> Option<LockCondition> {
    Some(LockCondition {
        reason: state.reason()?,
        message: message(state, cluster)?,
    })
}

/// The status slice that says `state`.
fn status_of(state: &LockState, cluster: &str) -> LockStatus {
    let condition = condition(state, cluster);
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

/// Event recorded when a held lock's Workload is found missing or evicted.
pub const WORKLOAD_LOST_EVENT: &str = "LockWorkloadLost";

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
