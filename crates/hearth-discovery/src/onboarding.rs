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
//! - A FournosCluster whose recorded source Secret (`status.sourceSecret`, see
//!   [`crate::source`]) is gone (deleted, or unlabeled so the watch no longer sees it, or
//!   its name no longer the pattern's for the cluster) is deleted. Neither
//!   `spec.kubeconfigSecret` nor the `fournos.dev/auto-discovered` label decides it:
//!   anyone who may lock a cluster may edit those. Clusters without a record (made by
//!   hand) are never deleted, and neither is a cluster that cannot be read.
//! - Unless it is locked (`spec.owner` set, or `status.locked=true`): a Secret deleted
//!   and created again (a rotation done that way, a GitOps prune) must not drop a lock.
//!   Such a cluster is deleted only once the grace period has passed since discovery
//!   first found the Secret gone (`status.secretMissingSince`, written by the reconcile:
//!   stored, so a restart does not start the grace over), with a Warning Event and a
//!   `KubeconfigValid=False/Missing` message saying when, and how to offboard it now
//!   (unlock it). The Secret back within the grace: nothing happened.
//! - A labeled Secret whose FournosCluster exists already but was not created by Hearth
//!   (no `fournos.dev/auto-discovered=true`, no recorded source) is not adopted: see
//!   [`NotAdopted`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use hearth_api::names::{AUTO_DISCOVERED_LABEL, KUBECONFIG_SECRET_SELECTOR, OWNER_ANNOTATION};
use hearth_api::text::plain_or_quoted;
use jiff::{SignedDuration, Timestamp};

use crate::secret_pattern::SecretPattern;
use crate::source::source_kept;

/// Longest cluster name: it becomes a label value (`fournos.dev/cluster: <cluster>`) on
/// the cluster's ResourceFlavor.
pub const MAX_CLUSTER_NAME: usize = 63;
/// Longest name quoted in a message; names are user input.
const MAX_QUOTED: usize = 80;
/// What a name may hold besides ASCII letters and digits and still be shown bare.
const NAME_PUNCTUATION: &[char] = &['-', '.', '_'];

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
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObservedCluster {
    pub name: String,
    pub uid: Option<String>,
    /// Labeled `fournos.dev/auto-discovered=true`.
    pub auto_discovered: bool,
    /// `spec.kubeconfigSecret`; `None` when the object does not decode.
    pub kubeconfig_secret: Option<String>,
    /// `status.sourceSecret.name`: the Secret discovery created the cluster from.
    pub source_secret: Option<String>,
    /// Has a deletion timestamp.
    pub deleting: bool,
    /// Who holds its lock, if it is locked (see [`crate::cluster_cache::lock_holder`]).
    pub lock_holder: Option<String>,
    /// `status.secretMissingSince`.
    pub secret_missing_since: Option<Timestamp>,
    /// `spec.owner`.
    pub owner: Option<String>,
    /// `spec.hardware` is set (a legacy field a person can write).
    pub spec_hardware: bool,
}

/// A FournosCluster to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCluster {
    pub name: String,
    pub secret: String,
    /// The Secret's UID, recorded as the cluster's source.
    pub secret_uid: Option<String>,
    pub owner: Option<String>,
}

/// A FournosCluster to delete: the Secret it was created from is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offboard {
    pub name: String,
    /// Delete precondition: only this incarnation of the cluster.
    pub uid: Option<String>,
    pub secret: String,
}

/// An auto-discovered, locked FournosCluster whose Secret is gone, kept until `until`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldBack {
    pub name: String,
    pub uid: Option<String>,
    pub secret: String,
    /// `None` until the reconcile has recorded when the Secret went (the next sweep
    /// knows).
    pub until: Option<Timestamp>,
    /// For the Warning Event; the same words as the `KubeconfigValid` message.
    pub message: String,
}

/// Event reason of a held-back offboarding.
pub const OFFBOARDING_HELD_BACK: &str = "OffboardingHeldBack";
/// Event reason of a Secret whose cluster Hearth did not create.
pub const CLUSTER_NOT_FROM_SECRET: &str = "ClusterNotCreatedFromSecret";

/// A labeled Secret whose FournosCluster already exists, made by someone (a person, a
/// script, a squatter who was quicker) rather than by Hearth from the Secret.
///
/// What discovery does with such a cluster, precisely:
/// - It is **not adopted**: never labeled `fournos.dev/auto-discovered=true`, never
///   offboarded when the Secret goes, its spec never written. `spec.owner` and
///   `spec.hardware` stay whatever its creator set; neither is taken as the Secret's (the
///   Secret's `fournos.dev/owner` applies only to a cluster Hearth creates).
/// - Discovery probes the target with the Secret only because the cluster's own
///   `spec.kubeconfigSecret` names it and the Secret is meant for that cluster name (the
///   pattern, or `fournos.dev/allowed-clusters`), as for any hand-made cluster, and writes
///   what it finds to status, its own fields only. A cluster naming another Secret is
///   [`SecretProblem::ClusterNameTaken`] instead.
/// - Hearth cannot tell a squatter from a person who made the cluster by hand, so it
///   says so where both the cluster's and the Secret's people look: a Warning Event
///   ([`CLUSTER_NOT_FROM_SECRET`]) on the FournosCluster and on the Secret, naming the
///   cluster and its owner, once per cluster and Secret (and per discovery leader).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAdopted {
    pub cluster: String,
    pub cluster_uid: Option<String>,
    pub secret: String,
    pub secret_uid: Option<String>,
    pub message: String,
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
    /// Locked clusters whose Secret is gone, not deleted yet.
    pub held_back: Vec<HeldBack>,
    pub warnings: Vec<SecretWarning>,
    pub not_adopted: Vec<NotAdopted>,
}

/// What [`plan_onboarding`] plans with, besides the observed objects.
#[derive(Debug, Clone)]
pub struct PlanSettings<'a> {
    pub pattern: &'a SecretPattern,
    pub secrets_namespace: &'a str,
    pub namespace: &'a str,
    pub now: Timestamp,
    /// How long a locked cluster outlives its Secret.
    pub locked_grace: Duration,
}

/// When a locked cluster whose Secret went at `since` is offboarded.
pub fn offboard_at(since: Timestamp, grace: Duration) -> Timestamp {
    let grace = SignedDuration::try_from(grace).unwrap_or(SignedDuration::MAX);
    since.checked_add(grace).unwrap_or(Timestamp::MAX)
}

/// The words of a held-back offboarding, for the Warning Event and `KubeconfigValid`.
/// Stable while the situation is (no relative times), so it is written once.
pub fn held_back_message(secret: &str, holder: &str, at: Timestamp) -> String {
    format!(
        "Secret {secret} does not exist or is not labeled {KUBECONFIG_SECRET_SELECTOR}, but this \
         auto-discovered FournosCluster is locked by {}: it will be offboarded (deleted, with its \
         lock) at {} unless the Secret returns. To keep it, create the Secret again (labeled, \
         same name); to offboard it now, unlock it (clear spec.owner)",
        shown_name(holder),
        Timestamp::from_second(at.as_second()).unwrap_or(at)
    )
}

/// Plans onboarding and offboarding from the whole observed world. Deterministic:
/// everything comes out sorted by name.
pub fn plan_onboarding(
    secrets: &[ObservedSecret],
    clusters: &[ObservedCluster],
    settings: &PlanSettings<'_>,
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
    for secret in sorted {
        onboard_secret(secret, &by_name, &in_use, settings, &mut plan);
    }
    let present: BTreeSet<&str> = secrets.iter().map(|s| s.name.as_str()).collect();
    let mut sorted: Vec<&ObservedCluster> = clusters.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    for cluster in sorted {
        offboard_cluster(cluster, &present, settings, &mut plan);
    }
    plan
}

/// What one labeled Secret asks for: a new cluster, or a warning about it.
fn onboard_secret(
    secret: &ObservedSecret,
    by_name: &BTreeMap<&str, &ObservedCluster>,
    in_use: &BTreeSet<&str>,
    settings: &PlanSettings<'_>,
    plan: &mut OnboardingPlan,
) {
    let PlanSettings {
        pattern,
        secrets_namespace,
        ..
    } = *settings;
    let cluster = pattern.cluster_name(&secret.name);
    if in_use.contains(secret.name.as_str()) && !cluster.is_some_and(is_valid_cluster_name) {
        return;
    }
    let Some(cluster) = cluster else {
        plan.warnings.push(secret_warning(
            secret,
            SecretProblem::NameMismatch,
            format!(
                "Secret {} is labeled {KUBECONFIG_SECRET_SELECTOR} but its name does not match the \
                 pattern {}: no FournosCluster is created for it. Rename it to {} or remove the label",
                shown_secret(secrets_namespace, &secret.name),
                pattern.as_str(),
                pattern.as_str()
            ),
        ));
        return;
    };
    if !is_valid_cluster_name(cluster) {
        plan.warnings.push(secret_warning(
            secret,
            SecretProblem::InvalidClusterName,
            format!(
                "Secret {} names cluster {}, which is not a valid cluster name (at most \
                 {MAX_CLUSTER_NAME} lower-case letters, digits and '-', starting and ending with a \
                 letter or digit): no FournosCluster is created for it. Rename the Secret",
                shown_secret(secrets_namespace, &secret.name),
                shown_name(cluster)
            ),
        ));
        return;
    }
    match by_name.get(cluster) {
        None => plan.create.push(NewCluster {
            name: cluster.to_owned(),
            secret: secret.name.clone(),
            secret_uid: secret.uid.clone(),
            owner: secret.owner.clone(),
        }),
        Some(existing) => secret_of_existing(secret, existing, settings, plan),
    }
}

/// A Secret whose cluster exists: not adopted (the cluster was made by hand from it), or
/// in conflict with the Secret the cluster uses.
fn secret_of_existing(
    secret: &ObservedSecret,
    existing: &ObservedCluster,
    settings: &PlanSettings<'_>,
    plan: &mut OnboardingPlan,
) {
    let PlanSettings {
        secrets_namespace,
        namespace,
        ..
    } = *settings;
    let shown = || shown_secret(secrets_namespace, &secret.name);
    let created_from_it = existing.source_secret.as_deref() == Some(&secret.name);
    if existing.kubeconfig_secret.as_deref() == Some(secret.name.as_str())
        && !existing.auto_discovered
        && existing.source_secret.is_none()
        && !existing.deleting
    {
        plan.not_adopted.push(NotAdopted {
            cluster: existing.name.clone(),
            cluster_uid: existing.uid.clone(),
            secret: secret.name.clone(),
            secret_uid: secret.uid.clone(),
            message: not_adopted_message(existing, secret, &shown(), namespace),
        });
    }
    // A cluster made from this Secret whose spec a person changed says so
    // itself (`KubeconfigSecretChanged`); the Secret is still its own.
    if let Some(other) = &existing.kubeconfig_secret
        && *other != secret.name
        && !existing.deleting
        && !created_from_it
    {
        plan.warnings.push(secret_warning(
            secret,
            SecretProblem::ClusterNameTaken,
            format!(
                "FournosCluster {namespace}/{cluster} already exists and uses Secret {}: \
                 Secret {} is not used by any cluster. Point the cluster's \
                 spec.kubeconfigSecret at it, or remove the label",
                shown_name(other),
                shown(),
                cluster = existing.name,
            ),
        ));
    }
}

fn secret_warning(
    secret: &ObservedSecret,
    problem: SecretProblem,
    message: String,
) -> SecretWarning {
    SecretWarning {
        secret: secret.name.clone(),
        uid: secret.uid.clone(),
        resource_version: secret.resource_version.clone(),
        problem,
        message,
    }
}

/// A name someone else chose, for a message: bare when plain, quoted otherwise.
fn shown_name(name: &str) -> String {
    plain_or_quoted(name, MAX_QUOTED, NAME_PUNCTUATION)
}

/// `namespace/name` of a Secret, for a message. Only for a message: most sweeps write
/// none, and run on every change.
fn shown_secret(secrets_namespace: &str, name: &str) -> String {
    format!("{secrets_namespace}/{}", shown_name(name))
}

/// A cluster whose recorded source is gone: deleted, or held back while it is locked.
fn offboard_cluster(
    cluster: &ObservedCluster,
    present: &BTreeSet<&str>,
    settings: &PlanSettings<'_>,
    plan: &mut OnboardingPlan,
) {
    // Only a recorded source condemns; a cluster that does not decode never is.
    let (Some(secret), Some(_)) = (&cluster.source_secret, &cluster.kubeconfig_secret) else {
        return;
    };
    let kept = source_kept(
        secret,
        &cluster.name,
        settings.pattern,
        present.contains(secret.as_str()),
    );
    if cluster.deleting || kept {
        return;
    }
    let gone = Offboard {
        name: cluster.name.clone(),
        uid: cluster.uid.clone(),
        secret: secret.clone(),
    };
    let Some(holder) = &cluster.lock_holder else {
        plan.delete.push(gone);
        return;
    };
    let until = cluster
        .secret_missing_since
        .map(|since| offboard_at(since, settings.locked_grace));
    match until {
        Some(until) if until <= settings.now => plan.delete.push(gone),
        _ => plan.held_back.push(HeldBack {
            message: until
                .map(|at| {
                    held_back_message(
                        &shown_secret(settings.secrets_namespace, secret),
                        holder,
                        at,
                    )
                })
                .unwrap_or_default(),
            name: gone.name,
            uid: gone.uid,
            secret: gone.secret,
            until,
        }),
    }
}

fn not_adopted_message(
    cluster: &ObservedCluster,
    secret: &ObservedSecret,
    shown_secret: &str,
    namespace: &str,
) -> String {
    let owner = match &cluster.owner {
        Some(owner) => format!("its spec.owner ({})", shown_name(owner)),
        None => "its spec.owner (none)".to_owned(),
    };
    let (hardware, were) = if cluster.spec_hardware {
        (" and spec.hardware", "were")
    } else {
        ("", "was")
    };
    let annotation = match &secret.owner {
        Some(owner) => format!(
            "; the Secret's {OWNER_ANNOTATION} ({}) is not applied",
            shown_name(owner)
        ),
        None => String::new(),
    };
    format!(
        "FournosCluster {namespace}/{} was not created from Secret {shown_secret} (it is not labeled \
         {AUTO_DISCOVERED_LABEL}=true): {owner}{hardware} {were} set by whoever created it, not taken \
         from the Secret{annotation}. Discovery probes the target with the Secret, as the cluster's \
         spec.kubeconfigSecret asks, and never deletes the cluster. If the cluster is not meant to \
         be, delete it and discovery creates it from the Secret; if it is, label it \
         {AUTO_DISCOVERED_LABEL}=true",
        shown_name(&cluster.name)
    )
}

/// The `fournos.dev/owner` annotation of a Secret, trimmed, if not empty.
pub fn owner_from(annotations: Option<&BTreeMap<String, String>>) -> Option<String> {
    annotations
        .and_then(|a| a.get(OWNER_ANNOTATION))
        .map(|o| o.trim())
        .filter(|o| !o.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests;
