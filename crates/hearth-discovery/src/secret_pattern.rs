//! The kubeconfig Secret name pattern (`--kubeconfig-secret-pattern`): which cluster a
//! Secret's name is for, and which name a cluster's Secret has.

use crate::config::CLUSTER_PLACEHOLDER;

/// The Secret name pattern, split around `{cluster}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretPattern {
    pattern: String,
    prefix: String,
    suffix: String,
}

impl SecretPattern {
    /// `None` unless `pattern` holds `{cluster}` exactly once.
    pub fn new(pattern: &str) -> Option<Self> {
        if pattern.matches(CLUSTER_PLACEHOLDER).count() != 1 {
            return None;
        }
        let (prefix, suffix) = pattern.split_once(CLUSTER_PLACEHOLDER)?;
        Some(Self {
            pattern: pattern.to_owned(),
            prefix: prefix.to_owned(),
            suffix: suffix.to_owned(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// The `{cluster}` part of a Secret name, if the name matches (and the part is not
    /// empty). Whether that part is a valid cluster name is another question.
    pub fn cluster_name<'a>(&self, secret: &'a str) -> Option<&'a str> {
        secret
            .strip_prefix(&self.prefix)?
            .strip_suffix(&self.suffix)
            .filter(|c| !c.is_empty())
    }

    /// The name of `cluster`'s Secret.
    pub fn secret_name(&self, cluster: &str) -> String {
        format!("{}{cluster}{}", self.prefix, self.suffix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn patterns_split_around_the_placeholder() {
        let p = SecretPattern::new("kubeconfig-{cluster}").unwrap();
        assert_eq!(p.cluster_name("kubeconfig-a100"), Some("a100"));
        assert_eq!(p.cluster_name("kubeconfig-"), None);
        assert_eq!(p.cluster_name("kubeconfig"), None);
        assert_eq!(p.cluster_name("other-a100"), None);
        assert_eq!(p.secret_name("a100"), "kubeconfig-a100");
        let p = SecretPattern::new("{cluster}-kubeconfig").unwrap();
        assert_eq!(p.cluster_name("a100-kubeconfig"), Some("a100"));
        assert_eq!(p.cluster_name("kubeconfig-a100"), None);
        let p = SecretPattern::new("kc-{cluster}-v1").unwrap();
        assert_eq!(p.cluster_name("kc-x-v1"), Some("x"));
        assert_eq!(p.cluster_name("kc--v1"), None);
        assert_eq!(p.secret_name("x"), "kc-x-v1");
        assert!(SecretPattern::new("kubeconfig").is_none());
        assert!(SecretPattern::new("{cluster}{cluster}").is_none());
    }
}
