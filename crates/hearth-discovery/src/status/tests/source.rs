//! Where a cluster came from: the Secret gone, a held-back offboarding, hand edits.

use super::*;
use pretty_assertions::assert_eq;

#[test]
fn the_time_a_secret_went_is_recorded_once_and_cleared_when_it_returns() {
    let valid = plan(reached(fleet()), None, at(0)).status;
    assert_eq!(valid.secret_missing_since, None);

    // Recorded in whole seconds, as the API keeps it, so the deadline read back later is
    // the one announced now.
    let moment = at(300) + jiff::SignedDuration::from_millis(700);
    let gone = plan(ProbeOutcome::SecretMissing, Some(&valid), moment).status;
    assert_eq!(gone.secret_missing_since, Some(Time(at(300))));
    // Still gone later (or after a restart, which reads it back from status): unchanged.
    let still = plan(ProbeOutcome::SecretMissing, Some(&gone), at(600));
    assert_eq!(still.status.secret_missing_since, Some(Time(at(300))));

    // A Secret without the key is there: not gone.
    let keyless = plan(ProbeOutcome::KeyMissing, Some(&gone), at(900)).status;
    assert_eq!(keyless.secret_missing_since, None);
    let back = plan(reached(fleet()), Some(&gone), at(900)).status;
    assert_eq!(back.secret_missing_since, None);
    assert_eq!(diff_status(Some(&gone), &back), StatusDiff::Changed);
}

/// A probe at 300s that finds the Secret of a valid cluster gone, while alice's lock holds
/// its offboarding back for 600s.
fn held_back_by_alice() -> Probe {
    let valid = plan(reached(fleet()), None, at(0)).status;
    let mut probe = Probe::new(ProbeOutcome::SecretMissing, Some(&valid), at(300));
    probe.hold = Some(OffboardHold {
        holder: "alice",
        grace: Duration::from_secs(600),
    });
    probe
}

#[test]
fn a_locked_cluster_says_when_it_will_be_offboarded() {
    let probe = held_back_by_alice();
    let p = probe.plan();
    let kc = cond(&p.status, KUBECONFIG_VALID);
    assert_eq!(state_of(kc), ("False", "Missing"));
    assert_eq!(
        kc.message,
        crate::onboarding::held_back_message(SECRET, "alice", at(900))
    );
    assert!(kc.message.contains("locked by alice"), "{}", kc.message);
    assert_eq!(event_reasons(&p), ["KubeconfigMissing"]);
    assert_eq!(p.events[0].note, kc.message);

    // The next probe says the same: the deadline counts from the first loss.
    let mut again = Probe::new(ProbeOutcome::SecretMissing, Some(&p.status), at(600));
    again.hold = probe.hold;
    assert_eq!(
        cond(&again.plan().status, KUBECONFIG_VALID).message,
        kc.message
    );
}

#[test]
fn a_hand_edit_of_the_spec_takes_the_reason_and_warns_once() {
    use crate::source::SourceProblem;
    let valid = plan(reached(fleet()), None, at(0)).status;
    assert_eq!(valid.source_secret, Some(source_record()));
    let mut probe = Probe::new(ProbeOutcome::SecretMissing, Some(&valid), at(60));
    probe.source = Some(Source {
        record: Some(source_record()),
        gone: false,
        problem: Some(SourceProblem::SecretChanged {
            spec: "nope".into(),
            source: "kubeconfig-a".into(),
        }),
    });
    let p = probe.plan();
    let kc = cond(&p.status, KUBECONFIG_VALID);
    assert_eq!(
        state_of(kc),
        ("False", "KubeconfigSecretChanged"),
        "the status follows kubeconfigStatus"
    );
    assert!(
        kc.message
            .starts_with("spec.kubeconfigSecret was changed to \"nope\"")
            && kc
                .message
                .contains("Meanwhile: Secret psap-secrets/kubeconfig-a does not exist"),
        "{}",
        kc.message
    );
    assert_eq!(
        p.status.secret_missing_since, None,
        "the spec's Secret is missing, the one the cluster came from is not"
    );
    assert_eq!(p.status.source_secret, Some(source_record()));
    assert_eq!(
        event_reasons(&p),
        ["KubeconfigMissing", "KubeconfigSecretChanged"]
    );
    // The next probe, same situation: no new Event.
    let mut again = Probe::new(ProbeOutcome::SecretMissing, Some(&p.status), at(120));
    again.source = probe.source.clone();
    assert!(again.plan().events.is_empty());
    // Set back: the reason goes with it.
    let back = plan(reached(fleet()), Some(&p.status), at(180));
    assert_eq!(cond(&back.status, KUBECONFIG_VALID).reason, "Valid");
}

#[test]
fn a_held_back_offboarding_says_so_before_a_hand_edit() {
    use crate::source::SourceProblem;
    let mut probe = held_back_by_alice();
    probe.source = Some(Source {
        record: Some(source_record()),
        gone: true,
        problem: Some(SourceProblem::LabelRemoved {
            source: "kubeconfig-a".into(),
        }),
    });
    let kc = cond(&probe.plan().status, KUBECONFIG_VALID).clone();
    assert_eq!(kc.reason, "Missing");
    assert!(kc.message.contains("locked by alice"), "{}", kc.message);
}

#[test]
fn a_hand_made_cluster_records_no_source_and_no_missing_time() {
    let mut probe = Probe::new(ProbeOutcome::SecretMissing, None, at(0));
    probe.source = Some(Source {
        record: None,
        gone: false,
        problem: None,
    });
    let status = probe.plan().status;
    assert_eq!(
        (status.source_secret, status.secret_missing_since),
        (None, None)
    );
}
