//! What makes a ClusterQueue invalid for Kueue: its CRD rules and its admission webhook,
//! written down once as a test oracle.
//!
//! The local e2e plane runs Kueue without its webhook, and unit tests run no Kueue at
//! all, so both check Hearth's queues against [`problems`]. The limits are restated here
//! from Kueue's API rather than taken from kueue-sync's plan on purpose: an oracle that
//! shares its numbers with the code under test cannot catch a wrong number.

use std::collections::BTreeMap;

use crate::kueue::{ClusterQueueSpec, ResourceFlavorSpec, ResourceQuota, quantity_to_i64};
use crate::names::{is_dns_label, is_label_key, is_label_name};

/// Kueue: at most this many resource groups in a ClusterQueue.
pub const MAX_RESOURCE_GROUPS: usize = 16;
/// Kueue: at most this many flavors in one resource group.
pub const MAX_FLAVORS_PER_GROUP: usize = 64;
/// Kueue: at most this many flavors across a ClusterQueue's resource groups.
pub const MAX_FLAVORS_PER_QUEUE: usize = 256;
/// Kueue: at most this many covered resources in one resource group.
pub const MAX_COVERED_RESOURCES: usize = 64;

/// Kueue: at most this many `nodeLabels` on a ResourceFlavor.
pub const MAX_FLAVOR_NODE_LABELS: usize = 8;
/// Kueue: at most this many `nodeTaints` on a ResourceFlavor.
pub const MAX_FLAVOR_NODE_TAINTS: usize = 8;

/// Everything Kueue's CRD would reject in a ResourceFlavor's `spec`, one line each.
pub fn flavor_problems(spec: &ResourceFlavorSpec) -> Vec<String> {
    let mut problems = Vec::new();
    if spec.node_labels.len() > MAX_FLAVOR_NODE_LABELS {
        problems.push(format!("{} nodeLabels", spec.node_labels.len()));
    }
    for (key, value) in &spec.node_labels {
        if !is_label_key(key) {
            problems.push(format!("nodeLabels: invalid key {key}"));
        }
        if !(value.is_empty() || is_label_name(value)) {
            problems.push(format!("nodeLabels[{key}]: invalid value {value}"));
        }
    }
    if spec.node_taints.len() > MAX_FLAVOR_NODE_TAINTS {
        problems.push(format!("{} nodeTaints", spec.node_taints.len()));
    }
    for taint in &spec.node_taints {
        if !is_label_key(&taint.key) {
            problems.push(format!("nodeTaints: invalid key {}", taint.key));
        }
        if !matches!(
            taint.effect.as_str(),
            "NoSchedule" | "PreferNoSchedule" | "NoExecute"
        ) {
            problems.push(format!(
                "nodeTaints[{}]: effect {}",
                taint.key, taint.effect
            ));
        }
    }
    problems
}

/// Everything Kueue (CRD rules and webhook) would reject in `spec`, one line each;
/// empty when Kueue accepts it.
pub fn problems(spec: &ClusterQueueSpec) -> Vec<String> {
    let mut problems = Vec::new();
    let groups = &spec.resource_groups;
    if groups.len() > MAX_RESOURCE_GROUPS {
        problems.push(format!("{} resource groups", groups.len()));
    }
    let total: usize = groups.iter().map(|g| g.flavors.len()).sum();
    if total > MAX_FLAVORS_PER_QUEUE {
        problems.push(format!("{total} flavors in the queue"));
    }
    let mut seen_resources = BTreeMap::new();
    let mut seen_flavors = BTreeMap::new();
    for (i, group) in groups.iter().enumerate() {
        let covered = &group.covered_resources;
        if covered.is_empty() || covered.len() > MAX_COVERED_RESOURCES {
            problems.push(format!("group {i}: {} covered resources", covered.len()));
        }
        if group.flavors.is_empty() || group.flavors.len() > MAX_FLAVORS_PER_GROUP {
            problems.push(format!("group {i}: {} flavors", group.flavors.len()));
        }
        for r in covered {
            if !is_qualified_name(r) {
                problems.push(format!("group {i}: invalid resource name {r}"));
            }
            if let Some(j) = seen_resources.insert(r.clone(), i) {
                problems.push(format!("resource {r} in groups {j} and {i}"));
            }
        }
        for flavor in &group.flavors {
            if let Some(j) = seen_flavors.insert(flavor.name.clone(), i) {
                problems.push(format!("flavor {} in groups {j} and {i}", flavor.name));
            }
            let names: Vec<&String> = flavor.resources.iter().map(|q| &q.name).collect();
            if names != covered.iter().collect::<Vec<_>>() {
                problems.push(format!(
                    "group {i}: flavor {} lists {names:?}, covered {covered:?}",
                    flavor.name
                ));
            }
            for q in &flavor.resources {
                problems.extend(quota_problems(&flavor.name, q));
            }
        }
    }
    problems
}

fn quota_problems(flavor: &str, q: &ResourceQuota) -> Vec<String> {
    let mut problems = Vec::new();
    let nominal = quantity_to_i64(&q.nominal_quota);
    if nominal.is_none_or(|n| n < 0) {
        problems.push(format!(
            "{flavor}/{}: nominalQuota {:?}",
            q.name, q.nominal_quota
        ));
    }
    let lending = q
        .other
        .get("lendingLimit")
        .map(|l| serde_json::from_value(l.clone()).map(|l| quantity_to_i64(&l)));
    match (lending, nominal) {
        (Some(Ok(Some(lend))), Some(nominal)) if lend > nominal => {
            problems.push(format!("{flavor}/{}: lendingLimit above nominal", q.name));
        }
        (Some(Err(_)), _) => {
            problems.push(format!("{flavor}/{}: lendingLimit not a quantity", q.name));
        }
        _ => {}
    }
    problems
}

/// Kubernetes's qualified name, as Kueue checks `coveredResources`: an optional
/// DNS-subdomain prefix (at most 253 characters of dot-separated DNS labels) and `/`,
/// then a label name.
fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, s),
    };
    prefix.is_none_or(|p| p.len() <= 253 && p.split('.').all(is_dns_label)) && is_label_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kueue::{FlavorQuotas, ResourceGroup};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn quota(name: &str, n: &str) -> ResourceQuota {
        ResourceQuota {
            name: name.into(),
            nominal_quota: Quantity(n.into()),
            other: Default::default(),
        }
    }

    fn queue(covered: &[&str], flavors: &[(&str, &[(&str, &str)])]) -> ClusterQueueSpec {
        ClusterQueueSpec {
            resource_groups: vec![ResourceGroup {
                covered_resources: covered.iter().map(|r| (*r).to_owned()).collect(),
                flavors: flavors
                    .iter()
                    .map(|(name, quotas)| FlavorQuotas {
                        name: (*name).into(),
                        resources: quotas.iter().map(|(r, n)| quota(r, n)).collect(),
                        other: Default::default(),
                    })
                    .collect(),
                other: Default::default(),
            }],
            other: Default::default(),
        }
    }

    #[test]
    fn a_well_formed_queue_has_no_problems() {
        let spec = queue(
            &["fournos/cluster-slot", "fournos/gpu-a100"],
            &[(
                "c1",
                &[("fournos/cluster-slot", "100"), ("fournos/gpu-a100", "8")],
            )],
        );
        assert_eq!(problems(&spec), Vec::<String>::new());
    }

    #[test]
    fn each_rule_is_reported() {
        let order = queue(
            &["a", "b"],
            &[
                ("c1", &[("b", "1"), ("a", "1")]),
                ("c1", &[("a", "1"), ("b", "1")]),
            ],
        );
        let found = problems(&order);
        assert!(found.iter().any(|p| p.contains("lists")), "{found:?}");
        assert!(
            found.iter().any(|p| p.contains("flavor c1 in groups")),
            "{found:?}"
        );

        let negative = queue(&["a"], &[("c1", &[("a", "-1")])]);
        assert!(problems(&negative)[0].contains("nominalQuota"));

        let bad_name = queue(&["Not A Name"], &[("c1", &[("Not A Name", "1")])]);
        assert!(problems(&bad_name)[0].contains("invalid resource name"));

        let empty = queue(&[], &[]);
        assert_eq!(problems(&empty).len(), 2, "{:?}", problems(&empty));
    }

    #[test]
    fn flavor_rules() {
        use k8s_openapi::api::core::v1::Taint;
        let labels = |n: usize| {
            (0..n)
                .map(|i| (format!("example.com/k{i}"), "v".to_owned()))
                .collect()
        };
        let ok = ResourceFlavorSpec {
            node_labels: labels(8),
            node_taints: vec![Taint {
                key: "fournos.dev/cordoned".into(),
                effect: "NoSchedule".into(),
                ..Taint::default()
            }],
            other: Default::default(),
        };
        assert_eq!(flavor_problems(&ok), Vec::<String>::new());
        let mut bad = ok.clone();
        bad.node_labels = labels(9);
        bad.node_labels.insert("x".into(), "not a value".into());
        bad.node_taints[0].effect = "Never".into();
        let found = flavor_problems(&bad);
        assert_eq!(found.len(), 3, "{found:?}");
    }

    #[test]
    fn qualified_names() {
        for ok in ["cpu", "fournos/cluster-slot", "nvidia.com/gpu", "a_b.c"] {
            assert!(is_qualified_name(ok), "{ok}");
        }
        for bad in [
            "",
            "/x",
            "a/",
            "-a",
            "a-",
            "Foo.Bar/x",
            "a..b/x",
            &"x".repeat(64),
        ] {
            assert!(!is_qualified_name(bad), "{bad}");
        }
    }
}
