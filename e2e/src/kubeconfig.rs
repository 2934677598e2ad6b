//! Kubeconfig files and clients built from them. Everything is inline (CA data, client
//! certificate, token): that is what the harness hands to kubectl, the controllers and the
//! kubeconfig Secrets, and what Hearth accepts.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

use crate::certs::CertPair;
use crate::error::{PlaneError, Result};

/// How a kubeconfig's user authenticates.
#[derive(Debug, Clone)]
pub enum Credentials {
    ClientCert(CertPair),
    Token(String),
}

/// A single-context kubeconfig as YAML.
pub fn kubeconfig_yaml(
    cluster: &str,
    server: &str,
    ca_pem: &str,
    user: &str,
    credentials: &Credentials,
) -> String {
    let user_entry = match credentials {
        Credentials::ClientCert(pair) => json!({
            "client-certificate-data": B64.encode(&pair.cert_pem),
            "client-key-data": B64.encode(&pair.key_pem),
        }),
        Credentials::Token(token) => json!({ "token": token }),
    };
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": cluster,
            "cluster": { "server": server, "certificate-authority-data": B64.encode(ca_pem) },
        }],
        "users": [{ "name": user, "user": user_entry }],
        "contexts": [{ "name": cluster, "context": { "cluster": cluster, "user": user } }],
        "current-context": cluster,
    });
    crate::resources::to_yaml(&config)
}

/// A client for a kubeconfig given as YAML text.
pub async fn client_from_yaml(yaml: &str) -> Result<kube::Client> {
    let kubeconfig = Kubeconfig::from_yaml(yaml).map_err(|e| PlaneError::Parse {
        context: "parsing a kubeconfig".into(),
        message: e.to_string(),
    })?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| PlaneError::Parse {
            context: "loading a kubeconfig".into(),
            message: e.to_string(),
        })?;
    kube::Client::try_from(config).map_err(|source| PlaneError::Kube {
        context: "building a client".into(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_kubeconfig_is_plain_and_parses() {
        let token = "x".repeat(300);
        let yaml = kubeconfig_yaml(
            "c",
            "https://127.0.0.1:1",
            "CA",
            "u",
            &Credentials::Token(token.clone()),
        );
        assert!(yaml.contains(&format!("token: {token}")), "{yaml}");
        let parsed = Kubeconfig::from_yaml(&yaml).unwrap();
        assert_eq!(parsed.current_context.as_deref(), Some("c"));
        let user = parsed.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.token.is_some());
    }
}
