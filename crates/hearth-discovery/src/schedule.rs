//! When to probe a target next, and when a failure is allowed to change its status.
//!
//! Everything is derived from what status already records (`nextProbeAt`,
//! `hardware.consecutiveFailures`), so a restarted controller resumes the same
//! schedule instead of probing every target at once or forgetting a backoff.

use std::time::Duration;

use hearth_api::KubeconfigStatus;
use jiff::{SignedDuration, Timestamp};

/// First retry delay after a failed probe; doubled per further failure.
pub const BACKOFF_BASE: Duration = Duration::from_secs(10);
/// Longest retry delay, whatever the interval.
pub const BACKOFF_CAP: Duration = Duration::from_secs(5 * 60);
/// Failed probes in a row before a `Valid` cluster turns `Unreachable`.
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 3;

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
        assert_eq!(
            next_kubeconfig_status(Some(S::Unreachable), V::Unreachable, 4, 3),
            S::Unreachable
        );
        assert_eq!(
            next_kubeconfig_status(Some(S::Unreachable), V::Reached, 0, 3),
            S::Valid
        );
    }

    #[test]
    fn definite_answers_apply_at_once() {
        for previous in [None, Some(S::Valid), Some(S::Unreachable)] {
            assert_eq!(
                next_kubeconfig_status(previous, V::Unauthorized, 1, 3),
                S::Unauthorized
            );
            assert_eq!(
                next_kubeconfig_status(previous, V::Invalid, 1, 3),
                S::Invalid
            );
            assert_eq!(
                next_kubeconfig_status(previous, V::Missing, 1, 3),
                S::Missing
            );
            assert_eq!(next_kubeconfig_status(previous, V::Reached, 0, 3), S::Valid);
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

    #[test]
    fn threshold_zero_or_one_means_no_grace() {
        assert_eq!(
            next_kubeconfig_status(Some(S::Valid), V::Unreachable, 1, 1),
            S::Unreachable
        );
        assert_eq!(
            next_kubeconfig_status(Some(S::Valid), V::Unreachable, 1, 0),
            S::Unreachable
        );
        assert!(within_threshold(2, 3) && !within_threshold(3, 3));
    }
}
