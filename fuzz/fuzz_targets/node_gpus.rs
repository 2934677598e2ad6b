//! Nodes with arbitrary GPU labels and allocatable resources, the well-known keys made
//! likely: counting never panics, never goes negative, and every model it reports has a
//! valid short name.
#![no_main]

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use hearth_discovery::gpus::{count_gpus, node_gpus};
use hearth_discovery::short_name::is_valid_name_part;
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum LabelKey {
    Product,
    Count,
    Replicas,
    MigReplicas(String),
    AmdProduct,
    BetaAmdProduct,
    AmdProductPerModel(String),
    Other(String),
}

#[derive(Arbitrary, Debug)]
enum LabelValue {
    Text(String),
    Number(i64),
    MigSingle(String, String),
    Shared(String),
}

#[derive(Arbitrary, Debug)]
enum ResourceName {
    NvidiaGpu,
    NvidiaShared,
    Mig(String),
    AmdGpu,
    Other(String),
}

#[derive(Arbitrary, Debug)]
enum QuantityText {
    Text(String),
    Int(i64),
    Decimal(i64, u16),
    Suffixed(i64, u8),
}

#[derive(Arbitrary, Debug)]
struct FuzzNode {
    labels: Vec<(LabelKey, LabelValue)>,
    allocatable: Vec<(ResourceName, QuantityText)>,
    ready: Option<bool>,
    unschedulable: Option<bool>,
}

const SUFFIXES: &[&str] = &[
    "", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3", "E18", "e-3",
    "e30",
];

fn build(n: FuzzNode) -> Node {
    let labels: BTreeMap<String, String> = n
        .labels
        .into_iter()
        .map(|(k, v)| {
            let key = match k {
                LabelKey::Product => "nvidia.com/gpu.product".to_owned(),
                LabelKey::Count => "nvidia.com/gpu.count".to_owned(),
                LabelKey::Replicas => "nvidia.com/gpu.replicas".to_owned(),
                LabelKey::MigReplicas(p) => format!("nvidia.com/mig-{p}.replicas"),
                LabelKey::AmdProduct => "amd.com/gpu.product-name".to_owned(),
                LabelKey::BetaAmdProduct => "beta.amd.com/gpu.product-name".to_owned(),
                LabelKey::AmdProductPerModel(m) => format!("amd.com/gpu.product-name.{m}"),
                LabelKey::Other(k) => k,
            };
            let value = match v {
                LabelValue::Text(t) => t,
                LabelValue::Number(n) => n.to_string(),
                LabelValue::MigSingle(model, profile) => format!("{model}-MIG-{profile}"),
                LabelValue::Shared(model) => format!("{model}-SHARED"),
            };
            (key, value)
        })
        .collect();
    let allocatable: BTreeMap<String, Quantity> = n
        .allocatable
        .into_iter()
        .map(|(r, q)| {
            let name = match r {
                ResourceName::NvidiaGpu => "nvidia.com/gpu".to_owned(),
                ResourceName::NvidiaShared => "nvidia.com/gpu.shared".to_owned(),
                ResourceName::Mig(p) => format!("nvidia.com/mig-{p}"),
                ResourceName::AmdGpu => "amd.com/gpu".to_owned(),
                ResourceName::Other(o) => o,
            };
            let quantity = match q {
                QuantityText::Text(t) => t,
                QuantityText::Int(i) => i.to_string(),
                QuantityText::Decimal(i, f) => format!("{i}.{f}"),
                QuantityText::Suffixed(i, s) => {
                    format!("{i}{}", SUFFIXES[usize::from(s) % SUFFIXES.len()])
                }
            };
            (name, Quantity(quantity))
        })
        .collect();
    Node {
        metadata: ObjectMeta {
            name: Some("fuzz".to_owned()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            unschedulable: n.unschedulable,
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            allocatable: Some(allocatable),
            conditions: n.ready.map(|r| {
                vec![NodeCondition {
                    type_: "Ready".to_owned(),
                    status: if r { "True" } else { "False" }.to_owned(),
                    ..NodeCondition::default()
                }]
            }),
            ..NodeStatus::default()
        }),
    }
}

fuzz_target!(|nodes: Vec<FuzzNode>| {
    let nodes: Vec<Node> = nodes.into_iter().take(8).map(build).collect();
    for node in &nodes {
        for g in node_gpus(node) {
            assert!(g.count >= 0, "negative count {g:?}");
        }
    }
    let count = count_gpus(&nodes);
    let mut sum = 0i64;
    for g in &count.gpus {
        assert!(g.count > 0, "{g:?}");
        assert!(g.node_count > 0, "{g:?}");
        assert!(is_valid_name_part(&g.short_name), "{g:?}");
        sum = sum.saturating_add(g.count);
    }
    assert_eq!(sum, count.total_gpus);
    assert!(count.gpu_nodes >= 0 && count.excluded_nodes >= 0);
    let _ = count.summary();
});
