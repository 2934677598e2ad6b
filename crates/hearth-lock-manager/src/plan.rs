//! The lock plan: from a cluster's spec and status, its sentinels and the time, to
//! the actions that make the lock true and the status that says where it stands.
//! Pure: the reconciler observes, calls [`plan_lock`] ([`classify`] then [`plan`]), and
//! applies the result. The rules are the state table in the crate docs, one
//! [`LockState`] per row.

use std::time::Duration;

use hearth_api::FournosClusterStatus;
use hearth_api::conditions::DesiredCondition;
use hearth_api::duration::parse_duration;
use hearth_api::names::{CLUSTER_NODE_LABEL, condition_types::LOCKED, lock_sentinel_name};
use hearth_api::reasons::LockedReason;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Condition reasons of `Locked` (see [`hearth_api::reasons::LockedReason`]).
pub mod reasons {
    use hearth_api::reasons::LockedReason as L;
    pub const HELD: &str = L::Held.as_str();
    pub const WAITING_FOR_ADMISSION: &str = L::WaitingForAdmission.as_str();
    pub const WAITING_FOR_FLAVOR: &str = L::WaitingForFlavor.as_str();
    pub const EXPIRED: &str = L::Expired.as_str();
    pub const RELEASED: &str = L::Released.as_str();
    pub const INVALID_OWNER: &str = L::InvalidOwner.as_str();
    /// Written by the apply step.
    pub const SENTINEL_CREATE_FAILED: &str = L::SentinelCreateFailed.as_str();
}

/// What the plan needs to know about a FournosCluster.
#[derive(Clone, Debug)]
pub struct ClusterView<'a> {
    pub name: &'a str,
    pub owner: Option<&'a str>,
    pub ttl: Option<&'a str>,
    pub deleting: bool,
    pub status: &'a FournosClusterStatus,
}

/// Where a sentinel stands with Kueue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SentinelState {
    /// Admitted in the cluster's ClusterQueue on the cluster's flavor with all of its
    /// slots: it holds the cluster.
    Holding,
    /// Admitted, but what it holds is not all of this cluster.
    Misplaced(Misplaced),
    /// Not admitted yet; Kueue's own explanation when it gave one.
    Waiting(Option<String>),
    /// Being deleted.
    Terminating,
}

/// Why a sentinel does not hold its cluster, or cannot come to, with the words to say.
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
    /// Its UID is the one lock-manager created (or adopted) for this cluster, and it is
    /// still shaped as lock-manager built it. Only a proven sentinel can hold a lock;
    /// any other object with the labels is deleted.
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

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockEvent {
    pub reason: &'static str,
    pub message: String,
    pub warning: bool,
}

/// The status fields hearth-lock-manager owns.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LockStatus {
    pub locked: bool,
    pub lock_job_name: Option<String>,
    /// The UID of the kept sentinel; for a sentinel created now, the apply step fills it
    /// in from the create's answer.
    pub lock_job_uid: Option<String>,
    pub owner_set_at: Option<Timestamp>,
    pub lock_expires_at: Option<Timestamp>,
    pub lock_owner: Option<String>,
    /// `None` for a cluster that was never locked: nothing to say, nothing to write.
    pub condition: Option<DesiredCondition>,
    /// Who else holds the cluster's slots ([`crate::holders`]); filled in by the
    /// reconciler from the Workload cache, whatever the lock's state.
    pub slot_holders: Vec<hearth_api::SlotHolder>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockPlan {
    pub actions: Vec<LockAction>,
    pub events: Vec<LockEvent>,
    pub status: LockStatus,
    /// When to look again even if nothing changes: the expiry.
    pub requeue_after: Option<Duration>,
    /// A create held back because something of the sentinel's name is still there
    /// (`fournosjob`: a Workload Fournos made). The apply step looks up that name: if an
    /// object this Hearth did not make holds it, the lock says `SentinelNameTaken`.
    pub blocked_create: Option<String>,
}

fn ts(t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<Timestamp> {
    t.as_ref().map(|t| t.0)
}

fn fmt_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn delete_all(sentinels: &[SentinelView]) -> Vec<LockAction> {
    delete_all_but(sentinels, None)
}

/// Deletes every live sentinel except the one named `keep`.
fn delete_all_but(sentinels: &[SentinelView], keep: Option<&str>) -> Vec<LockAction> {
    sentinels
        .iter()
        .filter(|s| s.state != SentinelState::Terminating && Some(s.name.as_str()) != keep)
        .map(|s| LockAction::DeleteSentinel {
            name: s.name.clone(),
        })
        .collect()
}

/// The owner's lock and its term: when it started and when it runs out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lock {
    pub owner: String,
    /// Kept while the owner stays the same, reset when it changes.
    pub owner_set_at: Timestamp,
    /// `ownerSetAt + ttl`; `None` without a (valid) ttl.
    pub expires_at: Option<Timestamp>,
    /// Said in every message of the lock when the ttl is invalid and ignored.
    pub ttl_note: Option<String>,
}

/// Where a cluster's lock stands: one variant per row of the state table in the crate
/// docs. [`classify`] finds it, [`plan`] turns it into actions and status, and
/// [`crate::status::transition_events`] says which changes of it deserve an Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockState {
    /// No owner and nothing left of a lock: nothing to do or say.
    NeverLocked,
    /// No owner (or the cluster is being deleted) after a lock: every sentinel goes.
    Released { deleting: bool },
    /// The lock ran out before; the owner is cleared. Said until someone locks again.
    Expired { message: String },
    /// `spec.owner` is one the CRD refuses (stored by an older CRD): no lock is taken.
    InvalidOwner { problem: String },
    /// The ttl runs out now: every sentinel goes and `spec.owner` is cleared.
    Expiring { lock: Lock, expired_at: Timestamp },
    /// No sentinel of the owner, and kueue-sync has not published the cluster's flavor.
    WaitingForFlavor { lock: Lock },
    /// No sentinel of the owner, and another owner's sentinel still has the name: it
    /// goes first, its name is reused once it is gone.
    Replacing { lock: Lock },
    /// No sentinel of the owner: one is created.
    Creating { lock: Lock },
    /// The owner's sentinel waits for Kueue to admit it (Kueue's words, if any).
    Waiting {
        lock: Lock,
        sentinel: String,
        uid: Option<String>,
        why: Option<String>,
    },
    /// The owner's sentinel is admitted: it holds all of the cluster's slots.
    Held {
        lock: Lock,
        sentinel: String,
        uid: Option<String>,
    },
    /// The owner's sentinel is admitted, but not on all of this cluster.
    Misplaced {
        lock: Lock,
        sentinel: String,
        uid: Option<String>,
        problem: Misplaced,
    },
}

impl LockState {
    /// The `Locked` reason this state says; `None` for a never-locked cluster.
    pub fn reason(&self) -> Option<LockedReason> {
        Some(match self {
            Self::NeverLocked => return None,
            Self::Released { .. } => LockedReason::Released,
            Self::Expired { .. } | Self::Expiring { .. } => LockedReason::Expired,
            Self::InvalidOwner { .. } => LockedReason::InvalidOwner,
            Self::WaitingForFlavor { .. } => LockedReason::WaitingForFlavor,
            Self::Replacing { .. } | Self::Creating { .. } | Self::Waiting { .. } => {
                LockedReason::WaitingForAdmission
            }
            Self::Held { .. } => LockedReason::Held,
            Self::Misplaced {
                problem: Misplaced::WrongFlavor(_),
                ..
            } => LockedReason::WrongFlavor,
            Self::Misplaced {
                problem: Misplaced::WrongSlots(_),
                ..
            } => LockedReason::SlotsMismatch,
        })
    }

    fn lock(&self) -> Option<&Lock> {
        match self {
            Self::Expiring { lock, .. }
            | Self::WaitingForFlavor { lock }
            | Self::Replacing { lock }
            | Self::Creating { lock }
            | Self::Waiting { lock, .. }
            | Self::Held { lock, .. }
            | Self::Misplaced { lock, .. } => Some(lock),
            _ => None,
        }
    }
}

/// Where the lock of `cluster` stands, given its sentinels, at `now`.
pub fn classify(
    cluster: &ClusterView<'_>,
    sentinels: &[SentinelView],
    now: Timestamp,
) -> LockState {
    let owner = match cluster.owner.map(str::trim).filter(|o| !o.is_empty()) {
        Some(o) if !cluster.deleting => o,
        _ => return classify_unowned(cluster, sentinels, now),
    };
    if let Some(problem) = hearth_api::cluster::owner_problem(owner) {
        return LockState::InvalidOwner { problem };
    }
    let lock = lock_of(cluster, owner, now);
    if let Some(expired_at) = lock.expires_at.filter(|exp| *exp <= now) {
        return LockState::Expiring { lock, expired_at };
    }
    let canonical = lock_sentinel_name(cluster.name);
    match kept_sentinel(sentinels, owner, &canonical) {
        Some(s) => match &s.state {
            SentinelState::Holding => LockState::Held {
                lock,
                sentinel: s.name.clone(),
                uid: s.uid.clone(),
            },
            SentinelState::Misplaced(problem) => LockState::Misplaced {
                lock,
                sentinel: s.name.clone(),
                uid: s.uid.clone(),
                problem: problem.clone(),
            },
            SentinelState::Waiting(why) => LockState::Waiting {
                lock,
                sentinel: s.name.clone(),
                uid: s.uid.clone(),
                why: why.clone(),
            },
            SentinelState::Terminating => unreachable!("kept_sentinel skips terminating ones"),
        },
        None if cluster.status.kueue.is_none() => LockState::WaitingForFlavor { lock },
        None if sentinels.iter().any(|s| s.name == canonical) => LockState::Replacing { lock },
        None => LockState::Creating { lock },
    }
}

/// The lock of `owner`: its start kept while the owner stays the same, its expiry.
fn lock_of(cluster: &ClusterView<'_>, owner: &str, now: Timestamp) -> Lock {
    // A status from before `lockOwner` existed (the Python controller) has only
    // ownerSetAt: it belongs to the current owner.
    let same_owner = match cluster.status.lock_owner.as_deref() {
        Some(o) => o == owner,
        None => cluster.status.owner_set_at.is_some(),
    };
    // Whole seconds, as status stores times: the expiry computed now is the one every
    // later plan computes from the stored `ownerSetAt`.
    let owner_set_at = match ts(&cluster.status.owner_set_at) {
        Some(t) if same_owner => t,
        _ => Timestamp::from_second(now.as_second()).unwrap_or(now),
    };
    let (expires_at, ttl_note) = match cluster.ttl.map(parse_duration) {
        None => (None, None),
        Some(Ok(d)) => (
            owner_set_at
                .checked_add(SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX))
                .ok(),
            None,
        ),
        Some(Err(e)) => (
            None,
            Some(format!(
                " The ttl is ignored ({e}); set a valid ttl or remove it."
            )),
        ),
    };
    Lock {
        owner: owner.to_owned(),
        owner_set_at,
        expires_at,
        ttl_note,
    }
}

/// The one live, proven sentinel of `owner` to keep: the canonical name first, then one
/// that holds the quota (so an adopted legacy sentinel keeps its admission), then by
/// name. An unproven one is never kept, whatever it says: anyone who may create the
/// sentinel's kind can give an object its labels.
fn kept_sentinel<'s>(
    sentinels: &'s [SentinelView],
    owner: &str,
    canonical: &str,
) -> Option<&'s SentinelView> {
    sentinels
        .iter()
        .filter(|s| {
            s.proven && s.state != SentinelState::Terminating && s.owner.as_deref() == Some(owner)
        })
        .min_by_key(|s| {
            (
                s.name != canonical,
                s.state != SentinelState::Holding,
                s.name.clone(),
            )
        })
}

fn classify_unowned(
    cluster: &ClusterView<'_>,
    sentinels: &[SentinelView],
    now: Timestamp,
) -> LockState {
    let previous = hearth_api::conditions::find(&cluster.status.conditions, LOCKED);
    let was_locked = previous.is_some()
        || cluster.status.owner_set_at.is_some()
        || cluster.status.locked.is_some()
        || !sentinels.is_empty();
    let ran_out = ran_out(cluster.status, now).filter(|_| !cluster.deleting);
    let previous_expired =
        previous.filter(|c| LockedReason::parse(&c.reason) == Some(LockedReason::Expired));
    match (previous_expired, ran_out) {
        // An expired lock keeps saying so until someone locks again.
        (Some(c), _) => LockState::Expired {
            message: c.message.clone(),
        },
        (_, Some((owner, expired_at))) => LockState::Expired {
            message: expired_message(owner, expired_at, cluster.ttl),
        },
        _ if was_locked => LockState::Released {
            deleting: cluster.deleting,
        },
        _ => LockState::NeverLocked,
    }
}

/// The actions and status that make `state` true.
pub fn plan(
    state: &LockState,
    cluster: &ClusterView<'_>,
    sentinels: &[SentinelView],
    now: Timestamp,
) -> LockPlan {
    let Some(lock) = state.lock() else {
        return plan_unowned(state, sentinels);
    };
    let mut status = LockStatus {
        locked: false,
        lock_job_name: None,
        lock_job_uid: None,
        owner_set_at: Some(lock.owner_set_at),
        lock_expires_at: lock.expires_at,
        lock_owner: Some(lock.owner.clone()),
        condition: None,
        slot_holders: Vec::new(),
    };
    let owner = &lock.owner;
    let canonical = lock_sentinel_name(cluster.name);
    let note = lock.ttl_note.as_deref().unwrap_or_default();
    let until = lock
        .expires_at
        .map(|t| format!(" until {}", fmt_time(t)))
        .unwrap_or_default();
    let mut actions = delete_all_but(sentinels, None);
    let mut events = vec![];
    let message = match state {
        LockState::Expiring { expired_at, .. } => {
            actions.push(LockAction::ClearOwner {
                owner: owner.clone(),
            });
            let message = expired_message(owner, *expired_at, cluster.ttl);
            events.push(LockEvent {
                reason: "LockExpired",
                message: message.clone(),
                warning: false,
            });
            message
        }
        LockState::WaitingForFlavor { .. } => format!(
            "Waiting for hearth-kueue-sync to publish the cluster's ResourceFlavor and quota (status.kueue) before taking the lock for {owner}; check the KueueSynced condition.{note}"
        ),
        LockState::Replacing { .. } => {
            format!("Replacing the previous sentinel {canonical} with one for {owner}.{note}")
        }
        LockState::Creating { .. } => {
            actions.push(LockAction::CreateSentinel {
                name: canonical.clone(),
                owner: owner.clone(),
            });
            status.lock_job_name = Some(canonical.clone());
            format!(
                "Created sentinel {canonical} for {owner}; waiting for Kueue to admit it.{note}"
            )
        }
        LockState::Waiting {
            sentinel, why, uid, ..
        } => {
            actions = delete_all_but(sentinels, Some(sentinel));
            status.lock_job_name = Some(sentinel.clone());
            status.lock_job_uid = uid.clone();
            format!(
                "Sentinel {sentinel} waits for Kueue to admit it{}. The lock is held once running work on the cluster finishes.{note}",
                why.as_deref().map(|w| format!(": {w}")).unwrap_or_default()
            )
        }
        LockState::Held { sentinel, uid, .. } => {
            actions = delete_all_but(sentinels, Some(sentinel));
            status.lock_job_name = Some(sentinel.clone());
            status.lock_job_uid = uid.clone();
            status.locked = true;
            format!(
                "Locked for {owner}{until}: sentinel {sentinel} holds all of the cluster's slots.{note}"
            )
        }
        LockState::Misplaced {
            sentinel,
            uid,
            problem,
            ..
        } => match problem {
            Misplaced::WrongFlavor(why) => {
                actions = delete_all_but(sentinels, Some(sentinel));
                status.lock_job_name = Some(sentinel.clone());
                status.lock_job_uid = uid.clone();
                format!(
                    "Sentinel {sentinel} is admitted but {why}: it does not hold this cluster, so the cluster is not locked for {owner}. Check which ResourceFlavors select {CLUSTER_NODE_LABEL}={} and the ClusterQueue's cohort.{note}",
                    cluster.name
                )
            }
            // Replaced by one that asks for every slot: it waits for admission again.
            Misplaced::WrongSlots(why) => format!(
                "Sentinel {sentinel} does not lock the cluster: {why}. Replacing it with one that requests exactly the cluster's slots; the cluster is not locked for {owner} meanwhile.{note}"
            ),
        },
        _ => unreachable!("states without a lock are planned by plan_unowned"),
    };
    let reason = state.reason().expect("a state with a lock has a reason");
    status.condition = Some(DesiredCondition::new(
        LOCKED,
        status.locked,
        reason,
        message,
    ));
    let requeue_after = match state {
        LockState::Expiring { .. } => None,
        _ => lock
            .expires_at
            .map(|exp| Duration::try_from(exp.duration_since(now)).unwrap_or(Duration::ZERO)),
    };
    LockPlan {
        actions,
        events,
        status,
        requeue_after,
        blocked_create: None,
    }
}

/// Plans the states without an owner's lock: every sentinel goes, no lock field stays.
fn plan_unowned(state: &LockState, sentinels: &[SentinelView]) -> LockPlan {
    let message = match state {
        LockState::NeverLocked => None,
        LockState::Released { deleting: true } => {
            Some("The cluster is being deleted; its lock was released.".to_owned())
        }
        LockState::Released { deleting: false } => {
            Some("No owner: the cluster is not locked. Set spec.owner to lock it.".to_owned())
        }
        LockState::Expired { message } => Some(message.clone()),
        LockState::InvalidOwner { problem } => Some(format!(
            "{problem}. The cluster is not locked until spec.owner is valid."
        )),
        _ => unreachable!("states with a lock are planned by plan"),
    };
    let condition = message.map(|message| {
        let reason = state.reason().expect("a state with a message has a reason");
        DesiredCondition::new(LOCKED, false, reason, message)
    });
    LockPlan {
        actions: delete_all(sentinels),
        events: vec![],
        status: LockStatus {
            locked: false,
            condition,
            ..LockStatus::default()
        },
        requeue_after: None,
        blocked_create: None,
    }
}

/// [`classify`] then [`plan`].
pub fn plan_lock(
    cluster: &ClusterView<'_>,
    sentinels: &[SentinelView],
    now: Timestamp,
) -> LockPlan {
    plan(&classify(cluster, sentinels, now), cluster, sentinels, now)
}

/// What `Locked` says once a lock ran out. Built only from what both the expiry and any
/// later plan can see (the stored owner and expiry, the spec's ttl, which the expiry
/// does not clear), so every plan of an expired lock says the same words.
fn expired_message(owner: &str, expired_at: Timestamp, ttl: Option<&str>) -> String {
    let ttl = ttl.map(|t| format!(" (ttl {t})")).unwrap_or_default();
    format!(
        "The lock of {owner} expired at {}{ttl}; the cluster was released and spec.owner cleared.",
        fmt_time(expired_at)
    )
}

/// The lock that this unlocked cluster last had, if it ended by running out: the stored
/// status still names an owner and an expiry that has passed. This survives any order
/// in which the watch delivers the expiry's two writes (`spec.owner` cleared, `Expired`
/// status): a plan made from the cleared owner and the status from before the expiry
/// still sees that the lock expired, rather than calling it a plain release.
fn ran_out(status: &FournosClusterStatus, now: Timestamp) -> Option<(&str, Timestamp)> {
    let expired_at = ts(&status.lock_expires_at).filter(|exp| *exp <= now)?;
    let owner = status.lock_owner.as_deref().filter(|o| !o.is_empty())?;
    Some((owner, expired_at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_api::KueueStatus;
    use hearth_api::conditions::{Status, next_condition};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use pretty_assertions::assert_eq;

    const T0: i64 = 1_790_000_000;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(T0 + secs).unwrap()
    }

    fn synced() -> FournosClusterStatus {
        FournosClusterStatus {
            kueue: Some(KueueStatus {
                flavor: "a".into(),
                cluster_queue: "fournos-queue".into(),
                cluster_slots: 100,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn locked_since(owner: &str, secs: i64) -> FournosClusterStatus {
        FournosClusterStatus {
            owner_set_at: Some(Time(at(secs))),
            lock_owner: Some(owner.into()),
            ..synced()
        }
    }

    fn view<'a>(
        owner: Option<&'a str>,
        ttl: Option<&'a str>,
        status: &'a FournosClusterStatus,
    ) -> ClusterView<'a> {
        ClusterView {
            name: "a",
            owner,
            ttl,
            deleting: false,
            status,
        }
    }

    /// A proven sentinel (the one lock-manager created), its UID `uid-<name>`.
    fn sentinel(name: &str, owner: &str, state: SentinelState) -> SentinelView {
        SentinelView {
            name: name.into(),
            uid: Some(format!("uid-{name}")),
            owner: Some(owner.into()),
            proven: true,
            state,
        }
    }

    /// An object with the sentinel labels that lock-manager did not create.
    fn impostor(name: &str, owner: &str, state: SentinelState) -> SentinelView {
        SentinelView {
            proven: false,
            ..sentinel(name, owner, state)
        }
    }

    fn reason(plan: &LockPlan) -> &str {
        &plan.status.condition.as_ref().unwrap().reason
    }

    #[test]
    fn never_locked_cluster_plans_nothing() {
        let status = synced();
        let plan = plan_lock(&view(None, None, &status), &[], at(0));
        assert_eq!(plan.actions, vec![]);
        assert_eq!(plan.status, LockStatus::default());
    }

    #[test]
    fn owner_without_flavor_waits_for_flavor() {
        let status = FournosClusterStatus::default();
        let plan = plan_lock(&view(Some("alice"), None, &status), &[], at(0));
        assert_eq!(plan.actions, vec![]);
        assert_eq!(reason(&plan), reasons::WAITING_FOR_FLAVOR);
        assert!(!plan.status.locked);
        assert_eq!(plan.status.owner_set_at, Some(at(0)));
    }

    #[test]
    fn owner_with_flavor_creates_the_sentinel() {
        let status = synced();
        let plan = plan_lock(&view(Some("alice"), None, &status), &[], at(0));
        assert_eq!(
            plan.actions,
            vec![LockAction::CreateSentinel {
                name: "cluster-lock-a".into(),
                owner: "alice".into()
            }]
        );
        assert_eq!(reason(&plan), reasons::WAITING_FOR_ADMISSION);
        assert_eq!(plan.status.lock_job_name.as_deref(), Some("cluster-lock-a"));
        assert_eq!(plan.status.lock_owner.as_deref(), Some("alice"));
        assert_eq!(plan.requeue_after, None);
    }

    #[test]
    fn admitted_sentinel_means_locked() {
        let status = locked_since("alice", 0);
        let s = [sentinel("cluster-lock-a", "alice", SentinelState::Holding)];
        let plan = plan_lock(&view(Some("alice"), None, &status), &s, at(10));
        assert_eq!(plan.actions, vec![]);
        assert!(plan.status.locked);
        assert_eq!(reason(&plan), reasons::HELD);
        assert_eq!(plan.status.condition.as_ref().unwrap().status, Status::True);
        assert_eq!(plan.status.owner_set_at, Some(at(0)), "ownerSetAt is kept");
    }

    #[test]
    fn waiting_sentinel_carries_kueues_message() {
        let status = locked_since("alice", 0);
        let msg = "couldn't assign flavors to pod set lock: insufficient unused quota for fournos/cluster-slot in flavor a, 1 more needed";
        let s = [sentinel(
            "cluster-lock-a",
            "alice",
            SentinelState::Waiting(Some(msg.into())),
        )];
        let plan = plan_lock(&view(Some("alice"), None, &status), &s, at(10));
        assert!(!plan.status.locked);
        assert_eq!(reason(&plan), reasons::WAITING_FOR_ADMISSION);
        assert!(plan.status.condition.unwrap().message.contains(msg));
    }

    #[test]
    fn ttl_sets_expiry_and_requeues_for_it() {
        let status = locked_since("alice", 0);
        let s = [sentinel("cluster-lock-a", "alice", SentinelState::Holding)];
        let plan = plan_lock(&view(Some("alice"), Some("30m"), &status), &s, at(600));
        assert_eq!(plan.status.lock_expires_at, Some(at(1800)));
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(1200)));
        assert!(plan.status.condition.unwrap().message.contains("until"));
    }

    #[test]
    fn ttl_changed_while_locked_moves_expiry() {
        let status = locked_since("alice", 0);
        let s = [sentinel("cluster-lock-a", "alice", SentinelState::Holding)];
        let plan = plan_lock(&view(Some("alice"), Some("2h"), &status), &s, at(600));
        assert_eq!(plan.status.lock_expires_at, Some(at(7200)));
    }

    #[test]
    fn expiry_deletes_sentinel_clears_owner_and_records_event() {
        let status = locked_since("alice", 0);
        let s = [sentinel("cluster-lock-a", "alice", SentinelState::Holding)];
        // Exactly at the expiry instant the lock is over.
        let plan = plan_lock(&view(Some("alice"), Some("1m"), &status), &s, at(60));
        assert_eq!(
            plan.actions,
            vec![
                LockAction::DeleteSentinel {
                    name: "cluster-lock-a".into()
                },
                LockAction::ClearOwner {
                    owner: "alice".into()
                }
            ]
        );
        assert_eq!(reason(&plan), reasons::EXPIRED);
        assert!(!plan.status.locked);
        assert_eq!(plan.events.len(), 1);
        assert_eq!(plan.events[0].reason, "LockExpired");
        // One second earlier it was still held.
        let plan = plan_lock(&view(Some("alice"), Some("1m"), &status), &s, at(59));
        assert_eq!(reason(&plan), reasons::HELD);
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(1)));
    }

    #[test]
    fn expired_reason_survives_the_owner_being_cleared() {
        let mut status = locked_since("alice", 0);
        let expired =
            DesiredCondition::new(LOCKED, false, reasons::EXPIRED, "The lock of alice expired");
        status.conditions = vec![next_condition(None, &expired, Some(1), &Time(at(60)))];
        let plan = plan_lock(&view(None, None, &status), &[], at(61));
        assert_eq!(reason(&plan), reasons::EXPIRED);
        assert_eq!(plan.status.owner_set_at, None);
        assert_eq!(plan.status.lock_expires_at, None);
    }

    /// The status as the apiserver stores it after lock-manager applied `desired` over
    /// `current` (server-side apply: lock-manager's own fields are replaced, the rest kept).
    fn stored(
        current: &FournosClusterStatus,
        desired: &LockStatus,
        now: Timestamp,
    ) -> FournosClusterStatus {
        let Some(patch) = crate::status::status_patch(current, Some(1), desired, now) else {
            return current.clone();
        };
        let written: FournosClusterStatus = serde_json::from_value(patch).unwrap();
        let mut conditions: Vec<_> = current
            .conditions
            .iter()
            .filter(|c| c.type_ != LOCKED)
            .cloned()
            .collect();
        conditions.extend(written.conditions.clone());
        FournosClusterStatus {
            locked: written.locked,
            lock_job_name: written.lock_job_name,
            owner_set_at: written.owner_set_at,
            lock_expires_at: written.lock_expires_at,
            lock_owner: written.lock_owner,
            conditions,
            ..current.clone()
        }
    }

    fn message(plan: &LockPlan) -> &str {
        &plan.status.condition.as_ref().unwrap().message
    }

    /// alice's 1m lock, held, as stored just before it runs out at `at(60)`.
    fn held_until_60() -> FournosClusterStatus {
        let s = [sentinel("cluster-lock-a", "alice", SentinelState::Holding)];
        let plan = plan_lock(&view(Some("alice"), Some("1m"), &synced()), &s, at(0));
        let status = stored(&synced(), &plan.status, at(0));
        let plan = plan_lock(&view(Some("alice"), Some("1m"), &status), &s, at(1));
        assert_eq!(reason(&plan), reasons::HELD);
        stored(&status, &plan.status, at(1))
    }

    /// The expiry writes twice (`spec.owner` cleared, then the `Expired` status) and the
    /// watch may show the next plan neither, either or both of those writes. Whatever it
    /// sees, that plan and every plan after it say `Expired` in the same words: a person
    /// whose lock ran out is never told "No owner" instead.
    #[test]
    fn expiry_says_expired_whatever_order_the_watch_delivers_its_writes() {
        let held = held_until_60();
        let s = [sentinel("cluster-lock-a", "alice", SentinelState::Holding)];
        let expiry = plan_lock(&view(Some("alice"), Some("1m"), &held), &s, at(60));
        assert_eq!(reason(&expiry), reasons::EXPIRED);
        assert_eq!(
            message(&expiry),
            "The lock of alice expired at 2026-09-21T14:14:20Z (ttl 1m); the cluster was \
             released and spec.owner cleared."
        );
        let expired = stored(&held, &expiry.status, at(60));

        let seen = [
            (
                "neither write yet",
                Some("alice"),
                &held,
                vec![s[0].clone()],
            ),
            ("owner cleared, status from before", None, &held, vec![]),
            ("owner cleared and Expired status", None, &expired, vec![]),
            (
                "Expired status, owner not yet",
                Some("alice"),
                &expired,
                vec![],
            ),
        ];
        for (what, owner, status, sentinels) in seen {
            for later in [61, 3600] {
                let next = plan_lock(&view(owner, Some("1m"), status), &sentinels, at(later));
                assert_eq!(reason(&next), reasons::EXPIRED, "{what}, at +{later}s");
                assert_eq!(message(&next), message(&expiry), "{what}, at +{later}s");
                assert!(!next.status.locked, "{what}");
                // The owner cleared and that plan stored: the plans after it agree.
                let now_stored = stored(status, &next.status, at(later));
                let after = plan_lock(&view(None, Some("1m"), &now_stored), &[], at(later + 1));
                assert_eq!(reason(&after), reasons::EXPIRED, "{what}: the plan after");
                assert_eq!(message(&after), message(&expiry), "{what}: the plan after");
                assert_eq!(
                    stored(&now_stored, &after.status, at(later + 1)),
                    stored(&now_stored, &after.status, at(later + 2)),
                    "{what}: settled, nothing more to write"
                );
            }
        }
    }

    #[test]
    fn unlock_before_the_expiry_is_a_release_not_an_expiry() {
        let held = held_until_60();
        let plan = plan_lock(&view(None, Some("1m"), &held), &[], at(59));
        assert_eq!(reason(&plan), reasons::RELEASED);
        // Stored: the lock's fields are gone, so later plans keep saying Released.
        let released = stored(&held, &plan.status, at(59));
        assert_eq!(released.lock_expires_at, None);
        let later = plan_lock(&view(None, Some("1m"), &released), &[], at(120));
        assert_eq!(reason(&later), reasons::RELEASED);
    }

    #[test]
    fn unlock_without_ttl_is_a_release() {
        let s = [sentinel("cluster-lock-a", "alice", SentinelState::Holding)];
        let plan = plan_lock(&view(Some("alice"), None, &synced()), &s, at(0));
        let held = stored(&synced(), &plan.status, at(0));
        let plan = plan_lock(&view(None, None, &held), &[], at(1_000_000));
        assert_eq!(reason(&plan), reasons::RELEASED);
    }

    #[test]
    fn deleting_a_cluster_whose_lock_ran_out_says_it_is_being_deleted() {
        let held = held_until_60();
        let mut v = view(None, Some("1m"), &held);
        v.deleting = true;
        let plan = plan_lock(&v, &[], at(61));
        assert_eq!(reason(&plan), reasons::RELEASED);
        assert!(message(&plan).contains("being deleted"));
    }

    #[test]
    fn relocking_after_an_expiry_takes_a_new_lock() {
        let held = held_until_60();
        let s = [sentinel("cluster-lock-a", "alice", SentinelState::Holding)];
        let expiry = plan_lock(&view(Some("alice"), Some("1m"), &held), &s, at(60));
        let expired = stored(&held, &expiry.status, at(60));
        let cleared = plan_lock(&view(None, Some("1m"), &expired), &[], at(61));
        let cleared = stored(&expired, &cleared.status, at(61));
        let plan = plan_lock(&view(Some("bob"), Some("1m"), &cleared), &[], at(70));
        assert_eq!(reason(&plan), reasons::WAITING_FOR_ADMISSION);
        assert_eq!(plan.status.owner_set_at, Some(at(70)));
        assert_eq!(plan.status.lock_expires_at, Some(at(130)));
    }

    #[test]
    fn unlock_deletes_sentinel_and_says_released() {
        let status = locked_since("alice", 0);
        let s = [sentinel("cluster-lock-a", "alice", SentinelState::Holding)];
        let plan = plan_lock(&view(None, None, &status), &s, at(10));
        assert_eq!(
            plan.actions,
            vec![LockAction::DeleteSentinel {
                name: "cluster-lock-a".into()
            }]
        );
        assert_eq!(reason(&plan), reasons::RELEASED);
        assert_eq!(plan.status.lock_job_name, None);
        assert!(!plan.status.locked);
    }

    #[test]
    fn an_owner_the_crd_would_refuse_takes_no_lock_and_says_why() {
        let status = FournosClusterStatus::default();
        let forged = "alice\nINFO lock granted to mallory";
        let plan = plan_lock(&view(Some(forged), None, &status), &[], at(0));
        assert!(plan.actions.is_empty(), "{:?}", plan.actions);
        assert!(!plan.status.locked);
        let c = plan.status.condition.expect("a Locked condition");
        assert_eq!(c.reason, reasons::INVALID_OWNER);
        assert!(c.message.contains("control or format"), "{}", c.message);
        assert!(!c.message.contains("mallory"), "{}", c.message);
    }

    #[test]
    fn empty_owner_is_no_owner() {
        let status = locked_since("alice", 0);
        let plan = plan_lock(&view(Some("  "), None, &status), &[], at(10));
        assert_eq!(reason(&plan), reasons::RELEASED);
    }

    #[test]
    fn owner_change_replaces_sentinel_and_restarts_the_clock() {
        let status = locked_since("alice", 0);
        let s = [sentinel("cluster-lock-a", "alice", SentinelState::Holding)];
        let plan = plan_lock(&view(Some("bob"), Some("1h"), &status), &s, at(100));
        assert_eq!(
            plan.actions,
            vec![LockAction::DeleteSentinel {
                name: "cluster-lock-a".into()
            }],
            "the old sentinel goes first; its name is reused once it is gone"
        );
        assert_eq!(plan.status.owner_set_at, Some(at(100)));
        assert_eq!(plan.status.lock_owner.as_deref(), Some("bob"));
        assert_eq!(plan.status.lock_expires_at, Some(at(3700)));
        assert!(!plan.status.locked);

        // Next round: the old one is terminating, still no create under its name.
        let s = [sentinel(
            "cluster-lock-a",
            "alice",
            SentinelState::Terminating,
        )];
        let status = locked_since("bob", 100);
        let plan = plan_lock(&view(Some("bob"), Some("1h"), &status), &s, at(101));
        assert_eq!(plan.actions, vec![]);
        // Once gone: created for bob.
        let plan = plan_lock(&view(Some("bob"), Some("1h"), &status), &[], at(102));
        assert_eq!(
            plan.actions,
            vec![LockAction::CreateSentinel {
                name: "cluster-lock-a".into(),
                owner: "bob".into()
            }]
        );
        assert_eq!(plan.status.owner_set_at, Some(at(100)));
    }

    #[test]
    fn legacy_sentinel_is_adopted_by_label_not_duplicated() {
        // The Python controller's sentinel, its status without lockOwner.
        let status = FournosClusterStatus {
            owner_set_at: Some(Time(at(0))),
            ..synced()
        };
        let s = [sentinel("hearth-lock-a", "alice", SentinelState::Holding)];
        let plan = plan_lock(&view(Some("alice"), Some("1h"), &status), &s, at(10));
        assert_eq!(plan.actions, vec![]);
        assert!(plan.status.locked);
        assert_eq!(plan.status.lock_job_name.as_deref(), Some("hearth-lock-a"));
        assert_eq!(
            plan.status.owner_set_at,
            Some(at(0)),
            "the legacy TTL is honoured"
        );
        assert_eq!(plan.status.lock_expires_at, Some(at(3600)));
    }

    #[test]
    fn duplicate_sentinels_collapse_to_the_holding_canonical_one() {
        let status = locked_since("alice", 0);
        let s = [
            sentinel("hearth-lock-a", "alice", SentinelState::Waiting(None)),
            sentinel("cluster-lock-a", "alice", SentinelState::Holding),
            sentinel("cluster-lock-a-old", "mallory", SentinelState::Holding),
        ];
        let plan = plan_lock(&view(Some("alice"), None, &status), &s, at(10));
        assert_eq!(
            plan.actions,
            vec![
                LockAction::DeleteSentinel {
                    name: "hearth-lock-a".into()
                },
                LockAction::DeleteSentinel {
                    name: "cluster-lock-a-old".into()
                }
            ]
        );
        assert!(plan.status.locked);
    }

    #[test]
    fn deleted_cluster_releases_every_sentinel() {
        let status = locked_since("alice", 0);
        let s = [
            sentinel("cluster-lock-a", "alice", SentinelState::Holding),
            sentinel("hearth-lock-a", "alice", SentinelState::Terminating),
        ];
        let mut v = view(Some("alice"), None, &status);
        v.deleting = true;
        let plan = plan_lock(&v, &s, at(10));
        assert_eq!(
            plan.actions,
            vec![LockAction::DeleteSentinel {
                name: "cluster-lock-a".into()
            }]
        );
    }

    /// Issue 24 (2b): an object that carries the sentinel labels and says it is the
    /// owner's, admitted, is not a lock unless lock-manager made it.
    #[test]
    fn a_labelled_impostor_never_holds_and_is_replaced() {
        let status = locked_since("alice", 0);
        let s = [impostor("cluster-lock-a", "alice", SentinelState::Holding)];
        let plan = plan_lock(&view(Some("alice"), None, &status), &s, at(10));
        assert!(!plan.status.locked);
        assert_eq!(reason(&plan), reasons::WAITING_FOR_ADMISSION);
        assert_eq!(
            plan.actions,
            vec![LockAction::DeleteSentinel {
                name: "cluster-lock-a".into()
            }],
            "it takes the sentinel's name: it goes, and the real one follows"
        );
        // Beside the real one: the real one is kept, the impostor goes.
        let s = [
            impostor("cluster-lock-a-fake", "alice", SentinelState::Holding),
            sentinel("cluster-lock-a", "alice", SentinelState::Waiting(None)),
        ];
        let plan = plan_lock(&view(Some("alice"), None, &status), &s, at(10));
        assert!(!plan.status.locked);
        assert_eq!(
            plan.status.lock_job_uid.as_deref(),
            Some("uid-cluster-lock-a")
        );
        assert_eq!(
            plan.actions,
            vec![LockAction::DeleteSentinel {
                name: "cluster-lock-a-fake".into()
            }]
        );
    }

    #[test]
    fn a_held_lock_records_its_sentinels_uid() {
        let status = locked_since("alice", 0);
        let s = [sentinel("cluster-lock-a", "alice", SentinelState::Holding)];
        let plan = plan_lock(&view(Some("alice"), None, &status), &s, at(10));
        assert!(plan.status.locked);
        assert_eq!(
            plan.status.lock_job_uid.as_deref(),
            Some("uid-cluster-lock-a")
        );
        let created = plan_lock(&view(Some("alice"), None, &synced()), &[], at(10));
        assert_eq!(
            created.status.lock_job_uid, None,
            "filled in by the apply step from the create's answer"
        );
    }

    /// Issue 24 (3): admitted elsewhere, or with too few slots, is not held.
    #[test]
    fn a_misplaced_sentinel_is_not_held() {
        let status = locked_since("alice", 0);
        let wrong = [sentinel(
            "cluster-lock-a",
            "alice",
            SentinelState::Misplaced(Misplaced::WrongFlavor(
                "its fournos/cluster-slot is admitted on ResourceFlavor spot".into(),
            )),
        )];
        let plan = plan_lock(&view(Some("alice"), None, &status), &wrong, at(10));
        assert!(!plan.status.locked);
        assert_eq!(reason(&plan), LockedReason::WrongFlavor.as_str());
        assert_eq!(
            plan.actions,
            vec![],
            "a new one would be admitted there too"
        );
        let few = [sentinel(
            "cluster-lock-a",
            "alice",
            SentinelState::Misplaced(Misplaced::WrongSlots("it holds 100".into())),
        )];
        let plan = plan_lock(&view(Some("alice"), None, &status), &few, at(10));
        assert!(!plan.status.locked);
        assert_eq!(reason(&plan), LockedReason::SlotsMismatch.as_str());
        assert_eq!(
            plan.actions,
            vec![LockAction::DeleteSentinel {
                name: "cluster-lock-a".into()
            }],
            "replaced by one that asks for every slot"
        );
    }

    #[test]
    fn sentinel_recreated_when_someone_deletes_it() {
        let status = FournosClusterStatus {
            locked: Some(true),
            lock_job_name: Some("cluster-lock-a".into()),
            ..locked_since("alice", 0)
        };
        let plan = plan_lock(&view(Some("alice"), None, &status), &[], at(10));
        assert_eq!(
            plan.actions,
            vec![LockAction::CreateSentinel {
                name: "cluster-lock-a".into(),
                owner: "alice".into()
            }]
        );
        assert!(!plan.status.locked);
        assert_eq!(plan.status.owner_set_at, Some(at(0)));
    }

    #[test]
    fn invalid_ttl_locks_without_expiry_and_says_why() {
        let status = locked_since("alice", 0);
        let s = [sentinel("cluster-lock-a", "alice", SentinelState::Holding)];
        let plan = plan_lock(&view(Some("alice"), Some("0m"), &status), &s, at(10));
        assert!(plan.status.locked);
        assert_eq!(plan.status.lock_expires_at, None);
        assert!(
            plan.status
                .condition
                .unwrap()
                .message
                .contains("ttl is ignored")
        );
    }

    #[test]
    fn clock_going_backwards_does_not_expire_or_panic() {
        let status = locked_since("alice", 100);
        let s = [sentinel("cluster-lock-a", "alice", SentinelState::Holding)];
        let plan = plan_lock(&view(Some("alice"), Some("1m"), &status), &s, at(0));
        assert_eq!(reason(&plan), reasons::HELD);
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(160)));
    }

    #[test]
    fn new_owner_set_at_is_whole_seconds_like_the_stored_status() {
        // A status time has no fraction: planning with the fraction would put the
        // first expiry up to a second after the one every later plan computes.
        let status = synced();
        let now = at(10)
            .checked_add(SignedDuration::from_millis(999))
            .unwrap();
        let plan = plan_lock(&view(Some("alice"), Some("1m"), &status), &[], now);
        assert_eq!(plan.status.owner_set_at, Some(at(10)));
        assert_eq!(plan.status.lock_expires_at, Some(at(70)));
        assert_eq!(
            plan.requeue_after,
            Some(Duration::from_millis(59_001)),
            "requeued for the stored expiry"
        );
    }

    #[test]
    fn huge_ttl_does_not_overflow() {
        let status = locked_since("alice", 0);
        let s = [sentinel("cluster-lock-a", "alice", SentinelState::Holding)];
        let plan = plan_lock(&view(Some("alice"), Some("36500d"), &status), &s, at(0));
        assert!(plan.status.locked);
        assert!(plan.status.lock_expires_at.is_some());
    }

    /// One row per row of the state table in the crate docs: the state [`classify`]
    /// finds, and what [`plan`] makes of it.
    #[test]
    fn state_table() {
        let expired_status = {
            let mut s = locked_since("alice", 0);
            let expired = DesiredCondition::new(LOCKED, false, reasons::EXPIRED, "ran out");
            s.conditions = vec![next_condition(None, &expired, Some(1), &Time(at(60)))];
            s
        };
        let alice = |state| [sentinel("cluster-lock-a", "alice", state)];
        let holding = alice(SentinelState::Holding);
        let waiting = alice(SentinelState::Waiting(None));
        let none: [SentinelView; 0] = [];
        type Row<'a> = (
            &'a str,
            Option<&'a str>,
            Option<&'a str>,
            FournosClusterStatus,
            &'a [SentinelView],
            Option<&'a str>,
            &'a [&'a str],
            bool,
        );
        #[rustfmt::skip]
        let rows: [Row; 10] = [
            // state,           owner,              ttl,        status,                  sentinels, Locked reason,                     actions,                        locked
            ("NeverLocked",      None,               None,       synced(),                &none,     None,                              &[],                             false),
            ("Expired",          None,               None,       expired_status,          &none,     Some(reasons::EXPIRED),            &[],                             false),
            ("Released",         None,               None,       locked_since("alice", 0), &holding, Some(reasons::RELEASED),           &["delete"],                     false),
            ("InvalidOwner",     Some("a\nb"),       None,       locked_since("alice", 0), &holding, Some(reasons::INVALID_OWNER),      &["delete"],                     false),
            ("Expiring",         Some("alice"),      Some("1m"), locked_since("alice", 0), &holding, Some(reasons::EXPIRED),            &["delete", "clear-owner"],      false),
            ("Held",             Some("alice"),      None,       locked_since("alice", 0), &holding, Some(reasons::HELD),               &[],                             true),
            ("Waiting",          Some("alice"),      None,       locked_since("alice", 0), &waiting, Some(reasons::WAITING_FOR_ADMISSION), &[],                          false),
            ("WaitingForFlavor", Some("alice"),      None,       FournosClusterStatus::default(), &none, Some(reasons::WAITING_FOR_FLAVOR), &[],                          false),
            ("Replacing",        Some("bob"),        None,       locked_since("alice", 0), &holding, Some(reasons::WAITING_FOR_ADMISSION), &["delete"],                  false),
            ("Creating",         Some("alice"),      None,       synced(),                &none,     Some(reasons::WAITING_FOR_ADMISSION), &["create"],                  false),
        ];
        for (name, owner, ttl, status, sentinels, reason, actions, locked) in rows {
            let cluster = view(owner, ttl, &status);
            let state = classify(&cluster, sentinels, at(60));
            assert!(
                format!("{state:?}").starts_with(name),
                "{name}: classified {state:?}"
            );
            assert_eq!(state.reason().map(LockedReason::as_str), reason, "{name}");
            let plan = plan(&state, &cluster, sentinels, at(60));
            assert_eq!(plan, plan_lock(&cluster, sentinels, at(60)), "{name}");
            let kinds: Vec<&str> = plan
                .actions
                .iter()
                .map(|a| match a {
                    LockAction::CreateSentinel { .. } => "create",
                    LockAction::DeleteSentinel { .. } => "delete",
                    LockAction::ClearOwner { .. } => "clear-owner",
                })
                .collect();
            assert_eq!(kinds, actions, "{name}");
            assert_eq!(
                plan.status.condition.as_ref().map(|c| c.reason.as_str()),
                reason,
                "{name}"
            );
            assert_eq!(plan.status.locked, locked, "{name}");
            assert_eq!(
                plan.status.lock_owner.is_some(),
                state.lock().is_some(),
                "{name}: the lock's fields are written exactly in the states with an owner"
            );
            let events: Vec<&str> = plan.events.iter().map(|e| e.reason).collect();
            let expected: &[&str] = if name == "Expiring" {
                &["LockExpired"]
            } else {
                &[]
            };
            assert_eq!(events, expected, "{name}");
        }
    }
}
