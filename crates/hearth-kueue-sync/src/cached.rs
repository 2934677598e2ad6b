//! What kueue-sync's caches hold of a FournosCluster ([`CachedCluster`]) and of a
//! ResourceFlavor ([`CachedFlavor`]): the plan's own view of each ([`ObservedCluster`],
//! [`ObservedFlavor`]), made once when the watch delivers the object, and its identity
//! (name, namespace, uid, version, generation, age, deletion), which the cache keys, the
//! status write, its Events and the flavor deletes' preconditions need.
//!
//! The caches held the objects themselves (trimmed FournosClusters with their full
//! metadata, whole ResourceFlavors), and the snapshot kept the plan's view of each beside
//! them from round to round so that a round did not read every object again: two copies
//! of every cluster. heaptrack at 1000 clusters (bench-results/2026-11-26/MEMORY.md): 6.6
//! MiB of the 13.4 MiB live heap was the caches and 3.9 MiB the views. Now the view is
//! the cache, and every snapshot shares it (the same `Arc`) instead of copying it: with
//! the label maps packed ([`crate::plan::Labels`]), the same bench phase peaks at 9.2 MiB
//! of heap instead of 15.2, and kueue-sync's RSS after it is 19.3–19.5 MiB instead of 25.9.

use std::sync::Arc;

use hearth_api::FournosCluster;
use hearth_api::kueue::ResourceFlavor;
use hearth_api::names::CLUSTER_NAMESPACE_LABEL;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};

use crate::plan::{ObservedCluster, ObservedFlavor};

/// A FournosCluster as kueue-sync's cache holds it. It serializes as `metadata` only, and
/// the legacy conditions that [`hearth_runtime::status::apply_status`] repairs before
/// the status write.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub(crate) struct CachedCluster {
    /// Identity only ([`hearth_runtime::kit::identity`]): the labels the plan reads are in
    /// [`Self::observed`].
    pub metadata: ObjectMeta,
    /// What the plan reads, shared with every snapshot taken while the cache holds it.
    #[serde(skip)]
    pub observed: Arc<ObservedCluster>,
    /// Set only when `status.conditions` repeats a type (the Python controller's legacy):
    /// the whole list, which the status write first repairs (de-duplicated, every type of
    /// it: a repair made from kueue-sync's two conditions would drop the others').
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<LegacyConditions>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
struct LegacyConditions {
    conditions: Vec<Condition>,
}

impl From<FournosCluster> for CachedCluster {
    fn from(cluster: FournosCluster) -> Self {
        // Cloned out of the object, so no list keeps the spare room it grew while decoding.
        let observed = Arc::new(ObservedCluster::from_cluster(&cluster));
        let FournosCluster {
            metadata, status, ..
        } = cluster;
        let status = status
            .map(|s| s.conditions)
            .filter(|c| {
                hearth_api::conditions::dedup_by_type(c, |c| Some(c.type_.as_str())).is_some()
            })
            .map(|mut conditions| {
                conditions.shrink_to_fit();
                LegacyConditions { conditions }
            });
        Self {
            metadata: hearth_runtime::kit::identity(metadata),
            observed,
            status,
        }
    }
}

hearth_runtime::view_of!(CachedCluster, FournosCluster);

/// The view keeps only what the plan reads when it is made, but for the labels, which
/// the settings name ([`Self::keep_labels`]).
impl hearth_runtime::kit::ClusterKind for CachedCluster {}

impl CachedCluster {
    /// Keeps only the labels of `keys` (the pool label keys) before the cluster is cached.
    pub fn keep_labels(&mut self, keys: &[String]) {
        // The view was made from this very object a moment ago: nobody shares it yet.
        Arc::make_mut(&mut self.observed).keep_labels(keys);
    }
}

/// A ResourceFlavor as kueue-sync's cache holds it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct CachedFlavor {
    /// Identity only: the delete's preconditions are its uid and version.
    pub metadata: ObjectMeta,
    /// What the plan reads, as seen by the Hearth of the namespace the flavor's
    /// `fournos.dev/cluster-namespace` label names (the cache cannot know whose Hearth
    /// reads it; [`Self::observed_in`] answers for one).
    observed: Arc<ObservedFlavor>,
    /// That label, kept only when it makes the flavor a Hearth's (`managed_by_hearth`).
    cluster_namespace: Option<String>,
}

impl CachedFlavor {
    /// The plan's view for the Hearth whose FournosClusters live in `namespace`, as
    /// [`ObservedFlavor::from_flavor`] makes it: the cached one, shared, unless the flavor
    /// is another namespace's Hearth's.
    pub fn observed_in(&self, namespace: &str) -> Arc<ObservedFlavor> {
        if self.observed.managed_by_hearth && self.cluster_namespace.as_deref() != Some(namespace) {
            Arc::new(ObservedFlavor {
                managed_by_hearth: false,
                ..ObservedFlavor::clone(&self.observed)
            })
        } else {
            self.observed.clone()
        }
    }
}

impl From<ResourceFlavor> for CachedFlavor {
    fn from(flavor: ResourceFlavor) -> Self {
        let label = flavor
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(CLUSTER_NAMESPACE_LABEL))
            .cloned();
        // As seen from the namespace its label names: ours if managed by a Hearth at all.
        let observed = ObservedFlavor::from_flavor(&flavor, label.as_deref().unwrap_or_default());
        Self {
            cluster_namespace: label.filter(|_| observed.managed_by_hearth),
            observed: Arc::new(observed),
            metadata: hearth_runtime::kit::identity(flavor.metadata),
        }
    }
}

hearth_runtime::view_of!(CachedFlavor, ResourceFlavor);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{cluster, foreign_flavor, hearth_flavor, legacy_flavor};
    use hearth_api::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
    use kube::Resource as _;
    use serde_json::json;

    fn condition(type_: &'static str, reason: &str) -> Condition {
        Condition {
            type_: type_.to_owned(),
            status: "True".to_owned(),
            reason: reason.to_owned(),
            message: "m".to_owned(),
            observed_generation: Some(1),
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        }
    }

    /// A counted, cordoned cluster with everything other controllers and people put on
    /// it: annotations, managed fields, labels, their conditions and status fields.
    fn busy_cluster() -> FournosCluster {
        let mut cluster = cluster("a")
            .gpu("a100", 8)
            .cordoned("driver upgrade", Some(60))
            .label("fournos.dev/pool", "perf")
            .build();
        let meta = &mut cluster.metadata;
        meta.resource_version = Some("7".into());
        meta.deletion_timestamp = Some(crate::testing::at(5));
        meta.annotations = Some(
            [
                (
                    "kubectl.kubernetes.io/last-applied-configuration".to_owned(),
                    "x".repeat(10_000),
                ),
                ("note".to_owned(), "y".into()),
            ]
            .into(),
        );
        meta.labels
            .get_or_insert_with(Default::default)
            .extend((0..40).map(|i| (format!("team.example/l{i}"), "v".repeat(60))));
        meta.finalizers = Some(vec!["example.com/keep".into()]);
        meta.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl".into()),
            ..ManagedFieldsEntry::default()
        }]);
        cluster.spec.owner = Some("bob".into());
        let status = cluster.status.as_mut().unwrap();
        status.gpu_summary = Some("8x A100".into());
        status.locked = Some(true);
        status.lock_owner = Some("alice".into());
        status.admitted_workloads = Some(3);
        status.hardware.as_mut().unwrap().last_error = Some("e".repeat(300));
        status.conditions = vec![
            condition("KubeconfigValid", "Valid"),
            condition("GPUDiscovered", "Counted"),
            condition("KueueSynced", "Synced"),
            condition("Locked", "Unlocked"),
            condition("Schedulable", "Cordoned"),
        ];
        cluster
    }

    #[test]
    fn a_cluster_is_cached_as_the_plan_reads_it_with_its_identity() {
        let cluster = busy_cluster();
        let observed = ObservedCluster::from_cluster(&cluster);
        let value = serde_json::to_value(&cluster).unwrap();
        let cached: CachedCluster = serde_json::from_value(value).unwrap();
        assert_eq!(*cached.observed, observed);
        assert_eq!(observed.labels.len(), 41, "the plan still sees every label");
        assert!(observed.cordon.is_some() && observed.schedulable_condition.is_some());
        assert_eq!(
            cached.metadata,
            ObjectMeta {
                name: Some("a".into()),
                namespace: Some("hearth".into()),
                uid: Some("uid-a".into()),
                resource_version: Some("7".into()),
                generation: Some(1),
                creation_timestamp: cluster.metadata.creation_timestamp.clone(),
                deletion_timestamp: cluster.metadata.deletion_timestamp.clone(),
                ..ObjectMeta::default()
            },
            "no labels, annotations, finalizers or managed fields"
        );
        assert_eq!(CachedCluster::kind(&()), "FournosCluster");
        assert_eq!(CachedCluster::api_version(&()), "fournos.dev/v1");
        let reference = cached.object_ref(&());
        assert_eq!(
            (reference.name, reference.namespace, reference.uid),
            (
                Some("a".into()),
                Some("hearth".into()),
                Some("uid-a".into())
            )
        );
        // The status write serializes it: nothing to repair, nothing but its identity.
        assert_eq!(
            serde_json::to_value(&cached).unwrap(),
            json!({"metadata": serde_json::to_value(&cached.metadata).unwrap()})
        );
        assert_eq!(hearth_runtime::status::conditions_repair(&cached), None);
        // What does not decode as a FournosCluster does not decode as its view.
        let invalid = json!({"metadata": {"name": "a"}, "spec": {"kubeconfigSecret": 7}});
        assert!(serde_json::from_value::<CachedCluster>(invalid).is_err());
    }

    #[test]
    fn only_the_pool_labels_are_kept() {
        let mut cached = CachedCluster::from(busy_cluster());
        let keys = [
            "fournos.dev/pool".to_owned(),
            "example.com/absent".to_owned(),
        ];
        cached.keep_labels(&keys);
        let labels: Vec<_> = cached.observed.labels.iter().collect();
        assert_eq!(labels, [(&keys[0], &"perf".to_owned())]);
        cached.keep_labels(&[]);
        assert!(cached.observed.labels.is_empty());
    }

    #[test]
    fn legacy_duplicate_conditions_are_kept_whole_for_their_repair() {
        let mut cluster = busy_cluster();
        let conditions = &mut cluster.status.as_mut().unwrap().conditions;
        conditions.insert(0, condition("KubeconfigValid", "Missing"));
        let repair = hearth_runtime::status::conditions_repair(&cluster);
        assert!(repair.is_some());
        let observed = ObservedCluster::from_cluster(&cluster);
        let cached = CachedCluster::from(cluster);
        assert_eq!(*cached.observed, observed);
        assert_eq!(hearth_runtime::status::conditions_repair(&cached), repair);
    }

    #[test]
    fn a_flavor_is_cached_as_the_plan_reads_it() {
        for flavor in [hearth_flavor("a"), legacy_flavor("a"), foreign_flavor("a")] {
            let mut with_meta = flavor.clone();
            with_meta.metadata.uid = Some("u".into());
            with_meta.metadata.resource_version = Some("3".into());
            let value = serde_json::to_value(&with_meta).unwrap();
            let cached: CachedFlavor = serde_json::from_value(value).unwrap();
            assert_eq!(
                *cached.observed_in("hearth"),
                ObservedFlavor::from_flavor(&flavor, "hearth")
            );
            assert!(Arc::ptr_eq(&cached.observed_in("hearth"), &cached.observed));
            assert!(cached.metadata.labels.is_none() && cached.metadata.finalizers.is_none());
            assert_eq!(
                (
                    cached.meta().uid.as_deref(),
                    cached.meta().resource_version.as_deref()
                ),
                (Some("u"), Some("3"))
            );
        }
        assert_eq!(CachedFlavor::kind(&()), "ResourceFlavor");
        let invalid = json!({"metadata": {"name": "a"}, "spec": {"nodeLabels": {"k": 5}}});
        assert!(serde_json::from_value::<CachedFlavor>(invalid).is_err());
    }

    #[test]
    fn another_namespaces_hearth_flavor_is_not_ours() {
        let theirs = crate::plan::desired_flavor("a", "hearth-staging");
        let cached = CachedFlavor::from(theirs.clone());
        for namespace in ["hearth", "hearth-staging"] {
            assert_eq!(
                *cached.observed_in(namespace),
                ObservedFlavor::from_flavor(&theirs, namespace),
                "{namespace}"
            );
        }
        assert!(!cached.observed_in("hearth").managed_by_hearth);
        assert!(cached.observed_in("hearth-staging").managed_by_hearth);

        // Managed by Hearth, but no namespace says whose: nobody's.
        let mut unnamed = theirs;
        let labels = unnamed.metadata.labels.as_mut().unwrap();
        labels.remove(CLUSTER_NAMESPACE_LABEL);
        assert_eq!(
            labels.get(MANAGED_BY_LABEL).map(String::as_str),
            Some(MANAGED_BY_VALUE)
        );
        let cached = CachedFlavor::from(unnamed.clone());
        assert_eq!(
            *cached.observed_in("hearth"),
            ObservedFlavor::from_flavor(&unnamed, "hearth")
        );
        assert!(!cached.observed_in("").managed_by_hearth);
    }
}
