//! The `FournosJob` fields Hearth writes for a lock sentinel and the phase it reads.
//! Fournos owns this CRD; its other fields pass through untouched.

use kube::CustomResource;
use serde::{Deserialize, Serialize};

use crate::kueue::Unmodeled;

/// A FournosJob as Hearth uses it. Fournos turns a `lockOnly` job into a Workload
/// that requests all of the cluster's slots and keeps it admitted until the job is
/// deleted.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fournos.dev",
    version = "v1",
    kind = "FournosJob",
    namespaced,
    status = "FournosJobStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct FournosJobSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_only: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    #[serde(flatten)]
    pub other: Unmodeled,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FournosJobStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(flatten)]
    pub other: Unmodeled,
}

/// Phases in which a lock sentinel holds the cluster's quota.
pub const HOLDING_PHASES: &[&str] = &["Admitted", "Running"];

impl FournosJobSpec {
    /// The contract's spec for the lock sentinel of `cluster`.
    pub fn lock_sentinel(cluster: &str, owner: &str) -> Self {
        Self {
            cluster: Some(cluster.to_owned()),
            exclusive: Some(true),
            lock_only: Some(true),
            owner: Some(owner.to_owned()),
            display_name: Some(format!("Cluster lock: {cluster} (owner: {owner})")),
            other: Unmodeled::new(),
        }
    }
}
