//! `manifests/crd.yaml` must be exactly what `crdgen` prints, so the CRD people
//! install always matches the types the controllers were built with.

use std::path::PathBuf;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn manifests_crd_is_fresh() {
    let generated = hearth_api::crd::fournos_cluster_crd_yaml().unwrap();
    let path = repo_root().join("manifests/crd.yaml");
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "{} is stale: regenerate it with `just crdgen` \
         (cargo run -p hearth-api --bin crdgen > manifests/crd.yaml)",
        path.display()
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

    let columns: Vec<(String, i64)> = v["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_uppercase(),
                c["priority"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    let narrow: Vec<&str> = columns
        .iter()
        .filter(|c| c.1 == 0)
        .map(|c| c.0.as_str())
        .collect();
    assert_eq!(narrow, ["OWNER", "GPUS", "KUBECONFIG", "LOCKED", "AGE"]);
    let wide: Vec<&str> = columns
        .iter()
        .filter(|c| c.1 == 1)
        .map(|c| c.0.as_str())
        .collect();
    assert_eq!(
        wide,
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
