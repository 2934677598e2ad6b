//! Physical GPUs per model, counted from a target's Node objects.
//!
//! Quota promises physical GPUs, but the resources a device plugin advertises are not
//! always physical GPUs. The labellers' quirks, as their sources have them:
//!
//! NVIDIA, GPU Feature Discovery (NVIDIA/k8s-device-plugin, `internal/lm/resource.go`,
//! `internal/lm/mig-strategy.go`, `docs/gpu-feature-discovery/README.md`):
//! - `nvidia.com/gpu.product` is the model with spaces turned into `-`. With
//!   time-slicing (replicas > 1) and the resource not renamed, `-SHARED` is appended
//!   and the device plugin advertises `replicas` devices per GPU in `nvidia.com/gpu`;
//!   `nvidia.com/gpu.replicas` says how many.
//! - With `renameByDefault`, the shared devices are advertised as
//!   `nvidia.com/gpu.shared` instead, and the product carries no `-SHARED`.
//! - MIG `single`: `nvidia.com/gpu` counts MIG devices; the product becomes
//!   `<model>-MIG-<profile>` and `nvidia.com/gpu.count` is *overridden* to the number of
//!   MIG devices too (the README's example: 8 GPUs × 7 `1g.5gb` → `gpu.count=56`). No
//!   label holds the physical count, so it is derived from the profile: devices ÷ the
//!   profile's instances per GPU.
//! - MIG `mixed`: each profile is a resource `nvidia.com/mig-<profile>`;
//!   `nvidia.com/gpu` then counts only GPUs with MIG disabled, while
//!   `nvidia.com/gpu.count` counts every GPU of the model, MIG-enabled or not.
//! - A node with several NVIDIA models gets the labels of only one of them (GFD logs
//!   "Multiple device types detected"), so all of its NVIDIA GPUs are counted as that one.
//!
//! AMD, ROCm node labeller (ROCm/k8s-device-plugin, `cmd/k8s-node-labeller/main.go`):
//! - one model on the node: `amd.com/gpu.product-name=<Name>`; several models:
//!   `amd.com/gpu.product-name.<Name>=<count>` per model instead. `<Name>` is the
//!   sysfs product name with spaces as `_` and parentheses removed
//!   (`AMD_Instinct_MI300X`). Older labellers wrote only `beta.amd.com/…` keys; those
//!   are read when the plain ones are absent. GPUs are advertised as `amd.com/gpu`.
//!
//! Without a product label the model is the vendor (`NVIDIA`, `AMD`). Cordoned and
//! not-Ready nodes are left out and counted, so status can say how many.
//!
//! Driver versions, per model, from the nodes that count: GFD's
//! `nvidia.com/cuda.driver-version.full` (`550.54.15`), else its
//! `nvidia.com/cuda.driver-version.{major,minor,revision}`, else the older
//! `nvidia.com/cuda.driver.{major,minor,rev}`; the AMD labeller's
//! `amd.com/gpu.driver-version` (or `beta.amd.com/…`). A value that is not plain version
//! text ([`is_version_text`]) is dropped; at most [`MAX_DRIVER_VERSIONS`] per model.

use std::collections::BTreeMap;

use std::collections::BTreeSet;

use hearth_api::GpuInfo;
use hearth_api::cluster::{MAX_DRIVER_VERSIONS, is_version_text};
use k8s_openapi::api::core::v1::Node;

use crate::node_page::NodeView;
use crate::short_name::short_name;

pub const NVIDIA: &str = "NVIDIA";
pub const AMD: &str = "AMD";

/// `gpuSummary` of a cluster whose schedulable nodes have no GPUs. A word rather than
/// an empty string, so the printer column says the cluster was counted and has none.
pub const EMPTY_SUMMARY: &str = "none";

const NVIDIA_GPU: &str = "nvidia.com/gpu";
const NVIDIA_GPU_SHARED: &str = "nvidia.com/gpu.shared";
const NVIDIA_MIG_PREFIX: &str = "nvidia.com/mig-";
const NVIDIA_PRODUCT: &str = "nvidia.com/gpu.product";
const NVIDIA_COUNT: &str = "nvidia.com/gpu.count";
const NVIDIA_REPLICAS: &str = "nvidia.com/gpu.replicas";
const SHARED_SUFFIX: &str = "-SHARED";
const MIG_INFIX: &str = "-MIG-";
const AMD_GPU: &str = "amd.com/gpu";
const AMD_PRODUCT_KEYS: [&str; 2] = ["amd.com/gpu.product-name", "beta.amd.com/gpu.product-name"];
const NVIDIA_DRIVER_FULL: &str = "nvidia.com/cuda.driver-version.full";
/// `(major, minor, revision)` label keys, GFD's current ones first.
const NVIDIA_DRIVER_PARTS: [[&str; 3]; 2] = [
    [
        "nvidia.com/cuda.driver-version.major",
        "nvidia.com/cuda.driver-version.minor",
        "nvidia.com/cuda.driver-version.revision",
    ],
    [
        "nvidia.com/cuda.driver.major",
        "nvidia.com/cuda.driver.minor",
        "nvidia.com/cuda.driver.rev",
    ],
];
const AMD_DRIVER_KEYS: [&str; 2] = [
    "amd.com/gpu.driver-version",
    "beta.amd.com/gpu.driver-version",
];

/// GPU models one cluster may publish (the contract's limit, shared with kueue-sync).
pub use hearth_api::cluster::MAX_GPU_MODELS;
/// Longest model name: a label value's limit, which every labeller's product name obeys.
pub const MAX_MODEL_CHARS: usize = 63;

/// GPU instance slices per GPU on every MIG-capable part except the A30 (which has 4).
const MIG_COMPUTE_SLICES: i64 = 7;
const MIG_COMPUTE_SLICES_A30: i64 = 4;
/// Memory slices per GPU on every MIG-capable part.
const MIG_MEMORY_SLICES: i64 = 8;

/// Physical GPUs of one model on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGpus {
    pub vendor: &'static str,
    pub model: String,
    pub count: i64,
    /// The node's driver version for this vendor, if labelled and plain version text.
    pub driver: Option<String>,
}

/// GPUs, nodes and driver versions of one model.
#[derive(Debug, Clone, Default)]
struct ModelTally {
    gpus: i64,
    nodes: i32,
    drivers: BTreeSet<String>,
}

impl ModelTally {
    fn add(&mut self, gpus: i64, nodes: i32, drivers: impl IntoIterator<Item = String>) {
        self.gpus = self.gpus.saturating_add(gpus);
        self.nodes = self.nodes.saturating_add(nodes);
        for driver in drivers {
            if self.drivers.len() < MAX_DRIVER_VERSIONS || self.drivers.contains(&driver) {
                self.drivers.insert(driver);
            }
        }
    }
}

/// GPUs of a cluster: per model, on schedulable Ready nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuCount {
    /// One entry per (vendor, model), sorted by short name, then model.
    pub gpus: Vec<GpuInfo>,
    pub total_gpus: i64,
    /// Nodes whose GPUs were counted.
    pub gpu_nodes: i32,
    /// Nodes with GPUs left out because they are cordoned or not Ready.
    pub excluded_nodes: i32,
}

impl GpuCount {
    /// `8x NVIDIA-A100-SXM4-80GB, 2x NVIDIA-L40S`.
    pub fn summary(&self) -> String {
        gpu_summary(&self.gpus)
    }
}

/// Counts the GPUs of full `nodes` (tests, fuzzing; probes decode [`NodeView`]s).
pub fn count_gpus<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> GpuCount {
    let mut tally = GpuTally::default();
    for node in nodes {
        tally.add(&NodeView::from(node));
    }
    tally.finish()
}

/// A [`GpuCount`] built up page by page, so a large node list never has to be held in
/// memory at once.
#[derive(Debug, Clone, Default)]
pub struct GpuTally {
    /// Per `(vendor, model)`, at most [`MAX_GPU_MODELS`] entries.
    per_model: BTreeMap<(&'static str, String), ModelTally>,
    /// A model beyond [`MAX_GPU_MODELS`] was seen (and not kept).
    too_many_models: bool,
    gpu_nodes: i32,
    excluded_nodes: i32,
}

impl GpuTally {
    pub fn add(&mut self, node: &NodeView) {
        let gpus: Vec<NodeGpus> = view_gpus(node)
            .into_iter()
            .filter(|g| g.count > 0)
            .collect();
        if gpus.is_empty() {
            return;
        }
        if !counts_toward_quota(node) {
            self.excluded_nodes = self.excluded_nodes.saturating_add(1);
            return;
        }
        self.gpu_nodes = self.gpu_nodes.saturating_add(1);
        for g in gpus {
            let model = if is_product_name(&g.model) {
                g.model
            } else {
                g.vendor.to_owned()
            };
            let key = (g.vendor, model);
            if !self.per_model.contains_key(&key) && self.per_model.len() >= MAX_GPU_MODELS {
                self.too_many_models = true;
                continue;
            }
            self.per_model
                .entry(key)
                .or_default()
                .add(g.count, 1, g.driver);
        }
    }

    pub fn add_all<'a>(&mut self, nodes: impl IntoIterator<Item = &'a NodeView>) {
        for node in nodes {
            self.add(node);
        }
    }

    /// More than [`MAX_GPU_MODELS`] models were seen; the count holds only the first.
    pub fn too_many_models(&self) -> bool {
        self.too_many_models
    }

    pub fn finish(self) -> GpuCount {
        self.finish_refusing(|_| false)
    }

    /// [`finish`](Self::finish), with the GPUs of every model `refuse` rejects (a
    /// product label echoing a credential) counted as their vendor's unnamed GPUs, as
    /// if the label were absent.
    pub fn finish_refusing(self, refuse: impl Fn(&str) -> bool) -> GpuCount {
        let mut per_model: BTreeMap<(&'static str, String), ModelTally> = BTreeMap::new();
        for ((vendor, model), tally) in self.per_model {
            let model = if refuse(&model) {
                vendor.to_owned()
            } else {
                model
            };
            let drivers = tally.drivers.into_iter().filter(|d| !refuse(d));
            per_model
                .entry((vendor, model))
                .or_default()
                .add(tally.gpus, tally.nodes, drivers);
        }
        let mut gpus: Vec<GpuInfo> = per_model
            .into_iter()
            .map(|((vendor, model), tally)| GpuInfo {
                vendor: vendor.to_owned(),
                short_name: short_name(&model),
                model,
                count: tally.gpus,
                node_count: tally.nodes,
                driver_versions: tally.drivers.into_iter().collect(),
            })
            .collect();
        gpus.sort_by(|a, b| {
            (&a.short_name, &a.model, &a.vendor).cmp(&(&b.short_name, &b.model, &b.vendor))
        });
        let total_gpus = gpus.iter().fold(0i64, |sum, g| sum.saturating_add(g.count));
        GpuCount {
            gpus,
            total_gpus,
            gpu_nodes: self.gpu_nodes,
            excluded_nodes: self.excluded_nodes,
        }
    }
}

/// Whether a product label's model is a sane product name: what a label value may
/// hold (1–63 of `[A-Za-z0-9_.-]`, alphanumeric at both ends). Any other model (only a
/// target that is not a real apiserver can send one) is counted as its vendor's unnamed
/// GPU, as if the label were absent.
pub fn is_product_name(model: &str) -> bool {
    model.len() <= MAX_MODEL_CHARS && hearth_api::names::is_label_name(model)
}

/// `<count>x <model>` per model, ordered by model name; [`EMPTY_SUMMARY`] when empty.
pub fn gpu_summary(gpus: &[GpuInfo]) -> String {
    if gpus.is_empty() {
        return EMPTY_SUMMARY.to_owned();
    }
    let mut sorted: Vec<&GpuInfo> = gpus.iter().collect();
    sorted.sort_by(|a, b| (&a.model, &a.vendor).cmp(&(&b.model, &b.vendor)));
    sorted
        .iter()
        .map(|g| format!("{}x {}", g.count, g.model))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether a node's GPUs can be used: schedulable (not cordoned) and `Ready=True`. A
/// node without conditions has never reported and is not Ready.
pub fn counts_toward_quota(node: &NodeView) -> bool {
    !node.unschedulable && node.ready
}

/// The physical GPUs a full node holds (tests, fuzzing); see [`view_gpus`].
pub fn node_gpus(node: &Node) -> Vec<NodeGpus> {
    view_gpus(&NodeView::from(node))
}

/// The physical GPUs a node holds, per vendor and model, whether or not it counts.
pub fn view_gpus(node: &NodeView) -> Vec<NodeGpus> {
    let (labels, allocatable) = (&node.labels, &node.allocatable);
    let mut out: Vec<NodeGpus> = nvidia_gpus(labels, allocatable).into_iter().collect();
    out.extend(amd_gpus(labels, allocatable));
    out
}

fn nvidia_gpus(
    labels: &BTreeMap<String, String>,
    allocatable: &BTreeMap<String, String>,
) -> Option<NodeGpus> {
    let gpu = resource_count(allocatable, NVIDIA_GPU);
    let shared = resource_count(allocatable, NVIDIA_GPU_SHARED);
    let mig: Vec<(&str, i64)> = allocatable
        .iter()
        .filter_map(|(name, q)| Some((name.strip_prefix(NVIDIA_MIG_PREFIX)?, parse_quantity(q)?)))
        .filter(|(_, n)| *n > 0)
        .collect();
    if gpu == 0 && shared == 0 && mig.is_empty() {
        return None;
    }

    let product = Product::parse(labels.get(NVIDIA_PRODUCT).map(String::as_str));
    // 0 means "sharing disabled" (MIG-enabled GPUs), 1 means no time-slicing.
    let replicas = label_count(labels, NVIDIA_REPLICAS)
        .filter(|r| *r > 1)
        .unwrap_or(1);

    // Devices behind `nvidia.com/gpu`: with time-slicing not renamed, each one is
    // advertised `replicas` times. With a renamed resource the replicas are behind
    // `nvidia.com/gpu.shared` and `nvidia.com/gpu` (if any) is unshared.
    let gpu_devices = if product.shared || (replicas > 1 && shared == 0) {
        gpu / replicas
    } else {
        gpu
    };
    let shared_gpus = shared / replicas;

    let from_gpu_resource = match &product.mig_profile {
        Some(profile) => div_ceil(gpu_devices, mig_instances_per_gpu(profile, &product.model)),
        None => gpu_devices,
    };
    let mut count = from_gpu_resource.saturating_add(shared_gpus);

    if !mig.is_empty() {
        // Mixed strategy: `nvidia.com/gpu` is only the GPUs with MIG off.
        // `gpu.count` counts them all; without it, estimate from the slices in use.
        count = match label_count(labels, NVIDIA_COUNT) {
            Some(all) => all.max(count),
            None => count.saturating_add(mixed_mig_gpus(labels, &mig)),
        };
    }

    Some(NodeGpus {
        vendor: NVIDIA,
        model: product.model,
        count,
        driver: nvidia_driver(labels),
    })
}

/// GFD's driver version: the full one, else put together from its parts.
fn nvidia_driver(labels: &BTreeMap<String, String>) -> Option<String> {
    let version = labels.get(NVIDIA_DRIVER_FULL).cloned().or_else(|| {
        NVIDIA_DRIVER_PARTS.iter().find_map(|keys| {
            let parts: Vec<&str> = keys
                .iter()
                .map_while(|k| labels.get(*k).map(|v| v.trim()))
                .collect();
            // major.minor at least; GFD leaves the revision empty on some drivers.
            (parts.len() >= 2).then(|| {
                parts
                    .into_iter()
                    .filter(|p| !p.is_empty())
                    .collect::<Vec<_>>()
                    .join(".")
            })
        })
    })?;
    plain_version(&version)
}

fn amd_driver(labels: &BTreeMap<String, String>) -> Option<String> {
    AMD_DRIVER_KEYS
        .iter()
        .find_map(|k| labels.get(*k))
        .and_then(|v| plain_version(v))
}

/// `version`, trimmed, if it is plain version text; junk is dropped here, unseen.
fn plain_version(version: &str) -> Option<String> {
    let version = version.trim();
    is_version_text(version).then(|| version.to_owned())
}

/// `nvidia.com/gpu.product`, taken apart.
struct Product {
    /// The model without labeller additions; `NVIDIA` when unlabelled.
    model: String,
    /// `-SHARED` was appended (time-slicing, not renamed).
    shared: bool,
    /// MIG `single`: the profile after `-MIG-`.
    mig_profile: Option<String>,
}

impl Product {
    fn parse(label: Option<&str>) -> Self {
        // No label, or an empty one, leaves an empty model: `NVIDIA`.
        let label = label.map_or("", str::trim);
        let (rest, shared) = match label.strip_suffix(SHARED_SUFFIX) {
            Some(rest) => (rest, true),
            None => (label, false),
        };
        let (model, mig_profile) = match rest.split_once(MIG_INFIX) {
            Some((model, profile)) => (model, Some(profile.to_owned())),
            None => (rest, None),
        };
        let model = if model.is_empty() { NVIDIA } else { model };
        Self {
            model: model.to_owned(),
            shared,
            mig_profile,
        }
    }
}

/// How many MIG devices of `profile` (`1g.5gb`, `3g.40gb`, `1g.10gb+me`, …) fit on one
/// GPU of `model`: bounded by compute slices (7, or 4 on A30) and, when the model
/// name states its memory, by memory slices (8). Under MIG `single` GFD accepts only
/// one profile per node, and mig-parted's `all-<profile>` layouts fill each GPU, so
/// devices ÷ this is the physical count. If a GPU is only partly used, the result is
/// low, never high: quota never promises a GPU that is not there.
fn mig_instances_per_gpu(profile: &str, model: &str) -> i64 {
    // `+me` (media extensions) profiles exist once per GPU.
    if profile.contains("+me") {
        return 1;
    }
    let base = profile.split(['+', '-']).next().unwrap_or(profile);
    let memory_gb = number_before(base.split('.'), "gb");
    let Some(compute) = number_before(base.split('.'), "g") else {
        return 1;
    };
    let words: Vec<String> = model
        .split(|c: char| !c.is_ascii_alphanumeric())
        .map(str::to_ascii_uppercase)
        .collect();
    let compute_slices = if words.iter().any(|w| w == "A30") {
        MIG_COMPUTE_SLICES_A30
    } else {
        MIG_COMPUTE_SLICES
    };
    let mut per_gpu = compute_slices / compute;
    let total_gb = number_before(words.iter().map(String::as_str), "GB");
    if let (Some(total), Some(mem)) = (total_gb, memory_gb) {
        // Rounded: memory slices are total/8, and profile names round (H200's 1g.18gb
        // is one slice of 141/8 GB). In i128: both sizes come from labels and may be
        // anything up to i64::MAX, which would overflow in i64.
        let (mem, total) = (i128::from(mem), i128::from(total));
        let slices = ((mem * i128::from(MIG_MEMORY_SLICES) * 2 + total) / (2 * total)).max(1);
        let fit = i128::from(MIG_MEMORY_SLICES) / slices;
        per_gpu = per_gpu.min(i64::try_from(fit).unwrap_or(MIG_MEMORY_SLICES));
    }
    per_gpu.max(1)
}

/// The number before `suffix` in the first of `words` that is one, if positive
/// (`3` of `3g` in `3g.40gb` with `g`).
fn number_before<'a>(mut words: impl Iterator<Item = &'a str>, suffix: &str) -> Option<i64> {
    words
        .find_map(|w| w.strip_suffix(suffix)?.parse::<i64>().ok())
        .filter(|n| *n > 0)
}

/// MIG `mixed` without `nvidia.com/gpu.count`: the GPUs the MIG devices need at least,
/// from the compute slices they use (`3g.40gb` uses 3 of a GPU's 7).
fn mixed_mig_gpus(labels: &BTreeMap<String, String>, mig: &[(&str, i64)]) -> i64 {
    let slices: i64 = mig
        .iter()
        .map(|(profile, advertised)| {
            let replicas = label_count(labels, &format!("{NVIDIA_MIG_PREFIX}{profile}.replicas"))
                .filter(|r| *r > 1)
                .unwrap_or(1);
            let devices = advertised / replicas;
            // A MIG device never spans more than one GPU: a profile claiming more
            // compute slices than a GPU has (`999g.1gb`) is junk and counts as one GPU.
            let compute = number_before(profile.split('.'), "g")
                .unwrap_or(1)
                .min(MIG_COMPUTE_SLICES);
            devices.saturating_mul(compute)
        })
        .fold(0i64, i64::saturating_add);
    div_ceil(slices, MIG_COMPUTE_SLICES)
}

fn amd_gpus(
    labels: &BTreeMap<String, String>,
    allocatable: &BTreeMap<String, String>,
) -> Vec<NodeGpus> {
    let advertised = resource_count(allocatable, AMD_GPU);
    if advertised == 0 {
        return Vec::new();
    }
    let driver = amd_driver(labels);
    let gpus = |model: &str, count| NodeGpus {
        vendor: AMD,
        model: model.to_owned(),
        count,
        driver: driver.clone(),
    };
    for key in AMD_PRODUCT_KEYS {
        if let Some(model) = labels.get(key).map(|m| m.trim()).filter(|m| !m.is_empty()) {
            return vec![gpus(model, advertised)];
        }
        // Several models: the labeller's per-model counts are physical GPUs.
        let prefix = format!("{key}.");
        let per_model: Vec<NodeGpus> = labels
            .iter()
            .filter_map(|(k, v)| {
                let model = k.strip_prefix(&prefix)?;
                let count = v.trim().parse::<i64>().ok().filter(|n| *n > 0)?;
                (!model.is_empty()).then(|| gpus(model, count))
            })
            .collect();
        if !per_model.is_empty() {
            return per_model;
        }
    }
    vec![gpus(AMD, advertised)]
}

fn resource_count(resources: &BTreeMap<String, String>, name: &str) -> i64 {
    resources
        .get(name)
        .and_then(|q| parse_quantity(q))
        .unwrap_or(0)
}

fn label_count(labels: &BTreeMap<String, String>, key: &str) -> Option<i64> {
    labels
        .get(key)?
        .trim()
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
}

fn div_ceil(n: i64, d: i64) -> i64 {
    if d <= 0 {
        n
    } else {
        n / d + i64::from(n % d != 0)
    }
}

/// A Kubernetes quantity as a whole number, rounded down: `8`, `1k` (how the API
/// server writes 1000 replicas), `2Ki`, `1e3`. `None` for anything negative,
/// malformed or too large: such a node is not counted rather than over-counted.
pub fn parse_quantity(q: &str) -> Option<i64> {
    let s = q.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty()
        || fraction.contains('.')
        || whole.len() + fraction.len() > 30
    {
        return None;
    }
    let mantissa: i128 = format!("{whole}{fraction}").parse().ok()?;
    // value = mantissa × 10^(exp10 − len(fraction)) × 2^exp2
    let (exp10, exp2): (i32, u32) = match suffix {
        "" => (0, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        e if e.starts_with(['e', 'E']) => {
            (e[1..].parse::<i32>().ok().filter(|x| x.abs() <= 30)?, 0)
        }
        _ => return None,
    };
    let exp10 = exp10 - fraction.len() as i32;
    let mut value = mantissa.checked_mul(1i128.checked_shl(exp2)?)?;
    if exp10 >= 0 {
        value = value.checked_mul(10i128.checked_pow(exp10 as u32)?)?;
    } else {
        value /= 10i128.checked_pow(exp10.unsigned_abs())?;
    }
    i64::try_from(value).ok()
}

#[cfg(test)]
mod tests;
