//! Where an auto-discovered FournosCluster came from: the Secret hearth-discovery created
//! it from, recorded in `status.sourceSecret` (name and UID). Pure; the reconcile writes
//! the record with the rest of discovery's status ([`crate::status`]), the sweep
//! offboards by it ([`crate::onboarding`]).
//!
//! Why status: everyone who may lock a cluster may patch its spec, labels and
//! annotations, and only discovery's ServiceAccount may write `fournosclusters/status`.
//! What a lock user may edit cannot delete (DESIGN.md, turn 4), so neither
//! `spec.kubeconfigSecret` nor the `fournos.dev/auto-discovered` label decides an
//! offboarding; the record does.
//!
//! Rules:
//! - **Recorded once**, by the first status write that can: a cluster with no record,
//!   labeled auto-discovered, whose `spec.kubeconfigSecret` is the pattern's name for it,
//!   while that Secret exists (labeled). This is how a cluster discovery has just created
//!   gets its record (what discovery created it from is remembered in memory until then,
//!   so a Secret deleted in that moment still offboards it), and how a cluster created
//!   before this version gets one (the upgrade). A cluster whose Secret was already gone
//!   when discovery first saw it, or whose spec or label a person changed before that,
//!   gets none: it is never offboarded, and says so ([`SourceProblem::NotRecorded`]).
//! - **Never moved to another Secret**, never removed while the cluster exists. A Secret
//!   deleted and created again under the same name (a rotation done that way, a GitOps
//!   prune) is the same source: the record's UID follows the Secret's, and the lock's
//!   grace ([`crate::onboarding`]) is what a locked cluster gets while it is away.
//! - **Gone** when no labeled Secret has the recorded name (deleted or unlabeled), or its
//!   name no longer matches the pattern for this cluster (the pattern was changed).
//! - **Hand edits are reported, never acted on**: `spec.kubeconfigSecret` changed away
//!   from the record, the label taken off a recorded cluster, the label put on a cluster
//!   with no record. Each is a `KubeconfigValid` reason with a Warning Event saying what
//!   to do; none deletes anything.

use hearth_api::SourceSecret;
use hearth_api::names::{AUTO_DISCOVERED_LABEL, KUBECONFIG_SECRET_SELECTOR};
use hearth_api::reasons::KubeconfigValidReason;
use hearth_api::text::quoted;

use crate::secret_pattern::SecretPattern;

/// Longest name (a user-written `spec.kubeconfigSecret`) quoted in a message.
const MAX_NAME_CHARS: usize = 253;

/// What [`plan_source`] decides from.
#[derive(Debug, Clone, Copy)]
pub struct SourceInput<'a> {
    pub cluster: &'a str,
    /// Labeled `fournos.dev/auto-discovered=true` (a hint: anyone may write it).
    pub auto_discovered: bool,
    /// `spec.kubeconfigSecret` (anyone who may lock the cluster may write it).
    pub spec_secret: &'a str,
    /// `status.sourceSecret` as discovery last wrote it.
    pub recorded: Option<&'a SourceSecret>,
    /// What this replica created the cluster from (this incarnation: its UID), while the
    /// record is not written yet.
    pub created_from: Option<&'a SourceSecret>,
    pub pattern: &'a SecretPattern,
}

/// Where a cluster came from, and what a person changed since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// `status.sourceSecret` to write.
    pub record: Option<SourceSecret>,
    /// The recorded Secret is gone: the cluster is offboarded (a locked one after the
    /// grace).
    pub gone: bool,
    pub problem: Option<SourceProblem>,
}

/// A hand edit that disagrees with the record, reported on `KubeconfigValid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceProblem {
    /// `spec.kubeconfigSecret` names `spec`, not the Secret `source` the cluster was
    /// created from.
    SecretChanged { spec: String, source: String },
    /// Created from Secret `source`, but no longer labeled auto-discovered.
    LabelRemoved { source: String },
    /// Labeled auto-discovered, but discovery has no record of creating it.
    NotRecorded,
}

impl SourceProblem {
    pub fn reason(&self) -> KubeconfigValidReason {
        match self {
            Self::SecretChanged { .. } => KubeconfigValidReason::KubeconfigSecretChanged,
            Self::LabelRemoved { .. } => KubeconfigValidReason::AutoDiscoveredLabelRemoved,
            Self::NotRecorded => KubeconfigValidReason::SourceNotRecorded,
        }
    }

    /// What happened and what to do; `secrets_namespace` qualifies Secret names.
    pub fn message(&self, secrets_namespace: &str) -> String {
        match self {
            Self::SecretChanged { spec, source } => format!(
                "spec.kubeconfigSecret was changed to {} but this cluster was created from Secret \
                 {secrets_namespace}/{source}; set it back (spec.kubeconfigSecret: {source}), or \
                 delete that Secret to offboard the cluster. Editing the spec never deletes it",
                quoted(spec, MAX_NAME_CHARS)
            ),
            Self::LabelRemoved { source } => format!(
                "the label {AUTO_DISCOVERED_LABEL}=true was taken off, but this cluster was created \
                 from Secret {secrets_namespace}/{source} and is still offboarded when that Secret \
                 is deleted or unlabeled; labels never decide an offboarding. Put the label back"
            ),
            Self::NotRecorded => format!(
                "this cluster is labeled {AUTO_DISCOVERED_LABEL}=true, but hearth-discovery has no \
                 record (status.sourceSecret) of creating it from a Secret, so it is never \
                 offboarded: delete it by hand if it is not wanted. Discovery records the Secret \
                 when spec.kubeconfigSecret names the Secret the pattern names for this cluster \
                 and that Secret exists, labeled {KUBECONFIG_SECRET_SELECTOR}"
            ),
        }
    }
}

/// Whether the recorded Secret `name` still makes cluster `cluster`: `present` says a
/// labeled Secret of that name is cached.
pub fn source_kept(name: &str, cluster: &str, pattern: &SecretPattern, present: bool) -> bool {
    present && pattern.cluster_name(name) == Some(cluster)
}

/// The record to write and what to report. `secret_uid` answers the UID of the cached
/// labeled Secret of a name, if there is one.
pub fn plan_source(input: &SourceInput<'_>, secret_uid: impl Fn(&str) -> Option<String>) -> Source {
    let recorded = input.recorded.or(input.created_from);
    let Some(recorded) = recorded else {
        return first_record(input, secret_uid);
    };
    let uid = secret_uid(&recorded.name);
    let gone = !source_kept(&recorded.name, input.cluster, input.pattern, uid.is_some());
    let problem = if input.spec_secret != recorded.name {
        Some(SourceProblem::SecretChanged {
            spec: input.spec_secret.to_owned(),
            source: recorded.name.clone(),
        })
    } else if !input.auto_discovered {
        Some(SourceProblem::LabelRemoved {
            source: recorded.name.clone(),
        })
    } else {
        None
    };
    Source {
        record: Some(SourceSecret {
            name: recorded.name.clone(),
            // Same name, new object: a rotation by delete and create.
            uid: uid
                .filter(|_| !gone)
                .unwrap_or_else(|| recorded.uid.clone()),
        }),
        gone,
        problem,
    }
}

/// A cluster with no record: recorded now if it can be (see the module docs).
fn first_record(input: &SourceInput<'_>, secret_uid: impl Fn(&str) -> Option<String>) -> Source {
    let none = |problem| Source {
        record: None,
        gone: false,
        problem,
    };
    if !input.auto_discovered {
        return none(None);
    }
    let own = input.pattern.secret_name(input.cluster);
    match secret_uid(&own) {
        Some(uid) if input.spec_secret == own => Source {
            record: Some(SourceSecret { name: own, uid }),
            gone: false,
            problem: None,
        },
        _ => none(Some(SourceProblem::NotRecorded)),
    }
}

/// Whether the status discovery wrote (`recorded`, and the reason its `KubeconfigValid`
/// shows) is behind `source`, so that a status write is due without waiting for the
/// next probe: a record to write, or a hand edit (a label, which moves no generation)
/// to report or no longer to report. While the recorded Secret is gone, a held-back
/// offboarding may be what `KubeconfigValid` says instead.
pub fn status_behind(
    source: &Source,
    recorded: Option<&SourceSecret>,
    shown: Option<KubeconfigValidReason>,
) -> bool {
    if source.record.as_ref() != recorded {
        return true;
    }
    let shown_problem = shown.filter(|r| is_source_reason(*r));
    match &source.problem {
        Some(_) if source.gone => false,
        Some(problem) => shown_problem != Some(problem.reason()),
        None => shown_problem.is_some(),
    }
}

/// The `KubeconfigValid` reasons of [`SourceProblem`].
pub fn is_source_reason(reason: KubeconfigValidReason) -> bool {
    matches!(
        reason,
        KubeconfigValidReason::KubeconfigSecretChanged
            | KubeconfigValidReason::AutoDiscoveredLabelRemoved
            | KubeconfigValidReason::SourceNotRecorded
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn pattern() -> SecretPattern {
        SecretPattern::new("kubeconfig-{cluster}").unwrap()
    }

    fn record(name: &str, uid: &str) -> SourceSecret {
        SourceSecret {
            name: name.into(),
            uid: uid.into(),
        }
    }

    /// Plans for cluster `a` with the labeled Secrets `secrets` (name, uid) cached.
    fn plan(
        auto: bool,
        spec: &str,
        recorded: Option<&SourceSecret>,
        secrets: &[(&str, &str)],
    ) -> Source {
        let pattern = pattern();
        let input = SourceInput {
            cluster: "a",
            auto_discovered: auto,
            spec_secret: spec,
            recorded,
            created_from: None,
            pattern: &pattern,
        };
        plan_source(&input, |name| {
            secrets
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, uid)| (*uid).to_owned())
        })
    }

    #[test]
    fn a_cluster_discovery_created_is_recorded_with_its_secret() {
        let s = plan(true, "kubeconfig-a", None, &[("kubeconfig-a", "u1")]);
        assert_eq!(
            s,
            Source {
                record: Some(record("kubeconfig-a", "u1")),
                gone: false,
                problem: None,
            }
        );
        // Recorded already: nothing new, nothing to say.
        let again = plan(
            true,
            "kubeconfig-a",
            s.record.as_ref(),
            &[("kubeconfig-a", "u1")],
        );
        assert_eq!(again, s);
    }

    #[test]
    fn no_record_without_the_label_the_pattern_name_and_the_secret() {
        // Hand-made (the squatter of `NotAdopted`): no record, nothing to say.
        let hand = plan(false, "kubeconfig-a", None, &[("kubeconfig-a", "u1")]);
        assert_eq!((hand.record, hand.problem), (None, None));
        // Labeled, but the spec names another Secret, or the Secret is gone: a person's
        // label, or an upgrade that came too late. Never offboarded, and said so.
        for (spec, secrets) in [
            ("other", &[("kubeconfig-a", "u1"), ("other", "u2")][..]),
            ("kubeconfig-a", &[][..]),
        ] {
            let s = plan(true, spec, None, secrets);
            assert_eq!(
                s,
                Source {
                    record: None,
                    gone: false,
                    problem: Some(SourceProblem::NotRecorded),
                },
                "{spec} {secrets:?}"
            );
        }
    }

    #[test]
    fn what_discovery_created_the_cluster_from_is_recorded_even_if_the_secret_went() {
        let pattern = pattern();
        let created = record("kubeconfig-a", "u1");
        let input = SourceInput {
            cluster: "a",
            auto_discovered: true,
            spec_secret: "kubeconfig-a",
            recorded: None,
            created_from: Some(&created),
            pattern: &pattern,
        };
        let s = plan_source(&input, |_| None);
        assert_eq!(s.record, Some(created));
        assert!(s.gone, "offboarded, as its Secret is gone");
    }

    #[test]
    fn a_hand_edit_of_the_spec_is_reported_and_the_record_stays() {
        let r = record("kubeconfig-a", "u1");
        let s = plan(true, "nope", Some(&r), &[("kubeconfig-a", "u1")]);
        assert_eq!(s.record, Some(r.clone()));
        assert!(!s.gone);
        let problem = s.problem.unwrap();
        assert_eq!(
            problem.reason(),
            KubeconfigValidReason::KubeconfigSecretChanged
        );
        assert_eq!(
            problem.message("psap-secrets"),
            "spec.kubeconfigSecret was changed to \"nope\" but this cluster was created from \
             Secret psap-secrets/kubeconfig-a; set it back (spec.kubeconfigSecret: kubeconfig-a), \
             or delete that Secret to offboard the cluster. Editing the spec never deletes it"
        );
        // The spec names a Secret that is gone, the recorded one is there: not gone.
        let s = plan(
            true,
            "nope",
            Some(&r),
            &[("kubeconfig-a", "u1"), ("nope", "x")],
        );
        assert!(!s.gone);
    }

    #[test]
    fn a_user_written_name_is_escaped_and_bounded() {
        let r = record("kubeconfig-a", "u1");
        let spec = format!("x\u{1b}[2J{}", "y".repeat(400));
        let s = plan(true, &spec, Some(&r), &[("kubeconfig-a", "u1")]);
        let message = s.problem.unwrap().message("ns");
        assert!(!message.contains('\u{1b}'), "{message}");
        assert!(message.chars().count() < 600, "{message}");
    }

    #[test]
    fn the_label_taken_off_is_reported_and_changes_nothing() {
        let r = record("kubeconfig-a", "u1");
        let s = plan(false, "kubeconfig-a", Some(&r), &[("kubeconfig-a", "u1")]);
        assert_eq!(s.record, Some(r.clone()));
        assert_eq!(
            s.problem,
            Some(SourceProblem::LabelRemoved {
                source: "kubeconfig-a".into()
            })
        );
        // Still offboarded with its Secret.
        assert!(plan(false, "kubeconfig-a", Some(&r), &[]).gone);
    }

    #[test]
    fn only_the_recorded_secret_going_offboards() {
        let r = record("kubeconfig-a", "u1");
        assert!(plan(true, "kubeconfig-a", Some(&r), &[]).gone);
        // The spec's Secret going is not the record's.
        assert!(!plan(true, "other", Some(&r), &[("kubeconfig-a", "u1")]).gone);
        // The pattern changed so that the recorded name no longer names this cluster.
        let moved = record("kc-a", "u1");
        assert!(plan(true, "kc-a", Some(&moved), &[("kc-a", "u1")]).gone);
    }

    #[test]
    fn a_secret_recreated_under_the_same_name_is_the_same_source() {
        let r = record("kubeconfig-a", "u1");
        let s = plan(true, "kubeconfig-a", Some(&r), &[("kubeconfig-a", "u2")]);
        assert_eq!(s.record, Some(record("kubeconfig-a", "u2")));
        assert!(!s.gone && s.problem.is_none());
        // While it is away, the record keeps the UID it had.
        let away = plan(true, "kubeconfig-a", Some(&r), &[]);
        assert_eq!(away.record, Some(r));
    }

    #[test]
    fn a_status_write_is_due_when_the_record_or_the_report_is_behind() {
        use KubeconfigValidReason as R;
        let r = record("kubeconfig-a", "u1");
        let fine = plan(true, "kubeconfig-a", Some(&r), &[("kubeconfig-a", "u1")]);
        assert!(!status_behind(&fine, Some(&r), Some(R::Valid)));
        assert!(status_behind(&fine, None, Some(R::Valid)), "record");
        assert!(
            status_behind(&fine, Some(&r), Some(R::SourceNotRecorded)),
            "a report to take back"
        );
        let labelless = plan(false, "kubeconfig-a", Some(&r), &[("kubeconfig-a", "u1")]);
        assert!(status_behind(&labelless, Some(&r), Some(R::Valid)));
        assert!(!status_behind(
            &labelless,
            Some(&r),
            Some(R::AutoDiscoveredLabelRemoved)
        ));
        // Held back after the Secret went: `Missing` says so, nothing is behind.
        let gone = plan(false, "kubeconfig-a", Some(&r), &[]);
        assert!(!status_behind(&gone, Some(&r), Some(R::Missing)));
    }
}
