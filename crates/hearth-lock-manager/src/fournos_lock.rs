//! The Kueue Workload behind a `fournosjob` sentinel: what actually holds the slots.
//!
//! Fournos turns a lockOnly FournosJob into a Workload (named like the job, labeled
//! `fournos.dev/job-name=<job>`, owned by the job) and sets the job's phase to
//! `Admitted` once Kueue admits it. It never looks at that Workload again: when the
//! Workload is deleted or evicted the job still says `Admitted`, and when the job is
//! deleted the Workload is left to the garbage collector (and kept meanwhile by the
//! job's kopf finalizer while Fournos is down). Fournos also ignores "already exists"
//! when it creates the Workload, so a new job of the same name adopts the old one.
//!
//! So for this kind the phase alone is not the lock. [`amend`] corrects the plan of
//! [`crate::plan::plan_lock`] from the Workloads themselves. Pure:
//! - `Held` needs the Workload owned by *this* job (owner reference UID), admitted, not
//!   evicted, requesting at least the cluster's slots. Otherwise the lock is not held
//!   (`WorkloadLost`): the sentinel is replaced so Fournos makes a new Workload, with a
//!   Warning Event. A Workload that requests fewer slots than the cluster has
//!   (`HEARTH_CLUSTER_SLOTS` ≠ Fournos's 100) is `SlotsMismatch`: replacing cannot help.
//! - A sentinel is never created while a Workload of that name exists (Fournos would
//!   adopt it): `WaitingForRelease` until the garbage collector has deleted it.
//! - Unlocked (or expired), the lock is `Releasing` until every sentinel of the
//!   cluster is gone and no Workload of them holds quota, saying what it waits for.
//! - A sentinel with no phase after [`PICKUP_GRACE`] is `SentinelNotPickedUp`, with
//!   Fournos's own words from kopf's progress annotations when there are any.

use std::time::Duration;

use hearth_api::conditions::DesiredCondition;
use hearth_api::fournosjob::FournosJob;
use hearth_api::kueue::{Workload, quantity_to_i64, workload_conditions};
use hearth_api::names::{
    CLUSTER_NODE_LABEL, CLUSTER_SLOT_RESOURCE, LOCK_SENTINEL_PREFIX, condition_types::LOCKED,
};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;
use serde_json::Value;

use hearth_api::reasons::LockedReason;

use crate::plan::{LockAction, LockEvent, LockPlan};
use crate::sentinel::Expect;

/// Condition reasons of `Locked` this module adds (see [`hearth_api::reasons::LockedReason`]).
pub mod reasons {
    use hearth_api::reasons::LockedReason as L;
    pub const WORKLOAD_LOST: &str = L::WorkloadLost.as_str();
    pub const SLOTS_MISMATCH: &str = L::SlotsMismatch.as_str();
    pub const WAITING_FOR_RELEASE: &str = L::WaitingForRelease.as_str();
    pub const RELEASING: &str = L::Releasing.as_str();
    pub const NOT_PICKED_UP: &str = L::SentinelNotPickedUp.as_str();
}

/// Event recorded when a held lock's Workload is found missing or evicted.
pub const WORKLOAD_LOST_EVENT: &str = "LockWorkloadLost";
/// Label Fournos puts on the Workload of a FournosJob, naming the job.
pub const JOB_NAME_LABEL: &str = "fournos.dev/job-name";
/// Slots Fournos requests for an exclusive (and lockOnly) job: its `MAX_CLUSTER_SLOTS`.
pub const FOURNOS_EXCLUSIVE_SLOTS: i64 = 100;
/// How long a new sentinel may go without a phase before lock-manager says Fournos has
/// not picked it up. Fournos sets the phase within a second when it runs.
pub const PICKUP_GRACE: Duration = Duration::from_secs(30);
/// How long after the job became `Admitted` a missing Workload is taken for the
/// Workload watch lagging behind the FournosJob watch rather than for a lost Workload:
/// the lock is not called held meanwhile, only the repair waits.
pub const REPAIR_GRACE: Duration = Duration::from_secs(5);
/// Marks the part of an `Expired` message that says what the release waits for.
const STILL_RELEASING: &str = " Still releasing:";
/// Longest text taken from Kueue or Fournos into a message.
const MAX_QUOTED: usize = 300;

/// A FournosJob sentinel as [`amend`] needs it.
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

/// A Workload Fournos made for a FournosJob.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockWorkloadView {
    pub name: String,
    /// `fournos.dev/job-name`.
    pub job: String,
    /// UID of the FournosJob that owns it.
    pub owner_uid: Option<String>,
    /// `fournos/cluster-slot` requested by its first pod set.
    pub slots: Option<i64>,
    /// Admitted in this ClusterQueue (`status.admission`).
    pub cluster_queue: Option<String>,
    /// The flavor its `fournos/cluster-slot` was admitted on.
    pub slot_flavor: Option<String>,
    pub admitted: bool,
    pub evicted: bool,
    /// Kueue counts its quota as used (reserved or admitted, not finished).
    pub holds_quota: bool,
    pub pods_ready: bool,
    /// Kueue's latest explanation, when it gave one.
    pub message: Option<String>,
    pub deleting: bool,
}

/// [`amend`]'s result: the corrected plan, and whether a held lock was found without
/// its Workload (counted by the caller once applied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Amended {
    pub plan: LockPlan,
    pub lost: bool,
}

/// At most [`MAX_QUOTED`] characters, on a character boundary.
fn bounded(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

fn fmt_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO)
}

fn set_reason(plan: &mut LockPlan, reason: LockedReason, message: String) {
    plan.status.condition = Some(DesiredCondition::new(
        LOCKED,
        plan.status.locked,
        reason,
        message,
    ));
}

fn requeue_within(plan: &mut LockPlan, after: Duration) {
    plan.requeue_after = Some(plan.requeue_after.map_or(after, |d| d.min(after)));
}

/// What a release still waits for, one phrase per thing, or empty when it is done: every
/// FournosJob of the lock still there, and every Workload of it that holds quota.
fn release_waits(jobs: &[JobView], workloads: &[LockWorkloadView]) -> Vec<String> {
    let mut waits: Vec<String> = jobs
        .iter()
        .map(|j| match j.deleting_since {
            Some(since) => format!(
                "Fournos to let FournosJob {} go (deleting since {}, finalizers: {}; is Fournos running?)",
                j.name,
                fmt_time(since),
                if j.finalizers.is_empty() {
                    "none".to_owned()
                } else {
                    bounded(&j.finalizers.join(", "))
                }
            ),
            None => format!("FournosJob {} to be deleted", j.name),
        })
        .collect();
    waits.extend(workloads.iter().filter(|w| w.holds_quota).map(|w| {
        format!(
            "Workload {} to be deleted by the garbage collector once its FournosJob is gone; it still holds the cluster's slots",
            w.name
        )
    }));
    waits
}

/// Corrects `plan` (for a `fournosjob` sentinel) from the Workloads that hold the
/// slots. `jobs` are the cluster's sentinels, `workloads` the Workloads of those jobs
/// and of the cluster's canonical sentinel name, `cluster_slots` what kueue-sync
/// published.
pub fn amend(
    mut plan: LockPlan,
    expect: &Expect<'_>,
    jobs: &[JobView],
    workloads: &[LockWorkloadView],
    now: Timestamp,
) -> Amended {
    let Some(reason) = plan
        .status
        .condition
        .as_ref()
        .map(|c| LockedReason::parse(&c.reason))
    else {
        return Amended { plan, lost: false };
    };
    if plan.status.lock_owner.is_none() || reason == Some(LockedReason::Expired) {
        amend_release(&mut plan, reason, jobs, workloads);
        return Amended { plan, lost: false };
    }
    if hold_create_while_old_workload_exists(&mut plan, workloads) {
        return Amended { plan, lost: false };
    }
    let kept = plan.status.lock_job_name.as_deref().and_then(|n| {
        jobs.iter()
            .find(|j| j.name == n && j.deleting_since.is_none())
    });
    let Some(job) = kept else {
        amend_replacing(&mut plan, reason, jobs, workloads);
        return Amended { plan, lost: false };
    };
    let lost = if plan.status.locked {
        amend_held(&mut plan, job, expect, workloads, now)
    } else {
        amend_waiting(&mut plan, job, expect.slots, now);
        false
    };
    Amended { plan, lost }
}

/// Unlocked or expired: released only once nothing of the lock holds quota.
fn amend_release(
    plan: &mut LockPlan,
    reason: Option<LockedReason>,
    jobs: &[JobView],
    workloads: &[LockWorkloadView],
) {
    let waits = release_waits(jobs, workloads);
    if reason == Some(LockedReason::Expired) {
        // An expired lock keeps its message from round to round: say what the
        // release still waits for, or no longer.
        let message = plan
            .status
            .condition
            .as_ref()
            .map(|c| c.message.clone())
            .unwrap_or_default();
        let base = message.split(STILL_RELEASING).next().unwrap_or_default();
        let message = if waits.is_empty() {
            base.to_owned()
        } else {
            format!("{base}{STILL_RELEASING} waiting for {}.", waits.join("; "))
        };
        set_reason(plan, LockedReason::Expired, message);
    } else if !waits.is_empty() {
        set_reason(
            plan,
            LockedReason::Releasing,
            format!(
                "The lock is being released: waiting for {}.",
                waits.join("; ")
            ),
        );
    }
}

/// A create under a name whose Workload still exists would adopt that Workload: the
/// create waits. Whether it does.
fn hold_create_while_old_workload_exists(
    plan: &mut LockPlan,
    workloads: &[LockWorkloadView],
) -> bool {
    let creating = plan.actions.iter().find_map(|a| match a {
        LockAction::CreateSentinel { name, owner } => Some((name.clone(), owner.clone())),
        _ => None,
    });
    if let Some((name, owner)) = creating
        && let Some(old) = workloads.iter().find(|w| w.job == name)
    {
        plan.actions
            .retain(|a| !matches!(a, LockAction::CreateSentinel { .. }));
        plan.blocked_create = Some(name.clone());
        plan.status.locked = false;
        set_reason(
            plan,
            LockedReason::WaitingForRelease,
            format!(
                "Waiting for the previous lock's Workload {} to be deleted by the garbage collector (its FournosJob is gone){} before creating sentinel {name} for {owner}: Fournos would adopt a Workload of that name.",
                old.name,
                if old.holds_quota {
                    "; it still holds the cluster's slots"
                } else {
                    ""
                },
            ),
        );
        return true;
    }
    false
}

/// Replacing a sentinel that is still being deleted: say what that waits for.
fn amend_replacing(
    plan: &mut LockPlan,
    reason: Option<LockedReason>,
    jobs: &[JobView],
    workloads: &[LockWorkloadView],
) {
    if reason == Some(LockedReason::WaitingForAdmission) {
        let waits = release_waits(jobs, workloads);
        if !waits.is_empty() {
            set_reason(
                plan,
                LockedReason::WaitingForRelease,
                format!(
                    "Replacing the previous sentinel: waiting for {}.",
                    waits.join("; ")
                ),
            );
        }
    }
}

/// A held lock is held only while this job's own Workload is admitted, not evicted,
/// with the cluster's slots. Whether it was found lost.
fn amend_held(
    plan: &mut LockPlan,
    job: &JobView,
    expect: &Expect<'_>,
    workloads: &[LockWorkloadView],
    now: Timestamp,
) -> bool {
    let workload = workloads
        .iter()
        .find(|w| job.uid.is_some() && w.owner_uid == job.uid && !w.deleting);
    let cluster_slots = expect.slots.unwrap_or(FOURNOS_EXCLUSIVE_SLOTS);
    let problem = match workload {
        None => Some("there is no Workload owned by it (deleted, or never made)".to_owned()),
        Some(w) if w.evicted => Some(format!(
            "Kueue evicted its Workload {}{}",
            w.name,
            w.message
                .as_deref()
                .map(|m| format!(": {}", bounded(m)))
                .unwrap_or_default()
        )),
        Some(w) if !w.admitted => Some(format!(
            "its Workload {} is not admitted{}",
            w.name,
            w.message
                .as_deref()
                .map(|m| format!(": {}", bounded(m)))
                .unwrap_or_default()
        )),
        Some(_) => None,
    };
    if let Some(problem) = problem {
        plan.status.locked = false;
        let young = job
            .admitted_at
            .is_some_and(|t| elapsed(t, now) < REPAIR_GRACE);
        if workload.is_none() && young {
            // Most likely the Workload watch has not caught up yet.
            set_reason(
                plan,
                LockedReason::WaitingForAdmission,
                format!(
                    "Sentinel {} says {} but {problem} yet.",
                    job.name,
                    job.phase.as_deref().unwrap_or("nothing")
                ),
            );
            requeue_within(plan, REPAIR_GRACE);
            return false;
        }
        let message = format!(
            "Sentinel {} says {} but {problem}: the cluster is not held. Replacing the sentinel so that Fournos makes a new Workload.",
            job.name,
            job.phase.as_deref().unwrap_or("nothing"),
        );
        plan.actions.push(LockAction::DeleteSentinel {
            name: job.name.clone(),
        });
        plan.events.push(LockEvent {
            reason: WORKLOAD_LOST_EVENT,
            message: message.clone(),
            warning: true,
        });
        set_reason(plan, LockedReason::WorkloadLost, message);
        return true;
    }
    if let Some(w) = workload
        && let Some(why) = expect.misplaced(
            w.cluster_queue.as_deref().unwrap_or_default(),
            w.slot_flavor.as_deref(),
        )
    {
        plan.status.locked = false;
        set_reason(
            plan,
            LockedReason::WrongFlavor,
            format!(
                "Workload {} of sentinel {} is admitted but {why}: it does not hold this cluster, so the cluster is not locked. Check which ResourceFlavors select the cluster's node label and the ClusterQueue's cohort.",
                w.name, job.name,
            ),
        );
        return false;
    }
    if let Some(w) = workload
        && w.slots.is_some_and(|s| s < cluster_slots)
    {
        plan.status.locked = false;
        set_reason(
            plan,
            LockedReason::SlotsMismatch,
            format!(
                "Workload {} of sentinel {} holds {} {CLUSTER_SLOT_RESOURCE} but the cluster has {cluster_slots}: other jobs can still be admitted, so the cluster is not locked. Fournos requests {FOURNOS_EXCLUSIVE_SLOTS} for a lock: set HEARTH_CLUSTER_SLOTS={FOURNOS_EXCLUSIVE_SLOTS} on hearth-kueue-sync.",
                w.name,
                job.name,
                w.slots.unwrap_or_default(),
            ),
        );
    }
    false
}

/// Not held yet: say why, when Fournos or the slot setting is the reason.
fn amend_waiting(plan: &mut LockPlan, job: &JobView, cluster_slots: Option<i64>, now: Timestamp) {
    // Not held. A lock Workload of another size than the cluster never becomes a lock.
    if let Some(slots) = cluster_slots.filter(|s| *s != FOURNOS_EXCLUSIVE_SLOTS) {
        let effect = if slots > FOURNOS_EXCLUSIVE_SLOTS {
            "which would leave room for other jobs"
        } else {
            "more than the cluster's quota, so Kueue can never admit it"
        };
        set_reason(
            plan,
            LockedReason::SlotsMismatch,
            format!(
                "The cluster has {slots} {CLUSTER_SLOT_RESOURCE} but Fournos requests {FOURNOS_EXCLUSIVE_SLOTS} for a lock, {effect}: set HEARTH_CLUSTER_SLOTS={FOURNOS_EXCLUSIVE_SLOTS} on hearth-kueue-sync."
            ),
        );
        return;
    }
    // Not held: Fournos's own account when it has not got as far as a phase.
    if job.phase.is_none()
        && let Some(created) = job.created
    {
        let waited = elapsed(created, now);
        if waited >= PICKUP_GRACE {
            let said = job
                .fournos_said
                .as_deref()
                .map(|m| format!(" Fournos said: {}", bounded(m)))
                .unwrap_or_default();
            set_reason(
                plan,
                LockedReason::SentinelNotPickedUp,
                // The creation time, not the seconds waited: the message must not change
                // from one reconcile to the next (each change is a status write).
                format!(
                    "Fournos has not picked up sentinel {} (no status.phase since it was created at {}, over {}s ago).{said} Check that Fournos runs and watches this namespace, and its log.",
                    job.name,
                    fmt_time(created),
                    PICKUP_GRACE.as_secs()
                ),
            );
        } else {
            requeue_within(plan, PICKUP_GRACE - waited);
        }
    }
}

/// Whether `workload` belongs to the lock of `cluster`: Fournos's Workload of one of
/// the cluster's sentinels (by owner UID or job name), or of its canonical name.
pub fn belongs(workload: &LockWorkloadView, names: &[&str], uids: &[&str]) -> bool {
    names.contains(&workload.job.as_str())
        || workload
            .owner_uid
            .as_deref()
            .is_some_and(|u| uids.contains(&u))
}

fn is_true(w: &Workload, type_: &str) -> bool {
    w.status
        .as_ref()
        .is_some_and(|s| hearth_api::conditions::is_true(&s.conditions, type_))
}

/// The cluster a Fournos Workload is pinned to (its node selector), for mapping
/// Workload events to FournosClusters.
pub fn workload_cluster(w: &Workload) -> Option<&str> {
    w.spec
        .pod_sets
        .first()?
        .template
        .spec
        .as_ref()?
        .node_selector
        .as_ref()?
        .get(CLUSTER_NODE_LABEL)
        .map(String::as_str)
}

/// The cluster a lock's Workload (Fournos's Workload of a job named like a sentinel) is
/// pinned to; `None` for every other Workload, whose changes are not a lock's.
pub fn lock_workload_cluster(w: &Workload) -> Option<&str> {
    let job = w.labels().get(JOB_NAME_LABEL)?;
    if !job.starts_with(LOCK_SENTINEL_PREFIX) {
        return None;
    }
    workload_cluster(w)
}

/// What [`amend`] needs of a Workload Fournos made.
pub fn observe_workload(w: &Workload) -> Option<LockWorkloadView> {
    let job = w.labels().get(JOB_NAME_LABEL)?.clone();
    let owner_uid = w
        .owner_references()
        .iter()
        .find(|o| o.kind == "FournosJob")
        .map(|o| o.uid.clone());
    let slots = w.spec.pod_sets.first().and_then(|ps| {
        ps.template
            .spec
            .as_ref()?
            .containers
            .first()?
            .resources
            .as_ref()?
            .requests
            .as_ref()?
            .get(CLUSTER_SLOT_RESOURCE)
            .and_then(quantity_to_i64)
    });
    let admitted = is_true(w, workload_conditions::ADMITTED);
    let admission = w.status.as_ref().and_then(|s| s.admission.as_ref());
    let cluster_queue = admission.map(|a| a.cluster_queue.clone());
    let slot_flavor = crate::holders::admitted_flavor(w).map(str::to_owned);
    let finished = is_true(w, workload_conditions::FINISHED);
    let message = w.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .filter(|c| {
                !c.message.is_empty()
                    && c.status
                        == if c.type_ == workload_conditions::EVICTED {
                            "True"
                        } else {
                            "False"
                        }
            })
            .max_by_key(|c| c.last_transition_time.0)
            .map(|c| c.message.clone())
    });
    Some(LockWorkloadView {
        name: w.name_any(),
        job,
        owner_uid,
        slots,
        cluster_queue,
        slot_flavor,
        admitted,
        evicted: is_true(w, workload_conditions::EVICTED),
        holds_quota: !finished && (admitted || is_true(w, workload_conditions::QUOTA_RESERVED)),
        pods_ready: is_true(w, crate::sentinel::PODS_READY),
        message,
        deleting: w.metadata.deletion_timestamp.is_some(),
    })
}

/// What [`amend`] needs of a FournosJob sentinel.
pub fn observe_job(job: &FournosJob) -> JobView {
    let status = job.status.as_ref();
    let admitted_at = status
        .and_then(|s| s.other.get("conditions"))
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter().find(|c| {
                c.get("type").and_then(Value::as_str) == Some("WorkloadAdmitted")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
        .and_then(|c| c.get("lastTransitionTime")?.as_str()?.parse().ok());
    // kopf keeps each handler's progress as JSON in an annotation; a failing handler's
    // record carries the exception's text.
    let fournos_said = job
        .annotations()
        .iter()
        .filter(|(k, _)| k.starts_with("kopf.zalando.org/"))
        .filter_map(|(_, v)| serde_json::from_str::<Value>(v).ok())
        .filter(|v| v.get("success").and_then(Value::as_bool) != Some(true))
        .find_map(|v| v.get("message")?.as_str().map(str::to_owned));
    JobView {
        name: job.name_any(),
        uid: job.uid(),
        created: job.metadata.creation_timestamp.as_ref().map(|t| t.0),
        phase: status.and_then(|s| s.phase.clone()),
        admitted_at,
        deleting_since: job.metadata.deletion_timestamp.as_ref().map(|t| t.0),
        finalizers: job.finalizers().to_vec(),
        fournos_said,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{
        ClusterView, SentinelState, SentinelView, plan_lock, reasons as plan_reasons,
    };
    use hearth_api::{FournosClusterStatus, KueueStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use pretty_assertions::assert_eq;

    const T0: i64 = 1_790_000_000;
    const JOB: &str = "cluster-lock-a";

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(T0 + secs).unwrap()
    }

    fn status(owner: Option<&str>, slots: i64) -> FournosClusterStatus {
        FournosClusterStatus {
            kueue: Some(KueueStatus {
                flavor: "a".into(),
                cluster_queue: "q".into(),
                cluster_slots: slots,
                ..Default::default()
            }),
            // Locked before (by `owner`, or by someone who since unlocked).
            owner_set_at: Some(Time(at(0))),
            lock_owner: owner.map(str::to_owned),
            ..Default::default()
        }
    }

    fn job(uid: &str, phase: Option<&str>) -> JobView {
        JobView {
            name: JOB.into(),
            uid: Some(uid.into()),
            created: Some(at(0)),
            phase: phase.map(str::to_owned),
            admitted_at: phase.filter(|p| *p == "Admitted").map(|_| at(1)),
            ..Default::default()
        }
    }

    fn workload(owner_uid: &str, admitted: bool) -> LockWorkloadView {
        LockWorkloadView {
            name: JOB.into(),
            job: JOB.into(),
            owner_uid: Some(owner_uid.into()),
            slots: Some(100),
            cluster_queue: admitted.then(|| "q".into()),
            slot_flavor: admitted.then(|| "a".into()),
            admitted,
            holds_quota: admitted,
            ..Default::default()
        }
    }

    /// plan_lock then amend, as the controller does.
    fn run(
        owner: Option<&str>,
        slots: i64,
        jobs: &[JobView],
        workloads: &[LockWorkloadView],
        now: i64,
    ) -> Amended {
        let status = status(owner, slots);
        let views: Vec<SentinelView> = jobs
            .iter()
            .map(|j| SentinelView {
                name: j.name.clone(),
                uid: j.uid.clone(),
                owner: Some("alice".into()),
                proven: true,
                state: if j.deleting_since.is_some() {
                    SentinelState::Terminating
                } else if matches!(j.phase.as_deref(), Some("Admitted" | "Running")) {
                    SentinelState::Holding
                } else {
                    SentinelState::Waiting(None)
                },
            })
            .collect();
        let plan = plan_lock(
            &ClusterView {
                name: "a",
                owner,
                ttl: None,
                deleting: false,
                status: &status,
            },
            &views,
            at(now),
        );
        amend(plan, &Expect::of(&status), jobs, workloads, at(now))
    }

    fn reason(a: &Amended) -> &str {
        &a.plan.status.condition.as_ref().unwrap().reason
    }

    fn message(a: &Amended) -> &str {
        &a.plan.status.condition.as_ref().unwrap().message
    }

    #[test]
    fn held_when_its_own_workload_is_admitted() {
        let a = run(
            Some("alice"),
            100,
            &[job("u1", Some("Admitted"))],
            &[workload("u1", true)],
            10,
        );
        assert!(a.plan.status.locked);
        assert_eq!(reason(&a), plan_reasons::HELD);
        assert!(!a.lost);
        assert_eq!(a.plan.actions, vec![]);
    }

    #[test]
    fn admitted_phase_without_a_workload_is_lost_and_replaced() {
        let a = run(Some("alice"), 100, &[job("u1", Some("Admitted"))], &[], 10);
        assert!(!a.plan.status.locked);
        assert_eq!(reason(&a), reasons::WORKLOAD_LOST);
        assert!(a.lost);
        assert_eq!(
            a.plan.actions,
            vec![LockAction::DeleteSentinel { name: JOB.into() }]
        );
        assert_eq!(a.plan.events[0].reason, WORKLOAD_LOST_EVENT);
        assert!(a.plan.events[0].warning);
        assert!(message(&a).contains("no Workload"), "{}", message(&a));
    }

    #[test]
    fn a_just_admitted_job_waits_for_the_workload_watch_before_repair() {
        let a = run(Some("alice"), 100, &[job("u1", Some("Admitted"))], &[], 2);
        assert!(
            !a.plan.status.locked,
            "never called held without the Workload"
        );
        assert!(!a.lost);
        assert_eq!(a.plan.actions, vec![]);
        assert!(a.plan.requeue_after.is_some_and(|d| d <= REPAIR_GRACE));
    }

    #[test]
    fn evicted_or_unadmitted_workload_is_not_held() {
        let mut evicted = workload("u1", true);
        evicted.evicted = true;
        evicted.message = Some("Exceeded the PodsReady timeout".into());
        let a = run(
            Some("alice"),
            100,
            &[job("u1", Some("Admitted"))],
            &[evicted],
            10,
        );
        assert!(!a.plan.status.locked);
        assert_eq!(reason(&a), reasons::WORKLOAD_LOST);
        assert!(message(&a).contains("PodsReady timeout"));
        let a = run(
            Some("alice"),
            100,
            &[job("u1", Some("Admitted"))],
            &[workload("u1", false)],
            10,
        );
        assert_eq!(reason(&a), reasons::WORKLOAD_LOST);
    }

    #[test]
    fn a_workload_of_another_job_of_the_same_name_is_not_ours() {
        // bob's job adopted alice's Workload: same name, alice's UID.
        let a = run(
            Some("alice"),
            100,
            &[job("bob-uid", Some("Admitted"))],
            &[workload("alice-uid", true)],
            10,
        );
        assert!(!a.plan.status.locked);
        assert_eq!(reason(&a), reasons::WORKLOAD_LOST);
    }

    #[test]
    fn no_create_while_the_old_workload_of_that_name_exists() {
        let a = run(Some("bob"), 100, &[], &[workload("alice-uid", true)], 10);
        assert_eq!(a.plan.actions, vec![], "Fournos would adopt it");
        assert_eq!(reason(&a), reasons::WAITING_FOR_RELEASE);
        assert!(message(&a).contains("still holds"), "{}", message(&a));
        let a = run(Some("bob"), 100, &[], &[], 11);
        assert!(matches!(
            a.plan.actions[..],
            [LockAction::CreateSentinel { .. }]
        ));
    }

    #[test]
    fn unlock_is_releasing_from_the_round_that_deletes_the_sentinel() {
        let a = run(
            None,
            100,
            &[job("u1", Some("Admitted"))],
            &[workload("u1", true)],
            10,
        );
        assert_eq!(
            a.plan.actions,
            vec![LockAction::DeleteSentinel { name: JOB.into() }]
        );
        assert_eq!(reason(&a), reasons::RELEASING);
        assert!(!a.plan.status.locked);
    }

    #[test]
    fn unlock_is_releasing_until_the_workload_is_gone() {
        let mut deleting = job("u1", Some("Admitted"));
        deleting.deleting_since = Some(at(5));
        deleting.finalizers = vec!["kopf.zalando.org/KopfFinalizerMarker".into()];
        let a = run(None, 100, &[deleting], &[workload("u1", true)], 10);
        assert_eq!(reason(&a), reasons::RELEASING);
        assert!(
            message(&a).contains("KopfFinalizerMarker"),
            "{}",
            message(&a)
        );
        assert!(!a.plan.status.locked);
        // The job is gone, its Workload not yet.
        let a = run(None, 100, &[], &[workload("u1", true)], 11);
        assert_eq!(reason(&a), reasons::RELEASING);
        assert!(message(&a).contains("garbage collector"), "{}", message(&a));
        // Expired: the message says what the release waits for, then no longer.
        let mut status = status(Some("alice"), 100);
        let expired = DesiredCondition::new(
            LOCKED,
            false,
            plan_reasons::EXPIRED,
            "The lock of alice expired.",
        );
        status.conditions = vec![hearth_api::conditions::next_condition(
            None,
            &expired,
            None,
            &Time(at(60)),
        )];
        status.lock_owner = None;
        let view = ClusterView {
            name: "a",
            owner: None,
            ttl: None,
            deleting: false,
            status: &status,
        };
        let plan = plan_lock(&view, &[], at(61));
        let a = amend(
            plan.clone(),
            &Expect::of(&status),
            &[],
            &[workload("u1", true)],
            at(61),
        );
        assert!(
            message(&a).ends_with("it still holds the cluster's slots."),
            "{}",
            message(&a)
        );
        status.conditions[0].message = message(&a).to_owned();
        let view = ClusterView {
            name: "a",
            owner: None,
            ttl: None,
            deleting: false,
            status: &status,
        };
        let a = amend(
            plan_lock(&view, &[], at(62)),
            &Expect::of(&status),
            &[],
            &[],
            at(62),
        );
        assert_eq!(reason(&a), plan_reasons::EXPIRED);
        assert_eq!(message(&a), "The lock of alice expired.");
        // A Workload that no longer holds quota is released.
        let a = run(None, 100, &[], &[workload("u1", false)], 12);
        assert_eq!(reason(&a), plan_reasons::RELEASED);
    }

    #[test]
    fn fewer_slots_than_the_cluster_has_is_not_a_lock() {
        let a = run(
            Some("alice"),
            120,
            &[job("u1", Some("Admitted"))],
            &[workload("u1", true)],
            10,
        );
        assert!(!a.plan.status.locked);
        assert_eq!(reason(&a), reasons::SLOTS_MISMATCH);
        assert!(message(&a).contains("HEARTH_CLUSTER_SLOTS=100"));
        let a = run(
            Some("alice"),
            120,
            &[job("u1", Some("Pending"))],
            &[workload("u1", false)],
            10,
        );
        assert_eq!(reason(&a), reasons::SLOTS_MISMATCH);
        let a = run(
            Some("alice"),
            50,
            &[job("u1", Some("Pending"))],
            &[workload("u1", false)],
            10,
        );
        assert!(message(&a).contains("can never admit"), "{}", message(&a));
    }

    #[test]
    fn a_job_without_phase_is_not_picked_up_after_the_grace() {
        let mut j = job("u1", None);
        j.fournos_said = Some("(422) Unprocessable Entity: metadata.labels: Invalid value".into());
        let a = run(Some("alice"), 100, std::slice::from_ref(&j), &[], 10);
        assert_eq!(reason(&a), plan_reasons::WAITING_FOR_ADMISSION);
        assert_eq!(
            a.plan.requeue_after,
            Some(PICKUP_GRACE - Duration::from_secs(10))
        );
        let a = run(Some("alice"), 100, &[j], &[], 40);
        assert_eq!(reason(&a), reasons::NOT_PICKED_UP);
        assert!(
            message(&a).contains("Fournos said: (422)"),
            "{}",
            message(&a)
        );
    }

    #[test]
    fn observes_fournos_workloads_and_jobs() {
        let w: Workload = serde_json::from_value(serde_json::json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": { "name": JOB, "labels": { JOB_NAME_LABEL: JOB },
                "ownerReferences": [{ "apiVersion": "fournos.dev/v1", "kind": "FournosJob", "name": JOB, "uid": "u1" }] },
            "spec": { "podSets": [{ "name": "launcher", "count": 1, "template": { "spec": {
                "nodeSelector": { "fournos.dev/cluster": "a" },
                "containers": [{ "name": "placeholder", "resources": { "requests": { "fournos/cluster-slot": "100" } } }] } } }] },
            "status": { "conditions": [
                { "type": "QuotaReserved", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z" },
                { "type": "Admitted", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z" } ] },
        }))
        .unwrap();
        let v = observe_workload(&w).unwrap();
        assert_eq!(v.owner_uid.as_deref(), Some("u1"));
        assert_eq!(v.slots, Some(100));
        assert!(v.admitted && v.holds_quota && !v.evicted);
        assert_eq!(workload_cluster(&w), Some("a"));
        assert_eq!(lock_workload_cluster(&w), Some("a"));
        let mut not_a_lock = w.clone();
        not_a_lock
            .labels_mut()
            .insert(JOB_NAME_LABEL.into(), "training-run".into());
        assert_eq!(lock_workload_cluster(&not_a_lock), None);
        assert!(
            belongs(&v, &[JOB], &[]) && belongs(&v, &[], &["u1"]) && !belongs(&v, &["x"], &["u2"])
        );

        let j: FournosJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "fournos.dev/v1", "kind": "FournosJob",
            "metadata": { "name": JOB, "uid": "u1", "annotations": {
                "kopf.zalando.org/on_create": "{\"started\":\"2026-01-01T00:00:00\",\"retries\":2,\"success\":false,\"failure\":false,\"message\":\"(422) Reason: Unprocessable Entity\"}" } },
            "spec": {},
            "status": { "phase": "Admitted", "conditions": [
                { "type": "WorkloadAdmitted", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z" } ] },
        }))
        .unwrap();
        let v = observe_job(&j);
        assert_eq!(v.phase.as_deref(), Some("Admitted"));
        assert_eq!(v.admitted_at, Some("2026-01-01T00:00:05Z".parse().unwrap()));
        assert_eq!(
            v.fournos_said.as_deref(),
            Some("(422) Reason: Unprocessable Entity")
        );
    }
}
