//! Cordons: what a cordoned cluster's flavor carries (the `fournos.dev/cordoned` taint) and
//! what its `Schedulable` condition says.
//!
//! **Why kueue-sync owns `Schedulable`.** The taint is what makes a cordon real (Kueue
//! admits no new Workload on a flavor whose taint it does not tolerate), and kueue-sync is
//! the one writer of flavors: the condition and the taint come from one plan, so the
//! condition never says `Cordoned` before the taint is there, and it works with
//! lock-manager disabled. kueue-sync counts the Workloads admitted on each flavor from a
//! trimmed Workload cache (all namespaces, read only).
//!
//! **The condition.** Not cordoned: `True`/`Schedulable`. Cordoned: `False`, reason
//! `Cordoned` while Workloads admitted before the cordon are still admitted on the flavor
//! (the message says how many), `Drained` once none is (this Hearth's lock sentinel aside,
//! which tolerates the taint); `CordonOverdue` once `spec.cordon.until` has passed,
//! whatever the count. Hearth never lifts a cordon itself. The quota is unchanged
//! throughout: a cordon is not a drain of quota (jobs are still running there).

use std::collections::BTreeMap;

use hearth_api::cluster::{Cordon, MAX_CORDON_REASON_CHARS, MAX_OWNER_CHARS};
use hearth_api::conditions::{DesiredCondition, Status};
use hearth_api::names::CORDON_TAINT_KEY;
use hearth_api::names::condition_types::SCHEDULABLE;
use hearth_api::reasons::SchedulableReason;
use hearth_api::text::bounded;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::input::ObservedCluster;

/// The effect of the cordon taint: Kueue admits nothing new that does not tolerate it.
pub const CORDON_TAINT_EFFECT: &str = "NoSchedule";

/// The taint a cordoned cluster's flavor carries.
pub fn cordon_taint() -> Taint {
    Taint {
        key: CORDON_TAINT_KEY.to_owned(),
        value: None,
        effect: CORDON_TAINT_EFFECT.to_owned(),
        time_added: None,
    }
}

/// What a cluster's cordon state is, for the condition, the metrics and the Events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CordonState {
    None,
    /// Cordoned; this many Workloads are still admitted on the flavor.
    Draining(i64),
    Drained,
    /// Past `until`; this many Workloads still admitted.
    Overdue(i64),
}

impl CordonState {
    pub fn of(cluster: &ObservedCluster, admitted: &BTreeMap<String, i64>, now: Timestamp) -> Self {
        let Some(cordon) = &cluster.cordon else {
            return Self::None;
        };
        let count = admitted.get(&cluster.name).copied().unwrap_or(0);
        if cordon.until.as_ref().is_some_and(|u| u.0 <= now) {
            Self::Overdue(count)
        } else if count > 0 {
            Self::Draining(count)
        } else {
            Self::Drained
        }
    }

    pub fn reason(self) -> SchedulableReason {
        match self {
            Self::None => SchedulableReason::Schedulable,
            Self::Draining(_) => SchedulableReason::Cordoned,
            Self::Drained => SchedulableReason::Drained,
            Self::Overdue(_) => SchedulableReason::CordonOverdue,
        }
    }

    /// `status.admittedWorkloads`: the count, while cordoned.
    pub fn admitted(self) -> Option<i64> {
        match self {
            Self::None => None,
            Self::Draining(n) | Self::Overdue(n) => Some(n),
            Self::Drained => Some(0),
        }
    }
}

/// The `Schedulable` condition of `cluster` in `state`.
pub(crate) fn schedulable_condition(
    cluster: &ObservedCluster,
    state: CordonState,
) -> DesiredCondition<SchedulableReason> {
    let name = &cluster.name;
    let Some(cordon) = &cluster.cordon else {
        return DesiredCondition::new(
            SCHEDULABLE,
            Status::True,
            SchedulableReason::Schedulable,
            format!("Not cordoned: Kueue may admit new Workloads on ResourceFlavor '{name}'."),
        );
    };
    let cordoned = cordoned_sentence(name, cordon);
    let lift = format!(
        "Lift it with `kubectl fournos uncordon {name}` (Hearth never lifts a cordon itself)"
    );
    let message = match state {
        CordonState::Draining(n) => format!(
            "{cordoned} Kueue admits no new Workload there; {} admitted before the cordon \
             still {} (condition Drained once none is). {lift}.",
            workloads(n),
            if n == 1 { "is" } else { "are" }
        ),
        CordonState::Drained => format!(
            "{cordoned} No Workload is admitted on it any more: it is drained and ready for \
             maintenance (a lock taken now is held at once with workload sentinels; with \
             FournosJob sentinels it waits for the uncordon). {lift}."
        ),
        // No "how long ago": the message would change on every reconcile, and so would
        // the status.
        CordonState::Overdue(n) => format!(
            "{cordoned} Its end has passed and the cordon is still on; {} still admitted. \
             {lift}, or extend it with `kubectl fournos cordon {name} --reason ... --until \
             ...`.",
            workloads(n)
        ),
        CordonState::None => unreachable!("a cordon is set"),
    };
    DesiredCondition::new(SCHEDULABLE, Status::False, state.reason(), message)
}

/// `Cordoned by alice since 2026-11-25T04:00:00Z until …: "driver upgrade".`
fn cordoned_sentence(name: &str, cordon: &Cordon) -> String {
    let by = cordon
        .by
        .as_deref()
        .filter(|b| !b.is_empty())
        .map(|b| format!(" by {}", bounded(b, MAX_OWNER_CHARS)))
        .unwrap_or_default();
    let when = |word: &str, time: &Option<Time>| {
        time.as_ref()
            .map(|t| format!(" {word} {}", t.0))
            .unwrap_or_default()
    };
    let (since, until) = (when("since", &cordon.since), when("until", &cordon.until));
    format!(
        "{name} is cordoned{by}{since}{until}: \"{}\".",
        bounded(&cordon.reason, MAX_CORDON_REASON_CHARS)
    )
}

fn workloads(n: i64) -> String {
    if n == 1 {
        "1 Workload".to_owned()
    } else {
        format!("{n} Workloads")
    }
}
