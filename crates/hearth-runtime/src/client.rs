//! The management cluster's kube client configuration.

use std::path::PathBuf;

use kube::config::{KubeConfigOptions, Kubeconfig};

#[derive(Debug, thiserror::Error)]
pub enum ClientConfigError {
    #[error("cannot load kubeconfig {paths:?}: {source}")]
    Kubeconfig {
        paths: Vec<PathBuf>,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no kubeconfig and not in a cluster: {0}")]
    Infer(#[from] kube::config::InferConfigError),
}

/// From the given kubeconfig files (merged in order, like kubectl), else inferred:
/// `~/.kube/config`, then the in-cluster service account.
pub async fn kube_config(kubeconfig_paths: &[PathBuf]) -> Result<kube::Config, ClientConfigError> {
    if kubeconfig_paths.is_empty() {
        return Ok(kube::Config::infer().await?);
    }
    let error = |source| ClientConfigError::Kubeconfig {
        paths: kubeconfig_paths.to_vec(),
        source,
    };
    let merged = kubeconfig_paths
        .iter()
        .try_fold(Kubeconfig::default(), |merged, path| {
            Kubeconfig::read_from(path).and_then(|next| merged.merge(next))
        })
        .map_err(error)?;
    kube::Config::from_custom_kubeconfig(merged, &KubeConfigOptions::default())
        .await
        .map_err(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(context: &str, server: &str) -> String {
        format!(
            "apiVersion: v1
kind: Config
current-context: {context}
clusters:
- name: {context}
  cluster: {{server: \"{server}\"}}
contexts:
- name: {context}
  context: {{cluster: {context}, user: {context}, namespace: ns-{context}}}
users:
- name: {context}
  user: {{token: t}}
"
        )
    }

    #[tokio::test]
    async fn kubeconfig_files_are_merged_first_wins() {
        let dir =
            std::env::temp_dir().join(format!("hearth-runtime-client-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = dir.join("first");
        let second = dir.join("second");
        std::fs::write(&first, kubeconfig("one", "https://one.example:6443")).unwrap();
        std::fs::write(&second, kubeconfig("two", "https://two.example:6443")).unwrap();

        let config = kube_config(&[first.clone(), second.clone()]).await.unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://one.example:6443/");
        assert_eq!(config.default_namespace, "ns-one");

        let config = kube_config(&[second, first]).await.unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://two.example:6443/");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn missing_kubeconfig_names_the_file() {
        let path = PathBuf::from("/nonexistent/hearth/kubeconfig");
        let error = kube_config(std::slice::from_ref(&path)).await.unwrap_err();
        assert!(matches!(error, ClientConfigError::Kubeconfig { .. }));
        assert!(
            error.to_string().contains("/nonexistent/hearth/kubeconfig"),
            "{error}"
        );
    }
}
