//! The emulated GPU fleet: what Node objects each target apiserver carries. This table is
//! the single source of truth: the supervisor creates nodes from it and tests assert
//! expected GPU counts from it.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{Context, Result};

/// Node label with the NVIDIA product name (GPU Feature Discovery).
pub const NVIDIA_PRODUCT_LABEL: &str = "nvidia.com/gpu.product";
/// Extended resource of NVIDIA GPUs (device plugin).
pub const NVIDIA_GPU_RESOURCE: &str = "nvidia.com/gpu";
/// Node label with the AMD product name (ROCm node labeller).
pub const AMD_PRODUCT_LABEL: &str = "amd.com/gpu.product-name";
/// Extended resource of AMD GPUs (device plugin).
pub const AMD_GPU_RESOURCE: &str = "amd.com/gpu";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuVendor {
    Nvidia,
    Amd,
}

impl GpuVendor {
    pub fn resource(self) -> &'static str {
        match self {
            GpuVendor::Nvidia => NVIDIA_GPU_RESOURCE,
            GpuVendor::Amd => AMD_GPU_RESOURCE,
        }
    }

    pub fn product_label(self) -> &'static str {
        match self {
            GpuVendor::Nvidia => NVIDIA_PRODUCT_LABEL,
            GpuVendor::Amd => AMD_PRODUCT_LABEL,
        }
    }
}

/// The GPUs of one node, all of one model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpus {
    pub vendor: GpuVendor,
    pub model: Cow<'static, str>,
    pub count: u32,
}

impl Gpus {
    /// The driver version the node's labeller reports: NVIDIA's GFD as one label on most
    /// models and as major/minor/revision labels on the H200 nodes (both forms Hearth
    /// reads), AMD's labeller its own label.
    pub fn driver_version(&self) -> &'static str {
        match (self.vendor, self.model.contains("H200")) {
            (GpuVendor::Nvidia, true) => "535.104.05",
            (GpuVendor::Nvidia, false) => "550.54.15",
            (GpuVendor::Amd, _) => "6.8.5",
        }
    }

    /// The driver labels of [`Self::driver_version`].
    fn driver_labels(&self) -> Vec<(String, String)> {
        let version = self.driver_version();
        match (self.vendor, self.model.contains("H200")) {
            (GpuVendor::Nvidia, true) => ["major", "minor", "revision"]
                .iter()
                .zip(version.split('.'))
                .map(|(part, v)| (format!("nvidia.com/cuda.driver-version.{part}"), v.into()))
                .collect(),
            (GpuVendor::Nvidia, false) => {
                vec![("nvidia.com/cuda.driver-version.full".into(), version.into())]
            }
            (GpuVendor::Amd, _) => vec![("amd.com/gpu.driver-version".into(), version.into())],
        }
    }
}

/// One emulated Node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpec {
    pub name: Cow<'static, str>,
    pub gpus: Option<Gpus>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// The `Ready` condition's status.
    pub ready: bool,
}

impl NodeSpec {
    pub const fn nvidia(name: &'static str, model: &'static str, count: u32) -> NodeSpec {
        NodeSpec::gpu(name, GpuVendor::Nvidia, model, count)
    }

    pub const fn amd(name: &'static str, model: &'static str, count: u32) -> NodeSpec {
        NodeSpec::gpu(name, GpuVendor::Amd, model, count)
    }

    const fn gpu(
        name: &'static str,
        vendor: GpuVendor,
        model: &'static str,
        count: u32,
    ) -> NodeSpec {
        NodeSpec {
            name: Cow::Borrowed(name),
            gpus: Some(Gpus {
                vendor,
                model: Cow::Borrowed(model),
                count,
            }),
            unschedulable: false,
            ready: true,
        }
    }

    pub const fn cpu_only(name: &'static str) -> NodeSpec {
        NodeSpec {
            name: Cow::Borrowed(name),
            gpus: None,
            unschedulable: false,
            ready: true,
        }
    }

    pub const fn cordoned(mut self) -> NodeSpec {
        self.unschedulable = true;
        self
    }

    pub const fn not_ready(mut self) -> NodeSpec {
        self.ready = false;
        self
    }

    /// Whether Hearth should count this node toward quota (schedulable and Ready).
    pub fn counts_toward_quota(&self) -> bool {
        self.ready && !self.unschedulable
    }

    /// The Node object (without status).
    pub fn to_node(&self) -> Node {
        let mut labels = BTreeMap::from([
            ("kubernetes.io/hostname".to_string(), self.name.to_string()),
            ("kubernetes.io/os".to_string(), "linux".to_string()),
            ("kubernetes.io/arch".to_string(), "amd64".to_string()),
            ("node-role.kubernetes.io/worker".to_string(), String::new()),
        ]);
        if let Some(gpus) = &self.gpus {
            labels.insert(
                gpus.vendor.product_label().to_string(),
                gpus.model.to_string(),
            );
            labels.extend(gpus.driver_labels());
            match gpus.vendor {
                GpuVendor::Nvidia => {
                    labels.insert("nvidia.com/gpu.present".into(), "true".into());
                    labels.insert("nvidia.com/gpu.count".into(), gpus.count.to_string());
                }
                GpuVendor::Amd => {
                    labels.insert("amd.com/gpu.count".into(), gpus.count.to_string());
                }
            }
        }
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": { "name": self.name, "labels": labels },
            "spec": { "unschedulable": self.unschedulable },
        }))
        .expect("a valid Node")
    }

    /// The status a kubelet and device plugin would report.
    pub fn status_patch(&self) -> serde_json::Value {
        let mut resources = json!({
            "cpu": "64",
            "memory": "512Gi",
            "pods": "110",
            "ephemeral-storage": "1Ti",
        });
        if let Some(gpus) = &self.gpus {
            resources[gpus.vendor.resource()] = json!(gpus.count.to_string());
        }
        let ready = if self.ready { "True" } else { "False" };
        json!({
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{
                    "type": "Ready",
                    "status": ready,
                    "reason": if self.ready { "KubeletReady" } else { "KubeletNotReady" },
                    "message": "emulated by hearth-e2e",
                    "lastHeartbeatTime": now_rfc3339(),
                    "lastTransitionTime": now_rfc3339(),
                }],
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "osImage": "hearth-e2e emulated node",
                    "kernelVersion": "", "kubeletVersion": "v1.36.3-emulated", "kubeProxyVersion": "",
                    "containerRuntimeVersion": "", "machineID": "", "systemUUID": "", "bootID": "",
                },
            }
        })
    }
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// One target cluster's nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetFleet {
    pub name: Cow<'static, str>,
    pub nodes: Cow<'static, [NodeSpec]>,
}

impl TargetFleet {
    /// A fleet for a target of a test's own ([`crate::ControlPlane::add_target`]).
    pub fn new(name: impl Into<String>, nodes: Vec<NodeSpec>) -> TargetFleet {
        TargetFleet {
            name: Cow::Owned(name.into()),
            nodes: Cow::Owned(nodes),
        }
    }

    /// GPUs per `(vendor, model)` on nodes that count toward quota.
    pub fn schedulable_gpus(&self) -> BTreeMap<(GpuVendor, String), u32> {
        self.gpus(|n| n.counts_toward_quota())
    }

    /// GPUs per `(vendor, model)` on every node, cordoned or not.
    pub fn all_gpus(&self) -> BTreeMap<(GpuVendor, String), u32> {
        self.gpus(|_| true)
    }

    fn gpus(&self, keep: impl Fn(&NodeSpec) -> bool) -> BTreeMap<(GpuVendor, String), u32> {
        let mut out = BTreeMap::new();
        for node in self.nodes.iter().filter(|n| keep(n)) {
            if let Some(g) = &node.gpus {
                *out.entry((g.vendor, g.model.to_string())).or_default() += g.count;
            }
        }
        out
    }

    pub fn total_schedulable_gpus(&self) -> u32 {
        self.schedulable_gpus().values().sum()
    }
}

/// The default fleet: the first two targets every plane has.
pub const FLEET: &[TargetFleet] = &[
    TargetFleet {
        name: Cow::Borrowed("target-a"),
        nodes: Cow::Borrowed(&[
            NodeSpec::nvidia("a-a100-0", "NVIDIA-A100-SXM4-80GB", 4),
            NodeSpec::nvidia("a-a100-1", "NVIDIA-A100-SXM4-80GB", 4),
        ]),
    },
    TargetFleet {
        name: Cow::Borrowed("target-b"),
        nodes: Cow::Borrowed(&[
            NodeSpec::nvidia("b-h200-0", "NVIDIA-H200-SXM-141GB", 8),
            NodeSpec::nvidia("b-l40s-0", "NVIDIA-L40S", 2),
            NodeSpec::nvidia("b-h100-cordoned", "NVIDIA-H100-80GB-HBM3", 8).cordoned(),
            NodeSpec::amd("b-mi300x-0", "AMD_Instinct_MI300X", 8),
            NodeSpec::cpu_only("b-cpu-0"),
        ]),
    },
];

/// The fleet of the `index`-th target: the table above, then small generated targets
/// (`target-c`, `target-d`, …, one node with one `NVIDIA-L4`) for planes with more targets.
pub fn fleet_for(index: usize) -> TargetFleet {
    if let Some(fleet) = FLEET.get(index) {
        return fleet.clone();
    }
    let suffix = target_suffix(index);
    TargetFleet {
        name: Cow::Owned(format!("target-{suffix}")),
        nodes: Cow::Owned(vec![NodeSpec {
            name: Cow::Owned(format!("{suffix}-l4-0")),
            gpus: Some(Gpus {
                vendor: GpuVendor::Nvidia,
                model: Cow::Borrowed("NVIDIA-L4"),
                count: 1,
            }),
            unschedulable: false,
            ready: true,
        }]),
    }
}

/// `a`, `b`, …, `z`, `aa`, `ab`, …
fn target_suffix(index: usize) -> String {
    let mut n = index;
    let mut s = Vec::new();
    loop {
        s.push(b'a' + (n % 26) as u8);
        if n < 26 {
            break;
        }
        n = n / 26 - 1;
    }
    s.reverse();
    String::from_utf8(s).expect("ascii")
}

/// Creates (or updates) `node` on a target and writes its status.
pub async fn apply_node(client: &kube::Client, node: &NodeSpec) -> Result<Node> {
    let api: Api<Node> = Api::all(client.clone());
    let name = node.name.to_string();
    match api.create(&PostParams::default(), &node.to_node()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let pp = PatchParams::apply("hearth-e2e").force();
            api.patch(&name, &pp, &Patch::Apply(node.to_node()))
                .await
                .context(|| format!("updating node {name}"))?;
        }
        Err(e) => return Err(e).context(|| format!("creating node {name}")),
    }
    // Status is a subresource: a create ignores it, so it is written separately, as a
    // kubelet would.
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(node.status_patch()),
    )
    .await
    .context(|| format!("writing the status of node {name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_fleet_counts() {
        let a = fleet_for(0);
        assert_eq!(a.total_schedulable_gpus(), 8);
        let b = fleet_for(1);
        let gpus = b.schedulable_gpus();
        assert_eq!(
            gpus[&(GpuVendor::Nvidia, "NVIDIA-H200-SXM-141GB".into())],
            8
        );
        assert_eq!(gpus[&(GpuVendor::Amd, "AMD_Instinct_MI300X".into())], 8);
        assert!(!gpus.contains_key(&(GpuVendor::Nvidia, "NVIDIA-H100-80GB-HBM3".into())));
        assert_eq!(b.all_gpus().values().sum::<u32>(), 26);
    }

    #[test]
    fn generated_targets() {
        assert_eq!(fleet_for(2).name, "target-c");
        assert_eq!(target_suffix(25), "z");
        assert_eq!(target_suffix(26), "aa");
        assert_eq!(fleet_for(2).total_schedulable_gpus(), 1);
    }
}
