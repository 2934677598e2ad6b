use super::*;
use crate::views::Misplaced;
use hearth_api::FournosClusterStatus;
use hearth_api::KueueStatus;
use hearth_api::conditions::DesiredCondition;
use hearth_api::conditions::next_condition;
use hearth_api::names::condition_types::LOCKED;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;
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

/// The plan, at `now` seconds, for alice's lock taken at `since` and held by her sentinel.
fn alices_held_lock(since: i64, ttl: Option<&str>, now: i64) -> LockPlan {
    let status = locked_since("alice", since);
    let s = [sentinel("cluster-lock-a", "alice", SentinelState::Holding)];
    plan_lock(&view(Some("alice"), ttl, &status), &s, at(now))
}

/// The actions that create `owner`'s sentinel of cluster `a`, and nothing else.
fn create_sentinel_for(owner: &str) -> Vec<LockAction> {
    vec![LockAction::CreateSentinel {
        name: "cluster-lock-a".into(),
        owner: owner.into(),
    }]
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
        cordoned: false,
        status,
    }
}

/// A proven sentinel (the one lock-manager created), its UID `uid-<name>`.
fn sentinel(name: &str, owner: &str, state: SentinelState) -> SentinelView {
    SentinelView {
        name: name.into(),
        uid: Some(format!("uid-{name}")),
        owner: Some(owner.into()),
        ours: true,
        proven: true,
        state,
    }
}

/// An object with the sentinel labels that lock-manager did not create.
fn impostor(name: &str, owner: &str, state: SentinelState) -> SentinelView {
    SentinelView {
        ours: false,
        proven: false,
        ..sentinel(name, owner, state)
    }
}

fn reason(plan: &LockPlan) -> &str {
    plan.status.condition.as_ref().unwrap().reason.as_str()
}

/// A `workload` lock-manager's plan: no Fournos behind the sentinels.
fn plan_lock(cluster: &ClusterView<'_>, sentinels: &[SentinelView], now: Timestamp) -> LockPlan {
    super::plan_lock(cluster, sentinels, None, now)
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
    assert_eq!(plan.actions, create_sentinel_for("alice"));
    assert_eq!(reason(&plan), reasons::WAITING_FOR_ADMISSION);
    assert_eq!(
        (plan.status.lock_job_name, plan.status.lock_job_uid),
        (None, None),
        "the name is written with the UID the create answers, never alone"
    );
    assert_eq!(plan.status.lock_owner.as_deref(), Some("alice"));
    assert_eq!(plan.requeue_after, None);
}

#[test]
fn admitted_sentinel_means_locked() {
    let plan = alices_held_lock(0, None, 10);
    assert_eq!(plan.actions, vec![]);
    assert!(plan.status.locked);
    assert_eq!(reason(&plan), reasons::HELD);
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
    let plan = alices_held_lock(0, Some("30m"), 600);
    assert_eq!(plan.status.lock_expires_at, Some(at(1800)));
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(1200)));
    assert!(plan.status.condition.unwrap().message.contains("until"));
}

#[test]
fn ttl_changed_while_locked_moves_expiry() {
    let plan = alices_held_lock(0, Some("2h"), 600);
    assert_eq!(plan.status.lock_expires_at, Some(at(7200)));
}

#[test]
fn expiry_deletes_sentinel_clears_owner_and_records_event() {
    // Exactly at the expiry instant the lock is over.
    let plan = alices_held_lock(0, Some("1m"), 60);
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
    let plan = alices_held_lock(0, Some("1m"), 59);
    assert_eq!(reason(&plan), reasons::HELD);
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(1)));
}

#[test]
fn expired_reason_survives_the_owner_being_cleared() {
    let mut status = locked_since("alice", 0);
    let expired = DesiredCondition::new(
        LOCKED,
        false,
        LockedReason::Expired,
        "The lock of alice expired",
    );
    status.conditions = vec![next_condition(None, &expired, Some(1), &Time(at(60)))];
    // A stored Expired condition alone (an older version's) is not read back.
    let plan = plan_lock(&view(None, None, &status), &[], at(61));
    assert_eq!(reason(&plan), reasons::RELEASED);
    // The typed record of the expiry is.
    status.expired_lock = Some(hearth_api::ExpiredLock {
        owner: "alice".into(),
        expired_at: Time(at(60)),
        ttl: Some("1m".into()),
    });
    let plan = plan_lock(&view(None, None, &status), &[], at(61));
    assert_eq!(reason(&plan), reasons::EXPIRED);
    assert_eq!(
        message(&plan),
        "The lock of alice expired at 2026-09-21T14:14:20Z (ttl 1m); the cluster was released \
         and spec.owner cleared."
    );
    assert_eq!(plan.status.expired_lock, status.expired_lock);
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
        expired_lock: written.expired_lock,
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
    assert_eq!(c.reason.as_str(), reasons::INVALID_OWNER);
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
    assert_eq!(plan.actions, create_sentinel_for("bob"));
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

/// An object that carries the sentinel labels and says it is the owner's, admitted,
/// is not a lock unless lock-manager made it; and labels never make lock-manager
/// delete it (anyone who may patch an object could otherwise have it deleted).
#[test]
fn a_labelled_impostor_never_holds_and_is_never_deleted() {
    let status = locked_since("alice", 0);
    let s = [impostor("cluster-lock-a", "alice", SentinelState::Holding)];
    let plan = plan_lock(&view(Some("alice"), None, &status), &s, at(10));
    assert!(!plan.status.locked);
    assert_eq!(reason(&plan), reasons::WAITING_FOR_ADMISSION);
    assert_eq!(
        plan.actions,
        create_sentinel_for("alice"),
        "the create meets it, and the apply step names it (SentinelNameTaken)"
    );
    let plan = plan_lock(&view(None, None, &status), &s, at(10));
    assert_eq!(plan.actions, vec![], "not deleted on unlock either");
    // Beside the real one: the real one is kept, the impostor left alone.
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
    assert_eq!(plan.actions, vec![]);
}

#[test]
fn a_held_lock_records_its_sentinels_uid() {
    let plan = alices_held_lock(0, None, 10);
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
    assert_eq!(plan.actions, create_sentinel_for("alice"));
    assert!(!plan.status.locked);
    assert_eq!(plan.status.owner_set_at, Some(at(0)));
}

#[test]
fn invalid_ttl_locks_without_expiry_and_says_why() {
    let plan = alices_held_lock(0, Some("0m"), 10);
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
    let plan = alices_held_lock(100, Some("1m"), 0);
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
    let plan = alices_held_lock(0, Some("36500d"), 0);
    assert!(plan.status.locked);
    assert!(plan.status.lock_expires_at.is_some());
}
