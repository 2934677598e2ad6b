//! From the plan's [`LockStatus`] to what is written and said: the status patch (only
//! when something changed) and the Events a change deserves. Pure.

use hearth_api::FournosClusterStatus;
use hearth_api::conditions::{self, next_condition};
use hearth_api::names::condition_types::LOCKED;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value, json};

use crate::plan::{LockEvent, LockStatus, reasons};

/// The status fields lock-manager owns, as they appear in JSON.
const FIELDS: [&str; 5] = [
    "locked",
    "lockJobName",
    "ownerSetAt",
    "lockExpiresAt",
    "lockOwner",
];

fn time(t: Option<Timestamp>) -> Option<Value> {
    t.map(|t| serde_json::to_value(Time(t)).expect("a time serializes"))
}

/// The status to apply (server-side, lock-manager's field manager) to get from
/// `current` to `desired`, or `None` when it already says that.
pub fn status_patch(
    current: &FournosClusterStatus,
    generation: Option<i64>,
    desired: &LockStatus,
    now: Timestamp,
) -> Option<Value> {
    let current_json = serde_json::to_value(current).expect("a status serializes");
    let current_condition = conditions::find(&current.conditions, LOCKED);
    let Some(want) = &desired.condition else {
        // Never locked: nothing to say. Anything left over of ours is removed.
        let leftovers =
            FIELDS.iter().any(|f| current_json.get(f).is_some()) || current_condition.is_some();
        return leftovers.then(|| json!({}));
    };
    let mut patch = Map::new();
    patch.insert("locked".into(), desired.locked.into());
    let optional = [
        (
            "lockJobName",
            desired.lock_job_name.clone().map(Value::from),
        ),
        ("ownerSetAt", time(desired.owner_set_at)),
        ("lockExpiresAt", time(desired.lock_expires_at)),
        ("lockOwner", desired.lock_owner.clone().map(Value::from)),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            patch.insert(key.into(), value);
        }
    }
    let condition = next_condition(current_condition, want, generation, &Time(now));
    let unchanged = FIELDS.iter().all(|f| patch.get(*f) == current_json.get(*f))
        && current_condition == Some(&condition);
    if unchanged {
        return None;
    }
    patch.insert(
        "conditions".into(),
        json!([serde_json::to_value(&condition).expect("a condition serializes")]),
    );
    Some(Value::Object(patch))
}

/// Whether this write is the moment the lock became held.
pub fn became_held(current: &FournosClusterStatus, desired: &LockStatus) -> bool {
    desired.locked && current.locked != Some(true)
}

/// Events for the change from `current` to `desired` (besides the plan's own, such as
/// `LockExpired`). Derived from the stored status, so each is said once, also across
/// restarts.
pub fn transition_events(current: &FournosClusterStatus, desired: &LockStatus) -> Vec<LockEvent> {
    let Some(want) = &desired.condition else {
        return vec![];
    };
    let previous = conditions::find(&current.conditions, LOCKED);
    let previous_reason = previous.map(|c| c.reason.as_str());
    let mut events = Vec::new();
    let event = |reason: &'static str, message: String, warning: bool| LockEvent {
        reason,
        message,
        warning,
    };
    if let (Some(before), Some(after)) =
        (current.lock_owner.as_deref(), desired.lock_owner.as_deref())
        && before != after
    {
        events.push(event(
            "LockOwnerChanged",
            format!("The lock passes from {before} to {after}."),
            false,
        ));
    }
    match want.reason.as_str() {
        reasons::HELD if previous_reason != Some(reasons::HELD) => {
            events.push(event("LockHeld", want.message.clone(), false));
        }
        reasons::RELEASED
            if previous.is_some()
                && previous_reason != Some(reasons::RELEASED)
                && previous_reason != Some(reasons::EXPIRED) =>
        {
            events.push(event("LockReleased", want.message.clone(), false));
        }
        reasons::WAITING_FOR_ADMISSION
            if previous_reason == Some(reasons::HELD)
                && current.lock_owner == desired.lock_owner =>
        {
            events.push(event(
                "LockLost",
                format!(
                    "The lock of {} is no longer held: {}",
                    desired.lock_owner.as_deref().unwrap_or_default(),
                    want.message
                ),
                true,
            ));
        }
        _ => {}
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_api::conditions::DesiredCondition;
    use pretty_assertions::assert_eq;

    const T0: i64 = 1_790_000_000;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(T0 + secs).unwrap()
    }

    fn held(owner: &str) -> LockStatus {
        LockStatus {
            locked: true,
            lock_job_name: Some("cluster-lock-a".into()),
            owner_set_at: Some(at(0)),
            lock_expires_at: Some(at(3600)),
            lock_owner: Some(owner.into()),
            condition: Some(DesiredCondition::new(
                LOCKED,
                true,
                reasons::HELD,
                "Locked for alice",
            )),
        }
    }

    fn waiting(owner: &str) -> LockStatus {
        LockStatus {
            locked: false,
            condition: Some(DesiredCondition::new(
                LOCKED,
                false,
                reasons::WAITING_FOR_ADMISSION,
                "Sentinel waits",
            )),
            ..held(owner)
        }
    }

    /// The status as it reads back after `patch` was applied to an empty one.
    fn written(patch: &Value) -> FournosClusterStatus {
        serde_json::from_value(patch.clone()).unwrap()
    }

    #[test]
    fn first_lock_writes_every_field() {
        let patch = status_patch(
            &FournosClusterStatus::default(),
            Some(2),
            &held("alice"),
            at(5),
        )
        .unwrap();
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
        let patch = status_patch(
            &FournosClusterStatus::default(),
            Some(2),
            &held("alice"),
            at(5),
        )
        .unwrap();
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
        let current = written(
            &status_patch(
                &FournosClusterStatus::default(),
                Some(1),
                &held("alice"),
                at(5),
            )
            .unwrap(),
        );
        let released = LockStatus {
            condition: Some(DesiredCondition::new(
                LOCKED,
                false,
                reasons::RELEASED,
                "No owner",
            )),
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
        let current = written(
            &status_patch(
                &FournosClusterStatus::default(),
                Some(1),
                &waiting("alice"),
                at(0),
            )
            .unwrap(),
        );
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
        let waiting_status =
            written(&status_patch(&empty, None, &waiting("alice"), at(0)).unwrap());
        let held_status = written(&status_patch(&empty, None, &held("alice"), at(0)).unwrap());

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
            condition: Some(DesiredCondition::new(
                LOCKED,
                false,
                reasons::RELEASED,
                "No owner",
            )),
            ..LockStatus::default()
        };
        assert_eq!(reasons_of(&held_status, &released), vec!["LockReleased"]);
        let released_status = written(&status_patch(&held_status, None, &released, at(9)).unwrap());
        assert_eq!(reasons_of(&released_status, &released), Vec::<&str>::new());
        assert!(became_held(&waiting_status, &held("alice")));
        assert!(!became_held(&held_status, &held("alice")));
    }
}
