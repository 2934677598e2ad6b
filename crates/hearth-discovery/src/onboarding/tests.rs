use super::*;
use pretty_assertions::assert_eq;

fn pattern() -> SecretPattern {
    SecretPattern::new("kubeconfig-{cluster}").unwrap()
}

fn secret(name: &str) -> ObservedSecret {
    ObservedSecret {
        name: name.into(),
        uid: Some(format!("uid-{name}")),
        resource_version: Some("1".into()),
        owner: None,
    }
}

fn cluster(name: &str, secret: &str, auto: bool) -> ObservedCluster {
    ObservedCluster {
        name: name.into(),
        uid: Some(format!("uid-{name}")),
        auto_discovered: auto,
        kubeconfig_secret: Some(secret.into()),
        // What discovery records for a cluster it created.
        source_secret: auto.then(|| secret.into()),
        deleting: false,
        lock_holder: None,
        secret_missing_since: None,
        owner: None,
        spec_hardware: false,
    }
}

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_790_000_000 + second).unwrap()
}

const GRACE: Duration = Duration::from_secs(600);

fn plan_at(
    secrets: &[ObservedSecret],
    clusters: &[ObservedCluster],
    now: Timestamp,
) -> OnboardingPlan {
    plan_onboarding(
        secrets,
        clusters,
        &PlanSettings {
            pattern: &pattern(),
            secrets_namespace: "psap-secrets",
            namespace: "hearth",
            now,
            locked_grace: GRACE,
        },
    )
}

fn plan(secrets: &[ObservedSecret], clusters: &[ObservedCluster]) -> OnboardingPlan {
    plan_at(secrets, clusters, at(0))
}

fn problems(plan: &OnboardingPlan) -> Vec<(&str, SecretProblem)> {
    plan.warnings
        .iter()
        .map(|w| (w.secret.as_str(), w.problem))
        .collect()
}

#[test]
fn cluster_names_are_dns_labels() {
    for good in ["a", "a100", "gpu-cluster-1", "0abc", &"a".repeat(63)] {
        assert!(is_valid_cluster_name(good), "{good}");
    }
    for bad in [
        "",
        "-a",
        "a-",
        "A100",
        "a_b",
        "a.b",
        "a b",
        "é",
        &"a".repeat(64),
    ] {
        assert!(!is_valid_cluster_name(bad), "{bad}");
    }
}

#[test]
fn a_matching_secret_yields_a_cluster_with_its_owner() {
    let mut s = secret("kubeconfig-a100");
    s.owner = Some("alice".into());
    let p = plan(&[s, secret("kubeconfig-b")], &[]);
    assert_eq!(
        p.create,
        [
            NewCluster {
                name: "a100".into(),
                secret: "kubeconfig-a100".into(),
                secret_uid: Some("uid-kubeconfig-a100".into()),
                owner: Some("alice".into()),
            },
            NewCluster {
                name: "b".into(),
                secret: "kubeconfig-b".into(),
                secret_uid: Some("uid-kubeconfig-b".into()),
                owner: None,
            },
        ]
    );
    assert!(p.delete.is_empty() && p.warnings.is_empty());
}

#[test]
fn an_existing_cluster_is_never_touched() {
    // Hand-made, auto-discovered, or even pointing at another Secret: no create, no
    // update; only a warning when the Secret would otherwise be silently unused.
    let secrets = [secret("kubeconfig-a"), secret("kubeconfig-b")];
    let clusters = [
        cluster("a", "kubeconfig-a", false),
        cluster("b", "some-other-secret", false),
    ];
    let p = plan(&secrets, &clusters);
    assert!(p.create.is_empty() && p.delete.is_empty());
    assert_eq!(
        problems(&p),
        [("kubeconfig-b", SecretProblem::ClusterNameTaken)]
    );
    assert_eq!(
        p.warnings[0].message,
        "FournosCluster hearth/b already exists and uses Secret some-other-secret: Secret \
         psap-secrets/kubeconfig-b is not used by any cluster. Point the cluster's \
         spec.kubeconfigSecret at it, or remove the label"
    );
}

#[test]
fn a_cluster_being_deleted_is_left_to_finish() {
    let mut gone = cluster("a", "kubeconfig-a", true);
    gone.deleting = true;
    let p = plan(&[secret("kubeconfig-a")], &[gone.clone()]);
    assert_eq!(p, OnboardingPlan::default());
    // Once it is gone, the next sweep creates it again.
    let p = plan(&[secret("kubeconfig-a")], &[]);
    assert_eq!(p.create.len(), 1);
}

#[test]
fn secrets_that_do_not_match_get_a_warning_and_nothing_else() {
    let p = plan(
        &[
            secret("my-cluster-creds"),
            secret("kubeconfig-Bad_Name"),
            secret("kubeconfig-"),
        ],
        &[],
    );
    assert!(p.create.is_empty() && p.delete.is_empty());
    assert_eq!(
        problems(&p),
        [
            ("kubeconfig-", SecretProblem::NameMismatch),
            ("kubeconfig-Bad_Name", SecretProblem::InvalidClusterName),
            ("my-cluster-creds", SecretProblem::NameMismatch),
        ]
    );
    assert_eq!(
        p.warnings[2].message,
        "Secret psap-secrets/my-cluster-creds is labeled fournos.dev/cluster-kubeconfig=true but its \
         name does not match the pattern kubeconfig-{cluster}: no FournosCluster is created for it. \
         Rename it to kubeconfig-{cluster} or remove the label"
    );
    assert!(
        p.warnings[1].message.starts_with(
            "Secret psap-secrets/kubeconfig-Bad_Name names cluster Bad_Name, which is not a valid"
        ),
        "{}",
        p.warnings[1].message
    );
    assert_eq!(
        p.warnings[1].uid.as_deref(),
        Some("uid-kubeconfig-Bad_Name")
    );
    assert_eq!(p.warnings[1].resource_version.as_deref(), Some("1"));
}

#[test]
fn a_secret_a_cluster_uses_is_not_warned_about_its_name() {
    let clusters = [
        cluster("hand", "hand-made-creds", false),
        cluster("other", "kubeconfig-Bad_Name", false),
    ];
    let p = plan(
        &[secret("hand-made-creds"), secret("kubeconfig-Bad_Name")],
        &clusters,
    );
    assert_eq!(p, OnboardingPlan::default());
}

#[test]
fn odd_names_are_quoted_and_bounded() {
    let long = format!("kubeconfig-{}\n", "x".repeat(200));
    let p = plan(&[secret(&long)], &[]);
    let message = &p.warnings[0].message;
    assert!(!message.contains('\n'), "{message}");
    assert!(
        message.contains("\\n") || message.contains('…'),
        "{message}"
    );
    assert!(message.len() < 600, "{message}");
}

#[test]
fn auto_discovered_clusters_without_their_secret_are_offboarded() {
    let clusters = [
        cluster("kept", "kubeconfig-kept", true),
        cluster("gone", "kubeconfig-gone", true),
        cluster("hand-made", "kubeconfig-hand-made", false),
    ];
    let p = plan(&[secret("kubeconfig-kept")], &clusters);
    assert_eq!(
        p.delete,
        [Offboard {
            name: "gone".into(),
            uid: Some("uid-gone".into()),
            secret: "kubeconfig-gone".into(),
        }]
    );
    assert!(p.create.is_empty() && p.warnings.is_empty());
}

#[test]
fn the_secret_a_cluster_was_created_from_is_what_keeps_it() {
    // A person pointed a cluster created from kubeconfig-a at another Secret (or at
    // none): what the spec names neither keeps nor condemns it.
    let mut edited = cluster("a", "kubeconfig-a", true);
    edited.kubeconfig_secret = Some("no-such-secret".into());
    let p = plan(&[secret("kubeconfig-a")], std::slice::from_ref(&edited));
    assert_eq!(p, OnboardingPlan::default(), "no delete, and no warning");
    edited.kubeconfig_secret = Some("kubeconfig-shared".into());
    let p = plan(&[secret("kubeconfig-shared")], &[edited]);
    assert_eq!(p.delete.len(), 1, "its own Secret is gone");
}

#[test]
fn labels_neither_condemn_nor_keep() {
    // Labeled auto-discovered by a person, no record: never deleted.
    let mut labeled = cluster("h", "kubeconfig-h", false);
    labeled.auto_discovered = true;
    assert_eq!(plan(&[], &[labeled]), OnboardingPlan::default());
    // The label taken off a recorded cluster: its Secret still offboards it.
    let mut unlabeled = cluster("a", "kubeconfig-a", true);
    unlabeled.auto_discovered = false;
    assert!(
        plan(&[secret("kubeconfig-a")], std::slice::from_ref(&unlabeled))
            .delete
            .is_empty()
    );
    assert_eq!(plan(&[], &[unlabeled]).delete.len(), 1);
}

#[test]
fn a_recorded_secret_the_pattern_no_longer_names_offboards() {
    let mut c = cluster("a", "kubeconfig-a", true);
    c.source_secret = Some("kc-a".into());
    c.kubeconfig_secret = Some("kc-a".into());
    let p = plan(&[secret("kc-a")], &[c]);
    assert_eq!(p.delete.len(), 1);
}

#[test]
fn unreadable_and_deleting_clusters_are_never_deleted() {
    let mut unreadable = cluster("x", "kubeconfig-x", true);
    unreadable.kubeconfig_secret = None;
    let mut deleting = cluster("y", "kubeconfig-y", true);
    deleting.deleting = true;
    let p = plan(&[], &[unreadable, deleting]);
    assert_eq!(p, OnboardingPlan::default());
}

#[test]
fn an_unreadable_cluster_still_blocks_creation() {
    let mut unreadable = cluster("x", "kubeconfig-x", false);
    unreadable.kubeconfig_secret = None;
    let p = plan(&[secret("kubeconfig-x")], &[unreadable]);
    assert_eq!(p, OnboardingPlan::default());
}

#[test]
fn owner_annotation_is_trimmed() {
    let annotations = |v: &str| BTreeMap::from([(OWNER_ANNOTATION.to_owned(), v.to_owned())]);
    assert_eq!(owner_from(Some(&annotations(" bob "))), Some("bob".into()));
    assert_eq!(owner_from(Some(&annotations("  "))), None);
    assert_eq!(owner_from(None), None);
}

fn locked(mut c: ObservedCluster, since: Option<i64>) -> ObservedCluster {
    c.lock_holder = Some("alice".into());
    c.secret_missing_since = since.map(at);
    c
}

#[test]
fn a_locked_cluster_outlives_its_secret_for_the_grace_period() {
    let c = cluster("a", "kubeconfig-a", true);
    // The reconcile has not recorded the loss yet: held, with nothing to say yet.
    let p = plan(&[], &[locked(c.clone(), None)]);
    assert!(p.delete.is_empty());
    assert_eq!(p.held_back.len(), 1);
    assert_eq!(p.held_back[0].until, None);

    let p = plan_at(&[], &[locked(c.clone(), Some(0))], at(599));
    assert!(p.delete.is_empty(), "{p:?}");
    assert_eq!(
        p.held_back,
        [HeldBack {
            name: "a".into(),
            uid: Some("uid-a".into()),
            secret: "kubeconfig-a".into(),
            until: Some(at(600)),
            message: held_back_message("psap-secrets/kubeconfig-a", "alice", at(600)),
        }]
    );
    assert_eq!(
        p.held_back[0].message,
        "Secret psap-secrets/kubeconfig-a does not exist or is not labeled \
         fournos.dev/cluster-kubeconfig=true, but this auto-discovered FournosCluster is locked \
         by alice: it will be offboarded (deleted, with its lock) at 2026-09-21T14:23:20Z unless \
         the Secret returns. To keep it, create the Secret again (labeled, same name); to \
         offboard it now, unlock it (clear spec.owner)"
    );

    let p = plan_at(&[], &[locked(c.clone(), Some(0))], at(600));
    assert!(p.held_back.is_empty());
    assert_eq!(p.delete.len(), 1);

    // The Secret is back: nothing to do, whatever status still says.
    let p = plan_at(
        &[secret("kubeconfig-a")],
        &[locked(c.clone(), Some(0))],
        at(9_999),
    );
    assert_eq!(p, OnboardingPlan::default());

    // Unlocked meanwhile: offboarded at once.
    let p = plan_at(&[], &[cluster("a", "kubeconfig-a", true)], at(1));
    assert_eq!(p.delete.len(), 1);
    assert!(p.held_back.is_empty());

    // A hand-made cluster is never deleted, locked or not.
    let p = plan_at(
        &[],
        &[locked(cluster("h", "kubeconfig-h", false), Some(0))],
        at(9_999),
    );
    assert_eq!(p, OnboardingPlan::default());
}

#[test]
fn a_zero_grace_offboards_a_locked_cluster_once_the_loss_is_recorded() {
    let c = locked(cluster("a", "kubeconfig-a", true), Some(5));
    let p = plan_onboarding(
        &[],
        &[c],
        &PlanSettings {
            pattern: &pattern(),
            secrets_namespace: "psap-secrets",
            namespace: "hearth",
            now: at(5),
            locked_grace: Duration::ZERO,
        },
    );
    assert_eq!(p.delete.len(), 1);
}

#[test]
fn a_cluster_hearth_did_not_create_is_named_and_not_adopted() {
    let mut squat = cluster("a", "kubeconfig-a", false);
    squat.owner = Some("mallory".into());
    squat.spec_hardware = true;
    let mut s = secret("kubeconfig-a");
    s.owner = Some("alice".into());
    let p = plan(&[s.clone()], &[squat.clone()]);
    assert!(p.create.is_empty() && p.delete.is_empty() && p.warnings.is_empty());
    assert_eq!(
        p.not_adopted,
        [NotAdopted {
            cluster: "a".into(),
            cluster_uid: Some("uid-a".into()),
            secret: "kubeconfig-a".into(),
            secret_uid: Some("uid-kubeconfig-a".into()),
            message: "FournosCluster hearth/a was not created from Secret \
                      psap-secrets/kubeconfig-a (it is not labeled \
                      fournos.dev/auto-discovered=true): its spec.owner (mallory) and \
                      spec.hardware were set by whoever created it, not taken from the \
                      Secret; the Secret's fournos.dev/owner (alice) is not applied. \
                      Discovery probes the target with the Secret, as the cluster's \
                      spec.kubeconfigSecret asks, and never deletes the cluster. If the \
                      cluster is not meant to be, delete it and discovery creates it from \
                      the Secret; if it is, label it fournos.dev/auto-discovered=true"
                .into(),
        }]
    );

    squat.owner = None;
    squat.spec_hardware = false;
    let p = plan(&[secret("kubeconfig-a")], &[squat.clone()]);
    assert!(
        p.not_adopted[0]
            .message
            .contains("its spec.owner (none) was set by whoever created it"),
        "{}",
        p.not_adopted[0].message
    );

    // Created by Hearth (labeled, or recorded and since unlabeled), being deleted, or
    // naming another Secret (ClusterNameTaken): no such warning.
    let ours = cluster("a", "kubeconfig-a", true);
    let mut unlabeled = ours.clone();
    unlabeled.auto_discovered = false;
    let mut deleting = cluster("a", "kubeconfig-a", false);
    deleting.deleting = true;
    let other = cluster("a", "other", false);
    for c in [ours, unlabeled, deleting, other] {
        assert!(plan(&[secret("kubeconfig-a")], &[c]).not_adopted.is_empty());
    }
}
