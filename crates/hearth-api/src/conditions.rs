//! Kubernetes condition semantics: one condition per type, `lastTransitionTime`
//! moves only when `status` flips, `observedGeneration` always set, and a
//! controller touches only its own types.
//!
//! One rule for duplicates everywhere (older controllers left lists with a type more
//! than once): the **last** condition of a type is the current one. [`find`] and
//! [`is_true`] implement it, and everything else reads through them: [`set_condition`],
//! the status slices ([`crate::slices`]), each controller's plan (discovery's, kueue-sync's,
//! lock-manager's, also for Kueue Workload conditions), `kubectl fournos`; the runtime's
//! repair of such lists (`hearth_runtime::status::dedup_conditions`) goes through
//! [`dedup_by_type`], which keeps the one [`find`] returns.
//!
//! Reasons of each type: [`crate::reasons`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// `status` of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

impl From<bool> for Status {
    fn from(b: bool) -> Self {
        if b { Self::True } else { Self::False }
    }
}

/// The reasons of one condition type, as a controller plans them: typed until the
/// condition is written ([`next_condition`] is where a reason becomes its string). The
/// enums of [`crate::reasons`] implement it.
pub trait Reason: Copy + std::fmt::Debug + PartialEq + Eq {
    /// The wire string: CamelCase, stable, used for Event reasons and metric labels too.
    fn as_str(self) -> &'static str;

    /// The reason whose wire string is `s`, for reading a stored condition back.
    fn parse(s: &str) -> Option<Self>;
}

/// What a controller wants a condition to say; times and generation are filled in
/// by [`set_condition`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredCondition<R: Reason> {
    pub type_: &'static str,
    pub status: Status,
    pub reason: R,
    /// Tells a person what is wrong and what to do about it.
    pub message: String,
}

impl<R: Reason> DesiredCondition<R> {
    pub fn new(
        type_: &'static str,
        status: impl Into<Status>,
        reason: R,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_,
            status: status.into(),
            reason,
            message: message.into(),
        }
    }
}

/// The condition of type `type_`, if present (with duplicates, the last one).
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().rev().find(|c| c.type_ == type_)
}

/// One entry per type, each the one [`find`] would return (the last of its type), in the
/// order of those entries; `None` when no type repeats. Generic over the entry so that
/// the same rule repairs typed lists and lists read as JSON from any object: `type_of`
/// names an entry's type, and an entry without one is dropped (a list keyed by type
/// cannot hold it).
pub fn dedup_by_type<T: Clone>(
    items: &[T],
    type_of: impl Fn(&T) -> Option<&str>,
) -> Option<Vec<T>> {
    let mut seen = std::collections::BTreeSet::new();
    let repeats = items
        .iter()
        .any(|item| type_of(item).is_none_or(|t| !seen.insert(t)));
    if !repeats {
        return None;
    }
    let current = |i: usize, t: &str| !items[i + 1..].iter().any(|later| type_of(later) == Some(t));
    Some(
        items
            .iter()
            .enumerate()
            .filter(|(i, item)| type_of(item).is_some_and(|t| current(*i, t)))
            .map(|(_, item)| item.clone())
            .collect(),
    )
}

/// Keeps only the conditions of `types`, for a cache that holds what one controller
/// reads. A list where some type repeats (legacy state) is kept whole: its one repair
/// (`hearth_runtime::status`) rewrites it from what the cache holds, every type of it.
pub fn retain_types(conditions: &mut Vec<Condition>, types: &[&str]) {
    if dedup_by_type(conditions, |c| Some(c.type_.as_str())).is_none() {
        conditions.retain(|c| types.contains(&c.type_.as_str()));
    }
}

/// Whether the condition of type `type_` is present with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

/// The condition `desired` turns into, given what is there now: the transition
/// time of `current` is kept unless the status changes. The one place a planned
/// condition becomes a `metav1.Condition`.
pub fn next_condition<R: Reason>(
    current: Option<&Condition>,
    desired: &DesiredCondition<R>,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let last_transition_time = match current {
        Some(c) if c.status == desired.status.as_str() => c.last_transition_time.clone(),
        _ => now.clone(),
    };
    Condition {
        type_: desired.type_.to_owned(),
        status: desired.status.as_str().to_owned(),
        reason: desired.reason.as_str().to_owned(),
        message: desired.message.clone(),
        observed_generation: generation,
        last_transition_time,
    }
}

/// `current` said again for `generation`: for a controller that keeps a condition as it
/// is stored (its reason may even be one this version does not know).
pub fn renewed(current: &Condition, generation: Option<i64>) -> Condition {
    Condition {
        observed_generation: generation,
        ..current.clone()
    }
}

/// Sets `desired` in `conditions` by type, leaving other types untouched, and
/// collapsing duplicates of that type (written by older controllers) into one.
/// Returns whether anything changed.
pub fn set_condition<R: Reason>(
    conditions: &mut Vec<Condition>,
    desired: &DesiredCondition<R>,
    generation: Option<i64>,
    now: &Time,
) -> bool {
    let current = find(conditions, desired.type_).cloned();
    let next = next_condition(current.as_ref(), desired, generation, now);
    let count = conditions
        .iter()
        .filter(|c| c.type_ == desired.type_)
        .count();
    if count == 1 && current.as_ref() == Some(&next) {
        return false;
    }
    match conditions.iter().position(|c| c.type_ == desired.type_) {
        Some(first) => {
            conditions[first] = next;
            let mut seen = false;
            conditions.retain(|c| {
                if c.type_ != desired.type_ {
                    return true;
                }
                let keep = !seen;
                seen = true;
                keep
            });
        }
        None => conditions.push(next),
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reasons::{KubeconfigValidReason, LockedReason};
    use k8s_openapi::jiff::Timestamp;
    use pretty_assertions::assert_eq;

    #[test]
    fn retain_types_keeps_a_repeating_list_whole() {
        let epoch = Time(Timestamp::UNIX_EPOCH);
        let c = |t: &'static str| {
            next_condition(
                None,
                &DesiredCondition::new(t, Status::True, LockedReason::Held, ""),
                None,
                &epoch,
            )
        };
        let mut one_each = vec![c("A"), c("B"), c("C")];
        retain_types(&mut one_each, &["A", "C"]);
        assert_eq!(
            one_each
                .iter()
                .map(|c| c.type_.as_str())
                .collect::<Vec<_>>(),
            ["A", "C"]
        );
        let mut legacy = vec![c("A"), c("B"), c("B")];
        retain_types(&mut legacy, &["A"]);
        assert_eq!(legacy.len(), 3, "the repair needs every entry");
    }

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(1_790_000_000 + secs).unwrap())
    }

    fn valid(
        status: bool,
        reason: KubeconfigValidReason,
    ) -> DesiredCondition<KubeconfigValidReason> {
        DesiredCondition::new(
            "KubeconfigValid",
            status,
            reason,
            format!("{reason} message"),
        )
    }

    /// Sets `KubeconfigValid` in `conds` for `generation`, `secs` after the epoch.
    fn set_valid(
        conds: &mut Vec<Condition>,
        status: bool,
        reason: KubeconfigValidReason,
        generation: i64,
        secs: i64,
    ) -> bool {
        set_condition(conds, &valid(status, reason), Some(generation), &at(secs))
    }

    #[test]
    fn new_condition_is_added_with_now_as_transition_time() {
        let mut conds = vec![];
        assert!(set_valid(
            &mut conds,
            true,
            KubeconfigValidReason::Valid,
            3,
            0
        ));
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].status, "True");
        assert_eq!(conds[0].reason, "Valid");
        assert_eq!(conds[0].observed_generation, Some(3));
        assert_eq!(conds[0].last_transition_time, at(0));
    }

    #[test]
    fn same_status_keeps_transition_time_but_updates_reason_message_generation() {
        let mut conds = vec![];
        set_valid(&mut conds, false, KubeconfigValidReason::Unreachable, 1, 0);
        assert!(set_valid(
            &mut conds,
            false,
            KubeconfigValidReason::Unauthorized,
            2,
            60
        ));
        assert_eq!(conds[0].last_transition_time, at(0));
        assert_eq!(conds[0].reason, "Unauthorized");
        assert_eq!(conds[0].message, "Unauthorized message");
        assert_eq!(conds[0].observed_generation, Some(2));
    }

    #[test]
    fn status_flip_moves_transition_time() {
        let mut conds = vec![];
        set_valid(&mut conds, false, KubeconfigValidReason::Unreachable, 1, 0);
        assert!(set_valid(
            &mut conds,
            true,
            KubeconfigValidReason::Valid,
            1,
            60
        ));
        assert_eq!(conds[0].last_transition_time, at(60));
        assert_eq!(conds[0].status, "True");
    }

    #[test]
    fn identical_condition_is_no_change() {
        let mut conds = vec![];
        set_valid(&mut conds, true, KubeconfigValidReason::Valid, 1, 0);
        let before = conds.clone();
        assert!(!set_valid(
            &mut conds,
            true,
            KubeconfigValidReason::Valid,
            1,
            90
        ));
        assert_eq!(conds, before);
    }

    #[test]
    fn other_types_are_untouched() {
        let mut conds = vec![];
        set_condition(
            &mut conds,
            &DesiredCondition::new("Locked", true, LockedReason::Held, "held"),
            Some(1),
            &at(0),
        );
        let locked = conds[0].clone();
        set_valid(&mut conds, true, KubeconfigValidReason::Valid, 5, 30);
        set_valid(&mut conds, false, KubeconfigValidReason::Invalid, 6, 60);
        assert_eq!(conds.len(), 2);
        assert_eq!(find(&conds, "Locked"), Some(&locked));
        assert!(!is_true(&conds, "KubeconfigValid"));
        assert!(is_true(&conds, "Locked"));
    }

    #[test]
    fn dedup_keeps_what_find_returns() {
        let cond = |t: &'static str, reason: LockedReason| {
            next_condition(
                None,
                &DesiredCondition::new(t, true, reason, ""),
                None,
                &at(0),
            )
        };
        let list = vec![
            cond("A", LockedReason::Held),
            cond("B", LockedReason::Held),
            cond("A", LockedReason::Released),
        ];
        let deduped = dedup_by_type(&list, |c| Some(c.type_.as_str())).expect("A repeats");
        assert_eq!(
            deduped,
            vec![
                cond("B", LockedReason::Held),
                cond("A", LockedReason::Released)
            ]
        );
        assert_eq!(find(&deduped, "A"), find(&list, "A"));
        assert_eq!(dedup_by_type(&deduped, |c| Some(c.type_.as_str())), None);
    }

    #[test]
    fn with_duplicates_the_last_one_is_current_for_every_reader() {
        let dup = |status: &str, reason: &str| Condition {
            type_: "Locked".into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: at(0),
        };
        let conds = vec![dup("True", "Held"), dup("False", "Released")];
        assert_eq!(find(&conds, "Locked").unwrap().reason, "Released");
        assert!(!is_true(&conds, "Locked"));
        // set_condition sees the same current condition: no status flip from it.
        let mut written = conds.clone();
        set_condition(
            &mut written,
            &DesiredCondition::new("Locked", false, LockedReason::Released, ""),
            None,
            &at(50),
        );
        assert_eq!(written, vec![dup("False", "Released")]);
    }

    #[test]
    fn duplicates_from_older_controllers_collapse_to_one() {
        let dup = |status: &str, secs| Condition {
            type_: "KubeconfigValid".into(),
            status: status.into(),
            reason: "Old".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: at(secs),
        };
        let other = Condition {
            type_: "GPUDiscovered".into(),
            ..dup("True", 1)
        };
        let mut conds = vec![
            dup("False", 0),
            other.clone(),
            dup("True", 5),
            dup("True", 9),
        ];
        assert!(set_valid(
            &mut conds,
            true,
            KubeconfigValidReason::Valid,
            1,
            100
        ));
        assert_eq!(conds.len(), 2);
        assert_eq!(conds[1], other);
        // The latest duplicate was True already: no transition.
        assert_eq!(conds[0].last_transition_time, at(9));
        assert_eq!(conds[0].reason, "Valid");
    }
}
