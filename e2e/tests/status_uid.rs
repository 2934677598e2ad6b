//! A status write lands only on the object it was planned from. A FournosCluster deleted
//! and created again under its name is another object (another `metadata.uid`); a write
//! planned for the first must not land on the second. The three controllers write
//! status through one function, `hearth_runtime::status::apply_status`, which this test
//! drives directly: the instant between a plan and its write is not one a test can hit
//! through a controller's binary.
//!
//! It also records what kube-apiserver does with the two guards a status patch could
//! carry, which is why `apply_status` guards with the version and not the UID:
//! - `metadata.uid` in a server-side apply (or merge patch) of the status subresource is
//!   dropped without a word, and the write lands on the successor;
//! - `metadata.resourceVersion` is honoured: another object's version is refused,
//!   `409 Conflict`, "the object has been modified; please apply your changes to the
//!   latest version and try again".
//!
//! ```text
//! cargo build --workspace --bins && cargo test -p hearth-e2e --test status_uid -- --nocapture
//! ```

use anyhow::{Context as _, Result, ensure};
use hearth_api::{FournosCluster, FournosClusterSpec};
use hearth_e2e::ControlPlane;
use hearth_runtime::status::apply_status;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// The field manager of this test's writes (a controller's stands in its place).
const MANAGER: &str = "hearth-e2e-status-uid";

/// A namespace of this test's own, and its FournosCluster API.
async fn clusters(test: &str) -> Result<Api<FournosCluster>> {
    let plane = ControlPlane::shared().await?;
    let scope = plane.isolated(test).await?;
    Ok(Api::namespaced(
        plane.management_client().await?,
        &scope.namespace,
    ))
}

/// Creates `name`, deletes it and creates it again: (the first, its successor).
async fn replaced(
    api: &Api<FournosCluster>,
    name: &str,
) -> Result<(FournosCluster, FournosCluster)> {
    let spec = FournosClusterSpec {
        kubeconfig_secret: format!("kubeconfig-{name}"),
        ..FournosClusterSpec::default()
    };
    let cluster = FournosCluster::new(name, spec);
    let first = api.create(&PostParams::default(), &cluster).await?;
    api.delete(name, &DeleteParams::default()).await?;
    let successor = api.create(&PostParams::default(), &cluster).await?;
    ensure!(
        first.uid() != successor.uid(),
        "the successor has a UID of its own"
    );
    Ok((first, successor))
}

/// The field managers of `name`'s status.
async fn status_managers(api: &Api<FournosCluster>, name: &str) -> Result<Vec<String>> {
    let live = api.get(name).await?;
    Ok(live
        .managed_fields()
        .iter()
        .filter(|m| m.subresource.as_deref() == Some("status"))
        .filter_map(|m| m.manager.clone())
        .collect())
}

#[tokio::test]
async fn a_status_planned_for_a_replaced_cluster_does_not_land_on_its_successor() -> Result<()> {
    let api = clusters("status-uid").await?;
    let (first, successor) = replaced(&api, "a").await?;

    let written = apply_status(&api, &first, MANAGER, json!({"gpuSummary": "first"})).await?;
    ensure!(
        written.is_none(),
        "a write planned for the first cluster was reported written: {written:?}"
    );
    let live = api.get("a").await?;
    ensure!(
        live.status
            .as_ref()
            .and_then(|s| s.gpu_summary.as_ref())
            .is_none(),
        "the successor got the first cluster's status: {:?}",
        live.status
    );
    ensure!(
        status_managers(&api, "a").await?.is_empty(),
        "the successor's status has a manager"
    );

    // The successor's own plan is written, however stale the view it was planned from.
    let written = apply_status(
        &api,
        &successor,
        MANAGER,
        json!({"gpuSummary": "successor"}),
    )
    .await?
    .context("the successor's own status was not written")?;
    ensure!(written.uid() == successor.uid());
    // `successor` is now behind the object: the write is refused once, then applied.
    let written = apply_status(&api, &successor, MANAGER, json!({"gpuSummary": "again"}))
        .await?
        .context("a write from a stale view of the same cluster was not written")?;
    let summary = written.status.and_then(|s| s.gpu_summary);
    ensure!(summary.as_deref() == Some("again"), "{summary:?}");
    Ok(())
}

#[tokio::test]
async fn the_apiserver_ignores_a_uid_in_a_status_patch_and_honours_a_version() -> Result<()> {
    let api = clusters("status-uid-guards").await?;
    let (first, _) = replaced(&api, "a").await?;
    let apply = |metadata| {
        json!({"apiVersion": "fournos.dev/v1", "kind": "FournosCluster",
               "metadata": metadata, "status": {"gpuSummary": "first"}})
    };
    let params = PatchParams::apply(MANAGER).force();

    let by_version = apply(json!({"resourceVersion": first.resource_version()}));
    let refused = api
        .patch_status("a", &params, &Patch::Apply(&by_version))
        .await;
    let Err(kube::Error::Api(status)) = &refused else {
        anyhow::bail!("another object's resourceVersion was not refused: {refused:?}");
    };
    println!("{} {}: {}", status.code, status.reason, status.message);
    ensure!(status.code == 409, "{status:?}");
    ensure!(
        status.message.contains("the object has been modified"),
        "{status:?}"
    );

    let by_uid = apply(json!({"uid": first.uid()}));
    let landed = api
        .patch_status("a", &params, &Patch::Apply(&by_uid))
        .await
        .context("an apply carrying another object's UID was refused: the UID guard works now")?;
    let summary = landed.status.and_then(|s| s.gpu_summary);
    ensure!(
        summary.as_deref() == Some("first"),
        "the UID-carrying apply did not land: {summary:?}"
    );
    Ok(())
}
