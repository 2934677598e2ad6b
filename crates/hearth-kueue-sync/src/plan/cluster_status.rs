//! What a cluster's `status.kueue` and `KueueSynced` condition say, with messages that
//! tell a person what to do.

use std::collections::BTreeMap;

use hearth_api::cluster::{MAX_GPU_MODELS, MAX_LEGACY_GPU_TEXT};
use hearth_api::conditions::{DesiredCondition, Reason, Status};
use hearth_api::names::{
    CLUSTER_NAMESPACE_LABEL, CLUSTER_NODE_LABEL, CLUSTER_SLOT_RESOURCE, MANAGED_BY_LABEL,
    MANAGED_BY_VALUE, POOL_LABEL_ABSENT, condition_types::KUEUE_SYNCED,
};
use hearth_api::{KubeconfigStatus, KueueStatus};

use super::common::{
    FlavorState, MAX_COVERED_RESOURCES, MAX_FLAVORS_PER_GROUP, MAX_FLAVORS_PER_QUEUE,
    MAX_RESOURCE_GROUPS, PlanSettings,
};
use super::input::ObservedCluster;
use super::queue::{EntryOutcome, Holders, LeftOut, LeftOutWhy, NoRoom};

/// Reasons of the `KueueSynced` condition. Stable: also Event reasons and metric labels.
pub use hearth_api::reasons::KueueSyncedReason as SyncReason;

fn condition(reason: SyncReason, message: String) -> DesiredCondition<SyncReason> {
    let status = if reason == SyncReason::Synced {
        Status::True
    } else {
        Status::False
    };
    DesiredCondition::new(KUEUE_SYNCED, status, reason, message)
}

/// `status.kueue` and the `KueueSynced` condition of a live cluster.
pub(crate) fn cluster_report(
    cluster: &ObservedCluster,
    flavor: FlavorState,
    queue_exists: bool,
    entry: Option<&EntryOutcome>,
    settings: &PlanSettings,
) -> (Option<KueueStatus>, DesiredCondition<SyncReason>) {
    let name = &cluster.name;
    let queue = &settings.cluster_queue;
    let published = flavor_not_ready(name, flavor, queue_exists, entry, settings)
        .map_or_else(|| entry_quotas(name, entry, queue), Err);
    let (quotas, left_out) = match published {
        Ok(published) => published,
        Err((reason, message)) => return (None, condition(reason, message)),
    };
    let kueue = KueueStatus {
        flavor: name.clone(),
        cluster_queue: queue.clone(),
        quotas: quotas.clone(),
        cluster_slots: settings.cluster_slots,
    };
    let invalid_pool = super::flavor_shape::pool_labels(cluster, &settings.pool_label_keys).invalid;
    (
        Some(kueue),
        published_condition(cluster, quotas, left_out, &invalid_pool, queue),
    )
}

/// Why a cluster gets no entry: the reason and the message of its condition.
type NoEntry = (SyncReason, String);

/// Why a cluster whose flavor is not ready (or whose queue is missing) gets no entry.
/// A cluster whose flavor is being created was ranked like the others: only one that got
/// a place (`entry`: [`EntryOutcome::Reserved`]) waits for its flavor; the others are told
/// what their place depends on, which the flavor does not change.
fn flavor_not_ready(
    name: &str,
    flavor: FlavorState,
    queue_exists: bool,
    entry: Option<&EntryOutcome>,
    settings: &PlanSettings,
) -> Option<NoEntry> {
    let queue = &settings.cluster_queue;
    match flavor {
        FlavorState::InvalidName => Some((
            SyncReason::InvalidName,
            format!(
                "The name '{name}' cannot be the value of node label {CLUSTER_NODE_LABEL} \
                 (at most 63 characters: letters, digits, '-', '_', '.'), so Hearth \
                 creates no ResourceFlavor and publishes no quota for it. Recreate the \
                 cluster under a shorter name."
            ),
        )),
        FlavorState::NotManaged => {
            let namespace = &settings.namespace;
            Some((
                SyncReason::FlavorNotManaged,
                format!(
                    "A ResourceFlavor named '{name}' exists but is not this Hearth's (it lacks \
                 the labels {MANAGED_BY_LABEL}={MANAGED_BY_VALUE} and \
                 {CLUSTER_NAMESPACE_LABEL}={namespace}: someone else, or a Hearth in \
                 another namespace, made it), so Hearth leaves it and its ClusterQueue \
                 entries alone and publishes no quota for this cluster. Remove it from \
                 every ClusterQueue and delete it, and Hearth creates its own; or, if it \
                 selects {CLUSTER_NODE_LABEL}={name} and nobody else uses it, add those \
                 labels to hand it over to Hearth."
                ),
            ))
        }
        _ if !queue_exists => Some((
            SyncReason::ClusterQueueNotFound,
            format!(
                "ClusterQueue '{queue}' does not exist. Hearth does not create it (it \
                 belongs to the platform): create it, or point \
                 HEARTH_KUEUE_CLUSTER_QUEUE_NAME at the right one, and this cluster's \
                 quota is published at once."
            ),
        )),
        FlavorState::Creating if matches!(entry, None | Some(EntryOutcome::Reserved)) => Some((
            SyncReason::WaitingForFlavor,
            format!(
                "Creating ResourceFlavor '{name}'. Its place in ClusterQueue '{queue}' is \
                 kept for it, and its entry is added once the flavor exists (a ClusterQueue \
                 that references a missing flavor stops admitting); nothing to do unless \
                 this lasts."
            ),
        )),
        // No place (or no claim): the entry's outcome says why.
        FlavorState::Creating => None,
        FlavorState::Deleting => Some((
            SyncReason::WaitingForFlavor,
            format!(
                "ResourceFlavor '{name}' is being deleted; Kueue finishes that once no \
                 ClusterQueue references it. Hearth then recreates it and adds the cluster \
                 back to ClusterQueue '{queue}'. If this lasts, remove '{name}' from the \
                 other ClusterQueues or Cohorts that list it."
            ),
        )),
        FlavorState::Ready => None,
    }
}

/// The published quotas of a cluster's entry, or why it has none.
fn entry_quotas<'e>(
    name: &str,
    entry: Option<&'e EntryOutcome>,
    queue: &str,
) -> Result<(&'e BTreeMap<String, i64>, &'e [LeftOut]), NoEntry> {
    match entry {
        Some(EntryOutcome::Published { quotas, left_out }) => Ok((quotas, left_out)),
        // A cluster with a reservation is told that it waits for its flavor, above.
        Some(EntryOutcome::Reserved) => Err((
            SyncReason::WaitingForFlavor,
            format!(
                "Waiting for ResourceFlavor '{name}'; its place in ClusterQueue '{queue}' is kept for it."
            ),
        )),
        Some(EntryOutcome::FlavorInOtherGroup { group }) => Err((
            SyncReason::Conflict,
            format!(
                "ResourceFlavor '{name}' is already listed in resourceGroups[{group}] of \
                 ClusterQueue '{queue}', which does not cover {CLUSTER_SLOT_RESOURCE}; a \
                 flavor may appear in one resource group only, so Hearth cannot add the \
                 cluster's entry. Remove '{name}' from that group."
            ),
        )),
        Some(EntryOutcome::NoRoom { why, holders }) => Err((
            SyncReason::LimitReached,
            no_room_message(*why, holders, queue),
        )),
        Some(EntryOutcome::NotCounted) => Err((
            SyncReason::WaitingForDiscovery,
            format!(
                "hearth-discovery has not counted this cluster's GPUs yet \
                 (status.hardware.lastDiscovery is not set), so it takes no place in \
                 ClusterQueue '{queue}' and publishes no quota. Only discovery publishes \
                 hardware (spec.hardware is not read). It gets its place, if there is room, \
                 once discovery has counted it: see conditions KubeconfigValid and \
                 GPUDiscovered (kubectl fournos why {name})."
            ),
        )),
        // A ready flavor with an existing queue always has an outcome.
        None => Err((
            SyncReason::WaitingForFlavor,
            format!("Waiting for the entry in ClusterQueue '{queue}'."),
        )),
    }
}

/// The `KueueSynced` condition of a cluster whose entry publishes `quotas`.
fn published_condition(
    cluster: &ObservedCluster,
    quotas: &BTreeMap<String, i64>,
    left_out: &[LeftOut],
    invalid_pool: &[String],
    queue: &str,
) -> DesiredCondition<SyncReason> {
    let name = &cluster.name;
    let published = format_quotas(quotas);
    if cluster.drained() {
        let why = match cluster.kubeconfig_status {
            None => "hearth-discovery has not validated its kubeconfig yet".to_owned(),
            Some(status) => format!("its kubeconfig is {status} (see condition KubeconfigValid)"),
        };
        condition(
            SyncReason::Drained,
            format!(
                "Drained: {why}, so its entry in ClusterQueue '{queue}' publishes zero quota \
                 and no new job is admitted on it; ResourceFlavor '{name}' and the entry stay. \
                 Fix the kubeconfig in Secret '{secret}' (or the cluster); the quota returns \
                 as soon as the kubeconfig is {valid}.",
                secret = cluster.kubeconfig_secret,
                valid = KubeconfigStatus::Valid,
            ),
        )
    } else if let Some(why) = cluster.legacy_gpus.refused().filter(|_| !cluster.counted) {
        // Published without being counted: a takeover, whose spec.hardware is not read.
        condition(
            SyncReason::InvalidLegacyHardware,
            format!(
                "This cluster is taken over from the Python Hearth and hearth-discovery has \
                 not counted its GPUs yet, but its legacy spec.hardware is not read: {why}. \
                 Its entry in ClusterQueue '{queue}' publishes {published} (no GPU) until \
                 discovery has counted the cluster (see condition GPUDiscovered); or correct \
                 spec.hardware (at most {MAX_GPU_MODELS} GPU models, strings of at most \
                 {MAX_LEGACY_GPU_TEXT} characters)."
            ),
        )
    } else if !invalid_pool.is_empty() {
        // The value is not quoted: it is not a label value, so it may be anything.
        condition(
            SyncReason::InvalidPoolLabel,
            format!(
                "The value of label {keys} on this FournosCluster is not a valid label value \
                 (at most 63 characters: letters, digits, '-', '_', '.'), so ResourceFlavor \
                 '{name}' carries {POOL_LABEL_ABSENT} for it and no Workload asking for a pool \
                 by that label lands here. Its entry in ClusterQueue '{queue}' publishes \
                 {published}. Relabel the cluster (kubectl label fournosclusters {name} \
                 <key>=<value> --overwrite).",
                keys = invalid_pool.join(", "),
            ),
        )
    } else if left_out.is_empty() {
        condition(
            SyncReason::Synced,
            format!(
                "ResourceFlavor '{name}' and its entry in ClusterQueue '{queue}' publish \
                 {published}."
            ),
        )
    } else {
        condition(
            left_out_reason(left_out),
            format!(
                "ResourceFlavor '{name}' and its entry in ClusterQueue '{queue}' publish \
                 {published}, but not {}",
                left_out_message(left_out)
            ),
        )
    }
}

/// Why some GPU resources of a published entry are left out: Kueue's limits first.
fn left_out_reason(left_out: &[LeftOut]) -> SyncReason {
    if left_out.iter().any(|l| {
        matches!(
            l.why,
            LeftOutWhy::TooManyResources | LeftOutWhy::TooManyModels
        )
    }) {
        SyncReason::LimitReached
    } else if left_out
        .iter()
        .any(|l| matches!(l.why, LeftOutWhy::CoveredByGroup(_)))
    {
        SyncReason::Conflict
    } else {
        SyncReason::InvalidResourceName
    }
}

fn no_room_message(no_room: NoRoom, holders: &Holders, queue: &str) -> String {
    let held = held_by(holders);
    let why = match no_room {
        NoRoom::NoGroup => format!(
            "no resource group covers {CLUSTER_SLOT_RESOURCE} and the queue already has \
             {MAX_RESOURCE_GROUPS} (Kueue's maximum), so Hearth cannot add one. Merge or \
             remove a resource group, or add {CLUSTER_SLOT_RESOURCE} to one"
        ),
        NoRoom::GroupFull { foreign } => format!(
            "the resource group covering {CLUSTER_SLOT_RESOURCE} holds \
             {MAX_FLAVORS_PER_GROUP} flavors (Kueue's maximum): {foreign} not Hearth's and \
             {held}. Delete clusters that are no longer used or move other flavors to \
             another resource group"
        ),
        NoRoom::QueueFull { foreign } => format!(
            "the queue holds {MAX_FLAVORS_PER_QUEUE} flavors (Kueue's maximum): {foreign} not \
             Hearth's and {held}. Delete clusters that are no longer used or remove other \
             flavors from the queue"
        ),
    };
    format!(
        "No room for this cluster in ClusterQueue '{queue}': {why}. It is added as soon as \
         there is room; until then no job is admitted on it."
    )
}

/// `62 of clusters that have their place (a, b, c and 59 more), which keep it`.
fn held_by(holders: &Holders) -> String {
    // `first` is empty only when `count` is zero (see `queue::select`).
    let names = super::summary::named(holders.first.iter().map(String::as_str), holders.count);
    format!(
        "{} of clusters that have their place{names}, which keep it",
        holders.count
    )
}

fn left_out_message(left_out: &[LeftOut]) -> String {
    let mut parts = Vec::new();
    let list = |why: &dyn Fn(&LeftOutWhy) -> bool| {
        left_out
            .iter()
            .filter(|l| why(&l.why))
            .map(|l| format!("{} ({} GPUs)", l.resource, l.count))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let too_many = list(&|w| *w == LeftOutWhy::TooManyResources);
    if !too_many.is_empty() {
        parts.push(format!(
            "{too_many}: the resource group covering {CLUSTER_SLOT_RESOURCE} already covers \
             {MAX_COVERED_RESOURCES} resources (Kueue's maximum) and older clusters keep their \
             models. Remove unused resources from that group or retire a GPU model"
        ));
    }
    let mut groups: BTreeMap<usize, Vec<&LeftOut>> = BTreeMap::new();
    for l in left_out {
        if let LeftOutWhy::CoveredByGroup(g) = l.why {
            groups.entry(g).or_default().push(l);
        }
    }
    for (group, resources) in groups {
        let names: Vec<&str> = resources.iter().map(|l| l.resource.as_str()).collect();
        parts.push(format!(
            "{}: resourceGroups[{group}] covers it, and a resource may belong to one resource \
             group only. Remove it from that group",
            names.join(", ")
        ));
    }
    let beyond = list(&|w| *w == LeftOutWhy::TooManyModels);
    if !beyond.is_empty() {
        parts.push(format!(
            "{beyond}: a cluster publishes at most {MAX_GPU_MODELS} GPU models (each is a \
             resource of the shared ClusterQueue), the first in name order. Check the GPU \
             models in status.hardware"
        ));
    }
    let invalid = list(&|w| *w == LeftOutWhy::InvalidName);
    if !invalid.is_empty() {
        parts.push(format!(
            "{invalid}: not a valid resource name. Check the GPU short names in \
             status.hardware and the GPU resource prefix setting"
        ));
    }
    format!("{}.", parts.join("; nor "))
}

fn format_quotas(quotas: &BTreeMap<String, i64>) -> String {
    // The slot resource first, then GPU models in name order.
    let slot = quotas
        .get(CLUSTER_SLOT_RESOURCE)
        .map(|n| format!("{CLUSTER_SLOT_RESOURCE}={n}"));
    slot.into_iter()
        .chain(
            quotas
                .iter()
                .filter(|(r, _)| r.as_str() != CLUSTER_SLOT_RESOURCE)
                .map(|(r, n)| format!("{r}={n}")),
        )
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the cluster's status must be written to say `kueue` and `condition`.
pub(crate) fn status_differs(
    cluster: &ObservedCluster,
    kueue: Option<&KueueStatus>,
    condition: &DesiredCondition<SyncReason>,
) -> bool {
    cluster.kueue.as_ref() != kueue
        || condition_differs(cluster, cluster.synced_condition.as_ref(), condition)
}

/// Whether `current` (a condition of `cluster`) must be written to say `desired`.
pub(crate) fn condition_differs<R: Reason>(
    cluster: &ObservedCluster,
    current: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    desired: &DesiredCondition<R>,
) -> bool {
    current.is_none_or(|current| {
        current.status != desired.status.as_str()
            || R::parse(&current.reason) != Some(desired.reason)
            || current.message != desired.message
            || current.observed_generation != cluster.generation
    })
}
