//! When to probe a target next, and when a failure is allowed to change its status.
//!
//! Everything is derived from what status already records (`nextProbeAt`,
//! `hardware.consecutiveFailures`), so a restarted controller resumes the same
//! schedule instead of probing every target at once or forgetting a backoff.

use std::time::Duration;

use hearth_api::conditions::find;
use hearth_api::names::condition_types::KUBECONFIG_VALID;
use hearth_api::{FournosClusterStatus, KubeconfigStatus};
use jiff::{SignedDuration, Timestamp};

/// First retry delay after a failed probe; doubled per further failure.
pub const BACKOFF_BASE: Duration = Duration::from_secs(10);
/// Longest retry delay, whatever the interval.
pub const BACKOFF_CAP: Duration = Duration::from_secs(5 * 60);

/// What a probe found, as far as the kubeconfig's status is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeVerdict {
    /// The Secret or its `kubeconfig` key is gone.
    Missing,
    /// The kubeconfig cannot be parsed or uses a refused feature.
    Invalid,
    /// The target answered 401.
    Unauthorized,
    /// Network, TLS or timeout: no answer from the target.
    Unreachable,
    /// The target answered with these credentials.
    Reached,
}

/// The probe interval: the cluster's `spec.gpuDiscoveryInterval` if it parses, the
/// controller's default otherwise (the CRD's pattern makes that rare).
pub fn probe_interval(spec_interval: Option<&str>, default: Duration) -> Duration {
    spec_interval
        .and_then(|s| hearth_api::duration::parse_duration(s).ok())
        .unwrap_or(default)
}

/// How long after a probe the next one runs: the interval after a success; after
/// `n` failures in a row, `BACKOFF_BASE × 2^(n-1)`, capped at the smaller of the
/// interval and [`BACKOFF_CAP`] (backing off never probes less often than a healthy
/// cluster would be).
pub fn probe_delay(interval: Duration, consecutive_failures: u32) -> Duration {
    if consecutive_failures == 0 {
        return interval;
    }
    let cap = interval.min(BACKOFF_CAP);
    let doublings = (consecutive_failures - 1).min(31);
    BACKOFF_BASE
        .checked_mul(1u32 << doublings)
        .unwrap_or(Duration::MAX)
        .min(cap)
}

/// When the next probe runs, given the failures counted after this probe.
pub fn next_probe_at(now: Timestamp, interval: Duration, consecutive_failures: u32) -> Timestamp {
    let delay = SignedDuration::try_from(probe_delay(interval, consecutive_failures))
        .unwrap_or(SignedDuration::MAX);
    now.checked_add(delay).unwrap_or(Timestamp::MAX)
}

/// How long to wait before probing: zero when due or never scheduled.
pub fn until_due(next_probe_at: Option<Timestamp>, now: Timestamp) -> Duration {
    match next_probe_at {
        Some(at) if at > now => at.duration_since(now).unsigned_abs(),
        _ => Duration::ZERO,
    }
}

/// The kubeconfig status after a probe.
///
/// Only reachability failures are held back: while a `Valid` cluster has failed
/// fewer than `threshold` probes in a row, it stays `Valid`, so a flapping network
/// does not flap quota. Every other verdict is a definite answer and applies at once:
/// a 401 comes from the target itself, and `Missing`/`Invalid` are facts about the
/// Secret that no retry changes. A cluster that was never `Valid` has nothing to
/// protect and turns `Unreachable` on the first failure.
///
/// `consecutive_failures` includes this probe (1 on the first failure). A threshold
/// of 0 behaves as 1.
pub fn next_kubeconfig_status(
    previous: Option<KubeconfigStatus>,
    verdict: ProbeVerdict,
    consecutive_failures: u32,
    threshold: u32,
) -> KubeconfigStatus {
    match verdict {
        ProbeVerdict::Missing => KubeconfigStatus::Missing,
        ProbeVerdict::Invalid => KubeconfigStatus::Invalid,
        ProbeVerdict::Unauthorized => KubeconfigStatus::Unauthorized,
        ProbeVerdict::Reached => KubeconfigStatus::Valid,
        ProbeVerdict::Unreachable => {
            if previous == Some(KubeconfigStatus::Valid)
                && within_threshold(consecutive_failures, threshold)
            {
                KubeconfigStatus::Valid
            } else {
                KubeconfigStatus::Unreachable
            }
        }
    }
}

/// Whether a run of `consecutive_failures` transient failures is still tolerated.
pub fn within_threshold(consecutive_failures: u32, threshold: u32) -> bool {
    consecutive_failures < threshold.max(1)
}

/// What a cluster's Secret says about its kubeconfig, before any connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretView {
    /// The Secret or its `kubeconfig` key is missing.
    Missing,
    /// The kubeconfig is refused.
    Invalid,
    /// The kubeconfig may be used; its credentials expire then, if they say.
    Usable { expires_at: Option<Timestamp> },
}

/// Everything [`probe_due`] needs.
#[derive(Debug, Clone, Copy)]
pub struct DueInput<'a> {
    pub now: Timestamp,
    pub interval: Duration,
    /// The cluster's status as discovery last wrote it.
    pub status: Option<&'a FournosClusterStatus>,
    /// What this replica knows of the kubeconfig it last probed the cluster with.
    pub known: Known,
    /// Fingerprint of the kubeconfig the Secret holds now.
    pub fingerprint: u64,
    /// `metadata.generation` of the cluster.
    pub generation: Option<i64>,
    /// The status is behind where the cluster came from (a source to record, a hand edit
    /// of a label to report: see [`crate::source::status_behind`]); labels move no
    /// generation.
    pub source_behind: bool,
}

/// What a replica knows of the kubeconfig a cluster was last probed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// It probed the cluster, with the kubeconfig of this fingerprint.
    Probed(u64),
    /// It has not (it just started or just became leader): what the Secret says now,
    /// to compare with the status. Only then is the kubeconfig read to decide whether a
    /// probe is due: validating one (up to 1 MiB of YAML) on every look at a cluster
    /// that is not due took most of discovery's CPU on the hostile e2e suite.
    Unprobed(SecretView),
}

/// Whether to probe a cluster now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeDue {
    /// Probe now. `kubeconfig_changed`: the kubeconfig is not the one the status was
    /// probed with, so the status must not lend it the old one's grace.
    Now { kubeconfig_changed: bool },
    /// Not yet: look again after this long.
    After(Duration),
}

/// When to probe: at once for a cluster never probed, on any change of its kubeconfig
/// (rotation takes effect at once) and on a new generation of its spec, otherwise when
/// `status.nextProbeAt` comes.
///
/// A replica that does not remember which kubeconfig it probed (it just started or just
/// became leader) resumes the schedule in status rather than probing every target at
/// once, unless what the Secret says now contradicts that status (the Secret appeared,
/// vanished, turned valid or invalid, or carries credentials with another expiry): then
/// the Secret changed while nobody was watching, and is probed at once.
///
/// The wait is never longer than `interval`, so a shortened `gpuDiscoveryInterval`
/// takes effect without waiting out the old one.
pub fn probe_due(input: &DueInput<'_>) -> ProbeDue {
    let now = |kubeconfig_changed| ProbeDue::Now { kubeconfig_changed };
    let Some(status) = input.status.filter(|s| s.kubeconfig_status.is_some()) else {
        return now(false);
    };
    let changed = match input.known {
        Known::Probed(remembered) => remembered != input.fingerprint,
        Known::Unprobed(secret) => !status_agrees(status, secret),
    };
    if changed {
        return now(true);
    }
    // The spec changed since the last probe: probe, so the conditions'
    // observedGeneration says the status reflects the spec people see.
    let observed = find(&status.conditions, KUBECONFIG_VALID).and_then(|c| c.observed_generation);
    if input.source_behind || input.generation.is_some() && observed != input.generation {
        return now(false);
    }
    let next = status.next_probe_at.as_ref().map(|t| t.0);
    match until_due(next, input.now).min(input.interval) {
        Duration::ZERO => now(false),
        wait => ProbeDue::After(wait),
    }
}

/// Whether `status` could have come from the kubeconfig the Secret holds now.
fn status_agrees(status: &FournosClusterStatus, secret: SecretView) -> bool {
    use KubeconfigStatus as S;
    match (status.kubeconfig_status, secret) {
        (Some(S::Missing), SecretView::Missing) | (Some(S::Invalid), SecretView::Invalid) => true,
        (Some(S::Missing | S::Invalid), _) | (_, SecretView::Missing | SecretView::Invalid) => {
            false
        }
        (_, SecretView::Usable { expires_at }) => {
            status.credentials_expire_at.as_ref().map(|t| t.0) == expires_at
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use KubeconfigStatus as S;
    use ProbeVerdict as V;
    use pretty_assertions::assert_eq;

    const FIVE_MIN: Duration = Duration::from_secs(300);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn backoff_doubles_from_ten_seconds_up_to_the_cap() {
        let delays: Vec<u64> = (0..=8)
            .map(|n| probe_delay(FIVE_MIN, n).as_secs())
            .collect();
        assert_eq!(delays, [300, 10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn backoff_never_exceeds_the_interval() {
        let delays: Vec<u64> = (0..=5)
            .map(|n| probe_delay(secs(60), n).as_secs())
            .collect();
        assert_eq!(delays, [60, 10, 20, 40, 60, 60]);
        // A one-hour interval still retries within five minutes.
        assert_eq!(probe_delay(secs(3600), 10), BACKOFF_CAP);
        // An interval shorter than the base bounds even the first retry.
        assert_eq!(probe_delay(secs(5), 1), secs(5));
    }

    #[test]
    fn backoff_survives_absurd_failure_counts() {
        assert_eq!(probe_delay(FIVE_MIN, u32::MAX), BACKOFF_CAP);
        assert_eq!(probe_delay(Duration::MAX, u32::MAX), BACKOFF_CAP);
        let now: Timestamp = "2026-11-21T00:00:00Z".parse().unwrap();
        assert_eq!(next_probe_at(now, Duration::MAX, 0), Timestamp::MAX);
    }

    #[test]
    fn next_probe_time() {
        let now: Timestamp = "2026-11-21T10:00:00Z".parse().unwrap();
        assert_eq!(
            next_probe_at(now, FIVE_MIN, 0).to_string(),
            "2026-11-21T10:05:00Z"
        );
        assert_eq!(
            next_probe_at(now, FIVE_MIN, 2).to_string(),
            "2026-11-21T10:00:20Z"
        );
        assert_eq!(
            until_due(Some(next_probe_at(now, FIVE_MIN, 0)), now),
            FIVE_MIN
        );
        assert_eq!(until_due(Some(now), now), Duration::ZERO);
        assert_eq!(
            until_due(Some("2026-11-21T09:00:00Z".parse().unwrap()), now),
            Duration::ZERO
        );
        assert_eq!(until_due(None, now), Duration::ZERO);
    }

    #[test]
    fn interval_from_spec_or_default() {
        assert_eq!(probe_interval(Some("1h"), FIVE_MIN), secs(3600));
        assert_eq!(probe_interval(None, FIVE_MIN), FIVE_MIN);
        assert_eq!(probe_interval(Some("banana"), FIVE_MIN), FIVE_MIN);
        assert_eq!(probe_interval(Some("0m"), FIVE_MIN), FIVE_MIN);
    }

    #[test]
    fn a_valid_cluster_turns_unreachable_only_at_the_threshold() {
        let statuses: Vec<S> = (1..=4)
            .map(|failures| next_kubeconfig_status(Some(S::Valid), V::Unreachable, failures, 3))
            .collect();
        assert_eq!(
            statuses,
            [S::Valid, S::Valid, S::Unreachable, S::Unreachable]
        );
        // Once Unreachable, it stays so until a probe reaches the target.
        for (verdict, failures, want) in [
            (V::Unreachable, 4, S::Unreachable),
            (V::Reached, 0, S::Valid),
        ] {
            assert_eq!(
                next_kubeconfig_status(Some(S::Unreachable), verdict, failures, 3),
                want,
                "{verdict:?}"
            );
        }
    }

    #[test]
    fn definite_answers_apply_at_once() {
        for previous in [None, Some(S::Valid), Some(S::Unreachable)] {
            for (verdict, failures, want) in [
                (V::Unauthorized, 1, S::Unauthorized),
                (V::Invalid, 1, S::Invalid),
                (V::Missing, 1, S::Missing),
                (V::Reached, 0, S::Valid),
            ] {
                assert_eq!(
                    next_kubeconfig_status(previous, verdict, failures, 3),
                    want,
                    "{previous:?} {verdict:?}"
                );
            }
        }
    }

    #[test]
    fn without_a_valid_past_unreachable_is_immediate() {
        for previous in [
            None,
            Some(S::Invalid),
            Some(S::Unauthorized),
            Some(S::Missing),
        ] {
            assert_eq!(
                next_kubeconfig_status(previous, V::Unreachable, 1, 3),
                S::Unreachable,
                "{previous:?}"
            );
        }
    }

    mod due {
        use super::{FIVE_MIN, S, secs};
        use crate::schedule::*;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        use pretty_assertions::assert_eq;

        fn now() -> Timestamp {
            "2026-11-21T10:00:00Z".parse().unwrap()
        }

        fn status(kubeconfig: S, next_in_secs: i64) -> FournosClusterStatus {
            FournosClusterStatus {
                kubeconfig_status: Some(kubeconfig),
                next_probe_at: Some(Time(now() + SignedDuration::from_secs(next_in_secs))),
                ..Default::default()
            }
        }

        fn due(
            status: Option<&FournosClusterStatus>,
            remembered: Option<u64>,
            secret: SecretView,
        ) -> ProbeDue {
            probe_due(&DueInput {
                now: now(),
                interval: FIVE_MIN,
                status,
                known: remembered.map_or(Known::Unprobed(secret), Known::Probed),
                fingerprint: 7,
                generation: None,
                source_behind: false,
            })
        }

        const USABLE: SecretView = SecretView::Usable { expires_at: None };
        const NOW: ProbeDue = ProbeDue::Now {
            kubeconfig_changed: false,
        };
        const CHANGED: ProbeDue = ProbeDue::Now {
            kubeconfig_changed: true,
        };

        #[test]
        fn a_cluster_never_probed_is_probed_at_once() {
            assert_eq!(due(None, None, USABLE), NOW);
            assert_eq!(due(None, Some(7), SecretView::Missing), NOW);
            let empty = FournosClusterStatus::default();
            assert_eq!(due(Some(&empty), Some(7), USABLE), NOW);
        }

        #[test]
        fn a_changed_kubeconfig_is_probed_at_once() {
            let s = status(S::Valid, 200);
            assert_eq!(due(Some(&s), Some(6), USABLE), CHANGED);
            assert_eq!(due(Some(&s), Some(7), USABLE), ProbeDue::After(secs(200)));
        }

        #[test]
        fn the_schedule_in_status_is_kept() {
            let s = status(S::Unreachable, 20);
            assert_eq!(due(Some(&s), Some(7), USABLE), ProbeDue::After(secs(20)));
            let s = status(S::Valid, 0);
            assert_eq!(due(Some(&s), Some(7), USABLE), NOW);
            let s = status(S::Valid, -100);
            assert_eq!(due(Some(&s), Some(7), USABLE), NOW);
            let mut s = status(S::Valid, 0);
            s.next_probe_at = None;
            assert_eq!(due(Some(&s), Some(7), USABLE), NOW);
        }

        #[test]
        fn a_new_generation_is_probed_at_once() {
            let mut s = status(S::Valid, 200);
            s.conditions = vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: KUBECONFIG_VALID.into(),
                status: "True".into(),
                reason: "Valid".into(),
                message: String::new(),
                observed_generation: Some(1),
                last_transition_time: Time(now()),
            }];
            let at = |generation| {
                probe_due(&DueInput {
                    now: now(),
                    interval: FIVE_MIN,
                    status: Some(&s),
                    known: Known::Probed(7),
                    fingerprint: 7,
                    generation,
                    source_behind: false,
                })
            };
            assert_eq!(at(Some(1)), ProbeDue::After(secs(200)));
            assert_eq!(at(Some(2)), NOW);
            assert_eq!(at(None), ProbeDue::After(secs(200)));
        }

        #[test]
        fn a_status_behind_its_source_is_written_at_once() {
            let s = status(S::Valid, 200);
            let behind = probe_due(&DueInput {
                now: now(),
                interval: FIVE_MIN,
                status: Some(&s),
                known: Known::Probed(7),
                fingerprint: 7,
                generation: None,
                source_behind: true,
            });
            assert_eq!(behind, NOW, "a label edit moves no generation");
        }

        #[test]
        fn a_shorter_interval_cuts_the_wait() {
            let s = status(S::Valid, 3_600);
            assert_eq!(due(Some(&s), Some(7), USABLE), ProbeDue::After(FIVE_MIN));
        }

        #[test]
        fn after_a_restart_the_schedule_resumes_when_the_secret_agrees() {
            let expiry: Timestamp = "2027-01-01T00:00:00Z".parse().unwrap();
            let mut valid = status(S::Valid, 100);
            valid.credentials_expire_at = Some(Time(expiry));
            let same = SecretView::Usable {
                expires_at: Some(expiry),
            };
            assert_eq!(due(Some(&valid), None, same), ProbeDue::After(secs(100)));
            let missing = status(S::Missing, 100);
            assert_eq!(
                due(Some(&missing), None, SecretView::Missing),
                ProbeDue::After(secs(100))
            );
            let invalid = status(S::Invalid, 100);
            assert_eq!(
                due(Some(&invalid), None, SecretView::Invalid),
                ProbeDue::After(secs(100))
            );
            let unauthorized = status(S::Unauthorized, 100);
            assert_eq!(
                due(Some(&unauthorized), None, USABLE),
                ProbeDue::After(secs(100))
            );
        }

        #[test]
        fn after_a_restart_a_secret_that_contradicts_status_is_probed_at_once() {
            let expiry: Timestamp = "2027-01-01T00:00:00Z".parse().unwrap();
            let mut valid = status(S::Valid, 100);
            valid.credentials_expire_at = Some(Time(expiry));
            for secret in [
                SecretView::Missing,
                SecretView::Invalid,
                USABLE,
                SecretView::Usable {
                    expires_at: Some(expiry + SignedDuration::from_hours(24)),
                },
            ] {
                assert_eq!(due(Some(&valid), None, secret), CHANGED, "{secret:?}");
            }
            for kubeconfig in [S::Missing, S::Invalid] {
                let s = status(kubeconfig, 100);
                assert_eq!(due(Some(&s), None, USABLE), CHANGED, "{kubeconfig:?}");
            }
            let missing = status(S::Missing, 100);
            assert_eq!(due(Some(&missing), None, SecretView::Invalid), CHANGED);
        }
    }

    #[test]
    fn threshold_zero_or_one_means_no_grace() {
        for threshold in [1, 0] {
            assert_eq!(
                next_kubeconfig_status(Some(S::Valid), V::Unreachable, 1, threshold),
                S::Unreachable,
                "{threshold}"
            );
        }
        assert!(within_threshold(2, 3) && !within_threshold(3, 3));
    }
}
