//! What discovery keeps of a FournosCluster in its cache: its own status fields, the two
//! lock fields that hold offboarding back, the spec and metadata it reads. The rest of
//! the status (kueue-sync's and lock-manager's fields and conditions) and the
//! annotations (`kubectl.kubernetes.io/last-applied-configuration` can be as large as
//! the object) never reach its heap.

use hearth_api::FournosCluster;
use hearth_api::conditions::retain_types;
use hearth_api::names::condition_types::{GPU_DISCOVERED, KUBECONFIG_VALID};

/// Trims a watched FournosCluster to what discovery reads (for
/// [`hearth_runtime::kit::WatchContext::fournos_clusters_trimmed`]).
pub fn trim(cluster: &mut FournosCluster) {
    cluster.metadata.annotations = None;
    let Some(status) = &mut cluster.status else {
        return;
    };
    // `locked` and `lockOwner` stay: a locked cluster's offboarding is held back.
    status.kueue = None;
    status.lock_job_name = None;
    status.lock_job_uid = None;
    status.owner_set_at = None;
    status.lock_expires_at = None;
    status.slot_holders = Vec::new();
    status.expired_lock = None;
    status.admitted_workloads = None;
    retain_types(&mut status.conditions, &[KUBECONFIG_VALID, GPU_DISCOVERED]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_api::{FournosClusterSpec, FournosClusterStatus, KueueStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    fn condition(type_: &'static str) -> Condition {
        use hearth_api::conditions::{DesiredCondition, Status, next_condition};
        let epoch = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        );
        next_condition(
            None,
            &DesiredCondition::new(type_, Status::True, "", ""),
            None,
            &epoch,
        )
    }

    #[test]
    fn keeps_what_discovery_reads() {
        let mut cluster = FournosCluster::new("a", FournosClusterSpec::default());
        cluster.metadata.annotations = Some([("k".to_owned(), "v".repeat(1000))].into());
        cluster.metadata.labels =
            Some([("fournos.dev/auto-discovered".to_owned(), "true".to_owned())].into());
        cluster.status = Some(FournosClusterStatus {
            gpu_summary: Some("8x H100".to_owned()),
            kueue: Some(KueueStatus::default()),
            locked: Some(true),
            lock_owner: Some("alice".to_owned()),
            lock_job_name: Some("sentinel".to_owned()),
            conditions: vec![
                condition(KUBECONFIG_VALID),
                condition("KueueSynced"),
                condition(GPU_DISCOVERED),
                condition("Locked"),
            ],
            ..FournosClusterStatus::default()
        });
        trim(&mut cluster);
        assert!(cluster.metadata.annotations.is_none());
        assert!(cluster.metadata.labels.is_some(), "labels say who made it");
        let status = cluster.status.unwrap();
        assert_eq!(status.gpu_summary.as_deref(), Some("8x H100"));
        assert_eq!(
            (status.locked, status.lock_owner.as_deref()),
            (Some(true), Some("alice"))
        );
        assert!(status.kueue.is_none() && status.lock_job_name.is_none());
        let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, [KUBECONFIG_VALID, GPU_DISCOVERED]);
    }
}
