//! Generic object handling: YAML documents, CRDs, and server-side apply of arbitrary
//! objects (the plane creates Kueue objects, for which there are no Rust types here).

use std::path::Path;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::Value;

use crate::error::{Context, PlaneError, Result};
use crate::process::poll;

/// Field manager of everything the harness writes.
pub const FIELD_MANAGER: &str = "hearth-e2e";

/// YAML for files people read (kubeconfigs, Kueue's configuration): long strings such as
/// tokens and certificate data stay plain one-line scalars instead of folded blocks.
pub fn to_yaml(value: &impl serde::Serialize) -> String {
    let mut options = serde_saphyr::SerializerOptions::default();
    options.prefer_block_scalars = false;
    serde_saphyr::to_string_with_options(value, options)
        .expect("a JSON-like value serializes to YAML")
}

/// Parses every document of a YAML stream, skipping empty ones.
pub fn parse_yaml_documents(text: &str, origin: &str) -> Result<Vec<Value>> {
    // CRD schemas nest deeper and are larger than serde-saphyr's default budget allows
    // (the Workload CRD is 1.4 MB); the input is trusted.
    let mut options = serde_saphyr::Options::default();
    options.budget = None;
    let docs: Vec<Value> =
        serde_saphyr::from_multiple_with_options(text, options).map_err(|e| PlaneError::Parse {
            context: format!("parsing {origin}"),
            message: e.to_string(),
        })?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

pub fn read_yaml_documents(path: &Path) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(path).context(|| format!("reading {}", path.display()))?;
    parse_yaml_documents(&text, &path.display().to_string())
}

/// Creates the CRDs among `docs` (a create, not an apply: the Workload CRD is too large for
/// the last-applied bookkeeping of a client-side apply). Existing ones are replaced.
/// Returns their names.
pub async fn create_crds(client: &kube::Client, docs: Vec<Value>) -> Result<Vec<String>> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for doc in docs {
        if doc.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
            continue;
        }
        let crd: CustomResourceDefinition =
            serde_json::from_value(doc).context(|| "decoding a CustomResourceDefinition".into())?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let mut current = api
                    .get(&name)
                    .await
                    .context(|| format!("reading CRD {name}"))?;
                current.spec = crd.spec;
                api.replace(&name, &PostParams::default(), &current)
                    .await
                    .context(|| format!("replacing CRD {name}"))?;
            }
            Err(e) => return Err(e).context(|| format!("creating CRD {name}")),
        }
        names.push(name);
    }
    Ok(names)
}

/// Waits until every named CRD is `Established` (its API is served).
pub async fn wait_established(
    client: &kube::Client,
    names: &[String],
    timeout: Duration,
) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in names {
        poll(&format!("CRD {name} established"), timeout, || async {
            let crd = api
                .get(name)
                .await
                .context(|| format!("reading CRD {name}"))?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            Ok(established.then_some(()))
        })
        .await?;
    }
    Ok(())
}

/// The API for an object given as JSON (`apiVersion`, `kind`, `metadata.namespace`),
/// resolved through discovery.
pub async fn dynamic_api(
    client: &kube::Client,
    object: &Value,
) -> Result<(Api<DynamicObject>, String)> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .context(|| format!("discovering {api_version} {kind}"))?;
    let api = match (caps.scope, object["metadata"]["namespace"].as_str()) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        (kube::discovery::Scope::Namespaced, None) => {
            return Err(PlaneError::Invalid(format!(
                "{kind} {name} needs metadata.namespace"
            )));
        }
        (kube::discovery::Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
    };
    Ok((api, name))
}

/// Server-side applies `object` with the harness's field manager.
pub async fn apply(client: &kube::Client, object: &Value) -> Result<DynamicObject> {
    let (api, name) = dynamic_api(client, object).await?;
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .context(|| {
        format!(
            "applying {} {name}",
            object["kind"].as_str().unwrap_or("object")
        )
    })
}
