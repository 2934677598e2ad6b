use super::*;
use crate::credentials::CredentialKind;
use crate::gpus::count_gpus;
use crate::test_support::node;
use hearth_api::KueueStatus;
use pretty_assertions::assert_eq;

const SECRET: &str = "psap-secrets/kubeconfig-a";

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_795_000_000 + secs).unwrap()
}

fn fleet() -> GpuCount {
    count_gpus(&[
        node("a1").nvidia("NVIDIA-A100-SXM4-80GB", 4).build(),
        node("a2").nvidia("NVIDIA-A100-SXM4-80GB", 4).build(),
        node("l").nvidia("NVIDIA-L40S", 2).build(),
        node("h")
            .nvidia("NVIDIA-H100-80GB-HBM3", 8)
            .cordoned()
            .build(),
    ])
}

fn reached(count: GpuCount) -> ProbeOutcome {
    ProbeOutcome::Reached {
        server_version: Some("v1.34.1".into()),
        nodes: NodeListing::Counted(count),
    }
}

fn unreachable() -> ProbeOutcome {
    ProbeOutcome::Unreachable {
        detail: "connect timed out after 10s".into(),
    }
}

/// A status a probe starts from: a planned one, or one with other controllers' fields.
trait Previous {
    fn wide(&self) -> FournosClusterStatus;
}

impl Previous for DiscoveryStatus {
    fn wide(&self) -> FournosClusterStatus {
        self.clone().into()
    }
}

impl Previous for FournosClusterStatus {
    fn wide(&self) -> FournosClusterStatus {
        self.clone()
    }
}

fn diff_status(old: Option<&dyn Previous>, new: &DiscoveryStatus) -> StatusDiff {
    super::diff_status(old.map(|o| o.wide()).as_ref(), new)
}

fn status_changed(old: Option<&dyn Previous>, new: &DiscoveryStatus) -> bool {
    super::status_changed(old.map(|o| o.wide()).as_ref(), new)
}

/// One probe with the usual settings: 5m interval, threshold 3, 7d window.
struct Probe {
    outcome: ProbeOutcome,
    previous: Option<FournosClusterStatus>,
    now: Timestamp,
    generation: Option<i64>,
    credentials: Option<Expiry>,
    kubeconfig_changed: bool,
    hold: Option<OffboardHold<'static>>,
    /// `None`: created from the Secret the spec names, gone when the probe says so.
    source: Option<Source>,
}

impl Probe {
    fn new(outcome: ProbeOutcome, previous: Option<&dyn Previous>, now: Timestamp) -> Self {
        Self {
            outcome,
            previous: previous.map(|p| p.wide()),
            now,
            generation: Some(1),
            credentials: None,
            kubeconfig_changed: false,
            hold: None,
            source: None,
        }
    }

    fn plan(&self) -> StatusPlan {
        let source = self.source.clone().unwrap_or_else(|| Source {
            record: Some(source_record()),
            gone: self.outcome == ProbeOutcome::SecretMissing,
            problem: None,
        });
        plan_status(&PlanInput {
            outcome: &self.outcome,
            previous: self.previous.as_ref(),
            generation: self.generation,
            now: self.now,
            secret: SECRET,
            credentials: self.credentials,
            interval: Duration::from_secs(300),
            failure_threshold: 3,
            expiry_window: crate::credentials::DEFAULT_EXPIRY_WARNING_WINDOW,
            kubeconfig_changed: self.kubeconfig_changed,
            offboard_hold: self.hold,
            source: &source,
            secrets_namespace: "psap-secrets",
        })
    }
}

fn source_record() -> hearth_api::SourceSecret {
    hearth_api::SourceSecret {
        name: "kubeconfig-a".into(),
        uid: "uid-secret".into(),
    }
}

fn plan(outcome: ProbeOutcome, previous: Option<&dyn Previous>, now: Timestamp) -> StatusPlan {
    Probe::new(outcome, previous, now).plan()
}

fn cond<'a>(s: &'a DiscoveryStatus, type_: &str) -> &'a Condition {
    find(&s.conditions, type_).unwrap_or_else(|| panic!("no {type_} in {s:?}"))
}

/// A condition's status and reason.
fn state_of(c: &Condition) -> (&str, &str) {
    (c.status.as_str(), c.reason.as_str())
}

fn reasons_of(s: &DiscoveryStatus) -> [&str; 5] {
    let kc = cond(s, KUBECONFIG_VALID);
    let gpu = cond(s, GPU_DISCOVERED);
    [
        s.kubeconfig_status.map_or("", |k| k.as_str()),
        &kc.status,
        &kc.reason,
        &gpu.status,
        &gpu.reason,
    ]
}

/// Asserts the conditions of a kubeconfig that does not work: `status` names it in both
/// `status.kubeconfigStatus` and the KubeconfigValid reason, and discovery fails.
#[track_caller]
fn assert_kubeconfig_fails(s: &DiscoveryStatus, status: &str) {
    assert_eq!(
        reasons_of(s),
        [status, "False", status, "False", "DiscoveryFailed"]
    );
}

fn event_reasons(plan: &StatusPlan) -> Vec<&'static str> {
    plan.events.iter().map(|e| e.reason).collect()
}

fn valid_status() -> DiscoveryStatus {
    plan(reached(fleet()), None, at(0)).status
}

#[test]
fn first_successful_probe() {
    let plan = plan(reached(fleet()), None, at(0));
    let s = &plan.status;
    assert_eq!(
        reasons_of(s),
        ["Valid", "True", "Valid", "True", "Discovered"]
    );
    let kc = cond(s, KUBECONFIG_VALID);
    assert_eq!(
        kc.message,
        "the target accepts the credentials in Secret psap-secrets/kubeconfig-a (Kubernetes v1.34.1)"
    );
    assert_eq!(kc.observed_generation, Some(1));
    assert_eq!(kc.last_transition_time, Time(at(0)));
    assert_eq!(
        cond(s, GPU_DISCOVERED).message,
        "8x NVIDIA-A100-SXM4-80GB, 2x NVIDIA-L40S on 3 nodes; 1 GPU node left out because cordoned or not Ready"
    );
    let hw = s.hardware.as_ref().unwrap();
    assert_eq!(hw.total_gpus, 10);
    assert_eq!(hw.excluded_nodes, 1);
    assert_eq!(hw.consecutive_failures, 0);
    assert_eq!(hw.last_error, None);
    assert_eq!(hw.last_discovery, Some(Time(at(0))));
    assert_eq!(
        s.gpu_summary.as_deref(),
        Some("8x NVIDIA-A100-SXM4-80GB, 2x NVIDIA-L40S")
    );
    assert_eq!(s.next_probe_at, Some(Time(at(300))));
    assert_eq!(s.credentials_expire_at, None);
    assert_eq!(event_reasons(&plan), ["KubeconfigValid", "GPUsChanged"]);
    assert_eq!(
        plan.events[1].note,
        "GPUs discovered: 8x NVIDIA-A100-SXM4-80GB, 2x NVIDIA-L40S"
    );
}

#[test]
fn only_discovery_fields_are_planned() {
    let mut previous: FournosClusterStatus = valid_status().into();
    previous.kueue = Some(KueueStatus {
        flavor: "a".into(),
        cluster_queue: "fournos-queue".into(),
        quotas: Default::default(),
        cluster_slots: 100,
    });
    previous.locked = Some(true);
    previous.lock_job_name = Some("cluster-lock-a".into());
    previous.conditions.push(Condition {
        type_: "Locked".into(),
        status: "True".into(),
        reason: "Held".into(),
        message: String::new(),
        observed_generation: Some(1),
        last_transition_time: Time(at(0)),
    });
    let planned = plan(reached(fleet()), Some(&previous), at(300)).status;
    let s: FournosClusterStatus = planned.clone().into();
    assert_eq!(s.kueue, None);
    assert_eq!(s.locked, None);
    assert_eq!(s.lock_job_name, None);
    assert_eq!(s.owner_set_at, None);
    assert_eq!(s.lock_expires_at, None);
    let types: Vec<&str> = s.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, [KUBECONFIG_VALID, GPU_DISCOVERED]);
    // Other controllers' fields never count as a change.
    assert!(!status_changed(Some(&previous), &planned));
}

#[test]
fn same_result_moves_only_the_timestamps() {
    let first = valid_status();
    let second = plan(reached(fleet()), Some(&first), at(300));
    assert!(second.events.is_empty(), "{:?}", second.events);
    assert_eq!(
        second.status.conditions, first.conditions,
        "no transition, same messages"
    );
    assert_eq!(
        diff_status(Some(&first), &second.status),
        StatusDiff::TimestampsOnly
    );
    assert!(!status_changed(Some(&first), &second.status));
    assert_eq!(second.status.next_probe_at, Some(Time(at(600))));
    assert_eq!(
        second.status.hardware.as_ref().unwrap().last_discovery,
        Some(Time(at(300)))
    );
    assert_eq!(
        diff_status(Some(&second.status), &second.status),
        StatusDiff::Same
    );
}

#[test]
fn a_new_generation_is_a_change() {
    let first = valid_status();
    let mut probe = Probe::new(reached(fleet()), Some(&first), at(300));
    probe.generation = Some(2);
    let second = probe.plan();
    assert_eq!(
        cond(&second.status, KUBECONFIG_VALID).observed_generation,
        Some(2)
    );
    assert_eq!(
        cond(&second.status, KUBECONFIG_VALID).last_transition_time,
        Time(at(0))
    );
    assert_eq!(
        diff_status(Some(&first), &second.status),
        StatusDiff::Changed
    );
}

#[test]
fn gpu_changes_are_a_change_with_an_event() {
    let first = valid_status();
    let more = count_gpus(&[
        node("a1").nvidia("NVIDIA-A100-SXM4-80GB", 4).build(),
        node("a2").nvidia("NVIDIA-A100-SXM4-80GB", 4).build(),
        node("a3").nvidia("NVIDIA-A100-SXM4-80GB", 4).build(),
        node("l").nvidia("NVIDIA-L40S", 2).build(),
    ]);
    let second = plan(reached(more), Some(&first), at(300));
    assert_eq!(
        diff_status(Some(&first), &second.status),
        StatusDiff::Changed
    );
    assert_eq!(event_reasons(&second), ["GPUsChanged"]);
    assert_eq!(
        second.events[0].note,
        "GPUs now 12x NVIDIA-A100-SXM4-80GB, 2x NVIDIA-L40S (were 8x NVIDIA-A100-SXM4-80GB, 2x NVIDIA-L40S)"
    );
}

#[test]
fn a_rotated_kubeconfig_gets_no_grace() {
    // Valid, then one failure held back by the threshold; then the Secret is rotated to a
    // kubeconfig whose server does not answer: Unreachable at once, counting from 1.
    let valid = valid_status();
    let held = plan(unreachable(), Some(&valid), at(300));
    assert_eq!(held.status.kubeconfig_status, Some(KubeconfigStatus::Valid));
    let mut probe = Probe::new(unreachable(), Some(&held.status), at(305));
    probe.kubeconfig_changed = true;
    let rotated = probe.plan();
    let s = &rotated.status;
    assert_kubeconfig_fails(s, "Unreachable");
    assert_eq!(s.hardware.as_ref().unwrap().consecutive_failures, 1);
    assert_eq!(s.next_probe_at, Some(Time(at(315))), "backoff starts over");
    assert_eq!(event_reasons(&rotated), ["KubeconfigUnreachable"]);

    // Without the rotation the same probe would still be held.
    let same = plan(unreachable(), Some(&held.status), at(305));
    assert_eq!(same.status.kubeconfig_status, Some(KubeconfigStatus::Valid));
}

#[test]
fn a_rotated_kubeconfig_that_works_is_valid_at_once() {
    let invalid = plan(ProbeOutcome::Invalid(KubeconfigError::Empty), None, at(0));
    let mut probe = Probe::new(reached(fleet()), Some(&invalid.status), at(5));
    probe.kubeconfig_changed = true;
    let back = probe.plan();
    assert_eq!(
        reasons_of(&back.status),
        ["Valid", "True", "Valid", "True", "Discovered"]
    );
    assert_eq!(
        back.status.hardware.as_ref().unwrap().consecutive_failures,
        0
    );
}

#[test]
fn valid_cluster_survives_failures_below_the_threshold() {
    let valid = valid_status();
    let one = plan(unreachable(), Some(&valid), at(300));
    let two = plan(unreachable(), Some(&one.status), at(310));
    for (p, failures, next) in [(&one, 1, at(310)), (&two, 2, at(330))] {
        let s = &p.status;
        assert_eq!(s.kubeconfig_status, Some(KubeconfigStatus::Valid));
        assert_eq!(s.conditions, valid.conditions, "conditions untouched");
        assert!(p.events.is_empty(), "{:?}", p.events);
        let hw = s.hardware.as_ref().unwrap();
        assert_eq!(hw.consecutive_failures, failures);
        assert_eq!(
            hw.last_error.as_deref(),
            Some("Unreachable: connect timed out after 10s")
        );
        assert_eq!(
            hw.gpus,
            valid.hardware.as_ref().unwrap().gpus,
            "last count kept"
        );
        assert_eq!(hw.last_discovery, Some(Time(at(0))));
        assert_eq!(s.next_probe_at, Some(Time(next)), "backoff 10s, then 20s");
        assert_eq!(s.gpu_summary, valid.gpu_summary);
    }
    // The third failure in a row crosses the threshold.
    let three = plan(unreachable(), Some(&two.status), at(330));
    let s = &three.status;
    assert_kubeconfig_fails(s, "Unreachable");
    assert_eq!(
        cond(s, KUBECONFIG_VALID).last_transition_time,
        Time(at(330))
    );
    assert!(
        cond(s, KUBECONFIG_VALID)
            .message
            .starts_with("cannot reach the target: connect timed out after 10s.")
    );
    assert_eq!(
        cond(s, GPU_DISCOVERED).message,
        format!(
            "GPUs cannot be discovered while the kubeconfig is Unreachable (see condition KubeconfigValid); \
             hardware still shows the count from {}",
            at(0)
        )
    );
    assert_eq!(
        s.hardware.as_ref().unwrap().total_gpus,
        10,
        "last count kept"
    );
    assert_eq!(s.next_probe_at, Some(Time(at(330 + 40))));
    assert_eq!(event_reasons(&three), ["KubeconfigUnreachable"]);
    assert!(three.events[0].warning);

    // Further failures: no transition, no Event, only the counter and schedule move.
    let four = plan(unreachable(), Some(&three.status), at(370));
    assert!(four.events.is_empty());
    assert_eq!(four.status.conditions, three.status.conditions);

    // Recovery: Valid again at once, failures reset, a transition and an Event.
    let back = plan(reached(fleet()), Some(&four.status), at(450));
    let s = &back.status;
    assert_eq!(
        reasons_of(s),
        ["Valid", "True", "Valid", "True", "Discovered"]
    );
    assert_eq!(
        cond(s, KUBECONFIG_VALID).last_transition_time,
        Time(at(450))
    );
    assert_eq!(s.hardware.as_ref().unwrap().consecutive_failures, 0);
    assert_eq!(s.hardware.as_ref().unwrap().last_error, None);
    assert_eq!(s.next_probe_at, Some(Time(at(750))));
    assert_eq!(event_reasons(&back), ["KubeconfigValid"]);
}

#[test]
fn a_success_between_failures_resets_the_count() {
    let valid = valid_status();
    let one = plan(unreachable(), Some(&valid), at(300));
    let two = plan(unreachable(), Some(&one.status), at(310));
    let ok = plan(reached(fleet()), Some(&two.status), at(330));
    let again = plan(unreachable(), Some(&ok.status), at(630));
    assert_eq!(
        again.status.kubeconfig_status,
        Some(KubeconfigStatus::Valid)
    );
    assert_eq!(again.status.hardware.unwrap().consecutive_failures, 1);
}

#[test]
fn never_valid_and_unreachable_is_unreachable_at_once() {
    let p = plan(unreachable(), None, at(0));
    assert_kubeconfig_fails(&p.status, "Unreachable");
    assert_eq!(p.status.gpu_summary, None, "never discovered");
    assert_eq!(p.status.hardware.as_ref().unwrap().consecutive_failures, 1);
    assert_eq!(
        cond(&p.status, GPU_DISCOVERED).message,
        "GPUs cannot be discovered while the kubeconfig is Unreachable (see condition KubeconfigValid)"
    );
    assert_eq!(event_reasons(&p), ["KubeconfigUnreachable"]);
}

#[test]
fn unauthorized_applies_at_once_and_names_an_expired_certificate() {
    let valid = valid_status();
    let mut probe = Probe::new(
        ProbeOutcome::Unauthorized {
            detail: String::new(),
        },
        Some(&valid),
        at(300),
    );
    probe.credentials = Some(Expiry {
        kind: CredentialKind::ClientCertificate,
        at: at(200),
    });
    let p = probe.plan();
    assert_kubeconfig_fails(&p.status, "Unauthorized");
    assert_eq!(
        cond(&p.status, KUBECONFIG_VALID).message,
        format!(
            "the target rejected the credentials in Secret psap-secrets/kubeconfig-a (HTTP 401) \
             (the client certificate expired at {}); put valid, unexpired credentials in the Secret",
            at(200)
        )
    );
    assert_eq!(p.status.credentials_expire_at, Some(Time(at(200))));
    assert_eq!(
        p.status.hardware.as_ref().unwrap().last_error.as_deref(),
        Some("Unauthorized: HTTP 401")
    );
    assert_eq!(event_reasons(&p), ["KubeconfigUnauthorized"]);
}

#[test]
fn invalid_and_missing_apply_at_once_and_say_what_to_fix() {
    let valid = valid_status();
    let refused = KubeconfigError::Refused {
        field: "users[\"admin\"].user.exec".into(),
        why: "exec credential plugins would run a command inside Hearth",
    };
    let p = plan(ProbeOutcome::Invalid(refused), Some(&valid), at(300));
    assert_kubeconfig_fails(&p.status, "Invalid");
    assert_eq!(
        cond(&p.status, KUBECONFIG_VALID).message,
        "the kubeconfig in Secret psap-secrets/kubeconfig-a cannot be used: `users[\"admin\"].user.exec` is refused: \
         exec credential plugins would run a command inside Hearth"
    );
    assert_eq!(p.status.credentials_expire_at, None);
    assert_eq!(
        p.status.hardware.as_ref().unwrap().total_gpus,
        10,
        "last count kept for people to see"
    );
    assert_eq!(event_reasons(&p), ["KubeconfigInvalid"]);

    let p = plan(ProbeOutcome::SecretMissing, Some(&valid), at(300));
    assert_kubeconfig_fails(&p.status, "Missing");
    assert_eq!(
        cond(&p.status, KUBECONFIG_VALID).message,
        "Secret psap-secrets/kubeconfig-a does not exist or is not labeled fournos.dev/cluster-kubeconfig=true: \
         create it with the target's kubeconfig under the `kubeconfig` key, and label it"
    );
    let p = plan(ProbeOutcome::KeyMissing, None, at(0));
    assert_eq!(
        cond(&p.status, KUBECONFIG_VALID).message,
        "Secret psap-secrets/kubeconfig-a has no `kubeconfig` key: put the target's kubeconfig under that key"
    );
    assert_eq!(event_reasons(&p), ["KubeconfigMissing"]);
}

#[test]
fn forbidden_node_listing_applies_at_once() {
    let valid = valid_status();
    let outcome = ProbeOutcome::Reached {
        server_version: Some("v1.34.1".into()),
        nodes: NodeListing::Forbidden {
            detail: "nodes is forbidden: User \"system:serviceaccount:x:y\" cannot list resource \"nodes\"".into(),
        },
    };
    let p = plan(outcome, Some(&valid), at(300));
    assert_eq!(
        reasons_of(&p.status),
        ["Valid", "True", "Valid", "False", "Forbidden"]
    );
    assert!(cond(&p.status, GPU_DISCOVERED).message.starts_with(
        "the kubeconfig's identity may not list nodes on the target: grant it `list` on `nodes`"
    ));
    assert_eq!(p.status.hardware.as_ref().unwrap().consecutive_failures, 1);
    assert_eq!(p.status.gpu_summary, valid.gpu_summary);
    assert_eq!(event_reasons(&p), ["Forbidden"]);
}

#[test]
fn discovery_failures_are_held_like_unreachable_ones() {
    let valid = valid_status();
    let failed = || ProbeOutcome::Reached {
        server_version: Some("v1.34.1".into()),
        nodes: NodeListing::Failed {
            detail: "the server is currently unable to handle the request".into(),
        },
    };
    let one = plan(failed(), Some(&valid), at(300));
    assert_eq!(one.status.conditions, valid.conditions);
    assert!(one.events.is_empty());
    let two = plan(failed(), Some(&one.status), at(310));
    let three = plan(failed(), Some(&two.status), at(330));
    assert_eq!(
        reasons_of(&three.status),
        ["Valid", "True", "Valid", "False", "DiscoveryFailed"]
    );
    assert_eq!(event_reasons(&three), ["DiscoveryFailed"]);
}

#[test]
fn expiring_credentials_warn_while_still_valid() {
    let valid = valid_status();
    let mut probe = Probe::new(reached(fleet()), Some(&valid), at(300));
    let expiry = Expiry {
        kind: CredentialKind::Token,
        at: at(3 * 86_400),
    };
    probe.credentials = Some(expiry);
    let p = probe.plan();
    let kc = cond(&p.status, KUBECONFIG_VALID);
    assert_eq!(state_of(kc), ("True", "CredentialsExpiringSoon"));
    assert_eq!(
        kc.last_transition_time,
        Time(at(0)),
        "still True: no transition"
    );
    assert!(
        kc.message
            .contains(&format!("the token expires at {}", at(3 * 86_400))),
        "{}",
        kc.message
    );
    assert_eq!(p.status.credentials_expire_at, Some(Time(at(3 * 86_400))));
    assert_eq!(event_reasons(&p), ["CredentialsExpiringSoon"]);

    // The next probe says the same and warns no more.
    let mut again = Probe::new(reached(fleet()), Some(&p.status), at(600));
    again.credentials = Some(expiry);
    let again = again.plan();
    assert!(again.events.is_empty(), "{:?}", again.events);
    assert_eq!(
        diff_status(Some(&p.status), &again.status),
        StatusDiff::TimestampsOnly
    );

    // Past the date, yet accepted.
    let mut late = Probe::new(reached(fleet()), Some(&again.status), at(4 * 86_400));
    late.credentials = Some(expiry);
    let late = late.plan();
    assert_eq!(
        cond(&late.status, KUBECONFIG_VALID).reason,
        "CredentialsExpired"
    );
    assert_eq!(event_reasons(&late), ["CredentialsExpired"]);

    // Rotated: a later expiry clears the warning without a transition.
    let mut rotated = Probe::new(reached(fleet()), Some(&late.status), at(4 * 86_400 + 60));
    rotated.credentials = Some(Expiry {
        kind: CredentialKind::Token,
        at: at(365 * 86_400),
    });
    let rotated = rotated.plan();
    let kc = cond(&rotated.status, KUBECONFIG_VALID);
    assert_eq!(state_of(kc), ("True", "Valid"));
    assert_eq!(kc.last_transition_time, Time(at(0)));
    assert!(rotated.events.is_empty());
    assert_eq!(
        diff_status(Some(&late.status), &rotated.status),
        StatusDiff::Changed
    );
}

#[test]
fn an_empty_fleet_is_discovered_as_none() {
    let p = plan(reached(count_gpus(&[node("cpu").build()])), None, at(0));
    assert_eq!(p.status.gpu_summary.as_deref(), Some("none"));
    assert_eq!(
        cond(&p.status, GPU_DISCOVERED).message,
        "no GPUs on the target's schedulable, Ready nodes"
    );
    let hw = p.status.hardware.unwrap();
    assert_eq!((hw.total_gpus, hw.gpus.len()), (0, 0));
}

#[test]
fn status_changed_ignores_only_the_moving_timestamps() {
    let base = valid_status();
    let mut moved = base.clone();
    moved.next_probe_at = Some(Time(at(9_999)));
    moved.hardware.as_mut().unwrap().last_discovery = Some(Time(at(9_999)));
    assert!(!status_changed(Some(&base), &moved));
    assert_eq!(diff_status(Some(&base), &moved), StatusDiff::TimestampsOnly);

    let mut reordered = base.clone();
    reordered.conditions.reverse();
    assert!(!status_changed(Some(&base), &reordered));

    type Change = Box<dyn Fn(&mut DiscoveryStatus)>;
    let changes: Vec<(&str, Change)> = vec![
        (
            "credentialsExpireAt",
            Box::new(|s| s.credentials_expire_at = Some(Time(at(1)))),
        ),
        (
            "kubeconfigStatus",
            Box::new(|s| s.kubeconfig_status = Some(KubeconfigStatus::Unreachable)),
        ),
        (
            "gpuSummary",
            Box::new(|s| s.gpu_summary = Some("none".into())),
        ),
        (
            "consecutiveFailures",
            Box::new(|s| s.hardware.as_mut().unwrap().consecutive_failures = 1),
        ),
        (
            "lastError",
            Box::new(|s| s.hardware.as_mut().unwrap().last_error = Some("x".into())),
        ),
        (
            "excludedNodes",
            Box::new(|s| s.hardware.as_mut().unwrap().excluded_nodes = 0),
        ),
        (
            "condition message",
            Box::new(|s| s.conditions[0].message.push('!')),
        ),
        (
            "condition transition",
            Box::new(|s| s.conditions[1].last_transition_time = Time(at(5))),
        ),
        ("condition removed", Box::new(|s| s.conditions.truncate(1))),
        ("hardware removed", Box::new(|s| s.hardware = None)),
    ];
    for (name, change) in changes {
        let mut changed = base.clone();
        change(&mut changed);
        assert!(status_changed(Some(&base), &changed), "{name}");
        assert_eq!(
            diff_status(Some(&base), &changed),
            StatusDiff::Changed,
            "{name}"
        );
    }
    assert!(status_changed(None, &base));
    assert_eq!(
        diff_status(None, &DiscoveryStatus::default()),
        StatusDiff::Same
    );
}

#[test]
fn long_details_are_bounded() {
    let p = plan(
        ProbeOutcome::Unreachable {
            detail: "é".repeat(10_000),
        },
        None,
        at(0),
    );
    let kc = cond(&p.status, KUBECONFIG_VALID);
    assert!(
        kc.message.chars().count() < MAX_DETAIL_CHARS + 300,
        "{}",
        kc.message.len()
    );
    let err = p.status.hardware.unwrap().last_error.unwrap();
    assert!(err.chars().count() <= MAX_DETAIL_CHARS + 1);
}

#[test]
fn details_cannot_break_a_line_or_drive_a_terminal() {
    let p = plan(
        ProbeOutcome::Unreachable {
            detail: "refused\n\u{1b}[2J\u{202e}".into(),
        },
        None,
        at(0),
    );
    let kc = cond(&p.status, KUBECONFIG_VALID).message.clone();
    let err = p.status.hardware.unwrap().last_error.unwrap();
    for shown in [kc, err] {
        assert!(!shown.contains(['\n', '\u{1b}', '\u{202e}']), "{shown:?}");
        assert!(shown.contains("refused \u{fffd}[2J\u{fffd}"), "{shown:?}");
    }
}

#[test]
fn result_labels_for_metrics() {
    let labels: Vec<&str> = [
        ProbeOutcome::SecretMissing,
        ProbeOutcome::KeyMissing,
        ProbeOutcome::Invalid(KubeconfigError::Empty),
        ProbeOutcome::Unauthorized {
            detail: String::new(),
        },
        unreachable(),
        reached(GpuCount::default()),
        ProbeOutcome::Reached {
            server_version: None,
            nodes: NodeListing::Forbidden {
                detail: String::new(),
            },
        },
        ProbeOutcome::Reached {
            server_version: None,
            nodes: NodeListing::Failed {
                detail: String::new(),
            },
        },
    ]
    .iter()
    .map(ProbeOutcome::result_label)
    .collect();
    assert_eq!(
        labels,
        [
            "Missing",
            "Missing",
            "Invalid",
            "Unauthorized",
            "Unreachable",
            "Discovered",
            "Forbidden",
            "DiscoveryFailed"
        ]
    );
}

/// Whatever a target says, discovery's status stays far below what the apiserver
/// accepts (1.5 MiB per object): the most models a cluster may have, each as long as a
/// label allows, and the longest detail of a failure.
#[test]
fn the_largest_status_a_target_can_cause_is_small() {
    use crate::gpus::{GpuTally, MAX_GPU_MODELS, MAX_MODEL_CHARS};
    use crate::node_page::NodeView;
    let mut tally = GpuTally::default();
    for i in 0..MAX_GPU_MODELS + 5 {
        let model = format!("{i:02}{}", "X".repeat(MAX_MODEL_CHARS - 2));
        tally.add(&NodeView::from(
            &node(&format!("n{i}")).nvidia(&model, 8).build(),
        ));
    }
    let counted = plan(reached(tally.finish()), None, at(0));
    let size = serde_json::to_string(&counted.status).unwrap().len();
    assert!(size < 8 * 1024, "{size} bytes");
    let failed = plan(
        ProbeOutcome::Reached {
            server_version: Some("v".repeat(100_000)),
            nodes: NodeListing::Failed {
                detail: "d".repeat(100_000),
            },
        },
        Some(&counted.status),
        at(60),
    );
    let size = serde_json::to_string(&failed.status).unwrap().len();
    assert!(size < 16 * 1024, "{size} bytes");
}

#[test]
fn the_kubernetes_version_is_kept_only_when_it_looks_like_one() {
    let counted = plan(reached(fleet()), None, at(0)).status;
    let hardware = counted.hardware.clone().unwrap();
    assert_eq!(hardware.kubernetes_version.as_deref(), Some("v1.34.1"));
    for junk in [
        "v1.34.1 \u{202e}evil".to_owned(),
        "v".repeat(100_000),
        "<html>".to_owned(),
    ] {
        let status = plan(
            ProbeOutcome::Reached {
                server_version: Some(junk.clone()),
                nodes: NodeListing::Counted(fleet()),
            },
            None,
            at(0),
        )
        .status;
        assert_eq!(
            status.hardware.unwrap().kubernetes_version,
            None,
            "{}",
            junk.len()
        );
    }
    // A failed probe keeps the version of the last count, with its GPUs.
    let failed = plan(unreachable(), Some(&counted), at(60)).status;
    assert_eq!(
        failed.hardware.unwrap().kubernetes_version.as_deref(),
        Some("v1.34.1")
    );
}

mod source;
