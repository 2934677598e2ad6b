//! The status a probe leads to: the plan step of discovery, a plain function from what
//! was observed and what status already says to the fields hearth-discovery owns.
//!
//! The result holds only discovery's fields (`kubeconfigStatus`, `hardware`,
//! `credentialsExpireAt`, `nextProbeAt`, `gpuSummary`, and the `KubeconfigValid` and
//! `GPUDiscovered` conditions), ready for server-side apply under discovery's field
//! manager; fields of other controllers are left out so they are never touched.
//!
//! Decisions:
//! - A transient failure (no answer from the target, or the node list failing midway)
//!   of a `Valid` cluster changes neither condition until `threshold` probes in a row
//!   have failed; only `hardware.consecutiveFailures`, `lastError` and `nextProbeAt`
//!   move, so a flapping network flaps neither quota nor conditions.
//! - Definite answers (Secret gone, kubeconfig refused, 401, RBAC forbids listing
//!   nodes) apply at once.
//! - When a probe fails, `hardware` keeps the last successful count (with its
//!   `lastDiscovery`): kueue-sync zeroes quota for a cluster that is not `Valid`, and
//!   people still see what the cluster had.
//! - Messages are stable while the situation is: no counters or relative times in
//!   them, so a repeated probe with the same result changes nothing but the
//!   timestamps [`diff_status`] ignores.
//! - `secretMissingSince` records when the Secret the cluster was created from
//!   (`sourceSecret`, see [`crate::source`]) was first found gone and keeps that time
//!   while it stays gone: the offboarding grace of a locked cluster counts from it (see
//!   [`crate::onboarding`]), across restarts. A locked cluster's `Missing` message says
//!   when it will be offboarded and how to do it now.
//! - A hand edit that disagrees with `sourceSecret` (see [`crate::source`]) takes the
//!   `KubeconfigValid` reason, with a Warning Event of that reason; the condition's
//!   status still follows `kubeconfigStatus`, and the message goes on with what the
//!   probe found.

use std::time::Duration;

use hearth_api::cluster::is_version_text;
use hearth_api::conditions::{DesiredCondition, Reason, find, next_condition, renewed};
use hearth_api::names::KUBECONFIG_SECRET_SELECTOR;
use hearth_api::names::condition_types::{GPU_DISCOVERED, KUBECONFIG_VALID};
use hearth_api::{DiscoveryStatus, FournosClusterStatus, Hardware, KubeconfigStatus};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::credentials::{Expiry, ExpiryState, expiry_state, expiry_warning};
use crate::gpus::{GpuCount, gpu_summary};
use crate::kubeconfig::KubeconfigError;
use crate::onboarding::{held_back_message, offboard_at};
use crate::schedule::{ProbeVerdict, next_kubeconfig_status, next_probe_at, within_threshold};
use crate::source::{Source, is_source_reason};
use hearth_api::reasons::{GpuDiscoveredReason as G, KubeconfigValidReason as K};
use hearth_api::text::bounded;
use hearth_runtime::events::Event;

/// Longest detail (an error text from the probe) carried into status.
const MAX_DETAIL_CHARS: usize = 512;

/// The reason of the Event for a change of the GPU count (an Event only, no condition).
const GPUS_CHANGED: &str = "GPUsChanged";

/// What one probe of a cluster found.
#[derive(Debug, Clone, PartialEq)]
pub enum ProbeOutcome {
    /// The Secret named by `spec.kubeconfigSecret` does not exist (or lacks the
    /// kubeconfig label, so discovery does not see it).
    SecretMissing,
    /// The Secret exists without a `kubeconfig` key.
    KeyMissing,
    /// The kubeconfig was refused before any connection.
    Invalid(KubeconfigError),
    /// The target answered 401. `detail` must hold no credential.
    Unauthorized { detail: String },
    /// No answer: network, TLS, timeout. `detail` must hold no credential.
    Unreachable { detail: String },
    /// The target answered; then its nodes were listed (or not).
    Reached {
        /// `gitVersion` from `/version`, when known.
        server_version: Option<String>,
        nodes: NodeListing,
    },
}

/// How listing the target's nodes went.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeListing {
    Counted(GpuCount),
    /// 403: the credentials may not list nodes.
    Forbidden {
        detail: String,
    },
    /// Anything else (timeout midway, 5xx, malformed page).
    Failed {
        detail: String,
    },
}

impl ProbeOutcome {
    pub fn verdict(&self) -> ProbeVerdict {
        match self {
            Self::SecretMissing | Self::KeyMissing => ProbeVerdict::Missing,
            Self::Invalid(_) => ProbeVerdict::Invalid,
            Self::Unauthorized { .. } => ProbeVerdict::Unauthorized,
            Self::Unreachable { .. } => ProbeVerdict::Unreachable,
            Self::Reached { .. } => ProbeVerdict::Reached,
        }
    }

    /// Short, stable label for metrics ("probes by result").
    pub fn result_label(&self) -> &'static str {
        match self {
            Self::SecretMissing | Self::KeyMissing => K::Missing.as_str(),
            Self::Invalid(_) => K::Invalid.as_str(),
            Self::Unauthorized { .. } => K::Unauthorized.as_str(),
            Self::Unreachable { .. } => K::Unreachable.as_str(),
            Self::Reached { nodes, .. } => match nodes {
                NodeListing::Counted(_) => G::Discovered.as_str(),
                NodeListing::Forbidden { .. } => G::Forbidden.as_str(),
                NodeListing::Failed { .. } => G::DiscoveryFailed.as_str(),
            },
        }
    }

    /// How listing the nodes went, when the target answered.
    fn nodes(&self) -> Option<&NodeListing> {
        match self {
            Self::Reached { nodes, .. } => Some(nodes),
            _ => None,
        }
    }

    fn succeeded(&self) -> bool {
        matches!(self.nodes(), Some(NodeListing::Counted(_)))
    }

    /// Failures that a retry may well cure.
    fn is_transient(&self) -> bool {
        matches!(self, Self::Unreachable { .. })
            || matches!(self.nodes(), Some(NodeListing::Failed { .. }))
    }
}

/// Everything [`plan_status`] needs.
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    pub outcome: &'a ProbeOutcome,
    /// The cluster's current status, if it has one.
    pub previous: Option<&'a FournosClusterStatus>,
    /// `metadata.generation`, for `observedGeneration`.
    pub generation: Option<i64>,
    pub now: Timestamp,
    /// `namespace/name` of the kubeconfig Secret, for messages.
    pub secret: &'a str,
    /// The credentials' expiry, when the kubeconfig was valid and states one.
    pub credentials: Option<Expiry>,
    pub interval: Duration,
    pub failure_threshold: u32,
    pub expiry_window: Duration,
    /// The kubeconfig differs from the one the previous status was probed with (the
    /// Secret was rotated, or `spec.kubeconfigSecret` names another one). Rotation takes
    /// effect at once: the old kubeconfig's failure count and the grace a `Valid`
    /// cluster gets before turning `Unreachable` do not carry over to the new one.
    pub kubeconfig_changed: bool,
    /// Set for a cluster with a recorded source that is locked: its offboarding is held
    /// back.
    pub offboard_hold: Option<OffboardHold<'a>>,
    /// Where the cluster came from: `sourceSecret` to write, whether that Secret is gone,
    /// and a hand edit to report.
    pub source: &'a Source,
    /// The secrets namespace, for Secret names in messages.
    pub secrets_namespace: &'a str,
}

/// Why and how long an auto-discovered cluster outlives its Secret.
#[derive(Debug, Clone, Copy)]
pub struct OffboardHold<'a> {
    /// Who holds the lock.
    pub holder: &'a str,
    pub grace: Duration,
}

/// The status to apply (discovery's slice alone) and the Events to emit.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusPlan {
    pub status: DiscoveryStatus,
    /// Events to publish on the FournosCluster, on transitions only.
    pub events: Vec<Event>,
}

/// What discovery's Events say they were doing.
const ACTION: &str = "Probe";

/// A condition as discovery plans it: with its typed reason, or the stored one kept as
/// it is (a transient failure within the threshold; its reason may be one this version
/// does not know).
#[derive(Debug, Clone)]
enum Planned<'a, R: Reason> {
    New(DesiredCondition<R>),
    Kept(&'a Condition),
}

impl<R: Reason> Planned<'_, R> {
    fn message(&self) -> &str {
        match self {
            Self::New(desired) => &desired.message,
            Self::Kept(current) => &current.message,
        }
    }

    /// The planned reason, when it is not the one `previous` stores.
    fn changed_reason(&self, previous: &FournosClusterStatus) -> Option<R> {
        let Self::New(desired) = self else {
            return None;
        };
        let stored = find(&previous.conditions, desired.type_).and_then(|c| R::parse(&c.reason));
        (stored != Some(desired.reason)).then_some(desired.reason)
    }

    /// The condition to write, given the one stored as `current`.
    fn written(
        &self,
        current: Option<&Condition>,
        generation: Option<i64>,
        now: &Time,
    ) -> Condition {
        match self {
            Self::New(desired) => next_condition(current, desired, generation, now),
            Self::Kept(kept) => renewed(kept, generation),
        }
    }
}

/// How the probe counts against the kubeconfig: failures in a row, the status they lead
/// to, and which conditions a transient failure holds back.
struct Verdict {
    failures: u32,
    kubeconfig_status: KubeconfigStatus,
    /// A transient failure of a Valid cluster, below the threshold: `GPUDiscovered` stays.
    held: bool,
    /// ... and so does `KubeconfigValid` when the target did not answer at all.
    kubeconfig_held: bool,
}

fn verdict(input: &PlanInput<'_>, previous: &FournosClusterStatus) -> Verdict {
    let outcome = input.outcome;
    let failures_before = match &previous.hardware {
        Some(h) if !input.kubeconfig_changed => u32::try_from(h.consecutive_failures).unwrap_or(0),
        _ => 0,
    };
    let failures = if outcome.succeeded() {
        0
    } else {
        failures_before.saturating_add(1)
    };
    // A new kubeconfig has no Valid past to protect.
    let status_before = if input.kubeconfig_changed {
        None
    } else {
        previous.kubeconfig_status
    };
    let kubeconfig_status = next_kubeconfig_status(
        status_before,
        outcome.verdict(),
        failures,
        input.failure_threshold,
    );
    let held = !input.kubeconfig_changed
        && outcome.is_transient()
        && previous.kubeconfig_status == Some(KubeconfigStatus::Valid)
        && within_threshold(failures, input.failure_threshold);
    Verdict {
        failures,
        kubeconfig_status,
        held,
        kubeconfig_held: held && outcome.verdict() == ProbeVerdict::Unreachable,
    }
}

/// `hardware` after the probe: the new count, or the last one with the failure.
fn next_hardware(
    input: &PlanInput<'_>,
    previous: &FournosClusterStatus,
    failures: u32,
) -> Hardware {
    match input.outcome {
        ProbeOutcome::Reached {
            nodes: NodeListing::Counted(count),
            server_version,
        } => Hardware {
            gpus: count.gpus.clone(),
            total_gpus: count.total_gpus,
            last_discovery: Some(Time(input.now)),
            consecutive_failures: 0,
            last_error: None,
            excluded_nodes: count.excluded_nodes,
            // Only what looks like a version: the rest is dropped, unseen.
            kubernetes_version: server_version
                .as_deref()
                .map(str::trim)
                .filter(|v| is_version_text(v))
                .map(str::to_owned),
        },
        outcome => Hardware {
            consecutive_failures: i32::try_from(failures).unwrap_or(i32::MAX),
            last_error: Some(last_error(outcome, input.secret)),
            ..previous.hardware.clone().unwrap_or_default()
        },
    }
}

/// The discovery-owned status after a probe.
pub fn plan_status(input: &PlanInput<'_>) -> StatusPlan {
    let empty = FournosClusterStatus::default();
    let previous = input.previous.unwrap_or(&empty);
    let verdict = verdict(input, previous);
    let hardware = next_hardware(input, previous, verdict.failures);

    // Whole seconds, as the API stores a Time: the deadline computed from what is written
    // now must be the one computed later from what was read back.
    let secret_missing_since = input.source.gone.then(|| {
        previous.secret_missing_since.clone().unwrap_or_else(|| {
            Time(Timestamp::from_second(input.now.as_second()).unwrap_or(input.now))
        })
    });
    let credentials = match input.outcome {
        ProbeOutcome::SecretMissing | ProbeOutcome::KeyMissing | ProbeOutcome::Invalid(_) => None,
        _ => input.credentials,
    };

    let previous_kubeconfig = find(&previous.conditions, KUBECONFIG_VALID);
    let previous_gpus = find(&previous.conditions, GPU_DISCOVERED);
    let kubeconfig = match previous_kubeconfig.filter(|_| verdict.kubeconfig_held) {
        Some(current) => Planned::Kept(current),
        None => Planned::New(kubeconfig_condition(
            input,
            verdict.kubeconfig_status,
            credentials,
            secret_missing_since.as_ref(),
        )),
    };
    let gpus = match previous_gpus.filter(|_| verdict.held) {
        Some(current) => Planned::Kept(current),
        None => Planned::New(gpu_condition(
            input.outcome,
            verdict.kubeconfig_status,
            &hardware,
        )),
    };
    let now = Time(input.now);
    let status = DiscoveryStatus {
        kubeconfig_status: Some(verdict.kubeconfig_status),
        gpu_summary: hardware
            .last_discovery
            .is_some()
            .then(|| gpu_summary(&hardware.gpus)),
        hardware: Some(hardware),
        credentials_expire_at: credentials.map(|e| Time(e.at)),
        next_probe_at: Some(Time(next_probe_at(
            input.now,
            input.interval,
            verdict.failures,
        ))),
        secret_missing_since,
        source_secret: input.source.record.clone(),
        conditions: vec![
            kubeconfig.written(previous_kubeconfig, input.generation, &now),
            gpus.written(previous_gpus, input.generation, &now),
        ],
    };
    let events = plan_events(previous, &status, &kubeconfig, &gpus);
    StatusPlan { status, events }
}

/// `KubeconfigValid=True`: `Valid`, or a warning reason when the credentials expire soon
/// (or say they have expired, yet work).
fn valid_reason_and_message(input: &PlanInput<'_>, credentials: Option<Expiry>) -> (K, String) {
    let secret = input.secret;
    let version = match input.outcome {
        ProbeOutcome::Reached {
            server_version: Some(v),
            ..
        } => format!(" (Kubernetes {})", bounded(v, MAX_DETAIL_CHARS)),
        _ => String::new(),
    };
    let warning = credentials.and_then(|e| {
        let message = expiry_warning(e, input.now, input.expiry_window)?;
        let reason = match expiry_state(e.at, input.now, input.expiry_window) {
            ExpiryState::Expired => K::CredentialsExpired,
            _ => K::CredentialsExpiringSoon,
        };
        Some((reason, message))
    });
    let accepted = format!("the target accepts the credentials in Secret {secret}{version}");
    match warning {
        Some((reason, warning)) => (reason, format!("{accepted}, but {warning}")),
        None => (K::Valid, accepted),
    }
}

/// The `Missing` message of a locked cluster whose Secret is gone: when it will be
/// offboarded, and how to do it now.
fn held_back(input: &PlanInput<'_>, secret_missing_since: Option<&Time>) -> Option<String> {
    match (
        input.offboard_hold,
        secret_missing_since,
        &input.source.record,
    ) {
        (Some(hold), Some(since), Some(source)) => Some(held_back_message(
            &format!("{}/{}", input.secrets_namespace, source.name),
            hold.holder,
            offboard_at(since.0, hold.grace),
        )),
        _ => None,
    }
}

fn kubeconfig_condition(
    input: &PlanInput<'_>,
    status: KubeconfigStatus,
    credentials: Option<Expiry>,
    secret_missing_since: Option<&Time>,
) -> DesiredCondition<K> {
    let held_back = held_back(input, secret_missing_since).filter(|_| {
        status == KubeconfigStatus::Missing && matches!(input.outcome, ProbeOutcome::SecretMissing)
    });
    let (reason, message) = match (held_back, &input.source.problem) {
        (Some(message), _) => (K::Missing, message),
        (None, Some(problem)) => {
            let (_, message) = kubeconfig_reason_and_message(input, status, credentials);
            let problem_message = problem.message(input.secrets_namespace);
            (
                problem.reason(),
                format!("{problem_message}. Meanwhile: {message}"),
            )
        }
        (None, None) => kubeconfig_reason_and_message(input, status, credentials),
    };
    let ok = status == KubeconfigStatus::Valid;
    DesiredCondition::new(KUBECONFIG_VALID, ok, reason, message)
}

/// The reason and message of `KubeconfigValid` for `status`, from what the probe found.
fn kubeconfig_reason_and_message(
    input: &PlanInput<'_>,
    status: KubeconfigStatus,
    credentials: Option<Expiry>,
) -> (K, String) {
    let secret = input.secret;
    // The target's words, for the two statuses only a 401 or no answer at all lead to.
    let detail = match input.outcome {
        ProbeOutcome::Unauthorized { detail } | ProbeOutcome::Unreachable { detail } => {
            with_detail(detail)
        }
        _ => String::new(),
    };
    match (status, input.outcome) {
        (KubeconfigStatus::Valid, _) => valid_reason_and_message(input, credentials),
        (KubeconfigStatus::Missing, ProbeOutcome::KeyMissing) => (
            K::Missing,
            format!(
                "Secret {secret} has no `kubeconfig` key: put the target's kubeconfig under that key"
            ),
        ),
        (KubeconfigStatus::Missing, _) => (
            K::Missing,
            format!(
                "Secret {secret} does not exist or is not labeled {KUBECONFIG_SECRET_SELECTOR}: create it with the \
                 target's kubeconfig under the `kubeconfig` key, and label it"
            ),
        ),
        (KubeconfigStatus::Invalid, ProbeOutcome::Invalid(e)) => (
            match e {
                KubeconfigError::NotForThisCluster { .. } => K::SecretNotForThisCluster,
                _ => K::Invalid,
            },
            format!("the kubeconfig in Secret {secret} cannot be used: {e}"),
        ),
        (KubeconfigStatus::Invalid, _) => (
            K::Invalid,
            format!("the kubeconfig in Secret {secret} cannot be used"),
        ),
        (KubeconfigStatus::Unauthorized, _) => {
            let expired = credentials
                .filter(|e| e.at <= input.now)
                .map(|e| format!(" ({} expired at {})", e.kind.describe(), e.at))
                .unwrap_or_default();
            (
                K::Unauthorized,
                format!(
                    "the target rejected the credentials in Secret {secret} (HTTP 401){expired}; \
                     put valid, unexpired credentials in the Secret{detail}"
                ),
            )
        }
        (KubeconfigStatus::Unreachable, _) => (
            K::Unreachable,
            format!(
                "cannot reach the target{detail}. Check the server URL in Secret {secret}, the network path \
                 from Hearth to it, and that certificate-authority-data (or tls-server-name) matches the \
                 server's certificate"
            ),
        ),
    }
}

fn gpu_condition(
    outcome: &ProbeOutcome,
    kubeconfig: KubeconfigStatus,
    hardware: &Hardware,
) -> DesiredCondition<G> {
    let kept = match &hardware.last_discovery {
        Some(at) => format!("; hardware still shows the count from {}", at.0),
        None => String::new(),
    };
    let (ok, reason, message) = match outcome.nodes() {
        Some(NodeListing::Counted(count)) => (true, G::Discovered, discovered_message(count)),
        Some(NodeListing::Forbidden { detail }) => (
            false,
            G::Forbidden,
            format!(
                "the kubeconfig's identity may not list nodes on the target: grant it `list` on `nodes` \
                 (a ClusterRole and ClusterRoleBinding){}{kept}",
                with_detail(detail)
            ),
        ),
        Some(NodeListing::Failed { detail }) => (
            false,
            G::DiscoveryFailed,
            format!(
                "listing the target's nodes failed{}{kept}",
                with_detail(detail)
            ),
        ),
        None => (
            false,
            G::DiscoveryFailed,
            format!(
                "GPUs cannot be discovered while the kubeconfig is {kubeconfig} (see condition KubeconfigValid){kept}"
            ),
        ),
    };
    DesiredCondition::new(GPU_DISCOVERED, ok, reason, message)
}

fn discovered_message(count: &GpuCount) -> String {
    let nodes = |n: i32| if n == 1 { "node" } else { "nodes" };
    let left_out = match count.excluded_nodes {
        0 => String::new(),
        n => format!(
            "; {n} GPU {} left out because cordoned or not Ready",
            nodes(n)
        ),
    };
    if count.gpus.is_empty() {
        format!("no GPUs on the target's schedulable, Ready nodes{left_out}")
    } else {
        format!(
            "{} on {} {}{left_out}",
            count.summary(),
            count.gpu_nodes,
            nodes(count.gpu_nodes)
        )
    }
}

fn last_error(outcome: &ProbeOutcome, secret: &str) -> String {
    let text = match outcome {
        ProbeOutcome::SecretMissing => {
            format!("Missing: Secret {secret} does not exist or is not labeled")
        }
        ProbeOutcome::KeyMissing => format!("Missing: Secret {secret} has no `kubeconfig` key"),
        ProbeOutcome::Invalid(e) => format!("Invalid: {e}"),
        ProbeOutcome::Unauthorized { detail } => {
            format!("Unauthorized: HTTP 401{}", with_detail(detail))
        }
        ProbeOutcome::Unreachable { detail } => format!("Unreachable{}", with_detail(detail)),
        ProbeOutcome::Reached { nodes, .. } => match nodes {
            NodeListing::Forbidden { detail } => {
                format!("Forbidden: listing nodes{}", with_detail(detail))
            }
            NodeListing::Failed { detail } => {
                format!("DiscoveryFailed: listing nodes{}", with_detail(detail))
            }
            NodeListing::Counted(_) => String::new(),
        },
    };
    bounded(&text, MAX_DETAIL_CHARS)
}

fn with_detail(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(": {}", bounded(detail, MAX_DETAIL_CHARS))
    }
}

/// Events for what changed between the previous status and the planned one, decided
/// from the planned conditions' typed reasons.
fn plan_events(
    previous: &FournosClusterStatus,
    next: &DiscoveryStatus,
    kubeconfig: &Planned<'_, K>,
    gpus: &Planned<'_, G>,
) -> Vec<Event> {
    let mut events: Vec<Event> = kubeconfig_status_event(previous, next, kubeconfig.message())
        .into_iter()
        .collect();
    // Credentials about to expire, and hand edits that disagree with the recorded source.
    if let Some(reason) = kubeconfig.changed_reason(previous).filter(|r| {
        matches!(r, K::CredentialsExpiringSoon | K::CredentialsExpired) || is_source_reason(*r)
    }) {
        events.push(Event::warning(
            reason.as_str(),
            ACTION,
            kubeconfig.message(),
        ));
    }
    // Discovery failures get their own Event only while the kubeconfig works; otherwise
    // the kubeconfig Event already says why.
    if next.kubeconfig_status == Some(KubeconfigStatus::Valid)
        && let Some(reason) = gpus
            .changed_reason(previous)
            .filter(|r| matches!(r, G::Forbidden | G::DiscoveryFailed))
    {
        events.push(Event::warning(reason.as_str(), ACTION, gpus.message()));
    }
    events.extend(gpus_changed_event(previous, next));
    events
}

/// The Event of a new `kubeconfigStatus`, with the message of `KubeconfigValid`.
fn kubeconfig_status_event(
    previous: &FournosClusterStatus,
    next: &DiscoveryStatus,
    message: &str,
) -> Option<Event> {
    let status = next
        .kubeconfig_status
        .filter(|s| previous.kubeconfig_status != Some(*s))?;
    let (warning, reason) = match status {
        KubeconfigStatus::Valid => (false, "KubeconfigValid"),
        KubeconfigStatus::Missing => (true, "KubeconfigMissing"),
        KubeconfigStatus::Invalid => (true, "KubeconfigInvalid"),
        KubeconfigStatus::Unauthorized => (true, "KubeconfigUnauthorized"),
        KubeconfigStatus::Unreachable => (true, "KubeconfigUnreachable"),
    };
    Some(Event {
        warning,
        reason,
        action: ACTION,
        note: message.to_owned(),
    })
}

/// The Event of a new GPU count, once counted.
fn gpus_changed_event(previous: &FournosClusterStatus, next: &DiscoveryStatus) -> Option<Event> {
    let discovered = next
        .hardware
        .as_ref()
        .is_some_and(|h| h.consecutive_failures == 0);
    if !discovered || previous.gpu_summary == next.gpu_summary {
        return None;
    }
    let now = next.gpu_summary.as_deref().unwrap_or_default();
    let message = match &previous.gpu_summary {
        Some(old) => format!("GPUs now {now} (were {old})"),
        None => format!("GPUs discovered: {now}"),
    };
    Some(Event::normal(GPUS_CHANGED, ACTION, message))
}

/// How a planned status differs from the current one, over discovery's fields only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusDiff {
    /// Nothing to write.
    Same,
    /// Only `hardware.lastDiscovery` and `nextProbeAt` moved, as they do on every probe
    /// with the same result: a write of timestamps alone, no transition, no Event.
    TimestampsOnly,
    /// Something a person or another controller cares about changed.
    Changed,
}

/// Compares the discovery-owned fields of two statuses.
pub fn diff_status(old: Option<&FournosClusterStatus>, new: &DiscoveryStatus) -> StatusDiff {
    let empty = FournosClusterStatus::default();
    let old = old.unwrap_or(&empty);
    if status_changed(Some(old), new) {
        StatusDiff::Changed
    } else if old.next_probe_at != new.next_probe_at
        || last_discovery(&old.hardware) != last_discovery(&new.hardware)
    {
        StatusDiff::TimestampsOnly
    } else {
        StatusDiff::Same
    }
}

fn last_discovery(hardware: &Option<Hardware>) -> Option<&Time> {
    hardware.as_ref()?.last_discovery.as_ref()
}

/// Whether discovery's fields differ other than in the timestamps every probe moves
/// (`hardware.lastDiscovery`, `nextProbeAt`). Other controllers' fields and
/// conditions are ignored; so is the order of conditions.
pub fn status_changed(old: Option<&FournosClusterStatus>, new: &DiscoveryStatus) -> bool {
    let empty = FournosClusterStatus::default();
    discovery_view(old.unwrap_or(&empty)) != discovery_view(&new.clone().into())
}

fn discovery_view(s: &FournosClusterStatus) -> FournosClusterStatus {
    let mut conditions: Vec<Condition> = s
        .conditions
        .iter()
        .filter(|c| c.type_ == KUBECONFIG_VALID || c.type_ == GPU_DISCOVERED)
        .cloned()
        .collect();
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    FournosClusterStatus {
        kubeconfig_status: s.kubeconfig_status,
        hardware: s.hardware.clone().map(|h| Hardware {
            last_discovery: None,
            ..h
        }),
        credentials_expire_at: s.credentials_expire_at.clone(),
        next_probe_at: None,
        gpu_summary: s.gpu_summary.clone(),
        secret_missing_since: s.secret_missing_since.clone(),
        source_secret: s.source_secret.clone(),
        conditions,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
