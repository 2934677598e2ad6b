//! What `cordon` and `uncordon` do to a FournosCluster, decided from the object as read:
//! the merge patch of `spec.cordon` (guarded by the `resourceVersion` read, as a lock is)
//! or why not. Pure: the caller gives the time.

use hearth_api::FournosCluster;
use hearth_api::cluster::{MAX_CORDON_REASON_CHARS, cordon_text_problem, owner_problem};
use hearth_api::duration::parse_flag_duration;
use jiff::Timestamp;
use serde_json::json;

use crate::lock::{Plan, patch, take_over};

/// `cordon <cluster> --reason … [--until <time or duration>] [--force]` by `me` at `now`.
pub fn plan_cordon(
    fc: &FournosCluster,
    me: &str,
    reason: &str,
    until: Option<&str>,
    force: bool,
    now: Timestamp,
) -> Plan {
    let name = fc.metadata.name.as_deref().unwrap_or_default();
    let reason = reason.trim();
    if reason.is_empty() {
        return Plan::Refused(
            "--reason must say why (it is shown to everyone whose jobs wait)".into(),
        );
    }
    if let Some(problem) =
        cordon_text_problem("reason", reason, MAX_CORDON_REASON_CHARS).or_else(|| owner_problem(me))
    {
        return Plan::Refused(problem);
    }
    let until = match until.map(|u| parse_until(u, now)).transpose() {
        Ok(until) => until,
        Err(message) => return Plan::Refused(format!("--until: {message}")),
    };
    let current = fc.spec.cordon.as_ref();
    let refused = |by: &str| {
        format!("{name} is cordoned by {by}. Ask them, or take the cordon over with --force.")
    };
    let taken = take_over(current.and_then(|c| c.by.as_deref()), me, force, refused);
    // Re-cordoning keeps the original start: the maintenance began then.
    let since = current
        .and_then(|c| c.since.as_ref().map(|s| s.0))
        .unwrap_or(now);
    let unchanged = current.is_some_and(|c| {
        c.reason == reason && c.by.as_deref() == Some(me) && c.until.as_ref().map(|u| u.0) == until
    });
    if unchanged {
        return Plan::Unchanged(format!("{name} is already cordoned by {me}"));
    }
    let cordon = json!({
        "reason": reason,
        "by": me,
        "since": since.to_string(),
        "until": until.map(|u| u.to_string()),
    });
    patch(fc, taken, json!({ "cordon": cordon }))
}

/// `uncordon <cluster> [--force]` by `me`.
pub fn plan_uncordon(fc: &FournosCluster, me: &str, force: bool) -> Plan {
    let name = fc.metadata.name.as_deref().unwrap_or_default();
    let Some(current) = &fc.spec.cordon else {
        return Plan::Unchanged(format!("{name} is not cordoned"));
    };
    let refused = |by: &str| {
        format!(
            "{name} is cordoned by {by}, not by {me}. If you cordoned it under another \
             name, pass --by <that name>; to lift someone else's cordon, add --force."
        )
    };
    let taken = take_over(current.by.as_deref(), me, force, refused);
    patch(fc, taken, json!({ "cordon": null }))
}

/// `--until`: an RFC 3339 time (`2026-11-26T08:00:00Z`) or a duration from now in the one
/// grammar of every flag of the plugin (`--ttl`, `--timeout`: `90m`, `4h`, `1h30m`, `2d`;
/// not `1 hour` or `PT90M`). Must be in the future.
pub fn parse_until(input: &str, now: Timestamp) -> Result<Timestamp, String> {
    let input = input.trim();
    let at = if let Ok(at) = input.parse::<Timestamp>() {
        at
    } else {
        let duration = parse_flag_duration(input).map_err(|e| {
            format!(
                "{input:?} is neither a time (2026-11-26T08:00:00Z) nor a duration \
                 (90m, 4h, 1h30m, 2d): {e}"
            )
        })?;
        jiff::SignedDuration::try_from(duration)
            .ok()
            .and_then(|span| now.checked_add(span).ok())
            .ok_or_else(|| format!("{input:?} is too far away"))?
    };
    if at <= now {
        return Err(format!("{at} is not in the future"));
    }
    Ok(Timestamp::from_second(at.as_second()).unwrap_or(at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tests::cluster;
    use pretty_assertions::assert_eq;

    fn now() -> Timestamp {
        "2026-11-25T04:00:00Z".parse().unwrap()
    }

    fn read(mut fc: FournosCluster) -> FournosCluster {
        fc.metadata.resource_version = Some("42".into());
        fc
    }

    fn cordoned_by(by: &str) -> FournosCluster {
        let mut fc = read(cluster("a"));
        fc.spec.cordon = Some(hearth_api::Cordon {
            reason: "driver upgrade".into(),
            by: Some(by.into()),
            since: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-25T03:00:00Z".parse().unwrap(),
            )),
            until: None,
        });
        fc
    }

    #[test]
    fn cordoning_patches_who_why_since_and_until_guarded_by_the_version_read() {
        let plan = plan_cordon(
            &read(cluster("a")),
            "alice",
            " driver upgrade ",
            Some("4h"),
            false,
            now(),
        );
        assert_eq!(
            plan,
            Plan::Patch {
                patch: json!({
                    "metadata": { "resourceVersion": "42" },
                    "spec": { "cordon": {
                        "reason": "driver upgrade",
                        "by": "alice",
                        "since": "2026-11-25T04:00:00Z",
                        "until": "2026-11-25T08:00:00Z",
                    }},
                }),
                taken_from: None,
            }
        );
    }

    #[test]
    fn recordoning_keeps_the_start_and_someone_elses_cordon_needs_force() {
        let Plan::Patch { patch, .. } =
            plan_cordon(&cordoned_by("alice"), "alice", "longer", None, false, now())
        else {
            panic!("expected a patch");
        };
        assert_eq!(patch["spec"]["cordon"]["since"], "2026-11-25T03:00:00Z");
        assert!(matches!(
            plan_cordon(
                &cordoned_by("alice"),
                "alice",
                "driver upgrade",
                None,
                false,
                now()
            ),
            Plan::Unchanged(_)
        ));
        let Plan::Refused(message) =
            plan_cordon(&cordoned_by("bob"), "alice", "mine", None, false, now())
        else {
            panic!("expected a refusal");
        };
        assert!(
            message.contains("cordoned by bob") && message.contains("--force"),
            "{message}"
        );
        assert!(matches!(
            plan_cordon(&cordoned_by("bob"), "alice", "mine", None, true, now()),
            Plan::Patch {
                taken_from: Some(_),
                ..
            }
        ));
    }

    #[test]
    fn uncordon_lifts_only_your_own_cordon_unless_forced() {
        assert_eq!(
            plan_uncordon(&cordoned_by("bob"), "bob", false),
            Plan::Patch {
                patch: json!({"metadata": {"resourceVersion": "42"}, "spec": {"cordon": null}}),
                taken_from: None,
            }
        );
        assert!(matches!(
            plan_uncordon(&cordoned_by("bob"), "alice", false),
            Plan::Refused(_)
        ));
        assert!(matches!(
            plan_uncordon(&cordoned_by("bob"), "alice", true),
            Plan::Patch {
                taken_from: Some(_),
                ..
            }
        ));
        assert!(matches!(
            plan_uncordon(&read(cluster("a")), "alice", false),
            Plan::Unchanged(_)
        ));
    }

    #[test]
    fn bad_input_is_refused_before_anything_is_sent() {
        for (reason, until) in [
            ("", None),
            ("   ", None),
            ("a\u{202e}b", None),
            ("ok", Some("soon")),
            ("ok", Some("2020-01-01T00:00:00Z")),
        ] {
            assert!(
                matches!(
                    plan_cordon(&read(cluster("a")), "alice", reason, until, false, now()),
                    Plan::Refused(_)
                ),
                "{reason:?} {until:?}"
            );
        }
        let long = "x".repeat(MAX_CORDON_REASON_CHARS + 1);
        assert!(matches!(
            plan_cordon(&read(cluster("a")), "alice", &long, None, false, now()),
            Plan::Refused(_)
        ));
    }

    #[test]
    fn until_takes_a_time_or_a_duration() {
        let at = |s: &str| parse_until(s, now()).map(|t| t.to_string());
        assert_eq!(at("2d").unwrap(), "2026-11-27T04:00:00Z");
        assert_eq!(at("90m").unwrap(), "2026-11-25T05:30:00Z");
        assert_eq!(at("1h30m").unwrap(), "2026-11-25T05:30:00Z");
        assert_eq!(at("2026-11-26T08:00:00Z").unwrap(), "2026-11-26T08:00:00Z");
        assert!(at("-1h").is_err());
        assert!(at("tomorrow").is_err());
        assert!(at("0m").is_err(), "now is not in the future");
    }

    /// `--until`, `--ttl` and `--timeout` take one grammar: what one refuses, all refuse.
    #[test]
    fn every_flag_takes_the_same_time_grammar() {
        let until = |s: &str| parse_until(s, now()).is_ok();
        let ttl = |s: &str| hearth_api::duration::typed_to_field(s).is_ok();
        let timeout = |s: &str| crate::cli::parse_timeout(s).is_ok();
        for good in ["90m", "4h", "1h30m", "2d", "2d12h"] {
            assert!(until(good) && ttl(good) && timeout(good), "{good}");
        }
        for bad in ["1 hour", "PT90M", "pt1h", "90 m", "1.5h", "1w", "soon", ""] {
            assert!(!until(bad) && !ttl(bad) && !timeout(bad), "{bad}");
        }
    }
}
