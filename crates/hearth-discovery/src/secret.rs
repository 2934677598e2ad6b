//! A cluster's kubeconfig Secret as read from the watch cache: what it says before any
//! connection, and a fingerprint that changes whenever the kubeconfig does.
//!
//! The fingerprint never leaves the process (it is not logged or written anywhere); it
//! only tells whether the kubeconfig is the one last probed, so rotation takes effect at
//! once while other Secret changes (labels, annotations) do not cause probes.

use std::hash::{DefaultHasher, Hash as _, Hasher as _};

use hearth_api::names::{ALLOWED_CLUSTERS_ANNOTATION, KUBECONFIG_SECRET_KEY};
use k8s_openapi::api::core::v1::Secret;

use crate::onboarding::SecretPattern;

use crate::credentials::{Expiry, credentials_expiry};
use crate::kubeconfig::{KubeconfigError, ValidatedKubeconfig, validate};
use crate::schedule::SecretView;

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
    pub fn read(secret: Option<&Secret>) -> Self {
        let Some(secret) = secret else {
            return Self::SecretMissing;
        };
        match kubeconfig_bytes(secret) {
            None => Self::KeyMissing,
            Some(data) => match validate(data) {
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
        secret: Option<&Secret>,
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
    secret: &Secret,
    secret_name: &str,
    cluster: &str,
    pattern: &SecretPattern,
) -> bool {
    pattern.secret_name(cluster) == secret_name
        || allowed_clusters(secret).is_some_and(|list| list.split(',').any(|c| c.trim() == cluster))
}

fn allowed_clusters(secret: &Secret) -> Option<&str> {
    secret
        .metadata
        .annotations
        .as_ref()?
        .get(ALLOWED_CLUSTERS_ANNOTATION)
        .map(String::as_str)
}

fn kubeconfig_bytes(secret: &Secret) -> Option<&[u8]> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(KUBECONFIG_SECRET_KEY))
        .map(|b| b.0.as_slice())
}

/// Changes whenever the kubeconfig a cluster would be probed with changes: another
/// Secret name, the Secret appearing or vanishing, the key's bytes, the clusters the
/// Secret allows.
pub fn fingerprint(secret_name: &str, secret: Option<&Secret>) -> u64 {
    let mut hasher = DefaultHasher::new();
    secret_name.hash(&mut hasher);
    secret.and_then(allowed_clusters).hash(&mut hasher);
    match secret {
        None => 0u8.hash(&mut hasher),
        Some(secret) => match kubeconfig_bytes(secret) {
            None => 1u8.hash(&mut hasher),
            Some(data) => {
                2u8.hash(&mut hasher);
                data.hash(&mut hasher);
            }
        },
    }
    hasher.finish()
}

/// Keeps of a kubeconfig Secret only what discovery reads: its name and labels, the
/// `fournos.dev/` annotations, and the `kubeconfig` key. Everything else (other keys,
/// `stringData`, `kubectl.kubernetes.io/last-applied-configuration`, which repeats the
/// whole Secret) is dropped before it is cached, so memory follows the kubeconfigs, not
/// what else a person put in the Secrets.
pub fn trim(secret: &mut Secret) {
    if let Some(data) = &mut secret.data {
        data.retain(|key, _| key == KUBECONFIG_SECRET_KEY);
    }
    secret.string_data = None;
    if let Some(annotations) = &mut secret.metadata.annotations {
        annotations.retain(|key, _| key.starts_with("fournos.dev/"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{https_cluster, kubeconfig, token_user};
    use hearth_api::names::OWNER_ANNOTATION;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn secret(data: Option<&[u8]>) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some("kubeconfig-a".into());
        s.data = data
            .map(|d| BTreeMap::from([(KUBECONFIG_SECRET_KEY.to_owned(), ByteString(d.to_vec()))]));
        s
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
        let mut s = secret(Some(b"apiVersion: v1"));
        s.data.as_mut().unwrap().insert(
            "ca-bundle.pem".into(),
            k8s_openapi::ByteString(vec![b'x'; 900 * 1024]),
        );
        s.string_data = Some(BTreeMap::from([("extra".into(), "y".repeat(1000))]));
        s.metadata.annotations = Some(BTreeMap::from([
            (
                "kubectl.kubernetes.io/last-applied-configuration".into(),
                "z".repeat(900 * 1024),
            ),
            (ALLOWED_CLUSTERS_ANNOTATION.into(), "b".into()),
            (OWNER_ANNOTATION.into(), "alice".into()),
        ]));
        let before = fingerprint("kubeconfig-a", Some(&s));
        trim(&mut s);
        assert_eq!(
            s.data.as_ref().unwrap().keys().collect::<Vec<_>>(),
            ["kubeconfig"]
        );
        assert_eq!(s.string_data, None);
        assert_eq!(
            s.metadata
                .annotations
                .as_ref()
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            [ALLOWED_CLUSTERS_ANNOTATION, OWNER_ANNOTATION]
        );
        assert_eq!(
            fingerprint("kubeconfig-a", Some(&s)),
            before,
            "what is read is unchanged"
        );
    }

    #[test]
    fn the_fingerprint_follows_the_kubeconfig_only() {
        let a = secret(Some(b"one"));
        let b = secret(Some(b"two"));
        let mut relabeled = a.clone();
        relabeled.metadata.labels = Some(BTreeMap::from([("x".into(), "y".into())]));
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
