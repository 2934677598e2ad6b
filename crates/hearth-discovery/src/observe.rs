//! What the sweep reads of the cached objects: each labeled Secret and each
//! FournosCluster as [`crate::onboarding`] plans with it, and a fingerprint of that
//! reading, so that a cluster event wakes the sweep only when it changes what the sweep
//! reads.

use kube::{Resource as _, ResourceExt as _};

use crate::cluster_cache::{ClusterObject, is_auto_discovered, lock_holder};
use crate::onboarding::{ObservedCluster, ObservedSecret, owner_from};
use crate::secret::SecretObject;

/// Onboarding needs only a Secret's metadata, so even one that does not decode counts.
pub(crate) fn observe_secret(secret: &SecretObject) -> ObservedSecret {
    let meta = secret.meta();
    ObservedSecret {
        name: secret.name_any(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        owner: owner_from(meta.annotations.as_ref()),
    }
}

/// What the sweep reads of `cluster`, hashed: [`observe_cluster`], or, for one that does
/// not decode, its version (each version is reported).
pub(crate) fn sweep_fingerprint(cluster: &ClusterObject) -> u64 {
    use std::hash::{BuildHasher as _, BuildHasherDefault, DefaultHasher};
    let hasher = BuildHasherDefault::<DefaultHasher>::default();
    match &cluster.0 {
        Ok(_) => hasher.hash_one(observe_cluster(cluster)),
        Err(_) => hasher.hash_one(&cluster.meta().resource_version),
    }
}

pub(crate) fn observe_cluster(cluster: &ClusterObject) -> ObservedCluster {
    let meta = cluster.meta();
    let decoded = cluster.0.as_ref().ok();
    ObservedCluster {
        lock_holder: decoded.and_then(lock_holder),
        secret_missing_since: decoded
            .and_then(|c| c.status.as_ref())
            .and_then(|s| s.secret_missing_since.as_ref())
            .map(|t| t.0),
        owner: decoded.and_then(|c| c.spec.owner.clone()),
        spec_hardware: decoded.is_some_and(|c| c.spec.legacy_hardware),
        name: cluster.name_any(),
        uid: meta.uid.clone(),
        // A cluster that does not decode keeps its full metadata (kube's error boundary).
        auto_discovered: match decoded {
            Some(c) => c.auto_discovered,
            None => is_auto_discovered(meta.labels.as_ref()),
        },
        kubeconfig_secret: decoded.map(|c| c.spec.kubeconfig_secret.clone()),
        source_secret: decoded
            .and_then(|c| c.status.as_ref())
            .and_then(|s| s.source_secret.as_ref())
            .map(|s| s.name.clone()),
        deleting: meta.deletion_timestamp.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::cached_cluster;

    #[test]
    fn only_what_the_sweep_reads_wakes_it() {
        let base = cached_cluster("a", "1");
        let with = |change: fn(&mut crate::cluster_cache::CachedCluster)| {
            let mut cluster = base.0.as_ref().unwrap().clone();
            cluster.metadata.resource_version = Some("2".into());
            change(&mut cluster);
            sweep_fingerprint(&kube::core::DeserializeGuard(Ok(cluster)))
        };
        let before = sweep_fingerprint(&base);
        // A status write (discovery's count, kueue-sync's, a probe time) is not the sweep's.
        assert_eq!(
            with(|c| {
                c.status = Some(hearth_api::FournosClusterStatus {
                    gpu_summary: Some("8x A100".into()),
                    ..Default::default()
                })
            }),
            before
        );
        assert_ne!(with(|c| c.spec.owner = Some("alice".into())), before);
        assert_ne!(with(|c| c.spec.kubeconfig_secret = "other".into()), before);
        assert_ne!(with(|c| c.auto_discovered = true), before);
        assert_ne!(
            with(|c| {
                c.status = Some(hearth_api::FournosClusterStatus {
                    source_secret: Some(hearth_api::SourceSecret {
                        name: "kubeconfig-a".into(),
                        uid: "u".into(),
                    }),
                    ..Default::default()
                })
            }),
            before,
            "a recorded source decides offboarding"
        );
        assert_ne!(
            with(|c| {
                c.status = Some(hearth_api::FournosClusterStatus {
                    locked: Some(true),
                    lock_owner: Some("alice".into()),
                    ..Default::default()
                })
            }),
            before,
            "a locked cluster's offboarding is held back"
        );
        assert_ne!(
            with(|c| c.metadata.uid = Some("b".into())),
            before,
            "recreated"
        );
    }
}
