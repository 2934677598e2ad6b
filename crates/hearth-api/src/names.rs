//! Names, labels and defaults from the compatibility contract. Existing users,
//! scripts and Fournos depend on every value here: change none of them.

/// API group of the FournosCluster CRD (and of Fournos's FournosJob).
pub const GROUP: &str = "fournos.dev";
/// API version of the FournosCluster CRD.
pub const VERSION: &str = "v1";
/// Full name of the FournosCluster CRD.
pub const CRD_NAME: &str = "fournosclusters.fournos.dev";

/// Label that marks a Secret as holding a target cluster's kubeconfig.
pub const KUBECONFIG_SECRET_LABEL: &str = "fournos.dev/cluster-kubeconfig";
/// Label selector matching kubeconfig Secrets (used by the Secret watch).
pub const KUBECONFIG_SECRET_SELECTOR: &str = "fournos.dev/cluster-kubeconfig=true";
/// Data key of the kubeconfig inside the Secret.
pub const KUBECONFIG_SECRET_KEY: &str = "kubeconfig";
/// Secret annotation whose value becomes the initial `spec.owner`.
pub const OWNER_ANNOTATION: &str = "fournos.dev/owner";
/// Secret annotation listing (comma-separated) the FournosClusters that may use the
/// Secret besides the one its name is for.
pub const ALLOWED_CLUSTERS_ANNOTATION: &str = "fournos.dev/allowed-clusters";

/// Label on FournosClusters created from a Secret.
pub const AUTO_DISCOVERED_LABEL: &str = "fournos.dev/auto-discovered";
/// `app.kubernetes.io/managed-by`, set to [`MANAGED_BY_VALUE`] on everything Hearth creates.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "hearth";

/// Label on every ResourceFlavor Hearth makes, naming the namespace of its FournosCluster
/// (`HEARTH_NAMESPACE`). ResourceFlavors are cluster-scoped: this tells the Hearth that owns
/// a flavor from another Hearth (another namespace) on the same management cluster, whose
/// flavors it must neither adopt nor sweep.
pub const CLUSTER_NAMESPACE_LABEL: &str = "fournos.dev/cluster-namespace";

/// Node label a cluster's ResourceFlavor selects (`fournos.dev/cluster: <cluster>`).
pub const CLUSTER_NODE_LABEL: &str = "fournos.dev/cluster";
/// Label on a lock sentinel naming the cluster it locks.
pub const CLUSTER_LOCK_LABEL: &str = "fournos.dev/cluster-lock";
/// Prefix of a lock sentinel's name: `cluster-lock-<cluster>`.
pub const LOCK_SENTINEL_PREFIX: &str = "cluster-lock-";

/// Quota resource every cluster has: an exclusive job requests all of it, a shared one 1.
pub const CLUSTER_SLOT_RESOURCE: &str = "fournos/cluster-slot";
/// Slots per cluster unless configured otherwise.
pub const DEFAULT_CLUSTER_SLOTS: i64 = 100;

/// Condition types, one set per controller.
pub mod condition_types {
    pub const KUBECONFIG_VALID: &str = "KubeconfigValid";
    pub const GPU_DISCOVERED: &str = "GPUDiscovered";
    pub const KUEUE_SYNCED: &str = "KueueSynced";
    pub const LOCKED: &str = "Locked";
}

/// Controller names: each is the field manager, the Event reporter and the Lease name.
pub mod controllers {
    pub const DISCOVERY: &str = "hearth-discovery";
    pub const KUEUE_SYNC: &str = "hearth-kueue-sync";
    pub const LOCK_MANAGER: &str = "hearth-lock-manager";
}

/// Defaults of the configuration table (DESIGN.md), shared by every binary.
pub mod defaults {
    pub const NAMESPACE: &str = "hearth";
    pub const SECRETS_NAMESPACE: &str = "psap-secrets";
    pub const EXECUTION_NAMESPACE: &str = "psap-automation";
    pub const KUBECONFIG_SECRET_PATTERN: &str = "kubeconfig-{cluster}";
    pub const CLUSTER_QUEUE_NAME: &str = "fournos-queue";
    pub const GPU_RESOURCE_PREFIX: &str = "fournos/gpu-";
    pub const RECONCILE_INTERVAL_SEC: u64 = 30;
    pub const GPU_DISCOVERY_INTERVAL_SEC: u64 = 300;
    pub const GPU_DISCOVERY_TIMEOUT_SEC: u64 = 10;
    pub const LOG_LEVEL: &str = "INFO";
}

/// Name of the lock sentinel for `cluster`.
pub fn lock_sentinel_name(cluster: &str) -> String {
    format!("{LOCK_SENTINEL_PREFIX}{cluster}")
}
