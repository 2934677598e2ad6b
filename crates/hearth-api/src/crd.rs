//! The FournosCluster and Reservation CRDs as YAML, generated from the Rust types.
//! `manifests/crd.yaml`, `manifests/reservation-crd.yaml` and the chart's copies are this
//! output; a test fails when they are stale.
//!
//! And what a served CRD lacks: Helm never upgrades `crds/`, and the apiserver prunes a
//! status field its stored schema does not know, so a controller's write of it vanishes
//! without an error. [`missing_status_fields`] says which fields a controller writes that
//! the served schema would prune; `kubectl fournos doctor` and lock-manager's start both ask.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use crate::cluster::FournosCluster;
use crate::names::controllers::{DISCOVERY, KUEUE_SYNC, LOCK_MANAGER};
use crate::reservation::Reservation;
use crate::slices::{DiscoveryStatus, KueueSyncStatus, LockManagerStatus};

/// Header of the generated file, so nobody edits it by hand.
pub const GENERATED_HEADER: &str =
    "# Generated from the Rust types by `just crdgen` (hearth-api's crdgen). Do not edit.\n";

/// What Argo CD must do with the CRD (`argocd.argoproj.io/sync-options`): apply it server
/// side, as `kubectl apply --server-side` does on an upgrade ([`apply_crd_hint`]), and never
/// delete it, not even when the Application is deleted: that would delete every
/// FournosCluster (owners, cordons, hand-made clusters) and, with them, every published quota.
pub const ARGOCD_CRD_SYNC_OPTIONS: &str = "ServerSideApply=true,Delete=false";

/// The FournosCluster CRD as shipped: the types' CRD with the labels every object of the
/// chart carries (the CRD's `app.kubernetes.io/version` says which Hearth's schema it
/// serves) and the Argo CD sync options above.
pub fn fournos_cluster_crd() -> CustomResourceDefinition {
    shipped(FournosCluster::crd())
}

/// The Reservation CRD as shipped, labelled and annotated as [`fournos_cluster_crd`]:
/// deleting it would delete every booking.
pub fn reservation_crd() -> CustomResourceDefinition {
    shipped(Reservation::crd())
}

fn shipped(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    crd.metadata.labels = Some(
        [
            ("app.kubernetes.io/part-of", "hearth"),
            ("app.kubernetes.io/version", env!("CARGO_PKG_VERSION")),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into(),
    );
    crd.metadata.annotations = Some(
        [(
            "argocd.argoproj.io/sync-options".to_owned(),
            ARGOCD_CRD_SYNC_OPTIONS.to_owned(),
        )]
        .into(),
    );
    crd
}

/// The FournosCluster CRD, as written to `manifests/crd.yaml`.
pub fn fournos_cluster_crd_yaml() -> Result<String, serde_saphyr::ser::Error> {
    as_yaml(&fournos_cluster_crd())
}

/// The Reservation CRD, as written to `manifests/reservation-crd.yaml`.
pub fn reservation_crd_yaml() -> Result<String, serde_saphyr::ser::Error> {
    as_yaml(&reservation_crd())
}

fn as_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::ser::Error> {
    Ok(format!(
        "{GENERATED_HEADER}{}",
        serde_saphyr::to_string(crd)?
    ))
}

/// A controller that writes FournosCluster status: the writer of one slice
/// ([`crate::slices`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusWriter {
    Discovery,
    KueueSync,
    LockManager,
}

impl StatusWriter {
    pub const ALL: [StatusWriter; 3] = [Self::Discovery, Self::KueueSync, Self::LockManager];

    /// The controller's name (its binary, ServiceAccount and field manager).
    pub fn controller(self) -> &'static str {
        match self {
            Self::Discovery => DISCOVERY,
            Self::KueueSync => KUEUE_SYNC,
            Self::LockManager => LOCK_MANAGER,
        }
    }

    /// The top-level status fields it writes: the properties of its slice's schema.
    fn fields(self) -> Vec<String> {
        let schema = match self {
            Self::Discovery => schemars::schema_for!(DiscoveryStatus),
            Self::KueueSync => schemars::schema_for!(KueueSyncStatus),
            Self::LockManager => schemars::schema_for!(LockManagerStatus),
        };
        schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    }
}

/// The `status` schema of `crd`'s `v1` version as JSON; `Null` when it has none.
fn status_schema(crd: &CustomResourceDefinition) -> Value {
    crd.spec
        .versions
        .iter()
        .find(|v| v.name == crate::names::VERSION)
        .and_then(|v| v.schema.as_ref()?.open_api_v3_schema.as_ref())
        .and_then(|s| s.properties.as_ref()?.get("status"))
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null)
}

/// Every field `writer` writes (its fields and everything under them, as this version's
/// CRD declares them) that the `v1` schema of `served` does not declare, so that the
/// apiserver would prune it: paths such as `status.lockJobUID`,
/// `status.hardware.gpus[].driverVersions` (an array's items are `[]`, a map's values `*`).
/// Only the highest missing path is named; nothing under a field that keeps unknown
/// fields (`x-kubernetes-preserve-unknown-fields`) is missing. Empty: nothing is pruned.
pub fn missing_status_fields(
    served: &CustomResourceDefinition,
    writer: StatusWriter,
) -> Vec<String> {
    let current = status_schema(&FournosCluster::crd());
    let written: serde_json::Map<String, Value> = writer
        .fields()
        .into_iter()
        .filter_map(|f| Some((f.clone(), current["properties"].get(&f)?.clone())))
        .collect();
    let mut missing = Vec::new();
    missing_under(
        &json!({ "properties": written }),
        &status_schema(served),
        "status",
        &mut missing,
    );
    missing
}

/// Adds to `missing` each path under `path` that `expected` declares and `served` does not.
fn missing_under(expected: &Value, served: &Value, path: &str, missing: &mut Vec<String>) {
    if served.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    if let Some(properties) = expected.get("properties").and_then(Value::as_object) {
        for (name, schema) in properties {
            let at = format!("{path}.{name}");
            match served.get("properties").and_then(|p| p.get(name)) {
                Some(served) => missing_under(schema, served, &at, missing),
                None => missing.push(at),
            }
        }
    }
    if let Some(items) = expected.get("items") {
        let served = served.get("items").unwrap_or(&Value::Null);
        missing_under(items, served, &format!("{path}[]"), missing);
    }
    if let Some(values) = expected
        .get("additionalProperties")
        .filter(|v| v.is_object())
    {
        let at = format!("{path}.*");
        match served.get("additionalProperties") {
            Some(Value::Bool(true)) => {}
            Some(served) if served.is_object() => missing_under(values, served, &at, missing),
            _ => missing.push(at),
        }
    }
}

/// What to run to serve this version's FournosCluster CRD, in words a person acts on.
pub fn apply_crd_hint() -> String {
    let version = env!("CARGO_PKG_VERSION");
    format!(
        "apply the FournosCluster CRD of Hearth {version} (Helm installs crds/ once and never \
         upgrades them): `kubectl apply --server-side --force-conflicts -f charts/hearth/crds/` \
         from the release's chart, or `helm show crds hearth-{version}.tgz | kubectl apply \
         --server-side --force-conflicts -f -` (docs/upgrade.md)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated CRD with `field` (a path of property names under `status`) removed.
    fn without(field: &[&str]) -> CustomResourceDefinition {
        let mut crd = serde_json::to_value(FournosCluster::crd()).unwrap();
        let mut schema =
            &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
        let (last, parents) = field.split_last().unwrap();
        for p in parents {
            schema = &mut schema["properties"][*p];
        }
        let removed = schema["properties"].as_object_mut().unwrap().remove(*last);
        assert!(removed.is_some(), "{field:?} not in the CRD");
        serde_json::from_value(crd).unwrap()
    }

    #[test]
    fn the_current_crd_lacks_nothing_any_controller_writes() {
        let crd = FournosCluster::crd();
        for writer in StatusWriter::ALL {
            assert_eq!(
                missing_status_fields(&crd, writer),
                Vec::<String>::new(),
                "{writer:?}"
            );
        }
    }

    #[test]
    fn each_writer_has_fields_and_they_are_its_slice() {
        assert!(
            StatusWriter::LockManager
                .fields()
                .contains(&"lockJobUID".to_owned())
        );
        assert!(
            StatusWriter::Discovery
                .fields()
                .contains(&"hardware".to_owned())
        );
        assert!(
            StatusWriter::KueueSync
                .fields()
                .contains(&"kueue".to_owned())
        );
        assert!(
            !StatusWriter::KueueSync
                .fields()
                .contains(&"lockJobUID".to_owned())
        );
    }

    #[test]
    fn a_crd_without_lock_job_uid_is_missing_it_for_lock_manager_only() {
        let old = without(&["lockJobUID"]);
        assert_eq!(
            missing_status_fields(&old, StatusWriter::LockManager),
            ["status.lockJobUID"]
        );
        assert!(missing_status_fields(&old, StatusWriter::Discovery).is_empty());
        assert!(missing_status_fields(&old, StatusWriter::KueueSync).is_empty());
    }

    #[test]
    fn a_nested_field_is_named_by_its_path() {
        let old = without(&["hardware", "kubernetesVersion"]);
        assert_eq!(
            missing_status_fields(&old, StatusWriter::Discovery),
            ["status.hardware.kubernetesVersion"]
        );
        let mut crd = serde_json::to_value(FournosCluster::crd()).unwrap();
        let gpus = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
            ["properties"]["hardware"]["properties"]["gpus"]["items"];
        gpus["properties"]
            .as_object_mut()
            .unwrap()
            .remove("driverVersions");
        let old: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
        assert_eq!(
            missing_status_fields(&old, StatusWriter::Discovery),
            ["status.hardware.gpus[].driverVersions"]
        );
    }

    #[test]
    fn a_crd_without_a_status_schema_misses_every_field_and_one_that_keeps_unknown_fields_none() {
        let mut crd = serde_json::to_value(FournosCluster::crd()).unwrap();
        let status =
            &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
        *status = json!({ "type": "object" });
        let bare: CustomResourceDefinition = serde_json::from_value(crd.clone()).unwrap();
        let missing = missing_status_fields(&bare, StatusWriter::LockManager);
        assert!(
            missing.contains(&"status.lockJobUID".to_owned()),
            "{missing:?}"
        );
        assert!(missing.contains(&"status.locked".to_owned()), "{missing:?}");
        assert!(
            missing.iter().all(|p| p.matches('.').count() == 1),
            "{missing:?}"
        );
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] =
            json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true });
        let open: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
        for writer in StatusWriter::ALL {
            assert!(
                missing_status_fields(&open, writer).is_empty(),
                "{writer:?}"
            );
        }
    }

    #[test]
    fn the_hint_says_what_to_apply() {
        let hint = apply_crd_hint();
        assert!(hint.contains("kubectl apply --server-side"), "{hint}");
        assert!(hint.contains(env!("CARGO_PKG_VERSION")), "{hint}");
    }
}
