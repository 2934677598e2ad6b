//! What discovery keeps of a FournosCluster in its cache ([`CachedCluster`]): its own
//! status fields, the two lock fields that hold offboarding back, and the spec and
//! metadata it reads. The rest of the status (kueue-sync's and lock-manager's fields and
//! conditions), the labels (but the one discovery reads), the annotations
//! (`kubectl.kubernetes.io/last-applied-configuration` can be as large as the object)
//! and the legacy `spec.hardware` (but whether it is set) never reach its heap, and the
//! spec's strings are kept within the CRD's limits whatever an object stored before the
//! CRD set them holds. At 1000
//! clusters this is a third of what the trimmed `FournosCluster` took
//! (bench-results/2026-11-26/MEMORY.md). Also what those fields say: who holds the
//! cluster's lock ([`lock_holder`]) and whether it was made from a Secret
//! ([`is_auto_discovered`]).

use std::collections::BTreeMap;

use hearth_api::cluster::{MAX_KUBECONFIG_SECRET_CHARS, MAX_OWNER_CHARS};
use hearth_api::conditions::retain_types;
use hearth_api::names::AUTO_DISCOVERED_LABEL;
use hearth_api::names::condition_types::{GPU_DISCOVERED, KUBECONFIG_VALID};
use hearth_api::text::capped;
use hearth_api::{FournosCluster, FournosClusterStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DeserializeGuard;

/// A FournosCluster as discovery's cache holds it. It serializes as stored only in
/// `metadata` and `status` (what the legacy-conditions repair of
/// [`hearth_runtime::status::apply_status`] reads).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct CachedCluster {
    /// Name, namespace, uid, version, generation, age and deletion only.
    pub metadata: ObjectMeta,
    /// Labeled `fournos.dev/auto-discovered=true`: made from a Secret, offboarded with it.
    #[serde(skip)]
    pub auto_discovered: bool,
    #[serde(skip)]
    pub spec: CachedSpec,
    /// Discovery's own fields, and `locked` / `lockOwner`; nothing else is set.
    pub status: Option<FournosClusterStatus>,
}

/// Longest `spec.gpuDiscoveryInterval` the CRD accepts (four digits and a unit).
const MAX_INTERVAL_CHARS: usize = 5;

/// The spec fields discovery reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedSpec {
    pub kubeconfig_secret: String,
    pub owner: Option<String>,
    pub gpu_discovery_interval: Option<String>,
    /// The legacy `spec.hardware` is set (only said in a message, never read).
    pub legacy_hardware: bool,
}

impl From<FournosCluster> for CachedCluster {
    fn from(cluster: FournosCluster) -> Self {
        let FournosCluster {
            metadata,
            spec,
            status,
        } = cluster;
        Self {
            auto_discovered: is_auto_discovered(metadata.labels.as_ref()),
            metadata: hearth_runtime::kit::identity(metadata),
            // Within the CRD's limits, with one character more for an object stored
            // before it set them: enough to tell that it is too long.
            spec: CachedSpec {
                kubeconfig_secret: capped(&spec.kubeconfig_secret, MAX_KUBECONFIG_SECRET_CHARS),
                owner: spec.owner.map(|o| capped(&o, MAX_OWNER_CHARS)),
                gpu_discovery_interval: spec
                    .gpu_discovery_interval
                    .map(|i| capped(&i, MAX_INTERVAL_CHARS)),
                legacy_hardware: spec.hardware.is_some(),
            },
            status: status.map(discovery_part),
        }
    }
}

hearth_runtime::view_of!(CachedCluster, FournosCluster);

/// The view keeps only what discovery reads when it is made.
impl hearth_runtime::kit::ClusterKind for CachedCluster {}

/// A cached FournosCluster as the watch delivers it: the view, or why it does not decode.
pub(crate) type ClusterObject = DeserializeGuard<CachedCluster>;

/// Whether `labels` mark a cluster as created from a Secret.
pub fn is_auto_discovered(labels: Option<&BTreeMap<String, String>>) -> bool {
    labels
        .and_then(|l| l.get(AUTO_DISCOVERED_LABEL))
        .is_some_and(|v| v == "true")
}

/// Who holds a cluster's lock: `spec.owner`, else (lock-manager still says locked, e.g.
/// while it releases) `status.lockOwner`; `None` when it is not locked.
pub fn lock_holder(cluster: &CachedCluster) -> Option<String> {
    let status = cluster.status.as_ref();
    let non_empty = |s: Option<&String>| s.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
    non_empty(cluster.spec.owner.as_ref()).or_else(|| {
        status
            .and_then(|s| s.locked)
            .filter(|&locked| locked)
            .map(|_| {
                non_empty(status.and_then(|s| s.lock_owner.as_ref()))
                    .unwrap_or_else(|| "an unknown owner".to_owned())
            })
    })
}

/// Discovery's fields of `status`, with `locked` and `lockOwner` (a locked cluster's
/// offboarding is held back). Condition lists keep no spare room.
fn discovery_part(status: FournosClusterStatus) -> FournosClusterStatus {
    let mut conditions = status.conditions;
    retain_types(&mut conditions, &[KUBECONFIG_VALID, GPU_DISCOVERED]);
    conditions.shrink_to_fit();
    FournosClusterStatus {
        kubeconfig_status: status.kubeconfig_status,
        hardware: status.hardware,
        credentials_expire_at: status.credentials_expire_at,
        next_probe_at: status.next_probe_at,
        gpu_summary: status.gpu_summary,
        secret_missing_since: status.secret_missing_since,
        source_secret: status.source_secret,
        locked: status.locked,
        lock_owner: status.lock_owner,
        conditions,
        ..FournosClusterStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_api::{FournosClusterSpec, Hardware, KueueStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use kube::Resource as _;

    fn condition(type_: &'static str) -> Condition {
        Condition {
            type_: type_.to_owned(),
            status: "True".to_owned(),
            reason: String::new(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
        }
    }

    #[test]
    fn keeps_what_discovery_reads() {
        let mut cluster = FournosCluster::new(
            "a",
            FournosClusterSpec {
                kubeconfig_secret: "kubeconfig-a".into(),
                owner: Some("bob".into()),
                gpu_discovery_interval: Some("10m".into()),
                hardware: Some(Hardware::default()),
                ..FournosClusterSpec::default()
            },
        );
        cluster.metadata.namespace = Some("hearth".into());
        cluster.metadata.uid = Some("u".into());
        cluster.metadata.generation = Some(3);
        cluster.metadata.annotations = Some([("k".to_owned(), "v".repeat(1000))].into());
        cluster.metadata.labels = Some(
            [
                ("fournos.dev/auto-discovered".to_owned(), "true".to_owned()),
                ("fournos.dev/pool".to_owned(), "a".to_owned()),
            ]
            .into(),
        );
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
        let cached = CachedCluster::from(cluster);
        assert_eq!(cached.meta().name.as_deref(), Some("a"));
        assert_eq!(cached.meta().namespace.as_deref(), Some("hearth"));
        assert_eq!(cached.meta().uid.as_deref(), Some("u"));
        assert_eq!(cached.meta().generation, Some(3));
        assert!(cached.metadata.annotations.is_none() && cached.metadata.labels.is_none());
        assert!(cached.auto_discovered, "the label says who made it");
        assert_eq!(
            cached.spec,
            CachedSpec {
                kubeconfig_secret: "kubeconfig-a".into(),
                owner: Some("bob".into()),
                gpu_discovery_interval: Some("10m".into()),
                legacy_hardware: true,
            }
        );
        let status = cached.status.unwrap();
        assert_eq!(status.gpu_summary.as_deref(), Some("8x H100"));
        assert_eq!(
            (status.locked, status.lock_owner.as_deref()),
            (Some(true), Some("alice"))
        );
        assert!(status.kueue.is_none() && status.lock_job_name.is_none());
        let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, [KUBECONFIG_VALID, GPU_DISCOVERED]);
    }

    #[test]
    fn decodes_from_the_watch_as_a_fournos_cluster() {
        let json = serde_json::json!({
            "apiVersion": "fournos.dev/v1",
            "kind": "FournosCluster",
            "metadata": {"name": "a", "namespace": "hearth", "labels": {"fournos.dev/auto-discovered": "false"}},
            "spec": {"kubeconfigSecret": "kubeconfig-a"},
        });
        let cached: CachedCluster = serde_json::from_value(json).unwrap();
        assert_eq!(cached.spec.kubeconfig_secret, "kubeconfig-a");
        assert!(!cached.auto_discovered);
        assert_eq!(CachedCluster::kind(&()), "FournosCluster");
        assert_eq!(CachedCluster::api_version(&()), "fournos.dev/v1");
        let invalid =
            serde_json::json!({"metadata": {"name": "a"}, "spec": {"kubeconfigSecret": 7}});
        assert!(serde_json::from_value::<CachedCluster>(invalid).is_err());
    }

    #[test]
    fn auto_discovered_label_must_be_true() {
        let labels = |v: &str| BTreeMap::from([(AUTO_DISCOVERED_LABEL.to_owned(), v.to_owned())]);
        assert!(is_auto_discovered(Some(&labels("true"))));
        assert!(!is_auto_discovered(Some(&labels("false"))));
        assert!(!is_auto_discovered(None));
    }

    fn hearth_cluster(
        owner: Option<&str>,
        locked: Option<bool>,
        lock_owner: Option<&str>,
    ) -> CachedCluster {
        let mut c = FournosCluster::new(
            "a",
            FournosClusterSpec {
                kubeconfig_secret: "kubeconfig-a".into(),
                owner: owner.map(str::to_owned),
                ..Default::default()
            },
        );
        c.status = Some(FournosClusterStatus {
            locked,
            lock_owner: lock_owner.map(str::to_owned),
            ..Default::default()
        });
        c.into()
    }

    #[test]
    fn a_cluster_is_locked_by_its_owner_or_while_lock_manager_says_so() {
        assert_eq!(
            lock_holder(&hearth_cluster(Some("bob"), None, None)).as_deref(),
            Some("bob")
        );
        assert_eq!(
            lock_holder(&hearth_cluster(None, Some(true), Some("carol"))).as_deref(),
            Some("carol")
        );
        assert_eq!(
            lock_holder(&hearth_cluster(Some(" "), Some(true), None)).as_deref(),
            Some("an unknown owner")
        );
        assert_eq!(
            lock_holder(&hearth_cluster(None, Some(false), Some("carol"))),
            None
        );
        assert_eq!(lock_holder(&hearth_cluster(Some("  "), None, None)), None);
    }
}
