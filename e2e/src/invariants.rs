//! Reading what Hearth did, the same way in every e2e test and in the chaos tool: queue
//! entries, queue validity (the one Kueue oracle, [`hearth_api::kueue_validity`]),
//! conditions, and sentinels per cluster.
//!
//! These are checks, not waits: a test polls them with [`crate::process::until`].

use std::collections::BTreeMap;

use hearth_api::FournosCluster;
use hearth_api::kueue::{ClusterQueue, FlavorQuotas, Workload, quantity_to_i64};
use hearth_api::names::CLUSTER_LOCK_LABEL;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, ListParams};

/// What Kueue (CRD rules and its webhook) would refuse in `cq`; empty when it is valid. The
/// plane runs the webhook too, so a refused write fails where it is made; this names why.
pub fn kueue_problems(cq: &ClusterQueue) -> Vec<String> {
    hearth_api::kueue_validity::problems(&cq.spec)
}

/// Whether Kueue says the ClusterQueue is `Active`.
pub fn is_active(cq: &ClusterQueue) -> bool {
    cq.status
        .as_ref()
        .is_some_and(|s| is_true(&s.conditions, "Active"))
}

/// A flavor entry's quota, resource → integer (`-1` for a quantity that is not one).
pub fn quota(flavor: &FlavorQuotas) -> BTreeMap<String, i64> {
    flavor
        .resources
        .iter()
        .map(|q| {
            (
                q.name.clone(),
                quantity_to_i64(&q.nominal_quota).unwrap_or(-1),
            )
        })
        .collect()
}

/// Flavor entry `flavor` in any of the queue's groups (the first, when doubled).
pub fn flavor_entry<'a>(cq: &'a ClusterQueue, flavor: &str) -> Option<&'a FlavorQuotas> {
    cq.spec
        .resource_groups
        .iter()
        .flat_map(|g| &g.flavors)
        .find(|f| f.name == flavor)
}

/// The quota of flavor entry `flavor` in any of the queue's groups.
pub fn entry(cq: &ClusterQueue, flavor: &str) -> Option<BTreeMap<String, i64>> {
    flavor_entry(cq, flavor).map(quota)
}

/// The resources of flavor entry `flavor` in the order written (Kueue wants
/// `coveredResources` order).
pub fn resource_order(cq: &ClusterQueue, flavor: &str) -> Vec<String> {
    flavor_entry(cq, flavor)
        .map(|f| f.resources.iter().map(|r| r.name.clone()).collect())
        .unwrap_or_default()
}

/// The first resource group's `coveredResources`: the slot group Hearth keeps.
pub fn covered(cq: &ClusterQueue) -> Vec<String> {
    cq.spec
        .resource_groups
        .first()
        .map(|g| g.covered_resources.clone())
        .unwrap_or_default()
}

/// Every flavor entry of the queue, flavor → its quotas in every group that lists it (more
/// than one is a doubled entry).
pub fn entries(cq: &ClusterQueue) -> BTreeMap<String, Vec<BTreeMap<String, i64>>> {
    let mut out: BTreeMap<String, Vec<BTreeMap<String, i64>>> = BTreeMap::new();
    for f in cq.spec.resource_groups.iter().flat_map(|g| &g.flavors) {
        out.entry(f.name.clone()).or_default().push(quota(f));
    }
    out
}

/// A quota without its zeros: what a flavor actually offers.
pub fn nonzero(quota: BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    quota.into_iter().filter(|(_, n)| *n != 0).collect()
}

/// The condition of `type_`, by the one rule of `hearth_api::conditions`.
pub use hearth_api::conditions::{find as condition, is_true};

/// A FournosCluster's condition of `type_`.
pub fn cluster_condition<'a>(fc: &'a FournosCluster, type_: &str) -> Option<&'a Condition> {
    condition(&fc.status.as_ref()?.conditions, type_)
}

/// A Workload's condition of `type_`.
pub fn workload_condition<'a>(w: &'a Workload, type_: &str) -> Option<&'a Condition> {
    condition(&w.status.as_ref()?.conditions, type_)
}

/// Whether Kueue said `False` of the Workload's condition `type_`: e.g. `QuotaReserved`
/// once it has looked and found no room (not merely not yet looked).
pub fn workload_condition_false(w: &Workload, type_: &str) -> bool {
    workload_condition(w, type_).is_some_and(|c| c.status == "False")
}

/// Whether the Workload's condition `type_` is `True` (`Admitted`, `QuotaReserved`, …).
pub fn workload_is(w: &Workload, type_: &str) -> bool {
    w.status
        .as_ref()
        .is_some_and(|s| is_true(&s.conditions, type_))
}

/// When discovery last probed the cluster successfully (`status.hardware.lastDiscovery`).
pub fn last_discovery(fc: &FournosCluster) -> Option<Time> {
    fc.status
        .as_ref()?
        .hardware
        .as_ref()?
        .last_discovery
        .clone()
}

/// Sentinel Workloads per cluster (by the contract's lock label) in `workloads`' namespace.
pub async fn sentinel_counts(workloads: &Api<Workload>) -> kube::Result<BTreeMap<String, usize>> {
    Ok(workloads
        .list(&ListParams::default().labels(CLUSTER_LOCK_LABEL))
        .await?
        .items
        .into_iter()
        .filter_map(|wl| wl.metadata.labels?.get(CLUSTER_LOCK_LABEL).cloned())
        .fold(BTreeMap::new(), |mut m, c| {
            *m.entry(c).or_insert(0) += 1;
            m
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_count_doubled_flavors_and_zeros_drop() {
        let cq: ClusterQueue = serde_json::from_value(serde_json::json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": { "name": "q" },
            "spec": { "resourceGroups": [
                { "coveredResources": ["a", "b"], "flavors": [
                    { "name": "f", "resources": [
                        { "name": "a", "nominalQuota": "2" }, { "name": "b", "nominalQuota": 0 }
                    ] },
                ] },
                { "coveredResources": ["c"], "flavors": [
                    { "name": "f", "resources": [{ "name": "c", "nominalQuota": "1k" }] },
                ] },
            ] },
        }))
        .unwrap();
        assert_eq!(entries(&cq)["f"].len(), 2);
        assert_eq!(
            nonzero(entry(&cq, "f").unwrap()),
            BTreeMap::from([("a".to_owned(), 2)])
        );
        assert_eq!(resource_order(&cq, "f"), ["a", "b"]);
        assert_eq!(covered(&cq), ["a", "b"]);
        assert!(!kueue_problems(&cq).is_empty(), "flavor f in two groups");
        assert!(!is_active(&cq));
    }
}
