//! A cluster's kubeconfig Secret as read from the watch cache: what it says before any
//! connection, and a fingerprint that changes whenever the kubeconfig does.
//!
//! The fingerprint never leaves the process (it is not logged or written anywhere); it
//! only tells whether the kubeconfig is the one last probed, so rotation takes effect at
//! once while other Secret changes (labels, annotations) do not cause probes.

use std::hash::{DefaultHasher, Hash as _, Hasher as _};

use hearth_api::names::{ALLOWED_CLUSTERS_ANNOTATION, KUBECONFIG_SECRET_KEY};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DeserializeGuard;

use crate::credentials::{Expiry, credentials_expiry};
use crate::kubeconfig::{KubeconfigError, ValidatedKubeconfig, validate};
use crate::schedule::SecretView;
use crate::secret_pattern::SecretPattern;

/// What a Secret holds for discovery.
#[derive(Debug, Clone)]
pub enum SecretKubeconfig {
    /// No such Secret among the labeled ones.
    SecretMissing,
    /// The Secret has no `kubeconfig` key.
    KeyMissing,
    /// The kubeconfig is refused.
    Invalid(KubeconfigError),
    /// The kubeconfig can be probed.
    Usable {
        kubeconfig: Box<ValidatedKubeconfig>,
        expiry: Option<Expiry>,
    },
}

impl SecretKubeconfig {
    /// Reads the `kubeconfig` key of `secret` (the cached Secret, if there is one).
    pub fn read(secret: Option<&CachedSecret>) -> Self {
        match secret.map(|s| s.kubeconfig.as_deref()) {
            None => Self::SecretMissing,
            Some(None) => Self::KeyMissing,
            Some(Some(data)) => match validate(data) {
                Err(error) => Self::Invalid(error),
                Ok(kubeconfig) => Self::Usable {
                    expiry: credentials_expiry(&kubeconfig),
                    kubeconfig: Box::new(kubeconfig),
                },
            },
        }
    }

    /// [`read`](Self::read), for `cluster`: a Secret that is not meant for it (see
    /// [`is_meant_for`]) is refused before its kubeconfig is looked at.
    pub fn read_for(
        secret: Option<&CachedSecret>,
        secret_name: &str,
        cluster: &str,
        pattern: &SecretPattern,
    ) -> Self {
        match secret {
            Some(s) if !is_meant_for(s, secret_name, cluster, pattern) => {
                Self::Invalid(KubeconfigError::NotForThisCluster {
                    cluster: cluster.to_owned(),
                    expected: pattern.secret_name(cluster),
                })
            }
            _ => Self::read(secret),
        }
    }

    pub fn view(&self) -> SecretView {
        match self {
            Self::SecretMissing | Self::KeyMissing => SecretView::Missing,
            Self::Invalid(_) => SecretView::Invalid,
            Self::Usable { expiry, .. } => SecretView::Usable {
                expires_at: expiry.map(|e| e.at),
            },
        }
    }
}

/// Whether `secret`, named `secret_name`, may hold `cluster`'s kubeconfig: it is the
/// Secret the pattern names for that cluster, or its `fournos.dev/allowed-clusters`
/// annotation lists the cluster. Anyone who may edit FournosClusters could otherwise
/// point one at another target's Secret and publish that target's GPUs a second time,
/// under a flavor that a lock on the real cluster does not cover.
pub fn is_meant_for(
    secret: &CachedSecret,
    secret_name: &str,
    cluster: &str,
    pattern: &SecretPattern,
) -> bool {
    pattern.secret_name(cluster) == secret_name
        || allowed_clusters(secret).is_some_and(|list| list.split(',').any(|c| c.trim() == cluster))
}

fn allowed_clusters(secret: &CachedSecret) -> Option<&str> {
    secret
        .metadata
        .annotations
        .as_ref()?
        .get(ALLOWED_CLUSTERS_ANNOTATION)
        .map(String::as_str)
}

pub fn fingerprint(secret_name: &str, secret: Option<&CachedSecret>) -> u64 {
    let mut hasher = DefaultHasher::new();
    secret_name.hash(&mut hasher);
    secret.and_then(allowed_clusters).hash(&mut hasher);
    match secret {
        None => 0u8.hash(&mut hasher),
        Some(secret) => match secret.kubeconfig.as_deref() {
            None => 1u8.hash(&mut hasher),
            Some(data) => {
                2u8.hash(&mut hasher);
                data.hash(&mut hasher);
            }
        },
    }
    hasher.finish()
}

/// A kubeconfig Secret as discovery's cache holds it: its identity, its `fournos.dev/`
/// annotations (owner, allowed clusters) and the `kubeconfig` key. Whatever else a
/// Secret holds (other keys, `stringData`, labels, `last-applied-configuration`) never
/// reaches the heap, however large the apiserver allows it to be.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedSecret {
    /// Identity and version, and the `fournos.dev/` annotations.
    pub metadata: ObjectMeta,
    /// The `kubeconfig` key's bytes, if it has one.
    pub kubeconfig: Option<Box<[u8]>>,
}

impl From<Secret> for CachedSecret {
    fn from(secret: Secret) -> Self {
        let mut metadata = secret.metadata;
        let mut annotations = metadata.annotations.take().unwrap_or_default();
        annotations.retain(|key, _| key.starts_with("fournos.dev/"));
        let mut metadata = hearth_runtime::kit::identity(metadata);
        metadata.annotations = (!annotations.is_empty()).then_some(annotations);
        Self {
            metadata,
            kubeconfig: secret
                .data
                .and_then(|mut data| data.remove(KUBECONFIG_SECRET_KEY))
                .map(|bytes| bytes.0.into_boxed_slice()),
        }
    }
}

hearth_runtime::view_of!(CachedSecret, Secret);

/// A cached kubeconfig Secret as the watch delivers it: the view, or why it does not
/// decode.
pub(crate) type SecretObject = DeserializeGuard<CachedSecret>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{https_cluster, kubeconfig, token_user};
    use hearth_api::names::OWNER_ANNOTATION;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn full_secret(data: Option<&[u8]>) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some("kubeconfig-a".into());
        s.data = data
            .map(|d| BTreeMap::from([(KUBECONFIG_SECRET_KEY.to_owned(), ByteString(d.to_vec()))]));
        s
    }

    fn secret(data: Option<&[u8]>) -> CachedSecret {
        CachedSecret::from(full_secret(data))
    }

    #[test]
    fn a_secret_is_for_the_cluster_its_name_says_or_that_its_annotation_lists() {
        let pattern = SecretPattern::new("kubeconfig-{cluster}").unwrap();
        let mut s = secret(Some(b"anything"));
        assert!(is_meant_for(&s, "kubeconfig-a", "a", &pattern));
        assert!(!is_meant_for(&s, "kubeconfig-a", "thief", &pattern));
        let refused = SecretKubeconfig::read_for(Some(&s), "kubeconfig-a", "thief", &pattern);
        let SecretKubeconfig::Invalid(e) = refused else {
            panic!("{refused:?}")
        };
        assert_eq!(e.reason(), "SecretNotForThisCluster");
        assert!(e.to_string().contains("kubeconfig-thief"), "{e}");
        let before = fingerprint("kubeconfig-a", Some(&s));
        s.metadata.annotations = Some(BTreeMap::from([(
            ALLOWED_CLUSTERS_ANNOTATION.to_owned(),
            "b, thief".to_owned(),
        )]));
        assert!(is_meant_for(&s, "kubeconfig-a", "thief", &pattern));
        assert!(is_meant_for(&s, "kubeconfig-a", "b", &pattern));
        assert!(!is_meant_for(&s, "kubeconfig-a", "thie", &pattern));
        assert_ne!(fingerprint("kubeconfig-a", Some(&s)), before);
        // A missing Secret is reported as missing, whoever asks.
        assert!(matches!(
            SecretKubeconfig::read_for(None, "kubeconfig-a", "thief", &pattern),
            SecretKubeconfig::SecretMissing
        ));
    }

    #[test]
    fn reads_what_the_secret_holds() {
        assert!(matches!(
            SecretKubeconfig::read(None),
            SecretKubeconfig::SecretMissing
        ));
        assert!(matches!(
            SecretKubeconfig::read(Some(&secret(None))),
            SecretKubeconfig::KeyMissing
        ));
        assert!(matches!(
            SecretKubeconfig::read(Some(&secret(Some(b"")))),
            SecretKubeconfig::Invalid(KubeconfigError::Empty)
        ));
        let good = kubeconfig(https_cluster(), token_user()).to_string();
        let read = SecretKubeconfig::read(Some(&secret(Some(good.as_bytes()))));
        assert!(matches!(read, SecretKubeconfig::Usable { .. }));
        assert_eq!(read.view(), SecretView::Usable { expires_at: None });
    }

    #[test]
    fn the_cache_keeps_only_what_discovery_reads() {
        let mut s = full_secret(Some(b"apiVersion: v1"));
        s.data.as_mut().unwrap().insert(
            "ca-bundle.pem".into(),
            k8s_openapi::ByteString(vec![b'x'; 900 * 1024]),
        );
        s.string_data = Some(BTreeMap::from([("extra".into(), "y".repeat(1000))]));
        s.metadata.labels = Some(BTreeMap::from([(
            "fournos.dev/cluster-kubeconfig".into(),
            "true".into(),
        )]));
        s.metadata.annotations = Some(BTreeMap::from([
            (
                "kubectl.kubernetes.io/last-applied-configuration".into(),
                "z".repeat(900 * 1024),
            ),
            (ALLOWED_CLUSTERS_ANNOTATION.into(), "b".into()),
            (OWNER_ANNOTATION.into(), "alice".into()),
        ]));
        s.metadata.uid = Some("u".into());
        s.metadata.resource_version = Some("5".into());
        let cached = CachedSecret::from(s);
        assert_eq!(cached.kubeconfig.as_deref(), Some(&b"apiVersion: v1"[..]));
        assert_eq!(cached.metadata.labels, None);
        assert_eq!(
            cached
                .metadata
                .annotations
                .as_ref()
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            [ALLOWED_CLUSTERS_ANNOTATION, OWNER_ANNOTATION]
        );
        assert_eq!(
            (
                cached.metadata.name.as_deref(),
                cached.metadata.uid.as_deref(),
                cached.metadata.resource_version.as_deref()
            ),
            (Some("kubeconfig-a"), Some("u"), Some("5"))
        );
        // Without `fournos.dev/` annotations there is no annotation map at all.
        let mut plain = full_secret(Some(b"k"));
        plain.metadata.annotations = Some(BTreeMap::from([("other".into(), "x".into())]));
        assert_eq!(CachedSecret::from(plain).metadata.annotations, None);
    }

    #[test]
    fn the_fingerprint_follows_the_kubeconfig_only() {
        let a = secret(Some(b"one"));
        let b = secret(Some(b"two"));
        let mut relabeled = a.clone();
        relabeled.metadata.resource_version = Some("99".into());
        assert_eq!(
            fingerprint("s", Some(&a)),
            fingerprint("s", Some(&relabeled))
        );
        assert_ne!(fingerprint("s", Some(&a)), fingerprint("s", Some(&b)));
        assert_ne!(fingerprint("s", Some(&a)), fingerprint("t", Some(&a)));
        assert_ne!(
            fingerprint("s", None),
            fingerprint("s", Some(&secret(None)))
        );
        assert_ne!(
            fingerprint("s", Some(&secret(None))),
            fingerprint("s", Some(&secret(Some(b""))))
        );
    }
}
