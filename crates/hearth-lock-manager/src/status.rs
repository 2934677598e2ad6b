//! From the plan's [`LockStatus`] to what is written and said: the status patch (only
//! when something changed) and the Events a change deserves. Pure.

use hearth_api::conditions::{self, DesiredCondition, next_condition};
use hearth_api::names::condition_types::LOCKED;
use hearth_api::reasons::LockedReason;
use hearth_api::{FournosClusterStatus, LockManagerStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use hearth_runtime::events::Event;

use crate::plan::{ACTION, LockStatus};

/// The status to apply (server-side, lock-manager's field manager) to get from
/// `current` to `desired`, or `None` when it already says that.
pub fn status_patch(
    current: &FournosClusterStatus,
    generation: Option<i64>,
    desired: &LockStatus,
    now: Timestamp,
) -> Option<Value> {
    let stored = LockManagerStatus::of(current);
    let slice = match &desired.condition {
        // Never locked: nothing to say but who holds the slots. Anything left over of
        // ours is removed.
        None => LockManagerStatus {
            slot_holders: desired.slot_holders.clone(),
            ..LockManagerStatus::default()
        },
        Some(want) => LockManagerStatus {
            locked: Some(desired.locked),
            lock_job_name: desired.lock_job_name.clone(),
            lock_job_uid: desired.lock_job_uid.clone(),
            lock_workload_uid: desired.lock_workload_uid.clone(),
            owner_set_at: desired.owner_set_at.map(Time),
            lock_owner: desired.lock_owner.clone(),
            lock_expires_at: desired.lock_expires_at.map(Time),
            expired_lock: desired.expired_lock.clone(),
            slot_holders: desired.slot_holders.clone(),
            conditions: vec![next_condition(
                stored.conditions.first(),
                &DesiredCondition::new(LOCKED, desired.locked, want.reason, want.message.clone()),
                generation,
                &Time(now),
            )],
        },
    };
    (slice != stored).then(|| serde_json::to_value(slice).expect("a status serializes"))
}

/// Whether this write is the moment the lock became held.
pub fn became_held(current: &FournosClusterStatus, desired: &LockStatus) -> bool {
    desired.locked && current.locked != Some(true)
}

/// The Events a change of lock state deserves, besides the plan's own (`LockExpired`).
/// One row per transition; the first matching row wins.
///
/// | from (stored `Locked` reason)       | to                    | Event          |
/// |-------------------------------------|-----------------------|----------------|
/// | anything but `Held`, or none        | `Held`                | `LockHeld`     |
/// | anything but `Released`/`Expired`   | `Released`            | `LockReleased` |
/// | `Held`, same owner                  | `WaitingForAdmission`, `WrongFlavor`, `SlotsMismatch` | `LockLost` (Warning) |
///
/// A change of owner is `LockOwnerChanged` besides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    Held,
    Released,
    Lost,
}

impl Transition {
    /// The Event reason.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Held => "LockHeld",
            Self::Released => "LockReleased",
            Self::Lost => "LockLost",
        }
    }

    /// The transition from the stored reason `from` (`None`: no `Locked` condition;
    /// `Some(None)`: a reason this version does not know) to `to`.
    pub fn between(
        from: Option<Option<LockedReason>>,
        to: LockedReason,
        same_owner: bool,
    ) -> Option<Self> {
        use LockedReason as R;
        match (from, to) {
            (from, R::Held) if from != Some(Some(R::Held)) => Some(Self::Held),
            (Some(from), R::Released) if !matches!(from, Some(R::Released | R::Expired)) => {
                Some(Self::Released)
            }
            (
                Some(Some(R::Held)),
                R::WaitingForAdmission | R::WrongFlavor | R::SlotsMismatch | R::WorkloadNotProven,
            ) if same_owner => Some(Self::Lost),
            _ => None,
        }
    }
}

/// Events for the change from `current` to `desired` (besides the plan's own, such as
/// `LockExpired`). Derived from the stored status, so each is said once, also across
/// restarts.
pub fn transition_events(current: &FournosClusterStatus, desired: &LockStatus) -> Vec<Event> {
    let Some(want) = &desired.condition else {
        return vec![];
    };
    let mut events = Vec::new();
    if let (Some(before), Some(after)) =
        (current.lock_owner.as_deref(), desired.lock_owner.as_deref())
        && before != after
    {
        events.push(Event::normal(
            "LockOwnerChanged",
            ACTION,
            format!("The lock passes from {before} to {after}."),
        ));
    }
    // The state before, as the stored condition records it: read from the API object
    // into the typed reason (an unknown one, from another version, is `Some(None)`).
    let from =
        conditions::find(&current.conditions, LOCKED).map(|c| LockedReason::parse(&c.reason));
    let to = want.reason;
    let same_owner = current.lock_owner == desired.lock_owner;
    match Transition::between(from, to, same_owner) {
        Some(Transition::Lost) => events.push(Event::warning(
            Transition::Lost.reason(),
            ACTION,
            format!(
                "The lock of {} is no longer held: {}",
                desired.lock_owner.as_deref().unwrap_or_default(),
                want.message
            ),
        )),
        Some(t) => events.push(Event::normal(t.reason(), ACTION, want.message.clone())),
        None => {}
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::LockCondition;
    use pretty_assertions::assert_eq;

    const T0: i64 = 1_790_000_000;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(T0 + secs).unwrap()
    }

    fn held(owner: &str) -> LockStatus {
        LockStatus {
            locked: true,
            lock_job_name: Some("cluster-lock-a".into()),
            lock_job_uid: Some("uid-a".into()),
            lock_workload_uid: Some("w-a".into()),
            owner_set_at: Some(at(0)),
            lock_expires_at: Some(at(3600)),
            lock_owner: Some(owner.into()),
            expired_lock: None,
            condition: Some(LockCondition {
                reason: LockedReason::Held,
                message: "Locked for alice".into(),
            }),
            slot_holders: vec![],
        }
    }

    fn waiting(owner: &str) -> LockStatus {
        LockStatus {
            locked: false,
            condition: Some(LockCondition {
                reason: LockedReason::WaitingForAdmission,
                message: "Sentinel waits".into(),
            }),
            ..held(owner)
        }
    }

    /// The status as it reads back after `patch` was applied to an empty one.
    fn written(patch: &Value) -> FournosClusterStatus {
        serde_json::from_value(patch.clone()).unwrap()
    }

    /// A cluster nobody locked still says who holds its slots (a Fournos lock made by
    /// another tool, an exclusive job), and says nothing else.
    #[test]
    fn an_unlocked_cluster_names_who_holds_its_slots() {
        let holder = hearth_api::SlotHolder {
            workload: "exec/lock-a".into(),
            job: Some("lock-a".into()),
            owner: None,
            slots: 100,
        };
        let desired = LockStatus {
            slot_holders: vec![holder.clone()],
            ..LockStatus::default()
        };
        let patch = status_patch(&FournosClusterStatus::default(), None, &desired, at(0))
            .expect("the holders are written");
        assert_eq!(
            patch,
            serde_json::json!({ "slotHolders": [{ "workload": "exec/lock-a", "job": "lock-a", "slots": 100 }] })
        );
        let stored = FournosClusterStatus {
            slot_holders: vec![holder],
            ..FournosClusterStatus::default()
        };
        assert_eq!(status_patch(&stored, None, &desired, at(1)), None);
    }

    /// The patch that writes `desired` over an empty status, at `secs`.
    fn patch_over_empty(generation: Option<i64>, desired: &LockStatus, secs: i64) -> Value {
        status_patch(
            &FournosClusterStatus::default(),
            generation,
            desired,
            at(secs),
        )
        .unwrap()
    }

    #[test]
    fn first_lock_writes_every_field() {
        let patch = patch_over_empty(Some(2), &held("alice"), 5);
        assert_eq!(patch["locked"], true);
        assert_eq!(patch["lockJobName"], "cluster-lock-a");
        assert_eq!(patch["ownerSetAt"], "2026-09-21T14:13:20Z");
        assert_eq!(patch["lockExpiresAt"], "2026-09-21T15:13:20Z");
        assert_eq!(patch["lockOwner"], "alice");
        let c = &patch["conditions"][0];
        assert_eq!(c["type"], "Locked");
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], "Held");
        assert_eq!(c["observedGeneration"], 2);
        assert_eq!(c["lastTransitionTime"], "2026-09-21T14:13:25Z");
    }

    #[test]
    fn nothing_is_written_when_nothing_changed() {
        let patch = patch_over_empty(Some(2), &held("alice"), 5);
        let current = written(&patch);
        assert_eq!(
            status_patch(&current, Some(2), &held("alice"), at(99)),
            None
        );
        // A new generation (someone edited the spec) is reported.
        assert!(status_patch(&current, Some(3), &held("alice"), at(99)).is_some());
    }

    #[test]
    fn fields_that_no_longer_apply_are_left_out() {
        let current = written(&patch_over_empty(Some(1), &held("alice"), 5));
        let released = LockStatus {
            condition: Some(LockCondition {
                reason: LockedReason::Released,
                message: "No owner".into(),
            }),
            ..LockStatus::default()
        };
        let patch = status_patch(&current, Some(1), &released, at(10)).unwrap();
        assert_eq!(patch["locked"], false);
        for gone in ["lockJobName", "ownerSetAt", "lockExpiresAt", "lockOwner"] {
            assert!(patch.get(gone).is_none(), "{gone}");
        }
        assert_eq!(
            patch["conditions"][0]["lastTransitionTime"],
            "2026-09-21T14:13:30Z"
        );
    }

    #[test]
    fn never_locked_cluster_writes_nothing() {
        assert_eq!(
            status_patch(
                &FournosClusterStatus::default(),
                Some(1),
                &LockStatus::default(),
                at(0)
            ),
            None
        );
    }

    #[test]
    fn transition_time_is_kept_while_status_stays() {
        let current = written(&patch_over_empty(Some(1), &waiting("alice"), 0));
        let mut other_message = waiting("alice");
        other_message.condition.as_mut().unwrap().message = "still waiting".into();
        let patch = status_patch(&current, Some(1), &other_message, at(30)).unwrap();
        assert_eq!(
            patch["conditions"][0]["lastTransitionTime"],
            "2026-09-21T14:13:20Z"
        );
    }

    #[test]
    fn events_on_transitions_only() {
        let empty = FournosClusterStatus::default();
        let reasons_of = |from: &FournosClusterStatus, to: &LockStatus| {
            transition_events(from, to)
                .into_iter()
                .map(|e| e.reason)
                .collect::<Vec<_>>()
        };
        let waiting_status = written(&patch_over_empty(None, &waiting("alice"), 0));
        let held_status = written(&patch_over_empty(None, &held("alice"), 0));

        assert_eq!(reasons_of(&empty, &waiting("alice")), Vec::<&str>::new());
        assert_eq!(
            reasons_of(&waiting_status, &held("alice")),
            vec!["LockHeld"]
        );
        assert_eq!(reasons_of(&held_status, &held("alice")), Vec::<&str>::new());
        assert_eq!(
            reasons_of(&held_status, &waiting("alice")),
            vec!["LockLost"]
        );
        assert_eq!(
            reasons_of(&held_status, &waiting("bob")),
            vec!["LockOwnerChanged"]
        );
        let released = LockStatus {
            condition: Some(LockCondition {
                reason: LockedReason::Released,
                message: "No owner".into(),
            }),
            ..LockStatus::default()
        };
        assert_eq!(reasons_of(&held_status, &released), vec!["LockReleased"]);
        let released_status = written(&status_patch(&held_status, None, &released, at(9)).unwrap());
        assert_eq!(reasons_of(&released_status, &released), Vec::<&str>::new());
        assert!(became_held(&waiting_status, &held("alice")));
        assert!(!became_held(&held_status, &held("alice")));
    }

    /// One row per transition of [`Transition`]'s table, and the rows next to them that
    /// must stay quiet.
    #[test]
    fn transition_table() {
        use LockedReason as R;
        #[rustfmt::skip]
        let rows = [
            // stored reason,               new reason,              same owner, Event
            (None,                          R::Held,                 true,  Some(Transition::Held)),
            (Some(Some(R::WaitingForAdmission)), R::Held,            true,  Some(Transition::Held)),
            (Some(None),                    R::Held,                 true,  Some(Transition::Held)),
            (Some(Some(R::Held)),           R::Held,                 true,  None),
            (Some(Some(R::Held)),           R::Released,             true,  Some(Transition::Released)),
            (Some(Some(R::WaitingForFlavor)), R::Released,           true,  Some(Transition::Released)),
            (Some(None),                    R::Released,             true,  Some(Transition::Released)),
            (None,                          R::Released,             true,  None),
            (Some(Some(R::Released)),       R::Released,             true,  None),
            (Some(Some(R::Expired)),        R::Released,             true,  None),
            (Some(Some(R::Held)),           R::WaitingForAdmission,  true,  Some(Transition::Lost)),
            (Some(Some(R::Held)),           R::WaitingForAdmission,  false, None),
            (Some(Some(R::WaitingForFlavor)), R::WaitingForAdmission, true, None),
            (Some(Some(R::Held)),           R::Expired,              true,  None),
            (Some(Some(R::Held)),           R::WorkloadLost,         true,  None),
        ];
        for (from, to, same_owner, expected) in rows {
            assert_eq!(
                Transition::between(from, to, same_owner),
                expected,
                "{from:?} -> {to:?}, same owner {same_owner}"
            );
        }
    }
}
