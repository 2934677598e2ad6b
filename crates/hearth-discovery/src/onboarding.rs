//! Onboarding and offboarding, planned: from the labeled kubeconfig Secrets and the
//! FournosClusters as the watch caches show them, which clusters to create, which to
//! delete and which Secrets deserve a warning. Pure; the sweep applies the plan.
//!
//! Rules (DESIGN.md, hearth-discovery):
//! - A labeled Secret whose name matches the pattern yields a FournosCluster named after
//!   the `{cluster}` part, unless one by that name exists: create only, a person's spec
//!   is never overwritten.
//! - A labeled Secret whose name does not match, or whose `{cluster}` part is not a
//!   valid cluster name, gets a Warning Event and nothing else.
//! - A FournosCluster labeled `fournos.dev/auto-discovered=true` whose Secret is gone
//!   (deleted, or unlabeled so the watch no longer sees it) is deleted. Hand-made
//!   clusters are never deleted, and neither is a cluster that cannot be read.

use std::collections::{BTreeMap, BTreeSet};

use hearth_api::names::{AUTO_DISCOVERED_LABEL, KUBECONFIG_SECRET_SELECTOR, OWNER_ANNOTATION};

use crate::config::CLUSTER_PLACEHOLDER;

/// Longest cluster name: it becomes a label value (`fournos.dev/cluster: <cluster>`) on
/// the cluster's ResourceFlavor.
pub const MAX_CLUSTER_NAME: usize = 63;
/// Longest name quoted in a message; names are user input.
const MAX_QUOTED: usize = 80;

/// The Secret name pattern, split around `{cluster}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretPattern {
    pattern: String,
    prefix: String,
    suffix: String,
}

impl SecretPattern {
    /// `None` unless `pattern` holds `{cluster}` exactly once.
    pub fn new(pattern: &str) -> Option<Self> {
        if pattern.matches(CLUSTER_PLACEHOLDER).count() != 1 {
            return None;
        }
        let (prefix, suffix) = pattern.split_once(CLUSTER_PLACEHOLDER)?;
        Some(Self {
            pattern: pattern.to_owned(),
            prefix: prefix.to_owned(),
            suffix: suffix.to_owned(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// The `{cluster}` part of a Secret name, if the name matches (and the part is not
    /// empty). Whether that part is a valid cluster name is another question.
    pub fn cluster_name<'a>(&self, secret: &'a str) -> Option<&'a str> {
        secret
            .strip_prefix(&self.prefix)?
            .strip_suffix(&self.suffix)
            .filter(|c| !c.is_empty())
    }

    /// The name of `cluster`'s Secret.
    pub fn secret_name(&self, cluster: &str) -> String {
        format!("{}{cluster}{}", self.prefix, self.suffix)
    }
}

/// Whether `name` can be a cluster name: a DNS-1123 label (lower-case letters, digits
/// and `-`, starting and ending with a letter or digit, at most 63 characters), as a
/// FournosCluster, ResourceFlavor and label value all accept it.
pub fn is_valid_cluster_name(name: &str) -> bool {
    name.len() <= MAX_CLUSTER_NAME && hearth_api::names::is_dns_label(name)
}

/// A labeled kubeconfig Secret, as far as onboarding cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedSecret {
    pub name: String,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// The `fournos.dev/owner` annotation, trimmed, if not empty.
    pub owner: Option<String>,
}

/// A FournosCluster, as far as onboarding cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedCluster {
    pub name: String,
    pub uid: Option<String>,
    /// Labeled `fournos.dev/auto-discovered=true`.
    pub auto_discovered: bool,
    /// `spec.kubeconfigSecret`; `None` when the object does not decode.
    pub kubeconfig_secret: Option<String>,
    /// Has a deletion timestamp.
    pub deleting: bool,
}

impl ObservedCluster {
    /// Whether `labels` mark a cluster as created from a Secret.
    pub fn is_auto_discovered(labels: Option<&BTreeMap<String, String>>) -> bool {
        labels
            .and_then(|l| l.get(AUTO_DISCOVERED_LABEL))
            .is_some_and(|v| v == "true")
    }
}

/// A FournosCluster to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCluster {
    pub name: String,
    pub secret: String,
    pub owner: Option<String>,
}

/// A FournosCluster to delete: its Secret is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offboard {
    pub name: String,
    /// Delete precondition: only this incarnation of the cluster.
    pub uid: Option<String>,
    pub secret: String,
}

/// Why a Secret gets a Warning Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SecretProblem {
    /// The name does not match the pattern.
    NameMismatch,
    /// The `{cluster}` part is not a valid cluster name.
    InvalidClusterName,
    /// A FournosCluster by that name exists and uses another Secret.
    ClusterNameTaken,
}

impl SecretProblem {
    /// Event reason.
    pub fn reason(self) -> &'static str {
        match self {
            Self::NameMismatch => "SecretNameMismatch",
            Self::InvalidClusterName => "InvalidClusterName",
            Self::ClusterNameTaken => "ClusterNameTaken",
        }
    }
}

/// A Warning Event for a Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretWarning {
    pub secret: String,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub problem: SecretProblem,
    pub message: String,
}

/// What the sweep does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OnboardingPlan {
    pub create: Vec<NewCluster>,
    pub delete: Vec<Offboard>,
    pub warnings: Vec<SecretWarning>,
}

/// Plans onboarding and offboarding from the whole observed world. Deterministic:
/// everything comes out sorted by name.
pub fn plan_onboarding(
    secrets: &[ObservedSecret],
    clusters: &[ObservedCluster],
    pattern: &SecretPattern,
    secrets_namespace: &str,
    namespace: &str,
) -> OnboardingPlan {
    let by_name: BTreeMap<&str, &ObservedCluster> =
        clusters.iter().map(|c| (c.name.as_str(), c)).collect();
    // A Secret a cluster names is in use, whatever its name: no warning about its name.
    let in_use: BTreeSet<&str> = clusters
        .iter()
        .filter_map(|c| c.kubeconfig_secret.as_deref())
        .collect();
    let mut sorted: Vec<&ObservedSecret> = secrets.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));

    let mut plan = OnboardingPlan::default();
    for secret in &sorted {
        let warn = |problem, message| SecretWarning {
            secret: secret.name.clone(),
            uid: secret.uid.clone(),
            resource_version: secret.resource_version.clone(),
            problem,
            message,
        };
        let shown = format!("{secrets_namespace}/{}", quote(&secret.name));
        let cluster = pattern.cluster_name(&secret.name);
        if in_use.contains(secret.name.as_str()) && !cluster.is_some_and(is_valid_cluster_name) {
            continue;
        }
        let Some(cluster) = cluster else {
            plan.warnings.push(warn(
                SecretProblem::NameMismatch,
                format!(
                    "Secret {shown} is labeled {KUBECONFIG_SECRET_SELECTOR} but its name does not match the \
                     pattern {}: no FournosCluster is created for it. Rename it to {} or remove the label",
                    pattern.as_str(),
                    pattern.as_str()
                ),
            ));
            continue;
        };
        if !is_valid_cluster_name(cluster) {
            plan.warnings.push(warn(
                SecretProblem::InvalidClusterName,
                format!(
                    "Secret {shown} names cluster {}, which is not a valid cluster name (at most \
                     {MAX_CLUSTER_NAME} lower-case letters, digits and '-', starting and ending with a \
                     letter or digit): no FournosCluster is created for it. Rename the Secret",
                    quote(cluster)
                ),
            ));
            continue;
        }
        match by_name.get(cluster) {
            None => plan.create.push(NewCluster {
                name: cluster.to_owned(),
                secret: secret.name.clone(),
                owner: secret.owner.clone(),
            }),
            Some(existing) => {
                if let Some(other) = &existing.kubeconfig_secret
                    && *other != secret.name
                    && !existing.deleting
                {
                    plan.warnings.push(warn(
                        SecretProblem::ClusterNameTaken,
                        format!(
                            "FournosCluster {namespace}/{cluster} already exists and uses Secret {}: \
                             Secret {shown} is not used by any cluster. Point the cluster's \
                             spec.kubeconfigSecret at it, or remove the label",
                            quote(other)
                        ),
                    ));
                }
            }
        }
    }

    let present: BTreeSet<&str> = secrets.iter().map(|s| s.name.as_str()).collect();
    let mut sorted: Vec<&ObservedCluster> = clusters.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    for cluster in sorted {
        let Some(secret) = &cluster.kubeconfig_secret else {
            continue;
        };
        if cluster.auto_discovered && !cluster.deleting && !present.contains(secret.as_str()) {
            plan.delete.push(Offboard {
                name: cluster.name.clone(),
                uid: cluster.uid.clone(),
                secret: secret.clone(),
            });
        }
    }
    plan
}

/// The `fournos.dev/owner` annotation of a Secret, trimmed, if not empty.
pub fn owner_from(annotations: Option<&BTreeMap<String, String>>) -> Option<String> {
    annotations
        .and_then(|a| a.get(OWNER_ANNOTATION))
        .map(|o| o.trim())
        .filter(|o| !o.is_empty())
        .map(str::to_owned)
}

/// A name as it appears in a message: bare when it is a plain name, else quoted,
/// escaped and bounded.
fn quote(name: &str) -> String {
    let plain = !name.is_empty()
        && name.len() <= MAX_QUOTED
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    if plain {
        return name.to_owned();
    }
    let mut shown: String = name.chars().take(MAX_QUOTED).collect();
    if shown.len() < name.len() {
        shown.push('…');
    }
    format!("{shown:?}")
}

#[cfg(test)]
mod tests {
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
            deleting: false,
        }
    }

    fn plan(secrets: &[ObservedSecret], clusters: &[ObservedCluster]) -> OnboardingPlan {
        plan_onboarding(secrets, clusters, &pattern(), "psap-secrets", "hearth")
    }

    fn problems(plan: &OnboardingPlan) -> Vec<(&str, SecretProblem)> {
        plan.warnings
            .iter()
            .map(|w| (w.secret.as_str(), w.problem))
            .collect()
    }

    #[test]
    fn patterns_split_around_the_placeholder() {
        let p = pattern();
        assert_eq!(p.cluster_name("kubeconfig-a100"), Some("a100"));
        assert_eq!(p.cluster_name("kubeconfig-"), None);
        assert_eq!(p.cluster_name("kubeconfig"), None);
        assert_eq!(p.cluster_name("other-a100"), None);
        assert_eq!(p.secret_name("a100"), "kubeconfig-a100");
        let p = SecretPattern::new("{cluster}-kubeconfig").unwrap();
        assert_eq!(p.cluster_name("a100-kubeconfig"), Some("a100"));
        assert_eq!(p.cluster_name("kubeconfig-a100"), None);
        let p = SecretPattern::new("kc-{cluster}-v1").unwrap();
        assert_eq!(p.cluster_name("kc-x-v1"), Some("x"));
        assert_eq!(p.cluster_name("kc--v1"), None);
        assert_eq!(p.secret_name("x"), "kc-x-v1");
        assert!(SecretPattern::new("kubeconfig").is_none());
        assert!(SecretPattern::new("{cluster}{cluster}").is_none());
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
                    owner: Some("alice".into()),
                },
                NewCluster {
                    name: "b".into(),
                    secret: "kubeconfig-b".into(),
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
            p.warnings[1]
                .message
                .starts_with("Secret psap-secrets/kubeconfig-Bad_Name names cluster Bad_Name, which is not a valid"),
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
    fn the_secret_a_cluster_names_is_what_keeps_it() {
        // A person pointed an auto-discovered cluster at another labeled Secret: it
        // stays as long as that Secret does, whatever its own name's Secret does.
        let clusters = [cluster("a", "kubeconfig-shared", true)];
        let p = plan(&[secret("kubeconfig-shared")], &clusters);
        assert!(p.delete.is_empty());
        assert_eq!(
            p.create.len(),
            1,
            "kubeconfig-shared onboards cluster `shared`"
        );
        let p = plan(&[secret("kubeconfig-a")], &clusters);
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

    #[test]
    fn auto_discovered_label_must_be_true() {
        let labels = |v: &str| BTreeMap::from([(AUTO_DISCOVERED_LABEL.to_owned(), v.to_owned())]);
        assert!(ObservedCluster::is_auto_discovered(Some(&labels("true"))));
        assert!(!ObservedCluster::is_auto_discovered(Some(&labels("false"))));
        assert!(!ObservedCluster::is_auto_discovered(None));
    }
}
