//! The snapshot: the plan's input, read from the watch caches only (no API call).
//!
//! Objects that do not decode are kept in the caches as [`DeserializeGuard`] errors so
//! that one bad object never stops a watch. Here they become:
//! - a FournosCluster: a cluster known only by its metadata, treated as drained (its
//!   flavor and entry stay, with zero quota, since its GPUs cannot be read) and never
//!   given a status write; reported in logs and once per version as a Warning Event;
//! - a ResourceFlavor: known by its metadata (name, labels, deletion, finalizers) with
//!   no node labels;
//! - the ClusterQueue: the reconcile stops with [`Error::InvalidClusterQueue`]; Hearth
//!   never rewrites an object it cannot fully read.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use hearth_api::FournosCluster;
use hearth_api::kueue::{ClusterQueue, ResourceFlavor, Workload};
use k8s_openapi::jiff::Timestamp;
use kube::Resource as _;
use kube::core::{DeserializeGuard, error_boundary::InvalidObject};
use kube::runtime::reflector::Store;

use crate::cached::{CachedCluster, CachedFlavor};
use crate::error::Error;
use crate::plan::{ObservedCluster, ObservedFlavor, PlanInput, PlanSettings};
use crate::workloads::admitted_per_flavor;

pub(crate) type ClusterObject = DeserializeGuard<CachedCluster>;
pub(crate) type QueueObject = DeserializeGuard<ClusterQueue>;
pub(crate) type FlavorObject = DeserializeGuard<CachedFlavor>;
pub(crate) type WorkloadObject = DeserializeGuard<Workload>;

/// The four watch caches.
#[derive(Clone)]
pub(crate) struct Stores {
    /// Every FournosCluster of Hearth's namespace, as the plan reads it ([`CachedCluster`]).
    pub clusters: Store<ClusterObject>,
    pub queues: Store<QueueObject>,
    /// Every ResourceFlavor, as the plan reads it ([`CachedFlavor`]).
    pub flavors: Store<FlavorObject>,
    /// Every Workload, trimmed ([`crate::workloads::trim`]).
    pub workloads: Store<WorkloadObject>,
}

impl Stores {
    /// The ClusterQueue named `name` as cached, if any.
    pub fn queue(&self, name: &str) -> Option<Arc<QueueObject>> {
        self.queues
            .state()
            .into_iter()
            .find(|q| meta_name(q.as_ref()) == name)
    }

    /// Everything the plan needs, from the caches; `queue` replaces the cached
    /// ClusterQueue (the cache may lag behind a GET after a conflict, or behind the
    /// object kueue-sync's own update returned); `creating`: the flavors whose create is
    /// under way ([`PlanInput::creating`]).
    pub fn snapshot(
        &self,
        settings: &PlanSettings,
        queue: Option<Option<Arc<QueueObject>>>,
        creating: BTreeSet<String>,
    ) -> Result<Snapshot, Error> {
        let queue = queue.unwrap_or_else(|| self.queue(&settings.cluster_queue));
        let mut snapshot = snapshot(
            settings,
            &self.clusters.state(),
            queue,
            &self.flavors.state(),
            &self.workloads.state(),
            Timestamp::now(),
        )?;
        snapshot.input.creating = creating;
        Ok(snapshot)
    }
}

/// An object that does not decode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Invalid {
    pub kind: &'static str,
    pub name: String,
    pub resource_version: Option<String>,
    pub message: String,
}

/// The observed world: the plan's input and the objects the apply step writes to.
///
/// Objects, and the plan's views of them ([`crate::cached`]), are shared with the caches,
/// not copied: a reconcile of 1000 clusters would otherwise hold a second copy of every
/// FournosCluster (measured: 4.8 of 13 MiB peak heap at 1000,
/// `bench-results/2026-11-23/MEMORY.md`).
#[derive(Clone, Debug)]
pub(crate) struct Snapshot {
    pub input: PlanInput,
    /// FournosClusters that decoded, by name.
    clusters: HashMap<String, Arc<ClusterObject>>,
    /// The ClusterQueue, if it exists (it decoded, or there is no snapshot).
    queue: Option<Arc<QueueObject>>,
    /// Every ResourceFlavor.
    flavors: Vec<Arc<FlavorObject>>,
    /// Objects skipped because they do not decode.
    pub invalid: Vec<Invalid>,
}

impl Snapshot {
    /// The FournosCluster `name`, if it is cached and decodes.
    pub fn cluster(&self, name: &str) -> Option<&CachedCluster> {
        self.clusters.get(name).and_then(|c| c.0.as_ref().ok())
    }

    /// The ClusterQueue, if it exists.
    pub fn queue(&self) -> Option<&ClusterQueue> {
        self.queue.as_ref().and_then(|q| q.0.as_ref().ok())
    }

    /// `(uid, resourceVersion)` of every ResourceFlavor by name, for delete
    /// preconditions.
    pub fn flavor_versions(&self) -> HashMap<&str, (Option<String>, Option<String>)> {
        self.flavors
            .iter()
            .map(|f| {
                let meta = f.meta();
                (
                    meta.name.as_deref().unwrap_or_default(),
                    (meta.uid.clone(), meta.resource_version.clone()),
                )
            })
            .collect()
    }

    /// Invalid objects per kind (every kind present, zero included).
    pub fn invalid_counts(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for invalid in &self.invalid {
            *counts.entry(invalid.kind).or_default() += 1;
        }
        counts
    }

    /// ResourceFlavors Hearth manages (adopted legacy flavors included).
    pub fn hearth_flavors(&self) -> usize {
        let live: std::collections::BTreeSet<&str> = self
            .input
            .clusters
            .iter()
            .filter(|c| !c.deleting)
            .map(|c| c.name.as_str())
            .collect();
        self.input
            .flavors
            .iter()
            .filter(|f| f.is_hearths(&live))
            .count()
    }
}

/// Builds the [`Snapshot`] from cached objects.
pub(crate) fn snapshot(
    settings: &PlanSettings,
    clusters: &[Arc<ClusterObject>],
    queue: Option<Arc<QueueObject>>,
    flavors: &[Arc<FlavorObject>],
    workloads: &[Arc<WorkloadObject>],
    now: Timestamp,
) -> Result<Snapshot, Error> {
    let mut invalid = Vec::new();
    let mut observed_clusters = Vec::with_capacity(clusters.len());
    let mut decoded = HashMap::with_capacity(clusters.len());
    for object in clusters {
        match &object.0 {
            Ok(cluster) => {
                observed_clusters.push(cluster.observed.clone());
                decoded.insert(meta_name(object.as_ref()), object.clone());
            }
            Err(error) => {
                observed_clusters.push(Arc::new(undecodable_cluster(error)));
                invalid.push(invalid_object("FournosCluster", error));
            }
        }
    }

    let cluster_queue = match queue.as_ref().map(|q| &q.0) {
        None => None,
        Some(Ok(queue)) => Some(queue.spec.clone()),
        Some(Err(error)) => {
            return Err(Error::InvalidClusterQueue {
                name: settings.cluster_queue.clone(),
                message: error.error.clone(),
            });
        }
    };

    let mut observed_flavors = Vec::with_capacity(flavors.len());
    for object in flavors {
        match &object.0 {
            Ok(flavor) => observed_flavors.push(flavor.observed_in(&settings.namespace)),
            Err(error) => {
                let flavor = ResourceFlavor {
                    metadata: error.metadata.clone(),
                    spec: Default::default(),
                };
                observed_flavors.push(Arc::new(ObservedFlavor::from_flavor(
                    &flavor,
                    &settings.namespace,
                )));
                invalid.push(invalid_object("ResourceFlavor", error));
            }
        }
    }

    // A Workload that does not decode is not counted: Kueue could not read it either,
    // so it holds no quota.
    let admitted = admitted_per_flavor(
        workloads.iter().filter_map(|w| w.0.as_ref().ok()),
        &observed_clusters
            .iter()
            .filter_map(|c| c.lock_workload_uid.as_deref())
            .collect(),
    );
    Ok(Snapshot {
        input: PlanInput {
            settings: settings.clone(),
            clusters: observed_clusters,
            cluster_queue,
            flavors: observed_flavors,
            creating: BTreeSet::new(),
            admitted,
            now,
        },
        clusters: decoded,
        queue,
        flavors: flavors.to_vec(),
        invalid,
    })
}

/// A FournosCluster known only by its metadata: it keeps its flavor, and the place it
/// holds with zero quota (no kubeconfig status means drained), but claims no new place.
fn undecodable_cluster(error: &InvalidObject) -> ObservedCluster {
    let cluster = FournosCluster {
        metadata: error.metadata.clone(),
        spec: Default::default(),
        status: None,
    };
    ObservedCluster {
        undecodable: true,
        ..ObservedCluster::from_cluster(&cluster)
    }
}

fn invalid_object(kind: &'static str, error: &InvalidObject) -> Invalid {
    Invalid {
        kind,
        name: error.metadata.name.clone().unwrap_or_default(),
        resource_version: error.metadata.resource_version.clone(),
        message: error.error.clone(),
    }
}

fn meta_name<K: kube::Resource>(object: &K) -> String {
    object.meta().name.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::SyncReason;
    use crate::testing::{cluster, hearth_flavor, settings};
    use serde_json::json;

    fn guard<K: serde::de::DeserializeOwned + kube::Resource>(
        value: serde_json::Value,
    ) -> Arc<DeserializeGuard<K>> {
        Arc::new(serde_json::from_value(value).unwrap())
    }

    fn valid_cluster(name: &str) -> Arc<ClusterObject> {
        let mut value = serde_json::to_value(cluster(name).gpu("a100", 8).build()).unwrap();
        value["metadata"]["resourceVersion"] = json!("7");
        guard(value)
    }

    /// A FournosCluster whose status does not decode (a newer discovery's value).
    fn broken_cluster(name: &str) -> Arc<ClusterObject> {
        guard(json!({
            "apiVersion": "fournos.dev/v1",
            "kind": "FournosCluster",
            "metadata": {"name": name, "namespace": "hearth", "resourceVersion": "9",
                         "creationTimestamp": "2026-11-01T00:00:00Z"},
            "spec": {"kubeconfigSecret": "kubeconfig-b"},
            "status": {"kubeconfigStatus": "Expiring"}
        }))
    }

    fn queue_object(spec: serde_json::Value) -> QueueObject {
        serde_json::from_value(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "fournos-queue", "resourceVersion": "42"},
            "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn decoded_objects_become_the_plan_input() {
        let flavor = hearth_flavor_object("a");
        let queue = queue_object(json!({"cohortName": "x"}));
        let snapshot = snapshot(
            &settings(),
            &[valid_cluster("a")],
            Some(Arc::new(queue)),
            &[flavor],
            &[],
            Timestamp::UNIX_EPOCH,
        )
        .unwrap();
        assert_eq!(snapshot.input.clusters.len(), 1);
        assert_eq!(snapshot.input.clusters[0].gpus[0].count, 8);
        assert!(snapshot.cluster("a").is_some());
        assert_eq!(
            snapshot
                .queue()
                .and_then(|q| q.metadata.resource_version.as_deref()),
            Some("42")
        );
        assert_eq!(
            snapshot.input.cluster_queue.as_ref().unwrap().other["cohortName"],
            json!("x")
        );
        assert_eq!(
            snapshot.flavor_versions()["a"],
            (Some("u-a".into()), Some("3".into()))
        );
        assert_eq!(snapshot.hearth_flavors(), 1);
        assert!(snapshot.invalid.is_empty());
    }

    fn hearth_flavor_object(name: &str) -> Arc<FlavorObject> {
        let mut f = serde_json::to_value(hearth_flavor(name)).unwrap();
        f["metadata"]["uid"] = json!(format!("u-{name}"));
        f["metadata"]["resourceVersion"] = json!("3");
        guard::<CachedFlavor>(f)
    }

    #[test]
    fn an_undecodable_cluster_keeps_its_place_drained_and_is_reported() {
        // "b" holds a place; "c" has none yet.
        let queue = queue_object(json!({"resourceGroups": [{
            "coveredResources": ["fournos/cluster-slot"],
            "flavors": [{"name": "b", "resources": [
                {"name": "fournos/cluster-slot", "nominalQuota": "100"},
            ]}],
        }]}));
        let snapshot = snapshot(
            &settings(),
            &[valid_cluster("a"), broken_cluster("b"), broken_cluster("c")],
            Some(Arc::new(queue)),
            &[
                hearth_flavor_object("a"),
                hearth_flavor_object("b"),
                hearth_flavor_object("c"),
            ],
            &[],
            Timestamp::UNIX_EPOCH,
        )
        .unwrap();
        let b = snapshot
            .input
            .clusters
            .iter()
            .find(|c| c.name == "b")
            .unwrap();
        assert!(b.drained() && !b.deleting && b.created.is_some());
        assert!(
            !snapshot.clusters.contains_key("b"),
            "no status write target"
        );
        assert_eq!(snapshot.invalid.len(), 2);
        assert_eq!(snapshot.invalid[0].kind, "FournosCluster");
        assert_eq!(snapshot.invalid[0].name, "b");
        assert_eq!(snapshot.invalid[0].resource_version.as_deref(), Some("9"));
        assert_eq!(snapshot.invalid_counts()["FournosCluster"], 2);

        // Its flavor is not swept as an orphan; its entry publishes zero. "c", which
        // nothing says was ever counted, claims no place.
        let plan = crate::plan::plan(&snapshot.input);
        assert!(plan.flavors_to_delete.is_empty());
        assert_eq!(plan.clusters["b"].reason(), SyncReason::Drained);
        assert_eq!(plan.clusters["a"].reason(), SyncReason::Synced);
        assert_eq!(plan.clusters["c"].reason(), SyncReason::WaitingForDiscovery);
        let flavors = &plan.cluster_queue.unwrap().resource_groups[0].flavors;
        let b_entry = flavors.iter().find(|f| f.name == "b").cloned().unwrap();
        assert!(
            b_entry.resources.iter().all(|q| q.nominal_quota.0 == "0"),
            "{b_entry:?}"
        );
        assert!(flavors.iter().all(|f| f.name != "c"));
    }

    #[test]
    fn an_undecodable_cluster_queue_stops_the_reconcile() {
        let queue = queue_object(json!({"resourceGroups": [{"flavors": "not a list"}]}));
        assert!(queue.0.is_err());
        let error = snapshot(
            &settings(),
            &[valid_cluster("a")],
            Some(Arc::new(queue)),
            &[],
            &[],
            Timestamp::UNIX_EPOCH,
        )
        .unwrap_err();
        assert_eq!(error.reason(), "InvalidClusterQueue");
    }

    #[test]
    fn an_undecodable_flavor_is_known_by_its_metadata() {
        let flavor = guard::<CachedFlavor>(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "a", "labels": {"app.kubernetes.io/managed-by": "hearth",
                                                  "fournos.dev/cluster-namespace": "hearth"}},
            "spec": {"nodeLabels": {"fournos.dev/cluster": 5}}
        }));
        assert!(flavor.0.is_err());
        let snapshot = snapshot(
            &settings(),
            &[],
            None,
            &[flavor],
            &[],
            Timestamp::UNIX_EPOCH,
        )
        .unwrap();
        assert!(snapshot.input.flavors[0].is_hearths(&Default::default()));
        assert!(snapshot.input.flavors[0].node_labels.is_empty());
        assert_eq!(snapshot.invalid[0].kind, "ResourceFlavor");
    }

    #[test]
    fn the_plan_input_shares_the_cached_views() {
        let (a, b) = (valid_cluster("a"), valid_cluster("b"));
        let flavor = hearth_flavor_object("a");
        let take = |clusters: &[Arc<ClusterObject>]| {
            snapshot(
                &settings(),
                clusters,
                None,
                std::slice::from_ref(&flavor),
                &[],
                Timestamp::UNIX_EPOCH,
            )
            .unwrap()
        };
        let cached = |object: &Arc<ClusterObject>| object.0.as_ref().unwrap().observed.clone();
        let first = take(&[a.clone(), b.clone()]);
        let again = take(&[a.clone(), b]);
        assert!(Arc::ptr_eq(&first.input.clusters[0], &cached(&a)));
        assert!(Arc::ptr_eq(
            &first.input.clusters[0],
            &again.input.clusters[0]
        ));
        assert!(Arc::ptr_eq(
            &first.input.flavors[0],
            &again.input.flavors[0]
        ));

        // "a" changed (the cache holds a new object), "b" is gone.
        let changed = valid_cluster("a");
        let next = take(std::slice::from_ref(&changed));
        assert!(Arc::ptr_eq(&next.input.clusters[0], &cached(&changed)));
        assert!(!Arc::ptr_eq(
            &first.input.clusters[0],
            &next.input.clusters[0]
        ));
        assert_eq!(*first.input.clusters[0], *next.input.clusters[0]);
        assert_eq!(next.input.clusters.len(), 1);
    }

    #[test]
    fn another_hearths_flavor_is_foreign_to_the_plan() {
        let mut theirs =
            serde_json::to_value(crate::plan::desired_flavor("x", "hearth-staging")).unwrap();
        theirs["metadata"]["uid"] = json!("u-x");
        let snapshot = snapshot(
            &settings(),
            &[],
            None,
            &[hearth_flavor_object("a"), guard::<CachedFlavor>(theirs)],
            &[],
            Timestamp::UNIX_EPOCH,
        )
        .unwrap();
        assert!(snapshot.input.flavors[0].managed_by_hearth);
        assert!(!snapshot.input.flavors[1].managed_by_hearth);
        assert_eq!(snapshot.hearth_flavors(), 1);
    }
}
