//! The lock state machine: where a cluster's lock stands ([`LockState`], one variant per
//! row of the state table in the crate docs) and [`classify`], which finds it from what
//! was observed. Every rule that decides a `Locked` reason is here, for both sentinel
//! kinds: the reason of a state is [`LockState::reason`], its words are made from its
//! typed facts by [`crate::plan`] (one function per state), and the two states only the
//! apply step can know of (a create refused, a name taken) are entered through
//! [`LockState::refused`]. Pure.

use std::time::Duration;

use hearth_api::names::lock_sentinel_name;
use hearth_api::reasons::LockedReason;
use hearth_api::{ExpiredLock, FournosClusterStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::fournos::{FOURNOS_EXCLUSIVE_SLOTS, PICKUP_GRACE, REPAIR_GRACE};
use crate::views::{
    ClusterView, Expect, FournosView, JobView, LockWorkloadView, Misplaced, SentinelState,
    SentinelView,
};

/// The owner's lock and its term: when it started and when it runs out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lock {
    pub owner: String,
    /// Kept while the owner stays the same, reset when it changes.
    pub owner_set_at: Timestamp,
    /// `ownerSetAt + ttl`; `None` without a (valid) ttl.
    pub expires_at: Option<Timestamp>,
    /// Why the ttl is ignored, when it is invalid: said in every message of the lock.
    pub ttl_problem: Option<String>,
}

/// The sentinel a lock keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    pub name: String,
    pub uid: Option<String>,
}

/// What a release (or a replacement) still waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// A FournosJob of the lock, not yet being deleted.
    JobToDelete { job: String },
    /// A FournosJob being deleted that Fournos's finalizer still holds.
    JobDeleting {
        job: String,
        since: Timestamp,
        finalizers: Vec<String>,
    },
    /// A Workload of the lock whose FournosJob is gone, still holding quota.
    WorkloadHoldsQuota { workload: String },
}

/// Why the owner's sentinel is admitted, or asks to be, but cannot hold the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// Admitted in another ClusterQueue or on another flavor (the sentinel itself, or
    /// for `fournosjob` its Workload): replacing it would end the same way.
    WrongFlavor {
        workload: Option<String>,
        why: String,
    },
    /// A `workload` sentinel that holds or asks for other slots than the cluster has: it
    /// is replaced by one that asks for exactly the cluster's slots.
    WrongSlots { why: String },
    /// Fournos's Workload holds fewer slots than the cluster has: replacing cannot help.
    FournosTooFew {
        workload: String,
        holds: i64,
        cluster: i64,
    },
    /// The cluster has another number of slots than Fournos asks for a lock.
    FournosAsksOther { cluster: i64 },
}

/// Why the Workload of a `fournosjob` sentinel's name is not proven to be the one
/// Fournos made for it. Fournos adopts any Workload of the job's name, and anyone who may
/// create Workloads may write one's labels and ownerReferences.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Doubt {
    /// Not labelled `fournos.dev/job-name=<job>`.
    Label { found: Option<String> },
    /// Its ownerReference does not name the sentinel's UID.
    Owner { found: Option<String> },
    /// Created before the sentinel: someone made it before Fournos could.
    Older {
        created: Timestamp,
        job_created: Timestamp,
    },
    /// Kueue's count of the slots it holds on the flavor cannot be read.
    Uncounted,
}

/// Why a `fournosjob` lock that Fournos calls admitted holds nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lost {
    NoWorkload,
    Finished {
        workload: String,
    },
    Evicted {
        workload: String,
        said: Option<String>,
    },
    NotAdmitted {
        workload: String,
        said: Option<String>,
    },
    /// Admitted, but not as Fournos makes a lock's Workload: someone who may update
    /// Workloads changed its pod set while it waited for quota (Kueue allows that until it
    /// reserves quota). A new sentinel gets a new Workload.
    Changed {
        workload: String,
        change: Change,
    },
}

/// How an admitted lock Workload differs from the one Fournos makes for a `lockOnly` job:
/// pinned (node selector) to the job's cluster, asking for [`FOURNOS_EXCLUSIVE_SLOTS`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Pinned to another cluster (or to none).
    Pinned { to: Option<String> },
    /// Kueue admitted it with fewer slots than Fournos asks and the cluster has.
    Slots { holds: i64 },
    /// Admitted in another ClusterQueue or on another flavor after someone changed its
    /// spec: moved to LocalQueue `to` (Fournos never changes a Workload it made).
    Queue { to: Option<String> },
    /// Not admitted, and its spec changed since Fournos made it (`generation` > 1);
    /// `queue`: the LocalQueue it is in now.
    Spec {
        generation: i64,
        queue: Option<String>,
    },
}

/// A create the apply step could not make: the state it leads to instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The name belongs to an object this Hearth did not make.
    NameTaken(Taken),
    /// The apiserver refused the create (its words, as the error says them).
    CreateFailed { error: String },
}

/// An object this Hearth did not make that holds the sentinel's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// Why it is not this Hearth's sentinel.
    pub why: String,
}

/// Where a cluster's lock stands: one variant per row of the state table in the crate
/// docs, and every `Locked` reason is said by at least one of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockState {
    /// No owner and nothing left of a lock: nothing to do or say.
    NeverLocked,
    /// No owner (or the cluster is being deleted) after a lock: every sentinel goes.
    Released { deleting: bool },
    /// `fournosjob`: no owner, but a FournosJob of the lock or its Workload is still there.
    Releasing { waits: Vec<Wait> },
    /// The lock ran out; the owner is cleared. Said until someone locks again, with what
    /// the release still waits for.
    Expired { lock: ExpiredLock, waits: Vec<Wait> },
    /// `spec.owner` is one the CRD refuses (stored by an older CRD): no lock is taken.
    InvalidOwner { problem: String },
    /// The ttl runs out now: every sentinel goes and `spec.owner` is cleared.
    Expiring {
        lock: Lock,
        expired: ExpiredLock,
        waits: Vec<Wait>,
    },
    /// No sentinel of the owner, and kueue-sync has not published the cluster's flavor.
    WaitingForFlavor { lock: Lock },
    /// No proven sentinel of the owner, and one of ours (another owner's, or one someone
    /// changed) still has the name: it goes first, its name is reused once it is gone.
    Replacing { lock: Lock, waits: Vec<Wait> },
    /// No sentinel of the owner: one is created (while older ones may still go).
    Creating { lock: Lock, waits: Vec<Wait> },
    /// `fournosjob`: no sentinel of the owner, and a Workload of its name still exists
    /// (Fournos would adopt it): the create waits until the garbage collector took it.
    OldWorkload {
        lock: Lock,
        sentinel: String,
        workload: String,
        holds_quota: bool,
        /// Labelled for the sentinel's name and owned by a FournosJob: what Fournos leaves
        /// when a lock's job goes, which the garbage collector takes. Anything else of
        /// the name was made by someone else, and only a person can remove it.
        leftover: bool,
    },
    /// The sentinel's name is taken by an object this Hearth did not make.
    NameTaken { lock: Lock, taken: Taken },
    /// The apiserver refused the sentinel (its words, as the error says them).
    CreateFailed { lock: Lock, error: String },
    /// The owner's sentinel waits for Kueue to admit it (Kueue's words, if any); for
    /// `fournosjob`, look again at `recheck_in` whether Fournos picked it up.
    Waiting {
        lock: Lock,
        sentinel: Kept,
        why: Option<String>,
        /// The cluster is cordoned and the sentinel's Workload, which Fournos makes of a
        /// FournosJob, does not tolerate the cordon taint: Kueue admits it only after
        /// the uncordon. (Hearth's own `workload` sentinels tolerate it.)
        until_uncordon: bool,
        recheck_in: Option<Duration>,
    },
    /// `fournosjob`: Fournos has given the sentinel no phase in [`PICKUP_GRACE`].
    NotPickedUp {
        lock: Lock,
        sentinel: Kept,
        created: Timestamp,
        fournos_said: Option<String>,
    },
    /// `fournosjob`: Fournos says admitted, and its Workload is not in the cache yet (the
    /// Workload watch trails the FournosJob watch): not held, and not repaired yet.
    AwaitingWorkload {
        lock: Lock,
        sentinel: Kept,
        phase: Option<String>,
    },
    /// The owner's proven sentinel (for `fournosjob`: its own Workload) is admitted in
    /// the cluster's ClusterQueue on its flavor with every slot: the cluster is held.
    /// `workload` is that Workload's UID (`status.lockWorkloadUID`).
    Held {
        lock: Lock,
        sentinel: Kept,
        workload: Option<String>,
    },
    /// `fournosjob`: Fournos says admitted, and the Workload of the sentinel's name is not
    /// proven to be the one Fournos made for it: not held, whatever Kueue admitted. The
    /// sentinel is kept (replacing it would adopt the same Workload again).
    Unproven {
        lock: Lock,
        sentinel: Kept,
        workload: String,
        doubt: Doubt,
    },
    /// The owner's sentinel is admitted, or asks to be, but not for all of this cluster.
    Misplaced {
        lock: Lock,
        sentinel: Kept,
        mismatch: Mismatch,
    },
    /// `fournosjob`: Fournos says admitted but the Workload is gone, evicted, not
    /// admitted or changed from what Fournos made: the sentinel is replaced so that
    /// Fournos makes a new one.
    WorkloadLost {
        lock: Lock,
        sentinel: Kept,
        phase: Option<String>,
        lost: Lost,
    },
}

impl LockState {
    /// The `Locked` reason this state says; `None` for a never-locked cluster.
    pub fn reason(&self) -> Option<LockedReason> {
        use LockedReason as R;
        Some(match self {
            Self::NeverLocked => return None,
            Self::Released { .. } => R::Released,
            Self::Releasing { .. } => R::Releasing,
            Self::Expired { .. } | Self::Expiring { .. } => R::Expired,
            Self::InvalidOwner { .. } => R::InvalidOwner,
            Self::WaitingForFlavor { .. } => R::WaitingForFlavor,
            Self::Replacing { waits, .. } | Self::Creating { waits, .. } if !waits.is_empty() => {
                R::WaitingForRelease
            }
            Self::OldWorkload { leftover: true, .. } => R::WaitingForRelease,
            Self::OldWorkload { .. } => R::SentinelNameTaken,
            Self::Unproven { .. } => R::WorkloadNotProven,
            Self::Replacing { .. }
            | Self::Creating { .. }
            | Self::Waiting { .. }
            | Self::AwaitingWorkload { .. } => R::WaitingForAdmission,
            Self::NameTaken { .. } => R::SentinelNameTaken,
            Self::CreateFailed { .. } => R::SentinelCreateFailed,
            Self::NotPickedUp { .. } => R::SentinelNotPickedUp,
            Self::Held { .. } => R::Held,
            Self::Misplaced { mismatch, .. } => match mismatch {
                Mismatch::WrongFlavor { .. } => R::WrongFlavor,
                Mismatch::WrongSlots { .. }
                | Mismatch::FournosTooFew { .. }
                | Mismatch::FournosAsksOther { .. } => R::SlotsMismatch,
            },
            Self::WorkloadLost { .. } => R::WorkloadLost,
        })
    }

    /// The owner's lock, in every state that has one.
    pub fn lock(&self) -> Option<&Lock> {
        match self {
            Self::NeverLocked
            | Self::Released { .. }
            | Self::Releasing { .. }
            | Self::Expired { .. }
            | Self::InvalidOwner { .. } => None,
            Self::Expiring { lock, .. }
            | Self::WaitingForFlavor { lock }
            | Self::Replacing { lock, .. }
            | Self::Creating { lock, .. }
            | Self::OldWorkload { lock, .. }
            | Self::NameTaken { lock, .. }
            | Self::CreateFailed { lock, .. }
            | Self::Waiting { lock, .. }
            | Self::NotPickedUp { lock, .. }
            | Self::AwaitingWorkload { lock, .. }
            | Self::Held { lock, .. }
            | Self::Unproven { lock, .. }
            | Self::Misplaced { lock, .. }
            | Self::WorkloadLost { lock, .. } => Some(lock),
        }
    }

    /// The sentinel this state keeps, if it keeps one.
    pub fn kept(&self) -> Option<&Kept> {
        match self {
            Self::Waiting { sentinel, .. }
            | Self::NotPickedUp { sentinel, .. }
            | Self::AwaitingWorkload { sentinel, .. }
            | Self::Held { sentinel, .. }
            | Self::Unproven { sentinel, .. }
            | Self::Misplaced { sentinel, .. }
            | Self::WorkloadLost { sentinel, .. } => Some(sentinel),
            _ => None,
        }
    }

    /// The state after the apply step could not create the sentinel this state asked
    /// for: `SentinelNameTaken` or `SentinelCreateFailed`, keeping the lock's term.
    /// `None` for a state without a lock (it creates nothing).
    pub fn refused(&self, refusal: Refusal) -> Option<LockState> {
        let lock = self.lock()?.clone();
        Some(match refusal {
            Refusal::NameTaken(taken) => Self::NameTaken { lock, taken },
            Refusal::CreateFailed { error } => Self::CreateFailed { lock, error },
        })
    }
}

fn ts(t: &Option<Time>) -> Option<Timestamp> {
    t.as_ref().map(|t| t.0)
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO)
}

/// Where the lock of `cluster` stands, given its sentinels (and, for `fournosjob`, the
/// FournosJobs and Workloads behind them), at `now`. The first row of the state table
/// that matches wins.
pub fn classify(
    cluster: &ClusterView<'_>,
    sentinels: &[SentinelView],
    fournos: Option<&FournosView<'_>>,
    now: Timestamp,
) -> LockState {
    let owner = match cluster.owner.map(str::trim).filter(|o| !o.is_empty()) {
        Some(o) if !cluster.deleting => o,
        _ => return classify_unowned(cluster, sentinels, fournos, now),
    };
    if let Some(problem) = hearth_api::cluster::owner_problem(owner) {
        return LockState::InvalidOwner { problem };
    }
    let lock = lock_of(cluster, owner, now);
    if let Some(expired_at) = lock.expires_at.filter(|exp| *exp <= now) {
        let expired = ExpiredLock {
            owner: owner.to_owned(),
            expired_at: Time(expired_at),
            ttl: cluster.ttl.map(str::to_owned),
        };
        return LockState::Expiring {
            lock,
            expired,
            waits: fournos.map(release_waits).unwrap_or_default(),
        };
    }
    let canonical = lock_sentinel_name(cluster.name);
    match kept_sentinel(sentinels, owner, &canonical) {
        Some((kept, standing)) => with_sentinel(cluster, fournos, lock, kept, standing, now),
        None => without_sentinel(cluster, sentinels, fournos, lock, canonical),
    }
}

/// The owner's lock with no proven live sentinel of the owner to keep: what stands in
/// the way of creating `canonical`, or the create.
fn without_sentinel(
    cluster: &ClusterView<'_>,
    sentinels: &[SentinelView],
    fournos: Option<&FournosView<'_>>,
    lock: Lock,
    canonical: String,
) -> LockState {
    if cluster.status.kueue.is_none() {
        return LockState::WaitingForFlavor { lock };
    }
    let waits = || fournos.map(release_waits).unwrap_or_default();
    // Only a sentinel of ours of the name is replaced (deleted, then made anew: one
    // that someone changed, too); another is never deleted, and the create names it
    // (`SentinelNameTaken`).
    if sentinels.iter().any(|s| s.name == canonical && s.ours) {
        return LockState::Replacing {
            lock,
            waits: waits(),
        };
    }
    // Fournos adopts a Workload of the name it is about to make (it finds the job's
    // Workload by name): none may be there, whoever made it and however labelled.
    if let Some(old) = fournos.and_then(|f| f.workloads.iter().find(|w| w.name == canonical)) {
        return LockState::OldWorkload {
            lock,
            leftover: old.job.as_deref() == Some(canonical.as_str()) && old.owner_uid.is_some(),
            sentinel: canonical,
            workload: old.name.clone(),
            holds_quota: old.holds_quota,
        };
    }
    LockState::Creating {
        lock,
        waits: waits(),
    }
}

/// The owner's lock with the sentinel it keeps, by where that sentinel stands (and, for
/// `fournosjob`, what Fournos and its Workload say).
fn with_sentinel(
    cluster: &ClusterView<'_>,
    fournos: Option<&FournosView<'_>>,
    lock: Lock,
    kept: &SentinelView,
    standing: Standing<'_>,
    now: Timestamp,
) -> LockState {
    let sentinel = Kept {
        name: kept.name.clone(),
        uid: kept.uid.clone(),
    };
    let expect = Expect::of(cluster.status);
    let job = fournos.and_then(|f| {
        f.jobs
            .iter()
            .find(|j| j.name == kept.name && j.deleting_since.is_none())
            .map(|job| (f, job))
    });
    match (standing, job) {
        (Standing::Holding, Some((f, job))) => {
            let expect = (cluster.name, &expect);
            held_by_fournos(lock, sentinel, job, f.workloads, expect, now)
        }
        (Standing::Waiting(why), Some((f, job))) => {
            if let Some(lost) = changed_while_waiting(job, f.workloads) {
                return LockState::WorkloadLost {
                    lock,
                    sentinel,
                    phase: job.phase.clone(),
                    lost,
                };
            }
            let waiting = Waiting {
                why: why.clone(),
                until_uncordon: cluster.cordoned,
            };
            waiting_for_fournos(lock, sentinel, job, waiting, &expect, now)
        }
        // `workload` sentinels: what the sentinel says is its own admission. (For
        // `fournosjob` a kept sentinel is a readable live job, so it has its JobView.)
        (Standing::Holding, _) if fournos.is_none() => LockState::Held {
            workload: sentinel.uid.clone(),
            lock,
            sentinel,
        },
        (Standing::Holding, _) => LockState::Waiting {
            lock,
            sentinel,
            why: None,
            until_uncordon: false,
            recheck_in: None,
        },
        (Standing::Misplaced(problem), _) => LockState::Misplaced {
            lock,
            sentinel,
            mismatch: match problem {
                Misplaced::WrongFlavor(why) => Mismatch::WrongFlavor {
                    workload: None,
                    why: why.clone(),
                },
                Misplaced::WrongSlots(why) => Mismatch::WrongSlots { why: why.clone() },
            },
        },
        (Standing::Waiting(why), _) => LockState::Waiting {
            lock,
            sentinel,
            why: why.clone(),
            until_uncordon: false,
            recheck_in: None,
        },
    }
}

/// A `fournosjob` sentinel Fournos calls admitted holds the cluster only while the one
/// Workload of its name (Fournos finds its Workload by name) is proven to be Fournos's
/// for *this* job ([`doubt`]) and is admitted, not finished or evicted, as Fournos made it
/// (pinned to the cluster, not fewer slots than it asks), in the cluster's queue on its
/// flavor, with at least the cluster's slots as Kueue counted them. `expect`: the
/// cluster's name and what its lock must hold.
fn held_by_fournos(
    lock: Lock,
    sentinel: Kept,
    job: &JobView,
    workloads: &[LockWorkloadView],
    (cluster, expect): (&str, &Expect<'_>),
    now: Timestamp,
) -> LockState {
    let workload = workload_of(job, workloads);
    let phase = job.phase.clone();
    let lost = match workload {
        None => Lost::NoWorkload,
        Some(w) => {
            if let Some(doubt) = doubt(w, job) {
                return LockState::Unproven {
                    lock,
                    sentinel,
                    workload: w.name.clone(),
                    doubt,
                };
            }
            match proven_holds(w, cluster, expect) {
                Ok(()) => {
                    return LockState::Held {
                        lock,
                        sentinel,
                        workload: w.uid.clone(),
                    };
                }
                Err(Holds::Lost(lost)) => lost,
                Err(Holds::Mismatch(mismatch)) => {
                    return LockState::Misplaced {
                        lock,
                        sentinel,
                        mismatch,
                    };
                }
                Err(Holds::Uncounted) => {
                    return LockState::Unproven {
                        lock,
                        sentinel,
                        workload: w.name.clone(),
                        doubt: Doubt::Uncounted,
                    };
                }
            }
        }
    };
    let young = job
        .admitted_at
        .is_some_and(|t| elapsed(t, now) < REPAIR_GRACE);
    if lost == Lost::NoWorkload && young {
        // Most likely the Workload watch has not caught up yet.
        return LockState::AwaitingWorkload {
            lock,
            sentinel,
            phase,
        };
    }
    LockState::WorkloadLost {
        lock,
        sentinel,
        phase,
        lost,
    }
}

/// Why the Workload of a job's name may not be the one Fournos made for that job, if
/// it may not: Fournos labels it with the job and makes the job its owner, after the job
/// exists. (Kueue's admission, checked after, is the part nobody else writes.)
fn doubt(w: &LockWorkloadView, job: &JobView) -> Option<Doubt> {
    if w.job.as_deref() != Some(job.name.as_str()) {
        return Some(Doubt::Label {
            found: w.job.clone(),
        });
    }
    if job.uid.is_none() || w.owner_uid != job.uid {
        return Some(Doubt::Owner {
            found: w.owner_uid.clone(),
        });
    }
    match (w.created, job.created) {
        (Some(created), Some(job_created)) if created < job_created => Some(Doubt::Older {
            created,
            job_created,
        }),
        _ => None,
    }
}

/// Why a proven Workload does not hold the cluster.
enum Holds {
    Lost(Lost),
    Mismatch(Mismatch),
    Uncounted,
}

/// Whether a proven Workload holds every slot of `cluster`: admitted, not finished or
/// evicted, not changed from what Fournos made ([`changed`]), in the cluster's queue on
/// its flavor, with the cluster's slots or more.
fn proven_holds(w: &LockWorkloadView, cluster: &str, expect: &Expect<'_>) -> Result<(), Holds> {
    if w.finished {
        return Err(Holds::Lost(Lost::Finished {
            workload: w.name.clone(),
        }));
    }
    if w.evicted {
        return Err(Holds::Lost(Lost::Evicted {
            workload: w.name.clone(),
            said: w.message.clone(),
        }));
    }
    if !w.admitted {
        return Err(Holds::Lost(Lost::NotAdmitted {
            workload: w.name.clone(),
            said: w.message.clone(),
        }));
    }
    let misplaced = expect.misplaced(
        w.cluster_queue.as_deref().unwrap_or_default(),
        w.slot_flavor.as_deref(),
    );
    if let Some(change) = changed(w, cluster, expect, misplaced.is_some()) {
        return Err(Holds::Lost(Lost::Changed {
            workload: w.name.clone(),
            change,
        }));
    }
    if let Some(why) = misplaced {
        return Err(Holds::Mismatch(Mismatch::WrongFlavor {
            workload: Some(w.name.clone()),
            why,
        }));
    }
    let cluster = expect.slots.unwrap_or(FOURNOS_EXCLUSIVE_SLOTS);
    match w.slots {
        None => Err(Holds::Uncounted),
        Some(holds) if holds < cluster => Err(Holds::Mismatch(Mismatch::FournosTooFew {
            workload: w.name.clone(),
            holds,
            cluster,
        })),
        Some(_) => Ok(()),
    }
}

/// How an admitted Workload differs from the one Fournos made, if it does. Replacing the
/// sentinel mends such a Workload, which is why it is not `WrongFlavor` or
/// `FournosTooFew` (said of a Workload as Fournos made it, which a new sentinel would get
/// again): without this, a Fournos user who cut a waiting lock's Workload to one slot,
/// pinned it to another cluster or moved it to another LocalQueue, left the lock refused
/// for good, its status telling people to set a slot count the cluster already had or to
/// check flavors, and the moved Workload holding quota elsewhere until the owner
/// unlocked.
/// `misplaced`: admitted in another ClusterQueue or on another flavor than `expect` says.
fn changed(
    w: &LockWorkloadView,
    cluster: &str,
    expect: &Expect<'_>,
    misplaced: bool,
) -> Option<Change> {
    if w.pinned.as_deref() != Some(cluster) {
        return Some(Change::Pinned {
            to: w.pinned.clone(),
        });
    }
    let fewest = FOURNOS_EXCLUSIVE_SLOTS.min(expect.slots.unwrap_or(FOURNOS_EXCLUSIVE_SLOTS));
    if let Some(holds) = w.slots.filter(|holds| *holds < fewest) {
        return Some(Change::Slots { holds });
    }
    // Fournos creates a Workload and never updates it, so a spec at generation 2 or more
    // was changed by someone else; admitted elsewhere after that, it was moved to another
    // LocalQueue. One admitted elsewhere as Fournos made it is how the install is set up
    // (`WrongFlavor`), which a new one would repeat.
    let moved = misplaced && w.generation.is_some_and(|g| g > 1);
    moved.then(|| Change::Queue {
        to: w.queue.clone(),
    })
}

/// The Workload of `job`'s name not being deleted: Fournos finds a job's Workload by name.
fn workload_of<'a>(
    job: &JobView,
    workloads: &'a [LockWorkloadView],
) -> Option<&'a LockWorkloadView> {
    workloads.iter().find(|w| w.name == job.name && !w.deleting)
}

/// Whether the Workload Fournos made for a waiting `fournosjob` sentinel was changed
/// since: Fournos creates a Workload and never updates it, so a spec at generation 2 or
/// more was changed by someone else, and a new sentinel is the way back to the one
/// Fournos makes. Without this, a Workload moved to a LocalQueue where it is never
/// admitted kept the lock waiting for good. Only a Workload proven to be Fournos's for
/// this job ([`doubt`]) counts, and one Kueue reserved quota for is judged on admission.
fn changed_while_waiting(job: &JobView, workloads: &[LockWorkloadView]) -> Option<Lost> {
    let w = workload_of(job, workloads).filter(|w| !w.holds_quota && !w.finished)?;
    let generation = w.generation.filter(|g| *g > 1)?;
    if doubt(w, job).is_some() {
        return None;
    }
    Some(Lost::Changed {
        workload: w.name.clone(),
        change: Change::Spec {
            generation,
            queue: w.queue.clone(),
        },
    })
}

/// What Fournos and the cluster say of a `fournosjob` sentinel not admitted yet.
struct Waiting {
    /// Fournos's (or Kueue's) words.
    why: Option<String>,
    /// See [`LockState::Waiting`].
    until_uncordon: bool,
}

/// A `fournosjob` sentinel not admitted yet: a lock of another size than the cluster
/// never becomes one, and a job Fournos never picked up says so after the grace.
fn waiting_for_fournos(
    lock: Lock,
    sentinel: Kept,
    job: &JobView,
    waiting: Waiting,
    expect: &Expect<'_>,
    now: Timestamp,
) -> LockState {
    if let Some(cluster) = expect.slots.filter(|s| *s != FOURNOS_EXCLUSIVE_SLOTS) {
        return LockState::Misplaced {
            lock,
            sentinel,
            mismatch: Mismatch::FournosAsksOther { cluster },
        };
    }
    let mut recheck_in = None;
    if job.phase.is_none()
        && let Some(created) = job.created
    {
        let waited = elapsed(created, now);
        if waited >= PICKUP_GRACE {
            return LockState::NotPickedUp {
                lock,
                sentinel,
                created,
                fournos_said: job.fournos_said.clone(),
            };
        }
        recheck_in = Some(PICKUP_GRACE - waited);
    }
    LockState::Waiting {
        lock,
        sentinel,
        why: waiting.why,
        until_uncordon: waiting.until_uncordon,
        recheck_in,
    }
}

/// What a release still waits for, or nothing when it is done: every FournosJob of the
/// lock still there, and every Workload of it that holds quota.
pub fn release_waits(fournos: &FournosView<'_>) -> Vec<Wait> {
    let jobs = fournos.jobs.iter().map(|j| match j.deleting_since {
        Some(since) => Wait::JobDeleting {
            job: j.name.clone(),
            since,
            finalizers: j.finalizers.clone(),
        },
        None => Wait::JobToDelete {
            job: j.name.clone(),
        },
    });
    let workloads =
        fournos
            .workloads
            .iter()
            .filter(|w| w.holds_quota)
            .map(|w| Wait::WorkloadHoldsQuota {
                workload: w.name.clone(),
            });
    jobs.chain(workloads).collect()
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
    let (expires_at, ttl_problem) = match cluster.ttl.map(hearth_api::duration::parse_duration) {
        None => (None, None),
        Some(Ok(d)) => (
            owner_set_at
                .checked_add(SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX))
                .ok(),
            None,
        ),
        Some(Err(e)) => (None, Some(e.to_string())),
    };
    Lock {
        owner: owner.to_owned(),
        owner_set_at,
        expires_at,
        ttl_problem,
    }
}

/// Where a live sentinel stands with Kueue: a [`SentinelState`] but `Terminating`, the
/// states a kept sentinel can be in.
#[derive(Clone, Copy, Debug)]
enum Standing<'s> {
    Holding,
    Misplaced(&'s Misplaced),
    Waiting(&'s Option<String>),
}

impl<'s> Standing<'s> {
    /// `None` for a sentinel being deleted: it is never kept.
    fn of(state: &'s SentinelState) -> Option<Self> {
        match state {
            SentinelState::Holding => Some(Self::Holding),
            SentinelState::Misplaced(m) => Some(Self::Misplaced(m)),
            SentinelState::Waiting(why) => Some(Self::Waiting(why)),
            SentinelState::Terminating => None,
        }
    }
}

/// The one live, proven sentinel of `owner` to keep, with where it stands: the canonical
/// name first, then one that holds the quota (so an adopted legacy sentinel keeps its
/// admission), then by name. An unproven one is never kept, whatever it says: anyone who
/// may create the sentinel's kind can give an object its labels.
fn kept_sentinel<'s>(
    sentinels: &'s [SentinelView],
    owner: &str,
    canonical: &str,
) -> Option<(&'s SentinelView, Standing<'s>)> {
    sentinels
        .iter()
        .filter(|s| s.proven && s.owner.as_deref() == Some(owner))
        .filter_map(|s| Some((s, Standing::of(&s.state)?)))
        .min_by_key(|(s, standing)| {
            (
                s.name != canonical,
                !matches!(standing, Standing::Holding),
                s.name.clone(),
            )
        })
}

fn classify_unowned(
    cluster: &ClusterView<'_>,
    sentinels: &[SentinelView],
    fournos: Option<&FournosView<'_>>,
    now: Timestamp,
) -> LockState {
    let waits = fournos.map(release_waits).unwrap_or_default();
    // An expired lock keeps saying so until someone locks again: from the record the
    // expiry wrote, or (when the watch shows the cleared owner before that write) from
    // the stored lock whose expiry has passed.
    let ran_out = || ran_out(cluster.status, cluster.ttl, now).filter(|_| !cluster.deleting);
    if let Some(lock) = cluster.status.expired_lock.clone().or_else(ran_out) {
        return LockState::Expired { lock, waits };
    }
    let was_locked = hearth_api::conditions::find(
        &cluster.status.conditions,
        hearth_api::names::condition_types::LOCKED,
    )
    .is_some()
        || cluster.status.owner_set_at.is_some()
        || cluster.status.locked.is_some()
        || !sentinels.is_empty();
    match was_locked {
        false => LockState::NeverLocked,
        true if !waits.is_empty() => LockState::Releasing { waits },
        true => LockState::Released {
            deleting: cluster.deleting,
        },
    }
}

/// The lock that this unlocked cluster last had, if it ended by running out: the stored
/// status still names an owner and an expiry that has passed. This survives any order
/// in which the watch delivers the expiry's two writes (`spec.owner` cleared, `Expired`
/// status): a plan made from the cleared owner and the status from before the expiry
/// still sees that the lock expired, rather than calling it a plain release.
fn ran_out(
    status: &FournosClusterStatus,
    ttl: Option<&str>,
    now: Timestamp,
) -> Option<ExpiredLock> {
    let expired_at = ts(&status.lock_expires_at).filter(|exp| *exp <= now)?;
    let owner = status.lock_owner.as_deref().filter(|o| !o.is_empty())?;
    Some(ExpiredLock {
        owner: owner.to_owned(),
        expired_at: Time(expired_at),
        ttl: ttl.map(str::to_owned),
    })
}

#[cfg(test)]
mod tests;
