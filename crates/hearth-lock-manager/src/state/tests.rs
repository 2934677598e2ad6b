use super::*;
use crate::plan::{LockAction, LockPlan, WORKLOAD_LOST_EVENT, plan_lock};
use hearth_api::KueueStatus;
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
        uid: Some(format!("w-{owner_uid}")),
        created: Some(at(0)),
        job: Some(JOB.into()),
        owner_uid: Some(owner_uid.into()),
        pinned: Some("a".into()),
        slots: Some(100),
        cluster_queue: admitted.then(|| "q".into()),
        slot_flavor: admitted.then(|| "a".into()),
        admitted,
        holds_quota: admitted,
        ..Default::default()
    }
}

/// The plan of a `fournosjob` lock-manager, as the controller makes it.
fn run(
    owner: Option<&str>,
    slots: i64,
    jobs: &[JobView],
    workloads: &[LockWorkloadView],
    now: i64,
) -> LockPlan {
    let status = status(owner, slots);
    let views = views_of(jobs);
    plan_lock(
        &ClusterView {
            name: "a",
            owner,
            ttl: None,
            deleting: false,
            cordoned: false,
            status: &status,
        },
        &views,
        Some(&FournosView { jobs, workloads }),
        at(now),
    )
}

/// alice's lock on a cluster of `slots` slots, one sentinel `job`, at `at(10)`.
fn alice(slots: i64, job: JobView, workloads: &[LockWorkloadView]) -> LockPlan {
    run(Some("alice"), slots, &[job], workloads, 10)
}

/// alice's FournosJob sentinels as lock-manager sees them: proven, holding while
/// Fournos says admitted.
fn views_of(jobs: &[JobView]) -> Vec<SentinelView> {
    jobs.iter()
        .map(|j| SentinelView {
            name: j.name.clone(),
            uid: j.uid.clone(),
            owner: Some("alice".into()),
            ours: true,
            proven: true,
            state: if j.deleting_since.is_some() {
                SentinelState::Terminating
            } else if matches!(j.phase.as_deref(), Some("Admitted" | "Running")) {
                SentinelState::Holding
            } else {
                SentinelState::Waiting(None)
            },
        })
        .collect()
}

fn reason(a: &LockPlan) -> &str {
    a.status.condition.as_ref().unwrap().reason.as_str()
}

fn message(a: &LockPlan) -> &str {
    &a.status.condition.as_ref().unwrap().message
}

/// Asserts that the Locked message of `a` says `part`.
#[track_caller]
fn assert_says(a: &LockPlan, part: &str) {
    assert!(message(a).contains(part), "{}", message(a));
}

fn lost(a: &LockPlan) -> bool {
    matches!(a.state, LockState::WorkloadLost { .. })
}

#[test]
fn held_when_its_own_workload_is_admitted() {
    let a = alice(100, job("u1", Some("Admitted")), &[workload("u1", true)]);
    assert!(a.status.locked);
    assert_eq!(reason(&a), LockedReason::Held.as_str());
    assert!(!lost(&a));
    assert_eq!(a.actions, vec![]);
}

/// A sentinel made under an older name rule (shortened names hashed with FNV-1a before
/// SHA-256) keeps holding its lock after an upgrade: it is proven by its UID, not by its
/// name, so the upgrade neither deletes it nor makes a second one beside it.
#[test]
fn a_held_sentinel_under_an_older_name_is_kept() {
    let old = "cluster-lock-a-cbf29ce484222325";
    let job = JobView {
        name: old.into(),
        ..job("u1", Some("Admitted"))
    };
    let workload = LockWorkloadView {
        name: old.into(),
        job: Some(old.into()),
        ..workload("u1", true)
    };
    let a = alice(100, job, &[workload]);
    assert!(a.status.locked, "{}", message(&a));
    assert_eq!(reason(&a), LockedReason::Held.as_str());
    assert_eq!(a.actions, vec![], "nothing deleted, nothing created");
}

#[test]
fn a_fournos_lock_on_a_cordoned_cluster_says_it_waits_for_the_uncordon() {
    // Told by spec.cordon and the sentinel's kind (Fournos makes its Workload without
    // the cordon's toleration), not read back from Kueue's words.
    let plan = |cordoned: bool| {
        let status = status(Some("alice"), 100);
        let jobs = [job("u1", Some("Pending"))];
        plan_lock(
            &ClusterView {
                name: "a",
                owner: Some("alice"),
                ttl: None,
                deleting: false,
                cordoned,
                status: &status,
            },
            &views_of(&jobs),
            Some(&FournosView {
                jobs: &jobs,
                workloads: &[workload("u1", false)],
            }),
            at(10),
        )
    };
    let cordoned = plan(true);
    assert!(matches!(
        cordoned.state,
        LockState::Waiting {
            until_uncordon: true,
            ..
        }
    ));
    assert_eq!(
        reason(&cordoned),
        LockedReason::WaitingForAdmission.as_str()
    );
    let uncordon = "the lock waits for `kubectl fournos uncordon a`";
    assert_says(&cordoned, uncordon);
    let open = plan(false);
    assert!(!message(&open).contains(uncordon), "{}", message(&open));
    assert_says(&open, "once running work");
}

#[test]
fn admitted_phase_without_a_workload_is_lost_and_replaced() {
    let a = alice(100, job("u1", Some("Admitted")), &[]);
    assert!(!a.status.locked);
    assert_eq!(reason(&a), LockedReason::WorkloadLost.as_str());
    assert!(lost(&a));
    assert_eq!(
        a.actions,
        vec![LockAction::DeleteSentinel { name: JOB.into() }]
    );
    assert_eq!(a.events[0].reason, WORKLOAD_LOST_EVENT);
    assert!(a.events[0].warning);
    assert_says(&a, "no Workload");
}

#[test]
fn a_just_admitted_job_waits_for_the_workload_watch_before_repair() {
    let a = run(Some("alice"), 100, &[job("u1", Some("Admitted"))], &[], 2);
    assert!(!a.status.locked, "never called held without the Workload");
    assert!(!lost(&a));
    assert_eq!(a.actions, vec![]);
    assert!(a.requeue_after.is_some_and(|d| d <= REPAIR_GRACE));
}

#[test]
fn evicted_or_unadmitted_workload_is_not_held() {
    let mut evicted = workload("u1", true);
    evicted.evicted = true;
    evicted.message = Some("Exceeded the PodsReady timeout".into());
    let a = alice(100, job("u1", Some("Admitted")), &[evicted]);
    assert!(!a.status.locked);
    assert_eq!(reason(&a), LockedReason::WorkloadLost.as_str());
    assert_says(&a, "PodsReady timeout");
    let a = alice(100, job("u1", Some("Admitted")), &[workload("u1", false)]);
    assert_eq!(reason(&a), LockedReason::WorkloadLost.as_str());
}

#[test]
fn a_workload_of_another_job_of_the_same_name_is_not_ours() {
    // bob's job adopted alice's Workload: same name, alice's UID.
    let a = alice(
        100,
        job("bob-uid", Some("Admitted")),
        &[workload("alice-uid", true)],
    );
    assert!(!a.status.locked);
    assert_eq!(reason(&a), LockedReason::WorkloadNotProven.as_str());
    assert_eq!(a.actions, vec![], "replacing the sentinel adopts it again");
    assert_eq!(a.status.lock_workload_uid, None);
}

/// Attack: a Workload someone made under the name Fournos gives the lock's Workload,
/// admitted with one slot (in a second container), then labelled for the job and owned
/// by the sentinel's UID. Nothing of it is trusted but Kueue's own count.
#[test]
fn a_workload_made_under_the_lock_s_name_never_holds_it() {
    let admitted = || job("u1", Some("Admitted"));
    let forged = |f: fn(&mut LockWorkloadView)| {
        let mut w = workload("u1", true);
        f(&mut w);
        alice(100, admitted(), &[w])
    };
    // Made before the sentinel existed: Fournos adopted it.
    let a = forged(|w| w.created = Some(at(-5)));
    assert_eq!(reason(&a), LockedReason::WorkloadNotProven.as_str());
    assert_says(&a, "before the sentinel");
    // Not labelled, or owned by anything but the sentinel's UID.
    let a = forged(|w| w.job = None);
    assert_eq!(reason(&a), LockedReason::WorkloadNotProven.as_str());
    let a = forged(|w| w.owner_uid = None);
    assert_eq!(reason(&a), LockedReason::WorkloadNotProven.as_str());
    // One slot of a hundred, however written: not a lock (and not what Fournos made).
    let a = forged(|w| w.slots = Some(1));
    assert_eq!(reason(&a), LockedReason::WorkloadLost.as_str());
    // A count Kueue's accounting does not give: never held.
    let a = forged(|w| w.slots = None);
    assert_eq!(reason(&a), LockedReason::WorkloadNotProven.as_str());
    assert_says(&a, "cannot be read");
    // Finished is not held.
    let a = forged(|w| w.finished = true);
    assert_eq!(reason(&a), LockedReason::WorkloadLost.as_str());
    for a in [
        forged(|w| w.created = Some(at(-5))),
        forged(|w| w.slots = None),
    ] {
        assert!(!a.status.locked);
        assert_eq!(a.actions, vec![]);
    }
    // Fournos's own: held, and its UID is the one kueue-sync leaves out of a cordon.
    let a = alice(100, admitted(), &[workload("u1", true)]);
    assert!(a.status.locked);
    assert_eq!(a.status.lock_workload_uid.as_deref(), Some("w-u1"));
}

/// Attack: a Workload of the lock's name made before the lock blocks it with a reason
/// that names it; a Workload of any other name blocks nothing, whatever its labels say.
#[test]
fn only_the_name_fournos_uses_blocks_a_lock() {
    let foreign = LockWorkloadView {
        job: None,
        owner_uid: None,
        ..workload("x", true)
    };
    let a = run(Some("bob"), 100, &[], &[foreign], 10);
    assert_eq!(a.actions, vec![], "Fournos would adopt it");
    assert_eq!(reason(&a), LockedReason::SentinelNameTaken.as_str());
    assert_says(&a, "kubectl delete workload");
    assert_eq!(a.status.lock_job_name, None, "never named without its UID");
    // Labelled for the lock under another name: not the lock's, not in its way.
    let junk = LockWorkloadView {
        name: "junk".into(),
        ..workload("x", true)
    };
    let a = run(Some("bob"), 100, &[], &[junk], 10);
    assert!(matches!(a.actions[..], [LockAction::CreateSentinel { .. }]));
}

#[test]
fn no_create_while_the_old_workload_of_that_name_exists() {
    let a = run(Some("bob"), 100, &[], &[workload("alice-uid", true)], 10);
    assert_eq!(a.actions, vec![], "Fournos would adopt it");
    assert_eq!(reason(&a), LockedReason::WaitingForRelease.as_str());
    assert_says(&a, "still holds");
    let a = run(Some("bob"), 100, &[], &[], 11);
    assert!(matches!(a.actions[..], [LockAction::CreateSentinel { .. }]));
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
        a.actions,
        vec![LockAction::DeleteSentinel { name: JOB.into() }]
    );
    assert_eq!(reason(&a), LockedReason::Releasing.as_str());
    assert!(!a.status.locked);
}

#[test]
fn unlock_is_releasing_until_the_workload_is_gone() {
    let mut deleting = job("u1", Some("Admitted"));
    deleting.deleting_since = Some(at(5));
    deleting.finalizers = vec!["kopf.zalando.org/KopfFinalizerMarker".into()];
    let a = run(None, 100, &[deleting], &[workload("u1", true)], 10);
    assert_eq!(reason(&a), LockedReason::Releasing.as_str());
    assert_says(&a, "KopfFinalizerMarker");
    assert!(!a.status.locked);
    // The job is gone, its Workload not yet.
    let a = run(None, 100, &[], &[workload("u1", true)], 11);
    assert_eq!(reason(&a), LockedReason::Releasing.as_str());
    assert_says(&a, "garbage collector");
    // Expired: the message says what the release waits for, then no longer, made
    // from the typed record of the expiry each time.
    let mut status = status(None, 100);
    status.expired_lock = Some(hearth_api::ExpiredLock {
        owner: "alice".into(),
        expired_at: Time(at(60)),
        ttl: None,
    });
    let view = ClusterView {
        name: "a",
        owner: None,
        ttl: None,
        deleting: false,
        cordoned: false,
        status: &status,
    };
    let fournos = |workloads| FournosView {
        jobs: &[],
        workloads,
    };
    let still = [workload("u1", true)];
    let a = plan_lock(&view, &[], Some(&fournos(&still)), at(61));
    assert_eq!(reason(&a), LockedReason::Expired.as_str());
    assert!(
        message(&a).ends_with("it still holds the cluster's slots."),
        "{}",
        message(&a)
    );
    let a = plan_lock(&view, &[], Some(&fournos(&[])), at(62));
    assert_eq!(reason(&a), LockedReason::Expired.as_str());
    assert_eq!(
        message(&a),
        "The lock of alice expired at 2026-09-21T14:14:20Z; the cluster was released and \
         spec.owner cleared."
    );
    // A Workload that no longer holds quota is released.
    let a = run(None, 100, &[], &[workload("u1", false)], 12);
    assert_eq!(reason(&a), LockedReason::Released.as_str());
}

/// Attack (issue 41): Kueue lets a Fournos user change a lock's Workload while it waits
/// for quota, so it may be admitted with one slot, or pinned to another cluster. Not held,
/// and the sentinel is replaced so that Fournos makes a new Workload (a Workload as
/// Fournos made it that holds too little or lands on another flavor is kept: a new one
/// would be the same).
#[test]
fn a_workload_changed_from_what_fournos_made_is_replaced() {
    let admitted = || job("u1", Some("Admitted"));
    for (slots, change) in [
        (
            100,
            LockWorkloadView {
                slots: Some(1),
                ..workload("u1", true)
            },
        ),
        (
            120,
            LockWorkloadView {
                slots: Some(99),
                ..workload("u1", true)
            },
        ),
        (
            100,
            LockWorkloadView {
                pinned: Some("b".into()),
                slot_flavor: Some("b".into()),
                ..workload("u1", true)
            },
        ),
        (
            100,
            LockWorkloadView {
                pinned: None,
                ..workload("u1", true)
            },
        ),
        (
            100,
            LockWorkloadView {
                queue: Some("side".into()),
                generation: Some(2),
                cluster_queue: Some("side-cq".into()),
                ..workload("u1", true)
            },
        ),
    ] {
        let a = alice(slots, admitted(), std::slice::from_ref(&change));
        assert!(!a.status.locked, "{change:?}");
        assert_eq!(
            reason(&a),
            LockedReason::WorkloadLost.as_str(),
            "{change:?}"
        );
        assert_eq!(
            a.actions,
            vec![LockAction::DeleteSentinel { name: JOB.into() }],
            "replaced: {change:?}"
        );
        assert_says(&a, "not as Fournos made it");
    }
    let moved = LockWorkloadView {
        pinned: Some("b".into()),
        ..workload("u1", true)
    };
    assert_says(&alice(100, admitted(), &[moved]), "pinned to cluster b");
    let cut = LockWorkloadView {
        slots: Some(1),
        ..workload("u1", true)
    };
    let words = alice(100, admitted(), &[cut]);
    assert!(
        message(&words).contains("admitted it with 1 fournos/cluster-slot")
            && !message(&words).contains("HEARTH_CLUSTER_SLOTS"),
        "{}",
        message(&words)
    );
    // As Fournos made it, 100 slots on a cluster of 120, or on another flavor of the
    // cluster's node label: kept, and said.
    let a = alice(120, admitted(), &[workload("u1", true)]);
    assert_eq!(reason(&a), LockedReason::SlotsMismatch.as_str());
    assert_eq!(a.actions, vec![]);
    let foreign_flavor = LockWorkloadView {
        slot_flavor: Some("b".into()),
        ..workload("u1", true)
    };
    let a = alice(100, admitted(), &[foreign_flavor]);
    assert_eq!(reason(&a), LockedReason::WrongFlavor.as_str());
    assert_eq!(a.actions, vec![]);
    // In another ClusterQueue as Fournos made it (generation 1): how Fournos's queue is
    // set up, kept and said; after a change to its spec: moved, and replaced.
    let other_queue = LockWorkloadView {
        queue: Some("team-q".into()),
        generation: Some(1),
        cluster_queue: Some("team-cq".into()),
        ..workload("u1", true)
    };
    let a = alice(100, admitted(), std::slice::from_ref(&other_queue));
    assert_eq!(reason(&a), LockedReason::WrongFlavor.as_str());
    assert_eq!(a.actions, vec![]);
    let moved = LockWorkloadView {
        generation: Some(2),
        ..other_queue
    };
    let a = alice(100, admitted(), &[moved]);
    assert_eq!(reason(&a), LockedReason::WorkloadLost.as_str());
    assert_says(&a, "moved to LocalQueue team-q and admitted there");
    // A change that leaves it where Fournos put it is no move.
    let relabelled = LockWorkloadView {
        generation: Some(3),
        ..workload("u1", true)
    };
    assert_eq!(
        reason(&alice(100, admitted(), &[relabelled])),
        LockedReason::Held.as_str()
    );
}

#[test]
fn fewer_slots_than_the_cluster_has_is_not_a_lock() {
    let a = alice(120, job("u1", Some("Admitted")), &[workload("u1", true)]);
    assert!(!a.status.locked);
    assert_eq!(reason(&a), LockedReason::SlotsMismatch.as_str());
    assert_says(&a, "HEARTH_CLUSTER_SLOTS=100");
    let a = alice(120, job("u1", Some("Pending")), &[workload("u1", false)]);
    assert_eq!(reason(&a), LockedReason::SlotsMismatch.as_str());
    let a = alice(50, job("u1", Some("Pending")), &[workload("u1", false)]);
    assert_says(&a, "can never admit");
}

/// Attack: a Fournos user moves a waiting lock's Workload to a LocalQueue where it is
/// never admitted (or changes it in any way): Fournos never updates a Workload it made, so
/// the sentinel is replaced at once instead of waiting there for good.
#[test]
fn a_waiting_workload_changed_since_fournos_made_it_is_replaced() {
    let pending = || job("u1", Some("Pending"));
    let a = alice(100, pending(), &[workload("u1", false)]);
    assert_eq!(reason(&a), LockedReason::WaitingForAdmission.as_str());
    let moved = LockWorkloadView {
        generation: Some(2),
        queue: Some("nowhere".into()),
        ..workload("u1", false)
    };
    let a = alice(100, pending(), std::slice::from_ref(&moved));
    assert_eq!(reason(&a), LockedReason::WorkloadLost.as_str());
    assert_eq!(
        a.actions,
        vec![LockAction::DeleteSentinel { name: JOB.into() }]
    );
    assert_says(&a, "generation 2; it is in LocalQueue nowhere");
    // Not proven to be Fournos's for this job: not acted on.
    let foreign = LockWorkloadView {
        owner_uid: Some("u0".into()),
        ..moved.clone()
    };
    let a = alice(100, pending(), &[foreign]);
    assert_eq!(reason(&a), LockedReason::WaitingForAdmission.as_str());
    // Quota reserved: judged on admission (where it is, what it holds).
    let reserved = LockWorkloadView {
        holds_quota: true,
        ..moved
    };
    let a = alice(100, pending(), &[reserved]);
    assert_eq!(reason(&a), LockedReason::WaitingForAdmission.as_str());
}

#[test]
fn a_job_without_phase_is_not_picked_up_after_the_grace() {
    let mut j = job("u1", None);
    j.fournos_said = Some("(422) Unprocessable Entity: metadata.labels: Invalid value".into());
    let a = run(Some("alice"), 100, std::slice::from_ref(&j), &[], 10);
    assert_eq!(reason(&a), LockedReason::WaitingForAdmission.as_str());
    assert_eq!(
        a.requeue_after,
        Some(PICKUP_GRACE - Duration::from_secs(10))
    );
    let a = run(Some("alice"), 100, &[j], &[], 40);
    assert_eq!(reason(&a), LockedReason::SentinelNotPickedUp.as_str());
    assert_says(&a, "Fournos said: (422)");
}

/// One row of the state table: what is observed, and the state, `Locked` reason,
/// `locked`, actions and plan Events that follow.
struct Row {
    name: &'static str,
    owner: Option<&'static str>,
    ttl: Option<&'static str>,
    status: FournosClusterStatus,
    sentinels: Vec<SentinelView>,
    /// `Some` for a `fournosjob` lock-manager.
    fournos: Option<(Vec<JobView>, Vec<LockWorkloadView>)>,
    /// Entered by the apply step from the classified state.
    refusal: Option<Refusal>,
    state: &'static str,
    reason: Option<LockedReason>,
    locked: bool,
    actions: &'static [&'static str],
    events: &'static [&'static str],
}

impl Row {
    fn cluster(&self) -> ClusterView<'_> {
        ClusterView {
            name: "a",
            owner: self.owner,
            ttl: self.ttl,
            deleting: false,
            cordoned: false,
            status: &self.status,
        }
    }

    fn facts(&self) -> Option<FournosView<'_>> {
        self.fournos
            .as_ref()
            .map(|(jobs, workloads)| FournosView { jobs, workloads })
    }
}

fn row(name: &'static str, state: &'static str, reason: Option<LockedReason>) -> Row {
    Row {
        name,
        owner: Some("alice"),
        ttl: None,
        status: status(Some("alice"), 100),
        sentinels: vec![],
        fournos: None,
        refusal: None,
        state,
        reason,
        locked: false,
        actions: &[],
        events: &[],
    }
}

/// A `workload` sentinel of `owner` named like alice's.
fn sentinel(owner: &str, state: SentinelState) -> SentinelView {
    SentinelView {
        name: JOB.into(),
        uid: Some("u1".into()),
        owner: Some(owner.into()),
        ours: true,
        proven: true,
        state,
    }
}

fn fournos(row: Row, jobs: Vec<JobView>, workloads: Vec<LockWorkloadView>) -> Row {
    Row {
        sentinels: views_of(&jobs),
        fournos: Some((jobs, workloads)),
        ..row
    }
}

fn with_slots(slots: i64) -> FournosClusterStatus {
    status(Some("alice"), slots)
}

fn expired_record() -> FournosClusterStatus {
    FournosClusterStatus {
        expired_lock: Some(hearth_api::ExpiredLock {
            owner: "alice".into(),
            expired_at: Time(at(30)),
            ttl: Some("30s".into()),
        }),
        ..status(None, 100)
    }
}

/// The state table of the crate docs, one row per state and reason, in both sentinel
/// modes, at `at(60)`.
#[rustfmt::skip]
fn table() -> Vec<Row> {
    use LockedReason as R;
    use SentinelState as S;
    let admitted = || job("u1", Some("Admitted"));
    let deleting = || JobView {
        deleting_since: Some(at(50)),
        finalizers: vec!["kopf.zalando.org/KopfFinalizerMarker".into()],
        ..admitted()
    };
    let on_flavor = |flavor: &str| LockWorkloadView {
        slot_flavor: Some(flavor.into()),
        ..workload("u1", true)
    };
    let taken = Refusal::NameTaken(Taken {
        kind: "Workload".into(),
        namespace: "exec".into(),
        name: JOB.into(),
        why: "it lacks the labels".into(),
    });
    let failed = Refusal::CreateFailed {
        error: "cannot create sentinel cluster-lock-a: forbidden".into(),
    };
    vec![
        // No owner.
        Row { owner: None, status: FournosClusterStatus { kueue: status(None, 100).kueue, ..Default::default() }, ..row("never locked", "NeverLocked", None) },
        Row { owner: None, status: expired_record(), ..row("expired", "Expired", Some(R::Expired)) },
        fournos(Row { owner: None, status: expired_record(), ..row("expired, still releasing", "Expired", Some(R::Expired)) }, vec![], vec![workload("u1", true)]),
        Row { owner: None, sentinels: vec![sentinel("alice", S::Holding)], actions: &["delete"], ..row("released", "Released", Some(R::Released)) },
        fournos(Row { owner: None, ..row("releasing", "Releasing", Some(R::Releasing)) }, vec![deleting()], vec![workload("u1", true)]),
        Row { owner: Some("a\nb"), sentinels: vec![sentinel("alice", S::Holding)], actions: &["delete"], ..row("invalid owner", "InvalidOwner", Some(R::InvalidOwner)) },
        // The owner's lock, without a sentinel of the owner.
        Row { ttl: Some("1m"), sentinels: vec![sentinel("alice", S::Holding)], actions: &["delete", "clear-owner"], events: &["LockExpired"], ..row("expiring", "Expiring", Some(R::Expired)) },
        Row { status: FournosClusterStatus::default(), ..row("waiting for flavor", "WaitingForFlavor", Some(R::WaitingForFlavor)) },
        Row { owner: Some("bob"), sentinels: vec![sentinel("alice", S::Holding)], actions: &["delete"], ..row("replacing", "Replacing", Some(R::WaitingForAdmission)) },
        fournos(Row { owner: Some("bob"), actions: &["delete"], ..row("replacing, releasing", "Replacing", Some(R::WaitingForRelease)) }, vec![admitted()], vec![workload("u1", true)]),
        Row { actions: &["create"], ..row("creating", "Creating", Some(R::WaitingForAdmission)) },
        fournos(Row { actions: &["create"], ..row("creating, older going", "Creating", Some(R::WaitingForRelease)) }, vec![JobView { name: "cluster-lock-a-old".into(), ..deleting() }], vec![]),
        fournos(row("old Workload of the name", "OldWorkload", Some(R::WaitingForRelease)), vec![], vec![workload("old-uid", false)]),
        fournos(row("someone's Workload of the name", "OldWorkload", Some(R::SentinelNameTaken)), vec![], vec![LockWorkloadView { job: None, ..workload("old-uid", false) }]),
        Row { refusal: Some(taken), ..row("name taken", "NameTaken", Some(R::SentinelNameTaken)) },
        Row { refusal: Some(failed), ..row("create failed", "CreateFailed", Some(R::SentinelCreateFailed)) },
        // The owner's sentinel.
        Row { sentinels: vec![sentinel("alice", S::Waiting(None))], ..row("waiting", "Waiting", Some(R::WaitingForAdmission)) },
        fournos(row("waiting for Fournos", "Waiting", Some(R::WaitingForAdmission)), vec![JobView { created: Some(at(50)), ..job("u1", None) }], vec![]),
        fournos(row("not picked up", "NotPickedUp", Some(R::SentinelNotPickedUp)), vec![job("u1", None)], vec![]),
        fournos(row("awaiting its Workload", "AwaitingWorkload", Some(R::WaitingForAdmission)), vec![JobView { admitted_at: Some(at(58)), ..admitted() }], vec![]),
        fournos(Row { actions: &["delete"], events: &[WORKLOAD_LOST_EVENT], ..row("Workload gone", "WorkloadLost", Some(R::WorkloadLost)) }, vec![admitted()], vec![]),
        fournos(Row { actions: &["delete"], events: &[WORKLOAD_LOST_EVENT], ..row("Workload evicted", "WorkloadLost", Some(R::WorkloadLost)) }, vec![admitted()], vec![LockWorkloadView { evicted: true, ..workload("u1", true) }]),
        fournos(Row { actions: &["delete"], events: &[WORKLOAD_LOST_EVENT], ..row("Workload finished", "WorkloadLost", Some(R::WorkloadLost)) }, vec![admitted()], vec![LockWorkloadView { finished: true, ..workload("u1", true) }]),
        fournos(Row { actions: &["delete"], events: &[WORKLOAD_LOST_EVENT], ..row("Workload changed", "WorkloadLost", Some(R::WorkloadLost)) }, vec![admitted()], vec![LockWorkloadView { slots: Some(1), ..workload("u1", true) }]),
        fournos(row("Workload of another job", "Unproven", Some(R::WorkloadNotProven)), vec![admitted()], vec![workload("someone-else", true)]),
        fournos(row("Workload older than the job", "Unproven", Some(R::WorkloadNotProven)), vec![admitted()], vec![LockWorkloadView { created: Some(at(-1)), ..workload("u1", true) }]),
        fournos(row("Workload's slots unreadable", "Unproven", Some(R::WorkloadNotProven)), vec![admitted()], vec![LockWorkloadView { slots: None, ..workload("u1", true) }]),
        Row { sentinels: vec![sentinel("alice", S::Misplaced(Misplaced::WrongFlavor("on b".into())))], ..row("wrong flavor", "Misplaced", Some(R::WrongFlavor)) },
        fournos(row("Workload on a wrong flavor", "Misplaced", Some(R::WrongFlavor)), vec![admitted()], vec![on_flavor("b")]),
        Row { sentinels: vec![sentinel("alice", S::Misplaced(Misplaced::WrongSlots("it holds 50".into())))], actions: &["delete"], ..row("wrong slots", "Misplaced", Some(R::SlotsMismatch)) },
        fournos(Row { status: with_slots(120), ..row("Workload with too few slots", "Misplaced", Some(R::SlotsMismatch)) }, vec![admitted()], vec![workload("u1", true)]),
        fournos(Row { status: with_slots(120), ..row("Fournos asks other slots", "Misplaced", Some(R::SlotsMismatch)) }, vec![job("u1", Some("Pending"))], vec![]),
        Row { sentinels: vec![sentinel("alice", S::Holding)], locked: true, ..row("held", "Held", Some(R::Held)) },
        fournos(Row { locked: true, ..row("held through its Workload", "Held", Some(R::Held)) }, vec![admitted()], vec![workload("u1", true)]),
        // What a sentinel says is not enough: unproven, it is never held, and never
        // deleted (the create meets it and names it: `SentinelNameTaken`).
        Row { sentinels: vec![SentinelView { ours: false, proven: false, ..sentinel("alice", S::Holding) }], actions: &["create"], ..row("unproven", "Creating", Some(R::WaitingForAdmission)) },
        Row { owner: None, sentinels: vec![SentinelView { ours: false, proven: false, ..sentinel("alice", S::Holding) }], ..row("unproven, unlocked", "Released", Some(R::Released)) },
        // Ours, but someone changed it (pinned elsewhere): never held, replaced, and
        // deleted on unlock (it would hold whatever it now asks for).
        Row { sentinels: vec![SentinelView { proven: false, ..sentinel("alice", S::Holding) }], actions: &["delete"], ..row("ours, changed", "Replacing", Some(R::WaitingForAdmission)) },
        Row { owner: None, sentinels: vec![SentinelView { proven: false, ..sentinel("alice", S::Holding) }], actions: &["delete"], ..row("ours, changed, unlocked", "Released", Some(R::Released)) },
    ]
}

/// One row per state and `Locked` reason of the state table in the crate docs: the
/// state [`classify`] finds, and what [`crate::plan::plan`] makes of it.
#[test]
fn state_table() {
    let mut said = std::collections::BTreeSet::new();
    for row in table() {
        let name = row.name;
        let (cluster, facts) = (row.cluster(), row.facts());
        let classified = classify(&cluster, &row.sentinels, facts.as_ref(), at(60));
        let mut plan = crate::plan::plan(&classified, &cluster, &row.sentinels, at(60));
        assert_eq!(
            plan,
            plan_lock(&cluster, &row.sentinels, facts.as_ref(), at(60)),
            "{name}"
        );
        if let Some(refusal) = row.refusal.clone() {
            plan.status = plan.refused(refusal.clone()).expect("a lock");
            plan.state = classified.refused(refusal).expect("a lock");
            plan.actions.clear();
        }
        let state = &plan.state;
        assert!(
            format!("{state:?}").starts_with(row.state),
            "{name}: classified {state:?}"
        );
        assert_eq!(state.reason(), row.reason, "{name}");
        assert_eq!(
            plan.status.condition.as_ref().map(|c| c.reason),
            row.reason,
            "{name}"
        );
        assert_eq!(plan.status.locked, row.locked, "{name}");
        let kinds: Vec<&str> = plan
            .actions
            .iter()
            .map(|a| match a {
                LockAction::CreateSentinel { .. } => "create",
                LockAction::DeleteSentinel { .. } => "delete",
                LockAction::ClearOwner { .. } => "clear-owner",
            })
            .collect();
        assert_eq!(kinds, row.actions, "{name}");
        let events: Vec<&str> = plan.events.iter().map(|e| e.reason).collect();
        assert_eq!(events, row.events, "{name}");
        assert_eq!(
            plan.status.lock_owner.is_some(),
            state.lock().is_some(),
            "{name}: the lock's fields are written exactly in the states with an owner"
        );
        assert_eq!(
            plan.status.expired_lock.is_some(),
            matches!(
                state,
                LockState::Expired { .. } | LockState::Expiring { .. }
            ),
            "{name}: the expiry is recorded exactly while the lock says Expired"
        );
        if let Some(c) = &plan.status.condition {
            assert!(!c.message.is_empty(), "{name}");
        }
        said.extend(row.reason);
    }
    for reason in LockedReason::ALL {
        assert!(said.contains(reason), "no row of the table says {reason}");
    }
}

/// The words that carry facts from an earlier state come from typed data.
#[test]
fn words_from_typed_facts() {
    let by_name = |n: &str| table().into_iter().find(|r| r.name == n).unwrap();
    let plan_of =
        |row: &Row| plan_lock(&row.cluster(), &row.sentinels, row.facts().as_ref(), at(60));
    let expired = plan_of(&by_name("expired"));
    let releasing = plan_of(&by_name("expired, still releasing"));
    let base = "The lock of alice expired at 2026-09-21T14:13:50Z (ttl 30s); the cluster was \
                released and spec.owner cleared.";
    assert_eq!(message(&expired), base);
    assert_eq!(
        message(&releasing),
        format!(
            "{base} Still releasing: waiting for Workload {JOB} to be deleted by the garbage \
             collector once its FournosJob is gone; it still holds the cluster's slots."
        )
    );
    let row = by_name("old Workload of the name");
    let plan = plan_of(&row);
    assert_eq!(plan.blocked_create.as_deref(), Some(JOB));
    let taken = plan
        .refused(Refusal::NameTaken(Taken {
            kind: "FournosJob".into(),
            namespace: "exec".into(),
            name: JOB.into(),
            why: "it is managed by someone".into(),
        }))
        .unwrap();
    assert_eq!(taken.lock_job_name, None);
    assert_eq!(taken.lock_owner.as_deref(), Some("alice"));
    assert!(
        taken.condition.unwrap().message.starts_with(
            "FournosJob exec/cluster-lock-a already exists and is not this Hearth's sentinel (it is managed by someone)"
        )
    );
}

/// The Events a change of state deserves besides the plan's own, one row per
/// transition: from the stored reason (`None`: no condition; `Some(None)`: one this
/// version does not know) to the new state's reason.
#[test]
fn transitions() {
    use crate::status::Transition as T;
    use LockedReason as R;
    /// from (stored), to, same owner, the Event.
    type Row = (Option<Option<R>>, R, bool, Option<T>);
    #[rustfmt::skip]
    let rows: &[Row] = &[
        // from,                          to,                     same owner, Event
        (None,                            R::Held,                true,  Some(T::Held)),
        (Some(Some(R::WaitingForAdmission)), R::Held,             true,  Some(T::Held)),
        (Some(None),                      R::Held,                true,  Some(T::Held)),
        (Some(Some(R::Held)),             R::Held,                true,  None),
        (Some(Some(R::Held)),             R::Released,            true,  Some(T::Released)),
        (Some(Some(R::Releasing)),        R::Released,            false, Some(T::Released)),
        (Some(Some(R::WorkloadLost)),     R::Released,            false, Some(T::Released)),
        (Some(Some(R::Released)),         R::Released,            false, None),
        (Some(Some(R::Expired)),          R::Released,            false, None),
        (None,                            R::Released,            false, None),
        (Some(Some(R::Held)),             R::WaitingForAdmission, true,  Some(T::Lost)),
        (Some(Some(R::Held)),             R::WaitingForAdmission, false, None),
        (Some(Some(R::Held)),             R::WrongFlavor,         true,  Some(T::Lost)),
        (Some(Some(R::Held)),             R::SlotsMismatch,       true,  Some(T::Lost)),
        (Some(Some(R::Held)),             R::WorkloadNotProven,   true,  Some(T::Lost)),
        // Said by the plan's own Event (LockWorkloadLost, LockExpired).
        (Some(Some(R::Held)),             R::WorkloadLost,        true,  None),
        (Some(Some(R::Held)),             R::Expired,             true,  None),
        (Some(Some(R::Held)),             R::SentinelNameTaken,   true,  None),
        (Some(Some(R::WaitingForAdmission)), R::WorkloadLost,     true,  None),
    ];
    for (from, to, same_owner, want) in rows {
        assert_eq!(
            T::between(*from, *to, *same_owner),
            *want,
            "{from:?} -> {to:?} (same owner: {same_owner})"
        );
    }
}
