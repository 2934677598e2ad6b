//! `why`: one paragraph on a cluster's kubeconfig, quota and lock, from its conditions,
//! its recent Events and the Kueue Workloads of its lock; and how far `wait` is. Pure:
//! the I/O layer gathers the [`Evidence`].

use hearth_api::conditions::find;
use hearth_api::names::condition_types::{KUBECONFIG_VALID, KUEUE_SYNCED, LOCKED};
use hearth_api::reasons::{KubeconfigValidReason, LockedReason};
use hearth_api::text::{CUT, bounded};
use hearth_api::{FournosCluster, FournosClusterStatus, KubeconfigStatus};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::Serialize;

use crate::view::{self, LockState};

/// Longest message quoted from a condition, Event or Workload.
const MAX_QUOTE: usize = 400;
/// Most workloads named as holding the cluster's slots.
const MAX_BLOCKERS: usize = 5;
/// Longest sentence: two quotes, an owner and [`MAX_BLOCKERS`] Workload names fit, so only
/// names or GPU summaries far longer than Kubernetes allows are cut.
const MAX_SENTENCE: usize = 4000;

/// What `why` looked at besides the cluster itself.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    /// Warning Events about the cluster, newest first.
    pub warnings: Vec<EventLine>,
    /// The `QuotaReserved` condition of the lock sentinel's Workload, with its name.
    pub sentinel: Option<(String, Option<Condition>)>,
    /// Whether the lock's Workload tolerates the cordon taint (`fournos.dev/cordoned`):
    /// Hearth's workload sentinels do, the Workload Fournos makes of a FournosJob
    /// sentinel does not. `None` when no such Workload was found.
    pub sentinel_tolerates_cordon: Option<bool>,
    /// Other Workloads admitted on the cluster's flavor (`namespace/name`).
    pub admitted_on_cluster: Vec<String>,
    /// What could not be read (RBAC, for instance), said at the end.
    pub unreadable: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventLine {
    pub reason: String,
    pub message: String,
    pub at: Option<Timestamp>,
}

/// The json/yaml output of `why`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub cluster: String,
    pub explanation: String,
    #[serde(flatten)]
    pub row: view::ClusterRow,
}

pub fn explain(fc: &FournosCluster, evidence: &Evidence, now: Timestamp) -> String {
    let name = fc.metadata.name.clone().unwrap_or_default();
    let status = fc.status.clone().unwrap_or_default();
    let mut sentences = vec![kubeconfig_sentence(&name, &status), quota_sentence(&status)];
    sentences.extend(cordon_sentence(fc, &name, evidence));
    sentences.push(lock_sentence(fc, &name, &status, evidence, now));
    sentences.extend(evidence_sentences(evidence, now));
    // Names, owners, reasons and GPU summaries come from the cluster as much as the
    // quoted messages do: each sentence is bounded whole.
    sentences
        .iter()
        .map(|s| bounded(s.trim(), MAX_SENTENCE))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Kubeconfig and GPUs.
fn kubeconfig_sentence(name: &str, status: &FournosClusterStatus) -> String {
    let valid = find(&status.conditions, KUBECONFIG_VALID);
    match status.kubeconfig_status {
        None => format!(
            "{name} has not been probed yet (no kubeconfigStatus): hearth-discovery writes it \
             after its first probe; if that takes more than a minute, check that \
             hearth-discovery runs."
        ),
        Some(KubeconfigStatus::Valid) => {
            let gpus = status
                .gpu_summary
                .as_deref()
                .filter(|g| !g.is_empty())
                .map_or_else(|| "no GPUs counted".to_owned(), |g| format!("GPUs {g}"));
            let expiry = valid
                .filter(|c| {
                    matches!(
                        KubeconfigValidReason::parse(&c.reason),
                        Some(
                            KubeconfigValidReason::CredentialsExpiringSoon
                                | KubeconfigValidReason::CredentialsExpired
                        )
                    )
                })
                .map(|c| format!(" Careful: {}", sentence(&c.message)))
                .unwrap_or_default();
            let facts = status
                .hardware
                .as_ref()
                .map(view::platform_facts)
                .filter(|f| !f.is_empty())
                .map(|f| format!("; {f}"))
                .unwrap_or_default();
            format!("{name}'s kubeconfig is Valid ({gpus}{facts}).{expiry}")
        }
        Some(s) => format!(
            "{name}'s kubeconfig is {s}{} Kueue gets zero quota for it until it is Valid again.",
            valid.map_or_else(|| ".".to_owned(), |c| format!(": {}", sentence(&c.message)))
        ),
    }
}

/// Quota.
fn quota_sentence(status: &FournosClusterStatus) -> String {
    match find(&status.conditions, KUEUE_SYNCED) {
        None => "hearth-kueue-sync has not reported on it (no KueueSynced condition), so it has \
                 no quota yet: check that hearth-kueue-sync runs."
            .to_owned(),
        Some(c) if c.status == "True" => {
            let kueue = status.kueue.clone().unwrap_or_default();
            let quotas = kueue
                .quotas
                .iter()
                .map(|(resource, n)| format!("{resource}={n}"))
                .collect::<Vec<_>>()
                .join(", ");
            format!(
                "Its quota is published in ClusterQueue {} ({quotas}).",
                kueue.cluster_queue
            )
        }
        Some(c) => format!(
            "It has no quota in Kueue (KueueSynced={}, {}): {}",
            c.status,
            c.reason,
            sentence(&c.message)
        ),
    }
}

/// Cordon, in one sentence: who, why, until when, and how far the drain is.
fn cordon_sentence(fc: &FournosCluster, name: &str, evidence: &Evidence) -> Option<String> {
    let row = view::row(fc);
    let cordon = row.cordon?;
    let by = view::prefixed(" by ", cordon.by.as_deref());
    let until = view::prefixed(" until ", cordon.until.as_deref());
    let reason = bounded(&cordon.reason, MAX_QUOTE);
    let left = match (cordon.state.as_str(), cordon.admitted_workloads) {
        ("Drained", _) => {
            "; no Workload is admitted there any more (Drained): ready for maintenance".to_owned()
        }
        ("CordonOverdue", n) => format!(
            "; its end has passed and it is still on{}",
            n.map(|n| format!(", with {n} Workload(s) still admitted"))
                .unwrap_or_default()
        ),
        (_, Some(n)) => format!("; {n} Workload(s) admitted before the cordon still run there"),
        _ => "; hearth-kueue-sync has not reported on the cordon yet".to_owned(),
    };
    // A lock wanted and not held: whether it gets in before the uncordon.
    let lock = match (row.lock.state, evidence.sentinel_tolerates_cordon) {
        (LockState::Waiting, Some(true)) => {
            "; the lock's sentinel tolerates the cordon, so it is held once the cluster is \
             drained"
        }
        (LockState::Waiting, Some(false)) => {
            "; the lock's Workload (made by Fournos) does not tolerate the cordon, so the lock \
             waits for the uncordon"
        }
        _ => "",
    };
    Some(format!(
        "{name} is cordoned{by}{until} (\"{reason}\"): Kueue admits no new job there{left}{lock}; \
         `kubectl fournos uncordon {name}` lifts it."
    ))
}

/// Whether `w`'s pod sets tolerate the cordon taint (`fournos.dev/cordoned`, NoSchedule).
pub fn tolerates_cordon(w: &hearth_api::kueue::Workload) -> bool {
    use hearth_api::names::CORDON_TAINT_KEY;
    !w.spec.pod_sets.is_empty()
        && w.spec.pod_sets.iter().all(|ps| {
            ps.template
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.as_ref())
                .is_some_and(|ts| {
                    ts.iter().any(|t| {
                        let key = t.key.as_deref();
                        let exists = t.operator.as_deref() == Some("Exists");
                        (key == Some(CORDON_TAINT_KEY) || (key.is_none() && exists))
                            && t.effect.as_deref().is_none_or(|e| e == "NoSchedule")
                    })
                })
        })
}

/// Lock.
fn lock_sentence(
    fc: &FournosCluster,
    name: &str,
    status: &FournosClusterStatus,
    evidence: &Evidence,
    now: Timestamp,
) -> String {
    let row = view::row(fc);
    let locked = find(&status.conditions, LOCKED);
    match (row.lock.state, row.lock.owner.as_deref()) {
        // Never "nobody" while something holds its slots: a Fournos lock made by
        // another tool, or an exclusive job, locks it as surely as Hearth's.
        (LockState::Free, _) if !status.slot_holders.is_empty() => {
            let holders = holder_list(&status.slot_holders);
            let all = status
                .kueue
                .as_ref()
                .map(|k| k.cluster_slots)
                .filter(|n| *n > 0);
            let taken: i64 = status.slot_holders.iter().map(|h| h.slots).sum();
            match all {
                Some(all) if taken >= all => format!(
                    "No Hearth lock, but its slots are all taken ({taken} of {all}) by {holders}: nothing else is admitted there until they finish."
                ),
                Some(all) => {
                    format!("No Hearth lock; {taken} of its {all} slots are taken by {holders}.")
                }
                None => format!("No Hearth lock; its slots are taken by {holders}."),
            }
        }
        (LockState::Free, _) => {
            match locked.filter(|c| LockedReason::parse(&c.reason) == Some(LockedReason::Expired)) {
                Some(c) => format!("Nobody holds a lock on it; {}", sentence(&c.message)),
                None => "Nobody holds a lock on it.".to_owned(),
            }
        }
        (LockState::Releasing, _) => {
            "Nobody owns it, but the lock sentinel still holds its slots: the release is in \
             progress."
                .to_owned()
        }
        (LockState::Held, Some(owner)) => format!(
            "{owner} holds the lock, {}.",
            status.lock_expires_at.as_ref().map_or_else(
                || "with no TTL (until unlocked)".to_owned(),
                |t| format!("until {} ({})", t.0, view::relative(t.0, now))
            )
        ),
        (_, owner) => {
            let owner = owner.unwrap_or_default();
            match locked.filter(|_| status.lock_owner.as_deref() == Some(owner)) {
                None => format!(
                    "{owner} asked for the lock but hearth-lock-manager has not acted on it \
                     yet: check that hearth-lock-manager runs."
                ),
                Some(c) => pending_lock_sentence(name, owner, c, evidence),
            }
        }
    }
}

/// A lock asked for and acted on but not held: why, with Kueue's own words when they add
/// to the condition's.
fn pending_lock_sentence(
    name: &str,
    owner: &str,
    locked: &Condition,
    evidence: &Evidence,
) -> String {
    let mut s = format!(
        "{owner}'s lock is not held yet ({}): {}",
        locked.reason,
        sentence(&locked.message)
    );
    if let Some((workload, Some(reserved))) = &evidence.sentinel
        && reserved.status != "True"
        && !locked.message.contains(&reserved.message)
    {
        s.push_str(&format!(
            " Kueue says of the sentinel Workload {workload}: {}",
            sentence(&reserved.message)
        ));
    }
    if !evidence.admitted_on_cluster.is_empty() {
        s.push_str(&format!(
            " Admitted on {name} now: {}.",
            list(&evidence.admitted_on_cluster)
        ));
    }
    s
}

/// The latest warning Event, and what could not be read.
fn evidence_sentences(evidence: &Evidence, now: Timestamp) -> Vec<String> {
    let mut sentences = Vec::new();
    if let Some(event) = evidence.warnings.first() {
        let when = event
            .at
            .map(|at| format!(" ({})", view::relative(at, now)))
            .unwrap_or_default();
        sentences.push(format!(
            "Latest warning Event{when}: {}: {}",
            event.reason,
            sentence(&event.message)
        ));
    }
    if !evidence.unreadable.is_empty() {
        sentences.push(format!(
            "Not checked (not allowed or failed): {}.",
            evidence.unreadable.join("; ")
        ));
    }
    sentences
}

/// A message as one sentence of the paragraph: bounded, ending in a full stop.
fn sentence(message: &str) -> String {
    let mut text = bounded(message.trim(), MAX_QUOTE);
    if !text.ends_with([CUT, '.', '!', '?']) {
        text.push('.');
    }
    text
}

/// The holders of a cluster's slots, each with its slots (Kueue's count) and the job and
/// owner it claims: whoever made the Workload wrote its label and annotation.
fn holder_list(holders: &[hearth_api::SlotHolder]) -> String {
    let named: Vec<String> = holders
        .iter()
        .map(|h| {
            let mut said = vec![format!("{} slots", h.slots)];
            if let Some(job) = &h.job {
                said.insert(0, format!("says FournosJob {}", bounded(job, MAX_QUOTE)));
            }
            if let Some(owner) = &h.owner {
                said.push(format!(
                    "annotation says owner {}",
                    bounded(owner, MAX_QUOTE)
                ));
            }
            format!(
                "Workload {} ({})",
                bounded(&h.workload, MAX_QUOTE),
                said.join(", ")
            )
        })
        .collect();
    list(&named)
}

fn list(items: &[String]) -> String {
    let mut shown = items
        .iter()
        .take(MAX_BLOCKERS)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > MAX_BLOCKERS {
        shown.push_str(&format!(" and {} more", items.len() - MAX_BLOCKERS));
    }
    shown
}

/// What `wait` waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Locked,
    Released,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    Done,
    /// Not yet; the state to report on a time-out.
    Pending(String),
    /// It cannot happen without someone acting (the lock was released, the cluster
    /// deleted): stop waiting.
    Failed(String),
}

pub fn progress(fc: Option<&FournosCluster>, target: Target) -> Progress {
    let Some(fc) = fc else {
        return Progress::Failed("the FournosCluster was deleted".into());
    };
    let row = view::row(fc);
    match (target, row.lock.state) {
        (Target::Locked, LockState::Held) | (Target::Released, LockState::Free) => Progress::Done,
        (Target::Locked, LockState::Free | LockState::Releasing) => Progress::Failed(
            "nobody owns the cluster (the lock was released or expired): lock it first".into(),
        ),
        (Target::Locked, _) => Progress::Pending(format!(
            "{}'s lock waits ({})",
            row.lock.owner.unwrap_or_default(),
            row.lock.waiting_reason.unwrap_or_default()
        )),
        (Target::Released, state) => Progress::Pending(format!(
            "the lock of {} is {}",
            row.lock.owner.unwrap_or_else(|| "nobody".into()),
            state.as_str()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tests::{cluster, condition, with_lock};
    use hearth_api::kueue::workload_conditions::QUOTA_RESERVED;

    fn now() -> Timestamp {
        "2026-11-23T10:00:00Z".parse().unwrap()
    }

    /// What Kueue says of a sentinel it has not admitted.
    fn sentinel_pending(reason: &str, message: &str) -> Evidence {
        Evidence {
            sentinel: Some((
                "exec/cluster-lock-a".into(),
                Some(condition(QUOTA_RESERVED, "False", reason, message)),
            )),
            ..Default::default()
        }
    }

    /// Credentials that expire are said while the kubeconfig stays Valid; any other
    /// reason of a Valid kubeconfig adds nothing.
    #[test]
    fn expiring_credentials_are_said_of_a_valid_kubeconfig() {
        let sentence_with = |reason: &str| {
            let mut fc = cluster("a");
            let status = fc.status.as_mut().unwrap();
            status.conditions.push(condition(
                KUBECONFIG_VALID,
                "True",
                reason,
                "the token expires in 2 days; rotate the Secret",
            ));
            kubeconfig_sentence("a", status)
        };
        for reason in ["CredentialsExpiringSoon", "CredentialsExpired"] {
            assert!(
                sentence_with(reason)
                    .ends_with(" Careful: the token expires in 2 days; rotate the Secret."),
                "{reason}: {}",
                sentence_with(reason)
            );
        }
        assert!(!sentence_with("Valid").contains("Careful"));
        assert!(!sentence_with("CredentialsSomethingNew").contains("Careful"));
    }

    #[test]
    fn a_waiting_lock_says_what_kueue_says_and_what_runs_there() {
        let fc = with_lock(cluster("a"), "alice", false);
        let evidence = Evidence {
            admitted_on_cluster: vec!["exec/benchmark-1".into()],
            ..sentinel_pending("Pending", "insufficient unused quota")
        };
        let text = explain(&fc, &evidence, now());
        assert_eq!(
            text,
            "a's kubeconfig is Valid (GPUs 8x NVIDIA-A100-SXM4-80GB). Its quota is published in \
             ClusterQueue fournos-queue (fournos/cluster-slot=100, fournos/gpu-a100=8). alice's \
             lock is not held yet (WaitingForAdmission): Sentinel cluster-lock-a waits for \
             Kueue to admit it: insufficient unused quota. Admitted on a now: exec/benchmark-1."
        );
    }

    #[test]
    fn a_cordon_is_one_sentence_with_who_why_and_what_is_left() {
        let mut fc = cluster("a");
        fc.spec.cordon = Some(hearth_api::Cordon {
            reason: "driver upgrade".into(),
            by: Some("bob".into()),
            since: None,
            until: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-25T08:00:00Z".parse().unwrap(),
            )),
        });
        let status = fc.status.as_mut().unwrap();
        status.conditions.push(condition(
            hearth_api::names::condition_types::SCHEDULABLE,
            "False",
            "Cordoned",
            "cordoned",
        ));
        status.admitted_workloads = Some(1);
        status.hardware.as_mut().unwrap().kubernetes_version = Some("v1.34.1".into());
        let text = explain(&fc, &Evidence::default(), now());
        assert!(
            text.contains(
                "a is cordoned by bob until 2026-11-25T08:00:00Z (\"driver upgrade\"): Kueue \
                 admits no new job there; 1 Workload(s) admitted before the cordon still run \
                 there; `kubectl fournos uncordon a` lifts it."
            ),
            "{text}"
        );
        assert!(text.contains("Kubernetes v1.34.1"), "{text}");
    }

    #[test]
    fn a_lock_waiting_on_a_cordoned_cluster_says_whether_it_gets_in() {
        let mut fc = with_lock(cluster("a"), "alice", false);
        fc.spec.cordon = Some(hearth_api::Cordon {
            reason: "upgrade".into(),
            ..Default::default()
        });
        let fournos = Evidence {
            sentinel_tolerates_cordon: Some(false),
            ..Default::default()
        };
        let text = explain(&fc, &fournos, now());
        assert!(text.contains("the lock waits for the uncordon"), "{text}");
        let workload = Evidence {
            sentinel_tolerates_cordon: Some(true),
            ..Default::default()
        };
        let text = explain(&fc, &workload, now());
        assert!(text.contains("held once the cluster is drained"), "{text}");

        let sentinel: hearth_api::kueue::Workload = serde_json::from_value(serde_json::json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "cluster-lock-a"},
            "spec": {"podSets": [{"name": "lock", "count": 1, "template": {"spec": {
                "containers": [],
                "tolerations": [{"key": "fournos.dev/cordoned", "operator": "Exists", "effect": "NoSchedule"}],
            }}}]},
        }))
        .unwrap();
        assert!(tolerates_cordon(&sentinel));
        let mut fournos_made = sentinel.clone();
        fournos_made.spec.pod_sets[0]
            .template
            .spec
            .as_mut()
            .unwrap()
            .tolerations = None;
        assert!(!tolerates_cordon(&fournos_made));
    }

    #[test]
    fn kueues_own_words_are_added_when_the_condition_lacks_them() {
        let fc = with_lock(cluster("a"), "alice", false);
        let evidence = sentinel_pending("Inadmissible", "ClusterQueue cq is inactive");
        let text = explain(&fc, &evidence, now());
        assert!(
            text.contains(
                "Kueue says of the sentinel Workload exec/cluster-lock-a: ClusterQueue cq is \
                 inactive."
            ),
            "{text}"
        );
    }

    #[test]
    fn a_drained_cluster_says_why_it_has_no_quota() {
        let mut fc = cluster("b");
        let status = fc.status.as_mut().unwrap();
        status.kubeconfig_status = Some(hearth_api::KubeconfigStatus::Unauthorized);
        status.conditions = vec![
            condition(
                KUBECONFIG_VALID,
                "False",
                "Unauthorized",
                "the target answered 401: issue new credentials",
            ),
            condition(
                KUEUE_SYNCED,
                "False",
                "Drained",
                "kubeconfig is not Valid: quota 0",
            ),
        ];
        let evidence = Evidence {
            warnings: vec![EventLine {
                reason: "Unauthorized".into(),
                message: "401 from the target".into(),
                at: Some("2026-11-23T09:58:00Z".parse().unwrap()),
            }],
            unreadable: vec!["Workloads in exec: forbidden".into()],
            ..Default::default()
        };
        let text = explain(&fc, &evidence, now());
        assert_eq!(
            text,
            "b's kubeconfig is Unauthorized: the target answered 401: issue new credentials. \
             Kueue gets zero quota for it until it is Valid again. It has no quota in Kueue \
             (KueueSynced=False, Drained): kubeconfig is not Valid: quota 0. Nobody holds a lock \
             on it. Latest warning Event (2m ago): Unauthorized: 401 from the target. Not \
             checked (not allowed or failed): Workloads in exec: forbidden."
        );
    }

    #[test]
    fn missing_controllers_are_named() {
        let mut fc = FournosCluster::new("c", Default::default());
        fc.spec.owner = Some("alice".into());
        let text = explain(&fc, &Evidence::default(), now());
        assert!(text.contains("check that hearth-discovery runs"), "{text}");
        assert!(text.contains("check that hearth-kueue-sync runs"), "{text}");
        assert!(
            text.contains("check that hearth-lock-manager runs"),
            "{text}"
        );
    }

    #[test]
    fn a_held_lock_says_until_when() {
        let mut fc = with_lock(cluster("a"), "alice", true);
        fc.status.as_mut().unwrap().lock_expires_at =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-23T14:00:00Z".parse().unwrap(),
            ));
        let text = explain(&fc, &Evidence::default(), now());
        assert!(
            text.ends_with("alice holds the lock, until 2026-11-23T14:00:00Z (in 4h)."),
            "{text}"
        );
    }

    /// Issue 24 (6): an unlocked cluster whose slots a foreign lock holds is not "free".
    #[test]
    fn a_foreign_lock_is_named_not_called_nobody() {
        let mut fc = cluster("a");
        let status = fc.status.get_or_insert_with(Default::default);
        status.kueue = Some(hearth_api::KueueStatus {
            flavor: "a".into(),
            cluster_queue: "q".into(),
            cluster_slots: 100,
            ..Default::default()
        });
        status.slot_holders = vec![hearth_api::SlotHolder {
            workload: "exec/lock-a".into(),
            job: Some("lock-a".into()),
            owner: None,
            slots: 100,
        }];
        let text = explain(&fc, &Evidence::default(), now());
        assert!(!text.contains("Nobody holds"), "{text}");
        assert!(
            text.contains(
                "No Hearth lock, but its slots are all taken (100 of 100) by Workload exec/lock-a (says FournosJob lock-a, 100 slots)"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_message_ends_its_sentence_unless_it_was_cut() {
        assert_eq!(sentence(" waits for quota \n"), "waits for quota.");
        assert_eq!(sentence("Admitted!"), "Admitted!");
        let long = "x".repeat(2000);
        let cut = sentence(&long);
        assert_eq!(cut.chars().count(), MAX_QUOTE + 1);
        assert!(cut.ends_with(CUT), "{cut}");
    }

    #[test]
    fn quoted_cluster_text_cannot_drive_the_terminal() {
        use crate::print::tests::{HOSTILE, assert_shows_nothing_hidden};
        let mut fc = with_lock(cluster(HOSTILE), HOSTILE, false);
        let status = fc.status.as_mut().unwrap();
        status.gpu_summary = Some(HOSTILE.into());
        status.kubeconfig_status = Some(hearth_api::KubeconfigStatus::Unreachable);
        for c in &mut status.conditions {
            c.reason = HOSTILE.into();
            c.message = HOSTILE.into();
        }
        status
            .conditions
            .push(condition(KUBECONFIG_VALID, "False", HOSTILE, HOSTILE));
        let evidence = Evidence {
            warnings: vec![EventLine {
                reason: HOSTILE.into(),
                message: HOSTILE.into(),
                at: None,
            }],
            admitted_on_cluster: vec![HOSTILE.into()],
            unreadable: vec![HOSTILE.into()],
            ..sentinel_pending(HOSTILE, &format!("{HOSTILE} (Kueue)"))
        };
        let text = explain(&fc, &evidence, now());
        assert_shows_nothing_hidden(&text);
        assert!(!text.contains('\n'), "one paragraph: {text}");
        for said in [
            "Latest warning Event",
            "Kueue says of the sentinel",
            "Not checked",
        ] {
            assert!(text.contains(said), "{said:?} missing from {text}");
        }
    }

    #[test]
    fn wait_progress() {
        let held = with_lock(cluster("a"), "alice", true);
        let waiting = with_lock(cluster("a"), "alice", false);
        let free = cluster("a");
        assert_eq!(progress(Some(&held), Target::Locked), Progress::Done);
        assert_eq!(
            progress(Some(&waiting), Target::Locked),
            Progress::Pending("alice's lock waits (WaitingForAdmission)".into())
        );
        assert!(matches!(
            progress(Some(&free), Target::Locked),
            Progress::Failed(_)
        ));
        assert!(matches!(
            progress(None, Target::Locked),
            Progress::Failed(_)
        ));
        assert_eq!(progress(Some(&free), Target::Released), Progress::Done);
        assert!(matches!(
            progress(Some(&held), Target::Released),
            Progress::Pending(_)
        ));
    }
}
