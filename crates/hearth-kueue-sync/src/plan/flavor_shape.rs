//! What a cluster's ResourceFlavor carries besides its name and Hearth's labels: the pool
//! labels copied from the FournosCluster (`HEARTH_POOL_LABEL_KEYS`), and whether its flavor
//! needs a repair to carry them.
//!
//! **Pools.** Every key of the setting goes on every Hearth flavor: the cluster's value of
//! that label, or [`POOL_LABEL_ABSENT`] where the cluster lacks it. Kueue (≥ 0.18.6) ignores
//! a node-selector key that a flavor does not carry, so a flavor without the key would match
//! a Workload asking for any pool. A value that cannot be a label value (the API server
//! refuses those on metadata, so this is defence, not a path anyone takes) becomes
//! [`POOL_LABEL_ABSENT`] too, and the cluster reports `InvalidPoolLabel`. The keys applied
//! are recorded on the flavor ([`POOL_LABEL_KEYS_ANNOTATION`]) so that a key taken off the
//! setting is taken off the flavor as well (server-side apply drops what kueue-sync applied
//! before and leaves out now).

use std::collections::BTreeMap;

use hearth_api::kueue::ResourceFlavor;
use hearth_api::names::{
    CLUSTER_NODE_LABEL, CORDON_TAINT_KEY, POOL_LABEL_ABSENT, POOL_LABEL_KEYS_ANNOTATION,
};

use super::common::is_label_value;
use super::input::{ObservedCluster, ObservedFlavor};

/// The pool labels of one cluster's flavor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PoolLabels {
    /// Key → value, one per configured key.
    pub labels: BTreeMap<String, String>,
    /// Keys whose value on the cluster is not a label value (the flavor carries
    /// [`POOL_LABEL_ABSENT`] for them).
    pub invalid: Vec<String>,
}

/// The pool labels of `cluster`'s flavor under the configured `keys`.
pub(crate) fn pool_labels(cluster: &ObservedCluster, keys: &[String]) -> PoolLabels {
    let mut out = PoolLabels::default();
    for key in keys {
        let value = match cluster.labels.get(key) {
            Some(v) if !v.is_empty() && is_label_value(v) => v.clone(),
            Some(v) if !v.is_empty() => {
                out.invalid.push(key.clone());
                POOL_LABEL_ABSENT.to_owned()
            }
            _ => POOL_LABEL_ABSENT.to_owned(),
        };
        out.labels.insert(key.clone(), value);
    }
    out
}

/// `flavor` (Hearth's base flavor of `cluster`) with the pool labels and the annotation
/// recording the keys.
pub(crate) fn with_pool_labels(
    mut flavor: ResourceFlavor,
    cluster: &ObservedCluster,
    keys: &[String],
) -> ResourceFlavor {
    if keys.is_empty() {
        return flavor;
    }
    flavor
        .spec
        .node_labels
        .extend(pool_labels(cluster, keys).labels);
    flavor
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(POOL_LABEL_KEYS_ANNOTATION.to_owned(), keys.join(","));
    flavor
}

/// Whether the observed flavor of `cluster` differs from `desired` in what kueue-sync
/// owns of it: the cluster node label, the pool labels and the keys recorded, the cordon
/// taint.
pub(crate) fn needs_repair(observed: &ObservedFlavor, desired: &ResourceFlavor) -> bool {
    let wanted = &desired.spec.node_labels;
    let recorded = desired
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(POOL_LABEL_KEYS_ANNOTATION));
    let tainted = desired
        .spec
        .node_taints
        .iter()
        .any(|t| t.key == CORDON_TAINT_KEY);
    observed.node_labels.get(CLUSTER_NODE_LABEL) != wanted.get(CLUSTER_NODE_LABEL)
        || wanted
            .iter()
            .any(|(k, v)| observed.node_labels.get(k) != Some(v))
        || observed.pool_label_keys.as_ref() != recorded
        || observed.cordon_tainted != tainted
}
