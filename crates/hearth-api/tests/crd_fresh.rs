//! `manifests/crd.yaml` and `manifests/reservation-crd.yaml` must be exactly what `crdgen`
//! prints, so the CRDs people install always match the types the controllers were built
//! with.

use std::path::PathBuf;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The printer columns of CRD version `v` shown at `priority` (0: always, 1: `-o wide`),
/// upper-cased as kubectl prints them.
fn columns(v: &serde_json::Value, priority: i64) -> Vec<String> {
    v["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["priority"].as_i64().unwrap_or(0) == priority)
        .map(|c| c["name"].as_str().unwrap().to_uppercase())
        .collect()
}

#[test]
fn manifests_crds_are_fresh() {
    for (file, generated) in [
        (
            "manifests/crd.yaml",
            hearth_api::crd::fournos_cluster_crd_yaml(),
        ),
        (
            "manifests/reservation-crd.yaml",
            hearth_api::crd::reservation_crd_yaml(),
        ),
    ] {
        let path = repo_root().join(file);
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == generated.unwrap(),
            "{} is stale: regenerate it with `just crdgen`",
            path.display()
        );
    }
}

#[test]
fn reservation_crd_keeps_its_shape() {
    let crd: serde_json::Value =
        serde_saphyr::from_str(&hearth_api::crd::reservation_crd_yaml().unwrap()).unwrap();
    assert_eq!(crd["metadata"]["name"], "reservations.fournos.dev");
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    assert_eq!(
        crd["spec"]["names"]["shortNames"],
        serde_json::json!(["rsv"])
    );
    assert_eq!(
        crd["metadata"]["annotations"]["argocd.argoproj.io/sync-options"],
        hearth_api::crd::ARGOCD_CRD_SYNC_OPTIONS
    );
    let v = &crd["spec"]["versions"][0];
    assert_eq!(v["subresources"]["status"], serde_json::json!({}));
    assert_eq!(columns(v, 0), ["CLUSTER", "OWNER", "START", "END", "PHASE"]);
    assert_eq!(columns(v, 1), ["DRAIN BEFORE", "CONFLICTS WITH", "REASON"]);
    let spec = &v["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(
        spec["required"],
        serde_json::json!(["cluster", "end", "owner", "start"])
    );
    assert_eq!(
        spec["properties"]["owner"]["pattern"],
        hearth_api::cluster::OWNER_PATTERN
    );
    assert_eq!(
        spec["properties"]["drainBefore"]["pattern"],
        hearth_api::cluster::TTL_PATTERN
    );
    let status = &v["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
    assert_eq!(
        status["phase"]["enum"],
        serde_json::json!([
            "Accepted",
            "Conflict",
            "Draining",
            "Active",
            "Late",
            "Completed",
            "Cancelled"
        ])
    );
}

#[test]
fn crd_keeps_the_contract() {
    let crd: serde_json::Value =
        serde_saphyr::from_str(&hearth_api::crd::fournos_cluster_crd_yaml().unwrap()).unwrap();
    assert_eq!(crd["metadata"]["name"], "fournosclusters.fournos.dev");
    assert_eq!(crd["spec"]["group"], "fournos.dev");
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    assert_eq!(crd["spec"]["names"]["kind"], "FournosCluster");
    assert_eq!(
        crd["spec"]["names"]["shortNames"],
        serde_json::json!(["fc", "fcluster"])
    );
    let v = &crd["spec"]["versions"][0];
    assert_eq!(v["name"], "v1");
    assert_eq!(v["subresources"]["status"], serde_json::json!({}));

    assert_eq!(
        columns(v, 0),
        ["OWNER", "GPUS", "KUBECONFIG", "LOCKED", "AGE"]
    );
    assert_eq!(
        columns(v, 1),
        ["LOCK JOB", "TTL", "LOCK EXPIRES", "SCHEDULABLE", "POOL"]
    );
    // The wide columns read what kueue-sync and people write, under the names they use.
    let path_of = |name: &str| {
        v["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .and_then(|c| c["jsonPath"].as_str())
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        path_of("Schedulable"),
        format!(
            ".status.conditions[?(@.type==\"{}\")].reason",
            hearth_api::names::condition_types::SCHEDULABLE
        )
    );
    assert_eq!(
        path_of("Pool"),
        format!(
            ".metadata.labels.{}",
            hearth_api::names::POOL_LABEL.replace('.', "\\.")
        )
    );

    let schema = &v["schema"]["openAPIV3Schema"]["properties"];
    let spec = &schema["spec"];
    assert_eq!(spec["required"], serde_json::json!(["kubeconfigSecret"]));
    assert_eq!(
        spec["properties"]["ttl"]["pattern"],
        hearth_api::cluster::TTL_PATTERN
    );
    assert_eq!(
        spec["properties"]["gpuDiscoveryInterval"]["pattern"],
        hearth_api::cluster::INTERVAL_PATTERN
    );
    let owner = &spec["properties"]["owner"];
    assert_eq!(owner["pattern"], hearth_api::cluster::OWNER_PATTERN);
    assert_eq!(owner["maxLength"], hearth_api::cluster::MAX_OWNER_CHARS);
    assert!(
        spec["properties"]["ttl"]["description"]
            .as_str()
            .unwrap()
            .contains("30m"),
        "kubectl explain fournoscluster.spec.ttl must show an example"
    );

    let status = &schema["status"]["properties"];
    assert_eq!(
        status["kubeconfigStatus"]["enum"],
        serde_json::json!(["Valid", "Missing", "Invalid", "Unauthorized", "Unreachable"])
    );
    assert_eq!(status["conditions"]["x-kubernetes-list-type"], "map");
    assert_eq!(
        status["conditions"]["x-kubernetes-list-map-keys"],
        serde_json::json!(["type"])
    );
}
