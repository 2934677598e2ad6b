//! The plan: from the observed world (all FournosClusters, the ClusterQueue, the
//! ResourceFlavors) to the writes that make Kueue match the fleet, and to what each
//! cluster's `status.kueue` and `KueueSynced` condition should say. Pure: no I/O, no
//! clock. The apply step performs the writes and re-plans from what it then observes.
//!
//! These rules are the one description of how kueue-sync computes quota; the crate
//! README links here.
//!
//! # Rules
//!
//! **Ownership.** A ResourceFlavor is Hearth's iff it carries the labels
//! `app.kubernetes.io/managed-by=hearth` and `fournos.dev/cluster-namespace=<this Hearth's
//! namespace>` (ResourceFlavors are cluster-scoped: a Hearth in another namespace of the
//! same management cluster owns its own, and they are foreign here). A ClusterQueue flavor entry is Hearth's iff
//! its ResourceFlavor is Hearth's; every other entry, group and field is *foreign* and
//! is kept as found, with the single exception below (the resource group covering
//! `fournos/cluster-slot` must stay valid). An entry naming a ResourceFlavor that does
//! not exist is foreign: Hearth cannot tell who made it. A flavor named like a cluster
//! but without the labels is never touched and the cluster gets no quota
//! (`FlavorNotManaged`), with one exception decided in one place,
//! [`ObservedFlavor::is_hearths`]: a *legacy* flavor (the Python controller's: neither
//! label, node labels exactly `{fournos.dev/cluster: <its name>}`) named like a live
//! cluster is adopted — it is Hearth's from this round on, entry included, and is
//! labeled in place ([`Plan::flavors_to_adopt`]), never deleted and recreated. Adopting
//! also annotates it `fournos.dev/adopted-from=hearth-py` with the adopted cluster's uid
//! (`fournos.dev/adopted-cluster-uid`): the mark that the cluster is *under takeover*
//! ([`ObservedFlavor::under_takeover`]), kept on the flavor because nobody who edits a
//! FournosCluster can write a ResourceFlavor.
//!
//! **Flavors.** Every live cluster (no `deletionTimestamp`) gets a ResourceFlavor named
//! after it, `nodeLabels {fournos.dev/cluster: <cluster>}`, labeled managed-by=hearth,
//! whether or not it fits in the ClusterQueue: a flavor costs nothing and lets the
//! cluster enter the queue as soon as there is room. A flavor whose create is under way
//! ([`PlanInput::creating`]) is not asked for again. Each flavor also carries the
//! cluster's *pool labels*: every key of `HEARTH_POOL_LABEL_KEYS`, with the cluster's value
//! or `none` (see [`flavor_shape`]). A Hearth flavor whose `fournos.dev/cluster` node label
//! or pool labels are wrong is repaired (other node labels are left to whoever set them). A Hearth flavor with no live cluster is deleted, but only once no
//! resource group of the *current* ClusterQueue references it: this plan removes the
//! entry and the delete follows next round (Kueue's `resource-in-use` finalizer would
//! otherwise hold the flavor in `Terminating`). A Hearth flavor that another group
//! references is never deleted by Hearth ([`FlavorNote::ReferencedByForeignGroup`]).
//! With no ClusterQueue, orphans are deleted at once.
//!
//! **Entries.** The entries live in the first resource group that covers
//! `fournos/cluster-slot`; if none does, a new group is appended (it is the only one
//! when the queue has none), but only when it gets at least one flavor, and a group
//! left without flavors is removed (Kueue requires 1–64 flavors per group). A cluster
//! gets an entry once its flavor is in the cache and is not being deleted (a ClusterQueue
//! that references a missing flavor stops admitting). Until then a cluster with a place
//! only *reserves* it (below): the rounds that create the flavor, or that wait for the
//! cache to show it, report `WaitingForFlavor`; the first round that sees it adds the
//! entry. A Terminating flavor of a live cluster (deleted and recreated quickly) loses its
//! entry so that the deletion can finish; the flavor is then recreated (and the cluster
//! comes back as a newcomer).
//! Entries keep their position; new ones are appended oldest cluster first. Hearth owns the `name` and `nominalQuota` of its
//! entries; other fields found on them (e.g. `borrowingLimit`) are kept, except that a
//! `lendingLimit` above the new nominal quota is lowered to it (Kueue rejects more).
//!
//! **Who claims a place.** Only discovery publishes hardware: a cluster's GPUs are
//! `status.hardware.gpus` once hearth-discovery has counted it
//! (`status.hardware.lastDiscovery` set; discovery keeps it when later probes fail). A
//! cluster *under takeover* (its flavor was the Python Hearth's and kueue-sync adopted it
//! for this very FournosCluster) counts, until discovery has counted, with the legacy
//! `spec.hardware.gpus` it brings, so a takeover never lowers quota before discovery
//! reports ([`ObservedCluster::quota_gpus`]). Every other cluster that discovery has never
//! counted claims nothing: no entry (an entry it has is removed), no covered resource,
//! `KueueSynced=False` reason `WaitingForDiscovery`; `spec.hardware` written by anyone
//! who may edit a FournosCluster is never published.
//!
//! **Quota, once given, stays.** A cluster whose flavor the slot group of the current
//! ClusterQueue lists (a *holder*) keeps its entry for as long as it is live and has a
//! claim, drained or not; only the room left goes to *newcomers*, in age order
//! (`creationTimestamp`, then name, which is unique, so same-second ties always go the
//! same way). Nothing that arrives later, becomes a candidate later (counted today) or
//! sorts earlier displaces a holder, and no decision depends on the order in which the
//! watches deliver objects.
//!
//! **Reservations.** Places do not depend on flavors: every live cluster with a claim
//! is ranked, whether its flavor is in the cache (*ready*) or not yet (this plan
//! creates it, or its create is under way: [`PlanInput::creating`]). A newcomer whose
//! flavor is not ready and that gets a place *reserves* it: no entry (an entry may only
//! name a flavor that exists), `WaitingForFlavor`, and the place counts as taken, so no
//! younger cluster gets it; nor does the room its GPU models need under the
//! covered-resource limit (it is counted, not written). The first plan that sees the
//! flavor adds the entry. Why: which flavors the cache shows yet is an accident of
//! timing (a flavor is created when its cluster first shows up, and its watch event may
//! come after that cluster's count, or after a younger cluster's flavor), and a plan
//! that waited for every flavor would hold every count up behind every create. Were
//! only ready clusters ranked, a younger cluster whose flavor the cache happened to
//! show first would take the last place from an older one, for good (it becomes a
//! holder). A reservation is recomputed by every plan from what is observed, not
//! remembered: it is not a holding. An older cluster that gets its claim meanwhile
//! (counted later) ranks before it, exactly as it would before a ready newcomer's entry
//! is written. A cluster whose flavor is Terminating reserves nothing (that can last:
//! Kueue holds the flavor while any queue or Cohort references it), nor does one whose
//! flavor is not Hearth's or whose name is invalid (it can never get an entry), nor one
//! that claims nothing. A create that keeps failing keeps its reservation: failures in
//! a burst are transient (the apiserver's 429s, timeouts), and giving the place away on
//! a failure would make it depend on them; the failure is reported and retried with
//! backoff.
//!
//! **Quota.** A cluster's entry gives `fournos/cluster-slot` = the configured slots and
//! `<prefix><shortName>` = the count of each of its models (models sharing a short name
//! are summed; negative counts count as zero; at most [`MAX_GPU_MODELS`](hearth_api::cluster::MAX_GPU_MODELS) resources per
//! cluster, as discovery counts: the first in name order, the rest left out with
//! `LimitReached`), and zero for every other covered resource. A cluster whose
//! `kubeconfigStatus` is not `Valid` (including not yet probed by discovery, when it
//! is under takeover) is *drained*: same
//! entry, zero for every resource, `KueueSynced=False` reason `Drained`. A drained
//! cluster's models stay covered, so draining never reshapes the queue.
//! `status.kueue.quotas` lists the slot resource and the cluster's own models as
//! published; `clusterSlots` is always the configured slot count (what a lock requests),
//! also while drained.
//!
//! **Covered resources.** `coveredResources` of the slot group is sorted and is the
//! union of: `fournos/cluster-slot`; every resource already covered that is not
//! *Hearth-namespaced* (neither the slot resource nor starting with the GPU prefix) —
//! Hearth never drops what it did not add; every resource a foreign flavor of the group
//! lists, except a *plain zero* Hearth-namespaced one (`{name, nominalQuota: 0}` with no
//! other field, which is exactly what Hearth itself adds to foreign flavors); and the
//! GPU resources of the clusters that get an entry. So a GPU model that leaves every
//! cluster leaves `coveredResources`, and its plain-zero entries leave the foreign
//! flavors with it, unless a foreign flavor still gives it a non-zero quota or any other
//! field (that is deliberate, so it stays). The price: a foreign flavor's deliberate
//! plain `0` for a Hearth-namespaced resource is indistinguishable from Hearth's and is
//! removed with it. Every flavor of the group then lists every covered resource in that
//! order: foreign flavors keep their own entries (values and extra fields), reordered,
//! and get a plain zero for each resource they lack.
//!
//! **Limits** (Kueue's; the ClusterQueue is never made invalid). At most 64 flavors in
//! the group and 256 in the queue: foreign flavors count and are never evicted; the
//! remaining room goes to the holders, then to newcomers in age order (reservations
//! included), and the others get `LimitReached`, naming how many clusters have the
//! places and the first few of them. No group covers the slot resource and the queue
//! already has 16 groups: no cluster gets an entry (`LimitReached`). At most 64 covered
//! resources: the resources above are kept first, then the models holders publish now
//! (covered already: a newcomer never takes a covered resource from a holder's model),
//! holders in age order, then every other model of the clusters with a place, cluster
//! by cluster in age order, holders, newcomers and reservations alike (each cluster's
//! models in name order). Age order, not holders first, for the models not covered yet:
//! a reserved cluster becomes a holder only a round after a younger one whose flavor
//! was ready, and must then still come first for the room its models need. A model that
//! does not fit is left out of that cluster's entry only — the cluster keeps its entry
//! with its slots and other models and reports `LimitReached` naming what was left out.
//! A model whose resource another group covers (a resource may belong to only one
//! group) is left out the same way (`Conflict`), and so is a short name that does not
//! make a valid resource name (`InvalidResourceName`). A cluster whose flavor another
//! group already lists gets no entry (`Conflict`); a cluster whose name cannot be a
//! node-label value gets nothing (`InvalidName`).
//!
//! **Cordons.** A cluster with `spec.cordon` gets the taint `fournos.dev/cordoned`
//! (NoSchedule) on its flavor; its entry and quota do not change. Its `Schedulable`
//! condition counts the Workloads still admitted on the flavor (see [`cordon`]).
//!
//! **No change, no write.** The new spec is computed from the current one and returned
//! only when it differs; quantities compare numerically (`"100"`, `100` and `"1k"`
//! versus `1000` are no change), and an unchanged quantity keeps its original spelling.
//! A cluster's status write is asked for only when `status.kueue`, or the condition's
//! status, reason, message or observed generation, differs from what is there.
//!
//! **Status timing.** [`ClusterSync`] describes the world *after* this plan is applied:
//! write it only once the ClusterQueue write (if any) has succeeded; after a conflict,
//! re-plan instead. Clusters being deleted get no status.

mod cluster_status;
mod common;
mod cordon;
#[cfg(test)]
mod cordon_tests;
#[cfg(test)]
mod deletion_tests;
#[cfg(test)]
mod drain_tests;
mod flavor_shape;
#[cfg(test)]
mod foreign_tests;
#[cfg(test)]
mod gpu_models_tests;
mod input;
#[cfg(test)]
mod limits_tests;
#[cfg(test)]
mod observed_tests;
#[cfg(test)]
mod places_tests;
#[cfg(test)]
mod pools_tests;
mod queue;
#[cfg(test)]
mod random_tests;
#[cfg(test)]
mod reservations_tests;
mod summary;
#[cfg(test)]
mod takeover_tests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use hearth_api::kueue::{ClusterQueueSpec, ResourceFlavor, ResourceFlavorSpec};
use hearth_api::names::{
    ADOPTED_CLUSTER_UID_ANNOTATION, ADOPTED_FROM_ANNOTATION, ADOPTED_FROM_PYTHON,
    CLUSTER_NAMESPACE_LABEL, CLUSTER_NODE_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub use cluster_status::SyncReason;
pub use common::{
    ClusterSync, FlavorNote, MAX_COVERED_RESOURCES, MAX_FLAVORS_PER_GROUP, MAX_FLAVORS_PER_QUEUE,
    MAX_RESOURCE_GROUPS, Plan, PlanSettings,
};
pub(crate) use common::{FlavorState, is_label_value};
pub use cordon::{CORDON_TAINT_EFFECT, CordonState, cordon_taint};
pub use input::{Labels, LegacyGpus, ObservedCluster, ObservedFlavor, RESOURCE_IN_USE_FINALIZER};
pub use summary::{cluster_queue_changes_summary, plan_summary};

use queue::{Candidate, QueueInput, QueuePlan};

/// The observed world.
#[derive(Clone, Debug)]
pub struct PlanInput {
    pub settings: PlanSettings,
    /// Every FournosCluster in Hearth's namespace, including those being deleted (shared
    /// with the cluster cache, see [`crate::cached`]).
    pub clusters: Vec<Arc<ObservedCluster>>,
    /// Spec of the ClusterQueue named in the settings; `None` if it does not exist.
    pub cluster_queue: Option<ClusterQueueSpec>,
    /// Every ResourceFlavor (Hearth's and others').
    pub flavors: Vec<Arc<ObservedFlavor>>,
    /// Flavors whose create is under way and that [`Self::flavors`] does not show yet
    /// (kueue-sync creates flavors in the background). Their clusters are treated as the
    /// ones whose flavor this plan creates, but the plan does not ask for them again.
    pub creating: BTreeSet<String>,
    /// Workloads admitted per flavor, this Hearth's lock sentinels aside
    /// ([`crate::workloads::admitted_per_flavor`]): what a cordoned cluster drains.
    pub admitted: BTreeMap<String, i64>,
    /// Now: a cordon past its `until` is overdue.
    pub now: k8s_openapi::jiff::Timestamp,
}

/// The plan. See the module documentation for the rules.
pub fn plan(input: &PlanInput) -> Plan {
    let flavors: BTreeMap<&str, &ObservedFlavor> = input
        .flavors
        .iter()
        .map(|f| (f.name.as_str(), &**f))
        .collect();
    let live = live_clusters_oldest_first(&input.clusters);
    let live_names: BTreeSet<&str> = live.iter().map(|c| c.name.as_str()).collect();
    let mut plan = Plan::default();

    let states = plan_live_flavors(input, &live, &flavors, &live_names, &mut plan);
    let queue = plan_queue(input, &live, &states, &flavors, &live_names, &mut plan);
    plan_orphaned_flavors(input, &live_names, &mut plan);
    plan_cluster_statuses(input, &live, &states, queue.as_ref(), &mut plan);
    plan
}

/// The flavor of each live cluster: created, adopted or repaired as needed, and how far
/// it is.
fn plan_live_flavors<'a>(
    input: &PlanInput,
    live: &[&'a ObservedCluster],
    flavors: &BTreeMap<&str, &ObservedFlavor>,
    live_names: &BTreeSet<&str>,
    plan: &mut Plan,
) -> BTreeMap<&'a str, FlavorState> {
    let settings = &input.settings;
    let mut states = BTreeMap::new();
    for cluster in live {
        let state = match flavors.get(cluster.name.as_str()) {
            _ if !is_label_value(&cluster.name) => FlavorState::InvalidName,
            None if input.creating.contains(&cluster.name) => FlavorState::Creating,
            None => {
                plan.flavors_to_create
                    .push(cluster_flavor(cluster, settings));
                FlavorState::Creating
            }
            Some(f) if !f.is_hearths(live_names) => FlavorState::NotManaged,
            Some(f) if f.deleting => FlavorState::Deleting,
            Some(f) => {
                // A cluster that does not decode has no readable spec.cordon: its flavor
                // keeps the taint it has.
                let keep_taint = cluster.undecodable && f.cordon_tainted;
                let mut desired = cluster_flavor(cluster, settings);
                if keep_taint {
                    desired.spec.node_taints = vec![cordon_taint()];
                }
                if f.is_adopted(live_names) {
                    plan.flavors_to_adopt
                        .push(adopted(desired, cluster.uid.as_deref()));
                } else if flavor_shape::needs_repair(f, &desired) {
                    // Server-side apply drops what kueue-sync applied before and leaves out
                    // now: the adoption mark goes along.
                    plan.flavors_to_repair.push(match &f.adopted_for {
                        Some(uid) => adopted(desired, Some(uid)),
                        None => desired,
                    });
                }
                FlavorState::Ready
            }
        };
        states.insert(cluster.name.as_str(), state);
    }
    states
}

/// The ClusterQueue over the clusters whose flavor is ready or being created (those
/// reserve their place); the new spec goes in the plan only when it differs from the
/// current one.
fn plan_queue(
    input: &PlanInput,
    live: &[&ObservedCluster],
    states: &BTreeMap<&str, FlavorState>,
    flavors: &BTreeMap<&str, &ObservedFlavor>,
    live_names: &BTreeSet<&str>,
    plan: &mut Plan,
) -> Option<QueuePlan> {
    let settings = &input.settings;
    let current = input.cluster_queue.as_ref()?;
    let listed: BTreeSet<&str> = queue::slot_group_index(current)
        .map(|i| current.resource_groups[i].flavors.iter())
        .into_iter()
        .flatten()
        .map(|f| f.name.as_str())
        .collect();
    let holds = |name: &str| listed.contains(name);
    let mut not_counted = Vec::new();
    let candidates: Vec<Candidate> = live
        .iter()
        .filter_map(|c| {
            let ready = match states[c.name.as_str()] {
                FlavorState::Ready => true,
                FlavorState::Creating => false,
                _ => return None,
            };
            let under_takeover = flavors
                .get(c.name.as_str())
                .is_some_and(|f| f.under_takeover(c, live_names));
            // An entry naming a flavor that does not exist is foreign, not the cluster's.
            let holds = ready && holds(&c.name);
            let claim = c
                .quota_gpus(under_takeover)
                .or_else(|| (c.undecodable && holds).then_some(&[][..]));
            match claim {
                Some(gpus) => Some(Candidate::new(c, gpus, holds, ready, settings)),
                None => {
                    not_counted.push(c.name.clone());
                    None
                }
            }
        })
        .collect();
    let mut queue = queue::plan_cluster_queue(&QueueInput {
        current,
        candidates: &candidates,
        is_hearths: &|name: &str| flavors.get(name).is_some_and(|f| f.is_hearths(live_names)),
        settings,
    });
    for name in not_counted {
        queue.entries.insert(name, queue::EntryOutcome::NotCounted);
    }
    if !queue::equivalent_specs(current, &queue.spec) {
        plan.cluster_queue = Some(queue.spec.clone());
    }
    Some(queue)
}

/// Hearth's flavors whose cluster is gone: deleted, or held back with a note saying why.
fn plan_orphaned_flavors(input: &PlanInput, live_names: &BTreeSet<&str>, plan: &mut Plan) {
    let slot_group = input
        .cluster_queue
        .as_ref()
        .and_then(queue::slot_group_index);
    for flavor in input.flavors.iter().filter(|f| f.is_hearths(live_names)) {
        let name = flavor.name.as_str();
        if live_names.contains(name) {
            continue;
        }
        let referenced_in = input
            .cluster_queue
            .as_ref()
            .map(|cq| queue::groups_referencing(cq, name))
            .unwrap_or_default();
        if referenced_in.iter().any(|g| Some(*g) != slot_group) {
            plan.notes
                .push(FlavorNote::ReferencedByForeignGroup(flavor.name.clone()));
        } else if !referenced_in.is_empty() {
            // This plan removes the entry; a flavor already being deleted then goes on
            // its own once Kueue sees that.
            if !flavor.deleting {
                plan.notes
                    .push(FlavorNote::DeleteAfterEntryRemoval(flavor.name.clone()));
            }
        } else if !flavor.deleting {
            plan.flavors_to_delete.push(flavor.name.clone());
        } else if flavor.in_use {
            plan.notes
                .push(FlavorNote::HeldByKueue(flavor.name.clone()));
        }
    }
}

/// What each live cluster's status says, and whether that differs from what it says now.
fn plan_cluster_statuses(
    input: &PlanInput,
    live: &[&ObservedCluster],
    states: &BTreeMap<&str, FlavorState>,
    queue: Option<&QueuePlan>,
    plan: &mut Plan,
) {
    for cluster in live {
        let entry = queue.and_then(|q| q.entries.get(&cluster.name));
        let (kueue, condition) = cluster_status::cluster_report(
            cluster,
            states[cluster.name.as_str()],
            input.cluster_queue.is_some(),
            entry,
            &input.settings,
        );
        let cordon = CordonState::of(cluster, &input.admitted, input.now);
        let schedulable = cordon::schedulable_condition(cluster, cordon);
        let status_changed = cluster_status::status_differs(cluster, kueue.as_ref(), &condition)
            || cluster_status::condition_differs(
                cluster,
                cluster.schedulable_condition.as_ref(),
                &schedulable,
            )
            || cluster.admitted_workloads != cordon.admitted();
        plan.clusters.insert(
            cluster.name.clone(),
            ClusterSync {
                kueue,
                condition,
                schedulable,
                cordon,
                status_changed,
            },
        );
    }
}

/// The ResourceFlavor Hearth wants for the live `cluster`: the base flavor with its pool
/// labels, and the cordon taint while it is cordoned.
fn cluster_flavor(cluster: &ObservedCluster, settings: &PlanSettings) -> ResourceFlavor {
    let mut flavor = flavor_shape::with_pool_labels(
        desired_flavor(&cluster.name, &settings.namespace),
        cluster,
        &settings.pool_label_keys,
    );
    if cluster.cordon.is_some() {
        flavor.spec.node_taints = vec![cordon_taint()];
    }
    flavor
}

/// The ResourceFlavor Hearth wants for `cluster`, a FournosCluster in `namespace`.
pub fn desired_flavor(cluster: &str, namespace: &str) -> ResourceFlavor {
    ResourceFlavor {
        metadata: ObjectMeta {
            name: Some(cluster.to_owned()),
            labels: Some(BTreeMap::from([
                (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
                (CLUSTER_NAMESPACE_LABEL.to_owned(), namespace.to_owned()),
            ])),
            ..ObjectMeta::default()
        },
        spec: ResourceFlavorSpec {
            node_labels: BTreeMap::from([(CLUSTER_NODE_LABEL.to_owned(), cluster.to_owned())]),
            ..ResourceFlavorSpec::default()
        },
    }
}

/// Live clusters (not being deleted) in the order newcomers get room: oldest
/// `creationTimestamp` first (none: last), then name (unique in the namespace, so two
/// clusters created in the same second are ordered the same way on every plan).
fn live_clusters_oldest_first(clusters: &[Arc<ObservedCluster>]) -> Vec<&ObservedCluster> {
    let mut live: Vec<&ObservedCluster> = clusters
        .iter()
        .map(|c| &**c)
        .filter(|c| !c.deleting)
        .collect();
    live.sort_by(|a, b| {
        (a.created.is_none(), a.created, &a.name).cmp(&(b.created.is_none(), b.created, &b.name))
    });
    live.dedup_by(|a, b| a.name == b.name);
    live
}

/// `flavor` with the mark of a flavor adopted from the Python Hearth for the
/// FournosCluster of `uid` (see [`ObservedFlavor::under_takeover`] for why it is there).
fn adopted(mut flavor: ResourceFlavor, uid: Option<&str>) -> ResourceFlavor {
    let annotations = flavor
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    annotations.insert(
        ADOPTED_FROM_ANNOTATION.to_owned(),
        ADOPTED_FROM_PYTHON.to_owned(),
    );
    if let Some(uid) = uid.filter(|u| !u.is_empty()) {
        annotations.insert(ADOPTED_CLUSTER_UID_ANNOTATION.to_owned(), uid.to_owned());
    }
    flavor
}
