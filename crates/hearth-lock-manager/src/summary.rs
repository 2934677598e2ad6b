//! A lock plan in one bounded line, for the debug log. A plan's `Debug` quotes every
//! message (Kueue's explanation among them) and every sentinel, however many someone
//! labeled for the cluster; this names the actions and reasons and counts the rest.

use std::fmt::Write as _;

use hearth_api::text::bounded;

use crate::plan::{LockAction, LockPlan};

/// Longest summary, in characters (plus an ellipsis where it is cut).
pub const MAX_SUMMARY_CHARS: usize = 1024;
/// Actions named before `and N more`.
const MAX_NAMED: usize = 5;

/// E.g. `actions: create cluster-lock-a for alice, delete cluster-lock-b; events:
/// LockOwnerChanged; locked: false (WaitingForAdmission); requeue in 3600s`.
pub fn plan_summary(plan: &LockPlan) -> String {
    let mut out = String::from("actions: ");
    if plan.actions.is_empty() {
        out.push_str("none");
    }
    for (i, action) in plan.actions.iter().take(MAX_NAMED).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        match action {
            LockAction::CreateSentinel { name, owner } => {
                let _ = write!(out, "create {name} for {owner}");
            }
            LockAction::DeleteSentinel { name } => {
                let _ = write!(out, "delete {name}");
            }
            LockAction::ClearOwner { owner } => {
                let _ = write!(out, "clear owner {owner}");
            }
        }
    }
    if let Some(more) = plan.actions.len().checked_sub(MAX_NAMED).filter(|&n| n > 0) {
        let _ = write!(out, " and {more} more");
    }
    let events: Vec<&str> = plan.events.iter().map(|e| e.reason).collect();
    let _ = write!(
        out,
        "; events: {}; locked: {}",
        if events.is_empty() {
            "none".to_owned()
        } else {
            events.join(", ")
        },
        plan.status.locked
    );
    if let Some(condition) = &plan.status.condition {
        let _ = write!(out, " ({})", condition.reason);
    }
    if let Some(after) = plan.requeue_after {
        let _ = write!(out, "; requeue in {}s", after.as_secs());
    }
    bounded(&out, MAX_SUMMARY_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{ACTION, LockCondition, LockStatus};
    use crate::state::LockState;
    use hearth_api::reasons::LockedReason;
    use hearth_runtime::events::Event;
    use std::time::Duration;

    fn plan(sentinels: usize, message: &str) -> LockPlan {
        let mut actions = vec![LockAction::CreateSentinel {
            name: "cluster-lock-a".into(),
            owner: "alice".into(),
        }];
        actions.extend((0..sentinels).map(|i| LockAction::DeleteSentinel {
            name: format!("stray-sentinel-{i}"),
        }));
        LockPlan {
            state: LockState::NeverLocked,
            cluster: "a".into(),
            actions,
            events: vec![Event::normal("LockOwnerChanged", ACTION, message)],
            status: LockStatus {
                condition: Some(LockCondition {
                    reason: LockedReason::WaitingForAdmission,
                    message: message.into(),
                }),
                ..LockStatus::default()
            },
            requeue_after: Some(Duration::from_secs(3600)),
            blocked_create: None,
        }
    }

    #[test]
    fn names_the_actions_and_reasons() {
        assert_eq!(
            plan_summary(&plan(1, "bob took it")),
            "actions: create cluster-lock-a for alice, delete stray-sentinel-0; events: \
             LockOwnerChanged; locked: false (WaitingForAdmission); requeue in 3600s"
        );
    }

    #[test]
    fn stays_short_whatever_the_plan_holds() {
        let big = plan(5000, &"Kueue says ".repeat(10_000));
        assert!(format!("{big:?}").len() > 100 * MAX_SUMMARY_CHARS);
        let summary = plan_summary(&big);
        assert!(
            summary.chars().count() <= MAX_SUMMARY_CHARS + 1,
            "{summary}"
        );
        assert!(summary.contains(" and 4996 more"), "{summary}");
    }
}
