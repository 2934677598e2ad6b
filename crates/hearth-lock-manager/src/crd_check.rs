//! At start, before the controller runs: the served FournosCluster CRD must declare every
//! status field lock-manager writes. Helm never upgrades `crds/`, and the apiserver prunes
//! a field its stored schema does not know: an older CRD would drop `status.lockJobUID`
//! from every write, so lock-manager would find its own sentinel unproven and delete and
//! recreate it forever. Refusing to start, naming the fields and what to apply, is the
//! answer a person can act on; readiness stays closed meanwhile.
//!
//! An install whose RBAC predates the rule that lets lock-manager read the CRD (`get`
//! on `customresourcedefinitions`, named `fournosclusters.fournos.dev`) is warned and
//! runs: the check is a guard, not a new prerequisite.

use hearth_api::crd::{StatusWriter, apply_crd_hint, missing_status_fields};
use hearth_api::names::CRD_NAME;
use hearth_runtime::Runtime;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;

use crate::error::brief;

/// Why lock-manager refuses to start (the error it stops with, logged by the runtime).
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error(
        "the served FournosCluster CRD ({CRD_NAME}) lacks status fields hearth-lock-manager \
         writes: {}; the apiserver would drop them from every write. Refusing to run: {}",
        .missing.join(", "),
        apply_crd_hint()
    )]
    Stale { missing: Vec<String> },

    #[error(
        "the FournosCluster CRD ({CRD_NAME}) is not installed: {}",
        apply_crd_hint()
    )]
    NotInstalled,

    #[error("cannot read the FournosCluster CRD ({CRD_NAME}): {}", brief(.0))]
    Read(#[source] kube::Error),
}

/// Reads the served CRD once and refuses a stale one (see the module docs). Readiness
/// has a gate of its own that opens only when the CRD passed (or could not be read for
/// RBAC reasons).
pub async fn refuse_stale_crd(rt: &Runtime) -> Result<(), CrdError> {
    let gate = rt.readiness().gate("fournosclusters-crd");
    let api: Api<CustomResourceDefinition> = Api::all(rt.client());
    match api.get_opt(CRD_NAME).await {
        Ok(Some(crd)) => {
            let missing = missing_status_fields(&crd, StatusWriter::LockManager);
            if !missing.is_empty() {
                // Logged as the error the process stops with.
                return Err(CrdError::Stale { missing });
            }
            tracing::info!(
                "the FournosCluster CRD declares every status field lock-manager writes"
            );
        }
        Ok(None) => return Err(CrdError::NotInstalled),
        Err(kube::Error::Api(status)) if status.code == 403 => tracing::warn!(
            "cannot check that the FournosCluster CRD declares every status field lock-manager \
             writes: not allowed to get customresourcedefinitions {CRD_NAME} ({}). Running \
             anyway; the chart of this version grants it.",
            status.message
        ),
        Err(e) => return Err(CrdError::Read(e)),
    }
    gate.ready();
    Ok(())
}
