//! Status writes: server-side apply of only the fields a controller owns, under
//! its own field manager, so the three controllers never clobber each other.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Applies `status` (a JSON object holding only this controller's fields) to the
/// status subresource of `obj`. Fields this manager applied before and leaves out
/// now are removed; other managers' fields are untouched.
pub async fn apply_status<K>(
    api: &Api<K>,
    obj: &K,
    field_manager: &str,
    status: Value,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    // force: these fields are ours by contract; a stale claim by someone else
    // (a person's kubectl edit) must not block the controller forever.
    let params = PatchParams::apply(field_manager).force();
    api.patch_status(&obj.name_any(), &params, &Patch::Apply(&patch))
        .await
}
