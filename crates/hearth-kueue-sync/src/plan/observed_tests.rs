//! The observed views of the API objects, the desired flavor, name checks and the change
//! summary.

use hearth_api::KubeconfigStatus;
use hearth_api::names::CLUSTER_NODE_LABEL;
use serde_json::json;

use super::common::is_resource_name;
use super::*;
use crate::testing::{SLOT, cluster, foreign_flavor, gpu, hearth_flavor, queue};

#[test]
fn observed_views_read_the_api_objects() {
    let mut flavor = hearth_flavor("a");
    flavor.metadata.deletion_timestamp = Some(crate::testing::at(1));
    let observed = ObservedFlavor::from_flavor(&flavor, "hearth");
    assert_eq!(
        observed,
        ObservedFlavor {
            name: "a".into(),
            managed_by_hearth: true,
            node_labels: BTreeMap::from([(CLUSTER_NODE_LABEL.into(), "a".into())]).into(),
            pool_label_keys: None,
            cordon_tainted: false,
            legacy: false,
            deleting: true,
            in_use: true,
            adopted_for: None,
        }
    );
    assert!(
        !ObservedFlavor::from_flavor(&foreign_flavor("x"), "hearth").is_hearths(&BTreeSet::new())
    );
    assert!(
        !ObservedFlavor::from_flavor(&flavor, "hearth-staging").is_hearths(&BTreeSet::new()),
        "another Hearth's flavor"
    );

    let c = ObservedCluster::from_cluster(
        &cluster("a")
            .created(7)
            .gpu("a100", 2)
            .kubeconfig(Some(KubeconfigStatus::Missing))
            .deleting()
            .build(),
    );
    assert_eq!(c.name, "a");
    assert_eq!(c.created, Some(crate::testing::at(7).0));
    assert!(c.deleting && c.drained());
    assert_eq!(c.kubeconfig_secret, "kubeconfig-a");
    assert_eq!(c.gpus.len(), 1);
    assert!(c.counted && c.legacy_gpus == crate::plan::LegacyGpus::Absent && !c.undecodable);
    assert_eq!(c.uid.as_deref(), Some("uid-a"));
    assert_eq!(c.generation, Some(1));
}

#[test]
fn labels_are_found_by_key_as_in_the_map_they_come_from() {
    let map: BTreeMap<String, String> = [("team", "perf"), ("a/pool", "b"), ("zone", "")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let labels = Labels::from(&map);
    for key in ["team", "a/pool", "zone", "", "pool", "zzz"] {
        assert_eq!(labels.get(key), map.get(key), "{key}");
    }
    assert_eq!(labels.len(), 3);
    assert!(labels.iter().eq(map.iter()));
    assert_eq!(labels, Labels::from(map));
    assert!(Labels::default().is_empty() && Labels::default().get("team").is_none());
}

#[test]
fn desired_flavor_is_the_contract() {
    assert_eq!(
        serde_json::to_value(desired_flavor("gpu-a", "hearth")).unwrap(),
        json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "gpu-a", "labels": {
                "app.kubernetes.io/managed-by": "hearth",
                "fournos.dev/cluster-namespace": "hearth",
            }},
            "spec": {"nodeLabels": {"fournos.dev/cluster": "gpu-a"}},
        })
    );
}

#[test]
fn resource_and_label_names_are_checked_like_kubernetes_does() {
    for ok in [
        "fournos/gpu-a100",
        "fournos/cluster-slot",
        "cpu",
        "example.com/x_y.z",
    ] {
        assert!(is_resource_name(ok), "{ok}");
    }
    for bad in [
        "fournos/gpu-",
        "fournos/gpu-a100!",
        "Fournos/gpu",
        "/x",
        "a/b/c",
        "",
    ] {
        assert!(!is_resource_name(bad), "{bad}");
    }
    assert!(is_resource_name(&format!("fournos/{}", "a".repeat(63))));
    assert!(!is_resource_name(&format!("fournos/{}", "a".repeat(64))));
    assert!(is_label_value("a.b-c_d") && !is_label_value("-a") && !is_label_value(&"a".repeat(64)));
}

#[test]
fn summary_names_what_changed() {
    let old = queue(json!({"resourceGroups": [{
        "coveredResources": [SLOT, gpu("a100")],
        "flavors": [
            {"name": "a", "resources": [{"name": SLOT, "nominalQuota": "100"}, {"name": gpu("a100"), "nominalQuota": "8"}]},
            {"name": "b", "resources": [{"name": SLOT, "nominalQuota": "100"}, {"name": gpu("a100"), "nominalQuota": "4"}]},
        ],
    }]}));
    let new = queue(json!({"resourceGroups": [{
        "coveredResources": [SLOT, gpu("h100")],
        "flavors": [
            {"name": "a", "resources": [{"name": SLOT, "nominalQuota": "0"}, {"name": gpu("h100"), "nominalQuota": "0"}]},
            {"name": "c", "resources": [{"name": SLOT, "nominalQuota": "100"}, {"name": gpu("h100"), "nominalQuota": "2"}]},
        ],
    }]}));
    assert_eq!(
        cluster_queue_changes_summary(Some(&old), &new),
        "added flavors c; removed flavors b; a: fournos/cluster-slot 100→0, \
         fournos/gpu-h100 +0, fournos/gpu-a100 -; \
         resourceGroups[0].coveredResources: +fournos/gpu-h100 -fournos/gpu-a100"
    );
    assert_eq!(cluster_queue_changes_summary(Some(&old), &old), "no change");
    assert_eq!(
        cluster_queue_changes_summary(None, &old),
        "added flavors a, b; resourceGroups[0].coveredResources: +fournos/cluster-slot \
         +fournos/gpu-a100; resourceGroups: 0 → 1"
    );
}
