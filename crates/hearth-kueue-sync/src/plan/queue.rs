//! The ClusterQueue part of the plan: the new spec, computed from the current one, and
//! what each cluster got in it. The rules are in the parent module's documentation.

use std::collections::{BTreeMap, BTreeSet};

use hearth_api::GpuInfo;
use hearth_api::cluster::MAX_GPU_MODELS;
use hearth_api::kueue::{
    ClusterQueueSpec, FlavorQuotas, ResourceGroup, ResourceQuota, quantity_to_i64,
};
use hearth_api::names::CLUSTER_SLOT_RESOURCE;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::Value;

use super::common::{
    MAX_COVERED_RESOURCES, MAX_FLAVORS_PER_GROUP, MAX_FLAVORS_PER_QUEUE, MAX_RESOURCE_GROUPS,
    PlanSettings, is_resource_name,
};
use super::input::ObservedCluster;

/// A live cluster whose flavor is ready or being created and that has a claim on the
/// queue (discovery counted it, or it is under takeover): it may get a place.
pub(crate) struct Candidate<'a> {
    pub name: &'a str,
    pub drained: bool,
    /// Its flavor is listed in the slot group of the current ClusterQueue: it keeps that
    /// place.
    pub holds: bool,
    /// Its flavor is in the cache: a place becomes an entry. Otherwise it is reserved.
    pub ready: bool,
    /// Count per valid GPU resource (models sharing a short name summed).
    pub gpus: BTreeMap<String, i64>,
    /// Count per GPU resource whose name is not a valid resource name.
    pub invalid_gpus: BTreeMap<String, i64>,
    /// Count per GPU resource beyond the first [`MAX_GPU_MODELS`] (in name order).
    pub beyond_model_limit: BTreeMap<String, i64>,
}

impl<'a> Candidate<'a> {
    /// `cluster`, publishing `gpus` (see [`ObservedCluster::quota_gpus`]).
    pub fn new(
        cluster: &'a ObservedCluster,
        gpus: &[GpuInfo],
        holds: bool,
        ready: bool,
        settings: &PlanSettings,
    ) -> Self {
        let mut per_resource: BTreeMap<String, i64> = BTreeMap::new();
        for gpu in gpus {
            let count = per_resource
                .entry(settings.gpu_resource(&gpu.short_name))
                .or_default();
            *count = count.saturating_add(gpu.count.max(0));
        }
        let mut valid = BTreeMap::new();
        let mut invalid_gpus = BTreeMap::new();
        let mut beyond_model_limit = BTreeMap::new();
        for (i, (resource, count)) in per_resource.into_iter().enumerate() {
            let into = if i >= MAX_GPU_MODELS {
                &mut beyond_model_limit
            } else if is_resource_name(&resource) {
                &mut valid
            } else {
                &mut invalid_gpus
            };
            into.insert(resource, count);
        }
        Self {
            name: &cluster.name,
            drained: cluster.drained(),
            holds,
            ready,
            gpus: valid,
            invalid_gpus,
            beyond_model_limit,
        }
    }
}

pub(crate) struct QueueInput<'a> {
    pub current: &'a ClusterQueueSpec,
    /// Oldest first (`creationTimestamp`, then name).
    pub candidates: &'a [Candidate<'a>],
    /// Whether the flavor of that name is Hearth's.
    pub is_hearths: &'a dyn Fn(&str) -> bool,
    pub settings: &'a PlanSettings,
}

pub(crate) struct QueuePlan {
    /// The new spec (possibly equal to the current one).
    pub spec: ClusterQueueSpec,
    /// What each candidate got.
    pub entries: BTreeMap<String, EntryOutcome>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum EntryOutcome {
    /// The cluster has an entry publishing `quotas` (slot resource and own GPU
    /// resources); `left_out` are its GPU resources that could not be published.
    Published {
        quotas: BTreeMap<String, i64>,
        left_out: Vec<LeftOut>,
    },
    /// No entry yet: the cluster has a place, but its flavor is not in the cache. The
    /// place (and the room its models need among the covered resources) is kept for it.
    Reserved,
    /// No entry: no room under Kueue's limits; `holders` have the places.
    NoRoom { why: NoRoom, holders: Holders },
    /// No entry: discovery has never counted the cluster (and it is not under takeover),
    /// so it claims no place.
    NotCounted,
    /// No entry: resource group `group` (not the slot group) already lists the flavor.
    FlavorInOtherGroup { group: usize },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LeftOut {
    pub resource: String,
    pub count: i64,
    pub why: LeftOutWhy,
}

/// Who holds the places a waiting cluster cannot get: how many of Hearth's clusters, and
/// the first few of them (the oldest holders), so the message stays short and stable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Holders {
    pub count: usize,
    pub first: Vec<String>,
}

/// How many holders a waiting cluster's message names.
pub(crate) const HOLDERS_NAMED: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeftOutWhy {
    /// The group already covers [`MAX_COVERED_RESOURCES`] resources.
    TooManyResources,
    /// Resource group `.0` covers it; a resource may belong to one group only.
    CoveredByGroup(usize),
    /// Not a valid resource name.
    InvalidName,
    /// The cluster has more than [`MAX_GPU_MODELS`] models; this one is beyond them.
    TooManyModels,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NoRoom {
    /// No group covers the slot resource and the queue has [`MAX_RESOURCE_GROUPS`].
    NoGroup,
    /// The slot group holds [`MAX_FLAVORS_PER_GROUP`] flavors, `foreign` of them not
    /// Hearth's, the rest older clusters.
    GroupFull { foreign: usize },
    /// The queue holds [`MAX_FLAVORS_PER_QUEUE`] flavors, `foreign` of them not Hearth's.
    QueueFull { foreign: usize },
}

/// Index of the resource group whose entries Hearth manages: the first covering
/// `fournos/cluster-slot`.
pub(crate) fn slot_group_index(spec: &ClusterQueueSpec) -> Option<usize> {
    spec.resource_groups.iter().position(|g| {
        g.covered_resources
            .iter()
            .any(|r| r == CLUSTER_SLOT_RESOURCE)
    })
}

/// Indexes of the resource groups that list flavor `name`.
pub(crate) fn groups_referencing(spec: &ClusterQueueSpec, name: &str) -> Vec<usize> {
    spec.resource_groups
        .iter()
        .enumerate()
        .filter(|(_, g)| g.flavors.iter().any(|f| f.name == name))
        .map(|(i, _)| i)
        .collect()
}

/// The new ClusterQueue spec and what each candidate got, step by step: the other
/// groups, the room, the selection, the covered resources, the quotas, the flavors.
pub(crate) fn plan_cluster_queue(input: &QueueInput<'_>) -> QueuePlan {
    let current = input.current;
    let slot_index = slot_group_index(current);
    let others = OtherGroups::of(current, slot_index);
    let new_group = ResourceGroup::default();
    let group = slot_index.map_or(&new_group, |i| &current.resource_groups[i]);
    let foreign: Vec<&FlavorQuotas> = group
        .flavors
        .iter()
        .filter(|f| !(input.is_hearths)(&f.name))
        .collect();

    let room = room(current, slot_index, foreign.len(), others.flavor_count);
    let mut entries = BTreeMap::new();
    let selected = select(input.candidates, &others, room, &mut entries);
    let before_gpus = covered_before_gpus(group, &foreign, input.settings);
    let published = publish(
        &selected,
        input.candidates,
        &group.covered_resources,
        &others,
        before_gpus.clone(),
        input.settings,
        &mut entries,
    );
    // What reservations count among the covered resources is not written: no entry
    // publishes it yet.
    let mut covered = before_gpus;
    covered.extend(published.values().flat_map(|q| q.keys().cloned()));
    let covered: Vec<String> = covered.into_iter().collect();
    let entered: Vec<&Candidate<'_>> = selected.iter().copied().filter(|c| c.ready).collect();
    let flavors = arrange_flavors(group, &entered, input.is_hearths, &covered, &published);
    QueuePlan {
        spec: with_slot_group(current, slot_index, covered, flavors),
        entries,
    }
}

/// What the groups other than the slot group hold: their flavors and resources are off
/// limits (each mapped to the first group that lists it).
struct OtherGroups<'a> {
    flavors: BTreeMap<&'a str, usize>,
    resources: BTreeMap<&'a str, usize>,
    flavor_count: usize,
}

impl<'a> OtherGroups<'a> {
    fn of(current: &'a ClusterQueueSpec, slot_index: Option<usize>) -> Self {
        let mut others = Self {
            flavors: BTreeMap::new(),
            resources: BTreeMap::new(),
            flavor_count: 0,
        };
        for (i, group) in current.resource_groups.iter().enumerate() {
            if Some(i) == slot_index {
                continue;
            }
            others.flavor_count += group.flavors.len();
            for flavor in &group.flavors {
                others.flavors.entry(&flavor.name).or_insert(i);
            }
            for resource in &group.covered_resources {
                others.resources.entry(resource).or_insert(i);
            }
        }
        others
    }
}

/// Room for Hearth's entries under Kueue's limits, and what a cluster left without
/// one is told; `Err` when there can be no slot group at all.
fn room(
    current: &ClusterQueueSpec,
    slot_index: Option<usize>,
    foreign: usize,
    other_groups_flavors: usize,
) -> Result<(usize, NoRoom), NoRoom> {
    if slot_index.is_none() && current.resource_groups.len() >= MAX_RESOURCE_GROUPS {
        return Err(NoRoom::NoGroup);
    }
    let in_group = MAX_FLAVORS_PER_GROUP.saturating_sub(foreign);
    let in_queue = MAX_FLAVORS_PER_QUEUE.saturating_sub(other_groups_flavors + foreign);
    Ok(if in_group <= in_queue {
        (in_group, NoRoom::GroupFull { foreign })
    } else {
        (
            in_queue,
            NoRoom::QueueFull {
                foreign: other_groups_flavors + foreign,
            },
        )
    })
}

/// The candidates that get a place (an entry, or a reservation while their flavor is
/// not ready). Quota, once given, stays: the clusters that hold a place keep it, and only
/// the room left goes to newcomers, oldest first, whether their flavor is ready or not.
/// So nothing that arrives later, or becomes a candidate later, or sorts earlier,
/// displaces a holder, and which flavors the cache shows yet decides nothing. The
/// others' outcomes go into `entries`; the result is holders first, then newcomers,
/// each in age order.
fn select<'c>(
    candidates: &'c [Candidate<'c>],
    others: &OtherGroups<'_>,
    room: Result<(usize, NoRoom), NoRoom>,
    entries: &mut BTreeMap<String, EntryOutcome>,
) -> Vec<&'c Candidate<'c>> {
    let mut selected: Vec<&Candidate<'_>> = Vec::new();
    let mut waiting = Vec::new();
    let holders_first = candidates
        .iter()
        .filter(|c| c.holds)
        .chain(candidates.iter().filter(|c| !c.holds));
    for candidate in holders_first {
        if let Some(&group) = others.flavors.get(candidate.name) {
            entries.insert(
                candidate.name.to_owned(),
                EntryOutcome::FlavorInOtherGroup { group },
            );
            continue;
        }
        match room {
            Ok((room, _)) if selected.len() < room => selected.push(candidate),
            Ok((_, full)) | Err(full) => waiting.push((candidate.name, full)),
        }
    }
    let holders = Holders {
        count: selected.len(),
        first: selected
            .iter()
            .take(HOLDERS_NAMED)
            .map(|c| c.name.to_owned())
            .collect(),
    };
    for (name, why) in waiting {
        entries.insert(
            name.to_owned(),
            EntryOutcome::NoRoom {
                why,
                holders: holders.clone(),
            },
        );
    }
    selected
}

/// The slot resource or a GPU resource: what Hearth adds, and so may drop.
fn hearth_namespaced(resource: &str, settings: &PlanSettings) -> bool {
    resource == CLUSTER_SLOT_RESOURCE
        || (!settings.gpu_resource_prefix.is_empty()
            && resource.starts_with(&settings.gpu_resource_prefix))
}

/// Covered resources before the clusters' GPUs: the slot resource, and what is not
/// Hearth's to drop (the group's other resources, what foreign flavors deliberately list).
fn covered_before_gpus(
    group: &ResourceGroup,
    foreign: &[&FlavorQuotas],
    settings: &PlanSettings,
) -> BTreeSet<String> {
    let mut covered: BTreeSet<String> = BTreeSet::from([CLUSTER_SLOT_RESOURCE.to_owned()]);
    covered.extend(
        group
            .covered_resources
            .iter()
            .filter(|r| !hearth_namespaced(r, settings))
            .cloned(),
    );
    for flavor in foreign {
        covered.extend(
            flavor
                .resources
                .iter()
                .filter(|q| !(hearth_namespaced(&q.name, settings) && is_plain_zero(q)))
                .map(|q| q.name.clone()),
        );
    }
    covered
}

/// The quotas of each selected cluster with a ready flavor, adding GPU resources to
/// `covered` (which starts as [`covered_before_gpus`]) while there is room: first the
/// models holders publish now (already covered; a newcomer never takes them), then every
/// other model cluster by cluster in age order, reservations included, so that the room
/// a reserved cluster's models need is kept for it. Each cluster's outcome goes into
/// `entries`. `selected` has the places (holders first, then newcomers, each in age
/// order: [`select`]), `by_age` is every candidate in age order, `covered_now` the slot
/// group's covered resources now.
fn publish<'c>(
    selected: &[&'c Candidate<'c>],
    by_age: &'c [Candidate<'c>],
    covered_now: &[String],
    others: &OtherGroups<'_>,
    mut covered: BTreeSet<String>,
    settings: &PlanSettings,
    entries: &mut BTreeMap<String, EntryOutcome>,
) -> BTreeMap<&'c str, BTreeMap<String, i64>> {
    let fits = |covered: &BTreeSet<String>, resource: &str| {
        covered.contains(resource) || covered.len() < MAX_COVERED_RESOURCES
    };
    for holder in selected.iter().filter(|c| c.holds) {
        for resource in holder.gpus.keys() {
            if covered_now.contains(resource)
                && !others.resources.contains_key(resource.as_str())
                && fits(&covered, resource)
            {
                covered.insert(resource.clone());
            }
        }
    }
    let selected: BTreeSet<&str> = selected.iter().map(|c| c.name).collect();
    let slots = settings.cluster_slots.max(0);
    let mut published = BTreeMap::new();
    for candidate in by_age.iter().filter(|c| selected.contains(c.name)) {
        let quota = |n: i64| if candidate.drained { 0 } else { n };
        let mut quotas = BTreeMap::from([(CLUSTER_SLOT_RESOURCE.to_owned(), quota(slots))]);
        let mut left_out = Vec::new();
        let mut leave_out = |resource: &String, count: i64, why| {
            let resource = resource.clone();
            left_out.push(LeftOut {
                resource,
                count,
                why,
            });
        };
        for (resource, &count) in &candidate.invalid_gpus {
            leave_out(resource, count, LeftOutWhy::InvalidName);
        }
        for (resource, &count) in &candidate.beyond_model_limit {
            leave_out(resource, count, LeftOutWhy::TooManyModels);
        }
        for (resource, &count) in &candidate.gpus {
            if let Some(&group) = others.resources.get(resource.as_str()) {
                leave_out(resource, count, LeftOutWhy::CoveredByGroup(group));
            } else if fits(&covered, resource) {
                covered.insert(resource.clone());
                quotas.insert(resource.clone(), quota(count));
            } else {
                leave_out(resource, count, LeftOutWhy::TooManyResources);
            }
        }
        if !candidate.ready {
            entries.insert(candidate.name.to_owned(), EntryOutcome::Reserved);
            continue;
        }
        published.insert(candidate.name, quotas.clone());
        entries.insert(
            candidate.name.to_owned(),
            EntryOutcome::Published { quotas, left_out },
        );
    }
    published
}

/// The slot group's flavors: existing entries keep their place, new ones (of `selected`,
/// the clusters with a place and a ready flavor) are appended in selection order (oldest
/// first); every one lists every covered resource.
fn arrange_flavors(
    group: &ResourceGroup,
    selected: &[&Candidate<'_>],
    is_hearths: &dyn Fn(&str) -> bool,
    covered: &[String],
    published: &BTreeMap<&str, BTreeMap<String, i64>>,
) -> Vec<FlavorQuotas> {
    let mut flavors = Vec::with_capacity(group.flavors.len() + selected.len());
    let mut placed: BTreeSet<&str> = BTreeSet::new();
    for flavor in &group.flavors {
        if !is_hearths(&flavor.name) {
            flavors.push(foreign_entry(flavor, covered));
        } else if let Some(quotas) = published.get(flavor.name.as_str())
            && placed.insert(&flavor.name)
        {
            flavors.push(hearth_entry(&flavor.name, Some(flavor), covered, quotas));
        }
    }
    for candidate in selected {
        if placed.insert(candidate.name) {
            flavors.push(hearth_entry(
                candidate.name,
                None,
                covered,
                &published[candidate.name],
            ));
        }
    }
    flavors
}

/// `current` with the slot group holding `covered` and `flavors`: added when there was
/// none, removed when it is left without flavors (Kueue requires at least one).
fn with_slot_group(
    current: &ClusterQueueSpec,
    slot_index: Option<usize>,
    covered: Vec<String>,
    flavors: Vec<FlavorQuotas>,
) -> ClusterQueueSpec {
    let mut spec = current.clone();
    match slot_index {
        Some(i) if flavors.is_empty() => {
            spec.resource_groups.remove(i);
        }
        Some(i) => {
            let group = &mut spec.resource_groups[i];
            group.covered_resources = covered;
            group.flavors = flavors;
        }
        None if flavors.is_empty() => {}
        None => spec.resource_groups.push(ResourceGroup {
            covered_resources: covered,
            flavors,
            other: Default::default(),
        }),
    }
    spec
}

/// `{name, nominalQuota: 0}` and nothing else: what Hearth adds to foreign flavors.
fn is_plain_zero(quota: &ResourceQuota) -> bool {
    quota.other.is_empty() && quantity_to_i64(&quota.nominal_quota) == Some(0)
}

fn plain_zero(resource: &str) -> ResourceQuota {
    ResourceQuota {
        name: resource.to_owned(),
        nominal_quota: Quantity("0".into()),
        other: Default::default(),
    }
}

/// A foreign flavor: its own entries as they are, in `covered` order, and a plain zero
/// for each covered resource it lacks. Its entries outside `covered` can only be plain
/// zeros of Hearth-namespaced resources (anything else is covered): they go.
fn foreign_entry(flavor: &FlavorQuotas, covered: &[String]) -> FlavorQuotas {
    FlavorQuotas {
        name: flavor.name.clone(),
        resources: covered
            .iter()
            .map(|r| {
                flavor
                    .resources
                    .iter()
                    .find(|q| &q.name == r)
                    .cloned()
                    .unwrap_or_else(|| plain_zero(r))
            })
            .collect(),
        other: flavor.other.clone(),
    }
}

/// A Hearth entry: `quotas`, zero for the other covered resources. Keeps the spelling
/// of unchanged quantities and the fields Hearth does not set.
fn hearth_entry(
    name: &str,
    existing: Option<&FlavorQuotas>,
    covered: &[String],
    quotas: &BTreeMap<String, i64>,
) -> FlavorQuotas {
    let resources = covered
        .iter()
        .map(|resource| {
            let value = quotas.get(resource).copied().unwrap_or(0);
            let old = existing.and_then(|e| e.resources.iter().find(|q| &q.name == resource));
            let nominal_quota = match old {
                Some(q) if quantity_to_i64(&q.nominal_quota) == Some(value) => {
                    q.nominal_quota.clone()
                }
                _ => Quantity(value.to_string()),
            };
            let mut other = old.map(|q| q.other.clone()).unwrap_or_default();
            if let Some(limit) = other.get_mut("lendingLimit")
                && quantity_value(limit).is_some_and(|l| l > value)
            {
                *limit = Value::String(value.to_string());
            }
            ResourceQuota {
                name: resource.clone(),
                nominal_quota,
                other,
            }
        })
        .collect();
    FlavorQuotas {
        name: name.to_owned(),
        resources,
        other: existing.map(|e| e.other.clone()).unwrap_or_default(),
    }
}

/// The integer value of a quantity held as raw JSON (`"8"` or `8`).
fn quantity_value(value: &Value) -> Option<i64> {
    let quantity: Quantity = serde_json::from_value(value.clone()).ok()?;
    quantity_to_i64(&quantity)
}

/// Whether two quantities mean the same; integers compare numerically, anything else
/// by spelling.
pub(crate) fn same_quantity(a: &Quantity, b: &Quantity) -> bool {
    match (quantity_to_i64(a), quantity_to_i64(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a.0 == b.0,
    }
}

/// Whether writing `b` over `a` would change nothing Kueue cares about: equal except
/// for the spelling of integer quantities.
pub(crate) fn equivalent_specs(a: &ClusterQueueSpec, b: &ClusterQueueSpec) -> bool {
    a.other == b.other
        && a.resource_groups.len() == b.resource_groups.len()
        && a.resource_groups
            .iter()
            .zip(&b.resource_groups)
            .all(|(a, b)| {
                a.covered_resources == b.covered_resources
                    && a.other == b.other
                    && a.flavors.len() == b.flavors.len()
                    && a.flavors.iter().zip(&b.flavors).all(|(a, b)| {
                        a.name == b.name
                            && a.other == b.other
                            && a.resources.len() == b.resources.len()
                            && a.resources.iter().zip(&b.resources).all(|(a, b)| {
                                a.name == b.name
                                    && a.other == b.other
                                    && same_quantity(&a.nominal_quota, &b.nominal_quota)
                            })
                    })
            })
}
