//! Each controller's slice of [`FournosClusterStatus`]: the fields it alone writes, as
//! the body of its server-side apply. A slice serializes with the same field names as
//! `FournosClusterStatus` (the CRD does not change), holds only its writer's fields, so a
//! controller cannot write another's field by mistake, and leaves out what is `None`
//! (server-side apply then removes a field the writer set before).
//!
//! Conditions: a slice carries only its writer's condition types, one each.
//!
//! A slice's schema names the fields its writer writes, for the check that the served CRD
//! declares them ([`crate::crd::missing_status_fields`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cluster::{
    ExpiredLock, FournosClusterStatus, Hardware, KubeconfigStatus, KueueStatus, SlotHolder,
    SourceSecret,
};
use crate::conditions;
use crate::names::condition_types::{
    GPU_DISCOVERED, KUBECONFIG_VALID, KUEUE_SYNCED, LOCKED, SCHEDULABLE,
};

/// What hearth-discovery writes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_status: Option<KubeconfigStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<Hardware>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_expire_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_probe_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_missing_since: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_secret: Option<SourceSecret>,
    /// `KubeconfigValid` and `GPUDiscovered`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// What hearth-kueue-sync writes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KueueSyncStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kueue: Option<KueueStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_workloads: Option<i64>,
    /// `KueueSynced` and `Schedulable`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// What hearth-lock-manager writes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LockManagerStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_job_name: Option<String>,
    #[serde(
        default,
        rename = "lockJobUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub lock_job_uid: Option<String>,
    #[serde(
        default,
        rename = "lockWorkloadUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub lock_workload_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_set_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_expires_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired_lock: Option<ExpiredLock>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slot_holders: Vec<SlotHolder>,
    /// `Locked`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The current condition of each of `types` in `status` (see [`conditions::find`]).
fn own_conditions(status: &FournosClusterStatus, types: &[&str]) -> Vec<Condition> {
    types
        .iter()
        .filter_map(|t| conditions::find(&status.conditions, t).cloned())
        .collect()
}

impl DiscoveryStatus {
    /// Discovery's fields of `status`, as stored.
    pub fn of(status: &FournosClusterStatus) -> Self {
        Self {
            kubeconfig_status: status.kubeconfig_status,
            hardware: status.hardware.clone(),
            credentials_expire_at: status.credentials_expire_at.clone(),
            next_probe_at: status.next_probe_at.clone(),
            gpu_summary: status.gpu_summary.clone(),
            secret_missing_since: status.secret_missing_since.clone(),
            source_secret: status.source_secret.clone(),
            conditions: own_conditions(status, &[KUBECONFIG_VALID, GPU_DISCOVERED]),
        }
    }
}

impl KueueSyncStatus {
    /// kueue-sync's fields of `status`, as stored.
    pub fn of(status: &FournosClusterStatus) -> Self {
        Self {
            kueue: status.kueue.clone(),
            admitted_workloads: status.admitted_workloads,
            conditions: own_conditions(status, &[KUEUE_SYNCED, SCHEDULABLE]),
        }
    }
}

impl LockManagerStatus {
    /// lock-manager's fields of `status`, as stored.
    pub fn of(status: &FournosClusterStatus) -> Self {
        Self {
            locked: status.locked,
            lock_job_name: status.lock_job_name.clone(),
            lock_job_uid: status.lock_job_uid.clone(),
            lock_workload_uid: status.lock_workload_uid.clone(),
            owner_set_at: status.owner_set_at.clone(),
            lock_owner: status.lock_owner.clone(),
            lock_expires_at: status.lock_expires_at.clone(),
            expired_lock: status.expired_lock.clone(),
            slot_holders: status.slot_holders.clone(),
            conditions: own_conditions(status, &[LOCKED]),
        }
    }
}

/// A slice as the full status it stands for (the other writers' fields empty).
impl From<DiscoveryStatus> for FournosClusterStatus {
    fn from(s: DiscoveryStatus) -> Self {
        Self {
            kubeconfig_status: s.kubeconfig_status,
            hardware: s.hardware,
            credentials_expire_at: s.credentials_expire_at,
            next_probe_at: s.next_probe_at,
            gpu_summary: s.gpu_summary,
            secret_missing_since: s.secret_missing_since,
            source_secret: s.source_secret,
            conditions: s.conditions,
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::GpuInfo;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::Value;

    fn t() -> Time {
        Time(Timestamp::from_second(1_790_000_000).unwrap())
    }

    fn cond(type_: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: "True".into(),
            reason: "R".into(),
            message: "m".into(),
            observed_generation: Some(1),
            last_transition_time: t(),
        }
    }

    fn full() -> FournosClusterStatus {
        FournosClusterStatus {
            kubeconfig_status: Some(KubeconfigStatus::Valid),
            hardware: Some(Hardware {
                gpus: vec![GpuInfo::default()],
                total_gpus: 1,
                last_discovery: Some(t()),
                consecutive_failures: 1,
                last_error: Some("e".into()),
                excluded_nodes: 1,
                kubernetes_version: Some("v1.34.1".into()),
            }),
            credentials_expire_at: Some(t()),
            next_probe_at: Some(t()),
            gpu_summary: Some("1x X".into()),
            secret_missing_since: Some(t()),
            source_secret: Some(SourceSecret {
                name: "kubeconfig-a".into(),
                uid: "uid-secret".into(),
            }),
            kueue: Some(KueueStatus {
                flavor: "a".into(),
                cluster_queue: "q".into(),
                quotas: [("fournos/cluster-slot".to_owned(), 100)].into(),
                cluster_slots: 100,
            }),
            admitted_workloads: Some(2),
            locked: Some(true),
            lock_job_name: Some("cluster-lock-a".into()),
            lock_job_uid: Some("uid-a".into()),
            lock_workload_uid: Some("w-a".into()),
            owner_set_at: Some(t()),
            lock_owner: Some("alice".into()),
            lock_expires_at: Some(t()),
            expired_lock: Some(ExpiredLock {
                owner: "bob".into(),
                expired_at: t(),
                ttl: Some("1h".into()),
            }),
            slot_holders: vec![SlotHolder {
                workload: "exec/job-1".into(),
                job: Some("job-1".into()),
                owner: None,
                slots: 100,
            }],
            conditions: [
                KUBECONFIG_VALID,
                GPU_DISCOVERED,
                KUEUE_SYNCED,
                SCHEDULABLE,
                LOCKED,
            ]
            .map(cond)
            .to_vec(),
        }
    }

    fn keys(v: &Value) -> Vec<String> {
        v.as_object().unwrap().keys().cloned().collect()
    }

    /// The slices split the status without gaps or overlaps, under the CRD's field
    /// names: each slice's JSON is exactly the full status's JSON for those fields.
    #[test]
    fn slices_partition_the_status_under_the_crd_names() {
        let status = full();
        let whole = serde_json::to_value(&status).unwrap();
        let parts = [
            serde_json::to_value(DiscoveryStatus::of(&status)).unwrap(),
            serde_json::to_value(KueueSyncStatus::of(&status)).unwrap(),
            serde_json::to_value(LockManagerStatus::of(&status)).unwrap(),
        ];
        let mut all_keys: Vec<String> = Vec::new();
        let mut all_conditions = Vec::new();
        for part in &parts {
            for key in keys(part) {
                if key == "conditions" {
                    all_conditions.extend(part[&key].as_array().unwrap().clone());
                } else {
                    assert_eq!(part[&key], whole[&key], "{key}");
                    assert!(!all_keys.contains(&key), "{key} in two slices");
                    all_keys.push(key);
                }
            }
        }
        all_keys.push("conditions".into());
        all_keys.sort();
        let mut expected = keys(&whole);
        expected.sort();
        assert_eq!(all_keys, expected);
        assert_eq!(Value::from(all_conditions), whole["conditions"]);
    }

    #[test]
    fn empty_slices_write_nothing() {
        for v in [
            serde_json::to_value(DiscoveryStatus::default()).unwrap(),
            serde_json::to_value(KueueSyncStatus::default()).unwrap(),
            serde_json::to_value(LockManagerStatus::default()).unwrap(),
        ] {
            assert_eq!(v, serde_json::json!({}));
        }
    }

    #[test]
    fn a_discovery_slice_is_the_status_it_stands_for() {
        let status = full();
        let slice = DiscoveryStatus::of(&status);
        let back = FournosClusterStatus::from(slice.clone());
        assert_eq!(DiscoveryStatus::of(&back), slice);
        assert_eq!(back.kueue, None);
    }
}
