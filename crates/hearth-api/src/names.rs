//! Names, labels and defaults from the compatibility contract. Existing users,
//! scripts and Fournos depend on every value here: change none of them.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

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

/// Annotation hearth-kueue-sync puts on a legacy ResourceFlavor (the Python Hearth's) when
/// it adopts it, valued [`ADOPTED_FROM_PYTHON`]; with [`ADOPTED_CLUSTER_UID_ANNOTATION`] it
/// marks the FournosCluster as *under takeover*. ResourceFlavors are cluster-scoped, so
/// whoever may edit a FournosCluster cannot write them: the mark cannot be forged from a
/// FournosCluster.
pub const ADOPTED_FROM_ANNOTATION: &str = "fournos.dev/adopted-from";
/// Value of [`ADOPTED_FROM_ANNOTATION`]: the Python (kopf) Hearth.
pub const ADOPTED_FROM_PYTHON: &str = "hearth-py";
/// Annotation beside [`ADOPTED_FROM_ANNOTATION`]: the `metadata.uid` of the FournosCluster
/// the flavor was adopted for, so a FournosCluster deleted and created again under the same
/// name is not under takeover.
pub const ADOPTED_CLUSTER_UID_ANNOTATION: &str = "fournos.dev/adopted-cluster-uid";

/// Node label a cluster's ResourceFlavor selects (`fournos.dev/cluster: <cluster>`).
pub const CLUSTER_NODE_LABEL: &str = "fournos.dev/cluster";
/// Label on a lock sentinel naming the cluster it locks.
pub const CLUSTER_LOCK_LABEL: &str = "fournos.dev/cluster-lock";
/// Prefix of a lock sentinel's name: `cluster-lock-<cluster>`.
pub const LOCK_SENTINEL_PREFIX: &str = "cluster-lock-";

/// The pool label: the default of the FournosCluster label keys kueue-sync copies into each
/// ResourceFlavor's `spec.nodeLabels` (`HEARTH_POOL_LABEL_KEYS`), so that a Workload's node
/// selector can ask for "any cluster in pool X".
pub const POOL_LABEL: &str = "fournos.dev/pool";
/// The value a flavor carries for a pool label key its cluster lacks (or carries with a
/// value that cannot be a label value). Kueue ignores a selector key that a flavor does not
/// carry, so without it an unlabelled cluster would match every pool.
pub const POOL_LABEL_ABSENT: &str = "none";
/// Kueue allows 8 `nodeLabels` per ResourceFlavor and Hearth uses one
/// ([`CLUSTER_NODE_LABEL`]): at most this many pool label keys.
pub const MAX_POOL_LABEL_KEYS: usize = 7;
/// Annotation on a Hearth flavor: the pool label keys (comma-separated) kueue-sync applied,
/// so that a key taken off the setting is taken off the flavor too.
pub const POOL_LABEL_KEYS_ANNOTATION: &str = "fournos.dev/pool-label-keys";
/// The taint kueue-sync puts on a cordoned cluster's ResourceFlavor (`spec.nodeTaints`,
/// effect `NoSchedule`): Kueue admits no new Workload there that does not tolerate it.
pub const CORDON_TAINT_KEY: &str = "fournos.dev/cordoned";

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
    pub const SCHEDULABLE: &str = "Schedulable";
    /// A Reservation's: whether it holds its window.
    pub const ACCEPTED: &str = "Accepted";
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

/// Whether `s` is a DNS-1123 label: 1–63 lower-case letters, digits and `-`, starting
/// and ending with a letter or digit. What a namespaced object's name, a ResourceFlavor's
/// name and one part of a DNS subdomain must be.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && edge(b[0])
        && edge(b[b.len() - 1])
        && b.iter().all(|c| edge(*c) || *c == b'-')
}

/// Whether `s` is a non-empty label value, which is also what the name part of a
/// qualified name (label key, resource name) must be: 1–63 characters, alphanumeric at
/// both ends, `-`, `_`, `.` inside.
pub fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Whether `s` is a label key (a qualified name): an optional DNS-subdomain prefix of at
/// most 253 characters and `/`, then a [label name](is_label_name).
pub fn is_label_key(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, s),
    };
    prefix.is_none_or(|p| !p.is_empty() && p.len() <= 253 && p.split('.').all(is_dns_label))
        && is_label_name(name)
}

/// Longest name a lock sentinel may have: Fournos copies a FournosJob's name into the
/// `fournos.dev/job-name` label of the Workload it makes, and a label value is at most
/// 63 characters (a longer name makes Kueue refuse the Workload).
pub const MAX_SENTINEL_NAME: usize = 63;

/// Longest cluster name whose sentinel is `cluster-lock-<cluster>` as the contract says:
/// one character short of [`MAX_SENTINEL_NAME`], so that a plain name is never as long
/// as a shortened one (always exactly [`MAX_SENTINEL_NAME`]) and the two can never be
/// equal, whatever the cluster is called.
pub const MAX_PLAIN_SENTINEL_CLUSTER: usize = MAX_SENTINEL_NAME - LOCK_SENTINEL_PREFIX.len() - 1;

/// Bytes of the SHA-256 a shortened sentinel name keeps: 128 bits, so finding two cluster
/// names with one sentinel name costs about 2^64 hashes.
const SENTINEL_HASH_BYTES: usize = 16;

/// Name of the lock sentinel for `cluster`: `cluster-lock-<cluster>`, or, for a name
/// longer than [`MAX_PLAIN_SENTINEL_CLUSTER`], the cluster name cut short plus 128 bits of
/// the SHA-256 of the whole name, exactly [`MAX_SENTINEL_NAME`] characters. Distinct
/// clusters get distinct names: two plain names differ in their cluster part, a plain and
/// a shortened one differ in length, and two shortened ones differ in their hash. The hash
/// is a cryptographic one because whoever may create FournosClusters chooses the names:
/// with a 64-bit non-cryptographic hash (FNV-1a, before) two names that share a sentinel
/// could be searched for, and one cluster's lock would then stand in another's way.
///
/// Changing the hash renames no live sentinel: a held lock keeps the sentinel it has,
/// proven by the UID in status, whatever its name; only the next lock uses the new name.
/// The `fournos.dev/cluster-lock` label and the recorded UID, not the name, link a
/// sentinel to its cluster.
pub fn lock_sentinel_name(cluster: &str) -> String {
    if cluster.len() <= MAX_PLAIN_SENTINEL_CLUSTER {
        return format!("{LOCK_SENTINEL_PREFIX}{cluster}");
    }
    let digest = Sha256::digest(cluster.as_bytes());
    let hash: String = digest[..SENTINEL_HASH_BYTES]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let room = MAX_SENTINEL_NAME - LOCK_SENTINEL_PREFIX.len() - 1 - hash.len();
    // A cluster name may be a DNS subdomain: its dots become dashes so that the kept part
    // never ends a DNS label on a separator next to the hash's dash. Padding with `x`
    // keeps the length exact when the name was cut on a multi-byte character.
    let mut kept: String = cluster
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(room)
        .collect();
    while kept.len() < room {
        kept.push('x');
    }
    format!("{LOCK_SENTINEL_PREFIX}{kept}-{hash}")
}

/// The labels every lock sentinel of the Hearth whose FournosClusters live in
/// `cluster_namespace` carries. lock-manager watches, counts and deletes only objects
/// with all three, so two Hearths sharing an execution namespace never touch each
/// other's sentinels.
pub fn sentinel_labels(cluster: &str, cluster_namespace: &str) -> BTreeMap<String, String> {
    [
        (CLUSTER_LOCK_LABEL.to_owned(), cluster.to_owned()),
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (
            CLUSTER_NAMESPACE_LABEL.to_owned(),
            cluster_namespace.to_owned(),
        ),
    ]
    .into()
}

/// The label selector of [`sentinel_labels`], for any cluster.
pub fn sentinel_selector(cluster_namespace: &str) -> String {
    format!(
        "{CLUSTER_LOCK_LABEL},{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{CLUSTER_NAMESPACE_LABEL}={cluster_namespace}"
    )
}

/// Whether `labels` are those of a sentinel of this Hearth ([`sentinel_labels`]).
pub fn has_sentinel_labels(
    labels: Option<&BTreeMap<String, String>>,
    cluster_namespace: &str,
) -> bool {
    let get = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    get(CLUSTER_LOCK_LABEL).is_some_and(|c| !c.is_empty())
        && get(MANAGED_BY_LABEL) == Some(MANAGED_BY_VALUE)
        && get(CLUSTER_NAMESPACE_LABEL) == Some(cluster_namespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_name_checks() {
        for ok in ["a", "a-1", "0", &"a".repeat(63)] {
            assert!(is_dns_label(ok) && is_label_name(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
        for ok in ["A.b-C_d", "NVIDIA-A100-SXM4-80GB"] {
            assert!(is_label_name(ok), "{ok}");
        }
        for bad in ["", "-a", "a.", "a/b", "a b", &"a".repeat(64)] {
            assert!(!is_label_name(bad), "{bad}");
        }
    }

    #[test]
    fn short_cluster_names_keep_the_contract_name() {
        assert_eq!(lock_sentinel_name("a"), "cluster-lock-a");
        let fits = "c".repeat(MAX_PLAIN_SENTINEL_CLUSTER);
        assert_eq!(lock_sentinel_name(&fits), format!("cluster-lock-{fits}"));
        assert_eq!(lock_sentinel_name(&fits).len(), MAX_SENTINEL_NAME - 1);
    }

    #[test]
    fn long_cluster_names_are_cut_and_hashed_to_fit_a_label() {
        let a = format!("{}-one", "x".repeat(60));
        let b = format!("{}-two", "x".repeat(60));
        let (na, nb) = (lock_sentinel_name(&a), lock_sentinel_name(&b));
        assert_eq!(na.len(), MAX_SENTINEL_NAME, "{na}");
        assert!(na.starts_with("cluster-lock-xxx"), "{na}");
        assert_ne!(na, nb, "a shared prefix still gives distinct names");
        assert_eq!(na, lock_sentinel_name(&a), "stable");
        // The hash is the first 128 bits of SHA-256 of the whole name, fixed by its
        // definition, so a sentinel's name never changes with a Rust or crate upgrade.
        assert_eq!(
            lock_sentinel_name(&"a".repeat(60)),
            "cluster-lock-aaaaaaaaaaaaaaaaa-11ee391211c6256460b6ed375957fadd"
        );
        for cluster in [
            format!("{}.{}", "y".repeat(32), "z".repeat(30)),
            format!("{}-{}", "y".repeat(40), "z".repeat(30)),
            "a".repeat(MAX_PLAIN_SENTINEL_CLUSTER + 1),
            "a".repeat(253),
        ] {
            let n = lock_sentinel_name(&cluster);
            assert_eq!(n.len(), MAX_SENTINEL_NAME, "{n}");
            assert!(is_dns_label(&n), "{n} is a valid name and label value");
        }
    }

    /// The collision of issue 24: a cluster named exactly like another's shortened
    /// sentinel name (minus the prefix) got the same sentinel. Plain names are now one
    /// character shorter than any shortened name.
    #[test]
    fn no_cluster_name_gets_another_clusters_sentinel_name() {
        let long = format!("{}-tail", "p".repeat(60));
        let shortened = lock_sentinel_name(&long);
        let impostor = shortened.trim_start_matches(LOCK_SENTINEL_PREFIX);
        assert_ne!(lock_sentinel_name(impostor), shortened);
        for len in 1..=80 {
            let plain = lock_sentinel_name(&"q".repeat(len));
            assert_eq!(
                plain.len() == MAX_SENTINEL_NAME,
                len > MAX_PLAIN_SENTINEL_CLUSTER,
                "only shortened names have the full length ({len})"
            );
        }
    }

    #[test]
    fn sentinel_labels_match_their_selector() {
        let labels = sentinel_labels("a", "hearth");
        assert!(has_sentinel_labels(Some(&labels), "hearth"));
        assert!(!has_sentinel_labels(Some(&labels), "hearth2"));
        let mut legacy = labels.clone();
        legacy.remove(MANAGED_BY_LABEL);
        assert!(!has_sentinel_labels(Some(&legacy), "hearth"));
        assert!(!has_sentinel_labels(None, "hearth"));
        assert_eq!(
            sentinel_selector("hearth"),
            "fournos.dev/cluster-lock,app.kubernetes.io/managed-by=hearth,fournos.dev/cluster-namespace=hearth"
        );
    }
}
