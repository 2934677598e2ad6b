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

/// Waits until every named CRD is `Established` and its objects are served from the
/// apiserver's watch cache.
///
/// The apiserver builds a custom resource's watch cache on the first request for it, and
/// lists go to etcd until that cache has made its own list. A controller that starts in
/// that window lists from etcd, has its watch refused as too old once the cache is up
/// (`too old resource version: N (N+1)`), and re-lists; on kube-apiserver 1.36 an object
/// created in that window was once never delivered to it (CI, discovery_offboarding).
/// Kubernetes' own integration tests prime the cache before they watch for the same
/// reason. Here a streaming list (served by the watch cache only, and only once it is
/// initialized) is run to its end for each CRD, so no Hearth controller, Kueue or peer
/// starts against a cache still being built. Clusters people run have their CRDs long
/// before any controller starts.
pub async fn wait_established(
    client: &kube::Client,
    names: &[String],
    timeout: Duration,
) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in names {
        let crd = poll(&format!("CRD {name} established"), timeout, || async {
            let crd = api
                .get(name)
                .await
                .context(|| format!("reading CRD {name}"))?;
            let established = crd
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            Ok(established.then_some(crd))
        })
        .await?;
        prime_watch_cache(client, &crd, timeout).await?;
    }
    Ok(())
}

/// Runs one streaming list of `crd`'s storage version to its end (see [`wait_established`]).
async fn prime_watch_cache(
    client: &kube::Client,
    crd: &CustomResourceDefinition,
    timeout: Duration,
) -> Result<()> {
    use futures::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, watcher};
    let name = crd.metadata.name.clone().unwrap_or_default();
    let Some(version) = crd.spec.versions.iter().find(|v| v.storage) else {
        return Err(PlaneError::Invalid(format!(
            "CRD {name} has no storage version"
        )));
    };
    let resource = kube::discovery::ApiResource {
        group: crd.spec.group.clone(),
        version: version.name.clone(),
        api_version: format!("{}/{}", crd.spec.group, version.name),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    };
    let objects: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut stream = std::pin::pin!(
        watcher::watcher(objects, watcher::Config::default().streaming_lists()).default_backoff()
    );
    let done = tokio::time::timeout(timeout, async {
        // Errors (the cache not ready yet: 429, 410) are retried after a backoff.
        while let Some(event) = stream.next().await {
            if let Ok(watcher::Event::InitDone) = event {
                return true;
            }
        }
        false
    })
    .await;
    match done {
        Ok(true) => Ok(()),
        _ => Err(PlaneError::Timeout {
            what: format!("the watch cache of CRD {name}"),
            secs: timeout.as_secs(),
            log: None,
        }),
    }
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

/// Server-side applies `patch` to the status of `name` as `field_manager`: the way the
/// controller (or the stand-in for one) that owns those fields writes them.
pub async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    field_manager: &str,
    patch: &Value,
) -> kube::Result<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams::apply(field_manager).force();
    api.patch_status(name, &params, &Patch::Apply(patch)).await
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
