//! The least-privileged identity Hearth gets for a target: a ServiceAccount that may only
//! get/list/watch nodes, with a token from the TokenRequest API (the apiserver runs without
//! a controller manager, so there is no token controller and no legacy token Secret).

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::error::{Context, Result};
use crate::kubeconfig::{Credentials, kubeconfig_yaml};

/// Namespace of node-reader ServiceAccounts on a target.
pub const NAMESPACE: &str = "kube-system";
/// The ClusterRole (and default ServiceAccount) name.
pub const NODE_READER: &str = "hearth-node-reader";
/// Token lifetime: one year, so a plane left running never sees its tokens expire.
pub const TOKEN_SECONDS: i64 = 365 * 24 * 3600;

const MANAGER: &str = "hearth-e2e";

/// Ensures the ClusterRole, the ServiceAccount `sa` and its binding exist.
pub async fn ensure(client: &kube::Client, sa: &str) -> Result<()> {
    let pp = PatchParams::apply(MANAGER).force();
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let role: ClusterRole = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": { "name": NODE_READER },
        "rules": [{ "apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"] }],
    }))
    .context(|| "building the node-reader ClusterRole".into())?;
    roles
        .patch(NODE_READER, &pp, &Patch::Apply(role))
        .await
        .context(|| "applying the node-reader ClusterRole".into())?;

    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let account: ServiceAccount = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": { "name": sa, "namespace": NAMESPACE },
    }))
    .context(|| "building a ServiceAccount".into())?;
    sas.patch(sa, &pp, &Patch::Apply(account))
        .await
        .context(|| format!("applying ServiceAccount {NAMESPACE}/{sa}"))?;

    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let binding_name = binding_name(sa);
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": { "name": binding_name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NODE_READER },
        "subjects": [{ "kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE }],
    }))
    .context(|| "building a ClusterRoleBinding".into())?;
    bindings
        .patch(&binding_name, &pp, &Patch::Apply(binding))
        .await
        .context(|| format!("applying ClusterRoleBinding {binding_name}"))?;
    Ok(())
}

fn binding_name(sa: &str) -> String {
    if sa == NODE_READER {
        NODE_READER.to_string()
    } else {
        format!("{NODE_READER}-{sa}")
    }
}

/// A new token for `sa`.
pub async fn token(client: &kube::Client, sa: &str) -> Result<String> {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(TOKEN_SECONDS),
            ..Default::default()
        }),
        ..Default::default()
    };
    let response = sas
        .create_token_request(sa, &PostParams::default(), &request)
        .await
        .context(|| format!("requesting a token for {NAMESPACE}/{sa}"))?;
    response.status.and_then(|s| s.token).ok_or_else(|| {
        crate::error::PlaneError::Invalid(format!(
            "the TokenRequest for {NAMESPACE}/{sa} returned no token"
        ))
    })
}

/// Ensures `sa` exists with node-read rights and returns a kubeconfig with a fresh token.
pub async fn issue(
    client: &kube::Client,
    cluster: &str,
    server: &str,
    ca_pem: &str,
    sa: &str,
) -> Result<String> {
    ensure(client, sa).await?;
    let token = token(client, sa).await?;
    Ok(kubeconfig_yaml(
        cluster,
        server,
        ca_pem,
        sa,
        &Credentials::Token(token),
    ))
}

/// Invalidates every token of `sa` by deleting the ServiceAccount (tokens are bound to its
/// UID), then recreates it so that [`issue`] works again with new tokens.
pub async fn revoke(client: &kube::Client, sa: &str) -> Result<()> {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    match sas.delete(sa, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(e) => return Err(e).context(|| format!("deleting {NAMESPACE}/{sa}")),
    }
    // No garbage collector or finalizers run here, so the delete is immediate; wait for it
    // anyway so the recreate cannot race the delete.
    crate::process::poll(
        &format!("deletion of {NAMESPACE}/{sa}"),
        std::time::Duration::from_secs(30),
        || async {
            match sas.get_opt(sa).await {
                Ok(None) => Ok(Some(())),
                Ok(Some(_)) => Ok(None),
                Err(e) => Err(e).context(|| format!("reading {NAMESPACE}/{sa}")),
            }
        },
    )
    .await?;
    ensure(client, sa).await
}
