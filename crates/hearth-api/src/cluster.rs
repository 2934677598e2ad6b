//! The `FournosCluster` custom resource (`fournos.dev/v1`).
//!
//! Spec is what people want; status is what the controllers observed. Every
//! status field has exactly one writer (see the field docs), which applies it
//! with server-side apply under its own field manager.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The pattern of `ttl`: 1 to 99999 minutes, hours or days; no zero, no leading zero.
pub const TTL_PATTERN: &str = "^[1-9][0-9]{0,4}(m|h|d)$";
/// The pattern of `gpuDiscoveryInterval`: 1 to 9999 minutes, hours or days.
pub const INTERVAL_PATTERN: &str = "^[1-9][0-9]{0,3}(m|h|d)$";
/// Longest `spec.owner`: a person's or team's name or e-mail address, not a document.
pub const MAX_OWNER_CHARS: usize = 253;
/// `spec.owner` holds no control or format characters (newlines, NUL, bidirectional
/// overrides): it is shown in logs, Events and `kubectl get`, so it must not be able to
/// forge a line or reorder what is shown around it.
pub const OWNER_PATTERN: &str = r"^[^\p{Cc}\p{Cf}]*$";

/// Why `owner` cannot be a lock owner (what the CRD refuses, for objects stored before
/// it did), or `None`. Never quotes the owner.
pub fn owner_problem(owner: &str) -> Option<String> {
    let chars = owner.chars().count();
    if chars > MAX_OWNER_CHARS {
        return Some(format!(
            "spec.owner is {chars} characters long; at most {MAX_OWNER_CHARS} are accepted"
        ));
    }
    owner.chars().any(crate::text::is_hidden).then(|| {
        "spec.owner holds a control or format character (a newline, NUL or a bidirectional \
         override); write it as plain text"
            .to_owned()
    })
}

// The printer columns repeat `type_ = "string"`, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fournos.dev",
    version = "v1",
    kind = "FournosCluster",
    plural = "fournosclusters",
    singular = "fournoscluster",
    namespaced,
    status = "FournosClusterStatus",
    shortname = "fc",
    shortname = "fcluster",
    doc = "A GPU cluster that Fournos runs benchmark jobs on. Hearth validates its kubeconfig, discovers its GPUs, publishes its capacity as Kueue quota and locks it for an owner.",
    printcolumn(
        name = "Owner",
        type_ = "string",
        json_path = ".spec.owner",
        description = "Who holds or wants the lock"
    ),
    printcolumn(
        name = "GPUs",
        type_ = "string",
        json_path = ".status.gpuSummary",
        description = "Discovered GPUs per model"
    ),
    printcolumn(
        name = "Kubeconfig",
        type_ = "string",
        json_path = ".status.kubeconfigStatus",
        description = "Whether the cluster's kubeconfig works"
    ),
    printcolumn(
        name = "Locked",
        type_ = "boolean",
        json_path = ".status.locked",
        description = "True while the lock sentinel holds the cluster's quota"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Lock Job",
        type_ = "string",
        json_path = ".status.lockJobName",
        priority = 1,
        description = "Name of the lock sentinel"
    ),
    printcolumn(
        name = "TTL",
        type_ = "string",
        json_path = ".spec.ttl",
        priority = 1,
        description = "How long a lock lasts"
    ),
    printcolumn(
        name = "Lock Expires",
        type_ = "string",
        json_path = ".status.lockExpiresAt",
        priority = 1,
        description = "When the lock expires (UTC); a date column would print <invalid> for a future time"
    ),
    printcolumn(
        name = "Schedulable",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Schedulable")].reason"#,
        priority = 1,
        description = "Schedulable, or Cordoned (spec.cordon set; admitted jobs still run), Drained (cordoned and nothing admitted left: ready for maintenance) or CordonOverdue"
    ),
    printcolumn(
        name = "Pool",
        type_ = "string",
        json_path = r".metadata.labels.fournos\.dev/pool",
        priority = 1,
        description = "The fournos.dev/pool label, the default pool key (docs/fleet.md: Pools)"
    )
)]
/// What people want of the cluster: where its kubeconfig is, who locks it and for
/// how long, how often to probe it.
#[serde(rename_all = "camelCase")]
pub struct FournosClusterSpec {
    /// Name of the Secret (in Hearth's secrets namespace) whose `kubeconfig` key holds
    /// this cluster's kubeconfig. Only inline credentials are accepted: server, CA
    /// data, and a bearer token or client certificate and key data. A Secret's name: a
    /// DNS subdomain of at most 253 characters.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub kubeconfig_secret: String,

    /// Who has locked this cluster. Setting it takes an exclusive lock (no other
    /// Fournos job is admitted on the cluster once the lock is held); clearing it
    /// releases the lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), regex(pattern = r"^[^\p{Cc}\p{Cf}]*$"))]
    pub owner: Option<String>,

    /// How long a lock lasts after the owner was set, as a number followed by `m`
    /// (minutes), `h` (hours) or `d` (days), e.g. `30m`, `4h`, `2d`. When it runs
    /// out Hearth releases the lock and clears `owner`. Unset: the lock lasts until
    /// the owner is cleared. At least `1m`; at most five digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 6), regex(pattern = "^[1-9][0-9]{0,4}(m|h|d)$"))]
    pub ttl: Option<String>,

    /// How often Hearth probes the cluster and counts its GPUs, e.g. `5m`, `1h`
    /// (`m`, `h` or `d`). Defaults to the controller's setting (5m unless changed).
    /// At least `1m`; at most four digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 5), regex(pattern = "^[1-9][0-9]{0,3}(m|h|d)$"))]
    pub gpu_discovery_interval: Option<String>,

    /// Maintenance: while set, Kueue admits no new Workload on the cluster (its
    /// ResourceFlavor carries the taint `fournos.dev/cordoned`, effect NoSchedule) and
    /// Workloads already admitted keep running; quota is unchanged. Condition `Schedulable`
    /// says how many are left. Set and cleared by people (`kubectl fournos cordon`,
    /// `uncordon`); Hearth never lifts it, not even past `until`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cordon: Option<Cordon>,

    /// Deprecated: hardware as recorded in spec by the Python controller that Hearth
    /// replaces. Hearth never writes it; discovered hardware lives in
    /// `status.hardware`. Kept in the schema so migrating clusters lose nothing; read
    /// only while a takeover needs it. At most 8 GPU models, with short strings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "legacy_hardware_schema")]
    pub hardware: Option<Hardware>,
}

/// Longest `spec.kubeconfigSecret`: a Secret's name, a DNS subdomain.
pub const MAX_KUBECONFIG_SECRET_CHARS: usize = 253;

/// Longest `vendor`, `model` and `shortName` of a legacy `spec.hardware.gpus` entry: a
/// node label value, as the Python controller read them.
pub const MAX_LEGACY_GPU_TEXT: usize = 63;
/// Longest legacy `spec.hardware.lastError`.
pub const MAX_LEGACY_ERROR_CHARS: usize = 1024;

/// The schema of the legacy `spec.hardware`: [`Hardware`]'s, bounded. Anyone who may edit
/// a FournosCluster may write it, and every controller that caches the object decodes
/// it, so the apiserver refuses what no takeover needs: more than [`MAX_GPU_MODELS`]
/// models (what kueue-sync publishes at most), strings longer than a label value.
/// `status.hardware` keeps [`Hardware`]'s own schema: only discovery writes it.
fn legacy_hardware_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = <Hardware as JsonSchema>::json_schema(generator);
    let set = |schema: &mut schemars::Schema, pointer: &str, key: &str, max: usize| {
        let at = schema
            .pointer_mut(pointer)
            .and_then(|v| v.as_object_mut())
            .unwrap_or_else(|| panic!("Hardware's schema has {pointer}"));
        at.insert(key.to_owned(), max.into());
    };
    set(&mut schema, "/properties/gpus", "maxItems", MAX_GPU_MODELS);
    for field in ["vendor", "model", "shortName"] {
        let pointer = format!("/properties/gpus/items/properties/{field}");
        set(&mut schema, &pointer, "maxLength", MAX_LEGACY_GPU_TEXT);
    }
    let versions = "/properties/gpus/items/properties/driverVersions/items";
    set(&mut schema, versions, "maxLength", MAX_VERSION_CHARS);
    set(
        &mut schema,
        "/properties/lastError",
        "maxLength",
        MAX_LEGACY_ERROR_CHARS,
    );
    schema.insert("nullable".to_owned(), true.into());
    schema
}

/// Why a legacy `spec.hardware` is beyond what the CRD accepts (an object stored before
/// it said so), or `None`. The same bounds as [`legacy_hardware_schema`] for what the
/// plan reads of it: how many GPU models, and their strings.
pub fn legacy_hardware_problem(hardware: &Hardware) -> Option<String> {
    let models = hardware.gpus.len();
    if models > MAX_GPU_MODELS {
        return Some(format!(
            "spec.hardware.gpus lists {models} GPU models; at most {MAX_GPU_MODELS} are accepted"
        ));
    }
    let long = |s: &String| s.chars().count() > MAX_LEGACY_GPU_TEXT;
    hardware
        .gpus
        .iter()
        .any(|g| long(&g.vendor) || long(&g.model) || long(&g.short_name))
        .then(|| {
            format!(
                "a vendor, model or shortName in spec.hardware.gpus is longer than \
                 {MAX_LEGACY_GPU_TEXT} characters"
            )
        })
}

/// Longest `spec.cordon.reason`: a sentence or two, with a ticket link.
pub const MAX_CORDON_REASON_CHARS: usize = 1024;

/// A cordon: who took the cluster out of scheduling, why, since when and until when.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cordon {
    /// Why, for the people whose jobs now wait elsewhere, e.g. `driver upgrade to 550,
    /// OPS-1234`. Plain text: no control or format characters.
    #[schemars(length(min = 1, max = 1024), regex(pattern = r"^[^\p{Cc}\p{Cf}]*$"))]
    pub reason: String,
    /// Who cordoned it (`kubectl fournos cordon` writes the user the apiserver knows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), regex(pattern = r"^[^\p{Cc}\p{Cf}]*$"))]
    pub by: Option<String>,
    /// When it was cordoned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
    /// When the maintenance should be over. Past it the cordon is reported overdue
    /// (condition `Schedulable` reason `CordonOverdue`, an Event, a metric); it stays
    /// until someone lifts or extends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Time>,
}

/// Why `text` (a `spec.cordon` field of at most `max` characters) cannot be shown as it
/// is (what the CRD refuses, for objects stored before it did), or `None`.
pub fn cordon_text_problem(field: &str, text: &str, max: usize) -> Option<String> {
    let chars = text.chars().count();
    if chars > max {
        return Some(format!(
            "spec.cordon.{field} is {chars} characters long; at most {max} are accepted"
        ));
    }
    text.chars().any(crate::text::is_hidden).then(|| {
        format!("spec.cordon.{field} holds a control or format character; write it as plain text")
    })
}

/// Whether the cluster's kubeconfig works, as last observed by hearth-discovery.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum KubeconfigStatus {
    /// The target answered with these credentials.
    Valid,
    /// The Secret or its `kubeconfig` key does not exist.
    Missing,
    /// The kubeconfig cannot be parsed or uses a refused feature (exec or
    /// auth-provider plugins, file paths, proxies, insecure TLS, passwords).
    Invalid,
    /// The target rejected the credentials (HTTP 401).
    Unauthorized,
    /// The target could not be reached (network, TLS, timeout).
    Unreachable,
}

impl KubeconfigStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Valid => "Valid",
            Self::Missing => "Missing",
            Self::Invalid => "Invalid",
            Self::Unauthorized => "Unauthorized",
            Self::Unreachable => "Unreachable",
        }
    }
}

impl std::fmt::Display for KubeconfigStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Observed state of a FournosCluster. Each field has exactly one writer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FournosClusterStatus {
    /// Whether the kubeconfig works: Valid, Missing, Invalid, Unauthorized or
    /// Unreachable. Written by hearth-discovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_status: Option<KubeconfigStatus>,

    /// GPUs discovered on the cluster's schedulable, Ready nodes. Written by
    /// hearth-discovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<Hardware>,

    /// When the kubeconfig's client certificate or bearer token expires, if it
    /// says. Written by hearth-discovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_expire_at: Option<Time>,

    /// When hearth-discovery will next probe the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_probe_at: Option<Time>,

    /// GPUs per model, e.g. `8x NVIDIA-A100-SXM4-80GB, 2x NVIDIA-L40S`. Written by
    /// hearth-discovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_summary: Option<String>,

    /// When hearth-discovery first found the kubeconfig Secret gone, while it stays
    /// gone. A locked auto-discovered cluster is offboarded only once the grace period
    /// (`--offboard-locked-grace-sec`) has passed since then. Written by
    /// hearth-discovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_missing_since: Option<Time>,

    /// The kubeconfig Secret this cluster was created from, by hearth-discovery (or, for a
    /// cluster created before this field existed, the Secret discovery found it made from
    /// the first time it looked: the pattern's name for the cluster, named by
    /// `spec.kubeconfigSecret`, labeled). Offboarding follows this Secret alone: the cluster
    /// is deleted when no labeled Secret has this name (or the name no longer matches the
    /// pattern for the cluster), never because `spec.kubeconfigSecret` or a label was
    /// edited; those edits are reported on `KubeconfigValid`. A Secret deleted and created
    /// again under the same name is the same source, and `uid` follows it. Absent on a
    /// cluster made by hand. Written by hearth-discovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_secret: Option<SourceSecret>,

    /// What hearth-kueue-sync published for this cluster in Kueue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kueue: Option<KueueStatus>,

    /// True only while the lock sentinel is admitted and holds all of the
    /// cluster's slots. Written by hearth-lock-manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked: Option<bool>,

    /// Name of the lock sentinel. Written by hearth-lock-manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_job_name: Option<String>,

    /// UID of the lock sentinel hearth-lock-manager created (or adopted once from an
    /// older controller): the lock is held only by that very object, never by another
    /// one that took its name or labels. Written by hearth-lock-manager.
    #[serde(
        default,
        rename = "lockJobUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub lock_job_uid: Option<String>,

    /// UID of the Kueue Workload that holds the cluster's slots for the lock, once
    /// hearth-lock-manager has proven it (for a `workload` sentinel the sentinel itself,
    /// for a FournosJob sentinel the one Workload Fournos made for it); set only while
    /// the lock is held. hearth-kueue-sync leaves exactly this Workload out of
    /// `admittedWorkloads`. Written by hearth-lock-manager.
    #[serde(
        default,
        rename = "lockWorkloadUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub lock_workload_uid: Option<String>,

    /// When the current owner was first seen. Written by hearth-lock-manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_set_at: Option<Time>,

    /// The owner `ownerSetAt` refers to, so a change of owner starts a new lock
    /// (and a new TTL). Written by hearth-lock-manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_owner: Option<String>,

    /// `ownerSetAt + ttl`; the lock is released then. Written by hearth-lock-manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_expires_at: Option<Time>,

    /// While the cluster is cordoned: Workloads Kueue has admitted on its flavor that are
    /// still there (this Hearth's lock sentinels aside); zero means drained. Written by
    /// hearth-kueue-sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_workloads: Option<i64>,

    /// The lock that ran out, while the cluster says `Locked=False/Expired` (until
    /// someone locks it again): whose it was, when it expired and its ttl. The facts the
    /// `Expired` message is made of, kept typed so that no later plan reads them back
    /// from a message. Written by hearth-lock-manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired_lock: Option<ExpiredLock>,

    /// Workloads other than this Hearth's lock that Kueue has admitted on the cluster's
    /// flavor, largest first (at most five): who holds its slots, so that nobody is told
    /// the cluster is free while a Fournos lock or an exclusive job holds it. Written by
    /// hearth-lock-manager.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slot_holders: Vec<SlotHolder>,

    /// Conditions, one per type; each controller owns its own types:
    /// KubeconfigValid and GPUDiscovered (hearth-discovery), KueueSynced and Schedulable
    /// (hearth-kueue-sync), Locked (hearth-lock-manager).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// GPU models one cluster may publish. A real cluster has a handful; each model is a
/// quota resource in the shared ClusterQueue, whose resource groups cover at most 64, so
/// one cluster reporting dozens would take every other cluster's room. hearth-discovery
/// counts at most this many, and hearth-kueue-sync publishes at most this many whatever
/// `hardware` says (a legacy `spec.hardware` was written by people).
pub const MAX_GPU_MODELS: usize = 8;

/// Driver versions kept per GPU model: a cluster mid-upgrade has two, a few more mean a
/// messy fleet, and status is not the place for every one of them.
pub const MAX_DRIVER_VERSIONS: usize = 4;
/// Longest driver or Kubernetes version kept (`550.54.15`, `v1.31.4+rhcos.1`, …).
pub const MAX_VERSION_CHARS: usize = 64;

/// Whether `s`, read from a target (a node label, `GET /version`), may be shown as a
/// version: 1 to [`MAX_VERSION_CHARS`] ASCII letters, digits, `.`, `-`, `+`, `_`, starting
/// with a letter or digit. Anything else is dropped, never shown or logged.
pub fn is_version_text(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_VERSION_CHARS
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '_'))
}

/// GPUs found on a cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Hardware {
    /// One entry per GPU model, sorted by short name.
    #[serde(default)]
    pub gpus: Vec<GpuInfo>,
    /// Sum of `gpus[].count`.
    #[serde(default, rename = "totalGPUs")]
    pub total_gpus: i64,
    /// When the last successful discovery finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_discovery: Option<Time>,
    /// Probes that failed in a row since the last success.
    #[serde(default)]
    pub consecutive_failures: i32,
    /// Why the last probe failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// GPU nodes left out of the count because they are unschedulable (cordoned)
    /// or not Ready.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub excluded_nodes: i32,
    /// The target's Kubernetes version (`gitVersion` of `GET /version`), when it states
    /// one that looks like a version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub kubernetes_version: Option<String>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// GPUs of one model on a cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuInfo {
    /// `NVIDIA` or `AMD`.
    pub vendor: String,
    /// Model as the node labeller reports it, e.g. `NVIDIA-A100-SXM4-80GB`.
    pub model: String,
    /// Short name used in the quota resource `fournos/gpu-<shortName>`, e.g. `a100`.
    pub short_name: String,
    /// Physical GPUs of this model on schedulable, Ready nodes.
    pub count: i64,
    /// Nodes contributing to `count`.
    pub node_count: i32,
    /// Driver versions on those nodes, sorted, at most four (NVIDIA GPU Feature
    /// Discovery's `nvidia.com/cuda.driver-version.full` or its major/minor/revision
    /// labels; the AMD labeller's `amd.com/gpu.driver-version`). Empty when no node says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4))]
    pub driver_versions: Vec<String>,
}

/// The kubeconfig Secret a cluster was created from (see
/// `FournosClusterStatus::source_secret`), in the secrets namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub struct SourceSecret {
    /// The Secret's name.
    #[schemars(length(max = 253))]
    pub name: String,
    /// The Secret's UID as discovery last saw it.
    #[schemars(length(max = 128))]
    pub uid: String,
}

/// A lock that ran out (see `FournosClusterStatus::expired_lock`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExpiredLock {
    /// Its owner.
    pub owner: String,
    /// When it ran out (`ownerSetAt + ttl`).
    pub expired_at: Time,
    /// `spec.ttl` when it ran out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
}

/// A Workload admitted on a cluster's flavor (see `FournosClusterStatus::slot_holders`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SlotHolder {
    /// `namespace/name` of the Workload.
    pub workload: String,
    /// The FournosJob it was made for, if Fournos made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// Who it is for, when it says (a sentinel's `fournos.dev/owner` annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// `fournos/cluster-slot` it holds.
    pub slots: i64,
}

/// What hearth-kueue-sync published for a cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KueueStatus {
    /// The cluster's ResourceFlavor.
    pub flavor: String,
    /// The ClusterQueue holding the cluster's quota.
    pub cluster_queue: String,
    /// Quota published per resource (e.g. `fournos/cluster-slot: 100`,
    /// `fournos/gpu-a100: 8`); zero while the cluster is drained.
    #[serde(default)]
    pub quotas: BTreeMap<String, i64>,
    /// Slots of the cluster (`fournos/cluster-slot`); a lock requests all of them.
    pub cluster_slots: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_short_plain_text() {
        for ok in ["550.54.15", "v1.31.4+rhcos.1", "6.8.5-1", "1_2"] {
            assert!(is_version_text(ok), "{ok}");
        }
        for bad in [
            "",
            ".5",
            "550 54",
            "5\u{202e}5",
            "a\nb",
            "token=abc/def",
            &"9".repeat(65),
        ] {
            assert!(!is_version_text(bad), "{bad:?}");
        }
    }

    #[test]
    fn owners_are_plain_bounded_text() {
        for ok in [
            "alice",
            "Alice Smith <alice@example.com>",
            "équipe-ö",
            &"o".repeat(253),
        ] {
            assert_eq!(owner_problem(ok), None, "{ok:?}");
        }
        for bad in ["a\nb", "a\0", "a\u{202e}b", "\u{200b}", "tab\t"] {
            let problem = owner_problem(bad).expect(bad);
            assert!(problem.contains("control or format"), "{problem}");
        }
        let long = owner_problem(&"o".repeat(300 * 1024)).unwrap();
        assert!(
            long.contains("at most 253") && !long.contains("ooo"),
            "{long}"
        );
    }
}
