//! hearth-kueue-sync's command line: the common runtime options plus its own.

use clap::Parser;
use hearth_api::names::{
    CLUSTER_NODE_LABEL, DEFAULT_CLUSTER_SLOTS, MAX_POOL_LABEL_KEYS, POOL_LABEL, defaults,
    is_label_key,
};
use hearth_runtime::CommonArgs;

use crate::plan::PlanSettings;

#[derive(Parser, Debug)]
#[command(
    name = "hearth-kueue-sync",
    version,
    about = "Publishes every FournosCluster's capacity as a Kueue ResourceFlavor and \
             ClusterQueue quota."
)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub config: KueueSyncConfig,
}

/// Settings of the kueue-sync controller.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
#[command(next_help_heading = "Kueue sync options")]
pub struct KueueSyncConfig {
    /// The shared ClusterQueue that gets one flavor entry per cluster. Hearth never
    /// creates it: it belongs to the platform.
    #[arg(long, env = "HEARTH_KUEUE_CLUSTER_QUEUE_NAME", default_value = defaults::CLUSTER_QUEUE_NAME)]
    pub cluster_queue_name: String,

    /// Prefix of the per-model GPU quota resources: `<prefix><short name>`, e.g.
    /// fournos/gpu-a100.
    #[arg(
        long,
        env = "HEARTH_GPU_RESOURCE_PREFIX",
        default_value = defaults::GPU_RESOURCE_PREFIX,
        value_parser = parse_resource_prefix,
    )]
    pub gpu_resource_prefix: String,

    /// Quota of fournos/cluster-slot per cluster: an exclusive job requests all of it,
    /// a shared one 1.
    #[arg(
        long,
        env = "HEARTH_CLUSTER_SLOTS",
        default_value_t = DEFAULT_CLUSTER_SLOTS,
        value_parser = clap::value_parser!(i64).range(1..),
    )]
    pub cluster_slots: i64,

    /// FournosCluster label keys copied into every cluster's ResourceFlavor
    /// (`spec.nodeLabels`), comma-separated, so a Workload's node selector can ask for a
    /// pool: the cluster's value, or `none` where it lacks the label. At most 7 keys
    /// (Kueue allows 8 node labels per flavor and Hearth uses fournos.dev/cluster); empty:
    /// no pools.
    #[arg(
        long,
        env = "HEARTH_POOL_LABEL_KEYS",
        default_value = POOL_LABEL,
        value_parser = parse_pool_label_keys,
    )]
    pub pool_label_keys: PoolLabelKeys,

    /// Namespace whose Workloads a cordoned cluster counts down to drained
    /// (`status.admittedWorkloads`): where Fournos submits its jobs and lock-manager
    /// creates its sentinels. Workloads of other namespaces are not watched: anyone who
    /// may create one could make kueue-sync hold it.
    #[arg(long, env = "HEARTH_EXECUTION_NAMESPACE", default_value = defaults::EXECUTION_NAMESPACE)]
    pub execution_namespace: String,
}

/// The pool label keys: distinct label keys, at most [`MAX_POOL_LABEL_KEYS`], not
/// [`CLUSTER_NODE_LABEL`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolLabelKeys(pub Vec<String>);

fn parse_pool_label_keys(list: &str) -> Result<PoolLabelKeys, String> {
    let mut keys: Vec<String> = Vec::new();
    for key in list.split(',').map(str::trim).filter(|k| !k.is_empty()) {
        if !is_label_key(key) {
            return Err(format!(
                "{} is not a label key (an optional DNS prefix and '/', then at most 63 \
                 letters, digits, '-', '_', '.')",
                hearth_api::text::bounded(key, 80)
            ));
        }
        if key == CLUSTER_NODE_LABEL {
            return Err(format!(
                "{CLUSTER_NODE_LABEL} is Hearth's own node label and cannot be a pool label"
            ));
        }
        if keys.iter().any(|k| k == key) {
            return Err(format!("{key} is listed twice"));
        }
        keys.push(key.to_owned());
    }
    if keys.len() > MAX_POOL_LABEL_KEYS {
        return Err(format!(
            "{} keys; at most {MAX_POOL_LABEL_KEYS} (Kueue allows 8 node labels per \
             ResourceFlavor and Hearth uses {CLUSTER_NODE_LABEL})",
            keys.len()
        ));
    }
    Ok(PoolLabelKeys(keys))
}

impl KueueSyncConfig {
    /// What the plan needs of the configuration; `namespace` is where the FournosClusters
    /// live (`HEARTH_NAMESPACE`).
    pub fn plan_settings(&self, namespace: &str) -> PlanSettings {
        PlanSettings {
            namespace: namespace.to_owned(),
            cluster_queue: self.cluster_queue_name.clone(),
            gpu_resource_prefix: self.gpu_resource_prefix.clone(),
            cluster_slots: self.cluster_slots,
            pool_label_keys: self.pool_label_keys.0.clone(),
        }
    }
}

/// A resource name is `<domain>/<name>`; the prefix must carry the domain and the slash
/// so that appending a short name yields one.
fn parse_resource_prefix(prefix: &str) -> Result<String, String> {
    match prefix.split_once('/') {
        Some((domain, _)) if !domain.is_empty() && !prefix[domain.len() + 1..].contains('/') => {
            Ok(prefix.to_owned())
        }
        _ => Err("must look like <domain>/<name prefix>, e.g. fournos/gpu-".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_runtime::testing::{assert_env_vars, parse_without_env};

    fn parse(argv: &[&str]) -> Result<KueueSyncConfig, clap::Error> {
        Ok(parse_without_env::<Args>(argv)?.config)
    }

    #[test]
    fn defaults_match_the_design_table() {
        assert_eq!(
            parse(&[]).unwrap(),
            KueueSyncConfig {
                cluster_queue_name: "fournos-queue".into(),
                gpu_resource_prefix: "fournos/gpu-".into(),
                cluster_slots: 100,
                pool_label_keys: PoolLabelKeys(vec!["fournos.dev/pool".into()]),
                execution_namespace: "psap-automation".into(),
            }
        );
    }

    #[test]
    fn env_var_names_are_the_contract() {
        assert_env_vars::<Args>(&[
            ("cluster_queue_name", "HEARTH_KUEUE_CLUSTER_QUEUE_NAME"),
            ("gpu_resource_prefix", "HEARTH_GPU_RESOURCE_PREFIX"),
            ("cluster_slots", "HEARTH_CLUSTER_SLOTS"),
            ("pool_label_keys", "HEARTH_POOL_LABEL_KEYS"),
            ("execution_namespace", "HEARTH_EXECUTION_NAMESPACE"),
            ("namespace", "HEARTH_NAMESPACE"),
        ]);
    }

    #[test]
    fn flags_override_defaults() {
        let config = parse(&[
            "--cluster-queue-name=q",
            "--gpu-resource-prefix=example.com/accel-",
            "--cluster-slots=10",
        ])
        .unwrap();
        assert_eq!(config.cluster_queue_name, "q");
        assert_eq!(config.gpu_resource_prefix, "example.com/accel-");
        assert_eq!(config.cluster_slots, 10);
    }

    #[test]
    fn pool_label_keys_are_a_comma_list() {
        let keys = |argv: &str| parse(&[argv]).unwrap().pool_label_keys.0;
        assert_eq!(
            keys("--pool-label-keys=fournos.dev/pool, example.com/team,gpu-tier"),
            ["fournos.dev/pool", "example.com/team", "gpu-tier"]
        );
        assert!(keys("--pool-label-keys=").is_empty());
        assert_eq!(keys("--pool-label-keys=a,b,c,d,e,f,g").len(), 7);
    }

    #[test]
    fn bad_values_are_rejected() {
        for argv in [
            "--gpu-resource-prefix=gpu-",
            "--gpu-resource-prefix=/gpu-",
            "--gpu-resource-prefix=a/b/",
            "--cluster-slots=0",
            "--pool-label-keys=fournos.dev/cluster",
            "--pool-label-keys=a,a",
            "--pool-label-keys=not a key",
            "--pool-label-keys=a,b,c,d,e,f,g,h",
        ] {
            assert!(parse(&[argv]).is_err(), "{argv}");
        }
    }
}
