use super::*;
use crate::node_page::NodeView;
use crate::test_support::node;
use pretty_assertions::assert_eq;

fn one(vendor: &'static str, model: &str, count: i64) -> Vec<NodeGpus> {
    vec![NodeGpus {
        vendor,
        model: model.to_owned(),
        count,
        driver: None,
    }]
}

#[test]
fn per_node_counting_with_every_labeller_quirk() {
    let cases: Vec<(&str, Node, Vec<NodeGpus>)> = vec![
        (
            "plain NVIDIA",
            node("n").nvidia("NVIDIA-A100-SXM4-80GB", 8).build(),
            one(NVIDIA, "NVIDIA-A100-SXM4-80GB", 8),
        ),
        (
            "no product label",
            node("n").allocatable("nvidia.com/gpu", "4").build(),
            one(NVIDIA, "NVIDIA", 4),
        ),
        (
            "blank product label",
            node("n")
                .label("nvidia.com/gpu.product", " ")
                .allocatable("nvidia.com/gpu", "2")
                .build(),
            one(NVIDIA, "NVIDIA", 2),
        ),
        (
            "product label but no allocatable GPUs (device plugin not running)",
            node("n")
                .label("nvidia.com/gpu.product", "NVIDIA-L4")
                .label("nvidia.com/gpu.count", "1")
                .build(),
            vec![],
        ),
        (
            "time-slicing: -SHARED and replicas",
            node("n")
                .label("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB-SHARED")
                .label("nvidia.com/gpu.replicas", "4")
                .label("nvidia.com/gpu.count", "8")
                .allocatable("nvidia.com/gpu", "32")
                .build(),
            one(NVIDIA, "NVIDIA-A100-SXM4-40GB", 8),
        ),
        (
            "time-slicing written by the API server as 1k",
            node("n")
                .label("nvidia.com/gpu.product", "NVIDIA-L40S-SHARED")
                .label("nvidia.com/gpu.replicas", "125")
                .allocatable("nvidia.com/gpu", "1k")
                .build(),
            one(NVIDIA, "NVIDIA-L40S", 8),
        ),
        (
            "time-slicing with a -SHARED product but the replicas label lost",
            node("n")
                .label("nvidia.com/gpu.product", "NVIDIA-L4-SHARED")
                .allocatable("nvidia.com/gpu", "3")
                .build(),
            one(NVIDIA, "NVIDIA-L4", 3),
        ),
        (
            "time-slicing renamed to nvidia.com/gpu.shared",
            node("n")
                .label("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB")
                .label("nvidia.com/gpu.replicas", "4")
                .allocatable("nvidia.com/gpu.shared", "32")
                .build(),
            one(NVIDIA, "NVIDIA-A100-SXM4-40GB", 8),
        ),
        (
            "MIG single, GFD README's example: 8 GPUs × 7 1g.5gb",
            node("n")
                .label("nvidia.com/mig.strategy", "single")
                .label("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb")
                .label("nvidia.com/gpu.count", "56")
                .allocatable("nvidia.com/gpu", "56")
                .build(),
            one(NVIDIA, "NVIDIA-A100-SXM4-40GB", 8),
        ),
        (
            "MIG single, 3g.40gb on H100 (2 per GPU)",
            node("n")
                .label(
                    "nvidia.com/gpu.product",
                    "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb",
                )
                .allocatable("nvidia.com/gpu", "16")
                .build(),
            one(NVIDIA, "NVIDIA-H100-80GB-HBM3", 8),
        ),
        (
            "MIG single, 1g.20gb on H100 (memory-bound: 4 per GPU)",
            node("n")
                .label(
                    "nvidia.com/gpu.product",
                    "NVIDIA-H100-80GB-HBM3-MIG-1g.20gb",
                )
                .allocatable("nvidia.com/gpu", "32")
                .build(),
            one(NVIDIA, "NVIDIA-H100-80GB-HBM3", 8),
        ),
        (
            "MIG single, time-sliced",
            node("n")
                .label(
                    "nvidia.com/gpu.product",
                    "NVIDIA-A100-SXM4-80GB-MIG-7g.80gb-SHARED",
                )
                .label("nvidia.com/gpu.replicas", "2")
                .allocatable("nvidia.com/gpu", "8")
                .build(),
            one(NVIDIA, "NVIDIA-A100-SXM4-80GB", 4),
        ),
        (
            "MIG single, partly used GPUs are counted low, never high",
            node("n")
                .label("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb")
                .allocatable("nvidia.com/gpu", "10")
                .build(),
            one(NVIDIA, "NVIDIA-A100-SXM4-40GB", 2),
        ),
        (
            "MIG single, invalid configuration (GFD: count 0)",
            node("n")
                .label(
                    "nvidia.com/gpu.product",
                    "NVIDIA-A100-SXM4-40GB-MIG-INVALID",
                )
                .label("nvidia.com/gpu.count", "0")
                .allocatable("nvidia.com/gpu", "0")
                .build(),
            vec![],
        ),
        (
            "MIG mixed: nvidia.com/gpu excludes MIG GPUs, gpu.count has them all",
            node("n")
                .label("nvidia.com/mig.strategy", "mixed")
                .label("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3")
                .label("nvidia.com/gpu.count", "8")
                .label("nvidia.com/mig-1g.10gb.count", "14")
                .label("nvidia.com/mig-3g.40gb.count", "4")
                .allocatable("nvidia.com/gpu", "4")
                .allocatable("nvidia.com/mig-1g.10gb", "14")
                .allocatable("nvidia.com/mig-3g.40gb", "4")
                .build(),
            one(NVIDIA, "NVIDIA-H100-80GB-HBM3", 8),
        ),
        (
            "MIG mixed, every GPU MIG-enabled (nvidia.com/gpu is 0)",
            node("n")
                .label("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB")
                .label("nvidia.com/gpu.count", "2")
                .allocatable("nvidia.com/gpu", "0")
                .allocatable("nvidia.com/mig-2g.10gb", "6")
                .build(),
            one(NVIDIA, "NVIDIA-A100-SXM4-40GB", 2),
        ),
        (
            "MIG mixed without gpu.count: estimated from compute slices",
            node("n")
                .label("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3")
                .allocatable("nvidia.com/gpu", "4")
                .allocatable("nvidia.com/mig-1g.10gb", "14")
                .allocatable("nvidia.com/mig-3g.40gb", "4")
                .build(),
            one(NVIDIA, "NVIDIA-H100-80GB-HBM3", 8),
        ),
        (
            "MIG mixed with a time-sliced MIG profile and no gpu.count",
            node("n")
                .allocatable("nvidia.com/mig-7g.80gb", "8")
                .label("nvidia.com/mig-7g.80gb.replicas", "4")
                .build(),
            one(NVIDIA, "NVIDIA", 2),
        ),
        (
            "AMD, one model",
            node("n").amd("AMD_Instinct_MI300X", 8).build(),
            one(AMD, "AMD_Instinct_MI300X", 8),
        ),
        (
            "AMD, several models: per-model counts",
            node("n")
                .label("amd.com/gpu.product-name.AMD_Instinct_MI300X_OAM", "4")
                .label("amd.com/gpu.product-name.AMD_Instinct_MI210", "2")
                .label("amd.com/gpu.product-name.Broken", "x")
                .allocatable("amd.com/gpu", "6")
                .build(),
            vec![
                NodeGpus {
                    vendor: AMD,
                    model: "AMD_Instinct_MI210".into(),
                    count: 2,
                    driver: None,
                },
                NodeGpus {
                    vendor: AMD,
                    model: "AMD_Instinct_MI300X_OAM".into(),
                    count: 4,
                    driver: None,
                },
            ],
        ),
        (
            "AMD, older labeller: beta keys only",
            node("n")
                .label("beta.amd.com/gpu.product-name", "AMD_Instinct_MI250X_MI250")
                .label(
                    "beta.amd.com/gpu.product-name.AMD_Instinct_MI250X_MI250",
                    "8",
                )
                .allocatable("amd.com/gpu", "8")
                .build(),
            one(AMD, "AMD_Instinct_MI250X_MI250", 8),
        ),
        (
            "AMD, no product label",
            node("n").allocatable("amd.com/gpu", "2").build(),
            one(AMD, "AMD", 2),
        ),
        (
            "AMD labels without allocatable GPUs",
            node("n")
                .label("amd.com/gpu.product-name", "AMD_Instinct_MI210")
                .build(),
            vec![],
        ),
        (
            "NVIDIA and AMD on one node",
            node("n")
                .nvidia("NVIDIA-L4", 1)
                .amd("AMD_Instinct_MI210", 2)
                .build(),
            vec![
                NodeGpus {
                    vendor: NVIDIA,
                    model: "NVIDIA-L4".into(),
                    count: 1,
                    driver: None,
                },
                NodeGpus {
                    vendor: AMD,
                    model: "AMD_Instinct_MI210".into(),
                    count: 2,
                    driver: None,
                },
            ],
        ),
        ("CPU only", node("n").build(), vec![]),
        (
            "garbage quantities are not counted",
            node("n")
                .label("nvidia.com/gpu.product", "NVIDIA-L4")
                .allocatable("nvidia.com/gpu", "-3")
                .allocatable("amd.com/gpu", "99999999999999999999999")
                .build(),
            vec![],
        ),
    ];
    let mut failures = Vec::new();
    for (name, n, want) in cases {
        let got = node_gpus(&n);
        if got != want {
            failures.push(format!("{name}:\n  got  {got:?}\n  want {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn mig_instances_per_gpu_match_nvidia_profiles() {
    for (profile, model, per_gpu) in [
        ("1g.5gb", "NVIDIA-A100-SXM4-40GB", 7),
        ("1g.10gb", "NVIDIA-A100-SXM4-40GB", 4),
        ("2g.10gb", "NVIDIA-A100-SXM4-40GB", 3),
        ("3g.20gb", "NVIDIA-A100-SXM4-40GB", 2),
        ("4g.20gb", "NVIDIA-A100-SXM4-40GB", 1),
        ("7g.40gb", "NVIDIA-A100-SXM4-40GB", 1),
        ("1g.10gb", "NVIDIA-A100-SXM4-80GB", 7),
        ("1g.20gb", "NVIDIA-A100-SXM4-80GB", 4),
        ("1g.10gb", "NVIDIA-H100-80GB-HBM3", 7),
        ("2g.20gb", "NVIDIA-H100-80GB-HBM3", 3),
        ("3g.40gb", "NVIDIA-H100-80GB-HBM3", 2),
        ("1g.18gb", "NVIDIA-H200-SXM-141GB", 7),
        ("1g.35gb", "NVIDIA-H200-SXM-141GB", 4),
        ("3g.71gb", "NVIDIA-H200-SXM-141GB", 2),
        ("7g.141gb", "NVIDIA-H200-SXM-141GB", 1),
        ("1g.6gb", "NVIDIA-A30-24GB", 4),
        ("2g.12gb", "NVIDIA-A30-24GB", 2),
        ("4g.24gb", "NVIDIA-A30-24GB", 1),
        ("1g.10gb+me", "NVIDIA-A100-SXM4-80GB", 1),
        // No memory in the model name: compute slices only.
        ("1g.23gb", "NVIDIA-B200", 7),
        ("3g.90gb", "NVIDIA-B200", 2),
        // Unparseable: each device counts as a GPU.
        ("weird", "NVIDIA-A100-SXM4-80GB", 1),
        ("0g.0gb", "NVIDIA-A100-SXM4-80GB", 1),
    ] {
        assert_eq!(
            mig_instances_per_gpu(profile, model),
            per_gpu,
            "{profile} on {model}"
        );
    }
}

#[test]
fn fleet_count_merges_per_model_and_leaves_out_unusable_nodes() {
    let nodes = [
        node("a1").nvidia("NVIDIA-A100-SXM4-80GB", 4).build(),
        node("a2").nvidia("NVIDIA-A100-SXM4-80GB", 4).build(),
        node("a3").nvidia("NVIDIA-A100-PCIE-40GB", 2).build(),
        node("l").nvidia("NVIDIA-L40S", 2).build(),
        node("m").amd("AMD_Instinct_MI300X", 8).build(),
        node("cordoned")
            .nvidia("NVIDIA-H100-80GB-HBM3", 8)
            .cordoned()
            .build(),
        node("notready")
            .nvidia("NVIDIA-H100-80GB-HBM3", 8)
            .ready("False")
            .build(),
        node("unknown")
            .nvidia("NVIDIA-H100-80GB-HBM3", 8)
            .ready("Unknown")
            .build(),
        node("fresh")
            .nvidia("NVIDIA-H100-80GB-HBM3", 8)
            .without_conditions()
            .build(),
        node("cpu-cordoned").cordoned().build(),
        node("cpu").build(),
    ];
    let count = count_gpus(&nodes);
    let got: Vec<(&str, &str, &str, i64, i32)> = count
        .gpus
        .iter()
        .map(|g| {
            (
                g.vendor.as_str(),
                g.model.as_str(),
                g.short_name.as_str(),
                g.count,
                g.node_count,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("NVIDIA", "NVIDIA-A100-PCIE-40GB", "a100", 2, 1),
            ("NVIDIA", "NVIDIA-A100-SXM4-80GB", "a100", 8, 2),
            ("NVIDIA", "NVIDIA-L40S", "l40s", 2, 1),
            ("AMD", "AMD_Instinct_MI300X", "mi300x", 8, 1),
        ]
    );
    assert_eq!(count.total_gpus, 20);
    assert_eq!(count.gpu_nodes, 5);
    assert_eq!(
        count.excluded_nodes, 4,
        "CPU-only nodes are not GPU nodes left out"
    );
    assert_eq!(
        count.summary(),
        "8x AMD_Instinct_MI300X, 2x NVIDIA-A100-PCIE-40GB, 8x NVIDIA-A100-SXM4-80GB, 2x NVIDIA-L40S"
    );
}

#[test]
fn the_e2e_fleet_counts_as_its_table_says() {
    // target-b of e2e/src/fleet.rs.
    let nodes = [
        node("b-h200-0").nvidia("NVIDIA-H200-SXM-141GB", 8).build(),
        node("b-l40s-0").nvidia("NVIDIA-L40S", 2).build(),
        node("b-h100-cordoned")
            .nvidia("NVIDIA-H100-80GB-HBM3", 8)
            .cordoned()
            .build(),
        node("b-mi300x-0").amd("AMD_Instinct_MI300X", 8).build(),
        node("b-cpu-0").build(),
    ];
    let count = count_gpus(&nodes);
    assert_eq!(
        count.summary(),
        "8x AMD_Instinct_MI300X, 8x NVIDIA-H200-SXM-141GB, 2x NVIDIA-L40S"
    );
    assert_eq!(count.total_gpus, 18);
    assert_eq!(count.excluded_nodes, 1);
    let shorts: Vec<&str> = count.gpus.iter().map(|g| g.short_name.as_str()).collect();
    assert_eq!(shorts, ["h200", "l40s", "mi300x"]);
}

#[test]
fn empty_fleet() {
    let count = count_gpus(&[]);
    assert_eq!(count, GpuCount::default());
    assert_eq!(count.summary(), "none");
    let only_cpus = [node("cpu").build()];
    assert_eq!(count_gpus(&only_cpus).summary(), EMPTY_SUMMARY);
}

#[test]
fn huge_counts_saturate_instead_of_overflowing() {
    let nodes = [
        node("a").allocatable("nvidia.com/gpu", "9E").build(),
        node("b").allocatable("nvidia.com/gpu", "9E").build(),
    ];
    let count = count_gpus(&nodes);
    assert_eq!(count.total_gpus, i64::MAX);
}

#[test]
fn quantities() {
    for (q, want) in [
        ("8", Some(8)),
        (" 8 ", Some(8)),
        ("+8", Some(8)),
        ("0", Some(0)),
        ("1k", Some(1000)),
        ("1.5k", Some(1500)),
        ("2Ki", Some(2048)),
        ("1M", Some(1_000_000)),
        ("1e3", Some(1000)),
        ("1E2", Some(100)),
        ("2.9", Some(2)),
        ("500m", Some(0)),
        ("1500m", Some(1)),
        ("9E", Some(9_000_000_000_000_000_000)),
        ("10E", None),
        ("1e31", None),
        ("-1", None),
        ("", None),
        (".", None),
        ("1.2.3", None),
        ("abc", None),
        ("8 GPUs", None),
        ("1x", None),
    ] {
        assert_eq!(parse_quantity(q), want, "{q:?}");
    }
}

#[test]
fn counting_page_by_page_equals_counting_at_once() {
    let nodes = [
        node("a1").nvidia("NVIDIA-A100-SXM4-80GB", 4).build(),
        node("a2").nvidia("NVIDIA-A100-SXM4-80GB", 4).build(),
        node("h")
            .nvidia("NVIDIA-H100-80GB-HBM3", 8)
            .cordoned()
            .build(),
        node("l").nvidia("NVIDIA-L40S", 2).build(),
        node("cpu").build(),
        node("m").amd("AMD_Instinct_MI300X", 8).build(),
    ];
    let at_once = count_gpus(&nodes);
    let mut tally = GpuTally::default();
    let views: Vec<NodeView> = nodes.iter().map(NodeView::from).collect();
    for page in views.chunks(2) {
        tally.add_all(page);
    }
    assert_eq!(tally.finish(), at_once);
    assert_eq!(at_once.total_gpus, 18);
    assert_eq!(at_once.excluded_nodes, 1);
    assert_eq!(at_once.gpu_nodes, 4);
}

/// Regression (found by `just fuzz`, target `node_gpus`): memory sizes near `i64::MAX`
/// in a MIG `single` product label overflowed the slice arithmetic, which panics in a
/// debug build and miscounts in a release one. A node's labels are the target's input.
#[test]
fn mig_memory_sizes_that_overflow_i64_arithmetic_count_without_panicking() {
    for product in [
        "NVIDIA-A100-SXM4-40GB-MIG-1g.4611686018427387904gb",
        "NVIDIA-A100-SXM4-4611686018427387904GB-MIG-1g.5gb",
        "NVIDIA-A100-SXM4-9223372036854775807GB-MIG-1g.9223372036854775807gb",
    ] {
        let n = node("n")
            .label("nvidia.com/gpu.product", product)
            .allocatable("nvidia.com/gpu", "7")
            .build();
        let gpus = node_gpus(&n);
        assert_eq!(gpus.len(), 1, "{product}");
        assert!(
            (1..=7).contains(&gpus[0].count),
            "{product}: {}",
            gpus[0].count
        );
    }
}

/// Regression (found by `e2e/tests/hostile.rs`): a MIG `mixed` resource whose profile
/// claims more compute slices than a GPU has (`nvidia.com/mig-999g.1gb: 5`) was counted
/// as 5 × 999 / 7 = 714 GPUs. Five MIG devices are at most five GPUs.
#[test]
fn a_junk_mig_profile_never_counts_more_gpus_than_devices() {
    let n = node("n")
        .label("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB")
        .allocatable("nvidia.com/mig-999g.1gb", "5")
        .build();
    assert_eq!(node_gpus(&n), one(NVIDIA, "NVIDIA-A100-SXM4-40GB", 5));
}

#[test]
fn product_names_that_no_label_can_hold_count_as_the_vendor() {
    for (model, sane) in [
        ("NVIDIA-A100-SXM4-80GB", true),
        ("AMD_Instinct_MI300X", true),
        ("x__--..--__x", true),
        (&*"X".repeat(63), true),
        (&*"X".repeat(64), false),
        ("-A100", false),
        ("A100 80GB", false),
        ("<script>", false),
        ("A100\n", false),
        ("", false),
    ] {
        assert_eq!(is_product_name(model), sane, "{model:?}");
    }
    let mut tally = GpuTally::default();
    let mut n = NodeView::from(&node("n").nvidia("A100", 2).build());
    n.labels
        .insert("nvidia.com/gpu.product".into(), "A100 with spaces".into());
    tally.add(&n);
    let count = tally.finish();
    assert_eq!(count.gpus.len(), 1);
    assert_eq!(
        (count.gpus[0].model.as_str(), count.gpus[0].count),
        (NVIDIA, 2)
    );
}

#[test]
fn more_models_than_a_cluster_may_publish_are_flagged_not_kept() {
    let mut tally = GpuTally::default();
    for i in 0..MAX_GPU_MODELS {
        tally.add(&NodeView::from(
            &node("n").nvidia(&format!("M{i}"), 1).build(),
        ));
    }
    assert!(!tally.too_many_models());
    // A model already kept is still counted.
    tally.add(&NodeView::from(&node("n").nvidia("M0", 1).build()));
    assert!(!tally.too_many_models());
    tally.add(&NodeView::from(
        &node("n").nvidia("one-too-many", 1).build(),
    ));
    assert!(tally.too_many_models());
    let count = tally.finish();
    assert_eq!(count.gpus.len(), MAX_GPU_MODELS);
    assert_eq!(count.total_gpus, MAX_GPU_MODELS as i64 + 1);
}

#[test]
fn driver_versions_per_model_from_either_labeller() {
    let nvidia = |name: &str, product: &str| node(name).nvidia(product, 8);
    let nodes = [
        nvidia("a", "NVIDIA-A100-SXM4-80GB")
            .label("nvidia.com/cuda.driver-version.full", "550.54.15")
            .build(),
        // Only the parts, GFD's current keys.
        nvidia("b", "NVIDIA-A100-SXM4-80GB")
            .label("nvidia.com/cuda.driver-version.major", "535")
            .label("nvidia.com/cuda.driver-version.minor", "104")
            .label("nvidia.com/cuda.driver-version.revision", "05")
            .build(),
        // Older GFD keys; the same version as a is counted once.
        nvidia("c", "NVIDIA-A100-SXM4-80GB")
            .label("nvidia.com/cuda.driver.major", "550")
            .label("nvidia.com/cuda.driver.minor", "54")
            .label("nvidia.com/cuda.driver.rev", "15")
            .build(),
        // Junk is dropped, never shown.
        nvidia("d", "NVIDIA-H200-SXM-141GB")
            .label("nvidia.com/cuda.driver-version.full", "550 \u{202e}evil")
            .build(),
        node("e")
            .amd("AMD_Instinct_MI300X", 8)
            .label("amd.com/gpu.driver-version", "6.8.5")
            .build(),
    ];
    let count = count_gpus(&nodes);
    let drivers: BTreeMap<&str, Vec<&str>> = count
        .gpus
        .iter()
        .map(|g| {
            (
                g.model.as_str(),
                g.driver_versions.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        drivers,
        BTreeMap::from([
            ("NVIDIA-A100-SXM4-80GB", vec!["535.104.05", "550.54.15"]),
            ("NVIDIA-H200-SXM-141GB", vec![]),
            ("AMD_Instinct_MI300X", vec!["6.8.5"]),
        ])
    );
}

#[test]
fn driver_versions_are_bounded_per_model_and_never_a_secret() {
    let nodes: Vec<_> = (0..20)
        .map(|i| {
            node(&format!("n{i}"))
                .nvidia("NVIDIA-L4", 1)
                .label("nvidia.com/cuda.driver-version.full", &format!("5{i:02}.1"))
                .build()
        })
        .collect();
    let count = count_gpus(&nodes);
    assert_eq!(count.gpus[0].driver_versions.len(), MAX_DRIVER_VERSIONS);
    assert_eq!(count.gpus[0].count, 20, "every GPU still counts");

    let mut tally = GpuTally::default();
    let views: Vec<NodeView> = nodes.iter().map(NodeView::from).collect();
    tally.add_all(&views);
    let refused = tally.finish_refusing(|s| s == "500.1");
    assert!(
        !refused.gpus[0]
            .driver_versions
            .contains(&"500.1".to_owned()),
        "{:?}",
        refused.gpus[0].driver_versions
    );
}
